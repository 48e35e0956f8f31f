//! The link record (AIRC §11.1): its fields, its JSON form, and the forward-only state order.

use alloc::string::{String, ToString};
use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::airc::address::Address;
use crate::airc::frame::Object;
use crate::core::Timestamp;

/// What every link id starts with (§11.1: "L + 8 lower-case hex").
pub const ID_PREFIX: char = 'L';

/// Hex digits after [`ID_PREFIX`] in a link id (§11.1).
pub const ID_HEX_DIGITS: usize = 8;

/// The longest label a record may carry, in bytes. The spec sets none; a label is shown to the
/// offeree inside a notification (§11.4), so it is attacker-controlled text that must stay short.
pub const MAX_LABEL_BYTES: usize = 256;

/// Whether `id` is a link id: `L` and exactly eight lower-case hex digits (§11.1).
pub fn is_link_id(id: &str) -> bool {
    id.len() == 1 + ID_HEX_DIGITS
        && id.starts_with(ID_PREFIX)
        && id[1..]
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Who may start a conversation over a link (§11.1, §11.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// Either side may start.
    #[serde(rename = "both")]
    Both,
    /// Only `a` may start; `b` may reply inside the reply window.
    #[serde(rename = "a-initiates")]
    AInitiates,
    /// Only `b` may start; `a` may reply inside the reply window.
    #[serde(rename = "b-initiates")]
    BInitiates,
}

impl Direction {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Both => "both",
            Self::AInitiates => "a-initiates",
            Self::BInitiates => "b-initiates",
        }
    }

    /// The direction a wire string names, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "both" => Some(Self::Both),
            "a-initiates" => Some(Self::AInitiates),
            "b-initiates" => Some(Self::BInitiates),
            _ => None,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A link's state (§11.1): `pending → active | declined; any → revoked`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    /// Offered, not yet answered.
    Pending,
    /// In force (accepted, or granted by a redeemed passport).
    Active,
    /// The offeree said no.
    Declined,
    /// Withdrawn by either party; never leaves this state.
    Revoked,
}

impl LinkState {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Declined => "declined",
            Self::Revoked => "revoked",
        }
    }

    /// Whether a record may move from `self` to `next` (§11.1). Staying put is allowed; `active`
    /// and `declined` are both answers to an offer, so neither can follow the other.
    pub const fn can_become(self, next: Self) -> bool {
        matches!(
            (self, next),
            (Self::Pending, _)
                | (Self::Active, Self::Active | Self::Revoked)
                | (Self::Declined, Self::Declined | Self::Revoked)
                | (Self::Revoked, Self::Revoked)
        )
    }
}

impl fmt::Display for LinkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a link created by a passport came from (§11.1 `origin`, §12.5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkOrigin {
    /// The passport id.
    pub passport: String,
    /// The endpoint that issued the passport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_by: Option<String>,
    /// The endpoint that redeemed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redeemed_by: Option<String>,
}

/// Why a link record is not valid (§11.1).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// Not a JSON object with the record's fields and types.
    Shape(String),
    /// `id` is not `L` + 8 lower-case hex.
    BadId,
    /// `a`, `b`, `offered_by` or `revoked_by` is not an address, or carries a fragment (a key
    /// has none).
    BadAddress(&'static str),
    /// `a` is a namespace reference; only `b` may be one.
    NamespaceA,
    /// `a` and `b` are the same endpoint.
    SelfLink,
    /// `offered_by` is neither `a` nor `b`.
    OfferedByStranger,
    /// A time is negative or not finite.
    BadTime(&'static str),
    /// The label is longer than [`MAX_LABEL_BYTES`].
    LabelTooLong,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(d) => write!(f, "invalid link record: {d}"),
            Self::BadId => f.write_str("invalid link record: id is not L + 8 lower-case hex"),
            Self::BadAddress(field) => write!(f, "invalid link record: {field} is not an address"),
            Self::NamespaceA => f.write_str("invalid link record: a is a namespace"),
            Self::SelfLink => f.write_str("invalid link record: a and b are the same"),
            Self::OfferedByStranger => {
                f.write_str("invalid link record: offered_by is neither a nor b")
            }
            Self::BadTime(field) => write!(f, "invalid link record: {field} is not a time"),
            Self::LabelTooLong => f.write_str("invalid link record: label too long"),
        }
    }
}

impl core::error::Error for RecordError {}

/// A link (§11.1): a standing grant between endpoint `a` and endpoint or namespace `b`.
///
/// Serialises to and from the JSON form of §11.1; times are Unix seconds with a fraction on the
/// wire and [`Timestamp`]s here. Reading validates every field, so a `Link` is always valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct Link {
    /// `L` + 8 lower-case hex, chosen by the offerer or issuer.
    pub id: String,
    /// The offering (or issuing) endpoint's key side; always an endpoint.
    pub a: Address,
    /// The other side: an endpoint, or a namespace reference standing for every endpoint beneath.
    pub b: Address,
    /// Who may start a conversation.
    pub direction: Direction,
    /// A free-text label.
    pub label: Option<String>,
    /// When the record was made.
    pub created: Timestamp,
    /// After this the link has no effect; `None` for never.
    pub expires: Option<Timestamp>,
    /// The state.
    pub state: LinkState,
    /// The endpoint that offered (or issued) the link: `a` or `b`.
    pub offered_by: Address,
    /// The passport that created the link, for a granted one.
    pub origin: Option<LinkOrigin>,
    /// When it became active by acceptance.
    pub accepted_at: Option<Timestamp>,
    /// When it was declined.
    pub declined_at: Option<Timestamp>,
    /// When it was revoked.
    pub revoked_at: Option<Timestamp>,
    /// Who revoked it.
    pub revoked_by: Option<Address>,
}

/// Whether a merge changed the stored record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// The state moved forward (and its stamps came with it).
    Advanced,
    /// Nothing changed: the same state, or a move the order forbids.
    Unchanged,
}

impl Link {
    /// Whether the link has no effect at `now` because `expires` has passed (§11.1).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|e| e < now)
    }

    /// Whether `x` is side `a` (§11.3: `rec.a == F`; `a` is never a namespace).
    pub fn is_a(&self, x: &Address) -> bool {
        self.a == *x
    }

    /// Whether `x` is side `b`: equal to it, or beneath it when `b` is a namespace reference
    /// ("a namespace-side b matches any endpoint beneath it", §11.3).
    pub fn is_b(&self, x: &Address) -> bool {
        self.b == *x || covers(&self.b, x)
    }

    /// Whether `x` is a party to the link.
    pub fn is_party(&self, x: &Address) -> bool {
        self.is_a(x) || self.is_b(x)
    }

    /// Whether the record joins `x` and `y`, in either order (§11.3, §11.4 step 1).
    pub fn joins(&self, x: &Address, y: &Address) -> bool {
        (self.is_a(x) && self.is_b(y)) || (self.is_a(y) && self.is_b(x))
    }

    /// Whether `x` is the offeree: a party other than the offerer (§11.4 "only from the
    /// offeree").
    pub fn is_offeree(&self, x: &Address) -> bool {
        self.is_party(x) && *x != self.offered_by
    }

    /// Merges `incoming` into this record, forward only (§11.1, §11.4 step 3).
    ///
    /// Only the lifecycle moves: the state and the stamps of the states reached. The identity
    /// fields (`a`, `b`, `direction`, `label`, `created`, `expires`, `offered_by`, `origin`) stay
    /// as first stored, so a later control message cannot widen a link it merely answers. A move
    /// the order forbids (`active` after `revoked`, `declined` after `active`) leaves the record
    /// as it is.
    pub fn merge(&mut self, incoming: &Link) -> Merge {
        if incoming.state == self.state || !self.state.can_become(incoming.state) {
            return Merge::Unchanged;
        }
        self.state = incoming.state;
        match incoming.state {
            LinkState::Pending => {}
            LinkState::Active => self.accepted_at = self.accepted_at.or(incoming.accepted_at),
            LinkState::Declined => self.declined_at = self.declined_at.or(incoming.declined_at),
            LinkState::Revoked => {
                self.revoked_at = incoming.revoked_at;
                self.revoked_by.clone_from(&incoming.revoked_by);
            }
        }
        Merge::Advanced
    }

    /// The record as a JSON object, for `linked` (§4.6) and control bodies (§11.4).
    pub fn to_object(&self) -> Object {
        match serde_json::to_value(self) {
            Ok(Value::Object(o)) => o,
            // A `Link` always serialises to an object; an empty one is never sent in its place.
            _ => Object::new(),
        }
    }

    /// Reads and validates a record from JSON (§11.1).
    pub fn from_value(value: &Value) -> Result<Link, RecordError> {
        let wire = Wire::deserialize(value).map_err(|e| RecordError::Shape(e.to_string()))?;
        Link::try_from(wire)
    }
}

/// Whether namespace reference `ns` has `x` beneath it, in the same realm.
pub(crate) fn covers(ns: &Address, x: &Address) -> bool {
    ns.is_namespace()
        && ns.realm() == x.realm()
        && x.segments().len() > ns.segments().len()
        && x.segments().starts_with(ns.segments())
}

/// Unix seconds with a fraction, as the wire writes times, from a [`Timestamp`].
#[allow(clippy::cast_precision_loss)] // ms since 1970 fit f64's 53-bit mantissa until year 287 396
pub(crate) fn to_secs(t: Timestamp) -> f64 {
    t.as_millis() as f64 / 1000.0
}

/// A [`Timestamp`] from wire seconds (`round(s × 1000)`, as §9.3 reads `ts`), or `None` for a
/// negative, non-finite or out-of-range number.
pub(crate) fn from_secs(s: f64) -> Option<Timestamp> {
    crate::airc::signing::ts_ms(s).map(Timestamp::from_millis)
}

/// The record's JSON shape, before validation.
#[derive(Serialize, Deserialize)]
struct Wire {
    id: String,
    a: String,
    b: String,
    direction: Direction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    created: f64,
    #[serde(default)]
    expires: Option<f64>,
    state: LinkState,
    offered_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    origin: Option<LinkOrigin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accepted_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    declined_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_by: Option<String>,
}

/// A key-form address: the network form, without a fragment.
fn key_address(text: &str, field: &'static str) -> Result<Address, RecordError> {
    match Address::parse(text) {
        Ok(a) if a.fragment().is_none() => Ok(a),
        _ => Err(RecordError::BadAddress(field)),
    }
}

fn time(s: f64, field: &'static str) -> Result<Timestamp, RecordError> {
    from_secs(s).ok_or(RecordError::BadTime(field))
}

fn opt_time(s: Option<f64>, field: &'static str) -> Result<Option<Timestamp>, RecordError> {
    s.map(|s| time(s, field)).transpose()
}

impl TryFrom<Wire> for Link {
    type Error = RecordError;
    fn try_from(w: Wire) -> Result<Self, RecordError> {
        if !is_link_id(&w.id) {
            return Err(RecordError::BadId);
        }
        let a = key_address(&w.a, "a")?;
        let b = key_address(&w.b, "b")?;
        if a.is_namespace() {
            return Err(RecordError::NamespaceA);
        }
        if a == b {
            return Err(RecordError::SelfLink);
        }
        let offered_by = key_address(&w.offered_by, "offered_by")?;
        if offered_by != a && offered_by != b {
            return Err(RecordError::OfferedByStranger);
        }
        if w.label.as_ref().is_some_and(|l| l.len() > MAX_LABEL_BYTES) {
            return Err(RecordError::LabelTooLong);
        }
        let revoked_by = w
            .revoked_by
            .map(|r| key_address(&r, "revoked_by"))
            .transpose()?;
        Ok(Link {
            id: w.id,
            a,
            b,
            direction: w.direction,
            label: w.label,
            created: time(w.created, "created")?,
            expires: opt_time(w.expires, "expires")?,
            state: w.state,
            offered_by,
            origin: w.origin,
            accepted_at: opt_time(w.accepted_at, "accepted_at")?,
            declined_at: opt_time(w.declined_at, "declined_at")?,
            revoked_at: opt_time(w.revoked_at, "revoked_at")?,
            revoked_by,
        })
    }
}

impl From<Link> for Wire {
    fn from(l: Link) -> Self {
        Wire {
            id: l.id,
            a: l.a.key().to_string(),
            b: l.b.key().to_string(),
            direction: l.direction,
            label: l.label,
            created: to_secs(l.created),
            expires: l.expires.map(to_secs),
            state: l.state,
            offered_by: l.offered_by.key().to_string(),
            origin: l.origin,
            accepted_at: l.accepted_at.map(to_secs),
            declined_at: l.declined_at.map(to_secs),
            revoked_at: l.revoked_at.map(to_secs),
            revoked_by: l.revoked_by.map(|r| r.key().to_string()),
        }
    }
}
