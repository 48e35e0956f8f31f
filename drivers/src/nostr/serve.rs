//! `weft nostr serve`: the relay core's [`Session`] machine once per WebSocket connection, over
//! the WebSocket layer ([`crate::ws`]) on the smol adapter (`ws://`, or `wss://` with
//! [`ServeOptions::tls`]), with one [`EventStore`] shared by every session.
//!
//! [`NostrRelay`] is the [`WsMachine`]: it opens a session per upgrade (past
//! [`MAX_CONNECTIONS`] the upgrade is refused 503), hands it every text frame, runs the store
//! operations it asks for against the store and answers with the reply, hands each event a
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
//! Event writes are group-committed ([`GroupCommit`]): the writes the sessions ask for during one
//! pass of the host's loop go into one store transaction, committed when the pass ends (the
//! relay's wakeup is then due, and the host runs it last in every pass), and only then does each
//! session get its reply, so `OK true` still follows a durable write and one fsync serves many
//! events. A group is committed sooner when a session has [`Limits::max_pending_writes`] writes
//! in it (it would refuse the next one `rate-limited:`), when it holds [`MAX_GROUP_WRITES`], and
//! before any input but another `EVENT` (and any other store operation), so a REQ, COUNT or
//! NEG-OPEN meets every write asked before it committed and broadcast, as before. Only the
//! order of a write's `OK` among the answers to later `EVENT`s that need no store (an `OK false`,
//! an ephemeral event passed on) can differ from a store answering at once, as it may for any
//! store that answers later.
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
use weft_proto::nostr::event::Event;
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::relay::{
    AuthPolicy, Config, EventStore, Input, MemoryStore, Output, RequestId, Session, StoreError,
    StoreOp, StoreReply, WriteOutcome,
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

/// What the relay asks of its store besides [`EventStore`]'s operations: deleting expired
/// events every [`SWEEP_INTERVAL`], and hearing of every event a session broadcasts (so a store
/// shared by several processes can pass it to the others' sessions, [`super::pg`]).
pub trait Sweep {
    /// Deletes at most [`SWEEP_BATCH`] events past their expiration at `now`; how many.
    fn sweep(&mut self, now: Timestamp) -> Result<u64, StoreError>;

    /// A session broadcast `event` to this process's sessions (after storing it, unless it is
    /// ephemeral). A store of one process has nothing to do.
    fn published(&mut self, _event: &Event) {}
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

/// How a client's `EVENT` message starts (NIP-01): the only frame that may join a group of writes
/// ([`GroupCommit`]). A frame spelled otherwise (a space after the bracket) just commits the
/// group first, as any other input does.
const EVENT_FRAME: &str = "[\"EVENT\"";

/// Most event writes one group commit holds ([`GroupCommit`]); a group this large is committed
/// at once rather than at the end of the loop pass, so one commit's work (and the wait of the
/// first `OK` in it) stays bounded.
pub const MAX_GROUP_WRITES: usize = 1_024;

/// A store that can make several event writes durable with one commit. The relay groups the
/// writes its sessions ask for within one pass of the host's loop, commits them together, and
/// only then hands each session its store reply (so `OK true` still follows a durable write).
/// The provided methods commit each write on its own, which is right for any backend.
pub trait GroupCommit: EventStore {
    /// Applies `event` as [`EventStore::write`] does, in the open group: later writes and the
    /// outcome see it, but it is durable only once [`GroupCommit::commit_group`] returns `Ok`.
    fn write_grouped(&mut self, event: &Event, now: Timestamp) -> Result<WriteOutcome, StoreError> {
        self.write(event, now)
    }

    /// Makes every write of the group durable; `Err` means none of them may be called stored.
    fn commit_group(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl GroupCommit for RedbStore {
    fn write_grouped(
        &mut self,
        event: &Event,
        _now: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        RedbStore::write_grouped(self, event)
    }

    fn commit_group(&mut self) -> Result<(), StoreError> {
        RedbStore::commit_group(self)
    }
}

/// The memory store keeps nothing across restarts: each write is as durable as it gets at once.
impl GroupCommit for MemoryStore {}

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
    /// Keep events in this PostgreSQL database (a `postgres://` URL) instead of the embedded
    /// store under [`ServeOptions::data_dir`]; several processes may share one ([`super::pg`]).
    pub database: Option<String>,
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
    /// Outbound sync from the enabled peers ([`super::sync`]): `peering.allowPrivateNetworks`
    /// and the workers' bounds.
    pub sync: super::sync::SyncOptions,
}

impl ServeOptions {
    /// A relay on `listen` keeping its store in `data_dir`, with weft's default limits and no
    /// authentication required.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            data_dir,
            database: None,
            relay_url: None,
            auth: AuthPolicy::Optional,
            limits: Limits::DEFAULT,
            info: RelayInfo::default(),
            tls: None,
            peering: PeeringOptions::default(),
            identity: None,
            sync: Default::default(),
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
    /// An event another process serving this relay stored or broadcast: for every session's
    /// live subscriptions (never broadcast again).
    Remote(Event),
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
    /// Event writes applied in the store's open group and not yet committed, in the order the
    /// sessions asked: whose, which request, and the outcome (or why it failed).
    group: Vec<(ConnId, RequestId, Result<WriteOutcome, StoreError>)>,
    /// When the group's first write came: the relay's wakeup, so the host commits the group at
    /// the end of the loop pass that started it.
    group_since: Option<Timestamp>,
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

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> NostrRelay<S, R> {
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
            group: Vec::new(),
            group_since: None,
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

    /// The store, for relay peering's sync workers, which write through the same store the
    /// sessions read (spec 002 §6).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Runs a relay peering sync worker's store operation `op` at `now` on the store the
    /// sessions use (spec 002 §6), after every operation the sessions asked before it: their
    /// open group of writes is committed and answered first.
    pub fn execute_for_sync(&mut self, now: Timestamp, op: &StoreOp) -> StoreReply {
        // The open group holds the store's write transaction: it commits (and its sessions are
        // answered) first, so a worker's write neither waits on it nor joins it unanswered.
        self.commit_and_answer(now);
        self.store.execute(op)
    }

    /// Hands `event` to every session's live subscriptions, as a session's own broadcast does:
    /// a peer's live event reaches local subscribers as a local publish would (spec 002 §6).
    /// The store hears of it too ([`Sweep::published`]), so a store shared by several processes
    /// passes it to the others' sessions: with a shared store only the process whose worker
    /// stored the event first broadcasts it.
    pub fn broadcast(&mut self, now: Timestamp, event: &weft_proto::nostr::event::Event) {
        self.store.published(event);
        let conns: Vec<ConnId> = self.sessions.keys().copied().collect();
        for conn in conns {
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.handle(now, Input::Live(event.clone()));
                self.pump(now, conn);
            }
        }
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
                    Output::Store {
                        request,
                        op: StoreOp::Write { event, now: at },
                    } => {
                        let outcome = self.store.write_grouped(&event, at);
                        self.group.push((c, request, outcome));
                        self.group_since.get_or_insert(now);
                        // A session may have only so many writes waiting before it refuses the
                        // next `rate-limited:`; and a group is bounded.
                        let waiting = self.group.iter().filter(|(w, ..)| *w == c).count();
                        if waiting >= self.config.limits.max_pending_writes
                            || self.group.len() >= MAX_GROUP_WRITES
                        {
                            self.commit(now, &mut work);
                        }
                    }
                    Output::Store { request, op } => {
                        // Reads see every write asked before them, as if each had been
                        // committed on its own.
                        self.commit(now, &mut work);
                        let reply = self.store.execute(&op);
                        if let Some(session) = self.sessions.get_mut(&c) {
                            session.handle(now, Input::Stored { request, reply });
                        }
                    }
                    Output::Admit { request, peer } => {
                        let admission = self.limiter.admit(now, &peer);
                        session.handle(now, Input::Admitted { request, admission });
                    }
                    Output::Broadcast(event) => {
                        self.store.published(&event);
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

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> NostrRelay<S, R> {
    /// [`NostrRelay::commit`], then runs every answered session's outputs.
    fn commit_and_answer(&mut self, now: Timestamp) {
        let mut work = VecDeque::new();
        self.commit(now, &mut work);
        for conn in work {
            self.pump(now, conn);
        }
    }

    /// Commits the group of writes and hands each session its replies, in the order asked; the
    /// sessions answered are queued in `work` to be pumped. A failed commit answers every write
    /// of the group `error:`, as a failed write alone would be.
    fn commit(&mut self, now: Timestamp, work: &mut VecDeque<ConnId>) {
        self.group_since = None;
        if self.group.is_empty() {
            return;
        }
        let committed = self.store.commit_group();
        for (conn, request, outcome) in std::mem::take(&mut self.group) {
            let reply = match (&committed, outcome) {
                (Ok(()), Ok(outcome)) => StoreReply::Written(outcome),
                (Err(e), _) => StoreReply::Failed(e.0.clone()),
                (Ok(()), Err(e)) => StoreReply::Failed(e.0),
            };
            // A socket closed meanwhile: its writes are stored, nobody hears of it (as when
            // it closes right after a write).
            if let Some(session) = self.sessions.get_mut(&conn) {
                session.handle(now, Input::Stored { request, reply });
                if !work.contains(&conn) {
                    work.push_back(conn);
                }
            }
        }
    }
}

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> Machine for NostrRelay<S, R> {
    type Input = ServeInput;
    type Output = ServeOutput;

    fn handle(&mut self, now: Timestamp, input: ServeInput) {
        if self.next_sweep.is_none() {
            self.next_sweep = Some(now.saturating_add(SWEEP_INTERVAL));
        }
        // Only another EVENT may join the open group: whatever else a session is handed (a REQ,
        // a COUNT, a NEG-OPEN, an AUTH, a socket opening or closing) meets the writes asked
        // before it committed, answered and broadcast, as if each had been committed at once (a
        // REQ's stored events then include them, and its live ones do not repeat them).
        let joins_group = match &input {
            ServeInput::Session(_, Input::Frame(text)) => {
                text.trim_start().starts_with(EVENT_FRAME)
            }
            _ => false,
        };
        if !joins_group {
            self.commit_and_answer(now);
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
            ServeInput::Remote(event) => {
                let conns: Vec<ConnId> = self.sessions.keys().copied().collect();
                for conn in conns {
                    if let Some(s) = self.sessions.get_mut(&conn) {
                        s.handle(now, Input::Live(event.clone()));
                        self.pump(now, conn);
                    }
                }
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
        let group = self
            .group_since
            .map(|at| Wakeup::new(at, "commit the writes of this pass"));
        Wakeup::earliest(Wakeup::earliest(sessions, sweep), group)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.group_since.is_some_and(|at| at <= now) {
            self.commit_and_answer(now);
        }
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

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> WsMachine for NostrRelay<S, R> {
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

/// The host of `weft nostr serve`: the relay over the WebSocket layer on a store (redb unless
/// told otherwise).
pub type NostrHost<S = RedbStore> =
    Host<Ws<NostrRelay<S, chacha20::ChaCha20Rng>>, WsHooks<fn(Infallible)>>;

/// What the relay's host is fed from off its loop (events other processes stored, [`super::pg`]).
pub type RelayCommands = crate::host::Commands<crate::ws::WsInput<NoDial, ServeInput>>;

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
    match options.database.clone() {
        None => {
            let store = RedbStore::open_dir(&options.data_dir)?;
            run_relay(options, store, None, stop, ready)
        }
        Some(url) => {
            let (store, commands, _listening) = super::pg::open(&url)?;
            run_relay(options, store, Some(&commands), stop, ready)
        }
    }
}

/// Runs the relay over `store`, fed `commands` too when given.
fn run_relay<S: EventStore + Sweep + GroupCommit>(
    options: ServeOptions,
    store: S,
    commands: Option<&RelayCommands>,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let listener = match &options.tls {
        Some(server) => Listener::tls(options.listen, server.clone())?,
        None => Listener::bind(&Endpoint::Tcp(options.listen))?,
    };
    let bound = match listener.endpoint()? {
        Endpoint::Tcp(addr) => addr,
        _ => options.listen,
    };
    let config = session_config(&options, bound);
    // One sync worker per enabled peer, beside the relay on its loop (spec 002 §6).
    let sync = super::sync::runner::prepare(&options, &config.relay_url)?;
    let mut info = options.info.clone();
    info.peering = peering::nip11_fields(
        options.identity.as_ref().map(|(_, pk)| pk),
        &options.peering,
    );
    let relay =
        NostrRelay::new(config, &info, store, crate::os_rng()).with_peering(&options.peering);
    if let Some(sync) = sync {
        ready(bound);
        return sync.serve(relay, listener, commands, stop);
    }
    let machine = Ws::new(relay, WsConfig::new(options.limits.max_message_bytes));
    let mut host: NostrHost<S> = Host::new(machine, WsHooks(drop_app as fn(Infallible)));
    ready(bound);
    smol::block_on(smol::future::or(
        async {
            match commands {
                Some(c) => crate::smol::run_commanded(&mut host, vec![listener], c).await,
                None => crate::smol::run(&mut host, vec![listener]).await,
            }
        },
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
        // The host ends the pass with the relay's due timeout: the write's group commits.
        r.handle_timeout(now);
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

    /// An event another process stored reaches each matching subscription here once, and is
    /// neither stored nor broadcast again.
    #[test]
    fn a_remote_event_reaches_live_subscriptions_once_and_is_not_stored() {
        let mut r = relay();
        open(&mut r, 1).unwrap();
        open(&mut r, 2).unwrap();
        let now = Timestamp::from_millis(NOW);
        for (conn, filter) in [(1, r#"{"kinds":[1]}"#), (2, r#"{"kinds":[7]}"#)] {
            let sub = r
                .message(
                    ConnId(conn),
                    Frame::Text(format!(r#"["REQ","s",{filter}]"#)),
                )
                .unwrap();
            r.handle(now, sub);
        }
        let _ = texts(&mut r);
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(13);
        let key = weft_proto::crypto::generate_secp256k1(provider, &mut rng);
        let event = weft_proto::nostr::event::UnsignedEvent {
            created_at: NOW / 1000,
            kind: 1,
            tags: vec![],
            content: "from another process".into(),
        }
        .sign(provider, &key, &mut rng)
        .unwrap();
        r.handle(now, ServeInput::Remote(event.clone()));
        let out = texts(&mut r);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, ConnId(1));
        assert!(out[0].1.contains(&event.id_hex()), "{out:?}");
        assert_eq!(r.store().len(), 0, "never stored here");
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

    /// The memory store, counting group commits, and failing them when told to (its events are
    /// then held all the same: only the answers are under test).
    #[derive(Default)]
    struct Grouping {
        inner: MemoryStore,
        commits: usize,
        fail: bool,
    }

    impl EventStore for Grouping {
        fn write(&mut self, event: &Event, now: Timestamp) -> Result<WriteOutcome, StoreError> {
            self.inner.write(event, now)
        }
        fn vanish(&mut self, request: &Event) -> Result<u64, StoreError> {
            self.inner.vanish(request)
        }
        fn query(
            &mut self,
            filter: &weft_proto::nostr::message::Filter,
            after: Option<&weft_proto::nostr::relay::Cursor>,
            max: usize,
            now: Timestamp,
        ) -> Result<Vec<Event>, StoreError> {
            self.inner.query(filter, after, max, now)
        }
        fn count(
            &mut self,
            filters: &[weft_proto::nostr::message::Filter],
            now: Timestamp,
        ) -> Result<u64, StoreError> {
            self.inner.count(filters, now)
        }
    }

    impl Sweep for Grouping {
        fn sweep(&mut self, _now: Timestamp) -> Result<u64, StoreError> {
            Ok(0)
        }
    }

    impl GroupCommit for Grouping {
        fn commit_group(&mut self) -> Result<(), StoreError> {
            self.commits += 1;
            if self.fail {
                return Err(StoreError("store: the disk is full".into()));
            }
            Ok(())
        }
    }

    type Grouped = NostrRelay<Grouping, chacha20::ChaCha20Rng>;

    fn grouped(fail: bool) -> Grouped {
        let options = ServeOptions::new("127.0.0.1:7777".parse().unwrap(), PathBuf::from("x"));
        let config = session_config(&options, options.listen);
        let store = Grouping {
            fail,
            ..Grouping::default()
        };
        NostrRelay::new(
            config,
            &RelayInfo::default(),
            store,
            chacha20::ChaCha20Rng::seed_from_u64(13),
        )
    }

    fn connect<S: EventStore + Sweep + GroupCommit>(
        r: &mut NostrRelay<S, chacha20::ChaCha20Rng>,
        n: u64,
    ) {
        let peer = Peer {
            listener: 0,
            remote: Remote::Tcp("127.0.0.1:5000".parse().unwrap()),
        };
        let now = Timestamp::from_millis(NOW);
        let input = r
            .upgrade(now, ConnId(n), &peer, &request("GET", "/", &[]))
            .unwrap();
        r.handle(now, input);
    }

    fn frame<S: EventStore + Sweep + GroupCommit>(
        r: &mut NostrRelay<S, chacha20::ChaCha20Rng>,
        n: u64,
        text: String,
    ) {
        let input = r.message(ConnId(n), Frame::Text(text)).unwrap();
        r.handle(Timestamp::from_millis(NOW), input);
    }

    fn drain<S: EventStore + Sweep + GroupCommit>(
        r: &mut NostrRelay<S, chacha20::ChaCha20Rng>,
    ) -> Vec<(ConnId, String)> {
        std::iter::from_fn(|| r.poll())
            .filter_map(|o| match o {
                ServeOutput::Text(c, t) => Some((c, t)),
                ServeOutput::Close(..) => None,
            })
            .collect()
    }

    fn notes(n: usize, seed: u64) -> Vec<Event> {
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(seed);
        let key = weft_proto::crypto::generate_secp256k1(provider, &mut rng);
        (0..n)
            .map(|i| {
                weft_proto::nostr::event::UnsignedEvent {
                    created_at: NOW / 1000 - i as u64,
                    kind: 1,
                    tags: vec![],
                    content: format!("note {i}"),
                }
                .sign(provider, &key, &mut rng)
                .unwrap()
            })
            .collect()
    }

    fn oks(out: &[(ConnId, String)]) -> Vec<String> {
        out.iter()
            .filter(|(_, t)| t.starts_with("[\"OK\""))
            .map(|(_, t)| t.clone())
            .collect()
    }

    #[test]
    fn the_writes_of_one_pass_are_answered_only_after_their_one_commit() {
        let mut r = grouped(false);
        connect(&mut r, 1);
        let _ = drain(&mut r);
        let events = notes(3, 21);
        for e in &events {
            frame(&mut r, 1, format!("[\"EVENT\",{}]", e.to_json()));
        }
        // Nothing is acknowledged before the commit, and the relay asks to be woken now for it.
        assert_eq!(oks(&drain(&mut r)), Vec::<String>::new());
        assert_eq!(r.store().commits, 0);
        let now = Timestamp::from_millis(NOW);
        assert!(r.poll_timeout().is_some_and(|w| w.at <= now));
        r.handle_timeout(now);
        assert_eq!(r.store().commits, 1);
        let answered = oks(&drain(&mut r));
        let expected: Vec<String> = events
            .iter()
            .map(|e| format!("[\"OK\",\"{}\",true,\"\"]", e.id_hex()))
            .collect();
        assert_eq!(answered, expected, "every write true, in the order sent");
        assert!(r.poll_timeout().is_none_or(|w| w.at > now));
    }

    #[test]
    fn a_failed_group_commit_answers_every_write_of_the_group_error_and_broadcasts_none() {
        let mut r = grouped(true);
        connect(&mut r, 1);
        connect(&mut r, 2);
        frame(&mut r, 2, r#"["REQ","live",{"kinds":[1]}]"#.into());
        let _ = drain(&mut r);
        let events = notes(4, 22);
        for e in &events {
            frame(&mut r, 1, format!("[\"EVENT\",{}]", e.to_json()));
        }
        r.handle_timeout(Timestamp::from_millis(NOW));
        let out = drain(&mut r);
        let answered = oks(&out);
        assert_eq!(answered.len(), events.len(), "{out:?}");
        for (ok, e) in answered.iter().zip(&events) {
            assert!(
                ok.starts_with(&format!("[\"OK\",\"{}\",false,\"error:", e.id_hex())),
                "{ok}"
            );
        }
        assert!(
            !out.iter().any(|(c, _)| *c == ConnId(2)),
            "nothing uncommitted reaches a subscriber: {out:?}"
        );
    }

    #[test]
    fn a_read_in_the_same_pass_as_a_write_sees_it_after_its_ok() {
        let mut r = grouped(false);
        connect(&mut r, 1);
        connect(&mut r, 2);
        let _ = drain(&mut r);
        let e = &notes(1, 23)[0];
        // The same socket writes then reads; another socket reads in the same pass too.
        frame(&mut r, 1, format!("[\"EVENT\",{}]", e.to_json()));
        frame(&mut r, 1, r#"["REQ","mine",{"kinds":[1]}]"#.into());
        frame(&mut r, 2, r#"["REQ","theirs",{"kinds":[1]}]"#.into());
        let out = drain(&mut r);
        assert_eq!(r.store().commits, 1, "the first read committed the group");
        let on = |conn: u64| -> Vec<&str> {
            out.iter()
                .filter(|(c, _)| *c == ConnId(conn))
                .map(|(_, t)| &t[..t.find(',').unwrap()])
                .collect()
        };
        assert_eq!(on(1), ["[\"OK\"", "[\"EVENT\"", "[\"EOSE\""], "{out:?}");
        assert_eq!(on(2), ["[\"EVENT\"", "[\"EOSE\""], "{out:?}");
    }

    #[test]
    fn a_session_with_its_most_writes_waiting_is_committed_at_once_and_none_is_refused() {
        let mut r = grouped(false);
        connect(&mut r, 1);
        let _ = drain(&mut r);
        let cap = Limits::DEFAULT.max_pending_writes;
        let events = notes(cap * 2 + 1, 24);
        for e in &events {
            frame(&mut r, 1, format!("[\"EVENT\",{}]", e.to_json()));
        }
        // Two groups of `cap` were committed without waiting for the end of the pass.
        assert_eq!(r.store().commits, 2);
        r.handle_timeout(Timestamp::from_millis(NOW));
        let answered = oks(&drain(&mut r));
        assert_eq!(answered.len(), events.len());
        assert!(
            answered.iter().all(|ok| ok.contains(",true,")),
            "{answered:?}"
        );
    }
}
