//! The outbound peering-sync worker (`weft_proto::nostr::sync::worker`, spec 002 §5 and §6)
//! against the real relay session machine (`nostr::relay::harness`) through `nostr::sync::pair`,
//! and driven by hand where a test must play a peer that misbehaves.
#![cfg(all(feature = "nostr", feature = "rustcrypto"))]

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::core::{BucketConfig, ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::kinds::VANISH_KIND;
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, Filter, RelayMessage};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::{AuthPolicy, EventStore, MemoryStore, StoreOp, StoreReply};
use weft_proto::nostr::sync::pair::Pair;
use weft_proto::nostr::sync::worker::{
    self, Config, EPHEMERAL_SEEN_WINDOW, InfoError, Input, LIVE_OVERLAP, Output,
    RECONCILE_INTERVAL, State, SyncLimits, Unusable, Worker,
};

const NOW: u64 = 1_790_000_000;
const PEER_URL: &str = "wss://peer.example.com/";
const OWN_URL: &str = "wss://own.example.com/";

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

fn key(seed: u64) -> Secp256k1Secret {
    generate_secp256k1(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn pubkey(k: &Secp256k1Secret) -> [u8; 32] {
    default_provider().schnorr_public_key(k).unwrap()
}

fn ev(k: &Secp256k1Secret, kind: u16, created_at: u64, content: &str) -> Event {
    ev_tags(k, kind, created_at, content, Vec::new())
}

fn ev_tags(
    k: &Secp256k1Secret,
    kind: u16,
    created_at: u64,
    content: &str,
    tags: Vec<Vec<String>>,
) -> Event {
    UnsignedEvent {
        created_at,
        kind,
        tags,
        content: content.into(),
    }
    .sign(
        default_provider(),
        k,
        &mut ChaCha20Rng::seed_from_u64(created_at ^ u64::from(kind)),
    )
    .unwrap()
}

fn peer_key() -> Secp256k1Secret {
    key(1)
}

fn info(scopes: Value) -> String {
    json!({
        "name": "peer",
        "self": hex::encode(&pubkey(&peer_key())),
        "supported_nips": [1, 11, 42, 77],
        "peering": {"scopes": scopes},
    })
    .to_string()
}

/// Relay limits for a peer that serves a peer generously (its `limits.peer`).
fn peer_limits() -> Limits {
    Limits {
        messages: BucketConfig::new(1_000_000, 1_000_000),
        ..Limits::DEFAULT
    }
}

fn peer_relay(url: &str, limits: Limits) -> Harness {
    Harness::new(
        weft_proto::nostr::relay::Config {
            relay_url: url.into(),
            limits,
            auth: AuthPolicy::Optional,
            peering: Default::default(),
            provider: default_provider(),
        },
        MemoryStore::default(),
        now(),
    )
}

fn config(limits: SyncLimits) -> Config {
    Config {
        peer_pubkey: pubkey(&peer_key()),
        relay_url: PEER_URL.into(),
        own_url: OWN_URL.into(),
        secret: key(2),
        provider: default_provider(),
        allow_private_networks: false,
        limits,
    }
}

fn pair_with(scopes: Value, peer: Harness, limits: SyncLimits) -> Pair<ChaCha20Rng> {
    let w = Worker::new(config(limits), now(), ChaCha20Rng::seed_from_u64(7));
    Pair::new(
        peer,
        MemoryStore::default(),
        w,
        now(),
        Ok(info(scopes)),
        ChaCha20Rng::seed_from_u64(8),
    )
}

fn pair(scopes: Value) -> Pair<ChaCha20Rng> {
    pair_with(
        scopes,
        peer_relay(PEER_URL, peer_limits()),
        SyncLimits::DEFAULT,
    )
}

fn secs(s: u64) -> Timestamp {
    Timestamp::from_secs(NOW + s)
}

fn local_ids(p: &mut Pair<ChaCha20Rng>) -> Vec<[u8; 32]> {
    let mut ids: Vec<_> = p
        .local
        .items(&Filter::default(), usize::MAX, p.now)
        .unwrap()
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    ids.sort();
    ids
}

fn sorted(events: &[Event]) -> Vec<[u8; 32]> {
    let mut ids: Vec<_> = events.iter().map(|e| e.id).collect();
    ids.sort();
    ids
}

/// History: events well before the live REQ's overlap.
fn history(author: u64, kind: u16, n: u64, from_age: u64) -> Vec<Event> {
    let k = key(author);
    (0..n)
        .map(|i| {
            ev(
                &k,
                kind,
                NOW - from_age - i * 10,
                &format!("{author}/{kind}/{i}"),
            )
        })
        .collect()
}

#[test]
fn an_empty_relay_converges_to_the_peers_in_scope_events_without_a_full_dump() {
    let wanted = history(10, 1, 60, 3_600);
    let other = history(11, 7, 20, 3_600);
    let mut p = pair(json!([{"kinds": [1]}]));
    for e in wanted.iter().chain(&other) {
        p.insert_on_peer(e);
    }
    // Half of the wanted events are already here.
    for e in &wanted[..30] {
        p.local.write(e, now()).unwrap();
    }
    p.keep_sent = true;
    p.run_until(secs(60), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), sorted(&wanted));
    let stats = p.worker.stats();
    // Only the 30 missing ones crossed the wire: no full dump, nothing out of scope.
    assert_eq!(stats.fetched, 30);
    assert_eq!(stats.event_frames, 30);
    assert_eq!(stats.out_of_scope, 0);
    assert_eq!(stats.reconciliations, 1);
    // Backfill is not broadcast.
    assert!(p.broadcasts.is_empty());
    let status = p.worker.status().clone();
    assert_eq!(status.state, State::Live);
    assert_eq!(status.missing, 30);
    assert_eq!(status.events_fetched, 30);
    assert!(status.last_reconciliation.is_some());
    // The newest event fetched is the 31st newest: 3 600 + 30 × 10 s old, a minute ago.
    assert_eq!(status.lag_secs, Some(60 + 3_600 + 300));
    // The live REQ went out before any NEG-OPEN, from the overlap.
    let req = p
        .sent
        .iter()
        .position(|f| f.starts_with(r#"["REQ","peer-live""#));
    let neg = p.sent.iter().position(|f| f.starts_with(r#"["NEG-OPEN""#));
    assert!(req.unwrap() < neg.unwrap(), "{:?}", p.sent);
    let since = now().saturating_sub(LIVE_OVERLAP).as_secs();
    assert!(p.sent[req.unwrap()].contains(&format!(r#""since":{since}"#)));

    // From empty: all 60, exactly once each.
    let mut p = pair(json!([{"kinds": [1]}]));
    for e in wanted.iter().chain(&other) {
        p.insert_on_peer(e);
    }
    p.run_until(secs(60), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), sorted(&wanted));
    assert_eq!(p.worker.stats().event_frames, 60);
}

#[test]
fn nothing_out_of_scope_is_stored_and_a_rolling_window_is_enforced() {
    let k = key(20);
    // A range too wide to list: the live REQ leaves kinds out, the worker checks each event.
    let mut p = pair(json!([{"kinds": [[1, 999]], "windowSeconds": 3_600}]));
    let inside = ev(&k, 1, NOW - 100, "in");
    let too_old = ev(&k, 1, NOW - 7_200, "old");
    p.insert_on_peer(&inside);
    p.insert_on_peer(&too_old);
    p.run_until(secs(10), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), vec![inside.id]);
    // Live: kind 1000 is outside the scope, kind 5 inside.
    let outside = ev(&k, 1_000, NOW + 10, "out");
    let live = ev(&k, 5, NOW + 10, "live");
    p.publish_on_peer(&outside);
    p.publish_on_peer(&live);
    assert_eq!(p.worker.stats().out_of_scope, 1);
    assert!(!p.local.contains(&outside.id));
    assert!(p.local.contains(&live.id));
    // Live events the store took are broadcast to local subscribers.
    assert_eq!(sorted(&p.broadcasts), vec![live.id]);
    // A peer that sends an event older than the window on the live subscription: refused.
    let conn = p.worker.connection().unwrap();
    let stale = ev(&k, 1, NOW + 10 - 3_601, "stale");
    let before = p.worker.stats().out_of_scope;
    p.worker.handle(
        secs(10),
        Input::Frame {
            conn,
            text: RelayMessage::Event {
                subscription: "peer-live".into(),
                event: stale.clone(),
            }
            .to_text(),
        },
    );
    p.run();
    assert_eq!(p.worker.stats().out_of_scope, before + 1);
    assert!(!p.local.contains(&stale.id));
    // Two hours on, the window has moved: the next round reconciles only the last hour.
    p.run_until(secs(2 * 3_600), 100_000).unwrap();
    assert!(!p.local.contains(&too_old.id));
}

#[test]
fn ephemeral_events_are_broadcast_live_and_never_stored() {
    let k = key(30);
    let mut p = pair(json!([{}]));
    p.run_until(secs(5), 10_000).unwrap();
    let eph = ev(&k, 20_001, NOW + 5, "ephemeral");
    p.publish_on_peer(&eph);
    assert_eq!(sorted(&p.broadcasts), vec![eph.id]);
    assert!(!p.local.contains(&eph.id));
    assert_eq!(p.worker.stats().ephemeral, 1);
    assert!(local_ids(&mut p).is_empty());
}

/// Peered both ways, each relay's broadcast of an ephemeral event reaches the other's live feed
/// again, and nothing is stored to mark it seen: the worker broadcasts each ephemeral id once,
/// and never one older than its window, so the event cannot circle between the two forever.
#[test]
fn an_ephemeral_event_coming_round_again_is_not_broadcast_again() {
    let k = key(31);
    let mut p = pair(json!([{}]));
    p.run_until(secs(5), 10_000).unwrap();
    let eph = ev(&k, 20_001, NOW + 5, "ephemeral");
    p.publish_on_peer(&eph);
    // The peer relay cannot tell it saw it before (ephemeral events are not stored): it is
    // live again, as the other relay's broadcast would make it.
    p.publish_on_peer(&eph);
    p.publish_on_peer(&eph);
    assert_eq!(sorted(&p.broadcasts), vec![eph.id]);
    assert_eq!(p.worker.stats().ephemeral, 3);
    assert_eq!(p.worker.stats().ephemeral_not_rebroadcast, 2);
    // Past the window it is forgotten, and by then too old to be broadcast at all.
    let later = secs(5 + EPHEMERAL_SEEN_WINDOW.as_secs() + 60);
    p.run_until(later, 100_000).unwrap();
    p.publish_on_peer(&eph);
    assert_eq!(sorted(&p.broadcasts), vec![eph.id]);
    assert_eq!(p.worker.stats().ephemeral_not_rebroadcast, 3);
    // A fresh one still goes out.
    let fresh = ev(&k, 20_001, later.as_secs(), "ephemeral, later");
    p.publish_on_peer(&fresh);
    assert_eq!(p.broadcasts.len(), 2);
}

#[test]
fn a_peer_answering_too_large_forces_kind_then_time_splitting() {
    let limits = Limits {
        max_neg_items: 8,
        ..peer_limits()
    };
    let mut p = pair_with(
        json!([{"kinds": [[1000, 1003]]}]),
        peer_relay(PEER_URL, limits),
        SyncLimits::DEFAULT,
    );
    let mut all = Vec::new();
    for kind in 1000..=1003 {
        all.extend(history(u64::from(kind), kind, 10, 3_600));
    }
    for e in &all {
        p.insert_on_peer(e);
    }
    p.run_until(secs(60), 10_000).unwrap();
    let s = p.worker.stats();
    assert_eq!(local_ids(&mut p).len(), all.len(), "{s:?}");
    assert_eq!(local_ids(&mut p), sorted(&all));
    // [1000,1003] → two ranges → four single kinds, each of 10 → split by time.
    assert!(s.kind_splits >= 3, "{s:?}");
    assert!(s.time_splits >= 4, "{s:?}");
    assert_eq!(s.unsplittable, 0);
    assert_eq!(s.connections, 1);
}

#[test]
fn a_wrong_self_or_no_nip77_makes_the_peer_unusable_without_a_hot_loop() {
    let wrong_self = json!({
        "self": hex::encode(&pubkey(&key(99))),
        "supported_nips": [1, 42, 77],
        "peering": {"scopes": [{}]},
    });
    let no_77 = json!({
        "self": hex::encode(&pubkey(&peer_key())),
        "supported_nips": [1, 11, 42],
        "peering": {"scopes": [{}]},
    });
    // Scopes listed, none usable (a document without the key is synced over the implicit scope).
    let no_scopes = json!({"supported_nips": [77], "peering": {"scopes": [{"kinds": []}]}});
    for (doc, why) in [
        (wrong_self, Unusable::SelfMismatch),
        (no_77, Unusable::NoNip77),
        (no_scopes, Unusable::NoScopes),
    ] {
        let mut p = pair(json!([{}]));
        p.info = Ok(doc.to_string());
        // Restart with the new document.
        p.worker = Worker::new(
            config(SyncLimits::DEFAULT),
            now(),
            ChaCha20Rng::seed_from_u64(3),
        );
        p.run();
        assert_eq!(p.worker.status().state, State::Unusable, "{why:?}");
        assert_eq!(p.worker.status().unusable, Some(why));
        let fetches = p.info_fetches;
        // Three hours: retried on the hour-long backoff, never connected.
        p.run_until(secs(3 * 3_600), 10_000).unwrap();
        assert!(p.info_fetches - fetches <= 3, "{why:?}: {}", p.info_fetches);
        assert_eq!(p.connects, 0);
    }
    // Without `self` the document is taken (it is optional).
    let mut p = pair(json!([{}]));
    p.info = Ok(json!({"supported_nips": [77], "peering": {"scopes": [{}]}}).to_string());
    p.worker = Worker::new(
        config(SyncLimits::DEFAULT),
        now(),
        ChaCha20Rng::seed_from_u64(3),
    );
    p.run_until(secs(5), 1_000).unwrap();
    assert_eq!(p.worker.status().state, State::Live);
}

#[test]
fn private_addresses_are_refused_before_any_request_unless_allowed() {
    for url in [
        "ws://127.0.0.1:7777",
        "ws://10.1.2.3/",
        "ws://[::1]/",
        "ws://localhost/",
    ] {
        let c = Config {
            relay_url: url.into(),
            ..config(SyncLimits::DEFAULT)
        };
        let mut w = Worker::new(c.clone(), now(), ChaCha20Rng::seed_from_u64(1));
        let outs: Vec<Output> = core::iter::from_fn(|| w.poll()).collect();
        assert!(
            !outs.iter().any(|o| matches!(o, Output::FetchInfo { .. })),
            "{url}"
        );
        assert_eq!(w.status().unusable, Some(Unusable::RefusedUrl), "{url}");
        let mut allowed = Worker::new(
            Config {
                allow_private_networks: true,
                ..c
            },
            now(),
            ChaCha20Rng::seed_from_u64(1),
        );
        assert!(
            matches!(allowed.poll(), Some(Output::FetchInfo { .. })),
            "{url}"
        );
    }
    // Resolved and redirected addresses: the driver asks the worker, and reports a refusal.
    let mut w = Worker::new(
        config(SyncLimits::DEFAULT),
        now(),
        ChaCha20Rng::seed_from_u64(1),
    );
    assert!(w.check_address("169.254.169.254".parse().unwrap()).is_err());
    assert!(w.check_address("8.8.8.8".parse().unwrap()).is_ok());
    assert!(w.check_url("http://[fd00::1]/").is_err());
    let refused = w.check_address("192.168.0.1".parse().unwrap()).unwrap_err();
    while w.poll().is_some() {}
    w.handle(now(), Input::InfoFailed(InfoError::Refused(refused)));
    assert_eq!(w.status().unusable, Some(Unusable::RefusedAddress));
    assert_eq!(
        worker::info_url("wss://peer.example.com/x").as_deref(),
        Some("https://peer.example.com/x")
    );
}

#[test]
fn a_refused_auth_backs_off_and_syncs_nothing() {
    // The peer calls itself another host: our relay tag (the configured relayUrl) is refused.
    let mut p = pair_with(
        json!([{}]),
        peer_relay("wss://other.example.com/", peer_limits()),
        SyncLimits::DEFAULT,
    );
    p.insert_on_peer(&ev(&key(50), 1, NOW - 1_000, "x"));
    p.run();
    assert_eq!(p.worker.status().state, State::Backoff);
    assert!(
        p.worker
            .status()
            .last_error
            .as_deref()
            .unwrap()
            .contains("AUTH refused")
    );
    p.run_until(secs(600), 10_000).unwrap();
    // 1 s doubling with equal jitter: at most a dozen tries in ten minutes, never a hot loop.
    assert!((2..=12).contains(&p.connects), "{}", p.connects);
    assert!(local_ids(&mut p).is_empty());
    assert_eq!(p.worker.stats().neg_sessions, 0);
}

/// nostr-rs-relay 0.8.12's NIP-11 `supported_nips` (NIP-42, no NIP-77), as it serves them.
const NOSTR_RS_RELAY_NIPS: [u16; 12] = [1, 2, 9, 11, 12, 15, 16, 20, 22, 33, 40, 42];

#[test]
fn a_peer_without_nip77_is_asked_again_only_on_the_unusable_backoff_never_dialled() {
    let doc = json!({
        "name": "nostr-rs-relay",
        "supported_nips": NOSTR_RS_RELAY_NIPS,
        "software": "https://git.sr.ht/~gheartsfield/nostr-rs-relay",
    });
    let mut w = Worker::new(
        config(SyncLimits::DEFAULT),
        now(),
        ChaCha20Rng::seed_from_u64(11),
    );
    // Three days of explicit time: every output the worker asks for is answered at once, the
    // clock jumping from one wake-up to the next.
    let end = secs(3 * 24 * 3_600);
    let mut fetches: Vec<Timestamp> = Vec::new();
    let mut t = now();
    let mut turns = 0;
    loop {
        while let Some(o) = w.poll() {
            match o {
                Output::FetchInfo { .. } => {
                    fetches.push(t);
                    w.handle(t, Input::Info(doc.to_string()));
                }
                Output::Connect { .. } | Output::Send { .. } => panic!("dialled: {o:?}"),
                _ => {}
            }
        }
        assert_eq!(w.status().state, State::Unusable);
        assert_eq!(w.status().unusable, Some(Unusable::NoNip77));
        assert!(
            w.status().last_error.as_deref().unwrap().contains("NIP-77"),
            "{:?}",
            w.status()
        );
        let next = w.poll_timeout().unwrap().at;
        assert!(
            next > t,
            "a wake-up at {next:?} is not after {t:?}: a hot loop"
        );
        if next > end {
            break;
        }
        t = next;
        w.handle_timeout(t);
        turns += 1;
        assert!(turns < 100_000);
    }
    // The backoff rule: each retry at least half its ceiling after the one before (1 h doubling
    // to 24 h, equal jitter), so within three days at most ten asks; never a connection.
    let initial = worker::UNUSABLE_BACKOFF.initial.as_millis() as u64;
    let max = worker::UNUSABLE_BACKOFF.max.as_millis() as u64;
    for (i, pair) in fetches.windows(2).enumerate() {
        let ceiling = (initial << i.min(20)).min(max);
        let gap = pair[1].as_millis() - pair[0].as_millis();
        assert!(gap >= ceiling / 2 && gap <= ceiling, "retry {i}: {gap} ms");
    }
    assert!((4..=10).contains(&fetches.len()), "{}", fetches.len());
    assert_eq!(w.stats().connections, 0);
    assert_eq!(w.stats().neg_sessions, 0);
}

#[test]
fn a_peer_advertising_no_scope_is_synced_over_the_implicit_window() {
    let k = key(70);
    let recent: Vec<Event> = [1u16, 7, 30_023]
        .iter()
        .enumerate()
        .map(|(i, &kind)| ev(&k, kind, NOW - 86_400 * (i as u64 + 1), "recent"))
        .collect();
    let window = weft_proto::nostr::sync::scope::IMPLICIT_SCOPE_WINDOW_SECS;
    let old = ev(&k, 1, NOW - window - 60, "older than the window");
    let mut p = pair(json!([{}]));
    // rust-nostr's relay and nostr-rs-relay advertise no `peering` block at all.
    p.info = Ok(json!({
        "self": hex::encode(&pubkey(&peer_key())),
        "supported_nips": [1, 11, 42, 77],
    })
    .to_string());
    for e in recent.iter().chain([&old]) {
        p.insert_on_peer(e);
    }
    p.run_until(secs(10), 10_000).unwrap();
    assert_eq!(p.worker.status().state, State::Live);
    assert_eq!(local_ids(&mut p), sorted(&recent));
    assert_eq!(
        p.worker.scopes(),
        &[weft_proto::nostr::sync::scope::Scope::implicit()]
    );
    // An explicitly empty list offers nothing.
    let mut p = pair(json!([]));
    p.insert_on_peer(&recent[0]);
    p.run_until(secs(10), 10_000).unwrap();
    assert_eq!(p.worker.status().unusable, Some(Unusable::NoScopes));
    assert!(local_ids(&mut p).is_empty());
}

/// A worker with default limits that read a peer's NIP-11 (one open scope) and whose socket to
/// the peer just opened, nothing said on it yet.
fn connected_worker() -> (Worker<ChaCha20Rng>, ConnId) {
    let mut w = Worker::new(
        config(SyncLimits::DEFAULT),
        now(),
        ChaCha20Rng::seed_from_u64(1),
    );
    while w.poll().is_some() {}
    w.handle(now(), Input::Info(info(json!([{}]))));
    let conn = match core::iter::from_fn(|| w.poll()).find(|o| matches!(o, Output::Connect { .. }))
    {
        Some(Output::Connect { conn, .. }) => conn,
        o => panic!("{o:?}"),
    };
    w.handle(now(), Input::Connected(conn));
    (w, conn)
}

#[test]
fn silence_instead_of_a_challenge_or_an_ok_is_a_failure() {
    let (mut w, conn) = connected_worker();
    // First it asks for the challenge once, with a REQ that reads nothing stored.
    let probe_at = w.poll_timeout().unwrap().at;
    assert_eq!(probe_at, now().saturating_add(worker::AUTH_PROBE_AFTER));
    w.handle_timeout(probe_at);
    let sent: Vec<Output> = core::iter::from_fn(|| w.poll()).collect();
    let probe = json!(["REQ", worker::AUTH_PROBE_SUB, {"limit": 0}]).to_string();
    assert!(
        sent.contains(&Output::Send {
            conn,
            text: probe.clone()
        }),
        "{sent:?}"
    );
    // Served without a challenge: the probe is closed, and the worker goes on waiting.
    w.handle(
        probe_at,
        Input::Frame {
            conn,
            text: json!(["EOSE", worker::AUTH_PROBE_SUB]).to_string(),
        },
    );
    let close = json!(["CLOSE", worker::AUTH_PROBE_SUB]).to_string();
    assert!(core::iter::from_fn(|| w.poll()).any(|o| o
        == Output::Send {
            conn,
            text: close.clone()
        }));
    let at = w.poll_timeout().unwrap().at;
    assert_eq!(at, now().saturating_add(worker::AUTH_TIMEOUT));
    w.handle_timeout(at);
    assert_eq!(w.status().state, State::Backoff);
    assert!(core::iter::from_fn(|| w.poll()).any(|o| o == Output::Close { conn }));
}

#[test]
fn a_peer_that_challenges_only_when_asked_is_asked_and_authenticated() {
    let (mut w, conn) = connected_worker();
    // Nothing is sent before the probe's time.
    assert!(core::iter::from_fn(|| w.poll()).all(|o| !matches!(o, Output::Send { .. })));
    let probe_at = w.poll_timeout().unwrap().at;
    w.handle_timeout(probe_at);
    while w.poll().is_some() {}
    // As rust-nostr's relay answers a REQ before AUTH: the challenge, then CLOSED.
    for text in [
        json!(["AUTH", "challenge-7"]).to_string(),
        json!([
            "CLOSED",
            worker::AUTH_PROBE_SUB,
            "auth-required: you must auth"
        ])
        .to_string(),
    ] {
        w.handle(probe_at, Input::Frame { conn, text });
    }
    let auth = core::iter::from_fn(|| w.poll())
        .find_map(|o| match o {
            Output::Send { text, .. } if text.starts_with("[\"AUTH\"") => Some(text),
            _ => None,
        })
        .expect("an AUTH");
    let v: Value = serde_json::from_str(&auth).unwrap();
    assert_eq!(v[1]["kind"], 22242);
    let tags = v[1]["tags"].to_string();
    assert!(
        tags.contains("challenge-7") && tags.contains(PEER_URL),
        "{tags}"
    );
    // Only one probe per connection: later wake-ups before the AUTH deadline send nothing.
    let later = probe_at.saturating_add(worker::AUTH_PROBE_AFTER * 2);
    w.handle_timeout(later);
    assert!(core::iter::from_fn(|| w.poll()).all(|o| !matches!(o, Output::Send { .. })));
    w.handle(
        probe_at,
        Input::Frame {
            conn,
            text: json!(["OK", v[1]["id"], true, ""]).to_string(),
        },
    );
    assert_eq!(w.status().state, State::Reconciling);
}

#[test]
fn a_disconnect_reconnects_and_reconciles_again() {
    let first = history(60, 1, 10, 3_600);
    let later = history(61, 1, 5, 3_000);
    let mut p = pair(json!([{"kinds": [1]}]));
    for e in &first {
        p.insert_on_peer(e);
    }
    p.run_until(secs(10), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), sorted(&first));
    p.disconnect();
    assert_eq!(p.worker.status().state, State::Backoff);
    // Written while we were away, with no live subscription to see them.
    for e in &later {
        p.insert_on_peer(e);
    }
    p.run_until(secs(120), 10_000).unwrap();
    let mut all = first.clone();
    all.extend(later.iter().cloned());
    assert_eq!(local_ids(&mut p), sorted(&all));
    let s = p.worker.stats();
    assert_eq!(s.connections, 2);
    assert_eq!(s.reconciliations, 2);
    // And every 15 minutes, on the same connection.
    let more = history(62, 1, 3, 2_000);
    for e in &more {
        p.insert_on_peer(e);
    }
    p.run_until(
        secs(120) + RECONCILE_INTERVAL + core::time::Duration::from_secs(5),
        10_000,
    )
    .unwrap();
    assert_eq!(p.worker.stats().reconciliations, 3);
    assert_eq!(p.worker.stats().connections, 2);
    assert!(more.iter().all(|e| p.local.contains(&e.id)));
    // The status row's heartbeat never went stale meanwhile.
    assert!(!p.worker.status().is_stale(p.now));
}

#[test]
fn live_events_during_a_reconciliation_are_not_lost() {
    // The peer rate-limits: AUTH and the live REQ pass, the NEG-OPEN is refused, the worker
    // pauses in the middle of its reconciliation.
    let limits = Limits {
        messages: BucketConfig::new(2, 1),
        ..Limits::DEFAULT
    };
    let hist = history(70, 1, 3, 3_600);
    let mut p = pair_with(
        json!([{"kinds": [1]}]),
        peer_relay(PEER_URL, limits),
        SyncLimits::DEFAULT,
    );
    for e in &hist {
        p.insert_on_peer(e);
    }
    p.run();
    assert_eq!(p.worker.status().state, State::Reconciling);
    assert!(local_ids(&mut p).is_empty());
    let live = ev(&key(71), 1, NOW, "published while history syncs");
    p.publish_on_peer(&live);
    assert!(p.local.contains(&live.id));
    assert_eq!(sorted(&p.broadcasts), vec![live.id]);
    p.run_until(secs(120), 10_000).unwrap();
    let mut all = hist.clone();
    all.push(live.clone());
    assert_eq!(local_ids(&mut p), sorted(&all));
    assert_eq!(p.worker.status().state, State::Live);
}

/// Drives a worker by hand to its first fetch batch against a peer holding `peer_events`
/// (reconciled with the negentropy crate directly); returns the worker, its connection and the
/// fetch subscription id with the ids asked.
/// A worker at its first fetch batch: the worker, its connection, the fetch batches asked
/// (subscription id, ids) and every output so far.
type AtFetch = (
    Worker<ChaCha20Rng>,
    ConnId,
    Vec<(String, Vec<[u8; 32]>)>,
    Vec<Output>,
);

fn worker_at_fetch(limits: SyncLimits, peer_events: &[Event]) -> AtFetch {
    use negentropy::{Id, Negentropy, NegentropyStorageVector};
    let mut w = Worker::new(config(limits), now(), ChaCha20Rng::seed_from_u64(1));
    let mut outs: Vec<Output> = Vec::new();
    drain(&mut w, &mut outs);
    w.handle(now(), Input::Info(info(json!([{}]))));
    let conn = drain(&mut w, &mut outs)
        .into_iter()
        .find_map(|o| match o {
            Output::Connect { conn, .. } => Some(conn),
            _ => None,
        })
        .unwrap();
    w.handle(now(), Input::Connected(conn));
    w.handle(
        now(),
        Input::Frame {
            conn,
            text: r#"["AUTH","abc"]"#.into(),
        },
    );
    let auth = drain(&mut w, &mut outs)
        .into_iter()
        .find_map(|o| match o {
            Output::Send { text, .. } => Some(text),
            _ => None,
        })
        .unwrap();
    let ClientMessage::Auth(a) = ClientMessage::parse(&auth).unwrap() else {
        panic!()
    };
    assert_eq!(a.tag_value("relay"), Some(PEER_URL));
    assert_eq!(a.tag_value("challenge"), Some("abc"));
    assert_eq!(a.pubkey, pubkey(&key(2)));
    // OK false for another event id changes nothing; OK true for ours goes on.
    w.handle(
        now(),
        Input::Frame {
            conn,
            text: RelayMessage::Ok {
                event_id: a.id,
                accepted: true,
                message: String::new(),
            }
            .to_text(),
        },
    );
    let mut fetches = Vec::new();
    // Answer store reads with nothing, and the NEG-OPEN as a relay holding peer_events would.
    let mut storage = NegentropyStorageVector::new();
    for e in peer_events {
        storage
            .insert(e.created_at, Id::from_byte_array(e.id))
            .unwrap();
    }
    storage.seal().unwrap();
    let mut server = Negentropy::owned(storage, 0).unwrap();
    for _ in 0..100 {
        let new = drain(&mut w, &mut outs);
        if new.is_empty() {
            break;
        }
        for o in new {
            match o {
                Output::Store {
                    request,
                    op: StoreOp::Items { .. },
                } => w.handle(
                    now(),
                    Input::Stored {
                        request,
                        reply: StoreReply::Items(Vec::new()),
                    },
                ),
                Output::Send { text, .. } => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    match v[0].as_str().unwrap() {
                        "NEG-OPEN" | "NEG-MSG" => {
                            let sub = v[1].as_str().unwrap();
                            let msg = v[v.as_array().unwrap().len() - 1].as_str().unwrap();
                            let reply = server.reconcile(&hex::decode(msg).unwrap()).unwrap();
                            w.handle(
                                now(),
                                Input::Frame {
                                    conn,
                                    text: json!(["NEG-MSG", sub, hex::encode(&reply)]).to_string(),
                                },
                            );
                        }
                        "REQ" if v[1].as_str().unwrap().starts_with("fetch") => {
                            let ids = v[2]["ids"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|x| {
                                    let b = hex::decode(x.as_str().unwrap()).unwrap();
                                    <[u8; 32]>::try_from(b.as_slice()).unwrap()
                                })
                                .collect();
                            fetches.push((v[1].as_str().unwrap().to_string(), ids));
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if !fetches.is_empty() {
            break;
        }
    }
    (w, conn, fetches, outs)
}

fn drain(w: &mut Worker<ChaCha20Rng>, outs: &mut Vec<Output>) -> Vec<Output> {
    let new: Vec<Output> = core::iter::from_fn(|| w.poll()).collect();
    outs.extend(new.iter().cloned());
    new
}

fn event_frame(sub: &str, e: &Event) -> String {
    RelayMessage::Event {
        subscription: sub.into(),
        event: e.clone(),
    }
    .to_text()
}

#[test]
fn a_forged_or_unrequested_event_is_rejected() {
    let k = key(80);
    let wanted = ev(&k, 1, NOW - 500, "wanted");
    let (mut w, conn, fetches, _) =
        worker_at_fetch(SyncLimits::DEFAULT, std::slice::from_ref(&wanted));
    assert_eq!(fetches.len(), 1);
    let (sub, ids) = &fetches[0];
    assert_eq!(ids, &vec![wanted.id]);
    let mut forged = wanted.clone();
    forged.content = "forged".into();
    let mut bad_sig = wanted.clone();
    bad_sig.sig[0] ^= 1;
    let unasked = ev(&k, 1, NOW - 400, "not asked for");
    for (s, e) in [
        (sub.as_str(), &forged),
        (sub.as_str(), &bad_sig),
        (sub.as_str(), &unasked),
        ("fetch-999", &wanted),
        ("someone-elses", &unasked),
    ] {
        w.handle(
            now(),
            Input::Frame {
                conn,
                text: event_frame(s, e),
            },
        );
    }
    let s = w.stats();
    // The forged copy names the wanted id but its id does not match: invalid. Bad signature:
    // invalid. An id not asked, or a subscription not ours: unrequested.
    assert_eq!(s.invalid, 2, "{s:?}");
    assert_eq!(s.unrequested, 3, "{s:?}");
    let writes: Vec<Output> = core::iter::from_fn(|| w.poll())
        .filter(|o| {
            matches!(
                o,
                Output::Store {
                    op: StoreOp::Write { .. },
                    ..
                }
            )
        })
        .collect();
    assert!(writes.is_empty());
    // The real one is still wanted, and taken.
    w.handle(
        now(),
        Input::Frame {
            conn,
            text: event_frame(sub, &wanted),
        },
    );
    let writes: Vec<Output> = core::iter::from_fn(|| w.poll())
        .filter(|o| {
            matches!(
                o,
                Output::Store {
                    op: StoreOp::Write { .. },
                    ..
                }
            )
        })
        .collect();
    assert_eq!(writes.len(), 1);
    assert_eq!(w.stats().fetched, 1);
}

#[test]
fn a_huge_batch_is_split_by_bytes_without_dropping_the_connection() {
    let k = key(90);
    let big = "x".repeat(10_000);
    let events: Vec<Event> = (0..40)
        .map(|i| ev(&k, 1, NOW - 1_000 - i, &format!("{i}{big}")))
        .collect();
    let limits = SyncLimits {
        fetch_batch_bytes: 50_000,
        ..SyncLimits::DEFAULT
    };
    let mut p = pair_with(
        json!([{"kinds": [1]}]),
        peer_relay(PEER_URL, peer_limits()),
        limits,
    );
    for e in &events {
        p.insert_on_peer(e);
    }
    p.run_until(secs(60), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), sorted(&events));
    let s = p.worker.stats();
    assert!(s.batch_splits >= 1, "{s:?}");
    assert_eq!(s.connections, 1);
    assert_eq!(s.fetched, 40);
}

#[test]
fn a_request_to_vanish_for_this_relay_deletes_and_later_events_of_its_author_are_skipped() {
    let gone = key(100);
    let stays = key(101);
    let mut p = pair(json!([{}]));
    let old: Vec<Event> = (0..30)
        .map(|i| ev(&gone, 1, NOW - 5_000 - i, &format!("old {i}")))
        .collect();
    let keep = ev(&stays, 1, NOW - 5_000, "kept");
    for e in old.iter().chain([&keep]) {
        p.insert_on_peer(e);
    }
    // The author asked this relay (not the peer) to forget them, here first.
    let vanish = ev_tags(
        &gone,
        VANISH_KIND,
        NOW - 4_000,
        "",
        vec![vec!["relay".into(), OWN_URL.into()]],
    );
    p.local.vanish(&vanish).unwrap();
    p.run_until(secs(60), 10_000).unwrap();
    assert_eq!(local_ids(&mut p), vec![keep.id]);
    let s = p.worker.stats();
    // Writes in flight when the first "vanished" came back were asked; the rest were skipped.
    assert!(
        s.vanish_skipped >= 30 - worker::MAX_WRITES_IN_FLIGHT as u64,
        "{s:?}"
    );

    // A request to vanish arriving from the peer that names this relay deletes here.
    let mut p = pair(json!([{}]));
    let before: Vec<Event> = (0..3)
        .map(|i| ev(&gone, 1, NOW - 5_000 - i, &format!("b {i}")))
        .collect();
    for e in &before {
        p.local.write(e, now()).unwrap();
    }
    p.run_until(secs(5), 10_000).unwrap();
    p.publish_on_peer(&ev_tags(
        &gone,
        VANISH_KIND,
        NOW + 5,
        "",
        vec![vec!["relay".into(), OWN_URL.into()]],
    ));
    assert!(before.iter().all(|e| !p.local.contains(&e.id)));
    // One naming only other relays deletes nothing here.
    let mut p = pair(json!([{}]));
    p.local.write(&before[0], now()).unwrap();
    p.run_until(secs(5), 10_000).unwrap();
    p.publish_on_peer(&ev_tags(
        &gone,
        VANISH_KIND,
        NOW + 5,
        "",
        vec![vec!["relay".into(), "wss://third.example/".into()]],
    ));
    assert!(p.local.contains(&before[0].id));
}

#[test]
fn queue_bounds_hold_under_a_million_small_events() {
    let limits = SyncLimits {
        max_queue_events: 100,
        max_queue_bytes: 64 * 1024,
        ..SyncLimits::DEFAULT
    };
    let (mut w, conn, _, _) = worker_at_fetch(limits, &[]);
    // Finish the round so the live subscription is all that is left.
    while w.poll().is_some() {}
    let k = key(110);
    // The store never answers: the driver is slow. Valid events first, then a flood.
    for i in 0..200 {
        let e = ev(&k, 1, NOW - i, &format!("{i}"));
        w.handle(
            now(),
            Input::Frame {
                conn,
                text: event_frame("peer-live", &e),
            },
        );
        while w.poll().is_some() {}
        let (n, b) = w.queued();
        assert!(n <= 100 && b <= 64 * 1024);
    }
    let template = event_frame("peer-live", &ev(&k, 1, NOW, "f"));
    let id_at = template.find(r#""id":""#).unwrap() + 6;
    // A million in an optimised build; a debug build parses frames ~20 times slower, so the
    // default suite floods 50 000 (the bound is reached after 100 either way).
    let flood: u64 = if cfg!(debug_assertions) {
        50_000
    } else {
        1_000_000
    };
    for i in 0..flood {
        let mut text = template.clone();
        text.replace_range(id_at..id_at + 16, &format!("{i:016x}"));
        w.handle(now(), Input::Frame { conn, text });
        if i % 1024 == 0 {
            while w.poll().is_some() {}
        }
    }
    while w.poll().is_some() {}
    let (n, b) = w.queued();
    assert!(n <= 100 && b <= 64 * 1024, "{n} {b}");
    let s = w.stats();
    assert!(s.dropped_full >= flood, "{s:?}");
    // Nothing else grew: no write beyond the in-flight bound was asked.
    assert!(w.need_len() == 0);

    // Bytes bound the queue as well as counts: large events fill it first.
    let limits = SyncLimits {
        max_queue_events: 1_000,
        max_queue_bytes: 40_000,
        ..SyncLimits::DEFAULT
    };
    let (mut w, conn, _, _) = worker_at_fetch(limits, &[]);
    while w.poll().is_some() {}
    let big = "y".repeat(9_000);
    for i in 0..20 {
        let e = ev(&k, 1, NOW - i, &format!("{i}{big}"));
        w.handle(
            now(),
            Input::Frame {
                conn,
                text: event_frame("peer-live", &e),
            },
        );
        while w.poll().is_some() {}
        assert!(w.queued().1 <= 40_000);
    }
    assert!(w.stats().dropped_full >= 1);
}

#[test]
fn a_failing_store_write_is_counted_and_the_queue_moves_on() {
    let (mut w, conn, _, _) = worker_at_fetch(SyncLimits::DEFAULT, &[]);
    while w.poll().is_some() {}
    let k = key(120);
    let events: Vec<Event> = (0..20)
        .map(|i| ev(&k, 1, NOW - i, &format!("{i}")))
        .collect();
    for e in &events {
        w.handle(
            now(),
            Input::Frame {
                conn,
                text: event_frame("peer-live", e),
            },
        );
    }
    let mut written = 0;
    for _ in 0..100 {
        let outs: Vec<Output> = core::iter::from_fn(|| w.poll()).collect();
        if outs.is_empty() {
            break;
        }
        for o in outs {
            if let Output::Store {
                request,
                op: StoreOp::Write { .. },
            } = o
            {
                written += 1;
                w.handle(
                    now(),
                    Input::Stored {
                        request,
                        reply: StoreReply::Failed("disk full".into()),
                    },
                );
            }
        }
    }
    assert_eq!(written, 20);
    assert_eq!(w.stats().store_failures, 20);
    assert_eq!(w.queued(), (0, 0));
}
