//! Inversion modulo P-256's group order in variable time: Bernstein and Yang's safegcd with 62
//! division steps a batch and trailing zeros skipped a run at a time, as libsecp256k1's
//! `secp256k1_modinv64_var` does it (its `modinv64_impl.h` explains every step).
//!
//! A signature inverts its nonce. crypto-bigint's `invert_vartime` (what p256 offers) runs the
//! same algorithm one division step at a time: about 28 000 instructions an inversion, and in
//! `perf` a fifth of a signature's time (half of it besides `k×G`); this takes about 11 000,
//! its check included. The
//! simulator's nonces are no secret worth a constant-time inversion, and the inverse is
//! unique, so the signature's bytes do not depend on how it was found. [`invert`] checks its
//! answer with one multiplication and falls back to crypto-bigint's if it is wrong, so a
//! mistake here could cost time, never a wrong byte.

use p256::elliptic_curve::PrimeField as _;
use p256::{NonZeroScalar, Scalar};

/// The low 62 bits.
const M62: u64 = u64::MAX >> 2;

/// A number as five signed limbs of 62 bits (the top one signed and unbounded), least
/// significant first: Σ `v[i]`·2^(62·i).
type Signed62 = [i64; 5];

/// The group order `n`, big-endian.
const ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `n` as [`Signed62`].
const MODULUS: Signed62 = to_signed62(&ORDER);

/// `n`⁻¹ modulo 2^62, by Newton's iteration (each step doubles the bits that are right; an odd
/// number is its own inverse modulo 8).
const MODULUS_INV62: u64 = {
    let n0 = MODULUS[0] as u64;
    let mut inv = n0;
    let mut i = 0;
    while i < 6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(n0.wrapping_mul(inv)));
        i += 1;
    }
    inv & M62
};

/// `k`⁻¹ modulo `n`.
pub(super) fn invert(k: &NonZeroScalar) -> Scalar {
    let k: &Scalar = k.as_ref();
    let inverse = to_bytes(&invert_signed62(to_signed62(&k.to_repr().into())));
    Scalar::from_repr(inverse.into())
        .into_option()
        .filter(|inverse| *inverse * k == Scalar::ONE)
        .unwrap_or_else(|| k.invert_vartime().unwrap_or(Scalar::ZERO))
}

/// Big-endian bytes below 2^256 as [`Signed62`].
const fn to_signed62(bytes: &[u8; 32]) -> Signed62 {
    let mut a = [0u64; 4];
    let mut i = 0;
    while i < 4 {
        let mut word = [0; 8];
        let mut j = 0;
        while j < 8 {
            word[j] = bytes[32 - 8 * (i + 1) + j];
            j += 1;
        }
        a[i] = u64::from_be_bytes(word);
        i += 1;
    }
    [
        (a[0] & M62) as i64,
        ((a[0] >> 62 | a[1] << 2) & M62) as i64,
        ((a[1] >> 60 | a[2] << 4) & M62) as i64,
        ((a[2] >> 58 | a[3] << 6) & M62) as i64,
        (a[3] >> 56) as i64,
    ]
}

/// A normalized [`Signed62`] (limbs 0–3 in `[0, 2^62)`, the top one in `[0, 2^24)`) as
/// big-endian bytes.
fn to_bytes(v: &Signed62) -> [u8; 32] {
    let v = v.map(|limb| limb as u64);
    let a = [
        v[0] | v[1] << 62,
        v[1] >> 2 | v[2] << 60,
        v[2] >> 4 | v[3] << 58,
        v[3] >> 6 | v[4] << 56,
    ];
    let mut out = [0; 32];
    for (chunk, word) in out.rchunks_exact_mut(8).zip(a) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// A 2×2 matrix of 62 division steps, scaled by 2^62: `[[u, v], [q, r]]`.
struct Transition {
    u: i64,
    v: i64,
    q: i64,
    r: i64,
}

/// `x`⁻¹ modulo `n` for `x` in `[1, n)`, normalized; anything for 0 (the caller checks).
fn invert_signed62(x: Signed62) -> Signed62 {
    let (mut d, mut e): (Signed62, Signed62) = ([0; 5], [1, 0, 0, 0, 0]);
    let (mut f, mut g) = (MODULUS, x);
    let mut len = 5;
    // η = −δ, and δ starts at 1.
    let mut eta = -1;
    // Each batch takes at least one bit off g, so this bounds the loop even for bad input.
    for _ in 0..600 {
        let t;
        (eta, t) = divsteps_62_var(eta, f[0] as u64, g[0] as u64);
        update_de(&mut d, &mut e, &t);
        update_fg_var(len, &mut f, &mut g, &t);
        if g[..len].iter().all(|&limb| limb == 0) {
            break;
        }
        // Shorten f and g when both their top limbs are just sign.
        let (fn_, gn) = (f[len - 1], g[len - 1]);
        if len > 1 && (fn_ ^ (fn_ >> 63)) == 0 && (gn ^ (gn >> 63)) == 0 {
            f[len - 2] |= ((fn_ as u64) << 62) as i64;
            g[len - 2] |= ((gn as u64) << 62) as i64;
            len -= 1;
        }
    }
    // f is ±1 now, and d·x ≡ f.
    normalize(d, f[len - 1])
}

/// 62 division steps on the low bits of `f` (odd) and `g`, runs of zeros in `g` at a time.
fn divsteps_62_var(mut eta: i64, f0: u64, g0: u64) -> (i64, Transition) {
    let (mut u, mut v, mut q, mut r) = (1u64, 0u64, 0u64, 1u64);
    let (mut f, mut g) = (f0, g0);
    let mut i: u32 = 62;
    loop {
        // A sentinel bit counts zeros only up to i.
        let zeros = (g | (u64::MAX << i)).trailing_zeros();
        g >>= zeros;
        u <<= zeros;
        v <<= zeros;
        eta -= i64::from(zeros);
        i -= zeros;
        if i == 0 {
            break;
        }
        // Both f and g are odd here.
        let w;
        if eta < 0 {
            // δ > 0: swap, g becomes −f, and up to 6 bits of g are cancelled at once.
            eta = -eta;
            (f, g) = (g, f.wrapping_neg());
            (u, q) = (q, u.wrapping_neg());
            (v, r) = (r, v.wrapping_neg());
            let limit = (eta + 1).min(i64::from(i)) as u32;
            let m = (u64::MAX >> (64 - limit)) & 63;
            w = f
                .wrapping_mul(g)
                .wrapping_mul(f.wrapping_mul(f).wrapping_sub(2))
                & m;
        } else {
            let limit = (eta + 1).min(i64::from(i)) as u32;
            let m = (u64::MAX >> (64 - limit)) & 15;
            let w0 = f.wrapping_add(((f.wrapping_add(1)) & 4) << 1);
            w = w0.wrapping_neg().wrapping_mul(g) & m;
        }
        g = g.wrapping_add(f.wrapping_mul(w));
        q = q.wrapping_add(u.wrapping_mul(w));
        r = r.wrapping_add(v.wrapping_mul(w));
    }
    let t = Transition {
        u: u as i64,
        v: v as i64,
        q: q as i64,
        r: r as i64,
    };
    (eta, t)
}

/// `[d, e] ← t·[d, e] / 2^62 (mod n)`, keeping both in `(−2n, n)`.
fn update_de(d: &mut Signed62, e: &mut Signed62, t: &Transition) {
    let (u, v, q, r) = (t.u, t.v, t.q, t.r);
    let wide = |x: i64| i128::from(x);
    // Add u or q (v or r) times n when d (e) is negative, so the result stays in range.
    let (sd, se) = (d[4] >> 63, e[4] >> 63);
    let mut md = (u & sd) + (v & se);
    let mut me = (q & sd) + (r & se);
    let mut cd = wide(u) * wide(d[0]) + wide(v) * wide(e[0]);
    let mut ce = wide(q) * wide(d[0]) + wide(r) * wide(e[0]);
    // Correct md and me so that the low 62 bits of t·[d, e] + n·[md, me] are zero.
    md = md.wrapping_sub(
        (MODULUS_INV62
            .wrapping_mul(cd as u64)
            .wrapping_add(md as u64)
            & M62) as i64,
    );
    me = me.wrapping_sub(
        (MODULUS_INV62
            .wrapping_mul(ce as u64)
            .wrapping_add(me as u64)
            & M62) as i64,
    );
    cd += wide(MODULUS[0]) * wide(md);
    ce += wide(MODULUS[0]) * wide(me);
    cd >>= 62;
    ce >>= 62;
    for i in 1..5 {
        cd += wide(u) * wide(d[i]) + wide(v) * wide(e[i]) + wide(MODULUS[i]) * wide(md);
        ce += wide(q) * wide(d[i]) + wide(r) * wide(e[i]) + wide(MODULUS[i]) * wide(me);
        d[i - 1] = (cd as u64 & M62) as i64;
        e[i - 1] = (ce as u64 & M62) as i64;
        cd >>= 62;
        ce >>= 62;
    }
    d[4] = cd as i64;
    e[4] = ce as i64;
}

/// `[f, g] ← t·[f, g] / 2^62` over their first `len` limbs.
fn update_fg_var(len: usize, f: &mut Signed62, g: &mut Signed62, t: &Transition) {
    let (u, v, q, r) = (t.u, t.v, t.q, t.r);
    let wide = |x: i64| i128::from(x);
    let mut cf = wide(u) * wide(f[0]) + wide(v) * wide(g[0]);
    let mut cg = wide(q) * wide(f[0]) + wide(r) * wide(g[0]);
    cf >>= 62;
    cg >>= 62;
    for i in 1..len {
        cf += wide(u) * wide(f[i]) + wide(v) * wide(g[i]);
        cg += wide(q) * wide(f[i]) + wide(r) * wide(g[i]);
        f[i - 1] = (cf as u64 & M62) as i64;
        g[i - 1] = (cg as u64 & M62) as i64;
        cf >>= 62;
        cg >>= 62;
    }
    f[len - 1] = cf as i64;
    g[len - 1] = cg as i64;
}

/// `r` (in `(−2n, n)`) negated when `sign` is negative, brought into `[0, n)`.
fn normalize(mut r: Signed62, sign: i64) -> Signed62 {
    let add_modulus = |r: &mut Signed62| {
        let cond = r[4] >> 63;
        for (limb, m) in r.iter_mut().zip(MODULUS) {
            *limb += m & cond;
        }
    };
    let carry = |r: &mut Signed62| {
        for i in 0..4 {
            r[i + 1] += r[i] >> 62;
            r[i] &= M62 as i64;
        }
    };
    add_modulus(&mut r);
    let negate = sign >> 63;
    for limb in &mut r {
        *limb = (*limb ^ negate) - negate;
    }
    carry(&mut r);
    add_modulus(&mut r);
    carry(&mut r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same inverse as crypto-bigint's, without the fallback, for edge values and many
    /// random ones.
    #[test]
    fn inverses_are_crypto_bigints() {
        use rand_core::Rng as _;
        let check = |bytes: [u8; 32]| {
            let Some(k) = NonZeroScalar::from_repr(bytes.into()).into_option() else {
                return;
            };
            let mine = to_bytes(&invert_signed62(to_signed62(&bytes)));
            let theirs: [u8; 32] = k.as_ref().invert_vartime().unwrap().to_repr().into();
            assert_eq!(mine, theirs, "{bytes:02x?}");
            let fast: [u8; 32] = invert(&k).to_repr().into();
            assert_eq!(fast, theirs);
        };
        let n_minus = |by: u8| {
            let mut b = ORDER;
            b[31] -= by;
            check(b);
        };
        for by in 1..=5 {
            n_minus(by);
        }
        for bit in 0..256 {
            let mut b = [0; 32];
            b[31 - bit / 8] = 1 << (bit % 8);
            check(b);
            let mut ones = [0xff; 32];
            ones[..31 - bit / 8].fill(0);
            check(ones);
        }
        let mut rng = crate::stream(0x1a5e, 4);
        for _ in 0..20_000 {
            let mut b = [0; 32];
            rng.fill_bytes(&mut b);
            check(b);
            // Short numbers too: few limbs, long runs of zeros.
            let keep = usize::from(b[0] % 32);
            b[..32 - keep].fill(0);
            check(b);
        }
    }
}
