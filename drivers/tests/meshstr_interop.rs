//! meshstr interop with software weft did not write, both ways, through
//! `scripts/meshstr-interop` (Node): nostr-tools' NIP-44 v2 opens weft's grant-envelope payloads
//! and weft opens nostr-tools'; @noble/curves' BIP-340 verifies weft's hop and receipt signatures
//! (over messages and chain links it computes itself from the formulas) and weft verifies noble's;
//! nostr-tools verifies weft's signed meshstr events and weft checks one nostr-tools finalised.
//! Skipped with one `SKIP:` line where node or the npm registry cannot be had.

use std::path::Path;
use std::process::{Command, Stdio};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::meshstr::giftwrap::{self, Rumor};
use weft_proto::meshstr::keys::did_nostr;
use weft_proto::meshstr::limits::{Counter, Counters};
use weft_proto::meshstr::receipt::{AckStatus, Chain, Receipt};
use weft_proto::meshstr::{events, hop, nip44};
use weft_proto::nostr::Event;
use weft_proto::nostr::event::UnsignedEvent;

/// Exit status with which the project's interop scripts say "cannot run here".
const SKIP_STATUS: i32 = 77;

const NOW: u64 = 1787000000;

fn pk(p: &dyn CryptoProvider, s: &Secp256k1Secret) -> [u8; 32] {
    p.schnorr_public_key(s).unwrap()
}

/// weft's side: payloads, hops, receipts and events made by weft, for Node to check.
fn weft_artefacts(
    p: &'static dyn CryptoProvider,
    weft: &Secp256k1Secret,
    node: &Secp256k1Secret,
) -> Value {
    let mut rng = ChaCha20Rng::seed_from_u64(38);
    let recipient = generate_secp256k1(p, &mut rng);
    let ck = nip44::conversation_key(p, weft, &pk(p, &recipient)).unwrap();
    let nip44: Vec<Value> = [
        "a",
        "{\"blinding\":\"00\",\"body\":{\"limits\":{}}}",
        "é".repeat(20000).as_str(),
    ]
    .iter()
    .map(|plain| {
        json!({
            "recipient_secret": hex::encode(recipient.expose()),
            "sender_pubkey": hex::encode(&pk(p, weft)),
            "plaintext": plain,
            "payload": nip44::encrypt(p, &ck, plain, &mut rng).unwrap(),
        })
    })
    .collect();
    let event_id = [0x5a; 32];
    let mut path = Vec::new();
    let mut hops = Vec::new();
    for (i, k) in [weft, &recipient, node].into_iter().enumerate() {
        let did = did_nostr(&pk(p, k));
        let prev = path
            .last()
            .map_or(String::new(), |h: &hop::Hop| h.node.clone());
        let at = NOW + i as u64;
        hop::append(p, &mut path, k, &did, &event_id, at, &[i as u8; 32]).unwrap();
        hops.push(json!({
            "event_id": hex::encode(&event_id),
            "prev_hop": prev,
            "at": at,
            "msg": hex::encode(&hop::message(p, &event_id, &prev, at)),
            "pubkey": hex::encode(&pk(p, k)),
            "sig": hex::encode(&path[i].sig),
        }));
    }
    let mut receipts = Vec::new();
    let mut prev = [0u8; 32];
    for seq in 0..3 {
        let mut counters = Counters::ZERO;
        counters.set(Counter::EventsIn, 802 + seq);
        counters.set(Counter::BytesIn, 2216041);
        let mut r = Receipt {
            grant: "cd".repeat(32),
            window: 496389,
            seq,
            prev,
            counters,
            forwarded_for: vec![did_nostr(&pk(p, node))],
            at: 1787003600 + seq,
            sig: None,
        };
        r.sign(p, weft, &[7; 32]).unwrap();
        prev = r.link(p);
        receipts.push(json!({
            "subject": hex::encode(&pk(p, weft)),
            "link": hex::encode(&prev),
            "body": r.to_value(),
        }));
    }
    let sign = |kind, tags: Vec<Vec<&str>>| {
        UnsignedEvent {
            created_at: NOW,
            kind,
            tags: tags
                .into_iter()
                .map(|t| t.into_iter().map(String::from).collect())
                .collect(),
            content: String::new(),
        }
        .sign(p, weft, &mut ChaCha20Rng::seed_from_u64(kind.into()))
        .unwrap()
        .to_value()
    };
    let exp = (NOW + 3600).to_string();
    let events = vec![
        sign(
            events::HEARTBEAT,
            vec![vec!["class", "anchor"], vec!["load", "0.4"]],
        ),
        sign(
            events::COMPUTE_OFFER,
            vec![
                vec!["executor", "wasi-p1"],
                vec!["expiration", exp.as_str()],
            ],
        ),
    ];
    // NIP-59: rumors from weft to Node's key, wrapped as 1059 (store-and-forward) and 21059 (live).
    let wraps: Vec<Value> = [
        (giftwrap::WRAP, 14u16, "peering/1.0/propose"),
        (giftwrap::EPHEMERAL_WRAP, 14, "budget/1.0/receipt-ack"),
    ]
    .into_iter()
    .map(|(kind, inner, content)| {
        let rumor = Rumor::new(
            p,
            pk(p, weft),
            UnsignedEvent {
                created_at: NOW,
                kind: inner,
                tags: vec![vec!["p".into(), hex::encode(&pk(p, node))]],
                content: content.into(),
            },
        );
        json!({
            "rumor": rumor.to_value(),
            "wrap": giftwrap::wrap(p, weft, &rumor, &pk(p, node), kind, NOW, &mut rng)
                .unwrap()
                .to_value(),
        })
    })
    .collect();
    json!({
        "wraps": wraps,
        "node_secret": hex::encode(node.expose()),
        "weft_pubkey": hex::encode(&pk(p, weft)),
        "nip44": nip44,
        "hops": hops,
        "receipts": receipts,
        "events": events,
    })
}

/// weft's checks of what Node made.
fn check_node_artefacts(p: &'static dyn CryptoProvider, weft: &Secp256k1Secret, out: &Value) {
    let node_pk = hex::decode_array::<32>(out["pubkey"].as_str().unwrap()).unwrap();
    let ck = nip44::conversation_key(p, weft, &node_pk).unwrap();
    let payloads = out["nip44"].as_array().unwrap();
    assert_eq!(payloads.len(), 3);
    for c in payloads {
        let opened = nip44::decrypt(p, &ck, c["payload"].as_str().unwrap()).unwrap();
        assert_eq!(opened, c["plaintext"].as_str().unwrap());
    }
    let event_id = hex::decode_array::<32>(out["hop_event_id"].as_str().unwrap()).unwrap();
    let path = hop::path_from_value(&out["hops"]).unwrap();
    assert_eq!(
        hop::verify_path(p, &event_id, &path).unwrap(),
        vec![node_pk, node_pk]
    );
    let mut tampered = path.clone();
    tampered[1].at += 1;
    assert!(hop::verify_path(p, &event_id, &tampered).is_err());
    let mut chain = Chain::new(&"ab".repeat(32), node_pk, 3600);
    for r in out["receipts"].as_array().unwrap() {
        let r = Receipt::from_value(r).unwrap();
        assert!(r.verify(p, &node_pk), "noble's receipt signature");
        assert_eq!(
            chain.receive(p, &r, false, 1787003600).status,
            AckStatus::Accepted,
            "noble's chain link as prev"
        );
    }
    for e in out["events"].as_array().unwrap() {
        let e = Event::from_value(e).unwrap();
        assert_eq!(events::check(p, &e, NOW), Ok(events::HEARTBEAT));
    }
    // Node's gift wraps (nostr-tools' wrapEvent for 1059; its createRumor and createSeal under a
    // 21059 wrap), opened by weft: the rumor is Node's, with the content it wrapped.
    let wraps = out["wraps"].as_array().unwrap();
    assert_eq!(wraps.len(), 2);
    for w in wraps {
        let e = Event::from_value(&w["wrap"]).unwrap();
        let opened = giftwrap::unwrap(p, weft, &e).unwrap();
        assert_eq!(opened.rumor.pubkey, node_pk);
        assert_eq!(opened.rumor.content, w["content"].as_str().unwrap());
        assert_eq!(
            hex::encode(&opened.rumor.id),
            w["rumor_id"].as_str().unwrap()
        );
        // Addressed to weft only: the node's own key opens nothing.
        assert!(giftwrap::unwrap(p, &Secp256k1Secret::from_bytes([9; 32]), &e).is_err());
    }
    assert_eq!(
        wraps
            .iter()
            .map(|w| w["wrap"]["kind"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1059, 21059]
    );
}

#[test]
fn nostr_tools_and_noble_check_weft_and_weft_checks_them() {
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(1038);
    let weft = generate_secp256k1(p, &mut rng);
    let node = generate_secp256k1(p, &mut rng);
    let dir = std::env::temp_dir().join(format!("weft-meshstr-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("weft.json");
    std::fs::write(&file, weft_artefacts(p, &weft, &node).to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/meshstr-interop");
    let out = Command::new(script)
        .arg("check")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("scripts/meshstr-interop runs");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(SKIP_STATUS) {
        println!("{}", stdout.trim());
        return;
    }
    assert!(
        out.status.success(),
        "meshstr interop check failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "ok: nostr-tools opened 3 NIP-44 v2 payloads weft sealed",
        "ok: noble verified 3 hop signatures over messages it computed",
        "ok: noble verified 3 receipt signatures over links it computed",
        "ok: nostr-tools verified 2 meshstr events weft signed",
        "ok: nostr-tools unwrapped 2 NIP-59 gift wraps weft made (1059 and 21059)",
    ] {
        assert!(stdout.contains(step), "no {step:?} in:\n{stdout}");
    }
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("a RESULT line");
    check_node_artefacts(p, &weft, &serde_json::from_str(result).unwrap());
}
