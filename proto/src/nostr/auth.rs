//! NIP-42: the `AUTH` event a client answers a relay's challenge with, built and checked.
//!
//! The event is kind 22242 with a `relay` tag (the relay's URL) and a `challenge` tag (the string
//! the relay sent in `["AUTH", <challenge>]`), signed by the key being proven. Building serves
//! Minca's Nostr relay kind (§1.5: "answered with a kind 22242 event from the same throwaway
//! key") and spec 002's outbound peering (§5). [`check`] is what spec 002 §4 step 3 asks of the
//! relay side: "verifies the event id, signature, timestamp window, challenge, and relay-URL domain
//! match".

use alloc::string::String;
use alloc::vec;
use core::fmt;

use super::event::{Event, UnsignedEvent};
use crate::core::Timestamp;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};

/// The NIP-42 authentication event kind.
pub const AUTH_KIND: u16 = 22242;

/// How far an `AUTH` event's `created_at` may lie from the checker's clock, in seconds, either
/// way. NIP-42 says "the current time (e.g., within ~10 minutes)"; spec 002 names a window without
/// its value.
pub const AUTH_WINDOW_SECS: u64 = 600;

/// Longest challenge read, in bytes. NIP-42 sets none; relays send 16 to 64 characters.
pub const MAX_CHALLENGE_BYTES: usize = 256;

/// Why an `AUTH` event is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// Not kind 22242.
    WrongKind,
    /// The id does not match the event.
    IdMismatch,
    /// The signature does not verify.
    BadSignature,
    /// `created_at` is more than [`AUTH_WINDOW_SECS`] from now.
    OutsideWindow,
    /// No `challenge` tag, or not the challenge this connection was sent.
    WrongChallenge,
    /// No `relay` tag, or its host is not this relay's.
    WrongRelay,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WrongKind => "not a kind 22242 event",
            Self::IdMismatch => "event id does not match",
            Self::BadSignature => "signature does not verify",
            Self::OutsideWindow => "created_at outside the accepted window",
            Self::WrongChallenge => "challenge does not match",
            Self::WrongRelay => "relay does not match",
        })
    }
}

impl core::error::Error for AuthError {}

/// The unsigned `AUTH` event for `relay_url` and `challenge` at `now`.
pub fn unsigned(now: Timestamp, relay_url: &str, challenge: &str) -> UnsignedEvent {
    UnsignedEvent {
        created_at: now.as_secs(),
        kind: AUTH_KIND,
        tags: vec![
            vec![String::from("relay"), String::from(relay_url)],
            vec![String::from("challenge"), String::from(challenge)],
        ],
        content: String::new(),
    }
}

/// Builds and signs the `AUTH` event with `secret`.
pub fn build(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    rng: &mut dyn rand_core::CryptoRng,
    now: Timestamp,
    relay_url: &str,
    challenge: &str,
) -> Result<Event, CryptoError> {
    unsigned(now, relay_url, challenge).sign(provider, secret, rng)
}

/// Checks an `AUTH` event as a relay does (spec 002 §4 step 3, NIP-42): kind, id, signature,
/// `created_at` within [`AUTH_WINDOW_SECS`] of `now`, the `challenge` tag equal to the one sent,
/// and the `relay` tag naming `own_url`'s host. Returns the authenticated pubkey.
pub fn check(
    provider: &dyn CryptoProvider,
    event: &Event,
    now: Timestamp,
    own_url: &str,
    challenge: &str,
) -> Result<[u8; 32], AuthError> {
    if event.kind != AUTH_KIND {
        return Err(AuthError::WrongKind);
    }
    if !event.id_matches(provider) {
        return Err(AuthError::IdMismatch);
    }
    if !provider.schnorr_verify(&event.pubkey, &event.id, &event.sig) {
        return Err(AuthError::BadSignature);
    }
    if event.created_at.abs_diff(now.as_secs()) > AUTH_WINDOW_SECS {
        return Err(AuthError::OutsideWindow);
    }
    if event.tag_value("challenge") != Some(challenge) {
        return Err(AuthError::WrongChallenge);
    }
    let relay = event.tag_value("relay").ok_or(AuthError::WrongRelay)?;
    match (host_of(relay), host_of(own_url)) {
        (Some(theirs), Some(ours)) if theirs.eq_ignore_ascii_case(ours) => Ok(event.pubkey),
        _ => Err(AuthError::WrongRelay),
    }
}

/// The host of a WebSocket URL: after `scheme://` and any `user@`, before any port, path, query
/// or fragment. NIP-42 asks only that the URL be "normalized" leniently; spec 002 matches the
/// domain, so a trailing slash, another path or another port does not matter, and the host
/// compares case-insensitively. `None` without a `scheme://` or with an empty host.
pub fn host_of(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        // An IPv6 literal keeps its brackets; its colons are not a port.
        let end = v6.find(']')?;
        &host_port[..end + 2]
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const NOW: Timestamp = Timestamp::from_secs(1_790_000_000);
    const URL: &str = "wss://relay.example.com/";

    fn auth_event(now: Timestamp, url: &str, challenge: &str) -> Event {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let secret = generate_secp256k1(p, &mut rng);
        build(p, &secret, &mut rng, now, url, challenge).unwrap()
    }

    #[test]
    fn an_auth_event_is_kind_22242_tagged_relay_and_challenge() {
        let e = auth_event(NOW, URL, "c1");
        assert_eq!(e.kind, 22_242);
        assert_eq!(e.created_at, NOW.as_secs());
        assert_eq!(e.tag_value("relay"), Some(URL));
        assert_eq!(e.tag_value("challenge"), Some("c1"));
        assert_eq!(e.content, "");
        assert_eq!(check(default_provider(), &e, NOW, URL, "c1"), Ok(e.pubkey));
    }

    #[test]
    fn auth_check_verifies_the_event_id() {
        let mut e = auth_event(NOW, URL, "c1");
        e.content.push('x');
        assert_eq!(
            check(default_provider(), &e, NOW, URL, "c1"),
            Err(AuthError::IdMismatch)
        );
    }

    #[test]
    fn auth_check_verifies_the_signature() {
        let mut e = auth_event(NOW, URL, "c1");
        e.sig[0] ^= 1;
        assert_eq!(
            check(default_provider(), &e, NOW, URL, "c1"),
            Err(AuthError::BadSignature)
        );
    }

    #[test]
    fn auth_check_refuses_created_at_outside_the_window() {
        let p = default_provider();
        for (offset, ok) in [
            (0, true),
            (AUTH_WINDOW_SECS, true),
            (AUTH_WINDOW_SECS + 1, false),
        ] {
            let early = auth_event(Timestamp::from_secs(NOW.as_secs() - offset), URL, "c");
            let late = auth_event(Timestamp::from_secs(NOW.as_secs() + offset), URL, "c");
            for e in [early, late] {
                let r = check(p, &e, NOW, URL, "c");
                assert_eq!(r.is_ok(), ok, "{offset}: {r:?}");
                if !ok {
                    assert_eq!(r, Err(AuthError::OutsideWindow));
                }
            }
        }
    }

    #[test]
    fn auth_check_refuses_another_challenge() {
        let e = auth_event(NOW, URL, "c1");
        assert_eq!(
            check(default_provider(), &e, NOW, URL, "c2"),
            Err(AuthError::WrongChallenge)
        );
    }

    #[test]
    fn auth_check_matches_the_relay_host_only() {
        let p = default_provider();
        let e = auth_event(NOW, "wss://Relay.Example.com:443/path?q#f", "c");
        assert_eq!(check(p, &e, NOW, URL, "c"), Ok(e.pubkey));
        let other = auth_event(NOW, "wss://relay.example.org/", "c");
        assert_eq!(check(p, &other, NOW, URL, "c"), Err(AuthError::WrongRelay));
        let garbage = auth_event(NOW, "relay.example.com", "c");
        assert_eq!(
            check(p, &garbage, NOW, URL, "c"),
            Err(AuthError::WrongRelay)
        );
    }

    #[test]
    fn auth_check_refuses_another_kind() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let secret = generate_secp256k1(p, &mut rng);
        let mut u = unsigned(NOW, URL, "c");
        u.kind = 1;
        let e = u.sign(p, &secret, &mut rng).unwrap();
        assert_eq!(check(p, &e, NOW, URL, "c"), Err(AuthError::WrongKind));
    }

    #[test]
    fn the_host_of_a_url() {
        assert_eq!(host_of("wss://a.b/c"), Some("a.b"));
        assert_eq!(host_of("ws://u:p@a.b:7000"), Some("a.b"));
        assert_eq!(host_of("ws://[::1]:7000/x"), Some("[::1]"));
        assert_eq!(host_of("ws://[::1"), None);
        assert_eq!(host_of("wss:///x"), None);
        assert_eq!(host_of("a.b"), None);
    }
}
