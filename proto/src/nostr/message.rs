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
use super::event::{Event, EventError, EventId, parse_lower_hex};
use super::limits::Limits;
use crate::codec::hex;

/// Longest subscription id, in characters (NIP-01: "an arbitrary, non-empty string of max length
/// 64 chars").
pub const MAX_SUBSCRIPTION_ID_CHARS: usize = 64;

/// Why a frame is not a well-formed NIP-01 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// Longer than [`Limits::max_message_bytes`].
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
    /// A subscription id empty or longer than [`Limits::max_subscription_id_chars`] (at most
    /// [`MAX_SUBSCRIPTION_ID_CHARS`]).
    BadSubscriptionId,
    /// A `REQ` with no filter, or more than [`Limits::max_filters`].
    BadFilterCount,
    /// A filter not an object, or one of its fields malformed or over
    /// [`Limits::max_filter_values`].
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
                write!(f, "frame of {bytes} bytes, over the frame limit")
            }
            Self::NotJson => f.write_str("frame is not JSON"),
            Self::NotAMessage => f.write_str("frame is not an array starting with a string"),
            Self::UnknownType => f.write_str("message type unknown in this direction"),
            Self::BadField(name) => write!(f, "message element {name} missing or malformed"),
            Self::BadSubscriptionId => f.write_str("subscription id empty or too long"),
            Self::BadFilterCount => f.write_str("no filter, or more filters than the limit"),
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

    /// Reads a filter within [`Limits::DEFAULT`]'s value cap. Fields NIP-01 does not define (such
    /// as NIP-50's `search`) are ignored.
    pub fn from_value(value: &Value) -> Result<Self, MessageError> {
        Self::from_value_with(value, Limits::DEFAULT.max_filter_values)
    }

    /// Reads a filter whose lists hold at most `max_values` values each.
    pub fn from_value_with(value: &Value, max_values: usize) -> Result<Self, MessageError> {
        let obj = value.as_object().ok_or(MessageError::BadFilter("filter"))?;
        let mut filter = Self::default();
        for (key, v) in obj {
            match key.as_str() {
                "ids" => {
                    filter.ids = Some(list(v, "ids", max_values, |x| {
                        x.as_str().and_then(parse_lower_hex)
                    })?)
                }
                "authors" => {
                    filter.authors = Some(list(v, "authors", max_values, |x| {
                        x.as_str().and_then(parse_lower_hex)
                    })?)
                }
                "kinds" => {
                    filter.kinds = Some(list(v, "kinds", max_values, |x| {
                        x.as_u64().and_then(|k| u16::try_from(k).ok())
                    })?)
                }
                "since" => filter.since = Some(v.as_u64().ok_or(MessageError::BadFilter("since"))?),
                "until" => filter.until = Some(v.as_u64().ok_or(MessageError::BadFilter("until"))?),
                "limit" => filter.limit = Some(v.as_u64().ok_or(MessageError::BadFilter("limit"))?),
                _ => {
                    if let Some(letter) = tag_letter(key) {
                        let values = list(v, "#tag", max_values, |x| x.as_str().map(String::from))?;
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
    max_values: usize,
    item: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<T>, MessageError> {
    let arr = v.as_array().ok_or(MessageError::BadFilter(name))?;
    if arr.len() > max_values {
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

/// The message's name and its elements after it, for a frame of at most `max_bytes`.
pub(crate) fn split(text: &str, max_bytes: usize) -> Result<(String, Vec<Value>), MessageError> {
    if text.len() > max_bytes {
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

/// The subscription id at `i`, of 1 to `max_chars` characters.
pub(crate) fn subscription(
    items: &[Value],
    i: usize,
    max_chars: usize,
) -> Result<String, MessageError> {
    let id = string(items, i, "subscription id")?;
    if id.is_empty() || id.chars().count() > max_chars.min(MAX_SUBSCRIPTION_ID_CHARS) {
        return Err(MessageError::BadSubscriptionId);
    }
    Ok(String::from(id))
}

/// The filters from `items`: 1 to [`Limits::max_filters`], each within its value cap.
pub(crate) fn filters(items: &[Value], limits: &Limits) -> Result<Vec<Filter>, MessageError> {
    if items.is_empty() || items.len() > limits.max_filters {
        return Err(MessageError::BadFilterCount);
    }
    items
        .iter()
        .map(|v| Filter::from_value_with(v, limits.max_filter_values))
        .collect()
}

pub(crate) fn event(items: &[Value], i: usize) -> Result<Event, MessageError> {
    let v = items.get(i).ok_or(MessageError::BadField("event"))?;
    Event::from_value(v).map_err(MessageError::BadEvent)
}

pub(crate) fn frame(name: &str, rest: impl IntoIterator<Item = Value>) -> String {
    let mut items = alloc::vec![Value::from(name)];
    items.extend(rest);
    // A JSON value serializes to memory without a failure path.
    serde_json::to_string(&Value::Array(items)).expect("serializing a message")
}

impl ClientMessage {
    /// Parses a client → relay frame within [`Limits::DEFAULT`].
    pub fn parse(text: &str) -> Result<Self, MessageError> {
        Self::parse_with(text, &Limits::DEFAULT)
    }

    /// Parses a client → relay frame within `limits`' frame size, subscription id length, filter
    /// count and filter value caps.
    pub fn parse_with(text: &str, limits: &Limits) -> Result<Self, MessageError> {
        let (name, items) = split(text, limits.max_message_bytes)?;
        Self::from_parts(&name, &items, limits)
    }

    /// The message named `name` with elements `items` (after the name).
    pub(crate) fn from_parts(
        name: &str,
        items: &[Value],
        limits: &Limits,
    ) -> Result<Self, MessageError> {
        let sub_chars = limits.max_subscription_id_chars;
        match name {
            "EVENT" => Ok(Self::Event(event(items, 0)?)),
            "AUTH" => Ok(Self::Auth(event(items, 0)?)),
            "CLOSE" => Ok(Self::Close(subscription(items, 0, sub_chars)?)),
            "REQ" => Ok(Self::Req {
                subscription: subscription(items, 0, sub_chars)?,
                filters: filters(&items[1..], limits)?,
            }),
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
        let (name, items) = split(text, Limits::DEFAULT.max_message_bytes)?;
        match name.as_str() {
            "EVENT" => Ok(Self::Event {
                subscription: subscription(&items, 0, MAX_SUBSCRIPTION_ID_CHARS)?,
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
            "EOSE" => Ok(Self::Eose(subscription(
                &items,
                0,
                MAX_SUBSCRIPTION_ID_CHARS,
            )?)),
            "CLOSED" => Ok(Self::Closed {
                subscription: subscription(&items, 0, MAX_SUBSCRIPTION_ID_CHARS)?,
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

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::nostr::event::UnsignedEvent;
    use alloc::string::ToString;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn event(kind: u16, created_at: u64, tags: Vec<Vec<String>>) -> Event {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let secret = generate_secp256k1(p, &mut rng);
        UnsignedEvent {
            created_at,
            kind,
            tags,
            content: "AZ3k".into(),
        }
        .sign(p, &secret, &mut rng)
        .unwrap()
    }

    fn full_filter() -> Filter {
        Filter {
            ids: Some(vec![[1; 32]]),
            authors: Some(vec![[2; 32]]),
            kinds: Some(vec![24_733, 4_733]),
            tags: BTreeMap::from([('x', vec!["t".to_string()]), ('P', vec![])]),
            since: Some(10),
            until: Some(20),
            limit: Some(500),
        }
    }

    #[test]
    fn every_client_message_round_trips() {
        let e = event(1, 5, vec![vec!["x".into(), "t".into()]]);
        for m in [
            ClientMessage::Event(e.clone()),
            ClientMessage::Auth(e),
            ClientMessage::Close("sub".into()),
            ClientMessage::Req {
                subscription: "s".repeat(MAX_SUBSCRIPTION_ID_CHARS),
                filters: vec![full_filter(), Filter::default()],
            },
        ] {
            let text = m.to_text();
            assert_eq!(ClientMessage::parse(&text), Ok(m), "{text}");
        }
    }

    #[test]
    fn every_relay_message_round_trips() {
        let e = event(1, 5, vec![]);
        for m in [
            RelayMessage::Event {
                subscription: "s".into(),
                event: e,
            },
            RelayMessage::Ok {
                event_id: [7; 32],
                accepted: false,
                message: "duplicate: have it".into(),
            },
            RelayMessage::Eose("s".into()),
            RelayMessage::Closed {
                subscription: "s".into(),
                message: "auth-required: who".into(),
            },
            RelayMessage::Notice("hello".into()),
            RelayMessage::Auth("challenge-1".into()),
        ] {
            let text = m.to_text();
            assert_eq!(RelayMessage::parse(&text), Ok(m), "{text}");
        }
    }

    #[test]
    fn a_req_is_written_as_nip01_shows_it() {
        let m = ClientMessage::Req {
            subscription: "w".into(),
            filters: vec![Filter {
                kinds: Some(vec![24_733]),
                tags: BTreeMap::from([('x', vec!["t".to_string()])]),
                since: Some(1_790_000_000),
                ..Filter::default()
            }],
        };
        assert_eq!(
            m.to_text(),
            r##"["REQ","w",{"#x":["t"],"kinds":[24733],"since":1790000000}]"##
        );
    }

    #[test]
    fn ok_and_closed_without_their_message_read_as_empty() {
        let id = "07".repeat(32);
        assert_eq!(
            RelayMessage::parse(&alloc::format!(r#"["OK","{id}",true]"#)),
            Ok(RelayMessage::Ok {
                event_id: [7; 32],
                accepted: true,
                message: String::new()
            })
        );
        assert_eq!(
            RelayMessage::parse(r#"["CLOSED","s"]"#),
            Ok(RelayMessage::Closed {
                subscription: "s".into(),
                message: String::new()
            })
        );
        // Elements a later NIP appends are ignored.
        assert_eq!(
            RelayMessage::parse(r#"["EOSE","s",1]"#),
            Ok(RelayMessage::Eose("s".into()))
        );
    }

    #[test]
    fn malformed_frames_get_a_typed_error_never_a_panic() {
        let id = "07".repeat(32);
        let cases: &[(&str, MessageError)] = &[
            ("", MessageError::NotJson),
            ("{}", MessageError::NotAMessage),
            ("[]", MessageError::NotAMessage),
            ("[1]", MessageError::NotAMessage),
            (r#"["PING"]"#, MessageError::UnknownType),
            (r#"["EOSE"]"#, MessageError::BadField("subscription id")),
            (r#"["EOSE",""]"#, MessageError::BadSubscriptionId),
            (r#"["NOTICE",1]"#, MessageError::BadField("message")),
            (r#"["OK","07",true,""]"#, MessageError::BadField("event id")),
            (r#"["CLOSED","s",false]"#, MessageError::BadField("message")),
            (
                r#"["EVENT","s",{}]"#,
                MessageError::BadEvent(EventError::BadField("id")),
            ),
        ];
        for (text, err) in cases {
            assert_eq!(RelayMessage::parse(text), Err(*err), "{text}");
        }
        assert_eq!(
            RelayMessage::parse(&alloc::format!(r#"["OK","{}",true]"#, "AB".repeat(32))),
            Err(MessageError::BadField("event id"))
        );
        assert_eq!(
            RelayMessage::parse(&alloc::format!(r#"["OK","{id}","yes"]"#)),
            Err(MessageError::BadField("accepted"))
        );
        let long_sub = alloc::format!(
            r#"["EOSE","{}"]"#,
            "s".repeat(MAX_SUBSCRIPTION_ID_CHARS + 1)
        );
        assert_eq!(
            RelayMessage::parse(&long_sub),
            Err(MessageError::BadSubscriptionId)
        );
        let long_challenge =
            alloc::format!(r#"["AUTH","{}"]"#, "c".repeat(MAX_CHALLENGE_BYTES + 1));
        assert_eq!(
            RelayMessage::parse(&long_challenge),
            Err(MessageError::ChallengeTooLong)
        );
        let max = Limits::DEFAULT.max_message_bytes;
        let big = " ".repeat(max + 1);
        assert_eq!(
            RelayMessage::parse(&big),
            Err(MessageError::TooLarge { bytes: max + 1 })
        );

        let client: &[(&str, MessageError)] = &[
            (r#"["REQ","s"]"#, MessageError::BadFilterCount),
            (r#"["REQ","s",1]"#, MessageError::BadFilter("filter")),
            (
                r#"["REQ","s",{"kinds":[65536]}]"#,
                MessageError::BadFilter("kinds"),
            ),
            (
                r#"["REQ","s",{"ids":["AB"]}]"#,
                MessageError::BadFilter("ids"),
            ),
            (
                r#"["REQ","s",{"limit":-1}]"#,
                MessageError::BadFilter("limit"),
            ),
            (
                r##"["REQ","s",{"#x":[1]}]"##,
                MessageError::BadFilter("#tag"),
            ),
            (r#"["CLOSE"]"#, MessageError::BadField("subscription id")),
            (
                r#"["AUTH","challenge"]"#,
                MessageError::BadEvent(EventError::NotAnObject),
            ),
            (r#"["OK"]"#, MessageError::UnknownType),
        ];
        for (text, err) in client {
            assert_eq!(ClientMessage::parse(text), Err(*err), "{text}");
        }
        let many = alloc::format!(
            r#"["REQ","s"{}]"#,
            ",{}".repeat(Limits::DEFAULT.max_filters + 1)
        );
        assert_eq!(
            ClientMessage::parse(&many),
            Err(MessageError::BadFilterCount)
        );
        let values = alloc::format!(
            r#"["REQ","s",{{"kinds":[{}1]}}]"#,
            "1,".repeat(Limits::DEFAULT.max_filter_values)
        );
        assert_eq!(
            ClientMessage::parse(&values),
            Err(MessageError::BadFilter("kinds"))
        );
    }

    #[test]
    fn parsing_caps_come_from_the_limits_so_a_peer_can_be_given_larger_ones() {
        let small = Limits {
            max_filters: 2,
            max_filter_values: 2,
            max_subscription_id_chars: 3,
            max_message_bytes: 64,
            ..Limits::DEFAULT
        };
        let large = Limits {
            max_filters: 40,
            max_filter_values: 5_000,
            max_message_bytes: 1 << 20,
            ..Limits::DEFAULT
        };
        let three = r#"["REQ","s",{},{},{}]"#;
        assert!(ClientMessage::parse_with(three, &Limits::DEFAULT).is_ok());
        assert_eq!(
            ClientMessage::parse_with(three, &small),
            Err(MessageError::BadFilterCount)
        );
        let values = r#"["REQ","s",{"kinds":[1,2,3]}]"#;
        assert_eq!(
            ClientMessage::parse_with(values, &small),
            Err(MessageError::BadFilter("kinds"))
        );
        assert_eq!(
            ClientMessage::parse_with(r#"["CLOSE","abcd"]"#, &small),
            Err(MessageError::BadSubscriptionId)
        );
        let forty = alloc::format!(r#"["REQ","s"{}]"#, ",{}".repeat(40));
        assert_eq!(
            ClientMessage::parse(&forty),
            Err(MessageError::BadFilterCount)
        );
        assert!(ClientMessage::parse_with(&forty, &large).is_ok());
        let many = alloc::format!(r#"["REQ","s",{{"kinds":[{}1]}}]"#, "1,".repeat(4_999));
        assert!(ClientMessage::parse(&many).is_err());
        assert!(ClientMessage::parse_with(&many, &large).is_ok());
        // NIP-01's 64-character bound holds whatever the limits say.
        let long = alloc::format!(r#"["CLOSE","{}"]"#, "s".repeat(65));
        let lax = Limits {
            max_subscription_id_chars: 1_000,
            ..Limits::DEFAULT
        };
        assert_eq!(
            ClientMessage::parse_with(&long, &lax),
            Err(MessageError::BadSubscriptionId)
        );
    }

    #[test]
    fn filter_keys_other_than_single_letter_tags_are_ignored() {
        let f = Filter::from_value(
            &serde_json::json!({"#xy": ["a"], "search": "q", "#1": ["b"], "#e": ["c"]}),
        )
        .unwrap();
        assert_eq!(f.tags, BTreeMap::from([('e', vec!["c".to_string()])]));
    }

    #[test]
    fn a_filter_matches_when_every_present_field_does() {
        let e = event(24_733, 15, vec![vec!["x".into(), "t".into()]]);
        let base = Filter {
            kinds: Some(vec![24_733]),
            tags: BTreeMap::from([('x', vec!["t".to_string()])]),
            since: Some(15),
            until: Some(15),
            ids: Some(vec![e.id]),
            authors: Some(vec![e.pubkey]),
            limit: Some(1),
        };
        assert!(base.matches(&e));
        assert!(Filter::default().matches(&e));
        let fails = [
            Filter {
                kinds: Some(vec![1]),
                ..base.clone()
            },
            Filter {
                tags: BTreeMap::from([('x', vec!["u".to_string()])]),
                ..base.clone()
            },
            Filter {
                tags: BTreeMap::from([('y', vec!["t".to_string()])]),
                ..base.clone()
            },
            Filter {
                since: Some(16),
                ..base.clone()
            },
            Filter {
                until: Some(14),
                ..base.clone()
            },
            Filter {
                ids: Some(vec![[0; 32]]),
                ..base.clone()
            },
            Filter {
                authors: Some(vec![]),
                ..base.clone()
            },
        ];
        for f in fails {
            assert!(!f.matches(&e), "{f:?}");
        }
    }
}
