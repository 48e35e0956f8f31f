//! meshstr's window arithmetic on arbitrary grants and counters: evaluation never panics and
//! never reaches S4, and after the AIMD update every limit is within the ceiling of the tier the
//! grant names, whatever the window held.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weft_proto::meshstr::limits::{Counters, Limits, Tier};
use weft_proto::meshstr::window::{self, GrantState, Severity};

#[derive(Arbitrary, Debug)]
struct Input {
    tier: u8,
    limits: [u64; 8],
    suspended_until: Option<u64>,
    idle_windows: u32,
    windows: Vec<([u64; 9], Option<[u64; 9]>, bool, u64)>,
}

fuzz_target!(|input: Input| {
    let tier = Tier::ALL[usize::from(input.tier % 4)];
    let mut limits = Limits(input.limits);
    // A grant as issued: within its tier's ceiling.
    for (l, c) in limits.0.iter_mut().zip(Limits::ceilings(tier).0) {
        *l = (*l).min(c);
    }
    let mut s = GrantState {
        tier,
        limits,
        suspended_until: input.suspended_until,
        idle_windows: input.idle_windows,
        revoked: false,
    };
    for (measured, claimed, offer, now) in input.windows.into_iter().take(64) {
        let m = Counters(measured);
        let c = claimed.map(Counters);
        let e = window::evaluate(&s.limits, &m, c.as_ref());
        assert!(e.severity < Severity::S4);
        let measured = offer.then_some(m);
        s = window::update(&s, e.severity, measured.as_ref(), now).state;
        assert!(s.within_ceiling(), "{s:?}");
    }
});
