//! The NIP-01 event: its fields, the serialization its id is the SHA-256 of, BIP-340 signing and
//! verification, and strict, bounded parsing.
//!
//! NIP-01: the id is `sha256` of the UTF-8 JSON text of `[0, <pubkey hex>, <created_at>, <kind>,
//! <tags>, <content>]` with no whitespace, where `\n`, `"`, `\`, `\r`, tab, backspace and form
//! feed are written as `\n \" \\ \r \t \b \f`, and "all other characters" verbatim. serde_json
//! writes exactly that for every string without C0 control characters; for the other C0 controls
//! (U+0000–U+001F but those five) it writes `\u00xx`, as JavaScript's `JSON.stringify` and so
//! nostr-tools and most relays do, where NIP-01 read literally keeps the raw byte. weft signs
//! with the `\u00xx` form (the one relays recompute), and [`Event::verify`] accepts an event whose
//! id matches either form, so an event from a client that followed the text literally still
//! verifies (recorded in `docs/decisions.md`). Minca's events never meet the difference: their
//! content and tags are base64url.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::codec::hex;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};

/// Most tags an event may carry. NIP-01 sets no bound; 2,000 holds the largest follow lists
/// seen on public relays while bounding what one parsed event can allocate.
pub const MAX_TAGS: usize = 2_000;

/// Most strings one tag may hold (its name and values). NIP-01 sets no bound; the tags NIPs
/// define have at most a handful.
pub const MAX_TAG_FIELDS: usize = 16;

/// Longest event JSON [`Event::parse`] reads, in bytes, checked before JSON parsing. Public relays
/// commonly refuse events above 64–128 KiB; a larger frame is refused before it costs anything.
pub const MAX_EVENT_BYTES: usize = 128 * 1024;

/// A 32-byte event id, the SHA-256 of the id serialization.
pub type EventId = [u8; 32];

/// Why text or a JSON value is not a well-formed, or not a genuine, NIP-01 event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventError {
    /// Longer than [`MAX_EVENT_BYTES`].
    TooLarge {
        /// Its length in bytes.
        bytes: usize,
    },
    /// Not JSON.
    NotJson,
    /// JSON, but not an object.
    NotAnObject,
    /// A field missing or of the wrong JSON type, or a number that is not a non-negative integer.
    BadField(&'static str),
    /// A hex field (`id`, `pubkey`, `sig`) not exactly its length in lower-case hex.
    BadHex(&'static str),
    /// `kind` above 65535.
    BadKind,
    /// More than [`MAX_TAGS`] tags.
    TooManyTags,
    /// A tag that is not an array of strings, or holds more than [`MAX_TAG_FIELDS`].
    BadTag,
    /// `id` is not the SHA-256 of the event's serialization.
    IdMismatch,
    /// `sig` is not a BIP-340 signature of `id` by `pubkey`.
    BadSignature,
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { bytes } => {
                write!(f, "event of {bytes} bytes, more than {MAX_EVENT_BYTES}")
            }
            Self::NotJson => f.write_str("event is not JSON"),
            Self::NotAnObject => f.write_str("event is not a JSON object"),
            Self::BadField(name) => write!(f, "event field {name} missing or malformed"),
            Self::BadHex(name) => write!(f, "event field {name} is not lower-case hex"),
            Self::BadKind => f.write_str("event kind above 65535"),
            Self::TooManyTags => write!(f, "event has more than {MAX_TAGS} tags"),
            Self::BadTag => f.write_str("event tag is not a bounded array of strings"),
            Self::IdMismatch => f.write_str("event id does not match its content"),
            Self::BadSignature => f.write_str("event signature does not verify"),
        }
    }
}

impl core::error::Error for EventError {}

/// A NIP-01 event.
///
/// Parsing checks shape and bounds only; [`Event::verify`] checks the id and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// SHA-256 of the id serialization.
    pub id: EventId,
    /// The author's BIP-340 x-only public key.
    pub pubkey: [u8; 32],
    /// Unix time in seconds.
    pub created_at: u64,
    /// The event kind, 0 to 65535.
    pub kind: u16,
    /// Tags: arrays of strings, the first being the tag's name.
    pub tags: Vec<Vec<String>>,
    /// The content.
    pub content: String,
    /// BIP-340 signature of `id` by `pubkey`.
    pub sig: [u8; 64],
}

/// The fields an id is computed over, before the id and signature exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsignedEvent {
    /// Unix time in seconds.
    pub created_at: u64,
    /// The event kind.
    pub kind: u16,
    /// Tags.
    pub tags: Vec<Vec<String>>,
    /// The content.
    pub content: String,
}

impl UnsignedEvent {
    /// Signs with `secret`: the pubkey is the secret's x-only key, the id is computed, and the
    /// BIP-340 auxiliary randomness comes from `rng`.
    pub fn sign(
        self,
        provider: &dyn CryptoProvider,
        secret: &Secp256k1Secret,
        rng: &mut dyn rand_core::CryptoRng,
    ) -> Result<Event, CryptoError> {
        let pubkey = provider.schnorr_public_key(secret)?;
        let id = provider.sha256(&[id_serialization(
            &pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        )
        .as_bytes()]);
        let mut aux = [0u8; 32];
        rng.fill_bytes(&mut aux);
        let sig = provider.schnorr_sign(secret, &id, &aux)?;
        Ok(Event {
            id,
            pubkey,
            created_at: self.created_at,
            kind: self.kind,
            tags: self.tags,
            content: self.content,
            sig,
        })
    }
}

/// The text an event id is the SHA-256 of, in the JSON-escaped form (see the module docs).
pub fn id_serialization(
    pubkey: &[u8; 32],
    created_at: u64,
    kind: u16,
    tags: &[Vec<String>],
    content: &str,
) -> String {
    let pubkey = hex::encode(pubkey);
    // Serializing strings, integers and arrays of them into memory has no failure path.
    serde_json::to_string(&(0u8, pubkey.as_str(), created_at, kind, tags, content))
        .expect("serializing an event to memory")
}

/// The id serialization with C0 controls other than NIP-01's five named escapes written raw, as
/// NIP-01's text reads literally. `None` when no string holds such a character, as the text is
/// then the same as [`id_serialization`]'s.
fn verbatim_serialization(
    pubkey: &[u8; 32],
    created_at: u64,
    kind: u16,
    tags: &[Vec<String>],
    content: &str,
) -> Option<String> {
    let odd = |s: &str| s.chars().any(is_unnamed_control);
    if !odd(content) && !tags.iter().flatten().any(|s| odd(s)) {
        return None;
    }
    let mut out = String::from("[0,\"");
    out.push_str(&hex::encode(pubkey));
    out.push_str("\",");
    out.push_str(&alloc::format!("{created_at},{kind},["));
    for (i, tag) in tags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for (j, field) in tag.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            push_verbatim(&mut out, field);
        }
        out.push(']');
    }
    out.push_str("],");
    push_verbatim(&mut out, content);
    out.push(']');
    Some(out)
}

fn is_unnamed_control(c: char) -> bool {
    c < ' ' && !matches!(c, '\n' | '\r' | '\t' | '\u{8}' | '\u{c}')
}

fn push_verbatim(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The wire form, fields in NIP-01's order.
#[derive(Serialize)]
struct Wire<'a> {
    id: &'a str,
    pubkey: &'a str,
    created_at: u64,
    kind: u16,
    tags: &'a [Vec<String>],
    content: &'a str,
    sig: &'a str,
}

impl Event {
    /// Parses event JSON text (strict: see [`Event::from_value`]), bounded by
    /// [`MAX_EVENT_BYTES`].
    pub fn parse(text: &str) -> Result<Self, EventError> {
        if text.len() > MAX_EVENT_BYTES {
            return Err(EventError::TooLarge { bytes: text.len() });
        }
        let value: Value = serde_json::from_str(text).map_err(|_| EventError::NotJson)?;
        Self::from_value(&value)
    }

    /// Reads an event from a JSON value: every NIP-01 field present with its type, hex fields in
    /// lower case of their exact length, `created_at` and `kind` non-negative integers (`kind` at
    /// most 65535), tags arrays of strings within [`MAX_TAGS`] and [`MAX_TAG_FIELDS`]. Fields
    /// NIP-01 does not name are ignored, as later NIPs may add them.
    pub fn from_value(value: &Value) -> Result<Self, EventError> {
        let obj = value.as_object().ok_or(EventError::NotAnObject)?;
        let id = hex_field::<32>(obj.get("id"), "id")?;
        let pubkey = hex_field::<32>(obj.get("pubkey"), "pubkey")?;
        let sig = hex_field::<64>(obj.get("sig"), "sig")?;
        let created_at = obj
            .get("created_at")
            .and_then(Value::as_u64)
            .ok_or(EventError::BadField("created_at"))?;
        let kind = obj
            .get("kind")
            .and_then(Value::as_u64)
            .ok_or(EventError::BadField("kind"))?;
        let kind = u16::try_from(kind).map_err(|_| EventError::BadKind)?;
        let content = obj
            .get("content")
            .and_then(Value::as_str)
            .ok_or(EventError::BadField("content"))?;
        let tags = parse_tags(obj.get("tags"))?;
        Ok(Self {
            id,
            pubkey,
            created_at,
            kind,
            tags,
            content: String::from(content),
            sig,
        })
    }

    /// The event as a JSON value.
    pub fn to_value(&self) -> Value {
        // Strings, integers and arrays of strings convert without a failure path.
        serde_json::to_value(self.wire_parts().as_wire()).expect("converting an event")
    }

    /// The event as compact JSON text, fields in NIP-01's order.
    pub fn to_json(&self) -> String {
        // Strings, integers and arrays of strings serialize to memory without a failure path.
        serde_json::to_string(&self.wire_parts().as_wire()).expect("serializing an event")
    }

    fn wire_parts(&self) -> WireParts<'_> {
        WireParts {
            id: hex::encode(&self.id),
            pubkey: hex::encode(&self.pubkey),
            sig: hex::encode(&self.sig),
            event: self,
        }
    }

    /// The id this event's fields hash to (the JSON-escaped form).
    pub fn compute_id(&self, provider: &dyn CryptoProvider) -> EventId {
        let text = id_serialization(
            &self.pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        );
        provider.sha256(&[text.as_bytes()])
    }

    /// Whether `id` is the hash of the fields, in either serialization (see the module docs).
    pub fn id_matches(&self, provider: &dyn CryptoProvider) -> bool {
        if self.compute_id(provider) == self.id {
            return true;
        }
        verbatim_serialization(
            &self.pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        )
        .is_some_and(|text| provider.sha256(&[text.as_bytes()]) == self.id)
    }

    /// Checks the id, then the signature: what NIP-01 asks of anyone who relies on an event.
    pub fn verify(&self, provider: &dyn CryptoProvider) -> Result<(), EventError> {
        if !self.id_matches(provider) {
            return Err(EventError::IdMismatch);
        }
        if !provider.schnorr_verify(&self.pubkey, &self.id, &self.sig) {
            return Err(EventError::BadSignature);
        }
        Ok(())
    }

    /// The first tag named `name`, whole (name included).
    pub fn tag(&self, name: &str) -> Option<&[String]> {
        self.tags
            .iter()
            .find(|t| t.first().is_some_and(|n| n == name))
            .map(Vec::as_slice)
    }

    /// The first value of the first tag named `name`.
    pub fn tag_value(&self, name: &str) -> Option<&str> {
        self.tag(name).and_then(|t| t.get(1)).map(String::as_str)
    }

    /// The id in lower-case hex, as `OK` and filters name it.
    pub fn id_hex(&self) -> String {
        hex::encode(&self.id)
    }
}

struct WireParts<'a> {
    id: String,
    pubkey: String,
    sig: String,
    event: &'a Event,
}

impl WireParts<'_> {
    fn as_wire(&self) -> Wire<'_> {
        Wire {
            id: &self.id,
            pubkey: &self.pubkey,
            created_at: self.event.created_at,
            kind: self.event.kind,
            tags: &self.event.tags,
            content: &self.event.content,
            sig: &self.sig,
        }
    }
}

/// Reads a lower-case hex string of exactly `N` bytes (NIP-01: ids, keys and signatures are
/// lower-case hex).
pub(crate) fn parse_lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    hex::decode_array::<N>(text).ok()
}

fn hex_field<const N: usize>(
    value: Option<&Value>,
    name: &'static str,
) -> Result<[u8; N], EventError> {
    let text = value
        .and_then(Value::as_str)
        .ok_or(EventError::BadField(name))?;
    parse_lower_hex::<N>(text).ok_or(EventError::BadHex(name))
}

fn parse_tags(value: Option<&Value>) -> Result<Vec<Vec<String>>, EventError> {
    let list = value
        .and_then(Value::as_array)
        .ok_or(EventError::BadField("tags"))?;
    if list.len() > MAX_TAGS {
        return Err(EventError::TooManyTags);
    }
    list.iter()
        .map(|tag| {
            let fields = tag.as_array().ok_or(EventError::BadTag)?;
            if fields.len() > MAX_TAG_FIELDS {
                return Err(EventError::BadTag);
            }
            fields
                .iter()
                .map(|f| f.as_str().map(String::from).ok_or(EventError::BadTag))
                .collect()
        })
        .collect()
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use alloc::string::ToString;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn signed(content: &str, tags: Vec<Vec<String>>) -> Event {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let secret = generate_secp256k1(p, &mut rng);
        UnsignedEvent {
            created_at: 1_790_000_000,
            kind: 24_733,
            tags,
            content: content.to_string(),
        }
        .sign(p, &secret, &mut rng)
        .unwrap()
    }

    #[test]
    fn the_id_serialization_is_the_nip01_array_without_whitespace() {
        let pk = [0xab; 32];
        let tags = vec![
            vec!["x".to_string(), "t".to_string()],
            vec!["e".to_string()],
        ];
        assert_eq!(
            id_serialization(&pk, 1_790_000_000, 24_733, &tags, "hi"),
            alloc::format!(
                "[0,\"{}\",1790000000,24733,[[\"x\",\"t\"],[\"e\"]],\"hi\"]",
                "ab".repeat(32)
            )
        );
    }

    #[test]
    fn nip01_named_escapes_are_written_as_named_and_everything_else_verbatim() {
        let text = id_serialization(&[0; 32], 0, 1, &[], "a\n\"\\\r\t\u{8}\u{c}/é😀\u{7f}");
        assert!(
            text.ends_with(",\"a\\n\\\"\\\\\\r\\t\\b\\f/é😀\u{7f}\"]"),
            "{text}"
        );
    }

    #[test]
    fn other_c0_controls_are_written_u00xx_and_either_form_of_id_verifies() {
        let p = default_provider();
        let event = signed("a\u{1}b", vec![]);
        let text = id_serialization(&event.pubkey, event.created_at, event.kind, &[], "a\u{1}b");
        assert!(text.contains("a\\u0001b"), "{text}");
        assert_eq!(event.verify(p), Ok(()));

        // The same event signed over the literal reading of NIP-01 (the raw byte) verifies too.
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let secret = generate_secp256k1(p, &mut rng);
        let mut literal = event.clone();
        literal.pubkey = p.schnorr_public_key(&secret).unwrap();
        let raw = verbatim_serialization(
            &literal.pubkey,
            literal.created_at,
            literal.kind,
            &[],
            "a\u{1}b",
        )
        .unwrap();
        assert!(raw.contains("a\u{1}b"));
        literal.id = p.sha256(&[raw.as_bytes()]);
        literal.sig = p.schnorr_sign(&secret, &literal.id, &[0; 32]).unwrap();
        assert_eq!(literal.verify(p), Ok(()));
        // Without such a character there is one serialization only.
        assert!(verbatim_serialization(&[0; 32], 0, 1, &[], "a\nb").is_none());
    }

    #[test]
    fn a_signed_event_verifies_and_any_changed_field_fails() {
        let p = default_provider();
        let event = signed("AZ3k", vec![vec!["x".into(), "topic".into()]]);
        assert_eq!(event.verify(p), Ok(()));
        assert_eq!(event.id, event.compute_id(p));

        let mut e = event.clone();
        e.content.push('x');
        assert_eq!(e.verify(p), Err(EventError::IdMismatch));
        let mut e = event.clone();
        e.tags[0][1].push('x');
        assert_eq!(e.verify(p), Err(EventError::IdMismatch));
        let mut e = event.clone();
        e.created_at += 1;
        assert_eq!(e.verify(p), Err(EventError::IdMismatch));
        let mut e = event.clone();
        e.sig[5] ^= 1;
        assert_eq!(e.verify(p), Err(EventError::BadSignature));
        // A consistent id over changed content, but the old signature.
        let mut e = event.clone();
        e.content.push('x');
        e.id = e.compute_id(p);
        assert_eq!(e.verify(p), Err(EventError::BadSignature));
    }

    #[test]
    fn an_event_round_trips_through_json() {
        let event = signed("a\"b\\c\n", vec![vec!["x".into(), "t".into()], vec![]]);
        let text = event.to_json();
        assert!(text.starts_with("{\"id\":\""), "{text}");
        assert_eq!(Event::parse(&text), Ok(event.clone()));
        assert_eq!(Event::from_value(&event.to_value()), Ok(event));
    }

    #[test]
    fn parsing_refuses_every_malformed_field_with_its_error() {
        let event = signed("c", vec![]);
        let good = event.to_value();
        let with = |key: &str, v: Value| {
            let mut x = good.clone();
            x[key] = v;
            Event::from_value(&x)
        };
        assert_eq!(
            with("id", Value::from(event.id_hex().to_uppercase())),
            Err(EventError::BadHex("id"))
        );
        assert_eq!(
            with("pubkey", Value::from("ab")),
            Err(EventError::BadHex("pubkey"))
        );
        assert_eq!(
            with("sig", Value::from(1)),
            Err(EventError::BadField("sig"))
        );
        assert_eq!(with("kind", Value::from(65_536)), Err(EventError::BadKind));
        assert_eq!(
            with("kind", Value::from(-1)),
            Err(EventError::BadField("kind"))
        );
        assert_eq!(
            with("created_at", Value::from(1.5)),
            Err(EventError::BadField("created_at"))
        );
        assert_eq!(
            with("content", Value::Null),
            Err(EventError::BadField("content"))
        );
        assert_eq!(
            with("tags", serde_json::json!([["x", 1]])),
            Err(EventError::BadTag)
        );
        assert_eq!(
            with("tags", serde_json::json!(["x"])),
            Err(EventError::BadTag)
        );
        assert_eq!(
            with(
                "tags",
                Value::from(vec![Value::from(vec!["a"; MAX_TAG_FIELDS + 1])])
            ),
            Err(EventError::BadTag)
        );
        assert_eq!(
            with(
                "tags",
                Value::from(vec![Value::Array(vec![]); MAX_TAGS + 1])
            ),
            Err(EventError::TooManyTags)
        );
        assert!(with("tags", Value::from(vec![Value::Array(vec![]); MAX_TAGS])).is_ok());
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("tags");
        assert_eq!(
            Event::from_value(&missing),
            Err(EventError::BadField("tags"))
        );
        // A field NIP-01 does not name is ignored.
        assert_eq!(with("extra", Value::from(1)), Ok(event));
        assert_eq!(Event::parse("[]"), Err(EventError::NotAnObject));
        assert_eq!(Event::parse("{"), Err(EventError::NotJson));
        let big = " ".repeat(MAX_EVENT_BYTES + 1);
        assert_eq!(
            Event::parse(&big),
            Err(EventError::TooLarge {
                bytes: MAX_EVENT_BYTES + 1
            })
        );
    }

    #[test]
    fn tag_value_reads_the_first_tag_of_a_name() {
        let event = signed(
            "c",
            vec![
                vec!["x".into()],
                vec!["x".into(), "1".into()],
                vec!["y".into(), "2".into()],
            ],
        );
        assert_eq!(event.tag("x").map(<[String]>::len), Some(1));
        assert_eq!(event.tag_value("x"), None);
        assert_eq!(event.tag_value("y"), Some("2"));
        assert_eq!(event.tag_value("z"), None);
    }
}
