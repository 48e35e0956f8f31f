//! The shell every scenario runs in, written once: the virtual clock's origin, the event queue,
//! the JSON-lines trace, the first violated invariant and the run that turns a scenario's world
//! into a report or a [`Violation`]. A scenario ([`crate::airc`], [`crate::minca`]) brings only
//! its machines, its faults and its invariants. [`sweep`] runs one over many seeds, [`replay`]
//! checks that a run is the same run every time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io::Write;
use std::ops::Range;
use std::time::{Duration, Instant};

use serde_json::Value;
use weft_proto::core::Timestamp;

mod queue;

pub(crate) use queue::Queue;

/// When every scenario's clock starts (Unix time), so signed time fields look like real ones.
pub const START: Timestamp = Timestamp::from_secs(1_790_380_000);

/// The first invariant a run broke, with what is needed to replay it. `R` is the scenario's
/// report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation<R> {
    /// The invariant's name, as the scenario's module docs list them.
    pub invariant: &'static str,
    /// What happened.
    pub detail: String,
    /// The seed that reproduces it.
    pub seed: u64,
    /// Virtual time since the start of the run.
    pub at: Duration,
    /// The run up to that point.
    pub report: R,
}

impl<R> fmt::Display for Violation<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: invariant {} violated at {:.3}s virtual: {}",
            self.seed,
            self.invariant,
            self.at.as_secs_f64(),
            self.detail
        )
    }
}

impl<R: fmt::Debug> std::error::Error for Violation<R> {}

/// What a sweep over seeds found ([`sweep`]): the report of every seed that passed and the
/// violation of every one that did not, each in seed order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep<R> {
    /// The reports of the seeds that passed.
    pub reports: Vec<R>,
    /// The violations of the seeds that failed.
    pub violations: Vec<Violation<R>>,
}

impl<R> Sweep<R> {
    /// Whether every seed passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The sum of `count` over the reports of the seeds that passed (saturating).
    pub fn total(&self, count: impl Fn(&R) -> u64) -> u64 {
        self.reports
            .iter()
            .fold(0, |sum, r| sum.saturating_add(count(r)))
    }
}

/// How many seeds failed, then each violation with the report up to it.
impl<R: fmt::Display> fmt::Display for Sweep<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs = self.reports.len() + self.violations.len();
        write!(f, "{} of {runs} seeds failed", self.violations.len())?;
        for v in &self.violations {
            write!(f, "\n{v}\n{}", v.report)?;
        }
        Ok(())
    }
}

/// Runs `one` for every seed in `seeds` and gathers what each gave. It goes on past a violation,
/// so a sweep names every seed that fails, not only the first (each one replays alone from its
/// seed). `one` is a scenario's `run`, with whatever the sweep changes in its scenario.
pub fn sweep<R>(
    seeds: Range<u64>,
    mut one: impl FnMut(u64) -> Result<R, Box<Violation<R>>>,
) -> Sweep<R> {
    let mut sweep = Sweep {
        reports: Vec::new(),
        violations: Vec::new(),
    };
    for seed in seeds {
        match one(seed) {
            Ok(r) => sweep.reports.push(r),
            Err(v) => sweep.violations.push(*v),
        }
    }
    sweep
}

/// How runs of one scenario failed to be the same run ([`replay`]). The simulator promises they
/// never do: the same seed and scenario give the same trace and the same report, byte for byte.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotReplayed<R> {
    /// A run broke an invariant (the first run that did).
    Violation(Box<Violation<R>>),
    /// The two traced runs reported differently (the wall time aside): the first, then the second.
    Reports(R, R),
    /// The traced runs wrote nothing.
    NoTrace,
    /// The two traces differ, first at this byte.
    Traces(usize),
    /// The run without a trace reported otherwise than the traced ones (the traced report first).
    Tracing(R, R),
}

impl<R: fmt::Debug> fmt::Display for NotReplayed<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Violation(v) => write!(f, "{v}"),
            Self::Reports(a, b) => write!(
                f,
                "the same run reported twice differently:
{a:?}
{b:?}"
            ),
            Self::NoTrace => write!(f, "the run wrote no trace"),
            Self::Traces(at) => write!(f, "the same run's traces differ from byte {at}"),
            Self::Tracing(a, b) => write!(
                f,
                "tracing changed the run:
{a:?}
{b:?}"
            ),
        }
    }
}

impl<R: fmt::Debug> std::error::Error for NotReplayed<R> {}

/// Runs `scenario` twice with a trace and once without, and answers the report (with `wall`, the
/// one field that may differ between runs, zeroed) if the traces are the same byte for byte, the
/// reports equal, and tracing changed nothing. `run` is a scenario's `run`; `wall` reaches the wall
/// time in its report.
pub fn replay<S, R: PartialEq>(
    scenario: &S,
    run: impl for<'a> Fn(&'a S, Option<&'a mut dyn Write>) -> Result<R, Box<Violation<R>>>,
    wall: impl Fn(&mut R) -> &mut Duration,
) -> Result<R, NotReplayed<R>> {
    let once = |trace: Option<&mut Vec<u8>>| {
        // Reborrowed for this run alone, so the trace need not outlive the scenario.
        let mut r = run(scenario, trace.map(|t| -> &mut dyn Write { t }))
            .map_err(NotReplayed::Violation)?;
        *wall(&mut r) = Duration::ZERO;
        Ok(r)
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let a = once(Some(&mut ta))?;
    let b = once(Some(&mut tb))?;
    if a != b {
        return Err(NotReplayed::Reports(a, b));
    }
    if ta.is_empty() {
        return Err(NotReplayed::NoTrace);
    }
    if ta != tb {
        let at = ta.iter().zip(&tb).take_while(|(x, y)| x == y).count();
        return Err(NotReplayed::Traces(at));
    }
    let untraced = once(None)?;
    if untraced != a {
        return Err(NotReplayed::Tracing(a, untraced));
    }
    Ok(a)
}

/// What a step of a world returns: nothing, or the invariant it broke and how.
pub(crate) type Check = Result<(), (&'static str, String)>;

/// The times every report carries, set by [`run`] when the world stops.
pub(crate) trait Timed {
    /// Records the virtual time the run covered and the wall-clock time it took.
    fn set_times(&mut self, virtual_duration: Duration, wall: Duration);
}

/// Writes the last line of a report's text form: the virtual and the wall-clock time.
pub(crate) fn fmt_times(
    f: &mut fmt::Formatter<'_>,
    virtual_duration: Duration,
    wall: Duration,
) -> fmt::Result {
    write!(
        f,
        "virtual {:.3}s, wall {:.3}s",
        virtual_duration.as_secs_f64(),
        wall.as_secs_f64()
    )
}

/// A scenario's network of machines, as [`run`] drives it.
pub(crate) trait World {
    /// What a run reports.
    type Report: Timed + Clone;
    /// Runs to the end, stopping at the first broken invariant.
    fn run(&mut self) -> Check;
    /// The virtual time reached.
    fn now(&self) -> Timestamp;
    /// The report so far.
    fn report(&mut self) -> &mut Self::Report;
}

/// Runs `world` to its end and answers its report, or the first invariant it broke with the
/// `seed` that replays it and the report up to then.
pub(crate) fn run<W: World>(
    seed: u64,
    mut world: W,
) -> Result<W::Report, Box<Violation<W::Report>>> {
    let wall = Instant::now();
    let result = world.run();
    let at = world.now().saturating_duration_since(START);
    world.report().set_times(at, wall.elapsed());
    match result {
        Ok(()) => Ok(world.report().clone()),
        Err((invariant, detail)) => Err(Box::new(Violation {
            invariant,
            detail,
            seed,
            at,
            report: world.report().clone(),
        })),
    }
}

/// The JSON-lines trace of a run, or nothing when none was asked for.
pub(crate) struct Trace<'a> {
    out: Option<&'a mut dyn Write>,
}

impl<'a> Trace<'a> {
    /// A trace into `out`, if given.
    pub(crate) fn new(out: Option<&'a mut dyn Write>) -> Self {
        Self { out }
    }

    /// Whether lines are being written, so a caller can skip building an expensive one.
    pub(crate) fn is_on(&self) -> bool {
        self.out.is_some()
    }

    /// Writes `line` (a JSON object) with `"t"`, the virtual milliseconds since [`START`].
    pub(crate) fn line(&mut self, now: Timestamp, mut line: Value) {
        let Some(w) = self.out.as_mut() else {
            return;
        };
        line["t"] = now.as_millis().saturating_sub(START.as_millis()).into();
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        // A trace that cannot be written is not worth failing the run over; the caller sees the
        // short file.
        if w.write_all(&bytes).is_err() {
            self.out = None;
        }
    }
}

/// How many filed wakeups [`Wakeups`] lets pile up per machine, counting ones since moved or
/// taken, before it sweeps those out. A simulator tuning, no protocol value: the sweep costs a
/// pass over the machines, so it should come seldom, and what piles up is 16 bytes a wakeup.
const WAKEUPS_PER_SLOT: usize = 4;

/// Each machine's next wakeup, kept ordered so the run never asks every machine: the earliest
/// first, the lower slot on a tie. A slot is the machine's number in its world.
///
/// A machine's wakeup moves far more often than one comes due (most inputs push a deadline
/// back), so a move only files the new time in a heap; the old one stays there, stale, until
/// it reaches the top and is thrown away, or a sweep drops it. An ordered set paid a removal
/// and an insertion per move.
pub(crate) struct Wakeups {
    /// Wakeups filed, earliest first: one counts while its slot is still armed at its time.
    order: BinaryHeap<Reverse<(Timestamp, usize)>>,
    armed: Vec<Option<Timestamp>>,
}

impl Wakeups {
    /// No wakeups, for machines numbered `0..slots`.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            order: BinaryHeap::new(),
            armed: vec![None; slots],
        }
    }

    /// Files `slot`'s wakeup at `next` (none: it waits only for input). Called after every
    /// change to the machine, so the order always agrees with asking each machine afresh; most
    /// changes leave the wakeup where it was, and then the order is not touched.
    pub(crate) fn arm(&mut self, slot: usize, next: Option<Timestamp>) {
        let armed = &mut self.armed[slot];
        if *armed == next {
            return;
        }
        *armed = next;
        let Some(at) = next else {
            return;
        };
        // Two filings of one slot at one time are one wakeup: whichever is taken first
        // disarms the slot, and the other is stale from then on.
        self.order.push(Reverse((at, slot)));
        if self.order.len() > WAKEUPS_PER_SLOT * self.armed.len().max(16) {
            self.sweep();
        }
    }

    /// The earliest wakeup and its slot.
    pub(crate) fn first(&mut self) -> Option<(Timestamp, usize)> {
        self.drop_stale();
        self.order.peek().map(|w| w.0)
    }

    /// Takes the earliest wakeup; its slot has none until armed again.
    pub(crate) fn pop_first(&mut self) -> Option<(Timestamp, usize)> {
        self.drop_stale();
        let Reverse((at, slot)) = self.order.pop()?;
        self.armed[slot] = None;
        Some((at, slot))
    }

    /// Throws away stale wakeups at the top, so it holds a live one (or nothing).
    fn drop_stale(&mut self) {
        while let Some(&Reverse((at, slot))) = self.order.peek() {
            if self.armed[slot] == Some(at) {
                return;
            }
            self.order.pop();
        }
    }

    /// Files the live wakeups afresh, without the stale ones, in the heap's own buffer (a fresh
    /// one was an allocation the size of the heap, and the old one's pages handed back).
    fn sweep(&mut self) {
        let mut order = std::mem::take(&mut self.order).into_vec();
        order.clear();
        let live = self.armed.iter().enumerate();
        order.extend(live.filter_map(|(slot, at)| at.map(|at| Reverse((at, slot)))));
        self.order = BinaryHeap::from(order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stand-in's report: what it was told to say, and its wall time.
    type Counted = (u64, Duration);

    /// A stand-in for a scenario's `run` whose report and trace come from how many times it has
    /// run (`calls`), so each way of not being the same run can be made on purpose.
    fn counted_run(
        calls: &std::cell::Cell<u64>,
        shape: fn(u64, bool) -> (u64, &'static str),
        trace: Option<&mut dyn Write>,
    ) -> Result<Counted, Box<Violation<Counted>>> {
        let call = calls.get();
        calls.set(call + 1);
        let (report, line) = shape(call, trace.is_some());
        if let Some(t) = trace {
            t.write_all(line.as_bytes())
                .expect("a Vec takes every write");
        }
        if report == u64::MAX {
            return Err(Box::new(Violation {
                invariant: "made-up",
                detail: "on purpose".into(),
                seed: 7,
                at: Duration::ZERO,
                report: (report, Duration::ZERO),
            }));
        }
        // The wall time differs on every run, and must not count.
        Ok((report, Duration::from_millis(call)))
    }

    #[test]
    fn a_replay_is_the_same_run_or_says_how_it_was_not() {
        fn wall(r: &mut Counted) -> &mut Duration {
            &mut r.1
        }
        let check = |shape: fn(u64, bool) -> (u64, &'static str)| {
            let calls = std::cell::Cell::new(0);
            replay(
                &(),
                |_: &(), t: Option<&mut dyn Write>| counted_run(&calls, shape, t),
                wall,
            )
        };
        assert_eq!(check(|_, _| (1, "{}\n")), Ok((1, Duration::ZERO)));
        assert_eq!(
            check(|call, _| (call, "{}\n")),
            Err(NotReplayed::Reports(
                (0, Duration::ZERO),
                (1, Duration::ZERO)
            ))
        );
        assert_eq!(check(|_, _| (1, "")), Err(NotReplayed::NoTrace));
        assert_eq!(
            check(|call, _| (1, if call == 0 { "{\"a\":1}" } else { "{\"a\":2}" })),
            Err(NotReplayed::Traces(5))
        );
        assert_eq!(
            check(|_, traced| (u64::from(traced), "{}\n")),
            Err(NotReplayed::Tracing(
                (1, Duration::ZERO),
                (0, Duration::ZERO)
            ))
        );
        let Err(NotReplayed::Violation(v)) = check(|_, _| (u64::MAX, "{}\n")) else {
            panic!("a violation is answered as one");
        };
        assert_eq!((v.invariant, v.seed), ("made-up", 7));
    }

    #[test]
    fn the_queue_gives_the_earliest_first_and_ties_in_the_order_queued() {
        let mut q = Queue::new();
        let t = |ms| START + Duration::from_millis(ms);
        for (at, ev) in [(5, "e"), (1, "a"), (5, "f"), (3, "c"), (1, "b")] {
            q.push(t(at), ev);
        }
        assert_eq!(q.next_at(), Some(t(1)));
        let mut got = Vec::new();
        while let Some((at, ev)) = q.pop() {
            got.push((at, ev));
            if ev == "a" {
                // A slot freed by a taken event is reused, and order still holds.
                q.push(t(3), "d");
                q.push(t(1), "b2");
            }
        }
        let order: Vec<_> = got.iter().map(|(_, ev)| *ev).collect();
        assert_eq!(order, ["a", "b", "b2", "c", "d", "e", "f"]);
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(q.next_at(), None);
    }

    #[test]
    fn wakeups_keep_each_machines_latest_time_earliest_first() {
        let t = |ms| START + Duration::from_millis(ms);
        let mut w = Wakeups::new(3);
        w.arm(2, Some(t(5)));
        w.arm(0, Some(t(7)));
        w.arm(1, Some(t(5)));
        assert_eq!(w.first(), Some((t(5), 1)), "the lower slot first on a tie");
        w.arm(1, Some(t(9)));
        w.arm(2, None);
        assert_eq!(
            w.first(),
            Some((t(7), 0)),
            "a moved or cleared wakeup is gone"
        );
        assert_eq!(w.pop_first(), Some((t(7), 0)));
        w.arm(0, Some(t(7)));
        assert_eq!(
            w.pop_first(),
            Some((t(7), 0)),
            "a popped slot can be armed again"
        );
        assert_eq!(w.pop_first(), Some((t(9), 1)));
        assert_eq!(w.pop_first(), None);
    }

    #[test]
    fn a_wakeup_moved_away_and_back_comes_once() {
        let t = |ms| START + Duration::from_millis(ms);
        let mut w = Wakeups::new(2);
        w.arm(0, Some(t(5)));
        w.arm(0, Some(t(8)));
        w.arm(0, Some(t(5)));
        w.arm(1, Some(t(6)));
        assert_eq!(w.pop_first(), Some((t(5), 0)));
        assert_eq!(w.pop_first(), Some((t(6), 1)));
        assert_eq!(w.pop_first(), None, "the stale filings of slot 0 are gone");
    }

    #[test]
    fn many_moves_keep_the_order_right_across_sweeps() {
        let t = |ms| START + Duration::from_millis(ms);
        let mut w = Wakeups::new(3);
        for ms in 0..1_000 {
            w.arm(ms as usize % 3, Some(t(1_000 - ms)));
        }
        assert!(w.order.len() <= WAKEUPS_PER_SLOT * 16 + 1);
        assert_eq!(w.pop_first(), Some((t(1), 0)));
        assert_eq!(w.pop_first(), Some((t(2), 2)));
        assert_eq!(w.pop_first(), Some((t(3), 1)));
        assert_eq!(w.pop_first(), None);
    }
}
