//! The Minca mesh machine (§7.2, §7.3, §8, §9) under arbitrary timed input: rooms joined and
//! left, relay hellos and signals, connections made, opened and closed, raw bytes and well-formed
//! frames built from a few fuzzed choices (hellos, proofs, peer lists, genuinely signed signals,
//! leaves, live, who with real and bogus notes), application sends, access-history changes (a
//! private room backed by the real `MeshReadAccess`: keys changing, members removed) and time
//! jumps. It must never panic, its tables stay
//! within their bounds, and after `handle_timeout(now)` it never asks to be woken at or before
//! `now`.
//!
//! Speed: the machine signs and checks with the insecure stand-in provider (`weft_fuzz::crypto`),
//! so a run pays for parsing and state transitions, not for P-256.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::{Map, Value, json};
use weft_fuzz::advance;
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{P256Secret, generate_p256};
use weft_proto::minca::mesh::frame::Frame;
use weft_proto::minca::mesh::introduction::{Signal, SignalKind};
use weft_proto::minca::mesh::machine::{MAX_CONNECTIONS, MAX_ROOM_PEERS, MAX_ROOMS};
use weft_proto::minca::mesh::{Input, Mesh, ReadAccess, RoomConfig, RoomKind};
use weft_proto::minca::note::{CMD_ALL, Es256Notes, Note};
use weft_proto::minca::read_proof::MeshReadAccess;
use weft_proto::minca::space_access::{HeldReadKey, MemorySpace};

#[derive(Arbitrary, Debug)]
enum Op {
    Join {
        room: u8,
        kind: u8,
    },
    Leave {
        room: u8,
    },
    PeerInRoom {
        room: u8,
        peer: u8,
    },
    RelaySignal {
        room: u8,
        peer: u8,
        offer: bool,
    },
    LocalDescription {
        conn: u8,
    },
    Opened {
        conn: u8,
        bound: bool,
    },
    Closed {
        conn: u8,
    },
    Bytes {
        conn: u8,
        data: Vec<u8>,
    },
    Frame {
        conn: u8,
        room: u8,
        kind: u8,
        a: u8,
        b: u8,
    },
    LetGo {
        room: u8,
        peer: u8,
    },
    FormerMember {
        room: u8,
        peer: u8,
    },
    AccessChanged {
        room: u8,
    },
    /// Changes the history of the private space every real read access shares.
    History {
        key: bool,
        remove: u8,
    },
    Send {
        room: u8,
        peer: Option<u8>,
        kind: u8,
        big: bool,
    },
    Advance {
        ms: u32,
    },
}

const ROOMS: [&str; 3] = ["r0", "r1", "r2"];
const T0: u64 = 1_790_000_000_000;

struct ReadKey(bool);

impl ReadAccess for ReadKey {
    fn prove(&self, label: &str) -> Option<Map<String, Value>> {
        self.0.then(|| {
            let mut m = Map::new();
            m.insert("read".into(), Value::String(label.len().to_string()));
            m
        })
    }

    fn verify(&self, _: Timestamp, _: &str, label: &str, proof: &Map<String, Value>) -> bool {
        proof.get("read").and_then(Value::as_str) == Some(&label.len().to_string())
    }
}

fn peers() -> &'static [(P256Secret, String)] {
    static PEERS: OnceLock<Vec<(P256Secret, String)>> = OnceLock::new();
    PEERS.get_or_init(|| {
        let c = weft_fuzz::crypto();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        (0..5)
            .map(|_| {
                let k = generate_p256(c, &mut rng);
                let did = DidKey::P256(c.p256_public_key(&k).unwrap().0).to_did();
                (k, did)
            })
            .collect()
    })
}

/// A note for everything about peer `i + 1`'s account, made out to peer `i`'s session.
fn note(i: u8) -> String {
    let p = peers();
    let (root, _) = &p[(usize::from(i) + 1) % p.len()];
    let claims = Note {
        iss: String::new(),
        aud: p[usize::from(i) % p.len()].1.clone(),
        sub: String::new(),
        cmd: CMD_ALL.into(),
        pol: Vec::new(),
        exp: T0 / 1000 + 3600,
        nbf: None,
    };
    Es256Notes::new(weft_fuzz::crypto())
        .issue(root, &claims)
        .unwrap()
}

fn read_key(i: u8) -> HeldReadKey {
    let (secret, did) = peers()[usize::from(i) % peers().len()].clone();
    HeldReadKey {
        did,
        secret: Some(secret),
        seal_key: Some([i; 32]),
    }
}

/// The private space the real read accesses share, behind a lock the target changes.
type Shared = std::sync::Arc<std::sync::Mutex<MemorySpace>>;

struct SharedSpace(Shared);

impl weft_proto::minca::space_access::SpaceAccess for SharedSpace {
    fn space_id(&self) -> String {
        self.0.lock().unwrap().space_id()
    }
    fn is_private(&self) -> bool {
        self.0.lock().unwrap().is_private()
    }
    fn current_read_key(&self) -> Option<String> {
        self.0.lock().unwrap().current_read_key()
    }
    fn held_read_keys(&self) -> Vec<HeldReadKey> {
        self.0.lock().unwrap().held_read_keys()
    }
    fn new_key_due(&self) -> bool {
        self.0.lock().unwrap().new_key_due()
    }
    fn is_reader(&self, a: &str) -> bool {
        self.0.lock().unwrap().is_reader(a)
    }
    fn is_former_member(&self, a: &str) -> bool {
        self.0.lock().unwrap().is_former_member(a)
    }
}

fn frame(room: &str, kind: u8, a: u8, b: u8, now: u64) -> Frame {
    let p = peers();
    let peer = |i: u8| &p[i as usize % p.len()];
    let (kind, payload) = match kind % 9 {
        0 => ("__auth-hello", json!({"nonce": format!("n{a}")})),
        1 => (
            "__auth-proof",
            json!({"sig": "A".repeat(usize::from(a) % 90), "read": b.to_string()}),
        ),
        2 => ("__peers", json!([peer(a).1, peer(b).1, "nonsense", 7])),
        3 => {
            let (k, origin) = peer(a);
            let kind = if b % 2 == 0 {
                SignalKind::Offer
            } else {
                SignalKind::Answer
            };
            let at = now.saturating_sub(u64::from(b) * 1000);
            let s = Signal::new(
                weft_fuzz::crypto(),
                k,
                room,
                origin,
                &peer(b).1,
                kind,
                "v=0",
                at,
            );
            ("__signal", s.map(|s| s.to_payload()).unwrap_or(Value::Null))
        }
        4 => ("__leave", json!({"room": room})),
        5 => ("live", json!("x".repeat(usize::from(a) * 300))),
        6 if a % 2 == 0 => ("who", json!({"note": note(b)})),
        6 => ("who", json!({"note": a})),
        7 => ("chat", json!(b)),
        _ => ("__signal", json!({"origin": peer(a).1, "hops": b})),
    };
    Frame::new(room, kind, payload)
}

fuzz_target!(|ops: Vec<Op>| {
    let c = weft_fuzz::crypto();
    let key = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(1));
    let mut mesh = Mesh::new(key, c, ChaCha20Rng::seed_from_u64(2)).unwrap();
    let p = peers();
    let mut now = T0;
    let space: Shared = Default::default();
    {
        let mut s = space.lock().unwrap();
        *s = MemorySpace::private("space");
        s.add_key(read_key(0));
        for (_, did) in p {
            s.add_reader(did);
        }
    }
    let mut next_key = 1u8;
    for op in ops.into_iter().take(256) {
        let t = Timestamp::from_millis(now);
        let room = |r: u8| String::from(ROOMS[r as usize % ROOMS.len()]);
        let peer = |i: u8| p[i as usize % p.len()].1.clone();
        let conn = |c: u8| ConnId(u64::from(c % 16));
        let input = match op {
            Op::Join { room: r, kind } => Input::Join(RoomConfig {
                room: room(r),
                space_id: "space".into(),
                kind: match kind % 5 {
                    0 => RoomKind::PublicSpace,
                    1 => RoomKind::Channel,
                    4 => RoomKind::PrivateSpace(Box::new(MeshReadAccess::new(
                        c,
                        SharedSpace(space.clone()),
                        Es256Notes::new(c),
                        Some(note(0)),
                        ChaCha20Rng::seed_from_u64(u64::from(kind)),
                    ))),
                    k => RoomKind::PrivateSpace(Box::new(ReadKey(k == 2))),
                },
                note: (kind % 2 == 0).then(|| "note".into()),
            }),
            Op::Leave { room: r } => Input::Leave { room: room(r) },
            Op::PeerInRoom { room: r, peer: i } => Input::PeerInRoom {
                room: room(r),
                peer: peer(i),
            },
            Op::RelaySignal {
                room: r,
                peer: i,
                offer,
            } => Input::RelaySignal {
                room: room(r),
                from: peer(i),
                kind: if offer {
                    SignalKind::Offer
                } else {
                    SignalKind::Answer
                },
                sdp: "v=0".into(),
            },
            Op::LocalDescription { conn: c } => Input::LocalDescription {
                conn: conn(c),
                sdp: "v=0".into(),
            },
            Op::Opened { conn: c, bound } => Input::Opened {
                conn: conn(c),
                local_fingerprint: if bound {
                    "sha-256 AA".into()
                } else {
                    String::new()
                },
                remote_fingerprint: if bound {
                    "sha-256 BB".into()
                } else {
                    String::new()
                },
            },
            Op::Closed { conn: c } => Input::Closed { conn: conn(c) },
            Op::Bytes { conn: c, data } => Input::Frame {
                conn: conn(c),
                bytes: data.into(),
            },
            Op::Frame {
                conn: c,
                room: r,
                kind,
                a,
                b,
            } => Input::Frame {
                conn: conn(c),
                bytes: frame(&room(r), kind, a, b, now).to_bytes(&peer(a)).into(),
            },
            Op::LetGo { room: r, peer: i } => Input::LetGo {
                room: room(r),
                peer: peer(i),
            },
            Op::FormerMember { room: r, peer: i } => Input::FormerMember {
                room: room(r),
                peer: peer(i),
            },
            Op::AccessChanged { room: r } => Input::AccessChanged { room: room(r) },
            Op::History { key, remove } => {
                {
                    let mut s = space.lock().unwrap();
                    if key {
                        s.add_key(read_key(next_key));
                        next_key = next_key.wrapping_add(1);
                    } else {
                        s.remove_member(&peer(remove));
                    }
                }
                // The mesh notices the change on its own at the next event.
                mesh.handle_timeout(t);
                while mesh.poll().is_some() {}
                continue;
            }
            Op::Send {
                room: r,
                peer: i,
                kind,
                big,
            } => Input::Send {
                room: room(r),
                to: i.map(peer),
                kind: ["live", "chat", "__leave", "who"][kind as usize % 4].into(),
                payload: if big {
                    json!("x".repeat(70_000))
                } else {
                    json!(kind)
                },
            },
            Op::Advance { ms } => {
                now += u64::from(ms);
                let t = Timestamp::from_millis(now);
                advance::tick(&mut mesh, t, drop);
                continue;
            }
        };
        mesh.handle(t, input);
        while mesh.poll().is_some() {}
        assert!(mesh.connection_count() <= MAX_CONNECTIONS);
        assert!(mesh.tracked_peers() <= MAX_ROOMS * MAX_ROOM_PEERS);
    }
});
