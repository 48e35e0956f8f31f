//! Exponential backoff with "equal jitter", drawn from an injected random source.
//!
//! Used by every reconnect rule: Minca nodes redialling relays and always-on nodes, and AIRC
//! clients reconnecting to a realm.
//!
//! Attempt `n` (counting from 0) has the ceiling `min(max, initial × multiplier^n)`, saturating,
//! and waits a delay drawn uniformly from `[ceiling / 2, ceiling]` at nanosecond resolution. Equal
//! jitter keeps half of the exponential spacing (so a retry never comes sooner than half the
//! ceiling) while spreading a crowd of peers that all lost the same relay at once.

use core::time::Duration;

use rand_core::Rng;

/// The shape of a backoff schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The ceiling of the first attempt.
    pub initial: Duration,
    /// The largest ceiling: once reached, every later attempt uses it.
    pub max: Duration,
    /// The ceiling's growth per attempt; below 1 it is taken as 1, so backoff never shrinks.
    pub multiplier: u32,
}

/// Exponential backoff state: how many delays have been handed out since the last reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    config: BackoffConfig,
    attempts: u32,
}

/// Draws beyond which [`uniform`] gives up rejecting and accepts a reduced draw. A fair source
/// hits this with probability below 2^-64; it only bounds the loop against a broken source.
const MAX_REJECTIONS: u32 = 64;

impl Backoff {
    /// A schedule at attempt 0.
    pub fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            attempts: 0,
        }
    }

    /// The schedule's shape.
    pub fn config(&self) -> BackoffConfig {
        self.config
    }

    /// The delay before the next attempt, with jitter drawn from `rng`; counts the attempt.
    pub fn next_delay<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Duration {
        let ceiling = self.ceiling();
        self.attempts = self.attempts.saturating_add(1);
        let nanos = ceiling.as_nanos();
        let low = nanos / 2;
        from_nanos(low + uniform(rng, nanos - low))
    }

    /// The ceiling of the next attempt (before jitter).
    pub fn ceiling(&self) -> Duration {
        let multiplier = self.config.multiplier.max(1);
        let mut c = self.config.initial;
        let mut n = 0;
        // At most ~95 rounds: a non-zero ceiling at least doubles each round until it reaches
        // `max` or saturates at Duration::MAX.
        while n < self.attempts && c < self.config.max && multiplier > 1 && !c.is_zero() {
            c = c.saturating_mul(multiplier);
            n += 1;
        }
        c.min(self.config.max)
    }

    /// Back to attempt 0 (after a success).
    pub fn reset(&mut self) {
        self.attempts = 0;
    }

    /// Delays handed out since the last reset (saturating at `u32::MAX`).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// A uniform draw from `0..=span`, by rejection from the smallest covering power of two.
fn uniform<R: Rng + ?Sized>(rng: &mut R, span: u128) -> u128 {
    if span == 0 {
        return 0;
    }
    let mask = u128::MAX >> span.leading_zeros();
    let mut draw = 0;
    for _ in 0..MAX_REJECTIONS {
        draw = next_u128(rng, mask) & mask;
        if draw <= span {
            return draw;
        }
    }
    // Only a broken source gets here; fold rather than loop forever.
    draw % (span + 1)
}

/// Enough random bits to cover `mask`: one `u64` when it fits, so the common case costs one draw.
fn next_u128<R: Rng + ?Sized>(rng: &mut R, mask: u128) -> u128 {
    let low = u128::from(rng.next_u64());
    if mask > u128::from(u64::MAX) {
        low | (u128::from(rng.next_u64()) << 64)
    } else {
        low
    }
}

/// Nanoseconds back to a duration, saturating (never needed for values from a duration).
fn from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, sub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const RECONNECT: BackoffConfig = BackoffConfig {
        initial: Duration::from_millis(500),
        max: Duration::from_secs(60),
        multiplier: 2,
    };

    #[test]
    fn delays_stay_within_equal_jitter_bounds() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut b = Backoff::new(RECONNECT);
        for n in 0..40u32 {
            let ceiling = Duration::from_millis(500)
                .saturating_mul(1u32 << n.min(20))
                .min(RECONNECT.max);
            assert_eq!(b.ceiling(), ceiling, "attempt {n}");
            let d = b.next_delay(&mut rng);
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {n}: {d:?} vs {ceiling:?}"
            );
        }
        assert_eq!(b.attempts(), 40);
    }

    #[test]
    fn the_cap_is_reached_and_held() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut b = Backoff::new(RECONNECT);
        // 500 ms × 2^7 = 64 s > 60 s: capped from attempt 7 on.
        for _ in 0..7 {
            b.next_delay(&mut rng);
        }
        for _ in 0..100 {
            assert_eq!(b.ceiling(), RECONNECT.max);
            let d = b.next_delay(&mut rng);
            assert!(d >= Duration::from_secs(30) && d <= RECONNECT.max);
        }
    }

    #[test]
    fn no_overflow_after_many_attempts() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let huge = BackoffConfig {
            initial: Duration::from_secs(1),
            max: Duration::MAX,
            multiplier: u32::MAX,
        };
        let mut b = Backoff::new(huge);
        for _ in 0..1000 {
            let d = b.next_delay(&mut rng);
            assert!(d >= Duration::from_millis(500));
        }
        assert_eq!(b.ceiling(), Duration::MAX);
        let d = b.next_delay(&mut rng);
        assert!(d >= Duration::MAX / 2);
        let mut b = Backoff::new(RECONNECT);
        for _ in 0..1000 {
            b.next_delay(&mut rng);
        }
        assert_eq!(b.ceiling(), RECONNECT.max);
    }

    #[test]
    fn reset_starts_over() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut b = Backoff::new(RECONNECT);
        for _ in 0..5 {
            b.next_delay(&mut rng);
        }
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.ceiling(), RECONNECT.initial);
        assert!(b.next_delay(&mut rng) <= RECONNECT.initial);
    }

    #[test]
    fn same_seed_same_sequence() {
        let run = |seed| {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let mut b = Backoff::new(RECONNECT);
            (0..20).map(|_| b.next_delay(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn degenerate_shapes() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let zero = BackoffConfig {
            initial: Duration::ZERO,
            max: Duration::from_secs(1),
            multiplier: 2,
        };
        let mut b = Backoff::new(zero);
        assert_eq!(b.next_delay(&mut rng), Duration::ZERO);
        let flat = BackoffConfig {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(1),
            multiplier: 0,
        };
        let mut b = Backoff::new(flat);
        for _ in 0..10 {
            assert_eq!(b.ceiling(), Duration::from_secs(1));
            b.next_delay(&mut rng);
        }
    }

    /// A source stuck at all ones: rejection must still terminate.
    struct Stuck;
    impl rand_core::TryRng for Stuck {
        type Error = rand_core::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            Ok(u32::MAX)
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            Ok(u64::MAX)
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
            dst.fill(0xff);
            Ok(())
        }
    }

    #[test]
    fn a_broken_source_cannot_hang_it() {
        let mut b = Backoff::new(BackoffConfig {
            initial: Duration::from_nanos(10),
            max: Duration::from_secs(1),
            multiplier: 2,
        });
        let d = b.next_delay(&mut Stuck);
        assert!(d >= Duration::from_nanos(5) && d <= Duration::from_nanos(10));
        assert_eq!(uniform(&mut Stuck, 4), 7 % 5);
    }
}
