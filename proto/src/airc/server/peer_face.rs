//! The peer face (AIRC §8.4, §9.4): opening and keeping links between realms.
//!
//! - the dialler's hello, signed over a fresh nonce ([`NONCE_BYTES`]), and its check of the
//!   welcome (`realm_mismatch`, `peer_unverified`);
//! - the acceptor's check of the hello (a signature by a published key within
//!   [`HELLO_WINDOW`], or a trusted-unsigned realm), each signed nonce good once
//!   ([`MAX_HELLO_NONCES`]), and its signed welcome;
//! - only authenticated links are sent on, found by realm without walking the connections; a
//!   dialled link idle for [`LINK_IDLE`] is closed; `peer.up` (§13) for each link that opens;
//! - a frame that needs its realm's keys waits for them, with what follows it, up to
//!   [`MAX_PARKED_BYTES`].
//!
//! Where a realm is dialled and which keys verify it (§8.1–§8.2) is [`super::locate`]'s; what a
//! link coming up sends is [`super::remote`]'s.

use super::conn::{Face, Source, State};
use super::locate::Keys;
use super::{Server, Timer};
use crate::airc::address::Authority;
use crate::airc::frame::{ErrorCode, Frame, Hello, PROTO, Role, Welcome};
use crate::airc::{audit, framing, signing};
use crate::codec::hex;
use crate::core::bounded::ExpiringInsert;
use crate::core::index::remove_from_set;
use crate::core::{ConnId, Timestamp};
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRng;

/// How far a peer hello's `ts` may be from now and still authenticate its link (§8.4, §9.4).
pub const HELLO_WINDOW: Duration = Duration::from_secs(300);

/// Random bytes in the nonce of a hello this server sends (§8.4), written as hex.
pub const NONCE_BYTES: usize = 16;

/// The most peer hellos whose nonces are remembered (§8.4), so that a signed hello captured and
/// replayed within its window is refused: each is kept until its `ts` leaves [`HELLO_WINDOW`],
/// at most twice that window. Only hellos whose signature verified are remembered, and each as
/// a 32-byte digest, so a realm with a valid key cannot grow the table past 2 MiB with long
/// nonces; when it is full the entry expiring soonest makes room.
pub const MAX_HELLO_NONCES: usize = 65_536;

/// How long a link this server dialled may carry no frame either way before it closes it
/// (§8.4: "MAY close a dialled link idle for 600 s"). Mail spooled afterwards dials again.
pub const LINK_IDLE: Duration = Duration::from_secs(600);

/// The most bytes a connection may send while its first frame waits for its realm's keys (§8.2:
/// a DNS answer, at most [`locate::DNS_TIMEOUT`](super::locate::DNS_TIMEOUT) away): nothing is read meanwhile, so what comes
/// waits in memory. Sixteen frames of the largest size; past it the connection is closed (a
/// genuine peer dials again and finds the keys cached).
pub const MAX_PARKED_BYTES: usize = 16 * framing::MAX_FRAME_BYTES;

/// The authenticated peer links open (§8.4), by realm: every remote message and every flush of
/// a remote key asks for one, so they are not looked for among all connections.
#[derive(Debug, Default)]
pub(super) struct PeerLinks(BTreeMap<Authority, BTreeSet<ConnId>>);

impl PeerLinks {
    fn add(&mut self, realm: &Authority, conn: ConnId) {
        self.0.entry(realm.clone()).or_default().insert(conn);
    }

    pub(super) fn forget(&mut self, realm: &Authority, conn: ConnId) {
        remove_from_set(&mut self.0, realm, &conn);
    }

    /// The first link to `realm` by connection id, as the host numbered them.
    pub(super) fn to(&self, realm: &Authority) -> Option<ConnId> {
        self.0.get(realm).and_then(|links| links.first().copied())
    }
}

impl<R: CryptoRng> Server<R> {
    pub(super) fn is_trusted_unsigned(&self, realm: &Authority) -> bool {
        self.config.trusted_unsigned.contains(realm)
    }

    /// The keys that verify `realm` (§8.2), or `None` when they are being asked for and `frame`
    /// has been parked on `conn` until they come.
    pub(super) fn keys_or_park(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        realm: &Authority,
        frame: impl FnOnce() -> Frame,
    ) -> Option<Vec<[u8; 32]>> {
        match self.published_keys(now, realm) {
            Keys::Known(keys) => Some(keys),
            Keys::Pending => {
                self.park(conn, realm, frame());
                None
            }
        }
    }

    /// The accepting side: a peer claims realm P. Its link is authenticated when P is trusted
    /// unsigned, or its hello is signed by a published key of P within 300 s of now.
    pub(super) fn peer_hello(&mut self, now: Timestamp, conn: ConnId, h: &Hello) {
        let Some(peer) = h.realm.as_deref().and_then(|r| Authority::parse(r).ok()) else {
            return self.fail(conn, ErrorCode::BadFrame, "a peer hello names its realm");
        };
        let (Some(ts), Some(nonce)) = (h.ts, h.nonce.as_deref()) else {
            return self.fail(
                conn,
                ErrorCode::BadFrame,
                "a peer hello carries ts and nonce",
            );
        };
        let fresh = Timestamp::from_secs(ts).abs_diff(now) <= HELLO_WINDOW;
        // Keys are looked up only when they could authenticate the link.
        let keys = if self.is_trusted_unsigned(&peer) || h.sig.is_none() || !fresh {
            Vec::new()
        } else {
            match self.keys_or_park(now, conn, &peer, || Frame::Hello(h.clone())) {
                Some(keys) => keys,
                // Said, and waiting for its realm's keys: no longer a silent connection.
                None => return self.hello_done(conn),
            }
        };
        let canonical =
            signing::hello_canonical(&peer.to_string(), &self.config.realm.to_string(), ts, nonce);
        let signed = h.sig.as_deref().is_some_and(|sig| {
            signing::verify_any(self.crypto, &keys, canonical.as_bytes(), &[sig])
        });
        if signed && fresh {
            // A signed hello is good once: the same realm and nonce again is a replay of a
            // captured hello (through a TLS-terminating proxy, say), not a new link.
            let digest = self.crypto.sha256(&[
                b"airc-hello-nonce\n",
                peer.to_string().as_bytes(),
                b"\n",
                nonce.as_bytes(),
            ]);
            let until = Timestamp::from_secs(ts).max(now) + HELLO_WINDOW;
            if let ExpiringInsert::Present = self.hello_nonces.insert(now, digest, until) {
                self.stats.replayed_hellos += 1;
                return self.fail(conn, ErrorCode::PeerUnverified, "hello nonce replayed");
            }
        }
        let authenticated = self.is_trusted_unsigned(&peer) || (signed && fresh);
        let acceptor = self.config.realm.to_string();
        let text = signing::welcome_canonical(&acceptor, &peer.to_string(), nonce);
        let sig = self.sign(text.as_bytes()).map(|s| s.to_string());
        let kid = sig.as_ref().and(self.own_kid.clone());
        self.link_open(conn, &peer, authenticated);
        let welcome = Welcome {
            realm: self.config.realm.to_string(),
            proto: PROTO.to_string(),
            ns: None,
            server: Some(self.config.software.clone()),
            sig,
            kid,
        };
        self.send(conn, &Frame::Welcome(welcome));
        self.peer_up(now, conn);
        if authenticated {
            self.link_up(now, conn, &peer);
        }
    }

    /// The dialling side: the host opened the link a `Connect` asked for; say hello.
    pub(super) fn dialled(&mut self, now: Timestamp, conn: ConnId, target: Authority) {
        if !self.opened(conn, Face::Peer, Vec::new(), Source::Unknown, false) {
            self.dialling.remove(&target);
            return self.no_link(now, &target);
        }
        // Still being dialled until the welcome: a flush meanwhile must not dial again.
        self.dialling.welcoming(&target, conn);
        let mut nonce = [0u8; NONCE_BYTES];
        self.rng.fill_bytes(&mut nonce);
        let nonce = hex::encode(&nonce);
        let ts = now.as_secs();
        let me = self.config.realm.to_string();
        let text = signing::hello_canonical(&me, &target.to_string(), ts, &nonce);
        let sig = self.sign(text.as_bytes()).map(|s| s.to_string());
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::AwaitWelcome;
        c.peer = Some(target);
        c.nonce = Some(nonce.clone());
        self.timers.schedule(now + LINK_IDLE, Timer::Idle(conn));
        let hello = Hello {
            proto: PROTO.to_string(),
            role: Role::Peer,
            agent: Some(self.config.software.clone()),
            realm: Some(me),
            ts: Some(ts),
            nonce: Some(nonce),
            sig,
        };
        self.send(conn, &Frame::Hello(hello));
    }

    /// The dialler checks the welcome: the realm it resolved, signed over its own nonce.
    pub(super) fn welcome(&mut self, now: Timestamp, conn: ConnId, w: &Welcome) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (Some(target), Some(nonce)) = (c.peer.clone(), c.nonce.clone()) else {
            return;
        };
        if w.proto != PROTO {
            return self.fail(
                conn,
                ErrorCode::BadProto,
                &format!("this server speaks {PROTO}"),
            );
        }
        if Authority::parse(&w.realm).ok().as_ref() != Some(&target) {
            return self.fail(
                conn,
                ErrorCode::RealmMismatch,
                "welcome names another realm",
            );
        }
        if !self.is_trusted_unsigned(&target) {
            let keys = if w.sig.is_none() {
                Vec::new()
            } else {
                match self.keys_or_park(now, conn, &target, || Frame::Welcome(w.clone())) {
                    Some(keys) => keys,
                    None => return,
                }
            };
            let me = self.config.realm.to_string();
            let text = signing::welcome_canonical(&target.to_string(), &me, &nonce);
            let sigs: Vec<&str> = w.sig.as_deref().into_iter().collect();
            if !signing::verify_any(self.crypto, &keys, text.as_bytes(), &sigs) {
                return self.fail(conn, ErrorCode::PeerUnverified, "welcome signature");
            }
        }
        self.dialling.unwelcomed(&target, conn);
        self.link_open(conn, &target, true);
        self.peer_up(now, conn);
        self.link_up(now, conn, &target);
    }

    /// A peer link is open (§8.4): `peer.up` (§13), whether or not it is authenticated.
    fn peer_up(&mut self, now: Timestamp, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.up = true;
        let mut e = audit::event(now, audit::Kind::PeerUp);
        e.realm = c.peer.as_ref().map(ToString::to_string);
        e.authenticated = Some(c.authenticated);
        e.outbound = Some(c.nonce.is_some());
        self.emit(now, e);
    }

    /// `conn` is a peer link to `realm`, open (§8.4), and sent on if `authenticated`.
    fn link_open(&mut self, conn: ConnId, realm: &Authority, authenticated: bool) {
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Open;
        c.peer = Some(realm.clone());
        c.authenticated = authenticated;
        if authenticated {
            self.peer_links.add(realm, conn);
        }
    }

    /// An authenticated link to `realm`, if one is open: the only kind a server sends on.
    pub(super) fn link_to(&self, realm: &Authority) -> Option<ConnId> {
        let link = self.peer_links.to(realm);
        debug_assert_eq!(
            link,
            self.conns
                .iter()
                .find(|(_, c)| c.authenticated
                    && c.state == State::Open
                    && c.peer.as_ref() == Some(realm))
                .map(|(id, _)| *id),
            "the index of links to {realm} is out of step with the connections"
        );
        link
    }

    /// §8.4: a dialled link with no frame either way for [`LINK_IDLE`] is closed, unless a
    /// message on it still waits for its ack; otherwise the check moves to the new deadline.
    pub(super) fn idle_check(&mut self, now: Timestamp, conn: ConnId) {
        let waiting = self.forwarded.waits_on(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let due = c.last_traffic + LINK_IDLE;
        if c.state == State::Closing {
            return;
        }
        if due > now || waiting {
            let at = if waiting { now + LINK_IDLE } else { due };
            self.timers.schedule(at, Timer::Idle(conn));
            return;
        }
        self.stats.idle_links += 1;
        self.close(conn);
    }
}
