//! Time, the machine contract, and the building blocks every protocol here needs.
//!
//! - [`Timestamp`]: Unix time in milliseconds, the only clock a machine sees. Protocol times are
//!   wall-clock (signed `at` fields, ttl, windows), so there is one clock, not two.
//! - [`Machine`]: `handle(now, input)` / `poll()` / `poll_timeout()` / `handle_timeout(now)`.
//! - Randomness is injected: a machine that needs nonces, keys or jitter takes a
//!   [`rand_core::CryptoRng`] at construction, so a seeded run replays exactly.
//! - [`bucket`], [`replay`], [`bounded`], [`backoff`], [`timer`], [`index`]: the shared mechanisms, each with
//!   its bound and its edge cases pinned by tests.

pub mod backoff;
pub mod bounded;
pub mod bucket;
pub mod index;
pub mod replay;
pub mod timer;

mod time;

pub use backoff::{Backoff, BackoffConfig};
pub use bounded::{BoundedMap, BoundedSet, ExpiringSet};
pub use bucket::{BucketConfig, TokenBucket};
pub use rand_core;
pub use replay::ReplayWindow;
pub use time::Timestamp;
pub use timer::TimerQueue;

/// A connection, named by the host that opened or accepted it.
///
/// Machines never open sockets; the host allocates an id for each connection it hands a machine
/// and uses the same id when the machine asks to send on it or close it. Ids are never reused
/// while the machine might still name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// When a machine next wants [`Machine::handle_timeout`], and why.
///
/// The reason is for logs and traces ("ack timeout", "heartbeat"): a host that sees a deadline
/// that does not advance can say which rule asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wakeup {
    /// The instant at or after which the host calls [`Machine::handle_timeout`].
    pub at: Timestamp,
    /// A short, static description of the rule that asked for the wakeup.
    pub reason: &'static str,
}

impl Wakeup {
    /// A wakeup at `at` for `reason`.
    pub const fn new(at: Timestamp, reason: &'static str) -> Self {
        Self { at, reason }
    }

    /// The earlier of two optional wakeups (the first on a tie, so the result is deterministic).
    pub fn earliest(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

/// The one shape every weft protocol machine has, so that one driver loop, one simulator and one
/// fuzz harness serve them all.
///
/// The contract a host follows:
///
/// 1. Feed each event with [`handle`](Machine::handle), stamped with the current time.
/// 2. After every `handle` or `handle_timeout`, call [`poll`](Machine::poll) until it returns
///    `None`, and execute the outputs **strictly in order** (a persist finishes before the next
///    output goes out).
/// 3. Ask [`poll_timeout`](Machine::poll_timeout) and call
///    [`handle_timeout`](Machine::handle_timeout) once the clock reaches it.
///
/// A machine never reads a clock and never draws randomness it was not handed. Bad input never
/// panics: it is answered as its spec says (ignored and counted, an error frame, a failed ack, a
/// close code), through the outputs. A panic is a bug in the machine.
pub trait Machine {
    /// Everything the machine can be told: bytes or frames from a connection, a connection opened
    /// or closed, a command from the application, a stored record being restored.
    type Input;
    /// Everything the machine can ask for: send, open or close a connection, deliver to the
    /// application, persist or forget a record, resolve a name, report an event.
    type Output;

    /// Feed one event that happened at `now`.
    fn handle(&mut self, now: Timestamp, input: Self::Input);

    /// Take the next action, in order. `None` means the machine has nothing more until the next
    /// input or timeout.
    fn poll(&mut self) -> Option<Self::Output>;

    /// When the machine next wants [`handle_timeout`](Machine::handle_timeout), if ever.
    fn poll_timeout(&self) -> Option<Wakeup>;

    /// The clock has reached (or passed) a deadline given by [`poll_timeout`](Machine::poll_timeout).
    /// Calling it early, or twice, is harmless: a machine acts only on what is due at `now`.
    fn handle_timeout(&mut self, now: Timestamp);
}
