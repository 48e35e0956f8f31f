//! The `airc-realms` scenario at small size over many seeds: every AIRC delivery invariant holds
//! through link drops, crashes, restarts, latency spikes and stalled acks, and a seed replays
//! exactly.

use std::time::Duration;

use weft_sim::airc::{Scenario, run};

/// Seeds swept by the test suite; `weft sim airc-realms --seed S` replays any one of them.
const SEEDS: u64 = 300;

/// Seeds swept under heavy faults.
const HEAVY_SEEDS: u64 = 60;

#[test]
fn every_invariant_holds_over_many_seeds() {
    let mut failures = Vec::new();
    let mut totals = [0u64; 4];
    for seed in 0..SEEDS {
        match run(&Scenario::small(seed), None) {
            Ok(r) => {
                totals[0] += r.sent;
                totals[1] += r.crashes;
                totals[2] += r.link_drops;
                totals[3] += r.redelivered;
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
