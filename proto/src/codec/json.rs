//! Canonical JSON as meshstr defines it: the body as JSON, UTF-8, object keys sorted ascending by
//! code point, no whitespace between tokens.
//!
//! Keys are sorted here, explicitly, rather than trusting `serde_json::Map`'s iteration order:
//! that order is sorted only while no crate in the build turns on serde_json's `preserve_order`
//! feature, and features unify across a whole build. Byte order of UTF-8 is code-point order, so
//! Rust's `str` ordering is the meshstr ordering (note that it differs from JavaScript's UTF-16
//! ordering for U+E000..U+FFFF against supplementary characters; see [`super::js::cmp`]).
//!
//! Everything else (string escaping, number text) is serde_json's compact output:
//!
//! - strings escape `"` and `\`, `\b \f \n \r \t` as short escapes, other controls below U+0020 as
//!   `\u00xx` in lower-case hex, and leave `/` and all non-ASCII characters as UTF-8;
//! - integers (`u64`/`i64`) print exactly, with no sign for non-negatives and no exponent;
//! - floats print in serde_json's shortest round-trip form, which keeps a fractional part
//!   (`1.0`, `0.1`) and writes large and small magnitudes with an exponent (`1e+21`, `1e-7`). This is not JavaScript's number formatting; meshstr's counters are integers, so
//!   signed meshstr bodies never meet the difference. Use [`super::js::stringify`] for JavaScript's.

use alloc::string::String;
use alloc::vec::Vec;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// The canonical JSON text of `value`.
pub fn canonical(value: &Value) -> String {
    // Serializing a Value into memory has no failure path: the writer is a Vec, every map key is a
    // string, and Value holds no custom Serialize impls that could report an error.
    serde_json::to_string(&Canonical(value)).expect("serializing a JSON value to memory")
}

/// The canonical JSON of `value` as UTF-8 bytes, the form that is hashed and signed.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    canonical(value).into_bytes()
}

/// Serializes a Value with object keys in code-point order, whatever the Map's own order.
struct Canonical<'a>(&'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Canonical(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                // Keys in a Map are unique, so an unstable sort is deterministic.
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, item) in entries {
                    out.serialize_entry(key, &Canonical(item))?;
                }
                out.end()
            }
            leaf => leaf.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_canonical_number_reads_back_to_the_same_canonical_text() {
        // Found by fuzzing: without correctly rounded parsing `7.2E76` read back as a
        // neighbouring double, so canonical(read(canonical(v))) drifted. The workspace turns on
        // serde_json's `float_roundtrip` so every canonical form is a fixed point.
        for text in [
            "7.2E76",
            "1e-7",
            "0.1",
            "123456789.123456789",
            "2.2250738585072014e-308",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let c = canonical(&v);
            let back: Value = serde_json::from_str(&c).unwrap();
            assert_eq!(canonical(&back), c, "{text}");
        }
    }

    #[test]
    fn sorts_nested_keys_and_strips_whitespace() {
        let v = json!({
            "b": 1,
            "a": { "z": [3, 1, 2], "y": null, "x": { "d": true, "c": false } },
            "": "empty key",
        });
        assert_eq!(
            canonical(&v),
            r#"{"":"empty key","a":{"x":{"c":false,"d":true},"y":null,"z":[3,1,2]},"b":1}"#
        );
        assert_eq!(canonical_bytes(&v), canonical(&v).into_bytes());
    }

    #[test]
    fn arrays_keep_order_and_objects_inside_are_sorted() {
        let v = json!([{ "b": 2, "a": 1 }, "x", [], {}]);
        assert_eq!(canonical(&v), r#"[{"a":1,"b":2},"x",[],{}]"#);
    }

    #[test]
    fn keys_sort_by_code_point() {
        let mut map = serde_json::Map::new();
        for k in ["\u{10000}", "z", "\u{ffff}", "é", "Z", "a"] {
            map.insert(k.into(), Value::from(k));
        }
        let text = canonical(&Value::Object(map));
        assert_eq!(
            text,
            "{\"Z\":\"Z\",\"a\":\"a\",\"z\":\"z\",\"é\":\"é\",\"\u{ffff}\":\"\u{ffff}\",\"\u{10000}\":\"\u{10000}\"}"
        );
    }

    #[test]
    fn escapes_like_serde_json() {
        let s = "q\" b\\ /\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f} é \u{2028} \u{1F600}";
        let v = json!({ s: s });
        let expected_str =
            "\"q\\\" b\\\\ /\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f} é \u{2028} \u{1F600}\"";
        assert_eq!(
            canonical(&v),
            alloc::format!("{{{expected_str}:{expected_str}}}")
        );
        assert_eq!(serde_json::to_string(s).unwrap(), expected_str);
    }

    #[test]
    fn numbers() {
        let v = json!([
            0,
            -1,
            18446744073709551615u64,
            -9223372036854775808i64,
            1.5,
            1.0,
            0.1,
            1e21,
            1e-7
        ]);
        assert_eq!(
            canonical(&v),
            "[0,-1,18446744073709551615,-9223372036854775808,1.5,1.0,0.1,1e+21,1e-7]"
        );
    }

    #[test]
    fn scalars() {
        assert_eq!(canonical(&json!(null)), "null");
        assert_eq!(canonical(&json!(true)), "true");
        assert_eq!(canonical(&json!("")), "\"\"");
        assert_eq!(canonical(&json!({})), "{}");
    }
}
