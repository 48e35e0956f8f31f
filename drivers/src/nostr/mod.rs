//! `weft nostr`: the Nostr relay core of [`weft_proto::nostr::relay`] on real sockets and disk.
//!
//! - [`store`]: the embedded event store (redb), indexed for filter and negentropy reads.
//! - [`pg`]: the PostgreSQL event store (`--database`), several processes to one database.
//! - [`serve`]: `weft nostr serve`, one relay session per WebSocket connection over
//!   [`crate::ws`], one shared store, NIP-11 on plain `GET /`.
//! - [`config`]: `--config FILE`, nostream's `settings.yaml` keys that have a meaning here.
//! - [`sync`]: the I/O of relay peering's outbound sync: the peer's NIP-11 document and WebSocket
//!   dials, only ever to addresses the address policy checked.
//! - [`peering`]: relay peering's settings, identity, NIP-11 fields and admin status rows.

pub mod config;
pub mod peering;
pub mod pg;
pub mod serve;
pub mod store;
pub mod sync;

pub use store::RedbStore;
