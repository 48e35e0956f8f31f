//! The AIRC realm server as a [`HostMachine`]: the one place its `Input`/`Output` meet the
//! protocol-neutral host vocabulary, so every runtime adapter can drive it.
//!
//! AIRC §5: the namespaces a client-face connection may act for come from the transport, never
//! from the connection: a Unix peer's uid (`SO_PEERCRED`), or a loopback TCP peer's on a
//! listener registered with [`Realm::with_tcp_face`] (from `/proc/net/tcp`, [`crate::peer_uid`]),
//! looked up in the operator's table; a uid the table does not name, or any other peer, gets none. Peer links (§8) need TLS, which no adapter provides yet,
//! so [`RealmHooks`] resolves no realm and every dial fails (the spool keeps its messages).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;

use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::discovery::Endpoint;
use weft_proto::airc::server::{Face, Input, Output, Server};
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

use super::store::Store;
use crate::host::{Effect, Hooks, HostMachine, Peer, Remote};

/// A realm [`Server`] with the operator's uid → namespaces table (§5), ready for a host.
pub struct Realm<R> {
    /// The machine.
    pub server: Server<R>,
    namespaces: BTreeMap<u32, Vec<Namespace>>,
    /// Listener index → its local address, for the TCP client faces whose peers' uids are looked
    /// up; one entry per listener, so bounded by what the operator configured.
    tcp_faces: BTreeMap<usize, SocketAddr>,
}

impl<R> Realm<R> {
    /// `server`, granting each Unix peer uid in `namespaces` those namespaces.
    pub fn new(server: Server<R>, namespaces: BTreeMap<u32, Vec<Namespace>>) -> Self {
        Self {
            server,
            namespaces,
            tcp_faces: BTreeMap::new(),
        }
    }

    /// Also takes the identity of loopback TCP peers on listener number `listener` (its index in
    /// the list handed to the adapter), bound at `local`: the uid owning the peer's socket.
    pub fn with_tcp_face(mut self, listener: usize, local: SocketAddr) -> Self {
        self.tcp_faces.insert(listener, local);
        self
    }

    /// The uid the transport proves for `peer`, if any.
    fn uid_of(&self, peer: &Peer) -> Option<u32> {
        match peer.remote {
            Remote::Unix { uid } => uid,
            Remote::Tcp(remote) => self
                .tcp_faces
                .get(&peer.listener)
                .and_then(|local| crate::peer_uid::loopback_tcp_owner(remote, *local)),
        }
    }
}

impl<R: CryptoRng> Machine for Realm<R> {
    type Input = Input;
    type Output = Output;
    fn handle(&mut self, now: Timestamp, input: Input) {
        self.server.handle(now, input);
    }
    fn poll(&mut self) -> Option<Output> {
        self.server.poll()
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        self.server.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.server.handle_timeout(now);
    }
}

/// A peer link to dial: the realm, and the endpoint discovery chose for it (AIRC §8.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    /// The realm the link is for.
    pub authority: Authority,
    /// Where to connect.
    pub endpoint: Endpoint,
}

impl<R: CryptoRng> HostMachine for Realm<R> {
    type Target = Dial;
    /// A [`Output::Persist`] or [`Output::Forget`], as [`Store::apply`] takes them.
    type Durable = Output;
    type App = core::convert::Infallible;

    fn opened(&mut self, conn: ConnId, peer: &Peer) -> Input {
        let namespaces = self
            .uid_of(peer)
            .and_then(|uid| self.namespaces.get(&uid).cloned())
            .unwrap_or_default();
        Input::Opened {
            conn,
            face: Face::Client,
            namespaces,
        }
    }
    fn received(&mut self, conn: ConnId, bytes: Vec<u8>) -> Input {
        Input::Received { conn, bytes }
    }
    fn closed(&mut self, conn: ConnId) -> Input {
        Input::Closed { conn }
    }
    fn dialled(&mut self, conn: ConnId, dial: Dial) -> Input {
        Input::Dialled {
            conn,
            authority: dial.authority,
        }
    }
    fn dial_failed(&mut self, dial: Dial) -> Input {
        Input::DialFailed {
            authority: dial.authority,
        }
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
}

impl RealmHooks {
    /// Hooks over `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

impl<R: CryptoRng> Hooks<Realm<R>> for RealmHooks {
    fn restore(&mut self, now: Timestamp) -> io::Result<Vec<Input>> {
        Ok(self
            .store
            .load(now)?
            .into_iter()
            .map(Input::Restore)
            .collect())
    }
    fn store(&mut self, batch: &[Output]) -> io::Result<()> {
        self.store.apply(batch)
    }
}
