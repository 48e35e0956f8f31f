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
    super::decode_with(&BASE64URL_NOPAD, text)
}

/// Decodes unpadded base64url into exactly `N` bytes, for fixed-size fields (a 16-byte nonce is 22
/// characters, a 32-byte topic 43, a 64-byte signature 86).
///
/// Anything that decodes to another length is [`DecodeError::WrongLength`].
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], DecodeError> {
    super::to_array(decode(text)?)
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
