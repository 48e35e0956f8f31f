//! P-256 scalar multiplications straight through aws-lc: one multiplication each, on the same
//! assembly aws-lc-rs uses.
//!
//! aws-lc-rs takes a private key only through an import that computes its public key and then
//! `EC_KEY_check_key`, which computes it again: a signature's `k×G` or a one-time key's public
//! half paid two fixed-base multiplications, and an ECDH paid both before its variable-base one.
//! aws-lc-rs has no call that multiplies a point by a scalar and nothing else, so this module
//! calls aws-lc's `EC_POINT_mul` itself, through the `aws-lc-sys` aws-lc-rs is built on.
//!
//! Scalars come in as [`NonZeroScalar`]s, already in `[1, n)`: `EC_POINT_mul` would quietly
//! reduce a larger one where the plain provider refuses it, so that check stays where the
//! caller decodes the secret, with RustCrypto's own rule. Every aws-lc object made here is
//! owned by a guard that frees it on drop, whatever path returns.

use std::ptr::{self, NonNull};

use aws_lc_sys as sys;
use p256::NonZeroScalar;
use p256::elliptic_curve::PrimeField as _;

/// A SEC1 compressed point: the parity of y (`02` or `03`), then x, big-endian.
pub(super) type Compressed = [u8; 33];

/// `k×G`, compressed. `None` only if aws-lc cannot allocate.
pub(super) fn mul_base(k: &NonZeroScalar) -> Option<Compressed> {
    let (k, product) = (Bignum::from_scalar(k)?, Point::new()?);
    // SAFETY: `product` and `k` are live objects this module owns (their guards are alive to the
    // end of the function), `product` belongs to `group()`; a null point with a null scalar is
    // `EC_POINT_mul`'s documented way to ask for the base-point term alone; a null `BN_CTX` makes
    // aws-lc use its own.
    let ok = unsafe {
        sys::EC_POINT_mul(
            group(),
            product.0.as_ptr(),
            k.0.as_ptr(),
            ptr::null(),
            ptr::null(),
            ptr::null_mut(),
        )
    };
    if ok != 1 {
        return None;
    }
    product.to_compressed()
}

/// `k×q`, compressed, where `q` is a compressed point. `None` when `q` is not a point on
/// P-256 (a bad tag, x not below p, or no y for x), or if aws-lc cannot allocate.
pub(super) fn mul(k: &NonZeroScalar, q: &Compressed) -> Option<Compressed> {
    let (q, k, product) = (
        Point::from_compressed(q)?,
        Bignum::from_scalar(k)?,
        Point::new()?,
    );
    // SAFETY: `product`, `q` and `k` are live objects this module owns, both points belong to
    // `group()`; a null `g_scalar` asks for the `q×k` term alone; a null `BN_CTX` makes aws-lc
    // use its own.
    let ok = unsafe {
        sys::EC_POINT_mul(
            group(),
            product.0.as_ptr(),
            ptr::null(),
            q.0.as_ptr(),
            k.0.as_ptr(),
            ptr::null_mut(),
        )
    };
    if ok != 1 {
        return None;
    }
    product.to_compressed()
}

/// aws-lc's P-256 group.
fn group() -> *const sys::EC_GROUP {
    // SAFETY: no arguments; aws-lc returns a static group, built once (thread-safely) and never
    // freed, which callers may use from any thread without releasing it.
    unsafe { sys::EC_group_p256() }
}

/// An `EC_POINT` of [`group()`], freed when dropped.
struct Point(NonNull<sys::EC_POINT>);

impl Point {
    /// A fresh point (aws-lc sets it to infinity), or `None` if aws-lc cannot allocate.
    fn new() -> Option<Self> {
        // SAFETY: `group()` is a valid group; a null return (no memory) becomes `None`, and a
        // non-null one is a point we now own.
        NonNull::new(unsafe { sys::EC_POINT_new(group()) }).map(Point)
    }

    /// The point `bytes` encodes, or `None` when it encodes no point on the curve:
    /// `EC_POINT_oct2point` checks the tag, the length, that x is below p, and that x has a y.
    /// A refusal leaves an entry in aws-lc's per-thread error queue, a fixed-size ring that
    /// nothing here reads, so it needs no clearing.
    fn from_compressed(bytes: &Compressed) -> Option<Self> {
        let point = Self::new()?;
        // SAFETY: `point` is a live point of `group()`; `bytes` is readable for the length
        // passed; a null `BN_CTX` makes aws-lc use its own.
        let ok = unsafe {
            sys::EC_POINT_oct2point(
                group(),
                point.0.as_ptr(),
                bytes.as_ptr(),
                bytes.len(),
                ptr::null_mut(),
            )
        };
        (ok == 1).then_some(point)
    }

    /// The point compressed; `None` for the point at infinity, which encodes as one byte (no
    /// product of a point with a scalar in `[1, n)` is that, on a curve of prime order).
    fn to_compressed(&self) -> Option<Compressed> {
        let mut out = [0; 33];
        // SAFETY: `self` is a live point of `group()`; `out` is writable for the length passed,
        // and aws-lc writes at most that many bytes; a null `BN_CTX` makes aws-lc use its own.
        let written = unsafe {
            sys::EC_POINT_point2oct(
                group(),
                self.0.as_ptr(),
                sys::point_conversion_form_t::POINT_CONVERSION_COMPRESSED,
                out.as_mut_ptr(),
                out.len(),
                ptr::null_mut(),
            )
        };
        (written == out.len()).then_some(out)
    }
}

impl Drop for Point {
    fn drop(&mut self) {
        // SAFETY: the point was made by `EC_POINT_new`, is owned by this guard alone, and is
        // not used after this.
        unsafe { sys::EC_POINT_free(self.0.as_ptr()) }
    }
}

/// A `BIGNUM`, freed when dropped.
struct Bignum(NonNull<sys::BIGNUM>);

impl Bignum {
    /// `k` as a `BIGNUM`, or `None` if aws-lc cannot allocate.
    fn from_scalar(k: &NonZeroScalar) -> Option<Self> {
        let bytes = k.to_repr();
        // SAFETY: `bytes` is readable for the length passed; a null `ret` asks for a fresh
        // `BIGNUM`, which we then own; a null return (no memory) becomes `None`.
        NonNull::new(unsafe { sys::BN_bin2bn(bytes.as_ptr(), bytes.len(), ptr::null_mut()) })
            .map(Bignum)
    }
}

impl Drop for Bignum {
    fn drop(&mut self) {
        // SAFETY: the number was made by `BN_bin2bn` with a null `ret`, so it is a heap
        // `BIGNUM` owned by this guard alone, and is not used after this.
        unsafe { sys::BN_free(self.0.as_ptr()) }
    }
}
