//! The loop check's memory of one node's passed signals (introductions-never-loop, §8).
//!
//! §8 floods a signal to every admitted peer of its room at once, so the (signal, peer) pairs a
//! node passes come in groups of one signal and about eleven peers. Kept as one entry a signal
//! with its peers beside it, the memory holds a signal's name once rather than once a peer:
//! a tree a tenth the size, and about a fifth of the bytes, for the same set of pairs. The
//! peer lists of forgotten signals are kept, emptied, for the next signals: a list grown anew
//! one peer at a time cost three allocations a signal, the largest count of the simulator's
//! own, and the tree holds only a list's number, so its entries are as small as before.

use std::collections::BTreeMap;

/// A signal's name: its `at`, then its origin and target by node number. `at` comes first so
/// the oldest are forgotten from the front.
type Name = (u64, u32, u32);

/// The (signal, peer) pairs one node passed on and still remembers; see the [module
/// docs](self).
#[derive(Debug, Default)]
pub(super) struct Passed {
    /// Each signal's peer list, by its number in `lists`.
    by_signal: BTreeMap<Name, usize>,
    /// Peer lists, each in the order its signal went to them: a remembered signal's, or free.
    lists: Vec<Vec<u32>>,
    /// The free lists' numbers, each list empty and keeping its buffer.
    free: Vec<usize>,
}

impl Passed {
    /// Notes that the signal named (`at`, `origin`, `target`) went to `peer`; `false` when it
    /// had gone to that peer before.
    pub(super) fn insert(&mut self, at: u64, origin: u32, target: u32, peer: u32) -> bool {
        let (lists, free) = (&mut self.lists, &mut self.free);
        let list = *self
            .by_signal
            .entry((at, origin, target))
            .or_insert_with(|| {
                free.pop().unwrap_or_else(|| {
                    lists.push(Vec::new());
                    lists.len() - 1
                })
            });
        let peers = &mut self.lists[list];
        // A room holds at most 64 peers, so the scan is short.
        if peers.contains(&peer) {
            return false;
        }
        peers.push(peer);
        true
    }

    /// Forgets every signal whose `at` is before `oldest`.
    pub(super) fn forget_before(&mut self, oldest: u64) {
        while self
            .by_signal
            .first_key_value()
            .is_some_and(|(&(at, ..), _)| at < oldest)
        {
            if let Some((_, list)) = self.by_signal.pop_first() {
                self.lists[list].clear();
                self.free.push(list);
            }
        }
    }

    /// The `at` of each (signal, peer) pair remembered, oldest first.
    #[cfg(test)]
    pub(super) fn ats(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_signal
            .iter()
            .flat_map(|(&(at, ..), &list)| self.lists[list].iter().map(move |_| at))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand_core::Rng as _;

    use super::*;

    /// Against the set of (at, peer, origin, target) tuples it stands for: the same answer to
    /// every insert, and the same pairs left after every forgetting.
    #[test]
    fn passed_is_the_set_of_pairs() {
        let mut rng = crate::stream(0x9a55, 1);
        let mut passed = Passed::default();
        let mut set = BTreeSet::new();
        let mut oldest = 0;
        for step in 0..20_000 {
            let r = rng.next_u64();
            let at = oldest + r % 50;
            let (origin, target, peer) = (
                (r >> 8) as u32 % 4,
                (r >> 16) as u32 % 4,
                // A space's worth of peers mostly, now and then a room's.
                (r >> 24) as u32 % if r >> 61 == 0 { 40 } else { 12 },
            );
            assert_eq!(
                passed.insert(at, origin, target, peer),
                set.insert((at, peer, origin, target))
            );
            if step % 97 == 0 {
                oldest += r >> 40 & 15;
                passed.forget_before(oldest);
                set.retain(|&(at, ..)| at >= oldest);
                let ats: Vec<u64> = set.iter().map(|&(at, ..)| at).collect();
                assert_eq!(passed.ats().collect::<Vec<_>>(), ats);
            }
        }
    }
}
