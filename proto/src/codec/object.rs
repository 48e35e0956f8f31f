//! JSON objects read straight into typed structs, for fast paths that must refuse whatever a
//! reader through a `serde_json::Value` tree would not take as an object.

use alloc::borrow::Cow;
use core::fmt;
use core::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// `T` read only from a JSON object. serde's derived structs also read a JSON array, field by
/// field in order, which a reader going through `Value::as_object` refuses; wrapping each struct of
/// a fast path in this keeps the two paths apart on nothing but speed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OnlyMaps<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for OnlyMaps<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(OnlyMaps(PhantomData))
    }
}

/// A string member, borrowed from the text unless it holds escapes, which are read as a JSON tree
/// reads them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// For `#[serde(default, deserialize_with = "present")]` on an `Option<T>` member: when present
/// it must be a `T`, so `null` is an error rather than absent, as for a reader that looks the
/// member up in a JSON tree.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `T` read from `bytes` when they are one JSON object `T` reads, `None` on any error: a fast
/// path's caller falls back to its general path, which reports the error its own way.
pub fn read<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    serde_json::from_slice::<Object<T>>(bytes).ok().map(|o| o.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Pair {
        a: u64,
        b: String,
    }

    #[test]
    fn an_object_reads_and_an_array_does_not() {
        assert_eq!(
            read::<Pair>(br#"{"b":"x","a":1}"#),
            Some(Pair {
                a: 1,
                b: "x".into()
            })
        );
        // A derived struct alone would read this array as the object above.
        assert_eq!(
            serde_json::from_slice::<Pair>(br#"[1,"x"]"#).ok(),
            Some(Pair {
                a: 1,
                b: "x".into()
            })
        );
        assert_eq!(read::<Pair>(br#"[1,"x"]"#), None);
        assert_eq!(read::<Pair>(br#"{"a":1,"b":"x","a":2}"#), None);
        assert_eq!(read::<Pair>(b"{} x"), None);
    }
}
