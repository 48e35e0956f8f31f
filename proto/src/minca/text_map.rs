//! A table keyed by short texts: the mesh's and the rendezvous' peers by DID, their rooms by name
//! or topic (Minca §2, §7).
//!
//! DIDs are 57 characters that all begin `did:key:zDn`; room names 32 and topics 43 characters
//! of random-looking text. Searched as heap `String`s in a B-tree, every comparison of a lookup
//! reads another key's heap text (a cache miss at a thousand nodes) and, for DIDs, compares the
//! shared prefix again. A [`TextMap`] also holds each key's first [`HEAD_BYTES`] as one integer
//! that orders as those bytes do, so a search compares integers within one small array and reads
//! a key's text only on a tie: the key it finds, most often. That text is held in the entry
//! itself up to [`INLINE_BYTES`], so confirming the key found reads the line the entry's value is
//! on, not one more heap allocation.

use alloc::string::String;
use alloc::vec::Vec;
use arrayvec::{ArrayString, ArrayVec};
use core::cmp::Ordering;

/// The bytes of a key a [`TextMap`] compares as one integer: for a DID `did:key:zDn` and five
/// more characters of base58, which tell a few hundred peers apart on all but a handful of ties
/// (each only a text comparison).
pub(crate) const HEAD_BYTES: usize = 16;

/// The longest key a [`TextMap`] holds in its entry rather than on the heap: a P-256 did:key
/// is 57 bytes, an Ed25519 one 56, a topic 43. A tuning of about 48 bytes an entry against one cache miss a
/// lookup, no protocol value: longer texts (up to what a table's owner accepts) work the same.
pub(crate) const INLINE_BYTES: usize = 64;

/// How many heads a [`TextMap`] holds in its own memory before it moves them to the heap: a
/// room's peers at a meetup, a node's few rooms and connections. A tuning of 256 bytes a table
/// against one cache miss a lookup (the table itself sits in its owner's memory, most often on
/// a line the lookup has just read), no protocol value.
pub(crate) const INLINE_HEADS: usize = 16;

/// A key's text (a DID's, most often) as a table holds it: in the table's own memory up to
/// [`INLINE_BYTES`], on the heap beyond.
#[derive(Clone, Debug)]
pub(crate) enum KeyText {
    Inline(ArrayString<INLINE_BYTES>),
    Heap(String),
}

impl KeyText {
    /// `did`'s text, inline if it fits.
    pub(crate) fn new(did: impl Into<String> + AsRef<str>) -> Self {
        match ArrayString::from(did.as_ref()) {
            Ok(inline) => KeyText::Inline(inline),
            Err(_) => KeyText::Heap(did.into()),
        }
    }

    /// The text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            KeyText::Inline(s) => s.as_str(),
            KeyText::Heap(s) => s.as_str(),
        }
    }
}

/// The first [`HEAD_BYTES`] of `text` as a big-endian integer, zero-padded. Integers that differ
/// order as the texts do (a text that ends inside the head is a prefix of the other up to the
/// first difference, and sorts first); equal integers say nothing, and the texts decide.
fn head(text: &str) -> u128 {
    // Every DID, topic and room name is longer than the head: one load, no copy.
    if let Some(bytes) = text.as_bytes().first_chunk::<HEAD_BYTES>() {
        return u128::from_be_bytes(*bytes);
    }
    let mut bytes = [0; HEAD_BYTES];
    let n = text.len().min(HEAD_BYTES);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    u128::from_be_bytes(bytes)
}

/// The heads of a [`TextMap`]'s entries, in the table's own memory up to [`INLINE_HEADS`], then
/// on the heap (and there to stay: a table that grew once is likely to again).
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "the inline heads are the point: boxing them is the miss they save"
)]
enum Heads {
    Inline(ArrayVec<u128, INLINE_HEADS>),
    Heap(Vec<u128>),
}

impl Heads {
    fn as_slice(&self) -> &[u128] {
        match self {
            Heads::Inline(heads) => heads,
            Heads::Heap(heads) => heads,
        }
    }

    fn insert(&mut self, i: usize, head: u128) {
        match self {
            Heads::Inline(heads) if heads.is_full() => {
                let mut moved = Vec::with_capacity(2 * INLINE_HEADS);
                moved.extend_from_slice(heads);
                moved.insert(i, head);
                *self = Heads::Heap(moved);
            }
            Heads::Inline(heads) => heads.insert(i, head),
            Heads::Heap(heads) => heads.insert(i, head),
        }
    }

    fn remove(&mut self, i: usize) {
        match self {
            Heads::Inline(heads) => drop(heads.remove(i)),
            Heads::Heap(heads) => drop(heads.remove(i)),
        }
    }
}

/// A table keyed by texts (DIDs, most often), iterated in the texts' order, as a
/// `BTreeMap<String, V>` is: the order a room's peers are flooded to.
///
/// Two sorted arrays: the heads, scanned in one small array (in the table's own memory while
/// there are few), and the entries. An insertion or removal moves the entries after it, so the
/// table is for bounded tables (a room's 64 peers, the mesh's 256 connections, a node's 128
/// rooms), which are looked up far more often than changed.
#[derive(Clone, Debug)]
pub(crate) struct TextMap<V> {
    /// `head` of each entry's DID, in the entries' order.
    heads: Heads,
    /// The entries, in DID order.
    entries: Vec<(KeyText, V)>,
}

impl<V> Default for TextMap<V> {
    fn default() -> Self {
        Self {
            heads: Heads::Inline(ArrayVec::new()),
            entries: Vec::new(),
        }
    }
}

impl<V> TextMap<V> {
    /// The index of `did`'s entry, or where it would go.
    fn find(&self, did: &str) -> Result<usize, usize> {
        let h = head(did);
        // A scan rather than a bisection: the heads are read in order, as the prefetcher
        // expects, and the loop's one exit is predicted, where each step of a bisection over
        // random DIDs is a coin toss.
        let heads = self.heads.as_slice();
        let mut i = heads.iter().position(|&x| x >= h).unwrap_or(heads.len());
        // Entries that share the head follow in text order.
        while let (Some(&x), Some((text, _))) = (heads.get(i), self.entries.get(i))
            && x == h
        {
            match text.as_str().cmp(did) {
                Ordering::Less => i += 1,
                Ordering::Equal => return Ok(i),
                Ordering::Greater => break,
            }
        }
        Err(i)
    }

    /// The entry of `did`.
    pub(crate) fn get(&self, did: &str) -> Option<&V> {
        let i = self.find(did).ok()?;
        self.entries.get(i).map(|(_, v)| v)
    }

    /// The entry of `did`, to change.
    pub(crate) fn get_mut(&mut self, did: &str) -> Option<&mut V> {
        let i = self.find(did).ok()?;
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    /// Whether `did` has an entry.
    pub(crate) fn contains_key(&self, did: &str) -> bool {
        self.find(did).is_ok()
    }

    /// Sets the entry of `did`, returning the one it replaced.
    pub(crate) fn insert(&mut self, did: impl Into<String> + AsRef<str>, value: V) -> Option<V> {
        match self.find(did.as_ref()) {
            Ok(i) => self
                .entries
                .get_mut(i)
                .map(|(_, v)| core::mem::replace(v, value)),
            Err(i) => {
                self.heads.insert(i, head(did.as_ref()));
                self.entries.insert(i, (KeyText::new(did), value));
                None
            }
        }
    }

    /// The entry of `did`, made by `make` if there was none, and whether it was made: one search
    /// where a lookup and an insertion would take two.
    pub(crate) fn get_or_insert_with(
        &mut self,
        did: &str,
        make: impl FnOnce() -> V,
    ) -> (&mut V, bool) {
        let (i, made) = match self.find(did) {
            Ok(i) => (i, false),
            Err(i) => {
                self.heads.insert(i, head(did));
                self.entries.insert(i, (KeyText::new(did), make()));
                (i, true)
            }
        };
        // `i` is in bounds: found, or just inserted there.
        let (_, v) = &mut self.entries[i];
        (v, made)
    }

    /// Keeps only the entries `keep` says to, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        let mut i = 0;
        while let Some((d, v)) = self.entries.get_mut(i) {
            if keep(d.as_str(), v) {
                i += 1;
            } else {
                self.heads.remove(i);
                self.entries.remove(i);
            }
        }
    }

    /// Removes the entry of `did`.
    pub(crate) fn remove(&mut self, did: &str) -> Option<V> {
        let i = self.find(did).ok()?;
        self.heads.remove(i);
        Some(self.entries.remove(i).1)
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, in DID order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|(d, v)| (d.as_str(), v))
    }

    /// The entries, in DID order, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        self.entries.iter_mut().map(|(d, v)| (d.as_str(), v))
    }

    /// The entries in DID order, but `did`'s: found once, rather than compared with each.
    pub(crate) fn iter_but(&self, did: Option<&str>) -> impl Iterator<Item = (&str, &V)> {
        let skip = did.and_then(|d| self.find(d).ok());
        self.entries
            .iter()
            .enumerate()
            .filter(move |(i, _)| Some(*i) != skip)
            .map(|(_, (d, v))| (d.as_str(), v))
    }

    /// The DIDs, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(d, _)| d.as_str())
    }

    /// The values, in DID order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn a_did_map_lists_in_text_order_whatever_the_heads() {
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
            "did:key:zDnaeAAAAa",
            "did:key:zDnaf",
            "did:key:zDo",
            "é",
            "\u{10FFFF}",
        ];
        let mut sorted = texts.to_vec();
        sorted.sort_unstable();
        // Inserted forwards and backwards: each finds its place among ties on the head.
        for order in [texts.to_vec(), texts.iter().rev().copied().collect()] {
            let mut m = TextMap::default();
            for t in &order {
                assert_eq!(m.insert(*t, t.len()), None);
            }
            assert_eq!(m.keys().collect::<Vec<_>>(), sorted);
            for t in texts {
                assert_eq!(m.get(t), Some(&t.len()), "{t:?}");
            }
            assert!(!m.contains_key("did:key:zDnaeAAA"));
            assert!(!m.contains_key("did:key:zDnaeAAAAb"));
        }
    }

    #[test]
    fn a_text_longer_than_an_entry_holds_is_kept_on_the_heap_and_found_the_same() {
        let short = "did:key:zDnaeShort";
        let at_bound = "d".repeat(INLINE_BYTES);
        let long = "d".repeat(INLINE_BYTES + 1);
        let longer = format!("{long}z");
        let mut m = TextMap::default();
        for (i, t) in [short, &longer, &at_bound, &long].into_iter().enumerate() {
            assert_eq!(m.insert(t, i), None);
        }
        let held: Vec<bool> = m
            .entries
            .iter()
            .map(|(k, _)| matches!(k, KeyText::Inline(_)))
            .collect();
        // In text order: 64 `d`s, 65, 65 and a `z`, then the DID.
        assert_eq!(held, [true, false, false, true]);
        assert_eq!(m.get(&long), Some(&3));
        assert_eq!(m.get(&longer), Some(&1));
        assert_eq!(m.get(&at_bound), Some(&2));
        assert_eq!(m.remove(&long), Some(3));
        assert_eq!(m.keys().collect::<Vec<_>>(), [&at_bound, &longer, short]);
    }

    #[test]
    fn a_did_map_finds_removes_and_lists_in_text_order() {
        let mut m = TextMap::default();
        let dids = [
            "did:key:zDnaeB",
            "did:key:zDnaeA2",
            "did:key:zDnaeA1",
            "x",
            "",
        ];
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
        assert_eq!(m.values().sum::<usize>(), 12);
        assert_eq!(m.iter().next(), Some(("did:key:zDnaeA1", &2)));
        let but = |d| m.iter_but(d).map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            but(Some("did:key:zDnaeA2")),
            ["did:key:zDnaeA1", "did:key:zDnaeB", "x"]
        );
        assert_eq!(but(Some("y")), but(None));
        assert_eq!(but(None), m.keys().collect::<Vec<_>>());
        let (v, made) = m.get_or_insert_with("did:key:zDnaeA0", || 7);
        assert_eq!((*v, made), (7, true));
        *v += 1;
        assert_eq!(
            m.get_or_insert_with("did:key:zDnaeA0", || 0),
            (&mut 8, false)
        );
        m.retain(|d, v| d != "x" && *v != 2);
        let kept = ["did:key:zDnaeA0", "did:key:zDnaeA2", "did:key:zDnaeB"];
        assert_eq!(m.keys().collect::<Vec<_>>(), kept);
        assert_eq!(m.get("did:key:zDnaeB"), Some(&0));
    }

    /// Past [`INLINE_HEADS`] entries the heads move to the heap; insertions and removals on
    /// either side of the move keep the table a `BTreeMap`'s equal.
    #[test]
    fn a_table_that_outgrows_its_inline_heads_answers_as_a_btree_map_does() {
        use alloc::collections::BTreeMap;
        use alloc::string::ToString;
        let mut m = TextMap::default();
        let mut model = BTreeMap::new();
        // A fixed stride through 0..97 visits every number once, in a scrambled order; DIDs
        // that share their head with others, and short texts that do not.
        let key = |n: usize| match n % 3 {
            0 => format!("did:key:zDnae{n:03}"),
            1 => format!("did:key:zDnaeSameHeadAlways{n}"),
            _ => n.to_string(),
        };
        for step in 0..3 * INLINE_HEADS {
            let n = step * 37 % 97;
            assert_eq!(m.insert(key(n), n), model.insert(key(n), n));
            if step % 5 == 4 {
                let gone = key(step * 11 % 97);
                assert_eq!(m.remove(&gone), model.remove(&gone));
            }
            assert_eq!(m.len(), model.len());
            assert!(m.keys().eq(model.keys().map(String::as_str)));
            for n in 0..97 {
                assert_eq!(m.get(&key(n)), model.get(&key(n)), "{}", key(n));
            }
        }
        assert!(matches!(m.heads, Heads::Heap(_)));
        m.retain(|_, v| *v % 2 == 0);
        model.retain(|_, v| *v % 2 == 0);
        assert!(m.iter().eq(model.iter().map(|(k, v)| (k.as_str(), v))));
    }
}
