//! A minimal AIRC client as a sans-IO machine, for the simulator: it says hello, binds one
//! endpoint, sends the messages it is told to, retries what was never answered, and acks every
//! message it receives `delivered` (sometimes only after a stall longer than the server's ack
//! timeout, to exercise §6.6).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::Rng;
use weft_proto::airc::frame::{Ack, AckStatus, Bind, Frame, Hello, Msg, PROTO, Role};
use weft_proto::airc::framing::{self, FrameDecoder};
use weft_proto::core::{Machine, Timestamp, Wakeup};

/// How long a client waits before dialling its server again, at most.
const MAX_BACKOFF_MS: u64 = 3_000;

/// What a client is told by the simulator.
#[derive(Clone, Debug)]
pub enum ClientInput {
    /// The connection its [`ClientOutput::Connect`] asked for is open.
    Connected,
    /// The connection could not be opened (the server is down).
    ConnectFailed,
    /// Bytes arrived on the connection.
    Received(Vec<u8>),
    /// The connection closed.
    Closed,
    /// The application asks to send `body` to `to`.
    Send {
        /// The destination address, as the client writes it.
        to: String,
        /// The text.
        body: String,
    },
    /// Sets the chance, per thousand, that an incoming message is acked only after a stall.
    Stall(u32),
}

/// What a client asks of the simulator, or reports to its application.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientOutput {
    /// Open a connection to the home server.
    Connect,
    /// Write bytes on the connection.
    Send(Vec<u8>),
    /// A message was handed to the application.
    Delivered(Box<Msg>),
    /// The final answer to one of this client's messages.
    Acked(Ack),
    /// This client will ack message `id` only at `at`, past the server's ack timeout.
    Stalled {
        /// The message.
        id: String,
        /// When the ack goes out.
        at: Timestamp,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Offline,
    Dialling,
    AwaitWelcome,
    AwaitBound,
    Ready,
}

/// A message of this client's that has no final ack yet.
#[derive(Debug)]
struct Outgoing {
    msg: Msg,
    /// Whether it went out on the current connection (a retry goes out once per connection).
    sent_here: bool,
}

/// The simulated client: hello, one bind, its messages (retried until answered), and an ack for
/// every message it receives, sometimes after a stall longer than the server's ack timeout.
#[derive(Debug)]
pub struct SimClient {
    name: String,
    endpoint: String,
    rng: ChaCha20Rng,
    stall_permille: u32,
    stall: (Duration, Duration),
    state: State,
    decoder: FrameDecoder,
    next_msg: u64,
    /// Unanswered messages by creation order, so retries keep the order they were sent in.
    outgoing: BTreeMap<u64, Outgoing>,
    acks_due: BTreeMap<(Timestamp, u64), String>,
    ack_seq: u64,
    reconnect_at: Option<Timestamp>,
    out: VecDeque<ClientOutput>,
}

impl SimClient {
    /// A client named `name` (its namespace) that binds `name/inbox`, dialling first at `start`.
    /// A stalled ack waits between `stall.0` and `stall.1`.
    pub fn new(
        name: &str,
        rng: ChaCha20Rng,
        start: Timestamp,
        stall: (Duration, Duration),
    ) -> Self {
        Self {
            name: name.to_string(),
            endpoint: format!("{name}/inbox"),
            rng,
            stall_permille: 0,
            stall,
            state: State::Offline,
            decoder: FrameDecoder::new(),
            next_msg: 0,
            outgoing: BTreeMap::new(),
            acks_due: BTreeMap::new(),
            ack_seq: 0,
            reconnect_at: Some(start),
            out: VecDeque::new(),
        }
    }

    /// The endpoint this client binds, relative to its realm.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Messages sent and not yet answered.
    pub fn unanswered(&self) -> impl Iterator<Item = &str> {
        self.outgoing.values().map(|o| o.msg.id.as_str())
    }

    fn send(&mut self, frame: &Frame) {
        self.out
            .push_back(ClientOutput::Send(framing::encode(frame)));
    }

    fn backoff(&mut self, now: Timestamp) {
        let wait = 100 + self.rng.next_u64() % MAX_BACKOFF_MS;
        self.reconnect_at = Some(now + Duration::from_millis(wait));
    }

    /// Sends everything unanswered that has not gone out on this connection yet.
    fn send_outgoing(&mut self) {
        let due: Vec<Msg> = self
            .outgoing
            .values_mut()
            .filter(|o| !o.sent_here)
            .map(|o| {
                o.sent_here = true;
                o.msg.clone()
            })
            .collect();
        for m in due {
            self.send(&Frame::Msg(m));
        }
    }

    fn received(&mut self, now: Timestamp, bytes: &[u8]) {
        self.decoder.push(bytes);
        while let Some(next) = self.decoder.next() {
            // A server only ever writes well-formed frames; a bad one is the server's bug and is
            // visible in the trace, so the client just skips it.
            let Ok(frame) = next else { continue };
            match (self.state, frame) {
                (State::AwaitWelcome, Frame::Welcome(_)) => {
                    self.state = State::AwaitBound;
                    let names = vec![self.endpoint.clone()];
                    self.send(&Frame::Bind(Bind { names }));
                }
                (State::AwaitBound, Frame::Bound(_)) => {
                    self.state = State::Ready;
                    self.send_outgoing();
                }
                (_, Frame::Msg(m)) => {
                    let id = m.id.clone();
                    self.out.push_back(ClientOutput::Delivered(Box::new(m)));
                    if self.rng.next_u32() % 1000 < self.stall_permille {
                        let (lo, hi) = (self.stall.0.as_millis(), self.stall.1.as_millis());
                        let span = u64::try_from(hi.saturating_sub(lo)).unwrap_or(0) + 1;
                        let lo = u64::try_from(lo).unwrap_or(0);
                        let at = now + Duration::from_millis(lo + self.rng.next_u64() % span);
                        self.ack_seq += 1;
                        self.acks_due.insert((at, self.ack_seq), id.clone());
                        self.out.push_back(ClientOutput::Stalled { id, at });
                    } else {
                        self.send(&Frame::Ack(Ack::new(id, AckStatus::Delivered)));
                    }
                }
                (_, Frame::Ack(a)) => {
                    let key = self
                        .outgoing
                        .iter()
                        .find(|(_, o)| o.msg.id == a.id)
                        .map(|(k, _)| *k);
                    if let Some(k) = key {
                        self.outgoing.remove(&k);
                    }
                    self.out.push_back(ClientOutput::Acked(a));
                }
                _ => {}
            }
        }
    }
}

impl Machine for SimClient {
    type Input = ClientInput;
    type Output = ClientOutput;

    fn handle(&mut self, now: Timestamp, input: ClientInput) {
        match input {
            ClientInput::Connected => {
                self.state = State::AwaitWelcome;
                self.decoder = FrameDecoder::new();
                let hello = Hello {
                    proto: PROTO.to_string(),
                    role: Role::Client,
                    agent: Some("weft-sim".to_string()),
                    realm: None,
                    ts: None,
                    nonce: None,
                    sig: None,
                };
                self.send(&Frame::Hello(hello));
            }
            ClientInput::ConnectFailed => {
                self.state = State::Offline;
                self.backoff(now);
            }
            ClientInput::Received(bytes) => self.received(now, &bytes),
            ClientInput::Closed => {
                self.state = State::Offline;
                // Acks owed on the old connection cannot be sent on a new one: the server
                // redelivers what it never heard an ack for.
                self.acks_due.clear();
                for o in self.outgoing.values_mut() {
                    o.sent_here = false;
                }
                self.backoff(now);
            }
            ClientInput::Send { to, body } => {
                self.next_msg += 1;
                let msg = Msg {
                    id: format!("{}-{}", self.name, self.next_msg),
                    from: "out".to_string(),
                    to,
                    ts: now.as_millis() as f64 / 1000.0,
                    body,
                    kind: None,
                    re: None,
                    ttl: None,
                    via: None,
                    hdr: None,
                };
                self.outgoing.insert(
                    self.next_msg,
                    Outgoing {
                        msg,
                        sent_here: false,
                    },
                );
                if self.state == State::Ready {
                    self.send_outgoing();
                }
            }
            ClientInput::Stall(permille) => self.stall_permille = permille,
        }
    }

    fn poll(&mut self) -> Option<ClientOutput> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let ack = self
            .acks_due
            .keys()
            .next()
            .map(|(at, _)| Wakeup::new(*at, "stalled ack"));
        let dial = self
            .reconnect_at
            .filter(|_| self.state == State::Offline)
            .map(|at| Wakeup::new(at, "reconnect"));
        Wakeup::earliest(ack, dial)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        while let Some(entry) = self.acks_due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let id = entry.remove();
            self.send(&Frame::Ack(Ack::new(id, AckStatus::Delivered)));
        }
        if self.state == State::Offline && self.reconnect_at.is_some_and(|at| at <= now) {
            self.reconnect_at = None;
            self.state = State::Dialling;
            self.out.push_back(ClientOutput::Connect);
        }
    }
}
