//! The Minca relay protocol's messages (Minca 04 Network §1.4), and the client's check of a relay's
//! `ice` offer (§2.1, §3, §10).
//!
//! "All messages are text frames carrying one JSON object each. […] Text that is not a JSON object
//! with a string type is ignored." The §1.4 message table was lost; the catalogue below is rebuilt
//! from the prose and the example exchange:
//!
//! | direction | message | fields |
//! | --- | --- | --- |
//! | client → relay | `fetch` | `topic`, `after`? (a `seq`, default 0), `watch`? (bool, default false) |
//! | client → relay | `drop` | `topic`, `blob`, `ttl` (milliseconds; 0 = publish to watchers, keep nothing) |
//! | client → relay | `ice` | none: asks for TURN passwords |
//! | client → relay | `ping` | none |
//! | relay → client | `mail` | `topic`, `items` (`[{ "blob", "seq"? }]`), `more` |
//! | relay → client | `ice` | `payload`: `{ "servers": [{ "urls", "username", "credential" }], "expiresAt" }` |
//! | relay → client | `pong` | none |
//!
//! Publish and watch (§1.1) are `drop` with `ttl: 0` and `fetch` with `watch: true`; drop and
//! fetch are `drop` with a positive `ttl` and `fetch` paged by `after` until `more` is false.
//!
//! Parsing is strict and total: every frame is a message or a [`RelayWireError`] naming what was
//! wrong, which the relay (or client) machine counts against the sender's budget and ignores, as
//! §1.4 says of text that is not a well-formed message. Serializing writes `type` first, then the
//! fields in the order of the spec's examples, and leaves out fields at their defaults; whatever
//! parses re-serializes to text that parses to the same message.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use arrayvec::ArrayString;
use core::borrow::Borrow;
use core::fmt;
use core::fmt::Write as _;
use core::ops::Range;

use serde_json::{Map, Value};

use crate::codec::{base64url, js};
use crate::core::Timestamp;

mod fast;

/// Characters in a topic: base64url of a 32-byte SHA-256 (§1.3, §1.4).
pub const TOPIC_CHARS: usize = 43;

/// Bytes a topic decodes to.
pub const TOPIC_BYTES: usize = 32;

/// Longest blob, in base64url characters (§1.4: "non-empty base64url of at most 12,000
/// characters").
pub const MAX_BLOB_CHARS: usize = 12_000;

/// Blobs a topic holds on the reference relay (§1.4: "the 64 a topic holds").
pub const MAX_TOPIC_BLOBS: usize = 64;

/// Fewest blobs a relay MUST put on a page that says `more` (§1.4).
pub const MIN_ITEMS_WITH_MORE: usize = 4;

/// Pages a client reads of one topic before it stops, against a relay that never says `more:
/// false` (§1.4: "the 64 a topic holds take at most 16 pages").
pub const MAX_FETCH_PAGES: usize = MAX_TOPIC_BLOBS / MIN_ITEMS_WITH_MORE;

/// Largest integer a `seq`, `after` or `ttl` may be: JavaScript's `Number.MAX_SAFE_INTEGER`, the
/// largest the reference relay and clients hold exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Largest client → relay frame the parser reads, in bytes. The largest well-formed message (a
/// `drop` with a 12,000-character blob) is about 12,100 bytes; the rest is slack for whitespace
/// and fields a newer client may add. Anything larger is refused before JSON parsing.
pub const MAX_CLIENT_FRAME_BYTES: usize = 16 * 1024;

/// The relay heartbeat, in milliseconds. The limits table that held the reference relay's value
/// was lost (§1.4); 30 s is the common WebSocket server interval. A relay closes a socket that
/// stayed silent through two heartbeats, and a client that slept longer than that closes its
/// sockets and redials (§2.1), so both sides read this one constant.
pub const HEARTBEAT_MS: u64 = 30_000;

/// ICE servers of one offer a client considers: "only the first 4" (§2.1).
pub const MAX_ICE_SERVERS: usize = 4;

/// An ICE server URL is kept only if it is shorter than this, in characters (§2.1).
pub const MAX_ICE_URL_CHARS: usize = 256;

/// Why a text frame is not a well-formed relay protocol message.
///
/// A relay or client ignores the frame and counts it against the sender's rate budget (§1.4:
/// "Every message counts against the rate budget, including binary and malformed ones").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RelayWireError {
    /// Longer than [`MAX_CLIENT_FRAME_BYTES`].
    FrameTooLarge {
        /// The frame's length in bytes.
        bytes: usize,
    },
    /// Not JSON.
    NotJson,
    /// JSON, but not an object.
    NotAnObject,
    /// No `type`, or a `type` that is not a string.
    NoType,
    /// A `type` this direction of the protocol does not have.
    UnknownType,
    /// `topic` missing, or not exactly 43 base64url characters decoding to 32 bytes.
    BadTopic,
    /// `blob` missing, not a string, or not canonical base64url.
    BadBlob,
    /// `blob` is the empty string.
    EmptyBlob,
    /// `blob` is longer than [`MAX_BLOB_CHARS`].
    BlobTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// `ttl` missing, or not an integer from 0 to [`MAX_SAFE_INTEGER`].
    BadTtl,
    /// `after` present but not an integer from 0 to [`MAX_SAFE_INTEGER`].
    BadAfter,
    /// `watch` present but not a boolean.
    BadWatch,
    /// `items` missing, not an array, or holding something other than an object.
    BadItems,
    /// An item's `seq` present but not an integer from 0 to [`MAX_SAFE_INTEGER`].
    BadSeq,
    /// The `seq`s on a page do not increase (§1.4: "seq increases with every blob the relay
    /// keeps").
    SeqNotIncreasing,
    /// `more` present but not a boolean.
    BadMore,
    /// An `ice` offer with no usable server, or not of the §2.1 shape: it is dropped.
    UnusableIce,
}

impl fmt::Display for RelayWireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameTooLarge { bytes } => write!(
                f,
                "frame of {bytes} bytes, more than {MAX_CLIENT_FRAME_BYTES}"
            ),
            Self::NotJson => f.write_str("frame is not JSON"),
            Self::NotAnObject => f.write_str("frame is not a JSON object"),
            Self::NoType => f.write_str("message has no string type"),
            Self::UnknownType => f.write_str("message type unknown in this direction"),
            Self::BadTopic => f.write_str("topic is not 43 base64url characters"),
            Self::BadBlob => f.write_str("blob is not base64url"),
            Self::EmptyBlob => f.write_str("blob is empty"),
            Self::BlobTooLong { chars } => {
                write!(f, "blob of {chars} characters, more than {MAX_BLOB_CHARS}")
            }
            Self::BadTtl => f.write_str("ttl is not a non-negative safe integer"),
            Self::BadAfter => f.write_str("after is not a non-negative safe integer"),
            Self::BadWatch => f.write_str("watch is not a boolean"),
            Self::BadItems => f.write_str("items is not an array of objects"),
            Self::BadSeq => f.write_str("seq is not a non-negative safe integer"),
            Self::SeqNotIncreasing => f.write_str("seq does not increase along the page"),
            Self::BadMore => f.write_str("more is not a boolean"),
            Self::UnusableIce => f.write_str("ice offer has no usable server"),
        }
    }
}

impl core::error::Error for RelayWireError {}

/// A topic: exactly [`TOPIC_CHARS`] canonical base64url characters, [`TOPIC_BYTES`] bytes
/// (§1.3, §1.4). A message naming any other is ignored.
///
/// Its text is held inline: topics key the relay's and the client's tables, and a comparison
/// that had to follow a pointer to heap text was a cache miss at every step of a search.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Topic(ArrayString<TOPIC_CHARS>);

impl Topic {
    /// Checks a topic as it appears on the wire.
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        check_topic(text)?;
        Ok(Self::from_checked(text))
    }

    /// The topic whose text passed [`Topic::parse`]'s check already (a [`MailRef`]'s), copied
    /// without checking it again.
    pub(crate) fn from_checked(text: &str) -> Self {
        debug_assert!(check_topic(text).is_ok());
        Self(ArrayString::from(text).expect("a checked topic is TOPIC_CHARS long"))
    }

    /// The topic of a 32-byte hash (see [`crate::minca::room::Room::topic`]).
    pub fn from_bytes(bytes: &[u8; TOPIC_BYTES]) -> Self {
        Self::from_checked(&base64url::encode(bytes))
    }

    /// The 43 characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Lets topic-keyed tables be searched with a topic still borrowed from a frame: a `Topic` orders
/// and compares exactly as its text does.
impl Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

fn check_topic(text: &str) -> Result<(), RelayWireError> {
    // The length check first: it is cheap and bounds the decode.
    if text.len() != TOPIC_CHARS {
        return Err(RelayWireError::BadTopic);
    }
    base64url::decode_array::<TOPIC_BYTES>(text).map_err(|_| RelayWireError::BadTopic)?;
    Ok(())
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A blob: non-empty canonical base64url of at most [`MAX_BLOB_CHARS`] characters (§1.4). The
/// relay never looks inside.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Blob(String);

impl Blob {
    /// Checks a blob as it appears on the wire.
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        check_blob(text)?;
        Ok(Self(String::from(text)))
    }

    /// The blob whose text passed [`Blob::parse`]'s check already (a [`MailRef`]'s), copied
    /// without checking it again.
    pub(crate) fn from_checked(text: &str) -> Self {
        debug_assert!(check_blob(text).is_ok());
        Self(String::from(text))
    }

    /// Encodes `bytes` as a blob; refused if empty or if the encoding would exceed
    /// [`MAX_BLOB_CHARS`] (9,000 bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RelayWireError> {
        Self::parse(&base64url::encode(bytes))
    }

    /// The base64url text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The bytes the blob carries.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Checked canonical at construction, so this cannot fail; an empty vector is never a
        // valid blob's bytes.
        base64url::decode(&self.0).unwrap_or_default()
    }
}

fn check_blob(text: &str) -> Result<(), RelayWireError> {
    check_blob_length(text)?;
    base64url::check(text).map_err(|_| RelayWireError::BadBlob)
}

/// [`check_blob`], appending the bytes its base64url check decodes to `out`: for a blob its
/// reader hands on to be opened, which would otherwise decode it a second time. `out` is left as
/// it was on an error.
fn decode_blob_into(text: &str, out: &mut Vec<u8>) -> Result<(), RelayWireError> {
    check_blob_length(text)?;
    base64url::decode_append(text, out).map_err(|_| RelayWireError::BadBlob)
}

/// What a blob must be besides base64url: not empty, and not longer than [`MAX_BLOB_CHARS`].
fn check_blob_length(text: &str) -> Result<(), RelayWireError> {
    if text.is_empty() {
        return Err(RelayWireError::EmptyBlob);
    }
    // Any character outside the alphabet fails the decode that follows, so counting bytes here
    // is counting characters for every blob that can pass.
    if text.len() > MAX_BLOB_CHARS {
        return Err(RelayWireError::BlobTooLong {
            chars: js::utf16_len(text),
        });
    }
    Ok(())
}

/// How long a relay keeps a dropped blob, in milliseconds (§1.4, §11).
///
/// Zero means publish only: the blob goes to the topic's other watchers now and the relay keeps
/// nothing of it. Otherwise the relay keeps it for no longer than this (a relay may cap it, 07 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ttl(u64);

impl Ttl {
    /// `ttl: 0`: hand to watchers, keep nothing.
    pub const PUBLISH_ONLY: Self = Self(0);

    /// A ttl of `ms` milliseconds; refused above [`MAX_SAFE_INTEGER`].
    pub fn from_millis(ms: u64) -> Result<Self, RelayWireError> {
        if ms > MAX_SAFE_INTEGER {
            return Err(RelayWireError::BadTtl);
        }
        Ok(Self(ms))
    }

    /// The ttl in milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Whether the relay keeps the blob at all (ttl above 0).
    pub fn is_kept(self) -> bool {
        self.0 > 0
    }

    /// When a blob dropped at `now` stops being held, or `None` for a blob that is not kept. A
    /// copy is not held from this instant on, even before the relay sweeps it away (§1.4).
    pub fn expiry(self, now: Timestamp) -> Option<Timestamp> {
        self.is_kept()
            .then(|| Timestamp::from_millis(now.as_millis().saturating_add(self.0)))
    }
}

/// A client → relay message (§1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// Read the blobs kept under `topic` with a `seq` above `after`, a page at a time; with
    /// `watch`, also receive every blob published or dropped there from now on.
    Fetch {
        /// The topic.
        topic: Topic,
        /// Only blobs kept after this `seq` (0: from the start).
        after: u64,
        /// Also watch the topic.
        watch: bool,
    },
    /// Publish a blob under `topic` to its watchers, and keep it for `ttl` unless that is 0.
    Drop {
        /// The topic.
        topic: Topic,
        /// The sealed bytes.
        blob: Blob,
        /// How long to keep it.
        ttl: Ttl,
    },
    /// Ask for TURN passwords; a relay without TURN never answers.
    Ice,
    /// Ask for a `pong`.
    Ping,
}

/// A client → relay message as [`ClientMessage::read`] gives it: a `drop`'s blob borrows from the
/// frame where it needs no unescaping. See [`ClientMessage`] for each variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame<'a> {
    /// See [`ClientMessage::Fetch`].
    Fetch {
        /// The topic.
        topic: Topic,
        /// Only blobs kept after this `seq` (0: from the start).
        after: u64,
        /// Also watch the topic.
        watch: bool,
    },
    /// See [`ClientMessage::Drop`]; the blob checked as [`Blob::parse`] checks it.
    Drop {
        /// The topic.
        topic: Topic,
        /// The sealed bytes' base64url text.
        blob: Cow<'a, str>,
        /// How long to keep it.
        ttl: Ttl,
    },
    /// See [`ClientMessage::Ice`].
    Ice,
    /// See [`ClientMessage::Ping`].
    Ping,
}

impl From<ClientMessage> for ClientFrame<'_> {
    fn from(message: ClientMessage) -> Self {
        match message {
            ClientMessage::Fetch {
                topic,
                after,
                watch,
            } => Self::Fetch {
                topic,
                after,
                watch,
            },
            ClientMessage::Drop { topic, blob, ttl } => Self::Drop {
                topic,
                blob: Cow::Owned(blob.0),
                ttl,
            },
            ClientMessage::Ice => Self::Ice,
            ClientMessage::Ping => Self::Ping,
        }
    }
}

impl From<ClientFrame<'_>> for ClientMessage {
    fn from(frame: ClientFrame<'_>) -> Self {
        match frame {
            ClientFrame::Fetch {
                topic,
                after,
                watch,
            } => Self::Fetch {
                topic,
                after,
                watch,
            },
            ClientFrame::Drop { topic, blob, ttl } => Self::Drop {
                topic,
                // Checked by whichever reader made the frame.
                blob: Blob(blob.into_owned()),
                ttl,
            },
            ClientFrame::Ice => Self::Ice,
            ClientFrame::Ping => Self::Ping,
        }
    }
}

impl ClientMessage {
    /// Parses one text frame from a client.
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        Self::read(text).map(Self::from)
    }

    /// [`ClientMessage::parse`] with a `drop`'s blob left in the frame where it needs no
    /// unescaping: a relay hands most blobs on without keeping them, so copying each into a
    /// [`Blob`] first would be work thrown away.
    pub fn read(text: &str) -> Result<ClientFrame<'_>, RelayWireError> {
        if text.len() > MAX_CLIENT_FRAME_BYTES {
            return Err(RelayWireError::FrameTooLarge { bytes: text.len() });
        }
        match fast::client_frame(text) {
            Some(frame) => Ok(frame),
            None => Self::parse_tree(text).map(ClientFrame::from),
        }
    }

    /// The messages that carry nearly all of a relay's traffic (`drop`, `fetch`) read straight
    /// from their text, without the JSON tree [`ClientMessage::parse_tree`] reads. `None` for
    /// every other message and for any text this path could read differently from the general
    /// one (not an object, a field given twice, any error), so that path decides those, with its
    /// own errors. [`ClientMessage::parse`] is the way to read a frame; this is public so that a
    /// fuzz target can hold the two paths to the same answer.
    pub fn from_text_common(text: &str) -> Option<Self> {
        fast::client_frame(text).map(Self::from)
    }

    /// [`ClientMessage::parse`] without its size check and its fast path: every message read
    /// through a JSON tree. Public for the fuzz target that compares the two paths.
    pub fn parse_tree(text: &str) -> Result<Self, RelayWireError> {
        let (kind, obj) = envelope(text)?;
        match kind.as_str() {
            "fetch" => Ok(Self::Fetch {
                topic: topic_field(&obj)?,
                after: optional_integer(&obj, "after", RelayWireError::BadAfter)?.unwrap_or(0),
                watch: optional_bool(&obj, "watch", RelayWireError::BadWatch)?.unwrap_or(false),
            }),
            "drop" => {
                let topic = topic_field(&obj)?;
                let blob = blob_field(&obj)?;
                let ttl = optional_integer(&obj, "ttl", RelayWireError::BadTtl)?
                    .ok_or(RelayWireError::BadTtl)?;
                Ok(Self::Drop {
                    topic,
                    blob,
                    ttl: Ttl(ttl),
                })
            }
            "ice" => Ok(Self::Ice),
            "ping" => Ok(Self::Ping),
            _ => Err(RelayWireError::UnknownType),
        }
    }

    /// The text frame for this message.
    pub fn to_text(&self) -> String {
        // Sized up front for a `drop`: its blob is up to 12 000 characters, and growing by
        // doubling copies it.
        let blob = match self {
            Self::Drop { blob, .. } => blob.as_str().len(),
            _ => 0,
        };
        let mut out = String::with_capacity(CLIENT_TEXT_FRAME + blob);
        match self {
            Self::Fetch {
                topic,
                after,
                watch,
            } => {
                out.push_str("{\"type\":\"fetch\",\"topic\":\"");
                out.push_str(topic.as_str());
                out.push('"');
                if *after > 0 {
                    let _ = write!(out, ",\"after\":{after}");
                }
                if *watch {
                    out.push_str(",\"watch\":true");
                }
                out.push('}');
            }
            Self::Drop { topic, blob, ttl } => {
                // Topics and blobs are checked base64url, so they need no JSON escaping.
                let _ = write!(
                    out,
                    "{{\"type\":\"drop\",\"topic\":\"{}\",\"blob\":\"{}\",\"ttl\":{}}}",
                    topic.as_str(),
                    blob.as_str(),
                    ttl.as_millis()
                );
            }
            Self::Ice => out.push_str("{\"type\":\"ice\"}"),
            Self::Ping => out.push_str(PING_TEXT),
        }
        out
    }
}

/// The characters of a client message other than a `drop`'s blob, at most: the frame, the topic
/// and the longest number.
const CLIENT_TEXT_FRAME: usize = 80 + TOPIC_CHARS;

/// A `ping` as this crate writes it: the fast paths take exactly this text without a parse.
const PING_TEXT: &str = "{\"type\":\"ping\"}";

/// A `pong` as this crate writes it (see [`PING_TEXT`]).
const PONG_TEXT: &str = "{\"type\":\"pong\"}";

/// One blob on a `mail` page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailItem {
    /// The blob.
    pub blob: Blob,
    /// Its `seq` if the relay keeps it; a blob published with `ttl: 0` has none.
    pub seq: Option<u64>,
}

/// A page of blobs under a topic: the answer to a `fetch`, or blobs pushed to a watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// The topic.
    pub topic: Topic,
    /// The blobs, in increasing `seq`.
    pub items: Vec<MailItem>,
    /// Whether more kept blobs follow the last `seq` on this page.
    pub more: bool,
}

impl Mail {
    /// Whether the page breaks the relay's MUST to put at least [`MIN_ITEMS_WITH_MORE`] blobs on
    /// a page that says `more` (§1.4).
    pub fn is_short_page(&self) -> bool {
        self.more && self.items.len() < MIN_ITEMS_WITH_MORE
    }

    /// The highest `seq` on the page.
    pub fn last_seq(&self) -> Option<u64> {
        self.items.iter().filter_map(|i| i.seq).next_back()
    }
}

/// A relay → client message (§1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayMessage {
    /// Blobs under a topic.
    Mail(Mail),
    /// TURN servers, already filtered as §2.1 says.
    Ice(IceServers),
    /// The answer to a `ping`.
    Pong,
}

impl RelayMessage {
    /// Parses one text frame from a relay. An `ice` offer with no usable server is
    /// [`RelayWireError::UnusableIce`]: the client drops it (§2.1).
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        Self::read(text).map(Self::from)
    }

    /// [`RelayMessage::parse`] with a `mail`'s topic and blobs left in the frame where they need
    /// no unescaping: a client hands most blobs on without keeping them, so copying each into a
    /// [`Blob`] first would be work thrown away.
    pub fn read(text: &str) -> Result<RelayFrame<'_>, RelayWireError> {
        Self::read_with(text, &mut None)
    }

    /// [`RelayMessage::read`] with the bytes of a `mail`'s blobs decoded into `bytes` (cleared
    /// first) rather than a buffer of the mail's own, for a reader whose buffer stays in cache
    /// between frames (one socket read in a loop). The relay client does not keep one: with many
    /// nodes in one process, a buffer each is cold memory at every frame, slower than a fresh
    /// allocation (docs/performance.md, twelfth passes together). A `mail` only the JSON tree
    /// reads (another spelling, rare) still gets its own.
    pub fn read_into<'a>(
        text: &'a str,
        bytes: &'a mut Vec<u8>,
    ) -> Result<RelayFrame<'a>, RelayWireError> {
        Self::read_with(text, &mut Some(bytes))
    }

    /// [`RelayMessage::read`] into `bytes` when given (see [`MailRef::checked`]).
    fn read_with<'a>(
        text: &'a str,
        bytes: &mut Option<&'a mut Vec<u8>>,
    ) -> Result<RelayFrame<'a>, RelayWireError> {
        match fast::relay_frame(text, bytes) {
            Some(frame) => Ok(frame),
            None => Self::parse_tree(text).map(RelayFrame::from),
        }
    }

    /// The messages that carry nearly all of a client's traffic (`mail`, `pong`) read straight
    /// from their text, without the JSON tree [`RelayMessage::parse_tree`] reads. `None` for
    /// every other message and for any text this path could read differently from the general
    /// one (not an object, a field given twice, any error), so that path decides those, with its
    /// own errors. [`RelayMessage::parse`] is the way to read a frame; this is public so that a
    /// fuzz target can hold the two paths to the same answer.
    pub fn from_text_common(text: &str) -> Option<Self> {
        fast::relay_frame(text, &mut None).map(Self::from)
    }

    /// [`RelayMessage::parse`] without its fast path: every message read through a JSON tree.
    /// Public for the fuzz target that compares the two paths.
    pub fn parse_tree(text: &str) -> Result<Self, RelayWireError> {
        let (kind, obj) = envelope(text)?;
        match kind.as_str() {
            "mail" => {
                let topic = topic_field(&obj)?;
                let items = obj
                    .get("items")
                    .and_then(Value::as_array)
                    .ok_or(RelayWireError::BadItems)?
                    .iter()
                    .map(mail_item)
                    .collect::<Result<Vec<_>, _>>()?;
                check_seqs(items.iter().map(|i| i.seq))?;
                let more = optional_bool(&obj, "more", RelayWireError::BadMore)?.unwrap_or(false);
                Ok(Self::Mail(Mail { topic, items, more }))
            }
            "ice" => obj
                .get("payload")
                .and_then(IceServers::from_relay)
                .map(Self::Ice)
                .ok_or(RelayWireError::UnusableIce),
            "pong" => Ok(Self::Pong),
            _ => Err(RelayWireError::UnknownType),
        }
    }

    /// The text frame for this message.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        match self {
            Self::Mail(mail) => {
                // Sized up front, as for a pushed blob ([`RelayMessage::pushed_text`]).
                let blobs: usize = mail.items.iter().map(|i| i.blob.as_str().len()).sum();
                out.reserve(PUSHED_TEXT_FRAME * mail.items.len().max(1) + blobs);
                write_mail(
                    &mut out,
                    &mail.topic,
                    mail.items.iter().map(|i| (i.blob.as_str(), i.seq)),
                    mail.more,
                );
            }
            Self::Ice(servers) => {
                out.push_str("{\"type\":\"ice\",\"payload\":");
                out.push_str(&js::stringify(&servers.to_payload()));
                out.push('}');
            }
            Self::Pong => out.push_str(PONG_TEXT),
        }
        out
    }

    /// The text of a one-blob `mail` saying no `more`: what a relay pushes to a topic's
    /// watchers, written without building the [`Mail`] first.
    pub fn pushed_text(topic: &Topic, blob: &Blob, seq: Option<u64>) -> String {
        Self::pushed_text_checked(topic, blob.as_str(), seq)
    }

    /// [`RelayMessage::pushed_text`] of a blob's text that passed [`Blob::parse`]'s check (a
    /// [`ClientFrame::Drop`]'s), not copied into a [`Blob`] first.
    pub(crate) fn pushed_text_checked(topic: &Topic, blob: &str, seq: Option<u64>) -> String {
        debug_assert!(check_blob(blob).is_ok());
        // Sized up front: a blob is up to 12 000 characters, and growing by doubling copies it.
        let mut out = String::with_capacity(PUSHED_TEXT_FRAME + blob.len());
        write_mail(&mut out, topic, core::iter::once((blob, seq)), false);
        out
    }
}

/// The characters of a one-blob `mail` other than the blob: the frame around it, the topic and the
/// longest `seq`.
const PUSHED_TEXT_FRAME: usize = 96 + TOPIC_CHARS;

/// Writes a `mail` (topics and blobs are checked base64url, so they need no JSON escaping).
fn write_mail<'a>(
    out: &mut String,
    topic: &Topic,
    items: impl Iterator<Item = (&'a str, Option<u64>)>,
    more: bool,
) {
    out.push_str("{\"type\":\"mail\",\"topic\":\"");
    out.push_str(topic.as_str());
    out.push_str("\",\"items\":[");
    for (i, (blob, seq)) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"blob\":\"");
        out.push_str(blob);
        out.push('"');
        if let Some(seq) = seq {
            let _ = write!(out, ",\"seq\":{seq}");
        }
        out.push('}');
    }
    out.push_str(if more {
        "],\"more\":true}"
    } else {
        "],\"more\":false}"
    });
}

/// A relay → client message as [`RelayMessage::read`] gives it: a `mail` borrows from the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayFrame<'a> {
    /// Blobs under a topic.
    Mail(MailRef<'a>),
    /// TURN servers, already filtered as §2.1 says.
    Ice(IceServers),
    /// The answer to a `ping`.
    Pong,
}

impl From<RelayMessage> for RelayFrame<'_> {
    fn from(message: RelayMessage) -> Self {
        match message {
            RelayMessage::Mail(mail) => Self::Mail(MailRef::from(mail)),
            RelayMessage::Ice(servers) => Self::Ice(servers),
            RelayMessage::Pong => Self::Pong,
        }
    }
}

impl From<RelayFrame<'_>> for RelayMessage {
    fn from(frame: RelayFrame<'_>) -> Self {
        match frame {
            RelayFrame::Mail(mail) => Self::Mail(mail.to_mail()),
            RelayFrame::Ice(servers) => Self::Ice(servers),
            RelayFrame::Pong => Self::Pong,
        }
    }
}

/// A [`Mail`] whose topic and blobs are still the frame's text (or owned, where the frame escaped
/// them), checked as [`Topic::parse`] and [`Blob::parse`] check.
#[derive(Debug, Clone)]
pub struct MailRef<'a> {
    topic: Cow<'a, str>,
    items: Items<'a>,
    /// Every blob decoded, one after another, as its check decodes it: in the reader's buffer
    /// ([`RelayMessage::read_into`]) or one of the mail's own.
    bytes: Cow<'a, [u8]>,
    more: bool,
}

// By content: the same blobs compare equal wherever their bytes are kept.
impl PartialEq for MailRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.topic == other.topic && self.more == other.more && self.entries().eq(other.entries())
    }
}

impl Eq for MailRef<'_> {}

/// One blob of a [`MailRef`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct ItemRef<'a> {
    blob: Cow<'a, str>,
    seq: Option<u64>,
    /// Where the blob's bytes are in its mail's `bytes` ([`MailRef::checked`] fills it in).
    bytes: Range<usize>,
}

impl<'a> ItemRef<'a> {
    /// A blob read from a frame, not yet checked.
    fn read(blob: Cow<'a, str>, seq: Option<u64>) -> Self {
        Self {
            blob,
            seq,
            bytes: 0..0,
        }
    }
}

/// A [`MailRef`]'s blobs: nearly every `mail` a client hears is one pushed blob, held here without
/// a heap allocation; a page of several is a `Vec`.
#[derive(Debug, Clone)]
enum Items<'a> {
    One([ItemRef<'a>; 1]),
    Many(Vec<ItemRef<'a>>),
}

impl<'a> Items<'a> {
    fn as_slice(&self) -> &[ItemRef<'a>] {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [ItemRef<'a>] {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }

    fn push(&mut self, item: ItemRef<'a>) {
        match self {
            Self::Many(many) if many.is_empty() => *self = Self::One([item]),
            Self::Many(many) => many.push(item),
            Self::One(_) => {
                let Self::One([first]) = core::mem::replace(self, Self::Many(Vec::new())) else {
                    return;
                };
                *self = Self::Many(alloc::vec![first, item]);
            }
        }
    }
}

impl Default for Items<'_> {
    fn default() -> Self {
        Self::Many(Vec::new())
    }
}

impl<'a> FromIterator<ItemRef<'a>> for Items<'a> {
    fn from_iter<I: IntoIterator<Item = ItemRef<'a>>>(iter: I) -> Self {
        let mut items = Self::default();
        for item in iter {
            items.push(item);
        }
        items
    }
}

impl<'a> MailRef<'a> {
    /// Checks what a `mail` names: the topic, every blob (kept decoded), every `seq` and their
    /// order. The blobs are decoded into `buffer`'s vector when there is one (cleared first; taken
    /// for the mail only when the checks pass, so a caller may try another reading with it),
    /// else into a vector of the mail's own.
    fn checked(
        topic: Cow<'a, str>,
        mut items: Items<'a>,
        more: bool,
        buffer: &mut Option<&'a mut Vec<u8>>,
    ) -> Result<Self, RelayWireError> {
        check_topic(&topic)?;
        let mut own = Vec::new();
        let bytes = buffer.as_deref_mut().unwrap_or(&mut own);
        bytes.clear();
        for item in items.as_mut_slice() {
            let start = bytes.len();
            decode_blob_into(&item.blob, bytes)?;
            item.bytes = start..bytes.len();
            if let Some(seq) = item.seq {
                safe_integer(Some(seq), RelayWireError::BadSeq)?;
            }
        }
        check_seqs(items.as_slice().iter().map(|i| i.seq))?;
        let bytes = match buffer.take() {
            Some(kept) => Cow::Borrowed(kept.as_slice()),
            None => Cow::Owned(own),
        };
        Ok(Self {
            topic,
            items,
            bytes,
            more,
        })
    }

    /// The topic's text, checked.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The blobs' text, checked, in page order.
    pub fn blobs(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.items.as_slice().iter().map(|i| &*i.blob)
    }

    /// The blobs' text with the bytes each carries (what [`Blob::to_bytes`] gives), in page order:
    /// decoded once, by the check.
    pub fn blobs_decoded(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&str, &[u8])> + ExactSizeIterator {
        self.entries().map(|(blob, _, bytes)| (blob, bytes))
    }

    /// Each blob's text, `seq` and bytes, in page order.
    fn entries(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&str, Option<u64>, &[u8])> + ExactSizeIterator {
        self.items.as_slice().iter().map(|i| {
            let bytes = self.bytes.get(i.bytes.clone()).unwrap_or_default();
            (&*i.blob, i.seq, bytes)
        })
    }

    /// The owned message.
    pub fn to_mail(&self) -> Mail {
        Mail {
            topic: Topic::from_checked(&self.topic),
            items: self
                .items
                .as_slice()
                .iter()
                .map(|i| MailItem {
                    blob: Blob::from_checked(&i.blob),
                    seq: i.seq,
                })
                .collect(),
            more: self.more,
        }
    }
}

impl From<Mail> for MailRef<'_> {
    fn from(mail: Mail) -> Self {
        let mut bytes = Vec::new();
        let items = mail
            .items
            .into_iter()
            .map(|i| {
                let start = bytes.len();
                bytes.extend_from_slice(&i.blob.to_bytes());
                ItemRef {
                    bytes: start..bytes.len(),
                    blob: Cow::Owned(i.blob.0),
                    seq: i.seq,
                }
            })
            .collect();
        Self {
            topic: Cow::Owned(String::from(mail.topic.as_str())),
            items,
            bytes: Cow::Owned(bytes),
            more: mail.more,
        }
    }
}

/// One TURN server of a relay's `ice` offer (§1.4, §2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServer {
    /// `turn:` and `turns:` URLs, each shorter than [`MAX_ICE_URL_CHARS`]; never empty.
    pub urls: Vec<String>,
    /// The TURN REST username (`<expires>:<random>`).
    pub username: String,
    /// The TURN REST password.
    pub credential: String,
}

/// The TURN servers a relay offered, as a client keeps them (§2.1), with when they expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServers {
    /// The usable servers among the first [`MAX_ICE_SERVERS`] offered; never empty.
    pub servers: Vec<IceServer>,
    /// `expiresAt`, rounded up to a whole millisecond so that [`IceServers::is_current`] answers
    /// exactly as comparing with the offered number would.
    pub expires_at: Timestamp,
}

impl IceServers {
    /// Keeps a relay's `ice` offer only if it has the §2.1 shape; `payload` is the message's
    /// `payload` member.
    ///
    /// `servers` must be an array, of which only the first [`MAX_ICE_SERVERS`] are considered;
    /// a server is kept if `username` and `credential` are strings and `urls` (a string or an
    /// array) holds at least one string shorter than [`MAX_ICE_URL_CHARS`] characters starting
    /// `turn:` or `turns:` (only those are kept). `expiresAt` must be a finite number. `None`
    /// when no server is usable: the offer is dropped.
    pub fn from_relay(payload: &Value) -> Option<Self> {
        let servers = payload.get("servers")?.as_array()?;
        let expires_at = ceil_millis(payload.get("expiresAt")?.as_f64()?)?;
        let servers: Vec<IceServer> = servers
            .iter()
            .take(MAX_ICE_SERVERS)
            .filter_map(ice_server)
            .collect();
        (!servers.is_empty()).then_some(Self {
            servers,
            expires_at,
        })
    }

    /// The `payload` of an `ice` message offering these servers.
    pub fn to_payload(&self) -> Value {
        let servers = self
            .servers
            .iter()
            .map(|s| {
                let mut m = Map::new();
                m.insert(
                    "urls".into(),
                    Value::Array(s.urls.iter().cloned().map(Value::String).collect()),
                );
                m.insert("username".into(), Value::String(s.username.clone()));
                m.insert("credential".into(), Value::String(s.credential.clone()));
                Value::Object(m)
            })
            .collect();
        let mut m = Map::new();
        m.insert("servers".into(), Value::Array(servers));
        m.insert("expiresAt".into(), Value::from(self.expires_at.as_millis()));
        Value::Object(m)
    }

    /// Whether a client may use these servers at `now`: only while `expiresAt` is in the future
    /// (§10).
    pub fn is_current(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

fn ice_server(server: &Value) -> Option<IceServer> {
    let username = server.get("username")?.as_str()?;
    let credential = server.get("credential")?.as_str()?;
    let urls: Vec<String> = match server.get("urls")? {
        Value::String(url) => usable_ice_url(url).into_iter().collect(),
        Value::Array(urls) => urls
            .iter()
            .filter_map(Value::as_str)
            .filter_map(usable_ice_url)
            .collect(),
        _ => return None,
    };
    (!urls.is_empty()).then(|| IceServer {
        urls,
        username: String::from(username),
        credential: String::from(credential),
    })
}

/// `^turns?:` and shorter than [`MAX_ICE_URL_CHARS`] characters (§2.1).
fn usable_ice_url(url: &str) -> Option<String> {
    let turn = url.starts_with("turn:") || url.starts_with("turns:");
    (turn && js::utf16_len(url) < MAX_ICE_URL_CHARS).then(|| String::from(url))
}

/// The smallest whole millisecond not before `ms`, so that `now < result` exactly when
/// `now < ms` for every whole-millisecond `now`; `None` for a number that is not finite.
fn ceil_millis(ms: f64) -> Option<Timestamp> {
    if !ms.is_finite() {
        return None;
    }
    if ms <= 0.0 {
        return Some(Timestamp::ZERO);
    }
    // `as` saturates at u64::MAX and truncates toward zero; core has no f64::ceil.
    let whole = ms as u64;
    let up = if (whole as f64) < ms {
        whole.saturating_add(1)
    } else {
        whole
    };
    Some(Timestamp::from_millis(up))
}

/// Reading a topic page by page (§1.4): "A client reads a topic by fetching again after the last
/// seq until more is false", for at most [`MAX_FETCH_PAGES`] pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRead {
    topic: Topic,
    after: u64,
    pages: usize,
}

impl TopicRead {
    /// Starts reading `topic` from the beginning; returns the reader and the first `fetch`, which
    /// also watches the topic if `watch`.
    pub fn start(topic: Topic, watch: bool) -> (Self, ClientMessage) {
        let first = ClientMessage::Fetch {
            topic: topic.clone(),
            after: 0,
            watch,
        };
        let read = Self {
            topic,
            after: 0,
            pages: 0,
        };
        (read, first)
    }

    /// The topic being read.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// Takes the answer to the last `fetch`; returns the next `fetch`, or `None` when the topic is
    /// read: `more` is false, [`MAX_FETCH_PAGES`] pages were read, or the relay broke the paging
    /// rules (a short page saying `more`, or a last `seq` not past `after`), which would otherwise
    /// keep the client fetching for ever.
    pub fn on_page(&mut self, mail: &Mail) -> Option<ClientMessage> {
        self.pages += 1;
        if !mail.more || self.pages >= MAX_FETCH_PAGES || mail.is_short_page() {
            return None;
        }
        let last = mail.last_seq().filter(|&s| s > self.after)?;
        self.after = last;
        Some(ClientMessage::Fetch {
            topic: self.topic.clone(),
            after: last,
            watch: false,
        })
    }
}

/// Parses the frame and returns its `type` and its members.
fn envelope(text: &str) -> Result<(String, Map<String, Value>), RelayWireError> {
    let value: Value = serde_json::from_str(text).map_err(|_| RelayWireError::NotJson)?;
    let Value::Object(mut obj) = value else {
        return Err(RelayWireError::NotAnObject);
    };
    match obj.remove("type") {
        Some(Value::String(kind)) => Ok((kind, obj)),
        _ => Err(RelayWireError::NoType),
    }
}

fn topic_field(obj: &Map<String, Value>) -> Result<Topic, RelayWireError> {
    let text = obj
        .get("topic")
        .and_then(Value::as_str)
        .ok_or(RelayWireError::BadTopic)?;
    Topic::parse(text)
}

fn blob_field(obj: &Map<String, Value>) -> Result<Blob, RelayWireError> {
    let text = obj
        .get("blob")
        .and_then(Value::as_str)
        .ok_or(RelayWireError::BadBlob)?;
    Blob::parse(text)
}

fn mail_item(item: &Value) -> Result<MailItem, RelayWireError> {
    let obj = item.as_object().ok_or(RelayWireError::BadItems)?;
    Ok(MailItem {
        blob: blob_field(obj)?,
        seq: optional_integer(obj, "seq", RelayWireError::BadSeq)?,
    })
}

/// A member that, when present, is an integer from 0 to [`MAX_SAFE_INTEGER`].
fn optional_integer(
    obj: &Map<String, Value>,
    key: &str,
    error: RelayWireError,
) -> Result<Option<u64>, RelayWireError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => safe_integer(v.as_u64(), error).map(Some),
    }
}

/// An integer from 0 to [`MAX_SAFE_INTEGER`]; `n` is `None` when the member is not a
/// non-negative integer at all.
fn safe_integer(n: Option<u64>, error: RelayWireError) -> Result<u64, RelayWireError> {
    match n {
        Some(n) if n <= MAX_SAFE_INTEGER => Ok(n),
        _ => Err(error),
    }
}

/// §1.4: "seq increases with every blob the relay keeps", so along a page too.
fn check_seqs(seqs: impl Iterator<Item = Option<u64>>) -> Result<(), RelayWireError> {
    let mut last = None;
    for seq in seqs.flatten() {
        if last.is_some_and(|l| seq <= l) {
            return Err(RelayWireError::SeqNotIncreasing);
        }
        last = Some(seq);
    }
    Ok(())
}

fn optional_bool(
    obj: &Map<String, Value>,
    key: &str,
    error: RelayWireError,
) -> Result<Option<bool>, RelayWireError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use serde_json::json;

    const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

    fn topic() -> Topic {
        Topic::parse(TOPIC).unwrap()
    }

    fn client(v: Value) -> Result<ClientMessage, RelayWireError> {
        ClientMessage::parse(&v.to_string())
    }

    fn relay(v: Value) -> Result<RelayMessage, RelayWireError> {
        RelayMessage::parse(&v.to_string())
    }

    fn page(seqs: &[u64], more: bool) -> Mail {
        Mail {
            topic: topic(),
            items: seqs
                .iter()
                .map(|&s| MailItem {
                    blob: Blob::parse("AQID").unwrap(),
                    seq: Some(s),
                })
                .collect(),
            more,
        }
    }

    fn ice_payload(servers: Value) -> Value {
        json!({ "servers": servers, "expiresAt": 1_790_000_000_000u64 })
    }

    fn turn(url: Value) -> Value {
        json!({ "urls": url, "username": "1790000000:3q2-7wX0aBcD", "credential": "n3Jk=" })
    }

    #[test]
    fn topic_is_exactly_43_base64url_characters() {
        assert_eq!(topic().as_str(), TOPIC);
        assert_eq!(Topic::parse(&TOPIC[..42]), Err(RelayWireError::BadTopic));
        assert_eq!(
            Topic::parse(&format!("{TOPIC}A")),
            Err(RelayWireError::BadTopic)
        );
        let mut std_alphabet = String::from(TOPIC);
        std_alphabet.replace_range(40..41, "/");
        assert_eq!(Topic::parse(&std_alphabet), Err(RelayWireError::BadTopic));
        let mut padded = String::from(&TOPIC[..42]);
        padded.push('=');
        assert_eq!(Topic::parse(&padded), Err(RelayWireError::BadTopic));
        // 43 characters carry 258 bits: the last character's 2 spare bits must be zero.
        let mut non_canonical = String::from(&TOPIC[..42]);
        non_canonical.push('1');
        assert_eq!(Topic::parse(&non_canonical), Err(RelayWireError::BadTopic));
        assert_eq!(Topic::from_bytes(&[0; 32]).as_str().len(), TOPIC_CHARS);
    }

    #[test]
    fn message_naming_a_bad_topic_is_refused() {
        for t in [json!(&TOPIC[..42]), json!(null), json!(7)] {
            assert_eq!(
                client(json!({"type": "fetch", "topic": t})),
                Err(RelayWireError::BadTopic)
            );
            assert_eq!(
                client(json!({"type": "drop", "topic": t, "blob": "AQID", "ttl": 0})),
                Err(RelayWireError::BadTopic)
            );
            assert_eq!(
                relay(json!({"type": "mail", "topic": t, "items": [], "more": false})),
                Err(RelayWireError::BadTopic)
            );
        }
        assert_eq!(
            client(json!({"type": "fetch"})),
            Err(RelayWireError::BadTopic)
        );
    }

    #[test]
    fn a_blob_decoded_in_place_is_what_its_decode_gives_or_the_same_error() {
        let long = "A".repeat(MAX_BLOB_CHARS + 1);
        for text in [
            "",
            "A",
            "AQ",
            "AR",
            "AQI",
            "AQJ",
            "AQID",
            "AQIDBA",
            "AQ==",
            "AQ+/",
            "A_-z",
            "AQ ID",
            "é",
            &long,
            &long[1..],
            &long[4..],
        ] {
            let want = check_blob(text)
                .and_then(|()| base64url::decode(text).map_err(|_| RelayWireError::BadBlob));
            let mut out = vec![9, 9];
            let got = decode_blob_into(text, &mut out).map(|()| out[2..].to_vec());
            assert_eq!(got, want, "{text}");
            if want.is_err() {
                assert_eq!(out, [9, 9], "{text}");
            }
        }
    }

    #[test]
    fn blob_is_non_empty_base64url_of_at_most_12000_characters() {
        assert_eq!(Blob::parse(""), Err(RelayWireError::EmptyBlob));
        let max = "A".repeat(MAX_BLOB_CHARS);
        assert_eq!(Blob::parse(&max).unwrap().as_str().len(), 12_000);
        assert_eq!(
            Blob::parse(&"A".repeat(MAX_BLOB_CHARS + 1)),
            Err(RelayWireError::BlobTooLong { chars: 12_001 })
        );
        assert_eq!(Blob::parse("AQ+D"), Err(RelayWireError::BadBlob));
        assert_eq!(Blob::parse("AQ=="), Err(RelayWireError::BadBlob));
        assert_eq!(Blob::parse("A"), Err(RelayWireError::BadBlob));
        assert!(Blob::from_bytes(&[7; 9_000]).is_ok());
        assert_eq!(
            Blob::from_bytes(&[7; 9_001]),
            Err(RelayWireError::BlobTooLong { chars: 12_002 })
        );
        assert_eq!(Blob::from_bytes(&[]), Err(RelayWireError::EmptyBlob));
        assert_eq!(Blob::from_bytes(&[1, 2, 3]).unwrap().to_bytes(), [1, 2, 3]);
    }

    #[test]
    fn drop_checks_its_blob() {
        let drop_with =
            |blob: Value| client(json!({"type": "drop", "topic": TOPIC, "blob": blob, "ttl": 0}));
        assert_eq!(drop_with(json!("")), Err(RelayWireError::EmptyBlob));
        assert_eq!(
            drop_with(json!("A".repeat(12_001))),
            Err(RelayWireError::BlobTooLong { chars: 12_001 })
        );
        assert!(drop_with(json!("A".repeat(12_000))).is_ok());
        assert_eq!(drop_with(json!(null)), Err(RelayWireError::BadBlob));
        assert_eq!(drop_with(json!("a b")), Err(RelayWireError::BadBlob));
    }

    #[test]
    fn ttl_zero_publishes_to_watchers_and_keeps_nothing() {
        let Ok(ClientMessage::Drop { ttl, .. }) =
            client(json!({"type": "drop", "topic": TOPIC, "blob": "AQID", "ttl": 0}))
        else {
            panic!("drop");
        };
        assert_eq!(ttl, Ttl::PUBLISH_ONLY);
        assert!(!ttl.is_kept());
        assert_eq!(ttl.expiry(Timestamp::from_millis(5)), None);
    }

    #[test]
    fn positive_ttl_keeps_the_blob_until_it_expires() {
        let Ok(ClientMessage::Drop { ttl, .. }) =
            client(json!({"type": "drop", "topic": TOPIC, "blob": "AQID", "ttl": 60_000}))
        else {
            panic!("drop");
        };
        assert!(ttl.is_kept());
        assert_eq!(
            ttl.expiry(Timestamp::from_millis(1_000)),
            Some(Timestamp::from_millis(61_000))
        );
        assert_eq!(
            Ttl::from_millis(MAX_SAFE_INTEGER)
                .unwrap()
                .expiry(Timestamp::MAX),
            Some(Timestamp::MAX)
        );
    }

    #[test]
    fn ttl_is_a_required_non_negative_safe_integer() {
        for ttl in [
            json!(-1),
            json!(1.5),
            json!("5"),
            json!(null),
            json!(MAX_SAFE_INTEGER + 1),
        ] {
            assert_eq!(
                client(json!({"type": "drop", "topic": TOPIC, "blob": "AQID", "ttl": ttl})),
                Err(RelayWireError::BadTtl),
                "{ttl}"
            );
        }
        assert_eq!(
            client(json!({"type": "drop", "topic": TOPIC, "blob": "AQID"})),
            Err(RelayWireError::BadTtl)
        );
        assert!(
            client(
                json!({"type": "drop", "topic": TOPIC, "blob": "AQID", "ttl": MAX_SAFE_INTEGER})
            )
            .is_ok()
        );
        assert_eq!(
            Ttl::from_millis(MAX_SAFE_INTEGER + 1),
            Err(RelayWireError::BadTtl)
        );
    }

    #[test]
    fn fetch_defaults_to_the_start_without_watching() {
        assert_eq!(
            client(json!({"type": "fetch", "topic": TOPIC})),
            Ok(ClientMessage::Fetch {
                topic: topic(),
                after: 0,
                watch: false
            })
        );
        assert_eq!(
            client(
                json!({"type": "fetch", "topic": TOPIC, "after": 17, "watch": true, "extra": 1})
            ),
            Ok(ClientMessage::Fetch {
                topic: topic(),
                after: 17,
                watch: true
            })
        );
        assert_eq!(
            client(json!({"type": "fetch", "topic": TOPIC, "watch": 1})),
            Err(RelayWireError::BadWatch)
        );
        assert_eq!(
            client(json!({"type": "fetch", "topic": TOPIC, "after": -1})),
            Err(RelayWireError::BadAfter)
        );
    }

    #[test]
    fn spec_examples_parse_and_serialize_as_written() {
        let fetch = format!(r#"{{"type":"fetch","topic":"{TOPIC}","watch":true}}"#);
        assert_eq!(ClientMessage::parse(&fetch).unwrap().to_text(), fetch);
        let mail = format!(r#"{{"type":"mail","topic":"{TOPIC}","items":[],"more":false}}"#);
        assert_eq!(RelayMessage::parse(&mail).unwrap().to_text(), mail);
        let drop = format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"AZ3k","ttl":0}}"#);
        assert_eq!(ClientMessage::parse(&drop).unwrap().to_text(), drop);
        let pushed = format!(
            r#"{{"type":"mail","topic":"{TOPIC}","items":[{{"blob":"AV9q"}}],"more":false}}"#
        );
        assert_eq!(RelayMessage::parse(&pushed).unwrap().to_text(), pushed);
        assert_eq!(
            ClientMessage::parse(r#"{"type":"ping"}"#),
            Ok(ClientMessage::Ping)
        );
        assert_eq!(ClientMessage::Ping.to_text(), r#"{"type":"ping"}"#);
        assert_eq!(
            RelayMessage::parse(r#"{"type":"pong"}"#),
            Ok(RelayMessage::Pong)
        );
        assert_eq!(RelayMessage::Pong.to_text(), r#"{"type":"pong"}"#);
        assert_eq!(
            ClientMessage::parse(r#"{"type":"ice"}"#),
            Ok(ClientMessage::Ice)
        );
        let ice = r#"{"type":"ice","payload":{"servers":[{"urls":["turn:turn.example.com:3478"],"username":"1790000000:3q2-7wX0aBcD","credential":"n3Jk="}],"expiresAt":1790000000000}}"#;
        let RelayMessage::Ice(servers) = RelayMessage::parse(ice).unwrap() else {
            panic!("ice");
        };
        assert_eq!(servers.servers[0].urls, ["turn:turn.example.com:3478"]);
        assert_eq!(
            servers.expires_at,
            Timestamp::from_millis(1_790_000_000_000)
        );
        assert_eq!(
            RelayMessage::parse(&RelayMessage::Ice(servers.clone()).to_text()),
            Ok(RelayMessage::Ice(servers))
        );
    }

    #[test]
    fn text_that_is_not_a_typed_json_object_is_refused() {
        assert_eq!(ClientMessage::parse("ping"), Err(RelayWireError::NotJson));
        assert_eq!(ClientMessage::parse(""), Err(RelayWireError::NotJson));
        assert_eq!(
            ClientMessage::parse(r#"["ping"]"#),
            Err(RelayWireError::NotAnObject)
        );
        assert_eq!(ClientMessage::parse("{}"), Err(RelayWireError::NoType));
        assert_eq!(
            ClientMessage::parse(r#"{"type":1}"#),
            Err(RelayWireError::NoType)
        );
        assert_eq!(
            ClientMessage::parse(r#"{"type":"PING"}"#),
            Err(RelayWireError::UnknownType)
        );
        // Each direction has its own types.
        assert_eq!(
            ClientMessage::parse(r#"{"type":"pong"}"#),
            Err(RelayWireError::UnknownType)
        );
        assert_eq!(
            RelayMessage::parse(r#"{"type":"ping"}"#),
            Err(RelayWireError::UnknownType)
        );
    }

    #[test]
    fn client_frame_is_bounded_before_parsing() {
        let big = format!(
            r#"{{"type":"ping","pad":"{}"}}"#,
            " ".repeat(MAX_CLIENT_FRAME_BYTES)
        );
        assert_eq!(
            ClientMessage::parse(&big),
            Err(RelayWireError::FrameTooLarge { bytes: big.len() })
        );
        let largest_drop = ClientMessage::Drop {
            topic: topic(),
            blob: Blob::parse(&"A".repeat(MAX_BLOB_CHARS)).unwrap(),
            ttl: Ttl::from_millis(MAX_SAFE_INTEGER).unwrap(),
        };
        assert!(largest_drop.to_text().len() < MAX_CLIENT_FRAME_BYTES);
        assert_eq!(
            ClientMessage::parse(&largest_drop.to_text()),
            Ok(largest_drop)
        );
    }

    #[test]
    fn seq_increases_along_a_page() {
        let items = |seqs: Value| {
            relay(json!({"type": "mail", "topic": TOPIC, "more": false,
                "items": seqs.as_array().unwrap().iter().map(|s| json!({"blob": "AQID", "seq": s})).collect::<Vec<_>>()}))
        };
        let Ok(RelayMessage::Mail(mail)) = items(json!([1, 2, 9])) else {
            panic!("mail");
        };
        assert_eq!(mail.last_seq(), Some(9));
        assert_eq!(items(json!([2, 2])), Err(RelayWireError::SeqNotIncreasing));
        assert_eq!(items(json!([3, 1])), Err(RelayWireError::SeqNotIncreasing));
        assert_eq!(items(json!([-1])), Err(RelayWireError::BadSeq));
        assert_eq!(items(json!(["1"])), Err(RelayWireError::BadSeq));
    }

    #[test]
    fn mail_items_and_more_are_checked() {
        assert_eq!(
            relay(json!({"type": "mail", "topic": TOPIC, "more": false})),
            Err(RelayWireError::BadItems)
        );
        assert_eq!(
            relay(json!({"type": "mail", "topic": TOPIC, "items": ["AQID"]})),
            Err(RelayWireError::BadItems)
        );
        assert_eq!(
            relay(json!({"type": "mail", "topic": TOPIC, "items": [{"blob": ""}]})),
            Err(RelayWireError::EmptyBlob)
        );
        assert_eq!(
            relay(json!({"type": "mail", "topic": TOPIC, "items": [], "more": "no"})),
            Err(RelayWireError::BadMore)
        );
        // A relay that never pages may leave `more` out.
        assert!(matches!(
            relay(json!({"type": "mail", "topic": TOPIC, "items": []})),
            Ok(RelayMessage::Mail(Mail { more: false, .. }))
        ));
    }

    #[test]
    fn client_fetches_after_the_last_seq_until_more_is_false() {
        let (mut read, first) = TopicRead::start(topic(), true);
        assert_eq!(
            first,
            ClientMessage::Fetch {
                topic: topic(),
                after: 0,
                watch: true
            }
        );
        assert_eq!(
            read.on_page(&page(&[1, 2, 3, 4], true)),
            Some(ClientMessage::Fetch {
                topic: topic(),
                after: 4,
                watch: false
            })
        );
        assert_eq!(read.on_page(&page(&[5, 6], false)), None);
    }

    #[test]
    fn client_stops_after_16_pages_against_a_relay_that_never_says_false() {
        let (mut read, _) = TopicRead::start(topic(), false);
        for p in 0..MAX_FETCH_PAGES as u64 - 1 {
            let seqs: Vec<u64> = (1..=4).map(|i| p * 4 + i).collect();
            assert!(read.on_page(&page(&seqs, true)).is_some(), "page {p}");
        }
        assert_eq!(read.on_page(&page(&[61, 62, 63, 64], true)), None);
        assert_eq!(MAX_FETCH_PAGES, 16);
    }

    #[test]
    fn page_saying_more_with_fewer_than_four_blobs_ends_the_read() {
        let short = page(&[1, 2, 3], true);
        assert!(short.is_short_page());
        let (mut read, _) = TopicRead::start(topic(), false);
        assert_eq!(read.on_page(&short), None);
        // Nor does a relay that repeats a seq keep the client fetching.
        let (mut read, _) = TopicRead::start(topic(), false);
        assert!(read.on_page(&page(&[5, 6, 7, 8], true)).is_some());
        assert_eq!(read.on_page(&page(&[5, 6, 7, 8], true)), None);
    }

    #[test]
    fn ice_considers_only_the_first_4_servers() {
        let stun = turn(json!("stun:stun.example:3478"));
        let good = turn(json!("turn:t.example"));
        let only_fifth = ice_payload(json!([stun, stun, stun, stun, good]));
        assert_eq!(IceServers::from_relay(&only_fifth), None);
        let five = ice_payload(json!([good, good, good, good, good]));
        assert_eq!(IceServers::from_relay(&five).unwrap().servers.len(), 4);
        let third = ice_payload(json!([stun, stun, good, stun, good]));
        assert_eq!(IceServers::from_relay(&third).unwrap().servers.len(), 1);
    }

    #[test]
    fn ice_keeps_only_turn_and_turns_urls() {
        let offer = ice_payload(json!([turn(json!([
            "turn:a.example:3478",
            "turns:b.example:5349?transport=tcp",
            "stun:c.example",
            "TURN:d.example",
            "https://e.example",
            7,
            null
        ]))]));
        let servers = IceServers::from_relay(&offer).unwrap();
        assert_eq!(
            servers.servers[0].urls,
            ["turn:a.example:3478", "turns:b.example:5349?transport=tcp"]
        );
        let single = IceServers::from_relay(&ice_payload(json!([turn(json!("turns:x"))]))).unwrap();
        assert_eq!(single.servers[0].urls, ["turns:x"]);
        assert_eq!(
            IceServers::from_relay(&ice_payload(json!([turn(json!("stun:x"))]))),
            None
        );
        assert_eq!(
            IceServers::from_relay(&ice_payload(json!([turn(json!({"url": "turn:x"}))]))),
            None
        );
    }

    #[test]
    fn ice_url_must_be_shorter_than_256_characters() {
        let url_of = |n: usize| format!("turn:{}", "a".repeat(n - 5));
        let offer = ice_payload(json!([turn(json!([url_of(255), url_of(256)]))]));
        let servers = IceServers::from_relay(&offer).unwrap();
        assert_eq!(servers.servers[0].urls, [url_of(255)]);
        assert_eq!(
            IceServers::from_relay(&ice_payload(json!([turn(json!(url_of(256)))]))),
            None
        );
        // Characters, as JavaScript counts them: a supplementary character is 2.
        let wide = format!("turn:{}", "😀".repeat(126));
        assert_eq!(js::utf16_len(&wide), 257);
        assert_eq!(
            IceServers::from_relay(&ice_payload(json!([turn(json!(wide))]))),
            None
        );
    }

    #[test]
    fn ice_username_and_credential_must_be_strings() {
        let servers = json!([
            {"urls": "turn:a", "username": 1, "credential": "c"},
            {"urls": "turn:b", "username": "u", "credential": null},
            {"urls": "turn:c", "username": "u"},
            {"urls": "turn:d", "username": "u", "credential": "c"}
        ]);
        let kept = IceServers::from_relay(&ice_payload(servers)).unwrap();
        assert_eq!(
            kept.servers,
            vec![IceServer {
                urls: vec!["turn:d".into()],
                username: "u".into(),
                credential: "c".into()
            }]
        );
    }

    #[test]
    fn ice_expires_at_must_be_a_finite_number() {
        let server = json!([turn(json!("turn:a"))]);
        for expires in [
            json!("NaN"),
            json!(null),
            json!("1790000000000"),
            json!([1]),
        ] {
            assert_eq!(
                IceServers::from_relay(&json!({"servers": server, "expiresAt": expires})),
                None,
                "{expires}"
            );
        }
        assert_eq!(IceServers::from_relay(&json!({ "servers": server })), None);
        // JSON has no NaN or Infinity: serde_json refuses them, and a number out of f64's range.
        assert!(serde_json::from_str::<Value>(r#"{"expiresAt":NaN}"#).is_err());
        assert!(serde_json::from_str::<Value>(r#"{"expiresAt":1e999}"#).is_err());
        assert_eq!(ceil_millis(f64::NAN), None);
        assert_eq!(ceil_millis(f64::INFINITY), None);
        let fractional =
            IceServers::from_relay(&json!({"servers": server, "expiresAt": 1000.25})).unwrap();
        assert_eq!(fractional.expires_at, Timestamp::from_millis(1001));
        let negative =
            IceServers::from_relay(&json!({"servers": server, "expiresAt": -5})).unwrap();
        assert!(!negative.is_current(Timestamp::ZERO));
    }

    #[test]
    fn ice_offer_shape_is_checked() {
        assert_eq!(IceServers::from_relay(&json!(null)), None);
        assert_eq!(
            IceServers::from_relay(&json!({"servers": {}, "expiresAt": 1})),
            None
        );
        assert_eq!(
            IceServers::from_relay(&json!({"servers": [], "expiresAt": 1})),
            None
        );
        assert_eq!(
            IceServers::from_relay(&json!({"servers": ["turn:a"], "expiresAt": 1})),
            None
        );
    }

    #[test]
    fn ice_offer_with_no_usable_server_is_dropped() {
        assert_eq!(
            relay(json!({"type": "ice", "payload": ice_payload(json!([turn(json!("stun:a"))]))})),
            Err(RelayWireError::UnusableIce)
        );
        assert_eq!(
            relay(json!({"type": "ice"})),
            Err(RelayWireError::UnusableIce)
        );
    }

    #[test]
    fn turn_servers_are_used_only_while_expires_at_is_in_the_future() {
        let s = IceServers::from_relay(&ice_payload(json!([turn(json!("turn:a"))]))).unwrap();
        assert!(s.is_current(Timestamp::from_millis(1_789_999_999_999)));
        assert!(!s.is_current(Timestamp::from_millis(1_790_000_000_000)));
    }

    #[test]
    fn a_mail_of_any_number_of_blobs_reads_back_in_order() {
        for n in 0..4u64 {
            for more in [false, true] {
                let items: Vec<MailItem> = (1..=n)
                    .map(|seq| MailItem {
                        blob: Blob::from_bytes(&[seq as u8; 3]).unwrap(),
                        seq: Some(seq),
                    })
                    .collect();
                let mail = Mail {
                    topic: topic(),
                    items,
                    more,
                };
                let text = RelayMessage::Mail(mail.clone()).to_text();
                let Ok(RelayFrame::Mail(read)) = RelayMessage::read(&text) else {
                    panic!("a mail");
                };
                let blobs: Vec<&str> = read.blobs().collect();
                let written: Vec<&str> = mail.items.iter().map(|i| i.blob.as_str()).collect();
                assert_eq!(blobs, written);
                let decoded: Vec<(&str, Vec<u8>)> =
                    read.blobs_decoded().map(|(t, b)| (t, b.to_vec())).collect();
                let carried: Vec<(&str, Vec<u8>)> = mail
                    .items
                    .iter()
                    .map(|i| (i.blob.as_str(), i.blob.to_bytes()))
                    .collect();
                assert_eq!(decoded, carried);
                assert_eq!(read.to_mail(), mail);
                assert_eq!(read, MailRef::from(mail));
            }
        }
    }

    #[test]
    fn a_pushed_mail_is_written_as_the_mail_it_is() {
        for seq in [None, Some(0), Some(MAX_SAFE_INTEGER)] {
            let blob = Blob::parse("AQID").unwrap();
            let mail = RelayMessage::Mail(Mail {
                topic: topic(),
                items: vec![MailItem {
                    blob: blob.clone(),
                    seq,
                }],
                more: false,
            });
            assert_eq!(
                RelayMessage::pushed_text(&topic(), &blob, seq),
                mail.to_text()
            );
        }
    }

    #[test]
    fn every_message_reparses_to_itself() {
        let messages = [
            ClientMessage::Fetch {
                topic: topic(),
                after: 0,
                watch: false,
            },
            ClientMessage::Fetch {
                topic: topic(),
                after: MAX_SAFE_INTEGER,
                watch: true,
            },
            ClientMessage::Drop {
                topic: topic(),
                blob: Blob::from_bytes(b"sealed").unwrap(),
                ttl: Ttl::from_millis(86_400_000).unwrap(),
            },
            ClientMessage::Ice,
            ClientMessage::Ping,
        ];
        for m in messages {
            assert_eq!(ClientMessage::parse(&m.to_text()), Ok(m));
        }
        let mut mail = page(&[1, 5, 9], true);
        mail.items.push(MailItem {
            blob: Blob::parse("AV9q").unwrap(),
            seq: None,
        });
        let ice = IceServers::from_relay(&ice_payload(json!([turn(json!([
            "turn:a",
            "turns:\"quoted\\\u{1}"
        ]))])))
        .unwrap();
        for m in [
            RelayMessage::Mail(mail),
            RelayMessage::Ice(ice),
            RelayMessage::Pong,
        ] {
            assert_eq!(RelayMessage::parse(&m.to_text()), Ok(m));
        }
    }
}
