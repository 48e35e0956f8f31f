//! The Minca rendezvous machine (§2, §3) under arbitrary timed input: raw blobs, messages built
//! from fuzzed fields (signed by the right key or another, sealed under the room key so the
//! fuzzer gets past rule 1), a genuine peer's hellos and offers delivered any number of times,
//! joins, leaves, relay reopenings, signals asked for, and time jumps. It must never panic, a
//! room must never hold more than 64 peers, the replay memory must stay within its bound, and
//! after `handle_timeout(now)` it must never ask to be woken at or before `now`. A raw blob's
//! text is also read as a message plaintext, where the fast path must agree with the general one.
//!
//! Speed: the machines sign and check with the insecure stand-in provider (`weft_fuzz::crypto`),
//! so a run pays for parsing and state transitions, not for P-256.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_fuzz::advance;
use weft_proto::codec::base64url;
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{Machine, Timestamp};
use weft_proto::crypto::{P256Secret, generate_p256};
use weft_proto::minca::auth;
use weft_proto::minca::rendezvous::message::{self, Kind, Message};
use weft_proto::minca::rendezvous::{
    Input, MAX_REMEMBERED_PAIRS, MAX_ROOM_PEERS, Output, RelayId, Rendezvous, SignalKind,
};
use weft_proto::minca::room::Room;

/// Made-up names: more than a room holds, so the fuzzer can fill one.
const NAMES: usize = 72;

struct Name {
    secret: P256Secret,
    did: String,
    box_: String,
}

fn names() -> &'static [Name] {
    static NAMES_: OnceLock<Vec<Name>> = OnceLock::new();
    NAMES_.get_or_init(|| {
        let c = weft_fuzz::crypto();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        (0..NAMES)
            .map(|_| {
                let secret = generate_p256(c, &mut rng);
                let did = DidKey::P256(c.p256_public_key(&secret).unwrap().0).to_did();
                let b = generate_p256(c, &mut rng);
                let box_ = base64url::encode(&c.p256_public_key(&b).unwrap().0);
                Name { secret, did, box_ }
            })
            .collect()
    })
}

fn rooms() -> [Room; 3] {
    [
        Room::new("fuzz-a"),
        Room::new("fuzz-b"),
        Room::new("fuzz-c"),
    ]
}

const START: Timestamp = Timestamp::from_millis(1_790_000_000_000);

/// Where a crafted message's `at` falls from now, in ms: inside, on and just past each edge of
/// the 120 s window (`AT_WINDOW`), and far out.
const AT_OFFSETS: [i64; 12] = [
    0,
    1,
    -1,
    119_999,
    -119_999,
    120_000,
    -120_000,
    120_001,
    -120_001,
    3_600_000,
    -86_400_000,
    i64::MIN / 2,
];

/// The descriptions a crafted message signals: empty, short, long, not UTF-8, JSON.
const SDPS: [&[u8]; 6] = [
    b"",
    b"v=0",
    &[b'a'; 2_000],
    &[0xff, 0xfe, 0x00, 0x80],
    br#"{"type":"offer","sdp":"v=0"}"#,
    br#"\u0000\""#,
];

type Node = Rendezvous<ChaCha20Rng>;

/// Moves what `m` published into `into` (at most 64 kept), dropping every other output.
fn collect(m: &mut Node, into: &mut Vec<String>) {
    while let Some(o) = m.poll() {
        keep_published(o, into);
    }
}

/// Keeps `o`'s blob in `into` (at most 64) if it is a publish.
fn keep_published(o: Output, into: &mut Vec<String>) {
    if let Output::Publish { blob, .. } = o {
        if into.len() < 64 {
            into.push(blob);
        }
    }
}

/// The node under test and a genuine peer, both in every room, with their join hellos.
fn start() -> (Node, Node, Vec<String>, Vec<String>) {
    let c = weft_fuzz::crypto();
    let me_secret = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(1));
    let mut me = Rendezvous::new(me_secret, c, ChaCha20Rng::seed_from_u64(2)).unwrap();
    let peer_secret = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(3));
    let mut peer = Rendezvous::new(peer_secret, c, ChaCha20Rng::seed_from_u64(4)).unwrap();
    for r in &rooms() {
        me.handle(START, Input::Join(r.clone()));
        peer.handle(START, Input::Join(r.clone()));
    }
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    collect(&mut me, &mut mine);
    collect(&mut peer, &mut theirs);
    (me, peer, mine, theirs)
}

#[derive(Arbitrary, Debug)]
enum Op {
    Raw {
        room: u8,
        blob: String,
    },
    Crafted {
        room: u8,
        name: u8,
        signer: u8,
        kind: u8,
        at: u8,
        box_sel: u8,
        to_me: bool,
        sdp: u8,
        extra: u8,
    },
    PeerBlob {
        index: u8,
        room: u8,
    },
    PeerHears,
    PeerSignals {
        room: u8,
        kind: bool,
    },
    Join {
        room: u8,
    },
    Leave {
        room: u8,
    },
    RelayOpened {
        relay: u8,
    },
    Signal {
        room: u8,
        name: u8,
        answer: bool,
        to_peer: bool,
    },
    Advance {
        ms: u32,
    },
}

fuzz_target!(|ops: Vec<Op>| {
    let c = weft_fuzz::crypto();
    let (mut me, mut peer, mut mine, mut theirs) = start();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let rooms = rooms();
    let mut now = START;
    let pick = |i: u8| rooms[usize::from(i) % rooms.len()].clone();
    for op in ops.into_iter().take(128) {
        let input = match op {
            Op::Raw { room, blob } => {
                // The raw text as a message plaintext too: where a fast path (by position, or
                // serde without a tree) reads it at all, it reads what the tree reads.
                let tree = Message::parse_tree(blob.as_bytes());
                if let Some(fast) = Message::from_text_common(blob.as_bytes()) {
                    assert_eq!(tree, Ok(fast));
                }
                if let Some(fast) = Message::from_text_as_written(blob.as_bytes()) {
                    assert_eq!(tree, Ok(fast));
                }
                assert_eq!(Message::parse(blob.as_bytes()), tree);
                let r = pick(room);
                Some(Input::Blob {
                    relay: RelayId(0),
                    topic: r.topic(c),
                    blob,
                })
            }
            Op::Crafted {
                room,
                name,
                signer,
                kind,
                at,
                box_sel,
                to_me,
                sdp,
                extra,
            } => {
                let r = pick(room);
                let topic = r.topic(c);
                let n = &names()[usize::from(name) % NAMES];
                let s = &names()[usize::from(signer) % NAMES];
                let kind = [Kind::Hello, Kind::Offer, Kind::Answer][usize::from(kind % 3)];
                let at = now
                    .as_millis()
                    .saturating_add_signed(AT_OFFSETS[usize::from(at) % AT_OFFSETS.len()]);
                let sdp = SDPS[usize::from(sdp) % SDPS.len()];
                let box_ = match box_sel % 4 {
                    0 => n.box_.clone(),
                    1 => me.box_key().to_string(),
                    2 => base64url::encode(&[box_sel; 33]),
                    _ => String::from_utf8_lossy(sdp).into_owned(),
                };
                let to = if to_me {
                    me.did().to_string()
                } else {
                    n.did.clone()
                };
                let signal =
                    (kind != Kind::Hello || extra % 5 == 0).then(|| (to, base64url::encode(sdp)));
                let mut m = Message {
                    kind,
                    at,
                    from: n.did.clone(),
                    box_,
                    signal,
                    half_signal: false,
                    sig: String::new(),
                };
                m.sig = auth::sign(c, &s.secret, &m.signed_text(&topic)).unwrap();
                let mut v = m.to_json();
                if extra % 7 == 1 {
                    v["at"] = json!(-1);
                } else if extra % 7 == 2 {
                    v["kind"] = Value::from(String::from_utf8_lossy(sdp).into_owned());
                }
                let blob = message::seal_blob(c, &mut rng, &r.key(c), &topic, &v);
                Some(Input::Blob {
                    relay: RelayId(1),
                    topic,
                    blob,
                })
            }
            Op::PeerBlob { index, room } => {
                let blob = theirs
                    .get(usize::from(index) % theirs.len().max(1))
                    .cloned()
                    .unwrap_or_default();
                Some(Input::Blob {
                    relay: RelayId(2),
                    topic: pick(room).topic(c),
                    blob,
                })
            }
            Op::PeerHears => {
                for r in &rooms {
                    for blob in &mine {
                        peer.handle(
                            now,
                            Input::Blob {
                                relay: RelayId(0),
                                topic: r.topic(c),
                                blob: blob.clone(),
                            },
                        );
                    }
                }
                mine.clear();
                collect(&mut peer, &mut theirs);
                None
            }
            Op::PeerSignals { room, kind } => {
                let kind = if kind {
                    SignalKind::Offer
                } else {
                    SignalKind::Answer
                };
                let description = json!({"type": "offer", "sdp": "v=0"});
                peer.handle(
                    now,
                    Input::Signal {
                        room: pick(room),
                        to: me.did().to_string(),
                        kind,
                        description,
                    },
                );
                collect(&mut peer, &mut theirs);
                None
            }
            Op::Join { room } => Some(Input::Join(pick(room))),
            Op::Leave { room } => Some(Input::Leave(pick(room))),
            Op::RelayOpened { relay } => Some(Input::RelayOpened(RelayId(relay.into()))),
            Op::Signal {
                room,
                name,
                answer,
                to_peer,
            } => {
                let to = if to_peer {
                    peer.did().to_string()
                } else {
                    names()[usize::from(name) % NAMES].did.clone()
                };
                let kind = if answer {
                    SignalKind::Answer
                } else {
                    SignalKind::Offer
                };
                Some(Input::Signal {
                    room: pick(room),
                    to,
                    kind,
                    description: json!({"sdp": "x"}),
                })
            }
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::run_due(&mut me, now, |o| keep_published(o, &mut mine));
                None
            }
        };
        if let Some(input) = input {
            me.handle(now, input);
        }
        collect(&mut me, &mut mine);
        for r in &rooms {
            assert!(me.peers(r).len() <= MAX_ROOM_PEERS);
        }
        assert!(me.remembered_pairs() <= MAX_REMEMBERED_PAIRS);
    }
});
