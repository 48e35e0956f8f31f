//! A deterministic timer queue: one deadline per key, earliest first, ties in scheduling order.
//!
//! Used where deadlines are many: the AIRC server (ack timeouts, idle closes, spool retries,
//! dials), the Minca mesh (handshakes, `who` graces, attempts, unclaimed connections) and the
//! expiring tables of [`bounded`](super::bounded). A machine keeps its deadlines here and
//! answers [`Machine::poll_timeout`](super::Machine::poll_timeout) with [`TimerQueue::wakeup`],
//! then drains [`TimerQueue::pop_due`] in `handle_timeout`.
//!
//! Bound: one entry per distinct key, so the queue is as bounded as the table whose keys it holds
//! (a connection, a pending request). It never evicts: silently dropping a deadline would break
//! the rule that set it.

use alloc::collections::{BTreeMap, BTreeSet};
use core::borrow::Borrow;

use super::{Timestamp, Wakeup};

/// Deadlines keyed by `T`; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct TimerQueue<T: Ord + Clone> {
    /// Each key's deadline and scheduling sequence number.
    by_key: BTreeMap<T, (Timestamp, u64)>,
    /// `(deadline, seq, key)`: earliest first, ties by scheduling order, never by address.
    queue: BTreeSet<(Timestamp, u64, T)>,
    /// The first deadline in `queue`, kept by every change to it: owners ask for it after every
    /// event, far more often than the queue changes, and the tree's first leaf is often cold.
    first: Option<Timestamp>,
    next_seq: u64,
}

impl<T: Ord + Clone> Default for TimerQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Ord + Clone> TimerQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            by_key: BTreeMap::new(),
            queue: BTreeSet::new(),
            first: None,
            next_seq: 0,
        }
    }

    /// Set `key`'s deadline to `at`, replacing any earlier one. A rescheduled key counts as
    /// scheduled now for breaking ties.
    pub fn schedule(&mut self, at: Timestamp, key: T) {
        self.cancel(&key);
        let seq = self.next_seq;
        // Wrapping is unreachable in practice (584 years at 10^9 schedules a second).
        self.next_seq = self.next_seq.wrapping_add(1);
        self.queue.insert((at, seq, key.clone()));
        self.by_key.insert(key, (at, seq));
        self.first = Some(self.first.map_or(at, |f| f.min(at)));
    }

    /// Remove `key`'s deadline; whether it had one.
    pub fn cancel(&mut self, key: &T) -> bool {
        let Some((at, seq)) = self.by_key.remove(key) else {
            return false;
        };
        let removed = self.queue.remove(&(at, seq, key.clone()));
        self.refresh_first();
        removed
    }

    fn refresh_first(&mut self) {
        self.first = self.queue.first().map(|(at, _, _)| *at);
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.first
    }

    /// The earliest deadline as a [`Wakeup`] for `reason`.
    pub fn wakeup(&self, reason: &'static str) -> Option<Wakeup> {
        self.next_deadline().map(|at| Wakeup::new(at, reason))
    }

    /// Remove and return the earliest deadline that is due (`at <= now`), with its key.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<(Timestamp, T)> {
        if self.next_deadline()? > now {
            return None;
        }
        let (at, _, key) = self.queue.pop_first()?;
        self.by_key.remove(&key);
        self.refresh_first();
        Some((at, key))
    }

    /// `key`'s deadline, if it has one. `key` is anything the key borrows as, so a caller can
    /// look up without building an owned key.
    pub fn deadline_of<Q>(&self, key: &Q) -> Option<Timestamp>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.by_key.get(key).map(|(at, _)| *at)
    }

    /// Keys with a deadline.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no deadline is set.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn drain(q: &mut TimerQueue<&'static str>, now: Timestamp) -> Vec<(u64, &'static str)> {
        core::iter::from_fn(|| q.pop_due(now))
            .map(|(at, k)| (at.as_millis(), k))
            .collect()
    }

    #[test]
    fn pops_earliest_first() {
        let mut q = TimerQueue::new();
        q.schedule(ms(30), "c");
        q.schedule(ms(10), "a");
        q.schedule(ms(20), "b");
        assert_eq!(q.next_deadline(), Some(ms(10)));
        assert_eq!(q.wakeup("ack"), Some(Wakeup::new(ms(10), "ack")));
        assert_eq!(drain(&mut q, ms(100)), [(10, "a"), (20, "b"), (30, "c")]);
        assert!(q.is_empty() && q.next_deadline().is_none());
    }

    #[test]
    fn the_kept_first_deadline_is_the_queues_after_any_change() {
        let mut q = TimerQueue::new();
        // A fixed pseudo-random walk of schedules, cancels and pops over a few keys.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = ["a", "b", "c", "d", "e"][(x % 5) as usize];
            match (x >> 8) % 3 {
                0 => q.schedule(ms((x >> 16) % 50), key),
                1 => {
                    q.cancel(&key);
                }
                _ => {
                    q.pop_due(ms((x >> 16) % 50));
                }
            }
            assert_eq!(q.next_deadline(), q.queue.first().map(|(at, _, _)| *at));
        }
    }

    #[test]
    fn ties_go_in_scheduling_order() {
        let mut q = TimerQueue::new();
        for k in ["z", "a", "m", "b"] {
            q.schedule(ms(5), k);
        }
        // Rescheduling to the same instant moves a key to the back of its tie.
        q.schedule(ms(5), "z");
        assert_eq!(
            drain(&mut q, ms(5)),
            [(5, "a"), (5, "m"), (5, "b"), (5, "z")]
        );
    }

    #[test]
    fn rescheduling_replaces_the_deadline() {
        let mut q = TimerQueue::new();
        q.schedule(ms(10), "a");
        q.schedule(ms(50), "a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.deadline_of(&"a"), Some(ms(50)));
        assert_eq!(q.pop_due(ms(10)), None);
        q.schedule(ms(1), "a");
        assert_eq!(q.pop_due(ms(10)), Some((ms(1), "a")));
        assert_eq!(q.deadline_of(&"a"), None);
    }

    #[test]
    fn cancel_removes_only_that_key() {
        let mut q = TimerQueue::new();
        q.schedule(ms(10), "a");
        q.schedule(ms(20), "b");
        assert!(q.cancel(&"a"));
        assert!(!q.cancel(&"a"));
        assert_eq!(q.len(), 1);
        assert_eq!(drain(&mut q, ms(100)), [(20, "b")]);
    }

    #[test]
    fn pop_due_respects_now() {
        let mut q = TimerQueue::new();
        q.schedule(ms(10), "a");
        q.schedule(ms(20), "b");
        q.schedule(Timestamp::MAX, "never");
        q.schedule(Timestamp::ZERO, "epoch");
        assert_eq!(drain(&mut q, ms(9)), [(0, "epoch")]);
        assert_eq!(drain(&mut q, ms(10)), [(10, "a")]);
        // Calling early or twice is harmless.
        assert_eq!(drain(&mut q, ms(10)), []);
        assert_eq!(drain(&mut q, ms(19)), []);
        assert_eq!(drain(&mut q, ms(20)), [(20, "b")]);
        assert_eq!(drain(&mut q, Timestamp::MAX), [(u64::MAX, "never")]);
    }
}
