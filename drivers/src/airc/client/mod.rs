//! The `weft airc` client commands' connection: a thin blocking driver over the one AIRC client
//! machine, [`weft_proto::airc::client::Client`], on a realm's client face (AIRC §3, §4), over
//! its Unix socket or its loopback TCP listener.
//!
//! Every protocol decision (hello and the welcome checks, pongs, one ack per message, which
//! reply answers which request) is the machine's; this module owns a socket, feeds the machine
//! the bytes and the time, writes what it asks, and waits for the output a command needs. A
//! command is one connection: a connection lost is an error the command reports, not redialled.
//! The commands themselves are in [`command`].

pub mod command;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use weft_proto::airc::client::{
    Client as Machine, ClientConfig, Input, Outgoing, Output, Refused, Reply, Request,
};
pub use weft_proto::airc::frame::message_id;
use weft_proto::airc::frame::{Ack, AckStatus, Event, Frame, Msg, PROTO, Welcome};
use weft_proto::airc::framing;
use weft_proto::core::Machine as _;

/// How long a command waits for the server's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// Where a realm's client face listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Its Unix socket (identity from `SO_PEERCRED`, §5).
    Unix(PathBuf),
    /// Its loopback TCP listener (identity from the owner of this client's socket, §5).
    Tcp(SocketAddr),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "{}", path.display()),
            Self::Tcp(addr) => write!(f, "tcp {addr}"),
        }
    }
}

/// The byte stream under a [`Client`].
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.set_read_timeout(timeout),
            Self::Tcp(s) => s.set_read_timeout(timeout),
        }
    }

    fn shutdown(&self) {
        // Closing a socket the peer already closed fails harmlessly.
        let _ = match self {
            Self::Unix(s) => s.shutdown(Shutdown::Both),
            Self::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.write(buf),
            Self::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.flush(),
            Self::Tcp(s) => s.flush(),
        }
    }
}

/// The server said no: a `failed` ack, a `linked`/`passported` with `ok: false`, or an `error`
/// frame before it closed. What a shell user is shown, and why the command exits non-zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The §14 code (an ack code or an `error` frame code).
    pub code: String,
    /// The server's reason, empty when it gave none.
    pub reason: String,
}

impl Refusal {
    fn new(code: Option<&str>, reason: Option<&str>) -> Self {
        Self {
            // A refusal without a code is still a refusal; say so rather than print nothing.
            code: code.unwrap_or("refused").to_string(),
            reason: reason.unwrap_or_default().to_string(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.reason.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.reason)
        }
    }
}

impl From<Refusal> for io::Error {
    fn from(r: Refusal) -> Self {
        protocol(r)
    }
}

fn protocol(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A command the client machine refused (a table full, a message too large): nothing was sent.
fn refused_here(why: Refused) -> io::Error {
    protocol(format!("refused by the client: {why:?}"))
}

fn lost() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed")
}

/// A connection to a realm's client face, past hello and welcome.
pub struct Client {
    stream: Stream,
    machine: Machine<ChaCha20Rng>,
    /// What the server said in its welcome: the realm and this connection's namespaces (`ns`
    /// as the machine reports it: empty when the server named none).
    pub welcome: Welcome,
    /// Outputs the machine gave while a command waited for another, for the wait that wants
    /// them (a message for the next [`Client::receive`], an ack for [`Client::next_ack`]).
    /// The machine bounds them: each message awaits its ack
    /// ([`weft_proto::airc::client::MAX_INBOX`]), each ack answers a message sent
    /// ([`weft_proto::airc::client::MAX_UNACKED`]), each reply a request; events come only to a
    /// subscriber, which reads them.
    held: VecDeque<Output>,
    /// Whether a wait has no deadline (a listener or a subscriber waits as long as it takes).
    forever: bool,
    /// Whether the socket is closed: by the machine, by the server, or by an error.
    closed: bool,
}

impl Client {
    /// Connects to a Unix socket and says hello.
    pub fn connect(socket: &Path) -> io::Result<Self> {
        Self::connect_to(&Target::Unix(socket.to_path_buf()))
    }

    /// Connects to `target` and says hello; a server that refuses the hello is an error naming
    /// its code.
    pub fn connect_to(target: &Target) -> io::Result<Self> {
        let stream = match target {
            Target::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            Target::Tcp(addr) => Stream::Tcp(TcpStream::connect(addr)?),
        };
        let config = ClientConfig {
            agent: Some(format!("weft/{}", env!("CARGO_PKG_VERSION"))),
            ..ClientConfig::default()
        };
        let mut machine = Machine::new(config, crate::os_rng());
        let now = crate::now();
        // The machine asks to dial (`Output::Connect`); the socket above is that dial.
        machine.handle(now, Input::Start);
        machine.handle(now, Input::Connected);
        let mut c = Self {
            stream,
            machine,
            welcome: Welcome {
                realm: String::new(),
                proto: PROTO.into(),
                ns: None,
                server: None,
                sig: None,
                kid: None,
            },
            held: VecDeque::new(),
            forever: false,
            closed: false,
        };
        let (realm, ns) = c
            .wait(|o| match o {
                Output::Welcome { realm, ns } => Pick::Took((realm, ns)),
                o => Pick::Pass(o),
            })?
            .map_err(protocol)?;
        c.welcome.realm = realm;
        c.welcome.ns = Some(ns);
        Ok(c)
    }

    /// Waits with no deadline from now on: a listener or a subscriber waits as long as it takes.
    pub fn wait_forever(&mut self) -> io::Result<()> {
        self.forever = true;
        Ok(())
    }

    /// Sends a message and waits for its one ack (§4.4); an `error` frame is an error.
    pub fn message(&mut self, msg: Msg) -> io::Result<Ack> {
        Ok(self.request_ack(msg)??)
    }

    /// Sends a message under its own id (the machine stamps `ts`) and waits for its one ack, or
    /// the `error` frame that refused it.
    pub fn request_ack(&mut self, msg: Msg) -> io::Result<Result<Ack, Refusal>> {
        let id = self.post(msg)?;
        self.wait(|o| ack_of(o, Some(&id)))
    }

    /// Sends a message under its own id (the machine stamps `ts`) without waiting for its ack,
    /// which [`Client::next_ack`] reads: many messages in flight at once. Returns the id.
    pub fn post(&mut self, msg: Msg) -> io::Result<String> {
        let outgoing = Outgoing {
            id: Some(msg.id),
            from: msg.from,
            to: msg.to,
            body: msg.body,
            kind: msg.kind,
            re: msg.re,
            ttl: msg.ttl,
            hdr: msg.hdr,
        };
        let id = self
            .machine
            .send(crate::now(), outgoing)
            .map_err(refused_here)?;
        match self.run_outputs::<()>(&mut Pick::Pass)? {
            Some(Err(refusal)) => Err(refusal.into()),
            _ => Ok(id),
        }
    }

    /// Waits for the next ack to a message sent, or the `error` frame that refused one.
    pub fn next_ack(&mut self) -> io::Result<Result<Ack, Refusal>> {
        self.wait(|o| ack_of(o, None))
    }

    /// Binds names (§4.3); the server's `bound` answer lists the absolute patterns.
    pub fn bind(&mut self, names: Vec<String>) -> io::Result<Vec<String>> {
        Ok(self.request_bind(names)??)
    }

    /// Binds names, answering the absolute patterns or the server's refusal. Names this
    /// connection bound already are not asked again: when all are, the answer is empty.
    pub fn request_bind(&mut self, names: Vec<String>) -> io::Result<Result<Vec<String>, Refusal>> {
        if names.iter().all(|n| self.machine.binds().contains(n)) {
            return Ok(Ok(Vec::new()));
        }
        self.machine.bind(names).map_err(refused_here)?;
        self.wait(|o| match o {
            Output::Bound(names) => Pick::Took(names),
            o => Pick::Pass(o),
        })
    }

    /// Sends a request (`link`, `passport`, `subscribe`, `stat`) and waits for its reply, or the
    /// `error` frame that refused it.
    pub fn request(&mut self, request: Request) -> io::Result<Result<Reply, Refusal>> {
        self.machine.request(request).map_err(refused_here)?;
        self.wait(|o| match o {
            Output::Reply(r) => Pick::Took(r),
            o => Pick::Pass(o),
        })
    }

    /// Waits for the next audit event of the subscription (§4.9).
    pub fn event(&mut self) -> io::Result<Result<Box<Event>, Refusal>> {
        self.wait(|o| match o {
            Output::Event(e) => Pick::Took(e),
            o => Pick::Pass(o),
        })
    }

    /// Waits for the next message (no deadline: a listener waits as long as it takes), and acks
    /// it `delivered` once `take` has it.
    pub fn receive(&mut self, take: impl FnOnce(&Msg)) -> io::Result<()> {
        self.receive_with(|m| {
            take(m);
            Ok(())
        })
    }

    /// [`Client::receive`], where taking the message may fail: then it is not acked, and the
    /// server keeps it for another try (§6.6).
    pub fn receive_with(&mut self, take: impl FnOnce(&Msg) -> io::Result<()>) -> io::Result<()> {
        self.wait_forever()?;
        let m = self.wait(|o| match o {
            Output::Message(m) => Pick::Took(m),
            o => Pick::Pass(o),
        })??;
        take(&m)?;
        let ack = Ack::new(m.id.clone(), AckStatus::Delivered);
        self.machine.handle(crate::now(), Input::Ack(ack));
        // The ack goes out now; an `error` already behind it is the server's refusal.
        match self.run_outputs::<()>(&mut Pick::Pass)? {
            Some(Err(refusal)) => Err(refusal.into()),
            _ => Ok(()),
        }
    }

    /// Runs the machine until `pick` takes one of its outputs: feeding it what the socket reads
    /// and the time, writing what it asks. The server's `error` (§4.8) is its refusal; a
    /// connection lost, a protocol violation the machine found, a command it refused, or no
    /// answer within [`ANSWER_TIMEOUT`] (unless [`Client::wait_forever`]) is an error.
    fn wait<T>(
        &mut self,
        mut pick: impl FnMut(Output) -> Pick<T>,
    ) -> io::Result<Result<T, Refusal>> {
        for i in 0..self.held.len() {
            let Some(o) = self.held.remove(i) else { break };
            match pick(o) {
                Pick::Took(t) => return Ok(Ok(t)),
                Pick::Pass(o) => self.held.insert(i, o),
            }
        }
        let deadline = (!self.forever).then(|| Instant::now() + ANSWER_TIMEOUT);
        let mut buf = [0u8; READ_CHUNK];
        loop {
            if let Some(done) = self.run_outputs(&mut pick)? {
                return Ok(done);
            }
            if self.closed {
                return Err(lost());
            }
            let now = crate::now();
            let wakeup = self
                .machine
                .poll_timeout()
                .map(|w| w.at.saturating_duration_since(now));
            let answer = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let wait = match (wakeup, answer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A zero timeout means "block forever" to the socket: wait at least a millisecond.
            let wait = wait.map(|d| d.max(Duration::from_millis(1)));
            self.stream.set_read_timeout(wait)?;
            match self.stream.read(&mut buf) {
                Ok(0) => self.machine.handle(crate::now(), Input::Disconnected),
                Ok(n) => self
                    .machine
                    .handle(crate::now(), Input::Bytes(buf[..n].to_vec())),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no answer from the server",
                        ));
                    }
                    self.machine.handle_timeout(crate::now());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.machine.handle(crate::now(), Input::Disconnected);
                    self.closed = true;
                    return Err(e);
                }
            }
        }
    }

    /// Carries out every output the machine has: writes and closes here, the one `pick` takes
    /// returned, the server's `error` as a refusal, a loss or a violation as an error, and
    /// anything else held for the wait that wants it.
    fn run_outputs<T>(
        &mut self,
        pick: &mut impl FnMut(Output) -> Pick<T>,
    ) -> io::Result<Option<Result<T, Refusal>>> {
        while let Some(o) = self.machine.poll() {
            let o = match o {
                Output::Transmit(bytes) => {
                    if !self.closed
                        && let Err(e) = self.stream.write_all(&bytes)
                    {
                        self.machine.handle(crate::now(), Input::Disconnected);
                        self.closed = true;
                        return Err(e);
                    }
                    continue;
                }
                Output::Close => {
                    self.stream.shutdown();
                    self.closed = true;
                    continue;
                }
                // The dial [`Client::connect_to`] made; a later one is not made (see the module
                // docs), and the loss that asked for it has already ended the wait.
                Output::Connect => continue,
                o => o,
            };
            match pick(o) {
                Pick::Took(t) => return Ok(Some(Ok(t))),
                Pick::Pass(Output::ServerError { code, reason }) => {
                    return Ok(Some(Err(Refusal::new(Some(&code), reason.as_deref()))));
                }
                Pick::Pass(Output::ProtocolError(code)) => {
                    return Err(protocol(format!(
                        "the server broke the protocol: {}",
                        code.as_str()
                    )));
                }
                Pick::Pass(Output::Refused(why)) => return Err(refused_here(why)),
                Pick::Pass(Output::Unanswered(_) | Output::Reconnecting { .. }) => {
                    self.closed = true;
                    return Err(lost());
                }
                // Asked for and come, or come unasked: another wait's.
                Pick::Pass(o) => self.held.push_back(o),
            }
        }
        Ok(None)
    }
}

/// What a wait makes of one of the machine's outputs.
enum Pick<T> {
    /// The one it waits for, made into what it returns.
    Took(T),
    /// Another's, given back.
    Pass(Output),
}

/// The ack an [`Output::Acked`] carries, for the message `id` if given; any other output is
/// given back.
fn ack_of(o: Output, id: Option<&str>) -> Pick<Ack> {
    match o {
        Output::Acked {
            id: acked,
            status,
            code,
            reason,
        } if id.is_none_or(|id| id == acked) => Pick::Took(Ack {
            code,
            reason,
            ..Ack::new(acked, status)
        }),
        o => Pick::Pass(o),
    }
}

/// A message stamped now.
pub fn new_message(id: String, from: &str, to: &str, body: &str, ttl: Option<u64>) -> Msg {
    let ts = crate::now().as_millis() as f64 / 1000.0;
    Msg {
        id,
        from: from.into(),
        to: to.into(),
        ts,
        body: body.into(),
        kind: None,
        re: None,
        ttl,
        via: None,
        hdr: None,
    }
}

/// A frame as one JSON line, exactly as it went over the wire, without the newline.
pub fn frame_line(frame: &Frame) -> String {
    let bytes = framing::encode(frame);
    String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).into_owned()
}
