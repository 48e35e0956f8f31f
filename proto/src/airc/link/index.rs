//! The orders a [`LinkTable`](super::LinkTable) keeps its records in, so that no question asked
//! of it per message or per request reads records that cannot answer it.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use core::cmp::Reverse;

use super::LINK_RETENTION;
use super::record::{Link, LinkState};
use crate::core::Timestamp;
use crate::core::index::remove_from_set;

/// A record's place in §11.3's order: newest `created` first; at one instant a revocation first,
/// then by id, descending, so a tie can only deny and never depends on storage order.
///
/// Only `created`, the state's being revoked and `id` take part, so a record's rank changes only
/// when it is revoked ([`Link::merge`] keeps `created` and the id as first stored).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    created: Reverse<Timestamp>,
    revoked: Reverse<bool>,
    id: Reverse<String>,
}

impl Rank {
    pub(super) fn of(link: &Link) -> Self {
        Self {
            created: Reverse(link.created),
            revoked: Reverse(link.state == LinkState::Revoked),
            id: Reverse(link.id.clone()),
        }
    }

    /// The id of the ranked record.
    pub(super) fn id(&self) -> &str {
        &self.id.0
    }
}

/// Ranks by address key, newest first.
type ByKey = BTreeMap<String, BTreeSet<Rank>>;

/// The indexes, each holding every record it covers exactly once. A record is added when stored
/// and taken out and put back around every change to it, so none can go stale.
#[derive(Clone, Debug, Default)]
pub(super) struct Index {
    /// Every record, for `list_all`.
    pub(super) newest: BTreeSet<Rank>,
    /// Records by the key of `a` and of `b` (a namespace `b` under its namespace key): what an
    /// endpoint lists.
    pub(super) by_party: ByKey,
    /// The records that can decide (§11.3: active or revoked; a pending or declined one never
    /// does), by the key of `a`, then of `b`: a decision reads only its pair's.
    pub(super) decisive: BTreeMap<String, ByKey>,
    /// Pending offers by the offerer's key, ordered by when they stop counting (`expires`, never
    /// as [`Timestamp::MAX`]), so the ones still counting are a range.
    pub(super) pending: BTreeMap<String, BTreeSet<(Timestamp, String)>>,
    /// Records that can no longer decide anything, by when they may be forgotten
    /// ([`forget_at`]).
    pub(super) lapsing: BTreeSet<(Timestamp, String)>,
}

impl Index {
    pub(super) fn add(&mut self, link: &Link) {
        let rank = Rank::of(link);
        for side in sides(link) {
            self.by_party
                .entry(side.into())
                .or_default()
                .insert(rank.clone());
        }
        if decisive(link.state) {
            self.decisive
                .entry(link.a.key().as_str().into())
                .or_default()
                .entry(link.b.key().as_str().into())
                .or_default()
                .insert(rank.clone());
        }
        if link.state == LinkState::Pending {
            self.pending
                .entry(link.offered_by.key().as_str().into())
                .or_default()
                .insert(pending_entry(link));
        }
        if let Some(at) = forget_at(link) {
            self.lapsing.insert((at, link.id.clone()));
        }
        self.newest.insert(rank);
    }

    /// Takes out what [`Index::add`] put in for `link` as it is now, dropping emptied entries so
    /// the maps hold only keys some record names.
    pub(super) fn remove(&mut self, link: &Link) {
        let rank = Rank::of(link);
        for side in sides(link) {
            remove_from_set(&mut self.by_party, side, &rank);
        }
        if decisive(link.state)
            && let Some(by_b) = self.decisive.get_mut(link.a.key().as_str())
        {
            remove_from_set(by_b, link.b.key().as_str(), &rank);
            if by_b.is_empty() {
                self.decisive.remove(link.a.key().as_str());
            }
        }
        if link.state == LinkState::Pending {
            remove_from_set(
                &mut self.pending,
                link.offered_by.key().as_str(),
                &pending_entry(link),
            );
        }
        if let Some(at) = forget_at(link) {
            self.lapsing.remove(&(at, link.id.clone()));
        }
        self.newest.remove(&rank);
    }
}

/// When `link` may be forgotten: [`LINK_RETENTION`] after it lost all effect for good (declined,
/// or past its `expires`: §11.3 passes over both). Never for a revocation, which denies for as
/// long as it is the newest record of its pair, nor for a link without an end.
pub(super) fn forget_at(link: &Link) -> Option<Timestamp> {
    let lapsed = match link.state {
        LinkState::Revoked => None,
        // Not before it was made, whatever the other side said of when it declined.
        LinkState::Declined => Some(link.declined_at.unwrap_or(link.created).max(link.created)),
        LinkState::Pending | LinkState::Active => link.expires,
    }?;
    Some(lapsed.saturating_add(LINK_RETENTION))
}

/// Whether a record in this state can decide (§11.3).
fn decisive(state: LinkState) -> bool {
    matches!(state, LinkState::Active | LinkState::Revoked)
}

fn sides(link: &Link) -> [&str; 2] {
    [link.a.key().as_str(), link.b.key().as_str()]
}

fn pending_entry(link: &Link) -> (Timestamp, String) {
    (link.expires.unwrap_or(Timestamp::MAX), link.id.clone())
}
