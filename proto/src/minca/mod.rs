//! Minca — 04 Network (`specs/000_d9364e415e9b0329.txt`).
//!
//! Implemented so far:
//!
//! - [`room`]: §1.3, rooms, topics and room keys;
//! - [`auth`]: §6 common rules and the §6.2 `minca-mesh/v1` transcript and proof check.
//!
//! The relay server and client, rendezvous, the node WebSocket, the mesh, introductions and live
//! messages build on these (see the open issues).

pub mod auth;
pub mod room;
