//! Runs the `no_std` exchange on the host and prints what it showed. This `main` is the only std
//! code: it calls the library and prints; the protocols, and the heap they use, are the
//! library's.

use std::process::ExitCode;

fn main() -> ExitCode {
    match weft_no_std::run() {
        Ok(outcome) => {
            println!("{outcome}");
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
