//! `weft sim relay-peering`: Nostr relays peered by configuration (spec 002 §3 `peering.peers`)
//! that sync each other's advertised scopes (§6) with the outbound sync worker
//! (`weft_proto::nostr::sync::worker`) and treat each other as peers inbound (§4, §7, §8), under
//! dropped sockets, partitions, crashes, a failing request limiter, corrupted events and
//! replayed `AUTH`, in virtual time.
//!
//! Each relay is the relay session machine over a memory store (`nostr::relay::harness`), with
//! its own keypair, a random advertisement of scopes (kinds, sometimes a fixed `since`,
//! sometimes a rolling window) and a random trust list: some of the other relays, most entries
//! enabled, some disabled. The list does both jobs the spec gives it: one sync worker per enabled
//! entry (outbound), and peer treatment (`limits.peer`, the per-peer request budget) for a
//! connection that authenticates with an enabled entry's key (inbound). Lists are not symmetric,
//! so some workers sync from a relay that does not list them: those are ordinary clients there.
//! Authors publish on random relays (regular kinds and, now and then, an ephemeral one) through
//! a client session, so live subscribers, the followers' workers among them, see them.
//!
//! Faults, each at a random time in the fault period:
//! - a dropped socket: one worker's connection cut (it reconnects);
//! - a partition between two relays (existing sockets cut, dials and NIP-11 fetches refused)
//!   that heals after a while;
//! - a crash of a relay (every socket to and from it dropped, its sessions and workers lost; its
//!   store and its request limiter, the state a relay keeps outside the process, kept) that
//!   restarts after a while;
//! - a limiter outage: a relay's request limiter cannot answer for a while (its store down);
//! - a replayed `AUTH`: an impostor opens a connection to a relay and sends an `AUTH` frame a
//!   trusted peer sent it earlier, then asks for events;
//! - corrupted events: while faults run, each `EVENT` frame a relay sends a worker is, with a
//!   set probability, altered on the way (content changed under the same id, or a new id over
//!   changed content or a changed kind with the old signature), as a faulty or hostile peer
//!   would serve it.
//!
//! Frames cross instantly; the clock jumps to the earliest wakeup of any worker or session,
//! fault or publish.
//!
//! Invariants, checked on every run:
//! - `authentic` (after every fault and publish, and at the end): every event a store holds is,
//!   byte for byte, one an author signed and published — no corrupted or forged event is ever
//!   accepted;
//! - `never-out-of-scope` (same times): a relay holds only its own events and events some
//!   followed peer could hold and advertises in scope;
//! - `ephemeral-never-stored` (same times): no store holds an ephemeral event;
//! - `peer-treatment` (after every step): a session is a peer exactly when it verified an `AUTH`
//!   from a key its relay lists enabled, and then it runs under the peer limits, every other
//!   session under the client limits; a replayed `AUTH` authenticates nothing;
//! - `request-budget` (at every request a relay served a trusted peer): over any interval of
//!   `t` seconds, a relay serves one peer (all its connections, across restarts of either side)
//!   at most `rate + rate × t / period` on-demand requests (`REQ`, `COUNT`, `NEG-OPEN`);
//! - `fails-closed` (same times): a relay whose limiter is down serves a peer no on-demand
//!   request;
//! - `converged` (once every fault has healed and the followers had time to reconcile): each
//!   relay holds exactly its own events and the in-scope events of the peers it follows (as those
//!   hold them, so a chain of follows carries events along);
//! - `event-limit`: a run takes at most its step budget (a worker that would spin a driver).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io::Write;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::core::{BucketConfig, ConnId, Machine, Timestamp};
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, EventId, UnsignedEvent};
use weft_proto::nostr::kinds::{self, KindClass};
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, Filter};
use weft_proto::nostr::peering::trust::MAX_PEERS;
use weft_proto::nostr::peering::{
    PeerEntry, PeerRequestLimiter, PeerTreatment, RateLimit, RequestBudget, TrustList,
};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::{self, AuthPolicy, EventStore, MemoryStore};
use weft_proto::nostr::sync::scope::{self, Scope};
use weft_proto::nostr::sync::worker::{
    Config, InfoError, Input, Output, RECONCILE_INTERVAL, SyncLimits, Worker,
};

use crate::scenario::{self, Check, START, Timed, Trace, Violation};

#[cfg(test)]
mod invariant_tests;

/// Kinds authors publish: regular ones (NIP-01) and one ephemeral kind. Replaceable and
/// addressable kinds are left out so that "exactly the union" is a set equality.
pub const KINDS: [u16; 6] = [1, 7, 1000, 1001, 1002, 20_001];

/// The kind a corrupted event is given in one of the ways [`World::maybe_corrupt`] alters
/// one: no author publishes it and no scope lists it.
const CORRUPT_KIND: u16 = 9_999;

/// Authors publishing.
pub const AUTHORS: u64 = 4;

/// After the last fault heals, how long the run goes on for the followers to reconnect (the
/// reconnect backoff's 5 min ceiling) and reconcile (every 15 min).
pub const SETTLE: Duration = Duration::from_secs(2 * 15 * 60);

/// The request budget every relay gives each peer in the default shape: small enough that a
/// reconnecting worker meets it (the spec's 300 a minute would never bite in a run this size).
pub const SIM_BUDGET: RateLimit = RateLimit {
    period_secs: 60,
    rate: 12,
};

/// The shape of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The seed; the same seed gives the same run.
    pub seed: u64,
    /// Relays.
    pub relays: usize,
    /// Events published, over the fault period.
    pub events: usize,
    /// The fault period: publishes and faults happen in it; then everything heals.
    pub duration: Duration,
    /// Single worker sockets dropped in the fault period.
    pub drops: usize,
    /// Partitions in the fault period.
    pub partitions: usize,
    /// Crashes in the fault period.
    pub crashes: usize,
    /// Limiter outages in the fault period.
    pub limiter_outages: usize,
    /// Replayed `AUTH` frames in the fault period.
    pub replays: usize,
    /// Per mille of the `EVENT` frames a relay sends a worker in the fault period that arrive
    /// corrupted.
    pub corrupt_permille: u32,
    /// The on-demand request budget each relay gives each peer (`limits.peer.request`).
    pub budget: RateLimit,
    /// Step budget (`event-limit`).
    pub max_steps: u64,
}

impl Scenario {
    /// The default shape for `seed`: 4 relays, 30 events, 3 dropped sockets, 3 partitions, 2
    /// crashes, 1 limiter outage and 2 replays over 30 minutes, 5 % of events served corrupted.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            relays: 4,
            events: 30,
            duration: Duration::from_secs(30 * 60),
            drops: 3,
            partitions: 3,
            crashes: 2,
            limiter_outages: 1,
            replays: 2,
            corrupt_permille: 50,
            budget: SIM_BUDGET,
            max_steps: 200_000,
        }
    }

    /// The size the test suite sweeps: 3 relays, 12 events, 1 dropped socket, 2 partitions, 1
    /// crash, 1 limiter outage and 1 replay over 20 min.
    pub fn small(seed: u64) -> Self {
        Self {
            relays: 3,
            events: 12,
            duration: Duration::from_secs(20 * 60),
            drops: 1,
            partitions: 2,
            crashes: 1,
            limiter_outages: 1,
            replays: 1,
            ..Self::new(seed)
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Relays.
    pub relays: u64,
    /// Follow links (workers): enabled trust-list entries.
    pub links: u64,
    /// Links whose peer lists the follower enabled (peer treatment there).
    pub trusted_links: u64,
    /// Links whose peer does not list the follower, or lists it disabled (a client there).
    pub client_links: u64,
    /// Disabled trust-list entries (no worker, no peer treatment).
    pub disabled_entries: u64,
    /// Events published (ephemeral included).
    pub published: u64,
    /// Ephemeral events published.
    pub ephemeral: u64,
    /// Events fetched by id by the workers, in total.
    pub fetched: u64,
    /// Live events accepted by the workers, in total.
    pub live: u64,
    /// Events the workers refused as out of scope.
    pub out_of_scope: u64,
    /// Events the workers refused as not verifying (or refused by the kind rules).
    pub invalid: u64,
    /// `EVENT` frames corrupted on the way to a worker.
    pub corrupted: u64,
    /// Reconciliations the workers completed.
    pub reconciliations: u64,
    /// Connections the workers opened.
    pub connections: u64,
    /// Pieces split (kind and time).
    pub splits: u64,
    /// On-demand requests relays served trusted peers.
    pub admitted: u64,
    /// On-demand requests of trusted peers refused `rate-limited:`.
    pub rate_limited: u64,
    /// Sockets dropped one at a time.
    pub drops: u64,
    /// Partitions.
    pub partitions: u64,
    /// Sockets cut by partitions.
    pub cuts: u64,
    /// Crashes.
    pub crashes: u64,
    /// Limiter outages.
    pub limiter_outages: u64,
    /// `AUTH` frames replayed by an impostor.
    pub replays: u64,
    /// Events held by every relay at the end, summed.
    pub held: u64,
    /// Steps taken.
    pub steps: u64,
    /// Virtual time covered.
    pub virtual_duration: Duration,
    /// Wall-clock time taken.
    pub wall: Duration,
}

impl Timed for Report {
    fn set_times(&mut self, virtual_duration: Duration, wall: Duration) {
        self.virtual_duration = virtual_duration;
        self.wall = wall;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} relays, {} follow links ({} as a trusted peer, {} as a client), {} disabled entries",
            self.seed,
            self.relays,
            self.links,
            self.trusted_links,
            self.client_links,
            self.disabled_entries
        )?;
        writeln!(
            f,
            "published {} ({} ephemeral); fetched {}, live {}; refused out of scope {}, invalid {} (corrupted on the way {})",
            self.published,
            self.ephemeral,
            self.fetched,
            self.live,
            self.out_of_scope,
            self.invalid,
            self.corrupted
        )?;
        writeln!(
            f,
            "reconciliations {}, connections {}, splits {}; peer requests served {}, rate-limited {}",
            self.reconciliations, self.connections, self.splits, self.admitted, self.rate_limited
        )?;
        writeln!(
            f,
            "drops {}, partitions {} (sockets cut {}), crashes {}, limiter outages {}, replayed AUTH {}",
            self.drops,
            self.partitions,
            self.cuts,
            self.crashes,
            self.limiter_outages,
            self.replays
        )?;
        writeln!(f, "held at the end {}, steps {}", self.held, self.steps)?;
        scenario::fmt_times(f, self.virtual_duration, self.wall)
    }
}

impl Report {
    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "seed": self.seed,
            "relays": self.relays,
            "links": self.links,
            "trusted_links": self.trusted_links,
            "client_links": self.client_links,
            "disabled_entries": self.disabled_entries,
            "published": self.published,
            "ephemeral": self.ephemeral,
            "fetched": self.fetched,
            "live": self.live,
            "out_of_scope": self.out_of_scope,
            "invalid": self.invalid,
            "corrupted": self.corrupted,
            "reconciliations": self.reconciliations,
            "connections": self.connections,
            "splits": self.splits,
            "admitted": self.admitted,
            "rate_limited": self.rate_limited,
            "drops": self.drops,
            "partitions": self.partitions,
            "cuts": self.cuts,
            "crashes": self.crashes,
            "limiter_outages": self.limiter_outages,
            "replays": self.replays,
            "held": self.held,
            "steps": self.steps,
            "virtual_secs": self.virtual_duration.as_secs_f64(),
            "wall_secs": self.wall.as_secs_f64(),
        })
    }
}

/// Runs `scenario`, writing a JSON-lines trace to `trace` if given.
pub fn run(
    scenario: &Scenario,
    trace: Option<&mut dyn Write>,
) -> Result<Report, Box<Violation<Report>>> {
    scenario::run(scenario.seed, World::new(scenario, trace))
}

#[derive(Clone, Debug)]
enum Fault {
    Publish { relay: usize, event: Event },
    Drop,
    Partition { a: usize, b: usize },
    Heal { a: usize, b: usize },
    Crash(usize),
    Restart(usize),
    LimiterDown(usize),
    LimiterUp(usize),
    Replay(usize),
}

/// An on-demand request a trusted peer sent and the relay has not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Req,
    Count,
    NegOpen,
}

struct Link {
    peer: usize,
    worker: Worker<ChaCha20Rng>,
    /// The worker's socket: its id and the peer harness's connection index.
    conn: Option<(ConnId, usize)>,
    inputs: VecDeque<Input>,
}

struct RelayNode {
    url: String,
    key: Secp256k1Secret,
    pubkey: [u8; 32],
    harness: Harness,
    info: String,
    scopes: Vec<Scope>,
    /// `peering.peers`.
    trust: TrustList,
    /// The enabled entries' relays: one worker each, and the only keys given peer treatment.
    follows: Vec<usize>,
    links: Vec<Link>,
    own: BTreeSet<EventId>,
    up: bool,
    /// Whether the limiter's store is down (the simulator's own record of the fault).
    limiter_down: bool,
    publisher: Option<usize>,
    /// Connections an impostor opened.
    impostors: BTreeSet<usize>,
    /// The last `AUTH` frame a trusted peer sent this relay.
    captured_auth: Option<String>,
}

impl RelayNode {
    /// Whether `key` is an enabled entry of this relay's trust list, read from the list's
    /// entries (not through the session's own test).
    fn trusts(&self, key: &[u8; 32]) -> bool {
        self.trust
            .entries()
            .iter()
            .any(|e| e.enabled && e.pubkey == *key)
    }
}

struct World<'a> {
    scenario: Scenario,
    rng: ChaCha20Rng,
    now: Timestamp,
    end_of_faults: Timestamp,
    relays: Vec<RelayNode>,
    partitioned: BTreeSet<(usize, usize)>,
    faults: BTreeMap<(Timestamp, u64), Fault>,
    /// Every event published, by id.
    published: BTreeMap<EventId, Event>,
    /// Requests of trusted peers waiting for their answer, by relay, connection and
    /// subscription.
    asked: BTreeMap<(usize, usize), BTreeMap<String, Asked>>,
    /// When a relay served each peer an on-demand request (milliseconds), by relay and peer key.
    served: BTreeMap<(usize, [u8; 32]), Vec<u64>>,
    trace: Trace<'a>,
    report: Report,
}

/// What a connection that is not a peer is held to: the client limits, with a message bucket
/// large enough that a follower's bursts are not rate-limited away, and small negentropy
/// sessions so that splitting happens in runs this size.
fn client_limits() -> Limits {
    Limits {
        messages: BucketConfig::new(100_000, 10_000),
        max_neg_items: 8,
        ..Limits::DEFAULT
    }
}

/// What a peer's connection is held to (spec 002 §7): the peer defaults, negentropy sessions
/// as small as the client's so that splitting happens for peers too.
fn peer_limits() -> Limits {
    Limits {
        max_neg_items: 8,
        ..Limits::PEER_DEFAULT
    }
}

fn relay_config(url: &str, trust: &TrustList) -> relay::Config {
    relay::Config {
        relay_url: url.to_string(),
        limits: client_limits(),
        auth: AuthPolicy::Optional,
        provider: crate::crypto::provider(),
        peering: PeerTreatment::new(trust, peer_limits()),
    }
}

fn limiter(budget: RateLimit) -> PeerRequestLimiter {
    let budget = RequestBudget::new(vec![budget]).unwrap_or_default();
    PeerRequestLimiter::new(budget, MAX_PEERS)
}

/// The frame's verb and subscription id, when it is a JSON array that starts with two strings.
fn verb_and_sub(text: &str) -> Option<(String, String, Value)> {
    let v: Value = serde_json::from_str(text).ok()?;
    let verb = v.get(0)?.as_str()?.to_string();
    let sub = v.get(1)?.as_str()?.to_string();
    Some((verb, sub, v))
}

impl<'a> World<'a> {
    fn new(scenario: &Scenario, trace: Option<&'a mut dyn Write>) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(scenario.seed);
        let n = scenario.relays.max(2);
        let keys: Vec<(Secp256k1Secret, [u8; 32])> = (0..n)
            .map(|_| {
                let key = generate_secp256k1(crate::crypto::provider(), &mut rng);
                let pubkey = crate::crypto::provider()
                    .schnorr_public_key(&key)
                    .unwrap_or([0; 32]);
                (key, pubkey)
            })
            .collect();
        let url = |i: usize| format!("wss://relay{i}.example/");
        let mut relays = Vec::new();
        let mut disabled = 0;
        for (i, (key, pubkey)) in keys.iter().enumerate() {
            let scopes_json = random_scopes(&mut rng);
            let info = json!({
                "name": format!("relay{i}"),
                "self": hex::encode(pubkey),
                "supported_nips": [1, 9, 11, 40, 42, 45, 62, 77],
                "peering": {"scopes": scopes_json},
            });
            let (scopes, _) = scope::from_document(&info);
            // The trust list: about half the others, one in six of those disabled, at least
            // one enabled.
            let mut entries: Vec<PeerEntry> = Vec::new();
            for (j, (_, pk)) in keys.iter().enumerate() {
                if j != i && rng.next_u32().is_multiple_of(2) {
                    entries.push(PeerEntry {
                        pubkey: *pk,
                        relay_url: url(j),
                        enabled: !rng.next_u32().is_multiple_of(6),
                    });
                }
            }
            if !entries.iter().any(|e| e.enabled) {
                let j = (i + 1 + rng.next_u32() as usize % (n - 1)) % n;
                entries.retain(|e| e.pubkey != keys[j].1);
                entries.push(PeerEntry {
                    pubkey: keys[j].1,
                    relay_url: url(j),
                    enabled: true,
                });
            }
            disabled += entries.iter().filter(|e| !e.enabled).count() as u64;
            let follows: Vec<usize> = entries
                .iter()
                .filter(|e| e.enabled)
                .filter_map(|e| keys.iter().position(|(_, k)| *k == e.pubkey))
                .collect();
            let trust = TrustList::new(entries).unwrap_or_default();
            let mut harness =
                Harness::new(relay_config(&url(i), &trust), MemoryStore::default(), START);
            harness.limiter = limiter(scenario.budget);
            relays.push(RelayNode {
                harness,
                url: url(i),
                key: key.clone(),
                pubkey: *pubkey,
                info: info.to_string(),
                scopes,
                trust,
                follows,
                links: Vec::new(),
                own: BTreeSet::new(),
                up: true,
                limiter_down: false,
                publisher: None,
                impostors: BTreeSet::new(),
                captured_auth: None,
            });
        }
        let mut w = Self {
            scenario: scenario.clone(),
            rng,
            now: START,
            end_of_faults: START.saturating_add(scenario.duration),
            relays,
            partitioned: BTreeSet::new(),
            faults: BTreeMap::new(),
            published: BTreeMap::new(),
            asked: BTreeMap::new(),
            served: BTreeMap::new(),
            trace: Trace::new(trace),
            report: Report {
                seed: scenario.seed,
                relays: n as u64,
                disabled_entries: disabled,
                ..Report::default()
            },
        };
        for i in 0..n {
            w.start_workers(i);
            for &p in &w.relays[i].follows {
                if w.relays[p].trusts(&w.relays[i].pubkey) {
                    w.report.trusted_links += 1;
                } else {
                    w.report.client_links += 1;
                }
            }
        }
        w.report.links = w.relays.iter().map(|r| r.links.len() as u64).sum();
        w.schedule();
        w
    }

    fn at(&mut self) -> Timestamp {
        let span = self.scenario.duration.as_millis().max(1) as u64;
        Timestamp::from_millis(START.as_millis() + self.rng.next_u64() % span)
    }

    fn file(&mut self, at: Timestamp, f: Fault) {
        let tie = self.rng.next_u64();
        self.faults.insert((at, tie), f);
    }

    fn schedule(&mut self) {
        let n = self.relays.len();
        let authors: Vec<Secp256k1Secret> = (0..AUTHORS)
            .map(|_| generate_secp256k1(crate::crypto::provider(), &mut self.rng))
            .collect();
        for _ in 0..self.scenario.events {
            let at = self.at();
            let relay = self.rng.next_u32() as usize % n;
            let author = &authors[self.rng.next_u32() as usize % authors.len()];
            let kind = KINDS[self.rng.next_u32() as usize % KINDS.len()];
            let mut aux = ChaCha20Rng::seed_from_u64(self.rng.next_u64());
            let event = UnsignedEvent {
                created_at: at.as_secs(),
                kind,
                tags: Vec::new(),
                content: format!("{}", self.rng.next_u64()),
            }
            .sign(crate::crypto::provider(), author, &mut aux);
            if let Ok(event) = event {
                self.file(at, Fault::Publish { relay, event });
            }
        }
        for _ in 0..self.scenario.drops {
            let at = self.at();
            self.file(at, Fault::Drop);
        }
        for _ in 0..self.scenario.partitions {
            let a = self.rng.next_u32() as usize % n;
            let b = (a + 1 + self.rng.next_u32() as usize % (n - 1)) % n;
            let at = self.at();
            let lasts = Duration::from_secs(10 + u64::from(self.rng.next_u32() % 600));
            self.file(at, Fault::Partition { a, b });
            self.file(at.saturating_add(lasts), Fault::Heal { a, b });
        }
        for _ in 0..self.scenario.crashes {
            let r = self.rng.next_u32() as usize % n;
            let at = self.at();
            let down = Duration::from_secs(1 + u64::from(self.rng.next_u32() % 120));
            self.file(at, Fault::Crash(r));
            self.file(at.saturating_add(down), Fault::Restart(r));
        }
        for _ in 0..self.scenario.limiter_outages {
            let r = self.rng.next_u32() as usize % n;
            let at = self.at();
            let down = Duration::from_secs(10 + u64::from(self.rng.next_u32() % 300));
            self.file(at, Fault::LimiterDown(r));
            self.file(at.saturating_add(down), Fault::LimiterUp(r));
        }
        for _ in 0..self.scenario.replays {
            let r = self.rng.next_u32() as usize % n;
            let at = self.at();
            self.file(at, Fault::Replay(r));
        }
    }

    fn start_workers(&mut self, i: usize) {
        let follows = self.relays[i].follows.clone();
        let mut links = Vec::new();
        for p in follows {
            let peer = &self.relays[p];
            let config = Config {
                peer_pubkey: peer.pubkey,
                relay_url: peer.url.clone(),
                own_url: self.relays[i].url.clone(),
                secret: self.relays[i].key.clone(),
                provider: crate::crypto::provider(),
                allow_private_networks: false,
                limits: SyncLimits::DEFAULT,
            };
            let rng = ChaCha20Rng::seed_from_u64(self.rng.next_u64());
            links.push(Link {
                peer: p,
                worker: Worker::new(config, self.now, rng),
                conn: None,
                inputs: VecDeque::new(),
            });
        }
        self.relays[i].links = links;
    }

    fn reachable(&self, a: usize, b: usize) -> bool {
        self.relays[a].up && self.relays[b].up && !self.partitioned.contains(&(a.min(b), a.max(b)))
    }

    /// Moves frames each session of relay `p` sent to the worker connected to it; frames to a
    /// connection no worker holds are dropped. A session that asked to close drops its worker.
    /// On the way, requests a trusted peer asked are settled (served or refused), and in the
    /// fault period an `EVENT` frame may be corrupted.
    fn collect(&mut self, p: usize) -> Check {
        let mut owners: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for (i, r) in self.relays.iter().enumerate() {
            for (l, link) in r.links.iter().enumerate() {
                if link.peer == p
                    && let Some((_, idx)) = link.conn
                {
                    owners.insert(idx, (i, l));
                }
            }
        }
        for idx in 0..self.relays[p].harness.conns.len() {
            let closed = self.relays[p].harness.conns[idx].closed.is_some();
            let frames = self.relays[p].harness.take_text(idx);
            let Some(&(i, l)) = owners.get(&idx) else {
                continue;
            };
            let follower = self.relays[i].pubkey;
            let mut delivered = Vec::with_capacity(frames.len());
            for text in frames {
                self.settle(p, idx, follower, &text)?;
                delivered.push(self.maybe_corrupt(text));
            }
            let link = &mut self.relays[i].links[l];
            let Some((conn, _)) = link.conn else { continue };
            for text in delivered {
                link.inputs.push_back(Input::Frame { conn, text });
            }
            if closed {
                link.conn = None;
                link.inputs.push_back(Input::Disconnected(conn));
            }
        }
        Ok(())
    }

    /// Records a trusted peer's on-demand request sent to relay `p` on connection `idx`.
    fn note_request(&mut self, p: usize, idx: usize, follower: &[u8; 32], text: &str) {
        if !self.relays[p].trusts(follower) {
            return;
        }
        if text.starts_with("[\"AUTH\"") {
            self.relays[p].captured_auth = Some(text.to_string());
            return;
        }
        let Some((verb, sub, _)) = verb_and_sub(text) else {
            return;
        };
        let asked = match verb.as_str() {
            "REQ" => Asked::Req,
            "COUNT" => Asked::Count,
            "NEG-OPEN" => Asked::NegOpen,
            _ => return,
        };
        self.asked.entry((p, idx)).or_default().insert(sub, asked);
    }

    /// Settles a request of `follower` waiting on relay `p`'s connection `idx` by the frame
    /// `text` the relay answered: data for the subscription means it was served, a
    /// `rate-limited:` refusal that it was not. Checks `request-budget` and `fails-closed`.
    fn settle(&mut self, p: usize, idx: usize, follower: [u8; 32], text: &str) -> Check {
        let Some((verb, sub, v)) = verb_and_sub(text) else {
            return Ok(());
        };
        let Some(waiting) = self.asked.get_mut(&(p, idx)) else {
            return Ok(());
        };
        let Some(&asked) = waiting.get(&sub) else {
            return Ok(());
        };
        let reason = v.get(2).and_then(Value::as_str).unwrap_or("");
        let served = match (asked, verb.as_str()) {
            (Asked::Req, "EVENT" | "EOSE") | (Asked::Count, "COUNT") => true,
            (Asked::NegOpen, "NEG-MSG") => true,
            (Asked::Req | Asked::Count, "CLOSED") | (Asked::NegOpen, "NEG-ERR") => {
                if reason.starts_with("rate-limited:") {
                    self.report.rate_limited += 1;
                }
                false
            }
            _ => return Ok(()),
        };
        waiting.remove(&sub);
        if !served {
            return Ok(());
        }
        self.report.admitted += 1;
        if self.relays[p].limiter_down {
            return Err((
                "fails-closed",
                format!(
                    "relay {p} served a {asked:?} of peer {} while its limiter was down",
                    hex::encode(&follower)
                ),
            ));
        }
        let now = self.now.as_millis();
        let RateLimit { period_secs, rate } = self.scenario.budget;
        let period_ms = u64::from(period_secs) * 1_000;
        let times = self.served.entry((p, follower)).or_default();
        times.push(now);
        // Over [t, now], at most `rate` at once plus `rate` a period refilled.
        for (k, &t) in times.iter().rev().enumerate() {
            let allowed = u64::from(rate) + u64::from(rate) * (now - t) / period_ms;
            if k as u64 + 1 > allowed {
                return Err((
                    "request-budget",
                    format!(
                        "relay {p} served peer {} {} requests in {} ms (budget {rate} per {period_secs} s)",
                        hex::encode(&follower),
                        k + 1,
                        now - t
                    ),
                ));
            }
        }
        Ok(())
    }

    /// In the fault period, corrupts an `EVENT` frame with the scenario's probability: its
    /// content changed under the same id, or a fresh id over the changed content (or a changed
    /// kind) with the old signature.
    fn maybe_corrupt(&mut self, text: String) -> String {
        if self.now >= self.end_of_faults || self.scenario.corrupt_permille == 0 {
            return text;
        }
        if !text.starts_with("[\"EVENT\"") {
            return text;
        }
        if self.rng.next_u32() % 1_000 >= self.scenario.corrupt_permille {
            return text;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
            return text;
        };
        let Some(Ok(mut event)) = v.get(2).map(Event::from_value) else {
            return text;
        };
        match self.rng.next_u32() % 3 {
            0 => event.content.push_str(" (altered)"),
            1 => {
                event.content.push_str(" (altered)");
                event.id = event.compute_id(crate::crypto::provider());
            }
            _ => {
                // Into a kind no scope lists by name: out of scope where kinds are listed.
                event.kind = CORRUPT_KIND;
                event.id = event.compute_id(crate::crypto::provider());
            }
        }
        v[2] = event.to_value();
        self.report.corrupted += 1;
        v.to_string()
    }

    /// Runs every output and input of every worker until all are quiet.
    fn pump(&mut self) -> Check {
        loop {
            let mut any = false;
            for i in 0..self.relays.len() {
                for l in 0..self.relays[i].links.len() {
                    while let Some(out) = self.relays[i].links[l].worker.poll() {
                        any = true;
                        self.execute(i, l, out)?;
                    }
                    if let Some(input) = self.relays[i].links[l].inputs.pop_front() {
                        any = true;
                        let now = self.now;
                        self.relays[i].links[l].worker.handle(now, input);
                    }
                }
            }
            if !any {
                return Ok(());
            }
        }
    }

    fn execute(&mut self, i: usize, l: usize, out: Output) -> Check {
        let p = self.relays[i].links[l].peer;
        match out {
            Output::FetchInfo { .. } => {
                let input = if self.reachable(i, p) {
                    Input::Info(self.relays[p].info.clone())
                } else {
                    Input::InfoFailed(InfoError::Failed("unreachable".into()))
                };
                self.relays[i].links[l].inputs.push_back(input);
            }
            Output::Connect { conn, .. } => {
                if self.reachable(i, p) {
                    let mut rng = ChaCha20Rng::seed_from_u64(self.rng.next_u64());
                    let idx = self.relays[p].harness.connect(&mut rng);
                    let link = &mut self.relays[i].links[l];
                    link.conn = Some((conn, idx));
                    link.inputs.push_back(Input::Connected(conn));
                    self.collect(p)?;
                } else {
                    self.relays[i].links[l]
                        .inputs
                        .push_back(Input::Disconnected(conn));
                }
            }
            Output::Send { conn, text } => {
                if let Some((c, idx)) = self.relays[i].links[l].conn
                    && c == conn
                {
                    let follower = self.relays[i].pubkey;
                    self.note_request(p, idx, &follower, &text);
                    self.relays[p].harness.send(idx, &text);
                    self.collect(p)?;
                }
            }
            Output::Close { conn } => {
                let link = &mut self.relays[i].links[l];
                if link.conn.is_some_and(|(c, _)| c == conn) {
                    link.conn = None;
                }
            }
            Output::Store { request, op } => {
                let reply = self.relays[i].harness.store.execute(&op);
                self.relays[i].links[l]
                    .inputs
                    .push_back(Input::Stored { request, reply });
            }
            Output::Broadcast(event) => {
                // To every session of this relay: the followers' workers connected here see it.
                for idx in 0..self.relays[i].harness.conns.len() {
                    self.relays[i]
                        .harness
                        .input(idx, relay::Input::Live(event.clone()));
                }
                self.collect(i)?;
            }
            Output::Status(_) => {}
        }
        Ok(())
    }

    /// Cuts worker `l` of relay `x`'s socket, if it has one.
    fn cut_link(&mut self, x: usize, l: usize) -> bool {
        let link = &mut self.relays[x].links[l];
        match link.conn.take() {
            Some((conn, _)) => {
                link.inputs.push_back(Input::Disconnected(conn));
                true
            }
            None => false,
        }
    }

    /// Cuts every worker socket between `a` and `b` (both ways).
    fn cut(&mut self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            for l in 0..self.relays[x].links.len() {
                if self.relays[x].links[l].peer == y && self.cut_link(x, l) {
                    self.report.cuts += 1;
                }
            }
        }
    }

    fn apply(&mut self, f: Fault) -> Check {
        match f {
            Fault::Publish { relay, event } => {
                self.report.published += 1;
                if kinds::class(event.kind) == KindClass::Ephemeral {
                    self.report.ephemeral += 1;
                }
                self.trace.line(
                    self.now,
                    json!({"publish": relay, "kind": event.kind, "up": self.relays[relay].up}),
                );
                if !self.relays[relay].up {
                    // Nobody can publish on a relay that is down.
                    return Ok(());
                }
                self.published.insert(event.id, event.clone());
                let r = &mut self.relays[relay];
                let p = match r.publisher {
                    Some(p) => p,
                    None => {
                        let mut rng = ChaCha20Rng::seed_from_u64(event.created_at);
                        let p = r.harness.connect(&mut rng);
                        r.publisher = Some(p);
                        p
                    }
                };
                r.harness
                    .send(p, &ClientMessage::Event(event.clone()).to_text());
                if kinds::class(event.kind) != KindClass::Ephemeral {
                    r.own.insert(event.id);
                }
                self.collect(relay)?;
            }
            Fault::Drop => {
                let open: Vec<(usize, usize)> = (0..self.relays.len())
                    .flat_map(|x| {
                        let links = &self.relays[x].links;
                        (0..links.len())
                            .filter(|&l| links[l].conn.is_some())
                            .map(move |l| (x, l))
                    })
                    .collect();
                if open.is_empty() {
                    return Ok(());
                }
                let (x, l) = open[self.rng.next_u32() as usize % open.len()];
                self.trace
                    .line(self.now, json!({"drop": [x, self.relays[x].links[l].peer]}));
                self.cut_link(x, l);
                self.report.drops += 1;
            }
            Fault::Partition { a, b } => {
                self.report.partitions += 1;
                self.trace.line(self.now, json!({"partition": [a, b]}));
                self.partitioned.insert((a.min(b), a.max(b)));
                self.cut(a, b);
            }
            Fault::Heal { a, b } => {
                self.trace.line(self.now, json!({"heal": [a, b]}));
                self.partitioned.remove(&(a.min(b), a.max(b)));
            }
            Fault::Crash(r) => {
                if !self.relays[r].up {
                    return Ok(());
                }
                self.report.crashes += 1;
                self.trace.line(self.now, json!({"crash": r}));
                self.relays[r].up = false;
                // Sockets into it drop; its own workers are lost with it.
                for x in 0..self.relays.len() {
                    for l in 0..self.relays[x].links.len() {
                        if self.relays[x].links[l].peer == r {
                            self.cut_link(x, l);
                        }
                    }
                }
                self.relays[r].links.clear();
                self.asked.retain(|&(p, _), _| p != r);
                // What outlives the process survives: the store and the limiter's store.
                // Sessions go.
                let node = &mut self.relays[r];
                let store = std::mem::take(&mut node.harness.store);
                let config = node.harness.config.clone();
                let mut harness = Harness::new(config, store, self.now);
                std::mem::swap(&mut harness.limiter, &mut node.harness.limiter);
                harness.limiter_down = node.harness.limiter_down;
                node.harness = harness;
                node.publisher = None;
                node.impostors.clear();
            }
            Fault::Restart(r) => {
                if self.relays[r].up {
                    return Ok(());
                }
                self.trace.line(self.now, json!({"restart": r}));
                self.relays[r].up = true;
                self.start_workers(r);
            }
            Fault::LimiterDown(r) => {
                self.report.limiter_outages += 1;
                self.trace.line(self.now, json!({"limiter_down": r}));
                self.relays[r].limiter_down = true;
                self.relays[r].harness.limiter_down = true;
            }
            Fault::LimiterUp(r) => {
                self.trace.line(self.now, json!({"limiter_up": r}));
                self.relays[r].limiter_down = false;
                self.relays[r].harness.limiter_down = false;
            }
            Fault::Replay(r) => {
                let Some(auth) = self.relays[r].captured_auth.clone() else {
                    return Ok(());
                };
                if !self.relays[r].up {
                    return Ok(());
                }
                self.report.replays += 1;
                self.trace.line(self.now, json!({"replay_auth": r}));
                let mut rng = ChaCha20Rng::seed_from_u64(self.rng.next_u64());
                let node = &mut self.relays[r];
                let idx = node.harness.connect(&mut rng);
                node.impostors.insert(idx);
                node.harness.send(idx, &auth);
                node.harness.send(idx, r#"["REQ","impostor",{}]"#);
                node.harness.send(idx, r#"["COUNT","impostor-count",{}]"#);
                // Its answers go nowhere: no worker owns the connection.
                self.collect(r)?;
            }
        }
        Ok(())
    }

    /// Every event relay `i` may hold: its own, and those its followed peers may hold and
    /// advertise in scope, to a fixpoint (a chain of follows carries events along).
    fn expected(&self) -> Vec<BTreeSet<EventId>> {
        let n = self.relays.len();
        let now = self.now;
        let mut sets: Vec<BTreeSet<EventId>> = self.relays.iter().map(|r| r.own.clone()).collect();
        loop {
            let mut changed = false;
            for i in 0..n {
                for &p in &self.relays[i].follows {
                    let source: Vec<EventId> = sets[p].iter().copied().collect();
                    for id in source {
                        let Some(e) = self.published.get(&id) else {
                            continue;
                        };
                        if self.relays[p].scopes.iter().any(|s| s.admits(e, now))
                            && sets[i].insert(id)
                        {
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                return sets;
            }
        }
    }

    /// Every event relay `i`'s store holds.
    fn held(&mut self, i: usize) -> Vec<Event> {
        let now = self.now;
        self.relays[i]
            .harness
            .store
            .query(&Filter::default(), None, usize::MAX, now)
            .unwrap_or_default()
    }

    fn check_bounds(&mut self) -> Check {
        let allowed = self.expected();
        for (i, allowed) in allowed.iter().enumerate() {
            for e in self.held(i) {
                let id = hex::encode(&e.id);
                match self.published.get(&e.id) {
                    Some(p) if *p != e => {
                        return Err((
                            "authentic",
                            format!("relay {i} holds {id} altered from what its author signed"),
                        ));
                    }
                    None => {
                        return Err((
                            "authentic",
                            format!("relay {i} holds {id}, which no author published"),
                        ));
                    }
                    Some(_) if kinds::class(e.kind) == KindClass::Ephemeral => {
                        return Err((
                            "ephemeral-never-stored",
                            format!("relay {i} stored ephemeral {id}"),
                        ));
                    }
                    Some(_) if !allowed.contains(&e.id) => {
                        return Err((
                            "never-out-of-scope",
                            format!("relay {i} holds {id} out of every scope"),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// `peer-treatment`: every session of every relay is a peer exactly when it verified an
    /// `AUTH` from a key its relay lists enabled, under the limits that go with it.
    fn check_treatment(&self) -> Check {
        let (client, peer) = (client_limits(), peer_limits());
        for (p, r) in self.relays.iter().enumerate() {
            for (idx, c) in r.harness.conns.iter().enumerate() {
                let s = &c.session;
                let authed: Vec<[u8; 32]> = s.authenticated().copied().collect();
                if r.impostors.contains(&idx) && !authed.is_empty() {
                    return Err((
                        "peer-treatment",
                        format!("relay {p} connection {idx}: a replayed AUTH authenticated"),
                    ));
                }
                let trusted = authed.iter().any(|k| r.trusts(k));
                match s.peer() {
                    Some(k) if !(r.trusts(k) && authed.contains(k)) => {
                        return Err((
                            "peer-treatment",
                            format!(
                                "relay {p} connection {idx} is peer {} without a verified AUTH from an enabled entry",
                                hex::encode(k)
                            ),
                        ));
                    }
                    Some(_) if *s.limits() != peer => {
                        return Err((
                            "peer-treatment",
                            format!("relay {p} connection {idx} is a peer under other limits"),
                        ));
                    }
                    None if trusted => {
                        return Err((
                            "peer-treatment",
                            format!(
                                "relay {p} connection {idx} authenticated an enabled peer and is not treated as one"
                            ),
                        ));
                    }
                    None if *s.limits() != client => {
                        return Err((
                            "peer-treatment",
                            format!(
                                "relay {p} connection {idx} is no peer and has other limits than a client's"
                            ),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn check_converged(&mut self) -> Check {
        let expected = self.expected();
        for (i, want) in expected.iter().enumerate() {
            let have: BTreeSet<EventId> = self.held(i).iter().map(|e| e.id).collect();
            if &have != want {
                let missing = want.difference(&have).count();
                let extra = have.difference(want).count();
                return Err((
                    "converged",
                    format!(
                        "relay {i} (follows {:?}) holds {} events, expected {}: {missing} missing, {extra} extra",
                        self.relays[i].follows,
                        have.len(),
                        want.len()
                    ),
                ));
            }
        }
        self.report.held = (0..self.relays.len())
            .map(|i| self.held(i).len() as u64)
            .sum();
        Ok(())
    }

    fn next_wakeup(&self) -> Option<Timestamp> {
        let mut next: Option<Timestamp> = self.faults.keys().next().map(|(t, _)| *t);
        let mut consider = |t: Timestamp| {
            next = Some(next.map_or(t, |n| n.min(t)));
        };
        for r in &self.relays {
            for link in &r.links {
                if let Some(w) = link.worker.poll_timeout() {
                    consider(w.at);
                }
            }
            for c in &r.harness.conns {
                if c.closed.is_none()
                    && let Some(w) = c.session.poll_timeout()
                {
                    consider(w.at);
                }
            }
        }
        next
    }

    fn tally(&mut self) {
        let mut fetched = 0;
        let mut live = 0;
        let mut out_of_scope = 0;
        let mut invalid = 0;
        let mut reconciliations = 0;
        let mut connections = 0;
        let mut splits = 0;
        for r in &self.relays {
            for link in &r.links {
                let s = link.worker.stats();
                fetched += s.fetched;
                live += s.live;
                out_of_scope += s.out_of_scope;
                invalid += s.invalid;
                reconciliations += s.reconciliations;
                connections += s.connections;
                splits += s.kind_splits + s.time_splits;
            }
        }
        // Workers lost in crashes took their counters with them: keep the largest seen.
        let r = &mut self.report;
        r.fetched = r.fetched.max(fetched);
        r.live = r.live.max(live);
        r.out_of_scope = r.out_of_scope.max(out_of_scope);
        r.invalid = r.invalid.max(invalid);
        r.reconciliations = r.reconciliations.max(reconciliations);
        r.connections = r.connections.max(connections);
        r.splits = r.splits.max(splits);
    }

    /// One step: the clock moves to `now`, due faults apply, due sessions and workers time out,
    /// and everything runs until quiet.
    fn step(&mut self, now: Timestamp) -> Check {
        if now > self.now {
            self.now = now;
        }
        let now = self.now;
        for r in &mut self.relays {
            r.harness.now = now;
        }
        let mut faulted = false;
        while let Some((&(t, tie), _)) = self.faults.iter().next() {
            if t > now {
                break;
            }
            let Some(f) = self.faults.remove(&(t, tie)) else {
                break;
            };
            self.apply(f)?;
            faulted = true;
        }
        for i in 0..self.relays.len() {
            for idx in 0..self.relays[i].harness.conns.len() {
                if self.relays[i].harness.conns[idx].closed.is_none()
                    && self.relays[i].harness.conns[idx]
                        .session
                        .poll_timeout()
                        .is_some_and(|w| w.at <= now)
                {
                    self.relays[i].harness.timeout(idx);
                }
            }
            self.collect(i)?;
            for l in 0..self.relays[i].links.len() {
                let due = self.relays[i].links[l]
                    .worker
                    .poll_timeout()
                    .is_some_and(|w| w.at <= now);
                if due {
                    self.relays[i].links[l].worker.handle_timeout(now);
                }
            }
        }
        self.pump()?;
        self.check_treatment()?;
        if faulted {
            self.tally();
            self.check_bounds()?;
        }
        Ok(())
    }
}

fn random_scopes(rng: &mut ChaCha20Rng) -> Value {
    let n = 1 + rng.next_u32() % 2;
    let mut scopes = Vec::new();
    for _ in 0..n {
        let mut scope = serde_json::Map::new();
        if !rng.next_u32().is_multiple_of(4) {
            // A subset of the kinds, some as a range.
            let mut kinds: Vec<Value> = Vec::new();
            for k in KINDS {
                if rng.next_u32().is_multiple_of(2) {
                    kinds.push(json!(k));
                }
            }
            if rng.next_u32().is_multiple_of(3) {
                kinds.push(json!([1000, 1001]));
            }
            if kinds.is_empty() {
                kinds.push(json!(1));
            }
            scope.insert("kinds".into(), Value::from(kinds));
        }
        if rng.next_u32().is_multiple_of(3) {
            let offset = u64::from(rng.next_u32() % 1_200);
            scope.insert("since".into(), json!(START.as_secs() + offset));
        }
        if rng.next_u32().is_multiple_of(4) {
            // A rolling window longer than any run: checked, never biting.
            scope.insert("windowSeconds".into(), json!(30 * 24 * 3_600));
        }
        scopes.push(Value::Object(scope));
    }
    Value::from(scopes)
}

impl scenario::World for World<'_> {
    type Report = Report;

    fn run(&mut self) -> Check {
        let settle_end = self.end_of_faults.saturating_add(SETTLE);
        let mut steps = 0u64;
        self.pump()?;
        while let Some(next) = self.next_wakeup() {
            if next > settle_end {
                break;
            }
            steps += 1;
            self.report.steps = steps;
            if steps > self.scenario.max_steps {
                return Err((
                    "event-limit",
                    format!("more than {} steps", self.scenario.max_steps),
                ));
            }
            self.step(next)?;
        }
        self.now = self.now.max(settle_end);
        self.pump()?;
        self.tally();
        self.check_treatment()?;
        self.check_bounds()?;
        self.check_converged()
    }

    fn now(&self) -> Timestamp {
        self.now
    }

    fn report(&mut self) -> &mut Report {
        &mut self.report
    }
}

/// The end of every run is past the last reconciliation interval after healing.
const _: () = assert!(SETTLE.as_secs() > RECONCILE_INTERVAL.as_secs());
