//! The AIRC client machine against the real server machine, in memory, with explicit time
//! (AIRC §3.3, §4.1–§4.4).

use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::client::{self, Client, ClientConfig};
use weft_proto::airc::frame::{Ack, AckStatus, Msg};
use weft_proto::airc::server::{self, Face, Server, ServerConfig};
use weft_proto::core::{ConnId, Machine, Timestamp};

const T0: Timestamp = Timestamp::from_secs(1_790_380_000);
/// A raw client of the server, driven frame by frame: alice.
const ALICE: ConnId = ConnId(1);

/// A server for example.com, a client machine for namespace bob, and the wire between them.
struct World {
    server: Server<ChaCha20Rng>,
    client: Client<ChaCha20Rng>,
    now: Timestamp,
    /// The server-side id of the client's current connection.
    conn: Option<ConnId>,
    next_conn: u64,
    /// Whether the host can open a connection now.
    up: bool,
    /// What the client handed its application.
    app: Vec<client::Output>,
    /// Frames alice read.
    alice: Vec<Value>,
    /// Every frame the client wrote.
    wire: Vec<Value>,
    /// When each connection attempt was made.
    attempts: Vec<Timestamp>,
}

fn lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

impl World {
    fn new(binds: &[&str]) -> Self {
        let mut config = ServerConfig::new(Authority::parse("example.com").unwrap());
        config.known_namespaces = vec![
            Namespace::parse("alice").unwrap(),
            Namespace::parse("bob").unwrap(),
        ];
        let server = Server::new(
            config,
            weft_proto::crypto::default_provider(),
            ChaCha20Rng::seed_from_u64(1),
        );
        let mut c = ClientConfig::new("test/1");
        c.binds = binds.iter().map(ToString::to_string).collect();
        let client = Client::new(c, ChaCha20Rng::seed_from_u64(2));
        let mut w = Self {
            server,
            client,
            now: T0,
            conn: None,
            next_conn: 100,
            up: true,
            app: Vec::new(),
            alice: Vec::new(),
            wire: Vec::new(),
            attempts: Vec::new(),
        };
        w.server.handle(
            T0,
            server::Input::Opened {
                conn: ALICE,
                face: Face::Client,
                namespaces: vec![Namespace::parse("alice").unwrap()],
            },
        );
        w.alice_says(json!({"t":"hello","proto":"airc/0.1","role":"client"}));
        w.alice_says(json!({"t":"bind","names":["alice/x"]}));
        w.settle();
        w
    }

    fn alice_says(&mut self, frame: Value) {
        let mut bytes = serde_json::to_vec(&frame).unwrap();
        bytes.push(b'\n');
        self.server
            .handle(self.now, server::Input::Received { conn: ALICE, bytes });
        self.settle();
    }

    fn tell_client(&mut self, input: client::Input) {
        self.client.handle(self.now, input);
        self.settle();
    }

    /// Drops the client's connection as a network failure would: both ends are told.
    fn drop_connection(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.server.handle(self.now, server::Input::Closed { conn });
            self.client.handle(self.now, client::Input::Closed);
        }
        self.settle();
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Some(o) = self.client.poll() {
                moved = true;
                match o {
                    client::Output::Connect => {
                        self.attempts.push(self.now);
                        if self.up {
                            let conn = ConnId(self.next_conn);
                            self.next_conn += 1;
                            self.conn = Some(conn);
                            self.server.handle(
                                self.now,
                                server::Input::Opened {
                                    conn,
                                    face: Face::Client,
                                    namespaces: vec![Namespace::parse("bob").unwrap()],
                                },
                            );
                            self.client.handle(self.now, client::Input::Connected);
                        } else {
                            self.client.handle(self.now, client::Input::Closed);
                        }
                    }
                    client::Output::Send(bytes) => {
                        self.wire.extend(lines(&bytes));
                        if let Some(conn) = self.conn {
                            self.server
                                .handle(self.now, server::Input::Received { conn, bytes });
                        }
                    }
                    client::Output::Close => self.drop_connection(),
                    other => self.app.push(other),
                }
            }
            while let Some(o) = self.server.poll() {
                moved = true;
                match o {
                    server::Output::Send { conn, bytes } if Some(conn) == self.conn => {
                        self.client.handle(self.now, client::Input::Received(bytes));
                    }
                    server::Output::Send { conn, bytes } if conn == ALICE => {
                        self.alice.extend(lines(&bytes));
                    }
                    server::Output::Close { conn } if Some(conn) == self.conn => {
                        self.conn = None;
                        self.server.handle(self.now, server::Input::Closed { conn });
                        self.client.handle(self.now, client::Input::Closed);
                    }
                    _ => {}
                }
            }
            if !moved {
                return;
            }
        }
        panic!("never quiet");
    }

    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let next = [self.client.poll_timeout(), self.server.poll_timeout()]
                .into_iter()
                .flatten()
                .map(|w| w.at)
                .filter(|at| *at <= until)
                .min();
            let Some(at) = next else { break };
            self.now = self.now.max(at);
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
            self.settle();
        }
        self.now = until;
    }

    fn take_app(&mut self) -> Vec<client::Output> {
        std::mem::take(&mut self.app)
    }

    fn messages(&mut self) -> Vec<Msg> {
        self.take_app()
            .into_iter()
            .filter_map(|o| match o {
                client::Output::Message(m) => Some(*m),
                _ => None,
            })
            .collect()
    }
}

fn from_alice(id: &str) -> Value {
    json!({"t":"msg","id":id,"from":"x","to":"//example.com/bob/y","ts":1_790_380_000,"body":"hi"})
}

fn to_alice(id: &str) -> Msg {
    Msg {
        id: id.to_string(),
        from: "y".into(),
        to: "//example.com/alice/x".into(),
        ts: 0.0,
        body: "hello".into(),
        kind: None,
        re: None,
        ttl: None,
        via: None,
        hdr: None,
    }
}

#[test]
fn a_client_says_hello_first_binds_after_welcome_and_gets_one_ack_per_id() {
    let mut w = World::new(&["bob/y"]);
    assert_eq!(w.wire[0]["t"], "hello", "hello first");
    assert_eq!(
        (&w.wire[0]["proto"], &w.wire[0]["role"], &w.wire[0]["agent"]),
        (&json!("airc/0.1"), &json!("client"), &json!("test/1"))
    );
    assert_eq!(w.wire[1], json!({"t":"bind","names":["bob/y"]}));
    let app = w.take_app();
    assert!(matches!(&app[0], client::Output::Welcome(welcome) if welcome.realm == "example.com"));
    assert!(
        matches!(&app[1], client::Output::Frame(f) if f.t() == "bound"),
        "{app:?}"
    );
    assert!(w.client.is_open());

    // Two messages without ids get fresh, distinct ids and a ts, and one ack each.
    w.tell_client(client::Input::Send(Box::new(to_alice(""))));
    w.tell_client(client::Input::Send(Box::new(to_alice(""))));
    let sent: Vec<Value> = w.wire.iter().filter(|f| f["t"] == "msg").cloned().collect();
    assert_eq!(sent.len(), 2);
    assert_ne!(sent[0]["id"], sent[1]["id"]);
    assert_eq!(sent[0]["id"].as_str().unwrap().len(), 32);
    assert_eq!(sent[0]["ts"], json!(1_790_380_000.0));
    assert_eq!(w.client.outstanding(), 2);
    for m in &sent {
        w.alice_says(json!({"t":"ack","id":m["id"],"status":"delivered"}));
    }
    let acked: Vec<Ack> = w
        .take_app()
        .into_iter()
        .filter_map(|o| match o {
            client::Output::Acked(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(acked.len(), 2);
    assert!(acked.iter().all(|a| a.status == AckStatus::Delivered));
    assert_eq!(w.client.outstanding(), 0);

    // A message for it is handed to the application, which acks it.
    w.alice_says(from_alice("a1"));
    let got = w.messages();
    assert_eq!(got[0].id, "a1");
    w.tell_client(client::Input::Ack(Ack::new("a1", AckStatus::Delivered)));
    assert!(w.alice.iter().any(|f| f["t"] == "ack" && f["id"] == "a1"));
}

#[test]
fn a_closed_connection_is_reopened_with_backoff_and_the_binds_made_again() {
    let mut w = World::new(&["bob/y"]);
    w.take_app();
    w.up = false;
    w.drop_connection();
    // Mail for bob while he is away is spooled.
    w.alice_says(from_alice("a1"));
    assert_eq!(w.alice.last().unwrap()["code"], "endpoint_offline");

    // The first retry comes within [0.5 s, 1 s], the next within [1 s, 2 s] of that.
    w.advance(Duration::from_secs(1));
    assert_eq!(w.attempts.len(), 2, "the first connect and one retry");
    let first = w.attempts[1].abs_diff(T0);
    assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
    w.advance(Duration::from_secs(2));
    assert_eq!(w.attempts.len(), 3);
    let second = w.attempts[2].abs_diff(w.attempts[1]);
    assert!(
        second >= Duration::from_secs(1) && second <= Duration::from_secs(2),
        "{second:?}"
    );
    assert_eq!(w.client.stats().reconnects, 2);

    // The server is back: the next retry connects, binds again and receives the spooled mail.
    w.up = true;
    w.wire.clear();
    w.advance(Duration::from_secs(4));
    assert_eq!(w.wire[0]["t"], "hello");
    assert_eq!(w.wire[1], json!({"t":"bind","names":["bob/y"]}));
    assert_eq!(w.messages()[0].id, "a1");
    // A welcome resets the schedule: a drop now retries within a second again.
    let before = w.attempts.len();
    let at = w.now;
    w.drop_connection();
    w.advance(Duration::from_secs(1));
    assert_eq!(w.attempts.len(), before + 1);
    assert!(w.attempts[before].abs_diff(at) <= Duration::from_secs(1));
}

#[test]
fn a_message_unacked_when_the_connection_drops_is_sent_again_under_its_id_and_acked_once() {
    let mut w = World::new(&["bob/"]);
    w.take_app();
    // Sent while the connection is down: held until the next welcome.
    w.up = false;
    w.drop_connection();
    w.tell_client(client::Input::Send(Box::new(to_alice("b1"))));
    assert_eq!(w.client.outstanding(), 1);
    w.up = true;
    w.advance(Duration::from_secs(1));
    let sent: Vec<_> = w.wire.iter().filter(|f| f["t"] == "msg").cloned().collect();
    assert_eq!(sent.len(), 1, "sent once the connection is back");
    assert_eq!(sent[0]["id"], "b1");
    // alice has it; the connection drops before her ack comes back.
    assert!(w.alice.iter().any(|f| f["id"] == "b1" && f["t"] == "msg"));
    w.drop_connection();
    w.alice_says(json!({"t":"ack","id":"b1","status":"delivered"}));
    w.advance(Duration::from_secs(1));
    // Sent again under the same id; the server knows it and answers for it once.
    let resent: Vec<_> = w
        .wire
        .iter()
        .filter(|f| f["t"] == "msg" && f["id"] == "b1")
        .collect();
    assert_eq!(resent.len(), 2);
    assert_eq!(w.client.stats().resent, 2, "at each of the two reconnects");
    let acks: Vec<Ack> = w
        .take_app()
        .into_iter()
        .filter_map(|o| match o {
            client::Output::Acked(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0].id, "b1");
    assert_eq!(w.client.outstanding(), 0);
    let delivered = w
        .alice
        .iter()
        .filter(|f| f["t"] == "msg" && f["id"] == "b1")
        .count();
    assert_eq!(delivered, 1, "never delivered twice");
}

#[test]
fn a_welcome_in_another_version_or_a_frame_before_it_is_refused_and_ping_is_answered() {
    let mut c = Client::new(ClientConfig::new("t"), ChaCha20Rng::seed_from_u64(3));
    let drain = |c: &mut Client<ChaCha20Rng>| std::iter::from_fn(|| c.poll()).collect::<Vec<_>>();
    assert_eq!(drain(&mut c), [client::Output::Connect]);
    c.handle(T0, client::Input::Connected);
    drain(&mut c);
    let welcome = b"{\"t\":\"welcome\",\"realm\":\"example.com\",\"proto\":\"airc/0.2\"}\n";
    c.handle(T0, client::Input::Received(welcome.to_vec()));
    let out = drain(&mut c);
    let client::Output::Send(bytes) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(lines(bytes)[0]["code"], "bad_proto");
    assert_eq!(out[1], client::Output::Close);
    assert!(!c.is_open());

    c.handle(T0, client::Input::Closed);
    c.handle_timeout(T0 + Duration::from_secs(1));
    assert_eq!(drain(&mut c), [client::Output::Connect]);
    c.handle(T0, client::Input::Connected);
    drain(&mut c);
    c.handle(
        T0,
        client::Input::Received(b"{\"t\":\"ping\",\"n\":1}\n".to_vec()),
    );
    let out = drain(&mut c);
    let client::Output::Send(bytes) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(lines(bytes)[0]["code"], "no_welcome");

    c.handle(T0, client::Input::Closed);
    c.handle_timeout(T0 + Duration::from_secs(3));
    drain(&mut c);
    c.handle(T0, client::Input::Connected);
    drain(&mut c);
    let ok = b"{\"t\":\"welcome\",\"realm\":\"example.com\",\"proto\":\"airc/0.1\",\"ns\":[]}\n{\"t\":\"ping\",\"n\":7}\n";
    c.handle(T0, client::Input::Received(ok.to_vec()));
    let out = drain(&mut c);
    let pong = out.iter().find_map(|o| match o {
        client::Output::Send(b) => Some(lines(b)[0].clone()),
        _ => None,
    });
    assert_eq!(pong, Some(json!({"t":"pong","n":7})));
}
