//! The `relay-peering` scenario over many seeds: Nostr relays peered by trust lists, syncing
//! each other's advertised scopes with the outbound sync worker under dropped sockets,
//! partitions, crashes, limiter outages, corrupted events and replayed `AUTH`, always hold
//! nothing forged, out of scope or ephemeral, give peer treatment and the request budget exactly
//! as configured, and once everything heals each holds exactly its own events and the in-scope
//! events of the peers it follows. `sim/src/peering/invariant_tests.rs` shows each check fires.

use weft_sim::peering::{Scenario, run};
use weft_sim::scenario::sweep;

/// Seeds swept by the test suite; `weft sim relay-peering --seed S` replays any one of them.
const SEEDS: u64 = 200;

#[test]
fn every_relay_converges_to_exactly_its_peers_in_scope_events_over_many_seeds() {
    let s = sweep(0..SEEDS, |seed| run(&Scenario::small(seed), None));
    assert!(s.passed(), "{s}");
    // Worth something only if the faults, the sync and the peering rules were all exercised.
    let totals = [
        ("published", s.total(|r| r.published)),
        ("ephemeral", s.total(|r| r.ephemeral)),
        ("fetched", s.total(|r| r.fetched)),
        ("live", s.total(|r| r.live)),
        ("splits", s.total(|r| r.splits)),
        ("trusted_links", s.total(|r| r.trusted_links)),
        ("client_links", s.total(|r| r.client_links)),
        ("disabled_entries", s.total(|r| r.disabled_entries)),
        ("admitted", s.total(|r| r.admitted)),
        ("rate_limited", s.total(|r| r.rate_limited)),
        ("corrupted", s.total(|r| r.corrupted)),
        ("invalid", s.total(|r| r.invalid)),
        ("out_of_scope", s.total(|r| r.out_of_scope)),
        ("drops", s.total(|r| r.drops)),
        ("partitions", s.total(|r| r.partitions)),
        ("cuts", s.total(|r| r.cuts)),
        ("crashes", s.total(|r| r.crashes)),
        ("limiter_outages", s.total(|r| r.limiter_outages)),
        ("replays", s.total(|r| r.replays)),
    ];
    assert!(totals.iter().all(|&(_, t)| t > 0), "{totals:?}");
}

#[test]
fn the_default_size_converges_too() {
    let s = sweep(0..5, |seed| run(&Scenario::new(seed), None));
    assert!(s.passed(), "{s}");
}

#[test]
fn the_same_seed_gives_the_same_trace_and_report() {
    let scenario = Scenario::small(3);
    weft_sim::scenario::replay(&scenario, run, |r| &mut r.wall).unwrap();
}
