//! What the timing examples share: their command line (numbers by position, each with a default)
//! and how a run ends.

use std::fmt;
use std::process::exit;

use weft_sim::scenario::Violation;

// The allocator the `weft` program runs `weft sim` with, so the examples time the same thing.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The numbers given on the command line, by position.
pub(crate) struct Args(Vec<u64>);

impl Args {
    /// Reads the command line; anything that is not a number ends the program with `usage`
    /// (the names of the numbers, in order) and exit status 2.
    pub(crate) fn parse(usage: &str) -> Self {
        let parsed: Result<Vec<u64>, _> = std::env::args().skip(1).map(|s| s.parse()).collect();
        match parsed {
            Ok(numbers) => Self(numbers),
            Err(e) => {
                eprintln!("{e}; usage: {usage} (all numbers, each optional)");
                exit(2);
            }
        }
    }

    /// The number at `i`, or `default` when the command line stops before it.
    pub(crate) fn get(&self, i: usize, default: u64) -> u64 {
        self.0.get(i).copied().unwrap_or(default)
    }

    /// The number at `i` as a count, or `default`.
    pub(crate) fn count(&self, i: usize, default: usize) -> usize {
        self.0
            .get(i)
            .map_or(default, |&n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

/// The report of a run that passed; a violation is printed with the report up to it and ends
/// the program with exit status 1.
pub(crate) fn passed<R: fmt::Display>(run: Result<R, Box<Violation<R>>>) -> R {
    run.unwrap_or_else(|v| {
        eprintln!("{v}\n{}", v.report);
        exit(1)
    })
}
