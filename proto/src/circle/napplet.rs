//! The napplet face of NAP-MESH (§3.1 message table, §3.2 design notes, §3.4 error handling):
//! `mesh.info|publish|subscribe|close|blobs` from a napplet, their results and the subscription
//! deliveries `mesh.event|eose|closed` from the shell, in NIP-5D's `{ "type": "domain.action",
//! ...payload }` shape.
//!
//! Reading is total and bounded: every text is a [`Request`] or a [`RequestError`] that carries
//! as much as could be read of the request (its type and `id`, or `subId`), so the shell can answer
//! the request it was (§4: every `mesh.info`, `mesh.publish` and `mesh.blobs` gets a result with
//! the same `id`) with the reason it was refused. Filters are NIP-01's, read by
//! [`crate::nostr::Filter::from_value`]; a template is read by the NIP-01 event reader
//! ([`crate::nostr::Event::from_value`]) with the shell-owned fields stood in, so a template and
//! an event obey one set of rules. Replies serialize with their fields in the order the spec
//! prints them, `type` first.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;
use serde::ser::SerializeStruct;
use serde_json::{Map, Value};

use crate::codec::hex;
use crate::nostr::event::{Event, MAX_EVENT_BYTES};
use crate::nostr::limits::{DEFAULT_MAX_FILTERS as MAX_FILTERS, DEFAULT_MAX_MESSAGE_BYTES};
use crate::nostr::message::{Filter, MAX_SUBSCRIPTION_ID_CHARS};

use super::MAX_HASHES;

/// Longest napplet message read, in bytes, checked before JSON parsing: one template of
/// [`MAX_EVENT_BYTES`] and room for the envelope around it (NIP-01's frame bound).
pub const MAX_NAPPLET_MESSAGE_BYTES: usize = DEFAULT_MAX_MESSAGE_BYTES;

/// Longest request `id`, in characters. The spec sets no bound; 64 is NIP-01's subscription id
/// bound, and an `id` is echoed back, so it is bounded like one.
pub const MAX_REQUEST_ID_CHARS: usize = 64;

/// The error text for a call from a napplet without the `mesh` grant, as §3.3 prints it.
pub const NOT_GRANTED: &str = "mesh not granted";

/// A request type, as far as it could be read: which result a refusal goes out as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RequestKind {
    /// `mesh.info`.
    Info,
    /// `mesh.publish`.
    Publish,
    /// `mesh.subscribe`.
    Subscribe,
    /// `mesh.close`.
    Close,
    /// `mesh.blobs`.
    Blobs,
}

/// The shell-signed parts a napplet supplies for a publish (NAP-RELAY's `EventTemplate`): the
/// napplet owns `kind`, `content` and `tags`; `pubkey`, `created_at`, `id` and `sig` are the
/// shell's (§2.2), so any the napplet sends are not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The event kind.
    pub kind: u16,
    /// The content.
    pub content: String,
    /// The tags.
    pub tags: Vec<Vec<String>>,
}

/// A message from a napplet (§3.1, napplet → shell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `mesh.info`.
    Info {
        /// Correlation id.
        id: String,
    },
    /// `mesh.publish`.
    Publish {
        /// Correlation id.
        id: String,
        /// The template to sign.
        template: Template,
        /// Requested hop budget; `None` means the user's cap.
        ttl: Option<u8>,
    },
    /// `mesh.subscribe`.
    Subscribe {
        /// Correlation id, answered only by a refusal.
        id: String,
        /// The subscription id deliveries are routed by.
        sub_id: String,
        /// One or more NIP-01 filters.
        filters: Vec<Filter>,
        /// Requested backlog hop budget; `None` means the user's cap.
        ttl: Option<u8>,
    },
    /// `mesh.close` (no `id`, no reply).
    Close {
        /// The subscription to end.
        sub_id: String,
    },
    /// `mesh.blobs`.
    Blobs {
        /// Correlation id.
        id: String,
        /// The hashes asked about, in the order given, without repeats.
        hashes: Vec<[u8; 32]>,
    },
}

/// Why a napplet message was not read as a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// Longer than [`MAX_NAPPLET_MESSAGE_BYTES`].
    TooLarge,
    /// Not a JSON object.
    NotAnObject,
    /// `type` missing or not a `mesh.*` request.
    UnknownType,
    /// `id` missing, not a string, empty, or longer than [`MAX_REQUEST_ID_CHARS`].
    BadId,
    /// `subId` missing, not a string, empty, or longer than NIP-01's 64 characters.
    BadSubId,
    /// `ttl` present but not a whole number from 0 to 255 (§3.4).
    BadTtl,
    /// `event` missing or not a readable template.
    BadTemplate,
    /// `filters` missing, empty, over NIP-01's filter count, or unreadable.
    BadFilters,
    /// `hashes` missing or not a list.
    MissingHashes,
    /// An entry of `hashes` is not a sha256 in hex.
    BadHash,
    /// More than [`MAX_HASHES`] hashes (refused whole, §3.4).
    TooManyHashes,
}

impl WireError {
    /// The `error` text the shell answers with.
    pub fn reason(self) -> &'static str {
        match self {
            Self::TooLarge => "invalid: message too large",
            Self::NotAnObject => "invalid: not a JSON object",
            Self::UnknownType => "invalid: unknown type",
            Self::BadId => "invalid: id",
            Self::BadSubId => "invalid: subId",
            Self::BadTtl => "invalid: ttl must be a whole number from 0 to 255",
            Self::BadTemplate => "invalid: event template",
            Self::BadFilters => "invalid: filters",
            Self::MissingHashes => "invalid: hashes missing",
            Self::BadHash => "invalid: hashes must be sha256 in hex",
            Self::TooManyHashes => "invalid: more than 64 hashes",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl core::error::Error for WireError {}

/// A napplet message that is not a well-formed request, with what could be read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The request's type, when `type` named one.
    pub kind: Option<RequestKind>,
    /// Its `id`, when readable: a refusal goes back under it.
    pub id: Option<String>,
    /// What was wrong.
    pub error: WireError,
}

impl Request {
    /// Reads a napplet message (see the module docs).
    pub fn parse(text: &str) -> Result<Self, RequestError> {
        let bare = |error| RequestError {
            kind: None,
            id: None,
            error,
        };
        if text.len() > MAX_NAPPLET_MESSAGE_BYTES {
            return Err(bare(WireError::TooLarge));
        }
        let value: Value = serde_json::from_str(text).map_err(|_| bare(WireError::NotAnObject))?;
        Self::from_value(&value)
    }

    /// Reads a napplet message already parsed as JSON.
    pub fn from_value(value: &Value) -> Result<Self, RequestError> {
        let obj = value.as_object().ok_or(RequestError {
            kind: None,
            id: None,
            error: WireError::NotAnObject,
        })?;
        let kind = match obj.get("type").and_then(Value::as_str) {
            Some("mesh.info") => RequestKind::Info,
            Some("mesh.publish") => RequestKind::Publish,
            Some("mesh.subscribe") => RequestKind::Subscribe,
            Some("mesh.close") => RequestKind::Close,
            Some("mesh.blobs") => RequestKind::Blobs,
            _ => {
                return Err(RequestError {
                    kind: None,
                    id: read_id(obj.get("id")),
                    error: WireError::UnknownType,
                });
            }
        };
        let mut err = RequestError {
            kind: Some(kind),
            id: None,
            error: WireError::BadId,
        };
        if kind == RequestKind::Close {
            return match read_sub_id(obj.get("subId")) {
                Some(sub_id) => Ok(Self::Close { sub_id }),
                None => {
                    err.error = WireError::BadSubId;
                    Err(err)
                }
            };
        }
        let id = read_id(obj.get("id")).ok_or_else(|| err.clone())?;
        err.id = Some(id.clone());
        let fail = |error| {
            let mut e = err.clone();
            e.error = error;
            e
        };
        match kind {
            RequestKind::Info => Ok(Self::Info { id }),
            RequestKind::Publish => {
                let template =
                    read_template(obj.get("event")).ok_or(fail(WireError::BadTemplate))?;
                let ttl = read_ttl(obj.get("ttl")).map_err(fail)?;
                Ok(Self::Publish { id, template, ttl })
            }
            RequestKind::Subscribe => {
                let sub_id = read_sub_id(obj.get("subId")).ok_or(fail(WireError::BadSubId))?;
                let filters =
                    read_filters(obj.get("filters")).ok_or(fail(WireError::BadFilters))?;
                let ttl = read_ttl(obj.get("ttl")).map_err(fail)?;
                Ok(Self::Subscribe {
                    id,
                    sub_id,
                    filters,
                    ttl,
                })
            }
            RequestKind::Blobs => {
                let hashes = read_hashes(obj.get("hashes")).map_err(fail)?;
                Ok(Self::Blobs { id, hashes })
            }
            // Answered before the `id` was read.
            RequestKind::Close => Err(fail(WireError::BadSubId)),
        }
    }

    /// The request as a JSON value, fields in the spec's order.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        let ty = |m: &mut Map<String, Value>, t: &str| m.insert("type".into(), t.into());
        match self {
            Self::Info { id } => {
                ty(&mut m, "mesh.info");
                m.insert("id".into(), id.as_str().into());
            }
            Self::Publish { id, template, ttl } => {
                ty(&mut m, "mesh.publish");
                m.insert("id".into(), id.as_str().into());
                let mut t = Map::new();
                t.insert("kind".into(), template.kind.into());
                t.insert("content".into(), template.content.as_str().into());
                t.insert("tags".into(), template.tags.clone().into());
                m.insert("event".into(), Value::Object(t));
                if let Some(ttl) = ttl {
                    m.insert("ttl".into(), (*ttl).into());
                }
            }
            Self::Subscribe {
                id,
                sub_id,
                filters,
                ttl,
            } => {
                ty(&mut m, "mesh.subscribe");
                m.insert("id".into(), id.as_str().into());
                m.insert("subId".into(), sub_id.as_str().into());
                m.insert(
                    "filters".into(),
                    Value::Array(filters.iter().map(Filter::to_value).collect()),
                );
                if let Some(ttl) = ttl {
                    m.insert("ttl".into(), (*ttl).into());
                }
            }
            Self::Close { sub_id } => {
                ty(&mut m, "mesh.close");
                m.insert("subId".into(), sub_id.as_str().into());
            }
            Self::Blobs { id, hashes } => {
                ty(&mut m, "mesh.blobs");
                m.insert("id".into(), id.as_str().into());
                m.insert(
                    "hashes".into(),
                    Value::Array(hashes.iter().map(|h| hex::encode(h).into()).collect()),
                );
            }
        }
        Value::Object(m)
    }

    /// The request as JSON text.
    pub fn to_text(&self) -> String {
        self.to_value().to_string()
    }
}

fn bounded_string(value: Option<&Value>, max_chars: usize) -> Option<String> {
    let s = value?.as_str()?;
    (!s.is_empty() && s.chars().count() <= max_chars).then(|| String::from(s))
}

fn read_id(value: Option<&Value>) -> Option<String> {
    bounded_string(value, MAX_REQUEST_ID_CHARS)
}

fn read_sub_id(value: Option<&Value>) -> Option<String> {
    bounded_string(value, MAX_SUBSCRIPTION_ID_CHARS)
}

/// §3.4: absent is the cap; anything present must be a whole number from 0 to 255. A JSON
/// number written with a fraction of zero (`2.0`) is the whole number JavaScript would send.
pub fn read_ttl(value: Option<&Value>) -> Result<Option<u8>, WireError> {
    let Some(v) = value else { return Ok(None) };
    if let Some(n) = v.as_u64() {
        return u8::try_from(n).map(Some).map_err(|_| WireError::BadTtl);
    }
    match v.as_f64() {
        Some(f) if (0.0..=255.0).contains(&f) && f == (f as u8) as f64 => Ok(Some(f as u8)),
        _ => Err(WireError::BadTtl),
    }
}

fn read_template(value: Option<&Value>) -> Option<Template> {
    let obj = value?.as_object()?;
    // The template is an event without its shell-owned fields: stand them in and read it with
    // the event reader, so kind, content and tags obey exactly NIP-01's rules and bounds.
    let mut full = obj.clone();
    let zero32 = Value::from(hex::encode(&[0u8; 32]));
    full.insert("id".into(), zero32.clone());
    full.insert("pubkey".into(), zero32);
    full.insert("sig".into(), Value::from(hex::encode(&[0u8; 64])));
    full.insert("created_at".into(), Value::from(0u64));
    full.entry("tags")
        .or_insert_with(|| Value::Array(Vec::new()));
    let event = Event::from_value(&Value::Object(full)).ok()?;
    let template = Template {
        kind: event.kind,
        content: event.content,
        tags: event.tags,
    };
    (template_bytes(&template) <= MAX_EVENT_BYTES).then_some(template)
}

/// The size of the event a template becomes, less its fixed-size fields: what a template may
/// not push past [`MAX_EVENT_BYTES`].
fn template_bytes(t: &Template) -> usize {
    t.content.len() + t.tags.iter().flatten().map(|s| s.len() + 3).sum::<usize>() + 256
}

fn read_filters(value: Option<&Value>) -> Option<Vec<Filter>> {
    // §2.1: one `NostrFilter` or a list of them.
    let items: Vec<&Value> = match value? {
        Value::Array(list) => list.iter().collect(),
        one @ Value::Object(_) => alloc::vec![one],
        _ => return None,
    };
    if items.is_empty() || items.len() > MAX_FILTERS {
        return None;
    }
    items
        .into_iter()
        .map(|f| Filter::from_value(f).ok())
        .collect()
}

/// Reads a sha256 in hex (either case; the result names it in lower case).
pub fn read_hash(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    hex::decode_array::<32>(&text.to_ascii_lowercase()).ok()
}

fn read_hashes(value: Option<&Value>) -> Result<Vec<[u8; 32]>, WireError> {
    let list = value
        .and_then(Value::as_array)
        .ok_or(WireError::MissingHashes)?;
    // §3.4: too many is refused whole, before any entry is read.
    if list.len() > MAX_HASHES {
        return Err(WireError::TooManyHashes);
    }
    let mut out: Vec<[u8; 32]> = Vec::with_capacity(list.len());
    for v in list {
        let h = v.as_str().and_then(read_hash).ok_or(WireError::BadHash)?;
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Ok(out)
}

/// `MeshLimits` (§2.1): the user's hop caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most hops a publish may ask for.
    pub publish_ttl: u8,
    /// Most hops a subscribe backlog request may ask for.
    pub subscribe_ttl: u8,
}

/// A message from the shell to a napplet (§3.1, shell → napplet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `mesh.info.result`.
    InfoResult {
        /// The request's id.
        id: String,
        /// The circle transport is running on this device.
        online: bool,
        /// Circle members reachable right now.
        peers: u32,
        /// The user's caps.
        limits: Limits,
        /// Set only when the circle cannot be queried at all.
        error: Option<String>,
    },
    /// `mesh.publish.result`.
    PublishResult {
        /// The request's id.
        id: String,
        /// The signed event and the hop budget used, or why the publish was refused (then every
        /// field but `ok` is absent, §3.4).
        outcome: Result<(Event, u8), String>,
    },
    /// `mesh.subscribe.result`: only a refusal.
    SubscribeRefused {
        /// The request's id.
        id: String,
        /// Why.
        error: String,
    },
    /// `mesh.event`: one matching event (`result` is NAP-RELAY's `RelayEventResult`,
    /// `{ "event": … }`).
    Event {
        /// The subscription.
        sub_id: String,
        /// The event.
        event: Event,
    },
    /// `mesh.eose`: this device's backlog is done.
    Eose {
        /// The subscription.
        sub_id: String,
        /// The effective backlog hop budget.
        ttl: u8,
    },
    /// `mesh.closed`: the subscription ended.
    Closed {
        /// The subscription.
        sub_id: String,
        /// Why.
        reason: Option<String>,
    },
    /// `mesh.blobs.result`.
    BlobsResult {
        /// The request's id.
        id: String,
        /// Members asked.
        peers: u32,
        /// Each asked hash (lower-case hex) → how many of those members hold it.
        blobs: BTreeMap<String, u32>,
        /// Why no answer could be given.
        error: Option<String>,
    },
}

/// An event serialized with NIP-01's field order, inside a reply.
struct Ordered<'a>(&'a Event);

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut st = s.serialize_struct("Event", 7)?;
        st.serialize_field("id", &hex::encode(&e.id))?;
        st.serialize_field("pubkey", &hex::encode(&e.pubkey))?;
        st.serialize_field("created_at", &e.created_at)?;
        st.serialize_field("kind", &e.kind)?;
        st.serialize_field("tags", &e.tags)?;
        st.serialize_field("content", &e.content)?;
        st.serialize_field("sig", &hex::encode(&e.sig))?;
        st.end()
    }
}

#[derive(Serialize)]
struct EventResult<'a> {
    event: Ordered<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LimitsWire {
    publish_ttl: u8,
    subscribe_ttl: u8,
}

/// Every reply's fields, in the spec's order; absent ones are skipped.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReplyWire<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    online: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<LimitsWire>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<Ordered<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<EventResult<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blobs: Option<&'a BTreeMap<String, u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl Reply {
    /// The request or subscription this reply answers: `(id, subId)`.
    pub fn routing(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Self::InfoResult { id, .. }
            | Self::PublishResult { id, .. }
            | Self::SubscribeRefused { id, .. }
            | Self::BlobsResult { id, .. } => (Some(id), None),
            Self::Event { sub_id, .. }
            | Self::Eose { sub_id, .. }
            | Self::Closed { sub_id, .. } => (None, Some(sub_id)),
        }
    }

    /// The reply as JSON text, fields in the order the spec prints them.
    pub fn to_text(&self) -> String {
        let mut w = ReplyWire::default();
        match self {
            Self::InfoResult {
                id,
                online,
                peers,
                limits,
                error,
            } => {
                w.ty = "mesh.info.result";
                w.id = Some(id);
                w.online = Some(*online);
                w.peers = Some(*peers);
                w.limits = Some(LimitsWire {
                    publish_ttl: limits.publish_ttl,
                    subscribe_ttl: limits.subscribe_ttl,
                });
                w.error = error.as_deref();
            }
            Self::PublishResult { id, outcome } => {
                w.ty = "mesh.publish.result";
                w.id = Some(id);
                w.ok = Some(outcome.is_ok());
                match outcome {
                    Ok((event, ttl)) => {
                        w.event = Some(Ordered(event));
                        w.event_id = Some(event.id_hex());
                        w.ttl = Some(*ttl);
                    }
                    Err(e) => w.error = Some(e),
                }
            }
            Self::SubscribeRefused { id, error } => {
                w.ty = "mesh.subscribe.result";
                w.id = Some(id);
                w.error = Some(error);
            }
            Self::Event { sub_id, event } => {
                w.ty = "mesh.event";
                w.sub_id = Some(sub_id);
                w.result = Some(EventResult {
                    event: Ordered(event),
                });
            }
            Self::Eose { sub_id, ttl } => {
                w.ty = "mesh.eose";
                w.sub_id = Some(sub_id);
                w.ttl = Some(*ttl);
            }
            Self::Closed { sub_id, reason } => {
                w.ty = "mesh.closed";
                w.sub_id = Some(sub_id);
                w.reason = reason.as_deref();
            }
            Self::BlobsResult {
                id,
                peers,
                blobs,
                error,
            } => {
                w.ty = "mesh.blobs.result";
                w.id = Some(id);
                w.peers = Some(*peers);
                w.blobs = Some(blobs);
                w.error = error.as_deref();
            }
        }
        // Strings, booleans, integers and maps of them serialize to memory without a failure path.
        serde_json::to_string(&w).expect("serializing a reply")
    }

    /// The reply as a JSON value.
    pub fn to_value(&self) -> Value {
        // The text just written is JSON.
        serde_json::from_str(&self.to_text()).expect("a reply is JSON")
    }

    /// Reads a reply (what a napplet does with what the shell sends). Strict like
    /// [`Request::parse`]: every field the message has, of its type; events verified in shape.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() > MAX_NAPPLET_MESSAGE_BYTES {
            return None;
        }
        let v: Value = serde_json::from_str(text).ok()?;
        let o = v.as_object()?;
        let s = |k: &str| o.get(k).and_then(Value::as_str).map(String::from);
        let opt_s = |k: &str| -> Option<Option<String>> {
            match o.get(k) {
                None => Some(None),
                Some(Value::String(x)) => Some(Some(x.clone())),
                Some(_) => None,
            }
        };
        let ttl = || read_ttl(o.get("ttl")).ok().flatten();
        let u32_of = |k: &str| {
            o.get(k)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        Some(match o.get("type")?.as_str()? {
            "mesh.info.result" => {
                let l = o.get("limits")?.as_object()?;
                let cap = |k: &str| {
                    l.get(k)
                        .and_then(Value::as_u64)
                        .and_then(|n| u8::try_from(n).ok())
                };
                Self::InfoResult {
                    id: s("id")?,
                    online: o.get("online")?.as_bool()?,
                    peers: u32_of("peers")?,
                    limits: Limits {
                        publish_ttl: cap("publishTtl")?,
                        subscribe_ttl: cap("subscribeTtl")?,
                    },
                    error: opt_s("error")?,
                }
            }
            "mesh.publish.result" => {
                let id = s("id")?;
                let outcome = if o.get("ok")?.as_bool()? {
                    let event = Event::from_value(o.get("event")?).ok()?;
                    if s("eventId")? != event.id_hex() {
                        return None;
                    }
                    Ok((event, ttl()?))
                } else {
                    Err(s("error")?)
                };
                Self::PublishResult { id, outcome }
            }
            "mesh.subscribe.result" => Self::SubscribeRefused {
                id: s("id")?,
                error: s("error")?,
            },
            "mesh.event" => Self::Event {
                sub_id: s("subId")?,
                event: Event::from_value(o.get("result")?.get("event")?).ok()?,
            },
            "mesh.eose" => Self::Eose {
                sub_id: s("subId")?,
                ttl: ttl()?,
            },
            "mesh.closed" => Self::Closed {
                sub_id: s("subId")?,
                reason: opt_s("reason")?,
            },
            "mesh.blobs.result" => {
                let mut blobs = BTreeMap::new();
                for (k, n) in o.get("blobs")?.as_object()? {
                    blobs.insert(k.clone(), u32::try_from(n.as_u64()?).ok()?);
                }
                Self::BlobsResult {
                    id: s("id")?,
                    peers: u32_of("peers")?,
                    blobs,
                    error: opt_s("error")?,
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn err(text: &str) -> RequestError {
        Request::parse(text).unwrap_err()
    }

    #[test]
    fn ttl_must_be_a_whole_number_from_0_to_255() {
        for (ttl, ok) in [
            ("0", Some(0)),
            ("255", Some(255)),
            ("2.0", Some(2)),
            ("256", None),
            ("-1", None),
            ("1.5", None),
            ("\"2\"", None),
            ("null", None),
            ("true", None),
            ("1e3", None),
            ("[1]", None),
        ] {
            let text = alloc::format!(
                r#"{{"type":"mesh.publish","id":"p","event":{{"kind":1,"content":""}},"ttl":{ttl}}}"#
            );
            match ok {
                Some(n) => assert!(
                    matches!(Request::parse(&text), Ok(Request::Publish { ttl: Some(t), .. }) if t == n),
                    "{ttl}"
                ),
                None => {
                    let e = err(&text);
                    assert_eq!(e.error, WireError::BadTtl, "{ttl}");
                    assert_eq!(e.id.as_deref(), Some("p"));
                    assert_eq!(e.kind, Some(RequestKind::Publish));
                }
            }
        }
        let no_ttl = r#"{"type":"mesh.subscribe","id":"s","subId":"x","filters":[{}]}"#;
        assert!(matches!(
            Request::parse(no_ttl),
            Ok(Request::Subscribe { ttl: None, .. })
        ));
        let bad = r#"{"type":"mesh.subscribe","id":"s","subId":"x","filters":[{}],"ttl":-3}"#;
        assert_eq!(err(bad).error, WireError::BadTtl);
    }

    #[test]
    fn subscribe_takes_one_filter_or_a_list_and_refuses_unreadable_ones() {
        let one = r#"{"type":"mesh.subscribe","id":"s","subId":"x","filters":{"kinds":[9]}}"#;
        let Ok(Request::Subscribe { filters, .. }) = Request::parse(one) else {
            panic!()
        };
        assert_eq!(filters.len(), 1);
        for bad in [
            r#""filters":[]"#,
            r#""filters":"x""#,
            r#""filters":[{"kinds":["a"]}]"#,
            r#""filters":[{"ids":["zz"]}]"#,
            r#""nofilters":1"#,
        ] {
            let text = alloc::format!(r#"{{"type":"mesh.subscribe","id":"s","subId":"x",{bad}}}"#);
            assert_eq!(err(&text).error, WireError::BadFilters, "{bad}");
        }
        let many = alloc::format!(
            r#"{{"type":"mesh.subscribe","id":"s","subId":"x","filters":[{}]}}"#,
            ["{}"; MAX_FILTERS + 1].join(",")
        );
        assert_eq!(err(&many).error, WireError::BadFilters);
        let nosub = r#"{"type":"mesh.subscribe","id":"s","filters":[{}]}"#;
        let e = err(nosub);
        assert_eq!((e.error, e.id.as_deref()), (WireError::BadSubId, Some("s")));
    }

    #[test]
    fn hashes_are_64_hex_sha256_at_most_64_refused_whole() {
        let h = |i: usize| alloc::format!("{i:064x}");
        let call = |hs: Vec<String>| {
            let list: Vec<String> = hs.iter().map(|h| alloc::format!("\"{h}\"")).collect();
            alloc::format!(
                r#"{{"type":"mesh.blobs","id":"b","hashes":[{}]}}"#,
                list.join(",")
            )
        };
        let ok: Vec<String> = (0..64).map(h).collect();
        assert!(
            matches!(Request::parse(&call(ok)), Ok(Request::Blobs { hashes, .. }) if hashes.len() == 64)
        );
        let too_many: Vec<String> = (0..65).map(h).collect();
        assert_eq!(err(&call(too_many)).error, WireError::TooManyHashes);
        // Even when the 65th is the only bad one, the answer is "too many", not a cut list.
        let mut bad65: Vec<String> = (0..64).map(h).collect();
        bad65.push("nothex".to_string());
        assert_eq!(err(&call(bad65)).error, WireError::TooManyHashes);
        for bad in ["abc", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
            assert_eq!(
                err(&call(alloc::vec![bad.to_string()])).error,
                WireError::BadHash
            );
        }
        let upper = "AB".repeat(32);
        let Ok(Request::Blobs { hashes, .. }) = Request::parse(&call(alloc::vec![
            upper.clone(),
            upper.to_ascii_lowercase()
        ])) else {
            panic!()
        };
        assert_eq!(
            hashes,
            alloc::vec![[0xab; 32]],
            "case-insensitive, repeats once"
        );
        let missing = r#"{"type":"mesh.blobs","id":"b"}"#;
        assert_eq!(err(missing).error, WireError::MissingHashes);
    }

    #[test]
    fn template_is_read_by_the_event_rules_and_shell_fields_are_not_read() {
        let t = r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":"hi","pubkey":"zz","id":7,"sig":null,"created_at":-1}}"#;
        let Ok(Request::Publish { template, ttl, .. }) = Request::parse(t) else {
            panic!()
        };
        assert_eq!(
            template,
            Template {
                kind: 1,
                content: "hi".into(),
                tags: Vec::new()
            }
        );
        assert_eq!(ttl, None);
        for bad in [
            r#"{"kind":70000,"content":""}"#,
            r#"{"content":""}"#,
            r#"{"kind":1}"#,
            r#"{"kind":1,"content":"","tags":[[1]]}"#,
            r#"[]"#,
        ] {
            let text = alloc::format!(r#"{{"type":"mesh.publish","id":"p","event":{bad}}}"#);
            assert_eq!(err(&text).error, WireError::BadTemplate, "{bad}");
        }
        let big = alloc::format!(
            r#"{{"type":"mesh.publish","id":"p","event":{{"kind":1,"content":"{}"}}}}"#,
            "a".repeat(MAX_EVENT_BYTES)
        );
        assert!(Request::parse(&big).is_err());
    }

    #[test]
    fn ids_are_bounded_and_unknown_types_named() {
        let long = alloc::format!(r#"{{"type":"mesh.info","id":"{}"}}"#, "i".repeat(65));
        assert_eq!(err(&long).error, WireError::BadId);
        assert_eq!(
            err(r#"{"type":"mesh.info","id":""}"#).error,
            WireError::BadId
        );
        assert_eq!(
            err(r#"{"type":"mesh.info","id":3}"#).error,
            WireError::BadId
        );
        let e = err(r#"{"type":"mesh.nope","id":"q"}"#);
        assert_eq!(
            (e.kind, e.id.as_deref(), e.error),
            (None, Some("q"), WireError::UnknownType)
        );
        assert_eq!(err("[]").error, WireError::NotAnObject);
        assert_eq!(err("{").error, WireError::NotAnObject);
        assert_eq!(err(r#"{"type":"mesh.close"}"#).error, WireError::BadSubId);
        assert_eq!(
            Request::parse(r#"{"type":"mesh.close","subId":"room","id":"ignored"}"#),
            Ok(Request::Close {
                sub_id: "room".into()
            })
        );
    }

    #[test]
    fn requests_round_trip() {
        for text in [
            r#"{"type":"mesh.info","id":"i1"}"#,
            r#"{"type":"mesh.publish","id":"p1","event":{"kind":20666,"content":"ding","tags":[["t","doorbell"]]},"ttl":2}"#,
            r##"{"type":"mesh.subscribe","id":"s1","subId":"room","filters":[{"kinds":[9],"#h":["kitchen"]}],"ttl":1}"##,
            r#"{"type":"mesh.close","subId":"room"}"#,
        ] {
            let r = Request::parse(text).unwrap();
            assert_eq!(Request::parse(&r.to_text()), Ok(r));
        }
    }

    #[test]
    fn failed_publish_result_carries_only_ok_and_error() {
        let r = Reply::PublishResult {
            id: "p".into(),
            outcome: Err(NOT_GRANTED.into()),
        };
        assert_eq!(
            r.to_text(),
            r#"{"type":"mesh.publish.result","id":"p","ok":false,"error":"mesh not granted"}"#
        );
        assert_eq!(Reply::parse(&r.to_text()), Some(r));
        let c = Reply::Closed {
            sub_id: "s".into(),
            reason: None,
        };
        assert_eq!(c.to_text(), r#"{"type":"mesh.closed","subId":"s"}"#);
        assert_eq!(Reply::parse(&c.to_text()), Some(c));
    }
}
