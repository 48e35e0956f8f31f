//! The `airc-realms` scenario: M AIRC realm servers and K clients on a deterministic simulated
//! network ([`crate::link`]: latency drawn per frame, loss as retransmission delay, bandwidth,
//! partitions that heal) with link drops, server crashes and restarts, and clients that stall
//! before acking. Every link is a stream (TCP or TLS), so frames are never duplicated or
//! reordered on one. Every run checks the AIRC delivery invariants as it goes, then heals the network and
//! checks that nothing acknowledged was lost.
//!
//! # The invariants, as checked
//!
//! 1. **one-ack-per-msg** (§6.1, §17.2): every `msg` frame a server reads gets exactly one `ack`,
//!    written on the connection the frame came on, unless that connection closes first. An ack
//!    for a message the connection has no unanswered copy of is a violation at once; a message
//!    still unanswered on an open connection after the heal phase is a violation at the end.
//! 2. **queued-holds-copy** (§6.4–§6.6): at the moment a server writes an ack `queued`, its store
//!    (every Persist and Forget before that output applied, in order) holds the message, or the
//!    ack relays a `queued` the server read from its next hop (whose own store was checked when
//!    it wrote it).
//! 3. **no-duplicate-delivery** (§6.6, §7.3): a client is handed a message id it already has
//!    only if the server never read its `delivered` ack for any earlier copy (the connection
//!    dropped or the server crashed before the ack arrived, or the client had not acked yet). What the
//!    spec guarantees is suppression of ids a server has acked `delivered` or `queued` (§7.3)
//!    and no resend of a message in flight or settled by a late ack (§6.6); it does not promise
//!    exactly-once when an ack is lost, since §6.5 then requeues the message and says `queued`.
//!    Seen ids are persisted before the ack that depends on them, so a crash never legitimately
//!    loses one inside this scenario (its runs are far shorter than the 172 800 s window).
//! 4. **no-loss-after-heal** (§6.4, §7): after the faults stop, every server is up and the
//!    network is quiet for a while, every message its origin saw acked `queued` or `delivered`
//!    has reached its destination client at least once (all ttls outlast the run).
//! 5. **every-msg-answered**: after the heal phase every message a client sent has its final
//!    ack (clients retry unanswered messages on each new connection, §7.3 "origins MAY retry").
//!
//! Also checked: a client sends each `msg` to a client's inbox and a delivery reaches the
//! client bound for its `to` (**right-recipient**), no
//! frame reaches an end the other side of a partition (**nothing-crosses-a-partition**; servers
//! and clients are each a place a partition may cut off), every machine's deadline advances
//! after its timeout runs (**deadline-advances**), and a run stops as a livelock past
//! [`Scenario::max_events`] (**event-limit**).

mod client;
#[cfg(test)]
mod invariant_tests;

/// Writes a trace line, building it only when the run is traced: most runs are not, and the
/// line for every output would otherwise be built and thrown away.
macro_rules! trace {
    ($net:expr, $line:expr) => {
        if $net.trace.is_on() {
            let line = $line;
            $net.trace(line);
        }
    };
}

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::Rng;
use serde_json::{Value, json};
use weft_proto::airc::address::{Authority, DEFAULT_PORT, Namespace};
use weft_proto::airc::discovery::Endpoint;
use weft_proto::airc::frame::{self, AckStatus, Frame};
use weft_proto::airc::framing;
use weft_proto::airc::server::{
    Face, Input, Output, Record, RecordKey, Server, ServerConfig, Source,
};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::Ed25519Seed;

pub use client::{ClientInput, ClientOutput, SimClient};

use crate::link::{Bandwidth, Direction, Kind, LinkFaults, LinkStats, Links, Partition};
use crate::scenario::{Check, Queue, Timed, Trace, Wakeups, World, fmt_times};
use crate::stream;

pub use crate::scenario::START;

/// How a scenario run is shaped. [`Scenario::small`] is the size the test suite runs at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Seeds everything: keys, server nonces, latencies, faults, traffic.
    pub seed: u64,
    /// Realm servers (M).
    pub realms: usize,
    /// Clients (K), spread round-robin over the realms.
    pub clients: usize,
    /// Messages sent in all, at random times in the first 80 % of the faulty phase.
    pub messages: usize,
    /// How long the faulty phase lasts, in virtual time.
    pub duration: Duration,
    /// How long the quiet phase at the end lasts: long enough for reconnects, flushes (30 s),
    /// ack timeouts (15 s) and stalled acks to play out.
    pub heal: Duration,
    /// What goes wrong during the faulty phase.
    pub faults: Faults,
    /// Events a run may take at most, so a livelock is an error and not a hang.
    pub max_events: u64,
}

/// The faults of a scenario's faulty phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Mean time between link drops across the whole network (`None`: never).
    pub link_drop_every: Option<Duration>,
    /// Mean time between server crashes (`None`: never).
    pub crash_every: Option<Duration>,
    /// How long a crashed server stays down, at least and at most.
    pub downtime: (Duration, Duration),
    /// Chance per thousand that a client stalls before acking a message.
    pub stall_permille: u32,
    /// How long a stalled ack waits, at least and at most; past the 15 s ack timeout.
    pub stall: (Duration, Duration),
    /// The network: latency per frame, loss, bandwidth and partitions ([`crate::link`]).
    pub link: LinkFaults,
    /// Chance per thousand that a frame is held up much longer (a latency spike).
    pub spike_permille: u32,
    /// The longest a spike holds a frame up.
    pub spike_max: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            link_drop_every: Some(Duration::from_secs(10)),
            crash_every: Some(Duration::from_secs(30)),
            downtime: (Duration::from_secs(1), Duration::from_secs(10)),
            stall_permille: 60,
            stall: (Duration::from_secs(16), Duration::from_secs(30)),
            link: LinkFaults {
                base: Duration::from_millis(2),
                jitter: Duration::from_millis(20),
                loss_permille: 10,
                // A stream never duplicates a frame, and no AIRC party sends one twice by itself.
                duplicate_permille: 0,
                bandwidth: Bandwidth::ByKind,
                partition_every: Some(Duration::from_secs(40)),
                partition_length: (Duration::from_secs(2), Duration::from_secs(25)),
            },
            spike_permille: 10,
            spike_max: Duration::from_secs(20),
        }
    }
}

/// Events a message may cost before a run counts as a livelock: a bound for a spinning run, not
/// for a large honest one (100 000 messages take about 7.5 events each: frames each way, acks,
/// persists, retries).
pub const EVENTS_PER_MESSAGE: u64 = 50;

impl Scenario {
    /// This scenario with [`Scenario::max_events`] raised to what its messages may honestly take
    /// ([`EVENTS_PER_MESSAGE`]), so a large run is not stopped by the default bound.
    pub fn with_event_budget(self) -> Self {
        let budget = (self.messages as u64).saturating_mul(EVENTS_PER_MESSAGE);
        Self {
            max_events: self.max_events.max(budget),
            ..self
        }
    }

    /// The default shape for `seed`: 3 realms, 12 clients, 200 messages over 5 minutes.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            realms: 3,
            clients: 12,
            messages: 200,
            duration: Duration::from_secs(300),
            heal: Duration::from_secs(240),
            faults: Faults::default(),
            max_events: 5_000_000,
        }
    }

    /// A small run for sweeping many seeds: 3 realms, 6 clients, 30 messages over 2 minutes.
    pub fn small(seed: u64) -> Self {
        Self {
            realms: 3,
            clients: 6,
            messages: 30,
            duration: Duration::from_secs(120),
            ..Self::new(seed)
        }
    }
}

/// What a run did. Everything but `wall` is a function of the [`Scenario`] alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The scenario's seed.
    pub seed: u64,
    /// Distinct messages the clients sent.
    pub sent: u64,
    /// Times a client sent a message again on a new connection, for want of an ack.
    pub retries: u64,
    /// Final acks the origins saw, by status: delivered, queued, failed.
    pub acked: [u64; 3],
    /// Failed acks the origins saw, by code.
    pub failed_codes: BTreeMap<String, u64>,
    /// Messages handed to clients, counting redeliveries.
    pub delivered: u64,
    /// Redeliveries after an ack that never reached the server (allowed; see invariant 3).
    pub redelivered: u64,
    /// Acks `delivered duplicate` servers wrote: copies suppressed by seen ids (§7.3).
    pub duplicates_suppressed: u64,
    /// Acks clients held back past the ack timeout.
    pub stalls: u64,
    /// Server crashes.
    pub crashes: u64,
    /// Links dropped (client or peer).
    pub link_drops: u64,
    /// Peer links that came up.
    pub peer_links: u64,
    /// What the link layer did: loss, bandwidth, partitions.
    pub link: LinkStats,
    /// Events the simulator ran.
    pub events: u64,
    /// Virtual time the run covered.
    pub virtual_duration: Duration,
    /// Wall-clock time the run took (the one field that differs between runs of one seed).
    pub wall: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}", self.seed)?;
        writeln!(
            f,
            "messages sent {} (retries {}), acked delivered {} queued {} failed {}",
            self.sent, self.retries, self.acked[0], self.acked[1], self.acked[2]
        )?;
        if !self.failed_codes.is_empty() {
            writeln!(f, "failed by code {:?}", self.failed_codes)?;
        }
        writeln!(
            f,
            "delivered {} (redelivered after a lost ack {}), duplicates suppressed {}, stalled acks {}",
            self.delivered, self.redelivered, self.duplicates_suppressed, self.stalls
        )?;
        writeln!(
            f,
            "crashes {}, link drops {}, peer links {}, events {}",
            self.crashes, self.link_drops, self.peer_links, self.events
        )?;
        write!(f, "{}", self.link)?;
        fmt_times(f, self.virtual_duration, self.wall)
    }
}

impl Timed for Report {
    fn set_times(&mut self, virtual_duration: Duration, wall: Duration) {
        self.virtual_duration = virtual_duration;
        self.wall = wall;
    }
}

impl Report {
    /// The report as one JSON object, `wall` in milliseconds.
    pub fn to_json(&self) -> Value {
        json!({
            "seed": self.seed,
            "sent": self.sent,
            "retries": self.retries,
            "acked": {"delivered": self.acked[0], "queued": self.acked[1], "failed": self.acked[2]},
            "failed_codes": self.failed_codes,
            "delivered": self.delivered,
            "redelivered": self.redelivered,
            "duplicates_suppressed": self.duplicates_suppressed,
            "stalls": self.stalls,
            "crashes": self.crashes,
            "link_drops": self.link_drops,
            "peer_links": self.peer_links,
            "link": self.link.to_json(),
            "events": self.events,
            "virtual_ms": u64::try_from(self.virtual_duration.as_millis()).unwrap_or(u64::MAX),
            "wall_ms": u64::try_from(self.wall.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

/// The first invariant a run broke, with its seed and the run up to it.
pub type Violation = crate::scenario::Violation<Report>;

/// Runs `scenario`, writing a JSON-lines trace to `trace` if given. The same scenario gives the
/// same trace byte for byte and the same report (but for `wall`).
pub fn run<'a>(
    scenario: &'a Scenario,
    trace: Option<&'a mut dyn Write>,
) -> Result<Report, Box<Violation>> {
    crate::scenario::run(scenario.seed, Net::new(scenario, trace))
}

impl World for Net<'_> {
    type Report = Report;

    fn run(&mut self) -> Check {
        Net::run(self)
    }

    fn now(&self) -> Timestamp {
        self.now
    }

    fn report(&mut self) -> &mut Report {
        self.report.link = self.links.stats.clone();
        &mut self.report
    }
}

const TAG_NET: u64 = 1;
const TAG_KEY: u64 = 1_000;
const TAG_CLIENT: u64 = 2_000_000;
const TAG_SERVER: u64 = 3_000_000;
const TAG_LINK: u64 = 2;

/// One end of a wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Server { s: usize, conn: ConnId, life: u32 },
    Client { c: usize },
}

/// A connection between two ends: bytes flow in order in each direction.
#[derive(Debug)]
struct Wire {
    ends: [End; 2],
    /// Whether each end still reads: a closed end drops what reaches it.
    reading: [bool; 2],
    /// Whether each end has been told the wire closed.
    told: [bool; 2],
    /// Each direction, by the end it goes to: bytes arrive in order behind what is on the way.
    dir: [Direction; 2],
}

#[derive(Debug)]
enum Ev {
    Bytes {
        wire: u64,
        to: usize,
        bytes: Vec<u8>,
    },
    Closed {
        wire: u64,
        to: usize,
    },
    Dial {
        s: usize,
        life: u32,
        t: usize,
    },
    ClientConnect {
        c: usize,
    },
    AppSend {
        c: usize,
        dest: usize,
    },
    Crash,
    Restart {
        s: usize,
    },
    Drop,
    Partition,
    PartitionHeal,
    Heal,
}

/// A server's durable store, as a host keeps it: spooled messages in the order they were
/// written (replaced in place by id), seen ids, and reply-window pairs (the newest per pair).
#[derive(Debug, Default)]
struct Store {
    spool: BTreeMap<u64, Record>,
    spool_ids: BTreeMap<String, u64>,
    seen: BTreeMap<String, Record>,
    replies: BTreeMap<(String, String), Record>,
    next: u64,
}

impl Store {
    /// Keeps what a server persists (the record itself: the server is done with it).
    fn persist(&mut self, r: Record) {
        match r {
            Record::Spooled { ref msg, .. } => {
                let seq = self.next;
                self.next += 1;
                if let Some(old) = self.spool_ids.insert(msg.id.clone(), seq) {
                    self.spool.remove(&old);
                }
                self.spool.insert(seq, r);
            }
            Record::Seen { ref id, .. } => {
                self.seen.insert(id.clone(), r);
            }
            Record::ReplyPair {
                ref from, ref to, ..
            } => {
                self.replies.insert((from.clone(), to.clone()), r);
            }
            _ => {}
        }
    }

    /// Drops what a server forgets.
    fn forget(&mut self, k: &RecordKey) {
        match k {
            RecordKey::Spooled { id } => {
                if let Some(seq) = self.spool_ids.remove(id) {
                    self.spool.remove(&seq);
                }
            }
            RecordKey::ReplyPair { from, to } => {
                self.replies.remove(&(from.clone(), to.clone()));
            }
            _ => {}
        }
    }

    fn holds(&self, id: &str) -> bool {
        self.spool_ids.contains_key(id)
    }

    fn records(&self) -> Vec<Record> {
        self.spool
            .values()
            .chain(self.seen.values())
            .chain(self.replies.values())
            .cloned()
            .collect()
    }
}

/// One copy of a message handed to a client.
#[derive(Debug)]
struct Delivery {
    wire: u64,
    /// Whether the server that handed it over read the client's ack for it.
    ack_read: bool,
}

struct Net<'a> {
    sc: &'a Scenario,
    rng: ChaCha20Rng,
    now: Timestamp,
    end: Timestamp,
    queue: Queue<Ev>,
    healing: bool,
    realms: Vec<Authority>,
    configs: Vec<ServerConfig>,
    servers: Vec<Option<Server<ChaCha20Rng>>>,
    lives: Vec<u32>,
    stores: Vec<Store>,
    clients: Vec<SimClient>,
    home: Vec<usize>,
    client_wire: Vec<Option<u64>>,
    wires: BTreeMap<u64, Wire>,
    /// Each server end of a wire in `wires`: (server, conn, life) to (wire, side). A server
    /// writes far more often than wires open, so its writes find their wire here, not by a scan.
    server_ends: BTreeMap<(usize, ConnId, u32), (u64, usize)>,
    /// Every machine's next wakeup, kept in step with the machines (see [`Net::rearm`]), so the
    /// next timer is found without asking every machine on every event.
    /// Machines' wakeups by slot: servers, then clients ([`Net::slot`]).
    timers: Wakeups,
    next_wire: u64,
    next_conn: u64,
    // The oracle.
    /// Per server connection: ids read in a `msg` frame and not yet acked, with how many times.
    unacked: BTreeMap<(usize, ConnId), BTreeMap<String, u32>>,
    /// Per server: ids its next hops acked `queued`, which it may relay as `queued`.
    queued_downstream: BTreeSet<(usize, String)>,
    /// Per (client, id): every copy handed over.
    deliveries: BTreeMap<(usize, String), Vec<Delivery>>,
    /// Every message sent: its destination client.
    dest: BTreeMap<String, usize>,
    /// Ids their origin saw acked `queued` or `delivered`.
    accepted: BTreeSet<String>,
    links: Links,
    /// The partition in force, if any.
    partition: Option<Partition>,
    /// Wires a partition cut, so bytes that were on the way across are counted, not delivered.
    cut_wires: BTreeSet<u64>,
    report: Report,
    trace: Trace<'a>,
}

impl<'a> Net<'a> {
    fn new(sc: &'a Scenario, trace: Option<&'a mut dyn Write>) -> Self {
        let realms: Vec<Authority> = (0..sc.realms)
            .map(|r| Authority::parse(&format!("r{r}.example")).expect("a valid realm name"))
            .collect();
        let provider = crate::crypto::provider();
        let seeds: Vec<Ed25519Seed> = (0..sc.realms)
            .map(|r| {
                let mut b = [0u8; 32];
                stream(sc.seed, TAG_KEY + r as u64).fill_bytes(&mut b);
                Ed25519Seed::from_bytes(b)
            })
            .collect();
        let publics: Vec<[u8; 32]> = seeds
            .iter()
            .map(|s| provider.ed25519_public_key(s))
            .collect();
        let home: Vec<usize> = (0..sc.clients).map(|c| c % sc.realms.max(1)).collect();
        let configs: Vec<ServerConfig> = (0..sc.realms)
            .map(|r| {
                let mut c = ServerConfig::new(realms[r].clone());
                c.signing_key = Some(seeds[r].clone());
                for (o, realm) in realms.iter().enumerate().filter(|(o, _)| *o != r) {
                    c.known_keys.insert(realm.clone(), vec![publics[o]]);
                    // The simulated network has no DNS: every realm is a static entry (§8.1).
                    let at = Endpoint::new(realm.host(), DEFAULT_PORT);
                    c.static_entries.insert(realm.clone(), vec![at]);
                }
                c.known_namespaces = (0..sc.clients)
                    .filter(|c| home[*c] == r)
                    .map(|c| Namespace::parse(&format!("c{c}")).expect("a valid namespace"))
                    .collect();
                c
            })
            .collect();
        let mut rng = stream(sc.seed, TAG_NET);
        let clients = (0..sc.clients)
            .map(|c| {
                let start = START + Duration::from_millis(rng.next_u64() % 1_000);
                let mut client = SimClient::new(
                    &format!("c{c}"),
                    stream(sc.seed, TAG_CLIENT + c as u64),
                    start,
                    sc.faults.stall,
                );
                client.handle(START, ClientInput::Stall(sc.faults.stall_permille));
                client
            })
            .collect();
        let servers = (0..sc.realms)
            .map(|r| {
                let rng = stream(sc.seed, TAG_SERVER + (r as u64) * 1_000);
                Some(Server::new(configs[r].clone(), provider, rng))
            })
            .collect();
        let mut net = Self {
            sc,
            rng,
            now: START,
            end: START + sc.duration + sc.heal,
            queue: Queue::new(),
            healing: false,
            realms,
            configs,
            servers,
            lives: vec![0; sc.realms],
            stores: (0..sc.realms).map(|_| Store::default()).collect(),
            clients,
            home,
            client_wire: vec![None; sc.clients],
            wires: BTreeMap::new(),
            server_ends: BTreeMap::new(),
            timers: Wakeups::new(sc.realms + sc.clients),
            next_wire: 0,
            next_conn: 1,
            unacked: BTreeMap::new(),
            queued_downstream: BTreeSet::new(),
            deliveries: BTreeMap::new(),
            dest: BTreeMap::new(),
            accepted: BTreeSet::new(),
            links: Links::new(sc.faults.link.clone(), stream(sc.seed, TAG_LINK)),
            partition: None,
            cut_wires: BTreeSet::new(),
            report: Report {
                seed: sc.seed,
                ..Report::default()
            },
            trace: Trace::new(trace),
        };
        net.schedule_traffic();
        for s in 0..sc.realms {
            net.rearm(Who::Server(s));
        }
        for c in 0..sc.clients {
            net.rearm(Who::Client(c));
        }
        net
    }

    fn schedule_traffic(&mut self) {
        let window = (self.sc.duration.as_millis() * 4 / 5).max(1);
        let window = u64::try_from(window).unwrap_or(u64::MAX);
        if self.sc.clients >= 2 {
            for _ in 0..self.sc.messages {
                let at = START + Duration::from_millis(1_000 + self.rng.next_u64() % window);
                let c = self.pick(self.sc.clients);
                let mut dest = self.pick(self.sc.clients - 1);
                if dest >= c {
                    dest += 1;
                }
                self.push(at, Ev::AppSend { c, dest });
            }
        }
        if let Some(every) = self.sc.faults.link_drop_every {
            let at = self.now + self.around(every);
            self.push(at, Ev::Drop);
        }
        if let Some(every) = self.sc.faults.crash_every {
            let at = self.now + self.around(every);
            self.push(at, Ev::Crash);
        }
        self.schedule_partition();
        self.push(START + self.sc.duration, Ev::Heal);
    }

    fn schedule_partition(&mut self) {
        if let Some(at) = self
            .links
            .next_partition(self.now, START + self.sc.duration)
        {
            self.push(at, Ev::Partition);
        }
    }

    /// A machine's place, as partitions see the network: servers, then clients.
    fn place(&self, e: End) -> usize {
        match e {
            End::Server { s, .. } => s,
            End::Client { c } => self.sc.realms + c,
        }
    }

    fn separated(&self, a: usize, b: usize) -> bool {
        self.partition.as_ref().is_some_and(|p| p.separates(a, b))
    }

    /// Cuts a random part of the network off: every wire across is dropped at once (as its
    /// transport's timeout would after a while), and dials across fail until it heals.
    fn start_partition(&mut self) -> Check {
        let places = self.sc.realms + self.sc.clients;
        let p = self
            .links
            .partition(places, &[], self.now, START + self.sc.duration);
        trace!(
            self,
            json!({"ev":"partition","small":p.small_side(),"until":p.until.as_millis().saturating_sub(START.as_millis())})
        );
        self.push(p.until, Ev::PartitionHeal);
        self.partition = Some(p);
        let across: Vec<u64> = self
            .wires
            .iter()
            .filter(|(_, w)| w.reading.iter().any(|r| *r))
            .filter(|(_, w)| self.separated(self.place(w.ends[0]), self.place(w.ends[1])))
            .map(|(id, _)| *id)
            .collect();
        for wire in across {
            self.links.stats.partition_cuts += 1;
            self.cut_wires.insert(wire);
            self.sever(wire, false)?;
        }
        Ok(())
    }

    fn pick(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    /// A uniform draw in `[lo, hi]`.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_millis() as u64, hi.as_millis() as u64);
        Duration::from_millis(lo + self.rng.next_u64() % (hi.saturating_sub(lo) + 1))
    }

    /// A draw around `mean` (uniform on `[0, 2·mean]`): integer arithmetic only, so no float
    /// library can make two machines disagree about a trace.
    fn around(&mut self, mean: Duration) -> Duration {
        self.between(Duration::ZERO, mean * 2)
    }

    /// A one-way latency for something that is not a frame on a wire (a dial, a reset).
    fn latency(&mut self) -> Duration {
        self.spike().unwrap_or_else(|| self.links.latency())
    }

    /// A latency spike, drawn in the faulty phase: a frame held up much longer than the link's
    /// own tail, and everything behind it on its wire with it.
    fn spike(&mut self) -> Option<Duration> {
        let f = &self.sc.faults;
        let (base, spike, spike_max) = (f.link.base, f.spike_permille, f.spike_max);
        (!self.healing && self.rng.next_u32() % 1000 < spike).then(|| self.between(base, spike_max))
    }

    fn push(&mut self, at: Timestamp, ev: Ev) {
        self.queue.push(at, ev);
    }

    fn trace(&mut self, line: Value) {
        self.trace.line(self.now, line);
    }

    fn end_name(e: End) -> String {
        match e {
            End::Server { s, conn, .. } => format!("s{s}:{}", conn.0),
            End::Client { c } => format!("c{c}"),
        }
    }

    // ---- the event loop ---------------------------------------------------------------------

    fn run(&mut self) -> Check {
        trace!(
            self,
            json!({"ev":"start","seed":self.sc.seed,"realms":self.sc.realms,"clients":self.sc.clients,"messages":self.sc.messages})
        );
        loop {
            self.report.events += 1;
            if self.report.events > self.sc.max_events {
                return Err((
                    "event-limit",
                    format!("more than {} events", self.sc.max_events),
                ));
            }
            let ev_at = self.queue.next_at();
            let timer = self.next_timer();
            match (timer, ev_at) {
                (Some((at, who)), e) if e.is_none_or(|e| at <= e) && at <= self.end => {
                    self.now = self.now.max(at);
                    self.timeout(who)?;
                }
                (_, Some(at)) if at <= self.end => {
                    let Some((_, ev)) = self.queue.pop() else {
                        unreachable!("the queue has a first event")
                    };
                    self.now = self.now.max(at);
                    self.event(ev)?;
                }
                _ => break,
            }
        }
        self.now = self.end;
        self.final_checks()
    }

    /// The earliest machine wakeup: servers first, then clients, by index on a tie.
    fn next_timer(&mut self) -> Option<(Timestamp, Who)> {
        let (at, slot) = self.timers.first()?;
        let who = match slot.checked_sub(self.sc.realms) {
            None => Who::Server(slot),
            Some(c) => Who::Client(c),
        };
        Some((at, who))
    }

    /// Files `who`'s current wakeup in `timers`. Called after every change to a machine (each
    /// drain, a crash, a restart): a machine's wakeup moves only when it is handed an input, a
    /// timeout, or polled, so the index always agrees with asking every machine afresh.
    fn rearm(&mut self, who: Who) {
        let at = match who {
            Who::Server(s) => self.servers[s]
                .as_ref()
                .and_then(|x| x.poll_timeout())
                .map(|w| w.at),
            Who::Client(c) => self.clients[c].poll_timeout().map(|w| w.at),
        };
        self.timers.arm(self.slot(who), at);
    }

    /// `who`'s number among the machines: servers, then clients, so that slots order as
    /// [`Who`] does.
    fn slot(&self, who: Who) -> usize {
        match who {
            Who::Server(s) => s,
            Who::Client(c) => self.sc.realms + c,
        }
    }

    fn timeout(&mut self, who: Who) -> Check {
        match who {
            Who::Server(s) => {
                let Some(srv) = self.servers[s].as_mut() else {
                    return Ok(());
                };
                srv.handle_timeout(self.now);
                self.drain_server(s)?;
                if let Some(w) = self.servers[s].as_ref().and_then(|x| x.poll_timeout())
                    && w.at <= self.now
                {
                    return Err((
                        "deadline-advances",
                        format!("server s{s} still wants {} ({})", w.at, w.reason),
                    ));
                }
            }
            Who::Client(c) => {
                self.clients[c].handle_timeout(self.now);
                self.drain_client(c)?;
                if let Some(w) = self.clients[c].poll_timeout()
                    && w.at <= self.now
                {
                    return Err((
                        "deadline-advances",
                        format!("client c{c} still wants {} ({})", w.at, w.reason),
                    ));
                }
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: Ev) -> Check {
        match ev {
            Ev::Bytes { wire, to, bytes } => self.arrive(wire, to, bytes),
            Ev::Closed { wire, to } => self.tell_closed(wire, to),
            Ev::Dial { s, life, t } => self.dial(s, life, t),
            Ev::ClientConnect { c } => self.client_connect(c),
            Ev::AppSend { c, dest } => {
                let to = format!("//{}/c{dest}/inbox", self.realms[self.home[dest]]);
                let body = format!("m{} from c{c}", self.report.sent + 1);
                self.report.sent += 1;
                trace!(self, json!({"ev":"app_send","c":c,"to":to}));
                self.clients[c].handle(self.now, ClientInput::Send { to, body });
                self.drain_client(c)
            }
            Ev::Crash => {
                if self.healing {
                    return Ok(());
                }
                let s = self.pick(self.sc.realms);
                if self.servers[s].is_some() {
                    self.crash(s);
                    let down = self.between(self.sc.faults.downtime.0, self.sc.faults.downtime.1);
                    self.push(self.now + down, Ev::Restart { s });
                }
                if let Some(every) = self.sc.faults.crash_every {
                    let at = self.now + self.around(every);
                    self.push(at, Ev::Crash);
                }
                Ok(())
            }
            Ev::Restart { s } => self.restart(s),
            Ev::Partition => {
                if self.healing {
                    return Ok(());
                }
                self.start_partition()?;
                self.schedule_partition();
                Ok(())
            }
            Ev::PartitionHeal => {
                if self.partition.as_ref().is_some_and(|p| p.until <= self.now) {
                    self.partition = None;
                    trace!(self, json!({"ev":"partition_heal"}));
                }
                Ok(())
            }
            Ev::Drop => {
                if self.healing {
                    return Ok(());
                }
                let open: Vec<u64> = self
                    .wires
                    .iter()
                    .filter(|(_, w)| w.reading.iter().all(|r| *r))
                    .map(|(id, _)| *id)
                    .collect();
                if !open.is_empty() {
                    let wire = open[self.pick(open.len())];
                    self.report.link_drops += 1;
                    trace!(self, json!({"ev":"drop","wire":wire}));
                    self.sever(wire, false)?;
                }
                if let Some(every) = self.sc.faults.link_drop_every {
                    let at = self.now + self.around(every);
                    self.push(at, Ev::Drop);
                }
                Ok(())
            }
            Ev::Heal => {
                self.healing = true;
                // Partitions end with the faulty phase at the latest.
                self.partition = None;
                trace!(self, json!({"ev":"heal"}));
                for s in 0..self.sc.realms {
                    self.restart(s)?;
                }
                for c in 0..self.sc.clients {
                    self.clients[c].handle(self.now, ClientInput::Stall(0));
                    self.rearm(Who::Client(c));
                }
                Ok(())
            }
        }
    }

    // ---- wires ------------------------------------------------------------------------------

    fn open_wire(&mut self, a: End, b: End) -> u64 {
        let id = self.next_wire;
        self.next_wire += 1;
        for (side, end) in [a, b].into_iter().enumerate() {
            if let End::Server { s, conn, life } = end {
                self.server_ends.insert((s, conn, life), (id, side));
            }
        }
        self.wires.insert(
            id,
            Wire {
                ends: [a, b],
                reading: [true, true],
                told: [false, false],
                dir: [Direction::new(self.now), Direction::new(self.now)],
            },
        );
        trace!(
            self,
            json!({"ev":"open","wire":id,"a":Self::end_name(a),"b":Self::end_name(b)})
        );
        id
    }

    fn conn_id(&mut self) -> ConnId {
        self.next_conn += 1;
        ConnId(self.next_conn)
    }

    /// Sends bytes from side `from` of `wire` to the other side, in order behind what is already
    /// on the way.
    fn transmit(&mut self, wire: u64, from: usize, bytes: Vec<u8>) {
        let to = 1 - from;
        let spike = self.spike();
        let Some(w) = self.wires.get_mut(&wire) else {
            return;
        };
        if !w.reading[to] {
            return;
        }
        let mut at = self
            .links
            .send(&mut w.dir[to], Kind::RealmStream, self.now, bytes.len());
        if let Some(spike) = spike {
            at = w.dir[to].behind(at + spike);
        }
        self.push(at, Ev::Bytes { wire, to, bytes });
    }

    fn arrive(&mut self, wire: u64, to: usize, bytes: Vec<u8>) -> Check {
        let Some(w) = self.wires.get(&wire).filter(|w| w.reading[to]) else {
            if self.cut_wires.contains(&wire) {
                self.links.stats.partition_discarded += 1;
            }
            return Ok(());
        };
        let (a, b) = (self.place(w.ends[to]), self.place(w.ends[1 - to]));
        if self.separated(a, b) {
            return Err((
                "nothing-crosses-a-partition",
                format!(
                    "wire {wire}: bytes from {} reached {} across a partition",
                    Self::end_name(w.ends[1 - to]),
                    Self::end_name(w.ends[to])
                ),
            ));
        }
        match w.ends[to] {
            End::Server { s, conn, life } => {
                if self.lives[s] != life || self.servers[s].is_none() {
                    return Ok(());
                }
                self.server_reads(s, conn, wire, &bytes)?;
                self.server_input(s, Input::Received { conn, bytes })
            }
            End::Client { c } => {
                self.clients[c].handle(self.now, ClientInput::Received(bytes));
                self.drain_client(c)
            }
        }
    }

    /// Closes a wire: both ends learn now (a drop), or with `after_latency` (a crash) the
    /// surviving end learns when a reset would reach it.
    fn sever(&mut self, wire: u64, after_latency: bool) -> Check {
        let Some(w) = self.wires.get_mut(&wire) else {
            return Ok(());
        };
        w.reading = [false, false];
        for side in 0..2 {
            if after_latency {
                let lat = self.latency();
                self.push(self.now + lat, Ev::Closed { wire, to: side });
            } else {
                self.tell_closed(wire, side)?;
            }
        }
        Ok(())
    }

    /// Side `side` of `wire` closes it: it stops reading now; the other end reads what was
    /// already on the way, then learns the wire closed.
    fn close_end(&mut self, wire: u64, side: usize) {
        let other = 1 - side;
        let lat = self.latency();
        let at = self.now + lat;
        let at = match self.wires.get_mut(&wire) {
            Some(w) => {
                w.reading[side] = false;
                w.dir[other].behind(at)
            }
            None => at,
        };
        self.push(self.now, Ev::Closed { wire, to: side });
        self.push(at, Ev::Closed { wire, to: other });
    }

    /// Tells side `to` of `wire` that it closed, once.
    fn tell_closed(&mut self, wire: u64, to: usize) -> Check {
        let Some(w) = self.wires.get_mut(&wire) else {
            return Ok(());
        };
        if w.told[to] {
            return Ok(());
        }
        w.told[to] = true;
        w.reading[to] = false;
        let end = w.ends[to];
        if w.told.iter().all(|t| *t) {
            let ends = w.ends;
            self.wires.remove(&wire);
            for end in ends {
                if let End::Server { s, conn, life } = end {
                    self.server_ends.remove(&(s, conn, life));
                }
            }
        }
        match end {
            End::Server { s, conn, life } => {
                if self.lives[s] != life || self.servers[s].is_none() {
                    return Ok(());
                }
                self.unacked.remove(&(s, conn));
                self.server_input(s, Input::Closed { conn })
            }
            End::Client { c } => {
                if self.client_wire[c] != Some(wire) {
                    return Ok(());
                }
                self.client_wire[c] = None;
                self.clients[c].handle(self.now, ClientInput::Closed);
                self.drain_client(c)
            }
        }
    }

    fn wire_of_server(&self, s: usize, conn: ConnId) -> Option<(u64, usize)> {
        self.server_ends.get(&(s, conn, self.lives[s])).copied()
    }

    // ---- servers ----------------------------------------------------------------------------

    fn server_input(&mut self, s: usize, input: Input) -> Check {
        let Some(srv) = self.servers[s].as_mut() else {
            return Ok(());
        };
        srv.handle(self.now, input);
        self.drain_server(s)
    }

    /// What the oracle learns from the frames a server is about to read.
    fn server_reads(&mut self, s: usize, conn: ConnId, wire: u64, bytes: &[u8]) -> Check {
        let from_client = match self.wires.get(&wire) {
            Some(w) => w.ends.iter().find_map(|e| match e {
                End::Client { c } => Some(*c),
                End::Server { .. } => None,
            }),
            None => None,
        };
        for frame in frames(bytes) {
            match frame {
                Frame::Msg(m) => {
                    *self
                        .unacked
                        .entry((s, conn))
                        .or_default()
                        .entry(m.id)
                        .or_insert(0) += 1;
                }
                Frame::Ack(a) => match from_client {
                    Some(c) => {
                        if let Some(d) = self
                            .deliveries
                            .get_mut(&(c, a.id.clone()))
                            .and_then(|ds| ds.iter_mut().rev().find(|d| d.wire == wire))
                        {
                            d.ack_read = true;
                        }
                    }
                    None => {
                        if a.status == AckStatus::Queued {
                            self.queued_downstream.insert((s, a.id));
                        }
                    }
                },
                _ => {}
            }
        }
        Ok(())
    }

    fn drain_server(&mut self, s: usize) -> Check {
        let result = self.drain_server_outputs(s);
        self.rearm(Who::Server(s));
        result
    }

    fn drain_server_outputs(&mut self, s: usize) -> Check {
        loop {
            let Some(o) = self.servers[s].as_mut().and_then(|x| x.poll()) else {
                return Ok(());
            };
            match o {
                Output::Send { conn, bytes } => {
                    self.server_writes(s, conn, &bytes)?;
                    if let Some((wire, side)) = self.wire_of_server(s, conn) {
                        self.transmit(wire, side, bytes);
                    }
                }
                Output::Close { conn } => {
                    trace!(self, json!({"ev":"close","by":format!("s{s}:{}", conn.0)}));
                    // A wire already gone needs nothing: the server was told, or will be.
                    if let Some((wire, side)) = self.wire_of_server(s, conn) {
                        self.close_end(wire, side);
                    }
                }
                Output::Connect { authority, .. } => {
                    let t = self.realms.iter().position(|r| *r == authority);
                    trace!(
                        self,
                        json!({"ev":"connect","from":s,"to":authority.to_string()})
                    );
                    match t {
                        Some(t) => {
                            let lat = self.latency() * 2;
                            let life = self.lives[s];
                            self.push(self.now + lat, Ev::Dial { s, life, t });
                        }
                        None => {
                            return Err((
                                "known-realms",
                                format!("s{s} asked to connect to unknown {authority}"),
                            ));
                        }
                    }
                }
                Output::Persist(r) => {
                    trace!(
                        self,
                        match &r {
                            Record::Spooled { key, msg } => {
                                json!({"ev":"persist","s":s,"spooled":msg.id,"key":key})
                            }
                            Record::Seen { id, .. } => json!({"ev":"persist","s":s,"seen":id}),
                            _ => json!({"ev":"persist","s":s}),
                        }
                    );
                    self.stores[s].persist(r);
                }
                Output::Forget(k) => {
                    if let RecordKey::Spooled { id } = &k {
                        trace!(self, json!({"ev":"forget","s":s,"spooled":id}));
                    } else {
                        trace!(
                            self,
                            json!({"ev":"output","s":s,"what":format!("{:?}", Output::Forget(k.clone()))})
                        );
                    }
                    self.stores[s].forget(&k);
                }
                other => {
                    trace!(
                        self,
                        json!({"ev":"output","s":s,"what":format!("{other:?}")})
                    );
                }
            }
        }
    }

    /// Checks the acks a server writes: one per message read on that connection, and `queued`
    /// only with a copy held.
    fn server_writes(&mut self, s: usize, conn: ConnId, bytes: &[u8]) -> Check {
        // A trace shows every frame; otherwise only the acks are checked.
        let only = (!self.trace.is_on()).then_some("ack");
        for frame in frames_of(bytes, only) {
            if self.trace.is_on() {
                let value = serde_json::to_value(&frame).unwrap_or(Value::Null);
                trace!(
                    self,
                    json!({"ev":"frame","from":format!("s{s}:{}", conn.0),"frame":value})
                );
            }
            let Frame::Ack(a) = frame else { continue };
            let pending = self.unacked.get_mut(&(s, conn));
            match pending.and_then(|p| p.get_mut(&a.id)) {
                Some(n) => {
                    *n -= 1;
                    if *n == 0
                        && let Some(p) = self.unacked.get_mut(&(s, conn))
                    {
                        p.remove(&a.id);
                    }
                }
                None => {
                    return Err((
                        "one-ack-per-msg",
                        format!(
                            "s{s} wrote ack {} {:?} on conn {} with no unanswered msg of that id",
                            a.id, a.status, conn.0
                        ),
                    ));
                }
            }
            if a.code.as_deref() == Some("duplicate") {
                self.report.duplicates_suppressed += 1;
            }
            if a.status == AckStatus::Queued
                && !self.stores[s].holds(&a.id)
                && !self.queued_downstream.contains(&(s, a.id.clone()))
            {
                return Err((
                    "queued-holds-copy",
                    format!(
                        "s{s} acked {} queued ({}) on conn {} but its store holds no copy",
                        a.id,
                        a.code.as_deref().unwrap_or("-"),
                        conn.0
                    ),
                ));
            }
        }
        Ok(())
    }

    fn dial(&mut self, s: usize, life: u32, t: usize) -> Check {
        if self.lives[s] != life || self.servers[s].is_none() {
            return Ok(());
        }
        let authority = self.realms[t].clone();
        if self.separated(s, t) {
            self.links.stats.partition_refusals += 1;
            trace!(
                self,
                json!({"ev":"dial_failed","from":s,"to":t,"partition":true})
            );
            return self.server_input(s, Input::DialFailed { authority });
        }
        if self.servers[t].is_none() {
            trace!(self, json!({"ev":"dial_failed","from":s,"to":t}));
            return self.server_input(s, Input::DialFailed { authority });
        }
        let (dial, accept) = (self.conn_id(), self.conn_id());
        let tlife = self.lives[t];
        self.open_wire(
            End::Server {
                s,
                conn: dial,
                life,
            },
            End::Server {
                s: t,
                conn: accept,
                life: tlife,
            },
        );
        self.report.peer_links += 1;
        self.server_input(
            t,
            Input::Opened {
                conn: accept,
                face: Face::Peer,
                namespaces: Vec::new(),
                source: Source::Unknown,
            },
        )?;
        self.server_input(
            s,
            Input::Dialled {
                conn: dial,
                authority,
            },
        )
    }

    fn crash(&mut self, s: usize) {
        self.report.crashes += 1;
        trace!(self, json!({"ev":"crash","s":s}));
        self.servers[s] = None;
        self.rearm(Who::Server(s));
        let life = self.lives[s];
        self.lives[s] += 1;
        self.unacked.retain(|(x, _), _| *x != s);
        self.queued_downstream.retain(|(x, _)| *x != s);
        let wires: Vec<u64> = self
            .wires
            .iter()
            .filter(|(_, w)| {
                w.ends.iter().any(
                    |e| matches!(e, End::Server { s: x, life: l, .. } if *x == s && *l == life),
                )
            })
            .map(|(id, _)| *id)
            .collect();
        for wire in wires {
            // Nothing can fail here: the crashed end is gone and the others learn later.
            let _ = self.sever(wire, true);
        }
    }

    /// Brings a crashed server back with what it had persisted; a running one is left alone.
    fn restart(&mut self, s: usize) -> Check {
        if self.servers[s].is_some() {
            return Ok(());
        }
        let life = self.lives[s];
        let rng = stream(
            self.sc.seed,
            TAG_SERVER + (s as u64) * 1_000 + u64::from(life),
        );
        let mut srv = Server::new(self.configs[s].clone(), crate::crypto::provider(), rng);
        let records = self.stores[s].records();
        trace!(self, json!({"ev":"restart","s":s,"records":records.len()}));
        for r in records {
            srv.handle(self.now, Input::Restore(r));
        }
        self.servers[s] = Some(srv);
        self.drain_server(s)
    }

    // ---- clients ----------------------------------------------------------------------------

    fn client_connect(&mut self, c: usize) -> Check {
        let s = self.home[c];
        if self.separated(self.sc.realms + c, s) {
            self.links.stats.partition_refusals += 1;
            self.clients[c].handle(self.now, ClientInput::ConnectFailed);
            return self.drain_client(c);
        }
        if self.servers[s].is_none() {
            self.clients[c].handle(self.now, ClientInput::ConnectFailed);
            return self.drain_client(c);
        }
        let conn = self.conn_id();
        let life = self.lives[s];
        let wire = self.open_wire(End::Client { c }, End::Server { s, conn, life });
        self.client_wire[c] = Some(wire);
        let namespaces = vec![Namespace::parse(&format!("c{c}")).expect("a valid namespace")];
        self.server_input(
            s,
            Input::Opened {
                conn,
                face: Face::Client,
                namespaces,
                source: Source::Unknown,
            },
        )?;
        self.clients[c].handle(self.now, ClientInput::Connected);
        self.drain_client(c)
    }

    fn drain_client(&mut self, c: usize) -> Check {
        let result = self.drain_client_outputs(c);
        self.rearm(Who::Client(c));
        result
    }

    fn drain_client_outputs(&mut self, c: usize) -> Check {
        while let Some(o) = self.clients[c].poll() {
            match o {
                ClientOutput::Connect => {
                    let lat = self.latency();
                    self.push(self.now + lat, Ev::ClientConnect { c });
                }
                ClientOutput::Send(bytes) => {
                    if let Some(wire) = self.client_wire[c] {
                        // A trace shows every frame; otherwise only the messages are followed.
                        let only = (!self.trace.is_on()).then_some("msg");
                        for f in frames_of(&bytes, only) {
                            if self.trace.is_on() {
                                let v = serde_json::to_value(&f).unwrap_or(Value::Null);
                                trace!(
                                    self,
                                    json!({"ev":"frame","from":format!("c{c}"),"frame":v})
                                );
                            }
                            let Frame::Msg(m) = f else { continue };
                            if self.dest.contains_key(&m.id) {
                                self.report.retries += 1;
                                continue;
                            }
                            // The application only writes to `//realm/cN/inbox`, N the client:
                            // a `msg` to anywhere else is one the client misaddressed, and the
                            // loss check could not follow it.
                            let owner = m.to.rsplit('/').nth(1).unwrap_or_default();
                            let Some(dest) = owner
                                .strip_prefix('c')
                                .and_then(|d| d.parse::<usize>().ok())
                                .filter(|&d| d < self.sc.clients)
                            else {
                                return Err((
                                    "right-recipient",
                                    format!("c{c} sent {} to {}, no client's inbox", m.id, m.to),
                                ));
                            };
                            self.dest.insert(m.id, dest);
                        }
                        self.transmit(wire, 0, bytes);
                    }
                }
                ClientOutput::Close => {
                    trace!(self, json!({"ev":"close","by":format!("c{c}")}));
                    if let Some(wire) = self.client_wire[c] {
                        // The client's end of a wire is side 0 (see `client_connect`).
                        self.close_end(wire, 0);
                    }
                }
                ClientOutput::Delivered(m) => self.delivered(c, &m)?,
                ClientOutput::Acked(a) => {
                    let slot = match a.status {
                        AckStatus::Delivered => 0,
                        AckStatus::Queued => 1,
                        AckStatus::Failed => 2,
                    };
                    self.report.acked[slot] += 1;
                    if a.status == AckStatus::Failed {
                        let code = a.code.clone().unwrap_or_else(|| "-".to_string());
                        *self.report.failed_codes.entry(code).or_insert(0) += 1;
                    } else {
                        self.accepted.insert(a.id.clone());
                    }
                }
                ClientOutput::Stalled { id, at } => {
                    self.report.stalls += 1;
                    let wait = at.saturating_duration_since(self.now).as_millis() as u64;
                    trace!(self, json!({"ev":"stall","c":c,"id":id,"ms":wait}));
                }
            }
        }
        Ok(())
    }

    fn delivered(&mut self, c: usize, m: &weft_proto::airc::frame::Msg) -> Check {
        self.report.delivered += 1;
        let want = format!("airc://{}/c{c}/inbox", self.realms[self.home[c]]);
        if m.to != want {
            return Err((
                "right-recipient",
                format!("c{c} was handed {} addressed to {}", m.id, m.to),
            ));
        }
        let Some(wire) = self.client_wire[c] else {
            return Ok(());
        };
        let copies = self.deliveries.entry((c, m.id.clone())).or_default();
        if !copies.is_empty() {
            // Once the server has read an ack for any copy it has either recorded the id as
            // seen or forgotten its spooled copy, durably: nothing may bring the message back.
            if let Some(n) = copies.iter().position(|d| d.ack_read) {
                return Err((
                    "no-duplicate-delivery",
                    format!(
                        "c{c} was handed {} again (copy {}) after the server read its ack for copy {}",
                        m.id,
                        copies.len() + 1,
                        n + 1
                    ),
                ));
            }
            self.report.redelivered += 1;
        }
        copies.push(Delivery {
            wire,
            ack_read: false,
        });
        Ok(())
    }

    // ---- the end ----------------------------------------------------------------------------

    fn final_checks(&mut self) -> Check {
        for s in 0..self.sc.realms {
            if self.servers[s].is_none() {
                return Err(("no-loss-after-heal", format!("s{s} is down at the end")));
            }
        }
        if let Some(((s, conn), ids)) = self.unacked.iter().find(|(_, ids)| !ids.is_empty()) {
            return Err((
                "one-ack-per-msg",
                format!(
                    "s{s} never acked {:?} read on conn {}, still open",
                    ids.keys().collect::<Vec<_>>(),
                    conn.0
                ),
            ));
        }
        for id in &self.accepted {
            let Some(&dest) = self.dest.get(id) else {
                continue;
            };
            if !self.deliveries.contains_key(&(dest, id.clone())) {
                let held: Vec<usize> = (0..self.sc.realms)
                    .filter(|s| self.stores[*s].holds(id))
                    .collect();
                return Err((
                    "no-loss-after-heal",
                    format!(
                        "{id} was acked queued or delivered but never reached c{dest}; stores holding it: {held:?}"
                    ),
                ));
            }
        }
        for (c, client) in self.clients.iter().enumerate() {
            if let Some(id) = client.unanswered().next() {
                return Err((
                    "every-msg-answered",
                    format!("c{c} never got an ack for {id}"),
                ));
            }
        }
        self.report.link = self.links.stats.clone();
        trace!(self, json!({"ev":"end","report":self.report.to_json()}));
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Server(usize),
    Client(usize),
}

/// The frames in bytes a machine wrote or will read (whole lines only, as every writer here
/// writes them).
fn frames(bytes: &[u8]) -> Vec<Frame> {
    frames_of(bytes, None)
}

/// The frames in `bytes` that could be of type `only` (all of them for `None`). The oracle needs
/// one type from each write (a server's acks, a client's messages) and most of the bytes are
/// the other (the messages a server relays), so lines plainly of another type are not decoded.
fn frames_of(bytes: &[u8], only: Option<&str>) -> Vec<Frame> {
    let skip = |l: &[u8]| {
        only.is_some_and(|want| {
            core::str::from_utf8(l)
                .ok()
                .and_then(frame::plain_type)
                .is_some_and(|t| t != want)
        })
    };
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty() && !skip(l))
        .filter_map(|l| framing::decode_line(l).ok())
        .collect()
}
