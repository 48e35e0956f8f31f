//! A P-256 key that signs, kept expanded: its public half, and what signs with it.
//!
//! Signatures are RustCrypto's bytes (ECDSA over P-256 with SHA-256 and RFC 6979's nonce, as
//! `p256::ecdsa::SigningKey::sign` computes them; a test compares them). With `fast-crypto`
//! both fixed-base multiplications, a signature's `k×G` and the key's public half, are
//! aws-lc's (`aws.rs`): RustCrypto's, even with its tables, was most of a signature's cost
//! (about 170 µs a signature, against 25 µs through aws-lc-rs, which paid `k×G` twice, and
//! 15 µs here), and building RustCrypto's key paid it once more for the public half.
//!
//! The rest is RustCrypto's arithmetic but for two steps that give the same bytes for less:
//! RFC 6979's first nonce (`nonce.rs`: half the SHA-256 work of the `rfc6979` crate, which
//! still draws any further nonce) and the nonce's inversion (`invert.rs`: a variable-time
//! safegcd, about 40 % of crypto-bigint's `invert_vartime` in instructions, which took a
//! fifth of a signature's time). aws-lc signs with a given nonce too, but its constant-time
//! inversion of the nonce costs more (about 18 µs a signature against 16.7 µs with
//! crypto-bigint's; its `BN_mod_inverse_odd` takes 19 µs for the inversion alone, against
//! 3 µs).

use weft_proto::crypto::P256Public;

/// A P-256 signing key kept expanded; see the [module docs](self).
#[derive(Clone)]
pub(super) struct P256Key {
    public: P256Public,
    /// Signs without `fast-crypto`.
    #[cfg(not(feature = "fast-crypto"))]
    rustcrypto: p256::ecdsa::SigningKey,
    /// The secret scalar, for RFC 6979's nonce (and RustCrypto's signature if aws-lc fails).
    #[cfg(feature = "fast-crypto")]
    scalar: p256::NonZeroScalar,
    /// RFC 6979's nonce generator, as far as it depends on the key alone (`nonce.rs`).
    #[cfg(feature = "fast-crypto")]
    nonces: super::nonce::Nonces,
}

impl std::fmt::Debug for P256Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secret material: only the public half is shown.
        f.debug_tuple("P256Key").field(&self.public.0).finish()
    }
}

impl P256Key {
    /// `scalar` expanded: its public half computed once.
    pub(super) fn new(scalar: p256::NonZeroScalar) -> Self {
        P256Key {
            public: super::p256_public_for_real(&scalar),
            #[cfg(feature = "fast-crypto")]
            scalar,
            #[cfg(feature = "fast-crypto")]
            nonces: {
                use p256::elliptic_curve::PrimeField as _;
                super::nonce::Nonces::new(&scalar.to_repr().into())
            },
            #[cfg(not(feature = "fast-crypto"))]
            rustcrypto: p256::ecdsa::SigningKey::from(scalar),
        }
    }

    /// The public half, compressed.
    pub(super) fn public(&self) -> P256Public {
        self.public
    }

    /// The signature of `msg`, whose SHA-256 is `digest`, as `r ‖ s`.
    #[cfg(feature = "fast-crypto")]
    pub(super) fn sign(&self, msg: &[u8], digest: &[u8; 32]) -> [u8; 64] {
        rfc6979_sign(self, digest)
            .unwrap_or_else(|| rustcrypto_sign(&p256::ecdsa::SigningKey::from(self.scalar), msg))
    }

    /// The signature of `msg`, as `r ‖ s`.
    #[cfg(not(feature = "fast-crypto"))]
    pub(super) fn sign(&self, msg: &[u8]) -> [u8; 64] {
        rustcrypto_sign(&self.rustcrypto, msg)
    }
}

/// RustCrypto's own signature of `msg`.
fn rustcrypto_sign(key: &p256::ecdsa::SigningKey, msg: &[u8]) -> [u8; 64] {
    use p256::ecdsa::signature::Signer as _;
    let sig: p256::ecdsa::Signature = key.sign(msg);
    sig.to_bytes().into()
}

/// ECDSA with RFC 6979's nonce as RustCrypto computes it, `k×G` through aws-lc. `None` only
/// if aws-lc cannot allocate.
#[cfg(feature = "fast-crypto")]
fn rfc6979_sign(key: &P256Key, digest: &[u8; 32]) -> Option<[u8; 64]> {
    use p256::NonZeroScalar;
    use p256::elliptic_curve::PrimeField;

    let d = &key.scalar;
    let z = reduce(digest);
    // Nearly always the first candidate is a scalar and signs (`nonce.rs`).
    let first = key.nonces.first(&d.to_repr().into(), &z.to_repr().into());
    if let Some(k) = NonZeroScalar::from_repr(first.into()).into_option()
        && let Some(sig) = sign_with(d, z, &k)?
    {
        return Some(sig);
    }
    // Otherwise the crate's generator, from the start: the same first candidate, then the next.
    rfc6979_sign_from_start(d, z, digest)
}

/// [`rfc6979_sign`] with every nonce from the `rfc6979` crate's generator, `z` being `digest`
/// reduced.
#[cfg(feature = "fast-crypto")]
fn rfc6979_sign_from_start(
    d: &p256::NonZeroScalar,
    z: p256::Scalar,
    digest: &[u8; 32],
) -> Option<[u8; 64]> {
    use p256::elliptic_curve::{Curve, PrimeField};
    use p256::{NistP256, NonZeroScalar, U256};

    let mut nonces =
        rfc6979::KGenerator::<sha2::Sha256, U256>::new(&d.to_repr(), digest, &[], &NistP256::ORDER);
    loop {
        let mut k = p256::FieldBytes::default();
        nonces.fill_next_k(&mut k);
        let Some(k) = NonZeroScalar::from_repr(k).into_option() else {
            continue;
        };
        if let Some(sig) = sign_with(d, z, &k)? {
            return Some(sig);
        }
    }
}

/// `digest` as a scalar: reduced modulo n (ECDSA's z, and RFC 6979's h1 as bytes).
#[cfg(feature = "fast-crypto")]
fn reduce(digest: &[u8; 32]) -> p256::Scalar {
    use p256::elliptic_curve::ops::Reduce;
    <p256::Scalar as Reduce<p256::U256>>::reduce(&p256::U256::from_be_slice(digest))
}

/// ECDSA's `r ‖ s` for secret `d`, reduced digest `z` and nonce `k`: `Some(None)` when r or s
/// is zero (the next nonce is tried), `None` only if aws-lc cannot allocate.
#[cfg(feature = "fast-crypto")]
fn sign_with(
    d: &p256::NonZeroScalar,
    z: p256::Scalar,
    k: &p256::NonZeroScalar,
) -> Option<Option<[u8; 64]>> {
    use p256::elliptic_curve::{Field as _, PrimeField as _};
    // `r` is the x-coordinate of `k×G`, after the compressed point's tag byte.
    let [_tag, x @ ..] = super::aws::mul_base(k)?;
    let r = reduce(&x);
    // The inverse is unique, so a variable-time inversion gives RustCrypto's value
    // (`invert.rs`).
    let s = super::invert::invert(k) * (z + r * d.as_ref());
    if bool::from(r.is_zero()) || bool::from(s.is_zero()) {
        return Some(None);
    }
    let mut sig = [0; 64];
    sig[..32].copy_from_slice(&r.to_repr());
    sig[32..].copy_from_slice(&s.to_repr());
    Some(Some(sig))
}

#[cfg(all(test, feature = "fast-crypto"))]
mod tests {
    use super::*;

    /// The fast signer's bytes are RustCrypto's, over many keys and messages of every length a
    /// digest block boundary might matter for, and so is the public half.
    #[test]
    fn the_fast_p256_signer_gives_rustcryptos_signatures() {
        let sim = super::super::provider();
        for n in 0u8..64 {
            let mut bytes = [n.wrapping_mul(151).wrapping_add(3); 32];
            bytes[0] = 0x7f - n;
            let plain = p256::ecdsa::SigningKey::from_bytes(&bytes.into()).unwrap();
            let key = P256Key::new(*plain.as_nonzero_scalar());
            let msg = vec![n; usize::from(n) * 3];
            let digest = sim.sha256(&[&msg]);
            let sig = rustcrypto_sign(&plain, &msg);
            assert_eq!(key.sign(&msg, &digest), sig);
            // The path a signature takes when the first nonce cannot be used.
            let z = reduce(&digest);
            assert_eq!(rfc6979_sign_from_start(&key.scalar, z, &digest), Some(sig));
            let public: [u8; 33] = p256::CompressedPoint::from(plain.verifying_key()).into();
            assert_eq!(key.public().0, public);
        }
    }
}
