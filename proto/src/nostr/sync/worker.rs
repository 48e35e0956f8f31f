//! The outbound peering-sync worker of spec 002 §6, one machine per enabled `peering.peers`
//! entry, sans I/O.
//!
//! What it does, in the spec's steps:
//!
//! 1. **NIP-11.** It asks for the peer's relay information document ([`Output::FetchInfo`]). The
//!    configured `relayUrl` is refused at once when its host is a non-public address literal
//!    ([`super::address`]); the driver runs every resolved address and every redirect through
//!    [`Worker::check_address`] / [`Worker::check_url`]. The document's `self`, when present,
//!    must be the configured pubkey and `supported_nips` must hold 77; otherwise (or with a
//!    `peering.scopes` list holding no usable scope) the peer is reported unusable and retried on
//!    the long [`UNUSABLE_BACKOFF`], never in a hot loop. A document without `peering.scopes`
//!    (a relay that does not implement spec 002) is synced over [`scope::Scope::implicit`].
//! 2. **NIP-42.** It opens a WebSocket ([`Output::Connect`]), waits for the peer's challenge
//!    (asking for it with a `REQ` after [`AUTH_PROBE_AFTER`] of silence, for a relay that
//!    challenges only when a request needs it), answers a kind 22242 event signed with this relay's key, tagged with the configured
//!    `relayUrl` and the challenge, and goes on only on `OK` true; `OK` false or silence past
//!    [`AUTH_TIMEOUT`] closes and retries on [`RECONNECT_BACKOFF`].
//! 3. **Live first.** It opens the live `REQ` (one filter per scope) from [`LIVE_OVERLAP`] in the
//!    past, before any reconciliation, so an event published while history syncs is not lost.
//! 4. **Reconcile.** Each scope, in pieces ([`super::scope::Piece`]), with one NIP-77 session at
//!    a time as the initiator over the local store's items for the same filter; a piece the peer
//!    (or the local store) finds too large is split by kind range, then by time range. Only the
//!    ids the peer has and this relay lacks are fetched, by id, in `REQ` batches of at most
//!    [`SyncLimits::fetch_batch_ids`] ids; a batch whose events pass
//!    [`SyncLimits::fetch_batch_bytes`] is closed and its unreceived ids asked again in halves,
//!    on the same connection.
//! 5. **Again.** Every [`RECONCILE_INTERVAL`] (15 minutes), and after every reconnect.
//!
//! Every received event is accepted only when it matches a scope at the current time, arrived on
//! the live subscription or on a fetch batch that asked for its id, and verifies (id and
//! signature); then the local kind rules apply as for a local publish (kind 22242 refused, NIP-40
//! expired refused, ephemeral broadcast live and never stored, a NIP-62 request naming this relay
//! vanishes its author, everything else written through the store seam, whose semantics hold
//! addressable `d` tags, kind 5 deletions and vanished authors). An author the store answered
//! [`WriteOutcome::Vanished`] is not asked about again within the batch. Live events that the
//! store took as new are broadcast to local subscribers ([`Output::Broadcast`]); backfill is not.
//! The queue of events waiting for the store is bounded by [`SyncLimits::max_queue_events`] and
//! [`SyncLimits::max_queue_bytes`]; an event that does not fit is dropped, counted, and found by
//! the next reconciliation, which is brought forward. A store failure is counted and the event
//! skipped; nothing waits on it.
//!
//! The status row ([`PeerStatus`], [`Worker::status`], also emitted as [`Output::Status`]) holds
//! the state, the last reconciliation, the lag, the missing count of the last reconciliation and
//! the events fetched, with a heartbeat every [`HEARTBEAT`] so a long reconciliation is never
//! stale ([`PeerStatus::is_stale`]).
//!
//! # Driving it
//!
//! Build with [`Worker::new`] (the first [`Output::FetchInfo`] is queued at once), then follow
//! [`Machine`]'s contract. Each output and the input it wants back:
//!
//! | output | the driver does | and answers |
//! | --- | --- | --- |
//! | [`Output::FetchInfo`] | GET the URL with `Accept: application/nostr+json`, following redirects, running every redirect through [`Worker::check_url`] and every resolved address through [`Worker::check_address`] | [`Input::Info`] with the body, or [`Input::InfoFailed`] |
//! | [`Output::Connect`] | open a WebSocket to the URL (same address checks) | [`Input::Connected`], or [`Input::Disconnected`] |
//! | [`Output::Send`] | send the text frame on that connection | — |
//! | [`Output::Close`] | close that connection; deliver nothing more from it | — |
//! | [`Output::Store`] | run the op on the local store ([`crate::nostr::relay::EventStore::execute`]) | [`Input::Stored`] |
//! | [`Output::Broadcast`] | hand the event to every local session as `session::Input::Live` | — |
//! | [`Output::Status`] | keep the row (admin endpoint, metrics, logs) | — |
//!
//! Text frames received go in as [`Input::Frame`]; a closed socket as [`Input::Disconnected`].
//! Inputs naming another connection than the current one are stale and ignored (counted).

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::net::IpAddr;
use core::time::Duration;

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use serde_json::Value;

use super::address::{self, Refused, UrlError, UrlHost};
use super::scope::{self, Piece, Scope, Split};
use crate::codec::hex;
use crate::core::{Backoff, BackoffConfig, ConnId, Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, Secp256k1Secret};
use crate::nostr::auth;
use crate::nostr::event::{Event, EventId, parse_lower_hex};
use crate::nostr::kinds::{self, KindClass, Vanish};
use crate::nostr::message::{ClientMessage, Filter, RelayMessage, frame, split};
use crate::nostr::relay::{RequestId, StoreOp, StoreReply, WriteOutcome};

/// Spec 002 §6 step 5: reconcile again every 15 minutes.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// How far back the live `REQ` starts (spec 002 §6 step 3, "a short overlap"): two minutes
/// covers the time between connecting and the live subscription opening, and clock skew
/// between the relays.
pub const LIVE_OVERLAP: Duration = Duration::from_secs(120);

/// Reconnect pacing after a disconnect, a refused `AUTH` or a timeout: 1 s doubling to 5 min,
/// with equal jitter. Reset once a reconciliation completes.
pub const RECONNECT_BACKOFF: BackoffConfig = BackoffConfig {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(5 * 60),
    multiplier: 2,
};

/// Retry pacing for a peer found unusable (wrong NIP-11 `self`, no NIP-77, no scopes, a refused
/// address): one hour doubling to a day, so a misconfigured peer is never polled hot.
pub const UNUSABLE_BACKOFF: BackoffConfig = BackoffConfig {
    initial: Duration::from_secs(60 * 60),
    max: Duration::from_secs(24 * 60 * 60),
    multiplier: 2,
};

/// How long the worker waits for a challenge the peer sends on its own before it asks for one
/// (spec 002 §5 "waits for its AUTH challenge"; NIP-42 lets a relay send it at any time, and some,
/// rust-nostr's relay among them, send it only when a request needs it): it then sends
/// [`AUTH_PROBE_SUB`]'s `REQ`, which a relay that wants authentication before reads answers with
/// its challenge. A relay that challenges on connect has done so long before this.
pub const AUTH_PROBE_AFTER: Duration = Duration::from_secs(2);

/// The subscription id of the `REQ` that asks a silent peer for its challenge
/// ([`AUTH_PROBE_AFTER`]); its filter asks for no stored event (`limit` 0), and it is closed at
/// its `EOSE`.
pub const AUTH_PROBE_SUB: &str = "peer-auth-probe";

/// How long the driver has to answer [`Output::FetchInfo`].
pub const INFO_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the driver has to answer [`Output::Connect`].
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the peer has to send its NIP-42 challenge after the socket opens, and then to answer
/// the `AUTH` with `OK` (spec 002 §5 names the wait without a value).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the peer may leave a negentropy message or a fetch batch unanswered before the
/// connection is dropped and retried.
pub const PEER_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A peer's `rate-limited:` answer to a `NEG-OPEN` pauses reconciliation this long.
pub const RATE_LIMITED_PAUSE: Duration = Duration::from_secs(5);

/// A reconciliation that could not take every id it found (the queue or the need list full)
/// runs again this soon after it ends, rather than in [`RECONCILE_INTERVAL`].
pub const OVERFLOW_RETRY: Duration = Duration::from_secs(60);

/// How often the status row is refreshed (its heartbeat), whatever the worker is doing.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// A status row whose heartbeat is older than this is stale (the worker is gone).
pub const STALE_AFTER: Duration = Duration::from_secs(90);

/// Largest NIP-11 document read, in bytes.
pub const MAX_INFO_BYTES: usize = 64 * 1024;

/// How far in the future a received event's `created_at` may be: the relay's own bound for local
/// publishes (`Limits::DEFAULT.max_future_secs`).
pub const MAX_FUTURE_SECS: u64 = 900;

/// Store writes in flight at once.
pub const MAX_WRITES_IN_FLIGHT: usize = 8;

/// How long a worker remembers the ids of the live ephemeral events it broadcast, and how old
/// (by `created_at`) a live ephemeral event may be to be broadcast at all. Spec 002 §6 says
/// ephemeral events are "broadcast live but never stored"; with peering both ways (or any cycle
/// of peers) each relay's broadcast reaches the other's live feed again, and since nothing is
/// stored, nothing marks the event as already seen: it would circle forever. A worker broadcasts
/// each ephemeral id once, and never one older than this window, so an id forgotten once the
/// window has passed cannot come round again (docs/decisions.md).
pub const EPHEMERAL_SEEN_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Most ephemeral ids a worker remembers within [`EPHEMERAL_SEEN_WINDOW`]; past it, a live
/// ephemeral event is not broadcast (counted), so a flood can neither grow the set nor restart a
/// loop.
pub const MAX_EPHEMERAL_SEEN: usize = 16_384;

/// The bounds on one worker (docs/decisions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncLimits {
    /// Events waiting for the store, live and fetched together.
    pub max_queue_events: usize,
    /// Bytes of the events waiting for the store (their frames' lengths).
    pub max_queue_bytes: usize,
    /// Most ids in one fetch `REQ` (within a relay's default cap of 1 000 filter values).
    pub fetch_batch_ids: usize,
    /// The byte budget of one fetch batch: past it the batch is closed and the ids not yet
    /// received are asked again in smaller batches.
    pub fetch_batch_bytes: usize,
    /// Ids found missing and not yet fetched; more are left to the next reconciliation.
    pub max_need_ids: usize,
    /// Most local items one negentropy session is built over; a piece holding more is split.
    pub max_local_items: usize,
    /// Largest negentropy message this worker writes, in bytes before hex (0 for none, else at
    /// least 4 096, as the crate asks).
    pub neg_frame_bytes: u64,
    /// Longest frame read from the peer, in bytes; a longer one is dropped and counted.
    pub max_frame_bytes: usize,
}

impl SyncLimits {
    /// weft's defaults (docs/decisions.md).
    pub const DEFAULT: Self = Self {
        max_queue_events: 10_000,
        max_queue_bytes: 16 * 1024 * 1024,
        fetch_batch_ids: 500,
        fetch_batch_bytes: 4 * 1024 * 1024,
        max_need_ids: 100_000,
        max_local_items: 100_000,
        neg_frame_bytes: 60_000,
        max_frame_bytes: crate::nostr::limits::DEFAULT_MAX_MESSAGE_BYTES,
    };
}

/// One worker's configuration: the peer, this relay, and the policy.
#[derive(Clone)]
pub struct Config {
    /// The configured peer pubkey (`peering.peers[].pubkey`, hex or npub already decoded).
    pub peer_pubkey: [u8; 32],
    /// The configured `relayUrl` (`ws://` or `wss://`): dialled, and the NIP-42 `relay` tag.
    pub relay_url: String,
    /// This relay's own URL, as NIP-62 requests name it.
    pub own_url: String,
    /// This relay's signing key (for NIP-42 only; never sent).
    pub secret: Secp256k1Secret,
    /// Verifies events and signs `AUTH`.
    pub provider: &'static dyn CryptoProvider,
    /// `peering.allowPrivateNetworks`: dial loopback, private and link-local addresses.
    pub allow_private_networks: bool,
    /// The bounds.
    pub limits: SyncLimits,
}

impl core::fmt::Debug for Config {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Config")
            .field("peer_pubkey", &hex::encode(&self.peer_pubkey))
            .field("relay_url", &self.relay_url)
            .field("own_url", &self.own_url)
            .field("allow_private_networks", &self.allow_private_networks)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Why fetching the NIP-11 document failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoError {
    /// An address on the way (resolved, or a redirect's) was refused by the address policy.
    Refused(Refused),
    /// Anything else (DNS, TCP, TLS, HTTP status, a body too long), in words for the status row.
    Failed(String),
}

/// What the worker is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The body of the NIP-11 document asked by [`Output::FetchInfo`].
    Info(String),
    /// [`Output::FetchInfo`] failed.
    InfoFailed(InfoError),
    /// The WebSocket asked by [`Output::Connect`] is open.
    Connected(ConnId),
    /// A text frame from the peer.
    Frame {
        /// The connection.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// The connection closed (or never opened).
    Disconnected(ConnId),
    /// The local store's reply to [`Output::Store`].
    Stored {
        /// The request answered.
        request: RequestId,
        /// The reply.
        reply: StoreReply,
    },
}

/// What the worker asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// GET the peer's NIP-11 document at this `http(s)://` URL; answer [`Input::Info`] or
    /// [`Input::InfoFailed`].
    FetchInfo {
        /// The URL (the `relayUrl` with `ws` → `http`, `wss` → `https`).
        url: String,
    },
    /// Open a WebSocket to `url` and name it `conn`; answer [`Input::Connected`] or
    /// [`Input::Disconnected`].
    Connect {
        /// The id the driver uses for it in later inputs.
        conn: ConnId,
        /// The `relayUrl`.
        url: String,
    },
    /// Send a text frame.
    Send {
        /// The connection.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// Close the connection; nothing more from it is wanted.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Run a store operation on the local store; answer [`Input::Stored`].
    Store {
        /// Names the reply.
        request: RequestId,
        /// The operation.
        op: StoreOp,
    },
    /// Hand this live event to every local session (`session::Input::Live`).
    Broadcast(Event),
    /// The status row changed or its heartbeat is due.
    Status(PeerStatus),
}

/// Where the worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Fetching the NIP-11 document.
    FetchingInfo,
    /// Opening the WebSocket.
    Connecting,
    /// Waiting for the challenge or for `OK` to `AUTH`.
    Authenticating,
    /// Authenticated, live subscription open, a reconciliation running.
    Reconciling,
    /// Authenticated, live subscription open, between reconciliations.
    Live,
    /// Waiting to retry after a failure.
    Backoff,
    /// The peer is unusable; retried on [`UNUSABLE_BACKOFF`].
    Unusable,
}

/// Why the peer is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// The NIP-11 `self` is another pubkey than the configured one.
    SelfMismatch,
    /// `supported_nips` does not hold 77.
    NoNip77,
    /// The document is not a JSON object, or too long.
    BadDocument,
    /// `peering.scopes` is listed but holds no valid scope (an absent list is
    /// [`scope::Scope::implicit`]).
    NoScopes,
    /// The `relayUrl` has no host, or its host is a refused address literal or `localhost`.
    RefusedUrl,
    /// An address on the way to the document was refused.
    RefusedAddress,
}

/// The per-peer status row (spec 002 §6: status, last reconciliation, lag, missing count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    /// The peer.
    pub peer: [u8; 32],
    /// Where the worker is.
    pub state: State,
    /// Why the peer is unusable, when it is.
    pub unusable: Option<Unusable>,
    /// When the last reconciliation completed.
    pub last_reconciliation: Option<Timestamp>,
    /// `now` minus the newest `created_at` accepted from the peer, in seconds ("lag").
    pub lag_secs: Option<u64>,
    /// Ids the last completed reconciliation found missing.
    pub missing: u64,
    /// Events fetched by id since the worker started.
    pub events_fetched: u64,
    /// When this row was last refreshed.
    pub heartbeat: Timestamp,
    /// The last failure, in words.
    pub last_error: Option<String>,
}

impl PeerStatus {
    /// Whether the row's heartbeat is older than [`STALE_AFTER`] at `now`.
    pub fn is_stale(&self, now: Timestamp) -> bool {
        now.saturating_duration_since(self.heartbeat) > STALE_AFTER
    }
}

/// What the worker counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent.
    pub frames_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// `EVENT` frames received.
    pub event_frames: u64,
    /// Frames that did not parse or were too long.
    pub malformed: u64,
    /// Inputs naming an old connection, or replies to nothing asked.
    pub stale: u64,
    /// Events fetched by id and accepted.
    pub fetched: u64,
    /// Live events accepted.
    pub live: u64,
    /// Events the store took as new.
    pub stored: u64,
    /// Events the store already held (or held newer, deleted, vanished).
    pub not_new: u64,
    /// Events outside every scope.
    pub out_of_scope: u64,
    /// Events on a fetch batch that did not ask for them, or on no subscription of ours.
    pub unrequested: u64,
    /// Events whose id or signature does not verify, or refused by the kind rules.
    pub invalid: u64,
    /// Ephemeral events (broadcast when live, never stored).
    pub ephemeral: u64,
    /// Live ephemeral events not broadcast: already broadcast by this worker, older than
    /// [`EPHEMERAL_SEEN_WINDOW`], or past [`MAX_EPHEMERAL_SEEN`].
    pub ephemeral_not_rebroadcast: u64,
    /// Events dropped because the queue was full.
    pub dropped_full: u64,
    /// Store operations that failed.
    pub store_failures: u64,
    /// Events skipped because their author vanished earlier in the batch.
    pub vanish_skipped: u64,
    /// Pieces split by kind range.
    pub kind_splits: u64,
    /// Pieces split by time range.
    pub time_splits: u64,
    /// Pieces too large that could not be split further.
    pub unsplittable: u64,
    /// Fetch batches split for bytes or refused by the peer.
    pub batch_splits: u64,
    /// Ids asked by id that the peer did not send.
    pub not_served: u64,
    /// Reconciliations completed.
    pub reconciliations: u64,
    /// Connections opened.
    pub connections: u64,
    /// Negentropy sessions opened.
    pub neg_sessions: u64,
}

#[derive(Debug)]
enum Phase {
    /// Waiting until `until`, then fetching the document again.
    Waiting {
        until: Timestamp,
    },
    FetchingInfo {
        deadline: Timestamp,
    },
    Connecting {
        conn: ConnId,
        deadline: Timestamp,
    },
    AwaitChallenge {
        conn: ConnId,
        deadline: Timestamp,
        /// When to ask for the challenge ([`AUTH_PROBE_AFTER`]); `None` once asked.
        probe: Option<Timestamp>,
    },
    AwaitOk {
        conn: ConnId,
        auth_id: EventId,
        deadline: Timestamp,
    },
    Ready(ConnId),
}

enum Neg {
    Loading {
        request: RequestId,
        piece: Piece,
    },
    Open {
        sub: String,
        piece: Piece,
        negentropy: Negentropy<'static, NegentropyStorageVector>,
    },
}

struct Round {
    started: Timestamp,
    horizon: u64,
    pieces: VecDeque<Piece>,
    missing: u64,
    overflow: bool,
}

struct Fetch {
    sub: String,
    remaining: BTreeSet<EventId>,
    bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Live,
    Backfill,
}

struct Queued {
    event: Event,
    origin: Origin,
    bytes: usize,
}

enum Pending {
    Items {
        conn: ConnId,
    },
    Write {
        event: Event,
        origin: Origin,
        vanish: bool,
    },
}

/// The outbound sync worker for one peer. `R` supplies the `AUTH` signature's auxiliary
/// randomness and the backoff jitter.
pub struct Worker<R> {
    config: Config,
    rng: R,
    phase: Phase,
    scopes: Vec<Scope>,
    next_conn: u64,
    next_request: u64,
    next_sub: u64,
    reconnect: Backoff,
    unusable_backoff: Backoff,
    // Sync state, reset on every connection.
    live_eose: bool,
    round: Option<Round>,
    next_round: Option<Timestamp>,
    paused_until: Option<Timestamp>,
    neg: Option<Neg>,
    need: VecDeque<EventId>,
    need_set: BTreeSet<EventId>,
    fetch: Option<Fetch>,
    batch_ids: usize,
    waiting_since: Option<Timestamp>,
    // The local write path, kept across connections.
    queue: VecDeque<Queued>,
    queue_bytes: usize,
    writes: usize,
    vanished: BTreeMap<[u8; 32], u64>,
    pending: BTreeMap<RequestId, Pending>,
    newest: Option<u64>,
    /// Live ephemeral ids broadcast, by when they may be forgotten; and the same ids as a set.
    ephemeral_order: BTreeSet<(Timestamp, EventId)>,
    ephemeral_seen: BTreeSet<EventId>,
    status: PeerStatus,
    next_heartbeat: Timestamp,
    out: VecDeque<Output>,
    stats: Stats,
}

impl<R> core::fmt::Debug for Worker<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("phase", &self.phase)
            .field("status", &self.status)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The subscription id of the worker's live `REQ` on a peer (spec 002 §6 step 3).
pub const LIVE_SUB: &str = "peer-live";

impl<R: rand_core::CryptoRng> Worker<R> {
    /// A worker started at `now`; its first output asks for the peer's NIP-11 document (or, for
    /// a `relayUrl` the address policy refuses, reports the peer unusable).
    pub fn new(config: Config, now: Timestamp, rng: R) -> Self {
        let limits = config.limits;
        let mut w = Self {
            status: PeerStatus {
                peer: config.peer_pubkey,
                state: State::FetchingInfo,
                unusable: None,
                last_reconciliation: None,
                lag_secs: None,
                missing: 0,
                events_fetched: 0,
                heartbeat: now,
                last_error: None,
            },
            config,
            rng,
            phase: Phase::Waiting { until: now },
            scopes: Vec::new(),
            next_conn: 0,
            next_request: 0,
            next_sub: 0,
            reconnect: Backoff::new(RECONNECT_BACKOFF),
            unusable_backoff: Backoff::new(UNUSABLE_BACKOFF),
            live_eose: false,
            round: None,
            next_round: None,
            paused_until: None,
            neg: None,
            need: VecDeque::new(),
            need_set: BTreeSet::new(),
            fetch: None,
            batch_ids: limits.fetch_batch_ids.max(1),
            waiting_since: None,
            queue: VecDeque::new(),
            queue_bytes: 0,
            writes: 0,
            vanished: BTreeMap::new(),
            pending: BTreeMap::new(),
            newest: None,
            ephemeral_order: BTreeSet::new(),
            ephemeral_seen: BTreeSet::new(),
            next_heartbeat: now.saturating_add(HEARTBEAT),
            out: VecDeque::new(),
            stats: Stats::default(),
        };
        w.start(now);
        w
    }

    /// The address policy for an address the driver resolved or is redirected to.
    pub fn check_address(&self, addr: IpAddr) -> Result<(), Refused> {
        address::check(addr, self.config.allow_private_networks)
    }

    /// The address policy for a URL (a redirect's `Location`): a refused literal host or
    /// `localhost` is refused; a name is to be resolved and each address checked.
    pub fn check_url<'a>(&self, url: &'a str) -> Result<UrlHost<'a>, UrlError> {
        address::check_url(url, self.config.allow_private_networks)
    }

    /// The status row as of the last input.
    pub fn status(&self) -> &PeerStatus {
        &self.status
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The scopes read from the peer's document.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// Events waiting for the store, and their bytes.
    pub fn queued(&self) -> (usize, usize) {
        (self.queue.len(), self.queue_bytes)
    }

    /// Ids found missing and not yet fetched.
    pub fn need_len(&self) -> usize {
        self.need.len()
    }

    /// The current connection, when one is open or opening.
    pub fn connection(&self) -> Option<ConnId> {
        match self.phase {
            Phase::Connecting { conn, .. }
            | Phase::AwaitChallenge { conn, .. }
            | Phase::AwaitOk { conn, .. }
            | Phase::Ready(conn) => Some(conn),
            Phase::Waiting { .. } | Phase::FetchingInfo { .. } => None,
        }
    }

    fn set_state(&mut self, now: Timestamp, state: State) {
        self.status.state = state;
        self.emit_status(now);
    }

    fn emit_status(&mut self, now: Timestamp) {
        self.status.heartbeat = now;
        self.status.lag_secs = self.newest.map(|n| now.as_secs().saturating_sub(n));
        self.next_heartbeat = now.saturating_add(HEARTBEAT);
        self.out.push_back(Output::Status(self.status.clone()));
    }

    fn start(&mut self, now: Timestamp) {
        match address::check_url(&self.config.relay_url, self.config.allow_private_networks) {
            Ok(_) => {}
            Err(e) => return self.unusable(now, Unusable::RefusedUrl, &e.to_string()),
        }
        let Some(url) = info_url(&self.config.relay_url) else {
            return self.unusable(now, Unusable::RefusedUrl, "relayUrl is not ws:// or wss://");
        };
        self.phase = Phase::FetchingInfo {
            deadline: now.saturating_add(INFO_TIMEOUT),
        };
        self.out.push_back(Output::FetchInfo { url });
        self.set_state(now, State::FetchingInfo);
    }

    fn unusable(&mut self, now: Timestamp, why: Unusable, detail: &str) {
        self.drop_connection();
        let delay = self.unusable_backoff.next_delay(&mut self.rng);
        self.phase = Phase::Waiting {
            until: now.saturating_add(delay),
        };
        self.status.unusable = Some(why);
        self.status.last_error = Some(detail.to_string());
        self.set_state(now, State::Unusable);
    }

    /// A failure after which the worker reconnects on [`RECONNECT_BACKOFF`].
    fn fail(&mut self, now: Timestamp, detail: &str) {
        self.drop_connection();
        let delay = self.reconnect.next_delay(&mut self.rng);
        self.phase = Phase::Waiting {
            until: now.saturating_add(delay),
        };
        self.status.last_error = Some(detail.to_string());
        self.set_state(now, State::Backoff);
    }

    /// Closes the current connection, if any, and forgets everything tied to it.
    fn drop_connection(&mut self) {
        if let Some(conn) = self.connection() {
            self.out.push_back(Output::Close { conn });
        }
        self.phase = Phase::Waiting {
            until: Timestamp::from_millis(0),
        };
        self.live_eose = false;
        self.round = None;
        self.next_round = None;
        self.paused_until = None;
        self.neg = None;
        self.need.clear();
        self.need_set.clear();
        self.fetch = None;
        self.waiting_since = None;
        self.batch_ids = self.config.limits.fetch_batch_ids.max(1);
    }

    fn send(&mut self, conn: ConnId, text: String) {
        self.stats.frames_sent += 1;
        self.out.push_back(Output::Send { conn, text });
    }

    fn request(&mut self, op: StoreOp, pending: Pending) {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.pending.insert(request, pending);
        self.out.push_back(Output::Store { request, op });
    }

    fn sub_id(&mut self, prefix: &str) -> String {
        self.next_sub += 1;
        format!("{prefix}{}", self.next_sub)
    }

    fn on_info(&mut self, now: Timestamp, body: &str) {
        if !matches!(self.phase, Phase::FetchingInfo { .. }) {
            self.stats.stale += 1;
            return;
        }
        if body.len() > MAX_INFO_BYTES {
            return self.unusable(now, Unusable::BadDocument, "NIP-11 document too long");
        }
        let Ok(doc) = serde_json::from_str::<Value>(body) else {
            return self.unusable(now, Unusable::BadDocument, "NIP-11 document is not JSON");
        };
        if !doc.is_object() {
            return self.unusable(
                now,
                Unusable::BadDocument,
                "NIP-11 document is not an object",
            );
        }
        if let Some(own) = doc.get("self") {
            let matches = own
                .as_str()
                .and_then(parse_lower_hex::<32>)
                .is_some_and(|k| k == self.config.peer_pubkey);
            if !matches {
                return self.unusable(
                    now,
                    Unusable::SelfMismatch,
                    "NIP-11 self is not the configured peer pubkey",
                );
            }
        }
        let has_77 = doc
            .get("supported_nips")
            .and_then(Value::as_array)
            .is_some_and(|n| n.iter().any(|v| v.as_u64() == Some(77)));
        if !has_77 {
            return self.unusable(now, Unusable::NoNip77, "the peer does not advertise NIP-77");
        }
        let (scopes, _skipped) = scope::from_document(&doc);
        if scopes.is_empty() {
            return self.unusable(
                now,
                Unusable::NoScopes,
                "the peer advertises no usable scope",
            );
        }
        self.scopes = scopes;
        self.unusable_backoff.reset();
        self.status.unusable = None;
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.phase = Phase::Connecting {
            conn,
            deadline: now.saturating_add(CONNECT_TIMEOUT),
        };
        self.stats.connections += 1;
        self.out.push_back(Output::Connect {
            conn,
            url: self.config.relay_url.clone(),
        });
        self.set_state(now, State::Connecting);
    }

    fn on_info_failed(&mut self, now: Timestamp, e: InfoError) {
        if !matches!(self.phase, Phase::FetchingInfo { .. }) {
            self.stats.stale += 1;
            return;
        }
        match e {
            InfoError::Refused(r) => self.unusable(now, Unusable::RefusedAddress, &r.to_string()),
            InfoError::Failed(why) => self.fail(now, &format!("NIP-11: {why}")),
        }
    }

    fn on_connected(&mut self, now: Timestamp, conn: ConnId) {
        match self.phase {
            Phase::Connecting { conn: c, .. } if c == conn => {
                self.phase = Phase::AwaitChallenge {
                    conn,
                    deadline: now.saturating_add(AUTH_TIMEOUT),
                    probe: Some(now.saturating_add(AUTH_PROBE_AFTER)),
                };
                self.set_state(now, State::Authenticating);
            }
            _ => self.stats.stale += 1,
        }
    }

    fn on_disconnected(&mut self, now: Timestamp, conn: ConnId) {
        if self.connection() == Some(conn) {
            // The driver closed it already: no Close goes out for it.
            self.phase = Phase::Waiting {
                until: Timestamp::from_millis(0),
            };
            self.fail(now, "disconnected");
        } else {
            self.stats.stale += 1;
        }
    }

    fn on_frame(&mut self, now: Timestamp, conn: ConnId, text: &str) {
        if self.connection() != Some(conn) {
            self.stats.stale += 1;
            return;
        }
        self.stats.frames_received += 1;
        if text.len() > self.config.limits.max_frame_bytes {
            self.stats.malformed += 1;
            return;
        }
        let Some(message) = parse_incoming(text) else {
            self.stats.malformed += 1;
            return;
        };
        match (&self.phase, message) {
            (Phase::AwaitChallenge { .. }, Incoming::Relay(RelayMessage::Auth(challenge))) => {
                self.on_challenge(now, conn, &challenge)
            }
            (
                Phase::AwaitOk { auth_id, .. },
                Incoming::Relay(RelayMessage::Ok {
                    event_id,
                    accepted,
                    message,
                }),
            ) if *auth_id == event_id => {
                if accepted {
                    self.on_authenticated(now, conn);
                } else {
                    self.fail(now, &format!("AUTH refused: {message}"));
                }
            }
            (Phase::Ready(_), m) => self.on_ready_message(now, conn, m, text.len()),
            (_, Incoming::Relay(RelayMessage::Eose(sub))) if sub == AUTH_PROBE_SUB => {
                // The peer served the probe without asking for AUTH: nothing more is wanted of it.
                self.send(
                    conn,
                    ClientMessage::Close(AUTH_PROBE_SUB.to_string()).to_text(),
                );
            }
            // A challenge repeated while waiting for OK, a NOTICE, anything before auth: ignored.
            _ => {}
        }
    }

    fn on_challenge(&mut self, now: Timestamp, conn: ConnId, challenge: &str) {
        let signed = auth::build(
            self.config.provider,
            &self.config.secret,
            &mut self.rng,
            now,
            &self.config.relay_url,
            challenge,
        );
        let event = match signed {
            Ok(e) => e,
            Err(e) => return self.fail(now, &format!("signing AUTH: {e}")),
        };
        self.phase = Phase::AwaitOk {
            conn,
            auth_id: event.id,
            deadline: now.saturating_add(AUTH_TIMEOUT),
        };
        self.send(conn, ClientMessage::Auth(event).to_text());
    }

    fn on_authenticated(&mut self, now: Timestamp, conn: ConnId) {
        self.phase = Phase::Ready(conn);
        // Live first, from a short overlap (spec 002 §6 step 3).
        let from = now.saturating_sub(LIVE_OVERLAP).as_secs();
        let filters: Vec<Filter> = self
            .scopes
            .iter()
            .map(|s| s.live_filter(now, from))
            .collect();
        self.send(
            conn,
            ClientMessage::Req {
                subscription: LIVE_SUB.to_string(),
                filters,
            }
            .to_text(),
        );
        // Then reconcile, on every connection.
        self.begin_round(now);
    }

    fn begin_round(&mut self, now: Timestamp) {
        let mut pieces = VecDeque::new();
        for (i, s) in self.scopes.iter().enumerate() {
            pieces.extend(s.pieces(i, now));
        }
        self.round = Some(Round {
            started: now,
            horizon: now.as_secs(),
            pieces,
            missing: 0,
            overflow: false,
        });
        self.next_round = None;
        self.set_state(now, State::Reconciling);
        self.advance(now);
    }

    /// Opens the next negentropy session, or fetches, or ends the round.
    fn advance(&mut self, now: Timestamp) {
        let Phase::Ready(conn) = self.phase else {
            return;
        };
        if self.paused_until.is_some_and(|p| p <= now) {
            self.paused_until = None;
        }
        self.pump_fetch(conn);
        if self.neg.is_some() || self.paused_until.is_some() {
            return;
        }
        let Some(round) = self.round.as_mut() else {
            return;
        };
        if let Some(piece) = round.pieces.pop_front() {
            let filter = piece.filter(&self.scopes[piece.scope]);
            let max = self.config.limits.max_local_items.saturating_add(1);
            let request = RequestId(self.next_request);
            self.request(StoreOp::Items { filter, max, now }, Pending::Items { conn });
            self.neg = Some(Neg::Loading { request, piece });
            return;
        }
        if self.fetch.is_some() || !self.need.is_empty() {
            // The round ends once what it found is fetched.
            return;
        }
        let Some(round) = self.round.take() else {
            return;
        };
        self.stats.reconciliations += 1;
        self.status.last_reconciliation = Some(now);
        self.status.missing = round.missing;
        let next = if round.overflow {
            now.saturating_add(OVERFLOW_RETRY)
        } else {
            self.reconnect.reset();
            round
                .started
                .saturating_add(RECONCILE_INTERVAL)
                .max(now.saturating_add(Duration::from_secs(1)))
        };
        self.next_round = Some(next);
        self.set_state(now, State::Live);
    }

    fn on_items(&mut self, now: Timestamp, request: RequestId, conn: ConnId, reply: StoreReply) {
        let piece = match &self.neg {
            Some(Neg::Loading { request: r, piece })
                if *r == request && self.connection() == Some(conn) =>
            {
                *piece
            }
            _ => {
                self.stats.stale += 1;
                return;
            }
        };
        self.neg = None;
        let items = match reply {
            StoreReply::Items(items) => items,
            _ => {
                self.stats.store_failures += 1;
                if let Some(r) = self.round.as_mut() {
                    r.overflow = true;
                }
                return self.advance(now);
            }
        };
        if items.len() > self.config.limits.max_local_items {
            // Too many here to reconcile at once: split as if the peer had said so.
            return self.split_piece(now, piece);
        }
        let mut storage = NegentropyStorageVector::with_capacity(items.len());
        for (created_at, id) in items {
            let _ = storage.insert(created_at, Id::from_byte_array(id));
        }
        let built = storage
            .seal()
            .and_then(|()| Negentropy::owned(storage, self.config.limits.neg_frame_bytes));
        let mut negentropy = match built {
            Ok(n) => n,
            Err(_) => {
                self.stats.store_failures += 1;
                return self.advance(now);
            }
        };
        let Ok(initial) = negentropy.initiate() else {
            self.stats.store_failures += 1;
            return self.advance(now);
        };
        let sub = self.sub_id("neg-");
        let filter = piece.filter(&self.scopes[piece.scope]);
        self.stats.neg_sessions += 1;
        self.send(
            conn,
            frame(
                "NEG-OPEN",
                [
                    Value::from(sub.as_str()),
                    filter.to_value(),
                    Value::from(hex::encode(&initial)),
                ],
            ),
        );
        self.neg = Some(Neg::Open {
            sub,
            piece,
            negentropy,
        });
    }

    fn split_piece(&mut self, now: Timestamp, piece: Piece) {
        let Some(round) = self.round.as_mut() else {
            return;
        };
        match piece.split(round.horizon) {
            Some((a, b, how)) => {
                match how {
                    Split::ByKind => self.stats.kind_splits += 1,
                    Split::ByTime => self.stats.time_splits += 1,
                }
                round.pieces.push_front(b);
                round.pieces.push_front(a);
            }
            None => {
                self.stats.unsplittable += 1;
                round.overflow = true;
            }
        }
        self.advance(now);
    }

    fn on_ready_message(&mut self, now: Timestamp, conn: ConnId, m: Incoming, bytes: usize) {
        match m {
            Incoming::Relay(RelayMessage::Event {
                subscription,
                event,
            }) => {
                self.stats.event_frames += 1;
                self.on_event(now, conn, &subscription, event, bytes);
            }
            Incoming::Relay(RelayMessage::Eose(sub)) => {
                if sub == LIVE_SUB {
                    self.live_eose = true;
                } else if self.fetch.as_ref().is_some_and(|f| f.sub == sub) {
                    self.end_fetch(now, conn, false);
                }
            }
            Incoming::Relay(RelayMessage::Closed {
                subscription,
                message,
            }) => {
                if subscription == LIVE_SUB {
                    return self.fail(now, &format!("live subscription closed: {message}"));
                }
                if self.fetch.as_ref().is_some_and(|f| f.sub == subscription) {
                    if message.starts_with("rate-limited:") {
                        // Asked again, whole, after a pause.
                        self.paused_until = Some(now.saturating_add(RATE_LIMITED_PAUSE));
                        if let Some(f) = self.fetch.take() {
                            for id in f.remaining.iter().rev() {
                                self.need.push_front(*id);
                            }
                        }
                    } else {
                        self.end_fetch(now, conn, true);
                    }
                }
            }
            Incoming::NegMsg { sub, message } => self.on_neg_msg(now, conn, &sub, &message),
            Incoming::NegErr { sub, reason } => self.on_neg_err(now, &sub, &reason),
            Incoming::Relay(_) => {}
        }
    }

    fn on_neg_msg(&mut self, now: Timestamp, conn: ConnId, sub: &str, message: &[u8]) {
        let Some(Neg::Open {
            sub: s, negentropy, ..
        }) = self.neg.as_mut()
        else {
            self.stats.stale += 1;
            return;
        };
        if s != sub {
            self.stats.stale += 1;
            return;
        }
        let mut have = Vec::new();
        let mut need = Vec::new();
        let result = negentropy.reconcile_with_ids(message, &mut have, &mut need);
        let max_need = self.config.limits.max_need_ids;
        let mut overflow = false;
        let mut found = 0u64;
        for id in need {
            let id: EventId = *id;
            if self.need_set.contains(&id) {
                continue;
            }
            found += 1;
            if self.need_set.len() >= max_need {
                overflow = true;
                continue;
            }
            self.need_set.insert(id);
            self.need.push_back(id);
        }
        if let Some(r) = self.round.as_mut() {
            r.missing += found;
            r.overflow |= overflow;
        }
        match result {
            Ok(Some(next)) => {
                self.send(
                    conn,
                    frame(
                        "NEG-MSG",
                        [Value::from(sub), Value::from(hex::encode(&next))],
                    ),
                );
                self.pump_fetch(conn);
            }
            Ok(None) | Err(_) => {
                if result.is_err() {
                    self.stats.malformed += 1;
                    if let Some(r) = self.round.as_mut() {
                        r.overflow = true;
                    }
                }
                self.send(conn, frame("NEG-CLOSE", [Value::from(sub)]));
                self.neg = None;
                self.advance(now);
            }
        }
    }

    fn on_neg_err(&mut self, now: Timestamp, sub: &str, reason: &str) {
        let piece = match &self.neg {
            Some(Neg::Open { sub: s, piece, .. }) if s == sub => *piece,
            _ => {
                self.stats.stale += 1;
                return;
            }
        };
        self.neg = None;
        if reason.starts_with("blocked:") {
            // NIP-77's "too big" answer: split and retry (spec 002 §6 step 4).
            return self.split_piece(now, piece);
        }
        if let Some(r) = self.round.as_mut() {
            if reason.starts_with("rate-limited:") {
                r.pieces.push_front(piece);
                self.paused_until = Some(now.saturating_add(RATE_LIMITED_PAUSE));
                return;
            }
            r.overflow = true;
        }
        self.status.last_error = Some(format!("NEG-ERR: {reason}"));
        self.advance(now);
    }

    fn pump_fetch(&mut self, conn: ConnId) {
        if self.fetch.is_some() || self.need.is_empty() || self.paused_until.is_some() {
            return;
        }
        let limits = self.config.limits;
        // Only ask for a batch the queue has room for, in count and in bytes.
        let room_events = limits.max_queue_events.saturating_sub(self.queue.len());
        let room_bytes = limits.max_queue_bytes.saturating_sub(self.queue_bytes);
        if room_events == 0 || room_bytes < limits.fetch_batch_bytes.min(limits.max_queue_bytes) {
            return;
        }
        let n = self.batch_ids.min(room_events).min(self.need.len()).max(1);
        let ids: Vec<EventId> = self.need.drain(..n).collect();
        let sub = self.sub_id("fetch-");
        let filter = Filter {
            ids: Some(ids.clone()),
            limit: Some(ids.len() as u64),
            ..Filter::default()
        };
        self.send(
            conn,
            ClientMessage::Req {
                subscription: sub.clone(),
                filters: alloc::vec![filter],
            }
            .to_text(),
        );
        self.fetch = Some(Fetch {
            sub,
            remaining: ids.into_iter().collect(),
            bytes: 0,
        });
    }

    /// Ends the fetch batch: on `EOSE` (ids not sent are not served), or when the peer refused it
    /// or it went over its byte budget (`split`: its unreceived ids are asked again in halves).
    fn end_fetch(&mut self, now: Timestamp, conn: ConnId, split: bool) {
        let Some(fetch) = self.fetch.take() else {
            return;
        };
        self.send(conn, ClientMessage::Close(fetch.sub.clone()).to_text());
        if split && !fetch.remaining.is_empty() {
            if fetch.bytes == 0 && fetch.remaining.len() == 1 {
                // One id refused alone: the peer will not serve it; the next round may.
                self.stats.not_served += 1;
                for id in &fetch.remaining {
                    self.need_set.remove(id);
                }
            } else {
                self.stats.batch_splits += 1;
                self.batch_ids = (self.batch_ids.min(fetch.remaining.len()) / 2).max(1);
                for id in fetch.remaining.iter().rev() {
                    self.need.push_front(*id);
                }
            }
        } else {
            self.stats.not_served += fetch.remaining.len() as u64;
            for id in &fetch.remaining {
                self.need_set.remove(id);
            }
            // A batch that fit: grow back towards the configured size.
            self.batch_ids = self
                .batch_ids
                .saturating_mul(2)
                .min(self.config.limits.fetch_batch_ids.max(1));
        }
        self.advance(now);
    }

    fn on_event(&mut self, now: Timestamp, conn: ConnId, sub: &str, event: Event, bytes: usize) {
        let origin = if sub == LIVE_SUB {
            Origin::Live
        } else if self
            .fetch
            .as_ref()
            .is_some_and(|f| f.sub == sub && f.remaining.contains(&event.id))
        {
            Origin::Backfill
        } else {
            // Not on a subscription of ours, or an id its batch did not ask for.
            self.stats.unrequested += 1;
            return;
        };
        let id = event.id;
        if self.accept(now, event, origin, bytes) && origin == Origin::Backfill {
            self.need_set.remove(&id);
            let budget = self.config.limits.fetch_batch_bytes;
            let over = self.fetch.as_mut().is_some_and(|f| {
                f.remaining.remove(&id);
                f.bytes = f.bytes.saturating_add(bytes);
                f.bytes > budget && !f.remaining.is_empty()
            });
            if over {
                self.end_fetch(now, conn, true);
            }
        }
    }

    /// The acceptance rules of spec 002 §6, then the local kind rules. Whether the event was
    /// valid and in scope (taken, or dropped only for a full queue).
    fn accept(&mut self, now: Timestamp, event: Event, origin: Origin, bytes: usize) -> bool {
        if !self.scopes.iter().any(|s| s.admits(&event, now)) {
            self.stats.out_of_scope += 1;
            return false;
        }
        let ephemeral = kinds::class(event.kind) == KindClass::Ephemeral;
        let limits = self.config.limits;
        if !ephemeral
            && (self.queue.len() >= limits.max_queue_events
                || self.queue_bytes.saturating_add(bytes) > limits.max_queue_bytes)
        {
            // Dropped before the signature is checked: a flood costs no verification.
            self.stats.dropped_full += 1;
            if let Some(r) = self.round.as_mut() {
                r.overflow = true;
            } else if let Some(next) = self.next_round.as_mut() {
                // Found again by a reconciliation brought forward.
                *next = (*next).min(now.saturating_add(OVERFLOW_RETRY));
            }
            return true;
        }
        if event.kind == auth::AUTH_KIND
            || event.created_at > now.as_secs().saturating_add(MAX_FUTURE_SECS)
            || event.verify(self.config.provider).is_err()
            || kinds::refuse_on_arrival(&event, now).is_some()
        {
            self.stats.invalid += 1;
            return false;
        }
        match origin {
            Origin::Backfill => {
                self.stats.fetched += 1;
                self.status.events_fetched += 1;
            }
            Origin::Live => self.stats.live += 1,
        }
        self.newest = Some(
            self.newest
                .map_or(event.created_at, |n| n.max(event.created_at)),
        );
        if ephemeral {
            self.stats.ephemeral += 1;
            // Broadcast live, never stored; one seen only in the live REQ's stored part is not
            // live any more.
            if origin == Origin::Live && self.live_eose {
                if self.first_broadcast(now, &event) {
                    self.out.push_back(Output::Broadcast(event));
                } else {
                    self.stats.ephemeral_not_rebroadcast += 1;
                }
            }
            return true;
        }
        // The stored part of the live REQ predates the subscription: backfill, not broadcast.
        let origin = if origin == Origin::Live && !self.live_eose {
            Origin::Backfill
        } else {
            origin
        };
        self.queue_bytes += bytes;
        self.queue.push_back(Queued {
            event,
            origin,
            bytes,
        });
        self.pump_writes(now);
        true
    }

    /// Whether a live ephemeral `event` is to be broadcast: recent, not broadcast before by this
    /// worker, and with room to remember it (then it is remembered).
    fn first_broadcast(&mut self, now: Timestamp, event: &Event) -> bool {
        let window = EPHEMERAL_SEEN_WINDOW;
        while let Some(&(forget, id)) = self.ephemeral_order.first() {
            if forget >= now {
                break;
            }
            self.ephemeral_order.pop_first();
            self.ephemeral_seen.remove(&id);
        }
        if event.created_at.saturating_add(window.as_secs()) < now.as_secs()
            || self.ephemeral_seen.contains(&event.id)
            || self.ephemeral_seen.len() >= MAX_EPHEMERAL_SEEN
        {
            return false;
        }
        // Kept until the event is too old to be broadcast anyway, so a forgotten id can never
        // pass again.
        let created = Timestamp::from_secs(event.created_at);
        let forget = now.max(created).saturating_add(window);
        self.ephemeral_seen.insert(event.id);
        self.ephemeral_order.insert((forget, event.id));
        true
    }

    fn pump_writes(&mut self, now: Timestamp) {
        while self.writes < MAX_WRITES_IN_FLIGHT {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            self.queue_bytes -= q.bytes;
            if self
                .vanished
                .get(&q.event.pubkey)
                .is_some_and(|t| q.event.created_at <= *t)
            {
                self.stats.vanish_skipped += 1;
                continue;
            }
            let vanish = kinds::vanish_applies(&q.event, &self.config.own_url) == Vanish::Applies;
            let op = if vanish {
                StoreOp::Vanish {
                    event: q.event.clone(),
                }
            } else {
                StoreOp::Write {
                    event: q.event.clone(),
                    now,
                }
            };
            self.writes += 1;
            self.request(
                op,
                Pending::Write {
                    event: q.event,
                    origin: q.origin,
                    vanish,
                },
            );
        }
        if self.queue.is_empty() && self.writes == 0 {
            // The batch is over: the vanish answers cached for it go.
            self.vanished.clear();
        }
    }

    fn on_stored(&mut self, now: Timestamp, request: RequestId, reply: StoreReply) {
        let Some(pending) = self.pending.remove(&request) else {
            self.stats.stale += 1;
            return;
        };
        match pending {
            Pending::Items { conn } => self.on_items(now, request, conn, reply),
            Pending::Write {
                event,
                origin,
                vanish,
            } => {
                self.writes -= 1;
                match reply {
                    StoreReply::Written(WriteOutcome::Stored) | StoreReply::Vanished(_) => {
                        self.stats.stored += 1;
                        if origin == Origin::Live && !vanish {
                            self.out.push_back(Output::Broadcast(event));
                        }
                    }
                    StoreReply::Written(WriteOutcome::Vanished) => {
                        self.stats.not_new += 1;
                        let t = self.vanished.entry(event.pubkey).or_insert(0);
                        *t = (*t).max(event.created_at);
                    }
                    StoreReply::Written(_) => self.stats.not_new += 1,
                    _ => {
                        // Logged through the counters and the status row; the queue moves on.
                        self.stats.store_failures += 1;
                        self.status.last_error = Some("a store write failed".to_string());
                    }
                }
                self.pump_writes(now);
                if let Phase::Ready(conn) = self.phase {
                    self.pump_fetch(conn);
                }
            }
        }
    }

    /// Keeps [`PEER_ANSWER_TIMEOUT`] running while a negentropy message or a fetch batch waits
    /// for the peer, restarted by anything the peer sends.
    fn track_answer(&mut self, now: Timestamp, from_peer: bool) {
        let outstanding = matches!(self.phase, Phase::Ready(_))
            && (matches!(self.neg, Some(Neg::Open { .. })) || self.fetch.is_some());
        if !outstanding {
            self.waiting_since = None;
        } else if from_peer || self.waiting_since.is_none() {
            self.waiting_since = Some(now);
        }
    }

    fn deadline(&self) -> Option<Wakeup> {
        match self.phase {
            Phase::Waiting { until } => Some(Wakeup::new(until, "peering retry")),
            Phase::FetchingInfo { deadline } => Some(Wakeup::new(deadline, "NIP-11 timeout")),
            Phase::Connecting { deadline, .. } => Some(Wakeup::new(deadline, "connect timeout")),
            Phase::AwaitChallenge {
                probe: Some(probe), ..
            } => Some(Wakeup::new(probe, "ask for the AUTH challenge")),
            Phase::AwaitChallenge { deadline, .. } | Phase::AwaitOk { deadline, .. } => {
                Some(Wakeup::new(deadline, "AUTH timeout"))
            }
            Phase::Ready(_) => {
                let answer = self
                    .waiting_since
                    .map(|t| Wakeup::new(t.saturating_add(PEER_ANSWER_TIMEOUT), "peer answer"));
                let round = self
                    .next_round
                    .map(|t| Wakeup::new(t, "periodic reconciliation"));
                let pause = self
                    .paused_until
                    .map(|t| Wakeup::new(t, "rate-limited pause"));
                Wakeup::earliest(Wakeup::earliest(answer, round), pause)
            }
        }
    }
}

impl<R: rand_core::CryptoRng> Machine for Worker<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        let from_peer =
            matches!(&input, Input::Frame { conn, .. } if self.connection() == Some(*conn));
        match input {
            Input::Info(body) => self.on_info(now, &body),
            Input::InfoFailed(e) => self.on_info_failed(now, e),
            Input::Connected(conn) => self.on_connected(now, conn),
            Input::Frame { conn, text } => self.on_frame(now, conn, &text),
            Input::Disconnected(conn) => self.on_disconnected(now, conn),
            Input::Stored { request, reply } => self.on_stored(now, request, reply),
        }
        self.track_answer(now, from_peer);
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        Wakeup::earliest(
            self.deadline(),
            Some(Wakeup::new(self.next_heartbeat, "status heartbeat")),
        )
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        match self.phase {
            Phase::Waiting { until } if until <= now => self.start(now),
            Phase::FetchingInfo { deadline } if deadline <= now => {
                self.fail(now, "NIP-11 timed out")
            }
            Phase::Connecting { deadline, .. } if deadline <= now => {
                self.fail(now, "connect timed out")
            }
            Phase::AwaitChallenge {
                conn,
                deadline,
                probe: Some(probe),
            } if probe <= now && deadline > now => {
                self.phase = Phase::AwaitChallenge {
                    conn,
                    deadline,
                    probe: None,
                };
                let filter = Filter {
                    limit: Some(0),
                    ..Filter::default()
                };
                self.send(
                    conn,
                    ClientMessage::Req {
                        subscription: AUTH_PROBE_SUB.to_string(),
                        filters: alloc::vec![filter],
                    }
                    .to_text(),
                );
            }
            Phase::AwaitChallenge { deadline, .. } if deadline <= now => {
                self.fail(now, "no AUTH challenge")
            }
            Phase::AwaitOk { deadline, .. } if deadline <= now => self.fail(now, "no OK to AUTH"),
            Phase::Ready(_) => {
                if self
                    .waiting_since
                    .is_some_and(|t| t.saturating_add(PEER_ANSWER_TIMEOUT) <= now)
                {
                    return self.fail(now, "the peer stopped answering");
                }
                if self.paused_until.is_some_and(|t| t <= now) {
                    self.paused_until = None;
                    self.advance(now);
                }
                if self.round.is_none() && self.next_round.is_some_and(|t| t <= now) {
                    self.begin_round(now);
                }
                self.track_answer(now, false);
            }
            _ => {}
        }
        if self.next_heartbeat <= now {
            self.emit_status(now);
        }
    }
}

/// The NIP-11 URL of a relay URL: `ws://` → `http://`, `wss://` → `https://`.
pub fn info_url(relay_url: &str) -> Option<String> {
    let (scheme, rest) = relay_url.split_once("://")?;
    let http = if scheme.eq_ignore_ascii_case("wss") {
        "https"
    } else if scheme.eq_ignore_ascii_case("ws") {
        "http"
    } else {
        return None;
    };
    Some(format!("{http}://{rest}"))
}

/// A relay → client frame as the worker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Incoming {
    Relay(RelayMessage),
    NegMsg { sub: String, message: Vec<u8> },
    NegErr { sub: String, reason: String },
}

fn parse_incoming(text: &str) -> Option<Incoming> {
    if text.starts_with("[\"NEG-") {
        let (name, items) = split(text, usize::MAX).ok()?;
        let sub = items.first()?.as_str()?.to_string();
        let second = items.get(1)?.as_str()?;
        return match name.as_str() {
            "NEG-MSG" => {
                if !second
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                {
                    return None;
                }
                Some(Incoming::NegMsg {
                    sub,
                    message: hex::decode(second).ok()?,
                })
            }
            "NEG-ERR" => Some(Incoming::NegErr {
                sub,
                reason: second.to_string(),
            }),
            _ => None,
        };
    }
    RelayMessage::parse(text).ok().map(Incoming::Relay)
}
