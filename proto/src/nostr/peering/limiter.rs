//! The per-peer on-demand request budget (spec 002 §8): `limits.peer.request.rateLimits`, by
//! default 300 requests a minute, one budget per peer pubkey shared by `REQ`, `COUNT` and
//! `NEG-OPEN` on every connection that peer has open.
//!
//! The budget is relay-wide, so no session holds it. A peer session asks with
//! [`crate::nostr::relay::Output::Admit`] and is answered with
//! [`crate::nostr::relay::Input::Admitted`] carrying an [`Admission`]; the host answers from one
//! [`PeerRequestLimiter`] for the whole relay (or from a shared store, for several processes). A
//! refusal, or an [`Admission::Unavailable`] when the limiter's store fails, is answered
//! `CLOSED rate-limited: … retry in Ns` (`REQ`, `COUNT`) or `NEG-ERR rate-limited: …`
//! (`NEG-OPEN`): the limiter fails closed.
//!
//! Each `{period, rate}` entry is a token bucket measured in exact integers: a bucket of
//! `rate × period_secs` tokens refilling `rate` tokens a second, each request taking
//! `period_secs` tokens. That is at most `rate` requests at once and `rate` per `period` sustained,
//! with no rounding of `rate / period`. A request passes only when every entry has room, and
//! takes from all of them.

use alloc::vec::Vec;
use core::fmt;

use crate::core::{BoundedMap, Timestamp, TokenBucket};

/// One `{period, rate}` entry of `limits.peer.request.rateLimits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// The period, in whole seconds.
    pub period_secs: u32,
    /// Requests allowed per period.
    pub rate: u32,
}

/// The spec's default budget: 300 requests per minute.
pub const DEFAULT_REQUEST_LIMIT: RateLimit = RateLimit {
    period_secs: 60,
    rate: 300,
};

/// Most `rateLimits` entries in one budget.
pub const MAX_RATE_LIMITS: usize = 8;

/// Why a budget was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetError {
    /// A `period` is not a positive whole number of seconds (in milliseconds, a multiple of
    /// 1 000), or a `rate` is 0.
    BadEntry {
        /// The entry's index.
        index: usize,
    },
    /// `rate × period` does not fit the bucket's counter.
    TooLarge {
        /// The entry's index.
        index: usize,
    },
    /// More than [`MAX_RATE_LIMITS`] entries, or none.
    Count,
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadEntry { index } => write!(
                f,
                "limits.peer.request.rateLimits[{index}]: period must be a positive multiple of \
                 1000 ms and rate positive"
            ),
            Self::TooLarge { index } => {
                write!(
                    f,
                    "limits.peer.request.rateLimits[{index}]: rate × period too large"
                )
            }
            Self::Count => write!(
                f,
                "limits.peer.request.rateLimits: 1 to {MAX_RATE_LIMITS} entries"
            ),
        }
    }
}

impl core::error::Error for BudgetError {}

/// A peer's request budget: one or more [`RateLimit`]s, every one of which must have room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestBudget {
    limits: Vec<RateLimit>,
}

impl Default for RequestBudget {
    fn default() -> Self {
        Self {
            limits: alloc::vec![DEFAULT_REQUEST_LIMIT],
        }
    }
}

impl RequestBudget {
    /// A budget of `limits`, refused when empty, too many, or an entry is zero or overflows.
    pub fn new(limits: Vec<RateLimit>) -> Result<Self, BudgetError> {
        if limits.is_empty() || limits.len() > MAX_RATE_LIMITS {
            return Err(BudgetError::Count);
        }
        for (index, l) in limits.iter().enumerate() {
            if l.period_secs == 0 || l.rate == 0 {
                return Err(BudgetError::BadEntry { index });
            }
            if l.rate.checked_mul(l.period_secs).is_none() {
                return Err(BudgetError::TooLarge { index });
            }
        }
        Ok(Self { limits })
    }

    /// A budget from nostream-style `(period in ms, rate)` pairs; a period that is not a whole
    /// number of seconds is refused.
    pub fn from_millis(pairs: &[(u64, u64)]) -> Result<Self, BudgetError> {
        let mut limits = Vec::with_capacity(pairs.len());
        for (index, &(period_ms, rate)) in pairs.iter().enumerate() {
            if period_ms == 0 || period_ms % 1_000 != 0 {
                return Err(BudgetError::BadEntry { index });
            }
            let period_secs =
                u32::try_from(period_ms / 1_000).map_err(|_| BudgetError::TooLarge { index })?;
            let rate = u32::try_from(rate).map_err(|_| BudgetError::TooLarge { index })?;
            limits.push(RateLimit { period_secs, rate });
        }
        Self::new(limits)
    }

    /// The entries.
    pub fn limits(&self) -> &[RateLimit] {
        &self.limits
    }

    fn buckets(&self, now: Timestamp) -> Vec<TokenBucket> {
        self.limits
            .iter()
            .map(|l| TokenBucket::new(l.rate * l.period_secs, l.rate, now))
            .collect()
    }
}

/// The answer to a peer session's ask for one on-demand request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Within the budget: serve it.
    Granted,
    /// Over the budget: refuse, and tell the peer when to retry.
    Refused {
        /// Whole seconds until the budget has room again (at least 1).
        retry_after_secs: u64,
    },
    /// The limiter could not decide (its store failed): refuse (fail closed).
    Unavailable,
}

/// How long a peer is told to wait after [`Admission::Unavailable`], in seconds.
pub const UNAVAILABLE_RETRY_SECS: u64 = 60;

/// The reason a peer's refused request is closed with (`CLOSED` for a `REQ` or `COUNT`,
/// `NEG-ERR` for a `NEG-OPEN`; docs/decisions.md, "Nostream peering §6"), or `None` when it was
/// granted. The `rate-limited:` prefix is NIP-01's, so a peer's worker pauses on it.
pub fn refusal_reason(admission: Admission) -> Option<alloc::string::String> {
    match admission {
        Admission::Granted => None,
        Admission::Refused { retry_after_secs } => Some(alloc::format!(
            "rate-limited: peer request budget spent; retry in {retry_after_secs}s"
        )),
        Admission::Unavailable => Some(alloc::format!(
            "rate-limited: peer request budget unavailable; retry in {UNAVAILABLE_RETRY_SECS}s"
        )),
    }
}

/// The relay-wide budgets of every peer pubkey, one [`RequestBudget`] each.
#[derive(Debug, Clone)]
pub struct PeerRequestLimiter {
    budget: RequestBudget,
    peers: BoundedMap<[u8; 32], Vec<TokenBucket>>,
}

impl PeerRequestLimiter {
    /// A limiter giving each peer `budget`, for at most `capacity` peers (the trust list's size:
    /// only trusted peers ever ask).
    pub fn new(budget: RequestBudget, capacity: usize) -> Self {
        Self {
            budget,
            peers: BoundedMap::new(capacity),
        }
    }

    /// The budget each peer gets.
    pub fn budget(&self) -> &RequestBudget {
        &self.budget
    }

    /// Takes one request from `peer`'s budget at `now`. A peer new to a full table is
    /// [`Admission::Unavailable`]: evicting another peer would hand it a fresh budget.
    pub fn admit(&mut self, now: Timestamp, peer: &[u8; 32]) -> Admission {
        if !self.peers.contains_key(peer) {
            if self.peers.len() >= self.peers.capacity() {
                return Admission::Unavailable;
            }
            self.peers.insert(*peer, self.budget.buckets(now));
        }
        let Some(buckets) = self.peers.get_mut(peer) else {
            return Admission::Unavailable;
        };
        let limits = &self.budget.limits;
        let mut wait_ms = 0u64;
        for (b, l) in buckets.iter().zip(limits) {
            let have = b.available(now);
            if have < l.period_secs {
                let missing = u64::from(l.period_secs - have) * 1_000;
                wait_ms = wait_ms.max(missing.div_ceil(u64::from(l.rate)));
            }
        }
        if wait_ms > 0 {
            return Admission::Refused {
                retry_after_secs: wait_ms.div_ceil(1_000).max(1),
            };
        }
        for (b, l) in buckets.iter_mut().zip(limits) {
            let _ = b.try_take_n(now, l.period_secs);
        }
        Admission::Granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use core::time::Duration;

    const T0: Timestamp = Timestamp::from_secs(1_790_000_000);

    #[test]
    fn the_default_budget_grants_300_then_refuses_with_a_hint() {
        let mut l = PeerRequestLimiter::new(RequestBudget::default(), 4);
        let peer = [1; 32];
        for i in 0..300 {
            assert_eq!(l.admit(T0, &peer), Admission::Granted, "request {i}");
        }
        // The 301st within the minute.
        assert_eq!(
            l.admit(T0, &peer),
            Admission::Refused {
                retry_after_secs: 1
            }
        );
        // Another peer has its own budget.
        assert_eq!(l.admit(T0, &[2; 32]), Admission::Granted);
        // 300 a minute is one every 200 ms.
        assert!(matches!(
            l.admit(T0 + Duration::from_millis(199), &peer),
            Admission::Refused { .. }
        ));
        assert_eq!(
            l.admit(T0 + Duration::from_millis(200), &peer),
            Admission::Granted
        );
        // Sustained, no more than 300 in a minute after the burst.
        let mut granted = 0;
        for ms in (201..60_201).step_by(10) {
            if l.admit(T0 + Duration::from_millis(ms), &peer) == Admission::Granted {
                granted += 1;
            }
        }
        assert!((299..=300).contains(&granted), "{granted}");
    }

    #[test]
    fn every_entry_must_have_room_and_the_hint_names_the_slowest() {
        let budget = RequestBudget::new(vec![
            RateLimit {
                period_secs: 1,
                rate: 5,
            },
            RateLimit {
                period_secs: 3_600,
                rate: 6,
            },
        ])
        .unwrap();
        let mut l = PeerRequestLimiter::new(budget, 1);
        let p = [9; 32];
        for _ in 0..5 {
            assert_eq!(l.admit(T0, &p), Admission::Granted);
        }
        assert_eq!(
            l.admit(T0, &p),
            Admission::Refused {
                retry_after_secs: 1
            }
        );
        assert_eq!(l.admit(T0 + Duration::from_secs(1), &p), Admission::Granted);
        // The hourly entry is spent (6): the hint is ten minutes (one per 600 s).
        assert_eq!(
            l.admit(T0 + Duration::from_secs(2), &p),
            Admission::Refused {
                retry_after_secs: 598
            }
        );
    }

    #[test]
    fn a_full_table_fails_closed_instead_of_evicting() {
        let mut l = PeerRequestLimiter::new(RequestBudget::default(), 1);
        assert_eq!(l.admit(T0, &[1; 32]), Admission::Granted);
        assert_eq!(l.admit(T0, &[2; 32]), Admission::Unavailable);
        // The first peer's spent budget is not reset by the newcomer.
        for _ in 0..299 {
            assert_eq!(l.admit(T0, &[1; 32]), Admission::Granted);
        }
        assert!(matches!(l.admit(T0, &[1; 32]), Admission::Refused { .. }));
    }

    #[test]
    fn budgets_are_checked_at_load() {
        assert_eq!(
            RequestBudget::from_millis(&[(60_000, 300)]).unwrap(),
            RequestBudget::default()
        );
        assert_eq!(
            RequestBudget::from_millis(&[(1_500, 3)]),
            Err(BudgetError::BadEntry { index: 0 })
        );
        assert_eq!(
            RequestBudget::from_millis(&[(60_000, 0)]),
            Err(BudgetError::BadEntry { index: 0 })
        );
        assert_eq!(
            RequestBudget::from_millis(&[(86_400_000, u64::from(u32::MAX))]),
            Err(BudgetError::TooLarge { index: 0 })
        );
        assert_eq!(RequestBudget::from_millis(&[]), Err(BudgetError::Count));
    }
}
