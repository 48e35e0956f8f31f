//! Tiers, limits and counters (meshstr §6.2, §6.3, §6.6): the ceiling table exactly as printed,
//! the tier weights, the opening limits and which counter prices which limit.
//!
//! Every limit is an integer count per window (events, bytes, sessions), so a grant's limits are
//! `u64`; `bytes_out` at the anchor tier (4 294 967 296) does not fit in `u32`.

use serde_json::{Map, Value};

/// A peer's tier, from the issuer's point of view (§6.6). A new peer starts at `Probation` (§3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// A stranger: the opening grant, worth almost nothing, and weight 0.0 in trust aggregation.
    Probation,
    /// Weight 0.25.
    Member,
    /// Weight 0.6.
    Trusted,
    /// Weight 1.0.
    Anchor,
}

impl Tier {
    /// Every tier, lowest first, in the column order of the §6.6 table.
    pub const ALL: [Tier; 4] = [Tier::Probation, Tier::Member, Tier::Trusted, Tier::Anchor];

    /// The tier's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Probation => "probation",
            Tier::Member => "member",
            Tier::Trusted => "trusted",
            Tier::Anchor => "anchor",
        }
    }

    /// Parses a tier name; anything else is `None`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The tier's weight in trust aggregation (§6.6), in thousandths: probation 0.0, member 0.25,
    /// trusted 0.6, anchor 1.0. Integer thousandths are exact for all four.
    pub const fn weight_milli(self) -> u64 {
        match self {
            Tier::Probation => 0,
            Tier::Member => 250,
            Tier::Trusted => 600,
            Tier::Anchor => 1000,
        }
    }

    const fn column(self) -> usize {
        self as usize
    }
}

/// A priced limit of a grant: the rows of the §6.6 ceiling table, in its order.
///
/// `conn_max` and `sub_max` are advisory and not in the table (§6.2), so they are not here:
/// nothing prices them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// Sessions opened per window, priced against the `conn_open` counter.
    ConnRate,
    /// Requests per window.
    Req,
    /// Events received per window.
    EventsIn,
    /// Bytes received per window.
    BytesIn,
    /// Bytes sent per window.
    BytesOut,
    /// Blob bytes per window.
    BlobBytes,
    /// Reconciliation ranges per window.
    SyncRanges,
    /// Errors per window.
    Errors,
}

/// The number of priced limits.
pub const LIMIT_COUNT: usize = 8;

impl Limit {
    /// Every limit, in the §6.6 table's row order.
    pub const ALL: [Limit; LIMIT_COUNT] = [
        Limit::ConnRate,
        Limit::Req,
        Limit::EventsIn,
        Limit::BytesIn,
        Limit::BytesOut,
        Limit::BlobBytes,
        Limit::SyncRanges,
        Limit::Errors,
    ];

    /// The limit's name in a grant.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limit::ConnRate => "conn_rate",
            Limit::Req => "req",
            Limit::EventsIn => "events_in",
            Limit::BytesIn => "bytes_in",
            Limit::BytesOut => "bytes_out",
            Limit::BlobBytes => "blob_bytes",
            Limit::SyncRanges => "sync_ranges",
            Limit::Errors => "errors",
        }
    }

    /// Parses a limit name; anything else (including the advisory `conn_max`, `sub_max`) is `None`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The counter this limit is priced against (`counter_of`, §6.2): a limit prices the counter
    /// of its own name, except `conn_rate`, which prices `conn_open`.
    pub const fn counter(self) -> Counter {
        match self {
            Limit::ConnRate => Counter::ConnOpen,
            Limit::Req => Counter::Req,
            Limit::EventsIn => Counter::EventsIn,
            Limit::BytesIn => Counter::BytesIn,
            Limit::BytesOut => Counter::BytesOut,
            Limit::BlobBytes => Counter::BlobBytes,
            Limit::SyncRanges => Counter::SyncRanges,
            Limit::Errors => Counter::Errors,
        }
    }

    /// Whether the limit is structural (§6.3: `conn_rate`, `req`, `sync_ranges`, `errors`), which
    /// a grant opens at the tier ceiling, rather than volume, which opens at
    /// [`OPENING_LIMIT_FRACTION`] of it.
    pub const fn is_structural(self) -> bool {
        matches!(
            self,
            Limit::ConnRate | Limit::Req | Limit::SyncRanges | Limit::Errors
        )
    }

    const fn row(self) -> usize {
        self as usize
    }
}

/// The tier ceilings of §6.6, exactly as printed: rows in [`Limit::ALL`] order, columns in
/// [`Tier::ALL`] order.
pub const CEILINGS: [[u64; 4]; LIMIT_COUNT] = [
    [4, 12, 48, 192],
    [60, 600, 2400, 9600],
    [300, 3000, 12000, 48000],
    [3355443, 33554432, 134217728, 536870912],
    [26843545, 268435456, 1073741824, 4294967296],
    [1677721, 16777216, 67108864, 268435456],
    [100, 400, 1600, 6400],
    [4, 40, 160, 640],
];

/// The ceiling of `limit` at `tier` (§6.6).
pub const fn ceiling(tier: Tier, limit: Limit) -> u64 {
    CEILINGS[limit.row()][tier.column()]
}

/// `opening_limit_fraction` (§6.3; its value is not in the text, docs/decisions.md): a grant
/// opens its volume limits at one quarter of the tier ceiling, as `(numerator, denominator)`.
pub const OPENING_LIMIT_FRACTION: (u64, u64) = (1, 4);

/// The limit a grant opens at for `limit` at `tier` (§6.3): structural limits at the ceiling,
/// volume limits at [`OPENING_LIMIT_FRACTION`] of it, rounded down. This is also the floor of a
/// decay by disuse (`open_ℓ`).
pub const fn opening(tier: Tier, limit: Limit) -> u64 {
    let c = ceiling(tier, limit);
    if limit.is_structural() {
        c
    } else {
        (c as u128 * OPENING_LIMIT_FRACTION.0 as u128 / OPENING_LIMIT_FRACTION.1 as u128) as u64
    }
}

/// `tier_base_ℓ` of the additive increase (§6.3; not defined in the text, docs/decisions.md):
/// the ceiling of the limit at the peer's tier, so a clean window grows a limit by 2 % to 10 %
/// of what the tier allows.
pub const fn tier_base(tier: Tier, limit: Limit) -> u64 {
    ceiling(tier, limit)
}

/// `floor_ℓ` of the divergence formula (§6.3; its value is not in the text, docs/decisions.md):
/// the probation ceiling of the limit. Under it a disagreement is measured against the floor
/// rather than against a tiny count, and `dup_ratio` is not evaluated while `events_in` is under
/// the `events_in` floor (300 events).
pub const fn divergence_floor(limit: Limit) -> u64 {
    ceiling(Tier::Probation, limit)
}

/// A grant's limits, one per [`Limit`], indexed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits(pub [u64; LIMIT_COUNT]);

impl Limits {
    /// Every limit zero (S3's suspension, a revoked grant).
    pub const ZERO: Limits = Limits([0; LIMIT_COUNT]);

    /// The ceilings of `tier`.
    pub fn ceilings(tier: Tier) -> Self {
        Limits(Limit::ALL.map(|l| ceiling(tier, l)))
    }

    /// The opening limits of `tier`.
    pub fn opening(tier: Tier) -> Self {
        Limits(Limit::ALL.map(|l| opening(tier, l)))
    }

    /// The value of one limit.
    pub fn get(&self, limit: Limit) -> u64 {
        self.0[limit.row()]
    }

    /// Sets one limit.
    pub fn set(&mut self, limit: Limit, value: u64) {
        self.0[limit.row()] = value;
    }

    /// Whether no limit is above the ceiling of `tier` (§6.6: a grant MUST NOT carry one).
    pub fn within(&self, tier: Tier) -> bool {
        Limit::ALL.iter().all(|&l| self.get(l) <= ceiling(tier, l))
    }

    /// The limits as a JSON object keyed by limit name.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        for l in Limit::ALL {
            m.insert(l.as_str().into(), Value::from(self.get(l)));
        }
        Value::Object(m)
    }
}

/// A receipt counter (§6.2), in the order the receipt example prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Counter {
    /// Sessions the subject opened in the window, on any transport.
    ConnOpen,
    /// Requests.
    Req,
    /// Events.
    EventsIn,
    /// Bytes in.
    BytesIn,
    /// Bytes out.
    BytesOut,
    /// Blob bytes.
    BlobBytes,
    /// Errors.
    Errors,
    /// Duplicates sent: the numerator of `dup_ratio`, which has no limit.
    DupsSent,
    /// Reconciliation ranges.
    SyncRanges,
}

/// The number of receipt counters.
pub const COUNTER_COUNT: usize = 9;

impl Counter {
    /// Every counter, in the §6.2 example's order.
    pub const ALL: [Counter; COUNTER_COUNT] = [
        Counter::ConnOpen,
        Counter::Req,
        Counter::EventsIn,
        Counter::BytesIn,
        Counter::BytesOut,
        Counter::BlobBytes,
        Counter::Errors,
        Counter::DupsSent,
        Counter::SyncRanges,
    ];

    /// The counter's name in a receipt.
    pub const fn as_str(self) -> &'static str {
        match self {
            Counter::ConnOpen => "conn_open",
            Counter::Req => "req",
            Counter::EventsIn => "events_in",
            Counter::BytesIn => "bytes_in",
            Counter::BytesOut => "bytes_out",
            Counter::BlobBytes => "blob_bytes",
            Counter::Errors => "errors",
            Counter::DupsSent => "dups_sent",
            Counter::SyncRanges => "sync_ranges",
        }
    }

    /// Parses a counter name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// One window's counters: a receipt's claim, or the issuer's measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counters(pub [u64; COUNTER_COUNT]);

impl Counters {
    /// Every counter zero: the empty claim active silence is evaluated against (§6.2).
    pub const ZERO: Counters = Counters([0; COUNTER_COUNT]);

    /// The value of one counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Sets one counter.
    pub fn set(&mut self, c: Counter, v: u64) {
        self.0[c as usize] = v;
    }

    /// The counter a limit is priced against.
    pub fn of(&self, limit: Limit) -> u64 {
        self.get(limit.counter())
    }

    /// Whether every counter is zero: a window in which nothing moved.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&v| v == 0)
    }

    /// Whether no counter is below the same counter of `earlier` (cumulative counters only grow).
    pub fn dominates(&self, earlier: &Counters) -> bool {
        self.0.iter().zip(earlier.0.iter()).all(|(a, b)| a >= b)
    }

    /// The counters as the receipt's `counters` object.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        for c in Counter::ALL {
            m.insert(c.as_str().into(), Value::from(self.get(c)));
        }
        Value::Object(m)
    }

    /// Reads a `counters` object: exactly the nine counters, each a non-negative integer.
    pub fn from_value(v: &Value) -> Result<Self, CountersError> {
        let m = v.as_object().ok_or(CountersError::NotAnObject)?;
        let mut out = Counters::ZERO;
        let mut seen = [false; COUNTER_COUNT];
        for (k, val) in m {
            let c = Counter::parse(k).ok_or(CountersError::Unknown)?;
            out.set(c, val.as_u64().ok_or(CountersError::NotAnInteger)?);
            seen[c as usize] = true;
        }
        if seen.iter().all(|&s| s) {
            Ok(out)
        } else {
            Err(CountersError::Missing)
        }
    }
}

/// Why a `counters` object was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountersError {
    /// Not a JSON object.
    NotAnObject,
    /// A key that is not one of the nine counters.
    Unknown,
    /// A value that is not a non-negative integer (counters are integers, §6.2).
    NotAnInteger,
    /// One of the nine counters is absent.
    Missing,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_ceiling_table_is_the_spec_table() {
        // §6.6, cell by cell.
        let want: [(&str, [u64; 4]); 8] = [
            ("conn_rate", [4, 12, 48, 192]),
            ("req", [60, 600, 2400, 9600]),
            ("events_in", [300, 3000, 12000, 48000]),
            ("bytes_in", [3355443, 33554432, 134217728, 536870912]),
            ("bytes_out", [26843545, 268435456, 1073741824, 4294967296]),
            ("blob_bytes", [1677721, 16777216, 67108864, 268435456]),
            ("sync_ranges", [100, 400, 1600, 6400]),
            ("errors", [4, 40, 160, 640]),
        ];
        for (name, row) in want {
            let l = Limit::parse(name).unwrap();
            for (i, t) in Tier::ALL.into_iter().enumerate() {
                assert_eq!(ceiling(t, l), row[i], "{name} at {}", t.as_str());
            }
        }
        assert_eq!(Limit::parse("conn_max"), None, "advisory, never priced");
        assert_eq!(Limit::parse("sub_max"), None, "advisory, never priced");
    }

    #[test]
    fn tier_weights() {
        let w: [u64; 4] = Tier::ALL.map(Tier::weight_milli);
        assert_eq!(w, [0, 250, 600, 1000]);
        assert_eq!(Tier::parse("anchor"), Some(Tier::Anchor));
        assert_eq!(Tier::parse("revoked"), None);
    }

    #[test]
    fn opening_limits_volume_at_the_fraction_structural_at_the_ceiling() {
        for t in Tier::ALL {
            for l in Limit::ALL {
                let c = ceiling(t, l);
                if l.is_structural() {
                    assert_eq!(opening(t, l), c);
                } else {
                    assert_eq!(opening(t, l), c / 4, "{}", l.as_str());
                    assert!(opening(t, l) < c, "a grant opens below the ceiling");
                }
            }
        }
        assert_eq!(opening(Tier::Probation, Limit::BytesIn), 838860);
        assert_eq!(opening(Tier::Anchor, Limit::BytesOut), 1073741824);
    }

    #[test]
    fn conn_rate_is_priced_against_conn_open() {
        assert_eq!(Limit::ConnRate.counter(), Counter::ConnOpen);
        for l in Limit::ALL.into_iter().skip(1) {
            assert_eq!(l.counter().as_str(), l.as_str());
        }
    }

    #[test]
    fn counters_read_exactly_the_nine_integers() {
        let v = json!({"conn_open": 2, "req": 141, "events_in": 802, "bytes_in": 2216041,
            "bytes_out": 19883, "blob_bytes": 0, "errors": 1, "dups_sent": 44, "sync_ranges": 61});
        let c = Counters::from_value(&v).unwrap();
        assert_eq!(c.get(Counter::BytesIn), 2216041);
        assert_eq!(c.to_value(), v);
        let mut extra = v.clone();
        extra["conn_max"] = json!(1);
        assert_eq!(Counters::from_value(&extra), Err(CountersError::Unknown));
        let mut missing = v.clone();
        missing.as_object_mut().unwrap().remove("errors");
        assert_eq!(Counters::from_value(&missing), Err(CountersError::Missing));
        for bad in [json!(-1), json!(1.5), json!("1"), json!(null)] {
            let mut b = v.clone();
            b["req"] = bad;
            assert_eq!(Counters::from_value(&b), Err(CountersError::NotAnInteger));
        }
        assert_eq!(
            Counters::from_value(&json!([])),
            Err(CountersError::NotAnObject)
        );
    }
}
