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

/// `T` read from `bytes` when they are one JSON object `T` reads and every member is one `T`
/// names or one of `also`, `None` otherwise. serde skips a member its struct does not name
/// without the checks a JSON tree makes of every value (nesting depth, numbers in range, valid
/// escapes), so a fast path that must agree with a tree reader on every input falls back on any
/// member it would skip. Only the top-level object is checked: `T`'s own members are read as
/// typed values (or as `Value`s), which are checked. This is for a `T` the general path shares,
/// which must skip unknown members there (AIRC's `msg` and `ack`); a fast path's own structs say
/// the same with `#[serde(deny_unknown_fields)]` at every level and are read with [`read`].
pub fn read_named<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
    also: &'static [&'static str],
) -> Option<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(Named {
        inner: &mut de,
        also,
    })
    .ok()?;
    de.end().ok()?;
    Some(value)
}

/// A deserializer that hands `T`'s struct visitor a map whose keys must be `T`'s fields or
/// `also`, and refuses anything but a map.
struct Named<D> {
    inner: D,
    also: &'static [&'static str],
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Named<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, D::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let keys = Keys {
            fields,
            also: self.also,
            visitor,
        };
        self.inner.deserialize_struct(name, fields, keys)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The struct visitor, given only maps, and those only through [`KeysIn`].
struct Keys<V> {
    fields: &'static [&'static str],
    also: &'static [&'static str],
    visitor: V,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Keys<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of known members")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(KeysIn {
            map,
            fields: self.fields,
            also: self.also,
        })
    }
}

/// A map whose every key is checked against the struct's fields and `also` before the struct
/// sees it.
struct KeysIn<A> {
    map: A,
    fields: &'static [&'static str],
    also: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for KeysIn<A> {
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key::<Cow<'de, str>>()? else {
            return Ok(None);
        };
        if !self.fields.contains(&&*key) && !self.also.contains(&&*key) {
            return Err(serde::de::Error::custom(
                "a member the struct does not name",
            ));
        }
        seed.deserialize(serde::de::value::CowStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<S: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A non-negative integer at the start of `text` as JSON spells it (no sign, no leading zero, no
/// fraction or exponent after it) that fits a `u64`, and the text after it: for fast paths that
/// read a message by position, as weft writes it.
#[cfg(feature = "minca")]
pub(crate) fn integer_as_written(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, rest) = text.split_at(digits);
    if number.is_empty() || (number.len() > 1 && number.starts_with('0')) {
        return None;
    }
    if rest.starts_with(['.', 'e', 'E']) {
        return None;
    }
    Some((number.parse().ok()?, rest))
}

/// How many leading bytes are ASCII other than control characters, `"` and `\\`: the run a string's
/// content can be stepped over by without a look at each byte (the mesh's frames, a rendezvous
/// message as written). Eight bytes at a time, with the
/// usual word tricks (a byte's high bit marks a match, and a borrow only ever carries into a
/// byte above a match, so the lowest match is exact).
#[cfg(feature = "minca")]
pub(crate) fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let slash = w ^ (ONES * u64::from(b'\\'));
        // Below 0x20 borrows into the high bit; 0x80 and above has it already.
        let stop = (w.wrapping_sub(ONES * 0x20)
            | w
            | (quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash))
            & HIGH;
        if stop != 0 {
            return n + (stop.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + bytes[n..]
        .iter()
        .position(|&b| !is_plain(b))
        .unwrap_or(bytes.len() - n)
}

/// Whether `b` is ASCII other than a control character (below space, as JSON counts them),
/// `"` and `\\`.
#[cfg(feature = "minca")]
fn is_plain(b: u8) -> bool {
    (0x20..0x80).contains(&b) && b != b'"' && b != b'\\'
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

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Renamed {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        n: Option<u64>,
    }

    #[test]
    fn read_named_takes_only_named_members() {
        let ok = Renamed {
            kind: "x".into(),
            n: None,
        };
        assert_eq!(read_named::<Renamed>(br#"{"type":"x"}"#, &[]), Some(ok));
        assert_eq!(
            read_named::<Renamed>(br#"{"t":"m","type":"x","n":2}"#, &["t"]),
            Some(Renamed {
                kind: "x".into(),
                n: Some(2)
            })
        );
        // A member nobody names, even a harmless one, sends the caller to its general path;
        // these are the ones serde would skip unchecked and a JSON tree refuses.
        for junk in [r#""\ud800""#, "1e400", &"[".repeat(200), "1"] {
            let text = alloc::format!(r#"{{"type":"x","extra":{junk}}}"#);
            assert_eq!(
                read_named::<Renamed>(text.as_bytes(), &["t"]),
                None,
                "{text}"
            );
        }
        // An escaped key is read as a tree reads it.
        assert!(read_named::<Renamed>(br#"{"\u0074ype":"x"}"#, &[]).is_some());
        for bad in [
            &br#"["x"]"#[..],
            br#"{"type":"x"} 1"#,
            br#"{"type":"x","type":"y"}"#,
            b"7",
        ] {
            assert_eq!(read_named::<Renamed>(bad, &[]), None);
        }
    }

    #[test]
    #[cfg(feature = "minca")]
    fn an_integer_as_written_is_json_s_plain_non_negative_integer() {
        assert_eq!(integer_as_written("12,"), Some((12, ",")));
        assert_eq!(integer_as_written("0}"), Some((0, "}")));
        for refused in ["", "-1", "01", "1.5", "1e3", "18446744073709551616"] {
            assert_eq!(integer_as_written(refused), None, "{refused}");
        }
    }

    #[test]
    #[cfg(feature = "minca")]
    fn the_plain_run_stops_at_the_first_byte_that_is_not_plain() {
        for b in 0..=u8::MAX {
            for at in 0..20 {
                let mut bytes = alloc::vec![b'a'; 20];
                bytes[at] = b;
                // A second stop after the first must not move it.
                if at + 1 < bytes.len() {
                    bytes[at + 1] = 0x00;
                }
                let want = if is_plain(b) {
                    bytes.iter().position(|&x| !is_plain(x)).unwrap_or(20)
                } else {
                    at
                };
                assert_eq!(plain_run(&bytes), want, "{b:#x} at {at}");
                assert_eq!(plain_run(&bytes[..at]), at);
            }
            assert_eq!(
                is_plain(b),
                b.is_ascii() && !b"\"\\".contains(&b) && b >= b' '
            );
        }
    }
}
