//! The crypto provider the simulator hands its machines: RustCrypto, with the Ed25519 keys it
//! has already expanded kept, so a simulation spends its time on the protocol rather than on
//! deriving the same few keys again and again.
//!
//! Every AIRC message between realms is signed by its origin realm and verified by the
//! destination (AIRC §9.2, §9.3). Through the plain provider each signature costs three
//! fixed-base scalar multiplications (the public key for the kid, the key again inside
//! `ed25519_sign`, then the signature) and each verification decompresses the public key first.
//! A simulation has a handful of realm keys, so [`SimCrypto`] expands each once. The results
//! are the same bytes the plain provider gives (Ed25519 is deterministic, and both go through
//! `ed25519-dalek`); a test checks it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use weft_proto::crypto::{
    self, CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret,
};

/// The most Ed25519 keys of each kind (signing, verifying) kept expanded. A scenario has one
/// key per realm; past this many a key is expanded on every use, as the plain provider does, so
/// memory stays bounded whatever a scenario does.
pub const MAX_EXPANDED_KEYS: usize = 4_096;

/// RustCrypto with expanded Ed25519 keys kept; see the [module docs](self).
#[derive(Debug)]
pub struct SimCrypto {
    signing: Mutex<BTreeMap<[u8; 32], SigningKey>>,
    verifying: Mutex<BTreeMap<[u8; 32], Option<VerifyingKey>>>,
}

/// The one provider every simulation shares (it holds only derived keys, which are the same for
/// every run that uses them).
pub static SIM_CRYPTO: SimCrypto = SimCrypto {
    signing: Mutex::new(BTreeMap::new()),
    verifying: Mutex::new(BTreeMap::new()),
};

/// The provider scenarios hand their machines.
pub fn provider() -> &'static dyn CryptoProvider {
    &SIM_CRYPTO
}

/// Finds `key` in `cache`, or makes it and keeps it while there is room.
fn cached<V: Clone>(
    cache: &Mutex<BTreeMap<[u8; 32], V>>,
    key: &[u8; 32],
    make: impl FnOnce() -> V,
) -> V {
    // A poisoned lock only means another thread panicked mid-insert of a value that is derived
    // from its key alone: the map is still right.
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = map.get(key) {
        return v.clone();
    }
    let v = make();
    if map.len() < MAX_EXPANDED_KEYS {
        map.insert(*key, v.clone());
    }
    v
}

impl SimCrypto {
    fn signing_key(&self, seed: &Ed25519Seed) -> SigningKey {
        cached(&self.signing, seed.expose(), || {
            SigningKey::from_bytes(seed.expose())
        })
    }
}

impl CryptoProvider for SimCrypto {
    fn name(&self) -> &'static str {
        "rustcrypto (simulator: expanded ed25519 keys kept)"
    }

    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        crypto::default_provider().sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        crypto::default_provider().hmac_sha256(key, parts)
    }

    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        crypto::default_provider().hmac_sha1(key, parts)
    }

    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError> {
        crypto::default_provider().p256_public_key(secret)
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        crypto::default_provider().p256_sign(secret, msg)
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        crypto::default_provider().p256_verify(public, msg, sig)
    }

    fn p256_is_point(&self, public: &P256Public) -> bool {
        crypto::default_provider().p256_is_point(public)
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        crypto::default_provider().p256_ecdh(secret, peer)
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        self.signing_key(seed).verifying_key().to_bytes()
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        self.signing_key(seed).sign(msg).to_bytes()
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        let key = cached(&self.verifying, public, || {
            VerifyingKey::from_bytes(public).ok()
        });
        key.is_some_and(|k| {
            k.verify(msg, &ed25519_dalek::Signature::from_bytes(sig))
                .is_ok()
        })
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        crypto::default_provider().schnorr_public_key(secret)
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        crypto::default_provider().schnorr_sign(secret, msg, aux)
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        crypto::default_provider().schnorr_verify(public, msg, sig)
    }

    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8> {
        crypto::default_provider().aes256gcm_seal(key, nonce, aad, plaintext)
    }

    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        crypto::default_provider().aes256gcm_open(key, nonce, aad, sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same bytes as the plain provider, on first use and from the kept keys, for good and
    /// bad signatures and for a public key that does not decode.
    #[test]
    fn kept_keys_give_the_plain_providers_answers() {
        let plain = crypto::default_provider();
        let sim = provider();
        for round in 0..2 {
            for n in 0u8..4 {
                let seed = Ed25519Seed::from_bytes([n.wrapping_mul(37).wrapping_add(1); 32]);
                let msg = [n, round, 9];
                let public = plain.ed25519_public_key(&seed);
                assert_eq!(sim.ed25519_public_key(&seed), public);
                let sig = plain.ed25519_sign(&seed, &msg);
                assert_eq!(sim.ed25519_sign(&seed, &msg), sig);
                assert!(sim.ed25519_verify(&public, &msg, &sig));
                let mut bad = sig;
                bad[n as usize] ^= 1;
                assert_eq!(
                    sim.ed25519_verify(&public, &msg, &bad),
                    plain.ed25519_verify(&public, &msg, &bad)
                );
                assert!(!sim.ed25519_verify(&public, b"other", &sig));
            }
        }
        // Not a point: every verification fails, the first and the kept one alike.
        let not_a_point = [0xff; 32];
        for _ in 0..2 {
            assert!(!sim.ed25519_verify(&not_a_point, b"m", &[0; 64]));
        }
    }
}
