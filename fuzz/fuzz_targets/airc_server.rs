//! The AIRC realm server machine under arbitrary timed input: connections opening and closing on
//! both faces, raw bytes, well-formed frames built from a few fuzzed choices (so the fuzzer gets
//! past hello, and reaching subscribe, link and passport frames and redemptions), dials, DNS
//! answers (right, wrong and empty, for the questions a dial or a parked hello asks), published
//! keys, administrators, and time jumps, with p.example's links trusted unsigned or not. It must
//! never panic, after `handle_timeout(now)` it must never ask to be woken at or before `now` (a
//! deadline that does not advance would spin a driver), and it never holds more messages in
//! flight than in its spool.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use weft_fuzz::advance;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::discovery::{Answer, RecordType, SrvRecord};
use weft_proto::airc::server::{Face, Input, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine, Timestamp};

#[derive(Arbitrary, Debug)]
enum Op {
    Open { conn: u8, peer: bool },
    Bytes { conn: u8, data: Vec<u8> },
    Frame { conn: u8, kind: u8, a: u8, b: u8 },
    Close { conn: u8 },
    Advance { ms: u32 },
    Dialled { conn: u8 },
    DialFailed,
    Admin { conn: u8 },
    Resolved { name: u8, kind: u8, answer: u8 },
    Keys { key: u8 },
}

/// The DNS names the server asks about p.example (§8.1 steps 3–5, §8.2), and one it never asks.
const DNS_NAMES: [&str; 5] = [
    "_airc._tcp.p.example",
    "airc.p.example",
    "p.example",
    "_airc.p.example",
    "_airc.nobody.example",
];

fn dns_answer(i: u8) -> Answer {
    let srv = |target: &str| SrvRecord {
        priority: u16::from(i % 3),
        weight: u16::from(i % 5),
        port: 2472,
        target: target.into(),
        ttl: u32::from(i) * 20,
    };
    match i % 6 {
        0 => Answer::Nothing,
        1 => Answer::Addresses {
            ttl: u32::from(i) * 30,
        },
        2 => Answer::Srv(vec![srv("airc.p.example"), srv("p.example")]),
        3 => Answer::Srv(vec![srv(".")]),
        4 => Answer::Txt {
            records: vec![
                "v=airc1 k=ed25519 p=ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=".into(),
                "v=spf1 -all".into(),
            ],
            ttl: u32::from(i),
        },
        _ => Answer::Txt {
            records: vec!["v=airc1 k=ed25519 p=!".into()],
            ttl: 0,
        },
    }
}

const NAMES: [&str; 6] = [
    "alice/x",
    "bob/y",
    "//r.example/bob/y",
    "//p.example/z/w",
    "bob/",
    "_resolver",
];

fn pick(choices: &[&'static str], i: u8) -> &'static str {
    choices[i as usize % choices.len()]
}

fn frame(kind: u8, a: u8, b: u8) -> serde_json::Value {
    let name = |i: u8| NAMES[i as usize % NAMES.len()];
    match kind % 12 {
        0 => json!({"t":"hello","proto":"airc/0.1","role": if a % 2 == 0 {"client"} else {"peer"},
                    "realm":"p.example","ts":1_790_380_000u64 + u64::from(b),"nonce":"00"}),
        1 => json!({"t":"bind","names":[name(a), name(b)]}),
        2 => json!({"t":"msg","id":format!("m{}", a % 8),"from":name(b),"to":name(a),
                    "ts":1_790_380_000.5 + f64::from(b),"body":"x","ttl": u64::from(a) * 10}),
        3 => {
            let status = ["delivered", "queued", "failed"][b as usize % 3];
            let reason = if b % 5 == 0 { "link: gone" } else { "no" };
            json!({"t":"ack","id":format!("m{}", a % 8),"status":status,"reason":reason})
        }
        4 => json!({"t":"ping","n":a}),
        6 => {
            json!({"t":"subscribe","kinds": [pick(&["msg","link.offer","passport","peer.up","x"], a)]})
        }
        7 => json!({"t":"passport","op":"new","as":name(a),"uses": u64::from(b),"to": name(b)}),
        8 => json!({"t":"passport","op":pick(&["redeem","list","revoke","bogus"], a),"as":name(b),
                    "passport": pick(&["airc-passport:1;i=r.example;t=AAAA", "P0000000a", "{}", "x#airc-passport:2;"], b),
                    "and_links": a % 2 == 0}),
        9 => {
            json!({"t":"msg","id":format!("m{}", a % 8),"from":name(b),"to":"//r.example/_passport",
                    "type":"application/airc-passport+json","ts":1_790_380_000.5,
                    "body": if a % 2 == 0 { r#"{"action":"redeem","token":"AAAA"}"# } else { "{" }})
        }
        10 => {
            json!({"t":"link","op":pick(&["offer","accept","decline","revoke","grant","list"], a),"as":name(a),
                     "peer":name(b),"id":format!("L0000000{}", b % 8)})
        }
        _ => json!({"t":"welcome","realm":"p.example","proto":"airc/0.1"}),
    }
}

fuzz_target!(|input: (bool, Vec<Op>)| {
    let (trusted, ops) = input;
    let mut config = ServerConfig::new(Authority::parse("r.example").unwrap());
    config.known_namespaces = vec![Namespace::parse("bob").unwrap()];
    // The fuzzer signs nothing: trusting p.example unsigned lets its links authenticate, so
    // that messages, acks and closes on links that are sent on are reached too.
    if trusted {
        config.trusted_unsigned = vec![Authority::parse("p.example").unwrap()];
    }
    let mut server = Server::new(config, weft_fuzz::crypto(), ChaCha20Rng::seed_from_u64(0));
    let mut now = Timestamp::from_secs(1_790_380_000);
    for op in ops.into_iter().take(256) {
        let input = match op {
            Op::Open { conn, peer } => {
                let face = if peer { Face::Peer } else { Face::Client };
                let namespaces = vec![Namespace::parse("alice").unwrap()];
                Some(Input::Opened {
                    conn: ConnId(conn.into()),
                    face,
                    namespaces,
                    source: Source::Unknown,
                })
            }
            Op::Bytes { conn, data } => Some(Input::Received {
                conn: ConnId(conn.into()),
                bytes: data,
            }),
            Op::Frame { conn, kind, a, b } => {
                let mut bytes = serde_json::to_vec(&frame(kind, a, b)).unwrap();
                bytes.push(b'\n');
                Some(Input::Received {
                    conn: ConnId(conn.into()),
                    bytes,
                })
            }
            Op::Close { conn } => Some(Input::Closed {
                conn: ConnId(conn.into()),
            }),
            Op::Dialled { conn } => Some(Input::Dialled {
                conn: ConnId(conn.into()),
                authority: Authority::parse("p.example").unwrap(),
            }),
            Op::DialFailed => Some(Input::DialFailed {
                authority: Authority::parse("p.example").unwrap(),
            }),
            Op::Admin { conn } => Some(Input::Administrator {
                conn: ConnId(conn.into()),
            }),
            Op::Resolved { name, kind, answer } => Some(Input::Resolved {
                name: pick(&DNS_NAMES, name).into(),
                kind: [RecordType::Srv, RecordType::Address, RecordType::Txt][kind as usize % 3],
                answer: dns_answer(answer),
            }),
            Op::Keys { key } => Some(Input::Keys {
                realm: Authority::parse("p.example").unwrap(),
                keys: vec![[key; 32]],
            }),
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::run_due(&mut server, now, drop);
                None
            }
        };
        if let Some(input) = input {
            server.handle(now, input);
        }
        while server.poll().is_some() {}
        // A message in flight waits in the spool for its late ack: one that left the spool
        // (expired, settled) is in flight no more.
        assert!(server.in_flight() <= server.spooled(), "{server:?}");
    }
});
