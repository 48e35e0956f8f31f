//! # weft-proto
//!
//! Every protocol rule of weft, as pure state machines: no sockets, no files, no clock reads, no
//! OS randomness, no threads, no async. A host (a driver in `weft-drivers`, the simulator in
//! `weft-sim`, a game loop, a fuzzer) moves bytes, time and randomness in and out.
//!
//! ## The run loop
//!
//! Every machine has the same shape, [`core::Machine`]:
//!
//! ```
//! use weft_proto::core::{Machine, Timestamp};
//!
//! /// Drive any machine once: feed an input, then drain it, then ask when to wake.
//! fn step<M: Machine>(m: &mut M, now: Timestamp, input: M::Input, out: &mut Vec<M::Output>) -> Option<Timestamp> {
//!     m.handle(now, input);
//!     // The rule: after every change, poll until empty, then ask for the next timeout.
//!     while let Some(o) = m.poll() {
//!         out.push(o);
//!     }
//!     m.poll_timeout().map(|w| w.at)
//! }
//! ```
//!
//! When the clock reaches the deadline the host calls [`core::Machine::handle_timeout`] and drains
//! again. Outputs are executed strictly in order: a machine that must not claim something before it
//! is durable emits the persist action first.
//!
//! ## Modules
//!
//! - [`core`]: time, the machine contract, and the building blocks every protocol uses (token
//!   buckets, replay windows, bounded tables, backoff, timers).
//! - [`codec`]: base64url, base64, base32, base58btc, bech32, hex, canonical JSON, did:key, and
//!   JavaScript's string length and ordering.
//! - [`crypto`]: the crypto provider interface machines are handed, and the default RustCrypto
//!   provider (feature `rustcrypto`).
//! - [`minca`] (feature `minca`): Minca 04 Network.
//! - [`airc`] (feature `airc`): AIRC draft 0.2.
//! - [`circle`] (feature `circle`): NAP-MESH, hop-limited publish and subscribe over the user's
//!   circle of paired devices.
//! - [`nostr`] (feature `nostr`): Nostr NIP-01 events and messages, NIP-40 expiration, NIP-42
//!   authentication.
//! - [`meshstr`] (feature `meshstr`): meshstr/0-draft's artefacts (keys and DID, events, receipts,
//!   delivery hops) and its window arithmetic, as pure functions.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod codec;
pub mod core;
pub mod crypto;

#[cfg(feature = "airc")]
pub mod airc;
#[cfg(feature = "circle")]
pub mod circle;
#[cfg(feature = "meshstr")]
pub mod meshstr;
#[cfg(feature = "minca")]
pub mod minca;
#[cfg(feature = "nostr")]
pub mod nostr;
