//! The AIRC realm server as one sans-IO machine (AIRC §3–§7).
//!
//! One [`Server`] holds every connection of a realm, on both faces. The host hands it each
//! connection with the namespaces it derived from the transport (§5: the peer uid of a Unix
//! socket, the owner of a loopback TCP socket), the bytes that arrive, and the time; the server
//! answers with bytes to send, connections to close, and records to persist or forget.
//!
//! Implemented here:
//!
//! - §3.2–§3.3 framing and the connection lifecycle: `hello` first (`expected_hello`), the
//!   wire version (`bad_proto`), a role that matches the face (`wrong_face`), `ping`/`pong`,
//!   `error` and close on a protocol violation;
//! - §4.3 `bind`/`bound` inside the connection's namespaces (`forbidden`), reserved names only
//!   when configured, and the resolving-client selection ([`super::bind`]);
//! - §6.1–§6.4 the routing pipeline in its order for client-face messages, with exactly one ack
//!   per accepted message over the connection it came on;
//! - §6.2 for peer messages: only the peer's own realm, only for this realm (no transit), signed
//!   by a published key unless the peer is trusted unsigned;
//! - §6.5 remote delivery: the hop limit and loop check, `via`, signing, forwarding over an
//!   authenticated link, or spooling under the authority (`queued authority_unreachable`) and
//!   asking the host to connect;
//! - §8.4 peer links: the dialler's signed hello and its check of the welcome (`realm_mismatch`,
//!   `peer_unverified`), the acceptor's check of the hello (signature by a published key within
//!   300 s, or a trusted-unsigned realm) and its signed welcome; only authenticated links are sent
//!   on, a link coming up flushes its authority's backlog, and a dialled link idle for
//!   [`LINK_IDLE`] is closed;
//! - §6.6 the ack timeout: spool, ack upstream `queued no_ack`, keep the id in flight, settle on
//!   the late ack;
//! - §7 the spool: per destination key, order kept, expiry, flush on bind and every 30 s, and
//!   duplicate suppression for 172 800 s.
//!
//! Durability: a persist ([`Output::Persist`]) always comes out before the ack that claims it,
//! and the host executes outputs in order, so `queued` always means a copy is held. The seen id
//! and the reply-window pair ([`Record::ReplyPair`]) an ack depends on are persisted before it
//! too; an id in flight is not (a restart closes its hop, which releases it, as any close does).
//!
//! The host does the I/O the machine cannot: it answers DNS questions ([`Output::Resolve`] →
//! [`Input::Resolved`]), dials the endpoints discovery chose ([`Output::Connect`] →
//! [`Input::Dialled`] or [`Input::DialFailed`]), and stores records. Discovery's order and
//! caches (§8.1–§8.2) are walked in [`locate`].
//!
//! - §6.4 and §10 policy on every message, egress and ingress, with the reply window noted for
//!   every message acked `delivered` or `queued`.
//!
//! - §4.6 and §11 links: the `link` frame's operations (offer, accept, decline, revoke, a
//!   [`GRANT_DIRECTION`] grant, and list, every link for an administrator) stored first, then
//!   the other side told
//!   (a notice in this realm, a control message to another), `linked` answering with the
//!   delivery; §6.3 control traffic taken before policy; §11.3's decision inside policy.
//!
//! - §4.9 and §13 the audit stream: every event written durably ([`Record::Audit`]) and handed
//!   to the subscribers [`super::audit`] picks; no event carries a body.
//!
//! - §4.7 and §12 passports: `passport` new/list/redeem/revoke, the redemption sent as a
//!   control message (§12.4), the issuer's `_passport` (§12.5: checks in order, the grant
//!   recorded at the redeemer before the ack, the issuing endpoint told), revocation with
//!   `and_links` (§12.6); the records and rules live in [`super::passport::book`].

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::net::IpAddr;
use core::time::Duration;
use rand_core::CryptoRng;

use super::address::{Address, Authority, Face as AddressFace, Namespace, RESOLVER};
use super::audit::Audit;
use super::bind::BindTable;
use super::discovery::{DiscoveryCache, Endpoint, RecordType};
use super::frame::{
    Ack, AckCode, AckStatus, Bound, ErrorCode, ErrorFrame, Event, Frame, Hello, Linked, Msg,
    Object, PROTO, Role, Welcome,
};
use super::framing::{Answer, FrameDecoder};
use super::link::{Link, LinkConfig, LinkTable};
use super::passport::book::{PassportBook, PassportConfig, PassportRecord};
use super::passport::{PASSPORT_ENDPOINT, PASSPORT_TYPE};
use super::pattern::{Pattern, PatternSegment};
use super::policy::{Policy, ReplyWindow};
use super::signing::{DEFAULT_TYPE as TEXT_PLAIN, Signed};
use super::spool::{ACK_TIMEOUT, DEFAULT_TTL, FLUSH_INTERVAL, SeenIds, Spool, SpoolFull, Spooled};
use super::{audit, discovery, framing, link, policy, signing, spool};
use crate::codec::hex;
use crate::core::bounded::{ExpiringInsert, ExpiringSet};
use crate::core::index::remove_from_set;
use crate::core::timer::TimerQueue;
use crate::core::{ConnId, Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, Ed25519Seed, sigstring};

mod forwarded;
mod links;
pub mod locate;
mod passports;

use forwarded::{Forwarded, Pending};
pub use links::{GRANT_DIRECTION, LINK_REPLY_WINDOW};
use locate::{Dials, KeyWaits, Keys};
use passports::GrantWait;

/// How many hops a message may take: a `via` this long is a routing loop (§6.5).
pub const MAX_VIA: usize = 8;

/// Connections one server holds at most; past it a new connection is closed at once. The spec
/// sets no bound (§15 was lost).
pub const MAX_CONNECTIONS: usize = 4096;

/// Connections one source may hold at most: an eighth of [`MAX_CONNECTIONS`] (512), so that one
/// local user (a uid on the client face) or one remote host (an address on the peer face, an
/// IPv6 /64 counted as one) cannot take every slot and lock the others out; eight sources must
/// collude to fill the server. The host says who the source is ([`Input::Opened`]'s
/// [`Source`]); past it the connection is refused like one past [`MAX_CONNECTIONS`]: closed at
/// once, nothing read, counted. The spec sets no bound (§15 was lost; §16.7).
pub const MAX_CONNECTIONS_PER_SOURCE: usize = MAX_CONNECTIONS / 8;

/// Connections that may wait for their hello at once: a quarter of [`MAX_CONNECTIONS`] (1024).
/// When one more opens, the one that has waited longest is closed to make room (counted in
/// [`Stats::hello_evictions`]), so silent sockets cannot hold the slots new clients need: an
/// honest client says hello one round trip after it connects, and an attacker would have to
/// open 1024 connections inside that round trip to push it out. A hello waiting for its realm's
/// keys (§8.2) has been said and no longer counts. [`HELLO_TIMEOUT`] closes the rest after 30 s.
/// The spec sets no bound (§15 was lost).
pub const MAX_WAITING_HELLOS: usize = MAX_CONNECTIONS / 4;

/// Forwarded messages awaiting an ack at most, across all connections. Past it a message that
/// would be forwarded is spooled instead (it is still accepted, never dropped).
pub const MAX_PENDING: usize = 65_536;

/// How far a peer hello's `ts` may be from now and still authenticate its link (§8.4, §9.4).
pub const HELLO_WINDOW: Duration = Duration::from_secs(300);

/// Random bytes in the nonce of a hello this server sends (§8.4), written as hex.
pub const NONCE_BYTES: usize = 16;

/// How long a connection may take to finish its opening exchange (a client's or a peer's hello
/// answered, or, on a link this server dialled, the welcome to its hello) before it is closed.
/// The spec sets none (§15 was lost). Without it a connection that never says hello, or a realm
/// that takes the dial and stays silent, holds one of [`MAX_CONNECTIONS`] until the host gives
/// up, and the periodic flush dialled such a realm again every [`FLUSH_INTERVAL`]. As long as
/// that interval: an honest hello or welcome takes a round trip, and a hello that waits for its
/// realm's keys is timed by the DNS instead ([`locate::DNS_TIMEOUT`]).
pub const HELLO_TIMEOUT: Duration = FLUSH_INTERVAL;

/// The most peer hellos whose nonces are remembered (§8.4), so that a signed hello captured and
/// replayed within its window is refused: each is kept until its `ts` leaves [`HELLO_WINDOW`],
/// at most twice that window. Only hellos whose signature verified are remembered, and each as
/// a 32-byte digest, so a realm with a valid key cannot grow the table past 2 MiB with long
/// nonces; when it is full the entry expiring soonest makes room.
pub const MAX_HELLO_NONCES: usize = 65_536;

/// How long a link this server dialled may carry no frame either way before it closes it
/// (§8.4: "MAY close a dialled link idle for 600 s"). Mail spooled afterwards dials again.
pub const LINK_IDLE: Duration = Duration::from_secs(600);

/// The most bytes a connection may send while its first frame waits for its realm's keys (§8.2:
/// a DNS answer, at most [`locate::DNS_TIMEOUT`] away): nothing is read meanwhile, so what comes
/// waits in memory. Sixteen frames of the largest size; past it the connection is closed (a
/// genuine peer dials again and finds the keys cached).
pub const MAX_PARKED_BYTES: usize = 16 * framing::MAX_FRAME_BYTES;

/// Which listener a connection came in on (§3.1): a server exposes a face for its own clients
/// and a face for other realms' servers, each on its own listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// The client face.
    Client,
    /// The peer face.
    Peer,
}

/// Who opened a connection, as far as the transport can say, for the share of the connection
/// slots one source may hold ([`MAX_CONNECTIONS_PER_SOURCE`]). It grants nothing: what a
/// connection may do is its namespaces (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// A local process of this uid: a Unix socket's peer credentials, or the owner of a loopback
    /// TCP socket (the client face).
    Uid(u32),
    /// A remote host at this address (the peer face). IPv6 addresses are counted by their /64,
    /// which one host is commonly given whole; an IPv4-mapped address as the IPv4 address.
    Addr(IpAddr),
    /// The host does not say: the connection counts against [`MAX_CONNECTIONS`] alone.
    Unknown,
}

impl Source {
    /// What connections are counted under, if anything.
    fn key(self) -> Option<SourceKey> {
        match self {
            Source::Uid(uid) => Some(SourceKey::Uid(uid)),
            Source::Addr(addr) => Some(match addr.to_canonical() {
                IpAddr::V4(v4) => SourceKey::V4(v4.octets()),
                IpAddr::V6(v6) => {
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    SourceKey::V6Prefix(prefix)
                }
            }),
            Source::Unknown => None,
        }
    }
}

/// A [`Source`] as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SourceKey {
    Uid(u32),
    V4([u8; 4]),
    V6Prefix([u8; 8]),
}

/// What a server is told from outside.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// The host accepted a connection on `face`. `namespaces` are what the transport proves
    /// (§5); anything but a local socket proves none.
    Opened {
        /// The id the host will use for it.
        conn: ConnId,
        /// The listener it came in on.
        face: Face,
        /// The namespaces it may act for, from the operator's uid table.
        namespaces: Vec<Namespace>,
        /// Who opened it (a uid on the client face, an address on the peer face), for
        /// [`MAX_CONNECTIONS_PER_SOURCE`].
        source: Source,
    },
    /// The host accepted a client-face connection but the transport proves nobody holds it
    /// (§5): a loopback TCP peer whose socket is not a live, connected one of a process (a
    /// client that already closed leaves an orphaned row the kernel lists as root's), or a Unix
    /// peer without credentials. It is not given a default identity: the server answers
    /// `error forbidden` and closes before reading any frame of it.
    Unidentified {
        /// The id the host will use for it.
        conn: ConnId,
    },
    /// Bytes arrived on a connection, in any pieces.
    Received {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A connection closed (either side).
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// A record persisted before a restart, handed back before any connection opens.
    Restore(Record),
    /// The host opened the peer link a [`Output::Connect`] asked for (TLS or QUIC, its
    /// certificate verified for the resolved host, §8.3). The server sends its hello on it.
    Dialled {
        /// The id the host will use for it.
        conn: ConnId,
        /// The realm it was dialled for.
        authority: Authority,
    },
    /// The host could not open a link to `authority` (no address, refused, timed out). The
    /// spool keeps its messages; the periodic flush asks again.
    DialFailed {
        /// The realm.
        authority: Authority,
    },
    /// The host proved `conn` is an administrator's (§5: root, the account the server runs as,
    /// or a configured uid): it may list every link and passport and sees every event (§13).
    /// Sent right after [`Input::Opened`].
    Administrator {
        /// The connection.
        conn: ConnId,
    },
    /// The answer to an [`Output::Resolve`]: the records found, or [`discovery::Answer::Nothing`] for
    /// NXDOMAIN, no records or a failed query.
    Resolved {
        /// The name asked about, as the question gave it.
        name: String,
        /// The kind of records asked for.
        kind: RecordType,
        /// What DNS said.
        answer: discovery::Answer,
    },
    /// A realm's published signing keys (§8.2), pinned from outside (a static table): they
    /// replace what the server knew for that realm and are used instead of DNS.
    Keys {
        /// The realm.
        realm: Authority,
        /// Its Ed25519 public keys.
        keys: Vec<[u8; 32]>,
    },
}

/// What a server asks its host to do, strictly in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Write these bytes (whole frames) to a connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// One or more frames, each ending in `\n`.
        bytes: Vec<u8>,
    },
    /// Close a connection (after the bytes before this have gone out).
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Store a record durably; finish before executing the next output.
    Persist(Record),
    /// Delete a stored record.
    Forget(RecordKey),
    /// Open a peer link to this authority at `endpoint` (§8.1, §8.3): TLS or QUIC with the
    /// certificate verified for `endpoint.host`. Answered with [`Input::Dialled`] or
    /// [`Input::DialFailed`].
    Connect {
        /// The realm to reach.
        authority: Authority,
        /// Where discovery found it: a host name (resolved by the host's dial) or an IP literal,
        /// and a port.
        endpoint: Endpoint,
    },
    /// Look up DNS records (§8.1 steps 3–5, §8.2) and answer with [`Input::Resolved`].
    Resolve {
        /// The name to ask about.
        name: String,
        /// Which records.
        kind: RecordType,
    },
}

/// A durable record: what must survive a crash for `queued` and duplicate suppression to hold.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// A message in the spool, under its destination key (§7.1).
    Spooled {
        /// The destination key.
        key: String,
        /// The message, with canonical `from` and `to` (boxed: records are moved around often).
        msg: Box<Msg>,
    },
    /// A link record (§11.1), as stored after an operation or a control message; a later record
    /// with the same id replaces it.
    Link {
        /// The record's JSON form.
        record: Box<Object>,
    },
    /// A passport record (§12.1) with its token hash, as stored after issuance, a use or a
    /// revocation; a later record with the same id replaces it.
    Passport {
        /// The record's JSON form.
        record: Box<Object>,
    },
    /// One event of the append-only audit log (§13), never with a message body. Only ever
    /// appended; nothing is restored from it.
    Audit {
        /// The event (boxed: it has many fields).
        event: Box<Event>,
    },
    /// An id acked `delivered` or `queued`, remembered until `until` (§7.3).
    Seen {
        /// The message id.
        id: String,
        /// When it may be forgotten.
        until: Timestamp,
    },
    /// A pair `(from, to)` of the reply window (§10.3) and when it last passed; a later record
    /// for the same pair replaces it. Worth nothing once [`policy::MAX_REPLY_WINDOW`] has gone by.
    ReplyPair {
        /// The sender's address key.
        from: String,
        /// The recipient's address key.
        to: String,
        /// When the pair last passed.
        at: Timestamp,
    },
}

/// Names a stored record to forget.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKey {
    /// The spooled message with this id.
    Spooled {
        /// The message id.
        id: String,
    },
    /// The reply-window pair `(from, to)`, evicted from the full table.
    ReplyPair {
        /// The sender's address key.
        from: String,
        /// The recipient's address key.
        to: String,
    },
    /// The link record with this id, forgotten [`link::LINK_RETENTION`] after it lost all
    /// effect (declined, or expired).
    Link {
        /// The link id.
        id: String,
    },
}

/// How a server is set up. [`ServerConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The realm this server routes for.
    pub realm: Authority,
    /// `welcome.server`: software name and version.
    pub software: String,
    /// Every namespace the operator configured (§6.4: a message for one with no client bound is
    /// spooled; for any other path it is `no_such_path`).
    pub known_namespaces: Vec<Namespace>,
    /// Reserved names (§2.6) clients may bind anyway.
    pub bindable_reserved: Vec<String>,
    /// The realm's signing key (§9), if it has one: messages leaving the realm are signed.
    pub signing_key: Option<Ed25519Seed>,
    /// How long to wait for a next hop's ack (§6.6).
    pub ack_timeout: Duration,
    /// How often to flush every key with a backlog (§7.4).
    pub flush_interval: Duration,
    /// Other realms' published keys known without DNS (§8.2's static `known_keys`); a realm
    /// named here is never asked about in DNS.
    pub known_keys: BTreeMap<Authority, Vec<[u8; 32]>>,
    /// Where other realms are, without DNS (§8.1 step 2), tried in order.
    pub static_entries: BTreeMap<Authority, Vec<Endpoint>>,
    /// Realms whose messages, hellos and welcomes are accepted unsigned (§6.2, §8.4).
    pub trusted_unsigned: Vec<Authority>,
    /// The realm's policy (§10), evaluated on every message, egress and ingress alike.
    pub policy: Policy,
    /// Whether offers are taken, and which endpoints accept them on arrival (§11.4, §11.5).
    pub links: LinkConfig,
    /// Who may issue passports, and the web base of their URLs (§12.2, §12.3).
    pub passports: PassportConfig,
}

impl ServerConfig {
    /// Defaults for `realm`: the spec's timings, no key, no known namespaces.
    pub fn new(realm: Authority) -> Self {
        Self {
            realm,
            software: format!("weft/{}", env!("CARGO_PKG_VERSION")),
            known_namespaces: Vec::new(),
            bindable_reserved: Vec::new(),
            signing_key: None,
            ack_timeout: ACK_TIMEOUT,
            flush_interval: FLUSH_INTERVAL,
            known_keys: BTreeMap::new(),
            static_entries: BTreeMap::new(),
            trusted_unsigned: Vec::new(),
            policy: Policy::default(),
            links: LinkConfig::default(),
            passports: PassportConfig::default(),
        }
    }
}

/// What the server has counted: every frame it refused or ignored is here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Frames read.
    pub frames: u64,
    /// Connections closed for a protocol violation.
    pub protocol_errors: u64,
    /// Messages accepted (one ack each).
    pub messages: u64,
    /// Acks sent, by status: delivered, queued, failed.
    pub acks: [u64; 3],
    /// Acks from a next hop for nothing this server is waiting on, ignored.
    pub stray_acks: u64,
    /// Late acks that settled a message in flight (§6.6).
    pub settled: u64,
    /// Spooled messages dropped because they expired (§7.2).
    pub expired: u64,
    /// Connections refused because the server was full, or their source held its share
    /// ([`MAX_CONNECTIONS_PER_SOURCE`]).
    pub refused_connections: u64,
    /// Of [`Stats::refused_connections`], those refused because their source held
    /// [`MAX_CONNECTIONS_PER_SOURCE`].
    pub source_refusals: u64,
    /// Connections closed before their hello to make room for a newer one
    /// ([`MAX_WAITING_HELLOS`]).
    pub hello_evictions: u64,
    /// Client-face connections refused because the transport proved no identity for them
    /// ([`Input::Unidentified`]).
    pub unidentified_connections: u64,
    /// Audit events written (§13).
    pub events: u64,
    /// Subscribers closed for being handed more than [`audit::SUBSCRIBER_RATE`].
    pub slow_subscribers: u64,
    /// Dialled links closed after [`LINK_IDLE`] without traffic (§8.4).
    pub idle_links: u64,
    /// Connections closed for not finishing their hello within [`HELLO_TIMEOUT`].
    pub hello_timeouts: u64,
    /// Peer hellos refused because their signed nonce was already used ([`MAX_HELLO_NONCES`]).
    pub replayed_hellos: u64,
    /// Messages failed because, written for their next hop, they came out over the frame limit
    /// (§3.2).
    pub too_large_to_forward: u64,
    /// Connections closed for sending more than [`MAX_PARKED_BYTES`] while their first frame
    /// waited for keys.
    pub parked_overflows: u64,
    /// Messages refused `failed refused` because the spool could not hold them (a count or byte
    /// bound of [`spool::SpoolLimits`]).
    pub spool_full: u64,
}

/// `item` with what it takes in the spool ([`Spooled::bytes`]): the length of the message's JSON
/// form as held, its frame less the `"t":"msg",` and the newline. Weighed where a message enters
/// the spool (held, spooled in flight, requeued from a dropped hop, restored), not where it is
/// routed: most messages are never spooled.
fn weighed(mut item: Spooled<Msg>) -> Spooled<Msg> {
    item.bytes = serde_json::to_vec(&item.msg).map_or(framing::MAX_FRAME_BYTES, |v| v.len());
    item
}

/// Where a message is when its audit event is written (§13's `hop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hop {
    /// A bound client took it (or answered for it).
    Client,
    /// Another realm's server took it (or answered for it).
    Peer,
    /// This server answered it itself: a refusal, the resolver, control traffic.
    Local,
    /// It is held in the spool.
    Spool,
}

impl Hop {
    /// Where a message is once it went out on a connection of `face`.
    fn on(face: Face) -> Self {
        match face {
            Face::Peer => Hop::Peer,
            Face::Client => Hop::Client,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Hop::Client => "client",
            Hop::Peer => "peer",
            Hop::Local => "local",
            Hop::Spool => "spool",
        }
    }
}

/// A message's audit event (§13): its addresses, type, `re` and body length, never the body.
fn msg_event(now: Timestamp, kind: audit::Kind, m: &Msg, hop: Hop) -> Event {
    let mut e = audit::event(now, kind);
    e.id = Some(m.id.clone());
    e.from = Some(m.from.clone());
    e.to = Some(m.to.clone());
    e.hop = Some(hop.as_str().to_string());
    e.kind_of_msg = m.kind.clone().filter(|k| k != TEXT_PLAIN);
    e.re.clone_from(&m.re);
    e.bytes = Some(m.body.len() as u64);
    e
}

fn audit_kind(status: AckStatus) -> audit::Kind {
    match status {
        AckStatus::Delivered => audit::Kind::MsgDelivered,
        AckStatus::Queued => audit::Kind::MsgQueued,
        AckStatus::Failed => audit::Kind::MsgFailed,
    }
}

/// Where an ack goes once the next hop answers.
#[derive(Clone, Debug, PartialEq)]
enum Upstream {
    /// Relay it over this connection.
    Conn(ConnId),
    /// The message came out of the spool under this key: nobody waits upstream.
    Spool(String),
    /// A link control message or notice sent for a client's `link` frame: answer the client
    /// with `linked`, reporting the delivery (§4.6).
    Linked(ConnId, Object),
    /// A notice the server sent on its own: its ack changes nothing (§11.4 step 4).
    Nobody,
    /// A redemption sent for a client's `passport op=redeem`: answer it with `passported`,
    /// reporting the ack (§12.4: "the ack to this message is the result").
    Passported(ConnId),
    /// A grant sent for a redemption (§12.5): the redemption is answered once the redeemer's
    /// server has acked the grant.
    Grant(Box<GrantWait>),
}

impl Upstream {
    /// The connection waiting on this answer, if any: a grant's is the redemption's.
    fn waiter(&self) -> Option<ConnId> {
        match self {
            Self::Conn(c) | Self::Linked(c, _) | Self::Passported(c) => Some(*c),
            Self::Grant(w) => w.up.waiter(),
            Self::Spool(_) | Self::Nobody => None,
        }
    }

    /// `conn` closed, and the host may give its id to a new connection: nothing waits there
    /// any more. Returns whether nothing is left of this upstream. A grant's wait stays with
    /// nobody to answer, since the grant's ack still settles the passport's use (§12.5).
    fn forget(&mut self, conn: ConnId) -> bool {
        match self {
            Self::Grant(w) => {
                if w.up.forget(conn) {
                    w.up = Self::Nobody;
                }
                false
            }
            _ => self.waiter() == Some(conn),
        }
    }
}

/// The authenticated peer links open (§8.4), by realm: every remote message and every flush of
/// a remote key asks for one, so they are not looked for among all connections.
#[derive(Debug, Default)]
struct PeerLinks(BTreeMap<Authority, BTreeSet<ConnId>>);

impl PeerLinks {
    fn add(&mut self, realm: &Authority, conn: ConnId) {
        self.0.entry(realm.clone()).or_default().insert(conn);
    }

    fn forget(&mut self, realm: &Authority, conn: ConnId) {
        remove_from_set(&mut self.0, realm, &conn);
    }

    /// The first link to `realm` by connection id, as the host numbered them.
    fn to(&self, realm: &Authority) -> Option<ConnId> {
        self.0.get(realm).and_then(|links| links.first().copied())
    }
}

/// Messages waiting for a link to their realm, by realm in the order they came, and how many
/// in all: every remote message asks the count, so it is kept rather than summed. Indexed by
/// the connection waiting on each, which a close must find without walking them all.
#[derive(Debug, Default)]
struct Awaiting {
    by_realm: BTreeMap<Authority, BTreeMap<u64, (Upstream, Spooled<Msg>)>>,
    /// (realm, number) of each message by the connection waiting on its answer.
    waited_by: BTreeMap<ConnId, BTreeSet<(Authority, u64)>>,
    next: u64,
    len: usize,
}

impl Awaiting {
    fn push(&mut self, realm: &Authority, up: Upstream, item: Spooled<Msg>) {
        let n = self.next;
        self.next += 1;
        if let Some(c) = up.waiter() {
            self.waited_by
                .entry(c)
                .or_default()
                .insert((realm.clone(), n));
        }
        self.by_realm
            .entry(realm.clone())
            .or_default()
            .insert(n, (up, item));
        self.len += 1;
    }

    /// What waits for `realm`, in the order it came, taken out.
    fn take(&mut self, realm: &Authority) -> Vec<(Upstream, Spooled<Msg>)> {
        let taken = self.by_realm.remove(realm).unwrap_or_default();
        self.len -= taken.len();
        taken
            .into_iter()
            .map(|(n, (up, item))| {
                if let Some(c) = up.waiter() {
                    remove_from_set(&mut self.waited_by, &c, &(realm.clone(), n));
                }
                (up, item)
            })
            .collect()
    }

    /// `conn` closed: what it waits for still goes on, answered to nobody (see
    /// [`Upstream::forget`]).
    fn forget(&mut self, conn: ConnId) {
        for (realm, n) in self.waited_by.remove(&conn).unwrap_or_default() {
            let waiting = self.by_realm.get_mut(&realm).and_then(|w| w.get_mut(&n));
            if let Some((up, _)) = waiting
                && up.forget(conn)
            {
                *up = Upstream::Nobody;
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitHello,
    /// A link this server dialled, its hello sent.
    AwaitWelcome,
    Open,
    /// An error went out and a close was asked for; nothing more is read.
    Closing,
}

#[derive(Debug)]
struct Conn {
    face: Face,
    namespaces: Vec<Namespace>,
    state: State,
    decoder: FrameDecoder,
    /// On the peer face: the realm at the other end, once it said (or we dialled it).
    peer: Option<Authority>,
    /// Whether the peer proved its realm (§8.4); only such links are sent on.
    authenticated: bool,
    /// The nonce of the hello this server sent on a link it dialled.
    nonce: Option<String>,
    /// The host proved it an administrator's (§5).
    admin: bool,
    /// A `peer.up` was written for it, so its close is a `peer.down` (§13).
    up: bool,
    /// A frame waiting for this realm's published keys (§8.2); what follows it waits in the
    /// decoder, so the connection's frames keep their order. Boxed: a frame is most of a
    /// connection's size inline, and only a connection waiting on discovery holds one (inline,
    /// an idle connection held 943 heap bytes rather than 473, docs/performance.md).
    parked: Option<Box<(Authority, Frame)>>,
    /// When a frame last went either way on it, for [`LINK_IDLE`].
    last_traffic: Timestamp,
    /// Who opened it, as counted for [`MAX_CONNECTIONS_PER_SOURCE`].
    source: Option<SourceKey>,
    /// Its place among the connections waiting for their hello ([`MAX_WAITING_HELLOS`]), while
    /// it waits.
    waiting: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Ack(ConnId, String),
    Flush,
    /// Messages wait this long for a link to their realm before they are spooled.
    Dial(Authority),
    /// A DNS question the host has not answered yet ([`locate::DNS_TIMEOUT`]).
    Resolve(RecordType, String),
    /// A dialled link may have been idle for [`LINK_IDLE`]; checked, and moved on if it was not.
    Idle(ConnId),
    /// A connection's opening exchange is due ([`HELLO_TIMEOUT`]).
    Hello(ConnId),
}

/// The realm server; see the [module docs](self).
pub struct Server<R> {
    config: ServerConfig,
    /// The kid of `config.signing_key`, worked out once: every message that leaves the realm is
    /// signed, and deriving the kid costs as much as a signature.
    own_kid: Option<String>,
    crypto: &'static dyn CryptoProvider,
    rng: R,
    /// Published keys pinned per realm (§8.2): configured, or given by [`Input::Keys`].
    keys: BTreeMap<Authority, Vec<[u8; 32]>>,
    /// Realms a link is being located or dialled to (§8.1), so a flush does not ask twice; one
    /// per realm, each with a message waiting or a backlog.
    dialling: Dials,
    /// Locations and published keys from DNS, with §8.1–§8.2's lifetimes.
    cache: DiscoveryCache,
    /// Realms whose TXT keys were asked for and not answered yet, and the connections parked
    /// until they are.
    key_waits: KeyWaits,
    /// Messages waiting for a link to their realm to come up (§6.5 "dialling if needed"), with
    /// the connection that waits for each one's ack.
    awaiting: Awaiting,
    /// Messages this server wrote itself after a change it had persisted (a link's control
    /// message or notice, a grant), by id, with their `from`: their copy is on record while they
    /// are on their way, until their answer or until the spool takes them.
    originated: BTreeMap<String, String>,
    conns: BTreeMap<ConnId, Conn>,
    /// Connections held per source ([`MAX_CONNECTIONS_PER_SOURCE`]).
    sources: BTreeMap<SourceKey, usize>,
    /// The connections waiting for their hello, oldest first ([`MAX_WAITING_HELLOS`]).
    waiting_hellos: BTreeMap<u64, ConnId>,
    /// The place the next connection to wait for its hello takes.
    next_waiting: u64,
    peer_links: PeerLinks,
    binds: BindTable<ConnId>,
    spool: Spool<Msg>,
    seen: SeenIds,
    /// Digests of the (realm, nonce) of every verified peer hello still inside its window.
    hello_nonces: ExpiringSet<[u8; 32]>,
    /// When each (from, to) pair last passed (§10.3).
    replies: ReplyWindow,
    /// The realm's links (§11).
    links: LinkTable,
    /// The audit stream's subscribers (§13).
    audit: Audit,
    /// The passports this realm issued (§12).
    passports: PassportBook,
    /// Forwarded messages waiting for their next hop's ack, and spooled ones in flight (§6.6).
    forwarded: Forwarded,
    timers: TimerQueue<Timer>,
    out: VecDeque<Output>,
    stats: Stats,
    /// The `now` of the input being handled, so that a frame sent is noted as traffic.
    clock: Timestamp,
}

impl<R> core::fmt::Debug for Server<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("realm", &self.config.realm)
            .field("conns", &self.conns.len())
            .field("spooled", &self.spool.len())
            .field("pending", &self.forwarded.pending_len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: CryptoRng> Server<R> {
    /// A server for `config.realm`, signing and verifying with `crypto`, drawing nonces from
    /// `rng`.
    pub fn new(config: ServerConfig, crypto: &'static dyn CryptoProvider, rng: R) -> Self {
        let links = LinkTable::new(config.realm.clone(), config.links.clone());
        Self {
            links,
            audit: Audit::new(config.realm.clone()),
            passports: PassportBook::new(crypto),
            keys: config.known_keys.clone(),
            own_kid: config
                .signing_key
                .as_ref()
                .map(|key| sigstring::kid(crypto, &crypto.ed25519_public_key(key))),
            config,
            crypto,
            rng,
            dialling: Dials::default(),
            cache: DiscoveryCache::new(),
            key_waits: KeyWaits::default(),
            awaiting: Awaiting::default(),
            originated: BTreeMap::new(),
            conns: BTreeMap::new(),
            sources: BTreeMap::new(),
            waiting_hellos: BTreeMap::new(),
            next_waiting: 0,
            binds: BindTable::new(),
            spool: Spool::default(),
            seen: SeenIds::default(),
            hello_nonces: ExpiringSet::new(MAX_HELLO_NONCES),
            forwarded: Forwarded::default(),
            peer_links: PeerLinks::default(),
            replies: ReplyWindow::new(),
            timers: TimerQueue::new(),
            out: VecDeque::new(),
            stats: Stats::default(),
            clock: Timestamp::ZERO,
        }
    }

    /// What the server has counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Messages held in the spool.
    pub fn spooled(&self) -> usize {
        self.spool.len()
    }

    /// Frame bytes held in the spool ([`spool::MAX_SPOOLED_BYTES`]).
    pub fn spooled_bytes(&self) -> usize {
        self.spool.bytes()
    }

    /// Spooled messages in flight (§6.6): sent, timed out, and waiting for a late ack.
    pub fn in_flight(&self) -> usize {
        self.forwarded.in_flight_len()
    }

    /// `msg` signed with the realm's key (§9.2), or `None` when the realm does not sign.
    fn sign(&self, msg: &[u8]) -> Option<sigstring::SigString> {
        let key = self.config.signing_key.as_ref()?;
        let kid = self.own_kid.clone()?;
        Some(sigstring::sign_with_kid(self.crypto, key, kid, msg))
    }

    fn send(&mut self, conn: ConnId, frame: &Frame) {
        self.send_bytes(conn, framing::encode(frame));
    }

    fn send_bytes(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last_traffic = self.clock;
        }
        self.out.push_back(Output::Send { conn, bytes });
    }

    /// Sends `error` and closes: the answer to a protocol violation (§4.8).
    fn fail(&mut self, conn: ConnId, code: ErrorCode, reason: &str) {
        self.stats.protocol_errors += 1;
        self.send(conn, &Frame::Error(ErrorFrame::new(code, reason)));
        self.close(conn);
    }

    /// Asks the host to close `conn`. Nothing more is read from it, and it is no longer a link
    /// to send on, a client to deliver to (what comes for its binds goes to another bind or the
    /// spool) nor a subscriber, though its messages wait for [`Input::Closed`] to be spooled
    /// again.
    fn close(&mut self, conn: ConnId) {
        self.out.push_back(Output::Close { conn });
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Closing;
        if let Some(realm) = &c.peer {
            self.peer_links.forget(realm, conn);
        }
        self.binds.unbind_all(conn);
        self.audit.unsubscribe(conn);
    }

    /// Whether `conn` is gone or being closed ([`Server::close`]).
    fn is_closing(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_none_or(|c| c.state == State::Closing)
    }

    fn ack(&mut self, conn: ConnId, ack: Ack) {
        let slot = match ack.status {
            AckStatus::Delivered => 0,
            AckStatus::Queued => 1,
            AckStatus::Failed => 2,
        };
        self.stats.acks[slot] += 1;
        if self.conns.contains_key(&conn) {
            self.send(conn, &Frame::Ack(ack));
        }
    }

    /// Gives a message's one answer to whoever waits for it, and writes it to the audit log
    /// (§13) as `msg.<status>`, `hop` saying where the message is now.
    fn answer(&mut self, now: Timestamp, up: &Upstream, m: &Msg, ack: Ack, hop: Hop) {
        // A message this server wrote failed here (on its way out, or the spool was full): its
        // copy is done with. A `delivered` or `queued` from the next hop is `downstream_ack`'s,
        // and one from this server's spool leaves the copy to the spool.
        if ack.status == AckStatus::Failed {
            self.forget_originated(m);
        }
        let mut e = msg_event(now, audit_kind(ack.status), m, hop);
        e.id = Some(ack.id.clone());
        e.status = Some(status_text(ack.status).to_string());
        e.code.clone_from(&ack.code);
        e.reason.clone_from(&ack.reason);
        e.by.clone_from(&ack.by);
        self.emit(now, e);
        self.answer_quietly(now, up, ack);
    }

    /// The answer without an audit event: for a message whose event is already written.
    fn answer_quietly(&mut self, now: Timestamp, up: &Upstream, ack: Ack) {
        match up {
            Upstream::Passported(conn) => self.redeem_answered(*conn, ack),
            Upstream::Grant(w) => self.grant_answered(now, w, ack),
            Upstream::Conn(c) => self.ack(*c, ack),
            Upstream::Linked(conn, link) => {
                let linked = Linked {
                    ok: true,
                    link: Some(link.clone()),
                    links: None,
                    delivery: Some(status_text(ack.status).to_string()),
                    code: ack.code,
                    reason: ack.reason,
                };
                if self.conns.contains_key(conn) {
                    self.send(*conn, &Frame::Linked(linked));
                }
            }
            Upstream::Spool(_) | Upstream::Nobody => {}
        }
    }

    fn answer_code(
        &mut self,
        now: Timestamp,
        up: &Upstream,
        m: &Msg,
        (status, code): (AckStatus, AckCode),
        hop: Hop,
    ) {
        let ack = Ack::with_code(&m.id, status, code);
        self.answer(now, up, m, ack, hop);
    }

    /// Writes an event to the audit log (§13), durably, and hands it to the subscribers who see
    /// it; a subscriber past its budget is closed ([`audit::SUBSCRIBER_RATE`]).
    /// Every text field is first cut to [`audit::MAX_EVENT_FIELD_BYTES`]: a refused frame's
    /// fields are the sender's, of any length up to the frame limit.
    fn emit(&mut self, now: Timestamp, mut event: Event) {
        audit::bound_fields(&mut event);
        let fanout = self.audit.fan_out(now, &event);
        self.stats.events += 1;
        if !fanout.to.is_empty() {
            let bytes = framing::encode(&Frame::Event(Box::new(event.clone())));
            for conn in fanout.to {
                self.out.push_back(Output::Send {
                    conn,
                    bytes: bytes.clone(),
                });
            }
        }
        for conn in fanout.slow {
            self.stats.slow_subscribers += 1;
            self.close(conn);
        }
        self.out.push_back(Output::Persist(Record::Audit {
            event: Box::new(event),
        }));
    }

    /// Remembers `id` for duplicate suppression, durably, before the ack that depends on it.
    /// A message was acked `delivered` or `queued`: remember its id for duplicate suppression
    /// (§7.3), durably, before the ack that depends on it, and note its pair for the reply
    /// window (§10.3).
    fn passed(&mut self, now: Timestamp, m: &Msg) {
        self.seen.record(now, &m.id);
        let until = now.saturating_add(spool::DUPLICATE_WINDOW);
        self.out.push_back(Output::Persist(Record::Seen {
            id: m.id.clone(),
            until,
        }));
        if let (Ok(from), Ok(to)) = (Address::parse(&m.from), Address::parse(&m.to)) {
            // Durable like the seen id: a restart must not close a window the ack opened.
            self.out.push_back(Output::Persist(Record::ReplyPair {
                from: from.key().to_string(),
                to: to.key().to_string(),
                at: now,
            }));
            if let Some((f, t)) = self.replies.note(now, &from, &to) {
                self.out.push_back(Output::Forget(RecordKey::ReplyPair {
                    from: f.to_string(),
                    to: t.to_string(),
                }));
            }
        }
    }

    /// How long a noted pair (§10.3) must be kept: as long as anything may still ask about it,
    /// the policy's `mode: "reply"` rules and §11.3's one-way links alike. The links ask whatever
    /// the policy says, so a policy with no reply rule must not shorten their window.
    fn reply_retention(&self) -> Duration {
        self.config.policy.max_window().max(LINK_REPLY_WINDOW)
    }

    /// Spools a message durably; `Err` means it is not held and must not be acked `queued`.
    fn hold(&mut self, now: Timestamp, key: &str, item: Spooled<Msg>) -> Result<(), SpoolFull> {
        let record = Record::Spooled {
            key: key.to_string(),
            msg: Box::new(item.msg.clone()),
        };
        self.spool.push(key, weighed(item))?;
        self.out.push_back(Output::Persist(record));
        self.arm_flush(now);
        Ok(())
    }

    fn arm_flush(&mut self, now: Timestamp) {
        if self.timers.deadline_of(&Timer::Flush).is_none() {
            self.timers
                .schedule(now + self.config.flush_interval, Timer::Flush);
        }
    }

    /// A connection the host opened; `false` when it is refused (the server is full, its source
    /// holds its share, or the host named a connection already open, which is then closed: the
    /// two cannot be told apart). `waits` says whether it waits for a hello that counts against
    /// [`MAX_WAITING_HELLOS`] (not a link this server dialled, nor one refused at once).
    fn opened(
        &mut self,
        conn: ConnId,
        face: Face,
        namespaces: Vec<Namespace>,
        source: Source,
        waits: bool,
    ) -> bool {
        if self.conns.len() >= MAX_CONNECTIONS || self.conns.contains_key(&conn) {
            self.stats.refused_connections += 1;
            self.close(conn);
            return false;
        }
        let source = source.key();
        if let Some(key) = source {
            let held = self.sources.entry(key).or_default();
            if *held >= MAX_CONNECTIONS_PER_SOURCE {
                self.stats.refused_connections += 1;
                self.stats.source_refusals += 1;
                self.close(conn);
                return false;
            }
            *held += 1;
        }
        let waiting = waits.then(|| {
            if self.waiting_hellos.len() >= MAX_WAITING_HELLOS
                && let Some((_, oldest)) = self.waiting_hellos.pop_first()
            {
                self.stats.hello_evictions += 1;
                self.close(oldest);
            }
            let place = self.next_waiting;
            self.next_waiting += 1;
            self.waiting_hellos.insert(place, conn);
            place
        });
        let state = State::AwaitHello;
        self.timers
            .schedule(self.clock + HELLO_TIMEOUT, Timer::Hello(conn));
        self.conns.insert(
            conn,
            Conn {
                face,
                namespaces,
                state,
                decoder: FrameDecoder::new(),
                peer: None,
                authenticated: false,
                nonce: None,
                admin: false,
                up: false,
                parked: None,
                last_traffic: self.clock,
                source,
                waiting,
            },
        );
        true
    }

    /// `conn` no longer waits for its hello: it said it, it is closing, or it is gone.
    fn hello_done(&mut self, conn: ConnId) {
        if let Some(place) = self.conns.get_mut(&conn).and_then(|c| c.waiting.take()) {
            self.waiting_hellos.remove(&place);
        }
    }

    /// §5: a client-face connection nobody can be proven to hold is refused, not served with
    /// no namespaces: no frame of it is read, and the refusal is the spec's `forbidden`.
    fn unidentified(&mut self, conn: ConnId) {
        if self.opened(conn, Face::Client, Vec::new(), Source::Unknown, false) {
            self.stats.unidentified_connections += 1;
            self.fail(
                conn,
                ErrorCode::Forbidden,
                "the transport proves no identity for this connection",
            );
        }
    }

    fn closed(&mut self, now: Timestamp, conn: ConnId) {
        self.hello_done(conn);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(key) = c.source
            && let Some(held) = self.sources.get_mut(&key)
        {
            *held -= 1;
            if *held == 0 {
                self.sources.remove(&key);
            }
        }
        if let Some(realm) = &c.peer {
            self.peer_links.forget(realm, conn);
        }
        if let Some(parked) = &c.parked {
            self.key_waits.closed(&parked.0, conn);
        }
        self.audit.unsubscribe(conn);
        self.timers.cancel(&Timer::Idle(conn));
        self.timers.cancel(&Timer::Hello(conn));
        if let Some(realm) = c.peer.as_ref().filter(|_| c.up) {
            let mut e = audit::event(now, audit::Kind::PeerDown);
            e.realm = Some(realm.to_string());
            e.authenticated = Some(c.authenticated);
            e.outbound = Some(c.nonce.is_some());
            self.emit(now, e);
        }
        // A link this server dialled that never came up (closed before its welcome, or for
        // it): what waits for its realm is spooled now rather than at the dial's deadline.
        if let Some(realm) = c.peer.as_ref().filter(|_| c.nonce.is_some() && !c.up) {
            self.dialling.unwelcomed(realm, conn);
            self.no_link(now, realm);
        }
        let code = dropped_hop_code(c.face);
        self.binds.unbind_all(conn);
        // Messages forwarded over it and not acked: the hop is gone, so spool them again (not in
        // flight: nothing can ack them now) and tell whoever waits that they are queued.
        for p in self.forwarded.take_all_on(conn) {
            self.timers.cancel(&Timer::Ack(conn, p.item.id.clone()));
            self.requeue(now, p, code);
        }
        // Messages in flight to it: no late ack can come now, so they may be sent again.
        for id in self.forwarded.land_all_on(conn) {
            self.spool.release(&id);
        }
        // Messages it sent and still waiting downstream or for a link: their answers will have
        // nowhere to go, and must not reach a new connection the host gives its id.
        self.forwarded.forget_upstream(conn);
        self.awaiting.forget(conn);
    }

    /// A forwarded message whose hop went away: back into the spool, and `queued` upstream.
    fn requeue(&mut self, now: Timestamp, p: Pending, code: AckCode) {
        let from_spool = p.is_from_spool();
        let (item, key, ups) = p.into_parts();
        let msg = item.msg.clone();
        // One from the spool is still durably stored from when it was first spooled.
        if !from_spool {
            let record = Record::Spooled {
                key: key.clone(),
                msg: Box::new(msg.clone()),
            };
            self.out.push_back(Output::Persist(record));
            self.passed(now, &msg);
        }
        self.spool.requeue(&key, alloc::vec![weighed(item)]);
        self.originated.remove(&msg.id);
        self.arm_flush(now);
        let queued = Ack::with_code(&msg.id, AckStatus::Queued, code);
        self.answer(now, &Upstream::Nobody, &msg, queued.clone(), Hop::Spool);
        for u in &ups {
            self.answer_quietly(now, u, queued.clone());
        }
    }

    fn received(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == State::Closing {
            return;
        }
        c.decoder.push(bytes);
        c.last_traffic = now;
        if c.parked.is_some() && c.decoder.buffered() > MAX_PARKED_BYTES {
            self.stats.parked_overflows += 1;
            return self.close(conn);
        }
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.state == State::Closing || c.parked.is_some() {
                return;
            }
            let Some(next) = c.decoder.next() else {
                return;
            };
            self.stats.frames += 1;
            match next {
                Ok(frame) => self.frame(now, conn, frame),
                Err(e) => match e.answer() {
                    Answer::AckFailed { id, code } => {
                        self.stats.messages += 1;
                        let mut e = audit::event(now, audit::Kind::MsgFailed);
                        e.id = Some(id.clone());
                        e.status = Some(status_text(AckStatus::Failed).to_string());
                        e.code = Some(code.as_str().to_string());
                        e.hop = Some(Hop::Local.as_str().to_string());
                        self.emit(now, e);
                        self.ack(conn, Ack::with_code(id, AckStatus::Failed, code));
                    }
                    Answer::Close(code) => self.fail(conn, code, &e.to_string()),
                },
            }
        }
    }

    fn frame(&mut self, now: Timestamp, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (face, state) = (c.face, c.state);
        match (state, frame) {
            (State::AwaitHello, Frame::Hello(h)) => self.hello(now, conn, face, &h),
            (State::AwaitWelcome, Frame::Welcome(w)) => self.welcome(now, conn, &w),
            (State::AwaitWelcome, Frame::Error(_)) => self.close(conn),
            (State::AwaitWelcome, _) => {
                self.fail(
                    conn,
                    ErrorCode::NoWelcome,
                    "hello was not answered with welcome",
                );
            }
            (State::AwaitHello, _) => {
                self.fail(
                    conn,
                    ErrorCode::ExpectedHello,
                    "the first frame must be hello",
                );
            }
            (_, Frame::Ping(p)) => self.send(conn, &Frame::Pong(p.pong())),
            (_, Frame::Pong(_)) => {}
            (_, Frame::Msg(m)) if face == Face::Client => self.client_msg(now, conn, m),
            (_, Frame::Msg(m)) => self.peer_msg(now, conn, m),
            (_, Frame::Ack(a)) => self.downstream_ack(now, conn, a),
            (_, Frame::Bind(b)) if face == Face::Client => self.bind(now, conn, b.names),
            (_, Frame::Link(req)) if face == Face::Client => self.link_request(now, conn, req),
            (_, Frame::Passport(req)) if face == Face::Client => {
                self.passport_request(now, conn, &req);
            }
            (_, Frame::Stat(_)) if face == Face::Client => self.stat(conn),
            (_, Frame::Subscribe(sub)) if face == Face::Client => self.subscribe(now, conn, &sub),
            (_, Frame::Error(_)) => self.close(conn),
            (_, Frame::Unknown { t }) => {
                self.fail(
                    conn,
                    ErrorCode::UnexpectedFrame,
                    &format!("unknown frame type {t}"),
                );
            }
            (_, other) => {
                let why = format!("{} is not accepted here", other.t());
                self.fail(conn, ErrorCode::UnexpectedFrame, &why);
            }
        }
    }

    /// §4.9: a client asks for the live audit stream, scoped to its namespaces.
    fn subscribe(&mut self, now: Timestamp, conn: ConnId, sub: &super::frame::Subscribe) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (namespaces, admin) = (c.namespaces.clone(), c.admin);
        match self
            .audit
            .subscribe(now, conn, sub.kinds.as_deref(), &namespaces, admin)
        {
            Ok(subscribed) => self.send(conn, &Frame::Subscribed(subscribed)),
            Err(e @ audit::SubscribeRefusal::NoScope) => {
                self.fail(conn, ErrorCode::Forbidden, &e.to_string());
            }
            Err(e) => self.fail(conn, ErrorCode::BadFrame, &e.to_string()),
        }
    }

    /// §4.10: implementation-defined counters.
    fn stat(&mut self, conn: ConnId) {
        let s = &self.stats;
        let mut counters = super::frame::Object::new();
        for (name, value) in [
            ("connections", self.conns.len() as u64),
            ("spooled", self.spool.len() as u64),
            ("spooled_bytes", self.spool.bytes() as u64),
            ("pending", self.forwarded.pending_len() as u64),
            ("frames", s.frames),
            ("messages", s.messages),
            ("delivered", s.acks[0]),
            ("queued", s.acks[1]),
            ("failed", s.acks[2]),
            ("protocol_errors", s.protocol_errors),
            ("stray_acks", s.stray_acks),
            ("settled", s.settled),
            ("expired", s.expired),
            ("events", s.events),
            ("slow_subscribers", s.slow_subscribers),
            ("too_large_to_forward", s.too_large_to_forward),
            ("parked_overflows", s.parked_overflows),
            ("spool_full", s.spool_full),
        ] {
            counters.insert(name.to_string(), value.into());
        }
        self.send(conn, &Frame::Stats(super::frame::Stats { counters }));
    }

    fn hello(&mut self, now: Timestamp, conn: ConnId, face: Face, h: &Hello) {
        if h.proto != PROTO {
            let why = format!("this server speaks {PROTO}");
            return self.fail(conn, ErrorCode::BadProto, &why);
        }
        let expected = match face {
            Face::Client => Role::Client,
            Face::Peer => Role::Peer,
        };
        if h.role != expected {
            return self.fail(
                conn,
                ErrorCode::WrongFace,
                "hello role does not match this face",
            );
        }
        if face == Face::Peer {
            return self.peer_hello(now, conn, h);
        }
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Open;
        let ns = c.namespaces.iter().map(namespace_text).collect();
        let welcome = Welcome {
            realm: self.config.realm.to_string(),
            proto: PROTO.to_string(),
            ns: Some(ns),
            server: Some(self.config.software.clone()),
            sig: None,
            kid: None,
        };
        self.send(conn, &Frame::Welcome(welcome));
    }

    fn is_trusted_unsigned(&self, realm: &Authority) -> bool {
        self.config.trusted_unsigned.contains(realm)
    }

    /// The keys that verify `realm` (§8.2), or `None` when they are being asked for and `frame`
    /// has been parked on `conn` until they come.
    fn keys_or_park(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        realm: &Authority,
        frame: impl FnOnce() -> Frame,
    ) -> Option<Vec<[u8; 32]>> {
        match self.published_keys(now, realm) {
            Keys::Known(keys) => Some(keys),
            Keys::Pending => {
                self.park(conn, realm, frame());
                None
            }
        }
    }

    /// The accepting side: a peer claims realm P. Its link is authenticated when P is trusted
    /// unsigned, or its hello is signed by a published key of P within 300 s of now.
    fn peer_hello(&mut self, now: Timestamp, conn: ConnId, h: &Hello) {
        let Some(peer) = h.realm.as_deref().and_then(|r| Authority::parse(r).ok()) else {
            return self.fail(conn, ErrorCode::BadFrame, "a peer hello names its realm");
        };
        let (Some(ts), Some(nonce)) = (h.ts, h.nonce.as_deref()) else {
            return self.fail(
                conn,
                ErrorCode::BadFrame,
                "a peer hello carries ts and nonce",
            );
        };
        let fresh = Timestamp::from_secs(ts).abs_diff(now) <= HELLO_WINDOW;
        // Keys are looked up only when they could authenticate the link.
        let keys = if self.is_trusted_unsigned(&peer) || h.sig.is_none() || !fresh {
            Vec::new()
        } else {
            match self.keys_or_park(now, conn, &peer, || Frame::Hello(h.clone())) {
                Some(keys) => keys,
                // Said, and waiting for its realm's keys: no longer a silent connection.
                None => return self.hello_done(conn),
            }
        };
        let canonical =
            signing::hello_canonical(&peer.to_string(), &self.config.realm.to_string(), ts, nonce);
        let signed = h.sig.as_deref().is_some_and(|sig| {
            signing::verify_any(self.crypto, &keys, canonical.as_bytes(), &[sig])
        });
        if signed && fresh {
            // A signed hello is good once: the same realm and nonce again is a replay of a
            // captured hello (through a TLS-terminating proxy, say), not a new link.
            let digest = self.crypto.sha256(&[
                b"airc-hello-nonce\n",
                peer.to_string().as_bytes(),
                b"\n",
                nonce.as_bytes(),
            ]);
            let until = Timestamp::from_secs(ts).max(now) + HELLO_WINDOW;
            if let ExpiringInsert::Present = self.hello_nonces.insert(now, digest, until) {
                self.stats.replayed_hellos += 1;
                return self.fail(conn, ErrorCode::PeerUnverified, "hello nonce replayed");
            }
        }
        let authenticated = self.is_trusted_unsigned(&peer) || (signed && fresh);
        let acceptor = self.config.realm.to_string();
        let text = signing::welcome_canonical(&acceptor, &peer.to_string(), nonce);
        let sig = self.sign(text.as_bytes()).map(|s| s.to_string());
        let kid = sig.as_ref().and(self.own_kid.clone());
        self.link_open(conn, &peer, authenticated);
        let welcome = Welcome {
            realm: self.config.realm.to_string(),
            proto: PROTO.to_string(),
            ns: None,
            server: Some(self.config.software.clone()),
            sig,
            kid,
        };
        self.send(conn, &Frame::Welcome(welcome));
        self.peer_up(now, conn);
        if authenticated {
            self.link_up(now, conn, &peer);
        }
    }

    /// The dialling side: the host opened the link a `Connect` asked for; say hello.
    fn dialled(&mut self, now: Timestamp, conn: ConnId, target: Authority) {
        if !self.opened(conn, Face::Peer, Vec::new(), Source::Unknown, false) {
            self.dialling.remove(&target);
            return self.no_link(now, &target);
        }
        // Still being dialled until the welcome: a flush meanwhile must not dial again.
        self.dialling.welcoming(&target, conn);
        let mut nonce = [0u8; NONCE_BYTES];
        self.rng.fill_bytes(&mut nonce);
        let nonce = hex::encode(&nonce);
        let ts = now.as_secs();
        let me = self.config.realm.to_string();
        let text = signing::hello_canonical(&me, &target.to_string(), ts, &nonce);
        let sig = self.sign(text.as_bytes()).map(|s| s.to_string());
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::AwaitWelcome;
        c.peer = Some(target);
        c.nonce = Some(nonce.clone());
        self.timers.schedule(now + LINK_IDLE, Timer::Idle(conn));
        let hello = Hello {
            proto: PROTO.to_string(),
            role: Role::Peer,
            agent: Some(self.config.software.clone()),
            realm: Some(me),
            ts: Some(ts),
            nonce: Some(nonce),
            sig,
        };
        self.send(conn, &Frame::Hello(hello));
    }

    /// The dialler checks the welcome: the realm it resolved, signed over its own nonce.
    fn welcome(&mut self, now: Timestamp, conn: ConnId, w: &Welcome) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (Some(target), Some(nonce)) = (c.peer.clone(), c.nonce.clone()) else {
            return;
        };
        if w.proto != PROTO {
            return self.fail(
                conn,
                ErrorCode::BadProto,
                &format!("this server speaks {PROTO}"),
            );
        }
        if Authority::parse(&w.realm).ok().as_ref() != Some(&target) {
            return self.fail(
                conn,
                ErrorCode::RealmMismatch,
                "welcome names another realm",
            );
        }
        if !self.is_trusted_unsigned(&target) {
            let keys = if w.sig.is_none() {
                Vec::new()
            } else {
                match self.keys_or_park(now, conn, &target, || Frame::Welcome(w.clone())) {
                    Some(keys) => keys,
                    None => return,
                }
            };
            let me = self.config.realm.to_string();
            let text = signing::welcome_canonical(&target.to_string(), &me, &nonce);
            let sigs: Vec<&str> = w.sig.as_deref().into_iter().collect();
            if !signing::verify_any(self.crypto, &keys, text.as_bytes(), &sigs) {
                return self.fail(conn, ErrorCode::PeerUnverified, "welcome signature");
            }
        }
        self.dialling.unwelcomed(&target, conn);
        self.link_open(conn, &target, true);
        self.peer_up(now, conn);
        self.link_up(now, conn, &target);
    }

    /// A peer link is open (§8.4): `peer.up` (§13), whether or not it is authenticated.
    fn peer_up(&mut self, now: Timestamp, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.up = true;
        let mut e = audit::event(now, audit::Kind::PeerUp);
        e.realm = c.peer.as_ref().map(ToString::to_string);
        e.authenticated = Some(c.authenticated);
        e.outbound = Some(c.nonce.is_some());
        self.emit(now, e);
    }

    /// `conn` is a peer link to `realm`, open (§8.4), and sent on if `authenticated`.
    fn link_open(&mut self, conn: ConnId, realm: &Authority, authenticated: bool) {
        self.hello_done(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = State::Open;
        c.peer = Some(realm.clone());
        c.authenticated = authenticated;
        if authenticated {
            self.peer_links.add(realm, conn);
        }
    }

    /// An authenticated link to `realm`, if one is open: the only kind a server sends on.
    fn link_to(&self, realm: &Authority) -> Option<ConnId> {
        let link = self.peer_links.to(realm);
        debug_assert_eq!(
            link,
            self.conns
                .iter()
                .find(|(_, c)| c.authenticated
                    && c.state == State::Open
                    && c.peer.as_ref() == Some(realm))
                .map(|(id, _)| *id),
            "the index of links to {realm} is out of step with the connections"
        );
        link
    }

    /// A message this server writes itself after persisting the change it reports (§11.2: "the
    /// state change locally first, then the control message"; a grant, §12.5; a notice): its
    /// copy goes on record under `key` before it goes anywhere, as a spooled message's would,
    /// so that a crash before its answer cannot lose it: the restored spool sends it again.
    /// Leaving the realm, it is written again once stamped and signed (`deliver_remote`), so
    /// that what a restart sends is what would have gone. The copy is forgotten at the next
    /// hop's answer or a failure here ([`Server::forget_originated`]), and taken over by the
    /// spool when the message is spooled.
    fn originate(&mut self, now: Timestamp, key: &str, msg: Msg) -> Spooled<Msg> {
        self.out.push_back(Output::Persist(Record::Spooled {
            key: key.to_string(),
            msg: Box::new(msg.clone()),
        }));
        self.originated.insert(msg.id.clone(), msg.from.clone());
        Spooled {
            id: msg.id.clone(),
            ts: now,
            ttl: DEFAULT_TTL,
            msg,
            bytes: 0,
        }
    }

    /// `m` is done with: if this server wrote it, its copy is forgotten. Known by its id and
    /// `from`, so that a client reusing the id, which cannot write from another's namespace,
    /// cannot end it.
    fn forget_originated(&mut self, m: &Msg) {
        if self.originated.get(&m.id) == Some(&m.from) {
            self.originated.remove(&m.id);
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: m.id.clone() }));
        }
    }

    /// The local client to hand a message for `to`: §4.3's selection for an endpoint, the
    /// namespace's relay for a namespace reference (notices only).
    fn local_hop(&self, to: &Address) -> Option<ConnId> {
        if to.is_namespace() {
            self.binds.select_namespace(to)
        } else {
            self.binds.select(to)
        }
    }

    /// A fresh message id for what the server itself sends.
    fn new_id(&mut self) -> String {
        super::frame::message_id(&mut self.rng)
    }

    fn bind(&mut self, now: Timestamp, conn: ConnId, names: Vec<String>) {
        let namespaces = self
            .conns
            .get(&conn)
            .map(|c| c.namespaces.clone())
            .unwrap_or_default();
        let mut patterns = Vec::with_capacity(names.len());
        for name in &names {
            let p = match Pattern::parse_in_realm(name, &self.config.realm) {
                Ok(p) => p,
                Err(e) => return self.fail(conn, ErrorCode::BadBind, &format!("{name}: {e}")),
            };
            // Counted in the broadest of the connection's namespaces it lies in: the one its
            // user was given, when another user holds one beneath it.
            let within = namespaces
                .iter()
                .filter(|ns| pattern_inside(&p, ns))
                .min_by_key(|ns| ns.segments().len());
            let within = match within {
                Some(ns) if p.authority() == Some(&self.config.realm) => ns,
                _ => {
                    let why = format!("{name} is outside your namespaces");
                    return self.fail(conn, ErrorCode::Forbidden, &why);
                }
            };
            if self.reserved_not_bindable(&p) {
                return self.fail(conn, ErrorCode::Forbidden, &format!("{name} is reserved"));
            }
            patterns.push((p, within.segments().to_vec()));
        }
        let mut keys = Vec::new();
        for (p, within) in &patterns {
            if !self.binds.bind_in(conn, p.clone(), within) {
                return self.fail(conn, ErrorCode::BadBind, "too many binds");
            }
            if let Some(PatternSegment::Literal(first)) = p.segments().first() {
                keys.push(first.clone());
            }
        }
        let bound = Bound {
            names: patterns.iter().map(|(p, _)| p.to_string()).collect(),
        };
        self.send(conn, &Frame::Bound(bound));
        // §7.4: a bind flushes the spool for its namespace.
        keys.sort();
        keys.dedup();
        for key in keys {
            self.flush(now, &key);
        }
    }

    fn reserved_not_bindable(&self, p: &Pattern) -> bool {
        p.segments().iter().any(|s| match s {
            PatternSegment::Literal(l) => {
                super::address::is_reserved_segment(l)
                    && !self.config.bindable_reserved.iter().any(|r| r == l)
            }
            _ => false,
        })
    }

    fn client_msg(&mut self, now: Timestamp, conn: ConnId, mut m: Msg) {
        self.stats.messages += 1;
        let namespaces = self
            .conns
            .get(&conn)
            .map(|c| c.namespaces.clone())
            .unwrap_or_default();
        // §6.2 validate, canonicalize, authenticate.
        let ctx = namespaces.first().cloned().unwrap_or_else(Namespace::root);
        let face = AddressFace::Client {
            realm: &self.config.realm,
            namespace: &ctx,
        };
        let (Ok(from), Ok(to)) = (
            Address::resolve(&m.from, face),
            Address::resolve(&m.to, face),
        ) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        let Some(ts) = signing::ts_ms(m.ts).map(Timestamp::from_millis) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        if from.realm() != &self.config.realm
            || !from.is_endpoint()
            || !namespaces.iter().any(|ns| from.is_inside(ns))
        {
            return self.refuse(now, conn, &m, AckCode::Refused);
        }
        m.via = None;
        m.from = from.to_string();
        m.to = to.to_string();
        self.route(now, Upstream::Conn(conn), &from, &to, ts, m);
    }

    /// §6.2 for a message from a peer that said realm P: only P's own messages, only for this
    /// realm, and signed by a published key of P unless P is trusted unsigned.
    fn peer_msg(&mut self, now: Timestamp, conn: ConnId, mut m: Msg) {
        let Some(peer) = self.conns.get(&conn).and_then(|c| c.peer.clone()) else {
            return;
        };
        // An unsigned message from a signing realm is refused without asking for keys.
        let keys = if self.is_trusted_unsigned(&peer) || m.sigstrings().is_empty() {
            Vec::new()
        } else {
            match self.keys_or_park(now, conn, &peer, || Frame::Msg(m.clone())) {
                Some(keys) => keys,
                None => return,
            }
        };
        self.stats.messages += 1;
        let (Ok(from), Ok(to)) = (Address::parse(&m.from), Address::parse(&m.to)) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        let Some(ts) = signing::ts_ms(m.ts) else {
            return self.refuse(now, conn, &m, AckCode::BadAddress);
        };
        if from.realm() != &peer || to.realm() != &self.config.realm {
            return self.refuse(now, conn, &m, AckCode::Refused);
        }
        if !self.is_trusted_unsigned(&peer) {
            // Signed over the URIs as they appear on the wire (§9.3).
            let signed = Signed {
                id: &m.id,
                from: &m.from,
                to: &m.to,
                ts_ms: ts,
                kind: m.kind.as_deref(),
                re: m.re.as_deref(),
                body: &m.body,
            };
            let text = signed.canonical();
            let ok = signing::verify_any(self.crypto, &keys, text.as_bytes(), &m.sigstrings());
            if !ok {
                return self.refuse(now, conn, &m, AckCode::Refused);
            }
        }
        m.from = from.to_string();
        m.to = to.to_string();
        self.route(
            now,
            Upstream::Conn(conn),
            &from,
            &to,
            Timestamp::from_millis(ts),
            m,
        );
    }

    /// The rest of §6 once the origin is authenticated: expiry, dedupe, then delivery.
    fn route(
        &mut self,
        now: Timestamp,
        up: Upstream,
        from: &Address,
        to: &Address,
        ts: Timestamp,
        m: Msg,
    ) {
        let id = m.id.clone();
        let ttl = m.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
        // §6.2 expiry and dedupe.
        if spool::is_expired(ts, ttl, now) {
            return self.answer_code(
                now,
                &up,
                &m,
                (AckStatus::Failed, AckCode::Expired),
                Hop::Local,
            );
        }
        if self.seen.contains(now, &id) {
            let dup = (AckStatus::Delivered, AckCode::Duplicate);
            return self.answer_code(now, &up, &m, dup, Hop::Local);
        }
        // A copy of a message still waiting on its next hop: wait with it for the same answer.
        if self.forwarded.is_pending(&id) {
            return self.forwarded.join(&id, [up]);
        }
        // §6.3 control traffic, before policy: link controls for this realm are taken here, and
        // link controls leaving it are admitted independently of message policy (§11.5 caps
        // them where they are made). Passport redemptions are not built yet: `_passport` is
        // answered as a reserved path.
        if m.kind.as_deref() == Some(PASSPORT_TYPE) && to.segments() == [PASSPORT_ENDPOINT] {
            if to.realm() == &self.config.realm {
                return self.redeem(now, up, from, m);
            }
            // §16.5: redemptions cross policy, like offers; the issuer limits them (§12.5).
            let item = Spooled {
                id: id.clone(),
                ts,
                ttl,
                msg: m,
                bytes: 0,
            };
            return self.deliver_remote(now, up, to, item);
        }
        if m.kind.as_deref() == Some(link::CONTROL_TYPE) {
            if to.realm() == &self.config.realm {
                return self.link_control(now, up, m);
            }
            let item = Spooled {
                id: id.clone(),
                ts,
                ttl,
                msg: m,
                bytes: 0,
            };
            return self.deliver_remote(now, up, to, item);
        }
        // §6.4 policy: this realm's own, whether the message leaves it or arrives (§10.2).
        let (links, replies) = (&self.links, &self.replies);
        // §11.3: the newest decisive link between the two; a one-way link lets its far end answer
        // inside the reply window.
        let link_decision = |f: &Address, t: &Address| {
            let d = links.decide(now, f, t);
            let allow = d.resolve(|| replies.in_reply_window(now, f, t, LINK_REPLY_WINDOW))?;
            let reason = d.deny_reason(f);
            Some(if allow {
                policy::LinkDecision::allow(reason)
            } else {
                policy::LinkDecision::deny(reason)
            })
        };
        let decision = self
            .config
            .policy
            .check(now, from, to, &link_decision, replies);
        if !decision.allowed {
            let mut ack = Ack::with_code(&id, AckStatus::Failed, AckCode::Refused);
            ack.reason = Some(decision.reason());
            return self.answer(now, &up, &m, ack, Hop::Local);
        }
        let item = Spooled {
            id: id.clone(),
            ts,
            ttl,
            msg: m,
            bytes: 0,
        };
        if to.realm() == &self.config.realm && to.realm().port().is_none() {
            self.deliver_local(now, up, to, item);
        } else {
            self.deliver_remote(now, up, to, item);
        }
    }

    /// §6.4 local delivery.
    fn deliver_local(&mut self, now: Timestamp, up: Upstream, to: &Address, item: Spooled<Msg>) {
        let id = item.id.clone();
        if to.is_namespace() {
            let refusal = (AckStatus::Failed, AckCode::NamespaceNotEndpoint);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        if to.segments() == [RESOLVER] {
            self.passed(now, &item.msg);
            let ack = Ack::new(id, AckStatus::Delivered);
            return self.answer(now, &up, &item.msg, ack, Hop::Local);
        }
        if to.segments() == [PASSPORT_ENDPOINT] {
            // §12.5: reserved and handled by the server; any other type is no_such_path.
            let refusal = (AckStatus::Failed, AckCode::NoSuchPath);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        let client = self.binds.select(to);
        if to.is_reserved() && client.is_none() {
            let refusal = (AckStatus::Failed, AckCode::NoSuchPath);
            return self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
        let key = to.first_segment().to_string();
        if let Some(client) = client {
            if self.forwarded.pending_len() < MAX_PENDING {
                return self.forward(now, client, alloc::vec![up], key, item);
            }
        } else if !self
            .config
            .known_namespaces
            .iter()
            .any(|ns| ns.segments().first() == Some(&key))
        {
            let mut ack = Ack::with_code(id, AckStatus::Failed, AckCode::NoSuchPath);
            ack.by = Some(format!("airc://{}/{RESOLVER}", self.config.realm));
            return self.answer(now, &up, &item.msg, ack, Hop::Local);
        }
        self.queue(now, &up, &key, item, AckCode::EndpointOffline);
    }

    /// §6.5 remote delivery, as far as it goes without the peer face: the message is checked,
    /// stamped and signed, then held for the authority until a link to it comes up.
    fn deliver_remote(
        &mut self,
        now: Timestamp,
        up: Upstream,
        to: &Address,
        mut item: Spooled<Msg>,
    ) {
        let realm = self.config.realm.to_string();
        let via = item.msg.via.get_or_insert_with(Vec::new);
        if let Err(code) = stamp_via(via, &realm) {
            return self.answer_code(now, &up, &item.msg, (AckStatus::Failed, code), Hop::Local);
        }
        if self.config.signing_key.is_some() && item.msg.sigstrings().is_empty() {
            let m = &item.msg;
            let signed = Signed {
                id: &m.id,
                from: &m.from,
                to: &m.to,
                ts_ms: item.ts.as_millis(),
                kind: m.kind.as_deref(),
                re: m.re.as_deref(),
                body: &m.body,
            };
            if let Some(sig) = self.sign(signed.canonical().as_bytes()) {
                item.msg.set_sigstrings(&[&sig.to_string()]);
            }
        }
        let realm = to.realm().clone();
        if self.originated.contains_key(&item.id) {
            self.out.push_back(Output::Persist(Record::Spooled {
                key: remote_key(&realm),
                msg: Box::new(item.msg.clone()),
            }));
        }
        if self.forwarded.pending_len() + self.awaiting.len() >= MAX_PENDING {
            return self.hold_for(now, up, &realm, item);
        }
        match self.link_to(&realm) {
            Some(link) => {
                let up = alloc::vec![up];
                self.forward(now, link, up, remote_key(&realm), item);
            }
            None => {
                // Dial, and give the link one ack timeout to come up before spooling.
                if self
                    .timers
                    .deadline_of(&Timer::Dial(realm.clone()))
                    .is_none()
                {
                    let at = now + self.config.ack_timeout;
                    self.timers.schedule(at, Timer::Dial(realm.clone()));
                }
                self.awaiting.push(&realm, up, item);
                self.connect(now, &realm);
            }
        }
    }

    /// No link to `realm` may be waited for: spool the message under it and ack `queued
    /// authority_unreachable`.
    fn hold_for(&mut self, now: Timestamp, up: Upstream, realm: &Authority, item: Spooled<Msg>) {
        // Messages already waiting for the realm are older: they go into the spool first, so
        // that nothing of the key is ever spooled ahead of one still waiting (see `link_up`).
        self.no_link(now, realm);
        let key = remote_key(realm);
        if self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable) {
            self.connect(now, realm);
        }
    }

    /// Spools a message under `key` and acks it `queued` with `code`, or, when the spool cannot
    /// hold it, refuses it (`queued` always means a copy is held). Whether it was held.
    fn queue(
        &mut self,
        now: Timestamp,
        up: &Upstream,
        key: &str,
        item: Spooled<Msg>,
        code: AckCode,
    ) -> bool {
        let msg = item.msg.clone();
        match self.hold(now, key, item) {
            Ok(()) => {
                // The spool holds it now, under the same record.
                self.originated.remove(&msg.id);
                self.passed(now, &msg);
                self.answer_code(now, up, &msg, (AckStatus::Queued, code), Hop::Spool);
                true
            }
            Err(full) => {
                self.spool_full(now, up, &msg, full);
                false
            }
        }
    }

    /// An authenticated link to `realm` came up: its backlog goes out, then what waited for it.
    ///
    /// That is the order they were accepted in (§7.4: order per key): every spooled message of
    /// the key is older than every waiting one. A message waits only while no authenticated link
    /// to the realm is up, and every link that comes up empties the wait, so what the spool got
    /// back from a link (requeued when it dropped or failed `link:`, spooled in flight on a
    /// timeout) was sent before the first waiting message came; restored records came before
    /// anything waited; and whatever else spools under the key empties the wait into the spool
    /// first ([`Self::no_link`], [`Self::hold_for`]).
    fn link_up(&mut self, now: Timestamp, conn: ConnId, realm: &Authority) {
        self.timers.cancel(&Timer::Dial(realm.clone()));
        let key = remote_key(realm);
        self.flush(now, &key);
        for (up, item) in self.awaiting.take(realm) {
            // A flush leaves a backlog only when `MAX_PENDING` is reached, and nothing is acked
            // meanwhile: then every waiting message joins the backlog, behind it, in order.
            if self.forwarded.pending_len() < MAX_PENDING {
                self.forward(now, conn, alloc::vec![up], key.clone(), item);
            } else {
                self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable);
            }
        }
    }

    /// Spools what waits for `realm`, in order, each acked `queued authority_unreachable`: no
    /// link to it came up in time, every dial failed, or nothing more may wait.
    /// The periodic flush dials again; dialling here would retry a failed realm at once.
    fn no_link(&mut self, now: Timestamp, realm: &Authority) {
        self.timers.cancel(&Timer::Dial(realm.clone()));
        let key = remote_key(realm);
        for (up, item) in self.awaiting.take(realm) {
            self.queue(now, &up, &key, item, AckCode::AuthorityUnreachable);
        }
    }

    /// The spool cannot hold the message, so it cannot be `queued`: refuse it, `failed refused`
    /// with a reason that begins `spool full` and says which bound ([`SpoolFull`]).
    fn spool_full(&mut self, now: Timestamp, up: &Upstream, m: &Msg, full: SpoolFull) {
        self.stats.spool_full += 1;
        let mut ack = Ack::with_code(&m.id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some(full.to_string());
        self.answer(now, up, m, ack, Hop::Local);
    }

    /// A message refused before routing (§6.2): its one ack, `failed` with `code`.
    fn refuse(&mut self, now: Timestamp, conn: ConnId, m: &Msg, code: AckCode) {
        let refusal = (AckStatus::Failed, code);
        self.answer_code(now, &Upstream::Conn(conn), m, refusal, Hop::Local);
    }

    fn forward(
        &mut self,
        now: Timestamp,
        hop: ConnId,
        ups: Vec<Upstream>,
        key: String,
        item: Spooled<Msg>,
    ) {
        // A copy already on its way (one that waited for a dial beside it, or came back from the
        // spool): wait with it for its answer, as `route` has a copy do.
        if self.forwarded.is_pending(&item.id) {
            return self.forwarded.join(&item.id, ups);
        }
        let bytes = framing::encode(&Frame::Msg(item.msg.clone()));
        if bytes.len() > framing::MAX_FRAME_BYTES {
            return self.too_large_to_forward(now, hop, ups, &item.msg, bytes.len());
        }
        self.send_bytes(hop, bytes);
        self.timers.schedule(
            now + self.config.ack_timeout,
            Timer::Ack(hop, item.id.clone()),
        );
        self.forwarded.insert(Pending::new(hop, ups, item, key));
    }

    /// §3.2: no frame over the limit is written. A `msg` that fit when it came can outgrow it on
    /// its way (its addresses written in full, `via`, the realm's signature), and then it can
    /// never be forwarded: it fails here, `refused` with the reason, rather than have the next
    /// hop close its connection over it (which would spool it, to fail the same way again).
    fn too_large_to_forward(
        &mut self,
        now: Timestamp,
        hop: ConnId,
        ups: Vec<Upstream>,
        m: &Msg,
        len: usize,
    ) {
        self.stats.too_large_to_forward += 1;
        if ups.iter().any(|u| matches!(u, Upstream::Spool(_))) {
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: m.id.clone() }));
        }
        let mut ack = Ack::with_code(&m.id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some(format!(
            "too large to forward: {len} bytes, over {}",
            framing::MAX_FRAME_BYTES
        ));
        let face = self.conns.get(&hop).map_or(Face::Client, |c| c.face);
        self.answer(now, &Upstream::Nobody, m, ack.clone(), Hop::on(face));
        for u in &ups {
            self.answer_quietly(now, u, ack.clone());
        }
    }

    /// An ack from a next hop (§6.6).
    fn downstream_ack(&mut self, now: Timestamp, conn: ConnId, ack: Ack) {
        let Some(p) = self.forwarded.take(conn, &ack.id) else {
            // A late ack for a message that timed out and was spooled in flight: settled.
            if self.forwarded.is_in_flight_on(&ack.id, conn) && self.spool.settle(&ack.id) {
                self.forwarded.land(&ack.id);
                self.stats.settled += 1;
                self.out
                    .push_back(Output::Forget(RecordKey::Spooled { id: ack.id }));
            } else {
                self.stats.stray_acks += 1;
            }
            return;
        };
        self.timers.cancel(&Timer::Ack(conn, ack.id.clone()));
        let face = self.conns.get(&conn).map_or(Face::Client, |c| c.face);
        let link_dropped = ack.status == AckStatus::Failed
            && ack
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("link:"));
        if link_dropped {
            return self.requeue(now, p, dropped_hop_code(face));
        }
        let from_spool = p.is_from_spool();
        if ack.status != AckStatus::Failed && !from_spool {
            self.passed(now, &p.item.msg);
        }
        // Whatever the answer, the next hop has it or refused it: a copy this server wrote is
        // done with (a `queued` there is held there, not here).
        self.forget_originated(&p.item.msg);
        if from_spool {
            // Whatever the answer, the spool's copy has been dealt with.
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: ack.id.clone() }));
        }
        // Relayed unchanged: status, code, by, reason (§6.6); one event for the message.
        self.answer(
            now,
            &Upstream::Nobody,
            &p.item.msg,
            ack.clone(),
            Hop::on(face),
        );
        for u in p.upstreams() {
            self.answer_quietly(now, u, ack.clone());
        }
    }

    /// [`HELLO_TIMEOUT`] after it opened: a connection still in its opening exchange is closed,
    /// unless its hello waits for its realm's keys.
    fn hello_check(&mut self, conn: ConnId) {
        let stalled = self.conns.get(&conn).is_some_and(|c| {
            matches!(c.state, State::AwaitHello | State::AwaitWelcome) && c.parked.is_none()
        });
        if stalled {
            self.stats.hello_timeouts += 1;
            self.close(conn);
        }
    }

    /// §8.4: a dialled link with no frame either way for [`LINK_IDLE`] is closed, unless a
    /// message on it still waits for its ack; otherwise the check moves to the new deadline.
    fn idle_check(&mut self, now: Timestamp, conn: ConnId) {
        let waiting = self.forwarded.waits_on(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let due = c.last_traffic + LINK_IDLE;
        if c.state == State::Closing {
            return;
        }
        if due > now || waiting {
            let at = if waiting { now + LINK_IDLE } else { due };
            self.timers.schedule(at, Timer::Idle(conn));
            return;
        }
        self.stats.idle_links += 1;
        self.close(conn);
    }

    fn ack_timeout(&mut self, now: Timestamp, hop: ConnId, id: String) {
        let Some(p) = self.forwarded.take(hop, &id) else {
            return;
        };
        let from_spool = p.is_from_spool();
        let (item, key, ups) = p.into_parts();
        if !from_spool {
            let record = Record::Spooled {
                key: key.clone(),
                msg: Box::new(item.msg.clone()),
            };
            self.out.push_back(Output::Persist(record));
            self.passed(now, &item.msg);
        }
        let msg = item.msg.clone();
        self.spool.push_in_flight(&key, weighed(item));
        self.originated.remove(&id);
        self.forwarded.fly(id.clone(), hop);
        self.arm_flush(now);
        let queued = Ack::with_code(&id, AckStatus::Queued, AckCode::NoAck);
        self.answer(now, &Upstream::Nobody, &msg, queued.clone(), Hop::Spool);
        for u in &ups {
            self.answer_quietly(now, u, queued.clone());
        }
    }

    /// Attempts delivery of one key's backlog (§7.4): in order, dropping what expired or settled,
    /// never resending what is in flight, and keeping what still cannot be delivered.
    fn flush(&mut self, now: Timestamp, key: &str) {
        let f = self.spool.flush(now, key);
        self.stats.expired += f.expired.len() as u64;
        for gone in f.expired.iter().chain(&f.settled) {
            // A message in flight that expired waits for no late ack any more.
            self.forwarded.land(&gone.id);
            self.out.push_back(Output::Forget(RecordKey::Spooled {
                id: gone.id.clone(),
            }));
        }
        let remote = key
            .strip_prefix("//")
            .and_then(|a| Authority::parse(a).ok());
        // A remote key's items all go to one realm, so its link is looked up once.
        let link = remote.as_ref().and_then(|realm| self.link_to(realm));
        let mut undelivered = Vec::new();
        for item in f.deliver {
            let hop = match &remote {
                Some(_) => link,
                None => Address::parse(&item.msg.to)
                    .ok()
                    .filter(|to| to.realm() == &self.config.realm)
                    .and_then(|to| self.local_hop(&to)),
            };
            match hop {
                Some(hop) if self.forwarded.pending_len() < MAX_PENDING => {
                    let to = if remote.is_some() {
                        Hop::Peer
                    } else {
                        Hop::Client
                    };
                    // An event can close the hop itself, a subscriber past its budget (§13):
                    // nothing goes to a connection being closed, so the message waits. Once the
                    // hop is closing, the rest of the key waits without an event.
                    if self.is_closing(hop) {
                        undelivered.push(item);
                        continue;
                    }
                    let e = msg_event(now, audit::Kind::MsgFlushed, &item.msg, to);
                    self.emit(now, e);
                    if self.is_closing(hop) {
                        undelivered.push(item);
                        continue;
                    }
                    let up = alloc::vec![Upstream::Spool(key.to_string())];
                    self.forward(now, hop, up, key.to_string(), item);
                }
                _ => undelivered.push(item),
            }
        }
        if !undelivered.is_empty() {
            if let Some(realm) = &remote {
                self.connect(now, realm);
            }
            self.spool.requeue(key, undelivered);
        }
    }

    fn flush_all(&mut self, now: Timestamp) {
        let keys: Vec<String> = self.spool.keys().map(ToString::to_string).collect();
        for key in keys {
            self.flush(now, &key);
        }
        if !self.spool.is_empty() {
            self.arm_flush(now);
        }
    }

    fn restore(&mut self, now: Timestamp, record: Record) {
        match record {
            Record::Spooled { key, msg } => {
                let ts = signing::ts_ms(msg.ts).map_or(Timestamp::ZERO, Timestamp::from_millis);
                let ttl = msg.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
                let item = Spooled {
                    id: msg.id.clone(),
                    ts,
                    ttl,
                    msg: *msg,
                    bytes: 0,
                };
                self.spool.restore(&key, weighed(item));
                self.arm_flush(now);
            }
            Record::Link { record } => {
                if let Ok(l) = Link::from_value(&serde_json::Value::Object(*record)) {
                    // A record that no longer fits (the table is full) stays on disk; refusing
                    // it here only means its link decides nothing until there is room.
                    let _ = self.links.restore(l);
                }
            }
            Record::Passport { record } => {
                if let Some(p) = PassportRecord::from_value(&serde_json::Value::Object(*record)) {
                    // As for links: a record that no longer fits stays on disk, unredeemable.
                    let _ = self.passports.restore(p);
                }
            }
            // Append-only: nothing in the machine is rebuilt from the log.
            Record::Audit { .. } => {}
            Record::Seen { id, until } => {
                if until > now {
                    self.seen
                        .record(until.saturating_sub(spool::DUPLICATE_WINDOW), &id);
                }
            }
            Record::ReplyPair { from, to, at } => {
                // A key is an address's canonical form, so it parses back to the same key; one
                // that does not was not written by this machine and decides nothing.
                if let (Ok(f), Ok(t)) = (Address::parse(&from), Address::parse(&to))
                    && now.saturating_duration_since(at) <= policy::MAX_REPLY_WINDOW
                {
                    // Full (more pairs stored than the table holds): the oldest goes, as live.
                    let _ = self.replies.note(at, &f, &t);
                }
            }
        }
    }
}

/// Whether bind pattern `p` lies inside namespace `ns` (§4.3, §5): its literal prefix is the
/// namespace and something follows, or it names the namespace itself with a trailing `/`.
fn pattern_inside(p: &Pattern, ns: &Namespace) -> bool {
    let segs = p.segments();
    let n = ns.segments();
    let prefix = segs.len() >= n.len()
        && segs
            .iter()
            .zip(n)
            .all(|(s, ns)| matches!(s, PatternSegment::Literal(l) if l == ns));
    prefix && (segs.len() > n.len() || p.is_namespace())
}

/// §6.5's hop check, then the stamp: `routing_loop` when `realm` is already in `via` or `via`
/// holds [`MAX_VIA`] hops; otherwise `realm` is appended.
///
/// With no transit (§6.2: a peer's message must be for this realm, so it is never delivered
/// remotely) and a client's `via` cleared, every message reaching it has an empty `via`: the
/// check guards the rule for a `via` that arrives some other way, and is proved by the unit
/// test below rather than by traffic.
fn stamp_via(via: &mut Vec<String>, realm: &str) -> Result<(), AckCode> {
    if via.iter().any(|r| r == realm) || via.len() >= MAX_VIA {
        return Err(AckCode::RoutingLoop);
    }
    via.push(realm.to_string());
    Ok(())
}

/// The code of a message queued again because its next hop went before acking it: its
/// connection closed, or it answered `failed` with a reason beginning `link:` (§6.6). A client
/// hop is its endpoint's (§6.4: offline), a peer hop its authority's (§6.5: unreachable).
fn dropped_hop_code(face: Face) -> AckCode {
    match face {
        Face::Client => AckCode::EndpointOffline,
        Face::Peer => AckCode::AuthorityUnreachable,
    }
}

/// The spool key of a remote destination (§7.1): its authority, written `//authority` so that it
/// can never collide with a local key, which is a bare path segment.
fn remote_key(authority: &Authority) -> String {
    format!("//{authority}")
}

fn status_text(status: AckStatus) -> &'static str {
    match status {
        AckStatus::Delivered => "delivered",
        AckStatus::Queued => "queued",
        AckStatus::Failed => "failed",
    }
}

fn namespace_text(ns: &Namespace) -> String {
    ns.segments().join("/")
}

impl<R: CryptoRng> Machine for Server<R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        self.clock = now;
        // Before the input, which may want the room a lapsed record holds (`MAX_LINKS`).
        self.forget_lapsed_links(now);
        match input {
            Input::Opened {
                conn,
                face,
                namespaces,
                source,
            } => {
                self.opened(conn, face, namespaces, source, true);
            }
            Input::Unidentified { conn } => self.unidentified(conn),
            Input::Received { conn, bytes } => self.received(now, conn, &bytes),
            Input::Closed { conn } => self.closed(now, conn),
            Input::Restore(record) => self.restore(now, record),
            Input::Dialled { conn, authority } => self.dialled(now, conn, authority),
            Input::DialFailed { authority } => self.dial_failed(now, &authority),
            Input::Resolved { name, kind, answer } => self.resolved(now, &name, kind, answer),
            Input::Administrator { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.admin = true;
                }
            }
            Input::Keys { realm, keys } => {
                self.keys.insert(realm.clone(), keys);
                self.unpark(now, &realm);
            }
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        self.timers.next_deadline().map(|at| {
            Wakeup::new(
                at,
                "ack timeout, spool flush, dial, DNS timeout or idle link",
            )
        })
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.clock = now;
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Ack(hop, id) => self.ack_timeout(now, hop, id),
                Timer::Flush => self.flush_all(now),
                Timer::Dial(realm) => self.no_link(now, &realm),
                Timer::Resolve(kind, name) => {
                    self.resolved(now, &name, kind, discovery::Answer::Nothing)
                }
                Timer::Idle(conn) => self.idle_check(now, conn),
                Timer::Hello(conn) => self.hello_check(conn),
            }
        }
        self.seen.prune(now);
        self.cache.prune(now);
        self.replies.prune(now, self.reply_retention());
        self.forget_lapsed_links(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_via_refuses_this_realm_or_eight_hops_and_appends_otherwise() {
        let hops = |n: usize| -> Vec<String> { (0..n).map(|i| format!("r{i}.example")).collect() };
        let mut via = Vec::new();
        assert_eq!(stamp_via(&mut via, "example.com"), Ok(()));
        assert_eq!(via, ["example.com"]);
        // Seven hops before this one: the eighth is allowed.
        let mut via = hops(7);
        assert_eq!(stamp_via(&mut via, "example.com"), Ok(()));
        assert_eq!(via.len(), MAX_VIA);
        // Eight already: the hop limit.
        let mut via = hops(8);
        assert_eq!(
            stamp_via(&mut via, "example.com"),
            Err(AckCode::RoutingLoop)
        );
        assert_eq!(via, hops(8), "unchanged when refused");
        // This realm seen before: a loop, however short.
        let mut via = alloc::vec!["a.example".to_string(), "example.com".to_string()];
        assert_eq!(
            stamp_via(&mut via, "example.com"),
            Err(AckCode::RoutingLoop)
        );
    }
}
