//! A Minca node: the relay client, the rendezvous and the mesh composed into one machine
//! (Minca 04 Network §2–§4 and §7–§9, with the glue between them that the spec leaves to a node).
//!
//! A host that wants "join a space, meet its peers, talk to them" drives this one [`Node`] instead
//! of three machines. It owns what no single machine can:
//!
//! - the names: the relay client knows relays by URL, the rendezvous by [`RelayId`], the mesh knows
//!   rooms by name; the node maps one to the other;
//! - the order of meeting: a hello is said on every relay socket as it opens (§2: "on each socket
//!   (re)open"), so a hello said before any socket was open is not lost;
//! - the shape of a description: the mesh speaks SDP text, the rendezvous seals a session
//!   description `{"type", "sdp"}` (§2, as §8's `data` writes it);
//! - the TURN servers (§3, §10): the relay client's current union, handed to each new peer
//!   connection the node asks the host to create.
//!
//! What the host provides are two transports: WebSocket sockets to relays (the `Relay*` inputs and
//! outputs) and peer connections with a data channel (§5.1; the `Peer*` ones and the descriptions).
//! The two use separate [`ConnId`] spaces.
//!
//! A host may also hold node sockets (§5.2, the `NodeSocket*` ones, a third [`ConnId`] space): a
//! WebSocket to an always-on node, authenticated by its own handshake (`minca-peer/v3`, §6.1, run
//! by [`node_socket`](super::node_socket)) for one space. Nothing offered it, and no
//! `minca-mesh/v1` runs on it: H and W already bind the space, both session DIDs and both nonces,
//! and a WebSocket has no certificate fingerprints to bind (§5.1). So the node takes the socket's
//! proven peer as admitted in that space's room from the welcome on, reports it as it reports a
//! mesh peer (`Admitted`, `Account`, `Deliver`, `Departed`), and sends the room's messages to it
//! as well. The per-peer limits (§7.4's byte rate, §9.2's live rate and size) are not applied
//! here: each transport machine applies them as a frame arrives, through the one code of
//! [`limits`](super::limits) — the mesh to a data channel's frames, the socket machine (either
//! side) to a node socket's — so what reaches the node as [`Input::PeerFrame`] or
//! [`Input::NodeSocketMessage`] has passed them once, whatever host drives the socket. The node
//! keeps what the mesh keeps for a space's room: only `live` goes to the application.
//!
//! One (room, peer) is one socket peer: a client that redials before its old socket is reported
//! closed is the same peer on a newer socket, which replaces the older (closed with
//! [`Output::NodeSocketClose`], with no `Departed` and no second `Admitted`; the newer socket's
//! machine holds the peer to full allowances, as a new mesh connection does). Letting a peer go
//! ([`Input::LetGo`]) closes its socket in that room, as well as saying `__leave` to it on the
//! mesh (§6.3). The mesh and the sockets are not merged: a session DID that is both a mesh peer
//! and a socket peer in the same room is reported once for each (two `Admitted`, a `Departed` as
//! each goes, an `Account` from each), a message sent to it goes on both, and what it sends on
//! both is delivered twice.
//!
//! The rule of every machine holds: after each [`handle`](Machine::handle) or
//! [`handle_timeout`](Machine::handle_timeout), [`poll`](Machine::poll) until `None`, then sleep
//! until [`poll_timeout`](Machine::poll_timeout).
//!
//! ```
//! use chacha20::ChaCha20Rng;
//! use rand_core::SeedableRng;
//! use weft_proto::core::{Machine, Timestamp};
//! use weft_proto::crypto::{default_provider, generate_p256};
//! use weft_proto::minca::mesh::RoomKind;
//! use weft_proto::minca::node::{Input, Join, Node, NodeConfig, Output};
//! use weft_proto::minca::relay_url::RelayUrl;
//!
//! let crypto = default_provider();
//! let mut rng = ChaCha20Rng::seed_from_u64(7);
//! let session = generate_p256(crypto, &mut rng);
//! let config = NodeConfig { relays: vec![RelayUrl::parse("ws://127.0.0.1:8787").unwrap()] };
//! let mut node = Node::new(session, config, crypto, rng).unwrap();
//! let now = Timestamp::from_millis(1_700_000_000_000);
//! node.handle(now, Input::Join(Join::space(crypto, "my-space", RoomKind::PublicSpace, None)));
//! // The node asks for a socket to its relay; the hello waits until it opens.
//! let mut dialled = false;
//! while let Some(out) = node.poll() {
//!     dialled |= matches!(out, Output::Dial { .. });
//! }
//! assert!(dialled);
//! assert!(node.poll_timeout().is_some());
//! ```

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use bytes::Bytes;
use rand_core::{CryptoRng, SeedableRng};
use serde_json::{Value, json};

use crate::core::{ConnId, Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoError, CryptoProvider, P256Secret};
use crate::minca::limits::LIVE;
use crate::minca::mesh::frame::RESERVED_TYPES;
use crate::minca::mesh::introduction::SignalKind;
use crate::minca::mesh::machine::MAX_CONNECTIONS;
use crate::minca::mesh::{self, Mesh, RoomConfig, RoomKind};
use crate::minca::node_socket::WHO;
use crate::minca::relay_client::{self, ClientConfig, RelayClient, RelayState};
use crate::minca::relay_url::RelayUrl;
use crate::minca::relay_wire::{Blob, IceServers, Topic};
use crate::minca::rendezvous::{self, RelayId, Relays, Rendezvous};
use crate::minca::room::{MAX_ROOMS, Room};

/// The node's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeConfig {
    /// The relays used in every room (§3).
    pub relays: Vec<RelayUrl>,
}

/// A room to join.
#[derive(Debug)]
pub struct Join {
    /// The room (§1.3): a space's, or one derived elsewhere.
    pub room: Room,
    /// The space id that goes into the §6.2 transcript.
    pub space_id: String,
    /// What the room asks of a peer (§6.2, §6.3, §8).
    pub kind: RoomKind,
    /// This session's note, sent in `who` (§9.1).
    pub note: Option<String>,
    /// The space's own relays (§4), used for this room only.
    pub relays: Vec<RelayUrl>,
}

impl Join {
    /// A space's room, on the configured relays only.
    pub fn space(
        crypto: &dyn CryptoProvider,
        space_id: &str,
        kind: RoomKind,
        note: Option<String>,
    ) -> Self {
        Self {
            room: Room::of_space(crypto, space_id),
            space_id: space_id.into(),
            kind,
            note,
            relays: Vec::new(),
        }
    }
}

/// Everything the node can be told.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// Join a room: watch its topic on its relays, say hello, meet its peers.
    Join(Join),
    /// Leave a room.
    Leave(Room),
    /// Send an application message in `room`, to one admitted peer or to all of them (§9).
    Send {
        /// The room.
        room: Room,
        /// One peer's session DID, or every admitted peer of the room.
        to: Option<String>,
        /// The message type (`live`, or one of the application's).
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// Let one peer go in one room (§6.3, §7.2): `__leave` to it on the mesh, and its node
    /// socket there closed.
    LetGo {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
    },
    /// What the node may read in a private space changed (a new read key, a member removed):
    /// the mesh reviews the room's readers (§6.3).
    AccessChanged {
        /// The room.
        room: Room,
    },
    /// The relay socket `conn` opened.
    RelayOpened {
        /// The socket.
        conn: ConnId,
    },
    /// A text frame arrived on the relay socket `conn`.
    RelayText {
        /// The socket.
        conn: ConnId,
        /// The frame (a `String` from the socket becomes one with `.into()`; a relay in the same
        /// process hands over the text it shares between sockets).
        text: Arc<str>,
    },
    /// The relay socket `conn` closed.
    RelayClosed {
        /// The socket.
        conn: ConnId,
    },
    /// The dial of relay socket `conn` failed.
    RelayDialFailed {
        /// The socket.
        conn: ConnId,
    },
    /// The network came back (§2.1): every relay socket is redialled.
    Online,
    /// The peer connection `conn` made the local description asked for.
    LocalDescription {
        /// The peer connection.
        conn: ConnId,
        /// The SDP.
        sdp: String,
    },
    /// The data channel of peer connection `conn` opened, with the channel-binding fingerprints
    /// of §5.1 as this side sees them.
    PeerOpened {
        /// The peer connection.
        conn: ConnId,
        /// This side's fingerprint.
        local_fingerprint: String,
        /// The peer's fingerprint.
        remote_fingerprint: String,
    },
    /// Peer connection `conn` closed or failed.
    PeerClosed {
        /// The peer connection.
        conn: ConnId,
    },
    /// A binary message arrived on peer connection `conn`.
    PeerFrame {
        /// The peer connection.
        conn: ConnId,
        /// The message.
        bytes: Bytes,
    },
    /// Node socket `conn` (§5.2) finished its `minca-peer/v3` handshake for the space of `room`:
    /// `peer` is the session DID it proved (on a client, the node's, its pin satisfied). It
    /// carries no channel-binding fingerprints: a WebSocket has none (§5.1), and H and W bind it.
    NodeSocketOpened {
        /// The node socket (node socket ids).
        conn: ConnId,
        /// The room of the socket's space.
        room: Room,
        /// The proven session DID of the other end.
        peer: String,
    },
    /// The `who` of node socket `conn`'s peer arrived (§6.4), as the socket checked it.
    NodeSocketAccount {
        /// The node socket.
        conn: ConnId,
        /// The account, the note's issuer, if any.
        account: Option<String>,
    },
    /// A message of the space arrived on node socket `conn`, attributed to its peer, as its
    /// socket machine ([`node_socket`](super::node_socket)) handed it on: within the peer's
    /// limits (§7.4, §9.2), which that machine applied.
    NodeSocketMessage {
        /// The node socket.
        conn: ConnId,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// Node socket `conn` closed.
    NodeSocketClosed {
        /// The node socket.
        conn: ConnId,
    },
}

/// Everything the node asks of its host or tells it, in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Open a WebSocket to a relay and name it `conn` (relay socket ids).
    Dial {
        /// The socket's name.
        conn: ConnId,
        /// The relay, as listed.
        relay: RelayUrl,
        /// What to dial (§1.2: the kind prefix and any fragment taken off).
        url: String,
    },
    /// Send a text frame on relay socket `conn`.
    RelaySend {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// Close relay socket `conn`.
    RelayClose {
        /// The socket.
        conn: ConnId,
    },
    /// Create peer connection `conn` to `peer` and make an offer; hand it back as
    /// [`Input::LocalDescription`] (§5.1).
    CreateOffer {
        /// The peer connection's name (peer connection ids).
        conn: ConnId,
        /// The peer's session DID.
        peer: String,
        /// The TURN servers to use, if any relay offers unexpired ones (§10).
        ice: Option<IceServers>,
    },
    /// Create peer connection `conn` to `peer` answering `offer`; hand the answer back as
    /// [`Input::LocalDescription`].
    CreateAnswer {
        /// The peer connection's name.
        conn: ConnId,
        /// The peer's session DID.
        peer: String,
        /// The peer's offer (SDP).
        offer: String,
        /// The TURN servers to use.
        ice: Option<IceServers>,
    },
    /// Apply the peer's answer to the offer made on `conn`.
    ApplyAnswer {
        /// The peer connection.
        conn: ConnId,
        /// The answer (SDP).
        answer: String,
    },
    /// Send a binary message on peer connection `conn`.
    PeerSend {
        /// The peer connection.
        conn: ConnId,
        /// The message.
        bytes: Bytes,
    },
    /// Close peer connection `conn`.
    PeerClose {
        /// The peer connection.
        conn: ConnId,
    },
    /// Send a message of the space on node socket `conn` (its socket machine frames it).
    NodeSocketSend {
        /// The node socket.
        conn: ConnId,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// Close node socket `conn`: its room was left, its peer let go of, a newer socket of the same
    /// peer in the same room replaced it, or the node holds too many.
    NodeSocketClose {
        /// The node socket.
        conn: ConnId,
    },
    /// A peer was admitted in a room (§7.2).
    Admitted {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
    },
    /// A peer is no longer a peer in a room.
    Departed {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
    },
    /// The account behind a peer admitted in a space's room, from its `who` (§6.4, §9.1):
    /// `None` for a peer showing no valid note of its own, or none within the grace. Comes
    /// before any message of that peer there.
    Account {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
        /// The account (the note's issuer), if any.
        account: Option<String>,
    },
    /// The mesh let go of a reader of a private space that may no longer read it (§6.3); a
    /// [`Output::Departed`] follows.
    LetGo {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
        /// The account its `who` showed, if any.
        account: Option<String>,
    },
    /// A message of an admitted peer (§9), attributed to the connection's peer.
    Deliver {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// A relay's state changed, for status.
    RelayState {
        /// The relay.
        relay: RelayUrl,
        /// Its new state.
        state: RelayState,
    },
    /// Whether any relay answers (§3).
    Reachable(bool),
    /// A join was refused: too many rooms, or the room's relay list is invalid (§4).
    JoinRefused {
        /// The room not joined.
        room: Room,
    },
}

/// What the node's glue dropped, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Opened descriptions that are not `{"type": kind, "sdp": string}` of the signal's kind.
    pub bad_descriptions: u64,
    /// Offers or answers the rendezvous could not send (no box for the peer, not in the room).
    pub signals_not_sent: u64,
    /// Node socket messages dropped: not `live` (the sync of 05 would be taken here), or on a
    /// socket the node does not know. The per-peer limits are the socket machine's to count
    /// ([`node_socket::Counters::limits`](super::node_socket::Counters::limits)).
    pub socket_messages_dropped: u64,
    /// Node sockets refused: for a room the node is not in, or past [`MAX_NODE_SOCKETS`].
    pub sockets_refused: u64,
}

/// The most node sockets (§5.2) the node takes as peers at once: as many as its peer
/// connections ([`MAX_CONNECTIONS`]); one past it is closed.
pub const MAX_NODE_SOCKETS: usize = MAX_CONNECTIONS;

/// A node socket's peer, admitted in the room of its space.
#[derive(Debug)]
struct SocketPeer {
    room: Room,
    peer: String,
}

/// A room the node is in.
#[derive(Debug)]
struct Joined {
    topic: Topic,
}

/// The composed node. See the [module documentation](self).
pub struct Node<R: CryptoRng> {
    crypto: &'static dyn CryptoProvider,
    relays: RelayClient<R>,
    rendezvous: Rendezvous<R>,
    mesh: Mesh<R>,
    /// Relay URLs the rendezvous has been told of, by the id it knows them by; an entry goes when
    /// the relay is released, so the table holds at most the relays in use.
    relay_ids: BTreeMap<RelayUrl, RelayId>,
    next_relay_id: u64,
    rooms: BTreeMap<Room, Joined>,
    /// The relay client's current TURN servers (§3, §10).
    ice: Option<IceServers>,
    /// Node sockets by their id, at most [`MAX_NODE_SOCKETS`].
    sockets: BTreeMap<ConnId, SocketPeer>,
    now: Timestamp,
    out: VecDeque<Output>,
    counters: Counters,
}

impl Input {
    /// A peer transport's event, as the node takes it. Transports (the drivers' str0m one among
    /// them) speak the mesh's vocabulary, since the mesh is what a bare transport serves; a node
    /// takes the same four events under its own names. Anything else is no transport event.
    pub fn from_transport(event: mesh::Input) -> Option<Self> {
        Some(match event {
            mesh::Input::LocalDescription { conn, sdp } => Input::LocalDescription { conn, sdp },
            mesh::Input::Opened {
                conn,
                local_fingerprint,
                remote_fingerprint,
            } => Input::PeerOpened {
                conn,
                local_fingerprint,
                remote_fingerprint,
            },
            mesh::Input::Closed { conn } => Input::PeerClosed { conn },
            mesh::Input::Frame { conn, bytes } => Input::PeerFrame { conn, bytes },
            _ => return None,
        })
    }
}

impl<R: CryptoRng + SeedableRng> Node<R> {
    /// A node whose session key is `session` (its did:key is the node's DID in every room), each
    /// inner machine with its own generator seeded from `rng`. Fails only when `session` is not
    /// a valid P-256 secret.
    pub fn new(
        session: P256Secret,
        config: NodeConfig,
        crypto: &'static dyn CryptoProvider,
        mut rng: R,
    ) -> Result<Self, CryptoError> {
        let relay_rng = R::from_rng(&mut rng);
        let rendezvous_rng = R::from_rng(&mut rng);
        let client = ClientConfig {
            relays: config.relays,
        };
        let rendezvous = Rendezvous::new(session.clone(), crypto, rendezvous_rng)?;
        let mesh = Mesh::new(session, crypto, rng).ok_or(CryptoError::InvalidSecretKey)?;
        Ok(Self {
            crypto,
            relays: RelayClient::new(client, crypto, relay_rng),
            rendezvous,
            mesh,
            relay_ids: BTreeMap::new(),
            next_relay_id: 0,
            rooms: BTreeMap::new(),
            ice: None,
            sockets: BTreeMap::new(),
            now: Timestamp::ZERO,
            out: VecDeque::new(),
            counters: Counters::default(),
        })
    }
}

impl<R: CryptoRng> Node<R> {
    /// This node's session DID.
    pub fn did(&self) -> &str {
        self.mesh.did()
    }

    /// The relay client, for status and counters.
    pub fn relay_client(&self) -> &RelayClient<R> {
        &self.relays
    }

    /// The rendezvous, for status and counters.
    pub fn rendezvous(&self) -> &Rendezvous<R> {
        &self.rendezvous
    }

    /// The mesh, for status and counters.
    pub fn mesh(&self) -> &Mesh<R> {
        &self.mesh
    }

    /// What the glue dropped.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The rooms this node is in.
    pub fn rooms(&self) -> impl Iterator<Item = &Room> {
        self.rooms.keys()
    }

    /// The TURN servers a new peer connection would get (§10).
    pub fn ice_servers(&self) -> Option<&IceServers> {
        self.ice.as_ref()
    }

    fn join(&mut self, join: Join) {
        if self.rooms.contains_key(&join.room) {
            // A second join updates the room's own relays (§4); the rest stays as it is.
            let topic = self.rooms[&join.room].topic.clone();
            self.relays.handle(
                self.now,
                relay_client::Input::Join {
                    topic,
                    relays: join.relays,
                },
            );
            return;
        }
        if self.rooms.len() >= MAX_ROOMS {
            self.out.push_back(Output::JoinRefused { room: join.room });
            return;
        }
        let topic = Topic::parse(&join.room.topic(self.crypto)).expect("a room's topic is a topic");
        self.relays.handle(
            self.now,
            relay_client::Input::Join {
                topic: topic.clone(),
                relays: join.relays,
            },
        );
        // The relay client refuses an invalid list before anything else is said: then the room
        // is not joined anywhere.
        let refused = self.relays_refused(&topic);
        if refused {
            self.out.push_back(Output::JoinRefused { room: join.room });
            return;
        }
        self.rooms.insert(join.room.clone(), Joined { topic });
        self.mesh.handle(
            self.now,
            mesh::Input::Join(RoomConfig {
                room: join.room.as_str().into(),
                space_id: join.space_id,
                kind: join.kind,
                note: join.note,
            }),
        );
        self.rendezvous
            .handle(self.now, rendezvous::Input::Join(join.room));
    }

    /// Drains the relay client right after a join, reporting whether it refused `topic`; every
    /// other output goes through the usual routing.
    fn relays_refused(&mut self, topic: &Topic) -> bool {
        let mut refused = false;
        while let Some(out) = self.relays.poll() {
            match out {
                relay_client::Output::JoinRefused { topic: t } if &t == topic => refused = true,
                other => self.route_relays(other),
            }
        }
        refused
    }

    fn leave(&mut self, room: Room) {
        let Some(joined) = self.rooms.remove(&room) else {
            return;
        };
        self.close_sockets(&room, None);
        self.mesh.handle(
            self.now,
            mesh::Input::Leave {
                room: room.as_str().into(),
            },
        );
        self.rendezvous
            .handle(self.now, rendezvous::Input::Leave(room));
        self.relays.handle(
            self.now,
            relay_client::Input::Leave {
                topic: joined.topic,
            },
        );
    }

    fn socket_opened(&mut self, conn: ConnId, room: Room, peer: String) {
        // A socket id reported open again for another peer: that peer's socket is gone.
        if self
            .sockets
            .get(&conn)
            .is_some_and(|s| s.room != room || s.peer != peer)
        {
            self.socket_closed(conn);
        }
        let older = self.socket_of(&room, &peer);
        if !self.rooms.contains_key(&room)
            || (older.is_none() && self.sockets.len() >= MAX_NODE_SOCKETS)
        {
            self.counters.sockets_refused += 1;
            self.out.push_back(Output::NodeSocketClose { conn });
            return;
        }
        match older {
            // The same socket reported open twice: nothing changes.
            Some(old) if old == conn => return,
            // One (room, peer) is one peer: a client that redialled before its old socket was
            // reported closed (a half-dead TCP connection) is the same peer on a newer socket.
            // The newer replaces the older, which is closed and forgotten without a departure.
            Some(old) => {
                self.out.push_back(Output::NodeSocketClose { conn: old });
                self.sockets.remove(&old);
            }
            None => self.out.push_back(Output::Admitted {
                room: room.clone(),
                peer: peer.clone(),
            }),
        }
        self.sockets.insert(conn, SocketPeer { room, peer });
    }

    /// The socket that carries `peer` in `room`, if any: at most one does.
    fn socket_of(&self, room: &Room, peer: &str) -> Option<ConnId> {
        self.sockets
            .iter()
            .find(|(_, s)| s.room == *room && s.peer == peer)
            .map(|(c, _)| *c)
    }

    fn socket_closed(&mut self, conn: ConnId) {
        if let Some(s) = self.sockets.remove(&conn) {
            self.out.push_back(Output::Departed {
                room: s.room,
                peer: s.peer,
            });
        }
    }

    /// Closes the sockets of `room`, of `peer` alone if named (letting it go, §6.3: "closes the
    /// peer's socket on a node"): each peer departs.
    fn close_sockets(&mut self, room: &Room, peer: Option<&str>) {
        let gone: Vec<ConnId> = self
            .sockets
            .iter()
            .filter(|(_, s)| s.room == *room && peer.is_none_or(|p| p == s.peer))
            .map(|(c, _)| *c)
            .collect();
        for conn in gone {
            self.out.push_back(Output::NodeSocketClose { conn });
            self.socket_closed(conn);
        }
    }

    /// A node socket's message, which its socket machine held to the peer's limits (§7.4, §9.2):
    /// in a space's room, as on the mesh, only `live` goes to the application.
    fn socket_message(&mut self, conn: ConnId, kind: String, payload: Value) {
        let Some(s) = self.sockets.get(&conn) else {
            self.counters.socket_messages_dropped += 1;
            return;
        };
        if kind != LIVE {
            self.counters.socket_messages_dropped += 1;
            return;
        }
        self.out.push_back(Output::Deliver {
            room: s.room.clone(),
            peer: s.peer.clone(),
            kind,
            payload,
        });
    }

    /// The room's messages go to its node socket peers too; `who` is the socket's own, and the
    /// mesh's reserved types are never a socket's.
    fn send_to_sockets(&mut self, room: &Room, to: Option<&str>, kind: &str, payload: &Value) {
        if kind == WHO || RESERVED_TYPES.contains(&kind) {
            return;
        }
        for (conn, s) in &self.sockets {
            if s.room == *room && to.is_none_or(|to| to == s.peer) {
                self.out.push_back(Output::NodeSocketSend {
                    conn: *conn,
                    kind: kind.into(),
                    payload: payload.clone(),
                });
            }
        }
    }

    fn relay_id(&mut self, relay: &RelayUrl) -> RelayId {
        if let Some(id) = self.relay_ids.get(relay) {
            return *id;
        }
        let id = RelayId(self.next_relay_id);
        self.next_relay_id += 1;
        self.relay_ids.insert(relay.clone(), id);
        id
    }

    fn relay_url(&self, id: RelayId) -> Option<RelayUrl> {
        self.relay_ids
            .iter()
            .find_map(|(url, i)| (*i == id).then(|| url.clone()))
    }

    /// Polls the three machines until none has anything left, routing what each says to the
    /// others or to the host.
    fn drain(&mut self) {
        loop {
            let mut progress = false;
            while let Some(out) = self.relays.poll() {
                progress = true;
                self.route_relays(out);
            }
            while let Some(out) = self.rendezvous.poll() {
                progress = true;
                self.route_rendezvous(out);
            }
            while let Some(out) = self.mesh.poll() {
                progress = true;
                self.route_mesh(out);
            }
            if !progress {
                return;
            }
        }
    }

    fn route_relays(&mut self, out: relay_client::Output) {
        let now = self.now;
        match out {
            relay_client::Output::Dial { conn, relay, url } => {
                self.out.push_back(Output::Dial { conn, relay, url });
            }
            relay_client::Output::Send { conn, text } => {
                self.out.push_back(Output::RelaySend { conn, text });
            }
            relay_client::Output::Close { conn } => {
                self.out.push_back(Output::RelayClose { conn });
            }
            relay_client::Output::Blob { relay, topic, blob } => deliver(
                &mut self.rendezvous,
                now,
                relay_client::Delivered::Blob {
                    relay: &relay,
                    topic: topic.as_str(),
                    blob: blob.as_str(),
                    bytes: None,
                },
            ),
            relay_client::Output::Fetched {
                relay,
                topic,
                blobs,
                done,
            } => deliver(
                &mut self.rendezvous,
                now,
                relay_client::Delivered::Page {
                    relay: &relay,
                    topic,
                    blobs,
                    done,
                },
            ),
            relay_client::Output::FetchUnsent { .. } => {}
            relay_client::Output::RelayState { relay, state } => {
                match state {
                    // §2: hello on each socket (re)open, in every room on that relay.
                    RelayState::Open => {
                        let id = self.relay_id(&relay);
                        self.rendezvous
                            .handle(now, rendezvous::Input::RelayOpened(id));
                    }
                    RelayState::Released => {
                        self.relay_ids.remove(&relay);
                    }
                    RelayState::Dialing | RelayState::Waiting { .. } => {}
                }
                self.out.push_back(Output::RelayState { relay, state });
            }
            relay_client::Output::Reachable(up) => self.out.push_back(Output::Reachable(up)),
            relay_client::Output::Turn(ice) => self.ice = ice,
            // A join refused later (a room's updated list): the room keeps its previous list.
            relay_client::Output::JoinRefused { .. } => {}
        }
    }

    /// Tells the rendezvous that `peer` is now admitted in `room`, or no longer is; hands both
    /// back for the node's own output.
    fn tell_rendezvous(&mut self, room: String, peer: String, admitted: bool) -> (Room, String) {
        let room = Room::new(room);
        let (r, p) = (room.clone(), peer.clone());
        let input = if admitted {
            rendezvous::Input::Admitted { room: r, peer: p }
        } else {
            rendezvous::Input::Departed { room: r, peer: p }
        };
        self.rendezvous.handle(self.now, input);
        (room, peer)
    }

    fn route_rendezvous(&mut self, out: rendezvous::Output) {
        let now = self.now;
        match out {
            rendezvous::Output::Publish {
                topic,
                relays,
                blob,
                ..
            } => {
                let topic = Topic::parse(&topic).expect("the rendezvous publishes under a topic");
                let blob = Blob::parse(&blob).expect("the rendezvous publishes a relay-sized blob");
                let input = match relays {
                    Relays::All => relay_client::Input::Publish { topic, blob },
                    Relays::One(id) => match self.relay_url(id) {
                        Some(relay) => relay_client::Input::PublishVia { relay, topic, blob },
                        // Released since it opened: the hello goes out when it opens again.
                        None => return,
                    },
                };
                self.relays.handle(now, input);
            }
            rendezvous::Output::PeerHeard { room, did, .. } => {
                self.mesh.handle(
                    now,
                    mesh::Input::PeerInRoom {
                        room: room.as_str().into(),
                        peer: did,
                    },
                );
            }
            // The mesh decides who offers from the same hello (§7.3), with what it knows of
            // connections: PeerHeard above is enough.
            rendezvous::Output::OfferTo { .. } => {}
            rendezvous::Output::SignalReceived {
                room,
                from,
                kind,
                description,
            } => match description_sdp(kind, description) {
                Some(sdp) => self.mesh.handle(
                    now,
                    mesh::Input::RelaySignal {
                        room: room.as_str().into(),
                        from,
                        kind,
                        sdp,
                    },
                ),
                None => self.counters.bad_descriptions += 1,
            },
            rendezvous::Output::SignalNotSent { .. } => self.counters.signals_not_sent += 1,
            rendezvous::Output::JoinRefused { room } => {
                // Bounded alike, so only a bug gets here; undo the join everywhere.
                self.leave(room.clone());
                self.out.push_back(Output::JoinRefused { room });
            }
        }
    }

    fn route_mesh(&mut self, out: mesh::Output) {
        let event = match out {
            mesh::Output::CreateOffer { conn, peer } => Output::CreateOffer {
                conn,
                peer,
                ice: self.ice.clone(),
            },
            mesh::Output::CreateAnswer { conn, peer, offer } => Output::CreateAnswer {
                conn,
                peer,
                offer,
                ice: self.ice.clone(),
            },
            mesh::Output::ApplyAnswer { conn, answer } => Output::ApplyAnswer { conn, answer },
            mesh::Output::Send { conn, bytes } => Output::PeerSend { conn, bytes },
            mesh::Output::Close { conn } => Output::PeerClose { conn },
            mesh::Output::ToRendezvous {
                room,
                to,
                kind,
                sdp,
            } => {
                let input = rendezvous::Input::Signal {
                    room: Room::new(room),
                    to,
                    kind,
                    description: json!({ "type": kind_name(kind), "sdp": sdp }),
                };
                self.rendezvous.handle(self.now, input);
                return;
            }
            // The rendezvous hears who is admitted where, to spare needless hellos back (§2).
            mesh::Output::Admitted { room, peer } => {
                let (room, peer) = self.tell_rendezvous(room, peer, true);
                Output::Admitted { room, peer }
            }
            mesh::Output::Departed { room, peer } => {
                let (room, peer) = self.tell_rendezvous(room, peer, false);
                Output::Departed { room, peer }
            }
            mesh::Output::Account {
                room,
                peer,
                account,
            } => Output::Account {
                room: Room::new(room),
                peer,
                account,
            },
            mesh::Output::LetGo {
                room,
                peer,
                account,
            } => Output::LetGo {
                room: Room::new(room),
                peer,
                account,
            },
            mesh::Output::Deliver {
                room,
                peer,
                kind,
                payload,
            } => Output::Deliver {
                room: Room::new(room),
                peer,
                kind,
                payload,
            },
        };
        self.out.push_back(event);
    }
}

/// The description's `type` for a signal kind, as a session description writes it.
fn kind_name(kind: SignalKind) -> &'static str {
    match kind {
        SignalKind::Offer => "offer",
        SignalKind::Answer => "answer",
    }
}

/// Hands a relay's blobs to the rendezvous, borrowed: it does not ask which relay a blob came
/// through (a copy through another is a replay by its `at`), so no relay id is looked up, and a
/// page's `done` says nothing it needs. A pushed blob comes with the bytes the relay client's
/// check decoded, which the rendezvous opens rather than decode the text again.
fn deliver<R: CryptoRng>(
    rendezvous: &mut Rendezvous<R>,
    now: Timestamp,
    delivered: relay_client::Delivered<'_>,
) {
    match delivered {
        relay_client::Delivered::Blob {
            topic,
            blob,
            bytes: Some(bytes),
            ..
        } => rendezvous.receive_decoded(now, topic, blob, bytes),
        relay_client::Delivered::Blob { topic, blob, .. } => {
            rendezvous.receive_blob(now, topic, blob);
        }
        relay_client::Delivered::Page { topic, blobs, .. } => {
            for blob in &blobs {
                rendezvous.receive_blob(now, topic.as_str(), blob.as_str());
            }
        }
    }
}

/// The SDP of an opened description, when it is a session description of the signal's kind.
fn description_sdp(kind: SignalKind, description: Value) -> Option<String> {
    let Value::Object(mut d) = description else {
        return None;
    };
    if d.get("type").and_then(Value::as_str) != Some(kind_name(kind)) {
        return None;
    }
    match d.remove("sdp") {
        Some(Value::String(sdp)) => Some(sdp),
        _ => None,
    }
}

impl<R: CryptoRng> Machine for Node<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        self.now = now;
        match input {
            Input::Join(join) => self.join(join),
            Input::Leave(room) => self.leave(room),
            Input::Send {
                room,
                to,
                kind,
                payload,
            } => {
                self.send_to_sockets(&room, to.as_deref(), &kind, &payload);
                self.mesh.handle(
                    now,
                    mesh::Input::Send {
                        room: room.as_str().into(),
                        to,
                        kind,
                        payload,
                    },
                );
            }
            Input::LetGo { room, peer } => {
                self.close_sockets(&room, Some(&peer));
                self.mesh.handle(
                    now,
                    mesh::Input::LetGo {
                        room: room.as_str().into(),
                        peer,
                    },
                );
            }
            Input::AccessChanged { room } => self.mesh.handle(
                now,
                mesh::Input::AccessChanged {
                    room: room.as_str().into(),
                },
            ),
            Input::RelayOpened { conn } => {
                self.relays
                    .handle(now, relay_client::Input::Opened { conn });
            }
            // Blobs go from the frame to the rendezvous as they are read, never copied.
            Input::RelayText { conn, text } => {
                let rendezvous = &mut self.rendezvous;
                self.relays.handle_text(now, conn, &text, &mut |delivered| {
                    deliver(rendezvous, now, delivered)
                });
            }
            Input::RelayClosed { conn } => {
                self.relays
                    .handle(now, relay_client::Input::Closed { conn });
            }
            Input::RelayDialFailed { conn } => {
                self.relays
                    .handle(now, relay_client::Input::DialFailed { conn });
            }
            Input::Online => self.relays.handle(now, relay_client::Input::Online),
            Input::LocalDescription { conn, sdp } => {
                self.mesh
                    .handle(now, mesh::Input::LocalDescription { conn, sdp });
            }
            Input::PeerOpened {
                conn,
                local_fingerprint,
                remote_fingerprint,
            } => self.mesh.handle(
                now,
                mesh::Input::Opened {
                    conn,
                    local_fingerprint,
                    remote_fingerprint,
                },
            ),
            Input::PeerClosed { conn } => self.mesh.handle(now, mesh::Input::Closed { conn }),
            Input::PeerFrame { conn, bytes } => {
                self.mesh.handle(now, mesh::Input::Frame { conn, bytes });
            }
            Input::NodeSocketOpened { conn, room, peer } => self.socket_opened(conn, room, peer),
            Input::NodeSocketAccount { conn, account } => {
                if let Some(s) = self.sockets.get(&conn) {
                    self.out.push_back(Output::Account {
                        room: s.room.clone(),
                        peer: s.peer.clone(),
                        account,
                    });
                }
            }
            Input::NodeSocketMessage {
                conn,
                kind,
                payload,
            } => self.socket_message(conn, kind, payload),
            Input::NodeSocketClosed { conn } => self.socket_closed(conn),
        }
        self.drain();
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    // Asked after every event: two comparisons, no iterator. On a tie the relays' reason wins,
    // then the rendezvous'.
    fn poll_timeout(&self) -> Option<Wakeup> {
        let relays = Wakeup::earliest(self.relays.poll_timeout(), self.rendezvous.poll_timeout());
        Wakeup::earliest(relays, self.mesh.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        if self.relays.poll_timeout().is_some_and(|w| w.at <= now) {
            self.relays.handle_timeout(now);
        }
        if self.rendezvous.poll_timeout().is_some_and(|w| w.at <= now) {
            self.rendezvous.handle_timeout(now);
        }
        if self.mesh.poll_timeout().is_some_and(|w| w.at <= now) {
            self.mesh.handle_timeout(now);
        }
        self.drain();
    }
}

impl<R: CryptoRng> core::fmt::Debug for Node<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Node")
            .field("rooms", &self.rooms.len())
            .field("relays", &self.relay_ids.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_p256};
    use alloc::string::ToString;
    use chacha20::ChaCha20Rng;

    const NODE: &str = "did:key:zDnaeTheAlwaysOnNode";
    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

    fn joined(space: &str) -> (Node<ChaCha20Rng>, Room) {
        let crypto = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let session = generate_p256(crypto, &mut rng);
        let config = NodeConfig {
            relays: alloc::vec![RelayUrl::parse("ws://127.0.0.1:8787").unwrap()],
        };
        let mut node = Node::new(session, config, crypto, rng).unwrap();
        let join = Join::space(crypto, space, RoomKind::PublicSpace, None);
        let room = join.room.clone();
        node.handle(NOW, Input::Join(join));
        while node.poll().is_some() {}
        (node, room)
    }

    fn outputs(node: &mut Node<ChaCha20Rng>) -> Vec<Output> {
        core::iter::from_fn(|| node.poll()).collect()
    }

    fn live(n: u64) -> Input {
        Input::NodeSocketMessage {
            conn: ConnId(1),
            kind: LIVE.into(),
            payload: json!({ "n": n }),
        }
    }

    /// §7: "one socket per relay ... however many spaces they share": three spaces on the same
    /// two relays dial each relay once, and every space's hello goes out on both sockets.
    #[test]
    fn a_node_in_three_spaces_holds_one_socket_per_relay() {
        let crypto = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let session = generate_p256(crypto, &mut rng);
        let config = NodeConfig {
            relays: alloc::vec![
                RelayUrl::parse("ws://127.0.0.1:8787").unwrap(),
                RelayUrl::parse("ws://127.0.0.1:8788").unwrap(),
            ],
        };
        let mut node = Node::new(session, config, crypto, rng).unwrap();
        let mut dials = Vec::new();
        for space in ["a", "b", "c"] {
            node.handle(
                NOW,
                Input::Join(Join::space(crypto, space, RoomKind::PublicSpace, None)),
            );
            for out in outputs(&mut node) {
                if let Output::Dial { conn, url, .. } = out {
                    dials.push((conn, url));
                }
            }
        }
        let urls: Vec<&str> = dials.iter().map(|(_, u)| u.as_str()).collect();
        assert_eq!(urls, ["ws://127.0.0.1:8787", "ws://127.0.0.1:8788"]);
        // Both sockets open: each carries a hello for each of the three spaces, and nothing
        // is dialled again.
        for (conn, _) in &dials {
            node.handle(NOW, Input::RelayOpened { conn: *conn });
        }
        let mut per_socket = BTreeMap::new();
        for _ in 0..50 {
            for out in outputs(&mut node) {
                assert!(!matches!(out, Output::Dial { .. }), "dialled again");
                if let Output::RelaySend { conn, text } = out
                    && text.contains("\"blob\"")
                {
                    *per_socket.entry(conn).or_insert(0) += 1;
                }
            }
            let Some(w) = node.poll_timeout() else { break };
            if w.at > NOW.saturating_add(core::time::Duration::from_secs(5)) {
                break;
            }
            node.handle_timeout(w.at);
        }
        assert_eq!(per_socket.len(), 2, "{per_socket:?}");
        assert!(per_socket.values().all(|n| *n == 3), "{per_socket:?}");
    }

    #[test]
    fn a_node_socket_peer_is_a_peer_of_its_space_without_an_offer_and_carries_live_both_ways() {
        let (mut node, room) = joined("s");
        node.handle(
            NOW,
            Input::NodeSocketOpened {
                conn: ConnId(1),
                room: room.clone(),
                peer: NODE.into(),
            },
        );
        let admitted = Output::Admitted {
            room: room.clone(),
            peer: NODE.into(),
        };
        assert_eq!(outputs(&mut node), [admitted]);
        node.handle(
            NOW,
            Input::NodeSocketAccount {
                conn: ConnId(1),
                account: Some("did:key:zAccount".into()),
            },
        );
        let account = Output::Account {
            room: room.clone(),
            peer: NODE.into(),
            account: Some("did:key:zAccount".into()),
        };
        assert_eq!(outputs(&mut node), [account]);
        // In: live is delivered as the socket's peer's.
        node.handle(NOW, live(0));
        let delivered = Output::Deliver {
            room: room.clone(),
            peer: NODE.into(),
            kind: LIVE.into(),
            payload: json!({ "n": 0 }),
        };
        assert_eq!(outputs(&mut node), [delivered]);
        // Out: the room's messages go to the socket too.
        node.handle(NOW, live_to(&room, None, "hi"));
        let sent = Output::NodeSocketSend {
            conn: ConnId(1),
            kind: LIVE.into(),
            payload: json!("hi"),
        };
        assert!(outputs(&mut node).contains(&sent));
        // To another peer only: not to the socket.
        node.handle(NOW, live_to(&room, Some("did:key:zSomeoneElse"), "hi"));
        assert!(!outputs(&mut node).contains(&sent));
        // The socket closing is the peer departing.
        node.handle(NOW, Input::NodeSocketClosed { conn: ConnId(1) });
        let departed = Output::Departed {
            room,
            peer: NODE.into(),
        };
        assert_eq!(outputs(&mut node), [departed]);
        node.handle(NOW, live(1));
        assert_eq!(outputs(&mut node), []);
        assert_eq!(node.counters().socket_messages_dropped, 1);
    }

    /// The socket machine held the peer to its limits (§7.4, §9.2) as the frames arrived
    /// (`proto/tests/minca_node_socket.rs`); the node applies them no second time, and keeps only
    /// `live` of a space's messages.
    #[test]
    fn only_live_of_a_node_socket_peer_is_delivered_and_its_limits_are_applied_once_by_its_socket()
    {
        let (mut node, room) = joined("s");
        node.handle(
            NOW,
            Input::NodeSocketOpened {
                conn: ConnId(1),
                room,
                peer: NODE.into(),
            },
        );
        outputs(&mut node);
        node.handle(
            NOW,
            Input::NodeSocketMessage {
                conn: ConnId(1),
                kind: "sync".into(),
                payload: json!(1),
            },
        );
        assert_eq!(outputs(&mut node), []);
        assert_eq!(node.counters().socket_messages_dropped, 1);
        // What the socket handed on is delivered, past a burst of 60 at one instant too: a second
        // bucket here would drop the 61st of a socket whose own bucket had refilled.
        for n in 0..61 {
            node.handle(NOW, live(n));
            assert_eq!(outputs(&mut node).len(), 1, "message {n}");
        }
        assert_eq!(node.counters().socket_messages_dropped, 1);
    }

    #[test]
    fn a_node_socket_for_a_room_not_joined_is_closed_and_leaving_the_room_closes_its_sockets() {
        let (mut node, room) = joined("s");
        let other = Room::of_space(default_provider(), "not joined");
        node.handle(
            NOW,
            Input::NodeSocketOpened {
                conn: ConnId(2),
                room: other,
                peer: NODE.into(),
            },
        );
        assert_eq!(
            outputs(&mut node),
            [Output::NodeSocketClose { conn: ConnId(2) }]
        );
        assert_eq!(node.counters().sockets_refused, 1);
        node.handle(
            NOW,
            Input::NodeSocketOpened {
                conn: ConnId(1),
                room: room.clone(),
                peer: NODE.into(),
            },
        );
        outputs(&mut node);
        node.handle(NOW, Input::Leave(room.clone()));
        let out = outputs(&mut node);
        assert_eq!(
            out[..2],
            [
                Output::NodeSocketClose { conn: ConnId(1) },
                Output::Departed {
                    room,
                    peer: NODE.into()
                }
            ]
        );
    }

    fn socket_opened(node: &mut Node<ChaCha20Rng>, conn: u64, room: &Room, peer: &str) {
        node.handle(
            NOW,
            Input::NodeSocketOpened {
                conn: ConnId(conn),
                room: room.clone(),
                peer: peer.into(),
            },
        );
    }

    /// The application's live message `text` to `room`, to one peer or to all.
    fn live_to(room: &Room, to: Option<&str>, text: &str) -> Input {
        Input::Send {
            room: room.clone(),
            to: to.map(String::from),
            kind: LIVE.into(),
            payload: json!(text),
        }
    }

    fn live_on(conn: u64, n: u64) -> Input {
        Input::NodeSocketMessage {
            conn: ConnId(conn),
            kind: LIVE.into(),
            payload: json!({ "n": n }),
        }
    }

    /// A client that redials its node socket before the old one is reported closed (a half-dead
    /// TCP connection) is the same peer on the newer socket: admitted once, sent each message
    /// once, and departed only when the socket that carries it goes; the older is closed, and
    /// what is still reported from it is dropped. A redial takes no room in the full table.
    #[test]
    fn a_node_socket_peer_that_redials_is_one_peer_on_its_newer_socket() {
        let (mut node, room) = joined("s");
        socket_opened(&mut node, 1, &room, NODE);
        let admitted = Output::Admitted {
            room: room.clone(),
            peer: NODE.into(),
        };
        assert_eq!(outputs(&mut node), [admitted]);
        for n in 0..60 {
            node.handle(NOW, live_on(1, n));
        }
        outputs(&mut node);
        socket_opened(&mut node, 2, &room, NODE);
        assert_eq!(
            outputs(&mut node),
            [Output::NodeSocketClose { conn: ConnId(1) }]
        );
        // Opened again, the same socket changes nothing.
        socket_opened(&mut node, 2, &room, NODE);
        assert_eq!(outputs(&mut node), []);
        // The newer socket carries the peer's messages; the older, closed, carries none.
        node.handle(NOW, live_on(2, 60));
        let delivered = Output::Deliver {
            room: room.clone(),
            peer: NODE.into(),
            kind: LIVE.into(),
            payload: json!({ "n": 60 }),
        };
        assert_eq!(outputs(&mut node), [delivered]);
        node.handle(NOW, live_on(1, 61));
        assert_eq!(outputs(&mut node), []);
        node.handle(NOW, live_to(&room, Some(NODE), "hi"));
        let sent = Output::NodeSocketSend {
            conn: ConnId(2),
            kind: LIVE.into(),
            payload: json!("hi"),
        };
        assert_eq!(outputs(&mut node), [sent]);
        // The older socket's close, reported late, is no departure.
        node.handle(NOW, Input::NodeSocketClosed { conn: ConnId(1) });
        assert_eq!(outputs(&mut node), []);
        node.handle(NOW, Input::NodeSocketClosed { conn: ConnId(2) });
        let departed = Output::Departed {
            room: room.clone(),
            peer: NODE.into(),
        };
        assert_eq!(outputs(&mut node), [departed]);
        // A full table still takes a peer's newer socket, and refuses a new peer.
        for c in 0..MAX_NODE_SOCKETS as u64 {
            socket_opened(
                &mut node,
                100 + c,
                &room,
                &alloc::format!("did:key:zPeer{c}"),
            );
        }
        outputs(&mut node);
        socket_opened(&mut node, 99, &room, "did:key:zPeer0");
        assert_eq!(
            outputs(&mut node),
            [Output::NodeSocketClose { conn: ConnId(100) }]
        );
        socket_opened(&mut node, 98, &room, NODE);
        assert_eq!(
            outputs(&mut node),
            [Output::NodeSocketClose { conn: ConnId(98) }]
        );
        assert_eq!(node.counters().sockets_refused, 1);
        assert_eq!(node.sockets.len(), MAX_NODE_SOCKETS);
    }

    /// A host that reports a socket id open again for another peer (its close never reported)
    /// ends the first peer there: one socket carries one peer.
    #[test]
    fn a_node_socket_reported_open_again_for_another_peer_ends_the_first() {
        let (mut node, room) = joined("s");
        const OTHER: &str = "did:key:zDnaeAnotherPeer";
        socket_opened(&mut node, 1, &room, NODE);
        outputs(&mut node);
        socket_opened(&mut node, 1, &room, OTHER);
        let departed = Output::Departed {
            room: room.clone(),
            peer: NODE.into(),
        };
        let admitted = Output::Admitted {
            room: room.clone(),
            peer: OTHER.into(),
        };
        assert_eq!(outputs(&mut node), [departed, admitted]);
        assert_eq!(node.sockets.len(), 1);
    }

    /// §6.3: a peer let go of is sent nothing more of the space; on a node its socket is closed
    /// (M-6.3-s). Another socket peer of the room stays.
    #[test]
    fn letting_go_of_a_node_socket_peer_closes_its_socket_and_sends_it_nothing_more() {
        let (mut node, room) = joined("s");
        const OTHER: &str = "did:key:zDnaeAnotherPeer";
        socket_opened(&mut node, 1, &room, NODE);
        socket_opened(&mut node, 2, &room, OTHER);
        outputs(&mut node);
        node.handle(
            NOW,
            Input::LetGo {
                room: room.clone(),
                peer: NODE.into(),
            },
        );
        let departed = Output::Departed {
            room: room.clone(),
            peer: NODE.into(),
        };
        assert_eq!(
            outputs(&mut node),
            [Output::NodeSocketClose { conn: ConnId(1) }, departed]
        );
        node.handle(NOW, live_to(&room, None, "secret"));
        let sent: Vec<ConnId> = outputs(&mut node)
            .into_iter()
            .filter_map(|o| match o {
                Output::NodeSocketSend { conn, .. } => Some(conn),
                _ => None,
            })
            .collect();
        assert_eq!(sent, [ConnId(2)]);
        // Nothing of it is taken any more either, and its late close is no second departure.
        node.handle(NOW, live_on(1, 0));
        node.handle(NOW, Input::NodeSocketClosed { conn: ConnId(1) });
        assert_eq!(outputs(&mut node), []);
    }

    #[test]
    fn a_description_of_the_other_kind_gives_no_sdp() {
        let d = json!({ "type": "answer", "sdp": "v=0" });
        assert_eq!(description_sdp(SignalKind::Offer, d.clone()), None);
        assert_eq!(
            description_sdp(SignalKind::Answer, d),
            Some("v=0".to_string())
        );
        assert_eq!(
            description_sdp(SignalKind::Offer, json!({ "type": "offer" })),
            None
        );
        assert_eq!(description_sdp(SignalKind::Offer, json!("v=0")), None);
    }
}
