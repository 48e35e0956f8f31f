//! The Minca relay server as one sans-IO machine holding every socket (Minca 04 Network §1.1,
//! §1.4, and the relay's MUSTs in §11).
//!
//! The host (a driver) asks [`RelayServer::admit`] before it upgrades a request, answers a
//! [`Refusal`] with a plain HTTP response (`Connection: close`), and otherwise hands the machine
//! the socket ([`Input::Opened`]), its frames and its close, stamped with the time. The machine
//! answers with text to send, WebSocket pings, and closes ([`Output`]).
//!
//! Implemented here:
//!
//! - §1.1 publish and watch (`drop` with `ttl: 0` goes to the topic's other watchers now and is
//!   kept by nobody) and drop and fetch (a positive `ttl` keeps the blob until then);
//! - §1.4 messages: `fetch` with `after` and `watch`, paged with at least
//!   [`MIN_ITEMS_WITH_MORE`] blobs when `more`; `drop`; `ping` → `pong`; `ice`; topics of
//!   exactly 43 base64url characters and blobs of at most 12 000, anything else ignored and
//!   counted; binary frames counted and ignored;
//! - §1.4 kept blobs: `seq` increasing with every blob kept, at most [`MAX_TOPIC_BLOBS`] a topic
//!   (a drop past it buries the oldest), nothing served past its time;
//! - §1.4 limits (table lost; values in this module's constants and `docs/decisions.md`): a rate
//!   budget per socket counting every message, sockets per client address and in all (an
//!   always-on node's `/peer` sockets included, [`Input::OpenedElsewhere`]), watchers per topic
//!   (so a publish reaches at most 63 others), topics and bytes held in all and by one client
//!   address (a share, [`ADDRESS_SHARE`], so one address cannot fill the relay for every other),
//!   the longest ttl, and a heartbeat that closes sockets silent through two heartbeats;
//! - §1.4 TURN passwords through [`super::turn`]: unprompted on a socket's first watch, and on
//!   each `ice` from a socket that watches a topic; never without TURN.
//!
//! A socket never says who it is: the machine knows it only by [`ConnId`] and the client address
//! the host determined.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::IpAddr;

use rand_core::CryptoRng;

use super::relay_wire::{
    Blob, ClientFrame, ClientMessage, HEARTBEAT_MS, MAX_TOPIC_BLOBS, MIN_ITEMS_WITH_MORE, Mail,
    MailItem, RelayMessage, Topic, Ttl,
};
use super::turn::{TurnConfig, TurnIssuer};
use crate::core::{BucketConfig, ConnId, Machine, Timestamp, TokenBucket, Wakeup};
use crate::crypto::CryptoProvider;

/// The rate budget of one socket: every message it sends (text, binary, malformed, a ping or pong)
/// takes a token; a burst of 60, refilled at 30 a second. Clients pace themselves at 20 a second
/// in bursts of 40 (§2.1), so a well-behaved client never meets it.
pub const RATE_BUDGET: BucketConfig = BucketConfig::new(60, 30);

/// Sockets the relay holds in all; past it an upgrade is refused with
/// [`Refusal::RelayFull`].
pub const MAX_SOCKETS: usize = 10_000;

/// Sockets one client address holds at once (an IPv6 /64 counts as one address, since a host
/// gets a whole /64); past it an upgrade is refused with [`Refusal::AddressFull`].
pub const MAX_SOCKETS_PER_ADDRESS: usize = 32;

/// Sockets watching one topic. A room holds at most 64 peers (§2), and this bound is what makes
/// "a published blob goes to at most 63 other watchers" (§1.4) hold: a watch past it is refused
/// (the fetch is still answered).
pub const MAX_WATCHERS_PER_TOPIC: usize = super::room::MAX_ROOM_PEERS;

/// Topics one socket watches at once; a watch past it is refused (the fetch is still answered).
pub const MAX_WATCHES_PER_SOCKET: usize = 256;

/// Topics the relay holds (with a kept blob or a watcher) in all; a watch or a kept drop that
/// would open a new topic past it is refused (a `ttl: 0` publish still goes to watchers).
pub const MAX_TOPICS: usize = 100_000;

/// Blob characters (bytes: blobs are ASCII) the relay keeps in all; a drop that would pass it
/// is not kept (it still goes to watchers). With
/// [`MAX_BLOB_CHARS`](super::relay_wire::MAX_BLOB_CHARS) that is at least 5 592
/// full-size blobs.
pub const MAX_HELD_BYTES: usize = 64 * 1024 * 1024;

/// How many shares of [`MAX_HELD_BYTES`] and [`MAX_TOPICS`] there are: one client address (an
/// IPv4 address or an IPv6 /64, as for sockets) holds at most one share of each, so an address
/// that fills its share leaves the other fifteen for everyone else. A refused drop is not kept
/// (it still goes to watchers, without a `seq`) and a refused watch is not made (its fetch is
/// answered), as at the global bounds; counted in [`Stats::share_refused`].
pub const ADDRESS_SHARE: usize = 16;

/// Blob bytes kept for drops from one client address: [`MAX_HELD_BYTES`] / [`ADDRESS_SHARE`]
/// (4 MiB, about 350 full-size blobs, 5 full topics).
pub const MAX_HELD_BYTES_PER_ADDRESS: usize = MAX_HELD_BYTES / ADDRESS_SHARE;

/// Topics one client address has opened (by the watch or kept drop that made the topic) and that
/// the relay still holds: [`MAX_TOPICS`] / [`ADDRESS_SHARE`] (6 250).
pub const MAX_TOPICS_PER_ADDRESS: usize = MAX_TOPICS / ADDRESS_SHARE;

/// The longest a relay keeps a blob, in milliseconds; a longer `ttl` is cut to it (07 §5 lets a
/// relay cap it). 14 days, the same horizon as a Nostr relay's default expiration (§1.5).
pub const MAX_TTL_MS: u64 = super::nostr_kind::DEFAULT_DROP_TTL_SECS * 1000;

/// Blobs on one `mail` page. At least [`MIN_ITEMS_WITH_MORE`] (§1.4); 16 keeps a page of
/// full-size blobs under 200 kB and reads a full topic in 4 pages.
pub const PAGE_BLOBS: usize = 16;

const _: () = assert!(PAGE_BLOBS >= MIN_ITEMS_WITH_MORE);

/// The largest WebSocket message a driver reads from a client before closing the socket
/// (WebSocket close 1009): above the largest well-formed frame, so that every frame the wire
/// refuses as too large still reaches the machine and is counted.
pub const MAX_WS_MESSAGE_BYTES: usize = 64 * 1024;

/// WebSocket close code for a socket that spent its rate budget: policy violation.
pub const CLOSE_RATE: u16 = 1008;

/// WebSocket close code for a socket silent through two heartbeats: going away.
pub const CLOSE_SILENT: u16 = 1001;

/// WebSocket close code for a socket opened past a cap it passed at [`RelayServer::admit`]
/// (another upgrade finished first): try again later.
pub const CLOSE_FULL: u16 = 1013;

/// Why the relay refuses an upgrade before opening a socket (§1.4: "a plain HTTP response and
/// `Connection: close`"; the refusal table was lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The client address holds [`MAX_SOCKETS_PER_ADDRESS`] sockets.
    AddressFull,
    /// The relay holds [`MAX_SOCKETS`] sockets.
    RelayFull,
}

impl Refusal {
    /// The HTTP status the host answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::AddressFull => 429,
            Self::RelayFull => 503,
        }
    }

    /// The text body the host sends.
    pub fn reason(self) -> &'static str {
        match self {
            Self::AddressFull => "too many sockets from this address",
            Self::RelayFull => "relay full",
        }
    }
}

/// What the relay is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The host upgraded a socket for a client at `addr` (the TCP peer, or what a trusted proxy
    /// reported).
    Opened {
        /// The socket.
        conn: ConnId,
        /// The client address.
        addr: IpAddr,
    },
    /// The host upgraded, on the relay's port, a socket it serves elsewhere (an always-on node's
    /// `/peer`, §5.3), after [`RelayServer::admit`] let it in: not the relay's socket (its frames
    /// never come here), but counted in [`MAX_SOCKETS_PER_ADDRESS`] and [`MAX_SOCKETS`] until its
    /// [`Input::Closed`], so a client cannot pass the caps by asking for another path. Opened past
    /// a cap anyway, it is closed like [`Input::Opened`]'s socket.
    OpenedElsewhere {
        /// The socket.
        conn: ConnId,
        /// The client address.
        addr: IpAddr,
    },
    /// A text frame.
    Text {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// A binary frame: counted against the budget and otherwise ignored (§1.4).
    Binary {
        /// The socket.
        conn: ConnId,
    },
    /// A WebSocket ping or pong (the answer to [`Output::Ping`]): proof of life, and a message
    /// like any other for the budget.
    Control {
        /// The socket.
        conn: ConnId,
    },
    /// The socket closed, from either side.
    Closed {
        /// The socket.
        conn: ConnId,
    },
}

/// What the relay asks its host to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// Send a text frame. A `mail` pushed to a topic's watchers is one text every socket's
    /// output shares.
    Send {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: Arc<str>,
    },
    /// Send a WebSocket ping to a socket that has been silent a heartbeat.
    Ping {
        /// The socket.
        conn: ConnId,
    },
    /// Close the socket with a WebSocket close code and reason. The relay has already forgotten
    /// it: later frames on it are ignored.
    Close {
        /// The socket.
        conn: ConnId,
        /// The close code.
        code: u16,
        /// The close reason.
        reason: &'static str,
    },
}

/// What the relay has counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Upgrades refused by [`RelayServer::admit`].
    pub refused: u64,
    /// Sockets opened.
    pub opened: u64,
    /// Sockets closed for spending their rate budget.
    pub closed_rate: u64,
    /// Sockets closed for silence.
    pub closed_silent: u64,
    /// Sockets closed at open because a cap filled after admission.
    pub closed_full: u64,
    /// Binary frames ignored.
    pub binary: u64,
    /// Text frames ignored as not a well-formed message (not a typed JSON object, a bad topic or
    /// blob, …).
    pub malformed: u64,
    /// Frames on a socket the relay does not hold.
    pub unknown_socket: u64,
    /// Blobs kept.
    pub kept: u64,
    /// Blobs handed to watchers.
    pub delivered: u64,
    /// Kept blobs buried by a newer drop past [`MAX_TOPIC_BLOBS`].
    pub buried: u64,
    /// Drops not kept because [`MAX_TOPICS`] or [`MAX_HELD_BYTES`] was reached.
    pub not_kept_full: u64,
    /// Drops not kept and watches refused because the client address holds its share,
    /// [`MAX_HELD_BYTES_PER_ADDRESS`] or [`MAX_TOPICS_PER_ADDRESS`].
    pub share_refused: u64,
    /// Watches refused by [`MAX_WATCHERS_PER_TOPIC`], [`MAX_WATCHES_PER_SOCKET`],
    /// [`MAX_TOPICS`] or [`MAX_TOPICS_PER_ADDRESS`].
    pub watch_refused: u64,
    /// `ice` messages left unanswered (no TURN, or the socket watches nothing).
    pub ice_unanswered: u64,
}

/// The relay's configuration.
#[derive(Clone, Debug, Default)]
pub struct RelayConfig {
    /// TURN passwords to hand out, if any.
    pub turn: Option<TurnConfig>,
}

/// Turns a client address into the key its sockets, kept bytes and topics are counted under: an
/// IPv4 address (an IPv4-mapped IPv6 one included), or an IPv6 /64. A host counting anything
/// else per client address (pending request heads) uses the same key.
pub fn address_key(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::V6(o.into())
        }
        v4 => v4,
    }
}

/// Which bound refused a watch or a kept drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    /// One of the relay's own ([`MAX_TOPICS`], [`MAX_HELD_BYTES`], a topic's or a socket's).
    Relay,
    /// The client address's share ([`MAX_TOPICS_PER_ADDRESS`], [`MAX_HELD_BYTES_PER_ADDRESS`]).
    Share,
}

#[derive(Debug)]
struct Socket {
    addr: IpAddr,
    budget: TokenBucket,
    watching: BTreeSet<Topic>,
    /// Whether the socket has ever watched a topic (TURN goes out unprompted on the first).
    watched_once: bool,
    last_heard: Timestamp,
}

#[derive(Debug)]
struct Kept {
    seq: u64,
    blob: Blob,
    expires: Timestamp,
    /// The address key of the socket that dropped it, whose share its bytes take.
    owner: IpAddr,
}

#[derive(Debug)]
struct TopicState {
    /// Oldest first, so `seq` increases along it.
    kept: VecDeque<Kept>,
    /// In the order they started watching.
    watchers: Vec<ConnId>,
    /// The address key of the socket whose watch or drop opened the topic, whose share it takes
    /// until the topic is released.
    opener: IpAddr,
}

impl TopicState {
    fn new(opener: IpAddr) -> Self {
        Self {
            kept: VecDeque::new(),
            watchers: Vec::new(),
            opener,
        }
    }
}

/// What one client address holds of the relay's kept bytes and topics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    held_bytes: usize,
    topics: usize,
}

/// The relay; see the [module docs](self).
pub struct RelayServer<R> {
    crypto: &'static dyn CryptoProvider,
    rng: R,
    turn: Option<TurnIssuer>,
    sockets: BTreeMap<ConnId, Socket>,
    /// Sockets on the relay's port served elsewhere ([`Input::OpenedElsewhere`]), by address.
    elsewhere: BTreeMap<ConnId, IpAddr>,
    /// Sockets by address key, those served elsewhere included.
    per_address: BTreeMap<IpAddr, usize>,
    /// Kept bytes and opened topics by address key; an address holding neither has no entry.
    usage: BTreeMap<IpAddr, Usage>,
    topics: BTreeMap<Topic, TopicState>,
    /// Every kept blob by (expiry, seq), so the expired ones leave from the front.
    expiries: BTreeSet<(Timestamp, u64, Topic)>,
    held_bytes: usize,
    next_seq: u64,
    next_heartbeat: Option<Timestamp>,
    out: VecDeque<Output>,
    stats: Stats,
}

impl<R> core::fmt::Debug for RelayServer<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RelayServer")
            .field("sockets", &self.sockets.len())
            .field("topics", &self.topics.len())
            .field("held_bytes", &self.held_bytes)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> RelayServer<R> {
    /// A relay with `config`, computing TURN passwords with `crypto` and drawing their random
    /// part from `rng`.
    pub fn new(config: RelayConfig, crypto: &'static dyn CryptoProvider, rng: R) -> Self {
        Self {
            crypto,
            rng,
            turn: config.turn.map(TurnIssuer::new),
            sockets: BTreeMap::new(),
            elsewhere: BTreeMap::new(),
            per_address: BTreeMap::new(),
            usage: BTreeMap::new(),
            topics: BTreeMap::new(),
            expiries: BTreeSet::new(),
            held_bytes: 0,
            next_seq: 1,
            next_heartbeat: None,
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// What the relay has counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sockets held.
    pub fn sockets(&self) -> usize {
        self.sockets.len()
    }

    /// Topics held (with a kept blob or a watcher).
    pub fn topics(&self) -> usize {
        self.topics.len()
    }

    /// Blobs kept, expired ones not yet swept included.
    pub fn kept_blobs(&self) -> usize {
        self.expiries.len()
    }

    /// Blob bytes kept.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// The most sockets any one client address holds.
    pub fn max_sockets_per_address(&self) -> usize {
        self.per_address.values().copied().max().unwrap_or(0)
    }

    /// The kept blob bytes dropped from `addr`'s address key, and the topics it opened that the
    /// relay still holds.
    pub fn held_by(&self, addr: IpAddr) -> (usize, usize) {
        let usage = self
            .usage
            .get(&address_key(addr))
            .copied()
            .unwrap_or_default();
        (usage.held_bytes, usage.topics)
    }

    /// The most watchers any one topic has, and the most blobs any one topic keeps.
    pub fn max_per_topic(&self) -> (usize, usize) {
        self.topics.values().fold((0, 0), |(w, k), t| {
            (w.max(t.watchers.len()), k.max(t.kept.len()))
        })
    }

    /// Whether a client at `addr` may open a socket now (asked before the upgrade). A refusal
    /// is counted; the host answers it with [`Refusal::http_status`] and `Connection: close`.
    pub fn admit(&mut self, _now: Timestamp, addr: IpAddr) -> Result<(), Refusal> {
        let refusal = self.cap_reached(addr);
        if refusal.is_some() {
            self.stats.refused += 1;
        }
        refusal.map_or(Ok(()), Err)
    }

    fn cap_reached(&self, addr: IpAddr) -> Option<Refusal> {
        if self.sockets.len() + self.elsewhere.len() >= MAX_SOCKETS {
            return Some(Refusal::RelayFull);
        }
        let from_address = self.per_address.get(&address_key(addr)).copied();
        (from_address.unwrap_or(0) >= MAX_SOCKETS_PER_ADDRESS).then_some(Refusal::AddressFull)
    }

    /// Counts a socket opening at `addr` in the socket caps; `false` (and the socket closed)
    /// when its id is held already or a cap is reached.
    fn count_in(&mut self, conn: ConnId, addr: IpAddr) -> bool {
        if self.sockets.contains_key(&conn) || self.elsewhere.contains_key(&conn) {
            // A host bug: ids are never reused while held. The first socket stays.
            self.stats.unknown_socket += 1;
            return false;
        }
        if self.cap_reached(addr).is_some() {
            self.stats.closed_full += 1;
            self.out.push_back(Output::Close {
                conn,
                code: CLOSE_FULL,
                reason: "relay full",
            });
            return false;
        }
        *self.per_address.entry(address_key(addr)).or_insert(0) += 1;
        true
    }

    /// Takes a socket at `addr` out of the per-address count.
    fn count_out(&mut self, addr: IpAddr) {
        let key = address_key(addr);
        if let Some(n) = self.per_address.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&key);
            }
        }
    }

    fn open_elsewhere(&mut self, conn: ConnId, addr: IpAddr) {
        if self.count_in(conn, addr) {
            self.elsewhere.insert(conn, addr);
        }
    }

    fn open(&mut self, now: Timestamp, conn: ConnId, addr: IpAddr) {
        if !self.count_in(conn, addr) {
            return;
        }
        self.stats.opened += 1;
        self.sockets.insert(
            conn,
            Socket {
                addr,
                budget: RATE_BUDGET.bucket(now),
                watching: BTreeSet::new(),
                watched_once: false,
                last_heard: now,
            },
        );
        if self.next_heartbeat.is_none() {
            self.next_heartbeat = Some(now + core::time::Duration::from_millis(HEARTBEAT_MS));
        }
    }

    /// Forgets a socket: its watches, its address count. Kept blobs stay (they are the topic's).
    fn forget(&mut self, conn: ConnId) {
        if let Some(addr) = self.elsewhere.remove(&conn) {
            return self.count_out(addr);
        }
        let Some(socket) = self.sockets.remove(&conn) else {
            return;
        };
        self.count_out(socket.addr);
        for topic in socket.watching {
            if let Some(state) = self.topics.get_mut(&topic) {
                state.watchers.retain(|&c| c != conn);
            }
            self.release_if_empty(&topic);
        }
        if self.sockets.is_empty() {
            self.next_heartbeat = None;
        }
    }

    fn close(&mut self, conn: ConnId, code: u16, reason: &'static str) {
        self.forget(conn);
        self.out.push_back(Output::Close { conn, code, reason });
    }

    fn release_if_empty(&mut self, topic: &Topic) {
        if self
            .topics
            .get(topic)
            .is_some_and(|t| t.kept.is_empty() && t.watchers.is_empty())
            && let Some(state) = self.topics.remove(topic)
        {
            self.add_usage(state.opener, 0, -1);
        }
    }

    /// Moves `owner`'s usage by `bytes` and `topics` (either may be negative); an address left
    /// with neither loses its entry, so the table holds only addresses holding something.
    fn add_usage(&mut self, owner: IpAddr, bytes: isize, topics: isize) {
        let usage = self.usage.entry(owner).or_default();
        usage.held_bytes = usage.held_bytes.saturating_add_signed(bytes);
        usage.topics = usage.topics.saturating_add_signed(topics);
        if *usage == Usage::default() {
            self.usage.remove(&owner);
        }
    }

    /// Whether `owner` may open one more topic (the relay's bound and the address's share), and
    /// which of them refuses it.
    fn may_open_topic(&self, owner: IpAddr) -> Result<(), Bound> {
        if self.topics.len() >= MAX_TOPICS {
            return Err(Bound::Relay);
        }
        let opened = self.usage.get(&owner).map_or(0, |u| u.topics);
        if opened >= MAX_TOPICS_PER_ADDRESS {
            return Err(Bound::Share);
        }
        Ok(())
    }

    /// Takes one message's token from `conn`'s budget, closing it when spent. `false` when the
    /// socket is not held (any more).
    fn charge(&mut self, now: Timestamp, conn: ConnId) -> bool {
        let Some(socket) = self.sockets.get_mut(&conn) else {
            self.stats.unknown_socket += 1;
            return false;
        };
        socket.last_heard = socket.last_heard.max(now);
        if socket.budget.try_take(now) {
            return true;
        }
        self.stats.closed_rate += 1;
        self.close(conn, CLOSE_RATE, "rate limit");
        false
    }

    fn send(&mut self, conn: ConnId, message: &RelayMessage) {
        self.out.push_back(Output::Send {
            conn,
            text: message.to_text().into(),
        });
    }

    fn text(&mut self, now: Timestamp, conn: ConnId, text: &str) {
        // Read in place: a dropped blob is copied only where it is kept.
        match ClientMessage::read(text) {
            Ok(ClientFrame::Fetch {
                topic,
                after,
                watch,
            }) => self.fetch(now, conn, topic, after, watch),
            Ok(ClientFrame::Drop { topic, blob, ttl }) => {
                self.drop_blob(now, conn, topic, &blob, ttl)
            }
            Ok(ClientFrame::Ping) => self.send(conn, &RelayMessage::Pong),
            Ok(ClientFrame::Ice) => {
                let watches = self
                    .sockets
                    .get(&conn)
                    .is_some_and(|s| !s.watching.is_empty());
                if !(watches && self.offer_turn(now, conn)) {
                    self.stats.ice_unanswered += 1;
                }
            }
            Err(_) => self.stats.malformed += 1,
        }
    }

    /// Sends `conn` TURN passwords; `false` for a relay without TURN.
    fn offer_turn(&mut self, now: Timestamp, conn: ConnId) -> bool {
        let (Some(turn), Some(socket)) = (self.turn.as_mut(), self.sockets.get(&conn)) else {
            return false;
        };
        let ice = turn.offer(self.crypto, &mut self.rng, now, socket.addr);
        self.send(conn, &RelayMessage::Ice(ice));
        true
    }

    fn fetch(&mut self, now: Timestamp, conn: ConnId, topic: Topic, after: u64, watch: bool) {
        let mut items = Vec::new();
        let mut more = false;
        if let Some(state) = self.topics.get(&topic) {
            // "A copy past its time is not held, even before the relay sweeps it away."
            let mut live = state
                .kept
                .iter()
                .filter(|k| k.seq > after && k.expires > now);
            items.extend(live.by_ref().take(PAGE_BLOBS).map(|k| MailItem {
                blob: k.blob.clone(),
                seq: Some(k.seq),
            }));
            more = live.next().is_some();
        }
        self.send(
            conn,
            &RelayMessage::Mail(Mail {
                topic: topic.clone(),
                items,
                more,
            }),
        );
        if watch {
            self.watch(now, conn, topic);
        }
    }

    fn watch(&mut self, now: Timestamp, conn: ConnId, topic: Topic) {
        let Some(socket) = self.sockets.get(&conn) else {
            return;
        };
        if socket.watching.contains(&topic) {
            return;
        }
        let owner = address_key(socket.addr);
        let refused = match self.topics.get(&topic) {
            Some(state) => (state.watchers.len() >= MAX_WATCHERS_PER_TOPIC).then_some(Bound::Relay),
            None => self.may_open_topic(owner).err(),
        };
        let refused =
            refused.or((socket.watching.len() >= MAX_WATCHES_PER_SOCKET).then_some(Bound::Relay));
        if let Some(bound) = refused {
            self.stats.watch_refused += 1;
            if bound == Bound::Share {
                self.stats.share_refused += 1;
            }
            return;
        }
        self.topic_entry(&topic, owner).watchers.push(conn);
        let Some(socket) = self.sockets.get_mut(&conn) else {
            return;
        };
        socket.watching.insert(topic);
        if !core::mem::replace(&mut socket.watched_once, true) {
            self.offer_turn(now, conn);
        }
    }

    /// A `drop` of `blob`, whose text passed [`Blob::parse`]'s check.
    fn drop_blob(&mut self, now: Timestamp, conn: ConnId, topic: Topic, blob: &str, ttl: Ttl) {
        let ttl = Ttl::from_millis(ttl.as_millis().min(MAX_TTL_MS)).unwrap_or(Ttl::PUBLISH_ONLY);
        let owner = match self.sockets.get(&conn) {
            Some(socket) => address_key(socket.addr),
            None => return,
        };
        let seq = match ttl.expiry(now) {
            Some(expires) => self.keep(owner, &topic, blob, expires),
            None => None,
        };
        let Some(state) = self.topics.get(&topic) else {
            return;
        };
        // Read twice rather than collected: the count says whether to write the text at all.
        let others = || {
            state
                .watchers
                .iter()
                .copied()
                .filter(|&c| c != conn)
                .take(MAX_WATCHERS_PER_TOPIC - 1)
        };
        let count = others().count();
        if count == 0 {
            return;
        }
        // One text for every watcher: they read it within a few milliseconds of each other, and
        // a copy each was an allocation and a cold read of the same bytes per socket.
        let text: Arc<str> = RelayMessage::pushed_text_checked(&topic, blob, seq).into();
        self.stats.delivered += count as u64;
        for c in others() {
            self.out.push_back(Output::Send {
                conn: c,
                text: Arc::clone(&text),
            });
        }
    }

    /// The topic's state, opened by `owner` (and taking its share) if the relay holds none.
    fn topic_entry(&mut self, topic: &Topic, owner: IpAddr) -> &mut TopicState {
        if !self.topics.contains_key(topic) {
            self.add_usage(owner, 0, 1);
        }
        self.topics
            .entry(topic.clone())
            .or_insert_with(|| TopicState::new(owner))
    }

    /// Whether `owner` may keep `bytes` more under `topic`: the relay's bounds first, then the
    /// address's share.
    fn may_keep(&self, owner: IpAddr, topic: &Topic, bytes: usize) -> Result<(), Bound> {
        if !self.topics.contains_key(topic) {
            self.may_open_topic(owner)?;
        }
        if self.held_bytes.saturating_add(bytes) > MAX_HELD_BYTES {
            return Err(Bound::Relay);
        }
        let held = self.usage.get(&owner).map_or(0, |u| u.held_bytes);
        if held.saturating_add(bytes) > MAX_HELD_BYTES_PER_ADDRESS {
            return Err(Bound::Share);
        }
        Ok(())
    }

    /// Keeps `blob`, dropped from the address key `owner`, under `topic` until `expires`; its
    /// `seq`, or `None` when a bound of the relay or of the address's share refuses it.
    fn keep(
        &mut self,
        owner: IpAddr,
        topic: &Topic,
        blob: &str,
        expires: Timestamp,
    ) -> Option<u64> {
        let bytes = blob.len();
        if let Err(bound) = self.may_keep(owner, topic, bytes) {
            match bound {
                Bound::Relay => self.stats.not_kept_full += 1,
                Bound::Share => self.stats.share_refused += 1,
            }
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.add_usage(owner, bytes as isize, 0);
        let state = self.topic_entry(topic, owner);
        state.kept.push_back(Kept {
            seq,
            blob: Blob::from_checked(blob),
            expires,
            owner,
        });
        // "Drops past the bound bury older ones" (§1.2).
        let buried = if state.kept.len() > MAX_TOPIC_BLOBS {
            state.kept.pop_front()
        } else {
            None
        };
        self.held_bytes += bytes;
        self.expiries.insert((expires, seq, topic.clone()));
        self.stats.kept += 1;
        if let Some(old) = buried {
            let old_bytes = old.blob.as_str().len();
            self.held_bytes -= old_bytes;
            self.add_usage(old.owner, -(old_bytes as isize), 0);
            self.expiries.remove(&(old.expires, old.seq, topic.clone()));
            self.stats.buried += 1;
        }
        Some(seq)
    }

    /// Removes every kept blob whose time has come.
    fn sweep(&mut self, now: Timestamp) {
        while let Some((expires, seq, topic)) = self.expiries.first().cloned() {
            if expires > now {
                break;
            }
            self.expiries.pop_first();
            if let Some(state) = self.topics.get_mut(&topic)
                && let Some(i) = state.kept.iter().position(|k| k.seq == seq)
                && let Some(k) = state.kept.remove(i)
            {
                let bytes = k.blob.as_str().len();
                self.held_bytes -= bytes;
                self.add_usage(k.owner, -(bytes as isize), 0);
            }
            self.release_if_empty(&topic);
        }
    }

    fn heartbeat(&mut self, now: Timestamp) {
        let one = core::time::Duration::from_millis(HEARTBEAT_MS);
        let mut silent = Vec::new();
        for (&conn, socket) in &self.sockets {
            let quiet = now.saturating_duration_since(socket.last_heard);
            if quiet >= one * 2 {
                silent.push(conn);
            } else if quiet >= one {
                self.out.push_back(Output::Ping { conn });
            }
        }
        for conn in silent {
            self.stats.closed_silent += 1;
            self.close(conn, CLOSE_SILENT, "silent");
        }
        if !self.sockets.is_empty() {
            self.next_heartbeat = Some(now + one);
        }
    }
}

impl<R: CryptoRng> Machine for RelayServer<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        self.sweep(now);
        match input {
            Input::Opened { conn, addr } => self.open(now, conn, addr),
            Input::OpenedElsewhere { conn, addr } => self.open_elsewhere(conn, addr),
            Input::Text { conn, text } => {
                if self.charge(now, conn) {
                    self.text(now, conn, &text);
                }
            }
            Input::Binary { conn } => {
                if self.charge(now, conn) {
                    self.stats.binary += 1;
                }
            }
            Input::Control { conn } => {
                self.charge(now, conn);
            }
            Input::Closed { conn } => self.forget(conn),
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.next_heartbeat
            .map(|at| Wakeup::new(at, "relay heartbeat"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.sweep(now);
        if self.next_heartbeat.is_some_and(|at| at <= now) {
            self.heartbeat(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use crate::minca::relay_wire::{IceServers, MAX_BLOB_CHARS};
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const T0: u64 = 1_790_000_000_000;
    const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(T0 + ms)
    }

    fn relay_with(turn: Option<TurnConfig>) -> RelayServer<ChaCha20Rng> {
        RelayServer::new(
            RelayConfig { turn },
            default_provider(),
            ChaCha20Rng::seed_from_u64(11),
        )
    }

    fn relay() -> RelayServer<ChaCha20Rng> {
        relay_with(None)
    }

    fn turn() -> TurnConfig {
        TurnConfig::new(b"secret", vec!["turn:turn.example.com:3478".into()], 3600).unwrap()
    }

    fn addr(i: u64) -> IpAddr {
        IpAddr::V4(core::net::Ipv4Addr::from(0x0a00_0000 + i as u32))
    }

    fn open(r: &mut RelayServer<ChaCha20Rng>, now: Timestamp, conn: u64) {
        r.handle(
            now,
            Input::Opened {
                conn: ConnId(conn),
                addr: addr(conn),
            },
        );
    }

    fn text(r: &mut RelayServer<ChaCha20Rng>, now: Timestamp, conn: u64, t: &str) {
        r.handle(
            now,
            Input::Text {
                conn: ConnId(conn),
                text: t.to_string(),
            },
        );
    }

    fn outputs(r: &mut RelayServer<ChaCha20Rng>) -> Vec<Output> {
        core::iter::from_fn(|| r.poll()).collect()
    }

    /// Text sent to `conn`, parsed.
    fn sent_to(outs: &[Output], conn: u64) -> Vec<RelayMessage> {
        outs.iter()
            .filter_map(|o| match o {
                Output::Send { conn: c, text } if *c == ConnId(conn) => {
                    Some(RelayMessage::parse(text).unwrap())
                }
                _ => None,
            })
            .collect()
    }

    fn mail(outs: &[Output], conn: u64) -> Vec<Mail> {
        sent_to(outs, conn)
            .into_iter()
            .filter_map(|m| match m {
                RelayMessage::Mail(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    fn fetch(after: u64, watch: bool) -> String {
        format!(r#"{{"type":"fetch","topic":"{TOPIC}","after":{after},"watch":{watch}}}"#)
    }

    fn drop_msg(blob: &str, ttl: u64) -> String {
        format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"{blob}","ttl":{ttl}}}"#)
    }

    fn blobs(m: &Mail) -> Vec<(&str, Option<u64>)> {
        m.items.iter().map(|i| (i.blob.as_str(), i.seq)).collect()
    }

    /// A fetch from a fresh socket at `now`: the pages read until `more` is false.
    fn read_all(r: &mut RelayServer<ChaCha20Rng>, now: Timestamp, conn: u64) -> Vec<Mail> {
        open(r, now, conn);
        let mut pages = Vec::new();
        let mut after = 0;
        loop {
            text(r, now, conn, &fetch(after, false));
            let page = mail(&outputs(r), conn).pop().unwrap();
            let more = page.more;
            after = page.last_seq().unwrap_or(after);
            pages.push(page);
            if !more {
                return pages;
            }
        }
    }

    #[test]
    fn a_blob_published_with_ttl_0_goes_to_the_other_watchers_and_is_kept_by_nobody() {
        let mut r = relay();
        for c in 1..=3 {
            open(&mut r, at(0), c);
            text(&mut r, at(0), c, &fetch(0, true));
        }
        let first = outputs(&mut r);
        assert_eq!(mail(&first, 1)[0].items, vec![]);
        text(&mut r, at(5), 1, &drop_msg("AZ3k", 0));
        let outs = outputs(&mut r);
        assert!(sent_to(&outs, 1).is_empty(), "not to the publisher");
        for c in [2, 3] {
            let got = mail(&outs, c);
            assert_eq!(got.len(), 1);
            assert_eq!(blobs(&got[0]), [("AZ3k", None)]);
            assert!(!got[0].more);
        }
        assert_eq!(r.kept_blobs(), 0);
        let later = read_all(&mut r, at(6), 9);
        assert_eq!(later.len(), 1);
        assert!(later[0].items.is_empty());
    }

    #[test]
    fn a_dropped_blob_is_kept_until_its_ttl_and_served_to_fetch() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        open(&mut r, at(0), 2);
        text(&mut r, at(0), 2, &fetch(0, true));
        outputs(&mut r);
        text(&mut r, at(0), 1, &drop_msg("AQID", 10_000));
        // Watchers get it too, with its seq.
        let pushed = mail(&outputs(&mut r), 2);
        assert_eq!(blobs(&pushed[0]), [("AQID", Some(1))]);
        let pages = read_all(&mut r, at(9_999), 3);
        assert_eq!(blobs(&pages[0]), [("AQID", Some(1))]);
    }

    #[test]
    fn nothing_is_served_past_its_time() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, &drop_msg("AQID", 10_000));
        text(&mut r, at(0), 1, &drop_msg("BAUG", 20_000));
        outputs(&mut r);
        // At 10 000 ms the first copy is past its time, even before any sweep.
        let page = r_fetch_without_sweep(&mut r, at(10_000));
        assert_eq!(blobs(&page), [("BAUG", Some(2))]);
        assert_eq!(r.kept_blobs(), 2, "not swept yet");
        r.handle_timeout(at(10_000));
        assert_eq!(r.kept_blobs(), 1, "swept on the next pass");
        let pages = read_all(&mut r, at(20_000), 5);
        assert!(pages[0].items.is_empty());
        assert_eq!(r.topics(), 0, "an empty topic is released");
        assert_eq!(r.held_bytes(), 0);
    }

    /// A fetch answered without the sweep `handle` does first, to prove the read checks time.
    fn r_fetch_without_sweep(r: &mut RelayServer<ChaCha20Rng>, now: Timestamp) -> Mail {
        r.fetch(now, ConnId(1), Topic::parse(TOPIC).unwrap(), 0, false);
        mail(&outputs(r), 1).pop().unwrap()
    }

    #[test]
    fn seq_increases_with_every_blob_kept() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        let other = "A".repeat(43);
        for i in 0..6 {
            let topic = if i % 2 == 0 { TOPIC } else { other.as_str() };
            text(
                &mut r,
                at(i),
                1,
                &format!(r#"{{"type":"drop","topic":"{topic}","blob":"AQID","ttl":60000}}"#),
            );
            // A publish keeps nothing and takes no seq.
            text(&mut r, at(i), 1, &drop_msg("AQID", 0));
        }
        outputs(&mut r);
        let seqs: Vec<u64> = read_all(&mut r, at(10), 2)
            .iter()
            .flat_map(|m| m.items.iter().filter_map(|i| i.seq))
            .collect();
        assert_eq!(seqs, [1, 3, 5]);
    }

    #[test]
    fn a_topic_keeps_at_most_64_blobs_and_a_drop_past_it_buries_the_oldest() {
        let mut r = relay();
        for i in 0..70u64 {
            // One socket per 30 drops keeps within the rate budget without advancing time.
            let conn = 100 + i / 30;
            if i % 30 == 0 {
                open(&mut r, at(0), conn);
            }
            let blob = crate::codec::base64url::encode(&i.to_be_bytes());
            text(&mut r, at(0), conn, &drop_msg(&blob, 60_000));
        }
        outputs(&mut r);
        assert_eq!(r.max_per_topic().1, MAX_TOPIC_BLOBS);
        assert_eq!(r.stats().buried, 6);
        let seqs: Vec<u64> = read_all(&mut r, at(1), 1)
            .iter()
            .flat_map(|m| m.items.iter().filter_map(|i| i.seq))
            .collect();
        assert_eq!(seqs, (7..=70).collect::<Vec<_>>());
    }

    #[test]
    fn a_page_that_says_more_holds_at_least_four_blobs_and_the_64_take_at_most_16_pages() {
        let mut r = relay();
        for i in 0..64u64 {
            let conn = 100 + i / 30;
            if i % 30 == 0 {
                open(&mut r, at(0), conn);
            }
            text(&mut r, at(0), conn, &drop_msg("AQID", 60_000));
        }
        outputs(&mut r);
        let pages = read_all(&mut r, at(1), 1);
        assert!(pages.len() <= 16);
        assert!(pages.iter().all(|p| !p.is_short_page()));
        assert_eq!(pages.iter().map(|p| p.items.len()).sum::<usize>(), 64);
        // Expired blobs between the page's last and the rest do not leave `more` lying.
        let mut r = relay();
        open(&mut r, at(0), 1);
        for i in 0..(PAGE_BLOBS as u64 + 1) {
            let ttl = if i == PAGE_BLOBS as u64 { 5 } else { 60_000 };
            text(&mut r, at(0), 1, &drop_msg("AQID", ttl));
        }
        outputs(&mut r);
        let page = r_fetch_without_sweep(&mut r, at(5));
        assert_eq!(page.items.len(), PAGE_BLOBS);
        assert!(!page.more);
    }

    #[test]
    fn fetch_after_a_seq_returns_only_later_blobs() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        for blob in ["AQID", "BAUG", "BwgJ"] {
            text(&mut r, at(0), 1, &drop_msg(blob, 60_000));
        }
        text(&mut r, at(0), 1, &fetch(1, false));
        let page = mail(&outputs(&mut r), 1).pop().unwrap();
        assert_eq!(blobs(&page), [("BAUG", Some(2)), ("BwgJ", Some(3))]);
        text(&mut r, at(0), 1, &fetch(3, false));
        assert!(mail(&outputs(&mut r), 1)[0].items.is_empty());
    }

    #[test]
    fn a_publish_reaches_at_most_63_other_watchers() {
        let mut r = relay();
        for c in 0..(MAX_WATCHERS_PER_TOPIC as u64 + 1) {
            open(&mut r, at(0), c);
            text(&mut r, at(0), c, &fetch(0, true));
        }
        outputs(&mut r);
        assert_eq!(r.stats().watch_refused, 1, "the 65th watch is refused");
        assert_eq!(r.max_per_topic().0, MAX_WATCHERS_PER_TOPIC);
        // From a socket that does not watch: 63 of the 64 watchers.
        text(&mut r, at(1), 64, &drop_msg("AQID", 0));
        let sends = outputs(&mut r).len();
        assert_eq!(sends, MAX_WATCHERS_PER_TOPIC - 1);
        // From a watcher: the 63 others.
        text(&mut r, at(1), 0, &drop_msg("AQID", 0));
        let outs = outputs(&mut r);
        assert_eq!(outs.len(), 63);
        assert!(sent_to(&outs, 0).is_empty());
    }

    /// A pushed mail is written once for all the topic's watchers: every socket's output holds
    /// the same text, not a copy of it.
    #[test]
    fn a_pushed_mail_is_one_text_every_watcher_shares() {
        let mut r = relay();
        for c in 0..4 {
            open(&mut r, at(0), c);
            text(&mut r, at(0), c, &fetch(0, true));
        }
        outputs(&mut r);
        text(&mut r, at(1), 0, &drop_msg("AQID", 0));
        let outs = outputs(&mut r);
        let texts: Vec<&Arc<str>> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Send { text, .. } => Some(text),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), 3, "the three other watchers");
        assert!(texts.windows(2).all(|w| Arc::ptr_eq(w[0], w[1])));
    }

    #[test]
    fn every_message_counts_against_the_rate_budget_including_binary_and_malformed() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        let burst = RATE_BUDGET.burst as usize;
        for i in 0..burst {
            match i % 4 {
                0 => r.handle(at(0), Input::Binary { conn: ConnId(1) }),
                1 => text(&mut r, at(0), 1, "not json"),
                2 => text(&mut r, at(0), 1, r#"{"type":"ping"}"#),
                _ => r.handle(at(0), Input::Control { conn: ConnId(1) }),
            }
        }
        let outs = outputs(&mut r);
        assert!(!outs.iter().any(|o| matches!(o, Output::Close { .. })));
        r.handle(at(0), Input::Binary { conn: ConnId(1) });
        assert_eq!(
            outputs(&mut r),
            [Output::Close {
                conn: ConnId(1),
                code: CLOSE_RATE,
                reason: "rate limit"
            }]
        );
        assert_eq!(r.stats().closed_rate, 1);
        assert_eq!(r.sockets(), 0);
        // What comes after on the closed socket is ignored.
        text(&mut r, at(0), 1, r#"{"type":"ping"}"#);
        assert!(outputs(&mut r).is_empty());
    }

    #[test]
    fn a_socket_within_its_rate_budget_is_never_cut_off() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        let per_second = u64::from(RATE_BUDGET.per_second);
        for i in 0..(per_second * 20) {
            text(&mut r, at(i * 1000 / per_second), 1, r#"{"type":"ping"}"#);
        }
        let outs = outputs(&mut r);
        assert_eq!(outs.len() as u64, per_second * 20);
        assert!(outs.iter().all(|o| matches!(o, Output::Send { .. })));
    }

    #[test]
    fn text_that_is_not_a_typed_json_object_is_ignored_and_counted() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        for t in [
            "ping",
            "",
            "[1]",
            "{}",
            r#"{"type":7}"#,
            r#"{"type":"pong"}"#,
            "\u{0}",
        ] {
            text(&mut r, at(0), 1, t);
        }
        r.handle(at(0), Input::Binary { conn: ConnId(1) });
        assert!(outputs(&mut r).is_empty());
        assert_eq!(r.stats().malformed, 7);
        assert_eq!(r.stats().binary, 1);
        assert_eq!(r.sockets(), 1);
    }

    #[test]
    fn a_message_naming_a_topic_other_than_43_base64url_characters_is_ignored() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        for topic in [
            &TOPIC[..42],
            &format!("{TOPIC}A"),
            &format!("{}+", &TOPIC[..42]),
            "",
        ] {
            text(
                &mut r,
                at(0),
                1,
                &format!(r#"{{"type":"fetch","topic":"{topic}","watch":true}}"#),
            );
            text(
                &mut r,
                at(0),
                1,
                &format!(r#"{{"type":"drop","topic":"{topic}","blob":"AQID","ttl":100}}"#),
            );
        }
        assert!(outputs(&mut r).is_empty());
        assert_eq!(r.stats().malformed, 8);
        assert_eq!((r.topics(), r.kept_blobs()), (0, 0));
    }

    #[test]
    fn a_blob_that_is_empty_or_not_base64url_or_over_12000_characters_is_ignored() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        let longest = "A".repeat(MAX_BLOB_CHARS);
        let too_long = "A".repeat(MAX_BLOB_CHARS + 1);
        for blob in ["", "AQ+D", "AQ==", too_long.as_str()] {
            text(&mut r, at(0), 1, &drop_msg(blob, 100));
        }
        assert_eq!(r.stats().malformed, 4);
        text(&mut r, at(0), 1, &drop_msg(&longest, 100));
        assert_eq!(r.kept_blobs(), 1);
        assert_eq!(r.held_bytes(), MAX_BLOB_CHARS);
    }

    #[test]
    fn ping_is_answered_with_pong() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, r#"{"type":"ping"}"#);
        assert_eq!(
            outputs(&mut r),
            [Output::Send {
                conn: ConnId(1),
                text: r#"{"type":"pong"}"#.into()
            }]
        );
    }

    #[test]
    fn sockets_per_client_address_are_capped_before_the_upgrade() {
        let mut r = relay();
        let a: IpAddr = "2001:db8:1:2::5".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:9::1".parse().unwrap();
        for c in 0..MAX_SOCKETS_PER_ADDRESS as u64 {
            assert_eq!(r.admit(at(0), a), Ok(()));
            r.handle(
                at(0),
                Input::Opened {
                    conn: ConnId(c),
                    addr: a,
                },
            );
        }
        assert_eq!(r.admit(at(0), same_64), Err(Refusal::AddressFull));
        assert_eq!(Refusal::AddressFull.http_status(), 429);
        assert_eq!(r.admit(at(0), "2001:db8:1:3::5".parse().unwrap()), Ok(()));
        // Opened anyway (another upgrade won the race): closed at once.
        r.handle(
            at(0),
            Input::Opened {
                conn: ConnId(999),
                addr: same_64,
            },
        );
        assert_eq!(
            outputs(&mut r),
            [Output::Close {
                conn: ConnId(999),
                code: CLOSE_FULL,
                reason: "relay full"
            }]
        );
        assert_eq!(r.max_sockets_per_address(), MAX_SOCKETS_PER_ADDRESS);
        r.handle(at(0), Input::Closed { conn: ConnId(0) });
        assert_eq!(r.admit(at(0), same_64), Ok(()));
        assert_eq!(r.stats().refused, 1);
    }

    #[test]
    fn sockets_in_all_are_capped_before_the_upgrade() {
        let mut r = relay();
        for c in 0..MAX_SOCKETS as u64 {
            r.handle(
                at(0),
                Input::Opened {
                    conn: ConnId(c),
                    addr: addr(c),
                },
            );
        }
        assert_eq!(
            r.admit(at(0), addr(MAX_SOCKETS as u64)),
            Err(Refusal::RelayFull)
        );
        assert_eq!(Refusal::RelayFull.http_status(), 503);
        assert_eq!(r.sockets(), MAX_SOCKETS);
    }

    #[test]
    fn watches_per_socket_are_capped() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        for i in 0..(MAX_WATCHES_PER_SOCKET as u32 + 1) {
            let mut bytes = [0u8; 32];
            bytes[..4].copy_from_slice(&i.to_be_bytes());
            let topic = Topic::from_bytes(&bytes);
            r.fetch(at(0), ConnId(1), topic, 0, true);
        }
        assert_eq!(r.stats().watch_refused, 1);
        assert_eq!(r.topics(), MAX_WATCHES_PER_SOCKET);
    }

    /// One of 32 client addresses, so that filling the relay's bounds is not stopped first by
    /// one address's share.
    fn many(i: u32) -> IpAddr {
        addr(1_000 + u64::from(i % 32))
    }

    #[test]
    fn topics_and_bytes_held_in_all_are_bounded() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        open(&mut r, at(0), 2);
        text(&mut r, at(0), 2, &fetch(0, true));
        outputs(&mut r);
        let full = Blob::parse(&"A".repeat(MAX_BLOB_CHARS)).unwrap();
        let expires = at(60_000);
        let mut i = 0u32;
        while r.held_bytes() + MAX_BLOB_CHARS <= MAX_HELD_BYTES {
            let mut bytes = [0u8; 32];
            bytes[..4].copy_from_slice(&i.to_be_bytes());
            assert!(
                r.keep(many(i), &Topic::from_bytes(&bytes), full.as_str(), expires)
                    .is_some()
            );
            i += 1;
        }
        // Not kept, but still handed to the watcher, without a seq.
        text(&mut r, at(0), 1, &drop_msg(full.as_str(), 60_000));
        let pushed = mail(&outputs(&mut r), 2);
        assert_eq!(pushed[0].items[0].seq, None);
        assert_eq!(r.stats().not_kept_full, 1);
        assert!(r.held_bytes() <= MAX_HELD_BYTES);

        let mut r = relay();
        let small = Blob::parse("AQID").unwrap();
        for i in 0..MAX_TOPICS as u32 {
            let mut bytes = [0u8; 32];
            bytes[..4].copy_from_slice(&i.to_be_bytes());
            r.keep(many(i), &Topic::from_bytes(&bytes), small.as_str(), expires);
        }
        assert_eq!(r.topics(), MAX_TOPICS);
        assert_eq!(
            r.keep(
                addr(1),
                &Topic::parse(TOPIC).unwrap(),
                small.as_str(),
                expires
            ),
            None
        );
        // A watch that would open a new topic is refused.
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, &fetch(0, true));
        assert_eq!(r.stats().watch_refused, 1);
        assert_eq!(r.topics(), MAX_TOPICS);
    }

    #[test]
    fn a_ttl_longer_than_the_longest_is_cut_to_it() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, &drop_msg("AQID", MAX_TTL_MS * 3));
        outputs(&mut r);
        r.fetch(
            at(MAX_TTL_MS - 1),
            ConnId(1),
            Topic::parse(TOPIC).unwrap(),
            0,
            false,
        );
        assert_eq!(mail(&outputs(&mut r), 1)[0].items.len(), 1);
        r.fetch(
            at(MAX_TTL_MS),
            ConnId(1),
            Topic::parse(TOPIC).unwrap(),
            0,
            false,
        );
        assert!(mail(&outputs(&mut r), 1)[0].items.is_empty());
    }

    #[test]
    fn a_socket_silent_through_two_heartbeats_is_closed_and_one_that_answers_is_kept() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        open(&mut r, at(0), 2);
        let hb = HEARTBEAT_MS;
        assert_eq!(r.poll_timeout().unwrap().at, at(hb));
        r.handle_timeout(at(hb));
        let outs = outputs(&mut r);
        assert_eq!(
            outs,
            [
                Output::Ping { conn: ConnId(1) },
                Output::Ping { conn: ConnId(2) }
            ]
        );
        r.handle(at(hb + 10), Input::Control { conn: ConnId(2) });
        assert_eq!(r.poll_timeout().unwrap().at, at(2 * hb));
        r.handle_timeout(at(2 * hb));
        assert_eq!(
            outputs(&mut r),
            [Output::Close {
                conn: ConnId(1),
                code: CLOSE_SILENT,
                reason: "silent"
            }]
        );
        assert_eq!(r.stats().closed_silent, 1);
        assert_eq!(r.sockets(), 1);
        // A deadline that has passed is not asked for again.
        assert!(r.poll_timeout().unwrap().at > at(2 * hb));
        r.handle(at(2 * hb), Input::Closed { conn: ConnId(2) });
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn a_closed_socket_stops_watching_and_its_empty_topic_is_released() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        open(&mut r, at(0), 2);
        text(&mut r, at(0), 1, &fetch(0, true));
        outputs(&mut r);
        assert_eq!(r.topics(), 1);
        r.handle(at(0), Input::Closed { conn: ConnId(1) });
        assert_eq!(r.topics(), 0);
        text(&mut r, at(0), 2, &drop_msg("AQID", 0));
        assert!(outputs(&mut r).iter().all(|o| !matches!(
            o,
            Output::Send {
                conn: ConnId(1),
                ..
            }
        )));
    }

    #[test]
    fn turn_passwords_go_unprompted_on_a_sockets_first_watch_only() {
        let mut r = relay_with(Some(turn()));
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, &fetch(0, true));
        let first = sent_to(&outputs(&mut r), 1);
        assert!(
            matches!(first[0], RelayMessage::Mail(_)),
            "mail first, as in §1.4's example"
        );
        let RelayMessage::Ice(ice) = &first[1] else {
            panic!("ice after the first watch");
        };
        assert_eq!(ice.expires_at, Timestamp::from_secs(at(0).as_secs() + 3600));
        let other = "A".repeat(43);
        text(
            &mut r,
            at(1),
            1,
            &format!(r#"{{"type":"fetch","topic":"{other}","watch":true}}"#),
        );
        text(&mut r, at(1), 1, &fetch(0, true));
        let later = sent_to(&outputs(&mut r), 1);
        assert_eq!(later.len(), 2);
        assert!(later.iter().all(|m| matches!(m, RelayMessage::Mail(_))));
    }

    #[test]
    fn ice_is_answered_only_for_a_socket_that_watches_a_topic() {
        let mut r = relay_with(Some(turn()));
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, r#"{"type":"ice"}"#);
        assert!(outputs(&mut r).is_empty());
        text(&mut r, at(0), 1, &fetch(0, true));
        outputs(&mut r);
        text(&mut r, at(0), 1, r#"{"type":"ice"}"#);
        text(&mut r, at(0), 1, r#"{"type":"ice"}"#);
        let answers = sent_to(&outputs(&mut r), 1);
        assert_eq!(answers.len(), 2);
        // One network, one username while it is valid.
        let user = |m: &RelayMessage| match m {
            RelayMessage::Ice(IceServers { servers, .. }) => servers[0].username.clone(),
            _ => panic!("ice"),
        };
        assert_eq!(user(&answers[0]), user(&answers[1]));
        assert_eq!(r.stats().ice_unanswered, 1);
    }

    #[test]
    fn a_relay_without_turn_never_answers_ice() {
        let mut r = relay();
        open(&mut r, at(0), 1);
        text(&mut r, at(0), 1, &fetch(0, true));
        let first = sent_to(&outputs(&mut r), 1);
        assert_eq!(first.len(), 1, "mail only");
        text(&mut r, at(0), 1, r#"{"type":"ice"}"#);
        assert!(outputs(&mut r).is_empty());
        assert_eq!(r.stats().ice_unanswered, 1);
    }

    #[test]
    fn a_socket_never_says_who_it_is() {
        // Nothing a relay sends names another socket or its address: a pushed blob carries
        // only the topic and the blob.
        let mut r = relay();
        open(&mut r, at(0), 1);
        open(&mut r, at(0), 2);
        text(&mut r, at(0), 2, &fetch(0, true));
        outputs(&mut r);
        text(&mut r, at(0), 1, &drop_msg("AQID", 0));
        let Output::Send { text, .. } = &outputs(&mut r)[0] else {
            panic!("send");
        };
        assert_eq!(
            **text,
            format!(
                r#"{{"type":"mail","topic":"{TOPIC}","items":[{{"blob":"AQID"}}],"more":false}}"#
            )
        );
        assert!(!text.contains("10.0.0"));
    }

    fn open_from(r: &mut RelayServer<ChaCha20Rng>, now: Timestamp, conn: u64, from: IpAddr) {
        r.handle(
            now,
            Input::Opened {
                conn: ConnId(conn),
                addr: from,
            },
        );
    }

    /// The `i`th of many distinct topics, as the wire spells it.
    fn nth_topic(i: u32) -> String {
        let mut bytes = [0u8; 32];
        bytes[..4].copy_from_slice(&i.to_be_bytes());
        bytes[31] = 0xa5;
        String::from(Topic::from_bytes(&bytes).as_str())
    }

    fn drop_to(topic: &str, blob: &str, ttl: u64) -> String {
        format!(r#"{{"type":"drop","topic":"{topic}","blob":"{blob}","ttl":{ttl}}}"#)
    }

    fn watch_msg(topic: &str) -> String {
        format!(r#"{{"type":"fetch","topic":"{topic}","watch":true}}"#)
    }

    /// What a fresh socket from `from` reads of `topic`.
    fn kept_in(
        r: &mut RelayServer<ChaCha20Rng>,
        now: Timestamp,
        from: IpAddr,
        topic: &str,
    ) -> usize {
        open_from(r, now, 900, from);
        text(
            r,
            now,
            900,
            &format!(r#"{{"type":"fetch","topic":"{topic}"}}"#),
        );
        let page = mail(&outputs(r), 900).pop().unwrap();
        r.handle(now, Input::Closed { conn: ConnId(900) });
        page.items.len()
    }

    /// An attacker from one address (two hosts of one IPv6 /64) drops full-size blobs into
    /// fresh topics, one every 40 ms (within its rate budget), until its share of the kept bytes
    /// is spent: its next drop is not kept (the watcher gets it without a `seq`, a fetch finds
    /// nothing), while another address's drop is kept; once the attacker's blobs expire, its
    /// share is back.
    #[test]
    fn one_address_may_keep_only_its_share_of_the_held_bytes_and_another_still_gets_room() {
        let mut r = relay();
        let attacker: IpAddr = "2001:db8:a:1::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:a:1::2".parse().unwrap();
        let other = addr(3);
        let watcher = addr(2);
        open_from(&mut r, at(0), 2, watcher);
        text(&mut r, at(0), 2, &fetch(0, true));
        open_from(&mut r, at(0), 10, attacker);
        open_from(&mut r, at(0), 11, same_64);
        outputs(&mut r);
        let full = "A".repeat(MAX_BLOB_CHARS);
        let ttl = 600_000;
        let mut k = 0u64;
        while r.held_by(attacker).0 + MAX_BLOB_CHARS <= MAX_HELD_BYTES_PER_ADDRESS {
            let conn = 10 + k % 2;
            text(
                &mut r,
                at(k * 40),
                conn,
                &drop_to(&nth_topic(k as u32), &full, ttl),
            );
            k += 1;
            assert_eq!(r.stats().share_refused, 0);
        }
        outputs(&mut r);
        assert_eq!(k as usize, MAX_HELD_BYTES_PER_ADDRESS / MAX_BLOB_CHARS);
        assert_eq!(
            r.held_by(same_64),
            r.held_by(attacker),
            "one /64, one share"
        );
        let now = at(k * 40);
        // The next drop, to a topic someone watches: handed on, not kept.
        text(&mut r, now, 11, &drop_msg(&full, ttl));
        let pushed = mail(&outputs(&mut r), 2);
        assert_eq!(pushed[0].items[0].seq, None, "not kept: no seq");
        assert_eq!(r.stats().share_refused, 1);
        assert_eq!(
            r.stats().not_kept_full,
            0,
            "the relay itself is far from full"
        );
        assert_eq!(kept_in(&mut r, now, other, TOPIC), 0);
        assert!(r.held_by(attacker).0 <= MAX_HELD_BYTES_PER_ADDRESS);
        // Another address still gets room, in the same topic.
        open_from(&mut r, now, 3, other);
        text(&mut r, now, 3, &drop_msg(&full, ttl));
        let pushed = mail(&outputs(&mut r), 2);
        assert!(pushed[0].items[0].seq.is_some(), "kept");
        assert_eq!(kept_in(&mut r, now, other, TOPIC), 1);
        assert_eq!(r.held_by(other).0, MAX_BLOB_CHARS);
        // Once its blobs expire the attacker's share is free again.
        let later = at(ttl + k * 40);
        text(&mut r, later, 10, &drop_msg("AQID", ttl));
        assert_eq!(
            r.held_by(attacker),
            (4, 0),
            "the topic was opened by the other address"
        );
        assert_eq!(r.stats().share_refused, 1);
    }

    /// An attacker from one address watches fresh topics until its share of the relay's topics
    /// is spent: its next watch is not made (the fetch is still answered, but a later drop is not
    /// pushed to it) and a drop that would open a topic is not kept, while another address opens
    /// topics as before; the attacker may still watch a topic another address opened, and gets
    /// its share back as its watches end.
    #[test]
    fn one_address_may_open_only_its_share_of_the_topics_and_another_still_gets_room() {
        let mut r = relay();
        let attacker = addr(1);
        let other = addr(2);
        let mut k = 0u64;
        let mut conn = 100;
        while r.held_by(attacker).1 < MAX_TOPICS_PER_ADDRESS {
            if k.is_multiple_of(MAX_WATCHES_PER_SOCKET as u64) {
                conn += 1;
                open_from(&mut r, at(k * 40), conn, attacker);
            }
            text(&mut r, at(k * 40), conn, &watch_msg(&nth_topic(k as u32)));
            k += 1;
            if k.is_multiple_of(1024) {
                outputs(&mut r);
            }
        }
        outputs(&mut r);
        assert_eq!(r.topics(), MAX_TOPICS_PER_ADDRESS);
        assert_eq!(r.stats().watch_refused, 0);
        let now = at(k * 40);
        // The next watch, from a fresh socket of the same address: answered, not made.
        open_from(&mut r, now, 1, attacker);
        text(&mut r, now, 1, &fetch(0, true));
        assert_eq!(mail(&outputs(&mut r), 1)[0].items, vec![]);
        assert_eq!((r.stats().watch_refused, r.stats().share_refused), (1, 1));
        assert_eq!(r.topics(), MAX_TOPICS_PER_ADDRESS);
        // A kept drop that would open a topic is not kept.
        text(&mut r, now, 1, &drop_msg("AQID", 60_000));
        assert_eq!(r.stats().share_refused, 2);
        assert_eq!(kept_in(&mut r, now, other, TOPIC), 0);
        // Another address opens the topic; the attacker's watch of it now stands, and hears the
        // next drop.
        open_from(&mut r, now, 2, other);
        text(&mut r, now, 2, &fetch(0, true));
        text(&mut r, now, 1, &fetch(0, true));
        outputs(&mut r);
        assert_eq!(r.topics(), MAX_TOPICS_PER_ADDRESS + 1);
        text(&mut r, now, 2, &drop_msg("AQID", 0));
        assert_eq!(
            mail(&outputs(&mut r), 1).len(),
            1,
            "pushed to the attacker too"
        );
        assert_eq!(r.held_by(other).1, 1);
        // One of the attacker's sockets closes: its topics go, and its share has room again.
        r.handle(now, Input::Closed { conn: ConnId(101) });
        let freed = MAX_TOPICS_PER_ADDRESS - MAX_WATCHES_PER_SOCKET;
        assert_eq!(r.held_by(attacker).1, freed);
        text(&mut r, now, 1, &watch_msg(&nth_topic(u32::MAX)));
        assert_eq!(r.held_by(attacker).1, freed + 1);
        assert_eq!(r.stats().share_refused, 2);
    }

    /// An always-on node's `/peer` sockets are counted in the caps of the relay on whose port
    /// they open: a client cannot pass [`MAX_SOCKETS_PER_ADDRESS`] by asking for `/peer`.
    #[test]
    fn sockets_served_elsewhere_count_in_the_per_address_and_total_caps() {
        let mut r = relay();
        let a = addr(1);
        for c in 0..MAX_SOCKETS_PER_ADDRESS as u64 {
            assert_eq!(r.admit(at(0), a), Ok(()));
            r.handle(
                at(0),
                Input::OpenedElsewhere {
                    conn: ConnId(c),
                    addr: a,
                },
            );
        }
        assert_eq!(r.admit(at(0), a), Err(Refusal::AddressFull));
        assert_eq!(r.admit(at(0), addr(2)), Ok(()));
        assert_eq!(r.sockets(), 0, "not the relay's sockets");
        assert_eq!(r.poll_timeout(), None, "and never pinged by it");
        // Opened past the cap anyway: closed, and not counted.
        r.handle(
            at(0),
            Input::OpenedElsewhere {
                conn: ConnId(999),
                addr: a,
            },
        );
        assert_eq!(
            outputs(&mut r),
            [Output::Close {
                conn: ConnId(999),
                code: CLOSE_FULL,
                reason: "relay full"
            }]
        );
        // Frames for it are not the relay's.
        text(&mut r, at(0), 0, r#"{"type":"ping"}"#);
        assert!(outputs(&mut r).is_empty());
        r.handle(at(0), Input::Closed { conn: ConnId(0) });
        assert_eq!(r.admit(at(0), a), Ok(()));
        assert_eq!(r.max_sockets_per_address(), MAX_SOCKETS_PER_ADDRESS - 1);
        // And in all.
        let mut r = relay();
        for c in 0..MAX_SOCKETS as u64 {
            r.handle(
                at(0),
                Input::OpenedElsewhere {
                    conn: ConnId(c),
                    addr: addr(c),
                },
            );
        }
        assert_eq!(
            r.admit(at(0), addr(MAX_SOCKETS as u64)),
            Err(Refusal::RelayFull)
        );
    }
}
