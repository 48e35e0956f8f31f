//! The mesh (§7), introductions (§8) and live messages (§9.2).
//!
//! - [`frame`]: §7.1, the frame every mesh message travels in, and the reserved types;
//! - [`introduction`]: §8, `__peers` and `__signal`, and who offers (§7.3);
//! - [`live`]: §9.2, the receive limits on live messages.
//!
//! The mesh machine that admits peers per room (§7.2) and decides who connects (§7.3) builds on
//! these (issue #6).

pub mod frame;
pub mod introduction;
pub mod live;
