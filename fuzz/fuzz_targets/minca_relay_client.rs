//! The Minca relay client machine under arbitrary timed input: joins and leaves with relay lists
//! of every kind, publishes, drops, fetches, TURN requests, socket reports on the sockets it
//! dialled (and on ones it did not), raw and well-formed relay frames of both kinds it speaks
//! (Minca's JSON objects; NIP-01 `EVENT`, `OK` for the events it sent, `EOSE`, `CLOSED`, `AUTH` and
//! `NOTICE` for its Nostr relay), "online", small steps and sleeps. It must never panic, its tables and send queues must stay within their named bounds,
//! and after `handle_timeout(now)` it must never ask to be woken at or before `now`.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use weft_fuzz::advance;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::minca::nostr_kind::NostrLink;
use weft_proto::minca::relay_client::{
    ClientConfig, Input, MAX_QUEUED_FRAMES, MAX_RELAYS, MAX_ROOMS, Output, RelayClient,
};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic, Ttl};

const URLS: [&str; 6] = [
    "wss://a.example",
    "wss://b.example/x#f",
    "ws://localhost:8787",
    "nostr+wss://n.example",
    "foo+wss://f.example",
    "wss://c.example",
];

#[derive(Arbitrary, Debug)]
enum Op {
    Join {
        topic: u8,
        relays: Vec<u8>,
    },
    Leave {
        topic: u8,
    },
    Publish {
        topic: u8,
        blob: u8,
    },
    PublishVia {
        relay: u8,
        topic: u8,
        blob: u8,
    },
    Drop {
        topic: u8,
        blob: u8,
        ttl: u32,
    },
    Fetch {
        topic: u8,
    },
    RequestIce,
    Opened {
        conn: u8,
    },
    Closed {
        conn: u8,
    },
    DialFailed {
        conn: u8,
    },
    Raw {
        conn: u8,
        text: String,
    },
    Frame {
        conn: u8,
        kind: u8,
        topic: u8,
        a: u8,
        more: bool,
    },
    Online,
    Advance {
        ms: u32,
    },
}

fn topic(n: u8) -> Topic {
    Topic::from_bytes(&[n % 8; 32])
}

/// A frame a relay might send: Minca's for `kind % 12 < 4`, NIP-01's otherwise. `sent` holds the
/// ids (hex) of the events the client sent, so `OK`s can name them.
fn frame(kind: u8, t: u8, a: u8, more: bool, sent: &[String], event: &serde_json::Value) -> String {
    let topic = topic(t);
    let sub = format!("{}{}", if more { "f" } else { "w" }, topic.as_str());
    let id = sent
        .get(usize::from(a) % sent.len().max(1))
        .cloned()
        .unwrap_or_else(|| "00".repeat(32));
    let v = match kind % 12 {
        4 => json!(["EVENT", sub, event]),
        5 => json!([
            "OK",
            id,
            a % 2 == 0,
            if a % 4 < 2 {
                "auth-required: sign in"
            } else {
                "duplicate: have it"
            }
        ]),
        6 => json!(["OK", id, false, "blocked: no"]),
        7 => json!(["EOSE", sub]),
        8 => json!([
            "CLOSED",
            sub,
            if a % 2 == 0 {
                "auth-required: sign in"
            } else {
                "error: gone"
            }
        ]),
        9 => json!(["AUTH", format!("challenge-{a}")]),
        10 => json!(["NOTICE", "hello"]),
        11 => json!(["EVENT", sub, {"id": id}]),
        _ => return minca_frame(kind, &topic, a, more),
    };
    v.to_string()
}

fn minca_frame(kind: u8, topic: &Topic, a: u8, more: bool) -> String {
    let v = match kind % 4 {
        0 => {
            let items: Vec<_> = (0..a % 6)
                .map(|i| json!({"blob": "AAAA", "seq": u64::from(i) + u64::from(a)}))
                .collect();
            json!({"type": "mail", "topic": topic.as_str(), "items": items, "more": more})
        }
        1 => {
            json!({"type": "ice", "payload": {"servers": [{"urls": ["turn:t.example"], "username": "u", "credential": "c"}],
                    "expiresAt": 1_790_000_000_000u64 + u64::from(a) * 10_000}})
        }
        2 => json!({"type": "pong"}),
        _ => {
            json!({"type": "mail", "topic": topic.as_str(), "items": [{"blob": "AQID"}], "more": false})
        }
    };
    v.to_string()
}

/// An event another member published under topic 0, as the Nostr relay would forward it.
fn peer_event() -> serde_json::Value {
    let url = RelayUrl::parse(URLS[3]).unwrap();
    let mut peer = NostrLink::new(weft_fuzz::crypto(), &url);
    let blob = Blob::from_bytes(&[7; 9]).unwrap();
    let frame = peer.publish(
        Timestamp::from_millis(1_790_000_000_000),
        &mut ChaCha20Rng::seed_from_u64(1),
        &topic(0),
        &blob,
    );
    let value: serde_json::Value = serde_json::from_str(&frame).unwrap();
    value[1].clone()
}

/// Remembers the id of every `EVENT` the client sends, for the relay's `OK`s.
fn note_sent(o: &Output, sent: &mut Vec<String>) {
    if let Output::Send { text, .. } = o
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
        && value[0] == "EVENT"
        && let Some(id) = value[1]["id"].as_str()
    {
        sent.push(id.to_string());
        if sent.len() > 64 {
            sent.remove(0);
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let event = peer_event();
    let mut sent: Vec<String> = Vec::new();
    let config = ClientConfig {
        relays: vec![
            RelayUrl::parse(URLS[0]).unwrap(),
            RelayUrl::parse(URLS[3]).unwrap(),
        ],
    };
    let mut client = RelayClient::new(config, weft_fuzz::crypto(), ChaCha20Rng::seed_from_u64(0));
    let mut now = Timestamp::from_millis(1_790_000_000_000);
    let mut dialled: Vec<ConnId> = Vec::new();
    let conn = |dialled: &Vec<ConnId>, n: u8| {
        dialled
            .get(usize::from(n))
            .copied()
            .unwrap_or(ConnId(u64::from(n) + 1000))
    };
    for op in ops.into_iter().take(512) {
        let input = match op {
            Op::Join { topic: t, relays } => Some(Input::Join {
                topic: topic(t),
                relays: relays
                    .iter()
                    .take(10)
                    .map(|i| RelayUrl::parse(URLS[usize::from(*i) % URLS.len()]).unwrap())
                    .collect(),
            }),
            Op::Leave { topic: t } => Some(Input::Leave { topic: topic(t) }),
            Op::Publish { topic: t, blob } => Some(Input::Publish {
                topic: topic(t),
                blob: Blob::from_bytes(&[blob; 9]).unwrap(),
            }),
            Op::PublishVia {
                relay,
                topic: t,
                blob,
            } => Some(Input::PublishVia {
                relay: RelayUrl::parse(URLS[usize::from(relay) % URLS.len()]).unwrap(),
                topic: topic(t),
                blob: Blob::from_bytes(&[blob; 9]).unwrap(),
            }),
            Op::Drop {
                topic: t,
                blob,
                ttl,
            } => Some(Input::Drop {
                topic: topic(t),
                blob: Blob::from_bytes(&[blob; 9]).unwrap(),
                ttl: Ttl::from_millis(ttl.into()).unwrap(),
            }),
            Op::Fetch { topic: t } => Some(Input::Fetch { topic: topic(t) }),
            Op::RequestIce => Some(Input::RequestIce),
            Op::Opened { conn: c } => Some(Input::Opened {
                conn: conn(&dialled, c),
            }),
            Op::Closed { conn: c } => Some(Input::Closed {
                conn: conn(&dialled, c),
            }),
            Op::DialFailed { conn: c } => Some(Input::DialFailed {
                conn: conn(&dialled, c),
            }),
            Op::Raw { conn: c, text } => Some(Input::Text {
                conn: conn(&dialled, c),
                text,
            }),
            Op::Frame {
                conn: c,
                kind,
                topic: t,
                a,
                more,
            } => Some(Input::Text {
                conn: conn(&dialled, c),
                text: frame(kind, t, a, more, &sent, &event),
            }),
            Op::Online => Some(Input::Online),
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::run_due(&mut client, now, |o| {
                    note_sent(&o, &mut sent);
                    if let Output::Dial { conn, .. } = o {
                        dialled.push(conn);
                    }
                });
                None
            }
        };
        if let Some(input) = input {
            client.handle(now, input);
        }
        while let Some(o) = client.poll() {
            note_sent(&o, &mut sent);
            if let Output::Dial { conn, .. } = o {
                dialled.push(conn);
            }
        }
        assert!(client.rooms().count() <= MAX_ROOMS);
        assert!(client.relays().count() <= MAX_RELAYS);
        for relay in client.relays() {
            assert!(client.queued(relay) <= MAX_QUEUED_FRAMES);
        }
        // The most recent sockets are the ones worth naming.
        if dialled.len() > 256 {
            dialled.drain(..dialled.len() - 256);
        }
    }
});
