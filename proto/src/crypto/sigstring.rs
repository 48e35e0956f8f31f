//! AIRC's Ed25519 signature strings: `ed25519:<kid>:<base64>`.
//!
//! `kid` is the first 8 lower-case hex digits of SHA-256 over the raw 32-byte public key, and
//! `base64` is the 64-byte signature in standard, padded base64. The kid lets a verifier pick the
//! key among a realm's keys; [`verify`] still checks that it belongs to the key it is given.

use alloc::string::String;
use core::fmt;

use data_encoding::{BASE64, HEXLOWER};

use super::{CryptoProvider, Ed25519Seed};

/// The only algorithm AIRC signature strings name.
const ALGORITHM: &str = "ed25519";

/// The number of hex digits in a kid.
const KID_LEN: usize = 8;

/// The kid of an Ed25519 public key: the first 8 lower-case hex digits of its SHA-256.
pub fn kid(provider: &dyn CryptoProvider, public: &[u8; 32]) -> String {
    let digest = provider.sha256(&[public]);
    HEXLOWER.encode(&digest[..KID_LEN / 2])
}

/// Why a string is not an AIRC signature string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SigStringError {
    /// Not three `:`-separated fields.
    Format,
    /// The algorithm is not `ed25519`.
    Algorithm,
    /// The kid is not exactly 8 lower-case hex digits.
    Kid,
    /// The signature is not standard padded base64.
    Base64,
    /// The signature does not decode to 64 bytes.
    Length,
}

impl fmt::Display for SigStringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Format => "signature string is not <alg>:<kid>:<sig>",
            Self::Algorithm => "signature algorithm is not ed25519",
            Self::Kid => "kid is not 8 lower-case hex digits",
            Self::Base64 => "signature is not standard padded base64",
            Self::Length => "signature is not 64 bytes",
        })
    }
}

impl core::error::Error for SigStringError {}

/// A parsed `ed25519:<kid>:<base64>` signature string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigString {
    /// The key id: 8 lower-case hex digits (see [`kid`]).
    pub kid: String,
    /// The raw Ed25519 signature.
    pub sig: [u8; 64],
}

impl SigString {
    /// Parses a signature string, accepting only `ed25519`, a well-formed kid and a base64
    /// signature of exactly 64 bytes.
    pub fn parse(s: &str) -> Result<Self, SigStringError> {
        let mut fields = s.splitn(3, ':');
        let (Some(alg), Some(kid), Some(b64)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(SigStringError::Format);
        };
        if alg != ALGORITHM {
            return Err(SigStringError::Algorithm);
        }
        if kid.len() != KID_LEN || !kid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(SigStringError::Kid);
        }
        let bytes = BASE64
            .decode(b64.as_bytes())
            .map_err(|_| SigStringError::Base64)?;
        let sig = <[u8; 64]>::try_from(bytes.as_slice()).map_err(|_| SigStringError::Length)?;
        Ok(Self {
            kid: kid.into(),
            sig,
        })
    }
}

impl fmt::Display for SigString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ALGORITHM}:{}:{}", self.kid, BASE64.encode(&self.sig))
    }
}

impl core::str::FromStr for SigString {
    type Err = SigStringError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Signs `msg` with an Ed25519 seed, as a signature string carrying the key's kid.
///
/// Working out the kid derives the public key, a scalar multiplication as costly as the
/// signature itself; a signer that signs often keeps its kid and calls [`sign_with_kid`].
pub fn sign(provider: &dyn CryptoProvider, seed: &Ed25519Seed, msg: &[u8]) -> SigString {
    let public = provider.ed25519_public_key(seed);
    sign_with_kid(provider, seed, kid(provider, &public), msg)
}

/// [`sign`] with the seed's kid already known (it must be [`kid`] of the seed's public key).
pub fn sign_with_kid(
    provider: &dyn CryptoProvider,
    seed: &Ed25519Seed,
    kid: String,
    msg: &[u8],
) -> SigString {
    SigString {
        kid,
        sig: provider.ed25519_sign(seed, msg),
    }
}

/// Checks a signature string against `public`: the kid must be this key's, and the signature
/// must verify over `msg`.
pub fn verify(provider: &dyn CryptoProvider, public: &[u8; 32], msg: &[u8], s: &SigString) -> bool {
    kid(provider, public) == s.kid && provider.ed25519_verify(public, msg, &s.sig)
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use alloc::string::ToString;

    use super::*;
    use crate::crypto::RustCrypto;

    const MSG: &[u8] = b"0f5a3c2e-9b1d-4e77-a6c8-1d2e3f4a5b6c\nairc://example.com/alice/x\nairc://partner.example/support/desk\n1790380000123\ntext/plain\n\nhello";
    const SIGNED: &str = "ed25519:65b60673:oyBI45ZxQdCsc8sPRs4SMLnfo5jHuqHHuOQ9SG6WIhu+le9DbGRBzmrZQj+sli7/PNwS2aJWL4l+KVx2q/b3BA==";

    fn spec_seed() -> Ed25519Seed {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 + 1;
        }
        Ed25519Seed::from_bytes(b)
    }

    #[test]
    fn airc_spec_vector() {
        let p = &RustCrypto;
        let seed = spec_seed();
        let public = p.ed25519_public_key(&seed);
        assert_eq!(
            BASE64.encode(&public),
            "ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ="
        );
        assert_eq!(kid(p, &public), "65b60673");

        let s = sign(p, &seed, MSG);
        assert_eq!(s.to_string(), SIGNED);
        let parsed = SigString::parse(SIGNED).unwrap();
        assert_eq!(parsed, s);
        assert!(verify(p, &public, MSG, &parsed));
    }

    #[test]
    fn verify_rejects_wrong_kid_message_or_key() {
        let p = &RustCrypto;
        let seed = spec_seed();
        let public = p.ed25519_public_key(&seed);
        let good = SigString::parse(SIGNED).unwrap();

        let mut wrong_kid = good.clone();
        wrong_kid.kid = "00000000".into();
        assert!(!verify(p, &public, MSG, &wrong_kid));

        assert!(!verify(p, &public, b"hello", &good));

        let other = p.ed25519_public_key(&Ed25519Seed::from_bytes([9; 32]));
        assert!(!verify(p, &other, MSG, &good));
    }

    #[test]
    fn parse_rejects_malformed() {
        let b64 = SIGNED.rsplit(':').next().unwrap();
        let cases = [
            ("", SigStringError::Format),
            ("ed25519", SigStringError::Format),
            ("ed25519:65b60673", SigStringError::Format),
            (
                &*alloc::format!("ecdsa:65b60673:{b64}"),
                SigStringError::Algorithm,
            ),
            (
                &*alloc::format!("ED25519:65b60673:{b64}"),
                SigStringError::Algorithm,
            ),
            (
                &*alloc::format!("ed25519:65B60673:{b64}"),
                SigStringError::Kid,
            ),
            (
                &*alloc::format!("ed25519:65b6067:{b64}"),
                SigStringError::Kid,
            ),
            (
                &*alloc::format!("ed25519:65b606733:{b64}"),
                SigStringError::Kid,
            ),
            (
                &*alloc::format!("ed25519:65b6067g:{b64}"),
                SigStringError::Kid,
            ),
            ("ed25519:65b60673:not base64!", SigStringError::Base64),
            // Unpadded and base64url forms are not the standard alphabet with padding.
            (
                &*alloc::format!("ed25519:65b60673:{}", b64.trim_end_matches('=')),
                SigStringError::Base64,
            ),
            (
                &*alloc::format!(
                    "ed25519:65b60673:{}",
                    b64.replace('+', "-").replace('/', "_")
                ),
                SigStringError::Base64,
            ),
            (
                &*alloc::format!("ed25519:65b60673:{b64}:x"),
                SigStringError::Base64,
            ),
            ("ed25519:65b60673:AAAA", SigStringError::Length),
            (
                &*alloc::format!("ed25519:65b60673:{}", BASE64.encode(&[0u8; 65])),
                SigStringError::Length,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(SigString::parse(input), Err(want), "{input:?}");
        }
    }
}
