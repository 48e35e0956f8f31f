//! The AIRC realm server as a [`HostMachine`]: the one place its `Input`/`Output` meet the
//! protocol-neutral host vocabulary, so every runtime adapter can drive it.
//!
//! AIRC §5: the namespaces a client-face connection may act for come from the transport, never
//! from the connection: a Unix peer's uid (`SO_PEERCRED`), or a loopback TCP peer's on a
//! listener registered with [`Realm::with_tcp_face`] (from `/proc/net/tcp`, [`crate::peer_uid`]),
//! looked up in the operator's table; a uid the table does not name, or any other peer, gets none.
//! Connections on a listener registered with [`Realm::with_peer_face`] are the peer face (§8.4):
//! other realms' servers, with no namespaces. [`RealmHooks`] resolves realms to peer endpoints
//! with a [`Dialer`] when given one; without, every dial fails (the spool keeps its messages).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;

use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::server::{Face, Input, Output, Server};
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

use super::peer::Dialer;
use super::store::Store;
use crate::host::{Effect, Endpoint, Hooks, HostMachine, Peer, Remote};

/// A realm [`Server`] with the operator's uid → namespaces table (§5), ready for a host.
pub struct Realm<R> {
    /// The machine.
    pub server: Server<R>,
    namespaces: BTreeMap<u32, Vec<Namespace>>,
    /// Listener index → its local address, for the TCP client faces whose peers' uids are looked
    /// up; one entry per listener, so bounded by what the operator configured.
    tcp_faces: BTreeMap<usize, SocketAddr>,
    /// The listener indexes of the peer face; one per listener, so bounded likewise.
    peer_faces: BTreeSet<usize>,
}

impl<R> Realm<R> {
    /// `server`, granting each Unix peer uid in `namespaces` those namespaces.
    pub fn new(server: Server<R>, namespaces: BTreeMap<u32, Vec<Namespace>>) -> Self {
        Self {
            server,
            namespaces,
            tcp_faces: BTreeMap::new(),
            peer_faces: BTreeSet::new(),
        }
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

    /// The uid the transport proves for `peer`, if any.
    fn uid_of(&self, peer: &Peer) -> Option<u32> {
        match peer.remote {
            Remote::Unix { uid } => uid,
            Remote::Tcp(remote) => self
                .tcp_faces
                .get(&peer.listener)
                .and_then(|local| crate::peer_uid::loopback_tcp_owner(remote, *local)),
            Remote::Quic(_) => None,
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

impl<R: CryptoRng> HostMachine for Realm<R> {
    type Target = Authority;
    /// A [`Output::Persist`] or [`Output::Forget`], as [`Store::apply`] takes them.
    type Durable = Output;
    type App = core::convert::Infallible;

    fn opened(&mut self, conn: ConnId, peer: &Peer) -> Input {
        if self.peer_faces.contains(&peer.listener) {
            return Input::Opened {
                conn,
                face: Face::Peer,
                namespaces: Vec::new(),
            };
        }
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
    fn dialled(&mut self, conn: ConnId, authority: Authority) -> Input {
        Input::Dialled { conn, authority }
    }
    fn dial_failed(&mut self, authority: Authority) -> Input {
        Input::DialFailed { authority }
    }
    fn effect(&mut self, output: Output) -> Effect<Authority, Output, Self::App> {
        match output {
            Output::Send { conn, bytes } => Effect::Send { conn, bytes },
            Output::Close { conn } => Effect::Close { conn },
            Output::Connect { authority } => Effect::Dial(authority),
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

    /// Resolves the realms the server dials with `dialer`.
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = Some(dialer);
        self
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
    fn resolve(&mut self, realm: &Authority) -> Option<Endpoint> {
        self.dialer.as_ref()?.endpoint(realm)
    }
}
