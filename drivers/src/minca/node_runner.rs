//! `weft node`'s engine: one [`Node`] machine (relay client, rendezvous and mesh, Minca 04 Network
//! §2–§9) on real sockets, in one loop (the transports of §5.1 and §1.4).
//!
//! The runner decides nothing. [`NodeMachine`] puts the two transports a [`Node`] asks for
//! around it:
//!
//! - relay sockets: the node's `Dial`, `RelaySend` and `RelayClose` become the WebSocket layer's
//!   dials, text frames and closes ([`crate::ws`]), and what the sockets do comes back as
//!   `RelayOpened`, `RelayText`, `RelayClosed` and `RelayDialFailed`, in the node's socket names;
//! - peer connections: `CreateOffer`, `CreateAnswer`, `ApplyAnswer`, `PeerSend` and `PeerClose` go
//!   to the str0m [`Transport`] (§5.1), whose `LocalDescription`, `Opened`, `Closed` and `Frame`
//!   go back to the node; its datagrams go out on one UDP socket.
//!
//! Everything else the node says is handed to the application as a [`NodeEvent`]. The loop is the
//! smol adapter's ([`crate::smol::run_commanded`]): it feeds at most
//! [`MAX_EVENTS_PER_PASS`](crate::host::MAX_EVENTS_PER_PASS) events a pass and pushes a deadline
//! that does not advance forward by [`STALL_STEP`](crate::host::STALL_STEP); the transport serves
//! at most [`MAX_TIMEOUTS_PER_PASS`](super::webrtc::transport::MAX_TIMEOUTS_PER_PASS) connections'
//! timers a call, and the UDP reader hands over at most [`MAX_DATAGRAMS_PER_PASS`] datagrams before
//! it lets the loop run. Datagrams and the application's commands reach the machine through the
//! host's command channel, so all of it runs on one thread.
//!
//! TURN servers (§5.1, §10): the runner passes the node's current `ice` to the transport with
//! each new connection ([`NodeMachine`]'s `route`). When the node learns a new offer, the host
//! names in it ([`Transport::learn_turn_offer`]) are looked up by a [`TurnResolver`] thread, never
//! on the loop, and the answers come back through the host's command channel
//! ([`RunnerInput::TurnResolved`]) to the transport, which uses a named server from then on.
//!
//! Identity: a fresh session key every run, and a note made out to it by the account's root key
//! (weft's note format, [`weft_proto::minca::note`]), valid for [`NOTE_LIFETIME`]; the account
//! key is fresh too unless [`key_file::load_or_make`](super::key_file::load_or_make) reads one
//! from a file.
//!
//! Always-on nodes (`--node URL`, §5.2): one node WebSocket client ([`NodeWsClient`]) per node
//! URL, each on its own WebSocket host (frames up to the node socket's bound, not the relay's) in
//! the same loop, dialling the node once for every space joined. Their events come back as
//! [`RunnerInput::NodeSocket`] and enter the node as [`node_ws::node_input`] says; the node's
//! `NodeSocketSend` and `NodeSocketClose` go out to the client as [`node_ws::client_input`] says.
//! The node knows these sockets under names of its own (`NodeSocketNames`), since each client
//! numbers its sockets from its own counter. A socket that ends, or a dial that fails, is dialled
//! again by its client ([`node_ws::REDIAL_BACKOFF`], [`node_ws::redials_after`]); the new socket
//! is a new name, and the node admits its peer again.
//!
//! The chat's format is here, in one place for `weft node` and the always-on node of `weft relay
//! --node-key`: a line of stdin is a live message's payload ([`line_payload`], [`read_lines`]),
//! and each event is one JSON line on stdout ([`NodeEvent::to_json`], [`print_event`]).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use serde_json::{Value, json};
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::crypto::{CryptoProvider, P256Secret, generate_p256};
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::mesh::{self, RoomKind};
use weft_proto::minca::node::{self, Join, Node, NodeConfig};
use weft_proto::minca::node_url::NodeUrl;
use weft_proto::minca::note::{CMD_ALL, Es256Notes, Note};
use weft_proto::minca::relay_client::RelayState;
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::room::{MAX_ROOMS, Room};
use weft_proto::minca::space_access::MemorySpace;

use super::node_ws::{
    self, ClientCommand, ClientCounters, ClientInput, NodeWsClient, NodeWsEvent, socket_config,
};
use super::relay_client::{Dial, SocketNames, client_config, close};
use super::webrtc::transport::{Datagram, Transport};
use super::webrtc::turn::MAX_TURN_NAMES;
use super::webrtc::udp::{MAX_DATAGRAM_BYTES, MAX_DATAGRAMS_PER_PASS};
use crate::host::{Commander, Host, Peer, commands};
use crate::ws::{Frame, Refusal, Request, Ws, WsEffect, WsHooks, WsInput, WsMachine};

/// How long the note a node makes for its session key is valid. A session lives as long as the
/// process; a day covers any demo or chat session and keeps a leaked note short-lived. (01
/// Identity, which would set it, was not handed over.)
pub const NOTE_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Where `weft node` binds its WebRTC UDP socket when told nothing: loopback, so that nodes on
/// this machine meet out of the box. A host candidate must be a real address (not a wildcard),
/// so meeting peers on other machines takes `--bind <this machine's address>:0`.
pub const DEFAULT_BIND: &str = "127.0.0.1:0";

/// The most always-on nodes (`--node URL`) one runner dials. Each is a WebSocket host of its own
/// holding a socket per space (§5.2 names no number); a handful of a person's always-on nodes is
/// the use, and the bound keeps the runner's socket names at most this many times
/// [`node_ws::MAX_CLIENT_SOCKETS`].
pub const MAX_NODE_URLS: usize = 8;

/// What the application tells a running node.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunnerInput {
    /// Join a public space (§6.2), showing `note` in `who` (§9.1).
    JoinSpace {
        /// The space id.
        space: String,
        /// This session's note.
        note: Option<String>,
    },
    /// An input for the node machine itself.
    Node(node::Input),
    /// A live message (§9.2) to every admitted peer of every space joined.
    Live(Value),
    /// What the node WebSocket client of always-on node number `node` (its place among
    /// [`NodeOptions::nodes`]) reported.
    NodeSocket {
        /// Which node URL's client.
        node: usize,
        /// What it reported.
        event: NodeWsEvent,
    },
    /// What looking up a TURN server's host name found ([`RunnerApp::LookUpTurn`]): its
    /// addresses, none when the lookup failed.
    TurnResolved {
        /// The host name.
        name: String,
        /// The addresses found.
        addrs: Vec<IpAddr>,
    },
    /// A datagram arrived on the WebRTC socket.
    Datagram {
        /// Who sent it.
        from: SocketAddr,
        /// Its bytes.
        bytes: Vec<u8>,
    },
}

/// What a running node tells the application, in the order the node said it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A peer was admitted in a space's room (§7.2).
    Admitted {
        /// The space.
        space: String,
        /// The peer's session DID.
        peer: String,
    },
    /// A peer is no longer a peer in a space's room.
    Departed {
        /// The space.
        space: String,
        /// The peer's session DID.
        peer: String,
    },
    /// The account behind a peer, from its `who` (§6.4, §9.1); `None` is nobody.
    Account {
        /// The space.
        space: String,
        /// The peer's session DID.
        peer: String,
        /// The account DID.
        account: Option<String>,
    },
    /// A message of an admitted peer (§9), with the account its `who` showed.
    Message {
        /// The space.
        space: String,
        /// The sender's session DID (the connection's peer, §7.1).
        from: String,
        /// The sender's account, if its `who` showed one.
        account: Option<String>,
        /// The message type (`live`, or another the space speaks).
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// A relay socket changed state.
    Relay {
        /// The relay.
        relay: String,
        /// Whether it is open now.
        open: bool,
    },
    /// Anything else the node reported, for logs.
    Other(String),
}

impl NodeEvent {
    /// What an always-on node's `/peer` socket event ([`node_ws::PeerEndpoint`]) is to the
    /// node's application: its client is a peer of the socket's space from the welcome to the
    /// close, as a mesh peer is from admission to departure. A let-go is followed by the close,
    /// which says it; what is not a peer's (a refused hello's close) is `Other`.
    pub fn from_peer_socket(event: NodeWsEvent) -> Option<Self> {
        Some(match event {
            NodeWsEvent::Opened { space_id, peer, .. } => Self::Admitted {
                space: space_id,
                peer,
            },
            NodeWsEvent::Account {
                space_id,
                peer,
                account,
                ..
            } => Self::Account {
                space: space_id,
                peer,
                account,
            },
            NodeWsEvent::Message {
                space_id,
                peer,
                account,
                kind,
                payload,
                ..
            } => Self::Message {
                space: space_id,
                from: peer,
                account,
                kind,
                payload,
            },
            NodeWsEvent::Closed {
                space_id,
                peer: Some(peer),
                ..
            } => Self::Departed {
                space: space_id,
                peer,
            },
            NodeWsEvent::LetGo { .. } => return None,
            other => Self::Other(format!("{other:?}")),
        })
    }

    /// The event as one JSON object, the shape `weft node` prints a line of.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Admitted { space, peer } => {
                json!({"event": "admitted", "space": space, "peer": peer})
            }
            Self::Departed { space, peer } => {
                json!({"event": "departed", "space": space, "peer": peer})
            }
            Self::Account {
                space,
                peer,
                account,
            } => json!({"event": "account", "space": space, "peer": peer, "account": account}),
            Self::Message {
                space,
                from,
                account,
                kind,
                payload,
            } => json!({
                "event": kind, "space": space, "from": from, "account": account,
                "payload": payload,
            }),
            Self::Relay { relay, open } => json!({"event": "relay", "relay": relay, "open": open}),
            Self::Other(what) => json!({"event": "other", "what": what}),
        }
    }
}

/// What the machine asks of its host.
#[derive(Debug)]
pub enum RunnerOutput {
    /// An output of the node for the relay sockets or the application.
    Node(node::Output),
    /// A datagram for the WebRTC socket.
    Transmit(Datagram),
    /// End a relay socket whose dial opened after the node gave up on it.
    Abandon(ConnId),
    /// An event of the runner's own for the application.
    Event(NodeEvent),
    /// Look these TURN host names up, off the loop.
    LookUpTurn(Vec<String>),
}

/// What the machine hands the application hook: events, and datagrams to send.
#[derive(Debug)]
pub enum RunnerApp {
    /// An event for the application.
    Event(NodeEvent),
    /// A datagram for the WebRTC socket.
    Transmit(Datagram),
    /// An input for the node WebSocket client of always-on node number `node`.
    Client {
        /// Which node URL's client.
        node: usize,
        /// What it is told.
        input: ClientInput,
    },
    /// TURN host names to look up off the loop (a [`TurnResolver`]), each answer coming back
    /// as [`RunnerInput::TurnResolved`].
    LookUpTurn(Vec<String>),
}

/// The most addresses kept of one TURN host name's lookup: the transport uses one, of its
/// socket's family, so a few of each family are plenty.
pub const MAX_TURN_ADDRS: usize = 8;

/// Looks TURN servers' host names up on a thread of its own, so the node's loop never waits on
/// DNS (the system's resolver, `getaddrinfo`, which also reads `/etc/hosts`). One name at a time:
/// an offer names a handful of servers, at most [`MAX_TURN_NAMES`] names are asked at once, and
/// as many wait; the thread ends when the resolver is dropped.
#[derive(Debug)]
pub struct TurnResolver {
    jobs: std::sync::mpsc::SyncSender<String>,
}

impl TurnResolver {
    /// Starts the thread; `answer` gets each name asked and the addresses found for it (at most
    /// [`MAX_TURN_ADDRS`], none when the lookup failed), on that thread.
    pub fn start(mut answer: impl FnMut(String, Vec<IpAddr>) + Send + 'static) -> io::Result<Self> {
        let (jobs, names) = std::sync::mpsc::sync_channel::<String>(MAX_TURN_NAMES);
        std::thread::Builder::new()
            .name("weft-turn-dns".into())
            .spawn(move || {
                for name in names {
                    let addrs = look_up(&name);
                    answer(name, addrs);
                }
            })?;
        Ok(Self { jobs })
    }

    /// Asks for `name`'s addresses; `false` when [`MAX_TURN_NAMES`] are waiting already (or the
    /// thread is gone), and the name is not looked up.
    pub fn ask(&self, name: String) -> bool {
        self.jobs.try_send(name).is_ok()
    }
}

/// `name`'s addresses, each once, at most [`MAX_TURN_ADDRS`]; none when the lookup fails.
fn look_up(name: &str) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = Vec::new();
    for a in (name, 0).to_socket_addrs().into_iter().flatten() {
        if addrs.len() >= MAX_TURN_ADDRS {
            break;
        }
        if !addrs.contains(&a.ip()) {
            addrs.push(a.ip());
        }
    }
    addrs
}

/// The node sockets (§5.2) under two names: the node's own, and (which client, the client's).
/// An entry lives from the socket's `Opened` to its `Closed`, so each client's bound
/// ([`node_ws::MAX_CLIENT_SOCKETS`]) and [`MAX_NODE_URLS`] bound the tables.
#[derive(Debug, Default)]
struct NodeSocketNames {
    to_client: BTreeMap<ConnId, (usize, ConnId)>,
    to_node: BTreeMap<(usize, ConnId), ConnId>,
    next: u64,
}

impl NodeSocketNames {
    /// The node's name for a client socket that just opened.
    fn open(&mut self, client: (usize, ConnId)) -> ConnId {
        if let Some(conn) = self.to_node.get(&client) {
            return *conn;
        }
        let conn = ConnId(self.next);
        self.next += 1;
        self.to_node.insert(client, conn);
        self.to_client.insert(conn, client);
        conn
    }

    fn close(&mut self, client: (usize, ConnId)) -> Option<ConnId> {
        let conn = self.to_node.remove(&client)?;
        self.to_client.remove(&conn);
        Some(conn)
    }
}

/// A [`Node`] with its WebRTC transport, as a [`WsMachine`]; see the [module docs](self).
pub struct NodeMachine {
    node: Node<ChaCha20Rng>,
    transport: Transport,
    crypto: &'static dyn CryptoProvider,
    spaces: BTreeMap<Room, String>,
    names: SocketNames,
    node_sockets: NodeSocketNames,
    out: VecDeque<RunnerOutput>,
}

impl std::fmt::Debug for NodeMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMachine")
            .field("node", &self.node)
            .field("spaces", &self.spaces.len())
            .finish_non_exhaustive()
    }
}

impl NodeMachine {
    /// The machine over `node` and `transport`, with no space joined yet.
    pub fn new(
        node: Node<ChaCha20Rng>,
        transport: Transport,
        crypto: &'static dyn CryptoProvider,
    ) -> Self {
        Self {
            node,
            transport,
            crypto,
            spaces: BTreeMap::new(),
            names: SocketNames::default(),
            node_sockets: NodeSocketNames::default(),
            out: VecDeque::new(),
        }
    }

    /// The node, for status and counters.
    pub fn node(&self) -> &Node<ChaCha20Rng> {
        &self.node
    }

    /// The WebRTC transport, for status and counters.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Moves outputs between the node and the transport until neither has any; what is for the
    /// relay sockets or the application is queued for the host in order.
    fn pump(&mut self, now: Timestamp) {
        loop {
            let mut moved = false;
            while let Some(out) = self.node.poll() {
                moved = true;
                self.route(now, out);
            }
            while let Some(event) = self.transport.poll_event() {
                moved = true;
                if let Some(input) = node::Input::from_transport(event) {
                    self.node.handle(now, input);
                }
            }
            while let Some(d) = self.transport.poll_transmit() {
                self.out.push_back(RunnerOutput::Transmit(d));
            }
            if !moved {
                break;
            }
        }
        // A new TURN offer (§3 `ice`): its host names are looked up again, off the loop.
        let names = self.transport.learn_turn_offer(self.node.ice_servers());
        if !names.is_empty() {
            self.out.push_back(RunnerOutput::LookUpTurn(names));
        }
    }

    fn event(&self, out: node::Output) -> Option<NodeEvent> {
        let space = |room: &Room| self.spaces.get(room).cloned().unwrap_or_default();
        Some(match out {
            node::Output::Admitted { room, peer } => NodeEvent::Admitted {
                space: space(&room),
                peer,
            },
            node::Output::Departed { room, peer } | node::Output::LetGo { room, peer, .. } => {
                NodeEvent::Departed {
                    space: space(&room),
                    peer,
                }
            }
            node::Output::Account {
                room,
                peer,
                account,
            } => NodeEvent::Account {
                space: space(&room),
                peer,
                account,
            },
            node::Output::Deliver {
                room,
                peer,
                kind,
                payload,
            } => NodeEvent::Message {
                account: self
                    .node
                    .mesh()
                    .account(room.as_str(), &peer)
                    .map(String::from),
                space: space(&room),
                from: peer,
                kind,
                payload,
            },
            node::Output::RelayState { relay, state } => NodeEvent::Relay {
                relay: relay.as_str().into(),
                open: state == RelayState::Open,
            },
            node::Output::Reachable(_) => return None,
            other => NodeEvent::Other(format!("{other:?}")),
        })
    }

    /// A node socket event of client `client` for the node, under the node's name for the
    /// socket; an event of a socket the node never heard open is the client's alone.
    fn node_socket(&mut self, now: Timestamp, client: usize, event: NodeWsEvent) {
        let renamed = match event {
            NodeWsEvent::Opened {
                conn,
                space_id,
                peer,
            } => NodeWsEvent::Opened {
                conn: self.node_sockets.open((client, conn)),
                space_id,
                peer,
            },
            NodeWsEvent::Closed {
                conn,
                space_id,
                peer,
                code,
            } => match self.node_sockets.close((client, conn)) {
                Some(conn) => NodeWsEvent::Closed {
                    conn,
                    space_id,
                    peer,
                    code,
                },
                None => return,
            },
            NodeWsEvent::Account {
                conn,
                space_id,
                peer,
                account,
            } => match self.node_sockets.to_node.get(&(client, conn)) {
                Some(conn) => NodeWsEvent::Account {
                    conn: *conn,
                    space_id,
                    peer,
                    account,
                },
                None => return,
            },
            NodeWsEvent::Message {
                conn,
                space_id,
                peer,
                account,
                kind,
                payload,
            } => match self.node_sockets.to_node.get(&(client, conn)) {
                Some(conn) => NodeWsEvent::Message {
                    conn: *conn,
                    space_id,
                    peer,
                    account,
                    kind,
                    payload,
                },
                None => return,
            },
            other => {
                self.out
                    .push_back(RunnerOutput::Event(NodeEvent::Other(format!("{other:?}"))));
                return;
            }
        };
        if let Some(input) = node_ws::node_input(self.crypto, renamed) {
            self.node.handle(now, input);
        }
    }

    /// The node's output for a node socket as its client's input, under the client's name.
    fn client_input(&self, out: &node::Output) -> Option<RunnerApp> {
        let mut input = node_ws::client_input(out)?;
        let conn = match &mut input {
            ClientInput::SendOn { conn, .. } | ClientInput::CloseOn { conn } => conn,
            _ => return None,
        };
        let (client, theirs) = *self.node_sockets.to_client.get(conn)?;
        *conn = theirs;
        Some(RunnerApp::Client {
            node: client,
            input,
        })
    }

    /// The transport's share of the node's outputs goes to the transport, as the mesh outputs it
    /// takes; any other output is queued for the host.
    fn route(&mut self, now: Timestamp, out: node::Output) {
        // A new connection takes the TURN servers the node holds now (§5.1, §10).
        let mut ice = None;
        let peer = match out {
            node::Output::CreateOffer {
                conn,
                peer,
                ice: servers,
            } => {
                ice = servers;
                mesh::Output::CreateOffer { conn, peer }
            }
            node::Output::CreateAnswer {
                conn,
                peer,
                offer,
                ice: servers,
            } => {
                ice = servers;
                mesh::Output::CreateAnswer { conn, peer, offer }
            }
            node::Output::ApplyAnswer { conn, answer } => {
                mesh::Output::ApplyAnswer { conn, answer }
            }
            node::Output::PeerSend { conn, bytes } => mesh::Output::Send { conn, bytes },
            node::Output::PeerClose { conn } => mesh::Output::Close { conn },
            other => {
                self.out.push_back(RunnerOutput::Node(other));
                return;
            }
        };
        // Every one of these is the transport's: nothing comes back.
        let _ = self
            .transport
            .handle_mesh_output_with_ice(now, peer, ice.as_ref());
    }
}

impl Machine for NodeMachine {
    type Input = RunnerInput;
    type Output = RunnerOutput;

    fn handle(&mut self, now: Timestamp, input: RunnerInput) {
        match input {
            RunnerInput::JoinSpace { space, note } => {
                let join = Join::space(self.crypto, &space, RoomKind::PublicSpace, note);
                // The node refuses a join past its own bound, so the names stay within it too.
                if self.spaces.len() < MAX_ROOMS || self.spaces.contains_key(&join.room) {
                    self.spaces.insert(join.room.clone(), space);
                }
                self.node.handle(now, node::Input::Join(join));
            }
            RunnerInput::Node(input) => self.node.handle(now, input),
            RunnerInput::Live(payload) => {
                let rooms: Vec<Room> = self.spaces.keys().cloned().collect();
                for room in rooms {
                    let send = node::Input::Send {
                        room,
                        to: None,
                        kind: LIVE.into(),
                        payload: payload.clone(),
                    };
                    self.node.handle(now, send);
                }
            }
            RunnerInput::NodeSocket { node, event } => self.node_socket(now, node, event),
            RunnerInput::TurnResolved { name, addrs } => {
                self.transport.turn_name_resolved(&name, &addrs)
            }
            RunnerInput::Datagram { from, bytes } => {
                self.transport.handle_datagram(now, from, &bytes)
            }
        }
        self.pump(now);
    }

    fn poll(&mut self) -> Option<RunnerOutput> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        Wakeup::earliest(self.node.poll_timeout(), self.transport.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.node.poll_timeout().is_some_and(|w| w.at <= now) {
            self.node.handle_timeout(now);
        }
        if self.transport.poll_timeout().is_some_and(|w| w.at <= now) {
            self.transport.handle_timeout(now);
        }
        self.pump(now);
    }
}

impl WsMachine for NodeMachine {
    type Target = Dial;
    type App = RunnerApp;

    fn upgrade(
        &mut self,
        _now: Timestamp,
        _conn: ConnId,
        _peer: &Peer,
        _request: &Request,
    ) -> Result<RunnerInput, Refusal> {
        Err(Refusal {
            status: 404,
            reason: "a Minca node runner accepts no sockets".into(),
        })
    }

    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<RunnerInput> {
        let conn = self.names.client(conn)?;
        match frame {
            Frame::Text(text) => Some(RunnerInput::Node(node::Input::RelayText {
                conn,
                text: text.into(),
            })),
            // A relay speaks text; liveness is the relay client's own `ping`.
            _ => None,
        }
    }

    fn closed(&mut self, conn: ConnId) -> Option<RunnerInput> {
        let conn = self.names.closed(conn)?;
        Some(RunnerInput::Node(node::Input::RelayClosed { conn }))
    }

    fn dialled(&mut self, host: ConnId, target: Dial) -> Option<RunnerInput> {
        if !self.names.dialled(target.conn, host) {
            self.out.push_back(RunnerOutput::Abandon(host));
            return None;
        }
        Some(RunnerInput::Node(node::Input::RelayOpened {
            conn: target.conn,
        }))
    }

    fn dial_failed(&mut self, target: Dial) -> Option<RunnerInput> {
        self.names
            .dial_failed(target.conn)
            .then_some(RunnerInput::Node(node::Input::RelayDialFailed {
                conn: target.conn,
            }))
    }

    fn effect(&mut self, output: RunnerOutput) -> Option<WsEffect<Dial, RunnerApp>> {
        let out = match output {
            RunnerOutput::Abandon(conn) => return Some(close(conn)),
            RunnerOutput::Transmit(d) => return Some(WsEffect::Deliver(RunnerApp::Transmit(d))),
            RunnerOutput::Event(e) => return Some(WsEffect::Deliver(RunnerApp::Event(e))),
            RunnerOutput::LookUpTurn(names) => {
                return Some(WsEffect::Deliver(RunnerApp::LookUpTurn(names)));
            }
            RunnerOutput::Node(out) => out,
        };
        if let Some(app) = self.client_input(&out) {
            return Some(WsEffect::Deliver(app));
        }
        Some(match out {
            node::Output::Dial { conn, url, .. } => {
                self.names.dial(conn);
                WsEffect::Dial(Dial { conn, url })
            }
            node::Output::RelaySend { conn, text } => WsEffect::Text {
                conn: self.names.host(conn)?,
                text,
            },
            node::Output::RelayClose { conn } => close(self.names.close(conn)?),
            other => WsEffect::Deliver(RunnerApp::Event(self.event(other)?)),
        })
    }
}

/// Who a node is: its session key, the account behind it and the note joining the two.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The session key (fresh each run).
    pub session: P256Secret,
    /// The session DID.
    pub did: String,
    /// The account DID (the root key's).
    pub account: String,
    /// The note from the account to the session (`cmd` `/`, `pol` `[]`, `sub` the account).
    pub note: String,
}

impl Identity {
    /// The session key `session` (a fresh one when `None`), with a note made out to it by `root`
    /// valid from `now` for [`NOTE_LIFETIME`].
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        root: &P256Secret,
        session: Option<P256Secret>,
        now: Timestamp,
        rng: &mut ChaCha20Rng,
    ) -> io::Result<Self> {
        let did_of = |k: &P256Secret| {
            crypto
                .p256_public_key(k)
                .map(|p| DidKey::P256(p.0).to_did())
                .map_err(|e| io::Error::other(format!("{e:?}")))
        };
        let session = session.unwrap_or_else(|| generate_p256(crypto, rng));
        let did = did_of(&session)?;
        let account = did_of(root)?;
        let secs = now.as_millis() / 1000;
        let claims = Note {
            iss: account.clone(),
            aud: did.clone(),
            sub: account.clone(),
            cmd: CMD_ALL.into(),
            pol: Vec::new(),
            exp: secs + NOTE_LIFETIME.as_secs(),
            nbf: None,
        };
        let note = Es256Notes::new(crypto)
            .issue(root, &claims)
            .ok_or_else(|| io::Error::other("the account key is not a P-256 key"))?;
        Ok(Self {
            session,
            did,
            account,
            note,
        })
    }
}

/// How to run a node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The spaces to join (public spaces, §6.2).
    pub spaces: Vec<String>,
    /// The relays to meet through (§3).
    pub relays: Vec<RelayUrl>,
    /// The always-on nodes to reach over the node WebSocket (§5.2), each for every space; at
    /// most [`MAX_NODE_URLS`].
    pub nodes: Vec<NodeUrl>,
    /// Where the WebRTC UDP socket binds (not a wildcard: it is the host candidate).
    pub bind: SocketAddr,
    /// The account root key; a fresh one when `None`.
    pub account: Option<P256Secret>,
    /// The session key; a fresh one when `None` (the usual: a session is one run).
    pub session: Option<P256Secret>,
}

/// What a node counted, as it stood when its loop ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeReport {
    /// Rendezvous messages ignored, for any reason (§2).
    pub rendezvous_ignored: u64,
    /// Of those, the node's own messages coming back (a Nostr relay echoes them).
    pub rendezvous_own_ignored: u64,
    /// Of those, messages already acted on arriving again (a Nostr relay may deliver one event
    /// both as stored and as new, around its end of stored events).
    pub rendezvous_replays_ignored: u64,
    /// The relay client's counters (§1.2, §3).
    pub relay: weft_proto::minca::relay_client::Stats,
    /// The mesh's counters (§7–§9).
    pub mesh: mesh::machine::Counters,
    /// The composition's own drops.
    pub node: node::Counters,
    /// The node WebSocket clients' counters (§5.2: dials, redials, sockets given up), one per
    /// always-on node in the order of [`NodeOptions::nodes`].
    pub node_sockets: Vec<ClientCounters>,
}

impl NodeReport {
    fn of(node: &Node<ChaCha20Rng>, node_sockets: Vec<ClientCounters>) -> Self {
        use weft_proto::minca::rendezvous::Ignored;
        Self {
            rendezvous_ignored: node.rendezvous().ignored_total(),
            rendezvous_own_ignored: node.rendezvous().ignored(Ignored::OwnMessage),
            rendezvous_replays_ignored: node.rendezvous().ignored(Ignored::Replay),
            relay: node.relay_client().stats(),
            mesh: node.mesh().counters().clone(),
            node: node.counters(),
            node_sockets,
        }
    }
}

/// The sending end of a running node's commands.
pub type NodeCommander = Commander<WsInput<Dial, RunnerInput>>;

/// A node running on its own thread; see [`RunningNode::start`].
#[derive(Debug)]
pub struct RunningNode {
    /// Who the node is.
    pub identity: Identity,
    /// The WebRTC socket's address.
    pub udp: SocketAddr,
    commander: NodeCommander,
    stop: smol::channel::Sender<()>,
    thread: Option<JoinHandle<io::Result<NodeReport>>>,
}

impl RunningNode {
    /// Starts a node for `options` on a new thread; `on_event` gets every [`NodeEvent`] in order,
    /// on that thread.
    pub fn start(
        options: NodeOptions,
        on_event: impl FnMut(NodeEvent) + Send + 'static,
    ) -> io::Result<Self> {
        if options.nodes.len() > MAX_NODE_URLS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("at most {MAX_NODE_URLS} always-on nodes"),
            ));
        }
        let crypto = crate::server_provider();
        let mut rng = crate::os_rng();
        let root = match options.account.clone() {
            Some(k) => k,
            None => generate_p256(crypto, &mut rng),
        };
        let session = options.session.clone();
        let identity = Identity::new(crypto, &root, session, crate::now(), &mut rng)?;
        let socket = UdpSocket::bind(options.bind)?;
        let udp = socket.local_addr()?;
        if udp.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a wildcard address is no host candidate; bind an interface address",
            ));
        }
        let (commander, commands) = commands()?;
        let reader = commander.try_clone()?;
        let (stop, stopped) = smol::channel::bounded(1);
        let id = identity.clone();
        let thread = std::thread::Builder::new()
            .name("weft-node".into())
            .spawn(move || {
                run(
                    options, id, socket, rng, commands, reader, stopped, on_event,
                )
            })?;
        Ok(Self {
            identity,
            udp,
            commander,
            stop,
            thread: Some(thread),
        })
    }

    /// Another sender of commands, for another thread.
    pub fn commander(&self) -> io::Result<NodeCommander> {
        self.commander.try_clone()
    }

    /// Sends `payload` as a live message in every space; `false` once the node has stopped.
    pub fn send_live(&self, payload: Value) -> bool {
        send_live(&self.commander, payload)
    }

    /// Stops the node and waits for its thread: what it counted, or the loop's error.
    pub fn stop(mut self) -> io::Result<NodeReport> {
        let _ = self.stop.try_send(());
        self.join()
    }

    /// Waits until the node's loop ends on its own (an I/O error; it runs until stopped
    /// otherwise).
    pub fn wait(mut self) -> io::Result<NodeReport> {
        self.join()
    }

    fn join(&mut self) -> io::Result<NodeReport> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| io::Error::other("the node thread panicked"))?,
            None => Ok(NodeReport::default()),
        }
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        let _ = self.stop.try_send(());
        let _ = self.join();
    }
}

/// Sends `payload` as a live message in every space through `commander`; `false` once the node
/// has stopped.
pub fn send_live(commander: &NodeCommander, payload: Value) -> bool {
    commander
        .send(WsInput::App(RunnerInput::Live(payload)))
        .is_ok()
}

#[allow(clippy::too_many_arguments)] // One thread's whole state, moved in once.
fn run(
    options: NodeOptions,
    identity: Identity,
    socket: UdpSocket,
    mut rng: ChaCha20Rng,
    commands: crate::host::Commands<WsInput<Dial, RunnerInput>>,
    reader: NodeCommander,
    stopped: smol::channel::Receiver<()>,
    mut on_event: impl FnMut(NodeEvent),
) -> io::Result<NodeReport> {
    use weft_proto::core::rand_core::SeedableRng;
    let crypto = crate::server_provider();
    let now = crate::now();
    let local = socket.local_addr()?;
    let config = NodeConfig {
        relays: options.relays,
    };
    let node = Node::new(
        identity.session.clone(),
        config,
        crypto,
        ChaCha20Rng::from_rng(&mut rng),
    )
    .map_err(|e| io::Error::other(format!("{e:?}")))?;
    let transport = Transport::new(now, local, vec![local]);
    let machine = NodeMachine::new(node, transport, crypto);
    fn closed<T>(_: T) -> io::Error {
        io::Error::other("the command channel is closed")
    }
    // The joins are the loop's first commands, so what they ask is carried out at once, and
    // before any node socket can open in their rooms.
    for space in &options.spaces {
        let join = RunnerInput::JoinSpace {
            space: space.clone(),
            note: Some(identity.note.clone()),
        };
        reader.send(WsInput::App(join)).map_err(closed)?;
    }
    let mut clients = Vec::new();
    let mut client_commanders = Vec::new();
    for (i, url) in options.nodes.iter().enumerate() {
        let client = NodeWsClient::new(
            crypto,
            identity.session.clone(),
            Some(identity.note.clone()),
            ChaCha20Rng::from_rng(&mut rng),
        )
        .ok_or_else(|| io::Error::other("the session key is not a P-256 key"))?;
        let (commander, client_commands) = crate::host::commands::<ClientCommand>()?;
        for space in &options.spaces {
            let dial = ClientInput::Dial {
                node: url.clone(),
                space: Arc::new(MemorySpace::public(space)),
            };
            commander.send(WsInput::App(dial)).map_err(closed)?;
        }
        let to_node = reader.try_clone()?;
        let deliver = move |event: NodeWsEvent| {
            // A gone runner loop ends this one too.
            let _ = to_node.send(WsInput::App(RunnerInput::NodeSocket { node: i, event }));
        };
        clients.push((
            node_ws::client_host(client, socket_config(), deliver),
            client_commands,
        ));
        client_commanders.push(commander);
    }
    let answers = reader.try_clone()?;
    let resolver = TurnResolver::start(move |name, addrs| {
        // A gone loop has nobody to tell.
        let _ = answers.send(WsInput::App(RunnerInput::TurnResolved { name, addrs }));
    })?;
    let unasked = reader.try_clone()?;
    let udp = smol::Async::new(socket)?;
    let sender = udp.get_ref().try_clone()?;
    let deliver = move |app: RunnerApp| match app {
        RunnerApp::LookUpTurn(names) => {
            for name in names {
                if !resolver.ask(name.clone()) {
                    // Too many waiting: this name goes unanswered as a failed lookup, so the
                    // transport counts it and skips it until the next offer.
                    let addrs = Vec::new();
                    let _ = unasked.send(WsInput::App(RunnerInput::TurnResolved { name, addrs }));
                }
            }
        }
        // A datagram the kernel will not take now is lost, as UDP may lose it; str0m resends
        // what matters.
        RunnerApp::Transmit(d) => {
            let _ = sender.send_to(&d.bytes, d.to);
        }
        RunnerApp::Event(e) => on_event(e),
        RunnerApp::Client { node, input } => {
            if let Some(c) = client_commanders.get(node) {
                // A gone client loop has ended the runner's too.
                let _ = c.send(WsInput::App(input));
            }
        }
    };
    let mut host = Host::new(Ws::new(machine, client_config()), WsHooks(deliver));
    smol::block_on(async {
        let reading = async {
            let mut buf = vec![0u8; MAX_DATAGRAM_BYTES];
            let mut taken = 0usize;
            loop {
                match udp.recv_from(&mut buf).await {
                    Ok((len, from)) => {
                        let input = RunnerInput::Datagram {
                            from,
                            bytes: buf[..len].to_vec(),
                        };
                        if reader.send(WsInput::App(input)).is_err() {
                            return Ok(());
                        }
                    }
                    // An ICMP error from an earlier send is that peer's problem, not the
                    // socket's; str0m's timers notice the silence.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(e),
                }
                taken += 1;
                if taken.is_multiple_of(MAX_DATAGRAMS_PER_PASS) {
                    smol::future::yield_now().await;
                }
            }
        };
        let running = crate::smol::run_commanded(&mut host, Vec::new(), &commands);
        // Each node client's loop runs beside the runner's; the first to end ends them all.
        let mut loops: Pin<Box<dyn Future<Output = io::Result<()>> + '_>> =
            Box::pin(smol::future::pending());
        for (client, commands) in &mut clients {
            let one = crate::smol::run_commanded(client, Vec::new(), commands);
            loops = Box::pin(smol::future::or(loops, one));
        }
        let running = smol::future::or(running, loops);
        let stopping = async {
            let _ = stopped.recv().await;
            Ok(())
        };
        smol::future::or(stopping, smol::future::or(running, reading)).await
    })?;
    let node_sockets = clients
        .iter()
        .map(|(client, _)| client.machine().machine().counters())
        .collect();
    Ok(NodeReport::of(
        host.machine().machine().node(),
        node_sockets,
    ))
}

/// A line of input as a live message's payload: the JSON value it is, or else the line as a
/// string.
pub fn line_payload(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.into()))
}

/// Hands the payload ([`line_payload`]) of each line of `input` that is not blank to `send`,
/// until `input` ends or `send` says its receiver is gone (`false`). The end of the input ends
/// only the sending: the caller's node goes on.
pub fn read_lines(input: impl io::BufRead, mut send: impl FnMut(Value) -> bool) -> io::Result<()> {
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if !send(line_payload(&line)) {
            break;
        }
    }
    Ok(())
}

/// Prints `line` as one JSON line on stdout, flushed at once (a pipe reader sees each event as
/// it happens).
pub fn print_line(line: &Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A closed stdout leaves nobody to tell; the node keeps serving its peers.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints `event` as the JSON line of [`NodeEvent::to_json`].
pub fn print_event(event: &NodeEvent) {
    print_line(&event.to_json());
}

/// `weft node`: runs a node for `options`, prints a `ready` line and then each event as one JSON
/// line on stdout, and sends each line of stdin as a live message to every space. Runs until the
/// loop fails or the process is ended; the end of stdin only ends the sending.
pub fn chat(options: NodeOptions) -> io::Result<()> {
    let node = RunningNode::start(options.clone(), move |e| print_event(&e))?;
    print_line(&json!({
        "event": "ready",
        "did": node.identity.did,
        "account": node.identity.account,
        "spaces": options.spaces,
        "udp": node.udp.to_string(),
        "nodes": options.nodes.len(),
    }));
    read_lines(std::io::stdin().lock(), |payload| node.send_live(payload))?;
    node.wait().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_json_is_sent_as_that_value_and_any_other_as_a_string() {
        assert_eq!(line_payload(r#"{"n":1}"#), json!({"n": 1}));
        assert_eq!(line_payload("42"), json!(42));
        assert_eq!(line_payload("hello there"), json!("hello there"));
        assert_eq!(line_payload("{not json"), json!("{not json"));
    }

    /// A runner over a fresh node that joined `space`, its outputs drained.
    fn runner(space: &str) -> NodeMachine {
        let mut m = runner_on(space, Vec::new());
        while m.poll().is_some() {}
        m
    }

    /// A runner over a fresh node on `relays` that joined `space`, its outputs not yet taken.
    fn runner_on(space: &str, relays: Vec<RelayUrl>) -> NodeMachine {
        use weft_proto::core::rand_core::SeedableRng;
        let crypto = weft_proto::crypto::default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let key = generate_p256(crypto, &mut rng);
        let config = NodeConfig { relays };
        let node = Node::new(key, config, crypto, rng).unwrap();
        let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let transport = Transport::new(NOW, local, vec![local]);
        let mut m = NodeMachine::new(node, transport, crypto);
        let join = RunnerInput::JoinSpace {
            space: space.into(),
            note: None,
        };
        m.handle(NOW, join);
        m
    }

    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

    /// Every effect of the runner's pending outputs: the node clients' inputs as (client, conn,
    /// kind) and the application's events.
    fn effects(m: &mut NodeMachine) -> (Vec<(usize, ConnId, String)>, Vec<NodeEvent>) {
        let (mut inputs, mut events) = (Vec::new(), Vec::new());
        while let Some(out) = m.poll() {
            match m.effect(out) {
                Some(WsEffect::Deliver(RunnerApp::Client { node, input })) => match input {
                    ClientInput::SendOn { conn, kind, .. } => inputs.push((node, conn, kind)),
                    ClientInput::CloseOn { conn } => inputs.push((node, conn, "close".into())),
                    _ => panic!("a node client is only told to send or close"),
                },
                Some(WsEffect::Deliver(RunnerApp::Event(e))) => events.push(e),
                _ => {}
            }
        }
        (inputs, events)
    }

    fn opened(node: usize, conn: u64, peer: &str) -> RunnerInput {
        RunnerInput::NodeSocket {
            node,
            event: NodeWsEvent::Opened {
                conn: ConnId(conn),
                space_id: "s".into(),
                peer: peer.into(),
            },
        }
    }

    #[test]
    fn two_always_on_nodes_numbering_their_sockets_alike_are_two_peers_and_each_hears_its_own() {
        let mut m = runner("s");
        m.handle(NOW, opened(0, 1, "did:key:zNodeA"));
        m.handle(NOW, opened(1, 1, "did:key:zNodeB"));
        let (_, events) = effects(&mut m);
        let admitted: Vec<&NodeEvent> = events
            .iter()
            .filter(|e| matches!(e, NodeEvent::Admitted { .. }))
            .collect();
        assert_eq!(admitted.len(), 2, "both node sockets are peers: {events:?}");

        // A line typed goes to each node's client, on that client's own socket.
        m.handle(NOW, RunnerInput::Live(json!("hi")));
        let (inputs, _) = effects(&mut m);
        assert_eq!(
            inputs,
            vec![(0, ConnId(1), LIVE.into()), (1, ConnId(1), LIVE.into())]
        );

        // A message on node 1's socket is node B's, and its close departs B alone.
        let message = RunnerInput::NodeSocket {
            node: 1,
            event: NodeWsEvent::Message {
                conn: ConnId(1),
                space_id: "s".into(),
                peer: "did:key:zNodeB".into(),
                account: None,
                kind: LIVE.into(),
                payload: json!("from B"),
            },
        };
        m.handle(NOW, message);
        let closed = RunnerInput::NodeSocket {
            node: 1,
            event: NodeWsEvent::Closed {
                conn: ConnId(1),
                space_id: "s".into(),
                peer: Some("did:key:zNodeB".into()),
                code: None,
            },
        };
        m.handle(NOW, closed);
        let (_, events) = effects(&mut m);
        assert!(events.iter().any(|e| matches!(e,
            NodeEvent::Message { from, payload, .. } if from == "did:key:zNodeB" && *payload == json!("from B"))));
        assert!(events.iter().any(|e| matches!(e,
            NodeEvent::Departed { peer, .. } if peer == "did:key:zNodeB")));
        assert!(!events.iter().any(|e| matches!(e,
            NodeEvent::Departed { peer, .. } if peer == "did:key:zNodeA")));
        m.handle(NOW, RunnerInput::Live(json!("again")));
        let (inputs, _) = effects(&mut m);
        assert_eq!(inputs, vec![(0, ConnId(1), LIVE.into())]);
    }

    /// The local description the transport made for `conn`, if any, taking its events.
    fn description(m: &mut NodeMachine, conn: ConnId) -> Option<String> {
        let mut sdp = None;
        while let Some(e) = m.transport.poll_event() {
            if let mesh::Input::LocalDescription { conn: c, sdp: s } = e
                && c == conn
            {
                sdp = Some(s);
            }
        }
        sdp
    }

    fn relay_candidates(sdp: &str) -> Vec<&str> {
        sdp.lines()
            .filter(|l| l.starts_with("a=candidate") && l.contains("typ relay"))
            .collect()
    }

    #[test]
    fn a_turn_offer_by_host_name_is_looked_up_off_the_loop_and_later_connections_use_it() {
        use crate::minca::webrtc::transport::GATHERING_CAP;
        use crate::minca::webrtc::transport::turn_tests::{FakeTurn, PASS, USER};
        let relay = RelayUrl::parse("ws://127.0.0.1:8787").unwrap();
        let mut m = runner_on("s", vec![relay]);
        // The node dials its relay; the socket opens.
        let mut dial = None;
        while let Some(out) = m.poll() {
            if let Some(WsEffect::Dial(d)) = m.effect(out) {
                dial = Some(d);
            }
        }
        let dial = dial.expect("the node dials its relay");
        let opened = m
            .dialled(ConnId(50), dial.clone())
            .expect("the relay socket");
        m.handle(NOW, opened);
        while m.poll().is_some() {}

        // The relay offers two TURN servers by name (§1.4, §3 `ice`).
        let mut turn = FakeTurn::new(47_000);
        let port = turn.addr.port();
        let expires = NOW.as_millis() + 600_000;
        let text = json!({"type": "ice", "payload": {"servers": [
            {"urls": [format!("turn:turn.weft.test:{port}")], "username": USER, "credential": PASS},
            {"urls": ["turn:gone.weft.test"], "username": USER, "credential": PASS},
        ], "expiresAt": expires}});
        let offer = RunnerInput::Node(node::Input::RelayText {
            conn: dial.conn,
            text: text.to_string().into(),
        });
        m.handle(NOW, offer);
        let mut asked = Vec::new();
        while let Some(out) = m.poll() {
            if let Some(WsEffect::Deliver(RunnerApp::LookUpTurn(names))) = m.effect(out) {
                asked.extend(names);
            }
        }
        assert_eq!(asked, vec!["turn.weft.test", "gone.weft.test"]);
        let ice = m.node().ice_servers().cloned();
        assert!(ice.is_some());

        // A connection made while the lookup is out has no relay candidate, and goes out at
        // once (nothing to wait for).
        let first = node::Output::CreateOffer {
            conn: ConnId(1),
            peer: "did:key:zPeerOne".into(),
            ice: ice.clone(),
        };
        m.route(NOW, first);
        let sdp = description(&mut m, ConnId(1)).expect("a description at once");
        assert!(relay_candidates(&sdp).is_empty(), "{sdp}");
        assert!(m.transport.poll_transmit().is_none());

        // The answers arrive through the loop's commands; the failed name is counted.
        let found = RunnerInput::TurnResolved {
            name: "turn.weft.test".into(),
            addrs: vec![[127, 0, 0, 1].into()],
        };
        m.handle(NOW, found);
        let failed = RunnerInput::TurnResolved {
            name: "gone.weft.test".into(),
            addrs: Vec::new(),
        };
        m.handle(NOW, failed);
        assert_eq!(m.transport().turn_names().counters().failed, 1);
        // The same offer again is not looked up again.
        m.handle(NOW, RunnerInput::Live(json!("tick")));
        while let Some(out) = m.poll() {
            assert!(!matches!(
                m.effect(out),
                Some(WsEffect::Deliver(RunnerApp::LookUpTurn(_)))
            ));
        }

        // The next connection allocates on the named server, and its description carries the
        // relayed address.
        let second = node::Output::CreateOffer {
            conn: ConnId(2),
            peer: "did:key:zPeerTwo".into(),
            ice,
        };
        let later = NOW.saturating_add(Duration::from_millis(10));
        m.route(later, second);
        let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut sdp = None;
        let mut now = later;
        for _ in 0..64 {
            while let Some(d) = m.transport.poll_transmit() {
                assert_eq!(d.to, turn.addr, "only the TURN server is spoken to");
                turn.receive(now, local, d.to, &d.bytes);
            }
            while let Some((from, to, bytes)) = turn.out.pop_front() {
                assert_eq!(to, local);
                m.transport.handle_datagram(now, from, &bytes);
            }
            sdp = description(&mut m, ConnId(2));
            if sdp.is_some() {
                break;
            }
            // The TURN client's timers (its retry with the server's nonce) run in virtual time.
            if let Some(w) = m.transport.poll_timeout() {
                now = now.max(w.at);
                m.transport.handle_timeout(now);
            }
        }
        // Within the gathering cap (§5.1): the relayed address made it in.
        assert!(now < later.saturating_add(GATHERING_CAP), "{now:?}");
        let sdp = sdp.expect("a description once the allocation answered");
        let (server, relayed) = m.transport().relayed_addresses().next().unwrap();
        assert_eq!(server, turn.addr);
        let relay = relay_candidates(&sdp);
        assert_eq!(relay.len(), 1, "{sdp}");
        let at = format!("{} {} typ relay", relayed.ip(), relayed.port());
        assert!(relay[0].contains(&at), "{sdp}");
    }

    #[test]
    fn the_turn_resolver_answers_off_the_loop_and_refuses_names_past_its_bound() {
        use std::sync::mpsc;
        let (answers, heard) = mpsc::channel();
        let (entered, inside) = mpsc::channel();
        let (gate, wait) = mpsc::channel::<()>();
        let resolver = TurnResolver::start(move |name, addrs| {
            let _ = entered.send(());
            // The first answer waits for the test, so the queue behind it fills.
            let _ = wait.recv();
            let _ = answers.send((name, addrs));
        })
        .unwrap();
        assert!(resolver.ask("localhost".into()));
        inside.recv_timeout(Duration::from_secs(10)).unwrap();
        for _ in 0..MAX_TURN_NAMES {
            assert!(resolver.ask("localhost".into()));
        }
        assert!(!resolver.ask("localhost".into()), "past the bound");
        for _ in 0..=MAX_TURN_NAMES {
            gate.send(()).unwrap();
        }
        for _ in 0..=MAX_TURN_NAMES {
            let (name, addrs) = heard.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(name, "localhost");
            assert!(addrs.iter().all(|a| a.is_loopback()) && !addrs.is_empty());
            assert!(addrs.len() <= MAX_TURN_ADDRS);
        }
    }

    #[test]
    fn an_event_of_a_node_socket_the_node_never_heard_open_reaches_it_not() {
        let mut m = runner("s");
        let stray = RunnerInput::NodeSocket {
            node: 0,
            event: NodeWsEvent::Message {
                conn: ConnId(4),
                space_id: "s".into(),
                peer: "did:key:zNodeA".into(),
                account: None,
                kind: LIVE.into(),
                payload: json!("stray"),
            },
        };
        m.handle(NOW, stray);
        let (inputs, events) = effects(&mut m);
        assert!(inputs.is_empty() && events.is_empty(), "{events:?}");
    }

    #[test]
    fn stdin_lines_go_out_as_payloads_skipping_blank_ones_until_the_node_is_gone() {
        let input = "hello\n\n   \n{\"n\":1}\nnot sent\nnor this\n".as_bytes();
        let mut sent = Vec::new();
        read_lines(input, |v| {
            sent.push(v);
            sent.len() < 2
        })
        .unwrap();
        assert_eq!(sent, vec![json!("hello"), json!({"n": 1})]);
    }

    #[test]
    fn an_always_on_nodes_socket_events_print_as_weft_nodes_lines() {
        let (conn, space_id) = (ConnId(3), "s".to_string());
        let opened = NodeWsEvent::Opened {
            conn,
            space_id: space_id.clone(),
            peer: "did:key:zC".into(),
        };
        assert_eq!(
            NodeEvent::from_peer_socket(opened).unwrap().to_json(),
            json!({"event": "admitted", "space": "s", "peer": "did:key:zC"})
        );
        let message = NodeWsEvent::Message {
            conn,
            space_id: space_id.clone(),
            peer: "did:key:zC".into(),
            account: Some("did:key:zA".into()),
            kind: LIVE.into(),
            payload: json!("hi"),
        };
        assert_eq!(
            NodeEvent::from_peer_socket(message).unwrap().to_json(),
            json!({"event": "live", "space": "s", "from": "did:key:zC",
                   "account": "did:key:zA", "payload": "hi"})
        );
        let gone = NodeWsEvent::Closed {
            conn,
            space_id: space_id.clone(),
            peer: Some("did:key:zC".into()),
            code: None,
        };
        assert_eq!(
            NodeEvent::from_peer_socket(gone).unwrap().to_json(),
            json!({"event": "departed", "space": "s", "peer": "did:key:zC"})
        );
        // A refused hello's socket was never a peer's: it departs nobody.
        let refused = NodeWsEvent::Closed {
            conn,
            space_id,
            peer: None,
            code: Some(4003),
        };
        assert!(matches!(
            NodeEvent::from_peer_socket(refused),
            Some(NodeEvent::Other(_))
        ));
    }

    #[test]
    fn a_live_message_prints_with_the_senders_session_and_account() {
        let e = NodeEvent::Message {
            space: "s".into(),
            from: "did:key:zA".into(),
            account: Some("did:key:zB".into()),
            kind: LIVE.into(),
            payload: json!("hi"),
        };
        assert_eq!(
            e.to_json(),
            json!({"event": "live", "space": "s", "from": "did:key:zA",
                   "account": "did:key:zB", "payload": "hi"})
        );
        let gone = NodeEvent::Departed {
            space: "s".into(),
            peer: "did:key:zA".into(),
        };
        assert_eq!(gone.to_json()["event"], "departed");
    }
}
