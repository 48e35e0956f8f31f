//! The simulated network's links, shared by every scenario (issue #8: "latency drawn from a
//! distribution, loss, duplication, reordering, bandwidth, partitions that heal"), so each rule
//! lives here once:
//!
//! - **Latency** is drawn per message: a base plus a heavy-tailed jitter (a Lomax, or Pareto II,
//!   of shape 2 whose mean is [`LinkFaults::jitter`], capped at [`JITTER_CAP`] times it), in
//!   integer arithmetic only so no float library can make two machines disagree about a trace.
//! - **Every link is a reliable ordered stream** (WebSocket and TCP, and the mesh's data channels,
//!   which Minca opens ordered and reliable): a message arrives no earlier than the one sent
//!   before it on the same direction ([`Links::send`]: arrival = max(the direction's last
//!   arrival, sent + latency)), so nothing is reordered on a stream.
//! - **Bandwidth**: each direction serializes its messages at its [`Kind`]'s rate (or the rate
//!   [`Bandwidth`] names), one after the other: a message waits until the one before it is
//!   through.
//! - **Loss** on a stream is never the loss of a message: the transport sends a lost segment
//!   again after a retransmission timeout ([`RTO`], doubling, at most [`MAX_RETRANSMITS`] times),
//!   so a loss shows as a delay, and every later message of the stream waits behind it
//!   (head-of-line blocking). On a stream nothing is lost or duplicated at the message level.
//! - **Duplication** is not a stream's: it is what an application above one does. A Minca relay
//!   may hand a node the same blob twice (a real Nostr relay was seen to), which a scenario draws
//!   with [`Links::duplicate`] and sends as a second message on the same stream. Two relays
//!   deliver in any order because each socket draws its own latencies.
//! - **Partitions** ([`Partition`]): during the faulty phase, at a mean interval, a random set
//!   of at most a third ([`MAX_PARTITION_SHARE`]) of the places (nodes, relays, realm servers,
//!   clients) of one region is cut from the rest of the network for a drawn time, then healed,
//!   always before the faulty phase ends. A scenario says what its regions are (the whole
//!   network, or one per group that shares a network, such as a space's nodes with the relays). A stream across the cut stalls and is dropped when the cut starts (as a
//!   transport's timeout would after a while; both ends are told it closed, and what was on the
//!   way across is never delivered), a dial across fails, and nothing crosses: each scenario
//!   checks **nothing-crosses-a-partition** on every delivery.
//!
//! Every draw comes from the link layer's own random stream, and every operation on a message is
//! O(1): no scan over links per message (a partition's start scans a scenario's streams once).

use std::fmt;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::Rng;
use serde_json::{Value, json};
use weft_proto::core::Timestamp;

/// The first retransmission timeout after a loss: Linux's minimum RTO (RFC 6298 asks for 1 s,
/// which every deployed stack undercuts on low-latency paths). It doubles on each loss of the
/// same message.
pub const RTO: Duration = Duration::from_millis(200);

/// The most times one message is lost in a row before it gets through. A real stream gives up
/// after about fifteen and resets the connection; the scenarios' drops already cover resets, so
/// a loss only delays (200 ms + 400 ms + … + 3.2 s = 6.2 s at most).
pub const MAX_RETRANSMITS: u32 = 5;

/// The heavy-tailed jitter is capped at this many times its mean: a tail without a cap would now
/// and then draw a delay longer than the run.
pub const JITTER_CAP: u32 = 25;

/// A partition cuts at most this share of one region's places (numerator and denominator) from
/// the rest: the small side of a real partition (an office, a region, one relay's host).
pub const MAX_PARTITION_SHARE: (usize, usize) = (1, 3);

/// A relay socket's rate per direction, in bytes per second: 1 Mbit/s, a slow home uplink or a
/// mobile link, so a burst of relay mail queues noticeably.
pub const RELAY_SOCKET_RATE: u64 = 125_000;

/// A data channel's rate per direction, in bytes per second: 2 Mbit/s, SCTP over a home link.
pub const DATA_CHANNEL_RATE: u64 = 250_000;

/// A realm link's rate per direction (client or peer TCP/TLS stream), in bytes per second:
/// 10 Mbit/s, a server's share of its uplink.
pub const REALM_STREAM_RATE: u64 = 1_250_000;

/// What kind of stream a link is, which names its default rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A Minca node's WebSocket to a relay.
    RelaySocket,
    /// A Minca data channel between two nodes (ordered and reliable).
    DataChannel,
    /// An AIRC stream: a client's or a peer realm's connection.
    RealmStream,
}

impl Kind {
    /// This kind's default rate per direction, in bytes per second.
    pub const fn rate(self) -> u64 {
        match self {
            Self::RelaySocket => RELAY_SOCKET_RATE,
            Self::DataChannel => DATA_CHANNEL_RATE,
            Self::RealmStream => REALM_STREAM_RATE,
        }
    }
}

/// How fast links serialize messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bandwidth {
    /// No serialization delay: a message is on the wire at once.
    Unlimited,
    /// Each link at its [`Kind::rate`].
    ByKind,
    /// Every link at this many bytes per second per direction.
    PerSecond(u64),
}

impl Bandwidth {
    fn rate(self, kind: Kind) -> Option<u64> {
        match self {
            Self::Unlimited | Self::PerSecond(0) => None,
            Self::ByKind => Some(kind.rate()),
            Self::PerSecond(r) => Some(r),
        }
    }
}

/// The network's faults, as a scenario configures them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkFaults {
    /// One-way latency every message takes at least.
    pub base: Duration,
    /// The mean of the heavy-tailed jitter on top of `base` (zero: none).
    pub jitter: Duration,
    /// Chance per thousand that a message's segment is lost and sent again after [`RTO`].
    pub loss_permille: u32,
    /// Chance per thousand that an application that may do so (a Minca relay delivering mail)
    /// sends a message twice.
    pub duplicate_permille: u32,
    /// How fast each direction serializes.
    pub bandwidth: Bandwidth,
    /// Mean time between partitions (`None`: never).
    pub partition_every: Option<Duration>,
    /// How long a partition lasts, at least and at most (it ends with the faulty phase at the
    /// latest).
    pub partition_length: (Duration, Duration),
}

impl LinkFaults {
    /// These faults with no jitter, loss, duplication, bandwidth limit or partition: a fixed
    /// `base` latency.
    pub fn none(base: Duration) -> Self {
        Self {
            base,
            jitter: Duration::ZERO,
            loss_permille: 0,
            duplicate_permille: 0,
            bandwidth: Bandwidth::Unlimited,
            partition_every: None,
            partition_length: (Duration::ZERO, Duration::ZERO),
        }
    }
}

/// What the link layer did in a run, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Messages sent on streams.
    pub messages: u64,
    /// Bytes sent on streams.
    pub bytes: u64,
    /// Messages delayed by at least one loss (a retransmission).
    pub delayed_by_loss: u64,
    /// Retransmissions in all.
    pub retransmissions: u64,
    /// Messages that waited behind another for their direction's bandwidth.
    pub queued: u64,
    /// Bytes of those messages.
    pub queued_bytes: u64,
    /// Second copies an application sent (Minca relay mail).
    pub duplicates: u64,
    /// Partitions that started.
    pub partitions: u64,
    /// Streams a partition cut.
    pub partition_cuts: u64,
    /// Dials (and data channel openings) refused across a partition.
    pub partition_refusals: u64,
    /// Messages on the way across a partition when it began (on a stream it cut, or one closed
    /// just before), never delivered.
    pub partition_discarded: u64,
}

impl LinkStats {
    /// The counters as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "messages": self.messages,
            "bytes": self.bytes,
            "delayed_by_loss": self.delayed_by_loss,
            "retransmissions": self.retransmissions,
            "queued": self.queued,
            "queued_bytes": self.queued_bytes,
            "duplicates": self.duplicates,
            "partitions": self.partitions,
            "partition_cuts": self.partition_cuts,
            "partition_refusals": self.partition_refusals,
            "partition_discarded": self.partition_discarded,
        })
    }
}

impl fmt::Display for LinkStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "link messages {} ({} bytes), delayed by loss {} ({} retransmissions), queued by bandwidth {} ({} bytes), duplicates {}",
            self.messages,
            self.bytes,
            self.delayed_by_loss,
            self.retransmissions,
            self.queued,
            self.queued_bytes,
            self.duplicates
        )?;
        writeln!(
            f,
            "partitions {}, streams cut {}, dials refused across {}, discarded in flight {}",
            self.partitions, self.partition_cuts, self.partition_refusals, self.partition_discarded
        )
    }
}

/// One direction of a stream: when its last message arrives and until when it is busy
/// serializing, so later messages neither overtake nor share the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Direction {
    last: Timestamp,
    /// Microseconds since the Unix epoch, finer than [`Timestamp`] so small messages at a high
    /// rate add up exactly.
    busy_us: u64,
}

impl Direction {
    /// A direction whose first message arrives no earlier than `opened` (when its receiver
    /// learns the stream is open).
    pub fn new(opened: Timestamp) -> Self {
        Self {
            last: opened,
            busy_us: 0,
        }
    }

    /// When the last message sent so far arrives.
    pub fn last(&self) -> Timestamp {
        self.last
    }

    /// Something that follows the stream's messages (a close, a control frame's answer) and
    /// would arrive at `at`: it arrives then, or after the last message, whichever is later.
    pub fn behind(&mut self, at: Timestamp) -> Timestamp {
        self.last = self.last.max(at);
        self.last
    }
}

/// The link layer of one run: its faults, its random stream and its counters.
pub struct Links {
    faults: LinkFaults,
    rng: ChaCha20Rng,
    /// The counters, for the scenario's report.
    pub stats: LinkStats,
}

impl Links {
    /// The link layer for `faults`, drawing from `rng` alone.
    pub fn new(faults: LinkFaults, rng: ChaCha20Rng) -> Self {
        Self {
            faults,
            rng,
            stats: LinkStats::default(),
        }
    }

    /// The faults configured.
    pub fn faults(&self) -> &LinkFaults {
        &self.faults
    }

    /// One one-way latency: the base plus a heavy-tailed jitter.
    pub fn latency(&mut self) -> Duration {
        let mean = u64::try_from(self.faults.jitter.as_micros()).unwrap_or(u64::MAX);
        if mean == 0 {
            return self.faults.base;
        }
        // Lomax of shape 2 and scale `mean` (whose mean is the scale): mean·(1/√U − 1) for U
        // uniform on (0, 1], here U = u / 2³², so 1/√U = 2¹⁶ / √u.
        let u = (self.rng.next_u64() >> 32) + 1;
        let root = isqrt_32(u).max(1);
        let jitter = lomax_jitter(mean, root);
        self.faults.base + Duration::from_micros(jitter)
    }

    /// Whether a draw of `permille` hits.
    fn chance(&mut self, permille: u32) -> bool {
        permille > 0 && self.rng.next_u32() % 1000 < permille
    }

    /// Whether an application that may do so sends this message a second time.
    pub fn duplicate(&mut self) -> bool {
        let hit = self.chance(self.faults.duplicate_permille);
        if hit {
            self.stats.duplicates += 1;
        }
        hit
    }

    /// Sends `bytes` bytes on `dir` (a stream of `kind`) at `now`; answers when they arrive.
    /// The message is serialized once the message before it is through, takes a latency drawn
    /// afresh, waits out any retransmissions, and never arrives before the message before it.
    pub fn send(
        &mut self,
        dir: &mut Direction,
        kind: Kind,
        now: Timestamp,
        bytes: usize,
    ) -> Timestamp {
        self.stats.messages += 1;
        self.stats.bytes += bytes as u64;
        let now_us = now.as_millis().saturating_mul(1_000);
        let mut on_wire_us = now_us;
        if let Some(rate) = self.faults.bandwidth.rate(kind) {
            let start = now_us.max(dir.busy_us);
            if start > now_us {
                self.stats.queued += 1;
                self.stats.queued_bytes += bytes as u64;
            }
            let tx = (bytes as u64).saturating_mul(1_000_000).div_ceil(rate);
            dir.busy_us = start.saturating_add(tx);
            on_wire_us = dir.busy_us;
        }
        let mut delay = self.latency();
        let mut rto = RTO;
        let mut lost = 0;
        while lost < MAX_RETRANSMITS && self.chance(self.faults.loss_permille) {
            delay += rto;
            rto *= 2;
            lost += 1;
        }
        if lost > 0 {
            self.stats.delayed_by_loss += 1;
            self.stats.retransmissions += u64::from(lost);
        }
        let arrive_us =
            on_wire_us.saturating_add(u64::try_from(delay.as_micros()).unwrap_or(u64::MAX));
        dir.behind(Timestamp::from_millis(arrive_us.div_ceil(1_000)))
    }

    /// When the next partition starts, if one fits before `end` (the end of the faulty phase).
    pub fn next_partition(&mut self, now: Timestamp, end: Timestamp) -> Option<Timestamp> {
        let mean = self.faults.partition_every?;
        let mean_ms = u64::try_from(mean.as_millis()).unwrap_or(u64::MAX);
        let at =
            now + Duration::from_millis(1 + self.rng.next_u64() % mean_ms.saturating_mul(2).max(1));
        (at < end).then_some(at)
    }

    /// Cuts a random set of at most [`MAX_PARTITION_SHARE`] of one region's places (at least
    /// one) from the rest of the `places` places, from `now` until a drawn time no later than
    /// `end`. `regions` lists each region's places; the region is drawn when there are several,
    /// and with none the whole network is the one region (no draw, so a scenario with one region
    /// draws the same partitions either way).
    pub fn partition(
        &mut self,
        places: usize,
        regions: &[Vec<usize>],
        now: Timestamp,
        end: Timestamp,
    ) -> Partition {
        let mut order: Vec<usize> = match regions {
            [] => (0..places).collect(),
            [one] => one.clone(),
            many => many[(self.rng.next_u64() % many.len() as u64) as usize].clone(),
        };
        let (num, den) = MAX_PARTITION_SHARE;
        let most = (order.len() * num / den).max(1);
        let size = 1 + (self.rng.next_u64() % most as u64) as usize;
        // A partial Fisher–Yates shuffle: the first `size` places drawn without repeats.
        let mut small = vec![false; places];
        for i in 0..size.min(order.len()) {
            let j = i + (self.rng.next_u64() % (order.len() - i) as u64) as usize;
            order.swap(i, j);
            small[order[i]] = true;
        }
        let (lo, hi) = self.faults.partition_length;
        let (lo_ms, hi_ms) = (lo.as_millis() as u64, hi.as_millis() as u64);
        let length = lo_ms + self.rng.next_u64() % (hi_ms.saturating_sub(lo_ms) + 1);
        let until = (now + Duration::from_millis(length)).min(end).max(now);
        self.stats.partitions += 1;
        Partition { small, until }
    }
}

/// A partition in force: which places are on its small side, and when it heals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    small: Vec<bool>,
    /// When it heals.
    pub until: Timestamp,
}

impl Partition {
    /// Whether places `a` and `b` are on different sides.
    pub fn separates(&self, a: usize, b: usize) -> bool {
        self.small.get(a).copied().unwrap_or(false) != self.small.get(b).copied().unwrap_or(false)
    }

    /// The places on the small side.
    pub fn small_side(&self) -> Vec<usize> {
        (0..self.small.len()).filter(|p| self.small[*p]).collect()
    }

    /// A partition of `places` that cuts `small` off from the rest until `until`, for tests
    /// that need a given cut rather than a drawn one.
    #[cfg(test)]
    pub(crate) fn cutting(places: usize, small: &[usize], until: Timestamp) -> Self {
        Self {
            small: (0..places).map(|p| small.contains(&p)).collect(),
            until,
        }
    }
}

/// `⌊√u⌋` for `u` up to 2³², as `u64::isqrt` gives it: `f64` holds such a `u` exactly and
/// its square root is correctly rounded, so the float's floor is off by at most one, which the
/// two integer checks put right. Some hundred instructions fewer than the integer loop, paid per
/// message.
fn isqrt_32(u: u64) -> u64 {
    debug_assert!(u <= 1 << 32);
    let mut root = (u as f64).sqrt() as u64;
    if root * root > u {
        root -= 1;
    } else if (root + 1) * (root + 1) <= u {
        root += 1;
    }
    root
}

/// `mean·(2¹⁶ − root)/root`, capped at `mean·JITTER_CAP`: [`Links::latency`]'s jitter for a
/// draw whose square root is `root` (1 to 2¹⁶). In 64 bits whenever the products fit (any
/// jitter under 2⁴⁸ µs, so every real one), as the 128-bit division a call costs is paid per
/// message; the same value either way.
fn lomax_jitter(mean: u64, root: u64) -> u64 {
    let narrow = mean
        .checked_mul((1u64 << 16) - root)
        .zip(mean.checked_mul(JITTER_CAP.into()));
    if let Some((scaled, cap)) = narrow {
        return (scaled / root).min(cap);
    }
    let jitter = u128::from(mean) * u128::from((1u64 << 16) - root) / u128::from(root);
    let cap = u128::from(mean) * u128::from(JITTER_CAP);
    u64::try_from(jitter.min(cap)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;

    fn links(faults: LinkFaults) -> Links {
        Links::new(faults, ChaCha20Rng::seed_from_u64(7))
    }

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + ms)
    }

    #[test]
    fn loss_delays_a_stream_but_never_reorders_it() {
        let mut l = links(LinkFaults {
            jitter: Duration::from_millis(20),
            loss_permille: 100,
            ..LinkFaults::none(Duration::from_millis(10))
        });
        let mut dir = Direction::new(t(0));
        let mut last = t(0);
        let mut late = 0;
        for i in 0..2_000 {
            let now = t(i * 5);
            let at = l.send(&mut dir, Kind::DataChannel, now, 100);
            assert!(at >= last, "message {i} overtook the one before it");
            assert!(at >= now + Duration::from_millis(10));
            if at >= now + RTO {
                late += 1;
            }
            last = at;
        }
        assert!(l.stats.delayed_by_loss > 100, "{:?}", l.stats);
        assert!(l.stats.retransmissions >= l.stats.delayed_by_loss);
        // Head-of-line blocking: more messages are late than were lost themselves.
        assert!(late > l.stats.delayed_by_loss, "{late} {:?}", l.stats);
        assert_eq!(l.stats.messages, 2_000);
    }

    #[test]
    fn bandwidth_queues_messages_behind_each_other() {
        let mut l = links(LinkFaults {
            bandwidth: Bandwidth::PerSecond(1_000),
            ..LinkFaults::none(Duration::from_millis(10))
        });
        let mut dir = Direction::new(t(0));
        let arrivals: Vec<Timestamp> = (0..3)
            .map(|_| l.send(&mut dir, Kind::RelaySocket, t(0), 100))
            .collect();
        assert_eq!(arrivals, [t(110), t(210), t(310)]);
        assert_eq!((l.stats.queued, l.stats.queued_bytes), (2, 200));
        // Once the wire is idle again a message waits for nobody.
        assert_eq!(l.send(&mut dir, Kind::RelaySocket, t(1_000), 100), t(1_110));
        assert_eq!(l.stats.queued, 2);
    }

    #[test]
    fn each_kind_of_link_serializes_at_its_own_rate() {
        let mut l = links(LinkFaults {
            bandwidth: Bandwidth::ByKind,
            ..LinkFaults::none(Duration::ZERO)
        });
        let bytes = 125_000;
        for (kind, ms) in [
            (Kind::RelaySocket, 1_000),
            (Kind::DataChannel, 500),
            (Kind::RealmStream, 100),
        ] {
            let mut dir = Direction::new(t(0));
            assert_eq!(l.send(&mut dir, kind, t(0), bytes), t(ms), "{kind:?}");
        }
    }

    /// The float square root floors as `u64::isqrt` does at every square's edges up to 2³².
    #[test]
    fn isqrt_32_is_isqrt() {
        for r in 0..=1u64 << 16 {
            for u in [r * r, (r * r).saturating_sub(1), r * r + 1, r * r + 2 * r] {
                if u <= 1 << 32 {
                    assert_eq!(isqrt_32(u), u.isqrt(), "{u}");
                }
            }
        }
        let mut rng = crate::stream(0x5e, 7);
        for _ in 0..100_000 {
            let u = (rng.next_u64() >> 32) + 1;
            assert_eq!(isqrt_32(u), u.isqrt(), "{u}");
        }
    }

    /// The 64-bit path gives the 128-bit formula's value, at the edges where products stop
    /// fitting too.
    #[test]
    fn lomax_jitter_is_the_wide_formulas() {
        let wide = |mean: u64, root: u64| {
            let jitter = u128::from(mean) * u128::from((1u64 << 16) - root) / u128::from(root);
            let cap = u128::from(mean) * u128::from(JITTER_CAP);
            u64::try_from(jitter.min(cap)).unwrap_or(u64::MAX)
        };
        let means = [
            0,
            1,
            7,
            20_000,
            1 << 47,
            (1 << 48) - 1,
            1 << 48,
            u64::MAX / 25,
            u64::MAX,
        ];
        for mean in means {
            for root in [1, 2, 3, 2_621, 2_622, 40_000, (1 << 16) - 1, 1 << 16] {
                assert_eq!(lomax_jitter(mean, root), wide(mean, root), "{mean} {root}");
            }
        }
    }

    #[test]
    fn latency_is_heavy_tailed_around_the_mean_asked_for() {
        let mut l = links(LinkFaults {
            jitter: Duration::from_millis(20),
            ..LinkFaults::none(Duration::from_millis(5))
        });
        let draws: Vec<u64> = (0..100_000)
            .map(|_| l.latency().as_micros() as u64)
            .collect();
        assert!(
            draws
                .iter()
                .all(|d| *d >= 5_000 && *d <= 5_000 + 20_000 * 25)
        );
        let mean = draws.iter().sum::<u64>() / draws.len() as u64;
        // The cap trims the mean a little below the scale (about 4 %).
        assert!((22_000..=25_500).contains(&mean), "mean {mean} µs");
        // A heavy tail: P(jitter > 4·mean) = 1/25.
        let tail = draws.iter().filter(|d| **d > 5_000 + 80_000).count();
        assert!((3_500..=4_500).contains(&tail), "{tail}");
    }

    #[test]
    fn a_closing_frame_follows_what_was_already_on_the_way() {
        let mut l = links(LinkFaults::none(Duration::from_millis(50)));
        let mut dir = Direction::new(t(0));
        let data = l.send(&mut dir, Kind::RelaySocket, t(0), 10);
        assert_eq!(dir.behind(t(1)), data);
        assert_eq!(dir.behind(t(500)), t(500));
    }

    #[test]
    fn duplicates_come_at_the_rate_asked_for_and_only_then() {
        let mut l = links(LinkFaults {
            duplicate_permille: 250,
            ..LinkFaults::none(Duration::ZERO)
        });
        let hits = (0..10_000).filter(|_| l.duplicate()).count() as u64;
        assert!((2_200..=2_800).contains(&hits), "{hits}");
        assert_eq!(l.stats.duplicates, hits);
        let mut none = links(LinkFaults::none(Duration::ZERO));
        assert!((0..1_000).all(|_| !none.duplicate()));
    }

    #[test]
    fn a_partition_cuts_at_most_a_third_and_separates_only_across_its_cut() {
        let mut l = links(LinkFaults {
            partition_length: (Duration::from_secs(5), Duration::from_secs(20)),
            ..LinkFaults::none(Duration::ZERO)
        });
        for _ in 0..200 {
            let p = l.partition(10, &[], t(0), t(15_000));
            let small = p.small_side();
            assert!((1..=3).contains(&small.len()), "{small:?}");
            assert!(p.until >= t(5_000) && p.until <= t(15_000));
            for a in 0..10 {
                for b in 0..10 {
                    assert_eq!(p.separates(a, b), small.contains(&a) != small.contains(&b));
                }
            }
        }
        assert_eq!(l.stats.partitions, 200);
    }

    #[test]
    fn a_partition_falls_in_one_region_and_cuts_at_most_a_third_of_it() {
        let mut l = links(LinkFaults::none(Duration::ZERO));
        // Two groups of six sharing places 12 and 13 (say, two spaces and their relays).
        let regions = [
            vec![0, 2, 4, 6, 8, 10, 12, 13],
            vec![1, 3, 5, 7, 9, 11, 12, 13],
        ];
        let mut fell_in = [false; 2];
        for _ in 0..200 {
            let small = l.partition(14, &regions, t(0), t(15_000)).small_side();
            assert!((1..=2).contains(&small.len()), "{small:?}");
            let region = regions
                .iter()
                .position(|r| small.iter().all(|p| r.contains(p)))
                .expect("every cut place is of one region");
            fell_in[region] = true;
        }
        assert_eq!(fell_in, [true, true]);
    }

    #[test]
    fn one_region_of_every_place_draws_as_the_whole_network_does() {
        let faults = LinkFaults::none(Duration::ZERO);
        let (mut whole, mut one) = (links(faults.clone()), links(faults));
        let all: Vec<usize> = (0..10).collect();
        for _ in 0..50 {
            assert_eq!(
                whole.partition(10, &[], t(0), t(15_000)),
                one.partition(10, core::slice::from_ref(&all), t(0), t(15_000))
            );
        }
    }

    #[test]
    fn partitions_start_only_inside_the_faulty_phase() {
        let mut l = links(LinkFaults {
            partition_every: Some(Duration::from_secs(10)),
            ..LinkFaults::none(Duration::ZERO)
        });
        for _ in 0..100 {
            if let Some(at) = l.next_partition(t(0), t(15_000)) {
                assert!(at > t(0) && at < t(15_000));
            }
        }
        let mut off = links(LinkFaults::none(Duration::ZERO));
        assert_eq!(off.next_partition(t(0), t(15_000)), None);
    }
}
