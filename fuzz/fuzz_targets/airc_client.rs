//! The AIRC client machine under arbitrary timed input: the host's connection events in any
//! order, raw bytes as a server might send them, well-formed server frames built from a few
//! fuzzed choices (so the fuzzer gets past the welcome), the application's commands, and time
//! jumps. It must never panic, its unacked table must stay within `MAX_UNACKED`, and after
//! `handle_timeout(now)` it must never ask to be woken at or before `now`.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use weft_fuzz::advance;
use weft_proto::airc::client::{Client, ClientConfig, Input, MAX_UNACKED, Outgoing, Request};
use weft_proto::airc::frame::{Ack, AckStatus};
use weft_proto::core::{Machine, Timestamp};

#[derive(Arbitrary, Debug)]
enum Op {
    Start,
    Stop,
    Connected,
    Disconnected,
    Bytes(Vec<u8>),
    Frame { kind: u8, a: u8, b: u8 },
    Bind(u8),
    Send { ttl: Option<u16>, big: bool },
    Request(u8),
    Ack { a: u8, status: u8 },
    Advance { ms: u32 },
}

fn id(a: u8, ids: &[String]) -> String {
    if ids.is_empty() || a % 4 == 0 {
        format!("m{}", a % 8)
    } else {
        ids[a as usize % ids.len()].clone()
    }
}

fn pick(choices: &[&'static str], i: u8) -> &'static str {
    choices[i as usize % choices.len()]
}

fn frame(kind: u8, a: u8, b: u8, ids: &[String]) -> serde_json::Value {
    let status = ["delivered", "queued", "failed", "bogus"][b as usize % 4];
    match kind % 12 {
        0 => {
            json!({"t":"welcome","realm":"example.com","proto":pick(&["airc/0.1","airc/0.2"], a),"ns":["alice"]})
        }
        1 => json!({"t":"ack","id":id(a, ids),"status":status,"code":"duplicate"}),
        2 => json!({"t":"msg","id":format!("in{}", a % 8),"from":"airc://example.com/bob/y",
                    "to":"airc://example.com/alice/x","ts":1_790_380_000.5,"body":"x"}),
        3 => json!({"t":"bound","names":["//example.com/alice/"]}),
        4 => json!({"t":"ping","n":a}),
        5 => json!({"t":"error","code":pick(&["bad_bind","forbidden","bad_frame"], a)}),
        6 => json!({"t":"linked","ok":a % 2 == 0}),
        7 => json!({"t":"stats","messages":b}),
        8 => json!({"t":"subscribed","kinds":["msg"],"scope":"all"}),
        9 => json!({"t":"event","ts":1.5,"kind":"msg.delivered"}),
        10 => json!({"t":"passported","ok":false}),
        _ => json!({"t":pick(&["hello","bind","teleport","pong"], a)}),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut client = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(0));
    let mut now = Timestamp::from_secs(1_790_380_000);
    let mut ids: Vec<String> = Vec::new();
    for op in ops.into_iter().take(512) {
        let input = match op {
            Op::Start => Some(Input::Start),
            Op::Stop => Some(Input::Stop),
            Op::Connected => Some(Input::Connected),
            Op::Disconnected => Some(Input::Disconnected),
            Op::Bytes(b) => Some(Input::Bytes(b)),
            Op::Frame { kind, a, b } => {
                let mut bytes = serde_json::to_vec(&frame(kind, a, b, &ids)).unwrap();
                bytes.push(b'\n');
                Some(Input::Bytes(bytes))
            }
            Op::Bind(n) => Some(Input::Bind(vec![format!("alice/{}", n % 16)])),
            Op::Send { ttl, big } => {
                let body = if big {
                    "x".repeat(1_100_000)
                } else {
                    "b".into()
                };
                let out = Outgoing {
                    from: "x".into(),
                    to: "bob/y".into(),
                    body,
                    ttl: ttl.map(u64::from),
                    ..Outgoing::default()
                };
                if let Ok(id) = client.send(now, out) {
                    if ids.len() < 64 {
                        ids.push(id);
                    }
                }
                None
            }
            Op::Request(r) => Some(Input::Request(match r % 2 {
                0 => Request::Stat,
                _ => Request::Subscribe(Default::default()),
            })),
            Op::Ack { a, status } => {
                let s = [AckStatus::Delivered, AckStatus::Queued, AckStatus::Failed];
                Some(Input::Ack(Ack::new(
                    format!("in{}", a % 8),
                    s[status as usize % 3],
                )))
            }
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::run_due(&mut client, now, drop);
                None
            }
        };
        if let Some(input) = input {
            client.handle(now, input);
        }
        while client.poll().is_some() {}
        assert!(client.unacked() <= MAX_UNACKED);
    }
});
