//! NIP-44 v2 on the crypto provider: the encryption a meshstr grant (kind 30801) and job receipt
//! (kind 30811) are addressed to their subject with (§6.1, §8.1).
//!
//! The conversation key is HKDF-SHA256 extract of the secp256k1 ECDH x-coordinate under the salt
//! `nip44-v2`; each message's ChaCha20 key, ChaCha20 nonce and HMAC key are HKDF expand of it
//! under a 32-byte random nonce; the plaintext is length-prefixed and padded; the payload is
//! `base64(0x02 ‖ nonce ‖ ciphertext ‖ HMAC-SHA256(hmac_key, nonce ‖ ciphertext))`. Checked
//! against the published NIP-44 vectors (`vectors/meshstr/nip44.vectors.json`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::codec::base64;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret, hkdf_expand, hkdf_extract};

/// The HKDF salt of the conversation key.
pub const SALT: &[u8] = b"nip44-v2";
/// The version byte.
pub const VERSION: u8 = 2;
/// The shortest plaintext, in bytes.
pub const MIN_PLAINTEXT: usize = 1;
/// The longest plaintext, in bytes.
pub const MAX_PLAINTEXT: usize = 65535;

/// Why a payload could not be made or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nip44Error {
    /// A key is not valid (a secret outside the group, an x not on the curve).
    Key(CryptoError),
    /// A plaintext shorter than 1 byte or longer than 65 535.
    PlaintextLength,
    /// A payload starting `#`: an encoding this version does not know.
    UnknownVersion,
    /// A payload of the wrong length or not padded standard base64.
    Encoding,
    /// A version byte other than 2.
    Version,
    /// The MAC does not match: the wrong key, or a tampered payload.
    Mac,
    /// The decrypted padding is not what the length prefix implies.
    Padding,
}

/// The conversation key of `secret` and the peer's x-only key (symmetric between the two).
pub fn conversation_key(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    peer: &[u8; 32],
) -> Result<[u8; 32], Nip44Error> {
    let shared = provider
        .secp256k1_ecdh(secret, peer)
        .map_err(Nip44Error::Key)?;
    Ok(hkdf_extract(provider, SALT, &shared))
}

/// One message's keys.
#[derive(Clone, PartialEq, Eq)]
pub struct MessageKeys {
    /// The ChaCha20 key.
    pub chacha_key: [u8; 32],
    /// The ChaCha20 nonce.
    pub chacha_nonce: [u8; 12],
    /// The HMAC-SHA256 key.
    pub hmac_key: [u8; 32],
}

impl core::fmt::Debug for MessageKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("MessageKeys(<redacted>)")
    }
}

/// The message keys of `conversation_key` under `nonce`: HKDF expand to 76 bytes.
pub fn message_keys(
    provider: &dyn CryptoProvider,
    conversation_key: &[u8; 32],
    nonce: &[u8; 32],
) -> MessageKeys {
    let mut okm = [0u8; 76];
    hkdf_expand(provider, conversation_key, nonce, &mut okm);
    let mut k = MessageKeys {
        chacha_key: [0; 32],
        chacha_nonce: [0; 12],
        hmac_key: [0; 32],
    };
    k.chacha_key.copy_from_slice(&okm[..32]);
    k.chacha_nonce.copy_from_slice(&okm[32..44]);
    k.hmac_key.copy_from_slice(&okm[44..]);
    k
}

/// The padded length of a plaintext of `len` bytes (`len` ≥ 1).
pub fn calc_padded_len(len: usize) -> usize {
    if len <= 32 {
        return 32;
    }
    let next_power = 1usize << (usize::BITS - (len - 1).leading_zeros());
    let chunk = if next_power <= 256 {
        32
    } else {
        next_power / 8
    };
    chunk * ((len - 1) / chunk + 1)
}

fn pad(plaintext: &[u8]) -> Result<Vec<u8>, Nip44Error> {
    let len = plaintext.len();
    if !(MIN_PLAINTEXT..=MAX_PLAINTEXT).contains(&len) {
        return Err(Nip44Error::PlaintextLength);
    }
    let mut out = Vec::with_capacity(2 + calc_padded_len(len));
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(plaintext);
    out.resize(2 + calc_padded_len(len), 0);
    Ok(out)
}

fn unpad(padded: &[u8]) -> Result<Vec<u8>, Nip44Error> {
    if padded.len() < 2 {
        return Err(Nip44Error::Padding);
    }
    let len = usize::from(u16::from_be_bytes([padded[0], padded[1]]));
    if len < MIN_PLAINTEXT || padded.len() != 2 + calc_padded_len(len) {
        return Err(Nip44Error::Padding);
    }
    Ok(padded[2..2 + len].to_vec())
}

/// Encrypts `plaintext` under `conversation_key` with the given 32-byte `nonce` (drawn by the
/// caller from its injected RNG; never reuse one).
pub fn encrypt_with_nonce(
    provider: &dyn CryptoProvider,
    conversation_key: &[u8; 32],
    nonce: &[u8; 32],
    plaintext: &str,
) -> Result<String, Nip44Error> {
    let padded = pad(plaintext.as_bytes())?;
    let k = message_keys(provider, conversation_key, nonce);
    let ciphertext = provider.chacha20(&k.chacha_key, &k.chacha_nonce, &padded);
    let mac = provider.hmac_sha256(&k.hmac_key, &[nonce, &ciphertext]);
    let mut raw = Vec::with_capacity(1 + 32 + ciphertext.len() + 32);
    raw.push(VERSION);
    raw.extend_from_slice(nonce);
    raw.extend_from_slice(&ciphertext);
    raw.extend_from_slice(&mac);
    Ok(base64::encode(&raw))
}

/// Encrypts with a fresh nonce from `rng`.
pub fn encrypt(
    provider: &dyn CryptoProvider,
    conversation_key: &[u8; 32],
    plaintext: &str,
    rng: &mut dyn rand_core::CryptoRng,
) -> Result<String, Nip44Error> {
    let mut nonce = [0u8; 32];
    rng.fill_bytes(&mut nonce);
    encrypt_with_nonce(provider, conversation_key, &nonce, plaintext)
}

/// Constant-time equality of two MACs.
fn mac_eq(a: &[u8; 32], b: &[u8]) -> bool {
    b.len() == 32 && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Decrypts a payload under `conversation_key`.
pub fn decrypt(
    provider: &dyn CryptoProvider,
    conversation_key: &[u8; 32],
    payload: &str,
) -> Result<String, Nip44Error> {
    if payload.starts_with('#') {
        return Err(Nip44Error::UnknownVersion);
    }
    if !(132..=87472).contains(&payload.len()) {
        return Err(Nip44Error::Encoding);
    }
    let raw = base64::decode(payload).map_err(|_| Nip44Error::Encoding)?;
    if !(99..=65603).contains(&raw.len()) {
        return Err(Nip44Error::Encoding);
    }
    if raw[0] != VERSION {
        return Err(Nip44Error::Version);
    }
    let nonce: [u8; 32] = raw[1..33].try_into().map_err(|_| Nip44Error::Encoding)?;
    let (ciphertext, mac) = raw[33..].split_at(raw.len() - 33 - 32);
    let k = message_keys(provider, conversation_key, &nonce);
    let want = provider.hmac_sha256(&k.hmac_key, &[&nonce, ciphertext]);
    if !mac_eq(&want, mac) {
        return Err(Nip44Error::Mac);
    }
    let padded = provider.chacha20(&k.chacha_key, &k.chacha_nonce, ciphertext);
    let plain = unpad(&padded)?;
    String::from_utf8(plain).map_err(|_| Nip44Error::Padding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::default_provider;

    #[test]
    fn padding_lengths() {
        for (len, want) in [
            (1, 32),
            (32, 32),
            (33, 64),
            (64, 64),
            (65, 96),
            (256, 256),
            (257, 320),
            (65535, 65536),
        ] {
            assert_eq!(calc_padded_len(len), want, "{len}");
        }
    }

    #[test]
    fn round_trip_and_tamper() {
        let p = default_provider();
        let a = Secp256k1Secret::from_bytes([1; 32]);
        let b = Secp256k1Secret::from_bytes([2; 32]);
        let pa = p.schnorr_public_key(&a).unwrap();
        let pb = p.schnorr_public_key(&b).unwrap();
        let k = conversation_key(p, &a, &pb).unwrap();
        assert_eq!(k, conversation_key(p, &b, &pa).unwrap());
        let c = encrypt_with_nonce(p, &k, &[9; 32], "grant body").unwrap();
        assert_eq!(decrypt(p, &k, &c).unwrap(), "grant body");
        let mut raw = base64::decode(&c).unwrap();
        raw[40] ^= 1;
        assert_eq!(decrypt(p, &k, &base64::encode(&raw)), Err(Nip44Error::Mac));
        assert_eq!(decrypt(p, &[0; 32], &c), Err(Nip44Error::Mac));
        assert_eq!(
            encrypt_with_nonce(p, &k, &[9; 32], ""),
            Err(Nip44Error::PlaintextLength)
        );
    }
}
