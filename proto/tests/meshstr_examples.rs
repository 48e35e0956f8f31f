//! Replays `vectors/meshstr/examples.json`: the artefacts meshstr/0-draft prints (the receipt
//! body, the handover body, delivery hops, the endpoints digest, a signed meshstr event, the node
//! ceiling's worked number) and the §10 digest over weft's shipped schema, as computed by
//! `vectors/meshstr/independent.py`, a fixture written from the spec text, NIP-01 and BIP-340
//! only. weft must produce every byte the same: links, names, messages, ids, and (BIP-340 being
//! deterministic given its aux) the signatures themselves.

use std::process::Command;

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::meshstr::handover::{Link, check_chain};
use weft_proto::meshstr::keys::{self, did_nostr};
use weft_proto::meshstr::limits::{Counter, Counters, Limit, Limits, Tier, ceiling};
use weft_proto::meshstr::receipt::{AckStatus, Chain, Receipt, window_of};
use weft_proto::meshstr::{
    canonical, events, grant, hop, replication, report, schema, transport, window,
};
use weft_proto::nostr::Event;
use weft_proto::nostr::event::UnsignedEvent;

fn load() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../vectors/meshstr/examples.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap()
}

fn secret(v: &Value, name: &str) -> Secp256k1Secret {
    Secp256k1Secret::from_bytes(hex::decode_array::<32>(s(&v["keys"][name])).unwrap())
}

fn sign(p: &dyn CryptoProvider, k: &Secp256k1Secret, msg: &[u8; 32]) -> String {
    hex::encode(&p.schnorr_sign(k, msg, &[0; 32]).unwrap())
}

#[test]
fn meshstr_receipt_example() {
    let p = default_provider();
    let v = load();
    let r = &v["receipt"];
    let subject = secret(&v, "subject");
    assert_eq!(
        hex::encode(&p.schnorr_public_key(&subject).unwrap()),
        s(&r["subject"])
    );
    let receipt = Receipt::from_value(&r["body"]).unwrap();
    let mut unsigned = receipt.to_value();
    unsigned.as_object_mut().unwrap().remove("sig");
    assert_eq!(canonical(&unsigned), s(&r["canonical_without_sig"]));
    assert_eq!(hex::encode(&receipt.link(p)), s(&r["link"]));
    assert_eq!(sign(p, &subject, &receipt.link(p)), s(&r["body"]["sig"]));
    assert!(receipt.verify(p, &p.schnorr_public_key(&subject).unwrap()));
    assert_eq!(
        receipt.to_value(),
        r["body"],
        "the body round-trips exactly"
    );
    assert_eq!(
        window_of(receipt.at, r["window_secs"].as_u64().unwrap()),
        r["window_of_at"].as_u64().unwrap()
    );
    assert_eq!(receipt.window, r["window_of_at"].as_u64().unwrap());
}

#[test]
fn meshstr_handover_example() {
    let p = default_provider();
    let v = load();
    let h = &v["handover"];
    let link = Link::from_value(&h["body"]).unwrap();
    assert_eq!(hex::encode(&link.name(p)), s(&h["name"]));
    let mut unsigned = link.to_value();
    unsigned.as_object_mut().unwrap().remove("sig");
    assert_eq!(canonical(&unsigned), s(&h["canonical_without_sig"]));
    assert_eq!(
        sign(p, &secret(&v, "issuer"), &link.name(p)),
        s(&h["body"]["sig"])
    );
    let checked = check_chain(p, &[link]).unwrap();
    assert_eq!(hex::encode(&checked.tag), s(&h["name"]));
    let replica = p.schnorr_public_key(&secret(&v, "replica")).unwrap();
    assert_eq!(checked.holder, replica);
}

#[test]
fn meshstr_hop_example() {
    let p = default_provider();
    let v = load();
    let hops = &v["hops"];
    let id = hex::decode_array::<32>(s(&hops["event_id"])).unwrap();
    let path = hops["path"].as_array().unwrap();
    let mut prev = String::new();
    for (h, name) in path.iter().zip(["issuer", "forwarder"]) {
        let k = secret(&v, name);
        let msg = hop::message(p, &id, &prev, h["at"].as_u64().unwrap());
        assert_eq!(hex::encode(&msg), s(&h["msg"]));
        assert_eq!(sign(p, &k, &msg), s(&h["sig"]));
        assert_eq!(did_nostr(&p.schnorr_public_key(&k).unwrap()), s(&h["node"]));
        prev = s(&h["node"]).into();
    }
    let bare: Vec<Value> = path
        .iter()
        .map(|h| serde_json::json!({"node": h["node"], "at": h["at"], "sig": h["sig"]}))
        .collect();
    let parsed = hop::path_from_value(&Value::Array(bare)).unwrap();
    assert_eq!(hop::verify_path(p, &id, &parsed).unwrap().len(), 2);
}

#[test]
fn meshstr_endpoints_digest_and_signed_event() {
    let p = default_provider();
    let v = load();
    let pairs: Vec<(String, String)> = v["endpoints"]["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .rev() // weft sorts them itself
        .map(|x| (s(&x[0]).into(), s(&x[1]).into()))
        .collect();
    assert_eq!(
        hex::encode(&events::endpoints_digest(p, &pairs)),
        s(&v["endpoints"]["digest"])
    );
    let e = Event::from_value(&v["event"]).unwrap();
    assert_eq!(hex::encode(&e.compute_id(p)), s(&v["event"]["id"]));
    assert!(e.verify(p).is_ok());
    assert_eq!(sign(p, &secret(&v, "issuer"), &e.id), s(&v["event"]["sig"]));
    assert_eq!(events::check(p, &e, 1787000000), Ok(events::HEARTBEAT));
}

#[test]
fn meshstr_node_ceiling_and_protocol_digest() {
    let v = load();
    let c = &v["node_ceiling"];
    let per = ceiling(Tier::Anchor, Limit::EventsIn);
    assert_eq!(per, c["events_in_ceiling_anchor"].as_u64().unwrap());
    assert_eq!(
        c["grants"].as_u64().unwrap() * per,
        c["events_per_hour"].as_u64().unwrap()
    );
    assert_eq!(c["events_per_hour"], 960_000);
    assert_eq!(s(&v["protocol_digest"]["digest"]), schema::DIGEST_HEX);
    assert_eq!(
        hex::encode(&schema::digest(default_provider())),
        schema::DIGEST_HEX
    );
}

#[test]
fn meshstr_descriptor_example() {
    let p = default_provider();
    let v = load();
    let d = &v["descriptor"];
    let e = Event::from_value(&d["event"]).unwrap();
    let now = d["now"].as_u64().unwrap();
    assert_eq!(hex::encode(&e.compute_id(p)), s(&d["event"]["id"]));
    assert_eq!(sign(p, &secret(&v, "issuer"), &e.id), s(&d["event"]["sig"]));
    // The example's nonce target (20 bits) is the work weft asks of every descriptor.
    assert_eq!(events::check(p, &e, now), Ok(events::DESCRIPTOR));
    let desc = events::descriptor(&e, now, events::DESCRIPTOR_POW_BITS).unwrap();
    assert_eq!(desc.class, events::NodeClass::Edge);
    assert_eq!(
        desc.digest,
        schema::digest(p),
        "the protocol tag names weft's digest"
    );
    assert!(
        desc.declares("peering/1.0") && desc.declares("budget/1.0") && desc.declares("sync/1.0")
    );
    let seed = hex::decode_array::<32>(s(&d["transport_seed"])).unwrap();
    let transport = p.ed25519_public_key(&weft_proto::crypto::Ed25519Seed::from_bytes(seed));
    assert_eq!(
        desc.transport,
        Some(transport),
        "the Ed25519 key RFC 8032 derives"
    );
    assert!(desc.binds_transport(&transport, now));
    assert_eq!(desc.agreement.len(), 1);
    assert_eq!(desc.agreement[0].1, Some(1795000000));
    let pairs: Vec<(String, String)> = desc
        .endpoints
        .iter()
        .map(|(s, a, _)| (s.clone(), a.clone()))
        .collect();
    assert_eq!(
        hex::encode(&events::endpoints_digest(p, &pairs)),
        s(&d["endpoints_digest"])
    );
    let profile = desc.profile();
    assert_eq!(profile["id"], keys::did_nostr(&e.pubkey));
    let types: Vec<&str> = profile["service"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["IrohNode", "NostrRelay"],
        "by preference; libp2p lists none"
    );
    // A committed target one bit under the example's 20 is refused.
    let mut lighter = e.clone();
    let nonce = lighter.tags.iter_mut().find(|t| t[0] == "nonce").unwrap();
    nonce[2] = "19".into();
    assert!(events::descriptor(&lighter, now, events::DESCRIPTOR_POW_BITS).is_err());
    // Past its NIP-40 expiration the descriptor binds nothing.
    assert!(events::descriptor(&e, 1789600000, 0).is_err());
}

// ---- The independent reading (vectors/meshstr/independent.py `check`) against weft's outputs ----

const NOW: u64 = 1787003600;

/// The work the generated descriptors carry.
const POW_BITS: u32 = 10;

fn below(rng: &mut ChaCha20Rng, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

fn signed(
    p: &dyn CryptoProvider,
    k: &Secp256k1Secret,
    kind: u16,
    tags: Vec<Vec<String>>,
    content: &str,
) -> Event {
    UnsignedEvent {
        created_at: NOW,
        kind,
        tags,
        content: content.into(),
    }
    .sign(p, k, &mut ChaCha20Rng::seed_from_u64(u64::from(kind)))
    .unwrap()
}

fn t(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| String::from(*x)).collect()
}

/// Receipt chains, some rewritten, some broken; weft's verdict is how many an issuer accepts.
fn receipt_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..12u64 {
        let subject = generate_secp256k1(p, rng);
        let other = generate_secp256k1(p, rng);
        let grant = hex::encode(&p.sha256(&[&case.to_be_bytes()]));
        let mut counters = Counters::ZERO;
        let mut prev = [0u8; 32];
        let mut rs: Vec<Receipt> = Vec::new();
        for seq in 0..4 {
            for c in Counter::ALL {
                counters.set(c, counters.get(c) + below(rng, 50));
            }
            let mut r = Receipt {
                grant: grant.clone(),
                window: NOW / 3600,
                seq,
                prev,
                counters,
                forwarded_for: vec![],
                at: NOW + seq,
                sig: None,
            };
            r.sign(p, &subject, &[seq as u8; 32]).unwrap();
            prev = r.link(p);
            rs.push(r);
        }
        let at = (case % 4) as usize;
        match case / 4 {
            0 => {}
            // A counter goes down, re-signed: not cumulative.
            1 if case % 2 == 0 => {
                let r = &mut rs[at.max(1)];
                r.counters.set(Counter::EventsIn, 0);
                r.sign(p, &subject, &[9; 32]).unwrap();
            }
            // An earlier receipt rewritten after the next was chained to it.
            1 => {
                let r = &mut rs[at.min(2)];
                r.counters
                    .set(Counter::BytesOut, r.counters.get(Counter::BytesOut) + 1);
                r.sign(p, &subject, &[9; 32]).unwrap();
            }
            // Signed by another key, or a seq skipped.
            _ if case % 2 == 0 => rs[at].sign(p, &other, &[9; 32]).unwrap(),
            _ => {
                let r = &mut rs[at];
                r.seq += 1;
                r.sign(p, &subject, &[9; 32]).unwrap();
            }
        }
        let pk = p.schnorr_public_key(&subject).unwrap();
        let mut chain = Chain::new(&grant, pk, 3600);
        let accepted = rs
            .iter()
            .take_while(|r| chain.receive(p, r, false, NOW).status == AckStatus::Accepted)
            .count();
        out.push(json!({
            "subject": hex::encode(&pk),
            "receipts": rs.iter().map(Receipt::to_value).collect::<Vec<_>>(),
            "weft_accepted": accepted,
            "weft_links": rs.iter().map(|r| hex::encode(&r.link(p))).collect::<Vec<_>>(),
        }));
    }
    out
}

/// Handover chains of one to three links, whole and broken in each way §3.2 names.
fn handover_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..14u64 {
        let keys: Vec<Secp256k1Secret> = (0..4).map(|_| generate_secp256k1(p, rng)).collect();
        let dids: Vec<String> = keys
            .iter()
            .map(|k| did_nostr(&p.schnorr_public_key(k).unwrap()))
            .collect();
        let n = 1 + (case % 3) as usize;
        let mut links: Vec<Link> = (0..n)
            .map(|i| Link {
                from: dids[i].clone(),
                to: dids[i + 1].clone(),
                shard: "bristol-2026H2".into(),
                claim: format!("30803:{}:bristol-2026H2", &dids[i][10..]),
                filter: "{\"#t\":[\"bristol\"],\"kinds\":[1]}".into(),
                since: 1751328000,
                until: 1767225600,
                fingerprint: hex::encode(&p.sha256(&[b"set"])[..16]),
                count: 5,
                at: 1787100000 + i as u64,
                sig: None,
            })
            .collect();
        let last = n - 1;
        match case / 3 {
            0 => {}
            1 => links[last].count += 1,                 // another set
            2 => links[last].until = links[last].at + 1, // an open range
            3 if n > 1 => links[0].to = dids[3].clone(), // hands to someone else
            3 => links[0].to = dids[0].clone(),          // hands to itself
            _ => links[last].to = dids[0].clone(),       // a key twice
        }
        for (i, l) in links.iter_mut().enumerate() {
            l.sign(p, &keys[i], &[i as u8; 32]).unwrap();
        }
        if case == 13 {
            links[0].since += 1; // altered after signing
        }
        let weft = match check_chain(p, &links) {
            Ok(c) => json!({"tag": hex::encode(&c.tag), "holder": did_nostr(&c.holder)}),
            Err(_) => Value::Null,
        };
        out.push(json!({
            "links": links.iter().map(Link::to_value).collect::<Vec<_>>(),
            "weft": weft,
        }));
    }
    out
}

/// Hop paths of one to three forwarders, a fourth, and a rewritten `at`.
fn hop_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..8u64 {
        let mut id = [0u8; 32];
        rng.fill_bytes(&mut id);
        let n = 1 + (case % 3) as usize;
        let mut path = Vec::new();
        for i in 0..n {
            let k = generate_secp256k1(p, rng);
            let node = did_nostr(&p.schnorr_public_key(&k).unwrap());
            hop::append(p, &mut path, &k, &node, &id, NOW + i as u64, &[1; 32]).unwrap();
        }
        if case == 6 {
            path[n - 1].at += 1;
        }
        while case == 7 && path.len() < 4 {
            path.push(path[0].clone()); // a fourth hop, which append refuses to make
        }
        let weft_ok = hop::verify_path(p, &id, &path).is_ok();
        let mut prev = String::new();
        let msgs: Vec<String> = path
            .iter()
            .map(|h| {
                let m = hex::encode(&hop::message(p, &id, &prev, h.at));
                prev = h.node.clone();
                m
            })
            .collect();
        out.push(json!({
            "event_id": hex::encode(&id),
            "path": path.iter().map(hop::Hop::to_value).collect::<Vec<_>>(),
            "weft_ok": weft_ok,
            "weft_msgs": msgs,
        }));
    }
    out
}

/// Descriptors weft builds, fit and unfit.
fn descriptor_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..4u64 {
        let k = generate_secp256k1(p, rng);
        let pk = p.schnorr_public_key(&k).unwrap();
        let mut spec = events::DescriptorSpec {
            class: Some(events::NodeClass::Edge),
            digest: schema::digest(p),
            agreement: Some(([7; 32], Some(NOW + 90 * 86400))),
            transport: Some([8; 32]),
            endpoints: vec![
                ("wss".into(), format!("wss://relay{case}.example.org"), 40),
                ("iroh".into(), hex::encode(&[8; 32]), 10),
                (
                    "https".into(),
                    "https://relay.example.org/didcomm".into(),
                    30,
                ),
            ],
            protocols: vec!["peering/1.0".into(), "budget/1.0".into(), "sync/1.0".into()],
            capabilities: vec!["relay".into()],
            expiration: NOW + 29 * 86400,
            ..Default::default()
        };
        match case {
            0 => {}
            1 => spec.expiration = NOW + 31 * 86400, // over an edge's 30 days
            2 => spec.class = Some(events::NodeClass::Leaf), // over a leaf's 24 hours
            _ => spec.protocols.retain(|x| x != "budget/1.0"), // budget/1.0 not declared
        }
        let unsigned = UnsignedEvent {
            created_at: NOW,
            kind: events::DESCRIPTOR,
            tags: spec.tags(),
            content: String::new(),
        };
        // Mined to fewer bits than a node asks (the example carries the full 20), so the test
        // stays fast; both readings are handed the same bound.
        let (mined, _) = events::mine(p, &pk, unsigned, POW_BITS, 0..u64::MAX).unwrap();
        let e = mined.sign(p, &k, rng).unwrap();
        let pairs: Vec<(String, String)> = spec
            .endpoints
            .iter()
            .map(|(s, a, _)| (s.clone(), a.clone()))
            .collect();
        out.push(json!({
            "event": e.to_value(),
            "now": NOW,
            "min_pow_bits": POW_BITS,
            "weft_ok": e.verify(p).is_ok() && events::descriptor(&e, NOW, POW_BITS).is_ok(),
            "weft_endpoints_digest": hex::encode(&events::endpoints_digest(p, &pairs)),
        }));
    }
    out
}

/// Windows across every tier and every branch: measurements around each limit, claims equal,
/// close, far, or absent.
fn window_cases(rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..400u64 {
        let tier = Tier::ALL[(case % 4) as usize];
        let mut state = window::GrantState::open(tier);
        if case % 3 == 0 {
            // A grant set lower than its opening, as §6.6 allows.
            for l in Limit::ALL {
                state.limits.set(l, below(rng, state.limits.get(l) + 1));
            }
        }
        // Per counter: nothing, under, at, just over, over, far over, very far over.
        let scale = [0u64, 500, 1000, 1090, 1100, 2000, 5000, 9000];
        let mut measured = Counters::ZERO;
        let pick = below(rng, 4);
        for c in Counter::ALL {
            let base = Limit::ALL
                .iter()
                .find(|l| l.counter() == c)
                .map_or(measured.get(Counter::EventsIn), |&l| state.limits.get(l));
            let f = if pick == 0 {
                scale[below(rng, 3) as usize]
            } else {
                scale[below(rng, 8) as usize]
            };
            // Duplicates as a share of events: up to 30 %, so 0.15 is crossed both ways.
            let f = if c == Counter::DupsSent {
                below(rng, 300)
            } else {
                f
            };
            measured.set(c, base * f / 1000 + below(rng, 3));
        }
        if case % 7 == 0 {
            measured = Counters::ZERO;
        }
        let claimed = match case % 5 {
            0 => None,
            1 => Some(measured),
            _ => {
                let mut c = measured;
                for x in Counter::ALL {
                    let m = c.get(x);
                    c.set(x, m.saturating_sub(m * below(rng, 300) / 1000));
                }
                Some(c)
            }
        };
        let eval = window::evaluate(&state.limits, &measured, claimed.as_ref());
        let after = window::update(&state, eval.severity, Some(&measured), NOW);
        out.push(json!({
            "tier": tier.as_str(),
            "limits": state.limits.to_value(),
            "measured": measured.to_value(),
            "claimed": claimed.map(|c| c.to_value()),
            "weft": {
                "severity": eval.severity.as_str(),
                "per_limit": Limit::ALL
                    .iter()
                    .zip(eval.per_limit)
                    .map(|(l, s)| (l.as_str().to_string(), Value::from(s.as_str())))
                    .collect::<Map<_, _>>(),
                "dup_ratio": eval.dup_ratio.map(|s| s.as_str()),
                "active_silence": eval.active_silence,
                "tier": after.state.tier.as_str(),
                "limits": after.state.limits.to_value(),
            },
        }));
    }
    out
}

fn ladder_cases(rng: &mut ChaCha20Rng) -> Vec<Value> {
    let schemes = ["iroh", "libp2p", "wss", "https", "nostr", "ws"];
    (0..30)
        .map(|_| {
            let mut side = || -> Vec<(String, u32)> {
                let mut out = Vec::new();
                for s in schemes {
                    if below(rng, 3) != 0 {
                        out.push((s.to_string(), below(rng, 6) as u32 * 10));
                    }
                }
                out
            };
            let (ours, theirs) = (side(), side());
            let rungs: Vec<Value> = transport::ladder(&ours, &theirs)
                .into_iter()
                .map(|r| json!([r.scheme, r.sum]))
                .collect();
            json!({"ours": ours, "theirs": theirs, "weft": rungs})
        })
        .collect()
}

fn replication_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> (Vec<Value>, Vec<Value>) {
    let k = generate_secp256k1(p, rng);
    let evs: Vec<Event> = (0..24u64)
        .map(|i| {
            UnsignedEvent {
                created_at: NOW + below(rng, 3), // ties on purpose; the id decides them
                kind: 30000 + (i % 3) as u16,
                tags: vec![t(&["d", "x"]), t(&["n", &i.to_string()])],
                content: String::new(),
            }
            .sign(p, &k, rng)
            .unwrap()
        })
        .collect();
    let brief = |e: &Event| json!({"created_at": e.created_at, "id": e.id_hex()});
    let winners = evs
        .chunks(2)
        .map(|w| json!({"a": brief(&w[0]), "b": brief(&w[1]), "weft_a_wins": replication::wins(&w[0], &w[1])}))
        .collect();
    let mut sorted = evs.clone();
    sorted.sort_by(replication::enumeration_order);
    let order = vec![json!({
        "events": evs.iter().map(brief).collect::<Vec<_>>(),
        "weft": sorted.iter().map(Event::id_hex).collect::<Vec<_>>(),
    })];
    (winners, order)
}

fn grant_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..6u64 {
        let issuer = generate_secp256k1(p, rng);
        let subject = generate_secp256k1(p, rng);
        let stranger = generate_secp256k1(p, rng);
        let kind = if case % 2 == 0 {
            events::GRANT
        } else {
            events::JOB_RECEIPT
        };
        let body = json!({"tier": "member", "limits": Limits::opening(Tier::Member).to_value(), "n": case});
        let mut blinding = [0u8; 32];
        rng.fill_bytes(&mut blinding);
        let env = grant::Envelope {
            kind,
            window_secs: 3600,
            epoch: 1,
            created_at: NOW,
            expiration: NOW + 86400,
        };
        let sub_pk = p.schnorr_public_key(&subject).unwrap();
        // Case 2, 3: sealed to another subject, so `d` is not this pair's.
        let to = if case / 2 == 1 {
            p.schnorr_public_key(&stranger).unwrap()
        } else {
            sub_pk
        };
        let mut u = grant::seal(p, &issuer, &to, &env, &body, &blinding, &[5; 32]).unwrap();
        if case / 2 == 2 {
            // The commitment names another body.
            let other = json!({"tier": "anchor"});
            let c = hex::encode(&grant::commitment(p, &blinding, &other));
            u.tags.iter_mut().find(|x| x[0] == "commit").unwrap()[1] = c;
        }
        let e = u.sign(p, &issuer, rng).unwrap();
        let which = if kind == events::GRANT {
            grant::Blinding::Grant
        } else {
            grant::Blinding::Job
        };
        let d = grant::blinded_d(p, &subject, &e.pubkey, which).unwrap();
        let weft = json!({
            "d_matches": e.tag_value("d") == Some(hex::encode(&d).as_str()),
            "commit_matches": e.tag_value("commit")
                == Some(hex::encode(&grant::commitment(p, &blinding, &body)).as_str())
                && e.tag_value("scheme") == Some(grant::COMMITMENT_SCHEME),
        });
        assert_eq!(
            grant::open(p, &subject, &e).is_ok(),
            weft["d_matches"] == true && weft["commit_matches"] == true
        );
        out.push(json!({
            "event": e.to_value(),
            "subject_secret": hex::encode(subject.expose()),
            "blinding": hex::encode(&blinding),
            "body": body,
            "weft": weft,
        }));
    }
    out
}

fn report_cases(p: &dyn CryptoProvider, rng: &mut ChaCha20Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for case in 0..6u64 {
        let reporter = generate_secp256k1(p, rng);
        let subject = generate_secp256k1(p, rng);
        let other = generate_secp256k1(p, rng);
        let h = "ab".repeat(32);
        let exp = (NOW + 3600).to_string();
        let grant_by = if case == 2 { &other } else { &reporter };
        let g = signed(
            p,
            grant_by,
            events::GRANT,
            vec![
                t(&["d", &h]),
                t(&["commit", &h]),
                t(&["scheme", grant::COMMITMENT_SCHEME]),
                t(&["window", "3600"]),
                t(&["epoch", "1"]),
                t(&["expiration", &exp]),
            ],
            "x",
        );
        let mut counters = Counters::ZERO;
        counters.set(Counter::EventsIn, 10 + case);
        let mut r = Receipt {
            grant: g.id_hex(),
            window: NOW / 3600,
            seq: 0,
            prev: [0; 32],
            counters,
            forwarded_for: vec![],
            at: NOW,
            sig: None,
        };
        r.sign(p, if case == 3 { &other } else { &subject }, &[3; 32])
            .unwrap();
        let mut link = hex::encode(&r.link(p));
        let mut evidence = Map::new();
        if case != 1 {
            evidence.insert(g.id_hex(), g.to_value());
        }
        evidence.insert(link.clone(), r.to_value());
        if case == 4 {
            link = "cd".repeat(32); // the tag names something the map does not key
        }
        let subject_hex = hex::encode(&p.schnorr_public_key(&subject).unwrap());
        let outcome = if case == 5 { "S0" } else { "S2" };
        let e = signed(
            p,
            &reporter,
            events::REPORT,
            vec![
                t(&["d", &subject_hex]),
                t(&["outcome", outcome]),
                t(&["grant", &g.id_hex()]),
                t(&["windows", &(NOW / 3600).to_string()]),
                t(&["evidence", &link]),
                t(&["expiration", &exp]),
            ],
            &canonical(&json!({"note": "diverged", "evidence": Value::Object(evidence)})),
        );
        out.push(json!({
            "event": e.to_value(),
            "now": NOW,
            "weft_admitted": report::admit(p, &e, NOW).is_ok(),
        }));
    }
    out
}

/// Everything weft computes that the independent reading recomputes.
fn weft_outputs() -> Value {
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(3838);
    let (winners, orders) = replication_cases(p, &mut rng);
    json!({
        "receipts": receipt_cases(p, &mut rng),
        "handovers": handover_cases(p, &mut rng),
        "hops": hop_cases(p, &mut rng),
        "descriptors": descriptor_cases(p, &mut rng),
        "windows": window_cases(&mut rng),
        "ladders": ladder_cases(&mut rng),
        "winners": winners,
        "orders": orders,
        "grants": grant_cases(p, &mut rng),
        "reports": report_cases(p, &mut rng),
    })
}

/// Runs `independent.py check` on `outputs`; `None` when there is no python3 to run it.
fn independent_check(outputs: &Value, name: &str) -> Option<(bool, String)> {
    let dir = std::env::temp_dir().join(format!("weft-meshstr-independent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, outputs.to_string()).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../vectors/meshstr/independent.py"
    );
    let run = Command::new("python3")
        .arg(script)
        .arg("check")
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    match run {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("python3 would not start: {e}"),
        Ok(o) => Some((
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )),
    }
}

#[test]
fn meshstr_independent_reading_agrees_with_weft() {
    let outputs = weft_outputs();
    // The cases reach both verdicts, so agreement is not agreement on "valid" alone.
    let verdicts = |k: &str, f: &dyn Fn(&Value) -> bool| {
        let v: Vec<bool> = outputs[k].as_array().unwrap().iter().map(f).collect();
        assert!(
            v.contains(&true) && v.contains(&false),
            "{k}: only one verdict"
        );
    };
    verdicts("receipts", &|c| c["weft_accepted"] == 4);
    verdicts("handovers", &|c| !c["weft"].is_null());
    verdicts("hops", &|c| c["weft_ok"] == true);
    verdicts("descriptors", &|c| c["weft_ok"] == true);
    verdicts("grants", &|c| {
        c["weft"]["d_matches"] == true && c["weft"]["commit_matches"] == true
    });
    verdicts("reports", &|c| c["weft_admitted"] == true);
    for sev in ["S0", "S1", "S2", "S3"] {
        assert!(
            outputs["windows"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["weft"]["severity"] == sev),
            "no window evaluated {sev}"
        );
    }
    let Some((ok, out)) = independent_check(&outputs, "weft.json") else {
        println!("SKIP: no python3 to run vectors/meshstr/independent.py");
        return;
    };
    assert!(ok, "the independent reading disagrees with weft:\n{out}");
    print!("{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok: ")).count(),
        10,
        "{out}"
    );

    // The check can fail: one value weft computed, changed, is caught. (Only the two sections
    // changed are sent again; the others are empty, which the reading takes as agreeing.)
    let mut wrong = outputs.clone();
    for (k, v) in wrong.as_object_mut().unwrap() {
        if k != "windows" && k != "receipts" {
            *v = json!([]);
        }
    }
    let w = &mut wrong["windows"][1]["weft"]["limits"]["req"];
    *w = (w.as_u64().unwrap() + 1).into();
    wrong["receipts"][0]["weft_accepted"] = 3.into();
    let (ok, out) = independent_check(&wrong, "wrong.json").unwrap();
    assert!(!ok, "a changed value went unnoticed:\n{out}");
    assert!(
        out.contains("FAIL: window evaluations") && out.contains("FAIL: receipt chains"),
        "{out}"
    );
}
