//! Bounded tables: a map and a set with a fixed capacity, and a set whose entries expire.
//!
//! Used wherever a protocol keeps state a peer can grow: per-connection and per-peer tables,
//! subscriptions and pending requests ([`BoundedMap`], [`BoundedSet`]), AIRC duplicate suppression
//! (message ids remembered for 172 800 s) and seen event ids ([`ExpiringSet`]).
//!
//! ## Eviction rules
//!
//! - [`BoundedMap`] / [`BoundedSet`]: when full, inserting a new key evicts the least recently
//!   **inserted** key (FIFO). Re-inserting a key already present replaces its value in place and
//!   does not refresh its age; reads never change the order. FIFO rather than LRU so that a peer
//!   cannot keep its own entry alive by touching it, and so that lookups stay `&self`.
//! - [`ExpiringSet`]: expired entries go first; when the set is still full, inserting a new key
//!   evicts the existing entry expiring soonest (ties: the earliest inserted). The new key is
//!   always stored.
//!
//! Every evicted entry is handed back, so the caller can count it. Every operation is O(log n).

use alloc::collections::BTreeMap;
use core::borrow::Borrow;

use super::{TimerQueue, Timestamp};

/// What [`BoundedMap::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapInsert<K, V> {
    /// The key was new and there was room.
    Added,
    /// The key was present: its value was replaced (this is the old one) and its age kept.
    Replaced(V),
    /// The key was new and the map was full: this, the oldest inserted entry, was evicted. With
    /// capacity 0 it is the entry just offered.
    Evicted(K, V),
}

/// A map holding at most `capacity` entries, evicting the least recently inserted key.
#[derive(Clone, Debug)]
pub struct BoundedMap<K: Ord + Clone, V> {
    capacity: usize,
    /// Each key's value and insertion sequence number.
    entries: BTreeMap<K, (u64, V)>,
    /// Insertion order: sequence number to key.
    order: BTreeMap<u64, K>,
    next_seq: u64,
}

impl<K: Ord + Clone, V> BoundedMap<K, V> {
    /// An empty map holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Insert or replace `key`; see [`MapInsert`] and the [module docs](self) for eviction.
    pub fn insert(&mut self, key: K, value: V) -> MapInsert<K, V> {
        if let Some((_, old)) = self.entries.get_mut(&key) {
            return MapInsert::Replaced(core::mem::replace(old, value));
        }
        if self.capacity == 0 {
            return MapInsert::Evicted(key, value);
        }
        let evicted = if self.entries.len() >= self.capacity {
            self.pop_oldest()
        } else {
            None
        };
        let seq = self.bump();
        self.order.insert(seq, key.clone());
        self.entries.insert(key, (seq, value));
        match evicted {
            Some((k, v)) => MapInsert::Evicted(k, v),
            None => MapInsert::Added,
        }
    }

    /// The value for `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(_, v)| v)
    }

    /// The value for `key`, mutably (its age is unchanged).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key).map(|(_, v)| v)
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (seq, v) = self.entries.remove(key)?;
        self.order.remove(&seq);
        Some(v)
    }

    /// Remove and return the least recently inserted entry.
    pub fn pop_oldest(&mut self) -> Option<(K, V)> {
        let (_, key) = self.order.pop_first()?;
        let (_, v) = self.entries.remove(&key)?;
        Some((key, v))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entries are held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most entries this map holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, (_, v))| (k, v))
    }

    fn bump(&mut self) -> u64 {
        let seq = self.next_seq;
        // Wrapping is unreachable in practice (584 years at 10^9 inserts a second).
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }
}

/// What [`BoundedSet::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetInsert<K> {
    /// The key was new and there was room.
    Added,
    /// The key was already present (its age is kept).
    Present,
    /// The key was new and the set was full: this, the oldest inserted key, was evicted. With
    /// capacity 0 it is the key just offered.
    Evicted(K),
}

/// A set holding at most `capacity` keys, evicting the least recently inserted key.
#[derive(Clone, Debug)]
pub struct BoundedSet<K: Ord + Clone>(BoundedMap<K, ()>);

impl<K: Ord + Clone> BoundedSet<K> {
    /// An empty set holding at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self(BoundedMap::new(capacity))
    }

    /// Insert `key`; see [`SetInsert`] and the [module docs](self) for eviction.
    pub fn insert(&mut self, key: K) -> SetInsert<K> {
        match self.0.insert(key, ()) {
            MapInsert::Added => SetInsert::Added,
            MapInsert::Replaced(()) => SetInsert::Present,
            MapInsert::Evicted(k, ()) => SetInsert::Evicted(k),
        }
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &K) -> bool {
        self.0.contains_key(key)
    }

    /// Remove `key`; whether it was present.
    pub fn remove(&mut self, key: &K) -> bool {
        self.0.remove(key).is_some()
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no keys are held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The most keys this set holds.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Keys in order.
    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, ())| k)
    }
}

/// What [`ExpiringSet::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpiringInsert<K> {
    /// The key was new (or only present expired) and there was room.
    Added,
    /// The key was present and live: nothing changed, its expiry is kept.
    Present,
    /// The key was new and the set was full of live entries: this, the entry expiring soonest,
    /// was evicted. With capacity 0 it is the key just offered.
    Evicted(K),
    /// `expires_at` is not after `now`: nothing stored, so that a dead entry never evicts a live one.
    AlreadyExpired,
}

/// Keys remembered until their own expiry instant, at most `capacity` of them.
///
/// An entry is live while `now < expires_at`. A key that is present keeps its first expiry (a
/// duplicate cannot extend how long it is remembered); remove it first to change the expiry.
#[derive(Clone, Debug)]
pub struct ExpiringSet<K: Ord + Clone> {
    capacity: usize,
    /// Each key's expiry, soonest first, ties by insertion order: a timer queue whose deadlines
    /// are expiries.
    expiries: TimerQueue<K>,
}

impl<K: Ord + Clone> ExpiringSet<K> {
    /// An empty set holding at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            expiries: TimerQueue::new(),
        }
    }

    /// Remember `key` until `expires_at`; see [`ExpiringInsert`] and the [module docs](self).
    pub fn insert(&mut self, now: Timestamp, key: K, expires_at: Timestamp) -> ExpiringInsert<K> {
        // One lookup answers both "present and live" and "present but expired".
        let held = self.expiries.deadline_of(&key).map(|exp| now < exp);
        if held == Some(true) {
            return ExpiringInsert::Present;
        }
        if expires_at <= now {
            return ExpiringInsert::AlreadyExpired;
        }
        if self.capacity == 0 {
            return ExpiringInsert::Evicted(key);
        }
        if held.is_some() {
            self.remove(&key);
        }
        let mut evicted = None;
        if self.len() >= self.capacity {
            self.prune(now);
            if self.len() >= self.capacity {
                evicted = self.expiries.pop_due(Timestamp::MAX).map(|(_, k)| k);
            }
        }
        self.expiries.schedule(expires_at, key);
        match evicted {
            Some(k) => ExpiringInsert::Evicted(k),
            None => ExpiringInsert::Added,
        }
    }

    /// Whether `key` is present and live at `now`. `key` is anything the key borrows as, so a
    /// caller can look up without building an owned key.
    pub fn contains<Q>(&self, now: Timestamp, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.expiries.deadline_of(key).is_some_and(|exp| now < exp)
    }

    /// When `key` expires, if present (live or not yet pruned).
    pub fn expires_at(&self, key: &K) -> Option<Timestamp> {
        self.expiries.deadline_of(key)
    }

    /// Forget `key`; whether it was present.
    pub fn remove(&mut self, key: &K) -> bool {
        self.expiries.cancel(key)
    }

    /// Forget every entry expired at `now`; how many were forgotten.
    pub fn prune(&mut self, now: Timestamp) -> usize {
        core::iter::from_fn(|| self.expiries.pop_due(now)).count()
    }

    /// The soonest expiry held: a wakeup for [`prune`](Self::prune).
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.expiries.next_deadline()
    }

    /// Entries held, including expired ones not yet pruned.
    pub fn len(&self) -> usize {
        self.expiries.len()
    }

    /// Whether no entries are held.
    pub fn is_empty(&self) -> bool {
        self.expiries.is_empty()
    }

    /// The most entries this set holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::time::Duration;

    fn s(v: u64) -> Timestamp {
        Timestamp::from_secs(v)
    }

    #[test]
    fn map_evicts_the_oldest_inserted_at_the_bound() {
        let mut m = BoundedMap::new(3);
        assert_eq!(m.insert("c", 1), MapInsert::Added);
        assert_eq!(m.insert("a", 2), MapInsert::Added);
        assert_eq!(m.insert("b", 3), MapInsert::Added);
        assert_eq!(m.len(), 3);
        // Reading and mutating do not refresh age.
        assert_eq!(m.get(&"c"), Some(&1));
        *m.get_mut(&"c").unwrap() = 10;
        assert_eq!(m.insert("d", 4), MapInsert::Evicted("c", 10));
        assert_eq!(m.insert("e", 5), MapInsert::Evicted("a", 2));
        assert_eq!(m.len(), 3);
        assert_eq!(m.capacity(), 3);
        let keys: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(keys, [("b", 3), ("d", 4), ("e", 5)]);
    }

    #[test]
    fn map_reinsert_replaces_in_place_and_keeps_age() {
        let mut m = BoundedMap::new(2);
        m.insert(1u8, "one");
        m.insert(2, "two");
        assert_eq!(m.insert(1, "uno"), MapInsert::Replaced("one"));
        assert_eq!(m.len(), 2);
        assert_eq!(m.insert(3, "three"), MapInsert::Evicted(1, "uno"));
        assert!(!m.contains_key(&1));
        assert_eq!(m.remove(&2), Some("two"));
        assert_eq!(m.remove(&2), None);
        assert_eq!(m.insert(4, "four"), MapInsert::Added);
        assert_eq!(m.pop_oldest(), Some((3, "three")));
    }

    #[test]
    fn capacity_zero_holds_nothing() {
        let mut m = BoundedMap::new(0);
        assert_eq!(m.insert(1, 1), MapInsert::Evicted(1, 1));
        assert!(m.is_empty());
        let mut set = BoundedSet::new(0);
        assert_eq!(set.insert(1), SetInsert::Evicted(1));
        let mut e = ExpiringSet::new(0);
        assert_eq!(e.insert(s(0), 1, s(1)), ExpiringInsert::Evicted(1));
        assert!(e.is_empty());
    }

    #[test]
    fn set_is_fifo_too() {
        let mut set = BoundedSet::new(2);
        assert_eq!(set.insert(5), SetInsert::Added);
        assert_eq!(set.insert(1), SetInsert::Added);
        assert_eq!(set.insert(5), SetInsert::Present);
        assert_eq!(set.insert(9), SetInsert::Evicted(5));
        assert!(set.contains(&1) && set.contains(&9) && !set.contains(&5));
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [1, 9]);
        assert!(set.remove(&1));
        assert!(!set.remove(&1));
        assert_eq!((set.len(), set.capacity(), set.is_empty()), (1, 2, false));
    }

    #[test]
    fn expiring_entries_live_until_their_instant() {
        const DEDUP: Duration = Duration::from_secs(172_800);
        let mut e = ExpiringSet::new(10);
        let t = s(1_000);
        assert_eq!(e.insert(t, "m1", t + DEDUP), ExpiringInsert::Added);
        assert!(e.contains(t + DEDUP - Duration::from_millis(1), &"m1"));
        assert!(!e.contains(t + DEDUP, &"m1"));
        assert_eq!(e.next_expiry(), Some(t + DEDUP));
        // A duplicate does not extend it.
        assert_eq!(
            e.insert(t + DEDUP / 2, "m1", t + DEDUP * 2),
            ExpiringInsert::Present
        );
        assert_eq!(e.expires_at(&"m1"), Some(t + DEDUP));
        // Once expired, inserting again is a fresh entry.
        assert_eq!(
            e.insert(t + DEDUP, "m1", t + DEDUP * 2),
            ExpiringInsert::Added
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e.expires_at(&"m1"), Some(t + DEDUP * 2));
    }

    #[test]
    fn expiring_refuses_dead_entries() {
        let mut e = ExpiringSet::new(1);
        assert_eq!(e.insert(s(10), "live", s(20)), ExpiringInsert::Added);
        assert_eq!(
            e.insert(s(10), "dead", s(10)),
            ExpiringInsert::AlreadyExpired
        );
        assert_eq!(
            e.insert(s(10), "dead", s(0)),
            ExpiringInsert::AlreadyExpired
        );
        assert!(e.contains(s(10), &"live"));
    }

    #[test]
    fn expiring_evicts_expired_first_then_soonest() {
        let mut e = ExpiringSet::new(3);
        e.insert(s(0), 'a', s(50));
        e.insert(s(0), 'b', s(10));
        e.insert(s(0), 'c', s(30));
        // b expired at 10: pruned, nothing live evicted.
        assert_eq!(e.insert(s(15), 'd', s(100)), ExpiringInsert::Added);
        // Full of live entries: c (30) expires soonest.
        assert_eq!(e.insert(s(15), 'e', s(100)), ExpiringInsert::Evicted('c'));
        // Ties broken by insertion order: d before e.
        assert_eq!(e.insert(s(15), 'f', s(200)), ExpiringInsert::Evicted('a'));
        assert_eq!(e.insert(s(15), 'g', s(200)), ExpiringInsert::Evicted('d'));
        assert_eq!(e.insert(s(15), 'h', s(200)), ExpiringInsert::Evicted('e'));
        assert_eq!(e.len(), 3);
    }

    #[test]
    fn expiring_prune_and_hostile_instants() {
        let mut e = ExpiringSet::new(8);
        e.insert(s(0), 1, s(5));
        e.insert(s(0), 2, s(5));
        e.insert(s(0), 3, Timestamp::MAX);
        assert_eq!(e.prune(s(4)), 0);
        assert_eq!(e.prune(s(5)), 2);
        assert_eq!(e.next_expiry(), Some(Timestamp::MAX));
        assert_eq!(e.prune(Timestamp::MAX), 1);
        assert!(e.is_empty() && e.next_expiry().is_none());
        assert_eq!(
            e.insert(Timestamp::MAX, 4, Timestamp::MAX),
            ExpiringInsert::AlreadyExpired
        );
        assert!(!e.remove(&4));
        // Time going backwards: an entry is live again only if not yet pruned.
        e.insert(s(0), 5, s(10));
        assert!(!e.contains(s(20), &5));
        assert!(e.contains(s(0), &5));
        assert_eq!(e.capacity(), 8);
    }
}
