//! Live messages on the mesh (§9.2): the receive limits every transport applies, as the mesh
//! names them. They live in [`crate::minca::limits`], shared with the node sockets (§5.2, §5.3),
//! so that a WebRTC peer and a node socket peer are held to the same rules by the same code.

pub use crate::minca::limits::{LIVE, LIVE_RATE, LiveAllowance, LiveDrop, MAX_LIVE_CHARS, fits};
