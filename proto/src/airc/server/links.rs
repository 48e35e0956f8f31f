//! Links (AIRC §4.6, §11): the `link` frame's operations (offer, accept, decline, revoke, a
//! [`GRANT_DIRECTION`] grant, and list, every link for an administrator), each stored first and
//! then told to the other side (§11.2): a notice in this realm, a control message to another
//! (§11.4), `linked` answering with its delivery; control messages for this realm taken in
//! §11.4's steps; `link.*` events (§13). The records, the operations' preconditions and §11.3's
//! decision are [`crate::airc::link`]'s; routing asks the decision inside policy
//! ([`super::route`]).

use super::acks::{MAX_PENDING, Upstream};
use super::events::Hop;
use super::records::{Record, RecordKey};
use super::remote::remote_key;
use super::{Output, Server};
use crate::airc::address::{Address, Face as AddressFace, Namespace};
use crate::airc::frame::{Ack, AckCode, AckStatus, Frame, LinkRequest, Linked, Msg, Object};
use crate::airc::link::{Direction, Grant, Link, Notice, Offer, Operation};
use crate::airc::policy::DEFAULT_REPLY_WINDOW;
use crate::airc::spool::Spooled;
use crate::airc::{audit, link};
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRng;

/// The one direction a client's `link op=grant` may create (§4.6, §11.2's lost table): the
/// peer may start, the granter only reply. A grant is active without the peer's word, so it
/// may open only the granter's own side; a link that lets the granter start is an offer.
pub const GRANT_DIRECTION: Direction = Direction::BInitiates;

/// The reply window a one-way link's far end answers in (§11.3 `in_reply_window(F, T)`, which
/// names no window): the one a `mode: "reply"` rule without `window` uses (§10.1).
pub const LINK_REPLY_WINDOW: Duration = DEFAULT_REPLY_WINDOW;

impl<R: CryptoRng> Server<R> {
    /// Forgets the link records that lost all effect [`link::LINK_RETENTION`] ago, here and in
    /// the store.
    pub(super) fn forget_lapsed_links(&mut self, now: Timestamp) {
        for id in self.links.forget_lapsed(now) {
            self.out.push_back(Output::Forget(RecordKey::Link { id }));
        }
    }

    fn linked_refusal(&mut self, conn: ConnId, reason: String) {
        let linked = Linked {
            ok: false,
            link: None,
            links: None,
            delivery: None,
            code: Some(AckCode::Refused.as_str().to_string()),
            reason: Some(reason),
        };
        self.send(conn, &Frame::Linked(linked));
    }

    fn linked_list(&mut self, conn: ConnId, links: Vec<Object>) {
        let linked = Linked {
            ok: true,
            link: None,
            links: Some(links),
            delivery: None,
            code: None,
            reason: None,
        };
        self.send(conn, &Frame::Linked(linked));
    }

    /// A client's `link` frame (§4.6): the operation is done here first, stored, and then the
    /// other side is told (§11.2); `linked` answers once that message has its ack.
    pub(super) fn link_request(&mut self, now: Timestamp, conn: ConnId, req: LinkRequest) {
        let (namespaces, admin) = self
            .conns
            .get(&conn)
            .map(|c| (c.namespaces.clone(), c.admin))
            .unwrap_or_default();
        // Names in link frames are relative to the realm, as bind names are (§4.3): Appendix A.2
        // offers `"as":"alice/x","peer":"bob/y"` from a client of namespace alice.
        let root = Namespace::root();
        let face = AddressFace::Client {
            realm: &self.config.realm,
            namespace: &root,
        };
        let acting = match req.acting.as_deref().map(|a| Address::resolve(a, face)) {
            Some(Ok(a)) => a,
            Some(Err(e)) => return self.linked_refusal(conn, format!("as: {e}")),
            None if req.op == "list" => {
                // Without `as`: every link of an endpoint in the connection's namespaces, or
                // every link at all for an administrator (§5).
                let realm = &self.config.realm;
                let mine = |p: &Address| {
                    admin || (p.realm() == realm && namespaces.iter().any(|ns| p.is_inside(ns)))
                };
                let links = self
                    .links
                    .list_all()
                    .into_iter()
                    .filter(|l| mine(&l.a) || mine(&l.b))
                    .map(Link::to_object)
                    .collect();
                return self.linked_list(conn, links);
            }
            None => return self.linked_refusal(conn, "as is required".into()),
        };
        // §5: `as` lies inside one of the connection's namespaces.
        // An administrator may also list any endpoint's links (§5); it acts for none.
        let inside =
            namespaces.iter().any(|ns| acting.is_inside(ns)) || (admin && req.op == "list");
        if acting.realm() != &self.config.realm || !inside {
            return self.linked_refusal(conn, format!("{acting} is outside your namespaces"));
        }
        let id = req.id.as_deref().unwrap_or_default();
        let peer = req
            .peer
            .as_deref()
            .and_then(|p| Address::resolve(p, face).ok());
        let direction = match req.direction.as_deref().map(Direction::parse) {
            None => None,
            Some(Some(d)) => Some(d),
            Some(None) => return self.linked_refusal(conn, "unknown direction".into()),
        };
        let done = match req.op.as_str() {
            "list" => {
                let links = self
                    .links
                    .list(&acting)
                    .into_iter()
                    .map(Link::to_object)
                    .collect();
                return self.linked_list(conn, links);
            }
            "offer" => {
                let Some(peer) = peer else {
                    return self.linked_refusal(conn, "peer is missing or not an address".into());
                };
                let offer = Offer {
                    acting,
                    peer,
                    direction: direction.unwrap_or(Direction::Both),
                    label: req.label.clone(),
                    expires: None,
                };
                self.links.offer(now, &mut self.rng, offer)
            }
            "grant" => {
                let Some(peer) = peer else {
                    return self.linked_refusal(conn, "peer is missing or not an address".into());
                };
                // A grant is active at once, with no word from `peer`: it may only open the
                // granter's own side (`peer` starts, `as` replies), never let `as` start a
                // conversation `peer` did not agree to. Anything more is an offer.
                let direction = direction.unwrap_or(GRANT_DIRECTION);
                if direction != GRANT_DIRECTION {
                    let why = format!(
                        "a grant is {}: the peer starts and you reply; offer for more",
                        GRANT_DIRECTION.as_str()
                    );
                    return self.linked_refusal(conn, why);
                }
                let grant = Grant {
                    a: acting,
                    b: peer,
                    direction,
                    label: req.label.clone(),
                    expires: None,
                    origin: None,
                };
                self.links.grant(now, &mut self.rng, grant)
            }
            "accept" => self.links.accept(now, &acting, id),
            "decline" => self.links.decline(now, &acting, id),
            "revoke" => self.links.revoke(now, &acting, id),
            other => return self.linked_refusal(conn, format!("unknown op {other}")),
        };
        match done {
            Ok(op) => {
                let record = op.link.to_object();
                self.link_done(now, Upstream::Linked(conn, record), op);
            }
            Err(refusal) => self.linked_refusal(conn, refusal.to_string()),
        }
    }

    /// Stores an operation's record, then tells the other side: a notice when it is an endpoint
    /// of this realm (Appendix A.2), a control message to its realm otherwise (§11.4).
    pub(super) fn link_done(&mut self, now: Timestamp, up: Upstream, op: Operation) {
        let record = op.link.to_object();
        self.out.push_back(Output::Persist(Record::Link {
            record: Box::new(record),
        }));
        let c = op.control;
        self.link_event(now, c.action, &c.link, &c.from, &c.to);
        let id = self.new_id();
        if c.to.realm() == &self.config.realm {
            let notice = Notice::new(c.action, &c.link, &c.from, &c.to).to_msg(id, now);
            self.notify(now, up, notice);
        } else {
            let item = self.originate(now, &remote_key(c.to.realm()), c.to_msg(id, now));
            self.deliver_remote(now, up, &c.to, item);
        }
    }

    /// A link control message for this realm (§11.4): store the record, ack, then notify the
    /// local endpoint; the notice's fate does not change the ack.
    pub(super) fn link_control(&mut self, now: Timestamp, up: Upstream, m: Msg) {
        let id = m.id.clone();
        match self.links.receive(now, &m) {
            Ok(got) => {
                if let (true, Ok(from), Ok(to)) = (
                    got.stored != link::Stored::Unchanged,
                    Address::parse(&m.from),
                    Address::parse(&m.to),
                ) {
                    self.link_event(now, got.action, &got.link, &from, &to);
                }
                if let Some(reply) = &got.reply {
                    self.link_event(now, reply.action, &reply.link, &reply.from, &reply.to);
                }
                let record = got.link.to_object();
                self.out.push_back(Output::Persist(Record::Link {
                    record: Box::new(record),
                }));
                self.passed(now, &m);
                self.answer(now, &up, &m, Ack::new(id, AckStatus::Delivered), Hop::Local);
                if let Some(n) = got.notice {
                    let notice = n.to_msg(self.new_id(), now);
                    self.notify(now, Upstream::Nobody, notice);
                }
                if let Some(reply) = got.reply {
                    let msg = reply.to_msg(self.new_id(), now);
                    let item = self.originate(now, &remote_key(reply.to.realm()), msg);
                    self.deliver_remote(now, Upstream::Nobody, &reply.to, item);
                }
            }
            Err(refusal) => {
                let mut ack = Ack::with_code(id, AckStatus::Failed, link::LinkRefusal::CODE);
                ack.reason = Some(refusal.to_string());
                self.answer(now, &up, &m, ack, Hop::Local);
            }
        }
    }

    /// A link changed (§13 `link.<action>`): who acted, toward whom, and the state it is in now.
    pub(super) fn link_event(
        &mut self,
        now: Timestamp,
        action: link::Action,
        l: &Link,
        from: &Address,
        to: &Address,
    ) {
        let kind = match action {
            link::Action::Offer => audit::Kind::LinkOffer,
            link::Action::Accept => audit::Kind::LinkAccept,
            link::Action::Decline => audit::Kind::LinkDecline,
            link::Action::Revoke => audit::Kind::LinkRevoke,
            link::Action::Grant => audit::Kind::LinkGrant,
        };
        let mut e = audit::event(now, kind);
        e.link = Some(l.id.clone());
        e.from = Some(from.to_string());
        e.to = Some(to.to_string());
        e.label.clone_from(&l.label);
        e.state = Some(l.state.as_str().to_string());
        e.passport = l.origin.as_ref().map(|o| o.passport.clone());
        self.emit(now, e);
    }

    /// Delivers a server-made notice to a local endpoint, past policy: it reports what control
    /// traffic already did (§11.4 step 4).
    pub(super) fn notify(&mut self, now: Timestamp, up: Upstream, msg: Msg) {
        let Ok(to) = Address::parse(&msg.to) else {
            return;
        };
        let item = self.originate(now, to.first_segment(), msg);
        if to.is_namespace() && to.realm() == &self.config.realm {
            return self.notify_namespace(now, up, &to, item);
        }
        self.deliver_local(now, up, &to, item);
    }

    /// A notice about a link whose side is a whole namespace (§11.1): it goes to the client
    /// bound for the namespace (its relay), or waits in the spool for one. §6.4's refusal of
    /// namespace references is for messages, which have no fan-out; a notice has one reader.
    fn notify_namespace(&mut self, now: Timestamp, up: Upstream, to: &Address, item: Spooled<Msg>) {
        let key = to.first_segment().to_string();
        match self.local_hop(to) {
            Some(client) if self.forwarded.pending_len() < MAX_PENDING => {
                self.forward(now, client, alloc::vec![up], key, item);
            }
            _ => {
                self.queue(now, &up, &key, item, AckCode::EndpointOffline);
            }
        }
    }
}
