//! # weft-drivers
//!
//! Thin adapters that move bytes, time and randomness between the world and the `weft-proto`
//! machines, and the `weft` program. A driver holds no protocol meaning: if it needs an `if`
//! about what a message means, that logic belongs in `weft-proto`.
//!
//! - [`fast_crypto`] (feature `fast-crypto`): a native-backed crypto provider for servers.
//! - [`host`]: the protocol-neutral host layer (effects, events, the shared loop core) and the
//!   three runtime adapters over it, each driving any [`host::HostMachine`] over TCP and Unix
//!   sockets: [`smol`], `tokio` (feature `tokio`, on by default) and [`blocking`] (std only,
//!   `poll(2)`, one thread).
//! - [`tls`] and [`quic`]: TLS (rustls) and QUIC (quinn) transports for the smol adapter,
//!   which finishes their handshakes before a machine hears of a connection.
//! - [`peer_uid`]: the uid owning the other end of a loopback TCP connection, from `/proc`.
//! - [`state_dir`]: a server's state directory and files, private to its account.
//! - [`airc`]: the AIRC realm server and client commands on real sockets.
//! - [`ws`]: WebSocket (and TLS for `wss://`) once, as a sans-IO layer between any adapter's bytes
//!   and a machine that speaks messages ([`ws::WsMachine`]).
//! - [`minca`]: `weft relay` and the Minca relay client over that layer, on any adapter.
//! - [`nostr`]: `weft nostr serve`, the Nostr relay core over that layer on an embedded store.
//! - [`frame_loop`]: non-blocking connects and a step-at-a-time WebSocket client, for loops that
//!   own their tick and may never wait (a game's frame).
//! - [`circle`]: `weft circle serve`, the NAP-MESH shell over WebSocket member links.
//! - [`demo`]: `weft demo`.
//! - [`os_rng`], [`now`]: the two things a driver hands every machine, from the OS.

use std::time::{SystemTime, UNIX_EPOCH};

use rand_core::SeedableRng;
use weft_proto::core::Timestamp;
use weft_proto::crypto::CryptoProvider;

pub mod airc;
pub mod blocking;
mod bridge;
pub mod circle;
pub mod demo;
#[cfg(feature = "fast-crypto")]
pub mod fast_crypto;
pub mod frame_loop;
pub mod host;
pub mod meshstr;
pub mod minca;
pub mod nostr;
pub mod peer_uid;
pub mod quic;
pub mod smol;
pub mod state_dir;
pub mod tls;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod ws;

/// The permission bits of every key file weft writes (an AIRC realm key, a Minca node or
/// account key): read and write for its owner only.
pub const KEY_MODE: u32 = 0o600;

/// A CSPRNG for machines, seeded from the operating system.
///
/// Machines take their randomness as an argument; this is the one place a driver draws it from
/// the OS. Tests and the simulator seed the same generator from a number instead.
pub fn os_rng() -> chacha20::ChaCha20Rng {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the operating system has no randomness to give");
    chacha20::ChaCha20Rng::from_seed(seed)
}

/// The wall clock as a machine's `now`. A clock set before 1970 reads as the epoch.
pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// The crypto provider a server should use: the native-backed one when built with
/// `fast-crypto`, else the pure-Rust default.
pub fn server_provider() -> &'static dyn CryptoProvider {
    #[cfg(feature = "fast-crypto")]
    {
        &fast_crypto::FastCrypto
    }
    #[cfg(not(feature = "fast-crypto"))]
    {
        weft_proto::crypto::default_provider()
    }
}
