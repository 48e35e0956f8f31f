//! Standard base64 with padding (RFC 4648 §4).
//!
//! Strict: padding is required, the url-safe alphabet's `-` and `_` are rejected, and unused
//! trailing bits must be zero.

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;
use data_encoding::BASE64;

/// Encodes `bytes` as padded standard base64.
pub fn encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// Decodes padded standard base64, rejecting missing padding, the url-safe alphabet and
/// non-canonical trailing bits.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    super::decode_with(&BASE64, true, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ];
        for (bytes, text) in cases {
            assert_eq!(encode(bytes), text);
            assert_eq!(decode(text).unwrap(), bytes);
        }
        assert_eq!(encode(&[0xfb, 0xff, 0xbf]), "+/+/");
    }

    #[test]
    fn requires_padding() {
        assert_eq!(decode("Zg"), Err(DecodeError::InvalidLength { length: 2 }));
        assert_eq!(decode("Zm8"), Err(DecodeError::InvalidLength { length: 3 }));
        assert!(matches!(
            decode("Zg=a"),
            Err(DecodeError::InvalidPadding { .. })
        ));
        assert!(matches!(
            decode("Z==="),
            Err(DecodeError::InvalidPadding { .. })
        ));
        assert!(matches!(
            decode("===="),
            Err(DecodeError::InvalidPadding { .. })
        ));
        // Found by fuzzing: padding in the middle of the text.
        assert_eq!(
            decode("220=0101"),
            Err(DecodeError::InvalidPadding { position: 3 })
        );
        assert_eq!(
            decode("Zg==Zg=="),
            Err(DecodeError::InvalidPadding { position: 2 })
        );
    }

    #[test]
    fn rejects_url_alphabet_and_trailing_bits() {
        assert_eq!(
            decode("-_-_"),
            Err(DecodeError::InvalidCharacter { position: 0 })
        );
        assert_eq!(
            decode("Zh=="),
            Err(DecodeError::NonCanonical { position: 1 })
        );
        assert_eq!(
            decode("Zm9="),
            Err(DecodeError::NonCanonical { position: 2 })
        );
    }
}
