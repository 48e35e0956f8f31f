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
//! Discovery (§8.1–§8.2): with a [`Dns`] ([`Realm::with_dns`]) the machine's DNS questions are
//! answered by the resolver thread; the realm polls for answers every [`DNS_POLL`] while any is
//! outstanding. Without one every question is answered "no records" at once. A dial goes to the
//! endpoint discovery chose: an IP literal as is, a host name through the same resolver
//! ([`RealmHooks::with_dns`]), then over the transport a [`Dialer`] picks for it (TLS, or what
//! a static entry names). Connections on a listener registered with [`Realm::with_peer_face`]
//! are the peer face (§8.4): other realms' servers, with no namespaces.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;

use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::discovery::Endpoint;
use weft_proto::airc::server::{Face, Input, Output, Server};
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

use super::dns::{Answers, Dns};
use super::peer::Dialer;
use super::store::Store;
use crate::host::{self, Effect, Hooks, HostMachine, Peer, Remote};

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
    /// The resolver and its answers, when DNS is on.
    dns: Option<(Dns, Answers)>,
    /// DNS questions out and not answered yet.
    asked: usize,
    /// The latest time the machine was handed, for answers fed from `poll`.
    now: Timestamp,
}

/// How often a realm checks for DNS answers while a question is out.
pub const DNS_POLL: std::time::Duration = std::time::Duration::from_millis(10);

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
            asked: 0,
            now: Timestamp::ZERO,
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

    /// Answers the machine's DNS questions with `dns` (§8.1–§8.2).
    pub fn with_dns(mut self, dns: Dns, answers: Answers) -> Self {
        self.dns = Some((dns, answers));
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

impl<R: CryptoRng> Realm<R> {
    /// Feeds the machine every DNS answer that has arrived.
    fn answers(&mut self, now: Timestamp) {
        let mut got = Vec::new();
        if let Some((_, answers)) = &self.dns {
            while let Ok(a) = answers.try_recv() {
                got.push(a);
            }
        }
        for (name, kind, answer) in got {
            self.asked = self.asked.saturating_sub(1);
            self.server
                .handle(now, Input::Resolved { name, kind, answer });
        }
    }
}

impl<R: CryptoRng> Machine for Realm<R> {
    type Input = Input;
    type Output = Output;
    fn handle(&mut self, now: Timestamp, input: Input) {
        let admin = match &input {
            Input::Opened { conn, .. } if self.admin_opened == Some(*conn) => {
                self.admin_opened.take()
            }
            _ => None,
        };
        self.now = now;
        self.server.handle(now, input);
        if let Some(conn) = admin {
            self.server.handle(now, Input::Administrator { conn });
        }
    }
    fn poll(&mut self) -> Option<Output> {
        loop {
            match self.server.poll()? {
                Output::Resolve { name, kind } => match &self.dns {
                    Some((dns, _)) => {
                        self.asked += 1;
                        dns.ask(name, kind);
                    }
                    None => {
                        let answer = weft_proto::airc::discovery::Answer::Nothing;
                        let input = Input::Resolved { name, kind, answer };
                        self.server.handle(self.now, input);
                    }
                },
                other => return Some(other),
            }
        }
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        let server = self.server.poll_timeout();
        if self.asked == 0 {
            return server;
        }
        let check = Wakeup::new(self.now.saturating_add(DNS_POLL), "DNS answers");
        Some(match server {
            Some(w) if w.at <= check.at => w,
            _ => check,
        })
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        self.answers(now);
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
        let uid = self.uid_of(peer);
        self.admin_opened = uid
            .filter(|uid| self.administrators.contains(uid))
            .map(|_| conn);
        let namespaces = uid
            .and_then(|uid| self.namespaces.get(&uid).cloned())
            .unwrap_or_default();
        let face = if self.peer_faces.contains(&peer.listener) {
            Face::Peer
        } else {
            Face::Client
        };
        Input::Opened {
            conn,
            face,
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
    dns: Option<Dns>,
    dialer: Option<Dialer>,
}

impl RealmHooks {
    /// Hooks over `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            dns: None,
            dialer: None,
        }
    }

    /// Resolves the host names of dials with `dns`.
    pub fn with_dns(mut self, dns: Dns) -> Self {
        self.dns = Some(dns);
        self
    }

    /// Dials peers over the transport `dialer` picks for them (TLS unless a static entry says
    /// otherwise), verifying certificates against its trust store.
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
    /// The endpoint discovery chose (§8.1): an IP literal as is, a host name through DNS; then
    /// the dialer's transport for it. Without a dialer (in-process tests), plain TCP.
    fn resolve(&mut self, dial: &Dial) -> Option<host::Endpoint> {
        let host = &dial.endpoint.host;
        let ip = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip,
            Err(_) => self.dns.as_ref()?.ip(host)?,
        };
        let addr = SocketAddr::new(ip, dial.endpoint.port);
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
}
