//! Minca — 04 Network (`shared/specs/000_d9364e415e9b0329.txt`).
//!
//! The machines, each a [`Machine`](crate::core::Machine) a host drives:
//!
//! - [`relay_server::RelayServer`]: §1.1, §1.4, a Minca relay holding every socket;
//! - [`relay_client::RelayClient`]: §2.1, §3, §4, §10, a node's relay sockets for all its rooms,
//!   of the Minca kind and (through [`nostr_kind`]) the Nostr kind of §1.5;
//! - [`rendezvous::Rendezvous`]: §2, §3, the sealed hello, offer and answer in a room;
//! - [`mesh::Mesh`]: §7, §8, §9, one connection per peer, admission per room, introductions,
//!   `who` and live messages;
//! - [`node::Node`]: the three above composed, with the glue between them (a node joins rooms,
//!   meets peers through relays, and talks to them);
//! - [`node_socket`]: §5.2, §5.3, §6.1, §9.1, both ends of the WebSocket to an always-on node.
//!
//! The rules they share:
//!
//! - [`limits`]: §7.4, §9.2 what one peer may make this node take in, on every transport (the
//!   byte rate, the live-message rate and size), applied by the mesh and the node sockets alike;
//! - [`room`]: §1.3 rooms, topics and room keys; [`relay_url`]: §1.2 relay URLs and kinds, §4 a
//!   space's relay list; [`relay_wire`]: §1.4 the relay messages and the §2.1 `ice` check;
//!   [`turn`]: §1.4 TURN REST passwords;
//! - [`envelope`]: `sealEnvelope` and `sealTo` (01 §9.1, §9.2, lost; weft's construction);
//! - [`auth`]: §6 common rules, the `minca-peer/v3` and `minca-mesh/v1` labels;
//!   [`read_proof`]: §6.3 read proofs and letting a reader go; [`note`]: notes (01 §7.5, lost;
//!   weft's token) and §6.4 the account behind a session; [`space_access`]: what 03 Spaces
//!   supplies; [`node_url`]: §5.2 node URLs and pins.
//!
//! WebRTC itself (§5.1) is not here: it is I/O, done by a driver (str0m in `weft-drivers`) behind
//! the node's peer-connection inputs and outputs.

pub mod auth;
pub mod envelope;
pub mod limits;
pub mod mesh;
pub mod node;
pub mod node_socket;
pub mod node_url;
pub mod nostr_kind;
pub mod note;
pub mod read_proof;
pub mod relay_client;
pub mod relay_server;
pub mod relay_url;
pub mod relay_wire;
pub mod rendezvous;
pub mod room;
pub mod space_access;
pub(crate) mod text_map;
pub mod turn;
