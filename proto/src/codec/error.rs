//! The one error type every decoder in [`crate::codec`] returns.

use core::fmt;

/// Why a piece of encoded text was rejected.
///
/// Positions are byte offsets into the input string. The enum is `#[non_exhaustive]` so that a new
/// codec can add a reason without breaking callers; match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// A character that is not in the encoding's alphabet (this includes the other base64
    /// alphabet's `+`, `/`, `-` and `_`, and upper-case letters where only lower case is accepted).
    InvalidCharacter {
        /// Byte offset of the first offending character.
        position: usize,
    },
    /// The encoded text has a length no valid encoding can have (for example 5 base64 characters,
    /// an odd number of hex digits, or an empty bech32 data part).
    InvalidLength {
        /// Length of the rejected text, in bytes.
        length: usize,
    },
    /// The text decoded, but to the wrong number of bytes for a fixed-size field.
    WrongLength {
        /// Bytes the field must have.
        expected: usize,
        /// Bytes the text decoded to.
        actual: usize,
    },
    /// Padding (`=`) is missing where required, present where forbidden, or malformed.
    InvalidPadding {
        /// Byte offset of the padding problem.
        position: usize,
    },
    /// The text decodes, but is not the one canonical spelling of its bytes: unused trailing bits
    /// are not zero, or (bech32) the final group carries non-zero or excess padding bits.
    NonCanonical {
        /// Byte offset of the character carrying the non-zero bits (0 where the codec does not
        /// report one).
        position: usize,
    },
    /// Upper- and lower-case letters mixed in a bech32 string.
    MixedCase,
    /// A bech32 string with no `1` separating the human-readable part from the data.
    MissingSeparator,
    /// The bech32 human-readable part is empty, too long, or has characters outside `!`..`~`.
    InvalidHrp,
    /// The text is longer than the encoding allows (bech32: 1023 characters in all).
    TooLong {
        /// The maximum length, in characters.
        max: usize,
    },
    /// The bech32 checksum does not match.
    Checksum,
    /// The string carries a bech32m checksum (BIP-350) where bech32 (BIP-173) is required, as in
    /// NIP-19.
    Bech32m,
    /// The text does not start with the prefix this field requires (a bech32 human-readable part
    /// such as `npub`, or `did:key:z`).
    WrongPrefix {
        /// The prefix that was required.
        expected: &'static str,
    },
    /// A `did:key` with a `#fragment`; callers strip the fragment before parsing.
    UnexpectedFragment,
    /// The multicodec varint is truncated, longer than 9 bytes, or not minimally encoded.
    InvalidVarint,
    /// A multicodec this decoder does not support.
    UnknownMulticodec {
        /// The multicodec code read from the varint.
        code: u64,
    },
    /// A compressed elliptic-curve point whose first byte is not `0x02` or `0x03`.
    InvalidPointEncoding {
        /// The first byte found.
        first_byte: u8,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidCharacter { position } => {
                write!(f, "invalid character at byte {position}")
            }
            Self::InvalidLength { length } => {
                write!(f, "no valid encoding has length {length}")
            }
            Self::WrongLength { expected, actual } => {
                write!(f, "decoded to {actual} bytes, expected {expected}")
            }
            Self::InvalidPadding { position } => write!(f, "invalid padding at byte {position}"),
            Self::NonCanonical { position } => {
                write!(
                    f,
                    "non-canonical encoding (non-zero unused bits) at byte {position}"
                )
            }
            Self::MixedCase => f.write_str("mixed upper and lower case"),
            Self::MissingSeparator => f.write_str("bech32 separator '1' missing"),
            Self::InvalidHrp => f.write_str("invalid bech32 human-readable part"),
            Self::TooLong { max } => write!(f, "longer than the maximum of {max} characters"),
            Self::Checksum => f.write_str("checksum mismatch"),
            Self::Bech32m => f.write_str("bech32m checksum where bech32 is required"),
            Self::WrongPrefix { expected } => write!(f, "expected prefix `{expected}`"),
            Self::UnexpectedFragment => f.write_str("did:key must not carry a #fragment"),
            Self::InvalidVarint => f.write_str("malformed multicodec varint"),
            Self::UnknownMulticodec { code } => write!(f, "unsupported multicodec 0x{code:x}"),
            Self::InvalidPointEncoding { first_byte } => write!(
                f,
                "compressed point must start with 0x02 or 0x03, found 0x{first_byte:02x}"
            ),
        }
    }
}

impl core::error::Error for DecodeError {}
