//! The Minca mesh machine (§5.1, §7.2, §7.3, §8, §9) wired through an in-memory fake transport.
//!
//! Descriptions are opaque strings the harness makes up; a connection opens on both sides once
//! the offerer has applied the answer; each side's channel-binding fingerprints are strings the
//! harness picks, and a man in the middle is a different pair on each side. Virtual time steps to
//! the earliest wakeup, with a step limit.
#![cfg(feature = "minca")]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, P256Secret, default_provider, generate_p256};
use weft_proto::minca::auth;
use weft_proto::minca::limits::{LIVE, MAX_LIVE_CHARS};
use weft_proto::minca::mesh::frame::{
    AUTH_HELLO, AUTH_PROOF, Frame, PEERS, RESERVED_TYPES, SIGNAL,
};
use weft_proto::minca::mesh::introduction::{Signal, SignalKind};
use weft_proto::minca::mesh::machine::{
    ATTEMPT_TIMEOUT, HANDSHAKE_TIMEOUT, MAX_CONNECTIONS, MAX_HALF_OPEN_INTRODUCED, MAX_ROOM_PEERS,
    PEER_BYTE_RATE, PROOF_FAILURE_BACKOFF, UNCLAIMED_TIMEOUT, WHO,
};
use weft_proto::minca::mesh::{Input, Mesh, Output, RoomConfig, RoomKind};
use weft_proto::minca::note::{CMD_ALL, Es256Notes, MAX_NOTE_CHARS, Note};
use weft_proto::minca::read_proof::{MeshReadAccess, WHO_GRACE};
use weft_proto::minca::space_access::{HeldReadKey, MemorySpace, SpaceAccess};

const T0: u64 = 1_790_000_000_000;
const R1: &str = "room-one";
const R2: &str = "room-two";
const STEP_LIMIT: usize = 100_000;

fn key(seed: u64) -> (P256Secret, String) {
    let c = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let k = generate_p256(c, &mut rng);
    let did = DidKey::P256(c.p256_public_key(&k).unwrap().0).to_did();
    (k, did)
}

/// A note for everything about `root`'s account, made out to the session `aud` (01 §7.5, weft's
/// token), valid for a long while after T0.
fn note_for(root: &P256Secret, aud: &str) -> String {
    let claims = Note {
        iss: String::new(),
        aud: aud.into(),
        sub: String::new(),
        cmd: CMD_ALL.into(),
        pol: Vec::new(),
        exp: T0 / 1000 + 1_000_000,
        nbf: None,
    };
    Es256Notes::new(default_provider())
        .issue(root, &claims)
        .unwrap()
}

/// A read key of a private space (§6.3), with its secret and the seal key of the space key behind
/// it.
fn read_key(seed: u64) -> HeldReadKey {
    let (secret, did) = key(seed);
    HeldReadKey {
        did,
        secret: Some(secret),
        seal_key: Some([seed as u8; 32]),
    }
}

/// One node's access history of a private space, held by the test as a host holds it, while the
/// node's mesh reads it through its read access (§6.3).
#[derive(Clone, Default)]
struct Space(Arc<Mutex<MemorySpace>>);

impl Space {
    /// A private space of `room`'s space id, holding `keys` (oldest first) and `readers`.
    fn private(room: &str, keys: &[&HeldReadKey], readers: &[&str]) -> Self {
        let mut s = MemorySpace::private(&format!("space-{room}"));
        for k in keys {
            s.add_key((*k).clone());
        }
        for r in readers {
            s.add_reader(r);
        }
        Self(Arc::new(Mutex::new(s)))
    }

    fn change(&self, f: impl FnOnce(&mut MemorySpace)) {
        f(&mut self.0.lock().unwrap());
    }
}

impl SpaceAccess for Space {
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
    fn is_reader(&self, account: &str) -> bool {
        self.0.lock().unwrap().is_reader(account)
    }
    fn is_former_member(&self, account: &str) -> bool {
        self.0.lock().unwrap().is_former_member(account)
    }
    fn turned_away(&self, session: &str) -> bool {
        self.0.lock().unwrap().turned_away(session)
    }
}

struct Node {
    mesh: Mesh<ChaCha20Rng>,
    did: String,
    fp: String,
    /// The account behind the node's session, and the session's note (§6.4).
    account: String,
    note: String,
}

#[derive(Clone, Debug)]
struct Sent {
    from: usize,
    to: usize,
    frame: Frame,
    /// The bytes as the mesh handed them over, held so that buffers can be compared.
    bytes: bytes::Bytes,
}

struct Net {
    now: u64,
    nodes: Vec<Node>,
    queue: VecDeque<(usize, Input)>,
    links: BTreeMap<(usize, ConnId), (usize, ConnId)>,
    offers: BTreeMap<String, (usize, ConnId)>,
    answers: BTreeMap<String, (usize, ConnId, String)>,
    relay_up: bool,
    /// Node pairs a man in the middle sits between.
    mitm: BTreeSet<(usize, usize)>,
    /// Frames lost on the wire: (from node, type).
    lost: BTreeSet<(usize, &'static str)>,
    outputs: Vec<(usize, Output)>,
    sent: Vec<Sent>,
}

impl Net {
    fn new(n: usize) -> Self {
        let nodes = (0..n)
            .map(|i| {
                let (k, did) = key(100 + i as u64);
                let mesh =
                    Mesh::new(k, default_provider(), ChaCha20Rng::seed_from_u64(i as u64)).unwrap();
                assert_eq!(mesh.did(), did);
                let (root, account) = key(500 + i as u64);
                let note = note_for(&root, &did);
                Node {
                    mesh,
                    did,
                    fp: format!("sha-256 {i:02X}:{i:02X}"),
                    account,
                    note,
                }
            })
            .collect();
        Self {
            now: T0,
            nodes,
            queue: VecDeque::new(),
            links: BTreeMap::new(),
            offers: BTreeMap::new(),
            answers: BTreeMap::new(),
            relay_up: true,
            mitm: BTreeSet::new(),
            lost: BTreeSet::new(),
            outputs: Vec::new(),
            sent: Vec::new(),
        }
    }

    fn did(&self, i: usize) -> String {
        self.nodes[i].did.clone()
    }

    fn index_of(&self, did: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.did == did)
    }

    fn join(&mut self, i: usize, room: &str, kind: RoomKind) {
        let note = Some(self.nodes[i].note.clone());
        self.join_with_note(i, room, kind, note);
    }

    fn join_with_note(&mut self, i: usize, room: &str, kind: RoomKind, note: Option<String>) {
        self.input(
            i,
            Input::Join(RoomConfig {
                room: room.into(),
                space_id: format!("space-{room}"),
                kind,
                note,
            }),
        );
    }

    /// Joins a private space's room with the real read access over `space` (§6.3), proving with
    /// `member_note` (the note it seals as `member`, if any).
    fn join_private(&mut self, i: usize, room: &str, space: &Space, member_note: Option<String>) {
        let c = default_provider();
        let access = MeshReadAccess::new(
            c,
            space.clone(),
            Es256Notes::new(c),
            member_note,
            ChaCha20Rng::seed_from_u64(1_000 + i as u64),
        );
        self.join(i, room, RoomKind::PrivateSpace(Box::new(access)));
    }

    fn account(&self, i: usize) -> String {
        self.nodes[i].account.clone()
    }

    /// The accounts node `i` was told of for the peers of `room`, in order.
    fn accounts_told(&self, i: usize, room: &str) -> Vec<(String, Option<String>)> {
        self.outputs
            .iter()
            .filter_map(|(n, o)| match o {
                Output::Account {
                    room: r,
                    peer,
                    account,
                } if *n == i && r == room => Some((peer.clone(), account.clone())),
                _ => None,
            })
            .collect()
    }

    /// The peers node `i` let go of in `room`, with the accounts their `who` showed.
    fn let_go_of(&self, i: usize, room: &str) -> Vec<(String, Option<String>)> {
        self.outputs
            .iter()
            .filter_map(|(n, o)| match o {
                Output::LetGo {
                    room: r,
                    peer,
                    account,
                } if *n == i && r == room => Some((peer.clone(), account.clone())),
                _ => None,
            })
            .collect()
    }

    /// Rendezvous tells each of the pair that the other is in `room` (a hello each way).
    fn meet_by_relay(&mut self, a: usize, b: usize, room: &str) {
        let (da, db) = (self.did(a), self.did(b));
        self.input(
            a,
            Input::PeerInRoom {
                room: room.into(),
                peer: db,
            },
        );
        self.input(
            b,
            Input::PeerInRoom {
                room: room.into(),
                peer: da,
            },
        );
    }

    fn input(&mut self, i: usize, input: Input) {
        self.queue.push_back((i, input));
    }

    fn conn_of(&self, i: usize, j: usize) -> Option<ConnId> {
        self.links
            .iter()
            .find(|((a, _), (b, _))| *a == i && *b == j)
            .map(|((_, c), _)| *c)
    }

    /// Puts `bytes` on the wire from `from` to `to`, as if `from`'s node had sent it.
    fn inject(&mut self, from: usize, to: usize, bytes: Vec<u8>) {
        let conn = self.conn_of(to, from).expect("a connection");
        self.input(
            to,
            Input::Frame {
                conn,
                bytes: bytes.into(),
            },
        );
    }

    fn drain(&mut self, i: usize) {
        while let Some(out) = self.nodes[i].mesh.poll() {
            self.outputs.push((i, out.clone()));
            match out {
                Output::CreateOffer { conn, .. } => {
                    let sdp = format!("offer {i} {}", conn.0);
                    self.offers.insert(sdp.clone(), (i, conn));
                    self.input(i, Input::LocalDescription { conn, sdp });
                }
                Output::CreateAnswer { conn, offer, .. } => {
                    let sdp = format!("answer {i} {}", conn.0);
                    self.answers.insert(sdp.clone(), (i, conn, offer));
                    self.input(i, Input::LocalDescription { conn, sdp });
                }
                Output::ApplyAnswer { conn, answer } => {
                    let Some((j, cj, offer)) = self.answers.get(&answer).cloned() else {
                        continue;
                    };
                    if self.offers.get(&offer) != Some(&(i, conn)) {
                        continue;
                    }
                    self.links.insert((i, conn), (j, cj));
                    self.links.insert((j, cj), (i, conn));
                    let tampered = self.mitm.contains(&(i.min(j), i.max(j)));
                    let remote_of = |k: usize, other: usize, net: &Net| {
                        if tampered {
                            format!("sha-256 EE:{k:02X}")
                        } else {
                            net.nodes[other].fp.clone()
                        }
                    };
                    let (ri, rj) = (remote_of(i, j, self), remote_of(j, i, self));
                    let (li, lj) = (self.nodes[i].fp.clone(), self.nodes[j].fp.clone());
                    self.input(
                        i,
                        Input::Opened {
                            conn,
                            local_fingerprint: li,
                            remote_fingerprint: ri,
                        },
                    );
                    self.input(
                        j,
                        Input::Opened {
                            conn: cj,
                            local_fingerprint: lj,
                            remote_fingerprint: rj,
                        },
                    );
                }
                Output::Send { conn, bytes } => {
                    if let Some(&(j, cj)) = self.links.get(&(i, conn)) {
                        if let Ok(frame) = Frame::parse(&bytes) {
                            let lost = self.lost.iter().any(|(f, k)| *f == i && *k == frame.kind);
                            self.sent.push(Sent {
                                from: i,
                                to: j,
                                frame,
                                bytes: bytes.clone(),
                            });
                            if lost {
                                continue;
                            }
                        }
                        self.input(j, Input::Frame { conn: cj, bytes });
                    }
                }
                Output::Close { conn } => {
                    if let Some((j, cj)) = self.links.remove(&(i, conn)) {
                        self.links.remove(&(j, cj));
                        self.input(j, Input::Closed { conn: cj });
                    }
                }
                Output::ToRendezvous {
                    room,
                    to,
                    kind,
                    sdp,
                } => {
                    let j = self.index_of(&to).filter(|_| self.relay_up);
                    if let Some(j) = j {
                        let from = self.did(i);
                        let signal = Input::RelaySignal {
                            room,
                            from,
                            kind,
                            sdp,
                        };
                        self.input(j, signal);
                    }
                }
                _ => {}
            }
        }
    }

    /// Runs inputs and timers up to `until` (ms after T0).
    fn run_until(&mut self, until: u64) {
        let until = T0 + until;
        for _ in 0..STEP_LIMIT {
            if let Some((i, input)) = self.queue.pop_front() {
                self.nodes[i]
                    .mesh
                    .handle(Timestamp::from_millis(self.now), input);
                self.drain(i);
                continue;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.mesh.poll_timeout())
                .map(|w| w.at.as_millis().max(self.now))
                .min();
            match next {
                Some(t) if t <= until => {
                    self.now = t;
                    for i in 0..self.nodes.len() {
                        let due = self.nodes[i]
                            .mesh
                            .poll_timeout()
                            .is_some_and(|w| w.at.as_millis() <= t);
                        if due {
                            self.nodes[i].mesh.handle_timeout(Timestamp::from_millis(t));
                            self.drain(i);
                        }
                    }
                }
                _ => {
                    self.now = self.now.max(until);
                    return;
                }
            }
        }
        panic!("step limit reached");
    }

    /// Runs what is queued without moving the clock.
    fn settle(&mut self) {
        let at = self.now - T0;
        self.run_until(at);
    }

    fn admitted(&self, i: usize, room: &str, j: usize) -> bool {
        self.nodes[i].mesh.is_admitted(room, &self.nodes[j].did)
    }

    fn count(&self, pred: impl Fn(usize, &Output) -> bool) -> usize {
        self.outputs.iter().filter(|(i, o)| pred(*i, o)).count()
    }

    fn delivered(&self, i: usize, room: &str, kind: &str) -> Vec<(String, Value)> {
        self.outputs
            .iter()
            .filter_map(|(n, o)| match o {
                Output::Deliver {
                    room: r,
                    peer,
                    kind: k,
                    payload,
                } if *n == i && r == room && k == kind => Some((peer.clone(), payload.clone())),
                _ => None,
            })
            .collect()
    }

    fn frames(&self, from: usize, to: usize, room: &str) -> Vec<Frame> {
        self.sent
            .iter()
            .filter(|s| s.from == from && s.to == to && s.frame.room == room)
            .map(|s| s.frame.clone())
            .collect()
    }

    fn send(&mut self, i: usize, room: &str, kind: &str, payload: Value) {
        self.input(
            i,
            Input::Send {
                room: room.into(),
                to: None,
                kind: kind.into(),
                payload,
            },
        );
    }
}

fn is_offer(o: &Output) -> bool {
    matches!(o, Output::CreateOffer { .. })
}

/// Two nodes admitted to each other in `rooms` (public spaces) through a relay.
fn pair(rooms: &[&str]) -> Net {
    let mut net = Net::new(2);
    for r in rooms {
        net.join(0, r, RoomKind::PublicSpace);
        net.join(1, r, RoomKind::PublicSpace);
        net.meet_by_relay(0, 1, r);
    }
    net.run_until(1_000);
    for r in rooms {
        assert!(net.admitted(0, r, 1) && net.admitted(1, r, 0), "{r}");
    }
    net
}

#[test]
fn two_spaces_shared_by_two_devices_use_one_connection() {
    let net = pair(&[R1, R2]);
    assert_eq!(net.count(|_, o| is_offer(o)), 1);
    assert_eq!(net.nodes[0].mesh.open_connection_count(), 1);
    assert_eq!(net.nodes[1].mesh.open_connection_count(), 1);
    assert_eq!(net.links.len(), 2);
}

#[test]
fn the_lesser_did_offers_and_the_greater_waits() {
    let net = pair(&[R1]);
    let lesser = if net.did(0) < net.did(1) { 0 } else { 1 };
    assert_eq!(net.count(|i, o| is_offer(o) && i == lesser), 1);
    assert_eq!(net.count(|i, o| is_offer(o) && i != lesser), 0);
    // The offer went through the relay of the room whose hello prompted it (§7.3).
    assert_eq!(
        net.count(|i, o| i == lesser
            && matches!(o, Output::ToRendezvous { room, kind: SignalKind::Offer, .. } if room == R1)),
        1
    );
    assert_eq!(
        net.count(|i, o| i != lesser
            && matches!(o, Output::ToRendezvous { room, kind: SignalKind::Answer, .. } if room == R1)),
        1
    );
}

#[test]
fn a_peer_is_a_peer_only_in_the_rooms_it_shares() {
    let mut net = Net::new(2);
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(0, R2, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    assert!(!net.admitted(0, R2, 1));
    // A frame of R2 from node 1 is not of a room it is admitted in: dropped, never delivered.
    let bytes = Frame::new(R2, "chat", json!("hi")).to_bytes(&net.did(1));
    net.inject(1, 0, bytes);
    net.settle();
    assert!(net.delivered(0, R2, "chat").is_empty());
    assert_eq!(net.nodes[0].mesh.counters().not_admitted, 1);
    // And node 0 has nobody to send R2's messages to.
    net.send(0, R2, "chat", json!("hello"));
    net.settle();
    assert!(net.frames(0, 1, R2).is_empty());
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 1);
}

#[test]
fn every_peer_proves_who_it_is_in_every_room() {
    let net = pair(&[R1, R2]);
    for (a, b) in [(0, 1), (1, 0)] {
        for room in [R1, R2] {
            let proofs: Vec<Frame> = net
                .frames(a, b, room)
                .into_iter()
                .filter(|f| f.kind == AUTH_PROOF)
                .collect();
            assert_eq!(proofs.len(), 1, "{a}->{b} in {room}");
            assert_eq!(proofs[0].payload["sig"].as_str().unwrap().len(), 86);
        }
    }
    for n in &net.nodes {
        assert_eq!(n.mesh.counters().proof_failed, 0);
    }
    // Each (room, peer) handshake has its own fresh nonce (§7.2).
    let nonce = |room: &str| {
        let hello = net
            .frames(0, 1, room)
            .into_iter()
            .find(|f| f.kind == AUTH_HELLO);
        hello.unwrap().payload["nonce"].as_str().unwrap().to_owned()
    };
    assert_eq!(nonce(R1).len(), 22);
    assert_ne!(nonce(R1), nonce(R2));
}

#[test]
fn a_proof_relayed_by_a_man_in_the_middle_does_not_check_out() {
    let mut net = Net::new(2);
    net.mitm.insert((0, 1));
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(!net.admitted(0, R1, 1) && !net.admitted(1, R1, 0));
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, 1);
    assert_eq!(net.nodes[1].mesh.counters().proof_failed, 1);
    // Serving no room and no handshake, the connection is closed.
    assert_eq!(net.nodes[0].mesh.connection_count(), 0);
    assert!(net.links.is_empty());
}

/// `T` of §6.2, spelled out from the spec here rather than taken from the crate: both ends of a
/// mesh build T with the same code, so a mesh that builds it from the wrong parts, or in the wrong
/// order, still admits its own kind, and only a T made apart from it shows the mistake.
fn transcript(
    space_id: &str,
    prover: &str,
    verifier: &str,
    nonce: &str,
    prover_cert: &str,
    verifier_cert: &str,
) -> String {
    format!("minca-mesh/v1|{space_id}|{prover}|{verifier}|{nonce}|{prover_cert}|{verifier_cert}")
}

/// The nonce of node `from`'s `__auth-hello` to node `to` in `room`.
fn hello_nonce(net: &Net, from: usize, to: usize, room: &str) -> String {
    let hello = net
        .frames(from, to, room)
        .into_iter()
        .find(|f| f.kind == AUTH_HELLO)
        .expect("a hello");
    hello.payload["nonce"].as_str().unwrap().to_owned()
}

/// §6.2: a proof's `sig` is the prover's key over T of the space id (not the room), prover,
/// verifier, the verifier's nonce, and the fingerprints as the prover's end sees them, its own
/// first; in a private space `read` is the read key over that same T. The sig is also checked
/// against each T a plausible mistake would build (the room for the space, the fingerprints or
/// the DIDs swapped): each must fail, or a mesh making that mistake at both ends would pass.
#[test]
fn a_proof_signs_the_transcript_of_the_space_with_its_own_fingerprint_first() {
    let c = default_provider();
    let k1 = read_key(213);
    for private in [false, true] {
        let net = if private {
            let mut net = Net::new(2);
            private_room_on(&mut net, &k1, &[0, 1]);
            net
        } else {
            pair(&[R1])
        };
        // The harness names R1's space `space-room-one`: a T of the room is a different text.
        let space = format!("space-{R1}");
        assert_ne!(space, R1);
        for (a, b) in [(0, 1), (1, 0)] {
            let (da, db) = (net.did(a), net.did(b));
            // Distinct and non-empty, so that swapping them, or leaving them out, changes T.
            let (fa, fb) = (net.nodes[a].fp.clone(), net.nodes[b].fp.clone());
            assert!(!fa.is_empty() && !fb.is_empty() && fa != fb);
            let nonce = hello_nonce(&net, b, a, R1);
            let proof = net
                .frames(a, b, R1)
                .into_iter()
                .find(|f| f.kind == AUTH_PROOF)
                .expect("a proof")
                .payload;
            let t = transcript(&space, &da, &db, &nonce, &fa, &fb);
            let wrong = [
                transcript(R1, &da, &db, &nonce, &fa, &fb),
                transcript(&space, &da, &db, &nonce, &fb, &fa),
                transcript(&space, &db, &da, &nonce, &fa, &fb),
            ];
            let sig = proof["sig"].as_str().unwrap();
            assert!(auth::verify(c, &da, &t, sig), "{a}->{b} over {t}");
            for w in &wrong {
                assert!(!auth::verify(c, &da, w, sig), "{a}->{b} also over {w}");
            }
            if private {
                assert_eq!(proof["readKey"], json!(k1.did));
                let read = proof["read"].as_str().unwrap();
                assert!(auth::verify(c, &k1.did, &t, read), "read {a}->{b} over {t}");
                for w in &wrong {
                    assert!(!auth::verify(c, &k1.did, w, read), "read {a}->{b} over {w}");
                }
            } else {
                assert!(proof.get("read").is_none());
            }
        }
    }
}

/// §6.2: the verifier MUST check `sig` against the prover's DID. Node 1 gets, in place of node
/// 0's own proof, one over the right T (with, in a private space, a `read` that holds) signed by
/// node 0's key or by a stranger's. The first is taken, so the test's T and frame are sound; the
/// second differs in nothing but the signer, and must be refused, or a mesh that checks `read`
/// alone, or no signature at all, would pass.
#[test]
fn a_proof_over_the_right_transcript_signed_by_a_key_the_provers_did_does_not_name_is_refused() {
    let c = default_provider();
    let k1 = read_key(214);
    // Node 0's session key (`Net::new` gives node i the key of seed 100 + i), and a stranger's.
    let (own, _) = key(100);
    let (stranger, _) = key(999);
    for private in [false, true] {
        for (signer, genuine) in [(&own, true), (&stranger, false)] {
            let mut net = Net::new(2);
            // Node 0's own proof never reaches node 1: the one node 1 checks is the test's.
            net.lost.insert((0, AUTH_PROOF));
            if private {
                let readers = accounts(&net, &[0, 1]);
                for i in 0..2 {
                    let space = Space::private(R1, &[&k1], &strs(&readers));
                    let note = net.nodes[i].note.clone();
                    net.join_private(i, R1, &space, Some(note));
                }
            } else {
                for i in 0..2 {
                    net.join(i, R1, RoomKind::PublicSpace);
                }
            }
            net.meet_by_relay(0, 1, R1);
            net.run_until(1_000);
            assert!(!net.admitted(1, R1, 0), "waiting for a proof");
            let (d0, d1) = (net.did(0), net.did(1));
            let t = transcript(
                &format!("space-{R1}"),
                &d0,
                &d1,
                &hello_nonce(&net, 1, 0, R1),
                &net.nodes[0].fp,
                &net.nodes[1].fp,
            );
            let mut proof = json!({ "sig": auth::sign(c, signer, &t).unwrap() });
            if private {
                let read = auth::sign(c, k1.secret.as_ref().unwrap(), &t).unwrap();
                proof["read"] = json!(read);
                proof["readKey"] = json!(k1.did);
            }
            net.inject(0, 1, Frame::new(R1, AUTH_PROOF, proof).to_bytes(&d0));
            net.settle();
            let failed = net.nodes[1].mesh.counters().proof_failed;
            let told = net.count(|i, o| {
                i == 1 && matches!(o, Output::Admitted { room, peer } if room == R1 && *peer == d0)
            });
            let case = format!("private {private}, genuine {genuine}");
            assert_eq!(net.admitted(1, R1, 0), genuine, "{case}");
            assert_eq!(
                (failed, told),
                (u64::from(!genuine), usize::from(genuine)),
                "{case}"
            );
        }
    }
}

#[test]
fn nothing_of_a_room_crosses_before_admission() {
    let mut net = Net::new(2);
    // Node 1's proof is lost: node 1 admits node 0, but node 0 never admits node 1.
    net.lost.insert((1, AUTH_PROOF));
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(1, R1, 0) && !net.admitted(0, R1, 1));
    // Node 1's `who`, `__peers` and anything else of R1 reach node 0 before admission: dropped,
    // counted.
    net.send(1, R1, LIVE, json!("x"));
    net.send(0, R1, LIVE, json!("x"));
    net.send(0, R1, "chat", json!("x"));
    net.settle();
    assert!(net.accounts_told(0, R1).is_empty());
    assert!(net.delivered(0, R1, LIVE).is_empty());
    assert_eq!(net.nodes[0].mesh.counters().not_admitted, 3);
    // Node 0 sends nothing of R1 to a peer it has not admitted.
    assert!(
        net.frames(0, 1, R1)
            .iter()
            .all(|f| f.kind.starts_with("__"))
    );
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 2);
}

#[test]
fn a_frame_of_a_room_not_yet_handshaken_is_dropped_and_counted() {
    let mut net = pair(&[R1]);
    // Node 0 joins R2 with the connection open; node 1 sends R2's messages before any handshake.
    net.join(0, R2, RoomKind::PublicSpace);
    net.settle();
    let bytes = Frame::new(R2, LIVE, json!("early")).to_bytes(&net.did(1));
    net.inject(1, 0, bytes);
    net.settle();
    assert!(net.delivered(0, R2, LIVE).is_empty());
    assert_eq!(net.nodes[0].mesh.counters().not_admitted, 1);
}

#[test]
fn failing_to_prove_it_in_one_room_costs_nothing_in_another() {
    // Also: in a private space, a peer without its key never becomes a peer (§6.3).
    let mut net = Net::new(2);
    for i in 0..2 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    let k1 = read_key(201);
    let readers = [net.account(0), net.account(1)];
    let readers: Vec<&str> = readers.iter().map(String::as_str).collect();
    let (n0, n1) = (net.nodes[0].note.clone(), net.nodes[1].note.clone());
    net.join_private(0, R2, &Space::private(R2, &[&k1], &readers), Some(n0));
    // Node 1 is a reader but holds no read key: it cannot prove (§6.3).
    net.join_private(1, R2, &Space::private(R2, &[], &readers), Some(n1));
    net.meet_by_relay(0, 1, R1);
    net.meet_by_relay(0, 1, R2);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    assert!(!net.admitted(0, R2, 1) && !net.admitted(1, R2, 0));
    assert_eq!(net.nodes[1].mesh.counters().no_read_key, 1);
    // Node 1 never proved: node 0's handshake is abandoned after 10 s, the connection stays.
    net.run_until(HANDSHAKE_TIMEOUT.as_millis() as u64 + 1_000);
    assert_eq!(net.nodes[0].mesh.counters().handshake_timeouts, 1);
    assert!(!net.admitted(0, R2, 1));
    assert_eq!(net.nodes[0].mesh.open_connection_count(), 1);
    net.send(0, R1, LIVE, json!({"type": "typing"}));
    net.settle();
    assert_eq!(net.delivered(1, R1, LIVE).len(), 1);
}

#[test]
fn a_peer_that_failed_its_proof_in_a_room_is_not_greeted_there_again_until_its_backoff_ends() {
    let (k0, k1) = (read_key(200), read_key(201));
    let mut net = Net::new(2);
    let readers = [net.account(0), net.account(1)];
    let readers: Vec<&str> = readers.iter().map(String::as_str).collect();
    let (n0, n1) = (net.nodes[0].note.clone(), net.nodes[1].note.clone());
    // R1 keeps the connection open; in R2 neither can prove the other's read key.
    for i in 0..2 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    net.join_private(0, R2, &Space::private(R2, &[&k1], &readers), Some(n0));
    net.join_private(1, R2, &Space::private(R2, &[&k0], &readers), Some(n1));
    net.meet_by_relay(0, 1, R1);
    net.meet_by_relay(0, 1, R2);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && !net.admitted(0, R2, 1));
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, 1);
    let hellos = |net: &Net| {
        net.frames(0, 1, R2)
            .iter()
            .filter(|f| f.kind == AUTH_HELLO)
            .count()
    };
    assert_eq!(hellos(&net), 1);
    // The peer's next hellos in R2 (a relay hello each way, and its own `__auth-hello`) start
    // nothing while the backoff runs: no new handshake, no new failure.
    for t in [2_000, 10_000, 20_000] {
        net.meet_by_relay(0, 1, R2);
        let hello = Frame::new(R2, AUTH_HELLO, json!({ "nonce": "AAAAAAAAAAAAAAAAAAAAAA" }));
        net.inject(1, 0, hello.to_bytes(&net.did(1)));
        net.run_until(t);
    }
    assert_eq!(hellos(&net), 1);
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, 1);
    assert!(net.nodes[0].mesh.counters().proof_backoff >= 3);
    // R1 is untouched: the connection still carries it.
    net.send(0, R1, LIVE, json!({"n": 1}));
    net.settle();
    assert_eq!(net.delivered(1, R1, LIVE).len(), 1);
    // Once the backoff has run out, the next hello starts a handshake again.
    net.run_until(1_000 + PROOF_FAILURE_BACKOFF.as_millis() as u64 + 1);
    net.meet_by_relay(0, 1, R2);
    net.settle();
    assert_eq!(hellos(&net), 2);
}

#[test]
fn in_a_private_space_the_read_proof_is_checked_with_the_signature() {
    let (k0, k1) = (read_key(200), read_key(201));
    let mut net = Net::new(2);
    let readers = [net.account(0), net.account(1)];
    let readers: Vec<&str> = readers.iter().map(String::as_str).collect();
    let (n0, n1) = (net.nodes[0].note.clone(), net.nodes[1].note.clone());
    // Node 0 holds K1 only; node 1 holds K0 only: neither can prove the other's current key, and
    // neither holds the space key that would let the other in by step 4.
    net.join_private(
        0,
        R1,
        &Space::private(R1, &[&k1], &readers),
        Some(n0.clone()),
    );
    net.join_private(
        1,
        R1,
        &Space::private(R1, &[&k0], &readers),
        Some(n1.clone()),
    );
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, 1);
    assert_eq!(net.nodes[1].mesh.counters().proof_failed, 1);
    assert!(!net.admitted(0, R1, 1) && !net.admitted(1, R1, 0));
    // Both holding K1: each proves it over T, with the signature, and both are admitted.
    let mut net = Net::new(2);
    for (i, note) in [(0, n0), (1, n1)] {
        net.join_private(i, R1, &Space::private(R1, &[&k1], &readers), Some(note));
    }
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    let proof = net
        .frames(0, 1, R1)
        .into_iter()
        .find(|f| f.kind == AUTH_PROOF)
        .unwrap();
    assert_eq!(proof.payload["readKey"], json!(k1.did));
    assert!(proof.payload["member"].is_string());
}

#[test]
fn letting_a_peer_go_in_one_room_keeps_the_connection_for_the_others() {
    let mut net = pair(&[R1, R2]);
    let d1 = net.did(1);
    net.input(
        0,
        Input::LetGo {
            room: R2.into(),
            peer: d1.clone(),
        },
    );
    net.settle();
    assert!(!net.admitted(0, R2, 1) && !net.admitted(1, R2, 0));
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    assert!(net.frames(0, 1, R2).iter().any(|f| f.kind == "__leave"));
    assert_eq!(net.links.len(), 2);
    // Letting it go in the last room leaves a connection no room uses: closed.
    net.input(
        0,
        Input::LetGo {
            room: R1.into(),
            peer: d1,
        },
    );
    net.settle();
    assert!(net.links.is_empty());
    assert_eq!(net.nodes[1].mesh.connection_count(), 0);
}

#[test]
fn leaving_a_room_says_leave_to_each_admitted_peer_who_drop_it_there() {
    let mut net = Net::new(3);
    for i in 0..3 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    net.meet_by_relay(0, 1, R1);
    net.meet_by_relay(0, 2, R1);
    net.run_until(2_000);
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        assert!(net.admitted(a, R1, b) && net.admitted(b, R1, a), "{a}-{b}");
    }
    net.input(0, Input::Leave { room: R1.into() });
    net.settle();
    for j in [1, 2] {
        assert!(net.frames(0, j, R1).iter().any(|f| f.kind == "__leave"));
        assert!(!net.admitted(j, R1, 0));
        assert_eq!(
            net.count(
                |i, o| i == j && matches!(o, Output::Departed { peer, .. } if *peer == net.did(0))
            ),
            1
        );
    }
    // Node 0's connections served only R1 and are closed; 1 and 2 keep theirs.
    assert_eq!(net.nodes[0].mesh.connection_count(), 0);
    assert!(net.admitted(1, R1, 2));
    assert_eq!(net.links.len(), 2);
}

/// M-7.2-i: the receiver of `__leave` closes the connection itself once no room uses it. Node 1
/// says `__leave` for the one room the two share and nothing more: its end stays open, so the
/// link goes only if node 0 closes it (the tests where the sender lets go close both ends).
#[test]
fn a_leave_for_the_last_room_two_share_makes_its_receiver_close_the_connection() {
    let mut net = pair(&[R1]);
    let leave = Frame::new(R1, "__leave", json!({"room": R1})).to_bytes(&net.did(1));
    net.inject(1, 0, leave);
    net.settle();
    assert!(!net.admitted(0, R1, 1));
    assert_eq!(net.nodes[0].mesh.counters().idle_closed, 1);
    assert_eq!(net.nodes[0].mesh.connection_count(), 0);
    assert!(net.links.is_empty());
}

/// Two nodes sharing a connection in R1 meet in R2 through a relay, the proof `from` sends in
/// R2 lost: 2 s later its peer holds it admitted there, and it does not hold the peer.
fn r2_with_a_lost_proof(from: usize) -> Net {
    let mut net = pair(&[R1]);
    net.lost.insert((from, AUTH_PROOF));
    for i in 0..2 {
        net.join(i, R2, RoomKind::PublicSpace);
    }
    net.meet_by_relay(0, 1, R2);
    net.run_until(2_000);
    net
}

/// M-7.2-h, M-7.2-j: a side that leaves a room, or lets a peer go there, in the middle of a
/// handshake says `__leave` to a peer it sent its proof to, since that peer may hold it admitted
/// already. Node 1's proof in R2 is lost: node 1 admits node 0, node 0 still waits. Told nothing,
/// node 1 would hold node 0 admitted in R2 for as long as R1 keeps the connection.
#[test]
fn leaving_or_letting_go_says_leave_to_a_peer_that_took_this_sides_proof_before_its_own_came() {
    for let_go in [false, true] {
        let mut net = r2_with_a_lost_proof(1);
        assert!(net.admitted(1, R2, 0) && !net.admitted(0, R2, 1));
        let input = if let_go {
            Input::LetGo {
                room: R2.into(),
                peer: net.did(1),
            }
        } else {
            Input::Leave { room: R2.into() }
        };
        net.input(0, input);
        net.settle();
        assert!(
            net.frames(0, 1, R2).iter().any(|f| f.kind == "__leave"),
            "let go: {let_go}"
        );
        assert!(!net.admitted(1, R2, 0));
        let d0 = net.did(0);
        let departed = |room: &str| {
            net.count(|i, o| {
                i == 1
                    && matches!(o, Output::Departed { room: r, peer } if r == room && *peer == d0)
            })
        };
        assert_eq!((departed(R2), departed(R1)), (1, 0));
        // R1 keeps the connection and both peers.
        assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
        assert_eq!(net.links.len(), 2);
    }
}

/// §7.2: a handshake this side abandons after sending its proof may have left the peer holding
/// it admitted: it says `__leave`, as when leaving. Node 1's proof in R2 is lost: node 1 admits
/// node 0, node 0 gives up after 10 s and tells node 1, which drops it there; R1 keeps the
/// connection and both peers.
#[test]
fn a_handshake_abandoned_after_this_sides_proof_says_leave() {
    let mut net = r2_with_a_lost_proof(1);
    assert!(net.admitted(1, R2, 0) && !net.admitted(0, R2, 1));
    net.run_until(2_000 + HANDSHAKE_TIMEOUT.as_millis() as u64);
    assert_eq!(net.nodes[0].mesh.counters().handshake_timeouts, 1);
    assert!(net.frames(0, 1, R2).iter().any(|f| f.kind == "__leave"));
    assert!(
        !net.admitted(1, R2, 0),
        "node 1 no longer holds node 0 admitted"
    );
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    assert_eq!(net.links.len(), 2);
}

/// §7, §7.2: a peer greets only from no admission of its own, so a `__auth-hello` from a peer
/// admitted here says the admission is one-sided: it ends, and the hello starts a new
/// handshake there. Node 0's proof in R2 is lost, so node 1 abandons its handshake after 10 s
/// while node 0 holds it admitted, on a connection R1 keeps open (its `__leave` lost too, as from
/// a peer that does not say it); the next relay hello makes node 1 greet again, and the room
/// comes up on both sides without the connection or R1 being touched.
#[test]
fn a_hello_from_a_peer_admitted_here_ends_that_admission_and_begins_a_new_handshake() {
    let mut net = r2_with_a_lost_proof(0);
    net.lost.insert((1, "__leave"));
    assert!(net.admitted(0, R2, 1) && !net.admitted(1, R2, 0));
    net.run_until(2_000 + HANDSHAKE_TIMEOUT.as_millis() as u64);
    assert_eq!(net.nodes[1].mesh.counters().handshake_timeouts, 1);
    assert!(net.admitted(0, R2, 1), "one-sided");
    net.lost.clear();
    // Node 1 hears node 0 again (a relay hello, §2) and greets in R2.
    net.meet_by_relay(0, 1, R2);
    net.run_until(20_000);
    assert!(net.admitted(0, R2, 1) && net.admitted(1, R2, 0));
    let d1 = net.did(1);
    let departed = |room: &str| {
        net.count(|i, o| {
            i == 0 && matches!(o, Output::Departed { room: r, peer } if r == room && *peer == d1)
        })
    };
    let admitted = net.count(|i, o| {
        i == 0 && matches!(o, Output::Admitted { room: r, peer } if r == R2 && *peer == d1)
    });
    assert_eq!((departed(R2), admitted, departed(R1)), (1, 2, 0));
    assert_eq!(net.nodes[0].mesh.counters().bad_handshake, 0);
    // One connection throughout, and R1 untouched.
    assert_eq!(net.links.len(), 2);
    assert_eq!(net.nodes[0].mesh.counters().idle_closed, 0);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    net.send(0, R2, LIVE, json!({"n": 1}));
    net.settle();
    assert_eq!(net.delivered(1, R2, LIVE).len(), 1);
}

#[test]
fn a_relay_connects_the_first_pair_and_a_peer_introduces_the_rest() {
    let mut net = Net::new(3);
    for i in 0..3 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    // Only the pairs (0, 1) and (1, 2) hear each other's hellos.
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    net.meet_by_relay(1, 2, R1);
    net.run_until(2_000);
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        assert!(net.admitted(a, R1, b) && net.admitted(b, R1, a), "{a}-{b}");
    }
    // 0 and 2 met through the mesh: no relay signal passed between them.
    let (d0, d2) = (net.did(0), net.did(2));
    assert_eq!(
        net.count(|i, o| matches!(o, Output::ToRendezvous { to, .. }
            if (i == 0 && *to == d2) || (i == 2 && *to == d0))),
        0
    );
    assert!(net.sent.iter().any(|s| s.frame.kind == SIGNAL));
    assert!(net.sent.iter().any(|s| s.frame.kind == PEERS));
}

#[test]
fn peers_are_told_of_each_other_at_admission() {
    let mut net = Net::new(3);
    for i in 0..3 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    net.meet_by_relay(1, 2, R1);
    net.run_until(1_001);
    let (d0, d2) = (net.did(0), net.did(2));
    // Node 1 admitted 2: it told 2 about 0, and 0 about 2.
    let to_2: Vec<Value> = net
        .frames(1, 2, R1)
        .into_iter()
        .filter(|f| f.kind == PEERS)
        .map(|f| f.payload)
        .collect();
    assert!(to_2.contains(&json!([d0])));
    let to_0: Vec<Value> = net
        .frames(1, 0, R1)
        .into_iter()
        .filter(|f| f.kind == PEERS)
        .map(|f| f.payload)
        .collect();
    assert!(to_0.contains(&json!([d2])));
}

/// M-8-b: the newcomer hears of every other admitted peer, and every one of them of it. With one
/// other peer a list cut to its first entry, or a newcomer's name sent to only one peer, looks
/// right; node 1 (the one who admits) holds two before node 3 arrives.
#[test]
fn a_newcomer_is_told_of_every_other_admitted_peer_and_each_of_them_of_it() {
    let mut net = Net::new(4);
    for i in 0..4 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    net.meet_by_relay(1, 0, R1);
    net.run_until(1_000);
    net.meet_by_relay(1, 2, R1);
    net.run_until(2_000);
    assert!(net.admitted(1, R1, 0) && net.admitted(1, R1, 2));
    net.meet_by_relay(1, 3, R1);
    net.run_until(3_000);
    assert!(net.admitted(1, R1, 3));
    let (d0, d2, d3) = (net.did(0), net.did(2), net.did(3));
    let lists = |net: &Net, to: usize| -> Vec<Value> {
        net.frames(1, to, R1)
            .into_iter()
            .filter(|f| f.kind == PEERS)
            .map(|f| f.payload)
            .collect()
    };
    let to_3 = lists(&net, 3);
    assert_eq!(to_3.len(), 1, "{to_3:?}");
    let mut named: Vec<&str> = to_3[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    named.sort_unstable();
    let mut want = vec![d0.as_str(), d2.as_str()];
    want.sort_unstable();
    assert_eq!(named, want);
    for j in [0, 2] {
        let told = lists(&net, j);
        assert_eq!(
            told.iter().filter(|l| **l == json!([d3])).count(),
            1,
            "{j}: {told:?}"
        );
    }
}

/// Node 1 and node 2 admitted in R1; node 2 is also in R2, which node 1 has joined but nobody
/// admitted there. Returns the net and an outsider's key.
fn signal_setup() -> (Net, P256Secret, String) {
    let mut net = Net::new(2);
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.join(1, R2, RoomKind::PublicSpace);
    net.join(0, R2, RoomKind::Channel);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(1, R1, 0));
    let (k, d) = key(999);
    (net, k, d)
}

fn offer_from(
    net: &Net,
    key: &P256Secret,
    origin: &str,
    to: usize,
    room: &str,
    sdp: &str,
) -> Signal {
    Signal::new(
        default_provider(),
        key,
        room,
        origin,
        net.did(to),
        SignalKind::Offer,
        sdp,
        net.now,
    )
    .unwrap()
}

fn answers_for(net: &Net, i: usize, peer: &str) -> usize {
    net.count(|n, o| n == i && matches!(o, Output::CreateAnswer { peer: p, .. } if p == peer))
}

#[test]
fn a_signal_passed_on_in_someone_elses_name_is_ignored_and_a_genuine_one_is_acted_on_once() {
    let (mut net, dkey, ddid) = signal_setup();
    // Node 0 passes on an offer in the outsider's name, signed with its own key.
    let (k0, _) = key(100);
    let mut forged = offer_from(&net, &k0, &ddid, 1, R1, "v=forged");
    forged.origin = ddid.clone();
    net.inject(
        0,
        1,
        Frame::new(R1, SIGNAL, forged.to_payload()).to_bytes(&net.did(0)),
    );
    net.settle();
    assert_eq!(answers_for(&net, 1, &ddid), 0);
    assert_eq!(net.nodes[1].mesh.counters().signal_dropped, 1);
    // The genuine one, arriving twice, is acted on once; the answer goes back through the room.
    let genuine = offer_from(&net, &dkey, &ddid, 1, R1, "v=genuine");
    for _ in 0..2 {
        net.inject(
            0,
            1,
            Frame::new(R1, SIGNAL, genuine.to_payload()).to_bytes(&net.did(0)),
        );
    }
    net.settle();
    assert_eq!(answers_for(&net, 1, &ddid), 1);
    let back: Vec<Frame> = net
        .frames(1, 0, R1)
        .into_iter()
        .filter(|f| f.kind == SIGNAL)
        .collect();
    assert_eq!(back.len(), 1);
    let answer = Signal::parse(&back[0].payload).unwrap();
    assert_eq!(
        (answer.origin.as_str(), answer.target.as_str(), answer.kind),
        (net.did(1).as_str(), ddid.as_str(), SignalKind::Answer)
    );
    assert!(answer.verify(default_provider(), R1));
}

#[test]
fn a_copy_of_a_signal_acted_on_is_dropped_and_counted_as_before_however_it_is_written() {
    let (mut net, dkey, ddid) = signal_setup();
    let genuine = offer_from(&net, &dkey, &ddid, 1, R1, "v=0\r\na=x");
    let bytes = Frame::new(R1, SIGNAL, genuine.to_payload()).to_bytes(&net.did(0));
    net.inject(0, 1, bytes.clone());
    net.settle();
    assert_eq!(answers_for(&net, 1, &ddid), 1);
    let text = String::from_utf8(bytes.clone()).unwrap();
    let sig = format!(r#""sig":"{}""#, genuine.sig);
    // Copies whose skipped fields differ (a forged signature, another SDP, hops gone): each is
    // dropped before its signature, one `signal_dropped` each, as a copy read in full would be.
    let copies = [
        text.clone(),
        text.replace(&sig, r#""sig":"x""#),
        text.replace("a=x", r"a=y\t"),
        text.replace(r#""hops":3,"#, ""),
    ];
    for (n, copy) in copies.iter().enumerate() {
        net.inject(0, 1, copy.clone().into_bytes());
        net.settle();
        assert_eq!(
            net.nodes[1].mesh.counters().signal_dropped,
            n as u64 + 1,
            "{copy}"
        );
    }
    // Copies that are not JSON where a skip would not look (a lone surrogate, a number out of
    // range, text that is not UTF-8) are bad frames, as before.
    let mut not_utf8 = bytes.clone();
    let at = not_utf8.windows(3).position(|w| w == b"a=x").unwrap();
    not_utf8[at] = 0xff;
    for copy in [
        text.replace("a=x", r"\ud800").into_bytes(),
        text.replace(&sig, r#""sig":1e400"#).into_bytes(),
        not_utf8,
    ] {
        net.inject(0, 1, copy);
        net.settle();
    }
    let c = net.nodes[1].mesh.counters();
    assert_eq!((c.bad_frames, c.signal_dropped), (3, copies.len() as u64));
    assert_eq!(answers_for(&net, 1, &ddid), 1);
}

#[test]
fn a_signal_is_taken_only_from_a_peer_admitted_in_its_room() {
    let (mut net, dkey, ddid) = signal_setup();
    // Node 1 is in R2 too, but node 0 is not admitted there.
    let s = offer_from(&net, &dkey, &ddid, 1, R2, "v=0");
    net.inject(
        0,
        1,
        Frame::new(R2, SIGNAL, s.to_payload()).to_bytes(&net.did(0)),
    );
    net.settle();
    assert_eq!(answers_for(&net, 1, &ddid), 0);
    assert_eq!(net.nodes[1].mesh.counters().not_admitted, 1);
    let s = offer_from(&net, &dkey, &ddid, 1, R1, "v=0");
    net.inject(
        0,
        1,
        Frame::new(R1, SIGNAL, s.to_payload()).to_bytes(&net.did(0)),
    );
    net.settle();
    assert_eq!(answers_for(&net, 1, &ddid), 1);
}

/// Puts on the wire from node 0 to node 1 an offer in `R1` signed by a DID no node has, for
/// another no node has (so node 1 can only pass it on), and answers what the network sent after.
fn pass_on_a_strangers_signal(net: &mut Net) -> &[Sent] {
    let (dkey, ddid) = key(999);
    let (_, target) = key(998);
    let s = Signal::new(
        default_provider(),
        &dkey,
        R1,
        &ddid,
        &target,
        SignalKind::Offer,
        "v=0",
        net.now,
    )
    .unwrap();
    let before = net.sent.len();
    net.inject(
        0,
        1,
        Frame::new(R1, SIGNAL, s.to_payload()).to_bytes(&net.did(0)),
    );
    net.settle();
    &net.sent[before..]
}

#[test]
fn a_signal_for_another_is_passed_on_to_the_rooms_other_peers() {
    let mut net = Net::new(3);
    for i in 0..3 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    net.meet_by_relay(0, 1, R1);
    net.meet_by_relay(1, 2, R1);
    net.run_until(2_000);
    let passed: Vec<&Sent> = pass_on_a_strangers_signal(&mut net)
        .iter()
        .filter(|x| x.frame.kind == SIGNAL)
        .collect();
    // Node 1 passes it on to the room's other peer, 2, with hops min(3, 3) - 1, and not back to
    // 0, where it came from.
    assert!(
        passed
            .iter()
            .any(|x| x.from == 1 && x.to == 2 && x.frame.payload["hops"] == 2)
    );
    assert!(!passed.iter().any(|x| x.from == 1 && x.to == 0));
}

/// A frame sent to several peers is written once: every copy is the same buffer, not a copy of
/// it (docs/performance.md, session 14's thirteenth pass).
#[test]
fn a_signal_passed_on_to_several_peers_is_one_buffer_they_share() {
    let mut net = Net::new(4);
    for i in 0..4 {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    for other in [0, 2, 3] {
        net.meet_by_relay(1, other, R1);
    }
    net.run_until(2_000);
    let passed: Vec<&Sent> = pass_on_a_strangers_signal(&mut net)
        .iter()
        .filter(|x| x.from == 1 && x.frame.kind == SIGNAL)
        .collect();
    let to: Vec<usize> = passed.iter().map(|x| x.to).collect();
    assert_eq!(to.len(), 2, "passed on to 2 and 3, not back to 0: {to:?}");
    assert!(!to.contains(&0));
    assert_eq!(passed[0].bytes.as_ptr(), passed[1].bytes.as_ptr());
    assert_eq!(passed[0].bytes, passed[1].bytes);
}

/// §8: the sender of a `__signal` sends it to every peer admitted in the room, and nowhere else.
/// Node 0 has an open connection with each of four peers: 1 and 2 admitted in R1, 3 admitted in
/// R2 only, and 4 in R1 but not admitted (its proof is lost). Its offer made through R1 must
/// reach 1 and 2, once each, and neither 3 nor 4: a mesh that floods every open connection, or
/// every peer of the room whatever its stage, would reach them.
#[test]
fn a_signal_goes_to_every_peer_admitted_in_its_room_and_nowhere_else() {
    let mut net = Net::new(5);
    for i in [0, 1, 2, 4] {
        net.join(i, R1, RoomKind::PublicSpace);
    }
    for i in [0, 3] {
        net.join(i, R2, RoomKind::PublicSpace);
    }
    net.lost.insert((4, AUTH_PROOF));
    for j in [1, 2, 4] {
        net.meet_by_relay(0, j, R1);
    }
    net.meet_by_relay(0, 3, R2);
    net.run_until(2_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(0, R1, 2));
    assert!(net.admitted(0, R2, 3) && !net.admitted(0, R1, 3));
    assert!(!net.admitted(0, R1, 4));
    for j in 1..5 {
        assert!(net.conn_of(0, j).is_some(), "a connection to {j}");
    }
    // A peer list in R1 naming a DID nobody has, greater than node 0's, so that node 0 offers
    // to it through R1's peers.
    let target = format!("did:key:zZ{}", "c".repeat(8));
    assert!(net.did(0) < target);
    let before = net.sent.len();
    net.inject(
        1,
        0,
        Frame::new(R1, PEERS, json!([target])).to_bytes(&net.did(1)),
    );
    net.settle();
    let d0 = net.did(0);
    let mut to: Vec<usize> = net.sent[before..]
        .iter()
        .filter(|s| s.from == 0 && s.frame.kind == SIGNAL)
        .map(|s| {
            let signal = Signal::parse(&s.frame.payload).unwrap();
            assert_eq!(
                (signal.origin.as_str(), signal.target.as_str()),
                (d0.as_str(), target.as_str())
            );
            assert_eq!(s.frame.room, R1);
            s.to
        })
        .collect();
    to.sort_unstable();
    assert_eq!(to, vec![1, 2]);
}

#[test]
fn a_signal_from_a_peer_admitted_in_any_room_is_ignored() {
    let mut net = pair(&[R1]);
    net.join(0, R2, RoomKind::PublicSpace);
    net.settle();
    let d1 = net.did(1);
    net.input(
        0,
        Input::RelaySignal {
            room: R2.into(),
            from: d1.clone(),
            kind: SignalKind::Offer,
            sdp: "v=0".into(),
        },
    );
    net.settle();
    assert_eq!(answers_for(&net, 0, &d1), 0);
    assert_eq!(net.nodes[0].mesh.counters().signal_from_admitted, 1);
    assert!(net.admitted(0, R1, 1));
    assert_eq!(net.links.len(), 2);
}

#[test]
fn an_offer_replaces_an_unproven_connection_with_that_peer() {
    let (k, _) = key(1);
    let mut m = Mesh::new(k, default_provider(), ChaCha20Rng::seed_from_u64(1)).unwrap();
    let t = Timestamp::from_millis(T0);
    m.handle(
        t,
        Input::Join(RoomConfig {
            room: R1.into(),
            space_id: "s".into(),
            kind: RoomKind::PublicSpace,
            note: None,
        }),
    );
    let (_, peer) = key(2);
    let offer = |sdp: &str| Input::RelaySignal {
        room: R1.into(),
        from: peer.clone(),
        kind: SignalKind::Offer,
        sdp: sdp.into(),
    };
    m.handle(t, offer("first"));
    let first = match m.poll() {
        Some(Output::CreateAnswer { conn, .. }) => conn,
        o => panic!("{o:?}"),
    };
    m.handle(
        t,
        Input::LocalDescription {
            conn: first,
            sdp: "a1".into(),
        },
    );
    m.handle(
        t,
        Input::Opened {
            conn: first,
            local_fingerprint: String::new(),
            remote_fingerprint: String::new(),
        },
    );
    while m.poll().is_some() {}
    m.handle(t, offer("second"));
    let out: Vec<Output> = std::iter::from_fn(|| m.poll()).collect();
    assert_eq!(out[0], Output::Close { conn: first });
    assert!(
        matches!(&out[1], Output::CreateAnswer { offer, conn, .. } if offer == "second" && *conn != first)
    );
    assert_eq!(m.connection_count(), 1);
}

#[test]
fn the_mesh_offers_again() {
    let mut net = Net::new(2);
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.relay_up = false;
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert_eq!(net.count(|_, o| is_offer(o)), 1);
    // A second hello while the attempt is pending starts nothing.
    net.meet_by_relay(0, 1, R1);
    net.run_until(2_000);
    assert_eq!(net.count(|_, o| is_offer(o)), 1);
    // The offer was never answered: the attempt is closed and forgotten.
    net.run_until(ATTEMPT_TIMEOUT.as_millis() as u64 + 1_000);
    let c: u64 = net
        .nodes
        .iter()
        .map(|n| n.mesh.counters().attempt_timeouts)
        .sum();
    assert_eq!(c, 1);
    assert_eq!(net.count(|_, o| matches!(o, Output::Close { .. })), 1);
    net.relay_up = true;
    net.meet_by_relay(0, 1, R1);
    net.run_until(ATTEMPT_TIMEOUT.as_millis() as u64 + 2_000);
    assert_eq!(net.count(|_, o| is_offer(o)), 2);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
}

#[test]
fn a_newly_opened_connection_no_room_takes_up_is_closed_soon() {
    let (k, _) = key(1);
    let mut m = Mesh::new(k, default_provider(), ChaCha20Rng::seed_from_u64(1)).unwrap();
    let t = Timestamp::from_millis(T0);
    m.handle(
        t,
        Input::Join(RoomConfig {
            room: R1.into(),
            space_id: "s".into(),
            kind: RoomKind::PublicSpace,
            note: None,
        }),
    );
    let (_, peer) = key(2);
    m.handle(
        t,
        Input::RelaySignal {
            room: R1.into(),
            from: peer,
            kind: SignalKind::Offer,
            sdp: "o".into(),
        },
    );
    let conn = match m.poll() {
        Some(Output::CreateAnswer { conn, .. }) => conn,
        o => panic!("{o:?}"),
    };
    m.handle(
        t,
        Input::LocalDescription {
            conn,
            sdp: "a".into(),
        },
    );
    // The room goes before the channel opens: nobody takes the connection up.
    m.handle(t, Input::Leave { room: R1.into() });
    m.handle(
        t,
        Input::Opened {
            conn,
            local_fingerprint: String::new(),
            remote_fingerprint: String::new(),
        },
    );
    while m.poll().is_some() {}
    let w = m.poll_timeout().unwrap();
    assert_eq!(w.at, t.saturating_add(UNCLAIMED_TIMEOUT));
    m.handle_timeout(w.at.saturating_sub(core::time::Duration::from_millis(1)));
    assert_eq!(m.poll(), None);
    m.handle_timeout(w.at);
    assert_eq!(m.poll(), Some(Output::Close { conn }));
    assert_eq!(m.counters().idle_closed, 1);
}

#[test]
fn reserved_types_are_never_delivered_and_messages_are_the_connections_peers() {
    let mut net = pair(&[R1]);
    let before = net.outputs.len();
    // A frame claiming to be from someone else is still the connection's peer's.
    net.inject(
        1,
        0,
        Frame::new(R1, LIVE, json!(1)).to_bytes("did:key:zSomeoneElse"),
    );
    // `__leave` goes last: it ends node 1's membership of the room.
    for t in RESERVED_TYPES {
        net.inject(1, 0, Frame::new(R1, t, json!(null)).to_bytes(&net.did(1)));
    }
    net.settle();
    let delivered: Vec<&Output> = net.outputs[before..]
        .iter()
        .filter(|(i, _)| *i == 0)
        .map(|(_, o)| o)
        .filter(|o| matches!(o, Output::Deliver { .. }))
        .collect();
    assert_eq!(delivered.len(), 1);
    assert!(
        matches!(delivered[0], Output::Deliver { peer, kind, .. } if *peer == net.did(1) && kind == LIVE)
    );
    // The application cannot send a reserved type.
    for t in RESERVED_TYPES {
        net.send(0, R1, t, json!(null));
    }
    net.settle();
    assert_eq!(
        net.nodes[0].mesh.counters().send_refused,
        RESERVED_TYPES.len() as u64
    );
}

/// M-7.1-c: the five reserved types, written as §7.1 writes them rather than read from the
/// crate's list, which the other tests loop over, so a list that lost one would pass them. A
/// channel's room carries the application's own types (§9): there a type is refused only for
/// being reserved, where a space refuses every type it does not speak and would hide the gap.
#[test]
fn in_a_channels_room_none_of_the_five_reserved_types_is_sent_for_the_application_or_handed_to_it()
{
    const RESERVED: [&str; 5] = [
        "__auth-hello",
        "__auth-proof",
        "__peers",
        "__signal",
        "__leave",
    ];
    let mut net = Net::new(2);
    for i in 0..2 {
        net.join(i, R1, RoomKind::Channel);
    }
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    let (sent, outputs) = (net.sent.len(), net.outputs.len());
    for t in RESERVED {
        net.send(0, R1, t, json!(null));
    }
    net.settle();
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 5);
    assert!(net.sent[sent..].is_empty(), "{:?}", &net.sent[sent..]);
    // Nor is one from the peer handed up; a type of the channel's own is, so frames get through.
    // `__leave` goes last: it ends node 1's place in the room.
    let d1 = net.did(1);
    for t in ["pair-code"].into_iter().chain(RESERVED) {
        net.inject(1, 0, Frame::new(R1, t, json!(null)).to_bytes(&d1));
    }
    net.settle();
    let handed: Vec<&Output> = net.outputs[outputs..]
        .iter()
        .filter(|(i, o)| *i == 0 && matches!(o, Output::Deliver { .. }))
        .map(|(_, o)| o)
        .collect();
    assert_eq!(handed.len(), 1, "{handed:?}");
    assert!(matches!(handed[0], Output::Deliver { kind, .. } if kind == "pair-code"));
}

#[test]
fn who_goes_first_to_a_newly_admitted_peer_and_live_only_after_it() {
    let mut net = pair(&[R1]);
    net.send(0, R1, LIVE, json!({"type": "typing"}));
    net.settle();
    let app: Vec<Frame> = net
        .frames(0, 1, R1)
        .into_iter()
        .filter(|f| !f.kind.starts_with("__"))
        .collect();
    assert_eq!(app[0].kind, WHO);
    assert_eq!(app[0].payload, json!({"note": net.nodes[0].note}));
    assert_eq!(app[1].kind, LIVE);
    // The note is checked by the mesh and the account reported, not the raw `who` (§6.4).
    assert!(net.delivered(1, R1, WHO).is_empty());
    assert_eq!(
        net.accounts_told(1, R1),
        vec![(net.did(0), Some(net.account(0)))]
    );
    assert_eq!(
        net.nodes[1].mesh.account(R1, &net.did(0)),
        Some(&*net.account(0))
    );
    assert_eq!(
        net.delivered(1, R1, LIVE),
        vec![(net.did(0), json!({"type": "typing"}))]
    );
    // The account comes before the peer's first message.
    let first =
        |pred: &dyn Fn(&Output) -> bool| net.outputs.iter().position(|(i, o)| *i == 1 && pred(o));
    assert!(
        first(&|o| matches!(o, Output::Account { .. }))
            < first(&|o| matches!(o, Output::Deliver { .. }))
    );
}

#[test]
fn live_messages_beyond_a_peers_allowance_are_dropped_and_the_connection_stays() {
    let mut net = pair(&[R1]);
    for n in 0..70 {
        net.send(0, R1, LIVE, json!(n));
    }
    net.settle();
    assert_eq!(net.delivered(1, R1, LIVE).len(), 60);
    assert_eq!(net.nodes[1].mesh.counters().limits.live_rate_limited, 10);
    assert!(net.admitted(1, R1, 0));
    net.run_until(2_000);
    net.send(0, R1, LIVE, json!("later"));
    net.settle();
    assert_eq!(net.delivered(1, R1, LIVE).len(), 61);
    // Over 65 536 UTF-16 units: refused by the sender, dropped by a receiver.
    net.send(0, R1, LIVE, json!("x".repeat(70_000)));
    net.inject(
        0,
        1,
        Frame::new(R1, LIVE, json!("x".repeat(70_000))).to_bytes(&net.did(0)),
    );
    net.settle();
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 1);
    assert_eq!(net.nodes[1].mesh.counters().limits.live_too_long, 1);
    assert_eq!(net.delivered(1, R1, LIVE).len(), 61);
}

#[test]
fn nothing_live_goes_to_or_is_taken_from_a_former_member() {
    let mut net = pair(&[R1]);
    let d0 = net.did(0);
    net.input(
        1,
        Input::FormerMember {
            room: R1.into(),
            peer: d0,
        },
    );
    net.send(0, R1, LIVE, json!("from a former member"));
    net.send(1, R1, LIVE, json!("to a former member"));
    net.settle();
    assert!(net.delivered(1, R1, LIVE).is_empty());
    assert_eq!(net.nodes[1].mesh.counters().live_from_former_member, 1);
    assert!(net.delivered(0, R1, LIVE).is_empty());
    assert_eq!(net.nodes[1].mesh.counters().send_refused, 1);
}

#[test]
fn a_channels_room_asks_no_proof_introduces_nobody_and_sends_no_who() {
    let mut net = Net::new(3);
    for i in 0..3 {
        net.join(i, R1, RoomKind::Channel);
    }
    net.meet_by_relay(0, 1, R1);
    net.meet_by_relay(1, 2, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 2));
    assert!(!net.admitted(0, R1, 2));
    assert!(
        net.sent
            .iter()
            .all(|s| s.frame.kind != AUTH_PROOF && s.frame.kind != PEERS && s.frame.kind != WHO)
    );
    net.send(0, R1, "pair-code", json!("x"));
    net.settle();
    assert_eq!(net.delivered(1, R1, "pair-code").len(), 1);
}

#[test]
fn a_handshake_not_finished_within_10_s_is_abandoned_and_its_idle_connection_closed() {
    let mut net = Net::new(2);
    net.lost.insert((1, AUTH_PROOF));
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.run_until(HANDSHAKE_TIMEOUT.as_millis() as u64 - 1);
    assert_eq!(net.links.len(), 2);
    assert_eq!(net.nodes[0].mesh.counters().handshake_timeouts, 0);
    net.run_until(HANDSHAKE_TIMEOUT.as_millis() as u64 + 1);
    assert_eq!(net.nodes[0].mesh.counters().handshake_timeouts, 1);
    assert!(net.links.is_empty());
}

#[test]
fn a_proof_is_sent_on_the_first_hello_only() {
    let mut net = Net::new(2);
    // Node 1's proof is lost, so node 0's handshake stays open for a second hello.
    net.lost.insert((1, AUTH_PROOF));
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    let proofs = |net: &Net| {
        net.frames(0, 1, R1)
            .iter()
            .filter(|f| f.kind == AUTH_PROOF)
            .count()
    };
    assert_eq!(proofs(&net), 1);
    let hello = Frame::new(R1, AUTH_HELLO, json!({"nonce": "AAAAAAAAAAAAAAAAAAAAAA"}));
    net.inject(1, 0, hello.to_bytes(&net.did(1)));
    net.settle();
    assert_eq!(proofs(&net), 1);
    assert_eq!(net.nodes[0].mesh.counters().bad_handshake, 1);
}

#[test]
fn a_peer_list_naming_a_connected_peer_greets_it_in_that_room() {
    let mut net = Net::new(3);
    for i in 0..2 {
        net.join(i, R1, RoomKind::PublicSpace);
        net.join(i, R2, RoomKind::PublicSpace);
    }
    net.join(2, R2, RoomKind::PublicSpace);
    // 0 and 1 share a connection for R1 only; in R2 each meets 2 through the relay.
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    net.meet_by_relay(2, 0, R2);
    net.run_until(2_000);
    net.meet_by_relay(2, 1, R2);
    net.run_until(3_000);
    // Told of each other in R2, 0 and 1 greet over the connection they have: no second one.
    assert!(net.admitted(0, R2, 1) && net.admitted(1, R2, 0));
    assert_eq!(net.nodes[0].mesh.open_connection_count(), 2);
    let (d0, d1) = (net.did(0), net.did(1));
    let between = |i: usize, o: &Output| matches!(o, Output::CreateOffer { peer, .. } if (i == 0 && *peer == d1) || (i == 1 && *peer == d0));
    assert_eq!(net.count(between), 1);
}

/// M-7.2-b, M-7.3-a: a hello naming a peer on an open connection is answered by greeting it
/// there, not by a second connection; and a side never told the peer is in the room greets on the
/// peer's hello. Node 0 hears of node 1 in R2 only once their R1 connection is open.
#[test]
fn a_side_greets_back_on_the_peers_hello() {
    let mut net = pair(&[R1]);
    net.join(0, R2, RoomKind::PublicSpace);
    net.join(1, R2, RoomKind::PublicSpace);
    // Only node 0 learns that node 1 is in R2; node 1 greets when node 0's hello arrives.
    let d1 = net.did(1);
    net.input(
        0,
        Input::PeerInRoom {
            room: R2.into(),
            peer: d1,
        },
    );
    net.settle();
    assert!(net.frames(1, 0, R2).iter().any(|f| f.kind == AUTH_HELLO));
    assert!(net.admitted(0, R2, 1) && net.admitted(1, R2, 0));
}

#[test]
fn mesh_housekeeping() {
    let mut net = pair(&[R1]);
    // A flood of peer lists naming made-up peers: the room's table and the connections stay
    // bounded, and every attempt that never opens is closed and forgotten.
    let fake = |n: usize| format!("did:key:zZ{}", "a".repeat(n % 200 + 1));
    for batch in 0..4 {
        let list: Vec<String> = (0..64).map(|i| fake(batch * 64 + i)).collect();
        net.inject(
            1,
            0,
            Frame::new(R1, PEERS, json!(list)).to_bytes(&net.did(1)),
        );
    }
    net.settle();
    assert!(net.nodes[0].mesh.tracked_peers() <= MAX_ROOM_PEERS);
    assert!(net.nodes[0].mesh.connection_count() <= MAX_CONNECTIONS);
    assert!(net.nodes[0].mesh.connection_count() > 1);
    net.run_until(ATTEMPT_TIMEOUT.as_millis() as u64 + 2_000);
    assert_eq!(net.nodes[0].mesh.connection_count(), 1);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    // Nothing is left to wake for but the memory of signals passed on.
    let w = net.nodes[0].mesh.poll_timeout();
    assert!(w.is_none_or(|w| w.reason == "signal memory ages out"));
}

/// The accounts of `net`'s nodes, as `&str`s, for a space's reader list.
fn accounts(net: &Net, nodes: &[usize]) -> Vec<String> {
    nodes.iter().map(|&i| net.account(i)).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn kinds(net: &Net, from: usize, to: usize, room: &str) -> Vec<String> {
    net.frames(from, to, room)
        .into_iter()
        .map(|f| f.kind)
        .collect()
}

/// Alice (node 0) and the members of a private space `R1` on K1, each with its own copy of the
/// access history; Alice's is returned, to change.
fn private_room_on(net: &mut Net, k1: &HeldReadKey, members: &[usize]) -> Space {
    let readers = accounts(net, members);
    let alice = Space::private(R1, &[k1], &strs(&readers));
    for &i in members {
        let space = if i == 0 {
            alice.clone()
        } else {
            Space::private(R1, &[k1], &strs(&readers))
        };
        let note = net.nodes[i].note.clone();
        net.join_private(i, R1, &space, Some(note));
    }
    for &j in members.iter().filter(|&&j| j != 0) {
        net.meet_by_relay(0, j, R1);
    }
    net.run_until(2_000);
    for &j in members.iter().filter(|&&j| j != 0) {
        assert!(net.admitted(0, R1, j) && net.admitted(j, R1, 0), "{j}");
    }
    alice
}

#[test]
fn after_a_key_change_a_reader_stays_and_someone_removed_is_let_go_at_once() {
    // Alice (0) manages the space; Bob (1) and Carol (2) are members, all let in on K1.
    let (k1, k2) = (read_key(301), read_key(302));
    let mut net = Net::new(3);
    let alice = private_room_on(&mut net, &k1, &[0, 1, 2]);
    let told = net.accounts_told(0, R1);
    assert!(told.contains(&(net.did(1), Some(net.account(1)))));
    assert!(told.contains(&(net.did(2), Some(net.account(2)))));
    // Carol is removed and the key changes K1 -> K2 at Alice; her host says so.
    let carol = net.account(2);
    alice.change(|s| {
        s.remove_member(&carol);
        s.add_key(k2.clone());
    });
    net.input(0, Input::AccessChanged { room: R1.into() });
    net.settle();
    // Bob, let in on K1, stays: his `who` shows a reader. Carol is let go of at once.
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    assert_eq!(
        net.let_go_of(0, R1),
        vec![(net.did(2), Some(carol.clone()))]
    );
    assert!(!net.admitted(0, R1, 2) && !net.admitted(2, R1, 0));
    assert_eq!(
        kinds(&net, 0, 2, R1).last().map(String::as_str),
        Some("__leave")
    );
    assert_eq!(net.nodes[0].mesh.counters().readers_let_go, 1);
    // Nothing more of the room goes to her.
    let before = net.sent.len();
    net.send(0, R1, LIVE, json!("after the change"));
    net.settle();
    assert!(net.sent[before..].iter().all(|s| s.from != 0 || s.to == 1));
    assert_eq!(net.delivered(1, R1, LIVE).len(), 1);
    // Carol redials with K1 and her note: step 4 refuses her (no reader now), and step 5 (she
    // holds no K2).
    let failed = net.nodes[0].mesh.counters().proof_failed;
    net.meet_by_relay(0, 2, R1);
    net.run_until(4_000);
    assert!(!net.admitted(0, R1, 2));
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, failed + 1);
    assert!(net.admitted(0, R1, 1));
}

#[test]
fn a_reader_let_in_on_k1_is_let_go_when_k2_becomes_current_and_let_in_again_once_it_proves_k2() {
    // Dave (1) is let in on K1 by his key alone: his `who` shows no account.
    let (k1, k2) = (read_key(303), read_key(304));
    let mut net = Net::new(2);
    let readers = accounts(&net, &[0]);
    let alice = Space::private(R1, &[&k1], &strs(&readers));
    let dave = Space::private(R1, &[&k1], &strs(&readers));
    let n0 = net.nodes[0].note.clone();
    net.join_private(0, R1, &alice, Some(n0));
    let c = default_provider();
    let access = MeshReadAccess::new(
        c,
        dave.clone(),
        Es256Notes::new(c),
        None,
        ChaCha20Rng::seed_from_u64(9),
    );
    net.join_with_note(1, R1, RoomKind::PrivateSpace(Box::new(access)), None);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1));
    assert_eq!(net.accounts_told(0, R1), vec![(net.did(1), None)]);
    // K2 becomes current at Alice; the mesh sees it on the next event, here a live message.
    alice.change(|s| s.add_key(k2.clone()));
    net.send(1, R1, LIVE, json!("still here?"));
    net.settle();
    assert_eq!(net.let_go_of(0, R1), vec![(net.did(1), None)]);
    assert!(!net.admitted(0, R1, 1) && !net.admitted(1, R1, 0));
    // Dave learns K2 and redials: he proves the current key, is let in, and stays when Alice
    // looks again, well past any grace.
    dave.change(|s| s.add_key(k2.clone()));
    net.meet_by_relay(0, 1, R1);
    net.run_until(3_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    net.input(0, Input::AccessChanged { room: R1.into() });
    net.run_until(3_000 + WHO_GRACE.as_millis() as u64 + 1_000);
    assert!(net.admitted(0, R1, 1));
    assert_eq!(net.nodes[0].mesh.counters().readers_let_go, 1);
}

#[test]
fn while_a_new_key_is_due_a_former_member_is_let_go_of_by_the_mesh_itself_and_turned_away() {
    // Carol (1) seals no `member`, so only her `who` tells Alice (0) who she is.
    let (k1, k2) = (read_key(311), read_key(312));
    let mut net = Net::new(2);
    let readers = accounts(&net, &[0, 1]);
    let alice = Space::private(R1, &[&k1], &strs(&readers));
    let carol = Space::private(R1, &[&k1], &strs(&readers));
    let n0 = net.nodes[0].note.clone();
    net.join_private(0, R1, &alice, Some(n0));
    net.join_private(1, R1, &carol, None);
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
    // Carol is removed: a new key is due, and she still holds the current one.
    let account = net.account(1);
    alice.change(|s| s.remove_member(&account));
    // Before the mesh has looked again, nothing live goes to her or is taken from her.
    net.send(0, R1, LIVE, json!("to a former member"));
    net.settle();
    assert!(!kinds(&net, 0, 1, R1).contains(&LIVE.to_owned()));
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 1);
    // The mesh noticed the history move on that event, with no word from the host: she is gone.
    assert_eq!(
        net.let_go_of(0, R1),
        vec![(net.did(1), Some(account.clone()))]
    );
    assert!(!net.admitted(0, R1, 1) && !net.admitted(1, R1, 0));
    // She redials with the current key: turned away while the key is still due.
    net.meet_by_relay(0, 1, R1);
    net.run_until(3_000);
    assert!(!net.admitted(0, R1, 1));
    assert_eq!(net.nodes[0].mesh.counters().proof_failed, 1);
    net.run_until(30_000);
    // The key changes; she is invited back and learns K2: let in again.
    alice.change(|s| {
        s.add_key(k2.clone());
        s.add_reader(&account);
    });
    carol.change(|s| s.add_key(k2.clone()));
    net.meet_by_relay(0, 1, R1);
    net.run_until(32_000);
    assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
}

#[test]
fn a_frame_from_a_former_member_is_dropped_while_the_mesh_lets_her_go() {
    let k1 = read_key(321);
    let mut net = Net::new(2);
    let readers = accounts(&net, &[0, 1]);
    let alice = Space::private(R1, &[&k1], &strs(&readers));
    let (n0, n1) = (net.nodes[0].note.clone(), net.nodes[1].note.clone());
    net.join_private(0, R1, &alice, Some(n0));
    net.join_private(
        1,
        R1,
        &Space::private(R1, &[&k1], &strs(&readers)),
        Some(n1),
    );
    net.meet_by_relay(0, 1, R1);
    net.run_until(1_000);
    let account = net.account(1);
    alice.change(|s| s.remove_member(&account));
    net.send(1, R1, LIVE, json!("from a former member"));
    net.settle();
    assert!(net.delivered(0, R1, LIVE).is_empty());
    assert_eq!(net.nodes[0].mesh.counters().live_from_former_member, 1);
    assert_eq!(net.let_go_of(0, R1), vec![(net.did(1), Some(account))]);
}

#[test]
fn a_reader_on_an_old_key_whose_who_does_not_come_within_10_s_is_let_go() {
    // Alice (0) holds K0 and K1; Bob (1) missed the change and holds K0: Alice lets him in by
    // step 4 (his note sealed under K0), he lets her in by step 5.
    let (k0, k1) = (read_key(330), read_key(331));
    for who_lost in [false, true] {
        let mut net = Net::new(2);
        let readers = accounts(&net, &[0, 1]);
        let (n0, n1) = (net.nodes[0].note.clone(), net.nodes[1].note.clone());
        net.join_private(
            0,
            R1,
            &Space::private(R1, &[&k0, &k1], &strs(&readers)),
            Some(n0),
        );
        net.join_private(
            1,
            R1,
            &Space::private(R1, &[&k0], &strs(&readers)),
            Some(n1),
        );
        if who_lost {
            net.lost.insert((1, WHO));
        }
        net.meet_by_relay(0, 1, R1);
        net.settle();
        assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
        let admitted_at = net.now - T0;
        net.run_until(admitted_at + WHO_GRACE.as_millis() as u64 - 100);
        assert!(net.admitted(0, R1, 1), "kept during the grace");
        net.run_until(admitted_at + WHO_GRACE.as_millis() as u64 + 1_000);
        if who_lost {
            assert_eq!(net.accounts_told(0, R1), vec![(net.did(1), None)]);
            assert_eq!(net.nodes[0].mesh.counters().who_missing, 1);
            assert_eq!(net.let_go_of(0, R1), vec![(net.did(1), None)]);
            assert!(!net.admitted(0, R1, 1));
        } else {
            assert_eq!(
                net.accounts_told(0, R1),
                vec![(net.did(1), Some(net.account(1)))]
            );
            assert!(net.let_go_of(0, R1).is_empty());
            assert!(net.admitted(0, R1, 1));
        }
    }
}

#[test]
fn a_peer_showing_someone_elses_note_is_known_as_nobody() {
    let mut net = Net::new(2);
    let rooms = [
        "r-copied",
        "r-too-long",
        "r-invalid",
        "r-none",
        "r-own",
        "r-narrow",
    ];
    let copied = net.nodes[0].note.clone();
    let own = net.nodes[1].note.clone();
    // Nothing but validity and audience is read (§6.4): a narrow note still names the account.
    let (root, _) = key(501);
    let narrow = Es256Notes::new(default_provider())
        .issue(
            &root,
            &Note {
                iss: String::new(),
                aud: net.did(1),
                sub: "did:key:zSomethingElse".into(),
                cmd: "/space/read".into(),
                pol: vec![json!(["==", ".space", "s"])],
                exp: T0 / 1000 + 60,
                nbf: None,
            },
        )
        .unwrap();
    let notes = [
        Some(copied),
        Some("a".repeat(MAX_NOTE_CHARS)),
        Some(format!("{own}x")),
        None,
        Some(own),
        Some(narrow),
    ];
    for (room, note) in rooms.iter().zip(notes) {
        net.join(0, room, RoomKind::PublicSpace);
        net.join_with_note(1, room, RoomKind::PublicSpace, note);
        net.meet_by_relay(0, 1, room);
    }
    net.run_until(1_000);
    for room in &rooms[..4] {
        assert_eq!(
            net.accounts_told(0, room),
            vec![(net.did(1), None)],
            "{room}"
        );
    }
    for room in ["r-own", "r-narrow"] {
        assert_eq!(
            net.accounts_told(0, room),
            vec![(net.did(1), Some(net.account(1)))]
        );
    }
    // A `who` again does not change what the first one showed.
    let again = Frame::new("r-copied", WHO, json!({"note": net.nodes[1].note}));
    net.inject(1, 0, again.to_bytes(&net.did(1)));
    net.settle();
    assert_eq!(net.accounts_told(0, "r-copied").len(), 1);
    assert_eq!(net.nodes[0].mesh.account("r-copied", &net.did(1)), None);
    assert_eq!(net.nodes[0].mesh.counters().who_repeated, 1);
}

#[test]
fn who_comes_first_and_a_peer_that_sends_none_has_no_account_after_10_s() {
    let mut net = Net::new(2);
    net.lost.insert((1, WHO));
    net.join(0, R1, RoomKind::PublicSpace);
    net.join(1, R1, RoomKind::PublicSpace);
    net.meet_by_relay(0, 1, R1);
    net.settle();
    let admitted_at = net.now - T0;
    // Node 1's live message comes before any `who`: dropped.
    net.send(1, R1, LIVE, json!("too early"));
    net.settle();
    assert!(net.delivered(0, R1, LIVE).is_empty());
    assert_eq!(net.nodes[0].mesh.counters().before_who, 1);
    assert!(net.accounts_told(0, R1).is_empty());
    net.run_until(admitted_at + WHO_GRACE.as_millis() as u64);
    assert_eq!(net.accounts_told(0, R1), vec![(net.did(1), None)]);
    // From then on it is a peer with no account: its messages are taken, and a public space lets
    // nobody go for it.
    net.send(1, R1, LIVE, json!("later"));
    net.settle();
    assert_eq!(
        net.delivered(0, R1, LIVE),
        vec![(net.did(1), json!("later"))]
    );
    assert!(net.admitted(0, R1, 1));
    assert!(net.let_go_of(0, R1).is_empty());
}

#[test]
fn unknown_types_are_ignored_in_a_space() {
    let mut net = pair(&[R1]);
    net.inject(
        1,
        0,
        Frame::new(R1, "chat", json!("hi")).to_bytes(&net.did(1)),
    );
    net.settle();
    assert!(net.delivered(0, R1, "chat").is_empty());
    assert_eq!(net.nodes[0].mesh.counters().unknown_type, 1);
    assert!(net.admitted(0, R1, 1));
    // This node does not send a type its peers would ignore, nor a `who` of the application's.
    net.send(0, R1, "chat", json!("hi"));
    net.send(0, R1, WHO, json!({"note": "x"}));
    net.settle();
    assert_eq!(net.nodes[0].mesh.counters().send_refused, 2);
    assert!(kinds(&net, 0, 1, R1).iter().all(|k| k != "chat"));
    // A channel's room carries its own types to the application (§9).
    let mut net = Net::new(2);
    for i in 0..2 {
        net.join(i, R2, RoomKind::Channel);
    }
    net.meet_by_relay(0, 1, R2);
    net.run_until(1_000);
    net.send(0, R2, "pair-code", json!("x"));
    net.settle();
    assert_eq!(net.delivered(1, R2, "pair-code").len(), 1);
    assert_eq!(net.nodes[1].mesh.counters().unknown_type, 0);
}

/// M-7.4-b, each way: the same byte rate a node socket's peer is held to
/// (`minca_node_socket.rs`), by the same code (`weft_proto::minca::limits`).
#[test]
fn a_peers_frames_beyond_its_byte_rate_are_dropped_and_the_connection_stays() {
    // Frames of exactly 1 MiB each, of a type the space ignores (so each one taken is counted).
    const MIB: usize = 1 << 20;
    for (from, to) in [(1, 0), (0, 1)] {
        let mut net = pair(&[R1]);
        let d = net.did(from);
        let sized = |len: usize| {
            let probe = Frame::new(R1, "bulk", json!("")).to_bytes(&d).len();
            let bytes = Frame::new(R1, "bulk", json!("x".repeat(len - probe))).to_bytes(&d);
            assert_eq!(bytes.len(), len);
            bytes
        };
        let burst = PEER_BYTE_RATE.burst as usize / MIB;
        let frame = sized(MIB);
        // The bucket has refilled since the handshake: a whole burst passes, and not a byte more.
        for _ in 0..=burst {
            net.inject(from, to, frame.clone());
        }
        net.settle();
        let c = net.nodes[to].mesh.counters().clone();
        assert_eq!(c.unknown_type, burst as u64);
        assert_eq!(c.limits.byte_rate_limited, 1);
        // A live message now is a frame too: dropped unread, so it spends no live token.
        net.inject(from, to, Frame::new(R1, LIVE, json!("over")).to_bytes(&d));
        net.settle();
        assert_eq!(net.nodes[to].mesh.counters().limits.byte_rate_limited, 2);
        assert!(net.delivered(to, R1, LIVE).is_empty());
        // A second later the rate has refilled that many bytes again.
        let per_second = PEER_BYTE_RATE.per_second as usize / MIB;
        net.run_until(net.now - T0 + 1_000);
        for _ in 0..per_second + 1 {
            net.inject(from, to, frame.clone());
        }
        net.settle();
        let c = net.nodes[to].mesh.counters().clone();
        assert_eq!(c.unknown_type, (burst + per_second) as u64);
        assert_eq!(c.limits.byte_rate_limited, 3);
        assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
        assert_eq!(net.links.len(), 2);
        // And later messages flow.
        net.run_until(net.now - T0 + 1_000);
        net.send(from, R1, LIVE, json!("later"));
        net.settle();
        assert_eq!(
            net.delivered(to, R1, LIVE),
            vec![(d.clone(), json!("later"))]
        );
    }
}

/// A string payload whose `JSON.stringify` is `chars` characters (its two quotes included).
fn stringified(chars: usize) -> Value {
    let v = Value::String("x".repeat(chars - 2));
    assert_eq!(serde_json::to_string(&v).unwrap().len(), chars);
    v
}

/// M-9.2-e, M-9.2-h, each way: a payload of 65 536 characters is delivered, one of 65 537
/// dropped and counted, the connection stays and the next message is delivered; the same
/// boundary a node socket holds (`minca_node_socket.rs`).
#[test]
fn a_live_payload_of_65_536_characters_is_delivered_and_of_65_537_dropped_on_the_mesh_each_way() {
    for (from, to) in [(0, 1), (1, 0)] {
        let mut net = pair(&[R1]);
        let d = net.did(from);
        for chars in [MAX_LIVE_CHARS, MAX_LIVE_CHARS + 1, 300_002] {
            net.inject(
                from,
                to,
                Frame::new(R1, LIVE, stringified(chars)).to_bytes(&d),
            );
        }
        net.settle();
        assert_eq!(
            net.delivered(to, R1, LIVE),
            vec![(d.clone(), stringified(65_536))]
        );
        let c = net.nodes[to].mesh.counters().limits;
        assert_eq!((c.live_too_long, c.live_rate_limited), (2, 0));
        assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
        net.send(from, R1, LIVE, json!("later"));
        net.settle();
        assert_eq!(net.delivered(to, R1, LIVE).len(), 2);
    }
}

/// M-9.2-g, each way, with explicit time: 60 live messages at one instant are delivered and the
/// 61st dropped and counted; a token comes back every 50 ms (none at 49 ms, one at 50 ms), twenty
/// a second later and not 21; the connection stays. The same as on a node socket
/// (`minca_node_socket.rs`).
#[test]
fn a_mesh_peer_gets_a_burst_of_60_live_messages_then_20_a_second_each_way() {
    for (from, to) in [(0, 1), (1, 0)] {
        let mut net = pair(&[R1]);
        let d = net.did(from);
        let start = net.now - T0;
        let live = |n: Value| Frame::new(R1, LIVE, n).to_bytes(&d);
        for n in 0..61 {
            net.inject(from, to, live(json!(n)));
        }
        net.settle();
        assert_eq!(net.delivered(to, R1, LIVE).len(), 60);
        assert_eq!(net.nodes[to].mesh.counters().limits.live_rate_limited, 1);
        net.run_until(start + 49);
        net.inject(from, to, live(json!("at 49 ms")));
        net.settle();
        assert_eq!(net.nodes[to].mesh.counters().limits.live_rate_limited, 2);
        net.run_until(start + 50);
        net.inject(from, to, live(json!("at 50 ms")));
        net.settle();
        assert_eq!(
            net.delivered(to, R1, LIVE).last(),
            Some(&(d.clone(), json!("at 50 ms")))
        );
        net.run_until(start + 1_050);
        for n in 0..21 {
            net.inject(from, to, live(json!(n)));
        }
        net.settle();
        assert_eq!(net.delivered(to, R1, LIVE).len(), 60 + 1 + 20);
        assert_eq!(net.nodes[to].mesh.counters().limits.live_rate_limited, 3);
        assert!(net.admitted(0, R1, 1) && net.admitted(1, R1, 0));
        assert_eq!(net.links.len(), 2);
    }
}

#[test]
fn half_open_connections_from_introductions_are_capped() {
    let mut net = pair(&[R1]);
    // Peer lists naming made-up peers this node offers to, through the mesh.
    let fake = |n: usize| format!("did:key:zZ{}", "b".repeat(n + 1));
    for batch in 0..3 {
        let list: Vec<String> = (0..64).map(|i| fake(batch * 64 + i)).collect();
        net.inject(
            1,
            0,
            Frame::new(R1, PEERS, json!(list)).to_bytes(&net.did(1)),
        );
    }
    net.settle();
    let m = &net.nodes[0].mesh;
    assert_eq!(m.connection_count(), MAX_HALF_OPEN_INTRODUCED + 1);
    assert!(m.counters().half_open_refused > 0);
    // A relay hello is no introduction: it may still start a connection.
    let (_, stranger) = key(999);
    let offers = net.count(|i, o| i == 0 && is_offer(o));
    net.input(
        0,
        Input::PeerInRoom {
            room: R1.into(),
            peer: stranger.clone(),
        },
    );
    net.settle();
    if net.did(0) < stranger {
        assert_eq!(net.count(|i, o| i == 0 && is_offer(o)), offers + 1);
    }
}
