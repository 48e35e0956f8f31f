//! The AIRC realm server as one sans-IO machine (AIRC §3–§13).
//!
//! One [`Server`] holds every connection of a realm, on both faces. The host hands it each
//! connection with the namespaces it derived from the transport (§5: the peer uid of a Unix
//! socket, the owner of a loopback TCP socket), the bytes that arrive, and the time; the server
//! answers with bytes to send, connections to close, and records to persist or forget, strictly
//! in order ([`Output`]), so that a persist always comes out before the ack that claims it.
//!
//! The host also does the I/O the machine cannot: it answers DNS questions
//! ([`Output::Resolve`] → [`Input::Resolved`]), dials the endpoints discovery chose
//! ([`Output::Connect`] → [`Input::Dialled`] or [`Input::DialFailed`]), and stores records.
//!
//! This file is the core: the machine's state, its inputs, outputs and timers, and the dispatch
//! of each frame by the connection's state and face (§3.3: `hello` first, §4.1 `welcome`,
//! §4.8 `ping`/`pong` and `error`; a frame of a type this face does not take is
//! `unexpected_frame`). Each concern is a file under `server/`, named for the spec's noun:
//!
//! | file | AIRC sections | what it holds |
//! | --- | --- | --- |
//! | `config.rs` | §15 | [`ServerConfig`] and the counters ([`Stats`]) |
//! | `conn.rs` | §3, §4.1, §4.8, §5 | connections from open to gone: faces, slots, the hello, close |
//! | `peer_face.rs` | §8.4, §9.4 | peer links: signed hellos and welcomes, nonces, idle links |
//! | [`locate`] | §8.1–§8.2 | where a realm is dialled and which keys verify it |
//! | `binds.rs` | §2.6, §4.3, §5 | `bind` → `bound` inside the connection's namespaces |
//! | `route.rs` | §6.1–§6.4, §10 | the routing pipeline, policy, local delivery |
//! | `remote.rs` | §6.5, §7.4 | remote delivery: `via`, signing, a link or the spool |
//! | `acks.rs` | §4.4, §6.6 | one answer per message, the ack timeout, a hop gone |
//! | `forwarded.rs` | §6.5–§6.6 | messages waiting for their next hop's ack |
//! | `spool_flush.rs` | §7 | holding, refusing and flushing the spool |
//! | `records.rs` | §7.1, §7.3, §10.3, §11.1, §12.1, §13 | what is persisted, and the restore |
//! | `links.rs` | §4.6, §11 | the `link` frame and link control messages |
//! | `passports.rs` | §4.7, §12 | the `passport` frame and redemptions |
//! | `events.rs` | §4.9, §4.10, §13 | the audit stream, `subscribe` and `stat` |

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use rand_core::CryptoRng;

use super::address::{Authority, Namespace};
use super::audit::Audit;
use super::bind::BindTable;
use super::discovery;
use super::discovery::{DiscoveryCache, Endpoint, RecordType};
use super::frame::{ErrorCode, Frame, Msg};
use super::link::LinkTable;
use super::passport::book::PassportBook;
use super::policy::ReplyWindow;
use super::spool::{SeenIds, Spool};
use crate::core::bounded::ExpiringSet;
use crate::core::timer::TimerQueue;
use crate::core::{ConnId, Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, sigstring};

mod acks;
mod binds;
mod config;
mod conn;
mod events;
mod forwarded;
mod links;
pub mod locate;
mod passports;
mod peer_face;
mod records;
mod remote;
mod route;
mod spool_flush;

pub use acks::MAX_PENDING;
pub use config::{ServerConfig, Stats};
use conn::{Conn, SourceKey, State};
pub use conn::{
    Face, HELLO_TIMEOUT, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_SOURCE, MAX_WAITING_HELLOS, Source,
};
use forwarded::Forwarded;
pub use links::{GRANT_DIRECTION, LINK_REPLY_WINDOW};
use locate::{Dials, KeyWaits};
use peer_face::PeerLinks;
pub use peer_face::{HELLO_WINDOW, LINK_IDLE, MAX_HELLO_NONCES, MAX_PARKED_BYTES, NONCE_BYTES};
pub use records::{Record, RecordKey};
use remote::Awaiting;
pub use remote::MAX_VIA;

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

    /// Frame bytes held in the spool ([`spool::MAX_SPOOLED_BYTES`](super::spool::MAX_SPOOLED_BYTES)).
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

    /// A fresh message id for what the server itself sends.
    fn new_id(&mut self) -> String {
        super::frame::message_id(&mut self.rng)
    }
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
