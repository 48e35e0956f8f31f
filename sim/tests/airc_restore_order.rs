//! §7.4 "Flushing preserves order per key", across a restart: the host hands records back with
//! `Input::Restore` in the order they were written, and the restarted server must flush each
//! key's backlog in that order. Found while building the airc-realms scenario (the server used
//! to file restored records at the front of the queue, reversing the backlog).

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::frame::{Frame, Msg};
use weft_proto::airc::framing;
use weft_proto::airc::server::{Face, Input, Output, Record, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto;

const T0: Timestamp = Timestamp::from_secs(1_790_380_000);

fn msg(id: &str) -> Msg {
    Msg {
        id: id.to_string(),
        from: "airc://example.com/alice/x".to_string(),
        to: "airc://example.com/bob/y".to_string(),
        ts: 1_790_380_000.0,
        body: "b".to_string(),
        kind: None,
        re: None,
        ttl: None,
        via: None,
        hdr: None,
    }
}

fn frame(server: &mut Server<ChaCha20Rng>, conn: ConnId, f: &Frame) -> Vec<Frame> {
    server.handle(
        T0,
        Input::Received {
            conn,
            bytes: framing::encode(f),
        },
    );
    let mut out = Vec::new();
    while let Some(o) = server.poll() {
        if let Output::Send { bytes, .. } = o {
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                out.extend(framing::decode_line(line).ok());
            }
        }
    }
    out
}

#[test]
fn a_restored_backlog_is_flushed_in_the_order_it_was_written() {
    let mut config = ServerConfig::new(Authority::parse("example.com").unwrap());
    config.known_namespaces = vec![Namespace::parse("bob").unwrap()];
    let mut server = Server::new(
        config,
        crypto::default_provider(),
        ChaCha20Rng::seed_from_u64(1),
    );
    for id in ["m1", "m2", "m3"] {
        server.handle(
            T0,
            Input::Restore(Record::Spooled {
                key: "bob".to_string(),
                msg: Box::new(msg(id)),
            }),
        );
    }
    let bob = ConnId(1);
    server.handle(
        T0,
        Input::Opened {
            conn: bob,
            face: Face::Client,
            namespaces: vec![Namespace::parse("bob").unwrap()],
            source: Source::Unknown,
        },
    );
    let hello = r#"{"t":"hello","proto":"airc/0.1","role":"client"}"#;
    let hello = framing::decode_line(hello.as_bytes()).unwrap();
    frame(&mut server, bob, &hello);
    let bind = framing::decode_line(br#"{"t":"bind","names":["bob/y"]}"#).unwrap();
    let ids: Vec<String> = frame(&mut server, bob, &bind)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Msg(m) => Some(m.id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["m1", "m2", "m3"], "flushed in the order written");
}
