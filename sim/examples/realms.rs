//! Times one `airc-realms` run from the command line without building the whole `weft` program:
//! `cargo run --release -p weft-sim --example realms -- REALMS CLIENTS MESSAGES SECS SEED [TRACE]`.
//! With TRACE, the run's trace is written to that file (to compare two builds byte for byte).

use std::time::Duration;

use weft_sim::airc::{Scenario, run};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, d: u64| {
        args.get(i).map_or(d, |s| {
            s.parse()
                .expect("REALMS CLIENTS MESSAGES SECS SEED are numbers")
        })
    };
    let sc = Scenario {
        realms: get(0, 4) as usize,
        clients: get(1, 12) as usize,
        messages: get(2, 1_000) as usize,
        duration: Duration::from_secs(get(3, 300)),
        ..Scenario::new(get(4, 0))
    }
    .with_event_budget();
    let mut file = args.get(5).map(|p| {
        std::io::BufWriter::new(std::fs::File::create(p).expect("TRACE is a file to write"))
    });
    let trace = file.as_mut().map(|f| f as &mut dyn std::io::Write);
    match run(&sc, trace) {
        Ok(r) => {
            println!("{r}");
            // On stderr, so that stdout is the report alone, to compare between builds.
            let (verifies, remembered) = weft_sim::crypto::ed25519_verifies();
            eprintln!(
                "ed25519 verifications {verifies}, of signatures made in this run {remembered}"
            );
        }
        Err(v) => {
            eprintln!("{v}\n{}", v.report);
            std::process::exit(1);
        }
    }
}
