//! Times one `minca-meetup` run from the command line without building the whole `weft`
//! program: `cargo run --release -p weft-sim --example meetup -- NODES SPACES RELAYS SECS SEED
//! WHOLE CRASH`, where `WHOLE` 1 lets a partition cut across the whole network rather than one
//! space ([`weft_sim::minca::PartitionRegion`]) and `CRASH` is the mean seconds between node
//! crashes (0: none; by default the scenario's). With `TRACE=FILE` in the environment the run's
//! JSON-lines trace is written there (what `weft sim minca-meetup --trace` writes).

use std::io::Write;
use std::time::Duration;

use weft_sim::minca::{Faults, PartitionRegion, Scenario, run};

mod common;

fn main() {
    let a = common::Args::parse("meetup NODES SPACES RELAYS SECS SEED WHOLE CRASH");
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
            crash_every: match a.get(6, u64::MAX) {
                u64::MAX => Faults::default().crash_every,
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            ..Faults::default()
        },
        ..Scenario::new(a.get(4, 0))
    }
    .with_event_budget();
    let mut trace = std::env::var_os("TRACE").map(|path| {
        let file = std::fs::File::create(&path).unwrap_or_else(|e| {
            eprintln!("TRACE={}: {e}", path.display());
            std::process::exit(2)
        });
        std::io::BufWriter::new(file)
    });
    let trace = trace.as_mut().map(|t| -> &mut dyn Write { t });
    let r = common::passed(run(&sc, trace));
    println!("{r}\n{:?}", weft_sim::crypto::counts());
}
