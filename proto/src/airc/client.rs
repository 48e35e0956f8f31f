//! The AIRC client as one sans-IO machine (AIRC §3.2–§3.3, §4, §6.2 and §7.3 from the client's
//! side).
//!
//! One [`Client`] holds one connection to one realm's client face at a time. The host dials when
//! asked ([`Output::Connect`]), reports the connection ([`Input::Connected`],
//! [`Input::Disconnected`]) and the bytes that arrive ([`Input::Bytes`]); the machine answers with
//! whole frames to write ([`Output::Transmit`]), closes, and events for the application.
//!
//! Implemented here:
//!
//! - §3.3 step 1: `hello` first, and nothing else until `welcome`; anything else first is
//!   `no_welcome`; a welcome in another wire version is `bad_proto`, one without a realm
//!   `bad_frame`, one for another realm than configured `realm_mismatch` (§4.1) — each sent as
//!   `error` before closing (§4.8);
//! - §3.3 step 2: every `ping` answered with `pong` echoing `n`;
//! - §3.3 step 3: while the application wants to be connected, a lost connection is redialled
//!   with backoff ([`RECONNECT`], reset by a welcome) and every name bound so far is bound again;
//! - §3.2: framing by [`super::framing`], a bad line answered as [`FramingError::answer`] says,
//!   and an unknown `t` (or a frame only a client sends) answered `error unexpected_frame` and
//!   closed;
//! - §4.2, §4.4 and §7.3: messages sent with fresh random ids ([`super::frame::message_id`]), and
//!   exactly one [`Output::Acked`] per message. A message still unacked when the connection drops
//!   is kept and sent again, with the same id, after the next welcome: the server acks an id it
//!   has seen `delivered duplicate` without delivering it again ("origins MAY retry freely"), so
//!   a resend can only fill a gap, never double a delivery;
//! - §4.4 on the receiving side: every message handed to the application is acked exactly once,
//!   with the status the application chooses ([`Input::Ack`]);
//! - §4.6, §4.7, §4.9 and §4.10: `link`, `passport`, `subscribe` and `stat`, each answered by its
//!   reply in order, and the audit `event`s of a subscription;
//! - §16.4 items 4 and 5 on the reading side: [`foreign`] says which messages come from another
//!   namespace or realm and how they are framed for the agent that reads them.

use alloc::boxed::Box;
use alloc::collections::{BTreeSet, VecDeque};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use rand_core::CryptoRng;

use super::frame::{
    self, Ack, AckCode, AckStatus, Bind, ErrorCode, ErrorFrame, Event, Frame, Hello, LinkRequest,
    Linked, Msg, Object, PROTO, PassportRequest, Passported, Role, Stat, Stats, Subscribe,
    Subscribed, Welcome,
};
use super::framing::{self, Answer, FrameDecoder, FramingError};
use super::spool::{self, DEFAULT_TTL};
use crate::core::{Backoff, BackoffConfig, Machine, Timestamp, Wakeup};

pub mod foreign;

/// The reconnect schedule (§3.3 step 3 says "with backoff" and names no numbers): half a second
/// at first, doubling to at most 30 s, with equal jitter so that clients that lost one server
/// together do not come back together.
pub const RECONNECT: BackoffConfig = BackoffConfig {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(30),
    multiplier: 2,
};

/// Messages sent and not yet acked, held at most. It is also the bound on messages waiting for a
/// welcome, since those are unacked messages not yet written; past it a send is refused.
pub const MAX_UNACKED: usize = 1024;

/// Messages handed to the application and not yet acked by it, held at most. Past it a message
/// is answered `failed` at once (the server keeps no copy of it then; see `docs/decisions.md`).
pub const MAX_INBOX: usize = 1024;

/// Requests (`link`, `passport`, `subscribe`, `stat`) waiting for a welcome or for their reply,
/// held at most; past it a request is refused.
pub const MAX_REQUESTS: usize = 64;

/// Bind names held for re-binding at most; a bind that would pass it is refused.
pub const MAX_BIND_NAMES: usize = 256;

/// How long a written message may stay unacked before the connection is taken for dead and
/// redialled. The server answers every message within its own 15 s next-hop timeout (§6.6), so
/// four times that is a server that is not reading.
pub const ACK_WAIT: Duration = Duration::from_secs(4 * super::spool::ACK_TIMEOUT.as_secs());

/// How long a connection may wait for its welcome before it is closed and redialled.
pub const WELCOME_WAIT: Duration = Duration::from_secs(30);

/// The reason of the `failed` ack given to a message that finds the inbox full.
pub const INBOX_FULL: &str = "client inbox full";

/// How a client is set up. [`ClientConfig::default`] gives the constants above.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `hello.agent`: software name and version.
    pub agent: Option<String>,
    /// The realm the client expects in `welcome.realm`; `None` takes any (the realm is still
    /// required to be present).
    pub realm: Option<String>,
    /// The reconnect schedule.
    pub backoff: BackoffConfig,
    /// See [`ACK_WAIT`].
    pub ack_wait: Duration,
    /// See [`WELCOME_WAIT`].
    pub welcome_wait: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            agent: None,
            realm: None,
            backoff: RECONNECT,
            ack_wait: ACK_WAIT,
            welcome_wait: WELCOME_WAIT,
        }
    }
}

/// A message the application sends; the machine adds `ts`, and `id` unless given (§4.2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outgoing {
    /// `id`: `None` takes a fresh random one. An id is given to send again a message an earlier
    /// run (another process, another connection) already sent: the server acks an id it has seen
    /// `delivered duplicate` and does not deliver it twice (§4.2, §7.3: origins MAY retry).
    pub id: Option<String>,
    /// `from`: a local form under the connection's first namespace, or an address (§2.3).
    pub from: String,
    /// `to`.
    pub to: String,
    /// `body`.
    pub body: String,
    /// `type`; `text/plain` when `None`.
    pub kind: Option<String>,
    /// `re`.
    pub re: Option<String>,
    /// `ttl` in seconds; [`DEFAULT_TTL`] when `None`.
    pub ttl: Option<u64>,
    /// `hdr`.
    pub hdr: Option<Object>,
}

/// A request the server answers with one reply frame.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// `link`, answered by `linked` (§4.6).
    Link(LinkRequest),
    /// `passport`, answered by `passported` (§4.7).
    Passport(PassportRequest),
    /// `subscribe`, answered by `subscribed` (§4.9); the kinds are subscribed again after every
    /// reconnect.
    Subscribe(Subscribe),
    /// `stat`, answered by `stats` (§4.10).
    Stat,
}

/// Which request a reply answers, or which request went unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// `link`.
    Link,
    /// `passport`.
    Passport,
    /// `subscribe`.
    Subscribe,
    /// `stat`.
    Stat,
}

impl Request {
    /// Which kind of request this is.
    pub fn kind(&self) -> RequestKind {
        match self {
            Request::Link(_) => RequestKind::Link,
            Request::Passport(_) => RequestKind::Passport,
            Request::Subscribe(_) => RequestKind::Subscribe,
            Request::Stat => RequestKind::Stat,
        }
    }

    fn frame(&self) -> Frame {
        match self {
            Request::Link(r) => Frame::Link(r.clone()),
            Request::Passport(r) => Frame::Passport(r.clone()),
            Request::Subscribe(r) => Frame::Subscribe(r.clone()),
            Request::Stat => Frame::Stat(Stat {}),
        }
    }
}

/// The server's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// `linked`.
    Linked(Linked),
    /// `passported`.
    Passported(Box<Passported>),
    /// `subscribed`.
    Subscribed(Subscribed),
    /// `stats`.
    Stats(Stats),
}

/// Why a command was refused; nothing was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// [`MAX_UNACKED`] messages are unacked.
    Full,
    /// The message would be a frame over 1 MiB (§3.2).
    TooLarge,
    /// The bind would hold more than [`MAX_BIND_NAMES`] names.
    TooManyNames,
    /// The message's given id is one of a message still unacked: two would share one ack.
    DuplicateId,
    /// [`MAX_REQUESTS`] requests are waiting.
    TooManyRequests,
}

/// What a client is told: by its host about the connection, and by the application.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// The application wants to be connected: dial, and redial whenever the connection is lost.
    Start,
    /// The application no longer wants to be connected: close, and do not redial. Unacked
    /// messages are kept and sent after the next [`Input::Start`].
    Stop,
    /// The host opened the connection a [`Output::Connect`] asked for.
    Connected,
    /// Bytes arrived on the connection, in any pieces.
    Bytes(Vec<u8>),
    /// The connection closed, or the dial failed.
    Disconnected,
    /// Bind these names (§4.3), now and after every reconnect. See [`Client::bind`].
    Bind(Vec<String>),
    /// Send a message. See [`Client::send`], which also returns the id.
    Send(Outgoing),
    /// Send a request. See [`Client::request`].
    Request(Request),
    /// The application's ack for a message it was handed ([`Output::Message`]); the machine
    /// writes the `ack` frame. An ack for an id not awaiting one is ignored and counted.
    Ack(Ack),
}

/// What a client asks its host or tells its application, strictly in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Dial the realm; answer with [`Input::Connected`] or [`Input::Disconnected`].
    Connect,
    /// Write these bytes (one whole frame, ending in `\n`) to the connection.
    Transmit(Vec<u8>),
    /// Close the connection (after the bytes before this have gone out). The machine already
    /// counts it as lost; an [`Input::Disconnected`] for it is not needed.
    Close,
    /// The server welcomed the connection (§4.1).
    Welcome {
        /// `welcome.realm`.
        realm: String,
        /// `welcome.ns`: the namespaces this connection may act for (§5).
        ns: Vec<String>,
    },
    /// The server bound these absolute patterns (§4.3).
    Bound(Vec<String>),
    /// The one answer to a message sent: the server's ack, or `failed expired` given by the
    /// client to a message whose ttl passed before it could be sent again.
    Acked {
        /// The message's id, as [`Client::send`] returned it.
        id: String,
        /// `status`.
        status: AckStatus,
        /// `code` (§14.1).
        code: Option<String>,
        /// `reason`.
        reason: Option<String>,
    },
    /// A message for one of the names bound; the application answers it with [`Input::Ack`].
    Message(Box<Msg>),
    /// The answer to a [`Request`], in the order the requests were sent.
    Reply(Reply),
    /// A request sent on a connection that was lost before its reply: it is not sent again,
    /// since `link` and `passport` operations are not idempotent.
    Unanswered(RequestKind),
    /// An audit event of the subscription (§4.9, §13).
    Event(Box<Event>),
    /// The server sent `error` (§4.8); it closes next.
    ServerError {
        /// `code` (§14.2).
        code: String,
        /// `reason`.
        reason: Option<String>,
    },
    /// The client found a protocol violation, sent `error` with this code and closed.
    ProtocolError(ErrorCode),
    /// A command given as an [`Input`] was refused.
    Refused(Refused),
    /// The connection is lost; the client dials again at `at`.
    Reconnecting {
        /// When [`Output::Connect`] comes.
        at: Timestamp,
    },
}

/// What the client has counted: everything it ignored or refused is here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Frames read.
    pub frames: u64,
    /// Connections the client closed for a protocol violation.
    pub protocol_errors: u64,
    /// Connections lost (closed by either side, failed dials included).
    pub disconnects: u64,
    /// Messages written again on a later connection.
    pub resent: u64,
    /// Acks from the server for no message awaiting one, ignored.
    pub stray_acks: u64,
    /// Application acks for no message awaiting one, ignored.
    pub stray_user_acks: u64,
    /// Messages the server sent again while the first copy awaited the application, ignored.
    pub duplicate_messages: u64,
    /// Messages answered `failed` because the inbox was full.
    pub inbox_full: u64,
    /// Replies for no request awaiting one, ignored.
    pub stray_replies: u64,
    /// Connections given up on because a message or the welcome waited too long.
    pub timeouts: u64,
    /// Bytes that arrived with no connection open, ignored.
    pub stray_bytes: u64,
    /// [`Input::Connected`] with a connection already up, ignored.
    pub stray_connects: u64,
}

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not wanted, or wanted and the first dial not asked for yet.
    Idle,
    /// [`Output::Connect`] is out.
    Dialing,
    /// `hello` is written; waiting for `welcome` since the instant held.
    AwaitWelcome(Timestamp),
    /// Welcomed.
    Open,
    /// Lost; dial again at the instant held.
    Waiting(Timestamp),
}

/// A message sent and not yet acked.
#[derive(Clone, Debug)]
struct Unacked {
    msg: Msg,
    /// When it was made: its `ts`, for expiry (§7.2).
    created: Timestamp,
    /// When it was written on the current connection; `None` when not yet written on it.
    written: Option<Timestamp>,
    /// Whether it was written on an earlier connection.
    resend: bool,
}

impl Unacked {
    fn ttl(&self) -> Duration {
        self.msg.ttl.map_or(DEFAULT_TTL, Duration::from_secs)
    }
}

/// The AIRC client machine.
pub struct Client<R> {
    config: ClientConfig,
    rng: R,
    wanted: bool,
    state: State,
    backoff: Backoff,
    decoder: FrameDecoder,
    /// Messages unacked, in the order sent.
    unacked: VecDeque<Unacked>,
    /// Ids of messages handed to the application on this connection and not yet acked by it.
    inbox: BTreeSet<String>,
    /// Every name bound so far, in the order first bound.
    binds: Vec<String>,
    /// The names of each `bind` written on this connection and not yet answered, oldest first.
    binding: VecDeque<Vec<String>>,
    /// The subscription to renew after a reconnect.
    subscription: Option<Subscribe>,
    /// Requests waiting for a welcome.
    requests: VecDeque<Request>,
    /// Requests written on this connection and not yet answered, oldest first.
    awaiting: VecDeque<RequestKind>,
    out: VecDeque<Output>,
    stats: ClientStats,
}

impl<R: CryptoRng> Client<R> {
    /// A client that is not connected and does not want to be until [`Input::Start`].
    pub fn new(config: ClientConfig, rng: R) -> Self {
        Self {
            backoff: Backoff::new(config.backoff),
            config,
            rng,
            wanted: false,
            state: State::Idle,
            decoder: FrameDecoder::new(),
            unacked: VecDeque::new(),
            inbox: BTreeSet::new(),
            binds: Vec::new(),
            binding: VecDeque::new(),
            subscription: None,
            requests: VecDeque::new(),
            awaiting: VecDeque::new(),
            out: VecDeque::new(),
            stats: ClientStats::default(),
        }
    }

    /// What the client has counted.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Messages sent and not yet acked.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// The ids of the messages sent and not yet acked, oldest first.
    pub fn unacked_ids(&self) -> impl Iterator<Item = &str> {
        self.unacked.iter().map(|u| u.msg.id.as_str())
    }

    /// Whether the connection is welcomed.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// The names bound so far, which every reconnect binds again.
    pub fn binds(&self) -> &[String] {
        &self.binds
    }

    /// Sends a message and returns its fresh id; its ack comes as [`Output::Acked`]. Before the
    /// welcome, and while the connection is lost, the message waits and is written after the
    /// next welcome.
    pub fn send(&mut self, now: Timestamp, outgoing: Outgoing) -> Result<String, Refused> {
        if self.unacked.len() >= MAX_UNACKED {
            return Err(Refused::Full);
        }
        let id = match outgoing.id {
            Some(id) if self.unacked.iter().any(|u| u.msg.id == id) => {
                return Err(Refused::DuplicateId);
            }
            Some(id) => id,
            None => self.fresh_id(),
        };
        let msg = Msg {
            id: id.clone(),
            from: outgoing.from,
            to: outgoing.to,
            ts: seconds(now),
            body: outgoing.body,
            kind: outgoing.kind,
            re: outgoing.re,
            ttl: outgoing.ttl,
            via: None,
            hdr: outgoing.hdr,
        };
        let frame = Frame::Msg(msg);
        if framing::encode_checked(&frame).is_err() {
            return Err(Refused::TooLarge);
        }
        if let Frame::Msg(msg) = frame {
            self.unacked.push_back(Unacked {
                msg,
                created: now,
                written: None,
                resend: false,
            });
        }
        if self.state == State::Open {
            self.write_unsent(now);
        }
        Ok(id)
    }

    /// Binds `names` (§4.3) and keeps them, so that every reconnect binds them again. Names
    /// already held are not bound twice; when all are, nothing is sent.
    pub fn bind(&mut self, names: Vec<String>) -> Result<(), Refused> {
        let mut fresh: Vec<String> = Vec::new();
        for n in names {
            if !self.binds.contains(&n) && !fresh.contains(&n) {
                fresh.push(n);
            }
        }
        if self.binds.len() + fresh.len() > MAX_BIND_NAMES {
            return Err(Refused::TooManyNames);
        }
        if fresh.is_empty() {
            return Ok(());
        }
        self.binds.extend(fresh.iter().cloned());
        if self.state == State::Open {
            self.write_bind(fresh);
        }
        Ok(())
    }

    /// Sends a request; its reply comes as [`Output::Reply`], or [`Output::Unanswered`] if the
    /// connection is lost first. Before the welcome it waits.
    pub fn request(&mut self, request: Request) -> Result<(), Refused> {
        if self.requests.len() + self.awaiting.len() >= MAX_REQUESTS {
            return Err(Refused::TooManyRequests);
        }
        if let Request::Subscribe(s) = &request {
            self.subscription = Some(s.clone());
        }
        if self.state == State::Open {
            self.write_request(&request);
        } else {
            self.requests.push_back(request);
        }
        Ok(())
    }

    /// A message id not among the unacked ones (a clash of 128 random bits is not expected, but
    /// two unacked messages sharing an id would share one ack).
    fn fresh_id(&mut self) -> String {
        loop {
            let id = frame::message_id(&mut self.rng);
            if !self.unacked.iter().any(|u| u.msg.id == id) {
                return id;
            }
        }
    }

    fn transmit(&mut self, frame: &Frame) {
        self.out.push_back(Output::Transmit(framing::encode(frame)));
    }

    fn write_bind(&mut self, names: Vec<String>) {
        self.transmit(&Frame::Bind(Bind {
            names: names.clone(),
        }));
        self.binding.push_back(names);
    }

    fn write_request(&mut self, request: &Request) {
        self.transmit(&request.frame());
        self.awaiting.push_back(request.kind());
    }

    /// Writes every unacked message not yet written on this connection, in order; one whose ttl
    /// has passed is answered `failed expired` here instead, as the server would (§6.2, §7.2).
    fn write_unsent(&mut self, now: Timestamp) {
        let mut expired = Vec::new();
        let mut frames = Vec::new();
        let mut resent = 0;
        self.unacked.retain_mut(|u| {
            if u.written.is_some() {
                return true;
            }
            if spool::is_expired(u.created, u.ttl(), now) {
                expired.push(u.msg.id.clone());
                return false;
            }
            u.written = Some(now);
            resent += u64::from(u.resend);
            frames.push(framing::encode(&Frame::Msg(u.msg.clone())));
            true
        });
        self.stats.resent += resent;
        for bytes in frames {
            self.out.push_back(Output::Transmit(bytes));
        }
        for id in expired {
            self.out.push_back(Output::Acked {
                id,
                status: AckStatus::Failed,
                code: Some(AckCode::Expired.as_str().to_string()),
                reason: None,
            });
        }
    }

    fn start(&mut self) {
        self.wanted = true;
        if self.state == State::Idle {
            self.state = State::Dialing;
            self.out.push_back(Output::Connect);
        }
    }

    fn stop(&mut self, now: Timestamp) {
        self.wanted = false;
        match self.state {
            State::AwaitWelcome(_) | State::Open => {
                self.out.push_back(Output::Close);
                self.lost(now);
            }
            State::Dialing | State::Waiting(_) => self.state = State::Idle,
            State::Idle => {}
        }
    }

    fn connected(&mut self, now: Timestamp) {
        match self.state {
            State::Dialing => {}
            State::Idle | State::Waiting(_) => {
                // A dial that completed after a stop: nobody wants it.
                self.out.push_back(Output::Close);
                return;
            }
            State::AwaitWelcome(_) | State::Open => {
                // The host reporting a second connection while one is up: a host bug. Closing
                // would close the one in use, so the report is ignored and counted.
                self.stats.stray_connects += 1;
                return;
            }
        }
        self.state = State::AwaitWelcome(now);
        self.decoder = FrameDecoder::new();
        let hello = Hello {
            proto: PROTO.to_string(),
            role: Role::Client,
            agent: self.config.agent.clone(),
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        };
        self.transmit(&Frame::Hello(hello));
    }

    /// The connection is gone (either side closed it, or a dial failed): forget what belonged to
    /// it, keep what outlives it, and dial again if wanted.
    fn lost(&mut self, now: Timestamp) {
        if matches!(self.state, State::Idle | State::Waiting(_)) {
            return;
        }
        self.stats.disconnects += 1;
        self.decoder = FrameDecoder::new();
        // The server has no ack to wait for from a connection that is gone; it spools the
        // message or times it out (§6.6) and delivers it again later.
        self.inbox.clear();
        self.binding.clear();
        for kind in core::mem::take(&mut self.awaiting) {
            self.out.push_back(Output::Unanswered(kind));
        }
        for u in &mut self.unacked {
            u.resend |= u.written.take().is_some();
        }
        if self.wanted {
            let at = now + self.backoff.next_delay(&mut self.rng);
            self.state = State::Waiting(at);
            self.out.push_back(Output::Reconnecting { at });
        } else {
            self.state = State::Idle;
        }
    }

    /// A protocol violation by the server: `error` with `code`, close (§3.2, §4.8).
    fn violation(&mut self, now: Timestamp, code: ErrorCode, reason: &str) {
        self.stats.protocol_errors += 1;
        self.transmit(&Frame::Error(ErrorFrame::new(code, reason)));
        self.out.push_back(Output::Close);
        self.out.push_back(Output::ProtocolError(code));
        self.lost(now);
    }

    fn bytes(&mut self, now: Timestamp, bytes: &[u8]) {
        if !matches!(self.state, State::AwaitWelcome(_) | State::Open) {
            self.stats.stray_bytes += 1;
            return;
        }
        self.decoder.push(bytes);
        // A violation ends the connection; what was behind it in the same read is dropped with it.
        while matches!(self.state, State::AwaitWelcome(_) | State::Open) {
            let Some(line) = self.decoder.next() else {
                break;
            };
            self.stats.frames += 1;
            match line {
                Ok(frame) => self.frame(now, frame),
                Err(e) => self.bad_line(now, &e),
            }
        }
    }

    fn bad_line(&mut self, now: Timestamp, e: &FramingError) {
        match (e.answer(), self.state) {
            (Answer::AckFailed { id, code }, State::Open) => {
                self.transmit(&Frame::Ack(Ack::with_code(id, AckStatus::Failed, code)));
            }
            (Answer::AckFailed { .. }, _) => {
                self.violation(now, ErrorCode::NoWelcome, "expected welcome")
            }
            (Answer::Close(code), _) => self.violation(now, code, &e.to_string()),
        }
    }

    fn frame(&mut self, now: Timestamp, frame: Frame) {
        if let Frame::Error(e) = frame {
            // The server closes next (§4.8); a refused bind takes its names off the list, so
            // that the reconnect does not ask again for what was refused (§4.3).
            if matches!(
                e.error_code(),
                Some(ErrorCode::BadBind | ErrorCode::Forbidden)
            ) && let Some(names) = self.binding.pop_front()
            {
                self.binds.retain(|n| !names.contains(n));
            }
            self.out.push_back(Output::ServerError {
                code: e.code,
                reason: e.reason,
            });
            return;
        }
        if let State::AwaitWelcome(_) = self.state {
            match frame {
                Frame::Welcome(w) => self.welcome(now, w),
                other => {
                    let reason = alloc::format!("expected welcome, got {}", other.t());
                    self.violation(now, ErrorCode::NoWelcome, &reason)
                }
            }
            return;
        }
        match frame {
            Frame::Msg(m) => self.message(m),
            Frame::Ack(a) => self.acked(a),
            Frame::Bound(b) => {
                self.binding.pop_front();
                self.out.push_back(Output::Bound(b.names));
            }
            Frame::Ping(p) => self.transmit(&Frame::Pong(p.pong())),
            Frame::Pong(_) => {}
            Frame::Linked(r) => self.reply(RequestKind::Link, Reply::Linked(r)),
            Frame::Passported(r) => self.reply(RequestKind::Passport, Reply::Passported(r)),
            Frame::Subscribed(r) => self.reply(RequestKind::Subscribe, Reply::Subscribed(r)),
            Frame::Stats(r) => self.reply(RequestKind::Stat, Reply::Stats(r)),
            Frame::Event(e) => self.out.push_back(Output::Event(e)),
            other => {
                // An unknown `t`, or one only a client sends or only sent once (§3.2).
                let reason = alloc::format!("unexpected {} frame", other.t());
                self.violation(now, frame::UNKNOWN_TYPE, &reason)
            }
        }
    }

    fn welcome(&mut self, now: Timestamp, w: Welcome) {
        if w.proto != PROTO {
            let reason = alloc::format!("proto {} is not {PROTO}", w.proto);
            return self.violation(now, ErrorCode::BadProto, &reason);
        }
        if w.realm.is_empty() {
            return self.violation(now, ErrorCode::BadFrame, "welcome without a realm");
        }
        if let Some(expected) = &self.config.realm
            && !expected.eq_ignore_ascii_case(&w.realm)
        {
            let reason = alloc::format!("welcome from {}, not {expected}", w.realm);
            return self.violation(now, ErrorCode::RealmMismatch, &reason);
        }
        self.state = State::Open;
        self.backoff.reset();
        self.out.push_back(Output::Welcome {
            realm: w.realm,
            ns: w.ns.unwrap_or_default(),
        });
        // §3.3 step 3: bind again everything bound before, then renew the subscription, then
        // what waited for the welcome, oldest first.
        if !self.binds.is_empty() {
            self.write_bind(self.binds.clone());
        }
        let waiting = core::mem::take(&mut self.requests);
        let renews = !waiting.iter().any(|r| matches!(r, Request::Subscribe(_)));
        if renews && let Some(s) = self.subscription.clone() {
            self.write_request(&Request::Subscribe(s));
        }
        for r in &waiting {
            self.write_request(r);
        }
        self.write_unsent(now);
    }

    fn message(&mut self, m: Msg) {
        if self.inbox.contains(&m.id) {
            self.stats.duplicate_messages += 1;
            return;
        }
        if self.inbox.len() >= MAX_INBOX {
            self.stats.inbox_full += 1;
            let mut ack = Ack::new(m.id, AckStatus::Failed);
            ack.reason = Some(INBOX_FULL.to_string());
            return self.transmit(&Frame::Ack(ack));
        }
        self.inbox.insert(m.id.clone());
        self.out.push_back(Output::Message(Box::new(m)));
    }

    fn acked(&mut self, a: Ack) {
        let Some(i) = self
            .unacked
            .iter()
            .position(|u| u.msg.id == a.id && u.written.is_some())
        else {
            self.stats.stray_acks += 1;
            return;
        };
        self.unacked.remove(i);
        self.out.push_back(Output::Acked {
            id: a.id,
            status: a.status,
            code: a.code,
            reason: a.reason,
        });
    }

    fn reply(&mut self, kind: RequestKind, reply: Reply) {
        // The server answers requests in the order they came (one connection, one reader), so
        // the oldest request of this kind is the one answered.
        match self.awaiting.iter().position(|k| *k == kind) {
            Some(i) => {
                self.awaiting.remove(i);
                self.out.push_back(Output::Reply(reply));
            }
            None => self.stats.stray_replies += 1,
        }
    }

    fn user_ack(&mut self, ack: Ack) {
        if self.state == State::Open && self.inbox.remove(&ack.id) {
            self.transmit(&Frame::Ack(ack));
        } else {
            self.stats.stray_user_acks += 1;
        }
    }

    /// The first written message still unacked: when it was written.
    fn oldest_written(&self) -> Option<Timestamp> {
        self.unacked.iter().filter_map(|u| u.written).min()
    }
}

/// Unix seconds with milliseconds, as `msg.ts` carries them (§4.2, §9.3).
fn seconds(now: Timestamp) -> f64 {
    let ms = now.as_millis();
    (ms / 1000) as f64 + (ms % 1000) as f64 / 1000.0
}

impl<R: CryptoRng> Machine for Client<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        let refused = match input {
            Input::Start => {
                self.start();
                Ok(())
            }
            Input::Stop => {
                self.stop(now);
                Ok(())
            }
            Input::Connected => {
                self.connected(now);
                Ok(())
            }
            Input::Bytes(b) => {
                self.bytes(now, &b);
                Ok(())
            }
            Input::Disconnected => {
                self.lost(now);
                Ok(())
            }
            Input::Bind(names) => self.bind(names),
            Input::Send(o) => self.send(now, o).map(drop),
            Input::Request(r) => self.request(r),
            Input::Ack(a) => {
                self.user_ack(a);
                Ok(())
            }
        };
        if let Err(why) = refused {
            self.out.push_back(Output::Refused(why));
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        match self.state {
            State::Waiting(at) => Some(Wakeup::new(at, "reconnect backoff")),
            State::AwaitWelcome(since) => Some(Wakeup::new(
                since.saturating_add(self.config.welcome_wait),
                "welcome wait",
            )),
            State::Open => self
                .oldest_written()
                .map(|t| Wakeup::new(t.saturating_add(self.config.ack_wait), "ack wait")),
            State::Idle | State::Dialing => None,
        }
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.poll_timeout().is_none_or(|w| w.at > now) {
            return;
        }
        match self.state {
            State::Waiting(_) => {
                self.state = State::Dialing;
                self.out.push_back(Output::Connect);
            }
            State::AwaitWelcome(_) | State::Open => {
                self.stats.timeouts += 1;
                self.out.push_back(Output::Close);
                self.lost(now);
            }
            State::Idle | State::Dialing => {}
        }
    }
}
