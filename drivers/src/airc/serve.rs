//! `weft airc serve`: the [`Server`] machine on real sockets, through the smol adapter.
//!
//! The client face listens on a Unix socket and, if asked, on loopback TCP and on loopback
//! WebSocket (§3.1); [`Realm`] maps
//! connections to the machine (their namespaces from `SO_PEERCRED`, or from the owner of a
//! loopback TCP peer's socket, AIRC §5) and [`RealmHooks`] commits persists to the store
//! before the next output runs. The peer face (§8.3, §8.4) listens on TLS over TCP and on QUIC
//! when configured ([`super::peer`]), and the realm signs with the key of [`super::realm_key`].
//! Everything else is [`crate::smol`]'s.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use smol::channel::Receiver;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::link::LinkConfig;
use weft_proto::airc::passport::book::PassportConfig;
use weft_proto::airc::policy::Policy;
use weft_proto::airc::server::{Server, ServerConfig};

use super::config::TlsFiles;
use super::host::{Realm, RealmHooks, RealmInput};
use super::peer::{Dialer, PeerConfig};
use super::realm_key;
use super::store::Store;
use crate::host::{Commands, Endpoint, Host, Listener};
use crate::tls::{TlsClient, TlsServer};

/// How a realm server runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The realm it routes for.
    pub realm: Authority,
    /// Where the client face listens.
    pub client_socket: PathBuf,
    /// A loopback TCP address the client face also listens on; any other address is refused at
    /// start, since only a loopback peer's uid can be known (§5).
    pub client_tcp: Option<SocketAddr>,
    /// A loopback TCP address the client face also serves over WebSocket (§3.1: one AIRC frame
    /// per text message); refused at start unless loopback, as `client_tcp` is.
    pub client_ws: Option<SocketAddr>,
    /// The web origins allowed to open `client_ws` from a browser (`[client_ws] origins`);
    /// empty, the default, allows none: command-line clients send no `Origin`.
    pub client_ws_origins: Vec<String>,
    /// Where durable state lives.
    pub data_dir: PathBuf,
    /// The operator's uid → namespaces table (§5).
    pub namespaces: BTreeMap<u32, Vec<Namespace>>,
    /// Administrators' uids besides root and the server's own account, which always are (§5).
    pub administrators: Vec<u32>,
    /// Other realms' Ed25519 keys known without DNS (§8.2 `known_keys`).
    pub known_keys: BTreeMap<Authority, Vec<[u8; 32]>>,
    /// Realms whose traffic is accepted unsigned (§6.2, §8.4).
    pub trusted_unsigned: Vec<Authority>,
    /// The realm's policy (§10).
    pub policy: Policy,
    /// `accept_offers` and `auto_accept` (§11.4, §11.5).
    pub links: LinkConfig,
    /// The peer face's TLS certificate and key, and the trust store its dials verify against.
    pub tls: Option<TlsFiles>,
    /// The nameserver discovery asks (§8.1–§8.2); `None` is the system's.
    pub nameserver: Option<SocketAddr>,
    /// The peer face: its listeners and static authority entries.
    pub peer: PeerConfig,
    /// The realm's Ed25519 signing key (§9.1), a PKCS#8 PEM file; `None` is
    /// [`realm_key::KEY_FILE`] in the data directory, made on first start.
    pub signing_key: Option<PathBuf>,
    /// Who may issue passports and the web base of their URL rendering (§12.2, §12.3).
    pub passports: PassportConfig,
}

impl ServeConfig {
    /// Embedded defaults under `data_dir`: realm `localhost`, the socket `airc.sock` inside it,
    /// and the invoking user's uid mapped to `namespace`.
    pub fn local(data_dir: &Path, namespace: &str) -> io::Result<Self> {
        let ns = Namespace::parse(namespace).map_err(io::Error::other)?;
        let uid = rustix::process::getuid().as_raw();
        Ok(Self {
            realm: Authority::parse("localhost").map_err(io::Error::other)?,
            client_socket: data_dir.join("airc.sock"),
            client_tcp: None,
            client_ws: None,
            client_ws_origins: Vec::new(),
            data_dir: data_dir.to_path_buf(),
            namespaces: BTreeMap::from([(uid, vec![ns])]),
            administrators: Vec::new(),
            known_keys: BTreeMap::new(),
            trusted_unsigned: Vec::new(),
            policy: Policy::default(),
            links: LinkConfig::default(),
            tls: None,
            nameserver: None,
            peer: PeerConfig::default(),
            signing_key: None,
            passports: PassportConfig::default(),
        })
    }
}

impl ServeConfig {
    /// Where the realm's signing key is: the configured file, else [`realm_key::KEY_FILE`] in
    /// the data directory.
    pub fn signing_key_path(&self) -> PathBuf {
        self.signing_key
            .clone()
            .unwrap_or_else(|| self.data_dir.join(realm_key::KEY_FILE))
    }
}

/// Runs the server until `stop` yields (or forever, if it never does). `ready` is called once
/// the socket is listening.
pub fn serve(config: ServeConfig, stop: Receiver<()>, ready: impl FnOnce()) -> io::Result<()> {
    let (mut host, listeners, commands) = open(&config)?;
    ready();
    smol::block_on(smol::future::or(
        crate::smol::run_commanded(&mut host, listeners, &commands),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

/// The host core of a realm served by `weft airc serve`.
pub type RealmHost = Host<Realm<chacha20::ChaCha20Rng>, RealmHooks>;

/// A realm's host core over its store, its bound listeners (the Unix socket first, then
/// loopback TCP if configured, then the peer face), and the command channel its DNS answers
/// come back on: what every adapter's `run_commanded` needs to serve `config`.
pub fn open(config: &ServeConfig) -> io::Result<(RealmHost, Vec<Listener>, Commands<RealmInput>)> {
    for (flag, addr) in [
        ("--client-tcp", config.client_tcp),
        ("--client-ws", config.client_ws),
    ] {
        if let Some(addr) = addr
            && !crate::peer_uid::is_loopback(addr)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{flag} {addr}: not a loopback address; a TCP client's identity comes from \
                     the owner of its socket, which only a loopback peer has (use 127.0.0.1 or \
                     [::1])"
                ),
            ));
        }
    }
    // Spooled bodies, links and the audit stream are no other user's to read (§5's namespaces
    // would mean nothing if the store did not keep them apart).
    let socket_inside = config.client_socket.parent() == Some(config.data_dir.as_path());
    crate::state_dir::prepare_dir(&config.data_dir, socket_inside)?;
    let db = config.data_dir.join("airc.redb");
    crate::state_dir::prepare_file(&db)?;
    let store = Store::open(&db)?;
    let mut machine_config = ServerConfig::new(config.realm.clone());
    machine_config.known_namespaces = config.namespaces.values().flatten().cloned().collect();
    machine_config.known_keys.clone_from(&config.known_keys);
    machine_config
        .trusted_unsigned
        .clone_from(&config.trusted_unsigned);
    machine_config.policy = config.policy.clone();
    machine_config.links = config.links.clone();
    machine_config.passports = config.passports.clone();
    let key_path = config
        .signing_key
        .clone()
        .unwrap_or_else(|| config.data_dir.join(realm_key::KEY_FILE));
    machine_config.signing_key = Some(realm_key::load_or_create(&key_path, &mut crate::os_rng())?);
    // Static entries are §8.1 step 2: the machine dials them before any DNS; the dialer keeps
    // each one's transport and certificate name.
    machine_config.static_entries = config
        .peer
        .statics
        .iter()
        .map(|(realm, entry)| {
            let endpoint = weft_proto::airc::discovery::Endpoint::new(
                entry.address.ip().to_string(),
                entry.address.port(),
            );
            (realm.clone(), vec![endpoint])
        })
        .collect();
    let server = Server::new(machine_config, crate::server_provider(), crate::os_rng());
    let mut realm = Realm::new(server, config.namespaces.clone())
        .with_administrators(config.administrators.iter().copied());
    let mut hooks = RealmHooks::new(store);
    let (commander, commands) = crate::host::commands()?;
    match super::dns::Dns::start(config.nameserver, commander) {
        Ok(dns) => realm = realm.with_dns(dns),
        // No resolver (no /etc/resolv.conf): every DNS question is "no records", so only
        // explicit ports, IP literals and static entries are reached.
        Err(e) => eprintln!("weft airc serve: no DNS resolver ({e}); discovery uses no DNS"),
    }

    // A socket left by a server that died is in the way; nothing else lives at this path.
    let _ = std::fs::remove_file(&config.client_socket);
    let listener = Listener::bind(&Endpoint::Unix(config.client_socket.clone()))?;
    // Anyone on the host may connect: who they are comes from SO_PEERCRED, not the file mode.
    std::fs::set_permissions(
        &config.client_socket,
        std::fs::Permissions::from_mode(0o666),
    )?;
    let mut listeners = vec![listener];
    if let Some(addr) = config.client_tcp {
        let tcp = Listener::bind(&Endpoint::Tcp(addr))?;
        let Endpoint::Tcp(local) = tcp.endpoint()? else {
            unreachable!("a TCP listener has a TCP address")
        };
        realm = realm.with_tcp_face(listeners.len(), local);
        listeners.push(tcp);
    }
    if let Some(addr) = config.client_ws {
        let ws = Listener::bind(&Endpoint::Tcp(addr))?;
        let Endpoint::Tcp(local) = ws.endpoint()? else {
            unreachable!("a TCP listener has a TCP address")
        };
        realm = realm.with_ws_face(listeners.len(), local, config.client_ws_origins.clone());
        listeners.push(ws);
    }
    let (listen, dialer) = peer_face(config)?;
    for listener in listen {
        realm = realm.with_peer_face(listeners.len());
        listeners.push(listener);
    }
    hooks = hooks.with_dialer(dialer);
    Ok((Host::new(realm, hooks), listeners, commands))
}

/// The peer face's listeners (TLS or plain TCP, then QUIC, as configured) and the dialer for
/// outgoing links.
fn peer_face(config: &ServeConfig) -> io::Result<(Vec<Listener>, Dialer)> {
    let files = config.tls.clone().unwrap_or_default();
    let server = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Some(TlsServer::from_files(cert, key)?),
        (None, None) => None,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "[tls]: cert and key go together",
            ));
        }
    };
    let mut listeners = Vec::new();
    if let Some(addr) = config.peer.listen {
        listeners.push(match &server {
            Some(server) => Listener::tls(addr, server.clone())?,
            None => Listener::bind(&Endpoint::Tcp(addr))?,
        });
    }
    if let Some(addr) = config.peer.quic {
        let Some(server) = &server else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--peer-quic needs a certificate and key ([tls] cert, key)",
            ));
        };
        listeners.push(Listener::quic(addr, server.clone())?);
    }
    let trust = match &files.trust {
        Some(path) => TlsClient::from_file(path)?,
        None => TlsClient::webpki_roots(),
    };
    Ok((listeners, Dialer::new(config.peer.statics.clone(), trust)))
}
