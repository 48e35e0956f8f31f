//! The Nostr end-to-end tests' one harness: a WebSocket client (tungstenite, blocking) for any
//! relay, a `weft nostr serve` process whose stderr goes to a file the test reads back, and the
//! relays the project's interop scripts start (rust-nostr's, nostr-rs-relay), each stopped on
//! drop. Used with `common/cli.rs`, which this module names as `super::cli`.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

use super::cli::WEFT;

/// How long a client waits for one frame or HTTP answer before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// How long a started relay has to say it listens.
pub(crate) const START: Duration = Duration::from_secs(60);

/// Exit status with which the project's interop scripts say "cannot run here" (after printing
/// their one `SKIP: <reason>` line).
pub(crate) const SKIP_STATUS: i32 = 77;

/// A client socket.
pub(crate) type Ws = WebSocket<TcpStream>;

/// An author's key, the same for the same seed.
pub(crate) fn author(seed: u64) -> weft_proto::crypto::Secp256k1Secret {
    use weft_proto::core::rand_core::SeedableRng;
    weft_proto::crypto::generate_secp256k1(
        weft_drivers::server_provider(),
        &mut chacha20::ChaCha20Rng::seed_from_u64(seed),
    )
}

/// An event `k` signed, its signing randomness seeded from `created_at` and `kind` so a run
/// replays.
pub(crate) fn event(
    k: &weft_proto::crypto::Secp256k1Secret,
    kind: u16,
    created_at: u64,
    tags: &[&[&str]],
    content: &str,
) -> weft_proto::nostr::event::Event {
    use weft_proto::core::rand_core::SeedableRng;
    weft_proto::nostr::event::UnsignedEvent {
        created_at,
        kind,
        tags: tags
            .iter()
            .map(|t| t.iter().map(|s| s.to_string()).collect())
            .collect(),
        content: content.into(),
    }
    .sign(
        weft_drivers::server_provider(),
        k,
        &mut chacha20::ChaCha20Rng::seed_from_u64(created_at ^ u64::from(kind)),
    )
    .unwrap()
}

/// The wall clock in Unix seconds.
pub(crate) fn now_secs() -> u64 {
    weft_drivers::now().as_secs()
}

/// A WebSocket to `url` (`ws://host:port`, a trailing `/` or none), nothing read yet.
pub(crate) fn open(url: &str) -> Ws {
    let addr = url.trim_start_matches("ws://").trim_end_matches('/');
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (ws, response) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    assert_eq!(response.status(), 101);
    ws
}

/// A client socket to a `weft nostr serve`, past its first frame, the NIP-42 challenge, which is
/// returned with it.
pub(crate) fn connect(addr: SocketAddr) -> (Ws, String) {
    let mut ws = open(&format!("ws://{addr}"));
    let auth = next(&mut ws);
    assert_eq!(auth[0], "AUTH", "{auth}");
    let challenge = auth[1].as_str().unwrap().to_string();
    (ws, challenge)
}

/// The next text frame, as JSON (pings and pongs passed over).
pub(crate) fn next(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("not a text frame: {other:?}"),
        }
    }
}

/// Sends one frame.
pub(crate) fn send(ws: &mut Ws, frame: &Value) {
    ws.send(Message::Text(frame.to_string().into())).unwrap();
}

/// The stored events a `REQ` of `filter` on `sub` returns before its `EOSE`; any other frame
/// fails the test.
pub(crate) fn req(ws: &mut Ws, sub: &str, filter: Value) -> Vec<Value> {
    req_passing(ws, sub, filter, &[])
}

/// As [`req`], passing over frames whose type is in `pass` (a relay's `AUTH` or `NOTICE`).
pub(crate) fn req_passing(ws: &mut Ws, sub: &str, filter: Value, pass: &[&str]) -> Vec<Value> {
    send(ws, &json!(["REQ", sub, filter]));
    let mut events = Vec::new();
    loop {
        let m = next(ws);
        match m[0].as_str() {
            Some("EVENT") => {
                assert_eq!(m[1], sub, "{m}");
                events.push(m[2].clone());
            }
            Some("EOSE") => {
                assert_eq!(m[1], sub, "{m}");
                return events;
            }
            Some(t) if pass.contains(&t) => {}
            _ => panic!("unexpected {m}"),
        }
    }
}

/// The ids a `REQ` of `filter` returns before its `EOSE`, passing over a relay's `AUTH` and
/// `NOTICE` (a relay weft did not write may send either at any time).
pub(crate) fn req_ids(ws: &mut Ws, filter: Value) -> BTreeSet<String> {
    ids_of_values(&req_passing(ws, "q", filter, &["AUTH", "NOTICE"]))
}

/// The ids of `events` (JSON objects).
pub(crate) fn ids_of_values(events: &[Value]) -> BTreeSet<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// Publishes `event` and returns the `OK` for it (the frames before it, such as a relay's
/// `AUTH`, passed over).
pub(crate) fn publish(ws: &mut Ws, event: &weft_proto::nostr::event::Event) -> Value {
    send(ws, &json!(["EVENT", event.to_value()]));
    loop {
        let m = next(ws);
        if m[0] == "OK" {
            assert_eq!(m[1], event.id_hex(), "{m}");
            return m;
        }
    }
}

/// An HTTP/1.1 request `head` to `addr`, read to the close: the answer's head and body.
pub(crate) fn http(addr: SocketAddr, head: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (h, b) = answer.split_once("\r\n\r\n").unwrap();
    (h.to_string(), b.to_string())
}

/// A running `weft nostr serve`, its stderr in a file; killed (`kill -9`) on drop.
pub(crate) struct WeftRelay {
    child: Child,
    log: PathBuf,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl WeftRelay {
    /// Starts `weft nostr serve` on `addr` with its data in `data`, `--config config` when
    /// given, and exactly the environment variables `env` of the relay key's two (`SECRET`,
    /// `RELAY_PRIVATE_KEY`); waits until it listens. Its stderr goes to `log`.
    pub(crate) fn start(
        addr: SocketAddr,
        data: &Path,
        config: Option<&Path>,
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> Self {
        let mut cmd = Command::new(WEFT);
        cmd.args([
            "nostr",
            "serve",
            "--listen",
            &addr.to_string(),
            "--data-dir",
        ])
        .arg(data);
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        cmd.env_remove("SECRET")
            .env_remove("RELAY_PRIVATE_KEY")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        let child = cmd.spawn().unwrap();
        let mut relay = Self { child, log, addr };
        let start = Instant::now();
        while !relay.log().contains("listening on ws") {
            if let Ok(Some(status)) = relay.child.try_wait() {
                panic!("weft nostr serve exited ({status}): {}", relay.log());
            }
            assert!(start.elapsed() < START, "{}", relay.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        relay
    }

    /// What it wrote on stderr so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its `ws://` URL.
    pub(crate) fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// `kill -9`.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// An HTTP request to it: the answer's head and body.
    pub(crate) fn http(&self, head: &str) -> (String, String) {
        http(self.addr, head)
    }

    /// Its NIP-11 document.
    pub(crate) fn nip11(&self) -> Value {
        let (head, body) =
            self.http("GET / HTTP/1.1\r\nHost: x\r\nAccept: application/nostr+json\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str(&body).unwrap()
    }

    /// The rows of `GET /admin/peering`, asked with `token`.
    pub(crate) fn rows(&self, token: &str) -> Vec<Value> {
        let (head, body) = self.http(&format!(
            "GET /admin/peering HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The row of the peer `pubkey` (hex), if it has one.
    pub(crate) fn row(&self, token: &str, pubkey: &str) -> Option<Value> {
        self.rows(token).into_iter().find(|r| r["pubkey"] == pubkey)
    }

    /// The sorted ids of the events of `kind` it holds, as a client reads them.
    pub(crate) fn ids(&self, kind: u16) -> Vec<String> {
        let (mut ws, _) = connect(self.addr);
        let ids = ids_of_values(&req(&mut ws, "q", json!({"kinds": [kind]})));
        ids.into_iter().collect()
    }

    /// Publishes `event`, which must be taken.
    pub(crate) fn publish(&self, event: &weft_proto::nostr::event::Event) {
        let (mut ws, _) = connect(self.addr);
        let ok = publish(&mut ws, event);
        assert_eq!(ok[2], true, "{ok}");
    }
}

impl Drop for WeftRelay {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The repository's `scripts/NAME`.
pub(crate) fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

/// Says why a test did not run, on the real stderr (the harness captures a passing test's).
pub(crate) fn skip(test: &str, line: &str) {
    let _ = writeln!(std::io::stderr(), "{test}: {}", line.trim());
}

/// A relay started by one of the interop scripts: its URL (its first stdout line) and the
/// process, killed on drop.
pub(crate) struct Started {
    /// `ws://127.0.0.1:PORT`.
    pub(crate) url: String,
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl Started {
    /// Runs `scripts/NAME serve ARGS…` until it prints its URL; `Err` with its `SKIP:` line.
    pub(crate) fn start(name: &str, args: &[&str]) -> Result<Self, String> {
        let mut child = Command::new(script(name))
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run scripts/{name}: {e}"));
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let line = line.trim().to_string();
        if line.starts_with("ws://") {
            return Ok(Self {
                url: line,
                child,
                _stdin: stdin,
            });
        }
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(SKIP_STATUS),
            "scripts/{name} serve printed {line:?} and ended {status}"
        );
        Err(line)
    }

    /// Its `host:port`.
    pub(crate) fn authority(&self) -> &str {
        self.url.trim_start_matches("ws://").trim_end_matches('/')
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP forwarder on a loopback port in front of `target`, counting what connects through it:
/// the test's own view of how often a relay dials a peer, independent of what the relay reports.
pub(crate) struct CountingProxy {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    counts: std::sync::Arc<std::sync::Mutex<ProxyCounts>>,
}

/// What passed through a [`CountingProxy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProxyCounts {
    /// Connections accepted.
    pub(crate) connections: usize,
    /// Of those, requests to upgrade to a WebSocket.
    pub(crate) upgrades: usize,
}

impl CountingProxy {
    /// Starts forwarding to `target` (`host:port`) on a thread of its own, for the life of the
    /// test process.
    pub(crate) fn start(target: &str) -> Self {
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(ProxyCounts::default()));
        let (target, shared) = (target.to_string(), counts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (target, counts) = (target.clone(), shared.clone());
                std::thread::spawn(move || forward(client, &target, &counts));
            }
        });
        Self { addr, counts }
    }

    /// What passed through so far.
    pub(crate) fn counts(&self) -> ProxyCounts {
        *self.counts.lock().unwrap()
    }
}

fn forward(client: TcpStream, target: &str, counts: &std::sync::Mutex<ProxyCounts>) {
    // The request head decides what the connection is; it is peeked, so all of it is forwarded.
    let mut head = [0u8; 4096];
    let _ = client.set_read_timeout(Some(WAIT));
    let n = client.peek(&mut head).unwrap_or(0);
    let text = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    {
        let mut c = counts.lock().unwrap();
        c.connections += 1;
        if text.contains("upgrade: websocket") {
            c.upgrades += 1;
        }
    }
    let Ok(server) = TcpStream::connect(target) else {
        return;
    };
    let _ = client.set_read_timeout(None);
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut s_write);
        let _ = s_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut s_read, mut c_write) = (server, client);
    let _ = std::io::copy(&mut s_read, &mut c_write);
    let _ = c_write.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}
