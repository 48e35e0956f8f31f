//! `weft nostr serve` beside a Nostr relay weft did not write, in the same run (issue #35):
//! `cargo bench -p weft-drivers --bench nostr_relay`.
//!
//! Three numbers per relay, and the ceiling they are held to:
//!
//! - **BIP-340 verify ceiling**: `server_provider().schnorr_verify` over the run's own events in a
//!   loop on one thread (the relay's whole event loop is one thread, so one core's verifies is
//!   what it can at most accept).
//! - **Events ingested per second**: [`EVENTS`] pre-signed kind 1 events (signed before the clock
//!   starts, by [`AUTHORS`] keys) published over [`CONNECTIONS`] WebSockets at once, each
//!   connection keeping at most [`WINDOW`] events unanswered; the clock runs from the first frame
//!   to the last `OK`. Every `OK` must be `true`: the relay checked the id and signature and
//!   stored the event before answering.
//! - **REQ answers per second** over those stored events: each connection keeps [`REQ_WINDOW`]
//!   subscriptions going, each a `REQ` for one random author's newest [`REQ_LIMIT`] events
//!   (`{"authors":[pk],"limit":10}`); a subscription is answered at its `EOSE`, which must come
//!   after exactly [`REQ_LIMIT`] events, and its id is then reused by the next `REQ` (which
//!   replaces it, NIP-01). [`REQS`] in all.
//!
//! The other relay is nostr-rs-relay (sqlite), built and started by `scripts/nostr-rs-relay`;
//! where it cannot be built the bench says why in one line and measures weft alone. Each relay
//! starts on an empty database. weft runs as its own process (the `weft` binary of this build),
//! as nostr-rs-relay does, with the per-connection message rate lifted so it measures the relay
//! and not its rate limit (nostr-rs-relay has none by default).
//!
//! `WEFT_BENCH_EVENTS`, `WEFT_BENCH_CONNECTIONS` and `WEFT_BENCH_REQS` change the sizes;
//! `WEFT_BENCH_RELAYS=weft` measures weft alone; `WEFT_BENCH_WEFT=PATH` runs another `weft`
//! binary (an older build, to compare a change). A hand-rolled loop, not criterion, as the other
//! benches.

#[path = "../tests/common/cli.rs"]
mod cli;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_proto::crypto::generate_secp256k1;
use weft_proto::nostr::event::{Event, UnsignedEvent};

/// Events published to each relay (and then stored, for the REQ phase).
const EVENTS: usize = 100_000;
/// Keys the events are signed by, round robin.
const AUTHORS: usize = 100;
/// WebSocket connections publishing (and then asking) at once.
const CONNECTIONS: usize = 8;
/// Events one connection may have sent and not yet seen answered. At most 128: nostr-rs-relay
/// queues a connection's `OK`s in a channel of 128 and drops one that does not fit.
const WINDOW: usize = 64;
/// REQs asked in all.
const REQS: usize = 20_000;
/// Subscriptions one connection keeps going at once (weft's default cap is 20).
const REQ_WINDOW: usize = 8;
/// Events each REQ asks for.
const REQ_LIMIT: usize = 10;
/// A phase that takes longer has failed.
const PHASE_BUDGET: Duration = Duration::from_secs(600);
/// Exit status with which the project's scripts say "cannot run here".
const SKIP_STATUS: i32 = 77;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A relay under test: its address and the process serving it (killed on drop).
struct Relay {
    name: &'static str,
    addr: SocketAddr,
    _process: Process,
}

enum Process {
    /// Held for its `Drop`, which stops the relay.
    Weft(#[allow(dead_code)] cli::Running),
    Other(Child),
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Process::Other(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_weft() -> Relay {
    let dir = cli::temp_dir("nostr-bench");
    let settings = dir.join("settings.yaml");
    // One rate far above anything the bench sends: the relay, not its limit, is measured.
    std::fs::write(
        &settings,
        "limits:\n  message:\n    rateLimits:\n      - period: 1000\n        rate: 100000000\n",
    )
    .unwrap();
    let addr = cli::free_port();
    let weft = std::env::var("WEFT_BENCH_WEFT").unwrap_or_else(|_| cli::WEFT.into());
    let mut cmd = Command::new(weft);
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(dir.join("nostr"))
    .arg("--config")
    .arg(&settings);
    let running = cli::Running::spawn(cmd);
    running.wait_for("listening on ws://");
    Relay {
        name: "weft nostr serve",
        addr,
        _process: Process::Weft(running),
    }
}

/// nostr-rs-relay through its script (its release build, as its operators run it), or why it
/// cannot run here.
fn start_nostr_rs_relay() -> Result<Relay, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/nostr-rs-relay");
    let mut child = Command::new(script)
        .arg("serve")
        .env("WEFT_FIXTURE_PROFILE", "release")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run scripts/nostr-rs-relay: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let line = line.trim().to_string();
    if let Some(addr) = line.strip_prefix("ws://") {
        let addr = addr
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("{line}: {e}"))?;
        return Ok(Relay {
            name: "nostr-rs-relay 0.8.12",
            addr,
            _process: Process::Other(child),
        });
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    Err(match status.code() {
        Some(SKIP_STATUS) => line,
        _ => format!("scripts/nostr-rs-relay serve failed ({status}): {line}"),
    })
}

async fn dial(addr: SocketAddr) -> async_tungstenite::WebSocketStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (ws, _) = async_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    ws
}

/// Publishes `frames` on one connection, at most [`WINDOW`] unanswered; the `OK`s that were
/// not `true`, with their reasons.
async fn publish(addr: SocketAddr, frames: Vec<String>) -> Vec<String> {
    let ws = dial(addr).await;
    let (mut tx, mut rx) = ws.split();
    let total = frames.len();
    let (credit, credits) = smol::channel::bounded::<()>(WINDOW);
    let reader = smol::spawn(async move {
        let mut refused = Vec::new();
        let mut answered = 0;
        while answered < total {
            let Some(Ok(frame)) = rx.next().await else {
                panic!("the relay closed after {answered} of {total} answers");
            };
            let Message::Text(t) = frame else { continue };
            let t = t.as_str();
            if !t.starts_with("[\"OK\"") {
                continue;
            }
            answered += 1;
            if !t.contains(",true,") {
                refused.push(t.to_string());
            }
            let _ = credits.recv().await;
        }
        refused
    });
    for f in frames {
        credit.send(()).await.unwrap();
        tx.send(Message::text(f)).await.unwrap();
    }
    let refused = reader.await;
    let _ = tx.close(None).await;
    refused
}

/// Asks `reqs` REQs on one connection, [`REQ_WINDOW`] at once, for random authors of `authors`;
/// how many events came back.
async fn ask(addr: SocketAddr, authors: Rc<Vec<String>>, reqs: usize, seed: u64) -> usize {
    let ws = dial(addr).await;
    let (mut tx, mut rx) = ws.split();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut next_req = move |slot: usize| {
        let author = &authors[(rng.next_u64() % authors.len() as u64) as usize];
        format!(r#"["REQ","s{slot}",{{"authors":["{author}"],"limit":{REQ_LIMIT}}}]"#)
    };
    let mut sent = 0;
    let mut counts = [0usize; REQ_WINDOW];
    for slot in 0..REQ_WINDOW.min(reqs) {
        let frame = next_req(slot);
        tx.send(Message::text(frame)).await.unwrap();
        sent += 1;
    }
    let (mut answered, mut events) = (0, 0);
    while answered < reqs {
        let Some(Ok(frame)) = rx.next().await else {
            panic!("the relay closed after {answered} of {reqs} REQs answered");
        };
        let Message::Text(t) = frame else { continue };
        let t = t.as_str();
        let slot_of = |rest: &str| -> usize {
            let rest = rest.strip_prefix("\"s").expect("one of our subscriptions");
            rest[..rest.find('"').unwrap()].parse().unwrap()
        };
        if let Some(rest) = t.strip_prefix("[\"EVENT\",") {
            counts[slot_of(rest)] += 1;
            events += 1;
        } else if let Some(rest) = t.strip_prefix("[\"EOSE\",") {
            let slot = slot_of(rest);
            assert_eq!(
                counts[slot], REQ_LIMIT,
                "a REQ answered with {}",
                counts[slot]
            );
            counts[slot] = 0;
            answered += 1;
            if sent < reqs {
                let frame = next_req(slot);
                tx.send(Message::text(frame)).await.unwrap();
                sent += 1;
            }
        } else if t.starts_with("[\"CLOSED\"") || t.starts_with("[\"NOTICE\"") {
            panic!("the relay refused a REQ: {t}");
        }
    }
    let _ = tx.close(None).await;
    events
}

/// Runs `phase` and returns its rate of `count` per second.
fn timed(count: usize, phase: impl Future<Output = ()>) -> f64 {
    let start = Instant::now();
    smol::block_on(phase);
    let elapsed = start.elapsed();
    assert!(elapsed < PHASE_BUDGET, "a phase took {elapsed:?}");
    count as f64 / elapsed.as_secs_f64()
}

struct Rates {
    name: &'static str,
    ingest: f64,
    reqs: f64,
}

fn measure(
    relay: &Relay,
    frames: &[String],
    authors: &Rc<Vec<String>>,
    conns: usize,
    reqs: usize,
) -> Rates {
    let addr = relay.addr;
    let mut shares: Vec<Vec<String>> = vec![Vec::new(); conns];
    for (i, f) in frames.iter().enumerate() {
        shares[i % conns].push(f.clone());
    }
    let ingest = timed(frames.len(), async {
        let tasks: Vec<_> = shares
            .into_iter()
            .map(|s| smol::spawn(publish(addr, s)))
            .collect();
        for t in tasks {
            let refused = t.await;
            assert!(
                refused.is_empty(),
                "{}: refused {:?}",
                relay.name,
                &refused[..refused.len().min(3)]
            );
        }
    });
    let local = smol::LocalExecutor::new();
    let reqs_rate = timed(
        reqs,
        local.run(async {
            let tasks: Vec<_> = (0..conns)
                .map(|c| {
                    let n = reqs / conns + usize::from(c < reqs % conns);
                    local.spawn(ask(addr, authors.clone(), n, c as u64))
                })
                .collect();
            let mut events = 0;
            for t in tasks {
                events += t.await;
            }
            assert_eq!(events, reqs * REQ_LIMIT);
        }),
    );
    Rates {
        name: relay.name,
        ingest,
        reqs: reqs_rate,
    }
}

fn main() {
    let n = env_or("WEFT_BENCH_EVENTS", EVENTS);
    let conns = env_or("WEFT_BENCH_CONNECTIONS", CONNECTIONS).max(1);
    let reqs = env_or("WEFT_BENCH_REQS", REQS);
    assert!(
        n >= AUTHORS * REQ_LIMIT,
        "at least {} events",
        AUTHORS * REQ_LIMIT
    );
    let provider = weft_drivers::server_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(35);
    let keys: Vec<_> = (0..AUTHORS)
        .map(|_| generate_secp256k1(provider, &mut rng))
        .collect();
    let now = weft_drivers::now().as_secs();
    let signing = Instant::now();
    let events: Vec<Event> = (0..n)
        .map(|i| {
            UnsignedEvent {
                created_at: now - (n - i) as u64 / 10,
                kind: 1,
                tags: vec![vec!["t".into(), format!("bench{}", i % 50)]],
                content: format!("weft relay bench event {i}: a short note of ordinary length."),
            }
            .sign(provider, &keys[i % AUTHORS], &mut rng)
            .unwrap()
        })
        .collect();
    eprintln!("signed {n} events in {:.1?}", signing.elapsed());
    let authors: Rc<Vec<String>> = Rc::new(
        events[..AUTHORS]
            .iter()
            .map(|e| e.pubkey.iter().map(|b| format!("{b:02x}")).collect())
            .collect(),
    );
    let frames: Vec<String> = events
        .iter()
        .map(|e| format!("[\"EVENT\",{}]", e.to_json()))
        .collect();

    // The ceiling: one core verifying these very signatures, twice over, the better pass kept.
    let sample = &events[..n.min(20_000)];
    let ceiling = (0..2)
        .map(|_| {
            let start = Instant::now();
            for e in sample {
                assert!(provider.schnorr_verify(&e.pubkey, &e.id, &e.sig));
            }
            sample.len() as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0f64, f64::max);

    let only_weft = std::env::var("WEFT_BENCH_RELAYS").is_ok_and(|v| v == "weft");
    let mut rates = Vec::new();
    {
        let weft = start_weft();
        rates.push(measure(&weft, &frames, &authors, conns, reqs));
    }
    if only_weft {
        eprintln!("nostr-rs-relay: not asked for (WEFT_BENCH_RELAYS=weft)");
    } else {
        match start_nostr_rs_relay() {
            Ok(other) => rates.push(measure(&other, &frames, &authors, conns, reqs)),
            Err(why) => eprintln!("nostr-rs-relay: not measured: {why}"),
        }
    }

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "nostr relays, {n} events by {AUTHORS} authors over {conns} connections ({WINDOW} in flight each), \
         {reqs} REQs (limit {REQ_LIMIT}, {REQ_WINDOW} open each); load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("BIP-340 verify, one core (ceiling): {ceiling:>9.0}/s");
    for r in &rates {
        println!(
            "{:<24} ingest {:>9.0} events/s   REQ {:>8.0} answers/s ({:.0} events/s)",
            r.name,
            r.ingest,
            r.reqs,
            r.reqs * REQ_LIMIT as f64
        );
    }
    let weft = &rates[0];
    println!(
        "weft/ceiling (ingest): {:.2}   (target >= 0.70)",
        weft.ingest / ceiling
    );
    if let Some(other) = rates.get(1) {
        println!(
            "weft/{} ingest: {:.2}   REQ: {:.2}   (target >= 2)",
            other.name,
            weft.ingest / other.ingest,
            weft.reqs / other.reqs
        );
    }
}
