//! `weft relay`: the [`RelayServer`] machine as a [`WsMachine`], so any runtime adapter drives
//! it through the WebSocket layer ([`crate::ws`]) (Minca 04 Network §1.4).
//!
//! The layer reads each request head: `GET /health` answers `{"ok":true}`, any other plain HTTP
//! request 426; an upgrade (on any path) is put to [`Relay::upgrade`], which asks the machine's
//! [`RelayServer::admit`]: a refusal goes back as a plain HTTP response with `Connection: close`.
//! The client address is the TCP peer, or with `trust_proxy` the last hop of the last
//! `X-Forwarded-For` line (pending request heads are then capped only in all, not per address:
//! every connection is the proxy's).
//! With [`RelayOptions::tls`] the listener runs TLS first, so clients dial `wss://` to it.
//!
//! An always-on node (§5.3) serves `/peer` on the same port: with a node key
//! ([`NodeOptions`]), an upgrade whose path is [`PEER_PATH`] goes to the node's
//! [`PeerEndpoint`] (the challenge at once, frames up to 16 MiB, 1009 past them), and every
//! other upgrade to the relay machine as before. Without one, `/peer` is refused with 404. A
//! `/peer` socket is admitted by the relay machine and counted in its socket caps until it
//! closes ([`Input::OpenedElsewhere`]), so no path passes the per-address cap.
//! [`chat_node`] gives that node `weft node`'s chat (§9.2): stdin lines out as live messages to
//! its clients, their events and messages in as JSON lines on stdout, in
//! [`node_runner`](super::node_runner)'s format.
//!
//! Nothing here holds protocol meaning: every frame, close and tick goes to the machine, and its
//! outputs become frames, pings and closes in order.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use serde_json::Value;
use smol::channel::Receiver;
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::rand_core::{CryptoRng, SeedableRng};
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::crypto::P256Secret;
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::node_socket::{MAX_FRAME_BYTES, PEER_PATH};
use weft_proto::minca::relay_server::{
    Input, MAX_WS_MESSAGE_BYTES, Output, RelayConfig, RelayServer,
};
use weft_proto::minca::space_access::MemorySpace;
use weft_proto::minca::turn::TurnConfig;

use super::node_runner::{NodeEvent, print_event, read_lines};
use super::node_ws::{NodeWsEvent, PeerEndpoint, PeerInput, SocketOutput, Space};
use crate::host::{Commands, Endpoint, Host, Listener, Peer, Remote, TlsServer};
use crate::ws::{
    Frame, NoDial, Refusal, Request, Ws, WsConfig, WsEffect, WsHooks, WsInput, WsMachine,
};

/// The address `weft relay` listens on when told none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// How `weft relay` runs.
#[derive(Clone, Debug)]
pub struct RelayOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Take the client address from the last hop of the last `X-Forwarded-For` line (only behind
    /// a proxy that appends it).
    pub trust_proxy: bool,
    /// TURN passwords to hand out, if any.
    pub turn: Option<TurnConfig>,
    /// Serve `wss://`: every connection opens with a TLS handshake presenting this certificate
    /// (the host layer's one TLS setup, [`crate::tls`]); `None` serves plain `ws://`.
    pub tls: Option<TlsServer>,
}

impl RelayOptions {
    /// A plain `ws://` relay on `listen`, with no proxy trusted, no TURN and no TLS: what tests,
    /// the demo and embedded hosts start from, setting the rest by field.
    pub fn plain(listen: SocketAddr) -> Self {
        Self {
            listen,
            trust_proxy: false,
            turn: None,
            tls: None,
        }
    }
}

/// An always-on node on the relay's port (§5.3): its session and the spaces it holds.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The node's session key: its did:key is the DID of every challenge and welcome.
    pub key: P256Secret,
    /// The node's note (its proof of an account), sent in the welcome and in `who`.
    pub note: Option<String>,
    /// The public spaces it holds, by id; a hello for any other is refused like a stranger's.
    pub spaces: Vec<String>,
}

impl NodeOptions {
    /// The node's session DID.
    pub fn did(&self) -> Option<String> {
        let public = crate::server_provider().p256_public_key(&self.key).ok()?;
        Some(DidKey::P256(public.0).to_did())
    }

    /// The spaces as the node's sockets read them (public: no read proof, §6.3).
    fn spaces(&self) -> Vec<Space> {
        self.spaces
            .iter()
            .map(|id| Arc::new(MemorySpace::public(id)) as Space)
            .collect()
    }
}

/// The relay machine with how its host determines client addresses, and the `/peer` endpoint
/// of an always-on node if it is one.
#[derive(Debug)]
pub struct Relay<R> {
    /// The machine.
    pub server: RelayServer<R>,
    trust_proxy: bool,
    /// The node's `/peer` endpoint, if this relay is an always-on node.
    peer: Option<PeerEndpoint<R>>,
    /// The sockets that are the node's (upgraded on `/peer`), not the relay's.
    peer_conns: BTreeSet<ConnId>,
    /// The latest time the relay was told, for telling the machine of a `/peer` socket's close
    /// that the node's own output reports.
    now: Timestamp,
}

impl<R: CryptoRng> Relay<R> {
    /// `server`, taking client addresses from `X-Forwarded-For` when `trust_proxy`.
    pub fn new(server: RelayServer<R>, trust_proxy: bool) -> Self {
        Self {
            server,
            trust_proxy,
            peer: None,
            peer_conns: BTreeSet::new(),
            now: Timestamp::default(),
        }
    }

    /// The same relay also serving `/peer` as the node `peer` (§5.3).
    pub fn with_node(mut self, peer: PeerEndpoint<R>) -> Self {
        self.peer = Some(peer);
        self
    }

    /// The node's `/peer` endpoint, if any.
    pub fn node(&self) -> Option<&PeerEndpoint<R>> {
        self.peer.as_ref()
    }
}

/// `weft relay`'s host: the relay over the WebSocket layer, with hooks that dial nothing and
/// store nothing; an always-on node's events go to `D`.
pub type RelayHost<D = fn(NodeWsEvent)> = Host<Ws<Relay<chacha20::ChaCha20Rng>>, WsHooks<D>>;

/// The relay for `options` over the WebSocket layer, ready for any adapter.
pub fn relay_host(options: &RelayOptions) -> RelayHost {
    let machine = Ws::new(relay_machine(options), ws_config(options));
    Host::new(machine, WsHooks(|_| {}))
}

/// The WebSocket layer's settings for `options`: behind a trusted proxy every connection comes
/// from the proxy's address (which reads each head whole before it forwards it), so pending heads
/// meet only the layer's global cap there, not [`crate::ws::MAX_PENDING_HEADS_PER_ADDRESS`].
fn ws_config(options: &RelayOptions) -> WsConfig {
    let mut config = WsConfig::new(MAX_WS_MESSAGE_BYTES);
    if options.trust_proxy {
        config.pending_heads_per_address = crate::ws::MAX_PENDING_HEADS;
    }
    config
}

fn relay_machine(options: &RelayOptions) -> Relay<chacha20::ChaCha20Rng> {
    let server = RelayServer::new(
        RelayConfig {
            turn: options.turn.clone(),
        },
        crate::server_provider(),
        crate::os_rng(),
    );
    Relay::new(server, options.trust_proxy)
}

/// The relay for `options` that is also the always-on node `node` (§5.3), its node's events
/// going to `deliver`; the application sends through [`PeerInput::Send`] (as
/// [`RelayInput::Peer`]). Fails only when the node key is not a P-256 secret.
pub fn node_relay_host<D: FnMut(NodeWsEvent)>(
    options: &RelayOptions,
    node: &NodeOptions,
    deliver: D,
) -> io::Result<RelayHost<D>> {
    let peer = PeerEndpoint::new(
        crate::server_provider(),
        node.key.clone(),
        node.note.clone(),
        node.spaces(),
        crate::os_rng(),
    )
    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the node key is not P-256"))?;
    let machine = Ws::new(relay_machine(options).with_node(peer), ws_config(options));
    Ok(Host::new(machine, WsHooks(deliver)))
}

/// Runs the relay on the smol adapter until `stop` yields (or forever). `ready` gets the bound
/// address once the relay listens (the port is the OS's choice when `listen` names port 0).
pub fn serve(
    options: RelayOptions,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let listener = listen(&options, ready)?;
    let mut host = relay_host(&options);
    smol::block_on(smol::future::or(
        crate::smol::run(&mut host, vec![listener]),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

/// The relay's listener for `options` (TLS first with [`RelayOptions::tls`]), its address
/// handed to `ready`.
fn listen(options: &RelayOptions, ready: impl FnOnce(SocketAddr)) -> io::Result<Listener> {
    let listener = match &options.tls {
        Some(server) => Listener::tls(options.listen, server.clone())?,
        None => Listener::bind(&Endpoint::Tcp(options.listen))?,
    };
    if let Endpoint::Tcp(addr) = listener.endpoint()? {
        ready(addr);
    }
    Ok(listener)
}

/// What the application of a relay that is also a node sends it ([`serve_node`]).
pub type NodeRelayCommand = WsInput<NoDial, RelayInput>;

/// A live message (§9.2) of `payload` to every client open on `/peer` in `space_id`.
pub fn live_to_clients(space_id: &str, payload: Value) -> NodeRelayCommand {
    WsInput::App(RelayInput::Peer(PeerInput::Send {
        space_id: space_id.into(),
        to: None,
        kind: LIVE.into(),
        payload,
    }))
}

/// [`serve`] as the always-on node `node` too (§5.3), its node's events going to `deliver` and
/// what the application sends coming from `commands` ([`crate::host::commands`]).
pub fn serve_node(
    options: RelayOptions,
    node: NodeOptions,
    commands: &Commands<NodeRelayCommand>,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
    deliver: impl FnMut(NodeWsEvent),
) -> io::Result<()> {
    let listener = listen(&options, ready)?;
    let mut host = node_relay_host(&options, &node, deliver)?;
    smol::block_on(smol::future::or(
        crate::smol::run_commanded(&mut host, vec![listener], commands),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

/// `weft relay --node-key`: [`serve_node`] with `weft node`'s chat. Each event of its `/peer`
/// sockets is printed as the JSON line `weft node` prints for it
/// ([`NodeEvent::from_peer_socket`]), and with `lines` (`weft relay --chat`: stdin) each line
/// goes as a live message to every client open in every space the node holds, read on a thread
/// of its own. The end of `lines`, or a read error, ends the chat, not the relay.
pub fn chat_node(
    options: RelayOptions,
    node: NodeOptions,
    lines: Option<Box<dyn io::BufRead + Send>>,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let (commander, commands) = crate::host::commands()?;
    if let Some(lines) = lines {
        let spaces = node.spaces.clone();
        std::thread::Builder::new()
            .name("weft-relay-chat".into())
            .spawn(move || {
                let send = |payload: Value| {
                    spaces
                        .iter()
                        .all(|s| commander.send(live_to_clients(s, payload.clone())).is_ok())
                };
                // Input that fails to read ends the chat as its end does; the relay goes on.
                let _ = read_lines(lines, send);
            })?;
    }
    serve_node(options, node, &commands, stop, ready, |event| {
        if let Some(event) = NodeEvent::from_peer_socket(event) {
            print_event(&event);
        }
    })
}

/// The TURN secret kept in `path` (`weft relay --turn-secret-file`), so that it is in no
/// process list and no environment: the file's text with whitespace around it trimmed (a line
/// end an editor added is not part of the secret). Refused (`InvalidData`, the message naming the
/// file and the fix): a file anyone but its owner may read or write, as a key file is
/// ([`super::key_file`]; `chmod 600`), and an empty secret.
pub fn read_turn_secret(path: &std::path::Path) -> io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let invalid = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(invalid(format!(
            "mode {:o}: a TURN secret must be readable by its owner only (chmod 600)",
            mode & 0o777
        )));
    }
    let text = std::fs::read_to_string(path)?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(invalid("the TURN secret is empty".into()));
    }
    Ok(secret.to_string())
}

/// What a relay that may be a node is told: the relay machine's inputs, or the node's.
#[derive(Debug)]
#[non_exhaustive]
pub enum RelayInput {
    /// For the relay machine.
    Relay(Input),
    /// For the node's `/peer` endpoint.
    Peer(PeerInput),
}

/// What a relay that may be a node asks for.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RelayOutput {
    /// The relay machine's.
    Relay(Output),
    /// The node's `/peer` sockets'.
    Peer(SocketOutput),
}

impl<R: CryptoRng + SeedableRng> Machine for Relay<R> {
    type Input = RelayInput;
    type Output = RelayOutput;
    fn handle(&mut self, now: Timestamp, input: RelayInput) {
        self.now = self.now.max(now);
        match input {
            RelayInput::Relay(input) => self.server.handle(now, input),
            RelayInput::Peer(input) => {
                if let Some(peer) = &mut self.peer {
                    peer.handle(now, input);
                }
            }
        }
    }
    fn poll(&mut self) -> Option<RelayOutput> {
        if let Some(output) = self.server.poll() {
            return Some(RelayOutput::Relay(output));
        }
        self.peer.as_mut()?.poll().map(RelayOutput::Peer)
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        let node = self.peer.as_ref().and_then(PeerEndpoint::poll_timeout);
        Wakeup::earliest(self.server.poll_timeout(), node)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
        if self.server.poll_timeout().is_some_and(|w| w.at <= now) {
            self.server.handle_timeout(now);
        }
        if let Some(peer) = &mut self.peer
            && peer.poll_timeout().is_some_and(|w| w.at <= now)
        {
            peer.handle_timeout(now);
        }
    }
}

impl<R: CryptoRng + SeedableRng> WsMachine for Relay<R> {
    type Target = NoDial;
    type App = NodeWsEvent;

    fn upgrade(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: &Peer,
        request: &Request,
    ) -> Result<RelayInput, Refusal> {
        self.now = self.now.max(now);
        let addr = client_addr(request, peer, self.trust_proxy);
        // `/peer` sockets are on the relay's port too: the relay's socket caps admit them, and
        // count them until they close (`Input::OpenedElsewhere`).
        let admit = |server: &mut RelayServer<R>| {
            server.admit(now, addr).map_err(|refusal| Refusal {
                status: refusal.http_status(),
                reason: refusal.reason().into(),
            })
        };
        if let Some(space_id) = PeerEndpoint::<R>::route(request) {
            return match &self.peer {
                None => Err(Refusal {
                    status: 404,
                    reason: "this relay is not a node\n".into(),
                }),
                Some(node) if !node.has_room() => Err(PeerEndpoint::<R>::full()),
                Some(_) => {
                    admit(&mut self.server)?;
                    self.server
                        .handle(now, Input::OpenedElsewhere { conn, addr });
                    self.peer_conns.insert(conn);
                    Ok(RelayInput::Peer(PeerInput::Opened { conn, space_id }))
                }
            };
        }
        admit(&mut self.server)?;
        Ok(RelayInput::Relay(Input::Opened { conn, addr }))
    }
    fn message_limit(&self, request: &Request) -> Option<usize> {
        // §5.3: "the reference node closes the socket (1009) on a frame over 16 MiB".
        let path = request.path.split('?').next().unwrap_or("");
        (self.peer.is_some() && path == PEER_PATH).then_some(MAX_FRAME_BYTES)
    }
    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<RelayInput> {
        if self.peer_conns.contains(&conn) {
            return Some(RelayInput::Peer(PeerInput::Frame { conn, frame }));
        }
        Some(RelayInput::Relay(match frame {
            Frame::Text(text) => Input::Text { conn, text },
            Frame::Binary(_) => Input::Binary { conn },
            // Pings and pongs are proof of life and count against the budget (§1.4).
            _ => Input::Control { conn },
        }))
    }
    fn closed(&mut self, conn: ConnId) -> Option<RelayInput> {
        if self.peer_conns.remove(&conn) {
            return Some(RelayInput::Peer(PeerInput::Closed { conn }));
        }
        Some(RelayInput::Relay(Input::Closed { conn }))
    }
    fn dialled(&mut self, _conn: ConnId, target: NoDial) -> Option<RelayInput> {
        match target {}
    }
    fn dial_failed(&mut self, target: NoDial) -> Option<RelayInput> {
        match target {}
    }
    fn effect(&mut self, output: RelayOutput) -> Option<WsEffect<NoDial, Self::App>> {
        let output = match output {
            RelayOutput::Peer(output) => {
                if let SocketOutput::Event(NodeWsEvent::Closed { conn, .. }) = &output {
                    self.peer_conns.remove(conn);
                    // Whichever side closed it, the relay's count lets it go.
                    self.server.handle(self.now, Input::Closed { conn: *conn });
                }
                // The node side dials nothing.
                return match output {
                    SocketOutput::Dial(_) => Some(WsEffect::Unhandled),
                    other => Some(other.effect(|_| unreachable!("matched above"))),
                };
            }
            RelayOutput::Relay(output) => output,
        };
        Some(match output {
            Output::Send { conn, text } => WsEffect::Text {
                conn,
                text: String::from(&*text),
            },
            Output::Ping { conn } => WsEffect::Ping { conn },
            Output::Close { conn, code, reason } => WsEffect::Close {
                conn,
                code,
                reason: reason.into(),
            },
            _ => WsEffect::Unhandled,
        })
    }
}

/// The client address: the TCP peer, or with `trust_proxy` the last `X-Forwarded-For` hop (the
/// one the relay's own proxy appended); §1.4: "anywhere else a header is whatever the client
/// says". A request may carry the header on several lines (a client's own, then the proxy's, or
/// one a proxy appends as a line of its own): the last hop is the last of the last line, never
/// the first line, which the client wrote. A Unix-socket peer is local.
fn client_addr(request: &Request, peer: &Peer, trust_proxy: bool) -> IpAddr {
    let direct = match peer.remote {
        Remote::Tcp(addr) => addr.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let forwarded = || {
        let (_, line) = request
            .headers
            .iter()
            .rfind(|(name, _)| name == "x-forwarded-for")?;
        line.rsplit(',').next()?.trim().parse().ok()
    };
    if trust_proxy {
        forwarded().unwrap_or(direct)
    } else {
        direct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(forwarded: Option<&str>) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            headers: forwarded
                .map(|v| ("x-forwarded-for".to_string(), v.to_string()))
                .into_iter()
                .collect(),
        }
    }

    /// A client behind the proxy sends its own `X-Forwarded-For` lines naming someone else; the
    /// proxy appends its own line (or its hop to the last line). The address is the last hop of
    /// the last line, whatever the client wrote before it.
    #[test]
    fn behind_a_trusted_proxy_the_client_address_is_the_last_hop_of_the_last_forwarded_line() {
        let tcp: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let peer = &Peer {
            listener: 0,
            remote: Remote::Tcp(tcp),
        };
        let raw = b"GET / HTTP/1.1\r\nHost: relay\r\n\
            X-Forwarded-For: 203.0.113.9\r\n\
            Upgrade: websocket\r\n\
            x-forwarded-for: 203.0.113.10, 203.0.113.11\r\n\
            X-Forwarded-For: 198.51.100.4, 2001:db8::7\r\n";
        let request = Request::parse(raw).unwrap();
        assert_eq!(
            request.header("x-forwarded-for"),
            Some("203.0.113.9"),
            "the first line is the client's"
        );
        assert_eq!(
            client_addr(&request, peer, true),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(client_addr(&request, peer, false), tcp.ip());
        // A last line that does not parse: the TCP peer, not an earlier line the client wrote.
        let raw = b"GET / HTTP/1.1\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: junk\r\n";
        let request = Request::parse(raw).unwrap();
        assert_eq!(client_addr(&request, peer, true), tcp.ip());
    }

    /// An operator leaves the secret file readable by every local user, or empty: `weft relay`
    /// refuses to start on it, saying how to fix it.
    #[test]
    fn a_turn_secret_file_others_may_read_or_an_empty_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("weft-turn-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("turn.secret");
        std::fs::write(&path, "s3cret\n").unwrap();
        let set = |mode| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602] {
            set(mode).unwrap();
            let e = read_turn_secret(&path).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            let text = e.to_string();
            assert!(text.contains(&format!("mode {mode:o}")), "{text}");
            assert!(text.contains("chmod 600"), "{text}");
            assert!(text.starts_with(&path.display().to_string()), "{text}");
        }
        set(0o600).unwrap();
        assert_eq!(read_turn_secret(&path).unwrap(), "s3cret");
        set(0o400).unwrap();
        assert_eq!(read_turn_secret(&path).unwrap(), "s3cret");
        for empty in ["", "\n", "  \r\n\t"] {
            set(0o600).unwrap();
            std::fs::write(&path, empty).unwrap();
            let e = read_turn_secret(&path).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().ends_with("the TURN secret is empty"), "{e}");
        }
        assert_eq!(
            read_turn_secret(&dir.join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_client_address_is_the_tcp_peer_unless_the_proxy_is_trusted() {
        let tcp: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let peer = &Peer {
            listener: 0,
            remote: Remote::Tcp(tcp),
        };
        let spoofed = head(Some("203.0.113.9, 198.51.100.4"));
        // Untrusted, a header is whatever the client says.
        assert_eq!(client_addr(&spoofed, peer, false), tcp.ip());
        // Behind a trusted proxy: the last hop, the one the proxy appended.
        assert_eq!(
            client_addr(&spoofed, peer, true),
            "198.51.100.4".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_addr(&head(Some("2001:db8::7")), peer, true),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
        // Missing or unparsable: the TCP peer.
        assert_eq!(client_addr(&head(None), peer, true), tcp.ip());
        assert_eq!(client_addr(&head(Some("unknown")), peer, true), tcp.ip());
    }
}
