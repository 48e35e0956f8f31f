//! Signature verification throughput per crypto provider: `cargo bench -p weft-drivers --bench crypto`.
//!
//! A hand-rolled loop rather than criterion keeps the dependency tree small; each line is the
//! median of a few one-second runs over a fixed set of keys and messages.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use p256::elliptic_curve::sec1::ToSec1Point as _;
use rand_core::{Rng, SeedableRng};
use weft_drivers::fast_crypto::FastCrypto;
use weft_proto::crypto::{self, CryptoProvider, Ed25519Seed, P256Public, RustCrypto};

/// Distinct keys and messages cycled through, so no cache of one key flatters a provider.
const KEYS: usize = 64;
/// Length of each signed message, about a Minca frame header.
const MSG_LEN: usize = 200;
const RUNS: usize = 3;
const RUN_TIME: Duration = Duration::from_secs(1);

struct Fixture {
    p256: Vec<(P256Public, Vec<u8>, [u8; 64])>,
    ed25519: Vec<([u8; 32], Vec<u8>, [u8; 64])>,
    schnorr: Vec<([u8; 32], [u8; 32], [u8; 64])>,
}

fn fixture() -> Fixture {
    let p = &RustCrypto;
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    let mut msg = || {
        let mut m = vec![0u8; MSG_LEN];
        rng.fill_bytes(&mut m);
        m
    };
    let mut keys = ChaCha20Rng::seed_from_u64(43);
    let mut f = Fixture {
        p256: Vec::new(),
        ed25519: Vec::new(),
        schnorr: Vec::new(),
    };
    for _ in 0..KEYS {
        let s = crypto::generate_p256(p, &mut keys);
        let m = msg();
        f.p256.push((
            p.p256_public_key(&s).unwrap(),
            m.clone(),
            p.p256_sign(&s, &m).unwrap(),
        ));

        let seed = crypto::generate_ed25519(&mut keys);
        let m = msg();
        f.ed25519.push((
            p.ed25519_public_key(&seed),
            m.clone(),
            p.ed25519_sign(&seed, &m),
        ));

        let s = crypto::generate_secp256k1(p, &mut keys);
        let m: [u8; 32] = p.sha256(&[&msg()]);
        let aux = [7u8; 32];
        f.schnorr.push((
            p.schnorr_public_key(&s).unwrap(),
            m,
            p.schnorr_sign(&s, &m, &aux).unwrap(),
        ));
    }
    f
}

/// Operations per second of `op(i)` for i cycling over the fixture, median of `RUNS`.
fn ops_per_sec(mut op: impl FnMut(usize) -> bool) -> f64 {
    let mut rates = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        let mut n = 0usize;
        while start.elapsed() < RUN_TIME {
            for _ in 0..16 {
                assert!(black_box(op(n % KEYS)));
                n += 1;
            }
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn report(what: &str, provider: &str, rate: f64) {
    println!(
        "{what:<28} {provider:<12} {rate:>10.0} ops/s  {:>7.1} µs/op",
        1e6 / rate
    );
}

fn main() {
    let f = fixture();
    let providers: [&dyn CryptoProvider; 2] = [&RustCrypto, &FastCrypto];
    for p in providers {
        let r = ops_per_sec(|i| {
            let (k, m, s) = &f.p256[i];
            p.p256_verify(k, m, s)
        });
        report("p256 verify", p.name(), r);
    }
    // What FastCrypto's decompression of compressed keys costs: ring alone on keys already
    // uncompressed, and the decompression alone.
    let uncompressed: Vec<_> = f
        .p256
        .iter()
        .map(|(k, _, _)| {
            p256::PublicKey::from_sec1_bytes(&k.0)
                .unwrap()
                .to_uncompressed_point()
        })
        .collect();
    let r = ops_per_sec(|i| {
        let (_, m, s) = &f.p256[i];
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            &uncompressed[i][..],
        )
        .verify(m, s)
        .is_ok()
    });
    report("p256 verify, uncompressed", "ring", r);
    let r = ops_per_sec(|i| p256::PublicKey::from_sec1_bytes(&f.p256[i].0.0).is_ok());
    report("p256 decompress", "p256", r);

    for p in providers {
        let r = ops_per_sec(|i| {
            let (k, m, s) = &f.ed25519[i];
            p.ed25519_verify(k, m, s)
        });
        report("ed25519 verify", p.name(), r);
    }
    // FastCrypto verifies Ed25519 with RustCrypto's dalek; this line keeps ring's number on record.
    let r = ops_per_sec(|i| {
        let (k, m, s) = &f.ed25519[i];
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, k)
            .verify(m, s)
            .is_ok()
    });
    report("ed25519 verify", "ring", r);
    let seeds: Vec<_> = (0..KEYS as u8)
        .map(|i| Ed25519Seed::from_bytes([i; 32]))
        .collect();
    for p in providers {
        let r = ops_per_sec(|i| p.ed25519_sign(&seeds[i], &f.ed25519[i].1)[63] <= 0x10);
        report("ed25519 sign", p.name(), r);
    }
    for p in providers {
        let r = ops_per_sec(|i| {
            let (k, m, s) = &f.schnorr[i];
            p.schnorr_verify(k, m, s)
        });
        report("schnorr verify", p.name(), r);
    }
}
