//! Size probe: the AIRC server machine (feature `airc` alone). The bytes on stdin go to a client
//! and a peer connection, and every output and timeout is driven, so LTO keeps the frame codec,
//! routing, spool, signing, policy and link code.

use std::hint::black_box;
use std::io::Read;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::airc::address::Authority;
use weft_proto::airc::server::{Face, Input, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider};

fn main() {
    // Behind black_box as the dyn trait object machines take, so every probe keeps the same,
    // whole provider and `probe - crypto probe` is the protocol's own code.
    let crypto: &'static dyn CryptoProvider = black_box(default_provider());
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).unwrap_or(0);
    let realm = Authority::parse(black_box("example.com")).expect("a valid realm");
    let mut server = Server::new(
        ServerConfig::new(realm.clone()),
        crypto,
        ChaCha20Rng::seed_from_u64(input.len() as u64),
    );
    let now = Timestamp::from_millis(black_box(1_790_000_000_000));
    let mut outputs = 0usize;
    for (conn, face) in [(ConnId(1), Face::Client), (ConnId(2), Face::Peer)] {
        server.handle(
            now,
            Input::Opened {
                conn,
                face,
                namespaces: Vec::new(),
                source: Source::Unknown,
            },
        );
        server.handle(
            now,
            Input::Received {
                conn,
                bytes: input.clone(),
            },
        );
    }
    server.handle(
        now,
        Input::Keys {
            realm: realm.clone(),
            keys: vec![[7; 32]],
        },
    );
    server.handle(
        now,
        Input::Dialled {
            conn: ConnId(3),
            authority: realm.clone(),
        },
    );
    server.handle(now, Input::DialFailed { authority: realm });
    server.handle(now, Input::Closed { conn: ConnId(1) });
    while let Some(o) = server.poll() {
        black_box(o);
        outputs += 1;
    }
    if let Some(w) = server.poll_timeout() {
        server.handle_timeout(w.at);
    }
    while let Some(o) = server.poll() {
        black_box(o);
        outputs += 1;
    }
    println!("{outputs}");
}
