//! The peers one node has admitted, by room, as its outputs said.
//!
//! Every frame a node sends after the handshake, and every message handed to it, asks whether a
//! peer is admitted in a room. A hashed map of rooms paid a SipHash of the room's name and a
//! miss on its control bytes and another on its entry, then a tree node, at 10 000 nodes. A
//! node is in one room or a few, each holding at most `MAX_ROOM_PEERS`, so a short list of
//! rooms, each with its peers in one sorted buffer, answers with a compare of the name and a
//! binary search in memory the node's own recent sends have just touched.

/// One node's admitted peers (by number, `Net::numbers`) per room; see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Admitted {
    rooms: Vec<(Box<str>, Vec<u32>)>,
}

impl Admitted {
    /// The peers admitted in `room`, sorted, if the node ever admitted one there.
    fn peers(&self, room: &str) -> Option<&Vec<u32>> {
        self.rooms
            .iter()
            .find_map(|(r, peers)| (**r == *room).then_some(peers))
    }

    /// Whether `peer` is admitted in `room`.
    pub(super) fn contains(&self, room: &str, peer: u32) -> bool {
        self.peers(room)
            .is_some_and(|peers| peers.binary_search(&peer).is_ok())
    }

    /// Admits `peer` in `room`; whether it was not admitted there already.
    pub(super) fn insert(&mut self, room: &str, peer: u32) -> bool {
        let at = match self.rooms.iter().position(|(r, _)| **r == *room) {
            Some(at) => at,
            None => {
                self.rooms.push((room.into(), Vec::new()));
                self.rooms.len() - 1
            }
        };
        let peers = &mut self.rooms[at].1;
        match peers.binary_search(&peer) {
            Ok(_) => false,
            Err(i) => {
                peers.insert(i, peer);
                true
            }
        }
    }

    /// How many (room, peer) admissions there are.
    pub(super) fn len(&self) -> usize {
        self.rooms.iter().map(|(_, peers)| peers.len()).sum()
    }

    /// Drops `peer` from `room`; whether it was admitted there.
    pub(super) fn remove(&mut self, room: &str, peer: u32) -> bool {
        let Some((_, peers)) = self.rooms.iter_mut().find(|(r, _)| **r == *room) else {
            return false;
        };
        match peers.binary_search(&peer) {
            Ok(i) => {
                peers.remove(i);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use rand_core::Rng as _;

    use super::*;

    /// Random admissions and departures answer as a map of sets does.
    #[test]
    fn answers_as_a_map_of_sets() {
        let mut rng = crate::stream(0xad, 1);
        let mut admitted = Admitted::default();
        let mut reference: HashMap<String, BTreeSet<u32>> = HashMap::new();
        for _ in 0..20_000 {
            let r = rng.next_u64();
            let room = ["a", "b", "room-c", ""][(r % 4) as usize];
            let peer = (r >> 8) as u32 % 40;
            match (r >> 40) % 3 {
                0 => assert_eq!(
                    admitted.insert(room, peer),
                    reference.entry(room.to_owned()).or_default().insert(peer)
                ),
                1 => assert_eq!(
                    admitted.remove(room, peer),
                    reference.get_mut(room).is_some_and(|p| p.remove(&peer))
                ),
                _ => assert_eq!(
                    admitted.contains(room, peer),
                    reference.get(room).is_some_and(|p| p.contains(&peer))
                ),
            }
        }
    }
}
