//! Hexadecimal: lower case out, either case in (Nostr ids, keys and signatures).

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;
use data_encoding::{HEXLOWER, HEXLOWER_PERMISSIVE};

/// Encodes `bytes` as lower-case hex.
pub fn encode(bytes: &[u8]) -> String {
    HEXLOWER.encode(bytes)
}

/// Decodes hex in upper or lower case (or both); an odd number of digits is an error.
///
/// Protocols that require lower case on the wire (NIP-01 ids) check that themselves, since the
/// rule differs between fields.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    super::decode_with(&HEXLOWER_PERMISSIVE, false, text)
}

/// Decodes hex into exactly `N` bytes, for fixed-size fields (a 32-byte key is 64 digits).
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], DecodeError> {
    super::to_array(decode(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn round_trip_and_case() {
        assert_eq!(encode(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(decode("00abff").unwrap(), vec![0x00, 0xab, 0xff]);
        assert_eq!(decode("00ABFF").unwrap(), vec![0x00, 0xab, 0xff]);
        assert_eq!(decode("00aBfF").unwrap(), vec![0x00, 0xab, 0xff]);
        assert_eq!(decode("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn errors() {
        assert_eq!(decode("abc"), Err(DecodeError::InvalidLength { length: 3 }));
        assert_eq!(
            decode("0g"),
            Err(DecodeError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            decode("0x12"),
            Err(DecodeError::InvalidCharacter { position: 1 })
        );
        assert!(decode("é1").is_err());
        assert_eq!(
            decode_array::<32>("00ab"),
            Err(DecodeError::WrongLength {
                expected: 32,
                actual: 2
            })
        );
        let key = [0x5au8; 32];
        assert_eq!(decode_array::<32>(&encode(&key)), Ok(key));
    }
}
