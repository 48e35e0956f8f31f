//! Size probe: the Minca feature alone (which brings `nostr`). Drives the relay server and the
//! relay client machines with the text on stdin, so LTO keeps the relay wire codec, both
//! machines' rules and the TURN password code.

use std::hint::black_box;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider};
use weft_proto::minca::relay_client::{self, ClientConfig, RelayClient};
use weft_proto::minca::relay_server::{self, RelayConfig, RelayServer};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic};

/// Runs every due timeout and drains the outputs, counting them.
fn drain<M: Machine>(m: &mut M, now: Timestamp) -> usize {
    let mut n = 0;
    if let Some(w) = m.poll_timeout() {
        m.handle_timeout(w.at.max(now));
    }
    while let Some(o) = m.poll() {
        black_box(o);
        n += 1;
    }
    n
}

fn main() {
    // Behind black_box as the dyn trait object machines take, so every probe keeps the same,
    // whole provider and `probe - crypto probe` is the protocol's own code.
    let crypto: &'static dyn CryptoProvider = black_box(default_provider());
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).unwrap_or(0);
    let now = Timestamp::from_millis(black_box(1_790_000_000_000));
    let seed = text.len() as u64;
    let mut outputs = 0;

    let mut server = RelayServer::new(
        RelayConfig::default(),
        crypto,
        ChaCha20Rng::seed_from_u64(seed),
    );
    let conn = ConnId(1);
    let addr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if server.admit(now, addr).is_ok() {
        server.handle(now, relay_server::Input::Opened { conn, addr });
        server.handle(
            now,
            relay_server::Input::Text {
                conn,
                text: text.clone(),
            },
        );
        server.handle(now, relay_server::Input::Control { conn });
        server.handle(now, relay_server::Input::Binary { conn });
        server.handle(now, relay_server::Input::Closed { conn });
    }
    outputs += drain(&mut server, now);

    let relays: Vec<RelayUrl> = text
        .lines()
        .filter_map(|l| RelayUrl::parse(l).ok())
        .collect();
    let mut client = RelayClient::new(
        ClientConfig {
            relays: relays.clone(),
        },
        crypto,
        ChaCha20Rng::seed_from_u64(seed),
    );
    if let (Ok(topic), Ok(blob)) = (Topic::parse(text.trim()), Blob::parse(text.trim())) {
        client.handle(
            now,
            relay_client::Input::Join {
                topic: topic.clone(),
                relays,
            },
        );
        client.handle(
            now,
            relay_client::Input::Publish {
                topic: topic.clone(),
                blob,
            },
        );
        client.handle(now, relay_client::Input::Fetch { topic });
    }
    client.handle(now, relay_client::Input::Opened { conn });
    client.handle(
        now,
        relay_client::Input::Text {
            conn,
            text: text.clone(),
        },
    );
    client.handle(now, relay_client::Input::RequestIce);
    client.handle(now, relay_client::Input::Online);
    client.handle(now, relay_client::Input::Closed { conn });
    outputs += drain(&mut client, now);
    println!("{outputs}");
}
