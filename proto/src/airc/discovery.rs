//! Discovery (AIRC §8.1–§8.2): locating an authority and reading a realm's published keys.
//!
//! Nothing here touches the network. The host asks the DNS questions this module names and feeds
//! the answers back; every time is a `now` argument and every random choice comes from an injected
//! [`rand_core::Rng`].
//!
//! - §8.1 locating: [`plan`] turns an authority and the static configuration into a [`Plan`]:
//!   connect directly, use a static entry, or ask the ordered [`Question`]s. A [`Resolution`]
//!   walks those questions as answers arrive and ends in an [`Outcome`]; [`order_srv`] orders SRV
//!   targets by priority, then by RFC 2782's weighted random selection.
//! - §8.2 published keys: [`parse_key_record`] reads one TXT record, [`keys_from_txt`] collects
//!   every Ed25519 key of a realm, [`txt_name`] is the name to ask for.
//! - Caching: [`DiscoveryCache`] keeps locations per authority and keys per realm for the DNS TTL
//!   clamped to [`MIN_TTL`] … [`MAX_TTL`], and misses for [`MISS_TTL`].
//!
//! ## Decisions where §8 is silent
//!
//! - A TXT record without `v`, or with a `v` other than [`KEY_RECORD_VERSION`], is not an error:
//!   it is someone else's record (or a later version's) at the same name, and is skipped, so a
//!   realm can publish two versions side by side while verifiers migrate.
//! - `v` and `k` values are compared exactly (the spec writes them in lower case); unknown field
//!   names are ignored so later drafts can add fields; a field given twice is an error, since
//!   either reading could be the wrong one.
//! - A `k` other than `ed25519` is returned as [`PublishedKey::Unknown`] and its `p` is not
//!   checked (its format is that algorithm's business); it never hides the realm's other records.
//! - A realm whose TXT records yield no Ed25519 key is cached as a miss (60 s), like no records,
//!   because §9.3 needs a non-empty key set and a fixed record should be seen soon.
//! - The TXT name uses the realm's host only: DNS names carry no port, so realms that differ only
//!   by port share `_airc.<host>`. An IP-literal realm has no TXT name; its keys can only come from
//!   the static `known_keys` table.
//! - An SRV answer whose only record has target `.` means "decidedly not available" (RFC 2782):
//!   resolution stops with [`Location::Unavailable`] and does **not** fall through to steps 4 and
//!   5, because the domain's owner has said no; it is cached for the SRV TTL like any answer. A `.`
//!   among other records is ignored.
//! - A failed query (SERVFAIL, timeout) counts as no records and resolution moves to the next
//!   step: §8.3's TLS check on the resolved host keeps a wrong fallback from being trusted.
//! - When every step finds nothing, the authority is cached as a miss for [`MISS_TTL`] (§8.2's
//!   miss rule, applied to §8.1 too, so an unreachable realm is not re-queried per message).
//! - Step 1 comes before step 2, as written: an explicit port is dialled even if a static entry
//!   names the same authority. An empty static entry counts as absent.
//! - Within one priority, SRV records are sorted by (weight 0 first, target, port) before the
//!   random selection, so a seed gives the same order whatever order the DNS answer came in; when
//!   every remaining weight is 0 the pick is uniform rather than RFC 2782's "first in order", and
//!   when none is 0 the draw is from `1..=sum`, so non-zero weights are exactly proportional (RFC
//!   2782's `0..=sum` gives the first record one extra slot).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use rand_core::Rng;

use super::address::{Authority, DEFAULT_PORT, HostKind, MAX_HOST_LEN};
use crate::codec::base64;
use crate::core::bounded::MapInsert;
use crate::core::{BoundedMap, Timestamp};

/// The shortest time, in seconds, a DNS answer is cached (§8.1).
pub const MIN_TTL: u32 = 30;

/// The longest time, in seconds, a DNS answer is cached (§8.1).
pub const MAX_TTL: u32 = 3600;

/// How long, in seconds, a miss is cached (§8.2).
pub const MISS_TTL: u32 = 60;

/// The most authorities, and separately the most realms, a [`DiscoveryCache`] holds.
///
/// Every remote realm a server talks to costs one entry; 1024 covers a busy federation while
/// keeping the cache a few hundred KiB at worst.
pub const MAX_CACHE_ENTRIES: usize = 1024;

/// The most SRV records of one answer that are considered; the rest are ignored.
///
/// Real services publish a handful; the bound keeps a hostile zone from making ordering costly.
pub const MAX_SRV_RECORDS: usize = 64;

/// The most keys kept for one realm; further records are ignored.
///
/// A realm publishes one record per signing key, and a key rollover needs two or three.
pub const MAX_KEYS_PER_REALM: usize = 16;

/// The longest TXT record, in bytes, [`parse_key_record`] reads.
///
/// A key record is about 60 bytes; this leaves room for later fields without letting a record of
/// DNS's full 64 KiB be scanned.
pub const MAX_KEY_RECORD_LEN: usize = 1024;

/// The `v` value of a key record this module reads (§8.2).
pub const KEY_RECORD_VERSION: &str = "airc1";

/// The algorithm `k` means when absent (§8.2).
pub const DEFAULT_KEY_ALGORITHM: &str = "ed25519";

/// The prefix of the SRV name (§8.1 step 3).
pub const SRV_PREFIX: &str = "_airc._tcp.";

/// The prefix of the address name of §8.1 step 4.
pub const ADDRESS_PREFIX: &str = "airc.";

/// The prefix of the TXT name of §8.2.
pub const TXT_PREFIX: &str = "_airc.";

/// The most random draws one uniform choice makes before folding; only a broken source reaches it.
const MAX_REJECTIONS: usize = 64;

/// The length of an Ed25519 public key.
const ED25519_KEY_LEN: usize = 32;

// ---------------------------------------------------------------------------------------------
// §8.2 published keys
// ---------------------------------------------------------------------------------------------

/// One key a realm publishes (§8.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishedKey {
    /// An Ed25519 public key (RFC 8032), the only algorithm §9 signs with.
    Ed25519([u8; 32]),
    /// A key of another algorithm, named by its `k`; skipped by verifiers.
    Unknown {
        /// The `k` value as published.
        algorithm: String,
    },
}

/// Why an AIRC key record could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyRecordError {
    /// The record is longer than [`MAX_KEY_RECORD_LEN`].
    TooLong,
    /// A field has no `=` or an empty name.
    MalformedField,
    /// A field is given twice.
    DuplicateField,
    /// An Ed25519 record has no `p`.
    MissingKey,
    /// `p` is not padded standard base64.
    BadBase64,
    /// `p` decodes to this many bytes instead of 32.
    WrongLength(usize),
}

impl fmt::Display for KeyRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => f.write_str("key record too long"),
            Self::MalformedField => f.write_str("key record field is not key=value"),
            Self::DuplicateField => f.write_str("key record field given twice"),
            Self::MissingKey => f.write_str("key record has no p"),
            Self::BadBase64 => f.write_str("key record p is not standard base64"),
            Self::WrongLength(n) => write!(f, "key record p is {n} bytes, not 32"),
        }
    }
}

impl core::error::Error for KeyRecordError {}

/// Reads one TXT record of §8.2: `v=airc1 k=ed25519 p=<base64>`.
///
/// The host passes one record with its character-strings concatenated (as RFC 7208 §3.3 does).
/// `Ok(None)` means the record is not an `airc1` key record (no `v`, or another version) and is
/// skipped; see the [module docs](self) for the other decisions.
pub fn parse_key_record(txt: &str) -> Result<Option<PublishedKey>, KeyRecordError> {
    if txt.len() > MAX_KEY_RECORD_LEN {
        return Err(KeyRecordError::TooLong);
    }
    let (mut v, mut k, mut p) = (None, None, None);
    for field in txt.split([' ', ';']).filter(|f| !f.is_empty()) {
        let (name, value) = field
            .split_once('=')
            .filter(|(n, _)| !n.is_empty())
            .ok_or(KeyRecordError::MalformedField)?;
        let slot = match name {
            "v" => &mut v,
            "k" => &mut k,
            "p" => &mut p,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(KeyRecordError::DuplicateField);
        }
    }
    if v != Some(KEY_RECORD_VERSION) {
        return Ok(None);
    }
    let algorithm = k.unwrap_or(DEFAULT_KEY_ALGORITHM);
    if algorithm != DEFAULT_KEY_ALGORITHM {
        return Ok(Some(PublishedKey::Unknown {
            algorithm: algorithm.to_string(),
        }));
    }
    let bytes = base64::decode(p.ok_or(KeyRecordError::MissingKey)?)
        .map_err(|_| KeyRecordError::BadBase64)?;
    let key: [u8; ED25519_KEY_LEN] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| KeyRecordError::WrongLength(bytes.len()))?;
    Ok(Some(PublishedKey::Ed25519(key)))
}

/// Every distinct Ed25519 key in a realm's TXT records, in the order given, at most
/// [`MAX_KEYS_PER_REALM`].
///
/// Records that are not key records, name another algorithm or are malformed are skipped: one bad
/// record must not hide the realm's good ones (§9.3 accepts a signature under any of them).
pub fn keys_from_txt(records: &[&str]) -> Vec<[u8; 32]> {
    let mut keys = Vec::new();
    for record in records {
        if keys.len() >= MAX_KEYS_PER_REALM {
            break;
        }
        if let Ok(Some(PublishedKey::Ed25519(key))) = parse_key_record(record)
            && !keys.contains(&key)
        {
            keys.push(key);
        }
    }
    keys
}

/// The TXT name holding `realm`'s keys, `_airc.<host>`; `None` for an IP-literal realm.
pub fn txt_name(realm: &Authority) -> Option<String> {
    match realm.kind() {
        HostKind::Dns => Some(alloc::format!("{TXT_PREFIX}{}", realm.host())),
        HostKind::Ipv4 | HostKind::Ipv6 => None,
    }
}

// ---------------------------------------------------------------------------------------------
// §8.1 locating an authority
// ---------------------------------------------------------------------------------------------

/// Somewhere to connect: a host name or IP literal, and a port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// A DNS name (lower case, no trailing dot) or an IP literal; an IPv6 literal has no brackets,
    /// so it parses as an IP address.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl Endpoint {
    /// An endpoint from parts.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }
}

/// A DNS question the host must ask (§8.1 steps 3–5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Question {
    /// SRV records of this name (step 3).
    Srv(String),
    /// A and AAAA records of this name; on success connect to it on `port` (steps 4 and 5).
    Address {
        /// The name to resolve.
        name: String,
        /// The port to connect to if it resolves.
        port: u16,
    },
}

impl Question {
    /// The name asked about.
    pub fn name(&self) -> &str {
        match self {
            Self::Srv(name) | Self::Address { name, .. } => name,
        }
    }

    /// The kind of records asked for.
    pub fn record_type(&self) -> RecordType {
        match self {
            Self::Srv(_) => RecordType::Srv,
            Self::Address { .. } => RecordType::Address,
        }
    }
}

/// The kind of DNS records a host is asked to look up (§8.1–§8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordType {
    /// SRV records (§8.1 step 3); answered with [`Answer::Srv`].
    Srv,
    /// A and AAAA records (§8.1 steps 4 and 5); answered with [`Answer::Addresses`].
    Address,
    /// TXT records (§8.2 published keys); answered with [`Answer::Txt`].
    Txt,
}

/// How to reach an authority (§8.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Step 1: connect here; no SRV or `airc.` lookups (a DNS host is still resolved by the
    /// connect itself).
    Direct(Endpoint),
    /// Step 2: the static configuration's endpoints, tried in order.
    Static(Vec<Endpoint>),
    /// Steps 3–5: ask these questions in order; feed answers to a [`Resolution`].
    Lookup(Vec<Question>),
}

/// §8.1's locating plan for `authority`, given the server's static entries.
pub fn plan(authority: &Authority, static_entries: &BTreeMap<Authority, Vec<Endpoint>>) -> Plan {
    let host = authority.host();
    if let Some(port) = authority.port() {
        return Plan::Direct(Endpoint::new(unbracket(host), port));
    }
    if authority.kind() != HostKind::Dns {
        return Plan::Direct(Endpoint::new(unbracket(host), DEFAULT_PORT));
    }
    if let Some(entry) = static_entries.get(authority).filter(|e| !e.is_empty()) {
        return Plan::Static(entry.clone());
    }
    Plan::Lookup(alloc::vec![
        Question::Srv(alloc::format!("{SRV_PREFIX}{host}")),
        Question::Address {
            name: alloc::format!("{ADDRESS_PREFIX}{host}"),
            port: DEFAULT_PORT,
        },
        Question::Address {
            name: host.to_string(),
            port: DEFAULT_PORT,
        },
    ])
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// One SRV record (RFC 2782) as the host's resolver returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvRecord {
    /// Lower is tried first.
    pub priority: u16,
    /// Relative chance among records of one priority.
    pub weight: u16,
    /// The port to connect to.
    pub port: u16,
    /// The host to connect to; `.` means the service is not available.
    pub target: String,
    /// The record's TTL, in seconds.
    pub ttl: u32,
}

/// What an SRV answer says (see [`order_srv`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SrvOrder {
    /// The targets to try, in order.
    Targets(Vec<Endpoint>),
    /// The only record is `.`: the service is decidedly not available at this domain.
    NotAvailable,
    /// No usable record: go on to the next step.
    Empty,
}

/// Orders an SRV answer's targets: by priority, then within a priority by RFC 2782's weighted
/// random selection, drawing from `rng`.
///
/// Records with port 0 or a target that is not a host name are skipped; only the first
/// [`MAX_SRV_RECORDS`] (after sorting by priority) are considered.
pub fn order_srv<R: Rng + ?Sized>(records: &[SrvRecord], rng: &mut R) -> SrvOrder {
    if let [only] = records
        && is_root(&only.target)
    {
        return SrvOrder::NotAvailable;
    }
    let mut usable: Vec<(u16, u16, Endpoint)> = records
        .iter()
        .filter(|r| r.port != 0)
        .filter_map(|r| {
            let host = srv_host(&r.target)?;
            Some((r.priority, r.weight, Endpoint::new(host, r.port)))
        })
        .collect();
    // Weight 0 first within a priority (RFC 2782), then by name, so the draw does not depend on
    // the order the DNS answer happened to arrive in.
    usable.sort_by(|a, b| (a.0, a.1 != 0, &a.2).cmp(&(b.0, b.1 != 0, &b.2)));
    usable.dedup_by(|a, b| a.2 == b.2);
    usable.truncate(MAX_SRV_RECORDS);
    if usable.is_empty() {
        return SrvOrder::Empty;
    }
    let mut ordered = Vec::with_capacity(usable.len());
    let mut rest = usable.as_slice();
    while let Some(first) = rest.first() {
        let end = rest
            .iter()
            .position(|r| r.0 != first.0)
            .unwrap_or(rest.len());
        let (group, tail) = rest.split_at(end);
        let mut group: Vec<(u16, Endpoint)> =
            group.iter().map(|(_, w, e)| (*w, e.clone())).collect();
        while !group.is_empty() {
            let i = pick_weighted(&group, rng);
            ordered.push(group.remove(i).1);
        }
        rest = tail;
    }
    SrvOrder::Targets(ordered)
}

/// RFC 2782's selection: a uniform number in `0..=sum`, and the first record whose running sum
/// reaches it. Slot 0 exists only for the weight-0 records (sorted first), so when there are none
/// the draw is from `1..=sum`: otherwise the first record would get one extra slot and weights
/// would not be proportional. With every weight 0 the pick is uniform instead of always the first.
fn pick_weighted<R: Rng + ?Sized>(group: &[(u16, Endpoint)], rng: &mut R) -> usize {
    let sum: u32 = group.iter().map(|(w, _)| u32::from(*w)).sum();
    if sum == 0 {
        let last = u32::try_from(group.len() - 1).unwrap_or(u32::MAX);
        return usize::try_from(uniform(rng, last)).unwrap_or(0);
    }
    let has_zero = group.iter().any(|(w, _)| *w == 0);
    let draw = if has_zero {
        uniform(rng, sum)
    } else {
        1 + uniform(rng, sum - 1)
    };
    let mut running = 0u32;
    for (i, (w, _)) in group.iter().enumerate() {
        running += u32::from(*w);
        if running >= draw {
            return i;
        }
    }
    group.len() - 1
}

/// A uniform draw from `0..=span`, by rejection from the smallest covering power of two.
fn uniform<R: Rng + ?Sized>(rng: &mut R, span: u32) -> u32 {
    if span == 0 {
        return 0;
    }
    let mask = u32::MAX >> span.leading_zeros();
    let mut draw = 0;
    for _ in 0..MAX_REJECTIONS {
        draw = rng.next_u32() & mask;
        if draw <= span {
            return draw;
        }
    }
    draw % (span + 1)
}

fn is_root(target: &str) -> bool {
    target.is_empty() || target == "."
}

/// An SRV target as a host name: lower case, without the trailing dot; `None` if unusable.
fn srv_host(target: &str) -> Option<String> {
    let host = target.strip_suffix('.').unwrap_or(target);
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    ok.then(|| host.to_ascii_lowercase())
}

/// Where an authority was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// Step 3: the SRV records; order them with [`Location::endpoints`] on each attempt so the
    /// weighted spread holds across connections, not only across cache refreshes.
    Srv(Vec<SrvRecord>),
    /// Steps 4 or 5: this name, on [`DEFAULT_PORT`].
    Address(Endpoint),
    /// Step 3 said the service is decidedly not available (`.` target).
    Unavailable,
}

impl Location {
    /// The endpoints to try, in order (empty for [`Location::Unavailable`]).
    pub fn endpoints<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<Endpoint> {
        match self {
            Self::Srv(records) => match order_srv(records, rng) {
                SrvOrder::Targets(t) => t,
                SrvOrder::NotAvailable | SrvOrder::Empty => Vec::new(),
            },
            Self::Address(e) => alloc::vec![e.clone()],
            Self::Unavailable => Vec::new(),
        }
    }
}

/// The answer to one [`Question`], as the host's resolver gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// SRV records (only meaningful for [`Question::Srv`]).
    Srv(Vec<SrvRecord>),
    /// At least one A or AAAA record, with the answer's TTL in seconds (only meaningful for
    /// [`Question::Address`]).
    Addresses {
        /// The smallest TTL among the records.
        ttl: u32,
    },
    /// TXT records (only meaningful for a [`RecordType::Txt`] question), each one's
    /// character-strings concatenated.
    Txt {
        /// The records.
        records: Vec<String>,
        /// The smallest TTL among the records, in seconds.
        ttl: u32,
    },
    /// No records (NXDOMAIN or NODATA) or a failed query.
    Nothing,
}

/// How a resolution ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Found (or told unavailable), to be cached for `ttl` seconds (clamped by the cache).
    Located {
        /// Where.
        location: Location,
        /// The DNS TTL, in seconds.
        ttl: u32,
    },
    /// No step found anything; cached for [`MISS_TTL`].
    Miss,
}

/// Walks §8.1 steps 3–5: ask [`Resolution::question`], feed its answer to
/// [`Resolution::answer`], until an [`Outcome`].
#[derive(Clone, Debug)]
pub struct Resolution {
    questions: Vec<Question>,
    next: usize,
}

impl Resolution {
    /// A resolution over a [`Plan::Lookup`]'s questions.
    pub fn new(questions: Vec<Question>) -> Self {
        Self { questions, next: 0 }
    }

    /// The question to ask now; `None` once every step has been answered.
    pub fn question(&self) -> Option<&Question> {
        self.questions.get(self.next)
    }

    /// Feeds the answer to [`Resolution::question`]: `Some` when resolution is over, `None` when
    /// the next question should be asked. An answer of the wrong kind counts as no records.
    pub fn answer(&mut self, answer: Answer) -> Option<Outcome> {
        let question = self.questions.get(self.next)?;
        let found = match (question, answer) {
            (Question::Srv(_), Answer::Srv(records)) => srv_outcome(records),
            (Question::Address { name, port }, Answer::Addresses { ttl }) => {
                Some(Outcome::Located {
                    location: Location::Address(Endpoint::new(name.clone(), *port)),
                    ttl,
                })
            }
            _ => None,
        };
        self.next += 1;
        match found {
            Some(o) => Some(o),
            None if self.next >= self.questions.len() => Some(Outcome::Miss),
            None => None,
        }
    }
}

fn srv_outcome(mut records: Vec<SrvRecord>) -> Option<Outcome> {
    // The RRset's TTL; resolvers give every record the same one, so take the smallest to be safe.
    let ttl = records.iter().map(|r| r.ttl).min()?;
    if let [only] = records.as_slice()
        && is_root(&only.target)
    {
        return Some(Outcome::Located {
            location: Location::Unavailable,
            ttl,
        });
    }
    records.retain(|r| r.port != 0 && srv_host(&r.target).is_some());
    records.sort_by_key(|r| r.priority);
    records.truncate(MAX_SRV_RECORDS);
    (!records.is_empty()).then_some(Outcome::Located {
        location: Location::Srv(records),
        ttl,
    })
}

// ---------------------------------------------------------------------------------------------
// Caching
// ---------------------------------------------------------------------------------------------

/// A DNS TTL clamped to [`MIN_TTL`] … [`MAX_TTL`] (§8.1).
pub fn clamp_ttl(ttl: u32) -> u32 {
    ttl.clamp(MIN_TTL, MAX_TTL)
}

/// What a [`DiscoveryCache`] knows about a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cached<T> {
    /// A live positive answer.
    Hit(T),
    /// A live cached miss: do not ask DNS again yet.
    Miss,
    /// Nothing live: ask DNS.
    Unknown,
}

#[derive(Clone, Debug)]
struct Entry<T> {
    value: Option<T>,
    expires_at: Timestamp,
}

/// Locations per authority and keys per realm, with §8.1–§8.2's lifetimes.
///
/// Each table holds at most its capacity ([`MAX_CACHE_ENTRIES`] by default). When a table is full,
/// storing a new name first drops every expired entry, then, if still full, the least recently
/// stored one ([`BoundedMap`]'s FIFO rule: a name cannot keep itself cached by being looked up).
#[derive(Clone, Debug)]
pub struct DiscoveryCache {
    locations: Table<Location>,
    keys: Table<Vec<[u8; 32]>>,
}

impl Default for DiscoveryCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DiscoveryCache {
    /// An empty cache of [`MAX_CACHE_ENTRIES`] per table.
    pub fn new() -> Self {
        Self::with_capacity(MAX_CACHE_ENTRIES)
    }

    /// An empty cache holding at most `capacity` authorities and `capacity` realms.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            locations: Table::new(capacity),
            keys: Table::new(capacity),
        }
    }

    /// Where `authority` is, if cached and live at `now`.
    pub fn location(&self, now: Timestamp, authority: &Authority) -> Cached<&Location> {
        self.locations.lookup(now, authority)
    }

    /// Caches a resolution's outcome for `authority`: a location for its clamped TTL, a miss for
    /// [`MISS_TTL`].
    pub fn store_location(&mut self, now: Timestamp, authority: Authority, outcome: Outcome) {
        let (value, ttl) = match outcome {
            Outcome::Located { location, ttl } => (Some(location), clamp_ttl(ttl)),
            Outcome::Miss => (None, MISS_TTL),
        };
        self.locations.store(now, authority, value, ttl);
    }

    /// `realm`'s published keys, if cached and live at `now`.
    pub fn keys(&self, now: Timestamp, realm: &Authority) -> Cached<&[[u8; 32]]> {
        match self.keys.lookup(now, realm) {
            Cached::Hit(k) => Cached::Hit(k.as_slice()),
            Cached::Miss => Cached::Miss,
            Cached::Unknown => Cached::Unknown,
        }
    }

    /// Caches `realm`'s TXT answer: the keys of `records` for the clamped `ttl`, or a miss for
    /// [`MISS_TTL`] when there are none (no records, or none with an Ed25519 key).
    pub fn store_keys(&mut self, now: Timestamp, realm: Authority, records: &[&str], ttl: u32) {
        let keys = keys_from_txt(records);
        let (value, ttl) = if keys.is_empty() {
            (None, MISS_TTL)
        } else {
            (Some(keys), clamp_ttl(ttl))
        };
        self.keys.store(now, realm, value, ttl);
    }

    /// Drops every entry expired at `now`; returns how many. Costs what expires, not what is
    /// held.
    pub fn prune(&mut self, now: Timestamp) -> usize {
        self.locations.prune(now) + self.keys.prune(now)
    }

    /// Authorities held (live or expired).
    pub fn locations_len(&self) -> usize {
        self.locations.len()
    }

    /// Realms held (live or expired).
    pub fn keys_len(&self) -> usize {
        self.keys.len()
    }
}

/// One table of a [`DiscoveryCache`]: the entries, and the same entries ordered by expiry.
///
/// The expiry order lets [`Table::prune`] stop at the first live entry, so a timer batch costs
/// what expires rather than a walk of every name remote peers have made us cache. It holds
/// exactly one `(expires_at, name)` per entry of `map`; every change to `map` goes through this
/// type so the two cannot drift apart.
#[derive(Clone, Debug)]
struct Table<T> {
    map: BoundedMap<Authority, Entry<T>>,
    by_expiry: BTreeSet<(Timestamp, Authority)>,
}

impl<T> Table<T> {
    fn new(capacity: usize) -> Self {
        Self {
            map: BoundedMap::new(capacity),
            by_expiry: BTreeSet::new(),
        }
    }

    fn lookup(&self, now: Timestamp, key: &Authority) -> Cached<&T> {
        match self.map.get(key) {
            Some(e) if now < e.expires_at => match &e.value {
                Some(v) => Cached::Hit(v),
                None => Cached::Miss,
            },
            _ => Cached::Unknown,
        }
    }

    fn store(&mut self, now: Timestamp, key: Authority, value: Option<T>, ttl_secs: u32) {
        let expires_at = now.saturating_add(Duration::from_secs(u64::from(ttl_secs)));
        // A refreshed name goes to the back of the eviction order, as a new answer should.
        if let Some(old) = self.map.remove(&key) {
            self.by_expiry.remove(&(old.expires_at, key.clone()));
        }
        if self.map.len() >= self.map.capacity() {
            self.prune(now);
        }
        self.by_expiry.insert((expires_at, key.clone()));
        // The name was removed above, so it is never `Replaced`.
        if let MapInsert::Evicted(k, old) = self.map.insert(key, Entry { value, expires_at }) {
            // The oldest stored name, or with capacity 0 the one just offered.
            self.by_expiry.remove(&(old.expires_at, k));
        }
    }

    /// Drops every entry expired at `now`; returns how many.
    fn prune(&mut self, now: Timestamp) -> usize {
        let mut n = 0;
        while self.by_expiry.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, k)) = self.by_expiry.pop_first() else {
                break;
            };
            self.map.remove(&k);
            n += 1;
        }
        n
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const KEY_B64: &str = "ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=";

    fn key() -> [u8; 32] {
        base64::decode(KEY_B64).unwrap().try_into().unwrap()
    }

    fn auth(s: &str) -> Authority {
        Authority::parse(s).unwrap()
    }

    fn no_static() -> BTreeMap<Authority, Vec<Endpoint>> {
        BTreeMap::new()
    }

    fn srv(priority: u16, weight: u16, target: &str) -> SrvRecord {
        SrvRecord {
            priority,
            weight,
            port: 2472,
            target: target.to_string(),
            ttl: 300,
        }
    }

    fn targets(order: SrvOrder) -> Vec<String> {
        match order {
            SrvOrder::Targets(t) => t.into_iter().map(|e| e.host).collect(),
            other => panic!("{other:?}"),
        }
    }

    // --- §8.2 TXT grammar ---

    #[test]
    fn txt_spec_vector_space_separated() {
        let r = parse_key_record(&alloc::format!("v=airc1 k=ed25519 p={KEY_B64}")).unwrap();
        assert_eq!(r, Some(PublishedKey::Ed25519(key())));
    }

    #[test]
    fn txt_semicolon_and_mixed_separators_are_equivalent() {
        for txt in [
            alloc::format!("v=airc1;k=ed25519;p={KEY_B64}"),
            alloc::format!("v=airc1; k=ed25519; p={KEY_B64};"),
            alloc::format!("  v=airc1  p={KEY_B64} ;k=ed25519 "),
        ] {
            assert_eq!(
                parse_key_record(&txt).unwrap(),
                Some(PublishedKey::Ed25519(key())),
                "{txt}"
            );
        }
    }

    #[test]
    fn txt_missing_k_defaults_to_ed25519() {
        let r = parse_key_record(&alloc::format!("v=airc1 p={KEY_B64}")).unwrap();
        assert_eq!(r, Some(PublishedKey::Ed25519(key())));
    }

    #[test]
    fn txt_unknown_k_is_reported_not_an_error_and_p_unchecked() {
        let r = parse_key_record("v=airc1 k=mldsa44 p=not-base64!").unwrap();
        assert_eq!(
            r,
            Some(PublishedKey::Unknown {
                algorithm: "mldsa44".into()
            })
        );
    }

    #[test]
    fn txt_bad_base64_is_an_error() {
        assert_eq!(
            parse_key_record("v=airc1 k=ed25519 p=ebVWLo_mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ="),
            Err(KeyRecordError::BadBase64)
        );
        // Unpadded is not standard base64 either.
        assert_eq!(
            parse_key_record("v=airc1 p=ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ"),
            Err(KeyRecordError::BadBase64)
        );
    }

    #[test]
    fn txt_wrong_key_length_is_an_error() {
        let short = base64::encode(&[7u8; 31]);
        assert_eq!(
            parse_key_record(&alloc::format!("v=airc1 p={short}")),
            Err(KeyRecordError::WrongLength(31))
        );
        let long = base64::encode(&[7u8; 33]);
        assert_eq!(
            parse_key_record(&alloc::format!("v=airc1 p={long}")),
            Err(KeyRecordError::WrongLength(33))
        );
    }

    #[test]
    fn txt_missing_p_is_an_error() {
        assert_eq!(
            parse_key_record("v=airc1 k=ed25519"),
            Err(KeyRecordError::MissingKey)
        );
    }

    #[test]
    fn txt_other_version_or_no_version_is_skipped() {
        let p = alloc::format!("p={KEY_B64}");
        assert_eq!(parse_key_record(&alloc::format!("v=airc2 {p}")), Ok(None));
        assert_eq!(parse_key_record(&alloc::format!("v=AIRC1 {p}")), Ok(None));
        assert_eq!(parse_key_record(&alloc::format!("k=ed25519 {p}")), Ok(None));
        assert_eq!(parse_key_record(""), Ok(None));
    }

    #[test]
    fn txt_malformed_duplicate_and_oversized_fields_are_errors() {
        assert_eq!(
            parse_key_record("v=airc1 junk"),
            Err(KeyRecordError::MalformedField)
        );
        assert_eq!(
            parse_key_record("v=airc1 =x"),
            Err(KeyRecordError::MalformedField)
        );
        assert_eq!(
            parse_key_record(&alloc::format!("v=airc1 p={KEY_B64} p={KEY_B64}")),
            Err(KeyRecordError::DuplicateField)
        );
        let big = "x".repeat(MAX_KEY_RECORD_LEN);
        assert_eq!(
            parse_key_record(&alloc::format!("v=airc1 {big}")),
            Err(KeyRecordError::TooLong)
        );
    }

    #[test]
    fn txt_unknown_fields_are_ignored() {
        let r = parse_key_record(&alloc::format!("v=airc1 t=2026 p={KEY_B64} note=")).unwrap();
        assert_eq!(r, Some(PublishedKey::Ed25519(key())));
    }

    #[test]
    fn keys_from_txt_collects_every_ed25519_key_past_bad_records() {
        let other = base64::encode(&[9u8; 32]);
        let good = alloc::format!("v=airc1 p={KEY_B64}");
        let good2 = alloc::format!("v=airc1;k=ed25519;p={other}");
        let records = [
            "v=spf1 -all",
            "v=airc1 p=!!",
            "v=airc1 k=mldsa44 p=AAAA",
            good.as_str(),
            good2.as_str(),
            good.as_str(),
        ];
        assert_eq!(keys_from_txt(&records), vec![key(), [9u8; 32]]);
    }

    #[test]
    fn keys_from_txt_is_bounded_per_realm() {
        let records: Vec<String> = (0..=MAX_KEYS_PER_REALM as u8)
            .map(|i| alloc::format!("v=airc1 p={}", base64::encode(&[i; 32])))
            .collect();
        let refs: Vec<&str> = records.iter().map(String::as_str).collect();
        assert_eq!(keys_from_txt(&refs).len(), MAX_KEYS_PER_REALM);
    }

    #[test]
    fn txt_name_is_airc_prefix_on_host_and_none_for_ip_literals() {
        assert_eq!(
            txt_name(&auth("example.com")).as_deref(),
            Some("_airc.example.com")
        );
        assert_eq!(
            txt_name(&auth("example.com:9000")).as_deref(),
            Some("_airc.example.com")
        );
        assert_eq!(txt_name(&auth("192.0.2.1")), None);
        assert_eq!(txt_name(&auth("[2001:db8::1]")), None);
    }

    // --- §8.1 locating ---

    #[test]
    fn step1_explicit_port_connects_directly_without_dns() {
        assert_eq!(
            plan(&auth("example.com:9000"), &no_static()),
            Plan::Direct(Endpoint::new("example.com", 9000))
        );
        assert_eq!(
            plan(&auth("[2001:db8::1]:9000"), &no_static()),
            Plan::Direct(Endpoint::new("2001:db8::1", 9000))
        );
    }

    #[test]
    fn step1_explicit_port_wins_over_a_static_entry() {
        let a = auth("example.com:9000");
        let mut st = no_static();
        st.insert(a.clone(), vec![Endpoint::new("elsewhere", 1)]);
        assert_eq!(
            plan(&a, &st),
            Plan::Direct(Endpoint::new("example.com", 9000))
        );
    }

    #[test]
    fn step1_ip_literal_connects_directly_on_2472() {
        assert_eq!(
            plan(&auth("192.0.2.7"), &no_static()),
            Plan::Direct(Endpoint::new("192.0.2.7", DEFAULT_PORT))
        );
        assert_eq!(
            plan(&auth("[2001:DB8::1]"), &no_static()),
            Plan::Direct(Endpoint::new("2001:db8::1", 2472))
        );
        // A written default port is not "explicit" but the host is still a literal.
        assert_eq!(
            plan(&auth("192.0.2.7:2472"), &no_static()),
            Plan::Direct(Endpoint::new("192.0.2.7", 2472))
        );
    }

    #[test]
    fn step2_static_entry_replaces_dns() {
        let a = auth("partner.example");
        let mut st = no_static();
        let eps = vec![
            Endpoint::new("10.0.0.5", 2472),
            Endpoint::new("backup", 2473),
        ];
        st.insert(a.clone(), eps.clone());
        assert_eq!(plan(&a, &st), Plan::Static(eps));
        // An empty entry counts as absent.
        st.insert(a.clone(), Vec::new());
        assert!(matches!(plan(&a, &st), Plan::Lookup(_)));
    }

    #[test]
    fn steps3_to_5_ask_srv_then_airc_prefix_then_host() {
        assert_eq!(
            plan(&auth("Example.COM."), &no_static()),
            Plan::Lookup(vec![
                Question::Srv("_airc._tcp.example.com".into()),
                Question::Address {
                    name: "airc.example.com".into(),
                    port: 2472
                },
                Question::Address {
                    name: "example.com".into(),
                    port: 2472
                },
            ])
        );
    }

    fn resolution() -> Resolution {
        match plan(&auth("example.com"), &no_static()) {
            Plan::Lookup(q) => Resolution::new(q),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn step3_srv_answer_ends_resolution() {
        let mut r = resolution();
        let recs = vec![srv(10, 5, "a.example.com."), srv(20, 0, "b.example.com")];
        let out = r.answer(Answer::Srv(recs.clone())).unwrap();
        let Outcome::Located {
            location: Location::Srv(kept),
            ttl: 300,
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(kept, recs);
    }

    #[test]
    fn step4_airc_prefix_when_srv_is_empty() {
        let mut r = resolution();
        assert_eq!(r.answer(Answer::Srv(Vec::new())), None);
        assert_eq!(
            r.question(),
            Some(&Question::Address {
                name: "airc.example.com".into(),
                port: 2472
            })
        );
        assert_eq!(
            r.answer(Answer::Addresses { ttl: 120 }),
            Some(Outcome::Located {
                location: Location::Address(Endpoint::new("airc.example.com", 2472)),
                ttl: 120
            })
        );
    }

    #[test]
    fn step5_bare_host_when_srv_and_airc_prefix_fail() {
        let mut r = resolution();
        assert_eq!(r.answer(Answer::Nothing), None);
        assert_eq!(r.answer(Answer::Nothing), None);
        assert_eq!(
            r.answer(Answer::Addresses { ttl: 10 }),
            Some(Outcome::Located {
                location: Location::Address(Endpoint::new("example.com", 2472)),
                ttl: 10
            })
        );
        assert_eq!(r.question(), None);
        assert_eq!(r.answer(Answer::Nothing), None);
    }

    #[test]
    fn all_steps_empty_is_a_miss() {
        let mut r = resolution();
        assert_eq!(r.answer(Answer::Nothing), None);
        // The wrong kind of answer counts as nothing.
        assert_eq!(r.answer(Answer::Srv(vec![srv(1, 1, "x")])), None);
        assert_eq!(r.answer(Answer::Nothing), Some(Outcome::Miss));
    }

    #[test]
    fn srv_dot_target_means_unavailable_and_stops() {
        let mut r = resolution();
        assert_eq!(
            r.answer(Answer::Srv(vec![srv(0, 0, ".")])),
            Some(Outcome::Located {
                location: Location::Unavailable,
                ttl: 300
            })
        );
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        assert_eq!(
            order_srv(&[srv(0, 0, ".")], &mut rng),
            SrvOrder::NotAvailable
        );
        assert!(Location::Unavailable.endpoints(&mut rng).is_empty());
    }

    #[test]
    fn srv_dot_among_other_records_is_ignored() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let recs = [srv(0, 0, "."), srv(5, 1, "a.example")];
        assert_eq!(targets(order_srv(&recs, &mut rng)), vec!["a.example"]);
    }

    #[test]
    fn srv_unusable_records_only_is_empty() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut zero_port = srv(0, 1, "a.example");
        zero_port.port = 0;
        assert_eq!(
            order_srv(&[zero_port, srv(0, 1, "bad host")], &mut rng),
            SrvOrder::Empty
        );
        assert_eq!(order_srv(&[], &mut rng), SrvOrder::Empty);
    }

    #[test]
    fn srv_orders_by_priority_first() {
        let recs = [
            srv(30, 1000, "c"),
            srv(10, 1, "a"),
            srv(20, 65535, "b"),
            srv(10, 0, "a0"),
        ];
        for seed in 0..50 {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let t = targets(order_srv(&recs, &mut rng));
            assert_eq!(&t[2..], ["b", "c"]);
            let mut first: Vec<_> = t[..2].to_vec();
            first.sort();
            assert_eq!(first, ["a", "a0"]);
        }
    }

    #[test]
    fn srv_weighted_selection_follows_weights() {
        // Weights 1:3 with no weight-0 record: the heavier target comes first 3/4 of the time,
        // whichever of the two sorts first.
        for (light, heavy) in [("light", "heavy"), ("a-light", "z-heavy")] {
            let recs = [srv(0, 1, light), srv(0, 3, heavy)];
            let mut rng = ChaCha20Rng::seed_from_u64(42);
            let n = 20_000;
            let heavy_first = (0..n)
                .filter(|_| targets(order_srv(&recs, &mut rng))[0] == heavy)
                .count();
            let share = heavy_first as f64 / n as f64;
            assert!((0.73..0.77).contains(&share), "{heavy}: {share}");
        }
    }

    #[test]
    fn srv_weight_zero_is_rarely_first_when_others_weigh() {
        let recs = [srv(0, 0, "zero"), srv(0, 99, "heavy")];
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let n = 20_000;
        let zero_first = (0..n)
            .filter(|_| targets(order_srv(&recs, &mut rng))[0] == "zero")
            .count();
        // Chosen only when the draw is 0: 1 in 100.
        let share = zero_first as f64 / n as f64;
        assert!((0.005..0.015).contains(&share), "{share}");
    }

    #[test]
    fn srv_all_weights_zero_is_uniform() {
        let recs = [
            srv(0, 0, "a"),
            srv(0, 0, "b"),
            srv(0, 0, "c"),
            srv(0, 0, "d"),
        ];
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let mut counts = BTreeMap::new();
        let n = 20_000;
        for _ in 0..n {
            *counts
                .entry(targets(order_srv(&recs, &mut rng))[0].clone())
                .or_insert(0usize) += 1;
        }
        for (t, c) in counts {
            let share = c as f64 / n as f64;
            assert!((0.23..0.27).contains(&share), "{t}: {share}");
        }
    }

    #[test]
    fn srv_order_is_deterministic_per_seed_and_ignores_answer_order() {
        let recs = vec![
            srv(0, 10, "a"),
            srv(0, 20, "b"),
            srv(0, 30, "c"),
            srv(1, 5, "d"),
            srv(1, 5, "e"),
        ];
        let mut reversed = recs.clone();
        reversed.reverse();
        let mut seen = alloc::collections::BTreeSet::new();
        for seed in 0..20 {
            let a = order_srv(&recs, &mut ChaCha20Rng::seed_from_u64(seed));
            let b = order_srv(&recs, &mut ChaCha20Rng::seed_from_u64(seed));
            let c = order_srv(&reversed, &mut ChaCha20Rng::seed_from_u64(seed));
            assert_eq!(a, b);
            assert_eq!(a, c);
            seen.insert(targets(a));
        }
        assert!(seen.len() > 1, "different seeds give different orders");
    }

    #[test]
    fn srv_targets_are_lower_cased_without_trailing_dot() {
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let mut r = srv(0, 1, "AIRC.Example.COM.");
        r.port = 9000;
        assert_eq!(
            order_srv(&[r], &mut rng),
            SrvOrder::Targets(vec![Endpoint::new("airc.example.com", 9000)])
        );
    }

    #[test]
    fn srv_records_beyond_the_bound_are_ignored() {
        let recs: Vec<SrvRecord> = (0..MAX_SRV_RECORDS + 10)
            .map(|i| srv(i as u16, 1, &alloc::format!("h{i}")))
            .collect();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let t = targets(order_srv(&recs, &mut rng));
        assert_eq!(t.len(), MAX_SRV_RECORDS);
        assert_eq!(t[0], "h0");
    }

    // --- caching ---

    const T0: Timestamp = Timestamp::from_secs(1_790_000_000);

    fn at(secs: u64) -> Timestamp {
        T0.saturating_add(Duration::from_secs(secs))
    }

    fn located(ttl: u32) -> Outcome {
        Outcome::Located {
            location: Location::Address(Endpoint::new("example.com", 2472)),
            ttl,
        }
    }

    #[test]
    fn ttl_clamp_edges() {
        assert_eq!(clamp_ttl(0), MIN_TTL);
        assert_eq!(clamp_ttl(29), 30);
        assert_eq!(clamp_ttl(30), 30);
        assert_eq!(clamp_ttl(3600), 3600);
        assert_eq!(clamp_ttl(3601), 3600);
        assert_eq!(clamp_ttl(u32::MAX), MAX_TTL);
    }

    #[test]
    fn location_ttl_29_is_kept_30_seconds() {
        let mut c = DiscoveryCache::new();
        let a = auth("example.com");
        c.store_location(T0, a.clone(), located(29));
        assert!(matches!(c.location(at(29), &a), Cached::Hit(_)));
        assert!(matches!(c.location(at(30), &a), Cached::Unknown));
        let before = at(30).saturating_sub(Duration::from_millis(1));
        assert!(matches!(c.location(before, &a), Cached::Hit(_)));
    }

    #[test]
    fn location_ttl_3601_is_kept_3600_seconds() {
        let mut c = DiscoveryCache::new();
        let a = auth("example.com");
        c.store_location(T0, a.clone(), located(3601));
        assert!(matches!(c.location(at(3599), &a), Cached::Hit(_)));
        assert!(matches!(c.location(at(3600), &a), Cached::Unknown));
    }

    #[test]
    fn location_miss_is_cached_60_seconds() {
        let mut c = DiscoveryCache::new();
        let a = auth("gone.example");
        assert!(matches!(c.location(T0, &a), Cached::Unknown));
        c.store_location(T0, a.clone(), Outcome::Miss);
        assert!(matches!(c.location(at(59), &a), Cached::Miss));
        assert!(matches!(c.location(at(60), &a), Cached::Unknown));
    }

    #[test]
    fn keys_cached_for_clamped_ttl() {
        let mut c = DiscoveryCache::new();
        let r = auth("example.com");
        let txt = alloc::format!("v=airc1 k=ed25519 p={KEY_B64}");
        c.store_keys(T0, r.clone(), &[txt.as_str()], 5);
        assert_eq!(c.keys(at(29), &r), Cached::Hit(&[key()][..]));
        assert_eq!(c.keys(at(30), &r), Cached::Unknown);
        c.store_keys(T0, r.clone(), &[txt.as_str()], 100_000);
        assert_eq!(c.keys(at(3599), &r), Cached::Hit(&[key()][..]));
        assert_eq!(c.keys(at(3600), &r), Cached::Unknown);
    }

    #[test]
    fn keys_miss_is_cached_60_seconds_even_with_a_long_ttl() {
        let mut c = DiscoveryCache::new();
        let r = auth("example.com");
        c.store_keys(T0, r.clone(), &[], 3600);
        assert_eq!(c.keys(at(59), &r), Cached::Miss);
        assert_eq!(c.keys(at(60), &r), Cached::Unknown);
        // Records with no usable Ed25519 key are a miss too.
        c.store_keys(T0, r.clone(), &["v=airc1 k=mldsa44 p=AA==", "v=spf1"], 3600);
        assert_eq!(c.keys(at(59), &r), Cached::Miss);
    }

    #[test]
    fn cache_bound_evicts_expired_first_then_oldest_stored() {
        let mut c = DiscoveryCache::with_capacity(3);
        let (a, b, d, e) = (
            auth("a.example"),
            auth("b.example"),
            auth("d.example"),
            auth("e.example"),
        );
        c.store_location(T0, a.clone(), located(3600));
        c.store_location(T0, b.clone(), Outcome::Miss); // expires at +60
        c.store_location(at(1), d.clone(), located(3600));
        // Full, and b has expired: b goes, a (older) stays.
        c.store_location(at(100), e.clone(), located(3600));
        assert_eq!(c.locations_len(), 3);
        assert!(matches!(c.location(at(100), &a), Cached::Hit(_)));
        assert!(matches!(c.location(at(100), &b), Cached::Unknown));
        // Full with nothing expired: the oldest stored (a) goes, whatever was read.
        let _ = c.location(at(101), &a);
        let f = auth("f.example");
        c.store_location(at(101), f.clone(), located(3600));
        assert_eq!(c.locations_len(), 3);
        assert!(matches!(c.location(at(101), &a), Cached::Unknown));
        for x in [&d, &e, &f] {
            assert!(matches!(c.location(at(101), x), Cached::Hit(_)));
        }
    }

    #[test]
    fn cache_refresh_moves_a_name_to_the_back_of_eviction() {
        let mut c = DiscoveryCache::with_capacity(2);
        let (a, b, d) = (auth("a.example"), auth("b.example"), auth("d.example"));
        c.store_location(T0, a.clone(), located(3600));
        c.store_location(T0, b.clone(), located(3600));
        c.store_location(at(1), a.clone(), located(3600));
        c.store_location(at(2), d.clone(), located(3600));
        assert!(matches!(c.location(at(2), &a), Cached::Hit(_)));
        assert!(matches!(c.location(at(2), &b), Cached::Unknown));
    }

    #[test]
    fn cache_keys_table_is_bounded_too_and_prune_drops_expired() {
        let mut c = DiscoveryCache::with_capacity(2);
        for (i, h) in ["a.example", "b.example", "d.example"]
            .into_iter()
            .enumerate()
        {
            c.store_keys(at(i as u64), auth(h), &[], 0);
        }
        assert_eq!(c.keys_len(), 2);
        c.store_location(T0, auth("x.example"), located(30));
        assert_eq!(c.prune(at(100)), 3);
        assert_eq!((c.keys_len(), c.locations_len()), (0, 0));
    }

    /// The index holds exactly one `(expires_at, name)` per entry held.
    fn assert_indexed<T>(t: &Table<T>) {
        let held: BTreeSet<(Timestamp, Authority)> = t
            .map
            .iter()
            .map(|(k, e)| (e.expires_at, k.clone()))
            .collect();
        assert_eq!(t.by_expiry, held);
    }

    #[test]
    fn a_name_evicted_from_a_full_table_leaves_the_expiry_index() {
        let mut c = DiscoveryCache::with_capacity(2);
        let (a, b, d) = (auth("a.example"), auth("b.example"), auth("d.example"));
        c.store_location(T0, a.clone(), Outcome::Miss); // expires at +60
        c.store_location(T0, b.clone(), located(3600));
        // Full, nothing expired: a, the oldest stored, is evicted by the insert.
        c.store_location(at(1), d.clone(), located(3600));
        assert_indexed(&c.locations);
        assert!(matches!(c.location(at(1), &a), Cached::Unknown));
        assert_eq!(c.prune(at(100)), 0, "a went with its eviction, not now");
        assert_eq!(c.locations_len(), 2);
    }

    #[test]
    fn a_refreshed_name_keeps_only_its_new_expiry() {
        let mut c = DiscoveryCache::new();
        let r = auth("example.com");
        let txt = alloc::format!("v=airc1 p={KEY_B64}");
        c.store_keys(T0, r.clone(), &[], 0); // a miss, expiring at +60
        c.store_keys(T0, r.clone(), &[txt.as_str()], 3600);
        assert_indexed(&c.keys);
        assert_eq!(c.prune(at(100)), 0);
        assert_eq!(c.keys(at(100), &r), Cached::Hit(&[key()][..]));
        assert_eq!(c.prune(at(3600)), 1);
        assert_eq!(c.keys_len(), 0);
    }

    #[test]
    fn a_table_of_capacity_0_holds_nothing_and_indexes_nothing() {
        let mut c = DiscoveryCache::with_capacity(0);
        c.store_location(T0, auth("a.example"), located(3600));
        assert_indexed(&c.locations);
        assert_eq!((c.locations_len(), c.prune(at(3600))), (0, 0));
    }

    /// The cache as it was before the expiry index: `prune` walks every entry. Kept to check
    /// the index against.
    struct Walked<T>(BoundedMap<Authority, Entry<T>>);

    impl<T> Walked<T> {
        fn lookup(&self, now: Timestamp, key: &Authority) -> Cached<&T> {
            match self.0.get(key) {
                Some(e) if now < e.expires_at => match &e.value {
                    Some(v) => Cached::Hit(v),
                    None => Cached::Miss,
                },
                _ => Cached::Unknown,
            }
        }

        fn store(&mut self, now: Timestamp, key: Authority, value: Option<T>, ttl_secs: u32) {
            let expires_at = now.saturating_add(Duration::from_secs(u64::from(ttl_secs)));
            self.0.remove(&key);
            if self.0.len() >= self.0.capacity() {
                self.prune(now);
            }
            self.0.insert(key, Entry { value, expires_at });
        }

        fn prune(&mut self, now: Timestamp) -> usize {
            let expired: Vec<Authority> = self
                .0
                .iter()
                .filter(|(_, e)| e.expires_at <= now)
                .map(|(k, _)| k.clone())
                .collect();
            for k in &expired {
                self.0.remove(k);
            }
            expired.len()
        }
    }

    #[test]
    fn pruning_by_expiry_index_matches_a_walk_of_every_entry() {
        use rand_core::Rng;
        let names: Vec<Authority> = [
            "a.example",
            "a.example:7001",
            "b.example",
            "c.example",
            "d.example",
            "e.example",
            "f.example",
            "192.0.2.1",
        ]
        .into_iter()
        .map(auth)
        .collect();
        let txt = alloc::format!("v=airc1 p={KEY_B64}");
        for seed in 0..20 {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let capacity = (rng.next_u32() % 6) as usize;
            let mut c = DiscoveryCache::with_capacity(capacity);
            let mut locations = Walked(BoundedMap::new(capacity));
            let mut keys = Walked(BoundedMap::new(capacity));
            let mut now = T0;
            for _ in 0..400 {
                let name = names[rng.next_u32() as usize % names.len()].clone();
                // Lifetimes from 0 to 120 s, clamped by the cache to 30 … 3600 or 60 for a miss,
                // so expiries collide and entries expire mid-run.
                let ttl = rng.next_u32() % 121;
                match rng.next_u32() % 5 {
                    0 => {
                        let (outcome, value, kept) = if rng.next_u32() % 3 == 0 {
                            (Outcome::Miss, None, MISS_TTL)
                        } else {
                            let l = Location::Address(Endpoint::new(name.host(), 2472));
                            let o = Outcome::Located {
                                location: l.clone(),
                                ttl,
                            };
                            (o, Some(l), clamp_ttl(ttl))
                        };
                        c.store_location(now, name.clone(), outcome);
                        locations.store(now, name, value, kept);
                    }
                    1 => {
                        let (records, value, kept) = if rng.next_u32() % 3 == 0 {
                            (vec![], None, MISS_TTL)
                        } else {
                            (vec![txt.as_str()], Some(vec![key()]), clamp_ttl(ttl))
                        };
                        c.store_keys(now, name.clone(), &records, ttl);
                        keys.store(now, name, value, kept);
                    }
                    2 => {
                        let want = locations.prune(now) + keys.prune(now);
                        assert_eq!(c.prune(now), want, "seed {seed}");
                    }
                    _ => now = now.saturating_add(Duration::from_secs(u64::from(ttl / 4))),
                }
                assert_indexed(&c.locations);
                assert_indexed(&c.keys);
                assert_eq!(c.locations_len(), locations.0.len(), "seed {seed}");
                assert_eq!(c.keys_len(), keys.0.len(), "seed {seed}");
                for n in &names {
                    assert_eq!(c.location(now, n), locations.lookup(now, n), "seed {seed}");
                    let walked = match keys.lookup(now, n) {
                        Cached::Hit(k) => Cached::Hit(k.as_slice()),
                        Cached::Miss => Cached::Miss,
                        Cached::Unknown => Cached::Unknown,
                    };
                    assert_eq!(c.keys(now, n), walked, "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn location_endpoints_reorders_srv_on_each_call() {
        let loc = Location::Srv(vec![srv(0, 1, "a"), srv(0, 1, "b")]);
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let mut firsts = alloc::collections::BTreeSet::new();
        for _ in 0..50 {
            firsts.insert(loc.endpoints(&mut rng)[0].host.clone());
        }
        assert_eq!(firsts.len(), 2);
    }
}
