//! Times one `minca-meetup` run from the command line without building the whole `weft`
//! program: `cargo run --release -p weft-sim --example meetup -- NODES SPACES RELAYS SECS SEED`.

use std::time::Duration;

use weft_sim::minca::{Scenario, run};

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("numbers"))
        .collect();
    let get = |i: usize, d: u64| a.get(i).copied().unwrap_or(d);
    let sc = Scenario {
        nodes: get(0, 8) as usize,
        spaces: get(1, 1) as usize,
        relays: get(2, 2) as usize,
        duration: Duration::from_secs(get(3, 180)),
        ..Scenario::new(get(4, 0))
    }
    .with_event_budget();
    match run(&sc, None) {
        Ok(r) => println!("{r}\n{:?}", weft_sim::crypto::counts()),
        Err(v) => {
            eprintln!("{v}\n{}", v.report);
            std::process::exit(1);
        }
    }
}
