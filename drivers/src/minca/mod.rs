//! Minca on real sockets (Minca 04 Network), over the WebSocket layer ([`crate::ws`]) on any
//! runtime adapter.
//!
//! - [`relay`]: `weft relay`, the Minca relay server (§1.4);
//! - [`relay_client`]: the relay client (§2.1, §3), dialling `ws://`, `wss://` and Nostr relays;
//! - [`node_ws`]: the WebSocket to an always-on node, both sides (§5.2, §5.3);
//! - [`webrtc`]: WebRTC data channels through str0m for the mesh (§5.1);
//! - [`node_runner`]: `weft node`, one composed node on relay sockets and WebRTC (§2–§9);
//! - [`key_file`]: the P-256 key files both programs keep.

pub mod key_file;
pub mod node_runner;
pub mod node_ws;
pub mod relay;
pub mod relay_client;
pub mod webrtc;
