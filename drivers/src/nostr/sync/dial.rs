//! Reaching a peer relay for outbound sync (spec 002 §6 step 1), with every connection going only
//! to an address the address policy allowed.
//!
//! The rule is the policy's ([`address::check_url`] for a URL's host, [`address::check`] for each
//! address a name resolves to); this module makes it hold on the wire:
//!
//! - **One resolution per hop, then connect to what was checked.** A name is resolved once
//!   ([`Resolve`]), *every* address it gives is checked (one refused address refuses the name:
//!   [`DialError::Refused`]), and the socket is opened to those very addresses. Nothing resolves
//!   the name again between the check and the connect, so DNS rebinding (a public answer for the
//!   check, a private one for the connect) has no second answer to give.
//! - **Redirects by hand.** The NIP-11 fetch ([`Dialer::fetch_info`]) reads the status line
//!   itself; a `301`, `302`, `303`, `307` or `308` is followed only after its `Location` passes
//!   the same checks as the first URL, at most [`MAX_REDIRECTS`] times, never to a URL already
//!   visited, and never from `https` down to `http`.
//! - **Bounded in bytes and time.** A response head past [`MAX_HEAD_BYTES`] or a body past
//!   [`MAX_INFO_BYTES`] is cut, whatever `content-length` claimed; every read and write meets one
//!   deadline for the whole fetch ([`FETCH_TIMEOUT`]), so a peer sending a byte a second cannot
//!   hold a worker past it; each connect has [`CONNECT_TIMEOUT`].
//! - **The WebSocket dial** ([`Dialer::ws_target`]) is checked the same way and carried to the
//!   WebSocket layer ([`crate::ws`]) as a [`PeerDial`] holding the checked address: the host's
//!   [`Hooks::resolve`] ([`PeerHooks`]) hands that address over as it is, and the layer's TLS
//!   (`wss://`, rustls) and handshake use the URL's host name. A WebSocket handshake answered
//!   with a redirect fails (the layer follows none), so it has no way around the check.
//!
//! Every call blocks (DNS, connect, reads): a runner calls them on a thread of their own, never
//! on a relay's loop.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use weft_proto::core::ConnId;
use weft_proto::nostr::auth::host_of;
use weft_proto::nostr::sync::address::{self, Refused, UrlError, UrlHost};

use crate::host::{Endpoint, Hooks};
use crate::ws::{Ws, WsMachine};

/// The most redirects one NIP-11 fetch follows; the next one fails the fetch
/// ([`DialError::TooManyRedirects`]). Browsers allow 20; a relay's information document has no
/// reason to move more than once or twice (`http` to `https`, a bare host to `www.`), and each
/// hop is a connection to a host the peer chose.
pub const MAX_REDIRECTS: usize = 5;

/// The largest NIP-11 body read, in bytes; a longer one fails the fetch
/// ([`DialError::TooLarge`]) as soon as the excess is seen, whatever `content-length` said.
/// Relay documents are a few kilobytes (nostream's, with its fee tables, is under 4 KiB); the
/// peering advertisement's scopes add a few hundred bytes each.
pub const MAX_INFO_BYTES: usize = 64 * 1024;

/// The longest HTTP response head read (status line and headers), in bytes, as the WebSocket
/// layer bounds request heads ([`crate::ws::MAX_HEAD_BYTES`]).
pub const MAX_HEAD_BYTES: usize = crate::ws::MAX_HEAD_BYTES;

/// The most headers a response head may carry.
pub const MAX_HEADERS: usize = 64;

/// The longest line of a chunked body's framing (a chunk size with its extensions, a trailer).
pub const MAX_CHUNK_LINE: usize = 1024;

/// How long one TCP connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a whole NIP-11 fetch may take, every redirect, connect, TLS handshake, read and
/// write included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// The most resolved addresses of one name kept (and tried, in the resolver's order); all of
/// them are checked first, however many there are.
pub const MAX_ADDRESSES: usize = 8;

/// The media type NIP-11 documents are asked for with.
pub const NIP11_ACCEPT: &str = "application/nostr+json";

/// Why a peer could not be reached, or was not to be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DialError {
    /// Not a URL this dialer can use: no `scheme://host`, another scheme, user info, a bad
    /// port, whitespace or control characters.
    BadUrl(String),
    /// The address policy refused the URL's host (an address literal, or `localhost`).
    RefusedUrl(UrlError),
    /// The name resolved to an address the policy refuses.
    Refused {
        /// The name.
        host: String,
        /// The refused address and its class.
        refused: Refused,
    },
    /// The name did not resolve.
    Resolve {
        /// The name.
        host: String,
        /// The resolver's words.
        error: String,
    },
    /// The name resolved to no address.
    NoAddress(String),
    /// No checked address accepted a connection.
    Connect(String),
    /// The TLS handshake or a TLS record failed.
    Tls(String),
    /// The fetch ran past [`FETCH_TIMEOUT`] (or a connect past [`CONNECT_TIMEOUT`]).
    Timeout,
    /// The response was not HTTP/1.x as this reader takes it.
    Http(String),
    /// A final status other than 200.
    Status(u16),
    /// The response head passed [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`].
    HeadTooLarge,
    /// The body passed the byte bound.
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    TooManyRedirects(usize),
    /// A redirect back to a URL this fetch already asked.
    RedirectLoop(String),
    /// A redirect from `https` to `http`.
    Downgrade(String),
}

impl DialError {
    /// Whether the address policy refused it (as opposed to the network or the peer failing):
    /// a configuration matter, not something a retry mends.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::RefusedUrl(_) | Self::Refused { .. })
    }
}

impl fmt::Display for DialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl(why) => write!(f, "bad URL: {why}"),
            Self::RefusedUrl(e) => write!(f, "refused by the address policy: {e}"),
            Self::Refused { host, refused } => {
                write!(f, "{host} resolves to a {refused} by the address policy")
            }
            Self::Resolve { host, error } => write!(f, "cannot resolve {host}: {error}"),
            Self::NoAddress(host) => write!(f, "{host} resolves to no address"),
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Tls(e) => write!(f, "TLS: {e}"),
            Self::Timeout => f.write_str("timed out"),
            Self::Http(e) => write!(f, "bad HTTP response: {e}"),
            Self::Status(s) => write!(f, "HTTP status {s}"),
            Self::HeadTooLarge => f.write_str("response head too large"),
            Self::TooLarge { limit } => write!(f, "body over {limit} bytes"),
            Self::TooManyRedirects(n) => write!(f, "more than {n} redirects"),
            Self::RedirectLoop(url) => write!(f, "redirect loop back to {url}"),
            Self::Downgrade(url) => write!(f, "redirect from https down to {url}"),
        }
    }
}

impl std::error::Error for DialError {}

/// Name resolution, asked once per hop. The system's resolver ([`SystemResolver`]) in the
/// program; tests hand their own.
pub trait Resolve: Send + Sync {
    /// The addresses `host` (a name, never an address literal) resolves to.
    fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo`: `/etc/hosts`, then DNS as `nsswitch.conf`
/// says).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        Ok((host, 0u16).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// Opening a TCP connection to an address already checked. [`TcpConnect`] in the program; a test
/// routes addresses its own way (a public address to a loopback server) to exercise the policy
/// without a public network.
pub trait Connect: Send + Sync {
    /// A connected stream to `addr`, within `timeout`.
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream>;
}

/// Plain `connect(2)` to the address given.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnect;

impl Connect for TcpConnect {
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        TcpStream::connect_timeout(&addr, timeout)
    }
}

/// The schemes a peer URL may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Ws,
    Wss,
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Self::Ws | Self::Http => 80,
            Self::Wss | Self::Https => 443,
        }
    }

    fn is_tls(self) -> bool {
        matches!(self, Self::Wss | Self::Https)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Wss => "wss",
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// A URL split as the dialer uses it. The host is exactly what the address policy reads
/// ([`host_of`]), so the host checked and the host connected to cannot differ by a parser's
/// reading.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Url {
    scheme: Scheme,
    /// As [`host_of`] gives it: an IPv6 literal keeps its brackets.
    host: String,
    port: u16,
    /// The request target: path and query, starting with `/`.
    target: String,
}

impl Url {
    fn parse(url: &str) -> Result<Self, DialError> {
        let bad = |why: &str| DialError::BadUrl(format!("{why}: {url:?}"));
        if url
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'\\' || !b.is_ascii())
        {
            return Err(bad(
                "whitespace, a control, a backslash or a non-ASCII character",
            ));
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "ws" => Scheme::Ws,
            "wss" => Scheme::Wss,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(bad("not ws, wss, http or https")),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err(bad("user info"));
        }
        let host = host_of(url).ok_or_else(|| bad("no host"))?;
        let port = match authority
            .strip_prefix(host)
            .ok_or_else(|| bad("unreadable host"))?
        {
            "" => scheme.default_port(),
            p => p
                .strip_prefix(':')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u16>().ok())
                .filter(|&p| p != 0)
                .ok_or_else(|| bad("bad port"))?,
        };
        let tail = tail.split('#').next().unwrap_or("");
        let target = if tail.starts_with('/') {
            tail.to_string()
        } else {
            format!("/{tail}")
        };
        Ok(Self {
            scheme,
            host: host.to_string(),
            port,
            target,
        })
    }

    /// The host without IPv6 brackets, as a socket or a certificate name takes it.
    fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }

    /// `host[:port]`, the port only when not the scheme's default (the `Host` header).
    fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn to_text(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.name(),
            self.authority(),
            self.target
        )
    }

    /// The `Location` of a redirect from this URL, made absolute: an absolute `http(s)` URL, a
    /// scheme-relative `//host/...`, an absolute path, or a path relative to this one's folder.
    fn join(&self, location: &str) -> Result<Self, DialError> {
        let location = location.trim();
        let absolute = if location.contains("://") {
            location.to_string()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{}://{rest}", self.scheme.name())
        } else if location.starts_with('/') {
            format!("{}://{}{location}", self.scheme.name(), self.authority())
        } else {
            let path = self.target.split('?').next().unwrap_or("/");
            let folder = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!(
                "{}://{}{folder}{location}",
                self.scheme.name(),
                self.authority()
            )
        };
        let next = Self::parse(&absolute)?;
        if !matches!(next.scheme, Scheme::Http | Scheme::Https) {
            return Err(DialError::BadUrl(format!(
                "a redirect to another scheme: {absolute:?}"
            )));
        }
        Ok(next)
    }
}

/// The `http(s)://` URL a `ws(s)://` relay URL's NIP-11 document is fetched from (NIP-11: the
/// same URI, over HTTP); an `http(s)` URL stays as it is.
pub fn info_url(relay_url: &str) -> Result<String, DialError> {
    let mut url = Url::parse(relay_url)?;
    url.scheme = match url.scheme {
        Scheme::Ws | Scheme::Http => Scheme::Http,
        Scheme::Wss | Scheme::Https => Scheme::Https,
    };
    Ok(url.to_text())
}

/// A URL whose host passed the address policy, with the addresses it may be connected to: every
/// one of them checked, at least one, at most [`MAX_ADDRESSES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    url: Url,
    addrs: Vec<SocketAddr>,
}

impl Checked {
    /// The checked addresses, in the order they are tried.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The URL, as it was checked.
    pub fn url(&self) -> String {
        self.url.to_text()
    }
}

/// The NIP-11 document a fetch read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The URL the document came from, after any redirects.
    pub url: String,
    /// The body, at most [`MAX_INFO_BYTES`] bytes of UTF-8 (decoding it is the worker's).
    pub body: String,
}

/// A WebSocket dial to a peer, to an address the policy checked: made only by
/// [`Dialer::ws_target`], resolved by the host's hooks ([`PeerHooks`]) to exactly that address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerDial {
    conn: ConnId,
    url: String,
    addr: SocketAddr,
}

impl PeerDial {
    /// The dialling machine's name for the socket.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The `ws://` or `wss://` URL: its host is the TLS server name and the `Host` header.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The checked address the connection goes to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl AsRef<str> for PeerDial {
    fn as_ref(&self) -> &str {
        &self.url
    }
}

/// Hooks for a [`Ws`] host whose machine dials [`PeerDial`]s: a dial goes to the address in it
/// and nowhere else (no resolution here), deliveries go to `deliver`, nothing is stored.
pub struct PeerHooks<D>(pub D);

impl<D> fmt::Debug for PeerHooks<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerHooks")
    }
}

impl<M, D> Hooks<Ws<M>> for PeerHooks<D>
where
    M: WsMachine<Target = PeerDial>,
    D: FnMut(M::App),
{
    fn store(&mut self, batch: &[std::convert::Infallible]) -> io::Result<()> {
        match batch.first() {
            Some(never) => match *never {},
            None => Ok(()),
        }
    }
    fn deliver(&mut self, app: M::App) {
        (self.0)(app);
    }
    fn resolve(&mut self, target: &PeerDial) -> Option<Endpoint> {
        Some(Endpoint::Tcp(target.addr))
    }
}

/// How a relay reaches its peers: the address policy's one setting, the resolver, the connector
/// and the TLS roots. Cheap to clone (its parts are shared).
#[derive(Clone)]
pub struct Dialer {
    /// `peering.allowPrivateNetworks`: loopback, private, link-local (and every other
    /// non-public) address allowed, for a LAN or a test.
    pub allow_private_networks: bool,
    /// Asked once per hop.
    pub resolver: Arc<dyn Resolve>,
    /// Opens the connections.
    pub connector: Arc<dyn Connect>,
    /// The TLS client configuration for `https://` (the WebSocket layer has its own for
    /// `wss://`, [`crate::ws::WsConfig::tls`]; hand it the same).
    pub tls: Arc<rustls::ClientConfig>,
    /// The largest body read ([`MAX_INFO_BYTES`] unless set).
    pub max_body_bytes: usize,
    /// The whole fetch's deadline ([`FETCH_TIMEOUT`] unless set).
    pub fetch_timeout: Duration,
}

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dialer")
            .field("allow_private_networks", &self.allow_private_networks)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("fetch_timeout", &self.fetch_timeout)
            .finish_non_exhaustive()
    }
}

impl Dialer {
    /// The system's resolver, plain TCP connects, TLS trusting `tls`'s roots (pass the
    /// WebSocket layer's, [`crate::ws::WsConfig::tls`], so `https` and `wss` trust the same),
    /// and the default bounds.
    pub fn new(allow_private_networks: bool, tls: Arc<rustls::ClientConfig>) -> Self {
        Self {
            allow_private_networks,
            resolver: Arc::new(SystemResolver),
            connector: Arc::new(TcpConnect),
            tls,
            max_body_bytes: MAX_INFO_BYTES,
            fetch_timeout: FETCH_TIMEOUT,
        }
    }

    /// Checks `url` against the address policy: its host, if an address literal, or else every
    /// address its name resolves to (resolved once, here). `Ok` holds the addresses to connect
    /// to; a single refused address refuses the URL.
    pub fn check(&self, url: &str) -> Result<Checked, DialError> {
        self.check_parsed(Url::parse(url)?)
    }

    fn check_parsed(&self, url: Url) -> Result<Checked, DialError> {
        let text = url.to_text();
        let ips = match address::check_url(&text, self.allow_private_networks)
            .map_err(DialError::RefusedUrl)?
        {
            UrlHost::Literal(ip) => vec![ip],
            UrlHost::Name(name) => {
                let ips = self
                    .resolver
                    .resolve(name)
                    .map_err(|e| DialError::Resolve {
                        host: name.to_string(),
                        error: e.to_string(),
                    })?;
                for &ip in &ips {
                    address::check(ip, self.allow_private_networks).map_err(|refused| {
                        DialError::Refused {
                            host: name.to_string(),
                            refused,
                        }
                    })?;
                }
                ips
            }
        };
        let mut addrs: Vec<SocketAddr> = Vec::new();
        for ip in ips {
            let addr = SocketAddr::new(ip, url.port);
            if !addrs.contains(&addr) && addrs.len() < MAX_ADDRESSES {
                addrs.push(addr);
            }
        }
        if addrs.is_empty() {
            return Err(DialError::NoAddress(url.host.clone()));
        }
        Ok(Checked { url, addrs })
    }

    /// The WebSocket dial for the machine's socket `conn` to the `ws://` or `wss://` `url`,
    /// checked as [`check`](Self::check) checks, to its first checked address.
    pub fn ws_target(&self, conn: ConnId, url: &str) -> Result<PeerDial, DialError> {
        let parsed = Url::parse(url)?;
        if !matches!(parsed.scheme, Scheme::Ws | Scheme::Wss) {
            return Err(DialError::BadUrl(format!("not ws or wss: {url:?}")));
        }
        // The WebSocket layer reads the URL with the `http` crate for its TLS name and `Host`
        // header: that reading must name the host the policy checked.
        let uri: async_tungstenite::tungstenite::http::Uri = url
            .parse()
            .map_err(|_| DialError::BadUrl(format!("unreadable: {url:?}")))?;
        let theirs = uri.host().unwrap_or("");
        let theirs = theirs
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(theirs);
        if !theirs.eq_ignore_ascii_case(parsed.bare_host()) {
            return Err(DialError::BadUrl(format!(
                "its host reads two ways: {url:?}"
            )));
        }
        let checked = self.check_parsed(parsed)?;
        Ok(PeerDial {
            conn,
            url: url.to_string(),
            addr: checked.addrs[0],
        })
    }

    /// The peer's NIP-11 document: a `GET` of the `http(s)` form of `relay_url` asking for
    /// [`NIP11_ACCEPT`], redirects followed as the [module docs](self) say, each hop checked
    /// before it is connected to.
    pub fn fetch_info(&self, relay_url: &str) -> Result<Info, DialError> {
        let deadline = Instant::now() + self.fetch_timeout;
        let mut url = Url::parse(&info_url(relay_url)?)?;
        let mut visited = BTreeSet::new();
        let mut redirects = 0;
        loop {
            visited.insert(url.to_text());
            let checked = self.check_parsed(url.clone())?;
            match self.get(&checked, deadline)? {
                Answer::Body(body) => {
                    return Ok(Info {
                        url: url.to_text(),
                        body,
                    });
                }
                Answer::Redirect(location) => {
                    if redirects == MAX_REDIRECTS {
                        return Err(DialError::TooManyRedirects(MAX_REDIRECTS));
                    }
                    redirects += 1;
                    let next = url.join(&location)?;
                    if url.scheme == Scheme::Https && next.scheme == Scheme::Http {
                        return Err(DialError::Downgrade(next.to_text()));
                    }
                    if visited.contains(&next.to_text()) {
                        return Err(DialError::RedirectLoop(next.to_text()));
                    }
                    url = next;
                }
            }
        }
    }

    /// Opens a connection to the first checked address that takes one.
    fn open(&self, checked: &Checked, deadline: Instant) -> Result<TcpStream, DialError> {
        let mut last = String::from("no address");
        for &addr in &checked.addrs {
            let left = remaining(deadline)?;
            match self.connector.connect(addr, left.min(CONNECT_TIMEOUT)) {
                Ok(stream) => return Ok(stream),
                Err(e) if is_timeout(&e) => last = format!("{addr}: timed out"),
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        remaining(deadline)?;
        Err(DialError::Connect(last))
    }

    /// One `GET` over one connection: the body of a 200, the `Location` of a redirect.
    fn get(&self, checked: &Checked, deadline: Instant) -> Result<Answer, DialError> {
        let tcp = self.open(checked, deadline)?;
        let tcp = Deadlined { tcp, deadline };
        let url = &checked.url;
        let request = format!(
            "GET {} HTTP/1.1\r\nhost: {}\r\naccept: {NIP11_ACCEPT}\r\naccept-encoding: identity\r\nuser-agent: weft/{}\r\nconnection: close\r\n\r\n",
            url.target,
            url.authority(),
            env!("CARGO_PKG_VERSION"),
        );
        if url.scheme.is_tls() {
            let name = ServerName::try_from(url.bare_host().to_string())
                .map_err(|e| DialError::Tls(e.to_string()))?;
            let conn = rustls::ClientConnection::new(self.tls.clone(), name)
                .map_err(|e| DialError::Tls(e.to_string()))?;
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            exchange(&mut stream, &request, self.max_body_bytes)
        } else {
            let mut stream = tcp;
            exchange(&mut stream, &request, self.max_body_bytes)
        }
    }
}

/// What one request got.
enum Answer {
    Body(String),
    Redirect(String),
}

/// The time left before `deadline`, or [`DialError::Timeout`].
fn remaining(deadline: Instant) -> Result<Duration, DialError> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(DialError::Timeout)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// A TCP stream whose every read and write ends by one deadline.
struct Deadlined {
    tcp: TcpStream,
    deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> io::Result<Duration> {
        remaining(self.deadline).map_err(|_| io::ErrorKind::TimedOut.into())
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.tcp.set_read_timeout(Some(left))?;
        self.tcp.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.tcp.set_write_timeout(Some(left))?;
        self.tcp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// An I/O error as the fetch reports it.
fn io_error(e: io::Error) -> DialError {
    if is_timeout(&e) {
        return DialError::Timeout;
    }
    // rustls reports its failures as `InvalidData` carrying its own error.
    if e.kind() == io::ErrorKind::InvalidData
        && e.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    {
        return DialError::Tls(e.to_string());
    }
    DialError::Http(e.to_string())
}

/// Sends `request` and reads the answer, at most `max_body` bytes of body.
fn exchange<S: Read + Write>(
    stream: &mut S,
    request: &str,
    max_body: usize,
) -> Result<Answer, DialError> {
    stream.write_all(request.as_bytes()).map_err(io_error)?;
    stream.flush().map_err(io_error)?;
    let mut reader = BufReader::new(stream);
    let head = read_head(&mut reader)?;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(DialError::Http("a cut head".into())),
        Err(httparse::Error::TooManyHeaders) => return Err(DialError::HeadTooLarge),
        Err(e) => return Err(DialError::Http(e.to_string())),
    }
    let status = response.code.unwrap_or(0);
    let header = |name: &str| -> Result<Option<String>, DialError> {
        let mut found = response
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name));
        let Some(first) = found.next() else {
            return Ok(None);
        };
        let value = std::str::from_utf8(first.value)
            .map_err(|_| DialError::Http(format!("{name} not text")))?
            .trim()
            .to_string();
        // Two values for a header that frames the body (or points a redirect) is request
        // smuggling's opening: refuse rather than pick one.
        if found.next().is_some() {
            return Err(DialError::Http(format!("two {name} headers")));
        }
        Ok(Some(value))
    };
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        let location = header("location")?
            .ok_or_else(|| DialError::Http("a redirect without location".into()))?;
        return Ok(Answer::Redirect(location));
    }
    if status != 200 {
        return Err(DialError::Status(status));
    }
    if let Some(encoding) = header("content-encoding")?
        && !encoding.eq_ignore_ascii_case("identity")
    {
        return Err(DialError::Http(format!("content-encoding {encoding}")));
    }
    let chunked = match header("transfer-encoding")? {
        None => false,
        Some(te) if te.eq_ignore_ascii_case("chunked") => true,
        Some(te) => return Err(DialError::Http(format!("transfer-encoding {te}"))),
    };
    let length = header("content-length")?;
    let body = if chunked {
        if length.is_some() {
            return Err(DialError::Http("both content-length and chunked".into()));
        }
        read_chunked(&mut reader, max_body)?
    } else if let Some(length) = length {
        let n: u64 = length
            .parse()
            .map_err(|_| DialError::Http(format!("content-length {length:?}")))?;
        if n > max_body as u64 {
            return Err(DialError::TooLarge { limit: max_body });
        }
        let mut body = Vec::with_capacity(n as usize);
        (&mut reader)
            .take(n)
            .read_to_end(&mut body)
            .map_err(io_error)?;
        if body.len() as u64 != n {
            return Err(DialError::Http("the body ended early".into()));
        }
        body
    } else {
        read_bounded(&mut reader, max_body)?
    };
    String::from_utf8(body)
        .map(Answer::Body)
        .map_err(|_| DialError::Http("the body is not UTF-8".into()))
}

/// The response head, up to and including its blank line, at most [`MAX_HEAD_BYTES`].
fn read_head<R: BufRead>(reader: &mut R) -> Result<Vec<u8>, DialError> {
    let mut head = Vec::new();
    loop {
        let budget = (MAX_HEAD_BYTES + 1).saturating_sub(head.len()) as u64;
        let before = head.len();
        let n = reader
            .by_ref()
            .take(budget)
            .read_until(b'\n', &mut head)
            .map_err(io_error)?;
        if head.len() > MAX_HEAD_BYTES {
            return Err(DialError::HeadTooLarge);
        }
        if n == 0 {
            return Err(DialError::Http("the connection ended in the head".into()));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            return Ok(head);
        }
    }
}

/// A body that runs to the end of the connection, at most `max` bytes.
fn read_bounded<R: Read>(reader: &mut R, max: usize) -> Result<Vec<u8>, DialError> {
    let mut body = Vec::new();
    reader
        .by_ref()
        .take(max as u64 + 1)
        .read_to_end(&mut body)
        .map_err(io_error)?;
    if body.len() > max {
        return Err(DialError::TooLarge { limit: max });
    }
    Ok(body)
}

/// One line of chunked framing, without its line end, at most [`MAX_CHUNK_LINE`].
fn chunk_line<R: BufRead>(reader: &mut R) -> Result<Vec<u8>, DialError> {
    let mut line = Vec::new();
    reader
        .by_ref()
        .take(MAX_CHUNK_LINE as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(io_error)?;
    if line.last() != Some(&b'\n') {
        return Err(DialError::Http(if line.len() > MAX_CHUNK_LINE {
            "a chunk line too long".into()
        } else {
            "the connection ended in a chunk line".into()
        }));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

/// A `transfer-encoding: chunked` body, at most `max` bytes once decoded.
fn read_chunked<R: BufRead>(reader: &mut R, max: usize) -> Result<Vec<u8>, DialError> {
    let mut body = Vec::new();
    loop {
        let line = chunk_line(reader)?;
        let size = line.split(|&b| b == b';').next().unwrap_or(&[]);
        let size = std::str::from_utf8(size)
            .ok()
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 16)
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| DialError::Http("a bad chunk size".into()))?;
        if size == 0 {
            // Trailers, up to the blank line; their number is bounded by the head's bound.
            let mut trailers = 0;
            while !chunk_line(reader)?.is_empty() {
                trailers += 1;
                if trailers > MAX_HEADERS {
                    return Err(DialError::HeadTooLarge);
                }
            }
            return Ok(body);
        }
        if size > (max - body.len()) as u64 {
            return Err(DialError::TooLarge { limit: max });
        }
        let before = body.len();
        reader
            .by_ref()
            .take(size)
            .read_to_end(&mut body)
            .map_err(io_error)?;
        if (body.len() - before) as u64 != size {
            return Err(DialError::Http("the connection ended in a chunk".into()));
        }
        if !chunk_line(reader)?.is_empty() {
            return Err(DialError::Http("a chunk longer than its size".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::TcpListener;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What a test server sends on each connection, after reading the request head.
    #[derive(Clone)]
    enum Reply {
        /// These bytes, then the end.
        Bytes(Vec<u8>),
        /// This head, then the same chunk of bytes until the reader goes away.
        Endless(Vec<u8>, Vec<u8>),
        /// These bytes one at a time, `gap` apart.
        Dribble(Vec<u8>, Duration),
        /// Nothing, ever (the connection held open).
        Silent,
    }

    fn ok(body: &str) -> Reply {
        Reply::Bytes(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/nostr+json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }

    fn redirect(status: u16, location: &str) -> Reply {
        Reply::Bytes(
            format!("HTTP/1.1 {status} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n")
                .into_bytes(),
        )
    }

    /// A loopback HTTP server answering each request as `answer` says for its path; counts
    /// connections and keeps the request heads.
    struct Server {
        addr: SocketAddr,
        hits: Arc<AtomicUsize>,
        heads: Arc<Mutex<Vec<String>>>,
    }

    impl Server {
        fn start(answer: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Self {
            Self::start_with(answer, None)
        }

        fn start_with(
            answer: impl Fn(&str) -> Reply + Send + Sync + 'static,
            tls: Option<Arc<rustls::ServerConfig>>,
        ) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let hits = Arc::new(AtomicUsize::new(0));
            let heads = Arc::new(Mutex::new(Vec::new()));
            let answer = Arc::new(answer);
            let (h, r) = (hits.clone(), heads.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    h.fetch_add(1, Ordering::SeqCst);
                    let (answer, r, tls) = (answer.clone(), r.clone(), tls.clone());
                    std::thread::spawn(move || match tls {
                        Some(config) => {
                            let conn = rustls::ServerConnection::new(config).unwrap();
                            serve_one(rustls::StreamOwned::new(conn, stream), &*answer, &r);
                        }
                        None => serve_one(stream, &*answer, &r),
                    });
                }
            });
            Self { addr, hits, heads }
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }
    }

    fn serve_one<S: Read + Write>(
        mut stream: S,
        answer: &(dyn Fn(&str) -> Reply + Send + Sync),
        heads: &Mutex<Vec<String>>,
    ) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        heads.lock().unwrap().push(head);
        match answer(&path) {
            Reply::Bytes(b) => {
                let _ = stream.write_all(&b);
                let _ = stream.flush();
            }
            Reply::Endless(head, chunk) => {
                let _ = stream.write_all(&head);
                while stream.write_all(&chunk).is_ok() {}
            }
            Reply::Dribble(bytes, gap) => {
                for b in bytes {
                    if stream
                        .write_all(&[b])
                        .and_then(|()| stream.flush())
                        .is_err()
                    {
                        return;
                    }
                    std::thread::sleep(gap);
                }
            }
            Reply::Silent => std::thread::sleep(Duration::from_secs(30)),
        }
    }

    /// Names resolved from a table, every question kept; a name may have a list of answers, one
    /// per question (the last repeated), as a rebinding DNS server gives them.
    #[derive(Default)]
    struct Names {
        table: BTreeMap<String, Vec<Vec<IpAddr>>>,
        asked: Mutex<Vec<String>>,
    }

    impl Names {
        fn with(mut self, name: &str, answers: &[&[&str]]) -> Self {
            let answers = answers
                .iter()
                .map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect())
                .collect();
            self.table.insert(name.to_string(), answers);
            self
        }
    }

    impl Resolve for Names {
        fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>> {
            let mut asked = self.asked.lock().unwrap();
            let n = asked.iter().filter(|h| *h == host).count();
            asked.push(host.to_string());
            let answers = self
                .table
                .get(host)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"))?;
            Ok(answers[n.min(answers.len() - 1)].clone())
        }
    }

    /// Connects as the kernel would, except that addresses in `routes` are carried to a
    /// loopback server (a public address standing for a server this test runs); every address
    /// asked for is kept.
    #[derive(Default)]
    struct Routes {
        routes: BTreeMap<SocketAddr, SocketAddr>,
        asked: Mutex<Vec<SocketAddr>>,
    }

    impl Routes {
        fn with(mut self, public: &str, to: SocketAddr) -> Self {
            self.routes.insert(public.parse().unwrap(), to);
            self
        }
    }

    impl Connect for Routes {
        fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
            self.asked.lock().unwrap().push(addr);
            let to = self.routes.get(&addr).copied().unwrap_or(addr);
            TcpStream::connect_timeout(&to, timeout)
        }
    }

    fn dialer(allow: bool, names: &Arc<Names>, routes: &Arc<Routes>) -> Dialer {
        let mut d = Dialer::new(allow, crate::ws::WsConfig::new(1 << 20).tls);
        d.resolver = names.clone();
        d.connector = routes.clone();
        d
    }

    fn plain(allow: bool) -> (Dialer, Arc<Names>, Arc<Routes>) {
        let names = Arc::new(Names::default());
        let routes = Arc::new(Routes::default());
        (dialer(allow, &names, &routes), names, routes)
    }

    fn asked(routes: &Routes) -> Vec<SocketAddr> {
        routes.asked.lock().unwrap().clone()
    }

    const DOC: &str = r#"{"supported_nips":[1,11,42,77]}"#;

    #[test]
    fn the_document_is_asked_for_as_nip11_at_the_http_form_of_the_relay_url() {
        let server = Server::start(|_| ok(DOC));
        let (d, _, _) = plain(true);
        let url = format!("ws://{}/relay?x=1#frag", server.addr);
        let info = d.fetch_info(&url).unwrap();
        assert_eq!(info.body, DOC);
        assert_eq!(info.url, server.url("/relay?x=1"));
        let head = server.heads.lock().unwrap()[0].clone();
        assert!(head.starts_with("GET /relay?x=1 HTTP/1.1\r\n"), "{head}");
        assert!(
            head.contains("\r\naccept: application/nostr+json\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\nhost: {}\r\n", server.addr)),
            "{head}"
        );
        assert_eq!(
            info_url("wss://relay.example.com").unwrap(),
            "https://relay.example.com/"
        );
        assert_eq!(
            info_url("ws://r.example:81/a").unwrap(),
            "http://r.example:81/a"
        );
        assert_eq!(
            info_url("wss://r.example:443/").unwrap(),
            "https://r.example/"
        );
    }

    #[test]
    fn a_loopback_literal_is_refused_before_any_connection_unless_private_networks_are_allowed() {
        let server = Server::start(|_| ok(DOC));
        let (d, _, routes) = plain(false);
        for url in [
            format!("ws://{}/", server.addr),
            format!("ws://[::ffff:127.0.0.1]:{}/", server.addr.port()),
            format!("ws://2130706433:{}/", server.addr.port()),
        ] {
            let err = d.fetch_info(&url).unwrap_err();
            assert!(matches!(err, DialError::RefusedUrl(_)), "{url}: {err}");
            assert!(err.is_refused());
        }
        assert_eq!(server.hits(), 0);
        assert!(asked(&routes).is_empty());
        let (d, _, _) = plain(true);
        assert_eq!(d.fetch_info(&server.url("/")).unwrap().body, DOC);
        assert_eq!(server.hits(), 1);
    }

    #[test]
    fn a_redirect_to_a_private_address_is_refused_unless_private_networks_are_allowed() {
        let inner = Server::start(|_| ok(DOC));
        let to_loopback = inner.url("/doc");
        let outer = Server::start(move |_| redirect(302, &to_loopback));
        // 8.8.8.8 stands for a public relay; the test routes it to the outer server.
        let names = Arc::new(
            Names::default()
                .with("peer.example", &[&["8.8.8.8"]])
                .with("lan.example", &[&["192.168.1.20"]]),
        );
        let routes = Arc::new(Routes::default().with("8.8.8.8:80", outer.addr));
        let d = dialer(false, &names, &routes);
        let err = d.fetch_info("ws://peer.example/").unwrap_err();
        assert!(matches!(err, DialError::RefusedUrl(_)), "{err}");
        assert_eq!((outer.hits(), inner.hits()), (1, 0));
        assert_eq!(asked(&routes), vec!["8.8.8.8:80".parse().unwrap()]);

        // To a name that resolves to a private address: refused after resolving, unconnected.
        let lan = Server::start(|_| redirect(301, "http://lan.example/"));
        let routes = Arc::new(Routes::default().with("8.8.8.8:80", lan.addr));
        let d = dialer(false, &names, &routes);
        let err = d.fetch_info("ws://peer.example/").unwrap_err();
        assert!(
            matches!(&err, DialError::Refused { host, .. } if host == "lan.example"),
            "{err}"
        );
        assert_eq!(asked(&routes).len(), 1);

        // With private networks allowed the same redirect is followed.
        let routes = Arc::new(Routes::default().with("8.8.8.8:80", outer.addr));
        let d = dialer(true, &names, &routes);
        let info = d.fetch_info("ws://peer.example/").unwrap();
        assert_eq!((info.body.as_str(), info.url), (DOC, inner.url("/doc")));
        assert_eq!(inner.hits(), 1);
    }

    #[test]
    fn a_name_resolving_to_any_private_address_is_refused_and_never_connected() {
        let names = Arc::new(
            Names::default()
                .with("evil.example", &[&["10.0.0.7"]])
                .with("mixed.example", &[&["8.8.8.8", "127.0.0.1"]])
                .with("v6.example", &[&["2606:4700::1", "fd00::1"]])
                .with("mapped.example", &[&["::ffff:169.254.169.254"]])
                .with("empty.example", &[&[]]),
        );
        let routes = Arc::new(Routes::default());
        let d = dialer(false, &names, &routes);
        for name in ["evil", "mixed", "v6", "mapped"] {
            let url = format!("wss://{name}.example/");
            let err = d.fetch_info(&url).unwrap_err();
            assert!(matches!(err, DialError::Refused { .. }), "{url}: {err}");
            let err = d.ws_target(ConnId(1), &url).unwrap_err();
            assert!(matches!(err, DialError::Refused { .. }), "{url}: {err}");
        }
        assert!(matches!(
            d.fetch_info("wss://empty.example/"),
            Err(DialError::NoAddress(_))
        ));
        assert!(matches!(
            d.fetch_info("wss://unknown.example/"),
            Err(DialError::Resolve { .. })
        ));
        assert!(matches!(
            d.fetch_info("ws://localhost:7777/"),
            Err(DialError::RefusedUrl(UrlError::Localhost))
        ));
        assert!(
            asked(&routes).is_empty(),
            "nothing refused was connected to"
        );
    }

    #[test]
    fn each_hop_is_resolved_once_and_connected_to_exactly_the_address_checked() {
        // A rebinding name: public for the first question, loopback for the next.
        let server = Server::start(|path| match path {
            "/" => redirect(307, "/again"),
            _ => ok(DOC),
        });
        let names =
            Arc::new(Names::default().with("rebind.example", &[&["8.8.8.8"], &["127.0.0.1"]]));
        let routes = Arc::new(Routes::default().with("8.8.8.8:80", server.addr));
        let d = dialer(false, &names, &routes);
        let err = d.fetch_info("ws://rebind.example/").unwrap_err();
        // The first hop connected to the public answer it checked; the redirect's hop asked
        // again, got loopback, and was refused before connecting.
        assert!(matches!(err, DialError::Refused { .. }), "{err}");
        assert_eq!(asked(&routes), vec!["8.8.8.8:80".parse().unwrap()]);
        assert_eq!(names.asked.lock().unwrap().len(), 2);
        assert_eq!(server.hits(), 1);

        // The WebSocket target carries the address checked; the hooks dial that, unresolved.
        let names =
            Arc::new(Names::default().with("rebind.example", &[&["8.8.8.8"], &["127.0.0.1"]]));
        let d = dialer(false, &names, &routes);
        let target = d
            .ws_target(ConnId(4), "wss://rebind.example:4433/")
            .unwrap();
        assert_eq!(target.addr(), "8.8.8.8:4433".parse().unwrap());
        assert_eq!(
            (target.conn(), target.url()),
            (ConnId(4), "wss://rebind.example:4433/")
        );
        struct Nobody;
        impl weft_proto::core::Machine for Nobody {
            type Input = ();
            type Output = ();
            fn handle(&mut self, _: weft_proto::core::Timestamp, (): ()) {}
            fn poll(&mut self) -> Option<()> {
                None
            }
            fn poll_timeout(&self) -> Option<weft_proto::core::Wakeup> {
                None
            }
            fn handle_timeout(&mut self, _: weft_proto::core::Timestamp) {}
        }
        impl WsMachine for Nobody {
            type Target = PeerDial;
            type App = ();
            fn upgrade(
                &mut self,
                _: weft_proto::core::Timestamp,
                _: ConnId,
                _: &crate::host::Peer,
                _: &crate::ws::Request,
            ) -> Result<(), crate::ws::Refusal> {
                Ok(())
            }
            fn message(&mut self, _: ConnId, _: crate::ws::Frame) -> Option<()> {
                None
            }
            fn closed(&mut self, _: ConnId) -> Option<()> {
                None
            }
            fn dialled(&mut self, _: ConnId, _: PeerDial) -> Option<()> {
                None
            }
            fn dial_failed(&mut self, _: PeerDial) -> Option<()> {
                None
            }
            fn effect(&mut self, (): ()) -> Option<crate::ws::WsEffect<PeerDial, ()>> {
                None
            }
        }
        let mut hooks = PeerHooks(|()| {});
        assert_eq!(
            <PeerHooks<_> as Hooks<Ws<Nobody>>>::resolve(&mut hooks, &target),
            Some(Endpoint::Tcp("8.8.8.8:4433".parse().unwrap()))
        );
        assert_eq!(
            names.asked.lock().unwrap().len(),
            1,
            "the hooks resolve nothing"
        );
    }

    #[test]
    fn the_systems_own_name_for_this_host_is_refused_when_it_resolves_to_a_private_address() {
        let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
            eprintln!("SKIP: no /proc/sys/kernel/hostname here");
            return;
        };
        let name = name.trim().to_string();
        let Ok(ips) = SystemResolver.resolve(&name) else {
            eprintln!("SKIP: this host's name {name:?} does not resolve here");
            return;
        };
        if ips.is_empty() || ips.iter().all(|ip| address::check(*ip, false).is_ok()) {
            eprintln!("SKIP: this host's name {name:?} resolves to no private address");
            return;
        }
        let mut d = Dialer::new(false, crate::ws::WsConfig::new(1 << 20).tls);
        let routes = Arc::new(Routes::default());
        d.connector = routes.clone();
        let err = d.fetch_info(&format!("ws://{name}:9/")).unwrap_err();
        assert!(matches!(err, DialError::Refused { .. }), "{err}");
        assert!(asked(&routes).is_empty());
    }

    #[test]
    fn a_body_past_the_bound_is_cut_however_it_is_framed() {
        let head = |extra: &str| format!("HTTP/1.1 200 OK\r\n{extra}\r\n").into_bytes();
        let server = Server::start(move |path| match path {
            "/claimed" => Reply::Bytes(head("content-length: 99999999999\r\n")),
            "/endless" => Reply::Endless(head(""), vec![b'x'; 64 * 1024]),
            "/chunks" => Reply::Endless(
                head("transfer-encoding: chunked\r\n"),
                b"4000\r\n"
                    .iter()
                    .copied()
                    .chain([b'y'; 0x4000])
                    .chain(*b"\r\n")
                    .collect(),
            ),
            "/bigchunk" => Reply::Bytes(
                head("transfer-encoding: chunked\r\n")
                    .into_iter()
                    .chain(*b"ffffffffffff\r\n")
                    .collect(),
            ),
            "/exact" => ok(&"z".repeat(1000)),
            "/over" => ok(&"z".repeat(1001)),
            "/exactchunks" => Reply::Bytes(
                head("transfer-encoding: chunked\r\n")
                    .into_iter()
                    .chain(
                        format!(
                            "3e8;ext=1\r\n{}\r\n0\r\ntrailer: x\r\n\r\n",
                            "c".repeat(1000)
                        )
                        .into_bytes(),
                    )
                    .collect(),
            ),
            _ => Reply::Bytes(head("")),
        });
        let (mut d, _, _) = plain(true);
        let started = Instant::now();
        for path in ["/claimed", "/endless", "/chunks", "/bigchunk"] {
            let err = d.fetch_info(&server.url(path)).unwrap_err();
            assert_eq!(
                err,
                DialError::TooLarge {
                    limit: MAX_INFO_BYTES
                },
                "{path}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "cut as soon as seen"
        );
        d.max_body_bytes = 1000;
        assert_eq!(
            d.fetch_info(&server.url("/exact")).unwrap().body.len(),
            1000
        );
        assert_eq!(
            d.fetch_info(&server.url("/exactchunks")).unwrap().body,
            "c".repeat(1000)
        );
        assert_eq!(
            d.fetch_info(&server.url("/over")).unwrap_err(),
            DialError::TooLarge { limit: 1000 }
        );
    }

    #[test]
    fn a_head_past_the_bound_or_a_framing_that_reads_two_ways_is_refused() {
        let server = Server::start(|path| {
            match path {
            "/longhead" => Reply::Endless(b"HTTP/1.1 200 OK\r\n".to_vec(), b"x-filler: aaaaaaaaaaaaaaaa\r\n".to_vec()),
            "/longline" => Reply::Endless(b"HTTP/1.1 200 OK\r\nx: ".to_vec(), vec![b'a'; 4096]),
            "/manyheaders" => Reply::Bytes(
                std::iter::once("HTTP/1.1 200 OK\r\n".to_string())
                    .chain((0..100).map(|i| format!("x-{i}: 1\r\n")))
                    .chain(["\r\n".to_string()])
                    .collect::<String>()
                    .into_bytes(),
            ),
            "/twolengths" => Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}".to_vec()),
            "/lengthandchunked" => Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n".to_vec()),
            "/gzip" => Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}".to_vec()),
            "/short" => Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n{}".to_vec()),
            "/binary" => Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n\xff\xfe".to_vec()),
            "/notfound" => Reply::Bytes(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec()),
            "/nowhere" => Reply::Bytes(b"HTTP/1.1 302 Found\r\ncontent-length: 0\r\n\r\n".to_vec()),
            "/garbage" => Reply::Bytes(b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()),
            _ => Reply::Bytes(Vec::new()),
        }
        });
        let (d, _, _) = plain(true);
        let fetch = |path: &str| d.fetch_info(&server.url(path)).unwrap_err();
        assert_eq!(fetch("/longhead"), DialError::HeadTooLarge);
        assert_eq!(fetch("/longline"), DialError::HeadTooLarge);
        assert_eq!(fetch("/manyheaders"), DialError::HeadTooLarge);
        assert_eq!(fetch("/notfound"), DialError::Status(404));
        for path in [
            "/twolengths",
            "/lengthandchunked",
            "/gzip",
            "/short",
            "/binary",
            "/nowhere",
            "/garbage",
            "/empty",
        ] {
            assert!(
                matches!(fetch(path), DialError::Http(_)),
                "{path}: {}",
                fetch(path)
            );
        }
    }

    #[test]
    fn a_redirect_loop_or_chain_is_stopped() {
        let server = Server::start(|path| match path {
            "/a" => redirect(301, "/b"),
            "/b" => redirect(302, "a"),
            p if p.starts_with("/hop") => {
                let n: usize = p[4..].parse().unwrap();
                redirect(308, &format!("/hop{}", n + 1))
            }
            "/to-ftp" => redirect(302, "ftp://example.com/"),
            "/to-ws" => redirect(302, "ws://example.com/"),
            _ => ok(DOC),
        });
        let (d, _, _) = plain(true);
        assert_eq!(
            d.fetch_info(&server.url("/a")).unwrap_err(),
            DialError::RedirectLoop(server.url("/a"))
        );
        assert_eq!(server.hits(), 2);
        assert_eq!(
            d.fetch_info(&server.url("/hop0")).unwrap_err(),
            DialError::TooManyRedirects(MAX_REDIRECTS)
        );
        assert_eq!(server.hits(), 2 + MAX_REDIRECTS + 1);
        for path in ["/to-ftp", "/to-ws"] {
            assert!(
                matches!(d.fetch_info(&server.url(path)), Err(DialError::BadUrl(_))),
                "{path}"
            );
        }
    }

    #[test]
    fn a_slow_or_silent_peer_meets_the_fetch_deadline() {
        let server = Server::start(|path| match path {
            "/slow" => Reply::Dribble(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{DOC}",
                    DOC.len()
                )
                .into_bytes(),
                Duration::from_millis(100),
            ),
            _ => Reply::Silent,
        });
        let (mut d, _, _) = plain(true);
        d.fetch_timeout = Duration::from_millis(800);
        for path in ["/slow", "/silent"] {
            let started = Instant::now();
            assert_eq!(
                d.fetch_info(&server.url(path)).unwrap_err(),
                DialError::Timeout,
                "{path}"
            );
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(700) && took < Duration::from_secs(3),
                "{path}: {took:?}"
            );
        }
    }

    #[test]
    fn urls_that_read_two_ways_are_refused() {
        let (d, _, routes) = plain(true);
        for url in [
            "ws://user@127.0.0.1:1/",
            "ws://127.0.0.1:1\\@8.8.8.8/",
            "ws://127.0.0.1:1 /",
            "ws://127.0.0.1:99999/",
            "ws://127.0.0.1:0/",
            "ws://127.0.0.1:x/",
            "ftp://127.0.0.1/",
            "127.0.0.1:7777",
            "ws://relay.exämple/",
        ] {
            assert!(
                matches!(d.fetch_info(url), Err(DialError::BadUrl(_))),
                "{url}"
            );
            assert!(
                matches!(d.ws_target(ConnId(1), url), Err(DialError::BadUrl(_))),
                "{url}"
            );
        }
        assert!(matches!(
            d.ws_target(ConnId(1), "http://127.0.0.1:80/"),
            Err(DialError::BadUrl(_))
        ));
        assert!(asked(&routes).is_empty());
        let target = d.ws_target(ConnId(9), "ws://[::1]:7777/").unwrap();
        assert_eq!(target.addr(), "[::1]:7777".parse().unwrap());
        let (d, _, _) = plain(false);
        assert!(
            d.ws_target(ConnId(9), "ws://[::1]:7777/")
                .unwrap_err()
                .is_refused()
        );
    }

    /// A test CA and a certificate for `host` from it: the server's configuration, and a
    /// client configuration trusting the CA.
    fn tls_pair(host: &str) -> (crate::tls::TlsServer, Arc<rustls::ClientConfig>, String) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let server =
            crate::tls::TlsServer::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
                .unwrap();
        let client = crate::tls::TlsClient::from_pem(issuer.pem().as_bytes()).unwrap();
        let pem = issuer.pem();
        (server, client.config(), pem)
    }

    #[test]
    fn https_is_verified_against_the_url_host_and_never_downgraded() {
        let (server_tls, client_tls, _) = tls_pair("relay.test");
        let plain_server = Server::start(|_| ok(DOC));
        let downgrade = format!("http://relay.test:{}/", plain_server.addr.port());
        let server = Server::start_with(
            move |path| match path {
                "/down" => redirect(302, &downgrade),
                _ => ok(DOC),
            },
            Some(server_tls.config()),
        );
        let names = Arc::new(
            Names::default()
                .with("relay.test", &[&["127.0.0.1"]])
                .with("other.test", &[&["127.0.0.1"]]),
        );
        let routes = Arc::new(Routes::default());
        let mut d = dialer(true, &names, &routes);
        d.tls = client_tls;
        let port = server.addr.port();
        let info = d.fetch_info(&format!("wss://relay.test:{port}/")).unwrap();
        assert_eq!(info.body, DOC);
        assert_eq!(info.url, format!("https://relay.test:{port}/"));
        let err = d
            .fetch_info(&format!("wss://other.test:{port}/"))
            .unwrap_err();
        assert!(matches!(err, DialError::Tls(_)), "{err}");
        let err = d
            .fetch_info(&format!("wss://relay.test:{port}/down"))
            .unwrap_err();
        assert_eq!(
            err,
            DialError::Downgrade(format!("http://relay.test:{}/", plain_server.addr.port()))
        );
        assert_eq!(plain_server.hits(), 0);
    }

    /// A machine that dials one [`PeerDial`] and delivers every text frame it gets (and
    /// `"failed"` for a failed dial).
    struct Probe {
        dial: Option<PeerDial>,
        out: std::collections::VecDeque<crate::ws::WsEffect<PeerDial, String>>,
    }

    impl weft_proto::core::Machine for Probe {
        type Input = String;
        type Output = crate::ws::WsEffect<PeerDial, String>;
        fn handle(&mut self, _: weft_proto::core::Timestamp, text: String) {
            self.out.push_back(crate::ws::WsEffect::Deliver(text));
        }
        fn poll(&mut self) -> Option<Self::Output> {
            self.out.pop_front()
        }
        fn poll_timeout(&self) -> Option<weft_proto::core::Wakeup> {
            self.dial.as_ref().map(|_| {
                weft_proto::core::Wakeup::new(weft_proto::core::Timestamp::from_millis(0), "dial")
            })
        }
        fn handle_timeout(&mut self, _: weft_proto::core::Timestamp) {
            if let Some(d) = self.dial.take() {
                self.out.push_back(crate::ws::WsEffect::Dial(d));
            }
        }
    }

    impl WsMachine for Probe {
        type Target = PeerDial;
        type App = String;
        fn upgrade(
            &mut self,
            _: weft_proto::core::Timestamp,
            _: ConnId,
            _: &crate::host::Peer,
            _: &crate::ws::Request,
        ) -> Result<String, crate::ws::Refusal> {
            Err(crate::ws::Refusal {
                status: 404,
                reason: String::new(),
            })
        }
        fn message(&mut self, _: ConnId, frame: crate::ws::Frame) -> Option<String> {
            match frame {
                crate::ws::Frame::Text(t) => Some(t),
                _ => None,
            }
        }
        fn closed(&mut self, _: ConnId) -> Option<String> {
            Some("closed".into())
        }
        fn dialled(&mut self, _: ConnId, _: PeerDial) -> Option<String> {
            None
        }
        fn dial_failed(&mut self, _: PeerDial) -> Option<String> {
            Some("failed".into())
        }
        fn effect(&mut self, o: Self::Output) -> Option<crate::ws::WsEffect<PeerDial, String>> {
            Some(o)
        }
    }

    /// Runs a probe dialling `target` until its first delivery.
    fn probe(target: PeerDial, config: crate::ws::WsConfig) -> String {
        let (tx, rx) = ::smol::channel::unbounded();
        let machine = Probe {
            dial: Some(target),
            out: Default::default(),
        };
        let mut host = crate::host::Host::new(
            Ws::new(machine, config),
            PeerHooks(move |t: String| {
                let _ = tx.try_send(t);
            }),
        );
        ::smol::block_on(::smol::future::or(
            async {
                let _ = crate::smol::run(&mut host, Vec::new()).await;
                "host ended".to_string()
            },
            ::smol::future::or(async { rx.recv().await.unwrap_or_default() }, async {
                ::smol::Timer::after(Duration::from_secs(20)).await;
                "timed out".to_string()
            }),
        ))
    }

    /// A `weft nostr serve` relay in this process; stopped when the sender drops.
    fn relay(tls: Option<crate::tls::TlsServer>) -> (SocketAddr, ::smol::channel::Sender<()>) {
        use crate::nostr::serve::{ServeOptions, serve};
        let dir = std::env::temp_dir().join(format!(
            "weft-peer-dial-{}-{}",
            std::process::id(),
            tls.is_some()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut options = ServeOptions::new("127.0.0.1:0".parse().unwrap(), dir);
        options.tls = tls;
        let (stop_tx, stop_rx) = ::smol::channel::bounded(1);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            serve(options, stop_rx, |addr| ready_tx.send(addr).unwrap()).unwrap();
        });
        (
            ready_rx.recv_timeout(Duration::from_secs(20)).unwrap(),
            stop_tx,
        )
    }

    #[test]
    fn a_websocket_dial_reaches_a_relay_over_ws_and_wss_at_the_checked_address_only() {
        let (addr, _stop) = relay(None);
        let (d, _, _) = plain(true);
        let target = d.ws_target(ConnId(1), &format!("ws://{addr}/")).unwrap();
        let first = probe(target, crate::ws::WsConfig::new(1 << 20));
        assert!(
            first.starts_with("[\"AUTH\","),
            "the relay's challenge: {first}"
        );

        let (server_tls, _, ca) = tls_pair("relay.test");
        let (tls_addr, _stop_tls) = relay(Some(server_tls));
        let ca_file =
            std::env::temp_dir().join(format!("weft-peer-dial-ca-{}.pem", std::process::id()));
        std::fs::write(&ca_file, ca).unwrap();
        let config = crate::ws::WsConfig::new(1 << 20)
            .with_ca_file(&ca_file)
            .unwrap();
        let names = Arc::new(Names::default().with("relay.test", &[&["127.0.0.1"]]));
        let routes = Arc::new(Routes::default());
        let d = dialer(true, &names, &routes);
        let url = format!("wss://relay.test:{}/", tls_addr.port());
        let target = d.ws_target(ConnId(2), &url).unwrap();
        let first = probe(target, config.clone());
        assert!(first.starts_with("[\"AUTH\","), "over wss: {first}");
        // The TLS name is the URL's: a certificate for another name fails the dial.
        let names = Arc::new(Names::default().with("wrong.test", &[&["127.0.0.1"]]));
        let d = dialer(true, &names, &routes);
        let target = d
            .ws_target(ConnId(3), &format!("wss://wrong.test:{}/", tls_addr.port()))
            .unwrap();
        assert_eq!(probe(target, config), "failed");
    }
}
