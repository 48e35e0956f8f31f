//! TURN REST passwords handed out by a Minca relay (Minca 04 Network §1.4 "TURN passwords", and
//! the relay half of §10).
//!
//! The relay shares a secret with a TURN server run with `use-auth-secret` (coturn); nothing is
//! stored and nothing needs revoking:
//!
//! ```text
//! expires    = floor(now_seconds) + ttlSeconds
//! username   = decimal(expires) + ":" + base64url(9 random bytes)
//! credential = base64( HMAC-SHA1( key = secret, message = UTF-8(username) ) )
//! ```
//!
//! A relay MAY hand one username to every socket of one network, so that the TURN server's
//! per-user quota caps a network rather than each request; [`TurnIssuer`] does, with a
//! [`Network`] being an IPv4 /24 or an IPv6 /64, and reuses a username while at least half its
//! lifetime remains (see [`REUSE_MIN_REMAINING_DIVISOR`]).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::fmt::Write as _;
use core::net::IpAddr;

use rand_core::CryptoRng;

use super::relay_wire::{IceServer, IceServers, MAX_ICE_URL_CHARS};
use crate::codec::{base64, base64url, js};
use crate::core::{BoundedMap, Timestamp};
use crate::crypto::CryptoProvider;

/// Random bytes after the colon of a username (§1.4: 12 base64url characters).
pub const USERNAME_RANDOM_BYTES: usize = 9;

/// Networks whose shared username a relay remembers; past it the network seen longest ago is
/// forgotten and simply gets a fresh username next time. The spec sets no bound.
pub const MAX_TURN_NETWORKS: usize = 4096;

/// A network's username is reused while more than `ttl / REUSE_MIN_REMAINING_DIVISOR` of its
/// lifetime remains, so that a client never gets a password about to expire; past that a fresh
/// one is issued.
pub const REUSE_MIN_REMAINING_DIVISOR: u64 = 2;

/// The default password lifetime in seconds when the operator names none: one day, the usual
/// coturn REST-API choice.
pub const DEFAULT_TURN_TTL_S: u64 = 86_400;

/// A relay's TURN configuration: the shared secret, the TURN URLs, the password lifetime.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnConfig {
    secret: Vec<u8>,
    urls: Vec<String>,
    ttl_s: u64,
}

impl fmt::Debug for TurnConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never reaches a log.
        f.debug_struct("TurnConfig")
            .field("urls", &self.urls)
            .field("ttl_s", &self.ttl_s)
            .finish_non_exhaustive()
    }
}

impl TurnConfig {
    /// TURN with `secret` for the servers at `urls`, passwords valid `ttl_s` seconds. Refused
    /// with an empty secret (an HMAC key anyone can use: every password would be anyone's to
    /// make), without URLs, with a lifetime of 0, or with a URL a client would drop (§2.1:
    /// `turn:` or `turns:`, shorter than [`MAX_ICE_URL_CHARS`]), so an operator's mistake shows
    /// at start rather than as TURN that never works or works for everyone.
    pub fn new(secret: &[u8], urls: Vec<String>, ttl_s: u64) -> Result<Self, TurnConfigError> {
        if secret.is_empty() {
            return Err(TurnConfigError::EmptySecret);
        }
        if urls.is_empty() {
            return Err(TurnConfigError::NoUrls);
        }
        if ttl_s == 0 {
            return Err(TurnConfigError::ZeroTtl);
        }
        if let Some(bad) = urls.iter().find(|u| {
            !(u.starts_with("turn:") || u.starts_with("turns:"))
                || js::utf16_len(u) >= MAX_ICE_URL_CHARS
        }) {
            return Err(TurnConfigError::BadUrl(bad.clone()));
        }
        Ok(Self {
            secret: secret.to_vec(),
            urls,
            ttl_s,
        })
    }

    /// The TURN URLs offered.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The password lifetime in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }
}

/// Why a [`TurnConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnConfigError {
    /// An empty shared secret.
    EmptySecret,
    /// No TURN URL.
    NoUrls,
    /// A password lifetime of 0 seconds.
    ZeroTtl,
    /// A URL that is not `turn:` or `turns:`, or too long: clients would drop it (§2.1).
    BadUrl(String),
}

impl fmt::Display for TurnConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptySecret => f.write_str("the TURN secret is empty"),
            Self::NoUrls => f.write_str("TURN needs at least one URL"),
            Self::ZeroTtl => f.write_str("the TURN password lifetime must be above 0"),
            Self::BadUrl(url) => write!(
                f,
                "TURN URL {url:?} is not turn: or turns: shorter than {MAX_ICE_URL_CHARS} characters"
            ),
        }
    }
}

impl core::error::Error for TurnConfigError {}

/// One TURN REST username and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnCredential {
    /// `decimal(expires) + ":" + base64url(9 random bytes)`.
    pub username: String,
    /// `base64(HMAC-SHA1(secret, username))`, padded.
    pub credential: String,
    /// `expires`, in Unix seconds.
    pub expires_s: u64,
}

impl fmt::Debug for TurnCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnCredential")
            .field("username", &self.username)
            .field("expires_s", &self.expires_s)
            .finish_non_exhaustive()
    }
}

impl TurnCredential {
    /// The credential for `expires_s` and `random`, under `secret` (§1.4).
    pub fn new(
        crypto: &dyn CryptoProvider,
        secret: &[u8],
        expires_s: u64,
        random: &[u8; USERNAME_RANDOM_BYTES],
    ) -> Self {
        let mut username = String::new();
        let _ = write!(username, "{expires_s}:{}", base64url::encode(random));
        let mac = crypto.hmac_sha1(secret, &[username.as_bytes()]);
        Self {
            credential: base64::encode(&mac),
            username,
            expires_s,
        }
    }

    /// A fresh credential issued at `now` for `ttl_s` seconds: `expires = floor(now_s) + ttl_s`.
    pub fn issue(
        crypto: &dyn CryptoProvider,
        rng: &mut dyn CryptoRng,
        secret: &[u8],
        now: Timestamp,
        ttl_s: u64,
    ) -> Self {
        let mut random = [0u8; USERNAME_RANDOM_BYTES];
        rng.fill_bytes(&mut random);
        Self::new(crypto, secret, now.as_secs().saturating_add(ttl_s), &random)
    }
}

/// The unit one username is shared across: an IPv4 /24 or an IPv6 /64 (an IPv4-mapped IPv6
/// address counts as IPv4). One home or office NAT sits in a /24; one IPv6 site gets a /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Network {
    /// The first three octets of an IPv4 address.
    V4([u8; 3]),
    /// The first eight octets of an IPv6 address.
    V6([u8; 8]),
}

impl Network {
    /// The network `addr` lies in.
    pub fn of(addr: IpAddr) -> Self {
        match addr.to_canonical() {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                Self::V4([o[0], o[1], o[2]])
            }
            IpAddr::V6(v6) => {
                let o = v6.octets();
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&o[..8]);
                Self::V6(prefix)
            }
        }
    }
}

/// Hands out TURN passwords, one username per [`Network`] reused while valid; see the
/// [module docs](self).
pub struct TurnIssuer {
    config: TurnConfig,
    by_network: BoundedMap<Network, TurnCredential>,
}

impl fmt::Debug for TurnIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnIssuer")
            .field("config", &self.config)
            .field("networks", &self.by_network.len())
            .finish()
    }
}

impl TurnIssuer {
    /// An issuer for `config`.
    pub fn new(config: TurnConfig) -> Self {
        Self {
            config,
            by_network: BoundedMap::new(MAX_TURN_NETWORKS),
        }
    }

    /// Networks whose username is remembered (at most [`MAX_TURN_NETWORKS`]).
    pub fn networks(&self) -> usize {
        self.by_network.len()
    }

    /// The `ice` payload for a client at `addr` at `now`: the network's username if more than
    /// `1 / REUSE_MIN_REMAINING_DIVISOR` of its lifetime remains, else a fresh one.
    pub fn offer(
        &mut self,
        crypto: &dyn CryptoProvider,
        rng: &mut dyn CryptoRng,
        now: Timestamp,
        addr: IpAddr,
    ) -> IceServers {
        let network = Network::of(addr);
        let keep_until = |c: &TurnCredential| {
            c.expires_s
                .saturating_sub(self.config.ttl_s / REUSE_MIN_REMAINING_DIVISOR)
        };
        let current = self
            .by_network
            .get(&network)
            .filter(|c| now.as_secs() < keep_until(c))
            .cloned();
        let credential = match current {
            Some(c) => c,
            None => {
                let fresh =
                    TurnCredential::issue(crypto, rng, &self.config.secret, now, self.config.ttl_s);
                self.by_network.remove(&network);
                self.by_network.insert(network, fresh.clone());
                fresh
            }
        };
        IceServers {
            servers: alloc::vec![IceServer {
                urls: self.config.urls.clone(),
                username: credential.username,
                credential: credential.credential,
            }],
            expires_at: Timestamp::from_secs(credential.expires_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use hmac::{KeyInit, Mac};
    use rand_core::SeedableRng;

    const SECRET: &[u8] = b"north-wind-shared-secret";

    fn config() -> TurnConfig {
        TurnConfig::new(SECRET, vec!["turn:turn.example.com:3478".into()], 3600).unwrap()
    }

    fn independent_credential(username: &str) -> String {
        let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(SECRET).unwrap();
        mac.update(username.as_bytes());
        data_encoding::BASE64.encode(&mac.finalize().into_bytes())
    }

    #[test]
    fn credential_is_base64_hmac_sha1_of_the_username_under_the_secret() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let now = Timestamp::from_millis(1_789_996_400_999);
        let c = TurnCredential::issue(default_provider(), &mut rng, SECRET, now, 3600);
        assert_eq!(c.credential, independent_credential(&c.username));
        // A different secret gives a different password.
        let other = TurnCredential::new(
            default_provider(),
            b"other",
            c.expires_s,
            &[0; USERNAME_RANDOM_BYTES],
        );
        let same_user = TurnCredential::new(
            default_provider(),
            SECRET,
            c.expires_s,
            &[0; USERNAME_RANDOM_BYTES],
        );
        assert_eq!(other.username, same_user.username);
        assert_ne!(other.credential, same_user.credential);
    }

    #[test]
    fn username_is_floor_now_plus_ttl_colon_12_base64url_characters() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let now = Timestamp::from_millis(1_789_996_400_999);
        let c = TurnCredential::issue(default_provider(), &mut rng, SECRET, now, 3600);
        assert_eq!(c.expires_s, 1_789_996_400 + 3600);
        let (expires, random) = c.username.split_once(':').unwrap();
        assert_eq!(expires, "1790000000");
        assert_eq!(random.len(), 12);
        assert_eq!(
            base64url::decode(random).unwrap().len(),
            USERNAME_RANDOM_BYTES
        );
        // Padded standard base64 of 20 bytes.
        assert_eq!(c.credential.len(), 28);
        assert!(c.credential.ends_with('='));
        assert_eq!(base64::decode(&c.credential).unwrap().len(), 20);
    }

    #[test]
    fn ice_payload_expires_at_is_expires_times_1000() {
        let mut issuer = TurnIssuer::new(config());
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let now = Timestamp::from_millis(1_789_996_400_500);
        let ice = issuer.offer(
            default_provider(),
            &mut rng,
            now,
            "192.0.2.7".parse().unwrap(),
        );
        assert_eq!(ice.expires_at, Timestamp::from_millis(1_790_000_000_000));
        assert_eq!(ice.servers.len(), 1);
        assert_eq!(ice.servers[0].urls, ["turn:turn.example.com:3478"]);
        assert_eq!(
            ice.servers[0].credential,
            independent_credential(&ice.servers[0].username)
        );
        // What the relay sends is what a client keeps (§2.1).
        assert_eq!(IceServers::from_relay(&ice.to_payload()), Some(ice));
    }

    #[test]
    fn one_username_per_network_reused_while_valid() {
        let mut issuer = TurnIssuer::new(config());
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let t0 = Timestamp::from_secs(1_000_000);
        let mut user = |issuer: &mut TurnIssuer, at: Timestamp, addr: &str| {
            issuer
                .offer(default_provider(), &mut rng, at, addr.parse().unwrap())
                .servers[0]
                .username
                .clone()
        };
        let a = user(&mut issuer, t0, "198.51.100.7");
        assert_eq!(user(&mut issuer, t0, "198.51.100.200"), a, "same /24");
        assert_eq!(user(&mut issuer, t0, "::ffff:198.51.100.9"), a, "mapped v4");
        assert_ne!(user(&mut issuer, t0, "198.51.101.7"), a, "another /24");
        let v6 = user(&mut issuer, t0, "2001:db8:1:2::1");
        assert_eq!(
            user(&mut issuer, t0, "2001:db8:1:2:ffff::9"),
            v6,
            "same /64"
        );
        assert_ne!(user(&mut issuer, t0, "2001:db8:1:3::1"), v6, "another /64");
        // Reused while more than half the hour remains, then renewed.
        let late = Timestamp::from_secs(1_000_000 + 1799);
        assert_eq!(user(&mut issuer, late, "198.51.100.7"), a);
        let renewed = user(
            &mut issuer,
            Timestamp::from_secs(1_000_000 + 1800),
            "198.51.100.7",
        );
        assert_ne!(renewed, a);
        assert!(renewed.starts_with("1005400:"));
    }

    #[test]
    fn remembered_networks_are_bounded() {
        let mut issuer = TurnIssuer::new(config());
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        for i in 0..(MAX_TURN_NETWORKS as u32 + 10) {
            let addr = IpAddr::V4(core::net::Ipv4Addr::from(i << 8));
            issuer.offer(default_provider(), &mut rng, Timestamp::ZERO, addr);
        }
        assert_eq!(issuer.networks(), MAX_TURN_NETWORKS);
    }

    /// An empty secret would make every password anyone's to compute: refused, whatever else
    /// is right.
    #[test]
    fn an_empty_turn_secret_is_refused() {
        assert_eq!(
            TurnConfig::new(b"", vec!["turn:a".into()], 3600),
            Err(TurnConfigError::EmptySecret)
        );
        assert_eq!(
            TurnConfigError::EmptySecret.to_string(),
            "the TURN secret is empty"
        );
        assert!(TurnConfig::new(b"s", vec!["turn:a".into()], 3600).is_ok());
    }

    #[test]
    fn turn_config_refuses_what_clients_would_drop() {
        assert_eq!(
            TurnConfig::new(SECRET, vec![], 3600),
            Err(TurnConfigError::NoUrls)
        );
        assert_eq!(
            TurnConfig::new(SECRET, vec!["turn:a".into()], 0),
            Err(TurnConfigError::ZeroTtl)
        );
        for bad in ["stun:a".to_string(), format!("turn:{}", "a".repeat(251))] {
            assert_eq!(
                TurnConfig::new(SECRET, vec!["turns:ok".into(), bad.clone()], 60),
                Err(TurnConfigError::BadUrl(bad))
            );
        }
        assert!(TurnConfig::new(SECRET, vec![format!("turn:{}", "a".repeat(250))], 60).is_ok());
    }
}
