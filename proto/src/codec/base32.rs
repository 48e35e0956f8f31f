//! base32 with the RFC 4648 alphabet, lower case, without padding (Minca room ids).
//!
//! Only lower case is accepted: room ids are compared as strings, so an upper-case spelling of the
//! same bytes would be a second name for one room. Padding and non-zero unused trailing bits are
//! rejected for the same reason.

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;
use data_encoding::BASE32_NOPAD;

/// Encodes `bytes` as lower-case unpadded base32.
pub fn encode(bytes: &[u8]) -> String {
    let mut text = BASE32_NOPAD.encode(bytes);
    text.make_ascii_lowercase();
    text
}

/// Decodes lower-case unpadded base32; upper case, padding and non-canonical trailing bits are
/// errors.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    // data-encoding's RFC alphabet is upper case; refuse upper case here so it can't slip through
    // the case fold below.
    if let Some(position) = text.bytes().position(|b| b.is_ascii_uppercase()) {
        return Err(DecodeError::InvalidCharacter { position });
    }
    // Upper-casing ASCII keeps every byte offset, so positions in errors still point into `text`.
    super::decode_with(&BASE32_NOPAD, false, &text.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors_lower_case_without_padding() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "my"),
            (b"fo", "mzxq"),
            (b"foo", "mzxw6"),
            (b"foob", "mzxw6yq"),
            (b"fooba", "mzxw6ytb"),
            (b"foobar", "mzxw6ytboi"),
        ];
        for (bytes, text) in cases {
            assert_eq!(encode(bytes), text);
            assert_eq!(decode(text).unwrap(), bytes);
        }
    }

    #[test]
    fn rejects_upper_case_padding_and_wrong_alphabet() {
        assert_eq!(
            decode("MY"),
            Err(DecodeError::InvalidCharacter { position: 0 })
        );
        assert_eq!(
            decode("mY"),
            Err(DecodeError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            decode("my======"),
            Err(DecodeError::InvalidPadding { position: 2 })
        );
        // 0, 1, 8 and 9 are not in the RFC 4648 alphabet.
        assert_eq!(
            decode("m1"),
            Err(DecodeError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            decode("m0"),
            Err(DecodeError::InvalidCharacter { position: 1 })
        );
    }

    #[test]
    fn rejects_trailing_bits_and_bad_length() {
        assert_eq!(decode("mz"), Err(DecodeError::NonCanonical { position: 1 }));
        assert_eq!(decode("m"), Err(DecodeError::InvalidLength { length: 1 }));
        assert_eq!(decode("mzx"), Err(DecodeError::InvalidLength { length: 3 }));
        assert!(decode("mé").is_err());
    }
}
