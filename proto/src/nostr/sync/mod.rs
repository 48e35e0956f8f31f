//! Spec 002 (PEERING.md) §6 "Outbound sync", sans I/O: the pieces a relay needs to pull a peer's
//! advertised feed into its own store.
//!
//! - [`address`]: the address policy of §6 step 1 (loopback, private, link-local and every other
//!   non-public address refused, literal or resolved, on every redirect, unless
//!   `peering.allowPrivateNetworks`);
//! - [`scope`]: a peer's advertised `peering.scopes`, their filters, their splitting by kind and
//!   time range, and the in-scope check (§6 steps 3 and 4, §7's scope enforcement);
//! - [`worker`]: one outbound sync worker machine per enabled peer (§5 and §6);
//! - [`pair`]: a host that connects a worker to a relay of [`crate::nostr::relay`] over memory
//!   stores, for tests, fuzzing and the simulator.

pub mod address;
pub mod pair;
pub mod scope;
pub mod worker;

pub use worker::{Config, Input, Output, PeerStatus, State, Stats, SyncLimits, Worker};
