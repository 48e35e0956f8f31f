//! JavaScript string semantics, for protocols whose reference implementation is JavaScript.
//!
//! Minca bounds live payloads by the UTF-16 length of `JSON.stringify`, and orders ids with
//! JavaScript's `<`. Both are defined on UTF-16 code units, not on Rust's bytes or code points, so
//! this module reproduces them exactly: [`utf16_len`], [`cmp`], [`stringify()`] and
//! [`stringify_utf16_len`].

use alloc::string::String;
use core::cmp::Ordering;
use core::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// The length of `s` as JavaScript's `String.prototype.length` reports it: UTF-16 code units, so
/// characters at or above U+10000 count 2.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Orders two strings as JavaScript's `<` does: lexicographically by UTF-16 code unit.
///
/// This differs from Rust's `str` order (bytes, which is code points) exactly when a character in
/// U+E000..=U+FFFF meets a supplementary character (U+10000 and up): the latter's leading
/// surrogate (0xD800..0xDBFF) sorts first in JavaScript, last in Rust.
pub fn cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Exactly the text JavaScript's `JSON.stringify` produces for the same value.
///
/// - Strings follow ECMA-262 `QuoteJSONString`: `"` and `\` escaped, `\b \f \n \r \t` as short
///   escapes, other controls below U+0020 as `\u00xx` in lower-case hex, everything else (`/`,
///   U+007F, non-ASCII, U+2028) left as is.
/// - Numbers follow ECMA-262 `Number::toString(10)`: `1.0` is `1`, `-0` is `0`, magnitudes from
///   1e21 up and below 1e-6 use an exponent with an explicit sign (`1e+21`, `1.5e-7`), everything
///   in between is plain decimal (`0.000001`, `123456789012345680000`). The digits are the
///   shortest that round-trip, as JavaScript engines choose them. Integers that serde_json holds
///   as `u64`/`i64` print exactly; beyond 2^53 JavaScript could not hold them exactly at all, so
///   there is no JavaScript text to match and the exact integer is the useful answer. A number
///   that is not finite as an `f64` prints `null`, as `JSON.stringify` does for `Infinity`.
/// - Object members come in JavaScript's own-property order: keys that are array indices
///   (canonical decimal integers below 2^32 − 1) first, ascending numerically, then the other
///   keys in the [`Map`]'s iteration order (which is sorted by default, insertion order with
///   serde_json's `preserve_order`, the order `JSON.parse` would have created them in). The order
///   never changes the length.
pub fn stringify(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// `utf16_len(&stringify(value))`: the length Minca bounds live payloads by.
pub fn stringify_utf16_len(value: &Value) -> usize {
    utf16_len(&stringify(value))
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    let mut indexed: alloc::vec::Vec<(u32, &String, &Value)> = map
        .iter()
        .filter_map(|(k, v)| array_index(k).map(|i| (i, k, v)))
        .collect();
    indexed.sort_unstable_by_key(|&(i, _, _)| i);
    let named = map.iter().filter(|(k, _)| array_index(k).is_none());
    out.push('{');
    let members = indexed.into_iter().map(|(_, k, v)| (k, v)).chain(named);
    for (i, (key, item)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_value(out, item);
    }
    out.push('}');
}

/// The key's value if it is an ECMAScript array index: the canonical decimal form of an integer
/// in 0..2^32 − 1 (so no sign, no leading zero, no `+`).
fn array_index(key: &str) -> Option<u32> {
    let bytes = key.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    key.parse::<u32>().ok().filter(|&i| i != u32::MAX)
}

/// ECMA-262 `QuoteJSONString`. Rust strings hold no lone surrogates, so the well-formed
/// stringify rule for them never applies.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < '\u{20}' => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(out: &mut String, n: &Number) {
    // Writing to a String cannot fail, so the fmt::Results below are ignored.
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else {
        match n.as_f64() {
            Some(f) => write_f64(out, f),
            // Only reachable with serde_json's arbitrary_precision, for a literal beyond f64's
            // range: JavaScript would read it as Infinity, which JSON.stringify writes as null.
            None => out.push_str("null"),
        }
    }
}

/// ECMA-262 `Number::toString(x, 10)`, with `null` for non-finite values as in `JSON.stringify`.
fn write_f64(out: &mut String, x: f64) {
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    if x == 0.0 {
        // Both +0 and -0.
        out.push('0');
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, as "d.ddde±x"; the spec calls the
    // digits s (k of them) and places the decimal point so that x = 0.s × 10^n.
    let sci = alloc::format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = exponent + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(core::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(core::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(
            out,
            "e{}{}",
            if e < 0 { '-' } else { '+' },
            e.unsigned_abs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use serde_json::json;

    fn num(x: f64) -> String {
        let mut s = String::new();
        write_f64(&mut s, x);
        s
    }

    #[test]
    fn utf16_lengths() {
        assert_eq!(utf16_len(""), 0);
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("\u{ffff}"), 1);
        assert_eq!(utf16_len("\u{10000}"), 2);
        assert_eq!(utf16_len("a😀b"), 4);
    }

    #[test]
    fn ordering_by_code_unit() {
        assert_eq!(cmp("a", "b"), Ordering::Less);
        assert_eq!(cmp("ab", "a"), Ordering::Greater);
        assert_eq!(cmp("", ""), Ordering::Equal);
        assert_eq!(cmp("é", "z"), Ordering::Greater);
        // JavaScript: "\u{10000}" < "\u{ffff}" (0xD800 < 0xFFFF); Rust's byte order says the opposite.
        assert_eq!(cmp("\u{10000}", "\u{ffff}"), Ordering::Less);
        assert_eq!("\u{10000}".cmp("\u{ffff}"), Ordering::Greater);
        assert_eq!(cmp("\u{e000}", "😀"), Ordering::Greater);
        assert_eq!(cmp("\u{d7ff}", "😀"), Ordering::Less);
    }

    #[test]
    fn number_to_string_rules() {
        let cases: [(f64, &str); 25] = [
            (1.0, "1"),
            (0.1, "0.1"),
            (-1.5, "-1.5"),
            (1.5e300, "1.5e+300"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.2345678901234567e21, "1.2345678901234568e+21"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (0.0000012345, "0.0000012345"),
            (-0.0, "0"),
            (0.0, "0"),
            (123.456, "123.456"),
            (100.0, "100"),
            (9007199254740992.0, "9007199254740992"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
            (-1e-7, "-1e-7"),
            (f64::INFINITY, "null"),
            (f64::NAN, "null"),
            (1e300 * 10.0, "1e+301"),
        ];
        for (x, expected) in cases {
            assert_eq!(num(x), expected, "{x:?}");
        }
    }

    #[test]
    fn stringify_numbers_in_values() {
        let v = json!([
            1.0,
            -0.0,
            1e21,
            1e-7,
            0.000001,
            42,
            -42,
            18446744073709551615u64
        ]);
        assert_eq!(
            stringify(&v),
            "[1,0,1e+21,1e-7,0.000001,42,-42,18446744073709551615]"
        );
    }

    #[test]
    fn stringify_strings_like_json_stringify() {
        let v = json!("q\" b\\ /\u{8}\u{c}\n\r\t\u{0}\u{1}\u{1f}\u{7f} é \u{2028} 😀");
        assert_eq!(
            stringify(&v),
            "\"q\\\" b\\\\ /\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\u{7f} é \u{2028} 😀\""
        );
        // serde_json escapes the same way, character for character.
        for c in (0u32..0x80)
            .filter_map(char::from_u32)
            .chain(['é', '\u{2028}', '😀'])
        {
            let s = c.to_string();
            assert_eq!(
                stringify(&json!(s)),
                serde_json::to_string(&s).unwrap(),
                "{c:?}"
            );
        }
    }

    #[test]
    fn stringify_structure() {
        assert_eq!(stringify(&json!(null)), "null");
        assert_eq!(stringify(&json!(true)), "true");
        assert_eq!(stringify(&json!([])), "[]");
        assert_eq!(stringify(&json!({})), "{}");
        let v = json!({ "b": [1, { "y": false }], "a": "x" });
        assert_eq!(stringify(&v), r#"{"a":"x","b":[1,{"y":false}]}"#);
    }

    #[test]
    fn array_index_keys_come_first_numerically() {
        // JSON.stringify({"b":1,"10":2,"2":3,"02":4,"-1":5,"4294967295":6,"4294967294":7})
        let v = json!({"b":1,"10":2,"2":3,"02":4,"-1":5,"4294967295":6,"4294967294":7});
        assert_eq!(
            stringify(&v),
            r#"{"2":3,"10":2,"4294967294":7,"-1":5,"02":4,"4294967295":6,"b":1}"#
        );
    }

    #[test]
    fn utf16_length_of_stringify() {
        let v = json!({ "k": "😀é\n" });
        // `{"k":"` is 6 units, the emoji 2, é 1, the `\n` escape 2, and `"}` 2.
        let text = stringify(&v);
        assert_eq!(text, "{\"k\":\"😀é\\n\"}");
        assert_eq!(stringify_utf16_len(&v), 13);
        assert_eq!(stringify_utf16_len(&json!(1.0)), 1);
    }
}
