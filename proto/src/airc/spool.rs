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
//!
//! Bounds (§15 was lost; §16.7 "bound resources"): a spool holds at most [`MAX_SPOOLED`] messages
//! and [`MAX_SPOOLED_BYTES`] bytes, and one key at most [`MAX_SPOOLED_PER_KEY`] and
//! [`MAX_SPOOLED_BYTES_PER_KEY`], so that neither a million small messages nor a few hundred of the
//! largest frame can take the memory and disk the spool lives in. Bytes are what each message's
//! frame takes ([`Spooled::bytes`]), counted while it is held and released when it leaves
//! (delivered, expired, settled). A full spool refuses the new message; what it holds is never
//! dropped to make room.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use super::framing::MAX_FRAME_BYTES;
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

/// Frame bytes held in one spool at most: 256 MiB, 256 frames of the largest size (§3.2). The
/// count bound alone let 100 000 messages of up to 1 MiB each be held, 100 GB of memory and
/// disk; this keeps the spool within what a small server has, while 100 000 messages of a
/// typical 2 KiB still fit. The spec sets no bound (§15 was lost); a full spool refuses.
pub const MAX_SPOOLED_BYTES: usize = 256 * MAX_FRAME_BYTES;

/// Frame bytes held under one destination key at most: 32 MiB, an eighth of
/// [`MAX_SPOOLED_BYTES`], so that one unreachable authority or offline namespace sent the largest
/// frames cannot take the whole spool (eight keys must be filled to fill it), while 32 frames of
/// the largest size, or 10 000 messages of 3 KiB, still wait for one key.
pub const MAX_SPOOLED_BYTES_PER_KEY: usize = MAX_SPOOLED_BYTES / 8;

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
    /// What the message counts against [`MAX_SPOOLED_BYTES`] and [`MAX_SPOOLED_BYTES_PER_KEY`]:
    /// the length of its frame as spooled, weighed by whoever spools it (the spool takes it as
    /// given, so a message weighed once is not weighed again each time a flush puts it back).
    pub bytes: usize,
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
    /// The message would take the spool past [`MAX_SPOOLED_BYTES`].
    TotalBytes,
    /// The message would take this key past [`MAX_SPOOLED_BYTES_PER_KEY`].
    KeyBytes,
}

impl core::fmt::Display for SpoolFull {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Total => "spool full",
            Self::Key => "spool full for this destination",
            Self::TotalBytes => "spool full: bytes",
            Self::KeyBytes => "spool full for this destination: bytes",
        })
    }
}

/// How much a [`Spool`] holds at most; [`SpoolLimits::default`] is the named constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpoolLimits {
    /// Messages in all ([`MAX_SPOOLED`]).
    pub messages: usize,
    /// Messages under one key ([`MAX_SPOOLED_PER_KEY`]).
    pub messages_per_key: usize,
    /// Frame bytes in all ([`MAX_SPOOLED_BYTES`]).
    pub bytes: usize,
    /// Frame bytes under one key ([`MAX_SPOOLED_BYTES_PER_KEY`]).
    pub bytes_per_key: usize,
}

impl Default for SpoolLimits {
    fn default() -> Self {
        Self {
            messages: MAX_SPOOLED,
            messages_per_key: MAX_SPOOLED_PER_KEY,
            bytes: MAX_SPOOLED_BYTES,
            bytes_per_key: MAX_SPOOLED_BYTES_PER_KEY,
        }
    }
}

/// One key's backlog, in order, and the bytes it holds.
#[derive(Debug)]
struct Backlog<M> {
    items: VecDeque<Spooled<M>>,
    bytes: usize,
}

impl<M> Default for Backlog<M> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            bytes: 0,
        }
    }
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
    keys: BTreeMap<String, Backlog<M>>,
    len: usize,
    bytes: usize,
    limits: SpoolLimits,
    in_flight: BTreeSet<String>,
    settled: BTreeSet<String>,
}

impl<M> Default for Spool<M> {
    fn default() -> Self {
        Self::new(SpoolLimits::default())
    }
}

impl<M> Spool<M> {
    /// An empty spool holding at most what `limits` says.
    pub fn new(limits: SpoolLimits) -> Self {
        Self {
            keys: BTreeMap::new(),
            len: 0,
            bytes: 0,
            limits,
            in_flight: BTreeSet::new(),
            settled: BTreeSet::new(),
        }
    }

    /// Files `item` at the back of `key`'s backlog, or says why it cannot be held. A caller that
    /// gets an error must not ack `queued`: `queued` means a copy is held.
    pub fn push(&mut self, key: &str, item: Spooled<M>) -> Result<(), SpoolFull> {
        let limits = self.limits;
        if self.len >= limits.messages {
            return Err(SpoolFull::Total);
        }
        if self.len_key(key) >= limits.messages_per_key {
            return Err(SpoolFull::Key);
        }
        if self.bytes.saturating_add(item.bytes) > limits.bytes {
            return Err(SpoolFull::TotalBytes);
        }
        if self.bytes_key(key).saturating_add(item.bytes) > limits.bytes_per_key {
            return Err(SpoolFull::KeyBytes);
        }
        self.push_back(key, item);
        Ok(())
    }

    /// Files `item` at the back of `key`'s backlog whatever the bounds, and counts it.
    fn push_back(&mut self, key: &str, item: Spooled<M>) {
        self.len += 1;
        self.bytes = self.bytes.saturating_add(item.bytes);
        let backlog = self.keys.entry(String::from(key)).or_default();
        backlog.bytes = backlog.bytes.saturating_add(item.bytes);
        backlog.items.push_back(item);
    }

    /// Spools a message whose next hop did not ack in time, and marks its id in flight (§6.6).
    ///
    /// The message was accepted when it was forwarded, so it is held even past the bounds: an
    /// accepted message is never dropped for want of room.
    pub fn push_in_flight(&mut self, key: &str, item: Spooled<M>) {
        self.in_flight.insert(item.id.clone());
        self.push_back(key, item);
    }

    /// Files a message read back from storage after a restart at the back of `key`'s backlog:
    /// records come back in the order they were written, so this keeps each key's order. They
    /// were accepted before the restart, so they are held even past the bounds, and counted, so
    /// that what comes after the restart finds the spool as full as it was.
    pub fn restore(&mut self, key: &str, item: Spooled<M>) {
        self.push_back(key, item);
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
        let Some(backlog) = self.keys.remove(key) else {
            return flush;
        };
        let mut kept = Backlog::default();
        for item in backlog.items {
            if self.settled.remove(&item.id) {
                flush.settled.push(item);
            } else if item.is_expired(now) {
                self.in_flight.remove(&item.id);
                flush.expired.push(item);
            } else if self.in_flight.contains(&item.id) {
                kept.bytes += item.bytes;
                kept.items.push_back(item);
            } else {
                flush.deliver.push(item);
            }
        }
        self.len -= flush.deliver.len() + flush.expired.len() + flush.settled.len();
        self.bytes = self
            .bytes
            .saturating_sub(backlog.bytes.saturating_sub(kept.bytes));
        if !kept.items.is_empty() {
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
        let added: usize = items.iter().map(|i| i.bytes).sum();
        self.bytes = self.bytes.saturating_add(added);
        let backlog = self.keys.entry(String::from(key)).or_default();
        backlog.bytes = backlog.bytes.saturating_add(added);
        for item in items.into_iter().rev() {
            backlog.items.push_front(item);
        }
    }

    /// Every key with a backlog, in key order (the periodic flush of §7.4 walks these).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Messages held under `key`.
    pub fn len_key(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, |b| b.items.len())
    }

    /// Messages held in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Frame bytes held under `key` ([`Spooled::bytes`] summed).
    pub fn bytes_key(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, |b| b.bytes)
    }

    /// Frame bytes held in all.
    pub fn bytes(&self) -> usize {
        self.bytes
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
    use alloc::format;
    use alloc::string::ToString;

    const T0: Timestamp = Timestamp::from_secs(1_790_380_000);

    fn msg(id: &str, ttl_secs: u64) -> Spooled<u32> {
        Spooled {
            id: String::from(id),
            ts: T0,
            ttl: Duration::from_secs(ttl_secs),
            msg: 0,
            bytes: 100,
        }
    }

    fn limits(messages: usize, messages_per_key: usize) -> SpoolLimits {
        SpoolLimits {
            messages,
            messages_per_key,
            ..SpoolLimits::default()
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
        let mut s = Spool::new(limits(1, 1));
        for id in ["1", "2", "3"] {
            s.restore("k", msg(id, 60));
        }
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["1", "2", "3"]);
    }

    #[test]
    fn a_released_message_is_sent_again_on_the_next_flush() {
        let mut s = Spool::new(limits(1, 1));
        s.push("k", msg("a", 60)).unwrap();
        // Accepted already: held past the bounds.
        s.push_in_flight("k", msg("b", 60));
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["a"]);
        assert!(s.release("b"));
        assert_eq!(ids(&s.flush(T0, "k").deliver), ["b"]);
    }

    #[test]
    fn a_full_spool_refuses_rather_than_dropping_what_it_holds() {
        let mut s = Spool::new(limits(3, 2));
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

    fn sized(id: &str, bytes: usize) -> Spooled<u32> {
        Spooled {
            bytes,
            ..msg(id, 60)
        }
    }

    #[test]
    fn one_key_sent_the_largest_frames_is_refused_at_its_byte_bound_and_keeps_what_it_holds() {
        let mut s = Spool::default();
        let per_key = MAX_SPOOLED_BYTES_PER_KEY / MAX_FRAME_BYTES;
        for i in 0..per_key {
            s.push("k", sized(&i.to_string(), MAX_FRAME_BYTES)).unwrap();
        }
        assert_eq!(s.bytes_key("k"), MAX_SPOOLED_BYTES_PER_KEY);
        // Far below the count bound, but over the bytes: refused, even one byte more.
        assert_eq!(s.push("k", sized("over", 1)), Err(SpoolFull::KeyBytes));
        assert_eq!(s.len_key("k"), per_key);
        // Another key still has room.
        s.push("other", sized("o", MAX_FRAME_BYTES)).unwrap();
        // Everything held comes out, in order, and the bytes with it.
        let f = s.flush(T0, "k");
        assert_eq!(f.deliver.len(), per_key);
        assert_eq!(f.deliver[0].id, "0");
        assert_eq!(s.bytes_key("k"), 0);
        assert_eq!(s.bytes(), MAX_FRAME_BYTES);
        s.push("k", sized("again", MAX_FRAME_BYTES)).unwrap();
    }

    #[test]
    fn eight_keys_of_the_largest_frames_fill_the_spool_and_a_ninth_key_is_refused() {
        let mut s = Spool::default();
        let per_key = MAX_SPOOLED_BYTES_PER_KEY / MAX_FRAME_BYTES;
        let keys = MAX_SPOOLED_BYTES / MAX_SPOOLED_BYTES_PER_KEY;
        for k in 0..keys {
            for i in 0..per_key {
                s.push(&k.to_string(), sized(&format!("{k}.{i}"), MAX_FRAME_BYTES))
                    .unwrap();
            }
        }
        assert_eq!(s.bytes(), MAX_SPOOLED_BYTES);
        assert_eq!(s.push("ninth", sized("x", 1)), Err(SpoolFull::TotalBytes));
        assert_eq!(s.len(), keys * per_key);
    }

    #[test]
    fn a_million_small_messages_meet_the_count_bound_long_before_the_byte_bound() {
        let mut s = Spool::default();
        let mut refused = 0;
        for i in 0..1_000_000usize {
            // Spread over enough keys that only the total can stop them.
            let key = (i % 100).to_string();
            match s.push(&key, sized("m", 200)) {
                Ok(()) => {}
                Err(e) => {
                    assert_eq!(e, SpoolFull::Total);
                    refused += 1;
                }
            }
        }
        assert_eq!(s.len(), MAX_SPOOLED);
        assert_eq!(refused, 1_000_000 - MAX_SPOOLED);
        assert_eq!(s.bytes(), MAX_SPOOLED * 200);
    }

    #[test]
    fn bytes_leave_with_what_expires_or_settles_and_come_back_with_requeues_and_restores() {
        let mut s = Spool::new(SpoolLimits {
            bytes: 1000,
            bytes_per_key: 600,
            ..SpoolLimits::default()
        });
        s.push(
            "k",
            Spooled {
                bytes: 200,
                ..msg("short", 5)
            },
        )
        .unwrap();
        s.push("k", sized("long", 300)).unwrap();
        s.push_in_flight("k", sized("late", 100));
        assert_eq!((s.bytes_key("k"), s.bytes()), (600, 600));
        assert_eq!(s.push("k", sized("x", 1)), Err(SpoolFull::KeyBytes));
        // "short" expires, "late" stays in flight, "long" is handed out.
        let f = s.flush(T0 + Duration::from_secs(6), "k");
        assert_eq!(ids(&f.expired), ["short"]);
        assert_eq!(s.bytes(), 100);
        // Not delivered after all: back, and counted again.
        s.requeue("k", f.deliver);
        assert_eq!(s.bytes_key("k"), 400);
        assert!(s.settle("late"));
        let f = s.flush(T0, "k");
        assert_eq!(ids(&f.settled), ["late"]);
        assert_eq!(s.bytes(), 0);
        // Restored records are held past the bound, and counted: the next push is refused.
        s.restore("k", sized("r1", 500));
        s.restore("k", sized("r2", 500));
        assert_eq!(s.bytes(), 1000);
        assert_eq!(s.push("j", sized("y", 1)), Err(SpoolFull::TotalBytes));
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
