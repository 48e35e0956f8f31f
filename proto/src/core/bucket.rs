//! Token buckets: a burst capacity and a steady refill rate, computed from `now` with no timer.
//!
//! Used by the rate limits the protocols name: Minca's live-message limit (a burst and a rate per
//! second per peer), relay send pacing, and any per-connection limit a protocol module defines as
//! a [`BucketConfig`] constant. A pacing machine asks [`TokenBucket::next_available`] for the
//! instant to put in its [`Wakeup`](super::Wakeup).
//!
//! Arithmetic is exact integers: the bucket holds *milli-tokens*, and each millisecond adds
//! `per_second` of them (1 token = 1000 milli-tokens = 1000 ms at 1 token/s). The remainder of a
//! partial token is kept, so a long run never drifts from `per_second` tokens per second.

use super::Timestamp;

/// Milli-tokens per token: one millisecond at one token per second mints one milli-token.
const MILLI: u64 = 1000;

/// A bucket's shape, so a protocol can name its limit as one constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    /// The most tokens the bucket holds (and starts with).
    pub burst: u32,
    /// Tokens added per second of `now` advancing; 0 means the bucket never refills.
    pub per_second: u32,
}

impl BucketConfig {
    /// A bucket of `burst` tokens refilling at `per_second`.
    pub const fn new(burst: u32, per_second: u32) -> Self {
        Self { burst, per_second }
    }

    /// A full bucket of this shape, as of `now`.
    pub fn bucket(self, now: Timestamp) -> TokenBucket {
        TokenBucket::new(self.burst, self.per_second, now)
    }
}

/// A token bucket whose refill is computed from the `now` it is handed.
///
/// Time going backwards never mints tokens and never loses them: the bucket remembers the latest
/// `now` it has seen and refills only once the clock passes it again. (Rebasing on a backwards
/// step would let a clock that oscillates mint a token per oscillation; the cost of the rule chosen
/// is that a large backwards step of the host's clock pauses refill until the clock catches up.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    config: BucketConfig,
    /// Milli-tokens held as of `last`; never above `burst * MILLI`.
    milli: u64,
    /// The latest `now` seen: refill is accounted up to here.
    last: Timestamp,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `per_second`, as of `now`.
    pub fn new(burst: u32, per_second: u32, now: Timestamp) -> Self {
        let config = BucketConfig::new(burst, per_second);
        Self {
            config,
            milli: cap(config),
            last: now,
        }
    }

    /// The shape this bucket was made with.
    pub fn config(&self) -> BucketConfig {
        self.config
    }

    /// Take one token at `now` if one is available.
    pub fn try_take(&mut self, now: Timestamp) -> bool {
        self.try_take_n(now, 1)
    }

    /// Take `n` tokens at `now` if all `n` are available; otherwise take none.
    ///
    /// `n` above the burst is always refused (the bucket can never hold that many); `n == 0`
    /// always succeeds.
    pub fn try_take_n(&mut self, now: Timestamp, n: u32) -> bool {
        self.refill(now);
        let need = u64::from(n) * MILLI;
        if self.milli >= need {
            self.milli -= need;
            true
        } else {
            false
        }
    }

    /// Whole tokens available at `now` (without taking any).
    pub fn available(&self, now: Timestamp) -> u32 {
        let (milli, _) = self.refilled(now);
        // milli <= burst * MILLI, so the quotient fits in u32.
        u32::try_from(milli / MILLI).unwrap_or(u32::MAX)
    }

    /// The earliest instant at which one token is available: `now` when one already is,
    /// [`Timestamp::MAX`] when the bucket can never hold one (zero rate and empty, or zero burst).
    /// After the clock went backwards, the wait is counted from the latest `now` seen.
    pub fn next_available(&self, now: Timestamp) -> Timestamp {
        let (milli, at) = self.refilled(now);
        if milli >= MILLI {
            return now;
        }
        let rate = u64::from(self.config.per_second);
        if rate == 0 || self.config.burst == 0 {
            return Timestamp::MAX;
        }
        // Round up: the token is whole only once the last milli-token has been minted.
        let wait_ms = (MILLI - milli).div_ceil(rate);
        Timestamp::from_millis(at.as_millis().saturating_add(wait_ms))
    }

    /// Bring the stored state up to `now`.
    fn refill(&mut self, now: Timestamp) {
        (self.milli, self.last) = self.refilled(now);
    }

    /// The milli-tokens held at `now` and the instant they are accounted to, without mutating.
    fn refilled(&self, now: Timestamp) -> (u64, Timestamp) {
        if now <= self.last {
            return (self.milli, self.last);
        }
        let elapsed_ms = now.as_millis() - self.last.as_millis();
        // Saturating: a jump of u64::MAX ms just fills the bucket.
        let minted = elapsed_ms.saturating_mul(u64::from(self.config.per_second));
        (self.milli.saturating_add(minted).min(cap(self.config)), now)
    }
}

/// The most milli-tokens a bucket of this shape holds.
fn cap(config: BucketConfig) -> u64 {
    u64::from(config.burst) * MILLI
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    /// Minca live messages, as the Minca module will name them.
    const LIVE: BucketConfig = BucketConfig::new(60, 20);
    /// Relay send pacing.
    const PACING: BucketConfig = BucketConfig::new(40, 20);

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    #[test]
    fn starts_full_and_drains() {
        let t0 = ms(1_000_000);
        let mut b = LIVE.bucket(t0);
        assert_eq!(b.available(t0), 60);
        for _ in 0..60 {
            assert!(b.try_take(t0));
        }
        assert!(!b.try_take(t0));
        assert_eq!(b.available(t0), 0);
        assert_eq!(b.next_available(t0), t0 + Duration::from_millis(50));
    }

    #[test]
    fn refills_one_token_every_50ms_at_20_per_second() {
        let t0 = ms(10_000);
        let mut b = LIVE.bucket(t0);
        assert!(b.try_take_n(t0, 60));
        assert!(!b.try_take(ms(10_049)));
        assert_eq!(b.next_available(ms(10_049)), ms(10_050));
        assert!(b.try_take(ms(10_050)));
        assert!(!b.try_take(ms(10_050)));
        // Then exactly one per 50 ms, for a long time, with no drift.
        for k in 2..=10_000u64 {
            let t = ms(10_000 + 50 * k);
            assert!(!b.try_take(t - Duration::from_millis(1)), "early at k={k}");
            assert!(b.try_take(t), "late at k={k}");
        }
    }

    #[test]
    fn uneven_rates_keep_the_remainder() {
        // 3/s: a token every 333.33 ms; after exactly 1 s, exactly 3.
        let t0 = ms(0);
        let mut b = TokenBucket::new(5, 3, t0);
        assert!(b.try_take_n(t0, 5));
        assert_eq!(b.available(ms(333)), 0);
        assert_eq!(b.available(ms(334)), 1);
        assert_eq!(b.next_available(ms(1)), ms(334));
        assert_eq!(b.available(ms(1_000)), 3);
        assert_eq!(b.available(ms(100_000)), 5);
    }

    #[test]
    fn long_gaps_cap_at_the_burst() {
        let t0 = ms(5);
        let mut b = PACING.bucket(t0);
        assert!(b.try_take_n(t0, 40));
        let later = t0 + Duration::from_secs(3 * 3600);
        assert_eq!(b.available(later), 40);
        assert!(b.try_take_n(later, 40));
        assert!(!b.try_take(later));
        assert_eq!(b.available(Timestamp::MAX), 40);
        assert!(b.try_take_n(Timestamp::MAX, 40));
        assert_eq!(b.next_available(Timestamp::MAX), Timestamp::MAX);
    }

    #[test]
    fn time_going_backwards_neither_mints_nor_loses() {
        let t0 = ms(100_000);
        let mut b = LIVE.bucket(t0);
        assert!(b.try_take_n(t0, 50));
        assert_eq!(b.available(ms(0)), 10);
        assert!(b.try_take_n(ms(0), 10));
        // Back at t0 (or anywhere before it): nothing new.
        assert_eq!(b.available(t0), 0);
        assert!(!b.try_take(ms(99_000)));
        assert_eq!(b.next_available(ms(0)), t0 + Duration::from_millis(50));
        // Oscillating does not mint.
        for _ in 0..100 {
            assert!(!b.try_take(ms(50_000)));
            assert!(!b.try_take(t0));
        }
        assert!(b.try_take(t0 + Duration::from_millis(50)));
    }

    #[test]
    fn zero_rate_never_refills() {
        let mut b = TokenBucket::new(2, 0, ms(0));
        assert!(b.try_take_n(ms(0), 2));
        assert!(!b.try_take(Timestamp::MAX));
        assert_eq!(b.next_available(ms(7)), Timestamp::MAX);
    }

    #[test]
    fn zero_burst_holds_nothing() {
        let mut b = TokenBucket::new(0, 20, ms(0));
        assert!(!b.try_take(ms(1_000_000)));
        assert!(b.try_take_n(ms(1_000_000), 0));
        assert_eq!(b.next_available(ms(0)), Timestamp::MAX);
    }

    #[test]
    fn more_than_the_burst_is_always_refused() {
        let mut b = LIVE.bucket(ms(0));
        assert!(!b.try_take_n(ms(0), 61));
        assert!(!b.try_take_n(Timestamp::MAX, u32::MAX));
        // A refused take takes nothing.
        assert_eq!(b.available(ms(0)), 60);
        assert!(b.try_take_n(ms(0), 60));
    }

    #[test]
    fn extreme_shapes_do_not_overflow() {
        let mut b = TokenBucket::new(u32::MAX, u32::MAX, ms(0));
        assert!(b.try_take_n(ms(0), u32::MAX));
        assert_eq!(b.available(ms(1)), u32::MAX / 1000);
        assert_eq!(b.available(Timestamp::MAX), u32::MAX);
    }
}
