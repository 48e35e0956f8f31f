//! The AIRC client machine against the real server machine, wired in memory with virtual time
//! (AIRC §3.3, §4, §7.3), and against hand-written frames where a real server would never send
//! them.

use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::client::{
    Client, ClientConfig, Input, MAX_UNACKED, Outgoing, RECONNECT, Refused, Reply, Request,
    RequestKind,
};
use weft_proto::airc::frame::{Ack, AckStatus, ErrorCode, LinkRequest};
use weft_proto::airc::server::{self, Face, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto;

type Output = weft_proto::airc::client::Output;

const T0: Timestamp = Timestamp::from_secs(1_790_380_000);
const ALICE: usize = 0;
const BOB: usize = 1;

struct Peer {
    client: Client<ChaCha20Rng>,
    ns: &'static str,
    conn: Option<ConnId>,
    /// Everything the client told its application, in order.
    events: Vec<Output>,
    /// Every frame the client wrote, in order.
    written: Vec<Value>,
}

/// One realm server and its clients, with the server reachable or not.
struct World {
    server: Server<ChaCha20Rng>,
    peers: Vec<Peer>,
    now: Timestamp,
    next_conn: u64,
    down: bool,
}

impl World {
    fn new(names: &[&'static str]) -> Self {
        let mut config = ServerConfig::new(Authority::parse("example.com").unwrap());
        config.known_namespaces = vec![
            Namespace::parse("alice").unwrap(),
            Namespace::parse("bob").unwrap(),
        ];
        let peers = names
            .iter()
            .enumerate()
            .map(|(i, ns)| Peer {
                client: Client::new(
                    ClientConfig::default(),
                    ChaCha20Rng::seed_from_u64(10 + i as u64),
                ),
                ns,
                conn: None,
                events: Vec::new(),
                written: Vec::new(),
            })
            .collect();
        Self {
            server: Server::new(
                config,
                crypto::default_provider(),
                ChaCha20Rng::seed_from_u64(1),
            ),
            peers,
            now: T0,
            next_conn: 1,
            down: false,
        }
    }

    /// Feeds `input` to client `i` and carries every consequence through.
    fn tell(&mut self, i: usize, input: Input) {
        self.peers[i].client.handle(self.now, input);
        self.pump();
    }

    fn send(&mut self, i: usize, from: &str, to: &str, body: &str) -> String {
        let out = Outgoing {
            from: from.into(),
            to: to.into(),
            body: body.into(),
            ..Outgoing::default()
        };
        let id = self.peers[i].client.send(self.now, out).unwrap();
        self.pump();
        id
    }

    /// Runs every output of every machine until none has anything more.
    fn pump(&mut self) {
        loop {
            let mut progress = false;
            for i in 0..self.peers.len() {
                while let Some(o) = self.peers[i].client.poll() {
                    progress = true;
                    self.client_output(i, o);
                }
            }
            while let Some(o) = self.server.poll() {
                progress = true;
                match o {
                    server::Output::Send { conn, bytes } => {
                        if let Some(i) = self.peer_on(conn) {
                            self.peers[i].client.handle(self.now, Input::Bytes(bytes));
                        }
                    }
                    server::Output::Close { conn } => {
                        if let Some(i) = self.peer_on(conn) {
                            self.peers[i].conn = None;
                            self.peers[i].client.handle(self.now, Input::Disconnected);
                        }
                    }
                    _ => {}
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn peer_on(&self, conn: ConnId) -> Option<usize> {
        self.peers.iter().position(|p| p.conn == Some(conn))
    }

    fn client_output(&mut self, i: usize, o: Output) {
        let now = self.now;
        match o {
            Output::Connect => {
                if self.down {
                    self.peers[i].client.handle(now, Input::Disconnected);
                    return;
                }
                let conn = ConnId(self.next_conn);
                self.next_conn += 1;
                self.peers[i].conn = Some(conn);
                let namespaces = vec![Namespace::parse(self.peers[i].ns).unwrap()];
                self.server.handle(
                    now,
                    server::Input::Opened {
                        conn,
                        face: Face::Client,
                        namespaces,
                        source: Source::Unknown,
                    },
                );
                self.peers[i].client.handle(now, Input::Connected);
            }
            Output::Transmit(bytes) => {
                for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    self.peers[i]
                        .written
                        .push(serde_json::from_slice(line).unwrap());
                }
                if let Some(conn) = self.peers[i].conn {
                    self.server
                        .handle(now, server::Input::Received { conn, bytes });
                }
            }
            Output::Close => {
                if let Some(conn) = self.peers[i].conn.take() {
                    self.server.handle(now, server::Input::Closed { conn });
                }
            }
            other => self.peers[i].events.push(other),
        }
    }

    /// The network drops client `i`'s connection, and the server stays unreachable until
    /// [`World::heal`].
    fn cut(&mut self, i: usize) {
        self.down = true;
        if let Some(conn) = self.peers[i].conn.take() {
            self.server.handle(self.now, server::Input::Closed { conn });
        }
        self.peers[i].client.handle(self.now, Input::Disconnected);
        self.pump();
    }

    fn heal(&mut self) {
        self.down = false;
    }

    /// Moves the clock on by `d`, running every timeout due on the way, in time order.
    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let mut next: Option<(Timestamp, Option<usize>)> = self
                .server
                .poll_timeout()
                .filter(|w| w.at <= until)
                .map(|w| (w.at, None));
            for (i, p) in self.peers.iter().enumerate() {
                if let Some(w) = p.client.poll_timeout().filter(|w| w.at <= until)
                    && next.is_none_or(|(at, _)| w.at < at)
                {
                    next = Some((w.at, Some(i)));
                }
            }
            let Some((at, who)) = next else { break };
            self.now = self.now.max(at);
            match who {
                None => self.server.handle_timeout(self.now),
                Some(i) => self.peers[i].client.handle_timeout(self.now),
            }
            self.pump();
        }
        self.now = until;
    }

    /// Starts client `i` and binds `names` at once (the bind waits for the welcome).
    fn online(&mut self, i: usize, names: &[&str]) {
        self.tell(
            i,
            Input::Bind(names.iter().map(|n| n.to_string()).collect()),
        );
        self.tell(i, Input::Start);
        assert!(self.peers[i].client.is_open());
    }

    fn events(&mut self, i: usize) -> Vec<Output> {
        std::mem::take(&mut self.peers[i].events)
    }

    /// The messages client `i` handed its application, acking each `delivered`.
    fn take_messages(&mut self, i: usize) -> Vec<(String, String)> {
        let mut got = Vec::new();
        let events = self.events(i);
        for e in &events {
            if let Output::Message(m) = e {
                got.push((m.id.clone(), m.body.clone()));
            }
        }
        self.peers[i].events = events
            .into_iter()
            .filter(|e| !matches!(e, Output::Message(_)))
            .collect();
        for (id, _) in &got {
            self.tell(i, Input::Ack(Ack::new(id.clone(), AckStatus::Delivered)));
        }
        got
    }
}

fn acked(events: &[Output]) -> Vec<(String, AckStatus, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Output::Acked {
                id, status, code, ..
            } => Some((id.clone(), *status, code.clone())),
            _ => None,
        })
        .collect()
}

fn types(written: &[Value]) -> Vec<&str> {
    written.iter().map(|f| f["t"].as_str().unwrap()).collect()
}

#[test]
fn hello_then_welcome_then_bind_then_a_message_acked_delivered() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(BOB, &["bob/"]);
    let events = w.events(BOB);
    assert!(
        matches!(&events[0], Output::Welcome { realm, ns } if realm == "example.com" && ns == &["bob"])
    );
    assert_eq!(events[1], Output::Bound(vec!["//example.com/bob/".into()]));
    assert_eq!(types(&w.peers[BOB].written), ["hello", "bind"]);

    w.online(ALICE, &[]);
    let id = w.send(ALICE, "x", "//example.com/bob/y", "hi");
    // The id is fresh: 128 random bits as hex (§4.2 leaves the format to the origin).
    assert_eq!(id.len(), 32);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(w.take_messages(BOB), [(id.clone(), "hi".to_string())]);
    assert_eq!(acked(&w.events(ALICE)), [(id, AckStatus::Delivered, None)]);
    assert_eq!(w.peers[ALICE].client.unacked(), 0);
}

#[test]
fn nothing_but_hello_is_written_before_the_welcome() {
    let mut c = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(3));
    c.handle(T0, Input::Bind(vec!["alice/".into()]));
    c.handle(T0, Input::Start);
    let out = c.send(
        T0,
        Outgoing {
            from: "x".into(),
            to: "bob/y".into(),
            body: "b".into(),
            ..Outgoing::default()
        },
    );
    assert!(out.is_ok());
    c.handle(T0, Input::Request(Request::Stat));
    c.handle(T0, Input::Connected);
    let mut written = Vec::new();
    while let Some(o) = c.poll() {
        if let Output::Transmit(b) = o {
            written.push(serde_json::from_slice::<Value>(&b).unwrap());
        }
    }
    assert_eq!(types(&written), ["hello"]);
    assert_eq!(
        written[0],
        json!({"t":"hello","proto":"airc/0.1","role":"client"})
    );
    c.handle(
        T0,
        Input::Bytes(
            b"{\"t\":\"welcome\",\"realm\":\"example.com\",\"proto\":\"airc/0.1\"}\n".to_vec(),
        ),
    );
    let mut written = Vec::new();
    while let Some(o) = c.poll() {
        if let Output::Transmit(b) = o {
            written.push(serde_json::from_slice::<Value>(&b).unwrap());
        }
    }
    assert_eq!(types(&written), ["bind", "stat", "msg"]);
}

#[test]
fn two_clients_exchange_messages_both_ways() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(ALICE, &["alice/"]);
    w.online(BOB, &["bob/"]);
    w.events(ALICE);
    w.events(BOB);
    let a = w.send(ALICE, "x", "//example.com/bob/y", "ping from alice");
    assert_eq!(
        w.take_messages(BOB),
        [(a.clone(), "ping from alice".into())]
    );
    let b = w.send(BOB, "y", "//example.com/alice/x", "pong from bob");
    assert_eq!(
        w.take_messages(ALICE),
        [(b.clone(), "pong from bob".into())]
    );
    assert_ne!(a, b);
    assert_eq!(acked(&w.events(ALICE)), [(a, AckStatus::Delivered, None)]);
    assert_eq!(acked(&w.events(BOB)), [(b, AckStatus::Delivered, None)]);
}

#[test]
fn a_lost_connection_is_redialled_with_backoff_and_rebound_and_the_outage_message_arrives_once() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(ALICE, &[]);
    w.online(BOB, &["bob/"]);
    w.events(BOB);
    w.cut(BOB);
    // The first redial comes within the first backoff ceiling, never sooner than half of it.
    let at = match w.events(BOB).as_slice() {
        [Output::Reconnecting { at }] => *at,
        other => panic!("{other:?}"),
    };
    assert!(at >= T0 + RECONNECT.initial / 2 && at <= T0 + RECONNECT.initial);
    // While the server is unreachable, each failed dial waits longer (up to twice as long).
    w.advance(Duration::from_secs(10));
    let waits: Vec<Timestamp> = w
        .events(BOB)
        .iter()
        .filter_map(|e| match e {
            Output::Reconnecting { at } => Some(*at),
            _ => None,
        })
        .collect();
    assert!(waits.len() >= 3, "{waits:?}");
    let mut prev = at;
    for (n, next) in waits.iter().enumerate() {
        let ceiling = RECONNECT.initial * 2u32.pow(n as u32 + 1);
        let gap = next.saturating_duration_since(prev);
        assert!(gap >= ceiling / 2 && gap <= ceiling, "attempt {n}: {gap:?}");
        prev = *next;
    }

    // Alice sends during the outage: the server spools it for bob (queued endpoint_offline).
    let id = w.send(ALICE, "x", "//example.com/bob/y", "while you were out");
    assert_eq!(
        acked(&w.events(ALICE)),
        [(
            id.clone(),
            AckStatus::Queued,
            Some("endpoint_offline".into())
        )]
    );
    w.heal();
    w.advance(Duration::from_secs(60));
    let events = w.events(BOB);
    assert!(events.iter().any(|e| matches!(e, Output::Welcome { .. })));
    assert!(events.contains(&Output::Bound(vec!["//example.com/bob/".into()])));
    assert_eq!(
        types(&w.peers[BOB].written)
            .iter()
            .filter(|t| **t == "bind")
            .count(),
        2,
        "bound again on the new connection"
    );
    w.peers[BOB].events = events;
    assert_eq!(w.take_messages(BOB), [(id, "while you were out".into())]);
    w.advance(Duration::from_secs(120));
    assert!(w.take_messages(BOB).is_empty(), "exactly once");
    // Backoff starts over after a welcome: the next loss redials within the first ceiling.
    let t = w.now;
    w.events(BOB);
    w.cut(BOB);
    w.heal();
    assert!(
        matches!(w.events(BOB).as_slice(), [Output::Reconnecting { at }] if *at <= t + RECONNECT.initial)
    );
}

#[test]
fn an_unacked_message_is_sent_again_with_its_id_and_the_server_keeps_it_delivered_once() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(ALICE, &[]);
    w.online(BOB, &["bob/"]);
    w.events(BOB);
    let id = w.send(ALICE, "x", "//example.com/bob/y", "once");
    // Bob has it; alice's connection drops before bob's ack comes back.
    let delivered = w.events(BOB);
    assert!(matches!(&delivered[..], [Output::Message(m)] if m.id == id));
    w.cut(ALICE);
    w.heal();
    w.tell(BOB, Input::Ack(Ack::new(id.clone(), AckStatus::Delivered)));
    assert!(acked(&w.events(ALICE)).is_empty());
    assert_eq!(w.peers[ALICE].client.unacked(), 1);
    w.advance(Duration::from_secs(5));
    let msgs: Vec<&Value> = w.peers[ALICE]
        .written
        .iter()
        .filter(|f| f["t"] == "msg")
        .collect();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0], msgs[1], "the same frame, the same id");
    assert_eq!(w.peers[ALICE].client.stats().resent, 1);
    assert_eq!(
        acked(&w.events(ALICE)),
        [(id, AckStatus::Delivered, Some("duplicate".into()))]
    );
    assert!(w.take_messages(BOB).is_empty(), "not delivered again");
}

#[test]
fn a_message_handed_to_the_application_is_acked_once() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(ALICE, &[]);
    w.online(BOB, &["bob/"]);
    let id = w.send(ALICE, "x", "//example.com/bob/y", "hi");
    assert!(
        acked(&w.events(ALICE)).is_empty(),
        "nothing until bob answers"
    );
    let failed = Ack {
        reason: Some("not today".into()),
        ..Ack::new(id.clone(), AckStatus::Failed)
    };
    w.tell(BOB, Input::Ack(failed.clone()));
    w.tell(BOB, Input::Ack(Ack::new(id.clone(), AckStatus::Delivered)));
    let acks: Vec<&Value> = w.peers[BOB]
        .written
        .iter()
        .filter(|f| f["t"] == "ack")
        .collect();
    assert_eq!(
        acks,
        [&json!({"t":"ack","id":id,"status":"failed","reason":"not today"})]
    );
    assert_eq!(w.peers[BOB].client.stats().stray_user_acks, 1);
    assert_eq!(acked(&w.events(ALICE)), [(id, AckStatus::Failed, None)]);
}

/// A client started and handed `Connected`, its outputs drained.
fn connected() -> Client<ChaCha20Rng> {
    let mut c = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(5));
    c.handle(T0, Input::Start);
    c.handle(T0, Input::Connected);
    drain(&mut c);
    c
}

fn drain(c: &mut Client<ChaCha20Rng>) -> Vec<Output> {
    std::iter::from_fn(|| c.poll()).collect()
}

fn transmitted(out: &[Output]) -> Vec<Value> {
    out.iter()
        .filter_map(|o| match o {
            Output::Transmit(b) => Some(serde_json::from_slice(b).unwrap()),
            _ => None,
        })
        .collect()
}

fn feed(c: &mut Client<ChaCha20Rng>, frame: Value) -> Vec<Output> {
    let mut bytes = serde_json::to_vec(&frame).unwrap();
    bytes.push(b'\n');
    c.handle(T0, Input::Bytes(bytes));
    drain(c)
}

const WELCOME: &str = r#"{"t":"welcome","realm":"example.com","proto":"airc/0.1","ns":["alice"]}"#;

#[test]
fn a_welcome_in_another_protocol_version_is_answered_bad_proto_and_closed() {
    let mut c = connected();
    let out = feed(
        &mut c,
        json!({"t":"welcome","realm":"example.com","proto":"airc/9.9"}),
    );
    assert_eq!(transmitted(&out)[0]["code"], "bad_proto");
    let close = out.iter().position(|o| *o == Output::Close).unwrap();
    assert!(
        close
            > out
                .iter()
                .position(|o| matches!(o, Output::Transmit(_)))
                .unwrap()
    );
    assert!(out.contains(&Output::ProtocolError(ErrorCode::BadProto)));
    assert!(out.iter().any(|o| matches!(o, Output::Reconnecting { .. })));
    assert!(!c.is_open());
}

#[test]
fn a_welcome_without_a_realm_or_for_another_realm_is_closed() {
    let mut c = connected();
    let out = feed(&mut c, json!({"t":"welcome","proto":"airc/0.1"}));
    assert_eq!(transmitted(&out)[0]["code"], "bad_frame");
    assert!(out.contains(&Output::Close));

    let config = ClientConfig {
        realm: Some("example.com".into()),
        ..ClientConfig::default()
    };
    let mut c = Client::new(config, ChaCha20Rng::seed_from_u64(5));
    c.handle(T0, Input::Start);
    c.handle(T0, Input::Connected);
    drain(&mut c);
    let out = feed(
        &mut c,
        json!({"t":"welcome","realm":"evil.example","proto":"airc/0.1"}),
    );
    assert_eq!(transmitted(&out)[0]["code"], "realm_mismatch");
    assert!(out.contains(&Output::Close));
}

#[test]
fn anything_but_welcome_first_is_no_welcome() {
    let mut c = connected();
    let out = feed(&mut c, json!({"t":"ping","n":1}));
    assert_eq!(
        transmitted(&out),
        [json!({"t":"error","code":"no_welcome","reason":"expected welcome, got ping"})]
    );
    assert!(out.contains(&Output::Close));
}

#[test]
fn a_ping_is_answered_with_pong_echoing_n() {
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    let out = feed(&mut c, json!({"t":"ping","n":7}));
    assert_eq!(transmitted(&out), [json!({"t":"pong","n":7})]);
    assert!(c.is_open());
}

#[test]
fn an_unknown_frame_type_is_answered_unexpected_frame_and_closed() {
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    let out = feed(&mut c, json!({"t":"teleport"}));
    assert_eq!(transmitted(&out)[0]["code"], "unexpected_frame");
    assert!(out.contains(&Output::Close));
    assert!(!c.is_open());
}

#[test]
fn a_message_with_bad_fields_is_acked_failed_bad_address() {
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    let out = feed(
        &mut c,
        json!({"t":"msg","id":"m1","from":"x","to":7,"ts":1.0,"body":"b"}),
    );
    assert_eq!(
        transmitted(&out),
        [json!({"t":"ack","id":"m1","status":"failed","code":"bad_address"})]
    );
    assert!(c.is_open());
}

#[test]
fn a_refused_bind_is_not_asked_again_after_the_reconnect() {
    let mut w = World::new(&["alice"]);
    w.online(ALICE, &["alice/"]);
    w.tell(ALICE, Input::Bind(vec!["bob/".into()]));
    let events = w.events(ALICE);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Output::ServerError { code, .. } if code == "forbidden"))
    );
    assert_eq!(w.peers[ALICE].client.binds(), ["alice/"]);
    w.advance(Duration::from_secs(5));
    assert!(w.peers[ALICE].client.is_open());
    let binds: Vec<&Value> = w.peers[ALICE]
        .written
        .iter()
        .filter(|f| f["t"] == "bind")
        .collect();
    assert_eq!(binds.last().unwrap()["names"], json!(["alice/"]));
}

#[test]
fn requests_are_answered_in_order_and_lost_ones_reported() {
    let mut w = World::new(&["alice"]);
    w.online(ALICE, &["alice/x"]);
    w.events(ALICE);
    w.tell(ALICE, Input::Request(Request::Stat));
    let list = LinkRequest {
        op: "list".into(),
        acting: Some("alice/x".into()),
        peer: None,
        id: None,
        label: None,
        direction: None,
    };
    w.tell(ALICE, Input::Request(Request::Link(list)));
    let events = w.events(ALICE);
    assert!(
        matches!(&events[0], Output::Reply(Reply::Stats(s)) if s.counters.contains_key("messages"))
    );
    assert!(matches!(&events[1], Output::Reply(Reply::Linked(l)) if l.ok));
    // A request whose connection drops before the reply is reported, not sent again.
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    c.handle(T0, Input::Request(Request::Stat));
    c.handle(T0, Input::Disconnected);
    let out = drain(&mut c);
    assert!(out.contains(&Output::Unanswered(RequestKind::Stat)));
}

#[test]
fn the_unacked_table_is_bounded() {
    let mut c = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(5));
    let o = || Outgoing {
        from: "x".into(),
        to: "bob/y".into(),
        body: "b".into(),
        ..Outgoing::default()
    };
    for _ in 0..MAX_UNACKED {
        c.send(T0, o()).unwrap();
    }
    assert_eq!(c.send(T0, o()), Err(Refused::Full));
    c.handle(T0, Input::Send(o()));
    assert_eq!(drain(&mut c), [Output::Refused(Refused::Full)]);
    assert_eq!(c.unacked(), MAX_UNACKED);
}

#[test]
fn a_message_whose_ttl_passed_in_the_outage_is_failed_expired_not_sent() {
    let mut c = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(5));
    let id = c
        .send(
            T0,
            Outgoing {
                from: "x".into(),
                to: "bob/y".into(),
                body: "b".into(),
                ttl: Some(10),
                ..Outgoing::default()
            },
        )
        .unwrap();
    let later = T0 + Duration::from_secs(11);
    c.handle(later, Input::Start);
    c.handle(later, Input::Connected);
    c.handle(later, Input::Bytes(format!("{WELCOME}\n").into_bytes()));
    let out = drain(&mut c);
    assert!(!transmitted(&out).iter().any(|f| f["t"] == "msg"));
    assert_eq!(
        acked(&out),
        [(id, AckStatus::Failed, Some("expired".into()))]
    );
}

#[test]
fn a_server_that_never_acks_is_given_up_on_and_redialled() {
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    c.send(
        T0,
        Outgoing {
            from: "x".into(),
            to: "bob/y".into(),
            body: "b".into(),
            ..Outgoing::default()
        },
    )
    .unwrap();
    drain(&mut c);
    let w = c.poll_timeout().unwrap();
    assert_eq!(w.at, T0 + weft_proto::airc::client::ACK_WAIT);
    c.handle_timeout(w.at);
    let out = drain(&mut c);
    assert_eq!(out[0], Output::Close);
    assert!(matches!(out[1], Output::Reconnecting { .. }));
    assert_eq!(c.stats().timeouts, 1);
}

#[test]
fn a_dial_that_completes_after_a_stop_is_closed_and_a_second_connect_is_ignored() {
    let mut c = Client::new(ClientConfig::default(), ChaCha20Rng::seed_from_u64(5));
    c.handle(T0, Input::Start);
    assert_eq!(drain(&mut c), [Output::Connect]);
    c.handle(T0, Input::Stop);
    c.handle(T0, Input::Connected);
    assert_eq!(drain(&mut c), [Output::Close]);
    let mut c = connected();
    feed(&mut c, serde_json::from_str(WELCOME).unwrap());
    c.handle(T0, Input::Connected);
    assert!(drain(&mut c).is_empty());
    assert!(c.is_open());
    assert_eq!(c.stats().stray_connects, 1);
}

#[test]
fn a_message_sent_again_with_its_given_id_is_acked_duplicate_and_not_delivered_twice() {
    let mut w = World::new(&["alice", "bob"]);
    w.online(ALICE, &[]);
    w.online(BOB, &["bob/"]);
    let given = || Outgoing {
        id: Some("01J8CHOSENBYTHEAPP0000000A".into()),
        from: "x".into(),
        to: "//example.com/bob/y".into(),
        body: "once".into(),
        ..Outgoing::default()
    };
    let now = w.now;
    let id = w.peers[ALICE].client.send(now, given()).unwrap();
    assert_eq!(id, "01J8CHOSENBYTHEAPP0000000A");
    assert_eq!(
        w.peers[ALICE].client.send(now, given()),
        Err(Refused::DuplicateId),
        "two unacked messages with one id would share one ack"
    );
    w.pump();
    let delivered = w.take_messages(BOB);
    assert_eq!(delivered.len(), 1, "taken and acked delivered");
    assert_eq!(
        acked(&w.events(ALICE)),
        [(id.clone(), AckStatus::Delivered, None)]
    );
    // Another run of the application retries the same message (§4.2: origins MAY retry).
    let now = w.now;
    assert_eq!(w.peers[ALICE].client.send(now, given()), Ok(id.clone()));
    w.pump();
    assert_eq!(
        acked(&w.events(ALICE)),
        [(id, AckStatus::Delivered, Some("duplicate".into()))]
    );
    assert!(w.take_messages(BOB).is_empty(), "not delivered again");
}
