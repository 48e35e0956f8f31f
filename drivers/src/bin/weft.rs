//! The `weft` program: relay, realm server, node, simulator and demo over the weft-proto machines.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use weft_drivers::airc::client::{Client, Target, command, message_id, new_message};
use weft_drivers::airc::config::{FileConfig, Flags, serve_config};
use weft_drivers::airc::serve::serve;
use weft_proto::airc::frame::{LinkRequest, PassportRequest};

// The program's allocator, not the library's: an embedder keeps its own (docs/decisions.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weft: relay, rendezvous and mesh networking as sans-IO state machines.
#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "weft: relay, rendezvous and mesh networking as sans-IO state machines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of the largest variant (`airc serve`'s flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a Minca relay server (Minca 04 Network §1.4).
    Relay(RelayArgs),
    /// Run an AIRC realm server, or act as an AIRC client (AIRC draft 0.2).
    #[command(subcommand)]
    Airc(Airc),
    /// Run a Minca node: join spaces through relays, meet and prove peers over WebRTC, reach
    /// always-on nodes over the node WebSocket, and chat (Minca 04 Network §2–§9). Prints one JSON line per event on stdout: first `ready` (with
    /// this node's session `did` and `account`), then `admitted` / `departed` / `account` per peer
    /// and space, and `live` for each live message (with the sender's session DID in `from`, its
    /// `account`, and the `payload`). Each line typed on stdin is sent as a live message to every
    /// admitted peer of every space: as the JSON value it is, or else as a string.
    Node(NodeArgs),
    /// Run a simulator scenario in virtual time.
    #[command(subcommand)]
    Sim(Sim),
    /// Nostr: run a relay (NIP-01, 09, 11, 40, 42, 45, 62, 77).
    #[command(subcommand)]
    Nostr(Nostr),
    /// meshstr: offline checks of keys, DID documents, digests and artefacts (meshstr/0-draft).
    #[command(subcommand)]
    Meshstr(weft_drivers::meshstr::Command),
    /// NAP-MESH: serve the circle shell (`weft circle serve`) and talk to its control face.
    #[command(subcommand)]
    Circle(weft_drivers::circle::cli::Circle),
    /// Start everything locally on embedded defaults and show it working.
    Demo,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("reach").required(true).multiple(true).args(["relays", "nodes"])))]
struct NodeArgs {
    /// A space to join (its id); repeat for several.
    #[arg(long = "space", required = true, value_name = "ID")]
    spaces: Vec<String>,
    /// A relay to meet peers through (`ws://`, `wss://`, `nostr+ws(s)://`); repeat for several.
    /// At least one --relay or --node.
    #[arg(long = "relay", value_name = "URL")]
    relays: Vec<String>,
    /// An always-on node to reach over the node WebSocket for every space (§5.2): `wss://`, or
    /// `ws://` only to loopback, e.g. `ws://127.0.0.1:7000/peer`; a `#did:key:…` fragment pins
    /// the node's DID. Repeat for several (at most 8). A socket that ends, or a dial that fails, is
    /// dialled again with backoff (1 s doubling to 30 s), unless this node refused the other for
    /// good (a failed pin or a protocol error, 4002; no read key to prove, 4003). Its peer shows up as `admitted` like a WebRTC peer.
    #[arg(long = "node", value_name = "URL")]
    nodes: Vec<String>,
    /// The account root key: a file holding one P-256 secret as 64 hex digits, made (owner-only)
    /// if it does not exist. Default: a fresh account for this run.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Where the WebRTC UDP socket binds: an interface address, never a wildcard (it is the
    /// address peers are told to reach). Use this machine's LAN address to meet peers elsewhere.
    #[arg(long, value_name = "ADDR", default_value = weft_drivers::minca::node_runner::DEFAULT_BIND)]
    bind: std::net::SocketAddr,
}

#[derive(Subcommand, Debug)]
enum Nostr {
    /// Serve a Nostr relay over WebSocket, its events in an embedded store under --data-dir
    /// (or in PostgreSQL with --database); NIP-11 at `GET /` with `Accept: application/nostr+json`.
    Serve(NostrServeArgs),
    /// Print the relay's self pubkey (hex and npub), from `RELAY_PRIVATE_KEY` or `SECRET` in the
    /// environment and the settings file, as `serve` would advertise it; never the private key.
    Info(NostrInfoArgs),
    /// Print a running relay's per-peer status (`GET /admin/peering`) as a table; the admin token
    /// comes from --config's `admin.token`, else `WEFT_ADMIN_TOKEN`.
    Peering(NostrPeeringArgs),
}

#[derive(Args, Debug)]
struct NostrInfoArgs {
    /// The address `serve` listens on (the default relay URL, when neither --relay-url nor
    /// `info.relay_url` names one, is derived from it).
    #[arg(long, default_value = weft_drivers::nostr::serve::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    /// The relay's URL, as `serve --relay-url`.
    #[arg(long, value_name = "URL")]
    relay_url: Option<String>,
    /// nostream's `settings.yaml`, as `serve --config`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct NostrPeeringArgs {
    /// The relay, `http://host:port` (or `ws://host:port`).
    #[arg(long, default_value = "http://127.0.0.1:7777")]
    relay: String,
    /// The settings file holding `admin.token`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct NostrServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = weft_drivers::nostr::serve::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    /// The data directory (made owner-only; refused when others may read it).
    #[arg(long, default_value = weft_drivers::nostr::serve::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Keep events in this PostgreSQL database instead of the embedded store under --data-dir
    /// (`postgres://user:password@host:port/dbname`, or PostgreSQL's `key=value` form); its
    /// tables are made on first start. Several processes given one database serve one relay:
    /// an event stored through one reaches live subscriptions on all. No TLS to the database:
    /// reach it over loopback, a Unix socket (`host=/run/postgresql`) or a private network.
    #[arg(
        long,
        value_name = "URL",
        env = "WEFT_NOSTR_DATABASE",
        hide_env_values = true
    )]
    database: Option<String>,
    /// This relay's URL as clients name it in NIP-42 and NIP-62 `relay` tags; default
    /// `ws://<listen address>` (`wss://` with --tls-cert). Set it when clients reach the relay
    /// by a name, through a proxy, or when listening on 0.0.0.0: AUTH naming another host fails.
    #[arg(long, value_name = "URL")]
    relay_url: Option<String>,
    /// Who must authenticate (NIP-42): `optional`, `writes` (publishing) or `all` (publishing,
    /// REQ and COUNT).
    #[arg(long, default_value = "optional", value_parser = ["optional", "writes", "all"])]
    auth: String,
    /// nostream's `settings.yaml`: the `info.*`, `network.maxPayloadSize` and `limits.*` keys
    /// weft has a meaning for are read, every other key left alone; --relay-url wins over
    /// `info.relay_url`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve wss:// with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key for --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Airc {
    /// Serve a realm: the client face on a Unix socket, durable state under --data-dir.
    Serve(ServeArgs),
    /// Send one message and print its ack as JSON. Exits 0 when it is delivered or queued, 1 when
    /// it is failed (the code and reason on stderr), 3 when the server cannot be reached.
    Send {
        /// The destination: `name` (under your first namespace), or `//realm/ns/name`.
        to: String,
        /// The text.
        body: String,
        /// The sending endpoint, inside your namespaces: `name` (under your first namespace), or
        /// `//realm/ns/name` (default `cli`).
        #[arg(long = "as", default_value = "cli")]
        from: String,
        /// Seconds the message may wait before it expires (default 86 400).
        #[arg(long)]
        ttl: Option<u64>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Bind names and print each message as a JSON line, acking it delivered. A message from
    /// another namespace or realm has `"foreign":true`, a `sender` no local peer can have, and a
    /// `text` that starts with a warning banner line (AIRC §16.4); read `text`, not `body`.
    Listen {
        /// Names to bind, inside your namespaces: `ns/name`, `ns/`, `ns/*`.
        #[arg(required = true)]
        names: Vec<String>,
        /// Exit after this many messages (default: never).
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Manage links (AIRC §11): standing permissions between two endpoints. Prints the server's
    /// `linked` answer as JSON; exits 1 when it refuses, or when the other side could not be told.
    #[command(subcommand)]
    Link(LinkCmd),
    /// Manage passports (AIRC §12): bearer invitations that open a link when redeemed. Prints the
    /// server's `passported` answer as JSON (for `new`, its `line` is the passport to hand over);
    /// exits 1 when it refuses.
    #[command(subcommand)]
    Passport(PassportCmd),
    /// Print the realm's audit events (AIRC §13) as JSON lines until interrupted. You see the
    /// events of your namespaces; an administrator sees all. The `subscribed` answer goes to
    /// stderr; a connection with no namespace that is no administrator's is refused (forbidden).
    Subscribe {
        /// Kinds or prefixes to see (`msg`, `link.offer`, `passport`, `peer`); default: all.
        kinds: Vec<String>,
        /// Exit after this many events (default: never).
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Print the server's counters (AIRC §4.10) as JSON.
    Stat {
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Subcommand, Debug)]
enum LinkCmd {
    /// Offer a link from an endpoint of yours to PEER; it opens when PEER accepts.
    Offer {
        /// The other endpoint: `ns/name` in this realm, or `//realm/ns/name`.
        peer: String,
        #[command(flatten)]
        link: LinkArgs,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Accept an offer made to your endpoint.
    Accept(LinkIdArgs),
    /// Decline an offer made to your endpoint.
    Decline(LinkIdArgs),
    /// Revoke a link your endpoint is a party to.
    Revoke(LinkIdArgs),
    /// Grant PEER an active link to your endpoint at once, without an offer.
    Grant {
        /// The endpoint granted the link.
        peer: String,
        #[command(flatten)]
        link: LinkArgs,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List links: those of one endpoint with --as, else those of all your namespaces.
    List {
        /// The endpoint whose links to list.
        #[arg(long = "as")]
        acting: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Args, Debug)]
struct LinkArgs {
    /// Your endpoint that acts, inside your namespaces (`ns/name`).
    #[arg(long = "as")]
    acting: String,
    /// A label shown to the other side.
    #[arg(long)]
    label: Option<String>,
    /// Who may start a conversation: `both`, `a-initiates` (you) or `b-initiates` (the peer).
    #[arg(long)]
    direction: Option<String>,
}

#[derive(Args, Debug)]
struct LinkIdArgs {
    /// The link id (`L` and 8 hex digits).
    id: String,
    /// Your endpoint that acts, inside your namespaces (`ns/name`).
    #[arg(long = "as")]
    acting: String,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Subcommand, Debug)]
enum PassportCmd {
    /// Issue a passport for your endpoint: the token is shown once, in `line`, `file` and `url`.
    New {
        /// The endpoint the passport opens a link to, inside your namespaces (`ns/name`).
        #[arg(long = "as")]
        acting: String,
        /// A label shown with it.
        #[arg(long)]
        label: Option<String>,
        /// Only redeemers matching this pattern may use it (e.g. `//partner.example/**`).
        #[arg(long)]
        to: Option<String>,
        /// How many times it may be redeemed (default 1, at most 100).
        #[arg(long)]
        uses: Option<u64>,
        /// Seconds it stays valid (default 7 days, at most 90).
        #[arg(long)]
        ttl: Option<u64>,
        /// The links it opens: `both`, `a-initiates` or `b-initiates`.
        #[arg(long)]
        direction: Option<String>,
        /// Seconds each link it opens lasts (default 30 days).
        #[arg(long)]
        link_ttl: Option<u64>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List passports: those of one endpoint with --as, else those of your namespaces (all of
    /// them for an administrator).
    List {
        /// The endpoint whose passports to list.
        #[arg(long = "as")]
        acting: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Redeem a passport (its line, URL or file contents) for your endpoint; on success the
    /// answer carries the link it opened.
    Redeem {
        /// The passport: `airc-passport:1;i=…;t=…`, its URL, or its JSON file's contents.
        passport: String,
        /// Your endpoint that redeems it (`ns/name`).
        #[arg(long = "as")]
        acting: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Revoke a passport (`P` and 8 hex digits) so it can no longer be redeemed.
    Revoke {
        /// The passport id.
        id: String,
        /// The endpoint it was issued for, or by (an administrator may omit it).
        #[arg(long = "as")]
        acting: Option<String>,
        /// Also revoke every pending or active link it opened.
        #[arg(long)]
        and_links: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Subcommand, Debug)]
enum Sim {
    /// AIRC realm servers and clients under link drops, crashes, restarts, stalled acks, lossy
    /// and bandwidth-limited links and partitions that heal; exits non-zero with the seed and
    /// the first invariant a run violated.
    AircRealms(AircRealmsArgs),
    /// Minca nodes in one space meeting through relays that restart (and now and then deliver
    /// mail twice), over sockets and peer connections that drop, lossy and bandwidth-limited
    /// links and partitions that heal, with nodes that sleep; exits non-zero with the seed and
    /// the first invariant a run violated.
    MincaMeetup(MincaMeetupArgs),
    /// NAP-MESH shells on a random circle with strangers on the transport, under partitions,
    /// crashes and loss; exits non-zero with the seed and the first invariant a run violated.
    Circle(weft_drivers::circle::cli::SimCircleArgs),
    /// Nostr relays peered by trust lists, syncing each other's advertised scopes (spec 002 §6)
    /// under dropped sockets, partitions, crashes, limiter outages, corrupted events and replayed
    /// AUTH; checks that nothing forged, out of scope or ephemeral is ever stored, that peer
    /// treatment and the request budget hold, and that, once healed, each relay holds exactly
    /// its own events and its peers' in-scope ones. Exits non-zero with the seed and the first
    /// invariant a run violated.
    RelayPeering(RelayPeeringArgs),
}

#[derive(Args, Debug)]
struct RelayPeeringArgs {
    /// Relays.
    #[arg(long, default_value_t = 4)]
    relays: usize,
    /// Events published in all.
    #[arg(long, default_value_t = 30)]
    events: usize,
    /// Partitions in the fault period.
    #[arg(long, default_value_t = 3)]
    partitions: usize,
    /// Crashes in the fault period.
    #[arg(long, default_value_t = 2)]
    crashes: usize,
    /// Single worker sockets dropped in the fault period.
    #[arg(long, default_value_t = 3)]
    drops: usize,
    /// Outages of a relay's request limiter in the fault period.
    #[arg(long, default_value_t = 1)]
    limiter_outages: usize,
    /// `AUTH` frames an impostor replays in the fault period.
    #[arg(long, default_value_t = 2)]
    replays: usize,
    /// Per mille of the events a relay serves a worker in the fault period that arrive
    /// corrupted.
    #[arg(long, default_value_t = 50)]
    corrupt_permille: u32,
    /// On-demand requests each relay serves a peer per minute (`limits.peer.request`).
    #[arg(long, default_value_t = 12)]
    budget: u32,
    /// Virtual seconds of faults, before everything heals and settles.
    #[arg(long, default_value_t = 1800)]
    duration: u64,
    #[command(flatten)]
    seeds: SeedArgs,
}

/// What every scenario takes: which seeds to run, where the trace goes and the event budget.
#[derive(Args, Debug)]
struct SeedArgs {
    /// The seed; the same seed gives the same trace and report.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run this many seeds in turn, from --seed up, stopping at the first violation.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Write a JSON-lines trace of the (last) run here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Fail a run that takes more events than this, as a livelock (invariant `event-limit`).
    /// Default: a budget scaled to the scenario's size and length, far above an honest run.
    #[arg(long, value_name = "N")]
    max_events: Option<u64>,
}

impl SeedArgs {
    /// The event budget of a run: `--max-events`, else the scenario's own `scaled` one.
    fn event_budget(&self, scaled: u64) -> u64 {
        self.max_events.unwrap_or(scaled)
    }
}

/// The link layer's faults a user may turn (`weft_sim::link`); each left out keeps the
/// scenario's default.
#[derive(Args, Debug)]
struct SimLinkArgs {
    /// Chance per thousand that a message's segment is lost and sent again after a
    /// retransmission timeout (200 ms, doubling): a delay for it and everything behind it on its
    /// stream, never a lost message. Default 10.
    #[arg(long, value_name = "PERMILLE")]
    loss: Option<u32>,
    /// Mean of the heavy-tailed jitter added to each message's latency, in milliseconds.
    /// Default 25 (minca-meetup), 20 (airc-realms).
    #[arg(long, value_name = "MS")]
    jitter: Option<u64>,
    /// Serialization per direction: `off`, `kind` (each kind of link at its own rate: relay
    /// sockets 1 Mbit/s, data channels 2 Mbit/s, realm streams 10 Mbit/s) or a number of bytes
    /// per second for every link. Default `kind`.
    #[arg(long, value_name = "off|kind|BYTES", value_parser = parse_bandwidth)]
    bandwidth: Option<weft_sim::link::Bandwidth>,
    /// Mean virtual seconds between partitions in the faulty phase (0: none); each cuts up to a
    /// third of a region off for a while (minca-meetup: one space, unless
    /// `--partition-region network`; airc-realms: the whole network), and all heal before the
    /// quiet phase. Default 60
    /// (minca-meetup), 40 (airc-realms).
    #[arg(long, value_name = "SECS")]
    partition_every: Option<u64>,
}

impl SimLinkArgs {
    fn apply(&self, f: &mut weft_sim::link::LinkFaults) {
        if let Some(loss) = self.loss {
            f.loss_permille = loss.min(1000);
        }
        if let Some(ms) = self.jitter {
            f.jitter = std::time::Duration::from_millis(ms);
        }
        if let Some(b) = self.bandwidth {
            f.bandwidth = b;
        }
        if let Some(secs) = self.partition_every {
            f.partition_every = (secs > 0).then(|| std::time::Duration::from_secs(secs));
        }
    }
}

fn parse_partition_region(s: &str) -> Result<weft_sim::minca::PartitionRegion, String> {
    use weft_sim::minca::PartitionRegion;
    match s {
        "space" => Ok(PartitionRegion::Space),
        "network" => Ok(PartitionRegion::Network),
        _ => Err("want space or network".into()),
    }
}

fn parse_bandwidth(s: &str) -> Result<weft_sim::link::Bandwidth, String> {
    use weft_sim::link::Bandwidth;
    match s {
        "off" => Ok(Bandwidth::Unlimited),
        "kind" => Ok(Bandwidth::ByKind),
        n => match n.parse::<u64>() {
            Ok(0) => Ok(Bandwidth::Unlimited),
            Ok(rate) => Ok(Bandwidth::PerSecond(rate)),
            Err(_) => Err("want off, kind or a number of bytes per second".into()),
        },
    }
}

#[derive(Args, Debug)]
struct MincaMeetupArgs {
    /// Nodes.
    #[arg(long, default_value_t = 8)]
    nodes: usize,
    /// Spaces the nodes are spread over (a room holds at most 64 peers; a scale run uses one
    /// space per 12 nodes, `weft_sim::minca::SCALE_SPACE_NODES`).
    #[arg(long, default_value_t = 1)]
    spaces: usize,
    /// Relays; each space meets on two of them (all, if there are no more), and a relay holds at
    /// most 10 000 sockets (Minca §1.4), so a scale run gives one relay per ~5 000 nodes.
    #[arg(long, default_value_t = 2)]
    relays: usize,
    /// Virtual seconds of faults, before the quiet heal phase.
    #[arg(long, default_value_t = 180)]
    duration: u64,
    /// Chance per thousand that a relay delivers a mail twice (the rendezvous must ignore the
    /// copy as a replay). Default 20.
    #[arg(long, value_name = "PERMILLE")]
    duplicates: Option<u32>,
    /// What one partition may cut up to a third of: `space` (one space's nodes with the
    /// relays) or `network` (all nodes, in every space at once). Default `space`.
    #[arg(long, value_name = "space|network", value_parser = parse_partition_region)]
    partition_region: Option<weft_sim::minca::PartitionRegion>,
    /// Mean seconds between a node crashing across the network (0: never); a crashed node
    /// restarts with its session key and nothing else. Default 60.
    #[arg(long, value_name = "SECS")]
    crash_every: Option<u64>,
    #[command(flatten)]
    link: SimLinkArgs,
    #[command(flatten)]
    seeds: SeedArgs,
}

#[derive(Args, Debug)]
struct AircRealmsArgs {
    /// Realm servers.
    #[arg(long, default_value_t = 3)]
    realms: usize,
    /// Clients, spread over the realms (default: 4 a realm, at least 12).
    #[arg(long)]
    clients: Option<usize>,
    /// Messages sent in all.
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// Virtual seconds of faults, before the quiet heal phase.
    #[arg(long, default_value_t = 300)]
    duration: u64,
    #[command(flatten)]
    link: SimLinkArgs,
    #[command(flatten)]
    seeds: SeedArgs,
}

#[derive(Args, Debug)]
struct RelayArgs {
    /// The address to listen on.
    #[arg(long, default_value = weft_drivers::minca::relay::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    /// Take the client address from the last hop of the last X-Forwarded-For line: only behind
    /// a proxy that appends it.
    #[arg(long)]
    trust_proxy: bool,
    /// The secret shared with the TURN server (coturn `use-auth-secret`); not empty. Prefer
    /// --turn-secret-file: a flag is in every local user's process list.
    #[arg(long, env = "WEFT_TURN_SECRET", hide_env_values = true)]
    turn_secret: Option<String>,
    /// Read the TURN secret from FILE (its text, whitespace around it trimmed; not empty). The
    /// file must be readable by its owner only (chmod 600).
    #[arg(
        long,
        value_name = "FILE",
        env = "WEFT_TURN_SECRET_FILE",
        conflicts_with = "turn_secret"
    )]
    turn_secret_file: Option<PathBuf>,
    /// A TURN URL to offer (`turn:` or `turns:`), repeatable; the variable takes a comma list.
    #[arg(long = "turn-url", env = "WEFT_TURN_URLS", value_delimiter = ',')]
    turn_urls: Vec<String>,
    /// How long TURN passwords last, in seconds.
    #[arg(long, env = "WEFT_TURN_TTL", default_value_t = weft_proto::minca::turn::DEFAULT_TURN_TTL_S)]
    turn_ttl: u64,
    /// Serve wss:// with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key for --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Also be an always-on node (Minca §5.3): serve `/peer` on the same port with the session
    /// key in FILE (64 hex digits; made on first start). Its clients' events go to stdout as the
    /// JSON lines `weft node` prints: `admitted` / `account` / `departed` per client, and `live`
    /// for each live message (the sender's session DID in `from`, its `account`, the `payload`).
    #[arg(long, value_name = "FILE")]
    node_key: Option<PathBuf>,
    /// With --node-key, chat as `weft node` does: each line on stdin is sent as a live message to
    /// every client of every --host-space (as the JSON value it is, or else as a string). The end
    /// of stdin ends the chat, not the relay. Off by default, so a relay in the background never
    /// waits on a terminal.
    #[arg(long, requires = "node_key")]
    chat: bool,
    /// A public space the node holds, repeatable (with --node-key); a client asking for any
    /// other is refused.
    #[arg(long = "host-space", value_name = "ID", requires = "node_key")]
    host_spaces: Vec<String>,
}

#[derive(Args, Debug)]
struct ConnectArgs {
    /// The realm's client socket.
    #[arg(long, default_value = "./weft-data/airc/airc.sock")]
    socket: PathBuf,
    /// Connect to the realm's loopback TCP client face instead (`weft airc serve --client-tcp`);
    /// the server knows you by the uid owning your socket.
    #[arg(long)]
    tcp: Option<std::net::SocketAddr>,
}

impl ConnectArgs {
    fn target(&self) -> Target {
        match self.tcp {
            Some(addr) => Target::Tcp(addr),
            None => Target::Unix(self.socket.clone()),
        }
    }
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// A TOML file for everything else (see docs/airc-server.md): realm, data_dir,
    /// client_socket, client_tcp, client_ws, namespaces, known_keys, trusted_unsigned, policy,
    /// policy_default_allow, accept_offers, auto_accept, tls (cert, key, trust), peer_listen,
    /// peer_quic, peers (static entries), signing_key, passports (mode = "agents" |
    /// "owner-only" | "off"; web_base = "https://…" for passport URLs). An unknown key or a bad
    /// value is refused at start (exit 2). Flags given here override the file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The realm this server routes for (default: localhost).
    #[arg(long)]
    realm: Option<String>,
    /// Where durable state (spool, seen ids) lives (default: ./weft-data/airc).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The client-face Unix socket (default: airc.sock in --data-dir).
    #[arg(long)]
    client_socket: Option<PathBuf>,
    /// Also serve clients on this loopback TCP address (IPv4 or IPv6 loopback, with a port); a
    /// client's uid is the owner of its socket in /proc/net/tcp. Any other address is refused.
    #[arg(long)]
    client_tcp: Option<std::net::SocketAddr>,
    /// Also serve clients over WebSocket on this loopback TCP address (AIRC §3.1): one AIRC
    /// frame per text message, each answer frame one text message; a client's uid is found as
    /// for --client-tcp. Any other address is refused.
    #[arg(long)]
    client_ws: Option<std::net::SocketAddr>,
    /// The nameserver (IP:PORT) AIRC discovery asks for SRV, A/AAAA and TXT records (§8.1–§8.2),
    /// instead of the system's; the file's `[dns] nameserver`.
    #[arg(long = "dns")]
    nameserver: Option<std::net::SocketAddr>,
    /// The operator's uid → namespaces table, `UID=NS[,NS…]`, repeatable; replaces the file's
    /// namespaces table. Default: your uid → your user name.
    #[arg(long = "namespaces")]
    namespaces: Vec<String>,
    /// The peer face: other realms dial this TCP address. TLS with --tls-cert and --tls-key;
    /// without them plain TCP, for tests only (AIRC §8.3 requires TLS in production).
    #[arg(long)]
    peer_listen: Option<std::net::SocketAddr>,
    /// The peer face over QUIC, on this UDP address (needs --tls-cert and --tls-key).
    #[arg(long)]
    peer_quic: Option<std::net::SocketAddr>,
    /// The peer face's certificate chain (PEM).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that other realms' certificates must chain to when this server
    /// dials them; default: the Mozilla roots built in.
    #[arg(long)]
    tls_trust: Option<PathBuf>,
    /// The realm's Ed25519 signing key (PKCS#8 PEM, owner-only); default: realm.key in
    /// --data-dir, made on first start.
    #[arg(long)]
    signing_key: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => weft_drivers::demo::run(&mut std::io::stdout().lock()),
        Command::Relay(args) => relay(args),
        Command::Airc(cmd) => airc(cmd),
        Command::Node(args) => node(args),
        Command::Sim(Sim::AircRealms(args)) => sim_airc_realms(&args),
        Command::Sim(Sim::MincaMeetup(args)) => sim_minca_meetup(&args),
        Command::Sim(Sim::Circle(args)) => weft_drivers::circle::cli::sim(&args),
        Command::Sim(Sim::RelayPeering(args)) => sim_relay_peering(&args),
        Command::Nostr(Nostr::Serve(args)) => nostr_serve(args),
        Command::Nostr(Nostr::Info(args)) => nostr_info(args),
        Command::Nostr(Nostr::Peering(args)) => nostr_peering(args),
        Command::Meshstr(cmd) => weft_drivers::meshstr::run(cmd),
        Command::Circle(cmd) => weft_drivers::circle::cli::run(cmd),
    }
}

/// Reads `--config` into `options`, printing why not under `command`'s name.
fn nostr_settings(
    command: &str,
    path: Option<&PathBuf>,
    options: &mut weft_drivers::nostr::serve::ServeOptions,
) -> Result<(), ExitCode> {
    let Some(path) = path else {
        return Ok(());
    };
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| weft_drivers::nostr::config::apply_settings(&text, options))
        .map_err(|e| {
            eprintln!("weft nostr {command}: {}: {e}", path.display());
            ExitCode::from(2)
        })
}

/// Resolves the relay's key from the environment for `options` (the URL the key is derived
/// over is the configured relay URL, else `ws(s)://<listen>`).
fn nostr_identity(
    command: &str,
    options: &mut weft_drivers::nostr::serve::ServeOptions,
) -> Result<(), ExitCode> {
    let scheme = if options.tls.is_some() { "wss" } else { "ws" };
    let url = options
        .relay_url
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{}", options.listen));
    match weft_drivers::nostr::peering::resolve_key(
        weft_drivers::server_provider(),
        |name| std::env::var(name).ok(),
        &url,
        &options.peering,
    ) {
        Ok(identity) => {
            options.identity = identity;
            Ok(())
        }
        Err(e) => {
            eprintln!("weft nostr {command}: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// `weft nostr info`.
fn nostr_info(args: NostrInfoArgs) -> ExitCode {
    use weft_drivers::nostr::serve::ServeOptions;
    let mut options = ServeOptions::new(args.listen, PathBuf::new());
    if let Err(code) = nostr_settings("info", args.config.as_ref(), &mut options) {
        return code;
    }
    if args.relay_url.is_some() {
        options.relay_url = args.relay_url;
    }
    if let Err(code) = nostr_identity("info", &mut options) {
        return code;
    }
    match &options.identity {
        Some((key, advertised)) => {
            print!(
                "{}",
                weft_drivers::nostr::peering::info_text(key, advertised)
            );
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("weft nostr info: no relay key: set SECRET (or RELAY_PRIVATE_KEY)");
            ExitCode::from(2)
        }
    }
}

/// `weft nostr peering`.
fn nostr_peering(args: NostrPeeringArgs) -> ExitCode {
    use weft_drivers::nostr::peering::{ENV_ADMIN_TOKEN, fetch_status, status_table};
    use weft_drivers::nostr::serve::ServeOptions;
    let mut options = ServeOptions::new(
        weft_drivers::nostr::serve::DEFAULT_LISTEN
            .parse()
            .expect("address"),
        PathBuf::new(),
    );
    if let Err(code) = nostr_settings("peering", args.config.as_ref(), &mut options) {
        return code;
    }
    let token = options
        .peering
        .admin_token
        .map(|t| t.expose().to_string())
        .or_else(|| std::env::var(ENV_ADMIN_TOKEN).ok())
        .unwrap_or_default();
    if token.is_empty() {
        eprintln!(
            "weft nostr peering: no admin token: admin.token in --config, or {ENV_ADMIN_TOKEN}"
        );
        return ExitCode::from(2);
    }
    match fetch_status(&args.relay, &token) {
        Ok(rows) => {
            print!("{}", status_table(&rows));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weft nostr peering: {e}");
            ExitCode::from(3)
        }
    }
}

/// `weft nostr serve`.
fn nostr_serve(args: NostrServeArgs) -> ExitCode {
    use weft_drivers::nostr::serve::{ServeOptions, serve};
    use weft_proto::nostr::relay::AuthPolicy;
    let mut options = ServeOptions::new(args.listen, args.data_dir);
    if let Some(url) = args.database {
        // A URL that is none is the operator's mistake (exit 2); a database that cannot be
        // reached is found when serving starts (exit 1).
        if let Err(e) = weft_drivers::nostr::pg::parse_url(&url) {
            eprintln!("weft nostr serve: --database: {}", e.0);
            return ExitCode::from(2);
        }
        options.database = Some(url);
    }
    if let Err(code) = nostr_settings("serve", args.config.as_ref(), &mut options) {
        return code;
    }
    if args.relay_url.is_some() {
        options.relay_url = args.relay_url;
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        match weft_drivers::host::TlsServer::from_files(cert, key) {
            Ok(server) => options.tls = Some(server),
            Err(e) => {
                eprintln!("weft nostr serve: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Err(code) = nostr_identity("serve", &mut options) {
        return code;
    }
    // Every enabled peer gets an outbound sync worker, which authenticates with the relay key.
    if options.identity.is_none() && options.peering.trust.enabled().next().is_some() {
        eprintln!(
            "weft nostr serve: peering.peers needs this relay's key: set SECRET or RELAY_PRIVATE_KEY"
        );
        return ExitCode::from(2);
    }
    if let Some((_, advertised)) = &options.identity {
        eprintln!(
            "weft nostr serve: self {}; {}",
            weft_proto::codec::hex::encode(advertised),
            weft_proto::nostr::peering::trust::summary(&options.peering.trust)
        );
    }
    let scheme = if options.tls.is_some() { "wss" } else { "ws" };
    options.auth = match args.auth.as_str() {
        "writes" => AuthPolicy::Writes,
        "all" => AuthPolicy::All,
        _ => AuthPolicy::Optional,
    };
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    match serve(options, stop, |addr| {
        eprintln!("weft nostr serve: listening on {scheme}://{addr}")
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft nostr serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn airc(cmd: Airc) -> ExitCode {
    if let Airc::Serve(args) = cmd {
        // A configuration that cannot be used is the operator's mistake, told apart (exit 2)
        // from a server that failed while running (exit 1).
        let config = match realm_config(&args) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("weft airc serve: {e}");
                return ExitCode::from(2);
            }
        };
        return match serve_realm(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weft airc serve: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (name, target) = {
        let (name, connect) = airc_client_target(&cmd);
        (name, connect.target())
    };
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr();
    let answered = Client::connect_to(&target).and_then(|mut c| match cmd {
        Airc::Serve(_) => unreachable!("served above"),
        Airc::Send {
            to,
            body,
            from,
            ttl,
            ..
        } => {
            let id = message_id(&mut weft_drivers::os_rng());
            command::send(&mut c, new_message(id, &from, &to, &body, ttl), &mut out)
        }
        Airc::Listen { names, count, .. } => {
            command::listen(&mut c, names, count, &mut out, &mut err)
        }
        Airc::Link(l) => command::link(&mut c, link_request(l), &mut out),
        Airc::Passport(p) => command::passport(&mut c, passport_request(p), &mut out),
        Airc::Subscribe { kinds, count, .. } => {
            command::subscribe(&mut c, kinds, count, &mut out, &mut err)
        }
        Airc::Stat { .. } => command::stat(&mut c, &mut out),
    });
    match answered {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(refusal)) => {
            eprintln!("weft airc {name}: {refusal}");
            ExitCode::from(command::EXIT_REFUSED)
        }
        Err(e) => {
            eprintln!("weft airc {name}: {target}: {e}");
            ExitCode::from(command::EXIT_UNREACHABLE)
        }
    }
}

/// A client command's name (for messages) and where it connects.
fn airc_client_target(cmd: &Airc) -> (&'static str, &ConnectArgs) {
    match cmd {
        Airc::Serve(_) => unreachable!("not a client command"),
        Airc::Send { connect, .. } => ("send", connect),
        Airc::Listen { connect, .. } => ("listen", connect),
        Airc::Subscribe { connect, .. } => ("subscribe", connect),
        Airc::Stat { connect } => ("stat", connect),
        Airc::Link(l) => match l {
            LinkCmd::Offer { connect, .. }
            | LinkCmd::Grant { connect, .. }
            | LinkCmd::List { connect, .. } => ("link", connect),
            LinkCmd::Accept(a) | LinkCmd::Decline(a) | LinkCmd::Revoke(a) => ("link", &a.connect),
        },
        Airc::Passport(p) => match p {
            PassportCmd::New { connect, .. }
            | PassportCmd::List { connect, .. }
            | PassportCmd::Redeem { connect, .. }
            | PassportCmd::Revoke { connect, .. } => ("passport", connect),
        },
    }
}

/// The §4.6 `link` frame a `weft airc link` command sends.
fn link_request(cmd: LinkCmd) -> LinkRequest {
    let mut req = LinkRequest {
        op: String::new(),
        acting: None,
        peer: None,
        id: None,
        label: None,
        direction: None,
    };
    req.op = match &cmd {
        LinkCmd::Offer { .. } => "offer",
        LinkCmd::Grant { .. } => "grant",
        LinkCmd::Accept(_) => "accept",
        LinkCmd::Decline(_) => "decline",
        LinkCmd::Revoke(_) => "revoke",
        LinkCmd::List { .. } => "list",
    }
    .into();
    match cmd {
        LinkCmd::Offer { peer, link, .. } | LinkCmd::Grant { peer, link, .. } => {
            req.peer = Some(peer);
            req.acting = Some(link.acting);
            req.label = link.label;
            req.direction = link.direction;
        }
        LinkCmd::Accept(a) | LinkCmd::Decline(a) | LinkCmd::Revoke(a) => {
            req.id = Some(a.id);
            req.acting = Some(a.acting);
        }
        LinkCmd::List { acting, .. } => req.acting = acting,
    }
    req
}

/// The §4.7 `passport` frame a `weft airc passport` command sends.
fn passport_request(cmd: PassportCmd) -> PassportRequest {
    let mut req = PassportRequest {
        op: String::new(),
        acting: None,
        passport: None,
        id: None,
        label: None,
        to: None,
        uses: None,
        ttl: None,
        direction: None,
        link_ttl: None,
        and_links: None,
    };
    match cmd {
        PassportCmd::New {
            acting,
            label,
            to,
            uses,
            ttl,
            direction,
            link_ttl,
            ..
        } => {
            req.op = "new".into();
            req.acting = Some(acting);
            req.label = label;
            req.to = to;
            req.uses = uses;
            req.ttl = ttl;
            req.direction = direction;
            req.link_ttl = link_ttl;
        }
        PassportCmd::List { acting, .. } => {
            req.op = "list".into();
            req.acting = acting;
        }
        PassportCmd::Redeem {
            passport, acting, ..
        } => {
            req.op = "redeem".into();
            req.passport = Some(passport);
            req.acting = Some(acting);
        }
        PassportCmd::Revoke {
            id,
            acting,
            and_links,
            ..
        } => {
            req.op = "revoke".into();
            req.id = Some(id);
            req.acting = acting;
            req.and_links = and_links.then_some(true);
        }
    }
    req
}

fn relay(args: RelayArgs) -> ExitCode {
    use weft_drivers::minca::relay::{RelayOptions, serve};
    use weft_proto::minca::turn::TurnConfig;
    let secret = match (&args.turn_secret, &args.turn_secret_file) {
        (_, Some(path)) => match weft_drivers::minca::relay::read_turn_secret(path) {
            Ok(secret) => Some(secret),
            Err(e) => {
                eprintln!("weft relay: {e}");
                return ExitCode::from(2);
            }
        },
        (secret, None) => secret.clone(),
    };
    let turn = match (&secret, args.turn_urls.is_empty()) {
        (Some(secret), false) => {
            match TurnConfig::new(secret.as_bytes(), args.turn_urls.clone(), args.turn_ttl) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("weft relay: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        (None, true) => None,
        _ => {
            eprintln!(
                "weft relay: TURN needs both --turn-secret (or --turn-secret-file) and at least one --turn-url"
            );
            return ExitCode::from(2);
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match weft_drivers::host::TlsServer::from_files(cert, key) {
            Ok(server) => Some(server),
            Err(e) => {
                eprintln!("weft relay: {e}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let options = RelayOptions {
        listen: args.listen,
        trust_proxy: args.trust_proxy,
        turn,
        tls,
    };
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    let served = match &args.node_key {
        None => serve(options, stop, |addr| {
            eprintln!("weft relay: listening on {scheme}://{addr}")
        }),
        Some(path) => relay_node(options, scheme, path, &args, stop),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft relay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `weft relay --node-key`: the relay that is also an always-on node, printing its `/peer`
/// clients' events as `weft node` does, and with `--chat` sending stdin lines to them.
fn relay_node(
    options: weft_drivers::minca::relay::RelayOptions,
    scheme: &str,
    key: &std::path::Path,
    args: &RelayArgs,
    stop: smol::channel::Receiver<()>,
) -> std::io::Result<()> {
    use weft_drivers::minca::key_file;
    use weft_drivers::minca::relay::{NodeOptions, chat_node};
    let node = NodeOptions {
        key: key_file::load_or_make(
            key,
            weft_drivers::server_provider(),
            &mut weft_drivers::os_rng(),
        )?,
        note: None,
        spaces: args.host_spaces.clone(),
    };
    let did = node.did().unwrap_or_default();
    let lines = args.chat.then(|| {
        Box::new(std::io::BufReader::new(std::io::stdin())) as Box<dyn std::io::BufRead + Send>
    });
    chat_node(options, node, lines, stop, |addr| {
        eprintln!(
            "weft relay: listening on {scheme}://{addr}, node {did} on {scheme}://{addr}/peer"
        )
    })
}

/// `weft node`: one Minca node on relay sockets and WebRTC, chatting over stdin and stdout.
fn node(args: NodeArgs) -> ExitCode {
    use weft_drivers::minca::key_file;
    use weft_drivers::minca::node_runner::{NodeOptions, chat};
    use weft_proto::minca::relay_url::RelayUrl;
    let mut relays = Vec::new();
    for url in &args.relays {
        match RelayUrl::parse(url) {
            Ok(r) => relays.push(r),
            Err(e) => {
                eprintln!("weft node: --relay {url}: {e:?}");
                return ExitCode::from(2);
            }
        }
    }
    let mut nodes = Vec::new();
    for url in &args.nodes {
        match weft_proto::minca::node_url::NodeUrl::parse(url) {
            Ok(n) => nodes.push(n),
            Err(e) => {
                eprintln!("weft node: --node {url}: {e:?}");
                return ExitCode::from(2);
            }
        }
    }
    let account = match &args.key {
        Some(path) => {
            let crypto = weft_drivers::server_provider();
            match key_file::load_or_make(path, crypto, &mut weft_drivers::os_rng()) {
                Ok(k) => Some(k),
                Err(e) => {
                    eprintln!("weft node: --key: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => None,
    };
    let options = NodeOptions {
        spaces: args.spaces,
        relays,
        nodes,
        bind: args.bind,
        account,
        session: None,
    };
    match chat(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft node: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Clients a realm gets when `--clients` is not given.
const CLIENTS_PER_REALM: usize = 4;

fn sim_airc_realms(args: &AircRealmsArgs) -> ExitCode {
    use weft_sim::airc::{Scenario, run};
    let clients = args
        .clients
        .unwrap_or(args.realms.saturating_mul(CLIENTS_PER_REALM).max(12));
    if args.realms == 0 || clients < 2 {
        eprintln!("weft sim airc-realms: want at least one realm and two clients");
        return ExitCode::from(2);
    }
    sim_seeds("airc-realms", &args.seeds, |seed, trace| {
        let mut base = Scenario::new(seed);
        args.link.apply(&mut base.faults.link);
        let mut scenario = Scenario {
            realms: args.realms,
            clients,
            messages: args.messages,
            duration: std::time::Duration::from_secs(args.duration),
            ..base
        }
        .with_event_budget();
        scenario.max_events = args.seeds.event_budget(scenario.max_events);
        // The trace lives longer than this run's scenario: reborrow it for the run alone.
        let trace = trace.map(|t| -> &mut dyn std::io::Write { t });
        run(&scenario, trace)
            .map(|r| (r.to_json().to_string(), r.to_string()))
            .map_err(|v| format!("{v}\n{}", v.report))
    })
}

fn sim_minca_meetup(args: &MincaMeetupArgs) -> ExitCode {
    use weft_sim::minca::{Scenario, run};
    let shape = Scenario {
        nodes: args.nodes,
        spaces: args.spaces,
        relays: args.relays,
        ..Scenario::new(0)
    };
    if let Some(why) = shape.shape_error() {
        eprintln!("weft sim minca-meetup: {why}");
        return ExitCode::from(2);
    }
    sim_seeds("minca-meetup", &args.seeds, |seed, trace| {
        let mut base = Scenario::new(seed);
        args.link.apply(&mut base.faults.link);
        if let Some(d) = args.duplicates {
            base.faults.link.duplicate_permille = d.min(1000);
        }
        if let Some(region) = args.partition_region {
            base.faults.partition_region = region;
        }
        if let Some(secs) = args.crash_every {
            base.faults.crash_every = (secs > 0).then(|| std::time::Duration::from_secs(secs));
        }
        let mut scenario = Scenario {
            nodes: args.nodes,
            spaces: args.spaces,
            relays: args.relays,
            duration: std::time::Duration::from_secs(args.duration),
            ..base
        }
        .with_event_budget();
        scenario.max_events = args.seeds.event_budget(scenario.max_events);
        // The trace lives longer than this run's scenario: reborrow it for the run alone.
        let trace = trace.map(|t| -> &mut dyn std::io::Write { t });
        run(&scenario, trace)
            .map(|r| (r.to_json().to_string(), r.to_string()))
            .map_err(|v| format!("{v}\n{}", v.report))
    })
}

fn sim_relay_peering(args: &RelayPeeringArgs) -> ExitCode {
    use weft_sim::peering::{Scenario, run};
    if args.relays < 2 {
        eprintln!("weft sim relay-peering: want at least two relays");
        return ExitCode::from(2);
    }
    sim_seeds("relay-peering", &args.seeds, |seed, trace| {
        let base = Scenario::new(seed);
        let scenario = Scenario {
            relays: args.relays,
            events: args.events,
            partitions: args.partitions,
            crashes: args.crashes,
            drops: args.drops,
            limiter_outages: args.limiter_outages,
            replays: args.replays,
            corrupt_permille: args.corrupt_permille.min(1_000),
            budget: weft_proto::nostr::peering::RateLimit {
                period_secs: 60,
                rate: args.budget.max(1),
            },
            duration: std::time::Duration::from_secs(args.duration),
            max_steps: args.seeds.event_budget(base.max_steps),
            ..base
        };
        // The trace lives longer than this run's scenario: reborrow it for the run alone.
        let trace = trace.map(|t| -> &mut dyn std::io::Write { t });
        run(&scenario, trace)
            .map(|r| (r.to_json().to_string(), r.to_string()))
            .map_err(|v| format!("{v}\n{}", v.report))
    })
}

/// Runs `one` over the seeds asked for: one report as text, several as JSON lines; the first
/// violation ends the run with a failure.
fn sim_seeds(
    name: &str,
    args: &SeedArgs,
    one: impl Fn(u64, Option<&mut dyn std::io::Write>) -> Result<(String, String), String>,
) -> ExitCode {
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let mut file = match &args.trace {
            Some(path) => match std::fs::File::create(path) {
                Ok(f) => Some(std::io::BufWriter::new(f)),
                Err(e) => {
                    eprintln!("weft sim {name}: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            },
            None => None,
        };
        let result = one(seed, file.as_mut().map(|f| f as &mut dyn std::io::Write));
        if let Some(Err(e)) = file.as_mut().map(std::io::Write::flush) {
            eprintln!("weft sim {name}: writing the trace: {e}");
        }
        match result {
            Ok((json, text)) => println!("{}", if args.seeds > 1 { json } else { text }),
            Err(violation) => {
                eprintln!("weft sim {name}: {violation}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The server configuration from `--config` and the flags.
fn realm_config(args: &ServeArgs) -> std::io::Result<weft_drivers::airc::serve::ServeConfig> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let flags = Flags {
        realm: args.realm.clone(),
        data_dir: args.data_dir.clone(),
        client_socket: args.client_socket.clone(),
        client_tcp: args.client_tcp,
        client_ws: args.client_ws,
        namespaces: args.namespaces.clone(),
        nameserver: args.nameserver,
        peer_listen: args.peer_listen,
        peer_quic: args.peer_quic,
        tls: weft_drivers::airc::config::TlsFiles {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
            trust: args.tls_trust.clone(),
        },
        signing_key: args.signing_key.clone(),
    };
    serve_config(&file, &flags, &sanitize(&login_name()))
}

fn serve_realm(config: weft_drivers::airc::serve::ServeConfig) -> std::io::Result<()> {
    let has_cert = config.tls.as_ref().is_some_and(|t| t.cert.is_some());
    if let Some(addr) = config.peer.listen {
        if has_cert {
            eprintln!("weft airc serve: peer face on tls {addr}");
        } else {
            eprintln!(
                "weft airc serve: peer face on PLAIN tcp {addr}: no [tls] certificate; \
                 for tests only"
            );
        }
    }
    if let Some(addr) = config.peer.quic {
        eprintln!("weft airc serve: peer face on quic {addr}");
    }
    let socket = config.client_socket.clone();
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    let (tcp, ws) = (config.client_tcp, config.client_ws);
    let (realm, key_path) = (config.realm.clone(), config.signing_key_path());
    serve(config, stop, || {
        // By now the server has read (or made) its key: this only reads it back.
        if let Ok(seed) =
            weft_drivers::airc::realm_key::load_or_create(&key_path, &mut weft_drivers::os_rng())
        {
            let txt =
                weft_drivers::airc::realm_key::txt_record(weft_drivers::server_provider(), &seed);
            eprintln!(
                "weft airc serve: publish _airc.{} TXT \"{txt}\"",
                realm.host()
            );
        }
        eprintln!("weft airc serve: listening on {}", socket.display());
        if let Some(tcp) = tcp {
            eprintln!("weft airc serve: listening on tcp {tcp}");
        }
        if let Some(ws) = ws {
            eprintln!("weft airc serve: listening on ws://{ws}");
        }
    })
}

/// The invoking user's login name: `$USER`, `$LOGNAME`, or the passwd entry of the uid.
fn login_name() -> String {
    let from_env = ["USER", "LOGNAME"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.is_empty());
    from_env
        .or_else(|| {
            let uid = rustix::process::getuid().as_raw().to_string();
            let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
            passwd
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.get(2) == Some(&uid.as_str()))
                .map(|f| f[0].to_string())
        })
        .unwrap_or_else(|| "local".into())
}

/// A user name as a namespace segment: letters, digits, `-` and `_`, not starting or ending with
/// `-`.
fn sanitize(user: &str) -> String {
    let s: String = user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-');
    if s.is_empty() {
        "local".into()
    } else {
        s.chars().take(63).collect()
    }
}
