//! Table keys looked up from borrowed parts: the signal memory's (§8) and the DID tables'.
//!
//! The memory stores owned keys, but every copy of a flooded signal is looked up, and building
//! an owned key for each (two `String`s) cost more than the lookup. A table keyed by `K` can be
//! searched with any `Q` that `K` borrows as, ordered as `K` is; a tuple of `String`s cannot
//! borrow as a tuple of `&str`s, so each key shape here is a small trait whose trait object both
//! the owned and the borrowed tuple coerce to, compared by the same parts in the same order.
//!
//! The mesh's tables of peers ([`DidMap`]) are keyed by DIDs: 57 characters that all begin
//! `did:key:zDn`, held on the heap. Searched as `String`s, every comparison of a lookup reads
//! another key's heap text (a cache miss at a thousand nodes) and compares the shared prefix
//! again. A [`Did`] key also holds its first [`HEAD_BYTES`] inline as one integer that orders as
//! those bytes do, so a search compares integers within the tree's nodes and reads a key's text
//! only on a tie: for DIDs, the key it finds.

use alloc::collections::BTreeMap;
use alloc::string::String;
use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;

/// An acted-on signal's key: (origin, room).
pub(crate) type Acted = (String, String);

/// A passed-on signal's key: (at, origin, room).
pub(crate) type Passed = (u64, String, String);

/// (origin, room), owned or borrowed.
pub(crate) trait ActedKey {
    /// The parts, in the owned tuple's order.
    fn parts(&self) -> (&str, &str);
}

impl ActedKey for Acted {
    fn parts(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl ActedKey for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        *self
    }
}

/// (at, origin, room), owned or borrowed.
pub(crate) trait PassedKey {
    /// The parts, in the owned tuple's order.
    fn parts(&self) -> (u64, &str, &str);
}

impl PassedKey for Passed {
    fn parts(&self) -> (u64, &str, &str) {
        (self.0, &self.1, &self.2)
    }
}

impl PassedKey for (u64, &str, &str) {
    fn parts(&self) -> (u64, &str, &str) {
        *self
    }
}

/// Orders the trait object by its parts (as the owned tuple orders, field by field) and lets the
/// owned key borrow as it.
macro_rules! by_parts {
    ($key:ident, $owned:ty) => {
        impl<'a> Borrow<dyn $key + 'a> for $owned {
            fn borrow(&self) -> &(dyn $key + 'a) {
                self
            }
        }

        impl PartialEq for dyn $key + '_ {
            fn eq(&self, other: &Self) -> bool {
                self.parts() == other.parts()
            }
        }

        impl Eq for dyn $key + '_ {}

        impl PartialOrd for dyn $key + '_ {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for dyn $key + '_ {
            fn cmp(&self, other: &Self) -> Ordering {
                self.parts().cmp(&other.parts())
            }
        }
    };
}

by_parts!(ActedKey, Acted);
by_parts!(PassedKey, Passed);
by_parts!(DidKey, Did);

/// The bytes of a [`Did`] held inline: `did:key:zDn` and five more characters of base58, which
/// tell a few hundred peers apart on all but a handful of ties (each only a text comparison).
pub(crate) const HEAD_BYTES: usize = 16;

/// The first [`HEAD_BYTES`] of `text` as a big-endian integer, zero-padded. Integers that differ
/// order as the texts do (a text that ends inside the head is a prefix of the other up to the
/// first difference, and sorts first); equal integers say nothing, and the texts decide.
fn head(text: &str) -> u128 {
    let mut bytes = [0; HEAD_BYTES];
    let n = text.len().min(HEAD_BYTES);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    u128::from_be_bytes(bytes)
}

/// An owned DID as a table key: ordered and compared exactly as its text.
#[derive(Clone)]
pub(crate) struct Did {
    head: u128,
    text: String,
}

impl Did {
    fn new(text: String) -> Self {
        Self {
            head: head(&text),
            text,
        }
    }
}

impl fmt::Debug for Did {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl PartialEq for Did {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Did {}

impl PartialOrd for Did {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Did {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// (head, text), owned or borrowed.
pub(crate) trait DidKey {
    /// The head and the whole text.
    fn parts(&self) -> (u128, &str);
}

impl DidKey for Did {
    fn parts(&self) -> (u128, &str) {
        (self.head, &self.text)
    }
}

impl DidKey for (u128, &str) {
    fn parts(&self) -> (u128, &str) {
        *self
    }
}

/// A table keyed by DIDs (any text is accepted), iterated in the texts' order, as a
/// `BTreeMap<String, V>` is: the order a room's peers are flooded to.
#[derive(Clone, Debug)]
pub(crate) struct DidMap<V>(BTreeMap<Did, V>);

impl<V> Default for DidMap<V> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

/// The borrowed key of `text`, for a lookup.
fn probe(text: &str) -> (u128, &str) {
    (head(text), text)
}

impl<V> DidMap<V> {
    /// The entry of `did`.
    pub(crate) fn get(&self, did: &str) -> Option<&V> {
        self.0.get(&probe(did) as &dyn DidKey)
    }

    /// The entry of `did`, to change.
    pub(crate) fn get_mut(&mut self, did: &str) -> Option<&mut V> {
        self.0.get_mut(&probe(did) as &dyn DidKey)
    }

    /// Whether `did` has an entry.
    pub(crate) fn contains_key(&self, did: &str) -> bool {
        self.get(did).is_some()
    }

    /// Sets the entry of `did`, returning the one it replaced.
    pub(crate) fn insert(&mut self, did: impl Into<String>, value: V) -> Option<V> {
        self.0.insert(Did::new(did.into()), value)
    }

    /// Removes the entry of `did`.
    pub(crate) fn remove(&mut self, did: &str) -> Option<V> {
        self.0.remove(&probe(did) as &dyn DidKey)
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The entries, in DID order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(d, v)| (d.text.as_str(), v))
    }

    /// The DIDs, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(|d| d.text.as_str())
    }

    /// The values, in DID order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.0.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn borrowed_keys_order_as_the_owned_keys_do() {
        let words = ["", "a", "ab", "b", "did:key:zDn", "did:key:zDo", "é"];
        let mut owned: Vec<Passed> = Vec::new();
        for at in [0, 1, u64::MAX] {
            for o in words {
                for r in words {
                    owned.push((at, o.into(), r.into()));
                }
            }
        }
        for x in &owned {
            for y in &owned {
                let (bx, by) = ((x.0, x.1.as_str(), x.2.as_str()), (y.0, &*y.1, &*y.2));
                let (dx, dy): (&dyn PassedKey, &dyn PassedKey) = (&bx, &by);
                assert_eq!(dx.cmp(dy), x.cmp(y));
                assert_eq!(Borrow::<dyn PassedKey>::borrow(x).cmp(dy), x.cmp(y));
                let (ax, ay): (Acted, Acted) =
                    ((x.1.clone(), x.2.clone()), (y.1.clone(), y.2.clone()));
                let (ex, ey) = ((ax.0.as_str(), ax.1.as_str()), (&*ay.0, &*ay.1));
                let (dx, dy): (&dyn ActedKey, &dyn ActedKey) = (&ex, &ey);
                assert_eq!(dx.cmp(dy), ax.cmp(&ay));
                assert_eq!(dx == dy, ax == ay);
                assert_eq!(Borrow::<dyn ActedKey>::borrow(&ax).cmp(dy), ax.cmp(&ay));
            }
        }
    }

    #[test]
    fn did_keys_order_and_compare_as_their_texts() {
        let texts = [
            "",
            "a",
            "a\0",
            "a\0b",
            "did:key:zDn",
            "did:key:zDnaeAAAA",
            "did:key:zDnaeAAAA\0",
            "did:key:zDnaeAAAB",
            "did:key:zDnaeAAAAz",
            "did:key:zDnaf",
            "did:key:zDo",
            "é",
            "\u{10FFFF}",
        ];
        for x in texts {
            for y in texts {
                let (dx, dy) = (Did::new(x.into()), Did::new(y.into()));
                assert_eq!(dx.cmp(&dy), x.cmp(y), "{x:?} {y:?}");
                assert_eq!(dx == dy, x == y);
                let (px, py) = (probe(x), probe(y));
                let (bx, by): (&dyn DidKey, &dyn DidKey) = (&px, &py);
                assert_eq!(bx.cmp(by), x.cmp(y));
                assert_eq!(Borrow::<dyn DidKey>::borrow(&dx).cmp(by), x.cmp(y));
            }
        }
    }

    #[test]
    fn a_did_map_finds_removes_and_lists_in_text_order() {
        let mut m = DidMap::default();
        let dids = ["did:key:zDnaeB", "did:key:zDnaeA2", "did:key:zDnaeA1", "x", ""];
        for (i, d) in dids.iter().enumerate() {
            assert_eq!(m.insert(*d, i), None);
        }
        assert_eq!(m.insert("x", 9), Some(3));
        let mut sorted = dids.to_vec();
        sorted.sort_unstable();
        assert_eq!(m.keys().collect::<Vec<_>>(), sorted);
        assert_eq!(m.get("did:key:zDnaeA1"), Some(&2));
        assert_eq!(m.get("did:key:zDnaeA"), None);
        *m.get_mut("").unwrap() += 10;
        assert_eq!(m.remove(""), Some(14));
        assert!(!m.contains_key(""));
        assert_eq!(m.len(), 4);
        assert_eq!(m.values().sum::<usize>(), 1 + 2 + 0 + 9);
        assert_eq!(m.iter().next(), Some(("did:key:zDnaeA1", &2)));
    }
}
