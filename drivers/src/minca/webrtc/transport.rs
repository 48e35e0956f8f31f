//! The WebRTC transport of the Minca mesh (§5.1): one str0m `Rtc` per connection, all over one
//! UDP socket.
//!
//! What §5.1 asks, and where it is kept:
//!
//! - The offerer creates one data channel labelled `data`, ordered and reliable
//!   ([`DATA_CHANNEL_LABEL`]); the answerer uses the first channel it receives.
//! - Messages are binary; a text message is ignored and counted ([`Counters::text_ignored`]).
//! - No trickle: the candidates are added before the description is made, so they go inside the
//!   offer or answer. Host candidates are known at once; TURN relay candidates (where a relay
//!   offered TURN servers, §1.4) need an allocation on each server ([`super::turn`]): the
//!   description waits for those to answer, but never past [`GATHERING_CAP`], after which it goes
//!   out with what it has.
//! - The TURN servers are taken for each new connection, from the caller at that moment
//!   ([`Transport::handle_mesh_output_with_ice`]), and only while their offer's `expiresAt` is in
//!   the future (§10). A server named by host name is used once the caller has looked the name
//!   up off its loop ([`Transport::learn_turn_offer`], [`Transport::turn_name_resolved`]);
//!   the transport itself resolves nothing. [`IceTransportPolicy::Relay`] leaves the host candidates out, as browsers'
//!   `iceTransportPolicy: "relay"` does.
//! - A connection is open when its channel opens (`Opened`, with the channel-binding
//!   fingerprints of the local and remote descriptions), and gone when the channel closes, DTLS or
//!   SCTP closes, or ICE stays disconnected for [`DISCONNECTED_GRACE`] (`Closed`).
//! - One connection per peer: making or accepting a new one closes any other with that peer.
//!
//! The loop rules of `crate::host` hold here too: [`Transport::handle_timeout`] serves at most
//! [`MAX_TIMEOUTS_PER_PASS`] connections per call, and a connection whose deadline does not
//! advance past `now` is pushed forward by [`STALL_STEP`] and counted instead of spinning a core.
//!
//! Time is the caller's [`Timestamp`]; str0m's `Instant`s are derived from it against one anchor
//! taken when the transport is made, so the transport never reads a clock after that.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::string::String;
use std::time::{Duration, Instant};
use std::vec::Vec;

use bytes::Bytes;
use str0m::change::{SdpAnswer, SdpOffer, SdpPendingOffer};
use str0m::channel::{ChannelConfig, ChannelId, Reliability};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, Rtc};
use weft_proto::core::{ConnId, Timestamp, Wakeup};
use weft_proto::minca::mesh::machine::MAX_CONNECTIONS;
use weft_proto::minca::mesh::{Input, Output};
use weft_proto::minca::relay_wire::IceServers;

pub use crate::host::STALL_STEP;

use super::fingerprint::channel_binding;
use super::turn::{Allocation, AllocationState, Received, TurnNames, usable_servers};

/// The label of the one data channel the offerer creates (§5.1).
pub const DATA_CHANNEL_LABEL: &str = "data";

/// How long a side may gather candidates before its description goes out (§5.1: "the reference
/// node waits for gathering to finish, or 2 s"). Host candidates are known at once; a TURN
/// allocation that has not answered by then is left out of the description.
pub const GATHERING_CAP: Duration = Duration::from_secs(2);

/// How long ICE may stay disconnected before the connection counts as failed (§5.1: "gone when
/// ... the connection state becomes failed"). str0m has no `failed` state: it reports
/// `Disconnected` once no candidate pair is left working (its checks went unanswered), and can
/// still come back if the peer answers again. Browsers call a connection failed when consent
/// lapses (RFC 7675, 30 s); a mesh node does better to let the peer go sooner and meet it again
/// (the next hello starts a new attempt, §7.3) than to keep a dead peer admitted for 30 s.
pub const DISCONNECTED_GRACE: Duration = Duration::from_secs(5);

/// The most connections served at once: the mesh's own bound ([`MAX_CONNECTIONS`]), so a
/// connection the mesh may hold is never refused here.
pub const MAX_TRANSPORT_CONNECTIONS: usize = MAX_CONNECTIONS;

/// The most connections whose timers [`Transport::handle_timeout`] serves in one call; the rest
/// are served on the next call (their deadline is still due), so a pass does bounded work.
pub const MAX_TIMEOUTS_PER_PASS: usize = 64;

/// The most str0m outputs taken from one connection in one drain. str0m asks to be drained to its
/// next timeout after every change; a connection that keeps producing past this bound is broken
/// (a bug in str0m or here), and is closed and counted rather than spinning the loop.
pub const MAX_OUTPUTS_PER_DRAIN: usize = 4_096;

/// Bytes str0m may hold unacknowledged on a data channel. str0m's default (128 KiB) is below one
/// largest live message (65 536 UTF-16 code units, up to 192 KiB of UTF-8, §9.2) in its frame, so
/// such a message would never fit; 1 MiB holds several.
pub const MAX_BUFFERED_BYTES: usize = 1024 * 1024;

/// Bytes of frames a connection queues while str0m's buffer is full; beyond it a frame is
/// dropped and counted ([`Counters::send_dropped`]). The same size as str0m's buffer, so a
/// connection holds at most twice that for a slow peer.
pub const MAX_OUTBOX_BYTES: usize = MAX_BUFFERED_BYTES;

/// The most datagrams queued for the socket; beyond it the oldest is dropped and counted (UDP
/// may lose datagrams, and str0m retransmits what matters). A loop that sends after every call
/// never comes near it.
pub const MAX_QUEUED_DATAGRAMS: usize = 4_096;

/// The most mesh inputs queued for the caller; beyond it a received frame is dropped and counted
/// ([`Counters::events_dropped`]); descriptions, openings and closings are always kept (they are
/// bounded by the connections).
pub const MAX_QUEUED_FRAMES: usize = 4_096;

/// A datagram for the socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Where it goes.
    pub to: SocketAddr,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Counters for every drop and failure, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Text messages on a data channel, ignored (§5.1).
    pub text_ignored: u64,
    /// Channels a peer opened beyond the connection's one, and their messages: ignored.
    pub extra_channels: u64,
    /// Offers or answers str0m could not parse or apply: the connection closed.
    pub bad_descriptions: u64,
    /// Datagrams str0m could not parse.
    pub bad_datagrams: u64,
    /// Datagrams no connection accepted.
    pub unmatched_datagrams: u64,
    /// Frames not sent: no open channel, str0m refused them, or the outbox was full.
    pub send_dropped: u64,
    /// Received frames dropped because the caller let [`MAX_QUEUED_FRAMES`] pile up.
    pub events_dropped: u64,
    /// Datagrams dropped because the caller let [`MAX_QUEUED_DATAGRAMS`] pile up.
    pub datagrams_dropped: u64,
    /// Connections str0m reported an error on, or that ran past [`MAX_OUTPUTS_PER_DRAIN`].
    pub rtc_errors: u64,
    /// Connections gone because ICE stayed disconnected for [`DISCONNECTED_GRACE`].
    pub ice_failed: u64,
    /// Times a connection's deadline did not advance and was pushed by [`STALL_STEP`].
    pub stalled_timeouts: u64,
    /// Connections closed because a newer one with the same peer was made (§5.1).
    pub replaced: u64,
    /// Connections refused because [`MAX_TRANSPORT_CONNECTIONS`] were held.
    pub table_full: u64,
    /// Mesh outputs naming a connection this transport does not hold, or in the wrong state.
    pub ignored_outputs: u64,
    /// Descriptions that went out at [`GATHERING_CAP`] without a TURN allocation's answer.
    pub gathering_capped: u64,
    /// TURN servers not used because [`super::turn::MAX_TURN_ALLOCATIONS`] were held.
    pub turn_table_full: u64,
    /// Datagrams from a relay candidate not sent: no permission for the peer yet (one is asked
    /// for, and ICE resends), or the allocation is gone.
    pub relay_unsent: u64,
    /// Connections closed because [`IceTransportPolicy::Relay`] left them no candidate (no TURN
    /// server answered in time).
    pub no_candidates: u64,
}

/// Which candidates go into a description, as browsers' `iceTransportPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IceTransportPolicy {
    /// Host candidates, and TURN relay candidates where offered (browsers' `"all"`).
    #[default]
    All,
    /// TURN relay candidates only (browsers' `"relay"`): the peer never learns this side's own
    /// addresses, and every datagram goes through a TURN server.
    Relay,
}

/// What a gathering connection will make once its candidates are in.
enum Pending {
    /// An offer.
    Offer,
    /// An answer to this offer.
    Answer(String),
}

/// A connection waiting for its TURN allocations before its description is made (§5.1).
struct Gathering {
    peer: String,
    pending: Pending,
    /// The TURN servers (their addresses, keys of the allocations) it waits for.
    servers: Vec<SocketAddr>,
    /// [`GATHERING_CAP`] after it started.
    until: Timestamp,
}

/// What a connection waits for.
enum Role {
    /// We offered; the answer is applied with this.
    Offerer(Option<SdpPendingOffer>),
    /// We answered.
    Answerer,
}

struct Connection {
    peer: String,
    rtc: Rtc,
    role: Role,
    local_sdp: String,
    remote_sdp: String,
    channel: Option<ChannelId>,
    /// str0m's next deadline, rounded up to the millisecond.
    deadline: Timestamp,
    disconnected_since: Option<Timestamp>,
    outbox: VecDeque<Bytes>,
    outbox_bytes: usize,
    gone: bool,
}

/// What every connection writes to: the queues the caller drains, and the counters.
#[derive(Default)]
struct Shared {
    events: VecDeque<Input>,
    datagrams: VecDeque<Datagram>,
    /// str0m's datagrams from a relay candidate, with it, for the TURN allocation to wrap.
    relayed: VecDeque<(SocketAddr, Datagram)>,
    /// The host candidates: str0m's datagrams from anything else are from a relay candidate.
    hosts: Vec<SocketAddr>,
    counters: Counters,
}

impl Shared {
    fn push_event(&mut self, event: Input) {
        // Only frames are dropped: the other events are bounded by the connections.
        if matches!(event, Input::Frame { .. }) && self.events.len() >= MAX_QUEUED_FRAMES {
            self.counters.events_dropped += 1;
            return;
        }
        self.events.push_back(event);
    }

    /// A datagram str0m sends from `source`: straight to the socket from a host candidate, or
    /// through the TURN server from a relay candidate.
    fn push_transmit(&mut self, source: SocketAddr, d: Datagram) {
        if self.hosts.contains(&source) {
            self.push_datagram(d);
            return;
        }
        if self.relayed.len() >= MAX_QUEUED_DATAGRAMS {
            self.relayed.pop_front();
            self.counters.datagrams_dropped += 1;
        }
        self.relayed.push_back((source, d));
    }

    fn push_datagram(&mut self, d: Datagram) {
        if self.datagrams.len() >= MAX_QUEUED_DATAGRAMS {
            self.datagrams.pop_front();
            self.counters.datagrams_dropped += 1;
        }
        self.datagrams.push_back(d);
    }
}

/// Maps the caller's [`Timestamp`]s to str0m's `Instant`s and back.
#[derive(Clone, Copy)]
struct Clock {
    instant: Instant,
    at: Timestamp,
}

impl Clock {
    fn instant(self, now: Timestamp) -> Instant {
        self.instant + now.saturating_duration_since(self.at)
    }

    /// Rounded up: a deadline rounded down would be "due" at a `now` str0m still sees as early,
    /// and the loop would spin on it.
    fn timestamp(self, i: Instant) -> Timestamp {
        let d = i.saturating_duration_since(self.instant);
        let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
        Timestamp::from_millis(
            self.at
                .as_millis()
                .saturating_add(u64::try_from(ms).unwrap_or(u64::MAX)),
        )
    }
}

/// Many WebRTC connections of one node over one UDP socket; see the [module docs](self).
///
/// The caller's loop: hand it the mesh's outputs ([`Transport::handle_mesh_output`]) and the
/// socket's datagrams ([`Transport::handle_datagram`]); after each call, send what
/// [`Transport::poll_transmit`] gives and feed what [`Transport::poll_event`] gives to the mesh;
/// call [`Transport::handle_timeout`] once [`Transport::poll_timeout`] is due.
pub struct Transport {
    local: SocketAddr,
    candidates: Vec<SocketAddr>,
    clock: Clock,
    policy: IceTransportPolicy,
    conns: BTreeMap<ConnId, Connection>,
    /// Connections waiting for TURN allocations before their description is made.
    gathering: BTreeMap<ConnId, Gathering>,
    /// The TURN allocations, by server address.
    allocations: BTreeMap<SocketAddr, Allocation>,
    /// The TURN host names of the current offer and their addresses.
    names: TurnNames,
    by_peer: BTreeMap<String, ConnId>,
    /// Where the last bounded timeout pass stopped, so the next starts after it.
    cursor: Option<ConnId>,
    shared: Shared,
}

impl Transport {
    /// A transport whose socket is bound at `local` and reachable at `host_candidates` (usually
    /// just `local`; the interface addresses when `local` is a wildcard). `now` anchors its time.
    pub fn new(now: Timestamp, local: SocketAddr, host_candidates: Vec<SocketAddr>) -> Self {
        Self {
            local,
            candidates: host_candidates.clone(),
            clock: Clock {
                instant: Instant::now(),
                at: now,
            },
            policy: IceTransportPolicy::All,
            conns: BTreeMap::new(),
            gathering: BTreeMap::new(),
            allocations: BTreeMap::new(),
            names: TurnNames::new(local.is_ipv4()),
            by_peer: BTreeMap::new(),
            cursor: None,
            shared: Shared {
                hosts: host_candidates,
                ..Shared::default()
            },
        }
    }

    /// Sets which candidates the descriptions of new connections carry.
    pub fn set_ice_transport_policy(&mut self, policy: IceTransportPolicy) {
        self.policy = policy;
    }

    /// The TURN relayed addresses this transport holds, by server.
    pub fn relayed_addresses(&self) -> impl Iterator<Item = (SocketAddr, SocketAddr)> + '_ {
        self.allocations
            .iter()
            .filter_map(|(server, a)| Some((*server, a.relayed()?)))
    }

    /// The TURN servers the caller holds are `ice` now: the host names to look up, off the
    /// caller's loop, when this is a new offer ([`TurnNames::offer`]); each answer goes to
    /// [`Transport::turn_name_resolved`].
    pub fn learn_turn_offer(&mut self, ice: Option<&IceServers>) -> Vec<String> {
        self.names.offer(ice)
    }

    /// What looking up TURN host `name` found: `addrs`, empty when nothing was found
    /// ([`TurnNames::answer`]). Connections made from now on may use the server.
    pub fn turn_name_resolved(&mut self, name: &str, addrs: &[IpAddr]) {
        self.names.answer(name, addrs);
    }

    /// The TURN host names and what was found for them.
    pub fn turn_names(&self) -> &TurnNames {
        &self.names
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// How many connections are held (open, being made, or gathering).
    pub fn connection_count(&self) -> usize {
        self.conns.len() + self.gathering.len()
    }

    /// Carries out one of the mesh's outputs, with no TURN servers; see
    /// [`Transport::handle_mesh_output_with_ice`].
    pub fn handle_mesh_output(&mut self, now: Timestamp, output: Output) -> Option<Output> {
        self.handle_mesh_output_with_ice(now, output, None)
    }

    /// Carries out one of the mesh's outputs. The transport's own (`CreateOffer`,
    /// `CreateAnswer`, `ApplyAnswer`, `Send`, `Close`) are taken; any other is handed back for
    /// the caller (rendezvous, the application). A new connection (`CreateOffer`,
    /// `CreateAnswer`) takes its TURN servers from `ice`, the servers current at this moment
    /// (§5.1: asked for each new connection); the other outputs ignore it.
    pub fn handle_mesh_output_with_ice(
        &mut self,
        now: Timestamp,
        output: Output,
        ice: Option<&IceServers>,
    ) -> Option<Output> {
        match output {
            Output::CreateOffer { conn, peer } => self.start(now, conn, peer, Pending::Offer, ice),
            Output::CreateAnswer { conn, peer, offer } => {
                self.start(now, conn, peer, Pending::Answer(offer), ice)
            }
            Output::ApplyAnswer { conn, answer } => self.apply_answer(now, conn, &answer),
            Output::Send { conn, bytes } => self.send(now, conn, bytes),
            Output::Close { conn } => self.close(now, conn),
            other => return Some(other),
        }
        self.settle(now);
        None
    }

    /// A datagram arrived on the socket from `from`. From a TURN server it goes to its
    /// allocation, and a peer's datagram relayed in it goes on as received on the relayed
    /// address; any other goes to the connection str0m says it belongs to (`Rtc::accepts`).
    pub fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, bytes: &[u8]) {
        let local = self.local;
        let received = self
            .allocations
            .get_mut(&from)
            .map_or(Received::NotOurs, |a| {
                a.handle_datagram(now, from, local, bytes)
            });
        match received {
            Received::NotOurs => self.deliver(now, from, local, bytes),
            Received::Handled => {}
            Received::Peer {
                peer,
                relayed,
                bytes,
            } => self.deliver(now, peer, relayed, &bytes),
        }
        self.settle(now);
    }

    /// A datagram from `from` to our `to` (the socket, or a relayed address) for str0m.
    fn deliver(&mut self, now: Timestamp, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let Ok(receive) = Receive::new(Protocol::Udp, from, to, bytes) else {
            self.shared.counters.bad_datagrams += 1;
            return;
        };
        let input = str0m::Input::Receive(self.clock.instant(now), receive);
        let Some(id) = self
            .conns
            .iter()
            .find(|(_, c)| !c.gone && c.rtc.accepts(&input))
            .map(|(id, _)| *id)
        else {
            self.shared.counters.unmatched_datagrams += 1;
            return;
        };
        let clock = self.clock;
        if let Some(c) = self.conns.get_mut(&id) {
            if c.rtc.handle_input(input).is_err() {
                self.shared.counters.rtc_errors += 1;
                c.gone = true;
            }
            c.pump(id, now, clock, &mut self.shared);
        }
        self.reap(id);
    }

    /// The next datagram for the socket.
    pub fn poll_transmit(&mut self) -> Option<Datagram> {
        self.shared.datagrams.pop_front()
    }

    /// The next input for the mesh: `LocalDescription`, `Opened`, `Closed` or `Frame`.
    pub fn poll_event(&mut self) -> Option<Input> {
        self.shared.events.pop_front()
    }

    /// When [`Transport::handle_timeout`] is next wanted: the earliest str0m deadline, end of
    /// a disconnected grace, end of a gathering, or TURN client timer.
    pub fn poll_timeout(&self) -> Option<Wakeup> {
        let conns = self.conns.values().flat_map(|c| {
            [
                Some(Wakeup::new(c.deadline, "str0m timer")),
                c.disconnected_since
                    .map(|t| Wakeup::new(t.saturating_add(DISCONNECTED_GRACE), "ICE disconnected")),
            ]
        });
        let gathering = self
            .gathering
            .values()
            .map(|g| Some(Wakeup::new(g.until, "candidate gathering cap")));
        let turn = self
            .allocations
            .values()
            .map(|a| a.deadline().map(|t| Wakeup::new(t, "TURN client timer")));
        conns
            .chain(gathering)
            .chain(turn)
            .fold(None, Wakeup::earliest)
    }

    /// Serves the TURN allocations whose timer is due at `now`, ends the gatherings past
    /// [`GATHERING_CAP`], and serves the connections whose deadline is due, at most
    /// [`MAX_TIMEOUTS_PER_PASS`] of them, starting after the last one served.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        for a in self.allocations.values_mut() {
            if a.deadline().is_some_and(|t| t <= now) {
                a.handle_timeout(now);
                if let Some(pushed) = a.deadline().and_then(|t| unstall(t, now)) {
                    self.shared.counters.stalled_timeouts += 1;
                    a.defer(pushed);
                }
            }
        }
        self.serve_connections(now);
        self.settle(now);
    }

    fn serve_connections(&mut self, now: Timestamp) {
        let due: Vec<ConnId> = {
            let after = self.cursor;
            let is_due = |c: &Connection| {
                c.deadline <= now
                    || c.disconnected_since
                        .is_some_and(|t| t.saturating_add(DISCONNECTED_GRACE) <= now)
            };
            let (later, earlier): (Vec<_>, Vec<_>) = self
                .conns
                .iter()
                .filter(|(_, c)| is_due(c))
                .map(|(id, _)| *id)
                .partition(|id| after.is_none_or(|a| *id > a));
            later
                .into_iter()
                .chain(earlier)
                .take(MAX_TIMEOUTS_PER_PASS)
                .collect()
        };
        let clock = self.clock;
        for id in due {
            self.cursor = Some(id);
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.disconnected_since
                .is_some_and(|t| t.saturating_add(DISCONNECTED_GRACE) <= now)
            {
                self.shared.counters.ice_failed += 1;
                c.gone = true;
            } else if c.deadline <= now {
                if c.rtc
                    .handle_input(str0m::Input::Timeout(clock.instant(now)))
                    .is_err()
                {
                    self.shared.counters.rtc_errors += 1;
                    c.gone = true;
                }
                c.pump(id, now, clock, &mut self.shared);
                if let Some(pushed) = unstall(c.deadline, now).filter(|_| !c.gone) {
                    self.shared.counters.stalled_timeouts += 1;
                    c.deadline = pushed;
                }
            }
            self.reap(id);
        }
    }

    // ---- the mesh's outputs ------------------------------------------------------------------

    /// A new connection (§5.1): one per peer, so an older one with `peer` is closed; its TURN
    /// servers are those current now (§10), each allocated unless an allocation on it is held;
    /// its description is made in [`Transport::settle`] once they have answered, or at
    /// [`GATHERING_CAP`].
    fn start(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: String,
        pending: Pending,
        ice: Option<&IceServers>,
    ) {
        if self.conns.contains_key(&conn) || self.gathering.contains_key(&conn) {
            self.shared.counters.ignored_outputs += 1;
            return;
        }
        if let Some(old) = self.by_peer.get(&peer).copied() {
            // §5.1: one connection per peer; the newer replaces the older.
            self.shared.counters.replaced += 1;
            if let Some(c) = self.conns.get_mut(&old) {
                c.gone = true;
            }
            self.reap(old);
            if let Some(g) = self.gathering.remove(&old) {
                self.forget(&g.peer, old);
                self.shared.push_event(Input::Closed { conn: old });
            }
        }
        if self.connection_count() >= MAX_TRANSPORT_CONNECTIONS {
            self.shared.counters.table_full += 1;
            self.shared.push_event(Input::Closed { conn });
            return;
        }
        let mut servers = Vec::new();
        for server in usable_servers(ice, &self.names, now) {
            let addr = server.addr;
            match self.allocations.get(&addr).map(Allocation::state) {
                // Its release is still on the server's 5-tuple, which is ours too: a new
                // Allocate there now would be refused, so this connection goes without it.
                Some(AllocationState::Releasing(_)) => continue,
                // Failed: the server holds nothing on the 5-tuple, so a new one may start.
                Some(AllocationState::Failed) => {
                    self.allocations.remove(&addr);
                }
                // Within its credentials' margin: released now (its timer may not have run
                // yet), and this connection goes without it.
                Some(_)
                    if self
                        .allocations
                        .get(&addr)
                        .is_some_and(|a| !a.is_usable(now)) =>
                {
                    if let Some(a) = self.allocations.get_mut(&addr) {
                        a.release(now);
                    }
                    continue;
                }
                _ => {}
            }
            if !self.allocations.contains_key(&addr) {
                if self.allocations.len() >= super::turn::MAX_TURN_ALLOCATIONS {
                    self.shared.counters.turn_table_full += 1;
                    continue;
                }
                self.allocations
                    .insert(addr, Allocation::new(now, self.local, server));
            }
            if let Some(a) = self.allocations.get_mut(&addr) {
                a.users.insert(conn);
                servers.push(addr);
            }
        }
        self.by_peer.insert(peer.clone(), conn);
        self.gathering.insert(
            conn,
            Gathering {
                peer,
                pending,
                servers,
                until: now.saturating_add(GATHERING_CAP),
            },
        );
    }

    /// After every call: descriptions whose gathering is over are made, str0m's datagrams from
    /// relay candidates go through their TURN allocations, the allocations' own datagrams are
    /// queued, and allocations no connection uses are released.
    fn settle(&mut self, now: Timestamp) {
        let done: Vec<ConnId> = self
            .gathering
            .iter()
            .filter(|(_, g)| {
                g.until <= now
                    || g.servers.iter().all(|s| {
                        self.allocations
                            .get(s)
                            .is_none_or(|a| a.state() != AllocationState::Pending)
                    })
            })
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            self.finish(now, id);
        }
        while let Some((source, d)) = self.shared.relayed.pop_front() {
            let sent = self
                .allocations
                .values_mut()
                .find(|a| a.relayed() == Some(source))
                .map(|a| a.send(now, d.to, &d.bytes));
            match sent {
                Some(Ok(wrapped)) => self.shared.push_datagram(wrapped),
                _ => self.shared.counters.relay_unsent += 1,
            }
        }
        self.allocations.retain(|_, a| {
            if a.users.is_empty()
                && matches!(
                    a.state(),
                    AllocationState::Pending | AllocationState::Ready(_)
                )
            {
                // The last connection using it is gone: release it rather than leave it to
                // expire, so the server frees its port and quota at once.
                a.release(now);
            }
            while let Some(d) = a.poll_transmit() {
                self.shared.push_datagram(d);
            }
            !(a.users.is_empty() && a.is_over())
        });
    }

    /// Ends `conn`'s gathering: a fresh `Rtc` with the host candidates (unless
    /// [`IceTransportPolicy::Relay`]) and the relayed address of each of its allocations that
    /// answered, then its offer or answer (§5.1: the candidates are inside the description).
    fn finish(&mut self, now: Timestamp, conn: ConnId) {
        let Some(g) = self.gathering.remove(&conn) else {
            return;
        };
        let mut relayed = Vec::new();
        let mut waited = false;
        for server in &g.servers {
            let Some(a) = self.allocations.get_mut(server) else {
                continue;
            };
            match a.relayed() {
                Some(r) => relayed.push(r),
                None => {
                    waited |= a.state() == AllocationState::Pending;
                    a.users.remove(&conn);
                }
            }
        }
        if waited {
            self.shared.counters.gathering_capped += 1;
        }
        let hosts: &[SocketAddr] = match self.policy {
            IceTransportPolicy::All => &self.candidates,
            IceTransportPolicy::Relay => &[],
        };
        if hosts.is_empty() && relayed.is_empty() {
            self.shared.counters.no_candidates += 1;
            self.forget(&g.peer, conn);
            self.shared.push_event(Input::Closed { conn });
            return;
        }
        let mut rtc = Rtc::builder()
            .set_sctp_max_buffered_amount(MAX_BUFFERED_BYTES)
            .build(self.clock.instant(now));
        for addr in hosts {
            if let Ok(c) = Candidate::host(*addr, "udp") {
                rtc.add_local_candidate(c);
            }
        }
        for addr in &relayed {
            if let Ok(c) = Candidate::relayed(*addr, self.local, "udp") {
                rtc.add_local_candidate(c);
            }
        }
        match g.pending {
            Pending::Offer => self.create_offer(now, conn, g.peer, rtc),
            Pending::Answer(offer) => self.create_answer(now, conn, g.peer, rtc, &offer),
        }
    }

    fn insert(&mut self, now: Timestamp, conn: ConnId, mut c: Connection) {
        let clock = self.clock;
        self.shared.push_event(Input::LocalDescription {
            conn,
            sdp: c.local_sdp.clone(),
        });
        c.pump(conn, now, clock, &mut self.shared);
        self.by_peer.insert(c.peer.clone(), conn);
        self.conns.insert(conn, c);
        self.reap(conn);
    }

    fn create_offer(&mut self, now: Timestamp, conn: ConnId, peer: String, mut rtc: Rtc) {
        let mut api = rtc.sdp_api();
        api.add_channel_with_config(data_channel());
        let Some((offer, pending)) = api.apply() else {
            // An offer with a new channel always has a change to apply.
            self.shared.counters.rtc_errors += 1;
            self.forget(&peer, conn);
            self.shared.push_event(Input::Closed { conn });
            return;
        };
        let c = Connection::new(
            peer,
            rtc,
            Role::Offerer(Some(pending)),
            offer.to_sdp_string(),
        );
        self.insert(now, conn, c);
    }

    fn create_answer(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: String,
        mut rtc: Rtc,
        offer: &str,
    ) {
        let answer = SdpOffer::from_sdp_string(offer)
            .ok()
            .and_then(|o| rtc.sdp_api().accept_offer(o).ok());
        let Some(answer) = answer else {
            self.shared.counters.bad_descriptions += 1;
            self.forget(&peer, conn);
            self.shared.push_event(Input::Closed { conn });
            return;
        };
        let mut c = Connection::new(peer, rtc, Role::Answerer, answer.to_sdp_string());
        c.remote_sdp = offer.into();
        self.permit_remote(now, conn, offer);
        self.insert(now, conn, c);
    }

    /// Asks each TURN allocation `conn` uses for permissions for the addresses of the peer's
    /// candidates in `remote` (RFC 8656 §9), so the peer's checks to our relayed address pass
    /// the server from the start.
    fn permit_remote(&mut self, now: Timestamp, conn: ConnId, remote: &str) {
        let peers = candidate_ips(remote);
        for a in self.allocations.values_mut() {
            if a.users.contains(&conn) {
                for ip in &peers {
                    a.permit(now, *ip);
                }
            }
        }
    }

    fn apply_answer(&mut self, now: Timestamp, conn: ConnId, answer: &str) {
        let clock = self.clock;
        let Some(c) = self.conns.get_mut(&conn) else {
            self.shared.counters.ignored_outputs += 1;
            return;
        };
        let Role::Offerer(pending) = &mut c.role else {
            self.shared.counters.ignored_outputs += 1;
            return;
        };
        let Some(pending) = pending.take() else {
            self.shared.counters.ignored_outputs += 1;
            return;
        };
        let applied = SdpAnswer::from_sdp_string(answer)
            .ok()
            .is_some_and(|a| c.rtc.sdp_api().accept_answer(pending, a).is_ok());
        if applied {
            c.remote_sdp = answer.into();
        } else {
            self.shared.counters.bad_descriptions += 1;
            c.gone = true;
        }
        c.pump(conn, now, clock, &mut self.shared);
        if applied {
            self.permit_remote(now, conn, answer);
        }
        self.reap(conn);
    }

    fn send(&mut self, now: Timestamp, conn: ConnId, bytes: Bytes) {
        let clock = self.clock;
        let Some(c) = self.conns.get_mut(&conn).filter(|c| c.channel.is_some()) else {
            self.shared.counters.send_dropped += 1;
            return;
        };
        if c.outbox_bytes.saturating_add(bytes.len()) > MAX_OUTBOX_BYTES {
            self.shared.counters.send_dropped += 1;
            return;
        }
        c.outbox_bytes += bytes.len();
        c.outbox.push_back(bytes);
        c.pump(conn, now, clock, &mut self.shared);
        self.reap(conn);
    }

    /// The mesh closed `conn`: str0m says goodbye (DTLS close_notify) and the connection is
    /// forgotten. The mesh asked, so no `Closed` goes back.
    fn close(&mut self, now: Timestamp, conn: ConnId) {
        let clock = self.clock;
        if let Some(g) = self.gathering.remove(&conn) {
            self.forget(&g.peer, conn);
            return;
        }
        let Some(mut c) = self.conns.remove(&conn) else {
            self.shared.counters.ignored_outputs += 1;
            return;
        };
        self.forget(&c.peer, conn);
        if c.rtc.close().is_ok() {
            c.drain(conn, now, clock, &mut self.shared);
        }
    }

    // ---- housekeeping ------------------------------------------------------------------------

    /// Forgets `conn` as `peer`'s connection and as a user of the TURN allocations (which
    /// [`Transport::settle`] releases once unused).
    fn forget(&mut self, peer: &str, conn: ConnId) {
        if self.by_peer.get(peer) == Some(&conn) {
            self.by_peer.remove(peer);
        }
        for a in self.allocations.values_mut() {
            a.users.remove(&conn);
        }
    }

    /// Forgets `conn` if it is gone, telling the mesh (`Closed`).
    fn reap(&mut self, conn: ConnId) {
        if !self.conns.get(&conn).is_some_and(|c| c.gone) {
            return;
        }
        if let Some(mut c) = self.conns.remove(&conn) {
            self.forget(&c.peer, conn);
            c.rtc.disconnect();
            self.shared.push_event(Input::Closed { conn });
        }
    }
}

/// The deadline to keep after serving a timer at `now`: `None` if str0m's next deadline is later
/// than `now`, else `now` + [`STALL_STEP`], since a deadline that does not advance would have the
/// loop call again at once, forever.
fn unstall(deadline: Timestamp, now: Timestamp) -> Option<Timestamp> {
    (deadline <= now).then(|| now.saturating_add(STALL_STEP))
}

/// The addresses of the candidates in a description (`a=candidate:<foundation> <component>
/// <transport> <priority> <address> <port> typ …`, RFC 8839 §5.1); names (mDNS) are skipped.
fn candidate_ips(sdp: &str) -> Vec<std::net::IpAddr> {
    let mut ips: Vec<std::net::IpAddr> = sdp
        .lines()
        .filter_map(|l| l.trim().strip_prefix("a=candidate:"))
        .filter_map(|c| c.split_ascii_whitespace().nth(4)?.parse().ok())
        .collect();
    ips.sort_unstable();
    ips.dedup();
    ips
}

/// The offerer's one channel (§5.1): labelled `data`, ordered, reliable, negotiated in band.
fn data_channel() -> ChannelConfig {
    ChannelConfig {
        label: DATA_CHANNEL_LABEL.into(),
        ordered: true,
        reliability: Reliability::Reliable,
        negotiated: None,
        protocol: String::new(),
    }
}

impl Connection {
    fn new(peer: String, rtc: Rtc, role: Role, local_sdp: String) -> Self {
        Self {
            peer,
            rtc,
            role,
            local_sdp,
            remote_sdp: String::new(),
            channel: None,
            deadline: Timestamp::MAX,
            disconnected_since: None,
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            gone: false,
        }
    }

    /// Drains str0m, then writes queued frames while the channel takes them, draining after
    /// each write (str0m's rule: every change is followed by a full drain).
    fn pump(&mut self, id: ConnId, now: Timestamp, clock: Clock, shared: &mut Shared) {
        self.drain(id, now, clock, shared);
        while !self.gone
            && let Some(channel) = self.channel
            && let Some(front) = self.outbox.front()
        {
            let Some(mut ch) = self.rtc.channel(channel) else {
                // The channel is no longer there; what is queued cannot go.
                shared.counters.send_dropped += self.outbox.len() as u64;
                self.outbox.clear();
                self.outbox_bytes = 0;
                break;
            };
            match ch.write(true, front) {
                Ok(true) => {
                    let sent = self.outbox.pop_front().map_or(0, |b| b.len());
                    self.outbox_bytes -= sent;
                }
                // The buffer is full: the rest waits for the peer's acknowledgements.
                Ok(false) => break,
                Err(_) => {
                    shared.counters.send_dropped += 1;
                    let dropped = self.outbox.pop_front().map_or(0, |b| b.len());
                    self.outbox_bytes -= dropped;
                }
            }
            self.drain(id, now, clock, shared);
        }
    }

    /// Takes str0m's outputs up to its next timeout.
    fn drain(&mut self, id: ConnId, now: Timestamp, clock: Clock, shared: &mut Shared) {
        for _ in 0..MAX_OUTPUTS_PER_DRAIN {
            match self.rtc.poll_output() {
                Ok(str0m::Output::Timeout(t)) => {
                    self.deadline = clock.timestamp(t);
                    return;
                }
                Ok(str0m::Output::Transmit(t)) => shared.push_transmit(
                    t.source,
                    Datagram {
                        to: t.destination,
                        bytes: t.contents.into(),
                    },
                ),
                Ok(str0m::Output::Event(e)) => self.on_event(id, now, e, shared),
                Err(_) => break,
            }
            if !self.rtc.is_alive() {
                break;
            }
        }
        // An error, a closed `Rtc`, or a drain that never ended: the connection is over.
        if self.rtc.is_alive() {
            shared.counters.rtc_errors += 1;
        }
        self.gone = true;
    }

    fn on_event(&mut self, id: ConnId, now: Timestamp, event: Event, shared: &mut Shared) {
        match event {
            Event::ChannelOpen(channel, _) if self.channel.is_none() => {
                // The answerer takes the channel it receives, whatever its label (§5.1).
                self.channel = Some(channel);
                shared.push_event(Input::Opened {
                    conn: id,
                    local_fingerprint: channel_binding(&self.local_sdp),
                    remote_fingerprint: channel_binding(&self.remote_sdp),
                });
            }
            Event::ChannelOpen(..) => shared.counters.extra_channels += 1,
            Event::ChannelData(d) if Some(d.id) == self.channel => {
                if d.binary {
                    shared.push_event(Input::Frame {
                        conn: id,
                        bytes: d.data.into(),
                    });
                } else {
                    shared.counters.text_ignored += 1;
                }
            }
            Event::ChannelData(_) => shared.counters.extra_channels += 1,
            Event::ChannelClose(channel) if Some(channel) == self.channel => self.gone = true,
            Event::Closed => self.gone = true,
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.disconnected_since.get_or_insert(now);
            }
            Event::IceConnectionStateChange(_) => self.disconnected_since = None,
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "transport_turn_tests.rs"]
pub(crate) mod turn_tests;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const T0: u64 = 1_790_000_000_000;
    /// The most virtual milliseconds a test runs a pair for.
    const RUN_LIMIT_MS: u64 = 60_000;

    pub(super) fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// One end of an in-memory link: a [`Transport`] or a bare str0m `Rtc` playing the peer.
    pub(super) trait End {
        fn addr(&self) -> SocketAddr;
        fn receive(&mut self, now: Timestamp, from: SocketAddr, bytes: &[u8]);
        fn transmit(&mut self) -> Option<Datagram>;
        fn deadline(&self) -> Option<Timestamp>;
        fn timeout(&mut self, now: Timestamp);
        fn collect(&mut self);
    }

    pub(super) struct Side {
        pub(super) t: Transport,
        pub(super) events: Vec<Input>,
    }

    impl Side {
        pub(super) fn new(port: u16) -> Self {
            let a = addr(port);
            Self {
                t: Transport::new(Timestamp::from_millis(T0), a, vec![a]),
                events: Vec::new(),
            }
        }

        pub(super) fn output(&mut self, now: u64, out: Output) {
            assert!(
                self.t
                    .handle_mesh_output(Timestamp::from_millis(now), out)
                    .is_none()
            );
            self.collect();
        }

        pub(super) fn description(&self, conn: ConnId) -> Option<String> {
            self.events.iter().find_map(|e| match e {
                Input::LocalDescription { conn: c, sdp } if *c == conn => Some(sdp.clone()),
                _ => None,
            })
        }

        pub(super) fn opened(&self, conn: ConnId) -> Option<(String, String)> {
            self.events.iter().find_map(|e| match e {
                Input::Opened {
                    conn: c,
                    local_fingerprint,
                    remote_fingerprint,
                } if *c == conn => Some((local_fingerprint.clone(), remote_fingerprint.clone())),
                _ => None,
            })
        }

        pub(super) fn closed(&self, conn: ConnId) -> bool {
            self.events
                .iter()
                .any(|e| matches!(e, Input::Closed { conn: c } if *c == conn))
        }

        pub(super) fn frames(&self, conn: ConnId) -> Vec<Bytes> {
            self.events
                .iter()
                .filter_map(|e| match e {
                    Input::Frame { conn: c, bytes } if *c == conn => Some(bytes.clone()),
                    _ => None,
                })
                .collect()
        }
    }

    impl End for Side {
        fn addr(&self) -> SocketAddr {
            self.t.local
        }
        fn receive(&mut self, now: Timestamp, from: SocketAddr, bytes: &[u8]) {
            self.t.handle_datagram(now, from, bytes);
        }
        fn transmit(&mut self) -> Option<Datagram> {
            self.t.poll_transmit()
        }
        fn deadline(&self) -> Option<Timestamp> {
            self.t.poll_timeout().map(|w| w.at)
        }
        fn timeout(&mut self, now: Timestamp) {
            self.t.handle_timeout(now);
        }
        fn collect(&mut self) {
            while let Some(e) = self.t.poll_event() {
                self.events.push(e);
            }
        }
    }

    /// A bare str0m peer, as another implementation would be.
    struct Raw {
        rtc: Rtc,
        addr: SocketAddr,
        clock: Clock,
        deadline: Timestamp,
        out: VecDeque<Datagram>,
        opened: Vec<(ChannelId, String)>,
        received: Vec<(bool, Vec<u8>)>,
    }

    impl Raw {
        fn answering(port: u16, clock: Clock, offer: &str) -> (Self, String) {
            let a = addr(port);
            let mut rtc = Rtc::new(clock.instant(Timestamp::from_millis(T0)));
            rtc.add_local_candidate(Candidate::host(a, "udp").unwrap());
            let offer = SdpOffer::from_sdp_string(offer).unwrap();
            let answer = rtc.sdp_api().accept_offer(offer).unwrap();
            let mut raw = Self {
                rtc,
                addr: a,
                clock,
                deadline: Timestamp::MAX,
                out: VecDeque::new(),
                opened: Vec::new(),
                received: Vec::new(),
            };
            raw.drain();
            (raw, answer.to_sdp_string())
        }

        fn drain(&mut self) {
            loop {
                match self.rtc.poll_output().unwrap() {
                    str0m::Output::Timeout(t) => {
                        self.deadline = self.clock.timestamp(t);
                        return;
                    }
                    str0m::Output::Transmit(t) => self.out.push_back(Datagram {
                        to: t.destination,
                        bytes: t.contents.into(),
                    }),
                    str0m::Output::Event(Event::ChannelOpen(id, label)) => {
                        self.opened.push((id, label))
                    }
                    str0m::Output::Event(Event::ChannelData(d)) => {
                        self.received.push((d.binary, d.data))
                    }
                    str0m::Output::Event(_) => {}
                }
            }
        }

        fn write(&mut self, binary: bool, bytes: &[u8]) {
            let id = self.opened[0].0;
            assert!(self.rtc.channel(id).unwrap().write(binary, bytes).unwrap());
            self.drain();
        }
    }

    impl End for Raw {
        fn addr(&self) -> SocketAddr {
            self.addr
        }
        fn receive(&mut self, now: Timestamp, from: SocketAddr, bytes: &[u8]) {
            let r = Receive::new(Protocol::Udp, from, self.addr, bytes).unwrap();
            self.rtc
                .handle_input(str0m::Input::Receive(self.clock.instant(now), r))
                .unwrap();
            self.drain();
        }
        fn transmit(&mut self) -> Option<Datagram> {
            self.out.pop_front()
        }
        fn deadline(&self) -> Option<Timestamp> {
            self.rtc.is_alive().then_some(self.deadline)
        }
        fn timeout(&mut self, now: Timestamp) {
            self.rtc
                .handle_input(str0m::Input::Timeout(self.clock.instant(now)))
                .unwrap();
            self.drain();
        }
        fn collect(&mut self) {}
    }

    /// Runs two ends over an in-memory link in virtual time, from `*now` until `until` holds or
    /// [`RUN_LIMIT_MS`] passes; `cut` loses every datagram. True if `until` held.
    pub(super) fn run<X: End, Y: End>(
        now: &mut u64,
        a: &mut X,
        b: &mut Y,
        cut: bool,
        mut until: impl FnMut(&X, &Y) -> bool,
    ) -> bool {
        let limit = *now + RUN_LIMIT_MS;
        while *now <= limit {
            let t = Timestamp::from_millis(*now);
            let mut moved = true;
            while moved {
                moved = false;
                while let Some(d) = a.transmit() {
                    moved = true;
                    if !cut && d.to == b.addr() {
                        b.receive(t, a.addr(), &d.bytes);
                    }
                }
                while let Some(d) = b.transmit() {
                    moved = true;
                    if !cut && d.to == a.addr() {
                        a.receive(t, b.addr(), &d.bytes);
                    }
                }
            }
            a.collect();
            b.collect();
            if until(a, b) {
                return true;
            }
            *now = [a.deadline(), b.deadline()]
                .into_iter()
                .flatten()
                .map(|d| d.as_millis())
                .min()
                .unwrap_or(limit + 1)
                .max(*now + 1);
            let t = Timestamp::from_millis(*now);
            if a.deadline().is_some_and(|d| d <= t) {
                a.timeout(t);
            }
            if b.deadline().is_some_and(|d| d <= t) {
                b.timeout(t);
            }
        }
        false
    }

    pub(super) const A: ConnId = ConnId(1);
    pub(super) const B: ConnId = ConnId(7);

    /// Two transports through offer, answer and applied answer, not yet run.
    fn negotiated() -> (u64, Side, Side) {
        let (mut a, mut b) = (Side::new(40_001), Side::new(40_002));
        a.output(
            T0,
            Output::CreateOffer {
                conn: A,
                peer: "did:key:b".into(),
            },
        );
        let offer = a.description(A).expect("an offer at once");
        b.output(
            T0,
            Output::CreateAnswer {
                conn: B,
                peer: "did:key:a".into(),
                offer,
            },
        );
        let answer = b.description(B).expect("an answer at once");
        a.output(T0, Output::ApplyAnswer { conn: A, answer });
        (T0, a, b)
    }

    /// Two transports with their channel open.
    pub(super) fn open_pair() -> (u64, Side, Side) {
        let (mut now, mut a, mut b) = negotiated();
        let opened = run(&mut now, &mut a, &mut b, false, |a, b| {
            a.opened(A).is_some() && b.opened(B).is_some()
        });
        assert!(opened, "the channel opens on both sides");
        (now, a, b)
    }

    #[test]
    fn the_description_carries_the_host_candidates_and_goes_out_at_once() {
        let (_, a, b) = negotiated();
        for (side, conn, port) in [(&a, A, 40_001), (&b, B, 40_002)] {
            let sdp = side.description(conn).unwrap();
            let host = format!("127.0.0.1 {port} typ host");
            assert!(
                sdp.lines()
                    .any(|l| l.starts_with("a=candidate") && l.contains(&host)),
                "{sdp}"
            );
            // Nothing trickles after it: the description is the only event.
            assert_eq!(side.events.len(), 1);
        }
    }

    #[test]
    fn a_connection_opens_only_when_its_channel_opens_with_both_fingerprints() {
        let (mut now, mut a, mut b) = negotiated();
        assert!(a.opened(A).is_none() && b.opened(B).is_none());
        // ICE connected and DTLS up are not yet open: only the channel's opening counts.
        let connected = run(&mut now, &mut a, &mut b, false, |a, _| {
            a.t.conns.get(&A).is_some_and(|c| c.rtc.is_connected())
        });
        assert!(connected);
        let opened = run(&mut now, &mut a, &mut b, false, |a, b| {
            a.opened(A).is_some() && b.opened(B).is_some()
        });
        assert!(opened);
        let (al, ar) = a.opened(A).unwrap();
        let (bl, br) = b.opened(B).unwrap();
        assert!(
            al.starts_with("sha-256 ") && bl.starts_with("sha-256 "),
            "{al} {bl}"
        );
        assert_ne!(al, bl);
        // Each side's local is the other's remote (§6.2).
        assert_eq!((al.as_str(), ar.as_str()), (br.as_str(), bl.as_str()));
        assert_eq!(al, channel_binding(&a.description(A).unwrap()));
        assert_eq!(bl, channel_binding(&b.description(B).unwrap()));
    }

    /// M-5-b, M-5.1-b: frames arrive whole and in order both ways, as binary messages: the
    /// receiving side ignores text, so a side that wrote its frames as text would deliver none
    /// (the test of ignoring text has a bare str0m peer write it, not the transport).
    #[test]
    fn frames_cross_the_channel_in_order_each_way() {
        let (mut now, mut a, mut b) = open_pair();
        for i in 0..20u8 {
            a.output(
                now,
                Output::Send {
                    conn: A,
                    bytes: vec![i; 1 + usize::from(i) * 300].into(),
                },
            );
        }
        b.output(
            now,
            Output::Send {
                conn: B,
                bytes: Bytes::from_static(b"back"),
            },
        );
        assert!(run(&mut now, &mut a, &mut b, false, |a, b| {
            b.frames(B).len() == 20 && a.frames(A).len() == 1
        }));
        let got = b.frames(B);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f, &vec![i as u8; 1 + i * 300]);
        }
        assert_eq!(a.frames(A), vec![b"back".to_vec()]);
    }

    #[test]
    fn the_offerer_makes_one_ordered_reliable_channel_labelled_data() {
        let mut a = Side::new(40_011);
        a.output(
            T0,
            Output::CreateOffer {
                conn: A,
                peer: "did:key:raw".into(),
            },
        );
        let offer = a.description(A).unwrap();
        let (mut raw, answer) = Raw::answering(40_012, a.t.clock, &offer);
        a.output(T0, Output::ApplyAnswer { conn: A, answer });
        let mut now = T0;
        assert!(run(&mut now, &mut a, &mut raw, false, |a, r| {
            a.opened(A).is_some() && !r.opened.is_empty()
        }));
        assert_eq!(raw.opened.len(), 1);
        let (id, label) = raw.opened[0].clone();
        assert_eq!(label, DATA_CHANNEL_LABEL);
        let config = raw.rtc.channel(id).unwrap().config().cloned().unwrap();
        assert!(config.ordered);
        assert_eq!(config.reliability, Reliability::Reliable);
    }

    /// M-5.1-a, M-5.1-c: the label and the gathering cap as §5.1 writes them, against the
    /// constants the transport uses. The tests of the channel and of gathering compare with
    /// and run to the constants, so a changed constant moves them with it and they still pass.
    #[test]
    fn the_channel_label_and_the_gathering_cap_are_as_the_spec_writes_them() {
        // §5.1: "The offerer creates one data channel labelled data".
        assert_eq!(DATA_CHANNEL_LABEL, "data");
        // §5.1: "the reference node waits for gathering to finish, or 2 s".
        assert_eq!(GATHERING_CAP, Duration::from_secs(2));
    }

    #[test]
    fn text_messages_are_ignored_and_counted_and_binary_ones_delivered() {
        let mut a = Side::new(40_021);
        a.output(
            T0,
            Output::CreateOffer {
                conn: A,
                peer: "did:key:raw".into(),
            },
        );
        let offer = a.description(A).unwrap();
        let (mut raw, answer) = Raw::answering(40_022, a.t.clock, &offer);
        a.output(T0, Output::ApplyAnswer { conn: A, answer });
        let mut now = T0;
        assert!(run(&mut now, &mut a, &mut raw, false, |a, r| {
            a.opened(A).is_some() && !r.opened.is_empty()
        }));
        raw.write(
            false,
            br#"{"room":"r","type":"live","from":"x","payload":1}"#,
        );
        raw.write(true, b"binary");
        assert!(run(&mut now, &mut a, &mut raw, false, |a, _| {
            !a.frames(A).is_empty()
        }));
        assert_eq!(a.frames(A), vec![b"binary".to_vec()]);
        assert_eq!(a.t.counters().text_ignored, 1);
    }

    #[test]
    fn a_peer_that_closes_makes_the_connection_gone() {
        let (mut now, mut a, mut b) = open_pair();
        b.output(now, Output::Close { conn: B });
        assert_eq!(b.t.connection_count(), 0);
        // The mesh asked for the close, so it hears no `Closed` back.
        assert!(!b.closed(B));
        assert!(run(&mut now, &mut a, &mut b, false, |a, _| a.closed(A)));
        assert_eq!(a.t.connection_count(), 0);
    }

    #[test]
    fn a_peer_that_goes_silent_is_gone_after_the_disconnected_grace() {
        let (mut now, mut a, mut b) = open_pair();
        let cut_at = now;
        assert!(run(&mut now, &mut a, &mut b, true, |a, _| a.closed(A)));
        assert_eq!(a.t.counters().ice_failed, 1, "{:?}", a.t.counters());
        assert!(now - cut_at >= DISCONNECTED_GRACE.as_millis() as u64);
        assert_eq!(a.t.connection_count(), 0);
    }

    #[test]
    fn a_new_connection_with_the_same_peer_closes_the_old_one() {
        let (now, mut a, _b) = open_pair();
        a.output(
            now,
            Output::CreateOffer {
                conn: ConnId(2),
                peer: "did:key:b".into(),
            },
        );
        assert!(a.closed(A));
        assert_eq!(a.t.counters().replaced, 1);
        assert_eq!(a.t.connection_count(), 1);
        assert!(a.description(ConnId(2)).is_some());
    }

    #[test]
    fn an_offer_that_does_not_parse_closes_the_connection_and_is_counted() {
        let mut b = Side::new(40_031);
        b.output(
            T0,
            Output::CreateAnswer {
                conn: B,
                peer: "did:key:a".into(),
                offer: "v=0\r\nnot an offer\r\n".into(),
            },
        );
        assert!(b.closed(B));
        assert!(b.description(B).is_none());
        assert_eq!(b.t.counters().bad_descriptions, 1);
        assert_eq!(b.t.connection_count(), 0);
    }

    #[test]
    fn an_answer_that_does_not_parse_closes_the_connection_and_is_counted() {
        let mut a = Side::new(40_041);
        a.output(
            T0,
            Output::CreateOffer {
                conn: A,
                peer: "did:key:b".into(),
            },
        );
        a.output(
            T0,
            Output::ApplyAnswer {
                conn: A,
                answer: "garbage".into(),
            },
        );
        assert!(a.closed(A));
        assert_eq!(a.t.counters().bad_descriptions, 1);
    }

    #[test]
    fn outputs_for_an_unknown_connection_are_ignored_and_counted() {
        let mut a = Side::new(40_051);
        a.output(
            T0,
            Output::ApplyAnswer {
                conn: ConnId(99),
                answer: "x".into(),
            },
        );
        a.output(T0, Output::Close { conn: ConnId(99) });
        a.output(
            T0,
            Output::Send {
                conn: ConnId(99),
                bytes: Bytes::from_static(&[1]),
            },
        );
        assert!(a.events.is_empty());
        assert_eq!(a.t.counters().ignored_outputs, 2);
        assert_eq!(a.t.counters().send_dropped, 1);
    }

    #[test]
    fn a_datagram_no_connection_accepts_is_counted() {
        let mut a = Side::new(40_061);
        // A STUN binding request for credentials nobody here holds.
        let mut stun = vec![0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42];
        stun.extend_from_slice(&[7; 12]);
        a.t.handle_datagram(Timestamp::from_millis(T0), addr(9), &stun);
        a.t.handle_datagram(Timestamp::from_millis(T0), addr(9), &[0xff; 3]);
        let c = a.t.counters();
        assert_eq!(c.unmatched_datagrams + c.bad_datagrams, 2);
        assert!(a.t.poll_transmit().is_none());
    }

    #[test]
    fn other_outputs_are_handed_back_for_the_caller() {
        let mut t = Transport::new(Timestamp::from_millis(T0), addr(1), vec![addr(1)]);
        let out = Output::Admitted {
            room: "r".into(),
            peer: "p".into(),
        };
        assert_eq!(
            t.handle_mesh_output(Timestamp::from_millis(T0), out.clone()),
            Some(out)
        );
    }

    #[test]
    fn a_deadline_that_does_not_advance_is_pushed_by_the_stall_step() {
        let now = Timestamp::from_millis(T0);
        let step = STALL_STEP.as_millis() as u64;
        assert_eq!(unstall(now, now), Some(Timestamp::from_millis(T0 + step)));
        assert_eq!(
            unstall(Timestamp::from_millis(T0 - 1), now),
            Some(Timestamp::from_millis(T0 + step))
        );
        assert_eq!(unstall(Timestamp::from_millis(T0 + 1), now), None);
    }

    #[test]
    fn deadlines_round_up_to_the_millisecond() {
        let clock = Clock {
            instant: Instant::now(),
            at: Timestamp::from_millis(T0),
        };
        let t = clock.instant(Timestamp::from_millis(T0 + 5));
        assert_eq!(clock.timestamp(t), Timestamp::from_millis(T0 + 5));
        let later = t + Duration::from_micros(300);
        assert_eq!(clock.timestamp(later), Timestamp::from_millis(T0 + 6));
        // Before the anchor is the anchor.
        assert_eq!(
            clock.instant(Timestamp::from_millis(T0 - 10)),
            clock.instant(Timestamp::from_millis(T0))
        );
    }
}
