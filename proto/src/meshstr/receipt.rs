//! Receipts (meshstr §6.2): the `budget/1.0/receipt` body, its chain link, its BIP-340 signature,
//! and the issuer's side: the head it keeps, the `receipt-ack` it answers with, and a close
//! accepted as final within the grace of a tenth of the window.
//!
//! The chain link is SHA-256 of the canonical body with `sig` excluded, so the link is the same
//! before and after signing and the head the issuer acknowledges is exactly the message signed.
//! `prev` of seq 0 is thirty-two zero bytes; `prev` of seq *n* is the link of seq *n* − 1. Binary
//! fields (`prev`, `sig`) are lower-case hex (docs/decisions.md: the example leaves them empty).

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::limits::{Counter, Counters, CountersError, Limit, Limits};
use super::{digest_without_sig, lower_hex};
use crate::codec::hex;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};

/// The window a Unix second falls in, for windows of `window_secs` counted from the epoch: the
/// §6.2 example's `at` 1787003600 is in window 496389 of an hour.
pub fn window_of(at_secs: u64, window_secs: u64) -> u64 {
    at_secs.checked_div(window_secs).unwrap_or(0)
}

/// The grace in which a close is accepted as final: one tenth of the window (§6.2), rounded down.
pub const fn grace_secs(window_secs: u64) -> u64 {
    window_secs / 10
}

/// `max_clock_skew_seconds` (§6.2; its value is not in the text, docs/decisions.md): a receipt
/// timed further than this from the issuer's clock is a diagnosis, not a finding.
pub const MAX_CLOCK_SKEW_SECS: u64 = 120;

/// The most `forwarded_for` entries a receipt may carry (not in the text, docs/decisions.md):
/// a delivery path is at most three hops, so a handful of DIDs is every honest receipt.
pub const MAX_FORWARDED_FOR: usize = 16;

/// The longest `grant` reference or `forwarded_for` entry, in bytes (not in the text,
/// docs/decisions.md): a `did:nostr` is 74 bytes and an event id 64.
pub const MAX_REF_BYTES: usize = 128;

/// A `budget/1.0/receipt` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The grant the receipt accounts against (the kind 30801's id, or a reference to it).
    pub grant: String,
    /// The window index.
    pub window: u64,
    /// The receipt's place in the window's chain, from 0.
    pub seq: u64,
    /// The link of the previous receipt, or 32 zero bytes at seq 0.
    pub prev: [u8; 32],
    /// Cumulative counters within the window.
    pub counters: Counters,
    /// The nodes the subject forwarded for, as `did:nostr` strings.
    pub forwarded_for: Vec<String>,
    /// The subject's own clock, Unix seconds.
    pub at: u64,
    /// The subject's BIP-340 signature over the link, once signed.
    pub sig: Option<[u8; 64]>,
}

/// Why a receipt body could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptError {
    /// Not a JSON object, or a member missing, unknown, or of the wrong type.
    Shape,
    /// `counters` is not exactly the nine integer counters.
    Counters(CountersError),
    /// `prev` is not 64 lower-case hex digits, or `sig` not 128.
    Hex,
    /// A reference or the `forwarded_for` list is over its bound.
    TooLarge,
}

impl Receipt {
    /// The body as JSON, with `sig` when signed.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("grant".into(), Value::from(self.grant.as_str()));
        m.insert("window".into(), Value::from(self.window));
        m.insert("seq".into(), Value::from(self.seq));
        m.insert("prev".into(), Value::from(hex::encode(&self.prev)));
        m.insert("counters".into(), self.counters.to_value());
        m.insert(
            "forwarded_for".into(),
            Value::Array(
                self.forwarded_for
                    .iter()
                    .map(|s| Value::from(s.as_str()))
                    .collect(),
            ),
        );
        m.insert("at".into(), Value::from(self.at));
        if let Some(sig) = &self.sig {
            m.insert("sig".into(), Value::from(hex::encode(sig)));
        }
        Value::Object(m)
    }

    /// Reads a body: exactly the eight members (`sig` optional), each of its type, within bounds.
    pub fn from_value(v: &Value) -> Result<Self, ReceiptError> {
        let m = v.as_object().ok_or(ReceiptError::Shape)?;
        const KEYS: [&str; 8] = [
            "grant",
            "window",
            "seq",
            "prev",
            "counters",
            "forwarded_for",
            "at",
            "sig",
        ];
        if m.keys().any(|k| !KEYS.contains(&k.as_str())) {
            return Err(ReceiptError::Shape);
        }
        let str_of = |k: &str| m.get(k).and_then(Value::as_str).ok_or(ReceiptError::Shape);
        let u64_of = |k: &str| m.get(k).and_then(Value::as_u64).ok_or(ReceiptError::Shape);
        let grant = str_of("grant")?;
        if grant.is_empty() || grant.len() > MAX_REF_BYTES {
            return Err(ReceiptError::TooLarge);
        }
        let prev = lower_hex::<32>(str_of("prev")?).ok_or(ReceiptError::Hex)?;
        let counters = Counters::from_value(m.get("counters").ok_or(ReceiptError::Shape)?)
            .map_err(ReceiptError::Counters)?;
        let list = m
            .get("forwarded_for")
            .and_then(Value::as_array)
            .ok_or(ReceiptError::Shape)?;
        if list.len() > MAX_FORWARDED_FOR {
            return Err(ReceiptError::TooLarge);
        }
        let mut forwarded_for = Vec::with_capacity(list.len());
        for x in list {
            let s = x.as_str().ok_or(ReceiptError::Shape)?;
            if s.len() > MAX_REF_BYTES {
                return Err(ReceiptError::TooLarge);
            }
            forwarded_for.push(String::from(s));
        }
        let sig = match m.get("sig") {
            None => None,
            Some(s) => Some(
                lower_hex::<64>(s.as_str().ok_or(ReceiptError::Shape)?).ok_or(ReceiptError::Hex)?,
            ),
        };
        Ok(Receipt {
            grant: grant.into(),
            window: u64_of("window")?,
            seq: u64_of("seq")?,
            prev,
            counters,
            forwarded_for,
            at: u64_of("at")?,
            sig,
        })
    }

    /// The chain link: SHA-256 of the canonical body with `sig` excluded.
    pub fn link(&self, provider: &dyn CryptoProvider) -> [u8; 32] {
        digest_without_sig(provider, &self.to_value())
    }

    /// Signs the link with the subject's node key (`aux` drawn from the caller's RNG).
    pub fn sign(
        &mut self,
        provider: &dyn CryptoProvider,
        secret: &Secp256k1Secret,
        aux: &[u8; 32],
    ) -> Result<(), CryptoError> {
        let link = self.link(provider);
        self.sig = Some(provider.schnorr_sign(secret, &link, aux)?);
        Ok(())
    }

    /// Whether `sig` is the subject's valid signature over the link.
    pub fn verify(&self, provider: &dyn CryptoProvider, subject: &[u8; 32]) -> bool {
        self.sig
            .is_some_and(|sig| provider.schnorr_verify(subject, &self.link(provider), &sig))
    }
}

/// A `receipt-ack`'s verdict (§6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckStatus {
    /// The receipt extends the chain; it is the head now.
    Accepted,
    /// The receipt does not extend the chain, or carries no valid signature; the head is unmoved.
    Divergent,
    /// A close accepted as the window's final receipt.
    Final,
}

impl AckStatus {
    /// The status's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            AckStatus::Accepted => "accepted",
            AckStatus::Divergent => "divergent",
            AckStatus::Final => "final",
        }
    }
}

/// Why a receipt was answered `divergent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Divergence {
    /// No valid `sig` by the subject: not a claim anyone can be held to.
    BadSignature,
    /// For another grant than the one this chain accounts.
    WrongGrant,
    /// For a window older than the head's, or for the window already closed final.
    StaleWindow,
    /// A first receipt (of a new window) whose seq is not 0 or whose `prev` is not zero.
    BadGenesis,
    /// `seq` is not the head's plus one.
    SeqNotNext,
    /// `prev` is not the head's link: the chain was rewritten.
    PrevMismatch,
    /// A counter went down: counters are cumulative within the window.
    CountersDecreased,
}

/// The issuer's answer to a receipt: the head it holds after it, and the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiptAck {
    /// The link of the head held (all zero before any receipt).
    pub head: [u8; 32],
    /// The verdict.
    pub status: AckStatus,
    /// Why, when `divergent`.
    pub reason: Option<Divergence>,
}

impl ReceiptAck {
    /// The `receipt-ack` body (`head` as lower-case hex, `status`).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("head".into(), Value::from(hex::encode(&self.head)));
        m.insert("status".into(), Value::from(self.status.as_str()));
        Value::Object(m)
    }
}

/// What the issuer keeps of a grant's receipts: the head only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The grant.
    pub grant: String,
    /// The window of the head.
    pub window: u64,
    /// The head's seq.
    pub seq: u64,
    /// The head's link.
    pub link: [u8; 32],
    /// The head's counters: the subject's claim for the window.
    pub counters: Counters,
    /// Whether the window was closed final.
    pub final_: bool,
}

/// The issuer's side of one grant's receipt chain.
#[derive(Clone, Debug)]
pub struct Chain {
    grant: String,
    subject: [u8; 32],
    window_secs: u64,
    head: Option<Head>,
}

impl Chain {
    /// A chain for `grant` issued to `subject` (its x-only node key), with windows of
    /// `window_secs`.
    pub fn new(grant: &str, subject: [u8; 32], window_secs: u64) -> Self {
        Chain {
            grant: grant.into(),
            subject,
            window_secs,
            head: None,
        }
    }

    /// The head held.
    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// The claim the window is evaluated against: the head's counters if the head is in
    /// `window`, else `None` (no receipt for it).
    pub fn claim_for(&self, window: u64) -> Option<Counters> {
        self.head
            .as_ref()
            .filter(|h| h.window == window)
            .map(|h| h.counters)
    }

    fn ack(&self, status: AckStatus, reason: Option<Divergence>) -> ReceiptAck {
        ReceiptAck {
            head: self.head.as_ref().map_or([0; 32], |h| h.link),
            status,
            reason,
        }
    }

    /// Takes a receipt (`close`: it came as `budget/1.0/close`) arriving at the issuer's
    /// `now_secs`, and answers it. Only an accepted receipt moves the head.
    pub fn receive(
        &mut self,
        provider: &dyn CryptoProvider,
        r: &Receipt,
        close: bool,
        now_secs: u64,
    ) -> ReceiptAck {
        let divergent = |c: &Self, why| c.ack(AckStatus::Divergent, Some(why));
        if !r.verify(provider, &self.subject) {
            return divergent(self, Divergence::BadSignature);
        }
        if r.grant != self.grant {
            return divergent(self, Divergence::WrongGrant);
        }
        let link = r.link(provider);
        match &self.head {
            Some(h) if r.window < h.window || (r.window == h.window && h.final_) => {
                return divergent(self, Divergence::StaleWindow);
            }
            Some(h) if r.window == h.window => {
                if r.seq != h.seq.wrapping_add(1) || h.seq == u64::MAX {
                    return divergent(self, Divergence::SeqNotNext);
                }
                if r.prev != h.link {
                    return divergent(self, Divergence::PrevMismatch);
                }
                if !r.counters.dominates(&h.counters) {
                    return divergent(self, Divergence::CountersDecreased);
                }
            }
            _ => {
                if r.seq != 0 || r.prev != [0; 32] {
                    return divergent(self, Divergence::BadGenesis);
                }
            }
        }
        let window_end = r.window.saturating_add(1).saturating_mul(self.window_secs);
        let is_final = close && now_secs <= window_end.saturating_add(grace_secs(self.window_secs));
        self.head = Some(Head {
            grant: r.grant.clone(),
            window: r.window,
            seq: r.seq,
            link,
            counters: r.counters,
            final_: is_final,
        });
        self.ack(
            if is_final {
                AckStatus::Final
            } else {
                AckStatus::Accepted
            },
            None,
        )
    }
}

/// Whether a receipt's `at` is further than [`MAX_CLOCK_SKEW_SECS`] from the issuer's clock: a
/// diagnosis (the remedy is a clock), never a finding.
pub fn skewed(at_secs: u64, now_secs: u64) -> bool {
    at_secs.abs_diff(now_secs) > MAX_CLOCK_SKEW_SECS
}

/// The subject's mirror of a grant (§6.2): one bucket per limit, holding what is left of the
/// limit in the current window and refilled whole at the window's boundary, so the counters the
/// subject's receipts claim never pass a limit it respected.
///
/// A bucket refilling continuously (as [`crate::core::TokenBucket`]) would let up to twice a
/// limit through one window the issuer evaluates (a full burst at its end, the refill at the
/// next start), and its `u32` burst cannot hold `bytes_out` at the anchor tier; the issuer prices
/// whole windows, so the mirror is window-aligned (docs/decisions.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    limits: Limits,
    window_secs: u64,
    window: u64,
    used: Counters,
}

impl Mirror {
    /// A mirror of `limits` for windows of `window_secs`, as of `now_secs`.
    pub fn new(limits: Limits, window_secs: u64, now_secs: u64) -> Self {
        let window_secs = window_secs.max(1);
        Mirror {
            limits,
            window_secs,
            window: window_of(now_secs, window_secs),
            used: Counters::ZERO,
        }
    }

    /// Takes an amended grant's limits (a remedy, a shed, growth), keeping what the window used.
    pub fn amend(&mut self, limits: Limits) {
        self.limits = limits;
    }

    fn roll(&mut self, now_secs: u64) {
        let w = window_of(now_secs, self.window_secs);
        if w > self.window {
            self.window = w;
            self.used = Counters::ZERO;
        }
    }

    /// What is left of `limit` in the window of `now_secs`.
    pub fn available(&mut self, now_secs: u64, limit: Limit) -> u64 {
        self.roll(now_secs);
        self.limits.get(limit).saturating_sub(self.used.of(limit))
    }

    /// Takes `n` of `limit` if all `n` fit in the window; otherwise takes none. The counter it
    /// prices moves with it, so the next receipt claims it.
    pub fn try_take(&mut self, now_secs: u64, limit: Limit, n: u64) -> bool {
        if self.available(now_secs, limit) < n {
            return false;
        }
        let c = limit.counter();
        self.used.set(c, self.used.get(c) + n);
        true
    }

    /// Counts what no limit prices (`dups_sent`), or what happened regardless (an error).
    pub fn count(&mut self, now_secs: u64, counter: Counter, n: u64) {
        self.roll(now_secs);
        self.used
            .set(counter, self.used.get(counter).saturating_add(n));
    }

    /// The window `now_secs` is in, and its cumulative counters: what the next receipt claims.
    pub fn counters(&mut self, now_secs: u64) -> (u64, Counters) {
        self.roll(now_secs);
        (self.window, self.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::meshstr::limits::Counter;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    const W: u64 = 3600;

    fn body(seq: u64, prev: [u8; 32], req: u64) -> Receipt {
        let mut counters = Counters::ZERO;
        counters.set(Counter::Req, req);
        Receipt {
            grant: "g".repeat(64),
            window: 496389,
            seq,
            prev,
            counters,
            forwarded_for: vec![],
            at: 1787003600 + seq,
            sig: None,
        }
    }

    fn chain_of(
        n: u64,
        secret: &Secp256k1Secret,
        rng: &mut ChaCha20Rng,
        req: impl Fn(u64) -> u64,
    ) -> Vec<Receipt> {
        let p = default_provider();
        let mut out: Vec<Receipt> = Vec::new();
        let mut prev = [0; 32];
        for seq in 0..n {
            let mut r = body(seq, prev, req(seq));
            let mut aux = [0; 32];
            rng.fill_bytes(&mut aux);
            r.sign(p, secret, &aux).unwrap();
            prev = r.link(p);
            out.push(r);
        }
        out
    }

    #[test]
    fn the_spec_receipt_window() {
        assert_eq!(window_of(1787003600, 3600), 496389);
        assert_eq!(grace_secs(3600), 360);
    }

    #[test]
    fn a_body_reads_back_and_signing_leaves_the_link() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(62);
        let secret = generate_secp256k1(p, &mut rng);
        let mut r = body(0, [0; 32], 141);
        r.forwarded_for.push("did:nostr:ab".into());
        let before = r.link(p);
        r.sign(p, &secret, &[7; 32]).unwrap();
        assert_eq!(r.link(p), before);
        let v = r.to_value();
        assert_eq!(Receipt::from_value(&v).unwrap(), r);
        let pk = p.schnorr_public_key(&secret).unwrap();
        assert!(r.verify(p, &pk));
        let mut forged = r.clone();
        forged.counters.set(Counter::Req, 140);
        assert!(!forged.verify(p, &pk));
    }

    #[test]
    fn bodies_that_are_not_receipts_are_refused() {
        let v = body(0, [0; 32], 1).to_value();
        let mut extra = v.clone();
        extra["tier"] = "anchor".into();
        assert_eq!(Receipt::from_value(&extra), Err(ReceiptError::Shape));
        let mut upper = v.clone();
        upper["prev"] = "AA".repeat(32).into();
        assert_eq!(Receipt::from_value(&upper), Err(ReceiptError::Hex));
        let mut neg = v.clone();
        neg["seq"] = (-1).into();
        assert_eq!(Receipt::from_value(&neg), Err(ReceiptError::Shape));
        let mut many = v.clone();
        many["forwarded_for"] = Value::Array(vec!["x".into(); MAX_FORWARDED_FOR + 1]);
        assert_eq!(Receipt::from_value(&many), Err(ReceiptError::TooLarge));
        let mut huge = v.clone();
        huge["grant"] = "g".repeat(MAX_REF_BYTES + 1).into();
        assert_eq!(Receipt::from_value(&huge), Err(ReceiptError::TooLarge));
    }

    #[test]
    fn the_issuer_keeps_the_head_and_acks_each_receipt() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let secret = generate_secp256k1(p, &mut rng);
        let pk = p.schnorr_public_key(&secret).unwrap();
        let rs = chain_of(4, &secret, &mut rng, |s| 10 * (s + 1));
        let mut c = Chain::new(&"g".repeat(64), pk, W);
        let now = 1787003700;
        // seq 1 before seq 0: not the genesis.
        let a = c.receive(p, &rs[1], false, now);
        assert_eq!(
            (a.status, a.reason),
            (AckStatus::Divergent, Some(Divergence::BadGenesis))
        );
        assert_eq!(a.head, [0; 32]);
        for r in &rs[..3] {
            let a = c.receive(p, r, false, now);
            assert_eq!(a.status, AckStatus::Accepted);
            assert_eq!(a.head, r.link(p));
        }
        // A replay of an earlier one does not move the head.
        let a = c.receive(p, &rs[1], false, now);
        assert_eq!(a.reason, Some(Divergence::SeqNotNext));
        assert_eq!(a.head, rs[2].link(p));
        assert_eq!(c.claim_for(496389).unwrap().get(Counter::Req), 30);
        assert_eq!(c.claim_for(496390), None);
        // Unsigned: divergent.
        let mut unsigned = rs[3].clone();
        unsigned.sig = None;
        assert_eq!(
            c.receive(p, &unsigned, false, now).reason,
            Some(Divergence::BadSignature)
        );
        // Signed by someone else: divergent.
        let other = generate_secp256k1(p, &mut rng);
        let mut forged = rs[3].clone();
        forged.sign(p, &other, &[0; 32]).unwrap();
        assert_eq!(
            c.receive(p, &forged, false, now).reason,
            Some(Divergence::BadSignature)
        );
        assert_eq!(c.receive(p, &rs[3], false, now).status, AckStatus::Accepted);
    }

    #[test]
    fn counters_never_go_down() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let secret = generate_secp256k1(p, &mut rng);
        let pk = p.schnorr_public_key(&secret).unwrap();
        let rs = chain_of(2, &secret, &mut rng, |s| 100 - s);
        let mut c = Chain::new(&"g".repeat(64), pk, W);
        assert_eq!(c.receive(p, &rs[0], false, 0).status, AckStatus::Accepted);
        assert_eq!(
            c.receive(p, &rs[1], false, 0).reason,
            Some(Divergence::CountersDecreased)
        );
    }

    #[test]
    fn a_close_is_final_only_within_a_tenth_of_the_window() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let secret = generate_secp256k1(p, &mut rng);
        let pk = p.schnorr_public_key(&secret).unwrap();
        let rs = chain_of(3, &secret, &mut rng, |s| s);
        let end = 496390 * W;
        let mut c = Chain::new(&"g".repeat(64), pk, W);
        assert_eq!(
            c.receive(p, &rs[0], true, end + 361).status,
            AckStatus::Accepted
        );
        assert_eq!(
            c.receive(p, &rs[1], true, end + 360).status,
            AckStatus::Final
        );
        // After the final receipt the window is closed.
        assert_eq!(
            c.receive(p, &rs[2], false, end).reason,
            Some(Divergence::StaleWindow)
        );
    }

    #[test]
    fn a_new_window_starts_a_new_chain_and_old_windows_are_stale() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let secret = generate_secp256k1(p, &mut rng);
        let pk = p.schnorr_public_key(&secret).unwrap();
        let rs = chain_of(2, &secret, &mut rng, |s| s);
        let mut c = Chain::new(&"g".repeat(64), pk, W);
        assert_eq!(c.receive(p, &rs[0], false, 0).status, AckStatus::Accepted);
        let mut next = body(0, [0; 32], 0);
        next.window += 1;
        next.sign(p, &secret, &[1; 32]).unwrap();
        assert_eq!(c.receive(p, &next, false, 0).status, AckStatus::Accepted);
        assert_eq!(
            c.receive(p, &rs[1], false, 0).reason,
            Some(Divergence::StaleWindow)
        );
    }

    #[test]
    fn skew_beyond_the_bound_is_a_diagnosis() {
        assert!(!skewed(1000, 1000 + MAX_CLOCK_SKEW_SECS));
        assert!(skewed(1000, 1001 + MAX_CLOCK_SKEW_SECS));
        assert!(skewed(u64::MAX, 0));
    }

    #[test]
    fn property_a_chain_cannot_be_rewritten_without_breaking_the_head() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(0x6_2);
        let secret = generate_secp256k1(p, &mut rng);
        let pk = p.schnorr_public_key(&secret).unwrap();
        for _ in 0..40 {
            let n = 1 + rng.next_u64() % 6;
            let rs = chain_of(n, &secret, &mut rng, |s| 5 * s);
            let mut issuer = Chain::new(&"g".repeat(64), pk, W);
            for r in &rs {
                assert_eq!(issuer.receive(p, r, false, 0).status, AckStatus::Accepted);
            }
            let head = issuer.head().unwrap().link;
            // The subject rewrites receipt k (lowering a claim it regrets), re-links and re-signs
            // everything after it with its own key.
            let k = rng.next_u64() % n;
            let mut rewritten = rs.clone();
            rewritten[k as usize]
                .counters
                .set(Counter::Req, 5 * k + 1 + rng.next_u64() % 1000);
            let mut prev = if k == 0 {
                [0; 32]
            } else {
                rs[k as usize - 1].link(p)
            };
            for r in rewritten.iter_mut().skip(k as usize) {
                r.prev = prev;
                r.sign(p, &secret, &[9; 32]).unwrap();
                prev = r.link(p);
            }
            assert_ne!(prev, head, "a rewritten chain ends at another head");
            // And the issuer, holding the head, takes none of the rewritten receipts.
            for r in &rewritten {
                assert_eq!(issuer.receive(p, r, false, 0).status, AckStatus::Divergent);
            }
            assert_eq!(issuer.head().unwrap().link, head);
        }
    }
    #[test]
    fn the_mirror_holds_each_limit_per_window_and_refills_at_the_boundary() {
        use crate::meshstr::limits::Tier;
        let w = 3600;
        let t0 = 496389 * w;
        let mut m = Mirror::new(Limits::ceilings(Tier::Anchor), w, t0 + 5);
        // The anchor's bytes_out (2^32) does not fit a u32 bucket; the mirror holds it whole.
        assert_eq!(m.available(t0 + 5, Limit::BytesOut), 4294967296);
        assert!(m.try_take(t0 + 6, Limit::BytesOut, 4294967296));
        assert!(
            !m.try_take(t0 + 7, Limit::BytesOut, 1),
            "one byte past the limit"
        );
        // A conn_rate session is counted under conn_open.
        for _ in 0..192 {
            assert!(m.try_take(t0 + 8, Limit::ConnRate, 1));
        }
        assert!(!m.try_take(t0 + 8, Limit::ConnRate, 1));
        assert!(
            !m.try_take(t0 + 9, Limit::EventsIn, 48001),
            "all or nothing"
        );
        assert_eq!(m.available(t0 + 9, Limit::EventsIn), 48000);
        m.count(t0 + 9, Counter::DupsSent, 3);
        let (window, c) = m.counters(t0 + w - 1);
        assert_eq!(window, 496389);
        assert_eq!(c.get(Counter::ConnOpen), 192);
        assert_eq!(c.get(Counter::BytesOut), 4294967296);
        assert_eq!(c.get(Counter::DupsSent), 3);
        // Nothing refills inside the window, everything at its end.
        assert!(!m.try_take(t0 + w - 1, Limit::ConnRate, 1));
        assert!(m.try_take(t0 + w, Limit::ConnRate, 1));
        assert_eq!(m.counters(t0 + w).1.get(Counter::BytesOut), 0);
        // A clock going back does not refill.
        assert!(!m.counters(t0).1.is_zero());
        // An amend down takes effect at once against what the window used.
        m.amend(Limits::ceilings(Tier::Probation));
        assert_eq!(m.available(t0 + w, Limit::ConnRate), 3);
    }
}
