//! Times one `airc-realms` run from the command line without building the whole `weft` program:
//! `cargo run --release -p weft-sim --example realms -- REALMS CLIENTS MESSAGES SECS SEED`.
//! (`weft sim airc-realms --trace FILE` writes a run's trace, to compare two builds byte for
//! byte.)

use std::time::Duration;

use weft_sim::airc::{Scenario, run};

mod common;

fn main() {
    let a = common::Args::parse("realms REALMS CLIENTS MESSAGES SECS SEED");
    let sc = Scenario {
        realms: a.count(0, 4),
        clients: a.count(1, 12),
        messages: a.count(2, 1_000),
        duration: Duration::from_secs(a.get(3, 300)),
        ..Scenario::new(a.get(4, 0))
    }
    .with_event_budget();
    println!("{}", common::passed(run(&sc, None)));
    // On stderr, so that stdout is the report alone, to compare between builds.
    let (verifies, remembered) = weft_sim::crypto::ed25519_verifies();
    eprintln!("ed25519 verifications {verifies}, of signatures made in this run {remembered}");
}
