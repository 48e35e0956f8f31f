//! The Nostr relay session machine (`nostr::relay::Session`) on two connections to one memory
//! store, under arbitrary frames mixed with well-formed ones built from fuzzed choices (signed
//! events of every kind class, deletions, requests to vanish, REQ/CLOSE/COUNT, AUTH answers,
//! flushes withheld, time moving), so the fuzzer reaches every path. It must never panic; every
//! frame it sends parses as a relay message; no request to the store is left waiting; the
//! bounds on subscriptions hold; and an event acknowledged `OK true` is stored unless its kind
//! rules say otherwise.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use weft_proto::core::{BucketConfig, Machine, Timestamp};
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::auth;
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::kinds::{ALL_RELAYS, DELETION_KIND, VANISH_KIND};
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, Filter, RelayMessage};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::wire::Outbound;
use weft_proto::nostr::relay::{AuthPolicy, Config, MemoryStore};

const URL: &str = "wss://relay.example.com/";
const KINDS: [u16; 8] = [0, 1, 3, DELETION_KIND, VANISH_KIND, 10_002, 20_001, 30_023];

#[derive(Arbitrary, Debug)]
enum Op {
    Raw {
        conn: bool,
        text: String,
    },
    Publish {
        conn: bool,
        key: u8,
        kind: u8,
        age: u8,
        d: u8,
        expires: Option<u8>,
    },
    Delete {
        conn: bool,
        key: u8,
        back: u8,
        by_address: bool,
    },
    Vanish {
        conn: bool,
        key: u8,
        here: bool,
    },
    Req {
        conn: bool,
        sub: u8,
        kind: Option<u8>,
        limit: Option<u8>,
    },
    Close {
        conn: bool,
        sub: u8,
    },
    Count {
        conn: bool,
        kind: Option<u8>,
    },
    Auth {
        conn: bool,
        key: u8,
        good: bool,
    },
    Flush {
        conn: bool,
    },
    Neg {
        conn: bool,
        open: bool,
        sub: u8,
        message: Vec<u8>,
    },
    Timeout {
        conn: bool,
    },
    AutoFlush(bool),
    Advance {
        secs: u16,
    },
}

fuzz_target!(|input: (u8, Vec<Op>)| {
    let (policy, ops) = input;
    let limits = Limits {
        max_subscriptions: 4,
        page_size: 3,
        max_limit: 8,
        default_limit: 5,
        max_unflushed_frames: 16,
        max_pending_writes: 4,
        max_auth_pubkeys: 2,
        messages: BucketConfig::new(20, 5),
        ..Limits::DEFAULT
    };
    let auth = match policy % 3 {
        0 => AuthPolicy::Optional,
        1 => AuthPolicy::Writes,
        _ => AuthPolicy::All,
    };
    let config = Config {
        relay_url: URL.into(),
        limits,
        auth,
        provider: weft_fuzz::crypto(),
        peering: Default::default(),
    };
    let start = 1_790_000_000;
    let mut h = Harness::new(config, MemoryStore::new(64), Timestamp::from_secs(start));
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    // Three keys drawn once for the whole run: deriving them is most of an input's cost.
    static KEYS: OnceLock<Vec<Secp256k1Secret>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let mut rng = ChaCha20Rng::seed_from_u64(35);
        (0..3)
            .map(|_| generate_secp256k1(weft_fuzz::crypto(), &mut rng))
            .collect()
    });
    let conns = [h.connect(&mut rng), h.connect(&mut rng)];
    let mut published: Vec<Event> = Vec::new();
    let sign = |rng: &mut ChaCha20Rng, key: &Secp256k1Secret, kind, created_at, tags| {
        UnsignedEvent {
            created_at,
            kind,
            tags,
            content: String::new(),
        }
        .sign(weft_fuzz::crypto(), key, rng)
        .unwrap()
    };
    for op in ops.into_iter().take(48) {
        let now = h.now.as_secs();
        let (conn, frame) = match op {
            Op::Raw { conn, text } => (conn, text),
            Op::Publish {
                conn,
                key,
                kind,
                age,
                d,
                expires,
            } => {
                let mut tags = vec![vec!["d".to_string(), (d % 3).to_string()]];
                if let Some(e) = expires {
                    tags.push(vec!["expiration".into(), (now + u64::from(e)).to_string()]);
                }
                let kind = KINDS[usize::from(kind) % KINDS.len()];
                let e = sign(
                    &mut rng,
                    &keys[usize::from(key) % 3],
                    kind,
                    now - u64::from(age),
                    tags,
                );
                published.push(e.clone());
                (conn, ClientMessage::Event(e).to_text())
            }
            Op::Delete {
                conn,
                key,
                back,
                by_address,
            } => {
                let Some(target) = published.iter().rev().nth(usize::from(back) % 8) else {
                    continue;
                };
                let tag = if by_address {
                    vec![
                        "a".into(),
                        format!(
                            "{}:{}:{}",
                            target.kind,
                            hex(&target.pubkey),
                            target.tag_value("d").unwrap_or("")
                        ),
                    ]
                } else {
                    vec!["e".into(), target.id_hex()]
                };
                let e = sign(
                    &mut rng,
                    &keys[usize::from(key) % 3],
                    DELETION_KIND,
                    now,
                    vec![tag],
                );
                published.push(e.clone());
                (conn, ClientMessage::Event(e).to_text())
            }
            Op::Vanish { conn, key, here } => {
                let relay = if here {
                    ALL_RELAYS
                } else {
                    "wss://other.example/"
                };
                let e = sign(
                    &mut rng,
                    &keys[usize::from(key) % 3],
                    VANISH_KIND,
                    now,
                    vec![vec!["relay".into(), relay.into()]],
                );
                (conn, ClientMessage::Event(e).to_text())
            }
            Op::Req {
                conn,
                sub,
                kind,
                limit,
            } => {
                let filter = Filter {
                    kinds: kind.map(|k| vec![KINDS[usize::from(k) % KINDS.len()]]),
                    limit: limit.map(u64::from),
                    ..Filter::default()
                };
                let req = ClientMessage::Req {
                    subscription: format!("s{}", sub % 6),
                    filters: vec![
                        filter,
                        Filter {
                            kinds: Some(vec![1]),
                            ..Filter::default()
                        },
                    ],
                };
                (conn, req.to_text())
            }
            Op::Close { conn, sub } => (
                conn,
                ClientMessage::Close(format!("s{}", sub % 6)).to_text(),
            ),
            Op::Count { conn, kind } => {
                let kinds = kind.map_or(String::new(), |k| {
                    format!(r#""kinds":[{}]"#, KINDS[usize::from(k) % KINDS.len()])
                });
                (conn, format!(r#"["COUNT","c",{{{kinds}}}]"#))
            }
            Op::Auth { conn, key, good } => {
                let c = conns[usize::from(conn)];
                let challenge = if good {
                    h.conns[c].session.challenge().to_string()
                } else {
                    "nope".into()
                };
                let e = auth::build(
                    weft_fuzz::crypto(),
                    &keys[usize::from(key) % 3],
                    &mut rng,
                    h.now,
                    URL,
                    &challenge,
                )
                .unwrap();
                (conn, ClientMessage::Auth(e).to_text())
            }
            Op::Neg {
                conn,
                open,
                sub,
                message,
            } => {
                let hex = hex(&message);
                let sub = format!("n{}", sub % 3);
                let frame = if open {
                    format!(r#"["NEG-OPEN","{sub}",{{}},"{hex}"]"#)
                } else {
                    format!(r#"["NEG-MSG","{sub}","{hex}"]"#)
                };
                (conn, frame)
            }
            Op::Timeout { conn } => {
                let c = conns[usize::from(conn)];
                if let Some(w) = h.conns[c].session.poll_timeout() {
                    h.now = h.now.max(w.at);
                }
                h.timeout(c);
                // Handling a deadline moves it past now: a host never spins on it.
                if let Some(w) = h.conns[c].session.poll_timeout() {
                    assert!(w.at > h.now, "a deadline still due after handle_timeout");
                }
                continue;
            }
            Op::Flush { conn } => {
                h.flush(conns[usize::from(conn)]);
                continue;
            }
            Op::AutoFlush(on) => {
                h.auto_flush = on;
                continue;
            }
            Op::Advance { secs } => {
                h.now = Timestamp::from_secs(now + u64::from(secs));
                continue;
            }
        };
        let c = conns[usize::from(conn)];
        h.send(c, &frame);
        for &c in &conns {
            let session = &h.conns[c].session;
            assert_eq!(
                session.pending_requests(),
                0,
                "a store request left waiting"
            );
            assert!(session.subscriptions().count() <= limits.max_subscriptions);
            assert!(session.neg_sessions().count() <= limits.max_neg_sessions);
            for out in h.take(c) {
                let text = out.to_text();
                match &out {
                    Outbound::Relay(m) => {
                        assert_eq!(RelayMessage::parse(&text).as_ref(), Ok(m), "{text}");
                        if let RelayMessage::Ok {
                            event_id,
                            accepted: true,
                            message,
                        } = m
                            && message.is_empty()
                            && let Some(e) = published.iter().find(|e| e.id == *event_id)
                            && !(20_000..30_000).contains(&e.kind)
                        {
                            // Persist before ack: within the run of the frame that carried it,
                            // nothing else can have removed it.
                            assert!(h.store.contains(event_id), "OK true before it was stored");
                        }
                    }
                    Outbound::Count { .. } => assert!(text.starts_with("[\"COUNT\",")),
                    Outbound::NegMsg { .. } => assert!(text.starts_with("[\"NEG-MSG\",")),
                    Outbound::NegErr { reason, .. } => {
                        assert!(text.starts_with("[\"NEG-ERR\","));
                        assert!(reason.contains(": "), "a NIP-01 prefix: {reason}");
                    }
                }
            }
        }
    }
});

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
