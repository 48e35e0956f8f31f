//! NAP-MESH (`shared/specs/003_ce770fdbd3db194d.txt`) at the shell's boundary: shells over
//! in-memory links (`weft_proto::circle::harness`) in virtual time, chains and rings, strangers on
//! the transport, misbehaving members. Each test names the rule it tries to break; the rows of
//! docs/conformance/circle.md cite them.

use core::time::Duration;
use std::collections::BTreeMap;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::circle::harness::Harness;
use weft_proto::circle::member::MemberFrame;
use weft_proto::circle::napplet::{Limits, NOT_GRANTED, Reply};
use weft_proto::circle::shell::{self, Input, NappletId, Output, Shell, ShellConfig};
use weft_proto::circle::{
    BACKLOG_BUDGET_MS, BACKLOG_HOP_COST_MS, BLOB_CACHE_MS, BLOB_CALL_TIMEOUT_MS,
    BLOB_REQUEST_TIMEOUT_MS, FORWARD_CLAMP, MAX_BLOB_CALLS, MAX_BLOB_REQUESTS_IN_FLIGHT,
};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{default_provider, generate_secp256k1};
use weft_proto::nostr::Event;
use weft_proto::nostr::event::{EventId, UnsignedEvent};

type H = Harness<ChaCha20Rng>;

const APP: NappletId = NappletId(1);
const OTHER: NappletId = NappletId(2);
const T0: u64 = 1_700_000_000;

fn shell(seed: u64, config: ShellConfig) -> Shell<ChaCha20Rng> {
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let secret = generate_secp256k1(p, &mut rng);
    Shell::new(p, secret, rng, config).unwrap()
}

fn net_with(n: usize, config: ShellConfig) -> H {
    let mut h = Harness::new(Timestamp::from_secs(T0), Duration::from_millis(10), 100_000);
    for i in 0..n {
        let d = h.add(shell(1_000 + i as u64, config));
        h.input(d, Input::Grant(APP));
    }
    h
}

fn net(n: usize) -> H {
    net_with(n, ShellConfig::default())
}

fn chain(n: usize) -> H {
    let mut h = net(n);
    for i in 0..n - 1 {
        h.connect(i, i + 1);
    }
    h
}

fn ring(n: usize) -> H {
    let mut h = chain(n);
    h.connect(n - 1, 0);
    h
}

fn replies(h: &H, d: usize, who: NappletId) -> Vec<Reply> {
    h.devices[d]
        .replies
        .iter()
        .filter(|(_, n, _)| *n == who)
        .map(|(_, _, r)| r.clone())
        .collect()
}

fn last(h: &H, d: usize) -> Reply {
    replies(h, d, APP).last().cloned().expect("a reply")
}

fn publish(h: &mut H, d: usize, kind: u16, content: &str, ttl: Option<&str>) -> Reply {
    let ttl = ttl.map(|t| format!(r#","ttl":{t}"#)).unwrap_or_default();
    let text = format!(
        r#"{{"type":"mesh.publish","id":"p","event":{{"kind":{kind},"content":"{content}","tags":[["t","x"]]}}{ttl}}}"#
    );
    h.napplet(d, APP, &text);
    h.run().unwrap();
    replies(h, d, APP)
        .into_iter()
        .rev()
        .find(|r| matches!(r, Reply::PublishResult { .. }))
        .unwrap()
}

fn published(r: &Reply) -> (Event, u8) {
    match r {
        Reply::PublishResult {
            outcome: Ok((e, t)),
            ..
        } => (e.clone(), *t),
        other => panic!("not a successful publish: {other:?}"),
    }
}

fn subscribe(h: &mut H, d: usize, who: NappletId, sub: &str, filters: &str, ttl: Option<u8>) {
    let ttl = ttl.map(|t| format!(r#","ttl":{t}"#)).unwrap_or_default();
    h.napplet(
        d,
        who,
        &format!(
            r#"{{"type":"mesh.subscribe","id":"s-{sub}","subId":"{sub}","filters":{filters}{ttl}}}"#
        ),
    );
}

/// The ids delivered to `sub` on device `d`, in order.
fn delivered(h: &H, d: usize, who: NappletId, sub: &str) -> Vec<EventId> {
    replies(h, d, who)
        .into_iter()
        .filter_map(|r| match r {
            Reply::Event { sub_id, event } if sub_id == sub => Some(event.id),
            _ => None,
        })
        .collect()
}

fn kept(h: &H, d: usize, id: &EventId) -> bool {
    h.devices[d].store.iter().any(|e| e.id == *id)
}

/// A signed event by a key nobody in the circle has.
fn foreign_event(kind: u16, content: &str) -> Event {
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(77);
    let secret = generate_secp256k1(p, &mut rng);
    UnsignedEvent {
        created_at: T0,
        kind,
        tags: vec![vec!["t".into(), "x".into()]],
        content: content.into(),
    }
    .sign(p, &secret, &mut rng)
    .unwrap()
}

/// Every `Publish` frame a device sent, by event id: (link, when) each.
fn forwards(h: &H, d: usize) -> BTreeMap<EventId, Vec<(ConnId, Timestamp)>> {
    let mut m: BTreeMap<EventId, Vec<(ConnId, Timestamp)>> = BTreeMap::new();
    for (at, link, f) in &h.devices[d].sent {
        if let MemberFrame::Publish { event, .. } = f {
            m.entry(event.id).or_default().push((*link, *at));
        }
    }
    m
}

// ---- floods ----

#[test]
fn chain_ttl_2_reaches_exactly_the_devices_within_2_hops() {
    let mut h = chain(6);
    for d in 0..6 {
        subscribe(&mut h, d, APP, "all", r#"[{"kinds":[1]}]"#, Some(0));
    }
    h.run().unwrap();
    let (event, ttl) = published(&publish(&mut h, 2, 1, "hello", Some("2")));
    assert_eq!(ttl, 2);
    for d in 0..6 {
        let within = (d as i32 - 2).abs() <= 2;
        assert_eq!(kept(&h, d, &event.id), within, "device {d} kept");
        assert_eq!(
            delivered(&h, d, APP, "all") == vec![event.id],
            within,
            "device {d} delivered"
        );
    }
}

#[test]
fn ring_ttl_2_reaches_within_2_hops_and_each_id_is_forwarded_once_per_device() {
    let mut h = ring(6);
    let (event, _) = published(&publish(&mut h, 0, 1, "ring", Some("2")));
    // Circle distance from 0 in a ring of 6: 0,1,2,3,2,1.
    for (d, dist) in [0, 1, 2, 3, 2, 1].into_iter().enumerate() {
        assert_eq!(kept(&h, d, &event.id), dist <= 2, "device {d}");
    }
    for d in 0..6 {
        let f = forwards(&h, d);
        if let Some(sends) = f.get(&event.id) {
            // One forwarding round, one frame per link, never back where it came from.
            let times: std::collections::BTreeSet<_> = sends.iter().map(|(_, t)| *t).collect();
            assert_eq!(times.len(), 1, "device {d} forwarded once");
            let links: std::collections::BTreeSet<_> = sends.iter().map(|(l, _)| *l).collect();
            assert_eq!(links.len(), sends.len(), "device {d}: one frame per link");
        }
        assert!(h.devices[d].shell.stats().forwarded <= 1);
    }
    // A full ring with a budget larger than the ring: every copy arriving a second way is dropped.
    let mut h = net_with(
        6,
        ShellConfig {
            limits: Limits {
                publish_ttl: 255,
                subscribe_ttl: 2,
            },
            blobs: true,
        },
    );
    for i in 0..6 {
        h.connect(i, (i + 1) % 6);
    }
    let (event, _) = published(&publish(&mut h, 0, 1, "loop", Some("255")));
    let mut frames = 0;
    for d in 0..6 {
        assert!(kept(&h, d, &event.id));
        let f = forwards(&h, d);
        let sends = f.get(&event.id).map_or(0, Vec::len);
        assert!(sends <= 2, "device {d} sent {sends}");
        frames += sends;
    }
    assert!(frames <= 12, "the flood terminates: {frames} frames");
    let dups: u64 = h.devices.iter().map(|d| d.shell.stats().duplicates).sum();
    assert!(dups >= 1, "the second way round was dropped as a duplicate");
}

#[test]
fn forward_clamp_is_the_shells_own_whatever_budget_arrives() {
    let config = ShellConfig {
        limits: Limits {
            publish_ttl: 255,
            subscribe_ttl: 2,
        },
        blobs: true,
    };
    let mut h = net_with(8, config);
    for i in 0..7 {
        h.connect(i, i + 1);
    }
    // A napplet asking 255 hops of a shell whose user allows it: device 1 gets 254 left and
    // passes it on with FORWARD_CLAMP - 1, so it dies FORWARD_CLAMP hops past device 1.
    let (event, ttl) = published(&publish(&mut h, 0, 1, "far", Some("255")));
    assert_eq!(ttl, 255);
    let reach = 1 + FORWARD_CLAMP as usize;
    for d in 0..8 {
        assert_eq!(kept(&h, d, &event.id), d <= reach, "device {d}");
    }
    // A member sending a frame with a huge budget straight away fares no better.
    let mut h = chain(7);
    let e = {
        let (event, _) = published(&publish(&mut h, 0, 1, "seed", Some("0")));
        event
    };
    let link01 = h.devices[0]
        .shell
        .reachable()
        .first()
        .map(|(_, l)| *l)
        .unwrap();
    h.inject(
        link01,
        &MemberFrame::Publish {
            ttl: 255,
            event: e.clone(),
        }
        .to_text(),
    );
    h.run().unwrap();
    for d in 1..7 {
        assert_eq!(kept(&h, d, &e.id), d <= reach, "device {d}");
    }
}

#[test]
fn declined_members_events_are_kept_and_delivered_but_not_passed_on() {
    let mut h = chain(3);
    let k0 = h.devices[0].shell.pubkey();
    h.input(
        1,
        Input::Decline {
            peer: k0,
            decline: true,
        },
    );
    subscribe(&mut h, 1, APP, "all", r#"[{"kinds":[1]}]"#, Some(0));
    let (event, _) = published(&publish(&mut h, 0, 1, "x", Some("2")));
    assert!(kept(&h, 1, &event.id));
    assert_eq!(delivered(&h, 1, APP, "all"), vec![event.id]);
    assert!(!kept(&h, 2, &event.id), "not passed on");
    assert_eq!(h.devices[1].shell.stats().not_forwarded, 1);
    // Device 2's own events still pass through device 1: the decline is per member.
    let (e2, _) = published(&publish(&mut h, 2, 1, "y", Some("2")));
    assert!(kept(&h, 0, &e2.id));
    // Declining can be undone.
    h.input(
        1,
        Input::Decline {
            peer: k0,
            decline: false,
        },
    );
    let (e3, _) = published(&publish(&mut h, 0, 1, "z", Some("2")));
    assert!(kept(&h, 2, &e3.id));
}

#[test]
fn the_signed_event_is_byte_identical_everywhere_and_the_budget_rides_beside_it() {
    let mut h = chain(3);
    let (event, _) = published(&publish(&mut h, 0, 1, "same \u{e9} bytes", Some("2")));
    for d in 1..3 {
        let there = h.devices[d]
            .store
            .iter()
            .find(|e| e.id == event.id)
            .unwrap();
        assert_eq!(there.to_json(), event.to_json());
        assert_eq!(there.verify(default_provider()), Ok(()));
    }
    for (_, _, f) in &h.devices[0].sent {
        let text = f.to_text();
        assert!(text.starts_with(r#"["MESH",{"ttl":1},["EVENT","#), "{text}");
        assert!(!event.to_json().contains("ttl"));
    }
}

#[test]
fn mesh_traffic_needs_no_relay_and_no_internet() {
    // Every output a shell makes in a whole publish/subscribe/blobs exchange is a napplet reply,
    // a member frame on a link, or a store/blob question to its own host: there is no relay and
    // no address to reach.
    let mut a = shell(1, ShellConfig::default());
    let mut b = shell(2, ShellConfig::default());
    let now = Timestamp::from_secs(T0);
    let mut outs = Vec::new();
    for x in [&mut a, &mut b] {
        x.handle(now, Input::Online(true));
        x.handle(now, Input::Grant(APP));
    }
    let (ka, kb) = (a.pubkey(), b.pubkey());
    a.handle(now, Input::Pair { peer: kb });
    b.handle(now, Input::Pair { peer: ka });
    let ra = drain(&mut a);
    let rb = drain(&mut b);
    for o in ra {
        if let Output::Pairing(r) = o {
            b.handle(now, Input::PairingRecord(r));
        }
    }
    for o in rb {
        if let Output::Pairing(r) = o {
            a.handle(now, Input::PairingRecord(r));
        }
    }
    a.handle(
        now,
        Input::LinkUp {
            link: ConnId(1),
            key: kb,
        },
    );
    for text in [
        r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":"hi"},"ttl":1}"#,
        r#"{"type":"mesh.subscribe","id":"s","subId":"s","filters":[{}],"ttl":1}"#,
        &format!(
            r#"{{"type":"mesh.blobs","id":"b","hashes":["{}"]}}"#,
            "ab".repeat(32)
        ),
    ] {
        a.handle(
            now,
            Input::Napplet {
                napplet: APP,
                text: text.into(),
            },
        );
        outs.extend(drain(&mut a));
    }
    assert!(!outs.is_empty());
    for o in &outs {
        match o {
            Output::ToNapplet { .. } | Output::Store(_) | Output::ReadBacklog { .. } => {}
            Output::ToLink { link, .. } => assert_eq!(*link, ConnId(1)),
            other => panic!("unexpected output {other:?}"),
        }
    }
}

fn drain(s: &mut Shell<ChaCha20Rng>) -> Vec<Output> {
    std::iter::from_fn(|| s.poll()).collect()
}

/// Two paired shells, `a` linked to `b` on ConnId(1); `a` grants APP.
fn pair_of() -> (Shell<ChaCha20Rng>, Shell<ChaCha20Rng>) {
    let now = Timestamp::from_secs(T0);
    let mut a = shell(1, ShellConfig::default());
    let mut b = shell(2, ShellConfig::default());
    for x in [&mut a, &mut b] {
        x.handle(now, Input::Online(true));
        x.handle(now, Input::Grant(APP));
    }
    let (ka, kb) = (a.pubkey(), b.pubkey());
    a.handle(now, Input::Pair { peer: kb });
    b.handle(now, Input::Pair { peer: ka });
    for o in drain(&mut a) {
        if let Output::Pairing(r) = o {
            b.handle(now, Input::PairingRecord(r));
        }
    }
    for o in drain(&mut b) {
        if let Output::Pairing(r) = o {
            a.handle(now, Input::PairingRecord(r));
        }
    }
    a.handle(
        now,
        Input::LinkUp {
            link: ConnId(1),
            key: kb,
        },
    );
    b.handle(
        now,
        Input::LinkUp {
            link: ConnId(1),
            key: ka,
        },
    );
    (a, b)
}

#[test]
fn a_kept_event_is_stored_before_it_is_forwarded_or_acknowledged() {
    let (mut a, _) = pair_of();
    let now = Timestamp::from_secs(T0);
    a.handle(
        now,
        Input::Napplet {
            napplet: APP,
            text: r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":"hi"},"ttl":1}"#
                .into(),
        },
    );
    let outs = drain(&mut a);
    let pos = |f: &dyn Fn(&Output) -> bool| outs.iter().position(f).unwrap();
    let store = pos(&|o| matches!(o, Output::Store(_)));
    let link = pos(&|o| matches!(o, Output::ToLink { .. }));
    let result = pos(&|o| {
        matches!(
            o,
            Output::ToNapplet {
                reply: Reply::PublishResult { .. },
                ..
            }
        )
    });
    assert!(store < link && link < result, "{outs:?}");
    // A member's event too: kept before passed on.
    let (mut a, mut b) = pair_of();
    b.handle(
        now,
        Input::Napplet {
            napplet: APP,
            text: r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":"hi"},"ttl":3}"#
                .into(),
        },
    );
    let frame = drain(&mut b)
        .into_iter()
        .find_map(|o| match o {
            Output::ToLink { frame, .. } => Some(frame.to_text()),
            _ => None,
        })
        .unwrap();
    let mut c = shell(3, ShellConfig::default());
    let kc = c.pubkey();
    c.handle(now, Input::Pair { peer: a.pubkey() });
    a.handle(now, Input::Pair { peer: kc });
    for o in drain(&mut c) {
        if let Output::Pairing(r) = o {
            a.handle(now, Input::PairingRecord(r));
        }
    }
    drain(&mut a);
    a.handle(
        now,
        Input::LinkUp {
            link: ConnId(2),
            key: kc,
        },
    );
    a.handle(
        now,
        Input::Link {
            link: ConnId(1),
            text: frame,
        },
    );
    let outs = drain(&mut a);
    let store = outs
        .iter()
        .position(|o| matches!(o, Output::Store(_)))
        .unwrap();
    let fwd = outs
        .iter()
        .position(|o| {
            matches!(
                o,
                Output::ToLink {
                    link: ConnId(2),
                    ..
                }
            )
        })
        .unwrap();
    assert!(store < fwd, "{outs:?}");
    assert!(
        !outs.iter().any(|o| matches!(
            o,
            Output::ToLink {
                link: ConnId(1),
                ..
            }
        )),
        "never back"
    );
}

// ---- publish ----

#[test]
fn publish_is_signed_by_the_shell_which_owns_pubkey_created_at_id_and_sig() {
    let mut h = chain(2);
    let text = r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":"mine","tags":[["t","a"]],"pubkey":"0000000000000000000000000000000000000000000000000000000000000001","created_at":5,"id":"x","sig":"y"},"ttl":1}"#;
    h.napplet(0, APP, text);
    h.run().unwrap();
    let (event, _) = published(&last(&h, 0));
    assert_eq!(event.pubkey, h.devices[0].shell.pubkey());
    assert_eq!(event.created_at, T0);
    assert_eq!(event.kind, 1);
    assert_eq!(event.content, "mine");
    assert_eq!(event.tags, vec![vec!["t".to_string(), "a".to_string()]]);
    assert_eq!(event.verify(default_provider()), Ok(()));
    let Reply::PublishResult { .. } = last(&h, 0) else {
        panic!()
    };
    assert!(
        last(&h, 0)
            .to_text()
            .contains(&format!(r#""eventId":"{}""#, event.id_hex()))
    );
}

#[test]
fn publish_ttl_above_the_cap_is_clamped_and_reported_omitted_is_the_cap() {
    let mut h = chain(6);
    let (e, ttl) = published(&publish(&mut h, 0, 1, "a", Some("10")));
    assert_eq!(ttl, 3);
    assert!(kept(&h, 3, &e.id) && !kept(&h, 4, &e.id));
    let (e, ttl) = published(&publish(&mut h, 0, 1, "b", None));
    assert_eq!(ttl, 3, "omitted means the user's cap");
    assert!(kept(&h, 3, &e.id) && !kept(&h, 4, &e.id));
    let (e, ttl) = published(&publish(&mut h, 0, 1, "c", Some("1")));
    assert_eq!(ttl, 1);
    assert!(kept(&h, 1, &e.id) && !kept(&h, 2, &e.id));
}

#[test]
fn ttl_0_is_a_working_local_publish() {
    let mut h = chain(2);
    subscribe(&mut h, 0, APP, "mine", r#"[{"kinds":[1]}]"#, Some(0));
    subscribe(&mut h, 0, OTHER, "theirs", r#"[{"kinds":[1]}]"#, Some(0));
    h.input(0, Input::Grant(OTHER));
    subscribe(&mut h, 0, OTHER, "theirs", r#"[{"kinds":[1]}]"#, Some(0));
    h.run().unwrap();
    let sent_before = h.devices[0].sent.len();
    let (e, ttl) = published(&publish(&mut h, 0, 1, "here", Some("0")));
    assert_eq!(ttl, 0);
    assert!(kept(&h, 0, &e.id));
    assert_eq!(delivered(&h, 0, APP, "mine"), vec![e.id]);
    assert_eq!(delivered(&h, 0, OTHER, "theirs"), vec![e.id]);
    assert_eq!(
        h.devices[0].sent.len(),
        sent_before,
        "nothing left the device"
    );
    assert!(!kept(&h, 1, &e.id));
}

#[test]
fn malformed_ttl_is_an_error_never_a_zero() {
    let mut h = chain(2);
    for bad in ["256", "-1", "1.5", "\"2\"", "null", "1e9"] {
        let r = publish(&mut h, 0, 1, "x", Some(bad));
        let Reply::PublishResult { id, outcome } = &r else {
            panic!()
        };
        assert_eq!(id, "p");
        assert!(outcome.as_ref().unwrap_err().contains("ttl"), "{bad}");
        // Only `ok` and `error`.
        let v = r.to_value();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["error", "id", "ok", "type"], "{bad}");
    }
    assert!(h.devices[0].store.is_empty(), "nothing kept");
    assert!(h.devices[0].sent.is_empty(), "nothing sent");
    subscribe(&mut h, 0, APP, "s", "[{}]", None);
    h.napplet(
        0,
        APP,
        r#"{"type":"mesh.subscribe","id":"s2","subId":"x","filters":[{}],"ttl":300}"#,
    );
    assert!(
        matches!(last(&h, 0), Reply::SubscribeRefused { id, error } if id == "s2" && error.contains("ttl"))
    );
}

#[test]
fn ephemeral_events_travel_and_are_delivered_but_kept_nowhere_and_never_backlog() {
    let mut h = chain(3);
    for d in 0..3 {
        subscribe(&mut h, d, APP, "bell", r#"[{"kinds":[20666]}]"#, Some(0));
    }
    h.run().unwrap();
    let (e, ttl) = published(&publish(&mut h, 0, 20666, "ding", Some("2")));
    assert_eq!(ttl, 2);
    for d in 0..3 {
        assert_eq!(delivered(&h, d, APP, "bell"), vec![e.id], "device {d}");
        assert!(h.devices[d].store.is_empty(), "device {d} kept nothing");
    }
    // A later subscription finds no backlog of it, here or at members; a member that answers
    // with one anyway is not believed.
    subscribe(&mut h, 0, APP, "late", r#"[{"kinds":[20666]}]"#, Some(2));
    h.run().unwrap();
    assert!(delivered(&h, 0, APP, "late").is_empty());
    let qid = h.devices[0]
        .sent
        .iter()
        .rev()
        .find_map(|(_, _, f)| match f {
            MemberFrame::Req { qid, .. } => Some(qid.clone()),
            _ => None,
        })
        .unwrap();
    let link10 = link_to(&h, 1, 0);
    h.inject(
        link10,
        &MemberFrame::Backlog {
            qid,
            event: e.clone(),
        }
        .to_text(),
    );
    h.run().unwrap();
    assert!(delivered(&h, 0, APP, "late").is_empty());
}

// ---- subscribe ----

/// Device `d`'s link to device `to`, from `d`'s side.
fn link_to(h: &H, d: usize, to: usize) -> ConnId {
    let key = h.devices[to].shell.pubkey();
    h.devices[d]
        .shell
        .reachable()
        .into_iter()
        .find(|(k, _)| *k == key)
        .unwrap()
        .1
}

#[test]
fn eose_comes_after_this_devices_backlog_and_before_members_backlog() {
    let mut h = chain(3);
    // Events kept on each device before the subscription (ttl 0: each only at home).
    let mut ids = Vec::new();
    for d in 0..3 {
        let text = format!(
            r#"{{"type":"mesh.publish","id":"p","event":{{"kind":9,"content":"{d}","tags":[["h","kitchen"]]}},"ttl":0}}"#
        );
        h.napplet(d, APP, &text);
        ids.push(published(&last(&h, d)).0.id);
    }
    h.run().unwrap();
    subscribe(
        &mut h,
        0,
        APP,
        "room",
        r##"[{"kinds":[9],"#h":["kitchen"]}]"##,
        Some(2),
    );
    h.run().unwrap();
    let seq: Vec<(Timestamp, Reply)> = h.devices[0]
        .replies
        .iter()
        .filter(|(_, n, r)| *n == APP && r.routing().1 == Some("room"))
        .map(|(t, _, r)| (*t, r.clone()))
        .collect();
    let eose_at = seq
        .iter()
        .position(|(_, r)| matches!(r, Reply::Eose { .. }))
        .unwrap();
    assert!(matches!(&seq[eose_at].1, Reply::Eose { ttl: 2, .. }));
    // Local backlog first, then eose at once (no member waited for), then members' backlog.
    assert!(matches!(&seq[0].1, Reply::Event { event, .. } if event.id == ids[0]));
    assert_eq!(eose_at, 1);
    assert_eq!(seq[eose_at].0, seq[0].0, "eose did not wait for members");
    let after: Vec<EventId> = seq[eose_at + 1..]
        .iter()
        .filter_map(|(_, r)| match r {
            Reply::Event { event, .. } => Some(event.id),
            _ => None,
        })
        .collect();
    assert_eq!(after, vec![ids[1], ids[2]], "member 1 hop, then 2 hops");
    assert!(seq[eose_at + 1].0 > seq[eose_at].0);
    assert_eq!(
        seq.iter()
            .filter(|(_, r)| matches!(r, Reply::Eose { .. }))
            .count(),
        1
    );
    // Live events follow, until the napplet closes.
    let (live, _) = published(&publish(&mut h, 1, 9, "live", Some("1")));
    let _ = live;
    h.napplet(1, APP, r#"{"type":"mesh.info","id":"noop"}"#);
    let text = r#"{"type":"mesh.publish","id":"p","event":{"kind":9,"content":"live","tags":[["h","kitchen"]]},"ttl":1}"#;
    h.napplet(1, APP, text);
    h.run().unwrap();
    let live = published(&last(&h, 1)).0;
    assert_eq!(delivered(&h, 0, APP, "room").last(), Some(&live.id));
    h.napplet(0, APP, r#"{"type":"mesh.close","subId":"room"}"#);
    let before = replies(&h, 0, APP).len();
    h.napplet(1, APP, &text.replace("live", "after close"));
    h.run().unwrap();
    assert_eq!(
        replies(&h, 0, APP).len(),
        before,
        "nothing after close, and close has no reply"
    );
}

#[test]
fn eose_is_sent_even_when_members_never_answer() {
    let mut h = chain(2);
    h.input(1, Input::Online(false));
    subscribe(&mut h, 0, APP, "s", "[{}]", Some(1));
    assert!(matches!(last(&h, 0), Reply::Eose { ttl: 1, .. }));
    h.run().unwrap();
    assert_eq!(
        replies(&h, 0, APP)
            .iter()
            .filter(|r| matches!(r, Reply::Eose { .. }))
            .count(),
        1
    );
}

#[test]
fn subscribe_ttl_0_asks_nobody_and_ttl_is_clamped_to_subscribe_cap() {
    let mut h = chain(2);
    subscribe(&mut h, 0, APP, "s", "[{}]", Some(0));
    h.run().unwrap();
    assert!(h.devices[0].sent.is_empty());
    assert!(matches!(last(&h, 0), Reply::Eose { ttl: 0, .. }));
    subscribe(&mut h, 0, APP, "t", "[{}]", Some(200));
    assert!(
        matches!(last(&h, 0), Reply::Eose { ttl: 2, .. }),
        "subscribeTtl 2"
    );
    subscribe(&mut h, 0, APP, "u", "[{}]", None);
    assert!(
        matches!(last(&h, 0), Reply::Eose { ttl: 2, .. }),
        "omitted is the cap"
    );
    let reqs: Vec<u8> = h.devices[0]
        .sent
        .iter()
        .filter_map(|(_, _, f)| match f {
            MemberFrame::Req { ttl, .. } => Some(*ttl),
            _ => None,
        })
        .collect();
    assert_eq!(reqs, vec![1, 1], "2 hops beyond: 1 left at the member");
}

#[test]
fn members_backlog_is_delivered_once_per_subscription_even_when_seen_before() {
    // A triangle: the event is kept at 1 and 2, so 0 hears of it twice.
    let mut h = net(3);
    h.connect(0, 1);
    h.connect(1, 2);
    h.connect(0, 2);
    let (e, _) = published(&publish(&mut h, 1, 1, "both", Some("1")));
    assert!(kept(&h, 0, &e.id) && kept(&h, 2, &e.id));
    // Device 0's host loses it; device 0 has still seen the id.
    h.devices[0].store.clear();
    subscribe(&mut h, 0, APP, "s", r#"[{"kinds":[1]}]"#, Some(2));
    h.run().unwrap();
    assert_eq!(delivered(&h, 0, APP, "s"), vec![e.id]);
    assert!(
        h.devices[0].shell.stats().backlog_rejected >= 1,
        "the second copy was dropped"
    );
}

#[test]
fn members_backlog_is_checked_against_filters_and_signatures() {
    let mut h = chain(2);
    subscribe(&mut h, 0, APP, "s", r#"[{"kinds":[1]}]"#, Some(1));
    let qid = h.devices[0]
        .sent
        .iter()
        .find_map(|(_, _, f)| match f {
            MemberFrame::Req { qid, .. } => Some(qid.clone()),
            _ => None,
        })
        .unwrap();
    let from1 = link_to(&h, 1, 0);
    let good = foreign_event(1, "good");
    let wrong_kind = foreign_event(7, "other");
    let mut forged = foreign_event(1, "forged");
    forged.content.push('!');
    for e in [&wrong_kind, &forged, &good, &good] {
        h.inject(
            from1,
            &MemberFrame::Backlog {
                qid: qid.clone(),
                event: e.clone(),
            }
            .to_text(),
        );
    }
    // An answer to a request nobody made.
    h.inject(
        from1,
        &MemberFrame::Backlog {
            qid: "nope".into(),
            event: good.clone(),
        }
        .to_text(),
    );
    h.run().unwrap();
    assert_eq!(delivered(&h, 0, APP, "s"), vec![good.id]);
    assert!(h.devices[0].shell.stats().backlog_rejected >= 4);
}

#[test]
fn a_backlog_request_is_bounded_in_time_and_its_budget_shrinks_per_hop() {
    let config = ShellConfig {
        limits: Limits {
            publish_ttl: 3,
            subscribe_ttl: 255,
        },
        blobs: true,
    };
    let mut h = net_with(8, config);
    for i in 0..7 {
        h.connect(i, i + 1);
    }
    subscribe(&mut h, 0, APP, "s", "[{}]", Some(255));
    h.run().unwrap();
    let mut budgets = Vec::new();
    for d in 0..8 {
        for (_, _, f) in &h.devices[d].sent {
            if let MemberFrame::Req { budget_ms, ttl, .. } = f {
                budgets.push((d, *budget_ms, *ttl));
            }
        }
    }
    assert_eq!(
        budgets[0],
        (0, BACKLOG_BUDGET_MS - BACKLOG_HOP_COST_MS, 254)
    );
    for w in budgets.windows(2) {
        assert!(w[1].1 + BACKLOG_HOP_COST_MS == w[0].1, "{budgets:?}");
    }
    // Both bounds: the shell's clamp (3 hops past device 1) and the time budget.
    assert!(budgets.iter().all(|(d, _, _)| *d <= 3), "{budgets:?}");
    // A late answer is dropped.
    let qid = match &h.devices[0].sent[0].2 {
        MemberFrame::Req { qid, .. } => qid.clone(),
        other => panic!("{other:?}"),
    };
    let from1 = link_to(&h, 1, 0);
    let late = foreign_event(3, "late");
    h.run_until(Timestamp::from_millis(
        Timestamp::from_secs(T0).as_millis() + BACKLOG_BUDGET_MS + 1,
    ))
    .unwrap();
    h.inject(
        from1,
        &MemberFrame::Backlog {
            qid,
            event: late.clone(),
        }
        .to_text(),
    );
    h.run().unwrap();
    assert!(!delivered(&h, 0, APP, "s").contains(&late.id));
}

#[test]
fn a_refused_subscribe_answers_its_id_and_no_closed_follows() {
    let mut h = chain(2);
    for (text, want) in [
        (
            r#"{"type":"mesh.subscribe","id":"a","filters":[{}]}"#,
            "subId",
        ),
        (
            r#"{"type":"mesh.subscribe","id":"b","subId":"x","filters":[{"kinds":"no"}]}"#,
            "filters",
        ),
        (
            r#"{"type":"mesh.subscribe","id":"c","subId":"x","filters":[{}],"ttl":1.5}"#,
            "ttl",
        ),
    ] {
        h.napplet(0, APP, text);
        let Reply::SubscribeRefused { id, error } = last(&h, 0) else {
            panic!("{text}")
        };
        assert!(text.contains(&format!(r#""id":"{id}""#)));
        assert!(error.contains(want), "{error}");
    }
    h.napplet(
        0,
        OTHER,
        r#"{"type":"mesh.subscribe","id":"s2","subId":"bell","filters":[{"kinds":[20666]}]}"#,
    );
    assert_eq!(
        replies(&h, 0, OTHER),
        vec![Reply::SubscribeRefused {
            id: "s2".into(),
            error: NOT_GRANTED.into()
        }]
    );
    h.run().unwrap();
    assert!(
        !h.devices[0]
            .replies
            .iter()
            .any(|(_, _, r)| matches!(r, Reply::Closed { .. }))
    );
    assert_eq!(h.devices[0].shell.subscription_count(), 0);
}

#[test]
fn an_unreadable_backlog_ends_the_subscription_with_a_reason() {
    let mut h = chain(1);
    h.devices[0].store_broken = true;
    subscribe(&mut h, 0, APP, "s", "[{}]", None);
    assert_eq!(
        last(&h, 0),
        Reply::Closed {
            sub_id: "s".into(),
            reason: Some(shell::BACKLOG_UNREADABLE.into())
        }
    );
    assert_eq!(h.devices[0].shell.subscription_count(), 0);
}

#[test]
fn subscription_ids_are_scoped_per_napplet_and_a_repeated_id_replaces() {
    let mut h = chain(1);
    h.input(0, Input::Grant(OTHER));
    subscribe(&mut h, 0, APP, "same", r#"[{"kinds":[1]}]"#, Some(0));
    subscribe(&mut h, 0, OTHER, "same", r#"[{"kinds":[2]}]"#, Some(0));
    let (e1, _) = published(&publish(&mut h, 0, 1, "one", Some("0")));
    let (e2, _) = published(&publish(&mut h, 0, 2, "two", Some("0")));
    assert_eq!(delivered(&h, 0, APP, "same"), vec![e1.id]);
    assert_eq!(delivered(&h, 0, OTHER, "same"), vec![e2.id]);
    // The same id again replaces the filters, as NIP-01's REQ.
    subscribe(&mut h, 0, APP, "same", r#"[{"kinds":[3]}]"#, Some(0));
    let (e3, _) = published(&publish(&mut h, 0, 3, "three", Some("0")));
    published(&publish(&mut h, 0, 1, "one again", Some("0")));
    assert_eq!(delivered(&h, 0, APP, "same").last(), Some(&e3.id));
    assert_eq!(h.devices[0].shell.subscription_count(), 2);
}

// ---- grants ----

#[test]
fn revocation_takes_effect_on_the_next_call_and_the_next_live_delivery() {
    let mut h = chain(2);
    subscribe(&mut h, 0, APP, "s", r#"[{"kinds":[1]}]"#, Some(0));
    h.input(0, Input::Revoke(APP));
    assert_eq!(
        last(&h, 0),
        Reply::Closed {
            sub_id: "s".into(),
            reason: Some(NOT_GRANTED.into())
        }
    );
    let before = replies(&h, 0, APP).len();
    published(&publish(&mut h, 1, 1, "after", Some("1")));
    assert_eq!(
        replies(&h, 0, APP).len(),
        before,
        "no delivery after revocation"
    );
    for (text, want) in [
        (r#"{"type":"mesh.info","id":"i"}"#, "mesh.info.result"),
        (
            r#"{"type":"mesh.publish","id":"p","event":{"kind":1,"content":""}}"#,
            "mesh.publish.result",
        ),
        (
            r#"{"type":"mesh.blobs","id":"b","hashes":[]}"#,
            "mesh.blobs.result",
        ),
        (
            r#"{"type":"mesh.subscribe","id":"s","subId":"s","filters":[{}]}"#,
            "mesh.subscribe.result",
        ),
        // Malformed and ungranted: the grant is what is reported.
        (
            r#"{"type":"mesh.publish","id":"p","ttl":-1}"#,
            "mesh.publish.result",
        ),
    ] {
        h.napplet(0, APP, text);
        let r = last(&h, 0);
        let v = r.to_value();
        assert_eq!(v["type"], want);
        assert_eq!(v["error"], NOT_GRANTED, "{text}");
    }
    assert!(
        h.devices[0].sent.is_empty(),
        "a revoked napplet reaches nobody"
    );
    // Granting again works on the next call.
    h.input(0, Input::Grant(APP));
    assert!(published(&publish(&mut h, 0, 1, "back", Some("1"))).1 == 1);
}

#[test]
fn every_info_publish_and_blobs_is_answered_with_its_own_id() {
    let mut h = chain(2);
    let hash = "cd".repeat(32);
    for (text, id) in [
        (r#"{"type":"mesh.info","id":"i-1"}"#.to_string(), "i-1"),
        (
            r#"{"type":"mesh.publish","id":"p-1","event":{"kind":1,"content":""}}"#.into(),
            "p-1",
        ),
        (
            r#"{"type":"mesh.publish","id":"p-2","event":{"kind":"x"}}"#.into(),
            "p-2",
        ),
        (
            format!(r#"{{"type":"mesh.blobs","id":"b-1","hashes":["{hash}"]}}"#),
            "b-1",
        ),
        (
            r#"{"type":"mesh.blobs","id":"b-2","hashes":"nope"}"#.into(),
            "b-2",
        ),
        (
            r#"{"type":"mesh.info","id":"i-2","extra":[1,2]}"#.into(),
            "i-2",
        ),
    ] {
        h.napplet(0, APP, &text);
        h.run().unwrap();
        let got: Vec<String> = replies(&h, 0, APP)
            .iter()
            .filter_map(|r| r.routing().0.map(String::from))
            .collect();
        assert_eq!(got.last().map(String::as_str), Some(id), "{text}");
    }
    // An opened subscription answers with deliveries only; a close answers nothing; a message
    // with no readable id cannot be answered and is counted.
    let n = replies(&h, 0, APP).len();
    subscribe(&mut h, 0, APP, "s", r#"[{"kinds":[12345]}]"#, Some(0));
    assert!(matches!(&replies(&h, 0, APP)[n..], [Reply::Eose { .. }]));
    h.napplet(0, APP, r#"{"type":"mesh.close","subId":"s"}"#);
    h.napplet(0, APP, r#"{"type":"mesh.close","subId":"never-opened"}"#);
    h.napplet(0, APP, r#"{"type":"mesh.info"}"#);
    h.napplet(0, APP, "not json");
    assert_eq!(replies(&h, 0, APP).len(), n + 1);
    assert_eq!(h.devices[0].shell.stats().napplet_unanswerable, 2);
}

// ---- info ----

#[test]
fn info_reports_online_reachable_members_and_caps() {
    let mut h = chain(3);
    h.napplet(1, APP, r#"{"type":"mesh.info","id":"i1"}"#);
    assert_eq!(
        last(&h, 1),
        Reply::InfoResult {
            id: "i1".into(),
            online: true,
            peers: 2,
            limits: Limits {
                publish_ttl: 3,
                subscribe_ttl: 2
            },
            error: None
        }
    );
    // Offline is `online: false`, not an error.
    h.input(1, Input::Online(false));
    h.napplet(1, APP, r#"{"type":"mesh.info","id":"i2"}"#);
    assert!(matches!(
        last(&h, 1),
        Reply::InfoResult {
            online: false,
            peers: 0,
            error: None,
            ..
        }
    ));
    // Counts only: nothing in the answer names a member.
    h.input(1, Input::Online(true));
    h.napplet(1, APP, r#"{"type":"mesh.info","id":"i3"}"#);
    let text = last(&h, 1).to_text();
    for d in [0, 2] {
        let key = h.devices[d].shell.pubkey();
        assert!(!text.contains(&weft_proto::codec::hex::encode(&key)));
    }
}

#[test]
fn pairings_are_kept_while_no_link_exists_and_a_reachable_stranger_is_never_a_member() {
    let mut h = net(3);
    let (l01, _) = h.connect(0, 1);
    h.cut(l01);
    h.napplet(0, APP, r#"{"type":"mesh.info","id":"i"}"#);
    assert!(matches!(last(&h, 0), Reply::InfoResult { peers: 0, .. }));
    assert!(
        h.devices[0]
            .shell
            .circle()
            .is_member(&h.devices[1].shell.pubkey())
    );
    // Device 2 is on the transport, proven, but never paired: a stranger.
    let (l02, l20) = h.link(0, 2);
    h.link(0, 1);
    h.napplet(0, APP, r#"{"type":"mesh.info","id":"i"}"#);
    assert!(
        matches!(last(&h, 0), Reply::InfoResult { peers: 1, .. }),
        "the member is back, the stranger is not one"
    );
    let (e, _) = published(&publish(&mut h, 0, 1, "members only", Some("3")));
    subscribe(&mut h, 0, APP, "s", "[{}]", Some(2));
    h.napplet(
        0,
        APP,
        &format!(
            r#"{{"type":"mesh.blobs","id":"b","hashes":["{}"]}}"#,
            "ee".repeat(32)
        ),
    );
    h.run().unwrap();
    assert!(kept(&h, 1, &e.id));
    assert!(!kept(&h, 2, &e.id));
    assert!(
        !h.devices[0].sent.iter().any(|(_, l, _)| *l == l02),
        "the stranger got nothing and was asked nothing"
    );
    // What the stranger sends is dropped and counted.
    let theirs = foreign_event(1, "from a stranger");
    h.inject(
        l20,
        &MemberFrame::Publish {
            ttl: 3,
            event: theirs.clone(),
        }
        .to_text(),
    );
    h.inject(
        l20,
        &MemberFrame::Have {
            qid: "q".into(),
            hashes: vec![[1; 32]],
        }
        .to_text(),
    );
    h.run().unwrap();
    assert!(!kept(&h, 0, &theirs.id));
    assert!(h.devices[0].shell.stats().stranger_frames >= 2);
    // Half a pairing is no edge: device 2 made its record, device 0 did not.
    let k0 = h.devices[0].shell.pubkey();
    h.input(2, Input::Pair { peer: k0 });
    h.napplet(0, APP, r#"{"type":"mesh.info","id":"i"}"#);
    assert!(matches!(last(&h, 0), Reply::InfoResult { peers: 1, .. }));
    // Unpairing ends the edge at once.
    let k1 = h.devices[1].shell.pubkey();
    h.input(0, Input::Unpair(k1));
    h.napplet(0, APP, r#"{"type":"mesh.info","id":"i"}"#);
    assert!(matches!(last(&h, 0), Reply::InfoResult { peers: 0, .. }));
}

#[test]
fn circles_are_per_user() {
    // 0–1 and 1–2 paired: 1's circle holds both, 0's only 1, 2's only 1; no shared roster.
    let h = chain(3);
    let members = |d: usize| h.devices[d].shell.circle().members().count();
    assert_eq!((members(0), members(1), members(2)), (1, 2, 1));
    let k2 = h.devices[2].shell.pubkey();
    assert!(!h.devices[0].shell.circle().is_member(&k2));
}

#[test]
fn default_caps_are_3_and_2_and_separate() {
    let c = ShellConfig::default();
    assert_eq!(
        c.limits,
        Limits {
            publish_ttl: 3,
            subscribe_ttl: 2
        }
    );
    assert!(c.limits.subscribe_ttl < c.limits.publish_ttl);
}

// ---- blobs ----

fn blobs_call(h: &mut H, d: usize, hashes: &[String]) -> Reply {
    let list: Vec<String> = hashes.iter().map(|x| format!("\"{x}\"")).collect();
    h.napplet(
        d,
        APP,
        &format!(
            r#"{{"type":"mesh.blobs","id":"b","hashes":[{}]}}"#,
            list.join(",")
        ),
    );
    h.run().unwrap();
    replies(h, d, APP)
        .into_iter()
        .rev()
        .find(|r| matches!(r, Reply::BlobsResult { .. }))
        .unwrap()
}

/// A star: device 0 paired and linked with each of the others.
fn star(n: usize) -> H {
    let mut h = net(n);
    for i in 1..n {
        h.connect(0, i);
    }
    h
}

#[test]
fn blobs_are_counted_per_hash_across_reachable_members() {
    let mut h = star(4);
    let x = [0xb1; 32];
    h.devices[1].blobs.insert(x);
    h.devices[2].blobs.insert(x);
    // A member of a member holds it too: not asked (blobs asks members, one hop).
    h.connect(3, 0);
    let far = h.add(shell(99, ShellConfig::default()));
    h.connect(3, far);
    h.devices[far].blobs.insert(x);
    let hx = weft_proto::codec::hex::encode(&x);
    let zero = format!("{:064x}", 1);
    let r = blobs_call(&mut h, 0, &[hx.to_uppercase(), zero.clone()]);
    let Reply::BlobsResult {
        peers,
        blobs,
        error,
        id,
    } = r
    else {
        panic!()
    };
    assert_eq!((id.as_str(), peers, error), ("b", 3, None));
    assert_eq!(
        blobs,
        BTreeMap::from([(hx, 2), (zero, 0)]),
        "lower-case keys, 0 when none"
    );
    // Only blob questions, only to members, never a body.
    for (_, link, f) in &h.devices[0].sent {
        assert!(matches!(f, MemberFrame::Have { .. }), "{f:?}");
        assert!(
            h.devices[0]
                .shell
                .reachable()
                .iter()
                .any(|(_, l)| l == link)
        );
    }
    assert!(
        !h.devices[far]
            .sent
            .iter()
            .any(|(_, _, f)| matches!(f, MemberFrame::Has { .. }))
    );
}

#[test]
fn a_members_answer_counts_only_for_what_was_asked() {
    let mut h = star(2);
    let asked = format!("{:064x}", 5);
    h.napplet(
        0,
        APP,
        &format!(r#"{{"type":"mesh.blobs","id":"b","hashes":["{asked}"]}}"#),
    );
    let qid = match &h.devices[0].sent[0].2 {
        MemberFrame::Have { qid, .. } => qid.clone(),
        f => panic!("{f:?}"),
    };
    // The member answers with something else first (a "redirect" to other blobs): not counted.
    let from1 = link_to(&h, 1, 0);
    h.inject(
        from1,
        &MemberFrame::Has {
            qid: qid.clone(),
            hashes: vec![[9; 32]],
        }
        .to_text(),
    );
    h.devices[1].blobs.insert([9; 32]);
    h.run().unwrap();
    let Reply::BlobsResult { blobs, .. } = last(&h, 0) else {
        panic!()
    };
    assert_eq!(blobs, BTreeMap::from([(asked, 0)]));
}

#[test]
fn sixty_five_hashes_are_refused_whole_and_nobody_is_asked() {
    let mut h = star(3);
    let hashes: Vec<String> = (0..65).map(|i| format!("{i:064x}")).collect();
    let r = blobs_call(&mut h, 0, &hashes);
    let Reply::BlobsResult { error, blobs, .. } = &r else {
        panic!()
    };
    assert!(error.as_deref().unwrap().contains("64"));
    assert!(blobs.is_empty(), "not cut short to 64");
    assert!(h.devices[0].sent.is_empty());
    let r = blobs_call(&mut h, 0, &hashes[..64]);
    let Reply::BlobsResult {
        error: None, blobs, ..
    } = &r
    else {
        panic!("{r:?}")
    };
    assert_eq!(blobs.len(), 64);
    for bad in ["xyz", "00"] {
        let r = blobs_call(&mut h, 0, &[bad.to_string()]);
        assert!(matches!(r, Reply::BlobsResult { error: Some(_), .. }));
    }
    h.napplet(0, APP, r#"{"type":"mesh.blobs","id":"m"}"#);
    assert!(matches!(
        last(&h, 0),
        Reply::BlobsResult { error: Some(_), .. }
    ));
}

#[test]
fn blobs_on_an_offline_circle_are_zeros_and_a_shell_that_cannot_ask_says_so() {
    let mut h = star(2);
    h.input(0, Input::Online(false));
    let hash = "ab".repeat(32);
    let r = blobs_call(&mut h, 0, std::slice::from_ref(&hash));
    assert_eq!(
        r,
        Reply::BlobsResult {
            id: "b".into(),
            peers: 0,
            blobs: BTreeMap::from([(hash.clone(), 0)]),
            error: None
        }
    );
    let mut h = net_with(
        2,
        ShellConfig {
            blobs: false,
            ..ShellConfig::default()
        },
    );
    h.connect(0, 1);
    let r = blobs_call(&mut h, 0, &[hash]);
    assert!(
        matches!(r, Reply::BlobsResult { error: Some(e), .. } if e == shell::BLOBS_UNSUPPORTED)
    );
}

#[test]
fn a_member_that_does_not_answer_in_time_counts_as_not_holding() {
    let mut h = star(3);
    let x = [7; 32];
    h.devices[1].blobs.insert(x);
    h.devices[2].blobs.insert(x);
    h.input(2, Input::Online(false)); // linked, but its shell answers nobody
    let start = h.now();
    let r = blobs_call(&mut h, 0, &[weft_proto::codec::hex::encode(&x)]);
    let Reply::BlobsResult { peers, blobs, .. } = r else {
        panic!()
    };
    assert_eq!(peers, 2);
    assert_eq!(blobs.values().copied().collect::<Vec<_>>(), vec![1]);
    let at = h.devices[0].replies.last().unwrap().0;
    assert_eq!(at.as_millis() - start.as_millis(), BLOB_REQUEST_TIMEOUT_MS);
}

#[test]
fn blob_calls_are_bounded_in_questions_in_flight_and_in_total_time() {
    let n = 1 + 40;
    let mut h = star(n);
    for d in 1..n {
        h.input(d, Input::Online(false)); // nobody answers
    }
    let start = h.now();
    h.napplet(
        0,
        APP,
        &format!(
            r#"{{"type":"mesh.blobs","id":"b","hashes":["{}"]}}"#,
            "aa".repeat(32)
        ),
    );
    let first_wave = h.devices[0].sent.len();
    assert_eq!(first_wave, MAX_BLOB_REQUESTS_IN_FLIGHT);
    h.run().unwrap();
    let at = h.devices[0].replies.last().unwrap().0;
    assert_eq!(at.as_millis() - start.as_millis(), BLOB_CALL_TIMEOUT_MS);
    assert!(matches!(last(&h, 0), Reply::BlobsResult { peers: 40, .. }));
    // Never more than MAX_BLOB_REQUESTS_IN_FLIGHT questions out within any request window.
    let sends: Vec<u64> = h.devices[0]
        .sent
        .iter()
        .map(|(t, _, _)| t.as_millis())
        .collect();
    for &t in &sends {
        let window = sends
            .iter()
            .filter(|&&s| s <= t && s + BLOB_REQUEST_TIMEOUT_MS > t)
            .count();
        assert!(window <= MAX_BLOB_REQUESTS_IN_FLIGHT);
    }
}

#[test]
fn blob_calls_beyond_the_concurrency_bound_are_refused_and_answers_are_remembered_briefly() {
    let mut h = star(2);
    h.input(1, Input::Online(false));
    for i in 0..=MAX_BLOB_CALLS {
        h.napplet(
            0,
            APP,
            &format!(
                r#"{{"type":"mesh.blobs","id":"c{i}","hashes":["{}"]}}"#,
                "bb".repeat(32)
            ),
        );
    }
    assert!(
        matches!(last(&h, 0), Reply::BlobsResult { id, error: Some(e), .. } if id == format!("c{MAX_BLOB_CALLS}") && e == shell::BLOBS_BUSY)
    );
    h.run().unwrap();
    // Now with a member that answers: a second call within the memory asks nobody.
    let mut h = star(2);
    h.devices[1].blobs.insert([3; 32]);
    let hash = weft_proto::codec::hex::encode(&[3; 32]);
    blobs_call(&mut h, 0, std::slice::from_ref(&hash));
    let asked = h.devices[0].sent.len();
    let r = blobs_call(&mut h, 0, std::slice::from_ref(&hash));
    assert!(matches!(r, Reply::BlobsResult { ref blobs, .. } if blobs[&hash] == 1));
    assert_eq!(h.devices[0].sent.len(), asked, "answered from memory");
    let later = Timestamp::from_millis(h.now().as_millis() + BLOB_CACHE_MS);
    h.run_until(later).unwrap();
    blobs_call(&mut h, 0, std::slice::from_ref(&hash));
    assert_eq!(
        h.devices[0].sent.len(),
        asked + 1,
        "forgotten after the memory"
    );
}

// ---- bounds under a misbehaving member or napplet ----

#[test]
fn a_member_asking_faster_than_its_rate_is_answered_with_ends_and_nothing_is_passed_on() {
    use weft_proto::circle::MEMBER_REQUEST_RATE;
    let mut h = chain(3);
    let from1 = link_to(&h, 1, 0);
    let asks = MEMBER_REQUEST_RATE.burst as usize + 10;
    for i in 0..asks {
        h.inject(
            from1,
            &MemberFrame::Req {
                ttl: 2,
                qid: format!("q{i}"),
                budget_ms: 8_000,
                filters: vec![Default::default()],
            }
            .to_text(),
        );
    }
    for i in 0..asks {
        h.inject(
            from1,
            &MemberFrame::Have {
                qid: format!("h{i}"),
                hashes: vec![[1; 32]],
            }
            .to_text(),
        );
    }
    h.run_until(Timestamp::from_millis(
        Timestamp::from_secs(T0).as_millis() + 100,
    ))
    .unwrap();
    let stats = h.devices[0].shell.stats().clone();
    assert_eq!(
        stats.requests_limited,
        asks as u64 + 10,
        "burst then refused"
    );
    let ends = h.devices[0]
        .sent
        .iter()
        .filter(|(_, _, f)| matches!(f, MemberFrame::BacklogEnd { .. }))
        .count();
    let has = h.devices[0]
        .sent
        .iter()
        .filter(|(_, _, f)| matches!(f, MemberFrame::Has { .. }))
        .count();
    assert_eq!(
        (ends, has),
        (asks, asks),
        "every request still gets its end"
    );
    // Device 0 has no other member: nothing was passed on, and a refused request never is.
    assert!(
        !h.devices[0]
            .sent
            .iter()
            .any(|(_, _, f)| matches!(f, MemberFrame::Req { .. }))
    );
    // The budget refills.
    h.run_until(Timestamp::from_secs(T0 + 10)).unwrap();
    h.inject(
        from1,
        &MemberFrame::Have {
            qid: "later".into(),
            hashes: vec![[1; 32]],
        }
        .to_text(),
    );
    h.run().unwrap();
    assert_eq!(
        h.devices[0].shell.stats().requests_limited,
        stats.requests_limited
    );
}

#[test]
fn the_seen_set_stays_bounded_under_a_flood_of_distinct_events() {
    use weft_proto::circle::SEEN_CAPACITY;
    let mut h = chain(2);
    let from1 = link_to(&h, 1, 0);
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let secret = generate_secp256k1(p, &mut rng);
    let events: Vec<Event> = (0..SEEN_CAPACITY + 1)
        .map(|i| {
            UnsignedEvent {
                created_at: T0,
                kind: 20_001,
                tags: vec![],
                content: i.to_string(),
            }
            .sign(p, &secret, &mut rng)
            .unwrap()
        })
        .collect();
    for e in &events {
        h.inject(
            from1,
            &MemberFrame::Publish {
                ttl: 0,
                event: e.clone(),
            }
            .to_text(),
        );
    }
    h.run().unwrap();
    // The first id was evicted to make room: a copy now is taken as new, not as a duplicate,
    // while the most recent one is still remembered.
    let dups = h.devices[0].shell.stats().duplicates;
    for e in [&events[SEEN_CAPACITY], &events[0]] {
        h.inject(
            from1,
            &MemberFrame::Publish {
                ttl: 0,
                event: e.clone(),
            }
            .to_text(),
        );
    }
    h.run().unwrap();
    assert_eq!(h.devices[0].shell.stats().duplicates, dups + 1);
}

#[test]
fn a_napplet_that_goes_away_leaves_no_subscription_and_gets_nothing() {
    let mut h = chain(2);
    subscribe(&mut h, 0, APP, "s", r#"[{"kinds":[1]}]"#, Some(1));
    h.napplet(
        0,
        APP,
        &format!(
            r#"{{"type":"mesh.blobs","id":"b","hashes":["{}"]}}"#,
            "aa".repeat(32)
        ),
    );
    h.input(0, Input::NappletGone(APP));
    assert_eq!(h.devices[0].shell.subscription_count(), 0);
    let before = replies(&h, 0, APP).len();
    published(&publish(&mut h, 1, 1, "to nobody", Some("1")));
    h.run().unwrap();
    assert_eq!(
        replies(&h, 0, APP).len(),
        before,
        "no delivery, no blob result"
    );
}

#[test]
fn subscriptions_per_napplet_are_bounded() {
    use weft_proto::circle::MAX_SUBS_PER_NAPPLET;
    let mut h = chain(1);
    for i in 0..MAX_SUBS_PER_NAPPLET {
        subscribe(&mut h, 0, APP, &format!("s{i}"), "[{}]", Some(0));
    }
    assert_eq!(
        h.devices[0].shell.subscription_count(),
        MAX_SUBS_PER_NAPPLET
    );
    subscribe(&mut h, 0, APP, "one-more", "[{}]", Some(0));
    assert!(
        matches!(last(&h, 0), Reply::SubscribeRefused { error, .. } if error == shell::TOO_MANY_SUBS)
    );
    // Replacing an open one is not one more.
    subscribe(&mut h, 0, APP, "s0", "[{}]", Some(0));
    assert!(matches!(last(&h, 0), Reply::Eose { .. }));
    assert_eq!(
        h.devices[0].shell.subscription_count(),
        MAX_SUBS_PER_NAPPLET
    );
}

// ---- random circles ----

/// A tiny deterministic generator for topologies (the shells' own randomness is ChaCha20).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_circles_with_strangers_keep_every_invariant() {
    for seed in 0..40u64 {
        let mut g = Lcg(seed);
        let n = 6 + g.below(7) as usize;
        let mut h = Harness::new(Timestamp::from_secs(T0), Duration::from_millis(10), 100_000);
        for i in 0..n {
            let d = h.add(shell(seed * 100 + i as u64, ShellConfig::default()));
            h.input(d, Input::Grant(APP));
        }
        let mut adj = vec![Vec::new(); n];
        let mut stranger_links = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                match g.below(10) {
                    0..=2 => {
                        h.connect(a, b);
                        adj[a].push(b);
                        adj[b].push(a);
                    }
                    3 => {
                        let (la, lb) = h.link(a, b);
                        stranger_links.extend([la, lb]);
                    }
                    _ => {}
                }
            }
        }
        for d in 0..n {
            subscribe(&mut h, d, APP, "live", r#"[{"kinds":[1]}]"#, Some(0));
        }
        let origin = g.below(n as u64) as usize;
        let asked = g.below(5);
        let (event, ttl) = published(&publish(
            &mut h,
            origin,
            1,
            &format!("seed {seed}"),
            Some(&asked.to_string()),
        ));
        assert_eq!(u64::from(ttl), asked.min(3), "seed {seed}");
        // Circle distances from the origin.
        let mut dist = vec![usize::MAX; n];
        dist[origin] = 0;
        let mut queue = std::collections::VecDeque::from([origin]);
        while let Some(x) = queue.pop_front() {
            for &y in &adj[x] {
                if dist[y] == usize::MAX {
                    dist[y] = dist[x] + 1;
                    queue.push_back(y);
                }
            }
        }
        for (d, dist) in dist.iter().enumerate() {
            let within = *dist <= ttl as usize;
            assert_eq!(kept(&h, d, &event.id), within, "seed {seed} device {d}");
            assert_eq!(
                delivered(&h, d, APP, "live").contains(&event.id),
                within,
                "seed {seed} device {d}"
            );
            // At most once per device, never on a stranger's link.
            let f = forwards(&h, d);
            if let Some(sends) = f.get(&event.id) {
                let times: std::collections::BTreeSet<_> = sends.iter().map(|(_, t)| *t).collect();
                assert_eq!(times.len(), 1, "seed {seed} device {d}");
            }
            for (_, link, _) in &h.devices[d].sent {
                assert!(
                    !stranger_links.contains(link),
                    "seed {seed}: a stranger was sent to"
                );
            }
        }
        // A subscription: one eose, before any member's answer, with only events within reach.
        let asker = g.below(n as u64) as usize;
        subscribe(&mut h, asker, APP, "back", r#"[{"kinds":[1]}]"#, Some(2));
        h.run().unwrap();
        let back: Vec<&(Timestamp, NappletId, Reply)> = h.devices[asker]
            .replies
            .iter()
            .filter(|(_, _, r)| r.routing().1 == Some("back"))
            .collect();
        let eoses = back
            .iter()
            .filter(|(_, _, r)| matches!(r, Reply::Eose { .. }))
            .count();
        assert_eq!(eoses, 1, "seed {seed}");
        let got = delivered(&h, asker, APP, "back");
        let unique: std::collections::BTreeSet<_> = got.iter().collect();
        assert_eq!(
            unique.len(),
            got.len(),
            "seed {seed}: once per subscription"
        );
        let anyone_within = (0..n).any(|d| {
            kept(&h, d, &event.id) && {
                // d within 2 circle hops of the asker
                let mut dd = vec![usize::MAX; n];
                dd[asker] = 0;
                let mut q = std::collections::VecDeque::from([asker]);
                while let Some(x) = q.pop_front() {
                    for &y in &adj[x] {
                        if dd[y] == usize::MAX {
                            dd[y] = dd[x] + 1;
                            q.push_back(y);
                        }
                    }
                }
                dd[d] <= 2
            }
        });
        assert_eq!(got.contains(&event.id), anyone_within, "seed {seed}");
    }
}
