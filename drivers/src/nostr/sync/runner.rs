//! The outbound sync workers inside `weft nostr serve` (spec 002 §6): one
//! [`Worker`] per enabled peer, on the relay's own loop.
//!
//! [`SyncRelay`] is the relay's [`WsMachine`] with the workers beside it. It hands every accepted
//! socket, frame and timeout that is the relay's to the relay ([`NostrRelay`]), and maps each
//! worker's outputs to the world, deciding nothing:
//!
//! | worker output | done here |
//! | --- | --- |
//! | `FetchInfo` | [`Job::FetchInfo`] to the hooks, which run [`Dialer::fetch_info`] on a thread and answer `Info` / `InfoFailed` through the host's command channel |
//! | `Connect` | [`Job::Resolve`] to the hooks, whose thread checks and resolves the URL ([`Dialer::ws_target`]); the [`PeerDial`] it gives is dialled by the WebSocket layer to exactly its checked address; `Connected`, or `Disconnected` when the check, the dial or the handshake fails |
//! | `Send`, `Close` | a text frame on, or a close of, the socket the dial opened |
//! | `Store` | run on the relay's own store, the one its sessions use, before anything else happens |
//! | `Broadcast` | to every local session's live subscriptions, as a local publish |
//! | `Status` | kept as the peer's row ([`SyncRelay::rows`]) and logged when the state changes; a completed reconciliation is logged with the worker's split counters |
//!
//! A socket's frames and close go to the worker that dialled it; a dial the worker closed before
//! it opened is closed when it opens and never reported.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::io;

use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::nostr::peering::status::{PeerStatus as AdminRow, SyncStatus};
use weft_proto::nostr::relay::EventStore;
use weft_proto::nostr::sync::address::{AddressClass, Refused, UrlError};
use weft_proto::nostr::sync::worker::{
    self, InfoError, Input as WorkerInput, Output as WorkerOutput, State, Worker,
};

use super::dial::{DialError, Dialer, PeerDial, PeerHooks};
use crate::host::{Commander, Host, Peer};
use crate::nostr::serve::{GroupCommit, NostrRelay, RelayCommands, ServeInput, ServeOutput, Sweep};
use crate::ws::{Frame, HttpAnswer, NoDial, Refusal, Request, Ws, WsEffect, WsInput, WsMachine};

/// Blocking work a worker's output needs, done off the loop by the host's hooks
/// ([`sync_hooks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    /// Fetch the NIP-11 document for the peer at index `peer`.
    FetchInfo {
        /// The peer's index.
        peer: usize,
        /// The `http(s)://` URL the worker named.
        url: String,
    },
    /// Check and resolve a WebSocket URL for the dial `dial`.
    Resolve {
        /// The runner's name for the dial.
        dial: ConnId,
        /// The `ws(s)://` URL the worker named.
        url: String,
    },
}

/// What the runner is told: the relay's inputs, and the answers of its jobs.
#[derive(Debug)]
pub enum SyncInput {
    /// For the relay.
    Relay(ServeInput),
    /// A [`Job::FetchInfo`] finished.
    Info {
        /// The peer's index.
        peer: usize,
        /// The body, or why not.
        result: Result<String, InfoError>,
    },
    /// A [`Job::Resolve`] finished.
    Resolved {
        /// The dial.
        dial: ConnId,
        /// The checked target, or why not.
        result: Result<PeerDial, DialError>,
    },
    /// For the worker of the peer at index `peer`.
    Worker {
        /// The peer's index.
        peer: usize,
        /// The input.
        input: WorkerInput,
    },
}

/// What the runner asks of the layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncOutput {
    /// The relay's.
    Relay(ServeOutput),
    /// Blocking work for the hooks.
    Job(Job),
    /// Open a WebSocket to a checked target.
    Dial(PeerDial),
    /// Send a text frame on a socket a worker dialled.
    Text(ConnId, String),
    /// Close a socket a worker dialled.
    Close(ConnId),
}

/// A dial under way: whose, and whether the worker still wants it.
#[derive(Clone, Copy, Debug)]
struct Dialling {
    peer: usize,
    conn: ConnId,
    abandoned: bool,
}

/// The relay and its peers' sync workers; see the [module docs](self).
pub struct SyncRelay<S, R> {
    relay: NostrRelay<S, R>,
    workers: Vec<Worker<R>>,
    rows: Vec<Option<worker::PeerStatus>>,
    /// Host socket → (peer, the worker's name for it).
    sockets: BTreeMap<ConnId, (usize, ConnId)>,
    /// (peer, the worker's name) → host socket.
    hosts: BTreeMap<(usize, ConnId), ConnId>,
    /// Dials under way, by the runner's name for them.
    dials: BTreeMap<ConnId, Dialling>,
    next_dial: u64,
    out: VecDeque<SyncOutput>,
}

impl<S, R> std::fmt::Debug for SyncRelay<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncRelay")
            .field("relay", &self.relay)
            .field("workers", &self.workers.len())
            .field("sockets", &self.sockets.len())
            .field("dials", &self.dials.len())
            .finish_non_exhaustive()
    }
}

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> SyncRelay<S, R> {
    /// `relay` with one worker per entry of `workers` (the enabled peers, in the trust list's
    /// order), at `now`. The workers' first outputs (their NIP-11 fetches) are taken at once and
    /// go out on the loop's first turn.
    pub fn new(relay: NostrRelay<S, R>, workers: Vec<Worker<R>>, now: Timestamp) -> Self {
        let rows = workers.iter().map(|w| Some(w.status().clone())).collect();
        let mut runner = Self {
            relay,
            workers,
            rows,
            sockets: BTreeMap::new(),
            hosts: BTreeMap::new(),
            dials: BTreeMap::new(),
            next_dial: 0,
            out: VecDeque::new(),
        };
        runner.drain_all(now);
        runner
    }

    /// The relay.
    pub fn relay(&self) -> &NostrRelay<S, R> {
        &self.relay
    }

    /// The workers, in peer order.
    pub fn workers(&self) -> &[Worker<R>] {
        &self.workers
    }

    /// Each peer's last status row, in peer order.
    pub fn rows(&self) -> impl Iterator<Item = &worker::PeerStatus> {
        self.rows.iter().flatten()
    }

    /// Feeds `input` to worker `peer`, then runs what it asks until it is quiet: store
    /// operations are answered at once, in order, before anything else happens.
    fn feed(&mut self, now: Timestamp, peer: usize, input: Option<WorkerInput>) {
        let mut inputs: VecDeque<WorkerInput> = input.into_iter().collect();
        loop {
            while let Some(output) = self.workers.get_mut(peer).and_then(Machine::poll) {
                if let Some(input) = self.execute(now, peer, output) {
                    inputs.push_back(input);
                }
            }
            let Some(input) = inputs.pop_front() else {
                return;
            };
            if let Some(w) = self.workers.get_mut(peer) {
                w.handle(now, input);
            }
        }
    }

    /// Runs one worker output; an input for the worker when it is answered at once.
    fn execute(
        &mut self,
        now: Timestamp,
        peer: usize,
        output: WorkerOutput,
    ) -> Option<WorkerInput> {
        match output {
            WorkerOutput::FetchInfo { url } => {
                self.out
                    .push_back(SyncOutput::Job(Job::FetchInfo { peer, url }));
            }
            WorkerOutput::Connect { conn, url } => {
                self.next_dial += 1;
                let dial = ConnId(self.next_dial);
                self.dials.insert(
                    dial,
                    Dialling {
                        peer,
                        conn,
                        abandoned: false,
                    },
                );
                self.out
                    .push_back(SyncOutput::Job(Job::Resolve { dial, url }));
            }
            WorkerOutput::Send { conn, text } => {
                if let Some(&host) = self.hosts.get(&(peer, conn)) {
                    self.out.push_back(SyncOutput::Text(host, text));
                }
            }
            WorkerOutput::Close { conn } => {
                if let Some(host) = self.hosts.remove(&(peer, conn)) {
                    self.sockets.remove(&host);
                    self.out.push_back(SyncOutput::Close(host));
                }
                for d in self.dials.values_mut() {
                    if d.peer == peer && d.conn == conn {
                        d.abandoned = true;
                    }
                }
            }
            WorkerOutput::Store { request, op } => {
                let reply = self.relay.execute_for_sync(now, &op);
                return Some(WorkerInput::Stored { request, reply });
            }
            WorkerOutput::Broadcast(event) => self.relay.broadcast(now, &event),
            WorkerOutput::Status(row) => {
                if let Some(r) = self.relay.status_mut().get_mut(&row.peer) {
                    admin_row(&row, r);
                }
                let before = self.rows.get(peer).and_then(Option::as_ref);
                if before.is_none_or(|b| b.state != row.state || b.last_error != row.last_error) {
                    log_row(&row);
                }
                let reconciled = before
                    .map_or(0, |b| b.last_reconciliation.map_or(0, Timestamp::as_millis))
                    != row.last_reconciliation.map_or(0, Timestamp::as_millis);
                if reconciled && let Some(w) = self.workers.get(peer) {
                    log_reconciliation(&row, &w.stats());
                }
                if let Some(slot) = self.rows.get_mut(peer) {
                    *slot = Some(row);
                }
            }
        }
        None
    }

    /// Every worker's first outputs, and any a timeout queued.
    fn drain_all(&mut self, now: Timestamp) {
        for peer in 0..self.workers.len() {
            self.feed(now, peer, None);
        }
    }
}

/// The worker's row as `GET /admin/peering` shows it (the served counts are the inbound side's).
pub fn admin_row(row: &worker::PeerStatus, to: &mut AdminRow) {
    to.status = match row.state {
        State::FetchingInfo | State::Connecting | State::Authenticating => SyncStatus::Connecting,
        State::Reconciling => SyncStatus::Reconciling,
        State::Live => SyncStatus::Live,
        State::Backoff => SyncStatus::Backoff,
        State::Unusable => SyncStatus::Unusable,
    };
    to.last_reconciliation = row.last_reconciliation;
    to.lag_secs = row.lag_secs;
    to.missing = Some(row.missing);
    to.detail = match (&row.unusable, &row.last_error) {
        (_, Some(e)) => Some(e.clone()),
        (Some(why), None) => Some(format!("{why:?}")),
        (None, None) => None,
    };
}

/// One line for a peer's state change (never a secret: the row holds none).
fn log_row(row: &worker::PeerStatus) {
    let peer = weft_proto::codec::hex::encode(&row.peer[..4]);
    match (&row.unusable, &row.last_error) {
        (Some(why), _) => eprintln!(
            "weft nostr serve: peer {peer}…: {:?}, unusable: {why:?}",
            row.state
        ),
        (None, Some(e)) => eprintln!("weft nostr serve: peer {peer}…: {:?} ({e})", row.state),
        (None, None) => eprintln!("weft nostr serve: peer {peer}…: {:?}", row.state),
    }
}

/// One line per completed reconciliation: what it found and how the work was split (the peer's
/// "too large" answers, byte-budget batch splits), counted since the worker started.
fn log_reconciliation(row: &worker::PeerStatus, stats: &worker::Stats) {
    let peer = weft_proto::codec::hex::encode(&row.peer[..4]);
    eprintln!(
        "weft nostr serve: peer {peer}…: reconciled, {} missing; totals: {} reconciliations, \
         {} NIP-77 sessions, {} kind splits, {} time splits, {} unsplittable, {} batch splits, \
         {} fetched",
        row.missing,
        stats.reconciliations,
        stats.neg_sessions,
        stats.kind_splits,
        stats.time_splits,
        stats.unsplittable,
        stats.batch_splits,
        stats.fetched,
    );
}

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> Machine for SyncRelay<S, R> {
    type Input = SyncInput;
    type Output = SyncOutput;

    fn handle(&mut self, now: Timestamp, input: SyncInput) {
        match input {
            SyncInput::Relay(i) => self.relay.handle(now, i),
            SyncInput::Info { peer, result } => {
                let input = match result {
                    Ok(body) => WorkerInput::Info(body),
                    Err(e) => WorkerInput::InfoFailed(e),
                };
                self.feed(now, peer, Some(input));
            }
            SyncInput::Resolved { dial, result } => {
                let Some(d) = self.dials.get(&dial).copied() else {
                    return;
                };
                match result {
                    Ok(target) if !d.abandoned => self.out.push_back(SyncOutput::Dial(target)),
                    Ok(_) => {
                        self.dials.remove(&dial);
                    }
                    Err(e) => {
                        self.dials.remove(&dial);
                        if !d.abandoned {
                            eprintln!("weft nostr serve: peer dial refused or failed: {e}");
                            self.feed(now, d.peer, Some(WorkerInput::Disconnected(d.conn)));
                        }
                    }
                }
            }
            SyncInput::Worker { peer, input } => self.feed(now, peer, Some(input)),
        }
        self.drain_all(now);
    }

    fn poll(&mut self) -> Option<SyncOutput> {
        self.out
            .pop_front()
            .or_else(|| self.relay.poll().map(SyncOutput::Relay))
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let workers = self
            .workers
            .iter()
            .filter_map(Machine::poll_timeout)
            .min_by_key(|w| w.at);
        // Outputs a worker queued without an input (its first fetch) want a turn at once.
        let queued = (!self.out.is_empty())
            .then(|| Wakeup::new(Timestamp::from_millis(0), "runner outputs"));
        Wakeup::earliest(Wakeup::earliest(self.relay.poll_timeout(), workers), queued)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.relay.handle_timeout(now);
        for peer in 0..self.workers.len() {
            if self.workers[peer]
                .poll_timeout()
                .is_some_and(|w| w.at <= now)
            {
                self.workers[peer].handle_timeout(now);
            }
        }
        self.drain_all(now);
    }
}

/// The relay's output as the layer's effect, for a machine whose dials are peers'.
fn relay_effect(e: WsEffect<NoDial, Infallible>) -> WsEffect<PeerDial, Job> {
    match e {
        WsEffect::Text { conn, text } => WsEffect::Text { conn, text },
        WsEffect::Binary { conn, bytes } => WsEffect::Binary { conn, bytes },
        WsEffect::Ping { conn } => WsEffect::Ping { conn },
        WsEffect::Close { conn, code, reason } => WsEffect::Close { conn, code, reason },
        WsEffect::Dial(never) => match never {},
        WsEffect::Deliver(never) => match never {},
        _ => WsEffect::Unhandled,
    }
}

impl<S: EventStore + Sweep + GroupCommit, R: CryptoRng> WsMachine for SyncRelay<S, R> {
    type Target = PeerDial;
    type App = Job;

    fn upgrade(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: &Peer,
        request: &Request,
    ) -> Result<SyncInput, Refusal> {
        self.relay
            .upgrade(now, conn, peer, request)
            .map(SyncInput::Relay)
    }

    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<SyncInput> {
        if let Some(&(peer, wconn)) = self.sockets.get(&conn) {
            let text = match frame {
                Frame::Text(t) => t,
                // A relay speaks JSON text; a binary frame is read as text, so the worker
                // counts it malformed rather than it vanishing here.
                Frame::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                _ => return None,
            };
            return Some(SyncInput::Worker {
                peer,
                input: WorkerInput::Frame { conn: wconn, text },
            });
        }
        self.relay.message(conn, frame).map(SyncInput::Relay)
    }

    fn closed(&mut self, conn: ConnId) -> Option<SyncInput> {
        if let Some((peer, wconn)) = self.sockets.remove(&conn) {
            self.hosts.remove(&(peer, wconn));
            return Some(SyncInput::Worker {
                peer,
                input: WorkerInput::Disconnected(wconn),
            });
        }
        self.relay.closed(conn).map(SyncInput::Relay)
    }

    fn dialled(&mut self, conn: ConnId, target: PeerDial) -> Option<SyncInput> {
        let d = self.dials.remove(&target.conn())?;
        if d.abandoned {
            self.out.push_back(SyncOutput::Close(conn));
            return None;
        }
        self.sockets.insert(conn, (d.peer, d.conn));
        self.hosts.insert((d.peer, d.conn), conn);
        Some(SyncInput::Worker {
            peer: d.peer,
            input: WorkerInput::Connected(d.conn),
        })
    }

    fn dial_failed(&mut self, target: PeerDial) -> Option<SyncInput> {
        let d = self.dials.remove(&target.conn())?;
        (!d.abandoned).then_some(SyncInput::Worker {
            peer: d.peer,
            input: WorkerInput::Disconnected(d.conn),
        })
    }

    fn effect(&mut self, output: SyncOutput) -> Option<WsEffect<PeerDial, Job>> {
        match output {
            SyncOutput::Relay(o) => self.relay.effect(o).map(relay_effect),
            SyncOutput::Job(job) => Some(WsEffect::Deliver(job)),
            SyncOutput::Dial(target) => Some(WsEffect::Dial(target)),
            SyncOutput::Text(conn, text) => Some(WsEffect::Text { conn, text }),
            SyncOutput::Close(conn) => Some(WsEffect::Close {
                conn,
                code: 1000,
                reason: String::new(),
            }),
        }
    }

    fn message_limit(&self, request: &Request) -> Option<usize> {
        self.relay.message_limit(request)
    }

    fn http(&self, request: &Request) -> Option<HttpAnswer> {
        self.relay.http(request)
    }
}

/// A dial error as the worker's `InfoFailed` reads it: a refusal by the address policy keeps its
/// address and class (`localhost` is the loopback it names), anything else is words.
pub fn info_error(e: &DialError) -> InfoError {
    match e {
        DialError::RefusedUrl(UrlError::Refused(r)) | DialError::Refused { refused: r, .. } => {
            InfoError::Refused(*r)
        }
        DialError::RefusedUrl(UrlError::Localhost) => InfoError::Refused(Refused {
            addr: std::net::Ipv4Addr::LOCALHOST.into(),
            class: AddressClass::Loopback,
        }),
        other => InfoError::Failed(other.to_string()),
    }
}

/// The most jobs running at once; past it a job is dropped, and the worker's own timeout
/// (`worker::INFO_TIMEOUT`, `worker::CONNECT_TIMEOUT`) retries it. A worker has at most one job
/// out at a time, so this bounds only a runaway.
pub const MAX_JOBS: usize = 256;

/// The hooks of a [`SyncRelay`] host: dials go to the checked address in their [`PeerDial`];
/// each [`Job`] runs on a thread of its own with `dialer`, and its answer comes back through
/// `commander` (the host's command channel, [`crate::host::commands`]).
pub fn sync_hooks(
    dialer: Dialer,
    commander: Commander<WsInput<PeerDial, SyncInput>>,
) -> PeerHooks<impl FnMut(Job)> {
    let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    PeerHooks(move |job: Job| {
        use std::sync::atomic::Ordering;
        if running.fetch_add(1, Ordering::SeqCst) >= MAX_JOBS {
            running.fetch_sub(1, Ordering::SeqCst);
            eprintln!("weft nostr serve: too many peering jobs at once; one dropped");
            return;
        }
        let Ok(commander) = commander.try_clone() else {
            running.fetch_sub(1, Ordering::SeqCst);
            return;
        };
        let (dialer, running) = (dialer.clone(), running.clone());
        let spawned = std::thread::Builder::new()
            .name("weft-peering".into())
            .spawn(move || {
                let input = run_job(&dialer, job);
                let _ = ::smol::block_on(commander.send_async(WsInput::App(input)));
                running.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            eprintln!("weft nostr serve: cannot start a peering thread");
        }
    })
}

/// Runs one job to its answer (blocking).
pub fn run_job(dialer: &Dialer, job: Job) -> SyncInput {
    match job {
        Job::FetchInfo { peer, url } => SyncInput::Info {
            peer,
            result: dialer
                .fetch_info(&url)
                .map(|info| info.body)
                .map_err(|e| info_error(&e)),
        },
        Job::Resolve { dial, url } => SyncInput::Resolved {
            dial,
            result: dialer.ws_target(dial, &url),
        },
    }
}

/// What `weft nostr serve` needs to run its peers' workers, made before it listens so a
/// configuration that cannot work is refused at start.
pub struct Prepared {
    workers: Vec<Worker<chacha20::ChaCha20Rng>>,
    dialer: Dialer,
    ws: crate::ws::WsConfig,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

/// The workers for `options`' enabled peers (`None` when there are none), signing with the
/// relay's key and naming this relay `own_url`.
pub fn prepare(
    options: &crate::nostr::serve::ServeOptions,
    own_url: &str,
) -> io::Result<Option<Prepared>> {
    if options.peering.trust.enabled().next().is_none() {
        return Ok(None);
    }
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let (key, _) = options.identity.as_ref().ok_or_else(|| {
        bad("peering.peers needs this relay's key: set SECRET or RELAY_PRIVATE_KEY".into())
    })?;
    // The URL the key was derived over, as `weft nostr serve` resolved it.
    let scheme = if options.tls.is_some() { "wss" } else { "ws" };
    let key_url = options
        .relay_url
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{}", options.listen));
    let provider = crate::server_provider();
    let secret =
        super::worker_secret(provider, |n| std::env::var(n).ok(), &key_url, key).map_err(bad)?;
    let mut ws = crate::ws::WsConfig::new(options.limits.max_message_bytes);
    if let Some(ca) = &options.sync.ca_file {
        ws = ws.with_ca_file(ca)?;
    }
    let dialer = Dialer::new(options.sync.allow_private_networks, ws.tls.clone());
    let workers = super::workers(
        &options.peering.trust,
        &options.sync,
        own_url,
        &secret,
        provider,
        crate::now(),
        crate::os_rng,
    );
    Ok(Some(Prepared {
        workers,
        dialer,
        ws,
    }))
}

impl Prepared {
    /// Runs `relay` with the workers beside it on the smol adapter over `listener`, until
    /// `stop` yields. `relay_commands` (events other processes stored, [`super::super::pg`])
    /// are passed on to the relay as they come.
    pub fn serve<S: EventStore + Sweep + GroupCommit>(
        self,
        relay: NostrRelay<S, chacha20::ChaCha20Rng>,
        listener: crate::host::Listener,
        relay_commands: Option<&RelayCommands>,
        stop: ::smol::channel::Receiver<()>,
    ) -> io::Result<()> {
        let (commander, commands) = crate::host::commands()?;
        let forward = commander.try_clone()?;
        let machine = Ws::new(SyncRelay::new(relay, self.workers, crate::now()), self.ws);
        let mut host = Host::new(machine, sync_hooks(self.dialer, commander));
        let forwarding = async move {
            let Some(from) = relay_commands else {
                return ::smol::future::pending().await;
            };
            while let Some(input) = from.recv().await {
                if let WsInput::App(i) = input
                    && forward
                        .send_async(WsInput::App(SyncInput::Relay(i)))
                        .await
                        .is_err()
                {
                    break;
                }
            }
            ::smol::future::pending().await
        };
        ::smol::block_on(::smol::future::or(
            run(&mut host, vec![listener], &commands, stop),
            forwarding,
        ))
    }
}

/// The host of a relay with sync workers.
pub type SyncHost<S, R, D> = Host<Ws<SyncRelay<S, R>>, PeerHooks<D>>;

/// Runs `host` over `listeners` on the smol adapter, with its command channel, until `stop`
/// yields.
pub async fn run<S, R, D>(
    host: &mut SyncHost<S, R, D>,
    listeners: Vec<crate::host::Listener>,
    commands: &crate::host::Commands<WsInput<PeerDial, SyncInput>>,
    stop: ::smol::channel::Receiver<()>,
) -> io::Result<()>
where
    S: EventStore + Sweep + GroupCommit,
    R: CryptoRng,
    D: FnMut(Job),
{
    ::smol::future::or(
        crate::smol::run_commanded(host, listeners, commands),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nostr::serve::{RelayInfo, ServeOptions, session_config};
    use serde_json::json;
    use std::path::PathBuf;
    use weft_proto::codec::hex;
    use weft_proto::core::rand_core::SeedableRng;
    use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
    use weft_proto::nostr::event::{Event, UnsignedEvent};
    use weft_proto::nostr::relay::{Input as SessionInput, MemoryStore};

    type Rng = chacha20::ChaCha20Rng;
    type Relay = NostrRelay<MemoryStore, Rng>;

    const NOW_SECS: u64 = 1_790_000_000;
    /// A public address literal: the worker's URL passes the address policy with private
    /// networks refused, and no resolver is asked. Nothing here connects to it.
    const PEER_URL: &str = "ws://8.8.8.8/";
    const OWN_URL: &str = "ws://9.9.9.9/";

    fn provider() -> &'static dyn CryptoProvider {
        crate::server_provider()
    }

    fn key(seed: u64) -> Secp256k1Secret {
        generate_secp256k1(provider(), &mut Rng::seed_from_u64(seed))
    }

    fn event(k: &Secp256k1Secret, kind: u16, created_at: u64, content: &str) -> Event {
        UnsignedEvent {
            created_at,
            kind,
            tags: vec![],
            content: content.into(),
        }
        .sign(
            provider(),
            k,
            &mut Rng::seed_from_u64(created_at ^ u64::from(kind)),
        )
        .unwrap()
    }

    fn relay(url: &str, seed: u64) -> Relay {
        let mut options = ServeOptions::new("127.0.0.1:7777".parse().unwrap(), PathBuf::from("x"));
        options.relay_url = Some(url.into());
        let config = session_config(&options, options.listen);
        NostrRelay::new(
            config,
            &RelayInfo::default(),
            MemoryStore::default(),
            Rng::seed_from_u64(seed),
        )
    }

    fn peer_doc(peer: &Secp256k1Secret, nips: &[u16]) -> String {
        json!({
            "self": hex::encode(&provider().schnorr_public_key(peer).unwrap()),
            "supported_nips": nips,
            "peering": {"scopes": [{"kinds": [1]}]},
        })
        .to_string()
    }

    fn worker(peer: &Secp256k1Secret, now: Timestamp) -> Worker<Rng> {
        Worker::new(
            worker::Config {
                peer_pubkey: provider().schnorr_public_key(peer).unwrap(),
                relay_url: PEER_URL.into(),
                own_url: OWN_URL.into(),
                secret: key(7),
                provider: provider(),
                allow_private_networks: false,
                limits: worker::SyncLimits::DEFAULT,
            },
            now,
            Rng::seed_from_u64(8),
        )
    }

    /// A local relay with a sync worker, and the peer relay it syncs from, wired together in
    /// memory the way the WebSocket layer and the hooks wire them over sockets.
    struct World {
        runner: SyncRelay<MemoryStore, Rng>,
        peer: Relay,
        now: Timestamp,
        doc: String,
        /// Host socket of the runner's dial ↔ the peer relay's connection.
        link: Option<(ConnId, ConnId)>,
        next_peer_conn: u64,
        /// Frames the local relay sent its own clients.
        local_frames: Vec<(ConnId, String)>,
        jobs: Vec<Job>,
        peer_frames_to_publisher: Vec<String>,
    }

    impl World {
        fn new(doc: String, peer: Relay) -> Self {
            let now = Timestamp::from_secs(NOW_SECS);
            let runner = SyncRelay::new(relay(OWN_URL, 3), vec![worker(&key(1), now)], now);
            Self {
                runner,
                peer,
                now,
                doc,
                link: None,
                next_peer_conn: 1,
                local_frames: Vec::new(),
                jobs: Vec::new(),
                peer_frames_to_publisher: Vec::new(),
            }
        }

        fn peer_open(&mut self) -> ConnId {
            let conn = ConnId(self.next_peer_conn);
            self.next_peer_conn += 1;
            let peer = Peer {
                listener: 0,
                remote: crate::host::Remote::Tcp("127.0.0.1:5000".parse().unwrap()),
            };
            let request = Request {
                method: "GET".into(),
                path: "/".into(),
                headers: vec![],
            };
            let input = self.peer.upgrade(self.now, conn, &peer, &request).unwrap();
            self.peer.handle(self.now, input);
            conn
        }

        fn local_open(&mut self, conn: ConnId) {
            let peer = Peer {
                listener: 0,
                remote: crate::host::Remote::Tcp("127.0.0.1:5001".parse().unwrap()),
            };
            let request = Request {
                method: "GET".into(),
                path: "/".into(),
                headers: vec![],
            };
            let input = self
                .runner
                .upgrade(self.now, conn, &peer, &request)
                .unwrap();
            self.runner.handle(self.now, input);
        }

        /// Runs everything until nothing moves.
        fn settle(&mut self) {
            for _ in 0..10_000 {
                let mut inputs = Vec::new();
                while let Some(o) = self.runner.poll() {
                    match o {
                        SyncOutput::Job(job) => {
                            self.jobs.push(job.clone());
                            inputs.push(match job {
                                Job::FetchInfo { peer, .. } => SyncInput::Info {
                                    peer,
                                    result: Ok(self.doc.clone()),
                                },
                                Job::Resolve { dial, url } => {
                                    let dialer =
                                        Dialer::new(false, crate::ws::WsConfig::new(1 << 20).tls);
                                    run_job(&dialer, Job::Resolve { dial, url })
                                }
                            });
                        }
                        SyncOutput::Dial(target) => {
                            assert_eq!(target.addr(), "8.8.8.8:80".parse().unwrap());
                            let pc = self.peer_open();
                            let host = ConnId(1_000 + pc.0);
                            self.link = Some((host, pc));
                            inputs.extend(self.runner.dialled(host, target));
                        }
                        SyncOutput::Text(host, text) => {
                            let (h, pc) = self.link.expect("a frame on an open dial");
                            assert_eq!(h, host);
                            self.peer.handle(
                                self.now,
                                ServeInput::Session(pc, SessionInput::Frame(text)),
                            );
                        }
                        SyncOutput::Close(host) => {
                            if let Some((h, pc)) = self.link
                                && h == host
                            {
                                self.link = None;
                                self.peer.handle(self.now, ServeInput::Closed(pc));
                            }
                        }
                        SyncOutput::Relay(ServeOutput::Text(c, t)) => {
                            self.local_frames.push((c, t))
                        }
                        SyncOutput::Relay(ServeOutput::Close(..)) => {}
                    }
                }
                while let Some(o) = self.peer.poll() {
                    match (o, self.link) {
                        (ServeOutput::Text(pc, t), Some((host, linked))) if pc == linked => {
                            inputs.extend(self.runner.message(host, Frame::Text(t)));
                        }
                        (ServeOutput::Text(_, t), _) => self.peer_frames_to_publisher.push(t),
                        (ServeOutput::Close(pc, ..), Some((host, linked))) if pc == linked => {
                            self.link = None;
                            inputs.extend(self.runner.closed(host));
                        }
                        _ => {}
                    }
                }
                // What is due now runs as a host's loop runs it at the end of a pass: each
                // relay's open group of writes commits, and its answers go out.
                let mut due = false;
                if self.peer.poll_timeout().is_some_and(|w| w.at <= self.now) {
                    self.peer.handle_timeout(self.now);
                    due = true;
                }
                if self.runner.poll_timeout().is_some_and(|w| w.at <= self.now) {
                    self.runner.handle_timeout(self.now);
                    due = true;
                }
                if inputs.is_empty() && !due {
                    return;
                }
                for i in inputs {
                    self.runner.handle(self.now, i);
                }
            }
            panic!("the world never settled");
        }

        fn advance(&mut self, secs: u64) {
            self.now = self
                .now
                .saturating_add(std::time::Duration::from_secs(secs));
            self.peer.handle_timeout(self.now);
            if self.runner.poll_timeout().is_some_and(|w| w.at <= self.now) {
                self.runner.handle_timeout(self.now);
            }
            self.settle();
        }

        fn holds(&self, e: &Event) -> bool {
            self.runner.relay().store().contains(&e.id)
        }

        fn held(&self) -> usize {
            self.runner.relay().store().len()
        }
    }

    #[test]
    fn a_worker_syncs_history_into_the_relays_store_and_broadcasts_live_events_to_its_clients() {
        let author = key(20);
        let mut peer = relay(PEER_URL, 4);
        let now_s = NOW_SECS;
        let history: Vec<Event> = (0..30)
            .map(|i| event(&author, 1, now_s - 1000 + i, "old"))
            .collect();
        let out_of_scope = event(&author, 7, now_s - 500, "a reaction");
        for e in history.iter().chain([&out_of_scope]) {
            peer.store_mut()
                .write(e, Timestamp::from_secs(now_s))
                .unwrap();
        }
        let mut w = World::new(peer_doc(&key(1), &[1, 11, 42, 77]), peer);
        // A local client subscribed before the peer's live event arrives.
        w.local_open(ConnId(1));
        let req = w
            .runner
            .message(
                ConnId(1),
                Frame::Text(r#"["REQ","mine",{"kinds":[1]}]"#.into()),
            )
            .unwrap();
        w.runner.handle(w.now, req);
        w.settle();
        assert!(matches!(&w.jobs[0], Job::FetchInfo { peer: 0, url } if url == "http://8.8.8.8/"));
        assert!(matches!(&w.jobs[1], Job::Resolve { url, .. } if url == PEER_URL));
        assert!(history.iter().all(|e| w.holds(e)));
        assert!(!w.holds(&out_of_scope));
        assert_eq!(w.held(), history.len(), "exactly the in-scope history");
        assert_eq!(w.runner.rows().next().unwrap().state, worker::State::Live);
        w.local_frames.clear();

        // Live: published on the peer, it is stored here and reaches the local subscriber.
        let live = event(&author, 1, now_s, "new");
        let publisher = w.peer_open();
        w.peer.handle(
            w.now,
            ServeInput::Session(
                publisher,
                SessionInput::Frame(format!("[\"EVENT\",{}]", live.to_json())),
            ),
        );
        w.settle();
        assert!(w.holds(&live));
        assert!(
            w.local_frames.iter().any(|(c, t)| *c == ConnId(1)
                && t.starts_with("[\"EVENT\",\"mine\"")
                && t.contains("\"new\"")),
            "{:?}",
            w.local_frames
        );
        // Backfill was not broadcast: only the live event reached the subscriber.
        let events = w
            .local_frames
            .iter()
            .filter(|(_, t)| t.starts_with("[\"EVENT\""))
            .count();
        assert_eq!(events, 1);
    }

    #[test]
    fn a_peer_without_nip77_is_reported_unusable_and_not_dialled() {
        let mut w = World::new(peer_doc(&key(1), &[1, 11, 42]), relay(PEER_URL, 4));
        w.settle();
        for _ in 0..20 {
            w.advance(60);
        }
        let row = w.runner.rows().next().unwrap().clone();
        assert_eq!(row.state, worker::State::Unusable);
        assert_eq!(row.unusable, Some(worker::Unusable::NoNip77));
        assert!(w.jobs.iter().all(|j| matches!(j, Job::FetchInfo { .. })));
        assert_eq!(
            w.jobs.len(),
            1,
            "not asked again within twenty minutes: {:?}",
            w.jobs
        );
    }

    #[test]
    fn a_dropped_socket_is_reported_to_its_worker_which_reconnects_and_reconciles_again() {
        let author = key(20);
        let mut peer = relay(PEER_URL, 4);
        let first = event(&author, 1, NOW_SECS - 100, "one");
        peer.store_mut()
            .write(&first, Timestamp::from_secs(NOW_SECS))
            .unwrap();
        let mut w = World::new(peer_doc(&key(1), &[1, 11, 42, 77]), peer);
        w.settle();
        assert_eq!(w.held(), 1);
        // The socket drops, as a network failure drops it; meanwhile history grows.
        let (host, pc) = w.link.take().unwrap();
        w.peer.handle(w.now, ServeInput::Closed(pc));
        let input = w.runner.closed(host).unwrap();
        w.runner.handle(w.now, input);
        let second = event(&author, 1, NOW_SECS - 50, "two");
        w.peer.store_mut().write(&second, w.now).unwrap();
        for _ in 0..10 {
            w.advance(30);
        }
        assert!(w.holds(&second), "reconnected and reconciled again");
        let resolves = w
            .jobs
            .iter()
            .filter(|j| matches!(j, Job::Resolve { .. }))
            .count();
        assert_eq!(resolves, 2);
    }

    #[test]
    fn a_refused_dial_is_a_disconnect_to_the_worker_and_a_late_dial_it_abandoned_is_closed() {
        let now = Timestamp::from_secs(NOW_SECS);
        let mut runner = SyncRelay::new(relay(OWN_URL, 3), vec![worker(&key(1), now)], now);
        let Some(SyncOutput::Job(Job::FetchInfo { peer, .. })) = runner.poll() else {
            panic!("the first fetch");
        };
        runner.handle(
            now,
            SyncInput::Info {
                peer,
                result: Ok(peer_doc(&key(1), &[77])),
            },
        );
        let Some(SyncOutput::Job(Job::Resolve { dial, url })) = runner.poll() else {
            panic!("a resolve");
        };
        // The hooks' thread found the name refused (as a rebinding answer would be).
        let refused = Dialer::new(false, crate::ws::WsConfig::new(1 << 20).tls)
            .ws_target(dial, "ws://10.0.0.1/")
            .unwrap_err();
        assert!(refused.is_refused());
        runner.handle(
            now,
            SyncInput::Resolved {
                dial,
                result: Err(refused),
            },
        );
        assert_eq!(runner.rows().next().unwrap().state, worker::State::Backoff);
        assert_eq!(url, PEER_URL);
        // The worker retries on its backoff; this time the dial is checked and goes out, but
        // the socket takes longer to open than the worker waits.
        let mut t = now;
        let dial = loop {
            t = t.saturating_add(std::time::Duration::from_secs(1));
            assert!(
                t < now.saturating_add(std::time::Duration::from_secs(3_600)),
                "no retry"
            );
            if runner.poll_timeout().is_some_and(|w| w.at <= t) {
                runner.handle_timeout(t);
            }
            match runner.poll() {
                Some(SyncOutput::Job(Job::FetchInfo { peer, .. })) => runner.handle(
                    t,
                    SyncInput::Info {
                        peer,
                        result: Ok(peer_doc(&key(1), &[77])),
                    },
                ),
                Some(SyncOutput::Job(Job::Resolve { dial, .. })) => break dial,
                _ => {}
            }
        };
        let target = Dialer::new(false, crate::ws::WsConfig::new(1 << 20).tls)
            .ws_target(dial, PEER_URL)
            .unwrap();
        runner.handle(
            t,
            SyncInput::Resolved {
                dial,
                result: Ok(target.clone()),
            },
        );
        assert_eq!(runner.poll(), Some(SyncOutput::Dial(target.clone())));
        let late = t.saturating_add(worker::CONNECT_TIMEOUT);
        runner.handle_timeout(late);
        assert_eq!(runner.rows().next().unwrap().state, worker::State::Backoff);
        // A dial that opens after its worker gave up is closed at once and never reported.
        assert!(runner.dialled(ConnId(77), target.clone()).is_none());
        assert!(std::iter::from_fn(|| runner.poll()).any(|o| o == SyncOutput::Close(ConnId(77))));
        assert!(!matches!(
            runner.message(ConnId(77), Frame::Text("[]".into())),
            Some(SyncInput::Worker { .. })
        ));
        assert!(runner.dial_failed(target).is_none());
    }

    #[test]
    fn info_errors_keep_the_refused_address_and_class() {
        let d = Dialer::new(false, crate::ws::WsConfig::new(1 << 20).tls);
        let e = d.fetch_info("ws://127.0.0.1:1/").unwrap_err();
        assert!(matches!(
            info_error(&e),
            InfoError::Refused(Refused {
                class: AddressClass::Loopback,
                ..
            })
        ));
        let e = d.fetch_info("ws://localhost:1/").unwrap_err();
        assert!(matches!(
            info_error(&e),
            InfoError::Refused(Refused {
                class: AddressClass::Loopback,
                ..
            })
        ));
        assert!(matches!(
            info_error(&DialError::Timeout),
            InfoError::Failed(_)
        ));
    }
}
