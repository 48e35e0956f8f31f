//! Two AIRC realm servers wired together in memory: peer links, signed hellos and welcomes, signed
//! messages, no transit, and acks back over the link (AIRC §6, §8.4, §9, Appendix A.1).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::discovery::{Answer, Endpoint, RecordType, SrvRecord};
use weft_proto::airc::server::{Face, Input, Output, Server, ServerConfig};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{self, CryptoProvider, Ed25519Seed};

const T0: Timestamp = Timestamp::from_secs(1_790_380_000);
const A: usize = 0;
const B: usize = 1;
const ALICE: ConnId = ConnId(1);
const DESK: ConnId = ConnId(2);

/// Two servers, the wires between their peer-face connections, and what their clients read.
struct Net {
    servers: [Server<ChaCha20Rng>; 2],
    realms: [Authority; 2],
    now: Timestamp,
    /// (server, conn) → (server, conn) at the other end of a peer link.
    wires: BTreeMap<(usize, ConnId), (usize, ConnId)>,
    /// Frames each client connection has read.
    inbox: BTreeMap<(usize, ConnId), Vec<Value>>,
    next_conn: u64,
    /// Whether a Connect is answered by wiring a link (false: the realm is unreachable).
    reachable: bool,
    /// The DNS both servers' hosts answer from; a question it has no answer for gets
    /// [`Answer::Nothing`].
    zone: BTreeMap<(RecordType, String), Answer>,
    /// Every DNS question asked: (server, kind, name).
    questions: Vec<(usize, RecordType, String)>,
    /// Every endpoint dialled: (server, endpoint).
    dials: Vec<(usize, Endpoint)>,
    /// Endpoints whose dial fails.
    dead: BTreeSet<Endpoint>,
    /// Every frame that crossed a peer link: (sending server, frame).
    wire_log: Vec<(usize, Value)>,
}

fn seed(n: u8) -> Ed25519Seed {
    Ed25519Seed::from_bytes([n; 32])
}

fn public(n: u8) -> [u8; 32] {
    crypto::default_provider().ed25519_public_key(&seed(n))
}

impl Net {
    /// example.com (key 1) and partner.example (key 2), each knowing the other's key, unless
    /// `tweak` changes that.
    fn new(tweak: impl Fn(usize, &mut ServerConfig)) -> Self {
        let realms = [
            Authority::parse("example.com").unwrap(),
            Authority::parse("partner.example").unwrap(),
        ];
        let servers = [0, 1].map(|i| {
            let mut c = ServerConfig::new(realms[i].clone());
            c.signing_key = Some(seed(i as u8 + 1));
            c.known_keys
                .insert(realms[1 - i].clone(), vec![public(2 - i as u8)]);
            c.known_namespaces = vec![Namespace::parse(["alice", "support"][i]).unwrap()];
            // Each finds the other by a static entry (§8.1 step 2) unless a test clears it to
            // use the zone.
            let other = realms[1 - i].clone();
            let at = Endpoint::new(other.host(), 2472);
            c.static_entries.insert(other, vec![at]);
            tweak(i, &mut c);
            Server::new(
                c,
                crypto::default_provider(),
                ChaCha20Rng::seed_from_u64(i as u64),
            )
        });
        Self {
            servers,
            realms,
            now: T0,
            wires: BTreeMap::new(),
            inbox: BTreeMap::new(),
            next_conn: 100,
            reachable: true,
            zone: BTreeMap::new(),
            questions: Vec::new(),
            dials: Vec::new(),
            dead: BTreeSet::new(),
            wire_log: Vec::new(),
        }
    }

    fn input(&mut self, s: usize, input: Input) {
        self.servers[s].handle(self.now, input);
        self.settle();
    }

    fn frame(&mut self, s: usize, conn: ConnId, frame: Value) {
        let mut bytes = serde_json::to_vec(&frame).unwrap();
        bytes.push(b'\n');
        self.input(s, Input::Received { conn, bytes });
    }

    fn client(&mut self, s: usize, conn: ConnId, ns: &str, bind: &[&str]) {
        let namespaces = vec![Namespace::parse(ns).unwrap()];
        self.input(
            s,
            Input::Opened {
                conn,
                face: Face::Client,
                namespaces,
            },
        );
        self.frame(
            s,
            conn,
            json!({"t":"hello","proto":"airc/0.1","role":"client"}),
        );
        if !bind.is_empty() {
            self.frame(s, conn, json!({"t":"bind","names":bind}));
        }
    }

    /// Carries every output until both servers are quiet.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for s in [A, B] {
                while let Some(o) = self.servers[s].poll() {
                    moved = true;
                    self.carry(s, o);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the servers never went quiet");
    }

    fn carry(&mut self, s: usize, o: Output) {
        match o {
            Output::Send { conn, bytes } => match self.wires.get(&(s, conn)).copied() {
                Some((t, tc)) => {
                    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        self.wire_log
                            .push((s, serde_json::from_slice(line).unwrap()));
                    }
                    self.servers[t].handle(self.now, Input::Received { conn: tc, bytes })
                }
                None => {
                    let inbox = self.inbox.entry((s, conn)).or_default();
                    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        inbox.push(serde_json::from_slice(line).unwrap());
                    }
                }
            },
            Output::Close { conn } => {
                if let Some((t, tc)) = self.wires.remove(&(s, conn)) {
                    self.wires.remove(&(t, tc));
                    self.servers[t].handle(self.now, Input::Closed { conn: tc });
                }
                self.servers[s].handle(self.now, Input::Closed { conn });
            }
            Output::Resolve { name, kind } => {
                self.questions.push((s, kind, name.clone()));
                let answer = self
                    .zone
                    .get(&(kind, name.clone()))
                    .cloned()
                    .unwrap_or(Answer::Nothing);
                self.servers[s].handle(self.now, Input::Resolved { name, kind, answer });
            }
            Output::Connect {
                authority,
                endpoint,
            } => {
                self.dials.push((s, endpoint.clone()));
                let t = self.realms.iter().position(|r| *r == authority);
                let Some(t) = t.filter(|_| self.reachable && !self.dead.contains(&endpoint)) else {
                    self.servers[s].handle(self.now, Input::DialFailed { authority });
                    return;
                };
                let (dial, accept) = (ConnId(self.next_conn), ConnId(self.next_conn + 1));
                self.next_conn += 2;
                self.wires.insert((s, dial), (t, accept));
                self.wires.insert((t, accept), (s, dial));
                let namespaces = Vec::new();
                self.servers[t].handle(
                    self.now,
                    Input::Opened {
                        conn: accept,
                        face: Face::Peer,
                        namespaces,
                    },
                );
                self.servers[s].handle(
                    self.now,
                    Input::Dialled {
                        conn: dial,
                        authority,
                    },
                );
            }
            Output::Persist(_) | Output::Forget(_) => {}
            other => panic!("unexpected output {other:?}"),
        }
    }

    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let next = [A, B]
                .into_iter()
                .filter_map(|s| self.servers[s].poll_timeout().map(|w| (w.at, s)))
                .filter(|(at, _)| *at <= until)
                .min();
            let Some((at, s)) = next else { break };
            self.now = self.now.max(at);
            self.servers[s].handle_timeout(self.now);
            self.settle();
        }
        self.now = until;
    }

    /// Desk (at B) bound to `support/desk`, alice a client at A with no binds.
    fn desk_and_alice(&mut self) {
        self.client(B, DESK, "support", &["support/desk"]);
        self.client(A, ALICE, "alice", &[]);
    }

    /// [`desk_and_alice`](Self::desk_and_alice), alice's welcome read, and her `m1` to desk sent.
    fn m1_from_alice_to_desk(&mut self) {
        self.desk_and_alice();
        self.read(A, ALICE);
        self.frame(A, ALICE, to_desk("m1"));
    }

    /// Alice bound to `alice/x` at A and desk to `support/desk` at B, what they were told read.
    fn alice_and_desk_bound(&mut self) {
        self.client(A, ALICE, "alice", &["alice/x"]);
        self.client(B, DESK, "support", &["support/desk"]);
        self.read(A, ALICE);
        self.read(B, DESK);
    }

    fn read(&mut self, s: usize, conn: ConnId) -> Vec<Value> {
        std::mem::take(self.inbox.entry((s, conn)).or_default())
    }

    fn acks(&mut self, s: usize, conn: ConnId) -> Vec<Value> {
        self.read(s, conn)
            .into_iter()
            .filter(|f| f["t"] == "ack")
            .collect()
    }
}

/// `ack` is a failure with code `refused`.
#[track_caller]
fn assert_refused(ack: &Value) {
    assert_eq!(
        (&ack["status"], &ack["code"]),
        (&json!("failed"), &json!("refused"))
    );
}

fn to_desk(id: &str) -> Value {
    json!({"t":"msg","id":id,"from":"x","to":"//partner.example/support/desk","ts":1_790_380_000.1,"body":"hello"})
}

#[test]
fn appendix_a1_a_cross_realm_message_is_delivered_and_its_ack_comes_back() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.read(B, DESK);
    net.read(A, ALICE);

    net.frame(A, ALICE, to_desk("5b1e"));
    let got = net.read(B, DESK);
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert_eq!(m["from"], "airc://example.com/alice/x");
    assert_eq!(m["to"], "airc://partner.example/support/desk");
    assert_eq!(m["via"], json!(["example.com"]));
    assert!(m["hdr"]["sig"].as_str().unwrap().starts_with("ed25519:"));
    assert!(net.acks(A, ALICE).is_empty());

    net.frame(B, DESK, json!({"t":"ack","id":"5b1e","status":"delivered"}));
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"5b1e","status":"delivered"})]
    );
}

#[test]
fn a_second_message_uses_the_link_already_up() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    let links = net.wires.len();
    net.frame(A, ALICE, to_desk("m2"));
    assert_eq!(net.wires.len(), links, "no second link");
    let ids: Vec<_> = net
        .read(B, DESK)
        .into_iter()
        .filter(|f| f["t"] == "msg")
        .map(|f| f["id"].clone())
        .collect();
    assert_eq!(ids, [json!("m1"), json!("m2")]);
}

/// alice's m1 to desk while partner.example cannot be reached: spooled, and acked `queued
/// authority_unreachable`.
fn m1_queued_for_an_unreachable_partner() -> Net {
    let mut net = Net::new(|_, _| {});
    net.reachable = false;
    net.desk_and_alice();
    net.read(A, ALICE);
    net.read(B, DESK);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"queued","code":"authority_unreachable"})]
    );
    net
}

#[test]
fn an_unreachable_realm_gets_the_message_queued_then_flushed_when_a_link_comes_up() {
    let mut net = m1_queued_for_an_unreachable_partner();
    assert!(net.read(B, DESK).is_empty());
    // The periodic flush asks for the link again; now it comes up and the backlog goes out.
    net.reachable = true;
    net.advance(Duration::from_secs(30));
    let got = net.read(B, DESK);
    assert_eq!(got[0]["id"], "m1");
    net.frame(B, DESK, json!({"t":"ack","id":"m1","status":"delivered"}));
    assert!(
        net.acks(A, ALICE).is_empty(),
        "the origin already had its one ack"
    );
    assert_eq!(net.servers[A].spooled(), 0);
}

/// A-7.4-d: flushing preserves order per key. m1 is spooled while partner.example is
/// unreachable; five seconds later it is reachable and m2 waits for the link its arrival dials.
/// When that link comes up the older backlog goes first: desk reads m1, then m2.
#[test]
fn a_link_coming_up_sends_the_older_backlog_before_the_message_that_waited_for_it() {
    let mut net = m1_queued_for_an_unreachable_partner();
    net.reachable = true;
    net.advance(Duration::from_secs(5));
    net.frame(A, ALICE, to_desk("m2"));
    let ids: Vec<Value> = msgs(&net.read(B, DESK))
        .into_iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, [json!("m1"), json!("m2")]);
}

#[test]
fn a_welcome_signed_by_an_unpublished_key_is_refused_and_nothing_is_sent() {
    // example.com believes partner.example's key is key 9: the welcome does not verify.
    let mut net = Net::new(|i, c| {
        if i == A {
            c.known_keys.insert(
                Authority::parse("partner.example").unwrap(),
                vec![public(9)],
            );
        }
    });
    net.m1_from_alice_to_desk();
    assert!(
        net.read(B, DESK).iter().all(|f| f["t"] != "msg"),
        "never sent over an unverified link"
    );
    net.advance(Duration::from_secs(15));
    assert_eq!(net.acks(A, ALICE)[0]["code"], "authority_unreachable");
}

#[test]
fn a_peer_message_signed_by_an_unpublished_key_is_refused() {
    // partner.example believes example.com's key is key 9: its hello and message do not verify.
    let mut net = Net::new(|i, c| {
        if i == B {
            c.known_keys
                .insert(Authority::parse("example.com").unwrap(), vec![public(9)]);
        }
    });
    net.m1_from_alice_to_desk();
    assert!(net.read(B, DESK).iter().all(|f| f["t"] != "msg"));
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"failed","code":"refused"})],
        "B's refusal is relayed unchanged"
    );
}

#[test]
fn a_trusted_unsigned_realm_needs_no_signatures() {
    let mut net = Net::new(|i, c| {
        c.signing_key = None;
        c.known_keys.clear();
        c.trusted_unsigned = vec![Authority::parse(["partner.example", "example.com"][i]).unwrap()];
    });
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    let got = net.read(B, DESK);
    let m = got.iter().find(|f| f["t"] == "msg").expect("delivered");
    assert!(m["hdr"].is_null(), "unsigned");
    // A-8.4-h: a realm without a key answers a welcome with neither `sig` nor `kid`.
    let (_, w) = net
        .wire_log
        .iter()
        .find(|(s, f)| *s == B && f["t"] == "welcome")
        .expect("partner.example welcomed");
    assert!(w.get("sig").is_none() && w.get("kid").is_none(), "{w}");
}

#[test]
fn a_peer_may_not_relay_for_others_or_ask_for_transit() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1")); // brings the link up
    let (&(_, dial), _) = net.wires.iter().find(|((s, _), _)| *s == A).unwrap();
    // Frames written straight onto A's end of the link, as a compromised A could.
    let forged = [
        json!({"t":"msg","id":"f1","from":"airc://third.example/eve/x","to":"airc://partner.example/support/desk","ts":1_790_380_000,"body":"b"}),
        json!({"t":"msg","id":"f2","from":"airc://example.com/alice/x","to":"airc://third.example/z/y","ts":1_790_380_000,"body":"b"}),
        json!({"t":"msg","id":"f3","from":"x","to":"support/desk","ts":1_790_380_000,"body":"b"}),
    ];
    let (t, tc) = net.wires[&(A, dial)];
    for f in &forged {
        let mut bytes = serde_json::to_vec(f).unwrap();
        bytes.push(b'\n');
        net.servers[t].handle(net.now, Input::Received { conn: tc, bytes });
    }
    let mut answers = Vec::new();
    while let Some(o) = net.servers[t].poll() {
        if let Output::Send { conn, bytes } = o {
            assert_eq!(conn, tc);
            answers.push(serde_json::from_slice::<Value>(bytes.trim_ascii_end()).unwrap());
        }
    }
    let codes: Vec<_> = answers.iter().map(|a| a["code"].clone()).collect();
    assert_eq!(
        codes,
        [json!("refused"), json!("refused"), json!("bad_address")]
    );
}

/// A-1-d, A-1-e, A-6.2-f, A-6.2-g: a peer that said realm P may only send P's messages, and only
/// for this realm: no relaying for others, no transit. The frames are validly signed by P's key,
/// as a compromised P could sign them, so only the realm check can refuse them.
#[test]
fn a_validly_signed_peer_message_from_or_to_a_third_realm_is_refused() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1")); // brings the link up
    net.frame(B, DESK, json!({"t":"ack","id":"m1","status":"delivered"}));
    net.read(B, DESK);
    net.dials.clear();
    net.questions.clear();
    let (&(_, dial), _) = net.wires.iter().find(|((s, _), _)| *s == A).unwrap();
    let (_, accepted) = net.wires[&(A, dial)];
    // Written straight onto partner.example's end of the authenticated link, signed with
    // example.com's key.
    let mut write = |id: &str, from: &str, to: &str| {
        let m = json!({"t":"msg","id":id,"from":from,"to":to,"ts":1_790_380_000,"body":"b"});
        net.frame(B, accepted, signed_msg(m, 1));
    };
    // The same signing, for example.com's own message to this realm, verifies and is delivered.
    write(
        "s0",
        "airc://example.com/alice/x",
        "airc://partner.example/support/desk",
    );
    write(
        "s1",
        "airc://third.example/eve/x",
        "airc://partner.example/support/desk",
    );
    write(
        "s2",
        "airc://example.com/alice/x",
        "airc://third.example/z/y",
    );
    let delivered: Vec<Value> = msgs(&net.read(B, DESK))
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(
        delivered,
        [json!("s0")],
        "nothing relayed for third.example"
    );
    assert!(
        net.dials.is_empty() && net.questions.is_empty(),
        "third.example is neither looked up nor dialled: {:?} {:?}",
        net.dials,
        net.questions
    );
    let answer = |id: &str| {
        net.wire_log
            .iter()
            .find(|(s, f)| *s == B && f["t"] == "ack" && f["id"] == id)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("{id} answered on the link"))
    };
    assert_refused(&answer("s1"));
    assert_refused(&answer("s2"));
}

#[test]
fn a_partner_may_answer_but_not_start_a_conversation() {
    // §10.1's example: example.com lets partner.example reach alice only in reply.
    let mut net = Net::new(|i, c| {
        if i == A {
            let rules = r#"[
                {"from": "//example.com/**", "to": "*", "allow": true, "note": "local fleets"},
                {"from": "//partner.example/**", "to": "//example.com/alice/**", "allow": true, "mode": "reply", "window": 86400},
                {"from": "*", "to": "*", "allow": false}
            ]"#;
            c.policy = weft_proto::airc::policy::Policy::from_json(rules).unwrap();
        }
    });
    net.client(B, DESK, "support", &["support/desk"]);
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.read(A, ALICE);
    net.read(B, DESK);
    let to_alice = |id: &str, now: Timestamp| json!({"t":"msg","id":id,"from":"desk","to":"//example.com/alice/x","ts":now.as_secs(),"body":"hi"});
    // The partner starts: refused by example.com's ingress policy.
    net.frame(B, DESK, to_alice("p1", net.now));
    let refused = net.acks(B, DESK);
    assert_eq!(
        (refused[0]["status"].as_str(), refused[0]["code"].as_str()),
        (Some("failed"), Some("refused"))
    );
    assert!(net.read(A, ALICE).is_empty());
    // Alice writes first; once her message is delivered, the partner may answer.
    net.frame(A, ALICE, to_desk("a1"));
    net.read(B, DESK);
    net.frame(B, DESK, json!({"t":"ack","id":"a1","status":"delivered"}));
    net.frame(B, DESK, to_alice("p2", net.now));
    let got = net.read(A, ALICE);
    assert_eq!(got.iter().filter(|f| f["t"] == "msg").count(), 1, "{got:?}");
    // A day and a second later the window has closed again.
    net.now = net.now + Duration::from_secs(86_401);
    net.frame(B, DESK, to_alice("p3", net.now));
    assert!(net.read(A, ALICE).iter().all(|f| f["t"] != "msg"));
    let late = net.acks(B, DESK);
    let last = late.last().unwrap();
    assert_eq!(
        (last["id"].as_str(), last["code"].as_str()),
        (Some("p3"), Some("refused")),
        "{late:?}"
    );
}

/// Frames a server sent on `conn` (drained from its outputs, not carried over the net).
fn sent_on(server: &mut Server<ChaCha20Rng>, conn: ConnId) -> (Vec<Value>, bool) {
    let (mut frames, mut closed) = (Vec::new(), false);
    while let Some(o) = server.poll() {
        match o {
            Output::Send { conn: c, bytes } if c == conn => {
                for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    frames.push(serde_json::from_slice(line).unwrap());
                }
            }
            Output::Close { conn: c } if c == conn => closed = true,
            _ => {}
        }
    }
    (frames, closed)
}

fn signed_hello(ts: u64) -> Value {
    signed_hello_with(ts, "abcd")
}

/// example.com's signed hello to partner.example at `ts` with `nonce`.
fn signed_hello_with(ts: u64, nonce: &str) -> Value {
    let text = format!("airc-hello\nexample.com\npartner.example\n{ts}\n{nonce}");
    let p = crypto::default_provider();
    let sig = weft_proto::crypto::sigstring::sign(p, &seed(1), text.as_bytes()).to_string();
    json!({"t":"hello","proto":"airc/0.1","role":"peer","realm":"example.com","ts":ts,"nonce":nonce,"sig":sig})
}

#[test]
fn an_inbound_link_whose_hello_verified_is_used_to_send_back() {
    let mut net = Net::new(|_, _| {});
    net.client(B, DESK, "support", &["support/desk"]);
    net.client(A, ALICE, "alice", &["alice/x"]);
    // partner.example dials example.com first.
    let to_alice = json!({"t":"msg","id":"p1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"});
    net.frame(B, DESK, to_alice);
    let links = net.wires.len();
    assert_eq!(links, 2, "one link, two ends");
    // example.com answers over the link partner.example opened: no second dial.
    net.frame(A, ALICE, to_desk("a1"));
    assert_eq!(net.wires.len(), links);
    assert!(net.read(B, DESK).iter().any(|f| f["id"] == "a1"));
}

/// Hands `server` one frame on `conn`, as bytes.
fn raw(server: &mut Server<ChaCha20Rng>, conn: ConnId, frame: &Value) {
    let mut bytes = serde_json::to_vec(frame).unwrap();
    bytes.push(b'\n');
    server.handle(T0, Input::Received { conn, bytes });
}

/// partner.example accepts a peer connection that says `hello`, and answers it.
fn inbound_peer(
    server: &mut Server<ChaCha20Rng>,
    conn: ConnId,
    hello: &Value,
) -> (Vec<Value>, bool) {
    server.handle(
        T0,
        Input::Opened {
            conn,
            face: Face::Peer,
            namespaces: vec![],
        },
    );
    raw(server, conn, hello);
    sent_on(server, conn)
}

/// desk, a client of partner.example, writes to alice at example.com.
fn desk_writes_to_alice(server: &mut Server<ChaCha20Rng>) {
    let namespaces = vec![Namespace::parse("support").unwrap()];
    server.handle(
        T0,
        Input::Opened {
            conn: DESK,
            face: Face::Client,
            namespaces,
        },
    );
    raw(
        server,
        DESK,
        &json!({"t":"hello","proto":"airc/0.1","role":"client"}),
    );
    let m = json!({"t":"msg","id":"p1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"});
    raw(server, DESK, &m);
}

/// §6.6's one answer for a message and its copies, while it waits for a link (§6.5): the origin
/// sends it again before the dial is answered. The link that comes up carries it once, and its
/// one ack answers both copies.
#[test]
fn a_copy_of_a_message_waiting_for_its_link_is_sent_once_and_both_copies_are_answered() {
    let mut net = Net::new(|_, _| {});
    let b = &mut net.servers[B];
    desk_writes_to_alice(b);
    let p1 = json!({"t":"msg","id":"p1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"});
    raw(b, DESK, &p1);
    let (to_desk, _) = sent_on(b, DESK);
    assert!(
        to_desk.iter().all(|f| f["t"] != "ack"),
        "both wait: {to_desk:?}"
    );
    let link = ConnId(51);
    let (frames, _) = inbound_peer(b, link, &signed_hello(T0.as_secs()));
    let sent: Vec<&Value> = frames.iter().filter(|f| f["t"] == "msg").collect();
    assert_eq!(sent.len(), 1, "{frames:?}");
    raw(b, link, &json!({"t":"ack","id":"p1","status":"delivered"}));
    let (to_desk, _) = sent_on(b, DESK);
    let acks: Vec<&Value> = to_desk.iter().filter(|f| f["t"] == "ack").collect();
    assert_eq!(acks.len(), 2, "{to_desk:?}");
    assert!(
        acks.iter()
            .all(|a| a["id"] == "p1" && a["status"] == "delivered")
    );
}

#[test]
fn a_hello_outside_300_s_welcomes_but_does_not_authenticate() {
    let mut net = Net::new(|_, _| {});
    let (peer, b) = (ConnId(50), &mut net.servers[B]);
    let (frames, closed) = inbound_peer(b, peer, &signed_hello(T0.as_secs() - 301));
    assert_eq!(frames[0]["t"], "welcome");
    assert!(
        frames[0]["sig"].as_str().unwrap().starts_with("ed25519:"),
        "the welcome is signed"
    );
    assert!(frames[0]["kid"].is_string());
    assert!(!closed);
    // A stale hello's link is never sent on: a message for example.com makes B dial instead.
    desk_writes_to_alice(b);
    assert_eq!(dials_example_com_or_sends_on(b, peer), (true, false));
}

/// What `server` does next: whether it dials example.com, and whether it sends on `peer`.
fn dials_example_com_or_sends_on(server: &mut Server<ChaCha20Rng>, peer: ConnId) -> (bool, bool) {
    let (mut dialled, mut sent) = (false, false);
    while let Some(o) = server.poll() {
        match o {
            Output::Connect { authority, .. } => dialled |= authority.to_string() == "example.com",
            Output::Send { conn, .. } => sent |= conn == peer,
            _ => {}
        }
    }
    (dialled, sent)
}

/// A link the server has asked the host to close (here: the peer sent `error`, §4.8) is not
/// sent on while the host has not yet reported it closed: a message for its realm dials anew.
#[test]
fn a_link_being_closed_is_not_sent_on_before_the_host_reports_it_closed() {
    let mut net = Net::new(|_, _| {});
    let (peer, b) = (ConnId(50), &mut net.servers[B]);
    inbound_peer(b, peer, &signed_hello(T0.as_secs()));
    raw(
        b,
        peer,
        &json!({"t":"error","code":"internal","reason":"going away"}),
    );
    assert!(sent_on(b, peer).1, "closed");
    desk_writes_to_alice(b);
    assert_eq!(dials_example_com_or_sends_on(b, peer), (true, false));
}

/// A signed hello captured on its way (behind a TLS-terminating proxy, say) and replayed within
/// its 300 s window is refused: a realm's nonce is good once, so the replayer is not given an
/// authenticated link to be handed the realm's mail on.
#[test]
fn a_replayed_signed_hello_is_refused_within_its_window() {
    let mut net = Net::new(|_, _| {});
    let b = &mut net.servers[B];
    let hello = signed_hello(T0.as_secs());
    let (frames, closed) = inbound_peer(b, ConnId(50), &hello);
    assert_eq!(frames[0]["t"], "welcome");
    assert!(!closed);
    let (frames, closed) = inbound_peer(b, ConnId(51), &hello);
    assert_eq!(frames[0]["t"], "error", "{frames:?}");
    assert_eq!(frames[0]["code"], "peer_unverified");
    assert!(closed);
    assert_eq!(b.stats().replayed_hellos, 1);
    // The genuine link carries example.com's mail; the replayer gets none.
    desk_writes_to_alice(b);
    let mut on = BTreeMap::new();
    while let Some(o) = b.poll() {
        if let Output::Send { conn, .. } = o {
            *on.entry(conn.0).or_insert(0) += 1;
        }
    }
    assert_eq!(on.get(&51), None, "{on:?}");
    assert_eq!(on.get(&50), Some(&1), "{on:?}");
}

#[test]
fn a_fresh_signed_hello_authenticates_the_inbound_link() {
    let mut net = Net::new(|_, _| {});
    let (peer, b) = (ConnId(50), &mut net.servers[B]);
    inbound_peer(b, peer, &signed_hello(T0.as_secs() - 299));
    desk_writes_to_alice(b);
    let (frames, _) = sent_on(b, peer);
    assert_eq!(
        frames[0]["id"], "p1",
        "sent over the link whose hello verified"
    );
}

/// A-8.4-f, A-9.4-c: the 300 s window bounds the hello's `ts` on both sides of now; a hello
/// dated in the future is no fresher than one from the past.
#[test]
fn a_hello_more_than_300_s_ahead_welcomes_but_does_not_authenticate() {
    for (ts, authenticates) in [(T0.as_secs() + 301, false), (T0.as_secs() + 299, true)] {
        let mut net = Net::new(|_, _| {});
        let (peer, b) = (ConnId(50), &mut net.servers[B]);
        let (frames, closed) = inbound_peer(b, peer, &signed_hello(ts));
        assert_eq!((frames[0]["t"].as_str(), closed), (Some("welcome"), false));
        desk_writes_to_alice(b);
        let (mut dialled, mut sent) = (false, false);
        while let Some(o) = b.poll() {
            match o {
                Output::Connect { .. } => dialled = true,
                Output::Send { conn, .. } => sent |= conn == peer,
                _ => {}
            }
        }
        let ahead = ts - T0.as_secs();
        assert_eq!(
            (sent, dialled),
            (authenticates, !authenticates),
            "a hello {ahead} s ahead: sent on the link, dialled"
        );
    }
}

/// `hello` from a peer claiming example.com, signed by key `n` for `target` at `ts`.
fn hello_signed_by(n: u8, target: &str, ts: u64) -> Value {
    let text = format!("airc-hello\nexample.com\n{target}\n{ts}\nabcd");
    let p = crypto::default_provider();
    let sig = weft_proto::crypto::sigstring::sign(p, &seed(n), text.as_bytes()).to_string();
    json!({"t":"hello","proto":"airc/0.1","role":"peer","realm":"example.com","ts":ts,"nonce":"abcd","sig":sig})
}

/// A-8.4-i, A-8.4-j, A-16-c, A-17.2-j: mail waiting for a realm goes out only over a link that
/// authenticated as that realm; "this is what stops an impostor from being handed a realm's
/// queued mail". The impostor's link arrives while the message waits for its own dial.
#[test]
fn an_impostor_link_arriving_while_mail_waits_for_its_realm_is_handed_none_of_it() {
    let now = T0.as_secs();
    let impostors = [
        ("a stale hello", signed_hello(now - 301)),
        (
            "a hello signed by another key",
            hello_signed_by(9, "partner.example", now),
        ),
        (
            "a hello signed for another realm",
            hello_signed_by(1, "third.example", now),
        ),
    ];
    for (what, hello) in impostors {
        let mut net = Net::new(|_, _| {});
        let b = &mut net.servers[B];
        desk_writes_to_alice(b);
        let mut dialled = false;
        while let Some(o) = b.poll() {
            dialled |= matches!(o, Output::Connect { .. });
        }
        assert!(dialled, "{what}: p1 waits for a dial of example.com");
        let (frames, closed) = inbound_peer(b, ConnId(50), &hello);
        let kinds: Vec<&str> = frames.iter().filter_map(|f| f["t"].as_str()).collect();
        assert_eq!((kinds, closed), (vec!["welcome"], false), "{what}");
        // Still held: the first link that does authenticate carries it.
        let (frames, _) = inbound_peer(b, ConnId(51), &signed_hello(now));
        let sent: Vec<&Value> = frames.iter().filter(|f| f["t"] == "msg").collect();
        assert_eq!(sent.len(), 1, "{what}: {frames:?}");
        assert_eq!(sent[0]["id"], "p1", "{what}");
    }
}

#[test]
fn a_welcome_naming_another_realm_is_realm_mismatch() {
    let mut net = Net::new(|_, _| {});
    let link = ConnId(60);
    let a = &mut net.servers[A];
    a.handle(
        T0,
        Input::Dialled {
            conn: link,
            authority: Authority::parse("partner.example").unwrap(),
        },
    );
    let (hello, _) = sent_on(a, link);
    assert_eq!(
        (hello[0]["t"].as_str(), hello[0]["realm"].as_str()),
        (Some("hello"), Some("example.com"))
    );
    assert!(
        hello[0]["sig"].as_str().unwrap().starts_with("ed25519:"),
        "the dialler's hello is signed"
    );
    let w = b"{\"t\":\"welcome\",\"realm\":\"evil.example\",\"proto\":\"airc/0.1\"}\n".to_vec();
    a.handle(
        T0,
        Input::Received {
            conn: link,
            bytes: w,
        },
    );
    let (frames, closed) = sent_on(a, link);
    assert_eq!(frames[0]["code"], "realm_mismatch");
    assert!(closed);
}

#[test]
fn a_link_that_drops_before_the_ack_leaves_the_message_queued() {
    let mut net = Net::new(|_, _| {});
    net.m1_from_alice_to_desk();
    assert!(net.acks(A, ALICE).is_empty(), "waiting on desk's ack");
    let (&(_, dial), _) = net.wires.iter().find(|((s, _), _)| *s == A).unwrap();
    net.servers[A].handle(net.now, Input::Closed { conn: dial });
    net.settle();
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"queued","code":"authority_unreachable"})]
    );
    assert_eq!(net.servers[A].spooled(), 1);
}

#[test]
fn a_link_offered_across_realms_travels_as_control_messages_and_notices() {
    let mut net = Net::new(|_, _| {});
    net.client(B, DESK, "support", &["support/desk"]);
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.read(A, ALICE);
    net.read(B, DESK);
    net.frame(A, ALICE, json!({"t":"link","op":"offer","as":"alice/x","peer":"//partner.example/support/desk","label":"vendor"}));
    // partner.example stored the offer, acked the control message, and told desk.
    let notice = net.read(B, DESK).remove(0);
    assert_eq!(notice["hdr"]["airc-link-action"], "offer");
    assert_eq!(notice["from"], "airc://example.com/alice/x");
    let id = notice["hdr"]["airc-link"].as_str().unwrap().to_string();
    assert!(notice["body"].as_str().unwrap().starts_with(&format!(
        "[airc: link offer {id} from airc://example.com/alice/x"
    )));
    let linked = net.read(A, ALICE).remove(0);
    assert_eq!(
        (linked["t"].as_str(), linked["delivery"].as_str()),
        (Some("linked"), Some("delivered"))
    );
    net.frame(
        B,
        DESK,
        json!({"t":"ack","id":notice["id"],"status":"delivered"}),
    );

    // desk accepts: the accept travels back and alice is told.
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"accept","as":"support/desk","id":id}),
    );
    let told = net.read(A, ALICE).remove(0);
    assert_eq!(told["hdr"]["airc-link-action"], "accept");
    let linked = net.read(B, DESK).remove(0);
    assert_eq!(
        (
            linked["link"]["state"].as_str(),
            linked["delivery"].as_str()
        ),
        (Some("active"), Some("delivered"))
    );
}

// ---- passports across realms (§12.4–§12.5, Appendix A.3) ---------------------------------------

fn passported(frames: &[Value]) -> Value {
    frames
        .iter()
        .find(|f| f["t"] == "passported")
        .cloned()
        .expect("a passported frame")
}

/// alice/x on example.com issues a passport for partner.example's endpoints; the `passported`
/// answer.
fn passport_for_partner(net: &mut Net) -> Value {
    net.frame(
        A,
        ALICE,
        json!({"t":"passport","op":"new","as":"alice/x","label":"vendor","to":"//partner.example/**"}),
    );
    let p = passported(&net.read(A, ALICE));
    assert_eq!(p["ok"], true, "{p}");
    p
}

/// [`passport_for_partner`]'s line.
fn issue_for_partner(net: &mut Net) -> String {
    passport_for_partner(net)["line"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn appendix_a3_a_passport_redeemed_across_realms_is_recorded_at_the_redeemer_first() {
    let policy_closed = |_: usize, c: &mut ServerConfig| {
        let rules = json!([{"links": true}, {"from": "*", "to": "*", "allow": false}]);
        c.policy = weft_proto::airc::policy::Policy::from_json(&rules.to_string()).unwrap();
    };
    let mut net = Net::new(policy_closed);
    net.client(A, ALICE, "alice", &["alice/"]);
    net.client(B, DESK, "support", &["support/desk"]);
    net.read(A, ALICE);
    net.read(B, DESK);
    let line = issue_for_partner(&mut net);

    net.frame(
        B,
        DESK,
        json!({"t":"passport","op":"redeem","as":"support/desk","passport":line}),
    );
    let got = net.read(B, DESK);
    // The grant's notice reaches desk before the redemption's answer: the redeemer's server
    // recorded the link before the issuer acked (§12.5).
    let notice = got
        .iter()
        .position(|f| f["t"] == "msg")
        .expect("a grant notice");
    let answer_at = got.iter().position(|f| f["t"] == "passported").unwrap();
    assert!(notice < answer_at, "{got:?}");
    assert_eq!(got[notice]["type"], "text/plain");
    let answer = &got[answer_at];
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["status"], "delivered");
    let lid = answer["link"]["id"].as_str().unwrap();
    assert_eq!(answer["reason"], format!("link {lid} granted"));
    assert_eq!(answer["link"]["state"], "active");
    assert_eq!(answer["link"]["a"], "airc://example.com/alice/x");
    assert_eq!(answer["link"]["b"], "airc://partner.example/support/desk");
    assert_eq!(got[notice]["hdr"]["airc-link"], lid);
    // alice/x is told who redeemed (a foreign name, §16.4) and the link.
    let told = net.read(A, ALICE);
    let text = told
        .iter()
        .find(|f| f["t"] == "msg")
        .and_then(|f| f["body"].as_str())
        .unwrap()
        .to_string();
    assert!(
        text.contains("airc://partner.example/support/desk redeemed your passport"),
        "{text}"
    );
    assert!(text.contains(lid), "{text}");

    // The granted link opens both realms' closed policies: desk may write to alice/x.
    net.frame(
        B,
        DESK,
        json!({"t":"msg","id":"d1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000.1,"body":"hi"}),
    );
    let delivered = net.read(A, ALICE);
    assert!(delivered.iter().any(|f| f["id"] == "d1"), "{delivered:?}");
}

#[test]
fn a_refused_redemption_across_realms_is_answered_with_the_issuers_reason() {
    let mut net = Net::new(|_, _| {});
    net.client(A, ALICE, "alice", &["alice/"]);
    net.client(B, DESK, "support", &["support/desk"]);
    let line = issue_for_partner(&mut net);
    net.read(B, DESK);
    let wrong = format!("{}x", line);
    net.frame(
        B,
        DESK,
        json!({"t":"passport","op":"redeem","as":"support/desk","passport":wrong}),
    );
    let answer = passported(&net.read(B, DESK));
    assert_eq!(
        (
            &answer["ok"],
            &answer["status"],
            &answer["code"],
            &answer["reason"]
        ),
        (
            &json!(false),
            &json!("failed"),
            &json!("refused"),
            &json!("passport unknown")
        )
    );
    assert!(answer.get("link").is_none());
}

/// A-12.5-l, A-17.2-m: the issuer sends the grant to the redeemer's realm and waits for its ack
/// before answering the redemption; only `delivered` means the redeemer recorded the link, so
/// any other answer fails the redemption and leaves no active link at the issuer. The in-memory
/// net is synchronous, so example.com's frames to partner.example are held back by hand.
#[test]
fn the_issuer_answers_a_redemption_only_after_the_grant_is_acked_and_fails_it_if_not_recorded() {
    let mut net = Net::new(|_, _| {});
    net.client(A, ALICE, "alice", &["alice/"]);
    net.client(B, DESK, "support", &["support/desk"]);
    net.frame(A, ALICE, to_desk("m1")); // brings the link up
    net.frame(B, DESK, json!({"t":"ack","id":"m1","status":"delivered"}));
    let line = issue_for_partner(&mut net);
    net.read(A, ALICE);
    net.read(B, DESK);
    let (&(_, a_end), &(_, b_end)) = net.wires.iter().find(|((s, _), _)| *s == A).unwrap();
    // partner.example's frames still reach example.com; example.com's wait in its inbox.
    net.wires.remove(&(A, a_end));

    net.frame(
        B,
        DESK,
        json!({"t":"passport","op":"redeem","as":"support/desk","passport":line}),
    );
    let held = net.read(A, a_end);
    let grant = held
        .iter()
        .find(|f| f["hdr"]["airc-link-action"] == "grant")
        .expect("the grant is sent to partner.example");
    assert!(
        held.iter().all(|f| f["t"] != "ack"),
        "no answer to the redemption before the grant's ack: {held:?}"
    );
    assert!(net.read(B, DESK).iter().all(|f| f["t"] != "passported"));

    // partner.example did not record the grant.
    net.frame(
        A,
        a_end,
        json!({"t":"ack","id":grant["id"],"status":"failed","code":"refused"}),
    );
    let after = net.read(A, a_end);
    let answer = after
        .iter()
        .find(|f| f["t"] == "ack")
        .expect("the redemption is answered")
        .clone();
    assert_refused(&answer);
    assert_eq!(answer["reason"], "link grant not recorded (failed refused)");
    admin_subscribed(&mut net, A, &["link"]);
    net.frame(A, ADMIN, json!({"t":"link","op":"list"}));
    let links = linked(&net.read(A, ADMIN))["links"].clone();
    let states: Vec<&Value> = links
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["state"])
        .collect();
    assert_eq!(states, [&json!("revoked")], "{links}");
    // Carried back, the answer reaches desk as a failed redemption with no link.
    net.wires.insert((A, a_end), (B, b_end));
    net.frame(B, b_end, answer);
    let p = passported(&net.read(B, DESK));
    assert_eq!(
        (&p["ok"], &p["status"], &p["reason"]),
        (
            &json!(false),
            &json!("failed"),
            &json!("link grant not recorded (failed refused)")
        )
    );
    assert!(p.get("link").is_none(), "{p}");
}

// ---- links between realms (§11.4, §11.5) --------------------------------------------------------

const RELAY: ConnId = ConnId(3);

fn closed_policy(_: usize, c: &mut ServerConfig) {
    let rules = json!([{"links": true}, {"from": "*", "to": "*", "allow": false}]);
    c.policy = weft_proto::airc::policy::Policy::from_json(&rules.to_string()).unwrap();
}

/// partner.example (B) knows no key of example.com, so it must look them up (§8.4).
fn partner_knows_no_keys(i: usize, c: &mut ServerConfig) {
    if i == B {
        c.known_keys.clear();
    }
}

fn msgs(frames: &[Value]) -> Vec<Value> {
    frames.iter().filter(|f| f["t"] == "msg").cloned().collect()
}

fn linked(frames: &[Value]) -> Value {
    frames
        .iter()
        .find(|f| f["t"] == "linked")
        .cloned()
        .expect("a linked frame")
}

/// alice/x offers a link to `peer`; the id and alice's `linked`.
fn offer(net: &mut Net, peer: &str) -> (String, Value) {
    net.frame(
        A,
        ALICE,
        json!({"t":"link","op":"offer","as":"alice/x","peer":peer}),
    );
    let l = linked(&net.read(A, ALICE));
    (l["link"]["id"].as_str().unwrap_or_default().to_string(), l)
}

#[test]
fn an_offer_to_a_namespace_reaches_its_relay_and_an_endpoint_beneath_answers() {
    let mut net = Net::new(|_, _| {});
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.client(B, RELAY, "support", &["support/"]);
    net.client(B, DESK, "support", &[]);
    for c in [(A, ALICE), (B, RELAY), (B, DESK)] {
        net.read(c.0, c.1);
    }
    let (id, l) = offer(&mut net, "//partner.example/support/");
    assert_eq!(l["delivery"], "delivered", "{l}");
    assert_eq!(l["link"]["b"], "airc://partner.example/support/");
    // The offer's notice goes to the client bound for the whole namespace.
    let told = msgs(&net.read(B, RELAY));
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["to"], "airc://partner.example/support/");
    assert_eq!(told[0]["hdr"]["airc-link-action"], "offer");
    assert_eq!(told[0]["hdr"]["airc-link"], id.as_str());
    // Any endpoint beneath the namespace answers for it.
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"accept","as":"support/desk","id":id}),
    );
    let answer = linked(&net.read(B, DESK));
    assert_eq!(
        (&answer["link"]["state"], &answer["delivery"]),
        (&json!("active"), &json!("delivered"))
    );
    let back = msgs(&net.read(A, ALICE));
    assert_eq!(back[0]["hdr"]["airc-link-action"], "accept");
}

#[test]
fn decline_and_revoke_travel_between_realms_and_a_revocation_blocks() {
    let mut net = Net::new(closed_policy);
    net.alice_and_desk_bound();
    // Declined: alice is told, and the record says so on both sides.
    let (first, _) = offer(&mut net, "//partner.example/support/desk");
    net.read(B, DESK);
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"decline","as":"support/desk","id":first}),
    );
    assert_eq!(linked(&net.read(B, DESK))["link"]["state"], "declined");
    let told = msgs(&net.read(A, ALICE));
    assert_eq!(told[0]["hdr"]["airc-link-action"], "decline");
    net.frame(A, ALICE, json!({"t":"link","op":"list","as":"alice/x"}));
    let list = linked(&net.read(A, ALICE));
    assert_eq!(list["links"][0]["state"], "declined");

    // Accepted, then revoked by alice: desk is told, and desk's messages are refused again.
    let (second, _) = offer(&mut net, "//partner.example/support/desk");
    net.read(B, DESK);
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"accept","as":"support/desk","id":second}),
    );
    net.read(B, DESK);
    net.read(A, ALICE);
    let hi = |id: &str| json!({"t":"msg","id":id,"from":"desk","to":"//example.com/alice/x","ts":1_790_380_000.1,"body":"hi"});
    net.frame(B, DESK, hi("d1"));
    assert!(msgs(&net.read(A, ALICE)).iter().any(|m| m["id"] == "d1"));
    net.frame(
        A,
        ALICE,
        json!({"t":"link","op":"revoke","as":"alice/x","id":second}),
    );
    let answer = linked(&net.read(A, ALICE));
    assert_eq!(
        (&answer["link"]["state"], &answer["delivery"]),
        (&json!("revoked"), &json!("delivered"))
    );
    let told = msgs(&net.read(B, DESK));
    assert_eq!(told[0]["hdr"]["airc-link-action"], "revoke");
    net.frame(B, DESK, hi("d2"));
    let refused = net.read(B, DESK);
    let ack = refused.iter().find(|f| f["t"] == "ack").unwrap();
    assert_refused(ack);
    assert!(ack["reason"].as_str().unwrap().contains("revoked"), "{ack}");
}

#[test]
fn a_realm_that_takes_no_offers_refuses_the_control_message_and_the_offerer_hears_why() {
    let mut net = Net::new(|i, c| {
        if i == B {
            c.links.accept_offers = false;
        }
    });
    net.alice_and_desk_bound();
    let (_, answer) = offer(&mut net, "//partner.example/support/desk");
    assert_eq!(
        (&answer["delivery"], &answer["code"]),
        (&json!("failed"), &json!("refused")),
        "{answer}"
    );
    assert!(answer["reason"].is_string());
    assert!(
        msgs(&net.read(B, DESK)).is_empty(),
        "nobody is told of a refused offer"
    );
}

#[test]
fn an_offer_crosses_a_policy_that_refuses_messages() {
    let mut net = Net::new(closed_policy);
    net.alice_and_desk_bound();
    // A message is refused by the closed policies…
    net.frame(A, ALICE, to_desk("m1"));
    let ack = net.acks(A, ALICE).remove(0);
    assert_eq!(ack["code"], "refused");
    // …but the knock (an offer) gets through (§11.5).
    let (_, answer) = offer(&mut net, "//partner.example/support/desk");
    assert_eq!(answer["delivery"], "delivered");
    assert_eq!(
        msgs(&net.read(B, DESK))[0]["hdr"]["airc-link-action"],
        "offer"
    );
}

#[test]
fn a_backlog_is_flushed_over_an_authenticated_link_the_other_realm_dialled() {
    let mut net = Net::new(|_, _| {});
    net.alice_and_desk_bound();
    net.reachable = false;
    net.frame(
        B,
        DESK,
        json!({"t":"msg","id":"d1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000.1,"body":"hi"}),
    );
    let ack = net.acks(B, DESK).remove(0);
    assert_eq!(
        (&ack["status"], &ack["code"]),
        (&json!("queued"), &json!("authority_unreachable"))
    );
    // example.com dials partner.example for its own message: partner.example's backlog for
    // example.com goes out over that inbound link at once, with no dial of its own.
    net.reachable = true;
    let wires_before = net.wires.len();
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        net.wires.len(),
        wires_before + 2,
        "one link, dialled by example.com"
    );
    let got = msgs(&net.read(A, ALICE));
    assert!(got.iter().any(|m| m["id"] == "d1"), "{got:?}");
}

#[test]
fn peer_links_coming_up_and_going_down_are_audit_events_for_administrators() {
    const ADMIN: ConnId = ConnId(9);
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.input(
        B,
        Input::Opened {
            conn: ADMIN,
            face: Face::Client,
            namespaces: Vec::new(),
        },
    );
    net.input(B, Input::Administrator { conn: ADMIN });
    net.frame(
        B,
        ADMIN,
        json!({"t":"hello","proto":"airc/0.1","role":"client"}),
    );
    net.frame(B, ADMIN, json!({"t":"subscribe","kinds":["peer"]}));
    net.frame(B, DESK, json!({"t":"subscribe","kinds":["peer"]}));
    net.read(B, ADMIN);
    net.read(B, DESK);
    net.frame(A, ALICE, to_desk("m1"));
    let up = net.read(B, ADMIN);
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["kind"], "peer.up");
    assert_eq!(up[0]["realm"], "example.com");
    assert_eq!(up[0]["authenticated"], true);
    assert_eq!(up[0]["outbound"], false, "example.com dialled");
    let link = *net
        .wires
        .keys()
        .find(|(s, _)| *s == B)
        .map(|(_, c)| c)
        .unwrap();
    net.input(B, Input::Closed { conn: link });
    let down = net.read(B, ADMIN);
    assert_eq!(down[0]["kind"], "peer.down");
    assert_eq!(down[0]["realm"], "example.com");
    let desk_saw: Vec<Value> = net
        .read(B, DESK)
        .into_iter()
        .filter(|f| f["t"] == "event")
        .collect();
    assert!(desk_saw.is_empty(), "a realm lies inside no namespace");
}

// ---- §8.1–§8.2 discovery at the server, fed by the zone -------------------------------------

/// The net with no static entries: each server finds the other through `net.zone`.
fn dns_net(tweak: impl Fn(usize, &mut ServerConfig)) -> Net {
    Net::new(|i, c| {
        c.static_entries.clear();
        tweak(i, c);
    })
}

fn srv(priority: u16, weight: u16, target: &str, ttl: u32) -> SrvRecord {
    SrvRecord {
        priority,
        weight,
        port: 2472,
        target: target.to_string(),
        ttl,
    }
}

const PARTNER_SRV: &str = "_airc._tcp.partner.example";

fn answer(net: &mut Net, kind: RecordType, name: &str, a: Answer) {
    net.zone.insert((kind, name.to_string()), a);
}

/// What server `s` asked DNS, in order, since the last call.
fn asked(net: &mut Net, s: usize) -> Vec<(RecordType, String)> {
    let all = std::mem::take(&mut net.questions);
    all.into_iter()
        .filter(|(from, _, _)| *from == s)
        .map(|(_, kind, name)| (kind, name))
        .collect()
}

/// The endpoints server `s` dialled, in order, since the last call.
fn dialled(net: &mut Net, s: usize) -> Vec<Endpoint> {
    let all = std::mem::take(&mut net.dials);
    all.into_iter()
        .filter(|(from, _)| *from == s)
        .map(|(_, e)| e)
        .collect()
}

fn endpoint(host: &str, port: u16) -> Endpoint {
    Endpoint::new(host, port)
}

#[test]
fn an_explicit_port_or_an_ip_literal_is_dialled_directly_without_dns() {
    let mut net = dns_net(|_, _| {});
    net.client(A, ALICE, "alice", &[]);
    for (to, at) in [
        (
            "//partner.example:7001/support/desk",
            endpoint("partner.example", 7001),
        ),
        ("//192.0.2.7/support/desk", endpoint("192.0.2.7", 2472)),
        ("//[2001:DB8::1]:9/support/desk", endpoint("2001:db8::1", 9)),
    ] {
        net.frame(
            A,
            ALICE,
            json!({"t":"msg","id":to,"from":"x","to":to,"ts":1_790_380_000,"body":"b"}),
        );
        assert_eq!(dialled(&mut net, A), [at], "{to}");
    }
    assert!(asked(&mut net, A).is_empty(), "no DNS in either case");
}

#[test]
fn a_static_entry_is_dialled_before_dns_and_pinned_keys_need_no_txt() {
    let mut net = Net::new(|i, c| {
        if i == A {
            let partner = Authority::parse("partner.example").unwrap();
            let entries = vec![endpoint("10.0.0.5", 7001), endpoint("backup.partner", 7002)];
            c.static_entries.insert(partner, entries);
        }
    });
    // The zone would send example.com elsewhere: it is never asked.
    answer(
        &mut net,
        RecordType::Srv,
        PARTNER_SRV,
        Answer::Srv(vec![srv(0, 0, "dns.partner.example", 300)]),
    );
    net.dead.insert(endpoint("10.0.0.5", 7001));
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        dialled(&mut net, A),
        [endpoint("10.0.0.5", 7001), endpoint("backup.partner", 7002)],
        "the static entries in order, the next after a failed dial"
    );
    assert!(asked(&mut net, A).is_empty() && asked(&mut net, B).is_empty());
    assert!(net.read(B, DESK).iter().any(|f| f["id"] == "m1"));
}

#[test]
fn srv_targets_are_dialled_by_priority_then_weight_falling_back_on_failure() {
    let mut net = dns_net(|_, _| {});
    answer(
        &mut net,
        RecordType::Srv,
        PARTNER_SRV,
        Answer::Srv(vec![
            srv(20, 0, "backup.partner.example.", 300),
            srv(10, 0, "light.partner.example.", 300),
            srv(10, 65_535, "heavy.partner.example.", 300),
        ]),
    );
    net.dead.insert(endpoint("heavy.partner.example", 2472));
    net.dead.insert(endpoint("light.partner.example", 2472));
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        asked(&mut net, A),
        [(RecordType::Srv, PARTNER_SRV.to_string())]
    );
    assert_eq!(
        dialled(&mut net, A),
        [
            endpoint("heavy.partner.example", 2472),
            endpoint("light.partner.example", 2472),
            endpoint("backup.partner.example", 2472),
        ],
        "priority 10 before 20; within it, weight 65535 before weight 0"
    );
    assert!(net.read(B, DESK).iter().any(|f| f["id"] == "m1"));
}

#[test]
fn without_srv_records_airc_dot_host_then_the_host_itself_are_asked() {
    let mut net = dns_net(|_, _| {});
    answer(
        &mut net,
        RecordType::Address,
        "partner.example",
        Answer::Addresses { ttl: 300 },
    );
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        asked(&mut net, A),
        [
            (RecordType::Srv, PARTNER_SRV.to_string()),
            (RecordType::Address, "airc.partner.example".to_string()),
            (RecordType::Address, "partner.example".to_string()),
        ]
    );
    assert_eq!(dialled(&mut net, A), [endpoint("partner.example", 2472)]);
    assert!(net.read(B, DESK).iter().any(|f| f["id"] == "m1"));

    // With `airc.<host>` published, the bare host is never asked.
    let mut net = dns_net(|_, _| {});
    answer(
        &mut net,
        RecordType::Address,
        "airc.partner.example",
        Answer::Addresses { ttl: 300 },
    );
    net.client(A, ALICE, "alice", &[]);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(asked(&mut net, A).len(), 2);
    assert_eq!(
        dialled(&mut net, A),
        [endpoint("airc.partner.example", 2472)]
    );
}

/// Closes every peer link, from both ends.
fn drop_links(net: &mut Net) {
    let ends: Vec<(usize, ConnId)> = net.wires.keys().copied().collect();
    net.wires.clear();
    for (s, conn) in ends {
        net.input(s, Input::Closed { conn });
    }
}

/// Sends a message from alice to desk after dropping the links; returns what A asked DNS.
fn resend(net: &mut Net, id: &str) -> Vec<(RecordType, String)> {
    drop_links(net);
    asked(net, A);
    net.frame(A, ALICE, to_desk(id));
    asked(net, A)
}

#[test]
fn a_location_is_cached_for_its_dns_ttl_clamped_to_30_s_through_3600_s() {
    for (ttl, kept) in [(5, 30), (600, 600), (86_400, 3600)] {
        let mut net = dns_net(|_, _| {});
        let records = vec![srv(0, 0, "partner.example", ttl)];
        answer(&mut net, RecordType::Srv, PARTNER_SRV, Answer::Srv(records));
        net.client(B, DESK, "support", &["support/desk"]);
        net.client(A, ALICE, "alice", &[]);
        net.frame(A, ALICE, to_desk("m0"));
        assert_eq!(asked(&mut net, A).len(), 1);
        let t0 = net.now;
        net.now = t0 + Duration::from_secs(kept - 1);
        assert!(
            resend(&mut net, "m1").is_empty(),
            "ttl {ttl}: cached at {}",
            kept - 1
        );
        net.now = t0 + Duration::from_secs(kept);
        assert_eq!(
            resend(&mut net, "m2").len(),
            1,
            "ttl {ttl}: asked again at {kept}"
        );
    }
}

#[test]
fn an_authority_dns_does_not_know_fails_no_such_authority_and_the_miss_is_cached_60_s() {
    let mut net = dns_net(|_, _| {});
    net.client(A, ALICE, "alice", &[]);
    net.read(A, ALICE);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(asked(&mut net, A).len(), 3, "SRV, airc.<host>, <host>");
    assert!(net.dials.is_empty());
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"failed","code":"no_such_authority"})]
    );
    assert_eq!(net.servers[A].spooled(), 0, "a failed message is not held");
    let t0 = net.now;
    net.now = t0 + Duration::from_secs(59);
    net.frame(A, ALICE, to_desk("m2"));
    assert!(asked(&mut net, A).is_empty(), "the miss is cached");
    assert_eq!(net.acks(A, ALICE)[0]["code"], "no_such_authority");
    net.now = t0 + Duration::from_secs(60);
    net.frame(A, ALICE, to_desk("m3"));
    assert_eq!(asked(&mut net, A).len(), 3, "asked again after 60 s");
}

#[test]
fn an_authority_dns_knows_but_that_does_not_answer_is_queued_authority_unreachable() {
    let mut net = dns_net(|_, _| {});
    answer(
        &mut net,
        RecordType::Address,
        "airc.partner.example",
        Answer::Addresses { ttl: 300 },
    );
    net.reachable = false;
    net.client(A, ALICE, "alice", &[]);
    net.read(A, ALICE);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        dialled(&mut net, A),
        [endpoint("airc.partner.example", 2472)]
    );
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"queued","code":"authority_unreachable"})]
    );
    assert_eq!(net.servers[A].spooled(), 1);
}

#[test]
fn an_srv_dot_target_says_the_domain_offers_no_airc_service() {
    let mut net = dns_net(|_, _| {});
    answer(
        &mut net,
        RecordType::Srv,
        PARTNER_SRV,
        Answer::Srv(vec![srv(0, 0, ".", 300)]),
    );
    net.client(A, ALICE, "alice", &[]);
    net.read(A, ALICE);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(asked(&mut net, A).len(), 1, "no fallback to A/AAAA");
    assert_eq!(net.acks(A, ALICE)[0]["code"], "no_such_authority");
}

fn txt_key(n: u8) -> String {
    format!(
        "v=airc1 k=ed25519 p={}",
        weft_proto::codec::base64::encode(&public(n))
    )
}

#[test]
fn keys_published_in_txt_verify_a_peer_hello_and_its_messages() {
    // partner.example knows no key of example.com: it asks `_airc.example.com`, which publishes
    // an unrelated record, a retired key and the real one.
    let mut net = Net::new(partner_knows_no_keys);
    let records = vec!["v=spf1 -all".to_string(), txt_key(7), txt_key(1)];
    answer(
        &mut net,
        RecordType::Txt,
        "_airc.example.com",
        Answer::Txt { records, ttl: 300 },
    );
    net.client(B, DESK, "support", &["support/desk"]);
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.read(B, DESK);
    net.frame(A, ALICE, to_desk("m1"));
    assert_eq!(
        asked(&mut net, B),
        [(RecordType::Txt, "_airc.example.com".to_string())]
    );
    let got = msgs(&net.read(B, DESK));
    assert_eq!(got.len(), 1, "the signed message verified with the TXT key");
    // The hello verified too: the inbound link is authenticated, so desk's answer goes back
    // over it with no dial of partner.example's own.
    let links = net.wires.len();
    net.frame(
        B,
        DESK,
        json!({"t":"msg","id":"r1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"}),
    );
    assert_eq!(net.wires.len(), links);
    assert!(dialled(&mut net, B).is_empty());
    assert!(msgs(&net.read(A, ALICE)).iter().any(|m| m["id"] == "r1"));
    // The keys are cached: a second message is verified without asking again.
    net.frame(A, ALICE, to_desk("m2"));
    assert!(asked(&mut net, B).is_empty());
}

/// While a peer's hello waits for its realm's keys (§8.2) nothing it sends is read, so what it
/// sends meanwhile is held: up to `MAX_PARKED_BYTES` (16 frames of the largest size, written out
/// here), and past that the connection is closed rather than the memory spent.
#[test]
fn a_connection_waiting_for_its_realms_keys_is_closed_once_it_sends_more_than_16_mib_meanwhile() {
    let mut net = Net::new(partner_knows_no_keys);
    let b = &mut net.servers[B];
    let conn = ConnId(50);
    let (frames, closed) = inbound_peer(b, conn, &signed_hello(T0.as_secs()));
    assert!(
        frames.is_empty() && !closed,
        "waiting for _airc.example.com"
    );
    let mut line =
        serde_json::to_vec(&json!({"t":"ping","n":1,"pad":"a".repeat(1_000_000)})).unwrap();
    line.push(b'\n');
    for _ in 0..16 {
        b.handle(
            T0,
            Input::Received {
                conn,
                bytes: line.clone(),
            },
        );
    }
    assert!(
        !sent_on(b, conn).1,
        "16 000 000 bytes held, under 16 × 1 048 576"
    );
    b.handle(T0, Input::Received { conn, bytes: line });
    assert!(sent_on(b, conn).1, "closed past the bound");
    assert_eq!(b.stats().parked_overflows, 1);
    // The keys come before the host reports the close: the hello parked on the closing
    // connection is not taken up again, so it gets no welcome and opens no link.
    let records = vec![txt_key(1)];
    let answer = Answer::Txt { records, ttl: 300 };
    let name = "_airc.example.com".to_string();
    let kind = RecordType::Txt;
    b.handle(T0, Input::Resolved { name, kind, answer });
    assert_eq!(sent_on(b, conn), (vec![], false));
}

#[test]
fn a_peer_message_is_refused_when_txt_publishes_only_other_keys() {
    let mut net = Net::new(partner_knows_no_keys);
    let records = vec![txt_key(7)];
    answer(
        &mut net,
        RecordType::Txt,
        "_airc.example.com",
        Answer::Txt { records, ttl: 300 },
    );
    net.m1_from_alice_to_desk();
    assert!(msgs(&net.read(B, DESK)).is_empty());
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"failed","code":"refused"})]
    );
}

#[test]
fn a_realm_with_no_published_keys_is_refused_and_its_txt_miss_is_cached_60_s() {
    let mut net = Net::new(partner_knows_no_keys);
    net.m1_from_alice_to_desk();
    assert_eq!(asked(&mut net, B).len(), 1);
    assert_eq!(net.acks(A, ALICE)[0]["code"], "refused");
    let t0 = net.now;
    net.now = t0 + Duration::from_secs(59);
    net.frame(A, ALICE, to_desk("m2"));
    assert!(asked(&mut net, B).is_empty(), "the miss is cached");
    net.now = t0 + Duration::from_secs(60);
    net.frame(A, ALICE, to_desk("m3"));
    assert_eq!(asked(&mut net, B).len(), 1, "asked again after 60 s");
}

#[test]
fn a_dns_question_the_host_never_answers_counts_as_no_records_after_10_s() {
    let mut s = Server::new(
        {
            let mut c = ServerConfig::new(Authority::parse("example.com").unwrap());
            c.known_namespaces = vec![Namespace::parse("alice").unwrap()];
            // Long enough that the message still waits for its link when DNS gives up.
            c.ack_timeout = Duration::from_secs(60);
            c
        },
        crypto::default_provider(),
        ChaCha20Rng::seed_from_u64(3),
    );
    s.handle(
        T0,
        Input::Opened {
            conn: ALICE,
            face: Face::Client,
            namespaces: vec![Namespace::parse("alice").unwrap()],
        },
    );
    raw(
        &mut s,
        ALICE,
        &json!({"t":"hello","proto":"airc/0.1","role":"client"}),
    );
    raw(&mut s, ALICE, &to_desk("m1"));
    let mut questions = Vec::new();
    let mut t = T0;
    for _ in 0..3 {
        while let Some(o) = s.poll() {
            if let Output::Resolve { name, .. } = o {
                questions.push((name, t));
            }
        }
        t = t + weft_proto::airc::server::locate::DNS_TIMEOUT;
        s.handle_timeout(t);
    }
    let names: Vec<&str> = questions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [PARTNER_SRV, "airc.partner.example", "partner.example"]
    );
    assert_eq!(questions[1].1, T0 + Duration::from_secs(10));
    let (frames, _) = sent_on(&mut s, ALICE);
    let ack = frames.iter().find(|f| f["t"] == "ack").unwrap();
    assert_eq!(ack["code"], "no_such_authority");
}

// ---- passports across realms: the wire, revocation and the audit stream (§12.4, §12.6, §13) ----

const ADMIN: ConnId = ConnId(9);

/// Opens an administrator connection on server `s` subscribed to `kinds`.
fn admin_subscribed(net: &mut Net, s: usize, kinds: &[&str]) {
    net.input(
        s,
        Input::Opened {
            conn: ADMIN,
            face: Face::Client,
            namespaces: Vec::new(),
        },
    );
    net.input(s, Input::Administrator { conn: ADMIN });
    net.frame(
        s,
        ADMIN,
        json!({"t":"hello","proto":"airc/0.1","role":"client"}),
    );
    net.frame(s, ADMIN, json!({"t":"subscribe","kinds":kinds}));
    net.read(s, ADMIN);
}

/// The events server `s`'s administrator read since the last call.
fn events(net: &mut Net, s: usize) -> Vec<Value> {
    net.read(s, ADMIN)
        .into_iter()
        .filter(|f| f["t"] == "event")
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

/// alice/x issues a passport for partner.example and desk redeems it: (passport id, link id).
fn redeemed_across(net: &mut Net) -> (String, String) {
    net.client(A, ALICE, "alice", &["alice/"]);
    net.client(B, DESK, "support", &["support/desk"]);
    let p = passport_for_partner(net);
    let pid = p["passport"]["id"].as_str().unwrap().to_string();
    let line = p["line"].as_str().unwrap().to_string();
    net.read(B, DESK);
    net.frame(
        B,
        DESK,
        json!({"t":"passport","op":"redeem","as":"support/desk","passport":line}),
    );
    let answer = passported(&net.read(B, DESK));
    let lid = answer["link"]["id"].as_str().unwrap().to_string();
    net.read(A, ALICE);
    (pid, lid)
}

#[test]
fn the_redemption_message_crosses_with_a_600_s_ttl() {
    let mut net = Net::new(closed_policy);
    redeemed_across(&mut net);
    let redemption: Vec<&Value> = net
        .wire_log
        .iter()
        .filter(|(s, f)| *s == B && f["type"] == "application/airc-passport+json")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(redemption.len(), 1, "{:?}", net.wire_log);
    let m = redemption[0];
    assert_eq!(m["ttl"], 600);
    assert_eq!(m["to"], "airc://example.com/_passport");
    assert_eq!(m["from"], "airc://partner.example/support/desk");
    assert!(
        m["hdr"]["sig"].is_string(),
        "signed like anything leaving a realm"
    );
}

#[test]
fn a_passport_redeemed_across_realms_is_logged_as_issue_redeem_and_grant_events() {
    let mut net = Net::new(closed_policy);
    admin_subscribed(&mut net, A, &["link", "passport"]);
    admin_subscribed(&mut net, B, &["link", "passport"]);
    let (pid, lid) = redeemed_across(&mut net);
    let at_issuer = events(&mut net, A);
    assert_eq!(
        kinds(&at_issuer),
        ["passport.issue", "link.grant", "passport.redeem"],
        "{at_issuer:?}"
    );
    let issue = &at_issuer[0];
    assert_eq!(issue["passport"], pid.as_str());
    assert_eq!(issue["endpoint"], "airc://example.com/alice/x");
    let grant = &at_issuer[1];
    assert_eq!(grant["link"], lid.as_str());
    let redeem = &at_issuer[2];
    assert_eq!(redeem["passport"], pid.as_str());
    assert_eq!(redeem["link"], lid.as_str());
    assert!(
        at_issuer
            .iter()
            .all(|e| e.get("body").is_none() && e.get("token").is_none()),
        "no body, no token"
    );
    let at_redeemer = events(&mut net, B);
    assert_eq!(kinds(&at_redeemer), ["link.grant"], "{at_redeemer:?}");
    assert_eq!(at_redeemer[0]["link"], lid.as_str());
}

#[test]
fn revoking_a_passport_and_links_sends_the_revoke_control_to_the_other_realm() {
    let mut net = Net::new(closed_policy);
    let (pid, lid) = redeemed_across(&mut net);
    admin_subscribed(&mut net, A, &["link", "passport"]);
    admin_subscribed(&mut net, B, &["link", "passport"]);
    net.read(B, DESK);
    net.wire_log.clear();
    net.frame(
        A,
        ALICE,
        json!({"t":"passport","op":"revoke","as":"alice/x","id":pid,"and_links":true}),
    );
    let answer = passported(&net.read(A, ALICE));
    assert_eq!(answer["revoked_links"], json!([lid]));
    // The revoke control crossed to partner.example, from alice/x to desk.
    let controls: Vec<&Value> = net
        .wire_log
        .iter()
        .filter(|(s, f)| *s == A && f["type"] == "application/airc-link+json")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(controls.len(), 1, "{:?}", net.wire_log);
    let body: Value = serde_json::from_str(controls[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["action"], "revoke");
    assert_eq!(body["link"]["id"], lid.as_str());
    assert_eq!(controls[0]["to"], "airc://partner.example/support/desk");
    // partner.example stored it and told desk, and both logged it.
    let told = msgs(&net.read(B, DESK));
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["hdr"]["airc-link"], lid.as_str());
    let at_issuer = events(&mut net, A);
    assert_eq!(kinds(&at_issuer), ["passport.revoke", "link.revoke"]);
    assert_eq!(at_issuer[0]["passport"], pid.as_str());
    assert_eq!(at_issuer[0]["state"], "revoked");
    assert_eq!(at_issuer[1]["link"], lid.as_str());
    let at_redeemer = events(&mut net, B);
    assert_eq!(kinds(&at_redeemer), ["link.revoke"], "{at_redeemer:?}");
    assert_eq!(at_redeemer[0]["link"], lid.as_str());
    // The revoked link no longer opens partner.example's closed policy.
    net.frame(
        B,
        DESK,
        json!({"t":"msg","id":"d9","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000.1,"body":"hi"}),
    );
    assert_eq!(net.acks(B, DESK)[0]["code"], "refused");
    assert!(msgs(&net.read(A, ALICE)).is_empty());
}

#[test]
fn link_offer_accept_and_decline_are_logged_at_both_realms() {
    let mut net = Net::new(closed_policy);
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.client(B, DESK, "support", &["support/desk"]);
    admin_subscribed(&mut net, A, &["link"]);
    admin_subscribed(&mut net, B, &["link"]);
    let (first, _) = offer(&mut net, "//partner.example/support/desk");
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"decline","as":"support/desk","id":first}),
    );
    let (second, _) = offer(&mut net, "//partner.example/support/desk");
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"accept","as":"support/desk","id":second}),
    );
    for s in [A, B] {
        let got = events(&mut net, s);
        assert_eq!(
            kinds(&got),
            ["link.offer", "link.decline", "link.offer", "link.accept"],
            "server {s}: {got:?}"
        );
        let links: Vec<&str> = got.iter().map(|e| e["link"].as_str().unwrap()).collect();
        assert_eq!(links, [&first, &first, &second, &second]);
        assert!(got.iter().all(|e| e.get("body").is_none()));
    }
}

#[test]
fn several_simultaneous_links_from_one_realm_are_each_accepted_and_authenticated() {
    let mut net = Net::new(|_, _| {});
    let b = &mut net.servers[B];
    for conn in [ConnId(50), ConnId(51), ConnId(52)] {
        // Each link its own nonce, as a dialler draws one per hello (§8.4).
        let hello = signed_hello_with(T0.as_secs(), &format!("n{}", conn.0));
        let (frames, closed) = inbound_peer(b, conn, &hello);
        assert_eq!(frames[0]["t"], "welcome", "link {conn:?}");
        assert!(!closed, "link {conn:?} stays open");
    }
    // Authenticated: desk's message for example.com goes out over one of them, with no dial.
    desk_writes_to_alice(b);
    let (mut dialled, mut sent) = (false, false);
    while let Some(o) = b.poll() {
        match o {
            Output::Connect { .. } => dialled = true,
            Output::Send { conn, .. } => sent |= [50, 51, 52].contains(&conn.0),
            _ => {}
        }
    }
    assert!(sent && !dialled);
}

#[test]
fn a_dialled_link_idle_for_600_s_is_closed_and_later_mail_dials_again() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    net.frame(B, DESK, json!({"t":"ack","id":"m1","status":"delivered"}));
    assert_eq!(net.dials.len(), 1);
    let link = |net: &Net| net.wires.keys().find(|(s, _)| *s == A).copied();
    let first = link(&net).expect("the dialled link is up");

    // Traffic keeps it open: a message 599 s later, then 599 s more of quiet.
    net.advance(Duration::from_secs(599));
    net.frame(A, ALICE, to_desk("m2"));
    net.frame(B, DESK, json!({"t":"ack","id":"m2","status":"delivered"}));
    net.advance(Duration::from_secs(599));
    assert_eq!(link(&net), Some(first), "traffic 599 s ago keeps the link");
    assert_eq!(net.servers[A].stats().idle_links, 0);

    // One more second of silence makes 600 s: the dialler closes it.
    net.advance(Duration::from_secs(1));
    assert_eq!(link(&net), None, "the idle link is closed");
    assert_eq!(net.servers[A].stats().idle_links, 1);
    assert_eq!(net.dials.len(), 1);

    // Mail spooled afterwards dials again and goes out over the new link.
    net.read(B, DESK);
    net.frame(A, ALICE, to_desk("m3"));
    assert_eq!(net.dials.len(), 2, "a new link is dialled");
    let got = net.read(B, DESK);
    assert_eq!(got[0]["id"], "m3");
    assert_ne!(link(&net), Some(first));
}

#[test]
fn a_grant_across_realms_is_recorded_at_both_and_enforced_by_each() {
    let mut net = Net::new(closed_policy);
    net.alice_and_desk_bound();
    net.frame(
        A,
        ALICE,
        json!({"t":"link","op":"grant","as":"alice/x","peer":"//partner.example/support/desk"}),
    );
    let l = linked(&net.read(A, ALICE));
    assert_eq!(l["delivery"], "delivered", "partner.example stored it: {l}");
    assert_eq!(l["link"]["state"], "active");
    let id = l["link"]["id"].as_str().unwrap().to_string();
    let told = msgs(&net.read(B, DESK));
    assert_eq!(told[0]["hdr"]["airc-link-action"], "grant");
    assert_eq!(told[0]["hdr"]["airc-link"], id.as_str());
    net.frame(
        B,
        DESK,
        json!({"t":"ack","id":told[0]["id"],"status":"delivered"}),
    );

    // Both servers hold the record.
    for s in [A, B] {
        net.input(
            s,
            Input::Opened {
                conn: ADMIN,
                face: Face::Client,
                namespaces: vec![],
            },
        );
        net.input(s, Input::Administrator { conn: ADMIN });
        net.frame(
            s,
            ADMIN,
            json!({"t":"hello","proto":"airc/0.1","role":"client"}),
        );
        net.frame(s, ADMIN, json!({"t":"link","op":"list"}));
        let listed = linked(&net.read(s, ADMIN));
        assert_eq!(listed["links"][0]["id"], id.as_str(), "server {s}");
        assert_eq!(listed["links"][0]["direction"], "b-initiates");
    }

    // example.com enforces it on egress: alice may not start.
    net.frame(A, ALICE, json!({"t":"msg","id":"a1","from":"x","to":"//partner.example/support/desk","ts":1_790_380_000,"body":"hi"}));
    assert_eq!(net.acks(A, ALICE)[0]["code"], "refused");
    // desk may, through both realms' closed policies; then alice replies.
    net.frame(B, DESK, json!({"t":"msg","id":"d1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"}));
    assert_eq!(msgs(&net.read(A, ALICE))[0]["id"], "d1");
    net.frame(A, ALICE, json!({"t":"ack","id":"d1","status":"delivered"}));
    assert_eq!(net.acks(B, DESK)[0]["status"], "delivered");
    net.frame(A, ALICE, json!({"t":"msg","id":"a2","from":"x","to":"//partner.example/support/desk","ts":1_790_380_000,"body":"re"}));
    assert_eq!(msgs(&net.read(B, DESK))[0]["id"], "a2");
}

// ---- the peer face in detail (§8.4, §9.3, §9.4) -------------------------------------------------

/// `m` signed by key `n` as §9.3 says; ttl, via and other hdr entries are left as they are.
fn signed_msg(mut m: Value, n: u8) -> Value {
    let ts = weft_proto::airc::signing::ts_ms(m["ts"].as_f64().unwrap()).unwrap();
    let canonical = weft_proto::airc::signing::Signed {
        id: m["id"].as_str().unwrap(),
        from: m["from"].as_str().unwrap(),
        to: m["to"].as_str().unwrap(),
        ts_ms: ts,
        kind: m["type"].as_str(),
        re: m["re"].as_str(),
        body: m["body"].as_str().unwrap(),
    }
    .canonical();
    let p = crypto::default_provider();
    let sig = weft_proto::crypto::sigstring::sign(p, &seed(n), canonical.as_bytes()).to_string();
    m["hdr"]["sig"] = json!(sig);
    m
}

#[test]
fn the_dialler_signs_a_hello_over_a_fresh_nonce_and_the_welcome_names_server_and_kid() {
    use weft_proto::airc::signing::{hello_canonical, welcome_canonical};
    use weft_proto::crypto::sigstring::{self, SigString};
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    net.frame(A, ALICE, to_desk("m1"));
    drop_links(&mut net);
    net.frame(A, ALICE, to_desk("m2"));
    let p = crypto::default_provider();
    let sent = |s: usize, t: &str| -> Vec<Value> {
        net.wire_log
            .iter()
            .filter(|(from, f)| *from == s && f["t"] == t)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let (hellos, welcomes) = (sent(A, "hello"), sent(B, "welcome"));
    assert_eq!((hellos.len(), welcomes.len()), (2, 2));
    for (h, w) in hellos.iter().zip(&welcomes) {
        assert_eq!(
            (&h["proto"], &h["role"], &h["realm"], &h["ts"]),
            (
                &json!("airc/0.1"),
                &json!("peer"),
                &json!("example.com"),
                &json!(T0.as_secs())
            )
        );
        assert!(h["agent"].as_str().unwrap().starts_with("weft/"));
        let nonce = h["nonce"].as_str().unwrap();
        assert_eq!(nonce.len(), 32, "16 random bytes in hex");
        assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()));
        let text = hello_canonical("example.com", "partner.example", T0.as_secs(), nonce);
        let sig = SigString::parse(h["sig"].as_str().unwrap()).unwrap();
        assert!(sigstring::verify(p, &public(1), text.as_bytes(), &sig));

        assert_eq!(
            (&w["realm"], &w["proto"]),
            (&json!("partner.example"), &json!("airc/0.1"))
        );
        assert!(w["server"].as_str().unwrap().starts_with("weft/"));
        assert_eq!(w["kid"], sigstring::kid(p, &public(2)).as_str());
        let text = welcome_canonical("partner.example", "example.com", nonce);
        let sig = SigString::parse(w["sig"].as_str().unwrap()).unwrap();
        assert!(sigstring::verify(p, &public(2), text.as_bytes(), &sig));
    }
    assert_ne!(
        hellos[0]["nonce"], hellos[1]["nonce"],
        "a fresh nonce per link"
    );
}

#[test]
fn a_hello_signed_for_another_realm_welcomes_but_does_not_authenticate() {
    let mut net = Net::new(|_, _| {});
    let ts = T0.as_secs();
    // A hello example.com signed for third.example, replayed to partner.example.
    let text = format!("airc-hello\nexample.com\nthird.example\n{ts}\nabcd");
    let p = crypto::default_provider();
    let sig = weft_proto::crypto::sigstring::sign(p, &seed(1), text.as_bytes()).to_string();
    let hello = json!({"t":"hello","proto":"airc/0.1","role":"peer","realm":"example.com","ts":ts,"nonce":"abcd","sig":sig});
    let (peer, b) = (ConnId(50), &mut net.servers[B]);
    let (frames, closed) = inbound_peer(b, peer, &hello);
    assert_eq!((frames[0]["t"].as_str(), closed), (Some("welcome"), false));
    desk_writes_to_alice(b);
    let (mut dialled, mut sent_on_replayed) = (false, false);
    while let Some(o) = b.poll() {
        match o {
            Output::Connect { authority, .. } => dialled |= authority.to_string() == "example.com",
            Output::Send { conn, .. } => sent_on_replayed |= conn == peer,
            _ => {}
        }
    }
    assert!(dialled && !sent_on_replayed);
    // The same hello signed for partner.example authenticates: only the target differs.
    let mut net = Net::new(|_, _| {});
    let (peer, b) = (ConnId(51), &mut net.servers[B]);
    inbound_peer(b, peer, &signed_hello(ts));
    desk_writes_to_alice(b);
    let (frames, _) = sent_on(b, peer);
    assert!(frames.iter().any(|f| f["t"] == "msg"));
}

/// An inbound link from example.com that did not authenticate (its hello is 301 s old), and
/// desk bound at partner.example.
fn unauthenticated_inbound(net: &mut Net) -> ConnId {
    let peer = ConnId(50);
    net.client(B, DESK, "support", &["support/desk"]);
    net.read(B, DESK);
    net.input(
        B,
        Input::Opened {
            conn: peer,
            face: Face::Peer,
            namespaces: vec![],
        },
    );
    net.frame(B, peer, signed_hello(T0.as_secs() - 301));
    assert_eq!(net.read(B, peer)[0]["t"], "welcome");
    peer
}

#[test]
fn an_unauthenticated_inbound_link_carries_individually_signed_messages() {
    let mut net = Net::new(|_, _| {});
    let peer = unauthenticated_inbound(&mut net);
    let m = json!({"t":"msg","id":"s1","from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","ts":1_790_380_000.5,"body":"signed"});
    net.frame(B, peer, signed_msg(m.clone(), 1));
    assert_eq!(msgs(&net.read(B, DESK))[0]["id"], "s1");
    net.frame(B, DESK, json!({"t":"ack","id":"s1","status":"delivered"}));
    assert_eq!(
        net.acks(B, peer)[0]["status"],
        "delivered",
        "the ack goes back on it"
    );
    // Unsigned, the same message is refused there.
    let mut unsigned = m;
    unsigned["id"] = json!("s2");
    net.frame(B, peer, unsigned);
    assert_eq!(net.acks(B, peer)[0]["code"], "refused");
    assert!(net.read(B, DESK).is_empty());
}

#[test]
fn a_hop_may_change_ttl_and_via_and_the_signature_still_verifies() {
    let mut net = Net::new(|_, _| {});
    let peer = unauthenticated_inbound(&mut net);
    let m = json!({"t":"msg","id":"h1","from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","ts":1_790_380_000.5,"ttl":60,"body":"b"});
    let mut moved = signed_msg(m, 1);
    moved["ttl"] = json!(7200);
    moved["via"] = json!(["example.com", "relay.example"]);
    moved["hdr"]["x-hop"] = json!("added on the way");
    net.frame(B, peer, moved.clone());
    let got = msgs(&net.read(B, DESK));
    assert_eq!(got[0]["id"], "h1");
    assert_eq!(got[0]["ttl"], 7200);
    net.frame(B, DESK, json!({"t":"ack","id":"h1","status":"delivered"}));
    assert_eq!(net.acks(B, peer)[0]["status"], "delivered");
    // A change to a covered field (the body) does not verify.
    let mut tampered = signed_msg(
        json!({"t":"msg","id":"h2","from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","ts":1_790_380_000.5,"body":"b"}),
        1,
    );
    tampered["body"] = json!("c");
    net.frame(B, peer, tampered);
    assert_eq!(net.acks(B, peer)[0]["code"], "refused");
    assert!(net.read(B, DESK).is_empty());
}

// ---- link control at the server (§11.4) ---------------------------------------------------------

#[test]
fn a_control_message_is_acked_once_stored_whatever_becomes_of_its_notice() {
    let mut net = Net::new(|_, _| {});
    net.alice_and_desk_bound();
    let (id, l) = offer(&mut net, "//partner.example/support/desk");
    assert_eq!(l["delivery"], "delivered");
    // desk's client fails the notice: alice's answer stands and nothing more reaches her.
    let notice = msgs(&net.read(B, DESK)).remove(0);
    net.frame(
        B,
        DESK,
        json!({"t":"ack","id":notice["id"],"status":"failed","code":"refused"}),
    );
    assert!(net.read(A, ALICE).is_empty());
    // An offer to an endpoint nobody is bound for: its notice is queued, the control delivered.
    let (_, l) = offer(&mut net, "//partner.example/support/away");
    assert_eq!(l["delivery"], "delivered", "{l}");
    assert_eq!(net.servers[B].spooled(), 1, "the notice waits");
    assert_eq!(l["link"]["state"], "pending");
    assert_ne!(l["link"]["id"], id.as_str());
}

#[test]
fn auto_accept_opens_an_offered_link_at_once_and_tells_both_ends() {
    let mut net = Net::new(|i, c| {
        closed_policy(i, c);
        if i == B {
            let p =
                weft_proto::airc::pattern::Pattern::parse("//partner.example/support/**").unwrap();
            c.links.auto_accept = vec![p];
        }
    });
    net.alice_and_desk_bound();
    net.frame(
        A,
        ALICE,
        json!({"t":"link","op":"offer","as":"alice/x","peer":"//partner.example/support/desk"}),
    );
    let got = net.read(A, ALICE);
    let l = linked(&got);
    assert_eq!(l["delivery"], "delivered");
    let id = l["link"]["id"].as_str().unwrap().to_string();
    // The accept came back as a control message and alice was told.
    let told = msgs(&got);
    assert_eq!(told[0]["hdr"]["airc-link-action"], "accept", "{got:?}");
    assert_eq!(told[0]["from"], "airc://partner.example/support/desk");
    // desk is told the link opened by itself, with the command to close it.
    let n = msgs(&net.read(B, DESK)).remove(0);
    assert_eq!(n["hdr"]["airc-link"], id.as_str());
    let body = n["body"].as_str().unwrap();
    assert!(body.contains("accepted automatically"), "{body}");
    assert!(body.contains(&format!("airc link revoke {id}")), "{body}");
    // Active at both: a message crosses both closed policies.
    net.frame(A, ALICE, json!({"t":"msg","id":"a1","from":"x","to":"//partner.example/support/desk","ts":1_790_380_000,"body":"hi"}));
    assert_eq!(msgs(&net.read(B, DESK))[0]["id"], "a1");
}

/// The offer control message example.com sent, as it crossed the link.
fn offer_on_the_wire(net: &Net) -> Value {
    net.wire_log
        .iter()
        .rev()
        .find(|(s, f)| *s == A && f["type"] == "application/airc-link+json")
        .map(|(_, f)| f.clone())
        .expect("an offer crossed")
}

/// Writes `m`, re-signed by example.com's key under a new id, onto A's end of the link, and
/// returns partner.example's ack.
fn forge(net: &mut Net, mut m: Value, id: &str) -> Value {
    m["id"] = json!(id);
    let m = signed_msg(m, 1);
    let (&(_, dial), _) = net.wires.iter().find(|((s, _), _)| *s == A).unwrap();
    let (t, tc) = net.wires[&(A, dial)];
    let mut bytes = serde_json::to_vec(&m).unwrap();
    bytes.push(b'\n');
    net.servers[t].handle(net.now, Input::Received { conn: tc, bytes });
    let mut ack = None;
    while let Some(o) = net.servers[t].poll() {
        match o {
            Output::Send { conn, bytes } if conn == tc => {
                let f: Value = serde_json::from_slice(bytes.trim_ascii_end()).unwrap();
                if f["t"] == "ack" && f["id"] == id {
                    ack = Some(f);
                }
            }
            o => net.carry(t, o),
        }
    }
    net.settle();
    ack.expect("an ack")
}

/// partner.example's record of link `id`, as its administrator lists it.
fn record_at_b(net: &mut Net, id: &str) -> Value {
    if !net.inbox.contains_key(&(B, ADMIN)) {
        admin_subscribed(net, B, &["link.offer"]);
    }
    net.frame(B, ADMIN, json!({"t":"link","op":"list"}));
    let l = linked(&net.read(B, ADMIN));
    l["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn the_receiving_server_validates_checks_the_actor_and_merges_forward_only() {
    let mut net = Net::new(|_, _| {});
    net.client(A, ALICE, "alice", &["alice/x"]);
    net.client(B, DESK, "support", &["support/desk"]);
    net.read(A, ALICE);
    let (id, _) = offer(&mut net, "//partner.example/support/desk");
    let offer = offer_on_the_wire(&net);
    let body: Value = serde_json::from_str(offer["body"].as_str().unwrap()).unwrap();
    net.read(B, DESK);

    // Step 1: a record whose sides are not from and to is refused.
    let mut bad = offer.clone();
    let mut b = body.clone();
    b["link"]["b"] = json!("airc://partner.example/support/other");
    b["link"]["id"] = json!("L00c0ffee");
    bad["body"] = json!(b.to_string());
    bad["hdr"]["airc-link"] = json!("L00c0ffee");
    let ack = forge(&mut net, bad, "f1");
    assert_refused(&ack);
    assert_eq!(ack["reason"], "link L00c0ffee is between other endpoints");
    assert_eq!(
        record_at_b(&mut net, "L00c0ffee"),
        Value::Null,
        "not stored"
    );
    // An invalid record (no such state) likewise.
    let mut bad = offer.clone();
    let mut b = body.clone();
    b["link"]["state"] = json!("maybe");
    bad["body"] = json!(b.to_string());
    assert_eq!(forge(&mut net, bad, "f2")["status"], "failed");

    // Step 2: an accept from the offerer is not the offeree's.
    let mut bad = offer.clone();
    let mut b = body.clone();
    b["action"] = json!("accept");
    b["link"]["state"] = json!("active");
    bad["body"] = json!(b.to_string());
    bad["hdr"]["airc-link-action"] = json!("accept");
    let ack = forge(&mut net, bad, "f3");
    assert_refused(&ack);
    let why = format!("link {id}: only the offeree may do that");
    assert_eq!(ack["reason"], why.as_str());
    assert_eq!(record_at_b(&mut net, &id)["state"], "pending");
    assert!(
        msgs(&net.read(B, DESK)).is_empty(),
        "desk is told of nothing refused"
    );

    // Step 3: a retried offer changes nothing and tells no one again.
    let ack = forge(&mut net, offer.clone(), "f4");
    assert_eq!(ack["status"], "delivered");
    assert!(msgs(&net.read(B, DESK)).is_empty());
    // Once desk accepted, the stale offer cannot move the record back.
    net.frame(
        B,
        DESK,
        json!({"t":"link","op":"accept","as":"support/desk","id":id}),
    );
    assert_eq!(record_at_b(&mut net, &id)["state"], "active");
    forge(&mut net, offer, "f5");
    assert_eq!(record_at_b(&mut net, &id)["state"], "active");
}

// ---- audit and tuning (§13, §15) ----------------------------------------------------------------

#[test]
fn a_message_to_another_realm_is_logged_with_hop_peer_and_its_type() {
    let mut net = Net::new(|_, _| {});
    net.desk_and_alice();
    admin_subscribed(&mut net, A, &["msg.delivered"]);
    let mut m = to_desk("t1");
    m["type"] = json!("application/json");
    m["body"] = json!("{\"n\":1}");
    net.frame(A, ALICE, m);
    net.frame(B, DESK, json!({"t":"ack","id":"t1","status":"delivered"}));
    let e = events(&mut net, A).remove(0);
    assert_eq!(
        (&e["kind"], &e["hop"], &e["type"], &e["bytes"]),
        (
            &json!("msg.delivered"),
            &json!("peer"),
            &json!("application/json"),
            &json!(7)
        )
    );
    assert!(e.get("body").is_none());
    // text/plain is the default and is not written.
    net.frame(A, ALICE, to_desk("t2"));
    net.frame(B, DESK, json!({"t":"ack","id":"t2","status":"delivered"}));
    let e = events(&mut net, A).remove(0);
    assert!(e.get("type").is_none(), "{e}");
}

#[test]
fn operator_tuned_timings_need_nothing_from_the_peer() {
    // example.com waits 3 s for an ack and flushes every 7 s; partner.example keeps the defaults.
    let mut net = Net::new(|i, c| {
        if i == A {
            c.ack_timeout = Duration::from_secs(3);
            c.flush_interval = Duration::from_secs(7);
        }
    });
    net.m1_from_alice_to_desk();
    net.advance(Duration::from_secs(2));
    assert!(net.acks(A, ALICE).is_empty());
    net.advance(Duration::from_secs(1));
    assert_eq!(
        net.acks(A, ALICE),
        [json!({"t":"ack","id":"m1","status":"queued","code":"no_ack"})]
    );
    // desk's late ack still settles it, and the tuned flush never sends it twice.
    net.frame(B, DESK, json!({"t":"ack","id":"m1","status":"delivered"}));
    net.advance(Duration::from_secs(21));
    assert_eq!(net.servers[A].stats().settled, 1);
    assert_eq!(net.servers[A].spooled(), 0);
    let copies = msgs(&net.read(B, DESK))
        .iter()
        .filter(|m| m["id"] == "m1")
        .count();
    assert_eq!(copies, 1);
}

#[test]
fn a_peer_message_without_an_allowed_valid_signature_is_refused() {
    let mut net = Net::new(|_, _| {});
    let peer = unauthenticated_inbound(&mut net);
    // Each variant carries the bytes of a valid ed25519 signature over its own message.
    type Variant = fn(&str, &str) -> Value;
    let variants: [(&str, Variant); 5] = [
        // No signature from a realm that signs.
        ("n1", |_, _| Value::Null),
        // `none` is never valid, even well formed and alone.
        ("n2", |kid, b64| json!(format!("none:{kid}:{b64}"))),
        ("n3", |_, _| json!("none")),
        // Only algorithms this verifier does not allow.
        ("n4", |kid, b64| json!(format!("ed448:{kid}:{b64}"))),
        ("n5", |kid, b64| json!([format!("rsa:{kid}:{b64}"), "none"])),
    ];
    let msg = |id: &str| {
        signed_msg(
            json!({"t":"msg","id":id,"from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","ts":1_790_380_000.5,"body":"b"}),
            1,
        )
    };
    for (id, variant) in variants {
        let mut m = msg(id);
        let valid = m["hdr"]["sig"].as_str().unwrap().to_string();
        let parts: Vec<&str> = valid.splitn(3, ':').collect();
        let sig = variant(parts[1], parts[2]);
        m["hdr"] = if sig.is_null() {
            json!({})
        } else {
            json!({ "sig": sig })
        };
        net.frame(B, peer, m);
        let acks = net.acks(B, peer);
        assert_eq!(
            (&acks[0]["status"], &acks[0]["code"]),
            (&json!("failed"), &json!("refused")),
            "{id}"
        );
    }
    assert!(msgs(&net.read(B, DESK)).is_empty());
    // A list holding the valid signature next to a `none` is taken by the valid one.
    let mut both = msg("n6");
    let valid = both["hdr"]["sig"].clone();
    both["hdr"]["sig"] = json!(["none", valid]);
    net.frame(B, peer, both);
    assert_eq!(msgs(&net.read(B, DESK))[0]["id"], "n6");
}

#[test]
fn the_origin_refuses_by_its_own_policy_before_anything_leaves() {
    let mut net = Net::new(|i, c| {
        if i == A {
            let rules =
                r#"[{"from":"*","to":"//partner.example/**","allow":false,"note":"no vendors"}]"#;
            c.policy = weft_proto::airc::policy::Policy::from_json(rules).unwrap();
        }
    });
    net.m1_from_alice_to_desk();
    let ack = net.acks(A, ALICE).remove(0);
    assert_refused(&ack);
    assert!(net.dials.is_empty(), "no link even asked for");
    assert!(net.wire_log.is_empty());
    // partner.example, whose policy allows, still reaches alice: each decides for itself.
    net.client(A, ConnId(7), "alice", &["alice/x"]);
    net.frame(B, DESK, json!({"t":"msg","id":"d1","from":"desk","to":"//example.com/alice/x","ts":1_790_380_000,"body":"hi"}));
    assert_eq!(msgs(&net.read(A, ConnId(7)))[0]["id"], "d1");
}

#[test]
fn a_link_control_message_that_cannot_be_delivered_is_queued_not_dropped() {
    let mut net = Net::new(|_, _| {});
    net.reachable = false;
    net.alice_and_desk_bound();
    let (id, l) = offer(&mut net, "//partner.example/support/desk");
    assert_eq!(
        (&l["ok"], &l["delivery"], &l["code"]),
        (
            &json!(true),
            &json!("queued"),
            &json!("authority_unreachable")
        )
    );
    assert_eq!(net.servers[A].spooled(), 1);
    // The link comes back: the offer goes out and desk is told.
    net.reachable = true;
    net.advance(Duration::from_secs(30));
    let told = msgs(&net.read(B, DESK));
    assert_eq!(told[0]["hdr"]["airc-link"], id.as_str());
    assert_eq!(net.servers[A].spooled(), 0);
}
