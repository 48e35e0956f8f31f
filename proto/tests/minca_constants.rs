//! Each number the spec states, written as the spec writes it, against the constant the code
//! uses; the boundary tests elsewhere use the constants, so together they pin both. A constant
//! changed alone moves those boundaries with it and they still pass; only a number written out
//! apart from the code notices.
//!
//! The numbers here are those whose tests reach them only through the constant. The two of the
//! WebRTC transport (§5.1) belong to weft-drivers and are pinned in its `transport.rs` tests.
#![cfg(feature = "minca")]

use std::time::Duration;

use serde_json::Value;
use weft_proto::core::Timestamp;
use weft_proto::minca::mesh::introduction::{
    MAX_DID_CHARS, MAX_ORIGINS, MAX_SDP_CHARS, MAX_TIMES_PER_ORIGIN,
};
use weft_proto::minca::mesh::live::{self, LiveAllowance, LiveDrop, MAX_LIVE_CHARS};
use weft_proto::minca::mesh::machine::{HANDSHAKE_TIMEOUT, MAX_HALF_OPEN_INTRODUCED};
use weft_proto::minca::node_socket;
use weft_proto::minca::note::MAX_NOTE_CHARS;
use weft_proto::minca::read_proof::WHO_GRACE;
use weft_proto::minca::relay_client::SLEEP_GAP_MS;
use weft_proto::minca::relay_wire::HEARTBEAT_MS;
use weft_proto::minca::rendezvous::MAX_ACTED_PER_PEER;
use weft_proto::minca::room::MAX_ROOM_PEERS;

/// M-9.2-e, M-9.2-h: a live payload's `JSON.stringify` is at most 65 536 characters; the tests of
/// the limit build their payloads from the constant, so a wrong constant moves them with it.
#[test]
fn a_live_payload_may_stringify_to_at_most_65_536_characters() {
    // §9.2: "payload is any JSON value whose JSON.stringify is at most 65 536 characters".
    assert_eq!(MAX_LIVE_CHARS, 65_536);
}

/// M-9.2-e, M-9.2-h: the same boundary with no constant in it at all, so it holds even if the
/// constant and the rule moved together. `JSON.stringify` of a string adds its two quotes.
#[test]
fn a_string_payload_of_65_534_characters_is_taken_and_one_of_65_535_is_dropped() {
    let at_limit = Value::String("x".repeat(65_534));
    let over = Value::String("x".repeat(65_535));
    // ASCII only, so bytes and UTF-16 code units count alike.
    assert_eq!(serde_json::to_string(&at_limit).unwrap().len(), 65_536);
    assert_eq!(serde_json::to_string(&over).unwrap().len(), 65_537);
    let now = Timestamp::from_millis(0);
    let mut allowance = LiveAllowance::new(now);
    assert_eq!(allowance.take(now, &at_limit), Ok(()));
    assert_eq!(allowance.take(now, &over), Err(LiveDrop::TooLong));
    // A sender holds itself to the same limit.
    assert!(live::fits(&at_limit));
    assert!(!live::fits(&over));
}

/// M-7.2-f: the mesh handshake's timeout; the test of it runs to the constant and one past it.
#[test]
fn a_mesh_handshake_not_finished_within_10_s_is_abandoned() {
    // §7.2: "A handshake not finished within 10 s is abandoned."
    assert_eq!(HANDSHAKE_TIMEOUT, Duration::from_secs(10));
}

/// M-6.3-t, M-9.1-b: how long a peer let in on an old key has to send its `who` before it counts
/// as having no account; the tests of it wait out the constant.
#[test]
fn a_peer_whose_who_has_not_come_is_given_10_s_from_its_handshake() {
    // §6.3: "A peer whose who has not arrived is given 10 s from its handshake to send one".
    assert_eq!(WHO_GRACE, Duration::from_secs(10));
}

/// M-8-l: the longest `sdp` a `__signal` may carry; the tests of it build their descriptions from
/// the constant.
#[test]
fn a_signals_sdp_is_at_most_32_000_characters() {
    // §8: "sdp is a string of at most 32,000 characters".
    assert_eq!(MAX_SDP_CHARS, 32_000);
}

/// M-8-d: the longest DID a peer list or a signal may name; the tests of it build their DIDs from
/// the constant.
#[test]
fn a_did_in_a_peer_list_is_at_most_256_characters() {
    // §8: "skips anything that is not a DID (string ≤ 256 matching …)".
    assert_eq!(MAX_DID_CHARS, 256);
}

/// M-2.1-b: a gap in the clock longer than two relay heartbeats is a sleep; the tests of it step
/// the clock by the constant. The heartbeat itself was in the §1.4 limits table, lost from the
/// copy: 30 s is weft's value (docs/decisions.md), written out so the sum is the spec's "two".
#[test]
fn a_sleep_is_a_gap_longer_than_two_heartbeats_of_30_s() {
    // docs/decisions.md, Minca §1.4, §2.1: `HEARTBEAT_MS` = 30 000.
    assert_eq!(HEARTBEAT_MS, 30_000);
    // §2.1: "wakes from a sleep longer than a relay keeps a silent socket (two heartbeats, §1.4)".
    assert_eq!(SLEEP_GAP_MS, 2 * 30_000);
}

/// M-6.4-d: the longest note a `who` may show and still give an account; the tests of it build
/// their notes from the constant.
#[test]
fn a_note_longer_than_16_384_characters_gives_no_account() {
    // §6.4: "A proof whose canonical JSON is longer than 16 384 characters […] gives the peer no
    // account".
    assert_eq!(MAX_NOTE_CHARS, 16_384);
}

/// M-2-m: how many times a rendezvous receiver remembers acting on for one peer in a room; the
/// test of it sends the constant's worth and one more.
#[test]
fn a_rendezvous_receiver_may_stop_hearing_a_peer_past_256_messages() {
    // §2 rule 3: "MAY stop hearing a peer that sent more than 256 in them".
    assert_eq!(MAX_ACTED_PER_PEER, 256);
}

/// M-8-n: how many times an introduction receiver remembers per origin, and how many origins; the
/// tests of them fill the tables to the constants.
#[test]
fn an_introduction_receiver_may_stop_hearing_an_origin_past_256_signals_or_a_new_one_past_1_024() {
    // §8: "MAY stop hearing an origin that sent more than 256 in them, or a new origin while it
    // holds 1,024".
    assert_eq!(MAX_TIMES_PER_ORIGIN, 256);
    assert_eq!(MAX_ORIGINS, 1_024);
}

/// M-2-t: the most peers a room holds; the tests of it flood rooms past the constant.
#[test]
fn a_room_holds_at_most_64_peers() {
    // §2: "A room holds at most 64 peers".
    assert_eq!(MAX_ROOM_PEERS, 64);
}

/// M-5.3-g: the largest `/peer` frame a node reads; the tests of it send frames of the constant's
/// size and one byte more.
#[test]
fn a_node_closes_a_peer_socket_on_a_frame_over_16_mib() {
    // §5.3: "the reference node closes the socket (1009) on a frame over 16 MiB".
    assert_eq!(node_socket::MAX_FRAME_BYTES, 16 * 1024 * 1024);
}

/// M-7.4-a: the cap on half-open connections from introductions. §7.4 plans it without a value;
/// 64 is weft's (docs/decisions.md), and the test of the cap counts to the constant.
#[test]
fn at_most_64_connections_from_introductions_are_half_open_at_once() {
    // docs/decisions.md, Minca §7.4: `MAX_HALF_OPEN_INTRODUCED` = `MAX_ROOM_PEERS` = 64.
    assert_eq!(MAX_HALF_OPEN_INTRODUCED, 64);
}
