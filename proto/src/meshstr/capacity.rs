//! The node's own ceiling (meshstr §6.4): pressure against the operator's declared total, the
//! capacity ladder with its release, and the shed floor.
//!
//! A grant bounds one peer; nothing bounds the node. The total is the operator's number and has no
//! default: with none declared a node measures its pressure, reports it and sheds nothing.

use super::limits::{COUNTER_COUNT, Counter, Counters, Limit, Tier, ceiling};

/// A ratio `aggregate / total`, held exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressure {
    num: u128,
    den: u128,
}

impl Pressure {
    /// `aggregate / total` (`total` zero: unbounded when anything moved).
    pub fn of(aggregate: u64, total: u64) -> Self {
        Pressure {
            num: u128::from(aggregate),
            den: u128::from(total),
        }
    }

    /// Whether the pressure is at least `hundredths / 100`.
    pub fn at_least(self, hundredths: u64) -> bool {
        if self.den == 0 {
            return self.num > 0 || hundredths == 0;
        }
        self.num.saturating_mul(100) >= u128::from(hundredths).saturating_mul(self.den)
    }

    /// The pressure in thousandths, rounded down (for reports to the operator; never compared).
    pub fn milli(self) -> u64 {
        if self.den == 0 {
            return if self.num == 0 { 0 } else { u64::MAX };
        }
        u64::try_from(self.num.saturating_mul(1000) / self.den).unwrap_or(u64::MAX)
    }

    fn greater(self, other: Pressure) -> bool {
        // num/den > other.num/other.den, with den 0 as infinity.
        match (self.den, other.den) {
            (0, _) => self.num > 0 && (other.den != 0 || other.num == 0),
            (_, 0) => false,
            _ => self.num * other.den > other.num * self.den,
        }
    }
}

/// The operator's declared totals per counter per window; a counter with no total is not priced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeclaredTotal(pub [Option<u64>; COUNTER_COUNT]);

/// `pressure = max over counters of (window aggregate over all peers / declared total)`, or `None`
/// where the node declared no total at all.
pub fn pressure(aggregate: &Counters, total: &DeclaredTotal) -> Option<Pressure> {
    let mut worst: Option<Pressure> = None;
    for c in Counter::ALL {
        if let Some(t) = total.0[c as usize] {
            let p = Pressure::of(aggregate.get(c), t);
            if worst.is_none_or(|w| p.greater(w)) {
                worst = Some(p);
            }
        }
    }
    worst
}

/// A rung of the capacity ladder (§6.4), lowest first; each includes those below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rung {
    /// No rung: the node sheds nothing.
    None,
    /// 0.75: a new proposal is declined `CAPACITY_EXCEEDED`; peerings held are untouched.
    RefusePeerings,
    /// 0.85: shards held only through the mesh stop being claimed; published claims withdrawn.
    NarrowScope,
    /// 0.95: every live grant is reduced, `cause: capacity`.
    AmendDown,
    /// 1.00: no pull is opened; receipts still flow.
    LeafBehaviour,
}

impl Rung {
    /// The rung's name as §6.4 prints it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rung::None => "none",
            Rung::RefusePeerings => "refuse_peerings",
            Rung::NarrowScope => "narrow_scope",
            Rung::AmendDown => "amend_down",
            Rung::LeafBehaviour => "leaf_behaviour",
        }
    }

    /// The pressure, in hundredths, at which the rung engages.
    pub const fn threshold_hundredths(self) -> u64 {
        match self {
            Rung::None => 0,
            Rung::RefusePeerings => 75,
            Rung::NarrowScope => 85,
            Rung::AmendDown => 95,
            Rung::LeafBehaviour => 100,
        }
    }

    /// The highest rung `p` reaches.
    pub fn reached_by(p: Pressure) -> Rung {
        [
            Rung::LeafBehaviour,
            Rung::AmendDown,
            Rung::NarrowScope,
            Rung::RefusePeerings,
        ]
        .into_iter()
        .find(|r| p.at_least(r.threshold_hundredths()))
        .unwrap_or(Rung::None)
    }
}

/// The problem code a proposal declined at the `refuse_peerings` rung carries (§6.4).
pub const DECLINE_CODE: &str = "CAPACITY_EXCEEDED";

/// Every rung is released together when pressure falls below 0.60.
pub const RELEASE_HUNDREDTHS: u64 = 60;

/// The ladder's state: the highest rung engaged since the last release.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ladder {
    rung: Option<Rung>,
}

impl Ladder {
    /// The rung engaged now.
    pub fn rung(&self) -> Rung {
        self.rung.unwrap_or(Rung::None)
    }

    /// Takes a window's pressure (`None`: no declared total, so nothing is ever shed). Rungs
    /// engage as pressure reaches them and stay engaged until it falls below
    /// [`RELEASE_HUNDREDTHS`], when every rung is released together. Returns the new rung.
    pub fn observe(&mut self, p: Option<Pressure>) -> Rung {
        let next = match p {
            None => Rung::None,
            Some(p) if !p.at_least(RELEASE_HUNDREDTHS) => Rung::None,
            Some(p) => self.rung().max(Rung::reached_by(p)),
        };
        self.rung = Some(next);
        next
    }

    /// Whether a new peering proposal is declined `CAPACITY_EXCEEDED` now.
    pub fn refuses_peerings(&self) -> bool {
        self.rung() >= Rung::RefusePeerings
    }
}

/// The shed floor (§6.4; its fraction is not in the text, docs/decisions.md): one half of the
/// probation ceiling, as `(numerator, denominator)`. Not the ceiling, which is where a peering
/// opens; not zero, which is S3.
pub const SHED_FLOOR_FRACTION: (u64, u64) = (1, 2);

/// How much `amend_down` takes from a live grant (§6.4; not in the text, docs/decisions.md): the
/// limit is halved, as `(numerator, denominator)`, floored at the shed floor.
pub const AMEND_DOWN_FRACTION: (u64, u64) = (1, 2);

/// The shed floor of `limit`: [`SHED_FLOOR_FRACTION`] of the probation ceiling, at least 1.
pub fn shed_floor(limit: Limit) -> u64 {
    let c = ceiling(Tier::Probation, limit);
    (c * SHED_FLOOR_FRACTION.0 / SHED_FLOOR_FRACTION.1).max(1)
}

/// `amend_down` of one limit: reduced by [`AMEND_DOWN_FRACTION`], floored at [`shed_floor`], and
/// never raised. The tier is untouched: a shed makes a peer smaller and never a stranger.
pub fn amend_down(limit: Limit, value: u64) -> u64 {
    let reduced = (u128::from(value) * u128::from(AMEND_DOWN_FRACTION.0)
        / u128::from(AMEND_DOWN_FRACTION.1)) as u64;
    value.min(reduced.max(shed_floor(limit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: u64) -> Counters {
        let mut c = Counters::ZERO;
        c.set(Counter::EventsIn, n);
        c
    }

    fn events_total(n: u64) -> DeclaredTotal {
        let mut t = DeclaredTotal::default();
        t.0[Counter::EventsIn as usize] = Some(n);
        t
    }

    #[test]
    fn twenty_anchor_grants_are_960000_events_an_hour() {
        let per_grant = ceiling(Tier::Anchor, Limit::EventsIn);
        assert_eq!(per_grant * 20, 960_000);
        let p = pressure(&events(per_grant * 20), &events_total(1_000_000)).unwrap();
        assert_eq!(p.milli(), 960);
        assert_eq!(Rung::reached_by(p), Rung::AmendDown);
    }

    #[test]
    fn no_declared_total_measures_and_sheds_nothing() {
        assert_eq!(pressure(&events(u64::MAX), &DeclaredTotal::default()), None);
        let mut l = Ladder::default();
        assert_eq!(l.observe(None), Rung::None);
        assert!(!l.refuses_peerings());
    }

    #[test]
    fn pressure_is_the_worst_counter() {
        let mut t = events_total(1000);
        t.0[Counter::BytesIn as usize] = Some(100);
        let mut a = events(500);
        a.set(Counter::BytesIn, 90);
        assert_eq!(pressure(&a, &t).unwrap().milli(), 900);
    }

    #[test]
    fn rungs_engage_at_their_thresholds() {
        for (agg, want) in [
            (749, Rung::None),
            (750, Rung::RefusePeerings),
            (849, Rung::RefusePeerings),
            (850, Rung::NarrowScope),
            (950, Rung::AmendDown),
            (999, Rung::AmendDown),
            (1000, Rung::LeafBehaviour),
            (5000, Rung::LeafBehaviour),
        ] {
            assert_eq!(Rung::reached_by(Pressure::of(agg, 1000)), want, "{agg}");
        }
    }

    #[test]
    fn release_is_every_rung_together_below_sixty_percent() {
        let mut l = Ladder::default();
        assert_eq!(
            l.observe(Some(Pressure::of(1000, 1000))),
            Rung::LeafBehaviour
        );
        // Falling through the rungs releases none of them.
        for agg in [990, 900, 800, 700, 600] {
            assert_eq!(
                l.observe(Some(Pressure::of(agg, 1000))),
                Rung::LeafBehaviour
            );
        }
        assert_eq!(l.observe(Some(Pressure::of(599, 1000))), Rung::None);
        assert!(!l.refuses_peerings());
        assert_eq!(
            l.observe(Some(Pressure::of(760, 1000))),
            Rung::RefusePeerings
        );
        assert!(l.refuses_peerings());
    }

    #[test]
    fn amend_down_halves_to_the_shed_floor_and_never_to_zero() {
        assert_eq!(shed_floor(Limit::EventsIn), 150);
        assert_eq!(shed_floor(Limit::ConnRate), 2);
        assert_eq!(amend_down(Limit::EventsIn, 48000), 24000);
        assert_eq!(amend_down(Limit::EventsIn, 200), 150);
        assert_eq!(amend_down(Limit::EventsIn, 100), 100, "never raised");
        let mut v = 48000;
        for _ in 0..100 {
            v = amend_down(Limit::EventsIn, v);
        }
        assert_eq!(v, 150);
        assert!(shed_floor(Limit::EventsIn) < ceiling(Tier::Probation, Limit::EventsIn));
    }
}
