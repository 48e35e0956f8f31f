//! The AIRC client as one sans-IO machine (AIRC §3.3, §4.1–§4.4).
//!
//! A [`Client`] holds one connection to its realm's client face at a time. It says `hello`
//! first and checks the `welcome` (§3.3 step 1, §4.1), binds its patterns (§4.3), sends messages
//! with fresh ids and keeps each one until its one ack comes back (§4.2, §4.4), answers `ping`
//! (§3.3 step 2), and, when the connection closes, reconnects with backoff and binds again
//! (§3.3 step 3) while the server spools for it.
//!
//! Messages not yet acked when the connection drops are sent again, with the same id, once the
//! next `welcome` arrives: the server's duplicate suppression (§7.3) makes the retry safe, and
//! the client still gets exactly one ack per id.
//!
//! The host opens the connection when asked ([`Output::Connect`] → [`Input::Connected`], or
//! [`Input::Closed`] when it could not), moves bytes, and executes outputs in order.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use super::frame::{
    Ack, Bind, ErrorCode, ErrorFrame, Frame, Hello, Msg, PROTO, Role, Welcome, message_id,
};
use super::framing::{self, FrameDecoder};
use crate::core::backoff::{Backoff, BackoffConfig};
use crate::core::{Machine, Timestamp, Wakeup};
use rand_core::CryptoRng;

/// How a client waits between reconnect attempts (§3.3 step 3: "reconnect with backoff"): the
/// first wait is between 0.5 s and 1 s, doubling up to a ceiling of 60 s, reset by a `welcome`.
pub const RECONNECT: BackoffConfig = BackoffConfig {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(60),
    multiplier: 2,
};

/// Messages a client keeps awaiting their ack at most; past it [`Input::Send`] is answered
/// with [`Output::NotSent`] rather than held without bound.
pub const MAX_OUTSTANDING: usize = 4096;

/// How a client is set up. [`ClientConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `hello.agent`: software name and version.
    pub agent: String,
    /// Patterns bound after every `welcome` (§4.3), relative to the realm; none for a client that
    /// only sends.
    pub binds: Vec<String>,
    /// The reconnect schedule.
    pub reconnect: BackoffConfig,
}

impl ClientConfig {
    /// Defaults: no binds, [`RECONNECT`].
    pub fn new(agent: impl Into<String>) -> Self {
        Self {
            agent: agent.into(),
            binds: Vec::new(),
            reconnect: RECONNECT,
        }
    }
}

/// What a client is told from outside.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// The host opened the connection an [`Output::Connect`] asked for.
    Connected,
    /// Bytes arrived on the connection, in any pieces.
    Received(Vec<u8>),
    /// The connection closed (either side), or the host could not open it.
    Closed,
    /// The application sends a message. An empty `id` gets a fresh one, a zero `ts` gets now.
    Send(Box<Msg>),
    /// The application's ack of a message it was handed ([`Output::Message`]). Dropped when no
    /// connection is open: the server keeps the message and hands it over again.
    Ack(Ack),
}

/// What a client asks its host (or its application) to do, strictly in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Open a connection to the realm's client face; answer with [`Input::Connected`] or
    /// [`Input::Closed`].
    Connect,
    /// Write these bytes (whole frames) to the connection.
    Send(Vec<u8>),
    /// Close the connection.
    Close,
    /// The server accepted the hello (§4.1): its realm and this connection's namespaces.
    Welcome(Welcome),
    /// A message for one of this client's binds; the application answers with [`Input::Ack`].
    Message(Box<Msg>),
    /// The one ack of a message this client sent (§4.4).
    Acked(Ack),
    /// A message that was not taken: [`MAX_OUTSTANDING`] are already awaiting their acks.
    NotSent(Box<Msg>),
    /// The server's `error` (§4.8); it closes the connection after it.
    Error(ErrorFrame),
    /// Any other answer from the server (`bound`, `linked`, `passported`, `stats`,
    /// `subscribed`, `event`), for the application.
    Frame(Box<Frame>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No connection; a reconnect is due at the timer.
    Disconnected,
    /// [`Output::Connect`] is out.
    Connecting,
    /// `hello` sent.
    AwaitWelcome,
    Open,
}

/// What the client has counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Connections that reached `welcome`.
    pub welcomes: u64,
    /// Reconnect attempts made after a close.
    pub reconnects: u64,
    /// Messages written at a reconnect's `welcome`: held while disconnected, or written before
    /// and not acked.
    pub resent: u64,
    /// Acks for ids this client is not waiting on, ignored.
    pub stray_acks: u64,
    /// Connections this client closed for a protocol violation by the server.
    pub protocol_errors: u64,
}

/// The client machine; see the [module docs](self).
pub struct Client<R> {
    config: ClientConfig,
    rng: R,
    state: State,
    decoder: FrameDecoder,
    backoff: Backoff,
    /// When the next connection attempt is due, while disconnected.
    retry_at: Option<Timestamp>,
    /// Sent (or waiting to be sent) and not acked, in send order.
    outstanding: VecDeque<Msg>,
    out: VecDeque<Output>,
    stats: Stats,
}

impl<R> core::fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Client")
            .field("state", &self.state)
            .field("outstanding", &self.outstanding.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> Client<R> {
    /// A client that asks for its first connection at once, drawing ids and reconnect jitter
    /// from `rng`.
    pub fn new(config: ClientConfig, rng: R) -> Self {
        let backoff = Backoff::new(config.reconnect);
        let mut out = VecDeque::new();
        out.push_back(Output::Connect);
        Self {
            config,
            rng,
            state: State::Connecting,
            decoder: FrameDecoder::new(),
            backoff,
            retry_at: None,
            outstanding: VecDeque::new(),
            out,
            stats: Stats::default(),
        }
    }

    /// What the client has counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Messages sent and not acked yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Whether the connection is open and welcomed.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    fn send(&mut self, frame: &Frame) {
        self.out.push_back(Output::Send(framing::encode(frame)));
    }

    /// The server broke the protocol: say why and close; the close brings the reconnect.
    fn fail(&mut self, code: ErrorCode, reason: &str) {
        self.stats.protocol_errors += 1;
        self.send(&Frame::Error(ErrorFrame::new(code, reason)));
        self.out.push_back(Output::Close);
        self.disconnected_at_next_close();
    }

    /// Nothing more is read from this connection; the host's [`Input::Closed`] schedules the
    /// reconnect.
    fn disconnected_at_next_close(&mut self) {
        self.state = State::Connecting;
        self.decoder = FrameDecoder::new();
    }

    fn connected(&mut self) {
        if self.state != State::Connecting {
            return;
        }
        self.state = State::AwaitWelcome;
        self.decoder = FrameDecoder::new();
        let hello = Hello {
            proto: PROTO.to_string(),
            role: Role::Client,
            agent: Some(self.config.agent.clone()),
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        };
        self.send(&Frame::Hello(hello));
    }

    fn closed(&mut self, now: Timestamp) {
        if self.state == State::Disconnected {
            return;
        }
        self.state = State::Disconnected;
        let delay = self.backoff.next_delay(&mut self.rng);
        self.retry_at = Some(now + delay);
    }

    fn received(&mut self, bytes: &[u8]) {
        if !matches!(self.state, State::AwaitWelcome | State::Open) {
            return;
        }
        self.decoder.push(bytes);
        while matches!(self.state, State::AwaitWelcome | State::Open) {
            let Some(next) = self.decoder.next() else {
                return;
            };
            match next {
                Ok(frame) => self.frame(frame),
                Err(e) => self.fail(ErrorCode::BadFrame, &e.to_string()),
            }
        }
    }

    fn frame(&mut self, frame: Frame) {
        match (self.state, frame) {
            (State::AwaitWelcome, Frame::Welcome(w)) => self.welcome(w),
            (_, Frame::Error(e)) => {
                self.out.push_back(Output::Error(e));
                self.out.push_back(Output::Close);
                self.disconnected_at_next_close();
            }
            (State::AwaitWelcome, _) => {
                self.fail(ErrorCode::NoWelcome, "hello was not answered with welcome");
            }
            (_, Frame::Ping(p)) => self.send(&Frame::Pong(p.pong())),
            (_, Frame::Pong(_)) => {}
            (_, Frame::Msg(m)) => self.out.push_back(Output::Message(Box::new(m))),
            (_, Frame::Ack(a)) => self.acked(a),
            (_, f @ (Frame::Hello(_) | Frame::Welcome(_) | Frame::Unknown { .. })) => {
                let why = alloc::format!("{} is not expected here", f.t());
                self.fail(ErrorCode::UnexpectedFrame, &why);
            }
            (_, other) => self.out.push_back(Output::Frame(Box::new(other))),
        }
    }

    /// §4.1: the welcome names this wire version; then bind (§4.3) and send what waits.
    fn welcome(&mut self, w: Welcome) {
        if w.proto != PROTO {
            let why = alloc::format!("this client speaks {PROTO}");
            return self.fail(ErrorCode::BadProto, &why);
        }
        self.state = State::Open;
        self.stats.welcomes += 1;
        self.backoff.reset();
        self.out.push_back(Output::Welcome(w));
        if !self.config.binds.is_empty() {
            let names = self.config.binds.clone();
            self.send(&Frame::Bind(Bind { names }));
        }
        let waiting: Vec<Frame> = self.outstanding.iter().cloned().map(Frame::Msg).collect();
        for m in &waiting {
            self.send(m);
        }
        if self.stats.welcomes > 1 {
            self.stats.resent += waiting.len() as u64;
        }
    }

    fn acked(&mut self, ack: Ack) {
        match self.outstanding.iter().position(|m| m.id == ack.id) {
            Some(i) => {
                self.outstanding.remove(i);
                self.out.push_back(Output::Acked(ack));
            }
            None => self.stats.stray_acks += 1,
        }
    }

    fn send_msg(&mut self, now: Timestamp, mut m: Msg) {
        if self.outstanding.len() >= MAX_OUTSTANDING {
            return self.out.push_back(Output::NotSent(Box::new(m)));
        }
        if m.id.is_empty() {
            m.id = message_id(&mut self.rng);
        }
        if m.ts == 0.0 {
            // Milliseconds as a fraction of a second, as §4.2's `ts` is written.
            m.ts = now.as_millis() as f64 / 1000.0;
        }
        if self.state == State::Open {
            self.send(&Frame::Msg(m.clone()));
        }
        self.outstanding.push_back(m);
    }
}

impl<R: CryptoRng> Machine for Client<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        match input {
            Input::Connected => self.connected(),
            Input::Received(bytes) => self.received(&bytes),
            Input::Closed => self.closed(now),
            Input::Send(m) => self.send_msg(now, *m),
            Input::Ack(a) => {
                if self.state == State::Open {
                    self.send(&Frame::Ack(a));
                }
            }
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.retry_at.map(|at| Wakeup::new(at, "reconnect"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.state == State::Disconnected && self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.state = State::Connecting;
            self.stats.reconnects += 1;
            self.out.push_back(Output::Connect);
        }
    }
}
