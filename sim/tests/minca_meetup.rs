//! The `minca-meetup` scenario at small size over many seeds: nodes meet through relays that
//! restart, sockets and peer connections that drop, and sleeps, and still end in a full mesh with
//! every invariant holding, through the link layer's faults too (latency per message, loss,
//! bandwidth, relay mail delivered twice, partitions that heal); a seed replays exactly.

use std::time::Duration;

use weft_sim::minca::{PartitionRegion, Report, SCALE_SPACE_NODES, Scenario, run};
use weft_sim::scenario::sweep;

mod common;
use common::{assert_partitions_cut_and_refused, passes, replays_exactly};

/// Seeds swept by the test suite; `weft sim minca-meetup --seed S` replays any one of them.
const SEEDS: u64 = 256;

/// Seeds run with frequent partitions.
const PARTITION_SEEDS: u64 = 24;

/// Seeds run with every relay mail delivered twice.
const DUPLICATE_SEEDS: u64 = 12;

/// Seeds run with long sleeps and relay downtimes, often.
const FAULT_END_SEEDS: u64 = 8;

/// Seeds of the crash sweep (meetups of 8, three minutes of faults, about 36 crashes each).
const CRASH_SEEDS: u64 = 16;

/// The run ended in a full mesh of spaces of `space_nodes` nodes: each live message reached
/// every other node of its sender's space.
fn assert_full_mesh(r: &Report, nodes: usize, space_nodes: usize) {
    assert!(r.full_mesh_at.is_some(), "{r}");
    assert_eq!(r.live_delivered, (nodes * (space_nodes - 1)) as u64, "{r}");
}

#[test]
fn every_invariant_holds_over_many_seeds() {
    let s = sweep(0..SEEDS, |seed| run(&Scenario::small(seed), None));
    assert!(s.passed(), "{s}");
    // The sweep is only worth something if the faults actually happened.
    let (drops, restarts, sleeps, crashes, lost) = (
        s.total(|r| r.drops),
        s.total(|r| r.relay_restarts),
        s.total(|r| r.sleeps),
        s.total(|r| r.crashes),
        s.total(|r| r.lost_in_crashes),
    );
    assert!(
        drops > 0 && restarts > 0 && sleeps > 0 && crashes > 0 && lost > 0,
        "{drops} {restarts} {sleeps} {crashes} {lost}"
    );
    let link = [
        s.total(|r| r.link.partitions),
        s.total(|r| r.link.partition_cuts),
        s.total(|r| r.link.duplicates),
        s.total(|r| r.link.delayed_by_loss),
        s.total(|r| r.link.queued),
    ];
    assert!(
        link.iter().all(|&t| t > 0),
        "partitions, cuts, duplicates, delayed by loss, queued: {link:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    // Partitions often enough that the run has some, with every other link fault on.
    let mut scenario = Scenario::small(3);
    scenario.faults.link.partition_every = Some(Duration::from_secs(10));
    scenario.faults.crash_every = Some(Duration::from_secs(10));
    let a = replays_exactly(&scenario, run, |r| &mut r.wall);
    assert!(
        a.link.partitions > 0 && a.link.messages > 0 && a.crashes > 0,
        "{a}"
    );
}

/// Nodes crashing every 5 s on average across a space of 8 through three minutes of faults: each
/// comes back with its session key (the same DID) and a new box, and finds its peers still
/// holding its old connections, or their memory of its old box and times (§2: "a restarted
/// peer says hello with a new box"). Nothing of the old incarnation reaches the new one; the
/// space still meets in a full mesh, with one connection per pair and no introduction passed
/// twice.
#[test]
fn a_node_that_crashes_comes_back_under_its_own_did_and_meets_its_space_again() {
    let s = sweep(0..CRASH_SEEDS, |seed| {
        let mut sc = Scenario::new(seed);
        sc.faults.crash_every = Some(Duration::from_secs(5));
        run(&sc, None)
    });
    assert!(s.passed(), "{s}");
    for r in &s.reports {
        assert!(r.crashes > 5, "{r}");
        assert_full_mesh(r, 8, 8);
    }
    assert!(s.total(|r| r.lost_in_crashes) > 0, "{s}");
}

/// Partitions every 10 s on average through the faulty phase: every delivery is checked against
/// the partition in force (nothing-crosses-a-partition), streams across are cut and dials across
/// refused, and once the last one heals the nodes still meet in a full mesh.
#[test]
fn a_partition_keeps_its_sides_apart_until_it_heals_and_the_mesh_forms_again() {
    let s = sweep(0..PARTITION_SEEDS, |seed| {
        let mut sc = Scenario::small(seed);
        sc.faults.link.partition_every = Some(Duration::from_secs(10));
        run(&sc, None)
    });
    assert_partitions_cut_and_refused(&s, |r| &r.link);
    for r in &s.reports {
        assert_full_mesh(r, 4, 4);
    }
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
        let r = passes(run(&sc, None));
        assert_eq!(r.link.duplicates, 0, "{r}");
        once += r.replays_ignored;
        sc.faults.link.duplicate_permille = 1000;
        let r = passes(run(&sc, None));
        assert_full_mesh(&r, 4, 4);
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
    let r = passes(run(&Scenario::new(5), None));
    assert_full_mesh(&r, 8, 8);
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
    let r = passes(run(&sc, None));
    assert_full_mesh(&r, nodes, SCALE_SPACE_NODES);
    assert!(r.drops > 0, "{r}");
}

/// A run's trace as JSON lines.
fn trace_of(sc: &Scenario) -> Vec<serde_json::Value> {
    let mut trace = Vec::new();
    passes(run(sc, Some(&mut trace)));
    String::from_utf8(trace)
        .expect("a trace is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a trace line is JSON"))
        .collect()
}

/// Long sleeps and relay restarts with long downtimes, often, up to the end of the faulty
/// phase: each ends with the phase at the latest, so the quiet phase is quiet from its start
/// (a node that slept on into it was found short of a full mesh when the heal period ran out),
/// and the nodes still meet in a full mesh.
#[test]
fn sleeps_and_relay_restarts_end_with_the_faulty_phase() {
    let mut late = 0;
    for seed in 0..FAULT_END_SEEDS {
        let mut sc = Scenario::small(seed);
        sc.faults.sleep_every = Some(Duration::from_secs(5));
        sc.faults.sleep = (Duration::from_secs(20), Duration::from_secs(90));
        sc.faults.relay_restart_every = Some(Duration::from_secs(5));
        sc.faults.relay_down = (Duration::from_secs(20), Duration::from_secs(60));
        let end = sc.duration.as_millis() as u64;
        // A fault begun this close to the end would outlast the phase uncut.
        let shortest = sc.faults.sleep.0.min(sc.faults.relay_down.0).as_millis() as u64;
        for line in trace_of(&sc) {
            let t = line["t"].as_u64().expect("a time");
            match line["ev"].as_str() {
                Some("wake" | "relay-up") => assert!(t <= end, "{line} after {end} ms"),
                Some("sleep" | "relay-down") if t + shortest > end => late += 1,
                _ => {}
            }
        }
    }
    // Some faults began too late to run their course: the cut was exercised.
    assert!(late > 0);
}

/// The small side of each partition of a run, read from its trace: places `0..nodes` are nodes
/// and the places after them relays.
fn partitions_cut(sc: &Scenario) -> Vec<Vec<usize>> {
    trace_of(sc)
        .into_iter()
        .filter(|l| l["ev"] == "partition")
        .map(|l| serde_json::from_value(l["d"]["small"].clone()).expect("places"))
        .collect()
}

/// By default a partition falls in one space: what it cuts is nodes of that space (node `n` is in
/// space `n % spaces`) and relays. Cutting across the whole network stays available, and then
/// one partition reaches into several spaces.
#[test]
fn a_partition_cuts_within_one_space_unless_told_to_cut_across_the_network() {
    let spaces = 3;
    let sc = |seed, region| {
        let mut sc = Scenario {
            nodes: spaces * 6,
            spaces,
            ..Scenario::small(seed)
        };
        sc.faults.link.partition_every = Some(Duration::from_secs(5));
        sc.faults.partition_region = region;
        sc
    };
    let spaces_cut = |cut: &[usize]| {
        let mut s: Vec<usize> = cut
            .iter()
            .filter(|&&p| p < spaces * 6)
            .map(|p| p % spaces)
            .collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    let (mut within, mut across) = (0, 0);
    for seed in 0..4 {
        for cut in partitions_cut(&sc(seed, PartitionRegion::Space)) {
            assert!(spaces_cut(&cut) <= 1, "{cut:?}");
            within += 1;
        }
        across += partitions_cut(&sc(seed, PartitionRegion::Network))
            .iter()
            .filter(|cut| spaces_cut(cut) > 1)
            .count();
    }
    assert!(within > 0 && across > 0, "{within} {across}");
}
