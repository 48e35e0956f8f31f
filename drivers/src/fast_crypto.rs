//! A native-backed crypto provider for servers: `ring` and libsecp256k1.
//!
//! [`FastCrypto`] implements the same [`CryptoProvider`] as the default [`RustCrypto`] and
//! passes the same vectors, but verifies P-256 signatures (Minca's hot path: every
//! rendezvous message and peer proof) about 4 times faster and BIP-340 Schnorr about twice as fast. Hand it to
//! machines on a relay or realm server; keep RustCrypto on devices and wherever `no_std` matters.

use p256::elliptic_curve::sec1::ToSec1Point as _;
use ring::{aead, digest, hmac, signature};
use weft_proto::crypto::{
    CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, RustCrypto, Secp256k1Secret,
};

/// The fast provider: `ring` for P-256 verification, Ed25519 signing, AES-256-GCM, SHA-256 and
/// HMAC; libsecp256k1 (the `secp256k1` crate) for BIP-340 Schnorr.
///
/// P-256 key derivation, signing and ECDH go to [`RustCrypto`]: ring signs ECDSA only with a
/// random nonce drawn from its own `SecureRandom`, which would make signatures non-deterministic
/// and take randomness the machines did not inject, and its ECDH accepts only ephemeral keys it
/// generated itself. Those operations are rare next to verification, so nothing is lost.
/// Ed25519 verification also stays with RustCrypto, because ed25519-dalek measured faster than
/// ring for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastCrypto;

fn sha256_ctx(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

fn hmac_parts<const N: usize>(alg: hmac::Algorithm, key: &[u8], parts: &[&[u8]]) -> [u8; N] {
    let key = hmac::Key::new(alg, key);
    let mut ctx = hmac::Context::with_key(&key);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; N];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

fn aes_key(key: &[u8; 32]) -> Option<aead::LessSafeKey> {
    // `UnboundKey::new` fails only on a key of the wrong length, which the type rules out.
    aead::UnboundKey::new(&aead::AES_256_GCM, key)
        .ok()
        .map(aead::LessSafeKey::new)
}

impl CryptoProvider for FastCrypto {
    fn name(&self) -> &'static str {
        "fast"
    }

    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        sha256_ctx(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        hmac_parts(hmac::HMAC_SHA256, key, parts)
    }

    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        // TURN REST passwords are defined as HMAC-SHA1; ring keeps it only for such legacy uses.
        hmac_parts(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key, parts)
    }

    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError> {
        RustCrypto.p256_public_key(secret)
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        // Delegated so signatures stay RFC 6979 deterministic (see the type's docs).
        RustCrypto.p256_sign(secret, msg)
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        // ring takes only uncompressed points, and weft keys travel compressed (did:key), so the
        // key is decompressed here: one field square root, small next to the verification.
        let Ok(pk) = p256::PublicKey::from_sec1_bytes(&public.0) else {
            return false;
        };
        let uncompressed = pk.to_uncompressed_point();
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &uncompressed[..])
            .verify(msg, sig)
            .is_ok()
    }

    fn p256_is_point(&self, public: &P256Public) -> bool {
        RustCrypto.p256_is_point(public)
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        // ring's agreement API only takes ephemeral keys it generated; Minca box keys are static.
        RustCrypto.p256_ecdh(secret, peer)
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        match signature::Ed25519KeyPair::from_seed_unchecked(seed.expose()) {
            Ok(kp) => {
                let mut out = [0u8; 32];
                out.copy_from_slice(signature::KeyPair::public_key(&kp).as_ref());
                out
            }
            // ring rejects only a seed of the wrong length, which the type rules out; falling
            // back keeps the method total without a panic path.
            Err(_) => RustCrypto.ed25519_public_key(seed),
        }
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        match signature::Ed25519KeyPair::from_seed_unchecked(seed.expose()) {
            Ok(kp) => {
                let mut out = [0u8; 64];
                out.copy_from_slice(kp.sign(msg).as_ref());
                out
            }
            Err(_) => RustCrypto.ed25519_sign(seed, msg),
        }
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        // ed25519-dalek picks an AVX2 backend at run time on x86-64 and measured about 25%
        // faster than ring here (benches/crypto.rs), so verification stays with RustCrypto.
        RustCrypto.ed25519_verify(public, msg, sig)
    }

    fn x25519_public_key(&self, secret: &weft_proto::crypto::X25519Secret) -> [u8; 32] {
        // One fixed-base multiplication, made only when a key is made: RustCrypto's serves.
        weft_proto::crypto::default_provider().x25519_public_key(secret)
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        let kp = secp256k1::Keypair::from_secret_bytes(*secret.expose())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        Ok(kp.x_only_public_key().0.to_byte_array())
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        let kp = secp256k1::Keypair::from_secret_bytes(*secret.expose())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        Ok(secp256k1::schnorr::sign_with_aux_rand(msg, &kp, aux).to_byte_array())
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        let Ok(pk) = secp256k1::XOnlyPublicKey::from_byte_array(*public) else {
            return false;
        };
        let sig = secp256k1::schnorr::Signature::from_byte_array(*sig);
        secp256k1::schnorr::verify(&sig, msg, &pk).is_ok()
    }

    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError> {
        let sk = secp256k1::SecretKey::from_secret_bytes(*secret.expose())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        let pk = secp256k1::XOnlyPublicKey::from_byte_array(*peer)
            .map_err(|_| CryptoError::InvalidPublicKey)?
            .public_key(secp256k1::Parity::Even);
        let xy = secp256k1::ecdh::shared_secret_point(&pk, &sk);
        let mut x = [0u8; 32];
        x.copy_from_slice(&xy[..32]);
        Ok(x)
    }

    fn chacha20(&self, key: &[u8; 32], nonce: &[u8; 12], data: &[u8]) -> Vec<u8> {
        // ring offers ChaCha20 only inside its AEAD, not as the bare stream NIP-44 needs.
        RustCrypto.chacha20(key, nonce, data)
    }

    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8> {
        let Some(key) = aes_key(key) else {
            return RustCrypto.aes256gcm_seal(key, nonce, aad, plaintext);
        };
        let mut buf = Vec::with_capacity(plaintext.len() + aead::AES_256_GCM.tag_len());
        buf.extend_from_slice(plaintext);
        let nonce = aead::Nonce::assume_unique_for_key(*nonce);
        match key.seal_in_place_append_tag(nonce, aead::Aad::from(aad), &mut buf) {
            Ok(()) => buf,
            // Over GCM's length limit: the same unopenable empty result RustCrypto gives.
            Err(_) => Vec::new(),
        }
    }

    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        let Some(key) = aes_key(key) else {
            return RustCrypto.aes256gcm_open(key, nonce, aad, sealed);
        };
        let mut buf = sealed.to_vec();
        let nonce = aead::Nonce::assume_unique_for_key(*nonce);
        let len = key
            .open_in_place(nonce, aead::Aad::from(aad), &mut buf)
            .map_err(|_| CryptoError::Decrypt)?
            .len();
        buf.truncate(len);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::codec::hex;
    use weft_proto::meshstr::nip44;

    /// The fast provider's secp256k1 ECDH and ChaCha20 give RustCrypto's answers, refusals
    /// included, and open and make the published NIP-44 v2 vectors byte for byte.
    #[test]
    fn nip44_primitives_match_rustcrypto_and_the_vectors() {
        let mut secrets: Vec<[u8; 32]> = vec![[0; 32], [0xff; 32], [1; 32]];
        let mut peers: Vec<[u8; 32]> = vec![[0; 32], [0xff; 32]];
        let mut x = [7u8; 32];
        for _ in 0..64 {
            x = RustCrypto.sha256(&[&x]);
            secrets.push(x);
            peers.push(x);
            if let Ok(p) = RustCrypto.schnorr_public_key(&Secp256k1Secret::from_bytes(x)) {
                peers.push(p);
            }
        }
        for s in &secrets {
            let s = Secp256k1Secret::from_bytes(*s);
            for p in &peers {
                assert_eq!(
                    FastCrypto.secp256k1_ecdh(&s, p),
                    RustCrypto.secp256k1_ecdh(&s, p)
                );
            }
        }
        for len in [0, 1, 63, 64, 65, 1000] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(
                FastCrypto.chacha20(&[3; 32], &[4; 12], &data),
                RustCrypto.chacha20(&[3; 32], &[4; 12], &data)
            );
        }
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../vectors/meshstr/nip44.vectors.json"
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let b32 =
            |v: &serde_json::Value| -> [u8; 32] { hex::decode_array(v.as_str().unwrap()).unwrap() };
        for c in v["v2"]["valid"]["get_conversation_key"].as_array().unwrap() {
            let sk = Secp256k1Secret::from_bytes(b32(&c["sec1"]));
            let got = nip44::conversation_key(&FastCrypto, &sk, &b32(&c["pub2"])).unwrap();
            assert_eq!(hex::encode(&got), c["conversation_key"].as_str().unwrap());
        }
        for c in v["v2"]["valid"]["encrypt_decrypt"].as_array().unwrap() {
            let ck = b32(&c["conversation_key"]);
            let text = c["plaintext"].as_str().unwrap();
            let payload =
                nip44::encrypt_with_nonce(&FastCrypto, &ck, &b32(&c["nonce"]), text).unwrap();
            assert_eq!(payload, c["payload"].as_str().unwrap());
            assert_eq!(nip44::decrypt(&FastCrypto, &ck, &payload).unwrap(), text);
        }
    }
}
