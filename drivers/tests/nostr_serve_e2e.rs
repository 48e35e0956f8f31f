//! `weft nostr serve` end to end: the real binary on a loopback port, a tungstenite client,
//! events signed with weft_proto's NIP-01 helpers. NIP-01 publish/REQ/EOSE/live, NIP-45 COUNT,
//! NIP-42 AUTH, NIP-11 over plain HTTP, bad frames answered, oversized frames closed 1009, and
//! an acknowledged event surviving `kill -9`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::limits::DEFAULT_MAX_MESSAGE_BYTES;

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, free_port, temp_dir};

#[path = "common/tls_ca.rs"]
mod tls_ca;

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::{WAIT, Ws, connect, next, req, send};

fn start(data: &Path, addr: SocketAddr, extra: &[&str]) -> Running {
    let mut cmd = Command::new(WEFT);
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(data)
    .args(extra);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws");
    server
}

fn serve(name: &str, extra: &[&str]) -> (Running, SocketAddr, std::path::PathBuf) {
    let data = temp_dir(name).join("nostr");
    let addr = free_port();
    (start(&data, addr, extra), addr, data)
}

struct Signer {
    rng: chacha20::ChaCha20Rng,
}

impl Signer {
    fn new(seed: u64) -> Self {
        Self {
            rng: chacha20::ChaCha20Rng::seed_from_u64(seed),
        }
    }
    fn key(&mut self) -> Secp256k1Secret {
        generate_secp256k1(weft_drivers::server_provider(), &mut self.rng)
    }
    fn event(&mut self, key: &Secp256k1Secret, kind: u16, tags: Vec<Vec<String>>) -> Event {
        UnsignedEvent {
            created_at: weft_drivers::now().as_secs(),
            kind,
            tags,
            content: "hello from weft".into(),
        }
        .sign(weft_drivers::server_provider(), key, &mut self.rng)
        .unwrap()
    }
}

fn publish(ws: &mut Ws, event: &Event) -> Value {
    send(ws, &json!(["EVENT", event.to_value()]));
    let ok = next(ws);
    assert_eq!(ok[0], "OK", "{ok}");
    assert_eq!(ok[1], event.id_hex(), "{ok}");
    ok
}

#[test]
fn a_published_event_is_acked_served_by_req_counted_and_sent_live_to_other_sockets() {
    let (_server, addr, _) = serve("nostr-publish", &[]);
    let mut s = Signer::new(1);
    let key = s.key();
    let (mut alice, _) = connect(addr);
    let (mut bob, _) = connect(addr);
    let first = s.event(&key, 1, vec![vec!["t".into(), "weft".into()]]);
    let ok = publish(&mut alice, &first);
    assert_eq!(ok[2], true, "{ok}");
    // The same event again is a duplicate, still accepted.
    let again = publish(&mut alice, &first);
    assert_eq!(again[2], true, "{again}");
    assert!(
        again[3].as_str().unwrap().starts_with("duplicate:"),
        "{again}"
    );

    let pubkey = first.to_value()["pubkey"].clone();
    let stored = req(&mut bob, "by-author", json!({"authors": [pubkey]}));
    assert_eq!(stored, vec![first.to_value()]);
    assert_eq!(req(&mut bob, "by-tag", json!({"#t": ["weft"]})).len(), 1);
    assert!(req(&mut bob, "other-tag", json!({"#t": ["nope"]})).is_empty());

    send(&mut bob, &json!(["COUNT", "c", {"kinds": [1]}]));
    assert_eq!(next(&mut bob), json!(["COUNT", "c", {"count": 1}]));

    // bob's "by-author" subscription is live: alice's next event reaches it.
    let second = s.event(&key, 1, vec![]);
    assert_eq!(publish(&mut alice, &second)[2], true);
    let live = next(&mut bob);
    assert_eq!(live[0], "EVENT", "{live}");
    assert_eq!(live[2]["id"], second.id_hex(), "{live}");
}

#[test]
fn with_auth_for_writes_an_event_waits_for_auth_against_the_challenge() {
    let (_server, addr, _) = serve("nostr-auth", &["--auth", "writes"]);
    let mut s = Signer::new(2);
    let key = s.key();
    let (mut ws, challenge) = connect(addr);
    let note = s.event(&key, 1, vec![]);
    let refused = publish(&mut ws, &note);
    assert_eq!(refused[2], false, "{refused}");
    assert!(
        refused[3].as_str().unwrap().starts_with("auth-required:"),
        "{refused}"
    );
    // An AUTH naming another challenge is refused.
    let wrong = s.event(
        &key,
        22242,
        vec![
            vec!["relay".into(), format!("ws://{addr}/")],
            vec!["challenge".into(), "not-the-challenge".into()],
        ],
    );
    send(&mut ws, &json!(["AUTH", wrong.to_value()]));
    let no = next(&mut ws);
    assert_eq!((&no[0], &no[2]), (&json!("OK"), &json!(false)), "{no}");
    let auth = s.event(
        &key,
        22242,
        vec![
            vec!["relay".into(), format!("ws://{addr}/")],
            vec!["challenge".into(), challenge],
        ],
    );
    send(&mut ws, &json!(["AUTH", auth.to_value()]));
    let yes = next(&mut ws);
    assert_eq!(yes, json!(["OK", auth.id_hex(), true, ""]), "{yes}");
    assert_eq!(publish(&mut ws, &note)[2], true);
}

#[test]
fn a_malformed_frame_is_answered_and_the_socket_lives() {
    let (_server, addr, _) = serve("nostr-malformed", &[]);
    let (mut ws, _) = connect(addr);
    ws.send(Message::Text("this is not json".into())).unwrap();
    let notice = next(&mut ws);
    assert_eq!(notice[0], "NOTICE", "{notice}");
    assert!(
        notice[1].as_str().unwrap().starts_with("invalid:"),
        "{notice}"
    );
    // A REQ with a bad filter names its subscription.
    send(&mut ws, &json!(["REQ", "bad", {"kinds": "one"}]));
    let closed = next(&mut ws);
    assert_eq!(closed[0], "CLOSED", "{closed}");
    assert_eq!(closed[1], "bad", "{closed}");
    // An event whose signature is broken is refused invalid, by id.
    let mut s = Signer::new(3);
    let key = s.key();
    let mut event = s.event(&key, 1, vec![]).to_value();
    event["content"] = json!("tampered");
    send(&mut ws, &json!(["EVENT", event]));
    let ok = next(&mut ws);
    assert_eq!((&ok[0], &ok[2]), (&json!("OK"), &json!(false)), "{ok}");
    assert!(ok[3].as_str().unwrap().starts_with("invalid:"), "{ok}");
    // The socket still serves.
    assert!(req(&mut ws, "fine", json!({"kinds": [1]})).is_empty());
}

#[test]
fn a_frame_over_the_size_cap_closes_the_socket_with_1009() {
    let (_server, addr, _) = serve("nostr-oversized", &[]);
    let (mut ws, _) = connect(addr);
    let big = format!("[\"EVENT\",\"{}\"]", "x".repeat(DEFAULT_MAX_MESSAGE_BYTES));
    // The relay may close while the frame is still being written.
    let _ = ws.send(Message::Text(big.into()));
    loop {
        match ws.read() {
            Ok(Message::Close(Some(frame))) => {
                assert_eq!(frame.code, CloseCode::Size, "{frame:?}");
                return;
            }
            Ok(Message::Close(None)) => panic!("a close without its code"),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

#[test]
fn an_acknowledged_event_survives_kill_9_and_a_restart() {
    let (mut server, addr, data) = serve("nostr-durable", &[]);
    let mut s = Signer::new(4);
    let key = s.key();
    let (mut ws, _) = connect(addr);
    let event = s.event(&key, 1, vec![]);
    assert_eq!(publish(&mut ws, &event)[2], true);
    // SIGKILL, straight after the ack: no shutdown path runs.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(ws);
    let _server = start(&data, addr, &[]);
    let (mut ws, _) = connect(addr);
    let stored = req(&mut ws, "after", json!({"ids": [event.id_hex()]}));
    assert_eq!(stored, vec![event.to_value()]);
}

#[test]
fn nip11_is_served_at_root_for_application_nostr_json_and_health_still_answers() {
    let (_server, addr, _) = serve("nostr-nip11", &[]);
    let get = |head: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    };
    let answer = get("GET / HTTP/1.1\r\nHost: x\r\nAccept: application/nostr+json\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("content-type: application/nostr+json"),
        "{head}"
    );
    assert!(lower.contains("access-control-allow-origin: *"), "{head}");
    let doc: Value = serde_json::from_str(body).unwrap();
    assert_eq!(doc["supported_nips"], json!([1, 9, 11, 40, 42, 45, 62, 77]));
    assert_eq!(
        doc["limitation"]["max_message_length"],
        json!(DEFAULT_MAX_MESSAGE_BYTES)
    );
    // Without the media type, `/` is the WebSocket service's plain answer.
    assert!(get("GET / HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 426"));
    assert!(get("GET /health HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 200"));
}

#[test]
fn a_req_over_several_store_pages_sends_every_event_newest_first_then_eose() {
    let (_server, addr, _) = serve("nostr-pages", &[]);
    let mut s = Signer::new(5);
    let key = s.key();
    // More than two pages of the default page size (100), so the session asks for the next
    // page after each flush; published over several sockets, each within its message rate.
    let mut sent = Vec::new();
    let mut ws = connect(addr).0;
    for i in 0..230u64 {
        if i % 80 == 0 {
            ws = connect(addr).0;
        }
        let event = UnsignedEvent {
            created_at: weft_drivers::now().as_secs() - 1_000 + i,
            kind: 1,
            tags: vec![],
            content: i.to_string(),
        }
        .sign(weft_drivers::server_provider(), &key, &mut s.rng)
        .unwrap();
        assert_eq!(publish(&mut ws, &event)[2], true);
        sent.push(event.id_hex());
    }
    let got = req(&mut ws, "all", json!({"kinds": [1], "limit": 1000}));
    let ids: Vec<String> = got
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    sent.reverse();
    assert_eq!(ids, sent);
    let mut ws = connect(addr).0;
    let limited = req(&mut ws, "some", json!({"kinds": [1], "limit": 150}));
    assert_eq!(limited.len(), 150);
}

#[test]
fn a_nostream_settings_file_sets_the_nip11_name_and_the_subscription_cap() {
    let dir = temp_dir("nostr-config");
    let settings = dir.join("settings.yaml");
    std::fs::write(
        &settings,
        "info:\n  name: configured relay\npayments:\n  enabled: false\nlimits:\n  client:\n    subscription:\n      maxSubscriptions: 1\n",
    )
    .unwrap();
    let addr = free_port();
    let config = settings.to_str().unwrap();
    let _server = start(&dir.join("nostr"), addr, &["--config", config]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nAccept: application/nostr+json\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let doc: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(doc["name"], "configured relay");
    assert_eq!(doc["limitation"]["max_subscriptions"], 1);
    let (mut ws, _) = connect(addr);
    assert!(req(&mut ws, "one", json!({"kinds": [1]})).is_empty());
    send(&mut ws, &json!(["REQ", "two", {"kinds": [1]}]));
    let closed = next(&mut ws);
    assert_eq!(
        (&closed[0], &closed[1]),
        (&json!("CLOSED"), &json!("two")),
        "{closed}"
    );

    // A key weft reads with the wrong type stops the start, naming it (exit 2).
    std::fs::write(&settings, "network:\n  maxPayloadSize: big\n").unwrap();
    let out = Command::new(WEFT)
        .args([
            "nostr",
            "serve",
            "--listen",
            &free_port().to_string(),
            "--data-dir",
        ])
        .arg(dir.join("nostr"))
        .args(["--config", config])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("network.maxPayloadSize"));
}

#[test]
fn negentropy_over_the_socket_finds_exactly_what_each_side_lacks() {
    use negentropy::{Id, Negentropy, NegentropyStorageVector};
    let (_server, addr, _) = serve("nostr-neg", &[]);
    let mut s = Signer::new(6);
    let key = s.key();
    let (mut ws, _) = connect(addr);
    let mut relay_events = Vec::new();
    for i in 0..30u64 {
        let event = UnsignedEvent {
            created_at: weft_drivers::now().as_secs() - 100 + i,
            kind: 1,
            tags: vec![],
            content: i.to_string(),
        }
        .sign(weft_drivers::server_provider(), &key, &mut s.rng)
        .unwrap();
        assert_eq!(publish(&mut ws, &event)[2], true);
        relay_events.push(event);
    }
    // The client holds the first ten and ten of its own.
    let mut storage = NegentropyStorageVector::new();
    for e in &relay_events[..10] {
        storage
            .insert(e.created_at, Id::from_byte_array(e.id))
            .unwrap();
    }
    let mut client_only: Vec<[u8; 32]> = (0..10u8).map(|i| [i + 1; 32]).collect();
    for id in &client_only {
        storage.insert(1_000, Id::from_byte_array(*id)).unwrap();
    }
    storage.seal().unwrap();
    let mut client = Negentropy::owned(storage, 0).unwrap();
    let first = client.initiate().unwrap();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    send(
        &mut ws,
        &json!(["NEG-OPEN", "n", {"kinds": [1]}, hex(&first)]),
    );
    let (mut have, mut need) = (Vec::new(), Vec::new());
    for round in 0.. {
        assert!(round < 20, "reconciliation does not end");
        let m = next(&mut ws);
        assert_eq!((&m[0], &m[1]), (&json!("NEG-MSG"), &json!("n")), "{m}");
        let text = m[2].as_str().unwrap();
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect();
        match client
            .reconcile_with_ids(&bytes, &mut have, &mut need)
            .unwrap()
        {
            Some(next) => send(&mut ws, &json!(["NEG-MSG", "n", hex(&next)])),
            None => break,
        }
    }
    send(&mut ws, &json!(["NEG-CLOSE", "n"]));
    let sorted = |v: Vec<Id>| {
        let mut v: Vec<[u8; 32]> = v.into_iter().map(|i| i.to_bytes()).collect();
        v.sort();
        v
    };
    let mut relay_only: Vec<[u8; 32]> = relay_events[10..].iter().map(|e| e.id).collect();
    relay_only.sort();
    client_only.sort();
    assert_eq!(sorted(need), relay_only);
    assert_eq!(sorted(have), client_only);
    // The socket serves on after the session.
    assert_eq!(req(&mut ws, "after", json!({"kinds": [1]})).len(), 30);
}

#[test]
fn over_wss_the_relay_serves_with_the_certificate_it_is_given() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let dir = temp_dir("nostr-wss");
    let files = tls_ca::Ca::new().files(&dir, "127.0.0.1");
    let addr = free_port();
    let (cert, key) = (files.cert.unwrap(), files.key.unwrap());
    let server = start(
        &dir.join("nostr"),
        addr,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let _server = server;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(files.trust.unwrap()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let tls =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1").unwrap())
            .unwrap();
    let stream = rustls::StreamOwned::new(tls, tcp);
    let (mut ws, response) = tungstenite::client::client(format!("wss://{addr}/"), stream).unwrap();
    assert_eq!(response.status(), 101);
    let first = next_text(&mut ws);
    assert_eq!(first[0], "AUTH", "{first}");
    let mut s = Signer::new(7);
    let key = s.key();
    let event = s.event(&key, 1, vec![]);
    ws.send(Message::Text(
        json!(["EVENT", event.to_value()]).to_string().into(),
    ))
    .unwrap();
    let ok = next_text(&mut ws);
    assert_eq!(ok, json!(["OK", event.id_hex(), true, ""]));
}

/// The next text message on a socket of any stream, as JSON.
fn next_text<S: Read + Write>(ws: &mut WebSocket<S>) -> Value {
    loop {
        if let Message::Text(t) = ws.read().unwrap() {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

#[test]
fn every_event_acknowledged_from_several_sockets_survives_kill_9() {
    let (mut server, addr, data) = serve("nostr-durable-many", &[]);
    let mut s = Signer::new(8);
    let key = s.key();
    let mut sockets: Vec<Ws> = (0..3).map(|_| connect(addr).0).collect();
    let mut acked = Vec::new();
    // Interleaved: each socket's EVENT goes out before any OK is read, so writes from several
    // sockets are in flight together.
    for round in 0..15 {
        let events: Vec<Event> = (0..sockets.len())
            .map(|i| s.event(&key, 1, vec![vec!["n".into(), format!("{round}-{i}")]]))
            .collect();
        for (ws, e) in sockets.iter_mut().zip(&events) {
            send(ws, &json!(["EVENT", e.to_value()]));
        }
        for (ws, e) in sockets.iter_mut().zip(&events) {
            let ok = next(ws);
            assert_eq!(ok, json!(["OK", e.id_hex(), true, ""]), "{ok}");
            acked.push(e.id_hex());
        }
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(sockets);
    let _server = start(&data, addr, &[]);
    let (mut ws, _) = connect(addr);
    let stored = req(&mut ws, "all", json!({"ids": acked.clone()}));
    let mut got: Vec<String> = stored
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    acked.sort();
    assert_eq!(got, acked);
}
