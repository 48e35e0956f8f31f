//! Stress a node survived (meshstr §6.5): strain records, local and defensive only.
//!
//! A restart, a peer gone quiet, a dropped relay, a drifting clock: each is refused as a finding
//! about a peer and then kept here, where it sets the node's own reserves and nothing else. This
//! module has no path to the wire and none to a [`super::window::Severity`]: a [`StrainLog`]
//! answers with reserves and an operator's flag, never with a finding, and a peer's own account
//! of what it weathered ([`Source::PeerAccount`]) is a claim, counted and not recorded.
//!
//! **Directions, never magnitude.** A reserve counts independent directions of one kind (peers,
//! shards, transports), each worth at most one direction ([`DIRECTION_WORTH_MILLI`]) and weighted
//! by the tier this node granted the peer that strained it (probation 0.0, so free identities buy
//! none). A peer is credited to at most one direction of each kind however hard and however
//! widely it pushes, so one peer moves each reserve by at most one direction's worth. A reserve
//! is capped at [`RESERVE_CAP_DIRECTIONS`]. Crediting is greedy and deterministic: directions in
//! ascending order, each to the heaviest peer not yet credited (ties to the lower key).
//!
//! A node whose strain is nearly all one peer is a flag tree ([`StrainLog::flag_tree`]):
//! reported to the operator, never a finding. The partition that follows a `retiring` heartbeat
//! is not stress from that peer (§3.3). The caps and the flag-tree share are not in the text
//! (docs/decisions.md).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use super::limits::Tier;

/// One direction's worth, in thousandths (an anchor peer's weight, 1.0).
pub const DIRECTION_WORTH_MILLI: u64 = 1000;

/// The most directions' worth one reserve grows to (not in the text, docs/decisions.md).
pub const RESERVE_CAP_DIRECTIONS: u64 = 8;

/// Peers a log remembers strain from, and peers it remembers announced `retiring` (not in the
/// text, docs/decisions.md). Past it a new peer's strain is refused and counted.
pub const MAX_STRAIN_PEERS: usize = 1024;

/// Shards or transports remembered per peer; past it the peer's new direction is refused and
/// counted (its weight is credited once per kind anyway).
pub const MAX_DIRECTIONS_PER_PEER: usize = 16;

/// The share of strain records from one peer, in thousandths, at which the node is a flag tree
/// (not in the text, docs/decisions.md): nine in ten.
pub const FLAG_TREE_SHARE_MILLI: u64 = 900;

/// Records below which no share is read as a flag tree: a handful of records is no structure.
pub const FLAG_TREE_MIN_RECORDS: u64 = 10;

/// What kind of direction a reserve counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// One peer.
    Peer,
    /// One shard.
    Shard,
    /// One transport (a binding or scheme name).
    Transport,
}

/// What was weathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The peer restarted.
    Restart,
    /// The peer went quiet (a partition).
    Quiet,
    /// A relay or transport dropped.
    Dropped,
    /// A clock drifted beyond the skew the window absorbs.
    ClockDrift,
}

/// Where a strain record comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This node saw it.
    Observed,
    /// A peer's own account of what it weathered: a claim, not evidence.
    PeerAccount,
}

/// One record of stress survived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strain {
    /// The peer it came through.
    pub peer: [u8; 32],
    /// The tier this node granted that peer (`None`: no grant, weight zero).
    pub tier: Option<Tier>,
    /// The shard it touched, if any.
    pub shard: Option<String>,
    /// The transport it came over, if any.
    pub transport: Option<String>,
    /// What it was.
    pub cause: Cause,
}

/// What became of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Kept.
    Kept,
    /// A peer's own account: not evidence, not kept.
    Claim,
    /// The quiet of a peer that announced `retiring`: told in advance, not stress.
    Told,
    /// Past [`MAX_STRAIN_PEERS`] or [`MAX_DIRECTIONS_PER_PEER`]: refused.
    Full,
}

/// A direction of one kind: a shard or transport name, or a peer's key.
type DirectionKey<'a> = (Option<&'a String>, Option<&'a [u8; 32]>);

#[derive(Clone, Debug, Default)]
struct PeerStrain {
    weight_milli: u64,
    records: u64,
    shards: BTreeSet<String>,
    transports: BTreeSet<String>,
}

/// A node's strain records: bounded, local, never a finding.
#[derive(Clone, Debug, Default)]
pub struct StrainLog {
    peers: BTreeMap<[u8; 32], PeerStrain>,
    retiring: BTreeSet<[u8; 32]>,
    records: u64,
    claims: u64,
    refused: u64,
}

impl StrainLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that `peer` published a heartbeat carrying `retiring` (§3.3): the quiet that
    /// follows is not recorded. Returns false when the set is full (then the quiet is recorded,
    /// which is true: a partition happened).
    pub fn retiring(&mut self, peer: [u8; 32]) -> bool {
        if self.retiring.len() >= MAX_STRAIN_PEERS && !self.retiring.contains(&peer) {
            self.refused += 1;
            return false;
        }
        self.retiring.insert(peer);
        true
    }

    /// Records one strain.
    pub fn record(&mut self, strain: &Strain, source: Source) -> Recorded {
        if source == Source::PeerAccount {
            self.claims += 1;
            return Recorded::Claim;
        }
        if strain.cause == Cause::Quiet && self.retiring.contains(&strain.peer) {
            return Recorded::Told;
        }
        if !self.peers.contains_key(&strain.peer) && self.peers.len() >= MAX_STRAIN_PEERS {
            self.refused += 1;
            return Recorded::Full;
        }
        let p = self.peers.entry(strain.peer).or_default();
        let mut full = false;
        for (set, d) in [
            (&mut p.shards, &strain.shard),
            (&mut p.transports, &strain.transport),
        ] {
            if let Some(d) = d {
                if set.len() >= MAX_DIRECTIONS_PER_PEER && !set.contains(d) {
                    full = true;
                } else {
                    set.insert(d.clone());
                }
            }
        }
        // The weight is the tier granted now: a peer raised by a person counts at its new tier.
        p.weight_milli = strain.tier.map_or(0, Tier::weight_milli);
        p.records += 1;
        self.records += 1;
        if full {
            self.refused += 1;
            return Recorded::Full;
        }
        Recorded::Kept
    }

    /// The reserve of one kind, in thousandths of a direction.
    pub fn reserve_milli(&self, kind: Kind) -> u64 {
        // Every direction of this kind, each with the peers that strained it.
        let mut directions: BTreeMap<DirectionKey<'_>, Vec<&[u8; 32]>> = BTreeMap::new();
        for (key, p) in &self.peers {
            match kind {
                Kind::Peer => directions.entry((None, Some(key))).or_default().push(key),
                Kind::Shard => p
                    .shards
                    .iter()
                    .for_each(|s| directions.entry((Some(s), None)).or_default().push(key)),
                Kind::Transport => p
                    .transports
                    .iter()
                    .for_each(|t| directions.entry((Some(t), None)).or_default().push(key)),
            }
        }
        let mut credited: BTreeSet<&[u8; 32]> = BTreeSet::new();
        let mut total = 0u64;
        for peers in directions.values() {
            let best = peers
                .iter()
                .filter(|k| !credited.contains(**k) && self.peers[**k].weight_milli > 0)
                .max_by(|a, b| {
                    self.peers[**a]
                        .weight_milli
                        .cmp(&self.peers[**b].weight_milli)
                        .then(b.cmp(a))
                });
            if let Some(k) = best {
                credited.insert(k);
                total += self.peers[*k].weight_milli.min(DIRECTION_WORTH_MILLI);
            }
        }
        total.min(RESERVE_CAP_DIRECTIONS * DIRECTION_WORTH_MILLI)
    }

    /// The peer nearly all strain came from, if the node is a flag tree: for the operator's
    /// report, never a finding.
    pub fn flag_tree(&self) -> Option<[u8; 32]> {
        if self.records < FLAG_TREE_MIN_RECORDS {
            return None;
        }
        self.peers
            .iter()
            .find(|(_, p)| p.records * 1000 >= FLAG_TREE_SHARE_MILLI * self.records)
            .map(|(k, _)| *k)
    }

    /// Records kept.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Peers' own accounts offered and not kept.
    pub fn claims(&self) -> u64 {
        self.claims
    }

    /// Records refused because a bound was reached.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(peer: u8, tier: Option<Tier>, shard: &str, transport: &str) -> Strain {
        Strain {
            peer: [peer; 32],
            tier,
            shard: (!shard.is_empty()).then(|| shard.into()),
            transport: (!transport.is_empty()).then(|| transport.into()),
            cause: Cause::Dropped,
        }
    }

    #[test]
    fn one_peer_moves_each_reserve_by_one_direction_however_hard_it_pushes() {
        let mut log = StrainLog::new();
        for i in 0..10_000u32 {
            let shard = alloc::format!("shard-{}", i % 12);
            let t = alloc::format!("t{}", i % 7);
            log.record(&s(1, Some(Tier::Anchor), &shard, &t), Source::Observed);
        }
        for k in [Kind::Peer, Kind::Shard, Kind::Transport] {
            assert_eq!(log.reserve_milli(k), DIRECTION_WORTH_MILLI, "{k:?}");
        }
        // A second, independent peer is a second direction.
        log.record(&s(2, Some(Tier::Anchor), "other", "wss"), Source::Observed);
        assert_eq!(log.reserve_milli(Kind::Peer), 2000);
        assert_eq!(log.reserve_milli(Kind::Shard), 2000);
        assert_eq!(log.reserve_milli(Kind::Transport), 2000);
    }

    #[test]
    fn directions_are_weighted_by_the_granted_tier_and_probation_buys_none() {
        let mut log = StrainLog::new();
        for i in 0..200u8 {
            log.record(&s(i, Some(Tier::Probation), "x", "wss"), Source::Observed);
            log.record(&s(i, None, "y", "iroh"), Source::Observed);
        }
        for k in [Kind::Peer, Kind::Shard, Kind::Transport] {
            assert_eq!(log.reserve_milli(k), 0, "free identities bought {k:?}");
        }
        let mut log = StrainLog::new();
        log.record(&s(1, Some(Tier::Member), "a", ""), Source::Observed);
        log.record(&s(2, Some(Tier::Trusted), "b", ""), Source::Observed);
        log.record(&s(3, Some(Tier::Anchor), "c", ""), Source::Observed);
        assert_eq!(log.reserve_milli(Kind::Peer), 250 + 600 + 1000);
        assert_eq!(log.reserve_milli(Kind::Shard), 250 + 600 + 1000);
        assert_eq!(log.reserve_milli(Kind::Transport), 0);
        // Two peers through one shard: one shard direction, credited to the heavier.
        let mut log = StrainLog::new();
        log.record(&s(1, Some(Tier::Member), "a", ""), Source::Observed);
        log.record(&s(2, Some(Tier::Anchor), "a", ""), Source::Observed);
        assert_eq!(log.reserve_milli(Kind::Shard), 1000);
        assert_eq!(log.reserve_milli(Kind::Peer), 1250);
    }

    #[test]
    fn reserves_are_capped() {
        let mut log = StrainLog::new();
        for i in 0..100u8 {
            let shard = alloc::format!("s{i}");
            log.record(&s(i, Some(Tier::Anchor), &shard, ""), Source::Observed);
        }
        let cap = RESERVE_CAP_DIRECTIONS * DIRECTION_WORTH_MILLI;
        assert_eq!(log.reserve_milli(Kind::Peer), cap);
        assert_eq!(log.reserve_milli(Kind::Shard), cap);
    }

    #[test]
    fn a_peers_own_account_is_a_claim_and_is_not_kept() {
        let mut log = StrainLog::new();
        let r = s(1, Some(Tier::Anchor), "a", "wss");
        assert_eq!(log.record(&r, Source::PeerAccount), Recorded::Claim);
        assert_eq!(log.records(), 0);
        assert_eq!(log.claims(), 1);
        assert_eq!(log.reserve_milli(Kind::Peer), 0);
        assert_eq!(log.record(&r, Source::Observed), Recorded::Kept);
        assert_eq!(log.reserve_milli(Kind::Peer), 1000);
    }

    #[test]
    fn the_quiet_after_retiring_is_not_stress() {
        let mut log = StrainLog::new();
        let mut quiet = s(1, Some(Tier::Anchor), "", "");
        quiet.cause = Cause::Quiet;
        assert!(log.retiring([1; 32]));
        assert_eq!(log.record(&quiet, Source::Observed), Recorded::Told);
        assert_eq!(log.reserve_milli(Kind::Peer), 0);
        // Anything else from it, or the quiet of another peer, is stress.
        let mut restart = quiet.clone();
        restart.cause = Cause::Restart;
        assert_eq!(log.record(&restart, Source::Observed), Recorded::Kept);
        let mut other = quiet.clone();
        other.peer = [2; 32];
        assert_eq!(log.record(&other, Source::Observed), Recorded::Kept);
    }

    #[test]
    fn strain_nearly_all_from_one_peer_is_a_flag_tree() {
        let mut log = StrainLog::new();
        for _ in 0..9 {
            log.record(&s(1, Some(Tier::Member), "", ""), Source::Observed);
        }
        assert_eq!(log.flag_tree(), None, "too few records to be structure");
        log.record(&s(2, Some(Tier::Member), "", ""), Source::Observed);
        assert_eq!(log.flag_tree(), Some([1; 32]), "nine in ten");
        log.record(&s(3, Some(Tier::Member), "", ""), Source::Observed);
        assert_eq!(log.flag_tree(), None, "nine in eleven is under the share");
    }

    #[test]
    fn every_table_is_bounded() {
        let mut log = StrainLog::new();
        for i in 0..MAX_STRAIN_PEERS as u32 + 10 {
            let mut r = s(0, Some(Tier::Member), "", "");
            r.peer[..4].copy_from_slice(&i.to_be_bytes());
            log.record(&r, Source::Observed);
            log.retiring(r.peer);
        }
        assert_eq!(log.peers.len(), MAX_STRAIN_PEERS);
        assert_eq!(log.retiring.len(), MAX_STRAIN_PEERS);
        assert_eq!(log.refused(), 20);
        let mut log = StrainLog::new();
        for i in 0..MAX_DIRECTIONS_PER_PEER + 5 {
            let shard = alloc::format!("s{i}");
            log.record(&s(1, Some(Tier::Member), &shard, &shard), Source::Observed);
        }
        assert_eq!(log.peers[&[1; 32]].shards.len(), MAX_DIRECTIONS_PER_PEER);
        assert_eq!(
            log.peers[&[1; 32]].transports.len(),
            MAX_DIRECTIONS_PER_PEER
        );
        assert_eq!(log.refused(), 5);
    }
}
