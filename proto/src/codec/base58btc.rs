//! base58 with the bitcoin alphabet (the multibase `z` encoding used by `did:key`).
//!
//! Leading zero bytes are spelled as leading `1`s, so every byte string has exactly one spelling.
//! Decoding is quadratic in the input length; callers bound the length of untrusted fields first
//! ([`super::did_key`] does).

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;

/// Encodes `bytes` as base58btc.
pub fn encode(bytes: &[u8]) -> String {
    bs58::encode(bytes).into_string()
}

/// Decodes base58btc; `0`, `O`, `I`, `l` and anything outside the alphabet are errors.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    bs58::decode(text).into_vec().map_err(|e| match e {
        bs58::decode::Error::InvalidCharacter { index, .. }
        | bs58::decode::Error::NonAsciiCharacter { index } => {
            DecodeError::InvalidCharacter { position: index }
        }
        // `into_vec` sizes its own buffer, so BufferTooSmall cannot happen; the enum is
        // non-exhaustive, so anything else is reported as a bad length rather than dropped.
        _ => DecodeError::InvalidLength { length: text.len() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn known_vectors() {
        assert_eq!(encode(b""), "");
        assert_eq!(encode(b"Hello World!"), "2NEpo7TZRRrLZSi2U");
        assert_eq!(encode(&[0, 0, 0x28, 0x7f, 0xb4, 0xcd]), "11233QC4");
        assert_eq!(
            decode("11233QC4").unwrap(),
            vec![0, 0, 0x28, 0x7f, 0xb4, 0xcd]
        );
        assert_eq!(decode("2NEpo7TZRRrLZSi2U").unwrap(), b"Hello World!");
        assert_eq!(decode("").unwrap(), b"");
        assert_eq!(decode("1").unwrap(), vec![0]);
    }

    #[test]
    fn rejects_characters_outside_the_alphabet() {
        for (text, position) in [
            ("0", 0),
            ("abO", 2),
            ("aI", 1),
            ("l", 0),
            ("a+b", 1),
            ("aé", 1),
        ] {
            assert_eq!(
                decode(text),
                Err(DecodeError::InvalidCharacter { position }),
                "{text}"
            );
        }
    }
}
