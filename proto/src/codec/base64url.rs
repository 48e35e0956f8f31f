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
    if let Some(len) = decoded_len(text.len()) {
        let mut out = alloc::vec![0; len];
        if decode_canonical(text.as_bytes(), &mut out) {
            return Ok(out);
        }
    }
    decode_slow(text)
}

/// Decodes unpadded base64url into exactly `N` bytes, for fixed-size fields (a 16-byte nonce is 22
/// characters, a 32-byte topic 43, a 64-byte signature 86).
///
/// Anything that decodes to another length is [`DecodeError::WrongLength`].
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], DecodeError> {
    if decoded_len(text.len()) == Some(N) {
        let mut out = [0; N];
        if decode_canonical(text.as_bytes(), &mut out) {
            return Ok(out);
        }
    }
    super::to_array(decode_slow(text)?)
}

/// data-encoding's decoder, which also says what is wrong with a text that is not canonical.
fn decode_slow(text: &str) -> Result<Vec<u8>, DecodeError> {
    super::decode_with(&BASE64URL_NOPAD, text)
}

/// The 64 characters in order of value.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A byte that is not in [`ALPHABET`]; its top bits are set, which no 6-bit value has.
const NOT_BASE64URL: u8 = 0xff;

/// Each byte's value in [`ALPHABET`], or [`NOT_BASE64URL`].
const VALUES: [u8; 256] = {
    let mut table = [NOT_BASE64URL; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The byte count `chars` characters of unpadded base64url spell, or `None` for a count no
/// text has (one character past a group of four).
fn decoded_len(chars: usize) -> Option<usize> {
    let tail = match chars % 4 {
        0 => 0,
        2 => 1,
        3 => 2,
        _ => return None,
    };
    Some(chars / 4 * 3 + tail)
}

/// Decodes `text` into `out` (of exactly [`decoded_len`] bytes, or it refuses) when it is canonical: every character in
/// the alphabet and the last one's unused bits zero. False for anything else, which the caller
/// hands to [`decode_slow`]: the fast path only ever answers what that decoder would (the one
/// spelling per value), so its errors stay data-encoding's, position and all.
fn decode_canonical(text: &[u8], out: &mut [u8]) -> bool {
    if decoded_len(text.len()) != Some(out.len()) {
        return false;
    }
    let mut groups = text.chunks_exact(4);
    let mut triples = out.chunks_exact_mut(3);
    for (group, triple) in (&mut groups).zip(&mut triples) {
        let (a, b, c, d) = (
            VALUES[usize::from(group[0])],
            VALUES[usize::from(group[1])],
            VALUES[usize::from(group[2])],
            VALUES[usize::from(group[3])],
        );
        if (a | b | c | d) > 63 {
            return false;
        }
        let n = u32::from(a) << 18 | u32::from(b) << 12 | u32::from(c) << 6 | u32::from(d);
        triple.copy_from_slice(&n.to_be_bytes()[1..]);
    }
    let tail = triples.into_remainder();
    let n = groups
        .remainder()
        .iter()
        .try_fold(0u32, |n, &ch| match VALUES[usize::from(ch)] {
            NOT_BASE64URL => None,
            v => Some(n << 6 | u32::from(v)),
        });
    match (n, tail) {
        (Some(0), []) => true,
        // Two characters: 12 bits, of which the low 4 must be zero.
        (Some(n), [x]) if n & 0xf == 0 => {
            *x = (n >> 4) as u8;
            true
        }
        // Three characters: 18 bits, of which the low 2 must be zero.
        (Some(n), [x, y]) if n & 0x3 == 0 => {
            [*x, *y] = ((n >> 2) as u16).to_be_bytes();
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

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

    /// The fast decoder answers exactly as data-encoding does, errors included, on texts near
    /// canonical ones: every length, each character and the last one's unused bits changed.
    #[test]
    fn the_fast_path_agrees_with_data_encoding() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let odd = [
            b'=', b'+', b'/', b' ', b'A', b'_', b'-', b'z', b'0', 0xc3, 0xa9,
        ];
        for len in 0..40 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let text = encode(&bytes);
                assert_eq!(decode(&text).as_deref(), Ok(&bytes[..]));
                let mut mutated = text.clone().into_bytes();
                let r = next() as usize;
                match r % 4 {
                    0 if !mutated.is_empty() => {
                        let i = r / 4 % mutated.len();
                        mutated[i] = odd[r / 64 % odd.len()];
                    }
                    1 if !mutated.is_empty() => {
                        let last = mutated.len() - 1;
                        mutated[last] = ALPHABET[r / 4 % 64];
                    }
                    2 => mutated.push(ALPHABET[r / 4 % 64]),
                    _ => mutated.extend_from_slice(b"=="),
                }
                let Ok(mutated) = String::from_utf8(mutated) else {
                    continue;
                };
                assert_eq!(decode(&mutated), decode_slow(&mutated), "{mutated}");
                assert_eq!(
                    decode_array::<16>(&mutated),
                    decode_slow(&mutated).and_then(super::super::to_array),
                    "{mutated}"
                );
            }
        }
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
}
