//! The seam between a relay session and its event store: what the session asks ([`StoreOp`]),
//! what it is answered ([`StoreReply`]), and the [`EventStore`] trait a backend implements so the
//! same test suite ([`super::suite`]) runs against every one.
//!
//! The semantics every backend keeps (NIP-01, NIP-09, NIP-40, NIP-62, by way of
//! [`crate::nostr::kinds`]):
//! - a write of an event already held is [`WriteOutcome::Duplicate`]; a replaceable or
//!   addressable event replaces the one at its address only when it [`supersedes`] it
//!   ([`WriteOutcome::Superseded`] otherwise); a kind 5 event is stored and deletes what it
//!   [`deletes`], and an event a stored deletion request covers is refused
//!   ([`WriteOutcome::Deleted`]); an event of a pubkey that vanished at or after its `created_at`
//!   is refused ([`WriteOutcome::Vanished`]). A write returns only once the event is durable.
//! - a query returns the events matching one filter, newest first (`created_at` descending, then
//!   id ascending), strictly after a [`Cursor`], at most `max` of them, never one past its NIP-40
//!   expiration at `now`. The filter's `limit` is the session's to apply, not the store's.
//! - a count is of the events matching any filter, under the same visibility.
//!
//! [`supersedes`]: crate::nostr::kinds::supersedes
//! [`deletes`]: crate::nostr::kinds::deletes

use alloc::string::String;
use alloc::vec::Vec;

use crate::core::Timestamp;
use crate::nostr::event::{Event, EventId};
use crate::nostr::message::Filter;

/// A place in the newest-first order a query walks: the last event of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// Its `created_at`.
    pub created_at: u64,
    /// Its id.
    pub id: EventId,
}

impl Cursor {
    /// The cursor at `event`.
    pub fn at(event: &Event) -> Self {
        Self {
            created_at: event.created_at,
            id: event.id,
        }
    }

    /// Whether `event` comes strictly after this cursor in newest-first order.
    pub fn is_before(&self, event: &Event) -> bool {
        event.created_at < self.created_at
            || (event.created_at == self.created_at && event.id > self.id)
    }
}

/// A request from a session to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// Keep an accepted, verified, non-ephemeral event (the kind rules applied by the store).
    Write {
        /// The event.
        event: Event,
        /// When it arrived.
        now: Timestamp,
    },
    /// Apply a NIP-62 request to vanish that names this relay: delete every event of its pubkey
    /// up to its `created_at`, and refuse them from then on.
    Vanish {
        /// The kind 62 event.
        event: Event,
    },
    /// One page of stored events for one filter.
    Query {
        /// The filter (its `limit` ignored).
        filter: Filter,
        /// Start strictly after this place, or at the newest.
        after: Option<Cursor>,
        /// Most events to return; fewer means there are no more.
        max: usize,
        /// The clock, for NIP-40 visibility.
        now: Timestamp,
    },
    /// The `(created_at, id)` of every stored event matching the filter, for NIP-77, at most
    /// `max` of them (a store answering `max` means "at least that many").
    Items {
        /// The filter (its `limit` ignored).
        filter: Filter,
        /// Most items to return.
        max: usize,
        /// The clock, for NIP-40 visibility.
        now: Timestamp,
    },
    /// Count the stored events matching any of the filters (NIP-45).
    Count {
        /// The filters (their `limit` ignored).
        filters: Vec<Filter>,
        /// The clock, for NIP-40 visibility.
        now: Timestamp,
    },
}

/// What became of a written event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored (and, for kind 5, its targets deleted).
    Stored,
    /// Already held.
    Duplicate,
    /// A newer version of its address is held; not stored.
    Superseded,
    /// A stored deletion request by its author covers it; not stored.
    Deleted,
    /// Its author vanished from this relay at or after its `created_at`; not stored.
    Vanished,
}

/// The store's answer to a [`StoreOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreReply {
    /// To [`StoreOp::Write`].
    Written(WriteOutcome),
    /// To [`StoreOp::Vanish`]: how many events were deleted.
    Vanished(u64),
    /// To [`StoreOp::Query`]: the page, in order.
    Page(Vec<Event>),
    /// To [`StoreOp::Items`]: `(created_at, id)` pairs, in any order.
    Items(Vec<(u64, EventId)>),
    /// To [`StoreOp::Count`].
    Count(u64),
    /// The store could not do it (answered `error:`).
    Failed(String),
}

/// A store failure, in words for the `error:` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

/// An event store a relay session's [`StoreOp`]s run against. A driver's backend implements the
/// four operations; [`EventStore::execute`] maps an op to its reply.
pub trait EventStore {
    /// [`StoreOp::Write`].
    fn write(&mut self, event: &Event, now: Timestamp) -> Result<WriteOutcome, StoreError>;
    /// [`StoreOp::Vanish`]: returns how many events were deleted.
    fn vanish(&mut self, request: &Event) -> Result<u64, StoreError>;
    /// [`StoreOp::Query`].
    fn query(
        &mut self,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError>;
    /// [`StoreOp::Count`].
    fn count(&mut self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError>;

    /// [`StoreOp::Items`]. By default read through [`EventStore::query`] a page at a time; a
    /// backend with an index of `(created_at, id)` answers it without reading events.
    fn items(
        &mut self,
        filter: &Filter,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<(u64, EventId)>, StoreError> {
        const PAGE: usize = 1_000;
        let mut out = Vec::new();
        let mut after = None;
        while out.len() < max {
            let want = PAGE.min(max - out.len());
            let page = self.query(filter, after.as_ref(), want, now)?;
            after = page.last().map(Cursor::at);
            out.extend(page.iter().map(|e| (e.created_at, e.id)));
            if page.len() < want {
                break;
            }
        }
        Ok(out)
    }

    /// Runs `op` and gives the reply the session expects.
    fn execute(&mut self, op: &StoreOp) -> StoreReply {
        let failed = |e: StoreError| StoreReply::Failed(e.0);
        match op {
            StoreOp::Write { event, now } => self
                .write(event, *now)
                .map_or_else(failed, StoreReply::Written),
            StoreOp::Vanish { event } => {
                self.vanish(event).map_or_else(failed, StoreReply::Vanished)
            }
            StoreOp::Query {
                filter,
                after,
                max,
                now,
            } => self
                .query(filter, after.as_ref(), *max, *now)
                .map_or_else(failed, StoreReply::Page),
            StoreOp::Items { filter, max, now } => self
                .items(filter, *max, *now)
                .map_or_else(failed, StoreReply::Items),
            StoreOp::Count { filters, now } => self
                .count(filters, *now)
                .map_or_else(failed, StoreReply::Count),
        }
    }
}
