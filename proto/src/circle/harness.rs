//! N shells over in-memory links, in virtual time: the host every circle test and simulation
//! shares.
//!
//! Each device's host side is here: a store (a list of kept events), the blobs it holds, every
//! reply its napplets got and every frame it sent. Outputs are executed in order as a driver
//! would: replies are recorded (and checked to survive their own text), frames go out as text and
//! arrive `latency` later on the far side of a link that is still up, store reads and blob checks
//! are answered at once, and (while [`Harness::hand_over_pairings`]) a device's own new pairing
//! record is handed to the peer it names, the pairing made by hand; invites and pairing frames
//! travel as everything else does. [`Harness::run`] jumps the clock to the earliest arrival or wakeup until nothing is
//! left, within a step limit.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use rand_core::CryptoRng;

use crate::core::{ConnId, Machine, Timestamp};
use crate::nostr::event::Event;

use super::invite::{Invite, PairFrame, PairRefusal};
use super::member::MemberFrame;
use super::napplet::Reply;
use super::pairing::named_peer;
use super::shell::{Input, NappletId, Output, Shell};

/// The run went on past its step limit: something never went idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimit;

/// One device: its shell and what its host holds and saw.
pub struct Device<R: CryptoRng> {
    /// The shell.
    pub shell: Shell<R>,
    /// Events kept on this device, in the order kept.
    pub store: Vec<Event>,
    /// Blobs this device holds (sha256).
    pub blobs: BTreeSet<[u8; 32]>,
    /// When set, store reads fail (the backlog cannot be read).
    pub store_broken: bool,
    /// Every reply and delivery to a napplet, with when it went out.
    pub replies: Vec<(Timestamp, NappletId, Reply)>,
    /// Every member frame sent, with when and on which link.
    pub sent: Vec<(Timestamp, ConnId, MemberFrame)>,
    /// Every pairing frame sent, with when and on which link.
    pub pair_sent: Vec<(Timestamp, ConnId, PairFrame)>,
    /// Every invite made.
    pub invites: Vec<Invite>,
    /// Every end of a pairing by invite, in order.
    pub paired: Vec<([u8; 32], Result<(), PairRefusal>)>,
    /// Every pairing record the host was asked to keep.
    pub records: Vec<Event>,
}

#[derive(Debug, Clone, Copy)]
struct End {
    device: usize,
    far: ConnId,
    up: bool,
}

/// N shells over in-memory links (see the module docs).
pub struct Harness<R: CryptoRng> {
    /// The devices, by index.
    pub devices: Vec<Device<R>>,
    /// Whether a device's own new pairing record is handed to the peer it names at once (the
    /// pairing made by hand; on by default). Off, records move only by invites.
    pub hand_over_pairings: bool,
    now: Timestamp,
    latency: Duration,
    ends: BTreeMap<ConnId, End>,
    next_conn: u64,
    /// Frames in flight: (arrival, sequence) → (link end they arrive on, text).
    wire: BTreeMap<(Timestamp, u64), (ConnId, String)>,
    seq: u64,
    step_limit: u64,
}

impl<R: CryptoRng> Harness<R> {
    /// An empty network at `now`, each frame taking `latency`, each run at most `step_limit`
    /// clock jumps.
    pub fn new(now: Timestamp, latency: Duration, step_limit: u64) -> Self {
        Self {
            devices: Vec::new(),
            hand_over_pairings: true,
            now,
            latency,
            ends: BTreeMap::new(),
            next_conn: 1,
            wire: BTreeMap::new(),
            seq: 0,
            step_limit,
        }
    }

    /// The clock.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Adds a device running `shell`, online; its index.
    pub fn add(&mut self, mut shell: Shell<R>) -> usize {
        shell.handle(self.now, Input::Online(true));
        self.devices.push(Device {
            shell,
            store: Vec::new(),
            blobs: BTreeSet::new(),
            store_broken: false,
            replies: Vec::new(),
            sent: Vec::new(),
            pair_sent: Vec::new(),
            invites: Vec::new(),
            paired: Vec::new(),
            records: Vec::new(),
        });
        self.devices.len() - 1
    }

    /// Feeds `input` to device `d` now, and executes what follows.
    pub fn input(&mut self, d: usize, input: Input) {
        self.devices[d].shell.handle(self.now, input);
        self.drain(d);
    }

    /// A napplet message to device `d`.
    pub fn napplet(&mut self, d: usize, napplet: NappletId, text: &str) {
        self.input(
            d,
            Input::Napplet {
                napplet,
                text: String::from(text),
            },
        );
    }

    /// Pairs devices `a` and `b`: each makes its record, and the pairing flow hands it over.
    pub fn pair(&mut self, a: usize, b: usize) {
        let (ka, kb) = (
            self.devices[a].shell.pubkey(),
            self.devices[b].shell.pubkey(),
        );
        self.input(a, Input::Pair { peer: kb });
        self.input(b, Input::Pair { peer: ka });
    }

    /// Opens a transport link between `a` and `b` with each side's key proven; the link's id at
    /// `a` and at `b`.
    pub fn link(&mut self, a: usize, b: usize) -> (ConnId, ConnId) {
        let (ca, cb) = (ConnId(self.next_conn), ConnId(self.next_conn + 1));
        self.next_conn += 2;
        self.ends.insert(
            ca,
            End {
                device: a,
                far: cb,
                up: true,
            },
        );
        self.ends.insert(
            cb,
            End {
                device: b,
                far: ca,
                up: true,
            },
        );
        let (ka, kb) = (
            self.devices[a].shell.pubkey(),
            self.devices[b].shell.pubkey(),
        );
        self.input(a, Input::LinkUp { link: ca, key: kb });
        self.input(b, Input::LinkUp { link: cb, key: ka });
        (ca, cb)
    }

    /// Pairs and links `a` and `b`.
    pub fn connect(&mut self, a: usize, b: usize) -> (ConnId, ConnId) {
        self.pair(a, b);
        self.link(a, b)
    }

    /// Closes a link (named by either end); frames in flight on it are lost.
    pub fn cut(&mut self, link: ConnId) {
        let Some(end) = self.ends.get(&link).copied() else {
            return;
        };
        for (c, d) in [(link, end.device), (end.far, self.ends[&end.far].device)] {
            if let Some(e) = self.ends.get_mut(&c) {
                e.up = false;
            }
            self.input(d, Input::LinkDown(c));
        }
    }

    /// Sends raw text on a link end, as its device would (to play a misbehaving far side).
    pub fn inject(&mut self, from: ConnId, text: &str) {
        if let Some(end) = self.ends.get(&from).copied()
            && end.up
        {
            self.seq += 1;
            self.wire.insert(
                (self.now + self.latency, self.seq),
                (end.far, String::from(text)),
            );
        }
    }

    fn drain(&mut self, d: usize) {
        while let Some(out) = self.devices[d].shell.poll() {
            let now = self.now;
            match out {
                Output::ToNapplet { napplet, reply } => {
                    assert_eq!(
                        Reply::parse(&reply.to_text()).as_ref(),
                        Some(&reply),
                        "a reply survives its own text"
                    );
                    self.devices[d].replies.push((now, napplet, reply));
                }
                Output::ToLink { link, frame } => {
                    let text = frame.to_text();
                    self.devices[d].sent.push((now, link, frame));
                    if let Some(end) = self.ends.get(&link).copied()
                        && end.up
                    {
                        self.seq += 1;
                        self.wire
                            .insert((now + self.latency, self.seq), (end.far, text));
                    }
                }
                Output::Store(event) => {
                    let store = &mut self.devices[d].store;
                    if !store.iter().any(|e| e.id == event.id) {
                        store.push(event);
                    }
                }
                Output::ReadBacklog { token, filters } => {
                    let dev = &self.devices[d];
                    let events = (!dev.store_broken).then(|| {
                        dev.store
                            .iter()
                            .filter(|e| filters.iter().any(|f| f.matches(e)))
                            .cloned()
                            .collect()
                    });
                    self.devices[d]
                        .shell
                        .handle(now, Input::Backlog { token, events });
                }
                Output::CheckBlobs { token, hashes } => {
                    let held = hashes
                        .into_iter()
                        .filter(|h| self.devices[d].blobs.contains(h))
                        .collect();
                    self.devices[d]
                        .shell
                        .handle(now, Input::BlobsHeld { token, held });
                }
                Output::Invite(invite) => self.devices[d].invites.push(invite),
                Output::Paired { peer, outcome } => self.devices[d].paired.push((peer, outcome)),
                Output::ToLinkPair { link, frame } => {
                    let text = frame.to_text();
                    self.devices[d].pair_sent.push((now, link, frame));
                    if let Some(end) = self.ends.get(&link).copied()
                        && end.up
                    {
                        self.seq += 1;
                        self.wire
                            .insert((now + self.latency, self.seq), (end.far, text));
                    }
                }
                Output::Pairing(record) => {
                    self.devices[d].records.push(record.clone());
                    let peer = named_peer(&record);
                    let own = record.pubkey == self.devices[d].shell.pubkey();
                    if let Some(p) = (self.hand_over_pairings && own)
                        .then(|| {
                            self.devices
                                .iter()
                                .position(|x| Some(x.shell.pubkey()) == peer)
                        })
                        .flatten()
                    {
                        self.devices[p]
                            .shell
                            .handle(now, Input::PairingRecord(record));
                        self.drain(p);
                    }
                }
            }
        }
    }

    /// Runs until nothing is in flight and no shell wants a wakeup, or `until`, whichever is
    /// first; the clock ends at the last event handled (or `until`).
    pub fn run_until(&mut self, until: Timestamp) -> Result<(), StepLimit> {
        for _ in 0..self.step_limit {
            let wire = self.wire.keys().next().map(|(t, _)| *t);
            let wake = self
                .devices
                .iter()
                .filter_map(|d| d.shell.poll_timeout().map(|w| w.at))
                .min();
            let next = match (wire, wake) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => {
                        if until != Timestamp::MAX {
                            self.now = self.now.max(until);
                        }
                        return Ok(());
                    }
                },
            };
            if next > until {
                self.now = self.now.max(until);
                return Ok(());
            }
            self.now = self.now.max(next);
            while let Some((&(at, seq), _)) = self.wire.iter().next() {
                if at > self.now {
                    break;
                }
                let Some((link, text)) = self.wire.remove(&(at, seq)) else {
                    break;
                };
                let Some(end) = self.ends.get(&link).copied() else {
                    continue;
                };
                if end.up {
                    self.input(end.device, Input::Link { link, text });
                }
            }
            for d in 0..self.devices.len() {
                if self.devices[d]
                    .shell
                    .poll_timeout()
                    .is_some_and(|w| w.at <= self.now)
                {
                    self.devices[d].shell.handle_timeout(self.now);
                    self.drain(d);
                }
            }
        }
        Err(StepLimit)
    }

    /// Runs until idle (see [`Harness::run_until`]).
    pub fn run(&mut self) -> Result<(), StepLimit> {
        self.run_until(Timestamp::MAX)
    }
}
