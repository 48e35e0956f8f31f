//! The audit stream (AIRC §4.9, §13): the kinds of event a server writes, who may subscribe and
//! what each subscriber sees, and the bound on what one subscriber may be handed.
//!
//! The server decides *when* an event happens and fills in its fields; this module decides
//! *who* receives it. Events never carry a message body (§13, §16.6): [`Event`] has no field
//! for one, so a body cannot be written by mistake, and passport tokens never reach it either
//! (only passport ids do).
//!
//! Scoping (§13): a subscriber sees an event when any of its `from`, `to`, `endpoint` or `realm`
//! lies inside one of the subscriber's namespaces (§5); an administrator sees every event.
//! `realm` names another realm's server (`peer.up`, `peer.down`), which lies inside no namespace
//! of this realm, so only administrators see peer events.
//!
//! Bounds (§16.7): every text field of an event is cut to [`MAX_EVENT_FIELD_BYTES`]
//! ([`bound_fields`]), so a refused frame cannot write a megabyte `from` into the log; and the
//! stored log is kept by age and size, oldest first, with a count of what was dropped
//! ([`AuditLog`], for whatever stores it).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::ops::Range;
use core::time::Duration;

use super::address::{Address, Authority, MAX_ADDRESS_LEN, Namespace};
use super::frame::{Event, Scope, Subscribed};
use crate::core::bucket::{BucketConfig, TokenBucket};
use crate::core::{ConnId, Timestamp};

/// The events one subscriber may be handed: a burst of 1024, then 256 a second.
///
/// A sans-IO machine cannot see a socket's write queue, so the bound on a subscriber's queue is
/// put on what the machine hands the host for it: a subscriber that is sent more than this (its
/// host is holding frames it has not read) is dropped, not fed a stream with silent gaps. The
/// durable log ([`super::server::Record::Audit`]) still holds every event.
pub const SUBSCRIBER_RATE: BucketConfig = BucketConfig::new(1024, 256);

/// The most bytes one text field of an event (`from`, `to`, `id`, `reason`, ...) is written
/// with: [`MAX_ADDRESS_LEN`], so every address that parses is written whole, while a refused
/// frame's field (a `from` that is no address, a megabyte long) is cut at the last character
/// boundary before it. An event then has at most 17 such fields: a few tens of KiB at worst, in
/// the log and on every subscriber's stream.
pub const MAX_EVENT_FIELD_BYTES: usize = MAX_ADDRESS_LEN;

/// How long the stored audit log keeps an event: 30 days, long enough to look back over a
/// month's traffic, short enough that a busy realm's log does not grow for ever. The spec says
/// the log is append-only and sets no retention (§13, §15 was lost); dropping the oldest is the
/// only change ever made to it.
pub const AUDIT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// The most bytes the stored audit log keeps (each event's JSON form): 256 MiB, about a million
/// message events. Past it the oldest events are dropped first, and counted.
pub const MAX_AUDIT_BYTES: usize = 256 * 1024 * 1024;

/// Cuts every text field of `event` to [`MAX_EVENT_FIELD_BYTES`] on a character boundary. The
/// server does this to every event before it is logged or streamed.
pub fn bound_fields(event: &mut Event) {
    let Event {
        ts: _,
        kind,
        id,
        from,
        to,
        status,
        code,
        reason,
        by,
        hop,
        kind_of_msg,
        re,
        bytes: _,
        link,
        passport,
        endpoint,
        realm,
        authenticated: _,
        outbound: _,
        label,
        state,
        uses: _,
        uses_left: _,
    } = event;
    truncate(kind);
    for text in [
        id,
        from,
        to,
        status,
        code,
        reason,
        by,
        hop,
        kind_of_msg,
        re,
        link,
        passport,
        endpoint,
        realm,
        label,
        state,
    ]
    .into_iter()
    .flatten()
    {
        truncate(text);
    }
}

/// Cuts `text` to at most [`MAX_EVENT_FIELD_BYTES`], at a character boundary.
fn truncate(text: &mut String) {
    if text.len() > MAX_EVENT_FIELD_BYTES {
        let mut end = MAX_EVENT_FIELD_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// The stored audit log's retention: which events to drop, oldest first, so that it keeps at
/// most [`MAX_AUDIT_BYTES`] and nothing older than [`AUDIT_RETENTION`], and how many it dropped.
///
/// The log lives wherever the host stores records ([`super::server::Record::Audit`]); this is
/// its rule, kept apart from the storage so that every store keeps it alike. Each event has a
/// sequence number, increasing in the order written; what to drop is always a range of them from
/// the oldest, so a store deletes it in one sweep.
#[derive(Clone, Debug)]
pub struct AuditLog {
    /// (sequence, when written, bytes) of every event kept, oldest first.
    kept: VecDeque<(u64, Timestamp, usize)>,
    bytes: usize,
    next: u64,
    max_age: Duration,
    max_bytes: usize,
    dropped: u64,
    dropped_bytes: u64,
}

impl Default for AuditLog {
    fn default() -> Self {
        Self::new(AUDIT_RETENTION, MAX_AUDIT_BYTES)
    }
}

impl AuditLog {
    /// An empty log keeping events for `max_age` and at most `max_bytes` of them.
    pub fn new(max_age: Duration, max_bytes: usize) -> Self {
        Self {
            kept: VecDeque::new(),
            bytes: 0,
            next: 0,
            max_age,
            max_bytes,
            dropped: 0,
            dropped_bytes: 0,
        }
    }

    /// An event stored before a restart, handed back in sequence order: it is kept, and what is
    /// appended next follows it. Call [`AuditLog::prune`] once they are all back.
    pub fn restore(&mut self, seq: u64, at: Timestamp, bytes: usize) {
        self.kept.push_back((seq, at, bytes));
        self.bytes = self.bytes.saturating_add(bytes);
        self.next = self.next.max(seq.saturating_add(1));
    }

    /// Appends an event written at `at` taking `bytes`: its sequence number, and the events to
    /// drop to make room (and any past their age at `at`), as a range of sequence numbers.
    pub fn append(&mut self, at: Timestamp, bytes: usize) -> (u64, Range<u64>) {
        let seq = self.next;
        self.next += 1;
        self.kept.push_back((seq, at, bytes));
        self.bytes = self.bytes.saturating_add(bytes);
        (seq, self.prune(at))
    }

    /// Drops what is older than the retention at `now` or over the byte bound, oldest first
    /// (the event just appended is never dropped): the range of sequence numbers to delete.
    pub fn prune(&mut self, now: Timestamp) -> Range<u64> {
        let mut range: Option<Range<u64>> = None;
        while let Some(&(seq, at, bytes)) = self.kept.front() {
            let old = now.saturating_duration_since(at) > self.max_age;
            let over = self.bytes > self.max_bytes && self.kept.len() > 1;
            if !old && !over {
                break;
            }
            self.kept.pop_front();
            self.bytes -= bytes;
            self.dropped += 1;
            self.dropped_bytes += bytes as u64;
            let start = range.as_ref().map_or(seq, |r| r.start);
            range = Some(start..seq + 1);
        }
        range.unwrap_or(self.next..self.next)
    }

    /// Events dropped so far (since this log was made: a store that wants the count across
    /// restarts keeps it).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Bytes of the events dropped so far.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes
    }

    /// Events kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether no event is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The sequence number the next event appended takes.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

/// The kinds of event §13 names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// A message was acked `delivered`.
    MsgDelivered,
    /// A message was acked `queued`.
    MsgQueued,
    /// A message was acked `failed`.
    MsgFailed,
    /// A spooled message was handed to its next hop by a flush (§7.4).
    MsgFlushed,
    /// A link was offered (§11.2).
    LinkOffer,
    /// A link offer was accepted.
    LinkAccept,
    /// A link offer was declined.
    LinkDecline,
    /// A link was revoked.
    LinkRevoke,
    /// A link was granted by a redeemed passport (§12.5).
    LinkGrant,
    /// A passport was issued (§12.3).
    PassportIssue,
    /// A redemption was attempted (§12.5); `status: failed` and a `code` when refused.
    PassportRedeem,
    /// A passport was revoked (§12.6).
    PassportRevoke,
    /// A peer link came up (§8.4).
    PeerUp,
    /// A peer link went down.
    PeerDown,
}

impl Kind {
    /// Every kind, in §13's order.
    pub const ALL: &'static [Kind] = &[
        Kind::MsgDelivered,
        Kind::MsgQueued,
        Kind::MsgFailed,
        Kind::MsgFlushed,
        Kind::LinkOffer,
        Kind::LinkAccept,
        Kind::LinkDecline,
        Kind::LinkRevoke,
        Kind::LinkGrant,
        Kind::PassportIssue,
        Kind::PassportRedeem,
        Kind::PassportRevoke,
        Kind::PeerUp,
        Kind::PeerDown,
    ];

    /// The kind as written in `event.kind`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::MsgDelivered => "msg.delivered",
            Kind::MsgQueued => "msg.queued",
            Kind::MsgFailed => "msg.failed",
            Kind::MsgFlushed => "msg.flushed",
            Kind::LinkOffer => "link.offer",
            Kind::LinkAccept => "link.accept",
            Kind::LinkDecline => "link.decline",
            Kind::LinkRevoke => "link.revoke",
            Kind::LinkGrant => "link.grant",
            Kind::PassportIssue => "passport.issue",
            Kind::PassportRedeem => "passport.redeem",
            Kind::PassportRevoke => "passport.revoke",
            Kind::PeerUp => "peer.up",
            Kind::PeerDown => "peer.down",
        }
    }

    /// The prefix before the `.` (`msg`, `link`, `passport`, `peer`).
    fn prefix(self) -> &'static str {
        let s = self.as_str();
        s.split_once('.').map_or(s, |(p, _)| p)
    }

    /// Whether a `kinds` entry (§4.9: a full kind or a prefix) selects this kind.
    fn selected_by(self, filter: &str) -> bool {
        filter == self.as_str() || filter == self.prefix()
    }
}

/// An event with nothing but its time and kind; the server fills in what applies.
pub fn event(now: Timestamp, kind: Kind) -> Event {
    Event {
        // Unix seconds with the millisecond kept, as §4.9's example writes `ts`.
        ts: now.as_millis() as f64 / 1000.0,
        kind: kind.as_str().to_string(),
        id: None,
        from: None,
        to: None,
        status: None,
        code: None,
        reason: None,
        by: None,
        hop: None,
        kind_of_msg: None,
        re: None,
        bytes: None,
        link: None,
        passport: None,
        endpoint: None,
        realm: None,
        authenticated: None,
        outbound: None,
        label: None,
        state: None,
        uses: None,
        uses_left: None,
    }
}

/// Why a `subscribe` is refused; the server answers with an `error` frame and closes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscribeRefusal {
    /// The connection may act for no namespace and is no administrator: it could see nothing.
    NoScope,
    /// A `kinds` entry is neither a kind of §13 nor one of their prefixes.
    UnknownKind(String),
}

impl core::fmt::Display for SubscribeRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoScope => f.write_str("this connection acts for no namespace"),
            Self::UnknownKind(k) => {
                let k: String = k.chars().take(64).collect();
                write!(f, "unknown event kind {k}")
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Subscriber {
    /// The kinds selected (never empty).
    kinds: Vec<Kind>,
    /// `None` for an administrator.
    namespaces: Option<Vec<Namespace>>,
    budget: TokenBucket,
}

/// What one event comes to: the subscribers to send it to, and those dropped for being slow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fanout {
    /// Send the event to these connections.
    pub to: Vec<ConnId>,
    /// These subscribers exceeded [`SUBSCRIBER_RATE`]: close them.
    pub slow: Vec<ConnId>,
}

/// The live subscribers of one realm's audit stream (one per connection, so bounded by the
/// server's connection bound).
#[derive(Clone, Debug)]
pub struct Audit {
    realm: Authority,
    subscribers: BTreeMap<ConnId, Subscriber>,
}

impl Audit {
    /// No subscribers yet, for `realm`.
    pub fn new(realm: Authority) -> Self {
        Self {
            realm,
            subscribers: BTreeMap::new(),
        }
    }

    /// A client's `subscribe` (§4.9): `namespaces` are the connection's (§5), `admin` whether the
    /// host proved it an administrator's. A second `subscribe` replaces the first's filter.
    ///
    /// Absent or empty `kinds` select every kind; the answer lists the filter in force.
    pub fn subscribe(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        kinds: Option<&[String]>,
        namespaces: &[Namespace],
        admin: bool,
    ) -> Result<Subscribed, SubscribeRefusal> {
        if !admin && namespaces.is_empty() {
            return Err(SubscribeRefusal::NoScope);
        }
        let filters = kinds.unwrap_or_default();
        for f in filters {
            if !Kind::ALL.iter().any(|k| k.selected_by(f)) {
                return Err(SubscribeRefusal::UnknownKind(f.clone()));
            }
        }
        let selected: Vec<Kind> = Kind::ALL
            .iter()
            .copied()
            .filter(|k| filters.is_empty() || filters.iter().any(|f| k.selected_by(f)))
            .collect();
        let echoed = if filters.is_empty() {
            let mut prefixes: Vec<String> = Kind::ALL.iter().map(|k| k.prefix().into()).collect();
            prefixes.dedup();
            prefixes
        } else {
            filters.to_vec()
        };
        let scope = if admin {
            Scope::All
        } else {
            Scope::Namespaces(
                namespaces
                    .iter()
                    .map(|ns| ns.segments().join("/"))
                    .collect(),
            )
        };
        self.subscribers.insert(
            conn,
            Subscriber {
                kinds: selected,
                namespaces: (!admin).then(|| namespaces.to_vec()),
                budget: SUBSCRIBER_RATE.bucket(now),
            },
        );
        Ok(Subscribed {
            kinds: echoed,
            scope,
        })
    }

    /// The connection closed, or was dropped as slow.
    pub fn unsubscribe(&mut self, conn: ConnId) {
        self.subscribers.remove(&conn);
    }

    /// Whether anyone is subscribed (the server skips building events nobody would see, but
    /// still logs them).
    pub fn is_empty(&self) -> bool {
        self.subscribers.is_empty()
    }

    /// Who receives `event`: every subscriber whose kinds select it and whose scope holds it.
    /// A subscriber past its budget is listed in [`Fanout::slow`] and removed.
    pub fn fan_out(&mut self, now: Timestamp, event: &Event) -> Fanout {
        let Some(kind) = Kind::ALL.iter().copied().find(|k| k.as_str() == event.kind) else {
            return Fanout::default();
        };
        let mut fanout = Fanout::default();
        // Parsed at most once per event, not once per scoped subscriber: the subscriber count is
        // bounded only by the connection bound, and an address parse is the costly part of
        // scoping. Left unparsed when no scoped subscriber selects the kind.
        let mut scoped: Option<Vec<Address>> = None;
        for (conn, sub) in &mut self.subscribers {
            if !sub.kinds.contains(&kind) {
                continue;
            }
            let visible = match &sub.namespaces {
                None => true,
                Some(nss) => {
                    let addresses = scoped.get_or_insert_with(|| in_realm(&self.realm, event));
                    in_scope(addresses, nss)
                }
            };
            if !visible {
                continue;
            }
            if sub.budget.try_take(now) {
                fanout.to.push(*conn);
            } else {
                fanout.slow.push(*conn);
            }
        }
        for conn in &fanout.slow {
            self.subscribers.remove(conn);
        }
        fanout
    }
}

/// The event's `from`, `to` and `endpoint` that parse as addresses of `realm`: the only ones
/// that can lie inside a namespace of this realm (§13).
fn in_realm(realm: &Authority, event: &Event) -> Vec<Address> {
    // `realm` is not looked at: a realm is a whole address space, never inside one namespace.
    [&event.from, &event.to, &event.endpoint]
        .into_iter()
        .filter_map(|a| Address::parse(a.as_deref()?).ok())
        .filter(|a| a.realm() == realm)
        .collect()
}

/// §13: any of `addresses` (from [`in_realm`]) inside one of `namespaces`.
fn in_scope(addresses: &[Address], namespaces: &[Namespace]) -> bool {
    addresses
        .iter()
        .any(|a| namespaces.iter().any(|ns| a.is_inside(ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn realm() -> Authority {
        Authority::parse("example.com").unwrap()
    }

    fn ns(s: &str) -> Namespace {
        Namespace::parse(s).unwrap()
    }

    fn msg_event(from: &str, to: &str) -> Event {
        let mut e = event(Timestamp::from_secs(10), Kind::MsgDelivered);
        e.from = Some(from.into());
        e.to = Some(to.into());
        e
    }

    #[test]
    fn every_text_field_is_cut_to_its_bound_on_a_character_boundary() {
        let mut e = event(Timestamp::from_secs(10), Kind::MsgFailed);
        // 3-byte characters: the bound (1024) falls inside one, so 1023 bytes are kept.
        let huge = "€".repeat(300_000);
        e.from = Some(huge.clone());
        e.id = Some("a".repeat(1_000_000));
        e.reason = Some(huge.clone());
        e.to = Some("airc://example.com/alice/x".into());
        e.bytes = Some(7);
        bound_fields(&mut e);
        assert_eq!(e.from.as_deref().unwrap().len(), 1023);
        assert!(huge.starts_with(e.from.as_deref().unwrap()));
        assert_eq!(e.id.as_deref().unwrap().len(), MAX_EVENT_FIELD_BYTES);
        assert_eq!(e.reason.as_deref().unwrap().len(), 1023);
        assert_eq!(e.to.as_deref(), Some("airc://example.com/alice/x"));
        assert_eq!(e.bytes, Some(7));
        // The longest address that parses is written whole.
        let long = alloc::format!("airc://example.com/{}", "a".repeat(MAX_ADDRESS_LEN - 19));
        assert_eq!(long.len(), MAX_ADDRESS_LEN);
        e.endpoint = Some(long.clone());
        bound_fields(&mut e);
        assert_eq!(e.endpoint, Some(long));
    }

    #[test]
    fn a_million_small_events_keep_the_log_at_its_byte_bound_dropping_the_oldest_first() {
        let t0 = Timestamp::from_secs(1_790_380_000);
        let mut log = AuditLog::default();
        let size = 300;
        let fits = MAX_AUDIT_BYTES / size;
        let mut oldest = 0;
        for i in 0..1_000_000u64 {
            let (seq, drop) = log.append(t0, size);
            assert_eq!(seq, i);
            if !drop.is_empty() {
                // Always the oldest kept, one range after the other.
                assert_eq!(drop.start, oldest);
                oldest = drop.end;
            }
        }
        assert!(log.bytes() <= MAX_AUDIT_BYTES);
        assert_eq!(log.len(), fits);
        assert_eq!(log.dropped(), 1_000_000 - fits as u64);
        assert_eq!(log.dropped_bytes(), log.dropped() * size as u64);
        assert_eq!(oldest, 1_000_000 - fits as u64);
    }

    #[test]
    fn events_past_the_retention_are_dropped_and_counted_and_a_restored_log_continues() {
        let t0 = Timestamp::from_secs(1_790_380_000);
        let mut log = AuditLog::new(AUDIT_RETENTION, 1000);
        let (seq, drop) = log.append(t0, 100);
        assert_eq!(seq, 0);
        assert!(drop.is_empty());
        log.append(t0 + Duration::from_secs(60), 100);
        // At the retention exactly: both kept; a second past it, the first goes.
        assert!(log.prune(t0 + AUDIT_RETENTION).is_empty());
        assert_eq!(
            log.prune(t0 + AUDIT_RETENTION + Duration::from_secs(1)),
            0..1
        );
        assert_eq!((log.len(), log.dropped()), (1, 1));
        // A huge event, alone over the bound, is kept; it pushes the older one out.
        let (seq, drop) = log.append(t0 + Duration::from_secs(120), 5000);
        assert_eq!((seq, drop), (2, 1..2));
        assert_eq!(log.len(), 1);
        // After a restart the store hands back what it kept, and the log goes on from there.
        let mut again = AuditLog::new(AUDIT_RETENTION, 1000);
        again.restore(7, t0, 400);
        again.restore(9, t0, 400);
        assert_eq!(again.append(t0, 400), (10, 7..8));
        assert_eq!(again.bytes(), 800);
    }

    #[test]
    fn a_kinds_filter_selects_by_full_kind_or_by_prefix() {
        let mut a = Audit::new(realm());
        let now = Timestamp::from_secs(1);
        let got = a
            .subscribe(
                now,
                ConnId(1),
                Some(&["link".into()]),
                &[ns("alice")],
                false,
            )
            .unwrap();
        assert_eq!(got.kinds, ["link"]);
        a.subscribe(
            now,
            ConnId(2),
            Some(&["msg.queued".into()]),
            &[ns("alice")],
            false,
        )
        .unwrap();
        let mut offer = event(now, Kind::LinkOffer);
        offer.from = Some("airc://example.com/alice/x".into());
        assert_eq!(a.fan_out(now, &offer).to, [ConnId(1)]);
        let mut queued = event(now, Kind::MsgQueued);
        queued.to = Some("airc://example.com/alice/x".into());
        assert_eq!(a.fan_out(now, &queued).to, [ConnId(2)]);
        let delivered = msg_event("airc://example.com/alice/x", "airc://example.com/bob/y");
        assert!(a.fan_out(now, &delivered).to.is_empty());
    }

    #[test]
    fn an_unknown_kind_or_a_connection_without_namespaces_is_refused() {
        let mut a = Audit::new(realm());
        let now = Timestamp::from_secs(1);
        assert_eq!(
            a.subscribe(
                now,
                ConnId(1),
                Some(&["mail".into()]),
                &[ns("alice")],
                false
            ),
            Err(SubscribeRefusal::UnknownKind("mail".into()))
        );
        assert_eq!(
            a.subscribe(now, ConnId(1), None, &[], false),
            Err(SubscribeRefusal::NoScope)
        );
        assert!(a.is_empty());
    }

    #[test]
    fn a_subscriber_sees_events_touching_its_namespaces_and_an_administrator_all() {
        let mut a = Audit::new(realm());
        let now = Timestamp::from_secs(1);
        let got = a
            .subscribe(now, ConnId(1), None, &[ns("alice")], false)
            .unwrap();
        assert_eq!(got.scope, Scope::Namespaces(alloc::vec!["alice".into()]));
        assert_eq!(got.kinds, ["msg", "link", "passport", "peer"]);
        let admin = a.subscribe(now, ConnId(9), None, &[], true).unwrap();
        assert_eq!(admin.scope, Scope::All);
        let theirs = msg_event("airc://example.com/bob/y", "airc://partner.example/s/d");
        assert_eq!(a.fan_out(now, &theirs).to, [ConnId(9)]);
        let to_alice = msg_event("airc://partner.example/s/d", "airc://example.com/alice/x");
        assert_eq!(a.fan_out(now, &to_alice).to, [ConnId(1), ConnId(9)]);
        // Another realm's `alice` is not this realm's namespace alice.
        let elsewhere = msg_event("airc://partner.example/alice/x", "airc://other.example/b");
        assert_eq!(a.fan_out(now, &elsewhere).to, [ConnId(9)]);
        let mut up = event(now, Kind::PeerUp);
        up.realm = Some("alice".into());
        assert_eq!(a.fan_out(now, &up).to, [ConnId(9)]);
    }

    #[test]
    fn one_event_reaches_exactly_the_subscribers_whose_namespaces_hold_its_addresses() {
        let mut a = Audit::new(realm());
        let now = Timestamp::from_secs(1);
        for (conn, nss) in [
            (1, &["alice"][..]),
            (2, &["carol"]),
            (3, &["bob"]),
            (4, &["carol", "bob"]),
            (5, &["alice/x"]), // an endpoint's own path is not inside it
            (6, &["dave"]),
            (7, &["erin"]),
        ] {
            let nss: Vec<Namespace> = nss.iter().map(|s| ns(s)).collect();
            a.subscribe(now, ConnId(conn), None, &nss, false).unwrap();
        }
        let mut e = msg_event("airc://example.com/alice/x", "airc://example.com/bob/y");
        e.endpoint = Some("airc://partner.example/dave/z".into());
        e.realm = Some("example.com".into());
        e.by = Some("airc://example.com/erin/w".into()); // not one of §13's scoping fields
        assert_eq!(a.fan_out(now, &e).to, [ConnId(1), ConnId(3), ConnId(4)]);
        e.to = Some("not an address".into());
        e.endpoint = Some("airc://example.com/dave/z".into());
        assert_eq!(a.fan_out(now, &e).to, [ConnId(1), ConnId(6)]);
    }

    /// §13's scope as it was first written: each subscriber parses the event's addresses itself.
    fn walked_in_scope(realm: &Authority, namespaces: &[Namespace], event: &Event) -> bool {
        let addresses = [&event.from, &event.to, &event.endpoint];
        addresses.iter().filter_map(|a| a.as_deref()).any(|a| {
            Address::parse(a)
                .is_ok_and(|a| a.realm() == realm && namespaces.iter().any(|ns| a.is_inside(ns)))
        })
    }

    #[test]
    fn parsing_an_event_once_reaches_whom_parsing_it_per_subscriber_did() {
        use chacha20::ChaCha20Rng;
        use rand_core::{Rng, SeedableRng};
        let spaces = ["alice", "bob", "alice/team", "carol", "x"];
        let addresses = [
            "airc://example.com/alice/x",
            "airc://example.com/alice/team/y",
            "airc://example.com/alice/",
            "airc://example.com/bob/y",
            "airc://example.com/carol/z#frag",
            "airc://example.com/x",
            "airc://Example.com/x/y",
            "//example.com/bob/z",
            "airc://partner.example/alice/x",
            "airc://example.com:7001/alice/x",
            "alice/x",
            "",
        ];
        let now = Timestamp::from_secs(1);
        for seed in 0..10 {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let mut pick = |n: usize| rng.next_u32() as usize % n;
            let mut a = Audit::new(realm());
            for conn in 0..12 {
                let admin = pick(6) == 0;
                let mut nss: Vec<Namespace> = (0..pick(3)).map(|_| ns(spaces[pick(5)])).collect();
                if nss.is_empty() && !admin {
                    nss.push(ns(spaces[pick(5)]));
                }
                let kinds = match pick(3) {
                    0 => None,
                    1 => Some(alloc::vec![String::from("msg")]),
                    _ => Some(alloc::vec![String::from("link.offer")]),
                };
                a.subscribe(now, ConnId(conn), kinds.as_deref(), &nss, admin)
                    .unwrap();
            }
            // Fewer events than a subscriber's burst, so nobody is dropped as slow.
            for _ in 0..200 {
                let kind = [Kind::MsgDelivered, Kind::LinkOffer, Kind::PeerUp][pick(3)];
                let mut e = event(now, kind);
                let mut field = || (pick(4) != 0).then(|| addresses[pick(12)].to_string());
                e.from = field();
                e.to = field();
                e.endpoint = field();
                let want: Vec<ConnId> = a
                    .subscribers
                    .iter()
                    .filter(|(_, s)| s.kinds.contains(&kind))
                    .filter(|(_, s)| match &s.namespaces {
                        None => true,
                        Some(nss) => walked_in_scope(&a.realm, nss, &e),
                    })
                    .map(|(c, _)| *c)
                    .collect();
                let got = a.fan_out(now, &e);
                assert_eq!(
                    (got.to, got.slow),
                    (want, alloc::vec![]),
                    "seed {seed}: {e:?}"
                );
            }
        }
    }

    #[test]
    fn a_subscriber_handed_more_than_its_budget_is_dropped() {
        let mut a = Audit::new(realm());
        let now = Timestamp::from_secs(1);
        a.subscribe(now, ConnId(1), None, &[ns("alice")], false)
            .unwrap();
        let e = msg_event("airc://example.com/alice/x", "airc://example.com/bob/y");
        for _ in 0..SUBSCRIBER_RATE.burst {
            assert_eq!(a.fan_out(now, &e).to, [ConnId(1)]);
        }
        let last = a.fan_out(now, &e);
        assert!(last.to.is_empty());
        assert_eq!(last.slow, [ConnId(1)]);
        assert!(a.is_empty());
    }

    #[test]
    fn a_subscriber_reading_at_the_rate_is_never_dropped() {
        let mut a = Audit::new(realm());
        let start = Timestamp::from_secs(1);
        a.subscribe(start, ConnId(1), None, &[ns("alice")], false)
            .unwrap();
        let e = msg_event("airc://example.com/alice/x", "airc://example.com/bob/y");
        // Twice the burst, spread at the steady rate.
        let n = u64::from(SUBSCRIBER_RATE.burst) * 2;
        for i in 0..n {
            let now = Timestamp::from_millis(start.as_millis() + i * 1000 / 256);
            assert_eq!(a.fan_out(now, &e).slow, []);
        }
    }
}
