//! NIP-40: the `expiration` tag, `["expiration", "<unix time in seconds>"]`.
//!
//! NIP-40 asks clients to ignore events past their expiration and relays not to serve them. An
//! event with an `expiration` tag whose value is not a decimal Unix time is treated as already
//! expired: a reader cannot tell how long its author meant it to live, and taking it could serve
//! a blob past its time (recorded in `docs/decisions.md`).

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::event::Event;
use crate::core::Timestamp;

/// The tag's name.
pub const TAG: &str = "expiration";

/// Longest `expiration` value read, in digits: enough for any `u64`.
const MAX_DIGITS: usize = 20;

/// What an event's `expiration` tag says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration` tag: the event does not expire.
    Never,
    /// Expires at this Unix time, in seconds.
    At(u64),
    /// A tag whose value is missing or not a decimal Unix time.
    Malformed,
}

impl Expiration {
    /// Reads the first `expiration` tag of `event`.
    pub fn of(event: &Event) -> Self {
        let Some(tag) = event.tag(TAG) else {
            return Self::Never;
        };
        match tag.get(1) {
            Some(v)
                if !v.is_empty()
                    && v.len() <= MAX_DIGITS
                    && v.bytes().all(|b| b.is_ascii_digit()) =>
            {
                v.parse().map_or(Self::Malformed, Self::At)
            }
            _ => Self::Malformed,
        }
    }

    /// Whether an event with this expiration is past it at `now`: from the second it names on,
    /// and always for a malformed tag.
    pub fn is_past(self, now: Timestamp) -> bool {
        match self {
            Self::Never => false,
            Self::At(secs) => now.as_secs() >= secs,
            Self::Malformed => true,
        }
    }
}

/// Whether `event` is past its NIP-40 expiration at `now`.
pub fn is_expired(event: &Event, now: Timestamp) -> bool {
    Expiration::of(event).is_past(now)
}

/// The tag `["expiration", "<at_secs>"]`.
pub fn tag(at_secs: u64) -> Vec<String> {
    vec![String::from(TAG), at_secs.to_string()]
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::nostr::event::UnsignedEvent;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn with_tags(tags: Vec<Vec<String>>) -> Event {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let secret = generate_secp256k1(p, &mut rng);
        UnsignedEvent {
            created_at: 100,
            kind: 4733,
            tags,
            content: String::new(),
        }
        .sign(p, &secret, &mut rng)
        .unwrap()
    }

    #[test]
    fn an_event_is_expired_from_the_second_its_expiration_names() {
        let e = with_tags(vec![tag(1_000)]);
        assert_eq!(Expiration::of(&e), Expiration::At(1_000));
        assert!(!is_expired(&e, Timestamp::from_millis(999_999)));
        assert!(is_expired(&e, Timestamp::from_millis(1_000_000)));
    }

    #[test]
    fn an_event_without_expiration_never_expires() {
        let e = with_tags(vec![vec!["x".into(), "t".into()]]);
        assert_eq!(Expiration::of(&e), Expiration::Never);
        assert!(!is_expired(&e, Timestamp::MAX));
    }

    #[test]
    fn a_malformed_expiration_counts_as_expired() {
        for v in [
            vec![TAG.into()],
            vec![TAG.into(), "".into()],
            vec![TAG.into(), "1e9".into()],
            vec![TAG.into(), "-1".into()],
            vec![TAG.into(), "99999999999999999999".into()],
        ] {
            let e = with_tags(vec![v]);
            assert_eq!(Expiration::of(&e), Expiration::Malformed);
            assert!(is_expired(&e, Timestamp::ZERO));
        }
    }
}
