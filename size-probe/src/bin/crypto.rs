//! Size probe: the RustCrypto provider alone, taken as `&'static dyn CryptoProvider` the way every
//! machine takes it, so its whole vtable (every primitive) is kept. Subtracted from a protocol
//! probe, it leaves the protocol's own code.

use std::hint::black_box;
use std::io::Read;

use weft_proto::crypto::{CryptoProvider, default_provider};

fn main() {
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).unwrap_or(0);
    let crypto: &'static dyn CryptoProvider = black_box(default_provider());
    let digest = crypto.sha256(&[&input]);
    println!("{}", digest[0]);
}
