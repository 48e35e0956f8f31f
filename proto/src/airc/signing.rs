//! Realm signing (AIRC §9): what is signed, byte for byte.
//!
//! Signatures themselves are AIRC sigstrings (`ed25519:<kid>:<base64>`, §9.2), made and checked
//! by [`crate::crypto::sigstring`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::crypto::CryptoProvider;
use crate::crypto::sigstring::{self, SigString};

/// The message type a canonical string uses when `type` is absent (§9.3).
pub const DEFAULT_TYPE: &str = "text/plain";

/// The fields of a message that its signature covers (§9.3). `ttl`, `via` and other `hdr`
/// entries are routing metadata a hop may change, so they are not here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signed<'a> {
    /// `id`.
    pub id: &'a str,
    /// `from`, the canonical URI as it appears on the wire, fragment included.
    pub from: &'a str,
    /// `to`, likewise.
    pub to: &'a str,
    /// `round(ts × 1000)`; see [`ts_ms`].
    pub ts_ms: u64,
    /// `type`, or `None` when absent.
    pub kind: Option<&'a str>,
    /// `re`, or `None` when absent.
    pub re: Option<&'a str>,
    /// `body`.
    pub body: &'a str,
}

impl Signed<'_> {
    /// The canonical string: the fields joined by `\n`, no trailing newline.
    pub fn canonical(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.id,
            self.from,
            self.to,
            self.ts_ms,
            self.kind.unwrap_or(DEFAULT_TYPE),
            self.re.unwrap_or(""),
            self.body
        )
    }
}

/// `round(ts × 1000)` for a message's `ts` in seconds, or `None` when `ts` is not a finite,
/// non-negative number that fits in milliseconds.
pub fn ts_ms(ts: f64) -> Option<u64> {
    let ms = ts * 1000.0;
    // 2^53 is where f64 stops holding every integer; no real timestamp comes near it. The range
    // check also refuses NaN and infinities.
    if !(0.0..=9_007_199_254_740_992.0).contains(&ms) {
        return None;
    }
    // `f64::round` is not in `core`. Below 2^53 the truncation and the fraction are exact, and
    // rounding half up matches JavaScript's Math.round for the non-negative values allowed here.
    let whole = ms as u64;
    Some(if ms - whole as f64 >= 0.5 {
        whole + 1
    } else {
        whole
    })
}

/// What a dialling server's hello signs (§9.4): the target realm binds it to one destination.
pub fn hello_canonical(dialler_realm: &str, target_realm: &str, ts: u64, nonce: &str) -> String {
    format!("airc-hello\n{dialler_realm}\n{target_realm}\n{ts}\n{nonce}")
}

/// What an accepting server's welcome signs (§9.4).
pub fn welcome_canonical(acceptor_realm: &str, dialler_realm: &str, nonce: &str) -> String {
    format!("airc-welcome\n{acceptor_realm}\n{dialler_realm}\n{nonce}")
}

/// Whether any of `sigs` verifies `msg` under any of `keys`, the way §9.2 says a verifier
/// decides: every sigstring whose algorithm is allowed (only `ed25519`; `none` never is) is tried
/// against every published key of the origin realm, keys whose kid matches first; any success
/// verifies. A kid orders the keys but does not exclude any, so a realm that rotates keys
/// without renaming them still verifies.
pub fn verify_any(
    crypto: &dyn CryptoProvider,
    keys: &[[u8; 32]],
    msg: &[u8],
    sigs: &[&str],
) -> bool {
    sigs.iter()
        .filter_map(|s| SigString::parse(s).ok())
        .any(|sig| {
            let (matching, others): (Vec<_>, Vec<_>) = keys
                .iter()
                .partition(|k| sigstring::kid(crypto, k) == sig.kid);
            matching
                .into_iter()
                .chain(others)
                .any(|k| crypto.ed25519_verify(k, msg, &sig.sig))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_rounds_to_milliseconds() {
        assert_eq!(ts_ms(1790380000.123), Some(1790380000123));
        assert_eq!(ts_ms(1790380000.1), Some(1790380000100));
        assert_eq!(ts_ms(1790380000.0), Some(1790380000000));
        assert_eq!(ts_ms(0.0005), Some(1));
        assert_eq!(ts_ms(-1.0), None);
        assert_eq!(ts_ms(f64::NAN), None);
        assert_eq!(ts_ms(f64::INFINITY), None);
        assert_eq!(ts_ms(1e300), None);
    }

    #[test]
    fn any_allowed_signature_under_any_published_key_verifies() {
        use crate::crypto::{Ed25519Seed, default_provider};
        use alloc::string::ToString;
        let p = default_provider();
        let (k1, k2) = (
            Ed25519Seed::from_bytes([1; 32]),
            Ed25519Seed::from_bytes([2; 32]),
        );
        let keys = [p.ed25519_public_key(&k1), p.ed25519_public_key(&k2)];
        let good = sigstring::sign(p, &k2, b"m").to_string();
        let other = sigstring::sign(p, &Ed25519Seed::from_bytes([3; 32]), b"m").to_string();
        assert!(verify_any(p, &keys, b"m", &[&good]));
        assert!(verify_any(
            p,
            &keys,
            b"m",
            &["none:00000000:", "rsa:x:y", &other, &good]
        ));
        assert!(!verify_any(p, &keys, b"m", &[&other]));
        assert!(!verify_any(p, &keys, b"changed", &[&good]));
        assert!(
            !verify_any(p, &[], b"m", &[&good]),
            "no published key, nothing verifies"
        );
        // A kid that names no published key still gets tried against all of them.
        let renamed = good.replacen(&sigstring::kid(p, &keys[1]), "00000000", 1);
        assert!(verify_any(p, &keys, b"m", &[&renamed]));
    }

    #[test]
    fn absent_type_and_re_have_defaults() {
        let s = Signed {
            id: "i",
            from: "f",
            to: "t",
            ts_ms: 5,
            kind: None,
            re: None,
            body: "b",
        };
        assert_eq!(s.canonical(), "i\nf\nt\n5\ntext/plain\n\nb");
        let s = Signed {
            kind: Some("x/y"),
            re: Some("r"),
            ..s
        };
        assert_eq!(s.canonical(), "i\nf\nt\n5\nx/y\nr\nb");
    }
}
