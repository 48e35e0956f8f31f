//! Where forwarded messages wait for their next hop's ack (AIRC §6.5–§6.6): pending on the
//! connection they went out on, or, once that ack timed out, in flight from the spool.
//!
//! Each message is kept by its id, since every routed message asks whether a copy is already on
//! its way, and indexed by the connections it involves, since a connection that closes or
//! idles must find its own messages: without the indexes, anyone who connects and hangs up
//! would make the server walk every message in the table ([`super::MAX_PENDING`]).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use super::acks::Upstream;
use crate::airc::frame::Msg;
use crate::airc::spool::Spooled;
use crate::core::ConnId;

/// A message forwarded to a next hop, awaiting its ack.
#[derive(Debug)]
pub(super) struct Pending {
    /// The connection it went out on: only an ack read there answers it.
    hop: ConnId,
    /// Who hears the answer. Changed only here, so the upstream index stays true.
    upstreams: Vec<Upstream>,
    pub(super) item: Spooled<Msg>,
    key: String,
}

impl Pending {
    /// A message about to go out on `hop`, for `upstreams`.
    pub(super) fn new(
        hop: ConnId,
        upstreams: Vec<Upstream>,
        item: Spooled<Msg>,
        key: String,
    ) -> Self {
        Self {
            hop,
            upstreams,
            item,
            key,
        }
    }

    /// Who hears the answer.
    pub(super) fn upstreams(&self) -> &[Upstream] {
        &self.upstreams
    }

    /// Its message, spool key and upstreams, for what is done once it no longer waits.
    pub(super) fn into_parts(self) -> (Spooled<Msg>, String, Vec<Upstream>) {
        (self.item, self.key, self.upstreams)
    }

    /// Whether it came out of the spool, which still holds its copy.
    pub(super) fn is_from_spool(&self) -> bool {
        self.upstreams
            .iter()
            .any(|u| matches!(u, Upstream::Spool(_)))
    }
}

/// The forwarded messages: pending by id and in flight by id, each indexed by connection.
#[derive(Debug, Default)]
pub(super) struct Forwarded {
    pending: BTreeMap<String, Pending>,
    /// (hop, id) of every pending message.
    pending_on: BTreeSet<(ConnId, String)>,
    /// (connection, id) for every connection waiting on a pending message's answer (a client,
    /// a peer link a message came on, a redemption's behind its grant: `Upstream::waiter`).
    awaited_by: BTreeSet<(ConnId, String)>,
    /// Spooled messages in flight (§6.6), by id, with the hop whose late ack would settle them.
    in_flight: BTreeMap<String, ConnId>,
    /// (hop, id) of every message in flight.
    in_flight_on: BTreeSet<(ConnId, String)>,
}

impl Forwarded {
    /// How many messages wait for a next hop's ack.
    pub(super) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// How many spooled messages are in flight.
    pub(super) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether `id` waits for a next hop's ack.
    pub(super) fn is_pending(&self, id: &str) -> bool {
        self.pending.contains_key(id)
    }

    /// `ups` wait for the answer to `id` too: a copy of it came while it was on its way. Asked
    /// only of a pending `id` ([`Self::is_pending`]).
    pub(super) fn join(&mut self, id: &str, ups: impl IntoIterator<Item = Upstream>) {
        let Some(p) = self.pending.get_mut(id) else {
            return debug_assert!(false, "{id} joined but not pending");
        };
        for u in ups {
            if let Some(c) = u.waiter() {
                self.awaited_by.insert((c, id.into()));
            }
            p.upstreams.push(u);
        }
    }

    /// Files a message that went out on its hop.
    pub(super) fn insert(&mut self, p: Pending) {
        let id = p.item.id.clone();
        self.pending_on.insert((p.hop, id.clone()));
        for c in p.upstreams.iter().filter_map(Upstream::waiter) {
            self.awaited_by.insert((c, id.clone()));
        }
        if let Some(old) = self.pending.insert(id, p) {
            // `route` and `forward` join a copy to the one on its way rather than send it again.
            unreachable!("{} forwarded twice at once", old.item.id);
        }
    }

    /// The message `id` waiting on `hop`, taken out: an ack or a timeout on another connection
    /// is not its answer.
    pub(super) fn take(&mut self, hop: ConnId, id: &str) -> Option<Pending> {
        if self.pending.get(id)?.hop != hop {
            return None;
        }
        let p = self.pending.remove(id)?;
        self.unindex(id, &p);
        Some(p)
    }

    /// Every message waiting on `hop`, taken out, by id.
    pub(super) fn take_all_on(&mut self, hop: ConnId) -> Vec<Pending> {
        let ids = ids_on(&self.pending_on, hop);
        ids.iter().filter_map(|id| self.take(hop, id)).collect()
    }

    /// Whether any message waits for `hop`'s ack.
    pub(super) fn waits_on(&self, hop: ConnId) -> bool {
        self.pending_on
            .range((hop, String::new())..)
            .next()
            .is_some_and(|(c, _)| *c == hop)
    }

    /// The connection `conn` closed: its answers have nowhere to go (see [`Upstream::forget`]).
    pub(super) fn forget_upstream(&mut self, conn: ConnId) {
        for id in ids_on(&self.awaited_by, conn) {
            self.awaited_by.remove(&(conn, id.clone()));
            if let Some(p) = self.pending.get_mut(&id) {
                p.upstreams.retain_mut(|u| !u.forget(conn));
            }
        }
    }

    /// A spooled message whose ack timed out on `hop`: a late ack there settles it.
    pub(super) fn fly(&mut self, id: String, hop: ConnId) {
        // The entry of an earlier flight goes first: it may be this one, on the same hop.
        if let Some(old) = self.in_flight.insert(id.clone(), hop) {
            self.in_flight_on.remove(&(old, id.clone()));
        }
        self.in_flight_on.insert((hop, id));
    }

    /// Whether `id` is in flight on `hop`.
    pub(super) fn is_in_flight_on(&self, id: &str, hop: ConnId) -> bool {
        self.in_flight.get(id) == Some(&hop)
    }

    /// `id` is no longer in flight (settled, expired or sent again).
    pub(super) fn land(&mut self, id: &str) {
        if let Some(hop) = self.in_flight.remove(id) {
            self.in_flight_on.remove(&(hop, id.into()));
        }
    }

    /// Every message in flight on `hop`, landed: no late ack can come once it closed.
    pub(super) fn land_all_on(&mut self, hop: ConnId) -> Vec<String> {
        let ids = ids_on(&self.in_flight_on, hop);
        for id in &ids {
            self.land(id);
        }
        ids
    }

    fn unindex(&mut self, id: &str, p: &Pending) {
        self.pending_on.remove(&(p.hop, id.into()));
        for c in p.upstreams.iter().filter_map(Upstream::waiter) {
            self.awaited_by.remove(&(c, id.into()));
        }
    }
}

/// The ids filed under `conn` in an index of (connection, id), in id order.
fn ids_on(index: &BTreeSet<(ConnId, String)>, conn: ConnId) -> Vec<String> {
    index
        .range((conn, String::new())..)
        .take_while(|(c, _)| *c == conn)
        .map(|(_, id)| id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Timestamp;
    use alloc::string::ToString;
    use alloc::vec;
    use core::time::Duration;

    fn msg(id: &str) -> Msg {
        Msg {
            id: id.into(),
            from: "//a.example/x".into(),
            to: "//b.example/y".into(),
            ts: 0.0,
            body: String::new(),
            kind: None,
            re: None,
            ttl: None,
            via: None,
            hdr: None,
        }
    }

    fn pending(id: &str, hop: u64, ups: Vec<Upstream>) -> Pending {
        let msg = msg(id);
        let item = Spooled {
            id: id.into(),
            ts: Timestamp::from_secs(0),
            ttl: Duration::from_secs(60),
            msg,
            bytes: 0,
        };
        Pending::new(ConnId(hop), ups, item, "y".to_string())
    }

    fn ids(taken: &[Pending]) -> Vec<&str> {
        taken.iter().map(|p| p.item.id.as_str()).collect()
    }

    #[test]
    fn a_closed_connection_is_forgotten_even_inside_a_grants_wait_which_stays() {
        let (gone, other) = (ConnId(1), ConnId(2));
        let grant = |up| {
            Upstream::Grant(alloc::boxed::Box::new(super::super::passports::GrantWait {
                up,
                redemption: msg("r1"),
                link: "L00000001".into(),
                passport: "p".into(),
            }))
        };
        let mut up = grant(Upstream::Passported(gone));
        assert_eq!(up.waiter(), Some(gone));
        assert!(!up.forget(other));
        assert_eq!(
            up.waiter(),
            Some(gone),
            "another connection's close changes nothing"
        );
        assert!(
            !up.forget(gone),
            "the grant's wait stays, to settle the passport's use"
        );
        assert_eq!(up, grant(Upstream::Nobody));
        for up in [Upstream::Conn(gone), Upstream::Passported(gone)] {
            let mut up = up;
            assert!(up.forget(gone), "{up:?}");
        }
        assert!(!Upstream::Conn(other).forget(gone));
        assert!(!Upstream::Nobody.forget(gone));
    }

    #[test]
    fn a_closed_hop_takes_exactly_its_own_messages() {
        let mut f = Forwarded::default();
        f.insert(pending("m2", 7, vec![Upstream::Conn(ConnId(1))]));
        f.insert(pending("m1", 7, vec![]));
        f.insert(pending("m3", 8, vec![]));
        assert!(f.waits_on(ConnId(7)) && f.waits_on(ConnId(8)) && !f.waits_on(ConnId(6)));
        assert_eq!(ids(&f.take_all_on(ConnId(7))), ["m1", "m2"]);
        assert!(!f.waits_on(ConnId(7)) && f.is_pending("m3"));
        assert_eq!(f.pending_len(), 1);
        assert!(f.take_all_on(ConnId(7)).is_empty());
        assert!(f.take(ConnId(7), "m3").is_none(), "not its hop");
        assert!(f.take(ConnId(8), "m3").is_some());
        assert_eq!(f.pending_on.len() + f.awaited_by.len(), 0);
    }

    #[test]
    fn a_closed_sender_is_forgotten_by_every_message_it_waits_on_and_only_by_them() {
        let mut f = Forwarded::default();
        f.insert(pending("m1", 7, vec![Upstream::Conn(ConnId(1))]));
        f.insert(pending("m2", 7, vec![Upstream::Conn(ConnId(2))]));
        f.join("m2", [Upstream::Passported(ConnId(1)), Upstream::Nobody]);
        f.forget_upstream(ConnId(1));
        let taken = f.take_all_on(ConnId(7));
        assert_eq!(taken[0].upstreams(), []);
        assert_eq!(
            taken[1].upstreams(),
            [Upstream::Conn(ConnId(2)), Upstream::Nobody]
        );
        assert!(f.awaited_by.is_empty());
    }

    #[test]
    fn a_closed_hop_lands_exactly_its_messages_in_flight() {
        let mut f = Forwarded::default();
        f.fly("m1".into(), ConnId(7));
        f.fly("m2".into(), ConnId(8));
        f.fly("m3".into(), ConnId(7));
        // Sent again on another hop and timed out there: only that hop's late ack settles it.
        f.fly("m3".into(), ConnId(9));
        // And again on the same hop (a copy after the duplicate window): still filed under it.
        f.fly("m2".into(), ConnId(8));
        assert!(f.is_in_flight_on("m3", ConnId(9)) && !f.is_in_flight_on("m3", ConnId(7)));
        assert_eq!(f.land_all_on(ConnId(7)), ["m1"]);
        assert_eq!(f.in_flight_len(), 2);
        assert_eq!(f.land_all_on(ConnId(8)), ["m2"]);
        f.land("m3");
        assert_eq!(f.in_flight_len() + f.in_flight_on.len(), 0);
    }
}
