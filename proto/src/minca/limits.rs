//! What one peer may make this node take in, on every transport (§7.4, §9.2).
//!
//! Every received message, on a WebRTC data channel ([`mesh`](super::mesh)) or on a node socket
//! of either side ([`node_socket`](super::node_socket), §5.2, §5.3), passes through this module
//! before anything else reads it, so that every transport holds a peer to the same rules from
//! the same code:
//!
//! - §7.4 plans "a byte rate per peer on every transport (WebRTC, node socket)" without values:
//!   every frame a peer sends is charged to its [`ByteAllowance`] ([`PEER_BYTE_RATE`]) before it
//!   is parsed; one beyond it is dropped and the connection stays.
//! - §9.2: a receiver rate-limits each peer's live messages with a token bucket of burst 60
//!   refilling 20 a second ([`LiveAllowance`], [`LIVE_RATE`]), and drops a message whose
//!   `JSON.stringify(payload)` is longer than 65 536 characters ([`MAX_LIVE_CHARS`], UTF-16 code
//!   units, "Open questions"); messages beyond it are dropped and the connection stays open.
//!
//! A transport machine holds one allowance of each kind per peer (the mesh: bytes per connection,
//! live messages per (room, peer) admission; a node socket: both per socket, one space each) and
//! takes each frame and each live message through [`LimitCounters::frame`] and
//! [`LimitCounters::live`], which decide and count the drop in one step. The allowances start
//! full when the connection (or admission) starts: a peer that reconnects has handshaken again,
//! which costs this node more than the allowance it gets back.
//!
//! Who may send or receive a live message (after `who`, never a former member) is the
//! transport machine's.

use serde_json::Value;

use crate::codec::js;
use crate::core::{BucketConfig, Timestamp, TokenBucket};

/// The message type of a live message (§9.2).
pub const LIVE: &str = "live";

/// The per-peer receive bucket for live messages (§9.2): burst 60, 20 a second.
pub const LIVE_RATE: BucketConfig = BucketConfig::new(60, 20);

/// The longest `JSON.stringify(payload)` a live message may have, in UTF-16 code units (§9.2).
pub const MAX_LIVE_CHARS: usize = 65_536;

/// The byte rate every peer's frames are held to, per connection, on every transport (§7.4 plans
/// "a byte rate per peer on every transport" without values): a burst of one largest frame
/// ([`node_socket::MAX_FRAME_BYTES`](super::node_socket::MAX_FRAME_BYTES), 16 MiB, the bound of
/// both a mesh frame and a node socket frame), refilling 4 MiB a second.
/// 4 MiB/s is above what live messages at their own limit carry in practice (20 a second, §9.2)
/// and what a sync of records needs, and bounds what one peer can make this node parse. Beyond
/// it a frame is dropped and counted, and the connection stays (§7.4: "messages are dropped or
/// the connection closed"; dropping keeps the peer's other rooms on the mesh, and on a node
/// socket keeps the only way many clients have to their node).
pub const PEER_BYTE_RATE: BucketConfig =
    BucketConfig::new(super::node_socket::MAX_FRAME_BYTES as u32, 4 * 1024 * 1024);

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

/// One peer's receive allowance for live messages (§9.2).
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

/// One peer's allowance of received bytes on one connection (§7.4, [`PEER_BYTE_RATE`]).
#[derive(Clone, Debug)]
pub struct ByteAllowance {
    bucket: TokenBucket,
}

impl ByteAllowance {
    /// A full allowance as of `now` (a connection just started).
    pub fn new(now: Timestamp) -> Self {
        Self {
            bucket: PEER_BYTE_RATE.bucket(now),
        }
    }

    /// Takes a frame of `len` bytes received at `now`: whether it may be read.
    pub fn take(&mut self, now: Timestamp, len: usize) -> bool {
        let cost = u32::try_from(len).unwrap_or(u32::MAX);
        self.bucket.try_take_n(now, cost)
    }
}

/// What the per-peer limits dropped, by reason; each transport machine keeps one and shows it
/// among its counters, so the same drop is counted alike on every transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitCounters {
    /// Frames dropped for going past the peer's [`PEER_BYTE_RATE`] (§7.4).
    pub byte_rate_limited: u64,
    /// Live messages dropped for the rate limit (§9.2).
    pub live_rate_limited: u64,
    /// Live messages dropped for their size (§9.2).
    pub live_too_long: u64,
}

impl LimitCounters {
    /// Charges a frame of `len` bytes received at `now` to the peer's `allowance`: whether it may
    /// be read. A frame beyond the byte rate is counted and must be dropped unread.
    pub fn frame(&mut self, allowance: &mut ByteAllowance, now: Timestamp, len: usize) -> bool {
        let taken = allowance.take(now, len);
        if !taken {
            self.byte_rate_limited += 1;
        }
        taken
    }

    /// Takes a live message received at `now` from the peer's `allowance`: whether it may be
    /// handed to the application. One beyond the rate or too long is counted and must be
    /// dropped; the connection stays open (§9.2).
    pub fn live(&mut self, allowance: &mut LiveAllowance, now: Timestamp, payload: &Value) -> bool {
        match allowance.take(now, payload) {
            Ok(()) => true,
            Err(LiveDrop::RateLimited) => {
                self.live_rate_limited += 1;
                false
            }
            Err(LiveDrop::TooLong) => {
                self.live_too_long += 1;
                false
            }
        }
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
        // One token every 50 ms: not yet at 49 ms, one at 50 ms.
        assert_eq!(
            a.take(Timestamp::from_millis(1_000_049), &p),
            Err(LiveDrop::RateLimited)
        );
        assert_eq!(a.take(Timestamp::from_millis(1_000_050), &p), Ok(()));
        let t1 = Timestamp::from_millis(1_001_050);
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

    #[test]
    fn the_byte_allowance_is_a_burst_of_16_mib_refilling_4_mib_a_second() {
        let t0 = Timestamp::from_millis(0);
        let mut a = ByteAllowance::new(t0);
        let mib = 1 << 20;
        assert!(a.take(t0, 16 * mib));
        assert!(!a.take(t0, 1));
        assert!(!a.take(Timestamp::from_millis(999), 4 * mib));
        assert!(a.take(Timestamp::from_millis(1_000), 4 * mib));
        // A frame larger than the burst never passes, however long the wait.
        let mut b = ByteAllowance::new(t0);
        assert!(!b.take(Timestamp::from_millis(1_000_000), 16 * mib + 1));
        assert!(!b.take(t0, usize::MAX));
    }

    #[test]
    fn each_drop_is_counted_by_its_reason_and_a_pass_is_not() {
        let t0 = Timestamp::from_millis(0);
        let mut c = LimitCounters::default();
        let mut bytes = ByteAllowance::new(t0);
        let mut live = LiveAllowance::new(t0);
        assert!(c.frame(&mut bytes, t0, 10));
        assert!(c.live(&mut live, t0, &json!(1)));
        assert_eq!(c, LimitCounters::default());
        assert!(!c.frame(&mut bytes, t0, 16 << 20));
        assert!(!c.live(&mut live, t0, &json!("x".repeat(MAX_LIVE_CHARS))));
        for _ in 0..58 {
            assert!(c.live(&mut live, t0, &json!(1)));
        }
        assert!(!c.live(&mut live, t0, &json!(1)));
        assert_eq!(
            c,
            LimitCounters {
                byte_rate_limited: 1,
                live_rate_limited: 1,
                live_too_long: 1,
            }
        );
    }
}
