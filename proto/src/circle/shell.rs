//! The NAP-MESH shell: one device's side of the user's circle, as a sans-IO machine (§2.2
//! operation semantics, §3.4 error handling, §4 shell behaviour, §5 security).
//!
//! The host hands it napplet messages (text, per napplet), grants, links the transport proved a
//! circle key on, member frames, pairing records, and the answers to its store reads and blob
//! checks; it asks the host to send replies to napplets and frames on links, to keep events, to
//! read kept events and to check which blobs this device holds. Outputs run in order: an event is
//! kept ([`Output::Store`]) before it is forwarded or acknowledged.
//!
//! Rules as the code keeps them:
//! - Every `mesh` operation reaches **members** only: a peer both of whose pairing records are
//!   held ([`super::pairing::Circle`]) and that a link proved. A link from anyone else gets
//!   nothing, and what it sends is dropped and counted (§4, §5).
//! - A publish is signed here (pubkey, created_at, id, sig are the shell's), kept unless
//!   ephemeral, delivered to live subscriptions, and flooded with `min(ttl, publishTtl)` hops.
//! - A member's event is verified, then handled once per id ([`SEEN_CAPACITY`] ids for
//!   [`SEEN_RETENTION_MS`]): kept, delivered, and passed on with
//!   `min(ttl, FORWARD_CLAMP) - 1` hops left to every member but the one it came from, unless
//!   the user declined to pass that member's events on.
//! - A subscription reads this device's backlog, sends `eose` when that is done, and meanwhile
//!   asks members (a `qid` and a budget of [`BACKLOG_BUDGET_MS`], shrinking by
//!   [`BACKLOG_HOP_COST_MS`] a hop); their answers are verified and checked against the filters,
//!   and delivered at most once per subscription, before or after `eose`.
//! - `mesh.blobs` asks each member about the hashes not answered recently, bounded in calls,
//!   questions in flight, per-question and per-call time.
//! - Pairing by invite ([`super::invite`]) is the one exchange a stranger's link carries, since
//!   it is how a stranger becomes a member: a `PAIR` is checked against the invites this shell
//!   made and answered on its own link only; an invite being accepted sends its `PAIR` once, on a
//!   link proving the inviter's key. Both records are taken, and kept, only when it succeeds.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use rand_core::CryptoRng;

use crate::codec::hex;
use crate::core::bounded::SetInsert;
use crate::core::{
    BoundedSet, ConnId, ExpiringSet, Machine, TimerQueue, Timestamp, TokenBucket, Wakeup,
};
use crate::crypto::{CryptoProvider, Secp256k1Secret};
use crate::nostr::event::{Event, EventId, MAX_EVENT_BYTES, UnsignedEvent};
use crate::nostr::message::Filter;

use super::invite::{
    ACCEPT_TIMEOUT_MS, INVITE_SECRET_BYTES, Invite, Invites, MAX_ACCEPTING, PairFrame, PairRefusal,
    is_pair_frame, is_record_of,
};
use super::member::MemberFrame;
use super::napplet::{Limits, NOT_GRANTED, Reply, Request, RequestError, RequestKind};
use super::pairing::{Circle, MAX_PAIRINGS, pairing_record};
use super::{
    BACKLOG_BUDGET_MS, BACKLOG_HOP_COST_MS, BLOB_CACHE_CAPACITY, BLOB_CACHE_MS,
    BLOB_CALL_TIMEOUT_MS, BLOB_REQUEST_TIMEOUT_MS, DEFAULT_PUBLISH_TTL, DEFAULT_SUBSCRIBE_TTL,
    FORWARD_CLAMP, MAX_BLOB_CALLS, MAX_BLOB_REQUESTS_IN_FLIGHT, MAX_GRANTS, MAX_LINKS,
    MAX_PENDING_LOOKUPS, MAX_RELAYED_QUERIES, MAX_SUBS, MAX_SUBS_PER_NAPPLET, MEMBER_REQUEST_RATE,
    QID_CAPACITY, SEEN_CAPACITY, SEEN_RETENTION_MS, SUB_DEDUPE_CAPACITY, is_ephemeral,
};

/// A napplet, named by the host (one id per napplet instance it runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NappletId(pub u64);

/// The closing reason when the local backlog cannot be read (§3.4 "ended after it opened").
pub const BACKLOG_UNREADABLE: &str = "error: backlog unreadable";
/// The error when the shell cannot ask about blobs at all (§3.4).
pub const BLOBS_UNSUPPORTED: &str = "error: this shell cannot ask about blobs";
/// The error when [`MAX_BLOB_CALLS`] calls are already in progress.
pub const BLOBS_BUSY: &str = "error: too many blob calls in progress";
/// The refusal when a napplet has [`MAX_SUBS_PER_NAPPLET`] subscriptions, or the shell [`MAX_SUBS`].
pub const TOO_MANY_SUBS: &str = "error: too many subscriptions";
/// The closing reason when the shell is waiting on too many store reads to start one more.
pub const BUSY: &str = "error: busy";
/// The error when a template cannot be signed.
pub const UNSIGNABLE: &str = "error: could not sign";
/// The error when a signed event is too large to keep or carry.
pub const TOO_LARGE: &str = "invalid: event too large";

/// The shell's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellConfig {
    /// The user's hop caps (§2.1 `MeshLimits`).
    pub limits: Limits,
    /// Whether this shell can ask about blobs at all; when not, `mesh.blobs` answers an error
    /// (§3.4) rather than zeros.
    pub blobs: bool,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            limits: Limits {
                publish_ttl: DEFAULT_PUBLISH_TTL,
                subscribe_ttl: DEFAULT_SUBSCRIBE_TTL,
            },
            blobs: true,
        }
    }
}

/// What the shell is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A message from a napplet (NIP-5D JSON text).
    Napplet {
        /// Which napplet.
        napplet: NappletId,
        /// The text.
        text: String,
    },
    /// A napplet ended: its subscriptions and pending calls are forgotten, with no reply.
    NappletGone(NappletId),
    /// The user granted a napplet the `mesh` capability.
    Grant(NappletId),
    /// The user revoked it: the next call is refused and its subscriptions end now, so no live
    /// delivery follows (§4).
    Revoke(NappletId),
    /// Whether the circle transport is running on this device.
    Online(bool),
    /// The transport opened a link and proved the far side's circle key on it.
    LinkUp {
        /// The link.
        link: ConnId,
        /// The far side's proven key (a member only if paired, [`super::pairing`]).
        key: [u8; 32],
    },
    /// A link closed.
    LinkDown(ConnId),
    /// A member-wire frame arrived on a link.
    Link {
        /// The link.
        link: ConnId,
        /// The frame's text.
        text: String,
    },
    /// Make this user's pairing record for `peer` (answered by [`Output::Pairing`]).
    Pair {
        /// The peer's key.
        peer: [u8; 32],
    },
    /// A pairing record: restored from storage, or the peer's, received by the pairing flow.
    PairingRecord(Event),
    /// Make an invite ([`super::invite`]): answered by [`Output::Invite`].
    Invite,
    /// Accept an invite the user was handed: this shell sends its pairing record and the proof
    /// of the invite's secret on the first link that proves the inviter's key, and ends with
    /// [`Output::Paired`] (within [`ACCEPT_TIMEOUT_MS`]).
    AcceptInvite(Invite),
    /// Withdraw the pairing with a peer: it is no longer a member.
    Unpair([u8; 32]),
    /// Decline (or stop declining) to pass a member's events and requests further (§4 MAY):
    /// they are still kept and delivered here.
    Decline {
        /// The member's key.
        peer: [u8; 32],
        /// Whether to decline.
        decline: bool,
    },
    /// The answer to [`Output::ReadBacklog`]: the kept events matching, or `None` when the store
    /// cannot be read.
    Backlog {
        /// The read's token.
        token: u64,
        /// The events.
        events: Option<Vec<Event>>,
    },
    /// The answer to [`Output::CheckBlobs`]: which of the hashes this device holds.
    BlobsHeld {
        /// The check's token.
        token: u64,
        /// The held subset.
        held: Vec<[u8; 32]>,
    },
}

/// What the shell asks of its host, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a reply or a delivery to a napplet.
    ToNapplet {
        /// Which napplet.
        napplet: NappletId,
        /// The message (its text is [`Reply::to_text`]).
        reply: Reply,
    },
    /// Send a frame on a link (only ever a member's).
    ToLink {
        /// The link.
        link: ConnId,
        /// The frame (its text is [`MemberFrame::to_text`]).
        frame: MemberFrame,
    },
    /// Keep this event on this device (never an ephemeral one). Finished before the next output.
    Store(Event),
    /// Read the kept events matching any of `filters`; answer with [`Input::Backlog`].
    ReadBacklog {
        /// The read's token.
        token: u64,
        /// The filters.
        filters: Vec<Filter>,
    },
    /// Say which of `hashes` this device holds; answer with [`Input::BlobsHeld`].
    CheckBlobs {
        /// The check's token.
        token: u64,
        /// The hashes.
        hashes: Vec<[u8; 32]>,
    },
    /// A pairing record to keep: this user's new one (for the host to keep, and to hand to the
    /// peer when pairing by hand), or a peer's taken by an invite's exchange.
    Pairing(Event),
    /// A fresh invite, for the user to hand over (its text carries the one-time secret).
    Invite(Invite),
    /// Send a pairing frame ([`super::invite`]) on a link: a `PAIR` to the inviter of an
    /// invite being accepted, or the `PAIRED` answer to the link a `PAIR` came on.
    ToLinkPair {
        /// The link.
        link: ConnId,
        /// The frame (its text is [`PairFrame::to_text`]).
        frame: PairFrame,
    },
    /// A pairing by invite ended, on either side: `peer` is a member now, or why not.
    Paired {
        /// The other side's key.
        peer: [u8; 32],
        /// Whether the edge exists now.
        outcome: Result<(), PairRefusal>,
    },
}

/// Counters: every dropped or refused thing is counted here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Napplet messages that were not requests and could not be answered (no readable `id`).
    pub napplet_unanswerable: u64,
    /// Napplet calls refused (not granted, malformed, over a bound).
    pub napplet_refused: u64,
    /// Frames from links whose far side is not a member.
    pub stranger_frames: u64,
    /// Member frames that did not parse.
    pub bad_frames: u64,
    /// Member events whose id or signature did not verify.
    pub bad_events: u64,
    /// Flooded copies of an id already seen.
    pub duplicates: u64,
    /// Ids this device passed on to its members (once each).
    pub forwarded: u64,
    /// Frames sent to members.
    pub frames_sent: u64,
    /// Member events kept and delivered but not passed on (declined, or budget spent).
    pub not_forwarded: u64,
    /// Backlog answers dropped: late, unasked, not matching, ephemeral, or not verifying.
    pub backlog_rejected: u64,
    /// Backlog requests from members answered.
    pub backlog_answered: u64,
    /// Blob answers dropped: late or unasked.
    pub blob_answers_ignored: u64,
    /// Pairing records refused.
    pub pairings_refused: u64,
    /// `PAIR` requests refused (unknown, used or expired invite, bad proof or record).
    pub invites_refused: u64,
    /// `PAIRED` answers no acceptance here was waiting for.
    pub pair_answers_ignored: u64,
    /// Links not tracked because [`MAX_LINKS`] were.
    pub links_refused: u64,
    /// Members' requests answered with an end at once, over [`MEMBER_REQUEST_RATE`].
    pub requests_limited: u64,
}

type SubKey = (NappletId, String);

#[derive(Debug)]
struct Sub {
    serial: u64,
    filters: Vec<Filter>,
    ttl: u8,
    delivered: BoundedSet<EventId>,
    qid: Option<String>,
}

#[derive(Debug)]
struct OwnQuery {
    sub: SubKey,
    serial: u64,
    asked: BTreeSet<[u8; 32]>,
}

#[derive(Debug)]
struct Relay {
    back_link: ConnId,
    filters: Vec<Filter>,
    asked: BTreeSet<[u8; 32]>,
}

#[derive(Debug)]
enum Lookup {
    Sub {
        sub: SubKey,
        serial: u64,
    },
    MemberReq {
        link: ConnId,
        qid: String,
        filters: Vec<Filter>,
    },
    MemberHave {
        link: ConnId,
        qid: String,
        hashes: Vec<[u8; 32]>,
    },
}

#[derive(Debug)]
struct BlobCall {
    napplet: NappletId,
    id: String,
    hashes: Vec<[u8; 32]>,
    counts: Vec<u32>,
    peers: u32,
    /// Members still to be asked: (member, link, the hashes not answered recently).
    queue: VecDeque<([u8; 32], ConnId, Vec<[u8; 32]>)>,
    /// Questions in flight, by qid.
    in_flight: BTreeSet<String>,
}

#[derive(Debug)]
struct BlobQuestion {
    call: u64,
    peer: [u8; 32],
    hashes: Vec<[u8; 32]>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Query(String),
    Relay(String),
    BlobQuestion(String),
    BlobCall(u64),
    Accept([u8; 32]),
}

/// An invite this shell is accepting: what it sends the inviter, and whether it has.
#[derive(Debug)]
struct Accepting {
    id: [u8; 16],
    proof: [u8; 32],
    record: Event,
    sent: bool,
}

/// One device's NAP-MESH shell (see the module docs).
pub struct Shell<R: CryptoRng> {
    provider: &'static dyn CryptoProvider,
    secret: Secp256k1Secret,
    pubkey: [u8; 32],
    rng: R,
    config: ShellConfig,
    online: bool,
    grants: BTreeSet<NappletId>,
    circle: Circle,
    invites: Invites,
    accepting: BTreeMap<[u8; 32], Accepting>,
    links: BTreeMap<ConnId, [u8; 32]>,
    declined: BTreeSet<[u8; 32]>,
    /// Each member's request budget (members only, so at most `MAX_PAIRINGS`).
    asks: BTreeMap<[u8; 32], TokenBucket>,
    seen: ExpiringSet<EventId>,
    subs: BTreeMap<SubKey, Sub>,
    queries: BTreeMap<String, OwnQuery>,
    relays: BTreeMap<String, Relay>,
    qids: ExpiringSet<String>,
    lookups: BTreeMap<u64, Lookup>,
    blob_calls: BTreeMap<u64, BlobCall>,
    blob_questions: BTreeMap<String, BlobQuestion>,
    blob_known: ExpiringSet<([u8; 32], [u8; 32])>,
    blob_held: ExpiringSet<([u8; 32], [u8; 32])>,
    timers: TimerQueue<Timer>,
    next_serial: u64,
    out: VecDeque<Output>,
    stats: Stats,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl<R: CryptoRng> Shell<R> {
    /// A shell for the user whose circle key is `secret`, signing through `provider` with
    /// randomness from `rng`. It starts offline, with no grants, no pairings and no links.
    pub fn new(
        provider: &'static dyn CryptoProvider,
        secret: Secp256k1Secret,
        rng: R,
        config: ShellConfig,
    ) -> Result<Self, crate::crypto::CryptoError> {
        let pubkey = provider.schnorr_public_key(&secret)?;
        Ok(Self {
            provider,
            secret,
            pubkey,
            rng,
            config,
            online: false,
            grants: BTreeSet::new(),
            circle: Circle::new(pubkey),
            invites: Invites::new(pubkey),
            accepting: BTreeMap::new(),
            links: BTreeMap::new(),
            declined: BTreeSet::new(),
            asks: BTreeMap::new(),
            seen: ExpiringSet::new(SEEN_CAPACITY),
            subs: BTreeMap::new(),
            queries: BTreeMap::new(),
            relays: BTreeMap::new(),
            qids: ExpiringSet::new(QID_CAPACITY),
            lookups: BTreeMap::new(),
            blob_calls: BTreeMap::new(),
            blob_questions: BTreeMap::new(),
            blob_known: ExpiringSet::new(BLOB_CACHE_CAPACITY),
            blob_held: ExpiringSet::new(BLOB_CACHE_CAPACITY),
            timers: TimerQueue::new(),
            next_serial: 0,
            out: VecDeque::new(),
            stats: Stats::default(),
        })
    }

    /// This user's circle key.
    pub fn pubkey(&self) -> [u8; 32] {
        self.pubkey
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The settings.
    pub fn config(&self) -> &ShellConfig {
        &self.config
    }

    /// The circle (pairings held).
    pub fn circle(&self) -> &Circle {
        &self.circle
    }

    /// Members reachable now: each member with a link, through its lowest-numbered link, in key
    /// order. Empty while offline.
    pub fn reachable(&self) -> Vec<([u8; 32], ConnId)> {
        if !self.online {
            return Vec::new();
        }
        let mut by_peer: BTreeMap<[u8; 32], ConnId> = BTreeMap::new();
        for (link, key) in &self.links {
            if self.circle.is_member(key) {
                by_peer.entry(*key).or_insert(*link);
            }
        }
        by_peer.into_iter().collect()
    }

    /// Live subscriptions held.
    pub fn subscription_count(&self) -> usize {
        self.subs.len()
    }

    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    fn qid(&mut self) -> String {
        let mut b = [0u8; 8];
        self.rng.fill_bytes(&mut b);
        hex::encode(&b)
    }

    fn reply(&mut self, napplet: NappletId, reply: Reply) {
        self.out.push_back(Output::ToNapplet { napplet, reply });
    }

    fn send(&mut self, link: ConnId, frame: MemberFrame) {
        self.stats.frames_sent += 1;
        self.out.push_back(Output::ToLink { link, frame });
    }

    /// The member on `link`, if its far side is one; a stranger's frame is counted.
    fn member_on(&mut self, link: ConnId) -> Option<[u8; 32]> {
        match self.links.get(&link) {
            Some(key) if self.online && self.circle.is_member(key) => Some(*key),
            _ => {
                self.stats.stranger_frames += 1;
                None
            }
        }
    }

    /// Whether `member` may ask one more thing now ([`MEMBER_REQUEST_RATE`]).
    fn may_ask(&mut self, now: Timestamp, member: [u8; 32]) -> bool {
        let ok = self
            .asks
            .entry(member)
            .or_insert_with(|| MEMBER_REQUEST_RATE.bucket(now))
            .try_take(now);
        if !ok {
            self.stats.requests_limited += 1;
        }
        ok
    }

    fn lookup(&mut self, lookup: Lookup) -> Option<u64> {
        if self.lookups.len() >= MAX_PENDING_LOOKUPS {
            return None;
        }
        let token = self.serial();
        self.lookups.insert(token, lookup);
        Some(token)
    }

    // ---- napplet face ----

    fn on_napplet(&mut self, now: Timestamp, napplet: NappletId, text: &str) {
        let granted = self.grants.contains(&napplet);
        match Request::parse(text) {
            Ok(req) if !granted => self.refuse(napplet, kind_of(&req), id_of(&req), NOT_GRANTED),
            Ok(Request::Info { id }) => self.info(napplet, id),
            Ok(Request::Publish { id, template, ttl }) => {
                self.publish(now, napplet, id, template, ttl)
            }
            Ok(Request::Subscribe {
                id,
                sub_id,
                filters,
                ttl,
            }) => self.subscribe(now, napplet, id, sub_id, filters, ttl),
            Ok(Request::Close { sub_id }) => self.close(napplet, &sub_id),
            Ok(Request::Blobs { id, hashes }) => self.blobs(now, napplet, id, hashes),
            Err(RequestError { kind, id, error }) => {
                let reason = if granted { error.reason() } else { NOT_GRANTED };
                self.refuse(napplet, kind, id, reason)
            }
        }
    }

    /// Answers a refused call under its own result type and `id`; a `mesh.close` or a message
    /// with no readable `id` cannot be answered, and is counted.
    fn refuse(
        &mut self,
        napplet: NappletId,
        kind: Option<RequestKind>,
        id: Option<String>,
        reason: &str,
    ) {
        let (Some(kind), Some(id)) = (kind, id) else {
            self.stats.napplet_unanswerable += 1;
            return;
        };
        self.stats.napplet_refused += 1;
        let error = String::from(reason);
        let reply = match kind {
            RequestKind::Info => Reply::InfoResult {
                id,
                online: false,
                peers: 0,
                limits: self.config.limits,
                error: Some(error),
            },
            RequestKind::Publish => Reply::PublishResult {
                id,
                outcome: Err(error),
            },
            RequestKind::Subscribe => Reply::SubscribeRefused { id, error },
            RequestKind::Blobs => Reply::BlobsResult {
                id,
                peers: 0,
                blobs: BTreeMap::new(),
                error: Some(error),
            },
            RequestKind::Close => {
                self.stats.napplet_unanswerable += 1;
                return;
            }
        };
        self.reply(napplet, reply);
    }

    fn info(&mut self, napplet: NappletId, id: String) {
        let peers = self.reachable().len() as u32;
        self.reply(
            napplet,
            Reply::InfoResult {
                id,
                online: self.online,
                peers,
                limits: self.config.limits,
                error: None,
            },
        );
    }

    fn publish(
        &mut self,
        now: Timestamp,
        napplet: NappletId,
        id: String,
        template: super::napplet::Template,
        ttl: Option<u8>,
    ) {
        let cap = self.config.limits.publish_ttl;
        let ttl = ttl.unwrap_or(cap).min(cap);
        let signed = UnsignedEvent {
            created_at: now.as_secs(),
            kind: template.kind,
            tags: template.tags,
            content: template.content,
        }
        .sign(self.provider, &self.secret, &mut self.rng);
        let event = match signed {
            Ok(e) => e,
            Err(_) => {
                return self.refuse(napplet, Some(RequestKind::Publish), Some(id), UNSIGNABLE);
            }
        };
        if event.to_json().len() > MAX_EVENT_BYTES {
            return self.refuse(napplet, Some(RequestKind::Publish), Some(id), TOO_LARGE);
        }
        self.seen
            .insert(now, event.id, now.saturating_add(ms(SEEN_RETENTION_MS)));
        if !is_ephemeral(event.kind) {
            self.out.push_back(Output::Store(event.clone()));
        }
        self.deliver_live(&event);
        if ttl >= 1 {
            self.flood(&event, ttl - 1, None);
        }
        self.reply(
            napplet,
            Reply::PublishResult {
                id,
                outcome: Ok((event, ttl)),
            },
        );
    }

    /// Sends `event` with `left` hops to every reachable member but `except`.
    fn flood(&mut self, event: &Event, left: u8, except: Option<[u8; 32]>) {
        let targets: Vec<ConnId> = self
            .reachable()
            .into_iter()
            .filter(|(k, _)| Some(*k) != except)
            .map(|(_, l)| l)
            .collect();
        if targets.is_empty() {
            return;
        }
        self.stats.forwarded += 1;
        for link in targets {
            self.send(
                link,
                MemberFrame::Publish {
                    ttl: left,
                    event: event.clone(),
                },
            );
        }
    }

    /// Delivers a live event to every subscription it matches, at most once each.
    fn deliver_live(&mut self, event: &Event) {
        let mut to = Vec::new();
        for ((napplet, sub_id), sub) in self.subs.iter_mut() {
            if !self.grants.contains(napplet) {
                continue;
            }
            if sub.filters.iter().any(|f| f.matches(event))
                && !matches!(sub.delivered.insert(event.id), SetInsert::Present)
            {
                to.push((*napplet, sub_id.clone()));
            }
        }
        for (napplet, sub_id) in to {
            self.reply(
                napplet,
                Reply::Event {
                    sub_id,
                    event: event.clone(),
                },
            );
        }
    }

    fn subscribe(
        &mut self,
        now: Timestamp,
        napplet: NappletId,
        id: String,
        sub_id: String,
        filters: Vec<Filter>,
        ttl: Option<u8>,
    ) {
        let key = (napplet, sub_id.clone());
        let replacing = self.subs.contains_key(&key);
        if !replacing {
            let mine = self.subs.keys().filter(|(n, _)| *n == napplet).count();
            if mine >= MAX_SUBS_PER_NAPPLET || self.subs.len() >= MAX_SUBS {
                return self.refuse(
                    napplet,
                    Some(RequestKind::Subscribe),
                    Some(id),
                    TOO_MANY_SUBS,
                );
            }
        }
        // A subscription id already open is replaced, as NIP-01's REQ does.
        self.drop_sub(&key);
        let cap = self.config.limits.subscribe_ttl;
        let ttl = ttl.unwrap_or(cap).min(cap);
        let serial = self.serial();
        self.subs.insert(
            key.clone(),
            Sub {
                serial,
                filters: filters.clone(),
                ttl,
                delivered: BoundedSet::new(SUB_DEDUPE_CAPACITY),
                qid: None,
            },
        );
        let Some(token) = self.lookup(Lookup::Sub {
            sub: key.clone(),
            serial,
        }) else {
            self.end_sub(&key, BUSY);
            return;
        };
        self.out.push_back(Output::ReadBacklog {
            token,
            filters: filters.clone(),
        });
        let members = self.reachable();
        if ttl >= 1 && !members.is_empty() && self.queries.len() < MAX_SUBS {
            let qid = self.qid();
            let budget = BACKLOG_BUDGET_MS;
            self.qids
                .insert(now, qid.clone(), now.saturating_add(ms(budget)));
            self.queries.insert(
                qid.clone(),
                OwnQuery {
                    sub: key.clone(),
                    serial,
                    asked: members.iter().map(|(k, _)| *k).collect(),
                },
            );
            self.timers
                .schedule(now.saturating_add(ms(budget)), Timer::Query(qid.clone()));
            if let Some(sub) = self.subs.get_mut(&key) {
                sub.qid = Some(qid.clone());
            }
            for (_, link) in members {
                self.send(
                    link,
                    MemberFrame::Req {
                        ttl: ttl - 1,
                        qid: qid.clone(),
                        budget_ms: budget - BACKLOG_HOP_COST_MS,
                        filters: filters.clone(),
                    },
                );
            }
        }
    }

    /// Forgets a subscription and its backlog request, with no reply.
    fn drop_sub(&mut self, key: &SubKey) -> bool {
        let Some(sub) = self.subs.remove(key) else {
            return false;
        };
        if let Some(qid) = sub.qid {
            self.queries.remove(&qid);
            self.timers.cancel(&Timer::Query(qid));
        }
        true
    }

    /// The shell ends a subscription: `mesh.closed` with `reason`.
    fn end_sub(&mut self, key: &SubKey, reason: &str) {
        if self.drop_sub(key) {
            self.reply(
                key.0,
                Reply::Closed {
                    sub_id: key.1.clone(),
                    reason: Some(String::from(reason)),
                },
            );
        }
    }

    fn close(&mut self, napplet: NappletId, sub_id: &str) {
        // Fire-and-forget (§3.2): no reply, whether or not it was open.
        self.drop_sub(&(napplet, String::from(sub_id)));
    }

    fn on_backlog(&mut self, token: u64, events: Option<Vec<Event>>) {
        match self.lookups.remove(&token) {
            Some(Lookup::Sub { sub, serial }) => {
                if self.subs.get(&sub).is_none_or(|s| s.serial != serial) {
                    return;
                }
                let Some(events) = events else {
                    return self.end_sub(&sub, BACKLOG_UNREADABLE);
                };
                for e in &events {
                    self.deliver_to(&sub, e);
                }
                let ttl = self.subs.get(&sub).map_or(0, |s| s.ttl);
                self.reply(
                    sub.0,
                    Reply::Eose {
                        sub_id: sub.1.clone(),
                        ttl,
                    },
                );
            }
            Some(Lookup::MemberReq { link, qid, filters }) => {
                if !self.links.contains_key(&link) {
                    return;
                }
                self.stats.backlog_answered += 1;
                for e in events.unwrap_or_default() {
                    if !is_ephemeral(e.kind) && filters.iter().any(|f| f.matches(&e)) {
                        self.send(
                            link,
                            MemberFrame::Backlog {
                                qid: qid.clone(),
                                event: e,
                            },
                        );
                    }
                }
                self.send(link, MemberFrame::BacklogEnd { qid });
            }
            Some(other) => {
                self.lookups.insert(token, other);
            }
            None => {}
        }
    }

    /// A backlog event for one subscription: not ephemeral, matching its filters, once.
    fn deliver_to(&mut self, key: &SubKey, event: &Event) -> bool {
        if is_ephemeral(event.kind) || !self.grants.contains(&key.0) {
            return false;
        }
        let Some(sub) = self.subs.get_mut(key) else {
            return false;
        };
        if !sub.filters.iter().any(|f| f.matches(event))
            || matches!(sub.delivered.insert(event.id), SetInsert::Present)
        {
            return false;
        }
        self.reply(
            key.0,
            Reply::Event {
                sub_id: key.1.clone(),
                event: event.clone(),
            },
        );
        true
    }

    fn blobs(&mut self, now: Timestamp, napplet: NappletId, id: String, hashes: Vec<[u8; 32]>) {
        if !self.config.blobs {
            return self.refuse(
                napplet,
                Some(RequestKind::Blobs),
                Some(id),
                BLOBS_UNSUPPORTED,
            );
        }
        let members = self.reachable();
        let mut call = BlobCall {
            napplet,
            id,
            counts: alloc::vec![0; hashes.len()],
            peers: members.len() as u32,
            queue: VecDeque::new(),
            in_flight: BTreeSet::new(),
            hashes,
        };
        // Recent answers are reused; only what is not known is asked.
        for (peer, link) in members {
            let mut unknown = Vec::new();
            for (i, h) in call.hashes.iter().enumerate() {
                if self.blob_known.contains(now, &(peer, *h)) {
                    if self.blob_held.contains(now, &(peer, *h)) {
                        call.counts[i] += 1;
                    }
                } else {
                    unknown.push(*h);
                }
            }
            if !unknown.is_empty() {
                call.queue.push_back((peer, link, unknown));
            }
        }
        if call.queue.is_empty() {
            return self.finish_call(call);
        }
        if self.blob_calls.len() >= MAX_BLOB_CALLS {
            return self.refuse(napplet, Some(RequestKind::Blobs), Some(call.id), BLOBS_BUSY);
        }
        let n = self.serial();
        self.blob_calls.insert(n, call);
        self.timers.schedule(
            now.saturating_add(ms(BLOB_CALL_TIMEOUT_MS)),
            Timer::BlobCall(n),
        );
        self.pump_blobs(now);
    }

    /// Sends queued blob questions while slots are free, oldest call first.
    fn pump_blobs(&mut self, now: Timestamp) {
        let calls: Vec<u64> = self.blob_calls.keys().copied().collect();
        for n in calls {
            loop {
                if self.blob_questions.len() >= MAX_BLOB_REQUESTS_IN_FLIGHT {
                    return;
                }
                let Some((peer, link, hashes)) = self
                    .blob_calls
                    .get_mut(&n)
                    .and_then(|c| c.queue.pop_front())
                else {
                    break;
                };
                let qid = self.qid();
                self.blob_questions.insert(
                    qid.clone(),
                    BlobQuestion {
                        call: n,
                        peer,
                        hashes: hashes.clone(),
                    },
                );
                if let Some(c) = self.blob_calls.get_mut(&n) {
                    c.in_flight.insert(qid.clone());
                }
                self.timers.schedule(
                    now.saturating_add(ms(BLOB_REQUEST_TIMEOUT_MS)),
                    Timer::BlobQuestion(qid.clone()),
                );
                self.send(link, MemberFrame::Have { qid, hashes });
            }
        }
    }

    fn finish_call(&mut self, call: BlobCall) {
        let blobs = call
            .hashes
            .iter()
            .zip(&call.counts)
            .map(|(h, n)| (hex::encode(h), *n))
            .collect();
        self.reply(
            call.napplet,
            Reply::BlobsResult {
                id: call.id,
                peers: call.peers,
                blobs,
                error: None,
            },
        );
    }

    /// Ends a call if nothing of it is queued or in flight (or `force`, at its deadline).
    fn maybe_finish(&mut self, n: u64, force: bool) {
        let done = self
            .blob_calls
            .get(&n)
            .is_some_and(|c| force || (c.queue.is_empty() && c.in_flight.is_empty()));
        if !done {
            return;
        }
        if let Some(call) = self.blob_calls.remove(&n) {
            for qid in &call.in_flight {
                self.blob_questions.remove(qid);
                self.timers.cancel(&Timer::BlobQuestion(qid.clone()));
            }
            self.timers.cancel(&Timer::BlobCall(n));
            self.finish_call(call);
        }
    }

    // ---- members ----

    fn on_link(&mut self, now: Timestamp, link: ConnId, text: &str) {
        if is_pair_frame(text) {
            return self.on_pair_frame(now, link, text);
        }
        let Some(peer) = self.member_on(link) else {
            return;
        };
        let Ok(frame) = MemberFrame::parse(text) else {
            self.stats.bad_frames += 1;
            return;
        };
        match frame {
            MemberFrame::Publish { ttl, event } => self.on_flooded(now, peer, ttl, event),
            MemberFrame::Req {
                ttl,
                qid,
                budget_ms,
                filters,
            } => self.on_req(now, link, peer, ttl, qid, budget_ms, filters),
            MemberFrame::Backlog { qid, event } => self.on_backlog_answer(now, peer, qid, event),
            // Informational: a request is bounded by its budget, not by its answers' ends.
            MemberFrame::BacklogEnd { .. } => {}
            MemberFrame::Have { qid, hashes } => {
                let allowed = self.may_ask(now, peer);
                match allowed
                    .then(|| {
                        self.lookup(Lookup::MemberHave {
                            link,
                            qid: qid.clone(),
                            hashes: hashes.clone(),
                        })
                    })
                    .flatten()
                {
                    Some(token) => self.out.push_back(Output::CheckBlobs { token, hashes }),
                    // Too busy to look: an answer of nothing held, rather than silence.
                    None => self.send(
                        link,
                        MemberFrame::Has {
                            qid,
                            hashes: Vec::new(),
                        },
                    ),
                }
            }
            MemberFrame::Has { qid, hashes } => self.on_has(now, peer, qid, hashes),
        }
    }

    fn on_flooded(&mut self, now: Timestamp, from: [u8; 32], ttl: u8, event: Event) {
        if self.seen.contains(now, &event.id) {
            self.stats.duplicates += 1;
            return;
        }
        if event.verify(self.provider).is_err() {
            self.stats.bad_events += 1;
            return;
        }
        self.seen
            .insert(now, event.id, now.saturating_add(ms(SEEN_RETENTION_MS)));
        if !is_ephemeral(event.kind) {
            self.out.push_back(Output::Store(event.clone()));
        }
        self.deliver_live(&event);
        let budget = ttl.min(FORWARD_CLAMP);
        if budget >= 1 && !self.declined.contains(&from) {
            self.flood(&event, budget - 1, Some(from));
        } else {
            self.stats.not_forwarded += 1;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_req(
        &mut self,
        now: Timestamp,
        link: ConnId,
        from: [u8; 32],
        ttl: u8,
        qid: String,
        budget_ms: u64,
        filters: Vec<Filter>,
    ) {
        let budget_ms = budget_ms.min(BACKLOG_BUDGET_MS);
        // A request reaching this device by a second path is answered only by its end.
        if self.qids.contains(now, &qid) || budget_ms == 0 || !self.may_ask(now, from) {
            return self.send(link, MemberFrame::BacklogEnd { qid });
        }
        self.qids
            .insert(now, qid.clone(), now.saturating_add(ms(budget_ms)));
        match self.lookup(Lookup::MemberReq {
            link,
            qid: qid.clone(),
            filters: filters.clone(),
        }) {
            Some(token) => self.out.push_back(Output::ReadBacklog {
                token,
                filters: filters.clone(),
            }),
            None => self.send(link, MemberFrame::BacklogEnd { qid: qid.clone() }),
        }
        let hops = ttl.min(FORWARD_CLAMP);
        if hops == 0
            || budget_ms <= BACKLOG_HOP_COST_MS
            || self.declined.contains(&from)
            || self.relays.len() >= MAX_RELAYED_QUERIES
        {
            return;
        }
        let targets: Vec<([u8; 32], ConnId)> = self
            .reachable()
            .into_iter()
            .filter(|(k, _)| *k != from)
            .collect();
        if targets.is_empty() {
            return;
        }
        self.relays.insert(
            qid.clone(),
            Relay {
                back_link: link,
                filters: filters.clone(),
                asked: targets.iter().map(|(k, _)| *k).collect(),
            },
        );
        self.timers
            .schedule(now.saturating_add(ms(budget_ms)), Timer::Relay(qid.clone()));
        for (_, l) in targets {
            self.send(
                l,
                MemberFrame::Req {
                    ttl: hops - 1,
                    qid: qid.clone(),
                    budget_ms: budget_ms - BACKLOG_HOP_COST_MS,
                    filters: filters.clone(),
                },
            );
        }
    }

    fn on_backlog_answer(&mut self, _now: Timestamp, from: [u8; 32], qid: String, event: Event) {
        if let Some(q) = self.queries.get(&qid) {
            if !q.asked.contains(&from) {
                self.stats.backlog_rejected += 1;
                return;
            }
            let (sub, serial) = (q.sub.clone(), q.serial);
            if self.subs.get(&sub).is_none_or(|s| s.serial != serial)
                || event.verify(self.provider).is_err()
                || !self.deliver_to(&sub, &event)
            {
                self.stats.backlog_rejected += 1;
            }
            return;
        }
        if let Some(r) = self.relays.get(&qid) {
            if !r.asked.contains(&from)
                || is_ephemeral(event.kind)
                || !r.filters.iter().any(|f| f.matches(&event))
            {
                self.stats.backlog_rejected += 1;
                return;
            }
            let back = r.back_link;
            if self.links.contains_key(&back) {
                self.send(back, MemberFrame::Backlog { qid, event });
            }
            return;
        }
        self.stats.backlog_rejected += 1;
    }

    fn on_has(&mut self, now: Timestamp, from: [u8; 32], qid: String, held: Vec<[u8; 32]>) {
        let Some(q) = self.blob_questions.get(&qid) else {
            self.stats.blob_answers_ignored += 1;
            return;
        };
        if q.peer != from {
            self.stats.blob_answers_ignored += 1;
            return;
        }
        let Some(q) = self.blob_questions.remove(&qid) else {
            return;
        };
        self.timers.cancel(&Timer::BlobQuestion(qid.clone()));
        let until = now.saturating_add(ms(BLOB_CACHE_MS));
        if let Some(call) = self.blob_calls.get_mut(&q.call) {
            call.in_flight.remove(&qid);
            for h in &q.hashes {
                let has = held.contains(h);
                if has && let Some(i) = call.hashes.iter().position(|x| x == h) {
                    call.counts[i] += 1;
                }
                self.blob_known.insert(now, (from, *h), until);
                if has {
                    self.blob_held.insert(now, (from, *h), until);
                } else {
                    self.blob_held.remove(&(from, *h));
                }
            }
        }
        self.maybe_finish(q.call, false);
        self.pump_blobs(now);
    }

    fn on_blobs_held(&mut self, token: u64, held: Vec<[u8; 32]>) {
        match self.lookups.remove(&token) {
            Some(Lookup::MemberHave { link, qid, hashes }) => {
                if !self.links.contains_key(&link) {
                    return;
                }
                let held: Vec<[u8; 32]> = hashes.into_iter().filter(|h| held.contains(h)).collect();
                self.send(link, MemberFrame::Has { qid, hashes: held });
            }
            Some(other) => {
                self.lookups.insert(token, other);
            }
            None => {}
        }
    }

    fn on_pairing(&mut self, record: &Event) {
        if self.circle.add(self.provider, record).is_err() {
            self.stats.pairings_refused += 1;
        }
    }

    fn pair(&mut self, now: Timestamp, peer: [u8; 32]) {
        if peer == self.pubkey
            || (self.circle.len() >= MAX_PAIRINGS && !self.circle.is_member(&peer))
        {
            self.stats.pairings_refused += 1;
            return;
        }
        match pairing_record(
            self.provider,
            &self.secret,
            &mut self.rng,
            &peer,
            now.as_secs(),
        ) {
            Ok(record) => {
                self.on_pairing(&record);
                self.out.push_back(Output::Pairing(record));
            }
            Err(_) => self.stats.pairings_refused += 1,
        }
    }
}

impl<R: CryptoRng> Shell<R> {
    /// Whether a new peer can still be tracked ([`MAX_PAIRINGS`]).
    fn room_for(&self, peer: &[u8; 32]) -> bool {
        self.circle.len() < MAX_PAIRINGS || self.circle.tracks(peer)
    }

    fn make_invite(&mut self, now: Timestamp) {
        let mut secret = [0u8; INVITE_SECRET_BYTES];
        self.rng.fill_bytes(&mut secret);
        let invite = self.invites.make(self.provider, secret, now.as_millis());
        self.out.push_back(Output::Invite(invite));
    }

    fn accept_invite(&mut self, now: Timestamp, invite: Invite) {
        let peer = invite.inviter;
        let refused = if peer == self.pubkey {
            Some(PairRefusal::OwnInvite)
        } else if invite.expires.saturating_mul(1_000) <= now.as_millis() {
            Some(PairRefusal::Expired)
        } else if !self.room_for(&peer) {
            Some(PairRefusal::Full)
        } else if !self.accepting.contains_key(&peer) && self.accepting.len() >= MAX_ACCEPTING {
            Some(PairRefusal::Busy)
        } else {
            None
        };
        if let Some(r) = refused {
            self.out.push_back(Output::Paired {
                peer,
                outcome: Err(r),
            });
            return;
        }
        let Ok(record) = pairing_record(
            self.provider,
            &self.secret,
            &mut self.rng,
            &peer,
            now.as_secs(),
        ) else {
            self.out.push_back(Output::Paired {
                peer,
                outcome: Err(PairRefusal::Other),
            });
            return;
        };
        self.accepting.insert(
            peer,
            Accepting {
                id: invite.id(self.provider),
                proof: invite.proof(self.provider, &self.pubkey),
                record,
                sent: false,
            },
        );
        self.timers.cancel(&Timer::Accept(peer));
        self.timers.schedule(
            now.saturating_add(ms(ACCEPT_TIMEOUT_MS)),
            Timer::Accept(peer),
        );
        self.send_pair(peer);
    }

    /// Sends the `PAIR` of an invite being accepted from `peer`, once, on a link proving its key.
    fn send_pair(&mut self, peer: [u8; 32]) {
        let Some(link) = self
            .links
            .iter()
            .find(|(_, k)| **k == peer)
            .map(|(l, _)| *l)
        else {
            return;
        };
        let Some(a) = self.accepting.get_mut(&peer).filter(|a| !a.sent) else {
            return;
        };
        a.sent = true;
        let frame = PairFrame::Pair {
            id: a.id,
            proof: a.proof,
            record: a.record.clone(),
        };
        self.out.push_back(Output::ToLinkPair { link, frame });
    }

    /// Takes both records of a pairing just agreed, and has the host keep them.
    fn take_pair(&mut self, ours: Event, theirs: Event) {
        self.on_pairing(&ours);
        self.on_pairing(&theirs);
        self.out.push_back(Output::Pairing(ours));
        self.out.push_back(Output::Pairing(theirs));
    }

    fn on_pair_frame(&mut self, now: Timestamp, link: ConnId, text: &str) {
        let Some(&from) = self.links.get(&link) else {
            return;
        };
        let Some(frame) = PairFrame::parse(text) else {
            self.stats.bad_frames += 1;
            return;
        };
        match frame {
            PairFrame::Pair { id, proof, record } => {
                let checked = if self.room_for(&from) {
                    self.invites
                        .redeem(self.provider, &from, &id, &proof, &record, now.as_millis())
                } else {
                    Err(PairRefusal::Full)
                };
                let ours = checked.and_then(|()| {
                    pairing_record(
                        self.provider,
                        &self.secret,
                        &mut self.rng,
                        &from,
                        now.as_secs(),
                    )
                    .map_err(|_| PairRefusal::Other)
                });
                let answer = match ours {
                    Ok(ours) => {
                        self.take_pair(ours.clone(), record);
                        self.out.push_back(Output::Paired {
                            peer: from,
                            outcome: Ok(()),
                        });
                        Ok(ours)
                    }
                    Err(r) => {
                        self.stats.invites_refused += 1;
                        Err(String::from(r.reason()))
                    }
                };
                let frame = PairFrame::Paired {
                    id,
                    outcome: answer,
                };
                self.out.push_back(Output::ToLinkPair { link, frame });
            }
            PairFrame::Paired { id, outcome } => {
                if !self
                    .accepting
                    .get(&from)
                    .is_some_and(|a| a.sent && a.id == id)
                {
                    self.stats.pair_answers_ignored += 1;
                    return;
                }
                let Some(a) = self.accepting.remove(&from) else {
                    return;
                };
                self.timers.cancel(&Timer::Accept(from));
                let outcome = match outcome {
                    Ok(theirs) if is_record_of(self.provider, &theirs, &from, &self.pubkey) => {
                        self.take_pair(a.record, theirs);
                        Ok(())
                    }
                    Ok(_) => Err(PairRefusal::BadRecord),
                    Err(reason) => Err(PairRefusal::from_reason(&reason)),
                };
                self.out.push_back(Output::Paired {
                    peer: from,
                    outcome,
                });
            }
        }
    }
}

fn kind_of(r: &Request) -> Option<RequestKind> {
    Some(match r {
        Request::Info { .. } => RequestKind::Info,
        Request::Publish { .. } => RequestKind::Publish,
        Request::Subscribe { .. } => RequestKind::Subscribe,
        Request::Close { .. } => RequestKind::Close,
        Request::Blobs { .. } => RequestKind::Blobs,
    })
}

fn id_of(r: &Request) -> Option<String> {
    match r {
        Request::Info { id }
        | Request::Publish { id, .. }
        | Request::Subscribe { id, .. }
        | Request::Blobs { id, .. } => Some(id.clone()),
        Request::Close { .. } => None,
    }
}

impl<R: CryptoRng> Machine for Shell<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        match input {
            Input::Napplet { napplet, text } => self.on_napplet(now, napplet, &text),
            Input::NappletGone(napplet) => {
                let keys: Vec<SubKey> = self
                    .subs
                    .keys()
                    .filter(|(n, _)| *n == napplet)
                    .cloned()
                    .collect();
                for k in keys {
                    self.drop_sub(&k);
                }
                let calls: Vec<u64> = self
                    .blob_calls
                    .iter()
                    .filter(|(_, c)| c.napplet == napplet)
                    .map(|(n, _)| *n)
                    .collect();
                for n in calls {
                    if let Some(c) = self.blob_calls.remove(&n) {
                        for q in c.in_flight {
                            self.blob_questions.remove(&q);
                            self.timers.cancel(&Timer::BlobQuestion(q));
                        }
                    }
                    self.timers.cancel(&Timer::BlobCall(n));
                }
            }
            Input::Grant(napplet) => {
                if self.grants.len() < MAX_GRANTS {
                    self.grants.insert(napplet);
                }
            }
            Input::Revoke(napplet) => {
                self.grants.remove(&napplet);
                let keys: Vec<SubKey> = self
                    .subs
                    .keys()
                    .filter(|(n, _)| *n == napplet)
                    .cloned()
                    .collect();
                for k in keys {
                    self.end_sub(&k, NOT_GRANTED);
                }
            }
            Input::Online(on) => self.online = on,
            Input::LinkUp { link, key } => {
                if self.links.len() >= MAX_LINKS && !self.links.contains_key(&link) {
                    self.stats.links_refused += 1;
                } else {
                    self.links.insert(link, key);
                    self.send_pair(key);
                }
            }
            Input::LinkDown(link) => {
                self.links.remove(&link);
            }
            Input::Link { link, text } => self.on_link(now, link, &text),
            Input::Pair { peer } => self.pair(now, peer),
            Input::PairingRecord(record) => self.on_pairing(&record),
            Input::Invite => self.make_invite(now),
            Input::AcceptInvite(invite) => self.accept_invite(now, invite),
            Input::Unpair(peer) => {
                self.circle.remove(&peer);
                self.asks.remove(&peer);
                self.declined.remove(&peer);
            }
            Input::Decline { peer, decline } => {
                if decline && self.declined.len() < MAX_PAIRINGS {
                    self.declined.insert(peer);
                } else if !decline {
                    self.declined.remove(&peer);
                }
            }
            Input::Backlog { token, events } => self.on_backlog(token, events),
            Input::BlobsHeld { token, held } => self.on_blobs_held(token, held),
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.timers
            .wakeup("circle: backlog, blob or invite deadline")
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Query(qid) => {
                    if let Some(q) = self.queries.remove(&qid)
                        && let Some(sub) = self.subs.get_mut(&q.sub)
                        && sub.qid.as_deref() == Some(qid.as_str())
                    {
                        sub.qid = None;
                    }
                }
                Timer::Relay(qid) => {
                    self.relays.remove(&qid);
                }
                Timer::BlobQuestion(qid) => {
                    // Unanswered in time: that member counts as holding none of it (§2.2).
                    if let Some(q) = self.blob_questions.remove(&qid) {
                        if let Some(c) = self.blob_calls.get_mut(&q.call) {
                            c.in_flight.remove(&qid);
                        }
                        self.maybe_finish(q.call, false);
                    }
                }
                Timer::BlobCall(n) => self.maybe_finish(n, true),
                Timer::Accept(peer) => {
                    if self.accepting.remove(&peer).is_some() {
                        self.out.push_back(Output::Paired {
                            peer,
                            outcome: Err(PairRefusal::Timeout),
                        });
                    }
                }
            }
        }
        self.pump_blobs(now);
    }
}
