//! The open streams (relay sockets, peer connections), by id.
//!
//! Every message a node or relay sends looks its stream up. Stream ids are handed out in order
//! from 0, so the streams sit in a vector at their id: one indexed load where a hash map probed
//! its control bytes and then its entry, two cache misses in a large run; and walking them in id
//! order, as the faults do so that a run depends only on its seed, needs no sort. The vector
//! keeps a slot for every stream ever opened (72 to 80 bytes each: 1.4 MiB for the 19 829
//! peer connections of a 1 000-node run), where the map kept only the open ones.

/// Open streams by id; see the [module docs](self).
#[derive(Debug)]
pub(super) struct ById<T> {
    by_id: Vec<Option<T>>,
    open: usize,
}

impl<T> Default for ById<T> {
    fn default() -> Self {
        Self {
            by_id: Vec::new(),
            open: 0,
        }
    }
}

impl<T> ById<T> {
    /// Opens `link` as `id` (replacing any open under it).
    pub(super) fn insert(&mut self, id: u64, link: T) {
        let Ok(at) = usize::try_from(id) else {
            // Ids count the streams opened, so one past the address space never comes.
            return;
        };
        if at >= self.by_id.len() {
            self.by_id.resize_with(at + 1, || None);
        }
        if self.by_id[at].replace(link).is_none() {
            self.open += 1;
        }
    }

    /// The stream open as `id`.
    pub(super) fn get(&self, id: u64) -> Option<&T> {
        self.by_id.get(usize::try_from(id).ok()?)?.as_ref()
    }

    /// Starts bringing `id`'s slot into the cache, so a [`ById::get`] soon after need not
    /// wait for it.
    pub(super) fn prefetch(&self, id: u64) {
        if let Some(slot) = usize::try_from(id).ok().and_then(|at| self.by_id.get(at)) {
            crate::prefetch::prefetch(slot);
        }
    }

    /// The stream open as `id`, to change.
    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.by_id.get_mut(usize::try_from(id).ok()?)?.as_mut()
    }

    /// Closes the stream open as `id`, answering it.
    pub(super) fn remove(&mut self, id: u64) -> Option<T> {
        let link = self.by_id.get_mut(usize::try_from(id).ok()?)?.take()?;
        self.open -= 1;
        Some(link)
    }

    /// How many are open.
    pub(super) fn len(&self) -> usize {
        self.open
    }

    /// Whether none is open.
    pub(super) fn is_empty(&self) -> bool {
        self.open == 0
    }

    /// The ids of the open streams that `keep`s, in id order.
    pub(super) fn ids(&self, keep: impl Fn(&T) -> bool) -> Vec<u64> {
        (0..)
            .zip(&self.by_id)
            .filter_map(|(id, link)| link.as_ref().filter(|l| keep(l)).map(|_| id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand_core::Rng as _;

    use super::*;

    /// Against a B-tree of the same ids: the same answers to every lookup, count and walk.
    #[test]
    fn by_id_is_a_map_by_id() {
        let mut rng = crate::stream(0x11c5, 2);
        let mut links = ById::default();
        let mut map = BTreeMap::new();
        for step in 0..5_000u64 {
            let r = rng.next_u64();
            let id = r % 300;
            match r >> 60 {
                0..=5 => {
                    links.insert(id, step);
                    map.insert(id, step);
                }
                6..=10 => assert_eq!(links.remove(id), map.remove(&id)),
                _ => {
                    if let Some(l) = links.get_mut(id) {
                        *l += 1;
                    }
                    if let Some(l) = map.get_mut(&id) {
                        *l += 1;
                    }
                }
            }
            assert_eq!(links.get(id), map.get(&id));
            assert_eq!(links.len(), map.len());
            let odd: Vec<u64> = map
                .iter()
                .filter(|(_, v)| *v % 2 == 1)
                .map(|(k, _)| *k)
                .collect();
            assert_eq!(links.ids(|v| v % 2 == 1), odd);
        }
        assert_eq!(links.get(u64::MAX), None);
        assert_eq!(links.remove(u64::MAX), None);
    }
}
