//! The issuer's passports (AIRC §12.1, §12.3, §12.5, §12.6): the records, issuance with its
//! defaults and caps, the redemption checks in §12.5's order with the failed-redemption limit,
//! uses and exhaustion, and revocation.
//!
//! The server owns the I/O around it (the `passport` frame, the redemption message, the grant
//! and its ack); this table owns the rules. A token leaves [`PassportBook::issue`] once and is
//! never stored: only its SHA-256 is.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde_json::{Value, json};

use super::token_hash;
use crate::airc::address::Address;
use crate::airc::frame::{Object, PassportRefusal};
use crate::airc::link::Direction;
use crate::airc::link::to_secs;
use crate::airc::pattern::Pattern;
use crate::codec::hex;
use crate::core::Timestamp;
use crate::crypto::CryptoProvider;

const DAY: u64 = 86_400;

/// Uses a passport allows unless the issuer says otherwise (§12.3).
pub const DEFAULT_USES: u64 = 1;
/// The most uses one passport may allow (§12.3).
pub const MAX_USES: u64 = 100;
/// A passport's lifetime unless the issuer says otherwise (§12.3).
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * DAY);
/// The longest a passport may live (§12.3).
pub const MAX_TTL: Duration = Duration::from_secs(90 * DAY);
/// The lifetime of a link a redemption creates, unless the issuer says otherwise (§12.3).
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(30 * DAY);
/// The longest lifetime an issuer may give the links a passport creates. §12.3 caps only the
/// passport; the same 90 days keep a grant from outliving what an invitation may.
pub const MAX_LINK_TTL: Duration = MAX_TTL;
/// Characters in a token: 22 base62 characters carry 130 bits (§12.1: at least 128).
pub const TOKEN_CHARS: usize = 22;
/// Failed redemptions one source may make in [`FAILURE_WINDOW`] before it is refused (§12.5).
pub const MAX_FAILURES: usize = 20;
/// The window failed redemptions are counted over (§12.5: "in the last hour").
pub const FAILURE_WINDOW: Duration = Duration::from_secs(3600);
/// Sources whose failures are tracked at once; when full, the source whose last failure is
/// oldest is forgotten (it restarts at zero, which gives it at most another 20 guesses).
pub const MAX_FAILURE_SOURCES: usize = 4096;
/// Passports one server holds. A full book refuses to issue; it never forgets a record, since
/// forgetting a revoked passport's hash would only make it `unknown`, but forgetting an active
/// one would break a promise made to its holder.
pub const MAX_PASSPORTS: usize = 10_000;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Who may issue passports in a realm (§12.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Issuance {
    /// Any endpoint, for itself (and administrators for any endpoint).
    #[default]
    Agents,
    /// Administrator connections only.
    OwnerOnly,
    /// Nobody.
    Off,
}

/// A realm's passport settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassportConfig {
    /// Who may issue.
    pub issuance: Issuance,
    /// The web base of the URL rendering (§12.2), when the realm has one.
    pub web_base: Option<String>,
}

/// A passport's state (§12.1): active → exhausted | revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassportState {
    /// Redeemable.
    Active,
    /// Every use consumed.
    Exhausted,
    /// Revoked by its issuer.
    Revoked,
}

impl PassportState {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Exhausted => "exhausted",
            Self::Revoked => "revoked",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(Self::Active),
            "exhausted" => Some(Self::Exhausted),
            "revoked" => Some(Self::Revoked),
            _ => None,
        }
    }
}

/// One redemption (§12.1 `used`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Use {
    /// Who redeemed.
    pub redeemer: Address,
    /// When.
    pub at: Timestamp,
    /// The link it created.
    pub link: String,
}

/// A passport record as its issuer keeps it (§12.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassportRecord {
    /// `P` + 8 hex.
    pub id: String,
    /// SHA-256 of the token, lower-case hex. The token itself is never kept.
    pub token_hash: String,
    /// The inviting endpoint (side `a` of the links it creates).
    pub endpoint: Address,
    /// The label.
    pub label: Option<String>,
    /// The direction of the links it creates.
    pub direction: Direction,
    /// When it was issued.
    pub created: Timestamp,
    /// When it stops being redeemable.
    pub expires: Timestamp,
    /// Uses allowed.
    pub uses: u64,
    /// Uses made.
    pub used: Vec<Use>,
    /// Redeemers must match this pattern, when set.
    pub bind_to: Option<Pattern>,
    /// Lifetime of the links it creates.
    pub link_ttl: Duration,
    /// Its state.
    pub state: PassportState,
    /// Who issued it.
    pub issued_by: Address,
}

impl PassportRecord {
    /// Uses not yet consumed.
    pub fn uses_left(&self) -> u64 {
        self.uses.saturating_sub(self.used.len() as u64)
    }

    /// The JSON form of §12.1; `with_hash` false for what a client is shown (§4.7).
    pub fn to_object(&self, with_hash: bool) -> Object {
        let used: Vec<Value> = self
            .used
            .iter()
            .map(|u| json!({"redeemer": u.redeemer.to_string(), "at": to_secs(u.at), "link": u.link}))
            .collect();
        let mut v = json!({
            "id": self.id,
            "endpoint": self.endpoint.to_string(),
            "direction": self.direction.as_str(),
            "created": to_secs(self.created),
            "expires": to_secs(self.expires),
            "uses": self.uses,
            "used": used,
            "link_ttl": self.link_ttl.as_secs(),
            "state": self.state.as_str(),
            "issued_by": self.issued_by.to_string(),
        });
        let Value::Object(o) = &mut v else {
            return Object::new();
        };
        if with_hash {
            o.insert("token_hash".into(), self.token_hash.clone().into());
        }
        if let Some(l) = &self.label {
            o.insert("label".into(), l.clone().into());
        }
        if let Some(p) = &self.bind_to {
            o.insert("bind_to".into(), p.to_string().into());
        }
        core::mem::take(o)
    }

    /// Reads a stored record (with its hash), as [`Self::to_object`] wrote it.
    pub fn from_value(v: &Value) -> Option<Self> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let t = |k: &str| {
            v.get(k)
                .and_then(Value::as_f64)
                .and_then(crate::airc::signing::ts_ms)
                .map(Timestamp::from_millis)
        };
        let used = v
            .get("used")?
            .as_array()?
            .iter()
            .map(|u| {
                Some(Use {
                    redeemer: Address::parse(u.get("redeemer")?.as_str()?).ok()?,
                    at: Timestamp::from_millis(crate::airc::signing::ts_ms(
                        u.get("at")?.as_f64()?,
                    )?),
                    link: u.get("link")?.as_str()?.to_string(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let token_hash = s("token_hash")?;
        if token_hash.len() != 64 || hex::decode(token_hash).is_err() {
            return None;
        }
        Some(Self {
            id: s("id").filter(|id| valid_id(id))?.to_string(),
            token_hash: token_hash.to_string(),
            endpoint: Address::parse(s("endpoint")?).ok()?,
            label: s("label").map(ToString::to_string),
            direction: Direction::parse(s("direction")?)?,
            created: t("created")?,
            expires: t("expires")?,
            uses: v
                .get("uses")?
                .as_u64()
                .filter(|u| (1..=MAX_USES).contains(u))?,
            used,
            bind_to: match s("bind_to") {
                Some(p) => Some(Pattern::parse(p).ok()?),
                None => None,
            },
            link_ttl: Duration::from_secs(v.get("link_ttl")?.as_u64()?),
            state: PassportState::parse(s("state")?)?,
            issued_by: Address::parse(s("issued_by")?).ok()?,
        })
    }
}

impl PassportRecord {
    /// The file rendering (§12.2) for `issuer` with `token`.
    pub fn file(&self, issuer: &str, token: &str) -> Object {
        let mut v = json!({
            "airc_passport": 1,
            "issuer": issuer,
            "endpoint": self.endpoint.to_string(),
            "token": token,
            "direction": self.direction.as_str(),
            "expires": iso8601(self.expires),
            "uses": self.uses,
            "redeem": alloc::format!("airc://{issuer}/_passport"),
        });
        let Value::Object(o) = &mut v else {
            return Object::new();
        };
        if let Some(l) = &self.label {
            o.insert("label".into(), l.clone().into());
        }
        core::mem::take(o)
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` in UTC (the file rendering's `expires`, §12.2).
pub fn iso8601(t: Timestamp) -> String {
    let secs = t.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    alloc::format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What an issuer asks for (§12.3); `None` takes the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// The inviting endpoint, already checked to be one the issuer may act for.
    pub endpoint: Address,
    /// Who issues it (the endpoint itself, or an administrator acting for it).
    pub issued_by: Address,
    /// The label.
    pub label: Option<String>,
    /// The links' direction.
    pub direction: Direction,
    /// Uses, 1 to [`MAX_USES`].
    pub uses: Option<u64>,
    /// Lifetime in seconds, up to [`MAX_TTL`].
    pub ttl: Option<u64>,
    /// The links' lifetime in seconds, up to [`MAX_LINK_TTL`].
    pub link_ttl: Option<u64>,
    /// Redeemers must match this.
    pub bind_to: Option<Pattern>,
}

/// A passport just issued: the record and the token, which is shown this once.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    /// The record as stored.
    pub record: PassportRecord,
    /// The bearer token. A secret: `Debug` does not show it.
    pub token: String,
}

impl fmt::Debug for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issued")
            .field("record", &self.record)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Why an issuance or revocation is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BookError {
    /// `uses` is 0 or above [`MAX_USES`].
    Uses,
    /// `ttl` is 0 or above [`MAX_TTL`].
    Ttl,
    /// `link_ttl` is 0 or above [`MAX_LINK_TTL`].
    LinkTtl,
    /// The endpoint is a namespace, not an endpoint.
    NotAnEndpoint,
    /// The book holds [`MAX_PASSPORTS`].
    Full,
    /// No passport with this id (or not the caller's).
    Unknown(String),
    /// Already revoked.
    AlreadyRevoked(String),
}

impl fmt::Display for BookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uses => write!(f, "uses must be 1 to {MAX_USES}"),
            Self::Ttl => write!(f, "ttl must be 1 s to {} days", MAX_TTL.as_secs() / DAY),
            Self::LinkTtl => {
                let days = MAX_LINK_TTL.as_secs() / DAY;
                write!(f, "link_ttl must be 1 s to {days} days")
            }
            Self::NotAnEndpoint => f.write_str("a passport is issued for an endpoint"),
            Self::Full => f.write_str("too many passports"),
            Self::Unknown(id) => write!(f, "no passport {}", short(id)),
            Self::AlreadyRevoked(id) => write!(f, "passport {} is already revoked", short(id)),
        }
    }
}

/// Why a redemption is refused (§12.5), in the order it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedeemRefusal {
    /// The source has [`MAX_FAILURES`] failures in the last [`FAILURE_WINDOW`].
    TooManyFailures,
    /// The request is not a redemption (its body is not `{"action":"redeem","token":…}`).
    Malformed,
    /// One of §12.5's reasons.
    Passport(PassportRefusal),
}

impl RedeemRefusal {
    /// The ack's `reason` (§12.5, §14.1).
    pub fn reason(self) -> &'static str {
        match self {
            Self::TooManyFailures => "too many failed redemptions",
            Self::Malformed => "not a redemption request",
            Self::Passport(p) => p.reason(),
        }
    }
}

/// The issuer's passports and the failed-redemption counts.
#[derive(Clone)]
pub struct PassportBook {
    crypto: &'static dyn CryptoProvider,
    records: BTreeMap<String, PassportRecord>,
    /// `(token_hash, id)` of every record, so a redemption costs a lookup, not a comparison with
    /// every passport the book holds. Pairs rather than a map from hash to id because restored
    /// records may share a hash: the lowest id is found, as a walk of `records` in id order
    /// found it. Records are added or replaced only by `put`, which keeps this in step; nothing
    /// else changes a record's hash.
    by_hash: BTreeSet<(String, String)>,
    failures: Failures,
}

impl fmt::Debug for PassportBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassportBook")
            .field("records", &self.records.len())
            .field("failing_sources", &self.failures.by_source.len())
            .finish_non_exhaustive()
    }
}

impl PassportBook {
    /// An empty book hashing with `crypto`.
    pub fn new(crypto: &'static dyn CryptoProvider) -> Self {
        Self {
            crypto,
            records: BTreeMap::new(),
            by_hash: BTreeSet::new(),
            failures: Failures::new(MAX_FAILURE_SOURCES),
        }
    }

    /// The record with this id.
    pub fn get(&self, id: &str) -> Option<&PassportRecord> {
        self.records.get(id)
    }

    /// Every record, by id.
    pub fn all(&self) -> impl Iterator<Item = &PassportRecord> {
        self.records.values()
    }

    /// Puts back a stored record (after a restart). Past [`MAX_PASSPORTS`] it is refused.
    pub fn restore(&mut self, record: PassportRecord) -> Result<(), BookError> {
        if self.records.len() >= MAX_PASSPORTS && !self.records.contains_key(&record.id) {
            return Err(BookError::Full);
        }
        self.put(record);
        Ok(())
    }

    /// Stores `record`, replacing any with its id, and keeps the hash index in step.
    fn put(&mut self, record: PassportRecord) {
        let indexed = (record.token_hash.clone(), record.id.clone());
        if let Some(old) = self.records.insert(record.id.clone(), record) {
            // Before the new pair goes in: the replaced record may have had the same hash.
            self.by_hash.remove(&(old.token_hash, old.id));
        }
        self.by_hash.insert(indexed);
    }

    /// The record whose token hash is `hash` (the lowest id, should several share it).
    fn by_token_hash(&self, hash: &str) -> Option<&PassportRecord> {
        // Not constant-time, and need not be: timing can tell a guesser at most how much of a
        // stored hash its guess's hash matches, which brings it no nearer a token (that takes a
        // SHA-256 preimage). The walk this replaced compared with `==` and told as much.
        let (h, id) = self
            .by_hash
            .range((hash.to_string(), String::new())..)
            .next()?;
        if h != hash {
            return None;
        }
        self.records.get(id)
    }

    /// §12.3: a new passport with the defaults and caps applied, a fresh id and a fresh token.
    pub fn issue(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        req: Issue,
    ) -> Result<Issued, BookError> {
        let uses = req.uses.unwrap_or(DEFAULT_USES);
        if !(1..=MAX_USES).contains(&uses) {
            return Err(BookError::Uses);
        }
        let ttl = bounded(req.ttl, DEFAULT_TTL, MAX_TTL).ok_or(BookError::Ttl)?;
        let link_ttl =
            bounded(req.link_ttl, DEFAULT_LINK_TTL, MAX_LINK_TTL).ok_or(BookError::LinkTtl)?;
        if !req.endpoint.is_endpoint() {
            return Err(BookError::NotAnEndpoint);
        }
        if self.records.len() >= MAX_PASSPORTS {
            return Err(BookError::Full);
        }
        let id = loop {
            let mut bytes = [0u8; 4];
            rng.fill_bytes(&mut bytes);
            let id = alloc::format!("P{}", hex::encode(&bytes));
            if !self.records.contains_key(&id) {
                break id;
            }
        };
        let token = new_token(rng);
        let record = PassportRecord {
            id: id.clone(),
            token_hash: token_hash(self.crypto, &token),
            endpoint: req.endpoint.without_fragment(),
            label: req.label,
            direction: req.direction,
            created: now,
            expires: now.saturating_add(ttl),
            uses,
            used: Vec::new(),
            bind_to: req.bind_to,
            link_ttl,
            state: PassportState::Active,
            issued_by: req.issued_by.without_fragment(),
        };
        self.put(record.clone());
        Ok(Issued { record, token })
    }

    /// §12.5 up to the grant: the failure limit, then the record whose hash matches, then why
    /// not, in the spec's order. A refusal other than the limit itself counts a failure for
    /// `source`. On success the record is returned; nothing is consumed until [`Self::used`].
    pub fn check(
        &mut self,
        now: Timestamp,
        source: &str,
        token: Option<&str>,
        from: &Address,
    ) -> Result<PassportRecord, RedeemRefusal> {
        let since = now.saturating_sub(FAILURE_WINDOW);
        if self.failures.recent(source, since) >= MAX_FAILURES {
            return Err(RedeemRefusal::TooManyFailures);
        }
        let why = match token {
            None => Err(RedeemRefusal::Malformed),
            Some(token) => self.why_not(now, token, from),
        };
        if why.is_err() {
            self.failures.record(now, source);
        }
        why
    }

    fn why_not(
        &self,
        now: Timestamp,
        token: &str,
        from: &Address,
    ) -> Result<PassportRecord, RedeemRefusal> {
        let hash = token_hash(self.crypto, token);
        let refuse = |p| Err(RedeemRefusal::Passport(p));
        let Some(rec) = self.by_token_hash(&hash) else {
            return refuse(PassportRefusal::Unknown);
        };
        if rec.state == PassportState::Revoked {
            return refuse(PassportRefusal::Revoked);
        }
        if rec.expires < now {
            return refuse(PassportRefusal::Expired);
        }
        if rec.used.len() as u64 >= rec.uses {
            return refuse(PassportRefusal::Exhausted);
        }
        if rec.bind_to.as_ref().is_some_and(|p| !p.matches(from)) {
            return refuse(PassportRefusal::NotForYou);
        }
        if from.key() == rec.endpoint.key() {
            return refuse(PassportRefusal::NotForYou);
        }
        Ok(rec.clone())
    }

    /// §12.5: a use made (the link granted); exhausted when none are left. Returns the record.
    pub fn used(&mut self, id: &str, u: Use) -> Option<&PassportRecord> {
        let rec = self.records.get_mut(id)?;
        rec.used.push(u);
        if rec.used.len() as u64 >= rec.uses && rec.state == PassportState::Active {
            rec.state = PassportState::Exhausted;
        }
        Some(rec)
    }

    /// A use given back: its grant was never recorded at the redeemer (see the server).
    pub fn unuse(&mut self, id: &str, link: &str) -> Option<&PassportRecord> {
        let rec = self.records.get_mut(id)?;
        rec.used.retain(|u| u.link != link);
        if rec.state == PassportState::Exhausted && (rec.used.len() as u64) < rec.uses {
            rec.state = PassportState::Active;
        }
        Some(rec)
    }

    /// §12.6: revoke passport `id`. `by` must be its endpoint or its issuer, unless `admin`.
    pub fn revoke(
        &mut self,
        id: &str,
        by: Option<&Address>,
        admin: bool,
    ) -> Result<&PassportRecord, BookError> {
        let unknown = || BookError::Unknown(id.to_string());
        let rec = self.records.get_mut(id).ok_or_else(unknown)?;
        let mine =
            by.is_some_and(|b| b.key() == rec.endpoint.key() || b.key() == rec.issued_by.key());
        if !admin && !mine {
            return Err(unknown());
        }
        if rec.state == PassportState::Revoked {
            return Err(BookError::AlreadyRevoked(id.to_string()));
        }
        rec.state = PassportState::Revoked;
        Ok(rec)
    }
}

/// The failed redemptions of each source (§12.5), at most `capacity` sources.
///
/// When full, a new source displaces the one whose last failure is oldest. `by_last` orders the
/// sources that way so finding it is a lookup, not a walk of every source: a source is another
/// realm or a namespace of this one, and a hostile party can present new realm names at will,
/// keeping the table full and every failed guess from a new name a displacement.
#[derive(Clone, Debug)]
struct Failures {
    capacity: usize,
    by_source: BTreeMap<String, VecDeque<Timestamp>>,
    /// `(last failure, source)` for every source of `by_source`, `None` when its failures have
    /// all aged out. Ties go to the lowest source, as the first minimum of a walk in key order.
    by_last: BTreeSet<(Option<Timestamp>, String)>,
}

impl Failures {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            by_source: BTreeMap::new(),
            by_last: BTreeSet::new(),
        }
    }

    /// `source`'s failures at or after `since`; older ones are forgotten.
    fn recent(&mut self, source: &str, since: Timestamp) -> usize {
        let Some(f) = self.by_source.get_mut(source) else {
            return 0;
        };
        let last = f.back().copied();
        while f.front().is_some_and(|t| *t < since) {
            f.pop_front();
        }
        if f.is_empty() && last.is_some() {
            self.by_last.remove(&(last, source.to_string()));
            self.by_last.insert((None, source.to_string()));
        }
        f.len()
    }

    /// A failure of `source` at `now`; keeps the newest [`MAX_FAILURES`].
    fn record(&mut self, now: Timestamp, source: &str) {
        let known = self.by_source.contains_key(source);
        if !known
            && self.by_source.len() >= self.capacity
            && let Some((_, oldest)) = self.by_last.pop_first()
        {
            self.by_source.remove(&oldest);
        }
        let f = self.by_source.entry(source.to_string()).or_default();
        let last = f.back().copied();
        f.push_back(now);
        while f.len() > MAX_FAILURES {
            f.pop_front();
        }
        if known {
            self.by_last.remove(&(last, source.to_string()));
        }
        self.by_last.insert((Some(now), source.to_string()));
    }
}

/// A lifetime in seconds: `None` is the default; 0 or past `max` is refused.
fn bounded(secs: Option<u64>, default: Duration, max: Duration) -> Option<Duration> {
    match secs {
        None => Some(default),
        Some(s) if s > 0 && s <= max.as_secs() => Some(Duration::from_secs(s)),
        Some(_) => None,
    }
}

/// [`TOKEN_CHARS`] base62 characters, each drawn uniformly (bytes ≥ 248 are drawn again, so
/// no character is likelier than another).
fn new_token(rng: &mut dyn rand_core::CryptoRng) -> String {
    let mut token = String::with_capacity(TOKEN_CHARS);
    let mut buf = [0u8; 32];
    while token.len() < TOKEN_CHARS {
        rng.fill_bytes(&mut buf);
        for b in buf {
            if token.len() < TOKEN_CHARS && usize::from(b) < 62 * 4 {
                token.push(char::from(BASE62[usize::from(b) % 62]));
            }
        }
    }
    token
}

/// `P` + 8 lower-case hex (§12.1).
pub fn valid_id(id: &str) -> bool {
    id.len() == 9
        && id.starts_with('P')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn short(id: &str) -> String {
    id.chars().take(16).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const T0: Timestamp = Timestamp::from_secs(1_790_380_000);

    fn addr(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    fn book() -> PassportBook {
        PassportBook::new(crate::crypto::default_provider())
    }

    fn issue(b: &mut PassportBook, rng: &mut ChaCha20Rng, f: impl FnOnce(&mut Issue)) -> Issued {
        let mut req = Issue {
            endpoint: addr("airc://example.com/alice/x"),
            issued_by: addr("airc://example.com/alice/x"),
            label: Some("vendor".into()),
            direction: Direction::Both,
            uses: None,
            ttl: None,
            link_ttl: None,
            bind_to: None,
        };
        f(&mut req);
        b.issue(T0, rng, req).unwrap()
    }

    #[test]
    fn a_new_passport_takes_the_defaults_and_stores_only_the_token_hash() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let got = issue(&mut b, &mut rng, |_| {});
        let r = &got.record;
        assert!(valid_id(&r.id), "{}", r.id);
        assert_eq!(r.uses, 1);
        assert_eq!(r.expires, T0 + Duration::from_secs(7 * DAY));
        assert_eq!(r.link_ttl, Duration::from_secs(30 * DAY));
        assert_eq!(r.direction, Direction::Both);
        assert_eq!(got.token.len(), TOKEN_CHARS);
        assert!(got.token.bytes().all(|c| BASE62.contains(&c)));
        assert_eq!(
            r.token_hash,
            token_hash(crate::crypto::default_provider(), &got.token)
        );
        let stored = serde_json::to_string(&b.get(&r.id).unwrap().to_object(true)).unwrap();
        assert!(!stored.contains(&got.token), "the token is never stored");
        assert!(!format!("{got:?}").contains(&got.token));
        let shown = r.to_object(false);
        assert!(shown.get("token_hash").is_none());
        let back = PassportRecord::from_value(&Value::Object(r.to_object(true))).unwrap();
        assert_eq!(&back, r);
    }

    #[test]
    fn the_file_rendering_writes_expires_in_iso_8601() {
        assert_eq!(iso8601(Timestamp::from_secs(0)), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(T0), "2026-09-25T23:46:40Z");
        assert_eq!(
            iso8601(Timestamp::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let got = issue(&mut b, &mut rng, |_| {});
        let file = Value::Object(got.record.file("example.com", &got.token)).to_string();
        let back = super::super::Passport::parse(&file).unwrap();
        assert_eq!(back.token, got.token);
        assert_eq!(back.issuer, "example.com");
    }

    #[test]
    fn issuance_is_capped_at_100_uses_and_90_days() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut req = |f: &dyn Fn(&mut Issue)| {
            let mut r = Issue {
                endpoint: addr("airc://example.com/alice/x"),
                issued_by: addr("airc://example.com/alice/x"),
                label: None,
                direction: Direction::Both,
                uses: None,
                ttl: None,
                link_ttl: None,
                bind_to: None,
            };
            f(&mut r);
            b.issue(T0, &mut rng, r).map(|i| i.record)
        };
        assert_eq!(req(&|r| r.uses = Some(100)).unwrap().uses, 100);
        assert_eq!(req(&|r| r.uses = Some(101)), Err(BookError::Uses));
        assert_eq!(req(&|r| r.uses = Some(0)), Err(BookError::Uses));
        let max = req(&|r| r.ttl = Some(90 * DAY)).unwrap();
        assert_eq!(max.expires, T0 + Duration::from_secs(90 * DAY));
        assert_eq!(req(&|r| r.ttl = Some(90 * DAY + 1)), Err(BookError::Ttl));
        assert_eq!(
            req(&|r| r.link_ttl = Some(90 * DAY + 1)),
            Err(BookError::LinkTtl)
        );
        let ns = |r: &mut Issue| r.endpoint = addr("airc://example.com/alice/");
        assert_eq!(req(&ns), Err(BookError::NotAnEndpoint));
    }

    #[test]
    fn redemption_checks_run_in_the_order_of_12_5() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let bob = addr("airc://partner.example/support/desk");
        let refused = |p| Err(RedeemRefusal::Passport(p));
        assert_eq!(
            b.check(T0, "s", Some("nope"), &bob),
            refused(PassportRefusal::Unknown)
        );
        let bound = issue(&mut b, &mut rng, |r| {
            r.bind_to = Some(Pattern::parse("//other.example/**").unwrap());
        });
        assert_eq!(
            b.check(T0, "s", Some(&bound.token), &bob),
            refused(PassportRefusal::NotForYou)
        );
        let own = issue(&mut b, &mut rng, |_| {});
        let alice = addr("airc://example.com/alice/x");
        assert_eq!(
            b.check(T0, "s", Some(&own.token), &alice),
            refused(PassportRefusal::NotForYou)
        );
        assert!(b.check(T0, "s", Some(&own.token), &bob).is_ok());
        let late = T0 + DEFAULT_TTL + Duration::from_millis(1);
        assert_eq!(
            b.check(late, "s", Some(&own.token), &bob),
            refused(PassportRefusal::Expired)
        );
        let use_ = Use {
            redeemer: bob.clone(),
            at: T0,
            link: "L00000001".into(),
        };
        assert_eq!(
            b.used(&own.record.id, use_).unwrap().state,
            PassportState::Exhausted
        );
        assert_eq!(
            b.check(T0, "s", Some(&own.token), &bob),
            refused(PassportRefusal::Exhausted)
        );
        // Revoked is checked before expired and exhausted.
        b.revoke(&own.record.id, Some(&alice), false).unwrap();
        assert_eq!(
            b.check(late, "s", Some(&own.token), &bob),
            refused(PassportRefusal::Revoked)
        );
    }

    /// §12.5's order where two reasons hold at once: the earlier one is the answer. (Steps 5
    /// and 6 give the same reason, so their order cannot show.)
    #[test]
    fn of_two_reasons_to_refuse_the_earlier_step_of_12_5_is_given() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let bob = addr("airc://partner.example/support/desk");
        let alice = addr("airc://example.com/alice/x");
        let late = T0 + DEFAULT_TTL + Duration::from_millis(1);
        let bound = |r: &mut Issue| r.bind_to = Some(Pattern::parse("//other.example/**").unwrap());
        let mut used_up = |b: &mut PassportBook, with: &dyn Fn(&mut Issue)| {
            let p = issue(b, &mut rng, with);
            let use_ = Use {
                redeemer: bob.clone(),
                at: T0,
                link: "L00000001".into(),
            };
            assert_eq!(
                b.used(&p.record.id, use_).unwrap().state,
                PassportState::Exhausted
            );
            p.token
        };
        let plain = used_up(&mut b, &|_| {});
        let bound_used = used_up(&mut b, &bound);
        let bound_fresh = issue(&mut b, &mut rng, bound).token;
        let fresh = issue(&mut b, &mut rng, |_| {}).token;
        for (at, token, from, why) in [
            (late, &plain, &bob, PassportRefusal::Expired), // 3 before 4
            (late, &bound_fresh, &bob, PassportRefusal::Expired), // 3 before 5
            (late, &fresh, &alice, PassportRefusal::Expired), // 3 before 6
            (T0, &bound_used, &bob, PassportRefusal::Exhausted), // 4 before 5
            (T0, &plain, &alice, PassportRefusal::Exhausted), // 4 before 6
        ] {
            assert_eq!(
                b.check(at, "s", Some(token), from),
                Err(RedeemRefusal::Passport(why))
            );
        }
    }

    #[test]
    fn twenty_failures_in_an_hour_refuse_the_source_and_the_hour_forgives() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let good = issue(&mut b, &mut rng, |_| {});
        let bob = addr("airc://partner.example/support/desk");
        for _ in 0..MAX_FAILURES {
            assert!(
                b.check(T0, "realm:partner.example", Some("guess"), &bob)
                    .is_err()
            );
        }
        assert_eq!(
            b.check(T0, "realm:partner.example", Some(&good.token), &bob),
            Err(RedeemRefusal::TooManyFailures),
            "even a good token, once the source is over the limit"
        );
        assert!(
            b.check(T0, "realm:other.example", Some(&good.token), &bob)
                .is_ok()
        );
        let later = T0 + FAILURE_WINDOW + Duration::from_millis(1);
        assert!(
            b.check(later, "realm:partner.example", Some(&good.token), &bob)
                .is_ok()
        );
    }

    #[test]
    fn only_its_endpoint_its_issuer_or_an_administrator_revokes() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let p = issue(&mut b, &mut rng, |_| {});
        let id = p.record.id.clone();
        let mallory = addr("airc://example.com/mallory/m");
        assert_eq!(
            b.revoke(&id, Some(&mallory), false).unwrap_err(),
            BookError::Unknown(id.clone())
        );
        assert_eq!(
            b.revoke(&id, None, true).unwrap().state,
            PassportState::Revoked
        );
        assert_eq!(
            b.revoke(&id, None, true).unwrap_err(),
            BookError::AlreadyRevoked(id)
        );
    }

    /// The hash index holds exactly one `(token_hash, id)` per record, and the eviction order
    /// one `(last failure, source)` per source.
    fn assert_indexed(b: &PassportBook) {
        let held: BTreeSet<(String, String)> = b
            .records
            .iter()
            .map(|(id, r)| (r.token_hash.clone(), id.clone()))
            .collect();
        assert_eq!(b.by_hash, held);
        let last: BTreeSet<(Option<Timestamp>, String)> = b
            .failures
            .by_source
            .iter()
            .map(|(s, f)| (f.back().copied(), s.clone()))
            .collect();
        assert_eq!(b.failures.by_last, last);
    }

    /// A record of `template` restored under `id` for `token`.
    fn stored(template: &PassportRecord, id: &str, token: &str) -> PassportRecord {
        PassportRecord {
            id: id.into(),
            token_hash: token_hash(crate::crypto::default_provider(), token),
            ..template.clone()
        }
    }

    #[test]
    fn a_token_is_found_only_while_a_record_holds_its_hash() {
        let mut b = book();
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let bob = addr("airc://partner.example/support/desk");
        let issued = issue(&mut b, &mut rng, |_| {});
        let id = issued.record.id.clone();
        let unknown = Err(RedeemRefusal::Passport(PassportRefusal::Unknown));
        // Restoring a record under the same id with another token: the old token is gone.
        b.restore(stored(&issued.record, &id, "second")).unwrap();
        assert_indexed(&b);
        assert_eq!(b.check(T0, "s", Some(&issued.token), &bob), unknown);
        assert_eq!(b.check(T0, "s", Some("second"), &bob).unwrap().id, id);
        // Restored again unchanged: still found once.
        b.restore(stored(&issued.record, &id, "second")).unwrap();
        assert_indexed(&b);
        assert_eq!(b.check(T0, "s", Some("second"), &bob).unwrap().id, id);
        // Two records with one hash (only a damaged store does this): the lowest id answers,
        // as a walk in id order did, and the other answers once the lowest is rewritten.
        b.restore(stored(&issued.record, "P00000000", "second"))
            .unwrap();
        b.restore(stored(&issued.record, "Pffffffff", "second"))
            .unwrap();
        assert_indexed(&b);
        assert_eq!(
            b.check(T0, "s", Some("second"), &bob).unwrap().id,
            "P00000000"
        );
        b.restore(stored(&issued.record, "P00000000", "third"))
            .unwrap();
        assert_indexed(&b);
        assert_eq!(b.check(T0, "s", Some("second"), &bob).unwrap().id, id);
        assert_eq!(
            b.check(T0, "s", Some("third"), &bob).unwrap().id,
            "P00000000"
        );
    }

    #[test]
    fn a_full_failure_table_forgets_the_source_whose_last_failure_is_oldest() {
        let secs = |n| T0 + Duration::from_secs(n);
        let held = |f: &Failures| f.by_source.keys().cloned().collect::<Vec<_>>();
        let mut f = Failures::new(2);
        f.record(T0, "b");
        f.record(T0, "a");
        // A tie goes to the lowest source.
        f.record(secs(1), "c");
        assert_eq!(held(&f), ["b", "c"]);
        f.record(secs(2), "b");
        // Every failure of b ages out (c's are not looked at): b now has none, the oldest of all.
        assert_eq!(f.recent("b", secs(3)), 0);
        f.record(secs(4), "d");
        assert_eq!(held(&f), ["c", "d"]);
        let order: Vec<_> = f.by_last.iter().cloned().collect();
        assert_eq!(
            order,
            [(Some(secs(1)), "c".into()), (Some(secs(4)), "d".into())]
        );
    }

    /// The book as it was before its indexes: a redemption walks every record for the hash,
    /// and a full failure table walks every source for the one to forget.
    struct Walked {
        capacity: usize,
        failures: BTreeMap<String, VecDeque<Timestamp>>,
    }

    impl Walked {
        fn check(
            &mut self,
            records: &BTreeMap<String, PassportRecord>,
            now: Timestamp,
            source: &str,
            token: Option<&str>,
            from: &Address,
        ) -> Result<PassportRecord, RedeemRefusal> {
            let since = now.saturating_sub(FAILURE_WINDOW);
            if let Some(f) = self.failures.get_mut(source) {
                while f.front().is_some_and(|t| *t < since) {
                    f.pop_front();
                }
                if f.len() >= MAX_FAILURES {
                    return Err(RedeemRefusal::TooManyFailures);
                }
            }
            let why = match token {
                None => Err(RedeemRefusal::Malformed),
                Some(token) => Self::why_not(records, now, token, from),
            };
            if why.is_err() {
                self.fail(now, source);
            }
            why
        }

        fn why_not(
            records: &BTreeMap<String, PassportRecord>,
            now: Timestamp,
            token: &str,
            from: &Address,
        ) -> Result<PassportRecord, RedeemRefusal> {
            let hash = token_hash(crate::crypto::default_provider(), token);
            let refuse = |p| Err(RedeemRefusal::Passport(p));
            let Some(rec) = records.values().find(|r| r.token_hash == hash) else {
                return refuse(PassportRefusal::Unknown);
            };
            if rec.state == PassportState::Revoked {
                return refuse(PassportRefusal::Revoked);
            }
            if rec.expires < now {
                return refuse(PassportRefusal::Expired);
            }
            if rec.used.len() as u64 >= rec.uses {
                return refuse(PassportRefusal::Exhausted);
            }
            if rec.bind_to.as_ref().is_some_and(|p| !p.matches(from)) {
                return refuse(PassportRefusal::NotForYou);
            }
            if from.key() == rec.endpoint.key() {
                return refuse(PassportRefusal::NotForYou);
            }
            Ok(rec.clone())
        }

        fn fail(&mut self, now: Timestamp, source: &str) {
            if !self.failures.contains_key(source) && self.failures.len() >= self.capacity {
                let oldest = self
                    .failures
                    .iter()
                    .min_by_key(|(_, f)| f.back().copied())
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.failures.remove(&k);
                }
            }
            let f = self.failures.entry(source.to_string()).or_default();
            f.push_back(now);
            while f.len() > MAX_FAILURES {
                f.pop_front();
            }
        }
    }

    #[test]
    fn redeeming_by_index_answers_as_walking_every_record_and_source_did() {
        use rand_core::Rng;
        let tokens = ["t0", "t1", "t2", "t3", "t4", "t5"];
        let ids = ["P00000001", "P00000002", "P0000000a", "P000000ff"];
        let sources = [
            "realm:a", "realm:b", "realm:c", "local:x", "local:y", "local:z",
        ];
        let froms = [
            addr("airc://partner.example/support/desk"),
            addr("airc://example.com/alice/x"),
            addr("airc://other.example/a/b"),
        ];
        for seed in 0..12 {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let mut b = book();
            let capacity = 1 + (rng.next_u32() % 4) as usize;
            b.failures = Failures::new(capacity);
            let mut walked = Walked {
                capacity,
                failures: BTreeMap::new(),
            };
            let template = issue(&mut b, &mut rng, |_| {}).record;
            let mut issued: Vec<String> = Vec::new();
            let mut now = T0;
            for _ in 0..1500 {
                let mut pick = |n: usize| rng.next_u32() as usize % n;
                match pick(20) {
                    0 => {
                        let mut r = stored(&template, ids[pick(4)], tokens[pick(6)]);
                        r.state = [PassportState::Active, PassportState::Revoked][pick(2)];
                        r.expires = T0 + Duration::from_secs(pick(3) as u64 * 3600);
                        b.restore(r).unwrap();
                    }
                    1 => {
                        let token = issue(&mut b, &mut rng, |r| r.uses = Some(2)).token;
                        issued.push(token);
                    }
                    2 => {
                        let id = ids[pick(4)];
                        let _ = b.revoke(id, None, true);
                        let use_ = Use {
                            redeemer: froms[0].clone(),
                            at: now,
                            link: "L00000001".into(),
                        };
                        let _ = b.used(ids[pick(4)], use_);
                    }
                    3 => now = now + Duration::from_secs(pick(2000) as u64),
                    _ => {
                        let token = match pick(4) {
                            0 if !issued.is_empty() => Some(issued[pick(issued.len())].as_str()),
                            1 => None,
                            _ => Some(tokens[pick(6)]),
                        };
                        let (source, from) = (sources[pick(6)], &froms[pick(3)]);
                        let want = walked.check(&b.records, now, source, token, from);
                        assert_eq!(b.check(now, source, token, from), want, "seed {seed}");
                    }
                }
                assert_indexed(&b);
                assert_eq!(b.failures.by_source, walked.failures, "seed {seed}");
            }
        }
    }
}
