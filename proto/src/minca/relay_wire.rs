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

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::fmt::Write as _;

use serde_json::{Map, Value};

use crate::codec::{base64url, js};
use crate::core::Timestamp;

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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Topic(String);

impl Topic {
    /// Checks a topic as it appears on the wire.
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        // The length check first: it is cheap and bounds the decode.
        if text.len() != TOPIC_CHARS {
            return Err(RelayWireError::BadTopic);
        }
        base64url::decode_array::<TOPIC_BYTES>(text).map_err(|_| RelayWireError::BadTopic)?;
        Ok(Self(String::from(text)))
    }

    /// The topic of a 32-byte hash (see [`crate::minca::room::Room::topic`]).
    pub fn from_bytes(bytes: &[u8; TOPIC_BYTES]) -> Self {
        Self(base64url::encode(bytes))
    }

    /// The 43 characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }
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
    if text.is_empty() {
        return Err(RelayWireError::EmptyBlob);
    }
    // Any character outside the alphabet fails the decode below, so counting bytes here is
    // counting characters for every blob that can pass.
    if text.len() > MAX_BLOB_CHARS {
        return Err(RelayWireError::BlobTooLong {
            chars: js::utf16_len(text),
        });
    }
    base64url::decode(text)
        .map(drop)
        .map_err(|_| RelayWireError::BadBlob)
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

impl ClientMessage {
    /// Parses one text frame from a client.
    pub fn parse(text: &str) -> Result<Self, RelayWireError> {
        if text.len() > MAX_CLIENT_FRAME_BYTES {
            return Err(RelayWireError::FrameTooLarge { bytes: text.len() });
        }
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
        let mut out = String::new();
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
            Self::Ping => out.push_str("{\"type\":\"ping\"}"),
        }
        out
    }
}

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
                let mut last = None;
                for seq in items.iter().filter_map(|i| i.seq) {
                    if last.is_some_and(|l| seq <= l) {
                        return Err(RelayWireError::SeqNotIncreasing);
                    }
                    last = Some(seq);
                }
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
                out.push_str("{\"type\":\"mail\",\"topic\":\"");
                out.push_str(mail.topic.as_str());
                out.push_str("\",\"items\":[");
                for (i, item) in mail.items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str("{\"blob\":\"");
                    out.push_str(item.blob.as_str());
                    out.push('"');
                    if let Some(seq) = item.seq {
                        let _ = write!(out, ",\"seq\":{seq}");
                    }
                    out.push('}');
                }
                let _ = write!(out, "],\"more\":{}}}", mail.more);
            }
            Self::Ice(servers) => {
                out.push_str("{\"type\":\"ice\",\"payload\":");
                out.push_str(&js::stringify(&servers.to_payload()));
                out.push('}');
            }
            Self::Pong => out.push_str("{\"type\":\"pong\"}"),
        }
        out
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
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_SAFE_INTEGER => Ok(Some(n)),
            _ => Err(error),
        },
    }
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
