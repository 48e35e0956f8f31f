//! What more than one fuzz target needs: the driving of a machine through time, and the crypto
//! provider the machine targets hand their machines. A library of the fuzz crate so each target
//! takes what it uses and nothing is compiled twice.

pub mod advance;

use weft_proto::crypto::CryptoProvider;

/// The provider the machine targets hand their machines: the simulator's insecure stand-in
/// ([`weft_sim::fuzz_crypto`]), whose signatures, keys and agreements are SHA-256 over their
/// inputs. A run then costs microseconds where P-256 under the sanitizer cost milliseconds, and
/// every path behind a signature check stays reachable; `sim/tests/fuzz_crypto.rs` shows the
/// machines end the same way under it as under the real provider. Parser targets, which read
/// bytes made elsewhere, keep the real one.
pub fn crypto() -> &'static dyn CryptoProvider {
    &weft_sim::fuzz_crypto::FUZZ_CRYPTO
}
