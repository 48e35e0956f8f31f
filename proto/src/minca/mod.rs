//! Minca — 04 Network (`specs/000_d9364e415e9b0329.txt`).
//!
//! Implemented so far:
//!
//! - [`room`]: §1.3, rooms, topics and room keys;
//! - [`envelope`]: `sealEnvelope` and `sealTo` (01 §9.1, §9.2, lost; weft's construction);
//! - [`auth`]: §6 common rules and the §6.2 `minca-mesh/v1` transcript and proof check;
//! - [`relay_url`]: §1.2 relay URLs and kinds, and §4 a space's relay list;
//! - [`mesh`]: §7.1 frames, §8 introductions, §9.2 live-message limits;
//! - [`relay_wire`]: §1.4 the Minca relay protocol's messages, and the §2.1 `ice` offer check;
//! - [`relay_server`]: §1.1 and §1.4 the Minca relay server, one machine holding every socket;
//! - [`turn`]: §1.4 TURN REST passwords a relay hands out.
//! - [`note`]: notes (01 §7.5, lost; weft's token format) and §6.4 the account behind a session;
//! - [`space_access`]: what 03 Spaces supplies to §6.3 (read keys, seal keys, readers);
//! - [`read_proof`]: §6.3 read proofs, the verifier's steps, letting a reader go;
//! - [`node_url`]: §5.2 node URLs, the `?space=` query and the pin;
//! - [`node_socket`]: §5.2, §5.3, §6.1 and §9.1 the node WebSocket, client and node side.
//! - [`nostr_kind`]: §1.5 a Nostr relay as a relay kind, per socket.
//! - [`relay_client`]: §2.1, §3, §4 and §10, the machine that keeps a node's relay sockets for all
//!   its rooms.
//!
//! The relay server, rendezvous, the node WebSocket, the mesh, introductions and live
//! messages build on these (see the open issues).

pub mod auth;
pub mod envelope;
pub mod mesh;
pub mod node_socket;
pub mod node_url;
pub mod nostr_kind;
pub mod note;
pub mod read_proof;
pub mod relay_client;
pub mod relay_server;
pub mod relay_url;
pub mod relay_wire;
pub mod room;
pub mod space_access;
pub mod turn;
