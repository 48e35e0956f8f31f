//! The `minca-meetup` scenario: N Minca nodes ([`weft_proto::minca::node::Node`], the relay
//! client, rendezvous and mesh composed) in one space or spread round-robin over several
//! (`--spaces`), meeting through R relays
//! ([`weft_proto::minca::relay_server::RelayServer`]), all unchanged, on a simulated network
//! ([`crate::link`]: latency drawn per message, loss as retransmission delay, bandwidth, relays
//! that now and then deliver mail twice, partitions that heal): relay sockets and peer
//! connections that drop, relays that restart, nodes that sleep (their clock jumps when they
//! wake), nodes that crash and restart with their session key and nothing else
//! ([`Faults::crash_every`]), and clocks skewed a little each. Peer
//! connections are simulated data channels: a description names its end, and the channel opens
//! once the offerer applies an answer to its own offer, with a channel-binding fingerprint per
//! node.
//!
//! # The invariants, as checked
//!
//! 1. **one-connection-per-pair** (§5.1, §7.3): when a peer connection opens, no other open one
//!    joins the same two nodes.
//! 2. **nothing-before-admission** (§7.2): a frame of a room other than the handshake's
//!    (`__auth-hello`, `__auth-proof`) and `__leave` leaves a node only towards a peer that node
//!    has admitted there; a message is delivered only from a peer admitted there. Together: nothing
//!    of a room crosses before both sides proved themselves in it.
//! 3. **introductions-never-loop** (§8): a node passes a given signal (origin, target, `at`) to a
//!    given peer at most once.
//! 4. **full-mesh-after-heal**: once the faults stop and the network has been quiet for the
//!    heal period, every node has admitted every other in the space (up to the 64 a room holds).
//! 5. **live-attributed** (§9.2): a live message each node sends at the end reaches every other
//!    node, attributed to its sender.
//!
//! Also checked: no message reaches a node or relay the other side of a partition
//! (**nothing-crosses-a-partition**; nodes and relays are each a place a partition may cut off),
//! every machine's deadline advances after its timeout runs (**deadline-advances**), and a run
//! stops as a livelock past [`Scenario::max_events`] (**event-limit**). A scenario that cannot
//! meet at all (a space of one node, or of more than a room holds; no relay) is refused before
//! it runs (**scenario-shape**, [`Scenario::shape_error`]).
//!
//! Report: the time to a full mesh, relay messages per node, signals forwarded per node, replays
//! the rendezvous ignored, and the link layer's counters ([`crate::link::LinkStats`]).

use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hashbrown::HashMap;

use bytes::Bytes;
use chacha20::ChaCha20Rng;
use rand_core::Rng;
use serde_json::{Value, json};
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::crypto::{CryptoProvider, generate_p256};
use weft_proto::minca::mesh::RoomKind;
use weft_proto::minca::mesh::introduction::SIGNAL_WINDOW;
use weft_proto::minca::node::{self, Join, Node, NodeConfig};
use weft_proto::minca::relay_server::{self, RelayConfig, RelayServer};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::rendezvous::Ignored;
use weft_proto::minca::room::{MAX_ROOM_PEERS, Room};

use crate::link::{Bandwidth, Direction, Kind, LinkFaults, LinkStats, Links, Partition};
use crate::scenario::{Check, Queue, Timed, Trace, Wakeups, World, fmt_times};
use crate::stream;

mod admitted;
mod by_conn;
mod by_id;
mod checked;
#[cfg(test)]
mod invariant_tests;
mod node_input;
mod passed;
mod sent;
mod severed;

use admitted::Admitted;
use by_conn::{ByConn, ConnSet};
use by_id::ById;
use checked::{LastSent, Numbers};
use node_input::{ConnEvent, NodeInput};
use passed::Passed;
use severed::Severed;

pub use crate::scenario::START;

/// The spaces nodes join are named after this and their number.
const SPACE: &str = "minca-meetup";

/// Each relay listens on its own loopback port (only loopback may use `ws:`, §1.2).
const FIRST_PORT: u16 = 9000;

/// The live message type (§9.2).
const LIVE: &str = "live";

/// How relay mail starts on the wire (`relay_wire::RelayMessage::Mail`): the one relay message
/// a relay may deliver twice.
const MAIL_PREFIX: &str = "{\"type\":\"mail\"";

/// How long a data channel's ICE checks run before a connection with no path (across a
/// partition) is reported failed to both ends: about when a browser's ICE agent declares the
/// pair failed, and less than the mesh's own attempt timeout, so the answering end, which has
/// none, does not hold the attempt forever.
pub const ICE_FAILURE: Duration = Duration::from_secs(10);

/// A WebSocket ping or pong frame with no payload: two bytes of header.
const PING_BYTES: usize = 2;

/// How a scenario run is shaped. [`Scenario::small`] is the size the test suite runs at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Seeds everything: keys, latencies, faults.
    pub seed: u64,
    /// Nodes (N).
    pub nodes: usize,
    /// Spaces the nodes are spread over, round-robin (1: every node in one space). A room holds
    /// at most 64 peers (§2), so a network larger than that meets as many spaces.
    pub spaces: usize,
    /// Relays (R). A space meets on [`RELAYS_PER_SPACE`] of them (all of them when there are no
    /// more), dealt round-robin ([`Scenario::relays_of`]).
    pub relays: usize,
    /// How long the faulty phase lasts.
    pub duration: Duration,
    /// How long the quiet phase lasts before the full mesh is required.
    pub heal: Duration,
    /// What goes wrong in the faulty phase.
    pub faults: Faults,
    /// Events a run may take at most, so a livelock is an error and not a hang.
    pub max_events: u64,
}

/// The faults of a scenario's faulty phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Faults {
    /// The network: latency per message, loss, bandwidth, relay duplicates and partitions
    /// ([`crate::link`]).
    pub link: LinkFaults,
    /// Mean time between dropped relay sockets across the network (`None`: never).
    pub socket_drop_every: Option<Duration>,
    /// Mean time between dropped peer connections across the network.
    pub peer_drop_every: Option<Duration>,
    /// Mean time between relay restarts.
    pub relay_restart_every: Option<Duration>,
    /// How long a restarting relay stays down, at least and at most (cut short at the end of
    /// the faulty phase).
    pub relay_down: (Duration, Duration),
    /// Mean time between a node going to sleep.
    pub sleep_every: Option<Duration>,
    /// How long a node sleeps, at least and at most (cut short at the end of the faulty
    /// phase).
    pub sleep: (Duration, Duration),
    /// Mean time between a node crashing (`None`: never). A crashed node loses everything
    /// but what it keeps on disk, its session key (its identity), and restarts: a new box,
    /// rooms joined again, every memory of the rendezvous and the mesh empty. A crash drawn
    /// for a node asleep or already down passes it over.
    pub crash_every: Option<Duration>,
    /// How long a crashed node stays down, at least and at most (cut short at the end of the
    /// faulty phase).
    pub crash_down: (Duration, Duration),
    /// The most a node's clock is off, either way.
    pub max_skew: Duration,
    /// Nodes join at random times within this long of the start.
    pub join_spread: Duration,
    /// Which places one partition may cut.
    pub partition_region: PartitionRegion,
}

/// Which places one partition may cut: at most a third of one region's
/// ([`crate::link::MAX_PARTITION_SHARE`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PartitionRegion {
    /// One space's nodes, with the relays: the network one group meets on splits (a venue's
    /// Wi-Fi, an office's uplink), or a relay is cut off from part of the group. Like every other
    /// fault of the scenario (a sleep, a dropped socket, a relay restart), one partition touches
    /// a bounded part of the network however large it grows. With one space, the whole network.
    #[default]
    Space,
    /// The whole network: up to a third of all nodes, in every space at once. The stress this
    /// puts on each node does not shrink as the network grows, unlike every other fault's.
    Network,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            link: LinkFaults {
                base: Duration::from_millis(5),
                jitter: Duration::from_millis(25),
                loss_permille: 10,
                duplicate_permille: 20,
                bandwidth: Bandwidth::ByKind,
                partition_every: Some(Duration::from_secs(60)),
                partition_length: (Duration::from_secs(5), Duration::from_secs(30)),
            },
            socket_drop_every: Some(Duration::from_secs(20)),
            peer_drop_every: Some(Duration::from_secs(30)),
            relay_restart_every: Some(Duration::from_secs(60)),
            relay_down: (Duration::from_secs(1), Duration::from_secs(15)),
            sleep_every: Some(Duration::from_secs(45)),
            sleep: (Duration::from_secs(5), Duration::from_secs(90)),
            crash_every: Some(Duration::from_secs(60)),
            crash_down: (Duration::from_secs(1), Duration::from_secs(30)),
            max_skew: Duration::from_secs(5),
            join_spread: Duration::from_secs(10),
            partition_region: PartitionRegion::default(),
        }
    }
}

impl Scenario {
    /// The default shape for `seed`: 8 nodes, 2 relays, 3 minutes of faults and 3 of quiet.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nodes: 8,
            spaces: 1,
            relays: 2,
            duration: Duration::from_secs(180),
            heal: Duration::from_secs(180),
            faults: Faults::default(),
            max_events: 5_000_000,
        }
    }

    /// The size the test suite sweeps hundreds of seeds at, chosen so a seed costs about a
    /// tenth of a second of CPU in a debug build: 4 nodes, 2 relays, 45 s of faults with a
    /// partition every 30 s on average, and 180 s of quiet, with sleeps of at most 30 s. The
    /// quiet phase outlasts a connection attempt lost to a partition: its 20 s attempt timeout
    /// and then up to the 120 s until the next hello (§2) before the two meet again.
    pub fn small(seed: u64) -> Self {
        Self {
            nodes: 4,
            duration: Duration::from_secs(45),
            heal: Duration::from_secs(180),
            faults: Faults {
                sleep: (Duration::from_secs(5), Duration::from_secs(30)),
                link: LinkFaults {
                    partition_every: Some(Duration::from_secs(30)),
                    ..Faults::default().link
                },
                ..Faults::default()
            },
            ..Self::new(seed)
        }
    }
}

/// Events a node may cost per minute of virtual time before a run counts as a livelock, in a
/// space of [`SCALE_SPACE_NODES`]. An honest run takes about 90 with the default faults (1 000
/// nodes over 13 minutes: 1 131 715 events; docs/performance.md) and about 230 when partitions
/// cut across the whole network ([`PartitionRegion::Network`]: 2 971 116), so this bound is four
/// times past any real run and still stops one that spins.
pub const EVENTS_PER_NODE_MINUTE: u64 = 1_000;

impl Scenario {
    /// This scenario with [`Scenario::max_events`] raised to what its size and length may honestly
    /// take ([`EVENTS_PER_NODE_MINUTE`]), so a large run is not stopped by the default bound.
    ///
    /// A node's share grows with the cube of its space's size past [`SCALE_SPACE_NODES`]: a room
    /// of n meeting at once makes about n² introductions (§8), and each reaches every member
    /// from each of its peers. One room of 64 took 7.2 to 16.6 M events in 6 minutes (seeds
    /// 22 000 to 22 007: at most about 43 000 a node a minute), where the cube allows 152 000.
    pub fn with_event_budget(self) -> Self {
        let minutes = (self.duration + self.heal).as_secs().div_ceil(60);
        let space = self.nodes.div_ceil(self.spaces.max(1)) as u64;
        let per_node_minute = EVENTS_PER_NODE_MINUTE.saturating_mul(
            space
                .pow(3)
                .div_ceil((SCALE_SPACE_NODES as u64).pow(3))
                .max(1),
        );
        let budget = (self.nodes as u64)
            .saturating_mul(minutes)
            .saturating_mul(per_node_minute);
        Self {
            max_events: self.max_events.max(budget),
            ..self
        }
    }
}

/// The most nodes one space may hold: a room holds at most 64 peers (§2), so in a space of more
/// than 65 nodes some pairs can never meet and a full mesh is impossible by the spec; a run of
/// that shape could only fail its full-mesh invariant (70 nodes did, seed 23 000).
pub const MAX_SPACE_NODES: usize = MAX_ROOM_PEERS + 1;

/// How many relays one space meets on when the scenario has more. Every node dials every relay
/// its spaces use, and a relay holds at most [`relay_server::MAX_SOCKETS`] sockets (§1.4), so a
/// network where every node dialled every relay could not grow past that many nodes whatever
/// the number of relays: past it, each relay admits the first comers and refuses the rest, and
/// a node refused by every relay its space-mates got into can never meet them (30 000 nodes on 6
/// relays left a node 10 of 11 peers short, for that reason alone). Two, as a space's operator
/// would list two relays so that one restarting does not cut the room in half.
pub const RELAYS_PER_SPACE: usize = 2;

impl Scenario {
    /// The space node `n` is in: nodes are dealt to the spaces in turn.
    fn space_of(&self, n: usize) -> usize {
        n % self.spaces.max(1)
    }

    /// How many nodes `space` holds, as [`Scenario::space_of`] deals them: counted, not
    /// searched for, because the full-mesh checks ask it for every node.
    fn space_size(&self, space: usize) -> usize {
        let spaces = self.spaces.max(1);
        self.nodes / spaces + usize::from(space < self.nodes % spaces)
    }

    /// The relays `space` meets on: every relay when there are at most [`RELAYS_PER_SPACE`],
    /// else [`RELAYS_PER_SPACE`] consecutive ones, dealt round-robin so that each relay serves as
    /// many spaces as the next.
    pub fn relays_of(&self, space: usize) -> impl Iterator<Item = usize> + use<> {
        let relays = self.relays.max(1);
        let per_space = relays.min(RELAYS_PER_SPACE);
        (0..per_space).map(move |i| (space * per_space + i) % relays)
    }

    /// The most sockets any one relay is asked to hold: one per node of every space it serves.
    fn busiest_relay(&self) -> usize {
        let mut sockets = vec![0usize; self.relays.max(1)];
        for space in 0..self.spaces.max(1) {
            for r in self.relays_of(space) {
                sockets[r] += self.space_size(space);
            }
        }
        sockets.into_iter().max().unwrap_or(0)
    }

    /// Why this scenario cannot run as a meetup, if it cannot: fewer than two nodes a space,
    /// no relay, a space larger than [`MAX_SPACE_NODES`], or more nodes on one relay than a
    /// relay holds sockets ([`relay_server::MAX_SOCKETS`]).
    pub fn shape_error(&self) -> Option<String> {
        let spaces = self.spaces.max(1);
        if self.nodes < 2 * spaces || self.relays == 0 {
            return Some("want at least two nodes per space and one relay".into());
        }
        let largest = self.nodes.div_ceil(spaces);
        if largest > MAX_SPACE_NODES {
            return Some(format!(
                "a space of {largest} nodes: a room holds at most {MAX_ROOM_PEERS} peers (Minca §2), \
                 so at most {MAX_SPACE_NODES} nodes a space; give more --spaces"
            ));
        }
        let busiest = self.busiest_relay();
        (busiest > relay_server::MAX_SOCKETS).then(|| {
            format!(
                "a relay would hold {busiest} sockets, one per node of each space it serves \
                 ({RELAYS_PER_SPACE} relays a space), and a relay takes at most {} (Minca §1.4); \
                 give more --relays",
                relay_server::MAX_SOCKETS
            )
        })
    }
}

/// Nodes a space holds in the shape a large meetup is run at (`weft sim minca-meetup --nodes N
/// --spaces N/12`): a group that meets in one room, as people do, rather than one room of
/// thousands. A full mesh of n nodes costs n(n-1)/2 admissions and §8 floods every introduction
/// to every admitted peer, so the work per node grows with its space, not with the network.
pub const SCALE_SPACE_NODES: usize = 12;

/// What a run did. Everything but `wall` is a function of the [`Scenario`] alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The scenario's seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: u64,
    /// When every node had last admitted every other (after the last fault), from the start.
    pub full_mesh_at: Option<Duration>,
    /// Text frames nodes sent to relays.
    pub relay_messages: u64,
    /// `__signal` frames nodes sent (introductions, §8), first-hand and passed on.
    pub signals: u64,
    /// Peer connections that opened.
    pub peer_connections: u64,
    /// Relay sockets and peer connections dropped by the network.
    pub drops: u64,
    /// Relay restarts.
    pub relay_restarts: u64,
    /// Nodes put to sleep.
    pub sleeps: u64,
    /// Nodes that crashed (each restarted).
    pub crashes: u64,
    /// Inputs lost because the node they were for crashed: on its way to it while it was
    /// down, or to an incarnation that has since crashed.
    pub lost_in_crashes: u64,
    /// Live messages delivered.
    pub live_delivered: u64,
    /// Rendezvous messages nodes ignored as replays (§2 rule 3): among them the second copies
    /// of mail a relay delivered twice.
    pub replays_ignored: u64,
    /// Dials a running relay refused at its socket caps (§1.4): a node's old socket not yet
    /// closed when it dials again, or a relay asked to hold more than it takes.
    pub relay_refusals: u64,
    /// What the link layer did: loss, bandwidth, duplicates, partitions.
    pub link: LinkStats,
    /// Events the simulator ran.
    pub events: u64,
    /// Virtual time the run covered.
    pub virtual_duration: Duration,
    /// Wall-clock time the run took (the one field that differs between runs of one seed).
    pub wall: Duration,
}

impl Report {
    fn per_node(&self, total: u64) -> f64 {
        total as f64 / self.nodes.max(1) as f64
    }

    /// The report as one JSON object, times in milliseconds.
    pub fn to_json(&self) -> Value {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        json!({
            "seed": self.seed,
            "nodes": self.nodes,
            "full_mesh_ms": self.full_mesh_at.map(ms),
            "relay_messages": self.relay_messages,
            "relay_messages_per_node": self.per_node(self.relay_messages),
            "signals": self.signals,
            "signals_per_node": self.per_node(self.signals),
            "peer_connections": self.peer_connections,
            "drops": self.drops,
            "relay_restarts": self.relay_restarts,
            "sleeps": self.sleeps,
            "crashes": self.crashes,
            "lost_in_crashes": self.lost_in_crashes,
            "live_delivered": self.live_delivered,
            "replays_ignored": self.replays_ignored,
            "relay_refusals": self.relay_refusals,
            "link": self.link.to_json(),
            "events": self.events,
            "virtual_ms": ms(self.virtual_duration),
            "wall_ms": ms(self.wall),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}, {} nodes", self.seed, self.nodes)?;
        match self.full_mesh_at {
            Some(at) => writeln!(f, "full mesh at {:.3}s", at.as_secs_f64())?,
            None => writeln!(f, "no full mesh")?,
        }
        writeln!(
            f,
            "relay messages {} ({:.1} per node), signals forwarded {} ({:.1} per node)",
            self.relay_messages,
            self.per_node(self.relay_messages),
            self.signals,
            self.per_node(self.signals)
        )?;
        writeln!(
            f,
            "peer connections {}, drops {}, relay restarts {}, sleeps {}, live delivered {}, events {}",
            self.peer_connections,
            self.drops,
            self.relay_restarts,
            self.sleeps,
            self.live_delivered,
            self.events
        )?;
        writeln!(
            f,
            "crashes {} ({} inputs lost with them), replays ignored {}, dials refused by a relay {}",
            self.crashes, self.lost_in_crashes, self.replays_ignored, self.relay_refusals
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

/// The first invariant a run broke, with its seed and the run up to it.
pub type Violation = crate::scenario::Violation<Report>;

/// Runs `scenario`, writing a JSON-lines trace to `trace` if given. The same scenario gives the
/// same trace byte for byte and the same report (but for `wall`). A scenario of a shape that
/// cannot meet ([`Scenario::shape_error`]) is refused before anything runs, as
/// **scenario-shape** at 0 s.
pub fn run<'a>(
    scenario: &'a Scenario,
    trace: Option<&'a mut dyn Write>,
) -> Result<Report, Box<Violation>> {
    if let Some(detail) = scenario.shape_error() {
        return Err(Box::new(Violation {
            invariant: "scenario-shape",
            detail,
            seed: scenario.seed,
            at: Duration::ZERO,
            report: Report {
                seed: scenario.seed,
                nodes: scenario.nodes as u64,
                ..Report::default()
            },
        }));
    }
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
        self.report.replays_ignored = self
            .nodes
            .iter()
            .map(|x| x.node.rendezvous().ignored(Ignored::Replay))
            .sum();
        &mut self.report
    }
}

const TAG_NET: u64 = 11;
const TAG_NODE: u64 = 4_000_000;
const TAG_RELAY: u64 = 5_000_000;
const TAG_LINK: u64 = 12;
/// Restarted nodes' randomness, by node (shifted 20 bits) and incarnation: apart from every
/// other tag.
const TAG_RESTART: u64 = 1 << 40;

/// The simulator's provider: the plain provider's answers, with P-256 verifications of bytes
/// already checked remembered (§8 floods one signed introduction to every peer of a room).
fn crypto() -> &'static dyn CryptoProvider {
    crate::crypto::provider()
}

/// A relay socket: one node's socket to one relay incarnation.
#[derive(Debug)]
struct Socket {
    node: usize,
    node_conn: ConnId,
    relay: usize,
    relay_conn: ConnId,
    life: u32,
    /// Node → relay.
    up: Direction,
    /// Relay → node.
    down: Direction,
}

/// A simulated peer connection (a data channel) between two nodes' connection ids.
#[derive(Debug)]
struct Link {
    ends: [(usize, ConnId); 2],
    /// Towards each end.
    dirs: [Direction; 2],
}

/// A stream a message travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Stream {
    Socket(u64),
    Link(u64),
}

/// Where a message crossing the network came from: its stream and the place that sent it.
#[derive(Clone, Copy, Debug)]
struct Via {
    stream: Stream,
    from: usize,
}

#[derive(Debug)]
enum Ev {
    /// An input for a node incarnation (held while it sleeps).
    Node {
        n: usize,
        life: u32,
        input: NodeInput,
    },
    /// An input for a relay incarnation.
    Relay {
        r: usize,
        life: u32,
        input: relay_server::Input,
    },
    /// A message for a node incarnation that crossed the network on a stream.
    NodeVia {
        n: usize,
        life: u32,
        input: NodeInput,
        via: Via,
    },
    /// A message for a relay incarnation that crossed the network on a stream.
    RelayVia {
        r: usize,
        life: u32,
        input: relay_server::Input,
        via: Via,
    },
    Partition,
    PartitionHeal,
    Join {
        n: usize,
    },
    SocketDrop,
    PeerDrop,
    RelayRestart,
    RelayUp {
        r: usize,
    },
    Sleep,
    Wake {
        n: usize,
    },
    Crash,
    Restart {
        n: usize,
    },
    SendLive,
}

struct RelaySlot {
    server: Option<RelayServer<ChaCha20Rng>>,
    life: u32,
}

/// A node's clock and whether it sleeps, asked at every event for the node and every ping a
/// relay sends it. Kept apart from the node's [`NodeSlot`] (about 3 KiB, these two on lines of
/// their own that the event touched for nothing else: two cache misses an event at 10 000
/// nodes), in a vector of 16 bytes a node that stays cached.
#[derive(Clone, Copy, Debug)]
struct Clock {
    skew_ms: i64,
    asleep: bool,
    /// Crashed and not yet restarted: what reaches it is lost.
    down: bool,
    /// Which incarnation of the node is running: an event for an earlier one (on a socket or
    /// a connection of a node that has since crashed) is lost with it, since a restarted node
    /// numbers its connections from the start again.
    life: u32,
}

struct NodeSlot {
    node: Node<ChaCha20Rng>,
    held: Vec<node::Input>,
    /// The peers (by number, `Net::numbers`) this node has admitted in each room, as its
    /// outputs said.
    admitted: Admitted,
    /// Signals passed on and still fresh somewhere, with the peers each went to, nodes by
    /// number (`Net::numbers`), forgotten once no node would take them again
    /// (`Net::forget_stale_signals`).
    passed: Passed,
    /// Peers (by number) live messages came from.
    live_from: BTreeSet<u32>,
    /// The space the node is in.
    space: usize,
    /// The connections this node made a local description for and has not closed: only
    /// whether one is pending is ever asked, so the descriptions themselves are not kept.
    conns: ConnSet,
    /// The node's open relay sockets by its connection id (a relay's side needs no such
    /// table: [`Net::relay_socket`]).
    sockets: ByConn,
    /// The node's open peer connections by its connection id.
    links: ByConn,
}

impl NodeSlot {
    /// Whether this node said it admitted `peer` in `room`.
    fn admits(&self, room: &str, peer: u32) -> bool {
        self.admitted.contains(room, peer)
    }
}

struct Net<'a> {
    sc: &'a Scenario,
    rng: ChaCha20Rng,
    now: Timestamp,
    end_faults: Timestamp,
    queue: Queue<Ev>,
    relays: Vec<RelaySlot>,
    /// How each relay's port appears in a URL a node dials, by relay number: written once and
    /// not at every dial (a run dials tens of thousands of times).
    dial_needles: Vec<String>,
    nodes: Vec<NodeSlot>,
    /// Each node's [`Clock`], by node number.
    clocks: Vec<Clock>,
    /// Each node's number by its DID; a DID no node has gets the next number after them.
    numbers: Numbers,
    /// The oracle's reading of the last frame a node sent.
    last_sent: LastSent,
    /// Nodes' wakeups, in global time, by node number.
    timers: Wakeups,
    /// Relays' wakeups, by relay number.
    relay_timers: Wakeups,
    /// Open relay sockets by id, walked in id order ([`ById::ids`]), so a run depends only on
    /// its seed.
    sockets: ById<Socket>,
    next_socket: u64,
    /// Open peer connections by id, walked in id order as the sockets are.
    links_open: ById<Link>,
    /// Open peer connections per unordered pair of nodes.
    pair_links: HashMap<(usize, usize), usize>,
    next_link: u64,
    /// Admitted (node, room, peer) pairs the world counts, for the time to a full mesh.
    admitted_pairs: usize,
    /// `admitted_pairs` in a full mesh.
    full_mesh_target: usize,
    /// Each space's room.
    rooms: Vec<Room>,
    links: Links,
    /// The places of each region a partition may fall in (none: the whole network).
    partition_regions: Vec<Vec<usize>>,
    /// The partition in force, if any.
    partition: Option<Partition>,
    /// Streams a partition cut: what was on the way on them is never delivered.
    severed: Severed,
    trace: Trace<'a>,
    report: Report,
}

/// Room a local description is written in at once: `format!` sizes its buffer from the literal
/// text alone, short of an answer (which holds the offer), and grew it once a connection.
const DESCRIPTION_BYTES: usize = 64;

/// A simulated local description, written in one allocation.
fn description(args: fmt::Arguments<'_>) -> String {
    let mut sdp = String::with_capacity(DESCRIPTION_BYTES);
    // Writing to a string fails only if a `Display` does, and numbers and strings do not.
    let _ = fmt::write(&mut sdp, args);
    sdp
}

fn space_id(s: usize) -> String {
    format!("{SPACE}-{s}")
}

fn relay_url(r: usize) -> String {
    format!("ws://127.0.0.1:{}/", usize::from(FIRST_PORT) + r)
}

fn node_addr(n: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8))
}

fn uniform(rng: &mut ChaCha20Rng, (lo, hi): (Duration, Duration)) -> Duration {
    let span = hi.saturating_sub(lo).as_millis() as u64;
    lo + Duration::from_millis(if span == 0 {
        0
    } else {
        rng.next_u64() % (span + 1)
    })
}

/// An exponential-ish wait with mean `mean`: uniform on [0, 2·mean], enough for scheduling faults.
fn every(rng: &mut ChaCha20Rng, mean: Duration) -> Duration {
    uniform(rng, (Duration::from_millis(1), mean * 2))
}

/// Incarnation `life` of node `n`: its session key is the same in every one (what it keeps on
/// disk), its randomness (so its box) new in each.
fn start_node(sc: &Scenario, n: usize, life: u32) -> Node<ChaCha20Rng> {
    let config = NodeConfig {
        relays: sc
            .relays_of(sc.space_of(n))
            .map(|r| RelayUrl::parse(&relay_url(r)).expect("a loopback relay URL"))
            .collect(),
    };
    let session = generate_p256(crypto(), &mut stream(sc.seed, TAG_NODE + 2 * n as u64));
    let rng = match life {
        0 => stream(sc.seed, TAG_NODE + 2 * n as u64 + 1),
        _ => stream(sc.seed, TAG_RESTART + ((n as u64) << 20) + u64::from(life)),
    };
    Node::new(session, config, crypto(), rng).expect("a generated session key is valid")
}

impl NodeSlot {
    fn new(node: Node<ChaCha20Rng>, space: usize) -> Self {
        NodeSlot {
            node,
            held: Vec::new(),
            admitted: Admitted::default(),
            passed: Passed::default(),
            live_from: BTreeSet::new(),
            space,
            conns: ConnSet::default(),
            sockets: ByConn::default(),
            links: ByConn::default(),
        }
    }
}

/// The places each partition region holds (see [`PartitionRegion`]): nodes are places
/// `0..nodes` and relays the places after them; node `n` is in space `n % spaces`.
fn partition_regions(sc: &Scenario) -> Vec<Vec<usize>> {
    let spaces = sc.spaces.max(1);
    if sc.faults.partition_region == PartitionRegion::Network || spaces == 1 {
        return Vec::new();
    }
    let relays = sc.nodes..sc.nodes + sc.relays;
    (0..spaces)
        .map(|s| {
            (s..sc.nodes)
                .step_by(spaces)
                .chain(relays.clone())
                .collect()
        })
        .collect()
}

impl<'a> Net<'a> {
    fn new(sc: &'a Scenario, trace: Option<&'a mut dyn Write>) -> Self {
        let mut rng = stream(sc.seed, TAG_NET);
        let mut dids = Vec::new();
        let mut clocks = Vec::new();
        let nodes = (0..sc.nodes)
            .map(|n| {
                let node = start_node(sc, n, 0);
                dids.push(node.did().to_owned());
                let skew = sc.faults.max_skew.as_millis() as i64;
                let skew_ms = if skew == 0 {
                    0
                } else {
                    (rng.next_u64() % (2 * skew as u64 + 1)) as i64 - skew
                };
                clocks.push(Clock {
                    skew_ms,
                    asleep: false,
                    down: false,
                    life: 0,
                });
                NodeSlot::new(node, sc.space_of(n))
            })
            .collect();
        let relays = (0..sc.relays)
            .map(|r| RelaySlot {
                server: Some(RelayServer::new(
                    RelayConfig { turn: None },
                    crypto(),
                    stream(sc.seed, TAG_RELAY + r as u64),
                )),
                life: 0,
            })
            .collect();
        Self {
            sc,
            rng,
            now: START,
            end_faults: START + sc.duration,
            queue: Queue::new(),
            relays,
            dial_needles: (0..sc.relays)
                .map(|r| format!(":{}/", usize::from(FIRST_PORT) + r))
                .collect(),
            nodes,
            clocks,
            numbers: Numbers::new(dids),
            last_sent: LastSent::default(),
            timers: Wakeups::new(sc.nodes),
            relay_timers: Wakeups::new(sc.relays),
            sockets: ById::default(),
            next_socket: 0,
            links_open: ById::default(),
            pair_links: HashMap::new(),
            next_link: 0,
            admitted_pairs: 0,
            full_mesh_target: 0,
            rooms: (0..sc.spaces.max(1))
                .map(|s| Room::of_space(crypto(), &space_id(s)))
                .collect(),
            links: Links::new(sc.faults.link.clone(), stream(sc.seed, TAG_LINK)),
            partition_regions: partition_regions(sc),
            partition: None,
            severed: Severed::default(),
            trace: Trace::new(trace),
            report: Report {
                seed: sc.seed,
                nodes: sc.nodes as u64,
                ..Report::default()
            },
        }
    }

    fn at(&mut self, at: Timestamp, ev: Ev) {
        self.queue.push(at.max(self.now), ev);
    }

    fn after(&mut self, d: Duration, ev: Ev) {
        self.at(self.now + d, ev);
    }

    /// Writes a trace line: `detail` is built only when a trace is written, as every value a
    /// `json!` makes is a map and strings on the heap (five allocations a peer connection).
    fn log(&mut self, what: &str, detail: impl FnOnce() -> Value) {
        if self.trace.is_on() {
            self.trace
                .line(self.now, json!({ "ev": what, "d": detail() }));
        }
    }

    fn local(&self, n: usize) -> Timestamp {
        let ms = self.now.as_millis() as i64 + self.clocks[n].skew_ms;
        Timestamp::from_millis(ms.max(0) as u64)
    }

    /// `d`, cut short where it would run past the faulty phase: a fault that outlasts it (a
    /// sleep, a relay down) ends with it, as partitions do, so the quiet phase is quiet from its
    /// start and its whole length is the heal the full-mesh invariant allows.
    fn within_faults(&self, d: Duration) -> Duration {
        d.min(self.end_faults.saturating_duration_since(self.now))
    }

    fn schedule_fault(&mut self, mean: Option<Duration>, ev: Ev) {
        if let Some(mean) = mean {
            let d = every(&mut self.rng, mean);
            if self.now + d < self.end_faults {
                self.after(d, ev);
            }
        }
    }

    fn run(&mut self) -> Check {
        self.full_mesh_target = self.full_mesh_pairs();
        for n in 0..self.sc.nodes {
            let d = uniform(&mut self.rng, (Duration::ZERO, self.sc.faults.join_spread));
            self.after(d, Ev::Join { n });
        }
        let f = self.sc.faults.clone();
        self.schedule_fault(f.socket_drop_every, Ev::SocketDrop);
        self.schedule_fault(f.peer_drop_every, Ev::PeerDrop);
        self.schedule_fault(f.relay_restart_every, Ev::RelayRestart);
        self.schedule_fault(f.sleep_every, Ev::Sleep);
        self.schedule_fault(f.crash_every, Ev::Crash);
        self.schedule_partition();
        for r in 0..self.relays.len() {
            self.refresh_relay(r);
        }
        let end = self.end_faults + self.sc.heal;
        // The live round goes out once the mesh has had most of the heal period to form.
        self.at(end - Duration::from_secs(10), Ev::SendLive);
        loop {
            let next_ev = self.queue.next_at();
            let next_node = self.timers.first().map(|k| k.0);
            let next_relay = self.relay_timers.first().map(|k| k.0);
            let Some(next) = [next_ev, next_node, next_relay].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.report.events += 1;
            if self.report.events > self.sc.max_events {
                return Err((
                    "event-limit",
                    format!("more than {} events", self.sc.max_events),
                ));
            }
            self.now = self.now.max(next);
            if next_ev == Some(next) {
                let (_, ev) = self.queue.pop().expect("an event is queued");
                // The node the next event most likely goes to is fetched while this one runs.
                if let Some(Ev::Node { n, .. } | Ev::NodeVia { n, .. }) = self.queue.peek_likely()
                    && let Some(slot) = self.nodes.get(*n)
                {
                    crate::prefetch::prefetch_all(slot);
                }
                self.event(ev)?;
            } else if next_node == Some(next) {
                let (_, n) = self.timers.pop_first().expect("a timer is set");
                let now = self.local(n);
                self.nodes[n].node.handle_timeout(now);
                if let Some(w) = self.drain_node(n)?.filter(|w| w.at <= now) {
                    return Err((
                        "deadline-advances",
                        format!("node {n}: {} at {}", w.reason, w.at),
                    ));
                }
            } else {
                let (_, r) = self.relay_timers.pop_first().expect("a relay timer is set");
                if let Some(server) = self.relays[r].server.as_mut() {
                    server.handle_timeout(self.now);
                }
                self.drain_relay(r);
                let stuck = self.relays[r]
                    .server
                    .as_ref()
                    .and_then(Machine::poll_timeout)
                    .filter(|w| w.at <= self.now);
                if let Some(w) = stuck {
                    return Err(("deadline-advances", format!("relay {r}: {}", w.reason)));
                }
            }
        }
        self.now = self.now.max(end);
        self.final_checks()
    }

    fn schedule_partition(&mut self) {
        if let Some(at) = self.links.next_partition(self.now, self.end_faults) {
            self.at(at, Ev::Partition);
        }
    }

    /// Drops from node `n`'s memory of passed signals those no node would take any more (§8:
    /// a signal whose `at` is more than `SIGNAL_WINDOW` from a node's clock is dropped as
    /// stale, and clocks are at most `max_skew` off), so that memory stays as small as the
    /// window however long the run.
    fn forget_stale_signals(&mut self, n: usize) {
        let horizon = SIGNAL_WINDOW + self.sc.faults.max_skew;
        let oldest = self
            .now
            .as_millis()
            .saturating_sub(horizon.as_millis() as u64);
        self.nodes[n].passed.forget_before(oldest);
    }

    /// A relay's place, as partitions see the network: nodes, then relays (the numbering
    /// [`partition_regions`] follows too).
    fn relay_place(&self, r: usize) -> usize {
        self.nodes.len() + r
    }

    fn separated(&self, a: usize, b: usize) -> bool {
        self.partition.as_ref().is_some_and(|p| p.separates(a, b))
    }

    /// Whether a message that crossed the network on `via` is delivered to place `to`: not when
    /// a partition cut its stream, or cut the way of a stream closed before it began (the
    /// message was on the way then); one reaching the other side of a partition on a stream
    /// still open is a violation.
    fn crossing(&mut self, via: Via, to: usize) -> Result<bool, (&'static str, String)> {
        if self.severed.contains(via.stream) {
            self.links.stats.partition_discarded += 1;
            return Ok(false);
        }
        if self.separated(via.from, to) {
            // A stream open across the cut when a partition starts is severed, and none opens
            // across it, so a stream closed by now was closed before: what it still carries was
            // sent before the partition and is lost in it.
            if !self.is_open(via.stream) {
                self.links.stats.partition_discarded += 1;
                return Ok(false);
            }
            return Err((
                "nothing-crosses-a-partition",
                format!(
                    "a message on {:?} from place {} reached place {to} across a partition",
                    via.stream, via.from
                ),
            ));
        }
        Ok(true)
    }

    fn is_open(&self, stream: Stream) -> bool {
        match stream {
            Stream::Socket(id) => self.sockets.get(id).is_some(),
            Stream::Link(id) => self.links_open.get(id).is_some(),
        }
    }

    /// Cuts a random part of the network off: every relay socket and peer connection across is
    /// dropped at once (as a transport's timeout would after a while) and what was on the way
    /// on it is lost; dials and new peer connections across fail until it heals.
    fn start_partition(&mut self) {
        let places = self.nodes.len() + self.relays.len();
        let p = self
            .links
            .partition(places, &self.partition_regions, self.now, self.end_faults);
        self.log("partition", || {
            let until = p.until.as_millis().saturating_sub(START.as_millis());
            json!({ "small": p.small_side(), "until": until })
        });
        self.at(p.until, Ev::PartitionHeal);
        self.partition = Some(p);
        let sockets = self
            .sockets
            .ids(|s| self.separated(s.node, self.relay_place(s.relay)));
        for id in sockets {
            self.links.stats.partition_cuts += 1;
            self.severed.insert(Stream::Socket(id));
            self.close_socket(id, true, true);
        }
        let links = self
            .links_open
            .ids(|l| self.separated(l.ends[0].0, l.ends[1].0));
        for id in links {
            self.links.stats.partition_cuts += 1;
            self.severed.insert(Stream::Link(id));
            self.close_link(id, None);
        }
    }

    fn event(&mut self, ev: Ev) -> Check {
        match ev {
            Ev::Node { n, life, input } => {
                if self.clocks[n].life == life {
                    self.give_node(n, input.into())?;
                } else {
                    self.report.lost_in_crashes += 1;
                }
            }
            Ev::NodeVia {
                n,
                life,
                input,
                via,
            } => {
                if self.clocks[n].life != life {
                    self.report.lost_in_crashes += 1;
                } else if self.crossing(via, n)? {
                    self.give_node(n, input.into())?;
                }
            }
            Ev::RelayVia {
                r,
                life,
                input,
                via,
            } => {
                if self.crossing(via, self.relay_place(r))?
                    && self.relays[r].life == life
                    && let Some(server) = self.relays[r].server.as_mut()
                {
                    server.handle(self.now, input);
                    self.drain_relay(r);
                }
            }
            Ev::Partition => {
                self.start_partition();
                self.schedule_partition();
            }
            Ev::PartitionHeal => {
                if self.partition.as_ref().is_some_and(|p| p.until <= self.now) {
                    self.partition = None;
                    self.log("partition-heal", || json!({}));
                }
            }
            Ev::Relay { r, life, input } => {
                if self.relays[r].life == life
                    && let Some(server) = self.relays[r].server.as_mut()
                {
                    server.handle(self.now, input);
                    self.drain_relay(r);
                }
            }
            Ev::Join { n } => {
                let space = space_id(self.nodes[n].space);
                let join = Join::space(crypto(), &space, RoomKind::PublicSpace, None);
                self.log("join", || json!({ "node": n }));
                self.give_node(n, node::Input::Join(join))?;
            }
            Ev::SocketDrop => {
                if !self.sockets.is_empty() {
                    let pick = self.rng.next_u64() as usize % self.sockets.len();
                    let id = self.sockets.ids(|_| true)[pick];
                    self.report.drops += 1;
                    self.log("socket-drop", || json!({ "socket": id }));
                    self.close_socket(id, true, true);
                }
                self.schedule_fault(self.sc.faults.socket_drop_every, Ev::SocketDrop);
            }
            Ev::PeerDrop => {
                if !self.links_open.is_empty() {
                    let pick = self.rng.next_u64() as usize % self.links_open.len();
                    let id = self.links_open.ids(|_| true)[pick];
                    self.report.drops += 1;
                    self.log("peer-drop", || json!({ "link": id }));
                    self.close_link(id, None);
                }
                self.schedule_fault(self.sc.faults.peer_drop_every, Ev::PeerDrop);
            }
            Ev::RelayRestart => {
                let r = self.rng.next_u64() as usize % self.relays.len();
                if self.relays[r].server.is_some() {
                    self.report.relay_restarts += 1;
                    self.log("relay-down", || json!({ "relay": r }));
                    self.relays[r].server = None;
                    self.relays[r].life += 1;
                    let ids = self.sockets.ids(|s| s.relay == r);
                    for id in ids {
                        self.close_socket(id, true, false);
                    }
                    self.refresh_relay(r);
                    let down = uniform(&mut self.rng, self.sc.faults.relay_down);
                    self.after(self.within_faults(down), Ev::RelayUp { r });
                }
                self.schedule_fault(self.sc.faults.relay_restart_every, Ev::RelayRestart);
            }
            Ev::RelayUp { r } => {
                self.log("relay-up", || json!({ "relay": r }));
                let life = u64::from(self.relays[r].life);
                self.relays[r].server = Some(RelayServer::new(
                    RelayConfig { turn: None },
                    crypto(),
                    stream(self.sc.seed, TAG_RELAY + r as u64 + 1_000 * life),
                ));
                self.refresh_relay(r);
            }
            Ev::Sleep => {
                let n = self.rng.next_u64() as usize % self.nodes.len();
                if !self.clocks[n].asleep && !self.clocks[n].down {
                    self.report.sleeps += 1;
                    let d = uniform(&mut self.rng, self.sc.faults.sleep);
                    let d = self.within_faults(d);
                    self.log("sleep", || json!({ "node": n, "ms": d.as_millis() as u64 }));
                    self.clocks[n].asleep = true;
                    self.timers.arm(n, None);
                    // A data channel does not outlive a long sleep: its peers see it fail.
                    if d > ICE_FAILURE {
                        let ids = self.links_open.ids(|l| l.ends.iter().any(|e| e.0 == n));
                        for id in ids {
                            self.close_link(id, None);
                        }
                    }
                    self.after(d, Ev::Wake { n });
                }
                self.schedule_fault(self.sc.faults.sleep_every, Ev::Sleep);
            }
            Ev::Wake { n } => {
                self.log("wake", || json!({ "node": n }));
                self.clocks[n].asleep = false;
                let held = std::mem::take(&mut self.nodes[n].held);
                for input in held {
                    self.give_node(n, input)?;
                }
                let now = self.local(n);
                self.nodes[n].node.handle_timeout(now);
                self.drain_node(n)?;
            }
            Ev::Crash => {
                let n = self.rng.next_u64() as usize % self.nodes.len();
                if !self.clocks[n].asleep && !self.clocks[n].down {
                    self.crash(n);
                }
                self.schedule_fault(self.sc.faults.crash_every, Ev::Crash);
            }
            Ev::Restart { n } => self.restart(n)?,
            Ev::SendLive => {
                for n in 0..self.nodes.len() {
                    let input = node::Input::Send {
                        room: self.rooms[self.nodes[n].space].clone(),
                        to: None,
                        kind: LIVE.into(),
                        payload: json!({ "from": n }),
                    };
                    self.give_node(n, input)?;
                }
            }
        }
        Ok(())
    }

    /// Node `n` crashes: its relay sockets reset (the relay sees them close), its peers see its
    /// connections fail, and everything it held is gone. Its next incarnation is made now and
    /// starts after a while ([`Net::restart`]); until then nothing reaches it.
    fn crash(&mut self, n: usize) {
        self.report.crashes += 1;
        let d = uniform(&mut self.rng, self.sc.faults.crash_down);
        let d = self.within_faults(d);
        self.log("crash", || json!({ "node": n, "ms": d.as_millis() as u64 }));
        for id in self.sockets.ids(|s| s.node == n) {
            self.close_socket(id, false, true);
        }
        for id in self.links_open.ids(|l| l.ends.iter().any(|e| e.0 == n)) {
            self.close_link(id, Some(n));
        }
        self.admitted_pairs -= self.nodes[n].admitted.len();
        let clock = &mut self.clocks[n];
        clock.down = true;
        clock.life += 1;
        let node = start_node(self.sc, n, clock.life);
        self.nodes[n] = NodeSlot::new(node, self.nodes[n].space);
        self.timers.arm(n, None);
        self.after(d, Ev::Restart { n });
    }

    /// Node `n` starts again and joins its space's room, as an app does on start.
    fn restart(&mut self, n: usize) -> Check {
        self.log("restart", || json!({ "node": n }));
        self.clocks[n].down = false;
        let space = space_id(self.nodes[n].space);
        let join = Join::space(crypto(), &space, RoomKind::PublicSpace, None);
        self.give_node(n, node::Input::Join(join))
    }

    fn give_node(&mut self, n: usize, input: node::Input) -> Check {
        if self.clocks[n].down {
            self.report.lost_in_crashes += 1;
            return Ok(());
        }
        if self.clocks[n].asleep {
            self.nodes[n].held.push(input);
            return Ok(());
        }
        if let node::Input::PeerClosed { conn } = input {
            // The description of a closed connection can answer nothing any more.
            self.nodes[n].conns.remove(conn);
        }
        let now = self.local(n);
        self.nodes[n].node.handle(now, input);
        self.drain_node(n)?;
        Ok(())
    }

    /// Files node `n`'s next wakeup, and answers it in the node's own time (`None` while it
    /// sleeps), so a caller that checks it need not ask the node again.
    fn refresh_node(&mut self, n: usize) -> Option<Wakeup> {
        let wakeup = if self.clocks[n].asleep {
            None
        } else {
            self.nodes[n].node.poll_timeout()
        };
        let next = wakeup.map(|w| {
            let ms = w.at.as_millis() as i64 - self.clocks[n].skew_ms;
            Timestamp::from_millis(ms.max(0) as u64).max(self.now)
        });
        self.timers.arm(n, next);
        wakeup
    }

    fn refresh_relay(&mut self, r: usize) {
        let next = self.relays[r]
            .server
            .as_ref()
            .and_then(Machine::poll_timeout)
            .map(|w| w.at.max(self.now));
        self.relay_timers.arm(r, next);
    }

    /// Hands node `n`'s outputs to the network and files its next wakeup, which it answers
    /// ([`Net::refresh_node`]).
    fn drain_node(&mut self, n: usize) -> Result<Option<Wakeup>, (&'static str, String)> {
        while let Some(out) = self.nodes[n].node.poll() {
            self.node_output(n, out)?;
        }
        Ok(self.refresh_node(n))
    }

    fn node_output(&mut self, n: usize, out: node::Output) -> Check {
        match out {
            node::Output::Dial { conn, url, .. } => {
                let r = self
                    .dial_needles
                    .iter()
                    .position(|needle| url.contains(needle.as_str()))
                    .expect("nodes dial only the scenario's relays");
                let latency = self.links.latency();
                if self.separated(n, self.relay_place(r)) {
                    // A dial across a partition times out; the node's own backoff paces it.
                    self.links.stats.partition_refusals += 1;
                    self.after(
                        latency * 2,
                        Ev::Node {
                            n,
                            life: self.clocks[n].life,
                            input: NodeInput::Conn {
                                conn,
                                what: ConnEvent::RelayDialFailed,
                            },
                        },
                    );
                    return Ok(());
                }
                let admitted = self.relays[r]
                    .server
                    .as_mut()
                    .map(|s| s.admit(self.now, node_addr(n)).is_ok());
                if admitted != Some(true) {
                    if admitted == Some(false) {
                        self.report.relay_refusals += 1;
                    }
                    self.after(
                        latency * 2,
                        Ev::Node {
                            n,
                            life: self.clocks[n].life,
                            input: NodeInput::Conn {
                                conn,
                                what: ConnEvent::RelayDialFailed,
                            },
                        },
                    );
                    return Ok(());
                }
                let id = self.next_socket;
                self.next_socket += 1;
                let relay_conn = ConnId(id);
                let life = self.relays[r].life;
                // The handshake: the relay learns of the socket one way later, the node one
                // more way after that, and each direction's messages follow its opening.
                let relay_opened = self.now + latency;
                let node_opened = relay_opened + self.links.latency();
                self.sockets.insert(
                    id,
                    Socket {
                        node: n,
                        node_conn: conn,
                        relay: r,
                        relay_conn,
                        life,
                        up: Direction::new(relay_opened),
                        down: Direction::new(node_opened),
                    },
                );
                self.nodes[n].sockets.insert(conn, id);
                let via = Via {
                    stream: Stream::Socket(id),
                    from: n,
                };
                self.at(
                    relay_opened,
                    Ev::RelayVia {
                        r,
                        life,
                        input: relay_server::Input::Opened {
                            conn: relay_conn,
                            addr: node_addr(n),
                        },
                        via,
                    },
                );
                let via = Via {
                    stream: Stream::Socket(id),
                    from: self.relay_place(r),
                };
                self.at(
                    node_opened,
                    Ev::NodeVia {
                        n,
                        life: self.clocks[n].life,
                        input: NodeInput::Conn {
                            conn,
                            what: ConnEvent::RelayOpened,
                        },
                        via,
                    },
                );
            }
            node::Output::RelaySend { conn, text } => {
                self.report.relay_messages += 1;
                if let Some(id) = self.nodes[n].sockets.get(conn)
                    && let Some(s) = self.sockets.get_mut(id)
                {
                    let at = self
                        .links
                        .send(&mut s.up, Kind::RelaySocket, self.now, text.len());
                    let (r, life, relay_conn) = (s.relay, s.life, s.relay_conn);
                    let via = Via {
                        stream: Stream::Socket(id),
                        from: n,
                    };
                    self.at(
                        at,
                        Ev::RelayVia {
                            r,
                            life,
                            input: relay_server::Input::Text {
                                conn: relay_conn,
                                text,
                            },
                            via,
                        },
                    );
                }
            }
            node::Output::RelayClose { conn } => {
                if let Some(id) = self.nodes[n].sockets.get(conn) {
                    self.close_socket(id, false, true);
                }
            }
            node::Output::CreateOffer { conn, .. } => {
                let life = self.clocks[n].life;
                let sdp = description(format_args!("offer {n} {life} {}", conn.0));
                self.nodes[n].conns.insert(conn);
                self.after(
                    Duration::from_millis(1),
                    Ev::Node {
                        n,
                        life: self.clocks[n].life,
                        input: NodeInput::LocalDescription { conn, sdp },
                    },
                );
            }
            node::Output::CreateAnswer { conn, offer, .. } => {
                let life = self.clocks[n].life;
                let sdp = description(format_args!("answer {n} {life} {} {offer}", conn.0));
                self.nodes[n].conns.insert(conn);
                self.after(
                    Duration::from_millis(1),
                    Ev::Node {
                        n,
                        life: self.clocks[n].life,
                        input: NodeInput::LocalDescription { conn, sdp },
                    },
                );
            }
            node::Output::ApplyAnswer { conn, answer } => self.apply_answer(n, conn, &answer)?,
            node::Output::PeerSend { conn, bytes } => self.peer_send(n, conn, bytes)?,
            node::Output::PeerClose { conn } => {
                self.nodes[n].conns.remove(conn);
                if let Some(id) = self.nodes[n].links.get(conn) {
                    self.close_link(id, Some(n));
                }
            }
            node::Output::Admitted { room, peer } => {
                let peer = self.numbers.of(&peer);
                if self.nodes[n].admitted.insert(room.as_str(), peer) {
                    self.admitted_pairs += 1;
                    self.check_full_mesh();
                }
            }
            node::Output::Departed { room, peer } => {
                let peer = self.numbers.of(&peer);
                if self.nodes[n].admitted.remove(room.as_str(), peer) {
                    self.admitted_pairs -= 1;
                }
                if self.now < self.end_faults {
                    self.report.full_mesh_at = None;
                }
            }
            node::Output::Deliver {
                room,
                peer,
                kind,
                payload,
            } => {
                let sender = self.numbers.of(&peer);
                if !self.nodes[n].admits(room.as_str(), sender) {
                    return Err((
                        "nothing-before-admission",
                        format!(
                            "node {n} was handed {kind} in {room} from {peer}, not admitted there"
                        ),
                    ));
                }
                if kind == LIVE {
                    let claimed = payload.get("from").and_then(Value::as_u64);
                    if claimed != Some(u64::from(sender)) {
                        return Err((
                            "live-attributed",
                            format!("node {n} got live {payload} attributed to {peer}"),
                        ));
                    }
                    self.report.live_delivered += 1;
                    self.nodes[n].live_from.insert(sender);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn apply_answer(&mut self, n: usize, conn: ConnId, answer: &str) -> Check {
        // "answer {m} {life_m} {conn_m} offer {n} {life_n} {conn_n}": a restarted node numbers
        // its connections from the start again, so a description names its incarnation too.
        let mut words = answer.split(' ');
        let mut next = || words.next();
        let (Some(_), Some(m), Some(lm), Some(cm), Some(_), Some(on), Some(ln), Some(oc), None) = (
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
        ) else {
            return Ok(());
        };
        let (Ok(m), Ok(lm), Ok(cm), Ok(on), Ok(ln), Ok(oc)) = (
            m.parse::<usize>(),
            lm.parse::<u32>(),
            cm.parse::<u64>(),
            on.parse::<usize>(),
            ln.parse::<u32>(),
            oc.parse::<u64>(),
        ) else {
            return Ok(());
        };
        let cm = ConnId(cm);
        // The answer must be to this very offer, and its maker (the incarnation that made it)
        // must still hold the connection.
        if on != n
            || ln != self.clocks[n].life
            || oc != conn.0
            || lm != self.clocks[m].life
            || !self.nodes[m].conns.contains(cm)
        {
            return Ok(());
        }
        if !self.nodes[n].conns.contains(conn) {
            return Ok(());
        }
        if self.separated(n, m) {
            // ICE finds no path across a partition: both ends see the connection fail.
            self.links.stats.partition_refusals += 1;
            for (a, ca) in [(n, conn), (m, cm)] {
                self.after(
                    ICE_FAILURE,
                    Ev::Node {
                        n: a,
                        life: self.clocks[a].life,
                        input: NodeInput::Conn {
                            conn: ca,
                            what: ConnEvent::PeerClosed,
                        },
                    },
                );
            }
            return Ok(());
        }
        let open = self.pair_links.entry((n.min(m), n.max(m))).or_default();
        *open += 1;
        if *open > 1 {
            return Err((
                "one-connection-per-pair",
                format!("nodes {n} and {m} open a second connection"),
            ));
        }
        let id = self.next_link;
        self.next_link += 1;
        let latency = self.links.latency();
        let opened = self.now + latency;
        self.links_open.insert(
            id,
            Link {
                ends: [(n, conn), (m, cm)],
                dirs: [Direction::new(opened), Direction::new(opened)],
            },
        );
        self.nodes[n].links.insert(conn, id);
        self.nodes[m].links.insert(cm, id);
        self.report.peer_connections += 1;
        self.log("peer-open", || json!({ "a": n, "b": m }));
        for (a, ca, b) in [(n, conn, m), (m, cm, n)] {
            let via = Via {
                stream: Stream::Link(id),
                from: b,
            };
            self.at(
                opened,
                Ev::NodeVia {
                    n: a,
                    life: self.clocks[a].life,
                    input: NodeInput::peer_opened(ca, a, b),
                    via,
                },
            );
        }
        Ok(())
    }

    fn peer_send(&mut self, n: usize, conn: ConnId, bytes: Bytes) -> Check {
        let Some(id) = self.nodes[n].links.get(conn) else {
            return Ok(());
        };
        // The link's slot is cold at 10 000 nodes: it comes in while the frame is read. A
        // connection the node holds is always an open link (both are dropped together), so
        // reading first checks no frame that was not checked before.
        self.links_open.prefetch(id);
        let frame = self.last_sent.read(&bytes, &mut self.numbers);
        let Some(link) = self.links_open.get(id) else {
            return Ok(());
        };
        let to = usize::from(link.ends[0].0 == n);
        let (m, cm) = link.ends[to];
        if let Some(frame) = frame {
            if !frame.handshake && !self.nodes[n].admits(&frame.room, m as u32) {
                return Err((
                    "nothing-before-admission",
                    format!(
                        "node {n} sent {} in {} to node {m} before admitting it",
                        frame.kind, frame.room
                    ),
                ));
            }
            if frame.signal {
                self.report.signals += 1;
                let (origin, target, at) = (frame.origin_number, frame.target_number, frame.at);
                if !self.nodes[n].passed.insert(at, origin, target, m as u32) {
                    return Err((
                        "introductions-never-loop",
                        format!(
                            "node {n} passed the signal (origin {}, target {}, at {at}) on to node {m} twice",
                            frame.origin, frame.target
                        ),
                    ));
                }
                self.forget_stale_signals(n);
            }
        }
        let Some(link) = self.links_open.get_mut(id) else {
            return Ok(());
        };
        let at = self
            .links
            .send(&mut link.dirs[to], Kind::DataChannel, self.now, bytes.len());
        let via = Via {
            stream: Stream::Link(id),
            from: n,
        };
        self.at(
            at,
            Ev::NodeVia {
                n: m,
                life: self.clocks[m].life,
                input: NodeInput::PeerFrame { conn: cm, bytes },
                via,
            },
        );
        Ok(())
    }

    /// Closes a relay socket: the relay is told unless it is gone, and the node unless it
    /// closed the socket itself.
    fn close_socket(&mut self, id: u64, tell_node: bool, tell_relay: bool) {
        let Some(mut s) = self.sockets.remove(id) else {
            return;
        };
        self.nodes[s.node].sockets.remove(s.node_conn);
        // Each end learns after what was already on the way to it.
        if tell_relay {
            let at = s.up.behind(self.now + self.links.latency());
            self.at(
                at,
                Ev::Relay {
                    r: s.relay,
                    life: s.life,
                    input: relay_server::Input::Closed { conn: s.relay_conn },
                },
            );
        }
        if tell_node {
            let at = s.down.behind(self.now + self.links.latency());
            self.at(
                at,
                Ev::Node {
                    n: s.node,
                    life: self.clocks[s.node].life,
                    input: NodeInput::Conn {
                        conn: s.node_conn,
                        what: ConnEvent::RelayClosed,
                    },
                },
            );
        }
    }

    /// Closes a peer connection; every end but `closer` (which closed it itself) is told.
    fn close_link(&mut self, id: u64, closer: Option<usize>) {
        let Some(mut link) = self.links_open.remove(id) else {
            return;
        };
        let (a, b) = (link.ends[0].0, link.ends[1].0);
        if let Some(open) = self.pair_links.get_mut(&(a.min(b), a.max(b))) {
            *open -= 1;
        }
        for (end, (n, conn)) in link.ends.into_iter().enumerate() {
            self.nodes[n].links.remove(conn);
            if Some(n) != closer {
                let at = link.dirs[end].behind(self.now + self.links.latency());
                self.at(
                    at,
                    Ev::Node {
                        n,
                        life: self.clocks[n].life,
                        input: NodeInput::Conn {
                            conn,
                            what: ConnEvent::PeerClosed,
                        },
                    },
                );
            }
        }
    }

    /// The open socket relay `r` knows as `conn`, if any. A dial gives the relay the socket's
    /// id as its connection id, so this is an indexed load: every frame a relay sends looks
    /// its socket up, and a hashed table of them cost a cache miss a frame at 10 000 nodes.
    fn relay_socket(&self, r: usize, conn: ConnId) -> Option<u64> {
        let s = self.sockets.get(conn.0)?;
        (s.relay == r && s.relay_conn == conn).then_some(conn.0)
    }

    fn drain_relay(&mut self, r: usize) {
        while let Some(out) = self.relays[r].server.as_mut().and_then(Machine::poll) {
            let (conn, what) = match out {
                relay_server::Output::Send { conn, text } => (conn, Some(text)),
                relay_server::Output::Close { conn, .. } => (conn, None),
                relay_server::Output::Ping { conn } => {
                    // The node's WebSocket answers pings by itself, unless it sleeps.
                    if let Some(id) = self.relay_socket(r, conn)
                        && let Some(s) = self.sockets.get_mut(id)
                        && !self.clocks[s.node].asleep
                    {
                        // The ping goes down behind the mail, the pong up behind the node's
                        // own messages.
                        let ping =
                            self.links
                                .send(&mut s.down, Kind::RelaySocket, self.now, PING_BYTES);
                        let back = self.links.latency();
                        let at = s.up.behind(ping + back);
                        let via = Via {
                            stream: Stream::Socket(id),
                            from: s.node,
                        };
                        let life = s.life;
                        self.at(
                            at,
                            Ev::RelayVia {
                                r,
                                life,
                                input: relay_server::Input::Control { conn },
                                via,
                            },
                        );
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(id) = self.relay_socket(r, conn) else {
                continue;
            };
            match what {
                Some(text) => {
                    // A relay may hand over the same mail twice (§3: a copy is a replay the
                    // rendezvous ignores); anything else it says once.
                    let copy = (text.starts_with(MAIL_PREFIX) && self.links.duplicate())
                        .then(|| text.clone());
                    let via = Via {
                        stream: Stream::Socket(id),
                        from: self.relay_place(r),
                    };
                    for text in std::iter::once(text).chain(copy) {
                        let Some(s) = self.sockets.get_mut(id) else {
                            break;
                        };
                        let at =
                            self.links
                                .send(&mut s.down, Kind::RelaySocket, self.now, text.len());
                        let (n, node_conn) = (s.node, s.node_conn);
                        self.at(
                            at,
                            Ev::NodeVia {
                                n,
                                life: self.clocks[n].life,
                                input: NodeInput::RelayText {
                                    conn: node_conn,
                                    text,
                                },
                                via,
                            },
                        );
                    }
                }
                None => self.close_socket(id, true, false),
            }
        }
        self.refresh_relay(r);
    }

    /// How many peers node `n` has in a full mesh of its space.
    fn full_mesh_peers(&self, n: usize) -> usize {
        let size = self.sc.space_size(self.nodes[n].space);
        (size - 1).min(MAX_ROOM_PEERS)
    }

    /// The number of (node, peer) admissions a full mesh has.
    fn full_mesh_pairs(&self) -> usize {
        (0..self.nodes.len()).map(|n| self.full_mesh_peers(n)).sum()
    }

    fn check_full_mesh(&mut self) {
        if self.admitted_pairs == self.full_mesh_target && self.report.full_mesh_at.is_none() {
            self.report.full_mesh_at = Some(self.now.saturating_duration_since(START));
            let pairs = self.admitted_pairs;
            self.log("full-mesh", || json!({ "pairs": pairs }));
        }
    }

    fn final_checks(&mut self) -> Check {
        for n in 0..self.nodes.len() {
            let limit = self.full_mesh_peers(n);
            let room = self.rooms[self.nodes[n].space].as_str();
            let admitted = self.nodes[n].node.mesh().admitted(room).len();
            if admitted < limit {
                return Err((
                    "full-mesh-after-heal",
                    format!("node {n} admitted {admitted} of {limit} peers"),
                ));
            }
            let heard = self.nodes[n].live_from.len();
            if heard < limit {
                return Err((
                    "live-attributed",
                    format!("node {n} heard live messages from {heard} of {limit} peers"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
impl Scenario {
    /// `nodes` in one space meeting through one relay on a network that only delays: no socket,
    /// connection or node goes down and nobody sleeps.
    fn quiet(nodes: usize, seed: u64) -> Self {
        Self {
            nodes,
            relays: 1,
            duration: Duration::from_secs(1),
            heal: Duration::from_secs(60),
            faults: Faults {
                socket_drop_every: None,
                peer_drop_every: None,
                relay_restart_every: None,
                sleep_every: None,
                crash_every: None,
                ..Faults::default()
            },
            ..Scenario::new(seed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_nodes_meet_through_one_relay_without_faults() {
        let sc = Scenario::quiet(2, 1);
        let r = run(&sc, None).unwrap_or_else(|v| panic!("{v}\n{}", v.report));
        assert_eq!(r.live_delivered, 2);
        assert!(r.full_mesh_at.is_some());
        assert_eq!(r.peer_connections, 1);
    }

    #[test]
    fn a_space_holds_at_most_a_full_room_and_the_node_itself() {
        let shaped = |nodes, spaces, relays| Scenario {
            nodes,
            spaces,
            relays,
            ..Scenario::new(0)
        };
        assert_eq!(shaped(65, 1, 2).shape_error(), None);
        assert_eq!(shaped(10_000, 834, 2).shape_error(), None);
        let why = shaped(66, 1, 2)
            .shape_error()
            .expect("66 nodes in one room");
        assert!(why.contains("at most 65 nodes a space"), "{why}");
        assert!(shaped(10_000, 100, 2).shape_error().is_some());
        assert!(shaped(3, 2, 2).shape_error().is_some());
        assert!(shaped(8, 1, 0).shape_error().is_some());
        // The library refuses such a shape before it runs, as the command line does.
        let refused = run(&shaped(70, 1, 2), None).expect_err("70 nodes in one room");
        assert_eq!(refused.invariant, "scenario-shape");
        assert_eq!((refused.at, refused.report.nodes), (Duration::ZERO, 70));
    }

    #[test]
    fn no_relay_is_asked_to_hold_more_sockets_than_a_relay_takes() {
        let shaped = |nodes, spaces, relays| Scenario {
            nodes,
            spaces,
            relays,
            ..Scenario::new(0)
        };
        // Up to RELAYS_PER_SPACE relays, every space meets on all of them, as before.
        let two = shaped(8, 1, 2);
        assert_eq!(two.relays_of(0).collect::<Vec<_>>(), [0, 1]);
        // Past it, each space on two consecutive relays, dealt round-robin: every relay serves
        // as many spaces as the next.
        let seven = shaped(30_000, 2_500, 7);
        assert_eq!(seven.relays_of(0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(seven.relays_of(4).collect::<Vec<_>>(), [1, 2]);
        let mut served = [0usize; 7];
        for space in 0..2_500 {
            for r in seven.relays_of(space) {
                served[r] += 1;
            }
        }
        assert!(
            served.iter().all(|&n| n.abs_diff(served[0]) <= 1),
            "{served:?}"
        );
        assert_eq!(seven.busiest_relay(), 715 * 12);
        assert_eq!(seven.shape_error(), None);
        // Six relays would each hold 834 spaces of 12 (10 008 sockets); every node on every
        // relay, 30 000 each. Refused before it runs, as is one relay fewer than a network of
        // 100 000 needs.
        let why = shaped(30_000, 2_500, 6)
            .shape_error()
            .expect("30 000 nodes on 6 relays");
        assert!(why.contains("a relay would hold 10008 sockets"), "{why}");
        assert!(why.contains("give more --relays"), "{why}");
        assert!(shaped(100_000, 8_334, 20).shape_error().is_some());
        assert_eq!(shaped(100_000, 8_334, 21).shape_error(), None);
        assert!(shaped(10_001, 834, 1).shape_error().is_some());
    }

    #[test]
    fn a_spaces_size_is_the_count_of_the_nodes_dealt_to_it() {
        for (nodes, spaces) in [(10_000, 834), (13, 4), (12, 12), (7, 1), (5, 0)] {
            let sc = Scenario {
                nodes,
                spaces,
                ..Scenario::new(0)
            };
            for space in 0..spaces.max(1) {
                let dealt = (0..nodes).filter(|&n| sc.space_of(n) == space).count();
                assert_eq!(
                    sc.space_size(space),
                    dealt,
                    "{nodes} nodes, {spaces} spaces"
                );
            }
        }
    }

    #[test]
    fn the_event_budget_grows_with_the_cube_of_a_space_past_twelve() {
        let shaped = |nodes, spaces| {
            Scenario {
                nodes,
                spaces,
                ..Scenario::new(0)
            }
            .with_event_budget()
            .max_events
        };
        // Six minutes: 180 s of faults and 180 s of quiet.
        assert_eq!(shaped(10_000, 834), 10_000 * 6 * EVENTS_PER_NODE_MINUTE);
        assert_eq!(shaped(8, 1), 5_000_000);
        // One room of 64 took up to 16.6 M events (seed 22 002): well inside, as 5 M was not.
        assert_eq!(shaped(64, 1), 64 * 6 * 152 * EVENTS_PER_NODE_MINUTE);
        assert!(shaped(64, 1) > 3 * 16_600_000);
    }

    /// Every queued event takes a slot of the largest event's size, so the rare large node
    /// inputs wait boxed ([`NodeInput`]). The largest kept unboxed is a peer's frame on its
    /// way, whose shared buffer (`Bytes`, four words) made it 88 bytes, not 80.
    #[test]
    fn queued_events_stay_small() {
        let size = std::mem::size_of::<Ev>();
        assert!(size <= 88, "an event takes {size} bytes");
    }

    /// A message still on its way when a partition starts is lost in it if its stream had
    /// closed before (a relay that crashed had sent it): counted as discarded, as on a stream
    /// the partition severed. On a stream open across the cut it is the simulator's own error.
    #[test]
    fn a_message_on_its_way_on_a_closed_stream_is_lost_in_a_partition() {
        let sc = Scenario::small(0);
        let mut net = Net::new(&sc, None);
        let relay = net.relay_place(1);
        let places = relay + 1;
        net.partition = Some(Partition::cutting(places, &[relay], START + sc.duration));
        let closed = Via {
            stream: Stream::Socket(7),
            from: relay,
        };
        assert_eq!(net.crossing(closed, 0), Ok(false));
        assert_eq!(net.links.stats.partition_discarded, 1);
        // The same side of the cut: delivered.
        assert_eq!(net.crossing(closed, relay), Ok(true));
        net.sockets.insert(
            8,
            Socket {
                node: 0,
                node_conn: ConnId(0),
                relay: 1,
                relay_conn: ConnId(0),
                life: 0,
                up: Direction::new(START),
                down: Direction::new(START),
            },
        );
        let open = Via {
            stream: Stream::Socket(8),
            from: relay,
        };
        let violation = net
            .crossing(open, 0)
            .expect_err("an open stream across the cut");
        assert_eq!(violation.0, "nothing-crosses-a-partition");
        assert_eq!(net.links.stats.partition_discarded, 1);
    }

    /// A sleep or a relay's downtime drawn to outlast the faulty phase ends with it, so the quiet
    /// phase the full-mesh invariant allows is quiet from its start.
    #[test]
    fn a_fault_ends_with_the_faulty_phase() {
        let sc = Scenario::small(0);
        let mut net = Net::new(&sc, None);
        let end = START + sc.duration;
        net.now = end - Duration::from_secs(30);
        assert_eq!(
            net.within_faults(Duration::from_secs(90)),
            Duration::from_secs(30)
        );
        assert_eq!(
            net.within_faults(Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        net.now = end;
        assert_eq!(net.within_faults(Duration::from_secs(5)), Duration::ZERO);
    }

    /// The loop check forgets a passed signal only once no node could take it again: any node's
    /// clock is at most `max_skew` off, and §8 drops a signal more than `SIGNAL_WINDOW` from it.
    #[test]
    fn passed_signals_are_forgotten_only_past_the_window_and_the_largest_skew() {
        let sc = Scenario::small(0);
        let mut net = Net::new(&sc, None);
        net.now = START + Duration::from_secs(600);
        let now = net.now.as_millis();
        let oldest = now - (SIGNAL_WINDOW + sc.faults.max_skew).as_millis() as u64;
        for at in [oldest - 1, oldest, now - 1_000, now] {
            net.nodes[0].passed.insert(at, 2, 3, 1);
        }
        net.forget_stale_signals(0);
        let kept: Vec<u64> = net.nodes[0].passed.ats().collect();
        assert_eq!(kept, [oldest, now - 1_000, now]);
        // The oldest kept is one a node whose clock runs `max_skew` behind still takes.
        let slowest_clock = now - sc.faults.max_skew.as_millis() as u64;
        assert!(slowest_clock - oldest <= SIGNAL_WINDOW.as_millis() as u64);
    }
}
