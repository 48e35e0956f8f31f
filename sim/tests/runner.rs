//! The runner keeps the machine contract: virtual time jumps to each wakeup, outputs come out in
//! order and stamped, and a broken contract is an error rather than a hang.

use std::collections::VecDeque;
use std::time::Duration;

use weft_proto::core::{Machine, Timestamp, Wakeup};
use weft_sim::{Runner, SimError};

/// A machine that beats every `period` once started; `stuck` makes it forget to move its deadline.
struct Heartbeat {
    period: Duration,
    next: Option<Timestamp>,
    out: VecDeque<Timestamp>,
    stuck: bool,
}

impl Heartbeat {
    fn new(period: Duration, stuck: bool) -> Self {
        Self {
            period,
            next: None,
            out: VecDeque::new(),
            stuck,
        }
    }
}

impl Machine for Heartbeat {
    type Input = ();
    type Output = Timestamp;

    fn handle(&mut self, now: Timestamp, (): ()) {
        self.next = Some(now + self.period);
    }

    fn poll(&mut self) -> Option<Timestamp> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.next.map(|at| Wakeup::new(at, "heartbeat"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        match self.next {
            Some(at) if at <= now => {
                self.out.push_back(now);
                if !self.stuck {
                    self.next = Some(now + self.period);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn time_jumps_to_each_wakeup_and_stops_at_the_horizon() {
    let start = Timestamp::from_secs(1_000);
    let mut r = Runner::new(
        Heartbeat::new(Duration::from_millis(250), false),
        start,
        100,
    );
    let mut seen = Vec::new();
    let mut sink = |at: Timestamp, beat: Timestamp| seen.push((at, beat));
    r.input((), &mut sink).unwrap();
    r.run_until(start + Duration::from_millis(1_100), &mut sink)
        .unwrap();
    let want: Vec<_> = (1..=4)
        .map(|i| start + Duration::from_millis(250 * i))
        .collect();
    assert_eq!(seen.iter().map(|(at, _)| *at).collect::<Vec<_>>(), want);
    assert!(
        seen.iter().all(|(at, beat)| at == beat),
        "outputs are stamped with the time they came out"
    );
    assert_eq!(r.now(), start + Duration::from_millis(1_100));
}

#[test]
fn a_deadline_that_does_not_advance_is_an_error_not_a_hang() {
    let mut r = Runner::new(
        Heartbeat::new(Duration::from_secs(1), true),
        Timestamp::ZERO,
        1_000,
    );
    let mut sink = |_: Timestamp, _: Timestamp| {};
    r.input((), &mut sink).unwrap();
    let err = r
        .run_until(Timestamp::from_secs(60), &mut sink)
        .unwrap_err();
    assert_eq!(
        err,
        SimError::DeadlineDoesNotAdvance {
            now: Timestamp::from_secs(1),
            reason: "heartbeat"
        }
    );
}

#[test]
fn the_step_limit_bounds_a_run() {
    let mut r = Runner::new(
        Heartbeat::new(Duration::from_millis(1), false),
        Timestamp::ZERO,
        10,
    );
    let mut sink = |_: Timestamp, _: Timestamp| {};
    r.input((), &mut sink).unwrap();
    let err = r.run_until(Timestamp::from_secs(1), &mut sink).unwrap_err();
    assert_eq!(err, SimError::StepLimit { steps: 10 });
}
