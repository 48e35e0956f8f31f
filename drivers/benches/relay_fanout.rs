//! Minca relay fan-out over loopback (Minca 04 Network §1.4): blobs per second a `weft relay`
//! delivers to the watchers of one topic, `cargo bench -p weft-drivers --bench relay_fanout`.
//!
//! 64 WebSocket clients (a room's most peers, §2) watch one topic on a relay served in this
//! process by the same code as `weft relay`, each from its own loopback address (127.0.0.10 and
//! up), since one address may hold only `MAX_SOCKETS_PER_ADDRESS` sockets. Every publish is a
//! `drop` with `ttl: 0`, which the relay sends to the topic's other watchers (at most 63) and keeps
//! nowhere. A socket's rate budget (`RATE_BUDGET`: a burst of 60, 30 a second) bounds what one
//! publisher may send, so each round is one full burst, sent after the budget refilled:
//!
//! - one publisher: 60 blobs to 63 watchers, 3 780 deliveries;
//! - every client publishing, back to back: 64 × 15 blobs, each to the 63 others, 60 480 deliveries.
//!   Not 64 × 60: when this bench was written `weft relay` cut off a socket 1 024 frames behind,
//!   and 64 full bursts at once put 3 840 frames before every watcher (measured: a quarter of
//!   the sockets cut off). 15 each kept 960; the bound is now the host's `MAX_QUEUED_BYTES`
//!   (4 MiB per connection), which these small frames stay far below.
//!
//! A round's time runs from its first send to its last delivery; the median round is reported.
//! The relay runs on one thread, the clients on smol's executor. A hand-rolled loop rather than
//! criterion keeps the dependency tree small.

#[path = "../tests/common/relay.rs"]
mod relay;
use relay::Running;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_tungstenite::WebSocketSender;
use async_tungstenite::tungstenite::Message;
use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_proto::codec::base64url;
use weft_proto::minca::relay_server::{MAX_WATCHERS_PER_TOPIC, RATE_BUDGET};

const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";
/// Clients on the topic: as many as may watch it.
const CLIENTS: usize = MAX_WATCHERS_PER_TOPIC;
/// Random bytes in a blob: 600 base64url characters, about a sealed rendezvous offer.
const BLOB_BYTES: usize = 450;
/// Blobs the one publisher sends in a round: its whole burst.
const BURST: u64 = RATE_BUDGET.burst as u64;
/// Blobs each client sends when all publish at once: 64 × 15 = 960 frames queued before every
/// watcher at worst, kept as first measured (see the module doc).
const BURST_EACH: u64 = 15;
/// The wait before a round, so that every socket's budget is full again.
const REFILL: Duration = Duration::from_millis(2_100);
/// A round that takes longer failed (a socket closed, or deliveries were lost).
const ROUND_BUDGET: Duration = Duration::from_secs(60);

/// A client socket from `src`, the relay at `relay`.
async fn dial(src: Ipv4Addr, relay: SocketAddr) -> async_tungstenite::WebSocketStream<TcpStream> {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddr::from((src, 0))).expect("a loopback source address");
    connect(&fd, &relay).unwrap();
    let tcp = TcpStream::try_from(std::net::TcpStream::from(fd)).unwrap();
    let (ws, _) = async_tungstenite::client_async(format!("ws://{relay}/"), tcp)
        .await
        .unwrap();
    ws
}

fn blobs(seed: u64, count: u64) -> Vec<String> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut bytes = [0u8; BLOB_BYTES];
            rng.fill_bytes(&mut bytes);
            format!(
                r#"{{"type":"drop","topic":"{TOPIC}","blob":"{}","ttl":0}}"#,
                base64url::encode(&bytes)
            )
        })
        .collect()
}

/// Runs one round: each of `publishers` sends `burst` blobs; returns the deliveries per second once
/// `delivered` has counted every expected one.
async fn round(
    senders: &mut [WebSocketSender<TcpStream>],
    publishers: usize,
    burst: u64,
    delivered: &AtomicU64,
    seed: u64,
) -> f64 {
    smol::Timer::after(REFILL).await;
    let expected = publishers as u64 * burst * (CLIENTS as u64 - 1);
    let frames: Vec<Vec<String>> = (0..publishers)
        .map(|p| blobs(seed * 1000 + p as u64, burst))
        .collect();
    delivered.store(0, Ordering::SeqCst);
    let start = Instant::now();
    let sends = senders[..publishers]
        .iter_mut()
        .zip(frames)
        .map(|(tx, frames)| async move {
            for f in frames {
                tx.send(Message::text(f)).await.unwrap();
            }
        });
    for send in sends.collect::<Vec<_>>() {
        send.await;
    }
    while delivered.load(Ordering::SeqCst) < expected {
        assert!(
            start.elapsed() < ROUND_BUDGET,
            "{} of {expected} deliveries within {ROUND_BUDGET:?}",
            delivered.load(Ordering::SeqCst)
        );
        smol::Timer::after(Duration::from_micros(500)).await;
    }
    let elapsed = start.elapsed();
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        expected,
        "no extra delivery"
    );
    expected as f64 / elapsed.as_secs_f64()
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn main() {
    let relay = Running::start(None);
    let delivered = Arc::new(AtomicU64::new(0));
    let (one, all) = smol::block_on(async {
        let mut senders = Vec::with_capacity(CLIENTS);
        let mut readers = Vec::with_capacity(CLIENTS);
        for i in 0..CLIENTS {
            let src = Ipv4Addr::new(127, 0, 0, 10 + i as u8);
            let mut ws = dial(src, relay.addr).await;
            let watch = format!(r#"{{"type":"fetch","topic":"{TOPIC}","watch":true}}"#);
            ws.send(Message::text(watch)).await.unwrap();
            // The fetch's answer: the watch is in place.
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.as_str().contains(r#""type":"mail""#) => {}
                other => panic!("expected the fetch's mail, got {other:?}"),
            }
            let (tx, mut rx) = ws.split();
            senders.push(tx);
            let delivered = delivered.clone();
            readers.push(smol::spawn(async move {
                while let Some(Ok(frame)) = rx.next().await {
                    if let Message::Text(t) = frame {
                        let blobs = t.as_str().matches(r#""blob":"#).count() as u64;
                        delivered.fetch_add(blobs, Ordering::SeqCst);
                    }
                }
            }));
        }
        let mut one = Vec::new();
        for r in 0..5 {
            one.push(round(&mut senders, 1, BURST, &delivered, r).await);
        }
        let mut all = Vec::new();
        for r in 0..3 {
            all.push(round(&mut senders, CLIENTS, BURST_EACH, &delivered, 100 + r).await);
        }
        for mut tx in senders {
            let _ = tx.close(None).await;
        }
        for r in readers {
            r.await;
        }
        (median(one), median(all))
    });
    drop(relay);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "relay fan-out, {CLIENTS} clients on one topic, {}-char blobs, load average {}",
        base64url::encode(&[0u8; BLOB_BYTES]).len(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "one publisher, {} watchers:   {one:>9.0} deliveries/s  ({:.0} blobs/s published)",
        CLIENTS - 1,
        one / (CLIENTS - 1) as f64
    );
    println!(
        "{CLIENTS} publishers at once:      {all:>9.0} deliveries/s  ({:.0} blobs/s published)",
        all / (CLIENTS - 1) as f64
    );
}
