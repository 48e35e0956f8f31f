//! Relay peering on the inbound side (spec 002 §4, §7, §8), attacked through the relay session
//! and its harness: who becomes a peer (only a verified `AUTH` from an enabled trusted pubkey, for
//! that connection only), the limits a peer gets (filters counted raw, `maxLimit` 0, its own
//! message bucket), and the relay-wide per-peer request budget (shared across connections, 301st
//! refused with the right frames, failing closed).
#![cfg(all(feature = "nostr", feature = "rustcrypto"))]

use chacha20::ChaCha20Rng;
use negentropy::{Negentropy, NegentropyStorageVector};
use rand_core::SeedableRng;
use weft_proto::core::{BucketConfig, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::nostr::auth;
use weft_proto::nostr::event::Event;
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, RelayMessage};
use weft_proto::nostr::peering::{Admission, PeerEntry, PeerTreatment, RelayKey, TrustList};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::wire::Outbound;
use weft_proto::nostr::relay::{
    AuthPolicy, Config, EventStore, Input, MemoryStore, Output, Session,
};

const NOW: u64 = 1_790_000_000;
const URL: &str = "wss://relay.example.com/";

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

fn key(seed: u64) -> Secp256k1Secret {
    generate_secp256k1(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn pubkey(k: &Secp256k1Secret) -> [u8; 32] {
    default_provider().schnorr_public_key(k).unwrap()
}

/// A relay trusting `peers` as `(key, enabled)`, with `peer_limits` for them.
fn relay(peers: &[(&Secp256k1Secret, bool)], peer_limits: Limits) -> Harness {
    let trust = TrustList::new(
        peers
            .iter()
            .enumerate()
            .map(|(i, (k, enabled))| PeerEntry {
                pubkey: pubkey(k),
                relay_url: format!("wss://peer{i}.example.com"),
                enabled: *enabled,
            })
            .collect(),
    )
    .unwrap();
    let config = Config {
        relay_url: URL.into(),
        limits: Limits::DEFAULT,
        auth: AuthPolicy::Optional,
        provider: default_provider(),
        peering: PeerTreatment::new(&trust, peer_limits),
    };
    Harness::new(config, MemoryStore::default(), now())
}

fn connect(h: &mut Harness, seed: u64) -> usize {
    let c = h.connect(&mut ChaCha20Rng::seed_from_u64(seed));
    h.take(c);
    c
}

fn auth_event(k: &Secp256k1Secret, challenge: &str) -> Event {
    auth::build(
        default_provider(),
        k,
        &mut ChaCha20Rng::seed_from_u64(3),
        now(),
        URL,
        challenge,
    )
    .unwrap()
}

/// Authenticates `k` on `c` with that connection's challenge; `OK`'s acceptance.
fn authenticate(h: &mut Harness, c: usize, k: &Secp256k1Secret) -> bool {
    let challenge = h.conns[c].session.challenge().to_string();
    send_auth(h, c, &auth_event(k, &challenge))
}

fn send_auth(h: &mut Harness, c: usize, e: &Event) -> bool {
    h.send(c, &ClientMessage::Auth(e.clone()).to_text());
    h.take(c).iter().any(|o| {
        matches!(o.as_relay(), Some(RelayMessage::Ok { event_id, accepted: true, .. }) if *event_id == e.id)
    })
}

/// A `REQ` of `n` filters, every one the same.
fn req_with_filters(sub: &str, n: usize) -> String {
    let mut s = format!("[\"REQ\",\"{sub}\"");
    for _ in 0..n {
        s.push_str(",{\"kinds\":[1]}");
    }
    s.push(']');
    s
}

fn closed_for(out: &[Outbound], sub: &str) -> Option<String> {
    out.iter().find_map(|o| match o.as_relay() {
        Some(RelayMessage::Closed {
            subscription,
            message,
        }) if subscription == sub => Some(message.clone()),
        _ => None,
    })
}

fn eose_for(out: &[Outbound], sub: &str) -> bool {
    out.iter()
        .any(|o| matches!(o.as_relay(), Some(RelayMessage::Eose(s)) if s == sub))
}

fn neg_err_for(out: &[Outbound], sub: &str) -> Option<String> {
    out.iter().find_map(|o| match o {
        Outbound::NegErr {
            subscription,
            reason,
        } if subscription == sub => Some(reason.clone()),
        _ => None,
    })
}

fn neg_open(sub: &str) -> String {
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let first = Negentropy::owned(storage, 0).unwrap().initiate().unwrap();
    let hex: String = first.iter().map(|b| format!("{b:02x}")).collect();
    format!("[\"NEG-OPEN\",\"{sub}\",{{}},\"{hex}\"]")
}

fn fake(n: u32) -> Event {
    let mut id = [0u8; 32];
    id[..4].copy_from_slice(&n.to_be_bytes());
    Event {
        id,
        pubkey: [1; 32],
        created_at: NOW - 10_000 + u64::from(n),
        kind: 1,
        tags: vec![],
        content: String::new(),
        sig: [0; 64],
    }
}

/// Whether `c` is held to client limits: 17 filters (one past the client's 16) are refused.
fn has_client_limits(h: &mut Harness, c: usize) -> bool {
    h.send(
        c,
        &req_with_filters("probe", Limits::DEFAULT.max_filters + 1),
    );
    let out = h.take(c);
    let refused = closed_for(&out, "probe").is_some_and(|m| m.starts_with("invalid:"));
    h.send(c, r#"["CLOSE","probe"]"#);
    h.take(c);
    refused && h.conns[c].session.peer().is_none()
}

#[test]
fn an_enabled_peer_that_authenticates_gets_peer_limits() {
    let a = key(1);
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    let c = connect(&mut h, 10);
    assert!(has_client_limits(&mut h, c));
    assert!(authenticate(&mut h, c, &a));
    assert_eq!(h.conns[c].session.peer(), Some(&pubkey(&a)));
    assert_eq!(*h.conns[c].session.limits(), Limits::PEER_DEFAULT);
    h.send(c, &req_with_filters("s", Limits::DEFAULT.max_filters + 1));
    let out = h.take(c);
    assert!(eose_for(&out, "s"), "{out:?}");
}

#[test]
fn an_unconfigured_relay_with_a_valid_auth_gets_client_limits() {
    let (a, stranger) = (key(1), key(2));
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    let c = connect(&mut h, 10);
    // Its AUTH verifies: it is authenticated, as any client may be, and nothing more.
    assert!(authenticate(&mut h, c, &stranger));
    assert_eq!(
        h.conns[c].session.authenticated().collect::<Vec<_>>(),
        vec![&pubkey(&stranger)]
    );
    assert!(has_client_limits(&mut h, c));
    assert_eq!(*h.conns[c].session.limits(), Limits::DEFAULT);
}

#[test]
fn a_disabled_peer_gets_client_limits() {
    let a = key(1);
    let mut h = relay(&[(&a, false)], Limits::PEER_DEFAULT);
    let c = connect(&mut h, 10);
    assert!(authenticate(&mut h, c, &a));
    assert!(has_client_limits(&mut h, c));
}

#[test]
fn a_replayed_auth_makes_no_peer() {
    let a = key(1);
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    let c1 = connect(&mut h, 10);
    let challenge = h.conns[c1].session.challenge().to_string();
    let captured = auth_event(&a, &challenge);
    assert!(send_auth(&mut h, c1, &captured));
    assert!(h.conns[c1].session.peer().is_some());
    // An eavesdropper replays the peer's AUTH on its own connection: another challenge.
    let c2 = connect(&mut h, 11);
    assert!(!send_auth(&mut h, c2, &captured));
    assert_eq!(h.conns[c2].session.authenticated().count(), 0);
    assert!(has_client_limits(&mut h, c2));
    // An AUTH for another relay's URL, signed by the peer, is no better.
    let ch2 = h.conns[c2].session.challenge().to_string();
    let elsewhere = auth::build(
        default_provider(),
        &a,
        &mut ChaCha20Rng::seed_from_u64(4),
        now(),
        "wss://elsewhere.example.org",
        &ch2,
    )
    .unwrap();
    assert!(!send_auth(&mut h, c2, &elsewhere));
    assert!(has_client_limits(&mut h, c2));
}

#[test]
fn a_peers_limits_vanish_with_its_session() {
    let a = key(1);
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    let c1 = connect(&mut h, 10);
    assert!(authenticate(&mut h, c1, &a));
    // The same peer's next connection (a reconnect, or anyone from its address) starts a client.
    let c2 = connect(&mut h, 11);
    assert!(has_client_limits(&mut h, c2));
    // And a session made from the same configuration is a client until it authenticates.
    let s = Session::new(h.config.clone(), now(), &mut ChaCha20Rng::seed_from_u64(12));
    assert!(s.peer().is_none());
    assert_eq!(*s.limits(), Limits::DEFAULT);
}

#[test]
fn a_million_duplicate_filters_from_a_peer_are_refused_on_the_raw_count() {
    let a = key(1);
    let peer_limits = Limits {
        // Room for the frame, so the filter count is what refuses it.
        max_message_bytes: 8 << 20,
        ..Limits::PEER_DEFAULT
    };
    let mut h = relay(&[(&a, true)], peer_limits);
    h.config.limits.max_message_bytes = 8 << 20;
    let c = connect(&mut h, 10);
    assert!(authenticate(&mut h, c, &a));
    let mut frame = String::from("[\"REQ\",\"m\"");
    frame.push_str(&",{}".repeat(1_000_000));
    frame.push(']');
    h.send(c, &frame);
    let out = h.take(c);
    let why = closed_for(&out, "m").expect("CLOSED");
    assert!(why.starts_with("invalid:"), "{why}");
    assert_eq!(h.conns[c].session.subscriptions().count(), 0);
    assert_eq!(h.conns[c].queries, 0);
    // One past the peer cap, all duplicates: refused before any is parsed or deduplicated.
    h.send(
        c,
        &req_with_filters("d", Limits::PEER_DEFAULT.max_filters + 1),
    );
    assert!(closed_for(&h.take(c), "d").is_some_and(|m| m.starts_with("invalid:")));
    // At the cap: served.
    h.send(c, &req_with_filters("d", Limits::PEER_DEFAULT.max_filters));
    assert!(eose_for(&h.take(c), "d"));
}

#[test]
fn max_limit_zero_reads_the_whole_feed_paced_by_flush() {
    let a = key(1);
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    for n in 0..1_200 {
        h.store.write(&fake(n), now()).unwrap();
    }
    let client = connect(&mut h, 9);
    h.send(client, r#"["REQ","all",{"kinds":[1]}]"#);
    let got = h.take(client);
    let events = got
        .iter()
        .filter(|o| matches!(o.as_relay(), Some(RelayMessage::Event { .. })))
        .count();
    // A client without `limit` gets the default page.
    assert_eq!(events as u64, Limits::DEFAULT.default_limit);

    let c = connect(&mut h, 10);
    assert!(authenticate(&mut h, c, &a));
    h.auto_flush = false;
    h.send(c, r#"["REQ","all",{"kinds":[1]}]"#);
    // One page, then nothing until the socket reports it flushed.
    let first = h.take(c);
    assert_eq!(first.len(), Limits::PEER_DEFAULT.page_size);
    h.input(c, Input::Flushed);
    assert_eq!(h.take(c).len(), Limits::PEER_DEFAULT.page_size);
    h.auto_flush = true;
    h.flush(c);
    let rest = h.take(c);
    assert!(eose_for(&rest, "all"));
    assert_eq!(rest.len() - 1 + 2 * Limits::PEER_DEFAULT.page_size, 1_200);
    // A positive maxLimit is the peer's page and its cap.
    let mut capped = Limits::PEER_DEFAULT;
    capped.set_peer_max_limit(700);
    let mut h2 = relay(&[(&a, true)], capped);
    for n in 0..1_200 {
        h2.store.write(&fake(n), now()).unwrap();
    }
    let c = connect(&mut h2, 10);
    assert!(authenticate(&mut h2, c, &a));
    h2.send(c, r#"["REQ","p",{"kinds":[1]}]"#);
    h2.send(c, r#"["REQ","q",{"kinds":[1],"limit":100000}]"#);
    let out = h2.take(c);
    for sub in ["p", "q"] {
        let n = out
            .iter()
            .filter(|o| matches!(o.as_relay(), Some(RelayMessage::Event { subscription, .. }) if subscription == sub))
            .count();
        assert_eq!(n, 700, "{sub}");
    }
}

#[test]
fn a_peer_counts_in_its_own_message_bucket_high_but_finite() {
    let a = key(1);
    let small = Limits {
        messages: BucketConfig::new(150, 0),
        ..Limits::PEER_DEFAULT
    };
    let mut h = relay(&[(&a, true)], small);
    let c = connect(&mut h, 10);
    // The AUTH took one of the client bucket's 100; the peer's bucket starts full.
    assert!(authenticate(&mut h, c, &a));
    for i in 0..150 {
        h.send(c, &format!(r#"["CLOSE","x{i}"]"#));
    }
    assert!(
        h.take(c).is_empty(),
        "150 messages, past the client's 100, pass"
    );
    assert_eq!(h.conns[c].session.stats().rate_limited, 0);
    h.send(c, r#"["REQ","over",{"kinds":[1]}]"#);
    let why = closed_for(&h.take(c), "over").unwrap();
    assert!(why.starts_with("rate-limited:"), "{why}");
    assert_eq!(h.conns[c].session.stats().rate_limited, 1);
}

#[test]
fn the_budget_is_per_peer_across_connections_and_the_301st_is_refused() {
    let (a, b) = (key(1), key(2));
    let mut h = relay(&[(&a, true), (&b, true)], Limits::PEER_DEFAULT);
    let c1 = connect(&mut h, 10);
    let c2 = connect(&mut h, 11);
    assert!(authenticate(&mut h, c1, &a));
    assert!(authenticate(&mut h, c2, &a));
    // 150 on each connection of the same peer: REQ, COUNT and NEG-OPEN share the budget.
    for i in 0..150 {
        let c = if i % 2 == 0 { c1 } else { c2 };
        match i % 3 {
            0 => h.send(c, &format!(r#"["REQ","r{i}",{{"limit":0}}]"#)),
            1 => h.send(c, &format!(r#"["COUNT","k{i}",{{"kinds":[1]}}]"#)),
            _ => h.send(c, &neg_open(&format!("n{i}"))),
        }
        h.send(c, &format!(r#"["CLOSE","r{i}"]"#));
        h.send(c, &format!(r#"["NEG-CLOSE","n{i}"]"#));
    }
    for i in 150..300 {
        let c = if i % 2 == 0 { c1 } else { c2 };
        h.send(c, &format!(r#"["REQ","r{i}",{{"limit":0}}]"#));
        h.send(c, &format!(r#"["CLOSE","r{i}"]"#));
    }
    for c in [c1, c2] {
        let out = h.take(c);
        assert!(
            !out.iter().any(|o| o.to_text().contains("rate-limited")),
            "{:?}",
            out.iter().find(|o| o.to_text().contains("rate-limited"))
        );
    }
    // The 301st: a REQ is CLOSED with a retry hint, and so are a COUNT and a NEG-OPEN.
    h.send(c2, r#"["REQ","r300",{"kinds":[1]}]"#);
    h.send(c1, r#"["COUNT","k300",{"kinds":[1]}]"#);
    h.send(c2, &neg_open("n300"));
    let out2 = h.take(c2);
    let why = closed_for(&out2, "r300").expect("CLOSED for the REQ");
    assert_eq!(why, "rate-limited: peer request budget spent; retry in 1s");
    assert!(!eose_for(&out2, "r300"));
    let why = neg_err_for(&out2, "n300").expect("NEG-ERR for the NEG-OPEN");
    assert!(
        why.starts_with("rate-limited:") && why.contains("retry in"),
        "{why}"
    );
    let out1 = h.take(c1);
    let why = closed_for(&out1, "k300").expect("CLOSED for the COUNT");
    assert!(
        why.starts_with("rate-limited:") && why.contains("retry in"),
        "{why}"
    );
    assert!(!out1.iter().any(|o| matches!(o, Outbound::Count { .. })));
    assert_eq!(h.conns[c2].session.subscriptions().count(), 0);
    assert_eq!(h.conns[c2].session.neg_sessions().count(), 0);
    // Another peer's budget is its own.
    let c3 = connect(&mut h, 12);
    assert!(authenticate(&mut h, c3, &b));
    h.send(c3, r#"["REQ","s",{"limit":0}]"#);
    assert!(eose_for(&h.take(c3), "s"));
    // And a client's traffic never asks the budget at all.
    let c4 = connect(&mut h, 13);
    h.send(c4, r#"["REQ","s",{"limit":0}]"#);
    assert!(eose_for(&h.take(c4), "s"));
    // The budget refills at 5 a second.
    h.now = h.now.saturating_add(core::time::Duration::from_millis(200));
    h.send(c1, r#"["REQ","later",{"limit":0}]"#);
    assert!(eose_for(&h.take(c1), "later"));
    // What each connection was served is accounted to the peer.
    let (p1, s1) = h.conns[c1].session.take_served().unwrap();
    let (p2, s2) = h.conns[c2].session.take_served().unwrap();
    assert_eq!((p1, p2), (pubkey(&a), pubkey(&a)));
    assert_eq!(s1.requests + s2.requests, 301);
    assert_eq!(h.conns[c1].session.take_served(), None);
    assert_eq!(h.conns[c4].session.take_served(), None);
}

#[test]
fn a_failed_limiter_fails_closed() {
    let a = key(1);
    let mut h = relay(&[(&a, true)], Limits::PEER_DEFAULT);
    h.store.write(&fake(1), now()).unwrap();
    let c = connect(&mut h, 10);
    assert!(authenticate(&mut h, c, &a));
    h.limiter_down = true;
    h.send(c, r#"["REQ","r",{"kinds":[1]}]"#);
    h.send(c, r#"["COUNT","k",{"kinds":[1]}]"#);
    h.send(c, &neg_open("n"));
    let out = h.take(c);
    for sub in ["r", "k"] {
        let why = closed_for(&out, sub).unwrap_or_else(|| panic!("CLOSED for {sub}: {out:?}"));
        assert_eq!(
            why,
            "rate-limited: peer request budget unavailable; retry in 60s"
        );
    }
    assert!(neg_err_for(&out, "n").is_some_and(|m| m.starts_with("rate-limited:")));
    // Nothing was read or sent.
    assert_eq!(h.conns[c].queries, 0);
    assert!(!out.iter().any(|o| matches!(
        o.as_relay(),
        Some(RelayMessage::Event { .. } | RelayMessage::Eose(_))
    )));
    assert_eq!(h.conns[c].session.stats().budget_refusals, 3);
    h.limiter_down = false;
    h.send(c, r#"["REQ","r",{"kinds":[1]}]"#);
    assert!(eose_for(&h.take(c), "r"));
}

#[test]
fn a_subscription_waiting_for_its_budget_gets_nothing_and_a_stale_answer_is_dropped() {
    let a = key(1);
    let trust = TrustList::new(vec![PeerEntry {
        pubkey: pubkey(&a),
        relay_url: "wss://peer.example.com".into(),
        enabled: true,
    }])
    .unwrap();
    let config = Config {
        relay_url: URL.into(),
        limits: Limits::DEFAULT,
        auth: AuthPolicy::Optional,
        provider: default_provider(),
        peering: PeerTreatment::new(&trust, Limits::PEER_DEFAULT),
    };
    let mut s = Session::new(config, now(), &mut ChaCha20Rng::seed_from_u64(1));
    while s.poll().is_some() {}
    let e = auth_event(&a, s.challenge());
    s.handle(now(), Input::Frame(ClientMessage::Auth(e).to_text()));
    while s.poll().is_some() {}
    s.handle(now(), Input::Frame(r#"["REQ","w",{"kinds":[1]}]"#.into()));
    let Some(Output::Admit { request, peer }) = s.poll() else {
        panic!("a peer's REQ asks the budget first")
    };
    assert_eq!(peer, pubkey(&a));
    assert_eq!(s.poll(), None);
    // A live event for its filter is not sent before the budget answers.
    s.handle(now(), Input::Live(fake(5)));
    assert_eq!(s.poll(), None);
    // A store reply naming the ask is not its answer.
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: weft_proto::nostr::relay::StoreReply::Count(1),
        },
    );
    assert_eq!(s.poll(), None);
    // Closed meanwhile: the grant that comes later opens nothing.
    s.handle(now(), Input::Frame(r#"["CLOSE","w"]"#.into()));
    s.handle(
        now(),
        Input::Admitted {
            request,
            admission: Admission::Granted,
        },
    );
    assert_eq!(s.poll(), None);
    assert_eq!(s.subscriptions().count(), 0);
    assert_eq!(s.stats().stale_replies, 2);
    // An answer naming nothing asked is dropped too.
    s.handle(
        now(),
        Input::Admitted {
            request,
            admission: Admission::Granted,
        },
    );
    assert_eq!(s.poll(), None);
}

#[test]
fn the_relay_key_authenticates_as_a_peer_and_only_its_pubkey_is_on_the_wire() {
    let p = default_provider();
    let secret = "operator secret";
    let remote = RelayKey::derive(p, secret.as_bytes(), "wss://peer0.example.com").unwrap();
    let remote_secret_hex: String = {
        let h = p.hmac_sha256(secret.as_bytes(), &[b"wss://peer0.example.com".as_slice()]);
        h.iter().map(|b| format!("{b:02x}")).collect()
    };
    let trust = TrustList::new(vec![PeerEntry {
        pubkey: remote.pubkey(),
        relay_url: "wss://peer0.example.com".into(),
        enabled: true,
    }])
    .unwrap();
    let config = Config {
        relay_url: URL.into(),
        limits: Limits::DEFAULT,
        auth: AuthPolicy::Optional,
        provider: p,
        peering: PeerTreatment::new(&trust, Limits::PEER_DEFAULT),
    };
    let mut h = Harness::new(config, MemoryStore::default(), now());
    let c = connect(&mut h, 10);
    let challenge = h.conns[c].session.challenge().to_string();
    let e = remote
        .sign_auth(
            p,
            &mut ChaCha20Rng::seed_from_u64(1),
            now(),
            URL,
            &challenge,
        )
        .unwrap();
    let frame = ClientMessage::Auth(e.clone()).to_text();
    assert!(!frame.contains(&remote_secret_hex));
    assert!(send_auth(&mut h, c, &e));
    assert_eq!(h.conns[c].session.peer(), Some(&remote.pubkey()));
}
