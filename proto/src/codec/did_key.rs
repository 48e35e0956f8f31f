//! `did:key` identifiers (W3C did:key method) for P-256, Ed25519 and secp256k1 public keys.
//!
//! A did:key is `did:key:` + multibase base58btc (`z`) of the unsigned-varint multicodec code
//! followed by the key bytes:
//!
//! | key       | multicodec            | key bytes                      | starts with    |
//! |-----------|-----------------------|--------------------------------|----------------|
//! | P-256     | `p256-pub` 0x1200     | 33, SEC1 compressed point      | `did:key:zDn`  |
//! | Ed25519   | `ed25519-pub` 0xed    | 32                             | `did:key:z6Mk` |
//! | secp256k1 | `secp256k1-pub` 0xe7  | 33, SEC1 compressed point      | `did:key:zQ3s` |
//!
//! Parsing accepts only the bare DID: a `#fragment` (a verification method id) is
//! [`DecodeError::UnexpectedFragment`], so callers strip it first and decide themselves whether it
//! matched. Since base58btc and minimal varints have one spelling per value, a parsed key
//! re-encodes to exactly the text it came from. Only the point's form is checked (first byte `0x02`
//! or `0x03`); whether it lies on the curve is the crypto provider's job.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::DecodeError;

const PREFIX: &str = "did:key:z";

const P256_PUB: u64 = 0x1200;
const ED25519_PUB: u64 = 0xed;
const SECP256K1_PUB: u64 = 0xe7;

/// The longest method-specific part accepted before base58 decoding (whose cost is quadratic in
/// the length). The longest supported payload, 2 varint bytes + 33 key bytes, is 48 characters;
/// the slack lets an uncompressed point (67 bytes, 92 characters) get the clearer
/// [`DecodeError::WrongLength`].
const MAX_ENCODED_LEN: usize = 128;

/// A public key named by a `did:key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DidKey {
    /// A P-256 public key as a 33-byte SEC1 compressed point.
    P256([u8; 33]),
    /// An Ed25519 public key.
    Ed25519([u8; 32]),
    /// A secp256k1 public key as a 33-byte SEC1 compressed point.
    Secp256k1([u8; 33]),
}

impl DidKey {
    /// Parses a `did:key:z…` string.
    ///
    /// Errors: a missing `did:key:z` prefix is [`DecodeError::WrongPrefix`], a `#fragment` is
    /// [`DecodeError::UnexpectedFragment`], bad base58 is [`DecodeError::InvalidCharacter`], a
    /// malformed or non-minimal varint is [`DecodeError::InvalidVarint`], an unsupported key type
    /// is [`DecodeError::UnknownMulticodec`], a key of the wrong size is
    /// [`DecodeError::WrongLength`], and a compressed point not starting with `0x02`/`0x03` is
    /// [`DecodeError::InvalidPointEncoding`].
    pub fn parse(did: &str) -> Result<Self, DecodeError> {
        if did.contains('#') {
            return Err(DecodeError::UnexpectedFragment);
        }
        let encoded = did
            .strip_prefix(PREFIX)
            .ok_or(DecodeError::WrongPrefix { expected: PREFIX })?;
        if encoded.len() > MAX_ENCODED_LEN {
            return Err(DecodeError::TooLong {
                max: PREFIX.len() + MAX_ENCODED_LEN,
            });
        }
        let bytes = super::base58btc::decode(encoded).map_err(|e| match e {
            DecodeError::InvalidCharacter { position } => DecodeError::InvalidCharacter {
                position: position + PREFIX.len(),
            },
            other => other,
        })?;
        let (code, key) = read_varint(&bytes)?;
        match code {
            P256_PUB => Ok(Self::P256(compressed_point(key)?)),
            ED25519_PUB => Ok(Self::Ed25519(super::to_array(key.to_vec())?)),
            SECP256K1_PUB => Ok(Self::Secp256k1(compressed_point(key)?)),
            code => Err(DecodeError::UnknownMulticodec { code }),
        }
    }

    /// The DID string, `did:key:z…`.
    pub fn to_did(&self) -> String {
        let (varint, key): (&[u8], &[u8]) = match self {
            // Unsigned-varint encodings of the three multicodec codes.
            Self::P256(k) => (&[0x80, 0x24], k),
            Self::Ed25519(k) => (&[0xed, 0x01], k),
            Self::Secp256k1(k) => (&[0xe7, 0x01], k),
        };
        let mut payload = Vec::with_capacity(varint.len() + key.len());
        payload.extend_from_slice(varint);
        payload.extend_from_slice(key);
        let mut did = String::from(PREFIX);
        did.push_str(&super::base58btc::encode(&payload));
        did
    }

    /// The P-256 compressed point, if this is a P-256 key.
    pub fn p256(&self) -> Option<&[u8; 33]> {
        match self {
            Self::P256(k) => Some(k),
            _ => None,
        }
    }

    /// The Ed25519 public key, if this is an Ed25519 key.
    pub fn ed25519(&self) -> Option<&[u8; 32]> {
        match self {
            Self::Ed25519(k) => Some(k),
            _ => None,
        }
    }

    /// The secp256k1 compressed point, if this is a secp256k1 key.
    pub fn secp256k1(&self) -> Option<&[u8; 33]> {
        match self {
            Self::Secp256k1(k) => Some(k),
            _ => None,
        }
    }
}

impl fmt::Display for DidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_did())
    }
}

impl core::str::FromStr for DidKey {
    type Err = DecodeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Reads a multiformats unsigned varint, returning the value and the bytes after it.
///
/// The multiformats spec caps a varint at 9 bytes and requires the minimal encoding, which keeps a
/// did:key to one spelling.
fn read_varint(bytes: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            // A zero final byte after the first means a shorter encoding existed.
            if b == 0 && i > 0 {
                return Err(DecodeError::InvalidVarint);
            }
            return Ok((value, &bytes[i + 1..]));
        }
    }
    Err(DecodeError::InvalidVarint)
}

fn compressed_point(key: &[u8]) -> Result<[u8; 33], DecodeError> {
    let point: [u8; 33] = super::to_array(key.to_vec())?;
    match point[0] {
        0x02 | 0x03 => Ok(point),
        first_byte => Err(DecodeError::InvalidPointEncoding { first_byte }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::base58btc;
    use alloc::format;
    use alloc::string::ToString;

    fn did_of(payload: &[u8]) -> String {
        format!("did:key:z{}", base58btc::encode(payload))
    }

    #[test]
    fn p256_vectors_round_trip() {
        for did in [
            "did:key:zDnaemCBstFw5hzNdNggFHZm6GpHoHqNGrwEtrVi9CxGH9V7E",
            "did:key:zDnaenhB7GpWm1sDUA2mcNLjbZG85bD5uv8kXnX39YE9rGV3d",
        ] {
            let key = DidKey::parse(did).unwrap();
            assert!(key.p256().is_some(), "{did}");
            assert_eq!(key.ed25519(), None);
            assert_eq!(key.to_did(), did);
            assert_eq!(key.to_string(), did);
        }
    }

    #[test]
    fn ed25519_vector_round_trips() {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let key: DidKey = did.parse().unwrap();
        assert!(key.ed25519().is_some());
        assert_eq!(key.to_did(), did);
    }

    #[test]
    fn secp256k1_vector_round_trips() {
        let did = "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme";
        let key = DidKey::parse(did).unwrap();
        assert!(key.secp256k1().is_some());
        assert_eq!(key.p256(), None);
        assert_eq!(key.to_did(), did);
    }

    #[test]
    fn encodings_have_the_documented_prefixes() {
        let mut point = [0x11u8; 33];
        point[0] = 0x02;
        assert!(DidKey::P256(point).to_did().starts_with("did:key:zDn"));
        assert!(
            DidKey::Ed25519([0x11; 32])
                .to_did()
                .starts_with("did:key:z6Mk")
        );
        assert!(
            DidKey::Secp256k1(point)
                .to_did()
                .starts_with("did:key:zQ3s")
        );
        for key in [
            DidKey::P256(point),
            DidKey::Ed25519([0; 32]),
            DidKey::Secp256k1(point),
        ] {
            assert_eq!(DidKey::parse(&key.to_did()), Ok(key));
        }
    }

    #[test]
    fn rejects_prefix_and_fragment() {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let with_fragment = format!("{did}#z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK");
        assert_eq!(
            DidKey::parse(&with_fragment),
            Err(DecodeError::UnexpectedFragment)
        );
        let wrong = [
            "",
            "did:key:",
            "did:web:example.com",
            "DID:KEY:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
            "did:key:u7QEA",
            "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        ];
        for text in wrong {
            assert_eq!(
                DidKey::parse(text),
                Err(DecodeError::WrongPrefix {
                    expected: "did:key:z"
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_bad_payloads() {
        assert_eq!(DidKey::parse("did:key:z"), Err(DecodeError::InvalidVarint));
        assert_eq!(
            DidKey::parse("did:key:z6Mk0aXg"),
            Err(DecodeError::InvalidCharacter { position: 12 })
        );
        assert_eq!(
            DidKey::parse(&format!("did:key:z{}", "1".repeat(200))),
            Err(DecodeError::TooLong { max: 137 })
        );
        // Truncated varint.
        assert_eq!(
            DidKey::parse(&did_of(&[0x80])),
            Err(DecodeError::InvalidVarint)
        );
        // Non-minimal: 0xed written with a redundant zero continuation byte.
        let mut padded = std::vec![0xed, 0x81, 0x00];
        padded.extend_from_slice(&[0u8; 32]);
        assert_eq!(
            DidKey::parse(&did_of(&padded)),
            Err(DecodeError::InvalidVarint)
        );
        // Unknown codec (x25519-pub, 0xec).
        let mut x25519 = std::vec![0xec, 0x01];
        x25519.extend_from_slice(&[0u8; 32]);
        assert_eq!(
            DidKey::parse(&did_of(&x25519)),
            Err(DecodeError::UnknownMulticodec { code: 0xec })
        );
        // Wrong lengths.
        let mut short = std::vec![0xed, 0x01];
        short.extend_from_slice(&[0u8; 31]);
        assert_eq!(
            DidKey::parse(&did_of(&short)),
            Err(DecodeError::WrongLength {
                expected: 32,
                actual: 31
            })
        );
        let mut uncompressed = std::vec![0x80, 0x24, 0x04];
        uncompressed.extend_from_slice(&[0u8; 64]);
        assert_eq!(
            DidKey::parse(&did_of(&uncompressed)),
            Err(DecodeError::WrongLength {
                expected: 33,
                actual: 65
            })
        );
        // Right length, wrong point form.
        for (varint, first_byte) in [([0x80, 0x24], 0x04), ([0xe7, 0x01], 0x00)] {
            let mut p = varint.to_vec();
            p.push(first_byte);
            p.extend_from_slice(&[0u8; 32]);
            assert_eq!(
                DidKey::parse(&did_of(&p)),
                Err(DecodeError::InvalidPointEncoding { first_byte })
            );
        }
    }
}
