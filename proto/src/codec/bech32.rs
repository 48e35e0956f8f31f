//! bech32 (BIP-173) as NIP-19 uses it: `npub`, `nsec` and any other human-readable part.
//!
//! Only the original bech32 checksum is accepted; a string with a bech32m (BIP-350) checksum is
//! [`DecodeError::Bech32m`]. Mixed case is rejected; an all upper-case string is accepted (BIP-173
//! allows it) and its human-readable part is returned in lower case. The data part must convert to
//! bytes exactly: leftover padding bits must be zero and fewer than five. Strings longer than 1023
//! characters are rejected, the length up to which the checksum is guaranteed to catch errors.

use alloc::string::String;
use alloc::vec::Vec;

use ::bech32::primitives::decode::{CharError, ChecksumError, UncheckedHrpstring};
use ::bech32::{Bech32, Bech32m, ByteIterExt, Fe32IterExt, Hrp};

use super::DecodeError;

/// The longest bech32 string accepted, in characters (the checksum's code length).
pub const MAX_LENGTH: usize = 1023;

const NPUB: Hrp = Hrp::parse_unchecked("npub");
const NSEC: Hrp = Hrp::parse_unchecked("nsec");

/// Encodes `data` under the human-readable part `hrp` with a bech32 checksum, in lower case.
///
/// `hrp` may be given in either case but not mixed; it is an error if it is empty, longer than 83
/// characters, has characters outside ASCII `!`..`~`, or if the result would be longer than
/// [`MAX_LENGTH`].
pub fn encode(hrp: &str, data: &[u8]) -> Result<String, DecodeError> {
    let hrp = Hrp::parse(hrp).map_err(|_| DecodeError::InvalidHrp)?;
    ::bech32::encode_lower::<Bech32>(hrp, data)
        .map_err(|_| DecodeError::TooLong { max: MAX_LENGTH })
}

/// Decodes a bech32 string into its lower-case human-readable part and its data bytes.
pub fn decode(text: &str) -> Result<(String, Vec<u8>), DecodeError> {
    if text.len() > MAX_LENGTH {
        return Err(DecodeError::TooLong { max: MAX_LENGTH });
    }
    let unchecked = UncheckedHrpstring::new(text).map_err(|e| match e {
        ::bech32::primitives::decode::UncheckedHrpstringError::Char(c) => match c {
            CharError::MissingSeparator => DecodeError::MissingSeparator,
            CharError::MixedCase => DecodeError::MixedCase,
            CharError::InvalidChar(ch) => DecodeError::InvalidCharacter {
                position: invalid_char_position(text, ch),
            },
            _ => DecodeError::InvalidLength { length: text.len() },
        },
        _ => DecodeError::InvalidHrp,
    })?;
    if let Err(e) = unchecked.validate_checksum::<Bech32>() {
        return Err(match e {
            ChecksumError::InvalidResidue(_) if unchecked.has_valid_checksum::<Bech32m>() => {
                DecodeError::Bech32m
            }
            ChecksumError::InvalidResidue(_) => DecodeError::Checksum,
            ChecksumError::CodeLength(_) => DecodeError::TooLong { max: MAX_LENGTH },
            _ => DecodeError::InvalidLength { length: text.len() },
        });
    }
    let hrp = unchecked.hrp().to_lowercase();
    let checked = unchecked.remove_checksum::<Bech32>();
    if checked.validate_segwit_padding().is_err() {
        // The padding bits live in the last data character, just before the 6-character checksum.
        return Err(DecodeError::NonCanonical {
            position: text.len() - 7,
        });
    }
    Ok((hrp, checked.byte_iter().collect()))
}

/// Where `ch` sits in the data part (after the last `1`), where the bech32 crate found it.
fn invalid_char_position(text: &str, ch: char) -> usize {
    let data_start = text.rfind('1').map_or(0, |i| i + 1);
    text[data_start..]
        .find(ch)
        .map_or(data_start, |i| data_start + i)
}

/// Encodes a 32-byte key under a constant human-readable part; 32 bytes always fit in a bech32
/// string, so the crate's infallible iterator API is used.
fn encode_key(hrp: &Hrp, key: &[u8; 32]) -> String {
    key.iter()
        .copied()
        .bytes_to_fes()
        .with_checksum::<Bech32>(hrp)
        .chars()
        .collect()
}

fn decode_key(text: &str, expected: &'static str) -> Result<[u8; 32], DecodeError> {
    let (hrp, data) = decode(text)?;
    if hrp != expected {
        return Err(DecodeError::WrongPrefix { expected });
    }
    super::to_array(data)
}

/// Encodes a 32-byte public key as a NIP-19 `npub`.
pub fn encode_npub(key: &[u8; 32]) -> String {
    encode_key(&NPUB, key)
}

/// Decodes a NIP-19 `npub` into its 32-byte public key; another human-readable part is
/// [`DecodeError::WrongPrefix`].
pub fn decode_npub(text: &str) -> Result<[u8; 32], DecodeError> {
    decode_key(text, "npub")
}

/// Encodes a 32-byte secret key as a NIP-19 `nsec`.
pub fn encode_nsec(key: &[u8; 32]) -> String {
    encode_key(&NSEC, key)
}

/// Decodes a NIP-19 `nsec` into its 32-byte secret key; another human-readable part is
/// [`DecodeError::WrongPrefix`].
pub fn decode_nsec(text: &str) -> Result<[u8; 32], DecodeError> {
    decode_key(text, "nsec")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::hex;
    use alloc::string::ToString;
    use alloc::vec;

    const PUB_HEX: &str = "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d";
    const NPUB_TEXT: &str = "npub180cvv07tjdrrgpa0j7j7tmnyl2yr6yr7l8j4s3evf6u64th6gkwsyjh6w6";
    const SEC_HEX: &str = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa";
    const NSEC_TEXT: &str = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5";

    #[test]
    fn nip19_vectors() {
        let pk: [u8; 32] = hex::decode_array(PUB_HEX).unwrap();
        assert_eq!(encode_npub(&pk), NPUB_TEXT);
        assert_eq!(decode_npub(NPUB_TEXT), Ok(pk));
        assert_eq!(encode("npub", &pk).unwrap(), NPUB_TEXT);

        let sk: [u8; 32] = hex::decode_array(SEC_HEX).unwrap();
        assert_eq!(encode_nsec(&sk), NSEC_TEXT);
        assert_eq!(decode_nsec(NSEC_TEXT), Ok(sk));
        assert_eq!(
            decode(NSEC_TEXT).unwrap(),
            ("nsec".to_string(), sk.to_vec())
        );
    }

    #[test]
    fn wrong_prefix() {
        assert_eq!(
            decode_npub(NSEC_TEXT),
            Err(DecodeError::WrongPrefix { expected: "npub" })
        );
        assert_eq!(
            decode_nsec(NPUB_TEXT),
            Err(DecodeError::WrongPrefix { expected: "nsec" })
        );
    }

    #[test]
    fn upper_case_accepted_mixed_case_rejected() {
        let upper = NPUB_TEXT.to_ascii_uppercase();
        let (hrp, _) = decode(&upper).unwrap();
        assert_eq!(hrp, "npub");
        assert!(decode_npub(&upper).is_ok());
        let mixed = alloc::format!("NPUB{}", &NPUB_TEXT[4..]);
        assert_eq!(decode(&mixed), Err(DecodeError::MixedCase));
    }

    #[test]
    fn rejects_bech32m() {
        let pk: [u8; 32] = hex::decode_array(PUB_HEX).unwrap();
        let hrp = Hrp::parse("npub").unwrap();
        let m = ::bech32::encode::<Bech32m>(hrp, &pk).unwrap();
        assert_eq!(decode(&m), Err(DecodeError::Bech32m));
        assert_eq!(decode_npub(&m), Err(DecodeError::Bech32m));
        // The BIP-350 test vector.
        assert_eq!(decode("a1lqfn3a"), Err(DecodeError::Bech32m));
    }

    #[test]
    fn checksum_and_character_errors() {
        let mut bad = NPUB_TEXT.to_string();
        bad.pop();
        bad.push('7');
        assert_eq!(decode(&bad), Err(DecodeError::Checksum));
        // 'b' is not in the bech32 data alphabet.
        let b = NPUB_TEXT.replacen('0', "b", 1);
        assert_eq!(
            decode(&b),
            Err(DecodeError::InvalidCharacter { position: 6 })
        );
        assert_eq!(decode(""), Err(DecodeError::MissingSeparator));
        // With no separator the whole string is data, and `b` is not a data character.
        assert_eq!(
            decode("npub"),
            Err(DecodeError::InvalidCharacter { position: 3 })
        );
        assert_eq!(decode("qqqq"), Err(DecodeError::MissingSeparator));
        assert_eq!(
            decode("npub1"),
            Err(DecodeError::InvalidLength { length: 5 })
        );
        assert_eq!(
            decode("npub1qqqqq"),
            Err(DecodeError::InvalidLength { length: 10 })
        );
        assert_eq!(decode("1qqqqqqqq"), Err(DecodeError::InvalidHrp));
    }

    #[test]
    fn empty_payload_and_lengths() {
        let s = encode("a", &[]).unwrap();
        assert_eq!(s, "a12uel5l");
        assert_eq!(decode(&s).unwrap(), ("a".to_string(), vec![]));
        let short = encode("npub", &[1, 2, 3]).unwrap();
        assert_eq!(
            decode_npub(&short),
            Err(DecodeError::WrongLength {
                expected: 32,
                actual: 3
            })
        );
        // 640 bytes is 1024 data characters: too long for the checksum.
        assert_eq!(
            encode("a", &[0u8; 640]),
            Err(DecodeError::TooLong { max: MAX_LENGTH })
        );
        let long = "a".repeat(1100);
        assert_eq!(decode(&long), Err(DecodeError::TooLong { max: MAX_LENGTH }));
        assert_eq!(encode("", &[1]), Err(DecodeError::InvalidHrp));
        assert_eq!(encode("nPub", &[1]), Err(DecodeError::InvalidHrp));
    }

    #[test]
    fn rejects_non_zero_padding_bits() {
        // One byte is two 5-bit groups with 2 padding bits; set them and re-checksum.
        let hrp = Hrp::parse("a").unwrap();
        use ::bech32::Fe32;
        let fes = [Fe32::try_from(0u8).unwrap(), Fe32::try_from(1u8).unwrap()];
        let s: String = fes
            .iter()
            .copied()
            .with_checksum::<Bech32>(&hrp)
            .chars()
            .collect();
        assert_eq!(decode(&s), Err(DecodeError::NonCanonical { position: 3 }));
        // Three groups is 15 bits: 7 leftover bits is too much padding.
        let fes = [Fe32::try_from(0u8).unwrap(); 3];
        let s: String = fes
            .iter()
            .copied()
            .with_checksum::<Bech32>(&hrp)
            .chars()
            .collect();
        assert_eq!(decode(&s), Err(DecodeError::NonCanonical { position: 4 }));
    }
}
