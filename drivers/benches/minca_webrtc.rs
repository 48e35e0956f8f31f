//! Minca mesh throughput: `cargo bench -p weft-drivers --bench minca_webrtc`.
//!
//! Three numbers from one run, on one thread (so per core):
//!
//! 1. the P-256 ceiling: signatures and verifications per second with the provider a server uses
//!    (`weft_drivers::server_provider()`), and with the pure-Rust default;
//! 2. mesh handshakes per second in memory: two `Mesh` machines on one open in-memory
//!    connection join a room, run `minca-mesh/v1` until each admits the other (§6.2, §7.2: two
//!    signatures and two verifications) and leave, in a public space and in a private space with
//!    read proofs (§6.3);
//! 3. live messages per second over one str0m data channel on loopback UDP: §7.1 frames of a
//!    `live` message, from one `Transport` to another, a window of them in flight.
//!
//! A hand-rolled loop, like `benches/crypto.rs`; each line is the median of a few runs.

use std::collections::VecDeque;
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::json;
use weft_drivers::minca::webrtc::UdpDriver;
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, P256Secret, default_provider, generate_p256};
use weft_proto::minca::mesh::frame::Frame;
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::mesh::{Input, Mesh, Output, RoomConfig, RoomKind};
use weft_proto::minca::note::{CMD_ALL, Es256Notes, Note};
use weft_proto::minca::read_proof::MeshReadAccess;
use weft_proto::minca::space_access::{HeldReadKey, MemorySpace};

const RUNS: usize = 3;
const RUN_TIME: Duration = Duration::from_secs(1);
/// Node keys cycled through by the handshake bench.
const NODES: usize = 16;
/// Frames in flight on the data channel.
const WINDOW: usize = 256;
const T0: u64 = 1_790_000_000_000;
const ROOM: &str = "bench-room";
const SPACE: &str = "bench-space";

/// Median of `RUNS` rates of `op`, which returns how many operations it did.
fn rate(mut op: impl FnMut() -> usize) -> f64 {
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < RUN_TIME {
                n += op();
            }
            n as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn p256_ceiling(name: &str, c: &'static dyn CryptoProvider) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let key = generate_p256(c, &mut rng);
    let public = c.p256_public_key(&key).unwrap();
    let msg = [7u8; 200];
    let sig = c.p256_sign(&key, &msg).unwrap();
    let sign = rate(|| {
        black_box(c.p256_sign(&key, black_box(&msg)).unwrap());
        1
    });
    let verify = rate(|| {
        assert!(c.p256_verify(&public, black_box(&msg), &sig));
        1
    });
    println!("p256 {name:<10} sign {sign:>9.0}/s   verify {verify:>9.0}/s");
}

/// A node's session and what its room needs.
struct Identity {
    key: P256Secret,
    did: String,
    account: String,
    note: String,
}

fn identities(c: &'static dyn CryptoProvider) -> Vec<Identity> {
    let notes = Es256Notes::new(c);
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    (0..NODES)
        .map(|_| {
            let key = generate_p256(c, &mut rng);
            let did = DidKey::P256(c.p256_public_key(&key).unwrap().0).to_did();
            let root = generate_p256(c, &mut rng);
            let account = DidKey::P256(c.p256_public_key(&root).unwrap().0).to_did();
            let claims = Note {
                iss: account.clone(),
                aud: did.clone(),
                sub: account.clone(),
                cmd: CMD_ALL.into(),
                pol: Vec::new(),
                exp: T0 / 1000 + 86_400,
                nbf: None,
            };
            let note = notes.issue(&root, &claims).unwrap();
            Identity {
                key,
                did,
                account,
                note,
            }
        })
        .collect()
}

/// The private space every bench node reads: one read key, every account a reader.
fn private_space(c: &'static dyn CryptoProvider, ids: &[Identity]) -> MemorySpace {
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let secret = generate_p256(c, &mut rng);
    let mut space = MemorySpace::private(SPACE);
    space.add_key(HeldReadKey {
        did: DidKey::P256(c.p256_public_key(&secret).unwrap().0).to_did(),
        secret: Some(secret),
        seal_key: Some([9; 32]),
    });
    for id in ids {
        space.add_reader(&id.account);
    }
    space
}

fn room_kind(
    c: &'static dyn CryptoProvider,
    space: Option<&MemorySpace>,
    id: &Identity,
) -> RoomKind {
    match space {
        None => RoomKind::PublicSpace,
        Some(s) => RoomKind::PrivateSpace(Box::new(MeshReadAccess::new(
            c,
            s.clone(),
            Es256Notes::new(c),
            Some(id.note.clone()),
            ChaCha20Rng::seed_from_u64(4),
        ))),
    }
}

/// Two meshes joined by an in-memory transport: descriptions are placeholders, the channel opens
/// once the answer is applied, and a frame sent on one side arrives on the other.
struct Pair {
    m: [Mesh<ChaCha20Rng>; 2],
    dids: [String; 2],
    notes: [String; 2],
    conn: [Option<ConnId>; 2],
    queue: VecDeque<(usize, Input)>,
}

impl Pair {
    fn new(c: &'static dyn CryptoProvider, a: &Identity, b: &Identity) -> Self {
        Self {
            m: [a, b]
                .map(|id| Mesh::new(id.key.clone(), c, ChaCha20Rng::seed_from_u64(5)).unwrap()),
            dids: [a.did.clone(), b.did.clone()],
            notes: [a.note.clone(), b.note.clone()],
            conn: [None, None],
            queue: VecDeque::new(),
        }
    }

    /// Both join `room` and hear of each other there, as from a relay's hellos (§7.3).
    fn meet(&mut self, room: &str, kind: impl Fn(usize) -> RoomKind) {
        for i in 0..2 {
            let config = RoomConfig {
                room: room.into(),
                space_id: SPACE.into(),
                kind: kind(i),
                note: Some(self.notes[i].clone()),
            };
            self.queue.push_back((i, Input::Join(config)));
            let peer = self.dids[1 - i].clone();
            let room = room.into();
            self.queue.push_back((i, Input::PeerInRoom { room, peer }));
        }
        self.run();
    }

    fn leave(&mut self, room: &str) {
        for i in 0..2 {
            self.queue
                .push_back((i, Input::Leave { room: room.into() }));
        }
        self.run();
    }

    fn admitted(&self, room: &str) -> bool {
        self.m[0].is_admitted(room, &self.dids[1]) && self.m[1].is_admitted(room, &self.dids[0])
    }

    fn run(&mut self) {
        let now = Timestamp::from_millis(T0);
        while let Some((i, input)) = self.queue.pop_front() {
            self.m[i].handle(now, input);
            while let Some(out) = self.m[i].poll() {
                self.carry(i, out);
            }
        }
    }

    fn carry(&mut self, i: usize, out: Output) {
        let description = |conn, sdp: &str| Input::LocalDescription {
            conn,
            sdp: sdp.into(),
        };
        match out {
            Output::CreateOffer { conn, .. } => {
                self.conn[i] = Some(conn);
                self.queue.push_back((i, description(conn, "offer")));
            }
            Output::CreateAnswer { conn, .. } => {
                self.conn[i] = Some(conn);
                self.queue.push_back((i, description(conn, "answer")));
            }
            Output::ToRendezvous {
                room, kind, sdp, ..
            } => {
                let from = self.dids[i].clone();
                let signal = Input::RelaySignal {
                    room,
                    from,
                    kind,
                    sdp,
                };
                self.queue.push_back((1 - i, signal));
            }
            Output::ApplyAnswer { .. } => {
                for j in [i, 1 - i] {
                    let opened = Input::Opened {
                        conn: self.conn[j].unwrap(),
                        local_fingerprint: format!("sha-256 0{j}:AA"),
                        remote_fingerprint: format!("sha-256 0{}:AA", 1 - j),
                    };
                    self.queue.push_back((j, opened));
                }
            }
            Output::Send { bytes, .. } => {
                let conn = self.conn[1 - i].unwrap();
                self.queue.push_back((1 - i, Input::Frame { conn, bytes }));
            }
            _ => {}
        }
    }
}

/// Handshakes per second on one open connection: each is a room both join, hear of each other
/// in, run `minca-mesh/v1` in (two signatures, two verifications, and the read proofs in a
/// private space) until each admits the other, and leave. A first room kept open holds the
/// connection, so no connection set-up is counted.
fn handshakes(name: &str, c: &'static dyn CryptoProvider, ids: &[Identity]) {
    let space = private_space(c, ids);
    for (label, private) in [("public space", false), ("read proofs", true)] {
        let kind = |i: usize| match private {
            false => RoomKind::PublicSpace,
            true => room_kind(c, Some(&space), &ids[i]),
        };
        let mut pair = Pair::new(c, &ids[0], &ids[1]);
        pair.meet("holds-the-connection", kind);
        assert!(pair.admitted("holds-the-connection"));
        let mut n = 0u64;
        let r = rate(|| {
            n += 1;
            let room = format!("{ROOM}-{n}");
            pair.meet(&room, kind);
            assert!(pair.admitted(&room));
            pair.leave(&room);
            1
        });
        println!("mesh handshakes {name:<10} {label:<13} {r:>8.0}/s");
    }
}

/// Two transports on loopback with their data channel open.
fn open_channel() -> [UdpDriver; 2] {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let now = weft_drivers::now();
    let mut d = [
        UdpDriver::bind(now, loopback).unwrap(),
        UdpDriver::bind(now, loopback).unwrap(),
    ];
    let [a, b] = &mut d;
    a.transport.handle_mesh_output(
        now,
        Output::CreateOffer {
            conn: ConnId(0),
            peer: "b".into(),
        },
    );
    let Some(Input::LocalDescription { sdp: offer, .. }) = a.transport.poll_event() else {
        panic!("no offer");
    };
    b.transport.handle_mesh_output(
        now,
        Output::CreateAnswer {
            conn: ConnId(0),
            peer: "a".into(),
            offer,
        },
    );
    let Some(Input::LocalDescription { sdp: answer, .. }) = b.transport.poll_event() else {
        panic!("no answer");
    };
    a.transport.handle_mesh_output(
        now,
        Output::ApplyAnswer {
            conn: ConnId(0),
            answer,
        },
    );
    let mut opened = 0;
    let start = Instant::now();
    while opened < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the channel never opened"
        );
        opened += pump(&mut d, &mut 0);
        std::thread::sleep(Duration::from_millis(1));
    }
    d
}

/// One pass over both sockets and timers; returns how many channels opened, and adds the frames
/// B received to `received`.
fn pump(d: &mut [UdpDriver; 2], received: &mut usize) -> usize {
    let mut opened = 0;
    for (i, side) in d.iter_mut().enumerate() {
        let now = weft_drivers::now();
        side.receive(now).unwrap();
        if side.transport.poll_timeout().is_some_and(|w| w.at <= now) {
            side.transport.handle_timeout(now);
        }
        while let Some(e) = side.transport.poll_event() {
            match e {
                Input::Opened { .. } => opened += 1,
                Input::Frame { .. } if i == 1 => *received += 1,
                _ => {}
            }
        }
        side.flush().unwrap();
    }
    opened
}

fn live_over_data_channel() {
    let mut d = open_channel();
    let frame = bytes::Bytes::from(
        Frame::new(
            ROOM,
            LIVE,
            json!({ "text": "a live message of ordinary length" }),
        )
        .to_bytes("did:key:zDnaemCBstFw5hzNdNggFHZm6GpHoHqNGrwEtrVi9CxGH9V7E"),
    );
    let (mut sent, mut received) = (0usize, 0usize);
    let r = rate(|| {
        let before = received;
        while sent - received < WINDOW {
            let out = Output::Send {
                conn: ConnId(0),
                bytes: frame.clone(),
            };
            d[0].transport.handle_mesh_output(weft_drivers::now(), out);
            sent += 1;
        }
        pump(&mut d, &mut received);
        received - before
    });
    assert_eq!(d[0].transport.counters().send_dropped, 0);
    println!(
        "live messages over one str0m data channel ({} bytes each) {r:>8.0}/s",
        frame.len()
    );
}

fn main() {
    let fast = weft_drivers::server_provider();
    let pure = default_provider();
    p256_ceiling("server", fast);
    p256_ceiling("rustcrypto", pure);
    handshakes("server", fast, &identities(fast));
    handshakes("rustcrypto", pure, &identities(pure));
    live_over_data_channel();
}
