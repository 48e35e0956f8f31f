//! Remote delivery (AIRC §6.5, §7.1, §7.4): a message for another realm.
//!
//! The hop limit and loop check ([`MAX_VIA`]), `via` stamped, the realm's signature (§9.3);
//! then it goes over an authenticated link to its realm, or waits one ack timeout for a link to
//! come up (the host is asked to dial, [`super::locate`]), or is spooled under the authority's
//! key (`queued authority_unreachable`). A link coming up sends its authority's backlog, then
//! what waited for it, in the order they were accepted.

use super::acks::{MAX_PENDING, Upstream};
use super::events::Hop;
use super::records::Record;
use super::{Output, Server, Timer};
use crate::airc::address::{Address, Authority};
use crate::airc::frame::{AckCode, AckStatus, Msg};
use crate::airc::signing::Signed;
use crate::airc::spool::Spooled;
use crate::core::index::remove_from_set;
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use rand_core::CryptoRng;

/// How many hops a message may take: a `via` this long is a routing loop (§6.5).
pub const MAX_VIA: usize = 8;

/// Messages waiting for a link to their realm, by realm in the order they came, and how many
/// in all: every remote message asks the count, so it is kept rather than summed. Indexed by
/// the connection waiting on each, which a close must find without walking them all.
#[derive(Debug, Default)]
pub(super) struct Awaiting {
    by_realm: BTreeMap<Authority, BTreeMap<u64, (Upstream, Spooled<Msg>)>>,
    /// (realm, number) of each message by the connection waiting on its answer.
    waited_by: BTreeMap<ConnId, BTreeSet<(Authority, u64)>>,
    next: u64,
    len: usize,
}

impl Awaiting {
    pub(super) fn push(&mut self, realm: &Authority, up: Upstream, item: Spooled<Msg>) {
        let n = self.next;
        self.next += 1;
        if let Some(c) = up.waiter() {
            self.waited_by
                .entry(c)
                .or_default()
                .insert((realm.clone(), n));
        }
        self.by_realm
            .entry(realm.clone())
            .or_default()
            .insert(n, (up, item));
        self.len += 1;
    }

    /// What waits for `realm`, in the order it came, taken out.
    pub(super) fn take(&mut self, realm: &Authority) -> Vec<(Upstream, Spooled<Msg>)> {
        let taken = self.by_realm.remove(realm).unwrap_or_default();
        self.len -= taken.len();
        taken
            .into_iter()
            .map(|(n, (up, item))| {
                if let Some(c) = up.waiter() {
                    remove_from_set(&mut self.waited_by, &c, &(realm.clone(), n));
                }
                (up, item)
            })
            .collect()
    }

    /// `conn` closed: what it waits for still goes on, answered to nobody (see
    /// [`Upstream::forget`]).
    pub(super) fn forget(&mut self, conn: ConnId) {
        for (realm, n) in self.waited_by.remove(&conn).unwrap_or_default() {
            let waiting = self.by_realm.get_mut(&realm).and_then(|w| w.get_mut(&n));
            if let Some((up, _)) = waiting
                && up.forget(conn)
            {
                *up = Upstream::Nobody;
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl<R: CryptoRng> Server<R> {
    /// §6.5 remote delivery, as far as it goes without the peer face: the message is checked,
    /// stamped and signed, then held for the authority until a link to it comes up.
    pub(super) fn deliver_remote(
        &mut self,
        now: Timestamp,
        up: Upstream,
        to: &Address,
        mut item: Spooled<Msg>,
    ) {
        let realm = self.config.realm.to_string();
        let via = item.msg.via.get_or_insert_with(Vec::new);
        if let Err(code) = stamp_via(via, &realm) {
            return self.answer_code(now, &up, &item.msg, (AckStatus::Failed, code), Hop::Local);
        }
        if self.config.signing_key.is_some() && item.msg.sigstrings().is_empty() {
            let m = &item.msg;
            let signed = Signed {
                id: &m.id,
                from: &m.from,
                to: &m.to,
                ts_ms: item.ts.as_millis(),
                kind: m.kind.as_deref(),
                re: m.re.as_deref(),
                body: &m.body,
            };
            if let Some(sig) = self.sign(signed.canonical().as_bytes()) {
                item.msg.set_sigstrings(&[&sig.to_string()]);
            }
        }
        let realm = to.realm().clone();
        if self.originated.contains_key(&item.id) {
            self.out.push_back(Output::Persist(Record::Spooled {
                key: remote_key(&realm),
                msg: Box::new(item.msg.clone()),
            }));
        }
        if self.forwarded.pending_len() + self.awaiting.len() >= MAX_PENDING {
            return self.hold_for(now, up, &realm, item);
        }
        match self.link_to(&realm) {
            Some(link) => {
                let up = alloc::vec![up];
                self.forward(now, link, up, remote_key(&realm), item);
            }
            None => {
                // Dial, and give the link one ack timeout to come up before spooling.
                if self
                    .timers
                    .deadline_of(&Timer::Dial(realm.clone()))
                    .is_none()
                {
                    let at = now + self.config.ack_timeout;
                    self.timers.schedule(at, Timer::Dial(realm.clone()));
                }
                self.awaiting.push(&realm, up, item);
                self.connect(now, &realm);
            }
        }
    }

    /// No link to `realm` may be waited for: spool the message under it and ack `queued
    /// authority_unreachable`.
    fn hold_for(&mut self, now: Timestamp, up: Upstream, realm: &Authority, item: Spooled<Msg>) {
        // Messages already waiting for the realm are older: they go into the spool first, so
        // that nothing of the key is ever spooled ahead of one still waiting (see `link_up`).
        self.no_link(now, realm);
        let key = remote_key(realm);
        if self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable) {
            self.connect(now, realm);
        }
    }

    /// An authenticated link to `realm` came up: its backlog goes out, then what waited for it.
    ///
    /// That is the order they were accepted in (§7.4: order per key): every spooled message of
    /// the key is older than every waiting one. A message waits only while no authenticated link
    /// to the realm is up, and every link that comes up empties the wait, so what the spool got
    /// back from a link (requeued when it dropped or failed `link:`, spooled in flight on a
    /// timeout) was sent before the first waiting message came; restored records came before
    /// anything waited; and whatever else spools under the key empties the wait into the spool
    /// first ([`Self::no_link`], [`Self::hold_for`]).
    pub(super) fn link_up(&mut self, now: Timestamp, conn: ConnId, realm: &Authority) {
        self.timers.cancel(&Timer::Dial(realm.clone()));
        let key = remote_key(realm);
        self.flush(now, &key);
        for (up, item) in self.awaiting.take(realm) {
            // A flush leaves a backlog only when `MAX_PENDING` is reached, and nothing is acked
            // meanwhile: then every waiting message joins the backlog, behind it, in order.
            if self.forwarded.pending_len() < MAX_PENDING {
                self.forward(now, conn, alloc::vec![up], key.clone(), item);
            } else {
                self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable);
            }
        }
    }

    /// Spools what waits for `realm`, in order, each acked `queued authority_unreachable`: no
    /// link to it came up in time, every dial failed, or nothing more may wait.
    /// The periodic flush dials again; dialling here would retry a failed realm at once.
    pub(super) fn no_link(&mut self, now: Timestamp, realm: &Authority) {
        self.timers.cancel(&Timer::Dial(realm.clone()));
        let key = remote_key(realm);
        for (up, item) in self.awaiting.take(realm) {
            self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable);
        }
    }
}

/// §6.5's hop check, then the stamp: `routing_loop` when `realm` is already in `via` or `via`
/// holds [`MAX_VIA`] hops; otherwise `realm` is appended.
///
/// With no transit (§6.2: a peer's message must be for this realm, so it is never delivered
/// remotely) and a client's `via` cleared, every message reaching it has an empty `via`: the
/// check guards the rule for a `via` that arrives some other way, and is proved by the unit
/// test below rather than by traffic.
fn stamp_via(via: &mut Vec<String>, realm: &str) -> Result<(), AckCode> {
    if via.iter().any(|r| r == realm) || via.len() >= MAX_VIA {
        return Err(AckCode::RoutingLoop);
    }
    via.push(realm.to_string());
    Ok(())
}

/// The spool key of a remote destination (§7.1): its authority, written `//authority` so that it
/// can never collide with a local key, which is a bare path segment.
pub(super) fn remote_key(authority: &Authority) -> String {
    format!("//{authority}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_via_refuses_this_realm_or_eight_hops_and_appends_otherwise() {
        let hops = |n: usize| -> Vec<String> { (0..n).map(|i| format!("r{i}.example")).collect() };
        let mut via = Vec::new();
        assert_eq!(stamp_via(&mut via, "example.com"), Ok(()));
        assert_eq!(via, ["example.com"]);
        // Seven hops before this one: the eighth is allowed.
        let mut via = hops(7);
        assert_eq!(stamp_via(&mut via, "example.com"), Ok(()));
        assert_eq!(via.len(), MAX_VIA);
        // Eight already: the hop limit.
        let mut via = hops(8);
        assert_eq!(
            stamp_via(&mut via, "example.com"),
            Err(AckCode::RoutingLoop)
        );
        assert_eq!(via, hops(8), "unchanged when refused");
        // This realm seen before: a loop, however short.
        let mut via = alloc::vec!["a.example".to_string(), "example.com".to_string()];
        assert_eq!(
            stamp_via(&mut via, "example.com"),
            Err(AckCode::RoutingLoop)
        );
    }
}
