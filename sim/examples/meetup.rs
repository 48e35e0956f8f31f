//! Times one `minca-meetup` run from the command line without building the whole `weft`
//! program: `cargo run --release -p weft-sim --example meetup -- NODES SPACES RELAYS SECS SEED
//! WHOLE`, where `WHOLE` 1 lets a partition cut across the whole network rather than one space
//! ([`weft_sim::minca::PartitionRegion`]).

use std::time::Duration;

use weft_sim::minca::{Faults, PartitionRegion, Scenario, run};

mod common;

fn main() {
    let a = common::Args::parse("meetup NODES SPACES RELAYS SECS SEED WHOLE");
    let partition_region = match a.get(5, 0) {
        0 => PartitionRegion::Space,
        _ => PartitionRegion::Network,
    };
    let sc = Scenario {
        nodes: a.count(0, 8),
        spaces: a.count(1, 1),
        relays: a.count(2, 2),
        duration: Duration::from_secs(a.get(3, 180)),
        faults: Faults {
            partition_region,
            ..Faults::default()
        },
        ..Scenario::new(a.get(4, 0))
    }
    .with_event_budget();
    let r = common::passed(run(&sc, None));
    println!("{r}\n{:?}", weft_sim::crypto::counts());
}
