//! Replay windows: act once per `(sender, at)` within a time window, in any arrival order.
//!
//! Used by Minca rendezvous: "`at` is a non-negative integer within 2 minutes of its own clock,
//! and no message from `from` in this room was acted on with that `at`" (a copy through a second
//! relay, or a replay, in whatever order they come), and "a receiver remembers the times it acted
//! on from each peer in each room, within the 2 minutes … and MAY stop hearing a peer that sent
//! more than 256 in them". The key `K` is whatever scopes the rule (for Minca, room and sender).
//!
//! ## The window edges
//!
//! `at` is inside the window when `|at − now| ≤ window`: both edges are **inclusive**. The lower
//! edge is measured from the latest `now` the window has been handed (its high-water mark), not
//! from the `now` of the call, so a host clock that steps backwards cannot bring a forgotten time
//! back inside the window (which would re-open a replay).
//!
//! ## Bounds
//!
//! At most `per_sender` remembered times per sender and `max_senders` senders, so at most
//! `per_sender × max_senders` times in all. Nothing still inside the window is ever evicted:
//! forgetting a live time would let its replay through. A full sender gets
//! [`Verdict::SenderFull`]; a new sender at a full table gets [`Verdict::TableFull`].

use alloc::collections::btree_map::Entry;
use alloc::collections::{BTreeMap, BTreeSet};
use core::borrow::Borrow;
use core::time::Duration;

use super::Timestamp;

mod times;
use times::Times;

/// What the window says about one `(sender, at)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Inside the window and never acted on: act on it.
    Fresh,
    /// Already acted on (a second copy, or a replay).
    Replay,
    /// `|at − now|` exceeds the window: too old, or too far in the future.
    OutsideWindow,
    /// The sender already has `per_sender` remembered times inside the window: stop hearing it
    /// until some of them age out.
    SenderFull,
    /// `max_senders` senders have live entries and this is a new one: refused rather than forget
    /// a sender whose times are still inside the window.
    TableFull,
}

impl Verdict {
    /// Whether this verdict means "act on the message".
    pub fn is_fresh(self) -> bool {
        self == Self::Fresh
    }
}

/// The times acted on per sender, within a window; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct ReplayWindow<K: Ord + Clone> {
    window: Duration,
    per_sender: usize,
    max_senders: usize,
    /// The latest `now` seen by a mutating call; the lower edge is measured from here.
    high_water: Timestamp,
    /// Times acted on, per sender, ascending and without repeats. Every list is non-empty.
    /// Sorted lists rather than sets: a sender most often has one or a few times, which the
    /// entry holds inline ([`times::INLINE_TIMES`]), where a set's node is bigger and an accept
    /// that drops aged-out times (a split) allocated a new one.
    senders: BTreeMap<K, Times>,
    /// `(newest time acted on, sender)` for every sender, so senders whose times have all aged
    /// out are found in O(log n) instead of by a scan.
    by_newest: BTreeSet<(Timestamp, K)>,
    /// The first time in `by_newest`, kept by every change to it: owners ask for
    /// [`next_expiry`](Self::next_expiry) after every event, far more often than the window
    /// changes, and the tree's first leaf is seldom in cache by then.
    oldest_newest: Option<Timestamp>,
}

impl<K: Ord + Clone> ReplayWindow<K> {
    /// An empty window of `window` either side of `now`, remembering at most `per_sender` times
    /// for each of at most `max_senders` senders.
    pub fn new(window: Duration, per_sender: usize, max_senders: usize) -> Self {
        Self {
            window,
            per_sender,
            max_senders,
            high_water: Timestamp::ZERO,
            senders: BTreeMap::new(),
            by_newest: BTreeSet::new(),
            oldest_newest: None,
        }
    }

    /// What [`accept`](Self::accept) would answer, without recording anything. `sender` is
    /// anything the key borrows as, so a caller can look up without building an owned key.
    pub fn check<Q>(&self, now: Timestamp, sender: &Q, at: Timestamp) -> Verdict
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let oldest = self.oldest_live(now);
        if self.outside(now, oldest, at) {
            return Verdict::OutsideWindow;
        }
        match self.senders.get(sender) {
            Some(times) => known_verdict(times.as_slice(), oldest, at, self.per_sender),
            None => self.new_verdict(oldest),
        }
    }

    /// What [`check`](Self::check) answers for a time [`accept`](Self::accept) took from `sender`
    /// (the caller's word, held to it in debug builds), found without looking the sender up:
    /// [`Verdict::Replay`] while `at` is inside the window, [`Verdict::OutsideWindow`] once it is
    /// not. A time taken is only ever forgotten below the window's lower edge, which never moves
    /// back, so nothing else can be answered; the lookup, a cache miss or two for an owner with
    /// many senders, is spared.
    pub fn check_accepted<Q>(&self, now: Timestamp, sender: &Q, at: Timestamp) -> Verdict
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let verdict = if self.outside(now, self.oldest_live(now), at) {
            Verdict::OutsideWindow
        } else {
            Verdict::Replay
        };
        debug_assert_eq!(verdict, self.check(now, sender, at));
        verdict
    }

    /// [`check`](Self::check), and if the answer is [`Verdict::Fresh`], remember `at` for
    /// `sender` so that the same pair is refused from now on.
    pub fn accept(&mut self, now: Timestamp, sender: K, at: Timestamp) -> Verdict {
        self.high_water = self.high_water.max(now);
        let oldest = self.oldest_live(now);
        if self.outside(now, oldest, at) {
            return Verdict::OutsideWindow;
        }
        // A new sender at a full table is the one case the entry below cannot answer alone: a
        // slot must be freed first, if one can be (the cheap test first: the lookup is needed
        // only when the table is full).
        if self.senders.len() >= self.max_senders
            && self.per_sender > 0
            && !self.senders.contains_key(&sender)
        {
            if !self.any_expired(oldest) {
                return Verdict::TableFull;
            }
            self.prune(now);
        }
        // One search of the senders both answers check's question and takes the time.
        let per_sender = self.per_sender;
        let (sender, newest_before, newest_after) = match self.senders.entry(sender) {
            Entry::Occupied(mut entry) => {
                let verdict = known_verdict(entry.get().as_slice(), oldest, at, per_sender);
                if verdict != Verdict::Fresh {
                    return verdict;
                }
                let times = entry.get_mut();
                let newest_before = times.last();
                // Forgetting aged-out times is safe: they are below the lower edge, which never
                // moves back (it follows the high-water mark), so a replay of any of them is
                // OutsideWindow.
                times.forget_before(oldest);
                // The verdict says `at` is not among them.
                let place = times.as_slice().partition_point(|t| *t < at);
                times.insert(place, at);
                let newest_after = times.last().unwrap_or(at);
                (entry.key().clone(), newest_before, newest_after)
            }
            Entry::Vacant(entry) => {
                if per_sender == 0 {
                    return Verdict::SenderFull;
                }
                let sender = entry.key().clone();
                entry.insert(Times::one(at));
                (sender, None, at)
            }
        };
        if newest_before != Some(newest_after) {
            if let Some(old) = newest_before {
                self.by_newest.remove(&(old, sender.clone()));
            }
            self.by_newest.insert((newest_after, sender));
            self.refresh_oldest_newest();
        }
        Verdict::Fresh
    }

    /// Whether `at` is outside the window at `now`, whose oldest live time is `oldest`.
    fn outside(&self, now: Timestamp, oldest: Timestamp, at: Timestamp) -> bool {
        at < oldest || at > now.saturating_add(self.window)
    }

    /// The verdict on a time inside the window from a sender with nothing remembered.
    fn new_verdict(&self, oldest: Timestamp) -> Verdict {
        if self.per_sender == 0 {
            Verdict::SenderFull
        } else if self.senders.len() >= self.max_senders && !self.any_expired(oldest) {
            Verdict::TableFull
        } else {
            Verdict::Fresh
        }
    }

    /// Forget every remembered time that has aged out of the window at `now`, and every sender
    /// left with none.
    pub fn prune(&mut self, now: Timestamp) {
        self.high_water = self.high_water.max(now);
        let oldest = self.oldest_live(now);
        while self.oldest_newest.is_some_and(|newest| newest < oldest) {
            if let Some((_, sender)) = self.by_newest.pop_first() {
                self.senders.remove(&sender);
            }
            self.refresh_oldest_newest();
        }
        for times in self.senders.values_mut() {
            times.forget_before(oldest);
        }
    }

    /// Senders currently remembered (including any whose times have aged out but have not been
    /// pruned yet).
    pub fn len_senders(&self) -> usize {
        self.senders.len()
    }

    /// When the sender with the oldest newest time ages out entirely: a wakeup for
    /// [`prune`](Self::prune). Pruning is optional (a full table prunes itself), so this only
    /// frees memory sooner.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        Some(
            self.oldest_newest?
                .saturating_add(self.window)
                .saturating_add(Duration::from_millis(1)),
        )
    }

    /// Sets `oldest_newest` from the tree; called after every change to `by_newest`.
    fn refresh_oldest_newest(&mut self) {
        self.oldest_newest = self.by_newest.first().map(|(newest, _)| *newest);
    }

    /// The oldest `at` still inside the window (inclusive), measured from the high-water mark.
    fn oldest_live(&self, now: Timestamp) -> Timestamp {
        self.high_water.max(now).saturating_sub(self.window)
    }

    /// Whether some sender has no time at or after `oldest`, so its slot can be reused.
    fn any_expired(&self, oldest: Timestamp) -> bool {
        self.oldest_newest.is_some_and(|newest| newest < oldest)
    }
}

/// The verdict on a time inside the window from a sender with `times` remembered, of at most
/// `per_sender` live.
fn known_verdict(
    times: &[Timestamp],
    oldest: Timestamp,
    at: Timestamp,
    per_sender: usize,
) -> Verdict {
    if times.binary_search(&at).is_ok() {
        Verdict::Replay
    } else if live_count(times, oldest) >= per_sender {
        Verdict::SenderFull
    } else {
        Verdict::Fresh
    }
}

/// Times in `times` (ascending) at or after `oldest`.
fn live_count(times: &[Timestamp], oldest: Timestamp) -> usize {
    times.len() - times.partition_point(|t| *t < oldest)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_MINUTES: Duration = Duration::from_secs(120);

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn minca() -> ReplayWindow<&'static str> {
        ReplayWindow::new(TWO_MINUTES, 256, 1024)
    }

    #[test]
    fn out_of_order_times_are_each_accepted_once() {
        let now = ms(1_000_000);
        let mut w = minca();
        let ats = [
            ms(1_000_000),
            ms(950_000),
            ms(1_050_000),
            ms(999_999),
            ms(1_000_001),
        ];
        for at in ats {
            assert_eq!(w.accept(now, "alice", at), Verdict::Fresh);
        }
        for at in ats.iter().rev() {
            assert_eq!(w.check(now, &"alice", *at), Verdict::Replay);
            assert_eq!(w.accept(now, "alice", *at), Verdict::Replay);
        }
        // The same `at` from another sender is its own.
        assert_eq!(w.accept(now, "bob", ms(1_000_000)), Verdict::Fresh);
    }

    #[test]
    fn accept_answers_as_check_did_in_every_case() {
        // Small bounds, a wandering clock and a few senders reach every verdict.
        let mut w = ReplayWindow::new(Duration::from_millis(50), 3, 4);
        let mut state = 0x2545_f491_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut seen = [0usize; 5];
        for _ in 0..20_000 {
            let now = ms(1_000 + next(400));
            let sender = ["a", "b", "c", "d", "e", "f"][next(6) as usize];
            let at = ms(900 + next(600));
            if next(50) == 0 {
                w.prune(now);
            }
            let checked = w.check(now, &sender, at);
            let accepted = w.accept(now, sender, at);
            assert_eq!(accepted, checked);
            seen[match accepted {
                Verdict::Fresh => 0,
                Verdict::Replay => 1,
                Verdict::OutsideWindow => 2,
                Verdict::SenderFull => 3,
                Verdict::TableFull => 4,
            }] += 1;
            assert!(w.len_senders() <= 4);
            assert_eq!(w.oldest_newest, w.by_newest.first().map(|(t, _)| *t));
        }
        assert!(seen.iter().all(|n| *n > 0), "{seen:?}");
    }

    #[test]
    fn a_time_taken_is_checked_without_a_lookup_as_check_answers() {
        let mut w = minca();
        let taken = [ms(1_000_000), ms(1_050_000), ms(1_119_000)];
        for at in taken {
            assert_eq!(w.accept(ms(1_000_000), "a", at), Verdict::Fresh);
        }
        // Inside the window, at its edges, past it, and with the clock stepped back.
        for now in [
            1_000_000, 1_010_000, 1_120_000, 1_170_000, 1_170_001, 1_239_000, 1_239_001, 1_400_000,
            999_000, 0,
        ] {
            if now > 1_200_000 {
                w.prune(ms(now));
            }
            for at in taken {
                assert_eq!(
                    w.check_accepted(ms(now), &"a", at),
                    w.check(ms(now), &"a", at),
                    "{now} {at:?}"
                );
            }
        }
    }

    #[test]
    fn check_is_pure() {
        let w = minca();
        assert_eq!(w.check(ms(200_000), &"a", ms(200_000)), Verdict::Fresh);
        assert_eq!(w.check(ms(200_000), &"a", ms(200_000)), Verdict::Fresh);
        assert_eq!(w.len_senders(), 0);
    }

    #[test]
    fn both_edges_are_inclusive() {
        let now = ms(1_000_000);
        let mut w = minca();
        assert_eq!(w.accept(now, "a", ms(880_000)), Verdict::Fresh);
        assert_eq!(w.accept(now, "a", ms(1_120_000)), Verdict::Fresh);
        assert_eq!(w.accept(now, "a", ms(879_999)), Verdict::OutsideWindow);
        assert_eq!(w.accept(now, "a", ms(1_120_001)), Verdict::OutsideWindow);
    }

    #[test]
    fn an_aged_out_time_is_outside_the_window_not_fresh() {
        let mut w = minca();
        let at = ms(1_000_000);
        assert_eq!(w.accept(at, "a", at), Verdict::Fresh);
        let later = at + TWO_MINUTES;
        assert_eq!(w.accept(later, "a", at), Verdict::Replay);
        let later = later + Duration::from_millis(1);
        w.prune(later);
        assert_eq!(w.len_senders(), 0);
        assert_eq!(w.accept(later, "a", at), Verdict::OutsideWindow);
        // Even if the host clock steps back, the forgotten time stays outside.
        assert_eq!(w.accept(at, "a", at), Verdict::OutsideWindow);
        assert_eq!(w.check(ms(0), &"a", at), Verdict::OutsideWindow);
    }

    #[test]
    fn a_sender_is_bounded_and_never_loses_a_live_time() {
        let mut w = ReplayWindow::new(TWO_MINUTES, 3, 10);
        let now = ms(1_000_000);
        for k in 0..3 {
            assert_eq!(w.accept(now, "a", ms(1_000_000 + k)), Verdict::Fresh);
        }
        assert_eq!(w.accept(now, "a", ms(1_000_010)), Verdict::SenderFull);
        // Its remembered times are still refused as replays.
        assert_eq!(w.accept(now, "a", ms(1_000_001)), Verdict::Replay);
        assert_eq!(w.accept(now, "b", ms(1_000_010)), Verdict::Fresh);
        // Once the oldest ages out, one slot opens.
        let later = ms(1_120_001);
        assert_eq!(w.accept(later, "a", ms(1_120_001)), Verdict::Fresh);
        assert_eq!(w.accept(later, "a", ms(1_120_002)), Verdict::SenderFull);
        assert_eq!(w.accept(later, "a", ms(1_000_001)), Verdict::Replay);
    }

    #[test]
    fn the_table_is_bounded_and_reuses_aged_out_senders() {
        let mut w = ReplayWindow::new(TWO_MINUTES, 4, 2);
        let t = ms(1_000_000);
        assert_eq!(w.accept(t, 1u32, t), Verdict::Fresh);
        assert_eq!(
            w.accept(t + Duration::from_secs(60), 2, t + Duration::from_secs(60)),
            Verdict::Fresh
        );
        assert_eq!(w.check(t, &3, t), Verdict::TableFull);
        assert_eq!(w.accept(t, 3, t), Verdict::TableFull);
        // Known senders still get through.
        assert_eq!(w.accept(t, 1, t + Duration::from_millis(1)), Verdict::Fresh);
        // When sender 1 has aged out entirely, its slot goes to the newcomer without a prune.
        let later = t + TWO_MINUTES + Duration::from_millis(2);
        assert_eq!(w.next_expiry(), Some(later));
        assert_eq!(w.check(later, &3, later), Verdict::Fresh);
        assert_eq!(w.accept(later, 3, later), Verdict::Fresh);
        assert_eq!(w.len_senders(), 2);
        assert_eq!(w.accept(later, 4, later), Verdict::TableFull);
    }

    #[test]
    fn hostile_times_do_not_panic() {
        let mut w = minca();
        for now in [ms(0), ms(1), ms(1_000_000), Timestamp::MAX] {
            for at in [ms(0), ms(1), Timestamp::MAX, ms(u64::MAX - 1)] {
                let _ = w.check(now, &"x", at);
                let _ = w.accept(now, "x", at);
                w.prune(now);
            }
        }
        let mut w = minca();
        assert_eq!(w.accept(ms(0), "x", ms(0)), Verdict::Fresh);
        assert_eq!(w.accept(ms(0), "x", ms(0)), Verdict::Replay);
        assert_eq!(w.accept(ms(0), "x", Timestamp::MAX), Verdict::OutsideWindow);
        let mut w = minca();
        assert_eq!(
            w.accept(Timestamp::MAX, "x", Timestamp::MAX),
            Verdict::Fresh
        );
        assert_eq!(w.accept(Timestamp::MAX, "x", ms(0)), Verdict::OutsideWindow);
        assert_eq!(w.next_expiry(), Some(Timestamp::MAX));
    }

    #[test]
    fn zero_bounds_refuse_everything_without_panicking() {
        let mut w = ReplayWindow::new(TWO_MINUTES, 0, 0);
        assert_eq!(w.accept(ms(0), "a", ms(0)), Verdict::SenderFull);
        let mut w = ReplayWindow::new(TWO_MINUTES, 1, 0);
        assert_eq!(w.accept(ms(0), "a", ms(0)), Verdict::TableFull);
    }

    #[test]
    fn the_kept_oldest_newest_time_is_the_trees_after_any_change() {
        let mut w = ReplayWindow::new(TWO_MINUTES, 4, 8);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let now = ms(1_000_000 + step * 200);
            let at = ms((1_000_000 + step * 200 + x % 400_000).saturating_sub(200_000));
            match x % 3 {
                0 | 1 => drop(w.accept(now, x % 12, at)),
                _ => w.prune(now),
            }
            assert_eq!(w.oldest_newest, w.by_newest.first().map(|(t, _)| *t));
        }
    }
}
