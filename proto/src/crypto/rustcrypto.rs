//! The default provider: RustCrypto, pure Rust and `no_std`.

use alloc::vec::Vec;

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{Aead, KeyInit, Payload};
// One `signature` crate serves p256 and ed25519-dalek, so these traits cover both.
use ed25519_dalek::{Signer as _, Verifier as _};
use hmac::{Hmac, Mac as _};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::{
    CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret, X25519Secret,
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

    fn p256_is_point(&self, public: &P256Public) -> bool {
        p256::PublicKey::from_sec1_bytes(&public.0).is_ok()
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        let sk = p256::SecretKey::from_bytes(secret.expose().into())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        let pk =
            p256::PublicKey::from_sec1_bytes(&peer.0).map_err(|_| CryptoError::InvalidPublicKey)?;
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

    fn x25519_public_key(&self, secret: &X25519Secret) -> [u8; 32] {
        curve25519_dalek::montgomery::MontgomeryPoint::mul_base_clamped(*secret.expose()).to_bytes()
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

    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError> {
        let sk = k256::SecretKey::from_bytes(secret.expose().into())
            .map_err(|_| CryptoError::InvalidSecretKey)?;
        // lift_x: the point with this x and an even y, which is the compressed form `02 ‖ x`.
        let mut sec1 = [0u8; 33];
        sec1[0] = 2;
        sec1[1..].copy_from_slice(peer);
        let pk =
            k256::PublicKey::from_sec1_bytes(&sec1).map_err(|_| CryptoError::InvalidPublicKey)?;
        let shared = k256::ecdh::diffie_hellman(sk.to_nonzero_scalar(), pk.as_affine());
        Ok((*shared.raw_secret_bytes()).into())
    }

    fn chacha20(&self, key: &[u8; 32], nonce: &[u8; 12], data: &[u8]) -> Vec<u8> {
        use chacha20::cipher::{KeyIvInit as _, StreamCipher as _};
        let mut out = data.to_vec();
        let mut cipher = chacha20::ChaCha20::new(key.into(), nonce.into());
        // RFC 8439's 32-bit counter covers 256 GiB; anything longer is not encrypted (an empty
        // result, as for AES-GCM over its limit). NIP-44 bodies are at most 65 538 bytes.
        if cipher.try_apply_keystream(&mut out).is_err() {
            return Vec::new();
        }
        out
    }

    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8> {
        let cipher = Aes256Gcm::new(key.into());
        // The only failure is a plaintext over GCM's 2^36-byte limit. An empty result is not a
        // valid sealed message (it lacks the tag), so such a message can never be opened rather
        // than panicking here.
        cipher
            .encrypt(
                nonce.into(),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
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

#[cfg(test)]
mod tests {
    use data_encoding::HEXLOWER_PERMISSIVE as HEX;

    use super::*;

    fn h(s: &str) -> Vec<u8> {
        HEX.decode(s.as_bytes()).unwrap()
    }

    fn h32(s: &str) -> [u8; 32] {
        h(s).try_into().unwrap()
    }

    fn h64(s: &str) -> [u8; 64] {
        h(s).try_into().unwrap()
    }

    const P: RustCrypto = RustCrypto;

    #[test]
    fn sha256_abc() {
        let want = h("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(P.sha256(&[b"abc"]).as_slice(), want);
        assert_eq!(P.sha256(&[b"a", b"", b"bc"]).as_slice(), want);
    }

    #[test]
    fn hmac_sha256_rfc4231() {
        // Case 2.
        let mac = P.hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(mac.as_slice(), h(want));
        // Case 6: a key longer than the block, which HMAC hashes first.
        let mac = P.hmac_sha256(
            &[0xaa; 131],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"],
        );
        let want = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54";
        assert_eq!(mac.as_slice(), h(want));
    }

    #[test]
    fn hmac_sha1_rfc2202() {
        // Case 2.
        let mac = P.hmac_sha1(b"Jefe", &[b"what do ya want for nothing?"]);
        assert_eq!(
            mac.as_slice(),
            h("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
        );
        // Case 6: an 80-byte key.
        let mac = P.hmac_sha1(
            &[0xaa; 80],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"],
        );
        assert_eq!(
            mac.as_slice(),
            h("aa4ae5e15272d00e95705637ce8a3b55ed402112")
        );
    }

    #[test]
    fn aes256gcm_known_answer() {
        // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 16.
        let key = h32("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
        let nonce: [u8; 12] = h("cafebabefacedbaddecaf888").try_into().unwrap();
        let pt = h(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let aad = h("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let want = h(
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662\
                       76fc6ece0f4e1768cddf8853bb2d551b",
        );
        let sealed = P.aes256gcm_seal(&key, &nonce, &aad, &pt);
        assert_eq!(sealed, want);
        assert_eq!(P.aes256gcm_open(&key, &nonce, &aad, &sealed).unwrap(), pt);

        for i in [0, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(
                P.aes256gcm_open(&key, &nonce, &aad, &bad),
                Err(CryptoError::Decrypt)
            );
        }
        assert_eq!(
            P.aes256gcm_open(&key, &nonce, b"", &sealed),
            Err(CryptoError::Decrypt)
        );
        for short in [&[][..], &sealed[..15]] {
            assert_eq!(
                P.aes256gcm_open(&key, &nonce, &aad, short),
                Err(CryptoError::Decrypt)
            );
        }
    }

    #[test]
    fn ed25519_rfc8032_test1() {
        let seed = Ed25519Seed::from_bytes(h32(
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        ));
        let public = P.ed25519_public_key(&seed);
        assert_eq!(
            public,
            h32("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let sig = P.ed25519_sign(&seed, b"");
        assert_eq!(
            sig,
            h64(
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
            )
        );
        assert!(P.ed25519_verify(&public, b"", &sig));
        assert!(!P.ed25519_verify(&public, b"x", &sig));
        let mut bad = sig;
        bad[63] ^= 0x80;
        assert!(!P.ed25519_verify(&public, b"", &bad));
        // Not a point: y = 2 has no x on the curve.
        let mut not_point = [0u8; 32];
        not_point[0] = 2;
        assert!(!P.ed25519_verify(&not_point, b"", &sig));
        assert!(!P.ed25519_verify(&[0xff; 32], b"", &[0xff; 64]));
    }

    #[test]
    fn x25519_public_keys_match_rfc7748() {
        // RFC 7748 §6.1: Alice's and Bob's private keys and their public keys.
        for (secret, public) in [
            (
                "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
                "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
            ),
            (
                "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
                "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f",
            ),
        ] {
            let secret = super::super::X25519Secret::from_bytes(h32(secret));
            assert_eq!(P.x25519_public_key(&secret), h32(public));
        }
    }

    #[test]
    fn schnorr_bip340_vectors() {
        // BIP-340 test vector 1.
        let secret = Secp256k1Secret::from_bytes(h32(
            "b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfef",
        ));
        let public = h32("dff1d77f2a671c5f36183726db2341be58feae1da2deced843240f7b502ba659");
        let aux = h32("0000000000000000000000000000000000000000000000000000000000000001");
        let msg = h32("243f6a8885a308d313198a2e03707344a4093822299f31d0082efa98ec4e6c89");
        let want = h64(
            "6896bd60eeae296db48a229ff71dfe071bde413e6d43f917dc8dcf8c78de33418906d11ac976abccb20b091292bff4ea897efcb639ea871cfa95f6de339e4b0a",
        );
        assert_eq!(P.schnorr_public_key(&secret).unwrap(), public);
        assert_eq!(P.schnorr_sign(&secret, &msg, &aux).unwrap(), want);
        assert!(P.schnorr_verify(&public, &msg, &want));

        // Test vector 5: the public key is not on the curve.
        let off_curve = h32("eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34");
        let sig5 = h64(
            "6cff5c3ba86c69ea4b7376f31a9bcb4f74c1976089b2d9963da2e5543e17776969e89b4c5564d00349106b8497785dd7d1d713a8ae82b32fa79d5f7fc407d39b",
        );
        assert!(!P.schnorr_verify(&off_curve, &msg, &sig5));
        // Test vector 6: R has an odd y.
        let sig6 = h64(
            "fff97bd5755eeea420453a14355235d382f6472f8568a18b2f057a14602975563cc27944640ac607cd107ae10923d9ef7a73c643e166be5ebeafa34b1ac553e2",
        );
        assert!(!P.schnorr_verify(&public, &msg, &sig6));

        let mut other_msg = msg;
        other_msg[0] ^= 1;
        assert!(!P.schnorr_verify(&public, &other_msg, &want));
        assert!(!P.schnorr_verify(&[0xff; 32], &msg, &want));
        assert!(!P.schnorr_verify(&public, &msg, &[0xff; 64]));
        assert_eq!(
            P.schnorr_public_key(&Secp256k1Secret::from_bytes([0; 32])),
            Err(CryptoError::InvalidSecretKey)
        );
    }

    /// RFC 6979 A.2.5: the P-256 key.
    fn rfc6979_secret() -> P256Secret {
        P256Secret::from_bytes(h32(
            "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721",
        ))
    }

    #[test]
    fn p256_rfc6979_sample() {
        let secret = rfc6979_secret();
        let public = P.p256_public_key(&secret).unwrap();
        // Ux, with 03 because Uy (…2299) is odd.
        let mut want_pub = [0u8; 33];
        want_pub[0] = 0x03;
        want_pub[1..].copy_from_slice(&h(
            "60fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6",
        ));
        assert_eq!(public, P256Public(want_pub));

        let sig = P.p256_sign(&secret, b"sample").unwrap();
        let want = h64(
            "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8",
        );
        assert_eq!(sig, want);
        assert!(P.p256_verify(&public, b"sample", &sig));
    }

    // High-S and low-S both verifying is a rule for every provider: it is tested once, across
    // providers, in drivers/tests/crypto_providers.rs.

    #[test]
    fn p256_round_trip_and_rejections() {
        let secret = P256Secret::from_bytes([7; 32]);
        let public = P.p256_public_key(&secret).unwrap();
        let sig = P.p256_sign(&secret, b"hello").unwrap();
        assert_eq!(
            sig,
            P.p256_sign(&secret, b"hello").unwrap(),
            "deterministic"
        );
        assert!(P.p256_verify(&public, b"hello", &sig));
        assert!(P.p256_is_point(&public));
        assert!(!P.p256_verify(&public, b"hellp", &sig));
        let mut bad = sig;
        bad[5] ^= 1;
        assert!(!P.p256_verify(&public, b"hello", &bad));

        // r = 0, s = 0, and r, s >= n are malformed, not panics.
        assert!(!P.p256_verify(&public, b"hello", &[0; 64]));
        assert!(!P.p256_verify(&public, b"hello", &[0xff; 64]));
        // Garbage keys: all zero, bad prefix, x >= p, x = 1 (x^3 - 3x + b has no square root),
        // and an uncompressed prefix on a compressed body.
        let mut x_one = [0u8; 33];
        x_one[0] = 0x02;
        x_one[32] = 1;
        let mut x_too_big = [0xff; 33];
        x_too_big[0] = 0x02;
        let mut wrong_prefix = public.0;
        wrong_prefix[0] = 0x04;
        for garbage in [[0u8; 33], [0xff; 33], x_too_big, x_one, wrong_prefix] {
            assert!(!P.p256_verify(&P256Public(garbage), b"hello", &sig));
            assert!(P.p256_ecdh(&secret, &P256Public(garbage)).is_err());
            assert!(!P.p256_is_point(&P256Public(garbage)));
        }

        for bad_secret in [[0u8; 32], [0xff; 32]] {
            let s = P256Secret::from_bytes(bad_secret);
            assert_eq!(P.p256_public_key(&s), Err(CryptoError::InvalidSecretKey));
            assert_eq!(P.p256_sign(&s, b"x"), Err(CryptoError::InvalidSecretKey));
            assert_eq!(P.p256_ecdh(&s, &public), Err(CryptoError::InvalidSecretKey));
        }
    }

    #[test]
    fn p256_ecdh_is_symmetric() {
        let a = P256Secret::from_bytes([1; 32]);
        let b = P256Secret::from_bytes([2; 32]);
        let pa = P.p256_public_key(&a).unwrap();
        let pb = P.p256_public_key(&b).unwrap();
        let ab = P.p256_ecdh(&a, &pb).unwrap();
        assert_eq!(ab, P.p256_ecdh(&b, &pa).unwrap());
        assert_ne!(ab, P.p256_ecdh(&a, &pa).unwrap());
    }
}
