//! Several nodes as machines in one test, passing blobs by hand: a "relay" is a `Vec`.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::json;

use super::message::{self, Message};
use super::*;
use crate::crypto::{default_provider, generate_p256};
use crate::minca::envelope;

type Node = Rendezvous<ChaCha20Rng>;

const T0: u64 = 1_790_000_000_000;

fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn secs(s: u64) -> u64 {
    s * 1000
}

fn room() -> Room {
    Room::new("tr3o3btwwyb36pwbt3bcr3za7o5kn76p")
}

fn other_room() -> Room {
    Room::new("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
}

fn topic(r: &Room) -> String {
    r.topic(default_provider())
}

fn session(seed: u64) -> P256Secret {
    generate_p256(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

/// A node signing with `session(seed)`, its box drawn from `box_seed`.
fn node_with(seed: u64, box_seed: u64) -> Node {
    Rendezvous::new(
        session(seed),
        default_provider(),
        ChaCha20Rng::seed_from_u64(box_seed),
    )
    .unwrap()
}

fn node(seed: u64) -> Node {
    node_with(seed, 1000 + seed)
}

/// Two nodes, the lesser DID first (JavaScript string order).
fn lesser_greater(a: u64, b: u64) -> (Node, Node) {
    let (x, y) = (node(a), node(b));
    if js::cmp(x.did(), y.did()).is_lt() {
        (x, y)
    } else {
        (y, x)
    }
}

fn drain(n: &mut Node) -> Vec<Output> {
    core::iter::from_fn(|| n.poll()).collect()
}

/// The blobs among `outs`, with the relays each goes to.
fn published(outs: &[Output]) -> Vec<(String, Relays)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Publish { blob, relays, .. } => Some((blob.clone(), *relays)),
            _ => None,
        })
        .collect()
}

fn blobs(outs: &[Output]) -> Vec<String> {
    published(outs).into_iter().map(|(b, _)| b).collect()
}

fn deliver(n: &mut Node, now: Timestamp, r: &Room, blob: &str) -> Vec<Output> {
    deliver_via(n, now, r, blob, RelayId(1))
}

fn deliver_via(n: &mut Node, now: Timestamp, r: &Room, blob: &str, relay: RelayId) -> Vec<Output> {
    n.handle(
        now,
        Input::Blob {
            relay,
            topic: topic(r),
            blob: blob.into(),
        },
    );
    drain(n)
}

/// A node that has joined `r` at `now`, its join hello taken.
fn joined(mut n: Node, now: Timestamp, r: &Room) -> (Node, String) {
    n.handle(now, Input::Join(r.clone()));
    let hello = blobs(&drain(&mut n)).pop().unwrap();
    (n, hello)
}

/// The message inside a blob, opened with the room key.
fn open(r: &Room, blob: &str) -> Message {
    let c = default_provider();
    let plain = message::open_blob(c, &r.key(c), &topic(r), blob).unwrap();
    Message::parse(&plain).unwrap()
}

/// Signs `m` with `signer` for `r`'s topic and seals it under `r`'s room key.
fn forge(r: &Room, signer: &P256Secret, mut m: Message) -> String {
    let c = default_provider();
    m.sig = auth::sign(c, signer, &m.signed_text(&topic(r))).unwrap();
    reseal(r, &m)
}

/// Seals `m` as it is under `r`'s room key.
fn reseal(r: &Room, m: &Message) -> String {
    let c = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(77);
    message::seal_blob(c, &mut rng, &r.key(c), &topic(r), &m.to_json())
}

fn hello_from(n: &Node, at: u64) -> Message {
    Message {
        kind: Kind::Hello,
        at,
        from: n.did().into(),
        box_: n.box_key().into(),
        signal: None,
        half_signal: false,
        sig: String::new(),
    }
}

fn heard(outs: &[Output]) -> Vec<(String, String)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::PeerHeard { did, peer_box, .. } => Some((did.clone(), peer_box.clone())),
            _ => None,
        })
        .collect()
}

fn offers_to(outs: &[Output]) -> Vec<String> {
    outs.iter()
        .filter_map(|o| match o {
            Output::OfferTo { did, .. } => Some(did.clone()),
            _ => None,
        })
        .collect()
}

fn signals(outs: &[Output]) -> Vec<(String, SignalKind, Value)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::SignalReceived {
                from,
                kind,
                description,
                ..
            } => Some((from.clone(), *kind, description.clone())),
            _ => None,
        })
        .collect()
}

fn signal(n: &mut Node, now: Timestamp, r: &Room, to: &str, kind: SignalKind) -> Vec<Output> {
    n.handle(
        now,
        Input::Signal {
            room: r.clone(),
            to: to.into(),
            kind,
            description: json!({"type": kind.as_str(), "sdp": "v=0 for ".to_string() + to}),
        },
    );
    drain(n)
}

/// `lesser` and `greater` in `room()`, each having heard the other's hello, and `lesser`'s offer
/// to `greater` (sealed, not yet delivered).
fn met() -> (Node, Node, String) {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, _) = joined(a, t(0), &room());
    let (b, hello_b) = joined(b, t(0), &room());
    let outs = deliver(&mut a, t(1), &room(), &hello_b);
    assert_eq!(offers_to(&outs), vec![b.did().to_string()]);
    let did_b = b.did().to_string();
    let offer = blobs(&signal(&mut a, t(2), &room(), &did_b, SignalKind::Offer)).remove(0);
    (a, b, offer)
}

#[test]
fn a_hello_is_said_on_join_sealed_under_the_room_key_and_signed_over_every_field() {
    let c = default_provider();
    let mut a = node(1);
    a.handle(t(0), Input::Join(room()));
    let outs = drain(&mut a);
    assert_eq!(outs.len(), 1);
    let Output::Publish {
        room: r,
        topic: tp,
        relays,
        blob,
    } = &outs[0]
    else {
        panic!("a publish: {outs:?}");
    };
    assert_eq!(
        (r, tp.as_str(), *relays),
        (&room(), topic(&room()).as_str(), Relays::All)
    );
    let m = open(&room(), blob);
    assert_eq!(m.kind, Kind::Hello);
    assert_eq!(m.at, T0);
    assert_eq!(m.from, a.did());
    assert_eq!(m.box_, a.box_key());
    assert_eq!(base64url::decode(&m.box_).unwrap().len(), BOX_BYTES);
    assert_eq!(m.signal, None);
    let label = format!(
        "minca/rendezvous-sig/v1|{}|hello|{}|{}|{}||",
        topic(&room()),
        T0,
        a.did(),
        a.box_key()
    );
    assert!(auth::verify(c, a.did(), &label, &m.sig));
    // Under another room's key, label or bound it does not open.
    let bytes = base64url::decode(blob).unwrap();
    let bound = json!({"topic": topic(&room())});
    assert!(envelope::open(c, &room().key(c), BLOB_LABEL, &bound, &bytes).is_ok());
    assert!(envelope::open(c, &other_room().key(c), BLOB_LABEL, &bound, &bytes).is_err());
    assert!(envelope::open(c, &room().key(c), SIGNAL_LABEL, &bound, &bytes).is_err());
    let other_bound = json!({"topic": topic(&other_room())});
    assert!(envelope::open(c, &room().key(c), BLOB_LABEL, &other_bound, &bytes).is_err());
}

#[test]
fn a_relay_or_anyone_on_the_topic_sees_neither_who_meets_nor_their_addresses() {
    let c = default_provider();
    let (a, mut b, offer) = met();
    let wire = base64url::decode(&offer).unwrap();
    let hay = String::from_utf8_lossy(&wire).into_owned() + &offer;
    for secret in [
        a.did(),
        b.did(),
        a.box_key(),
        b.box_key(),
        room().as_str(),
        "v=0",
    ] {
        assert!(!hay.contains(secret), "{secret} shows on the wire");
    }
    // Someone on the topic who does not know the room cannot open it; one who does sees the
    // offer's fields but not the description inside.
    let bound = message::blob_bound(&topic(&room()));
    assert!(envelope::open(c, &[0; 32], BLOB_LABEL, &bound, &wire).is_err());
    let m = open(&room(), &offer);
    let (_, sdp) = m.signal.clone().unwrap();
    assert!(!sdp.contains("v=0"));
    let outs = deliver(&mut b, t(3), &room(), &offer);
    assert_eq!(signals(&outs).len(), 1);
}

#[test]
fn a_relay_that_reopens_hears_a_hello_on_it_alone() {
    let (mut a, _) = joined(node(1), t(0), &room());
    a.handle(t(0), Input::Join(other_room()));
    drain(&mut a);
    a.handle(t(5_000), Input::RelayOpened(RelayId(7)));
    let outs = drain(&mut a);
    let p = published(&outs);
    assert_eq!(p.len(), 2);
    assert!(p.iter().all(|(_, r)| *r == Relays::One(RelayId(7))));
    let rooms: Vec<Room> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Publish { room, .. } => Some(room.clone()),
            _ => None,
        })
        .collect();
    assert!(rooms.contains(&room()) && rooms.contains(&other_room()));
}

#[test]
fn there_is_no_goodbye_a_node_leaving_says_nothing_and_its_peers_keep_it_until_they_stop_hearing_it()
 {
    let (mut a, _) = joined(node(1), t(0), &room());
    let (mut b, hello_b) = joined(node(2), t(0), &room());
    assert_eq!(heard(&deliver(&mut a, t(1), &room(), &hello_b)).len(), 1);
    // Leaving publishes nothing on the relays, now or later.
    b.handle(t(2), Input::Leave(room()));
    assert!(published(&drain(&mut b)).is_empty());
    b.handle_timeout(t(secs(600)));
    assert!(published(&drain(&mut b)).is_empty());
    // So the peer that stays still has it in the room: it is gone when its connection is (§5),
    // or when the room forgets it after five minutes of silence.
    assert_eq!(a.peers(&room()).len(), 1);
    a.handle_timeout(t(secs(60)));
    drain(&mut a);
    assert_eq!(a.peers(&room()).len(), 1);
    // No message kind says goodbye: a blob claiming to is ignored, and the peer stays.
    let mut bye = hello_from(&b, 3);
    let c = default_provider();
    bye.sig = auth::sign(c, &session(2), &bye.signed_text(&topic(&room()))).unwrap();
    let mut said = bye.to_json();
    said["kind"] = json!("goodbye");
    let mut rng = ChaCha20Rng::seed_from_u64(78);
    let blob = message::seal_blob(c, &mut rng, &room().key(c), &topic(&room()), &said);
    assert!(deliver(&mut a, t(4), &room(), &blob).is_empty());
    assert_eq!(a.peers(&room()).len(), 1);
}

#[test]
fn hello_is_said_again_every_two_minutes() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let w = a.poll_timeout().unwrap();
    assert_eq!(w.at, t(secs(120)));
    a.handle_timeout(t(secs(119)));
    assert!(drain(&mut a).is_empty());
    a.handle_timeout(t(secs(120)));
    let outs = published(&drain(&mut a));
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].1, Relays::All);
    assert_eq!(open(&room(), &outs[0].0).kind, Kind::Hello);
    assert_eq!(a.poll_timeout().unwrap().at, t(secs(240)));
    // Leaving stops it.
    a.handle(t(secs(130)), Input::Leave(room()));
    a.handle_timeout(t(secs(240)));
    assert!(drain(&mut a).is_empty());
}

#[test]
fn each_message_a_node_sends_has_a_greater_at_than_the_last() {
    let c = default_provider();
    let open_any = |blob: &str| {
        [room(), other_room()]
            .iter()
            .find_map(|r| message::open_blob(c, &r.key(c), &topic(r), blob))
            .map(|p| Message::parse(&p).unwrap().at)
            .unwrap()
    };
    let mut a = node(1);
    let mut ats = Vec::new();
    a.handle(t(0), Input::Join(room()));
    a.handle(t(0), Input::Join(other_room()));
    a.handle(t(0), Input::RelayOpened(RelayId(1)));
    // The clock stepping back does not make an `at` repeat.
    a.handle(
        t(0).saturating_sub(Duration::from_secs(60)),
        Input::RelayOpened(RelayId(2)),
    );
    for b in blobs(&drain(&mut a)) {
        ats.push(open_any(&b));
    }
    assert_eq!(ats.len(), 6);
    assert!(ats.windows(2).all(|w| w[0] < w[1]), "{ats:?}");
}

#[test]
fn the_lesser_did_is_told_to_offer_and_the_greater_says_hello_back() {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, hello_a) = joined(a, t(0), &room());
    let (mut b, hello_b) = joined(b, t(secs(20)), &room());
    // The greater hears the lesser: no offer, a hello back (11 s after its own join hello).
    let outs = deliver(&mut b, t(secs(31)), &room(), &hello_a);
    assert!(offers_to(&outs).is_empty());
    assert_eq!(
        heard(&outs),
        vec![(a.did().to_string(), a.box_key().to_string())]
    );
    let back = blobs(&outs);
    assert_eq!(back.len(), 1);
    assert_eq!(open(&room(), &back[0]).kind, Kind::Hello);
    // The lesser hears the greater (either hello): told to offer, says nothing itself.
    let outs = deliver(&mut a, t(secs(31)), &room(), &hello_b);
    assert_eq!(offers_to(&outs), vec![b.did().to_string()]);
    assert!(blobs(&outs).is_empty());
    let outs = deliver(&mut a, t(secs(32)), &room(), &back[0]);
    assert_eq!(offers_to(&outs), vec![b.did().to_string()]);
}

#[test]
fn hello_back_is_said_at_most_once_per_ten_seconds_and_a_due_one_once_when_they_are_up() {
    let (mut p, _) = joined(node(50), t(0), &room());
    // Senders lesser than p, so that p says hello back to each.
    let hellos: Vec<String> = (51..80)
        .map(node)
        .filter(|n| js::cmp(n.did(), p.did()).is_lt())
        .take(3)
        .map(|n| joined(n, t(0), &room()).1)
        .collect();
    assert_eq!(hellos.len(), 3);
    // Within 10 s of p's own join hello: none now, one due.
    assert!(blobs(&deliver(&mut p, t(secs(3)), &room(), &hellos[0])).is_empty());
    assert!(blobs(&deliver(&mut p, t(secs(6)), &room(), &hellos[1])).is_empty());
    let w = p.poll_timeout().unwrap();
    assert_eq!(w.at, t(secs(10)));
    p.handle_timeout(t(secs(10)));
    assert_eq!(
        blobs(&drain(&mut p)).len(),
        1,
        "the due hello back, once for both"
    );
    p.handle_timeout(t(secs(20)));
    assert!(blobs(&drain(&mut p)).is_empty(), "nothing more was due");
    // 10 s after the last: said at once.
    assert_eq!(
        blobs(&deliver(&mut p, t(secs(20)), &room(), &hellos[2])).len(),
        1
    );
}

#[test]
fn two_who_join_within_ten_seconds_of_each_other_both_hear_back_from_the_peer_they_offer_to() {
    let (mut p, _) = joined(node(50), t(0), &room());
    let mut pair: Vec<Node> = (51..90)
        .map(node)
        .filter(|n| js::cmp(n.did(), p.did()).is_lt())
        .take(2)
        .collect();
    let (b, a) = (pair.pop().unwrap(), pair.pop().unwrap());
    let (mut a, hello_a) = joined(a, t(secs(60)), &room());
    let (mut b, hello_b) = joined(b, t(secs(65)), &room());
    let mut relay: Vec<String> = Vec::new();
    relay.extend(blobs(&deliver(&mut p, t(secs(60)), &room(), &hello_a)));
    relay.extend(blobs(&deliver(&mut p, t(secs(65)), &room(), &hello_b)));
    p.handle_timeout(p.poll_timeout().unwrap().at);
    relay.extend(blobs(&drain(&mut p)));
    assert_eq!(
        relay.len(),
        2,
        "one hello back at once, one when the 10 s are up"
    );
    for n in [&mut a, &mut b] {
        let mut told = Vec::new();
        for blob in &relay {
            told.extend(offers_to(&deliver(n, t(secs(71)), &room(), blob)));
        }
        assert!(told.contains(&p.did().to_string()));
    }
}

#[test]
fn a_senders_messages_are_each_acted_on_in_whatever_order_they_arrive() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let key_b = session(2);
    let sent: Vec<String> = (0..5)
        .map(|i| forge(&room(), &key_b, hello_from(&b, T0 + 1000 * i)))
        .collect();
    for i in [3, 0, 4, 1, 2] {
        assert_eq!(
            heard(&deliver(&mut a, t(5_000), &room(), &sent[i])).len(),
            1
        );
    }
    for s in &sent {
        assert!(heard(&deliver(&mut a, t(5_000), &room(), s)).is_empty());
    }
    assert_eq!(a.ignored(Ignored::Replay), 5);
}

#[test]
fn a_replay_after_leaving_the_room_and_joining_again_is_not_acted_on() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let (_, hello_b) = joined(node(2), t(0), &room());
    assert_eq!(heard(&deliver(&mut a, t(1), &room(), &hello_b)).len(), 1);
    a.handle(t(2), Input::Leave(room()));
    assert!(!a.is_in(&room()));
    assert!(deliver(&mut a, t(3), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::NotInRoom), 1);
    a.handle(t(4), Input::Join(room()));
    drain(&mut a);
    assert!(a.peers(&room()).is_empty(), "leaving forgets the peers");
    assert!(deliver(&mut a, t(5), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 1);
}

#[test]
fn a_hello_replayed_from_before_a_peer_restarted_leaves_offers_going_to_its_new_box() {
    let (a, b) = lesser_greater(1, 2);
    let seed_b = if b.did() == node(1).did() { 1 } else { 2 };
    let (mut a, _) = joined(a, t(0), &room());
    // b before and after a restart: one session key, two boxes.
    let (b_old, hello_old) = joined(node_with(seed_b, 500), t(0), &room());
    let (mut b_new, hello_new) = joined(node_with(seed_b, 501), t(secs(30)), &room());
    assert_ne!(b_old.box_key(), b_new.box_key());
    // The old hello was never heard by a before; it arrives after the new one.
    deliver(&mut a, t(secs(31)), &room(), &hello_new);
    let outs = deliver(&mut a, t(secs(32)), &room(), &hello_old);
    assert_eq!(
        heard(&outs),
        vec![(b_new.did().to_string(), b_new.box_key().to_string())]
    );
    assert_eq!(
        a.peers(&room()),
        vec![(b_new.did().to_string(), b_new.box_key().to_string())]
    );
    let did_b = b_new.did().to_string();
    let offer = blobs(&signal(
        &mut a,
        t(secs(33)),
        &room(),
        &did_b,
        SignalKind::Offer,
    ));
    assert_eq!(offer.len(), 1);
    let got = signals(&deliver(&mut b_new, t(secs(34)), &room(), &offer[0]));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, SignalKind::Offer);
}

#[test]
fn the_box_kept_is_the_newest_messages_and_an_older_replay_does_not_change_it() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let key_b = session(2);
    let (b1, b2) = (node_with(2, 600), node_with(2, 601));
    let newer = forge(&room(), &key_b, hello_from(&b2, T0 + 2000));
    let older = forge(&room(), &key_b, hello_from(&b1, T0 + 1000));
    let even_newer = forge(&room(), &key_b, hello_from(&b1, T0 + 3000));
    deliver(&mut a, t(5000), &room(), &newer);
    deliver(&mut a, t(5000), &room(), &older);
    assert_eq!(a.peers(&room())[0].1, b2.box_key());
    deliver(&mut a, t(5000), &room(), &even_newer);
    assert_eq!(a.peers(&room())[0].1, b1.box_key());
}

#[test]
fn a_replayed_offer_is_not_acted_on_again_however_much_else_was_said_since() {
    let (mut a, mut b, offer) = met();
    assert_eq!(signals(&deliver(&mut b, t(3), &room(), &offer)).len(), 1);
    let did_b = b.did().to_string();
    // Much else: hellos, offers, other rooms, relay reopenings.
    for i in 0..40u64 {
        a.handle(t(10 + i), Input::RelayOpened(RelayId(i)));
        for blob in blobs(&drain(&mut a)) {
            deliver(&mut b, t(10 + i), &room(), &blob);
        }
        for blob in blobs(&signal(
            &mut a,
            t(10 + i),
            &room(),
            &did_b,
            SignalKind::Offer,
        )) {
            assert_eq!(
                signals(&deliver(&mut b, t(10 + i), &room(), &blob)).len(),
                1
            );
        }
    }
    assert!(deliver(&mut b, t(secs(100)), &room(), &offer).is_empty());
    assert!(deliver(&mut b, t(secs(100)), &room(), &offer).is_empty());
    assert_eq!(b.ignored(Ignored::Replay), 2);
}

#[test]
fn a_blob_handed_decoded_is_answered_as_its_text_is() {
    let (_, mut by_text, offer) = met();
    let (_, mut by_bytes, same_offer) = met();
    assert_eq!(offer, same_offer);
    // Its tag changed, so that the memory of blobs decided on does not know it.
    let mut tampered = base64url::decode(&offer).unwrap();
    if let Some(last) = tampered.last_mut() {
        *last ^= 1;
    }
    let blobs = [
        offer.clone(),
        offer,
        base64url::encode(&tampered),
        "AAAA".to_string(),
    ];
    for (i, blob) in blobs.iter().enumerate() {
        let now = t(3 + i as u64);
        let outs = deliver(&mut by_text, now, &room(), blob);
        assert_eq!(outs.is_empty(), i > 0);
        let bytes = base64url::decode(blob).unwrap();
        by_bytes.receive_decoded(now, &topic(&room()), blob, &bytes);
        assert_eq!(drain(&mut by_bytes), outs);
    }
    for reason in Ignored::ALL {
        assert_eq!(by_text.ignored(reason), by_bytes.ignored(reason));
    }
    assert_eq!(by_text.ignored(Ignored::Replay), 1);
    assert_eq!(by_text.ignored(Ignored::DoesNotOpen), 2);
}

#[test]
fn an_offer_whose_sealed_description_someone_else_put_in_under_its_senders_signature_is_ignored() {
    let c = default_provider();
    let (a, mut b, offer) = met();
    let mut m = open(&room(), &offer);
    // Mallory, in the room, seals a description of her own to b's box, bound exactly as a's,
    // and puts it under a's signature.
    let (to, _) = m.signal.clone().unwrap();
    let aad = message::signal_aad(&topic(&room()), a.did(), &to, a.box_key());
    let box_b = P256Public(base64url::decode_array(b.box_key()).unwrap());
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let evil =
        message::seal_description(c, &mut rng, &box_b, &aad, &json!({"sdp": "evil"})).unwrap();
    m.signal = Some((to, evil));
    let outs = deliver(&mut b, t(3), &room(), &reseal(&room(), &m));
    assert!(outs.is_empty());
    assert_eq!(b.ignored(Ignored::BadSignature), 1);
    // The genuine offer, with the same `at`, is still heard: the forgery was not acted on.
    assert_eq!(signals(&deliver(&mut b, t(4), &room(), &offer)).len(), 1);
}

#[test]
fn a_hello_naming_b_but_signed_by_another_key_is_ignored() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let forged = forge(&room(), &session(3), hello_from(&b, T0));
    assert!(deliver(&mut a, t(1), &room(), &forged).is_empty());
    assert_eq!(a.ignored(Ignored::BadSignature), 1);
    assert!(a.peers(&room()).is_empty());
}

#[test]
fn someone_in_only_a_public_room_cannot_pose_there_as_b_to_keep_a_and_b_apart_in_a_private_one() {
    let public = other_room();
    let private = room();
    let (mut a, _) = joined(node(1), t(0), &private);
    a.handle(t(0), Input::Join(public.clone()));
    drain(&mut a);
    let (mut b, hello_private) = joined(node(2), t(0), &private);
    b.handle(t(0), Input::Join(public.clone()));
    let hello_public = blobs(&drain(&mut b)).pop().unwrap();
    // Mallory knows the public room only: she can take b's hello there, but re-sealing it into
    // the private room breaks b's signature (it names the topic), and she cannot sign as b.
    let m = open(&public, &hello_public);
    assert!(deliver(&mut a, t(1), &private, &reseal(&private, &m)).is_empty());
    let mallory_box = node_with(9, 9);
    let mut fake = hello_from(&b, T0 + 5);
    fake.box_ = mallory_box.box_key().into();
    assert!(deliver(&mut a, t(1), &public, &forge(&public, &session(9), fake)).is_empty());
    assert_eq!(a.ignored(Ignored::BadSignature), 2);
    // b's real hellos are heard in each room, with b's own box.
    assert_eq!(
        heard(&deliver(&mut a, t(2), &private, &hello_private)),
        vec![(b.did().to_string(), b.box_key().to_string())]
    );
    assert_eq!(
        heard(&deliver(&mut a, t(2), &public, &hello_public)).len(),
        1
    );
}

#[test]
fn hellos_under_90_made_up_names_start_no_more_than_64_connections() {
    let (mut a, _) = joined(node(1), t(0), &room());
    // A peer that a heard before the flood.
    let (b, hello_b) = joined(node(2), t(0), &room());
    deliver(&mut a, t(1), &room(), &hello_b);
    let mut offered = Vec::new();
    let mut heard_total = 1;
    for i in 0..90u64 {
        let (fake, _) = joined(node(100 + i), t(0), &room());
        let blob = forge(&room(), &session(100 + i), hello_from(&fake, T0 + 10 + i));
        let outs = deliver(&mut a, t(secs(1)), &room(), &blob);
        heard_total += heard(&outs).len();
        offered.extend(offers_to(&outs));
    }
    assert_eq!(heard_total, MAX_ROOM_PEERS);
    assert!(offered.len() <= MAX_ROOM_PEERS);
    assert_eq!(a.peers(&room()).len(), MAX_ROOM_PEERS);
    assert_eq!(
        a.ignored(Ignored::RoomFull),
        90 - (MAX_ROOM_PEERS as u64 - 1)
    );
    // A peer already in the full room is still heard.
    let again = forge(&room(), &session(2), hello_from(&b, T0 + 500));
    assert_eq!(
        heard(&deliver(&mut a, t(secs(2)), &room(), &again)).len(),
        1
    );
}

/// §2: "a hello or signal from a new peer in a full room MUST be ignored": the signal half. The
/// same offer reaches a node whose room has a place, so it is the full room that refused it.
#[test]
fn an_offer_from_a_new_peer_in_a_full_room_is_ignored() {
    let (mut a, hello_a) = joined(node(1), t(0), &room());
    for i in 0..MAX_ROOM_PEERS as u64 {
        let (_, hello) = joined(node(100 + i), t(0), &room());
        deliver(&mut a, t(0), &room(), &hello);
    }
    assert_eq!(a.peers(&room()).len(), MAX_ROOM_PEERS);
    let (mut late, _) = joined(node(300), t(0), &room());
    deliver(&mut late, t(1), &room(), &hello_a);
    let did_a = a.did().to_string();
    let offer = blobs(&signal(&mut late, t(2), &room(), &did_a, SignalKind::Offer)).remove(0);
    assert!(deliver(&mut a, t(3), &room(), &offer).is_empty());
    assert_eq!(a.ignored(Ignored::RoomFull), 1);
    assert!(a.peers(&room()).iter().all(|(did, _)| did != late.did()));

    let (mut roomy, _) = joined(node(1), t(0), &room());
    let got = signals(&deliver(&mut roomy, t(3), &room(), &offer));
    assert_eq!(got.len(), 1, "the offer itself is good");
    assert_eq!(
        (got[0].0.as_str(), got[0].1),
        (late.did(), SignalKind::Offer)
    );
}

#[test]
fn a_peer_not_heard_for_five_minutes_is_forgotten_and_its_place_freed() {
    let (mut a, _) = joined(node(1), t(0), &room());
    for i in 0..MAX_ROOM_PEERS as u64 {
        let (n, hello) = joined(node(100 + i), t(0), &room());
        let _ = n;
        deliver(&mut a, t(0), &room(), &hello);
    }
    assert_eq!(a.peers(&room()).len(), MAX_ROOM_PEERS);
    let (late, _) = joined(node(300), t(0), &room());
    let early = forge(&room(), &session(300), hello_from(&late, T0 + secs(299)));
    assert!(deliver(&mut a, t(secs(299)), &room(), &early).is_empty());
    assert_eq!(a.ignored(Ignored::RoomFull), 1);
    let on_time = forge(&room(), &session(300), hello_from(&late, T0 + secs(300)));
    assert_eq!(
        heard(&deliver(&mut a, t(secs(300)), &room(), &on_time)).len(),
        1
    );
    assert_eq!(
        a.peers(&room()),
        vec![(late.did().to_string(), late.box_key().to_string())]
    );
    // A forgotten peer cannot be offered to.
    let (gone, _) = joined(node(100), t(0), &room());
    let outs = signal(&mut a, t(secs(301)), &room(), gone.did(), SignalKind::Offer);
    assert!(matches!(
        outs.as_slice(),
        [Output::SignalNotSent {
            reason: NotSent::UnknownPeer,
            ..
        }]
    ));
}

#[test]
fn an_offer_rewrapped_with_another_box_opens_nothing() {
    let (a, mut b, offer) = met();
    let mallory = node_with(9, 9);
    let mut m = open(&room(), &offer);
    m.box_ = mallory.box_key().into();
    // Even signed again by a's own key, the description was bound to a's box and does not open.
    let blob = forge(&room(), &session_of(&a), m);
    assert!(deliver(&mut b, t(3), &room(), &blob).is_empty());
    assert_eq!(b.ignored(Ignored::SdpDoesNotOpen), 1);
}

/// The session key of a node made by `node(1)` or `node(2)`.
fn session_of(n: &Node) -> P256Secret {
    if n.did() == node(1).did() {
        session(1)
    } else {
        session(2)
    }
}

#[test]
fn a_third_peer_in_the_room_hears_the_offer_pass_but_cannot_open_it() {
    let c = default_provider();
    let (a, b, offer) = met();
    let (mut third, _) = joined(node(3), t(0), &room());
    let outs = deliver(&mut third, t(3), &room(), &offer);
    assert!(outs.is_empty());
    assert_eq!(third.ignored(Ignored::NotForMe), 1);
    let m = open(&room(), &offer);
    let (to, sdp) = m.signal.unwrap();
    assert_eq!(to, b.did());
    let aad = message::signal_aad(&topic(&room()), a.did(), &to, a.box_key());
    let open = |r: &Node| message::open_description(c, &r.box_secret, &r.box_public, &aad, &sdp);
    assert!(open(&third).is_none());
    assert!(open(&b).is_some());
    // Opened as anyone opens a seal to a box, deriving its public half.
    let bound = message::signal_bound(&topic(&room()), a.did(), &to, a.box_key());
    let bytes = base64url::decode(&sdp).unwrap();
    let plain = envelope::open_to(c, &b.box_secret, SIGNAL_LABEL, &bound, &bytes).unwrap();
    assert_eq!(open(&b), serde_json::from_slice(&plain).ok());
}

#[test]
fn a_blob_that_does_not_open_under_the_room_key_or_is_stale_or_comes_again_is_ignored() {
    let c = default_provider();
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let key_b = session(2);
    // Sealed under another room's key, but sent under this room's topic.
    let mut m = hello_from(&b, T0);
    m.sig = auth::sign(c, &key_b, &m.signed_text(&topic(&room()))).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let wrong_key = message::seal_blob(
        c,
        &mut rng,
        &other_room().key(c),
        &topic(&room()),
        &m.to_json(),
    );
    assert!(deliver(&mut a, t(0), &room(), &wrong_key).is_empty());
    assert!(deliver(&mut a, t(0), &room(), "not base64url!").is_empty());
    assert_eq!(a.ignored(Ignored::DoesNotOpen), 2);
    // Stale: more than 2 minutes either way; the edges are inside.
    let now = t(secs(1000));
    let at_edges = [T0 + secs(880), T0 + secs(1120)];
    let past_edges = [T0 + secs(880) - 1, T0 + secs(1120) + 1];
    for at in past_edges {
        assert!(
            deliver(
                &mut a,
                now,
                &room(),
                &forge(&room(), &key_b, hello_from(&b, at))
            )
            .is_empty()
        );
    }
    assert_eq!(a.ignored(Ignored::Stale), 2);
    for at in at_edges {
        assert_eq!(
            heard(&deliver(
                &mut a,
                now,
                &room(),
                &forge(&room(), &key_b, hello_from(&b, at))
            ))
            .len(),
            1
        );
    }
    // Again.
    let again = forge(&room(), &key_b, hello_from(&b, at_edges[0]));
    assert!(deliver(&mut a, now, &room(), &again).is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 1);
    assert_eq!(a.ignored_total(), 5);
}

#[test]
fn a_replayed_hello_counts_once() {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, _) = joined(a, t(0), &room());
    let (_, hello_b) = joined(b, t(0), &room());
    let mut told = 0;
    let mut seen = 0;
    for i in 0..10 {
        let outs = deliver(&mut a, t(i), &room(), &hello_b);
        told += offers_to(&outs).len();
        seen += heard(&outs).len();
    }
    assert_eq!((told, seen), (1, 1));
    assert_eq!(a.ignored(Ignored::Replay), 9);
}

#[test]
fn two_peers_on_two_shared_relays_hear_each_other_once_and_an_offer_arrives_once_opened() {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, hello_a) = joined(a, t(0), &room());
    let (mut b, hello_b) = joined(b, t(secs(30)), &room());
    // Every blob goes to every relay; each node reads both.
    let relays = [RelayId(1), RelayId(2)];
    let mut b_heard = 0;
    let mut backs = Vec::new();
    for r in relays {
        let outs = deliver_via(&mut b, t(secs(30)), &room(), &hello_a, r);
        b_heard += heard(&outs).len();
        backs.extend(published(&outs));
    }
    assert_eq!(b_heard, 1);
    let mut a_told = Vec::new();
    for r in relays {
        a_told.extend(offers_to(&deliver_via(
            &mut a,
            t(secs(31)),
            &room(),
            &hello_b,
            r,
        )));
    }
    assert_eq!(a_told, vec![b.did().to_string()]);
    let did_b = b.did().to_string();
    let outs = signal(&mut a, t(secs(32)), &room(), &did_b, SignalKind::Offer);
    let offer = published(&outs);
    assert_eq!(offer.len(), 1);
    assert_eq!(offer[0].1, Relays::All);
    let mut got = Vec::new();
    for r in relays {
        got.extend(signals(&deliver_via(
            &mut b,
            t(secs(33)),
            &room(),
            &offer[0].0,
            r,
        )));
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, a.did());
    assert_eq!(got[0].1, SignalKind::Offer);
    assert_eq!(
        got[0].2,
        json!({"type": "offer", "sdp": format!("v=0 for {did_b}")})
    );
}

#[test]
fn an_answer_goes_only_to_the_room_its_offer_came_in_sealed_to_the_box_the_offer_carried() {
    let (a, mut b, offer) = met();
    let did_a = a.did().to_string();
    b.handle(t(0), Input::Join(other_room()));
    drain(&mut b);
    // No offer from a yet: nothing to answer, in either room.
    let outs = signal(&mut b, t(3), &room(), &did_a, SignalKind::Answer);
    assert!(matches!(
        outs.as_slice(),
        [Output::SignalNotSent {
            reason: NotSent::UnknownPeer,
            ..
        }]
    ));
    assert_eq!(signals(&deliver(&mut b, t(3), &room(), &offer)).len(), 1);
    // a restarts with a new box and says hello: the answer still goes to the offer's box.
    let seed_a = if did_a == node(1).did() { 1 } else { 2 };
    let (mut a_new, hello_new) = joined(node_with(seed_a, 777), t(4), &room());
    deliver(&mut b, t(5), &room(), &hello_new);
    assert_eq!(b.peers(&room())[0].1, a_new.box_key());
    let outs = signal(&mut b, t(6), &other_room(), &did_a, SignalKind::Answer);
    assert!(matches!(
        outs.as_slice(),
        [Output::SignalNotSent {
            reason: NotSent::UnknownPeer,
            ..
        }]
    ));
    let answer = blobs(&signal(&mut b, t(6), &room(), &did_a, SignalKind::Answer));
    assert_eq!(answer.len(), 1);
    let (to, _) = open(&room(), &answer[0]).signal.unwrap();
    assert_eq!(to, did_a);
    let mut a = a;
    assert_eq!(
        signals(&deliver(&mut a, t(7), &room(), &answer[0]))[0].1,
        SignalKind::Answer
    );
    assert!(deliver(&mut a_new, t(7), &room(), &answer[0]).is_empty());
    assert_eq!(a_new.ignored(Ignored::SdpDoesNotOpen), 1);
    // A hello alone gives nothing to answer.
    let (mut c, _) = joined(node(3), t(0), &room());
    deliver(&mut c, t(8), &room(), &hello_new);
    let outs = signal(&mut c, t(9), &room(), &did_a, SignalKind::Answer);
    assert!(matches!(
        outs.as_slice(),
        [Output::SignalNotSent {
            reason: NotSent::NoOffer,
            ..
        }]
    ));
}

#[test]
fn an_offer_goes_only_to_a_room_whose_hello_named_the_peer_sealed_to_its_last_box() {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, _) = joined(a, t(0), &room());
    a.handle(t(0), Input::Join(other_room()));
    drain(&mut a);
    let (b, hello_b) = joined(b, t(0), &room());
    deliver(&mut a, t(1), &room(), &hello_b);
    let did_b = b.did().to_string();
    for (r, reason) in [
        (other_room(), NotSent::UnknownPeer),
        (Room::new("elsewhere"), NotSent::NotInRoom),
    ] {
        let outs = signal(&mut a, t(2), &r, &did_b, SignalKind::Offer);
        assert!(
            matches!(&outs[..], [Output::SignalNotSent { reason: got, .. }] if *got == reason),
            "{outs:?}"
        );
    }
    let outs = signal(&mut a, t(3), &room(), &did_b, SignalKind::Offer);
    let p = published(&outs);
    assert_eq!(p.len(), 1);
    let m = open(&room(), &p[0].0);
    assert_eq!(m.kind, Kind::Offer);
    let (to, sdp) = m.signal.unwrap();
    assert_eq!(to, did_b);
    let aad = message::signal_aad(&topic(&room()), a.did(), &did_b, a.box_key());
    let c = default_provider();
    assert!(message::open_description(c, &b.box_secret, &b.box_public, &aad, &sdp).is_some());
}

#[test]
fn a_hello_with_a_to_or_an_sdp_is_ignored() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let key_b = session(2);
    let mut m = hello_from(&b, T0);
    m.signal = Some((a.did().into(), "x".into()));
    assert!(deliver(&mut a, t(0), &room(), &forge(&room(), &key_b, m)).is_empty());
    // Only one of them, written by hand.
    for extra in [json!({"to": a.did()}), json!({"sdp": "x"})] {
        let mut m = hello_from(&b, T0 + 1);
        m.sig = auth::sign(default_provider(), &key_b, &m.signed_text(&topic(&room()))).unwrap();
        let mut v = m.to_json();
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let c = default_provider();
        let blob = message::seal_blob(c, &mut rng, &room().key(c), &topic(&room()), &v);
        assert!(deliver(&mut a, t(0), &room(), &blob).is_empty());
    }
    assert_eq!(a.ignored(Ignored::HelloWithSignal), 3);
}

#[test]
fn a_message_from_itself_from_a_non_p256_did_or_with_a_box_off_the_curve_is_ignored() {
    let (mut a, own) = joined(node(1), t(0), &room());
    assert!(deliver(&mut a, t(0), &room(), &own).is_empty());
    assert_eq!(a.ignored(Ignored::OwnMessage), 1);
    let b = node(2);
    let key_b = session(2);
    let mut m = hello_from(&b, T0 + 1);
    m.from = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK".into();
    assert!(deliver(&mut a, t(0), &room(), &forge(&room(), &key_b, m)).is_empty());
    assert_eq!(a.ignored(Ignored::BadFrom), 1);
    for bad_box in [
        "AAAA".to_string(),
        base64url::encode(&[[2u8].as_slice(), &[0xff; 32]].concat()),
        base64url::encode(&[9u8; 33]),
    ] {
        let mut m = hello_from(&b, T0 + 2);
        m.box_ = bad_box;
        let before = a.ignored(Ignored::BadBox);
        assert!(deliver(&mut a, t(0), &room(), &forge(&room(), &key_b, m)).is_empty());
        assert_eq!(a.ignored(Ignored::BadBox), before + 1);
    }
    // None of these used up b's `at`: b's real message at that time is heard.
    assert_eq!(
        heard(&deliver(
            &mut a,
            t(0),
            &room(),
            &forge(&room(), &key_b, hello_from(&b, T0 + 2))
        ))
        .len(),
        1
    );
    // b is known now, with the box it acted on checked: a new box off the curve from it is
    // still checked, and ignored.
    let mut m = hello_from(&b, T0 + 3);
    m.box_ = base64url::encode(&[9u8; 33]);
    let before = a.ignored(Ignored::BadBox);
    assert!(deliver(&mut a, t(0), &room(), &forge(&room(), &key_b, m)).is_empty());
    assert_eq!(a.ignored(Ignored::BadBox), before + 1);
}

#[test]
fn at_must_be_a_non_negative_integer() {
    let c = default_provider();
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let key_b = session(2);
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let mut send = |a: &mut Node, at: Value, label_at: &str| {
        let label = format!(
            "minca/rendezvous-sig/v1|{}|hello|{}|{}|{}||",
            topic(&room()),
            label_at,
            b.did(),
            b.box_key()
        );
        let v = json!({"kind": "hello", "at": at, "from": b.did(), "box": b.box_key(),
                       "sig": auth::sign(c, &key_b, &label).unwrap()});
        let blob = message::seal_blob(c, &mut rng, &room().key(c), &topic(&room()), &v);
        deliver(a, t(0), &room(), &blob)
    };
    for (at, label) in [
        (json!(-1), "-1"),
        (json!(1.5), "1.5"),
        (json!("1790000000000"), "1790000000000"),
        (json!(null), "null"),
    ] {
        assert!(send(&mut a, at, label).is_empty());
    }
    assert_eq!(a.ignored(Ignored::BadAt), 4);
    // An integer written with a fraction part is the same number, and signs as JavaScript
    // writes it.
    assert_eq!(
        heard(&send(
            &mut a,
            json!(1_790_000_000_000.0f64),
            "1790000000000"
        ))
        .len(),
        1
    );
}

#[test]
fn a_peer_that_sent_more_than_256_within_two_minutes_is_not_heard() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let b = node(2);
    let key_b = session(2);
    for i in 0..MAX_ACTED_PER_PEER as u64 {
        let blob = forge(&room(), &key_b, hello_from(&b, T0 + i));
        assert_eq!(heard(&deliver(&mut a, t(0), &room(), &blob)).len(), 1);
    }
    let more = forge(&room(), &key_b, hello_from(&b, T0 + 1000));
    assert!(deliver(&mut a, t(0), &room(), &more).is_empty());
    assert_eq!(a.ignored(Ignored::PeerFlooding), 1);
    // Heard again once the window has moved past the old times.
    let later = forge(&room(), &key_b, hello_from(&b, T0 + secs(121)));
    assert_eq!(
        heard(&deliver(&mut a, t(secs(121)), &room(), &later)).len(),
        1
    );
}

#[test]
fn a_blob_that_is_not_a_json_object_or_lacks_a_field_is_ignored() {
    let c = default_provider();
    let (mut a, _) = joined(node(1), t(0), &room());
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let bound = message::blob_bound(&topic(&room()));
    for text in ["[1]", "not json", "\"s\""] {
        let env = envelope::seal(
            c,
            &mut rng,
            &room().key(c),
            BLOB_LABEL,
            &bound,
            text.as_bytes(),
        );
        assert!(deliver(&mut a, t(0), &room(), &base64url::encode(&env)).is_empty());
    }
    assert_eq!(a.ignored(Ignored::NotObject), 3);
    let b = node(2);
    for v in [
        json!({"kind": "bye", "at": T0, "from": b.did(), "box": b.box_key(), "sig": "x"}),
        json!({"kind": "hello", "at": T0, "box": b.box_key(), "sig": "x"}),
        json!({"kind": "hello", "at": T0, "from": b.did(), "box": 5, "sig": "x"}),
        json!({"kind": "offer", "at": T0, "from": b.did(), "box": b.box_key(), "sig": "x"}),
    ] {
        let blob = message::seal_blob(c, &mut rng, &room().key(c), &topic(&room()), &v);
        assert!(deliver(&mut a, t(0), &room(), &blob).is_empty());
    }
    assert_eq!(a.ignored(Ignored::BadFields), 4);
    let long = "A".repeat(MAX_BLOB_CHARS + 1);
    assert!(deliver(&mut a, t(0), &room(), &long).is_empty());
    assert_eq!(a.ignored(Ignored::TooLong), 1);
}

#[test]
fn a_join_past_the_room_bound_is_refused() {
    let mut a = node(1);
    for i in 0..MAX_ROOMS {
        a.handle(t(0), Input::Join(Room::new(format!("r{i}"))));
    }
    drain(&mut a);
    a.handle(t(0), Input::Join(Room::new("one more")));
    assert_eq!(
        drain(&mut a),
        vec![Output::JoinRefused {
            room: Room::new("one more")
        }]
    );
    // Joining a room already joined says nothing more.
    a.handle(t(0), Input::Join(Room::new("r0")));
    assert!(drain(&mut a).is_empty());
}

#[test]
fn the_replay_memory_is_pruned_after_the_window_and_asks_to_be_woken_for_it() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let (_, hello_b) = joined(node(2), t(0), &room());
    deliver(&mut a, t(0), &room(), &hello_b);
    assert_eq!(a.remembered_pairs(), 1);
    // Past any hello back that may be due.
    a.handle_timeout(t(secs(10)));
    let w = a.poll_timeout().unwrap();
    assert_eq!(
        (w.at, w.reason),
        (t(secs(120) + 1), "rendezvous replay memory")
    );
    a.handle_timeout(t(secs(120)));
    assert_eq!(a.remembered_pairs(), 1);
    a.handle_timeout(t(secs(120) + 1));
    assert_eq!(a.remembered_pairs(), 0);
    drain(&mut a);
    assert!(a.poll_timeout().unwrap().at > t(secs(120) + 1));
    // Stale now, not a fresh message.
    assert!(deliver(&mut a, t(secs(120) + 1), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::Stale), 1);
}

/// The hellos back `n` says at `at` on hearing `blob`.
fn hellos_back(n: &mut Node, at: u64, blob: &str) -> usize {
    blobs(&deliver(n, t(at), &room(), blob)).len()
}

/// `n` hears `peer`'s first hello at 30 s (a stranger: one hello back), then the mesh admits it.
fn heard_then_admitted(n: &mut Node, hello: &str, peer: &str) {
    assert_eq!(hellos_back(n, secs(30), hello), 1);
    n.handle(
        t(secs(31)),
        Input::Admitted {
            room: room(),
            peer: peer.into(),
        },
    );
}

#[test]
fn a_hello_from_a_peer_admitted_here_with_the_box_it_had_gets_no_hello_back() {
    let (a, b) = lesser_greater(3, 4);
    let (mut a, hello_a) = joined(a, t(0), &room());
    let (mut b, _) = joined(b, t(0), &room());
    heard_then_admitted(&mut b, &hello_a, a.did());
    // a's next hello, same box, costs the room nothing.
    a.handle(t(secs(45)), Input::RelayOpened(RelayId(0)));
    let again = blobs(&drain(&mut a));
    assert_eq!(again.len(), 1);
    assert_eq!(hellos_back(&mut b, secs(45), &again[0]), 0);
    assert_eq!(b.hello_backs_spared(), 1);
    // Once a has departed, its hellos are answered again.
    b.handle(
        t(secs(46)),
        Input::Departed {
            room: room(),
            peer: a.did().into(),
        },
    );
    a.handle(t(secs(60)), Input::RelayOpened(RelayId(0)));
    let third = blobs(&drain(&mut a));
    assert_eq!(hellos_back(&mut b, secs(60), &third[0]), 1);
}

#[test]
fn a_restarted_peer_with_a_new_box_is_said_hello_back_though_still_admitted() {
    let (a, b) = lesser_greater(5, 6);
    let a_seed = if a.did() == node(5).did() { 5 } else { 6 };
    let did = a.did().to_string();
    let (_, hello_a) = joined(a, t(0), &room());
    let (mut b, _) = joined(b, t(0), &room());
    heard_then_admitted(&mut b, &hello_a, &did);
    // The same session key, a new box: it restarted while b still holds it as admitted.
    let (_, hello_new) = joined(node_with(a_seed, 999), t(secs(50)), &room());
    assert_eq!(hellos_back(&mut b, secs(50), &hello_new), 1);
    assert_eq!(b.hello_backs_spared(), 0);
}

#[test]
fn the_same_blob_again_is_a_replay_within_the_window_and_stale_after_it() {
    let (a, b) = lesser_greater(1, 2);
    let (mut a, _) = joined(a, t(0), &room());
    let (_, hello_b) = joined(b, t(0), &room());
    assert_eq!(heard(&deliver(&mut a, t(1), &room(), &hello_b)).len(), 1);
    // The copy through the second relay.
    let outs = deliver_via(&mut a, t(2), &room(), &hello_b, RelayId(2));
    assert!(outs.is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 1);
    // On the window's edge it is still a replay; past it, stale, pruned or not.
    assert!(deliver(&mut a, t(secs(120)), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 2);
    assert!(deliver(&mut a, t(secs(120) + 1), &room(), &hello_b).is_empty());
    a.handle_timeout(t(secs(121)));
    drain(&mut a);
    assert!(deliver(&mut a, t(secs(121)), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::Stale), 2);
    assert_eq!(a.ignored_total(), 4);
}

#[test]
fn an_offer_for_another_peer_again_is_not_for_me_or_stale_as_the_first_time() {
    let (_, _, offer) = met();
    let (mut third, _) = joined(node(3), t(0), &room());
    for now in [t(3), t(4), t(secs(60))] {
        assert!(deliver(&mut third, now, &room(), &offer).is_empty());
    }
    assert_eq!(third.ignored(Ignored::NotForMe), 3);
    assert!(deliver(&mut third, t(secs(200)), &room(), &offer).is_empty());
    assert_eq!(third.ignored(Ignored::Stale), 1);
}

#[test]
fn a_blob_turned_away_from_a_full_room_is_checked_in_full_when_it_comes_again() {
    let (mut a, _) = joined(node(1), t(0), &room());
    for i in 0..MAX_ROOM_PEERS as u64 {
        let (_, hello) = joined(node(100 + i), t(0), &room());
        deliver(&mut a, t(0), &room(), &hello);
    }
    let (late, _) = joined(node(300), t(0), &room());
    let blob = forge(&room(), &session(300), hello_from(&late, T0 + secs(299)));
    assert!(deliver(&mut a, t(secs(299)), &room(), &blob).is_empty());
    assert_eq!(a.ignored(Ignored::RoomFull), 1);
    // The room's first peers are forgotten by now: the same blob is heard.
    assert_eq!(
        heard(&deliver(&mut a, t(secs(300)), &room(), &blob)).len(),
        1
    );
    assert!(deliver(&mut a, t(secs(301)), &room(), &blob).is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 1);
}

#[test]
fn a_blob_forgotten_by_the_memory_is_still_a_replay_when_it_comes_again() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let (b, hello_b) = joined(node(2), t(0), &room());
    deliver(&mut a, t(1), &room(), &hello_b);
    // More blobs since than the machine remembers, all acted on.
    for i in 0..SEEN_BLOBS as u64 {
        let blob = forge(&room(), &session(2), hello_from(&b, T0 + 10 + i));
        assert_eq!(heard(&deliver(&mut a, t(2), &room(), &blob)).len(), 1);
    }
    assert!(deliver(&mut a, t(3), &room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::Replay), 1);
}

#[test]
fn a_blob_changed_in_its_middle_is_ignored_whether_or_not_taken_for_the_one_remembered() {
    let (mut a, _) = joined(node(1), t(0), &room());
    let (_, hello_b) = joined(node(2), t(0), &room());
    deliver(&mut a, t(1), &room(), &hello_b);
    let mut bytes = hello_b.clone().into_bytes();
    let middle = bytes.len() / 2;
    bytes[middle] = if bytes[middle] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(bytes).unwrap();
    assert!(deliver(&mut a, t(2), &room(), &changed).is_empty());
    // Remembered by length and tail, it is ignored all the same; a tag that does not verify
    // would be the full path's reason.
    assert_eq!(a.ignored_total(), 1);
}

#[test]
fn a_blob_remembered_in_one_room_is_checked_in_full_under_another_rooms_topic() {
    let (mut a, _) = joined(node(1), t(0), &room());
    a.handle(t(0), Input::Join(other_room()));
    drain(&mut a);
    let (_, hello_b) = joined(node(2), t(0), &room());
    assert_eq!(heard(&deliver(&mut a, t(1), &room(), &hello_b)).len(), 1);
    assert!(deliver(&mut a, t(2), &other_room(), &hello_b).is_empty());
    assert_eq!(a.ignored(Ignored::DoesNotOpen), 1);
    assert_eq!(a.ignored_total(), 1);
}
