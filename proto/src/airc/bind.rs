//! Binds and the resolving-client selection (AIRC §4.3).
//!
//! Clients bind patterns (§2.7) to receive for them. When a message arrives for a local address,
//! the server scores every bind of every connected client and hands the message to the best:
//!
//! ```text
//! score(bind B for A):
//!   if B pattern-matches A:       literal*2 + (1 if B has no "*" and no trailing "/")
//!   else if B is an exact endpoint and A lies strictly beneath it:   literal*2   (delegation)
//!   else: not a candidate
//! highest score wins; ties: the most recently bound
//! ```

use alloc::vec::Vec;

use super::address::Address;
use super::pattern::{Pattern, PatternSegment};

/// Binds one connection may hold at most. The spec sets no bound (§15 was lost); past it a bind
/// is refused with `bad_bind`.
pub const MAX_BINDS_PER_CONNECTION: usize = 1024;

/// `B`'s score for `A`, or `None` when `B` is not a candidate (§4.3).
pub fn score(bind: &Pattern, address: &Address) -> Option<u32> {
    let literal = bind
        .segments()
        .iter()
        .filter(|s| matches!(s, PatternSegment::Literal(_)))
        .count();
    let literal = u32::try_from(literal).unwrap_or(u32::MAX);
    let exact = !bind.is_all()
        && !bind.is_namespace()
        && bind
            .segments()
            .iter()
            .all(|s| matches!(s, PatternSegment::Literal(_)));
    if bind.matches(address) {
        Some(literal.saturating_mul(2).saturating_add(u32::from(exact)))
    } else if exact && is_beneath(bind, address) {
        Some(literal.saturating_mul(2))
    } else {
        None
    }
}

/// Whether `address` lies strictly beneath the exact endpoint `bind`, in the same authority
/// (delegation, §2.5).
fn is_beneath(bind: &Pattern, address: &Address) -> bool {
    let path = address.segments();
    bind.authority() == Some(address.realm())
        && path.len() > bind.segments().len()
        && bind
            .segments()
            .iter()
            .zip(path)
            .all(|(b, a)| matches!(b, PatternSegment::Literal(l) if l == a))
}

/// Every bind of every connected client, in the order they were bound.
#[derive(Clone, Debug)]
pub struct BindTable<C> {
    binds: Vec<(C, Pattern, u64)>,
    next_seq: u64,
}

impl<C> Default for BindTable<C> {
    fn default() -> Self {
        Self {
            binds: Vec::new(),
            next_seq: 0,
        }
    }
}

impl<C: Copy + Eq> BindTable<C> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `pattern` for `owner`. Binding a pattern the owner already holds makes it the most
    /// recently bound again. Returns `false`, binding nothing, when the owner already holds
    /// [`MAX_BINDS_PER_CONNECTION`] other patterns.
    pub fn bind(&mut self, owner: C, pattern: Pattern) -> bool {
        let seq = self.next_seq;
        if let Some(b) = self
            .binds
            .iter_mut()
            .find(|(o, p, _)| *o == owner && *p == pattern)
        {
            b.2 = seq;
        } else if self.count(owner) >= MAX_BINDS_PER_CONNECTION {
            return false;
        } else {
            self.binds.push((owner, pattern, seq));
        }
        self.next_seq += 1;
        true
    }

    /// Drops every bind of `owner` (its connection closed).
    pub fn unbind_all(&mut self, owner: C) {
        self.binds.retain(|(o, _, _)| *o != owner);
    }

    /// The client to hand a server notice addressed to a namespace reference to (an offer to a
    /// whole namespace, §11.1, §11.4): one whose bind receives every endpoint of the namespace
    /// (a namespace bind of it or of an enclosing one, or a pattern ending in `**` whose prefix
    /// matches), the most literal segments first, ties to the most recently bound. `None` for
    /// an endpoint address.
    pub fn select_namespace(&self, namespace: &Address) -> Option<C> {
        if !namespace.is_namespace() {
            return None;
        }
        self.binds
            .iter()
            .filter_map(|(o, p, seq)| covers(p, namespace).map(|s| (s, *seq, *o)))
            .max_by_key(|(s, seq, _)| (*s, *seq))
            .map(|(_, _, o)| o)
    }

    /// How many patterns `owner` holds.
    pub fn count(&self, owner: C) -> usize {
        self.binds.iter().filter(|(o, _, _)| *o == owner).count()
    }

    /// The client to hand a message for `address` to: the highest score, ties to the most
    /// recently bound (§4.3).
    pub fn select(&self, address: &Address) -> Option<C> {
        self.binds
            .iter()
            .filter_map(|(o, p, seq)| score(p, address).map(|s| (s, *seq, *o)))
            .max_by_key(|(s, seq, _)| (*s, *seq))
            .map(|(_, _, o)| o)
    }

    /// The patterns `owner` holds, in bind order.
    pub fn owner_patterns(&self, owner: C) -> impl Iterator<Item = &Pattern> {
        self.binds
            .iter()
            .filter(move |(o, _, _)| *o == owner)
            .map(|(_, p, _)| p)
    }
}

/// Whether `p` receives every endpoint beneath namespace `ns`, and with how many literal
/// segments.
fn covers(p: &Pattern, ns: &Address) -> Option<usize> {
    if p.authority().is_some_and(|a| a != ns.realm()) {
        return None;
    }
    let segs = p.segments();
    let prefix = match segs.split_last() {
        Some((PatternSegment::Rest, before)) => before,
        _ if p.is_namespace() => segs,
        _ => return None,
    };
    let path = ns.segments();
    let fits = prefix.len() <= path.len()
        && prefix.iter().zip(path).all(|(s, a)| match s {
            PatternSegment::Literal(l) => l == a,
            PatternSegment::One => true,
            PatternSegment::Rest => false,
        });
    fits.then(|| {
        prefix
            .iter()
            .filter(|s| matches!(s, PatternSegment::Literal(_)))
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::airc::address::Authority;

    fn realm() -> Authority {
        Authority::parse("r").unwrap()
    }

    fn pat(s: &str) -> Pattern {
        Pattern::parse_in_realm(s, &realm()).unwrap()
    }

    fn addr(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    /// §18.5: binds //r/alice/ (client A), //r/alice/research (client B),
    /// //r/alice/research/spider1 (client C). Its result table was lost; these follow from the
    /// algorithm of §4.3.
    fn vector_table() -> BindTable<char> {
        let mut t = BindTable::new();
        assert!(t.bind('A', pat("alice/")));
        assert!(t.bind('B', pat("alice/research")));
        assert!(t.bind('C', pat("alice/research/spider1")));
        t
    }

    #[test]
    fn the_most_specific_bind_wins() {
        let t = vector_table();
        assert_eq!(
            t.select(&addr("airc://r/alice/research/spider1")),
            Some('C')
        );
        assert_eq!(t.select(&addr("airc://r/alice/research")), Some('B'));
        assert_eq!(t.select(&addr("airc://r/alice/x")), Some('A'));
    }

    #[test]
    fn an_exact_endpoint_bind_receives_beneath_it_by_delegation() {
        let t = vector_table();
        // alice/ matches (literal 1 → 2); alice/research delegates (literal 2 → 4).
        assert_eq!(
            t.select(&addr("airc://r/alice/research/spider2")),
            Some('B')
        );
        assert_eq!(
            t.select(&addr("airc://r/alice/research/spider1/deep")),
            Some('C')
        );
    }

    #[test]
    fn scores_follow_the_formula() {
        let a = addr("airc://r/alice/research");
        assert_eq!(score(&pat("alice/research"), &a), Some(5));
        assert_eq!(score(&pat("alice/*"), &a), Some(2));
        assert_eq!(score(&pat("alice/"), &a), Some(2));
        assert_eq!(score(&pat("alice/**"), &a), Some(2));
        assert_eq!(score(&pat("*"), &a), Some(0));
        assert_eq!(
            score(&pat("alice"), &a),
            Some(2),
            "delegation: literal*2, no +1"
        );
        assert_eq!(score(&pat("bob/"), &a), None);
        assert_eq!(score(&pat("alice/research/x"), &a), None);
        assert_eq!(
            score(&pat("//other/alice"), &a),
            None,
            "delegation needs the same authority"
        );
    }

    #[test]
    fn ties_go_to_the_most_recently_bound() {
        let mut t = BindTable::new();
        t.bind(1, pat("alice/"));
        t.bind(2, pat("alice/*"));
        assert_eq!(t.select(&addr("airc://r/alice/x")), Some(2));
        t.bind(1, pat("alice/"));
        assert_eq!(
            t.select(&addr("airc://r/alice/x")),
            Some(1),
            "binding again refreshes"
        );
    }

    #[test]
    fn closing_a_connection_drops_its_binds() {
        let mut t = vector_table();
        t.unbind_all('C');
        assert_eq!(
            t.select(&addr("airc://r/alice/research/spider1")),
            Some('B')
        );
        assert_eq!(t.count('C'), 0);
    }

    #[test]
    fn binds_per_connection_are_bounded() {
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS_PER_CONNECTION {
            assert!(t.bind(1, pat(&alloc::format!("n{i}"))));
        }
        assert!(!t.bind(1, pat("one-more")));
        assert!(
            t.bind(1, pat("n0")),
            "re-binding a held pattern is not a new bind"
        );
        assert!(t.bind(2, pat("other")));
    }

    #[test]
    fn a_namespace_notice_goes_to_the_closest_bind_covering_the_whole_namespace() {
        let mut t = BindTable::new();
        assert!(t.bind('A', pat("alice/")));
        assert!(t.bind('B', pat("alice/research/**")));
        assert!(t.bind('C', pat("alice/research/spider1")));
        assert!(t.bind('D', pat("alice/*")));
        let research = addr("airc://r/alice/research/");
        assert_eq!(t.select_namespace(&research), Some('B'));
        assert_eq!(t.select_namespace(&addr("airc://r/alice/")), Some('A'));
        assert_eq!(t.select_namespace(&addr("airc://r/bob/")), None);
        assert_eq!(t.select_namespace(&addr("airc://other/alice/")), None);
        assert_eq!(
            t.select_namespace(&addr("airc://r/alice/x")),
            None,
            "an endpoint"
        );
        // Ties go to the most recently bound.
        assert!(t.bind('E', pat("alice/research/")));
        assert_eq!(t.select_namespace(&research), Some('E'));
    }
}
