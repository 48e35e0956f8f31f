//! An **insecure** crypto provider for fuzzing: every public-key operation replaced by SHA-256
//! over its inputs, so a run that signs and checks on every input costs microseconds instead of
//! milliseconds, and every path behind a signature check stays reachable.
//!
//! A fuzz target whose machines sign and verify P-256, Ed25519 or BIP-340 spends almost all of a
//! run in curve arithmetic (a few hundred runs a second under the sanitizer, docs/reliability.md).
//! The machines never look inside a key or a signature: they ask the provider whether it
//! verifies, and compare, store and forward the bytes. So the provider here keeps each
//! operation's *contract* (what verifies and what does not, which keys and points are refused,
//! that an agreement is the same from both ends) and drops its cost, as rustls and quinn fuzz
//! with stand-in crypto:
//!
//! - a public key is `SHA-256(label ‖ secret)` (for P-256 behind a compressed-point tag);
//! - a signature is `t ‖ SHA-256(t)` with `t = SHA-256(label ‖ public ‖ message)`, which the
//!   verifier recomputes from the public key: only the holder of the key's secret makes it
//!   *in a run* (the target builds its signers from secrets), and one changed byte of key,
//!   message or signature fails it;
//! - an agreement is `SHA-256(label ‖ lower ‖ higher)` over the two public keys in byte order, the
//!   same from both ends as Diffie-Hellman's is;
//! - the all-zero secret is refused as the curves refuse zero, and a P-256 key whose tag is not a
//!   compressed point's (`02`/`03`) is not a point, so those refusals stay reachable too;
//! - hashes, MACs and ciphers (SHA-256, HMAC, ChaCha20, AES-GCM) are the real ones: they are
//!   cheap, and key derivations and sealed boxes must round-trip exactly.
//!
//! Anyone who knows two public keys knows their agreement, and anyone can make a signature: this
//! provider must never reach code that talks to the world. It lives in the simulator crate and is
//! named only by fuzz targets and tests; `sim/tests/fuzz_crypto.rs` fails if the drivers' or the
//! machines' sources name it, and shows the scenarios end the same way under it as under the
//! real provider.

use weft_proto::crypto::{
    CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret,
    default_provider,
};

/// The insecure stand-in provider; see the module docs.
#[derive(Debug)]
pub struct FuzzCrypto;

/// The one instance, as machines take a provider: `&FUZZ_CRYPTO`.
pub static FUZZ_CRYPTO: FuzzCrypto = FuzzCrypto;

/// Domain labels, so that no stand-in value of one operation is another's.
const P256_PUBLIC: &[u8] = b"weft-fuzz/p256-public";
const P256_SIGN: &[u8] = b"weft-fuzz/p256-sign";
const P256_AGREE: &[u8] = b"weft-fuzz/p256-agree";
const ED25519_PUBLIC: &[u8] = b"weft-fuzz/ed25519-public";
const ED25519_SIGN: &[u8] = b"weft-fuzz/ed25519-sign";
const SCHNORR_PUBLIC: &[u8] = b"weft-fuzz/schnorr-public";
const SCHNORR_SIGN: &[u8] = b"weft-fuzz/schnorr-sign";
const SECP256K1_AGREE: &[u8] = b"weft-fuzz/secp256k1-agree";
const X25519_PUBLIC: &[u8] = b"weft-fuzz/x25519-public";

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    default_provider().sha256(parts)
}

/// `t ‖ SHA-256(t)` with `t = SHA-256(label ‖ public ‖ msg)`.
fn stand_in_signature(label: &[u8], public: &[u8], msg: &[u8]) -> [u8; 64] {
    let t = sha256(&[label, public, msg]);
    let mut sig = [0; 64];
    sig[..32].copy_from_slice(&t);
    sig[32..].copy_from_slice(&sha256(&[&t]));
    sig
}

/// The agreement of two public keys, the same whichever end asks.
fn stand_in_agreement(label: &[u8], mine: &[u8], theirs: &[u8]) -> [u8; 32] {
    let (lower, higher) = if mine <= theirs {
        (mine, theirs)
    } else {
        (theirs, mine)
    };
    sha256(&[label, lower, higher])
}

/// The curves refuse the zero scalar; so does the stand-in (larger out-of-range scalars are
/// accepted: only the refusal path needs to stay reachable).
fn nonzero(secret: &[u8; 32]) -> Result<(), CryptoError> {
    if secret.iter().all(|&b| b == 0) {
        Err(CryptoError::InvalidSecretKey)
    } else {
        Ok(())
    }
}

impl CryptoProvider for FuzzCrypto {
    fn name(&self) -> &'static str {
        "fuzz-insecure"
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
        nonzero(secret.expose())?;
        let x = sha256(&[P256_PUBLIC, secret.expose()]);
        let mut public = [0; 33];
        public[0] = 0x02 | (x[31] & 1);
        public[1..].copy_from_slice(&x);
        Ok(P256Public(public))
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        let public = self.p256_public_key(secret)?;
        Ok(stand_in_signature(P256_SIGN, &public.0, msg))
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        self.p256_is_point(public) && stand_in_signature(P256_SIGN, &public.0, msg) == *sig
    }

    fn p256_is_point(&self, public: &P256Public) -> bool {
        matches!(public.0[0], 0x02 | 0x03)
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        let mine = self.p256_public_key(secret)?;
        if !self.p256_is_point(peer) {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(stand_in_agreement(P256_AGREE, &mine.0, &peer.0))
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        sha256(&[ED25519_PUBLIC, seed.expose()])
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        stand_in_signature(ED25519_SIGN, &self.ed25519_public_key(seed), msg)
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        stand_in_signature(ED25519_SIGN, public, msg) == *sig
    }

    fn x25519_public_key(&self, secret: &weft_proto::crypto::X25519Secret) -> [u8; 32] {
        sha256(&[X25519_PUBLIC, secret.expose()])
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        nonzero(secret.expose())?;
        Ok(sha256(&[SCHNORR_PUBLIC, secret.expose()]))
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        _aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        let public = self.schnorr_public_key(secret)?;
        Ok(stand_in_signature(SCHNORR_SIGN, &public, msg))
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        stand_in_signature(SCHNORR_SIGN, public, msg) == *sig
    }

    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError> {
        let mine = self.schnorr_public_key(secret)?;
        Ok(stand_in_agreement(SECP256K1_AGREE, &mine, peer))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(secret: u8) -> P256Secret {
        P256Secret::from_bytes([secret; 32])
    }

    #[test]
    fn a_signature_verifies_under_its_key_and_fails_with_any_byte_changed() {
        let c = &FUZZ_CRYPTO;
        let public = c.p256_public_key(&p(1)).unwrap();
        let sig = c.p256_sign(&p(1), b"hello").unwrap();
        assert!(c.p256_verify(&public, b"hello", &sig));
        assert!(!c.p256_verify(&public, b"hellp", &sig));
        let other = c.p256_public_key(&p(2)).unwrap();
        assert!(!c.p256_verify(&other, b"hello", &sig));
        for i in 0..64 {
            let mut bad = sig;
            bad[i] ^= 1;
            assert!(!c.p256_verify(&public, b"hello", &bad), "byte {i}");
        }
        let mut not_a_point = public;
        not_a_point.0[0] = 0x04;
        assert!(!c.p256_verify(&not_a_point, b"hello", &sig));

        let seed = Ed25519Seed::from_bytes([3; 32]);
        let ed = c.ed25519_public_key(&seed);
        let sig = c.ed25519_sign(&seed, b"m");
        assert!(c.ed25519_verify(&ed, b"m", &sig));
        assert!(!c.ed25519_verify(&ed, b"n", &sig));

        let k = Secp256k1Secret::from_bytes([4; 32]);
        let x = c.schnorr_public_key(&k).unwrap();
        let sig = c.schnorr_sign(&k, &[9; 32], &[0; 32]).unwrap();
        assert!(c.schnorr_verify(&x, &[9; 32], &sig));
        assert!(!c.schnorr_verify(&x, &[8; 32], &sig));
    }

    #[test]
    fn an_agreement_is_the_same_from_both_ends_and_differs_between_pairs() {
        let c = &FUZZ_CRYPTO;
        let (a, b, e) = (p(1), p(2), p(3));
        let (pa, pb) = (
            c.p256_public_key(&a).unwrap(),
            c.p256_public_key(&b).unwrap(),
        );
        assert_eq!(c.p256_ecdh(&a, &pb).unwrap(), c.p256_ecdh(&b, &pa).unwrap());
        assert_ne!(c.p256_ecdh(&a, &pb).unwrap(), c.p256_ecdh(&e, &pb).unwrap());
        let mut bad = pb;
        bad.0[0] = 0x05;
        assert_eq!(c.p256_ecdh(&a, &bad), Err(CryptoError::InvalidPublicKey));

        let (k, l) = (
            Secp256k1Secret::from_bytes([5; 32]),
            Secp256k1Secret::from_bytes([6; 32]),
        );
        let (xk, xl) = (
            c.schnorr_public_key(&k).unwrap(),
            c.schnorr_public_key(&l).unwrap(),
        );
        assert_eq!(
            c.secp256k1_ecdh(&k, &xl).unwrap(),
            c.secp256k1_ecdh(&l, &xk).unwrap()
        );
    }

    #[test]
    fn the_zero_secret_is_refused_as_the_curves_refuse_it() {
        let c = &FUZZ_CRYPTO;
        assert_eq!(c.p256_public_key(&p(0)), Err(CryptoError::InvalidSecretKey));
        assert_eq!(c.p256_sign(&p(0), b"x"), Err(CryptoError::InvalidSecretKey));
        assert_eq!(
            c.schnorr_public_key(&Secp256k1Secret::from_bytes([0; 32])),
            Err(CryptoError::InvalidSecretKey)
        );
    }

    #[test]
    fn hashes_macs_and_ciphers_are_the_real_ones() {
        let (c, real) = (&FUZZ_CRYPTO, default_provider());
        assert_eq!(c.sha256(&[b"a", b"b"]), real.sha256(&[b"ab"]));
        assert_eq!(
            c.hmac_sha256(b"k", &[b"m"]),
            real.hmac_sha256(b"k", &[b"m"])
        );
        let sealed = c.aes256gcm_seal(&[1; 32], &[2; 12], b"aad", b"text");
        assert_eq!(
            real.aes256gcm_open(&[1; 32], &[2; 12], b"aad", &sealed)
                .unwrap(),
            b"text"
        );
        assert_eq!(
            c.chacha20(&[1; 32], &[2; 12], b"abc"),
            real.chacha20(&[1; 32], &[2; 12], b"abc")
        );
    }
}
