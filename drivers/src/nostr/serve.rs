//! `weft nostr serve`: the relay core's [`Session`] machine once per WebSocket connection, over
//! the WebSocket layer ([`crate::ws`]) on the smol adapter (`ws://`, or `wss://` with
//! [`ServeOptions::tls`]), with one [`EventStore`] shared by every session.
//!
//! [`NostrRelay`] is the [`WsMachine`]: it opens a session per upgrade (past
//! [`MAX_CONNECTIONS`] the upgrade is refused 503), hands it every text frame, runs the store
//! operations it asks for against the store and answers with the reply (a write is committed
//! before its reply, so the session's `OK true` follows a durable write), hands each event a
//! session broadcasts to every session's live subscriptions, and turns the session's frames and
//! closes into the layer's effects. Frames past [`Limits::max_message_bytes`] are closed 1009 by
//! the layer itself. A plain `GET` with `Accept: application/nostr+json` is answered with the
//! NIP-11 relay information document ([`RelayInfo`]) through [`WsMachine::http`].
//!
//! Relay peering (spec 002, [`super::peering`]): sessions recognise the trusted peers of
//! [`ServeOptions::peering`]; their budget asks ([`Output::Admit`]) are answered from one
//! relay-wide [`PeerRequestLimiter`]; what each peer was served is added to the
//! [`StatusTable`] `GET /admin/peering` answers with; NIP-11 carries `self` and, when
//! `peering.enabled`, the `peering` block.
//!
//! Nothing here holds protocol meaning: the session decides every answer.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::json;
use smol::channel::Receiver;
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::relay::{
    AuthPolicy, Config, EventStore, Input, MemoryStore, Output, Session, StoreError,
};

use super::peering::{self, AdminToken, PeeringOptions};
use super::store::RedbStore;
use crate::host::{Endpoint, Host, Listener, Peer, TlsServer};
use crate::ws::{
    Frame, HttpAnswer, NoDial, Refusal, Request, Ws, WsConfig, WsEffect, WsHooks, WsMachine,
};
use weft_proto::nostr::peering::{PeerRequestLimiter, RelayKey, StatusTable};

/// The address `weft nostr serve` listens on when told none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

/// The data directory `weft nostr serve` keeps its store in when told none.
pub const DEFAULT_DATA_DIR: &str = "./weft-data/nostr";

/// Connections served at once; an upgrade past it is refused with 503 (each holds a session with
/// its own bounded tables, so this bounds the relay's memory).
pub const MAX_CONNECTIONS: usize = 4_096;

/// How often the relay deletes expired events from its store (NIP-40: they are hidden from the
/// second they expire; this frees their space).
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Most expired events one sweep deletes (one committed transaction, on the relay's thread, so a
/// backlog is worked off a batch a minute rather than stalling every socket at once).
pub const SWEEP_BATCH: usize = 1_000;

/// A store whose expired events the relay deletes every [`SWEEP_INTERVAL`].
pub trait Sweep {
    /// Deletes at most [`SWEEP_BATCH`] events past their expiration at `now`; how many.
    fn sweep(&mut self, now: Timestamp) -> Result<u64, StoreError>;
}

impl Sweep for RedbStore {
    fn sweep(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        self.sweep_expired(now, SWEEP_BATCH)
    }
}

/// The memory store hides expired events and holds nothing across restarts: nothing to free.
impl Sweep for MemoryStore {
    fn sweep(&mut self, _now: Timestamp) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// The NIPs this relay implements, as NIP-11's `supported_nips` lists them: NIP-01, NIP-09
/// deletion, NIP-11 itself, NIP-40 expiration, NIP-42 authentication, NIP-45 counts, NIP-62
/// requests to vanish and NIP-77 negentropy.
pub const SUPPORTED_NIPS: [u16; 8] = [1, 9, 11, 40, 42, 45, 62, 77];

/// The media type NIP-11 clients ask for in `Accept`.
pub const NIP11_MEDIA_TYPE: &str = "application/nostr+json";

/// The operator's words about the relay in its NIP-11 document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayInfo {
    /// `name`.
    pub name: Option<String>,
    /// `description`.
    pub description: Option<String>,
    /// `pubkey`: the operator's key, 64 hex digits.
    pub pubkey: Option<String>,
    /// `contact`.
    pub contact: Option<String>,
    /// The fields relay peering adds: `self` and the `peering` block
    /// ([`peering::nip11_fields`]).
    pub peering: serde_json::Map<String, serde_json::Value>,
}

/// How `weft nostr serve` runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The data directory (made 0700; the store file in it 0600).
    pub data_dir: PathBuf,
    /// This relay's URL as clients name it (NIP-42 and NIP-62 `relay` tags); default
    /// `ws://<listen>` (`wss://` with [`ServeOptions::tls`]).
    pub relay_url: Option<String>,
    /// Who must authenticate (NIP-42).
    pub auth: AuthPolicy,
    /// The bounds on each connection.
    pub limits: Limits,
    /// The NIP-11 document's operator fields.
    pub info: RelayInfo,
    /// Serve `wss://`: every connection opens with a TLS handshake presenting this certificate
    /// (the host layer's one TLS setup, [`crate::tls`]); `None` serves plain `ws://`.
    pub tls: Option<TlsServer>,
    /// Relay peering: the trust list, peer limits, advertisement and admin token.
    pub peering: PeeringOptions,
    /// The relay's key and the pubkey it advertises as `self`, resolved from the environment
    /// ([`peering::resolve_key`]); `None` for a relay without one.
    pub identity: Option<(RelayKey, [u8; 32])>,
}

impl ServeOptions {
    /// A relay on `listen` keeping its store in `data_dir`, with weft's default limits and no
    /// authentication required.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            data_dir,
            relay_url: None,
            auth: AuthPolicy::Optional,
            limits: Limits::DEFAULT,
            info: RelayInfo::default(),
            tls: None,
            peering: PeeringOptions::default(),
            identity: None,
        }
    }
}

/// What the relay machine is told by the layer.
#[derive(Debug)]
pub enum ServeInput {
    /// A WebSocket opened.
    Opened(ConnId),
    /// For the session of a socket.
    Session(ConnId, Input),
    /// A socket closed.
    Closed(ConnId),
}

/// What the relay machine asks of the layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeOutput {
    /// Send a text frame.
    Text(ConnId, String),
    /// Close a socket.
    Close(ConnId, u16, &'static str),
}

/// Every relay session of one listener, over one store.
pub struct NostrRelay<S, R> {
    config: Config,
    store: S,
    sessions: BTreeMap<ConnId, Session>,
    rng: R,
    nip11: String,
    out: VecDeque<ServeOutput>,
    /// When the store is next swept of expired events; set by the first input.
    next_sweep: Option<Timestamp>,
    /// The relay-wide per-peer request budget.
    limiter: PeerRequestLimiter,
    /// One status row per configured peer.
    status: StatusTable,
    /// The bearer token of `GET /admin/peering`.
    admin_token: Option<AdminToken>,
}

impl<S, R> std::fmt::Debug for NostrRelay<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NostrRelay")
            .field("config", &self.config)
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

/// The NIP-11 document for a relay with `config` and the operator's `info`: `supported_nips`
/// lists [`SUPPORTED_NIPS`] and `limitation` the limits each connection is held to.
pub fn nip11_document(config: &Config, info: &RelayInfo) -> String {
    let l = &config.limits;
    let mut doc = json!({
        "supported_nips": SUPPORTED_NIPS,
        "software": "https://github.com/weft",
        "version": env!("CARGO_PKG_VERSION"),
        "limitation": {
            "max_message_length": l.max_message_bytes,
            "max_subscriptions": l.max_subscriptions,
            "max_limit": l.max_limit,
            "max_subid_length": l.max_subscription_id_chars,
            "max_content_length": l.max_event_bytes,
            "default_limit": l.default_limit,
            "auth_required": config.auth == AuthPolicy::All,
            "restricted_writes": config.auth != AuthPolicy::Optional,
            "payment_required": false,
        },
    });
    if let Some(secs) = l.max_future_secs {
        doc["limitation"]["created_at_upper_limit"] = json!(secs);
    }
    for (key, value) in &info.peering {
        doc[key] = value.clone();
    }
    for (key, value) in [
        ("name", &info.name),
        ("description", &info.description),
        ("pubkey", &info.pubkey),
        ("contact", &info.contact),
    ] {
        if let Some(v) = value {
            doc[key] = json!(v);
        }
    }
    doc.to_string()
}

impl<S: EventStore + Sweep, R: CryptoRng> NostrRelay<S, R> {
    /// The relay over `store`, each session drawing its NIP-42 challenge from `rng`.
    pub fn new(config: Config, info: &RelayInfo, store: S, rng: R) -> Self {
        let nip11 = nip11_document(&config, info);
        Self {
            config,
            store,
            sessions: BTreeMap::new(),
            rng,
            nip11,
            out: VecDeque::new(),
            next_sweep: None,
            limiter: PeeringOptions::default().limiter(),
            status: StatusTable::default(),
            admin_token: None,
        }
    }

    /// The relay with `peering`'s request budget, status rows and admin token (the trust list
    /// and peer limits are the sessions', in [`Config::peering`]).
    pub fn with_peering(mut self, peering: &PeeringOptions) -> Self {
        self.limiter = peering.limiter();
        self.status = StatusTable::new(&peering.trust);
        self.admin_token = peering.admin_token.clone();
        self
    }

    /// The per-peer status rows.
    pub fn status(&self) -> &StatusTable {
        &self.status
    }

    /// The per-peer status rows, for the outbound sync workers to update.
    pub fn status_mut(&mut self) -> &mut StatusTable {
        &mut self.status
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// How many connections have a session.
    pub fn connections(&self) -> usize {
        self.sessions.len()
    }

    /// Runs `conn`'s outputs, and those of every session they reach, until none has more:
    /// frames go out, store operations are run and answered, broadcasts reach every session,
    /// and once a session's frames are handed to the layer it hears they are flushed.
    fn pump(&mut self, now: Timestamp, conn: ConnId) {
        let mut work = VecDeque::from([conn]);
        while let Some(c) = work.pop_front() {
            let mut sent = false;
            while let Some(session) = self.sessions.get_mut(&c) {
                let Some(output) = session.poll() else {
                    if !sent {
                        break;
                    }
                    // Handed to the layer, which writes them in order: the next page may come.
                    sent = false;
                    session.handle(now, Input::Flushed);
                    continue;
                };
                match output {
                    Output::Send(frame) => {
                        self.out.push_back(ServeOutput::Text(c, frame.to_text()));
                        sent = true;
                    }
                    Output::Store { request, op } => {
                        let reply = self.store.execute(&op);
                        session.handle(now, Input::Stored { request, reply });
                    }
                    Output::Admit { request, peer } => {
                        let admission = self.limiter.admit(now, &peer);
                        session.handle(now, Input::Admitted { request, admission });
                    }
                    Output::Broadcast(event) => {
                        for (&other, s) in self.sessions.iter_mut() {
                            s.handle(now, Input::Live(event.clone()));
                            if other != c && !work.contains(&other) {
                                work.push_back(other);
                            }
                        }
                    }
                    Output::Close { code, reason } => {
                        self.out.push_back(ServeOutput::Close(c, code, reason));
                        // The layer reports no close for a socket its machine closed.
                        self.sessions.remove(&c);
                    }
                }
            }
            if let Some((peer, served)) = self.sessions.get_mut(&c).and_then(Session::take_served) {
                self.status.served(&peer, served.requests, served.events);
            }
        }
    }
}

impl<S: EventStore + Sweep, R: CryptoRng> Machine for NostrRelay<S, R> {
    type Input = ServeInput;
    type Output = ServeOutput;

    fn handle(&mut self, now: Timestamp, input: ServeInput) {
        if self.next_sweep.is_none() {
            self.next_sweep = Some(now.saturating_add(SWEEP_INTERVAL));
        }
        match input {
            ServeInput::Opened(conn) => {
                let session = Session::new(self.config.clone(), now, &mut self.rng);
                self.sessions.insert(conn, session);
                self.pump(now, conn);
            }
            ServeInput::Session(conn, input) => {
                if let Some(s) = self.sessions.get_mut(&conn) {
                    s.handle(now, input);
                    self.pump(now, conn);
                }
            }
            ServeInput::Closed(conn) => {
                self.sessions.remove(&conn);
            }
        }
    }

    fn poll(&mut self) -> Option<ServeOutput> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let sessions = self
            .sessions
            .values()
            .filter_map(Machine::poll_timeout)
            .min_by_key(|w| w.at);
        let sweep = self
            .next_sweep
            .map(|at| Wakeup::new(at, "sweep expired events"));
        Wakeup::earliest(sessions, sweep)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.next_sweep.is_some_and(|at| at <= now) {
            self.next_sweep = Some(now.saturating_add(SWEEP_INTERVAL));
            // A failed sweep frees nothing and hides nothing more: reads already skip the
            // expired. The next one tries again.
            if let Err(e) = self.store.sweep(now) {
                eprintln!("weft nostr serve: sweeping expired events: {}", e.0);
            }
        }
        let due: Vec<ConnId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.poll_timeout().is_some_and(|w| w.at <= now))
            .map(|(&c, _)| c)
            .collect();
        for conn in due {
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.handle_timeout(now);
                self.pump(now, conn);
            }
        }
    }
}

impl<S: EventStore + Sweep, R: CryptoRng> WsMachine for NostrRelay<S, R> {
    type Target = NoDial;
    type App = Infallible;

    fn upgrade(
        &mut self,
        _now: Timestamp,
        conn: ConnId,
        _peer: &Peer,
        _request: &Request,
    ) -> Result<ServeInput, Refusal> {
        if self.sessions.len() >= MAX_CONNECTIONS {
            return Err(Refusal {
                status: 503,
                reason: "too many connections\n".into(),
            });
        }
        Ok(ServeInput::Opened(conn))
    }

    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<ServeInput> {
        match frame {
            Frame::Text(text) => Some(ServeInput::Session(conn, Input::Frame(text))),
            // NIP-01 speaks JSON text; a binary message is read as text, so it gets the answer
            // a malformed frame gets.
            Frame::Binary(bytes) => Some(ServeInput::Session(
                conn,
                Input::Frame(String::from_utf8_lossy(&bytes).into_owned()),
            )),
            _ => None,
        }
    }

    fn closed(&mut self, conn: ConnId) -> Option<ServeInput> {
        Some(ServeInput::Closed(conn))
    }

    fn dialled(&mut self, _conn: ConnId, target: NoDial) -> Option<ServeInput> {
        match target {}
    }

    fn dial_failed(&mut self, target: NoDial) -> Option<ServeInput> {
        match target {}
    }

    fn effect(&mut self, output: ServeOutput) -> Option<WsEffect<NoDial, Infallible>> {
        Some(match output {
            ServeOutput::Text(conn, text) => WsEffect::Text { conn, text },
            ServeOutput::Close(conn, code, reason) => WsEffect::Close {
                conn,
                code,
                reason: reason.into(),
            },
        })
    }

    fn http(&self, request: &Request) -> Option<HttpAnswer> {
        if let Some(answer) =
            peering::admin_answer(request, self.admin_token.as_ref(), &self.status)
        {
            return Some(answer);
        }
        let path = request.path.split('?').next().unwrap_or("");
        let cors = vec![
            ("access-control-allow-origin".into(), "*".into()),
            ("access-control-allow-headers".into(), "*".into()),
            ("access-control-allow-methods".into(), "GET, OPTIONS".into()),
        ];
        // A browser's preflight for the document.
        if request.method == "OPTIONS" && path == "/" {
            return Some(HttpAnswer {
                status: 204,
                content_type: "text/plain".into(),
                headers: cors,
                body: String::new(),
            });
        }
        let wants_info = request
            .header("accept")
            .is_some_and(|a| a.to_ascii_lowercase().contains(NIP11_MEDIA_TYPE));
        (request.method == "GET" && path == "/" && wants_info).then(|| HttpAnswer {
            status: 200,
            content_type: NIP11_MEDIA_TYPE.into(),
            headers: cors,
            body: self.nip11.clone(),
        })
    }
}

/// The host of `weft nostr serve`: the relay over the WebSocket layer on the redb store.
pub type NostrHost =
    Host<Ws<NostrRelay<RedbStore, chacha20::ChaCha20Rng>>, WsHooks<fn(Infallible)>>;

/// The session configuration `options` give.
pub fn session_config(options: &ServeOptions, bound: SocketAddr) -> Config {
    Config {
        relay_url: options.relay_url.clone().unwrap_or_else(|| {
            let scheme = if options.tls.is_some() { "wss" } else { "ws" };
            format!("{scheme}://{bound}")
        }),
        limits: options.limits,
        auth: options.auth,
        provider: crate::server_provider(),
        peering: options.peering.treatment(),
    }
}

/// Runs the relay on the smol adapter until `stop` yields (or forever). `ready` gets the bound
/// address once the relay listens and its store is open.
pub fn serve(
    options: ServeOptions,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let store = RedbStore::open_dir(&options.data_dir)?;
    let listener = match &options.tls {
        Some(server) => Listener::tls(options.listen, server.clone())?,
        None => Listener::bind(&Endpoint::Tcp(options.listen))?,
    };
    let bound = match listener.endpoint()? {
        Endpoint::Tcp(addr) => addr,
        _ => options.listen,
    };
    let config = session_config(&options, bound);
    let mut info = options.info.clone();
    info.peering = peering::nip11_fields(
        options.identity.as_ref().map(|(_, pk)| pk),
        &options.peering,
    );
    let relay =
        NostrRelay::new(config, &info, store, crate::os_rng()).with_peering(&options.peering);
    let machine = Ws::new(relay, WsConfig::new(options.limits.max_message_bytes));
    let mut host: NostrHost = Host::new(machine, WsHooks(drop_app as fn(Infallible)));
    ready(bound);
    smol::block_on(smol::future::or(
        crate::smol::run(&mut host, vec![listener]),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

fn drop_app(app: Infallible) {
    match app {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Remote;
    use weft_proto::core::rand_core::SeedableRng;
    use weft_proto::nostr::relay::MemoryStore;

    const NOW: u64 = 1_790_000_000_000;

    fn relay() -> NostrRelay<MemoryStore, chacha20::ChaCha20Rng> {
        let options = ServeOptions::new("127.0.0.1:7777".parse().unwrap(), PathBuf::from("x"));
        let config = session_config(&options, options.listen);
        NostrRelay::new(
            config,
            &RelayInfo::default(),
            MemoryStore::default(),
            chacha20::ChaCha20Rng::seed_from_u64(11),
        )
    }

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn open(r: &mut NostrRelay<MemoryStore, chacha20::ChaCha20Rng>, n: u64) -> Result<(), u16> {
        let peer = Peer {
            listener: 0,
            remote: Remote::Tcp("127.0.0.1:5000".parse().unwrap()),
        };
        let now = Timestamp::from_millis(NOW);
        let input = r
            .upgrade(now, ConnId(n), &peer, &request("GET", "/", &[]))
            .map_err(|refusal| refusal.status)?;
        r.handle(now, input);
        Ok(())
    }

    fn texts(r: &mut NostrRelay<MemoryStore, chacha20::ChaCha20Rng>) -> Vec<(ConnId, String)> {
        std::iter::from_fn(|| r.poll())
            .filter_map(|o| match o {
                ServeOutput::Text(c, t) => Some((c, t)),
                ServeOutput::Close(..) => None,
            })
            .collect()
    }

    #[test]
    fn connections_past_the_cap_are_refused_503_and_a_closed_one_makes_room() {
        let mut r = relay();
        for n in 0..MAX_CONNECTIONS as u64 {
            open(&mut r, n).unwrap();
        }
        assert_eq!(open(&mut r, u64::MAX), Err(503));
        assert_eq!(r.connections(), MAX_CONNECTIONS);
        let closed = r.closed(ConnId(0)).unwrap();
        r.handle(Timestamp::from_millis(NOW), closed);
        assert_eq!(open(&mut r, u64::MAX), Ok(()));
    }

    #[test]
    fn an_event_one_socket_publishes_reaches_another_sockets_subscription() {
        let mut r = relay();
        open(&mut r, 1).unwrap();
        open(&mut r, 2).unwrap();
        let now = Timestamp::from_millis(NOW);
        let sub = r
            .message(
                ConnId(2),
                Frame::Text(r#"["REQ","s",{"kinds":[1]}]"#.into()),
            )
            .unwrap();
        r.handle(now, sub);
        let _ = texts(&mut r);
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(12);
        let key = weft_proto::crypto::generate_secp256k1(provider, &mut rng);
        let event = weft_proto::nostr::event::UnsignedEvent {
            created_at: NOW / 1000,
            kind: 1,
            tags: vec![],
            content: "hi".into(),
        }
        .sign(provider, &key, &mut rng)
        .unwrap();
        let publish = r
            .message(
                ConnId(1),
                Frame::Text(format!("[\"EVENT\",{}]", event.to_json())),
            )
            .unwrap();
        r.handle(now, publish);
        let out = texts(&mut r);
        assert!(
            out.iter()
                .any(|(c, t)| *c == ConnId(1) && t.starts_with("[\"OK\"") && t.contains("true")),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|(c, t)| *c == ConnId(2) && t.starts_with("[\"EVENT\",\"s\"")),
            "{out:?}"
        );
        assert_eq!(r.store().len(), 1);
    }

    #[test]
    fn the_store_is_swept_every_interval_from_the_first_input() {
        let mut r = relay();
        assert_eq!(r.poll_timeout(), None);
        open(&mut r, 1).unwrap();
        let due = Timestamp::from_millis(NOW).saturating_add(SWEEP_INTERVAL);
        assert_eq!(r.poll_timeout().map(|w| w.at), Some(due));
        r.handle_timeout(due);
        assert_eq!(
            r.poll_timeout().map(|w| w.at),
            Some(due.saturating_add(SWEEP_INTERVAL))
        );
    }

    #[test]
    fn nip11_answers_only_a_get_of_root_asking_for_it() {
        let r = relay();
        let accept = [("accept", "application/nostr+json")];
        let doc = r.http(&request("GET", "/", &accept)).unwrap();
        assert_eq!(doc.status, 200);
        assert_eq!(doc.content_type, NIP11_MEDIA_TYPE);
        let v: serde_json::Value = serde_json::from_str(&doc.body).unwrap();
        assert_eq!(v["supported_nips"], json!(SUPPORTED_NIPS));
        assert!(r.http(&request("GET", "/", &[])).is_none());
        assert!(r.http(&request("GET", "/other", &accept)).is_none());
        assert!(r.http(&request("POST", "/", &accept)).is_none());
        assert_eq!(r.http(&request("OPTIONS", "/", &[])).unwrap().status, 204);
    }
}
