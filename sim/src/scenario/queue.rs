//! The event queue: a calendar of per-millisecond buckets for the near future, a heap for the
//! rest.
//!
//! A run pops an event for nearly every one it pushes, most of them due within a few hundred
//! milliseconds (a link's latency, a relay's reply). A heap pays `log n` comparisons on both
//! sides; a bucket per millisecond of the next [`RING_MS`] pays a link and an unlink. Events at
//! one instant must come out in the order queued, and they do: an instant's bucket fills only
//! once the instant is inside the ring, and the heap's events for it were all queued before
//! then, so they are moved in first, in their own order. Events for an instant already passed
//! over (the AIRC world queues some without clamping them to the present) wait in a second
//! heap, which comes before everything else.
//!
//! A bucket is a list threaded through the slots events wait in (each slot names the next of
//! its bucket), not a buffer of its own: a buffer per bucket keeps the size of the busiest
//! millisecond it ever held, about 8 MiB over a 1 000-node run's ring, where the links cost a
//! word a slot.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use weft_proto::core::Timestamp;

use crate::prefetch::prefetch;

/// How many milliseconds ahead the ring of buckets reaches. Longer waits (timers, partitions,
/// restarts) go to the heap until they come within reach. A simulator tuning, no protocol value:
/// a few seconds holds nearly every link's delivery.
pub(crate) const RING_MS: u64 = 4_096;

/// A heap entry: due time (milliseconds), sequence number, slot.
type Entry = Reverse<(u64, u64, usize)>;

/// No slot: the end of a bucket's list.
const NONE: usize = usize::MAX;

/// A bucket: the first and last slot of its list, [`NONE`] when empty.
#[derive(Clone, Copy)]
struct Bucket {
    head: usize,
    tail: usize,
}

const EMPTY: Bucket = Bucket {
    head: NONE,
    tail: NONE,
};

/// An event waiting in the queue, and the slot after it in its bucket.
struct Slot<E> {
    ev: Option<E>,
    next: usize,
}

/// Events waiting for their time: the earliest first, and in the order they were queued on a
/// tie, so a run never depends on anything but its seed.
///
/// Events wait in slots, reused once taken, and the buckets and heaps hold slot numbers: an
/// event (a machine's input, often a hundred bytes or more) is moved in and out once, not
/// shifted about by a heap's sifting.
pub(crate) struct Queue<E> {
    /// The instant (milliseconds) the ring starts at: every bucket holds events for
    /// `[base, base + RING_MS)`, the one for `t` at `t % RING_MS`.
    base: u64,
    /// The lists of the events due in the ring's reach, each in the order queued.
    ring: Vec<Bucket>,
    /// How many events the ring holds.
    in_ring: usize,
    /// Events due at or after `base + RING_MS`.
    later: BinaryHeap<Entry>,
    /// Events due before `base`, queued after the ring had moved past their instant.
    earlier: BinaryHeap<Entry>,
    slots: Vec<Slot<E>>,
    free: Vec<usize>,
    seq: u64,
}

impl<E> Queue<E> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            ring: vec![EMPTY; RING_MS as usize],
            in_ring: 0,
            later: BinaryHeap::new(),
            earlier: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }

    /// Queues `ev` for `at`, after everything already queued for that time.
    pub(crate) fn push(&mut self, at: Timestamp, ev: E) {
        self.seq += 1;
        let ev = Some(ev);
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Slot { ev, next: NONE };
                // The slot the next push fills: freed a while ago, so cold when the event that
                // pushed this one pushes again (§8's flood: a dozen in a row).
                if let Some(&next) = self.free.last() {
                    prefetch(&self.slots[next]);
                }
                slot
            }
            None => {
                self.slots.push(Slot { ev, next: NONE });
                self.slots.len() - 1
            }
        };
        let at = at.as_millis();
        if at < self.base {
            self.earlier.push(Reverse((at, self.seq, slot)));
        } else if at - self.base < RING_MS {
            self.link(at, slot);
        } else {
            self.later.push(Reverse((at, self.seq, slot)));
        }
    }

    /// When the next event is due.
    pub(crate) fn next_at(&mut self) -> Option<Timestamp> {
        if let Some(Reverse((at, _, _))) = self.earlier.peek() {
            return Some(Timestamp::from_millis(*at));
        }
        self.settle();
        (self.in_ring > 0).then_some(Timestamp::from_millis(self.base))
    }

    /// Takes the next event.
    pub(crate) fn pop(&mut self) -> Option<(Timestamp, E)> {
        let (at, slot) = match self.earlier.pop() {
            Some(Reverse((at, _, slot))) => (at, slot),
            None => {
                self.settle();
                let bucket = &mut self.ring[bucket(self.base)];
                let slot = bucket.head;
                if slot == NONE {
                    return None;
                }
                bucket.head = self.slots[slot].next;
                match bucket.head {
                    NONE => bucket.tail = NONE,
                    // The slot after the next is fetched while this event runs: queued long ago
                    // and cold in a large run, it is read at the next pop (for its successor)
                    // and by `peek_likely` just after. The next slot itself was fetched so one
                    // pop earlier; fetched only now, `peek_likely` stalled on it at once.
                    next => match self.slots[next].next {
                        NONE => {}
                        after => prefetch(&self.slots[after]),
                    },
                }
                self.in_ring -= 1;
                (self.base, slot)
            }
        };
        let ev = self.slots[slot]
            .ev
            .take()
            .expect("a queued slot holds its event");
        self.free.push(slot);
        Some((Timestamp::from_millis(at), ev))
    }

    /// The event [`pop`](Self::pop) would most likely take next (the next in the current
    /// instant's bucket), without taking it: what to fetch ahead for. A hint only: an event
    /// queued in between, or one due earlier, may still come first.
    pub(crate) fn peek_likely(&self) -> Option<&E> {
        let head = self.ring.get(bucket(self.base))?.head;
        self.slots.get(head)?.ev.as_ref()
    }

    /// Appends `slot`, due at `at` within the ring's reach, to its bucket.
    fn link(&mut self, at: u64, slot: usize) {
        let bucket = &mut self.ring[bucket(at)];
        match bucket.tail {
            NONE => bucket.head = slot,
            tail => self.slots[tail].next = slot,
        }
        bucket.tail = slot;
        self.in_ring += 1;
    }

    /// Moves the ring's start to the earliest instant with an event, bringing the heap's events
    /// into the ring as their instants come within reach. Nothing is left before `base` but
    /// `earlier`'s events, so the first bucket then holds the earliest of the rest.
    fn settle(&mut self) {
        if self.in_ring == 0 {
            let Some(Reverse((at, _, _))) = self.later.peek() else {
                return;
            };
            // Every bucket is empty, so the ring may start anywhere: at the heap's first.
            self.base = *at;
            self.bring_in();
        }
        while self.ring[bucket(self.base)].head == NONE {
            self.base += 1;
            self.bring_in();
        }
    }

    /// Moves the heap's events that are now within the ring's reach into their buckets, in
    /// (time, sequence) order, so each lands before anything queued for its instant later.
    fn bring_in(&mut self) {
        while let Some(Reverse((at, _, slot))) = self.later.peek().copied() {
            // `later` holds nothing before `base`: it is filled only from `base + RING_MS` on
            // and `base` moves only up to its first.
            if at - self.base >= RING_MS {
                break;
            }
            self.later.pop();
            self.link(at, slot);
        }
    }
}

/// The bucket of instant `at` (milliseconds).
fn bucket(at: u64) -> usize {
    // Below `RING_MS`, so it fits.
    (at % RING_MS) as usize
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand_core::Rng as _;

    use super::*;

    /// Against a B-tree ordered by (time, order queued): ties, instants already passed, events
    /// beyond the ring's reach and at the clock's very end, pushes between pops as a run makes
    /// them, and `next_at` asked at every step.
    #[test]
    fn the_queue_gives_a_reference_orders_events() {
        let mut rng = crate::stream(0x9e3e, 3);
        for round in 0..40u64 {
            let mut q = Queue::new();
            let mut reference = BTreeMap::new();
            let mut now = 1_000_000 * round;
            let mut n = 0u64;
            for step in 0..4_000 {
                let pushes = rng.next_u32() % 3;
                for _ in 0..pushes {
                    let r = rng.next_u64();
                    let at = match r % 10 {
                        // The same instant, or one just passed (AIRC's unclamped times).
                        0 => now,
                        1 => now.saturating_sub(r >> 60),
                        2 => now.saturating_sub((r >> 40) % 20_000),
                        // Beyond the ring, far beyond, and the end of the clock.
                        3 => now.saturating_add(RING_MS - 1 + (r >> 62)),
                        4 => now.saturating_add((r >> 32) % 100_000),
                        5 if r.is_multiple_of(7) => u64::MAX - (r >> 62),
                        _ => now.saturating_add((r >> 32) % 300),
                    };
                    n += 1;
                    q.push(Timestamp::from_millis(at), n);
                    reference.insert((at, n), n);
                }
                if step % 3 == 0 {
                    continue;
                }
                let want = reference.pop_first();
                assert_eq!(
                    q.next_at(),
                    want.map(|((at, _), _)| Timestamp::from_millis(at))
                );
                let got = q.pop();
                assert_eq!(
                    got,
                    want.map(|((at, _), ev)| (Timestamp::from_millis(at), ev))
                );
                if let Some(((at, _), _)) = want {
                    now = now.max(at);
                }
            }
            while let Some(((at, _), ev)) = reference.pop_first() {
                assert_eq!(q.next_at(), Some(Timestamp::from_millis(at)));
                assert_eq!(q.pop(), Some((Timestamp::from_millis(at), ev)));
            }
            assert_eq!(q.next_at(), None);
            assert_eq!(q.pop(), None);
        }
    }

    /// `peek_likely` is a hint, but an honest one: what it shows is queued, and when the next
    /// event is due at the instant just popped and none came in earlier, it is that event.
    #[test]
    fn the_likely_next_event_is_queued_and_usually_next() {
        let mut rng = crate::stream(0x9e3f, 3);
        let mut q = Queue::new();
        let mut queued = BTreeMap::new();
        let (mut now, mut n, mut hits) = (0u64, 0u64, 0);
        for _ in 0..20_000 {
            for _ in 0..rng.next_u32() % 3 {
                let r = rng.next_u64();
                let at = match r % 8 {
                    0 => now.saturating_sub(r >> 61),
                    1 => now + RING_MS + (r >> 40) % 1_000,
                    _ => now + (r >> 32) % 4,
                };
                n += 1;
                q.push(Timestamp::from_millis(at), n);
                queued.insert((at, n), n);
            }
            let Some(((at, _), ev)) = queued.pop_first() else {
                continue;
            };
            assert_eq!(q.pop(), Some((Timestamp::from_millis(at), ev)));
            now = now.max(at);
            if let Some(&likely) = q.peek_likely() {
                assert!(queued.values().any(|&e| e == likely));
                if let Some((&(next_at, _), &next)) = queued.first_key_value()
                    && next_at == at
                    && q.earlier.is_empty()
                {
                    assert_eq!(likely, next);
                    hits += 1;
                }
            }
        }
        assert!(hits > 1_000, "{hits}");
    }
}
