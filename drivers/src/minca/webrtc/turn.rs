//! TURN relay candidates beside str0m (Minca 04 Network §5.1: "host candidates, and TURN relay
//! candidates where offered"; §1.4 "TURN passwords"; §3 `ice`; §10).
//!
//! str0m has no TURN client, so the transport runs one allocation per TURN server beside its
//! `Rtc`s: [`Allocation`] wraps the sans-IO client of `turn-client-proto` (RFC 8656 over UDP,
//! long-term credentials of RFC 8489 §9.2, which the relay's `ice` offer carries as `username` and
//! `credential`). It allocates a relayed address, refreshes it, installs permissions for the
//! peers' addresses (CreatePermission) and carries the connections' datagrams to and from the
//! server in Send and Data indications.
//!
//! Which servers a connection may use is decided here once ([`usable_servers`]): only those of an
//! offer whose `expiresAt` is in the future (§10), only `turn:` URLs for UDP ([`udp_target`];
//! `turns:`, TURN over TLS, is not supported: the transport moves plain datagrams on one UDP
//! socket), at most [`MAX_TURN_ALLOCATIONS`].
//!
//! Real deployments offer their TURN servers by host name (`turn:turn.example.com:3478`, §1.4,
//! §3 `ice`). The transport resolves no names, and nothing here waits on DNS: [`TurnNames`] keeps
//! the names of the current offer and the addresses found for them, which the caller looks up off
//! its loop and hands in as answers. A URL naming a host is used once its address is known, and
//! never before: a connection made while the lookup is out has no relay candidate from that
//! server (the gathering cap of §5.1 still holds).
//!
//! An allocation is made on the transport's one socket, and a TURN server knows an allocation by
//! its 5-tuple, so there is at most one allocation per server per transport, shared by every
//! connection that uses that server. It is released (deleted on the server) when the last
//! connection using it is gone, and also when its credentials expire: §10 allows a server's use
//! only while its offer is current.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::string::String;
use std::time::Duration;
use std::vec::Vec;

use turn_client_proto::api::{TurnConfig, TurnEvent, TurnPollRet, TurnRecvRet};
use turn_client_proto::prelude::TurnClientApi as _;
use turn_client_proto::stun::Instant;
use turn_client_proto::stun::agent::Transmit;
use turn_client_proto::types::{TransportType, TurnCredentials};
use turn_client_proto::udp::TurnClientUdp;
use weft_proto::core::{ConnId, Timestamp};
use weft_proto::minca::relay_wire::{IceServers, MAX_ICE_SERVERS};

use super::transport::Datagram;

/// The port of a `turn:` URL that names none (RFC 7065 §3: the default TURN port).
pub const TURN_DEFAULT_PORT: u16 = 3478;

/// The most TURN allocations a transport holds at once, one per server: as many servers as one
/// relay's offer may carry ([`MAX_ICE_SERVERS`]). The client's union of several relays' offers
/// may name more; the first ones are used.
pub const MAX_TURN_ALLOCATIONS: usize = MAX_ICE_SERVERS;

/// The most peer addresses one allocation holds permissions for. A connection asks for the
/// addresses of its peer's candidates, a handful each; this is room for every connection the
/// transport may hold to ask for a few.
pub const MAX_TURN_PERMISSIONS: usize = 256;

/// The most rounds of the TURN client's timers one call runs, and datagrams it queues: it makes
/// a few requests at a time (an Allocate, a Refresh, a permission per peer), so a client still
/// busy past this is broken and waits for the next call rather than spinning the loop.
pub const MAX_TURN_STEPS: usize = 64;

/// How long before its offer's `expiresAt` an allocation stops being used and is released, and a
/// server stops being used for new connections. §10 forbids any use from `expiresAt` on; a TURN
/// server checks the TURN REST username's expiry on every request, so the release (itself an
/// authenticated Refresh) must go while the password still works, or the server keeps the
/// allocation on the transport's one 5-tuple until its lifetime ends and refuses a new one there.
pub const TURN_EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// How long a released allocation keeps trying to tell the server (its Refresh with lifetime
/// 0 paced and resent); past it the allocation is forgotten and the server lets it expire.
pub const TURN_RELEASE_GRACE: Duration = Duration::from_secs(5);

/// One TURN server a connection may use: where it is, and the credentials the relay offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnServer {
    /// The server's UDP address.
    pub addr: SocketAddr,
    /// The TURN REST username.
    pub username: String,
    /// The TURN REST password.
    pub credential: String,
    /// When the offer stops being usable (§10).
    pub expires_at: Timestamp,
}

/// The most TURN host names [`TurnNames`] holds, and so looks up at once: four for each server
/// one relay's offer may carry ([`MAX_ICE_SERVERS`]), room for a few names per server or the
/// union of several relays' offers. Names past it are not looked up, and counted
/// ([`NameCounters::over_bound`]).
pub const MAX_TURN_NAMES: usize = 4 * MAX_ICE_SERVERS;

/// The longest host name looked up (RFC 1035 §2.3.4: 255 octets on the wire, 253 as text).
pub const MAX_TURN_NAME_CHARS: usize = 253;

/// Where a usable `turn:` URL points: an address, or a host name to look up first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnTarget {
    /// `turn:<ip>[:<port>]`.
    Addr(SocketAddr),
    /// `turn:<name>[:<port>]`, the name in lower case.
    Name {
        /// The host name.
        name: String,
        /// The port.
        port: u16,
    },
}

/// Where a TURN URL points, if this transport can use it: `turn:<host>[:<port>]` with no
/// `?transport=` other than `udp`, the host an IP address or a DNS host name (letters, digits,
/// `-` and `.`, at most [`MAX_TURN_NAME_CHARS`]). `turns:` (TURN over TLS or DTLS) is not
/// supported: the transport moves plain datagrams on its one UDP socket. This is the one rule
/// for which URLs are used.
pub fn udp_target(url: &str) -> Option<TurnTarget> {
    let rest = url.strip_prefix("turn:")?;
    let (hostport, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    if query.is_some_and(|q| !q.eq_ignore_ascii_case("transport=udp")) {
        return None;
    }
    if let Ok(addr) = hostport.parse::<SocketAddr>() {
        return Some(TurnTarget::Addr(addr));
    }
    if let Ok(ip) = hostport.parse::<IpAddr>() {
        return Some(TurnTarget::Addr(SocketAddr::new(ip, TURN_DEFAULT_PORT)));
    }
    if let Some(ip) = hostport.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return ip
            .parse::<IpAddr>()
            .ok()
            .map(|ip| TurnTarget::Addr(SocketAddr::new(ip, TURN_DEFAULT_PORT)));
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok()?),
        None => (hostport, TURN_DEFAULT_PORT),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(TurnTarget::Addr(SocketAddr::new(ip, port)));
    }
    is_host_name(host).then(|| TurnTarget::Name {
        name: host.trim_end_matches('.').to_ascii_lowercase(),
        port,
    })
}

/// A DNS host name (RFC 1123 §2.1 letters, digits and hyphens in dot-separated labels of at
/// most 63), so nothing else (a user part, a path, spaces) reaches the resolver.
fn is_host_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= MAX_TURN_NAME_CHARS
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// What [`TurnNames`] counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NameCounters {
    /// Lookups that found no address: the name is skipped until the next offer.
    pub failed: u64,
    /// Names of an offer past [`MAX_TURN_NAMES`]: not looked up, so not used.
    pub over_bound: u64,
    /// Answers for a name nobody asked about (no longer in the offer, or answered already).
    pub stale_answers: u64,
}

/// One name's lookup.
#[derive(Clone, Debug)]
struct NameEntry {
    /// The address last found; kept while a new lookup is out, since a server rarely moves.
    addr: Option<IpAddr>,
    /// A lookup is out.
    asked: bool,
}

/// The TURN host names of the current offer and the addresses found for them; see the
/// [module docs](self). Sans-IO: [`TurnNames::offer`] says which names to look up, and
/// [`TurnNames::answer`] takes what a lookup found.
#[derive(Clone, Debug)]
pub struct TurnNames {
    /// Answers of this family are preferred: the transport's socket's (an IPv4 socket cannot
    /// reach an IPv6 server).
    prefer_ipv4: bool,
    /// The offer the names are of.
    offer: Option<IceServers>,
    names: BTreeMap<String, NameEntry>,
    counters: NameCounters,
}

impl TurnNames {
    /// No names yet; answers of the IPv4 family are preferred when `prefer_ipv4`, else IPv6.
    pub fn new(prefer_ipv4: bool) -> Self {
        Self {
            prefer_ipv4,
            offer: None,
            names: BTreeMap::new(),
            counters: NameCounters::default(),
        }
    }

    /// The TURN servers are `ice` now. When that is a new offer, its host names (at most
    /// [`MAX_TURN_NAMES`], in the offer's order) are to be looked up again, and are returned;
    /// names no longer offered are forgotten, and an address already found is kept until the
    /// new answer. The same offer again asks nothing.
    pub fn offer(&mut self, ice: Option<&IceServers>) -> Vec<String> {
        if self.offer.as_ref() == ice {
            return Vec::new();
        }
        self.offer = ice.cloned();
        let mut wanted: Vec<String> = Vec::new();
        let urls = ice
            .into_iter()
            .flat_map(|ice| ice.servers.iter())
            .flat_map(|s| s.urls.iter());
        for url in urls {
            let Some(TurnTarget::Name { name, .. }) = udp_target(url) else {
                continue;
            };
            if wanted.contains(&name) {
                continue;
            }
            if wanted.len() >= MAX_TURN_NAMES {
                self.counters.over_bound += 1;
                continue;
            }
            wanted.push(name);
        }
        self.names.retain(|name, _| wanted.contains(name));
        for name in &wanted {
            self.names
                .entry(name.clone())
                .or_insert(NameEntry {
                    addr: None,
                    asked: true,
                })
                .asked = true;
        }
        wanted
    }

    /// What the lookup of `name` found: `addrs`, empty when it failed (counted; the name is
    /// skipped until the next offer). The first address of the preferred family is used, else
    /// the first.
    pub fn answer(&mut self, name: &str, addrs: &[IpAddr]) {
        let Some(entry) = self.names.get_mut(name).filter(|e| e.asked) else {
            self.counters.stale_answers += 1;
            return;
        };
        entry.asked = false;
        entry.addr = addrs
            .iter()
            .find(|a| a.is_ipv4() == self.prefer_ipv4)
            .or(addrs.first())
            .copied();
        if entry.addr.is_none() {
            self.counters.failed += 1;
        }
    }

    /// The address found for `name`, if any.
    pub fn address(&self, name: &str) -> Option<IpAddr> {
        self.names.get(name)?.addr
    }

    /// How many names are held.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no name is held.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// What it counted.
    pub fn counters(&self) -> &NameCounters {
        &self.counters
    }

    /// The address `url` points at now: its IP, or its name's address once found.
    fn resolve(&self, url: &str) -> Option<SocketAddr> {
        match udp_target(url)? {
            TurnTarget::Addr(addr) => Some(addr),
            TurnTarget::Name { name, port } => Some(SocketAddr::new(self.address(&name)?, port)),
        }
    }
}

/// The last instant (exclusive) an offer expiring at `expires_at` is used: [`TURN_EXPIRY_MARGIN`]
/// before it.
fn usable_until(expires_at: Timestamp) -> Timestamp {
    expires_at.saturating_sub(TURN_EXPIRY_MARGIN)
}

/// The TURN servers a new connection may use at `now` (§5.1: asked for each new connection;
/// §10: only while `expiresAt` is in the future, here [`TURN_EXPIRY_MARGIN`] before it): for each
/// offered server its first URL whose address is known ([`udp_target`]: an IP, or a host name
/// `names` has an address for), each address once, at most [`MAX_TURN_ALLOCATIONS`].
pub fn usable_servers(
    ice: Option<&IceServers>,
    names: &TurnNames,
    now: Timestamp,
) -> Vec<TurnServer> {
    let mut out: Vec<TurnServer> = Vec::new();
    let Some(ice) = ice.filter(|ice| ice.is_current(now) && now < usable_until(ice.expires_at))
    else {
        return out;
    };
    for server in &ice.servers {
        let Some(addr) = server.urls.iter().find_map(|u| names.resolve(u)) else {
            continue;
        };
        if out.len() >= MAX_TURN_ALLOCATIONS {
            break;
        }
        if out.iter().all(|s| s.addr != addr) {
            out.push(TurnServer {
                addr,
                username: server.username.clone(),
                credential: server.credential.clone(),
                expires_at: ice.expires_at,
            });
        }
    }
    out
}

/// The TURN client's time for a caller's [`Timestamp`]: Unix milliseconds as nanoseconds, so the
/// client runs on the caller's clock alone.
pub(super) fn instant(now: Timestamp) -> Instant {
    Instant::from_nanos(i64::try_from(now.as_millis()).unwrap_or(i64::MAX / 1_000_000) * 1_000_000)
}

/// A TURN client instant as a [`Timestamp`], rounded up: a deadline rounded down would be due at
/// a `now` the client still sees as early, and the loop would spin on it.
fn timestamp(i: Instant) -> Timestamp {
    let nanos = u64::try_from(i.as_nanos()).unwrap_or(0);
    Timestamp::from_millis(nanos.div_ceil(1_000_000))
}

/// Where an allocation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocationState {
    /// The Allocate request has not been answered yet.
    Pending,
    /// The server relays for us at this address.
    Ready(SocketAddr),
    /// Being released (a Refresh with lifetime 0 in flight) until this time at the latest.
    Releasing(Timestamp),
    /// The server refused, never answered, or the allocation ended.
    Failed,
}

/// What a datagram from a TURN server was.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Not for this allocation.
    NotOurs,
    /// A response the client took (allocation, refresh, permission).
    Handled,
    /// A peer's datagram, relayed to us: from `peer`, to our relayed address.
    Peer {
        /// The peer that sent it to the relayed address.
        peer: SocketAddr,
        /// The relayed address it was sent to.
        relayed: SocketAddr,
        /// Its bytes.
        bytes: Vec<u8>,
    },
}

/// Why a datagram could not go through the TURN server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsent {
    /// There is no allocation (not yet, or no longer).
    NoAllocation,
    /// The peer's address has no permission yet; one was asked for.
    NoPermission,
}

/// One allocation on one TURN server, shared by the connections in `users`; see the
/// [module docs](self).
#[derive(Debug)]
pub struct Allocation {
    server: TurnServer,
    client: TurnClientUdp,
    state: AllocationState,
    /// The connections using it (those gathering with it, and those made with its candidate).
    pub users: BTreeSet<ConnId>,
    deadline: Option<Timestamp>,
    permissions: BTreeSet<IpAddr>,
    /// Datagrams for the server, taken from the client as it makes them.
    out: VecDeque<Datagram>,
}

impl Allocation {
    /// Starts an Allocate for a UDP relay on `server`, sent from the transport's socket `local`.
    pub fn new(now: Timestamp, local: SocketAddr, server: TurnServer) -> Self {
        let credentials = TurnCredentials::new(&server.username, &server.credential);
        let client = TurnClientUdp::allocate(local, server.addr, TurnConfig::new(credentials));
        let mut a = Self {
            server,
            client,
            state: AllocationState::Pending,
            users: BTreeSet::new(),
            deadline: None,
            permissions: BTreeSet::new(),
            out: VecDeque::new(),
        };
        a.progress(now);
        a
    }

    /// The server it is on.
    pub fn server(&self) -> &TurnServer {
        &self.server
    }

    /// Where it stands.
    pub fn state(&self) -> AllocationState {
        self.state
    }

    /// The relayed address, once the server gave one.
    pub fn relayed(&self) -> Option<SocketAddr> {
        match self.state {
            AllocationState::Ready(a) => Some(a),
            _ => None,
        }
    }

    /// Whether a new connection may still use it: neither failed nor released, and more than
    /// [`TURN_EXPIRY_MARGIN`] before its credentials expire (§10).
    pub fn is_usable(&self, now: Timestamp) -> bool {
        self.is_live() && now < usable_until(self.server.expires_at)
    }

    /// Allocating or allocated: neither released nor failed.
    fn is_live(&self) -> bool {
        matches!(
            self.state,
            AllocationState::Pending | AllocationState::Ready(_)
        )
    }

    /// When [`Allocation::handle_timeout`] is next wanted: the client's next timer, the release
    /// before its credentials expire (§10), or the end of a release.
    pub fn deadline(&self) -> Option<Timestamp> {
        let end = match self.state {
            AllocationState::Pending | AllocationState::Ready(_) => {
                Some(usable_until(self.server.expires_at))
            }
            AllocationState::Releasing(until) => Some(until),
            AllocationState::Failed => None,
        };
        [self.deadline, end].into_iter().flatten().min()
    }

    /// Moves the next wakeup to `until`: the loop's rule for a timer that did not advance.
    pub fn defer(&mut self, until: Timestamp) {
        self.deadline = Some(until);
    }

    /// Serves the client's timers (retransmits, refreshes), and releases the allocation
    /// [`TURN_EXPIRY_MARGIN`] before its credentials expire (§10).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        match self.state {
            AllocationState::Releasing(until) if now >= until => {
                self.state = AllocationState::Failed;
                self.deadline = None;
            }
            AllocationState::Pending | AllocationState::Ready(_)
                if now >= usable_until(self.server.expires_at) =>
            {
                self.release(now);
            }
            AllocationState::Failed => {}
            _ => self.progress(now),
        }
    }

    /// A datagram from `from` on the transport's socket at `local`.
    pub fn handle_datagram(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        local: SocketAddr,
        bytes: &[u8],
    ) -> Received {
        if from != self.server.addr || self.is_over() {
            return Received::NotOurs;
        }
        let transmit = Transmit::new(bytes, TransportType::Udp, from, local);
        let received = match self.client.recv(transmit, instant(now)) {
            TurnRecvRet::Handled => Received::Handled,
            TurnRecvRet::Ignored(_) => Received::NotOurs,
            TurnRecvRet::PeerData(data) => match self.relayed() {
                Some(relayed) => Received::Peer {
                    peer: data.peer,
                    relayed,
                    bytes: data.data().to_vec(),
                },
                None => Received::Handled,
            },
            // An ICMP report about a peer: ICE's own checks notice a dead path.
            TurnRecvRet::PeerIcmp { .. } => Received::Handled,
        };
        self.progress(now);
        received
    }

    /// Asks for a permission for `peer` (CreatePermission), unless one is held or asked for, or
    /// [`MAX_TURN_PERMISSIONS`] are.
    pub fn permit(&mut self, now: Timestamp, peer: IpAddr) {
        if self.relayed().is_none_or(|r| r.is_ipv4() != peer.is_ipv4())
            || self.permissions.contains(&peer)
            || self.permissions.len() >= MAX_TURN_PERMISSIONS
        {
            return;
        }
        if self
            .client
            .create_permission(TransportType::Udp, peer, instant(now))
            .is_ok()
        {
            self.permissions.insert(peer);
        }
        self.progress(now);
    }

    /// Wraps `bytes` for `to` in a Send indication (no channel is bound: see
    /// `docs/decisions.md`): the datagram for the server. Without a permission for `to`, one is asked for and this
    /// datagram is not sent (ICE resends its checks).
    pub fn send(
        &mut self,
        now: Timestamp,
        to: SocketAddr,
        bytes: &[u8],
    ) -> Result<Datagram, Unsent> {
        if self.relayed().is_none() {
            return Err(Unsent::NoAllocation);
        }
        if !self.client.have_permission(TransportType::Udp, to.ip()) {
            self.permit(now, to.ip());
            return Err(Unsent::NoPermission);
        }
        match self
            .client
            .send_to(TransportType::Udp, to, bytes, instant(now))
        {
            Ok(Some(t)) => {
                let t = t.build();
                Ok(Datagram {
                    to: t.to,
                    bytes: t.data,
                })
            }
            Ok(None) => Err(Unsent::NoAllocation),
            Err(turn_client_proto::api::SendError::NoPermission) => {
                self.permit(now, to.ip());
                Err(Unsent::NoPermission)
            }
            Err(_) => Err(Unsent::NoAllocation),
        }
    }

    /// The next datagram for the server.
    pub fn poll_transmit(&mut self) -> Option<Datagram> {
        self.out.pop_front()
    }

    /// Releases the allocation on the server (a Refresh with lifetime 0, RFC 8656 §7.2). The
    /// client keeps sending that request (it paces its requests, and UDP may lose them) until it
    /// is answered or [`TURN_RELEASE_GRACE`] passes; an allocation not made yet simply ends.
    pub fn release(&mut self, now: Timestamp) {
        if self.relayed().is_some() && self.client.delete(instant(now)).is_ok() {
            self.state = AllocationState::Releasing(now.saturating_add(TURN_RELEASE_GRACE));
            self.progress(now);
        } else {
            self.state = AllocationState::Failed;
            self.deadline = None;
        }
    }

    /// Whether it is over: failed, or released and done sending.
    pub fn is_over(&self) -> bool {
        self.state == AllocationState::Failed
    }

    /// Runs the client's timers to `now`, takes the datagrams it makes, and its events, until it
    /// names its next wakeup (at most [`MAX_TURN_STEPS`] rounds).
    fn progress(&mut self, now: Timestamp) {
        for _ in 0..MAX_TURN_STEPS {
            let ret = self.client.poll(instant(now));
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit(instant(now)) {
                moved = true;
                if self.out.len() < MAX_TURN_STEPS {
                    self.out.push_back(Datagram {
                        to: t.to,
                        bytes: t.data.to_vec(),
                    });
                }
            }
            self.take_events();
            if moved {
                continue;
            }
            match ret {
                TurnPollRet::WaitUntil(at) => self.deadline = Some(timestamp(at).max(now)),
                TurnPollRet::Closed => {
                    self.deadline = None;
                    self.state = AllocationState::Failed;
                }
                // A UDP allocation asks for no TCP sockets.
                TurnPollRet::AllocateTcpSocket { .. } | TurnPollRet::TcpClose { .. } => {}
            }
            return;
        }
    }

    fn take_events(&mut self) {
        while let Some(event) = self.client.poll_event() {
            match event {
                TurnEvent::AllocationCreated(TransportType::Udp, relayed)
                    if self.state == AllocationState::Pending =>
                {
                    self.state = AllocationState::Ready(relayed);
                }
                TurnEvent::AllocationCreateFailed(_) if self.state == AllocationState::Pending => {
                    self.state = AllocationState::Failed;
                }
                TurnEvent::PermissionCreateFailed(_, ip) => {
                    self.permissions.remove(&ip);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::minca::relay_wire::IceServer;

    const T0: u64 = 1_790_000_000_000;

    fn ice(urls: &[&str], expires_at: u64) -> IceServers {
        IceServers {
            servers: vec![IceServer {
                urls: urls.iter().map(|u| u.to_string()).collect(),
                username: "1790000600:abcdefghijkl".into(),
                credential: "c2VjcmV0".into(),
            }],
            expires_at: Timestamp::from_millis(expires_at),
        }
    }

    fn addr_of(url: &str) -> Option<SocketAddr> {
        match udp_target(url)? {
            TurnTarget::Addr(a) => Some(a),
            TurnTarget::Name { .. } => None,
        }
    }

    fn name(name: &str, port: u16) -> Option<TurnTarget> {
        Some(TurnTarget::Name {
            name: name.into(),
            port,
        })
    }

    #[test]
    fn only_udp_turn_urls_on_an_ip_address_or_a_host_name_are_used() {
        assert_eq!(
            addr_of("turn:127.0.0.1:3479"),
            Some(([127, 0, 0, 1], 3479).into())
        );
        assert_eq!(
            addr_of("turn:10.0.0.1"),
            Some(([10, 0, 0, 1], TURN_DEFAULT_PORT).into())
        );
        assert_eq!(
            addr_of("turn:10.0.0.1:9?transport=udp"),
            Some(([10, 0, 0, 1], 9).into())
        );
        assert_eq!(
            addr_of("turn:[::1]:5000"),
            Some("[::1]:5000".parse().unwrap())
        );
        assert_eq!(
            addr_of("turn:[::1]"),
            Some(SocketAddr::new("::1".parse().unwrap(), TURN_DEFAULT_PORT))
        );
        assert_eq!(
            udp_target("turn:Turn.Example.com:3478"),
            name("turn.example.com", 3478)
        );
        assert_eq!(
            udp_target("turn:localhost"),
            name("localhost", TURN_DEFAULT_PORT)
        );
        assert_eq!(
            udp_target("turn:turn.example.com.:9?transport=UDP"),
            name("turn.example.com", 9)
        );
        // TLS, TCP, other schemes and what is no host name are never used.
        assert_eq!(udp_target("turn:10.0.0.1:9?transport=tcp"), None);
        assert_eq!(udp_target("turn:turn.example.com?transport=tcp"), None);
        assert_eq!(udp_target("turns:10.0.0.1:5349"), None);
        assert_eq!(udp_target("turns:turn.example.com:5349"), None);
        assert_eq!(udp_target("stun:10.0.0.1"), None);
        assert_eq!(udp_target("turn:user@turn.example.com"), None);
        assert_eq!(udp_target("turn:turn.example.com:port"), None);
        assert_eq!(udp_target("turn:turn.example.com:70000"), None);
        assert_eq!(udp_target("turn:-bad.example.com"), None);
        assert_eq!(udp_target("turn:a..b"), None);
        assert_eq!(udp_target("turn:"), None);
        let long = format!("turn:{}.com", ["a"; 130].join("."));
        assert_eq!(udp_target(&long), None);
    }

    #[test]
    fn turn_servers_are_used_only_while_their_offer_has_not_expired() {
        let margin = TURN_EXPIRY_MARGIN.as_millis() as u64;
        let end = T0 + margin + 1_000;
        let offer = ice(&["turn:127.0.0.1:3478"], end);
        let now = Timestamp::from_millis(T0);
        let usable = usable_servers(Some(&offer), &TurnNames::new(true), now);
        assert_eq!(usable.len(), 1);
        assert_eq!(usable[0].addr, SocketAddr::from(([127, 0, 0, 1], 3478)));
        assert_eq!(usable[0].expires_at, offer.expires_at);
        let at = |ms: u64| {
            usable_servers(
                Some(&offer),
                &TurnNames::new(true),
                Timestamp::from_millis(ms),
            )
            .len()
        };
        assert_eq!(at(end - margin - 1), 1);
        // Never from `expiresAt - margin` on, so never at or past `expiresAt` (§10).
        assert_eq!(at(end - margin), 0);
        assert_eq!(at(end), 0);
        assert_eq!(at(end + 1), 0);
        assert!(usable_servers(None, &TurnNames::new(true), now).is_empty());
    }

    #[test]
    fn each_server_is_used_once_and_at_most_the_bound() {
        let mut offer = ice(&["turns:10.0.0.1:5349", "turn:10.0.0.1"], T0 + 600_000);
        let same = offer.servers[0].clone();
        offer.servers.push(same);
        for i in 0..10u8 {
            offer.servers.push(IceServer {
                urls: vec![format!("turn:10.0.1.{i}")],
                username: "u".into(),
                credential: "c".into(),
            });
        }
        let usable = usable_servers(
            Some(&offer),
            &TurnNames::new(true),
            Timestamp::from_millis(T0),
        );
        assert_eq!(usable.len(), MAX_TURN_ALLOCATIONS);
        assert_eq!(
            usable[0].addr,
            SocketAddr::from(([10, 0, 0, 1], TURN_DEFAULT_PORT))
        );
        let addrs: BTreeSet<SocketAddr> = usable.iter().map(|s| s.addr).collect();
        assert_eq!(addrs.len(), usable.len());
    }

    fn server(urls: &[&str]) -> IceServer {
        IceServer {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            username: "u".into(),
            credential: "c".into(),
        }
    }

    #[test]
    fn a_named_server_is_used_once_its_address_is_known_and_never_before() {
        let end = T0 + 600_000;
        let offer = ice(&["turn:turn.weft.test:3479"], end);
        let mut names = TurnNames::new(true);
        let at = |names: &TurnNames, ms: u64| {
            usable_servers(Some(&offer), names, Timestamp::from_millis(ms))
                .iter()
                .map(|s| s.addr)
                .collect::<Vec<_>>()
        };
        // Not before the offer is seen, nor while its lookup is out.
        assert!(at(&names, T0).is_empty());
        assert_eq!(
            names.offer(Some(&offer)),
            vec!["turn.weft.test".to_string()]
        );
        assert!(at(&names, T0 + 10).is_empty());
        // The same offer again asks nothing.
        assert!(names.offer(Some(&offer)).is_empty());
        // An answer of both families: this socket's (IPv4) is taken.
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        names.answer("turn.weft.test", &[v6, [192, 0, 2, 7].into()]);
        let known = SocketAddr::from(([192, 0, 2, 7], 3479));
        assert_eq!(at(&names, T0 + 20), vec![known]);
        assert_eq!(names.counters(), &NameCounters::default());
        // Still only while the offer is current (§10).
        let margin = TURN_EXPIRY_MARGIN.as_millis() as u64;
        assert!(at(&names, end - margin).is_empty());
        // A new offer looks the name up again; the address found stays in use meanwhile, and
        // the new answer replaces it.
        let renewed = ice(&["turn:turn.weft.test:3479"], end + 600_000);
        assert_eq!(
            names.offer(Some(&renewed)),
            vec!["turn.weft.test".to_string()]
        );
        let use_renewed = |names: &TurnNames| {
            usable_servers(Some(&renewed), names, Timestamp::from_millis(T0 + 30))
                .iter()
                .map(|s| s.addr)
                .collect::<Vec<_>>()
        };
        assert_eq!(use_renewed(&names), vec![known]);
        names.answer("turn.weft.test", &[[192, 0, 2, 8].into()]);
        assert_eq!(
            use_renewed(&names),
            vec![SocketAddr::from(([192, 0, 2, 8], 3479))]
        );
        // An IPv6 socket prefers the IPv6 answer.
        let mut six = TurnNames::new(false);
        six.offer(Some(&offer));
        six.answer("turn.weft.test", &[[192, 0, 2, 7].into(), v6]);
        assert_eq!(six.address("turn.weft.test"), Some(v6));
    }

    #[test]
    fn a_name_whose_lookup_fails_is_skipped_and_counted() {
        let mut offer = ice(&["turn:gone.weft.test", "turn:10.0.0.9"], T0 + 600_000);
        offer.servers.push(server(&["turn:fails.weft.test:4000"]));
        offer.servers.push(server(&["turn:works.weft.test:4001"]));
        let mut names = TurnNames::new(true);
        assert_eq!(
            names.offer(Some(&offer)),
            vec!["gone.weft.test", "fails.weft.test", "works.weft.test"]
        );
        names.answer("fails.weft.test", &[]);
        names.answer("works.weft.test", &[[10, 0, 0, 2].into()]);
        let usable: Vec<SocketAddr> =
            usable_servers(Some(&offer), &names, Timestamp::from_millis(T0))
                .iter()
                .map(|s| s.addr)
                .collect();
        // The first server's name is unanswered: its IP URL is used instead. The failed name is
        // skipped; the one found is used.
        assert_eq!(
            usable,
            vec![
                SocketAddr::from(([10, 0, 0, 9], TURN_DEFAULT_PORT)),
                SocketAddr::from(([10, 0, 0, 2], 4001)),
            ]
        );
        assert_eq!(names.counters().failed, 1);
        assert_eq!(names.address("fails.weft.test"), None);
        // An answer nobody waits for (answered already, or never asked) changes nothing.
        names.answer("works.weft.test", &[[10, 0, 0, 3].into()]);
        names.answer("never.weft.test", &[[10, 0, 0, 4].into()]);
        assert_eq!(names.counters().stale_answers, 2);
        assert_eq!(names.address("works.weft.test"), Some([10, 0, 0, 2].into()));
        assert_eq!(names.address("never.weft.test"), None);
    }

    #[test]
    fn the_names_held_are_bounded_and_names_no_longer_offered_are_forgotten() {
        let mut offer = ice(&["turn:10.0.0.1"], T0 + 600_000);
        offer.servers.clear();
        for s in 0..MAX_ICE_SERVERS {
            let urls: Vec<String> = (0..MAX_TURN_NAMES)
                .map(|i| format!("turn:s{s}-n{i}.weft.test"))
                .collect();
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            offer.servers.push(server(&urls));
        }
        let mut names = TurnNames::new(true);
        let asked = names.offer(Some(&offer));
        assert_eq!(asked.len(), MAX_TURN_NAMES);
        assert_eq!(names.len(), MAX_TURN_NAMES);
        let offered = MAX_ICE_SERVERS * MAX_TURN_NAMES;
        assert_eq!(
            names.counters().over_bound,
            (offered - MAX_TURN_NAMES) as u64
        );
        // A name past the bound was never asked: its answer is not kept.
        let past = format!("s{}-n0.weft.test", MAX_ICE_SERVERS - 1);
        assert!(!asked.contains(&past));
        names.answer(&past, &[[10, 0, 0, 1].into()]);
        assert_eq!(names.address(&past), None);
        assert_eq!(names.len(), MAX_TURN_NAMES);
        // A new offer without those names forgets them; no offer forgets all.
        let other = ice(&["turn:other.weft.test"], T0 + 700_000);
        assert_eq!(
            names.offer(Some(&other)),
            vec!["other.weft.test".to_string()]
        );
        assert_eq!(names.len(), 1);
        assert!(names.offer(None).is_empty());
        assert!(names.is_empty());
    }

    #[test]
    fn an_allocation_sends_its_allocate_to_the_server_and_wakes_for_retransmits() {
        let server = SocketAddr::from(([127, 0, 0, 1], 3478));
        let local = SocketAddr::from(([127, 0, 0, 1], 4000));
        let now = Timestamp::from_millis(T0);
        let mut a = Allocation::new(
            now,
            local,
            TurnServer {
                addr: server,
                username: "u".into(),
                credential: "c".into(),
                expires_at: Timestamp::from_millis(T0 + 600_000),
            },
        );
        let d = a.poll_transmit().expect("an Allocate");
        assert_eq!(d.to, server);
        // A STUN Allocate request (RFC 8656 §7.1: method 0x003, class request).
        assert_eq!(&d.bytes[..2], &[0x00, 0x03]);
        assert_eq!(a.state(), AllocationState::Pending);
        let deadline = a.deadline().expect("a retransmit timer");
        assert!(deadline > now, "{deadline:?}");
        // Before its credentials expire the allocation is over (§10); never answered, it has
        // nothing to release on the server.
        let release = T0 + 600_000 - TURN_EXPIRY_MARGIN.as_millis() as u64;
        assert!(a.is_usable(Timestamp::from_millis(release - 1)));
        assert!(!a.is_usable(Timestamp::from_millis(release)));
        assert!(
            a.deadline()
                .is_some_and(|d| d <= Timestamp::from_millis(release))
        );
        a.handle_timeout(Timestamp::from_millis(release));
        assert_eq!(a.state(), AllocationState::Failed);
        assert_eq!(a.deadline(), None);
    }
}
