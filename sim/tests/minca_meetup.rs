//! The `minca-meetup` scenario at small size over many seeds: nodes meet through relays that
//! restart, sockets and peer connections that drop, and sleeps, and still end in a full mesh with
//! every invariant holding, through the link layer's faults too (latency per message, loss,
//! bandwidth, relay mail delivered twice, partitions that heal); a seed replays exactly.

use std::time::Duration;

use weft_sim::link::LinkStats;
use weft_sim::minca::{SCALE_SPACE_NODES, Scenario, run};

/// Seeds swept by the test suite; `weft sim minca-meetup --seed S` replays any one of them.
const SEEDS: u64 = 256;

/// Seeds run with frequent partitions.
const PARTITION_SEEDS: u64 = 24;

/// Seeds run with every relay mail delivered twice.
const DUPLICATE_SEEDS: u64 = 12;

#[test]
fn every_invariant_holds_over_many_seeds() {
    let mut failures = Vec::new();
    let (mut drops, mut restarts, mut sleeps) = (0, 0, 0);
    let mut link = LinkStats::default();
    for seed in 0..SEEDS {
        match run(&Scenario::small(seed), None) {
            Ok(r) => {
                drops += r.drops;
                restarts += r.relay_restarts;
                sleeps += r.sleeps;
                link.partitions += r.link.partitions;
                link.partition_cuts += r.link.partition_cuts;
                link.duplicates += r.link.duplicates;
                link.delayed_by_loss += r.link.delayed_by_loss;
                link.queued += r.link.queued;
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
    assert!(
        link.partitions > 0
            && link.partition_cuts > 0
            && link.duplicates > 0
            && link.delayed_by_loss > 0
            && link.queued > 0,
        "{link:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    // Partitions often enough that the run has some, with every other link fault on.
    let mut scenario = Scenario::small(3);
    scenario.faults.link.partition_every = Some(Duration::from_secs(10));
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut a = run(&scenario, Some(&mut ta)).expect("seed 3 passes");
    let mut b = run(&scenario, Some(&mut tb)).expect("seed 3 passes");
    a.wall = Duration::ZERO;
    b.wall = Duration::ZERO;
    assert_eq!(a, b);
    assert!(!ta.is_empty());
    assert!(ta == tb, "traces differ");
    assert!(a.link.partitions > 0 && a.link.messages > 0, "{a}");
    // Tracing does not change the run.
    let mut c = run(&scenario, None).expect("seed 3 passes");
    c.wall = Duration::ZERO;
    assert_eq!(a, c);
}

/// Partitions every 10 s on average through the faulty phase: every delivery is checked against
/// the partition in force (nothing-crosses-a-partition), streams across are cut and dials across
/// refused, and once the last one heals the nodes still meet in a full mesh.
#[test]
fn a_partition_keeps_its_sides_apart_until_it_heals_and_the_mesh_forms_again() {
    let mut total = LinkStats::default();
    for seed in 0..PARTITION_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.faults.link.partition_every = Some(Duration::from_secs(10));
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        assert!(r.full_mesh_at.is_some(), "{r}");
        assert_eq!(r.live_delivered, 4 * 3, "{r}");
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

/// Every relay mail delivered twice: the second copy of each blob is a replay the rendezvous
/// ignores (§2 rule 3), so no offer is answered twice (one-connection-per-pair), no introduction
/// is passed on twice (introductions-never-loop), and the mesh forms as without duplicates.
#[test]
fn a_relay_delivering_a_blob_twice_is_acted_on_once() {
    let (mut once, mut twice) = (0, 0);
    for seed in 0..DUPLICATE_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.faults.link.duplicate_permille = 0;
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        assert_eq!(r.link.duplicates, 0, "{r}");
        once += r.replays_ignored;
        sc.faults.link.duplicate_permille = 1000;
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        assert!(r.full_mesh_at.is_some(), "{r}");
        assert_eq!(r.live_delivered, 4 * 3, "{r}");
        assert!(r.link.duplicates > 0, "{r}");
        twice += r.replays_ignored;
    }
    // The second copies were seen and set aside as replays.
    assert!(twice > once + DUPLICATE_SEEDS, "{once} {twice}");
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
