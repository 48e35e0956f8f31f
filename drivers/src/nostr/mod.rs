//! `weft nostr`: the Nostr relay core of [`weft_proto::nostr::relay`] on real sockets and disk.
//!
//! - [`store`]: the embedded event store (redb), indexed for filter and negentropy reads.
//! - [`serve`]: `weft nostr serve`, one relay session per WebSocket connection over
//!   [`crate::ws`], one shared store, NIP-11 on plain `GET /`.
//! - [`config`]: `--config FILE`, nostream's `settings.yaml` keys that have a meaning here.
//! - [`peering`]: relay peering's settings, identity, NIP-11 fields and admin status rows.

pub mod config;
pub mod peering;
pub mod serve;
pub mod store;

pub use store::RedbStore;
