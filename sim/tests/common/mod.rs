//! What the scenario tests share: a run that must pass, the replay check and the partition
//! sweep's totals, the same for every scenario.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use weft_sim::link::LinkStats;
use weft_sim::scenario::{Sweep, Violation};

/// The report of a run that must pass; a violation fails the test with the report up to it.
pub(crate) fn passes<R: fmt::Display>(run: Result<R, Box<Violation<R>>>) -> R {
    run.unwrap_or_else(|v| panic!("{v}\n{}", v.report))
}

/// Runs `scenario` twice with a trace and once without: the same seed gives the same trace byte
/// for byte and the same report but for `wall` (which `wall` reaches into), and tracing does not
/// change the run. Answers the report, `wall` zeroed.
pub(crate) fn replays_exactly<S, R: fmt::Display + fmt::Debug + PartialEq>(
    scenario: &S,
    run: impl for<'a> Fn(&'a S, Option<&'a mut dyn Write>) -> Result<R, Box<Violation<R>>>,
    wall: impl Fn(&mut R) -> &mut Duration,
) -> R {
    let once = |trace: Option<&mut Vec<u8>>| {
        // Reborrowed for this run alone, so the trace need not outlive the scenario.
        let mut r = passes(run(scenario, trace.map(|t| -> &mut dyn Write { t })));
        *wall(&mut r) = Duration::ZERO;
        r
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let a = once(Some(&mut ta));
    let b = once(Some(&mut tb));
    assert_eq!(a, b);
    assert!(!ta.is_empty());
    assert!(ta == tb, "traces differ");
    assert_eq!(a, once(None), "tracing changed the run");
    a
}

/// Asserts that every seed of a sweep run with frequent partitions passed, and that partitions
/// did what they are for: at least one a seed, streams cut and dials refused across them.
pub(crate) fn assert_partitions_cut_and_refused<R: fmt::Display>(
    sweep: &Sweep<R>,
    link: impl Fn(&R) -> &LinkStats,
) {
    assert!(sweep.passed(), "{sweep}");
    let mut total = LinkStats::default();
    total.partitions = sweep.total(|r| link(r).partitions);
    total.partition_cuts = sweep.total(|r| link(r).partition_cuts);
    total.partition_refusals = sweep.total(|r| link(r).partition_refusals);
    assert!(
        total.partitions >= sweep.reports.len() as u64
            && total.partition_cuts > 0
            && total.partition_refusals > 0,
        "{total:?}"
    );
}
