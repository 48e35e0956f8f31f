//! Rendezvous blobs opened and verified per second (Minca 04 Network §2), beside the P-256
//! verify ceiling measured in the same run: `cargo bench -p weft-drivers --bench rendezvous`.
//!
//! Each received hello costs an AES-256-GCM open under the room key, a JSON parse, the five
//! receiver rules and one P-256 signature verification, so verification is the ceiling. The
//! hellos are real: [`SENDERS`] rendezvous machines join one room and say hello
//! [`HELLOS_PER_SENDER`] times each (on each relay socket reopening, §2), every one with its own
//! `at`. Every pass feeds all of them, interleaved, to a fresh receiver (a second pass to the
//! same one would stop at the replay rule, before the signature) and checks that it acted on each.
//! A hand-rolled loop rather than criterion keeps the dependency tree small.

use std::hint::black_box;
use std::time::Instant;

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use weft_drivers::fast_crypto::FastCrypto;
use weft_proto::core::{Machine, Timestamp};
use weft_proto::crypto::{self, CryptoProvider, RustCrypto};
use weft_proto::minca::rendezvous::{self, RelayId, Rendezvous};
use weft_proto::minca::room::{MAX_ROOM_PEERS, Room};

/// Peers saying hello: every peer a room holds besides the receiver.
const SENDERS: usize = MAX_ROOM_PEERS - 1;
/// Hellos from each, each with its own `at` (well under the 256 acted on per peer).
const HELLOS_PER_SENDER: usize = 64;
/// Passes over the whole set; the median is reported.
const RUNS: usize = 3;
/// Signatures in the verify-ceiling loop, cycled.
const KEYS: usize = 64;

/// When the senders say their first hello; every `at` and every receive lies within the 2-minute
/// window of §2 rule 3.
const T0: u64 = 1_800_000_000_000;

/// Every hello of every sender, interleaved (one from each sender in turn).
fn hellos(provider: &'static dyn CryptoProvider, room: &Room) -> Vec<(String, String)> {
    let mut per_sender: Vec<Vec<(String, String)>> = Vec::new();
    for s in 0..SENDERS {
        let mut rng = ChaCha20Rng::seed_from_u64(1000 + s as u64);
        let session = crypto::generate_p256(provider, &mut rng);
        let mut m = Rendezvous::new(session, provider, rng).expect("a valid session key");
        m.handle(
            Timestamp::from_millis(T0),
            rendezvous::Input::Join(room.clone()),
        );
        for k in 1..HELLOS_PER_SENDER {
            // A socket reopening: a hello on it, `at` one millisecond later each time.
            m.handle(
                Timestamp::from_millis(T0 + k as u64),
                rendezvous::Input::RelayOpened(RelayId(0)),
            );
        }
        let mut mine = Vec::new();
        while let Some(out) = m.poll() {
            if let rendezvous::Output::Publish { topic, blob, .. } = out {
                mine.push((topic, blob));
            }
        }
        assert_eq!(
            mine.len(),
            HELLOS_PER_SENDER,
            "one hello per join or reopening"
        );
        per_sender.push(mine);
    }
    (0..HELLOS_PER_SENDER)
        .flat_map(|k| per_sender.iter().map(move |m| m[k].clone()))
        .collect()
}

/// Blobs per second one fresh receiver takes, every one acted on; median of [`RUNS`].
fn receive_rate(
    provider: &'static dyn CryptoProvider,
    room: &Room,
    blobs: &[(String, String)],
) -> f64 {
    let mut rates = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        let mut rng = ChaCha20Rng::seed_from_u64(7 + run as u64);
        let session = crypto::generate_p256(provider, &mut rng);
        let mut m = Rendezvous::new(session, provider, rng).expect("a valid session key");
        let now = Timestamp::from_millis(T0 + HELLOS_PER_SENDER as u64);
        m.handle(now, rendezvous::Input::Join(room.clone()));
        while m.poll().is_some() {}
        let start = Instant::now();
        for (topic, blob) in blobs {
            m.handle(
                now,
                rendezvous::Input::Blob {
                    relay: RelayId(0),
                    topic: topic.clone(),
                    blob: blob.clone(),
                },
            );
            while let Some(out) = m.poll() {
                black_box(out);
            }
        }
        let elapsed = start.elapsed();
        assert_eq!(
            m.ignored_total(),
            0,
            "every hello was opened, verified and acted on"
        );
        assert_eq!(m.peers(room).len(), SENDERS);
        rates.push(blobs.len() as f64 / elapsed.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

/// P-256 verifications per second over [`KEYS`] keys and messages of a hello's size, median of
/// [`RUNS`] runs of the same count as a receive pass.
fn verify_rate(provider: &dyn CryptoProvider, count: usize) -> f64 {
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    let fixture: Vec<_> = (0..KEYS)
        .map(|_| {
            let secret = crypto::generate_p256(provider, &mut rng);
            let mut msg = vec![0u8; 300];
            rng.fill_bytes(&mut msg);
            let sig = provider.p256_sign(&secret, &msg).unwrap();
            (provider.p256_public_key(&secret).unwrap(), msg, sig)
        })
        .collect();
    let mut rates = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        for i in 0..count {
            let (k, m, s) = &fixture[i % KEYS];
            assert!(black_box(provider.p256_verify(k, m, s)));
        }
        rates.push(count as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn main() {
    let providers: [&'static dyn CryptoProvider; 2] = [&RustCrypto, &FastCrypto];
    println!(
        "{SENDERS} senders x {HELLOS_PER_SENDER} hellos = {} blobs a pass, median of {RUNS}",
        SENDERS * HELLOS_PER_SENDER
    );
    for provider in providers {
        let room = Room::of_space(provider, "bench-rendezvous");
        let blobs = hellos(provider, &room);
        let chars: usize = blobs.iter().map(|(_, b)| b.len()).sum::<usize>() / blobs.len();
        let received = receive_rate(provider, &room, &blobs);
        let ceiling = verify_rate(provider, blobs.len());
        println!(
            "{:<12} hellos opened+verified {received:>8.0}/s   p256 verify {ceiling:>8.0}/s   \
             ratio {:.2}   (blob {chars} chars)",
            provider.name(),
            received / ceiling
        );
    }
}
