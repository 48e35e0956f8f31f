//! One client connection to a Nostr relay, as a sans-IO machine: NIP-01 (`EVENT`/`OK`,
//! `REQ`/`EVENT`/`EOSE`/`CLOSED`, `CLOSE`, `NOTICE`), NIP-42 (`AUTH`), NIP-45 (`COUNT`), with the
//! kind rules of [`crate::nostr::kinds`] and the bounds of [`Limits`], and NIP-77 negentropy
//! (`NEG-OPEN`/`NEG-MSG`/`NEG-CLOSE`/`NEG-ERR`) through the `negentropy` crate over the store's
//! `(created_at, id)` items.
//!
//! The session never touches a store: it asks with [`Output::Store`] and is answered with
//! [`Input::Stored`], and says `OK true` for an event only after the store's reply (persist
//! before ack). Stored events are read a page at a time, and the next page is asked only after
//! the host reports with [`Input::Flushed`] that the frames sent so far are on the socket, so a
//! slow reader holds at most one page. Events accepted by any session of the relay reach the
//! others' live subscriptions by [`Output::Broadcast`], which the host hands every session as
//! [`Input::Live`].
//!
//! What each client message is answered with:
//!
//! | sent | answer |
//! | --- | --- |
//! | a frame over [`Limits::max_message_bytes`] | the socket closes with [`CLOSE_MESSAGE_TOO_BIG`] (1009) |
//! | a frame that does not parse | `OK false invalid:` (its event id readable), `CLOSED invalid:` (its subscription id readable), otherwise `NOTICE invalid:` |
//! | any message over the rate | `OK false rate-limited:` / `CLOSED rate-limited:` / `NOTICE rate-limited:` |
//! | `EVENT` | `OK`: `true` once stored (`duplicate:` when already held), or `false` with `invalid:` (id, signature, size, expired, too far in the future, kind 22242), `auth-required:`, `blocked:` (deleted, vanished), `rate-limited:` (too many writes waiting), `error:` (the store failed) |
//! | `REQ` | stored `EVENT`s, newest first, up to the filter's `limit` (clamped) then `EOSE`, then live `EVENT`s; or `CLOSED` with `auth-required:`, `blocked:` (too many subscriptions), `error:` |
//! | `CLOSE` | nothing; the subscription ends |
//! | `COUNT` | `COUNT` with `{"count": n}`, or `CLOSED` |
//! | `AUTH` | `OK true`, or `OK false` with `invalid:` (a failed NIP-42 check), `duplicate:` (an `AUTH` event already used), `restricted:` (too many pubkeys) |
//! | `NEG-OPEN` | `NEG-MSG`, or `NEG-ERR` with [`NEG_TOO_LARGE`] (over [`Limits::max_neg_items`]), `blocked:` (too many sessions), `auth-required:`, `rate-limited:`, `invalid:` (a malformed negentropy message), `error:` |
//! | `NEG-MSG` | `NEG-MSG` (an empty reply ends nothing: the client decides), or `NEG-ERR` with `closed:` (no such session, or idle past [`Limits::neg_idle_secs`]) or `invalid:` |
//! | `NEG-CLOSE` | nothing; the session ends |
//!
//! Relay peering (spec 002 §4, §7, §8): once an `AUTH` verifies for a pubkey that
//! [`Config::peering`] names an enabled peer, the connection is a peer for the rest of its life
//! (weft's NIP-42 session is the connection's: it ends when the socket closes, and a new
//! connection starts as a client). A peer's connection is held to [`PeerTreatment::limits`]
//! instead of [`Config::limits`] — parsing caps, subscription caps, `limit` and a fresh message
//! bucket of its own — and each of its `REQ`, `COUNT` and `NEG-OPEN` first asks the relay-wide
//! budget with [`Output::Admit`], answered by [`Input::Admitted`]: granted, it is served as any
//! other; refused or unavailable, it is answered `CLOSED rate-limited: … retry in Ns` or
//! `NEG-ERR rate-limited: …`. A subscription waiting for its admission gets no live events.
//! What a peer was served is taken by the host with [`Session::take_served`].

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use negentropy::{Id, Negentropy, NegentropyStorageVector};

use super::store::{Cursor, StoreOp, StoreReply, WriteOutcome};
use super::wire::{self, Inbound, MalformedAnswer, Outbound};
use crate::codec::hex;
use crate::core::{Machine, Timestamp, TokenBucket, Wakeup};
use crate::crypto::CryptoProvider;
use crate::nostr::auth::{self, AUTH_KIND};
use crate::nostr::event::{Event, EventId};
use crate::nostr::expiration::is_expired;
use crate::nostr::kinds::{self, KindClass, Refusal, Vanish};
use crate::nostr::limits::{Limits, NEG_TOO_LARGE};
use crate::nostr::message::{ClientMessage, Filter, RelayMessage};
use crate::nostr::peering::PeerTreatment;
use crate::nostr::peering::limiter::Admission;

/// The WebSocket close code for a frame over the size limit (RFC 6455 §7.4.1, "Message Too Big").
pub const CLOSE_MESSAGE_TOO_BIG: u16 = 1009;

/// Random bytes in a NIP-42 challenge (sent as lower-case hex). NIP-42 sets no length; 16 bytes
/// cannot be guessed.
pub const CHALLENGE_BYTES: usize = 16;

/// Who must authenticate (NIP-42) before what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthPolicy {
    /// Nobody must; a client may still authenticate.
    Optional,
    /// Publishing needs an authenticated pubkey.
    Writes,
    /// Publishing, `REQ` and `COUNT` need an authenticated pubkey.
    All,
}

/// What a session is configured with; the same for every session of a relay.
#[derive(Clone)]
pub struct Config {
    /// This relay's URL, as clients name it in NIP-42 `relay` tags and NIP-62 `relay` tags.
    pub relay_url: String,
    /// The bounds on a connection.
    pub limits: Limits,
    /// Who must authenticate.
    pub auth: AuthPolicy,
    /// Verifies event ids and signatures.
    pub provider: &'static dyn CryptoProvider,
    /// Which authenticated pubkeys make a connection a peer, and the limits a peer gets
    /// (spec 002); [`PeerTreatment::default`] has no peers.
    pub peering: PeerTreatment,
}

impl core::fmt::Debug for Config {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Config")
            .field("relay_url", &self.relay_url)
            .field("limits", &self.limits)
            .field("auth", &self.auth)
            .field("peers", &self.peering.len())
            .field("provider", &self.provider.name())
            .finish()
    }
}

/// Names a store request, so its reply finds its way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What a session is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A text frame from the client.
    Frame(String),
    /// A frame the host did not read because it was longer than it takes
    /// ([`Limits::max_message_bytes`]).
    Oversized {
        /// Its length, in bytes.
        bytes: usize,
    },
    /// The store's reply to [`Output::Store`].
    Stored {
        /// The request answered.
        request: RequestId,
        /// The reply.
        reply: StoreReply,
    },
    /// Every frame sent so far has been written to the socket.
    Flushed,
    /// An event accepted by this relay (from any session), for live subscriptions.
    Live(Event),
    /// The relay-wide peer request budget's answer to [`Output::Admit`].
    Admitted {
        /// The ask answered.
        request: RequestId,
        /// The answer.
        admission: Admission,
    },
}

/// What a session asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a frame to the client.
    Send(Outbound),
    /// Run a store operation and answer with [`Input::Stored`] naming `request`.
    Store {
        /// Names the reply.
        request: RequestId,
        /// The operation.
        op: StoreOp,
    },
    /// Hand this accepted event to every session of the relay (this one included) as
    /// [`Input::Live`].
    Broadcast(Event),
    /// Take one on-demand request (`REQ`, `COUNT` or `NEG-OPEN`) from `peer`'s relay-wide
    /// budget (spec 002 §8) and answer with [`Input::Admitted`] naming `request`. Only a peer's
    /// connection asks.
    Admit {
        /// Names the answer.
        request: RequestId,
        /// The peer's pubkey.
        peer: [u8; 32],
    },
    /// Close the socket with this code; the session takes nothing more.
    Close {
        /// The WebSocket close code.
        code: u16,
        /// Why, for the close frame.
        reason: &'static str,
    },
}

/// What the session counted, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames that did not parse.
    pub malformed: u64,
    /// Messages refused by the rate limit.
    pub rate_limited: u64,
    /// Events stored.
    pub stored: u64,
    /// Events refused.
    pub refused: u64,
    /// Store replies naming no request in flight (a subscription closed or replaced meanwhile).
    pub stale_replies: u64,
    /// Events from the store that did not match the query (dropped, never sent).
    pub store_mismatches: u64,
    /// Subscriptions closed because the reader was too slow.
    pub slow_closes: u64,
    /// A peer's requests refused by its request budget (or for want of one).
    pub budget_refusals: u64,
}

/// What a peer was served since the host last took it ([`Session::take_served`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// On-demand requests admitted.
    pub requests: u64,
    /// Events sent (stored and live).
    pub events: u64,
}

/// What one finished filter of a `REQ` sent, to skip sending an event twice for a later filter.
#[derive(Debug, Clone, Copy)]
enum Sent {
    /// Nothing (`limit` 0).
    Nothing,
    /// Every matching event.
    All,
    /// The matching events down to this place (its `limit` reached).
    UpTo(Cursor),
}

#[derive(Debug)]
struct Stored {
    filter: usize,
    after: Option<Cursor>,
    remaining: u64,
    sent: Vec<Sent>,
    request: Option<RequestId>,
    waiting_flush: bool,
}

#[derive(Debug)]
struct Subscription {
    filters: Vec<Filter>,
    /// `None` once `EOSE` is sent.
    stored: Option<Stored>,
    /// The budget ask a peer's subscription waits for before anything is read or sent.
    admission: Option<RequestId>,
}

/// A peer's request waiting for its budget.
#[derive(Debug)]
enum Asked {
    Req(String),
    Count(String, Vec<Filter>),
    NegOpen(String),
}

#[derive(Debug)]
enum Pending {
    Write(Event),
    Vanish(EventId),
    Query(String),
    Count(String),
    Items(String),
    Admit(Asked),
}

/// A NIP-77 session.
enum Neg {
    /// A peer's session waiting for its request budget.
    Admitting {
        request: RequestId,
        filter: Filter,
        initial: Vec<u8>,
    },
    /// Waiting for the store's items; the client's first message kept until then.
    Loading {
        request: RequestId,
        initial: Vec<u8>,
    },
    /// Reconciling; the relay's answer sent, waiting for the client.
    Open {
        negentropy: Negentropy<'static, NegentropyStorageVector>,
        since: Timestamp,
    },
}

/// One client connection's relay session.
pub struct Session {
    config: Config,
    /// The bounds in force: [`Config::limits`], or the peer's once a peer authenticated.
    limits: Limits,
    /// The enabled peer this connection authenticated as, if any.
    peer: Option<[u8; 32]>,
    served: Served,
    challenge: String,
    authed: BTreeSet<[u8; 32]>,
    auth_ids: BTreeSet<EventId>,
    bucket: TokenBucket,
    subs: BTreeMap<String, Subscription>,
    negs: BTreeMap<String, Neg>,
    pending: BTreeMap<RequestId, Pending>,
    writes: usize,
    counts: usize,
    next_request: u64,
    unflushed: usize,
    out: VecDeque<Output>,
    closed: bool,
    stats: Stats,
}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session")
            .field("subscriptions", &self.subs.len())
            .field("pending", &self.pending.len())
            .field("closed", &self.closed)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

const OK_EVENT_TOO_LARGE: &str = "invalid: event too large";
const OK_KIND_22242: &str = "invalid: kind 22242 is sent in AUTH, not EVENT";
const OK_FUTURE: &str = "invalid: created_at too far in the future";
const OK_EXPIRED: &str = "invalid: event has expired";
const OK_VANISH_NO_RELAY: &str = "invalid: a request to vanish needs a relay tag";
const AUTH_REQUIRED: &str = "auth-required: authenticate first";
const RATE_LIMITED: &str = "rate-limited: slow down";
const OK_TOO_MANY_WRITES: &str = "rate-limited: too many events waiting to be stored";
const CLOSED_TOO_MANY_SUBS: &str = "blocked: too many open subscriptions";
const READS_WAITING: &str = "rate-limited: too many reads waiting for the store";
const CLOSED_SLOW: &str = "error: the reader is too slow for this subscription";

impl Session {
    /// A session for a connection opened at `now`; its NIP-42 challenge is drawn from `rng` and
    /// sent first.
    pub fn new(config: Config, now: Timestamp, rng: &mut dyn rand_core::CryptoRng) -> Self {
        let mut bytes = [0u8; CHALLENGE_BYTES];
        rng.fill_bytes(&mut bytes);
        let challenge = hex::encode(&bytes);
        let bucket = config.limits.messages.bucket(now);
        let limits = config.limits;
        let mut s = Self {
            config,
            limits,
            peer: None,
            served: Served::default(),
            challenge: challenge.clone(),
            authed: BTreeSet::new(),
            auth_ids: BTreeSet::new(),
            bucket,
            subs: BTreeMap::new(),
            negs: BTreeMap::new(),
            pending: BTreeMap::new(),
            writes: 0,
            counts: 0,
            next_request: 0,
            unflushed: 0,
            out: VecDeque::new(),
            closed: false,
            stats: Stats::default(),
        };
        s.send(RelayMessage::Auth(challenge));
        s
    }

    /// The NIP-42 challenge this connection was sent.
    pub fn challenge(&self) -> &str {
        &self.challenge
    }

    /// The enabled peer this connection authenticated as: `Some` only after a verified `AUTH`
    /// from a pubkey [`Config::peering`] names.
    pub fn peer(&self) -> Option<&[u8; 32]> {
        self.peer.as_ref()
    }

    /// The bounds in force on this connection (the peer's once it is a peer).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What this peer connection was served since the last call, and resets it; `None` for a
    /// client connection or when nothing was served. Accounting only: taking it or not changes
    /// no answer.
    pub fn take_served(&mut self) -> Option<([u8; 32], Served)> {
        let peer = self.peer?;
        let served = core::mem::take(&mut self.served);
        (served != Served::default()).then_some((peer, served))
    }

    /// The pubkeys authenticated on this connection.
    pub fn authenticated(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.authed.iter()
    }

    /// The open subscription ids.
    pub fn subscriptions(&self) -> impl Iterator<Item = &str> {
        self.subs.keys().map(String::as_str)
    }

    /// The open NIP-77 session ids.
    pub fn neg_sessions(&self) -> impl Iterator<Item = &str> {
        self.negs.keys().map(String::as_str)
    }

    /// Store requests in flight.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    /// Whether the session asked for the socket to close.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// What it counted.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn send(&mut self, m: RelayMessage) {
        self.send_out(Outbound::Relay(m));
    }

    fn send_out(&mut self, o: Outbound) {
        self.unflushed = self.unflushed.saturating_add(1);
        self.out.push_back(Output::Send(o));
    }

    fn ok(&mut self, event_id: EventId, accepted: bool, message: &str) {
        if !accepted {
            self.stats.refused += 1;
        }
        self.send(RelayMessage::Ok {
            event_id,
            accepted,
            message: message.to_string(),
        });
    }

    fn closed_sub(&mut self, subscription: String, message: &str) {
        self.send(RelayMessage::Closed {
            subscription,
            message: message.to_string(),
        });
    }

    fn store(&mut self, op: StoreOp, pending: Pending) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.pending.insert(request, pending);
        self.out.push_back(Output::Store { request, op });
        request
    }

    fn reads_need_auth(&self) -> bool {
        self.config.auth == AuthPolicy::All && self.authed.is_empty()
    }

    fn writes_need_auth(&self) -> bool {
        self.config.auth != AuthPolicy::Optional && self.authed.is_empty()
    }

    fn on_frame(&mut self, now: Timestamp, text: &str) {
        if text.len() > self.limits.max_message_bytes {
            self.close_too_big();
            return;
        }
        let limits = self.limits;
        let message = match wire::parse(text, &limits) {
            Ok(m) => m,
            Err(bad) => {
                self.stats.malformed += 1;
                if !self.bucket.try_take(now) || self.backlogged() {
                    // A flood of garbage is counted, not answered frame by frame.
                    self.stats.rate_limited += 1;
                    return;
                }
                let why = format!("invalid: {}", bad.error);
                match bad.answer {
                    MalformedAnswer::Ok(id) => self.ok(id, false, &why),
                    MalformedAnswer::Closed(sub) => self.closed_sub(sub, &why),
                    MalformedAnswer::NegErr(sub) => {
                        self.negs.remove(&sub);
                        self.neg_err(sub, &why);
                    }
                    MalformedAnswer::Notice => self.send(RelayMessage::Notice(why)),
                }
                return;
            }
        };
        if !self.bucket.try_take(now) {
            self.stats.rate_limited += 1;
            if self.backlogged() {
                // The client reads none of its answers: they are not queued without end.
                if let Inbound::Client(ClientMessage::Req { subscription, .. }) = message {
                    self.subs.remove(&subscription);
                }
                return;
            }
            match message {
                Inbound::Client(ClientMessage::Event(e) | ClientMessage::Auth(e)) => {
                    self.ok(e.id, false, RATE_LIMITED)
                }
                Inbound::Client(ClientMessage::Req { subscription, .. })
                | Inbound::Count { subscription, .. } => {
                    // A refused REQ replacing an open one leaves nothing open under its id.
                    self.subs.remove(&subscription);
                    self.closed_sub(subscription, RATE_LIMITED)
                }
                Inbound::NegOpen { subscription, .. } | Inbound::NegMsg { subscription, .. } => {
                    // After a NEG-ERR the session is closed (NIP-77).
                    self.negs.remove(&subscription);
                    self.neg_err(subscription, RATE_LIMITED)
                }
                _ => self.send(RelayMessage::Notice(RATE_LIMITED.to_string())),
            }
            return;
        }
        match message {
            Inbound::Client(ClientMessage::Event(e)) => self.on_event(now, e),
            Inbound::Client(ClientMessage::Req {
                subscription,
                filters,
            }) => self.on_req(now, subscription, filters),
            Inbound::Client(ClientMessage::Close(sub)) => {
                self.subs.remove(&sub);
            }
            Inbound::Client(ClientMessage::Auth(e)) => self.on_auth(now, &e),
            Inbound::Count {
                subscription,
                filters,
            } => self.on_count(now, subscription, filters),
            Inbound::NegOpen {
                subscription,
                filter,
                message,
            } => self.on_neg_open(now, subscription, filter, message),
            Inbound::NegMsg {
                subscription,
                message,
            } => self.on_neg_msg(now, subscription, &message),
            Inbound::NegClose(sub) => {
                self.negs.remove(&sub);
            }
        }
    }

    fn neg_err(&mut self, subscription: String, reason: &str) {
        self.send_out(Outbound::NegErr {
            subscription,
            reason: reason.to_string(),
        });
    }

    fn on_neg_open(
        &mut self,
        now: Timestamp,
        subscription: String,
        filter: Filter,
        initial: Vec<u8>,
    ) {
        // NIP-77: a NEG-OPEN under an open id closes that session first.
        self.negs.remove(&subscription);
        if self.reads_need_auth() {
            return self.neg_err(subscription, AUTH_REQUIRED);
        }
        if self.negs.len() >= self.limits.max_neg_sessions {
            return self.neg_err(subscription, "blocked: too many negentropy sessions");
        }
        if self.reads_waiting() {
            return self.neg_err(subscription, READS_WAITING);
        }
        if self.peer.is_some() {
            let request = self.admit(Asked::NegOpen(subscription.clone()));
            self.negs.insert(
                subscription,
                Neg::Admitting {
                    request,
                    filter,
                    initial,
                },
            );
            return;
        }
        self.load_items(now, subscription, filter, initial);
    }

    /// Asks the store for a NIP-77 session's items.
    fn load_items(
        &mut self,
        now: Timestamp,
        subscription: String,
        filter: Filter,
        initial: Vec<u8>,
    ) {
        let max = self.limits.max_neg_items.saturating_add(1);
        let request = self.store(
            StoreOp::Items { filter, max, now },
            Pending::Items(subscription.clone()),
        );
        self.negs
            .insert(subscription, Neg::Loading { request, initial });
    }

    fn on_items(
        &mut self,
        now: Timestamp,
        subscription: String,
        request: RequestId,
        reply: StoreReply,
    ) {
        let Some(Neg::Loading { request: r, .. }) = self.negs.get(&subscription) else {
            self.stats.stale_replies += 1;
            return;
        };
        if *r != request {
            self.stats.stale_replies += 1;
            return;
        }
        let Some(Neg::Loading { initial, .. }) = self.negs.remove(&subscription) else {
            return;
        };
        let items = match reply {
            StoreReply::Items(items) => items,
            StoreReply::Failed(e) => return self.neg_err(subscription, &format!("error: {e}")),
            _ => {
                return self.neg_err(subscription, "error: the store answered something else");
            }
        };
        if items.len() > self.limits.max_neg_items {
            return self.neg_err(subscription, NEG_TOO_LARGE);
        }
        let mut storage = NegentropyStorageVector::with_capacity(items.len());
        for (created_at, id) in items {
            // Inserting into an unsealed vector has no failure path.
            let _ = storage.insert(created_at, Id::from_byte_array(id));
        }
        let built = storage
            .seal()
            .and_then(|()| Negentropy::owned(storage, self.limits.neg_frame_bytes));
        let mut negentropy = match built {
            Ok(n) => n,
            Err(e) => return self.neg_err(subscription, &format!("error: {e}")),
        };
        match negentropy.reconcile(&initial) {
            Ok(message) => {
                self.send_out(Outbound::NegMsg {
                    subscription: subscription.clone(),
                    message,
                });
                self.negs.insert(
                    subscription,
                    Neg::Open {
                        negentropy,
                        since: now,
                    },
                );
            }
            Err(e) => self.neg_err(subscription, &format!("invalid: {e}")),
        }
    }

    fn on_neg_msg(&mut self, now: Timestamp, subscription: String, message: &[u8]) {
        match self.negs.get_mut(&subscription) {
            Some(Neg::Open { negentropy, since }) => match negentropy.reconcile(message) {
                Ok(reply) => {
                    *since = now;
                    self.send_out(Outbound::NegMsg {
                        subscription,
                        message: reply,
                    });
                }
                Err(e) => {
                    self.negs.remove(&subscription);
                    self.neg_err(subscription, &format!("invalid: {e}"));
                }
            },
            Some(Neg::Loading { .. } | Neg::Admitting { .. }) => {
                // The client spoke before the relay's first answer: not the protocol's turn.
                self.negs.remove(&subscription);
                self.neg_err(
                    subscription,
                    "invalid: NEG-MSG before the relay answered NEG-OPEN",
                );
            }
            None => self.neg_err(subscription, "closed: no such negentropy session"),
        }
    }

    fn neg_deadline(&self) -> Option<Timestamp> {
        let idle = core::time::Duration::from_secs(self.limits.neg_idle_secs);
        self.negs
            .values()
            .filter_map(|n| match n {
                // A session waiting for the store is the relay's delay, not the client's.
                Neg::Loading { .. } | Neg::Admitting { .. } => None,
                Neg::Open { since, .. } => Some(*since),
            })
            .min()
            .map(|t| t.saturating_add(idle))
    }

    /// Whether as many store reads are waiting as subscriptions could ever need: twice
    /// [`Limits::max_subscriptions`] plus [`Limits::max_neg_sessions`]. Reads of subscriptions
    /// closed or replaced meanwhile stay waiting until the store answers; this bounds them.
    fn reads_waiting(&self) -> bool {
        let limits = &self.limits;
        let bound = limits
            .max_subscriptions
            .saturating_mul(2)
            .saturating_add(limits.max_neg_sessions);
        self.pending
            .values()
            .filter(|p| matches!(p, Pending::Query(_) | Pending::Items(_) | Pending::Admit(_)))
            .count()
            >= bound
    }

    /// Whether the frames sent and not yet flushed reach [`Limits::max_unflushed_frames`].
    fn backlogged(&self) -> bool {
        self.unflushed >= self.limits.max_unflushed_frames
    }

    fn close_too_big(&mut self) {
        self.stats.malformed += 1;
        self.closed = true;
        self.out.push_back(Output::Close {
            code: CLOSE_MESSAGE_TOO_BIG,
            reason: "message too big",
        });
    }

    fn on_event(&mut self, now: Timestamp, event: Event) {
        let id = event.id;
        let limits = self.limits;
        if event.to_json().len() > limits.max_event_bytes {
            return self.ok(id, false, OK_EVENT_TOO_LARGE);
        }
        let vanish = kinds::vanish_applies(&event, &self.config.relay_url) == Vanish::Applies;
        // NIP-62: a relay that restricts who may post follows a request to vanish "regardless
        // of the user's status"; the signature is the proof it needs.
        if self.writes_need_auth() && !vanish {
            return self.ok(id, false, AUTH_REQUIRED);
        }
        if event.kind == AUTH_KIND {
            return self.ok(id, false, OK_KIND_22242);
        }
        if let Some(max) = limits.max_future_secs
            && event.created_at > now.as_secs().saturating_add(max)
        {
            return self.ok(id, false, OK_FUTURE);
        }
        if let Err(e) = event.verify(self.config.provider) {
            return self.ok(id, false, &format!("invalid: {e}"));
        }
        match kinds::refuse_on_arrival(&event, now) {
            Some(Refusal::Expired) => return self.ok(id, false, OK_EXPIRED),
            Some(Refusal::VanishWithoutRelay) => return self.ok(id, false, OK_VANISH_NO_RELAY),
            None => {}
        }
        if kinds::class(event.kind) == KindClass::Ephemeral {
            self.ok(id, true, "");
            self.out.push_back(Output::Broadcast(event));
            return;
        }
        if self.writes >= limits.max_pending_writes {
            return self.ok(id, false, OK_TOO_MANY_WRITES);
        }
        self.writes += 1;
        if vanish {
            self.store(StoreOp::Vanish { event }, Pending::Vanish(id));
        } else {
            self.store(
                StoreOp::Write {
                    event: event.clone(),
                    now,
                },
                Pending::Write(event),
            );
        }
    }

    fn on_auth(&mut self, now: Timestamp, event: &Event) {
        if self.auth_ids.contains(&event.id) {
            return self.ok(
                event.id,
                false,
                "duplicate: this AUTH event was already used",
            );
        }
        match auth::check(
            self.config.provider,
            event,
            now,
            &self.config.relay_url,
            &self.challenge,
        ) {
            Err(e) => self.ok(event.id, false, &format!("invalid: {e}")),
            Ok(pubkey) if self.authed.contains(&pubkey) => {
                self.ok(event.id, true, "duplicate: already authenticated")
            }
            Ok(_) if self.authed.len() >= self.limits.max_auth_pubkeys => self.ok(
                event.id,
                false,
                "restricted: too many pubkeys authenticated on this connection",
            ),
            Ok(pubkey) => {
                self.authed.insert(pubkey);
                self.auth_ids.insert(event.id);
                if self.peer.is_none() && self.config.peering.is_peer(&pubkey) {
                    // Spec 002 §4 step 5, §7: a peer's limits and its own message bucket.
                    self.peer = Some(pubkey);
                    self.limits = self.config.peering.limits;
                    self.bucket = self.limits.messages.bucket(now);
                }
                self.ok(event.id, true, "");
            }
        }
    }

    fn on_req(&mut self, now: Timestamp, subscription: String, filters: Vec<Filter>) {
        // NIP-01: a REQ under an open id replaces it; a stale store reply is then dropped.
        self.subs.remove(&subscription);
        if self.reads_need_auth() {
            return self.closed_sub(subscription, AUTH_REQUIRED);
        }
        if self.subs.len() >= self.limits.max_subscriptions {
            return self.closed_sub(subscription, CLOSED_TOO_MANY_SUBS);
        }
        if self.reads_waiting() {
            return self.closed_sub(subscription, READS_WAITING);
        }
        let limits = self.limits;
        let first = limits.stored_events_for(filters[0].limit);
        let admission = self
            .peer
            .map(|_| self.admit(Asked::Req(subscription.clone())));
        self.subs.insert(
            subscription.clone(),
            Subscription {
                filters,
                stored: Some(Stored {
                    filter: 0,
                    after: None,
                    remaining: first,
                    sent: Vec::new(),
                    request: None,
                    waiting_flush: false,
                }),
                admission,
            },
        );
        if admission.is_none() {
            self.advance(now, &subscription);
        }
    }

    /// Asks the relay-wide budget for one of this peer's requests.
    fn admit(&mut self, asked: Asked) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        let peer = self.peer.unwrap_or_default();
        self.pending.insert(request, Pending::Admit(asked));
        self.out.push_back(Output::Admit { request, peer });
        request
    }

    fn on_admitted(&mut self, now: Timestamp, request: RequestId, admission: Admission) {
        if !matches!(self.pending.get(&request), Some(Pending::Admit(_))) {
            self.stats.stale_replies += 1;
            return;
        }
        let Some(Pending::Admit(asked)) = self.pending.remove(&request) else {
            return;
        };
        let refusal = crate::nostr::peering::limiter::refusal_reason(admission);
        match asked {
            Asked::Req(sub) => {
                let current = self
                    .subs
                    .get(&sub)
                    .is_some_and(|s| s.admission == Some(request));
                if !current {
                    self.stats.stale_replies += 1;
                    return;
                }
                match refusal {
                    None => {
                        self.served.requests += 1;
                        if let Some(s) = self.subs.get_mut(&sub) {
                            s.admission = None;
                        }
                        self.advance(now, &sub);
                    }
                    Some(why) => {
                        self.stats.budget_refusals += 1;
                        self.subs.remove(&sub);
                        self.closed_sub(sub, &why);
                    }
                }
            }
            Asked::Count(sub, filters) => match refusal {
                None => {
                    self.served.requests += 1;
                    self.store(StoreOp::Count { filters, now }, Pending::Count(sub));
                }
                Some(why) => {
                    self.stats.budget_refusals += 1;
                    self.counts -= 1;
                    self.closed_sub(sub, &why);
                }
            },
            Asked::NegOpen(sub) => {
                let current = matches!(
                    self.negs.get(&sub),
                    Some(Neg::Admitting { request: r, .. }) if *r == request
                );
                if !current {
                    self.stats.stale_replies += 1;
                    return;
                }
                let Some(Neg::Admitting {
                    filter, initial, ..
                }) = self.negs.remove(&sub)
                else {
                    return;
                };
                match refusal {
                    None => {
                        self.served.requests += 1;
                        self.load_items(now, sub, filter, initial);
                    }
                    Some(why) => {
                        self.stats.budget_refusals += 1;
                        self.neg_err(sub, &why);
                    }
                }
            }
        }
    }

    /// Asks for the subscription's next page, or moves to its next filter, or ends its stored
    /// events with `EOSE`.
    fn advance(&mut self, now: Timestamp, id: &str) {
        let limits = self.limits;
        let Some(sub) = self.subs.get_mut(id) else {
            return;
        };
        let Some(stored) = sub.stored.as_mut() else {
            return;
        };
        loop {
            if stored.filter >= sub.filters.len() {
                sub.stored = None;
                self.send(RelayMessage::Eose(id.to_string()));
                return;
            }
            if stored.remaining == 0 {
                let s = stored.after.map_or(Sent::Nothing, Sent::UpTo);
                stored.sent.push(s);
                stored.filter += 1;
                stored.after = None;
                stored.remaining = sub
                    .filters
                    .get(stored.filter)
                    .map_or(0, |f| limits.stored_events_for(f.limit));
                continue;
            }
            break;
        }
        let max = page(&limits, stored.remaining);
        let op = StoreOp::Query {
            filter: sub.filters[stored.filter].clone(),
            after: stored.after,
            max,
            now,
        };
        let request = RequestId(self.next_request);
        stored.request = Some(request);
        self.store(op, Pending::Query(id.to_string()));
    }

    fn on_page(&mut self, now: Timestamp, id: String, request: RequestId, events: Vec<Event>) {
        let limits = self.limits;
        let Some(sub) = self.subs.get_mut(&id) else {
            self.stats.stale_replies += 1;
            return;
        };
        let Some(stored) = sub.stored.as_mut().filter(|s| s.request == Some(request)) else {
            self.stats.stale_replies += 1;
            return;
        };
        stored.request = None;
        let filter = &sub.filters[stored.filter];
        let asked = page(&limits, stored.remaining);
        let got = events.len();
        let mut frames = Vec::new();
        for event in events.into_iter().take(asked) {
            // The store is trusted for order but checked for content: an event it should not
            // have given is dropped, never sent.
            let in_order = stored.after.is_none_or(|c| c.is_before(&event));
            if !in_order || !filter.matches(&event) || is_expired(&event, now) {
                self.stats.store_mismatches += 1;
                continue;
            }
            stored.after = Some(Cursor::at(&event));
            stored.remaining -= 1;
            let already = sub.filters[..stored.filter]
                .iter()
                .zip(&stored.sent)
                .any(|(f, s)| {
                    f.matches(&event)
                        && match s {
                            Sent::Nothing => false,
                            Sent::All => true,
                            Sent::UpTo(c) => !c.is_before(&event),
                        }
                });
            if !already {
                frames.push(event);
            }
        }
        if got < asked && stored.remaining > 0 {
            // The store has no more for this filter.
            stored.sent.push(Sent::All);
            stored.filter += 1;
            stored.after = None;
            stored.remaining = sub
                .filters
                .get(stored.filter)
                .map_or(0, |f| limits.stored_events_for(f.limit));
        }
        let wait = !frames.is_empty();
        stored.waiting_flush = wait;
        if self.peer.is_some() {
            self.served.events += frames.len() as u64;
        }
        for event in frames {
            self.send(RelayMessage::Event {
                subscription: id.clone(),
                event,
            });
        }
        if !wait {
            self.advance(now, &id);
        }
    }

    fn on_count(&mut self, now: Timestamp, subscription: String, filters: Vec<Filter>) {
        if self.reads_need_auth() {
            return self.closed_sub(subscription, AUTH_REQUIRED);
        }
        if self.counts >= self.limits.max_subscriptions {
            return self.closed_sub(subscription, CLOSED_TOO_MANY_SUBS);
        }
        self.counts += 1;
        if self.peer.is_some() {
            self.admit(Asked::Count(subscription, filters));
            return;
        }
        self.store(
            StoreOp::Count { filters, now },
            Pending::Count(subscription),
        );
    }

    fn on_stored(&mut self, now: Timestamp, request: RequestId, reply: StoreReply) {
        if matches!(self.pending.get(&request), Some(Pending::Admit(_))) {
            // A store reply naming a budget ask: not the answer it waits for.
            self.stats.stale_replies += 1;
            return;
        }
        let Some(pending) = self.pending.remove(&request) else {
            self.stats.stale_replies += 1;
            return;
        };
        match (pending, reply) {
            (Pending::Write(event), StoreReply::Written(outcome)) => {
                self.writes -= 1;
                self.on_written(event, outcome);
            }
            (Pending::Vanish(id), StoreReply::Vanished(_)) => {
                self.writes -= 1;
                self.stats.stored += 1;
                self.ok(id, true, "");
            }
            (Pending::Write(Event { id, .. }) | Pending::Vanish(id), reply) => {
                self.writes -= 1;
                let why = match reply {
                    StoreReply::Failed(e) => format!("error: {e}"),
                    _ => "error: the store answered something else".to_string(),
                };
                self.ok(id, false, &why);
            }
            (Pending::Query(sub), StoreReply::Page(events)) => {
                self.on_page(now, sub, request, events)
            }
            (Pending::Query(sub), reply) => {
                if self
                    .subs
                    .get(&sub)
                    .and_then(|s| s.stored.as_ref())
                    .is_some_and(|s| s.request == Some(request))
                {
                    self.subs.remove(&sub);
                    let why = match reply {
                        StoreReply::Failed(e) => format!("error: {e}"),
                        _ => "error: the store answered something else".to_string(),
                    };
                    self.closed_sub(sub, &why);
                } else {
                    self.stats.stale_replies += 1;
                }
            }
            (Pending::Count(sub), StoreReply::Count(count)) => {
                self.counts -= 1;
                self.send_out(Outbound::Count {
                    subscription: sub,
                    count,
                });
            }
            (Pending::Items(sub), reply) => self.on_items(now, sub, request, reply),
            (Pending::Admit(_), _) => self.stats.stale_replies += 1,
            (Pending::Count(sub), reply) => {
                self.counts -= 1;
                let why = match reply {
                    StoreReply::Failed(e) => format!("error: {e}"),
                    _ => "error: the store answered something else".to_string(),
                };
                self.closed_sub(sub, &why);
            }
        }
    }

    /// The `OK` for a stored event, and its broadcast when it is new.
    fn on_written(&mut self, event: Event, outcome: WriteOutcome) {
        let id = event.id;
        match outcome {
            WriteOutcome::Stored => {
                self.stats.stored += 1;
                self.ok(id, true, "");
                self.out.push_back(Output::Broadcast(event));
            }
            WriteOutcome::Duplicate => self.ok(id, true, "duplicate: already have this event"),
            WriteOutcome::Superseded => self.ok(
                id,
                false,
                "duplicate: a newer version of this event is stored",
            ),
            WriteOutcome::Deleted => self.ok(id, false, "blocked: deleted by its author"),
            WriteOutcome::Vanished => self.ok(
                id,
                false,
                "blocked: its author asked this relay to forget them",
            ),
        }
    }

    fn on_flushed(&mut self, now: Timestamp) {
        self.unflushed = 0;
        let waiting: Vec<String> = self
            .subs
            .iter_mut()
            .filter_map(|(id, s)| {
                let st = s.stored.as_mut()?;
                if st.waiting_flush {
                    st.waiting_flush = false;
                    Some(id.clone())
                } else {
                    None
                }
            })
            .collect();
        for id in waiting {
            self.advance(now, &id);
        }
    }

    fn on_live(&mut self, now: Timestamp, event: &Event) {
        if is_expired(event, now) {
            return;
        }
        let matching: Vec<String> = self
            .subs
            .iter()
            .filter(|(_, s)| s.admission.is_none() && s.filters.iter().any(|f| f.matches(event)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in matching {
            if self.backlogged() {
                self.stats.slow_closes += 1;
                self.subs.remove(&id);
                self.closed_sub(id, CLOSED_SLOW);
            } else {
                self.served.events += u64::from(self.peer.is_some());
                self.send(RelayMessage::Event {
                    subscription: id,
                    event: event.clone(),
                });
            }
        }
    }
}

/// Events to ask the store for: a page, or what the filter still wants if fewer. A page size of
/// 0 in the limits reads as 1, so a subscription always moves.
fn page(limits: &Limits, remaining: u64) -> usize {
    usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .min(limits.page_size.max(1))
}

impl Machine for Session {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        if self.closed {
            return;
        }
        match input {
            Input::Frame(text) => self.on_frame(now, &text),
            Input::Oversized { .. } => self.close_too_big(),
            Input::Stored { request, reply } => self.on_stored(now, request, reply),
            Input::Flushed => self.on_flushed(now),
            Input::Live(event) => self.on_live(now, &event),
            Input::Admitted { request, admission } => self.on_admitted(now, request, admission),
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        if self.closed {
            return None;
        }
        self.neg_deadline()
            .map(|at| Wakeup::new(at, "NIP-77 session idle"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.closed {
            return;
        }
        let idle = core::time::Duration::from_secs(self.limits.neg_idle_secs);
        let expired: Vec<String> = self
            .negs
            .iter()
            .filter(|(_, n)| match n {
                // A session waiting for the store is the relay's delay, not the client's.
                Neg::Loading { .. } | Neg::Admitting { .. } => false,
                Neg::Open { since, .. } => since.saturating_add(idle) <= now,
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.negs.remove(&id);
            self.neg_err(id, "closed: the negentropy session was idle too long");
        }
    }
}
