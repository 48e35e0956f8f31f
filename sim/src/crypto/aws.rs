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
//! owned by a guard that frees it on drop.
//!
//! Each thread reuses one set of objects ([`Scratch`]): a multiplication that made its own
//! allocated and freed through glibc the scalar, the product (and the peer's point), and the
//! `BN_CTX` aws-lc makes for itself when given none: about 1 % of its instructions.

use std::cell::RefCell;
use std::ptr::{self, NonNull};

use aws_lc_sys as sys;
use p256::NonZeroScalar;
use p256::elliptic_curve::PrimeField as _;

/// A SEC1 compressed point: the parity of y (`02` or `03`), then x, big-endian.
pub(super) type Compressed = [u8; 33];

/// `k×G`, compressed. `None` only if aws-lc cannot allocate (or the thread is ending).
pub(super) fn mul_base(k: &NonZeroScalar) -> Option<Compressed> {
    with_scratch(|s| {
        s.scalar.set(k)?;
        // SAFETY: `product`, `scalar` and `ctx` are live objects this thread's scratch owns and
        // lends to this call alone; `product` belongs to `group()`; a null point with a null
        // scalar is `EC_POINT_mul`'s documented way to ask for the base-point term alone.
        let ok = unsafe {
            sys::EC_POINT_mul(
                group(),
                s.product.0.as_ptr(),
                s.scalar.0.as_ptr(),
                ptr::null(),
                ptr::null(),
                s.ctx.0.as_ptr(),
            )
        };
        if ok != 1 {
            return None;
        }
        s.product.to_compressed()
    })
}

/// `k×q`, compressed, where `q` is a compressed point. `None` when `q` is not a point on
/// P-256 (a bad tag, x not below p, or no y for x), or if aws-lc cannot allocate (or the
/// thread is ending).
pub(super) fn mul(k: &NonZeroScalar, q: &Compressed) -> Option<Compressed> {
    with_scratch(|s| {
        s.peer.set_compressed(q, &s.ctx)?;
        s.scalar.set(k)?;
        // SAFETY: `product`, `peer`, `scalar` and `ctx` are live objects this thread's scratch
        // owns and lends to this call alone, both points belong to `group()` and are distinct;
        // a null `g_scalar` asks for the `q×k` term alone.
        let ok = unsafe {
            sys::EC_POINT_mul(
                group(),
                s.product.0.as_ptr(),
                ptr::null(),
                s.peer.0.as_ptr(),
                s.scalar.0.as_ptr(),
                s.ctx.0.as_ptr(),
            )
        };
        if ok != 1 {
            return None;
        }
        s.product.to_compressed()
    })
}

/// The aws-lc objects one thread multiplies with, made on its first multiplication and freed
/// when the thread ends. Whatever a call leaves in them is overwritten by the next.
struct Scratch {
    ctx: BnCtx,
    scalar: Bignum,
    peer: Point,
    product: Point,
}

impl Scratch {
    /// A fresh set, or `None` if aws-lc cannot allocate (whatever was made is freed).
    fn new() -> Option<Self> {
        Some(Scratch {
            ctx: BnCtx::new()?,
            scalar: Bignum::new()?,
            peer: Point::new()?,
            product: Point::new()?,
        })
    }
}

thread_local! {
    /// This thread's [`Scratch`], once made.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// `f` with this thread's [`Scratch`], made if need be. `None` if it cannot be made, if the
/// thread is ending (its scratch is gone), or if `f` says so. Nothing here calls back into this
/// module while `f` runs, so the scratch is never lent twice; if it were, the second borrow
/// would be refused (`None`) rather than shared.
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> Option<T>) -> Option<T> {
    SCRATCH
        .try_with(|cell| {
            let mut slot = cell.try_borrow_mut().ok()?;
            if slot.is_none() {
                *slot = Some(Scratch::new()?);
            }
            f(slot.as_mut()?)
        })
        .ok()
        .flatten()
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

    /// Sets the point to the one `bytes` encodes; `None` when it encodes no point on the
    /// curve (the point is then unspecified): `EC_POINT_oct2point` checks the tag, the length,
    /// that x is below p, and that x has a y. A refusal leaves an entry in aws-lc's per-thread
    /// error queue, a fixed-size ring that nothing here reads, so it needs no clearing.
    fn set_compressed(&mut self, bytes: &Compressed, ctx: &BnCtx) -> Option<()> {
        // SAFETY: `self` is a live point of `group()` and `ctx` a live context, both owned by
        // the caller's scratch and used by nothing else during the call; `bytes` is readable
        // for the length passed.
        let ok = unsafe {
            sys::EC_POINT_oct2point(
                group(),
                self.0.as_ptr(),
                bytes.as_ptr(),
                bytes.len(),
                ctx.0.as_ptr(),
            )
        };
        (ok == 1).then_some(())
    }

    /// The point compressed; `None` for the point at infinity, which encodes as one byte (no
    /// product of a point with a scalar in `[1, n)` is that, on a curve of prime order).
    fn to_compressed(&self) -> Option<Compressed> {
        let mut out = [0; 33];
        // SAFETY: `self` is a live point of `group()`; `out` is writable for the length passed,
        // and aws-lc writes at most that many bytes; `EC_POINT_point2oct` ignores its `BN_CTX`
        // (it makes none either).
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
    /// A fresh number (zero), or `None` if aws-lc cannot allocate.
    fn new() -> Option<Self> {
        // SAFETY: no arguments; a null return (no memory) becomes `None`, and a non-null one
        // is a heap `BIGNUM` we now own.
        NonNull::new(unsafe { sys::BN_new() }).map(Bignum)
    }

    /// Sets the number to `k`; `None` if aws-lc cannot grow it.
    fn set(&mut self, k: &NonZeroScalar) -> Option<()> {
        let bytes = k.to_repr();
        // SAFETY: `bytes` is readable for the length passed; `self` is a live `BIGNUM` owned
        // by the caller's scratch, which `BN_bin2bn` overwrites and returns (null only if it
        // could not grow it, which leaves it still ours to free).
        let set = unsafe { sys::BN_bin2bn(bytes.as_ptr(), bytes.len(), self.0.as_ptr()) };
        (!set.is_null()).then_some(())
    }
}

impl Drop for Bignum {
    fn drop(&mut self) {
        // SAFETY: the number was made by `BN_new`, so it is a heap `BIGNUM` owned by this
        // guard alone, and is not used after this.
        unsafe { sys::BN_free(self.0.as_ptr()) }
    }
}

/// A `BN_CTX`, aws-lc's pool of temporary numbers, freed when dropped.
struct BnCtx(NonNull<sys::BN_CTX>);

impl BnCtx {
    /// A fresh context, or `None` if aws-lc cannot allocate.
    fn new() -> Option<Self> {
        // SAFETY: no arguments; a null return (no memory) becomes `None`, and a non-null one
        // is a context we now own.
        NonNull::new(unsafe { sys::BN_CTX_new() }).map(BnCtx)
    }
}

impl Drop for BnCtx {
    fn drop(&mut self) {
        // SAFETY: the context was made by `BN_CTX_new`, is owned by this guard alone, and is
        // not used after this.
        unsafe { sys::BN_CTX_free(self.0.as_ptr()) }
    }
}
