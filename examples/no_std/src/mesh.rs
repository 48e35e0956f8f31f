//! A Minca mesh handshake between two in-memory nodes (Minca §5.1, §7.2, §7.3, §9.2): both join
//! one public room, rendezvous tells each that the other is there, the lesser DID offers, the
//! descriptions cross through the room's rendezvous, the connection opens, `minca-mesh/v1`
//! admits each to the other, and a `live` message crosses.
//!
//! The "transport" is this module: it makes up descriptions, opens a connection on both sides
//! once the offerer has applied the answer, and carries frames as they are sent, in order.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider, generate_p256};
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::mesh::{Input, Mesh, Output, RoomConfig, RoomKind};

use crate::{Failure, START, STEP_LIMIT};

/// The room both nodes join.
pub const ROOM: &str = "lobby";

/// What the mesh exchange showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshOutcome {
    /// Each node's DID.
    pub dids: [String; 2],
    /// Whether each node admitted the other in [`ROOM`].
    pub admitted: [bool; 2],
    /// The `live` payload node 1 was handed, as JSON text, and who it came from.
    pub live: Option<(String, String)>,
    /// Frames carried between the nodes.
    pub frames: usize,
}

struct Pair {
    now: Timestamp,
    nodes: [Mesh<ChaCha20Rng>; 2],
    dids: [String; 2],
    queue: VecDeque<(usize, Input)>,
    links: BTreeMap<(usize, ConnId), (usize, ConnId)>,
    offers: BTreeMap<String, (usize, ConnId)>,
    answers: BTreeMap<String, (usize, ConnId, String)>,
    delivered: Vec<(usize, String, String, Value)>,
    admitted: [bool; 2],
    frames: usize,
}

fn node(seed: u64) -> Result<(Mesh<ChaCha20Rng>, String), Failure> {
    let crypto = default_provider();
    let key = generate_p256(crypto, &mut ChaCha20Rng::seed_from_u64(seed));
    let public = crypto
        .p256_public_key(&key)
        .map_err(|_| Failure("a P-256 key"))?;
    let did = DidKey::P256(public.0).to_did();
    let mesh = Mesh::new(key, crypto, ChaCha20Rng::seed_from_u64(seed + 1))
        .ok_or(Failure("a mesh node"))?;
    Ok((mesh, did))
}

impl Pair {
    fn new() -> Result<Self, Failure> {
        let (a, da) = node(100)?;
        let (b, db) = node(200)?;
        Ok(Self {
            now: START,
            nodes: [a, b],
            dids: [da, db],
            queue: VecDeque::new(),
            links: BTreeMap::new(),
            offers: BTreeMap::new(),
            answers: BTreeMap::new(),
            delivered: Vec::new(),
            admitted: [false; 2],
            frames: 0,
        })
    }

    fn other(i: usize) -> usize {
        1 - i
    }

    /// Carries out node `i`'s outputs, in order, turning them into the other side's inputs.
    fn drain(&mut self, i: usize) {
        while let Some(out) = self.nodes[i].poll() {
            match out {
                Output::CreateOffer { conn, .. } => {
                    let sdp = format!("offer {i} {}", conn.0);
                    self.offers.insert(sdp.clone(), (i, conn));
                    self.queue
                        .push_back((i, Input::LocalDescription { conn, sdp }));
                }
                Output::CreateAnswer { conn, offer, .. } => {
                    let sdp = format!("answer {i} {}", conn.0);
                    self.answers.insert(sdp.clone(), (i, conn, offer));
                    self.queue
                        .push_back((i, Input::LocalDescription { conn, sdp }));
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
                    // Each side's channel-binding fingerprint, as a DTLS stack would report it.
                    let fp = |k: usize| format!("sha-256 0{k}:0{k}");
                    for (k, c) in [(i, conn), (j, cj)] {
                        let opened = Input::Opened {
                            conn: c,
                            local_fingerprint: fp(k),
                            remote_fingerprint: fp(Self::other(k)),
                        };
                        self.queue.push_back((k, opened));
                    }
                }
                Output::Send { conn, bytes } => {
                    if let Some(&(j, cj)) = self.links.get(&(i, conn)) {
                        self.frames += 1;
                        self.queue.push_back((j, Input::Frame { conn: cj, bytes }));
                    }
                }
                Output::Close { conn } => {
                    if let Some((j, cj)) = self.links.remove(&(i, conn)) {
                        self.links.remove(&(j, cj));
                        self.queue.push_back((j, Input::Closed { conn: cj }));
                    }
                }
                Output::ToRendezvous {
                    room,
                    to,
                    kind,
                    sdp,
                } => {
                    let j = Self::other(i);
                    if to == self.dids[j] {
                        let from = self.dids[i].clone();
                        let signal = Input::RelaySignal {
                            room,
                            from,
                            kind,
                            sdp,
                        };
                        self.queue.push_back((j, signal));
                    }
                }
                Output::Admitted { room, peer }
                    if room == ROOM && peer == self.dids[Self::other(i)] =>
                {
                    self.admitted[i] = true;
                }
                Output::Deliver {
                    room,
                    peer,
                    kind,
                    payload,
                } if room == ROOM => {
                    self.delivered.push((i, peer, kind, payload));
                }
                _ => {}
            }
        }
    }

    /// Feeds queued inputs and due timers until nothing is left to do, within the step limit.
    fn settle(&mut self) -> Result<(), Failure> {
        for _ in 0..STEP_LIMIT {
            if let Some((i, input)) = self.queue.pop_front() {
                self.nodes[i].handle(self.now, input);
                self.drain(i);
                continue;
            }
            let due = (0..2).find(|&i| {
                self.nodes[i]
                    .poll_timeout()
                    .is_some_and(|w| w.at <= self.now)
            });
            match due {
                Some(i) => {
                    self.nodes[i].handle_timeout(self.now);
                    self.drain(i);
                }
                None => return Ok(()),
            }
        }
        Err(Failure("the mesh exchange never went quiet"))
    }
}

/// Runs the mesh exchange: a handshake, admission both ways, one `live` message from node 0 to
/// node 1.
pub fn exchange() -> Result<MeshOutcome, Failure> {
    let mut p = Pair::new()?;
    for i in 0..2 {
        let join = Input::Join(RoomConfig {
            room: ROOM.to_string(),
            space_id: "space-lobby".to_string(),
            kind: RoomKind::PublicSpace,
            note: None,
        });
        p.queue.push_back((i, join));
    }
    for i in 0..2 {
        let peer = p.dids[Pair::other(i)].clone();
        let room = ROOM.to_string();
        p.queue.push_back((i, Input::PeerInRoom { room, peer }));
    }
    p.settle()?;
    if p.admitted != [true, true] {
        return Err(Failure("the nodes did not admit each other"));
    }
    let payload = json!({"type": "hello", "from": "no_std"});
    p.queue.push_back((
        0,
        Input::Send {
            room: ROOM.to_string(),
            to: None,
            kind: LIVE.to_string(),
            payload: payload.clone(),
        },
    ));
    p.settle()?;
    let live = p
        .delivered
        .iter()
        .find(|(i, _, kind, v)| *i == 1 && kind == LIVE && *v == payload)
        .map(|(_, peer, _, v)| (v.to_string(), peer.clone()));
    if live.as_ref().is_none_or(|(_, from)| *from != p.dids[0]) {
        return Err(Failure("the live message did not reach node 1 from node 0"));
    }
    Ok(MeshOutcome {
        dids: p.dids.clone(),
        admitted: p.admitted,
        live,
        frames: p.frames,
    })
}
