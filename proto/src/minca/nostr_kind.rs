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
            if s.stage == Stage::AwaitingChallenge
                && let Some(secret) = &s.secret
            {
                s.stage = Stage::Authenticating;
                todo.push((Waiter::Subscription(id.clone()), secret.clone()));
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

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use crate::nostr::expiration::Expiration;
    use alloc::string::ToString;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const NOW: Timestamp = Timestamp::from_millis(1_790_000_000_250);
    const DIAL: &str = "wss://relay.example.com/";

    fn link() -> NostrLink {
        let url = RelayUrl::parse("nostr+wss://relay.example.com/").unwrap();
        NostrLink::new(default_provider(), &url)
    }

    fn rng() -> ChaCha20Rng {
        ChaCha20Rng::seed_from_u64(9)
    }

    fn topic(n: u8) -> Topic {
        Topic::from_bytes(&[n; 32])
    }

    fn blob(text: &str) -> Blob {
        Blob::parse(text).unwrap()
    }

    fn sent_event(frame: &str) -> Event {
        match ClientMessage::parse(frame).unwrap() {
            ClientMessage::Event(e) => e,
            other => panic!("not an EVENT: {other:?}"),
        }
    }

    fn sent_auth(frame: &str) -> Event {
        match ClientMessage::parse(frame).unwrap() {
            ClientMessage::Auth(e) => e,
            other => panic!("not an AUTH: {other:?}"),
        }
    }

    fn sent_req(frame: &str) -> (String, Filter) {
        match ClientMessage::parse(frame).unwrap() {
            ClientMessage::Req {
                subscription,
                mut filters,
            } => {
                assert_eq!(filters.len(), 1);
                (subscription, filters.remove(0))
            }
            other => panic!("not a REQ: {other:?}"),
        }
    }

    fn sends(events: &[LinkEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|e| match e {
                LinkEvent::Send(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn ok(id: &EventId, accepted: bool, message: &str) -> String {
        RelayMessage::Ok {
            event_id: *id,
            accepted,
            message: message.into(),
        }
        .to_text()
    }

    /// What a relay forwards: an event signed by someone else's throwaway key.
    fn relayed(sub: &str, kind: u16, tags: Vec<Vec<String>>, content: &str) -> String {
        let p = default_provider();
        let mut r = ChaCha20Rng::seed_from_u64(77);
        let secret = generate_secp256k1(p, &mut r);
        let event = UnsignedEvent {
            created_at: NOW.as_secs(),
            kind,
            tags,
            content: content.into(),
        }
        .sign(p, &secret, &mut r)
        .unwrap();
        RelayMessage::Event {
            subscription: sub.into(),
            event,
        }
        .to_text()
    }

    #[test]
    fn a_published_blob_is_an_ephemeral_event_with_the_blob_as_content_and_the_topic_in_an_x_tag() {
        let mut l = link();
        let e = sent_event(&l.publish(NOW, &mut rng(), &topic(1), &blob("AZ3k")));
        assert_eq!(e.kind, PUBLISH_KIND);
        assert_eq!(e.kind, 24_733);
        assert_eq!(e.content, "AZ3k");
        assert_eq!(e.tags, vec![x_tag(&topic(1))]);
        assert_eq!(e.created_at, NOW.as_secs());
        assert_eq!(e.verify(default_provider()), Ok(()));
    }

    #[test]
    fn every_event_is_signed_by_a_fresh_throwaway_key() {
        let mut l = link();
        let mut r = rng();
        let a = sent_event(&l.publish(NOW, &mut r, &topic(1), &blob("AZ3k")));
        let b = sent_event(&l.publish(NOW, &mut r, &topic(1), &blob("AZ3k")));
        let c = sent_event(&l.drop_blob(NOW, &mut r, &topic(1), &blob("AZ3k"), None));
        for e in [&a, &b, &c] {
            assert_eq!(e.verify(default_provider()), Ok(()));
        }
        assert_ne!(a.pubkey, b.pubkey);
        assert_ne!(a.pubkey, c.pubkey);
        assert_ne!(b.pubkey, c.pubkey);
    }

    #[test]
    fn a_dropped_blob_is_a_regular_kind_expiring_after_its_ttl() {
        let mut l = link();
        let ttl = Ttl::from_millis(60_500).unwrap();
        let e = sent_event(&l.drop_blob(NOW, &mut rng(), &topic(2), &blob("AZ3k"), Some(ttl)));
        assert_eq!(e.kind, DROP_KIND);
        assert!((1000..10_000).contains(&e.kind), "a regular kind");
        assert_eq!(e.tag_value("x"), Some(topic(2).as_str()));
        // 1 790 000 000.250 s + 60.5 s = …060.75, rounded up so the blob lives its whole ttl.
        assert_eq!(Expiration::of(&e), Expiration::At(1_790_000_061));
    }

    #[test]
    fn a_drop_without_a_ttl_expires_in_14_days() {
        let mut l = link();
        let e = sent_event(&l.drop_blob(NOW, &mut rng(), &topic(2), &blob("AZ3k"), None));
        assert_eq!(e.kind, DROP_KIND);
        assert_eq!(
            Expiration::of(&e),
            Expiration::At(1_790_000_001 + 14 * 24 * 3600)
        );
    }

    #[test]
    fn a_drop_with_ttl_0_is_a_publish() {
        let mut l = link();
        let frame = l.drop_blob(
            NOW,
            &mut rng(),
            &topic(2),
            &blob("AZ3k"),
            Some(Ttl::PUBLISH_ONLY),
        );
        let e = sent_event(&frame);
        assert_eq!(e.kind, PUBLISH_KIND);
        assert_eq!(Expiration::of(&e), Expiration::Never);
        let done = l.on_text(NOW, &mut rng(), &ok(&e.id, true, ""));
        assert_eq!(
            done,
            vec![LinkEvent::Done {
                topic: topic(2),
                op: Op::Publish
            }]
        );
    }

    #[test]
    fn a_drop_is_done_on_ok_true_or_on_false_with_duplicate() {
        let mut l = link();
        let mut r = rng();
        let a = sent_event(&l.drop_blob(NOW, &mut r, &topic(3), &blob("AZ3k"), None));
        let b = sent_event(&l.drop_blob(NOW, &mut r, &topic(3), &blob("AZ3k"), None));
        let c = sent_event(&l.drop_blob(NOW, &mut r, &topic(3), &blob("AZ3k"), None));
        let done = LinkEvent::Done {
            topic: topic(3),
            op: Op::Drop,
        };
        assert_eq!(
            l.on_text(NOW, &mut r, &ok(&a.id, true, "")),
            vec![done.clone()]
        );
        assert_eq!(
            l.on_text(NOW, &mut r, &ok(&b.id, false, "duplicate: have it")),
            vec![done]
        );
        assert_eq!(
            l.on_text(NOW, &mut r, &ok(&c.id, false, "blocked: no")),
            vec![LinkEvent::Refused {
                topic: topic(3),
                op: Op::Drop,
                reason: "blocked: no".into()
            }]
        );
        // Each answer is taken once; another is counted and ignored.
        assert!(l.on_text(NOW, &mut r, &ok(&a.id, true, "")).is_empty());
        assert_eq!(l.stats().unknown_ok, 1);
    }

    #[test]
    fn watching_asks_for_both_kinds_under_the_topic_from_now() {
        let mut l = link();
        let (sub, f) = sent_req(&l.watch(NOW, &topic(4)).unwrap());
        assert_eq!(sub.chars().count(), 44);
        assert_eq!(f.kinds, Some(vec![PUBLISH_KIND, DROP_KIND]));
        assert_eq!(
            f.tags,
            BTreeMap::from([('x', vec![topic(4).as_str().to_string()])])
        );
        assert_eq!(f.since, Some(NOW.as_secs()));
        assert_eq!(f.limit, None);
        let close = l.unwatch(&topic(4)).unwrap();
        assert_eq!(ClientMessage::parse(&close), Ok(ClientMessage::Close(sub)));
        assert_eq!(l.unwatch(&topic(4)), None);
    }

    #[test]
    fn a_received_blob_id_is_base64url_of_sha256_of_the_content() {
        let mut l = link();
        let (sub, _) = sent_req(&l.watch(NOW, &topic(5)).unwrap());
        let got = l.on_text(
            NOW,
            &mut rng(),
            &relayed(&sub, PUBLISH_KIND, vec![x_tag(&topic(5))], "AZ3k"),
        );
        let id = base64url::encode(&default_provider().sha256(&[b"AZ3k"]));
        assert_eq!(id.len(), 43);
        assert_eq!(
            got,
            vec![LinkEvent::Blob {
                topic: topic(5),
                blob: blob("AZ3k"),
                id,
                fetched: false
            }]
        );
    }

    #[test]
    fn a_blob_is_taken_without_checking_the_throwaway_key() {
        let mut l = link();
        let (sub, _) = sent_req(&l.watch(NOW, &topic(5)).unwrap());
        let mut frame: serde_json::Value =
            serde_json::from_str(&relayed(&sub, PUBLISH_KIND, vec![x_tag(&topic(5))], "AZ3k"))
                .unwrap();
        frame[2]["sig"] = "00".repeat(64).into();
        let got = l.on_text(NOW, &mut rng(), &frame.to_string());
        assert!(
            matches!(got.as_slice(), [LinkEvent::Blob { .. }]),
            "{got:?}"
        );
    }

    #[test]
    fn events_past_their_expiration_are_not_taken() {
        let mut l = link();
        let fetch = l.fetch(&topic(6)).unwrap();
        let (sub, _) = sent_req(&fetch);
        let now_s = NOW.as_secs();
        let live = vec![x_tag(&topic(6)), expiration::tag(now_s + 1)];
        let past = vec![x_tag(&topic(6)), expiration::tag(now_s)];
        let garbled = vec![x_tag(&topic(6)), vec!["expiration".into(), "soon".into()]];
        let mut r = rng();
        assert_eq!(
            l.on_text(NOW, &mut r, &relayed(&sub, DROP_KIND, live, "AZ3k"))
                .len(),
            1
        );
        assert!(
            l.on_text(NOW, &mut r, &relayed(&sub, DROP_KIND, past, "AZ3k"))
                .is_empty()
        );
        assert!(
            l.on_text(NOW, &mut r, &relayed(&sub, DROP_KIND, garbled, "AZ3k"))
                .is_empty()
        );
        assert_eq!(l.stats().expired, 2);
    }

    #[test]
    fn an_event_without_the_subscriptions_topic_or_kind_is_ignored() {
        let mut l = link();
        let (w, _) = sent_req(&l.watch(NOW, &topic(7)).unwrap());
        let (f, _) = sent_req(&l.fetch(&topic(7)).unwrap());
        let mut r = rng();
        let cases = [
            relayed(&w, PUBLISH_KIND, vec![x_tag(&topic(8))], "AZ3k"),
            relayed(&w, PUBLISH_KIND, vec![], "AZ3k"),
            relayed(&w, 1, vec![x_tag(&topic(7))], "AZ3k"),
            // A fetch reads kept blobs only.
            relayed(&f, PUBLISH_KIND, vec![x_tag(&topic(7))], "AZ3k"),
        ];
        for c in &cases {
            assert!(l.on_text(NOW, &mut r, c).is_empty(), "{c}");
        }
        assert_eq!(l.stats().foreign, 4);
        // A subscription this link never opened.
        assert!(
            l.on_text(
                NOW,
                &mut r,
                &relayed("zzz", PUBLISH_KIND, vec![x_tag(&topic(7))], "AZ3k")
            )
            .is_empty()
        );
        assert_eq!(l.stats().unknown_subscription, 1);
    }

    #[test]
    fn content_that_is_not_a_blob_is_ignored() {
        let mut l = link();
        let (w, _) = sent_req(&l.watch(NOW, &topic(9)).unwrap());
        let mut r = rng();
        for content in ["", "AZ3k=", "not base64!", &"A".repeat(12_004)] {
            assert!(
                l.on_text(
                    NOW,
                    &mut r,
                    &relayed(&w, PUBLISH_KIND, vec![x_tag(&topic(9))], content)
                )
                .is_empty()
            );
        }
        assert_eq!(l.stats().bad_blob, 4);
    }

    #[test]
    fn a_fetch_reads_one_page_of_the_newest_500() {
        let mut l = link();
        let (sub, f) = sent_req(&l.fetch(&topic(10)).unwrap());
        assert_eq!(f.limit, Some(500));
        assert_eq!(f.kinds, Some(vec![DROP_KIND]));
        assert_eq!(f.since, None);
        assert_eq!(
            f.tags,
            BTreeMap::from([('x', vec![topic(10).as_str().to_string()])])
        );
        let mut r = rng();
        let got = l.on_text(
            NOW,
            &mut r,
            &relayed(&sub, DROP_KIND, vec![x_tag(&topic(10))], "AZ3k"),
        );
        assert!(matches!(
            got.as_slice(),
            [LinkEvent::Blob { fetched: true, .. }]
        ));
        let end = l.on_text(NOW, &mut r, &RelayMessage::Eose(sub.clone()).to_text());
        assert_eq!(
            end,
            vec![
                LinkEvent::Send(ClientMessage::Close(sub.clone()).to_text()),
                LinkEvent::FetchDone { topic: topic(10) }
            ]
        );
        // One page: nothing after EOSE is taken for that fetch.
        assert!(
            l.on_text(
                NOW,
                &mut r,
                &relayed(&sub, DROP_KIND, vec![x_tag(&topic(10))], "AZ3k")
            )
            .is_empty()
        );
    }

    #[test]
    fn auth_required_is_answered_from_the_same_key_and_the_refused_event_sent_again() {
        let mut l = link();
        let mut r = rng();
        let frame = l.drop_blob(NOW, &mut r, &topic(11), &blob("AZ3k"), None);
        let event = sent_event(&frame);
        // The relay challenged on connect; nothing is owed until something is refused.
        assert!(
            l.on_text(NOW, &mut r, &RelayMessage::Auth("ch-1".into()).to_text())
                .is_empty()
        );
        let out = l.on_text(NOW, &mut r, &ok(&event.id, false, "auth-required: sign in"));
        let [LinkEvent::Send(auth_frame)] = out.as_slice() else {
            panic!("{out:?}")
        };
        let auth_event = sent_auth(auth_frame);
        assert_eq!(auth_event.kind, 22_242);
        assert_eq!(auth_event.pubkey, event.pubkey, "the same throwaway key");
        assert_eq!(auth_event.tag_value("relay"), Some(DIAL));
        assert_eq!(auth_event.tag_value("challenge"), Some("ch-1"));
        let checked = auth::check(default_provider(), &auth_event, NOW, DIAL, "ch-1");
        assert_eq!(checked, Ok(event.pubkey));

        let again = l.on_text(NOW, &mut r, &ok(&auth_event.id, true, ""));
        assert_eq!(again, vec![LinkEvent::Send(frame)]);
        let done = l.on_text(NOW, &mut r, &ok(&event.id, true, ""));
        assert_eq!(
            done,
            vec![LinkEvent::Done {
                topic: topic(11),
                op: Op::Drop
            }]
        );
    }

    #[test]
    fn a_refusal_before_the_challenge_is_answered_when_it_comes() {
        let mut l = link();
        let mut r = rng();
        let a = sent_event(&l.publish(NOW, &mut r, &topic(12), &blob("AZ3k")));
        let b = sent_event(&l.publish(NOW, &mut r, &topic(12), &blob("AZ3k")));
        assert!(
            l.on_text(NOW, &mut r, &ok(&a.id, false, "auth-required: x"))
                .is_empty()
        );
        assert!(
            l.on_text(NOW, &mut r, &ok(&b.id, false, "auth-required: x"))
                .is_empty()
        );
        let out = l.on_text(NOW, &mut r, &RelayMessage::Auth("ch-2".into()).to_text());
        let mut keys: Vec<[u8; 32]> = sends(&out).iter().map(|f| sent_auth(f).pubkey).collect();
        keys.sort();
        let mut want = vec![a.pubkey, b.pubkey];
        want.sort();
        assert_eq!(keys, want, "each answered from its own key");
    }

    #[test]
    fn a_second_auth_required_refusal_is_final() {
        let mut l = link();
        let mut r = rng();
        let e = sent_event(&l.publish(NOW, &mut r, &topic(13), &blob("AZ3k")));
        l.on_text(NOW, &mut r, &RelayMessage::Auth("c".into()).to_text());
        let out = l.on_text(NOW, &mut r, &ok(&e.id, false, "auth-required: x"));
        let auth_event = sent_auth(sends(&out)[0]);
        assert_eq!(
            l.on_text(NOW, &mut r, &ok(&auth_event.id, true, "")).len(),
            1
        );
        let out = l.on_text(NOW, &mut r, &ok(&e.id, false, "auth-required: still no"));
        assert_eq!(
            out,
            vec![LinkEvent::Refused {
                topic: topic(13),
                op: Op::Publish,
                reason: "auth-required: still no".into()
            }]
        );
    }

    #[test]
    fn a_refused_auth_refuses_what_it_was_for() {
        let mut l = link();
        let mut r = rng();
        let e = sent_event(&l.publish(NOW, &mut r, &topic(14), &blob("AZ3k")));
        l.on_text(NOW, &mut r, &RelayMessage::Auth("c".into()).to_text());
        let out = l.on_text(NOW, &mut r, &ok(&e.id, false, "auth-required: x"));
        let auth_event = sent_auth(sends(&out)[0]);
        let out = l.on_text(
            NOW,
            &mut r,
            &ok(&auth_event.id, false, "restricted: not you"),
        );
        assert_eq!(
            out,
            vec![LinkEvent::Refused {
                topic: topic(14),
                op: Op::Publish,
                reason: "restricted: not you".into()
            }]
        );
    }

    #[test]
    fn a_subscription_closed_for_auth_is_sent_again_after_auth() {
        let mut l = link();
        let mut r = rng();
        let req = l.watch(NOW, &topic(15)).unwrap();
        let (sub, _) = sent_req(&req);
        let closed = RelayMessage::Closed {
            subscription: sub.clone(),
            message: "auth-required: x".into(),
        };
        assert!(l.on_text(NOW, &mut r, &closed.to_text()).is_empty());
        let out = l.on_text(NOW, &mut r, &RelayMessage::Auth("c".into()).to_text());
        let auth_event = sent_auth(sends(&out)[0]);
        assert_eq!(auth_event.kind, auth::AUTH_KIND);
        assert_eq!(auth_event.verify(default_provider()), Ok(()));
        assert_eq!(
            l.on_text(NOW, &mut r, &ok(&auth_event.id, true, "")),
            vec![LinkEvent::Send(req)]
        );
        // Closed again, for another reason: reported.
        let closed = RelayMessage::Closed {
            subscription: sub,
            message: "error: shutting down".into(),
        };
        assert_eq!(
            l.on_text(NOW, &mut r, &closed.to_text()),
            vec![LinkEvent::Closed {
                topic: topic(15),
                fetch: false,
                reason: "error: shutting down".into()
            }]
        );
    }

    #[test]
    fn malformed_frames_and_notices_are_counted_or_reported() {
        let mut l = link();
        let mut r = rng();
        for bad in ["", "{}", "[\"OK\"]", "[\"EVENT\",\"s\",{}]", "[\"FOO\"]"] {
            assert!(l.on_text(NOW, &mut r, bad).is_empty());
        }
        assert_eq!(l.stats().malformed, 5);
        assert_eq!(
            l.on_text(NOW, &mut r, &RelayMessage::Notice("hi".into()).to_text()),
            vec![LinkEvent::Notice("hi".into())]
        );
        assert!(
            l.on_text(NOW, &mut r, &RelayMessage::Eose("nope".into()).to_text())
                .is_empty()
        );
        assert_eq!(l.stats().unknown_subscription, 1);
    }

    #[test]
    fn pending_events_are_bounded_and_the_oldest_forgotten() {
        let mut l = link();
        let mut r = rng();
        let first = sent_event(&l.publish(NOW, &mut r, &topic(16), &blob("AZ3k")));
        for _ in 0..MAX_PENDING_EVENTS {
            l.publish(NOW, &mut r, &topic(16), &blob("AZ3k"));
        }
        assert_eq!(l.stats().evicted, 1);
        assert!(l.on_text(NOW, &mut r, &ok(&first.id, true, "")).is_empty());
        assert_eq!(l.stats().unknown_ok, 1);
    }

    #[test]
    fn subscriptions_are_bounded() {
        let mut l = link();
        for n in 0..MAX_SUBSCRIPTIONS {
            let t = Topic::from_bytes(&[
                (n % 256) as u8,
                (n / 256) as u8,
                1,
                2,
                3,
                4,
                5,
                6,
                7,
                8,
                9,
                10,
                11,
                12,
                13,
                14,
                15,
                16,
                17,
                18,
                19,
                20,
                21,
                22,
                23,
                24,
                25,
                26,
                27,
                28,
                29,
                30,
            ]);
            l.watch(NOW, &t).unwrap();
        }
        assert_eq!(l.fetch(&topic(200)), Err(LinkError::TooManySubscriptions));
        // Watching a watched topic again replaces its subscription.
        let t = Topic::from_bytes(&[
            0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
            23, 24, 25, 26, 27, 28, 29, 30,
        ]);
        assert!(l.watch(NOW, &t).is_ok());
    }

    #[test]
    fn closing_the_socket_forgets_the_challenge_pending_events_and_subscriptions() {
        let mut l = link();
        let mut r = rng();
        let (sub, _) = sent_req(&l.watch(NOW, &topic(17)).unwrap());
        let e = sent_event(&l.publish(NOW, &mut r, &topic(17), &blob("AZ3k")));
        l.on_text(NOW, &mut r, &RelayMessage::Auth("c".into()).to_text());
        l.on_close();
        assert!(
            l.on_text(NOW, &mut r, &ok(&e.id, false, "auth-required: x"))
                .is_empty()
        );
        assert!(
            l.on_text(
                NOW,
                &mut r,
                &relayed(&sub, PUBLISH_KIND, vec![x_tag(&topic(17))], "AZ3k")
            )
            .is_empty()
        );
        assert_eq!(l.stats().unknown_ok, 1);
        assert_eq!(l.stats().unknown_subscription, 1);
    }
}
