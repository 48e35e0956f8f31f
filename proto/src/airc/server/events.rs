//! The audit stream and the counters (AIRC §4.9, §4.10, §13): every event written durably
//! ([`Record::Audit`]) and handed to the subscribers
//! [`crate::airc::audit`] picks, a subscriber past its budget closed; no event carries a message
//! body. `subscribe` scoped to the connection's namespaces (§5), and `stat`'s counters.

use super::conn::Face;
use super::records::Record;
use super::{Output, Server};
use crate::airc::frame::{AckStatus, ErrorCode, Event, Frame, Msg};
use crate::airc::signing::DEFAULT_TYPE as TEXT_PLAIN;
use crate::airc::{audit, framing};
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::string::ToString;
use rand_core::CryptoRng;

/// Where a message is when its audit event is written (§13's `hop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hop {
    /// A bound client took it (or answered for it).
    Client,
    /// Another realm's server took it (or answered for it).
    Peer,
    /// This server answered it itself: a refusal, the resolver, control traffic.
    Local,
    /// It is held in the spool.
    Spool,
}

impl Hop {
    /// Where a message is once it went out on a connection of `face`.
    pub(super) fn on(face: Face) -> Self {
        match face {
            Face::Peer => Hop::Peer,
            Face::Client => Hop::Client,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Hop::Client => "client",
            Hop::Peer => "peer",
            Hop::Local => "local",
            Hop::Spool => "spool",
        }
    }
}

impl<R: CryptoRng> Server<R> {
    /// Writes an event to the audit log (§13), durably, and hands it to the subscribers who see
    /// it; a subscriber past its budget is closed ([`audit::SUBSCRIBER_RATE`]).
    /// Every text field is first cut to [`audit::MAX_EVENT_FIELD_BYTES`]: a refused frame's
    /// fields are the sender's, of any length up to the frame limit.
    pub(super) fn emit(&mut self, now: Timestamp, mut event: Event) {
        audit::bound_fields(&mut event);
        let fanout = self.audit.fan_out(now, &event);
        self.stats.events += 1;
        if !fanout.to.is_empty() {
            let bytes = framing::encode(&Frame::Event(Box::new(event.clone())));
            for conn in fanout.to {
                self.out.push_back(Output::Send {
                    conn,
                    bytes: bytes.clone(),
                });
            }
        }
        for conn in fanout.slow {
            self.stats.slow_subscribers += 1;
            self.close(conn);
        }
        self.out.push_back(Output::Persist(Record::Audit {
            event: Box::new(event),
        }));
    }

    /// §4.9: a client asks for the live audit stream, scoped to its namespaces.
    pub(super) fn subscribe(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        sub: &crate::airc::frame::Subscribe,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (namespaces, admin) = (c.namespaces.clone(), c.admin);
        match self
            .audit
            .subscribe(now, conn, sub.kinds.as_deref(), &namespaces, admin)
        {
            Ok(subscribed) => self.send(conn, &Frame::Subscribed(subscribed)),
            Err(e @ audit::SubscribeRefusal::NoScope) => {
                self.fail(conn, ErrorCode::Forbidden, &e.to_string());
            }
            Err(e) => self.fail(conn, ErrorCode::BadFrame, &e.to_string()),
        }
    }

    /// §4.10: implementation-defined counters.
    pub(super) fn stat(&mut self, conn: ConnId) {
        let s = &self.stats;
        let mut counters = crate::airc::frame::Object::new();
        for (name, value) in [
            ("connections", self.conns.len() as u64),
            ("spooled", self.spool.len() as u64),
            ("spooled_bytes", self.spool.bytes() as u64),
            ("pending", self.forwarded.pending_len() as u64),
            ("frames", s.frames),
            ("messages", s.messages),
            ("delivered", s.acks[0]),
            ("queued", s.acks[1]),
            ("failed", s.acks[2]),
            ("protocol_errors", s.protocol_errors),
            ("stray_acks", s.stray_acks),
            ("settled", s.settled),
            ("expired", s.expired),
            ("events", s.events),
            ("slow_subscribers", s.slow_subscribers),
            ("too_large_to_forward", s.too_large_to_forward),
            ("parked_overflows", s.parked_overflows),
            ("spool_full", s.spool_full),
        ] {
            counters.insert(name.to_string(), value.into());
        }
        self.send(conn, &Frame::Stats(crate::airc::frame::Stats { counters }));
    }
}

/// A message's audit event (§13): its addresses, type, `re` and body length, never the body.
pub(super) fn msg_event(now: Timestamp, kind: audit::Kind, m: &Msg, hop: Hop) -> Event {
    let mut e = audit::event(now, kind);
    e.id = Some(m.id.clone());
    e.from = Some(m.from.clone());
    e.to = Some(m.to.clone());
    e.hop = Some(hop.as_str().to_string());
    e.kind_of_msg = m.kind.clone().filter(|k| k != TEXT_PLAIN);
    e.re.clone_from(&m.re);
    e.bytes = Some(m.body.len() as u64);
    e
}

pub(super) fn audit_kind(status: AckStatus) -> audit::Kind {
    match status {
        AckStatus::Delivered => audit::Kind::MsgDelivered,
        AckStatus::Queued => audit::Kind::MsgQueued,
        AckStatus::Failed => audit::Kind::MsgFailed,
    }
}
