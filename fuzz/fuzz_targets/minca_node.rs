//! The composed Minca node (relay client + rendezvous + mesh, `proto::minca::node`) under
//! arbitrary timed input: rooms joined and left, relay sockets opening, closing, failing and
//! speaking arbitrary or well-formed relay text, peer connections opening and carrying arbitrary
//! bytes, node sockets, application sends and time jumps. The parts have targets of their own
//! (`minca_relay_client`, `minca_rendezvous`, `minca_mesh`); this one drives the glue between
//! them: the relay and peer id spaces, what one part's output becomes in another. It must never
//! panic, and after `handle_timeout(now)` it never asks to be woken at or before `now`.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use weft_fuzz::advance;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::generate_p256;
use weft_proto::minca::mesh::RoomKind;
use weft_proto::minca::node::{Input, Join, Node, NodeConfig};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::room::Room;

#[derive(Arbitrary, Debug)]
enum Op {
    Join {
        space: u8,
        channel: bool,
    },
    Leave {
        space: u8,
    },
    RelayOpened {
        conn: u8,
    },
    RelayText {
        conn: u8,
        text: String,
    },
    RelayFrame {
        conn: u8,
        space: u8,
        kind: u8,
        seq: u8,
    },
    RelayClosed {
        conn: u8,
    },
    RelayDialFailed {
        conn: u8,
    },
    Online,
    LocalDescription {
        conn: u8,
        sdp: String,
    },
    PeerOpened {
        conn: u8,
    },
    PeerFrame {
        conn: u8,
        bytes: Vec<u8>,
    },
    PeerClosed {
        conn: u8,
    },
    NodeSocketOpened {
        conn: u8,
        space: u8,
        peer: u8,
    },
    NodeSocketMessage {
        conn: u8,
        kind: u8,
    },
    NodeSocketClosed {
        conn: u8,
    },
    Send {
        space: u8,
        big: bool,
    },
    Advance {
        ms: u32,
    },
}

const SPACES: [&str; 3] = ["s0", "s1", "s2"];
const T0: u64 = 1_790_000_000_000;
/// A topic of exactly 43 base64url characters (§1.4), for well-formed relay frames.
const TOPIC: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn room(space: u8) -> Room {
    Room::of_space(
        weft_fuzz::crypto(),
        SPACES[usize::from(space) % SPACES.len()],
    )
}

fn conn(c: u8) -> ConnId {
    ConnId(u64::from(c % 16))
}

/// A relay frame the relay client parses, with fuzzed choices of type and contents.
fn relay_frame(space: u8, kind: u8, seq: u8) -> String {
    let topic = room(space).topic(weft_fuzz::crypto());
    match kind % 6 {
        0 => json!({"type":"blob","topic":topic,"blob":"AAAA","seq":seq}).to_string(),
        1 => json!({"type":"page","topic":topic,"blobs":[{"blob":"AAAA","seq":seq}],"more":seq % 2 == 0}).to_string(),
        2 => json!({"type":"pong"}).to_string(),
        3 => json!({"type":"ping"}).to_string(),
        4 => json!({"type":"ice","iceServers":[{"urls":"turn:127.0.0.1:3478","username":"u","credential":"c"}],"expiresAt":T0 / 1000 + 600}).to_string(),
        _ => json!({"type":"blob","topic":TOPIC,"blob":"!!","seq":seq}).to_string(),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let crypto = weft_fuzz::crypto();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let session = generate_p256(crypto, &mut rng);
    let config = NodeConfig {
        relays: vec![RelayUrl::parse("wss://relay.example/").unwrap()],
    };
    let Ok(mut node) = Node::new(session, config, crypto, rng) else {
        return;
    };
    let mut now = Timestamp::from_millis(T0);
    for op in ops.into_iter().take(256) {
        let input = match op {
            Op::Join { space, channel } => {
                let kind = if channel {
                    RoomKind::Channel
                } else {
                    RoomKind::PublicSpace
                };
                let id = SPACES[usize::from(space) % SPACES.len()];
                Some(Input::Join(Join::space(crypto, id, kind, None)))
            }
            Op::Leave { space } => Some(Input::Leave(room(space))),
            Op::RelayOpened { conn: c } => Some(Input::RelayOpened { conn: conn(c) }),
            Op::RelayText { conn: c, text } => Some(Input::RelayText {
                conn: conn(c),
                text: text.into(),
            }),
            Op::RelayFrame {
                conn: c,
                space,
                kind,
                seq,
            } => Some(Input::RelayText {
                conn: conn(c),
                text: relay_frame(space, kind, seq).into(),
            }),
            Op::RelayClosed { conn: c } => Some(Input::RelayClosed { conn: conn(c) }),
            Op::RelayDialFailed { conn: c } => Some(Input::RelayDialFailed { conn: conn(c) }),
            Op::Online => Some(Input::Online),
            Op::LocalDescription { conn: c, sdp } => {
                Some(Input::LocalDescription { conn: conn(c), sdp })
            }
            Op::PeerOpened { conn: c } => Some(Input::PeerOpened {
                conn: conn(c),
                local_fingerprint: "sha-256 AA".into(),
                remote_fingerprint: "sha-256 BB".into(),
            }),
            Op::PeerFrame { conn: c, bytes } => Some(Input::PeerFrame {
                conn: conn(c),
                bytes: bytes.into(),
            }),
            Op::PeerClosed { conn: c } => Some(Input::PeerClosed { conn: conn(c) }),
            Op::NodeSocketOpened {
                conn: c,
                space,
                peer,
            } => Some(Input::NodeSocketOpened {
                conn: conn(c),
                room: room(space),
                peer: format!("did:key:zPeer{}", peer % 4),
            }),
            Op::NodeSocketMessage { conn: c, kind } => Some(Input::NodeSocketMessage {
                conn: conn(c),
                kind: ["live", "who", "__signal", "x"][usize::from(kind) % 4].into(),
                payload: json!({"n": kind}),
            }),
            Op::NodeSocketClosed { conn: c } => Some(Input::NodeSocketClosed { conn: conn(c) }),
            Op::Send { space, big } => Some(Input::Send {
                room: room(space),
                to: None,
                kind: "live".into(),
                payload: if big {
                    json!("x".repeat(70_000))
                } else {
                    json!({"hi": 1})
                },
            }),
            Op::Advance { ms } => {
                now = now + std::time::Duration::from_millis(ms.into());
                advance::tick(&mut node, now, drop);
                None
            }
        };
        if let Some(input) = input {
            node.handle(now, input);
        }
        while node.poll().is_some() {}
    }
});
