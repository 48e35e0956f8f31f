//! base64url without padding (RFC 4648 §5): Minca nonces, signatures, topics and keys.
//!
//! Strict: `=` padding, the standard alphabet's `+` and `/`, and non-zero unused trailing bits are
//! all rejected, so each byte string has exactly one accepted spelling.

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;
use data_encoding::BASE64URL_NOPAD;

/// Encodes `bytes` as base64url without padding.
pub fn encode(bytes: &[u8]) -> String {
    BASE64URL_NOPAD.encode(bytes)
}

/// Decodes unpadded base64url, rejecting padding, the standard alphabet and non-canonical
/// trailing bits.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    super::decode_with(&BASE64URL_NOPAD, false, text)
}

/// Decodes unpadded base64url into exactly `N` bytes, for fixed-size fields (a 16-byte nonce is 22
/// characters, a 32-byte topic 43, a 64-byte signature 86).
///
/// Anything that decodes to another length is [`DecodeError::WrongLength`].
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], DecodeError> {
    // Straight into the array when the length is right and the text is good; anything else
    // through `decode`, whose error is the one to give.
    let mut out = [0; N];
    if BASE64URL_NOPAD.decode_len(text.len()) == Ok(N)
        && BASE64URL_NOPAD
            .decode_mut(text.as_bytes(), &mut out)
            .is_ok()
    {
        return Ok(out);
    }
    super::to_array(decode(text)?)
}

/// [`decode`] appending the bytes to `out` rather than to a vector of their own, for a reader that
/// keeps one buffer for many texts. `out` is left as it was on an error.
pub fn decode_append(text: &str, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    // In place when the text is good; anything else through `decode`, whose error is the one to
    // give (the same engine, so the two accept the same texts).
    let start = out.len();
    if let Ok(len) = BASE64URL_NOPAD.decode_len(text.len()) {
        out.resize(start + len, 0);
        if let Ok(written) = BASE64URL_NOPAD.decode_mut(text.as_bytes(), &mut out[start..]) {
            out.truncate(start + written);
            return Ok(());
        }
        out.truncate(start);
    }
    out.extend_from_slice(&decode(text)?);
    Ok(())
}

/// `b`'s value as a base64url digit, if it is one.
fn digit(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    }
}

/// Whether `b` is a base64url digit, by comparisons alone, so a run of bytes is checked many at
/// a time.
fn is_digit(b: u8) -> bool {
    // `|`, not `||`: no branch per byte.
    (b.wrapping_sub(b'A') < 26)
        | (b.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | (b == b'-')
        | (b == b'_')
}

/// Whether `text` is what [`decode`] accepts, with its error if not, without keeping (or
/// allocating for) the bytes: for a field checked here and decoded later, where it is used.
///
/// Decoding to check was most of a relay mail's cost. What [`decode`] accepts is exactly a text
/// of digits whose length is not one more than a multiple of four and whose last digit carries
/// no bits past the last byte: comparisons, not decoding. A text that fails goes through
/// [`decode`], whose error is the one to give.
pub fn check(text: &str) -> Result<(), DecodeError> {
    let bytes = text.as_bytes();
    // The bits of the last digit that fall past the last whole byte, by length mod 4.
    let spare = match bytes.len() % 4 {
        0 => 0,
        2 => 0b1111,
        3 => 0b11,
        _ => return decode(text).map(drop),
    };
    // No early exit: a fold the compiler can do many bytes at a time.
    let strays = bytes.iter().fold(0u8, |n, &b| n | u8::from(!is_digit(b)));
    let canonical = bytes
        .last()
        .is_none_or(|&b| digit(b).is_some_and(|d| d & spare == 0));
    if strays == 0 && canonical {
        Ok(())
    } else {
        decode(text).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn decode_append_gives_what_decode_gives_and_leaves_the_buffer_on_an_error() {
        // Every text of up to four characters over digits, both alphabets' extras, padding and a
        // stranger: good texts, bad lengths, bad characters, padding and non-zero trailing bits.
        let chars = ['A', 'Q', 'z', '-', '_', '+', '/', '=', ' '];
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = texts
                .iter()
                .filter(|t| t.len() == texts.last().map_or(0, String::len))
                .flat_map(|t| chars.iter().map(move |c| alloc::format!("{t}{c}")))
                .collect();
            texts.extend(longer);
        }
        for text in &texts {
            let mut out = vec![9, 9];
            let got = decode_append(text, &mut out).map(|()| out[2..].to_vec());
            assert_eq!(got, decode(text), "{text:?}");
            if got.is_err() {
                assert_eq!(out, [9, 9], "{text:?}");
            }
        }
    }

    #[test]
    fn rfc4648_vectors_without_padding() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg"),
            (b"fooba", "Zm9vYmE"),
            (b"foobar", "Zm9vYmFy"),
        ];
        for (bytes, text) in cases {
            assert_eq!(encode(bytes), text);
            assert_eq!(decode(text).unwrap(), bytes);
        }
    }

    #[test]
    fn url_alphabet() {
        assert_eq!(encode(&[0xfb, 0xff, 0xbf]), "-_-_");
        assert_eq!(decode("-_-_").unwrap(), vec![0xfb, 0xff, 0xbf]);
    }

    #[test]
    fn rejects_standard_alphabet() {
        assert_eq!(
            decode("+/+/"),
            Err(DecodeError::InvalidCharacter { position: 0 })
        );
        assert_eq!(
            decode("ab/c"),
            Err(DecodeError::InvalidCharacter { position: 2 })
        );
    }

    #[test]
    fn rejects_padding() {
        assert_eq!(
            decode("Zg=="),
            Err(DecodeError::InvalidPadding { position: 2 })
        );
        assert_eq!(
            decode("Zm8="),
            Err(DecodeError::InvalidPadding { position: 3 })
        );
    }

    #[test]
    fn rejects_non_canonical_trailing_bits() {
        // "Zg" is 0x66; "Zh" carries the same byte plus a set unused bit.
        assert_eq!(decode("Zh"), Err(DecodeError::NonCanonical { position: 1 }));
        assert_eq!(
            decode("Zm9"),
            Err(DecodeError::NonCanonical { position: 2 })
        );
    }

    #[test]
    fn rejects_impossible_length_and_junk() {
        assert_eq!(decode("Z"), Err(DecodeError::InvalidLength { length: 1 }));
        assert_eq!(
            decode("Zm9vY"),
            Err(DecodeError::InvalidLength { length: 5 })
        );
        assert_eq!(
            decode("Zm 9"),
            Err(DecodeError::InvalidCharacter { position: 2 })
        );
        assert!(decode("Zé").is_err());
    }

    #[test]
    fn fixed_size_fields() {
        let nonce = [7u8; 16];
        let text = encode(&nonce);
        assert_eq!(text.len(), 22);
        assert_eq!(decode_array::<16>(&text), Ok(nonce));
        assert_eq!(encode(&[1u8; 32]).len(), 43);
        let sig = [0xabu8; 64];
        let text = encode(&sig);
        assert_eq!(text.len(), 86);
        assert_eq!(decode_array::<64>(&text), Ok(sig));
        assert_eq!(
            decode_array::<32>(&text),
            Err(DecodeError::WrongLength {
                expected: 32,
                actual: 64
            })
        );
        assert_eq!(
            decode_array::<16>(""),
            Err(DecodeError::WrongLength {
                expected: 16,
                actual: 0
            })
        );
    }

    #[test]
    fn check_and_decode_array_answer_as_decode_does() {
        use alloc::format;
        use alloc::string::String;
        let mut texts: Vec<String> = [
            "", "Zg", "Zh", "Zm8", "Zm9", "Z", "Zg=", "Zg==", "+/8", "-_8",
        ]
        .iter()
        .map(|t| String::from(*t))
        .collect();
        // Every character (all of ASCII and one beyond) alone, in pairs, and last after one,
        // two and three good characters: every length mod 4 and every trailing-bit pattern.
        let chars: Vec<char> = (0u8..128).map(char::from).chain(['\u{e9}']).collect();
        for &a in &chars {
            for prefix in ["", "Z", "Zm", "Zm9", "Zm9vY"] {
                texts.push(format!("{prefix}{a}"));
            }
            for &b in &chars {
                texts.push(format!("{a}{b}"));
            }
        }
        // Long texts, good and broken at the start, inside and at the end.
        const PIECE: usize = 1024;
        for len in [PIECE - 1, PIECE, PIECE + 2, 3 * PIECE + 3] {
            let bytes: Vec<u8> = (0..len * 3 / 4).map(|i| (i * 7) as u8).collect();
            let good = encode(&bytes);
            texts.push(good.clone());
            for at in [0, PIECE - 1, PIECE, good.len() - 1] {
                for bad in ['=', '+', '/', '\u{e9}', ' '] {
                    if let Some((i, _)) = good.char_indices().nth(at) {
                        let mut t = good.clone();
                        t.replace_range(i..i + 1, bad.encode_utf8(&mut [0; 4]));
                        texts.push(t);
                    }
                }
            }
            texts.push(format!("{good}A"));
            texts.push(format!("{good}="));
        }
        for t in &texts {
            assert_eq!(check(t), decode(t).map(drop), "{t:?}");
            let expected = decode(t).and_then(super::super::to_array::<2>);
            assert_eq!(decode_array::<2>(t), expected, "{t:?}");
            let expected = decode(t).and_then(super::super::to_array::<768>);
            assert_eq!(decode_array::<768>(t), expected, "{t:?}");
        }
    }
}
