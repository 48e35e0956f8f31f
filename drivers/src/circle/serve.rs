//! `weft circle serve`: one device's NAP-MESH shell ([`weft_proto::circle::Shell`]) on real
//! sockets and disk.
//!
//! [`CircleServe`] is a [`WsMachine`] over the WebSocket layer ([`crate::ws`]) on the smol
//! adapter. It moves bytes and nothing else:
//!
//! - **the napplet face** (`/napplet?token=…` on the loopback listener, behind the
//!   [`BrowserGuard`]): a token names one napplet of the config; its text frames are
//!   [`Input::Napplet`], the shell's replies and deliveries go back as text. One socket per
//!   napplet: a second one replaces the first (closed 4000). A closed socket is
//!   [`Input::NappletGone`].
//! - **member links** (`/member` on either listener, and the configured member URLs dialled, each
//!   redialled [`REDIAL_MS`] after it closes or fails): each link runs a
//!   [`LinkAuth`] until the far side proves its circle key,
//!   then is [`Input::LinkUp`] with that key (the shell decides whether it is a member); its
//!   frames are [`Input::Link`], [`Output::ToLink`] goes out as text. A request with an
//!   `Origin` is refused on `/member` (no web page speaks for a member).
//! - **the control face** (`/control?token=…`, loopback): grants and revocations, pairing by
//!   invite (`invite` answers the invite string; `join` takes one and answers once the shell's
//!   [`Output::Paired`] says how it ended), pairing by hand (`pair`, `accept`), and the counters
//!   (`stats`), one JSON object a message.
//! - **the store**: [`Output::Store`] is written to the embedded event store (redb, as
//!   `weft nostr serve`) before the next output runs; [`Output::ReadBacklog`] reads each filter
//!   (at most [`MAX_BACKLOG_PER_FILTER`] events) and answers [`Input::Backlog`], `None` when the
//!   store fails.
//! - **blobs**: [`Output::CheckBlobs`] is answered from the blob directory (a file named by the
//!   hash's hex is held).
//! - **pairings**: every record is kept as a file under `data_dir/pairings/` and handed to the
//!   shell at start ([`Input::PairingRecord`]).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use weft_proto::circle::invite::Invite;
use weft_proto::circle::link::{self, LinkAuth, Step};
use weft_proto::circle::napplet::Limits;
use weft_proto::circle::pairing::named_peer;
use weft_proto::circle::shell::{Input, NappletId, Output, Shell, ShellConfig, Stats};
use weft_proto::codec::hex;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret};
use weft_proto::nostr::event::Event;
use weft_proto::nostr::relay::EventStore;

use super::config::CircleConfig;
use crate::host::Peer;
use crate::ws::{BrowserGuard, Frame, Refusal, Request, WsEffect, WsMachine};

/// How long after a dialled member link closes or fails it is dialled again, in milliseconds.
pub const REDIAL_MS: u64 = 1_000;

/// Most events one backlog read returns per filter (a filter's own `limit` lowers it).
pub const MAX_BACKLOG_PER_FILTER: usize = 500;

/// Most control sockets at once.
pub const MAX_CONTROL_SOCKETS: usize = 8;

/// The largest message on any socket: a member frame (the napplet face's bound is lower and the
/// shell enforces it).
pub const MAX_MESSAGE_BYTES: usize = weft_proto::circle::member::MAX_MEMBER_FRAME_BYTES;

/// A dial target: a member URL by its place in the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberUrl {
    /// Its place among the configured members.
    pub index: usize,
    /// The URL.
    pub url: String,
}

impl AsRef<str> for MemberUrl {
    fn as_ref(&self) -> &str {
        &self.url
    }
}

/// What the layer tells the serve machine.
#[derive(Debug)]
pub enum ServeInput {
    /// A napplet's socket opened.
    NappletOpened(ConnId, NappletId),
    /// A control socket opened.
    ControlOpened(ConnId),
    /// A member link opened (accepted or dialled).
    LinkOpened(ConnId),
    /// A text message on a socket.
    Text(ConnId, String),
    /// A socket closed.
    Closed(ConnId),
    /// A member URL's dial finished as `conn`.
    Dialled(ConnId, usize),
    /// A member URL's dial failed.
    DialFailed(usize),
}

/// What the serve machine asks of the layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeOutput {
    /// Send text on a socket or link.
    Text(ConnId, String),
    /// Close a socket or link.
    Close(ConnId, u16, String),
    /// Dial a member URL.
    Dial(MemberUrl),
}

enum Sock {
    Napplet(NappletId),
    Control,
    Link(Box<LinkAuth>),
}

/// Counters of the driver's own (the shell's are [`Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Links whose far side proved a circle key.
    pub proven: u64,
    /// Links that failed their proof (closed).
    pub failed: u64,
    /// Frames dropped on links not yet proven.
    pub unproven_frames: u64,
    /// Events the store refused to keep.
    pub store_errors: u64,
}

/// One device's shell and everything around it (see the module docs).
pub struct CircleServe<S> {
    shell: Shell<chacha20::ChaCha20Rng>,
    provider: &'static dyn CryptoProvider,
    secret: Secp256k1Secret,
    rng: chacha20::ChaCha20Rng,
    store: S,
    blobs_dir: Option<PathBuf>,
    pairings_dir: Option<PathBuf>,
    tokens: BTreeMap<String, NappletId>,
    names: BTreeMap<NappletId, String>,
    control_token: Option<String>,
    guard: BrowserGuard,
    napplet_conn: BTreeMap<NappletId, ConnId>,
    socks: BTreeMap<ConnId, Sock>,
    members: Vec<String>,
    /// Per member URL: its link when up, when to dial it next when not.
    dials: Vec<(Option<ConnId>, Option<Timestamp>)>,
    links: LinkCounters,
    out: VecDeque<ServeOutput>,
    last_pairing: Option<Event>,
    last_invite: Option<Invite>,
    /// Control sockets waiting for how accepting an invite from this inviter ends.
    joining: BTreeMap<[u8; 32], Vec<ConnId>>,
}

impl<S> std::fmt::Debug for CircleServe<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircleServe")
            .field("pubkey", &hex::encode(&self.shell.pubkey()))
            .field("sockets", &self.socks.len())
            .finish_non_exhaustive()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl<S: EventStore> CircleServe<S> {
    /// The shell for `config`, signing with `secret`, over `store`; `pairings` are the records
    /// kept (handed to the shell when it starts), `pairings_dir` where new ones are kept.
    pub fn new(
        config: &CircleConfig,
        secret: Secp256k1Secret,
        store: S,
        pairings: Vec<Event>,
        pairings_dir: Option<PathBuf>,
        mut rng: chacha20::ChaCha20Rng,
        now: Timestamp,
    ) -> io::Result<Self> {
        use weft_proto::core::rand_core::SeedableRng;
        let provider = crate::server_provider();
        let shell_rng = chacha20::ChaCha20Rng::from_rng(&mut rng);
        let shell = Shell::new(
            provider,
            secret.clone(),
            shell_rng,
            ShellConfig {
                limits: Limits {
                    publish_ttl: config.publish_ttl,
                    subscribe_ttl: config.subscribe_ttl,
                },
                blobs: true,
            },
        )
        .map_err(|e| io::Error::other(format!("the circle key: {e:?}")))?;
        let mut tokens = BTreeMap::new();
        let mut names = BTreeMap::new();
        for (i, n) in config.napplets.iter().enumerate() {
            let id = NappletId(i as u64 + 1);
            tokens.insert(n.token.clone(), id);
            names.insert(id, n.name.clone());
        }
        let mut me = Self {
            shell,
            provider,
            secret,
            rng,
            store,
            blobs_dir: config.blobs_dir.clone(),
            pairings_dir,
            tokens,
            names,
            control_token: config.control_token.clone(),
            guard: BrowserGuard::new(config.listen, config.origins.clone()),
            napplet_conn: BTreeMap::new(),
            socks: BTreeMap::new(),
            members: config.members.clone(),
            dials: vec![(None, Some(Timestamp::from_millis(0))); config.members.len()],
            links: LinkCounters::default(),
            out: VecDeque::new(),
            last_pairing: None,
            last_invite: None,
            joining: BTreeMap::new(),
        };
        me.feed(now, Input::Online(true));
        for (i, n) in config.napplets.iter().enumerate() {
            if n.granted {
                eprintln!(
                    "weft circle serve: napplet {} {}",
                    n.name,
                    weft_proto::circle::GRANT_NOTICE
                );
                me.feed(now, Input::Grant(NappletId(i as u64 + 1)));
            }
        }
        for record in pairings {
            me.feed(now, Input::PairingRecord(record));
        }
        Ok(me)
    }

    /// The guard's rules are for the face at `listen` (the bound address, once known).
    pub fn set_listen(&mut self, listen: SocketAddr, origins: Vec<String>) {
        self.guard = BrowserGuard::new(listen, origins);
    }

    /// The shell.
    pub fn shell(&self) -> &Shell<chacha20::ChaCha20Rng> {
        &self.shell
    }

    /// The driver's counters.
    pub fn link_counters(&self) -> &LinkCounters {
        &self.links
    }

    /// Runs one input through the shell and every output it leads to, in order; answers to store
    /// reads and blob checks go back in before the next output.
    fn feed(&mut self, now: Timestamp, input: Input) {
        self.shell.handle(now, input);
        self.drain(now);
    }

    /// Runs every output the shell holds, in order, feeding answers back as they come.
    fn drain(&mut self, now: Timestamp) {
        let mut inputs = VecDeque::new();
        loop {
            while let Some(output) = self.shell.poll() {
                match output {
                    Output::ToNapplet { napplet, reply } => {
                        if let Some(&conn) = self.napplet_conn.get(&napplet) {
                            self.out.push_back(ServeOutput::Text(conn, reply.to_text()));
                        }
                    }
                    Output::ToLink { link, frame } => {
                        self.out.push_back(ServeOutput::Text(link, frame.to_text()));
                    }
                    Output::Store(event) => {
                        if let Err(e) = self.store.write(&event, now) {
                            self.links.store_errors += 1;
                            eprintln!("weft circle serve: keeping an event: {}", e.0);
                        }
                    }
                    Output::ReadBacklog { token, filters } => {
                        let events = self.read_backlog(&filters, now);
                        inputs.push_back(Input::Backlog { token, events });
                    }
                    Output::CheckBlobs { token, hashes } => {
                        let held = self.held(&hashes);
                        inputs.push_back(Input::BlobsHeld { token, held });
                    }
                    Output::Pairing(record) => {
                        self.keep_pairing(&record);
                        if record.pubkey == self.shell.pubkey() {
                            self.last_pairing = Some(record);
                        }
                    }
                    Output::Invite(invite) => self.last_invite = Some(invite),
                    Output::ToLinkPair { link, frame } => {
                        self.out.push_back(ServeOutput::Text(link, frame.to_text()));
                    }
                    Output::Paired { peer, outcome } => self.paired(peer, outcome),
                }
            }
            match inputs.pop_front() {
                Some(input) => self.shell.handle(now, input),
                None => break,
            }
        }
    }

    fn read_backlog(
        &mut self,
        filters: &[weft_proto::nostr::message::Filter],
        now: Timestamp,
    ) -> Option<Vec<Event>> {
        let mut seen = std::collections::BTreeSet::new();
        let mut events = Vec::new();
        for f in filters {
            let max = f.limit.map_or(MAX_BACKLOG_PER_FILTER, |l| {
                (l as usize).min(MAX_BACKLOG_PER_FILTER)
            });
            for e in self.store.query(f, None, max, now).ok()? {
                if seen.insert(e.id) {
                    events.push(e);
                }
            }
        }
        Some(events)
    }

    fn held(&self, hashes: &[[u8; 32]]) -> Vec<[u8; 32]> {
        let Some(dir) = &self.blobs_dir else {
            return Vec::new();
        };
        hashes
            .iter()
            .filter(|h| dir.join(hex::encode(*h)).is_file())
            .copied()
            .collect()
    }

    fn keep_pairing(&mut self, record: &Event) {
        let (Some(dir), Some(peer)) = (&self.pairings_dir, named_peer(record)) else {
            return;
        };
        let mine = record.pubkey == self.shell.pubkey();
        let name = format!(
            "{}.{}.json",
            hex::encode(&peer),
            if mine { "ours" } else { "theirs" }
        );
        let name = if mine {
            name
        } else {
            format!("{}.{}", hex::encode(&record.pubkey), "theirs.json")
        };
        if let Err(e) = super::write_private(&dir.join(name), &record.to_json()) {
            eprintln!("weft circle serve: keeping a pairing record: {e}");
        }
    }

    /// Tells the user how a pairing by invite ended, and the control sockets waiting for it.
    fn paired(
        &mut self,
        peer: [u8; 32],
        outcome: Result<(), weft_proto::circle::invite::PairRefusal>,
    ) {
        let npub = weft_proto::codec::bech32::encode_npub(&peer);
        let answer = match outcome {
            Ok(()) => {
                eprintln!("weft circle serve: paired with {npub}");
                json!({"ok": true, "peer": npub, "member": true})
            }
            Err(r) => {
                eprintln!("weft circle serve: pairing with {npub}: {}", r.reason());
                json!({"ok": false, "peer": npub, "error": r.reason()})
            }
        };
        for conn in self.joining.remove(&peer).unwrap_or_default() {
            if matches!(self.socks.get(&conn), Some(Sock::Control)) {
                self.out
                    .push_back(ServeOutput::Text(conn, answer.to_string()));
            }
        }
    }

    fn stats_json(&self) -> Value {
        let s: &Stats = self.shell.stats();
        json!({
            "pubkey": hex::encode(&self.shell.pubkey()),
            "members": self.shell.circle().members().count(),
            "reachable": self.shell.reachable().len(),
            "subscriptions": self.shell.subscription_count(),
            "forwarded": s.forwarded,
            "duplicates": s.duplicates,
            "frames_sent": s.frames_sent,
            "stranger_frames": s.stranger_frames,
            "bad_frames": s.bad_frames,
            "bad_events": s.bad_events,
            "not_forwarded": s.not_forwarded,
            "backlog_rejected": s.backlog_rejected,
            "backlog_answered": s.backlog_answered,
            "blob_answers_ignored": s.blob_answers_ignored,
            "requests_limited": s.requests_limited,
            "napplet_refused": s.napplet_refused,
            "pairings_refused": s.pairings_refused,
            "invites_refused": s.invites_refused,
            "pair_answers_ignored": s.pair_answers_ignored,
            "links_proven": self.links.proven,
            "links_failed": self.links.failed,
            "unproven_frames": self.links.unproven_frames,
            "store_errors": self.links.store_errors,
        })
    }

    fn control(&mut self, now: Timestamp, conn: ConnId, text: &str) {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let napplet = v
            .get("napplet")
            .and_then(Value::as_str)
            .and_then(|name| self.names.iter().find(|(_, n)| *n == name))
            .map(|(id, _)| *id);
        let answer = match (v.get("op").and_then(Value::as_str), napplet) {
            (Some("grant"), Some(id)) => {
                self.feed(now, Input::Grant(id));
                let name = self.names.get(&id).cloned().unwrap_or_default();
                json!({"ok": true, "notice": format!("{name} {}", weft_proto::circle::GRANT_NOTICE)})
            }
            (Some("revoke"), Some(id)) => {
                self.feed(now, Input::Revoke(id));
                json!({"ok": true})
            }
            (Some("grant" | "revoke"), None) => json!({"ok": false, "error": "no such napplet"}),
            (Some("stats"), _) => self.stats_json(),
            (Some("invite"), _) => {
                self.last_invite = None;
                self.feed(now, Input::Invite);
                match self.last_invite.take() {
                    Some(invite) => json!({"ok": true, "invite": invite.to_text(),
                        "expires": invite.expires}),
                    None => json!({"ok": false, "error": "no invite made"}),
                }
            }
            (Some("join"), _) => {
                match v
                    .get("invite")
                    .and_then(Value::as_str)
                    .ok_or_else(|| String::from("invite: the invite string"))
                    .and_then(|t| Invite::parse(t).map_err(|e| format!("invite: {}", e.reason())))
                {
                    Ok(invite) => {
                        // Answered when the shell says how it ended (Output::Paired).
                        let waiting = self.joining.entry(invite.inviter).or_default();
                        if waiting.len() < MAX_CONTROL_SOCKETS {
                            waiting.push(conn);
                        }
                        self.feed(now, Input::AcceptInvite(invite));
                        return;
                    }
                    Err(e) => json!({"ok": false, "error": e}),
                }
            }
            (Some("pair"), _) => match v.get("peer").and_then(Value::as_str).and_then(read_key) {
                Some(peer) => {
                    self.last_pairing = None;
                    self.feed(now, Input::Pair { peer });
                    let ours = self.last_pairing.take().map(|e| e.to_value());
                    json!({"ok": ours.is_some(), "record": ours})
                }
                None => json!({"ok": false, "error": "peer: an npub or 64 hex digits"}),
            },
            (Some("accept"), _) => {
                match v
                    .get("record")
                    .and_then(|r| Event::from_value(r).ok())
                    .filter(|r| named_peer(r) == Some(self.shell.pubkey()))
                {
                    Some(record) => {
                        let refused = self.shell.stats().pairings_refused;
                        self.feed(now, Input::PairingRecord(record.clone()));
                        let ok = self.shell.stats().pairings_refused == refused;
                        if ok {
                            self.keep_pairing(&record);
                        }
                        json!({"ok": ok, "member": self.shell.circle().is_member(&record.pubkey)})
                    }
                    None => {
                        json!({"ok": false, "error": "record: a pairing record naming this user"})
                    }
                }
            }
            _ => json!({"ok": false,
                "error": "op: grant, revoke, stats, invite, join, pair or accept"}),
        };
        self.out
            .push_back(ServeOutput::Text(conn, answer.to_string()));
    }

    fn link_opened(&mut self, now: Timestamp, conn: ConnId) {
        match LinkAuth::new(self.provider, self.secret.clone(), &mut self.rng, now) {
            Ok(auth) => {
                self.socks.insert(conn, Sock::Link(Box::new(auth)));
                self.drain_auth(now, conn);
            }
            Err(_) => self
                .out
                .push_back(ServeOutput::Close(conn, 1011, "circle key".into())),
        }
    }

    fn drain_auth(&mut self, now: Timestamp, conn: ConnId) {
        let Some(Sock::Link(auth)) = self.socks.get_mut(&conn) else {
            return;
        };
        let mut failed = None;
        while let Some(o) = auth.poll() {
            match o {
                link::Output::Send(text) => self.out.push_back(ServeOutput::Text(conn, text)),
                link::Output::Fail(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            self.links.failed += 1;
            self.socks.remove(&conn);
            self.out
                .push_back(ServeOutput::Close(conn, 4001, e.reason().into()));
            self.link_gone(now, conn);
        }
    }

    fn link_gone(&mut self, now: Timestamp, conn: ConnId) {
        let at = now.saturating_add(ms(REDIAL_MS));
        for d in self.dials.iter_mut() {
            if d.0 == Some(conn) {
                *d = (None, Some(at));
            }
        }
    }

    fn text(&mut self, now: Timestamp, conn: ConnId, text: String) {
        match self.socks.get_mut(&conn) {
            Some(Sock::Napplet(n)) => {
                let napplet = *n;
                self.feed(now, Input::Napplet { napplet, text });
            }
            Some(Sock::Control) => self.control(now, conn, &text),
            Some(Sock::Link(auth)) => {
                if auth.proven().is_some() {
                    if link::is_handshake(&text) {
                        self.links.unproven_frames += 1;
                        return;
                    }
                    return self.feed(now, Input::Link { link: conn, text });
                }
                match auth.handle_text(&text) {
                    Step::Proven(key) => {
                        self.links.proven += 1;
                        self.drain_auth(now, conn);
                        self.feed(now, Input::LinkUp { link: conn, key });
                    }
                    Step::Dropped => self.links.unproven_frames += 1,
                    Step::Taken | Step::Failed(_) => self.drain_auth(now, conn),
                }
            }
            None => {}
        }
    }

    fn closed(&mut self, now: Timestamp, conn: ConnId) {
        match self.socks.remove(&conn) {
            Some(Sock::Napplet(n)) if self.napplet_conn.get(&n) == Some(&conn) => {
                self.napplet_conn.remove(&n);
                self.feed(now, Input::NappletGone(n));
            }
            Some(Sock::Link(auth)) => {
                if auth.proven().is_some() {
                    self.feed(now, Input::LinkDown(conn));
                }
                self.link_gone(now, conn);
            }
            Some(Sock::Control) => {
                for waiting in self.joining.values_mut() {
                    waiting.retain(|c| *c != conn);
                }
                self.joining.retain(|_, w| !w.is_empty());
            }
            Some(Sock::Napplet(_)) | None => {}
        }
    }
}

fn read_key(text: &str) -> Option<[u8; 32]> {
    if text.starts_with("npub1") {
        return weft_proto::codec::bech32::decode_npub(text).ok();
    }
    (text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| hex::decode_array::<32>(text).ok())
        .flatten()
}

fn query_token(path: &str) -> Option<&str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
}

impl<S: EventStore> Machine for CircleServe<S> {
    type Input = ServeInput;
    type Output = ServeOutput;

    fn handle(&mut self, now: Timestamp, input: ServeInput) {
        match input {
            ServeInput::NappletOpened(conn, napplet) => {
                if let Some(old) = self.napplet_conn.insert(napplet, conn) {
                    // One socket per napplet: the newer one holds its subscriptions from now.
                    self.socks.remove(&old);
                    self.out
                        .push_back(ServeOutput::Close(old, 4000, "replaced".into()));
                    self.feed(now, Input::NappletGone(napplet));
                }
                self.socks.insert(conn, Sock::Napplet(napplet));
            }
            ServeInput::ControlOpened(conn) => {
                self.socks.insert(conn, Sock::Control);
            }
            ServeInput::LinkOpened(conn) => self.link_opened(now, conn),
            ServeInput::Text(conn, text) => self.text(now, conn, text),
            ServeInput::Closed(conn) => self.closed(now, conn),
            ServeInput::Dialled(conn, index) => {
                if let Some(d) = self.dials.get_mut(index) {
                    d.0 = Some(conn);
                    d.1 = None;
                }
                self.link_opened(now, conn);
            }
            ServeInput::DialFailed(index) => {
                if let Some(d) = self.dials.get_mut(index) {
                    d.0 = None;
                    d.1 = Some(now.saturating_add(ms(REDIAL_MS)));
                }
            }
        }
    }

    fn poll(&mut self) -> Option<ServeOutput> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let mut at = self.shell.poll_timeout();
        for s in self.socks.values() {
            if let Sock::Link(auth) = s {
                at = Wakeup::earliest(at, auth.poll_timeout());
            }
        }
        for (up, next) in &self.dials {
            if up.is_none()
                && let Some(t) = next
            {
                at = Wakeup::earliest(at, Some(Wakeup::new(*t, "circle: dial a member")));
            }
        }
        at
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.shell.poll_timeout().is_some_and(|w| w.at <= now) {
            self.shell.handle_timeout(now);
            self.drain(now);
        }
        let due: Vec<ConnId> = self
            .socks
            .iter()
            .filter_map(|(c, s)| match s {
                Sock::Link(a) if a.poll_timeout().is_some_and(|w| w.at <= now) => Some(*c),
                _ => None,
            })
            .collect();
        for conn in due {
            if let Some(Sock::Link(a)) = self.socks.get_mut(&conn) {
                a.handle_timeout(now);
            }
            self.drain_auth(now, conn);
        }
        for i in 0..self.dials.len() {
            if self.dials[i].0.is_none() && self.dials[i].1.is_some_and(|t| t <= now) {
                self.dials[i].1 = None;
                self.out.push_back(ServeOutput::Dial(MemberUrl {
                    index: i,
                    url: self.members[i].clone(),
                }));
            }
        }
    }
}

impl<S: EventStore> WsMachine for CircleServe<S> {
    type Target = MemberUrl;
    type App = Infallible;

    fn upgrade(
        &mut self,
        _now: Timestamp,
        conn: ConnId,
        peer: &Peer,
        request: &Request,
    ) -> Result<ServeInput, Refusal> {
        let path = request.path.split('?').next().unwrap_or("");
        let refuse = |status: u16, reason: &str| Refusal {
            status,
            reason: format!("{reason}\n"),
        };
        match path {
            "/member" => {
                if request.header("origin").is_some() {
                    return Err(refuse(403, "a member link carries no Origin"));
                }
                let links = self
                    .socks
                    .values()
                    .filter(|s| matches!(s, Sock::Link(_)))
                    .count();
                if links >= weft_proto::circle::MAX_LINKS {
                    return Err(refuse(503, "too many links"));
                }
                Ok(ServeInput::LinkOpened(conn))
            }
            "/napplet" | "/control" if peer.listener == 0 => {
                self.guard.check(request)?;
                let token = query_token(&request.path).unwrap_or("");
                if path == "/control" {
                    let controls = self
                        .socks
                        .values()
                        .filter(|s| matches!(s, Sock::Control))
                        .count();
                    return match &self.control_token {
                        Some(t) if t == token && controls < MAX_CONTROL_SOCKETS => {
                            Ok(ServeInput::ControlOpened(conn))
                        }
                        Some(t) if t == token => Err(refuse(503, "too many control sockets")),
                        _ => Err(refuse(401, "control: a token")),
                    };
                }
                match self.tokens.get(token) {
                    Some(&napplet) => Ok(ServeInput::NappletOpened(conn, napplet)),
                    None => Err(refuse(401, "napplet: a token")),
                }
            }
            _ => Err(refuse(404, "not here")),
        }
    }

    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<ServeInput> {
        match frame {
            Frame::Text(text) => Some(ServeInput::Text(conn, text)),
            Frame::Binary(bytes) => Some(ServeInput::Text(
                conn,
                String::from_utf8_lossy(&bytes).into_owned(),
            )),
            _ => None,
        }
    }

    fn closed(&mut self, conn: ConnId) -> Option<ServeInput> {
        Some(ServeInput::Closed(conn))
    }

    fn dialled(&mut self, conn: ConnId, target: MemberUrl) -> Option<ServeInput> {
        Some(ServeInput::Dialled(conn, target.index))
    }

    fn dial_failed(&mut self, target: MemberUrl) -> Option<ServeInput> {
        Some(ServeInput::DialFailed(target.index))
    }

    fn effect(&mut self, output: ServeOutput) -> Option<WsEffect<MemberUrl, Infallible>> {
        Some(match output {
            ServeOutput::Text(conn, text) => WsEffect::Text { conn, text },
            // The socket was forgotten when the close was asked for; the layer reports no close
            // for a socket its machine closed.
            ServeOutput::Close(conn, code, reason) => WsEffect::Close { conn, code, reason },
            ServeOutput::Dial(target) => WsEffect::Dial(target),
        })
    }
}
