//! Two Minca nodes meet through a real Nostr relay that weft did not write (Minca 04 Network
//! §1.5, §2, §7.3): PyPI's `nostr-relay`, installed and started by `scripts/nostr-relay` on a
//! loopback port, named in the nodes' relay lists as `nostr+ws://127.0.0.1:PORT`.
//!
//! A second test drops a blob there and fetches it back from another node: the relay passes on
//! the ephemeral kind and keeps the regular one (§11).
//!
//! Skipped, with a `SKIP:` line saying why, only when the relay cannot be installed here (no
//! python3, or PyPI unreachable).

#[path = "common/nostr_relay.rs"]
mod nostr_relay;
use nostr_relay::NostrRelay;

#[path = "common/minca_node.rs"]
mod minca_node;
use minca_node::Node;

use std::time::{Duration, Instant};

use weft_proto::crypto::default_provider;
use weft_proto::minca::relay_client::Input;
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Ttl};
use weft_proto::minca::room::Room;

#[test]
fn two_nodes_meet_through_a_real_nostr_relay_and_exchange_an_offer_and_an_answer() {
    let relay = match NostrRelay::start("meet") {
        Ok(relay) => relay,
        Err(reason) => {
            nostr_relay::report_skip("two_nodes_meet_through_a_real_nostr_relay", &reason);
            return;
        }
    };
    let url = RelayUrl::parse(&format!("nostr+ws://{}", relay.addr)).expect("a loopback URL");
    assert_eq!(
        url.dial_url(),
        format!("ws://{}", relay.addr),
        "dialled without its kind"
    );
    let reports = minca_node::meet(&url, "space-nostr-e2e");
    for report in &reports {
        assert_eq!(
            report.rendezvous_ignored,
            report.rendezvous_own_ignored + report.rendezvous_replays_ignored,
            "only a node's own blobs, and blobs it had acted on once already, were ignored \
             ({report:?}); relay log:\n{}",
            relay.log()
        );
    }
    drop(relay);
}

#[test]
fn a_blob_dropped_on_a_real_nostr_relay_is_kept_and_another_node_fetches_it() {
    let relay = match NostrRelay::start("drop") {
        Ok(relay) => relay,
        Err(reason) => {
            nostr_relay::report_skip("a_blob_dropped_on_a_real_nostr_relay", &reason);
            return;
        }
    };
    let url = RelayUrl::parse(&format!("nostr+ws://{}", relay.addr)).expect("a loopback URL");
    let room = Room::of_space(default_provider(), "space-nostr-drop");
    let (events_tx, events) = smol::channel::unbounded();
    let mut nodes = [
        Node::new(0, &url, &room, 0x6472_6f70_0a00, events_tx.clone()),
        Node::new(1, &url, &room, 0x6472_6f70_0b00, events_tx),
    ];
    let blob = Blob::parse("ZHJvcHBlZCBvbiBhIHJlYWwgTm9zdHIgcmVsYXk").unwrap();
    let budget = Duration::from_secs(20);
    let started = Instant::now();
    smol::block_on(async {
        for node in nodes.iter_mut() {
            let topic = node.topic.clone();
            node.tell_client(Input::Join {
                topic,
                relays: vec![],
            });
        }
        minca_node::run_until(&mut nodes, &events, started, "open", |n| {
            n.iter().all(|x| x.open)
        })
        .await;
        let topic = nodes[0].topic.clone();
        nodes[0].tell_client(Input::Drop {
            topic: topic.clone(),
            blob: blob.clone(),
            ttl: Ttl::from_millis(10 * 60 * 1000).unwrap(),
        });
        // The relay stores events on its own schedule: fetch again until the blob is there.
        loop {
            nodes[1].fetched = false;
            nodes[1].fetched_blobs.clear();
            nodes[1].tell_client(Input::Fetch {
                topic: topic.clone(),
            });
            minca_node::run_until(&mut nodes, &events, started, "finish a fetch", |n| {
                n[1].fetched
            })
            .await;
            if nodes[1].fetched_blobs.contains(&blob) {
                break;
            }
            assert!(
                started.elapsed() < budget,
                "the dropped blob was never fetched back; relay log:\n{}",
                relay.log()
            );
            smol::Timer::after(Duration::from_millis(200)).await;
        }
    });
    // Copies are possible (the relay may answer a fetch with the event and again as it stores
    // it); the fetcher tells them apart by id (§1.5). Nothing else is there.
    assert!(
        nodes[1].fetched_blobs.iter().all(|b| *b == blob),
        "only the dropped blob: {:?}",
        nodes[1].fetched_blobs
    );
    for node in &nodes {
        let stats = node.client.stats();
        assert_eq!((stats.refused, stats.unrouted), (0, 0), "nothing refused");
    }
    drop(nodes);
    drop(relay);
}
