//! Minca — 04 Network (`specs/000_d9364e415e9b0329.txt`).
//!
//! Implemented so far:
//!
//! - [`room`]: §1.3, rooms, topics and room keys;
//! - [`envelope`]: `sealEnvelope` and `sealTo` (01 §9.1, §9.2, lost; weft's construction);
//! - [`auth`]: §6 common rules and the §6.2 `minca-mesh/v1` transcript and proof check;
//! - [`relay_url`]: §1.2 relay URLs and kinds, and §4 a space's relay list;
//! - [`relay_wire`]: §1.4 the Minca relay protocol's messages, and the §2.1 `ice` offer check.
//!
//! The relay server and client, rendezvous, the node WebSocket, the mesh, introductions and live
//! messages build on these (see the open issues).

pub mod auth;
pub mod envelope;
pub mod relay_url;
pub mod relay_wire;
pub mod rendezvous;
pub mod room;
