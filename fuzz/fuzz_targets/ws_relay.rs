//! `weft relay`'s machine behind the WebSocket layer (`weft_drivers::ws`) under arbitrary timed
//! transport events: connections accepted and closed, raw bytes in any pieces, well-formed
//! upgrade heads (with and without a forwarded-for header) and masked client frames built from a
//! few fuzzed choices (so the fuzzer gets past the handshake), and time jumps. It must never
//! panic, and after `handle_timeout(now)` it must never ask to be woken at or before `now`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weft_drivers::host::{HostMachine, Peer, Remote};
use weft_drivers::minca::relay::Relay;
use weft_drivers::ws::{Ws, WsConfig};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::minca::relay_server::{RelayConfig, RelayServer};

#[derive(Arbitrary, Debug)]
enum Op {
    Accept { conn: u8, addr: u8 },
    Bytes { conn: u8, data: Vec<u8> },
    Upgrade { conn: u8, forwarded: bool, split: u8 },
    Health { conn: u8 },
    Frame { conn: u8, opcode: u8, kind: u8, fin: bool },
    Closed { conn: u8 },
    Advance { ms: u32 },
}

const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

fn payload(kind: u8) -> Vec<u8> {
    match kind % 6 {
        0 => format!(r#"{{"type":"fetch","topic":"{TOPIC}","watch":true}}"#).into_bytes(),
        1 => format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"AZ3k","ttl":0}}"#).into_bytes(),
        2 => format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"AQID","ttl":60000}}"#).into_bytes(),
        3 => br#"{"type":"ping"}"#.to_vec(),
        4 => br#"{"type":"ice"}"#.to_vec(),
        _ => vec![0xff, 0xfe, b'x'],
    }
}

/// A masked client frame (RFC 6455 §5.2) with a payload under 126 bytes.
fn frame(opcode: u8, fin: bool, data: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut out = vec![(u8::from(fin) << 7) | (opcode & 0x0f), 0x80 | data.len().min(125) as u8];
    out.extend_from_slice(&mask);
    out.extend(data.iter().take(125).enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fuzz_target!(|ops: Vec<Op>| {
    let server = RelayServer::new(
        RelayConfig::default(),
        weft_proto::crypto::default_provider(),
        <chacha20::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(7),
    );
    let mut ws = Ws::new(Relay::new(server, true), WsConfig::new(1024));
    let mut now = Timestamp::from_millis(1_790_000_000_000);
    for op in ops.into_iter().take(256) {
        let input = match op {
            Op::Accept { conn, addr } => {
                let peer = Peer {
                    listener: 0,
                    remote: Remote::Tcp(([10, 0, 0, addr % 4], 5000).into()),
                };
                ws.opened(ConnId(u64::from(conn % 8)), &peer)
            }
            Op::Bytes { conn, data } => ws.received(ConnId(u64::from(conn % 8)), data),
            Op::Upgrade {
                conn,
                forwarded,
                split,
            } => {
                let head = format!(
                    "GET /x HTTP/1.1\r\nHost: r\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{}Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                    if forwarded { "X-Forwarded-For: 1.2.3.4, 5.6.7.8\r\n" } else { "" }
                );
                let at = usize::from(split) % head.len();
                let conn = ConnId(u64::from(conn % 8));
                let first = ws.received(conn, head.as_bytes()[..at].to_vec());
                ws.handle(now, first);
                ws.received(conn, head.as_bytes()[at..].to_vec())
            }
            Op::Health { conn } => ws.received(
                ConnId(u64::from(conn % 8)),
                b"GET /health HTTP/1.1\r\n\r\n".to_vec(),
            ),
            Op::Frame {
                conn,
                opcode,
                kind,
                fin,
            } => {
                let opcode = [1, 2, 8, 9, 10, 0, 3][usize::from(opcode) % 7];
                ws.received(ConnId(u64::from(conn % 8)), frame(opcode, fin, &payload(kind)))
            }
            Op::Closed { conn } => ws.closed(ConnId(u64::from(conn % 8))),
            Op::Advance { ms } => {
                now = now.saturating_add(core::time::Duration::from_millis(u64::from(ms)));
                ws.handle_timeout(now);
                while ws.poll().is_some() {}
                if let Some(w) = ws.poll_timeout() {
                    assert!(w.at > now, "deadline {} ({}) does not advance past {now}", w.at, w.reason);
                }
                continue;
            }
        };
        ws.handle(now, input);
        while ws.poll().is_some() {}
    }
});
