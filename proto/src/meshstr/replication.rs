//! Replication set rules (meshstr §5): which events are in a shard's fingerprint set, in which
//! order they are enumerated, and which kinds never cross in bulk.
//!
//! Two implementations that disagree on membership compute NIP-77 correctly and never converge,
//! so every rule is a pure function: ephemeral kinds are never stored; replaceable and
//! addressable kinds keep the winner (later `created_at`, then the lower id); a NIP-09 deletion
//! removes only its own author's events, binds before its target arrives, and so records the key
//! that asked; an event past its NIP-40 expiration is out; `since`/`until` intersect, never widen;
//! enumeration is `created_at` ascending, then id ascending.

use alloc::collections::BTreeSet;
use alloc::string::String;
use core::cmp::Ordering;

use super::events::{KindClass, kind_class};
use crate::core::Timestamp;
use crate::nostr::Event;

/// NIP-46 signer traffic: never replicated, on any transport, under any grant.
pub const NIP46_KIND: u16 = 24133;
/// NIP-59 gift wrap: replicated only to nodes in the recipient's own kind 10050 list.
pub const GIFT_WRAP_KIND: u16 = 1059;
/// NIP-09 deletion.
pub const DELETION_KIND: u16 = 5;

/// Whether an event of `kind` is ever stored (ephemeral kinds are not).
pub fn stored(kind: u16) -> bool {
    kind_class(kind) != KindClass::Ephemeral
}

/// Whether `kind` may cross in bulk replication (a filter-driven sync): never 24133, never 1059.
pub fn bulk_replicable(kind: u16) -> bool {
    stored(kind) && kind != NIP46_KIND && kind != GIFT_WRAP_KIND
}

/// Whether a gift wrap may go to the node at `node_relay_url`: only if the recipient's own kind
/// 10050 relay list names it, and never on a filter a third party supplied.
pub fn gift_wrap_may_go(
    recipient_10050: &[&str],
    node_relay_url: &str,
    third_party_filter: bool,
) -> bool {
    !third_party_filter && recipient_10050.contains(&node_relay_url)
}

/// Of two versions of one replaceable or addressable event, whether `a` wins over `b`: later
/// `created_at`, and on a tie the lexicographically lower id.
pub fn wins(a: &Event, b: &Event) -> bool {
    match a.created_at.cmp(&b.created_at) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => a.id < b.id,
    }
}

/// The enumeration order of a set: `created_at` ascending, then id ascending.
pub fn enumeration_order(a: &Event, b: &Event) -> Ordering {
    a.created_at
        .cmp(&b.created_at)
        .then_with(|| a.id.cmp(&b.id))
}

/// The replacement coordinate of an event, if its kind has one: `(kind, pubkey, d)`.
pub fn coordinate(e: &Event) -> Option<(u16, [u8; 32], String)> {
    match kind_class(e.kind) {
        KindClass::Replaceable => Some((e.kind, e.pubkey, String::new())),
        KindClass::Addressable => Some((e.kind, e.pubkey, e.tag_value("d").unwrap_or("").into())),
        _ => None,
    }
}

/// `since`/`until` intersected: the later `since` and the earlier `until`. Never wider than
/// either.
pub fn intersect(
    a: (Option<u64>, Option<u64>),
    b: (Option<u64>, Option<u64>),
) -> (Option<u64>, Option<u64>) {
    let since = match (a.0, b.0) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let until = match (a.1, b.1) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    (since, until)
}

/// The most tombstones a store keeps (not in the text, docs/decisions.md); past it a new
/// deletion is refused and counted rather than an old one forgotten, since forgetting one would
/// let its target back into the set.
pub const MAX_TOMBSTONES: usize = 1_000_000;

/// NIP-09 tombstones: each records the target id and the key that asked, so a deletion that
/// arrives before its target still binds, and the authority check happens when the target does.
#[derive(Clone, Debug, Default)]
pub struct Tombstones {
    set: BTreeSet<([u8; 32], [u8; 32])>,
    refused: u64,
}

impl Tombstones {
    /// Records a deletion event's `e` targets under its author. Returns how many were recorded.
    pub fn record(&mut self, deletion: &Event) -> usize {
        if deletion.kind != DELETION_KIND {
            return 0;
        }
        let mut n = 0;
        for t in &deletion.tags {
            if t.len() >= 2 && t[0] == "e" {
                let Some(id) = super::lower_hex::<32>(&t[1]) else {
                    continue;
                };
                if self.set.len() >= MAX_TOMBSTONES {
                    self.refused += 1;
                    continue;
                }
                if self.set.insert((id, deletion.pubkey)) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Whether `e` is deleted: a tombstone for its id asked by its own author. A deletion by
    /// anyone else removes nothing.
    pub fn deletes(&self, e: &Event) -> bool {
        self.set.contains(&(e.id, e.pubkey))
    }

    /// Deletions refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// Whether `e` is in the set at `now` under a range `(since, until)`: stored, not deleted by its
/// author, not expired, and inside the range. (Replaceable winners are chosen by [`wins`].)
pub fn in_set(
    e: &Event,
    tombstones: &Tombstones,
    now: Timestamp,
    range: (Option<u64>, Option<u64>),
) -> bool {
    stored(e.kind)
        && !tombstones.deletes(e)
        && !crate::nostr::expiration::is_expired(e, now)
        && range.0.is_none_or(|s| e.created_at >= s)
        && range.1.is_none_or(|u| e.created_at <= u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn ev(kind: u16, created_at: u64, id: u8, author: u8) -> Event {
        Event {
            id: [id; 32],
            pubkey: [author; 32],
            created_at,
            kind,
            tags: vec![],
            content: String::new(),
            sig: [0; 64],
        }
    }

    #[test]
    fn ephemeral_and_two_kinds_never_cross() {
        assert!(!stored(21801));
        assert!(!stored(20000));
        assert!(stored(30803));
        assert!(!bulk_replicable(NIP46_KIND));
        assert!(!bulk_replicable(GIFT_WRAP_KIND));
        assert!(bulk_replicable(1));
        assert!(gift_wrap_may_go(&["wss://a"], "wss://a", false));
        assert!(!gift_wrap_may_go(&["wss://a"], "wss://b", false));
        assert!(!gift_wrap_may_go(&["wss://a"], "wss://a", true));
    }

    #[test]
    fn the_winner_is_later_then_lower_id() {
        let a = ev(11801, 10, 9, 1);
        let b = ev(11801, 11, 9, 1);
        assert!(wins(&b, &a) && !wins(&a, &b));
        let c = ev(11801, 11, 1, 1);
        assert!(wins(&c, &b) && !wins(&b, &c));
    }

    #[test]
    fn enumeration_is_created_at_then_id() {
        let mut v = [ev(1, 5, 3, 1), ev(1, 4, 9, 1), ev(1, 5, 1, 1)];
        v.sort_by(enumeration_order);
        let got: Vec<_> = v.iter().map(|e| (e.created_at, e.id[0])).collect();
        assert_eq!(got, vec![(4, 9), (5, 1), (5, 3)]);
    }

    #[test]
    fn a_deletion_binds_before_its_target_and_only_for_its_author() {
        let target = ev(1, 10, 7, 1);
        let mut del = ev(DELETION_KIND, 5, 8, 1);
        del.tags = vec![vec!["e".into(), crate::codec::hex::encode(&target.id)]];
        let mut t = Tombstones::default();
        assert_eq!(t.record(&del), 1);
        // The target arrives after its deletion: it is not in the set.
        assert!(!in_set(&target, &t, Timestamp::from_secs(0), (None, None)));
        // Someone else's deletion of it removes nothing.
        let mut t2 = Tombstones::default();
        let mut other = del.clone();
        other.pubkey = [2; 32];
        t2.record(&other);
        assert!(in_set(&target, &t2, Timestamp::from_secs(0), (None, None)));
    }

    #[test]
    fn expired_and_out_of_range_events_are_out() {
        let mut e = ev(1, 100, 1, 1);
        e.tags = vec![crate::nostr::expiration::tag(200)];
        let t = Tombstones::default();
        assert!(in_set(&e, &t, Timestamp::from_secs(199), (None, None)));
        assert!(!in_set(&e, &t, Timestamp::from_secs(200), (None, None)));
        let r = intersect((Some(50), Some(150)), (Some(101), None));
        assert_eq!(r, (Some(101), Some(150)));
        assert!(!in_set(&e, &t, Timestamp::from_secs(0), r));
        assert_eq!(intersect((None, None), (None, Some(3))), (None, Some(3)));
    }

    #[test]
    fn addressable_coordinates_carry_d() {
        let mut e = ev(30803, 1, 1, 1);
        e.tags = vec![vec!["d".into(), "shard".into()]];
        assert_eq!(coordinate(&e), Some((30803, [1; 32], "shard".into())));
        assert_eq!(coordinate(&ev(1, 1, 1, 1)), None);
    }
}
