//! Window arithmetic (meshstr §6.2, §6.3, §6.5, §7): `overrun`, `divergence`, `class()`, the
//! window's severity, active silence, and the AIMD update with its remedies and the tier clamp.
//!
//! All of it is exact integer arithmetic. Every formula of §6.3 compares a ratio of counts to a
//! decimal threshold (0.1, 1.0, 4.0, 0.15), so each comparison is cross-multiplied in `u128`
//! rather than divided in floating point: `overrun ≥ 0.1` is `10·measured ≥ 11·limit`, and no two
//! implementations can round one window differently. Where a limit is scaled (× 0.90, × 0.50,
//! × 0.25, the additive step) the result is rounded down, once, at the end.
//!
//! Units: `overrun` is `measured/limit − 1`, while a grant's `schedule` ratio *r* is a ratio of
//! the limit itself (1.1 means 110 %), an overrun threshold of *r* − 1 (§6.5). [`Overrun`] and
//! [`ScheduleRatio`] are separate types so one cannot be passed for the other.

use super::limits::{
    Counter, Counters, LIMIT_COUNT, Limit, Limits, Tier, ceiling, divergence_floor, opening,
    tier_base,
};

/// A severity (§7). `S0` is drift (clean); S4 is never reached by arithmetic (§6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Drift: within the thresholds, receipts agree.
    S0,
    /// Overrun, accurately reported.
    S1,
    /// Misreport.
    S2,
    /// Abuse.
    S3,
    /// Malice: found structurally, never by [`class`].
    S4,
}

impl Severity {
    /// `S0` … `S4`, as a report's `outcome` writes them.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::S0 => "S0",
            Severity::S1 => "S1",
            Severity::S2 => "S2",
            Severity::S3 => "S3",
            Severity::S4 => "S4",
        }
    }

    /// Parses `S0` … `S4`.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::S0, Self::S1, Self::S2, Self::S3, Self::S4]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// The worse of two severities (`worse()` of §6.5).
    pub fn worse(self, other: Severity) -> Severity {
        self.max(other)
    }
}

/// `overrun = max(0, measured/limit − 1)`, held as the exact ratio `measured/limit`.
///
/// A limit of zero (an S3 suspension) makes any traffic an unbounded overrun and no traffic an
/// overrun of zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun {
    num: u128,
    den: u128,
}

impl Overrun {
    /// The overrun of `measured` against `limit`.
    pub fn of(measured: u64, limit: u64) -> Self {
        Self::ratio(u128::from(measured), u128::from(limit))
    }

    /// The overrun of the ratio `num/den` (`den` zero: unbounded when `num` is not zero).
    pub const fn ratio(num: u128, den: u128) -> Self {
        Overrun { num, den }
    }

    /// `dup_ratio`'s overrun, `dups_sent / events_in / 0.15 − 1` (§6.5): the ratio
    /// `dups·20 / (events·3)`.
    pub fn dup_ratio(dups_sent: u64, events_in: u64) -> Self {
        Self::ratio(
            u128::from(dups_sent) * 20,
            u128::from(events_in) * u128::from(DUP_RATIO_CEILING_MILLI) * 20 / 1000,
        )
    }

    /// Whether `overrun ≥ threshold_milli / 1000`.
    pub fn at_least(self, threshold_milli: u64) -> bool {
        if self.den == 0 {
            return self.num > 0 || threshold_milli == 0;
        }
        // measured/limit − 1 ≥ t/1000  ⇔  1000·measured ≥ (1000 + t)·limit
        let lhs = self.num.saturating_mul(1000);
        let rhs = (1000 + u128::from(threshold_milli)).saturating_mul(self.den);
        lhs >= rhs
    }
}

/// `divergence = |measured − claimed| / max(measured, floor)`, held as an exact ratio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divergence {
    num: u128,
    den: u128,
}

impl Divergence {
    /// No divergence term (`dup_ratio`: the receiver alone knows what it held).
    pub const NONE: Divergence = Divergence { num: 0, den: 1 };

    /// The divergence of a claim from a measurement, against `floor`.
    pub fn of(measured: u64, claimed: u64, floor: u64) -> Self {
        Divergence {
            num: u128::from(measured.abs_diff(claimed)),
            den: u128::from(measured.max(floor)),
        }
    }

    /// Whether `divergence > threshold_milli / 1000` (strictly).
    pub fn exceeds(self, threshold_milli: u64) -> bool {
        if self.den == 0 {
            return self.num > 0;
        }
        self.num.saturating_mul(1000) > u128::from(threshold_milli).saturating_mul(self.den)
    }
}

/// `class()`'s S3 threshold: overrun ≥ 4.0, in thousandths.
pub const S3_OVERRUN_MILLI: u64 = 4000;
/// `class()`'s S2 threshold: overrun ≥ 1.0, in thousandths.
pub const S2_OVERRUN_MILLI: u64 = 1000;
/// `class()`'s S1 threshold: overrun ≥ 0.1, in thousandths.
pub const S1_OVERRUN_MILLI: u64 = 100;
/// Divergence above 0.1 floors the class at S2, in thousandths.
pub const DIVERGENCE_MILLI: u64 = 100;
/// `dup_ratio`'s ceiling, 0.15 at every tier, in thousandths.
pub const DUP_RATIO_CEILING_MILLI: u64 = 150;

/// `class(overrun, divergence)` of §6.5, evaluated per limit.
pub fn class(overrun: Overrun, divergence: Divergence) -> Severity {
    let by_overrun = if overrun.at_least(S3_OVERRUN_MILLI) {
        Severity::S3
    } else if overrun.at_least(S2_OVERRUN_MILLI) {
        Severity::S2
    } else if overrun.at_least(S1_OVERRUN_MILLI) {
        Severity::S1
    } else {
        Severity::S0
    };
    if divergence.exceeds(DIVERGENCE_MILLI) {
        by_overrun.worse(Severity::S2)
    } else {
        by_overrun
    }
}

/// A grant's `schedule` ratio *r*: a ratio *of the limit* (1.1 means 110 %), in thousandths.
///
/// It is an overrun threshold of *r* − 1, not *r* (§6.5's units warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleRatio(pub u64);

impl ScheduleRatio {
    /// The overrun threshold this ratio means, in thousandths (*r* − 1, zero below 1.0).
    pub const fn overrun_threshold_milli(self) -> u64 {
        self.0.saturating_sub(1000)
    }

    /// Whether `measured` has reached this ratio of `limit`.
    pub fn reached(self, measured: u64, limit: u64) -> bool {
        Overrun::of(measured, limit).at_least(self.overrun_threshold_milli())
    }
}

/// One window's evaluation (§6.3, §6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The window's severity: the most severe across its limits, `dup_ratio` and active silence.
    pub severity: Severity,
    /// `class()` of each limit, in [`Limit::ALL`] order.
    pub per_limit: [Severity; LIMIT_COUNT],
    /// `class()` of `dup_ratio`, or `None` where `events_in` was under the divergence floor.
    pub dup_ratio: Option<Severity>,
    /// Measured traffic with no receipt at all (§6.2): S2 at least.
    pub active_silence: bool,
}

/// Evaluates a window at close (§6.3): `limits` are the grant's, `measured` the issuer's own
/// counts, `claimed` the counters of the most recent receipt for the window (`None`: no receipt).
///
/// With no receipt and measured traffic (active silence) the window is S2 at least, and the
/// traffic is still evaluated against the limits and against the empty claim, the window taking
/// the worse: silence is a floor, never a ceiling. With no receipt and nothing measured the
/// window is clean.
pub fn evaluate(limits: &Limits, measured: &Counters, claimed: Option<&Counters>) -> Evaluation {
    let claim = claimed.copied().unwrap_or(Counters::ZERO);
    let per_limit = Limit::ALL.map(|l| {
        let m = measured.of(l);
        class(
            Overrun::of(m, limits.get(l)),
            Divergence::of(m, claim.of(l), divergence_floor(l)),
        )
    });
    let mut severity = per_limit.iter().copied().max().unwrap_or(Severity::S0);
    let events = measured.get(Counter::EventsIn);
    let dup_ratio = (events >= divergence_floor(Limit::EventsIn)).then(|| {
        class(
            Overrun::dup_ratio(measured.get(Counter::DupsSent), events),
            Divergence::NONE,
        )
    });
    if let Some(d) = dup_ratio {
        severity = severity.worse(d);
    }
    let active_silence = claimed.is_none() && !measured.is_zero();
    if active_silence {
        severity = severity.worse(Severity::S2);
    }
    Evaluation {
        severity,
        per_limit,
        dup_ratio,
        active_silence,
    }
}

/// `decay_idle_windows` (§6.3; its value is not in the text, docs/decisions.md): after this many
/// windows in a row that measured nothing at all, the whole grant decays.
pub const DECAY_IDLE_WINDOWS: u32 = 6;

/// How long S3 holds every limit at zero (§6.3: "0 for 24h"), in seconds.
pub const S3_SUSPENSION_SECS: u64 = 24 * 60 * 60;

/// Why a grant is amended (`peering/1.0/amend`'s `cause`, §6.3, §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmendCause {
    /// A remedy for a finding (S1–S3): the only cause that is a finding.
    Remedy,
    /// The node's own capacity ladder (§6.4).
    Capacity,
    /// The operator's decision.
    Operator,
    /// Decay by disuse (§6.3).
    Disuse,
}

impl AmendCause {
    /// The `cause` value.
    pub const fn as_str(self) -> &'static str {
        match self {
            AmendCause::Remedy => "remedy",
            AmendCause::Capacity => "capacity",
            AmendCause::Operator => "operator",
            AmendCause::Disuse => "disuse",
        }
    }

    /// Whether an amend with this cause is a finding (§6.4: only `remedy`).
    pub const fn is_finding(self) -> bool {
        matches!(self, AmendCause::Remedy)
    }
}

/// What the issuer holds of one grant between windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantState {
    /// The tier the grant names.
    pub tier: Tier,
    /// The current limits.
    pub limits: Limits,
    /// S3: every limit is zero until this Unix second, then the grant resumes at probation.
    pub suspended_until: Option<u64>,
    /// Windows in a row that measured nothing at all.
    pub idle_windows: u32,
    /// S4: revoked and deleted; nothing brings it back.
    pub revoked: bool,
}

impl GrantState {
    /// A fresh grant at `tier`, at its opening limits (§6.3).
    pub fn open(tier: Tier) -> Self {
        GrantState {
            tier,
            limits: Limits::opening(tier),
            suspended_until: None,
            idle_windows: 0,
            revoked: false,
        }
    }

    /// Whether every limit is within the ceiling of the tier the grant names (revoked: all zero).
    pub fn within_ceiling(&self) -> bool {
        if self.revoked {
            self.limits == Limits::ZERO
        } else {
            self.limits.within(self.tier)
        }
    }

    /// Ends an S3 suspension whose 24 hours are over: the grant resumes at probation's opening
    /// limits. Returns whether it did.
    pub fn resume_if_due(&mut self, now_secs: u64) -> bool {
        match self.suspended_until {
            Some(until) if until <= now_secs && !self.revoked => {
                self.suspended_until = None;
                self.tier = Tier::Probation;
                self.limits = Limits::opening(Tier::Probation);
                true
            }
            _ => false,
        }
    }
}

/// The result of [`update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    /// The grant after the window.
    pub state: GrantState,
    /// The amend the change is announced with, if any limit or the tier changed for a cause.
    pub cause: Option<AmendCause>,
}

/// `limit × num / den`, rounded down.
fn scale(limit: u64, num: u64, den: u64) -> u64 {
    (u128::from(limit) * u128::from(num) / u128::from(den)) as u64
}

/// The AIMD update of §6.3 at window close, for a window evaluated as `eval`.
///
/// `measured` is the issuer's measurement, or `None` when the evaluation offers no counters (no
/// measurement is not a measurement of zero: the floor step, and no decay). `now_secs` is the
/// close, which starts an S3 suspension. After every branch each limit is clamped to the ceiling
/// of the tier the branch returns.
pub fn update(
    state: &GrantState,
    severity: Severity,
    measured: Option<&Counters>,
    now_secs: u64,
) -> Update {
    let mut s = *state;
    if s.revoked {
        return Update {
            state: s,
            cause: None,
        };
    }
    s.resume_if_due(now_secs);
    let mut cause = None;
    match severity {
        Severity::S0 if s.suspended_until.is_some() => {
            // Suspended: limits stay at zero until the 24 hours are over.
        }
        Severity::S0 => match measured {
            None => {
                s.idle_windows = 0;
                for l in Limit::ALL {
                    let lim = s.limits.get(l);
                    s.limits.set(l, lim.saturating_add(floor_step(s.tier, l)));
                }
            }
            Some(m) if m.is_zero() => {
                s.idle_windows = s.idle_windows.saturating_add(1);
                if s.idle_windows >= DECAY_IDLE_WINDOWS && decay_all(&mut s) {
                    cause = Some(AmendCause::Disuse);
                }
            }
            Some(m) => {
                s.idle_windows = 0;
                for l in Limit::ALL {
                    let lim = s.limits.get(l);
                    let used = m.of(l);
                    let open = opening(s.tier, l);
                    if used == 0 {
                        // Growth is priced in work: an unused limit never grows. Above its
                        // opening limit it decays; at or below, it stays (the literal `else`
                        // would grow it by the floor step and decay it back the next window).
                        if lim > open {
                            s.limits.set(l, open.max(scale(lim, 9, 10)));
                            cause = Some(AmendCause::Disuse);
                        }
                    } else {
                        s.limits
                            .set(l, lim.saturating_add(step(s.tier, l, used, lim)));
                    }
                }
            }
        },
        Severity::S1 => {
            s.idle_windows = 0;
            for l in Limit::ALL {
                let lim = s.limits.get(l);
                let reduced = ceiling(Tier::Probation, l).max(scale(lim, 1, 2));
                // A remedy never raises a limit a grant set below the probation ceiling.
                s.limits.set(l, lim.min(reduced));
            }
            cause = Some(AmendCause::Remedy);
        }
        Severity::S2 => {
            s.idle_windows = 0;
            for l in Limit::ALL {
                let lim = s.limits.get(l);
                let reduced = ceiling(Tier::Probation, l).max(scale(lim, 1, 4));
                s.limits.set(l, lim.min(reduced));
            }
            s.tier = Tier::Probation;
            cause = Some(AmendCause::Remedy);
        }
        Severity::S3 => {
            s.idle_windows = 0;
            s.limits = Limits::ZERO;
            s.tier = Tier::Probation;
            s.suspended_until = Some(now_secs.saturating_add(S3_SUSPENSION_SECS));
            cause = Some(AmendCause::Remedy);
        }
        Severity::S4 => {
            s.limits = Limits::ZERO;
            s.tier = Tier::Probation;
            s.suspended_until = None;
            s.revoked = true;
            cause = None;
        }
    }
    // Then, always: the ceiling of the tier the branch returned.
    if !s.revoked {
        for l in Limit::ALL {
            let c = ceiling(s.tier, l);
            if s.limits.get(l) > c {
                s.limits.set(l, c);
            }
        }
    }
    Update { state: s, cause }
}

/// The floor step of the additive increase: `tier_base × 0.02`.
fn floor_step(tier: Tier, limit: Limit) -> u64 {
    scale(tier_base(tier, limit), 2, 100)
}

/// The clean step `tier_base × max(0.02, 0.10 × strain)`, `strain = min(1, used/limit)`.
fn step(tier: Tier, limit: Limit, used: u64, lim: u64) -> u64 {
    let base = tier_base(tier, limit);
    let scaled = if lim == 0 {
        if used > 0 { scale(base, 1, 10) } else { 0 }
    } else {
        // base × 0.10 × min(used, lim) / lim
        (u128::from(base) * u128::from(used.min(lim)) / (10 * u128::from(lim))) as u64
    };
    floor_step(tier, limit).max(scaled)
}

/// Decays every limit above its opening limit to `max(open, limit × 0.90)`; whether any moved.
fn decay_all(s: &mut GrantState) -> bool {
    let mut moved = false;
    for l in Limit::ALL {
        let lim = s.limits.get(l);
        let open = opening(s.tier, l);
        if lim > open {
            s.limits.set(l, open.max(scale(lim, 9, 10)));
            moved = true;
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    fn counters(f: impl Fn(Counter) -> u64) -> Counters {
        Counters(Counter::ALL.map(f))
    }

    #[test]
    fn class_thresholds_by_overrun() {
        let lim = 1000;
        for (measured, want) in [
            (0, Severity::S0),
            (1099, Severity::S0),
            (1100, Severity::S1), // overrun 0.1
            (1999, Severity::S1),
            (2000, Severity::S2), // overrun 1.0
            (4999, Severity::S2),
            (5000, Severity::S3), // overrun 4.0
            (u64::MAX, Severity::S3),
        ] {
            assert_eq!(
                class(Overrun::of(measured, lim), Divergence::NONE),
                want,
                "{measured}"
            );
        }
    }

    #[test]
    fn divergence_is_a_floor_never_a_ceiling() {
        let div = Divergence::of(1000, 800, 300); // 0.2
        assert!(div.exceeds(DIVERGENCE_MILLI));
        assert_eq!(class(Overrun::of(0, 1000), div), Severity::S2);
        assert_eq!(class(Overrun::of(1100, 1000), div), Severity::S2);
        assert_eq!(class(Overrun::of(5000, 1000), div), Severity::S3);
        // Exactly 0.1 is not above 0.1.
        assert!(!Divergence::of(1000, 900, 300).exceeds(DIVERGENCE_MILLI));
        // Under the floor the denominator is the floor: 20 off at 50 measured is 20/300.
        assert!(!Divergence::of(50, 30, 300).exceeds(DIVERGENCE_MILLI));
        assert!(Divergence::of(50, 0, 300).exceeds(DIVERGENCE_MILLI));
    }

    #[test]
    fn a_zero_limit_makes_any_traffic_s3() {
        assert_eq!(class(Overrun::of(1, 0), Divergence::NONE), Severity::S3);
        assert_eq!(class(Overrun::of(0, 0), Divergence::NONE), Severity::S0);
    }

    #[test]
    fn schedule_ratio_is_not_an_overrun() {
        // The units trap of §6.5: a schedule of 1.1 is 110 % of the limit, an overrun of 0.1.
        let r = ScheduleRatio(1100);
        assert_eq!(r.overrun_threshold_milli(), S1_OVERRUN_MILLI);
        assert!(r.reached(110, 100));
        assert!(!r.reached(109, 100));
        // Read as an overrun threshold, 1.1 would let 2.09 × the limit through.
        assert!(!Overrun::of(209, 100).at_least(r.0));
        assert!(r.reached(209, 100));
        assert_eq!(ScheduleRatio(900).overrun_threshold_milli(), 0);
    }

    #[test]
    fn dup_ratio_is_class_of_the_ratio_over_fifteen_percent() {
        let lim = Limits::ceilings(Tier::Anchor);
        let mut m = Counters::ZERO;
        m.set(Counter::EventsIn, 1000);
        for (dups, want) in [
            (164, Severity::S0),
            (165, Severity::S1),
            (300, Severity::S2),
            (750, Severity::S3),
        ] {
            m.set(Counter::DupsSent, dups);
            let e = evaluate(&lim, &m, Some(&m));
            assert_eq!(e.dup_ratio, Some(want), "{dups}");
            assert_eq!(e.severity, want);
        }
        // Under the divergence floor (300 events) it is not evaluated at all.
        m.set(Counter::EventsIn, 299);
        m.set(Counter::DupsSent, 299);
        let e = evaluate(&lim, &m, Some(&m));
        assert_eq!(e.dup_ratio, None);
        assert_eq!(e.severity, Severity::S0);
    }

    #[test]
    fn active_silence_is_s2_and_still_takes_the_worse() {
        let lim = Limits::opening(Tier::Member);
        let mut m = Counters::ZERO;
        m.set(Counter::Req, 10);
        let e = evaluate(&lim, &m, None);
        assert!(e.active_silence);
        assert_eq!(e.severity, Severity::S2);
        // Overrunning and saying nothing is not cheaper than overrunning and saying so.
        m.set(Counter::Req, lim.get(Limit::Req) * 5);
        let silent = evaluate(&lim, &m, None);
        let honest = evaluate(&lim, &m, Some(&m));
        assert_eq!(honest.severity, Severity::S3);
        assert_eq!(silent.severity, Severity::S3);
        // Nothing moving and no receipt is a clean window.
        let e = evaluate(&lim, &Counters::ZERO, None);
        assert!(!e.active_silence);
        assert_eq!(e.severity, Severity::S0);
    }

    #[test]
    fn nothing_moving_after_the_last_receipt_is_clean() {
        let lim = Limits::opening(Tier::Member);
        let m = counters(|c| if c == Counter::DupsSent { 0 } else { 3 });
        assert_eq!(evaluate(&lim, &m, Some(&m)).severity, Severity::S0);
    }

    #[test]
    fn clean_growth_is_scaled_by_strain_with_a_floor() {
        let st = GrantState::open(Tier::Member);
        let lim = st.limits.get(Limit::EventsIn); // 750
        let base = ceiling(Tier::Member, Limit::EventsIn); // 3000
        let mut m = Counters::ZERO;
        m.set(Counter::EventsIn, lim); // strain 1 → +10 % of base
        let u = update(&st, Severity::S0, Some(&m), 0);
        assert_eq!(u.state.limits.get(Limit::EventsIn), lim + base / 10);
        m.set(Counter::EventsIn, 1); // strain tiny → floor 2 %
        let u = update(&st, Severity::S0, Some(&m), 0);
        assert_eq!(u.state.limits.get(Limit::EventsIn), lim + base * 2 / 100);
        // No measurement: the floor step everywhere, no decay.
        let u = update(&st, Severity::S0, None, 0);
        assert_eq!(u.state.limits.get(Limit::EventsIn), lim + 60);
        assert_eq!(u.cause, None);
    }

    #[test]
    fn decay_by_disuse_is_floored_at_the_opening_limits() {
        let mut st = GrantState::open(Tier::Member);
        st.limits
            .set(Limit::BytesIn, ceiling(Tier::Member, Limit::BytesIn));
        let mut m = Counters::ZERO;
        m.set(Counter::Req, 1); // the peering is active; bytes_in went unused
        let u = update(&st, Severity::S0, Some(&m), 0);
        assert_eq!(u.state.limits.get(Limit::BytesIn), 33554432 * 9 / 10);
        assert_eq!(u.cause, Some(AmendCause::Disuse));
        let mut s = u.state;
        for _ in 0..100 {
            s = update(&s, Severity::S0, Some(&m), 0).state;
        }
        assert_eq!(
            s.limits.get(Limit::BytesIn),
            opening(Tier::Member, Limit::BytesIn)
        );
    }

    #[test]
    fn idle_windows_decay_the_whole_grant_only_after_decay_idle_windows() {
        let mut st = GrantState::open(Tier::Trusted);
        st.limits = Limits::ceilings(Tier::Trusted);
        let before = st.limits;
        for i in 1..DECAY_IDLE_WINDOWS {
            let u = update(&st, Severity::S0, Some(&Counters::ZERO), 0);
            assert_eq!(u.state.limits, before, "window {i}");
            assert_eq!(u.cause, None);
            st = u.state;
        }
        let u = update(&st, Severity::S0, Some(&Counters::ZERO), 0);
        assert_eq!(u.cause, Some(AmendCause::Disuse));
        for l in Limit::ALL {
            let want = opening(Tier::Trusted, l).max(before.get(l) * 9 / 10);
            assert_eq!(u.state.limits.get(l), want, "{}", l.as_str());
        }
        // A window with no counters at all does not count as idle.
        let mut st2 = st;
        st2.idle_windows = DECAY_IDLE_WINDOWS - 1;
        assert_eq!(update(&st2, Severity::S0, None, 0).state.idle_windows, 0);
    }

    #[test]
    fn s1_halves_floored_at_probation_and_never_raises() {
        let mut st = GrantState::open(Tier::Anchor);
        st.limits = Limits::ceilings(Tier::Anchor);
        let u = update(&st, Severity::S1, None, 0);
        assert_eq!(u.cause, Some(AmendCause::Remedy));
        assert_eq!(u.state.tier, Tier::Anchor);
        assert_eq!(u.state.limits.get(Limit::Req), 4800);
        st.limits.set(Limit::Req, 100);
        assert_eq!(
            update(&st, Severity::S1, None, 0)
                .state
                .limits
                .get(Limit::Req),
            60
        );
        st.limits.set(Limit::Req, 10);
        assert_eq!(
            update(&st, Severity::S1, None, 0)
                .state
                .limits
                .get(Limit::Req),
            10
        );
    }

    #[test]
    fn s2_makes_a_peer_a_stranger_again() {
        let mut st = GrantState::open(Tier::Anchor);
        st.limits = Limits::ceilings(Tier::Anchor);
        let u = update(&st, Severity::S2, None, 0);
        assert_eq!(u.state.tier, Tier::Probation);
        // A quarter of the anchor ceiling is far above probation: the ceiling decides.
        assert_eq!(u.state.limits, Limits::ceilings(Tier::Probation));
    }

    #[test]
    fn s3_zeroes_for_a_day_then_resumes_at_probation() {
        let st = GrantState::open(Tier::Member);
        let u = update(&st, Severity::S3, None, 1_000);
        assert_eq!(u.state.limits, Limits::ZERO);
        assert_eq!(u.state.suspended_until, Some(1_000 + 86_400));
        // A clean window inside the day changes nothing.
        let v = update(&u.state, Severity::S0, Some(&Counters::ZERO), 50_000);
        assert_eq!(v.state.limits, Limits::ZERO);
        let mut s = v.state;
        assert!(!s.resume_if_due(87_399));
        assert!(s.resume_if_due(87_400));
        assert_eq!(s.tier, Tier::Probation);
        assert_eq!(s.limits, Limits::opening(Tier::Probation));
    }

    #[test]
    fn only_a_remedy_is_a_finding() {
        assert!(AmendCause::Remedy.is_finding());
        for c in [
            AmendCause::Capacity,
            AmendCause::Operator,
            AmendCause::Disuse,
        ] {
            assert!(!c.is_finding(), "{}", c.as_str());
        }
        // Only S1–S3 amend with `remedy`.
        let st = GrantState::open(Tier::Member);
        for (sev, want) in [
            (Severity::S0, None),
            (Severity::S1, Some(AmendCause::Remedy)),
            (Severity::S2, Some(AmendCause::Remedy)),
            (Severity::S3, Some(AmendCause::Remedy)),
        ] {
            assert_eq!(update(&st, sev, None, 0).cause, want);
        }
    }

    #[test]
    fn s4_revokes_for_good() {
        let st = GrantState::open(Tier::Trusted);
        let u = update(&st, Severity::S4, None, 0);
        assert!(u.state.revoked);
        assert_eq!(u.state.limits, Limits::ZERO);
        let mut m = Counters::ZERO;
        m.set(Counter::Req, 1);
        let v = update(&u.state, Severity::S0, Some(&m), 10_000_000);
        assert_eq!(v.state, u.state);
    }

    #[test]
    fn growth_stops_at_the_tier_ceiling() {
        let st = GrantState::open(Tier::Probation);
        let m = Counters([u64::MAX / 2; 9]);
        let mut s = st;
        for _ in 0..200 {
            s = update(&s, Severity::S0, Some(&m), 0).state;
        }
        assert_eq!(s.limits, Limits::ceilings(Tier::Probation));
    }

    fn random_counters(rng: &mut ChaCha20Rng, scale_to: &Limits) -> Counters {
        let mut c = Counters::ZERO;
        for l in Limit::ALL {
            let lim = scale_to.get(l).max(1);
            let v = match rng.next_u32() % 4 {
                0 => 0,
                1 => rng.next_u64() % (lim + 1),
                2 => rng.next_u64() % (lim * 6 + 1),
                _ => rng.next_u64(),
            };
            c.set(l.counter(), v);
        }
        c.set(
            Counter::DupsSent,
            rng.next_u64() % (c.get(Counter::EventsIn) + 1),
        );
        c
    }

    #[test]
    fn property_the_ceiling_clamp_holds_after_any_window_sequence() {
        let mut rng = ChaCha20Rng::seed_from_u64(38);
        for run in 0..300 {
            let tier = Tier::ALL[run % 4];
            let mut s = GrantState::open(tier);
            if run % 3 == 0 {
                s.limits = Limits::ceilings(tier);
            }
            let mut now = 0u64;
            for _ in 0..60 {
                now += 3600;
                let m = random_counters(&mut rng, &s.limits);
                let claimed = match rng.next_u32() % 3 {
                    0 => None,
                    1 => Some(m),
                    _ => Some(random_counters(&mut rng, &s.limits)),
                };
                let mut sev = evaluate(&s.limits, &m, claimed.as_ref()).severity;
                if rng.next_u32() % 50 == 0 {
                    sev = Severity::S4;
                }
                let measured = match rng.next_u32() % 5 {
                    0 => None,
                    1 => Some(Counters::ZERO),
                    _ => Some(m),
                };
                s = update(&s, sev, measured.as_ref(), now).state;
                assert!(s.within_ceiling(), "run {run}: {s:?}");
            }
        }
    }

    #[test]
    fn property_severity_is_monotonic_in_overrun_and_divergence() {
        let mut rng = ChaCha20Rng::seed_from_u64(6_5);
        for _ in 0..20_000 {
            let limit = rng.next_u64() % 10_000;
            let m1 = rng.next_u64() % 60_000;
            let m2 = m1 + rng.next_u64() % 60_000;
            let floor = 1 + rng.next_u64() % 500;
            let claimed = rng.next_u64() % 60_000;
            let d = Divergence::of(m1, claimed, floor);
            // More measured traffic against the same limit never lowers the class.
            assert!(class(Overrun::of(m1, limit), d) <= class(Overrun::of(m2, limit), d));
            // A larger divergence never lowers the class.
            let o = Overrun::of(m1, limit);
            let mut da = Divergence::of(m1, claimed, floor);
            let mut db = Divergence::of(m2, rng.next_u64() % 60_000, floor);
            if da.num * db.den > db.num * da.den {
                core::mem::swap(&mut da, &mut db);
            }
            assert!(class(o, da) <= class(o, db));
            assert!(class(o, Divergence::NONE) <= class(o, da));
            // And the window's severity is monotonic in each measured counter.
            let lim = Limits::opening(Tier::ALL[(rng.next_u32() % 4) as usize]);
            let a = random_counters(&mut rng, &lim);
            let mut b = a;
            let l = Limit::ALL[(rng.next_u32() % 8) as usize];
            b.set(
                l.counter(),
                a.of(l).saturating_add(rng.next_u64() % 100_000),
            );
            assert!(
                evaluate(&lim, &a, None).per_limit[l as usize]
                    <= evaluate(&lim, &b, None).per_limit[l as usize]
            );
        }
    }
}
