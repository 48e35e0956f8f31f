//! A crypto provider for fuzz targets whose machines sign and check P-256 on every run:
//! RustCrypto, with each P-256 answer remembered by its inputs.
//!
//! A fuzz target builds its machines from the same seeds on every run, and libFuzzer mostly
//! runs small mutations of inputs it has run before, so most P-256 operations of a run (key
//! derivations, the signatures of a join's hellos, the verification of a replayed blob) have
//! been done before with the same inputs. P-256 is deterministic here (RFC 6979 signing, and the
//! provider contract requires it), so a remembered answer is the answer: the machine under test
//! sees exactly what the plain provider would give, only sooner. Every other operation goes
//! straight to RustCrypto.
//!
//! Used by `minca_rendezvous`, `minca_mesh` and `minca_node`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use weft_proto::crypto::{
    CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret,
    default_provider,
};

/// The most answers kept per operation. Past it the table is emptied and refilled, so memory
/// stays bounded (libFuzzer's RSS limit) while the answers of recent runs stay warm.
pub const MAX_REMEMBERED: usize = 1 << 15;

type Table<V> = Mutex<BTreeMap<Vec<u8>, V>>;

/// RustCrypto with remembered P-256 answers; see the module docs.
pub struct MemoCrypto {
    public: Table<Result<P256Public, CryptoError>>,
    sign: Table<Result<[u8; 64], CryptoError>>,
    verify: Table<bool>,
    ecdh: Table<Result<[u8; 32], CryptoError>>,
}

/// The provider the targets hand their machines.
pub static MEMO: MemoCrypto = MemoCrypto {
    public: Mutex::new(BTreeMap::new()),
    sign: Mutex::new(BTreeMap::new()),
    verify: Mutex::new(BTreeMap::new()),
    ecdh: Mutex::new(BTreeMap::new()),
};

/// `&'static dyn CryptoProvider`, as machines take it.
pub fn provider() -> &'static dyn CryptoProvider {
    &MEMO
}

fn key(parts: &[&[u8]]) -> Vec<u8> {
    // Length-prefixed, so two different splits of the same bytes are different keys.
    let mut k = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
    for p in parts {
        k.extend_from_slice(&(p.len() as u32).to_be_bytes());
        k.extend_from_slice(p);
    }
    k
}

fn remembered<V: Clone>(table: &Table<V>, parts: &[&[u8]], work: impl FnOnce() -> V) -> V {
    let k = key(parts);
    let mut map = table.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = map.get(&k) {
        return v.clone();
    }
    let v = work();
    if map.len() >= MAX_REMEMBERED {
        map.clear();
    }
    map.insert(k, v.clone());
    v
}

impl CryptoProvider for MemoCrypto {
    fn name(&self) -> &'static str {
        "rustcrypto (fuzz: P-256 answers remembered)"
    }

    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        default_provider().sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        default_provider().hmac_sha256(key, parts)
    }

    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        default_provider().hmac_sha1(key, parts)
    }

    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError> {
        remembered(&self.public, &[secret.expose()], || {
            default_provider().p256_public_key(secret)
        })
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        remembered(&self.sign, &[secret.expose(), msg], || {
            default_provider().p256_sign(secret, msg)
        })
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        remembered(&self.verify, &[&public.0, msg, sig], || {
            default_provider().p256_verify(public, msg, sig)
        })
    }

    fn p256_is_point(&self, public: &P256Public) -> bool {
        default_provider().p256_is_point(public)
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        remembered(&self.ecdh, &[secret.expose(), &peer.0], || {
            default_provider().p256_ecdh(secret, peer)
        })
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        default_provider().ed25519_public_key(seed)
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        default_provider().ed25519_sign(seed, msg)
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        default_provider().ed25519_verify(public, msg, sig)
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        default_provider().schnorr_public_key(secret)
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        default_provider().schnorr_sign(secret, msg, aux)
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        default_provider().schnorr_verify(public, msg, sig)
    }

    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError> {
        default_provider().secp256k1_ecdh(secret, peer)
    }

    fn chacha20(&self, key: &[u8; 32], nonce: &[u8; 12], data: &[u8]) -> Vec<u8> {
        default_provider().chacha20(key, nonce, data)
    }

    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8> {
        default_provider().aes256gcm_seal(key, nonce, aad, plaintext)
    }

    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        default_provider().aes256gcm_open(key, nonce, aad, sealed)
    }
}
