//! The relay session machine (`weft_proto::nostr::relay`) against the memory store through its
//! harness: NIP-01 EVENT/OK, REQ/EVENT/EOSE/CLOSED, CLOSE, NOTICE; NIP-09, NIP-40, NIP-62 through
//! a session; NIP-42 AUTH; NIP-45 COUNT; the limits, paced reads and bad input.
#![cfg(all(feature = "nostr", feature = "rustcrypto"))]

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::core::{BucketConfig, Machine, Timestamp};
use weft_proto::crypto::{Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::nostr::auth;
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::expiration;
use weft_proto::nostr::kinds::{self, ALL_RELAYS, DELETION_KIND, VANISH_KIND};
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::{ClientMessage, Filter, RelayMessage};
use weft_proto::nostr::relay::harness::Harness;
use weft_proto::nostr::relay::session::{CLOSE_MESSAGE_TOO_BIG, Stats};
use weft_proto::nostr::relay::wire::Outbound;
use weft_proto::nostr::relay::{
    AuthPolicy, Config, Input, MemoryStore, Output, Session, StoreOp, StoreReply, WriteOutcome,
};

const NOW: u64 = 1_790_000_000;
const URL: &str = "wss://relay.example.com/";

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

fn config(auth: AuthPolicy, limits: Limits) -> Config {
    Config {
        relay_url: URL.into(),
        limits,
        auth,
        provider: default_provider(),
        peering: Default::default(),
    }
}

fn relay() -> Harness {
    relay_with(AuthPolicy::Optional, Limits::DEFAULT)
}

fn relay_with(auth: AuthPolicy, limits: Limits) -> Harness {
    Harness::new(config(auth, limits), MemoryStore::default(), now())
}

fn key(seed: u64) -> Secp256k1Secret {
    generate_secp256k1(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn ev(key: &Secp256k1Secret, kind: u16, created_at: u64, tags: Vec<Vec<String>>) -> Event {
    UnsignedEvent {
        created_at,
        kind,
        tags,
        content: "hello".into(),
    }
    .sign(
        default_provider(),
        key,
        &mut ChaCha20Rng::seed_from_u64(created_at ^ u64::from(kind)),
    )
    .unwrap()
}

fn t(name: &str, value: &str) -> Vec<String> {
    vec![name.into(), value.into()]
}

fn connect(h: &mut Harness, seed: u64) -> usize {
    let c = h.connect(&mut ChaCha20Rng::seed_from_u64(seed));
    let first = h.take(c);
    assert!(matches!(
        first.as_slice(),
        [Outbound::Relay(RelayMessage::Auth(_))]
    ));
    c
}

fn publish(h: &mut Harness, c: usize, e: &Event) -> (bool, String) {
    h.send(c, &ClientMessage::Event(e.clone()).to_text());
    let out = h.take(c);
    let oks: Vec<_> = out
        .iter()
        .filter_map(|o| match o.as_relay() {
            Some(RelayMessage::Ok {
                event_id,
                accepted,
                message,
            }) if *event_id == e.id => Some((*accepted, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(oks.len(), 1, "one OK per EVENT: {out:?}");
    oks[0].clone()
}

fn req(sub: &str, filters: Vec<Filter>) -> String {
    ClientMessage::Req {
        subscription: sub.into(),
        filters,
    }
    .to_text()
}

/// The events sent for `sub` and whether EOSE followed them.
fn events_for(out: &[Outbound], sub: &str) -> (Vec<Event>, bool) {
    let mut events = Vec::new();
    let mut eose = false;
    for o in out {
        match o.as_relay() {
            Some(RelayMessage::Event {
                subscription,
                event,
            }) if subscription == sub => {
                events.push(event.clone());
            }
            Some(RelayMessage::Eose(s)) if s == sub => eose = true,
            _ => {}
        }
    }
    (events, eose)
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

fn notices(out: &[Outbound]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o.as_relay() {
            Some(RelayMessage::Notice(m)) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

fn kinds_filter(k: &[u16]) -> Filter {
    Filter {
        kinds: Some(k.to_vec()),
        ..Filter::default()
    }
}

// --- NIP-01 EVENT / OK ---

#[test]
fn ok_true_comes_only_after_the_store_reply() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut s = Session::new(
        config(AuthPolicy::Optional, Limits::DEFAULT),
        now(),
        &mut rng,
    );
    assert!(matches!(s.poll(), Some(Output::Send(_))));
    let e = ev(&key(1), 1, NOW, vec![]);
    s.handle(
        now(),
        Input::Frame(ClientMessage::Event(e.clone()).to_text()),
    );
    let Some(Output::Store { request, op }) = s.poll() else {
        panic!("a write first")
    };
    assert_eq!(
        op,
        StoreOp::Write {
            event: e.clone(),
            now: now()
        }
    );
    assert_eq!(s.poll(), None, "no OK before the store answers");
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: StoreReply::Written(WriteOutcome::Stored),
        },
    );
    assert_eq!(
        s.poll(),
        Some(Output::Send(Outbound::Relay(RelayMessage::Ok {
            event_id: e.id,
            accepted: true,
            message: String::new()
        })))
    );
    assert_eq!(s.poll(), Some(Output::Broadcast(e)));
    assert_eq!(s.poll(), None);
}

#[test]
fn a_store_failure_is_ok_false_error_and_closed_error() {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let mut s = Session::new(
        config(AuthPolicy::Optional, Limits::DEFAULT),
        now(),
        &mut rng,
    );
    s.poll();
    let e = ev(&key(1), 1, NOW, vec![]);
    s.handle(
        now(),
        Input::Frame(ClientMessage::Event(e.clone()).to_text()),
    );
    let Some(Output::Store { request, .. }) = s.poll() else {
        panic!()
    };
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: StoreReply::Failed("disk full".into()),
        },
    );
    let Some(Output::Send(Outbound::Relay(RelayMessage::Ok {
        accepted: false,
        message,
        ..
    }))) = s.poll()
    else {
        panic!()
    };
    assert!(message.starts_with("error:"), "{message}");
    assert_eq!(s.poll(), None, "nothing broadcast");
    s.handle(now(), Input::Frame(req("q", vec![Filter::default()])));
    let Some(Output::Store { request, .. }) = s.poll() else {
        panic!()
    };
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: StoreReply::Failed("gone".into()),
        },
    );
    let Some(Output::Send(o)) = s.poll() else {
        panic!()
    };
    assert!(closed_for(&[o], "q").unwrap().starts_with("error:"));
    assert_eq!(s.subscriptions().count(), 0);
}

#[test]
fn a_stored_event_is_ok_true_and_a_second_copy_duplicate() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let e = ev(&key(1), 1, NOW, vec![]);
    assert_eq!(publish(&mut h, c, &e), (true, String::new()));
    let (ok, why) = publish(&mut h, c, &e);
    assert!(ok && why.starts_with("duplicate:"), "{why}");
    assert!(h.store.contains(&e.id));
}

#[test]
fn bad_events_are_refused_with_invalid() {
    let limits = Limits {
        max_event_bytes: 2_000,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let k = key(2);
    let mut bad_sig = ev(&k, 1, NOW, vec![]);
    bad_sig.sig[3] ^= 1;
    let mut bad_id = ev(&k, 1, NOW, vec![]);
    bad_id.content.push('x');
    let expired = ev(&k, 1, NOW - 5, vec![expiration::tag(NOW)]);
    let future = ev(&k, 1, NOW + 901, vec![]);
    let auth_kind = auth::build(
        default_provider(),
        &k,
        &mut ChaCha20Rng::seed_from_u64(3),
        now(),
        URL,
        "x",
    )
    .unwrap();
    let vanish_no_relay = ev(&k, VANISH_KIND, NOW, vec![]);
    let mut big = UnsignedEvent {
        created_at: NOW,
        kind: 1,
        tags: vec![],
        content: "a".repeat(2_000),
    }
    .sign(default_provider(), &k, &mut ChaCha20Rng::seed_from_u64(4))
    .unwrap();
    for e in [
        &bad_sig,
        &bad_id,
        &expired,
        &future,
        &auth_kind,
        &vanish_no_relay,
        &big,
    ] {
        let (ok, why) = publish(&mut h, c, e);
        assert!(!ok && why.starts_with("invalid:"), "{why} for {e:?}");
        assert!(!h.store.contains(&e.id));
    }
    // Just within the bounds, the same shapes are taken.
    let soon = ev(&k, 1, NOW + 900, vec![]);
    assert!(publish(&mut h, c, &soon).0);
    big.content.truncate(1_500);
    let big = UnsignedEvent {
        created_at: NOW,
        kind: 1,
        tags: vec![],
        content: big.content,
    }
    .sign(default_provider(), &k, &mut ChaCha20Rng::seed_from_u64(4))
    .unwrap();
    assert!(publish(&mut h, c, &big).0);
    assert_eq!(h.conns[c].session.stats().refused, 7);
}

#[test]
fn malformed_frames_get_their_nip01_answer_and_the_socket_lives() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let id = "ab".repeat(32);
    h.send(c, &format!(r#"["EVENT",{{"id":"{id}","kind":"x"}}]"#));
    let out = h.take(c);
    assert!(matches!(
        out[0].as_relay(),
        Some(RelayMessage::Ok { accepted: false, message, .. }) if message.starts_with("invalid:")
    ));
    h.send(c, r#"["REQ","s",{"kinds":["one"]}]"#);
    assert!(closed_for(&h.take(c), "s").unwrap().starts_with("invalid:"));
    h.send(c, r#"["COUNT","n"]"#);
    assert!(closed_for(&h.take(c), "n").unwrap().starts_with("invalid:"));
    for garbage in [
        "nope",
        "[]",
        r#"["PING"]"#,
        r#"["CLOSE"]"#,
        r#"{"a":1}"#,
        r#"["REQ",""]"#,
    ] {
        h.send(c, garbage);
        let n = notices(&h.take(c));
        assert_eq!(n.len(), 1, "{garbage}");
        assert!(n[0].starts_with("invalid:"), "{n:?}");
    }
    assert_eq!(h.conns[c].closed, None);
    assert_eq!(h.conns[c].session.stats().malformed, 9);
    // Still serving.
    let e = ev(&key(1), 1, NOW, vec![]);
    assert!(publish(&mut h, c, &e).0);
}

#[test]
fn an_oversized_frame_closes_the_socket_with_1009() {
    let limits = Limits {
        max_message_bytes: 4_096,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    h.send(c, &" ".repeat(4_096));
    assert_eq!(h.conns[c].closed, None, "exactly at the limit is read");
    assert_eq!(notices(&h.take(c)).len(), 1);
    h.send(c, &format!(r#"["CLOSE","{}"]"#, "x".repeat(4_096)));
    assert_eq!(h.conns[c].closed, Some(CLOSE_MESSAGE_TOO_BIG));
    assert!(h.conns[c].session.is_closed());
    // A closed session takes nothing more.
    h.send(c, &req("s", vec![Filter::default()]));
    assert!(h.take(c).is_empty());

    let d = connect(&mut h, 2);
    h.input(d, Input::Oversized { bytes: 1 << 30 });
    assert_eq!(h.conns[d].closed, Some(1009));
}

#[test]
fn messages_over_the_rate_are_rate_limited() {
    let limits = Limits {
        messages: BucketConfig::new(3, 1),
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let k = key(1);
    for i in 0..3 {
        assert!(publish(&mut h, c, &ev(&k, 1, NOW - i, vec![])).0);
    }
    let (ok, why) = publish(&mut h, c, &ev(&k, 1, NOW - 10, vec![]));
    assert!(!ok && why.starts_with("rate-limited:"), "{why}");
    h.send(c, &req("s", vec![Filter::default()]));
    assert!(
        closed_for(&h.take(c), "s")
            .unwrap()
            .starts_with("rate-limited:")
    );
    // A second later one token is back.
    h.now = Timestamp::from_secs(NOW + 1);
    assert!(publish(&mut h, c, &ev(&k, 1, NOW - 11, vec![])).0);
    assert_eq!(h.conns[c].session.stats().rate_limited, 2);
}

#[test]
fn a_flood_from_a_client_that_reads_nothing_is_not_answered_without_end() {
    let limits = Limits {
        messages: BucketConfig::new(1, 0),
        max_unflushed_frames: 10,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    h.auto_flush = false;
    let c = connect(&mut h, 1);
    for _ in 0..1_000 {
        h.send(c, r#"["CLOSE","s"]"#);
        h.send(c, "garbage");
    }
    assert!(h.take(c).len() <= 10);
    assert_eq!(h.conns[c].session.stats().rate_limited, 1_999);
}

// --- NIP-01 REQ / EOSE / CLOSE / live ---

#[test]
fn req_sends_stored_events_newest_first_up_to_limit_then_eose_then_live() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let k = key(1);
    let events: Vec<_> = (0..5).map(|i| ev(&k, 1, NOW - 10 + i, vec![])).collect();
    for e in &events {
        assert!(publish(&mut h, c, e).0);
    }
    h.send(
        c,
        &req(
            "s",
            vec![Filter {
                limit: Some(3),
                ..kinds_filter(&[1])
            }],
        ),
    );
    let out = h.take(c);
    let (got, eose) = events_for(&out, "s");
    assert!(eose);
    assert_eq!(
        got,
        vec![events[4].clone(), events[3].clone(), events[2].clone()]
    );
    assert!(matches!(
        out.last().unwrap().as_relay(),
        Some(RelayMessage::Eose(_))
    ));
    // Live: a new matching event from another connection arrives; limit no longer applies.
    let d = connect(&mut h, 2);
    for i in 0..4 {
        let live = ev(&k, 1, NOW + i, vec![]);
        assert!(publish(&mut h, d, &live).0);
        let (got, _) = events_for(&h.take(c), "s");
        assert_eq!(got, vec![live]);
    }
    let other_kind = ev(&k, 2, NOW, vec![]);
    assert!(publish(&mut h, d, &other_kind).0);
    assert!(h.take(c).is_empty());
}

#[test]
fn limit_zero_sends_only_eose_and_limits_are_clamped_and_defaulted() {
    let limits = Limits {
        max_limit: 4,
        default_limit: 2,
        page_size: 3,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let k = key(1);
    for i in 0..10 {
        assert!(publish(&mut h, c, &ev(&k, 1, NOW - i, vec![])).0);
    }
    for (limit, want) in [(Some(0), 0), (None, 2), (Some(3), 3), (Some(1_000), 4)] {
        h.send(
            c,
            &req(
                "s",
                vec![Filter {
                    limit,
                    ..Filter::default()
                }],
            ),
        );
        let (got, eose) = events_for(&h.take(c), "s");
        assert!(eose);
        assert_eq!(got.len(), want, "{limit:?}");
    }
}

#[test]
fn two_filters_matching_one_event_send_it_once() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let k = key(1);
    let events: Vec<_> = (0..6)
        .map(|i| ev(&k, 1 + (i % 2) as u16, NOW - 10 + i, vec![]))
        .collect();
    for e in &events {
        assert!(publish(&mut h, c, e).0);
    }
    // The first filter stops at its limit: older kind-1 events it did not send still come
    // through the second.
    h.send(
        c,
        &req(
            "s",
            vec![
                Filter {
                    limit: Some(1),
                    ..kinds_filter(&[1])
                },
                kinds_filter(&[1, 2]),
                Filter::default(),
            ],
        ),
    );
    let (got, eose) = events_for(&h.take(c), "s");
    assert!(eose);
    let mut ids: Vec<_> = got.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 6, "every event once: {got:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6);
}

#[test]
fn a_req_under_an_open_id_replaces_it_and_close_ends_it() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let d = connect(&mut h, 2);
    let k = key(1);
    h.send(c, &req("s", vec![kinds_filter(&[1])]));
    h.send(c, &req("s", vec![kinds_filter(&[2])]));
    h.take(c);
    assert_eq!(h.conns[c].session.subscriptions().count(), 1);
    assert!(publish(&mut h, d, &ev(&k, 1, NOW, vec![])).0);
    assert!(h.take(c).is_empty(), "the replaced filter is gone");
    let two = ev(&k, 2, NOW, vec![]);
    assert!(publish(&mut h, d, &two).0);
    assert_eq!(events_for(&h.take(c), "s").0, vec![two]);
    h.send(c, r#"["CLOSE","s"]"#);
    assert!(h.take(c).is_empty());
    assert!(publish(&mut h, d, &ev(&k, 2, NOW + 1, vec![])).0);
    assert!(h.take(c).is_empty(), "closed");
    // Subscription ids are per connection: d's "s" is another subscription.
    h.send(d, &req("s", vec![kinds_filter(&[3])]));
    h.take(d);
    assert!(publish(&mut h, c, &ev(&k, 2, NOW + 2, vec![])).0);
    assert!(h.take(d).is_empty());
}

#[test]
fn subscriptions_past_the_limit_are_closed_blocked() {
    let limits = Limits {
        max_subscriptions: 3,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    for i in 0..3 {
        h.send(c, &req(&format!("s{i}"), vec![Filter::default()]));
        assert!(events_for(&h.take(c), &format!("s{i}")).1);
    }
    h.send(c, &req("s3", vec![Filter::default()]));
    assert!(
        closed_for(&h.take(c), "s3")
            .unwrap()
            .starts_with("blocked:")
    );
    // Replacing an open one is not a new one.
    h.send(c, &req("s0", vec![kinds_filter(&[1])]));
    assert!(events_for(&h.take(c), "s0").1);
    h.send(c, r#"["CLOSE","s1"]"#);
    h.send(c, &req("s3", vec![Filter::default()]));
    assert!(events_for(&h.take(c), "s3").1);
    assert_eq!(h.conns[c].session.subscriptions().count(), 3);
}

#[test]
fn stored_reads_wait_for_the_socket_to_flush() {
    let limits = Limits {
        page_size: 2,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let k = key(1);
    for i in 0..7 {
        assert!(publish(&mut h, c, &ev(&k, 1, NOW - i, vec![])).0);
    }
    h.auto_flush = false;
    h.send(c, &req("s", vec![kinds_filter(&[1])]));
    let mut all = Vec::new();
    for page in 0..4 {
        assert_eq!(h.conns[c].queries, page + 1, "one query per flush");
        let (got, eose) = events_for(&h.take(c), "s");
        assert!(got.len() <= 2);
        all.extend(got);
        if eose {
            break;
        }
        // Without a flush nothing more is read, whatever else happens.
        h.input(c, Input::Live(ev(&k, 9, NOW, vec![])));
        assert_eq!(h.conns[c].queries, page + 1);
        h.flush(c);
    }
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0].created_at > w[1].created_at));
}

#[test]
fn a_page_size_of_zero_still_reads_every_stored_event() {
    let limits = Limits {
        page_size: 0,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let k = key(1);
    for i in 0..3 {
        assert!(publish(&mut h, c, &ev(&k, 1, NOW - i, vec![])).0);
    }
    h.send(c, &req("s", vec![Filter::default()]));
    let (got, eose) = events_for(&h.take(c), "s");
    assert_eq!((got.len(), eose), (3, true));
}

#[test]
fn a_reader_too_slow_for_live_events_has_its_subscription_closed() {
    let limits = Limits {
        max_unflushed_frames: 5,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    h.send(c, &req("s", vec![kinds_filter(&[1])]));
    h.take(c);
    h.auto_flush = false;
    h.flush(c);
    let k = key(1);
    for i in 0..10 {
        h.input(c, Input::Live(ev(&k, 1, NOW + i, vec![])));
    }
    let out = h.take(c);
    assert_eq!(events_for(&out, "s").0.len(), 5);
    assert!(closed_for(&out, "s").unwrap().starts_with("error:"));
    assert_eq!(h.conns[c].session.subscriptions().count(), 0);
    assert_eq!(h.conns[c].session.stats().slow_closes, 1);
}

#[test]
fn replies_for_a_closed_subscription_are_dropped() {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let mut s = Session::new(
        config(AuthPolicy::Optional, Limits::DEFAULT),
        now(),
        &mut rng,
    );
    s.poll();
    s.handle(now(), Input::Frame(req("q", vec![Filter::default()])));
    let Some(Output::Store { request, .. }) = s.poll() else {
        panic!()
    };
    s.handle(now(), Input::Frame(r#"["CLOSE","q"]"#.into()));
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: StoreReply::Page(vec![ev(&key(1), 1, NOW, vec![])]),
        },
    );
    assert_eq!(s.poll(), None);
    assert_eq!(s.stats().stale_replies, 1);
}

#[test]
fn reads_left_waiting_by_closed_subscriptions_are_bounded() {
    let limits = Limits {
        max_subscriptions: 2,
        max_neg_sessions: 1,
        ..Limits::DEFAULT
    };
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let mut s = Session::new(config(AuthPolicy::Optional, limits), now(), &mut rng);
    s.poll();
    // A store that never answers, and a client opening and closing one REQ after another.
    let mut refused = 0;
    for _ in 0..10 {
        s.handle(now(), Input::Frame(req("q", vec![Filter::default()])));
        s.handle(now(), Input::Frame(r#"["CLOSE","q"]"#.into()));
        while let Some(o) = s.poll() {
            if let Output::Send(o) = o {
                let why = closed_for(&[o], "q").unwrap();
                assert!(why.starts_with("rate-limited:"), "{why}");
                refused += 1;
            }
        }
    }
    assert_eq!(
        s.pending_requests(),
        5,
        "2 × 2 subscriptions + 1 negentropy session"
    );
    assert_eq!(refused, 5);
}

#[test]
fn events_a_store_should_not_have_given_are_never_sent() {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let mut s = Session::new(
        config(AuthPolicy::Optional, Limits::DEFAULT),
        now(),
        &mut rng,
    );
    s.poll();
    s.handle(now(), Input::Frame(req("q", vec![kinds_filter(&[1])])));
    let Some(Output::Store { request, .. }) = s.poll() else {
        panic!()
    };
    let k = key(1);
    let wrong_kind = ev(&k, 2, NOW, vec![]);
    let expired = ev(&k, 1, NOW - 5, vec![expiration::tag(NOW)]);
    s.handle(
        now(),
        Input::Stored {
            request,
            reply: StoreReply::Page(vec![wrong_kind, expired]),
        },
    );
    let mut sent = Vec::new();
    while let Some(o) = s.poll() {
        if let Output::Send(o) = o {
            sent.push(o);
        }
    }
    assert_eq!(events_for(&sent, "q"), (vec![], true));
    assert_eq!(s.stats().store_mismatches, 2);
}

// --- Kinds through a session: NIP-01 ranges, NIP-09, NIP-40, NIP-62 ---

#[test]
fn an_ephemeral_event_reaches_live_subscriptions_and_is_never_stored() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let d = connect(&mut h, 2);
    h.send(d, &req("live", vec![kinds_filter(&[20_001])]));
    h.take(d);
    let e = ev(&key(1), 20_001, NOW, vec![]);
    assert_eq!(publish(&mut h, c, &e), (true, String::new()));
    assert_eq!(events_for(&h.take(d), "live").0, vec![e.clone()]);
    assert!(h.store.is_empty());
    h.send(d, &req("again", vec![kinds_filter(&[20_001])]));
    assert_eq!(events_for(&h.take(d), "again"), (vec![], true));
}

#[test]
fn a_replaceable_event_keeps_only_its_latest_version() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let k = key(1);
    let old = ev(&k, 0, NOW - 10, vec![]);
    let new = ev(&k, 0, NOW - 5, vec![]);
    assert!(publish(&mut h, c, &new).0);
    let (ok, why) = publish(&mut h, c, &old);
    assert!(!ok && why.starts_with("duplicate:"), "{why}");
    let addr_old = ev(&k, 30_001, NOW - 10, vec![t("d", "x")]);
    let addr_new = ev(&k, 30_001, NOW - 5, vec![t("d", "x")]);
    assert!(publish(&mut h, c, &addr_old).0);
    assert!(publish(&mut h, c, &addr_new).0);
    h.send(c, &req("s", vec![Filter::default()]));
    let (got, _) = events_for(&h.take(c), "s");
    assert_eq!(got.len(), 2);
    assert!(got.contains(&new) && got.contains(&addr_new));
}

#[test]
fn a_deletion_request_deletes_its_authors_events_only() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let alice = key(1);
    let bob = key(2);
    let mine = ev(&alice, 1, NOW - 10, vec![]);
    let theirs = ev(&bob, 1, NOW - 10, vec![]);
    assert!(publish(&mut h, c, &mine).0);
    assert!(publish(&mut h, c, &theirs).0);
    let del = ev(
        &alice,
        DELETION_KIND,
        NOW - 5,
        vec![t("e", &mine.id_hex()), t("e", &theirs.id_hex())],
    );
    assert!(publish(&mut h, c, &del).0);
    assert!(!h.store.contains(&mine.id));
    assert!(h.store.contains(&theirs.id));
    let (ok, why) = publish(&mut h, c, &mine);
    assert!(!ok && why.starts_with("blocked:"), "{why}");
    h.send(c, &req("s", vec![kinds_filter(&[DELETION_KIND])]));
    assert_eq!(
        events_for(&h.take(c), "s").0,
        vec![del],
        "deletions are served"
    );
}

#[test]
fn an_event_is_hidden_once_expired() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let e = ev(&key(1), 1, NOW, vec![expiration::tag(NOW + 60)]);
    assert!(publish(&mut h, c, &e).0);
    h.send(c, &req("s", vec![Filter::default()]));
    assert_eq!(events_for(&h.take(c), "s").0.len(), 1);
    h.now = Timestamp::from_secs(NOW + 60);
    h.send(c, &req("s", vec![Filter::default()]));
    assert_eq!(events_for(&h.take(c), "s"), (vec![], true));
    h.send(c, r#"["COUNT","n",{}]"#);
    assert_eq!(
        h.take(c),
        vec![Outbound::Count {
            subscription: "n".into(),
            count: 0
        }]
    );
    // And a live copy past its time is not sent either.
    h.send(c, &req("live", vec![Filter::default()]));
    h.take(c);
    h.input(c, Input::Live(e));
    assert!(h.take(c).is_empty());
}

#[test]
fn a_request_to_vanish_naming_this_relay_deletes_its_authors_events() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let alice = key(1);
    let bob = key(2);
    let note = ev(&alice, 1, NOW - 10, vec![]);
    let bobs = ev(&bob, 1, NOW - 10, vec![]);
    assert!(publish(&mut h, c, &note).0);
    assert!(publish(&mut h, c, &bobs).0);
    // Naming another relay: kept as a regular event, nothing deleted.
    let elsewhere = ev(
        &alice,
        VANISH_KIND,
        NOW - 6,
        vec![t("relay", "wss://other.example/")],
    );
    assert!(publish(&mut h, c, &elsewhere).0);
    assert!(h.store.contains(&note.id) && h.store.contains(&elsewhere.id));
    // Naming this relay (as a client writes it: no trailing slash, upper-case host).
    let vanish = ev(
        &alice,
        VANISH_KIND,
        NOW - 5,
        vec![t("relay", "wss://RELAY.example.com")],
    );
    assert_eq!(publish(&mut h, c, &vanish), (true, String::new()));
    assert!(!h.store.contains(&note.id) && !h.store.contains(&elsewhere.id));
    assert!(h.store.contains(&bobs.id));
    let (ok, why) = publish(&mut h, c, &note);
    assert!(!ok && why.starts_with("blocked:"), "{why}");
    // ALL_RELAYS applies too.
    let carol = key(3);
    let hers = ev(&carol, 1, NOW - 10, vec![]);
    assert!(publish(&mut h, c, &hers).0);
    let all = ev(&carol, VANISH_KIND, NOW - 1, vec![t("relay", ALL_RELAYS)]);
    assert!(publish(&mut h, c, &all).0);
    assert!(!h.store.contains(&hers.id));
    assert_eq!(kinds::vanish_applies(&all, URL), kinds::Vanish::Applies);
}

#[test]
fn a_relay_requiring_auth_still_follows_a_request_to_vanish() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let alice = key(1);
    let note = ev(&alice, 1, NOW - 10, vec![]);
    assert!(publish(&mut h, c, &note).0);
    h.config.auth = AuthPolicy::All;
    let d = connect(&mut h, 2);
    let (ok, why) = publish(&mut h, d, &ev(&alice, 1, NOW - 9, vec![]));
    assert!(!ok && why.starts_with("auth-required:"), "{why}");
    let vanish = ev(&alice, VANISH_KIND, NOW - 5, vec![t("relay", ALL_RELAYS)]);
    assert_eq!(publish(&mut h, d, &vanish), (true, String::new()));
    assert!(!h.store.contains(&note.id));
    // A kind 62 naming another relay is an ordinary write, and needs AUTH.
    let elsewhere = ev(
        &alice,
        VANISH_KIND,
        NOW - 4,
        vec![t("relay", "wss://x.example/")],
    );
    assert!(
        publish(&mut h, d, &elsewhere)
            .1
            .starts_with("auth-required:")
    );
}

// --- NIP-42 ---

fn auth_event(k: &Secp256k1Secret, at: u64, url: &str, challenge: &str) -> Event {
    auth::build(
        default_provider(),
        k,
        &mut ChaCha20Rng::seed_from_u64(at),
        Timestamp::from_secs(at),
        url,
        challenge,
    )
    .unwrap()
}

fn send_auth(h: &mut Harness, c: usize, e: &Event) -> (bool, String) {
    h.send(c, &ClientMessage::Auth(e.clone()).to_text());
    match h.take(c).as_slice() {
        [o] => match o.as_relay() {
            Some(RelayMessage::Ok {
                event_id,
                accepted,
                message,
            }) if *event_id == e.id => (*accepted, message.clone()),
            _ => panic!("{o:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_challenge_is_sent_on_connect_and_differs_per_connection() {
    let mut h = relay();
    let a = h.connect(&mut ChaCha20Rng::seed_from_u64(1));
    let b = h.connect(&mut ChaCha20Rng::seed_from_u64(2));
    let challenge = |h: &mut Harness, c| match h.take(c).as_slice() {
        [Outbound::Relay(RelayMessage::Auth(ch))] => ch.clone(),
        other => panic!("{other:?}"),
    };
    let (ca, cb) = (challenge(&mut h, a), challenge(&mut h, b));
    assert_eq!(ca.len(), 32);
    assert_ne!(ca, cb);
    assert_eq!(h.conns[a].session.challenge(), ca);
}

#[test]
fn auth_checks_the_challenge_relay_window_and_signature() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let ch = h.conns[c].session.challenge().to_string();
    let k = key(5);
    let refused = [
        auth_event(&k, NOW, URL, "another"),
        auth_event(&k, NOW, "wss://other.example/", &ch),
        auth_event(&k, NOW - 601, URL, &ch),
        auth_event(&k, NOW + 601, URL, &ch),
        {
            let mut e = auth_event(&k, NOW, URL, &ch);
            e.sig[0] ^= 1;
            e
        },
        {
            let mut e = auth_event(&k, NOW, URL, &ch);
            e.content.push('x');
            e
        },
    ];
    for e in &refused {
        let (ok, why) = send_auth(&mut h, c, e);
        assert!(!ok && why.starts_with("invalid:"), "{why}");
    }
    assert_eq!(h.conns[c].session.authenticated().count(), 0);
    let good = auth_event(&k, NOW - 600, "wss://relay.example.com:443/path", &ch);
    assert_eq!(send_auth(&mut h, c, &good), (true, String::new()));
    let pk = good.pubkey;
    assert_eq!(
        h.conns[c].session.authenticated().collect::<Vec<_>>(),
        vec![&pk]
    );
}

#[test]
fn a_replayed_auth_event_is_refused() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let ch = h.conns[c].session.challenge().to_string();
    let e = auth_event(&key(5), NOW, URL, &ch);
    assert!(send_auth(&mut h, c, &e).0);
    let (ok, why) = send_auth(&mut h, c, &e);
    assert!(!ok && why.starts_with("duplicate:"), "{why}");
    // On another connection the challenge differs, so the replay fails there too.
    let d = connect(&mut h, 2);
    let (ok, why) = send_auth(&mut h, d, &e);
    assert!(!ok && why.starts_with("invalid:"), "{why}");
}

#[test]
fn a_connection_authenticates_a_bounded_number_of_pubkeys() {
    let limits = Limits {
        max_auth_pubkeys: 2,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let ch = h.conns[c].session.challenge().to_string();
    assert!(send_auth(&mut h, c, &auth_event(&key(1), NOW, URL, &ch)).0);
    assert!(send_auth(&mut h, c, &auth_event(&key(2), NOW, URL, &ch)).0);
    // The same pubkey again is fine and takes no room.
    let (ok, why) = send_auth(&mut h, c, &auth_event(&key(2), NOW - 1, URL, &ch));
    assert!(ok && why.starts_with("duplicate:"), "{why}");
    let (ok, why) = send_auth(&mut h, c, &auth_event(&key(3), NOW, URL, &ch));
    assert!(!ok && why.starts_with("restricted:"), "{why}");
    assert_eq!(h.conns[c].session.authenticated().count(), 2);
}

#[test]
fn auth_required_answers_until_the_client_authenticates() {
    let mut h = relay_with(AuthPolicy::All, Limits::DEFAULT);
    let c = connect(&mut h, 1);
    let e = ev(&key(1), 1, NOW, vec![]);
    let (ok, why) = publish(&mut h, c, &e);
    assert!(!ok && why.starts_with("auth-required:"), "{why}");
    h.send(c, &req("s", vec![Filter::default()]));
    assert!(
        closed_for(&h.take(c), "s")
            .unwrap()
            .starts_with("auth-required:")
    );
    h.send(c, r#"["COUNT","n",{}]"#);
    assert!(
        closed_for(&h.take(c), "n")
            .unwrap()
            .starts_with("auth-required:")
    );
    let ch = h.conns[c].session.challenge().to_string();
    assert!(send_auth(&mut h, c, &auth_event(&key(9), NOW, URL, &ch)).0);
    assert!(publish(&mut h, c, &e).0);
    h.send(c, &req("s", vec![Filter::default()]));
    assert_eq!(events_for(&h.take(c), "s"), (vec![e], true));

    // Writes only: reads are open.
    let mut h = relay_with(AuthPolicy::Writes, Limits::DEFAULT);
    let c = connect(&mut h, 1);
    assert!(
        publish(&mut h, c, &ev(&key(1), 1, NOW, vec![]))
            .1
            .starts_with("auth-required:")
    );
    h.send(c, &req("s", vec![Filter::default()]));
    assert!(events_for(&h.take(c), "s").1);
}

// --- NIP-45 ---

#[test]
fn count_answers_the_number_of_matching_events() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let k = key(1);
    for i in 0..5 {
        assert!(publish(&mut h, c, &ev(&k, 1 + (i % 2) as u16, NOW - i, vec![])).0);
    }
    h.send(c, r#"["COUNT","n",{"kinds":[1]}]"#);
    assert_eq!(
        h.take_text(c),
        vec![r#"["COUNT","n",{"count":3}]"#.to_string()]
    );
    h.send(c, r#"["COUNT","n",{"kinds":[1]},{"kinds":[2]},{}]"#);
    assert_eq!(
        h.take_text(c),
        vec![r#"["COUNT","n",{"count":5}]"#.to_string()]
    );
    // COUNT opens no subscription.
    assert_eq!(h.conns[c].session.subscriptions().count(), 0);
}

#[test]
fn the_stats_start_at_zero() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    assert_eq!(h.conns[c].session.stats(), Stats::default());
}

// --- NIP-77 ---

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use weft_proto::core::Wakeup;
use weft_proto::nostr::limits::NEG_TOO_LARGE;
use weft_proto::nostr::relay::EventStore;

/// An event with a made-up id, written straight to the store (which does not check
/// signatures), so a test can hold thousands.
fn fake(n: u32, kind: u16, created_at: u64, tags: Vec<Vec<String>>) -> Event {
    let mut id = [0u8; 32];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id[4] = 0x77;
    Event {
        id,
        pubkey: [1; 32],
        created_at,
        kind,
        tags,
        content: String::new(),
        sig: [0; 64],
    }
}

fn neg_open(sub: &str, filter: &Filter, message: &[u8]) -> String {
    serde_json::json!(["NEG-OPEN", sub, filter.to_value(), hex(message)]).to_string()
}

fn neg_msg(sub: &str, message: &[u8]) -> String {
    serde_json::json!(["NEG-MSG", sub, hex(message)]).to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn neg_reply(out: Vec<Outbound>, sub: &str) -> Result<Vec<u8>, String> {
    match out.as_slice() {
        [
            Outbound::NegMsg {
                subscription,
                message,
            },
        ] if subscription == sub => Ok(message.clone()),
        [
            Outbound::NegErr {
                subscription,
                reason,
            },
        ] if subscription == sub => Err(reason.clone()),
        other => panic!("{other:?}"),
    }
}

/// Runs a whole NIP-77 sync as the client over `items`; returns (have, need) and the rounds.
fn sync(
    h: &mut Harness,
    c: usize,
    filter: &Filter,
    items: &[(u64, [u8; 32])],
    frame: u64,
) -> (Vec<[u8; 32]>, Vec<[u8; 32]>, usize, usize) {
    let mut storage = NegentropyStorageVector::new();
    for (t, id) in items {
        storage.insert(*t, Id::from_byte_array(*id)).unwrap();
    }
    storage.seal().unwrap();
    let mut client = Negentropy::owned(storage, frame).unwrap();
    let first = client.initiate().unwrap();
    h.send(c, &neg_open("n", filter, &first));
    let (mut have, mut need) = (Vec::new(), Vec::new());
    let mut rounds = 0;
    let mut largest = 0;
    loop {
        rounds += 1;
        assert!(rounds < 100);
        let reply = neg_reply(h.take(c), "n").unwrap();
        largest = largest.max(reply.len());
        match client
            .reconcile_with_ids(&reply, &mut have, &mut need)
            .unwrap()
        {
            Some(next) => h.send(c, &neg_msg("n", &next)),
            None => break,
        }
    }
    let ids = |v: Vec<Id>| {
        let mut v: Vec<[u8; 32]> = v.into_iter().map(|i| i.to_bytes()).collect();
        v.sort();
        v
    };
    (ids(have), ids(need), rounds, largest)
}

#[test]
fn negentropy_finds_exactly_what_each_side_lacks() {
    let limits = Limits {
        neg_frame_bytes: 4_096,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let mut client_items = Vec::new();
    let mut relay_only = Vec::new();
    for n in 0..3_000u32 {
        let e = fake(n, 1, NOW - 10_000 + u64::from(n), vec![]);
        match n % 10 {
            // The relay alone has it.
            0 => relay_only.push(e.id),
            // The client alone has it.
            1 => {
                client_items.push((e.created_at, e.id));
                continue;
            }
            _ => client_items.push((e.created_at, e.id)),
        }
        h.store.write(&e, now()).unwrap();
    }
    // Hidden from the sync as from REQ: another kind (outside the filter) and an expired event.
    h.store
        .write(&fake(9_001, 7, NOW - 5, vec![]), now())
        .unwrap();
    h.store
        .write(
            &fake(9_002, 1, NOW - 5, vec![expiration::tag(NOW - 1)]),
            now(),
        )
        .unwrap();
    let client_only: Vec<_> = (0..3_000u32)
        .filter(|n| n % 10 == 1)
        .map(|n| fake(n, 1, 0, vec![]).id)
        .collect();
    let (have, need, rounds, largest) = sync(&mut h, c, &kinds_filter(&[1]), &client_items, 4_096);
    relay_only.sort();
    assert_eq!(have, client_only, "what the client has and the relay lacks");
    assert_eq!(need, relay_only, "what the relay has and the client lacks");
    assert!(rounds > 1, "the frame limit split the reconciliation");
    assert!(
        largest <= 4_096,
        "every relay message within its frame limit: {largest}"
    );
    assert_eq!(
        h.conns[c].session.neg_sessions().collect::<Vec<_>>(),
        vec!["n"]
    );
    h.send(c, r#"["NEG-CLOSE","n"]"#);
    assert!(h.take(c).is_empty());
    assert_eq!(h.conns[c].session.neg_sessions().count(), 0);
}

#[test]
fn negentropy_against_an_empty_side_converges() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let events: Vec<_> = (0..50)
        .map(|n| fake(n, 1, NOW - 100 + u64::from(n), vec![]))
        .collect();
    for e in &events {
        h.store.write(e, now()).unwrap();
    }
    let (have, need, _, _) = sync(&mut h, c, &Filter::default(), &[], 0);
    assert!(have.is_empty());
    assert_eq!(need.len(), 50);
    // And the other way round: the relay side empty for this filter.
    let items: Vec<_> = events.iter().map(|e| (e.created_at, e.id)).collect();
    let (have, need, _, _) = sync(&mut h, c, &kinds_filter(&[2]), &items, 0);
    assert_eq!((have.len(), need.len()), (50, 0));
}

#[test]
fn a_negentropy_query_over_too_many_events_is_refused_too_large() {
    let limits = Limits {
        max_neg_items: 10,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    for n in 0..11 {
        h.store
            .write(&fake(n, 1, NOW - 100 + u64::from(n), vec![]), now())
            .unwrap();
    }
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let first = Negentropy::owned(storage, 0).unwrap().initiate().unwrap();
    h.send(c, &neg_open("n", &Filter::default(), &first));
    assert_eq!(neg_reply(h.take(c), "n"), Err(NEG_TOO_LARGE.to_string()));
    assert_eq!(h.conns[c].session.neg_sessions().count(), 0);
    // Ten is within the bound.
    h.send(
        c,
        &neg_open(
            "n",
            &Filter {
                until: Some(NOW - 91),
                ..Filter::default()
            },
            &first,
        ),
    );
    assert!(neg_reply(h.take(c), "n").is_ok());
    let mut filter = kinds_filter(&[1]);
    filter.limit = Some(3);
    h.store.write(&fake(99, 2, NOW, vec![]), now()).unwrap();
    h.send(c, &neg_open("m", &filter, &first));
    assert_eq!(
        neg_reply(h.take(c), "m"),
        Err(NEG_TOO_LARGE.to_string()),
        "limit is not a bound"
    );
}

#[test]
fn bad_negentropy_messages_get_neg_err_and_close_the_session() {
    let mut h = relay();
    let c = connect(&mut h, 1);
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let first = Negentropy::owned(storage, 0).unwrap().initiate().unwrap();
    // No such session.
    h.send(c, &neg_msg("x", &first));
    assert!(
        neg_reply(h.take(c), "x")
            .unwrap_err()
            .starts_with("closed:")
    );
    // Not hex, upper-case hex, a missing filter: NEG-ERR invalid, the socket lives.
    for text in [
        r#"["NEG-OPEN","n",{},"zz"]"#,
        r#"["NEG-OPEN","n",{},"6A"]"#,
        r#"["NEG-OPEN","n"]"#,
        r#"["NEG-MSG","n",7]"#,
    ] {
        h.send(c, text);
        assert!(
            neg_reply(h.take(c), "n")
                .unwrap_err()
                .starts_with("invalid:"),
            "{text}"
        );
    }
    // Another protocol version is answered with the one the relay speaks (V1, 0x61), and the
    // session stays open for the client to retry.
    h.send(c, &neg_open("v", &Filter::default(), &[0x62]));
    assert_eq!(neg_reply(h.take(c), "v"), Ok(vec![0x61]));
    h.send(c, r#"["NEG-CLOSE","v"]"#);
    // A message the negentropy protocol cannot read.
    h.send(c, &neg_open("n", &Filter::default(), &[0x99]));
    assert!(
        neg_reply(h.take(c), "n")
            .unwrap_err()
            .starts_with("invalid:")
    );
    assert_eq!(h.conns[c].session.neg_sessions().count(), 0);
    h.send(c, &neg_open("n", &Filter::default(), &first));
    assert!(neg_reply(h.take(c), "n").is_ok());
    // Mode 7 is not one the protocol defines.
    h.send(c, &neg_msg("n", &[0x61, 0x00, 0x00, 0x07]));
    assert!(
        neg_reply(h.take(c), "n")
            .unwrap_err()
            .starts_with("invalid:")
    );
    h.send(c, &neg_msg("n", &first));
    assert!(
        neg_reply(h.take(c), "n")
            .unwrap_err()
            .starts_with("closed:"),
        "closed after NEG-ERR"
    );
    assert_eq!(h.conns[c].closed, None);
}

#[test]
fn negentropy_sessions_are_bounded_replaced_by_id_and_closed_when_idle() {
    let limits = Limits {
        max_neg_sessions: 2,
        neg_idle_secs: 60,
        ..Limits::DEFAULT
    };
    let mut h = relay_with(AuthPolicy::Optional, limits);
    let c = connect(&mut h, 1);
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let first = Negentropy::owned(storage, 0).unwrap().initiate().unwrap();
    for sub in ["a", "b", "a"] {
        h.send(c, &neg_open(sub, &Filter::default(), &first));
        assert!(neg_reply(h.take(c), sub).is_ok(), "{sub}");
    }
    h.send(c, &neg_open("c", &Filter::default(), &first));
    assert!(
        neg_reply(h.take(c), "c")
            .unwrap_err()
            .starts_with("blocked:")
    );
    assert_eq!(
        h.conns[c].session.poll_timeout(),
        Some(Wakeup::new(
            Timestamp::from_secs(NOW + 60),
            "NIP-77 session idle"
        ))
    );
    h.now = Timestamp::from_secs(NOW + 59);
    h.timeout(c);
    assert!(h.take(c).is_empty(), "not yet idle");
    h.now = Timestamp::from_secs(NOW + 60);
    h.timeout(c);
    let out = h.take(c);
    assert_eq!(out.len(), 2);
    assert!(
        out.iter()
            .all(|o| matches!(o, Outbound::NegErr { reason, .. } if reason.starts_with("closed:")))
    );
    assert_eq!(h.conns[c].session.poll_timeout(), None);
}

#[test]
fn negentropy_needs_auth_where_reads_do() {
    let mut h = relay_with(AuthPolicy::All, Limits::DEFAULT);
    let c = connect(&mut h, 1);
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let first = Negentropy::owned(storage, 0).unwrap().initiate().unwrap();
    h.send(c, &neg_open("n", &Filter::default(), &first));
    assert!(
        neg_reply(h.take(c), "n")
            .unwrap_err()
            .starts_with("auth-required:")
    );
}
