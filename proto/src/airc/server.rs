//! The AIRC realm server as one sans-IO machine (AIRC §3–§7).
//!
//! One [`Server`] holds every connection of a realm, on both faces. The host hands it each
//! connection with the namespaces it derived from the transport (§5: the peer uid of a Unix
//! socket, the owner of a loopback TCP socket), the bytes that arrive, and the time; the server
//! answers with bytes to send, connections to close, and records to persist or forget.
//!
//! Implemented here:
//!
//! - §3.2–§3.3 framing and the connection lifecycle: `hello` first (`expected_hello`), the
//!   wire version (`bad_proto`), a role that matches the face (`wrong_face`), `ping`/`pong`,
//!   `error` and close on a protocol violation;
//! - §4.3 `bind`/`bound` inside the connection's namespaces (`forbidden`), reserved names only
//!   when configured, and the resolving-client selection ([`super::bind`]);
//! - §6.1–§6.4 the routing pipeline in its order for client-face messages, with exactly one ack
//!   per accepted message over the connection it came on;
//! - §6.5 the start of remote delivery: the hop limit and loop check, `via`, signing, and
//!   spooling under the authority (`queued authority_unreachable`) with a request to connect;
//! - §6.6 the ack timeout: spool, ack upstream `queued no_ack`, keep the id in flight, settle on
//!   the late ack;
//! - §7 the spool: per destination key, order kept, expiry, flush on bind and every 30 s, and
//!   duplicate suppression for 172 800 s.
//!
//! Durability: a persist ([`Output::Persist`]) always comes out before the ack that claims it,
//! and the host executes outputs in order, so `queued` always means a copy is held.
//!
//! Not yet: the peer face (hello/welcome signatures, inbound peer messages, peer links), policy
//! (§10), links (§11), passports (§12) and the audit stream (§13); their frames are answered
//! with a refusal that says so, never silently dropped.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use super::address::{Address, Authority, Face as AddressFace, Namespace, RESOLVER};
use super::bind::BindTable;
use super::frame::{
    Ack, AckCode, AckStatus, Bound, ErrorCode, ErrorFrame, Frame, Hello, Linked, Msg, PROTO,
    Passported, Role, Welcome,
};
use super::framing::{self, Answer, FrameDecoder};
use super::pattern::{Pattern, PatternSegment};
use super::signing::{self, Signed};
use super::spool::{
    self, ACK_TIMEOUT, DEFAULT_TTL, FLUSH_INTERVAL, SeenIds, Spool, SpoolFull, Spooled,
};
use crate::core::timer::TimerQueue;
use crate::core::{ConnId, Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, Ed25519Seed, sigstring};

/// How many hops a message may take: a `via` this long is a routing loop (§6.5).
pub const MAX_VIA: usize = 8;

/// Connections one server holds at most; past it a new connection is closed at once. The spec
/// sets no bound (§15 was lost).
pub const MAX_CONNECTIONS: usize = 4096;

/// Forwarded messages awaiting an ack at most, across all connections. Past it a message that
/// would be forwarded is spooled instead (it is still accepted, never dropped).
pub const MAX_PENDING: usize = 65_536;

/// Which listener a connection came in on (§3.1): a server exposes a face for its own clients
/// and a face for other realms' servers, each on its own listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// The client face.
    Client,
    /// The peer face.
    Peer,
}

/// What a server is told from outside.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// The host accepted a connection on `face`. `namespaces` are what the transport proves
    /// (§5); anything but a local socket proves none.
    Opened {
        /// The id the host will use for it.
        conn: ConnId,
        /// The listener it came in on.
        face: Face,
        /// The namespaces it may act for, from the operator's uid table.
        namespaces: Vec<Namespace>,
    },
    /// Bytes arrived on a connection, in any pieces.
    Received {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A connection closed (either side).
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// A record persisted before a restart, handed back before any connection opens.
    Restore(Record),
}

/// What a server asks its host to do, strictly in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Write these bytes (whole frames) to a connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// One or more frames, each ending in `\n`.
        bytes: Vec<u8>,
    },
    /// Close a connection (after the bytes before this have gone out).
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Store a record durably; finish before executing the next output.
    Persist(Record),
    /// Delete a stored record.
    Forget(RecordKey),
    /// Open a peer link to this authority, if none is open (§8).
    Connect {
        /// The realm to reach.
        authority: Authority,
    },
}

/// A durable record: what must survive a crash for `queued` and duplicate suppression to hold.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// A message in the spool, under its destination key (§7.1).
    Spooled {
        /// The destination key.
        key: String,
        /// The message, with canonical `from` and `to` (boxed: records are moved around often).
        msg: Box<Msg>,
    },
    /// An id acked `delivered` or `queued`, remembered until `until` (§7.3).
    Seen {
        /// The message id.
        id: String,
        /// When it may be forgotten.
        until: Timestamp,
    },
}

/// Names a stored record to forget.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKey {
    /// The spooled message with this id.
    Spooled {
        /// The message id.
        id: String,
    },
}

/// How a server is set up. [`ServerConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The realm this server routes for.
    pub realm: Authority,
    /// `welcome.server`: software name and version.
    pub software: String,
    /// Every namespace the operator configured (§6.4: a message for one with no client bound is
    /// spooled; for any other path it is `no_such_path`).
    pub known_namespaces: Vec<Namespace>,
    /// Reserved names (§2.6) clients may bind anyway.
    pub bindable_reserved: Vec<String>,
    /// The realm's signing key (§9), if it has one: messages leaving the realm are signed.
    pub signing_key: Option<Ed25519Seed>,
    /// How long to wait for a next hop's ack (§6.6).
    pub ack_timeout: Duration,
    /// How often to flush every key with a backlog (§7.4).
    pub flush_interval: Duration,
}

impl ServerConfig {
    /// Defaults for `realm`: the spec's timings, no key, no known namespaces.
    pub fn new(realm: Authority) -> Self {
        Self {
            realm,
            software: format!("weft/{}", env!("CARGO_PKG_VERSION")),
            known_namespaces: Vec::new(),
            bindable_reserved: Vec::new(),
            signing_key: None,
            ack_timeout: ACK_TIMEOUT,
            flush_interval: FLUSH_INTERVAL,
        }
    }
}

/// What the server has counted: every frame it refused or ignored is here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Frames read.
    pub frames: u64,
    /// Connections closed for a protocol violation.
    pub protocol_errors: u64,
    /// Messages accepted (one ack each).
    pub messages: u64,
    /// Acks sent, by status: delivered, queued, failed.
    pub acks: [u64; 3],
    /// Acks from a next hop for nothing this server is waiting on, ignored.
    pub stray_acks: u64,
    /// Late acks that settled a message in flight (§6.6).
    pub settled: u64,
    /// Spooled messages dropped because they expired (§7.2).
    pub expired: u64,
    /// Connections refused because the server was full.
    pub refused_connections: u64,
}

/// Where an ack goes once the next hop answers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Upstream {
    /// Relay it over this connection.
    Conn(ConnId),
    /// The message came out of the spool under this key: nobody waits upstream.
    Spool(String),
}

/// A message forwarded to a next hop, awaiting its ack.
#[derive(Debug)]
struct Pending {
    upstreams: Vec<Upstream>,
    item: Spooled<Msg>,
    key: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitHello,
    Open,
    /// An error went out and a close was asked for; nothing more is read.
    Closing,
}

#[derive(Debug)]
struct Conn {
    face: Face,
    namespaces: Vec<Namespace>,
    state: State,
    decoder: FrameDecoder,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Ack(ConnId, String),
    Flush,
}

/// The realm server; see the [module docs](self).
pub struct Server {
    config: ServerConfig,
    crypto: &'static dyn CryptoProvider,
    conns: BTreeMap<ConnId, Conn>,
    binds: BindTable<ConnId>,
    spool: Spool<Msg>,
    seen: SeenIds,
    /// Forwarded messages by (next hop, id).
    pending: BTreeMap<(ConnId, String), Pending>,
    /// Spooled messages in flight (§6.6), by id, with the hop whose late ack would settle them.
    in_flight: BTreeMap<String, ConnId>,
    timers: TimerQueue<Timer>,
    out: VecDeque<Output>,
    stats: Stats,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("realm", &self.config.realm)
            .field("conns", &self.conns.len())
            .field("spooled", &self.spool.len())
            .field("pending", &self.pending.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server for `config.realm`, signing and verifying with `crypto`.
    pub fn new(config: ServerConfig, crypto: &'static dyn CryptoProvider) -> Self {
        Self {
            config,
            crypto,
            conns: BTreeMap::new(),
            binds: BindTable::new(),
            spool: Spool::default(),
            seen: SeenIds::default(),
            pending: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            timers: TimerQueue::new(),
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// What the server has counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Messages held in the spool.
    pub fn spooled(&self) -> usize {
        self.spool.len()
    }

    fn send(&mut self, conn: ConnId, frame: &Frame) {
        self.out.push_back(Output::Send {
            conn,
            bytes: framing::encode(frame),
        });
    }

    /// Sends `error` and closes: the answer to a protocol violation (§4.8).
    fn fail(&mut self, conn: ConnId, code: ErrorCode, reason: &str) {
        self.stats.protocol_errors += 1;
        self.send(conn, &Frame::Error(ErrorFrame::new(code, reason)));
        self.out.push_back(Output::Close { conn });
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = State::Closing;
        }
    }

    fn ack(&mut self, conn: ConnId, ack: Ack) {
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

    fn ack_code(&mut self, conn: ConnId, id: &str, status: AckStatus, code: AckCode) {
        self.ack(conn, Ack::with_code(id, status, code));
    }

    /// Remembers `id` for duplicate suppression, durably, before the ack that depends on it.
    fn record_seen(&mut self, now: Timestamp, id: &str) {
        self.seen.record(now, id);
        let until = now.saturating_add(spool::DUPLICATE_WINDOW);
        self.out.push_back(Output::Persist(Record::Seen {
            id: id.to_string(),
            until,
        }));
    }

    /// Spools a message durably; `Err` means it is not held and must not be acked `queued`.
    fn hold(&mut self, now: Timestamp, key: &str, item: Spooled<Msg>) -> Result<(), SpoolFull> {
        let record = Record::Spooled {
            key: key.to_string(),
            msg: Box::new(item.msg.clone()),
        };
        self.spool.push(key, item)?;
        self.out.push_back(Output::Persist(record));
        self.arm_flush(now);
        Ok(())
    }

    fn arm_flush(&mut self, now: Timestamp) {
        if self.timers.deadline_of(&Timer::Flush).is_none() {
            self.timers
                .schedule(now + self.config.flush_interval, Timer::Flush);
        }
    }

    // ---- connections ------------------------------------------------------------------------

    fn opened(&mut self, conn: ConnId, face: Face, namespaces: Vec<Namespace>) {
        if self.conns.len() >= MAX_CONNECTIONS || self.conns.contains_key(&conn) {
            self.stats.refused_connections += 1;
            self.out.push_back(Output::Close { conn });
            return;
        }
        let state = State::AwaitHello;
        self.conns.insert(
            conn,
            Conn {
                face,
                namespaces,
                state,
                decoder: FrameDecoder::new(),
            },
        );
    }

    fn closed(&mut self, now: Timestamp, conn: ConnId) {
        if self.conns.remove(&conn).is_none() {
            return;
        }
        self.binds.unbind_all(conn);
        // Messages forwarded over it and not acked: the hop is gone, so spool them again (not in
        // flight: nothing can ack them now) and tell whoever waits that they are queued.
        let gone: Vec<_> = self
            .pending
            .keys()
            .filter(|(c, _)| *c == conn)
            .cloned()
            .collect();
        for k in gone {
            if let Some(p) = self.pending.remove(&k) {
                self.timers.cancel(&Timer::Ack(k.0, k.1.clone()));
                self.requeue(now, p, AckCode::EndpointOffline);
            }
        }
        // Messages in flight to it: no late ack can come now, so they may be sent again.
        let released: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, c)| **c == conn)
            .map(|(id, _)| id.clone())
            .collect();
        for id in released {
            self.in_flight.remove(&id);
            self.spool.release(&id);
        }
        // Messages it sent and still waiting downstream: their acks will have nowhere to go.
        for p in self.pending.values_mut() {
            p.upstreams.retain(|u| *u != Upstream::Conn(conn));
        }
    }

    /// A forwarded message whose hop went away: back into the spool, and `queued` upstream.
    fn requeue(&mut self, now: Timestamp, p: Pending, code: AckCode) {
        let id = p.item.id.clone();
        let from_spool = p.upstreams.iter().any(|u| matches!(u, Upstream::Spool(_)));
        if from_spool {
            // Still durably stored from when it was first spooled.
            self.spool.requeue(&p.key, alloc::vec![p.item]);
            self.arm_flush(now);
        } else {
            let record = Record::Spooled {
                key: p.key.clone(),
                msg: Box::new(p.item.msg.clone()),
            };
            self.spool.requeue(&p.key, alloc::vec![p.item]);
            self.out.push_back(Output::Persist(record));
            self.arm_flush(now);
            self.record_seen(now, &id);
        }
        for u in p.upstreams {
            if let Upstream::Conn(c) = u {
                self.ack_code(c, &id, AckStatus::Queued, code);
            }
        }
    }

    fn received(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == State::Closing {
            return;
        }
        c.decoder.push(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.state == State::Closing {
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
                        self.ack_code(conn, &id, AckStatus::Failed, code);
                    }
                    Answer::Close(code) => self.fail(conn, code, &e.to_string()),
                },
            }
        }
    }

    fn frame(&mut self, now: Timestamp, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (face, state) = (c.face, c.state);
        match (state, frame) {
            (State::AwaitHello, Frame::Hello(h)) => self.hello(conn, face, &h),
            (State::AwaitHello, _) => {
                self.fail(
                    conn,
                    ErrorCode::ExpectedHello,
                    "the first frame must be hello",
                );
            }
            (_, Frame::Ping(p)) => self.send(conn, &Frame::Pong(p.pong())),
            (_, Frame::Pong(_)) => {}
            (_, Frame::Msg(m)) if face == Face::Client => self.client_msg(now, conn, m),
            (_, Frame::Ack(a)) => self.downstream_ack(now, conn, a),
            (_, Frame::Bind(b)) if face == Face::Client => self.bind(now, conn, b.names),
            (_, Frame::Link(_)) if face == Face::Client => {
                let reason = "links are not supported by this server yet".to_string();
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
            (_, Frame::Passport(_)) if face == Face::Client => {
                let passported = Passported {
                    ok: false,
                    passport: None,
                    line: None,
                    file: None,
                    url: None,
                    passports: None,
                    status: None,
                    reason: Some("passports are not supported by this server yet".to_string()),
                    code: Some(AckCode::Refused.as_str().to_string()),
                    link: None,
                    revoked_links: None,
                };
                self.send(conn, &Frame::Passported(Box::new(passported)));
            }
            (_, Frame::Stat(_)) if face == Face::Client => self.stat(conn),
            (_, Frame::Error(_)) => self.out.push_back(Output::Close { conn }),
            (_, Frame::Unknown { t }) => {
                self.fail(
                    conn,
                    ErrorCode::UnexpectedFrame,
                    &format!("unknown frame type {t}"),
                );
            }
            (_, other) => {
                let why = format!("{} is not accepted here", other.t());
                self.fail(conn, ErrorCode::UnexpectedFrame, &why);
            }
        }
    }

    /// §4.10: implementation-defined counters.
    fn stat(&mut self, conn: ConnId) {
        let s = &self.stats;
        let mut counters = super::frame::Object::new();
        for (name, value) in [
            ("connections", self.conns.len() as u64),
            ("spooled", self.spool.len() as u64),
            ("pending", self.pending.len() as u64),
            ("frames", s.frames),
            ("messages", s.messages),
            ("delivered", s.acks[0]),
            ("queued", s.acks[1]),
            ("failed", s.acks[2]),
            ("protocol_errors", s.protocol_errors),
            ("stray_acks", s.stray_acks),
            ("settled", s.settled),
            ("expired", s.expired),
        ] {
            counters.insert(name.to_string(), value.into());
        }
        self.send(conn, &Frame::Stats(super::frame::Stats { counters }));
    }

    fn hello(&mut self, conn: ConnId, face: Face, h: &Hello) {
        if h.proto != PROTO {
            return self.fail(
                conn,
                ErrorCode::BadProto,
                &format!("this server speaks {PROTO}"),
            );
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
            // Verifying a peer's hello needs its published keys (§8.2, §8.4): not built yet.
            return self.fail(
                conn,
                ErrorCode::PeerUnverified,
                "the peer face is not built yet",
            );
        }
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

    // ---- bind (§4.3) ------------------------------------------------------------------------

    fn bind(&mut self, now: Timestamp, conn: ConnId, names: Vec<String>) {
        let namespaces = self
            .conns
            .get(&conn)
            .map(|c| c.namespaces.clone())
            .unwrap_or_default();
        let mut patterns = Vec::with_capacity(names.len());
        for name in &names {
            let p = match Pattern::parse_in_realm(name, &self.config.realm) {
                Ok(p) => p,
                Err(e) => return self.fail(conn, ErrorCode::BadBind, &format!("{name}: {e}")),
            };
            if p.authority() != Some(&self.config.realm)
                || !namespaces.iter().any(|ns| pattern_inside(&p, ns))
            {
                let why = format!("{name} is outside your namespaces");
                return self.fail(conn, ErrorCode::Forbidden, &why);
            }
            if self.reserved_not_bindable(&p) {
                return self.fail(conn, ErrorCode::Forbidden, &format!("{name} is reserved"));
            }
            patterns.push(p);
        }
        let mut keys = Vec::new();
        for p in &patterns {
            if !self.binds.bind(conn, p.clone()) {
                return self.fail(conn, ErrorCode::BadBind, "too many binds on one connection");
            }
            if let Some(PatternSegment::Literal(first)) = p.segments().first() {
                keys.push(first.clone());
            }
        }
        let bound = Bound {
            names: patterns.iter().map(ToString::to_string).collect(),
        };
        self.send(conn, &Frame::Bound(bound));
        // §7.4: a bind flushes the spool for its namespace.
        keys.sort();
        keys.dedup();
        for key in keys {
            self.flush(now, &key);
        }
    }

    fn reserved_not_bindable(&self, p: &Pattern) -> bool {
        p.segments().iter().any(|s| match s {
            PatternSegment::Literal(l) => {
                super::address::is_reserved_segment(l)
                    && !self.config.bindable_reserved.iter().any(|r| r == l)
            }
            _ => false,
        })
    }

    // ---- routing (§6) -----------------------------------------------------------------------

    fn client_msg(&mut self, now: Timestamp, conn: ConnId, mut m: Msg) {
        self.stats.messages += 1;
        let id = m.id.clone();
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
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::BadAddress);
        };
        let Some(ts) = signing::ts_ms(m.ts).map(Timestamp::from_millis) else {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::BadAddress);
        };
        if from.realm() != &self.config.realm
            || !from.is_endpoint()
            || !namespaces.iter().any(|ns| from.is_inside(ns))
        {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::Refused);
        }
        m.via = None;
        m.from = from.to_string();
        m.to = to.to_string();
        let ttl = m.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
        // §6.2 expiry and dedupe.
        if spool::is_expired(ts, ttl, now) {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::Expired);
        }
        if self.seen.contains(now, &id) {
            return self.ack_code(conn, &id, AckStatus::Delivered, AckCode::Duplicate);
        }
        // A copy of a message still waiting on its next hop: wait with it for the same answer.
        if let Some(p) = self.pending.values_mut().find(|p| p.item.id == id) {
            p.upstreams.push(Upstream::Conn(conn));
            return;
        }
        // §6.3 control traffic and §6.4 policy: links, passports and policy rules are not built
        // yet; the reserved paths they use are answered below as reserved paths.
        let item = Spooled {
            id: id.clone(),
            ts,
            ttl,
            msg: m,
        };
        if to.realm() == &self.config.realm && to.realm().port().is_none() {
            self.deliver_local(now, conn, &to, item);
        } else {
            self.deliver_remote(now, conn, &to, item);
        }
    }

    /// §6.4 local delivery.
    fn deliver_local(&mut self, now: Timestamp, conn: ConnId, to: &Address, item: Spooled<Msg>) {
        let id = item.id.clone();
        if to.is_namespace() {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::NamespaceNotEndpoint);
        }
        if to.segments() == [RESOLVER] {
            self.record_seen(now, &id);
            return self.ack(conn, Ack::new(id, AckStatus::Delivered));
        }
        let client = self.binds.select(to);
        if to.is_reserved() && client.is_none() {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::NoSuchPath);
        }
        let key = to.first_segment().to_string();
        if let Some(client) = client {
            if self.pending.len() < MAX_PENDING {
                return self.forward(now, client, alloc::vec![Upstream::Conn(conn)], key, item);
            }
        } else if !self
            .config
            .known_namespaces
            .iter()
            .any(|ns| ns.segments().first() == Some(&key))
        {
            let mut ack = Ack::with_code(id, AckStatus::Failed, AckCode::NoSuchPath);
            ack.by = Some(format!("airc://{}/{RESOLVER}", self.config.realm));
            return self.ack(conn, ack);
        }
        match self.hold(now, &key, item) {
            Ok(()) => {
                self.record_seen(now, &id);
                self.ack_code(conn, &id, AckStatus::Queued, AckCode::EndpointOffline);
            }
            Err(_) => self.spool_full(conn, &id),
        }
    }

    /// §6.5 remote delivery, as far as it goes without the peer face: the message is checked,
    /// stamped and signed, then held for the authority until a link to it comes up.
    fn deliver_remote(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        to: &Address,
        mut item: Spooled<Msg>,
    ) {
        let id = item.id.clone();
        let realm = self.config.realm.to_string();
        let via = item.msg.via.get_or_insert_with(Vec::new);
        if via.contains(&realm) || via.len() >= MAX_VIA {
            return self.ack_code(conn, &id, AckStatus::Failed, AckCode::RoutingLoop);
        }
        via.push(realm);
        if let Some(key) = self
            .config
            .signing_key
            .as_ref()
            .filter(|_| item.msg.sigstrings().is_empty())
        {
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
            let sig = sigstring::sign(self.crypto, key, signed.canonical().as_bytes());
            item.msg.set_sigstrings(&[&sig.to_string()]);
        }
        let key = remote_key(to.realm());
        match self.hold(now, &key, item) {
            Ok(()) => {
                self.record_seen(now, &id);
                self.ack_code(conn, &id, AckStatus::Queued, AckCode::AuthorityUnreachable);
                self.out.push_back(Output::Connect {
                    authority: to.realm().clone(),
                });
            }
            Err(_) => self.spool_full(conn, &id),
        }
    }

    /// The spool cannot hold the message, so it cannot be `queued`: refuse it.
    fn spool_full(&mut self, conn: ConnId, id: &str) {
        let mut ack = Ack::with_code(id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some("spool full".to_string());
        self.ack(conn, ack);
    }

    fn forward(
        &mut self,
        now: Timestamp,
        hop: ConnId,
        ups: Vec<Upstream>,
        key: String,
        item: Spooled<Msg>,
    ) {
        self.send(hop, &Frame::Msg(item.msg.clone()));
        let id = item.id.clone();
        self.timers
            .schedule(now + self.config.ack_timeout, Timer::Ack(hop, id.clone()));
        self.pending.insert(
            (hop, id),
            Pending {
                upstreams: ups,
                item,
                key,
            },
        );
    }

    /// An ack from a next hop (§6.6).
    fn downstream_ack(&mut self, now: Timestamp, conn: ConnId, ack: Ack) {
        let Some(p) = self.pending.remove(&(conn, ack.id.clone())) else {
            // A late ack for a message that timed out and was spooled in flight: settled.
            if self.in_flight.get(&ack.id) == Some(&conn) && self.spool.settle(&ack.id) {
                self.in_flight.remove(&ack.id);
                self.stats.settled += 1;
                self.out
                    .push_back(Output::Forget(RecordKey::Spooled { id: ack.id }));
            } else {
                self.stats.stray_acks += 1;
            }
            return;
        };
        self.timers.cancel(&Timer::Ack(conn, ack.id.clone()));
        let link_dropped = ack.status == AckStatus::Failed
            && ack
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("link:"));
        if link_dropped {
            return self.requeue(now, p, AckCode::AuthorityUnreachable);
        }
        let from_spool = p.upstreams.iter().any(|u| matches!(u, Upstream::Spool(_)));
        if ack.status != AckStatus::Failed && !from_spool {
            self.record_seen(now, &ack.id);
        }
        if from_spool {
            // Whatever the answer, the spool's copy has been dealt with.
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: ack.id.clone() }));
        }
        for u in p.upstreams {
            if let Upstream::Conn(c) = u {
                // Relayed unchanged: status, code, by, reason (§6.6).
                self.ack(c, ack.clone());
            }
        }
    }

    // ---- timers -----------------------------------------------------------------------------

    fn ack_timeout(&mut self, now: Timestamp, hop: ConnId, id: String) {
        let Some(p) = self.pending.remove(&(hop, id.clone())) else {
            return;
        };
        let from_spool = p.upstreams.iter().any(|u| matches!(u, Upstream::Spool(_)));
        if !from_spool {
            let record = Record::Spooled {
                key: p.key.clone(),
                msg: Box::new(p.item.msg.clone()),
            };
            self.out.push_back(Output::Persist(record));
            self.record_seen(now, &id);
        }
        self.spool.push_in_flight(&p.key, p.item);
        self.in_flight.insert(id.clone(), hop);
        self.arm_flush(now);
        for u in p.upstreams {
            if let Upstream::Conn(c) = u {
                self.ack_code(c, &id, AckStatus::Queued, AckCode::NoAck);
            }
        }
    }

    /// Attempts delivery of one key's backlog (§7.4): in order, dropping what expired or settled,
    /// never resending what is in flight, and keeping what still cannot be delivered.
    fn flush(&mut self, now: Timestamp, key: &str) {
        let f = self.spool.flush(now, key);
        self.stats.expired += f.expired.len() as u64;
        for gone in f.expired.iter().chain(&f.settled) {
            self.out.push_back(Output::Forget(RecordKey::Spooled {
                id: gone.id.clone(),
            }));
        }
        let mut undelivered = Vec::new();
        for item in f.deliver {
            let hop = Address::parse(&item.msg.to)
                .ok()
                .filter(|to| to.realm() == &self.config.realm)
                .and_then(|to| self.binds.select(&to));
            match hop {
                Some(hop) if self.pending.len() < MAX_PENDING => {
                    let up = alloc::vec![Upstream::Spool(key.to_string())];
                    self.forward(now, hop, up, key.to_string(), item);
                }
                _ => undelivered.push(item),
            }
        }
        if !undelivered.is_empty() {
            let remote = key
                .strip_prefix("//")
                .and_then(|a| Authority::parse(a).ok());
            if let Some(authority) = remote {
                self.out.push_back(Output::Connect { authority });
            }
            self.spool.requeue(key, undelivered);
        }
    }

    fn flush_all(&mut self, now: Timestamp) {
        let keys: Vec<String> = self.spool.keys().map(ToString::to_string).collect();
        for key in keys {
            self.flush(now, &key);
        }
        if !self.spool.is_empty() {
            self.arm_flush(now);
        }
    }

    fn restore(&mut self, now: Timestamp, record: Record) {
        match record {
            Record::Spooled { key, msg } => {
                let ts = signing::ts_ms(msg.ts).map_or(Timestamp::ZERO, Timestamp::from_millis);
                let ttl = msg.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
                let item = Spooled {
                    id: msg.id.clone(),
                    ts,
                    ttl,
                    msg: *msg,
                };
                // Restored records were accepted before the restart: held past the bounds.
                self.spool.requeue(&key, alloc::vec![item]);
                self.arm_flush(now);
            }
            Record::Seen { id, until } => {
                if until > now {
                    self.seen
                        .record(until.saturating_sub(spool::DUPLICATE_WINDOW), &id);
                }
            }
        }
    }
}

/// Whether bind pattern `p` lies inside namespace `ns` (§4.3, §5): its literal prefix is the
/// namespace and something follows, or it names the namespace itself with a trailing `/`.
fn pattern_inside(p: &Pattern, ns: &Namespace) -> bool {
    let segs = p.segments();
    let n = ns.segments();
    let prefix = segs.len() >= n.len()
        && segs
            .iter()
            .zip(n)
            .all(|(s, ns)| matches!(s, PatternSegment::Literal(l) if l == ns));
    prefix && (segs.len() > n.len() || p.is_namespace())
}

/// The spool key of a remote destination (§7.1): its authority, written `//authority` so that it
/// can never collide with a local key, which is a bare path segment.
fn remote_key(authority: &Authority) -> String {
    format!("//{authority}")
}

fn namespace_text(ns: &Namespace) -> String {
    ns.segments().join("/")
}

impl Machine for Server {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        match input {
            Input::Opened {
                conn,
                face,
                namespaces,
            } => self.opened(conn, face, namespaces),
            Input::Received { conn, bytes } => self.received(now, conn, &bytes),
            Input::Closed { conn } => self.closed(now, conn),
            Input::Restore(record) => self.restore(now, record),
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.timers
            .next_deadline()
            .map(|at| Wakeup::new(at, "ack timeout or spool flush"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Ack(hop, id) => self.ack_timeout(now, hop, id),
                Timer::Flush => self.flush_all(now),
            }
        }
        self.seen.prune(now);
    }
}
