//! The drivers' WebSocket layers (`weft_drivers::ws`) under whatever a peer sends: arbitrary
//! bytes cut into arbitrary chunks, well-formed upgrade heads and `101` answers (so the fuzzer
//! reaches the frame layer at once), frames built from fuzzed header fields (any opcode, RSV
//! bits, mask or none, a declared length that lies), the application sending and closing, the
//! transport closing, and time jumps.
//!
//! Every accepted connection is served twice, by `Ws` (over a machine that accepts every
//! upgrade) and by a `ServerSocket`, fed the same chunks; dials exercise `Ws`'s client side.
//! It must never panic, and:
//! - the two server layers answer every chunk with the same bytes and end at the same time (they
//!   share one rule for heads and one for frames);
//! - neither holds more than `MAX_HEAD_BYTES` for a connection outside tungstenite's own
//!   (limit-bound) buffers after any call;
//! - a socket the peer's bad framing ended (`WsStats::protocol_errors`) got a close frame whose
//!   code is one the ws module's rule for bad framing gives: 1002, 1007 or 1009;
//! - after `handle_timeout(now)` the layer never asks to be woken at or before `now`.
#![no_main]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

/// The fuzz crate's time-advance loop, shared with its targets.
#[path = "../../common/advance.rs"]
mod advance;
use tungstenite::handshake::derive_accept_key;
use weft_drivers::host::{Effect, Peer, Remote};
use weft_drivers::ws::{
    Frame, MAX_HEAD_BYTES, Refusal, Request, ServerSocket, Ws, WsConfig, WsEffect, WsInput,
    WsMachine,
};
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

/// The message limit of both layers: small, so that 1009 is easy to reach.
const LIMIT: usize = 256;

/// The close codes of the ws module's rule for a peer's bad framing.
const BAD_FRAMING: [u16; 3] = [1002, 1007, 1009];

#[derive(Arbitrary, Debug)]
enum Op {
    /// A listener accepted `conn` (a held one is closed first: ids are not reused while held).
    Accept {
        conn: u8,
    },
    /// A well-formed upgrade head.
    Upgrade {
        conn: u8,
        path: bool,
    },
    /// `conn` is dialled (the target `ws://` or `wss://`).
    Dial {
        conn: u8,
        tls: bool,
    },
    /// The `101` answer to the request a dial sent.
    Answer {
        conn: u8,
    },
    /// A frame from fuzzed header fields.
    Frame {
        conn: u8,
        /// FIN, RSV1-3 and the opcode, as the first byte.
        first: u8,
        mask: bool,
        /// Declared instead of the payload's length (16 or 64 bits).
        declared: Option<u32>,
        payload: Vec<u8>,
    },
    /// Arbitrary bytes, cut into chunks of the given sizes (cycled; 0 means 1).
    Bytes {
        conn: u8,
        data: Vec<u8>,
        cuts: Vec<u8>,
    },
    /// The application sends on `conn`: text, binary, a ping, or a close with a code.
    Send {
        conn: u8,
        what: u8,
        code: u16,
    },
    /// The transport closed.
    Closed {
        conn: u8,
    },
    Advance {
        ms: u16,
    },
}

/// What the machine under the layer is told, and told to do.
enum In {
    Heard,
    Do(WsEffect<String, ()>),
}

/// A machine that accepts every upgrade and does what the application says.
#[derive(Default)]
struct Echo {
    out: VecDeque<WsEffect<String, ()>>,
}

impl Machine for Echo {
    type Input = In;
    type Output = WsEffect<String, ()>;
    fn handle(&mut self, _now: Timestamp, input: In) {
        if let In::Do(effect) = input {
            self.out.push_back(effect);
        }
    }
    fn poll(&mut self) -> Option<Self::Output> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        None
    }
    fn handle_timeout(&mut self, _now: Timestamp) {}
}

impl WsMachine for Echo {
    type Target = String;
    type App = ();
    fn upgrade(
        &mut self,
        _now: Timestamp,
        _conn: ConnId,
        _peer: &Peer,
        _request: &Request,
    ) -> Result<In, Refusal> {
        Ok(In::Heard)
    }
    fn message(&mut self, _conn: ConnId, _frame: Frame) -> Option<In> {
        Some(In::Heard)
    }
    fn closed(&mut self, _conn: ConnId) -> Option<In> {
        Some(In::Heard)
    }
    fn dialled(&mut self, _conn: ConnId, _target: String) -> Option<In> {
        Some(In::Heard)
    }
    fn dial_failed(&mut self, _target: String) -> Option<In> {
        Some(In::Heard)
    }
    fn effect(&mut self, output: Self::Output) -> Option<WsEffect<String, ()>> {
        Some(output)
    }
}

const UPGRADE: &str = "GET /{path} HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// A frame's bytes from fuzzed header fields (RFC 6455 §5.2), masked with a fixed key.
fn frame(first: u8, mask: bool, declared: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![first];
    let bit = if mask { 0x80 } else { 0 };
    match declared.map(u64::from).unwrap_or(payload.len() as u64) {
        n if n < 126 && declared.is_none() => f.push(bit | n as u8),
        n if n <= 0xffff => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&n.to_be_bytes());
        }
    }
    let key = [0x11, 0x22, 0x33, 0x44];
    if mask {
        f.extend_from_slice(&key);
    }
    f.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| if mask { b ^ key[i % 4] } else { *b }),
    );
    f
}

/// The `101` for a client request, with its accept key (RFC 6455 §4.2.2).
fn answer(request: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(request).ok()?;
    let key = text
        .split("\r\n")
        .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))?;
    let accept = derive_accept_key(key.as_bytes());
    Some(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
        )
        .into_bytes(),
    )
}

/// The close code of the close frame `sent` ends with, masked (a client's) or not.
fn last_close_code(sent: &[u8]) -> Option<u16> {
    let n = sent.len();
    if n >= 4 && sent[n - 4] == 0x88 && sent[n - 3] == 2 {
        return Some(u16::from_be_bytes([sent[n - 2], sent[n - 1]]));
    }
    if n >= 8 && sent[n - 8] == 0x88 && sent[n - 7] == 0x82 {
        let key = &sent[n - 6..n - 2];
        return Some(u16::from_be_bytes([
            sent[n - 2] ^ key[0],
            sent[n - 1] ^ key[1],
        ]));
    }
    None
}

/// What one call of the layer sent on each connection, and which it closed.
#[derive(Default)]
struct Said {
    sent: BTreeMap<ConnId, Vec<u8>>,
    closed: BTreeSet<ConnId>,
}

fn take(ws: &mut Ws<Echo>) -> Said {
    let mut said = Said::default();
    while let Some(effect) = ws.poll() {
        note(&mut said, effect);
    }
    said
}

fn note(said: &mut Said, effect: Effect<String, Infallible, ()>) {
    match effect {
        Effect::Send { conn, bytes } => said.sent.entry(conn).or_default().extend(bytes),
        Effect::Close { conn } => {
            said.closed.insert(conn);
        }
        _ => {}
    }
}

/// The run: `Ws`, a `ServerSocket` for each accepted connection still open in both, and what
/// the harness knows of each connection.
struct Run {
    ws: Ws<Echo>,
    now: Timestamp,
    /// Accepted connections' twins, until either layer ends the connection.
    twins: BTreeMap<ConnId, ServerSocket>,
    /// Connections the layer holds (accepted or dialled, not yet closed by the transport).
    held: BTreeSet<ConnId>,
    /// Connections the application closed: their close frame is the application's code.
    app_closed: BTreeSet<ConnId>,
    /// The request each dial sent, for its answer.
    requests: BTreeMap<ConnId, Vec<u8>>,
}

impl Run {
    /// Feeds `bytes` from the peer on `conn` to both layers as one chunk, and checks them.
    fn chunk(&mut self, conn: ConnId, bytes: &[u8]) {
        let errors = self.ws.stats().protocol_errors;
        self.ws.handle(
            self.now,
            WsInput::Bytes {
                conn,
                bytes: bytes.to_vec(),
            },
        );
        let said = take(&mut self.ws);
        let sent = said.sent.get(&conn).cloned().unwrap_or_default();
        if self.ws.stats().protocol_errors > errors && !self.app_closed.contains(&conn) {
            let code = last_close_code(&sent);
            assert!(
                code.is_some_and(|c| BAD_FRAMING.contains(&c)),
                "bad framing closed with {code:?}"
            );
        }
        if let Some(twin) = self.twins.get_mut(&conn) {
            let got = twin.received(bytes);
            assert_eq!(got.send, sent, "the two server layers answered differently");
            assert_eq!(
                got.end,
                said.closed.contains(&conn),
                "one layer ended alone"
            );
            assert!(twin.buffered() <= MAX_HEAD_BYTES);
            if got.end {
                self.twins.remove(&conn);
            }
        }
        assert!(self.ws.largest_buffer() <= MAX_HEAD_BYTES);
    }

    fn closed(&mut self, conn: ConnId) {
        self.ws.handle(self.now, WsInput::Closed { conn });
        take(&mut self.ws);
        self.held.remove(&conn);
        self.twins.remove(&conn);
        self.app_closed.remove(&conn);
        self.requests.remove(&conn);
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Accept { conn } => {
                let conn = ConnId(conn.into());
                if self.held.contains(&conn) {
                    self.closed(conn);
                }
                let peer = Peer {
                    listener: 0,
                    remote: Remote::Tcp("127.0.0.1:5000".parse().unwrap()),
                };
                self.ws.handle(self.now, WsInput::Accepted { conn, peer });
                let said = take(&mut self.ws);
                self.held.insert(conn);
                if !said.closed.contains(&conn) {
                    self.twins.insert(conn, ServerSocket::new(LIMIT));
                }
            }
            Op::Upgrade { conn, path } => {
                let head = UPGRADE.replace("{path}", if path { "relay" } else { "" });
                self.chunk(ConnId(conn.into()), head.as_bytes());
            }
            Op::Dial { conn, tls } => {
                let conn = ConnId(conn.into());
                if self.held.contains(&conn) {
                    self.closed(conn);
                }
                let target = if tls {
                    "wss://localhost:9/x"
                } else {
                    "ws://127.0.0.1:9/x"
                };
                self.ws.handle(
                    self.now,
                    WsInput::Dialled {
                        conn,
                        target: target.into(),
                    },
                );
                let said = take(&mut self.ws);
                self.held.insert(conn);
                self.requests
                    .insert(conn, said.sent.get(&conn).cloned().unwrap_or_default());
            }
            Op::Answer { conn } => {
                let conn = ConnId(conn.into());
                if let Some(bytes) = self.requests.get(&conn).and_then(|r| answer(r)) {
                    self.chunk(conn, &bytes);
                }
            }
            Op::Frame {
                conn,
                first,
                mask,
                declared,
                payload,
            } => self.chunk(ConnId(conn.into()), &frame(first, mask, declared, &payload)),
            Op::Bytes { conn, data, cuts } => {
                let conn = ConnId(conn.into());
                let mut rest = &data[..];
                let mut sizes = cuts.iter().map(|&c| usize::from(c.max(1))).cycle();
                while !rest.is_empty() {
                    let size = sizes.next().unwrap_or(rest.len()).min(rest.len());
                    let (now, later) = rest.split_at(size);
                    self.chunk(conn, now);
                    rest = later;
                }
            }
            Op::Send { conn, what, code } => {
                let conn = ConnId(conn.into());
                let effect = match what % 4 {
                    0 => WsEffect::Text {
                        conn,
                        text: "x".repeat(usize::from(what)),
                    },
                    1 => WsEffect::Binary {
                        conn,
                        bytes: vec![what; usize::from(what)],
                    },
                    2 => WsEffect::Ping { conn },
                    _ => WsEffect::Close {
                        conn,
                        code,
                        reason: "é".repeat(usize::from(what)),
                    },
                };
                let twin = self.twins.remove(&conn);
                let twin_sent = match (twin, &effect) {
                    (Some(mut t), WsEffect::Text { text, .. }) => {
                        let bytes = t.send_text(text.clone());
                        self.twins.insert(conn, t);
                        Some(bytes)
                    }
                    // After a close Ws waits for its answer and the twin is over; the twin has
                    // no binary or ping to send: it is retired either way.
                    (Some(mut t), WsEffect::Close { code, reason, .. }) => {
                        Some(t.close(*code, reason))
                    }
                    _ => None,
                };
                if matches!(effect, WsEffect::Close { .. }) {
                    self.app_closed.insert(conn);
                }
                self.ws.handle(self.now, WsInput::App(In::Do(effect)));
                let said = take(&mut self.ws);
                if let Some(bytes) = twin_sent {
                    let sent = said.sent.get(&conn).cloned().unwrap_or_default();
                    assert_eq!(bytes, sent, "the two server layers sent differently");
                }
            }
            Op::Closed { conn } => self.closed(ConnId(conn.into())),
            Op::Advance { ms } => {
                self.now = self.now + Duration::from_millis(ms.into()) * 16;
                let mut said = Said::default();
                advance::run_due(&mut self.ws, self.now, |e| note(&mut said, e));
                // What the layer ended on its own clock (a slow head) the twin, with no clock,
                // never would: it is retired.
                for conn in &said.closed {
                    self.twins.remove(conn);
                }
                assert!(self.ws.largest_buffer() <= MAX_HEAD_BYTES);
            }
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut run = Run {
        ws: Ws::new(Echo::default(), WsConfig::new(LIMIT)),
        now: Timestamp::from_secs(1_790_380_000),
        twins: BTreeMap::new(),
        held: BTreeSet::new(),
        app_closed: BTreeSet::new(),
        requests: BTreeMap::new(),
    };
    for op in ops.into_iter().take(256) {
        run.op(op);
    }
});
