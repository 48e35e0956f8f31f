//! Rooms, topics and room keys (Minca 04 Network §1.3).
//!
//! A room is the name peers meet under; a relay only ever sees its topic, and what is said in it is
//! sealed under its room key. "A client MUST use these derivations; two implementations that
//! differ here never meet."

use alloc::string::String;
use core::fmt;

use crate::codec::{base32, base64url};
use crate::crypto::CryptoProvider;

const ROOM_LABEL: &str = "minca-room/v1|";
const TOPIC_LABEL: &str = "minca/rendezvous-topic/v1|";
const KEY_LABEL: &str = "minca/rendezvous-key/v1|";

/// Bytes of the room hash kept: 20 bytes are exactly 32 base32 characters.
const ROOM_HASH_BYTES: usize = 20;

/// Rooms one node is in at once, in every machine that keeps state per room (the relay client,
/// the rendezvous, the mesh), so that none of them accepts a room another refuses. The spec names
/// no number; the reference node is tested in 60 rooms (§2.1). 128 leaves room for growth, bounds
/// every per-room table, and lets a Nostr relay link watch every room within its subscription cap
/// (`nostr_kind::MAX_SUBSCRIPTIONS`).
pub const MAX_ROOMS: usize = 128;

/// Peers a room holds (§2: "A room holds at most 64 peers"): the rendezvous hears at most this
/// many in a room, and the mesh tracks no more.
pub const MAX_ROOM_PEERS: usize = 64;

/// A room name (32 lower-case base32 characters for a space's room).
///
/// Other protocols derive rooms of their own (a channel's rooms, 01 Identity §15.2): any string
/// is accepted by [`Room::new`], and [`Room::topic`] and [`Room::key`] work on all of them alike.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Room(String);

impl Room {
    /// A room derived elsewhere (the extension point for `channelRoom`-style rooms).
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// A space's room: `lowercase(base32(SHA-256("minca-room/v1|" + spaceId)[0..20]))`.
    pub fn of_space(crypto: &dyn CryptoProvider, space_id: &str) -> Self {
        let h = crypto.sha256(&[ROOM_LABEL.as_bytes(), space_id.as_bytes()]);
        Self(base32::encode(&h[..ROOM_HASH_BYTES]))
    }

    /// The room name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What a relay knows the room by:
    /// `base64url(SHA-256("minca/rendezvous-topic/v1|" + room))`, 43 characters.
    pub fn topic(&self, crypto: &dyn CryptoProvider) -> String {
        base64url::encode(&crypto.sha256(&[TOPIC_LABEL.as_bytes(), self.0.as_bytes()]))
    }

    /// The AES-256-GCM key rendezvous messages are sealed under:
    /// `SHA-256("minca/rendezvous-key/v1|" + room)`.
    pub fn key(&self, crypto: &dyn CryptoProvider) -> [u8; 32] {
        crypto.sha256(&[KEY_LABEL.as_bytes(), self.0.as_bytes()])
    }
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Room({})", self.0)
    }
}
