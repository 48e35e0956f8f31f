//! WebSocket, once, for every runtime adapter: a sans-IO layer between the byte transport and a
//! machine that speaks in messages (RFC 6455 through `tungstenite`, `wss://` through `rustls`).
//!
//! A protocol that runs over WebSockets implements [`WsMachine`] (messages in, messages out);
//! [`Ws`] wraps it into a [`HostMachine`] over bytes, so [`crate::smol`], `crate::tokio` and
//! [`crate::blocking`] drive it unchanged. The layer owns every byte-level rule:
//!
//! - **Server side** (connections a listener accepted): it reads the HTTP request head (at most
//!   [`MAX_HEAD_BYTES`], within [`HANDSHAKE_TIMEOUT`]); `GET /health` answers 200
//!   `{"ok":true}` as `application/json`; any other request that is not an upgrade answers 426
//!   with a text body; an upgrade (on any path) is put to [`WsMachine::upgrade`] first, whose
//!   [`Refusal`] goes back as a plain HTTP response with `connection: close`, and otherwise
//!   answered `101` before the machine hears of the socket.
//! - **Client side** (dials): the machine names a target with a `ws://` or `wss://` URL
//!   (the target's string); the hooks resolve it ([`endpoint`], as [`WsHooks`] do); once the transport is open the
//!   layer runs TLS (for `wss://`, rustls with the ring provider and [`WsConfig::tls`]'s roots)
//!   and the opening handshake, and only then reports the dial open. A handshake that fails or
//!   takes longer than [`HANDSHAKE_TIMEOUT`] is a failed dial.
//! - **Frames**: text frames become [`Frame::Text`]; binary frames, pings and pongs are reported
//!   too (a relay counts them) and pings are answered by the layer; a close frame is answered and
//!   reported as the socket's close. A frame past [`WsConfig::max_message_bytes`] or a protocol
//!   error closes the socket (1009 or 1002).
//! - **Closing**: a close the machine asks for sends the close frame, then waits at most
//!   [`CLOSE_GRACE`] for the other side's answer before the transport is shut, so the frame is
//!   read rather than lost to a reset. A socket the machine closed is never reported closed to
//!   it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::client::ClientHandshake;
use tungstenite::handshake::derive_accept_key;
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

use weft_proto::minca::relay_server::address_key;

use crate::host::{Effect, Endpoint, Hooks, HostMachine, Peer, Remote};

/// The longest HTTP request or response head the layer reads; a peer that sends more is dropped.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Accepted connections still sending their request head at once; one accepted past it is shut at
/// once (counted in [`WsStats::bad_heads`]), so connections that never finish a head cannot grow
/// the layer's table without bound before the machine's own socket caps apply.
pub const MAX_PENDING_HEADS: usize = 1024;

/// Accepted connections from one client address (the TCP or QUIC peer's, keyed as the relay
/// keys addresses: an IPv4 address or an IPv6 /64) still sending their request head at once, by
/// default ([`WsConfig::pending_heads_per_address`]); one more from that address is shut at once
/// (counted in [`WsStats::bad_heads`]), so one address that never finishes a head cannot take
/// [`MAX_PENDING_HEADS`] from every other. Unix-socket peers meet only the global cap.
pub const MAX_PENDING_HEADS_PER_ADDRESS: usize = 16;

/// How long a connection may take from opening to a finished WebSocket handshake (a server's
/// slow-loris guard, a client's bound on an answer that never comes).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a socket the machine closed may take to answer the close frame before the transport
/// is shut under it.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The read buffer tungstenite starts each socket with, and the most it reads from the layer's
/// pipe at once: its default (128 KiB, zeroed on the first read) is most of what an idle socket
/// would cost. A frame larger than it still arrives whole: tungstenite grows the buffer to the
/// frame's length once its header is read, up to [`WsConfig::max_message_bytes`]. One page holds
/// a typical message (a Minca blob, an AIRC frame, a Nostr event) in one read.
pub const WS_READ_BUFFER_BYTES: usize = 4 * 1024;

/// How many bytes tungstenite collects before it writes to the layer's pipe: none, since the
/// pipe is memory already and every send is flushed at once, so a frame is held once (in the
/// pipe, until the transport takes it) rather than twice.
pub const WS_WRITE_BUFFER_BYTES: usize = 0;

/// The body of `GET /health`: it says the service is up and nothing else.
pub const HEALTH_BODY: &str = "{\"ok\":true}";

/// A WebSocket message, as the machine hears it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// A text message.
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
    /// A ping (the layer has answered it).
    Ping,
    /// A pong.
    Pong,
}

/// An HTTP request head that asks for an upgrade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method (`GET`).
    pub method: String,
    /// The request target, query included.
    pub path: String,
    /// The headers, names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn is_upgrade(&self) -> bool {
        self.header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    }

    /// Parses a head (without its final blank line).
    pub(crate) fn parse(head: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(head).ok()?;
        let mut lines = text.split("\r\n");
        let mut request = lines.next()?.split(' ');
        let method = request.next()?.to_string();
        let path = request.next()?.to_string();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Some(Self {
            method,
            path,
            headers,
        })
    }
}

/// An upgrade the machine refuses, answered as plain HTTP with `connection: close`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The text body.
    pub reason: String,
}

/// What a message-speaking machine's output asks the layer to do.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum WsEffect<T, A> {
    /// Send a text message.
    Text {
        /// The socket.
        conn: ConnId,
        /// The message.
        text: String,
    },
    /// Send a binary message.
    Binary {
        /// The socket.
        conn: ConnId,
        /// The message.
        bytes: Vec<u8>,
    },
    /// Send a ping.
    Ping {
        /// The socket.
        conn: ConnId,
    },
    /// Close the socket with a close code and reason; the machine hears no close for it after.
    Close {
        /// The socket.
        conn: ConnId,
        /// The close code.
        code: u16,
        /// The reason (at most 123 bytes go out).
        reason: String,
    },
    /// Open a WebSocket to a target named by its URL (its `as_ref()`).
    Dial(T),
    /// Hand something to the application.
    Deliver(A),
    /// An output this layer has no effect for; counted by the host.
    Unhandled,
}

/// A machine that speaks WebSocket messages: the one place a protocol maps its inputs and outputs
/// to the layer's vocabulary. Each mapping may answer `None` ("nothing for the machine"); the
/// layer drains the machine after every call either way.
pub trait WsMachine: Machine {
    /// A dial target in the protocol's terms; its string is the `ws://` or `wss://` URL.
    type Target: Clone + fmt::Debug + AsRef<str>;
    /// What the machine hands the application.
    type App;

    /// An upgrade request on an accepted connection: the input for the socket once open, or the
    /// refusal to answer instead.
    fn upgrade(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: &Peer,
        request: &Request,
    ) -> Result<Self::Input, Refusal>;
    /// A message arrived.
    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<Self::Input>;
    /// The socket closed (the other side, or the transport), and the machine had not closed it.
    fn closed(&mut self, conn: ConnId) -> Option<Self::Input>;
    /// A dial to `target` finished its handshake as `conn`.
    fn dialled(&mut self, conn: ConnId, target: Self::Target) -> Option<Self::Input>;
    /// A dial to `target` failed (transport or handshake).
    fn dial_failed(&mut self, target: Self::Target) -> Option<Self::Input>;
    /// What an output asks the layer to do; `None` is nothing.
    fn effect(&mut self, output: Self::Output) -> Option<WsEffect<Self::Target, Self::App>>;

    /// The largest message an accepted socket for `request` may carry, when it differs from
    /// [`WsConfig::max_message_bytes`] (one listener serving two protocols with different
    /// bounds, as `weft relay` serves the relay and `/peer`). Asked once, before the upgrade is
    /// put to [`upgrade`](Self::upgrade); a larger message closes that socket with 1009.
    fn message_limit(&self, request: &Request) -> Option<usize> {
        let _ = request;
        None
    }

    /// The machine's own answer to a plain HTTP request (one that asks for no upgrade), in place
    /// of the layer's (`/health` 200, anything else 426): a protocol's HTTP face on the same
    /// port, as a Nostr relay's NIP-11 document. The connection ends after it either way.
    fn http(&self, request: &Request) -> Option<HttpAnswer> {
        let _ = request;
        None
    }
}

/// A plain HTTP response a [`WsMachine`] gives through [`WsMachine::http`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type`.
    pub content_type: String,
    /// More headers, names in lower case (`access-control-allow-origin`, ...).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl HttpAnswer {
    /// The response's bytes, with `content-length` and `connection: close`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n",
            self.status,
            if self.status < 300 { "OK" } else { "Refused" },
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(&self.body);
        head.into_bytes()
    }
}

/// The request of a whole head that asks for no upgrade, for [`WsMachine::http`].
fn plain_request(head: &[u8]) -> Option<Request> {
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    Request::parse(&head[..end]).filter(|r| !r.is_upgrade())
}

/// The dial target of a machine that never dials (a server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoDial {}

impl AsRef<str> for NoDial {
    fn as_ref(&self) -> &str {
        match *self {}
    }
}

/// Hooks for a [`Ws`] host: dials resolve their URL with [`endpoint`], deliveries go to
/// `deliver`, nothing is stored (a WebSocket machine has no durable state of the host's).
pub struct WsHooks<D>(pub D);

impl<D> fmt::Debug for WsHooks<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WsHooks")
    }
}

impl<M: WsMachine, D: FnMut(M::App)> Hooks<Ws<M>> for WsHooks<D> {
    fn store(&mut self, batch: &[Infallible]) -> io::Result<()> {
        match batch.first() {
            Some(never) => match *never {},
            None => Ok(()),
        }
    }
    fn deliver(&mut self, app: M::App) {
        (self.0)(app);
    }
    fn resolve(&mut self, target: &M::Target) -> Option<Endpoint> {
        endpoint(target.as_ref())
    }
}

/// How the layer frames and dials.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// The largest message (and frame) accepted; a larger one closes the socket with 1009.
    pub max_message_bytes: usize,
    /// The TLS client configuration for `wss://` dials.
    pub tls: Arc<rustls::ClientConfig>,
    /// Connections from one client address that may be sending their request head at once
    /// ([`MAX_PENDING_HEADS_PER_ADDRESS`] unless set): a server behind a proxy, whose every
    /// connection comes from the proxy's address, sets it to [`MAX_PENDING_HEADS`].
    pub pending_heads_per_address: usize,
}

impl WsConfig {
    /// Messages up to `max_message_bytes`, `wss://` trusting the Mozilla roots (webpki-roots).
    pub fn new(max_message_bytes: usize) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        Self {
            max_message_bytes,
            tls: tls_config(roots),
            pending_heads_per_address: MAX_PENDING_HEADS_PER_ADDRESS,
        }
    }

    /// Trusts only the PEM certificates in `ca_file` for `wss://` (a private CA, tests).
    pub fn with_ca_file(mut self, ca_file: &Path) -> io::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca_file).map_err(io::Error::other)? {
            roots
                .add(cert.map_err(io::Error::other)?)
                .map_err(io::Error::other)?;
        }
        self.tls = tls_config(roots);
        Ok(self)
    }

    fn ws(&self) -> WebSocketConfig {
        Self::limited(self.max_message_bytes)
    }

    fn limited(max_message_bytes: usize) -> WebSocketConfig {
        WebSocketConfig::default()
            .read_buffer_size(WS_READ_BUFFER_BYTES)
            .write_buffer_size(WS_WRITE_BUFFER_BYTES)
            .max_message_size(Some(max_message_bytes))
            .max_frame_size(Some(max_message_bytes))
    }
}

/// A TLS client configuration on rustls's ring provider trusting `roots`.
fn tls_config(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Where a `ws://` or `wss://` URL's host lives (the first address it resolves to; the port
/// defaults to 80 or 443). Resolving a name blocks; hooks that dial names call it.
pub fn endpoint(url: &str) -> Option<Endpoint> {
    let uri: tungstenite::http::Uri = url.parse().ok()?;
    let port = uri.port_u16().or(match uri.scheme_str()? {
        "ws" => Some(80),
        "wss" => Some(443),
        _ => None,
    })?;
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(Endpoint::Tcp((ip, port).into()));
    }
    (host, port)
        .to_socket_addrs()
        .ok()?
        .next()
        .map(Endpoint::Tcp)
}

/// In-memory bytes between the transport and tungstenite: what arrived, what is to go out.
#[derive(Debug, Default)]
struct Pipe {
    inbound: VecDeque<u8>,
    outbound: Vec<u8>,
}

impl Pipe {
    /// Bytes waiting in it, either way.
    fn held(&self) -> usize {
        self.inbound.len() + self.outbound.len()
    }

    /// Bytes that arrived, behind any still unread: into an empty pipe the read's own buffer
    /// becomes the pipe's, with no copy.
    fn arrived(&mut self, bytes: Vec<u8>) {
        if self.inbound.is_empty() {
            self.inbound = VecDeque::from(bytes);
        } else {
            self.inbound.extend(bytes);
        }
    }

    /// Gives back the inbound buffer once everything in it is read, so an idle socket holds
    /// none (the next read brings its own, [`Pipe::arrived`]).
    fn release(&mut self) {
        if self.inbound.is_empty() {
            self.inbound = VecDeque::new();
        }
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.inbound.is_empty() {
            // Not the end: the transport reports its close as an event of its own.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.inbound.read(buf)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbound.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A socket's byte stream as tungstenite sees it: the pipe, or TLS over it.
enum Stream {
    Plain(Pipe),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Pipe>>),
}

impl Stream {
    fn pipe(&mut self) -> &mut Pipe {
        match self {
            Self::Plain(p) => p,
            Self::Tls(t) => &mut t.sock,
        }
    }
}

impl Stream {
    /// Bytes waiting in its pipe (what rustls holds is rustls's).
    fn held(&self) -> usize {
        match self {
            Self::Plain(p) => p.held(),
            Self::Tls(t) => t.sock.held(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(p) => p.read(buf),
            Self::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(p) => p.write(buf),
            Self::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(p) => p.flush(),
            Self::Tls(t) => t.flush(),
        }
    }
}

type Handshake = MidHandshake<ClientHandshake<Stream>>;

enum State<T> {
    /// Accepted; reading the request head.
    Head { head: Vec<u8>, peer: Peer },
    /// Dialled; TLS and the opening handshake under way.
    Dialling {
        handshake: Option<Handshake>,
        target: T,
    },
    /// Open both ways.
    Open(Box<WebSocket<Stream>>),
    /// The machine closed it; waiting for the other side's close.
    Closing(Box<WebSocket<Stream>>),
    /// Answered, refused or failed: waiting for the transport to report the close.
    Done,
}

impl<T> State<T> {
    /// Bytes the layer holds for the connection outside tungstenite's own bounded buffers.
    fn held(&self) -> usize {
        match self {
            Self::Head { head, .. } => head.len(),
            Self::Dialling {
                handshake: Some(h), ..
            } => h.get_ref().get_ref().held(),
            Self::Open(ws) | Self::Closing(ws) => ws.get_ref().held(),
            Self::Dialling { .. } | Self::Done => 0,
        }
    }
}

struct Conn<T> {
    state: State<T>,
    /// The deadline in [`Ws::deadlines`], if any.
    deadline: Option<Timestamp>,
}

/// What the layer counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WsStats {
    /// Upgrades opened (server side).
    pub accepted: u64,
    /// Upgrades the machine refused.
    pub refused: u64,
    /// Plain HTTP requests answered (health and 426).
    pub plain: u64,
    /// Connections dropped for a bad, oversized or late request head.
    pub bad_heads: u64,
    /// Dials whose TLS or WebSocket handshake failed or timed out.
    pub handshakes_failed: u64,
    /// Sockets closed for a protocol error or an oversized message.
    pub protocol_errors: u64,
    /// Sends for a socket that is not open, dropped.
    pub unsent: u64,
}

/// What the host tells the layer: transport events, and inputs for the machine from the
/// application.
#[derive(Debug)]
#[non_exhaustive]
pub enum WsInput<T, I> {
    /// A listener accepted a connection.
    Accepted {
        /// The connection.
        conn: ConnId,
        /// Who is on the other end.
        peer: Peer,
    },
    /// Bytes arrived.
    Bytes {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The transport closed.
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// A dial's transport opened.
    Dialled {
        /// The connection.
        conn: ConnId,
        /// The target.
        target: T,
    },
    /// A dial's transport failed.
    DialFailed {
        /// The target.
        target: T,
    },
    /// An input for the machine itself (an application command).
    App(I),
}

/// A [`WsMachine`] as a [`HostMachine`] over bytes; see the [module docs](self).
pub struct Ws<M: WsMachine> {
    machine: M,
    config: WsConfig,
    conns: BTreeMap<ConnId, Conn<M::Target>>,
    /// Connections in [`State::Head`], at most [`MAX_PENDING_HEADS`], with their client
    /// address key (none for a Unix-socket peer).
    heads: BTreeMap<ConnId, Option<IpAddr>>,
    /// Connections in [`State::Head`] by client address key, each at most
    /// [`WsConfig::pending_heads_per_address`].
    heads_from: BTreeMap<IpAddr, usize>,
    deadlines: BTreeSet<(Timestamp, ConnId)>,
    out: VecDeque<Effect<M::Target, Infallible, M::App>>,
    stats: WsStats,
}

impl<M: WsMachine> fmt::Debug for Ws<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ws")
            .field("conns", &self.conns.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A response head with a body, `connection: close`.
fn plain_response(status: u16, content_type: &str, body: &str) -> Vec<u8> {
    let phrase = match status {
        200 => "OK",
        400 => "Bad Request",
        426 => "Upgrade Required",
        403 => "Forbidden",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Refused",
    };
    format!(
        "HTTP/1.1 {status} {phrase}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const TEXT: &str = "text/plain; charset=utf-8";

/// What the server side makes of the bytes an accepted connection has sent before its upgrade:
/// the one rule [`Ws`] and [`ServerSocket`] both answer request heads by.
#[derive(Debug)]
enum HeadAnswer {
    /// Not whole yet, and within [`MAX_HEAD_BYTES`]: wait for more.
    Incomplete,
    /// Past [`MAX_HEAD_BYTES`] or unreadable: end the connection with no answer (a bad head).
    Drop,
    /// A plain request: `GET /health` 200, anything else that is no upgrade 426. Send it, then
    /// end the connection.
    Plain(Vec<u8>),
    /// An upgrade that cannot be one (no key): a 400 to send before the end (a bad head).
    Bad(Vec<u8>),
    /// A well-formed upgrade, for the machine (if any) to accept or refuse.
    Upgrade(Upgrade),
}

impl HeadAnswer {
    /// Reads `head`, everything the connection has sent so far.
    fn read(head: &[u8]) -> Self {
        let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
            return if head.len() > MAX_HEAD_BYTES {
                Self::Drop
            } else {
                Self::Incomplete
            };
        };
        let Some(request) = Request::parse(&head[..end]).filter(|_| end <= MAX_HEAD_BYTES) else {
            return Self::Drop;
        };
        if !request.is_upgrade() {
            let path = request.path.split('?').next().unwrap_or("");
            return Self::Plain(if request.method == "GET" && path == "/health" {
                plain_response(200, "application/json", HEALTH_BODY)
            } else {
                plain_response(
                    426,
                    TEXT,
                    "This is a WebSocket service: open a WebSocket.\n",
                )
            });
        }
        let Some(key) = request.header("sec-websocket-key") else {
            return Self::Bad(plain_response(400, TEXT, "No Sec-WebSocket-Key.\n"));
        };
        let accept = derive_accept_key(key.as_bytes());
        Self::Upgrade(Upgrade {
            request,
            accept,
            rest: head[end + 4..].to_vec(),
        })
    }
}

/// A whole upgrade request, as [`HeadAnswer::read`] found it.
#[derive(Debug)]
struct Upgrade {
    request: Request,
    /// The `sec-websocket-accept` answer to the request's key.
    accept: String,
    /// What came after the head (frames a client sent without waiting for the `101`).
    rest: Vec<u8>,
}

impl Upgrade {
    /// The `101` that accepts it.
    fn switching(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {}\r\n\r\n",
            self.accept
        )
        .into_bytes()
    }

    /// The server end of the socket it opens, held to `limits`, with what came after the head
    /// already read in.
    fn socket(self, limits: WebSocketConfig) -> WebSocket<Stream> {
        WebSocket::from_partially_read(
            Stream::Plain(Pipe::default()),
            self.rest,
            Role::Server,
            Some(limits),
        )
    }
}

impl<M: WsMachine> Ws<M> {
    /// The layer over `machine`.
    pub fn new(machine: M, config: WsConfig) -> Self {
        Self {
            machine,
            config,
            conns: BTreeMap::new(),
            heads: BTreeMap::new(),
            heads_from: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            out: VecDeque::new(),
            stats: WsStats::default(),
        }
    }

    /// The machine, to inspect.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// What the layer counted.
    pub fn stats(&self) -> WsStats {
        self.stats
    }

    /// The most bytes the layer holds for any one connection outside tungstenite's own buffers
    /// (which its message and frame limits bound): a request head still arriving, or bytes
    /// between the transport and a socket. After every call it is at most [`MAX_HEAD_BYTES`]:
    /// a socket's bytes are read or sent before the call returns.
    pub fn largest_buffer(&self) -> usize {
        self.conns
            .values()
            .map(|c| c.state.held())
            .max()
            .unwrap_or(0)
    }

    fn set_deadline(&mut self, conn: ConnId, at: Option<Timestamp>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if let Some(old) = c.deadline.take() {
            self.deadlines.remove(&(old, conn));
        }
        if let Some(at) = at {
            c.deadline = Some(at);
            self.deadlines.insert((at, conn));
        }
    }

    /// Feeds the machine `input` (if any) and turns everything it asks into effects, in order.
    fn feed(&mut self, now: Timestamp, input: Option<M::Input>) {
        if let Some(input) = input {
            self.machine.handle(now, input);
        }
        self.drain(now);
    }

    fn drain(&mut self, now: Timestamp) {
        while let Some(output) = self.machine.poll() {
            match self.machine.effect(output) {
                None => {}
                Some(WsEffect::Text { conn, text }) => self.send(conn, Message::text(text)),
                Some(WsEffect::Binary { conn, bytes }) => self.send(conn, Message::binary(bytes)),
                Some(WsEffect::Ping { conn }) => self.send(conn, Message::Ping(Default::default())),
                Some(WsEffect::Close { conn, code, reason }) => {
                    self.close(now, conn, code, &reason)
                }
                Some(WsEffect::Dial(target)) => self.out.push_back(Effect::Dial(target)),
                Some(WsEffect::Deliver(app)) => self.out.push_back(Effect::Deliver(app)),
                Some(WsEffect::Unhandled) => self.out.push_back(Effect::Unhandled),
            }
        }
    }

    /// Moves what the socket's stream wrote to the transport.
    fn flush_out(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let pipe = match &mut c.state {
            State::Open(ws) | State::Closing(ws) => ws.get_mut().pipe(),
            State::Dialling {
                handshake: Some(h), ..
            } => h.get_mut().get_mut().pipe(),
            _ => return,
        };
        if !pipe.outbound.is_empty() {
            let bytes = std::mem::take(&mut pipe.outbound);
            self.out.push_back(Effect::Send { conn, bytes });
        }
    }

    fn send(&mut self, conn: ConnId, message: Message) {
        match self.conns.get_mut(&conn).map(|c| &mut c.state) {
            Some(State::Open(ws)) => {
                // An error here means the socket is failing; its close comes from the transport.
                let _ = ws.send(message);
                self.flush_out(conn);
            }
            _ => self.stats.unsent += 1,
        }
    }

    /// The machine closes `conn`: a close frame, then the grace for its answer.
    fn close(&mut self, now: Timestamp, conn: ConnId, code: u16, reason: &str) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match std::mem::replace(&mut c.state, State::Done) {
            State::Open(mut ws) => {
                let _ = ws.close(Some(close_frame(CloseCode::from(code), reason)));
                let _ = ws.flush();
                c.state = State::Closing(ws);
                self.flush_out(conn);
                self.set_deadline(conn, Some(now.saturating_add(CLOSE_GRACE)));
            }
            // A dial the machine gave up on, or a socket already going: just end it.
            _ => self.shut(conn),
        }
    }

    /// Ends the transport; the connection waits for its close event.
    fn shut(&mut self, conn: ConnId) {
        self.unhead(conn);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = State::Done;
        }
        self.set_deadline(conn, None);
        self.out.push_back(Effect::Close { conn });
    }

    /// Takes `conn` out of the pending heads, and out of its address's count.
    fn unhead(&mut self, conn: ConnId) {
        if let Some(Some(key)) = self.heads.remove(&conn)
            && let Some(n) = self.heads_from.get_mut(&key)
        {
            *n -= 1;
            if *n == 0 {
                self.heads_from.remove(&key);
            }
        }
    }

    fn accepted(&mut self, now: Timestamp, conn: ConnId, peer: Peer) {
        if self.conns.contains_key(&conn) {
            // A host bug: ids are never reused while held. The first connection stays.
            return;
        }
        let key = match peer.remote {
            Remote::Tcp(addr) | Remote::Quic(addr) => Some(address_key(addr.ip())),
            Remote::Unix { .. } => None,
        };
        let from_key = key.map_or(0, |k| self.heads_from.get(&k).copied().unwrap_or(0));
        let state = State::Head {
            head: Vec::new(),
            peer,
        };
        self.conns.insert(
            conn,
            Conn {
                state,
                deadline: None,
            },
        );
        if self.heads.len() >= MAX_PENDING_HEADS
            || from_key >= self.config.pending_heads_per_address
        {
            self.stats.bad_heads += 1;
            return self.shut(conn);
        }
        self.heads.insert(conn, key);
        if let Some(k) = key {
            *self.heads_from.entry(k).or_insert(0) += 1;
        }
        self.set_deadline(conn, Some(now.saturating_add(HANDSHAKE_TIMEOUT)));
    }

    fn dialled(&mut self, now: Timestamp, conn: ConnId, target: M::Target) {
        let url = target.as_ref().to_string();
        let stream = match self.stream_for(&url) {
            Some(s) => s,
            None => return self.dial_failed_on(now, conn, target),
        };
        let request = match url.as_str().into_client_request() {
            Ok(r) => r,
            Err(_) => return self.dial_failed_on(now, conn, target),
        };
        let state = match ClientHandshake::start(stream, request, Some(self.config.ws())) {
            Ok(mid) => State::Dialling {
                handshake: Some(mid),
                target,
            },
            Err(_) => return self.dial_failed_on(now, conn, target),
        };
        self.conns.insert(
            conn,
            Conn {
                state,
                deadline: None,
            },
        );
        self.set_deadline(conn, Some(now.saturating_add(HANDSHAKE_TIMEOUT)));
        self.handshake(now, conn);
    }

    /// The plain pipe for `ws://`, TLS over it for `wss://` (the server name from the URL).
    fn stream_for(&self, url: &str) -> Option<Stream> {
        let uri: tungstenite::http::Uri = url.parse().ok()?;
        match uri.scheme_str()? {
            "ws" => Some(Stream::Plain(Pipe::default())),
            "wss" => {
                let host = uri.host()?;
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                let name = ServerName::try_from(host.to_string()).ok()?;
                let tls = rustls::ClientConnection::new(self.config.tls.clone(), name).ok()?;
                Some(Stream::Tls(Box::new(rustls::StreamOwned::new(
                    tls,
                    Pipe::default(),
                ))))
            }
            _ => None,
        }
    }

    /// A dial whose transport opened but whose handshake cannot go on.
    fn dial_failed_on(&mut self, now: Timestamp, conn: ConnId, target: M::Target) {
        self.stats.handshakes_failed += 1;
        self.conns.insert(
            conn,
            Conn {
                state: State::Done,
                deadline: None,
            },
        );
        self.shut(conn);
        let input = self.machine.dial_failed(target);
        self.feed(now, input);
    }

    /// Advances a client handshake with what has arrived.
    fn handshake(&mut self, now: Timestamp, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let State::Dialling { handshake, .. } = &mut c.state else {
            return;
        };
        let Some(mid) = handshake.take() else {
            return;
        };
        match mid.handshake() {
            Ok((mut ws, _response)) => {
                let State::Dialling { target, .. } = std::mem::replace(&mut c.state, State::Done)
                else {
                    unreachable!("matched above")
                };
                let bytes = std::mem::take(&mut ws.get_mut().pipe().outbound);
                c.state = State::Open(Box::new(ws));
                if !bytes.is_empty() {
                    self.out.push_back(Effect::Send { conn, bytes });
                }
                self.set_deadline(conn, None);
                let input = self.machine.dialled(conn, target);
                self.feed(now, input);
                // Frames that came with the response.
                self.read_frames(now, conn);
            }
            Err(HandshakeError::Interrupted(mut mid)) => {
                let bytes = std::mem::take(&mut mid.get_mut().get_mut().pipe().outbound);
                *handshake = Some(mid);
                if !bytes.is_empty() {
                    self.out.push_back(Effect::Send { conn, bytes });
                }
            }
            Err(HandshakeError::Failure(_)) => {
                let State::Dialling { target, .. } = std::mem::replace(&mut c.state, State::Done)
                else {
                    unreachable!("matched above")
                };
                self.dial_failed_on(now, conn, target);
            }
        }
    }

    /// Server side: bytes of the request head.
    fn head(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let State::Head { head, .. } = &mut c.state else {
            return;
        };
        head.extend_from_slice(bytes);
        let upgrade = match HeadAnswer::read(head) {
            HeadAnswer::Incomplete => return,
            HeadAnswer::Drop => {
                self.stats.bad_heads += 1;
                return self.shut(conn);
            }
            HeadAnswer::Plain(response) => {
                self.stats.plain += 1;
                let response = plain_request(head)
                    .and_then(|r| self.machine.http(&r))
                    .map_or(response, |a| a.to_bytes());
                return self.answer(conn, response);
            }
            HeadAnswer::Bad(response) => {
                self.stats.bad_heads += 1;
                return self.answer(conn, response);
            }
            HeadAnswer::Upgrade(upgrade) => upgrade,
        };
        let Some(State::Head { peer, .. }) = self
            .conns
            .get_mut(&conn)
            .map(|c| std::mem::replace(&mut c.state, State::Done))
        else {
            unreachable!("matched above")
        };
        self.unhead(conn);
        self.set_deadline(conn, None);
        let limits = match self.machine.message_limit(&upgrade.request) {
            Some(max) => WsConfig::limited(max),
            None => self.config.ws(),
        };
        match self.machine.upgrade(now, conn, &peer, &upgrade.request) {
            Err(refusal) => {
                self.stats.refused += 1;
                self.answer(conn, plain_response(refusal.status, TEXT, &refusal.reason));
                self.drain(now);
            }
            Ok(input) => {
                self.stats.accepted += 1;
                self.out.push_back(Effect::Send {
                    conn,
                    bytes: upgrade.switching(),
                });
                let ws = upgrade.socket(limits);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.state = State::Open(Box::new(ws));
                }
                self.feed(now, Some(input));
                self.read_frames(now, conn);
            }
        }
    }

    /// A plain HTTP answer, then the end of the connection.
    fn answer(&mut self, conn: ConnId, response: Vec<u8>) {
        self.out.push_back(Effect::Send {
            conn,
            bytes: response,
        });
        self.shut(conn);
    }

    fn bytes(&mut self, now: Timestamp, conn: ConnId, bytes: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match &mut c.state {
            State::Head { .. } => self.head(now, conn, &bytes),
            State::Dialling {
                handshake: Some(h), ..
            } => {
                h.get_mut().get_mut().pipe().arrived(bytes);
                self.handshake(now, conn);
            }
            State::Open(ws) | State::Closing(ws) => {
                ws.get_mut().pipe().arrived(bytes);
                self.read_frames(now, conn);
            }
            State::Dialling { .. } | State::Done => {}
        }
    }

    /// Reads every whole message that arrived, one at a time, feeding the machine after each
    /// (it may close this socket or send on others in between).
    fn read_frames(&mut self, now: Timestamp, conn: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let (ws, open) = match &mut c.state {
                State::Open(ws) => (ws, true),
                State::Closing(ws) => (ws, false),
                _ => return,
            };
            match read_step(ws) {
                Step::Frame(frame) => {
                    if open {
                        let input = self.machine.message(conn, frame);
                        self.feed(now, input);
                    }
                }
                Step::Drained => {
                    ws.get_mut().pipe().release();
                    // Pongs the reads queued go out.
                    return self.flush_out(conn);
                }
                Step::Over => return self.read_ended(now, conn, open),
                Step::Failed => {
                    self.stats.protocol_errors += 1;
                    return self.read_ended(now, conn, open);
                }
            }
        }
    }

    /// A socket whose reading ended it: what it queued goes out, then the transport is ended;
    /// the machine hears of it unless it had closed the socket itself.
    fn read_ended(&mut self, now: Timestamp, conn: ConnId, open: bool) {
        self.flush_out(conn);
        self.shut(conn);
        if open {
            let input = self.machine.closed(conn);
            self.feed(now, input);
        }
    }

    fn closed(&mut self, now: Timestamp, conn: ConnId) {
        self.unhead(conn);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(at) = c.deadline {
            self.deadlines.remove(&(at, conn));
        }
        let input = match c.state {
            State::Open(_) => self.machine.closed(conn),
            State::Dialling { target, .. } => {
                self.stats.handshakes_failed += 1;
                self.machine.dial_failed(target)
            }
            State::Head { .. } | State::Closing(_) | State::Done => return,
        };
        self.feed(now, input);
    }

    /// Runs the layer's own deadlines that are due.
    fn expire(&mut self, now: Timestamp) {
        while let Some(&(at, conn)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.deadline = None;
            match std::mem::replace(&mut c.state, State::Done) {
                State::Dialling { target, .. } => self.dial_failed_on(now, conn, target),
                State::Head { .. } => {
                    self.stats.bad_heads += 1;
                    self.shut(conn);
                }
                _ => self.shut(conn),
            }
        }
    }
}

impl<M: WsMachine> Machine for Ws<M> {
    type Input = WsInput<M::Target, M::Input>;
    type Output = Effect<M::Target, Infallible, M::App>;

    fn handle(&mut self, now: Timestamp, input: Self::Input) {
        match input {
            WsInput::Accepted { conn, peer } => self.accepted(now, conn, peer),
            WsInput::Bytes { conn, bytes } => self.bytes(now, conn, bytes),
            WsInput::Closed { conn } => self.closed(now, conn),
            WsInput::Dialled { conn, target } => self.dialled(now, conn, target),
            WsInput::DialFailed { target } => {
                let input = self.machine.dial_failed(target);
                self.feed(now, input);
            }
            WsInput::App(input) => self.feed(now, Some(input)),
        }
    }

    fn poll(&mut self) -> Option<Self::Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let own = self
            .deadlines
            .first()
            .map(|&(at, _)| Wakeup::new(at, "websocket handshake or close grace"));
        match (own, self.machine.poll_timeout()) {
            (Some(a), Some(b)) => Some(if a.at <= b.at { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.expire(now);
        if self.machine.poll_timeout().is_some_and(|w| w.at <= now) {
            self.machine.handle_timeout(now);
        }
        self.drain(now);
    }
}

impl<M: WsMachine> HostMachine for Ws<M> {
    type Target = M::Target;
    type Durable = Infallible;
    type App = M::App;

    fn opened(&mut self, conn: ConnId, peer: &Peer) -> Self::Input {
        WsInput::Accepted {
            conn,
            peer: peer.clone(),
        }
    }
    fn received(&mut self, conn: ConnId, bytes: Vec<u8>) -> Self::Input {
        WsInput::Bytes { conn, bytes }
    }
    fn closed(&mut self, conn: ConnId) -> Self::Input {
        WsInput::Closed { conn }
    }
    fn dialled(&mut self, conn: ConnId, target: M::Target) -> Self::Input {
        WsInput::Dialled { conn, target }
    }
    fn dial_failed(&mut self, target: M::Target) -> Self::Input {
        WsInput::DialFailed { target }
    }
    fn effect(&mut self, output: Self::Output) -> Self::Output {
        output
    }
}

/// One accepted WebSocket connection as a byte codec, for a host machine that serves WebSocket
/// on some of its listeners only (so it cannot be wrapped whole in [`Ws`]): bytes from the
/// transport in, messages and bytes to write back out. It keeps [`Ws`]'s server-side rules for
/// the head (at most [`MAX_HEAD_BYTES`]; `GET /health` answered 200, any other plain request
/// 426, an upgrade without a key 400, each then ended) and for frames (pings answered, a close
/// answered, a message past the limit or a protocol error closed with 1009 or 1002). It has no
/// clock, so unlike [`Ws`] it does not end a head slower than [`HANDSHAKE_TIMEOUT`].
pub struct ServerSocket {
    state: ServerState,
    max_message_bytes: usize,
    guard: Option<BrowserGuard>,
}

/// The upgrade rules of a loopback face a browser could reach: any web page the operator opens
/// can make the browser connect to `127.0.0.1`, so such a face takes only
///
/// - requests with no `Origin` (command-line clients send none; browsers always send one) or an
///   `Origin` on the operator's allow-list, compared byte for byte; and
/// - a `Host` that is the listening address itself, or `localhost` with its port: a page that
///   had its own name resolve to `127.0.0.1` (DNS rebinding) still sends its own name.
///
/// A header sent twice is refused: a request that says two things is not trusted with either.
/// Everything else is refused with 403 before the upgrade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrowserGuard {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl BrowserGuard {
    /// The rules of a face listening at `listen`, with `origins` the web origins (scheme, host
    /// and port, as a browser writes `Origin`) allowed to open it; empty allows none.
    pub fn new(listen: SocketAddr, origins: Vec<String>) -> Self {
        let port = listen.port();
        // `SocketAddr`'s text is how a URL writes the address: `127.0.0.1:p`, `[::1]:p`.
        let hosts = vec![listen.to_string(), format!("localhost:{port}")];
        Self { hosts, origins }
    }

    /// Whether `request` may be upgraded; the refusal to send when not.
    pub fn check(&self, request: &Request) -> Result<(), Refusal> {
        let values = |name: &str| -> Vec<&str> {
            request
                .headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        let refuse = |reason: String| {
            Err(Refusal {
                status: 403,
                reason,
            })
        };
        match values("origin")[..] {
            [] => {}
            [origin] if self.origins.iter().any(|o| o == origin) => {}
            [origin] => return refuse(format!("Origin {origin} is not allowed here.\n")),
            _ => return refuse("More than one Origin.\n".into()),
        }
        match values("host")[..] {
            [host] if self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) => Ok(()),
            [host] => refuse(format!("Host {host} is not this server.\n")),
            [] => refuse("No Host.\n".into()),
            _ => refuse("More than one Host.\n".into()),
        }
    }
}

enum ServerState {
    /// Reading the request head.
    Head(Vec<u8>),
    /// Upgraded.
    Open(Box<WebSocket<Stream>>),
    /// Answered, refused, failed or closed: the transport should be ended.
    Done,
}

impl fmt::Debug for ServerSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            ServerState::Head(_) => "head",
            ServerState::Open(_) => "open",
            ServerState::Done => "done",
        };
        f.debug_struct("ServerSocket")
            .field("state", &state)
            .finish()
    }
}

/// What bytes from the transport came to, for a [`ServerSocket`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Bytes to write back (the `101`, an HTTP answer, pongs, a close frame).
    pub send: Vec<u8>,
    /// The messages that arrived, in order (pings and pongs included, already answered).
    pub messages: Vec<Frame>,
    /// The upgrade was completed by these bytes.
    pub upgraded: bool,
    /// The connection is over (answered, refused, closed or failed): end the transport after
    /// `send`.
    pub end: bool,
}

impl ServerSocket {
    /// A connection just accepted, whose messages may be at most `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        Self {
            state: ServerState::Head(Vec::new()),
            max_message_bytes,
            guard: None,
        }
    }

    /// Upgrades only what `guard` allows; anything else is answered 403 and ended.
    pub fn with_guard(mut self, guard: BrowserGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Whether the upgrade is done and the connection not over.
    pub fn is_open(&self) -> bool {
        matches!(self.state, ServerState::Open(_))
    }

    /// The bytes it holds outside tungstenite's own buffers, as [`Ws::largest_buffer`] counts
    /// them for one connection: at most [`MAX_HEAD_BYTES`] after every call.
    pub fn buffered(&self) -> usize {
        match &self.state {
            ServerState::Head(head) => head.len(),
            ServerState::Open(ws) => ws.get_ref().held(),
            ServerState::Done => 0,
        }
    }

    /// Takes bytes the transport read.
    pub fn received(&mut self, bytes: &[u8]) -> Received {
        let mut out = Received::default();
        match &mut self.state {
            ServerState::Head(head) => {
                head.extend_from_slice(bytes);
                self.head(&mut out);
            }
            ServerState::Open(ws) => {
                ws.get_mut().pipe().inbound.extend(bytes.iter().copied());
                self.read(&mut out);
            }
            ServerState::Done => out.end = true,
        }
        out
    }

    /// The bytes of one text message, or nothing when the connection is not open.
    pub fn send_text(&mut self, text: String) -> Vec<u8> {
        let ServerState::Open(ws) = &mut self.state else {
            return Vec::new();
        };
        // An error here means the socket is failing; its close comes from the transport.
        let _ = ws.send(Message::Text(text.into()));
        std::mem::take(&mut ws.get_mut().pipe().outbound)
    }

    /// The bytes of a close frame with `code` (the reason cut to what a close frame holds);
    /// the connection is over after them.
    pub fn close(&mut self, code: u16, reason: &str) -> Vec<u8> {
        let ServerState::Open(mut ws) = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Vec::new();
        };
        let _ = ws.close(Some(close_frame(CloseCode::from(code), reason)));
        let _ = ws.flush();
        std::mem::take(&mut ws.get_mut().pipe().outbound)
    }

    fn head(&mut self, out: &mut Received) {
        let ServerState::Head(head) = &self.state else {
            return;
        };
        let answer = match HeadAnswer::read(head) {
            HeadAnswer::Incomplete => return,
            HeadAnswer::Drop => Vec::new(),
            HeadAnswer::Plain(response) | HeadAnswer::Bad(response) => response,
            HeadAnswer::Upgrade(upgrade)
                if let Some(Err(refusal)) =
                    self.guard.as_ref().map(|g| g.check(&upgrade.request)) =>
            {
                plain_response(refusal.status, TEXT, &refusal.reason)
            }
            HeadAnswer::Upgrade(upgrade) => {
                out.send = upgrade.switching();
                out.upgraded = true;
                let ws = upgrade.socket(WsConfig::limited(self.max_message_bytes));
                self.state = ServerState::Open(Box::new(ws));
                return self.read(out);
            }
        };
        // Answered or dropped: the connection is over.
        out.send = answer;
        self.state = ServerState::Done;
        out.end = true;
    }

    /// Reads every whole message that arrived.
    fn read(&mut self, out: &mut Received) {
        let ServerState::Open(ws) = &mut self.state else {
            return;
        };
        let over = loop {
            match read_step(ws) {
                Step::Frame(frame) => out.messages.push(frame),
                Step::Drained => {
                    ws.get_mut().pipe().release();
                    break false;
                }
                Step::Over | Step::Failed => break true,
            }
        };
        // Pongs and the answering close the reads queued go out with whatever came before.
        out.send
            .extend(std::mem::take(&mut ws.get_mut().pipe().outbound));
        if over {
            self.state = ServerState::Done;
            out.end = true;
        }
    }
}

/// A close frame with `code` and as much of `reason` as a close frame holds.
fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    let mut reason = reason.to_string();
    // A close frame's payload is at most 125 bytes, two of them the code.
    while reason.len() > 123 {
        reason.pop();
    }
    CloseFrame {
        code,
        reason: reason.into(),
    }
}

/// What one read of an open socket came to.
enum Step {
    /// A message (pings already answered by tungstenite).
    Frame(Frame),
    /// Everything that arrived is read.
    Drained,
    /// The socket is over: the peer's close (its answer queued) or the transport's end.
    Over,
    /// The peer's framing was bad: a close frame with its code is queued and the socket is over.
    Failed,
}

/// Reads the next message of `ws`: the one rule for what a peer's frames come to, on every
/// socket this layer serves or dials. What it queues to send (pongs, closes) waits in the pipe.
fn read_step(ws: &mut WebSocket<Stream>) -> Step {
    loop {
        return match ws.read() {
            Ok(Message::Close(_)) => {
                // tungstenite queued the answering close.
                let _ = ws.flush();
                Step::Over
            }
            Ok(Message::Text(t)) => Step::Frame(Frame::Text(t.as_str().to_string())),
            Ok(Message::Binary(b)) => Step::Frame(Frame::Binary(b.to_vec())),
            Ok(Message::Ping(_)) => Step::Frame(Frame::Ping),
            Ok(Message::Pong(_)) => Step::Frame(Frame::Pong),
            // Raw frames are only ever written, never read.
            Ok(Message::Frame(_)) => continue,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                Step::Drained
            }
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                Step::Over
            }
            Err(e) => {
                let _ = ws.close(Some(close_frame(close_code_for(&e), "")));
                let _ = ws.flush();
                Step::Failed
            }
        };
    }
}

/// The close code (RFC 6455 §7.4.1) for a peer's bad framing: too large 1009, text that is not
/// UTF-8 1007, anything else 1002. Every WebSocket this layer serves closes by this one rule.
fn close_code_for(e: &tungstenite::Error) -> CloseCode {
    match e {
        tungstenite::Error::Capacity(_) => CloseCode::Size,
        tungstenite::Error::Utf8(_) => CloseCode::Invalid,
        _ => CloseCode::Protocol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Remote;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_browser_guard_takes_no_origin_or_an_allowed_one_and_only_its_own_host() {
        let v4 = BrowserGuard::new(
            "127.0.0.1:2474".parse().unwrap(),
            vec!["https://app.example".into()],
        );
        let ok = |g: &BrowserGuard, h: &[(&str, &str)]| g.check(&request(h)).is_ok();
        assert!(ok(&v4, &[("host", "127.0.0.1:2474")]));
        assert!(
            ok(&v4, &[("host", "LOCALHOST:2474")]),
            "host names are case-blind"
        );
        assert!(ok(
            &v4,
            &[
                ("host", "127.0.0.1:2474"),
                ("origin", "https://app.example")
            ]
        ));
        for bad in [
            vec![
                ("host", "127.0.0.1:2474"),
                ("origin", "https://evil.example"),
            ],
            vec![("host", "127.0.0.1:2474"), ("origin", "null")],
            vec![
                ("host", "127.0.0.1:2474"),
                ("origin", "https://app.example"),
                ("origin", "https://app.example"),
            ],
            vec![("host", "evil.example:2474")],
            vec![("host", "127.0.0.1:2475")],
            vec![("host", "127.0.0.1")],
            vec![("host", "127.0.0.1:2474"), ("host", "evil.example")],
            vec![],
        ] {
            let refusal = v4.check(&request(&bad)).unwrap_err();
            assert_eq!(refusal.status, 403, "{bad:?}");
        }
        let v6 = BrowserGuard::new("[::1]:9".parse().unwrap(), Vec::new());
        assert!(ok(&v6, &[("host", "[::1]:9")]));
        assert!(
            !ok(
                &v6,
                &[("host", "[::1]:9"), ("origin", "https://app.example")]
            ),
            "none allowed"
        );
    }

    #[test]
    fn a_server_socket_with_a_guard_answers_a_refused_upgrade_403_and_ends() {
        let mut socket = ServerSocket::new(1024).with_guard(BrowserGuard::new(
            "127.0.0.1:7".parse().unwrap(),
            Vec::new(),
        ));
        let got = socket.received(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1:7\r\nOrigin: https://evil.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        assert!(
            got.send.starts_with(b"HTTP/1.1 403 Forbidden"),
            "{:?}",
            String::from_utf8_lossy(&got.send)
        );
        assert!(got.end && !got.upgraded && !socket.is_open());
    }

    /// What the scripted machine heard, in order.
    #[derive(Debug, PartialEq)]
    enum Heard {
        Opened(ConnId),
        Frame(ConnId, Frame),
        Closed(ConnId),
        Dialled(ConnId, String),
        DialFailed(String),
    }

    /// A machine that records what it hears and does what its commands say.
    #[derive(Default)]
    struct Script {
        heard: Vec<Heard>,
        out: VecDeque<WsEffect<String, String>>,
        refuse: bool,
        limit: Option<usize>,
    }

    enum In {
        Heard(Heard),
        Do(WsEffect<String, String>),
    }

    impl Machine for Script {
        type Input = In;
        type Output = WsEffect<String, String>;
        fn handle(&mut self, _now: Timestamp, input: In) {
            match input {
                In::Heard(h) => self.heard.push(h),
                In::Do(e) => self.out.push_back(e),
            }
        }
        fn poll(&mut self) -> Option<Self::Output> {
            self.out.pop_front()
        }
        fn poll_timeout(&self) -> Option<Wakeup> {
            None
        }
        fn handle_timeout(&mut self, _now: Timestamp) {}
    }

    impl WsMachine for Script {
        type Target = String;
        type App = String;
        fn upgrade(
            &mut self,
            _now: Timestamp,
            conn: ConnId,
            _peer: &Peer,
            _request: &Request,
        ) -> Result<In, Refusal> {
            if self.refuse {
                return Err(Refusal {
                    status: 429,
                    reason: "too many".into(),
                });
            }
            Ok(In::Heard(Heard::Opened(conn)))
        }
        fn message(&mut self, conn: ConnId, frame: Frame) -> Option<In> {
            Some(In::Heard(Heard::Frame(conn, frame)))
        }
        fn closed(&mut self, conn: ConnId) -> Option<In> {
            Some(In::Heard(Heard::Closed(conn)))
        }
        fn dialled(&mut self, conn: ConnId, target: String) -> Option<In> {
            Some(In::Heard(Heard::Dialled(conn, target)))
        }
        fn dial_failed(&mut self, target: String) -> Option<In> {
            Some(In::Heard(Heard::DialFailed(target)))
        }
        fn effect(&mut self, output: Self::Output) -> Option<WsEffect<String, String>> {
            Some(output)
        }
        fn message_limit(&self, _request: &Request) -> Option<usize> {
            self.limit
        }
    }

    const C: ConnId = ConnId(7);
    const UPGRADE: &str = "GET /any HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn layer(max: usize) -> Ws<Script> {
        Ws::new(Script::default(), WsConfig::new(max))
    }

    fn accept(ws: &mut Ws<Script>) {
        let peer = Peer {
            listener: 0,
            remote: Remote::Tcp("127.0.0.1:5000".parse().unwrap()),
        };
        ws.handle(at(0), WsInput::Accepted { conn: C, peer });
    }

    fn bytes(ws: &mut Ws<Script>, now: u64, bytes: &[u8]) {
        ws.handle(
            at(now),
            WsInput::Bytes {
                conn: C,
                bytes: bytes.to_vec(),
            },
        );
    }

    fn outputs(ws: &mut Ws<Script>) -> Vec<Effect<String, Infallible, String>> {
        std::iter::from_fn(|| ws.poll()).collect()
    }

    /// The bytes of every send, concatenated, and whether a transport close followed them.
    fn sent(effects: &[Effect<String, Infallible, String>]) -> (Vec<u8>, bool) {
        let mut all = Vec::new();
        let mut closed = false;
        for e in effects {
            match e {
                Effect::Send { bytes, .. } => all.extend_from_slice(bytes),
                Effect::Close { .. } => closed = true,
                _ => {}
            }
        }
        (all, closed)
    }

    /// A client end speaking frames over a pipe, as a peer of the layer's server side.
    fn client() -> WebSocket<Pipe> {
        WebSocket::from_raw_socket(Pipe::default(), Role::Client, None)
    }

    fn frame_bytes(peer: &mut WebSocket<Pipe>, message: Message) -> Vec<u8> {
        peer.send(message).unwrap();
        std::mem::take(&mut peer.get_mut().outbound)
    }

    /// Opens a server-side socket: the upgrade, its 101, and the machine told.
    fn open() -> Ws<Script> {
        let mut ws = layer(1024);
        accept(&mut ws);
        bytes(&mut ws, 0, UPGRADE.as_bytes());
        let (out, closed) = sent(&outputs(&mut ws));
        assert!(
            out.starts_with(b"HTTP/1.1 101 "),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        assert!(!closed);
        ws
    }

    #[test]
    fn a_request_head_in_pieces_upgrades_once_whole_and_text_frames_reach_the_machine() {
        let mut ws = layer(1024);
        accept(&mut ws);
        let (head, tail) = UPGRADE.as_bytes().split_at(40);
        bytes(&mut ws, 0, head);
        assert!(
            outputs(&mut ws).is_empty(),
            "nothing before the head is whole"
        );
        bytes(&mut ws, 1, tail);
        let (out, _) = sent(&outputs(&mut ws));
        let text = String::from_utf8(out).unwrap();
        // RFC 6455 §1.3's worked example of the accept key.
        assert!(text.contains("sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        let mut peer = client();
        let frame = frame_bytes(&mut peer, Message::text("hi"));
        bytes(&mut ws, 2, &frame);
        assert_eq!(
            ws.machine().heard,
            [Heard::Opened(C), Heard::Frame(C, Frame::Text("hi".into()))]
        );
    }

    #[test]
    fn health_answers_ok_json_and_any_other_plain_request_answers_426_then_closes() {
        for (request, status, body) in [
            (
                "GET /health?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
                "200",
                HEALTH_BODY,
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                "426",
                "open a WebSocket",
            ),
        ] {
            let mut ws = layer(1024);
            accept(&mut ws);
            bytes(&mut ws, 0, request.as_bytes());
            let (out, closed) = sent(&outputs(&mut ws));
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
            assert!(text.contains("connection: close\r\n") && text.contains(body));
            assert!(closed);
            assert!(ws.machine().heard.is_empty());
        }
    }

    #[test]
    fn ws_and_a_server_socket_answer_every_head_that_is_no_open_upgrade_alike() {
        for head in [
            "GET /health HTTP/1.1\r\nhost: x\r\n\r\n",
            "POST /health HTTP/1.1\r\nhost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
            "GET\r\n\r\n",
        ] {
            let mut ws = layer(1024);
            accept(&mut ws);
            bytes(&mut ws, 0, head.as_bytes());
            let (out, closed) = sent(&outputs(&mut ws));
            let mut socket = ServerSocket::new(1024);
            let got = socket.received(head.as_bytes());
            assert_eq!(got.send, out, "{head:?}");
            assert!(closed && got.end && !got.upgraded, "{head:?}");
        }
    }

    #[test]
    fn a_refused_upgrade_is_answered_with_its_status_and_connection_close_and_never_opened() {
        let mut ws = Ws::new(
            Script {
                refuse: true,
                ..Script::default()
            },
            WsConfig::new(1024),
        );
        accept(&mut ws);
        bytes(&mut ws, 0, UPGRADE.as_bytes());
        let (out, closed) = sent(&outputs(&mut ws));
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 429 ") && text.contains("connection: close\r\n"));
        assert!(text.ends_with("too many"));
        assert!(closed);
        assert!(ws.machine().heard.is_empty());
        assert_eq!(ws.stats().refused, 1);
    }

    #[test]
    fn a_request_head_not_whole_within_the_handshake_timeout_is_dropped() {
        let mut ws = layer(1024);
        accept(&mut ws);
        bytes(&mut ws, 0, b"GET / HTTP/1.1\r\n");
        let due = ws.poll_timeout().unwrap().at;
        assert_eq!(due, at(0).saturating_add(HANDSHAKE_TIMEOUT));
        ws.handle_timeout(due);
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
        assert_eq!(ws.stats().bad_heads, 1);
        // A head past the limit is dropped at once.
        let mut ws = layer(1024);
        accept(&mut ws);
        bytes(&mut ws, 0, &vec![b'a'; MAX_HEAD_BYTES + 1]);
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
    }

    #[test]
    fn a_head_still_arriving_is_all_a_connection_holds_and_an_open_socket_holds_nothing() {
        let mut ws = layer(1024);
        accept(&mut ws);
        bytes(&mut ws, 0, &UPGRADE.as_bytes()[..40]);
        assert_eq!(ws.largest_buffer(), 40);
        let mut socket = ServerSocket::new(1024);
        socket.received(&UPGRADE.as_bytes()[..40]);
        assert_eq!(socket.buffered(), 40);
        // The rest of the head, a ping and half a text frame.
        let mut peer = client();
        let mut rest = UPGRADE.as_bytes()[40..].to_vec();
        rest.extend(frame_bytes(&mut peer, Message::Ping(b"p".to_vec().into())));
        let text = frame_bytes(&mut peer, Message::text("hello"));
        rest.extend_from_slice(&text[..4]);
        bytes(&mut ws, 1, &rest);
        socket.received(&rest);
        assert_eq!((ws.largest_buffer(), socket.buffered()), (0, 0));
        // Past the head bound with no end: dropped, nothing held.
        let mut ws = layer(1024);
        accept(&mut ws);
        bytes(&mut ws, 0, &vec![b'a'; MAX_HEAD_BYTES + 1]);
        assert_eq!(ws.largest_buffer(), 0);
    }

    /// A peer at the `n`th of many IPv4 addresses, port 5000.
    fn peer_at(n: u32) -> Peer {
        Peer {
            listener: 0,
            remote: Remote::Tcp((std::net::Ipv4Addr::from(0x0a00_0000 + n), 5000).into()),
        }
    }

    #[test]
    fn connections_past_the_pending_head_cap_are_shut_at_once() {
        let mut ws = layer(1024);
        for n in 0..MAX_PENDING_HEADS as u64 {
            ws.handle(
                at(0),
                WsInput::Accepted {
                    conn: ConnId(100 + n),
                    peer: peer_at(n as u32),
                },
            );
        }
        assert!(outputs(&mut ws).is_empty());
        accept(&mut ws);
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
        // One that finishes its head makes room.
        ws.handle(at(1), WsInput::Closed { conn: C });
        ws.handle(at(1), WsInput::Closed { conn: ConnId(100) });
        accept(&mut ws);
        bytes(&mut ws, 2, UPGRADE.as_bytes());
        assert_eq!(ws.machine().heard, [Heard::Opened(C)]);
    }

    /// One address opens connections and never finishes a head (slow loris): past
    /// [`MAX_PENDING_HEADS_PER_ADDRESS`] (ports and hosts of one IPv6 /64 alike) each is shut at
    /// once, while another address still connects and upgrades; one of the first finishing its
    /// head makes room for that address again. Behind a proxy the cap is lifted to the global one.
    #[test]
    fn pending_heads_are_capped_per_client_address_and_other_addresses_still_connect() {
        let mut ws = layer(1024);
        let from = |i: u64| Peer {
            listener: 0,
            remote: Remote::Tcp(
                (
                    format!("2001:db8:5:6::{:x}", i + 1)
                        .parse::<IpAddr>()
                        .unwrap(),
                    40_000 + i as u16,
                )
                    .into(),
            ),
        };
        for i in 0..MAX_PENDING_HEADS_PER_ADDRESS as u64 {
            ws.handle(
                at(0),
                WsInput::Accepted {
                    conn: ConnId(100 + i),
                    peer: from(i),
                },
            );
        }
        assert!(outputs(&mut ws).is_empty());
        let next = ConnId(999);
        ws.handle(
            at(0),
            WsInput::Accepted {
                conn: next,
                peer: from(99),
            },
        );
        assert_eq!(outputs(&mut ws), [Effect::Close { conn: next }]);
        assert_eq!(ws.stats().bad_heads, 1);
        // Another address is not affected: it connects and upgrades.
        accept(&mut ws);
        bytes(&mut ws, 1, UPGRADE.as_bytes());
        assert_eq!(ws.machine().heard, [Heard::Opened(C)]);
        // One of the first upgrades: its address may start one more head.
        ws.handle(
            at(2),
            WsInput::Bytes {
                conn: ConnId(100),
                bytes: UPGRADE.as_bytes().to_vec(),
            },
        );
        outputs(&mut ws);
        ws.handle(
            at(2),
            WsInput::Accepted {
                conn: ConnId(1000),
                peer: from(100),
            },
        );
        assert!(outputs(&mut ws).is_empty(), "room again");
        // Behind a proxy every connection is the proxy's: only the global cap applies.
        let mut config = WsConfig::new(1024);
        config.pending_heads_per_address = MAX_PENDING_HEADS;
        let mut ws = Ws::new(Script::default(), config);
        for i in 0..(MAX_PENDING_HEADS_PER_ADDRESS as u64 * 4) {
            ws.handle(
                at(0),
                WsInput::Accepted {
                    conn: ConnId(100 + i),
                    peer: from(0),
                },
            );
        }
        assert!(outputs(&mut ws).is_empty());
    }

    #[test]
    fn a_socket_is_held_to_the_limit_its_machine_names_and_binary_effects_go_out_as_binary() {
        let script = Script {
            limit: Some(200),
            ..Script::default()
        };
        let mut ws = Ws::new(script, WsConfig::new(16));
        accept(&mut ws);
        bytes(&mut ws, 0, UPGRADE.as_bytes());
        outputs(&mut ws);
        let mut peer = client();
        // Past the layer's 16 but within the machine's 200: delivered.
        let frame = frame_bytes(&mut peer, Message::binary(vec![7u8; 100]));
        bytes(&mut ws, 1, &frame);
        assert_eq!(
            ws.machine().heard[1..],
            [Heard::Frame(C, Frame::Binary(vec![7u8; 100]))]
        );
        ws.handle(
            at(2),
            WsInput::App(In::Do(WsEffect::Binary {
                conn: C,
                bytes: vec![1, 2, 3],
            })),
        );
        let (out, _) = sent(&outputs(&mut ws));
        peer.get_mut().inbound.extend(out);
        assert_eq!(peer.read().unwrap(), Message::binary(vec![1u8, 2, 3]));
        // Past the machine's 200: closed with 1009.
        let frame = frame_bytes(&mut peer, Message::binary(vec![7u8; 300]));
        bytes(&mut ws, 3, &frame);
        let (out, closed) = sent(&outputs(&mut ws));
        assert!(closed);
        peer.get_mut().inbound.extend(out);
        match peer.read().unwrap() {
            Message::Close(Some(f)) => assert_eq!(f.code, CloseCode::Size),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_message_past_the_limit_closes_the_socket_1009_and_the_machine_hears_the_close() {
        let mut ws = Ws::new(Script::default(), WsConfig::new(16));
        accept(&mut ws);
        bytes(&mut ws, 0, UPGRADE.as_bytes());
        outputs(&mut ws);
        let mut peer = client();
        let frame = frame_bytes(&mut peer, Message::text("x".repeat(100)));
        bytes(&mut ws, 1, &frame);
        let (out, closed) = sent(&outputs(&mut ws));
        assert!(closed);
        peer.get_mut().inbound.extend(out);
        match peer.read().unwrap() {
            Message::Close(Some(f)) => assert_eq!(f.code, CloseCode::Size),
            other => panic!("expected a close frame, got {other:?}"),
        }
        assert_eq!(ws.machine().heard.last(), Some(&Heard::Closed(C)));
        assert_eq!(ws.stats().protocol_errors, 1);
    }

    #[test]
    fn pings_are_answered_by_the_layer_and_reported_to_the_machine() {
        let mut ws = open();
        let mut peer = client();
        let frame = frame_bytes(&mut peer, Message::Ping(b"p".to_vec().into()));
        bytes(&mut ws, 1, &frame);
        let (out, _) = sent(&outputs(&mut ws));
        peer.get_mut().inbound.extend(out);
        assert_eq!(peer.read().unwrap(), Message::Pong(b"p".to_vec().into()));
        assert_eq!(
            ws.machine().heard.last(),
            Some(&Heard::Frame(C, Frame::Ping))
        );
    }

    #[test]
    fn a_socket_the_machine_closes_is_shut_after_the_grace_and_never_reported_closed_to_it() {
        let mut ws = open();
        ws.handle(
            at(10),
            WsInput::App(In::Do(WsEffect::Close {
                conn: C,
                code: 1008,
                reason: "rate".into(),
            })),
        );
        let (out, closed) = sent(&outputs(&mut ws));
        assert!(
            !closed,
            "the close frame first, then the grace for its answer"
        );
        let mut peer = client();
        peer.get_mut().inbound.extend(out);
        match peer.read().unwrap() {
            Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1008),
            other => panic!("expected a close frame, got {other:?}"),
        }
        // Frames after the close go nowhere.
        let late = frame_bytes(&mut client(), Message::text("late"));
        bytes(&mut ws, 11, &late);
        let due = ws.poll_timeout().unwrap().at;
        assert_eq!(due, at(10).saturating_add(CLOSE_GRACE));
        ws.handle_timeout(due);
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
        ws.handle(due, WsInput::Closed { conn: C });
        assert_eq!(ws.machine().heard, [Heard::Opened(C)]);
    }

    #[test]
    fn a_close_frame_from_the_other_side_is_answered_and_reported_once() {
        let mut ws = open();
        let mut peer = client();
        peer.close(None).unwrap();
        let frame = std::mem::take(&mut peer.get_mut().outbound);
        bytes(&mut ws, 1, &frame);
        let (out, closed) = sent(&outputs(&mut ws));
        assert!(closed && !out.is_empty(), "the answering close goes out");
        ws.handle(at(2), WsInput::Closed { conn: C });
        assert_eq!(ws.machine().heard, [Heard::Opened(C), Heard::Closed(C)]);
    }

    const URL: &str = "ws://127.0.0.1:9/room";

    /// Starts a dial and returns the request the layer sent.
    fn dial(ws: &mut Ws<Script>) -> String {
        ws.handle(
            at(0),
            WsInput::Dialled {
                conn: C,
                target: URL.into(),
            },
        );
        let (out, closed) = sent(&outputs(ws));
        assert!(!closed);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_dial_answered_101_opens_and_the_machine_hears_it_with_the_frames_that_came_along() {
        let mut ws = layer(1024);
        let request = dial(&mut ws);
        assert!(request.starts_with("GET /room HTTP/1.1\r\n"), "{request}");
        assert!(
            ws.machine().heard.is_empty(),
            "not open before the handshake"
        );
        let key = request
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap();
        let mut response = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            derive_accept_key(key.as_bytes())
        )
        .into_bytes();
        let mut server = WebSocket::from_raw_socket(Pipe::default(), Role::Server, None);
        response.extend(frame_bytes(&mut server, Message::text("welcome")));
        bytes(&mut ws, 1, &response);
        assert_eq!(
            ws.machine().heard,
            [
                Heard::Dialled(C, URL.into()),
                Heard::Frame(C, Frame::Text("welcome".into()))
            ]
        );
    }

    #[test]
    fn a_dial_whose_answer_never_comes_fails_after_the_handshake_timeout() {
        let mut ws = layer(1024);
        dial(&mut ws);
        let due = ws.poll_timeout().unwrap().at;
        assert_eq!(due, at(0).saturating_add(HANDSHAKE_TIMEOUT));
        ws.handle_timeout(due);
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
        assert_eq!(ws.machine().heard, [Heard::DialFailed(URL.into())]);
        // The transport's close that follows is not a second failure.
        ws.handle(due, WsInput::Closed { conn: C });
        assert_eq!(ws.machine().heard.len(), 1);
    }

    #[test]
    fn a_dial_answered_with_anything_but_101_fails() {
        let mut ws = layer(1024);
        dial(&mut ws);
        bytes(
            &mut ws,
            1,
            b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 0\r\n\r\n",
        );
        assert!(matches!(outputs(&mut ws)[..], [Effect::Close { conn: C }]));
        assert_eq!(ws.machine().heard, [Heard::DialFailed(URL.into())]);
        assert_eq!(ws.stats().handshakes_failed, 1);
    }

    #[test]
    fn a_url_names_its_endpoint_with_the_scheme_default_port() {
        assert_eq!(
            endpoint("wss://127.0.0.1/x"),
            Some(Endpoint::Tcp("127.0.0.1:443".parse().unwrap()))
        );
        assert_eq!(
            endpoint("ws://[::1]:8787"),
            Some(Endpoint::Tcp("[::1]:8787".parse().unwrap()))
        );
        assert_eq!(endpoint("http://127.0.0.1/"), None);
    }
}

#[cfg(test)]
mod server_socket_tests {
    use super::*;

    const UPGRADE: &str = "GET / HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

    /// A client's text frame, masked with the zero key (RFC 6455 §5.3 requires a mask, not a
    /// random one from a test).
    fn client_text(text: &str) -> Vec<u8> {
        assert!(text.len() < 126);
        let mut f = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
        f.extend_from_slice(text.as_bytes());
        f
    }

    #[test]
    fn an_upgrade_is_answered_101_and_its_text_messages_come_out_one_each() {
        let mut s = ServerSocket::new(1024);
        let mut bytes = UPGRADE.as_bytes().to_vec();
        bytes.extend(client_text("one"));
        let got = s.received(&bytes[..10]);
        assert_eq!(got, Received::default(), "half a head is nothing yet");
        let got = s.received(&bytes[10..]);
        let head = String::from_utf8(got.send).unwrap();
        // RFC 6455 §1.3's worked example key and answer.
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
        assert!(got.upgraded && !got.end && s.is_open());
        assert_eq!(got.messages, [Frame::Text("one".into())]);
        let got = s.received(&client_text("two"));
        assert_eq!(got.messages, [Frame::Text("two".into())]);
        assert_eq!(s.send_text("back".into()), b"\x81\x04back");
    }

    #[test]
    fn a_request_that_is_no_upgrade_is_answered_plainly_and_ended() {
        for (head, status) in [
            ("GET /health HTTP/1.1\r\nhost: x\r\n\r\n", "200"),
            ("GET / HTTP/1.1\r\nhost: x\r\n\r\n", "426"),
            ("GET / HTTP/1.1\r\nupgrade: websocket\r\n\r\n", "400"),
        ] {
            let mut s = ServerSocket::new(1024);
            let got = s.received(head.as_bytes());
            let answer = String::from_utf8(got.send).unwrap();
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}")),
                "{answer}"
            );
            assert!(got.end && !got.upgraded && !s.is_open());
        }
        let mut s = ServerSocket::new(1024);
        let got = s.received(&vec![b'a'; MAX_HEAD_BYTES + 1]);
        assert!(
            got.end && got.send.is_empty(),
            "a head past the bound is dropped"
        );
    }

    #[test]
    fn a_message_past_the_limit_closes_with_1009() {
        let mut s = ServerSocket::new(4);
        s.received(UPGRADE.as_bytes());
        let got = s.received(&client_text("too long"));
        assert!(got.end && got.messages.is_empty());
        // A close frame whose code is 1009 (0x03f1).
        assert_eq!(&got.send[..4], &[0x88, 0x02, 0x03, 0xf1]);
    }

    #[test]
    fn a_close_the_server_asks_for_is_a_close_frame_and_the_end() {
        let mut s = ServerSocket::new(1024);
        s.received(UPGRADE.as_bytes());
        let bytes = s.close(1003, "text only");
        assert_eq!(&bytes[..4], &[0x88, 11, 0x03, 0xeb]);
        assert!(!s.is_open());
        assert!(s.send_text("late".into()).is_empty());
    }
}
