//! The reference event store: every rule of [`super::store`] kept in memory, in the plainest
//! code that does it, so tests, the simulator and fuzzers can run a relay session against it
//! and backends can be compared with it. Bounded by a capacity in events.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::ops::Bound;

use super::store::{Cursor, EventStore, StoreError, WriteOutcome};
use crate::core::Timestamp;
use crate::nostr::event::{Event, EventId};
use crate::nostr::expiration::is_expired;
use crate::nostr::kinds::{self, Address, DELETION_KIND, KindClass};
use crate::nostr::message::Filter;

/// Default [`MemoryStore`] capacity, in events.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Events in memory, with NIP-01/09/40/62 semantics.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    events: BTreeMap<EventId, Event>,
    /// Newest first: `created_at` descending, then id ascending.
    order: BTreeSet<(Reverse<u64>, EventId)>,
    addresses: BTreeMap<Address, EventId>,
    /// Stored kind 5 events, by author.
    deletions: BTreeMap<[u8; 32], BTreeSet<EventId>>,
    /// The latest `created_at` each pubkey vanished up to.
    vanished: BTreeMap<[u8; 32], u64>,
    capacity: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl MemoryStore {
    /// An empty store holding at most `capacity` events (and as many vanished pubkeys).
    pub fn new(capacity: usize) -> Self {
        Self {
            events: BTreeMap::new(),
            order: BTreeSet::new(),
            addresses: BTreeMap::new(),
            deletions: BTreeMap::new(),
            vanished: BTreeMap::new(),
            capacity,
        }
    }

    /// How many events are held (expired ones included until removed).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Whether the event `id` is held.
    pub fn contains(&self, id: &EventId) -> bool {
        self.events.contains_key(id)
    }

    fn insert(&mut self, event: Event) {
        self.order.insert((Reverse(event.created_at), event.id));
        if let Some(a) = kinds::address(&event) {
            self.addresses.insert(a, event.id);
        }
        if event.kind == DELETION_KIND {
            self.deletions
                .entry(event.pubkey)
                .or_default()
                .insert(event.id);
        }
        self.events.insert(event.id, event);
    }

    fn remove(&mut self, id: &EventId) {
        let Some(event) = self.events.remove(id) else {
            return;
        };
        self.order.remove(&(Reverse(event.created_at), event.id));
        if let Some(a) = kinds::address(&event)
            && self.addresses.get(&a) == Some(id)
        {
            self.addresses.remove(&a);
        }
        if event.kind == DELETION_KIND
            && let Some(set) = self.deletions.get_mut(&event.pubkey)
        {
            set.remove(id);
            if set.is_empty() {
                self.deletions.remove(&event.pubkey);
            }
        }
    }

    fn visible(event: &Event, now: Timestamp) -> bool {
        !is_expired(event, now)
    }
}

impl EventStore for MemoryStore {
    fn write(&mut self, event: &Event, _now: Timestamp) -> Result<WriteOutcome, StoreError> {
        if self.events.contains_key(&event.id) {
            return Ok(WriteOutcome::Duplicate);
        }
        if kinds::class(event.kind) == KindClass::Ephemeral {
            return Err(StoreError(String::from("ephemeral events are not stored")));
        }
        if self
            .vanished
            .get(&event.pubkey)
            .is_some_and(|&t| event.created_at <= t)
        {
            return Ok(WriteOutcome::Vanished);
        }
        if let Some(ids) = self.deletions.get(&event.pubkey)
            && ids
                .iter()
                .filter_map(|id| self.events.get(id))
                .any(|d| kinds::deletes(d, event))
        {
            return Ok(WriteOutcome::Deleted);
        }
        let replaced = match kinds::address(event) {
            Some(a) => match self.addresses.get(&a).and_then(|id| self.events.get(id)) {
                Some(old) if !kinds::supersedes(event, old) => return Ok(WriteOutcome::Superseded),
                Some(old) => Some(old.id),
                None => None,
            },
            None => None,
        };
        if replaced.is_none() && self.events.len() >= self.capacity {
            return Err(StoreError(String::from("the store is full")));
        }
        if let Some(id) = replaced {
            self.remove(&id);
        }
        if event.kind == DELETION_KIND {
            let doomed: Vec<EventId> = self
                .events
                .values()
                .filter(|e| kinds::deletes(event, e))
                .map(|e| e.id)
                .collect();
            for id in doomed {
                self.remove(&id);
            }
        }
        self.insert(event.clone());
        Ok(WriteOutcome::Stored)
    }

    fn vanish(&mut self, request: &Event) -> Result<u64, StoreError> {
        if !self.vanished.contains_key(&request.pubkey) && self.vanished.len() >= self.capacity {
            return Err(StoreError(String::from("the store is full")));
        }
        let doomed: Vec<EventId> = self
            .events
            .values()
            .filter(|e| kinds::vanishes(request, e))
            .map(|e| e.id)
            .collect();
        for id in &doomed {
            self.remove(id);
        }
        let t = self.vanished.entry(request.pubkey).or_insert(0);
        *t = (*t).max(request.created_at);
        Ok(doomed.len() as u64)
    }

    fn query(
        &mut self,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError> {
        let start = match after {
            Some(c) => Bound::Excluded((Reverse(c.created_at), c.id)),
            None => Bound::Unbounded,
        };
        Ok(self
            .order
            .range((start, Bound::Unbounded))
            .filter_map(|(_, id)| self.events.get(id))
            .filter(|e| Self::visible(e, now) && filter.matches(e))
            .take(max)
            .cloned()
            .collect())
    }

    fn count(&mut self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        Ok(self
            .events
            .values()
            .filter(|e| Self::visible(e, now) && filters.iter().any(|f| f.matches(e)))
            .count() as u64)
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn the_memory_store_passes_the_store_suite() {
        let mut rng = ChaCha20Rng::seed_from_u64(35);
        super::super::suite::run(default_provider(), &mut rng, || MemoryStore::new(64));
    }
}
