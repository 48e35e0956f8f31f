//! Relay peering (spec 002, nostream's PEERING.md), the parts a relay needs to be peered *with*:
//! its own identity, whom it trusts, what a trusted peer may ask for, and the status rows an
//! operator reads. The outbound sync worker, which peers *to* another relay, lives beside these
//! and takes them as its inputs.
//!
//! - [`identity`]: §2, the relay keypair (`RELAY_PRIVATE_KEY`, or derived from `SECRET` as
//!   nostream does) and the `self` pubkey NIP-11 advertises;
//! - [`trust`]: §3, the `peering.peers` trust list;
//! - [`limiter`]: §8, the per-peer on-demand request budget and the [`Admission`] a session is
//!   answered with;
//! - [`status`]: §6 and §8, the per-peer rows of `GET /admin/peering`.
//!
//! Peer treatment on a connection (§4, §7: a verified `AUTH` from an enabled peer selects
//! `limits.peer`) is the relay session's ([`crate::nostr::relay::session`]), configured with a
//! [`PeerTreatment`].

pub mod identity;
pub mod limiter;
pub mod status;
pub mod trust;

use alloc::collections::BTreeSet;
use alloc::sync::Arc;

pub use identity::{IdentityError, RelayKey, advertised_self, parse_pubkey};
pub use limiter::{Admission, PeerRequestLimiter, RateLimit, RequestBudget};
pub use status::{PeerStatus, StatusTable, SyncStatus};
pub use trust::{PeerEntry, TrustError, TrustList};

use crate::nostr::limits::Limits;

/// What a relay session needs to recognise a peer and treat it as one: the enabled peers'
/// pubkeys and the limits they get. Shared by every session of a relay (the key set is behind an
/// `Arc`, so a new connection does not copy it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTreatment {
    peers: Arc<BTreeSet<[u8; 32]>>,
    /// The bounds on a peer's connection (`limits.peer`).
    pub limits: Limits,
}

impl Default for PeerTreatment {
    /// No peers: every connection is a client.
    fn default() -> Self {
        Self {
            peers: Arc::new(BTreeSet::new()),
            limits: Limits::PEER_DEFAULT,
        }
    }
}

impl PeerTreatment {
    /// Peers are the enabled entries of `trust`; they get `limits`.
    pub fn new(trust: &TrustList, limits: Limits) -> Self {
        Self {
            peers: Arc::new(trust.enabled().map(|e| e.pubkey).collect()),
            limits,
        }
    }

    /// Whether `pubkey`, once authenticated, makes a connection a peer.
    pub fn is_peer(&self, pubkey: &[u8; 32]) -> bool {
        self.peers.contains(pubkey)
    }

    /// How many enabled peers.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}
