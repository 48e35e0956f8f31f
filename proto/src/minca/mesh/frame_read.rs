//! A mesh frame's members read straight from its bytes, without a JSON tree for the frame.
//!
//! A `Value` of the whole frame would cost, on every frame, a map, four keys, `from` and two
//! names copied, only to take `room`, `type` and `payload` out of it. [`Members`] keeps only what
//! [`FrameRef::parse`](super::frame::FrameRef::parse) reads a frame for, and accepts exactly what
//! such a tree accepts: every member goes through serde_json's `deserialize_any`, as a tree's
//! would, so strings are checked (UTF-8, escapes, surrogates), numbers parsed and nesting
//! bounded alike, and a member given twice counts as it would in the map, the last one.

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The members of a frame that are read; each `None` when absent.
pub(super) struct Members<'a> {
    /// `room`: `Some` only if it is a string.
    pub(super) room: Option<Cow<'a, str>>,
    /// `type`: `Some` only if it is a string.
    pub(super) kind: Option<Cow<'a, str>>,
    /// `payload`, whatever it is.
    pub(super) payload: Option<Value>,
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mesh frame object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
        let mut m = Members {
            room: None,
            kind: None,
            payload: None,
        };
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match key.as_deref() {
                Some("room") => m.room = map.next_value::<Text<'de>>()?.0,
                Some("type") => m.kind = map.next_value::<Text<'de>>()?.0,
                Some("payload") => m.payload = Some(map.next_value::<Value>()?),
                _ => {
                    map.next_value::<Text<'de>>()?;
                }
            }
        }
        Ok(m)
    }
}

/// Any JSON value, checked as a `Value` would be and kept only if it is a string (borrowed from
/// the bytes unless it holds an escape). Not `IgnoredAny`: that skips strings without checking
/// them, and would read frames the tree refused.
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Borrowed(s))))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Owned(s.into()))))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Owned(s))))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
        while seq.next_element::<Text<'de>>()?.is_some() {}
        Ok(Text(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
        // Keys are read as the tree read them (checked strings); values likewise.
        while map.next_key::<Text<'de>>()?.is_some() {
            map.next_value::<Text<'de>>()?;
        }
        Ok(Text(None))
    }
}
