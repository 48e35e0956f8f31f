//! The default provider: RustCrypto, pure Rust and `no_std`.

use alloc::vec::Vec;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::Aes256Gcm;
// One `signature` crate serves p256 and ed25519-dalek, so these traits cover both.
use ed25519_dalek::{Signer as _, Verifier as _};
use hmac::{Hmac, Mac as _};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::{
    CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret,
};

/// The pure-Rust crypto provider on the RustCrypto crates (`p256`, `k256`, `ed25519-dalek`,
/// `aes-gcm`, `sha2`, `hmac`, `sha1`).
///
/// It is `no_std`, needs no allocator beyond AES-GCM's output buffer, and is what machines get
/// from [`default_provider`](super::default_provider). Servers that verify many P-256 signatures
/// want `weft_drivers::fast_crypto::FastCrypto` instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct RustCrypto;

/// SHA-256 and SHA-1 both have 64-byte blocks.
const HMAC_BLOCK: usize = 64;

/// HMAC's own key preparation (RFC 2104 §2): a key longer than a block is replaced by its hash,
/// and a shorter one is zero-padded, which leaves the MAC unchanged. Doing it here lets the MAC
/// be built with the infallible block-sized `KeyInit::new`, so there is no error arm that can
/// never be taken.
fn hmac_block_key<D: sha2::Digest>(key: &[u8]) -> [u8; HMAC_BLOCK] {
    let mut block = [0u8; HMAC_BLOCK];
    if key.len() > HMAC_BLOCK {
        let h = D::digest(key);
        block[..h.len()].copy_from_slice(&h);
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    block
}

fn p256_signing_key(secret: &P256Secret) -> Result<p256::ecdsa::SigningKey, CryptoError> {
    p256::ecdsa::SigningKey::from_bytes(secret.expose().into())
        .map_err(|_| CryptoError::InvalidSecretKey)
}

fn p256_compressed(vk: &p256::ecdsa::VerifyingKey) -> P256Public {
    let point = p256::CompressedPoint::from(vk);
    P256Public(point.into())
}

impl CryptoProvider for RustCrypto {
    fn name(&self) -> &'static str {
        "rustcrypto"
    }

    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        h.finalize().into()
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let block = hmac_block_key::<Sha256>(key);
        let mut mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        let block = hmac_block_key::<Sha1>(key);
        let mut mac = <Hmac<Sha1> as KeyInit>::new(&block.into());
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError> {
        let sk = p256_signing_key(secret)?;
        Ok(p256_compressed(sk.verifying_key()))
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        let sk = p256_signing_key(secret)?;
        // P-256 does not low-S normalize (`NORMALIZE_S` is false), so this is RFC 6979 exactly,
        // byte for byte what other RFC 6979 signers produce.
        let sig: p256::ecdsa::Signature = sk.sign(msg);
        Ok(sig.to_bytes().into())
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        let Ok(vk) = p256::ecdsa::VerifyingKey::from_sec1_bytes(&public.0) else {
            return false;
        };
        let Ok(sig) = p256::ecdsa::Signature::from_bytes(sig.into()) else {
            return false;
        };
        // Accepts high-S as well as low-S: WebCrypto and Node do not normalize, and p256 only
        // rejects high-S for curves whose `NORMALIZE_S` is true.
        vk.verify(msg, &sig).is_ok()
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        let sk = p256::SecretKey::from_bytes(secret.expose().into())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        let pk = p256::PublicKey::from_sec1_bytes(&peer.0)
            .map_err(|_| CryptoError::InvalidPublicKey)?;
        let shared = p256::ecdh::diffie_hellman(sk.to_nonzero_scalar(), pk.as_affine());
        Ok((*shared.raw_secret_bytes()).into())
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        ed25519_dalek::SigningKey::from_bytes(seed.expose())
            .verifying_key()
            .to_bytes()
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        ed25519_dalek::SigningKey::from_bytes(seed.expose())
            .sign(msg)
            .to_bytes()
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        let Ok(vk) = ed25519_dalek::VerifyingKey::from_bytes(public) else {
            return false;
        };
        vk.verify(msg, &ed25519_dalek::Signature::from_bytes(sig))
            .is_ok()
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        let sk = k256::schnorr::SigningKey::from_bytes(secret.expose().into())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        Ok(sk.verifying_key().to_bytes().into())
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        let sk = k256::schnorr::SigningKey::from_bytes(secret.expose().into())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        // `sign_raw` fails only when the nonce or `s` is zero, which happens with probability
        // about 2^-256; BIP-340 says to fail rather than retry with another nonce.
        let sig = sk
            .sign_raw(msg, aux)
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        Ok(sig.to_bytes())
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        let Ok(vk) = k256::schnorr::VerifyingKey::from_bytes(public.into()) else {
            return false;
        };
        let Ok(sig) = k256::schnorr::Signature::from_bytes(sig) else {
            return false;
        };
        vk.verify_raw(msg, &sig).is_ok()
    }

    fn aes256gcm_seal(&self, key: &[u8; 32], nonce: &[u8; 12], aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let cipher = Aes256Gcm::new(key.into());
        // The only failure is a plaintext over GCM's 2^36-byte limit. An empty result is not a
        // valid sealed message (it lacks the tag), so such a message can never be opened rather
        // than panicking here.
        cipher
            .encrypt(nonce.into(), Payload { msg: plaintext, aad })
            .unwrap_or_default()
    }

    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        let cipher = Aes256Gcm::new(key.into());
        cipher
            .decrypt(nonce.into(), Payload { msg: sealed, aad })
            .map_err(|_| CryptoError::Decrypt)
    }
}
