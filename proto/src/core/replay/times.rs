//! The times a [`ReplayWindow`](super::ReplayWindow) remembers for one sender.

use alloc::vec::Vec;

use crate::core::Timestamp;

/// Times held in the sender's entry itself. A sender most often has one to three live times (a
/// Minca peer says a hello every two minutes, and an offer or answer now and then), so nearly
/// every check reads them from the entry it already found rather than from a second heap block,
/// a cache miss at scale.
pub(super) const INLINE_TIMES: usize = 3;

/// Ascending times without repeats; inline up to [`INLINE_TIMES`], on the heap beyond.
#[derive(Clone, Debug)]
pub(super) enum Times {
    Inline {
        len: u8,
        at: [Timestamp; INLINE_TIMES],
    },
    /// Once spilled a list stays on the heap: a sender that had more is likely to again.
    Spilled(Vec<Timestamp>),
}

impl Times {
    /// The list holding only `at`.
    pub(super) fn one(at: Timestamp) -> Self {
        let mut times = [Timestamp::ZERO; INLINE_TIMES];
        times[0] = at;
        Self::Inline { len: 1, at: times }
    }

    pub(super) fn as_slice(&self) -> &[Timestamp] {
        match self {
            Self::Inline { len, at } => &at[..usize::from(*len)],
            Self::Spilled(times) => times,
        }
    }

    pub(super) fn last(&self) -> Option<Timestamp> {
        self.as_slice().last().copied()
    }

    /// Puts `at` at `place` (where it keeps the list ascending).
    pub(super) fn insert(&mut self, place: usize, at: Timestamp) {
        match self {
            Self::Inline { len, at: times } if usize::from(*len) < INLINE_TIMES => {
                let n = usize::from(*len);
                times.copy_within(place..n, place + 1);
                times[place] = at;
                *len += 1;
            }
            Self::Inline { at: times, .. } => {
                let mut spilled = Vec::with_capacity(2 * INLINE_TIMES);
                spilled.extend_from_slice(times);
                spilled.insert(place, at);
                *self = Self::Spilled(spilled);
            }
            Self::Spilled(times) => times.insert(place, at),
        }
    }

    /// Drops the times before `oldest`.
    pub(super) fn forget_before(&mut self, oldest: Timestamp) {
        let aged = self.as_slice().partition_point(|t| *t < oldest);
        if aged == 0 {
            return;
        }
        match self {
            Self::Inline { len, at } => {
                at.copy_within(aged..usize::from(*len), 0);
                // `aged` is at most `len`, which fits in a byte.
                *len -= aged as u8;
            }
            Self::Spilled(times) => {
                times.drain(..aged);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    /// Inserts and forgets as a plain vector does, across the spill, in any order.
    #[test]
    fn times_keep_what_a_sorted_vector_keeps() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..200 {
            let mut times = Times::one(ms(500));
            let mut model = alloc::vec![ms(500)];
            for _ in 0..12 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(4) {
                    let oldest = ms(x % 1_000);
                    times.forget_before(oldest);
                    model.retain(|t| *t >= oldest);
                } else {
                    let at = ms(x % 1_000);
                    if let Err(place) = model.binary_search(&at) {
                        times.insert(place, at);
                        model.insert(place, at);
                    }
                }
                assert_eq!(times.as_slice(), &model[..]);
                assert_eq!(times.last(), model.last().copied());
            }
        }
    }
}
