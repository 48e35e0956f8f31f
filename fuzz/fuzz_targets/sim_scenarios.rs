//! Whole networks of the real machines (`weft-sim`'s `minca-meetup` and `airc-realms`, issue #8)
//! under faults the fuzzer picks rather than a seed: their sizes, each fault's rate, loss,
//! duplicates, jitter, bandwidth and partitions, drawn inside the envelope the scenarios' docs
//! promise their invariants in (every fault ends with the faulty phase, and the quiet phase is
//! the scenario's own). The fuzzer's coverage steers it towards the rarely taken paths of the
//! machines and the simulator that a sweep of seeds at fixed rates may not reach.
//!
//! Every run checks its scenario's invariants as `weft sim` does (at most one connection per
//! pair, nothing of a room crosses before admission, a full mesh after the network heals,
//! introductions never loop; every accepted AIRC message acked exactly once, `queued` always
//! held, nothing delivered twice or lost before its ttl); the first violation is a finding, with
//! the whole scenario printed (`Debug`), so a test can build it again and replay it. When the
//! input asks, the run is made three times ([`weft_sim::scenario::replay`]): twice traced, the
//! traces the same byte for byte and the reports equal, and once untraced, reporting the same.
//!
//! Speed: the machines sign and check with the insecure stand-in provider (`weft_fuzz::crypto`),
//! so a run costs its few thousand events, not their P-256 and Ed25519 work; it is still a
//! target for long campaigns, and CI's short run only replays its corpus.
#![no_main]

use std::fmt::Debug;
use std::io::Write;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weft_sim::link::{Bandwidth, LinkFaults};
use weft_sim::scenario::{NotReplayed, Violation, replay};
use weft_sim::{airc, minca};

#[derive(Arbitrary, Debug)]
enum Shape {
    Meetup(Meetup),
    Realms(Realms),
}

/// A `minca-meetup`'s choices, each brought into range by [`Meetup::scenario`].
#[derive(Arbitrary, Debug)]
struct Meetup {
    seed: u64,
    nodes: u8,
    two_spaces: bool,
    relays: u8,
    duration_s: u8,
    link: Link,
    socket_drop: u8,
    peer_drop: u8,
    relay_restart: u8,
    sleep: u8,
    crash: u8,
    max_skew_s: u8,
    across_the_network: bool,
    /// Run it three times and hold the runs to being the same run.
    replay: bool,
}

/// An `airc-realms`' choices.
#[derive(Arbitrary, Debug)]
struct Realms {
    seed: u64,
    realms: u8,
    clients: u8,
    messages: u8,
    duration_s: u8,
    link: Link,
    link_drop: u8,
    crash: u8,
    stall_permille: u8,
    spike_permille: u8,
    /// Run it three times and hold the runs to being the same run.
    replay: bool,
}

#[derive(Arbitrary, Debug)]
struct Link {
    jitter_ms: u8,
    loss_permille: u16,
    duplicate_permille: u16,
    bandwidth: u8,
    partition: u8,
}

/// `None` for 0, else a mean interval of `least` to `least + 63` seconds.
fn every(choice: u8, least: u64) -> Option<Duration> {
    (choice != 0).then(|| Duration::from_secs(least + u64::from(choice % 64)))
}

impl Link {
    /// The link layer's faults within the sweeps' envelope (docs/reliability.md): up to 300 ‰
    /// of segments lost, up to every relay mail doubled, 255 ms of mean jitter, slow links down
    /// to 20 kB/s, partitions as often as every 5 s.
    fn faults(&self, base: LinkFaults, duplicates: bool) -> LinkFaults {
        LinkFaults {
            jitter: Duration::from_millis(u64::from(self.jitter_ms)),
            loss_permille: u32::from(self.loss_permille % 301),
            duplicate_permille: if duplicates {
                u32::from(self.duplicate_permille % 1001)
            } else {
                0
            },
            bandwidth: match self.bandwidth % 4 {
                0 => Bandwidth::Unlimited,
                1 => Bandwidth::PerSecond(20_000 + 1_000 * u64::from(self.bandwidth)),
                _ => Bandwidth::ByKind,
            },
            partition_every: every(self.partition, 5),
            ..base
        }
    }
}

impl Meetup {
    fn scenario(&self) -> minca::Scenario {
        let base = minca::Scenario::small(self.seed);
        let spaces = if self.two_spaces { 2 } else { 1 };
        let faults = minca::Faults {
            link: self.link.faults(base.faults.link.clone(), true),
            socket_drop_every: every(self.socket_drop, 5),
            peer_drop_every: every(self.peer_drop, 5),
            relay_restart_every: every(self.relay_restart, 10),
            sleep_every: every(self.sleep, 5),
            crash_every: every(self.crash, 3),
            max_skew: Duration::from_secs(u64::from(self.max_skew_s % 11)),
            partition_region: if self.across_the_network {
                minca::PartitionRegion::Network
            } else {
                minca::PartitionRegion::Space
            },
            ..base.faults.clone()
        };
        minca::Scenario {
            nodes: 2 * spaces + usize::from(self.nodes % 5),
            spaces,
            relays: 1 + usize::from(self.relays % 3),
            duration: Duration::from_secs(10 + u64::from(self.duration_s % 111)),
            faults,
            ..base
        }
    }
}

impl Realms {
    fn scenario(&self) -> airc::Scenario {
        let base = airc::Scenario::small(self.seed);
        let faults = airc::Faults {
            link: self.link.faults(base.faults.link.clone(), false),
            link_drop_every: every(self.link_drop, 3),
            crash_every: every(self.crash, 5),
            stall_permille: u32::from(self.stall_permille % 201),
            spike_permille: u32::from(self.spike_permille % 51),
            ..base.faults.clone()
        };
        airc::Scenario {
            realms: 1 + usize::from(self.realms % 4),
            clients: 1 + usize::from(self.clients % 12),
            messages: 1 + usize::from(self.messages % 80),
            duration: Duration::from_secs(30 + u64::from(self.duration_s % 121)),
            faults,
            ..base
        }
    }
}

/// Runs `scenario` once, or, when `again`, as [`replay`] does; a finding panics with the
/// scenario.
fn check<S: Debug, R: PartialEq + Debug>(
    name: &str,
    scenario: &S,
    again: bool,
    run: impl for<'a> Fn(&'a S, Option<&'a mut dyn Write>) -> Result<R, Box<Violation<R>>>,
    wall: impl Fn(&mut R) -> &mut Duration,
) {
    let outcome = if again {
        replay(scenario, run, wall).map(drop)
    } else {
        run(scenario, None)
            .map(drop)
            .map_err(NotReplayed::Violation)
    };
    if let Err(e) = outcome {
        panic!("{name}: {e}\n{scenario:?}");
    }
}

fuzz_target!(|shape: Shape| {
    // The stand-in provider: a shape's runs cost their events, not their signatures.
    weft_sim::crypto::with_provider(weft_fuzz::crypto(), || match shape {
        Shape::Meetup(m) => {
            let sc = m.scenario();
            if let Some(why) = sc.shape_error() {
                panic!("the target drew a shape minca-meetup refuses ({why}): {sc:?}");
            }
            check("minca-meetup", &sc, m.replay, minca::run, |r| &mut r.wall);
        }
        Shape::Realms(r) => {
            check("airc-realms", &r.scenario(), r.replay, airc::run, |r| {
                &mut r.wall
            });
        }
    });
});
