//! The relay client: one sans-IO machine that keeps a node's relay sockets for all its rooms
//! (Minca 04 Network §2.1, §3, §4, §10; the client side of §1.2 and §1.4).
//!
//! - §1.2: relays of a kind this client does not speak stay in a room's list and are never dialled;
//!   a relay is dialled at its dial URL.
//! - §2.1: redial with [`Backoff`] for as long as any room needs the relay; after a gap in `now`
//!   longer than two heartbeats ([`HEARTBEAT_MS`]), or on [`Input::Online`], close every socket and
//!   redial; ping a socket that heard nothing for [`PING_IDLE_MS`], and close and redial one whose
//!   relay answered a ping before but sent nothing since the last two; watch every topic again on
//!   open; pace sends with a [`TokenBucket`] of [`SEND_PACE`]; keep `ice` only in the §2.1 shape.
//! - §3: every room's topic is watched on every one of its relays at once; a publish goes to every
//!   connected relay the room is on; [`Output::Reachable`] says `true` once any relay answers and
//!   `false` only when none does; `ice` offers are kept per relay and the TURN servers are their
//!   union, expiring at the earliest `expiresAt`; [`Input::RequestIce`] goes to every connected
//!   relay that has TURN.
//! - §4: a room is joined on the configured relays plus its own (at most [`MAX_SPACE_RELAYS`]), the
//!   latter for that room only; a new list watches the topic on new relays and stops on relays no
//!   longer named; a socket no room needs is closed.
//! - §10: the TURN servers ([`Output::Turn`], [`RelayClient::turn_servers`]) are given only while
//!   their `expiresAt` is in the future.
//!
//! Sockets are named by [`ConnId`]s the machine allocates in [`Output::Dial`]; the host reports on
//! them with [`Input::Opened`], [`Input::Text`], [`Input::Closed`] and [`Input::DialFailed`]. What a
//! socket's frames look like, and which of §2.1's upkeep (ping, `ice`) a kind has, is behind the
//! per-kind seam in `wire`: a Minca relay (§1.4) and a Nostr relay (§1.5) follow the same rules
//! here.

mod wire;

#[cfg(test)]
mod tests;

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use rand_core::CryptoRng;

use crate::core::{
    Backoff, BackoffConfig, BucketConfig, ConnId, Machine, Timestamp, TokenBucket, Wakeup,
};
use crate::crypto::CryptoProvider;
use crate::minca::relay_url::{MAX_SPACE_RELAYS, RelayUrl};
use crate::minca::relay_wire::{Blob, HEARTBEAT_MS, IceServer, IceServers, Topic, Ttl};

use wire::{Codec, Heard, Intent};

/// Rooms one client is in at once: the node's bound, which also bounds the watches one socket
/// owes.
pub use super::room::MAX_ROOMS;

/// Relays a client is configured with (joined in every room). The spec names no limit; a space's
/// own list is at most [`MAX_SPACE_RELAYS`], and a configuration is of the same nature.
pub const MAX_CONFIGURED_RELAYS: usize = 16;

/// Distinct relays the client keeps at once, over all rooms. A room's relays past this are not
/// used (and counted): every relay is a socket, a backoff and a send queue.
pub const MAX_RELAYS: usize = 64;

/// Application sends (publish, drop, fetch, `ice`, and what a Nostr relay's answers make the
/// client send for them: `AUTH`, the refused event again, a fetch's `CLOSE`) one socket may hold
/// waiting for the pacer; a send past it is dropped and counted. The watches a socket owes on opening (at most
/// [`MAX_ROOMS`]), the next page of a read and a ping always fit on top of it, up to
/// [`MAX_QUEUED_FRAMES`].
pub const MAX_QUEUED_SENDS: usize = 256;

/// Frames one socket's queue holds at most: [`MAX_QUEUED_SENDS`], a watch for every room, the
/// next page of every read and a ping. Joining and leaving rooms faster than the pacer sends could
/// pile up watches and unwatches past it; a socket that would is closed and redialled instead,
/// since a reopened socket watches exactly the topics it should (§2.1) and owes nothing else.
pub const MAX_QUEUED_FRAMES: usize = MAX_QUEUED_SENDS + MAX_ROOMS + MAX_READS_PER_RELAY + 1;

/// Reads (fetches being paged) under way on one socket at once.
pub const MAX_READS_PER_RELAY: usize = 16;

/// The reference client's pacing (§2.1): at most 20 messages a second, in bursts of 40.
pub const SEND_PACE: BucketConfig = BucketConfig::new(40, 20);

/// A socket that heard nothing for this long is pinged (§2.1 "for a while"), and pinged again
/// each time this passes. Half a heartbeat: a relay that answered pings before and then stays
/// silent through two of them is given up after 1.5 heartbeats, before the relay itself would
/// close a silent socket.
pub const PING_IDLE_MS: u64 = HEARTBEAT_MS / 2;

/// Pings a relay that answered pings before may leave unanswered before its socket is closed and
/// redialled (§2.1: "has sent nothing since the last two").
pub const PINGS_BEFORE_REDIAL: u32 = 2;

/// A gap in `now` longer than this means the host slept, and the relays let go of its sockets:
/// two heartbeats (§2.1, §1.4).
pub const SLEEP_GAP_MS: u64 = 2 * HEARTBEAT_MS;

/// How long a dial may take before the client gives up on it and redials later.
pub const DIAL_TIMEOUT_MS: u64 = 20_000;

/// The redial schedule (§2.1: "however many attempts fail"): 1 s doubling to 30 s, with jitter.
/// The cap stays below [`SLEEP_GAP_MS`], so a wait for a redial never looks like a sleep.
pub const REDIAL_BACKOFF: BackoffConfig = BackoffConfig {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(30),
    multiplier: 2,
};

/// What the host tells the client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Input {
    /// Join the room whose topic is `topic`, on the configured relays plus `relays` (the space's
    /// own, §4), or update the room's own list if it is joined already. A list of more than
    /// [`MAX_SPACE_RELAYS`] entries, or naming a relay twice, is not applied (§4): the room keeps
    /// its previous list, and [`Output::JoinRefused`] says so.
    Join {
        /// The room's topic (§1.3).
        topic: Topic,
        /// The room's own relays, of any kind; unspoken kinds are kept and passed over.
        relays: Vec<RelayUrl>,
    },
    /// Leave the room: stop watching its topic, and close sockets no other room needs.
    Leave {
        /// The room's topic.
        topic: Topic,
    },
    /// Publish a blob with `ttl: 0` on every connected relay the room is on (§3).
    Publish {
        /// The room's topic.
        topic: Topic,
        /// The sealed blob.
        blob: Blob,
    },
    /// Publish a blob with `ttl: 0` on one relay of the room, if it is connected (a hello on a
    /// socket that just opened, §2).
    PublishVia {
        /// The relay.
        relay: RelayUrl,
        /// The room's topic.
        topic: Topic,
        /// The sealed blob.
        blob: Blob,
    },
    /// Drop a blob to be kept for `ttl` on every connected relay of the topic: the room's if it is
    /// joined, else the configured ones.
    Drop {
        /// The topic.
        topic: Topic,
        /// The sealed blob.
        blob: Blob,
        /// How long relays keep it.
        ttl: Ttl,
    },
    /// Read what every connected relay of the topic keeps, page by page (§1.4).
    Fetch {
        /// The topic.
        topic: Topic,
    },
    /// Ask every connected relay that has TURN for fresh passwords (§3).
    RequestIce,
    /// The socket opened.
    Opened {
        /// The socket, as named by [`Output::Dial`].
        conn: ConnId,
    },
    /// A text frame arrived on the socket.
    Text {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// The socket closed (either side).
    Closed {
        /// The socket.
        conn: ConnId,
    },
    /// The dial failed before the socket opened.
    DialFailed {
        /// The socket.
        conn: ConnId,
    },
    /// The network came back (§2.1): every socket is closed and redialled now.
    Online,
}

/// A relay's state, for status reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayState {
    /// A dial is under way.
    Dialing,
    /// The socket is open.
    Open,
    /// The socket is closed; the client redials at `retry_at`.
    Waiting {
        /// When the next dial goes out.
        retry_at: Timestamp,
        /// Dials that failed in a row.
        failures: u32,
    },
    /// No room needs the relay any more.
    Released,
}

/// What the client asks the host to do, or tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// Open a WebSocket to `url` (the relay's dial URL, §1.2) and name it `conn`.
    Dial {
        /// The name of the socket to open.
        conn: ConnId,
        /// The relay.
        relay: RelayUrl,
        /// The URL to dial: `<kind>+` and any fragment taken off.
        url: String,
    },
    /// Send a text frame on the socket.
    Send {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// Close the socket (or abandon the dial).
    Close {
        /// The socket.
        conn: ConnId,
    },
    /// A blob arrived under a watched topic.
    Blob {
        /// The relay it came through.
        relay: RelayUrl,
        /// The topic.
        topic: Topic,
        /// The blob.
        blob: Blob,
    },
    /// A page of a [`Input::Fetch`] from one relay.
    Fetched {
        /// The relay.
        relay: RelayUrl,
        /// The topic.
        topic: Topic,
        /// The blobs on the page.
        blobs: Vec<Blob>,
        /// Whether this relay's read is over (`more` was false, the page cap was reached, the
        /// relay broke the paging rules, or its socket closed).
        done: bool,
    },
    /// A fetch found no connected relay to ask.
    FetchUnsent {
        /// The topic.
        topic: Topic,
    },
    /// A relay's state changed.
    RelayState {
        /// The relay.
        relay: RelayUrl,
        /// Its new state.
        state: RelayState,
    },
    /// `true` once any relay answers, `false` when none does any more (or none answered at all)
    /// (§3: "Connecting succeeds once any relay answers, and fails only when none does").
    Reachable(bool),
    /// The TURN servers changed: the union of every relay's current offer, or `None` (§3, §10).
    Turn(Option<IceServers>),
    /// A join was refused: the room table is full, or the room's list is invalid (§4).
    JoinRefused {
        /// The room's topic.
        topic: Topic,
    },
}

/// What a relay's frame carried for the application, as [`RelayClient::handle_text`] hands it
/// out: the [`Output::Blob`] and [`Output::Fetched`] that [`Input::Text`] would have queued, a
/// pushed blob still borrowed from the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivered<'a> {
    /// A blob arrived under a watched topic ([`Output::Blob`]).
    Blob {
        /// The relay it came through.
        relay: &'a RelayUrl,
        /// The topic's text (checked as [`Topic::parse`] checks).
        topic: &'a str,
        /// The blob's text (checked as [`Blob::parse`] checks).
        blob: &'a str,
        /// The bytes the blob carries ([`Blob::to_bytes`]), when the client decoded them checking
        /// the blob (a Minca relay's push): a host that opens the blob need not decode it again.
        bytes: Option<&'a [u8]>,
    },
    /// A page of a [`Input::Fetch`] from one relay ([`Output::Fetched`]).
    Page {
        /// The relay.
        relay: &'a RelayUrl,
        /// The topic.
        topic: Topic,
        /// The blobs on the page.
        blobs: Vec<Blob>,
        /// Whether this relay's read is over.
        done: bool,
    },
}

impl Delivered<'_> {
    /// The output [`Input::Text`] queues for it.
    fn into_output(self) -> Output {
        match self {
            Self::Blob {
                relay, topic, blob, ..
            } => Output::Blob {
                relay: relay.clone(),
                topic: Topic::from_checked(topic),
                blob: Blob::from_checked(blob),
            },
            Self::Page {
                relay,
                topic,
                blobs,
                done,
            } => Output::Fetched {
                relay: relay.clone(),
                topic,
                blobs,
                done,
            },
        }
    }
}

/// The client's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientConfig {
    /// The relays the client is configured with, used in every room (at most
    /// [`MAX_CONFIGURED_RELAYS`]; more are not used and are counted).
    pub relays: Vec<RelayUrl>,
}

/// What the client ignored or refused, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Relays named but of a kind the client does not speak (§1.2), counted each time named.
    pub passed_over: u64,
    /// Relays not used because [`MAX_RELAYS`] or [`MAX_CONFIGURED_RELAYS`] was reached.
    pub relays_over_cap: u64,
    /// Joins refused (room table full, list invalid).
    pub joins_refused: u64,
    /// Frames that were not well-formed messages of the relay's kind.
    pub malformed_frames: u64,
    /// Reports about a socket the client does not know (or not in that state).
    pub stray_reports: u64,
    /// Blobs under a topic no room watches on that relay.
    pub unwatched_blobs: u64,
    /// Application sends dropped because a socket's queue was full.
    pub sends_dropped: u64,
    /// Publishes for a room not joined, or with no connected relay.
    pub unrouted: u64,
    /// Fetches not started on a relay because it already had [`MAX_READS_PER_RELAY`] reads.
    pub reads_refused: u64,
    /// Times a gap in `now` showed the host had slept.
    pub sleeps: u64,
    /// Sockets closed because a relay stopped answering pings.
    pub ping_timeouts: u64,
    /// Dials given up after [`DIAL_TIMEOUT_MS`].
    pub dial_timeouts: u64,
    /// Sends or watches a relay refused (a Nostr relay's `OK` false or `CLOSED` that no `AUTH`
    /// could turn, §1.5).
    pub refused: u64,
    /// Sockets closed and redialled because room churn would have queued more than
    /// [`MAX_QUEUED_FRAMES`].
    pub queue_overflows: u64,
}

#[derive(Debug)]
struct Room {
    /// The room's own relays, every kind, as named (§4).
    own: BTreeSet<RelayUrl>,
}

#[derive(Debug)]
struct OpenSocket {
    bucket: TokenBucket,
    /// Frames waiting for the pacer, each with whether it is an application send.
    queue: VecDeque<(String, SendClass)>,
    /// Application sends in `queue`, which [`MAX_QUEUED_SENDS`] bounds.
    app_queued: usize,
    /// Topics watched on this socket.
    watched: BTreeSet<Topic>,
    last_heard: Timestamp,
    next_ping: Timestamp,
    pings_unanswered: u32,
    /// Whether any frame was heard on this socket.
    answered: bool,
}

impl OpenSocket {
    /// Whether [`MAX_QUEUED_SENDS`] application sends wait already; if so the new one is dropped,
    /// and counted in `stats`.
    fn app_full(&self, stats: &mut Stats) -> bool {
        let full = self.app_queued >= MAX_QUEUED_SENDS;
        if full {
            stats.sends_dropped += 1;
        }
        full
    }

    /// Queues `frames` behind what waits for the pacer.
    fn push(&mut self, frames: impl IntoIterator<Item = String>, class: SendClass) {
        for frame in frames {
            if class == SendClass::App {
                self.app_queued += 1;
            }
            self.queue.push_back((frame, class));
        }
    }
}

#[derive(Debug)]
enum Socket {
    Waiting { at: Timestamp },
    Dialing { conn: ConnId, since: Timestamp },
    Open { conn: ConnId, open: OpenSocket },
}

#[derive(Debug)]
struct Relay {
    codec: Codec,
    socket: Socket,
    backoff: Backoff,
    /// §2.1: once a relay answered a ping, silence after pings means its socket is dead.
    answers_pings: bool,
    /// The relay's last `ice` offer in the §2.1 shape (§3: kept per relay).
    ice: Option<IceServers>,
    /// Whether the relay ever offered TURN (§3: `ice` requests go only to those).
    has_turn: bool,
}

impl Relay {
    /// Whether [`RelayClient::drive`] has something to do for this relay at `now`: a redial or
    /// a dial timeout due, a ping due, or sends queued.
    fn has_work(&self, now: Timestamp) -> bool {
        match &self.socket {
            Socket::Waiting { at } => *at <= now,
            Socket::Dialing { since, .. } => {
                now.as_millis() >= since.as_millis().saturating_add(DIAL_TIMEOUT_MS)
            }
            Socket::Open { open, .. } => {
                !open.queue.is_empty() || (self.codec.pings() && now >= open.next_ping)
            }
        }
    }

    /// This relay's next deadline: a redial, a dial timeout, a ping, or the pacer letting a queued
    /// send go (`last_now` is the client's latest time).
    fn wakeup(&self, last_now: Option<Timestamp>) -> Option<Wakeup> {
        match &self.socket {
            Socket::Waiting { at } => Some(Wakeup::new(*at, "relay redial")),
            Socket::Dialing { since, .. } => Some(Wakeup::new(
                since.saturating_add(Duration::from_millis(DIAL_TIMEOUT_MS)),
                "relay dial timeout",
            )),
            Socket::Open { open, .. } => {
                let ping = self
                    .codec
                    .pings()
                    .then(|| Wakeup::new(open.next_ping, "relay ping"));
                let pace = (!open.queue.is_empty()).then(|| {
                    let now = last_now.unwrap_or(Timestamp::ZERO);
                    Wakeup::new(open.bucket.next_available(now), "relay send pacing")
                });
                Wakeup::earliest(ping, pace)
            }
        }
    }

    /// The socket is gone (closed, failed, timed out): forget it and schedule a redial at
    /// `redial_at`, or after the backoff. On the relay itself, so that a pass over every relay can
    /// do it without looking the relay up again.
    fn lose<R: CryptoRng>(
        &mut self,
        now: Timestamp,
        url: &RelayUrl,
        redial_at: Option<Timestamp>,
        outputs: &mut VecDeque<Output>,
        rng: &mut R,
    ) {
        self.end_reads(url, outputs);
        let at = redial_at.unwrap_or_else(|| now.saturating_add(self.backoff.next_delay(rng)));
        self.socket = Socket::Waiting { at };
        outputs.push_back(Output::RelayState {
            relay: url.clone(),
            state: RelayState::Waiting {
                retry_at: at,
                failures: self.backoff.attempts(),
            },
        });
    }

    /// The socket is gone, or going: what it owed is forgotten, and each read under way on it is
    /// reported over ([`Output::Fetched`] with `done`), having no socket to come through.
    fn end_reads(&mut self, url: &RelayUrl, outputs: &mut VecDeque<Output>) {
        for topic in self.codec.reset() {
            outputs.push_back(Output::Fetched {
                relay: url.clone(),
                topic,
                blobs: Vec::new(),
                done: true,
            });
        }
    }

    /// Closes the socket (if any) and redials, at `now` when `immediately` (§2.1: sleep, online),
    /// else after the backoff (a dead socket).
    fn close_and_redial<R: CryptoRng>(
        &mut self,
        now: Timestamp,
        url: &RelayUrl,
        immediately: bool,
        outputs: &mut VecDeque<Output>,
        rng: &mut R,
    ) {
        if let Socket::Dialing { conn, .. } | Socket::Open { conn, .. } = self.socket {
            outputs.push_back(Output::Close { conn });
        }
        if immediately {
            self.backoff.reset();
            self.lose(now, url, Some(now), outputs, rng);
        } else {
            self.lose(now, url, None, outputs, rng);
        }
    }
}

/// What a pass over the relays saw for §3 reachability: whether any socket is open, and whether
/// every relay waits to redial after failing at least once since it last answered; and whether
/// any relay holds a TURN offer (§3), so that a client without one skips a second pass.
#[derive(Clone, Copy, Debug)]
struct Survey {
    relays: usize,
    any_open: bool,
    all_failed: bool,
    offers: bool,
}

impl Default for Survey {
    fn default() -> Self {
        Self {
            relays: 0,
            any_open: false,
            all_failed: true,
            offers: false,
        }
    }
}

impl Survey {
    fn note(&mut self, relay: &Relay) {
        self.relays += 1;
        self.any_open |= matches!(relay.socket, Socket::Open { .. });
        self.offers |= relay.ice.is_some();
        self.all_failed &=
            matches!(relay.socket, Socket::Waiting { .. }) && relay.backoff.attempts() > 0;
    }
}

/// Whether a send comes from the application (bounded by [`MAX_QUEUED_SENDS`]) or from the
/// client's own upkeep (bounded by construction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendClass {
    App,
    Upkeep,
}

/// The relay client machine. See the module docs.
pub struct RelayClient<R> {
    configured: BTreeSet<RelayUrl>,
    rooms: BTreeMap<Topic, Room>,
    relays: BTreeMap<RelayUrl, Relay>,
    next_conn: u64,
    last_now: Option<Timestamp>,
    reachable: Option<bool>,
    turn: Option<IceServers>,
    outputs: VecDeque<Output>,
    stats: Stats,
    provider: &'static dyn CryptoProvider,
    rng: R,
    /// [`Machine::poll_timeout`]'s answer, kept by the end of every `handle` and
    /// `handle_timeout` (the only calls that change what it depends on): the owner asks after
    /// every event of its own, most of which never reach this client, and the answer visits
    /// every relay.
    wakeup: Option<Wakeup>,
}

impl<R> core::fmt::Debug for RelayClient<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The provider and the RNG say nothing useful, and an RNG's state must not reach logs.
        f.debug_struct("RelayClient")
            .field("configured", &self.configured)
            .field("rooms", &self.rooms.len())
            .field("relays", &self.relays)
            .field("reachable", &self.reachable)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> RelayClient<R> {
    /// A client with `config`, in no room yet, drawing redial jitter (and, for relay kinds that
    /// sign, keys) from `rng`; `provider` signs for the kinds that need it.
    pub fn new(config: ClientConfig, provider: &'static dyn CryptoProvider, rng: R) -> Self {
        let mut stats = Stats::default();
        let mut configured = BTreeSet::new();
        for url in config.relays {
            if !Codec::speaks(url.kind()) {
                stats.passed_over += 1;
            }
            if configured.len() >= MAX_CONFIGURED_RELAYS && !configured.contains(&url) {
                stats.relays_over_cap += 1;
            } else {
                configured.insert(url);
            }
        }
        Self {
            configured,
            rooms: BTreeMap::new(),
            relays: BTreeMap::new(),
            next_conn: 0,
            last_now: None,
            reachable: None,
            turn: None,
            outputs: VecDeque::new(),
            stats,
            provider,
            rng,
            wakeup: None,
        }
    }

    /// [`Input::Text`] with what the frame carries for the application (the [`Output::Blob`]s
    /// and [`Output::Fetched`] it would queue) handed to `deliver` as it is read, in order, a
    /// pushed blob still borrowed from `text`: for a host that hands blobs on and keeps none,
    /// which is most of what a client hears. Everything else is queued as for [`Input::Text`].
    pub fn handle_text(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        text: &str,
        deliver: &mut dyn FnMut(Delivered<'_>),
    ) {
        self.check_sleep(now);
        self.text(now, conn, text, Some(deliver));
        self.settle(now);
    }

    /// What ends every input: what is due is done, and the wakeup kept for
    /// [`Machine::poll_timeout`].
    fn settle(&mut self, now: Timestamp) {
        // One pass over the relays drives them and reads what reachability and the wakeup need.
        let (survey, wakeup) = self.drive(now);
        self.reach(survey);
        // With no relay holding an offer the union is empty: nothing to compare unless servers
        // were handed out (most clients never hear an `ice` offer, and the pass reads every relay).
        if survey.offers || self.turn.is_some() {
            self.update_turn(now);
        } else {
            debug_assert!(self.turn_servers(now).is_none());
        }
        self.wakeup = Wakeup::earliest(wakeup, self.turn_wakeup());
    }

    /// What the client ignored or refused so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The TURN servers a connection may use at `now`: the union of every relay's current offer,
    /// expiring at the earliest `expiresAt`, or `None` when no offer is current (§3, §10).
    pub fn turn_servers(&self, now: Timestamp) -> Option<IceServers> {
        let mut servers: Vec<IceServer> = Vec::new();
        let mut expires_at = Timestamp::MAX;
        for offer in self.relays.values().filter_map(|r| r.ice.as_ref()) {
            if !offer.is_current(now) {
                continue;
            }
            expires_at = expires_at.min(offer.expires_at);
            for server in &offer.servers {
                if !servers.contains(server) {
                    servers.push(server.clone());
                }
            }
        }
        (!servers.is_empty()).then_some(IceServers {
            servers,
            expires_at,
        })
    }

    /// Topics the client is in.
    pub fn rooms(&self) -> impl Iterator<Item = &Topic> {
        self.rooms.keys()
    }

    /// Relays the client keeps (dialled, open or waiting to redial).
    pub fn relays(&self) -> impl Iterator<Item = &RelayUrl> {
        self.relays.keys()
    }

    /// Frames waiting for the pacer on the relay's socket (0 if it is not open).
    pub fn queued(&self, relay: &RelayUrl) -> usize {
        match self.relays.get(relay).map(|r| &r.socket) {
            Some(Socket::Open { open, .. }) => open.queue.len(),
            _ => 0,
        }
    }

    /// The relay whose socket (dialling or open) is `conn`. Found by the socket rather than kept
    /// in a table by `conn`: a client has a few relays, so a scan of their sockets is cheaper than
    /// a search that compares URLs, and nothing has to be kept in step with the sockets.
    fn relay_on(&mut self, conn: ConnId) -> Option<(&RelayUrl, &mut Relay)> {
        Self::relay_in(&mut self.relays, conn)
    }

    /// [`RelayClient::relay_on`] borrowing only the relay table.
    fn relay_in(
        relays: &mut BTreeMap<RelayUrl, Relay>,
        conn: ConnId,
    ) -> Option<(&RelayUrl, &mut Relay)> {
        relays.iter_mut().find(|(_, relay)| match relay.socket {
            Socket::Dialing { conn: c, .. } | Socket::Open { conn: c, .. } => c == conn,
            Socket::Waiting { .. } => false,
        })
    }

    /// Whether the room `topic` watches on `relay` (§4: the configured relays and its own).
    fn room_uses(&self, topic: &Topic, relay: &RelayUrl) -> bool {
        self.configured.contains(relay)
            || self
                .rooms
                .get(topic)
                .is_some_and(|room| room.own.contains(relay))
    }

    /// The relays a topic is sent to: its room's if joined, else the configured ones.
    fn relays_of(&self, topic: &Topic) -> Vec<RelayUrl> {
        self.relays
            .keys()
            .filter(|url| {
                if self.rooms.contains_key(topic) {
                    self.room_uses(topic, url)
                } else {
                    self.configured.contains(*url)
                }
            })
            .cloned()
            .collect()
    }

    /// The topics watched on `relay`.
    fn topics_on(&self, relay: &RelayUrl) -> Vec<Topic> {
        self.rooms
            .keys()
            .filter(|topic| self.room_uses(topic, relay))
            .cloned()
            .collect()
    }

    /// Brings the relay table in line with the rooms: adds relays a room needs (up to
    /// [`MAX_RELAYS`]), releases those none needs, and watches or forgets topics on open sockets.
    fn sync_relays(&mut self, now: Timestamp) {
        let mut needed: BTreeSet<RelayUrl> = BTreeSet::new();
        if !self.rooms.is_empty() {
            needed.extend(self.configured.iter().cloned());
            for room in self.rooms.values() {
                needed.extend(room.own.iter().cloned());
            }
        }
        let gone: Vec<RelayUrl> = self
            .relays
            .keys()
            .filter(|url| !needed.contains(*url))
            .cloned()
            .collect();
        for url in gone {
            if let Some(mut relay) = self.relays.remove(&url) {
                match relay.socket {
                    Socket::Dialing { conn, .. } | Socket::Open { conn, .. } => {
                        self.outputs.push_back(Output::Close { conn });
                    }
                    Socket::Waiting { .. } => {}
                }
                // A read under way is cut short by the release as by any close.
                relay.end_reads(&url, &mut self.outputs);
                self.outputs.push_back(Output::RelayState {
                    relay: url,
                    state: RelayState::Released,
                });
            }
        }
        for url in needed {
            if self.relays.contains_key(&url) {
                continue;
            }
            let Some(codec) = Codec::for_kind(&url, self.provider) else {
                continue;
            };
            if self.relays.len() >= MAX_RELAYS {
                self.stats.relays_over_cap += 1;
                continue;
            }
            self.relays.insert(
                url,
                Relay {
                    codec,
                    socket: Socket::Waiting { at: now },
                    backoff: Backoff::new(REDIAL_BACKOFF),
                    answers_pings: false,
                    ice: None,
                    has_turn: false,
                },
            );
        }
        let urls: Vec<RelayUrl> = self.relays.keys().cloned().collect();
        for url in urls {
            self.sync_watches(now, &url);
        }
    }

    /// Watches on the relay's open socket every topic it should, and forgets those it should not
    /// (a Minca relay has no unwatch: blobs of a forgotten topic are ignored from then on).
    fn sync_watches(&mut self, now: Timestamp, url: &RelayUrl) {
        let topics = self.topics_on(url);
        let Some(relay) = self.relays.get_mut(url) else {
            return;
        };
        let Socket::Open { open, .. } = &mut relay.socket else {
            return;
        };
        let forgotten: Vec<Topic> = open
            .watched
            .iter()
            .filter(|t| !topics.contains(t))
            .cloned()
            .collect();
        for topic in forgotten {
            open.watched.remove(&topic);
            let frames = relay
                .codec
                .encode(now, &mut self.rng, Intent::Unwatch(topic));
            open.queue
                .extend(frames.into_iter().map(|f| (f, SendClass::Upkeep)));
        }
        for topic in topics {
            if open.watched.insert(topic.clone()) {
                let frames = relay.codec.encode(now, &mut self.rng, Intent::Watch(topic));
                open.queue
                    .extend(frames.into_iter().map(|f| (f, SendClass::Upkeep)));
            }
        }
        if open.queue.len() > MAX_QUEUED_FRAMES {
            self.stats.queue_overflows += 1;
            self.close_and_redial(now, url, true);
        }
    }

    /// Queues `intent` on the relay's open socket; `false` if it is not open or the queue is full.
    fn send(&mut self, now: Timestamp, url: &RelayUrl, intent: Intent, class: SendClass) -> bool {
        let Some(relay) = self.relays.get_mut(url) else {
            return false;
        };
        let Socket::Open { open, .. } = &mut relay.socket else {
            return false;
        };
        if class == SendClass::App && open.app_full(&mut self.stats) {
            return false;
        }
        let frames = relay.codec.encode(now, &mut self.rng, intent);
        open.push(frames, class);
        true
    }

    fn join(&mut self, now: Timestamp, topic: Topic, relays: Vec<RelayUrl>) {
        let named = relays.len();
        let own: BTreeSet<RelayUrl> = relays.into_iter().collect();
        // §4: at most 8 entries, no duplicates; an invalid list is not applied.
        if named > MAX_SPACE_RELAYS
            || own.len() != named
            || (!self.rooms.contains_key(&topic) && self.rooms.len() >= MAX_ROOMS)
        {
            self.stats.joins_refused += 1;
            self.outputs.push_back(Output::JoinRefused { topic });
            return;
        }
        self.stats.passed_over +=
            own.iter().filter(|url| !Codec::speaks(url.kind())).count() as u64;
        self.rooms.insert(topic, Room { own });
        self.sync_relays(now);
    }

    fn publish(&mut self, now: Timestamp, topic: Topic, blob: Blob, ttl: Ttl) {
        let relays = self.relays_of(&topic);
        let mut sent = false;
        for url in relays {
            sent |= self.send(
                now,
                &url,
                Intent::Drop(topic.clone(), blob.clone(), ttl),
                SendClass::App,
            );
        }
        if !sent {
            self.stats.unrouted += 1;
        }
    }

    fn fetch(&mut self, now: Timestamp, topic: Topic) {
        let mut asked = false;
        for url in self.relays_of(&topic) {
            let Some(relay) = self.relays.get(&url) else {
                continue;
            };
            if !matches!(relay.socket, Socket::Open { .. }) {
                continue;
            }
            if relay.codec.reading(&topic) {
                asked = true;
                continue;
            }
            if !relay.codec.can_read() {
                self.stats.reads_refused += 1;
                continue;
            }
            asked |= self.send(now, &url, Intent::Read(topic.clone()), SendClass::App);
        }
        if !asked {
            self.outputs.push_back(Output::FetchUnsent { topic });
        }
    }

    fn request_ice(&mut self, now: Timestamp) {
        let urls: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, r)| r.has_turn)
            .map(|(u, _)| u.clone())
            .collect();
        for url in urls {
            self.send(now, &url, Intent::Ice, SendClass::App);
        }
    }

    fn opened(&mut self, now: Timestamp, conn: ConnId) {
        let Some((url, relay)) = self.relay_on(conn) else {
            self.stats.stray_reports += 1;
            return;
        };
        let url = url.clone();
        if !matches!(relay.socket, Socket::Dialing { .. }) {
            self.stats.stray_reports += 1;
            return;
        }
        relay.socket = Socket::Open {
            conn,
            open: OpenSocket {
                bucket: SEND_PACE.bucket(now),
                queue: VecDeque::new(),
                app_queued: 0,
                watched: BTreeSet::new(),
                last_heard: now,
                next_ping: now.saturating_add(Duration::from_millis(PING_IDLE_MS)),
                pings_unanswered: 0,
                answered: false,
            },
        };
        self.outputs.push_back(Output::RelayState {
            relay: url.clone(),
            state: RelayState::Open,
        });
        // §2.1: a relay forgets everything when a socket closes, so every topic is watched again.
        self.sync_watches(now, &url);
    }

    /// A frame on `conn`: what it carries for the application goes to `deliver`, or without one
    /// is queued as outputs.
    fn text(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        text: &str,
        mut deliver: Option<&mut dyn FnMut(Delivered<'_>)>,
    ) {
        // Borrowed, not cloned: most frames (a `pong`, a page's `mail`) need no copy of the URL.
        let Some((url, relay)) = Self::relay_in(&mut self.relays, conn) else {
            self.stats.stray_reports += 1;
            return;
        };
        let Relay {
            codec,
            socket,
            backoff,
            answers_pings,
            ice,
            has_turn,
        } = relay;
        let Socket::Open { open, .. } = socket else {
            self.stats.stray_reports += 1;
            return;
        };
        // Any frame, even one we cannot read, shows the socket is alive.
        open.last_heard = now;
        open.next_ping = now.saturating_add(Duration::from_millis(PING_IDLE_MS));
        open.pings_unanswered = 0;
        if !open.answered {
            open.answered = true;
            backoff.reset();
        }
        let (stats, outputs, watched) = (&mut self.stats, &mut self.outputs, &open.watched);
        let mut hand_out = |delivered: Delivered<'_>| match deliver.as_deref_mut() {
            Some(deliver) => deliver(delivered),
            None => outputs.push_back(delivered.into_output()),
        };
        let decoded = codec.decode(now, &mut self.rng, text, &mut |heard| match heard {
            Heard::Blob(topic, blob, bytes) => {
                if watched.contains(topic) {
                    hand_out(Delivered::Blob {
                        relay: url,
                        topic,
                        blob,
                        bytes,
                    });
                } else {
                    stats.unwatched_blobs += 1;
                }
            }
            Heard::Page { topic, blobs, done } => hand_out(Delivered::Page {
                relay: url,
                topic,
                blobs,
                done,
            }),
            Heard::Ice(servers) => {
                *has_turn = true;
                *ice = Some(servers);
            }
            Heard::Pong => *answers_pings = true,
            Heard::Refused => stats.refused += 1,
        });
        if decoded.malformed {
            self.stats.malformed_frames += 1;
        }
        open.push(decoded.replies, SendClass::Upkeep);
        for answer in decoded.answers {
            if !open.app_full(&mut self.stats) {
                open.push([answer], SendClass::App);
            }
        }
        // No reachability update: a frame changes no socket's state, and the settle that ends
        // every input updates it.
    }

    /// The socket is gone (closed, failed, timed out): forget it and schedule a redial.
    fn lost(&mut self, now: Timestamp, url: &RelayUrl, redial_at: Option<Timestamp>) {
        if let Some(relay) = self.relays.get_mut(url) {
            relay.lose(now, url, redial_at, &mut self.outputs, &mut self.rng);
        }
    }

    /// Closes the socket (if any) and redials (see [`Relay::close_and_redial`]).
    fn close_and_redial(&mut self, now: Timestamp, url: &RelayUrl, immediately: bool) {
        if let Some(relay) = self.relays.get_mut(url) {
            relay.close_and_redial(now, url, immediately, &mut self.outputs, &mut self.rng);
        }
    }

    fn socket_gone(&mut self, now: Timestamp, conn: ConnId) {
        let Some((url, _)) = self.relay_on(conn) else {
            self.stats.stray_reports += 1;
            return;
        };
        let url = url.clone();
        self.lost(now, &url, None);
        self.update_reachable();
    }

    /// §2.1: a gap in `now` longer than two heartbeats means the host slept and the relays let go
    /// of its sockets.
    fn check_sleep(&mut self, now: Timestamp) {
        let slept = self
            .last_now
            .is_some_and(|last| now.as_millis() > last.as_millis().saturating_add(SLEEP_GAP_MS));
        if self.last_now.is_none_or(|last| now > last) {
            self.last_now = Some(now);
        }
        if !slept {
            return;
        }
        let live: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, r)| !matches!(r.socket, Socket::Waiting { .. }))
            .map(|(u, _)| u.clone())
            .collect();
        if !live.is_empty() {
            self.stats.sleeps += 1;
        }
        for url in live {
            self.close_and_redial(now, &url, true);
        }
    }

    /// Dials what is due, gives up on slow dials, pings and gives up on silent sockets, and sends
    /// what the pacer allows; answers what the relays look like afterwards (for reachability) and
    /// their earliest deadline.
    fn drive(&mut self, now: Timestamp) -> (Survey, Option<Wakeup>) {
        // Runs after every input, and most find nothing due; handling one relay changes no other's
        // state, so one pass in URL order acts on each as a pass per relay would, and reads each
        // relay once it is done with it.
        let Self {
            relays,
            outputs,
            stats,
            rng,
            next_conn,
            last_now,
            ..
        } = self;
        let mut survey = Survey::default();
        let mut wakeup = None;
        for (url, relay) in relays.iter_mut() {
            if relay.has_work(now) {
                Self::drive_relay(now, url, relay, outputs, stats, rng, next_conn);
            }
            survey.note(relay);
            wakeup = Wakeup::earliest(wakeup, relay.wakeup(*last_now));
        }
        (survey, wakeup)
    }

    /// [`Self::drive`] for one relay that has work at `now`.
    fn drive_relay(
        now: Timestamp,
        url: &RelayUrl,
        relay: &mut Relay,
        outputs: &mut VecDeque<Output>,
        stats: &mut Stats,
        rng: &mut R,
        next_conn: &mut u64,
    ) {
        match &mut relay.socket {
            Socket::Waiting { at } if *at <= now => {
                let conn = ConnId(*next_conn);
                *next_conn += 1;
                relay.socket = Socket::Dialing { conn, since: now };
                outputs.push_back(Output::Dial {
                    conn,
                    relay: url.clone(),
                    url: url.dial_url(),
                });
                outputs.push_back(Output::RelayState {
                    relay: url.clone(),
                    state: RelayState::Dialing,
                });
            }
            Socket::Dialing { since, .. }
                if now.as_millis() >= since.as_millis().saturating_add(DIAL_TIMEOUT_MS) =>
            {
                stats.dial_timeouts += 1;
                relay.close_and_redial(now, url, false, outputs, rng);
            }
            Socket::Open { open, .. } if relay.codec.pings() && now >= open.next_ping => {
                if relay.answers_pings && open.pings_unanswered >= PINGS_BEFORE_REDIAL {
                    stats.ping_timeouts += 1;
                    relay.close_and_redial(now, url, false, outputs, rng);
                    return;
                }
                open.pings_unanswered += 1;
                open.next_ping = now.saturating_add(Duration::from_millis(PING_IDLE_MS));
                let frames = relay.codec.encode(now, rng, Intent::Ping);
                open.queue
                    .extend(frames.into_iter().map(|f| (f, SendClass::Upkeep)));
            }
            _ => {}
        }
        if let Socket::Open { conn, open } = &mut relay.socket {
            while !open.queue.is_empty() && open.bucket.try_take(now) {
                let Some((text, class)) = open.queue.pop_front() else {
                    break;
                };
                if class == SendClass::App {
                    open.app_queued -= 1;
                }
                outputs.push_back(Output::Send { conn: *conn, text });
            }
        }
    }

    /// §3: reachable once any relay answers; unreachable once none is open and every relay has
    /// failed at least once since it last answered.
    fn update_reachable(&mut self) {
        let mut survey = Survey::default();
        for relay in self.relays.values() {
            survey.note(relay);
        }
        self.reach(survey);
    }

    /// [`Self::update_reachable`] from a pass that already looked at every relay.
    fn reach(&mut self, survey: Survey) {
        if survey.relays == 0 {
            // In no room: the next join starts connecting afresh, and reports it.
            self.reachable = None;
            return;
        }
        let now_reachable = if survey.any_open {
            Some(true)
        } else if survey.all_failed {
            Some(false)
        } else {
            self.reachable
        };
        if now_reachable != self.reachable {
            self.reachable = now_reachable;
            if let Some(r) = now_reachable {
                self.outputs.push_back(Output::Reachable(r));
            }
        }
    }

    fn update_turn(&mut self, now: Timestamp) {
        let turn = self.turn_servers(now);
        if turn != self.turn {
            self.turn = turn.clone();
            self.outputs.push_back(Output::Turn(turn));
        }
    }
}

impl<R: CryptoRng> Machine for RelayClient<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        self.check_sleep(now);
        match input {
            Input::Join { topic, relays } => self.join(now, topic, relays),
            Input::Leave { topic } => {
                if self.rooms.remove(&topic).is_some() {
                    self.sync_relays(now);
                }
            }
            Input::Publish { topic, blob } => {
                if self.rooms.contains_key(&topic) {
                    self.publish(now, topic, blob, Ttl::PUBLISH_ONLY);
                } else {
                    self.stats.unrouted += 1;
                }
            }
            Input::PublishVia { relay, topic, blob } => {
                let routed = self.rooms.contains_key(&topic)
                    && self.room_uses(&topic, &relay)
                    && self.send(
                        now,
                        &relay,
                        Intent::Drop(topic, blob, Ttl::PUBLISH_ONLY),
                        SendClass::App,
                    );
                if !routed {
                    self.stats.unrouted += 1;
                }
            }
            Input::Drop { topic, blob, ttl } => self.publish(now, topic, blob, ttl),
            Input::Fetch { topic } => self.fetch(now, topic),
            Input::RequestIce => self.request_ice(now),
            Input::Opened { conn } => self.opened(now, conn),
            Input::Text { conn, text } => self.text(now, conn, &text, None),
            Input::Closed { conn } | Input::DialFailed { conn } => self.socket_gone(now, conn),
            Input::Online => {
                let urls: Vec<RelayUrl> = self.relays.keys().cloned().collect();
                for url in urls {
                    self.close_and_redial(now, &url, true);
                }
            }
        }
        self.settle(now);
    }

    fn poll(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        debug_assert_eq!(self.wakeup, self.next_wakeup());
        self.wakeup
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.check_sleep(now);
        self.settle(now);
    }
}

impl<R> RelayClient<R> {
    /// The earliest of every relay's deadlines and the TURN servers' expiry, as the client's state
    /// stands: what [`Machine::poll_timeout`] answers.
    fn next_wakeup(&self) -> Option<Wakeup> {
        let relays = self.relays.values().fold(None, |next, r| {
            Wakeup::earliest(next, r.wakeup(self.last_now))
        });
        Wakeup::earliest(relays, self.turn_wakeup())
    }

    /// When the TURN servers handed out expire.
    fn turn_wakeup(&self) -> Option<Wakeup> {
        self.turn
            .as_ref()
            .map(|t| Wakeup::new(t.expires_at, "turn servers expire"))
    }
}
