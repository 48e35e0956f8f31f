//! Per-peer status rows (spec 002 §6 "status, last reconciliation, latest event age (lag), and the
//! number of events the last reconciliation found missing"; §8 "request counts and the number of
//! events served … per peer pubkey"), as `GET /admin/peering` answers them and
//! `weft nostr peering` prints them.
//!
//! The outbound sync worker fills [`PeerStatus::status`], [`PeerStatus::last_reconciliation`],
//! [`PeerStatus::lag_secs`] and [`PeerStatus::missing`]; the inbound side fills
//! [`PeerStatus::requests_served`] and [`PeerStatus::events_served`]. [`StatusTable`] holds one
//! row per configured peer and nothing else, so it is bounded by the trust list. Accounting is
//! best-effort: a row that cannot be found is skipped, never an error for the request described.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Value, json};

use super::trust::TrustList;
use crate::codec::{bech32, hex};
use crate::core::Timestamp;

/// Where a peer's sync stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyncStatus {
    /// The entry is disabled: no worker, no peer treatment.
    Disabled,
    /// Enabled, and no worker has reported yet.
    Idle,
    /// Reading the peer's NIP-11 document, connecting or authenticating.
    Connecting,
    /// Reconciling history (NIP-77).
    Reconciling,
    /// Reconciled; the live feed is open.
    Live,
    /// Disconnected; waiting to reconnect.
    Backoff,
    /// The peer cannot be synced as configured (its `self` differs, it lacks NIP-77, its address
    /// is refused): the worker stopped and says why in [`PeerStatus::detail`].
    Unusable,
}

impl SyncStatus {
    /// The name `GET /admin/peering` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Idle => "idle",
            Self::Connecting => "connecting",
            Self::Reconciling => "reconciling",
            Self::Live => "live",
            Self::Backoff => "backoff",
            Self::Unusable => "unusable",
        }
    }

    /// The status a name gives (the inverse of [`SyncStatus::as_str`]).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disabled" => Self::Disabled,
            "idle" => Self::Idle,
            "connecting" => Self::Connecting,
            "reconciling" => Self::Reconciling,
            "live" => Self::Live,
            "backoff" => Self::Backoff,
            "unusable" => Self::Unusable,
            _ => return None,
        })
    }
}

/// One peer's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    /// The peer's pubkey.
    pub pubkey: [u8; 32],
    /// Its configured `relayUrl`.
    pub relay_url: String,
    /// Where its sync stands.
    pub status: SyncStatus,
    /// When the last reconciliation finished.
    pub last_reconciliation: Option<Timestamp>,
    /// Age of the newest event received from it, in seconds, at the last report.
    pub lag_secs: Option<u64>,
    /// Events the last reconciliation found missing here.
    pub missing: Option<u64>,
    /// On-demand requests (`REQ`, `COUNT`, `NEG-OPEN`) it was granted by this relay.
    pub requests_served: u64,
    /// Events this relay sent it.
    pub events_served: u64,
    /// Why, for [`SyncStatus::Unusable`] or [`SyncStatus::Backoff`]; never a secret.
    pub detail: Option<String>,
}

impl PeerStatus {
    /// A fresh row for a configured peer.
    pub fn new(pubkey: [u8; 32], relay_url: String, enabled: bool) -> Self {
        Self {
            pubkey,
            relay_url,
            status: if enabled {
                SyncStatus::Idle
            } else {
                SyncStatus::Disabled
            },
            last_reconciliation: None,
            lag_secs: None,
            missing: None,
            requests_served: 0,
            events_served: 0,
            detail: None,
        }
    }

    /// The row as `GET /admin/peering` answers it: `pubkey` (hex), `npub`, `relayUrl`, `status`,
    /// `lastReconciliation` (Unix seconds or null), `lag` (seconds or null), `missing`,
    /// `requestsServed`, `eventsServed`, `detail`.
    pub fn to_json(&self) -> Value {
        json!({
            "pubkey": hex::encode(&self.pubkey),
            "npub": bech32::encode_npub(&self.pubkey),
            "relayUrl": self.relay_url,
            "status": self.status.as_str(),
            "lastReconciliation": self.last_reconciliation.map(Timestamp::as_secs),
            "lag": self.lag_secs,
            "missing": self.missing,
            "requestsServed": self.requests_served,
            "eventsServed": self.events_served,
            "detail": self.detail,
        })
    }

    /// A row read back from [`PeerStatus::to_json`]'s form; `None` when a field is missing or
    /// has the wrong type.
    pub fn from_json(v: &Value) -> Option<Self> {
        let opt_u64 = |k: &str| match v.get(k) {
            None | Some(Value::Null) => Some(None),
            Some(x) => x.as_u64().map(Some),
        };
        Some(Self {
            pubkey: hex::decode_array::<32>(v.get("pubkey")?.as_str()?).ok()?,
            relay_url: v.get("relayUrl")?.as_str()?.into(),
            status: SyncStatus::parse(v.get("status")?.as_str()?)?,
            last_reconciliation: opt_u64("lastReconciliation")?.map(Timestamp::from_secs),
            lag_secs: opt_u64("lag")?,
            missing: opt_u64("missing")?,
            requests_served: v.get("requestsServed")?.as_u64()?,
            events_served: v.get("eventsServed")?.as_u64()?,
            detail: match v.get("detail") {
                None | Some(Value::Null) => None,
                Some(d) => Some(d.as_str()?.into()),
            },
        })
    }
}

/// One row per configured peer, in pubkey order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusTable {
    rows: BTreeMap<[u8; 32], PeerStatus>,
}

impl StatusTable {
    /// A row for every entry of `trust`.
    pub fn new(trust: &TrustList) -> Self {
        Self {
            rows: trust
                .entries()
                .iter()
                .map(|e| {
                    (
                        e.pubkey,
                        PeerStatus::new(e.pubkey, e.relay_url.clone(), e.enabled),
                    )
                })
                .collect(),
        }
    }

    /// Counts on-demand requests and events served to `peer` (best-effort: an unknown peer is
    /// skipped).
    pub fn served(&mut self, peer: &[u8; 32], requests: u64, events: u64) {
        if let Some(r) = self.rows.get_mut(peer) {
            r.requests_served = r.requests_served.saturating_add(requests);
            r.events_served = r.events_served.saturating_add(events);
        }
    }

    /// The row of `peer`, for the sync worker to update.
    pub fn get_mut(&mut self, peer: &[u8; 32]) -> Option<&mut PeerStatus> {
        self.rows.get_mut(peer)
    }

    /// The row of `peer`.
    pub fn get(&self, peer: &[u8; 32]) -> Option<&PeerStatus> {
        self.rows.get(peer)
    }

    /// Every row, in pubkey order.
    pub fn rows(&self) -> impl Iterator<Item = &PeerStatus> {
        self.rows.values()
    }

    /// Every row as the JSON list `GET /admin/peering` answers.
    pub fn to_json(&self) -> Value {
        Value::Array(self.rows().map(PeerStatus::to_json).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nostr::peering::trust::PeerEntry;
    use alloc::vec;

    #[test]
    fn rows_come_from_the_trust_list_and_count_only_configured_peers() {
        let trust = TrustList::new(vec![
            PeerEntry {
                pubkey: [2; 32],
                relay_url: "wss://b.example.com".into(),
                enabled: true,
            },
            PeerEntry {
                pubkey: [1; 32],
                relay_url: "wss://a.example.com".into(),
                enabled: false,
            },
        ])
        .unwrap();
        let mut t = StatusTable::new(&trust);
        t.served(&[2; 32], 1, 40);
        t.served(&[2; 32], 1, 2);
        t.served(&[9; 32], 5, 5);
        let rows: Vec<_> = t.rows().cloned().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].status, SyncStatus::Disabled);
        assert_eq!((rows[1].requests_served, rows[1].events_served), (2, 42));
        let json = t.to_json();
        assert_eq!(json[1]["eventsServed"], 42);
        assert_eq!(json[1]["status"], "idle");
        for (row, v) in rows.iter().zip(json.as_array().unwrap()) {
            assert_eq!(PeerStatus::from_json(v).as_ref(), Some(row));
        }
    }
}
