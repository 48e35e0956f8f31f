//! AIRC — draft 0.2, wire `airc/0.1` (`specs/001_52d21deae8bd4dc4.txt`).
//!
//! Implemented so far:
//!
//! - [`signing`]: §9, the canonical strings of messages, hellos and welcomes and their Ed25519
//!   signatures;
//! - [`passport`]: §12.2, the three renderings of a passport (line, URL, file) and §12.1's token
//!   hash;
//! - [`framing`]: §3.2, newline-delimited JSON frames from a byte stream and back, with the 1 MiB
//!   limit;
//! - [`frame`]: §4, the frame catalogue, typed, and §14's registry of ack and error codes.
//!
//! Addresses, the server machine, the spool, links and the audit stream build on these
//! (see the open issues).

pub mod frame;
pub mod framing;
pub mod passport;
pub mod signing;
