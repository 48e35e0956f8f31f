//! A real TURN server accepts the TURN REST passwords `weft relay` hands out (Minca 04 Network
//! §1.4 "TURN passwords", §10): Debian's coturn, installed and started by `scripts/coturn` with
//! `use-auth-secret` and `static-auth-secret` on a loopback port, and the `weft` program started
//! with the same secret. A watching client takes its `ice` offer, and a TURN Allocate (RFC 8656)
//! with those long-term credentials (RFC 8489 §9.2) gets a relayed address; the same with one
//! character of the password changed is refused 401.
//!
//! Skipped, with a `SKIP:` line saying why, only when coturn cannot be installed here.

#[path = "common/coturn.rs"]
mod coturn;
#[path = "common/nostr_relay.rs"]
#[allow(dead_code)] // Only the script helpers are used here.
mod nostr_relay;
use coturn::Running;

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use md5::{Digest as _, Md5};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_proto::crypto::{CryptoProvider as _, default_provider};
use weft_proto::minca::relay_wire::{IceServer, RelayMessage};

const SECRET: &str = "weft-coturn-interop-secret";
const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";
/// How long each helper has to start, and each STUN request to be answered.
const BUDGET: Duration = Duration::from_secs(30);

/// `weft relay` itself (the program, not the library), with TURN for `turn_url`.
fn start_weft_relay(turn_url: &str) -> (Running, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["relay", "--listen", "127.0.0.1:0", "--turn-ttl", "600"])
        .args(["--turn-secret", SECRET, "--turn-url", turn_url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the weft program starts");
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let running = Running(child);
    let line = lines
        .next()
        .expect("weft relay says where it listens")
        .unwrap();
    let addr = line
        .strip_prefix("weft relay: listening on ws://")
        .unwrap_or_else(|| panic!("unexpected first line from weft relay: {line}"))
        .parse()
        .expect("a socket address");
    (running, addr)
}

/// The `ice` offer a client watching a topic receives (§1.4: on a socket's first watch).
fn ice_offer(relay: SocketAddr) -> IceServer {
    smol::block_on(async {
        let tcp = TcpStream::connect(relay).await.unwrap();
        let (mut ws, _) = async_tungstenite::client_async(format!("ws://{relay}/"), tcp)
            .await
            .unwrap();
        let fetch = format!(r#"{{"type":"fetch","topic":"{TOPIC}","watch":true}}"#);
        ws.send(Message::text(fetch)).await.unwrap();
        let started = Instant::now();
        loop {
            let frame = smol::future::or(async { ws.next().await }, async {
                smol::Timer::after(BUDGET.saturating_sub(started.elapsed())).await;
                panic!("no ice offer from weft relay within {BUDGET:?}")
            })
            .await;
            let Some(Ok(Message::Text(text))) = frame else {
                panic!("expected a text frame, got {frame:?}");
            };
            if let Ok(RelayMessage::Ice(ice)) = RelayMessage::parse(text.as_str()) {
                return ice.servers.into_iter().next().expect("one server");
            }
        }
    })
}

// STUN (RFC 8489) and TURN (RFC 8656), only what one Allocate needs.
const ALLOCATE: u16 = 0x0003;
const ALLOCATE_SUCCESS: u16 = 0x0103;
const ALLOCATE_ERROR: u16 = 0x0113;
const MAGIC_COOKIE: u32 = 0x2112_A442;
const USERNAME: u16 = 0x0006;
const MESSAGE_INTEGRITY: u16 = 0x0008;
const ERROR_CODE: u16 = 0x0009;
const REALM: u16 = 0x0014;
const NONCE: u16 = 0x0015;
const XOR_RELAYED_ADDRESS: u16 = 0x0016;
const REQUESTED_TRANSPORT: u16 = 0x0019;
const UDP: [u8; 4] = [17, 0, 0, 0];

fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Long-term credentials: the key is MD5(username ":" realm ":" password) (RFC 8489 §9.2.2).
struct Credentials<'a> {
    username: &'a str,
    password: &'a str,
    realm: &'a [u8],
    nonce: &'a [u8],
}

/// An Allocate request for a UDP relay, with MESSAGE-INTEGRITY when `auth` is given.
fn allocate(transaction: [u8; 12], auth: Option<&Credentials>) -> Vec<u8> {
    let mut attrs = Vec::new();
    attribute(&mut attrs, REQUESTED_TRANSPORT, &UDP);
    if let Some(c) = auth {
        attribute(&mut attrs, USERNAME, c.username.as_bytes());
        attribute(&mut attrs, REALM, c.realm);
        attribute(&mut attrs, NONCE, c.nonce);
    }
    let header = |attrs_len: usize| {
        let mut h = Vec::with_capacity(20);
        h.extend_from_slice(&ALLOCATE.to_be_bytes());
        h.extend_from_slice(&u16::try_from(attrs_len).unwrap().to_be_bytes());
        h.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
        h.extend_from_slice(&transaction);
        h
    };
    let Some(c) = auth else {
        let mut msg = header(attrs.len());
        msg.extend_from_slice(&attrs);
        return msg;
    };
    // The HMAC covers the message with its length already counting the integrity attribute.
    let mut msg = header(attrs.len() + 24);
    msg.extend_from_slice(&attrs);
    let mut md5 = Md5::new();
    md5.update(c.username.as_bytes());
    md5.update(b":");
    md5.update(c.realm);
    md5.update(b":");
    md5.update(c.password.as_bytes());
    let key = md5.finalize();
    let mac = default_provider().hmac_sha1(&key, &[&msg]);
    attribute(&mut msg, MESSAGE_INTEGRITY, &mac);
    msg
}

/// A STUN response: its type and attributes.
struct Response {
    kind: u16,
    attributes: Vec<(u16, Vec<u8>)>,
}

impl Response {
    fn parse(bytes: &[u8], transaction: [u8; 12]) -> Option<Self> {
        if bytes.len() < 20 || bytes[4..8] != MAGIC_COOKIE.to_be_bytes() {
            return None;
        }
        if bytes[8..20] != transaction {
            return None;
        }
        let kind = u16::from_be_bytes([bytes[0], bytes[1]]);
        let mut rest = &bytes[20..];
        let mut attributes = Vec::new();
        while rest.len() >= 4 {
            let t = u16::from_be_bytes([rest[0], rest[1]]);
            let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
            let value = rest.get(4..4 + len)?.to_vec();
            attributes.push((t, value));
            rest = rest
                .get((4 + len).next_multiple_of(4)..)
                .unwrap_or_default();
        }
        Some(Self { kind, attributes })
    }

    fn get(&self, kind: u16) -> Option<&[u8]> {
        self.attributes
            .iter()
            .find(|(t, _)| *t == kind)
            .map(|(_, v)| v.as_slice())
    }

    /// The ERROR-CODE as a number (class × 100 + number).
    fn error_code(&self) -> Option<u16> {
        let v = self.get(ERROR_CODE)?;
        Some(u16::from(v.get(2)? & 0x07) * 100 + u16::from(*v.get(3)?))
    }
}

/// Sends `request` until its answer comes (UDP may lose either), within [`BUDGET`].
fn exchange(socket: &UdpSocket, request: &[u8], transaction: [u8; 12]) -> Response {
    let started = Instant::now();
    let mut buf = [0u8; 1500];
    socket
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    while started.elapsed() < BUDGET {
        socket.send(request).unwrap();
        // A refused port (coturn not up yet) shows as an error on the next receive.
        if let Ok(n) = socket.recv(&mut buf)
            && let Some(response) = Response::parse(&buf[..n], transaction)
        {
            return response;
        }
    }
    panic!("coturn did not answer within {BUDGET:?}")
}

/// One Allocate with `username` and `password` from a fresh 5-tuple: the first request, without
/// credentials, is answered 401 with the realm and a nonce (RFC 8489 §9.2.4); the response to
/// the second is returned.
fn allocate_with(turn: SocketAddr, username: &str, password: &str, seed: u8) -> Response {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(turn).unwrap();
    let first = [seed; 12];
    let challenge = exchange(&socket, &allocate(first, None), first);
    assert_eq!(challenge.kind, ALLOCATE_ERROR);
    assert_eq!(challenge.error_code(), Some(401), "a challenge first");
    let realm = challenge.get(REALM).expect("a realm").to_vec();
    let mut nonce = challenge.get(NONCE).expect("a nonce").to_vec();
    // RFC 8489 §9.2.5: a 438 (Stale Nonce) carries a fresh nonce to try once more with.
    for attempt in 1..=2u8 {
        let transaction = [seed.wrapping_add(attempt); 12];
        let auth = Credentials {
            username,
            password,
            realm: &realm,
            nonce: &nonce,
        };
        let response = exchange(&socket, &allocate(transaction, Some(&auth)), transaction);
        match response.get(NONCE) {
            Some(fresh) if response.error_code() == Some(STALE_NONCE) && attempt == 1 => {
                nonce = fresh.to_vec();
            }
            _ => return response,
        }
    }
    unreachable!("the loop returns on its second attempt")
}

/// STUN error 438 (RFC 8489 §14.8).
const STALE_NONCE: u16 = 438;

#[test]
fn coturn_with_use_auth_secret_accepts_weft_relay_turn_passwords_and_refuses_a_tampered_one() {
    let Some((coturn, port)) = coturn::start("coturn_with_use_auth_secret", SECRET) else {
        return;
    };
    let turn_url = format!("turn:127.0.0.1:{port}");
    let (relay, relay_addr) = start_weft_relay(&turn_url);

    let server = ice_offer(relay_addr);
    assert_eq!(server.urls, [turn_url]);
    let turn: SocketAddr = ([127, 0, 0, 1], port).into();

    let good = allocate_with(turn, &server.username, &server.credential, 1);
    assert_eq!(
        (good.kind, good.error_code()),
        (ALLOCATE_SUCCESS, None),
        "coturn accepts the relay's password"
    );
    assert!(
        good.get(XOR_RELAYED_ADDRESS).is_some(),
        "and allocates a relayed address"
    );

    // One character of the password changed (base64 stays base64).
    let mut tampered = server.credential.clone().into_bytes();
    tampered[0] = if tampered[0] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let bad = allocate_with(turn, &server.username, &tampered, 3);
    assert_eq!(
        (bad.kind, bad.error_code()),
        (ALLOCATE_ERROR, Some(401)),
        "coturn refuses a tampered password"
    );

    // A username whose expiry was moved (its password no longer matches) is refused too.
    let (expires, random) = server.username.split_once(':').expect("expires:random");
    let later = format!("{}:{random}", expires.parse::<u64>().unwrap() + 1);
    let moved = allocate_with(turn, &later, &server.credential, 5);
    assert_eq!(
        (moved.kind, moved.error_code()),
        (ALLOCATE_ERROR, Some(401)),
        "coturn refuses a username whose expiry was changed"
    );

    drop(relay);
    drop(coturn);
}
