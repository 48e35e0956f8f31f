//! Relay peering, outbound sync, end to end (spec 002 §5, §6): real `weft nostr serve` processes
//! on loopback, each with its sync workers.
//!
//! Relays A and B trust each other (`peering.allowPrivateNetworks: true`, as a LAN or a test
//! needs). History published to A an hour ago reaches B by NIP-77 reconciliation and fetches by
//! id; an event published to A while B is live reaches B's subscribers live; an event published
//! to B reaches A; nothing out of A's advertised scope ever reaches B. B killed with `kill -9`
//! and restarted reconnects and reconciles what it missed. Relay C trusts A, but A does not
//! trust C: C gets A's client limits only, under which its live `REQ` is refused, so it holds
//! nothing of A's. A relay whose peers' URLs are loopback, private and link-local literals, with
//! private networks not allowed, reports them unusable and never connects; with them allowed,
//! the same loopback URL is fetched (the control that shows the listener would have seen it).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::peering::RelayKey;

#[path = "common/cli.rs"]
mod cli;
use cli::{WEFT, free_port, temp_dir};

/// How long the test waits for relays to converge (a worker's first NIP-11 fetch can meet a
/// peer not yet listening and back off a few seconds).
const CONVERGE: Duration = Duration::from_secs(60);
const READ: Duration = Duration::from_secs(20);
const ADMIN: &str = "sync-admin-token-9c2";

/// A `weft nostr serve` whose stderr goes to a file the test reads back.
struct Relay {
    child: Child,
    log: PathBuf,
    addr: SocketAddr,
}

impl Relay {
    fn start(dir: &Path, name: &str, addr: SocketAddr, settings: &str, secret: &str) -> Self {
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(&config, settings).unwrap();
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(WEFT);
        cmd.args([
            "nostr",
            "serve",
            "--listen",
            &addr.to_string(),
            "--data-dir",
        ])
        .arg(dir.join(format!("{name}-data")))
        .arg("--config")
        .arg(&config)
        .env_remove("RELAY_PRIVATE_KEY")
        .env("SECRET", secret)
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap());
        let child = cmd.spawn().unwrap();
        let mut relay = Self { child, log, addr };
        let start = Instant::now();
        while !relay.log().contains("listening on ws") {
            if let Ok(Some(status)) = relay.child.try_wait() {
                panic!("{name} exited ({status}): {}", relay.log());
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{}", relay.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        relay
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The rows of `GET /admin/peering`.
    fn rows(&self) -> Vec<Value> {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(READ)).unwrap();
        write!(
            s,
            "GET /admin/peering HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str::<Value>(body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The row of the peer `pubkey`, if the relay has one.
    fn row(&self, pubkey: &str) -> Option<Value> {
        self.rows().into_iter().find(|r| r["pubkey"] == pubkey)
    }

    /// The ids of the events of `kind` the relay holds, as a client reads them.
    fn ids(&self, kind: u16) -> Vec<String> {
        let (mut ws, _) = connect(self.addr);
        send(&mut ws, &json!(["REQ", "q", {"kinds": [kind]}]));
        let mut ids = Vec::new();
        loop {
            let m = next(&mut ws);
            match m[0].as_str() {
                Some("EVENT") => ids.push(m[2]["id"].as_str().unwrap().to_string()),
                Some("EOSE") => break,
                _ => panic!("{m}"),
            }
        }
        ids.sort();
        ids
    }

    fn publish(&self, e: &Event) {
        let (mut ws, _) = connect(self.addr);
        send(&mut ws, &json!(["EVENT", e.to_value()]));
        let ok = next(&mut ws);
        assert_eq!(ok[0], "OK", "{ok}");
        assert_eq!(ok[2], true, "{ok}");
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

type Ws = WebSocket<TcpStream>;

/// A client socket, past the relay's NIP-42 challenge.
fn connect(addr: SocketAddr) -> (Ws, String) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(READ)).unwrap();
    let (mut ws, _) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    let auth = next(&mut ws);
    assert_eq!(auth[0], "AUTH", "{auth}");
    (ws, auth[1].as_str().unwrap().to_string())
}

fn next(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("not a text frame: {other:?}"),
        }
    }
}

fn send(ws: &mut Ws, frame: &Value) {
    ws.send(Message::Text(frame.to_string().into())).unwrap();
}

fn provider() -> &'static dyn CryptoProvider {
    weft_drivers::server_provider()
}

fn author(seed: u64) -> Secp256k1Secret {
    generate_secp256k1(provider(), &mut chacha20::ChaCha20Rng::seed_from_u64(seed))
}

fn event(
    k: &Secp256k1Secret,
    kind: u16,
    created_at: u64,
    tags: &[&[&str]],
    content: &str,
) -> Event {
    UnsignedEvent {
        created_at,
        kind,
        tags: tags
            .iter()
            .map(|t| t.iter().map(|s| s.to_string()).collect())
            .collect(),
        content: content.into(),
    }
    .sign(
        provider(),
        k,
        &mut chacha20::ChaCha20Rng::seed_from_u64(created_at ^ u64::from(kind)),
    )
    .unwrap()
}

fn now_secs() -> u64 {
    weft_drivers::now().as_secs()
}

/// Waits until `check` holds, or fails naming `what` and the logs.
fn eventually(what: &str, logs: &[&Relay], mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > CONVERGE {
            let logs: Vec<String> = logs.iter().map(|r| r.log()).collect();
            panic!("{what}: not within {CONVERGE:?}\n{}", logs.join("\n----\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A relay's settings: its URL, the scope it advertises, the peers it trusts.
fn settings(addr: SocketAddr, scope: &str, peers: &[(String, String)], extra: &str) -> String {
    let mut s = format!(
        "info:\n  relay_url: ws://{addr}\n  name: relay {addr}\n\
         peering:\n  enabled: true\n  allowPrivateNetworks: true\n  scopes:\n    - {scope}\n  peers:\n"
    );
    for (pubkey, url) in peers {
        s += &format!("    - pubkey: {pubkey}\n      relayUrl: {url}\n");
    }
    s += &format!("admin:\n  token: {ADMIN}\n{extra}");
    s
}

fn key(secret: &str, addr: SocketAddr) -> RelayKey {
    RelayKey::derive(provider(), secret.as_bytes(), &format!("ws://{addr}")).unwrap()
}

fn ids_of(events: &[&Event]) -> Vec<String> {
    let mut ids: Vec<String> = events.iter().map(|e| e.id_hex()).collect();
    ids.sort();
    ids
}

#[test]
fn trusted_relays_sync_in_scope_events_both_ways_and_an_untrusted_one_gets_client_limits() {
    let dir = temp_dir("nostr-peering-sync");
    let (a_addr, b_addr, c_addr) = (free_port(), free_port(), free_port());
    let (sa, sb, sc) = ("relay A's secret", "relay B's secret", "relay C's secret");
    let (ka, kb, kc) = (key(sa, a_addr), key(sb, b_addr), key(sc, c_addr));
    let url = |a: SocketAddr| format!("ws://{a}");

    // A advertises kinds 1 and 5 and the addressable kinds 30000-30001; its clients may list
    // one value per filter list, which refuses the live REQ of a relay it treats as a client.
    let a_settings = settings(
        a_addr,
        "kinds: [1, 5, [30000, 30001]]",
        &[(kb.pubkey_hex(), url(b_addr))],
        "limits:\n  client:\n    subscription:\n      maxFilterValues: 1\n",
    );
    let mut a = Relay::start(&dir, "a", a_addr, &a_settings, sa);

    // History on A, an hour old: beyond the live REQ's overlap, so only reconciliation finds it.
    let alice = author(1);
    let hour_ago = now_secs() - 3_600;
    let notes: Vec<Event> = (0..5)
        .map(|i| event(&alice, 1, hour_ago + i, &[], &format!("note {i}")))
        .collect();
    let list_old = event(&alice, 30000, hour_ago, &[&["d", "list"]], "old list");
    let reactions: Vec<Event> = (0..3)
        .map(|i| event(&alice, 7, hour_ago + i, &[], "+"))
        .collect();
    for e in notes.iter().chain([&list_old]).chain(&reactions) {
        a.publish(e);
    }

    // B trusts A and advertises kind 1 only.
    let b_settings = settings(b_addr, "kinds: [1]", &[(ka.pubkey_hex(), url(a_addr))], "");
    let mut b = Relay::start(&dir, "b", b_addr, &b_settings, sb);
    // C trusts A; A does not trust C.
    let c_settings = settings(c_addr, "kinds: [1]", &[(ka.pubkey_hex(), url(a_addr))], "");
    let c = Relay::start(&dir, "c", c_addr, &c_settings, sc);

    let in_scope: Vec<&Event> = notes.iter().collect();
    eventually("B holds A's in-scope history", &[&a, &b], || {
        b.ids(1) == ids_of(&in_scope) && b.ids(30000) == ids_of(&[&list_old])
    });
    // Nothing out of scope.
    assert!(b.ids(7).is_empty());
    let row = b.row(&ka.pubkey_hex()).expect("B's row for A");
    assert_eq!(row["status"], "live", "{row}");
    assert!(row["lastReconciliation"].as_u64().is_some(), "{row}");
    assert_eq!(row["missing"], 6, "{row}");

    // Live: a subscriber on B sees an event published to A, as a local publish.
    let (mut sub, _) = connect(b.addr);
    send(
        &mut sub,
        &json!(["REQ", "live", {"kinds": [1], "since": now_secs() - 5}]),
    );
    assert_eq!(next(&mut sub)[0], "EOSE");
    let live = event(&alice, 1, now_secs(), &[], "live on A");
    a.publish(&live);
    let got = next(&mut sub);
    assert_eq!(got[0], "EVENT", "{got}");
    assert_eq!(got[2]["id"], live.id_hex(), "{got}");
    // Out of scope, live: never reaches B.
    a.publish(&event(&alice, 7, now_secs(), &[], "+ live"));
    // The local kind rules apply to what B takes: a newer version of the addressable event
    // replaces the older under its `d` tag, and a kind-5 deletion hides its target.
    let list_new = event(&alice, 30000, now_secs(), &[&["d", "list"]], "new list");
    a.publish(&list_new);
    let deleted = &notes[0];
    let deletion = event(&alice, 5, now_secs(), &[&["e", &deleted.id_hex()]], "");
    a.publish(&deletion);
    eventually(
        "B applies the replacement and the deletion",
        &[&a, &b],
        || b.ids(30000) == ids_of(&[&list_new]) && b.ids(5) == ids_of(&[&deletion]),
    );
    assert!(!b.ids(1).contains(&deleted.id_hex()));
    let in_scope: Vec<&Event> = notes[1..].iter().collect();

    // The other way: B's kind 1 reaches A.
    let bob = author(2);
    let from_b = event(&bob, 1, now_secs(), &[], "published on B");
    b.publish(&from_b);
    eventually("A holds B's event", &[&a, &b], || {
        a.ids(1).contains(&from_b.id_hex())
    });

    // What A served B, counted under B's pubkey; A's own worker is live on B.
    let row = a.row(&kb.pubkey_hex()).expect("A's row for B");
    assert!(row["requestsServed"].as_u64().unwrap() >= 2, "{row}");
    assert!(row["eventsServed"].as_u64().unwrap() >= 6, "{row}");
    assert_eq!(row["status"], "live", "{row}");
    // C is nobody to A: no row, and its live REQ met the client cap.
    assert!(a.row(&kc.pubkey_hex()).is_none());
    eventually(
        "C's worker is refused by A's client limits",
        &[&a, &c],
        || {
            c.row(&ka.pubkey_hex())
                .and_then(|r| r["detail"].as_str().map(str::to_string))
                .is_some_and(|d| d.contains("live subscription closed") && d.contains("invalid"))
        },
    );
    assert!(c.ids(1).is_empty(), "C was served A's events");
    assert!(c.ids(30000).is_empty());
    assert!(c.ids(5).is_empty());

    // B killed mid-life; A goes on; B restarted reconnects and reconciles the gap.
    b.kill();
    let while_down: Vec<Event> = (0..4)
        .map(|i| event(&alice, 1, now_secs() - 30 + i, &[], "while B was down"))
        .collect();
    for e in &while_down {
        a.publish(e);
    }
    let b2 = Relay::start(&dir, "b", b_addr, &b_settings, sb);
    let mut want: Vec<&Event> = in_scope.clone();
    want.extend([&live, &from_b]);
    want.extend(while_down.iter());
    eventually(
        "B restarted converges to A's in-scope events",
        &[&a, &b2],
        || b2.ids(1) == ids_of(&want),
    );
    assert!(b2.ids(7).is_empty());
    assert_eq!(b2.ids(30000), ids_of(&[&list_new]));
    // A, whose worker lost B, reconnected too: its row is live again.
    eventually("A's worker is live on B again", &[&a, &b2], || {
        a.row(&kb.pubkey_hex())
            .is_some_and(|r| r["status"] == "live")
    });

    // No relay's key or secret in any log.
    for r in [&a, &b2, &c] {
        let log = r.log();
        for s in [sa, sb, sc] {
            assert!(!log.contains(s));
        }
    }
    a.kill();
}

/// Accepts whatever connects to `listener` within `wait`; how many did.
fn connections(listener: &TcpListener, wait: Duration) -> usize {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < wait {
        match listener.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    }
    n
}

#[test]
fn peers_at_refused_addresses_are_never_contacted_unless_private_networks_are_allowed() {
    let dir = temp_dir("nostr-peering-refused");
    let trap = TcpListener::bind("127.0.0.1:0").unwrap();
    let trap_url = format!("ws://{}", trap.local_addr().unwrap());
    let peer = |seed: u64| {
        weft_proto::codec::hex::encode(&provider().schnorr_public_key(&author(seed)).unwrap())
    };
    let (loopback, private, link_local) = (peer(10), peer(11), peer(12));
    let text = |addr: SocketAddr, allow: bool| {
        format!(
            "info:\n  relay_url: ws://{addr}\n\
             peering:\n  allowPrivateNetworks: {allow}\n  peers:\n    \
             - pubkey: {loopback}\n      relayUrl: {trap_url}\n    \
             - pubkey: {private}\n      relayUrl: ws://10.20.30.40:7000\n    \
             - pubkey: {link_local}\n      relayUrl: ws://[fe80::1]:7000\n\
             admin:\n  token: {ADMIN}\n"
        )
    };
    let addr = free_port();
    let d = Relay::start(&dir, "d", addr, &text(addr, false), "relay D's secret");
    assert_eq!(
        connections(&trap, Duration::from_secs(3)),
        0,
        "D dialled a loopback peer"
    );
    for (pubkey, class) in [
        (&loopback, "loopback"),
        (&private, "private"),
        (&link_local, "link-local"),
    ] {
        let row = d.row(pubkey).expect("a row per peer");
        assert_eq!(row["status"], "unusable", "{row}");
        let detail = row["detail"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(detail.contains(class), "{class}: {row}");
    }
    drop(d);

    // The same loopback peer with private networks allowed: its NIP-11 is asked for.
    let addr = free_port();
    let e = Relay::start(&dir, "e", addr, &text(addr, true), "relay E's secret");
    assert!(
        connections(&trap, Duration::from_secs(10)) > 0,
        "E never asked the allowed peer: {}",
        e.log()
    );
}
