//! How a realm server is set up ([`ServerConfig`]: the realm, its key, its namespaces, timings,
//! discovery's static tables, policy, links and passports) and what it counts ([`Stats`]: every
//! frame it refused or ignored, every connection it turned away).

use crate::airc::address::{Authority, Namespace};
use crate::airc::discovery::Endpoint;
use crate::airc::link::LinkConfig;
use crate::airc::passport::book::PassportConfig;
use crate::airc::policy::Policy;
use crate::airc::spool::{ACK_TIMEOUT, FLUSH_INTERVAL};
use crate::crypto::Ed25519Seed;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

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
    /// ([`MAX_CONNECTIONS_PER_SOURCE`](super::MAX_CONNECTIONS_PER_SOURCE)).
    pub refused_connections: u64,
    /// Of [`Stats::refused_connections`], those refused because their source held
    /// [`MAX_CONNECTIONS_PER_SOURCE`](super::MAX_CONNECTIONS_PER_SOURCE).
    pub source_refusals: u64,
    /// Connections closed before their hello to make room for a newer one
    /// ([`MAX_WAITING_HELLOS`](super::MAX_WAITING_HELLOS)).
    pub hello_evictions: u64,
    /// Client-face connections refused because the transport proved no identity for them
    /// ([`Input::Unidentified`](super::Input::Unidentified)).
    pub unidentified_connections: u64,
    /// Audit events written (§13).
    pub events: u64,
    /// Subscribers closed for being handed more than [`audit::SUBSCRIBER_RATE`](crate::airc::audit::SUBSCRIBER_RATE).
    pub slow_subscribers: u64,
    /// Dialled links closed after [`LINK_IDLE`](super::LINK_IDLE) without traffic (§8.4).
    pub idle_links: u64,
    /// Connections closed for not finishing their hello within [`HELLO_TIMEOUT`](super::HELLO_TIMEOUT).
    pub hello_timeouts: u64,
    /// Peer hellos refused because their signed nonce was already used ([`MAX_HELLO_NONCES`](super::MAX_HELLO_NONCES)).
    pub replayed_hellos: u64,
    /// Messages failed because, written for their next hop, they came out over the frame limit
    /// (§3.2).
    pub too_large_to_forward: u64,
    /// Connections closed for sending more than [`MAX_PARKED_BYTES`](super::MAX_PARKED_BYTES) while their first frame
    /// waited for keys.
    pub parked_overflows: u64,
    /// Messages refused `failed refused` because the spool could not hold them (a count or byte
    /// bound of [`spool::SpoolLimits`](crate::airc::spool::SpoolLimits)).
    pub spool_full: u64,
}
