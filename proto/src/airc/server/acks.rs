//! Acks (AIRC §4.4, §6.6): one answer per message to whoever waits for it, and what a next hop's
//! ack, its silence or its going away mean.
//!
//! - a message forwarded to a next hop waits for its ack ([`super::forwarded`], at most
//!   [`MAX_PENDING`]); the ack is relayed upstream unchanged (status, code, `by`, reason), and a
//!   `delivered` or `queued` one is recorded before it goes ([`super::records`]);
//! - the ack timeout: the message is spooled in flight, acked `queued no_ack` upstream, and
//!   settled by a late ack;
//! - a hop that closes, or answers `failed` with a reason beginning `link:`, gives its messages
//!   back to the spool, `queued endpoint_offline` or `queued authority_unreachable`;
//! - §3.2: a message that outgrew the frame limit on its way fails `refused` rather than go out.

use super::conn::Face;
use super::events::{Hop, audit_kind, msg_event};
use super::forwarded::Pending;
use super::passports::GrantWait;
use super::records::{Record, RecordKey};
use super::spool_flush::weighed;
use super::{Output, Server, Timer};
use crate::airc::frame::{Ack, AckCode, AckStatus, Frame, Linked, Msg, Object};
use crate::airc::framing;
use crate::airc::spool::Spooled;
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use rand_core::CryptoRng;

/// Forwarded messages awaiting an ack at most, across all connections. Past it a message that
/// would be forwarded is spooled instead (it is still accepted, never dropped).
pub const MAX_PENDING: usize = 65_536;

/// Where an ack goes once the next hop answers.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Upstream {
    /// Relay it over this connection.
    Conn(ConnId),
    /// The message came out of the spool under this key: nobody waits upstream.
    Spool(String),
    /// A link control message or notice sent for a client's `link` frame: answer the client
    /// with `linked`, reporting the delivery (§4.6).
    Linked(ConnId, Object),
    /// A notice the server sent on its own: its ack changes nothing (§11.4 step 4).
    Nobody,
    /// A redemption sent for a client's `passport op=redeem`: answer it with `passported`,
    /// reporting the ack (§12.4: "the ack to this message is the result").
    Passported(ConnId),
    /// A grant sent for a redemption (§12.5): the redemption is answered once the redeemer's
    /// server has acked the grant.
    Grant(Box<GrantWait>),
}

impl Upstream {
    /// The connection waiting on this answer, if any: a grant's is the redemption's.
    pub(super) fn waiter(&self) -> Option<ConnId> {
        match self {
            Self::Conn(c) | Self::Linked(c, _) | Self::Passported(c) => Some(*c),
            Self::Grant(w) => w.up.waiter(),
            Self::Spool(_) | Self::Nobody => None,
        }
    }

    /// `conn` closed, and the host may give its id to a new connection: nothing waits there
    /// any more. Returns whether nothing is left of this upstream. A grant's wait stays with
    /// nobody to answer, since the grant's ack still settles the passport's use (§12.5).
    pub(super) fn forget(&mut self, conn: ConnId) -> bool {
        match self {
            Self::Grant(w) => {
                if w.up.forget(conn) {
                    w.up = Self::Nobody;
                }
                false
            }
            _ => self.waiter() == Some(conn),
        }
    }
}

impl<R: CryptoRng> Server<R> {
    pub(super) fn ack(&mut self, conn: ConnId, ack: Ack) {
        let slot = match ack.status {
            AckStatus::Delivered => 0,
            AckStatus::Queued => 1,
            AckStatus::Failed => 2,
        };
        self.stats.acks[slot] += 1;
        if self.conns.contains_key(&conn) {
            self.send(conn, &Frame::Ack(ack));
        }
    }

    /// Gives a message's one answer to whoever waits for it, and writes it to the audit log
    /// (§13) as `msg.<status>`, `hop` saying where the message is now.
    pub(super) fn answer(&mut self, now: Timestamp, up: &Upstream, m: &Msg, ack: Ack, hop: Hop) {
        // A message this server wrote failed here (on its way out, or the spool was full): its
        // copy is done with. A `delivered` or `queued` from the next hop is `downstream_ack`'s,
        // and one from this server's spool leaves the copy to the spool.
        if ack.status == AckStatus::Failed {
            self.forget_originated(m);
        }
        let mut e = msg_event(now, audit_kind(ack.status), m, hop);
        e.id = Some(ack.id.clone());
        e.status = Some(status_text(ack.status).to_string());
        e.code.clone_from(&ack.code);
        e.reason.clone_from(&ack.reason);
        e.by.clone_from(&ack.by);
        self.emit(now, e);
        self.answer_quietly(now, up, ack);
    }

    /// The answer without an audit event: for a message whose event is already written.
    fn answer_quietly(&mut self, now: Timestamp, up: &Upstream, ack: Ack) {
        match up {
            Upstream::Passported(conn) => self.redeem_answered(*conn, ack),
            Upstream::Grant(w) => self.grant_answered(now, w, ack),
            Upstream::Conn(c) => self.ack(*c, ack),
            Upstream::Linked(conn, link) => {
                let linked = Linked {
                    ok: true,
                    link: Some(link.clone()),
                    links: None,
                    delivery: Some(status_text(ack.status).to_string()),
                    code: ack.code,
                    reason: ack.reason,
                };
                if self.conns.contains_key(conn) {
                    self.send(*conn, &Frame::Linked(linked));
                }
            }
            Upstream::Spool(_) | Upstream::Nobody => {}
        }
    }

    pub(super) fn answer_code(
        &mut self,
        now: Timestamp,
        up: &Upstream,
        m: &Msg,
        (status, code): (AckStatus, AckCode),
        hop: Hop,
    ) {
        let ack = Ack::with_code(&m.id, status, code);
        self.answer(now, up, m, ack, hop);
    }

    pub(super) fn forward(
        &mut self,
        now: Timestamp,
        hop: ConnId,
        ups: Vec<Upstream>,
        key: String,
        item: Spooled<Msg>,
    ) {
        // A copy already on its way (one that waited for a dial beside it, or came back from the
        // spool): wait with it for its answer, as `route` has a copy do.
        if self.forwarded.is_pending(&item.id) {
            return self.forwarded.join(&item.id, ups);
        }
        let bytes = framing::encode(&Frame::Msg(item.msg.clone()));
        if bytes.len() > framing::MAX_FRAME_BYTES {
            return self.too_large_to_forward(now, hop, ups, &item.msg, bytes.len());
        }
        self.send_bytes(hop, bytes);
        self.timers.schedule(
            now + self.config.ack_timeout,
            Timer::Ack(hop, item.id.clone()),
        );
        self.forwarded.insert(Pending::new(hop, ups, item, key));
    }

    /// §3.2: no frame over the limit is written. A `msg` that fit when it came can outgrow it on
    /// its way (its addresses written in full, `via`, the realm's signature), and then it can
    /// never be forwarded: it fails here, `refused` with the reason, rather than have the next
    /// hop close its connection over it (which would spool it, to fail the same way again).
    pub(super) fn too_large_to_forward(
        &mut self,
        now: Timestamp,
        hop: ConnId,
        ups: Vec<Upstream>,
        m: &Msg,
        len: usize,
    ) {
        self.stats.too_large_to_forward += 1;
        if ups.iter().any(|u| matches!(u, Upstream::Spool(_))) {
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: m.id.clone() }));
        }
        let mut ack = Ack::with_code(&m.id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some(format!(
            "too large to forward: {len} bytes, over {}",
            framing::MAX_FRAME_BYTES
        ));
        let face = self.conns.get(&hop).map_or(Face::Client, |c| c.face);
        self.answer(now, &Upstream::Nobody, m, ack.clone(), Hop::on(face));
        for u in &ups {
            self.answer_quietly(now, u, ack.clone());
        }
    }

    /// An ack from a next hop (§6.6).
    pub(super) fn downstream_ack(&mut self, now: Timestamp, conn: ConnId, ack: Ack) {
        let Some(p) = self.forwarded.take(conn, &ack.id) else {
            // A late ack for a message that timed out and was spooled in flight: settled.
            if self.forwarded.is_in_flight_on(&ack.id, conn) && self.spool.settle(&ack.id) {
                self.forwarded.land(&ack.id);
                self.stats.settled += 1;
                self.out
                    .push_back(Output::Forget(RecordKey::Spooled { id: ack.id }));
            } else {
                self.stats.stray_acks += 1;
            }
            return;
        };
        self.timers.cancel(&Timer::Ack(conn, ack.id.clone()));
        let face = self.conns.get(&conn).map_or(Face::Client, |c| c.face);
        let link_dropped = ack.status == AckStatus::Failed
            && ack
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("link:"));
        if link_dropped {
            return self.requeue(now, p, dropped_hop_code(face));
        }
        let from_spool = p.is_from_spool();
        if ack.status != AckStatus::Failed && !from_spool {
            self.passed(now, &p.item.msg);
        }
        // Whatever the answer, the next hop has it or refused it: a copy this server wrote is
        // done with (a `queued` there is held there, not here).
        self.forget_originated(&p.item.msg);
        if from_spool {
            // Whatever the answer, the spool's copy has been dealt with.
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: ack.id.clone() }));
        }
        // Relayed unchanged: status, code, by, reason (§6.6); one event for the message.
        self.answer(
            now,
            &Upstream::Nobody,
            &p.item.msg,
            ack.clone(),
            Hop::on(face),
        );
        for u in p.upstreams() {
            self.answer_quietly(now, u, ack.clone());
        }
    }

    pub(super) fn ack_timeout(&mut self, now: Timestamp, hop: ConnId, id: String) {
        let Some(p) = self.forwarded.take(hop, &id) else {
            return;
        };
        let from_spool = p.is_from_spool();
        let (item, key, ups) = p.into_parts();
        if !from_spool {
            let record = Record::Spooled {
                key: key.clone(),
                msg: Box::new(item.msg.clone()),
            };
            self.out.push_back(Output::Persist(record));
            self.passed(now, &item.msg);
        }
        let msg = item.msg.clone();
        self.spool.push_in_flight(&key, weighed(item));
        self.originated.remove(&id);
        self.forwarded.fly(id.clone(), hop);
        self.arm_flush(now);
        let queued = Ack::with_code(&id, AckStatus::Queued, AckCode::NoAck);
        self.answer(now, &Upstream::Nobody, &msg, queued.clone(), Hop::Spool);
        for u in &ups {
            self.answer_quietly(now, u, queued.clone());
        }
    }

    /// A forwarded message whose hop went away: back into the spool, and `queued` upstream.
    pub(super) fn requeue(&mut self, now: Timestamp, p: Pending, code: AckCode) {
        let from_spool = p.is_from_spool();
        let (item, key, ups) = p.into_parts();
        let msg = item.msg.clone();
        // One from the spool is still durably stored from when it was first spooled.
        if !from_spool {
            let record = Record::Spooled {
                key: key.clone(),
                msg: Box::new(msg.clone()),
            };
            self.out.push_back(Output::Persist(record));
            self.passed(now, &msg);
        }
        self.spool.requeue(&key, alloc::vec![weighed(item)]);
        self.originated.remove(&msg.id);
        self.arm_flush(now);
        let queued = Ack::with_code(&msg.id, AckStatus::Queued, code);
        self.answer(now, &Upstream::Nobody, &msg, queued.clone(), Hop::Spool);
        for u in &ups {
            self.answer_quietly(now, u, queued.clone());
        }
    }
}

/// The code of a message queued again because its next hop went before acking it: its
/// connection closed, or it answered `failed` with a reason beginning `link:` (§6.6). A client
/// hop is its endpoint's (§6.4: offline), a peer hop its authority's (§6.5: unreachable).
pub(super) fn dropped_hop_code(face: Face) -> AckCode {
    match face {
        Face::Client => AckCode::EndpointOffline,
        Face::Peer => AckCode::AuthorityUnreachable,
    }
}

pub(super) fn status_text(status: AckStatus) -> &'static str {
    match status {
        AckStatus::Delivered => "delivered",
        AckStatus::Queued => "queued",
        AckStatus::Failed => "failed",
    }
}
