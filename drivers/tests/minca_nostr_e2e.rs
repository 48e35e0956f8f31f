//! Two Minca nodes meet through a real Nostr relay that weft did not write (Minca 04 Network
//! §1.5, §2, §7.3): PyPI's `nostr-relay`, installed and started by `scripts/nostr-relay` on a
//! loopback port, named in the nodes' relay lists as `nostr+ws://127.0.0.1:PORT`.
//!
//! Skipped, with a `SKIP:` line saying why, only when the relay cannot be installed here (no
//! python3, or PyPI unreachable).

#[path = "common/nostr_relay.rs"]
mod nostr_relay;
use nostr_relay::NostrRelay;

#[path = "common/minca_node.rs"]
mod minca_node;

use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::rendezvous::Ignored;

#[test]
fn two_nodes_meet_through_a_real_nostr_relay_and_exchange_an_offer_and_an_answer() {
    let relay = match NostrRelay::start("meet") {
        Ok(relay) => relay,
        Err(reason) => {
            println!("{reason}");
            return;
        }
    };
    let url = RelayUrl::parse(&format!("nostr+ws://{}", relay.addr)).expect("a loopback URL");
    assert_eq!(
        url.dial_url(),
        format!("ws://{}", relay.addr),
        "dialled without its kind"
    );
    let nodes = minca_node::meet(&url, "space-nostr-e2e");
    for node in &nodes {
        // A Nostr relay hands a subscriber its own events too; the rendezvous ignores those
        // (§2 rule 2) and nothing else.
        assert_eq!(
            node.rendezvous.ignored_total(),
            node.rendezvous.ignored(Ignored::OwnMessage),
            "only a node's own blobs were ignored; relay log:\n{}",
            relay.log()
        );
        let nostr = node.client.stats();
        assert_eq!(nostr.unrouted, 0);
    }
    drop(nodes);
    drop(relay);
}
