//! Two Minca nodes meet through `weft relay` over real sockets (Minca 04 Network §2, §3, §7.3):
//! `weft node`'s runner on both ends, offer and answer through the relay, admission over a str0m
//! data channel; the meeting is `common/minca_node.rs`.

#[path = "common/relay.rs"]
mod relay;
use relay::Running;

#[path = "common/minca_node.rs"]
#[allow(dead_code)] // What only the Nostr tests read.
mod minca_node;

use weft_proto::minca::relay_url::RelayUrl;

#[test]
fn two_nodes_meet_through_the_relay_and_exchange_an_offer_and_an_answer() {
    let relay = Running::start(None);
    let url = RelayUrl::parse(&format!("ws://{}/", relay.addr)).expect("a loopback relay URL");
    let reports = minca_node::meet(&url, "space-meet-e2e");
    for report in &reports {
        // A Minca relay sends a publish to the topic's other watchers only (§1.4), so nothing
        // reaches a node that it must ignore.
        assert_eq!(report.rendezvous_ignored, 0, "no blob was ignored");
    }
    drop(relay);
}
