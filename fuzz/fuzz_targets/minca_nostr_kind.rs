//! Minca's Nostr relay kind (`minca::nostr_kind::NostrLink`) under arbitrary relay frames mixed
//! with well-formed ones built from a few fuzzed choices (`OK` for events it sent, challenges,
//! `EOSE`, `CLOSED`, events on its subscriptions), so the fuzzer reaches the AUTH flow. It must
//! never panic, and every frame it asks to send must parse as a NIP-01 client message.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use weft_proto::core::Timestamp;
use weft_proto::crypto::default_provider;
use weft_proto::minca::nostr_kind::{LinkEvent, NostrLink};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic, Ttl};
use weft_proto::nostr::message::{ClientMessage, RelayMessage};

#[derive(Arbitrary, Debug)]
enum Op {
    Watch {
        topic: u8,
    },
    Fetch {
        topic: u8,
    },
    Publish {
        topic: u8,
    },
    Drop {
        topic: u8,
        ttl: Option<u32>,
    },
    Raw(String),
    Ok {
        back: u8,
        accepted: bool,
        reason: u8,
    },
    Challenge(String),
    Eose {
        topic: u8,
        fetch: bool,
    },
    Closed {
        topic: u8,
        fetch: bool,
        reason: u8,
    },
    Advance {
        secs: u16,
    },
}

const REASONS: [&str; 4] = [
    "",
    "duplicate: have it",
    "auth-required: who",
    "blocked: no",
];

fn topic(n: u8) -> Topic {
    Topic::from_bytes(&[n % 4; 32])
}

fn sub(n: u8, fetch: bool) -> String {
    format!("{}{}", if fetch { "f" } else { "w" }, topic(n))
}

fuzz_target!(|ops: Vec<Op>| {
    let url = RelayUrl::parse("nostr+wss://relay.example.com/").unwrap();
    let mut link = NostrLink::new(default_provider(), &url);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut now = Timestamp::from_secs(1_790_000_000);
    // Ids of what the link sent, so OKs can name them.
    let mut sent: Vec<[u8; 32]> = Vec::new();
    let blob = Blob::parse("AZ3k").unwrap();
    let note = |frame: &str, sent: &mut Vec<[u8; 32]>| match ClientMessage::parse(frame) {
        Ok(ClientMessage::Event(e) | ClientMessage::Auth(e)) => sent.push(e.id),
        Ok(_) => {}
        Err(e) => panic!("the link sent a malformed frame {frame}: {e}"),
    };
    for op in ops.into_iter().take(64) {
        let frame = match op {
            Op::Watch { topic: t } => {
                if let Ok(f) = link.watch(now, &topic(t)) {
                    note(&f, &mut sent);
                }
                continue;
            }
            Op::Fetch { topic: t } => {
                if let Ok(f) = link.fetch(&topic(t)) {
                    note(&f, &mut sent);
                }
                continue;
            }
            Op::Publish { topic: t } => {
                let f = link.publish(now, &mut rng, &topic(t), &blob);
                note(&f, &mut sent);
                continue;
            }
            Op::Drop { topic: t, ttl } => {
                let ttl = ttl.map(|ms| Ttl::from_millis(u64::from(ms)).unwrap());
                let f = link.drop_blob(now, &mut rng, &topic(t), &blob, ttl);
                note(&f, &mut sent);
                continue;
            }
            Op::Raw(text) => text,
            Op::Ok {
                back,
                accepted,
                reason,
            } => {
                let Some(id) = sent.iter().rev().nth(usize::from(back) % 8).copied() else {
                    continue;
                };
                RelayMessage::Ok {
                    event_id: id,
                    accepted,
                    message: REASONS[usize::from(reason) % 4].into(),
                }
                .to_text()
            }
            Op::Challenge(c) => RelayMessage::Auth(c.chars().take(64).collect()).to_text(),
            Op::Eose { topic: t, fetch } => RelayMessage::Eose(sub(t, fetch)).to_text(),
            Op::Closed {
                topic: t,
                fetch,
                reason,
            } => RelayMessage::Closed {
                subscription: sub(t, fetch),
                message: REASONS[usize::from(reason) % 4].into(),
            }
            .to_text(),
            Op::Advance { secs } => {
                now = Timestamp::from_secs(now.as_secs() + u64::from(secs));
                continue;
            }
        };
        for event in link.on_text(now, &mut rng, &frame) {
            if let LinkEvent::Send(f) = event {
                note(&f, &mut sent);
            }
        }
    }
});
