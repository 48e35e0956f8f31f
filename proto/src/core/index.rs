//! Indexes of sets by key, as the machines keep beside their tables so that one input reads
//! only its own entries.

use alloc::collections::{BTreeMap, BTreeSet};
use core::borrow::Borrow;

/// Removes `item` from the set held under `key`, and the key once its set is empty: an index
/// keeps no key that names nothing, so it does not grow with keys no longer used.
pub fn remove_from_set<K, Q, T>(map: &mut BTreeMap<K, BTreeSet<T>>, key: &Q, item: &T)
where
    K: Borrow<Q> + Ord,
    Q: Ord + ?Sized,
    T: Ord,
{
    if let Some(set) = map.get_mut(key) {
        set.remove(item);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_item_taken_takes_its_key() {
        let mut map: BTreeMap<&str, BTreeSet<u8>> = BTreeMap::new();
        map.entry("a").or_default().extend([1, 2]);
        remove_from_set(&mut map, "a", &1);
        assert_eq!(map["a"], BTreeSet::from([2]));
        remove_from_set(&mut map, "a", &3);
        remove_from_set(&mut map, "b", &2);
        assert_eq!(map.len(), 1);
        remove_from_set(&mut map, "a", &2);
        assert!(map.is_empty());
    }
}
