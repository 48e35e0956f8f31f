//! The `airc-realms` scenario at small size over many seeds: every AIRC delivery invariant holds
//! through link drops, crashes, restarts, latency spikes, stalled acks and the link layer's
//! faults (latency per frame, loss, bandwidth, partitions that heal), and a seed replays exactly.

use std::time::Duration;

use weft_sim::airc::{Scenario, run};
use weft_sim::scenario::sweep;

mod common;
use common::{assert_partitions_cut_and_refused, passes, replays_exactly};

/// Seeds swept by the test suite; `weft sim airc-realms --seed S` replays any one of them.
const SEEDS: u64 = 300;

/// Seeds swept under heavy faults.
const HEAVY_SEEDS: u64 = 60;

/// Seeds run with frequent partitions, and with heavy loss.
const PARTITION_SEEDS: u64 = 30;

#[test]
fn every_invariant_holds_over_many_seeds() {
    let s = sweep(0..SEEDS, |seed| run(&Scenario::small(seed), None));
    assert!(s.passed(), "{s}");
    // The sweep is only worth something if the faults actually happened.
    let totals = [
        s.total(|r| r.sent),
        s.total(|r| r.crashes),
        s.total(|r| r.link_drops),
    ];
    assert!(totals.iter().all(|&t| t > 0), "{totals:?}");
    let link = [
        s.total(|r| r.link.partitions),
        s.total(|r| r.link.partition_cuts),
        s.total(|r| r.link.delayed_by_loss),
        s.total(|r| r.link.queued),
    ];
    assert!(
        link.iter().all(|&t| t > 0),
        "partitions, cuts, delayed by loss, queued: {link:?}"
    );
    // AIRC's links are streams and no AIRC party sends a frame twice by itself.
    assert_eq!(s.total(|r| r.link.duplicates), 0);
}

/// Partitions every 8 s on average, cutting servers and clients off: no frame crosses one
/// (nothing-crosses-a-partition), dials across fail, and once the last heals nothing acked is
/// lost and every message is answered.
#[test]
fn a_partition_keeps_its_sides_apart_until_it_heals_and_nothing_acked_is_lost() {
    let s = sweep(0..PARTITION_SEEDS, |seed| {
        let mut sc = Scenario::small(seed);
        sc.faults.link.partition_every = Some(Duration::from_secs(8));
        run(&sc, None)
    });
    assert_partitions_cut_and_refused(&s, |r| &r.link);
}

/// One frame in five lost at least once: each loss holds its stream up by a retransmission
/// timeout, and the frames behind it wait (the stream stays ordered), but no frame is lost,
/// so every invariant, the ordered acks included, holds.
#[test]
fn loss_delays_frames_but_loses_none_and_every_invariant_holds() {
    let s = sweep(0..PARTITION_SEEDS, |seed| {
        let mut sc = Scenario::small(seed);
        sc.faults.link.loss_permille = 200;
        run(&sc, None)
    });
    assert!(s.passed(), "{s}");
    for r in &s.reports {
        assert!(r.link.retransmissions >= r.link.delayed_by_loss);
    }
    assert!(s.total(|r| r.link.delayed_by_loss) > 0);
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    let scenario = Scenario::small(7);
    replays_exactly(&scenario, run, |r| &mut r.wall);
}

#[test]
fn different_seeds_give_different_runs() {
    let mut a = passes(run(&Scenario::small(1), None));
    let mut b = passes(run(&Scenario::small(2), None));
    a.wall = Duration::ZERO;
    b.wall = Duration::ZERO;
    b.seed = a.seed;
    assert_ne!(a, b);
}

/// Many more faults per minute, over fewer seeds to stay quick; longer sweeps run from the
/// command line (`weft sim airc-realms --seeds N`).
#[test]
fn every_invariant_holds_under_heavy_faults() {
    let s = sweep(0..HEAVY_SEEDS, |seed| {
        let mut sc = Scenario::small(seed);
        sc.clients = 8;
        sc.messages = 80;
        sc.faults.link_drop_every = Some(Duration::from_secs(2));
        sc.faults.crash_every = Some(Duration::from_secs(8));
        sc.faults.stall_permille = 250;
        sc.faults.spike_permille = 50;
        run(&sc, None)
    });
    assert!(s.passed(), "{s}");
}
