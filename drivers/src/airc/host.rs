//! The AIRC realm server as a [`HostMachine`]: the one place its `Input`/`Output` meet the
//! protocol-neutral host vocabulary, so every runtime adapter can drive it.
//!
//! AIRC §5: the namespaces a client-face connection may act for come from the transport, never
//! from the connection: a Unix peer's uid (`SO_PEERCRED`), or a loopback TCP peer's on a
//! listener registered with [`Realm::with_tcp_face`] (from `/proc/net/tcp`, [`crate::peer_uid`]),
//! looked up in the operator's table; a uid the table does not name, or any other peer, gets none.
//! A connection from an administrator's uid (§5: root, the account the server runs as, and the
//! configured ones, [`Realm::with_administrators`]) is also marked [`Input::Administrator`].
//!
//! Discovery (§8.1–§8.2): with a [`Dns`] ([`Realm::with_dns`]) the machine's DNS questions go to
//! the resolver thread, whose answers come back as [`RealmInput`]s through the host's command
//! channel ([`crate::host::commands`]), which wakes the loop: nothing polls, and nothing waits on
//! DNS inside the loop. Without one every question is answered "no records" at once. A dial goes
//! to the endpoint discovery chose: an IP literal as is; a host name is looked up by the same
//! thread first ([`RealmInput::Located`], at most [`MAX_LOCATING`] at once), then dialled over the
//! transport a [`Dialer`] picks for it (TLS, or what a static entry names). Connections on a listener registered with [`Realm::with_peer_face`]
//! are the peer face (§8.4): other realms' servers, with no namespaces.
//!
//! §3.1's WebSocket connection: a listener registered with [`Realm::with_ws_face`] is the client
//! face over WebSocket ([`ServerSocket`] does the upgrade and the frames). Each text message is
//! one AIRC frame, with or without its `\n` (§3.2's newline ends a frame on a byte stream; a
//! message already delimits one); each frame the server writes goes out as one text message,
//! without the newline. A binary message is no AIRC frame: the socket is closed with 1003. The
//! peer's identity is taken as on loopback TCP: the uid owning its socket.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};

use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::discovery::Endpoint;
use weft_proto::airc::server::{Face, Input, Output, Server, Source};
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

use super::dns::Dns;
use super::peer::Dialer;
use super::store::Store;
use crate::host::{self, Effect, Hooks, HostMachine, Peer, Remote};
use crate::ws::{self, BrowserGuard, ServerSocket};

/// A realm [`Server`] with the operator's uid → namespaces table (§5), ready for a host.
pub struct Realm<R> {
    /// The machine.
    pub server: Server<R>,
    namespaces: BTreeMap<u32, Vec<Namespace>>,
    /// Listener index → its local address, for the TCP client faces whose peers' uids are looked
    /// up; one entry per listener, so bounded by what the operator configured.
    tcp_faces: BTreeMap<usize, SocketAddr>,
    /// Administrators' uids (§5); bounded by what the operator configured, plus two.
    administrators: BTreeSet<u32>,
    /// The connection [`HostMachine::opened`] just found an administrator's: the host hands its
    /// `Opened` to [`Machine::handle`] next, which follows it with [`Input::Administrator`].
    admin_opened: Option<ConnId>,
    /// Listener indexes of the peer face (§3.1); every other listener is the client face. One
    /// per listener, so bounded likewise.
    peer_faces: BTreeSet<usize>,
    /// The resolver, when DNS is on.
    dns: Option<Dns>,
    /// Dials whose host name is being looked up, by lookup token; at most [`MAX_LOCATING`].
    locating: BTreeMap<u64, (Authority, Endpoint)>,
    /// The next lookup token.
    next_token: u64,
    /// Dials whose host name was found, waiting to be polled out; each came out of `locating`,
    /// so it is bounded likewise.
    located: VecDeque<(Authority, Endpoint, IpAddr)>,
    /// The address of the `Connect` [`Machine::poll`] just returned, taken by
    /// [`HostMachine::effect`], which the host calls next.
    polled_addr: Option<IpAddr>,
    /// The latest time the machine was handed, for inputs fed from `poll`.
    now: Timestamp,
    /// Listener indexes of the client face over WebSocket (each also in `tcp_faces`, for the
    /// uid), with the upgrade rules a face a browser can reach keeps; one per listener.
    ws_faces: BTreeMap<usize, BrowserGuard>,
    /// The WebSocket state of each open connection on a WebSocket face; at most one entry per
    /// connection the host holds open, removed when it reports the close.
    ws_conns: BTreeMap<ConnId, WsConn>,
    /// Outputs the WebSocket layer made (its handshake answer, pongs, close frames, closes),
    /// sent before the server's next output; each is answered bytes that arrived, so bounded by
    /// them.
    ws_out: VecDeque<Output>,
}

/// A client-face connection over WebSocket.
struct WsConn {
    socket: ServerSocket,
    /// Bytes the server wrote that do not yet end a frame (§3.2: a frame ends at `\n`); at most
    /// one frame, which the server bounds.
    partial: Vec<u8>,
}

/// The WebSocket close code for a message that is not text (RFC 6455 §7.4.1: unsupported data):
/// AIRC frames are text (§3.1).
pub const WS_CLOSE_NOT_TEXT: u16 = 1003;

/// The largest WebSocket message the client face takes: one AIRC frame (§3.2, newline included,
/// which a message may carry).
pub const MAX_WS_MESSAGE_BYTES: usize = weft_proto::airc::framing::MAX_FRAME_BYTES;

/// The most dials whose host name is looked up at once (§8.1 steps 3–5 end in a name to dial);
/// a dial beyond it fails at once, and the machine retries on its own schedule, as after any
/// failed dial. Far above the realms a server links to at the same moment.
pub const MAX_LOCATING: usize = 256;

/// What a realm's machine takes: the server's inputs, and the answers of lookups it started
/// itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum RealmInput {
    /// An input for the server machine (from the transport, the store, or a DNS answer).
    Server(Input),
    /// A dial's host name looked up off the loop: an address, or `None` when it has none.
    Located {
        /// The token the realm gave the lookup.
        token: u64,
        /// The address found.
        ip: Option<IpAddr>,
    },
    /// Bytes that arrived on a WebSocket client-face connection, before the WebSocket layer
    /// made messages of them.
    WebSocket {
        /// The connection.
        conn: ConnId,
        /// What the transport read.
        bytes: Vec<u8>,
    },
}

impl From<Input> for RealmInput {
    fn from(input: Input) -> Self {
        Self::Server(input)
    }
}

impl<R> Realm<R> {
    /// `server`, granting each Unix peer uid in `namespaces` those namespaces.
    pub fn new(server: Server<R>, namespaces: BTreeMap<u32, Vec<Namespace>>) -> Self {
        Self {
            server,
            namespaces,
            tcp_faces: BTreeMap::new(),
            administrators: BTreeSet::new(),
            admin_opened: None,
            peer_faces: BTreeSet::new(),
            dns: None,
            locating: BTreeMap::new(),
            next_token: 0,
            located: VecDeque::new(),
            polled_addr: None,
            now: Timestamp::ZERO,
            ws_faces: BTreeMap::new(),
            ws_conns: BTreeMap::new(),
            ws_out: VecDeque::new(),
        }
    }

    /// Marks connections from administrators as such (§5): root, the account the server runs
    /// as, and each uid in `configured`.
    pub fn with_administrators(mut self, configured: impl IntoIterator<Item = u32>) -> Self {
        let own = rustix::process::geteuid().as_raw();
        self.administrators.extend([0, own]);
        self.administrators.extend(configured);
        self
    }

    /// Answers the machine's DNS questions, and looks up the host names it dials, with `dns`
    /// (§8.1–§8.2), whose answers come back as [`RealmInput`]s through the host's command
    /// channel.
    pub fn with_dns(mut self, dns: Dns) -> Self {
        self.dns = Some(dns);
        self
    }

    /// Makes listener number `listener` a peer face (§8.4): what arrives there is another
    /// realm's server, which the transport proves no namespaces for.
    pub fn with_peer_face(mut self, listener: usize) -> Self {
        self.peer_faces.insert(listener);
        self
    }

    /// Also takes the identity of loopback TCP peers on listener number `listener` (its index in
    /// the list handed to the adapter), bound at `local`: the uid owning the peer's socket.
    pub fn with_tcp_face(mut self, listener: usize, local: SocketAddr) -> Self {
        self.tcp_faces.insert(listener, local);
        self
    }

    /// Makes listener number `listener`, a loopback TCP listener bound at `local`, the client
    /// face over WebSocket (§3.1); its peers' uids are taken as on [`Realm::with_tcp_face`]. A
    /// browser can reach it from any page, so it upgrades only requests without an `Origin` or
    /// from one of `origins`, naming `local` as their `Host` ([`BrowserGuard`]).
    pub fn with_ws_face(
        mut self,
        listener: usize,
        local: SocketAddr,
        origins: Vec<String>,
    ) -> Self {
        self.ws_faces
            .insert(listener, BrowserGuard::new(local, origins));
        self.with_tcp_face(listener, local)
    }

    /// Who the transport proves holds `peer`'s end (§5).
    fn caller(&self, peer: &Peer) -> Caller {
        match peer.remote {
            Remote::Unix { uid: Some(uid) } => Caller::Uid(uid),
            Remote::Unix { uid: None } => Caller::Unproven,
            Remote::Tcp(remote) => match self.tcp_faces.get(&peer.listener) {
                Some(local) => crate::peer_uid::loopback_tcp_owner(remote, *local)
                    .map_or(Caller::Unproven, Caller::Uid),
                None => Caller::Anyone,
            },
            Remote::Quic(_) => Caller::Anyone,
        }
    }
}

/// What the transport proves of a connection's far end (AIRC §5).
enum Caller {
    /// A local account: a Unix peer's credentials, or the uid holding a live loopback socket.
    Uid(u32),
    /// A face that identifies its peers, which could not identify this one: refused.
    Unproven,
    /// A face that identifies nobody (a peer face, a client face not on loopback): no
    /// namespaces.
    Anyone,
}

impl<R: CryptoRng> Realm<R> {
    /// Looks up the host name of a dial off the loop, or fails the dial when it cannot.
    fn locate(&mut self, authority: Authority, endpoint: Endpoint) {
        match &self.dns {
            Some(dns)
                if self.locating.len() < MAX_LOCATING
                    && dns.locate(self.next_token, endpoint.host.clone()) =>
            {
                self.locating.insert(self.next_token, (authority, endpoint));
                self.next_token += 1;
            }
            _ => self
                .server
                .handle(self.now, Input::DialFailed { authority }),
        }
    }
}

impl<R: CryptoRng> Machine for Realm<R> {
    type Input = RealmInput;
    type Output = Output;
    fn handle(&mut self, now: Timestamp, input: RealmInput) {
        self.now = now;
        let input = match input {
            RealmInput::Server(input) => input,
            RealmInput::Located { token, ip } => {
                let Some((authority, endpoint)) = self.locating.remove(&token) else {
                    return;
                };
                match ip {
                    Some(ip) => self.located.push_back((authority, endpoint, ip)),
                    None => self.server.handle(now, Input::DialFailed { authority }),
                }
                return;
            }
            RealmInput::WebSocket { conn, bytes } => return self.ws_received(now, conn, &bytes),
        };
        let admin = match &input {
            Input::Opened { conn, .. } if self.admin_opened == Some(*conn) => {
                self.admin_opened.take()
            }
            _ => None,
        };
        self.server.handle(now, input);
        if let Some(conn) = admin {
            self.server.handle(now, Input::Administrator { conn });
        }
    }
    fn poll(&mut self) -> Option<Output> {
        loop {
            if let Some(out) = self.ws_out.pop_front() {
                return Some(out);
            }
            if let Some((authority, endpoint, ip)) = self.located.pop_front() {
                self.polled_addr = Some(ip);
                return Some(Output::Connect {
                    authority,
                    endpoint,
                });
            }
            match self.server.poll()? {
                Output::Resolve { name, kind } => match &self.dns {
                    Some(dns) if dns.ask(name.clone(), kind) => {}
                    _ => {
                        let answer = weft_proto::airc::discovery::Answer::Nothing;
                        let input = Input::Resolved { name, kind, answer };
                        self.server.handle(self.now, input);
                    }
                },
                Output::Connect {
                    authority,
                    endpoint,
                } => match endpoint.host.parse::<IpAddr>() {
                    Ok(ip) => {
                        self.polled_addr = Some(ip);
                        return Some(Output::Connect {
                            authority,
                            endpoint,
                        });
                    }
                    Err(_) => self.locate(authority, endpoint),
                },
                Output::Send { conn, bytes } if self.ws_conns.contains_key(&conn) => {
                    self.ws_send(conn, &bytes);
                }
                Output::Close { conn } if self.ws_conns.contains_key(&conn) => {
                    if let Some(c) = self.ws_conns.get_mut(&conn) {
                        let bytes = c.socket.close(1000, "");
                        self.ws_out.push_back(Output::Send { conn, bytes });
                    }
                    self.ws_out.push_back(Output::Close { conn });
                }
                other => return Some(other),
            }
        }
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        self.server.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        self.server.handle_timeout(now);
    }
}

impl<R: CryptoRng> Realm<R> {
    /// Bytes on a WebSocket connection: the layer's answers go out first, each text message is
    /// one frame for the server, and an ended socket is closed and the server told.
    fn ws_received(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.ws_conns.get_mut(&conn) else {
            return;
        };
        let got = c.socket.received(bytes);
        if !got.send.is_empty() {
            self.ws_out.push_back(Output::Send {
                conn,
                bytes: got.send,
            });
        }
        let mut end = got.end;
        for message in got.messages {
            match message {
                ws::Frame::Text(text) => {
                    let mut bytes = text.into_bytes();
                    if bytes.last() != Some(&b'\n') {
                        bytes.push(b'\n');
                    }
                    self.server.handle(now, Input::Received { conn, bytes });
                }
                ws::Frame::Binary(_) => {
                    if let Some(c) = self.ws_conns.get_mut(&conn) {
                        let bytes = c.socket.close(WS_CLOSE_NOT_TEXT, "AIRC frames are text");
                        self.ws_out.push_back(Output::Send { conn, bytes });
                    }
                    end = true;
                    break;
                }
                // Answered by the layer; a liveness check of the socket, not of AIRC (§3.3).
                _ => {}
            }
        }
        if end {
            self.ws_out.push_back(Output::Close { conn });
            self.server.handle(now, Input::Closed { conn });
        }
    }

    /// Frames the server wrote to a WebSocket connection, each as one text message.
    fn ws_send(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.ws_conns.get_mut(&conn) else {
            return;
        };
        c.partial.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = c.partial.iter().position(|&b| b == b'\n') {
            let frame: Vec<u8> = c.partial.drain(..=end).collect();
            // The server writes JSON it serialized: UTF-8 always.
            let text = String::from_utf8_lossy(&frame[..end]).into_owned();
            out.extend(c.socket.send_text(text));
        }
        if c.partial.is_empty() {
            // Every frame went out whole: an idle connection keeps no buffer sized for the
            // largest frame it was once sent.
            c.partial = Vec::new();
        }
        if !out.is_empty() {
            self.ws_out.push_back(Output::Send { conn, bytes: out });
        }
    }
}

/// A peer link to dial: the realm, the endpoint discovery chose for it (AIRC §8.1), and the
/// address its host has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    /// The realm the link is for.
    pub authority: Authority,
    /// Where to connect, by the name the certificate is verified for (§8.3).
    pub endpoint: Endpoint,
    /// The address of `endpoint.host`: the IP literal itself, or what the lookup found.
    pub ip: Option<IpAddr>,
}

impl<R: CryptoRng> HostMachine for Realm<R> {
    type Target = Dial;
    /// A [`Output::Persist`] or [`Output::Forget`], as [`Store::apply`] takes them.
    type Durable = Output;
    type App = core::convert::Infallible;

    fn opened(&mut self, conn: ConnId, peer: &Peer) -> RealmInput {
        if let Some(guard) = self.ws_faces.get(&peer.listener) {
            let socket = ServerSocket::new(MAX_WS_MESSAGE_BYTES).with_guard(guard.clone());
            let partial = Vec::new();
            self.ws_conns.insert(conn, WsConn { socket, partial });
        }
        let face = if self.peer_faces.contains(&peer.listener) {
            Face::Peer
        } else {
            Face::Client
        };
        // Read now, at accept and before any of the connection's bytes reach the server: the
        // identity is that of the socket as it is connected, never a default.
        let uid = match (face, self.caller(peer)) {
            (Face::Client, Caller::Unproven) => return Input::Unidentified { conn }.into(),
            (Face::Client, Caller::Uid(uid)) => Some(uid),
            _ => None,
        };
        self.admin_opened = uid
            .filter(|uid| self.administrators.contains(uid))
            .map(|_| conn);
        let namespaces = uid
            .and_then(|uid| self.namespaces.get(&uid).cloned())
            .unwrap_or_default();
        let source = match (face, &peer.remote) {
            (Face::Client, _) => uid.map_or(Source::Unknown, Source::Uid),
            (Face::Peer, Remote::Tcp(addr) | Remote::Quic(addr)) => Source::Addr(addr.ip()),
            (Face::Peer, Remote::Unix { .. }) => Source::Unknown,
        };
        Input::Opened {
            conn,
            face,
            namespaces,
            source,
        }
        .into()
    }
    fn received(&mut self, conn: ConnId, bytes: Vec<u8>) -> RealmInput {
        if self.ws_conns.contains_key(&conn) {
            return RealmInput::WebSocket { conn, bytes };
        }
        Input::Received { conn, bytes }.into()
    }
    fn closed(&mut self, conn: ConnId) -> RealmInput {
        self.ws_conns.remove(&conn);
        Input::Closed { conn }.into()
    }
    fn dialled(&mut self, conn: ConnId, dial: Dial) -> RealmInput {
        Input::Dialled {
            conn,
            authority: dial.authority,
        }
        .into()
    }
    fn dial_failed(&mut self, dial: Dial) -> RealmInput {
        Input::DialFailed {
            authority: dial.authority,
        }
        .into()
    }
    fn effect(&mut self, output: Output) -> Effect<Dial, Output, Self::App> {
        match output {
            Output::Send { conn, bytes } => Effect::Send { conn, bytes },
            Output::Close { conn } => Effect::Close { conn },
            Output::Connect {
                authority,
                endpoint,
            } => Effect::Dial(Dial {
                authority,
                endpoint,
                ip: self.polled_addr.take(),
            }),
            o @ (Output::Persist(_) | Output::Forget(_)) => Effect::Store(o),
            _ => Effect::Unhandled,
        }
    }
}

/// A realm's durable [`Store`] as host hooks: records restored at start, persists and forgets
/// committed before the next output.
pub struct RealmHooks {
    store: Store,
    dialer: Option<Dialer>,
}

impl RealmHooks {
    /// Hooks over `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            dialer: None,
        }
    }

    /// Dials peers over the transport `dialer` picks for them (TLS unless a static entry says
    /// otherwise), verifying certificates against its trust store.
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = Some(dialer);
        self
    }
}

impl<R: CryptoRng> Hooks<Realm<R>> for RealmHooks {
    fn restore(&mut self, now: Timestamp) -> io::Result<Vec<RealmInput>> {
        Ok(self
            .store
            .load(now)?
            .into_iter()
            .map(|r| Input::Restore(r).into())
            .collect())
    }
    fn store(&mut self, batch: &[Output]) -> io::Result<()> {
        self.store.apply(batch)
    }
    /// The endpoint discovery chose (§8.1), at the address the realm found for its host; then
    /// the dialer's transport for it. Without a dialer (in-process tests), plain TCP.
    fn resolve(&mut self, dial: &Dial) -> Option<host::Endpoint> {
        let host = &dial.endpoint.host;
        let addr = SocketAddr::new(dial.ip?, dial.endpoint.port);
        match &self.dialer {
            Some(dialer) => dialer.endpoint(&dial.authority, addr, host),
            None => Some(host::Endpoint::Tcp(addr)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;
    use weft_proto::airc::frame::{Frame, Hello, PROTO, Role, Scope, Subscribe};
    use weft_proto::airc::framing::{self, FrameDecoder};
    use weft_proto::airc::server::ServerConfig;

    const ADMIN: u32 = 4242;
    const STRANGER: u32 = 4243;

    fn realm() -> Realm<chacha20::ChaCha20Rng> {
        let config = ServerConfig::new(Authority::parse("example.com").unwrap());
        let rng = chacha20::ChaCha20Rng::seed_from_u64(7);
        let server = Server::new(config, weft_proto::crypto::default_provider(), rng);
        Realm::new(server, BTreeMap::new()).with_administrators([ADMIN])
    }

    /// Opens a Unix connection from `uid`, says hello, subscribes, and returns the frames sent
    /// back on it.
    fn subscribe_as(r: &mut Realm<chacha20::ChaCha20Rng>, conn: u64, uid: u32) -> Vec<Frame> {
        let (conn, now) = (ConnId(conn), Timestamp::from_secs(1_790_380_000));
        let peer = Peer {
            listener: 0,
            remote: Remote::Unix { uid: Some(uid) },
        };
        let opened = r.opened(conn, &peer);
        r.handle(now, opened);
        let hello = Hello {
            proto: PROTO.into(),
            role: Role::Client,
            agent: None,
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        };
        let mut bytes = framing::encode(&Frame::Hello(hello));
        bytes.extend(framing::encode(&Frame::Subscribe(Subscribe::default())));
        let input = r.received(conn, bytes);
        r.handle(now, input);
        let mut decoder = FrameDecoder::new();
        while let Some(out) = r.poll() {
            if let Output::Send { conn: c, bytes } = out
                && c == conn
            {
                decoder.push(&bytes);
            }
        }
        core::iter::from_fn(|| decoder.next().map(Result::unwrap)).collect()
    }

    #[test]
    fn a_configured_administrator_uid_is_marked_and_sees_every_event() {
        let mut r = realm();
        let frames = subscribe_as(&mut r, 1, ADMIN);
        assert!(
            matches!(frames.as_slice(), [Frame::Welcome(_), Frame::Subscribed(s)] if s.scope == Scope::All),
            "{frames:?}"
        );
    }

    #[test]
    fn root_and_the_servers_own_account_are_administrators_and_others_are_not() {
        let mut r = realm();
        let own = rustix::process::geteuid().as_raw();
        for (conn, uid) in [(1, 0), (2, own)] {
            let frames = subscribe_as(&mut r, conn, uid);
            assert!(
                matches!(frames.as_slice(), [_, Frame::Subscribed(s)] if s.scope == Scope::All),
                "uid {uid}: {frames:?}"
            );
        }
        if own != STRANGER {
            // Without namespaces and not an administrator's: scoped to nothing, so forbidden.
            let frames = subscribe_as(&mut r, 3, STRANGER);
            assert!(
                matches!(frames.as_slice(), [_, Frame::Error(e)] if e.code == "forbidden"),
                "{frames:?}"
            );
        }
    }

    /// A realm whose static entry for `b.example` names a host, `peer.b.example`, that has to be
    /// looked up before it can be dialled, with a resolver nothing will answer in this test.
    fn realm_with_a_named_peer() -> (
        Realm<chacha20::ChaCha20Rng>,
        crate::host::Commands<RealmInput>,
    ) {
        let mut config = ServerConfig::new(Authority::parse("example.com").unwrap());
        config.known_namespaces = vec![Namespace::parse("me").unwrap()];
        config.static_entries = BTreeMap::from([(
            Authority::parse("b.example").unwrap(),
            vec![Endpoint::new("peer.b.example", 7000)],
        )]);
        let rng = chacha20::ChaCha20Rng::seed_from_u64(7);
        let server = Server::new(config, weft_proto::crypto::default_provider(), rng);
        let (commander, commands) = crate::host::commands().unwrap();
        // A nameserver on a port nobody serves: its answers, if any came, would go to `commands`,
        // which this test never reads; it feeds the lookups' results itself.
        let dns = Dns::start(Some("127.0.0.1:9".parse().unwrap()), commander).unwrap();
        let me = rustix::process::getuid().as_raw();
        let table = BTreeMap::from([(me, vec![Namespace::parse("me").unwrap()])]);
        (Realm::new(server, table).with_dns(dns), commands)
    }

    const NOW: Timestamp = Timestamp::from_secs(1_790_380_000);

    /// Sends a message for `b.example` from a client and returns every effect that followed.
    fn send_to_b(
        r: &mut Realm<chacha20::ChaCha20Rng>,
    ) -> Vec<Effect<Dial, Output, core::convert::Infallible>> {
        let conn = ConnId(1);
        let peer = Peer {
            listener: 0,
            remote: Remote::Unix {
                uid: Some(rustix::process::getuid().as_raw()),
            },
        };
        let opened = r.opened(conn, &peer);
        r.handle(NOW, opened);
        let hello = Hello {
            proto: PROTO.into(),
            role: Role::Client,
            agent: None,
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        };
        let msg = weft_proto::airc::frame::Msg {
            id: "0123456789abcdef0123456789abcdef".into(),
            from: "me/x".into(),
            to: "//b.example/you/y".into(),
            ts: NOW.as_millis() as f64 / 1000.0,
            body: "hi".into(),
            kind: None,
            re: None,
            ttl: None,
            via: None,
            hdr: None,
        };
        let mut bytes = framing::encode(&Frame::Hello(hello));
        bytes.extend(framing::encode(&Frame::Msg(msg)));
        let input = r.received(conn, bytes);
        r.handle(NOW, input);
        drain(r)
    }

    fn drain(
        r: &mut Realm<chacha20::ChaCha20Rng>,
    ) -> Vec<Effect<Dial, Output, core::convert::Infallible>> {
        core::iter::from_fn(|| r.poll().map(|o| r.effect(o))).collect()
    }

    fn dials(effects: &[Effect<Dial, Output, core::convert::Infallible>]) -> Vec<Dial> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Dial(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_dial_to_a_host_name_waits_for_its_lookup_off_the_loop_and_goes_to_the_address_found() {
        let (mut r, _commands) = realm_with_a_named_peer();
        let first = send_to_b(&mut r);
        assert!(
            dials(&first).is_empty(),
            "nothing dialled before the lookup: {first:?}"
        );
        assert_eq!(r.locating.len(), 1, "one lookup out");
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        r.handle(
            NOW,
            RealmInput::Located {
                token: 0,
                ip: Some(ip),
            },
        );
        let [dial] = &dials(&drain(&mut r))[..] else {
            panic!("one dial once the address is known")
        };
        assert_eq!(dial.authority.host(), "b.example");
        assert_eq!(
            dial.endpoint,
            Endpoint::new("peer.b.example", 7000),
            "verified for its name"
        );
        assert_eq!(dial.ip, Some(ip));
        // A second answer for the same lookup is nothing to the realm.
        r.handle(
            NOW,
            RealmInput::Located {
                token: 0,
                ip: Some(ip),
            },
        );
        assert!(drain(&mut r).is_empty());
    }

    #[test]
    fn a_host_name_with_no_address_fails_the_dial_and_the_message_stays_spooled() {
        let (mut r, _commands) = realm_with_a_named_peer();
        let first = send_to_b(&mut r);
        let acked = |effects: &[Effect<Dial, Output, core::convert::Infallible>]| {
            effects.iter().any(|e| {
                matches!(e, Effect::Send { bytes, .. }
                    if String::from_utf8_lossy(bytes).contains("authority_unreachable"))
            })
        };
        assert!(
            !acked(&first),
            "no answer while the lookup is out: {first:?}"
        );
        r.handle(NOW, RealmInput::Located { token: 0, ip: None });
        let after = drain(&mut r);
        assert!(dials(&after).is_empty());
        assert!(r.locating.is_empty());
        assert!(acked(&after), "queued authority_unreachable: {after:?}");
    }
}
