//! # weft on `no_std`
//!
//! The embedding example of issue #7: weft's protocol machines run in a `#![no_std]` crate, on
//! an allocator of its own ([`heap`]: talc over a static 256 KiB array), with time handed in as a
//! number and randomness from a seeded ChaCha20. [`run`] plays two exchanges between in-memory
//! machines:
//!
//! - [`mesh`]: two Minca mesh nodes meet in one room, complete the `minca-mesh/v1` handshake,
//!   admit each other and carry a `live` message (Minca §5.1, §7.2, §7.3, §9.2);
//! - [`airc`]: two clients say hello and bind through the AIRC realm server machine, one sends
//!   the other a message and gets its `delivered` ack (AIRC §4–§7).
//!
//! Nothing here reads a clock, opens a socket or asks an OS for memory or randomness. The binary
//! `weft-no-std-bare` links this crate with no std at all, which is what proves it.

#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod airc;
pub mod heap;
pub mod mesh;

use core::fmt;

use weft_proto::core::Timestamp;

/// The one time both exchanges run at (Unix ms): a device would read its clock here.
pub const START: Timestamp = Timestamp::from_millis(1_790_380_000_000);

/// Inputs and timeouts an exchange may take before it counts as stuck.
pub const STEP_LIMIT: usize = 10_000;

/// The step of an exchange that did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure(pub &'static str);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "failed: {}", self.0)
    }
}

/// What [`run`] showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The Minca mesh exchange.
    pub mesh: mesh::MeshOutcome,
    /// The AIRC exchange.
    pub airc: airc::AircOutcome,
    /// The most heap bytes live at once during the run.
    pub peak_heap: usize,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.mesh;
        writeln!(
            f,
            "minca mesh: admitted both ways in room {} after {} frames",
            mesh::ROOM,
            m.frames
        )?;
        if let Some((payload, _)) = &m.live {
            writeln!(f, "minca mesh: live message delivered: {payload}")?;
        }
        let a = &self.airc;
        writeln!(
            f,
            "airc: welcome, bound, msg {} delivered to alice ({:?}), ack {:?} received by bob, {} records persisted",
            a.id, a.body, a.ack, a.persisted
        )?;
        write!(
            f,
            "heap: peak {} bytes of a {} byte arena",
            self.peak_heap,
            heap::ARENA_BYTES
        )
    }
}

/// Runs both exchanges and reports what they showed, or the first step that failed.
pub fn run() -> Result<Outcome, Failure> {
    heap::reset_peak();
    let mesh = mesh::exchange()?;
    let airc = airc::exchange()?;
    Ok(Outcome {
        mesh,
        airc,
        peak_heap: heap::peak_bytes(),
    })
}
