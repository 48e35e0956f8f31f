//! The `airc-realms` scenario at small size over many seeds: every AIRC delivery invariant holds
//! through link drops, crashes, restarts, latency spikes, stalled acks and the link layer's
//! faults (latency per frame, loss, bandwidth, partitions that heal), and a seed replays exactly.

use std::time::Duration;

use weft_sim::airc::{Scenario, run};
use weft_sim::link::LinkStats;

/// Seeds swept by the test suite; `weft sim airc-realms --seed S` replays any one of them.
const SEEDS: u64 = 300;

/// Seeds swept under heavy faults.
const HEAVY_SEEDS: u64 = 60;

/// Seeds run with frequent partitions, and with heavy loss.
const PARTITION_SEEDS: u64 = 30;

#[test]
fn every_invariant_holds_over_many_seeds() {
    let mut failures = Vec::new();
    let mut totals = [0u64; 4];
    let mut link = LinkStats::default();
    for seed in 0..SEEDS {
        match run(&Scenario::small(seed), None) {
            Ok(r) => {
                totals[0] += r.sent;
                totals[1] += r.crashes;
                totals[2] += r.link_drops;
                totals[3] += r.redelivered;
                link.partitions += r.link.partitions;
                link.partition_cuts += r.link.partition_cuts;
                link.delayed_by_loss += r.link.delayed_by_loss;
                link.queued += r.link.queued;
                link.duplicates += r.link.duplicates;
            }
            Err(v) => failures.push(v.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The sweep is only worth something if the faults actually happened.
    assert!(
        totals[0] > 0 && totals[1] > 0 && totals[2] > 0,
        "{totals:?}"
    );
    assert!(
        link.partitions > 0
            && link.partition_cuts > 0
            && link.delayed_by_loss > 0
            && link.queued > 0,
        "{link:?}"
    );
    // AIRC's links are streams and no AIRC party sends a frame twice by itself.
    assert_eq!(link.duplicates, 0);
}

/// Partitions every 8 s on average, cutting servers and clients off: no frame crosses one
/// (nothing-crosses-a-partition), dials across fail, and once the last heals nothing acked is
/// lost and every message is answered.
#[test]
fn a_partition_keeps_its_sides_apart_until_it_heals_and_nothing_acked_is_lost() {
    let mut total = LinkStats::default();
    for seed in 0..PARTITION_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.faults.link.partition_every = Some(Duration::from_secs(8));
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        total.partitions += r.link.partitions;
        total.partition_cuts += r.link.partition_cuts;
        total.partition_refusals += r.link.partition_refusals;
    }
    assert!(
        total.partitions >= PARTITION_SEEDS
            && total.partition_cuts > 0
            && total.partition_refusals > 0,
        "{total:?}"
    );
}

/// One frame in five lost at least once: each loss holds its stream up by a retransmission
/// timeout, and the frames behind it wait (the stream stays ordered), but no frame is lost,
/// so every invariant, the ordered acks included, holds.
#[test]
fn loss_delays_frames_but_loses_none_and_every_invariant_holds() {
    let mut delayed = 0;
    for seed in 0..PARTITION_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.faults.link.loss_permille = 200;
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        delayed += r.link.delayed_by_loss;
        assert!(r.link.retransmissions >= r.link.delayed_by_loss);
    }
    assert!(delayed > 0);
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    let scenario = Scenario::small(7);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut a = run(&scenario, Some(&mut ta)).expect("seed 7 passes");
    let mut b = run(&scenario, Some(&mut tb)).expect("seed 7 passes");
    a.wall = Duration::ZERO;
    b.wall = Duration::ZERO;
    assert_eq!(a, b);
    assert!(!ta.is_empty());
    assert!(ta == tb, "traces differ");
    // Tracing does not change the run.
    let mut c = run(&scenario, None).expect("seed 7 passes");
    c.wall = Duration::ZERO;
    assert_eq!(a, c);
}

#[test]
fn different_seeds_give_different_runs() {
    let mut a = run(&Scenario::small(1), None).expect("seed 1 passes");
    let mut b = run(&Scenario::small(2), None).expect("seed 2 passes");
    a.wall = Duration::ZERO;
    b.wall = Duration::ZERO;
    b.seed = a.seed;
    assert_ne!(a, b);
}

/// Many more faults per minute, over fewer seeds to stay quick; longer sweeps run from the
/// command line (`weft sim airc-realms --seeds N`).
#[test]
fn every_invariant_holds_under_heavy_faults() {
    let mut failures = Vec::new();
    for seed in 0..HEAVY_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.clients = 8;
        sc.messages = 80;
        sc.faults.link_drop_every = Some(Duration::from_secs(2));
        sc.faults.crash_every = Some(Duration::from_secs(8));
        sc.faults.stall_permille = 250;
        sc.faults.spike_permille = 50;
        if let Err(v) = run(&sc, None) {
            failures.push(v.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
