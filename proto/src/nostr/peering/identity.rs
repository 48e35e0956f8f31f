//! The relay's own keypair (spec 002 §2 "Relay keypair") and the `self` pubkey it advertises.
//!
//! - `RELAY_PRIVATE_KEY` (64 hex digits), when set, wins ([`RelayKey::from_env`]).
//! - Otherwise the key is derived from `SECRET` exactly as nostream derives it, so an operator
//!   moving a nostream relay to weft keeps its pubkey: the secret scalar is
//!   `HMAC-SHA256(key = SECRET as UTF-8, message = info.relay_url as UTF-8)` (nostream's
//!   `getRelayPrivateKey(settings.info.relay_url)` → `deriveFromSecret(purpose)` →
//!   `createHmac('sha256', process.env.SECRET).update(purpose)`), recorded in docs/decisions.md
//!   with the vector `vectors/nostr/relay-identity.json`.
//! - `info.self`, when set and readable (hex or `npub1…`), must equal the signing pubkey:
//!   [`advertised_self`] refuses otherwise ([`IdentityError::SelfMismatch`]), so the relay does
//!   not start advertising an identity it cannot prove; unset or unreadable, the signing pubkey is
//!   advertised.
//!
//! The secret half lives in [`RelayKey`] only, whose `Debug` shows the pubkey alone; it has no
//! `Display` and no serializer, so it cannot reach a log, a settings file or a NIP-11 document
//! by accident. HMAC-SHA256 and BIP-340 go through the [`CryptoProvider`].

use alloc::string::String;
use core::fmt;

use crate::codec::{bech32, hex};
use crate::core::Timestamp;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};
use crate::nostr::auth;
use crate::nostr::event::Event;

/// Why the relay has no usable identity.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityError {
    /// `RELAY_PRIVATE_KEY` is not 64 hex digits.
    BadPrivateKeyHex,
    /// Neither `RELAY_PRIVATE_KEY` nor `SECRET` is set (or `SECRET` is empty).
    NoKeyMaterial,
    /// The key (given or derived) is not a valid secp256k1 scalar (zero or not below the order).
    InvalidKey,
    /// `info.self` names another pubkey than the one the relay signs with.
    SelfMismatch {
        /// The configured `info.self`, as hex.
        configured: String,
        /// The signing pubkey, as hex.
        signing: String,
    },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadPrivateKeyHex => f.write_str("RELAY_PRIVATE_KEY is not 64 hex digits"),
            Self::NoKeyMaterial => {
                f.write_str("no relay key: set SECRET (or RELAY_PRIVATE_KEY) in the environment")
            }
            Self::InvalidKey => f.write_str("the relay key is not a valid secp256k1 secret key"),
            Self::SelfMismatch {
                configured,
                signing,
            } => write!(
                f,
                "info.self is {configured} but this relay signs with {signing}: refusing to \
                 advertise an identity it cannot prove"
            ),
        }
    }
}

impl core::error::Error for IdentityError {}

/// Where the relay's key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `RELAY_PRIVATE_KEY`.
    PrivateKey,
    /// Derived from `SECRET` and `info.relay_url`.
    Secret,
}

/// The relay's signing keypair. Its secret is never shown: `Debug` prints the pubkey only, and
/// there is no `Display`, `Serialize` or accessor returning text of it.
#[derive(Clone)]
pub struct RelayKey {
    secret: Secp256k1Secret,
    pubkey: [u8; 32],
    source: KeySource,
}

impl fmt::Debug for RelayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayKey")
            .field("pubkey", &hex::encode(&self.pubkey))
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The secret scalar nostream derives from `SECRET` for a relay at `relay_url`:
/// `HMAC-SHA256(key = secret, message = relay_url)`.
pub fn derive_secret(provider: &dyn CryptoProvider, secret: &[u8], relay_url: &str) -> [u8; 32] {
    provider.hmac_sha256(secret, &[relay_url.as_bytes()])
}

impl RelayKey {
    fn new(
        provider: &dyn CryptoProvider,
        bytes: [u8; 32],
        source: KeySource,
    ) -> Result<Self, IdentityError> {
        let secret = Secp256k1Secret::from_bytes(bytes);
        let pubkey = provider
            .schnorr_public_key(&secret)
            .map_err(|_| IdentityError::InvalidKey)?;
        Ok(Self {
            secret,
            pubkey,
            source,
        })
    }

    /// The key `RELAY_PRIVATE_KEY` gives: 64 hex digits (either case; surrounding whitespace
    /// ignored).
    pub fn from_private_key_hex(
        provider: &dyn CryptoProvider,
        text: &str,
    ) -> Result<Self, IdentityError> {
        let text = text.trim();
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(IdentityError::BadPrivateKeyHex);
        }
        let bytes = hex::decode_array::<32>(&text.to_ascii_lowercase())
            .map_err(|_| IdentityError::BadPrivateKeyHex)?;
        Self::new(provider, bytes, KeySource::PrivateKey)
    }

    /// The key nostream derives from `SECRET` for a relay whose `info.relay_url` is `relay_url`
    /// (the URL exactly as configured: another spelling is another key).
    pub fn derive(
        provider: &dyn CryptoProvider,
        secret: &[u8],
        relay_url: &str,
    ) -> Result<Self, IdentityError> {
        if secret.is_empty() {
            return Err(IdentityError::NoKeyMaterial);
        }
        Self::new(
            provider,
            derive_secret(provider, secret, relay_url),
            KeySource::Secret,
        )
    }

    /// The relay's key from its environment: `RELAY_PRIVATE_KEY` when set and non-empty wins,
    /// otherwise derived from `SECRET` and `relay_url`.
    pub fn from_env(
        provider: &dyn CryptoProvider,
        relay_private_key: Option<&str>,
        secret: Option<&str>,
        relay_url: &str,
    ) -> Result<Self, IdentityError> {
        match (relay_private_key.filter(|k| !k.is_empty()), secret) {
            (Some(k), _) => Self::from_private_key_hex(provider, k),
            (None, Some(s)) => Self::derive(provider, s.as_bytes(), relay_url),
            (None, None) => Err(IdentityError::NoKeyMaterial),
        }
    }

    /// The x-only (BIP-340) public key.
    pub fn pubkey(&self) -> [u8; 32] {
        self.pubkey
    }

    /// The public key as 64 lower-case hex digits.
    pub fn pubkey_hex(&self) -> String {
        hex::encode(&self.pubkey)
    }

    /// The public key as a NIP-19 `npub`.
    pub fn npub(&self) -> String {
        bech32::encode_npub(&self.pubkey)
    }

    /// Where the key came from.
    pub fn source(&self) -> KeySource {
        self.source
    }

    /// Signs a NIP-42 `AUTH` event with this key (spec 002 §5: outbound authentication to a peer
    /// reached at `relay_url` that sent `challenge`). The secret never leaves this type.
    pub fn sign_auth(
        &self,
        provider: &dyn CryptoProvider,
        rng: &mut dyn rand_core::CryptoRng,
        now: Timestamp,
        relay_url: &str,
        challenge: &str,
    ) -> Result<Event, CryptoError> {
        auth::build(provider, &self.secret, rng, now, relay_url, challenge)
    }

    /// Signs any unsigned event with the relay's key (for the relay's own notices).
    pub fn sign(
        &self,
        provider: &dyn CryptoProvider,
        rng: &mut dyn rand_core::CryptoRng,
        event: crate::nostr::event::UnsignedEvent,
    ) -> Result<Event, CryptoError> {
        event.sign(provider, &self.secret, rng)
    }
}

/// A pubkey written as 64 hex digits (either case) or as a NIP-19 `npub1…`; `None` when it is
/// neither.
pub fn parse_pubkey(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return hex::decode_array::<32>(&text.to_ascii_lowercase()).ok();
    }
    if text.len() > 5 && text[..5].eq_ignore_ascii_case("npub1") {
        return bech32::decode_npub(text).ok();
    }
    None
}

/// The pubkey NIP-11 advertises as `self` (spec 002 §2): `info_self` when it is set, readable
/// and equal to `signing`; `signing` when it is unset or unreadable; an error when it is readable
/// and names another key (the relay must refuse to start).
pub fn advertised_self(
    info_self: Option<&str>,
    signing: &[u8; 32],
) -> Result<[u8; 32], IdentityError> {
    match info_self.and_then(parse_pubkey) {
        Some(configured) if configured != *signing => Err(IdentityError::SelfMismatch {
            configured: hex::encode(&configured),
            signing: hex::encode(signing),
        }),
        _ => Ok(*signing),
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use alloc::format;

    const URL: &str = "wss://relay.example.com";

    #[test]
    fn relay_private_key_wins_over_secret() {
        let p = default_provider();
        let hex_key = "11".repeat(32);
        let k = RelayKey::from_env(p, Some(&hex_key), Some("a secret"), URL).unwrap();
        assert_eq!(k.source(), KeySource::PrivateKey);
        let direct = RelayKey::from_private_key_hex(p, &hex_key).unwrap();
        assert_eq!(k.pubkey(), direct.pubkey());
        let derived = RelayKey::from_env(p, None, Some("a secret"), URL).unwrap();
        assert_eq!(derived.source(), KeySource::Secret);
        assert_ne!(derived.pubkey(), k.pubkey());
        // An empty RELAY_PRIVATE_KEY is unset, as in nostream (`if (process.env.…)`).
        let empty = RelayKey::from_env(p, Some(""), Some("a secret"), URL).unwrap();
        assert_eq!(empty.pubkey(), derived.pubkey());
    }

    #[test]
    fn derivation_is_deterministic_and_bound_to_secret_and_url() {
        let p = default_provider();
        let a = RelayKey::derive(p, b"s1", URL).unwrap();
        assert_eq!(
            a.pubkey(),
            RelayKey::derive(p, b"s1", URL).unwrap().pubkey()
        );
        assert_ne!(
            a.pubkey(),
            RelayKey::derive(p, b"s2", URL).unwrap().pubkey()
        );
        assert_ne!(
            a.pubkey(),
            RelayKey::derive(p, b"s1", "wss://other.example.com")
                .unwrap()
                .pubkey()
        );
        // The scalar is exactly HMAC-SHA256(SECRET, relay_url).
        assert_eq!(
            derive_secret(p, b"s1", URL),
            p.hmac_sha256(b"s1", &[URL.as_bytes()])
        );
    }

    #[test]
    fn bad_key_material_is_a_typed_error() {
        let p = default_provider();
        assert_eq!(
            RelayKey::from_env(p, None, None, URL).unwrap_err(),
            IdentityError::NoKeyMaterial
        );
        assert_eq!(
            RelayKey::from_env(p, None, Some(""), URL).unwrap_err(),
            IdentityError::NoKeyMaterial
        );
        for bad in [
            "zz".repeat(32),
            "11".repeat(31),
            "11".repeat(33),
            "npub1x".into(),
        ] {
            assert_eq!(
                RelayKey::from_private_key_hex(p, &bad).unwrap_err(),
                IdentityError::BadPrivateKeyHex
            );
        }
        // Zero and the group order are no keys.
        assert_eq!(
            RelayKey::from_private_key_hex(p, &"00".repeat(32)).unwrap_err(),
            IdentityError::InvalidKey
        );
        let order = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141";
        assert_eq!(
            RelayKey::from_private_key_hex(p, order).unwrap_err(),
            IdentityError::InvalidKey
        );
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let p = default_provider();
        let secret_hex = "7f".repeat(32);
        let k = RelayKey::from_private_key_hex(p, &secret_hex).unwrap();
        let shown = format!("{k:?} {:#?}", k);
        assert!(!shown.contains(&secret_hex), "{shown}");
        assert!(!shown.contains(&"7F".repeat(32)), "{shown}");
        assert!(shown.contains(&k.pubkey_hex()), "{shown}");
        let derived = RelayKey::derive(p, b"s", URL).unwrap();
        let scalar = hex::encode(&derive_secret(p, b"s", URL));
        assert!(!format!("{derived:?}").contains(&scalar));
    }

    #[test]
    fn info_self_must_match_when_readable_and_is_replaced_when_not() {
        let p = default_provider();
        let k = RelayKey::derive(p, b"s", URL).unwrap();
        let me = k.pubkey();
        assert_eq!(advertised_self(None, &me), Ok(me));
        assert_eq!(advertised_self(Some(&k.pubkey_hex()), &me), Ok(me));
        assert_eq!(
            advertised_self(Some(&k.pubkey_hex().to_uppercase()), &me),
            Ok(me)
        );
        assert_eq!(advertised_self(Some(&k.npub()), &me), Ok(me));
        // Unreadable: nostream's placeholder, a truncated key, a bad checksum.
        for unreadable in ["replace-with-your-pubkey-in-hex", "abcd", "npub1qqqq", ""] {
            assert_eq!(
                advertised_self(Some(unreadable), &me),
                Ok(me),
                "{unreadable}"
            );
        }
        let other = RelayKey::derive(p, b"other", URL).unwrap();
        for configured in [other.pubkey_hex(), other.npub()] {
            let e = advertised_self(Some(&configured), &me).unwrap_err();
            assert!(matches!(e, IdentityError::SelfMismatch { .. }), "{e:?}");
            // The error names both pubkeys and nothing secret.
            let text = format!("{e}");
            assert!(text.contains(&other.pubkey_hex()) && text.contains(&k.pubkey_hex()));
        }
    }

    #[test]
    fn an_auth_signed_with_the_relay_key_passes_the_inbound_check() {
        use rand_core::SeedableRng;
        let p = default_provider();
        let k = RelayKey::derive(p, b"s", URL).unwrap();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(1);
        let now = Timestamp::from_secs(1_790_000_000);
        let e = k
            .sign_auth(p, &mut rng, now, "wss://peer.example.com", "abc")
            .unwrap();
        assert_eq!(
            auth::check(p, &e, now, "wss://peer.example.com/", "abc"),
            Ok(k.pubkey())
        );
        // Only the public half is on the wire.
        let wire = e.to_json();
        assert!(!wire.contains(&hex::encode(&derive_secret(p, b"s", URL))));
    }
}
