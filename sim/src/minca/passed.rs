//! The loop check's memory of one node's passed signals (introductions-never-loop, §8).
//!
//! §8 floods a signal to every admitted peer of its room at once, so the (signal, peer) pairs a
//! node passes come in groups of one signal and about eleven peers. Kept as one entry a signal
//! with its peers beside it, the memory holds a signal's name once rather than once a peer:
//! a tree a tenth the size, and about a fifth of the bytes, for the same set of pairs.
//!
//! A signal's peers sit in chunks of one cache line each, taken from the node's own pool and
//! chained when a room holds more peers than one chunk; the tree holds the first chunk's number.
//! A vector of peers a signal, grown one peer at a time, cost three allocations a signal (the
//! largest count of the simulator's own, about 80 000 in a 1 000-node run), and a signal is
//! remembered for most of two minutes, so vectors kept for reuse were seldom reused.

use std::collections::BTreeMap;

/// A signal's name: its `at`, then its origin and target by node number. `at` comes first so
/// the oldest are forgotten from the front.
type Name = (u64, u32, u32);

/// Peers one [`Chunk`] holds: as many as make it one cache line, more than the eleven a space
/// of [`super::SCALE_SPACE_NODES`] gives a node to pass a signal to. A simulator tuning, no
/// protocol value: a larger room chains a second chunk.
const CHUNK_PEERS: usize = 14;

/// No chunk: the end of a chain.
const NONE: u32 = u32::MAX;

/// Some of one signal's peers, in the order it went to them, and the chunk with the rest.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Chunk {
    len: u32,
    next: u32,
    peers: [u32; CHUNK_PEERS],
}

const EMPTY: Chunk = Chunk {
    len: 0,
    next: NONE,
    peers: [0; CHUNK_PEERS],
};

/// The (signal, peer) pairs one node passed on and still remembers; see the [module
/// docs](self).
#[derive(Debug, Default)]
pub(super) struct Passed {
    /// Each signal's first chunk, by its number in `chunks`.
    by_signal: BTreeMap<Name, u32>,
    /// Chunks: a remembered signal's, or free.
    chunks: Vec<Chunk>,
    /// The free chunks' numbers.
    free: Vec<u32>,
}

impl Passed {
    /// Notes that the signal named (`at`, `origin`, `target`) went to `peer`; `false` when it
    /// had gone to that peer before.
    pub(super) fn insert(&mut self, at: u64, origin: u32, target: u32, peer: u32) -> bool {
        let (chunks, free) = (&mut self.chunks, &mut self.free);
        let mut c = *self
            .by_signal
            .entry((at, origin, target))
            .or_insert_with(|| take(chunks, free));
        // A room holds at most 64 peers, so the scan is short.
        loop {
            let chunk = &self.chunks[c as usize];
            if chunk.peers[..chunk.len as usize].contains(&peer) {
                return false;
            }
            if chunk.next == NONE {
                break;
            }
            c = chunk.next;
        }
        if self.chunks[c as usize].len as usize == CHUNK_PEERS {
            let next = take(&mut self.chunks, &mut self.free);
            self.chunks[c as usize].next = next;
            c = next;
        }
        let chunk = &mut self.chunks[c as usize];
        chunk.peers[chunk.len as usize] = peer;
        chunk.len += 1;
        true
    }

    /// Forgets every signal whose `at` is before `oldest`.
    pub(super) fn forget_before(&mut self, oldest: u64) {
        while self
            .by_signal
            .first_key_value()
            .is_some_and(|(&(at, ..), _)| at < oldest)
        {
            let Some((_, mut c)) = self.by_signal.pop_first() else {
                break;
            };
            while c != NONE {
                self.free.push(c);
                c = std::mem::replace(&mut self.chunks[c as usize], EMPTY).next;
            }
        }
    }

    /// The `at` of each (signal, peer) pair remembered, oldest first.
    #[cfg(test)]
    pub(super) fn ats(&self) -> impl Iterator<Item = u64> + '_ {
        let chunks = &self.chunks;
        self.by_signal.iter().flat_map(move |(&(at, ..), &first)| {
            let chain = std::iter::successors(Some(first), move |&c| {
                Some(chunks[c as usize].next).filter(|&n| n != NONE)
            });
            chain.flat_map(move |c| (0..chunks[c as usize].len).map(move |_| at))
        })
    }
}

/// A chunk to fill, empty: a free one, or a new one.
fn take(chunks: &mut Vec<Chunk>, free: &mut Vec<u32>) -> u32 {
    free.pop().unwrap_or_else(|| {
        chunks.push(EMPTY);
        // A node's chunks are its remembered signals, nowhere near four billion.
        (chunks.len() - 1) as u32
    })
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

    /// A room's worth of peers chains chunks, each one cache line, and a forgotten signal's
    /// chunks are taken again rather than new ones.
    #[test]
    fn a_rooms_worth_of_peers_chains_chunks_that_are_reused() {
        assert_eq!(size_of::<Chunk>(), 64);
        let mut passed = Passed::default();
        for round in 0..3u64 {
            for peer in 0..64 {
                assert!(passed.insert(round, 1, 2, peer));
            }
            for peer in (0..64).rev() {
                assert!(!passed.insert(round, 1, 2, peer));
            }
            assert_eq!(passed.ats().count(), 64);
            passed.forget_before(round + 1);
            assert_eq!(passed.ats().count(), 0);
        }
        assert_eq!(passed.chunks.len(), 64usize.div_ceil(CHUNK_PEERS));
    }
}
