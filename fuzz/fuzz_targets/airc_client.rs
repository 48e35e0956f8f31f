//! The AIRC client machine under arbitrary timed input: connections opening, closing and failing,
//! raw bytes, well-formed server frames built from a few fuzzed choices (so the fuzzer gets past
//! `welcome`), messages to send and acks to give, and time jumps. It must never panic, must hand
//! the application at most one ack per id it sent, and after `handle_timeout(now)` must never
//! ask to be woken at or before `now`.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use weft_proto::airc::client::{Client, ClientConfig, Input, Output};
use weft_proto::airc::frame::{Ack, AckStatus, Msg};
use weft_proto::core::{Machine, Timestamp};

#[derive(Arbitrary, Debug)]
enum Op {
    Connected,
    Closed,
    Bytes(Vec<u8>),
    Frame { kind: u8, a: u8 },
    Send { id: u8 },
    Ack { id: u8 },
    Advance { ms: u32 },
}

fn frame(kind: u8, a: u8) -> serde_json::Value {
    let id = format!("m{}", a % 8);
    let status = ["delivered", "queued", "failed"][a as usize % 3];
    match kind % 8 {
        0 => json!({"t":"welcome","realm":"r.example","proto": if a % 4 == 0 {"airc/0.2"} else {"airc/0.1"},"ns":["bob"]}),
        1 => json!({"t":"ack","id":id,"status":status}),
        2 => json!({"t":"msg","id":id,"from":"airc://r.example/a/b","to":"airc://r.example/bob/y","ts":1.5,"body":"x"}),
        3 => json!({"t":"ping","n":a}),
        4 => json!({"t":"bound","names":["airc://r.example/bob/y"]}),
        5 => json!({"t":"error","code":"bad_frame"}),
        6 => json!({"t":"hello","proto":"airc/0.1","role":"client"}),
        _ => json!({"t":"nonsense"}),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut config = ClientConfig::new("fuzz");
    config.binds = vec!["bob/y".into()];
    let mut client = Client::new(config, ChaCha20Rng::seed_from_u64(0));
    let mut now = Timestamp::from_secs(1_790_380_000);
    // Sends of each id not yet answered: an ack must answer one of them.
    let mut awaiting: BTreeMap<String, u32> = BTreeMap::new();
    for op in ops.into_iter().take(256) {
        let input = match op {
            Op::Connected => Some(Input::Connected),
            Op::Closed => Some(Input::Closed),
            Op::Bytes(b) => Some(Input::Received(b)),
            Op::Frame { kind, a } => {
                let mut bytes = serde_json::to_vec(&frame(kind, a)).unwrap();
                bytes.push(b'\n');
                Some(Input::Received(bytes))
            }
            Op::Send { id } => Some(Input::Send(Box::new(Msg {
                id: format!("m{}", id % 8),
                from: "y".into(),
                to: "a/b".into(),
                ts: 0.0,
                body: "x".into(),
                kind: None,
                re: None,
                ttl: None,
                via: None,
                hdr: None,
            }))),
            Op::Ack { id } => Some(Input::Ack(Ack::new(format!("m{}", id % 8), AckStatus::Delivered))),
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                if client.poll_timeout().is_some_and(|w| w.at <= now) {
                    client.handle_timeout(now);
                    if let Some(after) = client.poll_timeout() {
                        assert!(after.at > now, "deadline does not advance");
                    }
                }
                None
            }
        };
        if let Some(Input::Send(m)) = &input {
            *awaiting.entry(m.id.clone()).or_default() += 1;
        }
        if let Some(input) = input {
            client.handle(now, input);
        }
        while let Some(o) = client.poll() {
            let answered = match o {
                Output::Acked(a) => a.id,
                Output::NotSent(m) => m.id,
                _ => continue,
            };
            let left = awaiting.get_mut(&answered).filter(|n| **n > 0);
            let left = left.expect("an answer for an id with no send awaiting one");
            *left -= 1;
        }
        let waiting: u32 = awaiting.values().sum();
        assert_eq!(waiting as usize, client.outstanding());
    }
});
