//! The `weft airc` client commands: a blocking connection to a realm's client face.
//!
//! Frames are made and read by `weft_proto::airc::{frame, framing}`; this module only moves them
//! over a Unix socket and waits for the answers a command needs.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use weft_proto::airc::frame::message_id;
use weft_proto::airc::frame::{Ack, Bind, Frame, Hello, Msg, PROTO, Role, Welcome};
use weft_proto::airc::framing::{self, FrameDecoder};

/// How long a command waits for the server's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a realm's client face, past hello and welcome.
pub struct Client {
    stream: UnixStream,
    decoder: FrameDecoder,
    /// What the server said in its welcome: the realm and this connection's namespaces.
    pub welcome: Welcome,
}

fn protocol(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl Client {
    /// Connects and says hello.
    pub fn connect(socket: &Path) -> io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
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
            Frame::Error(e) => {
                return Err(protocol(format!(
                    "refused: {} {}",
                    e.code,
                    e.reason.unwrap_or_default()
                )));
            }
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

    /// Sends a message and waits for its one ack.
    pub fn message(&mut self, msg: Msg) -> io::Result<Ack> {
        let id = msg.id.clone();
        self.send(&Frame::Msg(msg))?;
        loop {
            match self.read_frame()? {
                Frame::Ack(a) if a.id == id => return Ok(a),
                Frame::Error(e) => {
                    return Err(protocol(format!(
                        "{} {}",
                        e.code,
                        e.reason.unwrap_or_default()
                    )));
                }
                _ => {}
            }
        }
    }

    /// Binds names; the server's `bound` answer lists the absolute patterns.
    pub fn bind(&mut self, names: Vec<String>) -> io::Result<Vec<String>> {
        self.send(&Frame::Bind(Bind { names }))?;
        match self.read_frame()? {
            Frame::Bound(b) => Ok(b.names),
            Frame::Error(e) => Err(protocol(format!(
                "{} {}",
                e.code,
                e.reason.unwrap_or_default()
            ))),
            other => Err(protocol(format!("expected bound, got {}", other.t()))),
        }
    }

    /// Waits for the next message (no timeout: a listener waits as long as it takes), and acks
    /// it `delivered` once `take` has it.
    pub fn receive(&mut self, take: impl FnOnce(&Msg)) -> io::Result<()> {
        self.stream.set_read_timeout(None)?;
        loop {
            if let Frame::Msg(m) = self.read_frame()? {
                take(&m);
                let ack = Ack::new(m.id.clone(), weft_proto::airc::frame::AckStatus::Delivered);
                return self.send(&Frame::Ack(ack));
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
