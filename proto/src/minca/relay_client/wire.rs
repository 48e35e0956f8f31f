//! The seam between the relay client's rules and a relay kind's wire format (§1.2).
//!
//! The client's rules (redial, pacing, pings, watching again, TURN) are the same for every kind of
//! relay; only what a socket's frames look like differs. [`Codec`] is that difference: it turns
//! the client's [`Intent`]s into text frames, and a relay's text frames into [`Heard`] events and
//! any frames the kind must answer with. Each kind is one variant here and one arm in
//! [`Codec::for_kind`]: a Minca relay (§1.4) and a Nostr relay (§1.5, through [`NostrLink`]).
//!
//! What a kind cannot do lives here too, in one place each: a Nostr relay has no `ping` (so the
//! client never pings it, [`Codec::pings`]) and no TURN (an `ice` request encodes to nothing and
//! no `ice` offer ever comes from it, so §3's "every relay that has TURN" never names it).

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use rand_core::CryptoRng;

use super::MAX_READS_PER_RELAY;

use crate::core::Timestamp;
use crate::crypto::CryptoProvider;
use crate::minca::nostr_kind::{FETCH_LIMIT, MAX_SUBSCRIPTIONS};
use crate::minca::nostr_kind::{LinkEvent, NostrLink};
use crate::minca::relay_url::{RelayKind, RelayUrl};
use crate::minca::relay_wire::{
    Blob, ClientMessage, IceServers, RelayFrame, RelayMessage, Topic, TopicRead, Ttl,
};

/// Answers a Minca relay socket may owe per topic at once: the answer to a watch and to a read of
/// the same topic. More cannot be outstanding, because a socket watches a topic once and reads it
/// once at a time; the bound keeps a confused relay from growing the list.
const MAX_ANSWERS_PER_TOPIC: usize = 4;

/// Something the client wants of a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Intent {
    /// Receive every blob published under the topic from now on (and what the relay keeps).
    Watch(Topic),
    /// Stop receiving the topic's blobs (a kind without it sends nothing: the client then ignores
    /// what still comes).
    Unwatch(Topic),
    /// Read what the relay keeps under the topic, page by page.
    Read(Topic),
    /// Hand a blob to the topic's watchers now, or keep it for `ttl` too.
    Drop(Topic, Blob, Ttl),
    /// Ask for TURN passwords.
    Ice,
    /// Ask for any answer at all, to learn the socket is alive.
    Ping,
}

/// What a relay's frame meant, handed out while the frame is read: a pushed blob is still the
/// frame's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard<'a> {
    /// A blob pushed under a topic, both checked (§1.4), with the bytes the blob carries when its
    /// check decoded them (a Minca relay's `mail`).
    Blob(&'a str, &'a str, Option<&'a [u8]>),
    /// A page of a read; `done` when no more pages of it will come.
    Page {
        /// The topic read.
        topic: Topic,
        /// The blobs on the page.
        blobs: Vec<Blob>,
        /// Whether the read is over.
        done: bool,
    },
    /// A TURN offer, already in the §2.1 shape.
    Ice(IceServers),
    /// The answer to a ping.
    Pong,
    /// The relay refused something sent: a Nostr `OK` false that no `AUTH` turned, or a watch it
    /// ended with `CLOSED`.
    Refused,
}

/// The result of reading one frame, besides what it meant (handed out as [`Heard`]).
#[derive(Debug, Default)]
pub(super) struct Decoded {
    /// Frames the kind sends in answer (the next page of a read).
    pub(super) replies: Vec<String>,
    /// Frames the kind sends on behalf of earlier application sends (a Nostr `AUTH`, the event or
    /// `REQ` it lets through again, the `CLOSE` ending a fetch): the client queues them as
    /// application sends, so they share that bound.
    pub(super) answers: Vec<String>,
    /// Whether the frame was not a well-formed message of the kind.
    pub(super) malformed: bool,
}

/// A relay kind's wire handling, one per socket.
#[derive(Debug)]
pub(super) enum Codec {
    /// §1.4, a Minca relay.
    Minca(MincaCodec),
    /// §1.5, a Nostr relay (boxed: a link's tables are far larger than a Minca codec's).
    Nostr(Box<NostrCodec>),
}

impl Codec {
    /// The codec for `relay`, or `None` for a kind this client does not speak, which the client
    /// passes over (§1.2). The Nostr kind signs its events with `provider`, the one the client
    /// was handed.
    pub(super) fn for_kind(
        relay: &RelayUrl,
        provider: &'static dyn CryptoProvider,
    ) -> Option<Self> {
        match relay.kind() {
            RelayKind::Minca => Some(Self::Minca(MincaCodec::default())),
            RelayKind::Nostr => Some(Self::Nostr(Box::new(NostrCodec {
                link: NostrLink::new(provider, relay),
                watches: BTreeSet::new(),
                reads: BTreeMap::new(),
            }))),
            _ => None,
        }
    }

    /// Whether this client speaks `kind` (has a codec for it); the others are passed over (§1.2).
    pub(super) fn speaks(kind: &RelayKind) -> bool {
        matches!(kind, RelayKind::Minca | RelayKind::Nostr)
    }

    /// The frame that carries `intent` at `now`; `None` when the kind cannot do it. `rng` is for
    /// kinds that sign what they send (§1.5's throwaway keys). One frame at most for every kind:
    /// not a list, which would be an allocation for every ping and drop.
    pub(super) fn encode(
        &mut self,
        now: Timestamp,
        rng: &mut dyn CryptoRng,
        intent: Intent,
    ) -> Option<String> {
        match self {
            Self::Minca(c) => c.encode(intent),
            Self::Nostr(c) => c.encode(now, rng, intent),
        }
    }

    /// Reads one text frame that arrived at `now`, handing what it meant to `heard` in order
    /// (nothing for a frame that meant nothing usable).
    pub(super) fn decode(
        &mut self,
        now: Timestamp,
        rng: &mut dyn CryptoRng,
        text: &str,
        heard: &mut dyn FnMut(Heard<'_>),
    ) -> Decoded {
        match self {
            Self::Minca(c) => c.decode(text, heard),
            Self::Nostr(c) => c.decode(now, rng, text, heard),
        }
    }

    /// The socket closed: forget what it owed, and name the reads it cut short.
    pub(super) fn reset(&mut self) -> Vec<Topic> {
        match self {
            Self::Minca(c) => c.reset(),
            Self::Nostr(c) => c.reset(),
        }
    }

    /// Whether this kind answers a `ping` (§2.1: "ping a Minca relay"); NIP-01 has no such
    /// message, so a Nostr socket is never pinged nor given up for silence.
    pub(super) fn pings(&self) -> bool {
        matches!(self, Self::Minca(_))
    }

    /// Whether a read of `topic` is under way.
    pub(super) fn reading(&self, topic: &Topic) -> bool {
        match self {
            Self::Minca(c) => c.reads.contains_key(topic),
            Self::Nostr(c) => c.reads.contains_key(topic),
        }
    }

    /// Whether another read may start: fewer than [`MAX_READS_PER_RELAY`] are under way, and the
    /// kind has room for one more (a Nostr link holds at most [`MAX_SUBSCRIPTIONS`] watches and
    /// fetches together).
    pub(super) fn can_read(&self) -> bool {
        match self {
            Self::Minca(c) => c.reads.len() < MAX_READS_PER_RELAY,
            Self::Nostr(c) => {
                c.reads.len() < MAX_READS_PER_RELAY
                    && c.reads.len() + c.watches.len() < MAX_SUBSCRIPTIONS
            }
        }
    }
}

/// What a Minca relay owes an answer to, in the order it will answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// The `mail` answering a `fetch` with `watch`.
    Watch,
    /// The `mail` answering a page of a read.
    Page,
}

/// The Minca relay protocol (§1.4) on one socket.
///
/// A `mail` is the answer to a `fetch` or a blob pushed to a watcher, and looks the same either
/// way; a relay answers in order, so the codec keeps, per topic, what it asked and has not heard
/// back, and reads each `mail` as the answer to the oldest. A `mail` nothing was asked for is a
/// push.
#[derive(Debug, Default)]
pub(super) struct MincaCodec {
    owed: BTreeMap<Topic, VecDeque<Owed>>,
    reads: BTreeMap<Topic, TopicRead>,
}

impl MincaCodec {
    fn encode(&mut self, intent: Intent) -> Option<String> {
        let message = match intent {
            // §1.4 has no unwatch: the socket keeps the watch until it closes.
            Intent::Unwatch(_) => return None,
            Intent::Watch(topic) => {
                self.owe(&topic, Owed::Watch);
                ClientMessage::Fetch {
                    topic,
                    after: 0,
                    watch: true,
                }
            }
            Intent::Read(topic) => {
                let (read, first) = TopicRead::start(topic.clone(), false);
                self.owe(&topic, Owed::Page);
                self.reads.insert(topic, read);
                first
            }
            Intent::Drop(topic, blob, ttl) => ClientMessage::Drop { topic, blob, ttl },
            Intent::Ice => ClientMessage::Ice,
            Intent::Ping => ClientMessage::Ping,
        };
        Some(message.to_text())
    }

    fn owe(&mut self, topic: &Topic, what: Owed) {
        let owed = self.owed.entry(topic.clone()).or_default();
        if owed.len() < MAX_ANSWERS_PER_TOPIC {
            owed.push_back(what);
        }
    }

    fn decode(&mut self, text: &str, heard: &mut dyn FnMut(Heard<'_>)) -> Decoded {
        let mut out = Decoded::default();
        // A mail's blobs decoded into a buffer of its own, not one the codec keeps: with many
        // nodes a kept buffer is cold memory at every frame, where a fresh block from the
        // allocator is most often in cache (docs/performance.md, twelfth passes together).
        let message = match RelayMessage::read(text) {
            Ok(m) => m,
            Err(_) => {
                out.malformed = true;
                return out;
            }
        };
        match message {
            RelayFrame::Mail(mail) => {
                let topic = mail.topic();
                let mut owed = None;
                if let Some(queue) = self.owed.get_mut(topic) {
                    owed = queue.pop_front();
                    if queue.is_empty() {
                        self.owed.remove(topic);
                    }
                }
                match (owed, self.reads.get_mut(topic)) {
                    // Pages are rare (a fetch's): read as an owned mail, as the reader takes it.
                    (Some(Owed::Page), Some(read)) => {
                        let mail = mail.to_mail();
                        let next = read.on_page(&mail);
                        let done = next.is_none();
                        if let Some(next) = next {
                            self.owe(&mail.topic, Owed::Page);
                            out.replies.push(next.to_text());
                        } else {
                            self.reads.remove(&mail.topic);
                        }
                        heard(Heard::Page {
                            blobs: mail.items.into_iter().map(|i| i.blob).collect(),
                            topic: mail.topic,
                            done,
                        });
                    }
                    // Pushed blobs, nearly all a client hears: handed out as the frame's text.
                    _ => {
                        for (blob, bytes) in mail.blobs_decoded() {
                            heard(Heard::Blob(topic, blob, Some(bytes)));
                        }
                    }
                }
            }
            RelayFrame::Ice(servers) => heard(Heard::Ice(servers)),
            RelayFrame::Pong => heard(Heard::Pong),
        }
        out
    }

    fn reset(&mut self) -> Vec<Topic> {
        self.owed.clear();
        core::mem::take(&mut self.reads).into_keys().collect()
    }
}

/// The Nostr relay kind (§1.5) on one socket: [`NostrLink`] speaks NIP-01, and this turns its
/// [`LinkEvent`]s into what the client hears.
///
/// §1.5's fetch is one page (the newest [`FETCH_LIMIT`]) ending at `EOSE`, so the page's blobs are
/// gathered here and heard as one [`Heard::Page`] with `done`.
#[derive(Debug)]
pub(super) struct NostrCodec {
    link: NostrLink,
    /// Topics watched on this socket: with `reads`, what the link's subscriptions hold at most.
    watches: BTreeSet<Topic>,
    /// Fetches under way, with the blobs of their page so far (at most [`FETCH_LIMIT`] each).
    reads: BTreeMap<Topic, Vec<Blob>>,
}

impl NostrCodec {
    fn encode(
        &mut self,
        now: Timestamp,
        rng: &mut dyn CryptoRng,
        intent: Intent,
    ) -> Option<String> {
        match intent {
            // A link at MAX_SUBSCRIPTIONS sends nothing. MAX_ROOMS is no more than it and reads
            // give way to watches (`can_read`), so only a room joined while reads fill the last
            // slots goes unwatched on this socket, until it reopens.
            Intent::Watch(topic) => {
                let req = self.link.watch(now, &topic).ok();
                if req.is_some() {
                    self.watches.insert(topic);
                }
                req
            }
            Intent::Unwatch(topic) => {
                self.watches.remove(&topic);
                self.link.unwatch(&topic)
            }
            Intent::Read(topic) => match self.link.fetch(&topic) {
                Ok(req) => {
                    self.reads.insert(topic, Vec::new());
                    Some(req)
                }
                Err(_) => None,
            },
            Intent::Drop(topic, blob, ttl) => {
                Some(self.link.drop_blob(now, rng, &topic, &blob, Some(ttl)))
            }
            // NIP-01 has neither TURN nor ping (§1.5 maps only §1.1's four operations).
            Intent::Ice | Intent::Ping => None,
        }
    }

    fn decode(
        &mut self,
        now: Timestamp,
        rng: &mut dyn CryptoRng,
        text: &str,
        heard: &mut dyn FnMut(Heard<'_>),
    ) -> Decoded {
        let malformed_before = self.link.stats().malformed;
        let mut out = Decoded::default();
        for event in self.link.on_text(now, rng, text) {
            match event {
                LinkEvent::Send(frame) => out.answers.push(frame),
                LinkEvent::Blob {
                    topic,
                    blob,
                    fetched: true,
                    ..
                } => match self.reads.get_mut(&topic) {
                    Some(page) if page.len() < FETCH_LIMIT as usize => page.push(blob),
                    // Past the limit the relay gave more than asked: the page is full.
                    Some(_) => {}
                    None => heard(Heard::Blob(topic.as_str(), blob.as_str(), None)),
                },
                LinkEvent::Blob { topic, blob, .. } => {
                    heard(Heard::Blob(topic.as_str(), blob.as_str(), None))
                }
                LinkEvent::FetchDone { topic }
                | LinkEvent::Closed {
                    topic, fetch: true, ..
                } => {
                    if let Some(page) = self.end_read(topic) {
                        heard(page);
                    }
                }
                LinkEvent::Closed { .. } | LinkEvent::Refused { .. } => heard(Heard::Refused),
                // A drop or publish taken needs nothing more: a Minca relay does not confirm one
                // either. Notices are for logs, which a sans-IO machine does not keep.
                _ => {}
            }
        }
        out.malformed = self.link.stats().malformed > malformed_before;
        out
    }

    /// The page of a read that ended, if the read was under way.
    fn end_read(&mut self, topic: Topic) -> Option<Heard<'static>> {
        let blobs = self.reads.remove(&topic)?;
        Some(Heard::Page {
            topic,
            blobs,
            done: true,
        })
    }

    fn reset(&mut self) -> Vec<Topic> {
        self.link.on_close();
        self.watches.clear();
        core::mem::take(&mut self.reads).into_keys().collect()
    }
}
