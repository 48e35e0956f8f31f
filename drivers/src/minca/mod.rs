//! Minca on real sockets (Minca 04 Network).
//!
//! - [`relay`]: `weft relay`, the Minca relay server (§1.4).
//! - [`webrtc`]: WebRTC data channels through str0m for the mesh (§5.1).

pub mod relay;
pub mod webrtc;
