//! The `weft airc` client commands: a blocking connection to a realm's client face (AIRC §3,
//! §4), over its Unix socket or its loopback TCP listener.
//!
//! Frames are made and read by `weft_proto::airc::{frame, framing}`; this module only moves them
//! and waits for the answers a command needs. The commands themselves are in [`command`]; how
//! `listen` marks a message from elsewhere (§16.4) is in [`foreign`].

pub mod command;
pub mod foreign;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use weft_proto::airc::frame::message_id;
use weft_proto::airc::frame::{
    Ack, AckStatus, Bind, ErrorFrame, Frame, Hello, Msg, PROTO, Role, Welcome,
};
use weft_proto::airc::framing::{self, FrameDecoder};

/// How long a command waits for the server's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

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

    fn from_error(e: &ErrorFrame) -> Self {
        Self::new(Some(&e.code), e.reason.as_deref())
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

/// A connection to a realm's client face, past hello and welcome.
pub struct Client {
    stream: Stream,
    decoder: FrameDecoder,
    /// What the server said in its welcome: the realm and this connection's namespaces.
    pub welcome: Welcome,
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
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let mut c = Self {
            stream,
            decoder: FrameDecoder::new(),
            welcome: placeholder_welcome(),
        };
        let agent = format!("weft/{}", env!("CARGO_PKG_VERSION"));
        let hello = Hello {
            proto: PROTO.into(),
            role: Role::Client,
            agent: Some(agent),
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        };
        c.send(&Frame::Hello(hello))?;
        match c.read_frame()? {
            Frame::Welcome(w) => c.welcome = w,
            Frame::Error(e) => return Err(protocol(Refusal::from_error(&e))),
            other => return Err(protocol(format!("expected welcome, got {}", other.t()))),
        }
        Ok(c)
    }

    /// Writes one frame.
    pub fn send(&mut self, frame: &Frame) -> io::Result<()> {
        self.stream.write_all(&framing::encode(frame))
    }

    /// Reads the next frame, answering pings on the way.
    pub fn read_frame(&mut self) -> io::Result<Frame> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.decoder.next() {
                Some(Ok(Frame::Ping(p))) => self.send(&Frame::Pong(p.pong()))?,
                Some(Ok(frame)) => return Ok(frame),
                Some(Err(e)) => return Err(protocol(e)),
                None => {
                    let n = self.stream.read(&mut buf)?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    self.decoder.push(&buf[..n]);
                }
            }
        }
    }

    /// Reads frames until `pick` takes one; an `error` frame on the way is the server's refusal
    /// (§4.8: it closes after it). Frames `pick` passes over are not for this request.
    pub fn answer<T>(
        &mut self,
        mut pick: impl FnMut(Frame) -> Option<T>,
    ) -> io::Result<Result<T, Refusal>> {
        loop {
            match self.read_frame()? {
                Frame::Error(e) => return Ok(Err(Refusal::from_error(&e))),
                frame => {
                    if let Some(t) = pick(frame) {
                        return Ok(Ok(t));
                    }
                }
            }
        }
    }

    /// Waits with no timeout from now on: a listener or a subscriber waits as long as it takes.
    pub fn wait_forever(&mut self) -> io::Result<()> {
        self.stream.set_read_timeout(None)
    }

    /// Sends a message and waits for its one ack (§4.4); an `error` frame is an error.
    pub fn message(&mut self, msg: Msg) -> io::Result<Ack> {
        Ok(self.request_ack(msg)??)
    }

    /// Sends a message and waits for its one ack, or the `error` frame that refused it.
    pub fn request_ack(&mut self, msg: Msg) -> io::Result<Result<Ack, Refusal>> {
        let id = msg.id.clone();
        self.send(&Frame::Msg(msg))?;
        self.answer(|f| match f {
            Frame::Ack(a) if a.id == id => Some(a),
            _ => None,
        })
    }

    /// Binds names (§4.3); the server's `bound` answer lists the absolute patterns.
    pub fn bind(&mut self, names: Vec<String>) -> io::Result<Vec<String>> {
        Ok(self.request_bind(names)??)
    }

    /// Binds names, answering the absolute patterns or the server's refusal.
    pub fn request_bind(&mut self, names: Vec<String>) -> io::Result<Result<Vec<String>, Refusal>> {
        self.send(&Frame::Bind(Bind { names }))?;
        self.answer(|f| match f {
            Frame::Bound(b) => Some(b.names),
            _ => None,
        })
    }

    /// Waits for the next message (no timeout: a listener waits as long as it takes), and acks
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
        loop {
            match self.read_frame()? {
                Frame::Msg(m) => {
                    take(&m)?;
                    let ack = Ack::new(m.id.clone(), AckStatus::Delivered);
                    return self.send(&Frame::Ack(ack));
                }
                Frame::Error(e) => return Err(Refusal::from_error(&e).into()),
                _ => {}
            }
        }
    }
}

fn placeholder_welcome() -> Welcome {
    Welcome {
        realm: String::new(),
        proto: String::new(),
        ns: None,
        server: None,
        sig: None,
        kid: None,
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
