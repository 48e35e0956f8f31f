//! Size probe: the empty baseline. It does what every probe's `main` does around the protocol
//! (read stdin, print a number) and nothing else, so its size is subtracted from every probe's.

use std::hint::black_box;
use std::io::Read;

fn main() {
    let mut input = Vec::new();
    let read = std::io::stdin().read_to_end(&mut input).unwrap_or(0);
    println!("{}", black_box(read));
}
