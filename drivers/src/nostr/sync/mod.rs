//! The I/O side of relay peering's outbound sync (spec 002, PEERING.md §6): everything the sync
//! worker machine (`weft_proto::nostr::sync`) needs done in the world, and nothing it decides.
//!
//! - [`dial`]: the peer's NIP-11 document over HTTP(S), redirects followed by hand, and the
//!   WebSocket dial target, both only ever connecting to an address the address policy
//!   (`weft_proto::nostr::sync::address`) checked (§6 step 1: loopback, private and link-local
//!   addresses refused, literal or resolved, on every redirect, unless
//!   `peering.allowPrivateNetworks`).
//! - [`runner`]: one sync worker per enabled peer on the relay's own loop, its store operations
//!   run on the relay's store, its live events broadcast to the relay's sessions, its blocking
//!   jobs (the fetch, the dial's check) on threads of their own.

pub mod dial;
pub mod runner;
