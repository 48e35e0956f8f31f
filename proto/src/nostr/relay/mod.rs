//! A Nostr relay's core, sans I/O: one [`session::Session`] machine per client connection, the
//! seam to its event store ([`store`]), a reference store in memory ([`memory`]), the store test
//! suite every backend runs ([`suite`]) and a harness that steps sessions against the memory store
//! ([`harness`]).
//!
//! NIP sections implemented here (clause by clause in `docs/conformance/nostr.md`):
//! - NIP-01 "From client to relay" and "From relay to client": `EVENT`/`OK` with the standard
//!   prefixes, `REQ`/`EVENT`/`EOSE`, `CLOSED`, `CLOSE`, `NOTICE`, and filters with `limit`;
//!   "Kinds": regular, replaceable, ephemeral, addressable (through [`crate::nostr::kinds`]);
//! - NIP-09 deletion requests, NIP-40 expiration, NIP-62 requests to vanish (kind rules applied
//!   by the session on arrival and by the store);
//! - NIP-42 authentication of clients: a challenge on connect, `AUTH` checked by
//!   [`crate::nostr::auth::check`], `auth-required:` answers;
//! - NIP-45 `COUNT`;
//! - NIP-77 negentropy syncing (`NEG-OPEN`/`NEG-MSG`/`NEG-CLOSE`/`NEG-ERR`), the relay side of
//!   Negentropy protocol V1 through the `negentropy` crate.
//!
//! The drivers run the store (an embedded database, PostgreSQL) and the sockets; a backend
//! implements [`store::EventStore`] and passes [`suite::run`].

pub mod harness;
pub mod memory;
pub mod session;
pub mod store;
pub mod suite;
pub mod wire;

pub use memory::MemoryStore;
pub use session::{AuthPolicy, Config, Input, Output, RequestId, Session};
pub use store::{Cursor, EventStore, StoreError, StoreOp, StoreReply, WriteOutcome};
