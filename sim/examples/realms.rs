//! Times one `airc-realms` run from the command line without building the whole `weft` program:
//! `cargo run --release -p weft-sim --example realms -- REALMS CLIENTS MESSAGES SECS SEED`.

use std::time::Duration;

use weft_sim::airc::{Scenario, run};

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("numbers"))
        .collect();
    let get = |i: usize, d: u64| a.get(i).copied().unwrap_or(d);
    let sc = Scenario {
        realms: get(0, 4) as usize,
        clients: get(1, 12) as usize,
        messages: get(2, 1_000) as usize,
        duration: Duration::from_secs(get(3, 300)),
        ..Scenario::new(get(4, 0))
    }
    .with_event_budget();
    match run(&sc, None) {
        Ok(r) => println!("{r}"),
        Err(v) => {
            eprintln!("{v}\n{}", v.report);
            std::process::exit(1);
        }
    }
}
