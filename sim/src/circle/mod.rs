//! `weft sim circle`: NAP-MESH shells ([`weft_proto::circle::Shell`], unchanged) on a random
//! circle of devices plus strangers linked at the transport, in virtual time, under partitions,
//! crashes and loss, with the spec's invariants checked on every output.
//!
//! The world: `devices` members, each paired with about `degree` others at random (a connected
//! graph: a random spanning tree first, then random extra edges), and `strangers` more devices
//! that hold a circle key and a transport link to a few members but no pairing. Every pairing is
//! also a transport link. Each device runs one napplet with the `mesh` grant that publishes
//! (kind 1, or ephemeral 20666) with a random `ttl` 0–6 and subscribes with a random `ttl` 0–4.
//!
//! Faulty phase (`duration`): frames take 5–50 ms and are lost with `loss_permille`; every
//! `partition_every` a random third of the devices is cut off for a while (their links go down
//! on both sides, frames in flight are lost); every `crash_every` a device crashes (its shell and
//! everything in memory are gone, its store is kept) and restarts a while later with its key and
//! pairings. Calm phase (`heal` long, then a final round): every link up, no loss, every frame
//! exactly 20 ms, and one more publish per device.
//!
//! Invariants, named as a violation reports them:
//!
//! - **strangers-never-reached**: a shell sends a frame only on a link to a device it is paired
//!   with (§4, §5 "Trust, not proximity": strangers never receive a publish, are never asked for
//!   backlog or about a blob).
//! - **forward-once**: a shell incarnation sends a given event id at most once on any link
//!   (§4 "forward a given event id at most once").
//! - **hop-budget**: an event is delivered only on devices within its effective `ttl` circle
//!   hops of its origin, and no member frame carries more than the clamp allows (a publish at
//!   most `publishTtl - 1` beyond the first hop, a forwarded one at most `FORWARD_CLAMP - 1`).
//! - **ttl-clamped**: a publish result's `ttl` is `min(asked, publishTtl)`, an `eose`'s is
//!   `min(asked, subscribeTtl)`.
//! - **one-eose**: each subscription gets exactly one `mesh.eose` (unless its device crashed
//!   first), and it comes before any member's backlog could (no event for a subscription is
//!   delivered before its eose other than this device's own kept events).
//! - **no-duplicate-delivery**: an event id is delivered at most once per subscription.
//! - **backlog-time-bound**: no backlog answer reaches a subscription later than
//!   [`BACKLOG_BUDGET_MS`] after it was opened (§4 "bound a backlog request in time").
//! - **calm-reach**: a publish of the calm phase reaches every live subscription of every member
//!   within its effective `ttl` hops (equal latency: the first copy is the shortest path's).
//! - **deadline-advances** and **event-limit**: the machine contract and the run's bound.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};
use weft_proto::circle::member::MemberFrame;
use weft_proto::circle::napplet::Reply;
use weft_proto::circle::pairing::pairing_record;
use weft_proto::circle::shell::{Input, NappletId, Output, Shell, ShellConfig};
use weft_proto::circle::{BACKLOG_BUDGET_MS, FORWARD_CLAMP, is_ephemeral};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, EventId};

use crate::scenario::{START, Violation};

/// The one napplet every device runs.
const APP: NappletId = NappletId(1);

/// How a run is shaped. [`Scenario::small`] is the suite's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Seeds everything.
    pub seed: u64,
    /// Circle members.
    pub devices: usize,
    /// Strangers on the transport.
    pub strangers: usize,
    /// Pairings per member, about.
    pub degree: usize,
    /// How long the faulty phase lasts.
    pub duration: Duration,
    /// How long the calm phase lasts before its final round.
    pub heal: Duration,
    /// Frames lost in the faulty phase, per thousand.
    pub loss_permille: u32,
    /// Mean time between partitions (`None`: never).
    pub partition_every: Option<Duration>,
    /// Mean time between crashes (`None`: never).
    pub crash_every: Option<Duration>,
    /// Mean time between one device's napplet actions in the faulty phase.
    pub act_every: Duration,
    /// Events a run may take at most.
    pub max_events: u64,
}

impl Scenario {
    /// The suite's size: 16 members, 3 strangers, 20 s of faults.
    pub fn small(seed: u64) -> Self {
        Self {
            seed,
            devices: 16,
            strangers: 3,
            degree: 3,
            duration: Duration::from_secs(20),
            heal: Duration::from_secs(15),
            loss_permille: 20,
            partition_every: Some(Duration::from_secs(8)),
            crash_every: Some(Duration::from_secs(10)),
            act_every: Duration::from_secs(6),
            max_events: 2_000_000,
        }
    }

    /// The size the suite sweeps hundreds of seeds at: 6 members, 2 strangers, 10 s of faults
    /// with a partition every 3 s and a crash every 4 s, so every run still sees partitions,
    /// crashes, loss, second-path copies and members' backlog, at a small cost per seed.
    pub fn sweep(seed: u64) -> Self {
        Self {
            devices: 6,
            strangers: 2,
            duration: Duration::from_secs(10),
            heal: Duration::from_secs(5),
            loss_permille: 30,
            partition_every: Some(Duration::from_secs(3)),
            crash_every: Some(Duration::from_secs(4)),
            act_every: Duration::from_secs(2),
            ..Self::small(seed)
        }
    }

    /// The scale: 1 000 members about 3 pairings each and 100 strangers on the
    /// transport, 10 s of faults (a partition every 3 s, a crash every 2 s, 2 % loss), each
    /// device acting about every 20 s, so that the run fits the suite in a debug build.
    pub fn thousand(seed: u64) -> Self {
        Self {
            devices: 1_000,
            strangers: 100,
            degree: 3,
            duration: Duration::from_secs(10),
            heal: Duration::from_secs(5),
            loss_permille: 20,
            partition_every: Some(Duration::from_secs(3)),
            crash_every: Some(Duration::from_secs(2)),
            act_every: Duration::from_secs(20),
            max_events: 200_000_000,
            ..Self::small(seed)
        }
    }
}

/// How far back a simulated napplet's subscription asks for backlog, in seconds: members answer
/// with what they kept lately (what a partition or a crash made a device miss), not with every
/// event of the run, which would make each subscription's cost grow with the run's length.
const BACKLOG_WINDOW_SECS: u64 = 10;

/// What a run counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Members and strangers.
    pub devices: u64,
    /// Pairings (circle edges).
    pub edges: u64,
    /// Publishes made.
    pub publishes: u64,
    /// Subscriptions opened.
    pub subscriptions: u64,
    /// `mesh.event` deliveries.
    pub deliveries: u64,
    /// Of those, members' backlog answers.
    pub backlog_deliveries: u64,
    /// Member frames sent.
    pub frames: u64,
    /// Frames lost (loss, partitions, crashes).
    pub lost: u64,
    /// Ids forwarded, all shells together.
    pub forwarded: u64,
    /// Copies dropped as already seen, all shells together.
    pub duplicates: u64,
    /// Partitions.
    pub partitions: u64,
    /// Crashes.
    pub crashes: u64,
    /// Events the run took.
    pub events: u64,
}

impl Report {
    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": "circle", "seed": self.seed, "devices": self.devices, "edges": self.edges,
            "publishes": self.publishes, "subscriptions": self.subscriptions,
            "deliveries": self.deliveries, "backlog_deliveries": self.backlog_deliveries,
            "frames": self.frames, "lost": self.lost, "forwarded": self.forwarded,
            "duplicates": self.duplicates, "partitions": self.partitions,
            "crashes": self.crashes, "events": self.events,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circle seed {}: {} devices, {} edges; {} publishes, {} subscriptions, {} deliveries \
             ({} backlog); {} frames ({} lost), {} forwarded, {} duplicates dropped; \
             {} partitions, {} crashes; {} events",
            self.seed,
            self.devices,
            self.edges,
            self.publishes,
            self.subscriptions,
            self.deliveries,
            self.backlog_deliveries,
            self.frames,
            self.lost,
            self.forwarded,
            self.duplicates,
            self.partitions,
            self.crashes,
            self.events
        )
    }
}

#[derive(Debug)]
enum Ev {
    Frame {
        link: usize,
        to_b: bool,
        epoch: u64,
        text: String,
    },
    Wake(usize),
    Act(usize),
    Partition,
    Heal,
    Crash,
    Restart(usize),
    Calm,
    FinalRound,
}

struct Link {
    a: usize,
    b: usize,
    up: bool,
    epoch: u64,
}

struct Sub {
    opened: Timestamp,
    ttl: u8,
    eose: bool,
    delivered: BTreeSet<EventId>,
    incarnation: u64,
}

struct Device {
    secret: Secp256k1Secret,
    key: [u8; 32],
    stranger: bool,
    shell: Option<Shell<ChaCha20Rng>>,
    incarnation: u64,
    store: Vec<Event>,
    subs: BTreeMap<String, Sub>,
    /// Per incarnation: (event id, link) pairs sent.
    sent: BTreeSet<(EventId, usize)>,
    cut: bool,
}

struct World<'a> {
    s: &'a Scenario,
    rng: ChaCha20Rng,
    provider: &'static dyn CryptoProvider,
    now: Timestamp,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    evs: BTreeMap<u64, Ev>,
    seq: u64,
    devices: Vec<Device>,
    links: Vec<Link>,
    /// A device's links: conn id → link index (conn 2i at a, 2i+1 at b).
    paired: BTreeSet<(usize, usize)>,
    pairings: Vec<Vec<Event>>,
    dist: Vec<Vec<u32>>,
    /// Published events: id → (origin, effective ttl, calm).
    published: BTreeMap<EventId, (usize, u8, bool)>,
    calm: bool,
    report: Report,
    next_sub: u64,
    violation_slot: Option<(&'static str, String)>,
    /// What the frame being handled carries: a flooded event, a backlog answer, or neither.
    carrying: Carrying,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Carrying {
    Other,
    Flood,
    Backlog,
}

type Check = Result<(), (&'static str, String)>;

fn conn_of(link: usize, b_side: bool) -> ConnId {
    ConnId(2 * link as u64 + u64::from(b_side))
}

impl<'a> World<'a> {
    fn at(&mut self, after: Duration, ev: Ev) {
        self.seq += 1;
        let t = self.now.saturating_add(after).as_millis();
        self.queue.push(Reverse((t, self.seq)));
        self.evs.insert(self.seq, ev);
    }

    fn exp(&mut self, mean: Duration) -> Duration {
        let u = (self.rng.next_u32() as f64 + 1.0) / (u32::MAX as f64 + 2.0);
        Duration::from_secs_f64(-u.ln() * mean.as_secs_f64())
    }

    fn shell_config() -> ShellConfig {
        ShellConfig::default()
    }

    fn new(s: &'a Scenario) -> Self {
        let provider = crate::crypto::provider();
        let mut rng = ChaCha20Rng::seed_from_u64(s.seed);
        let total = s.devices + s.strangers;
        let devices: Vec<Device> = (0..total)
            .map(|i| {
                let secret = generate_secp256k1(provider, &mut rng);
                let key = provider.schnorr_public_key(&secret).expect("a key");
                Device {
                    secret,
                    key,
                    stranger: i >= s.devices,
                    shell: None,
                    incarnation: 0,
                    store: Vec::new(),
                    subs: BTreeMap::new(),
                    sent: BTreeSet::new(),
                    cut: false,
                }
            })
            .collect();
        Self {
            s,
            rng,
            provider,
            now: START,
            queue: BinaryHeap::new(),
            evs: BTreeMap::new(),
            seq: 0,
            devices,
            links: Vec::new(),
            paired: BTreeSet::new(),
            pairings: vec![Vec::new(); total],
            dist: Vec::new(),
            published: BTreeMap::new(),
            calm: false,
            report: Report {
                seed: s.seed,
                devices: total as u64,
                ..Report::default()
            },
            next_sub: 0,
            violation_slot: None,
            carrying: Carrying::Other,
        }
    }

    fn build(&mut self) {
        let n = self.s.devices;
        let mut edges = BTreeSet::new();
        for i in 1..n {
            let j = (self.rng.next_u64() % i as u64) as usize;
            edges.insert((j, i));
        }
        let extra = n * self.s.degree.saturating_sub(2) / 2;
        for _ in 0..extra {
            let a = (self.rng.next_u64() % n as u64) as usize;
            let b = (self.rng.next_u64() % n as u64) as usize;
            if a != b {
                edges.insert((a.min(b), a.max(b)));
            }
        }
        for &(a, b) in &edges {
            self.paired.insert((a, b));
            self.paired.insert((b, a));
            self.links.push(Link {
                a,
                b,
                up: true,
                epoch: 0,
            });
            for (x, y) in [(a, b), (b, a)] {
                let record = pairing_record(
                    self.provider,
                    &self.devices[x].secret,
                    &mut self.rng,
                    &self.devices[y].key,
                    START.as_secs(),
                )
                .expect("a record");
                self.pairings[a].push(record.clone());
                self.pairings[b].push(record);
            }
        }
        self.report.edges = edges.len() as u64;
        // Strangers: a transport link to two members each, and to each other.
        for st in n..n + self.s.strangers {
            for _ in 0..2 {
                let m = (self.rng.next_u64() % n.max(1) as u64) as usize;
                self.links.push(Link {
                    a: st,
                    b: m,
                    up: true,
                    epoch: 0,
                });
            }
        }
        // Circle distances (members only), by breadth-first search over adjacency lists.
        let mut adj = vec![Vec::new(); n];
        for &(a, b) in &edges {
            adj[a].push(b);
            adj[b].push(a);
        }
        self.dist = (0..n)
            .map(|src| {
                let mut d = vec![u32::MAX; n];
                d[src] = 0;
                let mut q = VecDeque::from([src]);
                while let Some(x) = q.pop_front() {
                    for &y in &adj[x] {
                        if d[y] == u32::MAX {
                            d[y] = d[x] + 1;
                            q.push_back(y);
                        }
                    }
                }
                d
            })
            .collect();
        for d in 0..self.devices.len() {
            self.boot(d);
        }
    }

    fn boot(&mut self, d: usize) {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        let shell = Shell::new(
            self.provider,
            self.devices[d].secret.clone(),
            ChaCha20Rng::from_seed(seed),
            Self::shell_config(),
        )
        .expect("a shell");
        let dev = &mut self.devices[d];
        dev.shell = Some(shell);
        dev.incarnation += 1;
        dev.sent.clear();
        dev.subs.clear();
        let records = self.pairings[d].clone();
        self.input(d, Input::Online(true));
        self.input(d, Input::Grant(APP));
        for r in records {
            self.input(d, Input::PairingRecord(r));
        }
        for i in 0..self.links.len() {
            let l = &self.links[i];
            if (l.a == d || l.b == d) && self.link_live(i) {
                self.link_up(i);
            }
        }
    }

    fn link_live(&self, i: usize) -> bool {
        let l = &self.links[i];
        let (a, b) = (&self.devices[l.a], &self.devices[l.b]);
        a.shell.is_some() && b.shell.is_some() && a.cut == b.cut
    }

    fn link_up(&mut self, i: usize) {
        let (a, b) = (self.links[i].a, self.links[i].b);
        self.links[i].up = true;
        let (ka, kb) = (self.devices[a].key, self.devices[b].key);
        self.input(
            a,
            Input::LinkUp {
                link: conn_of(i, false),
                key: kb,
            },
        );
        self.input(
            b,
            Input::LinkUp {
                link: conn_of(i, true),
                key: ka,
            },
        );
    }

    fn link_down(&mut self, i: usize) {
        if !self.links[i].up {
            return;
        }
        self.links[i].up = false;
        self.links[i].epoch += 1;
        let (a, b) = (self.links[i].a, self.links[i].b);
        if self.devices[a].shell.is_some() {
            self.input(a, Input::LinkDown(conn_of(i, false)));
        }
        if self.devices[b].shell.is_some() {
            self.input(b, Input::LinkDown(conn_of(i, true)));
        }
    }

    fn input(&mut self, d: usize, input: Input) {
        if let Some(shell) = self.devices[d].shell.as_mut() {
            shell.handle(self.now, input);
        }
        if let Err(v) = self.drain(d) {
            self.violation_slot.get_or_insert(v);
        }
    }

    fn drain(&mut self, d: usize) -> Check {
        let mut answers = VecDeque::new();
        loop {
            while let Some(out) = self.devices[d].shell.as_mut().and_then(Machine::poll) {
                match out {
                    Output::ToNapplet { reply, .. } => self.reply(d, reply)?,
                    Output::ToLink { link, frame } => self.send(d, link, frame)?,
                    Output::Store(e) => {
                        if is_ephemeral(e.kind) {
                            return Err((
                                "hop-budget",
                                format!("device {d} asked to keep an ephemeral event"),
                            ));
                        }
                        if !self.devices[d].store.iter().any(|x| x.id == e.id) {
                            self.devices[d].store.push(e);
                        }
                    }
                    Output::ReadBacklog { token, filters } => {
                        let events: Vec<Event> = self.devices[d]
                            .store
                            .iter()
                            .filter(|e| filters.iter().any(|f| f.matches(e)))
                            .cloned()
                            .collect();
                        answers.push_back(Input::Backlog {
                            token,
                            events: Some(events),
                        });
                    }
                    Output::CheckBlobs { token, .. } => answers.push_back(Input::BlobsHeld {
                        token,
                        held: Vec::new(),
                    }),
                    // No device makes or accepts an invite in this scenario: pairings are set up
                    // at the start, and a pairing frame a shell sent anyway would be a frame on a
                    // link the checks below do not see.
                    Output::Pairing(_) | Output::Invite(_) | Output::Paired { .. } => {}
                    Output::ToLinkPair { .. } => {
                        return Err((
                            "strangers-never-reached",
                            format!("device {d} sent a pairing frame nobody asked for"),
                        ));
                    }
                }
            }
            match answers.pop_front() {
                Some(i) => {
                    if let Some(s) = self.devices[d].shell.as_mut() {
                        s.handle(self.now, i);
                    }
                }
                None => break,
            }
        }
        if let Some(w) = self.devices[d]
            .shell
            .as_ref()
            .and_then(Machine::poll_timeout)
        {
            let after =
                Duration::from_millis(w.at.as_millis().saturating_sub(self.now.as_millis()));
            self.at(after, Ev::Wake(d));
        }
        Ok(())
    }

    fn send(&mut self, d: usize, conn: ConnId, frame: MemberFrame) -> Check {
        let i = (conn.0 / 2) as usize;
        let b_side = conn.0 % 2 == 1;
        let Some(l) = self.links.get(i) else {
            return Err((
                "strangers-never-reached",
                format!("device {d} sent on no link {conn:?}"),
            ));
        };
        let far = if b_side { l.a } else { l.b };
        if !self.paired.contains(&(d, far)) {
            return Err((
                "strangers-never-reached",
                format!("device {d} sent {frame:?} to {far}, not its member"),
            ));
        }
        if let MemberFrame::Publish { ttl, event } = &frame {
            if !self.devices[d].sent.insert((event.id, i)) {
                return Err((
                    "forward-once",
                    format!("device {d} sent {} twice on link {i}", event.id_hex()),
                ));
            }
            let cap = Self::shell_config().limits.publish_ttl.max(FORWARD_CLAMP);
            if *ttl >= cap {
                return Err(("hop-budget", format!("device {d} sent ttl {ttl}")));
            }
        }
        if let MemberFrame::Req { ttl, budget_ms, .. } = &frame {
            let cap = Self::shell_config().limits.subscribe_ttl.max(FORWARD_CLAMP);
            if *ttl >= cap || *budget_ms > BACKLOG_BUDGET_MS {
                return Err((
                    "hop-budget",
                    format!("device {d} asked for backlog with ttl {ttl}, budget {budget_ms} ms"),
                ));
            }
        }
        self.report.frames += 1;
        let lossy = !self.calm && self.rng.next_u32() % 1000 < self.s.loss_permille;
        if lossy || !l.up {
            self.report.lost += 1;
            return Ok(());
        }
        let latency = if self.calm {
            20
        } else {
            5 + u64::from(self.rng.next_u32() % 46)
        };
        let epoch = l.epoch;
        self.at(
            Duration::from_millis(latency),
            Ev::Frame {
                link: i,
                to_b: !b_side,
                epoch,
                text: frame.to_text(),
            },
        );
        Ok(())
    }

    fn reply(&mut self, d: usize, reply: Reply) -> Check {
        let now = self.now;
        match reply {
            Reply::PublishResult {
                outcome: Ok((event, ttl)),
                ..
            } => {
                let (_, want, _) = *self.published.get(&event.id).unwrap_or(&(d, ttl, false));
                if ttl != want {
                    return Err((
                        "ttl-clamped",
                        format!("publish result ttl {ttl}, want {want}"),
                    ));
                }
            }
            Reply::Eose { sub_id, ttl } => {
                let Some(sub) = self.devices[d].subs.get_mut(&sub_id) else {
                    return Err(("one-eose", format!("device {d}: eose for unknown {sub_id}")));
                };
                if sub.eose {
                    return Err(("one-eose", format!("device {d}: second eose for {sub_id}")));
                }
                if ttl != sub.ttl {
                    return Err(("ttl-clamped", format!("eose ttl {ttl}, want {}", sub.ttl)));
                }
                sub.eose = true;
            }
            Reply::Event { sub_id, event } => {
                self.report.deliveries += 1;
                let local = self.devices[d].store.iter().any(|e| e.id == event.id);
                let Some(sub) = self.devices[d].subs.get_mut(&sub_id) else {
                    return Err((
                        "one-eose",
                        format!("device {d}: event for unknown {sub_id}"),
                    ));
                };
                if !sub.delivered.insert(event.id) {
                    return Err((
                        "no-duplicate-delivery",
                        format!("device {d} sub {sub_id}: {} twice", event.id_hex()),
                    ));
                }
                if !sub.eose && !local {
                    return Err((
                        "one-eose",
                        format!("device {d} sub {sub_id}: a member's event before eose"),
                    ));
                }
                let since = now.as_millis().saturating_sub(sub.opened.as_millis());
                if self.carrying == Carrying::Backlog {
                    self.report.backlog_deliveries += 1;
                    if since > BACKLOG_BUDGET_MS {
                        return Err((
                            "backlog-time-bound",
                            format!(
                                "device {d} sub {sub_id}: a backlog answer {since} ms after it opened"
                            ),
                        ));
                    }
                }
                if let Some(&(origin, ttl, _)) = self.published.get(&event.id)
                    && self.carrying == Carrying::Flood
                    && d < self.s.devices
                    && self.dist[origin][d] > u32::from(ttl)
                {
                    return Err((
                        "hop-budget",
                        format!(
                            "device {d} got an event of {origin} at distance {} with ttl {ttl}",
                            self.dist[origin][d]
                        ),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn act(&mut self, d: usize) {
        if self.devices[d].shell.is_none() || self.devices[d].stranger {
            return;
        }
        if self.rng.next_u32().is_multiple_of(3) {
            self.subscribe(d);
        } else {
            self.publish(d, None);
        }
    }

    fn publish(&mut self, d: usize, ttl: Option<u8>) {
        let ttl = ttl.unwrap_or((self.rng.next_u32() % 7) as u8);
        let kind = if self.rng.next_u32().is_multiple_of(4) {
            20_666
        } else {
            1
        };
        self.report.publishes += 1;
        let n = self.report.publishes;
        let text = json!({"type": "mesh.publish", "id": format!("p{n}"),
            "event": {"kind": kind, "content": format!("{d}/{n}"), "tags": []}, "ttl": ttl})
        .to_string();
        let cap = Self::shell_config().limits.publish_ttl;
        // The id is known only once signed: record it from the result.
        if let Some(shell) = self.devices[d].shell.as_mut() {
            shell.handle(self.now, Input::Napplet { napplet: APP, text });
        }
        let mut pending = VecDeque::new();
        while let Some(o) = self.devices[d].shell.as_mut().and_then(Machine::poll) {
            if let Output::ToNapplet {
                reply:
                    Reply::PublishResult {
                        outcome: Ok((e, _)),
                        ..
                    },
                ..
            } = &o
            {
                self.published.insert(e.id, (d, ttl.min(cap), self.calm));
            }
            pending.push_back(o);
        }
        for o in pending {
            let r = match o {
                Output::ToNapplet { reply, .. } => self.reply(d, reply),
                Output::ToLink { link, frame } => self.send(d, link, frame),
                Output::Store(e) => {
                    self.devices[d].store.push(e);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(v) = r {
                self.violation_slot.get_or_insert(v);
            }
        }
        if let Err(v) = self.drain(d) {
            self.violation_slot.get_or_insert(v);
        }
    }

    fn subscribe(&mut self, d: usize) {
        let ttl = (self.rng.next_u32() % 5) as u8;
        self.next_sub += 1;
        let sub_id = format!("s{}", self.next_sub);
        self.report.subscriptions += 1;
        let cap = Self::shell_config().limits.subscribe_ttl;
        let inc = self.devices[d].incarnation;
        self.devices[d].subs.insert(
            sub_id.clone(),
            Sub {
                opened: self.now,
                ttl: ttl.min(cap),
                eose: false,
                delivered: BTreeSet::new(),
                incarnation: inc,
            },
        );
        let since = self.now.as_secs().saturating_sub(BACKLOG_WINDOW_SECS);
        let text = json!({"type": "mesh.subscribe", "id": sub_id, "subId": sub_id,
            "filters": [{"kinds": [1, 20666], "since": since}], "ttl": ttl})
        .to_string();
        self.input(d, Input::Napplet { napplet: APP, text });
        if self.devices[d].subs.get(&sub_id).is_some_and(|s| !s.eose) {
            self.violation_slot.get_or_insert((
                "one-eose",
                format!("device {d}: no eose for {sub_id} at once"),
            ));
        }
    }
}

/// Runs `scenario`: the report, or the first violation.
pub fn run(scenario: &Scenario) -> Result<Report, Box<Violation<Report>>> {
    let mut w = World::new(scenario);
    w.build();
    let n = scenario.devices;
    for d in 0..n {
        let after = w.exp(scenario.act_every);
        w.at(after, Ev::Act(d));
    }
    if let Some(p) = scenario.partition_every {
        let after = w.exp(p);
        w.at(after, Ev::Partition);
    }
    if let Some(c) = scenario.crash_every {
        let after = w.exp(c);
        w.at(after, Ev::Crash);
    }
    w.at(scenario.duration, Ev::Calm);
    w.at(scenario.duration + scenario.heal, Ev::FinalRound);
    let end = START.saturating_add(scenario.duration + scenario.heal + Duration::from_secs(15));
    let mut calm_subs: Vec<(usize, String)> = Vec::new();
    while let Some(Reverse((t, seq))) = w.queue.pop() {
        if w.violation_slot.is_some() {
            break;
        }
        w.report.events += 1;
        if w.report.events > scenario.max_events {
            w.violation_slot = Some((
                "event-limit",
                format!("more than {} events", scenario.max_events),
            ));
            break;
        }
        let Some(ev) = w.evs.remove(&seq) else {
            continue;
        };
        w.now = Timestamp::from_millis(t);
        if w.now > end {
            break;
        }
        match ev {
            Ev::Frame {
                link,
                to_b,
                epoch,
                text,
            } => {
                let l = &w.links[link];
                if !l.up || l.epoch != epoch {
                    w.report.lost += 1;
                    continue;
                }
                let d = if to_b { l.b } else { l.a };
                w.carrying = match MemberFrame::parse(&text) {
                    Ok(MemberFrame::Publish { .. }) => Carrying::Flood,
                    Ok(MemberFrame::Backlog { .. }) => Carrying::Backlog,
                    _ => Carrying::Other,
                };
                w.input(
                    d,
                    Input::Link {
                        link: conn_of(link, to_b),
                        text,
                    },
                );
                w.carrying = Carrying::Other;
            }
            Ev::Wake(d) => {
                let now = w.now;
                let due = w.devices[d]
                    .shell
                    .as_ref()
                    .and_then(Machine::poll_timeout)
                    .is_some_and(|x| x.at <= now);
                if due {
                    if let Some(s) = w.devices[d].shell.as_mut() {
                        s.handle_timeout(now);
                        if let Some(x) = s.poll_timeout()
                            && x.at <= now
                        {
                            w.violation_slot =
                                Some(("deadline-advances", format!("device {d}: {}", x.reason)));
                        }
                    }
                    if let Err(v) = w.drain(d) {
                        w.violation_slot.get_or_insert(v);
                    }
                }
            }
            Ev::Act(d) => {
                if !w.calm {
                    w.act(d);
                    let after = w.exp(scenario.act_every);
                    w.at(after, Ev::Act(d));
                }
            }
            Ev::Partition => {
                if w.calm {
                    continue;
                }
                w.report.partitions += 1;
                for d in 0..w.devices.len() {
                    w.devices[d].cut = w.rng.next_u32().is_multiple_of(3);
                }
                for i in 0..w.links.len() {
                    if !w.link_live(i) {
                        w.link_down(i);
                    }
                }
                let down = w.exp(Duration::from_secs(3));
                w.at(down, Ev::Heal);
                let next = w.exp(
                    scenario
                        .partition_every
                        .unwrap_or(Duration::from_secs(3600)),
                );
                w.at(down + next, Ev::Partition);
            }
            Ev::Heal => {
                for d in 0..w.devices.len() {
                    w.devices[d].cut = false;
                }
                for i in 0..w.links.len() {
                    if !w.links[i].up && w.link_live(i) {
                        w.link_up(i);
                    }
                }
            }
            Ev::Crash => {
                if w.calm {
                    continue;
                }
                let d = (w.rng.next_u64() % w.devices.len() as u64) as usize;
                if w.devices[d].shell.is_some() {
                    w.report.crashes += 1;
                    for i in 0..w.links.len() {
                        if w.links[i].a == d || w.links[i].b == d {
                            w.link_down(i);
                        }
                    }
                    if let Some(s) = w.devices[d].shell.take() {
                        w.report.forwarded += s.stats().forwarded;
                        w.report.duplicates += s.stats().duplicates;
                    }
                    let down = w.exp(Duration::from_secs(2));
                    w.at(down, Ev::Restart(d));
                }
                let next = w.exp(scenario.crash_every.unwrap_or(Duration::from_secs(3600)));
                w.at(next, Ev::Crash);
            }
            Ev::Restart(d) => {
                if w.devices[d].shell.is_none() {
                    w.boot(d);
                }
            }
            Ev::Calm => {
                w.calm = true;
                for d in 0..w.devices.len() {
                    w.devices[d].cut = false;
                    if w.devices[d].shell.is_none() {
                        w.boot(d);
                    }
                }
                for i in 0..w.links.len() {
                    if !w.links[i].up && w.link_live(i) {
                        w.link_up(i);
                    }
                }
                // One live subscription per member, opened in calm.
                for d in 0..n {
                    w.next_sub += 1;
                    let id = format!("calm{}", w.next_sub);
                    let inc = w.devices[d].incarnation;
                    w.devices[d].subs.insert(
                        id.clone(),
                        Sub {
                            opened: w.now,
                            ttl: 0,
                            eose: false,
                            delivered: BTreeSet::new(),
                            incarnation: inc,
                        },
                    );
                    let text = json!({"type": "mesh.subscribe", "id": id, "subId": id,
                        "filters": [{"kinds": [1, 20666]}], "ttl": 0})
                    .to_string();
                    w.input(d, Input::Napplet { napplet: APP, text });
                    calm_subs.push((d, id));
                }
            }
            Ev::FinalRound => {
                for d in 0..n {
                    w.publish(d, None);
                }
            }
        }
    }
    if w.violation_slot.is_none() {
        // calm-reach: every calm publish reached every member within its ttl.
        'outer: for (id, &(origin, ttl, calm)) in &w.published {
            if !calm {
                continue;
            }
            for (d, sub) in &calm_subs {
                if w.dist[origin][*d] <= u32::from(ttl)
                    && !w.devices[*d]
                        .subs
                        .get(sub)
                        .is_some_and(|s| s.delivered.contains(id))
                {
                    w.violation_slot = Some((
                        "calm-reach",
                        format!(
                            "device {d} (distance {}) missed a ttl {ttl} publish of {origin}",
                            w.dist[origin][*d]
                        ),
                    ));
                    break 'outer;
                }
            }
        }
        // one-eose: every subscription of a device still in its incarnation got one.
        for (d, dev) in w.devices.iter().enumerate() {
            for (id, s) in &dev.subs {
                if s.incarnation == dev.incarnation && !s.eose {
                    w.violation_slot
                        .get_or_insert(("one-eose", format!("device {d}: {id} never got eose")));
                }
            }
        }
    }
    for dev in &w.devices {
        if let Some(s) = &dev.shell {
            w.report.forwarded += s.stats().forwarded;
            w.report.duplicates += s.stats().duplicates;
        }
    }
    let at = Duration::from_millis(w.now.as_millis() - START.as_millis());
    match w.violation_slot.take() {
        None => Ok(w.report),
        Some((invariant, detail)) => Err(Box::new(Violation {
            invariant,
            detail,
            seed: scenario.seed,
            at,
            report: w.report,
        })),
    }
}
