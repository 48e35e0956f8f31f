//! An AIRC exchange through the realm server machine (AIRC §4–§7): two clients connect, say
//! `hello` and get `welcome`, `bind` an inbox each and get `bound`; bob sends alice a `msg`, the
//! server hands it to alice, alice acks it `delivered`, and the server relays that ack to bob.
//!
//! The clients are plain frame sequences written here; the server is `weft_proto`'s, unchanged.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::frame::{Ack, AckStatus, Bind, Frame, Hello, Msg, PROTO, Role};
use weft_proto::airc::framing;
use weft_proto::airc::server::{Face, Input, Output, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine};
use weft_proto::crypto::default_provider;

use crate::{Failure, START};

/// The realm the server serves.
pub const REALM: &str = "example.com";
const ALICE: ConnId = ConnId(1);
const BOB: ConnId = ConnId(2);

/// What the AIRC exchange showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AircOutcome {
    /// The message id bob sent.
    pub id: String,
    /// The body alice was handed.
    pub body: String,
    /// The status of the ack bob received.
    pub ack: AckStatus,
    /// Records the server asked its host to persist on the way.
    pub persisted: usize,
}

struct Realm {
    server: Server<ChaCha20Rng>,
    persisted: usize,
}

impl Realm {
    /// Feeds one input and returns the frames the server wrote to `conn`, in order.
    fn input(&mut self, input: Input, conn: ConnId) -> Vec<Frame> {
        self.server.handle(START, input);
        let mut frames = Vec::new();
        while let Some(out) = self.server.poll() {
            match out {
                Output::Send { conn: c, bytes } if c == conn => {
                    let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
                    frames.extend(lines.filter_map(|l| framing::decode_line(l).ok()));
                }
                Output::Persist(_) => self.persisted += 1,
                _ => {}
            }
        }
        frames
    }

    fn send(&mut self, conn: ConnId, frame: &Frame) -> Vec<Frame> {
        let bytes = framing::encode(frame);
        self.input(Input::Received { conn, bytes }, conn)
    }

    /// Writes `frame` on `from` and returns what the server wrote to `to`.
    fn send_to(&mut self, from: ConnId, frame: &Frame, to: ConnId) -> Vec<Frame> {
        let bytes = framing::encode(frame);
        self.input(Input::Received { conn: from, bytes }, to)
    }

    /// A client connection for namespace `ns` through hello/welcome and bind/bound.
    fn client(&mut self, conn: ConnId, ns: &str) -> Result<(), Failure> {
        let namespaces = vec![Namespace::parse(ns).map_err(|_| Failure("a namespace"))?];
        let face = Face::Client;
        self.input(
            Input::Opened {
                conn,
                face,
                namespaces,
                source: Source::Unknown,
            },
            conn,
        );
        let hello = Frame::Hello(Hello {
            proto: PROTO.to_string(),
            role: Role::Client,
            agent: Some("weft-no-std".to_string()),
            realm: None,
            ts: None,
            nonce: None,
            sig: None,
        });
        if !matches!(self.send(conn, &hello).first(), Some(Frame::Welcome(_))) {
            return Err(Failure("no welcome for a client hello"));
        }
        let names = vec![alloc::format!("{ns}/inbox")];
        let bind = Frame::Bind(Bind { names });
        if !matches!(self.send(conn, &bind).first(), Some(Frame::Bound(_))) {
            return Err(Failure("no bound for a bind"));
        }
        Ok(())
    }
}

/// Runs the AIRC exchange: bob's message reaches alice and bob gets alice's `delivered` ack.
pub fn exchange() -> Result<AircOutcome, Failure> {
    let authority = Authority::parse(REALM).map_err(|_| Failure("a realm name"))?;
    let mut config = ServerConfig::new(authority);
    for ns in ["alice", "bob"] {
        let ns = Namespace::parse(ns).map_err(|_| Failure("a namespace"))?;
        config.known_namespaces.push(ns);
    }
    let rng = ChaCha20Rng::seed_from_u64(7);
    let mut realm = Realm {
        server: Server::new(config, default_provider(), rng),
        persisted: 0,
    };
    realm.client(ALICE, "alice")?;
    realm.client(BOB, "bob")?;

    let id = "no-std-1".to_string();
    let msg = Frame::Msg(Msg {
        id: id.clone(),
        from: "out".to_string(),
        to: alloc::format!("//{REALM}/alice/inbox"),
        ts: START.as_millis() as f64 / 1000.0,
        body: "hello from a no_std crate".to_string(),
        kind: None,
        re: None,
        ttl: None,
        via: None,
        hdr: None,
    });
    let to_alice = realm.send_to(BOB, &msg, ALICE);
    let body = to_alice
        .iter()
        .find_map(|f| match f {
            Frame::Msg(m) if m.id == id => Some(m.body.clone()),
            _ => None,
        })
        .ok_or(Failure("the msg did not reach alice"))?;

    let ack = Frame::Ack(Ack::new(id.clone(), AckStatus::Delivered));
    let to_bob = realm.send_to(ALICE, &ack, BOB);
    let status = to_bob
        .iter()
        .find_map(|f| match f {
            Frame::Ack(a) if a.id == id => Some(a.status),
            _ => None,
        })
        .ok_or(Failure("bob got no ack"))?;
    Ok(AircOutcome {
        id,
        body,
        ack: status,
        persisted: realm.persisted,
    })
}
