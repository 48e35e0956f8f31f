//! The seam between the relay client's rules and a relay kind's wire format (§1.2).
//!
//! The client's rules (redial, pacing, pings, watching again, TURN) are the same for every kind of
//! relay; only what a socket's frames look like differs. [`Codec`] is that difference: it turns
//! the client's [`Intent`]s into text frames, and a relay's text frames into [`Heard`] events and
//! any frames the kind must answer with. A new kind (the Nostr kind of §1.5) is one more variant
//! here and one more arm in [`Codec::for_kind`]; nothing in the machine changes.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use rand_core::CryptoRng;

use crate::core::Timestamp;
use crate::crypto::CryptoProvider;
use crate::minca::relay_url::RelayKind;
use crate::minca::relay_wire::{
    Blob, ClientMessage, IceServers, RelayMessage, Topic, TopicRead, Ttl,
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

/// What a relay's frame meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard {
    /// A blob under a watched topic.
    Blob(Topic, Blob),
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
}

/// The result of reading one frame.
#[derive(Debug, Default)]
pub(super) struct Decoded {
    /// What the frame meant (empty for a frame that meant nothing usable).
    pub(super) heard: Vec<Heard>,
    /// Frames the kind sends in answer (the next page of a read).
    pub(super) replies: Vec<String>,
    /// Whether the frame was not a well-formed message of the kind.
    pub(super) malformed: bool,
}

/// A relay kind's wire handling, one per socket.
#[derive(Debug)]
pub(super) enum Codec {
    /// §1.4, a Minca relay.
    Minca(MincaCodec),
}

impl Codec {
    /// The codec for a relay of `kind`, or `None` for a kind this client does not (yet) speak,
    /// which the client passes over (§1.2).
    ///
    /// The Nostr kind (§1.5) is `None` until its codec is slotted in here; it signs its events
    /// with `provider`, the one the client was handed.
    pub(super) fn for_kind(
        kind: &RelayKind,
        _provider: &'static dyn CryptoProvider,
    ) -> Option<Self> {
        match kind {
            RelayKind::Minca => Some(Self::Minca(MincaCodec::default())),
            _ => None,
        }
    }

    /// Whether this client speaks `kind` (has a codec for it); the others are passed over (§1.2).
    pub(super) fn speaks(kind: &RelayKind) -> bool {
        matches!(kind, RelayKind::Minca)
    }

    /// The frames that carry `intent` at `now`; empty when the kind cannot do it. `rng` is for
    /// kinds that sign what they send (§1.5's throwaway keys).
    pub(super) fn encode(
        &mut self,
        _now: Timestamp,
        _rng: &mut dyn CryptoRng,
        intent: Intent,
    ) -> Vec<String> {
        match self {
            Self::Minca(c) => c.encode(intent),
        }
    }

    /// Reads one text frame that arrived at `now`.
    pub(super) fn decode(
        &mut self,
        _now: Timestamp,
        _rng: &mut dyn CryptoRng,
        text: &str,
    ) -> Decoded {
        match self {
            Self::Minca(c) => c.decode(text),
        }
    }

    /// The socket closed: forget what it owed, and name the reads it cut short.
    pub(super) fn reset(&mut self) -> Vec<Topic> {
        match self {
            Self::Minca(c) => c.reset(),
        }
    }

    /// Whether this kind answers a `ping` (§2.1: "ping a Minca relay").
    pub(super) fn pings(&self) -> bool {
        matches!(self, Self::Minca(_))
    }

    /// Whether a read of `topic` is under way.
    pub(super) fn reading(&self, topic: &Topic) -> bool {
        match self {
            Self::Minca(c) => c.reads.contains_key(topic),
        }
    }

    /// Reads under way.
    pub(super) fn reads(&self) -> usize {
        match self {
            Self::Minca(c) => c.reads.len(),
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
    fn encode(&mut self, intent: Intent) -> Vec<String> {
        let message = match intent {
            // §1.4 has no unwatch: the socket keeps the watch until it closes.
            Intent::Unwatch(_) => return Vec::new(),
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
        vec![message.to_text()]
    }

    fn owe(&mut self, topic: &Topic, what: Owed) {
        let owed = self.owed.entry(topic.clone()).or_default();
        if owed.len() < MAX_ANSWERS_PER_TOPIC {
            owed.push_back(what);
        }
    }

    fn decode(&mut self, text: &str) -> Decoded {
        let mut out = Decoded::default();
        let message = match RelayMessage::parse(text) {
            Ok(m) => m,
            Err(_) => {
                out.malformed = true;
                return out;
            }
        };
        match message {
            RelayMessage::Mail(mail) => {
                let owed = self.owed.get_mut(&mail.topic).and_then(VecDeque::pop_front);
                if self.owed.get(&mail.topic).is_some_and(VecDeque::is_empty) {
                    self.owed.remove(&mail.topic);
                }
                let blobs: Vec<Blob> = mail.items.iter().map(|i| i.blob.clone()).collect();
                match (owed, self.reads.get_mut(&mail.topic)) {
                    (Some(Owed::Page), Some(read)) => {
                        let next = read.on_page(&mail);
                        let done = next.is_none();
                        if let Some(next) = next {
                            self.owe(&mail.topic, Owed::Page);
                            out.replies.push(next.to_text());
                        } else {
                            self.reads.remove(&mail.topic);
                        }
                        out.heard.push(Heard::Page {
                            topic: mail.topic,
                            blobs,
                            done,
                        });
                    }
                    _ => out.heard.extend(
                        blobs
                            .into_iter()
                            .map(|blob| Heard::Blob(mail.topic.clone(), blob)),
                    ),
                }
            }
            RelayMessage::Ice(servers) => out.heard.push(Heard::Ice(servers)),
            RelayMessage::Pong => out.heard.push(Heard::Pong),
        }
        out
    }

    fn reset(&mut self) -> Vec<Topic> {
        self.owed.clear();
        core::mem::take(&mut self.reads).into_keys().collect()
    }
}
