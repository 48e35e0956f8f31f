//! The wire encodings every weft protocol uses.
//!
//! Minca, AIRC, Nostr, NAP-MESH and meshstr put bytes on the wire as text: keys, nonces, signatures
//! and room ids in base64url, base32, base58btc, bech32 or hex; identities as `did:key`; signed
//! bodies as canonical JSON; and Minca measures and orders strings the way JavaScript does. This
//! module holds each of those encodings once, so that every protocol accepts exactly the same
//! spellings.
//!
//! Every decoder is strict: an input has one accepted spelling per value (no optional padding, no
//! alternative alphabet, no non-zero trailing bits, no mixed case), because protocols compare
//! identifiers as strings and sign over them, and two spellings of one value would let a peer
//! slip past a duplicate check or a signature. Bad input never panics; it returns a
//! [`DecodeError`] saying what was wrong and, where it makes sense, where.
//!
//! The alphabets and checksums come from trusted crates (`data-encoding`, `bs58`, `bech32`,
//! `serde_json`); this module only fixes which variant each protocol uses and how strict it is.
//! One exception, for speed: [`base58btc`] decodes a text within its alphabet with a loop of its
//! own (every did:key is decoded on the hot path, and `bs58` is quadratic in the length), held to
//! `bs58`'s bytes by a test; any other text still goes to `bs58`, so every error is its own.

mod error;

pub mod base32;
pub mod base58btc;
pub mod base64;
pub mod base64url;
pub mod bech32;
pub mod did_key;
pub mod hex;
pub mod js;
pub mod json;
pub mod object;

pub use error::DecodeError;

/// Decodes with a `data-encoding` encoding, mapping its errors onto [`DecodeError`].
///
/// `input` is passed through so that an `=` found where the encoding has no padding can be reported
/// as padding rather than as an unknown character. `padded` says whether the encoding reads `=`.
fn decode_with(
    encoding: &data_encoding::Encoding,
    padded: bool,
    input: &str,
) -> Result<alloc::vec::Vec<u8>, DecodeError> {
    // An encoding without padding decodes no `=`, so a text it decodes has none to look for:
    // the search below is only for the error to give.
    if !padded && let Ok(bytes) = encoding.decode(input.as_bytes()) {
        return Ok(bytes);
    }
    // data-encoding reads concatenated padded blocks (`220=0101`); a value has one spelling, so
    // padding may only end the text.
    if let Some(position) = input.trim_end_matches('=').find('=') {
        return Err(DecodeError::InvalidPadding { position });
    }
    encoding.decode(input.as_bytes()).map_err(|e| {
        let position = e.position;
        match e.kind {
            data_encoding::DecodeKind::Length => DecodeError::InvalidLength {
                length: input.len(),
            },
            data_encoding::DecodeKind::Symbol if input.as_bytes().get(position) == Some(&b'=') => {
                DecodeError::InvalidPadding { position }
            }
            data_encoding::DecodeKind::Symbol => DecodeError::InvalidCharacter { position },
            data_encoding::DecodeKind::Trailing => DecodeError::NonCanonical { position },
            data_encoding::DecodeKind::Padding => DecodeError::InvalidPadding { position },
        }
    })
}

/// Converts decoded bytes into a fixed-size array, or reports the size mismatch.
fn to_array<const N: usize>(bytes: alloc::vec::Vec<u8>) -> Result<[u8; N], DecodeError> {
    let actual = bytes.len();
    bytes.try_into().map_err(|_| DecodeError::WrongLength {
        expected: N,
        actual,
    })
}
