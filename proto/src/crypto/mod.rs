//! The crypto provider interface every machine is handed, and the default provider.
//!
//! Machines never name a crypto crate. They hold a `&'static dyn` [`CryptoProvider`] given at
//! construction, the way rustls and str0m make crypto pluggable, so a server can swap in a
//! native-backed provider (`weft_drivers::fast_crypto`) and a device can keep the pure-Rust one.
//!
//! What the specs need, and nothing more:
//!
//! - ECDSA P-256 / SHA-256 with 64-byte P1363 signatures (Minca signs and checks everything so);
//! - ECDH on P-256 (Minca `box` keys);
//! - Ed25519 (AIRC realm signing; [`sigstring`] gives AIRC's `ed25519:<kid>:<base64>` form);
//! - BIP-340 Schnorr over secp256k1 (Nostr events);
//! - AES-256-GCM (Minca room keys and sealed messages);
//! - SHA-256, HMAC-SHA256 and HMAC-SHA1 (TURN REST passwords);
//! - ECDH on secp256k1 against an x-only key, and the ChaCha20 stream cipher (RFC 8439), which
//!   with HKDF-SHA256 ([`hkdf_extract`], [`hkdf_expand`], on the provider's HMAC) are NIP-44 v2's
//!   primitives (meshstr's grant envelopes).
//!
//! Every provider passes the same vectors and property tests: anything one signs, the other
//! verifies.

use alloc::vec::Vec;
use core::fmt;

#[cfg(feature = "rustcrypto")]
mod rustcrypto;
pub mod sigstring;

#[cfg(feature = "rustcrypto")]
pub use rustcrypto::RustCrypto;

/// Why a crypto operation could not be done. Verification failures are not errors: `verify`
/// returns `false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CryptoError {
    /// A secret key is not a valid scalar for its curve (zero, or not below the group order).
    InvalidSecretKey,
    /// A public key does not decode to a point on its curve.
    InvalidPublicKey,
    /// AES-GCM authentication failed: wrong key, nonce, associated data, or tampered ciphertext.
    Decrypt,
}

impl fmt::Display for CryptoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InvalidSecretKey => "invalid secret key",
            Self::InvalidPublicKey => "invalid public key",
            Self::Decrypt => "authenticated decryption failed",
        })
    }
}

impl core::error::Error for CryptoError {}

macro_rules! secret {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Its `Debug` never shows the bytes, so a secret cannot reach a log by accident.
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name([u8; 32]);

        impl $name {
            /// Wraps 32 secret bytes. Validity is checked when a provider uses them.
            pub const fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// The secret bytes, for storage.
            pub const fn expose(&self) -> &[u8; 32] {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($name), "(<redacted>)"))
            }
        }
    };
}

secret!(
    /// A P-256 secret scalar, big-endian.
    P256Secret
);
secret!(
    /// An Ed25519 secret seed (RFC 8032's 32-byte private key).
    Ed25519Seed
);
secret!(
    /// A secp256k1 secret scalar, big-endian.
    Secp256k1Secret
);
secret!(
    /// An X25519 secret (RFC 7748's 32-byte scalar, clamped when used).
    X25519Secret
);

/// A P-256 public key as a SEC1 compressed point (33 bytes), the form did:key uses.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct P256Public(pub [u8; 33]);

/// The operations weft's protocols need, implemented by a crypto backend.
///
/// Implementations must be deterministic where the algorithm is (RFC 6979 ECDSA, Ed25519), must
/// never panic on any input, and must treat malformed keys and signatures as a failed
/// verification rather than an error.
pub trait CryptoProvider: Send + Sync {
    /// A short name for logs and benchmarks, such as `"rustcrypto"`.
    fn name(&self) -> &'static str;

    /// SHA-256 over the concatenation of `parts`.
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32];
    /// HMAC-SHA256 under `key` over the concatenation of `parts`.
    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32];
    /// HMAC-SHA1 under `key` over the concatenation of `parts` (TURN REST passwords).
    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20];

    /// The compressed public key of a P-256 secret.
    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError>;
    /// ECDSA P-256 / SHA-256 over `msg`, deterministic (RFC 6979), as 64-byte P1363 `r || s`.
    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError>;
    /// Checks a 64-byte P1363 ECDSA P-256 / SHA-256 signature over `msg`.
    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool;
    /// Whether `public` decodes to a point on P-256: far cheaper than an ECDH to ask only that.
    fn p256_is_point(&self, public: &P256Public) -> bool;
    /// ECDH on P-256: the x-coordinate of `secret · peer`.
    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError>;

    /// The Ed25519 public key of a seed.
    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32];
    /// An Ed25519 signature (RFC 8032, deterministic).
    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64];
    /// Checks an Ed25519 signature.
    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool;

    /// The X25519 public key of a secret: RFC 7748's `X25519(k, 9)`, `k` clamped.
    fn x25519_public_key(&self, secret: &X25519Secret) -> [u8; 32];

    /// The BIP-340 x-only public key of a secp256k1 secret.
    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError>;
    /// A BIP-340 Schnorr signature over a 32-byte message with 32 bytes of auxiliary randomness
    /// (drawn by the caller from its injected RNG).
    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError>;
    /// Checks a BIP-340 Schnorr signature over a 32-byte message.
    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool;

    /// ECDH on secp256k1: the x-coordinate of `secret · P`, where `P` is the point with x-only
    /// coordinate `peer` and even `y` (BIP-340's `lift_x`), as NIP-44 v2 computes its shared
    /// secret.
    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError>;

    /// The ChaCha20 stream cipher of RFC 8439 (32-byte key, 12-byte nonce, block counter starting
    /// at 0) applied to `data`: encryption and decryption are the same operation.
    fn chacha20(&self, key: &[u8; 32], nonce: &[u8; 12], data: &[u8]) -> Vec<u8>;

    /// AES-256-GCM: `ciphertext || 16-byte tag`.
    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8>;
    /// AES-256-GCM: opens `ciphertext || tag`, or [`CryptoError::Decrypt`].
    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError>;
}

/// HKDF-SHA256 extract (RFC 5869): the pseudorandom key `HMAC-SHA256(salt, ikm)`.
pub fn hkdf_extract(provider: &dyn CryptoProvider, salt: &[u8], ikm: &[u8]) -> [u8; 32] {
    provider.hmac_sha256(salt, &[ikm])
}

/// The longest output HKDF-SHA256 expand gives: 255 blocks of 32 bytes (RFC 5869).
pub const HKDF_MAX_OUTPUT: usize = 255 * 32;

/// HKDF-SHA256 expand (RFC 5869) of `prk` under `info` into `out`. An `out` longer than
/// [`HKDF_MAX_OUTPUT`] is not filled past it (the RFC forbids that length); callers ask for
/// fixed, short lengths.
pub fn hkdf_expand(provider: &dyn CryptoProvider, prk: &[u8; 32], info: &[u8], out: &mut [u8]) {
    let mut block: [u8; 32] = [0; 32];
    let mut prev_len = 0;
    for (i, chunk) in out.chunks_mut(32).take(255).enumerate() {
        let counter = [i as u8 + 1];
        block = provider.hmac_sha256(prk, &[&block[..prev_len], info, &counter]);
        prev_len = 32;
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// The default provider, RustCrypto, for machines whose host does not hand them another.
#[cfg(feature = "rustcrypto")]
pub fn default_provider() -> &'static RustCrypto {
    &RustCrypto
}

/// A fresh P-256 secret drawn from `rng` (rejection-sampled until it is a valid scalar).
pub fn generate_p256(
    provider: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
) -> P256Secret {
    loop {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        let s = P256Secret::from_bytes(b);
        if provider.p256_public_key(&s).is_ok() {
            return s;
        }
    }
}

/// A fresh secp256k1 secret drawn from `rng` (rejection-sampled until it is a valid scalar).
pub fn generate_secp256k1(
    provider: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
) -> Secp256k1Secret {
    loop {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        let s = Secp256k1Secret::from_bytes(b);
        if provider.schnorr_public_key(&s).is_ok() {
            return s;
        }
    }
}

/// A fresh Ed25519 seed drawn from `rng` (every 32 bytes are a valid seed).
pub fn generate_ed25519(rng: &mut dyn rand_core::CryptoRng) -> Ed25519Seed {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    Ed25519Seed::from_bytes(b)
}

/// A fresh X25519 secret from `rng` (any 32 bytes: X25519 clamps them).
pub fn generate_x25519(rng: &mut dyn rand_core::CryptoRng) -> X25519Secret {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    X25519Secret::from_bytes(b)
}
