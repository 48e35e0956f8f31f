//! The keys of the signal memory (§8), looked up from borrowed parts.
//!
//! The memory stores owned keys, but every copy of a flooded signal is looked up, and building
//! an owned key for each (two `String`s) cost more than the lookup. A table keyed by `K` can be
//! searched with any `Q` that `K` borrows as, ordered as `K` is; a tuple of `String`s cannot
//! borrow as a tuple of `&str`s, so each key shape here is a small trait whose trait object both
//! the owned and the borrowed key coerce to, compared by the same parts in the same order.
//!
//! A copy of a signal for this node is looked up by (origin, room) among every origin heard in
//! the window. Compared as texts, each step of that search read another origin's heap text (a
//! cache miss at ten thousand nodes) and compared the `did:key:zDn` every DID begins with again.
//! So an acted-on key leads with its origin's [`tag`], held in the key itself: the search
//! compares integers and reads texts only to confirm the key it found.
//!
//! An owned key holds its two texts in one shared allocation ([`Joined`]): its table holds each
//! key twice (by key and by expiry), and the copy shares the texts rather than copying them, so
//! remembering a signal makes one allocation, where two `String`s and their clones made four.
//! The key itself stays small (a pointer, a length and a split): the tables' lookups, on every
//! copy of a flooded signal, compare keys in place.

use alloc::string::String;
use alloc::sync::Arc;
use arrayvec::ArrayString;
use core::borrow::Borrow;
use core::cmp::Ordering;

/// How long two texts may be together and still be joined on the stack before their one
/// allocation (a DID and a room name are 89 bytes); longer ones are joined in a `String` first.
/// A tuning of stack space against a second allocation, no protocol value.
const JOIN_ON_STACK: usize = 128;

/// Two texts in one shared allocation, told apart by where the first ends.
#[derive(Clone, Debug)]
struct Joined {
    text: Arc<str>,
    split: usize,
}

impl Joined {
    fn new(first: &str, second: &str) -> Self {
        let mut both = ArrayString::<JOIN_ON_STACK>::new();
        let text: Arc<str> =
            if both.try_push_str(first).is_ok() && both.try_push_str(second).is_ok() {
                Arc::from(both.as_str())
            } else {
                let mut joined = String::with_capacity(first.len() + second.len());
                joined.push_str(first);
                joined.push_str(second);
                Arc::from(joined)
            };
        Self {
            text,
            split: first.len(),
        }
    }

    /// The two texts. `split` is the first's length, so a character boundary: `get` never
    /// fails, and an empty text stands in rather than a panic were it to.
    fn parts(&self) -> (&str, &str) {
        let first = self.text.get(..self.split).unwrap_or_default();
        let second = self.text.get(self.split..).unwrap_or_default();
        (first, second)
    }
}

/// The last 16 bytes of `origin` as an integer (zero-padded in front if shorter). A DID's tail
/// is random base58, where its head is the same for every P-256 key, so two origins nearly
/// always differ here; equal tags leave the texts to decide. The order it gives is internal:
/// neither table is iterated in key order for anything that leaves the node.
fn tag(origin: &str) -> u128 {
    let bytes = origin.as_bytes();
    if let Some(tail) = bytes.last_chunk::<16>() {
        return u128::from_be_bytes(*tail);
    }
    let mut tail = [0; 16];
    tail[16 - bytes.len()..].copy_from_slice(bytes);
    u128::from_be_bytes(tail)
}

/// An acted-on signal's key: (origin, room), with the origin's [`tag`].
#[derive(Clone, Debug)]
pub(crate) struct Acted {
    tag: u128,
    /// The origin, then the room.
    texts: Joined,
}

impl Acted {
    /// The key of `origin`'s signals in `room`.
    pub(crate) fn new(origin: &str, room: &str) -> Self {
        Self {
            tag: tag(origin),
            texts: Joined::new(origin, room),
        }
    }
}

/// An acted-on signal's key, borrowed: what a copy is looked up by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActedRef<'a> {
    tag: u128,
    origin: &'a str,
    room: &'a str,
}

impl<'a> ActedRef<'a> {
    /// The key of `origin`'s signals in `room`.
    pub(crate) fn new(origin: &'a str, room: &'a str) -> Self {
        Self {
            tag: tag(origin),
            origin,
            room,
        }
    }
}

/// A passed-on signal's key: (at, origin, room).
#[derive(Clone, Debug)]
pub(crate) struct Passed {
    at: u64,
    /// The origin, then the room.
    texts: Joined,
}

impl Passed {
    /// The key of `origin`'s signal sent `at` in `room`.
    pub(crate) fn new(at: u64, origin: &str, room: &str) -> Self {
        Self {
            at,
            texts: Joined::new(origin, room),
        }
    }
}

/// (origin, room), owned or borrowed.
pub(crate) trait ActedKey {
    /// The parts, in the order they are compared: the origin's tag, the origin, the room.
    fn parts(&self) -> (u128, &str, &str);
}

impl ActedKey for Acted {
    fn parts(&self) -> (u128, &str, &str) {
        let (origin, room) = self.texts.parts();
        (self.tag, origin, room)
    }
}

impl ActedKey for ActedRef<'_> {
    fn parts(&self) -> (u128, &str, &str) {
        (self.tag, self.origin, self.room)
    }
}

/// (at, origin, room), owned or borrowed.
pub(crate) trait PassedKey {
    /// The parts, in the order they are compared.
    fn parts(&self) -> (u64, &str, &str);
}

impl PassedKey for Passed {
    fn parts(&self) -> (u64, &str, &str) {
        let (origin, room) = self.texts.parts();
        (self.at, origin, room)
    }
}

impl PassedKey for (u64, &str, &str) {
    fn parts(&self) -> (u64, &str, &str) {
        *self
    }
}

/// Orders the owned key and the trait object by the same parts, field by field, and lets the
/// owned key borrow as the trait object (`Borrow` asks that both order alike).
macro_rules! by_parts {
    ($key:ident, $owned:ty) => {
        impl PartialEq for $owned {
            fn eq(&self, other: &Self) -> bool {
                $key::parts(self) == $key::parts(other)
            }
        }

        impl Eq for $owned {}

        impl PartialOrd for $owned {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $owned {
            fn cmp(&self, other: &Self) -> Ordering {
                $key::parts(self).cmp(&$key::parts(other))
            }
        }

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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    #[test]
    fn borrowed_keys_order_as_the_owned_keys_do() {
        // Short texts; long ones whose tails differ; long ones whose tails are equal (the
        // texts decide).
        let words = [
            "",
            "a",
            "ab",
            "b",
            "did:key:zDn",
            "did:key:zDo",
            "é",
            "did:key:zDnaeAAAAAAAAAAAAAAAAAAAz",
            "did:key:zDnaeAAAAAAAAAAAAAAAAAAAy",
            "did:key:zDnaaQQQQQQQQQQQQQQQQ",
            "did:key:zDnabQQQQQQQQQQQQQQQQ",
        ];
        let mut owned: Vec<(u64, String, String)> = Vec::new();
        let long = "did:key:zDn".repeat(12);
        for at in [0, 1, u64::MAX] {
            for o in words.iter().copied().chain([long.as_str()]) {
                for r in words {
                    owned.push((at, o.into(), r.into()));
                }
            }
        }
        for x in &owned {
            for y in &owned {
                let (bx, by) = ((x.0, x.1.as_str(), x.2.as_str()), (y.0, &*y.1, &*y.2));
                let (dx, dy): (&dyn PassedKey, &dyn PassedKey) = (&bx, &by);
                // The tuple of texts is the order the owned key keeps, joined on the stack or not.
                let (px, py) = (Passed::new(x.0, &x.1, &x.2), Passed::new(y.0, &y.1, &y.2));
                assert_eq!(px.cmp(&py), x.cmp(y));
                assert_eq!(px == py, x == y);
                assert_eq!(dx.cmp(dy), x.cmp(y));
                assert_eq!(Borrow::<dyn PassedKey>::borrow(&px).cmp(dy), x.cmp(y));
                let (ax, ay) = (Acted::new(&x.1, &x.2), Acted::new(&y.1, &y.2));
                let (ex, ey) = (ActedRef::new(&x.1, &x.2), ActedRef::new(&y.1, &y.2));
                let (dx, dy): (&dyn ActedKey, &dyn ActedKey) = (&ex, &ey);
                assert_eq!(dx.cmp(dy), ax.cmp(&ay));
                assert_eq!(dx == dy, ax == ay);
                // Keys are equal exactly when their texts are, whatever the tags.
                assert_eq!(ax == ay, (&x.1, &x.2) == (&y.1, &y.2));
                assert_eq!(Borrow::<dyn ActedKey>::borrow(&ax).cmp(dy), ax.cmp(&ay));
                // The order is total: reversed, it is the reverse.
                assert_eq!(ay.cmp(&ax), ax.cmp(&ay).reverse());
            }
        }
    }
}
