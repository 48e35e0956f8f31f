//! The event kinds of meshstr §9 and their tag rules: a validator per kind that refuses with a
//! reason, the node descriptor (§2.2) built and checked, its NIP-13 proof of work, and the
//! heartbeat's endpoint digest (§3.3).
//!
//! Validators check what the text states: the required tags (one each, with a value), the shape
//! of every tag whose shape the text fixes, the content rule ("empty", "nip44 ciphertext",
//! "free"), and NIP-40 expiry where the kind carries it. Tags the text does not name are left
//! alone, as NIP-01 leaves them. Signature and id are [`crate::nostr::Event::verify`]'s, checked
//! first by [`check`].

use alloc::string::String;
use alloc::vec::Vec;
use alloc::{format, vec};
use serde_json::Value;

use super::keys::{
    AgreementKeyError, KeyKind, Service, did_nostr_key, node_profile, parse_agreement_key,
    parse_multikey,
};
use super::lower_hex;
use crate::crypto::CryptoProvider;
use crate::nostr::Event;
use crate::nostr::event::UnsignedEvent;

/// Kind 11801, node descriptor (replaceable).
pub const DESCRIPTOR: u16 = 11801;
/// Kind 11802, node revocation (replaceable).
pub const REVOCATION: u16 = 11802;
/// Kind 11803, compute offer (replaceable).
pub const COMPUTE_OFFER: u16 = 11803;
/// Kind 21801, node heartbeat (ephemeral).
pub const HEARTBEAT: u16 = 21801;
/// Kind 21802, diagnostic telemetry (ephemeral).
pub const TELEMETRY: u16 = 21802;
/// Kind 30801, peer grant envelope (addressable).
pub const GRANT: u16 = 30801;
/// Kind 30802, conformance report (addressable).
pub const REPORT: u16 = 30802;
/// Kind 30803, coverage claim (addressable).
pub const COVERAGE: u16 = 30803;
/// Kind 30810, compute ask (addressable).
pub const COMPUTE_ASK: u16 = 30810;
/// Kind 30811, job receipt (addressable).
pub const JOB_RECEIPT: u16 = 30811;

/// Every kind meshstr defines (§9.1).
pub const KINDS: [u16; 10] = [
    DESCRIPTOR,
    REVOCATION,
    COMPUTE_OFFER,
    HEARTBEAT,
    TELEMETRY,
    GRANT,
    REPORT,
    COVERAGE,
    COMPUTE_ASK,
    JOB_RECEIPT,
];

/// A kind's class under NIP-01's ranges (§9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindClass {
    /// Any other kind.
    Regular,
    /// `10000 ≤ n < 20000` (and 0, 3).
    Replaceable,
    /// `20000 ≤ n < 30000`: never stored.
    Ephemeral,
    /// `30000 ≤ n < 40000`: replaceable per `d`.
    Addressable,
}

/// The class of `kind` (NIP-01: kinds 0 and 3 are replaceable too).
pub const fn kind_class(kind: u16) -> KindClass {
    match kind {
        0 | 3 | 10000..=19999 => KindClass::Replaceable,
        20000..=29999 => KindClass::Ephemeral,
        30000..=39999 => KindClass::Addressable,
        _ => KindClass::Regular,
    }
}

/// The node classes of §1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeClass {
    /// A phone or a laptop.
    Leaf,
    /// A VPS or a home server.
    Edge,
    /// A well-connected server.
    Anchor,
}

impl NodeClass {
    /// The class's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeClass::Leaf => "leaf",
            NodeClass::Edge => "edge",
            NodeClass::Anchor => "anchor",
        }
    }

    /// Parses a class name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Leaf, Self::Edge, Self::Anchor]
            .into_iter()
            .find(|c| c.as_str() == s)
    }

    /// The longest a descriptor may live (§2.2): 30 days for anchors and edges, 24 hours for
    /// leaves.
    pub const fn max_descriptor_lifetime_secs(self) -> u64 {
        match self {
            NodeClass::Leaf => 24 * 3600,
            NodeClass::Edge | NodeClass::Anchor => 30 * 24 * 3600,
        }
    }
}

/// The longest an anchor goes between heartbeats (§3.3: at least hourly).
pub const ANCHOR_HEARTBEAT_SECS: u64 = 3600;

/// The protocol name this implementation speaks (§10).
pub const PROTOCOL_NAME: &str = "meshstr/0-draft";

/// Where meshstr's protocol identifiers live: `c` values and PIURIs are this prefix plus
/// `peering/1.0` and the like, compared byte for byte and never fetched (§4).
pub const PIURI_BASE: &str = "https://meshstr.org/";

/// meshstr's six protocols, as their identifiers' tails.
pub const PROTOCOLS: [&str; 6] = [
    "peering/1.0",
    "sync/1.0",
    "budget/1.0",
    "complaint/1.0",
    "compute/1.0",
    "standing/1.0",
];

/// The protocols every node MUST declare (§2.2).
pub const REQUIRED_PROTOCOLS: [&str; 2] = ["peering/1.0", "budget/1.0"];

/// The NIP-13 difficulty a descriptor needs by default (§3: proof of work prices bulk identity
/// creation; the value is not in the text, docs/decisions.md): 20 bits, the example's target.
pub const DESCRIPTOR_POW_BITS: u32 = 20;

/// The most tags of one name a meshstr event may carry where the text allows several (`c`,
/// `endpoint`, `key`, `evidence`, …), a bound against one event holding a million (not in the
/// text, docs/decisions.md).
pub const MAX_REPEATED_TAGS: usize = 64;

/// The longest tag value read, in bytes (not in the text, docs/decisions.md).
pub const MAX_TAG_VALUE_BYTES: usize = 4096;

/// Why an event was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not one of meshstr's kinds (or not the kind the caller asked for).
    WrongKind,
    /// The id or the signature does not verify.
    BadSignature,
    /// A required tag is absent.
    MissingTag(&'static str),
    /// A tag that may appear once appears more than once.
    DuplicateTag(&'static str),
    /// A tag whose value is missing or of the wrong shape.
    BadTag(&'static str),
    /// More than [`MAX_REPEATED_TAGS`] of one tag, or a value over [`MAX_TAG_VALUE_BYTES`].
    TooLarge,
    /// The content breaks the kind's rule (not empty where it must be, empty ciphertext).
    BadContent,
    /// Past its NIP-40 expiration.
    Expired,
    /// A descriptor living longer than its class allows.
    LifetimeTooLong,
    /// A descriptor not declaring `peering/1.0` and `budget/1.0`.
    MissingProtocol(&'static str),
    /// A descriptor with less proof of work than asked for, or committing to less.
    NotEnoughWork,
    /// A heartbeat by a leaf (leaves MUST NOT publish one).
    LeafHeartbeat,
    /// A report whose outcome is not adverse (`S1`..`S4`).
    NotAdverse,
    /// A descriptor's agreement key is a well-formed `fec01` multikey but not an X25519 key
    /// anyone can agree a secret with (§2.1, [`super::keys::check_agreement_key`]).
    BadAgreementKey(AgreementKeyError),
}

/// All tags named `name`.
fn tags<'a>(e: &'a Event, name: &'a str) -> impl Iterator<Item = &'a [String]> + 'a {
    e.tags
        .iter()
        .filter(move |t| t.first().is_some_and(|n| n == name))
        .map(Vec::as_slice)
}

/// The single tag `name` with a value, or why not.
fn one<'a>(e: &'a Event, name: &'static str) -> Result<&'a [String], Refusal> {
    let mut it = tags(e, name);
    let t = it.next().ok_or(Refusal::MissingTag(name))?;
    if it.next().is_some() {
        return Err(Refusal::DuplicateTag(name));
    }
    if t.len() < 2 {
        return Err(Refusal::BadTag(name));
    }
    Ok(t)
}

/// The single optional tag `name`.
fn at_most_one<'a>(e: &'a Event, name: &'static str) -> Result<Option<&'a [String]>, Refusal> {
    match one(e, name) {
        Ok(t) => Ok(Some(t)),
        Err(Refusal::MissingTag(_)) => Ok(None),
        Err(r) => Err(r),
    }
}

fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

fn hex64(s: &str) -> bool {
    lower_hex::<32>(s).is_some()
}

fn require(e: &Event, names: &[&'static str]) -> Result<(), Refusal> {
    for n in names {
        one(e, n)?;
    }
    Ok(())
}

fn bounded(e: &Event) -> Result<(), Refusal> {
    if e.tags
        .iter()
        .flatten()
        .any(|v| v.len() > MAX_TAG_VALUE_BYTES)
    {
        return Err(Refusal::TooLarge);
    }
    for n in [
        "c", "endpoint", "key", "evidence", "mediator", "nips", "metric",
    ] {
        if tags(e, n).count() > MAX_REPEATED_TAGS {
            return Err(Refusal::TooLarge);
        }
    }
    Ok(())
}

/// The `expiration` value, required, not yet passed at `now_secs`.
fn live_expiration(e: &Event, now_secs: u64) -> Result<u64, Refusal> {
    let t = one(e, "expiration")?;
    let at = decimal(&t[1]).ok_or(Refusal::BadTag("expiration"))?;
    if now_secs >= at {
        return Err(Refusal::Expired);
    }
    Ok(at)
}

/// The optional `expiration`, if present not yet passed.
fn optional_expiration(e: &Event, now_secs: u64) -> Result<(), Refusal> {
    if at_most_one(e, "expiration")?.is_some() {
        live_expiration(e, now_secs)?;
    }
    Ok(())
}

fn empty_content(e: &Event) -> Result<(), Refusal> {
    if e.content.is_empty() {
        Ok(())
    } else {
        Err(Refusal::BadContent)
    }
}

fn decimal_tag(e: &Event, name: &'static str) -> Result<u64, Refusal> {
    decimal(&one(e, name)?[1]).ok_or(Refusal::BadTag(name))
}

fn hex_tag(e: &Event, name: &'static str) -> Result<(), Refusal> {
    if hex64(&one(e, name)?[1]) {
        Ok(())
    } else {
        Err(Refusal::BadTag(name))
    }
}

/// Leading zero bits of an event id (NIP-13 difficulty).
pub fn pow_bits(id: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for b in id {
        if *b == 0 {
            bits += 8;
        } else {
            bits += b.leading_zeros();
            break;
        }
    }
    bits
}

/// A checked node descriptor (§2.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The node key.
    pub node: [u8; 32],
    /// The node's class.
    pub class: NodeClass,
    /// The protocol name (`meshstr/0-draft`).
    pub protocol: String,
    /// The schema digest it declares.
    pub digest: [u8; 32],
    /// Agreement keys with their advisory expiry (two while one rotates).
    pub agreement: Vec<([u8; 32], Option<u64>)>,
    /// The transport key, if any.
    pub transport: Option<[u8; 32]>,
    /// Endpoints: scheme, address, preference (low first).
    pub endpoints: Vec<(String, String, u32)>,
    /// The meshstr protocols declared in `c` tags (tails such as `peering/1.0`).
    pub protocols: Vec<String>,
    /// The other `c` values: capability hints.
    pub capabilities: Vec<String>,
    /// Mediators' node keys.
    pub mediators: Vec<[u8; 32]>,
    /// The NIP-40 expiration.
    pub expiration: u64,
    /// `created_at`.
    pub created_at: u64,
}

impl Descriptor {
    /// Whether the descriptor is live at `now_secs` (not yet expired).
    pub fn is_live(&self, now_secs: u64) -> bool {
        now_secs < self.expiration
    }

    /// Whether `key` is this node's transport key while the descriptor is live: the only way a
    /// transport key binds to a DID (§2.1). Any other key is an unknown node.
    pub fn binds_transport(&self, key: &[u8; 32], now_secs: u64) -> bool {
        self.is_live(now_secs) && self.transport.as_ref() == Some(key)
    }

    /// Whether the descriptor declares a meshstr protocol (`peering/1.0`, …).
    pub fn declares(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p == protocol)
    }

    /// The node profile a `did:nostr` resolver emits for this live descriptor (§2.3): the
    /// agreement key that expires last, the transport key, and a service per endpoint whose
    /// scheme names one (`wss`/`ws` a `NostrRelay`, `iroh` an `IrohNode`, `https` the
    /// `DIDCommMessaging` face, `blossom` a `BlossomServer`; other schemes such as `libp2p` list
    /// none), in preference order.
    pub fn profile(&self) -> Value {
        let agreement = self
            .agreement
            .iter()
            .max_by_key(|(_, exp)| exp.unwrap_or(u64::MAX))
            .map(|(k, _)| k);
        let mut endpoints = self.endpoints.clone();
        endpoints.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
        let services: Vec<Service> = endpoints
            .iter()
            .filter_map(|(scheme, address, _)| {
                let kind = match scheme.as_str() {
                    "wss" | "ws" => "NostrRelay",
                    "iroh" => "IrohNode",
                    "https" => "DIDCommMessaging",
                    "blossom" => "BlossomServer",
                    _ => return None,
                };
                Some(Service {
                    kind,
                    endpoint: address.clone(),
                })
            })
            .collect();
        node_profile(&self.node, agreement, self.transport.as_ref(), &services)
    }
}

/// Checks a node descriptor at `now_secs`, wanting at least `min_pow_bits` of NIP-13 work.
pub fn descriptor(e: &Event, now_secs: u64, min_pow_bits: u32) -> Result<Descriptor, Refusal> {
    if e.kind != DESCRIPTOR {
        return Err(Refusal::WrongKind);
    }
    bounded(e)?;
    let class = NodeClass::parse(&one(e, "class")?[1]).ok_or(Refusal::BadTag("class"))?;
    let p = one(e, "protocol")?;
    let digest = p
        .get(2)
        .and_then(|d| lower_hex::<32>(d))
        .ok_or(Refusal::BadTag("protocol"))?;
    if p[1].is_empty() {
        return Err(Refusal::BadTag("protocol"));
    }
    let expiration = live_expiration(e, now_secs)?;
    if expiration.saturating_sub(e.created_at) > class.max_descriptor_lifetime_secs() {
        return Err(Refusal::LifetimeTooLong);
    }
    let mut protocols = Vec::new();
    let mut capabilities = Vec::new();
    for t in tags(e, "c") {
        let v = t.get(1).ok_or(Refusal::BadTag("c"))?;
        if t.len() != 2 || v.is_empty() {
            return Err(Refusal::BadTag("c"));
        }
        match v.strip_prefix(PIURI_BASE) {
            Some(tail) => protocols.push(tail.into()),
            None => capabilities.push(v.clone()),
        }
    }
    if protocols.is_empty() && capabilities.is_empty() {
        return Err(Refusal::MissingTag("c"));
    }
    for r in REQUIRED_PROTOCOLS {
        if !protocols.iter().any(|p| p == r) {
            return Err(Refusal::MissingProtocol(r));
        }
    }
    let mut agreement = Vec::new();
    let mut transport = None;
    for t in tags(e, "key") {
        let (role, mk) = match t {
            [_, role, mk, ..] if t.len() <= 4 => (role.as_str(), mk.as_str()),
            _ => return Err(Refusal::BadTag("key")),
        };
        let expiry = match t.get(3) {
            None => None,
            Some(x) => Some(decimal(x).ok_or(Refusal::BadTag("key"))?),
        };
        match role {
            "agreement" => {
                let k = parse_agreement_key(mk).map_err(|e| match e {
                    Some(why) => Refusal::BadAgreementKey(why),
                    None => Refusal::BadTag("key"),
                })?;
                if agreement.len() == 2 {
                    return Err(Refusal::DuplicateTag("key"));
                }
                agreement.push((k, expiry));
            }
            "transport" => {
                let k = parse_multikey(KeyKind::Transport, mk).ok_or(Refusal::BadTag("key"))?;
                if transport.replace(k).is_some() {
                    return Err(Refusal::DuplicateTag("key"));
                }
            }
            _ => return Err(Refusal::BadTag("key")),
        }
    }
    let mut endpoints = Vec::new();
    for t in tags(e, "endpoint") {
        match t {
            [_, scheme, address, pref] if !scheme.is_empty() => {
                let pref = decimal(pref)
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or(Refusal::BadTag("endpoint"))?;
                endpoints.push((scheme.clone(), address.clone(), pref));
            }
            _ => return Err(Refusal::BadTag("endpoint")),
        }
    }
    let mut mediators = Vec::new();
    for t in tags(e, "mediator") {
        let k = t
            .get(1)
            .and_then(|d| did_nostr_key(d))
            .ok_or(Refusal::BadTag("mediator"))?;
        mediators.push(k);
    }
    if let Some(n) = at_most_one(e, "nonce")? {
        let committed = n
            .get(2)
            .and_then(|t| decimal(t))
            .ok_or(Refusal::BadTag("nonce"))?;
        if committed < u64::from(min_pow_bits) {
            return Err(Refusal::NotEnoughWork);
        }
    } else if min_pow_bits > 0 {
        return Err(Refusal::NotEnoughWork);
    }
    if pow_bits(&e.id) < min_pow_bits {
        return Err(Refusal::NotEnoughWork);
    }
    Ok(Descriptor {
        node: e.pubkey,
        class,
        protocol: p[1].clone(),
        digest,
        agreement,
        transport,
        endpoints,
        protocols,
        capabilities,
        mediators,
        expiration,
        created_at: e.created_at,
    })
}

/// Why a peering is declined (§2.2). Declining is not a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decline {
    /// The two nodes declare different schema digests (or protocol names): they do not half-speak.
    DigestMismatch,
    /// The descriptor, the `discover-features/2.0` answer and the propose's `protocols` disagree.
    BadDescriptor,
    /// The peer shares the digest but lacks a protocol the peering needs.
    UnsupportedProtocol,
}

impl Decline {
    /// The problem code sent with the decline (the digest mismatch has none in the text).
    pub const fn code(self) -> &'static str {
        match self {
            Decline::DigestMismatch => "DIGEST_MISMATCH",
            Decline::BadDescriptor => "BAD_DESCRIPTOR",
            Decline::UnsupportedProtocol => "UNSUPPORTED_PROTOCOL",
        }
    }

    /// Declining is never a finding.
    pub const fn is_finding(self) -> bool {
        false
    }
}

fn sorted_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = ids.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether to peer with `theirs` (§2.2): same protocol name and digest; its descriptor's
/// protocol declarations, its `discover-features/2.0` answer (`features`, when a channel exists)
/// and its propose's `protocols` (`proposed`, when it proposed) all the same set of identifiers,
/// compared byte for byte; and every protocol in `needed` declared.
pub fn peering_decision(
    ours: &Descriptor,
    theirs: &Descriptor,
    features: Option<&[String]>,
    proposed: Option<&[String]>,
    needed: &[&str],
) -> Result<(), Decline> {
    if ours.protocol != theirs.protocol || ours.digest != theirs.digest {
        return Err(Decline::DigestMismatch);
    }
    let full: Vec<String> = theirs
        .protocols
        .iter()
        .map(|p| format!("{PIURI_BASE}{p}"))
        .collect();
    let declared = sorted_ids(full.iter().map(String::as_str));
    for other in [features, proposed].into_iter().flatten() {
        let listed = sorted_ids(
            other
                .iter()
                .map(String::as_str)
                .filter(|id| id.starts_with(PIURI_BASE)),
        );
        if listed != declared {
            return Err(Decline::BadDescriptor);
        }
    }
    if needed.iter().any(|n| !theirs.declares(n)) {
        return Err(Decline::UnsupportedProtocol);
    }
    Ok(())
}

/// What a node puts in its descriptor; [`DescriptorSpec::tags`] writes the tags in the order of
/// the §2.2 example.
#[derive(Clone, Debug, Default)]
pub struct DescriptorSpec {
    /// The class.
    pub class: Option<NodeClass>,
    /// The schema digest.
    pub digest: [u8; 32],
    /// The software URL and version.
    pub software: Option<(String, String)>,
    /// The agreement key and its advisory expiry.
    pub agreement: Option<([u8; 32], Option<u64>)>,
    /// The transport key.
    pub transport: Option<[u8; 32]>,
    /// Endpoints: scheme, address, preference.
    pub endpoints: Vec<(String, String, u32)>,
    /// Mediators' node keys.
    pub mediators: Vec<[u8; 32]>,
    /// meshstr protocols implemented (tails such as `peering/1.0`).
    pub protocols: Vec<String>,
    /// Capability hints (`relay`, `blossom`, `mediator`, `negentropy`).
    pub capabilities: Vec<String>,
    /// The NIP-40 expiration.
    pub expiration: u64,
}

impl DescriptorSpec {
    /// The descriptor's tags, without the `nonce` (added by [`mine`]).
    pub fn tags(&self) -> Vec<Vec<String>> {
        let s = |x: &str| String::from(x);
        let mut t = Vec::new();
        if let Some(c) = self.class {
            t.push(vec![s("class"), s(c.as_str())]);
        }
        t.push(vec![
            s("protocol"),
            s(PROTOCOL_NAME),
            crate::codec::hex::encode(&self.digest),
        ]);
        if let Some((url, ver)) = &self.software {
            t.push(vec![s("software"), url.clone(), ver.clone()]);
        }
        if let Some((k, exp)) = &self.agreement {
            let mut tag = vec![
                s("key"),
                s("agreement"),
                super::keys::multikey(KeyKind::Agreement, k),
            ];
            if let Some(x) = exp {
                tag.push(format!("{x}"));
            }
            t.push(tag);
        }
        if let Some(k) = &self.transport {
            t.push(vec![
                s("key"),
                s("transport"),
                super::keys::multikey(KeyKind::Transport, k),
            ]);
        }
        for (scheme, addr, pref) in &self.endpoints {
            t.push(vec![
                s("endpoint"),
                scheme.clone(),
                addr.clone(),
                format!("{pref}"),
            ]);
        }
        for m in &self.mediators {
            t.push(vec![s("mediator"), super::keys::did_nostr(m)]);
        }
        for p in &self.protocols {
            t.push(vec![s("c"), format!("{PIURI_BASE}{p}")]);
        }
        for c in &self.capabilities {
            t.push(vec![s("c"), c.clone()]);
        }
        t.push(crate::nostr::expiration::tag(self.expiration));
        t
    }
}

/// Mines a NIP-13 nonce for `event` by `pubkey`: appends `["nonce", n, bits]` and tries each `n`
/// in `tries` until the id has `bits` leading zero bits. Returns the event with its nonce and the
/// id it will have, or `None` if the tries ran out.
pub fn mine(
    provider: &dyn CryptoProvider,
    pubkey: &[u8; 32],
    mut event: UnsignedEvent,
    bits: u32,
    tries: core::ops::Range<u64>,
) -> Option<(UnsignedEvent, [u8; 32])> {
    event
        .tags
        .push(vec!["nonce".into(), String::new(), format!("{bits}")]);
    let i = event.tags.len() - 1;
    for n in tries {
        event.tags[i][1] = format!("{n}");
        let ser = crate::nostr::event::id_serialization(
            pubkey,
            event.created_at,
            event.kind,
            &event.tags,
            &event.content,
        );
        let id = provider.sha256(&[ser.as_bytes()]);
        if pow_bits(&id) >= bits {
            return Some((event, id));
        }
    }
    None
}

/// A checked heartbeat (§3.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The class it declares.
    pub class: NodeClass,
    /// The endpoint digest, if carried.
    pub endpoints: Option<[u8; 32]>,
    /// Whether it says the publisher is retiring.
    pub retiring: bool,
}

/// The heartbeat's `endpoints` digest (§3.3): SHA-256 over the canonical JSON of the sorted
/// `[scheme, address]` pairs served; preference excluded.
pub fn endpoints_digest(provider: &dyn CryptoProvider, endpoints: &[(String, String)]) -> [u8; 32] {
    let mut pairs: Vec<&(String, String)> = endpoints.iter().collect();
    pairs.sort();
    pairs.dedup();
    let v = Value::Array(
        pairs
            .into_iter()
            .map(|(s, a)| Value::Array(vec![Value::from(s.as_str()), Value::from(a.as_str())]))
            .collect(),
    );
    super::digest(provider, &v)
}

/// Whether a heartbeat contradicts the live descriptor of its author: a class that differs is a
/// misreport about itself, S2 (§3.3).
pub fn heartbeat_contradicts(h: &Heartbeat, live: &Descriptor) -> bool {
    h.class != live.class
}

/// The tags a heartbeat may carry (§9.1: `class`; `endpoints`, `load`, `retiring`).
pub const HEARTBEAT_TAGS: [&str; 4] = ["class", "endpoints", "load", "retiring"];

/// Checks a heartbeat. A leaf's is refused: leaves MUST NOT publish one; nor may any heartbeat
/// carry a tag outside [`HEARTBEAT_TAGS`] (it names no peer, says nothing about accounting).
pub fn heartbeat(e: &Event) -> Result<Heartbeat, Refusal> {
    if e.kind != HEARTBEAT {
        return Err(Refusal::WrongKind);
    }
    bounded(e)?;
    empty_content(e)?;
    let class = NodeClass::parse(&one(e, "class")?[1]).ok_or(Refusal::BadTag("class"))?;
    if class == NodeClass::Leaf {
        return Err(Refusal::LeafHeartbeat);
    }
    // §3.3: a heartbeat names no peer and carries nothing about accounting, so it carries §9.1's
    // tags and nothing else (a `p`, a `grant`, a receipt head would be one of those).
    if e.tags.iter().any(|t| {
        !t.first()
            .is_some_and(|n| HEARTBEAT_TAGS.contains(&n.as_str()))
    }) {
        return Err(Refusal::BadTag("not a heartbeat tag"));
    }
    let endpoints = match at_most_one(e, "endpoints")? {
        None => None,
        Some(t) => Some(lower_hex::<32>(&t[1]).ok_or(Refusal::BadTag("endpoints"))?),
    };
    Ok(Heartbeat {
        class,
        endpoints,
        retiring: tags(e, "retiring").next().is_some(),
    })
}

/// The verification modes of a compute ask (§8.2).
pub const VERIFY_MODES: [&str; 4] = ["sample", "dual", "proof", "none"];

/// The completeness values of a coverage claim (§3.1, §3.2).
pub const COMPLETENESS: [&str; 2] = ["asserted", "best-effort"];

/// Checks any meshstr event's tags and content at `now_secs` (the descriptor's work is asked at
/// [`DESCRIPTOR_POW_BITS`]). Returns the kind.
pub fn validate(e: &Event, now_secs: u64) -> Result<u16, Refusal> {
    bounded(e)?;
    match e.kind {
        DESCRIPTOR => descriptor(e, now_secs, DESCRIPTOR_POW_BITS).map(|_| DESCRIPTOR),
        REVOCATION => {
            require(e, &["reason"])?;
            if let Some(s) = at_most_one(e, "successor")? {
                did_nostr_key(&s[1]).ok_or(Refusal::BadTag("successor"))?;
            }
            Ok(REVOCATION)
        }
        COMPUTE_OFFER => {
            empty_content(e)?;
            require(e, &["executor"])?;
            live_expiration(e, now_secs)?;
            Ok(COMPUTE_OFFER)
        }
        HEARTBEAT => heartbeat(e).map(|_| HEARTBEAT),
        TELEMETRY => {
            empty_content(e)?;
            decimal_tag(e, "sample_window")?;
            optional_expiration(e, now_secs)?;
            Ok(TELEMETRY)
        }
        GRANT | JOB_RECEIPT => {
            if e.content.is_empty() {
                return Err(Refusal::BadContent);
            }
            hex_tag(e, "d")?;
            hex_tag(e, "commit")?;
            require(e, &["scheme"])?;
            if e.kind == GRANT {
                decimal_tag(e, "window")?;
                decimal_tag(e, "epoch")?;
            }
            live_expiration(e, now_secs)?;
            Ok(e.kind)
        }
        REPORT => {
            hex_tag(e, "d")?;
            let outcome = &one(e, "outcome")?[1];
            if !matches!(outcome.as_str(), "S1" | "S2" | "S3" | "S4") {
                return Err(Refusal::NotAdverse);
            }
            hex_tag(e, "grant")?;
            require(e, &["windows"])?;
            let mut any = false;
            for t in tags(e, "evidence") {
                any = true;
                if t.len() < 2 || !hex64(&t[1]) {
                    return Err(Refusal::BadTag("evidence"));
                }
            }
            if !any {
                return Err(Refusal::MissingTag("evidence"));
            }
            live_expiration(e, now_secs)?;
            Ok(REPORT)
        }
        COVERAGE => {
            require(e, &["d", "filter"])?;
            let completeness = &one(e, "completeness")?[1];
            if !COMPLETENESS.contains(&completeness.as_str()) {
                return Err(Refusal::BadTag("completeness"));
            }
            let f: Value = serde_json::from_str(&one(e, "filter")?[1])
                .map_err(|_| Refusal::BadTag("filter"))?;
            if !f.is_object() {
                return Err(Refusal::BadTag("filter"));
            }
            for n in ["since", "until", "count"] {
                if at_most_one(e, n)?.is_some() {
                    decimal_tag(
                        e,
                        match n {
                            "since" => "since",
                            "until" => "until",
                            _ => "count",
                        },
                    )?;
                }
            }
            let handover = at_most_one(e, "handover")?;
            if let Some(h) = handover {
                if !hex64(&h[1]) {
                    return Err(Refusal::BadTag("handover"));
                }
            } else {
                empty_content(e)?;
            }
            optional_expiration(e, now_secs)?;
            Ok(COVERAGE)
        }
        COMPUTE_ASK => {
            empty_content(e)?;
            // An ask prices the work without describing it (§8.1): no tag beyond §9.1's list.
            if e.tags.iter().any(|t| {
                !t.first()
                    .is_some_and(|n| super::compute::ASK_TAGS.contains(&n.as_str()))
            }) {
                return Err(Refusal::BadTag("not an ask tag"));
            }
            hex_tag(e, "d")?;
            hex_tag(e, "commit")?;
            require(e, &["executor"])?;
            for n in ["bid", "deadline", "fuel_max"] {
                decimal_tag(
                    e,
                    match n {
                        "bid" => "bid",
                        "deadline" => "deadline",
                        _ => "fuel_max",
                    },
                )?;
            }
            if !VERIFY_MODES.contains(&one(e, "verify")?[1].as_str()) {
                return Err(Refusal::BadTag("verify"));
            }
            if at_most_one(e, "input_size")?.is_some() {
                decimal_tag(e, "input_size")?;
            }
            live_expiration(e, now_secs)?;
            Ok(COMPUTE_ASK)
        }
        _ => Err(Refusal::WrongKind),
    }
}

/// Verifies the event's id and signature, then [`validate`]s it.
pub fn check(provider: &dyn CryptoProvider, e: &Event, now_secs: u64) -> Result<u16, Refusal> {
    e.verify(provider).map_err(|_| Refusal::BadSignature)?;
    validate(e, now_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Secp256k1Secret, default_provider, generate_secp256k1};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const NOW: u64 = 1787000000;

    fn key(rng: &mut ChaCha20Rng) -> Secp256k1Secret {
        generate_secp256k1(default_provider(), rng)
    }

    fn sign(secret: &Secp256k1Secret, kind: u16, tags: Vec<Vec<String>>, content: &str) -> Event {
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        UnsignedEvent {
            created_at: NOW,
            kind,
            tags,
            content: content.into(),
        }
        .sign(default_provider(), secret, &mut rng)
        .unwrap()
    }

    fn spec() -> DescriptorSpec {
        DescriptorSpec {
            class: Some(NodeClass::Edge),
            digest: [4; 32],
            software: Some(("https://meshstr.org".into(), "0.2.0".into())),
            agreement: Some(([2; 32], Some(NOW + 90 * 86400))),
            transport: Some([3; 32]),
            endpoints: vec![
                ("iroh".into(), "node".into(), 10),
                ("wss".into(), "wss://relay.example.org".into(), 40),
            ],
            mediators: vec![[9; 32]],
            protocols: vec!["peering/1.0".into(), "budget/1.0".into(), "sync/1.0".into()],
            capabilities: vec!["relay".into(), "negentropy".into()],
            expiration: NOW + 86400,
        }
    }

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| String::from(*s)).collect()
    }

    #[test]
    fn kind_classes_follow_nip01() {
        assert_eq!(kind_class(DESCRIPTOR), KindClass::Replaceable);
        assert_eq!(kind_class(HEARTBEAT), KindClass::Ephemeral);
        assert_eq!(kind_class(TELEMETRY), KindClass::Ephemeral);
        assert_eq!(kind_class(GRANT), KindClass::Addressable);
        assert_eq!(kind_class(JOB_RECEIPT), KindClass::Addressable);
        assert_eq!(kind_class(1), KindClass::Regular);
        assert_eq!(kind_class(19999), KindClass::Replaceable);
        assert_eq!(kind_class(20000), KindClass::Ephemeral);
        assert_eq!(kind_class(40000), KindClass::Regular);
    }

    #[test]
    fn a_built_descriptor_checks_and_binds_only_its_transport_key() {
        let mut rng = ChaCha20Rng::seed_from_u64(22);
        let s = key(&mut rng);
        let e = sign(&s, DESCRIPTOR, spec().tags(), "Community relay.");
        let d = descriptor(&e, NOW, 0).unwrap();
        assert_eq!(d.class, NodeClass::Edge);
        assert!(d.declares("peering/1.0") && d.declares("sync/1.0"));
        assert!(!d.declares("compute/1.0"));
        assert_eq!(
            d.capabilities,
            vec![String::from("relay"), "negentropy".into()]
        );
        assert_eq!(d.endpoints[0].2, 10);
        assert!(d.binds_transport(&[3; 32], NOW));
        assert!(
            !d.binds_transport(&[2; 32], NOW),
            "an agreement key is not a transport key"
        );
        assert!(
            !d.binds_transport(&[3; 32], NOW + 86400),
            "not through an expired descriptor"
        );
        assert_eq!(
            check(default_provider(), &e, NOW),
            Err(Refusal::NotEnoughWork)
        );
    }

    #[test]
    fn descriptor_refusals() {
        let mut rng = ChaCha20Rng::seed_from_u64(23);
        let s = key(&mut rng);
        let ok = spec().tags();
        let refuse = |tags: Vec<Vec<String>>, want: Refusal| {
            let e = sign(&s, DESCRIPTOR, tags, "");
            assert_eq!(descriptor(&e, NOW, 0), Err(want));
        };
        let without = |name: &str| -> Vec<Vec<String>> {
            ok.iter().filter(|t| t[0] != name).cloned().collect()
        };
        refuse(without("class"), Refusal::MissingTag("class"));
        refuse(without("protocol"), Refusal::MissingTag("protocol"));
        refuse(without("expiration"), Refusal::MissingTag("expiration"));
        refuse(without("c"), Refusal::MissingTag("c"));
        let only = |keep: &str| -> Vec<Vec<String>> {
            ok.iter()
                .filter(|t| t[0] != "c" || t[1].ends_with(keep))
                .cloned()
                .collect()
        };
        refuse(only("budget/1.0"), Refusal::MissingProtocol("peering/1.0"));
        refuse(only("peering/1.0"), Refusal::MissingProtocol("budget/1.0"));
        let mut two = ok.clone();
        two.push(t(&["class", "anchor"]));
        refuse(two, Refusal::DuplicateTag("class"));
        let mut bad = without("class");
        bad.push(t(&["class", "relay"]));
        refuse(bad, Refusal::BadTag("class"));
        // A leaf's descriptor lives 24 hours at most; an edge's 30 days.
        let mut leaf = without("class");
        leaf.push(t(&["class", "leaf"]));
        let mut long = without("expiration");
        long.push(crate::nostr::expiration::tag(NOW + 86401));
        leaf.retain(|t| t[0] != "expiration");
        leaf.push(crate::nostr::expiration::tag(NOW + 86401));
        refuse(leaf, Refusal::LifetimeTooLong);
        assert!(descriptor(&sign(&s, DESCRIPTOR, long, ""), NOW, 0).is_ok());
        let mut month = without("expiration");
        month.push(crate::nostr::expiration::tag(NOW + 30 * 86400 + 1));
        refuse(month, Refusal::LifetimeTooLong);
        // Expired.
        let e = sign(&s, DESCRIPTOR, ok.clone(), "");
        assert_eq!(descriptor(&e, NOW + 86400, 0), Err(Refusal::Expired));
        // A multikey in another base, or of the wrong codec.
        let mut k = without("key");
        k.push(t(&[
            "key",
            "transport",
            &super::super::keys::multikey(KeyKind::Agreement, &[3; 32]),
        ]));
        refuse(k, Refusal::BadTag("key"));
        let mut ep = ok.clone();
        ep.push(t(&["endpoint", "wss", "wss://x"]));
        refuse(ep, Refusal::BadTag("endpoint"));
        let mut ep = ok.clone();
        ep.push(t(&["endpoint", "wss", "wss://x", "-1"]));
        refuse(ep, Refusal::BadTag("endpoint"));
        let mut m = ok.clone();
        m.push(t(&["mediator", "did:nostr:"]));
        refuse(m, Refusal::BadTag("mediator"));
        let mut flood = ok.clone();
        for _ in 0..=MAX_REPEATED_TAGS {
            flood.push(t(&["c", "relay"]));
        }
        refuse(flood, Refusal::TooLarge);
        let mut digest = without("protocol");
        digest.push(t(&["protocol", "meshstr/0-draft", ""]));
        refuse(digest, Refusal::BadTag("protocol"));
    }

    #[test]
    fn a_descriptor_whose_agreement_key_agrees_nothing_is_refused() {
        use super::super::keys::{X25519_SMALL_ORDER, multikey};
        let mut rng = ChaCha20Rng::seed_from_u64(25);
        let s = key(&mut rng);
        let with_agreement = |k: [u8; 32]| {
            let mut sp = spec();
            sp.agreement = Some((k, Some(NOW + 90 * 86400)));
            descriptor(&sign(&s, DESCRIPTOR, sp.tags(), ""), NOW, 0)
        };
        // The all-zero key, and every other small-order point: ECDH to it is a known secret.
        for k in X25519_SMALL_ORDER {
            assert_eq!(
                with_agreement(k),
                Err(Refusal::BadAgreementKey(AgreementKeyError::SmallOrder))
            );
        }
        // p itself, and a key with the bit RFC 7748 masks set: other strings for 0 and for a key.
        let mut p = [0xff; 32];
        p[0] = 0xed;
        p[31] = 0x7f;
        assert_eq!(
            with_agreement(p),
            Err(Refusal::BadAgreementKey(AgreementKeyError::NonCanonical))
        );
        assert_eq!(
            with_agreement([0x80; 32]),
            Err(Refusal::BadAgreementKey(AgreementKeyError::NonCanonical))
        );
        // A second agreement key (a rotation's overlap) is checked as the first is.
        let mut two = spec().tags();
        two.push(t(&[
            "key",
            "agreement",
            &multikey(KeyKind::Agreement, &[0; 32]),
        ]));
        assert_eq!(
            descriptor(&sign(&s, DESCRIPTOR, two, ""), NOW, 0),
            Err(Refusal::BadAgreementKey(AgreementKeyError::SmallOrder))
        );
        assert!(with_agreement([2; 32]).is_ok());
    }

    #[test]
    fn descriptor_proof_of_work() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(24);
        let s = key(&mut rng);
        let pk = p.schnorr_public_key(&s).unwrap();
        let unsigned = UnsignedEvent {
            created_at: NOW,
            kind: DESCRIPTOR,
            tags: spec().tags(),
            content: String::new(),
        };
        let (mined, id) = mine(p, &pk, unsigned, 8, 0..100_000).unwrap();
        let tags = mined.tags;
        let e = sign(&s, DESCRIPTOR, tags.clone(), "");
        assert_eq!(e.id, id);
        assert!(pow_bits(&e.id) >= 8);
        assert!(descriptor(&e, NOW, 8).is_ok());
        // The committed target counts too: a lucky id under a lower commitment is not enough.
        let mut low = tags;
        low.last_mut().unwrap()[2] = "4".into();
        let e = sign(&s, DESCRIPTOR, low, "");
        assert_eq!(descriptor(&e, NOW, 8), Err(Refusal::NotEnoughWork));
        assert_eq!(
            pow_bits(&[
                0, 0, 0x0f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0
            ]),
            20
        );
    }

    #[test]
    fn heartbeats() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(25);
        let s = key(&mut rng);
        let digest = endpoints_digest(
            p,
            &[
                ("wss".into(), "wss://b".into()),
                ("iroh".into(), "n".into()),
            ],
        );
        // Sorted pairs, canonical JSON, preference excluded.
        assert_eq!(digest, p.sha256(&[br#"[["iroh","n"],["wss","wss://b"]]"#]));
        let hex = crate::codec::hex::encode(&digest);
        let e = sign(
            &s,
            HEARTBEAT,
            vec![
                t(&["class", "anchor"]),
                t(&["endpoints", &hex]),
                t(&["retiring"]),
            ],
            "",
        );
        let h = heartbeat(&e).unwrap();
        assert!(h.retiring);
        assert_eq!(h.endpoints, Some(digest));
        // Naming a peer, or a receipt head: accounting a heartbeat never carries (§3.3).
        for extra in [
            t(&["p", &"ab".repeat(32)]),
            t(&["head", &"cd".repeat(32)]),
            t(&["grant", &"ef".repeat(32)]),
        ] {
            let named = sign(&s, HEARTBEAT, vec![t(&["class", "anchor"]), extra], "");
            assert_eq!(
                heartbeat(&named),
                Err(Refusal::BadTag("not a heartbeat tag"))
            );
        }
        let leaf = sign(&s, HEARTBEAT, vec![t(&["class", "leaf"])], "");
        assert_eq!(heartbeat(&leaf), Err(Refusal::LeafHeartbeat));
        let chatty = sign(&s, HEARTBEAT, vec![t(&["class", "edge"])], "peer list");
        assert_eq!(heartbeat(&chatty), Err(Refusal::BadContent));
        let d = descriptor(&sign(&s, DESCRIPTOR, spec().tags(), ""), NOW, 0).unwrap();
        assert!(heartbeat_contradicts(&h, &d));
    }

    #[test]
    fn every_kind_refuses_a_missing_required_tag() {
        let mut rng = ChaCha20Rng::seed_from_u64(26);
        let s = key(&mut rng);
        let h = "ab".repeat(32);
        let exp = format!("{}", NOW + 3600);
        let cases: Vec<(u16, &str, Vec<Vec<String>>)> = vec![
            (REVOCATION, "retired", vec![t(&["reason", "retired"])]),
            (
                COMPUTE_OFFER,
                "",
                vec![t(&["executor", "wasmtime"]), t(&["expiration", &exp])],
            ),
            (TELEMETRY, "", vec![t(&["sample_window", "3600"])]),
            (
                GRANT,
                "ciphertext",
                vec![
                    t(&["d", &h]),
                    t(&["commit", &h]),
                    t(&["scheme", "sha256"]),
                    t(&["window", "3600"]),
                    t(&["epoch", "1"]),
                    t(&["expiration", &exp]),
                ],
            ),
            (
                REPORT,
                "{}",
                vec![
                    t(&["d", &h]),
                    t(&["outcome", "S2"]),
                    t(&["grant", &h]),
                    t(&["windows", "496389"]),
                    t(&["evidence", &h]),
                    t(&["expiration", &exp]),
                ],
            ),
            (
                COVERAGE,
                "",
                vec![
                    t(&["d", "bristol"]),
                    t(&["filter", r##"{"#t":["bristol"],"kinds":[1]}"##]),
                    t(&["completeness", "asserted"]),
                ],
            ),
            (
                COMPUTE_ASK,
                "",
                vec![
                    t(&["d", &h]),
                    t(&["commit", &h]),
                    t(&["executor", "x"]),
                    t(&["bid", "10"]),
                    t(&["deadline", "1787003600"]),
                    t(&["fuel_max", "1000"]),
                    t(&["verify", "sample"]),
                    t(&["expiration", &exp]),
                ],
            ),
            (
                JOB_RECEIPT,
                "ciphertext",
                vec![
                    t(&["d", &h]),
                    t(&["commit", &h]),
                    t(&["scheme", "sha256"]),
                    t(&["expiration", &exp]),
                ],
            ),
        ];
        for (kind, content, tags) in cases {
            let e = sign(&s, kind, tags.clone(), content);
            assert_eq!(check(default_provider(), &e, NOW), Ok(kind), "{kind}");
            for i in 0..tags.len() {
                let mut less = tags.clone();
                let name = less.remove(i)[0].clone();
                let e = sign(&s, kind, less, content);
                let r = validate(&e, NOW);
                assert!(
                    matches!(&r, Err(Refusal::MissingTag(n)) if *n == name),
                    "{kind} without {name}: {r:?}"
                );
            }
            // Expired where the kind carries an expiration.
            if tags.iter().any(|t| t[0] == "expiration") {
                assert_eq!(validate(&e, NOW + 3600), Err(Refusal::Expired), "{kind}");
            }
        }
    }

    #[test]
    fn kind_specific_refusals() {
        let mut rng = ChaCha20Rng::seed_from_u64(27);
        let s = key(&mut rng);
        let h = "ab".repeat(32);
        let exp = format!("{}", NOW + 3600);
        let report = |outcome: &str| {
            sign(
                &s,
                REPORT,
                vec![
                    t(&["d", &h]),
                    t(&["outcome", outcome]),
                    t(&["grant", &h]),
                    t(&["windows", "1"]),
                    t(&["evidence", &h]),
                    t(&["expiration", &exp]),
                ],
                "",
            )
        };
        assert_eq!(validate(&report("S0"), NOW), Err(Refusal::NotAdverse));
        assert_eq!(validate(&report("clean"), NOW), Err(Refusal::NotAdverse));
        assert_eq!(validate(&report("S4"), NOW), Ok(REPORT));
        let ask = |verify: &str| {
            sign(
                &s,
                COMPUTE_ASK,
                vec![
                    t(&["d", &h]),
                    t(&["commit", &h]),
                    t(&["executor", "x"]),
                    t(&["bid", "10"]),
                    t(&["deadline", "1"]),
                    t(&["fuel_max", "1"]),
                    t(&["verify", verify]),
                    t(&["expiration", &exp]),
                ],
                "",
            )
        };
        assert_eq!(validate(&ask("tee"), NOW), Err(Refusal::BadTag("verify")));
        assert_eq!(validate(&ask("proof"), NOW), Ok(COMPUTE_ASK));
        let grant_clear = sign(
            &s,
            GRANT,
            vec![
                t(&["d", &h]),
                t(&["commit", &h]),
                t(&["scheme", "s"]),
                t(&["window", "3600"]),
                t(&["epoch", "1"]),
                t(&["expiration", &exp]),
            ],
            "",
        );
        assert_eq!(validate(&grant_clear, NOW), Err(Refusal::BadContent));
        let cov = |completeness: &str, content: &str| {
            sign(
                &s,
                COVERAGE,
                vec![
                    t(&["d", "x"]),
                    t(&["filter", "{}"]),
                    t(&["completeness", completeness]),
                ],
                content,
            )
        };
        assert_eq!(
            validate(&cov("complete", ""), NOW),
            Err(Refusal::BadTag("completeness"))
        );
        assert_eq!(
            validate(&cov("asserted", "{}"), NOW),
            Err(Refusal::BadContent)
        );
        assert_eq!(validate(&cov("best-effort", ""), NOW), Ok(COVERAGE));
        let e = sign(&s, 1, vec![], "");
        assert_eq!(validate(&e, NOW), Err(Refusal::WrongKind));
        let mut forged = report("S1");
        forged.content = "x".into();
        assert_eq!(
            check(default_provider(), &forged, NOW),
            Err(Refusal::BadSignature)
        );
    }

    #[test]
    fn peering_declines_on_digest_disagreement_and_missing_protocols() {
        let mut rng = ChaCha20Rng::seed_from_u64(28);
        let s = key(&mut rng);
        let ours = descriptor(&sign(&s, DESCRIPTOR, spec().tags(), ""), NOW, 0).unwrap();
        let theirs = ours.clone();
        let ids: Vec<String> = ["peering/1.0", "budget/1.0", "sync/1.0"]
            .iter()
            .map(|p| format!("{PIURI_BASE}{p}"))
            .collect();
        assert_eq!(
            peering_decision(&ours, &theirs, Some(&ids), Some(&ids), &["sync/1.0"]),
            Ok(())
        );
        let mut other = theirs.clone();
        other.digest = [5; 32];
        assert_eq!(
            peering_decision(&ours, &other, None, None, &[]),
            Err(Decline::DigestMismatch)
        );
        // The features answer leaves out a protocol the descriptor declares.
        let fewer = ids[..2].to_vec();
        assert_eq!(
            peering_decision(&ours, &theirs, Some(&fewer), Some(&ids), &[]),
            Err(Decline::BadDescriptor)
        );
        assert_eq!(
            peering_decision(&ours, &theirs, Some(&ids), Some(&fewer), &[]),
            Err(Decline::BadDescriptor)
        );
        // Identifiers compare byte for byte: another spelling is another protocol.
        let upper: Vec<String> = ids
            .iter()
            .map(|i| i.replace("meshstr", "Meshstr"))
            .collect();
        assert_eq!(
            peering_decision(&ours, &theirs, Some(&upper), None, &[]),
            Err(Decline::BadDescriptor)
        );
        assert_eq!(
            peering_decision(&ours, &theirs, None, None, &["compute/1.0"]),
            Err(Decline::UnsupportedProtocol)
        );
        assert!(!Decline::UnsupportedProtocol.is_finding());
        assert_eq!(Decline::BadDescriptor.code(), "BAD_DESCRIPTOR");
    }
    #[test]
    fn a_live_descriptor_resolves_to_its_node_profile() {
        let mut rng = ChaCha20Rng::seed_from_u64(23);
        let s = key(&mut rng);
        let e = sign(&s, DESCRIPTOR, spec().tags(), "");
        let d = descriptor(&e, NOW, 0).unwrap();
        let doc = d.profile();
        let methods = doc["verificationMethod"].as_array().unwrap();
        assert_eq!(methods.len(), 3, "#key1, #agree, #wire");
        assert_eq!(doc["keyAgreement"], serde_json::json!(["#agree"]));
        let svc = doc["service"].as_array().unwrap();
        assert_eq!(svc[0]["type"], "IrohNode");
        assert_eq!(svc[1]["type"], "NostrRelay");
        assert_eq!(svc[1]["serviceEndpoint"], "wss://relay.example.org");
    }
}
