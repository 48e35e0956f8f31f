//! The keys of the signal memory (§8), looked up from borrowed parts.
//!
//! The memory stores owned keys, but every copy of a flooded signal is looked up, and building
//! an owned key for each (two `String`s) cost more than the lookup. A table keyed by `K` can be
//! searched with any `Q` that `K` borrows as, ordered as `K` is; a tuple of `String`s cannot
//! borrow as a tuple of `&str`s, so each key shape here is a small trait whose trait object both
//! the owned and the borrowed tuple coerce to, compared by the same parts in the same order.

use alloc::string::String;
use core::borrow::Borrow;
use core::cmp::Ordering;

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
}
