//! RFC 6979's first nonce for P-256 with SHA-256 (§3.2, steps b–h), with the work that depends
//! on the key alone done once per key.
//!
//! The `rfc6979` crate (what RustCrypto's ECDSA signs with) runs the HMAC-DRBG as written:
//! every HMAC keyed afresh (two SHA-256 compressions for the key's pads), and once the nonce is
//! drawn the state updated again for a next draw that a signature almost never needs (step h.3:
//! only when the candidate is not in `[1, n)`, or r or s is zero). That was 30 compressions a
//! signature. Here it is 15: each HMAC key's pads computed once and used for both of its
//! messages, the first message's first block (it depends on the key alone) kept with the
//! signing key, and nothing after the draw. [`Nonces::first`] gives only the first candidate;
//! a signer that cannot use it (a chance of about 2^-32) runs the crate's generator from the
//! start, which draws the same first candidate and carries on.

use rfc6979::hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The nonce generator of one signing key, as far as it depends on that key alone.
#[derive(Clone)]
pub(super) struct Nonces {
    /// HMAC keyed with K = 0…0 (step c) that has taken the first block of step d's message:
    /// V = 1…1 (step b), `00`, and all of the secret `x` but its last byte.
    start: HmacSha256,
}

impl Nonces {
    /// The generator for the secret whose 32 big-endian bytes are `x`.
    pub(super) fn new(x: &[u8; 32]) -> Self {
        let mut start = keyed(&[0; 32]);
        start.update(&[1; 32]);
        start.update(&[0]);
        start.update(&x[..31]);
        Nonces { start }
    }

    /// The first candidate nonce (step h.2's T, one block of 32 bytes) for the secret `x`
    /// this generator was made for, and `h1`, the message's digest reduced modulo n.
    pub(super) fn first(&self, x: &[u8; 32], h1: &[u8; 32]) -> [u8; 32] {
        // d: K = HMAC_K(V ‖ 00 ‖ x ‖ h1), then e: V = HMAC_K(V).
        let mut d = self.start.clone();
        d.update(&x[31..]);
        d.update(h1);
        let k = keyed(&d.finalize().into_bytes().into());
        let v = hmac(&k, &[&[1; 32]]);
        // f: K = HMAC_K(V ‖ 01 ‖ x ‖ h1), then g: V = HMAC_K(V).
        let k = keyed(&hmac(&k, &[&v, &[1], x, h1]));
        let v = hmac(&k, &[&v]);
        // h.2: T = V = HMAC_K(V), as long as the order.
        hmac(&k, &[&v])
    }
}

/// HMAC-SHA-256 keyed with `key`. The key is passed as a whole block: HMAC pads a shorter key
/// with zeros to the block size (RFC 2104, §2), so this is the same function, and infallible.
fn keyed(key: &[u8; 32]) -> HmacSha256 {
    let mut block = [0; 64];
    block[..32].copy_from_slice(key);
    HmacSha256::new(&block.into())
}

/// The HMAC of `parts`, one after the other, under `key` (its pads already computed).
fn hmac(key: &HmacSha256, parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = key.clone();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::elliptic_curve::Curve as _;

    /// The first candidate is the crate's first nonce, over many keys and digests, digests
    /// from the order up included (reduced before they reach [`Nonces::first`]).
    #[test]
    fn the_first_nonce_is_the_crates() {
        use p256::elliptic_curve::ops::Reduce;
        use p256::{NistP256, Scalar, U256};
        use rand_core::Rng as _;
        let mut rng = crate::stream(0x6979, 5);
        for n in 0..3_000 {
            let (mut x, mut digest) = ([0; 32], [0; 32]);
            rng.fill_bytes(&mut x);
            rng.fill_bytes(&mut digest);
            if n % 100 == 0 {
                digest[..4].fill(0xff);
            }
            let h1: [u8; 32] = <Scalar as Reduce<U256>>::reduce(&U256::from_be_slice(&digest))
                .to_bytes()
                .into();
            let order = NistP256::ORDER;
            let mut theirs = [0; 32];
            rfc6979::KGenerator::<Sha256, U256>::new(&x, &digest, &[], &order)
                .fill_next_k(&mut theirs);
            assert_eq!(Nonces::new(&x).first(&x, &h1), theirs, "{n}");
        }
    }
}
