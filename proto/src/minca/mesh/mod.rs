//! The mesh (§7), introductions (§8) and live messages (§9.2).
//!
//! - [`frame`]: §7.1, the frame every mesh message travels in, and the reserved types;
//! - `frame_read`: a frame's members read from its bytes without a JSON tree;
//! - [`introduction`]: §8, `__peers` and `__signal`, and who offers (§7.3);
//! - `payload`: the payloads the mesh writes itself, from borrows;
//! - [`live`]: §9.2, the receive limits on live messages (shared with the node sockets, in
//!   [`crate::minca::limits`]);
//! - [`admission`]: §7.2, what one side keeps per (room, peer);
//! - `conns`: §5.1, the connections, one per peer, found by id or by peer;
//! - [`peers_peek`]: a `__peers` frame read from its text;
//! - [`signal_frame`]: the `__signal` frame written straight from a signal;
//! - [`signal_peek`]: a `__signal` frame read from its text, only as far as recognising a copy
//!   unless it is new;
//! - [`machine`]: the [`Mesh`] machine, one per node: §5.1 one connection per peer, §7.2
//!   admission, §7.3 who connects, §8 introductions, §9 `who` and live messages.

pub mod admission;
mod conns;
pub mod frame;
mod frame_read;
pub mod introduction;
pub mod live;
pub mod machine;
mod memory_key;
mod payload;
pub mod peers_peek;
mod plain_json;
pub mod signal_frame;
pub mod signal_peek;

pub use machine::{Input, Mesh, Output, ReadAccess, RoomConfig, RoomKind};
