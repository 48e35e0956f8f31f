//! The `minca-meetup` scenario at small size over many seeds: nodes meet through relays that
//! restart, sockets and peer connections that drop, and sleeps, and still end in a full mesh with
//! every invariant holding; a seed replays exactly.

use std::time::Duration;

use weft_sim::minca::{SCALE_SPACE_NODES, Scenario, run};

/// Seeds swept by the test suite; `weft sim minca-meetup --seed S` replays any one of them.
const SEEDS: u64 = 256;

#[test]
fn every_invariant_holds_over_many_seeds() {
    let mut failures = Vec::new();
    let (mut drops, mut restarts, mut sleeps) = (0, 0, 0);
    for seed in 0..SEEDS {
        match run(&Scenario::small(seed), None) {
            Ok(r) => {
                drops += r.drops;
                restarts += r.relay_restarts;
                sleeps += r.sleeps;
            }
            Err(v) => failures.push(format!("{v}\n{}", v.report)),
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
        drops > 0 && restarts > 0 && sleeps > 0,
        "{drops} {restarts} {sleeps}"
    );
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    let scenario = Scenario::small(3);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut a = run(&scenario, Some(&mut ta)).expect("seed 3 passes");
    let mut b = run(&scenario, Some(&mut tb)).expect("seed 3 passes");
    a.wall = Duration::ZERO;
    b.wall = Duration::ZERO;
    assert_eq!(a, b);
    assert!(!ta.is_empty());
    assert!(ta == tb, "traces differ");
}

#[test]
fn a_relay_connects_the_first_pair_and_introductions_reach_the_rest() {
    // Eight nodes: a full mesh needs introductions (signals over the mesh, §8) as well as the
    // relay's rendezvous.
    let r = run(&Scenario::new(5), None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
    assert!(r.full_mesh_at.is_some(), "{r}");
    assert_eq!(r.live_delivered, 8 * 7, "{r}");
}

/// The shape the scale run uses (spaces of `SCALE_SPACE_NODES` nodes side by side on shared
/// relays), at small size: every space meets in a full mesh on its own, and nothing crosses
/// between spaces (each live message reaches exactly the other nodes of its sender's space).
#[test]
fn spaces_side_by_side_each_meet_in_a_full_mesh() {
    let spaces = 2;
    let nodes = spaces * SCALE_SPACE_NODES;
    let sc = Scenario {
        nodes,
        spaces,
        ..Scenario::small(11)
    };
    let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
    assert!(r.full_mesh_at.is_some(), "{r}");
    assert_eq!(
        r.live_delivered,
        (nodes * (SCALE_SPACE_NODES - 1)) as u64,
        "{r}"
    );
    assert!(r.drops > 0, "{r}");
}
