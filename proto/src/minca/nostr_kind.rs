//! A Nostr relay as a Minca relay kind (Minca 04 Network §1.5), as a per-socket sans-IO codec.
//!
//! The relay client (§2.1) drives one [`NostrLink`] per `nostr+wss:` socket: it turns §1.1's four
//! operations into NIP-01 frames to send, and each text frame the relay sends into
//! [`LinkEvent`]s. No I/O, no clock: `now` and the RNG are arguments.
//!
//! | §1.1 | Nostr |
//! | --- | --- |
//! | publish | `EVENT` of kind [`PUBLISH_KIND`] (ephemeral: relays forward it and keep nothing), content the blob, tag `["x", topic]` |
//! | watch | `REQ` for kinds [`PUBLISH_KIND`] and [`DROP_KIND`] with `#x` the topic, `since` now |
//! | drop | `EVENT` of kind [`DROP_KIND`] (regular: relays keep it) with a NIP-40 `expiration` |
//! | fetch | `REQ` for kind [`DROP_KIND`] with `#x` the topic and `limit` [`FETCH_LIMIT`]: one page, the newest |
//!
//! Every event is signed by a fresh throwaway secp256k1 key. The key is kept (boundedly) while its
//! event awaits `OK`, because a relay that answers `OK` false `auth-required:` is answered with a
//! NIP-42 `AUTH` event from that same key, and on the relay's `OK` to that the refused event is
//! sent again (§1.5). A subscription refused with `CLOSED` `auth-required:` is answered the same way,
//! with a fresh key of its own, and its `REQ` sent again.
//!
//! Received events are taken only when they answer one of this link's subscriptions, carry its
//! topic in their `x` tag and one of its kinds, are not past their NIP-40 expiration, and carry a
//! valid blob (`Blob::parse`). Their signatures are not checked: "the key proves nothing and a
//! receiver need not check it" (§1.5); the blob is sealed and its sender proven end to end.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::relay_url::RelayUrl;
use super::relay_wire::{Blob, Topic, Ttl};
use crate::codec::base64url;
use crate::core::bounded::MapInsert;
use crate::core::{BoundedMap, Timestamp};
use crate::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use crate::nostr::event::{EventId, UnsignedEvent};
use crate::nostr::expiration;
use crate::nostr::message::{ClientMessage, Filter, RelayMessage};
use crate::nostr::{Event, auth};

/// The kind of a published blob: ephemeral (NIP-01: 20000 ≤ kind < 30000, "not expected to be
/// stored by relays"), the reference implementation's `NOSTR_EPHEMERAL_KIND` and §1.5's example.
pub const PUBLISH_KIND: u16 = 24_733;

/// The kind of a dropped blob: a regular kind (NIP-01: 1000 ≤ kind < 10000, "expected to be
/// stored by relays"). The reference's `NOSTR_HELD_KIND` value was lost with §1.2's table; 4733
/// mirrors [`PUBLISH_KIND`] in the regular range and no NIP assigns it (`docs/decisions.md`).
pub const DROP_KIND: u16 = 4_733;

/// A drop's expiration when the dropper gives no time to live: 14 days, in seconds (§1.5).
pub const DEFAULT_DROP_TTL_SECS: u64 = 14 * 24 * 60 * 60;

/// Events a fetch asks for: "the newest 500 the relay gives" (§1.5).
pub const FETCH_LIMIT: u64 = 500;

/// Events sent and not yet answered by `OK`, whose throwaway keys the link keeps for a possible
/// `AUTH`. When full, the oldest is forgotten (counted in [`LinkStats::evicted`]); the relay
/// client paces sends at 20 a second (§2.1), so 256 is more than ten seconds of silence.
pub const MAX_PENDING_EVENTS: usize = 256;

/// Subscriptions (watched and fetching topics) one link holds.
pub const MAX_SUBSCRIPTIONS: usize = 128;

/// Which §1.1 operation an event carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Publish: to whoever watches now, kept by nobody.
    Publish,
    /// Drop: kept until its expiration.
    Drop,
}

/// What a relay frame meant for the Minca client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkEvent {
    /// Send this text frame to the relay (an `AUTH` answer, or something sent again after it).
    Send(String),
    /// A blob arrived on a watched or fetched topic.
    Blob {
        /// The topic, from the subscription.
        topic: Topic,
        /// The blob.
        blob: Blob,
        /// base64url(SHA-256(UTF-8(content))), computed here (§1.5).
        id: String,
        /// Whether it answered a fetch (rather than a watch).
        fetched: bool,
    },
    /// The relay took a published or dropped blob: `OK` true, or false with `duplicate:` (§1.5).
    Done {
        /// The blob's topic.
        topic: Topic,
        /// What it was.
        op: Op,
    },
    /// The relay refused a published or dropped blob (or its `AUTH`).
    Refused {
        /// The blob's topic.
        topic: Topic,
        /// What it was.
        op: Op,
        /// The relay's message.
        reason: String,
    },
    /// A fetch's page ended (`EOSE`); the subscription is closed.
    FetchDone {
        /// The topic fetched.
        topic: Topic,
    },
    /// The relay ended a subscription (`CLOSED`), and no `AUTH` could reopen it.
    Closed {
        /// The topic.
        topic: Topic,
        /// Whether it was a fetch.
        fetch: bool,
        /// The relay's message.
        reason: String,
    },
    /// A `NOTICE`, for logs.
    Notice(String),
}

/// Why the link could not start a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkError {
    /// [`MAX_SUBSCRIPTIONS`] are open.
    TooManySubscriptions,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManySubscriptions => {
                write!(f, "{MAX_SUBSCRIPTIONS} subscriptions already open")
            }
        }
    }
}

impl core::error::Error for LinkError {}

/// What the link ignored, by reason: bad input is counted, never silently lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames that are not well-formed NIP-01 relay messages.
    pub malformed: u64,
    /// Events, `EOSE` or `CLOSED` for a subscription this link does not hold.
    pub unknown_subscription: u64,
    /// `OK` for an event this link is not waiting on.
    pub unknown_ok: u64,
    /// Events of a kind, or with an `x` tag, their subscription did not ask for.
    pub foreign: u64,
    /// Events past their NIP-40 expiration.
    pub expired: u64,
    /// Events whose content is not a valid blob.
    pub bad_blob: u64,
    /// Pending events forgotten because [`MAX_PENDING_EVENTS`] were waiting.
    pub evicted: u64,
}

/// Where an event waiting on `OK` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Sent once.
    Sent,
    /// Refused `auth-required:` before any challenge came: answer the next one.
    AwaitingChallenge,
    /// `AUTH` sent; the event goes again on its `OK`.
    Authenticating,
    /// Sent again after `AUTH`: a second refusal is final.
    Resent,
}

#[derive(Debug, Clone)]
struct Pending {
    topic: Topic,
    op: Op,
    secret: Secp256k1Secret,
    frame: String,
    stage: Stage,
}

#[derive(Debug, Clone)]
struct Subscription {
    topic: Topic,
    fetch: bool,
    req: String,
    /// The key an `AUTH` for this subscription is signed with, once refused.
    secret: Option<Secp256k1Secret>,
    stage: Stage,
}

/// What goes again when an `AUTH` event is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Waiter {
    Event(EventId),
    Subscription(String),
}

/// One socket to a Nostr relay, as Minca's relay kind (§1.5).
pub struct NostrLink {
    provider: &'static dyn CryptoProvider,
    relay_url: String,
    challenge: Option<String>,
    pending: BoundedMap<EventId, Pending>,
    subscriptions: BTreeMap<String, Subscription>,
    /// `AUTH` events sent, by id, and what each one is for. Bounded like `pending`, which every
    /// entry answers for (subscriptions add at most [`MAX_SUBSCRIPTIONS`]).
    auths: BoundedMap<EventId, Waiter>,
    stats: LinkStats,
}

impl fmt::Debug for NostrLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NostrLink")
            .field("relay_url", &self.relay_url)
            .field("pending", &self.pending.len())
            .field("subscriptions", &self.subscriptions.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn subscription_id(topic: &Topic, fetch: bool) -> String {
    // One letter and the 43-character topic: 44 characters, within NIP-01's 64, and a watch and a
    // fetch of one topic never share an id.
    let mut id = String::from(if fetch { "f" } else { "w" });
    id.push_str(topic.as_str());
    id
}

fn x_tag(topic: &Topic) -> Vec<String> {
    vec![String::from("x"), String::from(topic.as_str())]
}

impl NostrLink {
    /// A link to `relay`, whose dial URL (without `nostr+`, §1.2) is what `AUTH` events name.
    pub fn new(provider: &'static dyn CryptoProvider, relay: &RelayUrl) -> Self {
        Self {
            provider,
            relay_url: relay.dial_url(),
            challenge: None,
            pending: BoundedMap::new(MAX_PENDING_EVENTS),
            subscriptions: BTreeMap::new(),
            auths: BoundedMap::new(MAX_PENDING_EVENTS + MAX_SUBSCRIPTIONS),
            stats: LinkStats::default(),
        }
    }

    /// What the link has ignored so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The socket closed: forget the challenge, the pending events and the subscriptions. The
    /// relay client watches its topics again on the next socket (§2.1).
    pub fn on_close(&mut self) {
        self.challenge = None;
        self.pending = BoundedMap::new(MAX_PENDING_EVENTS);
        self.subscriptions.clear();
        self.auths = BoundedMap::new(MAX_PENDING_EVENTS + MAX_SUBSCRIPTIONS);
    }

    /// Watch `topic` from `now` on: the `REQ` to send. Watching a watched topic again replaces the
    /// subscription (NIP-01), with a new `since`.
    pub fn watch(&mut self, now: Timestamp, topic: &Topic) -> Result<String, LinkError> {
        let filter = Filter {
            kinds: Some(vec![PUBLISH_KIND, DROP_KIND]),
            tags: BTreeMap::from([('x', vec![String::from(topic.as_str())])]),
            since: Some(now.as_secs()),
            ..Filter::default()
        };
        self.subscribe(topic, false, filter)
    }

    /// Stop watching `topic`: the `CLOSE` to send, or `None` if it was not watched.
    pub fn unwatch(&mut self, topic: &Topic) -> Option<String> {
        let id = subscription_id(topic, false);
        self.subscriptions
            .remove(&id)
            .map(|_| ClientMessage::Close(id).to_text())
    }

    /// Fetch what is kept under `topic`: one page, the newest [`FETCH_LIMIT`] (§1.5). The `REQ` to
    /// send; its blobs arrive as [`LinkEvent::Blob`] and its end as [`LinkEvent::FetchDone`].
    pub fn fetch(&mut self, topic: &Topic) -> Result<String, LinkError> {
        let filter = Filter {
            kinds: Some(vec![DROP_KIND]),
            tags: BTreeMap::from([('x', vec![String::from(topic.as_str())])]),
            limit: Some(FETCH_LIMIT),
            ..Filter::default()
        };
        self.subscribe(topic, true, filter)
    }

    fn subscribe(
        &mut self,
        topic: &Topic,
        fetch: bool,
        filter: Filter,
    ) -> Result<String, LinkError> {
        let id = subscription_id(topic, fetch);
        if !self.subscriptions.contains_key(&id) && self.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(LinkError::TooManySubscriptions);
        }
        let req = ClientMessage::Req {
            subscription: id.clone(),
            filters: vec![filter],
        }
        .to_text();
        self.subscriptions.insert(
            id,
            Subscription {
                topic: topic.clone(),
                fetch,
                req: req.clone(),
                secret: None,
                stage: Stage::Sent,
            },
        );
        Ok(req)
    }

    /// Publish `blob` under `topic`: the `EVENT` to send, of kind [`PUBLISH_KIND`], signed by a
    /// fresh key.
    pub fn publish(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        topic: &Topic,
        blob: &Blob,
    ) -> String {
        self.send_event(now, rng, topic, blob, Op::Publish, Vec::new())
    }

    /// Drop `blob` under `topic` to be kept for `ttl`, or [`DEFAULT_DROP_TTL_SECS`] when `None`
    /// (§1.5): the `EVENT` to send, of kind [`DROP_KIND`] with a NIP-40 `expiration`, signed by a
    /// fresh key. The expiration is rounded up to a whole second so the blob lives at least its
    /// ttl. A ttl of 0 keeps nothing (§1.4), so it is a publish.
    pub fn drop_blob(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        topic: &Topic,
        blob: &Blob,
        ttl: Option<Ttl>,
    ) -> String {
        let expires_ms = match ttl {
            Some(t) if !t.is_kept() => return self.publish(now, rng, topic, blob),
            Some(t) => now.as_millis().saturating_add(t.as_millis()),
            None => now.as_millis().saturating_add(DEFAULT_DROP_TTL_SECS * 1000),
        };
        let tags = vec![expiration::tag(expires_ms.div_ceil(1000))];
        self.send_event(now, rng, topic, blob, Op::Drop, tags)
    }

    fn send_event(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        topic: &Topic,
        blob: &Blob,
        op: Op,
        extra_tags: Vec<Vec<String>>,
    ) -> String {
        let secret = generate_secp256k1(self.provider, rng);
        let mut tags = vec![x_tag(topic)];
        tags.extend(extra_tags);
        let unsigned = UnsignedEvent {
            created_at: now.as_secs(),
            kind: match op {
                Op::Publish => PUBLISH_KIND,
                Op::Drop => DROP_KIND,
            },
            tags,
            content: String::from(blob.as_str()),
        };
        let event = self.sign(unsigned, &secret, rng);
        let frame = ClientMessage::Event(event.clone()).to_text();
        let pending = Pending {
            topic: topic.clone(),
            op,
            secret,
            frame: frame.clone(),
            stage: Stage::Sent,
        };
        if let MapInsert::Evicted(..) = self.pending.insert(event.id, pending) {
            self.stats.evicted += 1;
        }
        frame
    }

    fn sign(
        &self,
        unsigned: UnsignedEvent,
        secret: &Secp256k1Secret,
        rng: &mut dyn rand_core::CryptoRng,
    ) -> Event {
        // `generate_secp256k1` returns only secrets the provider accepts, and signing with an
        // accepted secret has no other failure.
        unsigned
            .sign(self.provider, secret, rng)
            .expect("signing with a generated secp256k1 secret")
    }

    /// One text frame from the relay, at `now`: what it means, in order. Frames that mean
    /// nothing to Minca are counted in [`NostrLink::stats`].
    pub fn on_text(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        text: &str,
    ) -> Vec<LinkEvent> {
        let Ok(message) = RelayMessage::parse(text) else {
            self.stats.malformed += 1;
            return Vec::new();
        };
        let mut out = Vec::new();
        match message {
            RelayMessage::Event {
                subscription,
                event,
            } => self.on_event(now, &subscription, &event, &mut out),
            RelayMessage::Ok {
                event_id,
                accepted,
                message,
            } => self.on_ok(now, rng, event_id, accepted, message, &mut out),
            RelayMessage::Eose(id) => match self.subscriptions.get(&id) {
                Some(sub) if sub.fetch => {
                    let topic = sub.topic.clone();
                    self.subscriptions.remove(&id);
                    out.push(LinkEvent::Send(ClientMessage::Close(id).to_text()));
                    out.push(LinkEvent::FetchDone { topic });
                }
                // A watch's stored events end; live ones follow.
                Some(_) => {}
                None => self.stats.unknown_subscription += 1,
            },
            RelayMessage::Closed {
                subscription,
                message,
            } => self.on_closed(now, rng, subscription, message, &mut out),
            RelayMessage::Notice(text) => out.push(LinkEvent::Notice(text)),
            RelayMessage::Auth(challenge) => {
                self.challenge = Some(challenge);
                self.answer_waiting(now, rng, &mut out);
            }
        }
        out
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        subscription: &str,
        event: &Event,
        out: &mut Vec<LinkEvent>,
    ) {
        let Some(sub) = self.subscriptions.get(subscription) else {
            self.stats.unknown_subscription += 1;
            return;
        };
        let kind_ok = if sub.fetch {
            event.kind == DROP_KIND
        } else {
            event.kind == PUBLISH_KIND || event.kind == DROP_KIND
        };
        if !kind_ok || event.tag_value("x") != Some(sub.topic.as_str()) {
            self.stats.foreign += 1;
            return;
        }
        if expiration::is_expired(event, now) {
            self.stats.expired += 1;
            return;
        }
        let Ok(blob) = Blob::parse(&event.content) else {
            self.stats.bad_blob += 1;
            return;
        };
        let id = base64url::encode(&self.provider.sha256(&[event.content.as_bytes()]));
        out.push(LinkEvent::Blob {
            topic: sub.topic.clone(),
            blob,
            id,
            fetched: sub.fetch,
        });
    }

    fn on_ok(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        id: EventId,
        accepted: bool,
        message: String,
        out: &mut Vec<LinkEvent>,
    ) {
        if let Some(waiter) = self.auths.remove(&id) {
            self.on_auth_answer(waiter, accepted, message, out);
            return;
        }
        let Some(pending) = self.pending.get_mut(&id) else {
            self.stats.unknown_ok += 1;
            return;
        };
        if accepted || message.starts_with("duplicate:") {
            let (topic, op) = (pending.topic.clone(), pending.op);
            self.pending.remove(&id);
            out.push(LinkEvent::Done { topic, op });
            return;
        }
        if is_auth_required(&message) && pending.stage == Stage::Sent {
            pending.stage = Stage::AwaitingChallenge;
            self.answer_waiting(now, rng, out);
            return;
        }
        let (topic, op) = (pending.topic.clone(), pending.op);
        self.pending.remove(&id);
        out.push(LinkEvent::Refused {
            topic,
            op,
            reason: message,
        });
    }

    fn on_auth_answer(
        &mut self,
        waiter: Waiter,
        accepted: bool,
        message: String,
        out: &mut Vec<LinkEvent>,
    ) {
        match waiter {
            Waiter::Event(id) => {
                let Some(pending) = self.pending.get_mut(&id) else {
                    return;
                };
                if accepted {
                    pending.stage = Stage::Resent;
                    out.push(LinkEvent::Send(pending.frame.clone()));
                } else {
                    let (topic, op) = (pending.topic.clone(), pending.op);
                    self.pending.remove(&id);
                    out.push(LinkEvent::Refused {
                        topic,
                        op,
                        reason: message,
                    });
                }
            }
            Waiter::Subscription(id) => {
                let Some(sub) = self.subscriptions.get_mut(&id) else {
                    return;
                };
                if accepted {
                    sub.stage = Stage::Resent;
                    out.push(LinkEvent::Send(sub.req.clone()));
                } else if let Some(sub) = self.subscriptions.remove(&id) {
                    out.push(LinkEvent::Closed {
                        topic: sub.topic,
                        fetch: sub.fetch,
                        reason: message,
                    });
                }
            }
        }
    }

    fn on_closed(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        id: String,
        message: String,
        out: &mut Vec<LinkEvent>,
    ) {
        let Some(sub) = self.subscriptions.get_mut(&id) else {
            self.stats.unknown_subscription += 1;
            return;
        };
        if is_auth_required(&message) && sub.stage == Stage::Sent {
            sub.stage = Stage::AwaitingChallenge;
            sub.secret = Some(generate_secp256k1(self.provider, rng));
            self.answer_waiting(now, rng, out);
            return;
        }
        if let Some(sub) = self.subscriptions.remove(&id) {
            out.push(LinkEvent::Closed {
                topic: sub.topic,
                fetch: sub.fetch,
                reason: message,
            });
        }
    }

    /// Answers the current challenge for everything refused `auth-required:` that has not been
    /// answered yet, each with its own key.
    fn answer_waiting(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        out: &mut Vec<LinkEvent>,
    ) {
        let Some(challenge) = self.challenge.clone() else {
            return;
        };
        let mut todo: Vec<(Waiter, Secp256k1Secret)> = Vec::new();
        let waiting: Vec<EventId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.stage == Stage::AwaitingChallenge)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            if let Some(p) = self.pending.get_mut(&id) {
                p.stage = Stage::Authenticating;
                todo.push((Waiter::Event(id), p.secret.clone()));
            }
        }
        for (id, s) in self.subscriptions.iter_mut() {
            if s.stage == Stage::AwaitingChallenge {
                if let Some(secret) = &s.secret {
                    s.stage = Stage::Authenticating;
                    todo.push((Waiter::Subscription(id.clone()), secret.clone()));
                }
            }
        }
        for (waiter, secret) in todo {
            let event = self.sign(
                auth::unsigned(now, &self.relay_url, &challenge),
                &secret,
                rng,
            );
            self.auths.insert(event.id, waiter);
            out.push(LinkEvent::Send(ClientMessage::Auth(event).to_text()));
        }
    }
}

/// NIP-42: a relay refuses what needs authentication with a message starting `auth-required:`.
fn is_auth_required(message: &str) -> bool {
    message.starts_with("auth-required:")
}
