//! The Minca relay client ([`RelayClient`]) as a [`WsMachine`], so any runtime adapter drives it
//! through the WebSocket layer ([`crate::ws`]) (Minca 04 Network §2.1, §3; the client side of
//! §1.2 and §1.4).
//!
//! The client names its sockets itself ([`Output::Dial`]); the host names connections too. This
//! module is the one place the two meet: it maps one to the other, dials the URL the client asks
//! for (`ws://`, `wss://`, and the `nostr+ws(s)://` kinds, whose dial URL the client already gave
//! without `<kind>+`), and reports opened, text, closed and dial-failed back in the client's names.
//! A dial the client gave up on before it opened is closed as soon as it opens and never
//! reported. Everything the client tells its application ([`Output::Blob`], [`Output::Reachable`],
//! …) is delivered to the host's hooks as it is.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::minca::relay_client::{Input, Output, RelayClient};
use weft_proto::minca::relay_server::MAX_WS_MESSAGE_BYTES;

use crate::host::{Host, Peer};
use crate::ws::{Frame, Refusal, Request, Ws, WsConfig, WsEffect, WsHooks, WsMachine};

/// A socket the client asked for: its name in the client, and the URL to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    /// The client's name for the socket.
    pub conn: ConnId,
    /// The `ws://` or `wss://` URL.
    pub url: String,
}

impl AsRef<str> for Dial {
    fn as_ref(&self) -> &str {
        &self.url
    }
}

/// A relay client's sockets under two names: the client's own ([`Output::Dial`] names it) and the
/// host's (the connection the WebSocket layer dialled), with the dials under way and those the
/// client gave up on before they opened. The one place either name is turned into the other, for
/// [`RelayNode`] and for any host that carries a relay client inside a larger machine (the node
/// runner's [`Node`](weft_proto::minca::node::Node)). Holds one entry per socket the client has
/// open or dialling, which the client bounds (`MAX_RELAYS`).
#[derive(Debug, Default)]
pub struct SocketNames {
    /// Client name → host name, for open sockets.
    to_host: BTreeMap<ConnId, ConnId>,
    /// Host name → client name, for open sockets.
    to_client: BTreeMap<ConnId, ConnId>,
    /// Client names of dials under way.
    dialling: BTreeSet<ConnId>,
    /// Client names of dials the client closed before they opened.
    abandoned: BTreeSet<ConnId>,
}

impl SocketNames {
    /// The client asked to dial its socket `conn`.
    pub fn dial(&mut self, conn: ConnId) {
        self.dialling.insert(conn);
    }

    /// The dial of the client's `conn` opened as the host's `host`: `true` when the client is
    /// to hear it opened, `false` when the client gave up on it and `host` is to be closed.
    pub fn dialled(&mut self, conn: ConnId, host: ConnId) -> bool {
        self.dialling.remove(&conn);
        if self.abandoned.remove(&conn) {
            return false;
        }
        self.to_host.insert(conn, host);
        self.to_client.insert(host, conn);
        true
    }

    /// The dial of the client's `conn` failed: whether the client is to hear it (not when it
    /// gave up on it).
    pub fn dial_failed(&mut self, conn: ConnId) -> bool {
        self.dialling.remove(&conn);
        !self.abandoned.remove(&conn)
    }

    /// The client's name of the open socket `host`.
    pub fn client(&self, host: ConnId) -> Option<ConnId> {
        self.to_client.get(&host).copied()
    }

    /// The host's name of the client's open socket `conn`.
    pub fn host(&self, conn: ConnId) -> Option<ConnId> {
        self.to_host.get(&conn).copied()
    }

    /// The host's socket `host` closed under the client: the client's name, forgotten.
    pub fn closed(&mut self, host: ConnId) -> Option<ConnId> {
        let conn = self.to_client.remove(&host)?;
        self.to_host.remove(&conn);
        Some(conn)
    }

    /// The client closes its `conn`: the host's socket to close, forgotten; `None` for a dial
    /// under way, which is closed when it opens ([`dialled`](Self::dialled) says `false`).
    pub fn close(&mut self, conn: ConnId) -> Option<ConnId> {
        if self.dialling.contains(&conn) {
            self.abandoned.insert(conn);
            return None;
        }
        let host = self.to_host.remove(&conn)?;
        self.to_client.remove(&host);
        Some(host)
    }

    /// How many sockets are open, and how many dials under way.
    pub fn counts(&self) -> (usize, usize) {
        (self.to_host.len(), self.dialling.len())
    }
}

/// What the client node puts out: the client's outputs, and closes of dials it gave up on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutput {
    /// An output of the client.
    Client(Output),
    /// End a connection the client no longer wants (its dial opened after it gave up).
    Abandon(ConnId),
}

/// A [`RelayClient`] with the names of its sockets on the host ([`SocketNames`]); see the
/// [module docs](self).
pub struct RelayNode<R> {
    /// The machine.
    pub client: RelayClient<R>,
    names: SocketNames,
    own: VecDeque<NodeOutput>,
}

impl<R> fmt::Debug for RelayNode<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (open, dialling) = self.names.counts();
        f.debug_struct("RelayNode")
            .field("open", &open)
            .field("dialling", &dialling)
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> RelayNode<R> {
    /// The node over `client`.
    pub fn new(client: RelayClient<R>) -> Self {
        Self {
            client,
            names: SocketNames::default(),
            own: VecDeque::new(),
        }
    }
}

/// The hooks of a relay node's host: deliveries go to `deliver`.
pub type NodeHooks<D> = WsHooks<D>;

/// `client` over the WebSocket layer (trusting the Mozilla roots for `wss://`, or only the PEM
/// certificates in `config`'s choice), its deliveries going to `deliver`, ready for any adapter.
pub fn node_host<R: CryptoRng, D: FnMut(Output)>(
    client: RelayClient<R>,
    config: WsConfig,
    deliver: D,
) -> Host<Ws<RelayNode<R>>, NodeHooks<D>> {
    Host::new(Ws::new(RelayNode::new(client), config), WsHooks(deliver))
}

/// The layer configuration a relay client uses: messages up to the relay's own limit.
pub fn client_config() -> WsConfig {
    WsConfig::new(MAX_WS_MESSAGE_BYTES)
}

impl<R: CryptoRng> Machine for RelayNode<R> {
    type Input = Input;
    type Output = NodeOutput;
    fn handle(&mut self, now: Timestamp, input: Input) {
        self.client.handle(now, input);
    }
    fn poll(&mut self) -> Option<NodeOutput> {
        self.own
            .pop_front()
            .or_else(|| self.client.poll().map(NodeOutput::Client))
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        self.client.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.client.handle_timeout(now);
    }
}

impl<R: CryptoRng> WsMachine for RelayNode<R> {
    type Target = Dial;
    type App = Output;

    fn upgrade(
        &mut self,
        _now: Timestamp,
        _conn: ConnId,
        _peer: &Peer,
        _request: &Request,
    ) -> Result<Input, Refusal> {
        // A client listens for nothing; a host that hands it a listener gets this answer.
        Err(Refusal {
            status: 404,
            reason: "a relay client accepts no sockets".into(),
        })
    }
    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<Input> {
        let conn = self.names.client(conn)?;
        match frame {
            Frame::Text(text) => Some(Input::Text { conn, text }),
            // A Minca or Nostr relay speaks text; the client's liveness is its own `ping`.
            _ => None,
        }
    }
    fn closed(&mut self, conn: ConnId) -> Option<Input> {
        let conn = self.names.closed(conn)?;
        Some(Input::Closed { conn })
    }
    fn dialled(&mut self, host: ConnId, target: Dial) -> Option<Input> {
        if !self.names.dialled(target.conn, host) {
            self.own.push_back(NodeOutput::Abandon(host));
            return None;
        }
        Some(Input::Opened { conn: target.conn })
    }
    fn dial_failed(&mut self, target: Dial) -> Option<Input> {
        self.names
            .dial_failed(target.conn)
            .then_some(Input::DialFailed { conn: target.conn })
    }
    fn effect(&mut self, output: NodeOutput) -> Option<WsEffect<Dial, Output>> {
        let output = match output {
            NodeOutput::Abandon(conn) => return Some(close(conn)),
            NodeOutput::Client(o) => o,
        };
        Some(match output {
            Output::Dial { conn, url, .. } => {
                self.names.dial(conn);
                WsEffect::Dial(Dial { conn, url })
            }
            Output::Send { conn, text } => WsEffect::Text {
                conn: self.names.host(conn)?,
                text,
            },
            Output::Close { conn } => close(self.names.close(conn)?),
            other => WsEffect::Deliver(other),
        })
    }
}

/// A normal close (1000) of a socket the client is done with.
pub fn close<A>(conn: ConnId) -> WsEffect<Dial, A> {
    WsEffect::Close {
        conn,
        code: 1000,
        reason: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;
    use weft_proto::minca::relay_client::ClientConfig;
    use weft_proto::minca::relay_url::RelayUrl;

    fn node() -> RelayNode<chacha20::ChaCha20Rng> {
        let client = RelayClient::new(
            ClientConfig::default(),
            weft_proto::crypto::default_provider(),
            chacha20::ChaCha20Rng::seed_from_u64(1),
        );
        RelayNode::new(client)
    }

    fn dial(node: &mut RelayNode<chacha20::ChaCha20Rng>, conn: ConnId) -> Dial {
        let relay = RelayUrl::parse("ws://127.0.0.1:8787/").unwrap();
        let url = "ws://127.0.0.1:8787/".to_string();
        match node.effect(NodeOutput::Client(Output::Dial { conn, relay, url })) {
            Some(WsEffect::Dial(d)) => d,
            other => panic!("expected a dial, got {other:?}"),
        }
    }

    #[test]
    fn a_dial_the_client_gave_up_on_is_closed_when_it_opens_and_never_reported() {
        let mut node = node();
        let target = dial(&mut node, ConnId(1));
        assert_eq!(
            node.effect(NodeOutput::Client(Output::Close { conn: ConnId(1) })),
            None
        );
        assert_eq!(node.dialled(ConnId(50), target), None);
        assert_eq!(node.poll(), Some(NodeOutput::Abandon(ConnId(50))));
        assert!(matches!(
            node.effect(NodeOutput::Abandon(ConnId(50))),
            Some(WsEffect::Close {
                conn: ConnId(50),
                ..
            })
        ));
        // Its frames and close are nobody's.
        assert_eq!(node.message(ConnId(50), Frame::Text("{}".into())), None);
        assert_eq!(node.closed(ConnId(50)), None);
    }

    #[test]
    fn the_client_and_the_host_name_one_socket_each_their_own_way() {
        let mut node = node();
        let target = dial(&mut node, ConnId(3));
        assert_eq!(
            node.dialled(ConnId(90), target),
            Some(Input::Opened { conn: ConnId(3) })
        );
        assert_eq!(
            node.message(ConnId(90), Frame::Text("t".into())),
            Some(Input::Text {
                conn: ConnId(3),
                text: "t".into()
            })
        );
        assert_eq!(
            node.effect(NodeOutput::Client(Output::Send {
                conn: ConnId(3),
                text: "u".into()
            })),
            Some(WsEffect::Text {
                conn: ConnId(90),
                text: "u".into()
            })
        );
        assert_eq!(
            node.closed(ConnId(90)),
            Some(Input::Closed { conn: ConnId(3) })
        );
        // A failed dial is reported in the client's name.
        let target = dial(&mut node, ConnId(4));
        assert_eq!(
            node.dial_failed(target),
            Some(Input::DialFailed { conn: ConnId(4) })
        );
    }
}
