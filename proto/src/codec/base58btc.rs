//! base58 with the bitcoin alphabet (the multibase `z` encoding used by `did:key`).
//!
//! Leading zero bytes are spelled as leading `1`s, so every byte string has exactly one spelling.
//! Decoding is quadratic in the input length; callers bound the length of untrusted fields first
//! ([`super::did_key`] does).

use alloc::string::String;
use alloc::vec::Vec;

use super::DecodeError;

/// Encodes `bytes` as base58btc.
pub fn encode(bytes: &[u8]) -> String {
    bs58::encode(bytes).into_string()
}

/// Decodes base58btc; `0`, `O`, `I`, `l` and anything outside the alphabet are errors.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    match decode_valid(text.as_bytes()) {
        Some(bytes) => Ok(bytes),
        None => decode_slow(text),
    }
}

/// The 58 characters in order of value.
const ALPHABET: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// A byte that is not in [`ALPHABET`].
const NOT_BASE58: u8 = 0xff;

/// Each byte's value in [`ALPHABET`], or [`NOT_BASE58`].
const VALUES: [u8; 256] = {
    let mut table = [NOT_BASE58; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Digits read at once: 58^5 < 2^32, so a group times a 32-bit limb fits 64 bits.
const GROUP: usize = 5;

/// The bytes `text` spells, or `None` for any character outside the alphabet (the caller asks
/// `bs58` then, for its error). The same bytes as `bs58` (a test holds it to them): a zero byte
/// per leading `1`, then the number's big-endian bytes without leading zeros. `bs58` multiplies
/// the whole number by 58 once per digit, a byte at a time; this multiplies by 58^5 once per five
/// digits, 32 bits at a time, about twenty times fewer steps for a did:key.
fn decode_valid(text: &[u8]) -> Option<Vec<u8>> {
    let zeros = text.iter().take_while(|&&c| c == ALPHABET[0]).count();
    // The number, little-endian in 32-bit limbs; each digit adds under 6 bits.
    let mut limbs: Vec<u32> = Vec::with_capacity(text.len() / 5 + 1);
    for group in text[zeros..].chunks(GROUP) {
        let mut scale = 1u64;
        let mut carry = 0u64;
        for &c in group {
            let v = VALUES[usize::from(c)];
            if v == NOT_BASE58 {
                return None;
            }
            scale *= 58;
            carry = carry * 58 + u64::from(v);
        }
        for limb in &mut limbs {
            let n = u64::from(*limb) * scale + carry;
            *limb = n as u32;
            carry = n >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let mut out = Vec::with_capacity(zeros + 4 * limbs.len());
    out.resize(zeros, 0);
    for limb in limbs.iter().rev() {
        out.extend_from_slice(&limb.to_be_bytes());
    }
    // The number's own leading zero bytes (its most significant limb may have some) are not part
    // of its spelling.
    let leading = out[zeros..].iter().take_while(|&&b| b == 0).count();
    out.drain(zeros..zeros + leading);
    Some(out)
}

/// `bs58`'s decoder, which also says where a text goes wrong.
fn decode_slow(text: &str) -> Result<Vec<u8>, DecodeError> {
    bs58::decode(text).into_vec().map_err(|e| match e {
        bs58::decode::Error::InvalidCharacter { index, .. }
        | bs58::decode::Error::NonAsciiCharacter { index } => {
            DecodeError::InvalidCharacter { position: index }
        }
        // `into_vec` sizes its own buffer, so BufferTooSmall cannot happen; the enum is
        // non-exhaustive, so anything else is reported as a bad length rather than dropped.
        _ => DecodeError::InvalidLength { length: text.len() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn known_vectors() {
        assert_eq!(encode(b""), "");
        assert_eq!(encode(b"Hello World!"), "2NEpo7TZRRrLZSi2U");
        assert_eq!(encode(&[0, 0, 0x28, 0x7f, 0xb4, 0xcd]), "11233QC4");
        assert_eq!(
            decode("11233QC4").unwrap(),
            vec![0, 0, 0x28, 0x7f, 0xb4, 0xcd]
        );
        assert_eq!(decode("2NEpo7TZRRrLZSi2U").unwrap(), b"Hello World!");
        assert_eq!(decode("").unwrap(), b"");
        assert_eq!(decode("1").unwrap(), vec![0]);
    }

    /// The fast decoder gives `bs58`'s bytes and errors, on random numbers with leading zero
    /// bytes, their spellings and those spellings with one character changed.
    #[test]
    fn the_fast_path_agrees_with_bs58() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in 0..72 {
            for _ in 0..50 {
                let zeros = (next() % 4) as usize;
                let bytes: Vec<u8> = (0..len)
                    .map(|i| if i < zeros { 0 } else { next() as u8 })
                    .collect();
                let text = encode(&bytes);
                assert_eq!(decode(&text), Ok(bytes), "{text}");
                assert_eq!(decode(&text), decode_slow(&text), "{text}");
                let mut mutated = text.into_bytes();
                if !mutated.is_empty() {
                    let r = next() as usize;
                    let i = r % mutated.len();
                    mutated[i] = b"10OIl+zZ\x7f"[r / 64 % 9];
                }
                let mutated = String::from_utf8(mutated).unwrap_or_default();
                assert_eq!(decode(&mutated), decode_slow(&mutated), "{mutated}");
            }
        }
        for text in [
            "",
            "1",
            "11",
            "1112",
            "z",
            "2",
            "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
            "1zz",
        ] {
            assert_eq!(decode(text), decode_slow(text), "{text}");
        }
    }

    #[test]
    fn rejects_characters_outside_the_alphabet() {
        for (text, position) in [
            ("0", 0),
            ("abO", 2),
            ("aI", 1),
            ("l", 0),
            ("a+b", 1),
            ("aé", 1),
        ] {
            assert_eq!(
                decode(text),
                Err(DecodeError::InvalidCharacter { position }),
                "{text}"
            );
        }
    }
}
