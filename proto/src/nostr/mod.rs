//! Nostr, as far as weft needs it: NIP-01 events and messages, NIP-40 expiration and NIP-42
//! authentication, and a relay's core (NIP-01 kinds and sessions, NIP-09, NIP-42, NIP-45,
//! NIP-62, NIP-77) as sans-IO machines.
//!
//! Three users build on this module: Minca's Nostr relay kind (Minca 04 Network §1.5,
//! `crate::minca::nostr_kind`), the relay `weft nostr serve` runs ([`relay`], issue #35) and
//! Nostream relay peering (`shared/specs/002_06f34c8100713e6f.txt`, to come), whose inbound AUTH
//! check (event id, signature, timestamp window, challenge, relay host) is [`auth::check`].
//!
//! - [`event`]: the NIP-01 event, its id serialization, signing and verification, strict parsing;
//! - [`message`]: NIP-01 client → relay and relay → client frames, and filters;
//! - [`expiration`]: the NIP-40 `expiration` tag;
//! - [`auth`]: the NIP-42 `AUTH` event (kind 22242), built and checked;
//! - [`limits`]: the bounds on one client connection, parsing caps included;
//! - [`relay`]: a relay's core: the per-connection session machine and its store seam;
//! - [`kinds`]: NIP-01 kind classes, NIP-09 deletion, NIP-40 arrival and NIP-62 vanish rules;
//! - [`peering`]: relay peering (spec 002): the relay's identity, the trust list, the per-peer
//!   request budget and status rows.

pub mod auth;
pub mod event;
pub mod expiration;
pub mod kinds;
pub mod limits;
pub mod message;
pub mod peering;
pub mod relay;
pub mod sync;

pub use event::{Event, EventError};
pub use message::{ClientMessage, Filter, MessageError, RelayMessage};
