//! The mesh's connections (§5.1: one per peer), found by id or by peer.
//!
//! Every frame arrives on a connection id and needs that connection's peer, state and byte
//! allowance; before this table the id gave the peer's DID and the DID then found the
//! connection, two searches (and at ten thousand nodes two cache misses) for every frame. Here the
//! entry under the id holds the connection itself, its peer included, and the index by peer holds
//! only the id, so a frame costs one search and the rarer lookups by peer (handshakes, greetings,
//! sends to one peer) two. Both indexes change together in this one place.

use alloc::collections::BTreeMap;
use alloc::string::String;

use crate::core::ConnId;
use crate::minca::limits::ByteAllowance;
use crate::minca::mesh::machine::Route;
use crate::minca::text_map::{KeyText, TextMap};

/// Where a connection is.
#[derive(Clone, Debug)]
pub(super) enum ConnState {
    /// We asked for an offer; not yet sent.
    MakingOffer,
    /// Our offer went out; waiting for the answer.
    Offered,
    /// We asked for an answer; not yet sent.
    MakingAnswer,
    /// Answer applied or sent; waiting for the channel.
    Connecting,
    /// The data channel is open, with the channel-binding fingerprints (§5.1): this side's, then
    /// the peer's.
    Open { local: String, remote: String },
}

/// One connection.
#[derive(Clone, Debug)]
pub(super) struct Conn {
    /// Its id, the key it is held under.
    pub(super) id: ConnId,
    /// The peer's session DID.
    pub(super) peer: KeyText,
    /// Where it is.
    pub(super) state: ConnState,
    /// How its descriptions travel (§7.3).
    pub(super) route: Route,
    /// Whether any room ever took the connection up.
    pub(super) claimed: bool,
    /// The peer's allowance of bytes (§7.4).
    pub(super) bytes: ByteAllowance,
}

impl Conn {
    /// Whether the data channel is open.
    pub(super) fn is_open(&self) -> bool {
        matches!(self.state, ConnState::Open { .. })
    }
}

/// The connections, at most one per peer, by id and by peer.
#[derive(Debug, Default)]
pub(super) struct Conns {
    /// The connections, by id.
    by_id: BTreeMap<ConnId, Conn>,
    /// The id of each peer's connection.
    by_peer: TextMap<ConnId>,
}

impl Conns {
    /// How many connections there are.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The connections, in id order.
    pub(super) fn values(&self) -> impl Iterator<Item = &Conn> {
        self.by_id.values()
    }

    /// Whether `peer` has a connection.
    pub(super) fn has(&self, peer: &str) -> bool {
        self.by_peer.contains_key(peer)
    }

    /// `peer`'s connection.
    pub(super) fn get(&self, peer: &str) -> Option<&Conn> {
        self.by_id.get(self.by_peer.get(peer)?)
    }

    /// `peer`'s connection, to change.
    pub(super) fn get_mut(&mut self, peer: &str) -> Option<&mut Conn> {
        self.by_id.get_mut(self.by_peer.get(peer)?)
    }

    /// The connection `id`.
    pub(super) fn by_id(&self, id: ConnId) -> Option<&Conn> {
        self.by_id.get(&id)
    }

    /// The connection `id`, to change.
    pub(super) fn by_id_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.by_id.get_mut(&id)
    }

    /// Holds `conn` as its peer's connection, returning the one it replaced.
    pub(super) fn insert(&mut self, conn: Conn) -> Option<Conn> {
        let old = self.by_peer.insert(conn.peer.as_str(), conn.id);
        let replaced = old.and_then(|id| self.by_id.remove(&id));
        self.by_id.insert(conn.id, conn);
        replaced
    }

    /// Forgets `peer`'s connection, returning it.
    pub(super) fn remove(&mut self, peer: &str) -> Option<Conn> {
        let id = self.by_peer.remove(peer)?;
        self.by_id.remove(&id)
    }

    /// Forgets the connection `id`, returning it.
    pub(super) fn remove_id(&mut self, id: ConnId) -> Option<Conn> {
        let conn = self.by_id.remove(&id)?;
        self.by_peer.remove(conn.peer.as_str());
        Some(conn)
    }
}
