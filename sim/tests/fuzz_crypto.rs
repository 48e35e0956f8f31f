//! The insecure fuzzing provider (`weft_sim::fuzz_crypto`) changes what the crypto costs, not what
//! the machines do: every scenario, run on the same seeds under it and under the simulator's real
//! provider, keeps every invariant and ends in the same state. This is what lets the fuzz targets
//! use it: a path a target reaches under the stand-in is a path the machines take with real keys.
//!
//! Where keys or ids decide an order the protocol uses (Minca's offerer is the lexically smaller
//! DID, 04 Network §8; a circle's and a meetup's tables are ordered by id), the two runs take
//! different paths to that state, and the random draws of the faults then land on different
//! messages; where they do not (AIRC realms, relay peering), the reports match line for line.

use std::time::Duration;

use weft_sim::crypto::with_provider;
use weft_sim::fuzz_crypto::FUZZ_CRYPTO;
use weft_sim::{airc, circle, minca, peering};

// The scenario tests' one harness; this file needs only `passes` from it.
#[allow(dead_code)]
mod common;
use common::passes;

/// Seeds each scenario is compared on.
const SEEDS: u64 = 4;

/// One run under the real provider and one under the stand-in, `wall` zeroed in both.
fn both<R>(run: impl Fn() -> R, wall: impl Fn(&mut R) -> &mut Duration) -> (R, R) {
    let mut real = run();
    let mut stand_in = with_provider(&FUZZ_CRYPTO, &run);
    *wall(&mut real) = Duration::ZERO;
    *wall(&mut stand_in) = Duration::ZERO;
    (real, stand_in)
}

#[test]
fn airc_realms_end_the_same_under_the_stand_in() {
    for seed in 0..SEEDS {
        let s = airc::Scenario::small(seed);
        let (real, stand_in) = both(|| passes(airc::run(&s, None)), |r| &mut r.wall);
        assert_eq!(format!("{real}"), format!("{stand_in}"), "seed {seed}");
    }
}

#[test]
fn relay_peering_ends_the_same_under_the_stand_in() {
    for seed in 0..SEEDS {
        let s = peering::Scenario::small(seed);
        let (real, stand_in) = both(|| passes(peering::run(&s, None)), |r| &mut r.wall);
        assert_eq!(format!("{real}"), format!("{stand_in}"), "seed {seed}");
    }
}

#[test]
fn minca_meetups_reach_the_same_full_mesh_under_the_stand_in() {
    for seed in 0..SEEDS {
        let s = minca::Scenario::small(seed);
        let (real, stand_in) = both(|| passes(minca::run(&s, None)), |r| &mut r.wall);
        for r in [&real, &stand_in] {
            assert!(r.full_mesh_at.is_some(), "seed {seed}: {r}");
            assert_eq!(r.live_delivered, (s.nodes * (s.nodes - 1)) as u64, "{r}");
        }
    }
}

#[test]
fn circles_keep_every_invariant_under_the_stand_in() {
    for seed in 0..SEEDS {
        // The circle's invariants are checked on every event (at most once forwarding, hop
        // budgets, strangers never reached, one eose per subscription, backlog time bounds).
        let s = circle::Scenario::sweep(seed);
        let (real, stand_in) = (
            passes(circle::run(&s)),
            with_provider(&FUZZ_CRYPTO, || passes(circle::run(&s))),
        );
        for r in [&real, &stand_in] {
            assert!(
                r.publishes > 0 && r.deliveries > 0 && r.forwarded > 0,
                "{r}"
            );
        }
        assert_eq!(
            (real.devices, real.edges),
            (stand_in.devices, stand_in.edges)
        );
    }
}

#[test]
fn the_stand_in_is_chosen_only_inside_with_provider() {
    let real = || {
        weft_sim::crypto::provider()
            .name()
            .starts_with("rustcrypto")
    };
    assert!(real());
    with_provider(&FUZZ_CRYPTO, || {
        assert_eq!(weft_sim::crypto::provider().name(), "fuzz-insecure");
        assert!(std::panic::catch_unwind(|| panic!("inside")).is_err());
    });
    assert!(real());
    // Put back after a panic too.
    let _ = std::panic::catch_unwind(|| with_provider(&FUZZ_CRYPTO, || panic!("a failing run")));
    assert!(real());
}

#[test]
fn no_server_or_machine_source_names_the_stand_in() {
    // The drivers link the simulator crate; what keeps the stand-in out of every server is that
    // nothing there names it, nor the switch that would put it in place.
    fn walk(dir: &std::path::Path, hits: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, hits);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for name in [
                    "fuzz_crypto",
                    "FUZZ_CRYPTO",
                    "FuzzCrypto",
                    "weft_sim::crypto",
                ] {
                    if text.contains(name) {
                        hits.push(format!("{} names {name}", path.display()));
                    }
                }
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut hits = Vec::new();
    for src in ["drivers/src", "proto/src"] {
        walk(&root.join(src), &mut hits);
    }
    assert!(hits.is_empty(), "{hits:#?}");
}
