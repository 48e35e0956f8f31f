//! The rendezvous message (Minca 04 Network §2): its two shapes, the string its `sig` signs, and
//! the seals around it and around an offer's or answer's description.
//!
//! ```text
//! blob    = base64url(sealEnvelope(room key, "minca/rendezvous/v1", { topic }, UTF-8(JSON(message))))
//! message = { "kind": "hello", "at", "from", "box", "sig" }
//!         | { "kind": "offer" | "answer", "at", "from", "box", "to", "sdp", "sig" }
//! sdp     = base64url(sealTo(box of `to`, "minca/rendezvous-signal/v1", { topic, from, to, box },
//!                            UTF-8(JSON(description))))
//! sig     = base64url(ECDSA-P256-SHA256(key of `from`,
//!             "minca/rendezvous-sig/v1|" + topic + "|" + kind + "|" + at + "|" + from + "|" + box
//!             + "|" + to + "|" + sdp))
//! ```
//!
//! A hello signs empty `to` and `sdp`: it has neither (§2 rule 4), and the label joins whatever
//! the message holds. `box` in the description's bound is the sender's own box (§2's last
//! paragraph), so a message re-wrapped with another box opens nothing.

use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value, json};

use crate::codec::object::{self, Text, integer_as_written, plain_run, present};
use crate::codec::{base64url, js};
use crate::crypto::{CryptoProvider, P256Public, P256Secret};
use crate::minca::envelope;

/// The order a message's members are written in (§2's listing, the order the reference builds
/// the object in and so the order `JSON.stringify` writes it): `to` and `sdp` only in an offer
/// or answer. A receiver reads any order; this is what weft writes and what its fast read path
/// expects (`docs/interop.md`, `docs/decisions.md`).
pub const MEMBER_ORDER: [&str; 7] = ["kind", "at", "from", "box", "to", "sdp", "sig"];

/// The label a blob is sealed under the room key with (§2 rule 1).
pub const BLOB_LABEL: &str = "minca/rendezvous/v1";

/// The label a description is sealed to a box with (§2 rule 5).
pub const SIGNAL_LABEL: &str = "minca/rendezvous-signal/v1";

/// The first part of the string a message's `sig` signs (§2).
pub const SIG_LABEL: &str = "minca/rendezvous-sig/v1";

/// The largest `at` read as an integer from a JSON number written with a fraction part or an
/// exponent: JavaScript's `Number.MAX_SAFE_INTEGER`, past which a JavaScript sender's times are no
/// longer exact. Integers written plainly are read up to `u64::MAX`; a time that far off fails the
/// 2-minute check anyway.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The three kinds of message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// "I am in this room" (no `to`, no `sdp`).
    Hello,
    /// A connection offer for `to`.
    Offer,
    /// The answer to `to`'s offer.
    Answer,
}

impl Kind {
    /// The `kind` field's text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Offer => "offer",
            Kind::Answer => "answer",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "hello" => Some(Kind::Hello),
            "offer" => Some(Kind::Offer),
            "answer" => Some(Kind::Answer),
            _ => None,
        }
    }
}

/// A message as it came out of the room-key seal, its fields checked for type only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Which kind.
    pub kind: Kind,
    /// The sender's time, Unix milliseconds.
    pub at: u64,
    /// The sender's session DID.
    pub from: String,
    /// The sender's box, base64url of a compressed P-256 point (not yet checked to be one).
    pub box_: String,
    /// `to` and `sdp`, when the message carries them (a hello must not, §2 rule 4).
    pub signal: Option<(String, String)>,
    /// Whether only one of `to` and `sdp` was present (never valid).
    pub half_signal: bool,
    /// The signature, base64url.
    pub sig: String,
}

/// Why a message's fields did not have the shape of §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// Not a JSON object (§2 rule 1).
    NotObject,
    /// `kind`, `from`, `box`, `sig`, `to` or `sdp` missing where needed, or not a string, or a
    /// `kind` that is none of the three.
    Fields,
    /// `at` is not a non-negative integer (§2 rule 3).
    At,
}

fn string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, ShapeError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ShapeError::Fields),
    }
}

fn at(value: Option<&Value>) -> Result<u64, ShapeError> {
    let n = match value {
        Some(Value::Number(n)) => n,
        _ => return Err(ShapeError::At),
    };
    if let Some(v) = n.as_u64() {
        return Ok(v);
    }
    // `1790000000000.0` is the same JavaScript number as `1790000000000`, and signs as such.
    match n.as_f64() {
        // Within 0..=2^53 a float survives the round trip through u64 exactly when it is an
        // integer (`f64::trunc` needs std).
        Some(f) if (0.0..=MAX_SAFE_INTEGER).contains(&f) && f == (f as u64) as f64 => Ok(f as u64),
        _ => Err(ShapeError::At),
    }
}

impl Message {
    /// Reads a message from the plaintext of a room-key seal (UTF-8 JSON).
    pub fn parse(plaintext: &[u8]) -> Result<Self, ShapeError> {
        match MessageRef::as_written(plaintext) {
            Some(m) => Ok(m.to_message()),
            None => Self::parse_general(plaintext),
        }
    }

    /// [`Message::parse`] for a text [`MessageRef::as_written`] did not read.
    pub(crate) fn parse_general(plaintext: &[u8]) -> Result<Self, ShapeError> {
        match Self::from_text_common(plaintext) {
            Some(m) => Ok(m),
            None => Self::parse_tree(plaintext),
        }
    }

    /// [`Message::parse`] for a message exactly as [`Message::to_json_text`] writes it, read by
    /// position; `None` for any other text. Public so that a fuzz target can hold it to the
    /// answer of the other paths.
    pub fn from_text_as_written(plaintext: &[u8]) -> Option<Self> {
        MessageRef::as_written(plaintext).map(MessageRef::to_message)
    }

    /// The message's fields, borrowed.
    pub(crate) fn view(&self) -> MessageRef<'_> {
        MessageRef {
            kind: self.kind,
            at: self.at,
            from: &self.from,
            box_: &self.box_,
            signal: self
                .signal
                .as_ref()
                .map(|(to, sdp)| (to.as_str(), sdp.as_str())),
            half_signal: self.half_signal,
            sig: &self.sig,
        }
    }

    /// [`Message::parse`] for a plainly well-shaped message, read straight from the text without
    /// the JSON tree [`Message::parse_tree`] reads. `None` for any text this path could read
    /// differently from the general one (a field given twice, a float `at`, an unknown field,
    /// anything not an object, any error), so that path decides those, with its own errors.
    /// [`Message::parse`] is the way to read a message; this is public so that a fuzz target can
    /// hold the two paths to the same answer.
    pub fn from_text_common(plaintext: &[u8]) -> Option<Self> {
        // Unknown fields are refused, not skipped: serde skips them without the checks a JSON
        // tree makes (nesting depth, numbers in range, escapes naming characters, UTF-8).
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire<'a> {
            #[serde(borrow)]
            kind: Text<'a>,
            at: u64,
            #[serde(borrow)]
            from: Text<'a>,
            #[serde(borrow, rename = "box")]
            box_: Text<'a>,
            #[serde(borrow)]
            sig: Text<'a>,
            #[serde(borrow, default, deserialize_with = "present")]
            to: Option<Text<'a>>,
            #[serde(borrow, default, deserialize_with = "present")]
            sdp: Option<Text<'a>>,
        }
        let w: Wire<'_> = object::read(plaintext)?;
        Some(Self::from_fields(
            Kind::parse(&w.kind.0)?,
            w.at,
            w.from.0.into_owned(),
            w.box_.0.into_owned(),
            w.to.map(|t| t.0.into_owned()),
            w.sdp.map(|t| t.0.into_owned()),
            w.sig.0.into_owned(),
        ))
    }

    /// [`Message::parse`] without its fast path: every message read through a JSON tree. Public
    /// for the fuzz target that compares the two paths.
    pub fn parse_tree(plaintext: &[u8]) -> Result<Self, ShapeError> {
        let value: Value = serde_json::from_slice(plaintext).map_err(|_| ShapeError::NotObject)?;
        let Value::Object(obj) = value else {
            return Err(ShapeError::NotObject);
        };
        let kind = string(&obj, "kind")?
            .as_deref()
            .and_then(Kind::parse)
            .ok_or(ShapeError::Fields)?;
        let from = string(&obj, "from")?.ok_or(ShapeError::Fields)?;
        let box_ = string(&obj, "box")?.ok_or(ShapeError::Fields)?;
        let sig = string(&obj, "sig")?.ok_or(ShapeError::Fields)?;
        let to = string(&obj, "to")?;
        let sdp = string(&obj, "sdp")?;
        let at = at(obj.get("at"))?;
        Ok(Self::from_fields(kind, at, from, box_, to, sdp, sig))
    }

    /// A message of fields read and type-checked, by either path.
    fn from_fields(
        kind: Kind,
        at: u64,
        from: String,
        box_: String,
        to: Option<String>,
        sdp: Option<String>,
        sig: String,
    ) -> Self {
        let half_signal = to.is_some() != sdp.is_some();
        let signal = to.zip(sdp);
        Self {
            kind,
            at,
            from,
            box_,
            signal,
            half_signal,
            sig,
        }
    }

    /// The string `sig` signs, for this message under `topic`.
    pub fn signed_text(&self, topic: &str) -> String {
        self.view().signed_text(topic)
    }

    /// The message as a JSON object. A [`Map`] iterates its keys sorted, so its text is not what
    /// a sender writes: that is [`Message::to_json_text`], members in [`MEMBER_ORDER`].
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("kind".into(), Value::from(self.kind.as_str()));
        obj.insert("at".into(), Value::from(self.at));
        obj.insert("from".into(), Value::from(self.from.as_str()));
        obj.insert("box".into(), Value::from(self.box_.as_str()));
        if let Some((to, sdp)) = &self.signal {
            obj.insert("to".into(), Value::from(to.as_str()));
            obj.insert("sdp".into(), Value::from(sdp.as_str()));
        }
        obj.insert("sig".into(), Value::from(self.sig.as_str()));
        Value::Object(obj)
    }

    /// The text a blob seals: what JavaScript's `JSON.stringify` writes for the message object
    /// the reference builds, members in the order §2 lists them ([`MEMBER_ORDER`]: `kind`, `at`,
    /// `from`, `box`, then `to` and `sdp` when present, `sig` last), no whitespace, strings quoted
    /// as `JSON.stringify` quotes them. Written straight from the fields (no JSON object built
    /// first, since a [`Map`] keeps its keys sorted) and without visiting them a character at a
    /// time: every field but `kind` and `at` is text that is nearly always plain (base64url, a
    /// DID), copied whole when it needs no escape.
    pub fn to_json_text(&self) -> String {
        let mut digits = [0u8; 20];
        let at = decimal(self.at, &mut digits);
        let (to, sdp) = match &self.signal {
            Some((to, sdp)) => (Some(to.as_str()), Some(sdp.as_str())),
            None => (None, None),
        };
        let members = [
            ("from", Some(self.from.as_str())),
            ("box", Some(self.box_.as_str())),
            ("to", to),
            ("sdp", sdp),
            ("sig", Some(self.sig.as_str())),
        ];
        let chars: usize = members
            .iter()
            .filter_map(|(k, v)| v.map(|v| k.len() + v.len() + 6))
            .sum();
        let mut text = String::with_capacity(chars + at.len() + 24);
        text.push_str("{\"kind\":\"");
        text.push_str(self.kind.as_str());
        text.push_str("\",\"at\":");
        text.push_str(at);
        for (key, value) in members {
            if let Some(value) = value {
                text.push_str(",\"");
                text.push_str(key);
                text.push_str("\":");
                write_plain_or_quoted(&mut text, value);
            }
        }
        text.push('}');
        text
    }
}

/// A message's fields borrowed from the text they were read from ([`MessageRef::as_written`]) or
/// from a [`Message`] ([`Message::view`]): the receiver checks one and acts on it, and makes owned
/// text only of what it hands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MessageRef<'a> {
    /// See [`Message::kind`].
    pub kind: Kind,
    /// See [`Message::at`].
    pub at: u64,
    /// See [`Message::from`].
    pub from: &'a str,
    /// See [`Message::box_`].
    pub box_: &'a str,
    /// See [`Message::signal`].
    pub signal: Option<(&'a str, &'a str)>,
    /// See [`Message::half_signal`].
    pub half_signal: bool,
    /// See [`Message::sig`].
    pub sig: &'a str,
}

impl<'a> MessageRef<'a> {
    /// A message exactly as [`Message::to_json_text`] writes it (members in [`MEMBER_ORDER`], no
    /// space), which is also what a JavaScript peer building the object in §2's order writes,
    /// read by position with no JSON parser, as
    /// `relay_wire`'s `mail_as_written` reads a relay's mail: every received message is one, and
    /// a parser looks at each byte of its `sdp` and `sig` for escapes and copies each string. A
    /// string here must be plain ASCII ([`plain_run`]: no `\`, no control character), so it ends
    /// at the first `"` and is the text a JSON parser would read; any other text, spelling or
    /// number is `None`, left to [`Message::parse_general`], which gives the answer or error.
    pub(crate) fn as_written(plaintext: &'a [u8]) -> Option<Self> {
        let text = core::str::from_utf8(plaintext).ok()?;
        let (kind, rest) = first_member(text, "kind")?;
        let (at, rest) = integer_as_written(rest.strip_prefix(r#","at":"#)?)?;
        let (from, rest) = member(rest, "from")?;
        let (box_, rest) = member(rest, "box")?;
        let (to, rest) = optional_member(rest, "to")?;
        let (sdp, rest) = optional_member(rest, "sdp")?;
        let (sig, rest) = member(rest, "sig")?;
        if rest != "}" {
            return None;
        }
        Some(Self {
            kind: Kind::parse(kind)?,
            at,
            from,
            box_,
            signal: to.zip(sdp),
            half_signal: to.is_some() != sdp.is_some(),
            sig,
        })
    }

    /// The message, owned.
    pub(crate) fn to_message(self) -> Message {
        Message {
            kind: self.kind,
            at: self.at,
            from: self.from.into(),
            box_: self.box_.into(),
            signal: self.signal.map(|(to, sdp)| (to.into(), sdp.into())),
            half_signal: self.half_signal,
            sig: self.sig.into(),
        }
    }

    /// The string `sig` signs, for this message under `topic`.
    pub(crate) fn signed_text(&self, topic: &str) -> String {
        let (to, sdp) = self.signal.unwrap_or(("", ""));
        signed_text(topic, self.kind, self.at, self.from, self.box_, to, sdp)
    }
}

/// `,"key":"value"` at the start of `text`, with a value of plain ASCII (no escape, no control
/// character: see [`plain_run`]): the value and the text after its closing quote.
fn member<'t>(text: &'t str, key: &str) -> Option<(&'t str, &'t str)> {
    member_after(text.strip_prefix(',')?, key)
}

/// [`member`] for the object's first member: `{"key":"value"` at the start of `text`.
fn first_member<'t>(text: &'t str, key: &str) -> Option<(&'t str, &'t str)> {
    member_after(text.strip_prefix('{')?, key)
}

/// `"key":"value"` at the start of `text`, as [`member`] reads it.
fn member_after<'t>(text: &'t str, key: &str) -> Option<(&'t str, &'t str)> {
    let rest = text.strip_prefix('"')?.strip_prefix(key)?;
    let rest = rest.strip_prefix("\":\"")?;
    let end = plain_run(rest.as_bytes());
    if rest.as_bytes().get(end) != Some(&b'"') {
        return None;
    }
    // `end` is at an ASCII quote, so both sides are whole characters.
    Some((rest.get(..end)?, rest.get(end + 1..)?))
}

/// [`member`] for a member that may be absent: `None` only when it is there but not as written.
fn optional_member<'t>(text: &'t str, key: &str) -> Option<(Option<&'t str>, &'t str)> {
    let there = text
        .strip_prefix(",\"")
        .and_then(|r| r.strip_prefix(key))
        .is_some_and(|r| r.starts_with('"'));
    if !there {
        return Some((None, text));
    }
    let (value, rest) = member(text, key)?;
    Some((Some(value), rest))
}

/// `"minca/rendezvous-sig/v1|" + topic + "|" + kind + "|" + at + "|" + from + "|" + box + "|" +
/// to + "|" + sdp` (§2).
pub fn signed_text(
    topic: &str,
    kind: Kind,
    at: u64,
    from: &str,
    box_: &str,
    to: &str,
    sdp: &str,
) -> String {
    // Written into one buffer of the exact size: every received message is checked against it.
    let mut digits = [0u8; 20];
    let at = decimal(at, &mut digits);
    let parts = [SIG_LABEL, topic, kind.as_str(), at, from, box_, to, sdp];
    let mut text = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            text.push('|');
        }
        text.push_str(part);
    }
    text
}

/// `s` as a JSON string: copied between quotes when nothing in it is escaped (no `"`, `\\` or
/// control character), else as [`js::stringify`] quotes it.
fn write_plain_or_quoted(text: &mut String, s: &str) {
    if needs_no_escape(s) {
        text.push('"');
        text.push_str(s);
        text.push('"');
    } else {
        text.push_str(&js::stringify(&Value::from(s)));
    }
}

/// `n` in decimal, written at the end of `buf` (20 digits hold any `u64`).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    core::str::from_utf8(&buf[start..]).unwrap_or_default()
}

/// The bound a description is sealed with: `{ topic, from, to, box }`, `box` the sender's.
pub fn signal_bound(topic: &str, from: &str, to: &str, sender_box: &str) -> Value {
    json!({ "topic": topic, "from": from, "to": to, "box": sender_box })
}

/// The associated data a description is sealed with: [`envelope::aad`] of [`SIGNAL_LABEL`] and
/// [`signal_bound`], written straight out when no field needs an escape (DIDs and base64url never
/// do), as canonical JSON writes it: members in code-point order, each string between quotes.
pub fn signal_aad(topic: &str, from: &str, to: &str, sender_box: &str) -> Vec<u8> {
    let members = [
        ("box", sender_box),
        ("from", from),
        ("to", to),
        ("topic", topic),
    ];
    if !members.iter().all(|(_, v)| needs_no_escape(v)) {
        return envelope::aad(SIGNAL_LABEL, &signal_bound(topic, from, to, sender_box));
    }
    let chars: usize = members.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
    let mut bound = Vec::with_capacity(chars + 1);
    for (i, (key, value)) in members.iter().enumerate() {
        bound.extend_from_slice(if i == 0 { b"{\"" } else { b",\"" });
        bound.extend_from_slice(key.as_bytes());
        bound.extend_from_slice(b"\":\"");
        bound.extend_from_slice(value.as_bytes());
        bound.push(b'"');
    }
    bound.push(b'}');
    envelope::aad_written(SIGNAL_LABEL, &bound)
}

/// Whether `s` is written in JSON as itself between quotes: no `"`, `\\` or control character.
fn needs_no_escape(s: &str) -> bool {
    // Eight bytes at a time over the plain ASCII that nearly every field is (an `sdp` is most of
    // a message); what stops that scan short is looked at byte by byte.
    let bytes = s.as_bytes();
    bytes
        .get(plain_run(bytes)..)
        .unwrap_or_default()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// The bound a blob is sealed with: `{ topic }`.
pub fn blob_bound(topic: &str) -> Value {
    json!({ "topic": topic })
}

/// `base64url(sealEnvelope(room key, "minca/rendezvous/v1", { topic }, UTF-8(JSON(message))))`
/// for any JSON value (a message of any shape, for tests); [`seal_message`] for a [`Message`].
pub fn seal_blob(
    crypto: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    room_key: &[u8; 32],
    topic: &str,
    message: &Value,
) -> String {
    seal_text(
        crypto,
        rng,
        room_key,
        &blob_aad(topic),
        &js::stringify(message),
    )
}

/// [`seal_blob`] of `message.to_json()`, written by [`Message::to_json_text`], under the topic's
/// [`blob_aad`] (which a room writes once).
pub fn seal_message(
    crypto: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    room_key: &[u8; 32],
    aad: &[u8],
    message: &Message,
) -> String {
    seal_text(crypto, rng, room_key, aad, &message.to_json_text())
}

/// Seals a message's JSON text as a blob.
fn seal_text(
    crypto: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    room_key: &[u8; 32],
    aad: &[u8],
    json: &str,
) -> String {
    base64url::encode(&envelope::seal_bound(
        crypto,
        rng,
        room_key,
        aad,
        json.as_bytes(),
    ))
}

/// Opens a blob under the room key: `None` when it is not base64url or does not open (§2 rule 1).
pub fn open_blob(
    crypto: &dyn CryptoProvider,
    room_key: &[u8; 32],
    topic: &str,
    blob: &str,
) -> Option<Vec<u8>> {
    open_blob_bound(crypto, room_key, &blob_aad(topic), blob)
}

/// The associated data every blob under `topic` is sealed with, for [`open_blob_bound`]: a room
/// writes it once, not once per blob.
pub fn blob_aad(topic: &str) -> Vec<u8> {
    envelope::aad(BLOB_LABEL, &blob_bound(topic))
}

/// [`open_blob`] with the topic's [`blob_aad`].
pub fn open_blob_bound(
    crypto: &dyn CryptoProvider,
    room_key: &[u8; 32],
    aad: &[u8],
    blob: &str,
) -> Option<Vec<u8>> {
    open_blob_bytes(crypto, room_key, aad, &base64url::decode(blob).ok()?)
}

/// [`open_blob_bound`] of a blob already decoded from base64url.
pub fn open_blob_bytes(
    crypto: &dyn CryptoProvider,
    room_key: &[u8; 32],
    aad: &[u8],
    bytes: &[u8],
) -> Option<Vec<u8>> {
    envelope::open_bound(crypto, room_key, aad, bytes).ok()
}

/// `base64url(sealTo(recipient, "minca/rendezvous-signal/v1", { topic, from, to, box },
/// UTF-8(JSON(description))))`, the bound written by [`signal_aad`]; `None` when `recipient` is
/// not a P-256 point.
pub fn seal_description(
    crypto: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    recipient: &P256Public,
    aad: &[u8],
    description: &Value,
) -> Option<String> {
    let plaintext = description_text(description).into_bytes();
    envelope::seal_to_bound(crypto, rng, recipient, SIGNAL_LABEL, aad, &plaintext)
        .map(|s| base64url::encode(&s))
}

/// The order a description's members are written in: a browser's `RTCSessionDescription`
/// (`toJSON`) gives `{type, sdp}`, and `JSON.stringify` keeps that order.
pub const DESCRIPTION_ORDER: [&str; 2] = ["type", "sdp"];

/// `JSON(description)` (§2) as a browser writes it: `type`, then `sdp`, then any other member in
/// the order `JSON.stringify` gives them; any value that is not an object as
/// [`js::stringify`] writes it.
pub fn description_text(description: &Value) -> String {
    let Value::Object(members) = description else {
        return js::stringify(description);
    };
    let mut rest = members.clone();
    let mut text = String::from("{");
    for key in DESCRIPTION_ORDER {
        if let Some(value) = rest.remove(key) {
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(&js::stringify(&Value::from(key)));
            text.push(':');
            text.push_str(&js::stringify(&value));
        }
    }
    let others = js::stringify(&Value::Object(rest));
    let others = &others[1..others.len() - 1];
    if !others.is_empty() {
        if text.len() > 1 {
            text.push(',');
        }
        text.push_str(others);
    }
    text.push('}');
    text
}

/// Opens an `sdp` with this node's box (its secret and public half) under the bound written by
/// [`signal_aad`], and reads the description as JSON (§2 rule 5).
pub fn open_description(
    crypto: &dyn CryptoProvider,
    box_secret: &P256Secret,
    own_box: &P256Public,
    aad: &[u8],
    sdp: &str,
) -> Option<Value> {
    let bytes = base64url::decode(sdp).ok()?;
    let plaintext =
        envelope::open_to_bound(crypto, box_secret, own_box, SIGNAL_LABEL, aad, &bytes).ok()?;
    serde_json::from_slice(&plaintext).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{format, vec};

    /// Where a fast path (by position, or serde without a tree) answers, the tree gives the same
    /// message, and `parse` always answers as the tree; returns whether `from_text_common`
    /// answered.
    fn agrees(text: &str) -> bool {
        agrees_bytes(text.as_bytes()).1
    }

    /// [`agrees`] for any bytes; returns whether each fast path (by position, serde) answered.
    fn agrees_bytes(bytes: &[u8]) -> (bool, bool) {
        let tree = Message::parse_tree(bytes);
        let by_position = Message::from_text_as_written(bytes);
        if let Some(m) = &by_position {
            assert_eq!(tree.as_ref(), Ok(m), "{bytes:?}");
            assert_eq!(MessageRef::as_written(bytes), Some(m.view()));
        }
        let fast = Message::from_text_common(bytes);
        if let Some(m) = &fast {
            assert_eq!(tree.as_ref(), Ok(m), "{bytes:?}");
        }
        assert_eq!(Message::parse(bytes), tree, "{bytes:?}");
        assert_eq!(Message::parse_general(bytes), tree, "{bytes:?}");
        (by_position.is_some(), fast.is_some())
    }

    #[test]
    fn a_message_as_written_reads_by_position_as_the_tree_reads_it() {
        let offer = Message {
            kind: Kind::Offer,
            at: 1_790_000_000_000,
            from: "did:key:zDnaeA".into(),
            box_: "Ax-_".into(),
            signal: Some(("did:key:zDnaeB".into(), "c2Rw".into())),
            half_signal: false,
            sig: "c2ln".into(),
        };
        let hello = Message {
            kind: Kind::Hello,
            at: 5,
            signal: None,
            ..offer.clone()
        };
        let answer = Message {
            kind: Kind::Answer,
            at: 0,
            ..offer.clone()
        };
        let mut messages = vec![offer.clone(), hello.clone(), answer];
        // Strings a parser reads differently from their text, or refuses.
        for odd in [
            "",
            "\"",
            "a\\b",
            "\u{1}\n",
            "\u{7f}\u{2028}é😀",
            "\u{0}",
            "}",
            ",",
        ] {
            for field in 0..5 {
                let mut m = offer.clone();
                let text = format!("x{odd}y");
                match field {
                    0 => m.from = text,
                    1 => m.box_ = text,
                    2 => m.sig = text,
                    3 => m.signal = Some((text, "c2Rw".into())),
                    _ => m.signal = Some(("did:key:zDnaeB".into(), text)),
                }
                messages.push(m);
            }
        }
        for at in [1, 9, 10, 1 << 53, u64::MAX] {
            messages.push(Message {
                at,
                ..hello.clone()
            });
        }
        let mut texts: Vec<String> = Vec::new();
        let mut written = 0;
        for m in &messages {
            let text = m.to_json_text();
            let (by_position, _) = agrees_bytes(text.as_bytes());
            written += usize::from(by_position);
            // Every cut, every byte dropped or doubled, and escapes where a plain byte was.
            for i in 0..=text.len() {
                if !text.is_char_boundary(i) {
                    continue;
                }
                let (head, tail) = text.split_at(i);
                texts.push(head.into());
                let mut chars = tail.chars();
                if let Some(c) = chars.next() {
                    texts.push(format!("{head}{}", chars.as_str()));
                    texts.push(format!("{head}{c}{tail}"));
                    texts.push(format!(
                        "{head}\\u{:04x}{}",
                        u32::from(c) & 0xffff,
                        chars.as_str()
                    ));
                    texts.push(format!("{head} {tail}"));
                }
            }
            // Members given twice, extra members, half signals, other kinds and numbers.
            let body = &text[1..];
            texts.push(format!(r#"{{"at":6,{body}"#));
            texts.push(format!(r#"{{"kind":"hello",{body}"#));
            texts.push(text.replacen("}", r#","to":"did:key:zC"}"#, 1));
            texts.push(text.replacen("}", r#","x":1}"#, 1));
            texts.push(text.replacen(r#","sdp":"c2Rw""#, "", 1));
            texts.push(text.replacen(r#","to":"did:key:zDnaeB""#, "", 1));
            texts.push(text.replacen(r#""sig":"#, r#""sdp":"c2Rw","sig":"#, 1));
            texts.push(text.replacen(r#""sig":"c2ln""#, r#""sig":"c2ln","to":"t""#, 1));
            texts.push(text.replacen(r#""offer""#, r#""Offer""#, 1));
            texts.push(text.replacen(r#""hello""#, r#""hi""#, 1));
            let (head, after_at) = text.split_once(r#","at":"#).unwrap_or_default();
            let after_number = after_at.split_once(',').map_or("", |(_, r)| r);
            for at in [
                "-1",
                "01",
                "5.0",
                "5e0",
                "18446744073709551616",
                "null",
                r#""5""#,
            ] {
                texts.push(format!(r#"{head},"at":{at},{after_number}"#));
            }
        }
        assert!(written >= 8, "{written}");
        for text in &texts {
            agrees_bytes(text.as_bytes());
        }
        // Not UTF-8, inside a string and outside one.
        let text = hello.to_json_text().into_bytes();
        for i in 0..text.len() {
            let mut bytes = text.clone();
            bytes[i] = 0xff;
            agrees_bytes(&bytes);
        }
    }

    #[test]
    fn the_signal_aad_is_the_bound_written_canonically() {
        let plain = ["did:key:zDnaeA", "Ax-_", "", "t0pic", "é😀\u{7f}"];
        let odd = ["\"", "a\\b", "\u{1}\n", "\u{1f}x"];
        for &a in plain.iter().chain(&odd) {
            for &b in plain.iter().chain(&odd) {
                for (topic, from, to, sender_box) in
                    [(a, b, "to", "bx"), ("t", a, b, "bx"), ("t", "f", a, b)]
                {
                    let want =
                        envelope::aad(SIGNAL_LABEL, &signal_bound(topic, from, to, sender_box));
                    assert_eq!(signal_aad(topic, from, to, sender_box), want);
                }
            }
        }
    }

    #[test]
    fn the_signed_text_joins_the_fields_with_bars() {
        for at in [0, 7, 10, 1_790_000_000_000, u64::MAX] {
            assert_eq!(
                signed_text(
                    "t",
                    Kind::Offer,
                    at,
                    "did:key:zA",
                    "Ax",
                    "did:key:zB",
                    "c2Rw"
                ),
                format!("{SIG_LABEL}|t|offer|{at}|did:key:zA|Ax|did:key:zB|c2Rw")
            );
        }
        assert_eq!(
            signed_text("", Kind::Hello, 5, "", "", "", ""),
            "minca/rendezvous-sig/v1||hello|5||||"
        );
    }

    /// What `JSON.stringify` writes for the object built member by member in [`MEMBER_ORDER`],
    /// each value quoted by [`js::stringify`]: the text [`Message::to_json_text`] must give.
    fn stringify_in_member_order(m: &Message) -> String {
        let json = m.to_json();
        let members: Vec<String> = MEMBER_ORDER
            .iter()
            .filter_map(|key| {
                let value = json.get(*key)?;
                Some(format!(
                    "{}:{}",
                    js::stringify(&Value::from(*key)),
                    js::stringify(value)
                ))
            })
            .collect();
        format!("{{{}}}", members.join(","))
    }

    #[test]
    fn a_message_is_written_in_the_order_section_2_lists_its_members() {
        let hello = Message {
            kind: Kind::Hello,
            at: 1_790_000_000_000,
            from: "did:key:zA".into(),
            box_: "Ax-_".into(),
            signal: None,
            half_signal: false,
            sig: "c2ln".into(),
        };
        assert_eq!(
            hello.to_json_text(),
            r#"{"kind":"hello","at":1790000000000,"from":"did:key:zA","box":"Ax-_","sig":"c2ln"}"#
        );
        let offer = Message {
            kind: Kind::Offer,
            signal: Some(("did:key:zB".into(), "c2Rw".into())),
            ..hello
        };
        assert_eq!(
            offer.to_json_text(),
            r#"{"kind":"offer","at":1790000000000,"from":"did:key:zA","box":"Ax-_","to":"did:key:zB","sdp":"c2Rw","sig":"c2ln"}"#
        );
        // Written so, a message is read by position; the sorted spelling only by the general path.
        let sorted = js::stringify(&offer.to_json());
        assert!(sorted.starts_with(r#"{"at":"#));
        assert_eq!(Message::from_text_as_written(sorted.as_bytes()), None);
        assert_eq!(Message::parse(sorted.as_bytes()), Ok(offer.clone()));
        assert_eq!(
            Message::from_text_as_written(offer.to_json_text().as_bytes()),
            Some(offer)
        );
    }

    #[test]
    fn a_description_is_written_type_first_as_a_browser_writes_it() {
        assert_eq!(
            description_text(&json!({"sdp": "v=0\r\n", "type": "offer"})),
            r#"{"type":"offer","sdp":"v=0\r\n"}"#
        );
        assert_eq!(
            description_text(&json!({"sdp": "x", "type": "answer", "a": [1], "z": null})),
            r#"{"type":"answer","sdp":"x","a":[1],"z":null}"#
        );
        assert_eq!(
            description_text(&json!({"a": 1})),
            js::stringify(&json!({"a": 1}))
        );
        assert_eq!(description_text(&json!({})), "{}");
        assert_eq!(description_text(&json!({"sdp": "s"})), r#"{"sdp":"s"}"#);
        assert_eq!(description_text(&json!("v=0")), r#""v=0""#);
        for d in [
            json!({"type": "offer", "sdp": "v=0\u{1}\"é"}),
            json!({"x": {"b": 1, "a": 2}, "type": 5}),
        ] {
            let back: Value = serde_json::from_str(&description_text(&d)).unwrap();
            assert_eq!(back, d);
        }
    }

    #[test]
    fn a_messages_json_text_is_what_stringify_writes() {
        let mut m = Message {
            kind: Kind::Offer,
            at: 1_790_000_000_000,
            from: "did:key:zA".into(),
            box_: "Ax-_".into(),
            signal: Some(("did:key:zB".into(), "c2Rw".into())),
            half_signal: false,
            sig: "c2ln".into(),
        };
        let check = |m: &Message| assert_eq!(m.to_json_text(), stringify_in_member_order(m));
        check(&m);
        for odd in [
            "",
            "\"",
            "a\\b",
            "\u{1}\n\t\u{1f}",
            "/\u{7f}\u{2028}é😀",
            "9",
        ] {
            m.from = odd.into();
            m.sig = format!("{odd}x");
            check(&m);
        }
        for at in [0, 9, u64::MAX] {
            m.at = at;
            m.kind = Kind::Hello;
            m.signal = None;
            check(&m);
        }
    }

    #[test]
    fn the_fast_path_answers_as_the_general_path_or_not_at_all() {
        let offer = r#"{"kind":"offer","at":1790000000000,"from":"did:key:zA","box":"Ax","to":"did:key:zB","sdp":"c2Rw","sig":"c2ln"}"#;
        let hello = r#"{"kind":"hello","at":5,"from":"did:key:zA","box":"Ax","sig":"c2ln"}"#;
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut texts: Vec<String> = Vec::new();
        for base in [offer, hello] {
            let mut edit = |from: &str, to: &str| texts.push(base.replacen(from, to, 1));
            edit("", "");
            // Duplicate keys, plain and escaped.
            edit("{", r#"{"kind":"answer","#);
            edit("{", r#"{"\u006bind":"answer","#);
            edit("{", r#"{"at":6,"#);
            edit("{", r#"{"to":"did:key:zC","#);
            // Escapes in keys and values.
            edit(r#""from""#, r#""fr\u006fm""#);
            edit("did:key:zA", r"did:key:z\u0041\n");
            edit("did:key:zA", r"\ud800");
            // Numbers.
            for at in [
                "5.0",
                "1790000000000.0",
                "-1",
                "-0",
                "1e3",
                "18446744073709551615",
                "18446744073709551616",
                "1e400",
                "null",
                r#""5""#,
            ] {
                let old = if base == offer { "1790000000000" } else { "5" };
                edit(&format!(r#""at":{old}"#), &format!(r#""at":{at}"#));
            }
            // Missing, null, wrong types, extra fields and junk.
            edit(r#""sig":"c2ln""#, r#""sig":null"#);
            edit(r#","sig":"c2ln""#, "");
            edit(r#""kind":"#, r#""to":null,"kind":"#);
            edit(r#""kind":"#, r#""sdp":"x","kind":"#);
            edit(r#""kind":"#, r#""sdp":7,"kind":"#);
            edit(r#""box":"Ax""#, r#""box":["Ax"]"#);
            edit(r#""kind":"offer""#, r#""kind":"Offer""#);
            for junk in ["{\"a\":[1]}", r#""\ud800""#, "1e400", deep.as_str()] {
                edit("{", &format!(r#"{{"extra":{junk},"#));
            }
            texts.push(format!("[{base}]"));
            texts.push(format!("{base} x"));
        }
        texts.push(r#"["hello",5,"did:key:zA","Ax","c2ln"]"#.into());
        let fast = texts.iter().filter(|t| agrees(t)).count();
        assert!(agrees(offer) && agrees(hello));
        // The plain messages, escaped fields and the half signal still read fast.
        assert!(fast >= 8, "{fast}");
    }
}
