//! The WebSocket to an always-on node (Minca 04 Network §5.2, §5.3), its handshake
//! `minca-peer/v3` (§6.1), and the `who` that opens every space connection (§6.4, §9.1): one
//! sans-IO machine per socket on each side, [`ClientSocket`] and [`NodeSocket`].
//!
//! ```text
//! 1. node   → client   {"type":"challenge","nonce":Nₛ,"did":nodeDid}                      text
//! 2. client → node     {"type":"hello","did","nonce":N꜀,"sig","read"?,"readKey"?,"member"?,"earlier"?}
//! 3. node   → client   {"type":"welcome","did","sig","note"?}                               text
//! 4. binary frames of UTF-8 JSON {type, from, payload} either way; the first each side sends is who
//! ```
//!
//! The host hands each machine the frames of one socket, in order, and executes its outputs in
//! order; a machine handles one frame completely before the next, so no data frame can overtake
//! the welcome (§5.2). Every message after the handshake is attributed to the socket's proven
//! peer, never to its `from` (§9).
//!
//! Both sides hold the socket's peer to the per-peer limits of every transport, through the code
//! the mesh uses ([`super::limits`]): every frame after the handshake is charged to the peer's
//! byte rate (§7.4) before it is parsed, and every `live` message to its live allowance (burst
//! 60, 20 a second, at most 65 536 characters, §9.2); one beyond them is dropped and counted
//! ([`Counters::limits`]) and the socket stays open. Messages of other types (the sync of 05
//! travels here too) are handed on with only the byte rate applied. As on the mesh, nothing live
//! goes to or is taken from a peer whose `who` shows a former member (§9.2).
//!
//! The `/peer` close-code table of §5.3 was lost; the codes are [`PROTOCOL_ERROR`] (4002, the
//! one the prose names), [`REFUSED`], [`HANDSHAKE_TIMEOUT`], [`LET_GO`] and [`TOO_BIG`] (1009, the
//! prose's), recorded in `docs/decisions.md`.

use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use serde_json::{Map, Value, json};

use super::auth;
use super::limits::{ByteAllowance, LIVE, LimitCounters, LiveAllowance, fits};
use super::note::{NoteChecker, account_of};
use super::read_proof::{self, ReadProof, Reader, Review};
use super::space_access::SpaceAccess;
use crate::codec::did_key::DidKey;
use crate::core::{Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, P256Secret};

/// Largest frame either side reads (§5.3: "the reference node closes the socket (1009) on a frame
/// over 16 MiB"); a larger one closes the socket with [`TOO_BIG`].
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// How long a side waits for the other's handshake frame (the challenge, the hello, the welcome)
/// before closing with [`HANDSHAKE_TIMEOUT`]. The spec names no number; 10 s is the one §6.3 and
/// §7.2 give a handshake and a `who`.
pub const HANDSHAKE_WAIT: Duration = super::mesh::machine::HANDSHAKE_TIMEOUT;

/// A WebSocket close: code and reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloseCode {
    /// The close code.
    pub code: u16,
    /// The close reason.
    pub reason: &'static str,
}

/// A frame out of order or not of the handshake's shape (§5.2: "close 4002, 'protocol error'"),
/// and every refusal of a welcome by a client.
pub const PROTOCOL_ERROR: CloseCode = CloseCode {
    code: 4002,
    reason: "protocol error",
};

/// A well-formed hello the node refuses: a signature that does not verify, a read proof that does
/// not hold, a session turned away while a new key is due, or a space the node does not hold, all
/// alike (§5.3 step 1); and a client in a private
/// space that holds no read key and so cannot complete the handshake (§6.3).
pub const REFUSED: CloseCode = CloseCode {
    code: 4003,
    reason: "not allowed",
};

/// The other side's handshake frame did not come within [`HANDSHAKE_WAIT`].
pub const HANDSHAKE_TIMEOUT: CloseCode = CloseCode {
    code: 4008,
    reason: "handshake timeout",
};

/// A reader let go of (§6.3): its key is no longer current and its account reads no more, its
/// `who` did not come in time, or it is a former member while a new key is due.
pub const LET_GO: CloseCode = CloseCode {
    code: 4004,
    reason: "no longer a reader",
};

/// A frame over [`MAX_FRAME_BYTES`] (§5.3: 1009).
pub const TOO_BIG: CloseCode = CloseCode {
    code: 1009,
    reason: "message too big",
};

/// The message type of §9.1.
pub const WHO: &str = "who";

/// The path an always-on node serves its sockets on (§5.3), on the same port as its relay.
pub const PEER_PATH: &str = "/peer";

/// The space a `/peer` upgrade asks for: `Some(space id)` when `target` (the request target,
/// query included) names [`PEER_PATH`], `None` for any other path (the relay's). The id is the
/// `space` query parameter as `decodeURIComponent` reads it (the client wrote it with
/// `encodeURIComponent`, §5.2). A target without one, or with one that does not decode, asks for
/// the empty id: the node still challenges at once (§5.3 step 1) and, holding no such space,
/// refuses the hello exactly as a stranger's.
pub fn peer_space(target: &str) -> Option<String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != PEER_PATH {
        return None;
    }
    let raw = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("space="))
        .unwrap_or("");
    Some(super::node_url::percent_decode(raw).unwrap_or_default())
}

/// What a socket machine is told.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// A text frame arrived.
    Text(String),
    /// A binary frame arrived.
    Binary(Vec<u8>),
    /// The transport refused a frame of this many bytes before buffering it all (a host whose
    /// WebSocket library enforces [`MAX_FRAME_BYTES`] itself).
    FrameTooLarge(usize),
    /// The application sends a message of the space: `{type, from, payload}` goes out once the
    /// handshake is done and `who` has gone first; before that, or after a close, it is dropped,
    /// as is a `live` one whose payload is longer than a receiver takes (§9.2).
    Send {
        /// The message type.
        kind: String,
        /// The payload.
        payload: Value,
    },
    /// The space's access history changed (§6.3): the node looks again at its reader.
    AccessChanged,
    /// The socket closed.
    Closed,
}

/// What a socket machine asks for, in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Send a text frame.
    SendText(String),
    /// Send a binary frame.
    SendBinary(Vec<u8>),
    /// Close the socket; nothing more is sent.
    Close(CloseCode),
    /// The handshake is done: the socket is the peer with this session DID.
    Open {
        /// The peer's proven session DID.
        peer: String,
    },
    /// The peer's `who` arrived: its account (§6.4), or `None` when it proved none.
    Account {
        /// The peer's session DID.
        peer: String,
        /// The account, the note's issuer.
        account: Option<String>,
    },
    /// A message of the space, attributed to the socket's peer (§9): within the peer's byte rate
    /// (§7.4), and a `live` one within its live allowance and size (§9.2).
    Message {
        /// The peer's session DID (never the message's `from`).
        peer: String,
        /// The account its `who` proved, if any.
        account: Option<String>,
        /// The message type.
        kind: String,
        /// The payload (`null` when absent).
        payload: Value,
    },
    /// The node let go of its reader (§6.3); a host that keeps a
    /// [`read_proof::TurnedAway`] remembers a former member here.
    LetGo {
        /// The peer's session DID.
        peer: String,
        /// The account its `who` showed, if any.
        account: Option<String>,
    },
}

/// Frames a socket ignored or refused, by kind, for operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Text frames after the handshake (ignored, §5.2, §5.3).
    pub ignored_text: u64,
    /// Binary frames that are not a JSON object with a string `type` (ignored).
    pub malformed: u64,
    /// Frames after the socket closed.
    pub after_close: u64,
    /// Application sends dropped: the socket is not open, the type is `who` (the socket's own),
    /// or a `live` one whose payload is longer than a receiver takes or whose peer's `who` shows
    /// a former member (§9.2).
    pub dropped_sends: u64,
    /// Live messages dropped from a peer whose `who` shows a former member (§9.2), as the mesh
    /// drops them.
    pub live_from_former_member: u64,
    /// Frames and live messages the per-peer limits dropped (§7.4, §9.2), counted as the mesh
    /// counts them.
    pub limits: LimitCounters,
}

/// This side's session: its key, its DID and its note (the proof of its account, if any).
#[derive(Clone, Debug)]
pub struct Session {
    key: P256Secret,
    did: String,
    note: Option<String>,
}

impl Session {
    /// A session of `key`, with `note` its proof. `None` if `key` is not a P-256 secret.
    pub fn new(crypto: &dyn CryptoProvider, key: P256Secret, note: Option<String>) -> Option<Self> {
        let did = DidKey::P256(crypto.p256_public_key(&key).ok()?.0).to_did();
        Some(Self { key, did, note })
    }

    /// The session DID.
    pub fn did(&self) -> &str {
        &self.did
    }
}

/// The shared tools a socket machine works with.
struct Ctx<N, R> {
    crypto: &'static dyn CryptoProvider,
    notes: N,
    rng: R,
    session: Session,
    out: VecDeque<Output>,
    counters: Counters,
}

impl<N: NoteChecker, R: rand_core::CryptoRng> Ctx<N, R> {
    fn close(&mut self, code: CloseCode) {
        self.out.push_back(Output::Close(code));
    }

    fn send_message(&mut self, kind: &str, payload: Value) {
        let msg = json!({"type": kind, "from": self.session.did, "payload": payload});
        self.out.push_back(Output::SendBinary(
            serde_json::to_vec(&msg).unwrap_or_default(),
        ));
    }

    /// §9.1: the first message on a space connection, as soon as the peer is admitted.
    fn send_who(&mut self) {
        let payload = match &self.session.note {
            Some(note) => json!({ "note": note }),
            None => json!({}),
        };
        self.send_message(WHO, payload);
    }
}

/// A parsed text frame of the handshake: its `type` and the object.
fn handshake_frame(text: &str) -> Option<(String, Map<String, Value>)> {
    let Value::Object(obj) = serde_json::from_str(text).ok()? else {
        return None;
    };
    let kind = obj.get("type")?.as_str()?.into();
    Some((kind, obj))
}

/// A non-empty string field.
fn non_empty<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key)?.as_str().filter(|s| !s.is_empty())
}

/// A binary frame after the handshake: `(type, payload)` of a JSON object with a string `type`.
fn message(bytes: &[u8]) -> Option<(String, Value)> {
    let Value::Object(mut obj) = serde_json::from_slice(bytes).ok()? else {
        return None;
    };
    let kind = obj.get("type")?.as_str()?.into();
    Some((kind, obj.remove("payload").unwrap_or(Value::Null)))
}

/// The open part of a socket: who the peer is, what its `who` showed, and what it may still send
/// (§7.4, §9.2).
#[derive(Clone, Debug)]
struct Open {
    peer: String,
    account: Option<String>,
    bytes: ByteAllowance,
    live: LiveAllowance,
}

impl Open {
    /// The peer `peer`, proven at `now`, with full allowances.
    fn new(peer: String, now: Timestamp) -> Self {
        Self {
            peer,
            account: None,
            bytes: ByteAllowance::new(now),
            live: LiveAllowance::new(now),
        }
    }

    /// Whether the peer's `who` shows a former member of `space` (03 §9.2): nothing live goes to
    /// it or is taken from it (§9.2).
    fn shows_former_member(&self, space: Option<&impl SpaceAccess>) -> bool {
        let account = self.account.as_deref();
        account
            .zip(space)
            .is_some_and(|(a, s)| s.is_former_member(a))
    }

    /// Charges a frame of `len` bytes to the peer's byte rate (§7.4): whether it may be read.
    fn charge<N, R>(&mut self, ctx: &mut Ctx<N, R>, len: usize, now: Timestamp) -> bool {
        ctx.counters.limits.frame(&mut self.bytes, now, len)
    }

    /// Handles one binary frame after the handshake, already charged, from a peer whose `who`
    /// shows a `former` member or not; returns whether it was a `who`.
    fn on_binary<N: NoteChecker, R: rand_core::CryptoRng>(
        &mut self,
        ctx: &mut Ctx<N, R>,
        bytes: &[u8],
        now: Timestamp,
        former: bool,
    ) -> bool {
        let Some((kind, payload)) = message(bytes) else {
            ctx.counters.malformed += 1;
            return false;
        };
        if kind == WHO {
            let note = payload.get("note").cloned().unwrap_or(Value::Null);
            self.account = account_of(&ctx.notes, &note, &self.peer, now);
            ctx.out.push_back(Output::Account {
                peer: self.peer.clone(),
                account: self.account.clone(),
            });
            return true;
        }
        if kind == LIVE && former {
            ctx.counters.live_from_former_member += 1;
            return false;
        }
        if kind == LIVE && !ctx.counters.limits.live(&mut self.live, now, &payload) {
            return false;
        }
        ctx.out.push_back(Output::Message {
            peer: self.peer.clone(),
            account: self.account.clone(),
            kind,
            payload,
        });
        false
    }
}

/// Whether the application may send `kind` with `payload` on an open socket to a peer whose
/// `who` shows a `former` member or not: `who` is the socket's own (§9.1), and a live message
/// goes to no former member and is held to the size a receiver takes (§9.2, as the mesh checks a
/// send).
fn sendable(kind: &str, payload: &Value, former: bool) -> bool {
    kind != WHO && (kind != LIVE || (!former && fits(payload)))
}

fn frame_len(input: &Input) -> Option<usize> {
    match input {
        Input::Text(t) => Some(t.len()),
        Input::Binary(b) => Some(b.len()),
        Input::FrameTooLarge(n) => Some(*n),
        _ => None,
    }
}

#[derive(Clone, Debug)]
enum ClientState {
    AwaitChallenge {
        deadline: Timestamp,
    },
    AwaitWelcome {
        node: String,
        nonce: String,
        deadline: Timestamp,
    },
    Open(Open),
    Closed,
}

/// The client side of one socket to a node (§5.2, §6.1).
pub struct ClientSocket<A, N, R> {
    ctx: Ctx<N, R>,
    space: A,
    pin: Option<String>,
    state: ClientState,
}

impl<A: SpaceAccess, N: NoteChecker, R: rand_core::CryptoRng> ClientSocket<A, N, R> {
    /// A client on a socket just opened at `now` to a node URL for `space`, pinned to `pin`
    /// ([`super::node_url::NodeUrl::pin`]) if any.
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        notes: N,
        rng: R,
        session: Session,
        space: A,
        pin: Option<String>,
        now: Timestamp,
    ) -> Self {
        Self {
            ctx: Ctx {
                crypto,
                notes,
                rng,
                session,
                out: VecDeque::new(),
                counters: Counters::default(),
            },
            space,
            pin,
            state: ClientState::AwaitChallenge {
                deadline: now.saturating_add(HANDSHAKE_WAIT),
            },
        }
    }

    /// The node's session DID once the handshake is done.
    pub fn peer(&self) -> Option<&str> {
        match &self.state {
            ClientState::Open(o) => Some(&o.peer),
            _ => None,
        }
    }

    /// What was ignored or refused so far.
    pub fn counters(&self) -> Counters {
        self.ctx.counters
    }

    fn fail(&mut self, code: CloseCode) {
        self.ctx.close(code);
        self.state = ClientState::Closed;
    }

    fn on_challenge(&mut self, now: Timestamp, input: Input) {
        let challenge = match &input {
            Input::Text(t) => handshake_frame(t),
            _ => None,
        };
        let Some((kind, obj)) = challenge else {
            return self.fail(PROTOCOL_ERROR);
        };
        let (Some(nonce), Some(node)) = (
            obj.get("nonce").and_then(Value::as_str),
            non_empty(&obj, "did"),
        ) else {
            return self.fail(PROTOCOL_ERROR);
        };
        if kind != "challenge" {
            return self.fail(PROTOCOL_ERROR);
        }
        let space_id = self.space.space_id();
        let label = auth::peer_client_label(&space_id, &self.ctx.session.did, node, nonce);
        let ctx = &mut self.ctx;
        let Some(proof) = read_proof::prove(
            ctx.crypto,
            &mut ctx.rng,
            &self.space,
            &label,
            ctx.session.note.as_deref(),
        ) else {
            return self.fail(REFUSED);
        };
        let Some(sig) = auth::sign(ctx.crypto, &ctx.session.key, &label) else {
            return self.fail(REFUSED);
        };
        let my_nonce = auth::nonce(&mut ctx.rng);
        let mut hello = Map::new();
        hello.insert("type".into(), json!("hello"));
        hello.insert("did".into(), json!(ctx.session.did));
        hello.insert("nonce".into(), json!(my_nonce));
        hello.insert("sig".into(), json!(sig));
        proof.write_into(&mut hello);
        ctx.out
            .push_back(Output::SendText(Value::Object(hello).to_string()));
        self.state = ClientState::AwaitWelcome {
            node: node.into(),
            nonce: my_nonce,
            deadline: now.saturating_add(HANDSHAKE_WAIT),
        };
    }

    /// §5.2's pin: the node DID is the pinned DID, or the welcome's note grants the pinned
    /// account's whole power to the node DID.
    fn pin_holds(&self, node: &str, note: Option<&Value>, now: Timestamp) -> bool {
        let Some(pin) = &self.pin else {
            return true;
        };
        if node == pin {
            return true;
        }
        let Some(token) = note.and_then(Value::as_str) else {
            return false;
        };
        self.ctx
            .notes
            .check(token, now)
            .is_ok_and(|n| n.aud == node && n.iss == *pin && n.grants_everything_about(pin))
    }

    fn on_welcome(&mut self, now: Timestamp, input: Input, node: String, nonce: String) {
        let welcome = match &input {
            Input::Text(t) => handshake_frame(t),
            _ => None,
        };
        let Some((kind, obj)) = welcome else {
            return self.fail(PROTOCOL_ERROR);
        };
        let Some(did) = non_empty(&obj, "did") else {
            return self.fail(PROTOCOL_ERROR);
        };
        if kind != "welcome" || did != node {
            return self.fail(PROTOCOL_ERROR);
        }
        let label = auth::peer_server_label(&self.space.space_id(), &node, &nonce);
        let sig = obj.get("sig").and_then(Value::as_str).unwrap_or("");
        if !auth::verify(self.ctx.crypto, &node, &label, sig)
            || !self.pin_holds(&node, obj.get("note"), now)
        {
            return self.fail(PROTOCOL_ERROR);
        }
        self.ctx.out.push_back(Output::Open { peer: node.clone() });
        self.ctx.send_who();
        self.state = ClientState::Open(Open::new(node, now));
    }
}

impl<A: SpaceAccess, N: NoteChecker, R: rand_core::CryptoRng> Machine for ClientSocket<A, N, R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        if matches!(self.state, ClientState::Closed) {
            self.ctx.counters.after_close += 1;
            return;
        }
        if let Input::Closed = input {
            self.state = ClientState::Closed;
            return;
        }
        if frame_len(&input).is_some_and(|n| n > MAX_FRAME_BYTES) {
            return self.fail(TOO_BIG);
        }
        match core::mem::replace(&mut self.state, ClientState::Closed) {
            ClientState::AwaitChallenge { deadline } => match input {
                Input::Text(_) | Input::Binary(_) => self.on_challenge(now, input),
                Input::Send { .. } => {
                    self.ctx.counters.dropped_sends += 1;
                    self.state = ClientState::AwaitChallenge { deadline };
                }
                _ => self.state = ClientState::AwaitChallenge { deadline },
            },
            ClientState::AwaitWelcome {
                node,
                nonce,
                deadline,
            } => match input {
                Input::Text(_) | Input::Binary(_) => self.on_welcome(now, input, node, nonce),
                other => {
                    if let Input::Send { .. } = other {
                        self.ctx.counters.dropped_sends += 1;
                    }
                    self.state = ClientState::AwaitWelcome {
                        node,
                        nonce,
                        deadline,
                    };
                }
            },
            ClientState::Open(mut open) => {
                let former = open.shows_former_member(Some(&self.space));
                match input {
                    Input::Text(t) if open.charge(&mut self.ctx, t.len(), now) => {
                        self.ctx.counters.ignored_text += 1;
                    }
                    Input::Binary(b) if open.charge(&mut self.ctx, b.len(), now) => {
                        open.on_binary(&mut self.ctx, &b, now, former);
                    }
                    Input::Send { kind, payload } if sendable(&kind, &payload, former) => {
                        self.ctx.send_message(&kind, payload);
                    }
                    Input::Send { .. } => self.ctx.counters.dropped_sends += 1,
                    _ => {}
                }
                self.state = ClientState::Open(open);
            }
            ClientState::Closed => {}
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.ctx.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        match &self.state {
            ClientState::AwaitChallenge { deadline }
            | ClientState::AwaitWelcome { deadline, .. } => {
                Some(Wakeup::new(*deadline, "node handshake timeout"))
            }
            _ => None,
        }
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if let Some(w) = self.poll_timeout()
            && now >= w.at
        {
            self.fail(HANDSHAKE_TIMEOUT);
        }
    }
}

#[derive(Clone, Debug)]
enum NodeState {
    AwaitHello { nonce: String, deadline: Timestamp },
    Open { open: Open, reader: Reader },
    Closed,
}

/// The node side of one `/peer` socket (§5.3, §6.1, §6.3).
///
/// It keeps its read check true while the socket lives (§6.3): the host feeds
/// [`Input::AccessChanged`] to every socket of a space whenever that space's access history
/// changes and whenever another peer of it connects, and the socket closes with [`LET_GO`] when
/// its reader must go.
pub struct NodeSocket<A, N, R> {
    ctx: Ctx<N, R>,
    space_id: String,
    space: Option<A>,
    state: NodeState,
}

impl<A: SpaceAccess, N: NoteChecker, R: rand_core::CryptoRng> NodeSocket<A, N, R> {
    /// A `/peer` socket upgraded at `now` for the space id of its `?space=` query; `space` is the
    /// node's access to it, `None` when the node does not hold it. The challenge is queued at
    /// once, before the space is looked at (§5.3 step 1).
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        notes: N,
        mut rng: R,
        session: Session,
        space_id: &str,
        space: Option<A>,
        now: Timestamp,
    ) -> Self {
        let nonce = auth::nonce(&mut rng);
        let mut ctx = Ctx {
            crypto,
            notes,
            rng,
            session,
            out: VecDeque::new(),
            counters: Counters::default(),
        };
        let challenge = json!({"type": "challenge", "nonce": nonce, "did": ctx.session.did});
        ctx.out.push_back(Output::SendText(challenge.to_string()));
        Self {
            ctx,
            space_id: space_id.into(),
            space,
            state: NodeState::AwaitHello {
                nonce,
                deadline: now.saturating_add(HANDSHAKE_WAIT),
            },
        }
    }

    /// The client's session DID once the handshake is done.
    pub fn peer(&self) -> Option<&str> {
        match &self.state {
            NodeState::Open { open, .. } => Some(&open.peer),
            _ => None,
        }
    }

    /// What was ignored or refused so far.
    pub fn counters(&self) -> Counters {
        self.ctx.counters
    }

    /// The node's access to the space, to change it; feed [`Input::AccessChanged`] after.
    pub fn space_mut(&mut self) -> Option<&mut A> {
        self.space.as_mut()
    }

    fn fail(&mut self, code: CloseCode) {
        self.ctx.close(code);
        self.state = NodeState::Closed;
    }

    fn on_hello(&mut self, now: Timestamp, input: Input, nonce: &str) {
        let hello = match &input {
            Input::Text(t) => handshake_frame(t),
            _ => None,
        };
        let Some((kind, obj)) = hello else {
            return self.fail(PROTOCOL_ERROR);
        };
        let (Some(client), Some(client_nonce), Some(sig)) = (
            non_empty(&obj, "did"),
            obj.get("nonce").and_then(Value::as_str),
            obj.get("sig").and_then(Value::as_str),
        ) else {
            return self.fail(PROTOCOL_ERROR);
        };
        if kind != "hello" {
            return self.fail(PROTOCOL_ERROR);
        }
        let ctx = &mut self.ctx;
        let label = auth::peer_client_label(&self.space_id, client, &ctx.session.did, nonce);
        // A node without the space answers exactly as to a stranger: the same close, after the
        // same signature check.
        let signed = auth::verify(ctx.crypto, client, &label, sig);
        let admission = match &self.space {
            Some(space) if signed && !space.turned_away(client) => read_proof::verify(
                ctx.crypto,
                &ctx.notes,
                space,
                &label,
                client,
                &ReadProof::from_object(&obj),
                now,
            ),
            _ => None,
        };
        let Some(admission) = admission else {
            return self.fail(REFUSED);
        };
        let w = auth::peer_server_label(&self.space_id, &ctx.session.did, client_nonce);
        let Some(sig) = auth::sign(ctx.crypto, &ctx.session.key, &w) else {
            return self.fail(REFUSED);
        };
        let mut welcome = Map::new();
        welcome.insert("type".into(), json!("welcome"));
        welcome.insert("did".into(), json!(ctx.session.did));
        welcome.insert("sig".into(), json!(sig));
        if let Some(note) = &ctx.session.note {
            welcome.insert("note".into(), json!(note));
        }
        ctx.out
            .push_back(Output::SendText(Value::Object(welcome).to_string()));
        ctx.out.push_back(Output::Open {
            peer: client.into(),
        });
        ctx.send_who();
        self.state = NodeState::Open {
            open: Open::new(client.into(), now),
            reader: Reader::new(admission, now),
        };
    }

    /// Looks again at the reader (§6.3) and lets it go if it must.
    fn review(&mut self, now: Timestamp) {
        let (NodeState::Open { open, reader }, Some(space)) = (&self.state, &self.space) else {
            return;
        };
        if reader.review(space, now) == Review::LetGo {
            self.ctx.out.push_back(Output::LetGo {
                peer: open.peer.clone(),
                account: reader.account().map(String::from),
            });
            self.fail(LET_GO);
        }
    }
}

impl<A: SpaceAccess, N: NoteChecker, R: rand_core::CryptoRng> Machine for NodeSocket<A, N, R> {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Timestamp, input: Input) {
        if matches!(self.state, NodeState::Closed) {
            self.ctx.counters.after_close += 1;
            return;
        }
        if let Input::Closed = input {
            self.state = NodeState::Closed;
            return;
        }
        if frame_len(&input).is_some_and(|n| n > MAX_FRAME_BYTES) {
            return self.fail(TOO_BIG);
        }
        match core::mem::replace(&mut self.state, NodeState::Closed) {
            NodeState::AwaitHello { nonce, deadline } => match input {
                Input::Text(_) | Input::Binary(_) => self.on_hello(now, input, &nonce),
                other => {
                    if let Input::Send { .. } = other {
                        self.ctx.counters.dropped_sends += 1;
                    }
                    self.state = NodeState::AwaitHello { nonce, deadline };
                }
            },
            NodeState::Open {
                mut open,
                mut reader,
            } => {
                let access_changed = matches!(input, Input::AccessChanged);
                let former = open.shows_former_member(self.space.as_ref());
                let mut who = false;
                match input {
                    Input::Text(t) if open.charge(&mut self.ctx, t.len(), now) => {
                        self.ctx.counters.ignored_text += 1;
                    }
                    Input::Binary(b) if open.charge(&mut self.ctx, b.len(), now) => {
                        who = open.on_binary(&mut self.ctx, &b, now, former);
                        if who {
                            reader.who_arrived(open.account.clone());
                        }
                    }
                    Input::Send { kind, payload } if sendable(&kind, &payload, former) => {
                        self.ctx.send_message(&kind, payload);
                    }
                    Input::Send { .. } => self.ctx.counters.dropped_sends += 1,
                    _ => {}
                }
                let recheck = who || access_changed;
                self.state = NodeState::Open { open, reader };
                if recheck {
                    self.review(now);
                }
            }
            NodeState::Closed => {}
        }
    }

    fn poll(&mut self) -> Option<Output> {
        self.ctx.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        match (&self.state, &self.space) {
            (NodeState::AwaitHello { deadline, .. }, _) => {
                Some(Wakeup::new(*deadline, "node hello timeout"))
            }
            (NodeState::Open { reader, .. }, Some(space)) => {
                match reader.review(space, Timestamp::ZERO) {
                    Review::LookAgainAt(at) => Some(Wakeup::new(at, "who grace")),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        match &self.state {
            NodeState::AwaitHello { deadline, .. } if now >= *deadline => {
                self.fail(HANDSHAKE_TIMEOUT);
            }
            NodeState::Open { .. } => self.review(now),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_p256};
    use crate::minca::note::tests::{key, whole_power};
    use crate::minca::note::{CMD_ALL, Es256Notes, Note};
    use crate::minca::space_access::{HeldReadKey, MemorySpace};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    type Client = ClientSocket<MemorySpace, Es256Notes, ChaCha20Rng>;
    type Node = NodeSocket<MemorySpace, Es256Notes, ChaCha20Rng>;

    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);
    const EXP: u64 = 1_900_000_000;
    const SPACE: &str = "space-1";

    fn notes() -> Es256Notes {
        Es256Notes::new(default_provider())
    }

    /// A session key with a note from its own account root.
    struct Person {
        key: P256Secret,
        did: String,
        account: String,
        note: String,
        root: P256Secret,
    }

    fn person(seed: u64) -> Person {
        let (root, account) = key(seed);
        let (key, did) = key(seed + 1000);
        let note = whole_power(&root, &did, EXP);
        Person {
            key,
            did,
            account,
            note,
            root,
        }
    }

    fn session(p: &Person, with_note: bool) -> Session {
        let note = with_note.then(|| p.note.clone());
        Session::new(default_provider(), p.key.clone(), note).unwrap()
    }

    fn read_key(seed: u64) -> HeldReadKey {
        let c = default_provider();
        let s = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(seed));
        HeldReadKey {
            did: DidKey::P256(c.p256_public_key(&s).unwrap().0).to_did(),
            secret: Some(s),
            seal_key: Some([seed as u8; 32]),
        }
    }

    fn private(keys: &[&HeldReadKey], readers: &[&Person]) -> MemorySpace {
        let mut s = MemorySpace::private(SPACE);
        for k in keys {
            s.add_key((*k).clone());
        }
        for r in readers {
            s.add_reader(&r.account);
        }
        s
    }

    fn client(p: &Person, space: MemorySpace, pin: Option<&str>) -> Client {
        ClientSocket::new(
            default_provider(),
            notes(),
            ChaCha20Rng::seed_from_u64(11),
            session(p, true),
            space,
            pin.map(String::from),
            NOW,
        )
    }

    fn node_with(s: Session, space: Option<MemorySpace>) -> Node {
        NodeSocket::new(
            default_provider(),
            notes(),
            ChaCha20Rng::seed_from_u64(12),
            s,
            SPACE,
            space,
            NOW,
        )
    }

    fn node(p: &Person, space: Option<MemorySpace>) -> Node {
        node_with(session(p, true), space)
    }

    /// Everything a side did that is not a frame to the other.
    #[derive(Default, Debug)]
    struct Seen {
        events: Vec<Output>,
        sent: Vec<Output>,
    }

    impl Seen {
        fn closed(&self) -> Option<CloseCode> {
            self.events.iter().find_map(|o| match o {
                Output::Close(c) => Some(*c),
                _ => None,
            })
        }
        fn opened(&self) -> bool {
            self.events.iter().any(|o| matches!(o, Output::Open { .. }))
        }
        fn account(&self) -> Option<Option<String>> {
            self.events.iter().find_map(|o| match o {
                Output::Account { account, .. } => Some(account.clone()),
                _ => None,
            })
        }
    }

    fn frame(o: &Output) -> Option<Input> {
        match o {
            Output::SendText(t) => Some(Input::Text(t.clone())),
            Output::SendBinary(b) => Some(Input::Binary(b.clone())),
            _ => None,
        }
    }

    /// Runs the two machines against each other until neither has anything to say.
    fn pump(c: &mut Client, n: &mut Node) -> (Seen, Seen) {
        let (mut cs, mut ns) = (Seen::default(), Seen::default());
        loop {
            let mut moved = false;
            while let Some(o) = n.poll() {
                moved = true;
                match frame(&o) {
                    Some(f) => {
                        ns.sent.push(o);
                        c.handle(NOW, f);
                    }
                    None => ns.events.push(o),
                }
            }
            while let Some(o) = c.poll() {
                moved = true;
                match frame(&o) {
                    Some(f) => {
                        cs.sent.push(o);
                        n.handle(NOW, f);
                    }
                    None => cs.events.push(o),
                }
            }
            if !moved {
                return (cs, ns);
            }
        }
    }

    fn text(o: &Output) -> Value {
        match o {
            Output::SendText(t) => serde_json::from_str(t).unwrap(),
            Output::SendBinary(b) => serde_json::from_slice(b).unwrap(),
            other => panic!("not a frame: {other:?}"),
        }
    }

    #[test]
    fn a_public_space() {
        let (alice, host) = (person(1), person(2));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        let (cs, ns) = pump(&mut c, &mut n);
        assert!(cs.opened() && ns.opened(), "{cs:?} {ns:?}");
        assert_eq!(c.peer(), Some(host.did.as_str()));
        assert_eq!(n.peer(), Some(alice.did.as_str()));
        assert_eq!(ns.account(), Some(Some(alice.account.clone())));
        assert_eq!(cs.account(), Some(Some(host.account.clone())));
    }

    #[test]
    fn the_three_text_frames_carry_the_fields_and_signatures_of_minca_peer_v3() {
        let (alice, host) = (person(1), person(2));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        let (cs, ns) = pump(&mut c, &mut n);
        let challenge = text(&ns.sent[0]);
        let hello = text(&cs.sent[0]);
        let welcome = text(&ns.sent[1]);
        assert_eq!(challenge["type"], "challenge");
        assert_eq!(challenge["did"], host.did.as_str());
        let ns_nonce = challenge["nonce"].as_str().unwrap();
        assert_eq!(ns_nonce.len(), 22);
        assert_eq!(hello["type"], "hello");
        assert_eq!(hello["did"], alice.did.as_str());
        let nc = hello["nonce"].as_str().unwrap();
        assert_eq!(nc.len(), 22);
        let h = alloc::format!(
            "minca-peer/v3|client|{SPACE}|{}|{}|{ns_nonce}",
            alice.did,
            host.did
        );
        let c_ = default_provider();
        assert!(auth::verify(
            c_,
            &alice.did,
            &h,
            hello["sig"].as_str().unwrap()
        ));
        assert_eq!(welcome["type"], "welcome");
        assert_eq!(welcome["note"], host.note.as_str());
        let w = alloc::format!("minca-peer/v3|server|{SPACE}|{}|{nc}", host.did);
        assert!(auth::verify(
            c_,
            &host.did,
            &w,
            welcome["sig"].as_str().unwrap()
        ));
        // Then binary frames: the first each side sends is its who.
        let Output::SendBinary(_) = &ns.sent[2] else {
            panic!("{:?}", ns.sent[2])
        };
        let who = text(&ns.sent[2]);
        assert_eq!(
            who,
            json!({"type": "who", "from": host.did, "payload": {"note": host.note}})
        );
        assert_eq!(text(&cs.sent[1])["type"], "who");
    }

    #[test]
    fn the_challenge_is_sent_at_once_before_looking_at_the_space() {
        let host = person(2);
        for space in [None, Some(MemorySpace::private(SPACE))] {
            let mut n = node(&host, space);
            let first = text(&n.poll().unwrap());
            assert_eq!(first["type"], "challenge");
            assert_eq!(first["did"], host.did.as_str());
            assert_eq!(n.poll(), None);
        }
        // Fresh: 16 bytes drawn from the socket's own random stream, so two sockets of one
        // node challenge with different nonces.
        let nonces: Vec<String> = [21, 22]
            .map(|seed| {
                let mut n: Node = NodeSocket::new(
                    default_provider(),
                    notes(),
                    ChaCha20Rng::seed_from_u64(seed),
                    session(&host, true),
                    SPACE,
                    None,
                    NOW,
                );
                let nonce = text(&n.poll().unwrap())["nonce"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert_eq!(crate::codec::base64url::decode(&nonce).unwrap().len(), 16);
                nonce
            })
            .into();
        assert_ne!(nonces[0], nonces[1]);
    }

    #[test]
    fn a_private_space() {
        let (alice, host, eve) = (person(1), person(2), person(3));
        let k = read_key(100);
        let mut c = client(&alice, private(&[&k], &[&alice]), None);
        let mut n = node(&host, Some(private(&[&k], &[&alice])));
        let (cs, ns) = pump(&mut c, &mut n);
        assert!(cs.opened() && ns.opened());
        // A client with another key is refused, and never sees a welcome.
        let mut c = client(&eve, private(&[&read_key(7)], &[]), None);
        let mut n = node(&host, Some(private(&[&k], &[&alice])));
        let (cs, ns) = pump(&mut c, &mut n);
        assert_eq!(ns.closed(), Some(REFUSED));
        assert!(!cs.opened() && !ns.opened());
        // A client with no read key does not complete the handshake.
        let mut c = client(&eve, MemorySpace::private(SPACE), None);
        let mut n = node(&host, Some(private(&[&k], &[&alice])));
        let (cs, _) = pump(&mut c, &mut n);
        assert_eq!(cs.closed(), Some(REFUSED));
        assert!(cs.sent.is_empty());
    }

    #[test]
    fn a_node_that_does_not_hold_the_space_refuses_exactly_as_it_refuses_a_stranger() {
        let (alice, host, eve) = (person(1), person(2), person(3));
        let k = read_key(100);
        let run = |p: &Person, cspace: MemorySpace, nspace: Option<MemorySpace>| {
            let mut c = client(p, cspace, None);
            let mut n = node(&host, nspace);
            let (_, ns) = pump(&mut c, &mut n);
            (ns.events, ns.sent.len())
        };
        let stranger = run(
            &eve,
            private(&[&read_key(7)], &[]),
            Some(private(&[&k], &[])),
        );
        let not_held = run(&alice, private(&[&k], &[&alice]), None);
        let public_not_held = run(&alice, MemorySpace::public(SPACE), None);
        assert_eq!(stranger, (alloc::vec![Output::Close(REFUSED)], 1));
        assert_eq!(not_held, stranger);
        assert_eq!(public_not_held, stranger);
    }

    #[test]
    fn a_hello_signed_for_another_node_is_refused() {
        let (alice, host, other) = (person(1), person(2), person(4));
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        let challenge = text(&n.poll().unwrap());
        let h = auth::peer_client_label(
            SPACE,
            &alice.did,
            &other.did,
            challenge["nonce"].as_str().unwrap(),
        );
        let sig = auth::sign(default_provider(), &alice.key, &h).unwrap();
        let hello =
            json!({"type":"hello","did":alice.did,"nonce":"AAAAAAAAAAAAAAAAAAAAAA","sig":sig});
        n.handle(NOW, Input::Text(hello.to_string()));
        assert_eq!(n.poll(), Some(Output::Close(REFUSED)));
    }

    #[test]
    fn a_hello_that_is_not_a_hello_closes_with_a_protocol_error() {
        let host = person(2);
        for bad in [
            Input::Binary(b"{}".to_vec()),
            Input::Text("not json".into()),
            Input::Text(r#"{"type":"hallo","did":"d","nonce":"n","sig":"s"}"#.into()),
            Input::Text(r#"{"type":"hello","did":"","nonce":"n","sig":"s"}"#.into()),
            Input::Text(r#"{"type":"hello","did":"d","nonce":1,"sig":"s"}"#.into()),
        ] {
            let mut n = node(&host, Some(MemorySpace::public(SPACE)));
            n.poll();
            n.handle(NOW, bad.clone());
            assert_eq!(n.poll(), Some(Output::Close(PROTOCOL_ERROR)), "{bad:?}");
            n.handle(NOW, Input::Text("{}".into()));
            assert_eq!(n.poll(), None);
            assert_eq!(n.counters().after_close, 1);
        }
    }

    /// A client that has had the node's challenge; returns the client and the node's nonce W uses.
    fn challenged(alice: &Person, host: &Person, pin: Option<&str>) -> (Client, String) {
        let mut c = client(alice, MemorySpace::public(SPACE), pin);
        let challenge = json!({"type":"challenge","nonce":"Ns","did":host.did});
        c.handle(NOW, Input::Text(challenge.to_string()));
        let hello = text(&c.poll().unwrap());
        (c, hello["nonce"].as_str().unwrap().into())
    }

    fn welcome_from(signer: &Person, did: &str, nc: &str, note: Option<&str>) -> Input {
        let w = auth::peer_server_label(SPACE, did, nc);
        let sig = auth::sign(default_provider(), &signer.key, &w).unwrap();
        let mut v = json!({"type":"welcome","did":did,"sig":sig});
        if let Some(note) = note {
            v["note"] = json!(note);
        }
        Input::Text(v.to_string())
    }

    #[test]
    fn a_node_that_does_not_welcome_properly_is_refused() {
        let (alice, host, other) = (person(1), person(2), person(4));
        for first in [
            Input::Binary(b"{\"type\":\"challenge\"}".to_vec()),
            Input::Text(r#"{"type":"welcome","nonce":"n","did":"d"}"#.into()),
            Input::Text(r#"{"type":"challenge","nonce":5,"did":"d"}"#.into()),
            Input::Text(r#"{"type":"challenge","nonce":"n","did":""}"#.into()),
            Input::Text(r#"{"type":"challenge","nonce":"n"}"#.into()),
        ] {
            let mut c = client(&alice, MemorySpace::public(SPACE), None);
            c.handle(NOW, first.clone());
            assert_eq!(c.poll(), Some(Output::Close(PROTOCOL_ERROR)), "{first:?}");
        }
        let (_, nc) = challenged(&alice, &host, None);
        let seconds = [
            Input::Text(r#"{"type":"challenge","nonce":"n","did":"d"}"#.into()),
            Input::Text(r#"{"type":"welcome","did":"","sig":"s"}"#.into()),
            welcome_from(&other, &other.did, &nc, None),
            welcome_from(&other, &host.did, &nc, None),
            welcome_from(&host, &host.did, "another nonce", None),
            Input::Binary(b"{\"type\":\"live\"}".to_vec()),
        ];
        for second in seconds {
            let (mut c, _) = challenged(&alice, &host, None);
            c.handle(NOW, second.clone());
            assert_eq!(c.poll(), Some(Output::Close(PROTOCOL_ERROR)), "{second:?}");
            assert_eq!(c.peer(), None);
        }
        let (mut c, nc) = challenged(&alice, &host, None);
        c.handle(NOW, welcome_from(&host, &host.did, &nc, None));
        assert_eq!(
            c.poll(),
            Some(Output::Open {
                peer: host.did.clone()
            })
        );
    }

    #[test]
    fn no_data_frame_overtakes_the_welcome() {
        let (alice, host) = (person(1), person(2));
        let (mut c, nc) = challenged(&alice, &host, None);
        let data = json!({"type":"live","from":host.did,"payload":1});
        c.handle(NOW, Input::Binary(data.to_string().into_bytes()));
        c.handle(NOW, welcome_from(&host, &host.did, &nc, None));
        let outs: Vec<Output> = core::iter::from_fn(|| c.poll()).collect();
        assert_eq!(outs, alloc::vec![Output::Close(PROTOCOL_ERROR)]);
    }

    /// §5.2 "one at a time": a data frame read right behind the welcome, before the host polls,
    /// comes out after the socket opens, not dropped and not ahead of it.
    #[test]
    fn a_data_frame_right_behind_the_welcome_follows_the_open() {
        let (alice, host) = (person(1), person(2));
        let (mut c, nc) = challenged(&alice, &host, None);
        c.handle(NOW, welcome_from(&host, &host.did, &nc, None));
        let data = json!({"type":"live","from":host.did,"payload":1});
        c.handle(NOW, Input::Binary(data.to_string().into_bytes()));
        let outs: Vec<Output> = core::iter::from_fn(|| c.poll()).collect();
        let open = outs.iter().position(|o| matches!(o, Output::Open { .. }));
        let message = outs.iter().position(|o| {
            matches!(o, Output::Message { peer, kind, payload, .. }
                if *peer == host.did && kind == "live" && *payload == json!(1))
        });
        assert!(
            matches!((open, message), (Some(o), Some(m)) if o < m),
            "{outs:?}"
        );
    }

    #[test]
    fn text_frames_after_the_welcome_are_ignored_and_binary_frames_are_data() {
        let (alice, host) = (person(1), person(2));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        pump(&mut c, &mut n);
        c.handle(NOW, Input::Text(r#"{"type":"live","payload":1}"#.into()));
        n.handle(NOW, Input::Text(r#"{"type":"live","payload":1}"#.into()));
        assert_eq!((c.poll(), n.poll()), (None, None));
        assert_eq!(c.counters().ignored_text, 1);
        assert_eq!(n.counters().ignored_text, 1);
        c.handle(
            NOW,
            Input::Send {
                kind: "live".into(),
                payload: json!({"type":"typing"}),
            },
        );
        let (cs, ns) = pump(&mut c, &mut n);
        assert!(cs.events.is_empty());
        assert_eq!(
            ns.events,
            alloc::vec![Output::Message {
                peer: alice.did.clone(),
                account: Some(alice.account.clone()),
                kind: "live".into(),
                payload: json!({"type":"typing"}),
            }]
        );
    }

    #[test]
    fn a_message_is_attributed_to_the_connections_peer_not_to_from() {
        let (alice, host, other) = (person(1), person(2), person(4));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        pump(&mut c, &mut n);
        let forged = json!({"type":"sync","from":other.did,"payload":[1]});
        n.handle(NOW, Input::Binary(forged.to_string().into_bytes()));
        let Some(Output::Message { peer, .. }) = n.poll() else {
            panic!()
        };
        assert_eq!(peer, alice.did);
        n.handle(NOW, Input::Binary(b"[1,2]".to_vec()));
        assert_eq!(n.poll(), None);
        assert_eq!(n.counters().malformed, 1);
    }

    #[test]
    fn who_goes_first_and_nothing_of_the_space_is_sent_before_the_handshake() {
        let (alice, host) = (person(1), person(2));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        c.handle(
            NOW,
            Input::Send {
                kind: "live".into(),
                payload: json!(1),
            },
        );
        n.handle(
            NOW,
            Input::Send {
                kind: "live".into(),
                payload: json!(1),
            },
        );
        let (cs, ns) = pump(&mut c, &mut n);
        assert_eq!(c.counters().dropped_sends, 1);
        assert_eq!(n.counters().dropped_sends, 1);
        let binaries = |s: &Seen| -> Vec<Value> {
            s.sent
                .iter()
                .filter(|o| matches!(o, Output::SendBinary(_)))
                .map(text)
                .collect()
        };
        assert_eq!(binaries(&cs).len(), 1);
        assert_eq!(binaries(&cs)[0]["type"], "who");
        assert_eq!(binaries(&ns)[0]["type"], "who");
    }

    #[test]
    fn a_peer_showing_someone_elses_note_is_known_as_nobody() {
        let (alice, host, mallory) = (person(1), person(2), person(5));
        // Mallory's session shows Alice's note, made out to Alice's key.
        let copied = Session::new(
            default_provider(),
            mallory.key.clone(),
            Some(alice.note.clone()),
        )
        .unwrap();
        let mut c = ClientSocket::new(
            default_provider(),
            notes(),
            ChaCha20Rng::seed_from_u64(1),
            copied,
            MemorySpace::public(SPACE),
            None,
            NOW,
        );
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        let (_, ns) = pump(&mut c, &mut n);
        assert!(ns.opened());
        assert_eq!(ns.account(), Some(None));
        // A session without a note has no account either.
        let bare = Session::new(default_provider(), alice.key.clone(), None).unwrap();
        let mut c = ClientSocket::new(
            default_provider(),
            notes(),
            ChaCha20Rng::seed_from_u64(1),
            bare,
            MemorySpace::public(SPACE),
            None,
            NOW,
        );
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        let (_, ns) = pump(&mut c, &mut n);
        assert_eq!(ns.account(), Some(None));
    }

    fn pinned_run(host_session: Session, pin: &str) -> Seen {
        let alice = person(1);
        let mut c = client(&alice, MemorySpace::public(SPACE), Some(pin));
        let mut n = node_with(host_session, Some(MemorySpace::public(SPACE)));
        pump(&mut c, &mut n).0
    }

    #[test]
    fn pinning_the_node() {
        let (host, other) = (person(2), person(4));
        assert!(pinned_run(session(&host, false), &host.did).opened());
        let refused = pinned_run(session(&host, false), &other.did);
        assert_eq!(refused.closed(), Some(PROTOCOL_ERROR));
        assert!(!refused.opened());
    }

    #[test]
    fn only_a_note_for_everything_about_the_account_pins_the_node_by_its_account() {
        let host = person(2);
        let account = host.account.clone();
        assert!(pinned_run(session(&host, true), &account).opened());
        assert_eq!(
            pinned_run(session(&host, false), &account).closed(),
            Some(PROTOCOL_ERROR)
        );
        let full = Note {
            iss: account.clone(),
            aud: host.did.clone(),
            sub: account.clone(),
            cmd: CMD_ALL.into(),
            pol: Vec::new(),
            exp: EXP,
            nbf: None,
        };
        let narrower = [
            Note {
                cmd: "/space/write".into(),
                ..full.clone()
            },
            Note {
                pol: alloc::vec![json!(["==", ".space", "s"])],
                ..full.clone()
            },
            Note {
                sub: "did:key:zSomethingElse".into(),
                ..full.clone()
            },
            Note {
                aud: person(6).did,
                ..full.clone()
            },
            Note {
                exp: NOW.as_secs(),
                ..full.clone()
            },
            // Valid later, not at the client's time.
            Note {
                nbf: Some(NOW.as_secs() + 60),
                ..full.clone()
            },
        ];
        let since_a_minute = Note {
            nbf: Some(NOW.as_secs() - 60),
            ..full.clone()
        };
        let token = notes().issue(&host.root, &since_a_minute).unwrap();
        let s = Session::new(default_provider(), host.key.clone(), Some(token)).unwrap();
        assert!(pinned_run(s, &account).opened());
        for note in narrower {
            let token = notes().issue(&host.root, &note).unwrap();
            let s = Session::new(default_provider(), host.key.clone(), Some(token)).unwrap();
            assert_eq!(
                pinned_run(s, &account).closed(),
                Some(PROTOCOL_ERROR),
                "{note:?}"
            );
        }
        // A note for everything by another account does not pin this one.
        let stranger = person(7);
        let token = whole_power(&stranger.root, &host.did, EXP);
        let s = Session::new(default_provider(), host.key.clone(), Some(token)).unwrap();
        assert_eq!(pinned_run(s, &account).closed(), Some(PROTOCOL_ERROR));
    }

    #[test]
    fn the_current_key_lets_you_in_an_old_one_only_with_a_note_of_a_reader() {
        let (bob, host, carol) = (person(1), person(2), person(3));
        let (k0, k1) = (read_key(100), read_key(101));
        let node_space = || private(&[&k0, &k1], &[&bob]);
        let mut c = client(&bob, private(&[&k0], &[]), None);
        let mut n = node(&host, Some(node_space()));
        assert!(pump(&mut c, &mut n).1.opened());
        let mut c = client(&carol, private(&[&k0], &[]), None);
        let mut n = node(&host, Some(node_space()));
        assert_eq!(pump(&mut c, &mut n).1.closed(), Some(REFUSED));
        let mut c = client(&carol, private(&[&k0, &k1], &[]), None);
        let mut n = node(&host, Some(node_space()));
        assert!(pump(&mut c, &mut n).1.opened());
    }

    #[test]
    fn a_reader_on_an_old_key_is_kept_by_its_who_and_let_go_when_it_reads_no_more() {
        let (bob, host) = (person(1), person(2));
        let (k0, k1) = (read_key(100), read_key(101));
        let mut c = client(&bob, private(&[&k0], &[]), None);
        let mut n = node(&host, Some(private(&[&k0], &[&bob])));
        pump(&mut c, &mut n);
        n.space_mut().unwrap().add_key(k1);
        n.handle(NOW, Input::AccessChanged);
        assert_eq!(n.poll(), None);
        n.space_mut().unwrap().remove_member(&bob.account);
        n.handle(NOW, Input::AccessChanged);
        assert_eq!(
            n.poll(),
            Some(Output::LetGo {
                peer: bob.did.clone(),
                account: Some(bob.account.clone())
            })
        );
        assert_eq!(n.poll(), Some(Output::Close(LET_GO)));
        n.handle(
            NOW,
            Input::Send {
                kind: "live".into(),
                payload: json!(1),
            },
        );
        assert_eq!(n.poll(), None);
    }

    #[test]
    fn a_reader_whose_who_does_not_come_within_10_s_of_its_handshake_is_let_go() {
        let (bob, host) = (person(1), person(2));
        let (k0, k1) = (read_key(100), read_key(101));
        let mut n = node(&host, Some(private(&[&k0], &[&bob])));
        // Bob's hello, but his who is held back.
        let mut c = client(&bob, private(&[&k0], &[]), None);
        let challenge = n.poll().unwrap();
        c.handle(NOW, frame(&challenge).unwrap());
        n.handle(NOW, frame(&c.poll().unwrap()).unwrap());
        assert_eq!(n.peer(), Some(bob.did.as_str()));
        while n.poll().is_some() {}
        assert_eq!(n.poll_timeout(), None);
        n.space_mut().unwrap().add_key(k1);
        n.handle(NOW, Input::AccessChanged);
        let at = n.poll_timeout().unwrap().at;
        assert_eq!(at, NOW.saturating_add(read_proof::WHO_GRACE));
        n.handle_timeout(Timestamp::from_millis(at.as_millis() - 1));
        assert_eq!(n.poll(), None);
        n.handle_timeout(at);
        assert!(matches!(
            n.poll(),
            Some(Output::LetGo { account: None, .. })
        ));
        assert_eq!(n.poll(), Some(Output::Close(LET_GO)));
    }

    /// §9.2 "attributes it to the peer's session DID, and to the account the peer's `who`
    /// proved", on the client side as on the node's
    /// (`text_frames_after_the_welcome_are_ignored_and_binary_frames_are_data`).
    #[test]
    fn the_client_attributes_a_live_message_to_the_nodes_session_and_the_account_its_who_proved() {
        let (alice, host) = (person(1), person(2));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        pump(&mut c, &mut n);
        n.handle(
            NOW,
            Input::Send {
                kind: "live".into(),
                payload: json!({"type": "typing"}),
            },
        );
        let (cs, _) = pump(&mut c, &mut n);
        assert_eq!(
            cs.events,
            alloc::vec![Output::Message {
                peer: host.did.clone(),
                account: Some(host.account.clone()),
                kind: "live".into(),
                payload: json!({"type": "typing"}),
            }]
        );
    }

    /// Sends `kind` from one machine, pumps, and says how many messages of it reached the other.
    fn exchange(c: &mut Client, n: &mut Node, from_client: bool, kind: &str) -> usize {
        let send = Input::Send {
            kind: kind.into(),
            payload: json!(1),
        };
        if from_client {
            c.handle(NOW, send);
        } else {
            n.handle(NOW, send);
        }
        let (cs, ns) = pump(c, n);
        let heard = if from_client { ns } else { cs };
        heard
            .events
            .iter()
            .filter(|o| matches!(o, Output::Message { kind: k, .. } if k == kind))
            .count()
    }

    /// §9.2 on a node socket, either side, as the mesh does it
    /// (`nothing_live_goes_to_or_is_taken_from_a_former_member`): nothing live goes to a peer
    /// whose `who` shows a former member, and a live message from one is dropped and counted;
    /// other messages still cross and the socket stays. The client holds the node's account
    /// removed from a private space; the node, one that lets any session in (a public space,
    /// where no read key is due to let the peer go first).
    #[test]
    fn nothing_live_goes_to_or_is_taken_from_a_peer_whose_who_shows_a_former_member() {
        let (alice, host) = (person(1), person(2));
        let k0 = read_key(100);
        // The client side.
        let mut mine = private(&[&k0], &[&alice]);
        mine.remove_member(&host.account);
        let mut c = client(&alice, mine, None);
        let mut n = node(&host, Some(private(&[&k0], &[&alice])));
        let (cs, _) = pump(&mut c, &mut n);
        assert_eq!(cs.account(), Some(Some(host.account.clone())));
        assert_eq!(exchange(&mut c, &mut n, false, "live"), 0);
        assert_eq!(c.counters().live_from_former_member, 1);
        assert_eq!(exchange(&mut c, &mut n, true, "live"), 0);
        assert_eq!(c.counters().dropped_sends, 1);
        assert_eq!(exchange(&mut c, &mut n, false, "sync"), 1);
        assert_eq!(exchange(&mut c, &mut n, true, "sync"), 1);
        assert!(c.peer().is_some() && n.peer().is_some());
        // The node side.
        let mut theirs = MemorySpace::public(SPACE);
        theirs.remove_member(&alice.account);
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(theirs));
        let (_, ns) = pump(&mut c, &mut n);
        assert_eq!(ns.account(), Some(Some(alice.account.clone())));
        assert_eq!(exchange(&mut c, &mut n, true, "live"), 0);
        assert_eq!(n.counters().live_from_former_member, 1);
        assert_eq!(exchange(&mut c, &mut n, false, "live"), 0);
        assert_eq!(n.counters().dropped_sends, 1);
        assert_eq!(exchange(&mut c, &mut n, true, "sync"), 1);
        assert_eq!(exchange(&mut c, &mut n, false, "sync"), 1);
        assert!(c.peer().is_some() && n.peer().is_some());
    }

    #[test]
    fn while_a_new_key_is_due_a_former_member_is_let_go_when_its_who_arrives() {
        let (carol, host) = (person(3), person(2));
        let k0 = read_key(100);
        let space = private(&[&k0], &[&carol]);
        // Carol proves with the current key but sends no member: step 3 admits her.
        let mut n = node(&host, Some(space));
        let mut c = client(
            &carol,
            private(
                &[&HeldReadKey {
                    seal_key: None,
                    ..k0.clone()
                }],
                &[],
            ),
            None,
        );
        n.space_mut().unwrap().remove_member(&carol.account);
        let (_, ns) = pump(&mut c, &mut n);
        assert!(ns.opened());
        assert_eq!(ns.closed(), Some(LET_GO));
    }

    #[test]
    fn while_a_new_key_is_due_a_session_let_go_as_a_former_member_is_turned_away_when_it_redials() {
        let (carol, host) = (person(3), person(2));
        let k0 = read_key(100);
        let bare = HeldReadKey {
            seal_key: None,
            ..k0.clone()
        };
        let mut space = private(&[&k0], &[&carol]);
        space.remove_member(&carol.account);
        let redial = |space: MemorySpace| {
            let mut c = client(&carol, private(&[&bare], &[]), None);
            let mut n = node(&host, Some(space));
            pump(&mut c, &mut n).1
        };
        // Without a member, step 3 alone would let her in again.
        assert!(redial(space.clone()).opened());
        space.turn_away(&carol.did);
        assert_eq!(redial(space.clone()).closed(), Some(REFUSED));
        // Once the key changed, the steps alone decide.
        let mut rotated = space;
        rotated.add_key(read_key(101));
        assert!(!rotated.turned_away(&carol.did));
    }

    #[test]
    fn a_peer_upgrade_names_its_space_in_the_query_as_encode_uri_component_wrote_it() {
        use crate::minca::node_url::NodeUrl;
        let url = NodeUrl::parse("ws://127.0.0.1:8787/peer").unwrap();
        let space = "my space/é?&=";
        let dialled = url.dial_url(space);
        let target = &dialled[dialled.find("/peer").unwrap()..];
        assert_eq!(peer_space(target).as_deref(), Some(space));
        assert_eq!(peer_space("/peer?x=1&space=abc").as_deref(), Some("abc"));
        // No space, or one that does not decode: the empty id, which no node holds.
        assert_eq!(peer_space("/peer").as_deref(), Some(""));
        assert_eq!(peer_space("/peer?space=%zz").as_deref(), Some(""));
        // Any other path is the relay's.
        for other in ["/", "/peers?space=a", "/relay", "/peer/x?space=a"] {
            assert_eq!(peer_space(other), None, "{other}");
        }
    }

    #[test]
    fn a_frame_over_16_mib_closes_with_1009() {
        let (alice, host) = (person(1), person(2));
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        n.poll();
        n.handle(NOW, Input::FrameTooLarge(MAX_FRAME_BYTES + 1));
        assert_eq!(n.poll(), Some(Output::Close(TOO_BIG)));
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        pump(&mut c, &mut n);
        // Read whole once the byte rate has refilled past the `who` (§7.4: a burst of one
        // largest frame).
        let later = NOW.saturating_add(Duration::from_secs(1));
        n.handle(later, Input::Binary(alloc::vec![b' '; MAX_FRAME_BYTES]));
        assert_eq!(n.counters().malformed, 1);
        n.handle(NOW, Input::Binary(alloc::vec![b' '; MAX_FRAME_BYTES + 1]));
        assert_eq!(n.poll(), Some(Output::Close(TOO_BIG)));
        // A client cut off there takes the close like any other.
        c.handle(NOW, Input::Closed);
        c.handle(NOW, Input::Binary(b"{}".to_vec()));
        assert_eq!(c.poll(), None);
        assert_eq!(c.peer(), None);
    }

    #[test]
    fn a_handshake_frame_that_does_not_come_in_10_s_closes_the_socket() {
        let (alice, host) = (person(1), person(2));
        let mut n = node(&host, Some(MemorySpace::public(SPACE)));
        n.poll();
        let at = n.poll_timeout().unwrap().at;
        n.handle_timeout(Timestamp::from_millis(at.as_millis() - 1));
        assert_eq!(n.poll(), None);
        n.handle_timeout(at);
        assert_eq!(n.poll(), Some(Output::Close(HANDSHAKE_TIMEOUT)));
        assert_eq!(n.poll_timeout(), None);
        let mut c = client(&alice, MemorySpace::public(SPACE), None);
        c.handle_timeout(NOW.saturating_add(HANDSHAKE_WAIT));
        assert_eq!(c.poll(), Some(Output::Close(HANDSHAKE_TIMEOUT)));
    }
}
