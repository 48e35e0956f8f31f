//! Times one `minca-meetup` run from the command line without building the whole `weft`
//! program: `cargo run --release -p weft-sim --example meetup -- NODES SPACES RELAYS SECS SEED`.

use std::time::Duration;

use weft_sim::minca::{Scenario, run};

mod common;

fn main() {
    let a = common::Args::parse("meetup NODES SPACES RELAYS SECS SEED");
    let sc = Scenario {
        nodes: a.count(0, 8),
        spaces: a.count(1, 1),
        relays: a.count(2, 2),
        duration: Duration::from_secs(a.get(3, 180)),
        ..Scenario::new(a.get(4, 0))
    }
    .with_event_budget();
    let r = common::passed(run(&sc, None));
    println!("{r}\n{:?}", weft_sim::crypto::counts());
}
