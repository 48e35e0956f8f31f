//! NIP-01 messages (with NIP-42's `AUTH`): what a client sends a relay and what a relay sends a
//! client, each a JSON array whose first element names it, and REQ filters.
//!
//! | direction | message |
//! | --- | --- |
//! | client → relay | `["EVENT", <event>]`, `["REQ", <subscription id>, <filter>…]`, `["CLOSE", <subscription id>]`, `["AUTH", <event>]` |
//! | relay → client | `["EVENT", <subscription id>, <event>]`, `["OK", <event id>, <bool>, <message>]`, `["EOSE", <subscription id>]`, `["CLOSED", <subscription id>, <message>]`, `["NOTICE", <message>]`, `["AUTH", <challenge>]` |
//!
//! Parsing is total and bounded: every frame is a message or a [`MessageError`], never a panic.
//! Elements after the last one a message defines are ignored, as later NIPs may append some; an
//! `OK` or `CLOSED` without its message (older relays) reads as an empty message. Whatever parses
//! serializes to text that parses to the same message.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};

use super::auth::MAX_CHALLENGE_BYTES;
use super::event::{Event, EventError, EventId, MAX_EVENT_BYTES, parse_lower_hex};
use crate::codec::hex;

/// Longest frame read, in bytes, checked before JSON parsing: one event of [`MAX_EVENT_BYTES`] and
/// room for the envelope around it.
pub const MAX_MESSAGE_BYTES: usize = MAX_EVENT_BYTES + 1024;

/// Longest subscription id, in characters (NIP-01: "an arbitrary, non-empty string of max length
/// 64 chars").
pub const MAX_SUBSCRIPTION_ID_CHARS: usize = 64;

/// Most filters one `REQ` may carry. NIP-01 sets no bound; relays commonly allow 10 to 20.
pub const MAX_FILTERS: usize = 16;

/// Most values one filter list (`ids`, `authors`, `kinds`, a `#x` tag list) may hold. NIP-01 sets
/// no bound; relays commonly allow about 1,000.
pub const MAX_FILTER_VALUES: usize = 1_000;

/// Why a frame is not a well-formed NIP-01 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// Longer than [`MAX_MESSAGE_BYTES`].
    TooLarge {
        /// Its length in bytes.
        bytes: usize,
    },
    /// Not JSON.
    NotJson,
    /// JSON, but not an array starting with a string.
    NotAMessage,
    /// A message name this direction does not have.
    UnknownType,
    /// An element missing or of the wrong type.
    BadField(&'static str),
    /// A subscription id empty or longer than [`MAX_SUBSCRIPTION_ID_CHARS`].
    BadSubscriptionId,
    /// A `REQ` with no filter, or more than [`MAX_FILTERS`].
    BadFilterCount,
    /// A filter not an object, or one of its fields malformed or over [`MAX_FILTER_VALUES`].
    BadFilter(&'static str),
    /// A challenge longer than [`MAX_CHALLENGE_BYTES`].
    ChallengeTooLong,
    /// The event is malformed.
    BadEvent(EventError),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { bytes } => {
                write!(f, "frame of {bytes} bytes, more than {MAX_MESSAGE_BYTES}")
            }
            Self::NotJson => f.write_str("frame is not JSON"),
            Self::NotAMessage => f.write_str("frame is not an array starting with a string"),
            Self::UnknownType => f.write_str("message type unknown in this direction"),
            Self::BadField(name) => write!(f, "message element {name} missing or malformed"),
            Self::BadSubscriptionId => f.write_str("subscription id empty or too long"),
            Self::BadFilterCount => write!(f, "REQ needs 1 to {MAX_FILTERS} filters"),
            Self::BadFilter(name) => write!(f, "filter field {name} malformed"),
            Self::ChallengeTooLong => f.write_str("challenge too long"),
            Self::BadEvent(e) => write!(f, "bad event: {e}"),
        }
    }
}

impl core::error::Error for MessageError {}

/// A REQ filter (NIP-01). An absent field does not restrict; an event matches when every present
/// field does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Event ids.
    pub ids: Option<Vec<EventId>>,
    /// Author pubkeys.
    pub authors: Option<Vec<[u8; 32]>>,
    /// Event kinds.
    pub kinds: Option<Vec<u16>>,
    /// `#<letter>`: the event has a tag of that single-letter name whose first value is listed.
    pub tags: BTreeMap<char, Vec<String>>,
    /// `created_at` at or after this (seconds).
    pub since: Option<u64>,
    /// `created_at` at or before this (seconds).
    pub until: Option<u64>,
    /// How many of the newest stored events the relay returns at first.
    pub limit: Option<u64>,
}

impl Filter {
    /// Whether `event` passes every condition present (`limit` is the relay's to apply).
    pub fn matches(&self, event: &Event) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(&event.id))
            && self
                .authors
                .as_ref()
                .is_none_or(|a| a.contains(&event.pubkey))
            && self.kinds.as_ref().is_none_or(|k| k.contains(&event.kind))
            && self.since.is_none_or(|s| event.created_at >= s)
            && self.until.is_none_or(|u| event.created_at <= u)
            && self.tags.iter().all(|(letter, values)| {
                event.tags.iter().any(|t| {
                    let mut name = [0u8; 4];
                    t.first().map(String::as_str) == Some(letter.encode_utf8(&mut name))
                        && t.get(1).is_some_and(|v| values.contains(v))
                })
            })
    }

    /// Reads a filter. Fields NIP-01 does not define (such as NIP-50's `search`) are ignored.
    pub fn from_value(value: &Value) -> Result<Self, MessageError> {
        let obj = value.as_object().ok_or(MessageError::BadFilter("filter"))?;
        let mut filter = Self::default();
        for (key, v) in obj {
            match key.as_str() {
                "ids" => {
                    filter.ids = Some(list(v, "ids", |x| x.as_str().and_then(parse_lower_hex))?)
                }
                "authors" => {
                    filter.authors = Some(list(v, "authors", |x| {
                        x.as_str().and_then(parse_lower_hex)
                    })?)
                }
                "kinds" => {
                    filter.kinds = Some(list(v, "kinds", |x| {
                        x.as_u64().and_then(|k| u16::try_from(k).ok())
                    })?)
                }
                "since" => filter.since = Some(v.as_u64().ok_or(MessageError::BadFilter("since"))?),
                "until" => filter.until = Some(v.as_u64().ok_or(MessageError::BadFilter("until"))?),
                "limit" => filter.limit = Some(v.as_u64().ok_or(MessageError::BadFilter("limit"))?),
                _ => {
                    if let Some(letter) = tag_letter(key) {
                        let values = list(v, "#tag", |x| x.as_str().map(String::from))?;
                        filter.tags.insert(letter, values);
                    }
                }
            }
        }
        Ok(filter)
    }

    /// The filter as a JSON object.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        let hexes =
            |l: &[[u8; 32]]| Value::from(l.iter().map(|b| hex::encode(b)).collect::<Vec<_>>());
        if let Some(ids) = &self.ids {
            obj.insert("ids".into(), hexes(ids));
        }
        if let Some(authors) = &self.authors {
            obj.insert("authors".into(), hexes(authors));
        }
        if let Some(kinds) = &self.kinds {
            obj.insert("kinds".into(), Value::from(kinds.clone()));
        }
        for (letter, values) in &self.tags {
            obj.insert(alloc::format!("#{letter}"), Value::from(values.clone()));
        }
        for (name, field) in [
            ("since", self.since),
            ("until", self.until),
            ("limit", self.limit),
        ] {
            if let Some(n) = field {
                obj.insert(name.into(), Value::from(n));
            }
        }
        Value::Object(obj)
    }
}

/// `#x` → `x`, for a single ASCII letter (NIP-01: "single-letter (a-z, A-Z)" tags are indexed).
fn tag_letter(key: &str) -> Option<char> {
    let mut chars = key.strip_prefix('#')?.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphabetic() => Some(c),
        _ => None,
    }
}

fn list<T>(
    v: &Value,
    name: &'static str,
    item: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<T>, MessageError> {
    let arr = v.as_array().ok_or(MessageError::BadFilter(name))?;
    if arr.len() > MAX_FILTER_VALUES {
        return Err(MessageError::BadFilter(name));
    }
    arr.iter()
        .map(|x| item(x).ok_or(MessageError::BadFilter(name)))
        .collect()
}

/// A client → relay message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientMessage {
    /// `["EVENT", <event>]`: publish an event.
    Event(Event),
    /// `["REQ", <subscription id>, <filter>…]`: open (or replace) a subscription.
    Req {
        /// The subscription id.
        subscription: String,
        /// One or more filters; an event matching any of them is sent.
        filters: Vec<Filter>,
    },
    /// `["CLOSE", <subscription id>]`: end a subscription.
    Close(String),
    /// `["AUTH", <event>]`: answer a NIP-42 challenge.
    Auth(Event),
}

/// A relay → client message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayMessage {
    /// `["EVENT", <subscription id>, <event>]`: an event for a subscription.
    Event {
        /// The subscription id.
        subscription: String,
        /// The event.
        event: Event,
    },
    /// `["OK", <event id>, <accepted>, <message>]`: the fate of a published event.
    Ok {
        /// The event's id.
        event_id: EventId,
        /// Whether the relay accepted it.
        accepted: bool,
        /// Why (NIP-01: a machine-readable prefix such as `duplicate:` then text).
        message: String,
    },
    /// `["EOSE", <subscription id>]`: stored events end, live ones follow.
    Eose(String),
    /// `["CLOSED", <subscription id>, <message>]`: the relay ended a subscription.
    Closed {
        /// The subscription id.
        subscription: String,
        /// Why.
        message: String,
    },
    /// `["NOTICE", <message>]`: something for a human.
    Notice(String),
    /// `["AUTH", <challenge>]`: a NIP-42 challenge.
    Auth(String),
}

/// The message's elements after its name.
fn split(text: &str) -> Result<(String, Vec<Value>), MessageError> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::TooLarge { bytes: text.len() });
    }
    let value: Value = serde_json::from_str(text).map_err(|_| MessageError::NotJson)?;
    let Value::Array(mut items) = value else {
        return Err(MessageError::NotAMessage);
    };
    if items.is_empty() {
        return Err(MessageError::NotAMessage);
    }
    let Value::String(name) = items.remove(0) else {
        return Err(MessageError::NotAMessage);
    };
    Ok((name, items))
}

fn string<'a>(items: &'a [Value], i: usize, name: &'static str) -> Result<&'a str, MessageError> {
    items
        .get(i)
        .and_then(Value::as_str)
        .ok_or(MessageError::BadField(name))
}

/// A message text, missing reading as empty (see the module docs).
fn reason(items: &[Value], i: usize) -> Result<String, MessageError> {
    match items.get(i) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(MessageError::BadField("message")),
    }
}

fn subscription(items: &[Value], i: usize) -> Result<String, MessageError> {
    let id = string(items, i, "subscription id")?;
    if id.is_empty() || id.chars().count() > MAX_SUBSCRIPTION_ID_CHARS {
        return Err(MessageError::BadSubscriptionId);
    }
    Ok(String::from(id))
}

fn event(items: &[Value], i: usize) -> Result<Event, MessageError> {
    let v = items.get(i).ok_or(MessageError::BadField("event"))?;
    Event::from_value(v).map_err(MessageError::BadEvent)
}

fn frame(name: &str, rest: impl IntoIterator<Item = Value>) -> String {
    let mut items = alloc::vec![Value::from(name)];
    items.extend(rest);
    // A JSON value serializes to memory without a failure path.
    serde_json::to_string(&Value::Array(items)).expect("serializing a message")
}

impl ClientMessage {
    /// Parses a client → relay frame.
    pub fn parse(text: &str) -> Result<Self, MessageError> {
        let (name, items) = split(text)?;
        match name.as_str() {
            "EVENT" => Ok(Self::Event(event(&items, 0)?)),
            "AUTH" => Ok(Self::Auth(event(&items, 0)?)),
            "CLOSE" => Ok(Self::Close(subscription(&items, 0)?)),
            "REQ" => {
                let subscription = subscription(&items, 0)?;
                let filters = &items[1..];
                if filters.is_empty() || filters.len() > MAX_FILTERS {
                    return Err(MessageError::BadFilterCount);
                }
                let filters = filters
                    .iter()
                    .map(Filter::from_value)
                    .collect::<Result<_, _>>()?;
                Ok(Self::Req {
                    subscription,
                    filters,
                })
            }
            _ => Err(MessageError::UnknownType),
        }
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        match self {
            Self::Event(e) => frame("EVENT", [e.to_value()]),
            Self::Auth(e) => frame("AUTH", [e.to_value()]),
            Self::Close(id) => frame("CLOSE", [Value::from(id.as_str())]),
            Self::Req {
                subscription,
                filters,
            } => frame(
                "REQ",
                core::iter::once(Value::from(subscription.as_str()))
                    .chain(filters.iter().map(Filter::to_value)),
            ),
        }
    }
}

impl RelayMessage {
    /// Parses a relay → client frame.
    pub fn parse(text: &str) -> Result<Self, MessageError> {
        let (name, items) = split(text)?;
        match name.as_str() {
            "EVENT" => Ok(Self::Event {
                subscription: subscription(&items, 0)?,
                event: event(&items, 1)?,
            }),
            "OK" => Ok(Self::Ok {
                event_id: parse_lower_hex(string(&items, 0, "event id")?)
                    .ok_or(MessageError::BadField("event id"))?,
                accepted: items
                    .get(1)
                    .and_then(Value::as_bool)
                    .ok_or(MessageError::BadField("accepted"))?,
                message: reason(&items, 2)?,
            }),
            "EOSE" => Ok(Self::Eose(subscription(&items, 0)?)),
            "CLOSED" => Ok(Self::Closed {
                subscription: subscription(&items, 0)?,
                message: reason(&items, 1)?,
            }),
            "NOTICE" => Ok(Self::Notice(String::from(string(&items, 0, "message")?))),
            "AUTH" => {
                let challenge = string(&items, 0, "challenge")?;
                if challenge.len() > MAX_CHALLENGE_BYTES {
                    return Err(MessageError::ChallengeTooLong);
                }
                Ok(Self::Auth(String::from(challenge)))
            }
            _ => Err(MessageError::UnknownType),
        }
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        match self {
            Self::Event {
                subscription,
                event,
            } => frame(
                "EVENT",
                [Value::from(subscription.as_str()), event.to_value()],
            ),
            Self::Ok {
                event_id,
                accepted,
                message,
            } => frame(
                "OK",
                [
                    Value::from(hex::encode(event_id)),
                    Value::from(*accepted),
                    Value::from(message.as_str()),
                ],
            ),
            Self::Eose(id) => frame("EOSE", [Value::from(id.as_str())]),
            Self::Closed {
                subscription,
                message,
            } => frame(
                "CLOSED",
                [
                    Value::from(subscription.as_str()),
                    Value::from(message.as_str()),
                ],
            ),
            Self::Notice(m) => frame("NOTICE", [Value::from(m.as_str())]),
            Self::Auth(c) => frame("AUTH", [Value::from(c.as_str())]),
        }
    }
}
