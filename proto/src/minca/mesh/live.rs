//! Live messages (§9.2): the receive limits every peer applies.
//!
//! A live message reaches whoever is connected in the space now; it is not stored or synced. On
//! the wire it is `{"type":"live","from":…,"payload":…}`. A receiver rate-limits each peer with a
//! token bucket of burst 60 refilling 20 a second, and drops a message whose
//! `JSON.stringify(payload)` is longer than 65 536 characters (UTF-16 code units, "Open
//! questions"). Who may send or receive one (after `who`, never a former member) is the mesh's.

use serde_json::Value;

use crate::codec::js;
use crate::core::{BucketConfig, Timestamp, TokenBucket};

/// The message type of a live message.
pub const LIVE: &str = "live";

/// The per-peer receive bucket (§9.2): burst 60, 20 a second.
pub const LIVE_RATE: BucketConfig = BucketConfig::new(60, 20);

/// The longest `JSON.stringify(payload)` a live message may have, in UTF-16 code units (§9.2).
pub const MAX_LIVE_CHARS: usize = 65_536;

/// Why a received live message was dropped (the connection stays open, §9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiveDrop {
    /// Beyond the peer's rate.
    RateLimited,
    /// `JSON.stringify(payload)` is longer than [`MAX_LIVE_CHARS`].
    TooLong,
}

/// Whether a payload is small enough to send or take as a live message.
pub fn fits(payload: &Value) -> bool {
    js::stringify_utf16_len(payload) <= MAX_LIVE_CHARS
}

/// One peer's receive allowance for live messages.
#[derive(Clone, Debug)]
pub struct LiveAllowance {
    bucket: TokenBucket,
}

impl LiveAllowance {
    /// A full allowance as of `now` (a newly admitted peer).
    pub fn new(now: Timestamp) -> Self {
        Self {
            bucket: LIVE_RATE.bucket(now),
        }
    }

    /// Takes one message received at `now`, or says why it is dropped. Every message spends a
    /// token, an over-long one included, so that oversized messages are not a free flood.
    pub fn take(&mut self, now: Timestamp, payload: &Value) -> Result<(), LiveDrop> {
        if !self.bucket.try_take(now) {
            return Err(LiveDrop::RateLimited);
        }
        if !fits(payload) {
            return Err(LiveDrop::TooLong);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use serde_json::json;

    #[test]
    fn a_burst_of_60_passes_then_20_a_second() {
        let t0 = Timestamp::from_millis(1_000_000);
        let mut a = LiveAllowance::new(t0);
        let p = json!({"type": "typing"});
        for _ in 0..60 {
            assert_eq!(a.take(t0, &p), Ok(()));
        }
        assert_eq!(a.take(t0, &p), Err(LiveDrop::RateLimited));
        let t1 = Timestamp::from_millis(1_001_000);
        for _ in 0..20 {
            assert_eq!(a.take(t1, &p), Ok(()));
        }
        assert_eq!(a.take(t1, &p), Err(LiveDrop::RateLimited));
    }

    #[test]
    fn a_payload_longer_than_65536_utf16_units_is_dropped() {
        let t0 = Timestamp::from_millis(0);
        let mut a = LiveAllowance::new(t0);
        // JSON.stringify of a string adds two quotes.
        let at_limit = Value::String("x".repeat(MAX_LIVE_CHARS - 2));
        assert_eq!(a.take(t0, &at_limit), Ok(()));
        let over = Value::String("x".repeat(MAX_LIVE_CHARS - 1));
        assert_eq!(a.take(t0, &over), Err(LiveDrop::TooLong));
    }

    #[test]
    fn the_limit_counts_utf16_code_units_not_bytes() {
        // U+1F600 is 4 bytes of UTF-8 and 2 UTF-16 code units.
        let emoji: String = "\u{1F600}".repeat((MAX_LIVE_CHARS - 2) / 2);
        assert!(emoji.len() > MAX_LIVE_CHARS);
        assert!(fits(&Value::String(emoji)));
    }

    #[test]
    fn an_over_long_message_still_spends_a_token() {
        let t0 = Timestamp::from_millis(0);
        let mut a = LiveAllowance::new(t0);
        let over = Value::String("x".repeat(MAX_LIVE_CHARS));
        for _ in 0..60 {
            assert_eq!(a.take(t0, &over), Err(LiveDrop::TooLong));
        }
        assert_eq!(a.take(t0, &json!(1)), Err(LiveDrop::RateLimited));
    }
}
