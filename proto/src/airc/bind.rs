//! Binds and the resolving-client selection (AIRC §4.3).
//!
//! Clients bind patterns (§2.7) to receive for them. When a message arrives for a local address,
//! the server picks among the binds of every connected client:
//!
//! ```text
//! score(bind B for A):
//!   if B pattern-matches A:       literal*2 + (1 if B has no "*" and no trailing "/")
//!   else if B is an exact endpoint and A lies strictly beneath it:   literal*2   (delegation)
//!   else: not a candidate
//! highest score wins; ties: the most recently bound
//! ```
//!
//! Only binds that can be candidates are scored (see [`BindTable`]), so what one delivery costs
//! does not grow with the binds other clients hold elsewhere.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Bound;

use super::address::{Address, Authority};
use super::pattern::{Pattern, PatternSegment};

/// Binds one connection may hold at most. The spec sets no bound (§15 was lost); past it a bind
/// is refused with `bad_bind`.
pub const MAX_BINDS_PER_CONNECTION: usize = 1024;

/// Binds one table (one server) holds at most, over every connection. The spec sets no bound
/// (§15 was lost); past it a bind is refused, as past [`MAX_BINDS_PER_CONNECTION`].
///
/// Without it, 4 096 connections (the server's `MAX_CONNECTIONS`) at the per-connection bound
/// could hold over four million binds. 65 536 is 16 for each of those connections, or 256
/// clients binding the client library's whole `MAX_BIND_NAMES`, well past what a host's clients
/// bind (a few names each). What names of any length may take of memory is
/// [`MAX_BIND_BYTES`]'s bound.
pub const MAX_BINDS: usize = 65_536;

/// The patterns' bytes one table holds at most, as [`footprint`] counts them. The spec sets no
/// bound (§15 was lost); past it a bind is refused, as past [`MAX_BINDS_PER_CONNECTION`].
///
/// A bind's cost grows with its segments: an address of [`MAX_ADDRESS_LEN`] octets cut into
/// one-letter segments has over 500, each held as a string in the pattern (kept twice), in
/// its stem and in the namespace it is counted in (at most the pattern's own), so
/// [`MAX_BINDS`] such binds took a few GiB. 256 bytes a bind on average (16 MiB) leaves
/// [`MAX_BINDS`] the bound for usual names (`alice/inbox/*` counts 170 on a 64-bit target);
/// the table then holds at most about four times this, plus its entries' own fixed size.
///
/// [`MAX_ADDRESS_LEN`]: super::address::MAX_ADDRESS_LEN
pub const MAX_BIND_BYTES: usize = MAX_BINDS * 256;

/// How many namespaces it takes to fill the table: one namespace may hold this share of
/// [`MAX_BINDS`] and of [`MAX_BIND_BYTES`].
///
/// A server lets a client bind only inside its namespaces and counts each bind in the
/// connection's namespace it lies in ([`BindTable::bind_in`]), so this is what one user's
/// connections can take of the table for each namespace they were given: a sixteenth, four
/// connections at their own bound. Without it one user opening 64 connections would fill the
/// table and have every other client's bind refused.
const NAMESPACE_SHARE: usize = 16;

/// Binds one namespace holds at most, over every connection, in one authority: the namespace
/// [`BindTable::bind_in`] is given, or for [`BindTable::bind`] the pattern's first segment
/// (wildcard-led patterns counted together). The spec sets no bound (§15 was lost); past it a
/// bind is refused, as past [`MAX_BINDS_PER_CONNECTION`]. A sixteenth of [`MAX_BINDS`] (see
/// `NAMESPACE_SHARE`).
pub const MAX_BINDS_PER_NAMESPACE: usize = MAX_BINDS / NAMESPACE_SHARE;

/// The patterns' bytes one namespace holds at most, as [`footprint`] counts them, over every
/// connection; counted as [`MAX_BINDS_PER_NAMESPACE`] counts binds. A sixteenth of
/// [`MAX_BIND_BYTES`] (1 MiB): 4 096 binds of five short segments, or about 50 of the
/// longest patterns an address allows.
pub const MAX_BIND_BYTES_PER_NAMESPACE: usize = MAX_BIND_BYTES / NAMESPACE_SHARE;

/// The bytes a segment costs beside its text: the segment itself and its text's allocation.
const SEGMENT_BYTES: usize = core::mem::size_of::<PatternSegment>() + 16;

/// What `pattern` counts against [`MAX_BIND_BYTES`]: about what one copy of it takes on the
/// heap, its segments' texts and their own size, and one segment's worth for the pattern.
pub fn footprint(pattern: &Pattern) -> usize {
    let segments = pattern.segments().iter().map(|s| match s {
        PatternSegment::Literal(l) => SEGMENT_BYTES + l.len(),
        PatternSegment::One | PatternSegment::Rest => SEGMENT_BYTES,
    });
    SEGMENT_BYTES + segments.sum::<usize>()
}

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

/// Every bind of every connected client.
///
/// A bind can be a candidate for an address only when the literal segments its pattern begins
/// with (its *stem*, up to the first `*` or `**`) are the address's first segments: pattern
/// matching, delegation and [`BindTable::select_namespace`]'s covering all compare them
/// literally, and a literal cannot match past the address's last segment. So patterns are kept
/// by authority (the authority `*` apart, with the whole pattern `*`) and stem, and a lookup
/// probes only the prefixes of the address's path, stopping at the first that no stem begins
/// with: binds elsewhere in the namespace tree are never looked at, however many there are.
/// What it still scores without being sure of a match is the patterns that go on from a stem on
/// the path with a wildcard, which only a client allowed to bind that stem can add (a server
/// lets a client bind only inside its namespaces). Owners of the same pattern are one entry,
/// scored once: the most recent of them is the only one that can win.
#[derive(Clone, Debug)]
pub struct BindTable<C> {
    realms: BTreeMap<Authority, Stems<C>>,
    any_realm: Stems<C>,
    /// Each owner's patterns, so that what concerns one connection never reads the others'.
    owners: BTreeMap<C, BTreeMap<Pattern, Stamp>>,
    /// What each namespace holds, for [`MAX_BINDS_PER_NAMESPACE`] and
    /// [`MAX_BIND_BYTES_PER_NAMESPACE`].
    per_namespace: BTreeMap<Root, Usage>,
    /// What the whole table holds, for [`MAX_BINDS`] and [`MAX_BIND_BYTES`].
    all: Usage,
    next_seq: u64,
}

/// Patterns by stem; each pattern's owners by when they last bound it, the most recent last.
type Stems<C> = BTreeMap<Vec<String>, BTreeMap<Pattern, BTreeMap<u64, C>>>;

/// When an owner first bound a pattern (its place in [`BindTable::owner_patterns`]) and last
/// bound it (its key among the pattern's owners), and the namespace it is counted in.
#[derive(Clone, Debug)]
struct Stamp {
    first: u64,
    last: u64,
    namespace: Root,
}

/// Binds and their [`footprint`]s, summed.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    binds: usize,
    bytes: usize,
}

impl Usage {
    /// Whether one more bind of `bytes` stays within `max_binds` and `max_bytes`.
    fn has_room(&self, bytes: usize, max_binds: usize, max_bytes: usize) -> bool {
        self.binds < max_binds && self.bytes + bytes <= max_bytes
    }

    fn add(&mut self, bytes: usize) {
        self.binds += 1;
        self.bytes += bytes;
    }

    fn remove(&mut self, bytes: usize) {
        self.binds -= 1;
        self.bytes -= bytes;
    }
}

/// The namespace a bind is counted in, for [`MAX_BINDS_PER_NAMESPACE`] and
/// [`MAX_BIND_BYTES_PER_NAMESPACE`]: the pattern's authority and the namespace's segments.
type Root = (Option<Authority>, Vec<String>);

/// The literal segments `pattern` begins with.
fn stem(pattern: &Pattern) -> Vec<String> {
    pattern
        .segments()
        .iter()
        .map_while(|s| match s {
            PatternSegment::Literal(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

/// The patterns of `stems` whose stem is a prefix of `path`, shortest first.
fn on_path<'a, C>(
    stems: &'a Stems<C>,
    path: &'a [String],
) -> impl Iterator<Item = (&'a Pattern, &'a BTreeMap<u64, C>)> {
    // The stems beginning with a prefix sort together, from the prefix itself on: the first
    // stem from there tells both whether the prefix is a stem and whether any longer one can be.
    (0..=path.len())
        .map_while(move |n| {
            let prefix = &path[..n];
            let (first, patterns) = stems
                .range::<[String], _>((Bound::Included(prefix), Bound::Unbounded))
                .next()?;
            first
                .starts_with(prefix)
                .then_some((first.len() == n).then_some(patterns))
        })
        .flatten()
        .flatten()
}

/// Drops the owner that bound `pattern` at `seq`, and what that leaves empty: else binding and
/// dropping ever new names would grow the table without bound.
fn forget<C>(stems: &mut Stems<C>, pattern: &Pattern, seq: u64) {
    let key = stem(pattern);
    let Some(patterns) = stems.get_mut(&key) else {
        return;
    };
    if let Some(owners) = patterns.get_mut(pattern) {
        owners.remove(&seq);
        if owners.is_empty() {
            patterns.remove(pattern);
        }
    }
    if patterns.is_empty() {
        stems.remove(&key);
    }
}

impl<C> Default for BindTable<C> {
    fn default() -> Self {
        Self {
            realms: BTreeMap::new(),
            any_realm: BTreeMap::new(),
            owners: BTreeMap::new(),
            per_namespace: BTreeMap::new(),
            all: Usage::default(),
            next_seq: 0,
        }
    }
}

impl<C: Copy + Ord> BindTable<C> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `pattern` for `owner`, counted in the namespace of the pattern's first segment (the
    /// root namespace for a pattern led by a wildcard). [`BindTable::bind_in`] names the
    /// namespace instead.
    pub fn bind(&mut self, owner: C, pattern: Pattern) -> bool {
        let first = match pattern.segments().first() {
            Some(PatternSegment::Literal(l)) => alloc::vec![l.clone()],
            _ => Vec::new(),
        };
        self.bind_in(owner, pattern, &first)
    }

    /// Binds `pattern` for `owner`, counted in `namespace` (its segments; the pattern lies in
    /// it): a server names the namespace of the connection's that the pattern lies in, so that
    /// users given `team/a` and `team/b` each have their own bound. Binding a pattern the owner
    /// already holds makes it the most recently bound again, counted where it was. Returns
    /// `false`, binding nothing, when the owner already holds [`MAX_BINDS_PER_CONNECTION`]
    /// other patterns, or the pattern would take its namespace past [`MAX_BINDS_PER_NAMESPACE`]
    /// or [`MAX_BIND_BYTES_PER_NAMESPACE`], or the table past [`MAX_BINDS`] or
    /// [`MAX_BIND_BYTES`].
    pub fn bind_in(&mut self, owner: C, pattern: Pattern, namespace: &[String]) -> bool {
        let seq = self.next_seq;
        let held = self.owners.get(&owner).and_then(|h| h.get(&pattern));
        let (first, root) = match held {
            Some(stamp) => {
                let first = stamp.first;
                let root = stamp.namespace.clone();
                self.forget_seq(&pattern, stamp.last);
                (first, root)
            }
            None => {
                let root = (pattern.authority().cloned(), namespace.to_vec());
                let bytes = footprint(&pattern);
                let usage = self.per_namespace.get(&root).copied().unwrap_or_default();
                if self.count(owner) >= MAX_BINDS_PER_CONNECTION
                    || !usage.has_room(bytes, MAX_BINDS_PER_NAMESPACE, MAX_BIND_BYTES_PER_NAMESPACE)
                    || !self.all.has_room(bytes, MAX_BINDS, MAX_BIND_BYTES)
                {
                    return false;
                }
                self.per_namespace
                    .entry(root.clone())
                    .or_default()
                    .add(bytes);
                self.all.add(bytes);
                (seq, root)
            }
        };
        let stems = match pattern.authority() {
            Some(a) => self.realms.entry(a.clone()).or_default(),
            None => &mut self.any_realm,
        };
        stems
            .entry(stem(&pattern))
            .or_default()
            .entry(pattern.clone())
            .or_default()
            .insert(seq, owner);
        let stamp = Stamp {
            first,
            last: seq,
            namespace: root,
        };
        self.owners.entry(owner).or_default().insert(pattern, stamp);
        self.next_seq += 1;
        true
    }

    /// Drops every bind of `owner` (its connection closed).
    pub fn unbind_all(&mut self, owner: C) {
        let Some(held) = self.owners.remove(&owner) else {
            return;
        };
        for (pattern, stamp) in &held {
            let bytes = footprint(pattern);
            self.all.remove(bytes);
            if let Some(usage) = self.per_namespace.get_mut(&stamp.namespace) {
                usage.remove(bytes);
                if usage.binds == 0 {
                    self.per_namespace.remove(&stamp.namespace);
                }
            }
            self.forget_seq(pattern, stamp.last);
        }
    }

    /// Drops the owner that bound `pattern` at `seq` from the stems, and what that leaves empty.
    fn forget_seq(&mut self, pattern: &Pattern, seq: u64) {
        match pattern.authority() {
            Some(a) => {
                if let Some(stems) = self.realms.get_mut(a) {
                    forget(stems, pattern, seq);
                    if stems.is_empty() {
                        self.realms.remove(a);
                    }
                }
            }
            None => forget(&mut self.any_realm, pattern, seq),
        }
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
        self.best(namespace, |p| covers(p, namespace))
    }

    /// How many patterns `owner` holds.
    pub fn count(&self, owner: C) -> usize {
        self.owners.get(&owner).map_or(0, BTreeMap::len)
    }

    /// The client to hand a message for `address` to: the highest score, ties to the most
    /// recently bound (§4.3).
    pub fn select(&self, address: &Address) -> Option<C> {
        self.best(address, |p| score(p, address))
    }

    /// The patterns `owner` holds, in the order it first bound them.
    pub fn owner_patterns(&self, owner: C) -> impl Iterator<Item = &Pattern> {
        let mut held: Vec<_> = self.owners.get(&owner).into_iter().flatten().collect();
        held.sort_unstable_by_key(|(_, stamp)| stamp.first);
        held.into_iter().map(|(p, _)| p)
    }

    /// The most recent owner of the pattern `rank` puts highest among those whose stems
    /// `address` begins with.
    fn best<R: Ord + Copy>(
        &self,
        address: &Address,
        rank: impl Fn(&Pattern) -> Option<R>,
    ) -> Option<C> {
        let path = address.segments();
        let realm = self.realms.get(address.realm());
        realm
            .into_iter()
            .flat_map(|stems| on_path(stems, path))
            .chain(on_path(&self.any_realm, path))
            .filter_map(|(p, owners)| {
                let (seq, owner) = owners.last_key_value()?;
                Some((rank(p)?, *seq, *owner))
            })
            .max_by_key(|(r, seq, _)| (*r, *seq))
            .map(|(_, _, owner)| owner)
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
    use crate::airc::address::MAX_ADDRESS_LEN;
    use alloc::format;
    use chacha20::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

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

    #[test]
    fn binds_in_all_are_bounded() {
        let per = MAX_BINDS_PER_CONNECTION;
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS {
            assert!(t.bind(i / per, pat(&format!("n{i}"))));
        }
        let late = MAX_BINDS / per;
        assert!(!t.bind(late, pat("late")), "a new bind past the total");
        assert_eq!(t.count(late), 0);
        assert_eq!(t.select(&addr("airc://r/late")), None);
        assert!(
            t.bind(0, pat("n0")),
            "re-binding a held pattern is not a new bind"
        );
        t.unbind_all(1);
        assert!(
            t.bind(late, pat("late")),
            "room again once binds are dropped"
        );
        assert_eq!(t.select(&addr("airc://r/late")), Some(late));
    }

    #[test]
    fn binds_in_one_namespace_are_bounded_and_leave_room_for_others() {
        let per = MAX_BINDS_PER_CONNECTION;
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS_PER_NAMESPACE {
            assert!(t.bind(i / per, pat(&format!("alice/x{i}"))));
        }
        let late = MAX_BINDS_PER_NAMESPACE / per;
        for full in ["alice/late", "alice/", "alice/*/y"] {
            assert!(
                !t.bind(late, pat(full)),
                "{full}: alice's namespace is full"
            );
        }
        assert!(t.bind(late, pat("bob/x")), "another namespace has room");
        assert!(
            t.bind(late, pat("alicia/x")),
            "and one that only starts alike"
        );
        assert!(t.bind(0, pat("alice/x0")), "re-binding a held pattern");
        t.unbind_all(1);
        assert!(
            t.bind(late, pat("alice/late")),
            "room once alice's binds drop"
        );
        // Patterns led by a wildcard lie in no one namespace: they share one bound.
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS_PER_NAMESPACE {
            assert!(t.bind(i / per, pat(&format!("*/x{i}"))));
        }
        assert!(!t.bind(late, pat("**")));
        assert!(t.bind(late, pat("alice/x")));
    }

    #[test]
    fn a_named_namespace_is_counted_apart_from_its_first_segment() {
        let per = MAX_BINDS_PER_CONNECTION;
        let seg = |text: &str| text.split('/').map(String::from).collect::<Vec<_>>();
        let (a, b) = (seg("team/a"), seg("team/b"));
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS_PER_NAMESPACE {
            assert!(t.bind_in(i / per, pat(&format!("team/a/x{i}")), &a));
        }
        let late = MAX_BINDS_PER_NAMESPACE / per;
        assert!(!t.bind_in(late, pat("team/a/late"), &a), "team/a is full");
        assert!(
            t.bind_in(late, pat("team/b/x"), &b),
            "team/b has its own bound"
        );
        assert!(
            t.bind(late + 1, pat("team/c")),
            "and so has team, by its first segment"
        );
        assert!(
            t.bind_in(0, pat("team/a/x0"), &a),
            "re-binding a held pattern"
        );
        t.unbind_all(0);
        assert!(
            t.bind_in(late, pat("team/a/late"), &a),
            "room once some drop"
        );
        for o in 0..=late + 1 {
            t.unbind_all(o);
        }
        assert!(t.per_namespace.is_empty(), "{:?}", t.per_namespace);
    }

    /// The longest pattern in `namespace` an address allows, cut into one-letter segments, the
    /// last of them `tag` (so that patterns differ).
    fn longest(namespace: &str, tag: usize) -> Pattern {
        let tag = format!("{tag}");
        (1..)
            .map(|cut| {
                let n = (MAX_ADDRESS_LEN - namespace.len()) / 2 - cut;
                format!("{namespace}{}/{tag}", "/a".repeat(n))
            })
            .find_map(|text| Pattern::parse_in_realm(&text, &realm()).ok())
            .unwrap()
    }

    #[test]
    fn a_pattern_counts_its_segments_and_their_text() {
        assert_eq!(footprint(&pat("alice/inbox/*")), 4 * SEGMENT_BYTES + 10);
        assert_eq!(
            footprint(&Pattern::parse_in_realm("*", &realm()).unwrap()),
            SEGMENT_BYTES
        );
        let long = longest("alice", 0);
        assert!(long.segments().len() > 500, "{}", long.segments().len());
        assert!(footprint(&long) > 500 * SEGMENT_BYTES);
    }

    #[test]
    fn long_patterns_are_bounded_by_their_bytes_in_a_namespace_and_in_all() {
        let per = MAX_BINDS_PER_CONNECTION;
        let mut t = BindTable::new();
        let mut bound = 0;
        while t.bind(bound / per, longest("alice", bound)) {
            bound += 1;
        }
        let each = footprint(&longest("alice", 0));
        assert_eq!(
            bound,
            MAX_BIND_BYTES_PER_NAMESPACE / each,
            "refused at the byte bound"
        );
        assert!(
            bound < MAX_BINDS_PER_NAMESPACE / 16,
            "long before the count bound"
        );
        assert!(t.bind(bound, pat("bob/x")), "another namespace has room");
        t.unbind_all(0);
        assert!(
            t.bind(bound, longest("alice", bound)),
            "room once some drop"
        );

        // Namespaces of their own, each at its byte bound, fill the table's.
        let mut t = BindTable::new();
        let (mut owner, mut held) = (0, 0);
        for ns in 0.. {
            let namespace = format!("u{ns}");
            let mut in_namespace = 0;
            while t.bind(owner, longest(&namespace, in_namespace)) {
                in_namespace += 1;
                owner += 1;
            }
            held += in_namespace;
            if in_namespace == 0 {
                break;
            }
        }
        assert!(t.all.bytes <= MAX_BIND_BYTES);
        assert!(
            t.all.bytes + each > MAX_BIND_BYTES,
            "refused at the table's byte bound"
        );
        assert_eq!(t.all.binds, held);
        assert!(held < MAX_BINDS / 16);
    }

    #[test]
    fn usual_names_meet_the_count_bound_first() {
        let per = MAX_BINDS_PER_CONNECTION;
        let mut t = BindTable::new();
        for i in 0..MAX_BINDS {
            let name = format!("user{}/inbox/*", i / MAX_BINDS_PER_NAMESPACE);
            let name = format!("{name}/{}", i % MAX_BINDS_PER_NAMESPACE);
            assert!(t.bind(i / per, pat(&name)), "{name}");
        }
        assert!(
            !t.bind(MAX_BINDS / per, pat("zed/x")),
            "the table is full by count"
        );
        assert!(t.all.bytes < MAX_BIND_BYTES);
    }

    /// The table as it was before the index: one list of every bind, scanned by every lookup.
    /// What [`BindTable`] answers must not differ from it in anything.
    #[derive(Default)]
    struct Scan {
        binds: Vec<(u8, Pattern, u64)>,
        next_seq: u64,
    }

    impl Scan {
        fn bind(&mut self, owner: u8, pattern: Pattern) {
            let seq = self.next_seq;
            self.next_seq += 1;
            match self
                .binds
                .iter_mut()
                .find(|(o, p, _)| *o == owner && *p == pattern)
            {
                Some(b) => b.2 = seq,
                None => self.binds.push((owner, pattern, seq)),
            }
        }

        fn unbind_all(&mut self, owner: u8) {
            self.binds.retain(|(o, _, _)| *o != owner);
        }

        fn best<R: Ord>(&self, rank: impl Fn(&Pattern) -> Option<R>) -> Option<u8> {
            self.binds
                .iter()
                .filter_map(|(o, p, seq)| rank(p).map(|r| (r, *seq, *o)))
                .max_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)))
                .map(|(_, _, o)| o)
        }

        fn select(&self, address: &Address) -> Option<u8> {
            self.best(|p| score(p, address))
        }

        fn select_namespace(&self, namespace: &Address) -> Option<u8> {
            namespace
                .is_namespace()
                .then(|| self.best(|p| covers(p, namespace)))
                .flatten()
        }

        fn owner_patterns(&self, owner: u8) -> impl Iterator<Item = &Pattern> {
            self.binds
                .iter()
                .filter(move |(o, _, _)| *o == owner)
                .map(|(_, p, _)| p)
        }
    }

    /// Few names, so that random patterns and addresses meet often: shared stems, the same
    /// pattern bound by several owners, addresses beneath exact endpoints.
    struct Gen(ChaCha20Rng);

    impl Gen {
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.0.next_u64() % n as u64).unwrap()
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }

        fn pattern(&mut self) -> Pattern {
            if self.below(25) == 0 {
                return Pattern::parse("*").unwrap();
            }
            let authority = self.pick(&["r", "r", "r", "s", "*"]);
            let len = 1 + self.below(4);
            let segments: Vec<&str> = (0..len)
                .map(|i| match self.below(8) {
                    0 => "*",
                    1 if i + 1 == len => "**",
                    _ => self.pick(&["a", "b", "c"]),
                })
                .collect();
            let namespace = if self.below(3) == 0 { "/" } else { "" };
            Pattern::parse(&format!("//{authority}/{}{namespace}", segments.join("/"))).unwrap()
        }

        fn address(&mut self) -> Address {
            let realm = self.pick(&["r", "r", "s", "t"]);
            let len = 1 + self.below(5);
            let segments: Vec<&str> = (0..len).map(|_| self.pick(&["a", "b", "c", "d"])).collect();
            let namespace = if self.below(2) == 0 { "/" } else { "" };
            addr(&format!("airc://{realm}/{}{namespace}", segments.join("/")))
        }
    }

    #[test]
    fn the_index_answers_as_scanning_every_bind_does() {
        const OWNERS: u8 = 6;
        let mut g = Gen(ChaCha20Rng::seed_from_u64(43));
        for _ in 0..40 {
            let (mut t, mut scan) = (BindTable::new(), Scan::default());
            let mut bound: Vec<Pattern> = Vec::new();
            for _ in 0..150 {
                let owner = u8::try_from(g.below(OWNERS.into())).unwrap();
                match g.below(10) {
                    0 => {
                        t.unbind_all(owner);
                        scan.unbind_all(owner);
                    }
                    // Patterns seen before: rebinds, and one pattern held by several owners.
                    1..=3 if !bound.is_empty() => {
                        let p = bound[g.below(bound.len())].clone();
                        assert!(t.bind(owner, p.clone()));
                        scan.bind(owner, p);
                    }
                    _ => {
                        let p = g.pattern();
                        bound.push(p.clone());
                        assert!(t.bind(owner, p.clone()));
                        scan.bind(owner, p);
                    }
                }
                for _ in 0..8 {
                    let a = g.address();
                    assert_eq!(t.select(&a), scan.select(&a), "select {a}");
                    assert_eq!(
                        t.select_namespace(&a),
                        scan.select_namespace(&a),
                        "select_namespace {a}"
                    );
                }
                for o in 0..OWNERS {
                    assert!(t.owner_patterns(o).eq(scan.owner_patterns(o)), "owner {o}");
                    assert_eq!(t.count(o), scan.owner_patterns(o).count());
                }
            }
            for o in 0..OWNERS {
                t.unbind_all(o);
            }
            assert!(
                t.realms.is_empty()
                    && t.any_realm.is_empty()
                    && t.per_namespace.is_empty()
                    && (t.all.binds, t.all.bytes) == (0, 0),
                "an empty table keeps nothing of what it held: {t:?}"
            );
        }
    }
}
