//! Three `weft node` processes meet in one space over real sockets (Minca 04 Network §2, §5.1,
//! §7.2, §7.3, §8, §9): relay WebSockets to `weft relay` processes, str0m WebRTC data channels
//! between every pair, and live messages typed on stdin reaching the others' stdout.
//!
//! With one relay, the third node's hello would reach both others and it would meet both through
//! the relay, so nothing would show an introduction. So there are two relays: the first node uses
//! relay 1, the second both, the third relay 2. The first and second meet through relay 1 and the
//! third meets the second through relay 2; the first and third share no relay, so the only way
//! they can end up connected is the second's introduction (§8: `__peers`, then offer and answer as
//! `__signal`s over its data channels).
//!
//! A fourth client reaches an always-on node over the node WebSocket (§5.2, §5.3, §6.1): `weft
//! relay --node-key --host-space --chat` serves `/peer`, and `weft node --node URL#PIN` dials it,
//! proves itself, and lines typed on either's stdin arrive as live messages the other prints, in
//! `weft node`'s format. When the node process is killed and started again on the same port, the
//! client dials it again on its own and the chat goes on; a client that refuses the node's pin
//! dials it once, never in a loop.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// How long each phase may take. A hello back may wait 10 s (§2, `HELLO_BACK_INTERVAL`), so
/// meeting through a relay can take that long.
const PHASE: Duration = Duration::from_secs(40);

const SPACE: &str = "space-node-e2e";

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line a `weft relay` logs, which says where it listens; the rest of its log is read
/// and dropped so it never blocks on a full pipe.
fn first_log_line(child: &mut Child) -> String {
    let mut err = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut line = String::new();
    err.read_line(&mut line).expect("weft relay logs");
    std::thread::spawn(move || for _ in err.lines() {});
    line
}

/// The JSON lines `program` prints on `out`, one value each, as they come.
fn json_lines(out: ChildStdout, program: &'static str) -> Receiver<Value> {
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("{program} printed a line that is not JSON ({e}): {line}")
            });
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    lines
}

/// The next line from `lines` that `matches`, within [`PHASE`]; every line read goes into `seen`.
/// `None` when none came.
fn next_match(
    lines: &Receiver<Value>,
    seen: &mut Vec<Value>,
    matches: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = Instant::now() + PHASE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let v = lines.recv_timeout(left).ok()?;
        seen.push(v.clone());
        if matches(&v) {
            return Some(v);
        }
    }
}

/// A `weft relay` on an ephemeral port; its address read from the line it logs.
fn relay() -> (Proc, String) {
    let mut child = Command::new(WEFT)
        .args(["relay", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weft relay starts");
    // "weft relay: listening on ws://127.0.0.1:PORT"
    let line = first_log_line(&mut child);
    let url = line.trim().rsplit(' ').next().expect("a URL").to_owned();
    (Proc(child), url)
}

/// A `weft node` process: its stdin, and its stdout's JSON lines.
struct Node {
    name: &'static str,
    _proc: Proc,
    stdin: ChildStdin,
    lines: Receiver<Value>,
    seen: Vec<Value>,
    did: String,
    account: String,
}

impl Node {
    fn start(name: &'static str, relays: &[&str]) -> Self {
        Self::start_with(name, relays, &[])
    }

    /// A node meeting through `relays` and reaching the always-on `nodes`; with relays, it is
    /// started once a relay socket is open.
    fn start_with(name: &'static str, relays: &[&str], nodes: &[&str]) -> Self {
        let mut cmd = Command::new(WEFT);
        cmd.args(["node", "--space", SPACE]);
        for r in relays {
            cmd.args(["--relay", r]);
        }
        for n in nodes {
            cmd.args(["--node", n]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weft node starts");
        let stdin = child.stdin.take().unwrap();
        let lines = json_lines(child.stdout.take().unwrap(), "weft node");
        let mut node = Self {
            name,
            _proc: Proc(child),
            stdin,
            lines,
            seen: Vec::new(),
            did: String::new(),
            account: String::new(),
        };
        let ready = node.wait_for("print its ready line", |v| v["event"] == "ready");
        node.did = ready["did"].as_str().unwrap().to_owned();
        node.account = ready["account"].as_str().unwrap().to_owned();
        if !relays.is_empty() {
            node.wait_for("open its relay sockets", |v| {
                v["event"] == "relay" && v["open"] == true
            });
        }
        node
    }

    /// Reads lines until one matches (also looking at those already read), failing the test after
    /// [`PHASE`].
    fn wait_for(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| matches(v)) {
            return v.clone();
        }
        next_match(&self.lines, &mut self.seen, matches).unwrap_or_else(|| {
            panic!(
                "node {} did not {what} within {PHASE:?}; it printed:\n{}",
                self.name,
                self.seen
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })
    }

    fn wait_admitted(&mut self, other: &Node) {
        let (did, name) = (other.did.clone(), other.name);
        self.wait_for(&format!("admit {name}"), |v| {
            v["event"] == "admitted" && v["peer"] == did.as_str() && v["space"] == SPACE
        });
    }

    fn type_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("the node reads stdin");
        self.stdin.flush().unwrap();
    }
}

#[test]
fn a_relay_connects_the_first_pair_and_a_peer_introduces_the_rest_over_real_webrtc() {
    let (_relay1, r1) = relay();
    let (_relay2, r2) = relay();
    let mut a = Node::start("A", &[&r1]);
    let mut b = Node::start("B", &[&r1, &r2]);
    // The first pair meets through relay 1.
    a.wait_admitted(&b);
    b.wait_admitted(&a);
    // The third meets B through relay 2, and B introduces it to A.
    let mut c = Node::start("C", &[&r2]);
    c.wait_admitted(&b);
    b.wait_admitted(&c);
    a.wait_admitted(&c);
    c.wait_admitted(&a);

    // Each one's `who` named its account to the others (§9.1).
    for (x, y) in [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)] {
        let nodes = [&mut a, &mut b, &mut c];
        let (did, account) = (nodes[y].did.clone(), nodes[y].account.clone());
        nodes[x].wait_for("hear an account", |v| {
            v["event"] == "account" && v["peer"] == did.as_str() && v["account"] == account.as_str()
        });
    }

    // A live message typed into each reaches the other two, from its session DID and account.
    let mut nodes = [a, b, c];
    for i in 0..3 {
        let text = format!("hello from {}", nodes[i].name);
        nodes[i].type_line(&text);
        let (from, account) = (nodes[i].did.clone(), nodes[i].account.clone());
        for (j, node) in nodes.iter_mut().enumerate() {
            if j == i {
                continue;
            }
            let got = node.wait_for(&format!("hear {text:?}"), |v| {
                v["event"] == "live" && v["payload"] == json!(text.as_str())
            });
            assert_eq!(
                got["from"],
                json!(from),
                "attributed to the sender's session"
            );
            assert_eq!(got["account"], json!(account), "with the sender's account");
            assert_eq!(got["space"], json!(SPACE));
        }
    }
    // Every pair stayed on its one connection: nobody departed.
    for node in &nodes {
        assert!(
            !node.seen.iter().any(|v| v["event"] == "departed"),
            "node {} saw a departure: {:?}",
            node.name,
            node.seen
        );
    }
}

/// A `weft relay` that is also the always-on node of the key in `dir` (made on first start),
/// holding [`SPACE`], with the chat on its stdin and stdout.
struct AlwaysOn {
    _proc: Proc,
    /// Its stdin, until the test closes it.
    stdin: Option<ChildStdin>,
    /// Its `/peer` URL pinned to the node's DID (`ws://ADDR/peer#did:key:…`).
    url: String,
    /// Where it listens.
    addr: String,
    did: String,
    lines: Receiver<Value>,
}

impl AlwaysOn {
    /// Starts it listening on `listen` (`127.0.0.1:0` for any port).
    fn start(dir: &std::path::Path, listen: &str) -> Self {
        let key = dir.join("node.key");
        let mut child = Command::new(WEFT)
            .args(["relay", "--chat", "--listen", listen, "--host-space", SPACE])
            .arg("--node-key")
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weft relay starts");
        // "weft relay: listening on ws://ADDR, node did:key:… on ws://ADDR/peer"
        let line = first_log_line(&mut child);
        let words: Vec<&str> = line.split_whitespace().collect();
        let (did, url) = match words.as_slice() {
            [.., "node", did, "on", url] => ((*did).to_owned(), (*url).to_owned()),
            _ => panic!("weft relay did not name its node: {line}"),
        };
        let addr = url
            .trim_start_matches("ws://")
            .trim_end_matches("/peer")
            .to_owned();
        let stdin = child.stdin.take();
        let lines = json_lines(child.stdout.take().unwrap(), "weft relay");
        Self {
            _proc: Proc(child),
            stdin,
            url: format!("{url}#{did}"),
            addr,
            did,
            lines,
        }
    }

    /// Waits up to [`PHASE`] for a line it prints that `matches`.
    fn wait_line(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let mut seen = Vec::new();
        next_match(&self.lines, &mut seen, matches).unwrap_or_else(|| {
            panic!("the always-on node did not {what} within {PHASE:?}; it printed {seen:?}")
        })
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").expect("the relay reads stdin");
        stdin.flush().unwrap();
    }
}

/// A directory of its own for test `name`, empty.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-node-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The client `d` and the always-on node `node` know each other, and a line typed into each
/// arrives at the other as a live message of [`SPACE`] from the sender's session and account.
fn chat_both_ways(d: &mut Node, node: &mut AlwaysOn, text: &str) {
    let did = d.did.clone();
    node.wait_line("admit the client", |v| {
        v["event"] == "admitted" && v["peer"] == did.as_str() && v["space"] == SPACE
    });
    let account = d.account.clone();
    node.wait_line("hear the client's account", |v| {
        v["event"] == "account" && v["peer"] == did.as_str() && v["account"] == account.as_str()
    });

    // Client → node: the same line `weft node` prints.
    let up = format!("{text} (from the client)");
    d.type_line(&up);
    let got = node.wait_line("hear the client's live message", |v| v["event"] == "live");
    assert_eq!(
        got,
        json!({"event": "live", "space": SPACE, "from": did, "account": account, "payload": up}),
        "attributed to the client's session and account"
    );

    // Node → client: a line on the relay's stdin.
    let down = format!("{text} (from the node)");
    node.type_line(&down);
    let got = d.wait_for("hear the node's live message", |v| {
        v["event"] == "live" && v["payload"] == json!(down.as_str())
    });
    assert_eq!(
        got["from"],
        json!(node.did),
        "attributed to the node's session"
    );
    assert_eq!(got["account"], Value::Null, "the node shows no account");
    assert_eq!(got["space"], json!(SPACE));
}

#[test]
fn a_client_and_the_always_on_node_exchange_live_messages_both_ways_over_the_pinned_node_websocket()
{
    let dir = scratch("chat");
    let mut node = AlwaysOn::start(&dir, "127.0.0.1:0");
    // No relay at all: the node WebSocket is this client's only way in.
    let mut d = Node::start_with("D", &[], &[&node.url]);
    let node_did = node.did.clone();
    d.wait_for("admit the always-on node", |v| {
        v["event"] == "admitted" && v["peer"] == node_did.as_str() && v["space"] == SPACE
    });
    chat_both_ways(&mut d, &mut node, "hello");

    // The end of its stdin ends the chat, not the relay: the node still serves the client.
    node.stdin = None;
    d.type_line("still there?");
    let got = node.wait_line("hear the client after its stdin ended", |v| {
        v["event"] == "live"
    });
    assert_eq!(got["payload"], json!("still there?"));
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_dials_the_always_on_node_again_after_it_restarts_and_live_messages_flow_again() {
    let dir = scratch("restart");
    let mut node = AlwaysOn::start(&dir, "127.0.0.1:0");
    let mut d = Node::start_with("D", &[], &[&node.url]);
    let node_did = node.did.clone();
    chat_both_ways(&mut d, &mut node, "before the restart");

    // The node goes away: the client sees its peer depart.
    let addr = node.addr.clone();
    drop(node);
    d.wait_for("see the node depart", |v| {
        v["event"] == "departed" && v["peer"] == node_did.as_str()
    });
    // What it printed before is no answer to what follows.
    d.seen.clear();

    // The same node (its key kept in `dir`) comes back on the same port; the client dials again
    // on its own, and the node is its peer once more.
    let mut node = AlwaysOn::start(&dir, &addr);
    assert_eq!(
        node.did, node_did,
        "the node keeps its DID across the restart"
    );
    let admitted_again = |v: &Value| {
        v["event"] == "admitted" && v["peer"] == node_did.as_str() && v["space"] == SPACE
    };
    d.wait_for("admit the node again", admitted_again);
    chat_both_ways(&mut d, &mut node, "after the restart");
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_weft_node_that_refuses_the_nodes_pin_dials_it_once_not_in_a_loop() {
    let dir = scratch("pin");
    let node = AlwaysOn::start(&dir, "127.0.0.1:0");
    // Pinned to a DID that is not the node's.
    let other = {
        use chacha20::ChaCha20Rng;
        use rand_core::SeedableRng;
        use weft_proto::crypto::{CryptoProvider, default_provider, generate_p256};
        let key = generate_p256(default_provider(), &mut ChaCha20Rng::seed_from_u64(1));
        let public = default_provider().p256_public_key(&key).unwrap();
        weft_proto::codec::did_key::DidKey::P256(public.0).to_did()
    };
    let wrong = format!("{}#{other}", node.url.split('#').next().unwrap());
    let mut d = Node::start_with("D", &[], &[&wrong]);
    let did = d.did.clone();
    let gave_up = d.wait_for("give the node up", |v| {
        v["event"] == "other" && v["what"].as_str().is_some_and(|w| w.starts_with("GaveUp"))
    });
    assert!(
        gave_up["what"].as_str().unwrap().contains("4002"),
        "{gave_up}"
    );
    // The node welcomed the hello once and saw the refusal close it.
    node.wait_line("see the refused client depart", |v| {
        v["event"] == "departed" && v["peer"] == did.as_str()
    });
    // Longer than the first two redials would take (≤ 1 s, then ≤ 2 s): no hello comes again.
    let quiet = Instant::now() + Duration::from_secs(3);
    while let Some(left) = quiet.checked_duration_since(Instant::now()) {
        if let Ok(v) = node.lines.recv_timeout(left) {
            assert!(
                !(v["event"] == "admitted" && v["peer"] == did.as_str()),
                "the refused node was dialled again: {v}"
            );
        }
    }
    assert!(
        !d.seen.iter().any(|v| v["event"] == "admitted"),
        "the client never took the node as a peer: {:?}",
        d.seen
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
