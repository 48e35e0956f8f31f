//! The bounds a relay puts on one client connection, as one config struct.
//!
//! NIP-01 names one bound (a subscription id of at most 64 characters) and NIP-11's `limitation`
//! object names the others a relay may advertise (`max_message_length`, `max_subscriptions`,
//! `max_limit`, `max_subid_length`, `max_event_tags`, `max_content_length`, `default_limit`,
//! `created_at_upper_limit`); it sets no values. [`Limits::DEFAULT`] holds weft's, each
//! recorded in `docs/decisions.md`. Parsing ([`crate::nostr::message::ClientMessage::parse_with`])
//! takes the parsing caps from here, so a trusted peer can be given larger ones than a client.
//!
//! Relay peering (spec 002 §7) gives a connection that proved an enabled peer's pubkey its own
//! [`Limits`], [`Limits::PEER_DEFAULT`] unless `limits.peer` says otherwise: larger subscription
//! caps, an uncapped `limit` (an omitted one reads the whole stored feed, paced by the socket's
//! flush), and its own message bucket, high but finite.

use crate::core::BucketConfig;

use super::event::MAX_EVENT_BYTES;
use super::message::MAX_SUBSCRIPTION_ID_CHARS;

/// Default [`Limits::max_filters`]: most filters one `REQ` or `COUNT` may carry. NIP-01 sets no
/// bound; relays commonly allow 10 to 20.
pub const DEFAULT_MAX_FILTERS: usize = 16;

/// Default [`Limits::max_filter_values`]: most values one filter list (`ids`, `authors`, `kinds`,
/// a `#x` tag list) may hold. NIP-01 sets no bound; relays commonly allow about 1,000.
pub const DEFAULT_MAX_FILTER_VALUES: usize = 1_000;

/// Default [`Limits::max_message_bytes`]: longest frame read, checked before JSON parsing: one
/// event of [`MAX_EVENT_BYTES`] and room for the envelope around it.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = MAX_EVENT_BYTES + 1024;

/// The bounds on one client connection. Every count is enforced by the relay session
/// ([`crate::nostr::relay::session`]) and the parser; none is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest frame, in bytes; a longer one closes the socket with 1009.
    pub max_message_bytes: usize,
    /// Longest event, in bytes of its JSON; a longer one is refused with `OK false invalid:`.
    pub max_event_bytes: usize,
    /// Most subscriptions open at once on one connection (`REQ`s not yet closed, and `COUNT`s
    /// waiting for the store).
    pub max_subscriptions: usize,
    /// Most filters in one `REQ` or `COUNT`.
    pub max_filters: usize,
    /// Most values in one filter list.
    pub max_filter_values: usize,
    /// Longest subscription id, in characters (at most NIP-01's 64).
    pub max_subscription_id_chars: usize,
    /// The most stored events one filter returns, whatever its `limit` asks (a larger `limit` is
    /// clamped, not refused).
    pub max_limit: u64,
    /// The stored events a filter without `limit` returns.
    pub default_limit: u64,
    /// Stored events asked of the store per page; the next page is asked only once the frames
    /// of the previous one are flushed to the socket.
    pub page_size: usize,
    /// Frames sent and not yet reported flushed past which live events stop: the subscriptions
    /// they would go to are closed with `CLOSED error:` (a reader too slow for the relay's rate).
    pub max_unflushed_frames: usize,
    /// Event writes waiting for the store at once; another is refused with `rate-limited:`.
    pub max_pending_writes: usize,
    /// Most pubkeys one connection may authenticate (NIP-42 allows several).
    pub max_auth_pubkeys: usize,
    /// How far in the future an event's `created_at` may be, in seconds, before it is refused
    /// with `invalid:`; `None` for no bound.
    pub max_future_secs: Option<u64>,
    /// Client messages per connection: a burst and a steady rate. A message over it gets its
    /// `rate-limited:` answer.
    pub messages: BucketConfig,
    /// NIP-77 sessions open at once on one connection.
    pub max_neg_sessions: usize,
    /// Most stored events one NIP-77 session reconciles over; a filter matching more is
    /// answered [`NEG_TOO_LARGE`].
    pub max_neg_items: usize,
    /// Largest negentropy message the relay writes, in bytes before hex (the crate's frame size
    /// limit: 0 for none, else at least 4 096).
    pub neg_frame_bytes: u64,
    /// How long a NIP-77 session may wait for the client's next message before it is closed
    /// with `NEG-ERR closed:`, in seconds.
    pub neg_idle_secs: u64,
}

/// The `NEG-ERR` answer to a `NEG-OPEN` whose filter matches more than
/// [`Limits::max_neg_items`] events (NIP-77's own example reason).
pub const NEG_TOO_LARGE: &str = "blocked: this query is too big";

/// Default [`Limits::neg_frame_bytes`]: a message of 60 000 bytes is 120 000 hex characters,
/// within a peer's frame of [`DEFAULT_MAX_MESSAGE_BYTES`].
pub const DEFAULT_NEG_FRAME_BYTES: u64 = 60_000;

/// Default peer [`Limits::max_subscriptions`] (spec 002 §7 "separate and larger by default").
pub const PEER_MAX_SUBSCRIPTIONS: usize = 256;

/// Default peer [`Limits::max_filters`]: a feed's filter set (one per kind range of each scope)
/// fits, and the raw count is still checked before any filter is parsed.
pub const PEER_MAX_FILTERS: usize = 256;

/// Default peer [`Limits::max_filter_values`]: a fetch batch of ids by the thousand.
pub const PEER_MAX_FILTER_VALUES: usize = 10_000;

/// Default peer message bucket: 10 000 at once, 1 000 a second. Spec 002 §7: "a high but finite
/// bound, not an exemption".
pub const PEER_MESSAGES: BucketConfig = BucketConfig::new(10_000, 1_000);

impl Limits {
    /// The default bounds on a peer's connection (spec 002 §7, docs/decisions.md): the client's,
    /// with larger subscription caps, `maxLimit` 0 (an uncapped `limit`, and an omitted one the
    /// whole feed), more negentropy sessions and writes waiting, and [`PEER_MESSAGES`].
    pub const PEER_DEFAULT: Self = Self {
        max_subscriptions: PEER_MAX_SUBSCRIPTIONS,
        max_filters: PEER_MAX_FILTERS,
        max_filter_values: PEER_MAX_FILTER_VALUES,
        max_limit: u64::MAX,
        default_limit: u64::MAX,
        messages: PEER_MESSAGES,
        max_neg_sessions: 8,
        max_pending_writes: 64,
        ..Self::DEFAULT
    };

    /// Applies `limits.peer.subscription.maxLimit` (spec 002 §7): 0 leaves `limit` uncapped and
    /// makes an omitted one read the whole stored feed; a positive value is both the default page
    /// and the cap on an explicit `limit` (as the client's `maxLimit` caps a client's).
    pub fn set_peer_max_limit(&mut self, max_limit: u64) {
        let n = if max_limit == 0 { u64::MAX } else { max_limit };
        self.max_limit = n;
        self.default_limit = n;
    }

    /// weft's defaults (docs/decisions.md).
    pub const DEFAULT: Self = Self {
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        max_event_bytes: MAX_EVENT_BYTES,
        max_subscriptions: 20,
        max_filters: DEFAULT_MAX_FILTERS,
        max_filter_values: DEFAULT_MAX_FILTER_VALUES,
        max_subscription_id_chars: MAX_SUBSCRIPTION_ID_CHARS,
        max_limit: 5_000,
        default_limit: 500,
        page_size: 100,
        max_unflushed_frames: 1_000,
        max_pending_writes: 16,
        max_auth_pubkeys: 8,
        max_future_secs: Some(900),
        messages: BucketConfig::new(100, 20),
        max_neg_sessions: 2,
        max_neg_items: 100_000,
        neg_frame_bytes: DEFAULT_NEG_FRAME_BYTES,
        neg_idle_secs: 60,
    };

    /// How many stored events a filter asking `limit` gets: `limit` clamped to
    /// [`max_limit`](Self::max_limit), or [`default_limit`](Self::default_limit) without one.
    pub fn stored_events_for(&self, limit: Option<u64>) -> u64 {
        limit.unwrap_or(self.default_limit).min(self.max_limit)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filters_limit_is_clamped_and_defaulted() {
        let l = Limits::DEFAULT;
        assert_eq!(l.stored_events_for(None), l.default_limit);
        // nostream's client default page, which relay peering (spec 002 §7) names.
        assert_eq!(l.default_limit, 500);
        assert_eq!(l.stored_events_for(Some(0)), 0);
        assert_eq!(l.stored_events_for(Some(7)), 7);
        assert_eq!(l.stored_events_for(Some(u64::MAX)), l.max_limit);
    }

    #[test]
    fn a_peers_max_limit_of_zero_is_uncapped_and_reads_the_whole_feed() {
        let mut l = Limits::PEER_DEFAULT;
        assert_eq!(l.stored_events_for(None), u64::MAX);
        assert_eq!(l.stored_events_for(Some(1_000_000)), 1_000_000);
        l.set_peer_max_limit(2_000);
        assert_eq!(l.stored_events_for(None), 2_000);
        assert_eq!(l.stored_events_for(Some(5_000)), 2_000);
        assert_eq!(l.stored_events_for(Some(7)), 7);
        l.set_peer_max_limit(0);
        assert_eq!(l.stored_events_for(None), u64::MAX);
    }

    #[test]
    fn peer_defaults_are_larger_but_finite() {
        let (c, p) = (Limits::DEFAULT, Limits::PEER_DEFAULT);
        assert!(p.max_subscriptions > c.max_subscriptions);
        assert!(p.max_filters > c.max_filters);
        assert!(p.max_filter_values > c.max_filter_values);
        assert!(p.messages.burst > c.messages.burst && p.messages.per_second > 0);
        assert!(p.messages.per_second > c.messages.per_second);
        // What bounds memory stays the client's: frames, pages, unflushed frames.
        assert_eq!(p.max_message_bytes, c.max_message_bytes);
        assert_eq!(p.page_size, c.page_size);
        assert_eq!(p.max_unflushed_frames, c.max_unflushed_frames);
        assert!(p.max_subscription_id_chars <= MAX_SUBSCRIPTION_ID_CHARS);
    }

    #[test]
    fn the_defaults_keep_nip01s_bound_and_fit_an_event_in_a_frame() {
        let l = Limits::default();
        assert!(l.max_subscription_id_chars <= MAX_SUBSCRIPTION_ID_CHARS);
        assert!(l.max_event_bytes < l.max_message_bytes);
        assert!(l.default_limit <= l.max_limit);
        assert!(l.page_size > 0 && l.max_subscriptions > 0 && l.max_filters > 0);
        // The negentropy crate takes 0 or at least 4 096; in hex the message fits a frame.
        assert!(l.neg_frame_bytes >= 4_096);
        assert!(2 * l.neg_frame_bytes as usize + 100 < l.max_message_bytes);
    }
}
