//! What the oracle reads of a mesh frame a node sends (§7.1): its room and type, and for a
//! `__signal` the origin, target and `at` of its payload, read in one pass without building a
//! JSON tree.
//!
//! The oracle reads every frame sent, so this is on the simulator's hottest path. The meaning is
//! serde_json's: whatever [`Sent`]'s `Deserialize` makes of the bytes, or nothing when serde_json
//! refuses them (then the oracle checks nothing, as a peer drops the frame unread). [`fast`]
//! gives the same answer for the frames the machines write (compact, ASCII strings without
//! escapes) without serde's per-token work, and leaves every other text to serde_json: the
//! oracle's verdict is serde_json's on any bytes, whatever order the members come in.

mod fast;

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;

/// What the oracle reads of a mesh frame a node sends (§7.1); see the [module docs](self).
#[derive(Debug, PartialEq, Eq, Deserialize)]
pub(super) struct Sent<'a> {
    /// The room.
    #[serde(borrow)]
    pub(super) room: Cow<'a, str>,
    /// The type.
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    /// What names a `__signal`; empty for a payload of any other shape.
    #[serde(borrow, default)]
    pub(super) payload: SignalName<'a>,
}

impl<'a> Sent<'a> {
    /// What the oracle reads of `bytes`, or `None` when serde_json refuses them as a [`Sent`].
    pub(super) fn read(bytes: &'a [u8]) -> Option<Self> {
        fast::read(bytes).or_else(|| serde_json::from_slice(bytes).ok())
    }
}

/// What names a `__signal` (§8): its origin, target and `at`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SignalName<'a> {
    /// The payload's `origin`, when a string.
    pub(super) origin: Cow<'a, str>,
    /// The payload's `target`, when a string.
    pub(super) target: Cow<'a, str>,
    /// The payload's `at`, when an integer a `u64` holds.
    pub(super) at: u64,
}

/// Reads `origin`, `target` and `at` from an object payload and takes any other payload (the
/// array of `__peers`, a `who`'s object, a live message) as naming nothing, so that the frame is
/// read once whatever its type and the admission check never skips a frame over its payload.
impl<'de: 'a, 'a> Deserialize<'de> for SignalName<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match d.deserialize_any(PeekVisitor)? {
            Peek::Object(name) => name,
            _ => SignalName::default(),
        })
    }
}

/// A JSON value as the oracle's peek sees it: the strings and integers a signal is named by,
/// the names inside an object, and nothing of anything else.
enum Peek<'a> {
    Str(Cow<'a, str>),
    U64(u64),
    Object(SignalName<'a>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Peek<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PeekVisitor)
    }
}

struct PeekVisitor;

impl<'de> serde::de::Visitor<'de> for PeekVisitor {
    type Value = Peek<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Peek<'de>, M::Error> {
        let mut name = SignalName::default();
        while let Some(key) = m.next_key::<Peek<'de>>()? {
            let Peek::Str(key) = key else {
                m.next_value::<serde::de::IgnoredAny>()?;
                continue;
            };
            match (&*key, m.next_value::<Peek<'de>>()?) {
                ("origin", Peek::Str(v)) => name.origin = v,
                ("target", Peek::Str(v)) => name.target = v,
                ("at", Peek::U64(v)) => name.at = v,
                _ => {}
            }
        }
        Ok(Peek::Object(name))
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut s: S) -> Result<Peek<'de>, S::Error> {
        while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Peek::Other)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Peek<'de>, E> {
        Ok(Peek::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Peek<'de>, E> {
        Ok(Peek::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Peek<'de>, E> {
        Ok(Peek::U64(v))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Peek<'de>, E> {
        Ok(Peek::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Peek<'de>, E> {
        Ok(Peek::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Peek<'de>, E> {
        Ok(Peek::Other)
    }

    fn visit_unit<E>(self) -> Result<Peek<'de>, E> {
        Ok(Peek::Other)
    }
}

#[cfg(test)]
mod tests {
    use rand_core::Rng as _;
    use serde_json::json;
    use weft_proto::minca::mesh::frame::{AUTH_HELLO, Frame, PEERS, SIGNAL};

    use super::*;
    use serde_json::Value;

    /// serde_json's reading, the meaning the fast path must keep.
    fn plain(bytes: &[u8]) -> Option<Sent<'_>> {
        serde_json::from_slice(bytes).ok()
    }

    /// The fast path answers only as serde_json does.
    fn agrees(bytes: &[u8]) -> bool {
        let fast = fast::read(bytes);
        assert!(
            fast.is_none() || fast == plain(bytes),
            "fast {fast:?}, serde_json {:?} on {}",
            plain(bytes),
            String::from_utf8_lossy(bytes)
        );
        fast.is_some()
    }

    /// Frames as the machines write them: a `__signal` with every member, others of other
    /// payload shapes.
    fn frames() -> Vec<Vec<u8>> {
        let did = "did:key:zDnaegnhUqafEc7b2o6fwWxtZcCnNcbGkPEs3478bX4i7Dh1D";
        let signal = json!({
            "at": 1_790_380_020_777u64, "data": {"sdp": "offer 1 1", "type": "offer"}, "hops": 3,
            "kind": "offer", "origin": did, "sig": "y1pACgJthhp0NfIc-EL-AEqcqWu", "target": "did:key:zB",
        });
        [
            Frame::new("jvq4cb6me5gqkj7ukioutnklmnk4ynud", SIGNAL, signal),
            Frame::new("r", PEERS, json!([did, "did:key:zB"])),
            Frame::new("r", AUTH_HELLO, json!({"nonce": "abc", "at": 5})),
            Frame::new("r", "chat", json!({"text": "hé \"quoted\"\n", "n": -1.5})),
            Frame::new("r", "chat", Value::Null),
        ]
        .iter()
        .map(|f| f.to_bytes(did))
        .collect()
    }

    /// The frames the machines write are read by the fast path (so the oracle's hot path is
    /// it), as serde_json reads them; a text with an escape or a non-ASCII byte is left to
    /// serde_json.
    #[test]
    fn written_frames_are_read_fast_and_as_serde_json_reads_them() {
        let frames = frames();
        for frame in &frames[..3] {
            assert!(agrees(frame), "{}", String::from_utf8_lossy(frame));
        }
        let signal = fast::read(&frames[0]).unwrap();
        assert_eq!(signal.kind, SIGNAL);
        assert_eq!(signal.payload.at, 1_790_380_020_777);
        assert_eq!(signal.payload.target, "did:key:zB");
        assert!(!agrees(&frames[3]));
        assert!(agrees(&frames[4]));
        assert_eq!(Sent::read(&frames[3]).unwrap().kind, "chat");
    }

    /// Texts at the subset's edges: the fast path either answers as serde_json or leaves them.
    #[test]
    fn edge_texts_get_serde_jsons_answer() {
        let texts: &[&str] = &[
            r#"{"room":"r","type":"t"}"#,
            r#"{"type":"t","room":"r","payload":{"at":18446744073709551615}}"#,
            r#"{"room":"r","type":"t","payload":{"at":18446744073709551616}}"#,
            r#"{"room":"r","type":"t","payload":{"at":01}}"#,
            r#"{"room":"r","type":"t","payload":{"at":0}}"#,
            r#"{"room":"r","type":"t","payload":{"at":-1}}"#,
            r#"{"room":"r","type":"t","payload":{"at":1.0}}"#,
            r#"{"room":"r","type":"t","payload":{"at":1e3}}"#,
            r#"{"room":"r","type":"t","payload":{"at":"5","origin":5,"target":null}}"#,
            r#"{"room":"r","type":"t","payload":{"at":5,"at":6}}"#,
            r#"{"room":"r","type":"t","payload":{"origin":"a","origin":"b"}}"#,
            r#"{"room":"r","type":"t","payload":{"x":{"origin":"a","at":1}}}"#,
            r#"{"room":"r","room":"r","type":"t"}"#,
            r#"{"room":"r","type":"t","payload":1,"payload":{}}"#,
            r#"{"room":"r","type":"t","from":1,"from":[]}"#,
            r#"{"room":"r"}"#,
            r#"{"room":5,"type":"t"}"#,
            r#"{"room":"r","type":"t",}"#,
            r#"{"room":"r","type":"t"} "#,
            r#" {"room":"r","type":"t"}"#,
            r#"{"room":"r","type":"t"}x"#,
            r#"{"room":"r","type":"t","payload":[1,[2,{"a":[]}],true,false,null]}"#,
            r#"{"room":"r","type":"t","payload":tru}"#,
            r#"{"room":"r","type":"t","payload":"at"}"#,
            r#"{"room":"r\u0041","type":"t"}"#,
            "{\"room\":\"r\x7f\",\"type\":\"t\"}",
            "{\"room\":\"r\x01\",\"type\":\"t\"}",
            r#"["r","t",{}]"#,
            r#"{}"#,
            r#""#,
        ];
        for text in texts {
            agrees(text.as_bytes());
        }
        let deep = |n| {
            let mut s = String::from(r#"{"room":"r","type":"t","payload":"#);
            s += &"[".repeat(n);
            s += &"]".repeat(n);
            s + "}"
        };
        assert!(agrees(deep(10).as_bytes()));
        for n in [20, 127, 200] {
            agrees(deep(n).as_bytes());
        }
    }

    /// Written frames with bytes changed, inserted, removed or cut, and texts of random
    /// structure with repeated names, escapes, non-ASCII, odd numbers and whitespace: the fast
    /// path answers as serde_json does whenever it answers.
    #[test]
    fn mutated_and_random_texts_get_serde_jsons_answer() {
        let mut rng = crate::stream(0x5e47, 4);
        let alphabet = b"{}[]\",:0123456789-.eE+ \\ntfalsu\x00\x1f\x7f\x80\xc3\xa9\xff";
        let mut fast_answers = 0;
        for frame in frames() {
            for _ in 0..3_000 {
                let mut text = frame.clone();
                for _ in 0..1 + rng.next_u32() % 3 {
                    let r = rng.next_u64();
                    let at = (r as usize >> 8) % (text.len() + 1);
                    let byte = alphabet[(r as usize) % alphabet.len()];
                    match (r >> 40) % 4 {
                        0 if at < text.len() => text[at] = byte,
                        1 => text.insert(at, byte),
                        2 if at < text.len() => {
                            text.remove(at);
                        }
                        _ => text.truncate(at),
                    }
                }
                fast_answers += usize::from(agrees(&text));
            }
        }
        for _ in 0..20_000 {
            let mut text = String::new();
            random_object(&mut rng, &mut text, 0, true);
            fast_answers += usize::from(agrees(text.as_bytes()));
        }
        assert!(fast_answers > 2_000, "only {fast_answers} fast answers");
    }

    /// Writes an object of random members, `top` choosing a frame's names.
    fn random_object(rng: &mut impl rand_core::Rng, out: &mut String, depth: u32, top: bool) {
        let names: &[&str] = if top {
            &["room", "type", "payload", "from", "room", "type"]
        } else {
            &["origin", "target", "at", "data", "sdp", "hops"]
        };
        out.push('{');
        let members = rng.next_u32() % 6;
        for i in 0..members {
            if i > 0 {
                out.push(',');
            }
            if rng.next_u32().is_multiple_of(16) {
                out.push(' ');
            }
            let name = names[rng.next_u32() as usize % names.len()];
            out.push_str(&format!("\"{name}\":"));
            random_value(rng, out, depth + 1);
        }
        out.push('}');
    }

    /// Writes a random value; its objects have a payload's names.
    fn random_value(rng: &mut impl rand_core::Rng, out: &mut String, depth: u32) {
        let choice = if depth > 20 { 0 } else { rng.next_u32() % 12 };
        match choice {
            0..=2 => {
                let strings = [
                    "r",
                    "",
                    "did:key:z",
                    "a\\\"b",
                    "\\u00e9",
                    "é",
                    "x\\ny",
                    "\u{7f}",
                ];
                out.push_str(&format!(
                    "\"{}\"",
                    strings[rng.next_u32() as usize % strings.len()]
                ));
            }
            3..=5 => {
                let numbers = [
                    "0",
                    "7",
                    "1790380020777",
                    "18446744073709551615",
                    "18446744073709551616",
                    "-3",
                    "1.5",
                    "2e2",
                    "00",
                    "-0",
                ];
                out.push_str(numbers[rng.next_u32() as usize % numbers.len()]);
            }
            6 => out.push_str(["true", "false", "null"][rng.next_u32() as usize % 3]),
            7 | 8 => {
                out.push('[');
                for i in 0..rng.next_u32() % 3 {
                    if i > 0 {
                        out.push(',');
                    }
                    random_value(rng, out, depth + 1);
                }
                out.push(']');
            }
            _ => random_object(rng, out, depth, false),
        }
    }
}
