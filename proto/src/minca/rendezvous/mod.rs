//! Meeting in a room: the sealed rendezvous of Minca 04 Network §2, over several relays at once
//! (§3), deciding who offers by §7.3's first rule.
//!
//! One [`Rendezvous`] machine per node. It holds the node's session key (its DID is the node's
//! identity on the wire), the node's `box` (a P-256 key pair drawn at construction, written as
//! base64url of the 33-byte compressed point), and everything §2 asks a receiver to remember:
//!
//! - the times it acted on, per (room, peer), within 2 minutes, for the life of the box — leaving
//!   a room and joining it again forgets none of them (§2 rule 3; [`ReplayWindow`]);
//! - per room, each peer heard and the box of the newest message acted on from it, at most
//!   [`MAX_ROOM_PEERS`], each forgotten after [`PEER_FORGET_AFTER`] unheard;
//! - per room, when it last said hello, so a hello back goes out at most once every
//!   [`HELLO_BACK_INTERVAL`] and a due one is said once when that is up.
//!
//! A room never goes to a relay (§1.3): everything this machine publishes is under the room's
//! topic and sealed under its room key, and a description is sealed again to one peer's box.
//!
//! The machine does not track connections: it says "offer to this peer" when a hello comes from a
//! greater DID, hands received offers and answers to the mesh (§7), and seals the offers and
//! answers the mesh asks it to send. The mesh tells it only who is admitted in each room
//! ([`Input::Admitted`], [`Input::Departed`]), so that a hello from a lesser peer already proven
//! here over an open connection, with the box it had, gets no hello back: that peer would greet
//! over the connection, not offer (§7.3), and in a room of n peers every hello would otherwise
//! set off up to n − 1 hellos back, each heard by the whole room (docs/decisions.md). Which relays a room is on is the host's (§3, §4): a
//! [`Publish`](Output::Publish) names the room and either every relay it is on or one relay.
//!
//! A blob that fails any of §2's five rules is ignored and counted by [`Ignored`] reason. The
//! checks run in the rules' order except that the cheap parts of rules 2–5 come before the
//! signature and the box's point check, and a new peer in a full room is turned away before
//! either: every reason leads to the same answer (ignore), so only the counter differs.
//!
//! The machine remembers the last [`SEEN_BLOBS`] blobs it got past rule 3's check, with what that
//! check needs: the same blob again in the same room (most often the copy through a second relay)
//! is checked against the times acted on without being opened again, with the answer the full
//! path gives.

pub mod message;
mod seen;

#[cfg(test)]
mod tests;

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use core::time::Duration;

use serde_json::Value;

pub use message::{BLOB_LABEL, Kind, Message, SIG_LABEL, SIGNAL_LABEL};

use self::message::{
    MessageRef, ShapeError, open_blob_bound, open_blob_bytes, open_description, seal_description,
    seal_message,
};
pub use self::seen::SEEN_BLOBS;
use self::seen::{Seen, SeenBlobs, Then};
use crate::codec::did_key::DidKey;
use crate::codec::{base64url, js};
use crate::core::replay::Verdict;
use crate::core::{Machine, ReplayWindow, Timestamp, Wakeup};
use crate::crypto::{CryptoError, CryptoProvider, P256Public, P256Secret, generate_p256};
use crate::minca::auth;
use crate::minca::envelope::BOX_BYTES;
use crate::minca::relay_wire::MAX_BLOB_CHARS;
use crate::minca::room::Room;
use crate::minca::text_map::TextMap;

/// How far a message's `at` may be from the receiver's clock, either way, and how long the times
/// acted on are remembered (§2 rule 3: "within 2 minutes of its own clock").
pub const AT_WINDOW: Duration = Duration::from_secs(120);

/// Times acted on remembered per peer per room within [`AT_WINDOW`]; a peer that sent more is not
/// heard until some age out (§2 rule 3: "MAY stop hearing a peer that sent more than 256").
pub const MAX_ACTED_PER_PEER: usize = 256;

/// Peers a room holds (§2: "A room holds at most 64 peers"), and rooms one node is in at once;
/// past either a new peer is ignored or a join refused ([`Output::JoinRefused`]).
pub use super::room::{MAX_ROOM_PEERS, MAX_ROOMS};

/// A peer not heard from for this long is forgotten (§2: "5 minutes").
pub const PEER_FORGET_AFTER: Duration = Duration::from_secs(5 * 60);

/// A hello back is said at most once this often in a room (§2: "at most once every 10 seconds").
pub const HELLO_BACK_INTERVAL: Duration = Duration::from_secs(10);

/// A node in a room says hello again this long after it last did (§2: "SHOULD say it again every
/// 2 minutes while in the room").
pub const HELLO_EVERY: Duration = Duration::from_secs(120);

/// (room, peer) pairs whose acted-on times are remembered at once: every peer of every room, and
/// as many again for peers of rooms left and joined again within [`AT_WINDOW`] (leaving forgets
/// nothing, §2 rule 3). A new pair past it is ignored ([`Ignored::MemoryFull`]) rather than
/// forget a time still inside the window.
pub const MAX_REMEMBERED_PAIRS: usize = 2 * MAX_ROOMS * MAX_ROOM_PEERS;

/// A relay socket, named by the host (the same id in [`Input::RelayOpened`],
/// [`Input::Blob`] and [`Relays::One`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelayId(pub u64);

/// Which relays a blob goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relays {
    /// Every connected relay the room is on (§3: "a message goes to every connected relay the
    /// room is on").
    All,
    /// This relay only (a hello on a socket that just (re)opened, §2).
    One(RelayId),
}

/// An offer or an answer, the two messages that carry a description: the same kind the mesh
/// and introductions use (§7.3 treats a signal alike whichever way it came).
pub use super::mesh::introduction::SignalKind;

fn kind_of(signal: SignalKind) -> Kind {
    match signal {
        SignalKind::Offer => Kind::Offer,
        SignalKind::Answer => Kind::Answer,
    }
}

/// What the machine is told.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// Join a room: watch its topic and say hello there.
    Join(Room),
    /// Leave a room: its peers are forgotten, the times acted on are not (§2 rule 3).
    Leave(Room),
    /// A relay's socket opened or reopened: say hello in every room on it (§2).
    RelayOpened(RelayId),
    /// A blob arrived from a relay under a topic.
    Blob {
        /// The relay it came through (§3: any of them; a copy through another is a replay).
        relay: RelayId,
        /// The topic it came under.
        topic: String,
        /// The blob as the relay handed it (base64url).
        blob: String,
    },
    /// The mesh admitted `peer` in `room` over an open connection (§7.2): a hello from it there
    /// with the box it had needs no hello back.
    Admitted {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
    },
    /// `peer` is no longer admitted in `room` (it left, was let go, or its connection closed).
    Departed {
        /// The room.
        room: Room,
        /// The peer's session DID.
        peer: String,
    },
    /// The mesh asks to send an offer or an answer to a peer in a room.
    Signal {
        /// The room: for an offer, the one whose hello prompted it; for an answer, the one the
        /// offer came in.
        room: Room,
        /// The peer's session DID.
        to: String,
        /// Offer or answer.
        kind: SignalKind,
        /// The session description, sealed to the peer's box.
        description: Value,
    },
}

/// Why the mesh's [`Input::Signal`] was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotSent {
    /// This node is not in that room.
    NotInRoom,
    /// No message from that peer was acted on in that room (or it was forgotten): there is no box
    /// to seal an offer to.
    UnknownPeer,
    /// An answer, but no offer from that peer came in that room (§2: "an answer goes only to the
    /// room its offer came in, sealed to the box the offer carried").
    NoOffer,
}

/// What the machine asks of its host, in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Publish (`ttl` 0) a blob under the room's topic.
    Publish {
        /// The room, so the host knows which relays it is on.
        room: Room,
        /// The room's topic, what the relay sees.
        topic: String,
        /// Every relay the room is on, or one.
        relays: Relays,
        /// The sealed message, base64url.
        blob: String,
    },
    /// A message from a peer was acted on in a room; `peer_box` is the box of the newest message
    /// acted on from it there (for status).
    PeerHeard {
        /// The room.
        room: Room,
        /// The peer's session DID.
        did: String,
        /// Its newest box, base64url.
        peer_box: String,
    },
    /// A hello came from a DID greater than this node's: this node should start a connection
    /// (§2, §7.3) unless one is open or started, and send an offer with [`Input::Signal`].
    OfferTo {
        /// The room whose hello prompted it, the only one the offer may go to.
        room: Room,
        /// The peer's session DID.
        did: String,
    },
    /// An offer or answer opened: handed to the mesh as a signal from `from` (§2, §7.3).
    SignalReceived {
        /// The room it came in; an answer to an offer goes back only there.
        room: Room,
        /// The sender's session DID.
        from: String,
        /// Offer or answer.
        kind: SignalKind,
        /// The opened description.
        description: Value,
    },
    /// An [`Input::Signal`] could not be sent.
    SignalNotSent {
        /// The room asked for.
        room: Room,
        /// The peer asked for.
        to: String,
        /// Offer or answer.
        kind: SignalKind,
        /// Why.
        reason: NotSent,
    },
    /// An [`Input::Join`] past [`MAX_ROOMS`].
    JoinRefused {
        /// The room not joined.
        room: Room,
    },
}

/// Why a received blob was ignored, in the order §2's rules are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Ignored {
    /// Under a topic of no room this node is in.
    NotInRoom,
    /// Longer than a relay carries ([`MAX_BLOB_CHARS`]).
    TooLong,
    /// Rule 1: not base64url, or does not open under the room key, label and bound.
    DoesNotOpen,
    /// Rule 1: opened, but not a JSON object.
    NotObject,
    /// `kind`, `from`, `box`, `sig`, `to` or `sdp` of the wrong type or missing.
    BadFields,
    /// Rule 2: from this node itself.
    OwnMessage,
    /// Rule 2: `from` is not a P-256 did:key.
    BadFrom,
    /// Rule 2: `box` is not a P-256 point.
    BadBox,
    /// Rule 3: `at` is not a non-negative integer.
    BadAt,
    /// Rule 3: `at` more than 2 minutes from this node's clock.
    Stale,
    /// Rule 3: a message from that peer in that room was acted on with that `at`.
    Replay,
    /// Rule 3: the peer sent more than [`MAX_ACTED_PER_PEER`] within the window.
    PeerFlooding,
    /// Rule 3: [`MAX_REMEMBERED_PAIRS`] are remembered and this is a new one.
    MemoryFull,
    /// Rule 4: a hello with a `to` or an `sdp`.
    HelloWithSignal,
    /// Rule 5: `to` is not this node's DID.
    NotForMe,
    /// §2: a new peer in a room that holds [`MAX_ROOM_PEERS`].
    RoomFull,
    /// Rule 2: `sig` does not verify against the key `from` names.
    BadSignature,
    /// Rule 5: `sdp` does not open with this node's box under the bound, or is not JSON.
    SdpDoesNotOpen,
}

impl Ignored {
    /// Every reason, in order.
    pub const ALL: [Ignored; 18] = [
        Ignored::NotInRoom,
        Ignored::TooLong,
        Ignored::DoesNotOpen,
        Ignored::NotObject,
        Ignored::BadFields,
        Ignored::OwnMessage,
        Ignored::BadFrom,
        Ignored::BadBox,
        Ignored::BadAt,
        Ignored::Stale,
        Ignored::Replay,
        Ignored::PeerFlooding,
        Ignored::MemoryFull,
        Ignored::HelloWithSignal,
        Ignored::NotForMe,
        Ignored::RoomFull,
        Ignored::BadSignature,
        Ignored::SdpDoesNotOpen,
    ];
}

/// A peer as a room remembers it.
#[derive(Clone, Debug)]
struct Peer {
    /// The key its DID names, so that a message from a peer the room knows is not decoded from
    /// base58 again (a did:key has one spelling per key, so the DID and the key are one).
    key: P256Public,
    /// The box of the newest message acted on from it here, and that message's `at`.
    newest: (u64, P256Public),
    /// The box the newest offer acted on from it here carried, and that offer's `at`.
    offer: Option<(u64, P256Public)>,
    /// When a message from it was last acted on here.
    heard: Timestamp,
}

impl Peer {
    /// Whether `b` is a box this room acted on from the peer (the newest message's, or the
    /// newest offer's).
    fn has_box(&self, b: &P256Public) -> bool {
        self.newest.1 == *b || self.offer.is_some_and(|(_, o)| o == *b)
    }

    /// When the room forgets the peer unless it is heard again ([`PEER_FORGET_AFTER`]).
    fn forgotten_at(&self) -> Timestamp {
        self.heard.saturating_add(PEER_FORGET_AFTER)
    }
}

/// A room this node is in.
#[derive(Clone, Debug)]
struct RoomState {
    room: Room,
    key: [u8; 32],
    /// What every blob of the room is sealed with besides its key ([`message::blob_aad`]),
    /// written once at the join rather than for every blob.
    blob_aad: alloc::vec::Vec<u8>,
    /// The room as the replay window files it ([`Pair`]).
    scope: [u8; 32],
    /// At most [`MAX_ROOM_PEERS`], keyed by DID.
    peers: TextMap<Peer>,
    /// When this node last said hello to every relay of the room.
    last_hello: Timestamp,
    /// A hello back was asked for within [`HELLO_BACK_INTERVAL`] of `last_hello`.
    hello_back_due: bool,
    /// Peers the mesh has admitted here, at most [`MAX_ROOM_PEERS`] (the mesh's own bound).
    admitted: TextMap<()>,
    /// No peer is forgotten before this: at most the earliest [`Peer::forgotten_at`] of the
    /// room's peers, lowered by every hearing ([`RoomState::heard`]), so that the walk over every
    /// peer, which ran for each message passing the cheap rules, runs only when one is due.
    forget_from: Timestamp,
}

impl RoomState {
    fn new(room: Room, key: [u8; 32], topic: &str, scope: [u8; 32], now: Timestamp) -> Self {
        Self {
            room,
            key,
            blob_aad: message::blob_aad(topic),
            scope,
            peers: TextMap::default(),
            last_hello: now,
            hello_back_due: false,
            admitted: TextMap::default(),
            forget_from: Timestamp::MAX,
        }
    }

    fn forget_unheard(&mut self, now: Timestamp) {
        if now < self.forget_from {
            debug_assert!(self.peers.values().all(|p| now < p.forgotten_at()));
            return;
        }
        let mut next = Timestamp::MAX;
        self.peers.retain(|_, p| {
            let keep = now < p.forgotten_at();
            if keep {
                next = next.min(p.forgotten_at());
            }
            keep
        });
        self.forget_from = next;
    }

    /// Notes that a peer was heard at `now` (its `heard` set to it).
    fn heard(&mut self, now: Timestamp) {
        self.forget_from = self.forget_from.min(now.saturating_add(PEER_FORGET_AFTER));
    }

    fn next_hello(&self) -> Timestamp {
        let after = if self.hello_back_due {
            HELLO_BACK_INTERVAL
        } else {
            HELLO_EVERY
        };
        self.last_hello.saturating_add(after)
    }
}

/// A (peer, room) pair whose times acted on are remembered together (§2 rule 3), as fixed-size
/// bytes: the peer's P-256 point (its DID has one spelling per key) and SHA-256 of the room's
/// topic. The point comes first: a node hears few rooms, so a room first would compare equal in
/// full on nearly every lookup; points differ within a byte or two. The order is internal (the
/// window evicts by time, and is never listed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    peer: [u8; BOX_BYTES],
    room: [u8; 32],
}

/// Rule 3's answer from the window's verdict.
fn rule_3(verdict: Verdict) -> Result<(), Ignored> {
    match verdict {
        Verdict::Fresh => Ok(()),
        Verdict::Replay => Err(Ignored::Replay),
        Verdict::OutsideWindow => Err(Ignored::Stale),
        Verdict::SenderFull => Err(Ignored::PeerFlooding),
        _ => Err(Ignored::MemoryFull),
    }
}

/// The cheap part of rules 4 and 5: a hello carries no signal, an offer or answer carries one
/// for `me`.
fn rules_4_and_5_cheap(message: &MessageRef<'_>, me: &str) -> Result<(), Ignored> {
    match (message.kind, message.signal) {
        (Kind::Hello, None) if !message.half_signal => Ok(()),
        (Kind::Hello, _) => Err(Ignored::HelloWithSignal),
        (_, None) => Err(Ignored::BadFields),
        (_, Some((to, _))) if to != me => Err(Ignored::NotForMe),
        _ => Ok(()),
    }
}

/// The rendezvous machine of one node; see the [module docs](self).
pub struct Rendezvous<R> {
    crypto: &'static dyn CryptoProvider,
    rng: R,
    session: P256Secret,
    did: String,
    box_secret: P256Secret,
    /// The box's public half: what a description sealed to this node is opened with, besides the
    /// secret (kept rather than derived again at every open).
    box_public: P256Public,
    box_text: String,
    /// The last `at` this node signed: each message gets a greater one (§2 rule 3).
    last_at: u64,
    /// Rooms joined, by topic.
    rooms: TextMap<RoomState>,
    /// Times acted on per (peer, room), for the life of the box.
    acted: ReplayWindow<Pair>,
    /// Blobs lately decided on, so that a copy through another relay is not opened again.
    seen: SeenBlobs,
    out: VecDeque<Output>,
    ignored: BTreeMap<Ignored, u64>,
    /// Hellos back not said because the peer was admitted with the same box.
    hello_backs_spared: u64,
    /// What [`Machine::poll_timeout`] answers, kept after every input: the host asks after every
    /// event of the node, most of which are not this machine's.
    wakeup: Option<Wakeup>,
}

impl<R: rand_core::CryptoRng> Rendezvous<R> {
    /// A node signing with `session` (its did:key is the node's DID), with a fresh box drawn
    /// from `rng`. Fails only when `session` is not a valid P-256 secret.
    pub fn new(
        session: P256Secret,
        crypto: &'static dyn CryptoProvider,
        mut rng: R,
    ) -> Result<Self, CryptoError> {
        let public = crypto.p256_public_key(&session)?;
        let did = DidKey::P256(public.0).to_did();
        let box_secret = generate_p256(crypto, &mut rng);
        let box_public = crypto.p256_public_key(&box_secret)?;
        let box_text = base64url::encode(&box_public.0);
        Ok(Self {
            crypto,
            rng,
            session,
            did,
            box_secret,
            box_public,
            box_text,
            last_at: 0,
            rooms: TextMap::default(),
            acted: ReplayWindow::new(AT_WINDOW, MAX_ACTED_PER_PEER, MAX_REMEMBERED_PAIRS),
            seen: SeenBlobs::default(),
            out: VecDeque::new(),
            ignored: BTreeMap::new(),
            hello_backs_spared: 0,
            // No room and no time acted on: nothing to wake for.
            wakeup: None,
        })
    }

    /// This node's session DID.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// This node's box, base64url of the compressed point.
    pub fn box_key(&self) -> &str {
        &self.box_text
    }

    /// Blobs ignored for `reason` so far.
    pub fn ignored(&self, reason: Ignored) -> u64 {
        self.ignored.get(&reason).copied().unwrap_or(0)
    }

    /// Blobs ignored so far, for every reason.
    pub fn ignored_total(&self) -> u64 {
        self.ignored.values().sum()
    }

    /// Hellos back not said because the hello came from a peer admitted in the room, with the box
    /// it had ([`Input::Admitted`]).
    pub fn hello_backs_spared(&self) -> u64 {
        self.hello_backs_spared
    }

    /// Whether this node is in `room`.
    pub fn is_in(&self, room: &Room) -> bool {
        self.rooms.contains_key(&room.topic(self.crypto))
    }

    /// Peers remembered in `room` (at most [`MAX_ROOM_PEERS`]), with the box of the newest
    /// message acted on from each, in DID order.
    pub fn peers(&self, room: &Room) -> alloc::vec::Vec<(String, String)> {
        self.rooms
            .get(&room.topic(self.crypto))
            .map(|r| {
                r.peers
                    .iter()
                    .map(|(did, p)| (did.into(), base64url::encode(&p.newest.1.0)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// (room, peer) pairs whose acted-on times are remembered (at most
    /// [`MAX_REMEMBERED_PAIRS`]).
    pub fn remembered_pairs(&self) -> usize {
        self.acted.len_senders()
    }

    /// A greater `at` than any this node has signed, and at least `now`.
    fn next_at(&mut self, now: Timestamp) -> u64 {
        self.last_at = now.as_millis().max(self.last_at.saturating_add(1));
        self.last_at
    }

    fn ignore(&mut self, reason: Ignored) {
        *self.ignored.entry(reason).or_default() += 1;
    }

    /// Signs `message` (its `sig` filled in), seals it under the room key and publishes it.
    fn publish(&mut self, topic: &str, relays: Relays, mut message: Message) {
        let Some(state) = self.rooms.get(topic) else {
            return;
        };
        let signed = message.view().signed_text(topic);
        let Some(sig) = auth::sign(self.crypto, &self.session, &signed) else {
            // Unreachable: the session key was checked at construction.
            return;
        };
        message.sig = sig;
        let blob = seal_message(
            self.crypto,
            &mut self.rng,
            &state.key,
            &state.blob_aad,
            &message,
        );
        let room = state.room.clone();
        self.out.push_back(Output::Publish {
            room,
            topic: topic.into(),
            relays,
            blob,
        });
    }

    fn say_hello(&mut self, now: Timestamp, topic: &str, relays: Relays) {
        let at = self.next_at(now);
        if relays == Relays::All
            && let Some(state) = self.rooms.get_mut(topic)
        {
            state.last_hello = now;
            // A hello to every relay is what a due hello back would have said.
            state.hello_back_due = false;
        }
        let message = Message {
            kind: Kind::Hello,
            at,
            from: self.did.clone(),
            box_: self.box_text.clone(),
            signal: None,
            half_signal: false,
            sig: String::new(),
        };
        self.publish(topic, relays, message);
    }

    /// §2: "at most once every 10 seconds in that room, a hello back due sooner being said, once
    /// for all, when the 10 seconds are up".
    fn hello_back(&mut self, now: Timestamp, topic: &str) {
        let Some(state) = self.rooms.get_mut(topic) else {
            return;
        };
        if now >= state.last_hello.saturating_add(HELLO_BACK_INTERVAL) {
            self.say_hello(now, topic, Relays::All);
        } else {
            state.hello_back_due = true;
        }
    }

    fn join(&mut self, now: Timestamp, room: Room) {
        let topic = room.topic(self.crypto);
        if self.rooms.contains_key(&topic) {
            return;
        }
        if self.rooms.len() >= MAX_ROOMS {
            self.out.push_back(Output::JoinRefused { room });
            return;
        }
        let key = room.key(self.crypto);
        let scope = self.crypto.sha256(&[topic.as_bytes()]);
        self.rooms
            .insert(topic.clone(), RoomState::new(room, key, &topic, scope, now));
        self.say_hello(now, &topic, Relays::All);
    }

    fn relay_opened(&mut self, now: Timestamp, relay: RelayId) {
        let topics: alloc::vec::Vec<String> = self.rooms.keys().map(String::from).collect();
        for topic in topics {
            self.say_hello(now, &topic, Relays::One(relay));
        }
    }

    /// [`Input::Blob`] from borrowed text, for a host that holds the topic and blob in types of
    /// its own: the same rules, without copying either into a `String` first. The relay is not
    /// asked for: a copy through another relay is a replay by its `at` (§3).
    pub fn receive_blob(&mut self, now: Timestamp, topic: &str, blob: &str) {
        self.receive(now, topic, blob, None);
        self.settle();
    }

    /// [`receive_blob`](Self::receive_blob) of a blob its host has decoded already, checking it
    /// (the relay client checks every blob of a `mail` by decoding it): `bytes` must be what
    /// base64url `blob` decodes to. The blob is opened from them; the text still names it in the
    /// memory of blobs decided on ([`SEEN_BLOBS`]), where a copy is answered without opening.
    pub fn receive_decoded(&mut self, now: Timestamp, topic: &str, blob: &str, bytes: &[u8]) {
        self.receive(now, topic, blob, Some(bytes));
        self.settle();
    }

    /// What ends every input: the wakeup kept for [`Machine::poll_timeout`].
    fn settle(&mut self) {
        self.wakeup = self.next_wakeup();
    }

    /// The earliest hello due in a room and the replay memory's next expiry, as the state stands.
    fn next_wakeup(&self) -> Option<Wakeup> {
        let hello = self
            .rooms
            .values()
            .map(|r| {
                let reason = if r.hello_back_due {
                    "rendezvous hello back"
                } else {
                    "rendezvous hello"
                };
                Wakeup::new(r.next_hello(), reason)
            })
            .fold(None, |a, b| Wakeup::earliest(a, Some(b)));
        let memory = self
            .acted
            .next_expiry()
            .map(|at| Wakeup::new(at, "rendezvous replay memory"));
        Wakeup::earliest(hello, memory)
    }

    /// §2's five rules, then what the receiver does; `bytes` is `blob` decoded, when the host has
    /// decoded it.
    fn receive(&mut self, now: Timestamp, topic: &str, blob: &str, bytes: Option<&[u8]>) {
        if let Err(reason) = self.try_receive(now, topic, blob, bytes) {
            self.ignore(reason);
        }
    }

    fn try_receive(
        &mut self,
        now: Timestamp,
        topic: &str,
        blob: &str,
        bytes: Option<&[u8]>,
    ) -> Result<(), Ignored> {
        let state = self.rooms.get_mut(topic).ok_or(Ignored::NotInRoom)?;
        if blob.len() > MAX_BLOB_CHARS {
            return Err(Ignored::TooLong);
        }
        // The same text again: everything up to rule 3 would come out as it did (see `seen`).
        if let Some(seen) = self.seen.get(&state.scope, blob) {
            let pair = Pair {
                peer: seen.peer,
                room: state.scope,
            };
            let (then, at) = (seen.then, Timestamp::from_millis(seen.at));
            // A blob acted on had its time taken: the window answers for it without a lookup.
            rule_3(match then {
                Then::Acted => self.acted.check_accepted(now, &pair, at),
                Then::Ignored(_) => self.acted.check(now, &pair, at),
            })?;
            if let Then::Ignored(reason) = then {
                return Err(reason);
            }
            // Not reached for a blob acted on (the window never calls its time fresh again); an
            // ignored one whose time is fresh goes the full way.
        }
        // Rule 1.
        let (key, aad) = (&state.key, &state.blob_aad);
        let plaintext = match bytes {
            Some(bytes) => open_blob_bytes(self.crypto, key, aad, bytes),
            None => open_blob_bound(self.crypto, key, aad, blob),
        }
        .ok_or(Ignored::DoesNotOpen)?;
        // Nearly every message is read in place; only another spelling is copied out.
        let parsed;
        let message = match MessageRef::as_written(&plaintext) {
            Some(m) => m,
            None => {
                parsed = Message::parse_general(&plaintext).map_err(|e| match e {
                    ShapeError::NotObject => Ignored::NotObject,
                    ShapeError::Fields => Ignored::BadFields,
                    ShapeError::At => Ignored::BadAt,
                })?;
                parsed.view()
            }
        };
        // Rule 2, the cheap part.
        if message.from == self.did {
            return Err(Ignored::OwnMessage);
        }
        let known = state.peers.get(message.from);
        let from_key = match known {
            Some(peer) => peer.key,
            None => match DidKey::parse(message.from) {
                Ok(DidKey::P256(point)) => P256Public(point),
                _ => return Err(Ignored::BadFrom),
            },
        };
        let box_bytes =
            base64url::decode_array::<BOX_BYTES>(message.box_).map_err(|_| Ignored::BadBox)?;
        let sender_box = P256Public(box_bytes);
        // A box this room acted on from the peer was checked to be a point then.
        let box_checked = known.is_some_and(|peer| peer.has_box(&sender_box));
        // Rule 3.
        let pair = Pair {
            peer: from_key.0,
            room: state.scope,
        };
        rule_3(
            self.acted
                .check(now, &pair, Timestamp::from_millis(message.at)),
        )?;
        let seen = |then| Seen {
            peer: from_key.0,
            at: message.at,
            then,
        };
        // Rules 4 and 5, the cheap part.
        if let Err(reason) = rules_4_and_5_cheap(&message, &self.did) {
            self.seen
                .remember(&state.scope, blob, seen(Then::Ignored(reason)));
            return Err(reason);
        }
        // §2: "a hello or signal from a new peer in a full room MUST be ignored".
        state.forget_unheard(now);
        if state.peers.len() >= MAX_ROOM_PEERS && !state.peers.contains_key(message.from) {
            return Err(Ignored::RoomFull);
        }
        // Rule 2, the costly part.
        if !auth::verify_by(
            self.crypto,
            &from_key,
            &message.signed_text(topic),
            message.sig,
        ) {
            return Err(Ignored::BadSignature);
        }
        if !box_checked && !self.crypto.p256_is_point(&sender_box) {
            return Err(Ignored::BadBox);
        }
        // Rule 5, the costly part.
        let signal = match (message.signal, message.kind) {
            (Some((to, sdp)), Kind::Offer | Kind::Answer) => {
                let aad = message::signal_aad(topic, message.from, to, message.box_);
                let description =
                    open_description(self.crypto, &self.box_secret, &self.box_public, &aad, sdp)
                        .ok_or(Ignored::SdpDoesNotOpen)?;
                let kind = if message.kind == Kind::Offer {
                    SignalKind::Offer
                } else {
                    SignalKind::Answer
                };
                Some((kind, description))
            }
            _ => None,
        };
        match self
            .acted
            .accept(now, pair, Timestamp::from_millis(message.at))
        {
            Verdict::Fresh => {}
            // check() said Fresh at the same `now`; kept total all the same.
            _ => return Err(Ignored::MemoryFull),
        }
        self.seen.remember(&state.scope, blob, seen(Then::Acted));
        self.act(now, topic, message, from_key, sender_box, signal);
        Ok(())
    }

    /// What a receiver does with a message that passed the five rules (§2).
    fn act(
        &mut self,
        now: Timestamp,
        topic: &str,
        message: MessageRef<'_>,
        from_key: P256Public,
        sender_box: P256Public,
        signal: Option<(SignalKind, Value)>,
    ) {
        let Some(state) = self.rooms.get_mut(topic) else {
            return;
        };
        let at = message.at;
        // A restarted peer says hello with a new box while this side may still hold its old
        // connection: that hello is answered as if from a stranger.
        // The peer is heard now, whether it is new or known.
        state.heard(now);
        let (peer, heard_first) = state.peers.get_or_insert_with(message.from, || Peer {
            key: from_key,
            newest: (at, sender_box),
            offer: None,
            heard: now,
        });
        let known_box = !heard_first && peer.newest.1 == sender_box;
        let spare_hello_back = known_box && state.admitted.contains_key(message.from);
        peer.heard = now;
        // An older message, replayed after a newer one, doesn't change the box.
        if at > peer.newest.0 {
            peer.newest = (at, sender_box);
        }
        if signal
            .as_ref()
            .is_some_and(|(k, _)| *k == SignalKind::Offer)
            && peer.offer.is_none_or(|(offer_at, _)| at > offer_at)
        {
            peer.offer = Some((at, sender_box));
        }
        // Cloned per output: a hello answered with a hello back (or none) needs only the first.
        let room = &state.room;
        // The box decoder is strict (one accepted spelling per point), so the text the box came
        // in is its encoding.
        let peer_box = if peer.newest.1 == sender_box {
            message.box_.into()
        } else {
            base64url::encode(&peer.newest.1.0)
        };
        self.out.push_back(Output::PeerHeard {
            room: room.clone(),
            did: message.from.into(),
            peer_box,
        });
        match signal {
            Some((kind, description)) => self.out.push_back(Output::SignalReceived {
                room: room.clone(),
                from: message.from.into(),
                kind,
                description,
            }),
            None if js::cmp(message.from, &self.did).is_gt() => {
                self.out.push_back(Output::OfferTo {
                    room: room.clone(),
                    did: message.from.into(),
                });
            }
            None if spare_hello_back => self.hello_backs_spared += 1,
            None => self.hello_back(now, topic),
        }
    }

    /// `room`'s topic and state, if joined. Found by the room rather than by its topic: the mesh
    /// reports every admission and sends every signal by room, and a topic is a SHA-256 and a new
    /// string. A topic is a function of its room, so this finds the state the topic would.
    fn joined(&mut self, room: &Room) -> Option<(&str, &mut RoomState)> {
        self.rooms.iter_mut().find(|(_, state)| state.room == *room)
    }

    /// Remembers whether the mesh has `peer` admitted in `room` (bounded like the room).
    fn set_admitted(&mut self, room: &Room, peer: String, admitted: bool) {
        let Some((_, state)) = self.joined(room) else {
            return;
        };
        if !admitted {
            state.admitted.remove(&peer);
        } else if state.admitted.len() < MAX_ROOM_PEERS {
            state.admitted.insert(peer, ());
        }
    }

    fn send_signal(
        &mut self,
        now: Timestamp,
        room: Room,
        to: String,
        kind: SignalKind,
        description: Value,
    ) {
        let recipient = match self.joined(&room) {
            None => Err(NotSent::NotInRoom),
            Some((topic, state)) => {
                state.forget_unheard(now);
                match (state.peers.get(&to), kind) {
                    (None, _) => Err(NotSent::UnknownPeer),
                    (Some(p), SignalKind::Offer) => Ok((String::from(topic), p.newest.1)),
                    (Some(p), SignalKind::Answer) => p
                        .offer
                        .map(|(_, b)| (String::from(topic), b))
                        .ok_or(NotSent::NoOffer),
                }
            }
        };
        let (topic, recipient) = match recipient {
            Ok(r) => r,
            Err(reason) => {
                self.out.push_back(Output::SignalNotSent {
                    room,
                    to,
                    kind,
                    reason,
                });
                return;
            }
        };
        let aad = message::signal_aad(&topic, &self.did, &to, &self.box_text);
        let Some(sdp) =
            seal_description(self.crypto, &mut self.rng, &recipient, &aad, &description)
        else {
            // Unreachable: every box kept passed the point check of rule 2.
            return;
        };
        let at = self.next_at(now);
        let message = Message {
            kind: kind_of(kind),
            at,
            from: self.did.clone(),
            box_: self.box_text.clone(),
            signal: Some((to, sdp)),
            half_signal: false,
            sig: String::new(),
        };
        self.publish(&topic, Relays::All, message);
    }
}

impl<R: rand_core::CryptoRng> Machine for Rendezvous<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        match input {
            Input::Join(room) => self.join(now, room),
            Input::Leave(room) => {
                self.rooms.remove(&room.topic(self.crypto));
            }
            Input::RelayOpened(relay) => self.relay_opened(now, relay),
            Input::Blob { topic, blob, .. } => self.receive(now, &topic, &blob, None),
            Input::Admitted { room, peer } => self.set_admitted(&room, peer, true),
            Input::Departed { room, peer } => self.set_admitted(&room, peer, false),
            Input::Signal {
                room,
                to,
                kind,
                description,
            } => self.send_signal(now, room, to, kind, description),
        }
        self.settle();
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        debug_assert_eq!(self.wakeup, self.next_wakeup());
        self.wakeup
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        let due: alloc::vec::Vec<String> = self
            .rooms
            .iter_mut()
            .filter_map(|(topic, r)| {
                r.forget_unheard(now);
                (now >= r.next_hello()).then(|| String::from(topic))
            })
            .collect();
        for topic in due {
            self.say_hello(now, &topic, Relays::All);
        }
        self.acted.prune(now);
        self.settle();
    }
}
