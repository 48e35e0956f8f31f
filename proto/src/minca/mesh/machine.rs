//! The mesh machine: one per node (§5.1, §7.2, §7.3, §8, §9).
//!
//! [`Mesh`] holds one connection per peer DID, shared by every room both are in (§5.1, §7), runs
//! the `minca-mesh/v1` handshake per (room, peer) before anything of a room crosses (§6.2, §7.2),
//! decides who offers and takes signals through relays and through the mesh (§7.3, §8), sends and
//! reads `__peers` and `__signal` (§8), sends `who` to each newly admitted peer of a space and
//! applies the receive limits on live messages (§9.1, §9.2).
//!
//! The transport (WebRTC in a driver) is asked through [`Output`]s: create an offer, answer one,
//! apply an answer, send, close. The host hands back the description it made
//! ([`Input::LocalDescription`]) and reports a connection opened (with its channel-binding
//! fingerprints), closed or failed, and each binary frame. Rendezvous (§2) tells the mesh who is in
//! a room ([`Input::PeerInRoom`]) and hands it signals ([`Input::RelaySignal`]); the mesh hands
//! rendezvous the offers and answers that go through relays ([`Output::ToRendezvous`]). Read
//! proofs (§6.3) enter through [`ReadAccess`], which also answers, whenever the access history
//! changes, a peer connects, its `who` arrives or its grace runs out, whether a reader stays
//! (§6.3 "Letting a reader go"): the mesh lets go of one that must not ([`Output::LetGo`]). The
//! note inside `who` is checked here (§6.4, with [`Es256Notes`] unless the host hands another
//! [`NoteChecker`]) and the peer's account reported ([`Output::Account`]); a host may still name
//! a former member itself with [`Input::FormerMember`].
//!
//! In a space's room the messages of §9 are `who` and `live`; any other type is unknown there and
//! ignored (dropped and counted, §9 "Unknown types are ignored"). A channel's room carries its own
//! types (§9), which go to the application. Every frame a peer sends is charged to its
//! [`PEER_BYTE_RATE`] (§7.4), and every live message to its live allowance (§9.2), through
//! [`crate::minca::limits`], the code a node socket's frames pass through too.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use arrayvec::ArrayVec;
use bytes::Bytes;
use rand_core::CryptoRng;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::codec::did_key::DidKey;
use crate::core::{ConnId, ExpiringSet, Machine, TimerQueue, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, P256Secret};
use crate::minca::auth;
use crate::minca::limits::{ByteAllowance, LIVE, LimitCounters, LiveAllowance, fits};
use crate::minca::mesh::admission::{Admitted, Handshake, PeerWho, Stage};
use crate::minca::mesh::conns::{Conn, ConnState, Conns};
use crate::minca::mesh::frame::{self, AUTH_HELLO, AUTH_PROOF, FrameRef, LEAVE, PEERS, SIGNAL};
use crate::minca::mesh::introduction::{
    self, Dropped, Introductions, MAX_PEER_LIST, New, Signal, SignalClock, SignalKind, SignalRef,
    Verdict, is_did, we_offer,
};
use crate::minca::mesh::payload;
use crate::minca::mesh::peers_peek;
use crate::minca::mesh::signal_frame;
use crate::minca::mesh::signal_peek;
use crate::minca::note::{Es256Notes, NoteChecker, account_of};
use crate::minca::read_proof::{AccessView, Admission, Reader, Review, WHO_GRACE};
use crate::minca::text_map::{KeyText, TextMap};

/// A handshake not finished within 10 s is abandoned (§7.2).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection started by offering or answering may take to open before it is closed
/// and forgotten (§7.3: "an attempt timeout of the node's choosing"). ICE gathering is capped at
/// 2 s on each side (§5.1) and the offer and answer each cross a relay or the mesh once; 20 s
/// leaves room for connectivity checks through TURN, and is well under the 2 minutes a relay hello
/// is repeated in (§2), so the next hello always finds the attempt gone.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a newly opened connection may wait for a room to take it up (a handshake) before it
/// is closed (§7.2: "soon"). Both sides greet as the channel opens, so a room that wants it takes
/// it up within one round trip; the handshake's own 10 s is the natural measure of "soon".
pub const UNCLAIMED_TIMEOUT: Duration = HANDSHAKE_TIMEOUT;

/// The most connections (open or being attempted) held at once. The spec plans a cap on
/// half-open connections (§7.4) without a value; 256 peers is far beyond one node's honest mesh
/// (64 peers a room, §2) and bounds what floods of `__peers` or offers can make it dial.
pub const MAX_CONNECTIONS: usize = 256;

/// The most rooms joined at once, and the most peers one room tracks (known, in a handshake or
/// admitted): a full room forgets a peer that is only known before it refuses a new one.
pub use crate::minca::room::{MAX_ROOM_PEERS, MAX_ROOMS};

/// The type of the message carrying a side's note (§9.1).
pub const WHO: &str = "who";

/// The message types of a space's room (§9, §9.1, §9.2): any other is unknown there and ignored.
/// The sync messages of 05 would join them; 05 was not handed over.
pub const SPACE_TYPES: [&str; 2] = [WHO, LIVE];

/// The byte rate every peer's frames are held to, per connection (§7.4); the same on a node
/// socket ([`crate::minca::limits`]).
pub use crate::minca::limits::PEER_BYTE_RATE;

/// The most connections at once that introductions (§8) offered or answered and that are not yet
/// admitted in any room (§7.4 plans this cap without a value): one room's worth of peers
/// ([`MAX_ROOM_PEERS`]), so a newcomer can still meet a full room at once, while a flood of
/// `__peers` or `__signal` cannot hold more half-open connections than that.
pub const MAX_HALF_OPEN_INTRODUCED: usize = MAX_ROOM_PEERS;

/// How long a peer whose proof failed in a room is left alone there (§7.2 says only "a failed
/// check ends the handshake"). Without a pause the next hello, `__peers` or offer about the same
/// peer starts the same handshake again at once and fails it again, a loop that costs both sides a
/// signature check and (through introductions) a new connection each turn. 30 s is three
/// handshake timeouts, short enough that a peer that fixes its key (a new read key arrives) is met
/// again soon, and well under the 2 minutes a relay hello is repeated in (§2). Other rooms the two
/// share are not affected ("failing to prove it in one room costs nothing in another").
pub const PROOF_FAILURE_BACKOFF: Duration = Duration::from_secs(30);

/// The most (room, peer) pairs remembered as cooling off after a failed proof: one per connection
/// the mesh can hold in every room it can join would be far more than any honest mesh fails;
/// [`MAX_CONNECTIONS`] bounds it, and a full table forgets the pair whose pause ends soonest.
pub const MAX_PROOF_FAILURES: usize = MAX_CONNECTIONS;

/// What a room asks of a peer before admitting it (§6.2, §6.3, §8).
pub enum RoomKind {
    /// A public space: the §6.2 signature; introductions on; `who` sent on admission.
    PublicSpace,
    /// A private space: the §6.2 signature and a read proof (§6.3), through the node's
    /// [`ReadAccess`]; introductions on; `who` sent on admission.
    PrivateSpace(Box<dyn ReadAccess>),
    /// A channel's room (pairing, connecting by code): hellos only, no proofs (§6.2), no
    /// introductions (§8), no `who`; it carries its own types.
    Channel,
}

impl core::fmt::Debug for RoomKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::PublicSpace => "PublicSpace",
            Self::PrivateSpace(_) => "PrivateSpace",
            Self::Channel => "Channel",
        })
    }
}

/// The node's read access to one private space (§6.3): the seam to the read-proof module.
///
/// `Send` so that a driver can move the mesh, which owns it, to another thread or task.
pub trait ReadAccess: Send {
    /// The read-proof fields (`read`, `readKey`, `member`, `earlier`) over `label`, or `None` when
    /// this node holds no read key: then it MUST NOT complete the handshake.
    fn prove(&self, label: &str) -> Option<Map<String, Value>>;

    /// Whether `proof` (the whole `__auth-proof` payload) proves `prover` may read, over `label`,
    /// at `now` (§6.3's six steps).
    fn verify(&self, now: Timestamp, prover: &str, label: &str, proof: &Map<String, Value>)
    -> bool;

    /// How `proof` let `prover` in (§6.3: the key it was let in on), or `None` to refuse. The
    /// default knows no keys: whatever [`verify`](Self::verify) accepts is never looked at again.
    fn admit(
        &self,
        now: Timestamp,
        prover: &str,
        label: &str,
        proof: &Map<String, Value>,
    ) -> Option<Admission> {
        self.verify(now, prover, label, proof)
            .then_some(Admission::Public)
    }

    /// Looks again at a peer let in by [`admit`](Self::admit) (§6.3 "Letting a reader go").
    fn review(&self, reader: &Reader, now: Timestamp) -> Review {
        let _ = (reader, now);
        Review::Keep
    }

    /// Whether `account` is a former member of the space (03 §9.2): nothing live goes to or is
    /// taken from a peer whose `who` shows one (§9.2).
    fn is_former_member(&self, account: &str) -> bool {
        let _ = account;
        false
    }

    /// Remembers a session let go of as a former member while a new key is due, to turn it away
    /// when it reconnects (§6.3, SHOULD).
    fn turn_away(&mut self, session: &str) {
        let _ = session;
    }

    /// What the mesh watches of the access history: when it changes, every reader of the room is
    /// looked at again without the host having to say so (§6.3).
    fn view(&self) -> AccessView {
        AccessView::default()
    }
}

/// A room to join.
#[derive(Debug)]
pub struct RoomConfig {
    /// The room name (§1.3) frames carry.
    pub room: String,
    /// The space id that goes into T (§6.2): the space id, not the room.
    pub space_id: String,
    /// What the room asks.
    pub kind: RoomKind,
    /// This session's note, one token, sent in `who` (§9.1); `None` for a session acting for no
    /// account.
    pub note: Option<String>,
}

/// How a connection's descriptions travel (§7.3): through the relays of a room, or over the mesh
/// in the room of introduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through the rendezvous of this room (§2).
    Relay(String),
    /// As a `__signal` over the mesh in this room (§8).
    Mesh(String),
}

/// How a peer was heard of in a room, and so which [`Route`] an offer to it would take there:
/// the route itself names the room, and is made only for an offer (most peers heard of are
/// connected already).
#[derive(Clone, Copy)]
enum Via {
    /// A hello heard through the room's relays.
    Relay,
    /// A `__peers` list in the room.
    Mesh,
}

impl Via {
    fn route(self, room: &str) -> Route {
        match self {
            Via::Relay => Route::Relay(room.into()),
            Via::Mesh => Route::Mesh(room.into()),
        }
    }
}

/// Everything the mesh can be told.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// Join a room.
    Join(RoomConfig),
    /// Leave a room: `__leave` to each peer admitted there (§7.2), and to each this side sent its
    /// proof to, which may hold this side admitted already.
    Leave {
        /// The room.
        room: String,
    },
    /// Rendezvous heard a hello: `peer` is in `room` (§2, §7.3).
    PeerInRoom {
        /// The room.
        room: String,
        /// The peer's session DID.
        peer: String,
    },
    /// Rendezvous took an offer or answer from `from` in `room` (§2): a signal (§7.3).
    RelaySignal {
        /// The room it came in.
        room: String,
        /// Its sender.
        from: String,
        /// Offer or answer.
        kind: SignalKind,
        /// The session description.
        sdp: String,
    },
    /// The transport made the local description the mesh asked for on `conn`.
    LocalDescription {
        /// The connection.
        conn: ConnId,
        /// The description.
        sdp: String,
    },
    /// The data channel of `conn` opened, with its channel-binding fingerprints (§5.1) as this side
    /// sees them; empty strings without a binding.
    Opened {
        /// The connection.
        conn: ConnId,
        /// This side's fingerprint.
        local_fingerprint: String,
        /// The peer's fingerprint.
        remote_fingerprint: String,
    },
    /// `conn` closed or failed.
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// A binary frame arrived on `conn`. A `Vec<u8>` from the transport becomes [`Bytes`]
    /// without a copy (`.into()`).
    Frame {
        /// The connection.
        conn: ConnId,
        /// The frame's bytes.
        bytes: Bytes,
    },
    /// The access history of `room` changed (§6.3): every reader is looked at again. The mesh
    /// also notices a change of current read key or of a new key being due on its own (through
    /// [`ReadAccess::view`]); this is for any other change.
    AccessChanged {
        /// The room.
        room: String,
    },
    /// Let one peer go in one room (§6.3, §7.2).
    LetGo {
        /// The room.
        room: String,
        /// The peer.
        peer: String,
    },
    /// The application found that `peer`'s `who` in `room` shows a former member (§9.2).
    FormerMember {
        /// The room.
        room: String,
        /// The peer.
        peer: String,
    },
    /// Send an application message (a non-reserved type) in `room`, to one admitted peer or to
    /// all of them.
    Send {
        /// The room.
        room: String,
        /// One peer, or every admitted peer of the room.
        to: Option<String>,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
}

/// Everything the mesh can ask for. Outputs are executed in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Create a connection to `peer` and make an offer; hand it back as
    /// [`Input::LocalDescription`].
    CreateOffer {
        /// The id the mesh gives the connection.
        conn: ConnId,
        /// The peer.
        peer: String,
    },
    /// Create a connection to `peer` answering `offer`; hand the answer back as
    /// [`Input::LocalDescription`].
    CreateAnswer {
        /// The id the mesh gives the connection.
        conn: ConnId,
        /// The peer.
        peer: String,
        /// The peer's offer.
        offer: String,
    },
    /// Apply the peer's answer to the offer made on `conn`.
    ApplyAnswer {
        /// The connection.
        conn: ConnId,
        /// The answer.
        answer: String,
    },
    /// Send a binary frame on `conn`. The connection alone names the peer: the host made it
    /// for the peer of [`Output::CreateOffer`] or [`Output::CreateAnswer`]. A frame sent to
    /// several peers (a flooded `__signal`, §8) is one buffer every copy shares.
    Send {
        /// The connection.
        conn: ConnId,
        /// The frame.
        bytes: Bytes,
    },
    /// Close `conn`.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Send an offer or answer to `to` through the rendezvous of `room` (§2, §7.3).
    ToRendezvous {
        /// The room.
        room: String,
        /// The peer it is for.
        to: String,
        /// Offer or answer.
        kind: SignalKind,
        /// The description.
        sdp: String,
    },
    /// A peer was admitted in a room (§7.2).
    Admitted {
        /// The room.
        room: String,
        /// The peer.
        peer: String,
    },
    /// A peer admitted in a room is no longer a peer there (left, let go, or its connection
    /// went).
    Departed {
        /// The room.
        room: String,
        /// The peer.
        peer: String,
    },
    /// The account behind an admitted peer of a space (§6.4): what its `who` proved (`None`: no
    /// valid note made out to its session), or `None` once its 10 s to send one ran out. Comes
    /// before any message of the peer in that room.
    Account {
        /// The room.
        room: String,
        /// The peer's session DID.
        peer: String,
        /// The account, the note's issuer, if any.
        account: Option<String>,
    },
    /// The mesh let go of a reader of a private space that may no longer read it (§6.3): it
    /// said `__leave` to it for that room alone and sends it nothing more there; a
    /// [`Output::Departed`] follows.
    LetGo {
        /// The room.
        room: String,
        /// The peer.
        peer: String,
        /// The account its `who` showed, if any.
        account: Option<String>,
    },
    /// A message of an admitted peer, attributed to the connection's peer (§7.1, §9): in a
    /// space, `live` within its limits (§9.2), once its `who` came or its grace ran out; in a
    /// channel's room, any non-reserved type.
    Deliver {
        /// The room.
        room: String,
        /// The peer the connection is with.
        peer: String,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
}

/// Counters for every drop and refusal, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Frames that are not a §7.1 frame.
    pub bad_frames: u64,
    /// Frames on a connection that is not the peer's current open one.
    pub stale_connection: u64,
    /// Frames of a room this node is not in.
    pub unknown_room: u64,
    /// Frames of a room the peer is not admitted in, other than the handshake (§7.2).
    pub not_admitted: u64,
    /// Handshake frames out of turn or malformed (a proof without our hello, a second proof, a
    /// hello without a nonce).
    pub bad_handshake: u64,
    /// Proofs that did not check out (§6.2, §6.3): the handshake ended.
    pub proof_failed: u64,
    /// Handshakes this node could not complete: a private space and no read key (§6.3).
    pub no_read_key: u64,
    /// Handshakes abandoned after 10 s (§7.2).
    pub handshake_timeouts: u64,
    /// Attempts closed and forgotten for not opening in time (§7.3).
    pub attempt_timeouts: u64,
    /// Connections closed for serving no room (§7.2).
    pub idle_closed: u64,
    /// Signals from a peer admitted in some room (§7.3).
    pub signal_from_admitted: u64,
    /// Answers with no offer of ours waiting.
    pub unexpected_answer: u64,
    /// `__signal`s dropped by the rules of §8.
    pub signal_dropped: u64,
    /// Frames and live messages the per-peer limits dropped (§7.4, §9.2), counted as a node
    /// socket counts them.
    pub limits: LimitCounters,
    /// Live messages dropped from a former member (§9.2).
    pub live_from_former_member: u64,
    /// Sends refused: a reserved type, an unknown room, no admitted peer, a live message before
    /// `who`, to a former member, or too long.
    pub send_refused: u64,
    /// Things refused because a table was full ([`MAX_CONNECTIONS`], [`MAX_ROOMS`],
    /// [`MAX_ROOM_PEERS`]).
    pub table_full: u64,
    /// Inputs naming something this node does not hold (an unknown connection, a room not joined,
    /// a peer that is not a DID or is this node).
    pub ignored_inputs: u64,
    /// Messages of a type a space does not speak (§9 "Unknown types are ignored").
    pub unknown_type: u64,
    /// Messages of a space from a peer whose `who` had not come yet (§6.4: `who` is first).
    pub before_who: u64,
    /// A second `who` from the same admitted peer (ignored: the first one counts).
    pub who_repeated: u64,
    /// Peers whose `who` did not come within 10 s of admission: they have no account (§6.3).
    pub who_missing: u64,
    /// Readers let go of because they may no longer read the space (§6.3).
    pub readers_let_go: u64,
    /// Offers and answers not made because [`MAX_HALF_OPEN_INTRODUCED`] introduced connections
    /// were already half-open (§7.4).
    pub half_open_refused: u64,
    /// Handshakes, offers and answers not started with a peer that failed its proof in that room
    /// less than [`PROOF_FAILURE_BACKOFF`] ago.
    pub proof_backoff: u64,
}

struct Room {
    space_id: String,
    kind: RoomKind,
    note: Option<String>,
    peers: TextMap<Stage>,
    /// The access history as last looked at (a private space).
    view: AccessView,
}

impl Room {
    fn asks_proofs(&self) -> bool {
        !matches!(self.kind, RoomKind::Channel)
    }

    fn introduces(&self) -> bool {
        !matches!(self.kind, RoomKind::Channel)
    }

    fn admitted(&self) -> impl Iterator<Item = &str> {
        self.admitted_but(None)
    }

    /// The admitted peers but `except`, in DID order.
    fn admitted_but(&self, except: Option<&str>) -> impl Iterator<Item = &str> {
        self.peers
            .iter_but(except)
            .filter(|(_, s)| s.is_admitted())
            .map(|(p, _)| p)
    }

    fn is_admitted(&self, peer: &str) -> bool {
        self.peers.get(peer).is_some_and(Stage::is_admitted)
    }

    fn access(&self) -> Option<&dyn ReadAccess> {
        match &self.kind {
            RoomKind::PrivateSpace(a) => Some(a.as_ref()),
            _ => None,
        }
    }

    /// Whether `a`'s `who` shows a former member (§9.2), as the application said or as the
    /// space's access history says now.
    fn shows_former_member(&self, a: &Admitted) -> bool {
        a.former_member
            || a.who
                .account()
                .zip(self.access())
                .is_some_and(|(acc, access)| access.is_former_member(acc))
    }

    /// Makes room for `peer`, forgetting a merely known peer if full. False if still full.
    fn make_room_for(&mut self, peer: &str) -> bool {
        if self.peers.contains_key(peer) || self.peers.len() < MAX_ROOM_PEERS {
            return true;
        }
        let known = self
            .peers
            .iter()
            .find(|(_, s)| !s.uses_connection())
            .map(|(p, _)| String::from(p));
        match known {
            Some(p) => {
                self.peers.remove(&p);
                true
            }
            None => false,
        }
    }
}

/// The mesh of one node; see the [module docs](self).
pub struct Mesh<R: CryptoRng> {
    did: String,
    key: P256Secret,
    crypto: &'static dyn CryptoProvider,
    rng: R,
    rooms: TextMap<Room>,
    conns: Conns,
    next_conn: u64,
    handshakes: TimerQueue<(String, String)>,
    who_grace: TimerQueue<(String, String)>,
    attempts: TimerQueue<ConnId>,
    unclaimed: TimerQueue<ConnId>,
    introductions: Introductions,
    signal_clock: SignalClock,
    /// (room, peer) pairs whose proof failed, until their [`PROOF_FAILURE_BACKOFF`] ends.
    failed_proofs: ExpiringSet<(String, String)>,
    out: VecDeque<Output>,
    counters: Counters,
    notes: Box<dyn NoteChecker + Send>,
}

impl<R: CryptoRng> Mesh<R> {
    /// The mesh of the node whose session key is `key`; its identity is the DID that key names
    /// (§7). `None` if the key is not a P-256 secret the provider accepts.
    pub fn new(key: P256Secret, crypto: &'static dyn CryptoProvider, rng: R) -> Option<Self> {
        let did = DidKey::P256(crypto.p256_public_key(&key).ok()?.0).to_did();
        Some(Self {
            did,
            key,
            crypto,
            rng,
            rooms: TextMap::default(),
            conns: Conns::default(),
            next_conn: 0,
            handshakes: TimerQueue::new(),
            who_grace: TimerQueue::new(),
            attempts: TimerQueue::new(),
            unclaimed: TimerQueue::new(),
            introductions: Introductions::new(),
            signal_clock: SignalClock::default(),
            failed_proofs: ExpiringSet::new(MAX_PROOF_FAILURES),
            out: VecDeque::new(),
            counters: Counters::default(),
            notes: Box::new(Es256Notes::new(crypto)),
        })
    }

    /// Checks the notes in `who` (§6.4) with `notes` instead of weft's [`Es256Notes`].
    pub fn set_note_checker(&mut self, notes: impl NoteChecker + Send + 'static) {
        self.notes = Box::new(notes);
    }

    /// The account the `who` of `peer` in `room` proved (§6.4), if any.
    pub fn account(&self, room: &str, peer: &str) -> Option<&str> {
        match self.rooms.get(room)?.peers.get(peer)? {
            Stage::Admitted(a) => a.who.account(),
            _ => None,
        }
    }

    /// The node's session DID, the mesh's identity (§7).
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether `peer` is admitted in `room`.
    pub fn is_admitted(&self, room: &str, peer: &str) -> bool {
        self.rooms.get(room).is_some_and(|r| r.is_admitted(peer))
    }

    /// The peers admitted in `room`, in DID order.
    pub fn admitted(&self, room: &str) -> Vec<String> {
        self.rooms
            .get(room)
            .map(|r| r.admitted().map(String::from).collect())
            .unwrap_or_default()
    }

    /// How many connections are held (open or being attempted).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// How many connections are open.
    pub fn open_connection_count(&self) -> usize {
        self.conns.values().filter(|c| c.is_open()).count()
    }

    /// How many peers all rooms track, for checking the bounds.
    pub fn tracked_peers(&self) -> usize {
        self.rooms.values().map(|r| r.peers.len()).sum()
    }

    // ---- sending -------------------------------------------------------------------------

    /// Sends a frame of type `kind` in `room` to `peer`, if its connection is open.
    fn send_frame(&mut self, peer: &str, room: &str, kind: &str, payload: &impl Serialize) {
        self.send_to_each([peer], room, kind, payload);
    }

    /// Sends one frame of type `kind` in `room` to each of `peers` that has an open connection,
    /// written once from `payload`'s borrows.
    fn send_to_each<'p>(
        &mut self,
        peers: impl IntoIterator<Item = &'p str>,
        room: &str,
        kind: &str,
        payload: &impl Serialize,
    ) {
        let did = &self.did;
        send_each(&self.conns, &mut self.out, peers, || {
            frame::write(room, kind, did, payload)
        });
    }

    fn close_conn(&mut self, peer: &str) {
        if let Some(conn) = self.conns.remove(peer) {
            self.attempts.cancel(&conn.id);
            self.unclaimed.cancel(&conn.id);
            self.out.push_back(Output::Close { conn: conn.id });
        }
        self.forget_peer_stages(peer);
    }

    /// The connection to `peer` went: every room's handshake and admission with it ends; a peer
    /// admitted there departs, and stays known.
    fn forget_peer_stages(&mut self, peer: &str) {
        let rooms: Vec<String> = self
            .rooms
            .iter()
            .filter(|(_, r)| r.peers.get(peer).is_some_and(Stage::uses_connection))
            .map(|(n, _)| String::from(n))
            .collect();
        for room in rooms {
            self.back_to_known(&room, peer);
        }
    }

    /// `peer` is merely known in `room` again: its handshake or admission there ends with its
    /// timers, and a peer admitted there departs. The connection is left as it is.
    fn back_to_known(&mut self, room: &str, peer: &str) {
        let Some(stage) = self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer)) else {
            return;
        };
        let was = core::mem::replace(stage, Stage::Known);
        if was.uses_connection() {
            let key = (room.into(), peer.into());
            self.handshakes.cancel(&key);
            self.who_grace.cancel(&key);
        }
        if was.is_admitted() {
            self.out.push_back(Output::Departed {
                room: room.into(),
                peer: peer.into(),
            });
        }
    }

    fn uses_connection(&self, peer: &str) -> bool {
        self.rooms
            .values()
            .any(|r| r.peers.get(peer).is_some_and(Stage::uses_connection))
    }

    /// §7.2: a connection in no room and no handshake is closed, once a room has taken it up;
    /// before that the unclaimed timer decides.
    fn close_if_idle(&mut self, peer: &str) {
        let idle = self
            .conns
            .get(peer)
            .is_some_and(|c| c.is_open() && c.claimed);
        if idle && !self.uses_connection(peer) {
            self.counters.idle_closed += 1;
            self.close_conn(peer);
        }
    }

    // ---- connections (§7.3) -----------------------------------------------------------------

    fn new_conn(
        &mut self,
        now: Timestamp,
        peer: &str,
        state: ConnState,
        route: Route,
    ) -> Option<ConnId> {
        if !self.conns.has(peer) && self.conns.len() >= MAX_CONNECTIONS {
            self.counters.table_full += 1;
            return None;
        }
        if matches!(route, Route::Mesh(_))
            && self.half_open_introduced() >= MAX_HALF_OPEN_INTRODUCED
        {
            self.counters.half_open_refused += 1;
            return None;
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.insert(Conn {
            id,
            peer: KeyText::new(peer),
            state,
            route,
            claimed: false,
            bytes: ByteAllowance::new(now),
        });
        self.attempts
            .schedule(now.saturating_add(ATTEMPT_TIMEOUT), id);
        Some(id)
    }

    /// Connections that introductions started and that no room admitted the peer on yet (§7.4).
    fn half_open_introduced(&self) -> usize {
        self.conns
            .values()
            .filter(|c| {
                matches!(c.route, Route::Mesh(_)) && !self.admitted_anywhere(c.peer.as_str())
            })
            .count()
    }

    fn offer_to(&mut self, now: Timestamp, peer: &str, route: Route) {
        if let Some(conn) = self.new_conn(now, peer, ConnState::MakingOffer, route) {
            self.out.push_back(Output::CreateOffer {
                conn,
                peer: peer.into(),
            });
        }
    }

    fn admitted_anywhere(&self, peer: &str) -> bool {
        self.rooms.values().any(|r| r.is_admitted(peer))
    }

    /// Marks `peer` known in `room`, if there is space. False if the room is full.
    fn know(&mut self, room: &str, peer: &str) -> bool {
        let Some(r) = self.rooms.get_mut(room) else {
            return false;
        };
        // Nearly every call names a peer already tracked: one lookup, and no key made.
        if r.peers.contains_key(peer) {
            return true;
        }
        if !r.make_room_for(peer) {
            self.counters.table_full += 1;
            return false;
        }
        r.peers.insert(peer, Stage::Known);
        true
    }

    /// §7.3 and §8: `peer` is in `room`. Greet if connected; else offer if we are the lesser DID
    /// and nothing was started; else wait.
    fn meet(&mut self, now: Timestamp, room: &str, peer: &str, via: Via) {
        // Most of a `__peers` list and every later hello name a peer admitted here: on its open
        // connection, so greeting would find nothing to do. One lookup rather than seven.
        if self.is_admitted(room, peer) {
            return;
        }
        if !self.know(room, peer) {
            return;
        }
        match self.conns.get(peer) {
            Some(c) if c.is_open() => self.greet(now, room, peer),
            Some(_) => {}
            None => {
                if we_offer(&self.did, peer) && !self.cooling(now, room, peer) {
                    self.offer_to(now, peer, via.route(room));
                }
            }
        }
    }

    /// Whether `peer` failed its proof in `room` less than [`PROOF_FAILURE_BACKOFF`] ago; counted
    /// when it did, as what it stops is then not started.
    fn cooling(&mut self, now: Timestamp, room: &str, peer: &str) -> bool {
        // A history that moved since the failure may let the peer prove now; the review that
        // follows this input ends the backoff for good.
        let moved = self
            .rooms
            .get(room)
            .is_some_and(|r| r.access().is_some_and(|a| a.view() != r.view));
        // The set is nearly always empty: no key is made for it then.
        let cooling = !moved
            && !self.failed_proofs.is_empty()
            && self
                .failed_proofs
                .contains(now, &(room.into(), peer.into()));
        self.counters.proof_backoff += u64::from(cooling);
        cooling
    }

    /// §7.3: a signal from `from` in `room`, heard `via` its relays or the mesh. The route an
    /// answering connection takes is made only when one is.
    fn on_signal(
        &mut self,
        now: Timestamp,
        from: &str,
        kind: SignalKind,
        sdp: String,
        room: &str,
        via: Via,
    ) {
        if self.admitted_anywhere(from) {
            self.counters.signal_from_admitted += 1;
            return;
        }
        match kind {
            SignalKind::Offer => {
                if self.cooling(now, room, from) {
                    return;
                }
                // The offer says the peer is in this room: greet there once the channel opens.
                self.know(room, from);
                if self.conns.has(from) {
                    self.close_conn(from);
                }
                let route = via.route(room);
                if let Some(conn) = self.new_conn(now, from, ConnState::MakingAnswer, route) {
                    self.out.push_back(Output::CreateAnswer {
                        conn,
                        peer: from.into(),
                        offer: sdp,
                    });
                }
            }
            SignalKind::Answer => match self.conns.get_mut(from) {
                Some(c) if matches!(c.state, ConnState::Offered) => {
                    c.state = ConnState::Connecting;
                    let conn = c.id;
                    self.out
                        .push_back(Output::ApplyAnswer { conn, answer: sdp });
                }
                _ => self.counters.unexpected_answer += 1,
            },
        }
    }

    fn on_local_description(&mut self, now: Timestamp, conn: ConnId, sdp: String) {
        let Some(c) = self.conns.by_id_mut(conn) else {
            self.counters.ignored_inputs += 1;
            return;
        };
        let peer = String::from(c.peer.as_str());
        let kind = match c.state {
            ConnState::MakingOffer => {
                c.state = ConnState::Offered;
                SignalKind::Offer
            }
            ConnState::MakingAnswer => {
                c.state = ConnState::Connecting;
                SignalKind::Answer
            }
            _ => {
                self.counters.ignored_inputs += 1;
                return;
            }
        };
        match c.route.clone() {
            Route::Relay(room) => self.out.push_back(Output::ToRendezvous {
                room,
                to: peer,
                kind,
                sdp,
            }),
            Route::Mesh(room) => {
                let at = self.signal_clock.next(now);
                let signal = Signal::new(
                    self.crypto,
                    &self.key,
                    &room,
                    &self.did,
                    peer,
                    kind,
                    sdp,
                    at,
                );
                if let Some(signal) = signal {
                    self.flood(&room, &signal.as_ref(), None);
                }
            }
        }
    }

    /// §8: a signal goes to every peer admitted in its room, and nowhere else.
    fn flood(&mut self, room: &str, signal: &SignalRef<'_>, except: Option<&str>) {
        let Some(r) = self.rooms.get(room) else {
            return;
        };
        // An admitted peer's connection is the one it was admitted on: no lookup per peer.
        let conns = &self.conns;
        let targets = r.peers.iter_but(except).filter_map(|(p, s)| match s {
            Stage::Admitted(a) => {
                debug_assert!(conns.get(p).is_some_and(|c| c.is_open() && c.id == a.conn));
                Some(a.conn)
            }
            _ => None,
        });
        let did = &self.did;
        send_to_open(&mut self.out, targets, || {
            signal_frame::write_ref(room, did, signal)
        });
    }

    fn on_opened(&mut self, now: Timestamp, conn: ConnId, local: String, remote: String) {
        let Some(c) = self.conns.by_id_mut(conn) else {
            self.counters.ignored_inputs += 1;
            return;
        };
        let peer = String::from(c.peer.as_str());
        c.state = ConnState::Open { local, remote };
        self.attempts.cancel(&conn);
        self.unclaimed
            .schedule(now.saturating_add(UNCLAIMED_TIMEOUT), conn);
        let rooms: Vec<String> = self
            .rooms
            .iter()
            .filter(|(_, r)| matches!(r.peers.get(&peer), Some(Stage::Known)))
            .map(|(n, _)| String::from(n))
            .collect();
        for room in rooms {
            self.greet(now, &room, &peer);
        }
    }

    fn on_closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove_id(conn) else {
            self.counters.ignored_inputs += 1;
            return;
        };
        self.attempts.cancel(&conn);
        self.unclaimed.cancel(&conn);
        self.forget_peer_stages(c.peer.as_str());
    }

    // ---- admission (§7.2) -------------------------------------------------------------------

    /// Starts a handshake for (room, peer) if there is none, and returns whether one is running.
    fn begin(&mut self, now: Timestamp, room: &str, peer: &str) -> bool {
        if !self.know(room, peer) {
            return false;
        }
        match self.rooms.get(room).and_then(|r| r.peers.get(peer)) {
            Some(Stage::Known) => {}
            Some(Stage::Handshake(_)) => return true,
            Some(Stage::Admitted(_)) | None => return false,
        }
        if self.cooling(now, room, peer) {
            return false;
        }
        let nonce = auth::nonce(&mut self.rng);
        let Some(stage) = self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer)) else {
            return false;
        };
        *stage = Stage::Handshake(Handshake::new(nonce, now));
        self.handshakes.schedule(
            now.saturating_add(HANDSHAKE_TIMEOUT),
            (room.into(), peer.into()),
        );
        if let Some(c) = self.conns.get_mut(peer) {
            c.claimed = true;
            let id = c.id;
            self.unclaimed.cancel(&id);
        }
        true
    }

    fn handshake_mut(&mut self, room: &str, peer: &str) -> Option<&mut Handshake> {
        match self.rooms.get_mut(room)?.peers.get_mut(peer)? {
            Stage::Handshake(h) => Some(h),
            _ => None,
        }
    }

    /// §7.2: sends `__auth-hello` once per handshake.
    fn greet(&mut self, now: Timestamp, room: &str, peer: &str) {
        if !self.conns.get(peer).is_some_and(Conn::is_open) || !self.begin(now, room, peer) {
            return;
        }
        // The handshake is reached through the room table alone: the nonce stays borrowed
        // while the frame is written and sent.
        let Some(Stage::Handshake(h)) =
            self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer))
        else {
            return;
        };
        if h.greeted {
            return;
        }
        h.greeted = true;
        let did = &self.did;
        let hello = payload::Hello { nonce: &h.nonce };
        send_each(&self.conns, &mut self.out, [peer], || {
            frame::write(room, AUTH_HELLO, did, &hello)
        });
    }

    /// The channel-binding fingerprints of the connection to `peer`, (local, remote), borrowed
    /// for the transcript; empty without an open connection.
    fn fingerprints(&self, peer: &str) -> (&str, &str) {
        match self.conns.get(peer).map(|c| &c.state) {
            Some(ConnState::Open { local, remote }) => (local, remote),
            _ => ("", ""),
        }
    }

    /// The handshake with `peer` in `room` ends unfinished (abandoned after 10 s, a failed
    /// proof, no read key). The peer may hold this side admitted already, having its proof: it
    /// is told, as when leaving, or it would keep a one-sided admission for as long as another
    /// room keeps the connection (§7.2).
    fn end_handshake(&mut self, room: &str, peer: &str) {
        if self.may_hold_us_admitted(room, peer) {
            self.send_frame(peer, room, LEAVE, &payload::Leave { room });
        }
        self.back_to_known(room, peer);
        self.close_if_idle(peer);
    }

    /// Whether `peer` may hold this side admitted in `room` ([`Stage::may_hold_us_admitted`]).
    fn may_hold_us_admitted(&self, room: &str, peer: &str) -> bool {
        self.rooms.get(room).is_some_and(|r| {
            r.peers
                .get(peer)
                .is_some_and(|s| s.may_hold_us_admitted(r.asks_proofs()))
        })
    }

    fn on_auth_hello(&mut self, now: Timestamp, room: &str, peer: &str, payload: &Value) {
        let Some(their_nonce) = payload.get("nonce").and_then(Value::as_str) else {
            self.counters.bad_handshake += 1;
            return;
        };
        // A peer greets only from no admission of its own here: it gave up its handshake (10 s)
        // or this side's proof failed there. This side's admission of it is then one-sided, and
        // would hold the room shut for as long as another room keeps the connection (§7.2: a
        // peer is a peer only in the rooms it proved itself in). It ends here, the connection
        // kept, and the hello starts a new handshake.
        if self.rooms.get(room).is_some_and(|r| r.is_admitted(peer)) {
            self.back_to_known(room, peer);
        }
        if !self.begin(now, room, peer) {
            // An admission ended above may have been the connection's last use.
            self.close_if_idle(peer);
            return;
        }
        self.greet(now, room, peer);
        let Some(h) = self.handshake_mut(room, peer) else {
            return;
        };
        // Only the first hello is answered with a proof (§7.2).
        if h.proof_sent {
            self.counters.bad_handshake += 1;
            return;
        }
        let Some(r) = self.rooms.get(room) else {
            return;
        };
        if !r.asks_proofs() {
            if let Some(h) = self.handshake_mut(room, peer) {
                h.proof_sent = true;
                h.verified = true;
            }
            self.admit_if_done(now, room, peer);
            return;
        }
        let (local, remote) = self.fingerprints(peer);
        let t = auth::mesh_transcript(&r.space_id, &self.did, peer, their_nonce, local, remote);
        let mut proof = match &r.kind {
            RoomKind::PrivateSpace(access) => match access.prove(&t) {
                Some(fields) => fields,
                None => {
                    // No read key: this node MUST NOT complete the handshake (§6.3).
                    self.counters.no_read_key += 1;
                    self.end_handshake(room, peer);
                    return;
                }
            },
            _ => Map::new(),
        };
        let Some(sig) = auth::sign(self.crypto, &self.key, &t) else {
            self.end_handshake(room, peer);
            return;
        };
        proof.insert("sig".into(), Value::String(sig));
        self.send_frame(peer, room, AUTH_PROOF, &proof);
        if let Some(h) = self.handshake_mut(room, peer) {
            h.proof_sent = true;
        }
        self.admit_if_done(now, room, peer);
    }

    fn on_auth_proof(&mut self, now: Timestamp, room: &str, peer: &str, payload: &Value) {
        let Some(r) = self.rooms.get(room) else {
            return;
        };
        let nonce = match r.peers.get(peer) {
            Some(Stage::Handshake(h)) if h.greeted && !h.verified && r.asks_proofs() => {
                h.nonce.as_str()
            }
            _ => {
                self.counters.bad_handshake += 1;
                return;
            }
        };
        let (local, remote) = self.fingerprints(peer);
        let t = auth::mesh_transcript(&r.space_id, peer, &self.did, nonce, remote, local);
        let admission = match payload {
            Value::Object(proof) => {
                let sig_ok = proof
                    .get("sig")
                    .and_then(Value::as_str)
                    .is_some_and(|sig| auth::verify(self.crypto, peer, &t, sig));
                match (&r.kind, sig_ok) {
                    (_, false) => None,
                    (RoomKind::PrivateSpace(access), true) => access.admit(now, peer, &t, proof),
                    (_, true) => Some(Admission::Public),
                }
            }
            _ => None,
        };
        let Some(admission) = admission else {
            self.counters.proof_failed += 1;
            let until = now.saturating_add(PROOF_FAILURE_BACKOFF);
            self.failed_proofs
                .insert(now, (room.into(), peer.into()), until);
            self.end_handshake(room, peer);
            return;
        };
        if let Some(h) = self.handshake_mut(room, peer) {
            h.verified = true;
            h.admission = Some(admission);
        }
        self.admit_if_done(now, room, peer);
    }

    /// §7.2, §8, §9.1: admit a peer whose handshake is done, send it `who`, and introduce.
    fn admit_if_done(&mut self, now: Timestamp, room: &str, peer: &str) {
        // Handshake frames come only on the peer's open connection; an admission is held to it.
        let Some(conn) = self.conns.get(peer).filter(|c| c.is_open()).map(|c| c.id) else {
            return;
        };
        let Some(r) = self.rooms.get_mut(room) else {
            return;
        };
        // A space (not a channel) sends `who` and introduces.
        let is_space = r.introduces();
        let private = r.access().is_some();
        let Some(stage) = r.peers.get_mut(peer) else {
            return;
        };
        let admission = match stage {
            Stage::Handshake(h) if h.is_done() => h.admission.take(),
            _ => return,
        };
        // The verifier remembers the key it let each reader in on (§6.3).
        let reader = admission.filter(|_| private).map(|a| Reader::new(a, now));
        *stage = Stage::Admitted(Admitted {
            conn,
            live: LiveAllowance::new(now),
            who_sent: false,
            former_member: false,
            // A channel's room sends no `who`; its peers' messages are taken at once.
            who: if is_space {
                PeerWho::Awaited
            } else {
                PeerWho::Missing
            },
            reader,
        });
        self.handshakes.cancel(&(room.into(), peer.into()));
        self.out.push_back(Output::Admitted {
            room: room.into(),
            peer: peer.into(),
        });
        if is_space {
            // Written from the room's own texts: the tables are borrowed apart, `out` alone
            // changes while they are read.
            let (did, conns, out) = (&self.did, &self.conns, &mut self.out);
            if let Some(r) = self.rooms.get(room) {
                // `who` is the first message of a space to a newly admitted peer (§6.4, §9.1).
                let who = payload::Who {
                    note: r.note.as_deref(),
                };
                send_each(conns, out, [peer], || frame::write(room, WHO, did, &who));
                let others: Vec<&str> = r.admitted_but(Some(peer)).collect();
                send_each(conns, out, [peer], || {
                    frame::write_texts(room, PEERS, did, &others)
                });
                send_each(conns, out, others.iter().copied(), || {
                    frame::write_texts(room, PEERS, did, &[peer])
                });
            }
            if let Some(Stage::Admitted(a)) =
                self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer))
            {
                a.who_sent = true;
            }
            self.who_grace
                .schedule(now.saturating_add(WHO_GRACE), (room.into(), peer.into()));
        }
        // "When a peer connects, it looks again at every peer it let in on a key that is no
        // longer current" (§6.3).
        if private {
            self.review_room(now, room);
        }
    }

    // ---- frames -----------------------------------------------------------------------------

    fn on_frame(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        // The connection's entry holds its peer: one search for both.
        let Some(c) = self.conns.by_id_mut(conn).filter(|c| c.is_open()) else {
            self.counters.stale_connection += 1;
            return;
        };
        if !self.counters.limits.frame(&mut c.bytes, now, bytes.len()) {
            return;
        }
        let peer = &c.peer;
        // Most frames are copies of a flooded signal: answered from a peek, with the peer
        // still borrowed, and the first copy read from what the peek kept.
        if let Some(p) = signal_peek::peek(bytes) {
            let (rooms, memory) = (&self.rooms, &self.introductions);
            match peeked_signal(rooms, memory, &self.did, now, peer.as_str(), &p) {
                Ok((new, signal)) => {
                    let peer = peer.clone();
                    let verdict =
                        self.introductions
                            .receive_new_ref(now, self.crypto, p.room, new, signal);
                    self.follow_signal(now, p.room, peer.as_str(), verdict);
                }
                Err(Refused::UnknownRoom) => self.counters.unknown_room += 1,
                Err(Refused::NotAdmitted) => self.counters.not_admitted += 1,
                Err(Refused::Dropped) => self.counters.signal_dropped += 1,
            }
            return;
        }
        // Copied out of the connection (inline, no allocation) so `self` can change below.
        let held = peer.clone();
        let peer = held.as_str();
        // Everything else, and a signal outside what the peek reads, through a JSON tree; a
        // peer list as weft writes it without one. Either answers as the general path would.
        let (room, kind, body) = match peers_peek::peek(bytes) {
            Some(p) => (
                Cow::Borrowed(p.room),
                Cow::Borrowed(PEERS),
                Body::Peers(p.entries),
            ),
            None => match FrameRef::parse(bytes) {
                Ok(f) => (f.room, f.kind, Body::Json(f.payload)),
                Err(_) => {
                    self.counters.bad_frames += 1;
                    return;
                }
            },
        };
        let Some(r) = self.rooms.get(room.as_ref()) else {
            self.counters.unknown_room += 1;
            return;
        };
        let admitted = r.is_admitted(peer);
        let is_space = r.introduces();
        let room = room.as_ref();
        match kind.as_ref() {
            AUTH_HELLO => self.on_auth_hello(now, room, peer, &body.into_json()),
            AUTH_PROOF => self.on_auth_proof(now, room, peer, &body.into_json()),
            _ if !admitted => self.counters.not_admitted += 1,
            PEERS => self.on_peers(now, room, &body),
            SIGNAL => {
                let signal = Signal::parse(&body.into_json());
                self.on_mesh_signal(now, room, is_space, peer, signal)
            }
            LEAVE => self.drop_peer(room, peer),
            WHO if is_space => self.on_who(now, room, peer, &body.into_json()),
            LIVE if is_space => self.on_live(now, room, peer, body.into_json()),
            _ if is_space => self.counters.unknown_type += 1,
            _ => self.out.push_back(Output::Deliver {
                room: room.into(),
                peer: peer.into(),
                kind: kind.into_owned(),
                payload: body.into_json(),
            }),
        }
    }

    /// §6.4, §9.1: the peer's `who`. Its note gives the peer an account only if valid now and
    /// made out to the peer's proven session DID; the first `who` counts.
    fn on_who(&mut self, now: Timestamp, room: &str, peer: &str, payload: &Value) {
        let note = payload.get("note").unwrap_or(&Value::Null);
        let account = account_of(self.notes.as_ref(), note, peer, now);
        let Some(Stage::Admitted(a)) = self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer))
        else {
            return;
        };
        if matches!(a.who, PeerWho::Shown(_)) {
            self.counters.who_repeated += 1;
            return;
        }
        a.who = PeerWho::Shown(account.clone());
        if let Some(reader) = a.reader.as_mut() {
            reader.who_arrived(account.clone());
        }
        self.who_grace.cancel(&(room.into(), peer.into()));
        self.out.push_back(Output::Account {
            room: room.into(),
            peer: peer.into(),
            account,
        });
        // A peer whose `who` arrives is looked at again (§6.3).
        self.review_room(now, room);
    }

    /// §6.3 "Letting a reader go": looks again at every reader of a private `room`, and lets go
    /// of each that may no longer read it.
    fn review_room(&mut self, now: Timestamp, room: &str) {
        let Some(r) = self.rooms.get_mut(room) else {
            return;
        };
        let Some(access) = r.access() else {
            return;
        };
        let view = access.view();
        let due = view.new_key_due;
        let going: Vec<(String, Option<String>)> = r
            .peers
            .iter()
            .filter_map(|(p, s)| match s {
                Stage::Admitted(Admitted {
                    reader: Some(reader),
                    ..
                }) if access.review(reader, now) == Review::LetGo => {
                    Some((String::from(p), reader.account().map(String::from)))
                }
                _ => None,
            })
            .collect();
        r.view = view;
        // What a peer could not prove may hold now (a new read key, a reader added): its
        // backoff in this room ends with the history that made it fail.
        for peer in r.peers.keys() {
            self.failed_proofs.remove(&(room.into(), peer.into()));
        }
        for (peer, account) in going {
            // While a new key is due, a former member let go is turned away when it reconnects
            // (§6.3, SHOULD).
            if let Some(RoomKind::PrivateSpace(access)) =
                self.rooms.get_mut(room).map(|r| &mut r.kind)
                && due
                && account
                    .as_deref()
                    .is_some_and(|a| access.is_former_member(a))
            {
                access.turn_away(&peer);
            }
            self.counters.readers_let_go += 1;
            self.out.push_back(Output::LetGo {
                room: room.into(),
                peer: peer.clone(),
                account,
            });
            self.let_go(room, &peer);
        }
    }

    /// Looks again at every private room whose access history moved since last looked at.
    fn watch_access(&mut self, now: Timestamp) {
        let moved: Vec<String> = self
            .rooms
            .iter()
            .filter(|(_, r)| r.access().is_some_and(|a| a.view() != r.view))
            .map(|(n, _)| String::from(n))
            .collect();
        for room in moved {
            self.review_room(now, &room);
        }
    }

    fn on_peers(&mut self, now: Timestamp, room: &str, body: &Body<'_>) {
        if !self.rooms.get(room).is_some_and(Room::introduces) {
            self.counters.ignored_inputs += 1;
            return;
        }
        // At most the first MAX_PEER_LIST entries count (§8): held in place, not on the heap.
        let listed: ArrayVec<&str, MAX_PEER_LIST> = match body {
            Body::Json(payload) => introduction::peer_list(payload, &self.did).collect(),
            Body::Peers(entries) => {
                introduction::listed(entries.iter().copied().map(Some), &self.did).collect()
            }
        };
        for p in listed {
            self.meet(now, room, p, Via::Mesh);
        }
    }

    /// §8: a `__signal` from `from`, admitted in `room`, which does or does not `introduce`.
    fn on_mesh_signal(
        &mut self,
        now: Timestamp,
        room: &str,
        introduces: bool,
        from: &str,
        signal: Result<Signal, Dropped>,
    ) {
        if !introduces {
            self.counters.signal_dropped += 1;
            return;
        }
        // Only an admitted peer's frames get here (`on_frame`).
        let verdict = match signal {
            Ok(s) => self
                .introductions
                .receive_signal(now, self.crypto, room, &self.did, s),
            Err(d) => Verdict::Drop(d),
        };
        self.follow_signal(now, room, from, verdict.as_ref());
    }

    /// Does what the introductions memory said of a `__signal` from `from` in `room` (§8).
    fn follow_signal(
        &mut self,
        now: Timestamp,
        room: &str,
        from: &str,
        verdict: Verdict<SignalRef<'_>>,
    ) {
        match verdict {
            Verdict::Act(s) => {
                // The one copy of a signal acted on: its SDP goes to the host.
                let sdp = s.sdp.into_owned();
                self.on_signal(now, s.origin, s.kind, sdp, room, Via::Mesh)
            }
            Verdict::Forward(s) => self.flood(room, &s, Some(from)),
            _ => self.counters.signal_dropped += 1,
        }
    }

    fn on_live(&mut self, now: Timestamp, room: &str, peer: &str, payload: Value) {
        let Some(r) = self.rooms.get_mut(room) else {
            return;
        };
        let former = match r.peers.get(peer) {
            Some(Stage::Admitted(a)) => r.shows_former_member(a),
            _ => return,
        };
        let Some(Stage::Admitted(a)) = r.peers.get_mut(peer) else {
            return;
        };
        if a.who == PeerWho::Awaited {
            self.counters.before_who += 1;
            return;
        }
        if former {
            self.counters.live_from_former_member += 1;
            return;
        }
        if self.counters.limits.live(&mut a.live, now, &payload) {
            self.out.push_back(Output::Deliver {
                room: room.into(),
                peer: peer.into(),
                kind: LIVE.into(),
                payload,
            });
        }
    }

    /// The peer leaves `room` (its `__leave`, or letting it go): it is no peer there; the
    /// connection closes if no room uses it (§7.2).
    fn drop_peer(&mut self, room: &str, peer: &str) {
        let Some(r) = self.rooms.get_mut(room) else {
            return;
        };
        if r.peers.remove(peer).is_some_and(|s| s.is_admitted()) {
            self.out.push_back(Output::Departed {
                room: room.into(),
                peer: peer.into(),
            });
        }
        self.handshakes.cancel(&(room.into(), peer.into()));
        self.who_grace.cancel(&(room.into(), peer.into()));
        self.close_if_idle(peer);
    }

    // ---- the application --------------------------------------------------------------------

    fn join(&mut self, config: RoomConfig) {
        if self.rooms.contains_key(&config.room) {
            self.counters.ignored_inputs += 1;
            return;
        }
        if self.rooms.len() >= MAX_ROOMS {
            self.counters.table_full += 1;
            return;
        }
        let view = match &config.kind {
            RoomKind::PrivateSpace(access) => access.view(),
            _ => AccessView::default(),
        };
        self.rooms.insert(
            config.room,
            Room {
                space_id: config.space_id,
                kind: config.kind,
                note: config.note,
                peers: TextMap::default(),
                view,
            },
        );
    }

    fn leave(&mut self, room: &str) {
        let Some(r) = self.rooms.get(room) else {
            self.counters.ignored_inputs += 1;
            return;
        };
        let peers: Vec<String> = r.peers.keys().map(String::from).collect();
        // Not only the peers admitted here: one this side sent its proof to may hold this side
        // admitted, and would keep it so while another room keeps the connection.
        let proofs = r.asks_proofs();
        let told = r
            .peers
            .iter()
            .filter(|(_, s)| s.may_hold_us_admitted(proofs))
            .map(|(p, _)| p);
        let did = &self.did;
        send_each(&self.conns, &mut self.out, told, || {
            frame::write(room, LEAVE, did, &payload::Leave { room })
        });
        for p in &peers {
            self.drop_peer(room, p);
        }
        self.rooms.remove(room);
        for p in &peers {
            self.close_if_idle(p);
        }
    }

    fn let_go(&mut self, room: &str, peer: &str) {
        if !self
            .rooms
            .get(room)
            .is_some_and(|r| r.peers.contains_key(peer))
        {
            self.counters.ignored_inputs += 1;
            return;
        }
        if self.may_hold_us_admitted(room, peer) {
            self.send_frame(peer, room, LEAVE, &payload::Leave { room });
        }
        self.drop_peer(room, peer);
    }

    fn app_send(&mut self, room: &str, to: Option<String>, kind: String, payload: Value) {
        let reserved = frame::is_reserved(&kind);
        let Some(r) = self.rooms.get(room).filter(|_| !reserved) else {
            self.counters.send_refused += 1;
            return;
        };
        let is_live = kind == LIVE;
        // In a space the mesh sends `who` itself, and a type the space does not speak would be
        // ignored by every peer (§9).
        let unspoken = r.introduces() && kind != LIVE;
        if unspoken || (is_live && !fits(&payload)) {
            self.counters.send_refused += 1;
            return;
        }
        let targets: Vec<String> = r
            .peers
            .iter()
            .filter(|(p, _)| to.as_deref().is_none_or(|t| t == *p))
            .filter_map(|(p, s)| match s {
                // Live goes only after our `who`, never to a former member (§9.1, §9.2).
                Stage::Admitted(a) if !is_live || (a.who_sent && !r.shows_former_member(a)) => {
                    Some(String::from(p))
                }
                _ => None,
            })
            .collect();
        if targets.is_empty() {
            self.counters.send_refused += 1;
            return;
        }
        self.send_to_each(targets.iter().map(String::as_str), room, &kind, &payload);
    }

    fn valid_peer(&self, peer: &str) -> bool {
        is_did(peer) && peer != self.did
    }

    /// §6.3: the 10 s a peer had from its admission to send `who` ran out. It has no account;
    /// a reader on a key no longer current is let go of.
    fn who_missing(&mut self, now: Timestamp, room: &str, peer: &str) {
        let Some(Stage::Admitted(a)) = self.rooms.get_mut(room).and_then(|r| r.peers.get_mut(peer))
        else {
            return;
        };
        if a.who != PeerWho::Awaited {
            return;
        }
        a.who = PeerWho::Missing;
        self.counters.who_missing += 1;
        self.out.push_back(Output::Account {
            room: room.into(),
            peer: peer.into(),
            account: None,
        });
        self.review_room(now, room);
    }

    fn handle_input(&mut self, now: Timestamp, input: Input) {
        match input {
            Input::Join(config) => self.join(config),
            Input::Leave { room } => self.leave(&room),
            Input::PeerInRoom { room, peer } => {
                if !self.valid_peer(&peer) || !self.rooms.contains_key(&room) {
                    self.counters.ignored_inputs += 1;
                    return;
                }
                self.meet(now, &room, &peer, Via::Relay);
            }
            Input::RelaySignal {
                room,
                from,
                kind,
                sdp,
            } => {
                if !self.valid_peer(&from) || !self.rooms.contains_key(&room) {
                    self.counters.ignored_inputs += 1;
                    return;
                }
                self.on_signal(now, &from, kind, sdp, &room, Via::Relay);
            }
            Input::LocalDescription { conn, sdp } => self.on_local_description(now, conn, sdp),
            Input::Opened {
                conn,
                local_fingerprint,
                remote_fingerprint,
            } => self.on_opened(now, conn, local_fingerprint, remote_fingerprint),
            Input::Closed { conn } => self.on_closed(conn),
            Input::Frame { conn, bytes } => self.on_frame(now, conn, &bytes),
            Input::AccessChanged { room } => {
                if self.rooms.contains_key(&room) {
                    self.review_room(now, &room);
                } else {
                    self.counters.ignored_inputs += 1;
                }
            }
            Input::LetGo { room, peer } => self.let_go(&room, &peer),
            Input::FormerMember { room, peer } => {
                match self
                    .rooms
                    .get_mut(&room)
                    .and_then(|r| r.peers.get_mut(&peer))
                {
                    Some(Stage::Admitted(a)) => a.former_member = true,
                    _ => self.counters.ignored_inputs += 1,
                }
            }
            Input::Send {
                room,
                to,
                kind,
                payload,
            } => self.app_send(&room, to, kind, payload),
        }
    }
}

impl<R: CryptoRng> Machine for Mesh<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        self.handle_input(now, input);
        self.watch_access(now);
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    // The signal memory (`introductions`) asks for no wakeup: it expires lazily.
    fn poll_timeout(&self) -> Option<Wakeup> {
        [
            self.handshakes.wakeup("handshake timeout"),
            self.who_grace.wakeup("who grace"),
            self.attempts.wakeup("connection attempt timeout"),
            self.unclaimed.wakeup("unclaimed connection"),
        ]
        .into_iter()
        .fold(None, Wakeup::earliest)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        while let Some((_, (room, peer))) = self.handshakes.pop_due(now) {
            if matches!(
                self.rooms.get(&room).and_then(|r| r.peers.get(&peer)),
                Some(Stage::Handshake(_))
            ) {
                self.counters.handshake_timeouts += 1;
                self.end_handshake(&room, &peer);
            }
        }
        while let Some((_, conn)) = self.attempts.pop_due(now) {
            if let Some(peer) = self
                .conns
                .by_id(conn)
                .filter(|c| !c.is_open())
                .map(|c| String::from(c.peer.as_str()))
            {
                self.counters.attempt_timeouts += 1;
                self.close_conn(&peer);
            }
        }
        while let Some((_, conn)) = self.unclaimed.pop_due(now) {
            if let Some(peer) = self
                .conns
                .by_id(conn)
                .map(|c| String::from(c.peer.as_str()))
                && !self.uses_connection(&peer)
            {
                self.counters.idle_closed += 1;
                self.close_conn(&peer);
            }
        }
        while let Some((_, (room, peer))) = self.who_grace.pop_due(now) {
            self.who_missing(now, &room, &peer);
        }
        self.introductions.prune(now);
        self.failed_proofs.prune(now);
        self.watch_access(now);
    }
}

/// Sends one frame to each of `peers` that has an open connection in `conns`, its bytes written
/// by `write` once, and only if some peer takes them. A function over the two tables rather than
/// a method, so that a caller may iterate a room's peers while it sends.
fn send_each<'p>(
    conns: &Conns,
    out: &mut VecDeque<Output>,
    peers: impl IntoIterator<Item = &'p str>,
    write: impl FnOnce() -> Vec<u8>,
) {
    let open = peers
        .into_iter()
        .filter_map(|p| Some(conns.get(p).filter(|c| c.is_open())?.id));
    send_to_open(out, open, write);
}

/// Sends one frame on each open connection of `open`, written by `write` once, and only if
/// there is one. Every copy shares the one buffer: a flood's ten copies are read by their
/// receivers within a few milliseconds of each other, and a copy each would be ten allocations
/// and ten cold reads of the same bytes (docs/performance.md).
fn send_to_open(
    out: &mut VecDeque<Output>,
    open: impl IntoIterator<Item = ConnId>,
    write: impl FnOnce() -> Vec<u8>,
) {
    let mut open = open.into_iter().peekable();
    if open.peek().is_none() {
        return;
    }
    let bytes = Bytes::from(write());
    for conn in open {
        out.push_back(Output::Send {
            conn,
            bytes: bytes.clone(),
        });
    }
}

/// A `__signal` frame from `peer` that [`signal_peek::peek`] read, taken as far as its
/// signature, `ours` being this node: the general path's conditions in its order (room known,
/// `peer` admitted, the room introduces, then
/// [`Introductions::check_copy`](introduction::Introductions::check_copy) before the payload's
/// shape, as both only drop), each refusal counted as there. A copy (most frames) touches only
/// what the peek read; only a signal found new is read in full. A function of the tables it
/// reads rather than a method, so that `peer` may stay borrowed from its connection's entry.
fn peeked_signal<'a>(
    rooms: &TextMap<Room>,
    memory: &Introductions,
    ours: &str,
    now: Timestamp,
    peer: &str,
    p: &signal_peek::Peek<'a>,
) -> Result<(New, SignalRef<'a>), Refused> {
    let r = rooms.get(p.room).ok_or(Refused::UnknownRoom)?;
    if !r.is_admitted(peer) {
        return Err(Refused::NotAdmitted);
    }
    if !r.introduces() {
        return Err(Refused::Dropped);
    }
    let new = memory
        .check_copy(now, p.room, ours, &p.signal)
        .map_err(|_| Refused::Dropped)?;
    let signal = p.read_signal_ref().map_err(|_| Refused::Dropped)?;
    Ok((new, signal))
}

/// A received frame's payload: a JSON tree, or a peer list [`peers_peek::peek`] read.
#[expect(
    clippy::large_enum_variant,
    reason = "a frame's body lives on the stack for one frame; boxing the list is the allocation it saves"
)]
enum Body<'a> {
    Json(Value),
    Peers(ArrayVec<&'a str, MAX_PEER_LIST>),
}

impl Body<'_> {
    /// The payload as JSON. Only a `__peers` frame is read early, and its list is taken as it
    /// is by [`Mesh::on_peers`] (written back, it would hold only the entries kept, the first
    /// 64); were another type ever read early, its payload would be written back here rather
    /// than lost.
    fn into_json(self) -> Value {
        match self {
            Body::Json(v) => v,
            Body::Peers(entries) => introduction::peer_list_payload(entries),
        }
    }
}

/// Why a peeked `__signal` frame goes no further, by the counter it is counted under.
enum Refused {
    /// The frame's room is not joined (`unknown_room`).
    UnknownRoom,
    /// The peer is not admitted there (`not_admitted`).
    NotAdmitted,
    /// §8 drops it (`signal_dropped`).
    Dropped,
}
