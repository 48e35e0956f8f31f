//! Both crypto providers pass the same known-answer vectors, and agree with each other on random
//! keys and messages: anything one signs, seals or derives, the other accepts or reproduces.
#![cfg(feature = "fast-crypto")]

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use weft_drivers::fast_crypto::FastCrypto;
use weft_proto::crypto::{
    self, CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, RustCrypto,
    Secp256k1Secret, sigstring,
};

const PROVIDERS: [&dyn CryptoProvider; 2] = [&RustCrypto, &FastCrypto];

/// Random cases per property.
const CASES: usize = 300;

fn h(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn h32(s: &str) -> [u8; 32] {
    h(s).try_into().unwrap()
}

fn h64(s: &str) -> [u8; 64] {
    h(s).try_into().unwrap()
}

/// `n - s` for P-256's group order `n`: the other valid `s` of an ECDSA signature.
fn negate_s(sig: &[u8; 64]) -> [u8; 64] {
    let n = h32("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
    let mut out = *sig;
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(n[i]) - i16::from(sig[32 + i]) - borrow;
        borrow = i16::from(d < 0);
        out[32 + i] = d.rem_euclid(256) as u8;
    }
    out
}

fn random_bytes(rng: &mut ChaCha20Rng, max_len: usize) -> Vec<u8> {
    let len = (rng.next_u32() as usize) % (max_len + 1);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

fn random32(rng: &mut ChaCha20Rng) -> [u8; 32] {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    b
}

#[test]
fn hash_and_mac_vectors() {
    for p in PROVIDERS {
        let name = p.name();
        assert_eq!(
            p.sha256(&[b"ab", b"c"]),
            h32("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            "{name}"
        );
        // RFC 4231 cases 2 and 6.
        assert_eq!(
            p.hmac_sha256(b"Jefe", &[b"what do ya want for nothing?"]),
            h32("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            "{name}"
        );
        assert_eq!(
            p.hmac_sha256(
                &[0xaa; 131],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            ),
            h32("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
            "{name}"
        );
        // RFC 2202 case 2.
        assert_eq!(
            p.hmac_sha1(b"Jefe", &[b"what do ya ", b"want for nothing?"])
                .to_vec(),
            h("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
            "{name}"
        );
    }
}

#[test]
fn aes256gcm_vector() {
    // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 16.
    let key = h32("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
    let nonce: [u8; 12] = h("cafebabefacedbaddecaf888").try_into().unwrap();
    let pt = h(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
    );
    let aad = h("feedfacedeadbeeffeedfacedeadbeefabaddad2");
    let want = h(
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f66276fc6ece0f4e1768cddf8853bb2d551b",
    );
    for p in PROVIDERS {
        let sealed = p.aes256gcm_seal(&key, &nonce, &aad, &pt);
        assert_eq!(sealed, want, "{}", p.name());
        assert_eq!(p.aes256gcm_open(&key, &nonce, &aad, &sealed).unwrap(), pt);
        let mut bad = sealed.clone();
        bad[3] ^= 0x40;
        assert_eq!(
            p.aes256gcm_open(&key, &nonce, &aad, &bad),
            Err(CryptoError::Decrypt)
        );
        assert_eq!(
            p.aes256gcm_open(&key, &nonce, &aad, &sealed[..10]),
            Err(CryptoError::Decrypt)
        );
    }
}

#[test]
fn ed25519_and_airc_vectors() {
    let seed = Ed25519Seed::from_bytes(h32(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    ));
    let public = h32("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
    let sig = h64(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    );

    let mut airc_seed = [0u8; 32];
    for (i, b) in airc_seed.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let airc_seed = Ed25519Seed::from_bytes(airc_seed);
    let airc_public = h32("79b5562e8fe654f94078b112e8a98ba7901f853ae695bed7e0e3910bad049664");
    let airc_msg = b"0f5a3c2e-9b1d-4e77-a6c8-1d2e3f4a5b6c\nairc://example.com/alice/x\nairc://partner.example/support/desk\n1790380000123\ntext/plain\n\nhello";
    let airc_sig = "ed25519:65b60673:oyBI45ZxQdCsc8sPRs4SMLnfo5jHuqHHuOQ9SG6WIhu+le9DbGRBzmrZQj+sli7/PNwS2aJWL4l+KVx2q/b3BA==";

    for p in PROVIDERS {
        let name = p.name();
        // RFC 8032 test 1.
        assert_eq!(p.ed25519_public_key(&seed), public, "{name}");
        assert_eq!(p.ed25519_sign(&seed, b""), sig, "{name}");
        assert!(p.ed25519_verify(&public, b"", &sig), "{name}");
        assert!(!p.ed25519_verify(&public, b"\0", &sig), "{name}");
        assert!(!p.ed25519_verify(&[0xff; 32], b"", &sig), "{name}");

        // AIRC's signature string.
        assert_eq!(p.ed25519_public_key(&airc_seed), airc_public, "{name}");
        assert_eq!(sigstring::kid(p, &airc_public), "65b60673", "{name}");
        assert_eq!(
            sigstring::sign(p, &airc_seed, airc_msg).to_string(),
            airc_sig,
            "{name}"
        );
        let parsed = sigstring::SigString::parse(airc_sig).unwrap();
        assert!(
            sigstring::verify(p, &airc_public, airc_msg, &parsed),
            "{name}"
        );
        assert!(!sigstring::verify(p, &public, airc_msg, &parsed), "{name}");
    }
}

#[test]
fn schnorr_bip340_vectors() {
    let secret = Secp256k1Secret::from_bytes(h32(
        "b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfef",
    ));
    let public = h32("dff1d77f2a671c5f36183726db2341be58feae1da2deced843240f7b502ba659");
    let aux = h32("0000000000000000000000000000000000000000000000000000000000000001");
    let msg = h32("243f6a8885a308d313198a2e03707344a4093822299f31d0082efa98ec4e6c89");
    let sig = h64(
        "6896bd60eeae296db48a229ff71dfe071bde413e6d43f917dc8dcf8c78de33418906d11ac976abccb20b091292bff4ea897efcb639ea871cfa95f6de339e4b0a",
    );
    let off_curve = h32("eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34");
    let sig5 = h64(
        "6cff5c3ba86c69ea4b7376f31a9bcb4f74c1976089b2d9963da2e5543e17776969e89b4c5564d00349106b8497785dd7d1d713a8ae82b32fa79d5f7fc407d39b",
    );
    let odd_r = h64(
        "fff97bd5755eeea420453a14355235d382f6472f8568a18b2f057a14602975563cc27944640ac607cd107ae10923d9ef7a73c643e166be5ebeafa34b1ac553e2",
    );
    for p in PROVIDERS {
        let name = p.name();
        assert_eq!(p.schnorr_public_key(&secret).unwrap(), public, "{name}");
        assert_eq!(p.schnorr_sign(&secret, &msg, &aux).unwrap(), sig, "{name}");
        assert!(p.schnorr_verify(&public, &msg, &sig), "{name}");
        assert!(!p.schnorr_verify(&off_curve, &msg, &sig5), "{name}");
        assert!(!p.schnorr_verify(&public, &msg, &odd_r), "{name}");
        assert!(!p.schnorr_verify(&public, &msg, &[0xff; 64]), "{name}");
        assert_eq!(
            p.schnorr_public_key(&Secp256k1Secret::from_bytes([0; 32])),
            Err(CryptoError::InvalidSecretKey),
            "{name}"
        );
    }
}

#[test]
fn p256_vectors() {
    // RFC 6979 A.2.5, SHA-256, "sample".
    let secret = P256Secret::from_bytes(h32(
        "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721",
    ));
    let public = P256Public(
        h("0360fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6")
            .try_into()
            .unwrap(),
    );
    let sig = h64(
        "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8",
    );
    let mut x_one = [0u8; 33];
    x_one[0] = 0x02;
    x_one[32] = 1;
    for p in PROVIDERS {
        let name = p.name();
        assert_eq!(p.p256_public_key(&secret).unwrap(), public, "{name}");
        assert_eq!(p.p256_sign(&secret, b"sample").unwrap(), sig, "{name}");
        // The RFC's s is high; WebCrypto does not normalize, so both forms must verify.
        assert!(p.p256_verify(&public, b"sample", &sig), "{name}");
        assert!(p.p256_verify(&public, b"sample", &negate_s(&sig)), "{name}");
        assert!(!p.p256_verify(&public, b"samplf", &sig), "{name}");
        assert!(p.p256_is_point(&public), "{name}");
        for garbage in [[0u8; 33], [0xff; 33], x_one] {
            assert!(!p.p256_is_point(&P256Public(garbage)), "{name}");
            assert!(
                !p.p256_verify(&P256Public(garbage), b"sample", &sig),
                "{name}"
            );
            assert_eq!(
                p.p256_ecdh(&secret, &P256Public(garbage)),
                Err(CryptoError::InvalidPublicKey),
                "{name}"
            );
        }
        assert!(!p.p256_verify(&public, b"sample", &[0; 64]), "{name}");
        assert!(!p.p256_verify(&public, b"sample", &[0xff; 64]), "{name}");
    }
}

#[test]
fn p256_cross_sign_verify() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0001);
    for _ in 0..CASES {
        let secret = crypto::generate_p256(&RustCrypto, &mut rng);
        let msg = random_bytes(&mut rng, 300);
        let public = RustCrypto.p256_public_key(&secret).unwrap();
        assert_eq!(FastCrypto.p256_public_key(&secret).unwrap(), public);
        let sig = RustCrypto.p256_sign(&secret, &msg).unwrap();
        // RFC 6979 is deterministic, so the providers must produce the same bytes.
        assert_eq!(FastCrypto.p256_sign(&secret, &msg).unwrap(), sig);
        for p in PROVIDERS {
            assert!(p.p256_verify(&public, &msg, &sig));
        }
        // Debug-build P-256 is slow, so the high-S twin and a one-bit tamper go to one
        // provider per case, alternating.
        let p = PROVIDERS[(rng.next_u32() % 2) as usize];
        assert!(p.p256_verify(&public, &msg, &negate_s(&sig)));
        let mut bad = sig;
        bad[(rng.next_u32() % 64) as usize] ^= 1 << (rng.next_u32() % 8);
        assert!(!p.p256_verify(&public, &msg, &bad));
        // Random bytes as key and signature: both providers refuse, neither panics.
        let mut key = [0u8; 33];
        rng.fill_bytes(&mut key);
        key[0] = 2 + (key[0] & 1);
        let mut sig = [0u8; 64];
        rng.fill_bytes(&mut sig);
        for p in PROVIDERS {
            assert!(!p.p256_verify(&P256Public(key), &msg, &sig));
        }
    }
}

#[test]
fn p256_ecdh_agrees_across_providers() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0002);
    for _ in 0..CASES {
        let a = crypto::generate_p256(&FastCrypto, &mut rng);
        let b = crypto::generate_p256(&RustCrypto, &mut rng);
        let pa = FastCrypto.p256_public_key(&a).unwrap();
        let pb = RustCrypto.p256_public_key(&b).unwrap();
        let ab = RustCrypto.p256_ecdh(&a, &pb).unwrap();
        assert_eq!(FastCrypto.p256_ecdh(&b, &pa).unwrap(), ab);
        assert_eq!(FastCrypto.p256_ecdh(&a, &pb).unwrap(), ab);
    }
}

#[test]
fn ed25519_cross_sign_verify() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0003);
    for _ in 0..CASES {
        let seed = crypto::generate_ed25519(&mut rng);
        let msg = random_bytes(&mut rng, 300);
        let public = RustCrypto.ed25519_public_key(&seed);
        assert_eq!(FastCrypto.ed25519_public_key(&seed), public);
        let sig = RustCrypto.ed25519_sign(&seed, &msg);
        // Ed25519 is deterministic, so the providers must produce the same bytes.
        assert_eq!(FastCrypto.ed25519_sign(&seed, &msg), sig);
        let mut bad = sig;
        bad[(rng.next_u32() % 64) as usize] ^= 1 << (rng.next_u32() % 8);
        let mut junk_key = [0u8; 32];
        rng.fill_bytes(&mut junk_key);
        for p in PROVIDERS {
            assert!(p.ed25519_verify(&public, &msg, &sig));
            assert!(!p.ed25519_verify(&public, &msg, &bad));
        }
        assert_eq!(
            RustCrypto.ed25519_verify(&junk_key, &msg, &sig),
            FastCrypto.ed25519_verify(&junk_key, &msg, &sig)
        );
    }
}

#[test]
fn schnorr_cross_sign_verify() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0004);
    for _ in 0..CASES {
        let secret = crypto::generate_secp256k1(&RustCrypto, &mut rng);
        let msg = random32(&mut rng);
        let aux = random32(&mut rng);
        let public = RustCrypto.schnorr_public_key(&secret).unwrap();
        assert_eq!(FastCrypto.schnorr_public_key(&secret).unwrap(), public);
        let sig = RustCrypto.schnorr_sign(&secret, &msg, &aux).unwrap();
        // BIP-340 is deterministic given the aux bytes.
        assert_eq!(FastCrypto.schnorr_sign(&secret, &msg, &aux).unwrap(), sig);
        let mut bad = sig;
        bad[(rng.next_u32() % 64) as usize] ^= 1 << (rng.next_u32() % 8);
        let junk_key = random32(&mut rng);
        for p in PROVIDERS {
            assert!(p.schnorr_verify(&public, &msg, &sig));
            assert!(!p.schnorr_verify(&public, &msg, &bad));
        }
        assert_eq!(
            RustCrypto.schnorr_verify(&junk_key, &msg, &sig),
            FastCrypto.schnorr_verify(&junk_key, &msg, &sig)
        );
    }
}

#[test]
fn aes256gcm_across_providers() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0005);
    for _ in 0..CASES {
        let key = random32(&mut rng);
        let mut nonce = [0u8; 12];
        rng.fill_bytes(&mut nonce);
        let aad = random_bytes(&mut rng, 40);
        let pt = random_bytes(&mut rng, 600);
        let sealed = RustCrypto.aes256gcm_seal(&key, &nonce, &aad, &pt);
        assert_eq!(FastCrypto.aes256gcm_seal(&key, &nonce, &aad, &pt), sealed);
        let mut bad = sealed.clone();
        bad[(rng.next_u32() as usize) % sealed.len()] ^= 1;
        for p in PROVIDERS {
            assert_eq!(p.aes256gcm_open(&key, &nonce, &aad, &sealed).unwrap(), pt);
            assert_eq!(
                p.aes256gcm_open(&key, &nonce, &aad, &bad),
                Err(CryptoError::Decrypt)
            );
        }
    }
}

#[test]
fn hashes_and_macs_agree() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x7765_6674_0006);
    for _ in 0..CASES {
        // Keys up to 200 bytes cross the 64-byte block, where HMAC hashes the key first.
        let key = random_bytes(&mut rng, 200);
        let a = random_bytes(&mut rng, 300);
        let b = random_bytes(&mut rng, 300);
        let parts: [&[u8]; 2] = [&a, &b];
        assert_eq!(RustCrypto.sha256(&parts), FastCrypto.sha256(&parts));
        assert_eq!(
            RustCrypto.hmac_sha256(&key, &parts),
            FastCrypto.hmac_sha256(&key, &parts)
        );
        assert_eq!(
            RustCrypto.hmac_sha1(&key, &parts),
            FastCrypto.hmac_sha1(&key, &parts)
        );
    }
}
