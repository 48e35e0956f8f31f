//! # weft-sim
//!
//! A deterministic discrete-event simulator for weft-proto machines. Machines run unchanged, in
//! virtual time: the simulator jumps the clock to the earliest wakeup any machine asked for, so an
//! hour of protocol time costs only the events in it.
//!
//! [`Runner`] drives one [`Machine`] through virtual time under the contract's rules, and turns a
//! broken contract (a deadline that does not advance, a machine that never goes idle) into an
//! error that names the step, instead of a hang: the way to test a single machine. The scenarios
//! run many machines on their own event queue and hold each to the same rule (their
//! `deadline-advances` invariant).
//!
//! Scenarios: [`airc`] (`weft sim airc-realms`), AIRC realm servers and clients on a faulty
//! network, with the delivery invariants checked on every event; [`minca`] (`weft sim
//! minca-meetup`), Minca nodes meeting through relays into a full mesh while relays restart and
//! nodes sleep. Both run over the one link layer [`link`] (latency per message, loss,
//! bandwidth, duplicates where they really happen, partitions that heal) and in the one shell
//! [`scenario`] gives them (the clock's origin, the event
//! queue, the trace, the report's times and the first [`scenario::Violation`]). [`crypto`] is the provider the scenarios hand their machines: RustCrypto's
//! answers, with expanded Ed25519 keys kept; [`fuzz_crypto`] is an insecure stand-in for fuzz
//! targets, chosen for a run with [`crypto::with_provider`].

use core::fmt;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::core::{Machine, Timestamp, Wakeup};

/// How a run broke the machine contract or the run's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// After `handle_timeout(now)` the machine still asked to be woken at or before `now`: it
    /// would spin a real driver at full speed.
    DeadlineDoesNotAdvance {
        /// The virtual time of the stuck step.
        now: Timestamp,
        /// What the machine said it was waiting for.
        reason: &'static str,
    },
    /// More steps than the run allowed.
    StepLimit {
        /// The limit that was reached.
        steps: usize,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadlineDoesNotAdvance { now, reason } => {
                write!(f, "deadline does not advance at {now} ({reason})")
            }
            Self::StepLimit { steps } => write!(f, "step limit of {steps} reached"),
        }
    }
}

impl std::error::Error for SimError {}

/// Drives one machine through virtual time.
#[derive(Debug)]
pub struct Runner<M> {
    machine: M,
    now: Timestamp,
    steps: usize,
    max_steps: usize,
}

impl<M: Machine> Runner<M> {
    /// A runner whose clock starts at `start`, allowing at most `max_steps` inputs and timeouts.
    pub fn new(machine: M, start: Timestamp, max_steps: usize) -> Self {
        Self {
            machine,
            now: start,
            steps: 0,
            max_steps,
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The machine, to inspect.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// Feeds `input` at the current time, then drains every output into `sink` in order.
    pub fn input(
        &mut self,
        input: M::Input,
        sink: &mut impl FnMut(Timestamp, M::Output),
    ) -> Result<(), SimError> {
        self.count()?;
        self.machine.handle(self.now, input);
        self.drain(sink);
        Ok(())
    }

    /// Runs every wakeup due up to and including `until`, jumping the clock to each, then leaves
    /// the clock at `until`. Outputs go to `sink` stamped with the time they came out.
    pub fn run_until(
        &mut self,
        until: Timestamp,
        sink: &mut impl FnMut(Timestamp, M::Output),
    ) -> Result<(), SimError> {
        while let Some(Wakeup { at, .. }) = self.machine.poll_timeout().filter(|w| w.at <= until) {
            self.count()?;
            self.now = self.now.max(at);
            self.machine.handle_timeout(self.now);
            self.drain(sink);
            if let Some(w) = self.machine.poll_timeout().filter(|w| w.at <= self.now) {
                return Err(SimError::DeadlineDoesNotAdvance {
                    now: self.now,
                    reason: w.reason,
                });
            }
        }
        self.now = self.now.max(until);
        Ok(())
    }

    fn drain(&mut self, sink: &mut impl FnMut(Timestamp, M::Output)) {
        while let Some(o) = self.machine.poll() {
            sink(self.now, o);
        }
    }

    fn count(&mut self) -> Result<(), SimError> {
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(SimError::StepLimit {
                steps: self.max_steps,
            });
        }
        Ok(())
    }
}

pub mod airc;
pub mod circle;
pub mod crypto;
pub mod fuzz_crypto;
pub mod link;
pub mod minca;
pub mod peering;
mod prefetch;
pub mod scenario;

/// A seed for one stream of randomness: the scenario's seed mixed with the stream's tag
/// (splitmix64), so streams are independent and adding one does not shift the others.
pub(crate) fn stream(seed: u64, tag: u64) -> ChaCha20Rng {
    let mut z = seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ChaCha20Rng::seed_from_u64(z ^ (z >> 31))
}
