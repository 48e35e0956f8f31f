//! Relay peering, outbound sync, end to end (spec 002 §5, §6): real `weft nostr serve` processes
//! on loopback, each with its sync workers.
//!
//! Relays A and B trust each other (`peering.allowPrivateNetworks: true`, as a LAN or a test
//! needs). History published to A an hour ago reaches B by NIP-77 reconciliation and fetches by
//! id; an event published to A while B is live reaches B's subscribers live; an event published
//! to B reaches A; nothing out of A's advertised scope ever reaches B. B killed with `kill -9`
//! and restarted reconnects and reconciles what it missed. Relay C trusts A, but A does not
//! trust C: C gets A's client limits only, under which its live `REQ` is refused, so it holds
//! nothing of A's. A relay whose peers' URLs are loopback, private and link-local literals, with
//! private networks not allowed, reports them unusable and never connects; with them allowed,
//! the same loopback URL is fetched (the control that shows the listener would have seen it).
//! Relays D and E trust each other, and D answers NIP-77 "too large" past eight events
//! (`limits.peer.negentropy.maxItems`): E's worker splits its reconciliation by kind range and
//! then by time range (its log counts both), and each ends up with exactly its own events and
//! the other's in-scope ones.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use weft_proto::crypto::CryptoProvider;
use weft_proto::nostr::event::Event;
use weft_proto::nostr::peering::RelayKey;

#[path = "common/cli.rs"]
mod cli;
use cli::{free_port, temp_dir};

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::{WeftRelay, author, connect, event, next, now_secs, send};

/// How long the test waits for relays to converge (a worker's first NIP-11 fetch can meet a
/// peer not yet listening and back off a few seconds).
const CONVERGE: Duration = Duration::from_secs(60);
const ADMIN: &str = "sync-admin-token-9c2";

/// A `weft nostr serve` named `name` with `settings` as its `--config` and its key from
/// `secret`, its data and log in `dir`.
fn start(dir: &Path, name: &str, addr: SocketAddr, settings: &str, secret: &str) -> WeftRelay {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, settings).unwrap();
    WeftRelay::start(
        addr,
        &dir.join(format!("{name}-data")),
        Some(&config),
        &[("SECRET", secret)],
        dir.join(format!("{name}.log")),
    )
}

fn provider() -> &'static dyn CryptoProvider {
    weft_drivers::server_provider()
}

/// Waits until `check` holds, or fails naming `what` and the logs.
fn eventually(what: &str, logs: &[&WeftRelay], mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > CONVERGE {
            let logs: Vec<String> = logs.iter().map(|r| r.log()).collect();
            panic!("{what}: not within {CONVERGE:?}\n{}", logs.join("\n----\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A relay's settings: its URL, the scope it advertises, the peers it trusts.
fn settings(addr: SocketAddr, scope: &str, peers: &[(String, String)], extra: &str) -> String {
    let mut s = format!(
        "info:\n  relay_url: ws://{addr}\n  name: relay {addr}\n\
         peering:\n  enabled: true\n  allowPrivateNetworks: true\n  scopes:\n    - {scope}\n  peers:\n"
    );
    for (pubkey, url) in peers {
        s += &format!("    - pubkey: {pubkey}\n      relayUrl: {url}\n");
    }
    s += &format!("admin:\n  token: {ADMIN}\n{extra}");
    s
}

fn key(secret: &str, addr: SocketAddr) -> RelayKey {
    RelayKey::derive(provider(), secret.as_bytes(), &format!("ws://{addr}")).unwrap()
}

fn ids_of(events: &[&Event]) -> Vec<String> {
    let mut ids: Vec<String> = events.iter().map(|e| e.id_hex()).collect();
    ids.sort();
    ids
}

#[test]
fn trusted_relays_sync_in_scope_events_both_ways_and_an_untrusted_one_gets_client_limits() {
    let dir = temp_dir("nostr-peering-sync");
    let (a_addr, b_addr, c_addr) = (free_port(), free_port(), free_port());
    let (sa, sb, sc) = ("relay A's secret", "relay B's secret", "relay C's secret");
    let (ka, kb, kc) = (key(sa, a_addr), key(sb, b_addr), key(sc, c_addr));
    let url = |a: SocketAddr| format!("ws://{a}");

    // A advertises kinds 1 and 5 and the addressable kinds 30000-30001; its clients may list
    // one value per filter list, which refuses the live REQ of a relay it treats as a client.
    let a_settings = settings(
        a_addr,
        "kinds: [1, 5, [30000, 30001]]",
        &[(kb.pubkey_hex(), url(b_addr))],
        "limits:\n  client:\n    subscription:\n      maxFilterValues: 1\n",
    );
    let mut a = start(&dir, "a", a_addr, &a_settings, sa);

    // History on A, an hour old: beyond the live REQ's overlap, so only reconciliation finds it.
    let alice = author(1);
    let hour_ago = now_secs() - 3_600;
    let notes: Vec<Event> = (0..5)
        .map(|i| event(&alice, 1, hour_ago + i, &[], &format!("note {i}")))
        .collect();
    let list_old = event(&alice, 30000, hour_ago, &[&["d", "list"]], "old list");
    let reactions: Vec<Event> = (0..3)
        .map(|i| event(&alice, 7, hour_ago + i, &[], "+"))
        .collect();
    for e in notes.iter().chain([&list_old]).chain(&reactions) {
        a.publish(e);
    }

    // B trusts A and advertises kind 1 only.
    let b_settings = settings(b_addr, "kinds: [1]", &[(ka.pubkey_hex(), url(a_addr))], "");
    let mut b = start(&dir, "b", b_addr, &b_settings, sb);
    // C trusts A; A does not trust C.
    let c_settings = settings(c_addr, "kinds: [1]", &[(ka.pubkey_hex(), url(a_addr))], "");
    let c = start(&dir, "c", c_addr, &c_settings, sc);

    let in_scope: Vec<&Event> = notes.iter().collect();
    eventually("B holds A's in-scope history", &[&a, &b], || {
        b.ids(1) == ids_of(&in_scope) && b.ids(30000) == ids_of(&[&list_old])
    });
    // Nothing out of scope.
    assert!(b.ids(7).is_empty());
    let row = b.row(ADMIN, &ka.pubkey_hex()).expect("B's row for A");
    assert_eq!(row["status"], "live", "{row}");
    assert!(row["lastReconciliation"].as_u64().is_some(), "{row}");
    assert_eq!(row["missing"], 6, "{row}");

    // Live: a subscriber on B sees an event published to A, as a local publish.
    let (mut sub, _) = connect(b.addr);
    send(
        &mut sub,
        &json!(["REQ", "live", {"kinds": [1], "since": now_secs() - 5}]),
    );
    assert_eq!(next(&mut sub)[0], "EOSE");
    let live = event(&alice, 1, now_secs(), &[], "live on A");
    a.publish(&live);
    let got = next(&mut sub);
    assert_eq!(got[0], "EVENT", "{got}");
    assert_eq!(got[2]["id"], live.id_hex(), "{got}");
    // Out of scope, live: never reaches B.
    a.publish(&event(&alice, 7, now_secs(), &[], "+ live"));
    // The local kind rules apply to what B takes: a newer version of the addressable event
    // replaces the older under its `d` tag, and a kind-5 deletion hides its target.
    let list_new = event(&alice, 30000, now_secs(), &[&["d", "list"]], "new list");
    a.publish(&list_new);
    let deleted = &notes[0];
    let deletion = event(&alice, 5, now_secs(), &[&["e", &deleted.id_hex()]], "");
    a.publish(&deletion);
    eventually(
        "B applies the replacement and the deletion",
        &[&a, &b],
        || b.ids(30000) == ids_of(&[&list_new]) && b.ids(5) == ids_of(&[&deletion]),
    );
    assert!(!b.ids(1).contains(&deleted.id_hex()));
    let in_scope: Vec<&Event> = notes[1..].iter().collect();

    // The other way: B's kind 1 reaches A.
    let bob = author(2);
    let from_b = event(&bob, 1, now_secs(), &[], "published on B");
    b.publish(&from_b);
    eventually("A holds B's event", &[&a, &b], || {
        a.ids(1).contains(&from_b.id_hex())
    });

    // What A served B, counted under B's pubkey; A's own worker is live on B.
    let row = a.row(ADMIN, &kb.pubkey_hex()).expect("A's row for B");
    assert!(row["requestsServed"].as_u64().unwrap() >= 2, "{row}");
    assert!(row["eventsServed"].as_u64().unwrap() >= 6, "{row}");
    assert_eq!(row["status"], "live", "{row}");
    // C is nobody to A: no row, and its live REQ met the client cap.
    assert!(a.row(ADMIN, &kc.pubkey_hex()).is_none());
    eventually(
        "C's worker is refused by A's client limits",
        &[&a, &c],
        || {
            c.row(ADMIN, &ka.pubkey_hex())
                .and_then(|r| r["detail"].as_str().map(str::to_string))
                .is_some_and(|d| d.contains("live subscription closed") && d.contains("invalid"))
        },
    );
    assert!(c.ids(1).is_empty(), "C was served A's events");
    assert!(c.ids(30000).is_empty());
    assert!(c.ids(5).is_empty());

    // B killed mid-life; A goes on; B restarted reconnects and reconciles the gap.
    b.kill();
    let while_down: Vec<Event> = (0..4)
        .map(|i| event(&alice, 1, now_secs() - 30 + i, &[], "while B was down"))
        .collect();
    for e in &while_down {
        a.publish(e);
    }
    let b2 = start(&dir, "b", b_addr, &b_settings, sb);
    let mut want: Vec<&Event> = in_scope.clone();
    want.extend([&live, &from_b]);
    want.extend(while_down.iter());
    eventually(
        "B restarted converges to A's in-scope events",
        &[&a, &b2],
        || b2.ids(1) == ids_of(&want),
    );
    assert!(b2.ids(7).is_empty());
    assert_eq!(b2.ids(30000), ids_of(&[&list_new]));
    // A, whose worker lost B, reconnected too: its row is live again.
    eventually("A's worker is live on B again", &[&a, &b2], || {
        a.row(ADMIN, &kb.pubkey_hex())
            .is_some_and(|r| r["status"] == "live")
    });

    // No relay's key or secret in any log.
    for r in [&a, &b2, &c] {
        let log = r.log();
        for s in [sa, sb, sc] {
            assert!(!log.contains(s));
        }
    }
    a.kill();
}

/// Accepts whatever connects to `listener` within `wait`; how many did.
fn connections(listener: &TcpListener, wait: Duration) -> usize {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < wait {
        match listener.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    }
    n
}

#[test]
fn peers_at_refused_addresses_are_never_contacted_unless_private_networks_are_allowed() {
    let dir = temp_dir("nostr-peering-refused");
    let trap = TcpListener::bind("127.0.0.1:0").unwrap();
    let trap_url = format!("ws://{}", trap.local_addr().unwrap());
    let peer = |seed: u64| {
        weft_proto::codec::hex::encode(&provider().schnorr_public_key(&author(seed)).unwrap())
    };
    let (loopback, private, link_local) = (peer(10), peer(11), peer(12));
    let text = |addr: SocketAddr, allow: bool| {
        format!(
            "info:\n  relay_url: ws://{addr}\n\
             peering:\n  allowPrivateNetworks: {allow}\n  peers:\n    \
             - pubkey: {loopback}\n      relayUrl: {trap_url}\n    \
             - pubkey: {private}\n      relayUrl: ws://10.20.30.40:7000\n    \
             - pubkey: {link_local}\n      relayUrl: ws://[fe80::1]:7000\n\
             admin:\n  token: {ADMIN}\n"
        )
    };
    let addr = free_port();
    let d = start(&dir, "d", addr, &text(addr, false), "relay D's secret");
    assert_eq!(
        connections(&trap, Duration::from_secs(3)),
        0,
        "D dialled a loopback peer"
    );
    for (pubkey, class) in [
        (&loopback, "loopback"),
        (&private, "private"),
        (&link_local, "link-local"),
    ] {
        let row = d.row(ADMIN, pubkey).expect("a row per peer");
        assert_eq!(row["status"], "unusable", "{row}");
        let detail = row["detail"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(detail.contains(class), "{class}: {row}");
    }
    drop(d);

    // The same loopback peer with private networks allowed: its NIP-11 is asked for.
    let addr = free_port();
    let e = start(&dir, "e", addr, &text(addr, true), "relay E's secret");
    assert!(
        connections(&trap, Duration::from_secs(10)) > 0,
        "E never asked the allowed peer: {}",
        e.log()
    );
}

/// The number before `what` on the last "reconciled" line of `log` (the runner's counters).
fn reconciled_count(log: &str, what: &str) -> u64 {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("reconciled,"))
        .unwrap_or_else(|| panic!("no reconciliation logged:\n{log}"));
    let before = line
        .split(what)
        .next()
        .filter(|b| b.len() < line.len())
        .unwrap_or_else(|| panic!("no {what:?} in {line}"));
    before
        .rsplit(|c: char| !c.is_ascii_digit())
        .find(|w| !w.is_empty())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before {what:?} in {line}"))
}

#[test]
fn a_peer_answering_too_large_makes_the_other_split_and_both_converge() {
    let dir = temp_dir("nostr-peering-too-large");
    let (d_addr, e_addr) = (free_port(), free_port());
    let (sd, se) = ("relay D's secret", "relay E's secret");
    let (kd, ke) = (key(sd, d_addr), key(se, e_addr));
    let url = |a: SocketAddr| format!("ws://{a}");
    // Both advertise kinds 1 to 7 as one range; D reconciles at most eight events a session
    // with a peer.
    let scope = "kinds: [[1, 7]]";
    let d_settings = settings(
        d_addr,
        scope,
        &[(ke.pubkey_hex(), url(e_addr))],
        "limits:\n  peer:\n    negentropy:\n      maxItems: 8\n",
    );
    let e_settings = settings(e_addr, scope, &[(kd.pubkey_hex(), url(d_addr))], "");
    // On D, history two hours old: 30 notes and 6 reactions. On E, 10 notes of the last minute
    // (written after D's worker may have reconciled with E, so they reach D live). Kind 9,
    // outside the scope, on both.
    let (alice, bob) = (author(21), author(22));
    let base = now_secs() - 7_200;
    let d_notes: Vec<Event> = (0..30)
        .map(|i| event(&alice, 1, base + i * 60, &[], &format!("D note {i}")))
        .collect();
    let d_reactions: Vec<Event> = (0..6)
        .map(|i| event(&alice, 7, base + i * 60, &[], "+"))
        .collect();
    let e_notes: Vec<Event> = (0..10)
        .map(|i| event(&bob, 1, now_secs() - 20 - i, &[], &format!("E note {i}")))
        .collect();
    let d_chat = event(&alice, 9, base, &[], "D's chat, out of scope");
    let e_chat = event(&bob, 9, base, &[], "E's chat, out of scope");
    // D runs alone first, so its history is in place before E's worker asks.
    let mut d = start(&dir, "d", d_addr, &d_settings, sd);
    for e in d_notes.iter().chain(&d_reactions).chain([&d_chat]) {
        d.publish(e);
    }
    let mut e = start(&dir, "e", e_addr, &e_settings, se);
    for ev in e_notes.iter().chain([&e_chat]) {
        e.publish(ev);
    }
    let notes: Vec<&Event> = d_notes.iter().chain(&e_notes).collect();
    eventually(
        "D and E hold each other's in-scope events",
        &[&d, &e],
        || {
            d.ids(1) == ids_of(&notes)
                && e.ids(1) == ids_of(&notes)
                && e.ids(7) == ids_of(&d_reactions.iter().collect::<Vec<_>>())
        },
    );
    eventually("E's reconciliation with D is over", &[&d, &e], || {
        e.row(ADMIN, &kd.pubkey_hex())
            .is_some_and(|r| r["status"] == "live" && r["missing"] == 36)
    });
    // Nothing out of scope either way.
    assert_eq!(d.ids(9), ids_of(&[&d_chat]));
    assert_eq!(e.ids(9), ids_of(&[&e_chat]));
    // E's worker met D's "too large" and split: by kind range, then by time range, never stuck.
    let log = e.log();
    assert!(reconciled_count(&log, " kind splits") >= 2, "{log}");
    assert!(reconciled_count(&log, " time splits") >= 2, "{log}");
    assert_eq!(reconciled_count(&log, " unsplittable"), 0, "{log}");
    // E answers within its default bound: D's worker, syncing from E, never split.
    let dlog = d.log();
    assert_eq!(reconciled_count(&dlog, " kind splits"), 0, "{dlog}");
    assert_eq!(reconciled_count(&dlog, " time splits"), 0, "{dlog}");
    e.kill();
    d.kill();
}
