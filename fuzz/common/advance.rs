//! Time for a machine under fuzz, the way a driver gives it: wake it when it asked, take what it
//! says, and hold it to the machine contract's rule that after `handle_timeout(now)` it never
//! asks to be woken at or before `now` (a deadline that does not advance would spin a driver).

use weft_proto::core::{Machine, Timestamp};

/// Calls `handle_timeout(now)` once (due or not: a driver may wake a machine early), hands every
/// output to `each`, then asserts the next wakeup is after `now`.
pub fn tick<M: Machine>(machine: &mut M, now: Timestamp, mut each: impl FnMut(M::Output)) {
    machine.handle_timeout(now);
    while let Some(output) = machine.poll() {
        each(output);
    }
    if let Some(after) = machine.poll_timeout() {
        assert!(
            after.at > now,
            "deadline does not advance: {}",
            after.reason
        );
    }
}

/// Runs every deadline of `machine` due at or before `now`, as [`tick`] does one.
pub fn run_due<M: Machine>(machine: &mut M, now: Timestamp, mut each: impl FnMut(M::Output)) {
    while machine.poll_timeout().is_some_and(|w| w.at <= now) {
        tick(machine, now, &mut each);
    }
}
