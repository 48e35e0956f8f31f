//! Relay peering against relays weft did not write (spec 002 §5, §6; issue #36), each a real
//! `weft nostr serve` process syncing from a relay one of the project's scripts starts:
//!
//! - rust-nostr's relay (nostr-relay-builder's LocalRelay: NIP-42 for reads and writes, NIP-77),
//!   seeded with events inside and outside the scope weft takes from a peer that advertises none
//!   (`scope::IMPLICIT_SCOPE_WINDOW_SECS`): weft reads its NIP-11 document, is asked for AUTH
//!   only once it asks (LocalRelay challenges on demand), reconciles with NIP-77, fetches by id,
//!   and holds exactly the in-scope events, read back by `REQ`;
//! - nostr-rs-relay (NIP-42, no NIP-77): the worker reads its NIP-11 document and reports the
//!   peer unusable, naming NIP-77, in `GET /admin/peering` and `weft nostr peering`; a TCP
//!   forwarder in front of it counts every connection weft makes, which stays at the one
//!   document fetch for as long as the test watches (the unusable backoff is an hour at least).
//!
//! A relay whose script cannot build it here prints its one `SKIP:` line and the test returns.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret};
use weft_proto::nostr::event::Event;
use weft_proto::nostr::sync::scope::IMPLICIT_SCOPE_WINDOW_SECS;

#[path = "common/cli.rs"]
mod cli;
use cli::{WEFT, free_port, temp_dir};

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::{
    CountingProxy, Started, WeftRelay, author, connect, event, ids_of_values, now_secs, req, skip,
};

const ADMIN: &str = "interop-admin-token-41d";
const CONVERGE: Duration = Duration::from_secs(20);

fn provider() -> &'static dyn CryptoProvider {
    weft_drivers::server_provider()
}

fn pubkey_hex(k: &Secp256k1Secret) -> String {
    hex::encode(&provider().schnorr_public_key(k).unwrap())
}

/// Starts `weft nostr serve` on `addr` trusting one peer, private networks allowed (loopback).
fn weft_with_peer(dir: &Path, addr: SocketAddr, peer: &str, peer_url: &str) -> WeftRelay {
    let config = dir.join("weft.yaml");
    std::fs::write(
        &config,
        format!(
            "info:\n  relay_url: ws://{addr}\n\
             peering:\n  allowPrivateNetworks: true\n  peers:\n    \
             - pubkey: {peer}\n      relayUrl: {peer_url}\n\
             admin:\n  token: {ADMIN}\n"
        ),
    )
    .unwrap();
    WeftRelay::start(
        addr,
        &dir.join("weft-data"),
        Some(&config),
        &[("SECRET", "weft's interop secret")],
        dir.join("weft.log"),
    )
}

/// Waits until `check` holds, or fails naming `what` with weft's log.
fn eventually(what: &str, weft: &WeftRelay, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < CONVERGE,
            "{what}: not within {CONVERGE:?}\n{}",
            weft.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ids(events: &[&Event]) -> BTreeSet<String> {
    events.iter().map(|e| e.id_hex()).collect()
}

#[test]
fn weft_syncs_exactly_the_in_scope_seed_of_rust_nostrs_relay_over_nip42_and_nip77() {
    const TEST: &str =
        "weft_syncs_exactly_the_in_scope_seed_of_rust_nostrs_relay_over_nip42_and_nip77";
    let dir = temp_dir("peering-rust-nostr");
    // The seed: notes, a reaction and an addressable article within the implicit 30-day window,
    // and notes older than it.
    let alice = author(31);
    let bob = author(32);
    let t = now_secs();
    let day = 86_400;
    let window = IMPLICIT_SCOPE_WINDOW_SECS;
    let in_scope: Vec<Event> = vec![
        event(&alice, 1, t - 3_600, &[], "an hour ago"),
        event(&alice, 1, t - 2 * day, &[], "two days ago"),
        event(&bob, 1, t - 29 * day, &[], "29 days ago"),
        event(&bob, 7, t - 5 * day, &[&["e", &"ab".repeat(32)]], "+"),
        event(&alice, 30023, t - 3 * day, &[&["d", "post"]], "an article"),
    ];
    let out_of_scope: Vec<Event> = vec![
        event(
            &alice,
            1,
            t - window - 3_600,
            &[],
            "a month and an hour ago",
        ),
        event(&bob, 1, t - 90 * day, &[], "three months ago"),
        event(
            &bob,
            30023,
            t - 40 * day,
            &[&["d", "old"]],
            "an old article",
        ),
    ];
    let seed = dir.join("seed.jsonl");
    let lines: Vec<String> = in_scope
        .iter()
        .chain(&out_of_scope)
        .map(Event::to_json)
        .collect();
    std::fs::write(&seed, lines.join("\n") + "\n").unwrap();
    // LocalRelay has no key of its own; its NIP-11 `self` (served by the fixture's front) is the
    // key weft is configured to trust for it, so the identity check runs on a real document.
    let peer = pubkey_hex(&author(33));
    let relay = match Started::start(
        "rust-nostr-relay",
        &[
            "--auth",
            "both",
            "--seed",
            seed.to_str().unwrap(),
            "--self",
            &peer,
        ],
    ) {
        Ok(r) => r,
        Err(line) => return skip(TEST, &line),
    };
    let addr = free_port();
    let weft = weft_with_peer(&dir, addr, &peer, &relay.url);

    let want = ids(&in_scope.iter().collect::<Vec<_>>());
    eventually("weft holds the in-scope seed", &weft, || {
        let (mut ws, _) = connect(addr);
        ids_of_values(&req(&mut ws, "all", json!({}))) == want
    });
    eventually("the reconciliation is over", &weft, || {
        weft.row(ADMIN, &peer)
            .is_some_and(|r| r["status"] == "live")
    });
    let row = weft.row(ADMIN, &peer).expect("a row for the peer");
    assert_eq!(row["missing"], in_scope.len(), "{row}");
    assert!(row["lastReconciliation"].as_u64().is_some(), "{row}");
    // Nothing older than the window, asked by id; and still exactly the seed a moment later.
    let (mut ws, _) = connect(addr);
    let old: Vec<String> = out_of_scope.iter().map(Event::id_hex).collect();
    assert!(req(&mut ws, "old", json!({"ids": old})).is_empty());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ids_of_values(&req(&mut ws, "again", json!({}))), want);
    let log = weft.log();
    assert!(log.contains("reconciled, 5 missing"), "{log}");
}

#[test]
fn nostr_rs_relay_as_a_peer_is_reported_unusable_for_lacking_nip77_and_never_polled_hot() {
    const TEST: &str =
        "nostr_rs_relay_as_a_peer_is_reported_unusable_for_lacking_nip77_and_never_polled_hot";
    let dir = temp_dir("peering-nostr-rs-relay");
    let relay = match Started::start("nostr-rs-relay", &["--auth"]) {
        Ok(r) => r,
        Err(line) => return skip(TEST, &line),
    };
    let proxy = CountingProxy::start(relay.authority());
    let peer = pubkey_hex(&author(41));
    let addr = free_port();
    let weft = weft_with_peer(&dir, addr, &peer, &format!("ws://{}", proxy.addr));

    eventually("the peer is reported unusable", &weft, || {
        weft.row(ADMIN, &peer)
            .is_some_and(|r| r["status"] == "unusable")
    });
    let row = weft.row(ADMIN, &peer).unwrap();
    let detail = row["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("NIP-77"), "{row}");
    // `weft nostr peering` prints the same row, the reason in its last column.
    let config = dir.join("weft.yaml");
    let ran: cli::Ran = Command::new(WEFT)
        .args(["nostr", "peering", "--relay", &format!("http://{addr}")])
        .arg("--config")
        .arg(&config)
        .env_remove("WEFT_ADMIN_TOKEN")
        .output()
        .unwrap()
        .into();
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let line = ran
        .stdout
        .lines()
        .find(|l| l.starts_with(&peer))
        .unwrap_or_else(|| panic!("no row: {ran:?}"));
    assert!(
        line.contains("unusable") && line.contains("NIP-77"),
        "{line}"
    );
    // Watched a while: the one NIP-11 fetch, no WebSocket, so no NEG-OPEN. The unusable backoff
    // (`worker::UNUSABLE_BACKOFF`: an hour doubling, equal jitter) allows no second try for half
    // an hour.
    std::thread::sleep(Duration::from_secs(4));
    let counts = proxy.counts();
    assert_eq!(counts.connections, 1, "{counts:?}\n{}", weft.log());
    assert_eq!(counts.upgrades, 0, "{counts:?}");
    assert_eq!(
        weft.row(ADMIN, &peer).unwrap()["status"],
        "unusable",
        "{}",
        weft.log()
    );
    let log = weft.log();
    assert_eq!(log.matches("unusable: NoNip77").count(), 1, "{log}");
}
