//! The member wire: how two circle members' shells talk. NAP-MESH fixes only the napplet face
//! (§3.2: "The shell carries [the hop budget] between members"); weft adopts the reference
//! anchor's (Myco's) shape, a NIP-01 message wrapped with the shell's own metadata beside it, so the
//! signed event travels byte-identical and the budget never rides inside it (§3.2):
//!
//! ```text
//! ["MESH", {"ttl": <hops left>, "qid": <request id>, "budgetMs": <ms>}, <NIP-01 message>]
//! ```
//!
//! | frame | meta | inner message | meaning |
//! | --- | --- | --- | --- |
//! | [`MemberFrame::Publish`] | `ttl` | `["EVENT", <event>]` | a flooded event; `ttl` = hops it may still travel beyond the receiver |
//! | [`MemberFrame::Req`] | `ttl`, `qid`, `budgetMs` | `["REQ", <qid>, <filter>…]` | a backlog request, answered within `budgetMs` |
//! | [`MemberFrame::Backlog`] | `qid` | `["EVENT", <qid>, <event>]` | one kept event answering `qid` |
//! | [`MemberFrame::BacklogEnd`] | `qid` | `["EOSE", <qid>]` | the answering device's own backlog is done |
//! | [`MemberFrame::Have`] | `qid` | `["HAVE", <sha256 hex>…]` | which of these blobs do you hold? (weft's; NIP-01 has no blob message) |
//! | [`MemberFrame::Has`] | `qid` | `["HAS", <sha256 hex>…]` | the subset held |
//!
//! The inner NIP-01 messages are read by [`crate::nostr::message`]; only `HAVE`/`HAS` are read
//! here. Parsing is total and bounded; whatever parses serializes to text that parses the same.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::codec::hex;
use crate::nostr::event::Event;
use crate::nostr::limits::DEFAULT_MAX_MESSAGE_BYTES;
use crate::nostr::message::{ClientMessage, Filter, MAX_SUBSCRIPTION_ID_CHARS, RelayMessage};

use super::MAX_HASHES;

/// Longest member frame read, in bytes: one NIP-01 message and the `MESH` envelope.
pub const MAX_MEMBER_FRAME_BYTES: usize = DEFAULT_MAX_MESSAGE_BYTES + 512;

/// A member-to-member frame (see the module docs for the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberFrame {
    /// A flooded event.
    Publish {
        /// Hops the event may still travel beyond the receiver.
        ttl: u8,
        /// The signed event, as its author's shell signed it.
        event: Event,
    },
    /// A backlog request.
    Req {
        /// Hops the request may still travel beyond the receiver.
        ttl: u8,
        /// The request id (also the inner `REQ`'s subscription id).
        qid: String,
        /// How long the receiver may keep answering, in milliseconds.
        budget_ms: u64,
        /// The filters.
        filters: Vec<Filter>,
    },
    /// One event answering a backlog request.
    Backlog {
        /// The request answered.
        qid: String,
        /// The event.
        event: Event,
    },
    /// The answering device's own backlog is done.
    BacklogEnd {
        /// The request answered.
        qid: String,
    },
    /// A blob question.
    Have {
        /// The question's id.
        qid: String,
        /// At most [`MAX_HASHES`] sha256 hashes.
        hashes: Vec<[u8; 32]>,
    },
    /// A blob answer: the hashes asked about that are held.
    Has {
        /// The question answered.
        qid: String,
        /// The held subset.
        hashes: Vec<[u8; 32]>,
    },
}

/// Why a member frame was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// Longer than [`MAX_MEMBER_FRAME_BYTES`].
    TooLarge,
    /// Not JSON, or not `["MESH", {…}, [...]]`.
    NotAFrame,
    /// A meta field malformed, or one the inner message needs missing.
    BadMeta(&'static str),
    /// The inner message is not one a member sends.
    BadInner,
}

impl MemberFrame {
    /// Reads a member frame.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        if text.len() > MAX_MEMBER_FRAME_BYTES {
            return Err(FrameError::TooLarge);
        }
        let v: Value = serde_json::from_str(text).map_err(|_| FrameError::NotAFrame)?;
        let Value::Array(items) = v else {
            return Err(FrameError::NotAFrame);
        };
        let [tag, Value::Object(meta), inner @ Value::Array(_)] = items.as_slice() else {
            return Err(FrameError::NotAFrame);
        };
        if tag.as_str() != Some("MESH") {
            return Err(FrameError::NotAFrame);
        }
        let ttl = match meta.get("ttl") {
            None => None,
            Some(t) => Some(
                t.as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or(FrameError::BadMeta("ttl"))?,
            ),
        };
        let qid = match meta.get("qid") {
            None => None,
            Some(q) => Some(
                q.as_str()
                    .filter(|q| !q.is_empty() && q.chars().count() <= MAX_SUBSCRIPTION_ID_CHARS)
                    .map(String::from)
                    .ok_or(FrameError::BadMeta("qid"))?,
            ),
        };
        let budget_ms = match meta.get("budgetMs") {
            None => None,
            Some(b) => Some(b.as_u64().ok_or(FrameError::BadMeta("budgetMs"))?),
        };
        let list = inner.as_array().map(Vec::as_slice).unwrap_or(&[]);
        let name = list
            .first()
            .and_then(Value::as_str)
            .ok_or(FrameError::BadInner)?;
        let need_qid = || qid.clone().ok_or(FrameError::BadMeta("qid"));
        let same_qid = |sub: &str, qid: &str| {
            if sub == qid {
                Ok(())
            } else {
                Err(FrameError::BadMeta("qid"))
            }
        };
        // The inner message is read by the NIP-01 reader, on its own text.
        let inner_text = inner.to_string();
        match (name, list.len()) {
            ("EVENT", 2) => match ClientMessage::parse(&inner_text) {
                Ok(ClientMessage::Event(event)) => Ok(Self::Publish {
                    ttl: ttl.ok_or(FrameError::BadMeta("ttl"))?,
                    event,
                }),
                _ => Err(FrameError::BadInner),
            },
            ("EVENT", _) => match RelayMessage::parse(&inner_text) {
                Ok(RelayMessage::Event {
                    subscription,
                    event,
                }) => {
                    let qid = need_qid()?;
                    same_qid(&subscription, &qid)?;
                    Ok(Self::Backlog { qid, event })
                }
                _ => Err(FrameError::BadInner),
            },
            ("REQ", _) => match ClientMessage::parse(&inner_text) {
                Ok(ClientMessage::Req {
                    subscription,
                    filters,
                }) => {
                    let qid = need_qid()?;
                    same_qid(&subscription, &qid)?;
                    Ok(Self::Req {
                        ttl: ttl.ok_or(FrameError::BadMeta("ttl"))?,
                        qid,
                        budget_ms: budget_ms.ok_or(FrameError::BadMeta("budgetMs"))?,
                        filters,
                    })
                }
                _ => Err(FrameError::BadInner),
            },
            ("EOSE", _) => match RelayMessage::parse(&inner_text) {
                Ok(RelayMessage::Eose(subscription)) => {
                    let qid = need_qid()?;
                    same_qid(&subscription, &qid)?;
                    Ok(Self::BacklogEnd { qid })
                }
                _ => Err(FrameError::BadInner),
            },
            ("HAVE" | "HAS", n) if n - 1 <= MAX_HASHES => {
                let hashes = list[1..]
                    .iter()
                    .map(|h| {
                        h.as_str()
                            .filter(|h| h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                            .and_then(|h| hex::decode_array::<32>(h).ok())
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or(FrameError::BadInner)?;
                let qid = need_qid()?;
                Ok(if name == "HAVE" {
                    Self::Have { qid, hashes }
                } else {
                    Self::Has { qid, hashes }
                })
            }
            _ => Err(FrameError::BadInner),
        }
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        let mut meta = Map::new();
        let inner: Value = match self {
            Self::Publish { ttl, event } => {
                meta.insert("ttl".into(), (*ttl).into());
                serde_json::from_str(&ClientMessage::Event(event.clone()).to_text())
                    .unwrap_or(Value::Null)
            }
            Self::Req {
                ttl,
                qid,
                budget_ms,
                filters,
            } => {
                meta.insert("ttl".into(), (*ttl).into());
                meta.insert("qid".into(), qid.as_str().into());
                meta.insert("budgetMs".into(), (*budget_ms).into());
                let mut items = alloc::vec![Value::from("REQ"), Value::from(qid.as_str())];
                items.extend(filters.iter().map(Filter::to_value));
                Value::Array(items)
            }
            Self::Backlog { qid, event } => {
                meta.insert("qid".into(), qid.as_str().into());
                Value::Array(alloc::vec![
                    "EVENT".into(),
                    qid.as_str().into(),
                    event.to_value()
                ])
            }
            Self::BacklogEnd { qid } => {
                meta.insert("qid".into(), qid.as_str().into());
                Value::Array(alloc::vec!["EOSE".into(), qid.as_str().into()])
            }
            Self::Have { qid, hashes: hs } | Self::Has { qid, hashes: hs } => {
                meta.insert("qid".into(), qid.as_str().into());
                let name = if matches!(self, Self::Have { .. }) {
                    "HAVE"
                } else {
                    "HAS"
                };
                Value::Array(
                    core::iter::once(Value::from(name))
                        .chain(hs.iter().map(|h| Value::from(hex::encode(h))))
                        .collect(),
                )
            }
        };
        Value::Array(alloc::vec!["MESH".into(), Value::Object(meta), inner]).to_string()
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::nostr::event::UnsignedEvent;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn event() -> Event {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let secret = generate_secp256k1(p, &mut rng);
        UnsignedEvent {
            created_at: 1_700_000_000,
            kind: 9,
            tags: alloc::vec![alloc::vec!["h".into(), "kitchen".into()]],
            content: "hi".into(),
        }
        .sign(p, &secret, &mut rng)
        .unwrap()
    }

    #[test]
    fn every_frame_round_trips_and_the_event_rides_unchanged() {
        let e = event();
        let frames = [
            MemberFrame::Publish {
                ttl: 2,
                event: e.clone(),
            },
            MemberFrame::Req {
                ttl: 1,
                qid: "q1".into(),
                budget_ms: 8_000,
                filters: alloc::vec![Filter {
                    kinds: Some(alloc::vec![9]),
                    ..Filter::default()
                }],
            },
            MemberFrame::Backlog {
                qid: "q1".into(),
                event: e.clone(),
            },
            MemberFrame::BacklogEnd { qid: "q1".into() },
            MemberFrame::Have {
                qid: "b".into(),
                hashes: alloc::vec![[1; 32], [2; 32]],
            },
            MemberFrame::Has {
                qid: "b".into(),
                hashes: alloc::vec![],
            },
        ];
        for f in frames {
            let text = f.to_text();
            assert_eq!(MemberFrame::parse(&text), Ok(f.clone()), "{text}");
            assert_eq!(MemberFrame::parse(&text).unwrap().to_text(), text);
        }
        // The hop budget is beside the event, never in it: the inner event is its own NIP-01 text.
        let text = MemberFrame::Publish {
            ttl: 3,
            event: e.clone(),
        }
        .to_text();
        assert!(text.starts_with(r#"["MESH",{"ttl":3},["EVENT",{"#));
        assert!(text.contains(&e.to_json()) || text.contains(&e.to_value().to_string()));
    }

    #[test]
    fn malformed_frames_are_named_errors() {
        let e = event().to_value().to_string();
        for (text, want) in [
            ("[]".into(), FrameError::NotAFrame),
            (r#"["MESH",{},[]]"#.into(), FrameError::BadInner),
            (r#"["NOPE",{},["EOSE","q"]]"#.into(), FrameError::NotAFrame),
            (
                r#"["MESH",{"ttl":256},["EOSE","q"]]"#.into(),
                FrameError::BadMeta("ttl"),
            ),
            (
                r#"["MESH",{"ttl":-1},["EOSE","q"]]"#.into(),
                FrameError::BadMeta("ttl"),
            ),
            (
                r#"["MESH",{},["EOSE","q"]]"#.into(),
                FrameError::BadMeta("qid"),
            ),
            (
                r#"["MESH",{"qid":"a"},["EOSE","b"]]"#.into(),
                FrameError::BadMeta("qid"),
            ),
            (
                alloc::format!(r#"["MESH",{{}},["EVENT",{e}]]"#),
                FrameError::BadMeta("ttl"),
            ),
            (
                r#"["MESH",{"ttl":1,"qid":"q"},["REQ","q",{}]]"#.into(),
                FrameError::BadMeta("budgetMs"),
            ),
            (
                r#"["MESH",{"qid":"q"},["HAVE","AB"]]"#.into(),
                FrameError::BadInner,
            ),
            (
                r#"["MESH",{"qid":"q"},["NOTICE","x"]]"#.into(),
                FrameError::BadInner,
            ),
        ] {
            assert_eq!(MemberFrame::parse(&text), Err(want), "{text}");
        }
        let many: Vec<String> = (0..65).map(|i| alloc::format!("\"{i:064x}\"")).collect();
        let text = alloc::format!(r#"["MESH",{{"qid":"q"}},["HAVE",{}]]"#, many.join(","));
        assert_eq!(MemberFrame::parse(&text), Err(FrameError::BadInner));
        let huge = "x".repeat(MAX_MEMBER_FRAME_BYTES + 1);
        assert_eq!(MemberFrame::parse(&huge), Err(FrameError::TooLarge));
    }
}
