//! The I/O side of relay peering's outbound sync (spec 002, PEERING.md §6): everything the sync
//! worker machine (`weft_proto::nostr::sync`) needs done in the world, and nothing it decides.
//!
//! - [`dial`]: the peer's NIP-11 document over HTTP(S), redirects followed by hand, and the
//!   WebSocket dial target, both only ever connecting to an address the address policy
//!   (`weft_proto::nostr::sync::address`) checked (§6 step 1: loopback, private and link-local
//!   addresses refused, literal or resolved, on every redirect, unless
//!   `peering.allowPrivateNetworks`).
//! - [`runner`]: one sync worker per enabled peer on the relay's own loop, its store operations
//!   run on the relay's store, its live events broadcast to the relay's sessions, its blocking
//!   jobs (the fetch, the dial's check) on threads of their own.

pub mod dial;
pub mod runner;

use serde_json::Value;
use weft_proto::core::Timestamp;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret};
use weft_proto::nostr::peering::identity::{RelayKey, derive_secret};
use weft_proto::nostr::peering::trust::TrustList;
use weft_proto::nostr::sync::worker::{self, SyncLimits, Worker};

/// How this relay syncs from its peers: the settings `--config` gives beyond the trust list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncOptions {
    /// `peering.allowPrivateNetworks` (default false): dial loopback, private and link-local
    /// peers, for a LAN or a test.
    pub allow_private_networks: bool,
    /// The workers' bounds (weft's defaults; `peering.sync.negFrameBytes` sets the largest
    /// NIP-77 message a worker writes).
    pub limits: SyncLimits,
    /// A PEM file of the only certificate authorities `wss://` and `https://` peers are trusted
    /// under (`peering.caFile`; default the Mozilla roots).
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for SyncOptions {
    fn default() -> Self {
        Self {
            allow_private_networks: false,
            limits: SyncLimits::DEFAULT,
            ca_file: None,
        }
    }
}

/// Reads `peering.allowPrivateNetworks`, `peering.caFile` and `peering.sync.negFrameBytes`
/// from a settings document into `options`; a key of the wrong type is refused by name.
pub fn apply(doc: &Value, options: &mut SyncOptions) -> Result<(), String> {
    let settings = crate::nostr::config::Settings(doc);
    let at = |path: &str| settings.at(path);
    if let Some(v) = at("peering.allowPrivateNetworks") {
        options.allow_private_networks = v
            .as_bool()
            .ok_or("peering.allowPrivateNetworks: not true or false")?;
    }
    if let Some(v) = at("peering.caFile") {
        options.ca_file = Some(v.as_str().ok_or("peering.caFile: not a string")?.into());
    }
    if let Some(v) = at("peering.sync.negFrameBytes") {
        let n = v
            .as_u64()
            .filter(|&n| n == 0 || n >= 4_096)
            .ok_or("peering.sync.negFrameBytes: not 0 or an integer of at least 4096")?;
        options.limits.neg_frame_bytes = n;
    }
    Ok(())
}

/// The secret the workers sign their NIP-42 `AUTH` with: the relay key's, read again from the
/// environment as [`RelayKey::from_env`] reads it (`RELAY_PRIVATE_KEY` wins, else derived from
/// `SECRET` over `relay_url`), and refused unless its public key is `key`'s, so the workers can
/// never sign as another relay than the one this relay advertises.
pub fn worker_secret(
    provider: &dyn CryptoProvider,
    env: impl Fn(&str) -> Option<String>,
    relay_url: &str,
    key: &RelayKey,
) -> Result<Secp256k1Secret, String> {
    let private = env(super::peering::ENV_RELAY_PRIVATE_KEY).filter(|k| !k.trim().is_empty());
    let bytes = match private {
        Some(hex) => weft_proto::codec::hex::decode_array::<32>(&hex.trim().to_ascii_lowercase())
            .map_err(|_| "RELAY_PRIVATE_KEY: not 64 hex digits".to_string())?,
        None => {
            let secret = env(super::peering::ENV_SECRET)
                .filter(|s| !s.is_empty())
                .ok_or("no relay key to sign peer AUTH with: set SECRET or RELAY_PRIVATE_KEY")?;
            derive_secret(provider, secret.as_bytes(), relay_url)
        }
    };
    let secret = Secp256k1Secret::from_bytes(bytes);
    match provider.schnorr_public_key(&secret) {
        Ok(pk) if pk == key.pubkey() => Ok(secret),
        _ => Err("the key read for peer AUTH is not the relay's key".into()),
    }
}

/// One worker per enabled entry of `trust`, in its order, started at `now`.
pub fn workers<R: weft_proto::core::rand_core::CryptoRng>(
    trust: &TrustList,
    options: &SyncOptions,
    own_url: &str,
    secret: &Secp256k1Secret,
    provider: &'static dyn CryptoProvider,
    now: Timestamp,
    mut rng: impl FnMut() -> R,
) -> Vec<Worker<R>> {
    trust
        .enabled()
        .map(|entry| {
            Worker::new(
                worker::Config {
                    peer_pubkey: entry.pubkey,
                    relay_url: entry.relay_url.clone(),
                    own_url: own_url.to_string(),
                    secret: secret.clone(),
                    provider,
                    allow_private_networks: options.allow_private_networks,
                    limits: options.limits,
                },
                now,
                rng(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weft_proto::codec::hex;
    use weft_proto::core::rand_core::SeedableRng;

    const PRIVATE: &str = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
    const URL: &str = "wss://relay.example.com";

    fn provider() -> &'static dyn CryptoProvider {
        crate::server_provider()
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_worker_key_must_be_the_relays_key() {
        let key = RelayKey::from_private_key_hex(provider(), PRIVATE).unwrap();
        let secret = worker_secret(
            provider(),
            env(&[("RELAY_PRIVATE_KEY", PRIVATE), ("SECRET", "ignored")]),
            URL,
            &key,
        )
        .unwrap();
        assert_eq!(
            provider().schnorr_public_key(&secret).unwrap(),
            key.pubkey()
        );
        // Derived from SECRET over the relay's URL, as the relay's own key is.
        let derived = RelayKey::derive(provider(), b"s3cret", URL).unwrap();
        let secret =
            worker_secret(provider(), env(&[("SECRET", "s3cret")]), URL, &derived).unwrap();
        assert_eq!(
            provider().schnorr_public_key(&secret).unwrap(),
            derived.pubkey()
        );
        // Another URL, another SECRET, or no key at all: never a key other than the relay's.
        for vars in [
            &[("SECRET", "s3cret")][..],
            &[("SECRET", "other")][..],
            &[][..],
            &[("RELAY_PRIVATE_KEY", "zz")][..],
        ] {
            let url = if vars.is_empty() {
                URL
            } else {
                "wss://elsewhere.example"
            };
            assert!(
                worker_secret(provider(), env(vars), url, &derived).is_err(),
                "{vars:?}"
            );
        }
        let e = worker_secret(
            provider(),
            env(&[("RELAY_PRIVATE_KEY", PRIVATE)]),
            URL,
            &derived,
        )
        .unwrap_err();
        assert!(!e.contains(PRIVATE), "{e}");
    }

    #[test]
    fn one_worker_per_enabled_peer_and_none_for_a_disabled_one() {
        let pk = |seed: u64| {
            let k = weft_proto::crypto::generate_secp256k1(
                provider(),
                &mut chacha20::ChaCha20Rng::seed_from_u64(seed),
            );
            provider().schnorr_public_key(&k).unwrap()
        };
        let (a, b, c) = (pk(1), pk(2), pk(3));
        let trust = TrustList::from_value(&json!([
            {"pubkey": hex::encode(&a), "relayUrl": "wss://a.example"},
            {"pubkey": hex::encode(&b), "relayUrl": "wss://b.example", "enabled": false},
            {"pubkey": hex::encode(&c), "relayUrl": "wss://c.example", "enabled": true},
        ]))
        .unwrap();
        let key = RelayKey::from_private_key_hex(provider(), PRIVATE).unwrap();
        let secret = worker_secret(
            provider(),
            env(&[("RELAY_PRIVATE_KEY", PRIVATE)]),
            URL,
            &key,
        )
        .unwrap();
        let mut seed = 0;
        let mut workers = workers(
            &trust,
            &SyncOptions::default(),
            URL,
            &secret,
            provider(),
            Timestamp::from_secs(1_790_000_000),
            || {
                seed += 1;
                chacha20::ChaCha20Rng::seed_from_u64(seed)
            },
        );
        let peers: Vec<[u8; 32]> = workers.iter().map(|w| w.status().peer).collect();
        assert_eq!(peers, vec![a, c]);
        // Each asks its own peer's NIP-11 first.
        let urls: Vec<String> = workers
            .iter_mut()
            .filter_map(|w| match weft_proto::core::Machine::poll(w) {
                Some(weft_proto::nostr::sync::worker::Output::FetchInfo { url }) => Some(url),
                _ => None,
            })
            .collect();
        assert_eq!(urls, vec!["https://a.example", "https://c.example"]);
    }

    #[test]
    fn sync_settings_are_read_and_wrong_types_refused() {
        let mut o = SyncOptions::default();
        assert!(!o.allow_private_networks);
        apply(
            &json!({"peering": {"allowPrivateNetworks": true, "caFile": "/etc/ca.pem",
                "sync": {"negFrameBytes": 8192}}}),
            &mut o,
        )
        .unwrap();
        assert!(o.allow_private_networks);
        assert_eq!(
            o.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(o.limits.neg_frame_bytes, 8192);
        for (doc, key) in [
            (
                json!({"peering": {"allowPrivateNetworks": "yes"}}),
                "allowPrivateNetworks",
            ),
            (json!({"peering": {"caFile": 3}}), "caFile"),
            (
                json!({"peering": {"sync": {"negFrameBytes": 100}}}),
                "negFrameBytes",
            ),
            (
                json!({"peering": {"sync": {"negFrameBytes": -1}}}),
                "negFrameBytes",
            ),
        ] {
            let e = apply(&doc, &mut SyncOptions::default()).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
    }
}
