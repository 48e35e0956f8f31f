//! Spec 002 (PEERING.md) §6 "Outbound sync", sans I/O: the pieces a relay needs to pull a peer's
//! advertised feed into its own store.
//!
//! - [`address`]: the address policy of §6 step 1 (loopback, private, link-local and every other
//!   non-public address refused, literal or resolved, on every redirect, unless
//!   `peering.allowPrivateNetworks`).

pub mod address;
