//! One node's open streams (relay sockets or peer connections) by the connection id the node
//! names them with.
//!
//! Every frame a node sends looks its stream up by (node, connection). In one hashed table for
//! the whole network that was two cache misses a send at 10 000 nodes (the control bytes, then
//! the entry), and §8's flood sends the same node's frames to a dozen connections in a row. A
//! node holds a few sockets and at most a room's peers, so its own short list, which the node's
//! earlier sends have just brought into the cache, is scanned instead.

use weft_proto::core::ConnId;

/// Stream ids by connection id, for one node; see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct ByConn {
    entries: Vec<(ConnId, u64)>,
}

impl ByConn {
    /// Maps `conn` to stream `id`, replacing what it mapped to.
    pub(super) fn insert(&mut self, conn: ConnId, id: u64) {
        match self.entries.iter_mut().find(|(c, _)| *c == conn) {
            Some(entry) => entry.1 = id,
            None => self.entries.push((conn, id)),
        }
    }

    /// The stream `conn` maps to.
    pub(super) fn get(&self, conn: ConnId) -> Option<u64> {
        self.entries
            .iter()
            .find_map(|&(c, id)| (c == conn).then_some(id))
    }

    /// Forgets `conn`.
    pub(super) fn remove(&mut self, conn: ConnId) {
        if let Some(at) = self.entries.iter().position(|(c, _)| *c == conn) {
            self.entries.swap_remove(at);
        }
    }
}

/// Some of one node's connection ids, in a short list for the reason [`ByConn`] is one.
#[derive(Debug, Default)]
pub(super) struct ConnSet {
    conns: Vec<ConnId>,
}

impl ConnSet {
    /// Adds `conn`, if it is not in already.
    pub(super) fn insert(&mut self, conn: ConnId) {
        if !self.contains(conn) {
            self.conns.push(conn);
        }
    }

    /// Whether `conn` is in.
    pub(super) fn contains(&self, conn: ConnId) -> bool {
        self.conns.contains(&conn)
    }

    /// Takes `conn` out, if it is in.
    pub(super) fn remove(&mut self, conn: ConnId) {
        if let Some(at) = self.conns.iter().position(|&c| c == conn) {
            self.conns.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand_core::Rng as _;

    use super::*;

    /// Against a hashed map: the same answer to every lookup after any inserts (new and
    /// replacing) and removals (present or not).
    #[test]
    fn by_conn_is_a_map() {
        let mut rng = crate::stream(0xb7c0, 4);
        let mut by_conn = ByConn::default();
        let mut map = HashMap::new();
        for step in 0..5_000u64 {
            let r = rng.next_u64();
            let conn = ConnId(r % 40);
            if r >> 63 == 0 {
                by_conn.insert(conn, step);
                map.insert(conn, step);
            } else {
                by_conn.remove(conn);
                map.remove(&conn);
            }
            for c in 0..40 {
                assert_eq!(by_conn.get(ConnId(c)), map.get(&ConnId(c)).copied());
            }
        }
    }

    #[test]
    fn conn_set_is_a_set() {
        let mut rng = crate::stream(0xb7c1, 4);
        let mut conns = ConnSet::default();
        let mut set = std::collections::BTreeSet::new();
        for _ in 0..5_000u64 {
            let r = rng.next_u64();
            let conn = ConnId(r % 40);
            if r >> 63 == 0 {
                conns.insert(conn);
                set.insert(conn);
            } else {
                conns.remove(conn);
                set.remove(&conn);
            }
            for c in 0..40 {
                assert_eq!(conns.contains(ConnId(c)), set.contains(&ConnId(c)));
            }
        }
    }
}
