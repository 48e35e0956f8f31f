//! Connections (AIRC §3, §4.1, §4.8, §5): every connection of the realm on both faces, from the
//! moment the host opens it until it is gone.
//!
//! - §3.1 the two faces, each connection under [`MAX_CONNECTIONS`] and its source's share
//!   ([`MAX_CONNECTIONS_PER_SOURCE`]); §5 a client-face connection the transport proves nobody
//!   holds ([`Input::Unidentified`](super::Input::Unidentified)) is refused `forbidden` before
//!   any frame of it is read;
//! - §3.2 frames read from the byte stream in the order they came (the limit and the answer to a
//!   bad frame are [`crate::airc::framing`]'s), each handed to [`Server`]'s dispatch;
//! - §3.3 and §4.1 the lifecycle: `hello` first (`expected_hello`), the wire version
//!   (`bad_proto`), a role that matches the face (`wrong_face`), a client's `welcome` with its
//!   namespaces (a peer's hello is [`super::peer_face`]'s); connections that have not said hello
//!   are bounded ([`MAX_WAITING_HELLOS`]) and timed ([`HELLO_TIMEOUT`]);
//! - §4.8 `error` and close on a protocol violation;
//! - a close: nothing more is read, the connection is no longer a link, a bind nor a subscriber;
//!   once the host reports it gone, what was forwarded over it unacked is spooled again (§6.6)
//!   and what it waited for is answered to nobody.

use super::acks::{dropped_hop_code, status_text};
use super::events::Hop;
use super::peer_face::MAX_PARKED_BYTES;
use super::{Output, Server, Timer};
use crate::airc::address::{Authority, Namespace};
use crate::airc::frame::{
    Ack, AckStatus, ErrorCode, ErrorFrame, Frame, Hello, PROTO, Role, Welcome,
};
use crate::airc::framing::{Answer, FrameDecoder};
use crate::airc::spool::FLUSH_INTERVAL;
use crate::airc::{audit, framing};
use crate::core::{ConnId, Timestamp};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::net::IpAddr;
use core::time::Duration;
use rand_core::CryptoRng;

/// Connections one server holds at most; past it a new connection is closed at once. The spec
/// sets no bound (§15 was lost).
pub const MAX_CONNECTIONS: usize = 4096;

/// Connections one source may hold at most: an eighth of [`MAX_CONNECTIONS`] (512), so that one
/// local user (a uid on the client face) or one remote host (an address on the peer face, an
/// IPv6 /64 counted as one) cannot take every slot and lock the others out; eight sources must
/// collude to fill the server. The host says who the source is ([`Input::Opened`](super::Input::Opened)'s
/// [`Source`]); past it the connection is refused like one past [`MAX_CONNECTIONS`]: closed at
/// once, nothing read, counted. The spec sets no bound (§15 was lost; §16.7).
pub const MAX_CONNECTIONS_PER_SOURCE: usize = MAX_CONNECTIONS / 8;

/// Connections that may wait for their hello at once: a quarter of [`MAX_CONNECTIONS`] (1024).
/// When one more opens, the one that has waited longest is closed to make room (counted in
/// [`Stats::hello_evictions`](super::Stats::hello_evictions)), so silent sockets cannot hold the slots new clients need: an
/// honest client says hello one round trip after it connects, and an attacker would have to
/// open 1024 connections inside that round trip to push it out. A hello waiting for its realm's
/// keys (§8.2) has been said and no longer counts. [`HELLO_TIMEOUT`] closes the rest after 30 s.
/// The spec sets no bound (§15 was lost).
pub const MAX_WAITING_HELLOS: usize = MAX_CONNECTIONS / 4;

/// How long a connection may take to finish its opening exchange (a client's or a peer's hello
/// answered, or, on a link this server dialled, the welcome to its hello) before it is closed.
/// The spec sets none (§15 was lost). Without it a connection that never says hello, or a realm
/// that takes the dial and stays silent, holds one of [`MAX_CONNECTIONS`] until the host gives
/// up, and the periodic flush dialled such a realm again every [`FLUSH_INTERVAL`]. As long as
/// that interval: an honest hello or welcome takes a round trip, and a hello that waits for its
/// realm's keys is timed by the DNS instead ([`locate::DNS_TIMEOUT`](super::locate::DNS_TIMEOUT)).
pub const HELLO_TIMEOUT: Duration = FLUSH_INTERVAL;

/// Which listener a connection came in on (§3.1): a server exposes a face for its own clients
/// and a face for other realms' servers, each on its own listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// The client face.
    Client,
    /// The peer face.
    Peer,
}

/// Who opened a connection, as far as the transport can say, for the share of the connection
/// slots one source may hold ([`MAX_CONNECTIONS_PER_SOURCE`]). It grants nothing: what a
/// connection may do is its namespaces (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// A local process of this uid: a Unix socket's peer credentials, or the owner of a loopback
    /// TCP socket (the client face).
    Uid(u32),
    /// A remote host at this address (the peer face). IPv6 addresses are counted by their /64,
    /// which one host is commonly given whole; an IPv4-mapped address as the IPv4 address.
    Addr(IpAddr),
    /// The host does not say: the connection counts against [`MAX_CONNECTIONS`] alone.
    Unknown,
}

impl Source {
    /// What connections are counted under, if anything.
    pub(super) fn key(self) -> Option<SourceKey> {
        match self {
            Source::Uid(uid) => Some(SourceKey::Uid(uid)),
            Source::Addr(addr) => Some(match addr.to_canonical() {
                IpAddr::V4(v4) => SourceKey::V4(v4.octets()),
                IpAddr::V6(v6) => {
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    SourceKey::V6Prefix(prefix)
                }
            }),
            Source::Unknown => None,
        }
    }
}

/// A [`Source`] as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SourceKey {
    Uid(u32),
    V4([u8; 4]),
    V6Prefix([u8; 8]),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    AwaitHello,
    /// A link this server dialled, its hello sent.
    AwaitWelcome,
    Open,
    /// An error went out and a close was asked for; nothing more is read.
    Closing,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) face: Face,
    pub(super) namespaces: Vec<Namespace>,
    pub(super) state: State,
    pub(super) decoder: FrameDecoder,
    /// On the peer face: the realm at the other end, once it said (or we dialled it).
    pub(super) peer: Option<Authority>,
    /// Whether the peer proved its realm (§8.4); only such links are sent on.
    pub(super) authenticated: bool,
    /// The nonce of the hello this server sent on a link it dialled.
    pub(super) nonce: Option<String>,
    /// The host proved it an administrator's (§5).
    pub(super) admin: bool,
    /// A `peer.up` was written for it, so its close is a `peer.down` (§13).
    pub(super) up: bool,
    /// A frame waiting for this realm's published keys (§8.2); what follows it waits in the
    /// decoder, so the connection's frames keep their order. Boxed: a frame is most of a
    /// connection's size inline, and only a connection waiting on discovery holds one (inline,
    /// an idle connection held 943 heap bytes rather than 473, docs/performance.md).
    pub(super) parked: Option<Box<(Authority, Frame)>>,
    /// When a frame last went either way on it, for [`LINK_IDLE`](super::LINK_IDLE).
    pub(super) last_traffic: Timestamp,
    /// Who opened it, as counted for [`MAX_CONNECTIONS_PER_SOURCE`].
    pub(super) source: Option<SourceKey>,
    /// Its place among the connections waiting for their hello ([`MAX_WAITING_HELLOS`]), while
    /// it waits.
    pub(super) waiting: Option<u64>,
}

impl<R: CryptoRng> Server<R> {
    pub(super) fn send(&mut self, conn: ConnId, frame: &Frame) {
        self.send_bytes(conn, framing::encode(frame));
    }

    pub(super) fn send_bytes(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last_traffic = self.clock;
        }
        self.out.push_back(Output::Send { conn, bytes });
    }

    /// Sends `error` and closes: the answer to a protocol violation (§4.8).
    pub(super) fn fail(&mut self, conn: ConnId, code: ErrorCode, reason: &str) {
        self.stats.protocol_errors += 1;
        self.send(conn, &Frame::Error(ErrorFrame::new(code, reason)));
        self.close(conn);
    }

    /// Asks the host to close `conn`. Nothing more is read from it, and it is no longer a link
    /// to send on, a client to deliver to (what comes for its binds goes to another bind or the
    /// spool) nor a subscriber, though its messages wait for [`Input::Closed`](super::Input::Closed) to be spooled
    /// again.
    pub(super) fn close(&mut self, conn: ConnId) {
        self.out.push_back(Output::Close { conn });
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Closing;
        if let Some(realm) = &c.peer {
            self.peer_links.forget(realm, conn);
        }
        self.binds.unbind_all(conn);
        self.audit.unsubscribe(conn);
    }

    /// Whether `conn` is gone or being closed ([`Server::close`]).
    pub(super) fn is_closing(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_none_or(|c| c.state == State::Closing)
    }

    /// A connection the host opened; `false` when it is refused (the server is full, its source
    /// holds its share, or the host named a connection already open, which is then closed: the
    /// two cannot be told apart). `waits` says whether it waits for a hello that counts against
    /// [`MAX_WAITING_HELLOS`] (not a link this server dialled, nor one refused at once).
    pub(super) fn opened(
        &mut self,
        conn: ConnId,
        face: Face,
        namespaces: Vec<Namespace>,
        source: Source,
        waits: bool,
    ) -> bool {
        if self.conns.len() >= MAX_CONNECTIONS || self.conns.contains_key(&conn) {
            self.stats.refused_connections += 1;
            self.close(conn);
            return false;
        }
        let source = source.key();
        if let Some(key) = source {
            let held = self.sources.entry(key).or_default();
            if *held >= MAX_CONNECTIONS_PER_SOURCE {
                self.stats.refused_connections += 1;
                self.stats.source_refusals += 1;
                self.close(conn);
                return false;
            }
            *held += 1;
        }
        let waiting = waits.then(|| {
            if self.waiting_hellos.len() >= MAX_WAITING_HELLOS
                && let Some((_, oldest)) = self.waiting_hellos.pop_first()
            {
                self.stats.hello_evictions += 1;
                self.close(oldest);
            }
            let place = self.next_waiting;
            self.next_waiting += 1;
            self.waiting_hellos.insert(place, conn);
            place
        });
        let state = State::AwaitHello;
        self.timers
            .schedule(self.clock + HELLO_TIMEOUT, Timer::Hello(conn));
        self.conns.insert(
            conn,
            Conn {
                face,
                namespaces,
                state,
                decoder: FrameDecoder::new(),
                peer: None,
                authenticated: false,
                nonce: None,
                admin: false,
                up: false,
                parked: None,
                last_traffic: self.clock,
                source,
                waiting,
            },
        );
        true
    }

    /// `conn` no longer waits for its hello: it said it, it is closing, or it is gone.
    pub(super) fn hello_done(&mut self, conn: ConnId) {
        if let Some(place) = self.conns.get_mut(&conn).and_then(|c| c.waiting.take()) {
            self.waiting_hellos.remove(&place);
        }
    }

    /// §5: a client-face connection nobody can be proven to hold is refused, not served with
    /// no namespaces: no frame of it is read, and the refusal is the spec's `forbidden`.
    pub(super) fn unidentified(&mut self, conn: ConnId) {
        if self.opened(conn, Face::Client, Vec::new(), Source::Unknown, false) {
            self.stats.unidentified_connections += 1;
            self.fail(
                conn,
                ErrorCode::Forbidden,
                "the transport proves no identity for this connection",
            );
        }
    }

    pub(super) fn closed(&mut self, now: Timestamp, conn: ConnId) {
        self.hello_done(conn);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(key) = c.source
            && let Some(held) = self.sources.get_mut(&key)
        {
            *held -= 1;
            if *held == 0 {
                self.sources.remove(&key);
            }
        }
        if let Some(realm) = &c.peer {
            self.peer_links.forget(realm, conn);
        }
        if let Some(parked) = &c.parked {
            self.key_waits.closed(&parked.0, conn);
        }
        self.audit.unsubscribe(conn);
        self.timers.cancel(&Timer::Idle(conn));
        self.timers.cancel(&Timer::Hello(conn));
        if let Some(realm) = c.peer.as_ref().filter(|_| c.up) {
            let mut e = audit::event(now, audit::Kind::PeerDown);
            e.realm = Some(realm.to_string());
            e.authenticated = Some(c.authenticated);
            e.outbound = Some(c.nonce.is_some());
            self.emit(now, e);
        }
        // A link this server dialled that never came up (closed before its welcome, or for
        // it): what waits for its realm is spooled now rather than at the dial's deadline.
        if let Some(realm) = c.peer.as_ref().filter(|_| c.nonce.is_some() && !c.up) {
            self.dialling.unwelcomed(realm, conn);
            self.no_link(now, realm);
        }
        let code = dropped_hop_code(c.face);
        self.binds.unbind_all(conn);
        // Messages forwarded over it and not acked: the hop is gone, so spool them again (not in
        // flight: nothing can ack them now) and tell whoever waits that they are queued.
        for p in self.forwarded.take_all_on(conn) {
            self.timers.cancel(&Timer::Ack(conn, p.item.id.clone()));
            self.requeue(now, p, code);
        }
        // Messages in flight to it: no late ack can come now, so they may be sent again.
        for id in self.forwarded.land_all_on(conn) {
            self.spool.release(&id);
        }
        // Messages it sent and still waiting downstream or for a link: their answers will have
        // nowhere to go, and must not reach a new connection the host gives its id.
        self.forwarded.forget_upstream(conn);
        self.awaiting.forget(conn);
    }

    pub(super) fn received(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == State::Closing {
            return;
        }
        c.decoder.push(bytes);
        c.last_traffic = now;
        if c.parked.is_some() && c.decoder.buffered() > MAX_PARKED_BYTES {
            self.stats.parked_overflows += 1;
            return self.close(conn);
        }
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.state == State::Closing || c.parked.is_some() {
                return;
            }
            let Some(next) = c.decoder.next() else {
                return;
            };
            self.stats.frames += 1;
            match next {
                Ok(frame) => self.frame(now, conn, frame),
                Err(e) => match e.answer() {
                    Answer::AckFailed { id, code } => {
                        self.stats.messages += 1;
                        let mut e = audit::event(now, audit::Kind::MsgFailed);
                        e.id = Some(id.clone());
                        e.status = Some(status_text(AckStatus::Failed).to_string());
                        e.code = Some(code.as_str().to_string());
                        e.hop = Some(Hop::Local.as_str().to_string());
                        self.emit(now, e);
                        self.ack(conn, Ack::with_code(id, AckStatus::Failed, code));
                    }
                    Answer::Close(code) => self.fail(conn, code, &e.to_string()),
                },
            }
        }
    }

    pub(super) fn hello(&mut self, now: Timestamp, conn: ConnId, face: Face, h: &Hello) {
        if h.proto != PROTO {
            let why = format!("this server speaks {PROTO}");
            return self.fail(conn, ErrorCode::BadProto, &why);
        }
        let expected = match face {
            Face::Client => Role::Client,
            Face::Peer => Role::Peer,
        };
        if h.role != expected {
            return self.fail(
                conn,
                ErrorCode::WrongFace,
                "hello role does not match this face",
            );
        }
        if face == Face::Peer {
            return self.peer_hello(now, conn, h);
        }
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Open;
        let ns = c.namespaces.iter().map(namespace_text).collect();
        let welcome = Welcome {
            realm: self.config.realm.to_string(),
            proto: PROTO.to_string(),
            ns: Some(ns),
            server: Some(self.config.software.clone()),
            sig: None,
            kid: None,
        };
        self.send(conn, &Frame::Welcome(welcome));
    }

    /// [`HELLO_TIMEOUT`] after it opened: a connection still in its opening exchange is closed,
    /// unless its hello waits for its realm's keys.
    pub(super) fn hello_check(&mut self, conn: ConnId) {
        let stalled = self.conns.get(&conn).is_some_and(|c| {
            matches!(c.state, State::AwaitHello | State::AwaitWelcome) && c.parked.is_none()
        });
        if stalled {
            self.stats.hello_timeouts += 1;
            self.close(conn);
        }
    }
}

fn namespace_text(ns: &Namespace) -> String {
    ns.segments().join("/")
}
