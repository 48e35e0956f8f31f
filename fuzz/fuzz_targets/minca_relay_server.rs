//! The Minca relay server machine under arbitrary timed input: sockets opening (after `admit`,
//! or not) and closing, raw text, well-formed messages built from a few fuzzed choices (so the
//! fuzzer gets past JSON), binary frames, pings, and time jumps, with TURN on. It must never
//! panic; every output must name a socket it was told of; the bounded tables must stay within
//! their constants; and after `handle_timeout(now)` it must never ask to be woken at or before
//! `now`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use weft_fuzz::advance;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::minca::relay_server::{
    Input, MAX_SOCKETS_PER_ADDRESS, MAX_WATCHERS_PER_TOPIC, Output, RelayConfig, RelayServer,
};
use weft_proto::minca::relay_wire::MAX_TOPIC_BLOBS;
use weft_proto::minca::turn::TurnConfig;

#[derive(Arbitrary, Debug)]
enum Op {
    Open {
        conn: u8,
        addr: u8,
        admit: bool,
    },
    Text {
        conn: u8,
        text: String,
    },
    Message {
        conn: u8,
        kind: u8,
        topic: u8,
        blob: u8,
        n: u16,
    },
    Binary {
        conn: u8,
    },
    Control {
        conn: u8,
    },
    Close {
        conn: u8,
    },
    Advance {
        ms: u32,
    },
}

const TOPICS: [&str; 4] = [
    "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0",
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR",
    "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR1",
];
const BLOBS: [&str; 4] = ["AZ3k", "AQID", "", "AQ=="];

fn message(kind: u8, topic: u8, blob: u8, n: u16) -> String {
    let topic = TOPICS[topic as usize % TOPICS.len()];
    let blob = BLOBS[blob as usize % BLOBS.len()];
    match kind % 5 {
        0 => format!(
            r#"{{"type":"fetch","topic":"{topic}","after":{n},"watch":{}}}"#,
            n % 2 == 0
        ),
        1 => format!(
            r#"{{"type":"drop","topic":"{topic}","blob":"{blob}","ttl":{}}}"#,
            u64::from(n) * 100
        ),
        2 => r#"{"type":"ice"}"#.into(),
        3 => r#"{"type":"ping"}"#.into(),
        _ => format!(r#"{{"type":"drop","topic":"{topic}","blob":"{blob}","ttl":0}}"#),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let turn = TurnConfig::new(b"secret", vec!["turn:t.example".into()], 600).ok();
    let mut relay = RelayServer::new(
        RelayConfig { turn },
        weft_proto::crypto::default_provider(),
        ChaCha20Rng::seed_from_u64(0),
    );
    let mut now = Timestamp::from_secs(1_790_000_000);
    let mut told = std::collections::BTreeSet::new();
    for op in ops.into_iter().take(512) {
        let input = match op {
            Op::Open { conn, addr, admit } => {
                let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, addr % 4));
                if admit && relay.admit(now, addr).is_err() {
                    None
                } else {
                    told.insert(ConnId(conn.into()));
                    Some(Input::Opened {
                        conn: ConnId(conn.into()),
                        addr,
                    })
                }
            }
            Op::Text { conn, text } => Some(Input::Text {
                conn: ConnId(conn.into()),
                text,
            }),
            Op::Message {
                conn,
                kind,
                topic,
                blob,
                n,
            } => Some(Input::Text {
                conn: ConnId(conn.into()),
                text: message(kind, topic, blob, n),
            }),
            Op::Binary { conn } => Some(Input::Binary {
                conn: ConnId(conn.into()),
            }),
            Op::Control { conn } => Some(Input::Control {
                conn: ConnId(conn.into()),
            }),
            Op::Close { conn } => Some(Input::Closed {
                conn: ConnId(conn.into()),
            }),
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::run_due(&mut relay, now, drop);
                None
            }
        };
        if let Some(input) = input {
            relay.handle(now, input);
        }
        while let Some(out) = relay.poll() {
            let conn = match out {
                Output::Send { conn, .. } | Output::Ping { conn } | Output::Close { conn, .. } => {
                    conn
                }
                _ => continue,
            };
            assert!(told.contains(&conn), "output for a socket never opened");
        }
        let (watchers, kept) = relay.max_per_topic();
        assert!(watchers <= MAX_WATCHERS_PER_TOPIC);
        assert!(kept <= MAX_TOPIC_BLOBS);
        assert!(relay.max_sockets_per_address() <= MAX_SOCKETS_PER_ADDRESS);
    }
});
