//! The frames a relay reads and writes beyond [`ClientMessage`] and [`RelayMessage`]: NIP-45
//! `COUNT` both ways, and what a malformed frame is answered with.
//!
//! NIP-45: `["COUNT", <subscription id>, <filter>…]` from the client, answered
//! `["COUNT", <subscription id>, {"count": <integer>}]` or `CLOSED`.
//!
//! NIP-77: `["NEG-OPEN", <subscription id>, <filter>, <message hex>]`, `["NEG-MSG",
//! <subscription id>, <message hex>]` both ways, `["NEG-CLOSE", <subscription id>]` from the
//! client and `["NEG-ERR", <subscription id>, <reason>]` from the relay. Messages are lower-case
//! hex of the negentropy protocol's bytes.
//!
//! NIP-01 asks that an `EVENT` be answered with `OK` and a refused `REQ` with `CLOSED`, each naming
//! what the client sent; [`Malformed`] carries the event id or subscription id read from a frame
//! that did not parse whole, so even a broken frame gets the answer its type calls for, and only a
//! frame with nothing to name is answered with `NOTICE`.

use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::codec::hex;
use crate::nostr::event::{EventId, parse_lower_hex};
use crate::nostr::limits::Limits;
use crate::nostr::message::{
    ClientMessage, Filter, MessageError, RelayMessage, filters, frame, split, subscription,
};

/// A client → relay frame as a relay reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A NIP-01 or NIP-42 message.
    Client(ClientMessage),
    /// NIP-45 `["COUNT", <subscription id>, <filter>…]`.
    Count {
        /// The subscription id the answer names.
        subscription: String,
        /// One or more filters; the count is of events matching any.
        filters: Vec<Filter>,
    },
    /// NIP-77 `NEG-OPEN`.
    NegOpen {
        /// The negentropy session's id.
        subscription: String,
        /// The events reconciled over.
        filter: Filter,
        /// The client's initial negentropy message.
        message: Vec<u8>,
    },
    /// NIP-77 `NEG-MSG` from the client.
    NegMsg {
        /// The negentropy session's id.
        subscription: String,
        /// The client's negentropy message.
        message: Vec<u8>,
    },
    /// NIP-77 `NEG-CLOSE`.
    NegClose(String),
}

/// How to answer a frame that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MalformedAnswer {
    /// `OK false` for this event id (an `EVENT` whose event is malformed but whose id reads).
    Ok(EventId),
    /// `CLOSED` for this subscription id (a `REQ` or `COUNT` whose filters are malformed).
    Closed(String),
    /// `NEG-ERR` for this subscription id (a malformed `NEG-OPEN` or `NEG-MSG`).
    NegErr(String),
    /// `NOTICE`: nothing in the frame names what it was about.
    Notice,
}

/// A frame that did not parse, and how to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Why.
    pub error: MessageError,
    /// The answer.
    pub answer: MalformedAnswer,
}

/// Parses a client → relay frame within `limits`.
pub fn parse(text: &str, limits: &Limits) -> Result<Inbound, Malformed> {
    let notice = |error| Malformed {
        error,
        answer: MalformedAnswer::Notice,
    };
    let (name, items) = split(text, limits.max_message_bytes).map_err(notice)?;
    let parsed = match name.as_str() {
        "COUNT" => subscription(&items, 0, limits.max_subscription_id_chars).and_then(|sub| {
            Ok(Inbound::Count {
                filters: filters(&items[1..], limits)?,
                subscription: sub,
            })
        }),
        "NEG-OPEN" => subscription(&items, 0, limits.max_subscription_id_chars).and_then(|sub| {
            let filter = items
                .get(1)
                .ok_or(MessageError::BadField("filter"))
                .and_then(|f| Filter::from_value_with(f, limits.max_filter_values))?;
            Ok(Inbound::NegOpen {
                subscription: sub,
                filter,
                message: neg_message(&items, 2)?,
            })
        }),
        "NEG-MSG" => subscription(&items, 0, limits.max_subscription_id_chars).and_then(|sub| {
            Ok(Inbound::NegMsg {
                subscription: sub,
                message: neg_message(&items, 1)?,
            })
        }),
        "NEG-CLOSE" => {
            subscription(&items, 0, limits.max_subscription_id_chars).map(Inbound::NegClose)
        }
        name => ClientMessage::from_parts(name, &items, limits).map(Inbound::Client),
    };
    parsed.map_err(|error| {
        let answer = match name.as_str() {
            "EVENT" => items
                .first()
                .and_then(|e| e.get("id"))
                .and_then(Value::as_str)
                .and_then(parse_lower_hex::<32>)
                .map_or(MalformedAnswer::Notice, MalformedAnswer::Ok),
            "REQ" | "COUNT" => subscription(&items, 0, limits.max_subscription_id_chars)
                .map_or(MalformedAnswer::Notice, MalformedAnswer::Closed),
            "NEG-OPEN" | "NEG-MSG" => subscription(&items, 0, limits.max_subscription_id_chars)
                .map_or(MalformedAnswer::Notice, MalformedAnswer::NegErr),
            _ => MalformedAnswer::Notice,
        };
        Malformed { error, answer }
    })
}

/// A negentropy message: lower-case hex, an even number of digits.
fn neg_message(items: &[Value], i: usize) -> Result<Vec<u8>, MessageError> {
    let text = items
        .get(i)
        .and_then(Value::as_str)
        .ok_or(MessageError::BadField("negentropy message"))?;
    if !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(MessageError::BadField("negentropy message"));
    }
    hex::decode(text).map_err(|_| MessageError::BadField("negentropy message"))
}

/// A relay → client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    /// A NIP-01 or NIP-42 message.
    Relay(RelayMessage),
    /// NIP-45 `["COUNT", <subscription id>, {"count": <integer>}]`.
    Count {
        /// The subscription id of the `COUNT` answered.
        subscription: String,
        /// The number of events.
        count: u64,
    },
    /// NIP-77 `NEG-MSG` from the relay.
    NegMsg {
        /// The negentropy session's id.
        subscription: String,
        /// The relay's negentropy message.
        message: Vec<u8>,
    },
    /// NIP-77 `NEG-ERR`: the session is closed.
    NegErr {
        /// The negentropy session's id.
        subscription: String,
        /// Why, with a NIP-01 prefix.
        reason: String,
    },
}

impl Outbound {
    /// The frame's text.
    pub fn to_text(&self) -> String {
        match self {
            Self::Relay(m) => m.to_text(),
            Self::Count {
                subscription,
                count,
            } => {
                let mut obj = Map::new();
                obj.insert("count".into(), Value::from(*count));
                frame(
                    "COUNT",
                    [Value::from(subscription.as_str()), Value::Object(obj)],
                )
            }
            Self::NegMsg {
                subscription,
                message,
            } => frame(
                "NEG-MSG",
                [
                    Value::from(subscription.as_str()),
                    Value::from(hex::encode(message)),
                ],
            ),
            Self::NegErr {
                subscription,
                reason,
            } => frame(
                "NEG-ERR",
                [
                    Value::from(subscription.as_str()),
                    Value::from(reason.as_str()),
                ],
            ),
        }
    }

    /// The relay message, for the frames NIP-01 and NIP-42 define.
    pub fn as_relay(&self) -> Option<&RelayMessage> {
        match self {
            Self::Relay(m) => Some(m),
            Self::Count { .. } | Self::NegMsg { .. } | Self::NegErr { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn count_parses_with_its_filters_and_answers_as_nip45_shows() {
        assert_eq!(
            parse(r#"["COUNT","c",{"kinds":[1]},{}]"#, &Limits::DEFAULT),
            Ok(Inbound::Count {
                subscription: "c".into(),
                filters: alloc::vec![
                    Filter {
                        kinds: Some(alloc::vec![1]),
                        ..Filter::default()
                    },
                    Filter::default()
                ],
            })
        );
        let out = Outbound::Count {
            subscription: "c".into(),
            count: 238,
        };
        assert_eq!(out.to_text(), r#"["COUNT","c",{"count":238}]"#);
        assert!(out.as_relay().is_none());
    }

    #[test]
    fn a_malformed_frame_is_answered_by_what_it_names() {
        let id = "ab".repeat(32);
        let l = Limits::DEFAULT;
        let bad_event = alloc::format!(r#"["EVENT",{{"id":"{id}"}}]"#);
        assert_eq!(
            parse(&bad_event, &l).unwrap_err().answer,
            MalformedAnswer::Ok(parse_lower_hex(&id).unwrap())
        );
        assert_eq!(
            parse(r#"["EVENT",{"id":"AB"}]"#, &l).unwrap_err().answer,
            MalformedAnswer::Notice
        );
        for text in [r#"["REQ","s",1]"#, r#"["COUNT","s"]"#] {
            assert_eq!(
                parse(text, &l).unwrap_err().answer,
                MalformedAnswer::Closed("s".to_string()),
                "{text}"
            );
        }
        for text in [
            r#"["REQ",""]"#,
            r#"["CLOSE",1]"#,
            r#"["HELLO"]"#,
            "[",
            "{}",
            r#"["AUTH",{}]"#,
        ] {
            assert_eq!(
                parse(text, &l).unwrap_err().answer,
                MalformedAnswer::Notice,
                "{text}"
            );
        }
    }
}
