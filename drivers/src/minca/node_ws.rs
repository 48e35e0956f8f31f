//! The WebSocket to an always-on node on real sockets, both sides (Minca 04 Network §5.2, §5.3).
//!
//! Every rule of the socket — the three text frames of `minca-peer/v3` (§6.1), the pin, the
//! refusals and their close codes, `who` first, frames one at a time, the 16 MiB bound — is the
//! sans-IO machines' of [`weft_proto::minca::node_socket`]: [`ClientSocket`] on the client,
//! [`NodeSocket`] on the node. This module only gives each socket its machine, moves frames
//! between them and the WebSocket layer ([`crate::ws`]) in order, and tells the application
//! what they report as [`NodeWsEvent`]s.
//!
//! - **Client** ([`NodeWsClient`], [`client_host`]): the application asks for a space on a node
//!   ([`ClientInput::Dial`]); the client dials `<node URL>?space=<encodeURIComponent(id)>` with
//!   the pin stripped ([`NodeUrl::dial_url`]), holds one socket per space, and reports the node
//!   as the peer named by its session DID once the handshake and the pin hold. A socket that
//!   ends, or a dial that fails, is dialled again on [`REDIAL_BACKOFF`] until the application
//!   closes the space, unless this side refused the node for good ([`redials_after`]); §5.2
//!   leaves the schedule to the node's docs, and §7 re-makes a connection whenever the two meet
//!   again.
//! - **Node** ([`PeerEndpoint`]): `weft relay` with a node key routes an upgrade of
//!   [`node_socket::PEER_PATH`] here ([`crate::minca::relay`]); the challenge goes out at once, before the
//!   space is looked at (§5.3 step 1), and a frame over [`MAX_FRAME_BYTES`] closes the socket with
//!   1009 at the layer ([`crate::ws::WsMachine::message_limit`]).
//!
//! The node socket is not a mesh connection: `minca-peer/v3` has already proved both session
//! DIDs for one space (H and W name the space, both DIDs and both nonces), a WebSocket has no
//! certificate fingerprints to bind (§5.1: "a transport without certificates has no binding"),
//! and its frames carry no room (§5.2 step 4). So no `minca-mesh/v1` runs on it; the node is a
//! peer of that one space from the welcome on, and a host that also runs a mesh
//! ([`weft_proto::minca::node::Node`]) shows the application both kinds of peer side by side.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use weft_proto::core::rand_core::{CryptoRng, SeedableRng};
use weft_proto::core::{Backoff, BackoffConfig, ConnId, Machine, Timestamp, Wakeup};
use weft_proto::crypto::{CryptoProvider, P256Secret};
use weft_proto::minca::node;
use weft_proto::minca::node_socket::{
    self, ClientSocket, Input, MAX_FRAME_BYTES, NodeSocket, Output, PROTOCOL_ERROR, REFUSED,
    Session,
};
use weft_proto::minca::node_url::NodeUrl;
use weft_proto::minca::note::Es256Notes;
use weft_proto::minca::relay_client;
use weft_proto::minca::room::{MAX_ROOMS, Room};
use weft_proto::minca::space_access::SpaceAccess;

use crate::host::{Host, Peer};
use crate::ws::{Frame, Refusal, Request, Ws, WsConfig, WsEffect, WsHooks, WsMachine};

/// A space's access as both sides read it (§6.3), shared by every socket of the space.
pub type Space = Arc<dyn SpaceAccess + Send + Sync>;

/// The most spaces a client holds node sockets for at once, one socket each (§5.2): as many as
/// rooms a node joins ([`MAX_ROOMS`]).
pub const MAX_CLIENT_SOCKETS: usize = MAX_ROOMS;

/// The most `/peer` sockets a node holds at once (open or in their handshake); an upgrade past
/// it is refused with HTTP 503 before the socket opens. The spec names no number (§5.3); 1 024
/// is the WebSocket layer's own bound on connections still sending a head
/// ([`crate::ws::MAX_PENDING_HEADS`]), far above the devices of the spaces one node hosts.
pub const MAX_PEER_SOCKETS: usize = crate::ws::MAX_PENDING_HEADS;

/// When a client dials a node socket again (§5.2: "how the reference client redials is in the
/// node's docs"): the relay sockets' schedule, 1 s doubling to 30 s with jitter (§2.1). A node
/// socket is a client's way to its always-on node as a relay socket is to its peers, and it is
/// often the only one, so it is kept the same way: redialled however many attempts fail. The
/// schedule starts over only once a socket has stayed open for the ceiling
/// ([`BackoffConfig::max`]), so a node that lets a client in and drops it at once is not dialled
/// faster than a node that refuses it.
pub const REDIAL_BACKOFF: BackoffConfig = relay_client::REDIAL_BACKOFF;

/// Whether a client dials a space's node socket again after it ended with `code`: the close this
/// side sent, or `None` when the node or the transport ended it (the layer does not report the
/// node's own code).
///
/// Not redialled: this side's 4002 (§5.2: the welcome failed the pin, or the node spoke out of
/// turn) and 4003 (§6.3: this side holds no read key to prove), since the same node answers the
/// same way every time, and a loop would only hammer it. Redialled: the node going away or
/// restarting, a transport error, the node's own refusal or let-go (§6.3: "a peer let go of that
/// reconnects is checked like any other"; the reader's key may have changed since), this side's
/// handshake timeout (4008) and a frame over the bound (1009), which are the moment's.
pub fn redials_after(code: Option<u16>) -> bool {
    !matches!(code, Some(c) if c == PROTOCOL_ERROR.code || c == REFUSED.code)
}

/// What the sockets of either side report to the application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum NodeWsEvent {
    /// The handshake is done: the socket `conn` of `space_id` is the peer `peer`, proven by
    /// `minca-peer/v3` (on a client: the node, its pin satisfied).
    Opened {
        /// The socket.
        conn: ConnId,
        /// The space.
        space_id: String,
        /// The peer's session DID.
        peer: String,
    },
    /// The peer's `who` arrived (§6.4): its account, or `None`.
    Account {
        /// The socket.
        conn: ConnId,
        /// The space.
        space_id: String,
        /// The peer's session DID.
        peer: String,
        /// The account, the note's issuer.
        account: Option<String>,
    },
    /// A message of the space from the socket's peer (never its `from`).
    Message {
        /// The socket.
        conn: ConnId,
        /// The space.
        space_id: String,
        /// The peer's session DID.
        peer: String,
        /// The account its `who` proved, if any.
        account: Option<String>,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// The node let go of its reader (§6.3); the socket closes.
    LetGo {
        /// The socket.
        conn: ConnId,
        /// The space.
        space_id: String,
        /// The peer's session DID.
        peer: String,
        /// The account its `who` showed, if any.
        account: Option<String>,
    },
    /// The socket is gone: `code` is the close this side sent (a refusal, a timeout, a let-go),
    /// `None` when the other side or the transport ended it.
    Closed {
        /// The socket.
        conn: ConnId,
        /// The space.
        space_id: String,
        /// The peer's session DID, if its handshake had proven one.
        peer: Option<String>,
        /// This side's close code, if it closed.
        code: Option<u16>,
    },
    /// A client's dial to the node failed (transport or WebSocket handshake).
    DialFailed {
        /// The space.
        space_id: String,
    },
    /// A client dials the space's node socket again at `at` ([`REDIAL_BACKOFF`]).
    Redialling {
        /// The space.
        space_id: String,
        /// When.
        at: Timestamp,
    },
    /// A client does not dial the space's node socket again ([`redials_after`]); the space is
    /// no longer wanted until the application dials it anew.
    GaveUp {
        /// The space.
        space_id: String,
        /// The close this side sent.
        code: Option<u16>,
    },
}

/// What the sockets ask of the WebSocket layer and the application, in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SocketOutput {
    /// Send a text frame.
    Text {
        /// The socket.
        conn: ConnId,
        /// The frame.
        text: String,
    },
    /// Send a binary frame.
    Binary {
        /// The socket.
        conn: ConnId,
        /// The frame.
        bytes: Vec<u8>,
    },
    /// Close the socket.
    Close {
        /// The socket.
        conn: ConnId,
        /// The close code.
        code: u16,
        /// The reason.
        reason: &'static str,
    },
    /// Dial a node (client side).
    Dial(NodeTarget),
    /// Tell the application.
    Event(NodeWsEvent),
}

impl SocketOutput {
    /// The layer's effect for this output.
    pub fn effect<T>(self, dial: impl FnOnce(NodeTarget) -> T) -> WsEffect<T, NodeWsEvent> {
        match self {
            Self::Text { conn, text } => WsEffect::Text { conn, text },
            Self::Binary { conn, bytes } => WsEffect::Binary { conn, bytes },
            Self::Close { conn, code, reason } => WsEffect::Close {
                conn,
                code,
                reason: reason.into(),
            },
            Self::Dial(target) => WsEffect::Dial(dial(target)),
            Self::Event(event) => WsEffect::Deliver(event),
        }
    }
}

/// The socket machines of one side, by connection, each with its space: frames in, outputs out
/// in order. Bounded by its owner ([`MAX_CLIENT_SOCKETS`], [`MAX_PEER_SOCKETS`]).
struct Sockets<M> {
    open: BTreeMap<ConnId, (String, M)>,
    /// The proven peer of each open socket, kept past its machine's close so that the close
    /// can name it; a subset of `open`'s keys.
    peers: BTreeMap<ConnId, String>,
    out: VecDeque<SocketOutput>,
}

impl<M: Machine<Input = Input, Output = Output>> Sockets<M> {
    fn new() -> Self {
        Self {
            open: BTreeMap::new(),
            peers: BTreeMap::new(),
            out: VecDeque::new(),
        }
    }

    fn insert(&mut self, conn: ConnId, space_id: String, machine: M) {
        self.open.insert(conn, (space_id, machine));
        self.drain(conn);
    }

    fn feed(&mut self, now: Timestamp, conn: ConnId, input: Input) {
        if let Some((_, m)) = self.open.get_mut(&conn) {
            m.handle(now, input);
            self.drain(conn);
        }
    }

    /// The transport ended `conn`: the machine hears it and the application is told.
    fn closed(&mut self, now: Timestamp, conn: ConnId) {
        if let Some((space_id, mut m)) = self.open.remove(&conn) {
            m.handle(now, Input::Closed);
            self.out.push_back(SocketOutput::Event(NodeWsEvent::Closed {
                conn,
                space_id,
                peer: self.peers.remove(&conn),
                code: None,
            }));
        }
    }

    /// Takes everything `conn`'s machine asks for; a close ends the socket here.
    fn drain(&mut self, conn: ConnId) {
        let Some((space_id, m)) = self.open.get_mut(&conn) else {
            return;
        };
        let space_id = space_id.clone();
        let mut closed = None;
        while let Some(output) = m.poll() {
            let space_id = space_id.clone();
            let event = match output {
                Output::SendText(text) => SocketOutput::Text { conn, text },
                Output::SendBinary(bytes) => SocketOutput::Binary { conn, bytes },
                Output::Close(code) => {
                    closed = Some(code.code);
                    SocketOutput::Close {
                        conn,
                        code: code.code,
                        reason: code.reason,
                    }
                }
                Output::Open { peer: p } => {
                    self.peers.insert(conn, p.clone());
                    SocketOutput::Event(NodeWsEvent::Opened {
                        conn,
                        space_id,
                        peer: p,
                    })
                }
                Output::Account { peer, account } => SocketOutput::Event(NodeWsEvent::Account {
                    conn,
                    space_id,
                    peer,
                    account,
                }),
                Output::Message {
                    peer,
                    account,
                    kind,
                    payload,
                } => SocketOutput::Event(NodeWsEvent::Message {
                    conn,
                    space_id,
                    peer,
                    account,
                    kind,
                    payload,
                }),
                Output::LetGo { peer, account } => SocketOutput::Event(NodeWsEvent::LetGo {
                    conn,
                    space_id,
                    peer,
                    account,
                }),
                // node_socket's output enum may grow; what this host does not know it skips.
                _ => continue,
            };
            self.out.push_back(event);
        }
        if let Some(code) = closed {
            self.open.remove(&conn);
            self.out.push_back(SocketOutput::Event(NodeWsEvent::Closed {
                conn,
                space_id,
                peer: self.peers.remove(&conn),
                code: Some(code),
            }));
        }
    }

    /// Sends a message of `space_id` on every open socket of it, or only to the peer `to`.
    fn send(
        &mut self,
        now: Timestamp,
        space_id: &str,
        to: Option<&str>,
        kind: &str,
        payload: &Value,
    ) where
        M: PeerOf,
    {
        let conns: Vec<ConnId> = self
            .open
            .iter()
            .filter(|(_, (s, m))| s == space_id && m.peer().is_some())
            .filter(|(_, (_, m))| to.is_none_or(|to| m.peer() == Some(to)))
            .map(|(c, _)| *c)
            .collect();
        for conn in conns {
            let input = Input::Send {
                kind: kind.into(),
                payload: payload.clone(),
            };
            self.feed(now, conn, input);
        }
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.open
            .values()
            .filter_map(|(_, m)| m.poll_timeout())
            .fold(None, |a, w| Wakeup::earliest(a, Some(w)))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        let due: Vec<ConnId> = self
            .open
            .iter()
            .filter(|(_, (_, m))| m.poll_timeout().is_some_and(|w| w.at <= now))
            .map(|(c, _)| *c)
            .collect();
        for conn in due {
            if let Some((_, m)) = self.open.get_mut(&conn) {
                m.handle_timeout(now);
            }
            self.drain(conn);
        }
    }
}

/// The proven peer of a socket machine, once its handshake is done.
trait PeerOf {
    fn peer(&self) -> Option<&str>;
}

impl<A: SpaceAccess, R: CryptoRng> PeerOf for ClientSocket<A, Es256Notes, R> {
    fn peer(&self) -> Option<&str> {
        ClientSocket::peer(self)
    }
}

impl<A: SpaceAccess, R: CryptoRng> PeerOf for NodeSocket<A, Es256Notes, R> {
    fn peer(&self) -> Option<&str> {
        NodeSocket::peer(self)
    }
}

/// A frame of the layer as a socket machine's input; pings and pongs are the layer's.
fn frame_input(frame: Frame) -> Option<Input> {
    match frame {
        Frame::Text(text) => Some(Input::Text(text)),
        Frame::Binary(bytes) => Some(Input::Binary(bytes)),
        _ => None,
    }
}

/// The layer configuration of either side: frames up to the node's bound (§5.3).
pub fn socket_config() -> WsConfig {
    WsConfig::new(MAX_FRAME_BYTES)
}

// ---------------------------------------------------------------------------------------------
// The client side (§5.2).

/// A socket a client dials: the URL (the pin stripped, `?space=` added) and its space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTarget {
    /// The URL dialled.
    pub url: String,
    /// The space the socket is for.
    pub space_id: String,
}

impl AsRef<str> for NodeTarget {
    fn as_ref(&self) -> &str {
        &self.url
    }
}

/// What a client is told: the application's commands, and the layer's news.
#[non_exhaustive]
pub enum ClientInput {
    /// Reach the node at `node` for `space` (§5.2): one socket per space, so a space that already
    /// has one (dialling or open) keeps it.
    Dial {
        /// The node URL, checked ([`NodeUrl::parse`]); its pin is the client's.
        node: NodeUrl,
        /// The space, with what it proves with (§6.3).
        space: Space,
    },
    /// Send a message of the space to the node (`live`, or an application's type); dropped when
    /// the space's socket is not open.
    Send {
        /// The space.
        space_id: String,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// Close the space's socket.
    Close {
        /// The space.
        space_id: String,
    },
    /// Send a message of its space on socket `conn` (a [`Node`](node::Node)'s
    /// [`node::Output::NodeSocketSend`], through [`client_input`]).
    SendOn {
        /// The socket.
        conn: ConnId,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// Close socket `conn` (a [`Node`](node::Node)'s [`node::Output::NodeSocketClose`]).
    CloseOn {
        /// The socket.
        conn: ConnId,
    },
    /// The layer finished the dial of `target` as `conn`.
    Dialled {
        /// The socket.
        conn: ConnId,
        /// What was dialled.
        target: NodeTarget,
    },
    /// A frame arrived.
    Frame {
        /// The socket.
        conn: ConnId,
        /// The frame.
        frame: Frame,
    },
    /// The socket closed under the client.
    Closed {
        /// The socket.
        conn: ConnId,
    },
    /// The dial of `target` failed.
    DialFailed {
        /// What was dialled.
        target: NodeTarget,
    },
}

impl fmt::Debug for ClientInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dial { node, .. } => f.debug_struct("Dial").field("node", node).finish(),
            Self::Send { space_id, kind, .. } => f
                .debug_struct("Send")
                .field("space_id", space_id)
                .field("kind", kind)
                .finish(),
            Self::Close { space_id } => {
                f.debug_struct("Close").field("space_id", space_id).finish()
            }
            Self::SendOn { conn, kind, .. } => f
                .debug_struct("SendOn")
                .field("conn", conn)
                .field("kind", kind)
                .finish(),
            Self::CloseOn { conn } => f.debug_struct("CloseOn").field("conn", conn).finish(),
            Self::Dialled { conn, target } => f
                .debug_struct("Dialled")
                .field("conn", conn)
                .field("target", target)
                .finish(),
            Self::Frame { conn, .. } => f.debug_struct("Frame").field("conn", conn).finish(),
            Self::Closed { conn } => f.debug_struct("Closed").field("conn", conn).finish(),
            Self::DialFailed { target } => f
                .debug_struct("DialFailed")
                .field("target", target)
                .finish(),
        }
    }
}

/// What a client counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientCounters {
    /// Dials refused: the space already has its socket, or [`MAX_CLIENT_SOCKETS`] are held.
    pub dials_refused: u64,
    /// Sends for a space without an open socket, dropped.
    pub unsent: u64,
    /// Dials made, the first of each space and every redial.
    pub dials: u64,
    /// Of those, dials again after a socket ended or a dial failed ([`REDIAL_BACKOFF`]).
    pub redials: u64,
    /// Spaces not dialled again after a close this side sent ([`redials_after`]).
    pub given_up: u64,
}

/// A space the client wants a socket for, and where its socket is at.
struct Wanted {
    node: NodeUrl,
    space: Space,
    link: Link,
    backoff: Backoff,
}

/// Where a wanted space's socket is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Dialled; the layer has not answered yet.
    Dialling,
    /// The socket `conn`: in its handshake while `opened` is `None`.
    Socket {
        conn: ConnId,
        opened: Option<Timestamp>,
    },
    /// To be dialled again at `at`.
    Waiting { at: Timestamp },
}

impl Wanted {
    fn conn(&self) -> Option<ConnId> {
        match self.link {
            Link::Socket { conn, .. } => Some(conn),
            _ => None,
        }
    }
}

/// The client side of node sockets, for every space, as a [`WsMachine`]; see the
/// [module docs](self).
pub struct NodeWsClient<R> {
    crypto: &'static dyn CryptoProvider,
    session: Session,
    rng: R,
    wanted: BTreeMap<String, Wanted>,
    sockets: Sockets<ClientSocket<Space, Es256Notes, R>>,
    counters: ClientCounters,
}

impl<R> fmt::Debug for NodeWsClient<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeWsClient")
            .field("did", &self.session.did())
            .field("spaces", &self.wanted.len())
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng + SeedableRng> NodeWsClient<R> {
    /// A client whose session key is `key`, with `note` its proof (sent in `who`, §9.1). `None`
    /// if `key` is not a P-256 secret.
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        key: P256Secret,
        note: Option<String>,
        rng: R,
    ) -> Option<Self> {
        Some(Self {
            crypto,
            session: Session::new(crypto, key, note)?,
            rng,
            wanted: BTreeMap::new(),
            sockets: Sockets::new(),
            counters: ClientCounters::default(),
        })
    }

    /// This client's session DID.
    pub fn did(&self) -> &str {
        self.session.did()
    }

    /// What the client counted.
    pub fn counters(&self) -> ClientCounters {
        self.counters
    }

    fn dial(&mut self, node: NodeUrl, space: Space) {
        let space_id = space.space_id();
        if self.wanted.contains_key(&space_id) || self.wanted.len() >= MAX_CLIENT_SOCKETS {
            self.counters.dials_refused += 1;
            return;
        }
        self.wanted.insert(
            space_id.clone(),
            Wanted {
                node,
                space,
                link: Link::Dialling,
                backoff: Backoff::new(REDIAL_BACKOFF),
            },
        );
        self.dial_now(&space_id);
    }

    /// Dials the wanted space `space_id` now.
    fn dial_now(&mut self, space_id: &str) {
        let Some(want) = self.wanted.get_mut(space_id) else {
            return;
        };
        want.link = Link::Dialling;
        self.counters.dials += 1;
        let url = want.node.dial_url(space_id);
        self.sockets.out.push_back(SocketOutput::Dial(NodeTarget {
            url,
            space_id: space_id.into(),
        }));
    }

    fn dialled(&mut self, now: Timestamp, conn: ConnId, target: NodeTarget) {
        let want = self
            .wanted
            .get_mut(&target.space_id)
            .filter(|w| w.link == Link::Dialling);
        let Some(want) = want else {
            // Closed before it opened.
            self.sockets.out.push_back(SocketOutput::Close {
                conn,
                code: 1000,
                reason: "",
            });
            return;
        };
        want.link = Link::Socket { conn, opened: None };
        let machine = ClientSocket::new(
            self.crypto,
            Es256Notes::new(self.crypto),
            R::from_rng(&mut self.rng),
            self.session.clone(),
            want.space.clone(),
            want.node.pin().map(String::from),
            now,
        );
        self.sockets.insert(conn, target.space_id, machine);
    }

    /// What the sockets reported since output `from`, for the wanted spaces: a socket that opened
    /// is marked so, and one that ended is dialled again or given up ([`redials_after`]).
    fn settle(&mut self, now: Timestamp, from: usize) {
        let news: Vec<(ConnId, Option<Option<u16>>)> = self
            .sockets
            .out
            .iter()
            .skip(from)
            .filter_map(|o| match o {
                SocketOutput::Event(NodeWsEvent::Opened { conn, .. }) => Some((*conn, None)),
                SocketOutput::Event(NodeWsEvent::Closed { conn, code, .. }) => {
                    Some((*conn, Some(*code)))
                }
                _ => None,
            })
            .collect();
        for (conn, closed) in news {
            let Some((space_id, want)) =
                self.wanted.iter_mut().find(|(_, w)| w.conn() == Some(conn))
            else {
                continue;
            };
            let space_id = space_id.clone();
            match closed {
                None => {
                    want.link = Link::Socket {
                        conn,
                        opened: Some(now),
                    }
                }
                Some(code) => self.ended(now, &space_id, code),
            }
        }
    }

    /// The socket or the dial of the wanted space `space_id` ended, with this side's close
    /// `code`: the space waits for its redial, or is given up.
    fn ended(&mut self, now: Timestamp, space_id: &str, code: Option<u16>) {
        if !redials_after(code) {
            self.wanted.remove(space_id);
            self.counters.given_up += 1;
            self.sockets
                .out
                .push_back(SocketOutput::Event(NodeWsEvent::GaveUp {
                    space_id: space_id.into(),
                    code,
                }));
            return;
        }
        let Some(want) = self.wanted.get_mut(space_id) else {
            return;
        };
        if let Link::Socket {
            opened: Some(since),
            ..
        } = want.link
            && now.saturating_duration_since(since) >= REDIAL_BACKOFF.max
        {
            want.backoff.reset();
        }
        let at = now.saturating_add(want.backoff.next_delay(&mut self.rng));
        want.link = Link::Waiting { at };
        self.sockets
            .out
            .push_back(SocketOutput::Event(NodeWsEvent::Redialling {
                space_id: space_id.into(),
                at,
            }));
    }

    /// The earliest redial due.
    fn next_redial(&self) -> Option<Timestamp> {
        self.wanted
            .values()
            .filter_map(|w| match w.link {
                Link::Waiting { at } => Some(at),
                _ => None,
            })
            .min()
    }

    fn close(&mut self, space_id: &str) {
        let Some(want) = self.wanted.remove(space_id) else {
            return;
        };
        if let Some(conn) = want.conn()
            && let Some((space_id, _)) = self.sockets.open.remove(&conn)
        {
            self.sockets.out.push_back(SocketOutput::Close {
                conn,
                code: 1000,
                reason: "",
            });
            self.sockets
                .out
                .push_back(SocketOutput::Event(NodeWsEvent::Closed {
                    conn,
                    space_id,
                    peer: self.sockets.peers.remove(&conn),
                    code: Some(1000),
                }));
        }
    }
}

impl<R: CryptoRng + SeedableRng> Machine for NodeWsClient<R> {
    type Input = ClientInput;
    type Output = SocketOutput;

    fn handle(&mut self, now: Timestamp, input: ClientInput) {
        let from = self.sockets.out.len();
        match input {
            ClientInput::Dial { node, space } => self.dial(node, space),
            ClientInput::Send {
                space_id,
                kind,
                payload,
            } => {
                let open = self.wanted.get(&space_id).and_then(Wanted::conn);
                match open {
                    Some(_) => self.sockets.send(now, &space_id, None, &kind, &payload),
                    None => self.counters.unsent += 1,
                }
            }
            ClientInput::Close { space_id } => self.close(&space_id),
            ClientInput::SendOn {
                conn,
                kind,
                payload,
            } => self.sockets.feed(now, conn, Input::Send { kind, payload }),
            ClientInput::CloseOn { conn } => {
                let space = self.sockets.open.get(&conn).map(|(s, _)| s.clone());
                if let Some(space_id) = space {
                    self.close(&space_id);
                }
            }
            ClientInput::Dialled { conn, target } => self.dialled(now, conn, target),
            ClientInput::Frame { conn, frame } => {
                if let Some(input) = frame_input(frame) {
                    self.sockets.feed(now, conn, input);
                }
            }
            ClientInput::Closed { conn } => self.sockets.closed(now, conn),
            ClientInput::DialFailed { target } => {
                self.sockets
                    .out
                    .push_back(SocketOutput::Event(NodeWsEvent::DialFailed {
                        space_id: target.space_id.clone(),
                    }));
                let dialling = self
                    .wanted
                    .get(&target.space_id)
                    .is_some_and(|w| w.link == Link::Dialling);
                if dialling {
                    // The node is not there (yet): as if it had ended the socket.
                    self.ended(now, &target.space_id, None);
                }
            }
        }
        self.settle(now, from);
    }

    fn poll(&mut self) -> Option<SocketOutput> {
        self.sockets.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let redial = self
            .next_redial()
            .map(|at| Wakeup::new(at, "node socket redial"));
        Wakeup::earliest(self.sockets.poll_timeout(), redial)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        let from = self.sockets.out.len();
        self.sockets.handle_timeout(now);
        self.settle(now, from);
        let due: Vec<String> = self
            .wanted
            .iter()
            .filter(|(_, w)| matches!(w.link, Link::Waiting { at } if at <= now))
            .map(|(s, _)| s.clone())
            .collect();
        for space_id in due {
            self.counters.redials += 1;
            self.dial_now(&space_id);
        }
    }
}

impl<R: CryptoRng + SeedableRng> WsMachine for NodeWsClient<R> {
    type Target = NodeTarget;
    type App = NodeWsEvent;

    fn upgrade(
        &mut self,
        _now: Timestamp,
        _conn: ConnId,
        _peer: &Peer,
        _request: &Request,
    ) -> Result<ClientInput, Refusal> {
        // A client listens on nothing; a host that hands it a listener is refused here.
        Err(Refusal {
            status: 404,
            reason: "not a node\n".into(),
        })
    }
    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<ClientInput> {
        Some(ClientInput::Frame { conn, frame })
    }
    fn closed(&mut self, conn: ConnId) -> Option<ClientInput> {
        Some(ClientInput::Closed { conn })
    }
    fn dialled(&mut self, conn: ConnId, target: NodeTarget) -> Option<ClientInput> {
        Some(ClientInput::Dialled { conn, target })
    }
    fn dial_failed(&mut self, target: NodeTarget) -> Option<ClientInput> {
        Some(ClientInput::DialFailed { target })
    }
    fn effect(&mut self, output: SocketOutput) -> Option<WsEffect<NodeTarget, NodeWsEvent>> {
        Some(output.effect(|t| t))
    }
}

/// What a [`Node`](node::Node) hears of a node socket event of either side: the socket's proven peer is a
/// peer of the room of its space ([`node::Input::NodeSocketOpened`] and the rest), as a data
/// channel's is once the mesh admits it. `None` for what the node has no input for (a let-go is
/// followed by the socket's close; a failed dial never opened).
pub fn node_input(crypto: &dyn CryptoProvider, event: NodeWsEvent) -> Option<node::Input> {
    Some(match event {
        NodeWsEvent::Opened {
            conn,
            space_id,
            peer,
        } => node::Input::NodeSocketOpened {
            conn,
            room: Room::of_space(crypto, &space_id),
            peer,
        },
        NodeWsEvent::Account { conn, account, .. } => {
            node::Input::NodeSocketAccount { conn, account }
        }
        NodeWsEvent::Message {
            conn,
            kind,
            payload,
            ..
        } => node::Input::NodeSocketMessage {
            conn,
            kind,
            payload,
        },
        NodeWsEvent::Closed { conn, .. } => node::Input::NodeSocketClosed { conn },
        _ => return None,
    })
}

/// The client's input for a [`Node`](node::Node)'s node socket output (`NodeSocketSend`,
/// `NodeSocketClose`); `None` for any other output, which stays the caller's.
pub fn client_input(output: &node::Output) -> Option<ClientInput> {
    match output {
        node::Output::NodeSocketSend {
            conn,
            kind,
            payload,
        } => Some(ClientInput::SendOn {
            conn: *conn,
            kind: kind.clone(),
            payload: payload.clone(),
        }),
        node::Output::NodeSocketClose { conn } => Some(ClientInput::CloseOn { conn: *conn }),
        _ => None,
    }
}

/// The input a client host's [`crate::host::Commander`] takes.
pub type ClientCommand = crate::ws::WsInput<NodeTarget, ClientInput>;

/// `client` over the WebSocket layer (`wss://` trusting `config`'s roots), its events going to
/// `deliver`, ready for any adapter. Feed it [`ClientInput::Dial`], [`ClientInput::Send`] and
/// [`ClientInput::Close`] through a [`crate::host::Commander`] (as [`ClientCommand`]s).
pub fn client_host<R: CryptoRng + SeedableRng, D: FnMut(NodeWsEvent)>(
    client: NodeWsClient<R>,
    config: WsConfig,
    deliver: D,
) -> Host<Ws<NodeWsClient<R>>, WsHooks<D>> {
    Host::new(Ws::new(client, config), WsHooks(deliver))
}

// ---------------------------------------------------------------------------------------------
// The node side (§5.3).

/// What a node's `/peer` endpoint is told besides frames.
#[derive(Debug)]
#[non_exhaustive]
pub enum PeerInput {
    /// An upgrade of `/peer` for `space_id` opened as `conn`.
    Opened {
        /// The socket.
        conn: ConnId,
        /// The space its query asked for ([`node_socket::peer_space`]).
        space_id: String,
    },
    /// A frame arrived.
    Frame {
        /// The socket.
        conn: ConnId,
        /// The frame.
        frame: Frame,
    },
    /// The socket closed.
    Closed {
        /// The socket.
        conn: ConnId,
    },
    /// The node's application sends a message of `space_id` to its client peers there, all or
    /// one.
    Send {
        /// The space.
        space_id: String,
        /// One client's session DID, or every open socket of the space.
        to: Option<String>,
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
}

/// The `/peer` endpoint of an always-on node (§5.3): its session, the spaces it holds, and one
/// [`NodeSocket`] per socket, at most [`MAX_PEER_SOCKETS`].
pub struct PeerEndpoint<R> {
    crypto: &'static dyn CryptoProvider,
    session: Session,
    rng: R,
    spaces: BTreeMap<String, Space>,
    sockets: Sockets<NodeSocket<Space, Es256Notes, R>>,
}

impl<R> fmt::Debug for PeerEndpoint<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerEndpoint")
            .field("did", &self.session.did())
            .field("spaces", &self.spaces.keys().collect::<Vec<_>>())
            .field("sockets", &self.sockets.open.len())
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng + SeedableRng> PeerEndpoint<R> {
    /// A node whose session key is `key`, with `note` its proof (sent in the welcome and in
    /// `who`, §6.1, §9.1), holding `spaces`. `None` if `key` is not a P-256 secret.
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        key: P256Secret,
        note: Option<String>,
        spaces: Vec<Space>,
        rng: R,
    ) -> Option<Self> {
        Some(Self {
            crypto,
            session: Session::new(crypto, key, note)?,
            rng,
            spaces: spaces.into_iter().map(|s| (s.space_id(), s)).collect(),
            sockets: Sockets::new(),
        })
    }

    /// The node's session DID.
    pub fn did(&self) -> &str {
        self.session.did()
    }

    /// Whether the upgrade `request` is for `/peer`, and for which space.
    pub fn route(request: &Request) -> Option<String> {
        node_socket::peer_space(&request.path)
    }

    /// Whether another socket may open (at most [`MAX_PEER_SOCKETS`]).
    pub fn has_room(&self) -> bool {
        self.sockets.open.len() < MAX_PEER_SOCKETS
    }

    /// The refusal of an upgrade when [`has_room`](Self::has_room) says no.
    pub fn full() -> Refusal {
        Refusal {
            status: 503,
            reason: "too many peer sockets\n".into(),
        }
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Timestamp, input: PeerInput) {
        match input {
            PeerInput::Opened { conn, space_id } => {
                let space = self.spaces.get(&space_id).cloned();
                let machine = NodeSocket::new(
                    self.crypto,
                    Es256Notes::new(self.crypto),
                    R::from_rng(&mut self.rng),
                    self.session.clone(),
                    &space_id,
                    space,
                    now,
                );
                self.sockets.insert(conn, space_id, machine);
            }
            PeerInput::Frame { conn, frame } => {
                let Some(input) = frame_input(frame) else {
                    return;
                };
                let before = self.sockets.out.len();
                self.sockets.feed(now, conn, input);
                self.look_again_on_connect(now, conn, before);
            }
            PeerInput::Closed { conn } => self.sockets.closed(now, conn),
            PeerInput::Send {
                space_id,
                to,
                kind,
                payload,
            } => self
                .sockets
                .send(now, &space_id, to.as_deref(), &kind, &payload),
        }
    }

    /// §6.3: "when a peer connects, it looks again at every peer it let in on a key that is no
    /// longer current": a socket of the space that just opened has every other socket of the
    /// space look again at its reader.
    fn look_again_on_connect(&mut self, now: Timestamp, conn: ConnId, before: usize) {
        let opened = self.sockets.out.iter().skip(before).find_map(|o| match o {
            SocketOutput::Event(NodeWsEvent::Opened { space_id, .. }) => Some(space_id.clone()),
            _ => None,
        });
        let Some(space_id) = opened else {
            return;
        };
        let others: Vec<ConnId> = self
            .sockets
            .open
            .iter()
            .filter(|(c, (s, _))| **c != conn && *s == space_id)
            .map(|(c, _)| *c)
            .collect();
        for other in others {
            self.sockets.feed(now, other, Input::AccessChanged);
        }
    }

    /// The next output.
    pub fn poll(&mut self) -> Option<SocketOutput> {
        self.sockets.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next wanted.
    pub fn poll_timeout(&self) -> Option<Wakeup> {
        self.sockets.poll_timeout()
    }

    /// Runs the sockets' due timers (handshake timeouts, the `who` grace).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.sockets.handle_timeout(now);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chacha20::ChaCha20Rng;
    use weft_proto::crypto::{default_provider, generate_p256};
    use weft_proto::minca::node_socket::HANDSHAKE_TIMEOUT;
    use weft_proto::minca::space_access::MemorySpace;

    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_800_000_000);
    const SPACE: &str = "a space";
    const CONN: ConnId = ConnId(1);

    fn key(seed: u64) -> P256Secret {
        generate_p256(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
    }

    fn did(key: &P256Secret) -> String {
        Session::new(default_provider(), key.clone(), None)
            .unwrap()
            .did()
            .to_owned()
    }

    fn client() -> NodeWsClient<ChaCha20Rng> {
        NodeWsClient::new(
            default_provider(),
            key(2),
            None,
            ChaCha20Rng::seed_from_u64(3),
        )
        .unwrap()
    }

    /// The node of `key(1)`, holding [`SPACE`].
    fn node() -> PeerEndpoint<ChaCha20Rng> {
        let space: Space = Arc::new(MemorySpace::public(SPACE));
        PeerEndpoint::new(
            default_provider(),
            key(1),
            None,
            vec![space],
            ChaCha20Rng::seed_from_u64(4),
        )
        .unwrap()
    }

    /// The client asks for `space` on the node at loopback, pinned to `pin` if given.
    fn want(c: &mut NodeWsClient<ChaCha20Rng>, space: &str, pin: Option<&str>) {
        let url = match pin {
            Some(did) => format!("ws://127.0.0.1:1/peer#{did}"),
            None => "ws://127.0.0.1:1/peer".into(),
        };
        let dial = ClientInput::Dial {
            node: NodeUrl::parse(&url).unwrap(),
            space: Arc::new(MemorySpace::public(space)),
        };
        c.handle(T0, dial);
    }

    /// What the client asks for now.
    fn outputs(c: &mut NodeWsClient<ChaCha20Rng>) -> Vec<SocketOutput> {
        core::iter::from_fn(|| c.poll()).collect()
    }

    fn dials(outs: &[SocketOutput]) -> Vec<NodeTarget> {
        outs.iter()
            .filter_map(|o| match o {
                SocketOutput::Dial(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    }

    /// When the redial the outputs announce is due.
    fn redial_at(outs: &[SocketOutput]) -> Option<Timestamp> {
        outs.iter().find_map(|o| match o {
            SocketOutput::Event(NodeWsEvent::Redialling { at, .. }) => Some(*at),
            _ => None,
        })
    }

    fn gave_up(outs: &[SocketOutput]) -> Option<Option<u16>> {
        outs.iter().find_map(|o| match o {
            SocketOutput::Event(NodeWsEvent::GaveUp { code, .. }) => Some(*code),
            _ => None,
        })
    }

    /// The client's dial `target` opens as [`CONN`] at `now` and the node takes the socket;
    /// frames cross both ways until neither side says more. The client's outputs other than
    /// frames.
    fn connect(
        now: Timestamp,
        c: &mut NodeWsClient<ChaCha20Rng>,
        n: &mut PeerEndpoint<ChaCha20Rng>,
        target: NodeTarget,
    ) -> Vec<SocketOutput> {
        let space_id = target.space_id.clone();
        c.handle(now, ClientInput::Dialled { conn: CONN, target });
        n.handle(
            now,
            PeerInput::Opened {
                conn: CONN,
                space_id,
            },
        );
        let mut seen = Vec::new();
        loop {
            let mut moved = false;
            while let Some(o) = c.poll() {
                moved = true;
                match o {
                    SocketOutput::Text { conn, text } => {
                        let frame = Frame::Text(text);
                        n.handle(now, PeerInput::Frame { conn, frame });
                    }
                    SocketOutput::Binary { conn, bytes } => {
                        let frame = Frame::Binary(bytes);
                        n.handle(now, PeerInput::Frame { conn, frame });
                    }
                    SocketOutput::Close { conn, .. } => n.handle(now, PeerInput::Closed { conn }),
                    other => seen.push(other),
                }
            }
            while let Some(o) = n.poll() {
                moved = true;
                match o {
                    SocketOutput::Text { conn, text } => {
                        let frame = Frame::Text(text);
                        c.handle(now, ClientInput::Frame { conn, frame });
                    }
                    SocketOutput::Binary { conn, bytes } => {
                        let frame = Frame::Binary(bytes);
                        c.handle(now, ClientInput::Frame { conn, frame });
                    }
                    SocketOutput::Close { conn, .. } => c.handle(now, ClientInput::Closed { conn }),
                    _ => {}
                }
            }
            if !moved {
                return seen;
            }
        }
    }

    fn opened(outs: &[SocketOutput]) -> bool {
        outs.iter()
            .any(|o| matches!(o, SocketOutput::Event(NodeWsEvent::Opened { .. })))
    }

    /// The delay `at` is after `now`, within the jittered ceiling `ceiling` ([`Backoff`]: equal
    /// jitter, `[ceiling / 2, ceiling]`).
    fn within(now: Timestamp, at: Timestamp, ceiling: Duration) {
        let delay = at.saturating_duration_since(now);
        assert!(
            delay >= ceiling / 2 && delay <= ceiling,
            "a delay of {delay:?} for a ceiling of {ceiling:?}"
        );
    }

    #[test]
    fn a_node_socket_the_node_ends_is_dialled_again_after_the_backoff_and_not_before() {
        let (mut c, mut n) = (client(), node());
        want(&mut c, SPACE, Some(&did(&key(1))));
        let first = dials(&outputs(&mut c));
        assert_eq!(first.len(), 1);
        assert!(opened(&connect(T0, &mut c, &mut n, first[0].clone())));

        // The node restarts: the transport ends the socket.
        let t1 = T0.saturating_add(Duration::from_secs(5));
        c.handle(t1, ClientInput::Closed { conn: CONN });
        let outs = outputs(&mut c);
        assert!(outs.iter().any(|o| matches!(o,
            SocketOutput::Event(NodeWsEvent::Closed { peer: Some(p), code: None, .. })
                if *p == did(&key(1)))));
        let at = redial_at(&outs).expect("a redial is due");
        within(t1, at, REDIAL_BACKOFF.initial);
        assert_eq!(c.poll_timeout().map(|w| w.at), Some(at));

        c.handle_timeout(at.saturating_sub(Duration::from_millis(1)));
        assert!(dials(&outputs(&mut c)).is_empty(), "not before its time");
        c.handle_timeout(at);
        assert_eq!(dials(&outputs(&mut c)), first, "the same URL, pin stripped");
        let counters = c.counters();
        assert_eq!((counters.dials, counters.redials), (2, 1));

        // The redial opens like the first dial.
        let again = connect(at, &mut c, &mut n, first[0].clone());
        assert!(opened(&again));
    }

    #[test]
    fn a_dial_that_fails_is_tried_again_on_a_doubling_ceiling_however_many_fail() {
        let mut c = client();
        want(&mut c, SPACE, None);
        let mut target = dials(&outputs(&mut c)).remove(0);
        let mut now = T0;
        let mut ceiling = REDIAL_BACKOFF.initial;
        for _ in 0..8 {
            c.handle(now, ClientInput::DialFailed { target });
            let at = redial_at(&outputs(&mut c)).expect("dialled again");
            within(now, at, ceiling);
            ceiling = (ceiling * 2).min(REDIAL_BACKOFF.max);
            now = at;
            c.handle_timeout(now);
            target = dials(&outputs(&mut c)).remove(0);
        }
        let counters = c.counters();
        assert_eq!(
            (counters.dials, counters.redials, counters.given_up),
            (9, 8, 0)
        );
    }

    #[test]
    fn a_welcome_refused_by_the_pin_with_4002_is_not_dialled_again() {
        let (mut c, mut n) = (client(), node());
        want(&mut c, SPACE, Some(&did(&key(9))));
        let target = dials(&outputs(&mut c)).remove(0);
        let outs = connect(T0, &mut c, &mut n, target);
        assert!(!opened(&outs));
        assert_eq!(gave_up(&outs), Some(Some(PROTOCOL_ERROR.code)));
        assert_eq!(redial_at(&outs), None);
        assert_eq!(c.poll_timeout(), None, "nothing left to wake for");
        c.handle_timeout(T0.saturating_add(Duration::from_secs(3600)));
        assert!(dials(&outputs(&mut c)).is_empty());
        let counters = c.counters();
        assert_eq!((counters.dials, counters.given_up), (1, 1));

        // Given up, the space is no longer wanted: the application may dial it anew.
        want(&mut c, SPACE, Some(&did(&key(1))));
        assert_eq!(dials(&outputs(&mut c)).len(), 1);
    }

    #[test]
    fn a_space_the_node_refuses_is_dialled_again_as_the_refusal_may_not_last() {
        let (mut c, mut n) = (client(), node());
        want(&mut c, "a space the node does not hold", None);
        let target = dials(&outputs(&mut c)).remove(0);
        let outs = connect(T0, &mut c, &mut n, target);
        // The node's 4003 reaches the client as the socket ending under it.
        assert!(!opened(&outs));
        assert!(outs.iter().any(|o| matches!(
            o,
            SocketOutput::Event(NodeWsEvent::Closed {
                peer: None,
                code: None,
                ..
            })
        )));
        assert_eq!(gave_up(&outs), None);
        within(T0, redial_at(&outs).unwrap(), REDIAL_BACKOFF.initial);
    }

    #[test]
    fn the_schedule_starts_over_only_after_a_socket_stayed_open_for_its_ceiling() {
        let (mut c, mut n) = (client(), node());
        want(&mut c, SPACE, None);
        let mut target = dials(&outputs(&mut c)).remove(0);
        // Five failed dials take the ceiling to 1 s × 2⁵ = 32 s, capped at 30 s.
        let mut now = T0;
        for _ in 0..5 {
            c.handle(now, ClientInput::DialFailed { target });
            now = redial_at(&outputs(&mut c)).unwrap();
            c.handle_timeout(now);
            target = dials(&outputs(&mut c)).remove(0);
        }
        assert!(opened(&connect(now, &mut c, &mut n, target.clone())));

        // Open for less than the ceiling: the schedule goes on where it was.
        let short = now.saturating_add(REDIAL_BACKOFF.max - Duration::from_secs(1));
        n.handle(short, PeerInput::Closed { conn: CONN });
        c.handle(short, ClientInput::Closed { conn: CONN });
        let at = redial_at(&outputs(&mut c)).unwrap();
        within(short, at, REDIAL_BACKOFF.max);
        c.handle_timeout(at);
        target = dials(&outputs(&mut c)).remove(0);
        assert!(opened(&connect(at, &mut c, &mut n, target)));

        // Open for the ceiling: the next loss is redialled as soon as the first.
        let long = at.saturating_add(REDIAL_BACKOFF.max);
        c.handle(long, ClientInput::Closed { conn: CONN });
        within(
            long,
            redial_at(&outputs(&mut c)).unwrap(),
            REDIAL_BACKOFF.initial,
        );
    }

    #[test]
    fn closing_a_space_that_waits_for_its_redial_dials_it_no_more() {
        let mut c = client();
        want(&mut c, SPACE, None);
        let target = dials(&outputs(&mut c)).remove(0);
        c.handle(T0, ClientInput::DialFailed { target });
        assert!(redial_at(&outputs(&mut c)).is_some());
        c.handle(
            T0,
            ClientInput::Close {
                space_id: SPACE.into(),
            },
        );
        assert_eq!(c.poll_timeout(), None);
        c.handle_timeout(T0.saturating_add(REDIAL_BACKOFF.max));
        assert!(dials(&outputs(&mut c)).is_empty());
    }

    #[test]
    fn only_this_sides_4002_and_4003_end_the_redials() {
        // The node or the transport ended it: the node restarting, its refusal, its let-go.
        assert!(redials_after(None));
        assert!(!redials_after(Some(PROTOCOL_ERROR.code)));
        assert!(!redials_after(Some(REFUSED.code)));
        assert!(redials_after(Some(HANDSHAKE_TIMEOUT.code)));
        assert!(redials_after(Some(node_socket::TOO_BIG.code)));
        assert!(redials_after(Some(node_socket::LET_GO.code)));
    }
}
