//! What the scenario tests share: a run that must pass, the replay check and the partition
//! sweep's totals, the same for every scenario.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use weft_sim::link::LinkStats;
use weft_sim::scenario::{NotReplayed, Sweep, Violation, replay};

/// The report of a run that must pass; a violation fails the test with the report up to it.
pub(crate) fn passes<R: fmt::Display>(run: Result<R, Box<Violation<R>>>) -> R {
    run.unwrap_or_else(|v| panic!("{v}\n{}", v.report))
}

/// [`replay`] that must succeed: the same seed gives the same trace byte for byte and the same
/// report but for `wall`, and tracing does not change the run. Answers the report, `wall` zeroed.
pub(crate) fn replays_exactly<S, R: fmt::Display + fmt::Debug + PartialEq>(
    scenario: &S,
    run: impl for<'a> Fn(&'a S, Option<&'a mut dyn Write>) -> Result<R, Box<Violation<R>>>,
    wall: impl Fn(&mut R) -> &mut Duration,
) -> R {
    match replay(scenario, run, wall) {
        Ok(r) => r,
        Err(NotReplayed::Violation(v)) => panic!("{v}\n{}", v.report),
        Err(e) => panic!("{e}"),
    }
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
