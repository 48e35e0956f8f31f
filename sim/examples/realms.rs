//! Times one `airc-realms` run from the command line without building the whole `weft` program:
//! `cargo run --release -p weft-sim --example realms -- REALMS CLIENTS MESSAGES SECS SEED`.

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
}
