//! The spool (AIRC §7) and the settlement of late acks (§6.6).
//!
//! A message that cannot be handed on now is filed under its destination key (§7.1: the
//! authority for a remote destination, the first path segment for a local one), kept in order per
//! key, dropped once expired (§7.2), and handed back for delivery when its key is flushed (§7.4).
//!
//! Settlement (§6.6): when a next hop does not ack within [`ACK_TIMEOUT`], the server spools the
//! message, acks upstream `queued no_ack`, and keeps its id **in flight**. A flush never resends a
//! message in flight (the next hop may still deliver it); when the late ack arrives the id is
//! **settled**, and the next flush drops the message instead of resending it.
//!
//! Duplicate suppression (§7.3) is [`SeenIds`]: ids acked `delivered` or `queued`, remembered for
//! [`DUPLICATE_WINDOW`].

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::core::Timestamp;
use crate::core::bounded::{ExpiringInsert, ExpiringSet};

/// A message's ttl when it carries none (§7.2).
pub const DEFAULT_TTL: Duration = Duration::from_secs(86_400);

/// How long ids acked `delivered` or `queued` are remembered: 2 × the default ttl (§7.3).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(2 * DEFAULT_TTL.as_secs());

/// How long a server waits for a next hop's ack before spooling (§6.6).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(15);

/// How often every key with a backlog is flushed (§7.4, "reference: every 30 s").
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(30);

/// Messages held in one spool at most. The spec sets no bound (§15 was lost); a full spool
/// refuses new messages rather than dropping accepted ones.
pub const MAX_SPOOLED: usize = 100_000;

/// Messages held under one destination key at most, so one unreachable authority or offline
/// namespace cannot take the whole spool.
pub const MAX_SPOOLED_PER_KEY: usize = 10_000;

/// Ids remembered for duplicate suppression at most. When full, the id expiring soonest is
/// forgotten first (a retry of it could then be delivered twice; at this size that needs more
/// than a million distinct messages inside two days).
pub const MAX_SEEN_IDS: usize = 1_000_000;

/// Whether a message stamped `ts` with `ttl` has expired at `now`: `ts + ttl < now` (§7.2).
///
/// The one place this rule lives: routing (§6.2) and the spool both ask here.
pub fn is_expired(ts: Timestamp, ttl: Duration, now: Timestamp) -> bool {
    ts.saturating_add(ttl) < now
}

/// A message held in the spool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spooled<M> {
    /// The message id (settlement and duplicate suppression are by id).
    pub id: String,
    /// The message's `ts`.
    pub ts: Timestamp,
    /// The message's ttl ([`DEFAULT_TTL`] when it carried none).
    pub ttl: Duration,
    /// The message itself, as the server keeps it.
    pub msg: M,
}

impl<M> Spooled<M> {
    /// Whether this message has expired at `now` (§7.2).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        is_expired(self.ts, self.ttl, now)
    }
}

/// Why a message could not be spooled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpoolFull {
    /// [`MAX_SPOOLED`] messages are held.
    Total,
    /// [`MAX_SPOOLED_PER_KEY`] messages are held under this key.
    Key,
}

/// What a flush of one key found.
#[derive(Debug, PartialEq, Eq)]
pub struct Flush<M> {
    /// Messages to deliver now, in spool order. They have left the spool: whatever still cannot
    /// be delivered goes back with [`Spool::requeue`].
    pub deliver: Vec<Spooled<M>>,
    /// Messages dropped because they expired (§7.2).
    pub expired: Vec<Spooled<M>>,
    /// Messages dropped because their late ack settled them (§6.6).
    pub settled: Vec<Spooled<M>>,
}

/// Messages waiting for delivery, per destination key; see the [module docs](self).
#[derive(Debug)]
pub struct Spool<M> {
    keys: BTreeMap<String, VecDeque<Spooled<M>>>,
    len: usize,
    max_total: usize,
    max_per_key: usize,
    in_flight: BTreeSet<String>,
    settled: BTreeSet<String>,
}

impl<M> Default for Spool<M> {
    fn default() -> Self {
        Self::new(MAX_SPOOLED, MAX_SPOOLED_PER_KEY)
    }
}

impl<M> Spool<M> {
    /// An empty spool holding at most `max_total` messages and `max_per_key` under one key.
    pub fn new(max_total: usize, max_per_key: usize) -> Self {
        Self {
            keys: BTreeMap::new(),
            len: 0,
            max_total,
            max_per_key,
            in_flight: BTreeSet::new(),
            settled: BTreeSet::new(),
        }
    }

    /// Files `item` at the back of `key`'s backlog, or says why it cannot be held. A caller that
    /// gets an error must not ack `queued`: `queued` means a copy is held.
    pub fn push(&mut self, key: &str, item: Spooled<M>) -> Result<(), SpoolFull> {
        if self.len >= self.max_total {
            return Err(SpoolFull::Total);
        }
        if self.len_key(key) >= self.max_per_key {
            return Err(SpoolFull::Key);
        }
        self.keys
            .entry(String::from(key))
            .or_default()
            .push_back(item);
        self.len += 1;
        Ok(())
    }

    /// Spools a message whose next hop did not ack in time, and marks its id in flight (§6.6).
    ///
    /// The message was accepted when it was forwarded, so it is held even past the bounds: an
    /// accepted message is never dropped for want of room.
    pub fn push_in_flight(&mut self, key: &str, item: Spooled<M>) {
        self.in_flight.insert(item.id.clone());
        self.keys
            .entry(String::from(key))
            .or_default()
            .push_back(item);
        self.len += 1;
    }

    /// Files a message read back from storage after a restart at the back of `key`'s backlog:
    /// records come back in the order they were written, so this keeps each key's order. They
    /// were accepted before the restart, so they are held even past the bounds.
    pub fn restore(&mut self, key: &str, item: Spooled<M>) {
        self.keys
            .entry(String::from(key))
            .or_default()
            .push_back(item);
        self.len += 1;
    }

    /// The hop `id` was in flight to is gone without an ack (its connection closed): the message
    /// is no longer in flight, and the next flush sends it again. Returns whether it was.
    pub fn release(&mut self, id: &str) -> bool {
        self.in_flight.remove(id)
    }

    /// A late ack for `id` arrived: it is settled, and the next flush drops it rather than resend
    /// it. Returns whether `id` was in flight (a late ack for anything else changes nothing).
    pub fn settle(&mut self, id: &str) -> bool {
        if self.in_flight.remove(id) {
            self.settled.insert(String::from(id));
            true
        } else {
            false
        }
    }

    /// Whether `id` is spooled and waiting for a late ack.
    pub fn is_in_flight(&self, id: &str) -> bool {
        self.in_flight.contains(id)
    }

    /// Takes `key`'s backlog for delivery: expired and settled messages are dropped, messages in
    /// flight stay (in place, so order is kept), and the rest are handed back in order.
    pub fn flush(&mut self, now: Timestamp, key: &str) -> Flush<M> {
        let mut flush = Flush {
            deliver: Vec::new(),
            expired: Vec::new(),
            settled: Vec::new(),
        };
        let Some(queue) = self.keys.remove(key) else {
            return flush;
        };
        let mut kept = VecDeque::new();
        for item in queue {
            if self.settled.remove(&item.id) {
                flush.settled.push(item);
            } else if item.is_expired(now) {
                self.in_flight.remove(&item.id);
                flush.expired.push(item);
            } else if self.in_flight.contains(&item.id) {
                kept.push_back(item);
            } else {
                flush.deliver.push(item);
            }
        }
        self.len -= flush.deliver.len() + flush.expired.len() + flush.settled.len();
        if !kept.is_empty() {
            self.keys.insert(String::from(key), kept);
        }
        flush
    }

    /// Puts back, at the front of `key`'s backlog and in their order, messages a flush handed out
    /// that still cannot be delivered. They were accepted, so they are held even past the bounds.
    pub fn requeue(&mut self, key: &str, items: Vec<Spooled<M>>) {
        if items.is_empty() {
            return;
        }
        self.len += items.len();
        let queue = self.keys.entry(String::from(key)).or_default();
        for item in items.into_iter().rev() {
            queue.push_front(item);
        }
    }

    /// Every key with a backlog, in key order (the periodic flush of §7.4 walks these).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Messages held under `key`.
    pub fn len_key(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, VecDeque::len)
    }

    /// Messages held in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Ids acked `delivered` or `queued`, remembered for [`DUPLICATE_WINDOW`] (§7.3).
#[derive(Debug)]
pub struct SeenIds(ExpiringSet<String>);

impl Default for SeenIds {
    fn default() -> Self {
        Self::new(MAX_SEEN_IDS)
    }
}

impl SeenIds {
    /// Remembers at most `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self(ExpiringSet::new(capacity))
    }

    /// Whether `id` was acked `delivered` or `queued` within the window: if so, the message is
    /// acked `delivered` with code `duplicate` and not delivered again.
    pub fn contains(&self, now: Timestamp, id: &str) -> bool {
        self.0.contains(now, &String::from(id))
    }

    /// Records that `id` was acked `delivered` or `queued` at `now`. Returns the id forgotten to
    /// make room, if the table was full.
    pub fn record(&mut self, now: Timestamp, id: &str) -> Option<String> {
        match self
            .0
            .insert(now, String::from(id), now.saturating_add(DUPLICATE_WINDOW))
        {
            ExpiringInsert::Evicted(old) => Some(old),
            _ => None,
        }
    }

    /// Forgets ids whose window has passed; returns how many.
    pub fn prune(&mut self, now: Timestamp) -> usize {
        self.0.prune(now)
    }

    /// When the next id's window passes, for a wakeup.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.0.next_expiry()
    }

    /// Ids remembered.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_790_380_000);

    fn msg(id: &str, ttl_secs: u64) -> Spooled<u32> {
        Spooled {
            id: String::from(id),
            ts: T0,
            ttl: Duration::from_secs(ttl_secs),
            msg: 0,
        }
    }

    fn ids(items: &[Spooled<u32>]) -> Vec<&str> {
        items.iter().map(|i| i.id.as_str()).collect()
    }

    #[test]
    fn expiry_is_ts_plus_ttl_strictly_before_now() {
        let ttl = Duration::from_secs(10);
        assert!(!is_expired(T0, ttl, T0 + ttl));
        assert!(is_expired(T0, ttl, T0 + ttl + Duration::from_millis(1)));
        assert!(
            !is_expired(Timestamp::MAX, ttl, Timestamp::MAX),
            "a hostile ts cannot overflow"
        );
    }

    #[test]
    fn flush_keeps_order_per_key_and_leaves_other_keys_alone() {
        let mut s = Spool::default();
        for id in ["a1", "a2", "a3"] {
            s.push("alice", msg(id, 60)).unwrap();
        }
        s.push("partner.example", msg("p1", 60)).unwrap();
        let f = s.flush(T0, "alice");
        assert_eq!(ids(&f.deliver), ["a1", "a2", "a3"]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.keys().collect::<Vec<_>>(), ["partner.example"]);
    }

    #[test]
    fn expired_messages_are_dropped_when_read_and_never_delivered() {
        let mut s = Spool::default();
        s.push("k", msg("short", 5)).unwrap();
        s.push("k", msg("long", 500)).unwrap();
        let f = s.flush(T0 + Duration::from_secs(6), "k");
        assert_eq!(ids(&f.expired), ["short"]);
        assert_eq!(ids(&f.deliver), ["long"]);
        assert!(s.is_empty());
    }

    #[test]
    fn requeue_puts_undelivered_back_in_front_in_order() {
        let mut s = Spool::default();
        for id in ["1", "2", "3"] {
            s.push("k", msg(id, 60)).unwrap();
        }
        let f = s.flush(T0, "k");
        s.push("k", msg("4", 60)).unwrap();
        s.requeue("k", f.deliver);
        assert_eq!(s.len(), 4);
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["1", "2", "3", "4"]);
    }

    #[test]
    fn in_flight_is_never_resent_and_settled_is_dropped_on_flush() {
        let mut s = Spool::default();
        s.push("k", msg("before", 60)).unwrap();
        s.push_in_flight("k", msg("late", 60));
        s.push("k", msg("after", 60)).unwrap();
        // In flight: not handed out, but kept.
        let f = s.flush(T0, "k");
        assert_eq!(ids(&f.deliver), ["before", "after"]);
        assert_eq!(s.len_key("k"), 1);
        assert!(s.is_in_flight("late"));
        // The late ack settles it; the next flush drops it.
        assert!(s.settle("late"));
        assert!(!s.settle("late"), "settling twice changes nothing");
        let f = s.flush(T0, "k");
        assert!(f.deliver.is_empty());
        assert_eq!(ids(&f.settled), ["late"]);
        assert!(s.is_empty());
    }

    #[test]
    fn a_late_ack_for_an_id_not_in_flight_settles_nothing() {
        let mut s = Spool::default();
        s.push("k", msg("x", 60)).unwrap();
        assert!(!s.settle("x"));
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["x"]);
    }

    #[test]
    fn an_in_flight_message_that_expires_is_dropped_and_forgotten() {
        let mut s = Spool::default();
        s.push_in_flight("k", msg("x", 5));
        let f = s.flush(T0 + Duration::from_secs(6), "k");
        assert_eq!(ids(&f.expired), ["x"]);
        assert!(!s.is_in_flight("x"));
    }

    #[test]
    fn restored_messages_keep_the_order_they_were_written_in() {
        let mut s = Spool::new(1, 1);
        for id in ["1", "2", "3"] {
            s.restore("k", msg(id, 60));
        }
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["1", "2", "3"]);
    }

    #[test]
    fn a_released_message_is_sent_again_on_the_next_flush() {
        let mut s = Spool::new(1, 1);
        s.push("k", msg("a", 60)).unwrap();
        // Accepted already: held past the bounds.
        s.push_in_flight("k", msg("b", 60));
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["a"]);
        assert!(s.release("b"));
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["b"]);
    }

    #[test]
    fn a_full_spool_refuses_rather_than_dropping_what_it_holds() {
        let mut s = Spool::new(3, 2);
        s.push("a", msg("a1", 60)).unwrap();
        s.push("a", msg("a2", 60)).unwrap();
        assert_eq!(s.push("a", msg("a3", 60)), Err(SpoolFull::Key));
        s.push("b", msg("b1", 60)).unwrap();
        assert_eq!(s.push("c", msg("c1", 60)), Err(SpoolFull::Total));
        assert_eq!(s.len(), 3);
        // Requeued messages were accepted already: held even past the bound.
        let f = s.flush(T0, "a");
        s.push("c", msg("c1", 60)).unwrap();
        s.requeue("a", f.deliver);
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn seen_ids_are_remembered_for_two_default_ttls() {
        let mut seen = SeenIds::default();
        seen.record(T0, "m1");
        assert!(seen.contains(T0 + DUPLICATE_WINDOW - Duration::from_millis(1), "m1"));
        assert!(!seen.contains(T0 + DUPLICATE_WINDOW, "m1"));
        assert!(!seen.contains(T0, "m2"));
        assert_eq!(seen.prune(T0 + DUPLICATE_WINDOW), 1);
        assert!(seen.is_empty());
    }

    #[test]
    fn seen_ids_at_capacity_forget_the_oldest_and_say_so() {
        let mut seen = SeenIds::new(2);
        seen.record(T0, "a");
        seen.record(T0 + Duration::from_secs(1), "b");
        assert_eq!(
            seen.record(T0 + Duration::from_secs(2), "c"),
            Some(String::from("a"))
        );
        assert_eq!(seen.len(), 2);
    }
}
