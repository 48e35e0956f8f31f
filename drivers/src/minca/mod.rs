//! Minca on real sockets (Minca 04 Network).
//!
//! - [`relay`]: `weft relay`, the Minca relay server (§1.4).

pub mod relay;
