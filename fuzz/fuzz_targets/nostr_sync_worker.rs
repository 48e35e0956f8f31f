//! The outbound peering-sync worker (`nostr::sync::worker::Worker`, spec 002 §6) driven by a
//! host that plays the driver and, at the fuzzer's choice, the peer: NIP-11 answers (a document
//! with the right or a wrong `self`, with or without NIP-77, scopes built from fuzzed kinds,
//! authors, `since` and `windowSeconds`; raw text; a failure), connections opened or refused,
//! and frames that are raw text, hand-built (`AUTH` challenges, `OK` for its `AUTH`, `EVENT`s in
//! and out of scope, badly signed, ephemeral, too large, from the future, expired; `EOSE`,
//! `CLOSED` with every reason class, `NEG-MSG` with fuzzed bytes, `NEG-ERR`) or answered by a
//! real relay session (`nostr::relay::harness`) over a memory store the fuzzer fills, so that
//! negentropy and fetch batches run for real. Store operations are answered honestly from a
//! `MemoryStore`, late and in order, and time moves by fuzzed steps and deadlines.
//!
//! On every step: nothing panics; every frame sent parses as a client message and goes to the
//! one open connection; every `Connect` dials the configured URL, with no other socket open;
//! the store queue and the set of ids to fetch stay within their bounds; nothing ephemeral is
//! written to the store; every broadcast verifies and an ephemeral one is not stored; and a
//! deadline handled moves past the clock.
#![no_main]

use std::collections::VecDeque;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::core::{BucketConfig, ConnId, Machine, Timestamp};
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, EventId, UnsignedEvent};
use weft_proto::nostr::kinds::{ALL_RELAYS, DELETION_KIND, VANISH_KIND};
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, RelayMessage};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::wire::{self, Inbound};
use weft_proto::nostr::relay::{
    AuthPolicy, EventStore, MemoryStore, RequestId, StoreOp, StoreReply,
};
use weft_proto::nostr::sync::address;
use weft_proto::nostr::sync::worker::{
    Config, InfoError, Input, Output, SyncLimits, Worker, info_url,
};

const URL: &str = "wss://peer.example.com/";
const OWN_URL: &str = "wss://own.example.com/";
const LIVE_SUB: &str = "peer-live";
const START: u64 = 1_790_000_000;
/// Kinds of every class: regular, replaceable, addressable, ephemeral, NIP-42 auth (refused),
/// deletion, request to vanish.
const KINDS: [u16; 8] = [1, 7, 0, 30_023, 20_001, 22_242, DELETION_KIND, VANISH_KIND];
/// Small bounds, so that the fuzzer reaches them.
const LIMITS: SyncLimits = SyncLimits {
    max_queue_events: 3,
    max_queue_bytes: 3_000,
    fetch_batch_ids: 2,
    fetch_batch_bytes: 1_500,
    max_need_ids: 4,
    max_local_items: 4,
    neg_frame_bytes: 4_096,
    max_frame_bytes: 4_096,
};
const CLOSED_REASONS: [&str; 7] = [
    "rate-limited: slow down",
    "error: too large",
    "blocked: too many filter values",
    "auth-required: who are you",
    "invalid: bad filter",
    "",
    "closed: idle",
];

struct Keys {
    peer: [u8; 32],
    own: Secp256k1Secret,
    authors: Vec<(Secp256k1Secret, [u8; 32])>,
}

/// Keys drawn once for the whole run: deriving them is most of an input's cost.
fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let p = weft_fuzz::crypto();
        let key = |seed| generate_secp256k1(p, &mut ChaCha20Rng::seed_from_u64(seed));
        let peer = key(1);
        Keys {
            peer: p.schnorr_public_key(&peer).unwrap(),
            own: key(2),
            authors: (10..13)
                .map(|s| {
                    let k = key(s);
                    let pubkey = p.schnorr_public_key(&k).unwrap();
                    (k, pubkey)
                })
                .collect(),
        }
    })
}

#[derive(Arbitrary, Debug)]
struct ScopeSpec {
    /// A bit per entry of [`KINDS`]; none omits `kinds`.
    kinds: u8,
    /// Adds the range `[30000, 30023]`.
    range: bool,
    /// A bit per author; none omits `authors`.
    authors: u8,
    since: Option<u16>,
    window: Option<u16>,
    /// Replaces the scope with this raw JSON text.
    raw: Option<String>,
}

#[derive(Arbitrary, Debug)]
enum Info {
    Doc {
        right_self: bool,
        omit_self: bool,
        nip77: bool,
        scopes: Vec<ScopeSpec>,
    },
    Raw(String),
    Failed,
    Refused,
}

#[derive(Arbitrary, Debug)]
enum Sub {
    Live,
    /// One of the subscriptions the worker opened, counted back from the newest.
    Recent(u8),
    Unknown,
}

#[derive(Arbitrary, Debug)]
enum Flavour {
    Good,
    BadSig,
    BadId,
    TooLarge,
    Future,
    Expired,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Info(Info),
    Connect {
        ok: bool,
    },
    Disconnect,
    Raw {
        text: String,
        stale: bool,
    },
    /// Peer-session frames queued for the worker, delivered.
    Pump {
        max: u8,
    },
    /// Whether the worker's frames reach the peer session.
    Forward(bool),
    Challenge {
        text: u8,
    },
    AuthOk {
        accepted: bool,
        right_id: bool,
    },
    Event {
        sub: Sub,
        key: u8,
        kind: u8,
        age: u16,
        flavour: Flavour,
        here: bool,
    },
    /// Many good live events at once, past the writes in flight, so the queue bound is reached.
    Burst {
        key: u8,
        count: u8,
    },
    Eose(Sub),
    Closed {
        sub: Sub,
        reason: u8,
    },
    NegMsg {
        sub: Sub,
        message: Vec<u8>,
    },
    NegErr {
        sub: Sub,
        reason: u8,
    },
    /// Events in the peer's store (history the reconciliation finds).
    PeerHas {
        key: u8,
        kind: u8,
        age: u16,
        count: u8,
    },
    /// Plays an honest driver and peer until the worker is quiet (at most `rounds` passes): a
    /// good document, sockets that open, every peer frame delivered, every store request
    /// answered; so that short inputs reach reconciliation, fetches and the bounds.
    Settle {
        rounds: u8,
    },
    /// An event already in the local store.
    LocalHas {
        key: u8,
        kind: u8,
        age: u16,
    },
    /// Answer this many store requests, oldest first.
    Store {
        n: u8,
    },
    Advance {
        secs: u16,
    },
    Timeout,
}

struct Host {
    worker: Worker<ChaCha20Rng>,
    now: Timestamp,
    rng: ChaCha20Rng,
    local: MemoryStore,
    peer: Harness,
    /// The peer-session connection behind the worker's open socket.
    peer_conn: Option<usize>,
    forward: bool,
    /// Peer frames for the worker; `None` is the peer closing the socket.
    from_peer: VecDeque<Option<String>>,
    info_pending: bool,
    connecting: Option<ConnId>,
    open: Option<ConnId>,
    /// The last connection id the worker named, for stale inputs.
    last_conn: ConnId,
    stores: VecDeque<(RequestId, StoreOp)>,
    subs: Vec<String>,
    auth_id: Option<EventId>,
}

impl Host {
    /// Runs every output the worker has, checking each, then the bounds.
    fn drain(&mut self) {
        let p = weft_fuzz::crypto();
        while let Some(out) = self.worker.poll() {
            match out {
                Output::FetchInfo { url } => {
                    assert_eq!(Some(url), info_url(URL));
                    self.info_pending = true;
                }
                Output::Connect { conn, url } => {
                    assert_eq!(url, URL, "Connect dials the configured relayUrl");
                    assert_eq!(self.open, None, "a second socket while one is open");
                    self.connecting = Some(conn);
                    self.last_conn = conn;
                }
                Output::Send { conn, text } => {
                    assert_eq!(
                        self.open,
                        Some(conn),
                        "a frame to a socket not open: {text}"
                    );
                    match wire::parse(&text, &Limits::DEFAULT) {
                        Ok(Inbound::Client(ClientMessage::Req { subscription, .. }))
                        | Ok(Inbound::NegOpen { subscription, .. }) => {
                            self.subs.push(subscription);
                            if self.subs.len() > 16 {
                                self.subs.remove(0);
                            }
                        }
                        Ok(Inbound::Client(ClientMessage::Auth(e))) => {
                            e.verify(p).unwrap();
                            self.auth_id = Some(e.id);
                        }
                        Ok(_) => {}
                        Err(e) => panic!("a frame that does not parse ({e:?}): {text}"),
                    }
                    if self.forward
                        && let Some(i) = self.peer_conn
                    {
                        self.peer.send(i, &text);
                        self.collect();
                    }
                }
                Output::Close { conn } => {
                    if self.open == Some(conn) {
                        self.open = None;
                        self.drop_peer();
                    }
                    if self.connecting == Some(conn) {
                        self.connecting = None;
                    }
                }
                Output::Store { request, op } => {
                    if let StoreOp::Write { event, .. } = &op {
                        assert!(!ephemeral(event.kind), "an ephemeral event written");
                        assert!(event.verify(p).is_ok(), "an unverified event written");
                    }
                    self.stores.push_back((request, op));
                }
                Output::Broadcast(e) => {
                    assert!(e.verify(p).is_ok(), "an unverified event broadcast");
                    if ephemeral(e.kind) {
                        assert!(!self.local.contains(&e.id), "an ephemeral event stored");
                    }
                }
                Output::Status(_) => {}
            }
        }
        let (events, bytes) = self.worker.queued();
        assert!(events <= LIMITS.max_queue_events, "queue {events} events");
        assert!(bytes <= LIMITS.max_queue_bytes, "queue {bytes} bytes");
        assert!(self.worker.need_len() <= LIMITS.max_need_ids);
    }

    fn input(&mut self, input: Input) {
        self.worker.handle(self.now, input);
        self.drain();
    }

    /// Moves what the peer session sent on the worker's socket to [`Host::from_peer`].
    fn collect(&mut self) {
        let Some(i) = self.peer_conn else {
            return;
        };
        for frame in self.peer.take_text(i) {
            self.from_peer.push_back(Some(frame));
        }
        if self.peer.conns[i].closed.is_some() {
            self.from_peer.push_back(None);
            self.peer_conn = None;
        }
    }

    fn drop_peer(&mut self) {
        if let Some(i) = self.peer_conn.take() {
            self.peer.take(i);
        }
        self.from_peer.clear();
    }

    fn sub(&self, s: &Sub) -> String {
        match s {
            Sub::Live => LIVE_SUB.into(),
            Sub::Recent(i) if !self.subs.is_empty() => {
                self.subs[self.subs.len() - 1 - usize::from(*i) % self.subs.len()].clone()
            }
            _ => "unknown-1".into(),
        }
    }

    /// A frame from the peer on the open socket (or, when `stale`, on an old one).
    fn frame(&mut self, text: String, stale: bool) {
        let conn = match self.open {
            Some(c) if !stale => c,
            _ => ConnId(self.last_conn.0.wrapping_sub(1)),
        };
        self.input(Input::Frame { conn, text });
    }

    fn event(&mut self, key: u8, kind: u8, created_at: u64, here: bool) -> Event {
        let kind = KINDS[usize::from(kind) % KINDS.len()];
        let mut tags = vec![vec!["d".to_string(), (key % 2).to_string()]];
        if kind == VANISH_KIND {
            let relay = if here { OWN_URL } else { ALL_RELAYS };
            tags.push(vec!["relay".into(), relay.into()]);
        }
        sign(&mut self.rng, key, kind, created_at, tags, String::new())
    }
}

fn sign(
    rng: &mut ChaCha20Rng,
    key: u8,
    kind: u16,
    created_at: u64,
    tags: Vec<Vec<String>>,
    content: String,
) -> Event {
    let authors = &keys().authors;
    UnsignedEvent {
        created_at,
        kind,
        tags,
        content,
    }
    .sign(
        weft_fuzz::crypto(),
        &authors[usize::from(key) % authors.len()].0,
        rng,
    )
    .unwrap()
}

fn ephemeral(kind: u16) -> bool {
    (20_000..30_000).contains(&kind)
}

fn document(
    right_self: bool,
    omit_self: bool,
    nip77: bool,
    scopes: &[ScopeSpec],
    now: u64,
) -> String {
    let k = keys();
    let scopes: Vec<Value> = scopes
        .iter()
        .take(4)
        .map(|s| {
            if let Some(raw) = &s.raw {
                return serde_json::from_str(raw).unwrap_or(Value::Null);
            }
            let mut o = serde_json::Map::new();
            let mut kinds: Vec<Value> = KINDS
                .iter()
                .enumerate()
                .filter(|(i, _)| s.kinds & (1 << i) != 0)
                .map(|(_, k)| json!(k))
                .collect();
            if s.range {
                kinds.push(json!([30_000, 30_023]));
            }
            if !kinds.is_empty() {
                o.insert("kinds".into(), Value::Array(kinds));
            }
            let authors: Vec<Value> = k
                .authors
                .iter()
                .enumerate()
                .filter(|(i, _)| s.authors & (1 << i) != 0)
                .map(|(_, (_, pk))| json!(hex::encode(pk)))
                .collect();
            if !authors.is_empty() {
                o.insert("authors".into(), Value::Array(authors));
            }
            if let Some(since) = s.since {
                o.insert("since".into(), json!(now.saturating_sub(u64::from(since))));
            }
            if let Some(w) = s.window {
                o.insert("windowSeconds".into(), json!(w));
            }
            Value::Object(o)
        })
        .collect();
    let mut doc = json!({
        "name": "peer",
        "supported_nips": if nip77 { json!([1, 11, 42, 77]) } else { json!([1, 11, 42]) },
        "peering": {"scopes": scopes},
    });
    if !omit_self {
        let mut own = k.peer;
        if !right_self {
            own[0] ^= 1;
        }
        doc["self"] = json!(hex::encode(&own));
    }
    doc.to_string()
}

fuzz_target!(|input: (u64, Vec<Op>)| {
    let (seed, ops) = input;
    let k = keys();
    let now = Timestamp::from_secs(START);
    let config = Config {
        peer_pubkey: k.peer,
        relay_url: URL.into(),
        own_url: OWN_URL.into(),
        secret: k.own.clone(),
        provider: weft_fuzz::crypto(),
        allow_private_networks: false,
        limits: LIMITS,
    };
    let peer_limits = Limits {
        messages: BucketConfig::new(1_000, 1_000),
        max_neg_items: 6,
        ..Limits::DEFAULT
    };
    let peer = Harness::new(
        weft_proto::nostr::relay::Config {
            relay_url: URL.into(),
            limits: peer_limits,
            auth: AuthPolicy::Optional,
            peering: Default::default(),
            provider: weft_fuzz::crypto(),
        },
        MemoryStore::new(64),
        now,
    );
    let mut h = Host {
        worker: Worker::new(config, now, ChaCha20Rng::seed_from_u64(seed)),
        now,
        rng: ChaCha20Rng::seed_from_u64(seed ^ 0x5eed),
        local: MemoryStore::new(64),
        peer,
        peer_conn: None,
        forward: true,
        from_peer: VecDeque::new(),
        info_pending: false,
        connecting: None,
        open: None,
        last_conn: ConnId(0),
        stores: VecDeque::new(),
        subs: Vec::new(),
        auth_id: None,
    };
    h.drain();
    for op in ops.into_iter().take(64) {
        let secs = h.now.as_secs();
        match op {
            Op::Info(info) => {
                if !std::mem::take(&mut h.info_pending) {
                    continue;
                }
                let input = match info {
                    Info::Doc {
                        right_self,
                        omit_self,
                        nip77,
                        scopes,
                    } => Input::Info(document(right_self, omit_self, nip77, &scopes, secs)),
                    Info::Raw(text) => Input::Info(text),
                    Info::Failed => Input::InfoFailed(InfoError::Failed("timed out".into())),
                    Info::Refused => Input::InfoFailed(InfoError::Refused(
                        address::check("127.0.0.1".parse().unwrap(), false).unwrap_err(),
                    )),
                };
                h.input(input);
            }
            Op::Connect { ok } => {
                let Some(conn) = h.connecting.take() else {
                    continue;
                };
                if ok {
                    h.open = Some(conn);
                    h.peer.now = h.now;
                    h.peer_conn = Some(h.peer.connect(&mut h.rng));
                    h.from_peer.clear();
                    h.collect();
                    h.input(Input::Connected(conn));
                } else {
                    h.input(Input::Disconnected(conn));
                }
            }
            Op::Disconnect => {
                if let Some(conn) = h.open.take() {
                    h.drop_peer();
                    h.input(Input::Disconnected(conn));
                }
            }
            Op::Raw { text, stale } => h.frame(text, stale),
            Op::Pump { max } => {
                for _ in 0..usize::from(max % 8) + 1 {
                    let Some(conn) = h.open else {
                        break;
                    };
                    match h.from_peer.pop_front() {
                        Some(Some(text)) => h.input(Input::Frame { conn, text }),
                        Some(None) => {
                            h.open = None;
                            h.drop_peer();
                            h.input(Input::Disconnected(conn));
                        }
                        None => break,
                    }
                }
            }
            Op::Forward(on) => h.forward = on,
            Op::Challenge { text } => {
                let m = RelayMessage::Auth(format!("challenge-{text}"));
                h.frame(m.to_text(), false);
            }
            Op::AuthOk { accepted, right_id } => {
                let mut event_id = h.auth_id.unwrap_or([0; 32]);
                if !right_id {
                    event_id[0] ^= 1;
                }
                let message = if accepted {
                    String::new()
                } else {
                    "restricted: not a peer".into()
                };
                let m = RelayMessage::Ok {
                    event_id,
                    accepted,
                    message,
                };
                h.frame(m.to_text(), false);
            }
            Op::Event {
                sub,
                key,
                kind,
                age,
                flavour,
                here,
            } => {
                let created_at = secs.saturating_sub(u64::from(age));
                let mut e = match flavour {
                    Flavour::TooLarge => sign(
                        &mut h.rng,
                        key,
                        KINDS[usize::from(kind) % KINDS.len()],
                        created_at,
                        Vec::new(),
                        "x".repeat(LIMITS.max_frame_bytes),
                    ),
                    Flavour::Future => h.event(key, kind, secs + 3_600, here),
                    Flavour::Expired => sign(
                        &mut h.rng,
                        key,
                        KINDS[usize::from(kind) % KINDS.len()],
                        created_at,
                        vec![vec!["expiration".into(), created_at.to_string()]],
                        String::new(),
                    ),
                    _ => h.event(key, kind, created_at, here),
                };
                match flavour {
                    Flavour::BadSig => e.sig[7] ^= 1,
                    Flavour::BadId => e.id[7] ^= 1,
                    _ => {}
                }
                let m = RelayMessage::Event {
                    subscription: h.sub(&sub),
                    event: e,
                };
                h.frame(m.to_text(), false);
            }
            Op::Burst { key, count } => {
                for i in 0..u64::from(count % 16) + 1 {
                    let e = h.event(key, 0, secs.saturating_sub(i), false);
                    let m = RelayMessage::Event {
                        subscription: LIVE_SUB.into(),
                        event: e,
                    };
                    h.frame(m.to_text(), false);
                }
            }
            Op::Eose(sub) => {
                let m = RelayMessage::Eose(h.sub(&sub));
                h.frame(m.to_text(), false);
            }
            Op::Closed { sub, reason } => {
                let m = RelayMessage::Closed {
                    subscription: h.sub(&sub),
                    message: CLOSED_REASONS[usize::from(reason) % CLOSED_REASONS.len()].into(),
                };
                h.frame(m.to_text(), false);
            }
            Op::NegMsg { sub, message } => {
                let text = json!(["NEG-MSG", h.sub(&sub), hex::encode(&message)]).to_string();
                h.frame(text, false);
            }
            Op::NegErr { sub, reason } => {
                let reason = CLOSED_REASONS[usize::from(reason) % CLOSED_REASONS.len()];
                let text = json!(["NEG-ERR", h.sub(&sub), reason]).to_string();
                h.frame(text, false);
            }
            Op::PeerHas {
                key,
                kind,
                age,
                count,
            } => {
                for i in 0..u64::from(count % 8) + 1 {
                    let at = secs.saturating_sub(u64::from(age) + i);
                    let e = h.event(key, kind, at, false);
                    let _ = h.peer.store.write(&e, h.now);
                }
            }
            Op::Settle { rounds } => {
                for _ in 0..usize::from(rounds % 16) + 1 {
                    let mut acted = false;
                    if std::mem::take(&mut h.info_pending) {
                        let scope = ScopeSpec {
                            kinds: 0b1_1111,
                            range: false,
                            authors: 0,
                            since: None,
                            window: None,
                            raw: None,
                        };
                        let doc = document(true, false, true, &[scope], h.now.as_secs());
                        h.input(Input::Info(doc));
                        acted = true;
                    }
                    if let Some(conn) = h.connecting.take() {
                        h.open = Some(conn);
                        h.peer.now = h.now;
                        h.peer_conn = Some(h.peer.connect(&mut h.rng));
                        h.from_peer.clear();
                        h.collect();
                        h.input(Input::Connected(conn));
                        acted = true;
                    }
                    while let Some(conn) = h.open
                        && let Some(frame) = h.from_peer.pop_front()
                    {
                        acted = true;
                        match frame {
                            Some(text) => h.input(Input::Frame { conn, text }),
                            None => {
                                h.open = None;
                                h.drop_peer();
                                h.input(Input::Disconnected(conn));
                            }
                        }
                    }
                    while let Some((request, op)) = h.stores.pop_front() {
                        acted = true;
                        let reply = h.local.execute(&op);
                        h.input(Input::Stored { request, reply });
                    }
                    if !acted {
                        break;
                    }
                }
            }
            Op::LocalHas { key, kind, age } => {
                let e = h.event(key, kind, secs.saturating_sub(u64::from(age)), false);
                let _ = h.local.write(&e, h.now);
            }
            Op::Store { n } => {
                for _ in 0..usize::from(n % 8) + 1 {
                    let Some((request, op)) = h.stores.pop_front() else {
                        break;
                    };
                    let reply: StoreReply = h.local.execute(&op);
                    h.input(Input::Stored { request, reply });
                }
            }
            Op::Advance { secs: s } => {
                h.now = Timestamp::from_secs(secs + u64::from(s));
                h.peer.now = h.now;
            }
            Op::Timeout => {
                if let Some(i) = h.peer_conn
                    && h.peer.conns[i]
                        .session
                        .poll_timeout()
                        .is_some_and(|w| w.at <= h.now)
                {
                    h.peer.timeout(i);
                    h.collect();
                }
                let Some(w) = h.worker.poll_timeout() else {
                    continue;
                };
                h.now = h.now.max(w.at);
                h.peer.now = h.now;
                h.worker.handle_timeout(h.now);
                // Handling a deadline moves it past now: a host never spins on it.
                if let Some(w) = h.worker.poll_timeout() {
                    assert!(w.at > h.now, "a deadline still due after handle_timeout");
                }
                h.drain();
            }
        }
    }
});
