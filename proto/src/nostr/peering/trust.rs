//! The trust list, `peering.peers` (spec 002 §3 "Configuring peers"): each entry a peer's pubkey
//! (64 hex digits or `npub1…`), the `relayUrl` it is reached at outbound (also the value of the
//! NIP-42 `relay` tag this relay signs for it), and `enabled` (default true).
//!
//! Loading refuses, naming the entry: a pubkey that is neither hex nor an `npub`, a `relayUrl`
//! that is not `ws://` or `wss://` with a host, an unknown key in an entry (a misspelt `enabled`
//! must not silently trust), a duplicate pubkey — compared after decoding, so one key written
//! once as hex and once as an `npub` is a duplicate — and more than [`MAX_PEERS`] entries.
//! The list is independent of `peering.enabled`, which controls only the NIP-11 advertisement.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;

use super::identity::parse_pubkey;
use crate::codec::hex;
use crate::nostr::auth::host_of;

/// Most `peering.peers` entries. The spec sets none; every peer costs a sync worker and a
/// request budget, and an operator with more than a few dozen peers runs a network, not a relay.
pub const MAX_PEERS: usize = 256;

/// Longest `relayUrl`, in bytes.
pub const MAX_RELAY_URL_BYTES: usize = 2_048;

/// One `peering.peers` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerEntry {
    /// The peer relay's pubkey.
    pub pubkey: [u8; 32],
    /// Where it is reached outbound, and the `relay` tag of the `AUTH` this relay sends it.
    pub relay_url: String,
    /// Whether it is trusted now (a disabled entry is an ordinary client inbound and gets no
    /// sync worker outbound).
    pub enabled: bool,
}

impl PeerEntry {
    /// The pubkey as 64 lower-case hex digits.
    pub fn pubkey_hex(&self) -> String {
        hex::encode(&self.pubkey)
    }
}

/// Why a trust list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrustError {
    /// `peering.peers` is not a list, or an entry is not a map.
    NotAList,
    /// An entry is not a map.
    NotAMap {
        /// The entry's index.
        index: usize,
    },
    /// An entry's `pubkey` is missing or is neither 64 hex digits nor an `npub`.
    BadPubkey {
        /// The entry's index.
        index: usize,
    },
    /// An entry's `relayUrl` is missing or not a `ws://`/`wss://` URL with a host.
    BadRelayUrl {
        /// The entry's index.
        index: usize,
    },
    /// An entry's `enabled` is not a boolean.
    BadEnabled {
        /// The entry's index.
        index: usize,
    },
    /// An entry has a key the trust list does not know.
    UnknownKey {
        /// The entry's index.
        index: usize,
        /// The key.
        key: String,
    },
    /// Two entries name the same pubkey (however written).
    Duplicate {
        /// The first entry's index.
        first: usize,
        /// The repeating entry's index.
        index: usize,
        /// The pubkey, as hex.
        pubkey: String,
    },
    /// More than [`MAX_PEERS`] entries.
    TooMany,
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAList => f.write_str("peering.peers: not a list"),
            Self::NotAMap { index } => write!(f, "peering.peers[{index}]: not a map"),
            Self::BadPubkey { index } => write!(
                f,
                "peering.peers[{index}].pubkey: missing, or neither 64 hex digits nor an npub1 key"
            ),
            Self::BadRelayUrl { index } => write!(
                f,
                "peering.peers[{index}].relayUrl: missing, or not a ws:// or wss:// URL with a host"
            ),
            Self::BadEnabled { index } => {
                write!(f, "peering.peers[{index}].enabled: not true or false")
            }
            Self::UnknownKey { index, key } => {
                write!(f, "peering.peers[{index}]: unknown key {key:?}")
            }
            Self::Duplicate {
                first,
                index,
                pubkey,
            } => write!(
                f,
                "peering.peers[{index}].pubkey: {pubkey} is already peering.peers[{first}] \
                 (hex and npub name the same key)"
            ),
            Self::TooMany => write!(f, "peering.peers: more than {MAX_PEERS} entries"),
        }
    }
}

impl core::error::Error for TrustError {}

/// Whether `url` is a `ws://` or `wss://` URL with a host, no whitespace, within
/// [`MAX_RELAY_URL_BYTES`].
pub fn is_relay_url(url: &str) -> bool {
    let lower = url
        .get(..6)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    url.len() <= MAX_RELAY_URL_BYTES
        && (lower.starts_with("ws://") || lower.starts_with("wss://"))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
        && host_of(url).is_some()
}

/// The configured peers, in file order, each pubkey once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustList {
    entries: Vec<PeerEntry>,
    by_key: BTreeMap<[u8; 32], usize>,
}

impl TrustList {
    /// An empty list: no relay is a peer.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The list of `entries`, refused as a whole on a bad URL, a duplicate key or too many.
    pub fn new(entries: Vec<PeerEntry>) -> Result<Self, TrustError> {
        if entries.len() > MAX_PEERS {
            return Err(TrustError::TooMany);
        }
        let mut by_key = BTreeMap::new();
        for (index, e) in entries.iter().enumerate() {
            if !is_relay_url(&e.relay_url) {
                return Err(TrustError::BadRelayUrl { index });
            }
            if let Some(&first) = by_key.get(&e.pubkey) {
                return Err(TrustError::Duplicate {
                    first,
                    index,
                    pubkey: e.pubkey_hex(),
                });
            }
            by_key.insert(e.pubkey, index);
        }
        Ok(Self { entries, by_key })
    }

    /// The list a settings file's `peering.peers` value gives (YAML read into JSON values):
    /// a list of maps with `pubkey`, `relayUrl` and optional `enabled`.
    pub fn from_value(value: &Value) -> Result<Self, TrustError> {
        let list = value.as_array().ok_or(TrustError::NotAList)?;
        if list.len() > MAX_PEERS {
            return Err(TrustError::TooMany);
        }
        let mut entries = Vec::with_capacity(list.len());
        for (index, item) in list.iter().enumerate() {
            let map = item.as_object().ok_or(TrustError::NotAMap { index })?;
            if let Some(key) = map
                .keys()
                .find(|k| !matches!(k.as_str(), "pubkey" | "relayUrl" | "enabled"))
            {
                return Err(TrustError::UnknownKey {
                    index,
                    key: key.to_string(),
                });
            }
            let pubkey = map
                .get("pubkey")
                .and_then(Value::as_str)
                .and_then(parse_pubkey)
                .ok_or(TrustError::BadPubkey { index })?;
            let relay_url = map
                .get("relayUrl")
                .and_then(Value::as_str)
                .filter(|u| is_relay_url(u))
                .ok_or(TrustError::BadRelayUrl { index })?
                .to_string();
            let enabled = match map.get("enabled") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(TrustError::BadEnabled { index }),
            };
            entries.push(PeerEntry {
                pubkey,
                relay_url,
                enabled,
            });
        }
        Self::new(entries)
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[PeerEntry] {
        &self.entries
    }

    /// The enabled entries, in file order (one sync worker each).
    pub fn enabled(&self) -> impl Iterator<Item = &PeerEntry> {
        self.entries.iter().filter(|e| e.enabled)
    }

    /// The entry for `pubkey`, enabled or not.
    pub fn get(&self, pubkey: &[u8; 32]) -> Option<&PeerEntry> {
        self.by_key.get(pubkey).map(|&i| &self.entries[i])
    }

    /// Whether `pubkey` is an enabled peer: the only test that selects peer treatment.
    pub fn is_enabled_peer(&self, pubkey: &[u8; 32]) -> bool {
        self.get(pubkey).is_some_and(|e| e.enabled)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A short description of `list` for logs: counts only.
pub fn summary(list: &TrustList) -> String {
    format!(
        "{} peers configured, {} enabled",
        list.len(),
        list.enabled().count()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::bech32;
    use alloc::vec;
    use serde_json::json;

    fn key(b: u8) -> [u8; 32] {
        [b; 32]
    }

    #[test]
    fn hex_and_npub_both_read_and_enabled_defaults_to_true() {
        let v = json!([
            {"pubkey": hex::encode(&key(1)), "relayUrl": "wss://peer.example.com", "enabled": true},
            {"pubkey": bech32::encode_npub(&key(2)), "relayUrl": "wss://archive.example.com"},
            {"pubkey": hex::encode(&key(3)).to_uppercase(), "relayUrl": "ws://lan:7777", "enabled": false},
        ]);
        let t = TrustList::from_value(&v).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.is_enabled_peer(&key(1)));
        assert!(t.is_enabled_peer(&key(2)));
        assert_eq!(
            t.get(&key(2)).unwrap().relay_url,
            "wss://archive.example.com"
        );
        assert!(!t.is_enabled_peer(&key(3)));
        assert!(t.get(&key(3)).is_some());
        assert!(!t.is_enabled_peer(&key(4)));
        assert_eq!(t.enabled().count(), 2);
    }

    #[test]
    fn one_key_as_hex_and_as_npub_is_a_duplicate() {
        let v = json!([
            {"pubkey": hex::encode(&key(7)), "relayUrl": "wss://a.example.com"},
            {"pubkey": bech32::encode_npub(&key(7)), "relayUrl": "wss://b.example.com"},
        ]);
        let e = TrustList::from_value(&v).unwrap_err();
        assert_eq!(
            e,
            TrustError::Duplicate {
                first: 0,
                index: 1,
                pubkey: hex::encode(&key(7))
            }
        );
        // Upper- and lower-case hex too.
        let v = json!([
            {"pubkey": hex::encode(&[0xab; 32]), "relayUrl": "wss://a.example.com"},
            {"pubkey": hex::encode(&[0xab; 32]).to_uppercase(), "relayUrl": "wss://a.example.com"},
        ]);
        assert!(matches!(
            TrustList::from_value(&v),
            Err(TrustError::Duplicate { .. })
        ));
        // A disabled duplicate is still a duplicate.
        let dup = vec![
            PeerEntry {
                pubkey: key(1),
                relay_url: "wss://a.example.com".into(),
                enabled: false,
            },
            PeerEntry {
                pubkey: key(1),
                relay_url: "wss://b.example.com".into(),
                enabled: true,
            },
        ];
        assert!(matches!(
            TrustList::new(dup),
            Err(TrustError::Duplicate { .. })
        ));
    }

    #[test]
    fn bad_keys_urls_and_shapes_are_refused_by_entry() {
        let ok = hex::encode(&key(1));
        let cases = [
            (
                json!([{"pubkey": "abcd", "relayUrl": "wss://a.example.com"}]),
                TrustError::BadPubkey { index: 0 },
            ),
            (
                json!([{"pubkey": "npub1qqqqqq", "relayUrl": "wss://a.example.com"}]),
                TrustError::BadPubkey { index: 0 },
            ),
            (
                json!([{"pubkey": bech32::encode_nsec(&key(1)), "relayUrl": "wss://a.example.com"}]),
                TrustError::BadPubkey { index: 0 },
            ),
            (
                json!([{"relayUrl": "wss://a.example.com"}]),
                TrustError::BadPubkey { index: 0 },
            ),
            (
                json!([{"pubkey": ok, "relayUrl": "https://a.example.com"}]),
                TrustError::BadRelayUrl { index: 0 },
            ),
            (
                json!([{"pubkey": ok, "relayUrl": "wss://"}]),
                TrustError::BadRelayUrl { index: 0 },
            ),
            (
                json!([{"pubkey": ok, "relayUrl": "wss://a b"}]),
                TrustError::BadRelayUrl { index: 0 },
            ),
            (
                json!([{"pubkey": ok}]),
                TrustError::BadRelayUrl { index: 0 },
            ),
            (
                json!([{"pubkey": ok, "relayUrl": "wss://a.example.com", "enabled": "yes"}]),
                TrustError::BadEnabled { index: 0 },
            ),
            (
                json!([{"pubkey": ok, "relayUrl": "wss://a.example.com", "enable": false}]),
                TrustError::UnknownKey {
                    index: 0,
                    key: "enable".into(),
                },
            ),
            (json!({"pubkey": ok}), TrustError::NotAList),
            (json!(["x"]), TrustError::NotAMap { index: 0 }),
        ];
        for (v, want) in cases {
            assert_eq!(TrustList::from_value(&v).unwrap_err(), want, "{v}");
        }
        let long = format!("wss://a.example.com/{}", "x".repeat(MAX_RELAY_URL_BYTES));
        assert!(!is_relay_url(&long));
    }

    #[test]
    fn the_list_is_bounded() {
        let many: Vec<Value> = (0..=MAX_PEERS)
            .map(|i| {
                let mut k = [0u8; 32];
                k[..8].copy_from_slice(&(i as u64).to_be_bytes());
                json!({"pubkey": hex::encode(&k), "relayUrl": "wss://a.example.com"})
            })
            .collect();
        assert_eq!(
            TrustList::from_value(&Value::Array(many.clone())).unwrap_err(),
            TrustError::TooMany
        );
        assert_eq!(
            TrustList::from_value(&Value::Array(many[..MAX_PEERS].to_vec()))
                .unwrap()
                .len(),
            MAX_PEERS
        );
    }
}
