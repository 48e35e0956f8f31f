//! Routing (AIRC §6.1–§6.4): the pipeline every message takes, in the spec's order, with exactly
//! one ack per accepted message over the connection it came on.
//!
//! - §6.2 a client's message: its addresses resolved in its namespace, `from` inside the
//!   connection's namespaces and written canonically, `via` cleared; a peer's message: only the
//!   peer's own realm, only for this realm (no transit), signed by a published key (§9.3) unless
//!   the peer is trusted unsigned;
//! - §6.2 expiry and duplicate suppression (§7.3); a copy of a message still on its way waits
//!   with it for the same answer;
//! - §6.3 control traffic before policy: link control ([`super::links`]) and passport
//!   redemptions ([`super::passports`]);
//! - §6.4 and §10.2 policy, egress and ingress, with §11.3's link decision handed in; then local
//!   delivery: the resolver, reserved paths, the selected client, or the spool for a known
//!   namespace (`queued endpoint_offline`), `no_such_path` otherwise.
//!
//! Remote delivery (§6.5) is [`super::remote`]'s.

use super::Server;
use super::acks::{MAX_PENDING, Upstream};
use super::events::Hop;
use super::links::LINK_REPLY_WINDOW;
use crate::airc::address::{Address, Face as AddressFace, Namespace, RESOLVER};
use crate::airc::frame::{Ack, AckCode, AckStatus, Frame, Msg};
use crate::airc::passport::{PASSPORT_ENDPOINT, PASSPORT_TYPE};
use crate::airc::signing::Signed;
use crate::airc::spool::{DEFAULT_TTL, Spooled};
use crate::airc::{link, policy, signing, spool};
use crate::core::{ConnId, Timestamp};
use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRng;

impl<R: CryptoRng> Server<R> {
    pub(super) fn client_msg(&mut self, now: Timestamp, conn: ConnId, mut m: Msg) {
        self.stats.messages += 1;
        let namespaces = self
            .conns
            .get(&conn)
            .map(|c| c.namespaces.clone())
            .unwrap_or_default();
        // §6.2 validate, canonicalize, authenticate.
        let ctx = namespaces.first().cloned().unwrap_or_else(Namespace::root);
        let face = AddressFace::Client {
            realm: &self.config.realm,
            namespace: &ctx,
        };
        let (Ok(from), Ok(to)) = (
            Address::resolve(&m.from, face),
            Address::resolve(&m.to, face),
        ) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        let Some(ts) = signing::ts_ms(m.ts).map(Timestamp::from_millis) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        if from.realm() != &self.config.realm
            || !from.is_endpoint()
            || !namespaces.iter().any(|ns| from.is_inside(ns))
        {
            return self.refuse(now, conn, &m, AckCode::Refused);
        }
        m.via = None;
        m.from = from.to_string();
        m.to = to.to_string();
        self.route(now, Upstream::Conn(conn), &from, &to, ts, m);
    }

    /// §6.2 for a message from a peer that said realm P: only P's own messages, only for this
    /// realm, and signed by a published key of P unless P is trusted unsigned.
    pub(super) fn peer_msg(&mut self, now: Timestamp, conn: ConnId, mut m: Msg) {
        let Some(peer) = self.conns.get(&conn).and_then(|c| c.peer.clone()) else {
            return;
        };
        // An unsigned message from a signing realm is refused without asking for keys.
        let keys = if self.is_trusted_unsigned(&peer) || m.sigstrings().is_empty() {
            Vec::new()
        } else {
            match self.keys_or_park(now, conn, &peer, || Frame::Msg(m.clone())) {
                Some(keys) => keys,
                None => return,
            }
        };
        self.stats.messages += 1;
        let (Ok(from), Ok(to)) = (Address::parse(&m.from), Address::parse(&m.to)) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        let Some(ts) = signing::ts_ms(m.ts) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        if from.realm() != &peer || to.realm() != &self.config.realm {
            return self.refuse(now, conn, &m, AckCode::Refused);
        }
        if !self.is_trusted_unsigned(&peer) {
            // Signed over the URIs as they appear on the wire (§9.3).
            let signed = Signed {
                id: &m.id,
                from: &m.from,
                to: &m.to,
                ts_ms: ts,
                kind: m.kind.as_deref(),
                re: m.re.as_deref(),
                body: &m.body,
            };
            let text = signed.canonical();
            let ok = signing::verify_any(self.crypto, &keys, text.as_bytes(), &m.sigstrings());
            if !ok {
                return self.refuse(now, conn, &m, AckCode::Refused);
            }
        }
        m.from = from.to_string();
        m.to = to.to_string();
        self.route(
            now,
            Upstream::Conn(conn),
            &from,
            &to,
            Timestamp::from_millis(ts),
            m,
        );
    }

    /// The rest of §6 once the origin is authenticated: expiry, dedupe, then delivery.
    pub(super) fn route(
        &mut self,
        now: Timestamp,
        up: Upstream,
        from: &Address,
        to: &Address,
        ts: Timestamp,
        m: Msg,
    ) {
        let id = m.id.clone();
        let ttl = m.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
        // §6.2 expiry and dedupe.
        if spool::is_expired(ts, ttl, now) {
            return self.answer_code(
                now,
                &up,
                &m,
                (AckStatus::Failed, AckCode::Expired),
                Hop::Local,
            );
        }
        if self.seen.contains(now, &id) {
            let dup = (AckStatus::Delivered, AckCode::Duplicate);
            return self.answer_code(now, &up, &m, dup, Hop::Local);
        }
        // A copy of a message still waiting on its next hop: wait with it for the same answer.
        if self.forwarded.is_pending(&id) {
            return self.forwarded.join(&id, [up]);
        }
        // §6.3 control traffic, before policy: link controls for this realm are taken here, and
        // link controls leaving it are admitted independently of message policy (§11.5 caps
        // them where they are made). Passport redemptions are not built yet: `_passport` is
        // answered as a reserved path.
        if m.kind.as_deref() == Some(PASSPORT_TYPE) && to.segments() == [PASSPORT_ENDPOINT] {
            if to.realm() == &self.config.realm {
                return self.redeem(now, up, from, m);
            }
            // §16.5: redemptions cross policy, like offers; the issuer limits them (§12.5).
            let item = Spooled {
                id: id.clone(),
                ts,
                ttl,
                msg: m,
                bytes: 0,
            };
            return self.deliver_remote(now, up, to, item);
        }
        if m.kind.as_deref() == Some(link::CONTROL_TYPE) {
            if to.realm() == &self.config.realm {
                return self.link_control(now, up, m);
            }
            let item = Spooled {
                id: id.clone(),
                ts,
                ttl,
                msg: m,
                bytes: 0,
            };
            return self.deliver_remote(now, up, to, item);
        }
        // §6.4 policy: this realm's own, whether the message leaves it or arrives (§10.2).
        let (links, replies) = (&self.links, &self.replies);
        // §11.3: the newest decisive link between the two; a one-way link lets its far end answer
        // inside the reply window.
        let link_decision = |f: &Address, t: &Address| {
            let d = links.decide(now, f, t);
            let allow = d.resolve(|| replies.in_reply_window(now, f, t, LINK_REPLY_WINDOW))?;
            let reason = d.deny_reason(f);
            Some(if allow {
                policy::LinkDecision::allow(reason)
            } else {
                policy::LinkDecision::deny(reason)
            })
        };
        let decision = self
            .config
            .policy
            .check(now, from, to, &link_decision, replies);
        if !decision.allowed {
            let mut ack = Ack::with_code(&id, AckStatus::Failed, AckCode::Refused);
            ack.reason = Some(decision.reason());
            return self.answer(now, &up, &m, ack, Hop::Local);
        }
        let item = Spooled {
            id: id.clone(),
            ts,
            ttl,
            msg: m,
            bytes: 0,
        };
        if to.realm() == &self.config.realm && to.realm().port().is_none() {
            self.deliver_local(now, up, to, item);
        } else {
            self.deliver_remote(now, up, to, item);
        }
    }

    /// §6.4 local delivery.
    pub(super) fn deliver_local(
        &mut self,
        now: Timestamp,
        up: Upstream,
        to: &Address,
        item: Spooled<Msg>,
    ) {
        let id = item.id.clone();
        if to.is_namespace() {
            let refusal = (AckStatus::Failed, AckCode::NamespaceNotEndpoint);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        if to.segments() == [RESOLVER] {
            self.passed(now, &item.msg);
            let ack = Ack::new(id, AckStatus::Delivered);
            return self.answer(now, &up, &item.msg, ack, Hop::Local);
        }
        if to.segments() == [PASSPORT_ENDPOINT] {
            // §12.5: reserved and handled by the server; any other type is no_such_path.
            let refusal = (AckStatus::Failed, AckCode::NoSuchPath);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        let client = self.binds.select(to);
        if to.is_reserved() && client.is_none() {
            let refusal = (AckStatus::Failed, AckCode::NoSuchPath);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        let key = to.first_segment().to_string();
        if let Some(client) = client {
            if self.forwarded.pending_len() < MAX_PENDING {
                return self.forward(now, client, alloc::vec![up], key, item);
            }
        } else if !self
            .config
            .known_namespaces
            .iter()
            .any(|ns| ns.segments().first() == Some(&key))
        {
            let mut ack = Ack::with_code(id, AckStatus::Failed, AckCode::NoSuchPath);
            ack.by = Some(format!("airc://{}/{RESOLVER}", self.config.realm));
            return self.answer(now, &up, &item.msg, ack, Hop::Local);
        }
        self.queue(now, &up, &key, item, AckCode::EndpointOffline);
    }

    /// A message refused before routing (§6.2): its one ack, `failed` with `code`.
    fn refuse(&mut self, now: Timestamp, conn: ConnId, m: &Msg, code: AckCode) {
        let refusal = (AckStatus::Failed, code);
        self.answer_code(now, &Upstream::Conn(conn), m, refusal, Hop::Local);
    }

    /// The local client to hand a message for `to`: §4.3's selection for an endpoint, the
    /// namespace's relay for a namespace reference (notices only).
    pub(super) fn local_hop(&self, to: &Address) -> Option<ConnId> {
        if to.is_namespace() {
            self.binds.select_namespace(to)
        } else {
            self.binds.select(to)
        }
    }
}
