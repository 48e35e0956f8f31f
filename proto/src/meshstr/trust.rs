//! Trust aggregation (meshstr §6.6, §7.1): a reader's view of a subject, lowered by admissible
//! reports weighted by the tier the reader granted each reporter.
//!
//! Reports may only lower a view; a reporter the reader holds no grant to, or one at probation,
//! weighs zero; nobody imports anybody's bans. How much one report lowers a view is not in the
//! text: each severity's penalty is [`PENALTY_MILLI`], a named constant (docs/decisions.md).

use super::limits::Tier;
use super::window::Severity;

/// A view in thousandths: 1000 is the reader's own undiminished view, 0 the lowest.
pub type ViewMilli = u64;

/// How far one admissible report at full weight (an anchor reporter) lowers a view, in
/// thousandths, indexed by `S1`..`S4` (§7.1 leaves the amounts open; docs/decisions.md).
pub const PENALTY_MILLI: [u64; 4] = [100, 250, 500, 1000];

/// One admissible report as the reader sees it: its outcome, and the tier the reader itself
/// granted the reporter (`None`: the reader holds no grant to the reporter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeighedReport {
    /// The report's outcome.
    pub outcome: Severity,
    /// The reporter's tier from the reader's own grant, if it holds one.
    pub reporter_tier: Option<Tier>,
}

/// The weight of a reporter in thousandths: its tier's weight, or zero without a grant.
pub fn reporter_weight_milli(tier: Option<Tier>) -> u64 {
    tier.map_or(0, Tier::weight_milli)
}

/// The reader's view after the reports: `own` lowered by each report's penalty times its weight,
/// never below zero and never above `own` (an `S0` outcome is not a report and moves nothing).
pub fn aggregate(own: ViewMilli, reports: &[WeighedReport]) -> ViewMilli {
    let mut lowered: u64 = 0;
    for r in reports {
        let penalty = match r.outcome {
            Severity::S0 => 0,
            Severity::S1 => PENALTY_MILLI[0],
            Severity::S2 => PENALTY_MILLI[1],
            Severity::S3 => PENALTY_MILLI[2],
            Severity::S4 => PENALTY_MILLI[3],
        };
        lowered = lowered.saturating_add(penalty * reporter_weight_milli(r.reporter_tier) / 1000);
    }
    own.saturating_sub(lowered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(outcome: Severity, tier: Option<Tier>) -> WeighedReport {
        WeighedReport {
            outcome,
            reporter_tier: tier,
        }
    }

    #[test]
    fn no_grant_and_probation_weigh_zero() {
        assert_eq!(aggregate(1000, &[r(Severity::S4, None)]), 1000);
        assert_eq!(
            aggregate(1000, &[r(Severity::S4, Some(Tier::Probation))]),
            1000
        );
    }

    #[test]
    fn weighted_by_the_readers_own_tier_for_the_reporter() {
        assert_eq!(
            aggregate(1000, &[r(Severity::S2, Some(Tier::Member))]),
            1000 - 62
        );
        assert_eq!(
            aggregate(1000, &[r(Severity::S2, Some(Tier::Trusted))]),
            1000 - 150
        );
        assert_eq!(aggregate(1000, &[r(Severity::S2, Some(Tier::Anchor))]), 750);
    }

    #[test]
    fn reports_only_lower_a_view_and_never_below_zero() {
        let many: std::vec::Vec<_> = (0..1000)
            .map(|_| r(Severity::S4, Some(Tier::Anchor)))
            .collect();
        assert_eq!(aggregate(800, &many), 0);
        for own in [0, 1, 500, 1000] {
            for s in [Severity::S0, Severity::S1, Severity::S3] {
                for t in [None, Some(Tier::Anchor)] {
                    assert!(aggregate(own, &[r(s, t)]) <= own);
                }
            }
        }
    }
}
