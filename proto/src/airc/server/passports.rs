//! Passports (AIRC §4.7, §12): `passport` new, list, redeem and revoke; the redemption sent as a
//! control message (§12.4); the issuer's `_passport` (§12.5: the checks in order, the grant
//! recorded at the redeemer's server before the ack, the issuing endpoint told); revocation with
//! `and_links` (§12.6); `passport.*` events (§13). The records and their rules live in
//! [`crate::airc::passport::book`].

use super::acks::{Upstream, status_text};
use super::events::Hop;
use super::records::Record;
use super::remote::remote_key;
use super::{Output, Server};
use crate::airc::address::{Address, Face as AddressFace, Namespace};
use crate::airc::frame::{Ack, AckCode, AckStatus, Event, Frame, Msg, PassportRequest, Passported};
use crate::airc::link::{Direction, Grant, Link, LinkOrigin, LinkState, Notice};
use crate::airc::passport::book::{Issuance, Issue, PassportRecord, Use};
use crate::airc::passport::{PASSPORT_ENDPOINT, PASSPORT_TYPE, Passport, REDEMPTION_TTL};
use crate::airc::pattern::Pattern;
use crate::airc::{audit, link};
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use rand_core::CryptoRng;

/// A redemption waiting for its grant's ack (§12.5).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct GrantWait {
    /// Who waits for the redemption's answer.
    pub(super) up: Upstream,
    /// The redemption message.
    pub(super) redemption: Msg,
    /// The granted link.
    pub(super) link: String,
    /// The passport redeemed.
    pub(super) passport: String,
}

impl<R: CryptoRng> Server<R> {
    fn passported(&mut self, conn: ConnId, p: Passported) {
        self.send(conn, &Frame::Passported(Box::new(p)));
    }

    fn passported_refusal(&mut self, conn: ConnId, reason: String) {
        let mut p = empty_passported(false);
        p.code = Some(AckCode::Refused.as_str().to_string());
        p.reason = Some(reason);
        self.passported(conn, p);
    }

    fn persist_passport(&mut self, rec: &PassportRecord) {
        self.out.push_back(Output::Persist(Record::Passport {
            record: Box::new(rec.to_object(true)),
        }));
    }

    /// A passport event (§13) with the record's id, endpoint, label, state and uses.
    fn passport_event(&mut self, now: Timestamp, kind: audit::Kind, rec: &PassportRecord) -> Event {
        let mut e = audit::event(now, kind);
        e.passport = Some(rec.id.clone());
        e.endpoint = Some(rec.endpoint.to_string());
        e.label.clone_from(&rec.label);
        e.state = Some(rec.state.as_str().to_string());
        e.uses = Some(rec.uses);
        e.uses_left = Some(rec.uses_left());
        e
    }

    /// A client's `passport` frame (§4.7): `as` must lie inside the connection's namespaces
    /// (§5) unless the host marked it an administrator's.
    pub(super) fn passport_request(&mut self, now: Timestamp, conn: ConnId, req: &PassportRequest) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (namespaces, admin) = (c.namespaces.clone(), c.admin);
        let root = Namespace::root();
        let face = AddressFace::Client {
            realm: &self.config.realm,
            namespace: &root,
        };
        let acting = match req.acting.as_deref().map(|a| Address::resolve(a, face)) {
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => return self.passported_refusal(conn, format!("as: {e}")),
            None => None,
        };
        if let Some(a) = &acting {
            let inside = namespaces.iter().any(|ns| a.is_inside(ns));
            if a.realm() != &self.config.realm || !(inside || admin) || !a.is_endpoint() {
                let why = format!("{a} is outside your namespaces");
                return self.passported_refusal(conn, why);
            }
        }
        match req.op.as_str() {
            "new" => self.passport_new(now, conn, acting, admin, req),
            "list" => {
                let realm = &self.config.realm;
                let mine = |r: &PassportRecord| match &acting {
                    Some(a) => r.endpoint.key() == a.key() || r.issued_by.key() == a.key(),
                    None => {
                        admin
                            || (r.endpoint.realm() == realm
                                && namespaces.iter().any(|ns| r.endpoint.is_inside(ns)))
                    }
                };
                let list = self
                    .passports
                    .all()
                    .filter(|r| mine(r))
                    .map(|r| r.to_object(false))
                    .collect();
                let mut p = empty_passported(true);
                p.passports = Some(list);
                self.passported(conn, p);
            }
            "redeem" => match acting {
                Some(a) => self.redeem_request(now, conn, a, req),
                None => self.passported_refusal(conn, "as is required".into()),
            },
            "revoke" => self.passport_revoke(now, conn, acting, admin, req),
            other => {
                let op: String = other.chars().take(32).collect();
                self.passported_refusal(conn, format!("unknown op {op}"));
            }
        }
    }

    /// §12.3: issue a passport; the token is in this answer and nowhere else.
    fn passport_new(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        acting: Option<Address>,
        admin: bool,
        req: &PassportRequest,
    ) {
        let allowed = match self.config.passports.issuance {
            Issuance::Agents => true,
            Issuance::OwnerOnly => admin,
            Issuance::Off => false,
        };
        if !allowed {
            return self.passported_refusal(conn, "this realm does not let you issue".into());
        }
        let Some(endpoint) = acting else {
            return self.passported_refusal(conn, "as is required".into());
        };
        let direction = match req.direction.as_deref().map(Direction::parse) {
            None => Direction::Both,
            Some(Some(d)) => d,
            Some(None) => return self.passported_refusal(conn, "unknown direction".into()),
        };
        let bind_to = match req.to.as_deref().map(Pattern::parse) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => return self.passported_refusal(conn, format!("to: {e}")),
        };
        if req
            .label
            .as_ref()
            .is_some_and(|l| l.len() > link::MAX_LABEL_BYTES)
        {
            return self.passported_refusal(conn, "label too long".into());
        }
        let issue = Issue {
            issued_by: endpoint.clone(),
            endpoint: endpoint.clone(),
            label: req.label.clone(),
            direction,
            uses: req.uses,
            ttl: req.ttl,
            link_ttl: req.link_ttl,
            bind_to,
        };
        let issued = match self.passports.issue(now, &mut self.rng, issue) {
            Ok(i) => i,
            Err(e) => return self.passported_refusal(conn, e.to_string()),
        };
        let rec = issued.record.clone();
        self.persist_passport(&rec);
        let e = self.passport_event(now, audit::Kind::PassportIssue, &rec);
        self.emit(now, e);
        let issuer = self.config.realm.to_string();
        let rendered = Passport {
            issuer: issuer.clone(),
            endpoint: Some(endpoint.segments().join("/")),
            token: issued.token.clone(),
        };
        let mut p = empty_passported(true);
        p.passport = Some(rec.to_object(false));
        p.line = Some(rendered.line());
        p.url = self
            .config
            .passports
            .web_base
            .as_deref()
            .map(|base| rendered.url(base));
        p.file = Some(rec.file(&issuer, &issued.token));
        self.passported(conn, p);
    }

    /// §12.6: revoke a passport and, with `and_links`, the links it created.
    fn passport_revoke(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        acting: Option<Address>,
        admin: bool,
        req: &PassportRequest,
    ) {
        let Some(id) = req.id.as_deref().or(req.passport.as_deref()) else {
            return self.passported_refusal(conn, "id is required".into());
        };
        let rec = match self.passports.revoke(id, acting.as_ref(), admin) {
            Ok(r) => r.clone(),
            Err(e) => return self.passported_refusal(conn, e.to_string()),
        };
        self.persist_passport(&rec);
        let e = self.passport_event(now, audit::Kind::PassportRevoke, &rec);
        self.emit(now, e);
        let mut revoked = Vec::new();
        if req.and_links == Some(true) {
            let ids: Vec<(String, Address)> = self
                .links
                .list_all()
                .into_iter()
                .filter(|l| l.origin.as_ref().is_some_and(|o| o.passport == rec.id))
                .filter(|l| matches!(l.state, LinkState::Pending | LinkState::Active))
                .map(|l| (l.id.clone(), l.a.clone()))
                .collect();
            for (lid, a) in ids {
                if let Ok(op) = self.links.revoke(now, &a, &lid) {
                    revoked.push(lid);
                    self.link_done(now, Upstream::Nobody, op);
                }
            }
        }
        let mut p = empty_passported(true);
        p.passport = Some(rec.to_object(false));
        p.revoked_links = Some(revoked);
        self.passported(conn, p);
    }

    /// §12.4: the redeemer's server sends the redemption; its ack is the answer.
    fn redeem_request(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        redeemer: Address,
        req: &PassportRequest,
    ) {
        let parsed = req.passport.as_deref().map(Passport::parse);
        let passport = match parsed {
            Some(Ok(p)) => p,
            Some(Err(e)) => return self.passported_refusal(conn, e.to_string()),
            None => return self.passported_refusal(conn, "passport is required".into()),
        };
        let Ok(to) = Address::parse(&format!("airc://{}/{PASSPORT_ENDPOINT}", passport.issuer))
        else {
            return self.passported_refusal(conn, "the issuer is not a realm".into());
        };
        let body = serde_json::json!({
            "action": "redeem",
            "token": passport.token,
            "redeemer": redeemer.key().to_string(),
        });
        let m = Msg {
            id: self.new_id(),
            from: redeemer.to_string(),
            to: to.to_string(),
            ts: link::to_secs(now),
            body: body.to_string(),
            kind: Some(PASSPORT_TYPE.to_string()),
            re: None,
            ttl: Some(REDEMPTION_TTL),
            via: None,
            hdr: None,
        };
        self.stats.messages += 1;
        self.route(now, Upstream::Passported(conn), &redeemer, &to, now, m);
    }

    /// The redemption's ack came back: `passported` with its status, and the link on success.
    pub(super) fn redeem_answered(&mut self, conn: ConnId, ack: Ack) {
        let granted = ack
            .reason
            .as_deref()
            .and_then(|r| r.strip_prefix("link "))
            .and_then(|r| r.strip_suffix(" granted"));
        let mut p = empty_passported(ack.status != AckStatus::Failed);
        p.link = granted
            .filter(|_| ack.status == AckStatus::Delivered)
            .and_then(|id| self.links.get(id))
            .map(Link::to_object);
        p.status = Some(ack.status);
        p.code = ack.code;
        p.reason = ack.reason;
        if self.conns.contains_key(&conn) {
            self.passported(conn, p);
        }
    }

    /// Where a redemption comes from, for the failure limit (§12.5): another realm as a whole
    /// (its server vouches only for its realm), or a namespace of this one.
    fn redemption_source(&self, from: &Address) -> String {
        if from.realm() == &self.config.realm {
            format!("local:{}", from.first_segment())
        } else {
            format!("realm:{}", from.realm())
        }
    }

    /// §12.5 at the issuer: check, create the link, have the redeemer's server record it, then
    /// notify the endpoint and ack.
    pub(super) fn redeem(&mut self, now: Timestamp, up: Upstream, from: &Address, m: Msg) {
        let source = self.redemption_source(from);
        let body: Option<serde_json::Value> = serde_json::from_str(&m.body).ok();
        let token = body
            .as_ref()
            .filter(|b| b.get("action").and_then(|a| a.as_str()) == Some("redeem"))
            .and_then(|b| b.get("token"))
            .and_then(|t| t.as_str());
        let rec = match self.passports.check(now, &source, token, from) {
            Ok(rec) => rec,
            Err(why) => return self.redeem_failed(now, &up, &m, None, why.reason()),
        };
        let grant = Grant {
            a: rec.endpoint.clone(),
            b: from.clone(),
            direction: rec.direction,
            label: rec.label.clone(),
            expires: Some(now.saturating_add(rec.link_ttl)),
            origin: Some(LinkOrigin {
                passport: rec.id.clone(),
                issued_by: Some(rec.issued_by.to_string()),
                redeemed_by: Some(from.to_string()),
            }),
        };
        let op = match self.links.grant(now, &mut self.rng, grant) {
            Ok(op) => op,
            Err(e) => {
                let why = e.to_string();
                return self.redeem_failed(now, &up, &m, Some(&rec), &why);
            }
        };
        let lid = op.link.id.clone();
        self.out.push_back(Output::Persist(Record::Link {
            record: Box::new(op.link.to_object()),
        }));
        let used = Use {
            redeemer: from.without_fragment(),
            at: now,
            link: lid.clone(),
        };
        if let Some(r) = self.passports.used(&rec.id, used).cloned() {
            self.persist_passport(&r);
        }
        self.link_event(now, link::Action::Grant, &op.link, &op.link.a, &op.link.b);
        let c = op.control;
        if c.to.realm() == &self.config.realm {
            // The redeemer is this realm's: the grant is recorded in this very table.
            let notice = Notice::new(c.action, &c.link, &c.from, &c.to).to_msg(self.new_id(), now);
            self.notify(now, Upstream::Nobody, notice);
            self.redeemed(now, &up, &m, &lid, &rec.id);
        } else {
            let msg = c.to_msg(self.new_id(), now);
            let item = self.originate(now, &remote_key(c.to.realm()), msg);
            let wait = GrantWait {
                up,
                redemption: m,
                link: lid,
                passport: rec.id.clone(),
            };
            self.deliver_remote(now, Upstream::Grant(Box::new(wait)), &c.to, item);
        }
    }

    /// A refused redemption: `failed refused` with §12.5's reason, and a `passport.redeem`
    /// event saying so (§13).
    fn redeem_failed(
        &mut self,
        now: Timestamp,
        up: &Upstream,
        m: &Msg,
        rec: Option<&PassportRecord>,
        why: &str,
    ) {
        let mut e = match rec {
            Some(r) => self.passport_event(now, audit::Kind::PassportRedeem, r),
            None => audit::event(now, audit::Kind::PassportRedeem),
        };
        e.from = Some(m.from.clone());
        e.status = Some(status_text(AckStatus::Failed).to_string());
        e.code = Some(AckCode::Refused.as_str().to_string());
        e.reason = Some(why.to_string());
        self.emit(now, e);
        let mut ack = Ack::with_code(&m.id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some(why.to_string());
        self.answer(now, up, m, ack, Hop::Local);
    }

    /// The grant is recorded at the redeemer's server: tell the issuing endpoint and ack the
    /// redemption `delivered`, `"link <id> granted"` (§12.5).
    fn redeemed(&mut self, now: Timestamp, up: &Upstream, m: &Msg, lid: &str, pid: &str) {
        let (Some(rec), Some(l)) = (
            self.passports.get(pid).cloned(),
            self.links.get(lid).cloned(),
        ) else {
            return;
        };
        let Ok(from) = Address::parse(&m.from) else {
            return;
        };
        let body = link::redeemed_text(pid, &l, &from, &rec.endpoint, rec.uses_left());
        let notice = Notice {
            action: link::Action::Grant,
            link_id: lid.to_string(),
            from: from.without_fragment(),
            to: rec.endpoint.clone(),
            body,
        };
        let notice = notice.to_msg(self.new_id(), now);
        self.notify(now, Upstream::Nobody, notice);
        let mut e = self.passport_event(now, audit::Kind::PassportRedeem, &rec);
        e.from = Some(m.from.clone());
        e.link = Some(lid.to_string());
        e.status = Some(status_text(AckStatus::Delivered).to_string());
        self.emit(now, e);
        self.passed(now, m);
        let mut ack = Ack::new(&m.id, AckStatus::Delivered);
        ack.reason = Some(format!("link {lid} granted"));
        self.answer(now, up, m, ack, Hop::Local);
    }

    /// The redeemer's server answered the grant. Only `delivered` means it recorded the link;
    /// anything else revokes it here (the revoke follows a spooled grant in order, §7.4), gives
    /// the use back and refuses the redemption.
    pub(super) fn grant_answered(&mut self, now: Timestamp, w: &GrantWait, ack: Ack) {
        if ack.status == AckStatus::Delivered {
            return self.redeemed(now, &w.up, &w.redemption, &w.link, &w.passport);
        }
        let a = self.links.get(&w.link).map(|l| l.a.clone());
        if let Some(op) = a.and_then(|a| self.links.revoke(now, &a, &w.link).ok()) {
            self.link_done(now, Upstream::Nobody, op);
        }
        let rec = self.passports.unuse(&w.passport, &w.link).cloned();
        if let Some(r) = &rec {
            self.persist_passport(r);
        }
        let why = format!(
            "link grant not recorded ({} {})",
            status_text(ack.status),
            ack.code.as_deref().unwrap_or("")
        );
        self.redeem_failed(now, &w.up, &w.redemption, rec.as_ref(), why.trim_end());
    }
}

/// A `passported` with nothing but `ok`.
fn empty_passported(ok: bool) -> Passported {
    Passported {
        ok,
        passport: None,
        line: None,
        file: None,
        url: None,
        passports: None,
        status: None,
        reason: None,
        code: None,
        link: None,
        revoked_links: None,
    }
}
