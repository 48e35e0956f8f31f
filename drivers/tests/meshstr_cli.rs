//! `weft meshstr` as an operator and a reader of reports run it offline (issue #38's program):
//! `keygen`, `descriptor make|check`, `grant open|inspect`, `receipt verify-chain`,
//! `window evaluate`, `report verify`, `hop verify`, and `did`, `digest`, `verify`. Each reads JSON
//! and prints one JSON object, and its exit status says valid (0), refused (1, with the reason in
//! `refused`) or could not run (2). Every subcommand is also run on an artefact altered the way an
//! attacker would (re-signed by another key, tampered after signing, replayed out of order,
//! expired), and must refuse it.

use std::path::{Path, PathBuf};
use std::process::Command;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Map, Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider};
use weft_proto::meshstr::limits::{Counter, Counters};
use weft_proto::meshstr::receipt::Receipt;
use weft_proto::meshstr::{canonical, events, grant, hop, keys};
use weft_proto::nostr::Event;
use weft_proto::nostr::event::UnsignedEvent;

const EXAMPLES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../vectors/meshstr/examples.json"
);

/// The time the artefacts below are made and checked at.
const NOW: u64 = 1_787_003_600;

fn examples() -> Value {
    serde_json::from_str(&std::fs::read_to_string(EXAMPLES).unwrap()).unwrap()
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("weft-meshstr-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, v: &Value) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    /// A secret key file (64 hex digits), as `keygen` writes one.
    fn key(&self, name: &str, secret: &Secp256k1Secret) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, format!("{}\n", hex::encode(secret.expose()))).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `weft meshstr ARGS`: the exit status and the JSON it printed (`Null` when none).
fn weft(args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("meshstr")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.code().unwrap(),
        serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
    )
}

/// Runs `weft meshstr ARGS` wanting a refusal (exit 1) whose reason contains `why`.
fn refuses(args: &[&str], why: &str) -> Value {
    let (code, out) = weft(args);
    assert_eq!(code, 1, "{args:?}: {out}");
    assert_eq!(out["valid"], false, "{args:?}: {out}");
    let reason = out["refused"].as_str().unwrap_or_default();
    assert!(reason.contains(why), "{args:?}: wanted {why}, got {out}");
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn secret(seed: u8) -> Secp256k1Secret {
    let p: &dyn CryptoProvider = default_provider();
    Secp256k1Secret::from_bytes(p.sha256(&[b"weft meshstr cli test key".as_slice(), &[seed]]))
}

fn pubkey(k: &Secp256k1Secret) -> [u8; 32] {
    default_provider().schnorr_public_key(k).unwrap()
}

fn sign(k: &Secp256k1Secret, kind: u16, tags: Vec<Vec<String>>, content: &str) -> Event {
    UnsignedEvent {
        created_at: NOW,
        kind,
        tags,
        content: content.into(),
    }
    .sign(
        default_provider(),
        k,
        &mut ChaCha20Rng::seed_from_u64(u64::from(kind)),
    )
    .unwrap()
}

fn t(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| String::from(*x)).collect()
}

/// An event re-signed by `k` after `edit`: a valid signature over altered content.
fn resigned(e: &Event, k: &Secp256k1Secret, edit: impl FnOnce(&mut UnsignedEvent)) -> Event {
    let mut u = UnsignedEvent {
        created_at: e.created_at,
        kind: e.kind,
        tags: e.tags.clone(),
        content: e.content.clone(),
    };
    edit(&mut u);
    u.sign(default_provider(), k, &mut ChaCha20Rng::seed_from_u64(9))
        .unwrap()
}

#[test]
fn keygen_writes_owner_only_keys_and_never_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("keygen");
    let key = dir.0.join("node.key");
    let transport = dir.0.join("transport.key");
    let agreement = dir.0.join("agreement.key");
    let (code, out) = weft(&[
        "keygen",
        "--out",
        s(&key),
        "--transport",
        s(&transport),
        "--agreement",
        s(&agreement),
    ]);
    assert_eq!(code, 0, "{out}");
    for f in [&key, &transport, &agreement] {
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    assert!(out["transport"].as_str().unwrap().starts_with("fed01"));
    // The transport multikey is the Ed25519 key of the seed written.
    let seed =
        hex::decode_array::<32>(std::fs::read_to_string(&transport).unwrap().trim()).unwrap();
    let public =
        default_provider().ed25519_public_key(&weft_proto::crypto::Ed25519Seed::from_bytes(seed));
    assert_eq!(
        out["transport"],
        keys::multikey(keys::KeyKind::Transport, &public)
    );
    // The agreement multikey is the X25519 key of the secret written, checked apart from the
    // provider (curve25519-dalek), and one a descriptor takes.
    let secret =
        hex::decode_array::<32>(std::fs::read_to_string(&agreement).unwrap().trim()).unwrap();
    let x25519 = curve25519_dalek::montgomery::MontgomeryPoint::mul_base_clamped(secret).to_bytes();
    assert_eq!(
        out["agreement"],
        keys::multikey(keys::KeyKind::Agreement, &x25519)
    );
    assert_eq!(
        keys::parse_agreement_key(out["agreement"].as_str().unwrap()),
        Ok(x25519)
    );
    let (_, did) = weft(&["did", "--key", s(&key)]);
    assert_eq!(did["id"], out["did"]);
    assert_eq!(
        weft(&["keygen", "--out", s(&key)]).0,
        2,
        "never overwritten"
    );
    // An existing transport file: refused before the node key is written.
    let fresh = dir.0.join("fresh.key");
    assert_eq!(
        weft(&["keygen", "--out", s(&fresh), "--transport", s(&transport)]).0,
        2
    );
    assert!(!fresh.exists(), "no half keygen");
    let other = dir.0.join("other.key");
    assert_eq!(
        weft(&["keygen", "--out", s(&other), "--transport", s(&other)]).0,
        2,
        "one file cannot hold both"
    );
    assert_eq!(
        weft(&["keygen", "--out", s(&other), "--agreement", s(&agreement)]).0,
        2,
        "an existing agreement file is never overwritten"
    );
    assert!(!other.exists(), "no half keygen");
    let (code, out) = weft(&["digest"]);
    assert_eq!(code, 0);
    assert_eq!(out["digest"], examples()["protocol_digest"]["digest"]);
}

/// A description the tests make descriptors from.
fn description() -> Value {
    json!({
        "class": "edge",
        "content": "Community relay for the Bristol nostr meetup.",
        // RFC 7748 §6.1's Alice: a real X25519 public key.
        "agreement": "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
        "transport": keys::multikey(keys::KeyKind::Transport, &[3; 32]),
        "software": ["https://meshstr.org", "0.2.0"],
        "endpoints": [["wss", "wss://relay.example.org", 40], ["iroh", "node", 10]],
        "protocols": ["peering/1.0", "budget/1.0", "sync/1.0"],
        "capabilities": ["relay", "negentropy"],
    })
}

#[test]
fn descriptor_make_then_check_and_every_refusal() {
    let dir = Dir::new("descriptor");
    let node = secret(1);
    let key = dir.key("node.key", &node);
    let now = NOW.to_string();
    let desc = dir.file("desc.json", &description());
    // `descriptor make` of a description file with no proof of work, which must be refused.
    let make_refuses = |f: &std::path::Path, why: &str| {
        refuses(
            &[
                "descriptor",
                "make",
                s(f),
                "--key",
                s(&key),
                "--pow",
                "0",
                "--now",
                &now,
            ],
            why,
        )
    };
    let (code, made) = weft(&[
        "descriptor",
        "make",
        s(&desc),
        "--key",
        s(&key),
        "--pow",
        "8",
        "--now",
        &now,
    ]);
    assert_eq!(code, 0, "{made}");
    assert_eq!(made["kind"], 11801);
    assert_eq!(made["pubkey"], hex::encode(&pubkey(&node)));
    let made_file = dir.file("made.json", &made);
    let (code, out) = weft(&[
        "descriptor",
        "check",
        s(&made_file),
        "--min-pow",
        "8",
        "--now",
        &now,
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["class"], "edge");
    assert_eq!(out["same_schema_as_weft"], true);
    assert_eq!(
        out["protocols"],
        json!(["peering/1.0", "budget/1.0", "sync/1.0"])
    );
    // The agreement key's advisory expiry: 90 days (§2.1's rotation) unless given.
    assert_eq!(
        out["agreement"][0]["expires"],
        NOW + keys::AGREEMENT_ROTATION_SECS
    );
    assert_eq!(
        out["expiration"],
        NOW + 30 * 86400,
        "an edge's longest life"
    );
    assert_eq!(out["profile"]["keyAgreement"], json!(["#agree"]));
    assert_eq!(out["profile"]["service"][0]["type"], "IrohNode");
    // The maker's work is 8 bits; a checker asking the default 20 refuses it.
    assert!(out["pow_bits"].as_u64().unwrap() < 20, "{out}");
    refuses(
        &["descriptor", "check", s(&made_file), "--now", &now],
        "NotEnoughWork",
    );
    // The printed example carries 20 bits and checks at the default.
    let example = dir.file("example.json", &examples()["descriptor"]["event"]);
    let (code, out) = weft(&["descriptor", "check", s(&example), "--now", "1787100000"]);
    assert_eq!(code, 0, "{out}");
    // Tampered after signing: the content, then a tag.
    let mut altered = made.clone();
    altered["content"] = "another relay".into();
    let f = dir.file("altered.json", &altered);
    refuses(
        &[
            "descriptor",
            "check",
            s(&f),
            "--min-pow",
            "8",
            "--now",
            &now,
        ],
        "IdMismatch",
    );
    // Past its expiration it binds nothing.
    let later = (NOW + 30 * 86400).to_string();
    refuses(
        &[
            "descriptor",
            "check",
            s(&made_file),
            "--min-pow",
            "8",
            "--now",
            &later,
        ],
        "Expired",
    );
    // A descriptor signed with an agreement key that agrees nothing (all zero): refused by check.
    let e = Event::from_value(&made).unwrap();
    let zero = resigned(&e, &node, |u| {
        for tag in &mut u.tags {
            if tag[0] == "key" && tag[1] == "agreement" {
                tag[2] = keys::multikey(keys::KeyKind::Agreement, &[0; 32]);
            }
        }
    });
    let f = dir.file("zero.json", &zero.to_value());
    refuses(
        &[
            "descriptor",
            "check",
            s(&f),
            "--min-pow",
            "0",
            "--now",
            &now,
        ],
        "BadAgreementKey(SmallOrder)",
    );
    // … and never made: a small-order key, and one with the bit RFC 7748 masks set.
    for bad in [
        "0100000000000000000000000000000000000000000000000000000000000000",
        "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4eea",
    ] {
        let mut d = description();
        d["agreement"] = bad.into();
        let f = dir.file("bad-agreement.json", &d);
        let out = make_refuses(&f, "");
        assert!(
            out["refused"] == "SmallOrder" || out["refused"] == "NonCanonical",
            "{out}"
        );
    }
    // A leaf may not live two days; a node must declare peering/1.0 and budget/1.0.
    let mut d = description();
    d["class"] = "leaf".into();
    d["expiration"] = (NOW + 2 * 86400).into();
    let f = dir.file("leaf.json", &d);
    make_refuses(&f, "LifetimeTooLong");
    let mut d = description();
    d["protocols"] = json!(["peering/1.0"]);
    let f = dir.file("nobudget.json", &d);
    make_refuses(&f, "MissingProtocol");
    // What cannot be read is not a verdict: a misspelt member, a class that is none.
    let mut d = description();
    d["agreemnt"] = d["agreement"].clone();
    let f = dir.file("typo.json", &d);
    assert_eq!(
        weft(&["descriptor", "make", s(&f), "--key", s(&key), "--pow", "0"]).0,
        2
    );
    let mut d = description();
    d["class"] = "emperor".into();
    let f = dir.file("emperor.json", &d);
    assert_eq!(
        weft(&["descriptor", "make", s(&f), "--key", s(&key), "--pow", "0"]).0,
        2
    );
}

/// A member grant body with `events_in` at `n`.
fn grant_body(n: u64) -> Value {
    let mut b = grant::GrantBody {
        tier: weft_proto::meshstr::limits::Tier::Member,
        limits: weft_proto::meshstr::limits::Limits::opening(
            weft_proto::meshstr::limits::Tier::Member,
        ),
        window_secs: 3600,
        cadence_secs: 600,
        scopes: vec![json!({"kinds": [1]})],
        schedule: weft_proto::meshstr::window::ScheduleRatio(1100),
        remedy: grant::REMEDY_LADDER.into(),
    }
    .to_value();
    b["limits"]["events_in"] = n.into();
    b
}

/// A grant from `issuer` to `subject`, sealed and signed.
fn grant_event(issuer: &Secp256k1Secret, subject: &[u8; 32], body: &Value) -> Event {
    let p = default_provider();
    let env = grant::Envelope {
        kind: events::GRANT,
        window_secs: 3600,
        epoch: 1,
        created_at: NOW,
        expiration: NOW + 86400,
    };
    grant::seal(p, issuer, subject, &env, body, &[7; 32], &[5; 32])
        .unwrap()
        .sign(p, issuer, &mut ChaCha20Rng::seed_from_u64(1))
        .unwrap()
}

#[test]
fn grant_inspect_and_open_only_for_the_pair() {
    let dir = Dir::new("grant");
    let (issuer, subject, stranger) = (secret(10), secret(11), secret(12));
    let body = grant_body(750);
    let g = grant_event(&issuer, &pubkey(&subject), &body);
    let f = dir.file("grant.json", &g.to_value());
    let (ik, sk, xk) = (
        dir.key("issuer.key", &issuer),
        dir.key("subject.key", &subject),
        dir.key("stranger.key", &stranger),
    );
    let now = NOW.to_string();
    // Anyone: the public face, nothing of the pair or the body.
    let (code, out) = weft(&["grant", "inspect", s(&f), "--now", &now]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["scheme_known"], true);
    assert_eq!(out["window"], "3600");
    assert_eq!(out["author"], keys::did_nostr(&pubkey(&issuer)));
    assert!(
        out.get("body").is_none() && !out.to_string().contains("events_in"),
        "the body stays sealed"
    );
    // The subject recognises its grant; the issuer too, naming the subject; a stranger cannot.
    let (code, out) = weft(&["grant", "inspect", s(&f), "--key", s(&sk), "--now", &now]);
    assert_eq!((code, &out["pair_matches"]), (0, &json!(true)), "{out}");
    let sub_hex = hex::encode(&pubkey(&subject));
    let (code, _) = weft(&[
        "grant",
        "inspect",
        s(&f),
        "--key",
        s(&ik),
        "--peer",
        &sub_hex,
        "--now",
        &now,
    ]);
    assert_eq!(code, 0);
    refuses(
        &["grant", "inspect", s(&f), "--key", s(&xk), "--now", &now],
        "NotOurs",
    );
    let (code, out) = weft(&["grant", "open", "--key", s(&sk), s(&f)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["body"], body);
    refuses(&["grant", "open", "--key", s(&xk), s(&f)], "NotOurs");
    // Tampered after signing; expired; re-signed by someone else (then its `d` is not the
    // subject's pair with that signer); ciphertext altered and re-signed (the MAC fails).
    let mut altered = g.to_value();
    altered["tags"][1][1] = "00".repeat(32).into();
    let a = dir.file("altered.json", &altered);
    refuses(&["grant", "inspect", s(&a), "--now", &now], "BadSignature");
    refuses(&["grant", "open", "--key", s(&sk), s(&a)], "IdMismatch");
    let later = (NOW + 86400).to_string();
    refuses(&["grant", "inspect", s(&f), "--now", &later], "Expired");
    let forged = resigned(&g, &stranger, |_| {});
    let fg = dir.file("forged.json", &forged.to_value());
    refuses(&["grant", "open", "--key", s(&sk), s(&fg)], "NotOurs");
    let flipped = resigned(&g, &issuer, |u| {
        let mut c = u.content.clone().into_bytes();
        c[40] = if c[40] == b'A' { b'B' } else { b'A' };
        u.content = String::from_utf8(c).unwrap();
    });
    let fl = dir.file("flipped.json", &flipped.to_value());
    refuses(&["grant", "open", "--key", s(&sk), s(&fl)], "Nip44");
    // Sealed and signed by the issuer, but over the member ceiling (§6.6): no grant at all.
    let over = grant_event(&issuer, &pubkey(&subject), &grant_body(3001));
    let ov = dir.file("over.json", &over.to_value());
    assert_eq!(
        weft(&["grant", "inspect", s(&ov), "--now", &now]).0,
        0,
        "sealed: looks fine"
    );
    refuses(&["grant", "open", "--key", s(&sk), s(&ov)], "AboveCeiling");
    // Not an envelope at all.
    let example = dir.file("example.json", &examples()["descriptor"]["event"]);
    refuses(
        &["grant", "inspect", s(&example), "--now", &now],
        "WrongKind",
    );
}

fn receipt(seq: u64, prev: [u8; 32], events_in: u64, subject: &Secp256k1Secret) -> Receipt {
    let mut counters = Counters::ZERO;
    counters.set(Counter::EventsIn, events_in);
    let mut r = Receipt {
        grant: "ab".repeat(32),
        window: NOW / 3600,
        seq,
        prev,
        counters,
        forwarded_for: vec![],
        at: NOW - 1800 + seq,
        sig: None,
    };
    r.sign(default_provider(), subject, &[0; 32]).unwrap();
    r
}

#[test]
fn receipt_verify_chain_takes_the_chain_and_nothing_rewritten() {
    let dir = Dir::new("receipt");
    let p = default_provider();
    let subject = secret(20);
    let sub = hex::encode(&pubkey(&subject));
    let r0 = receipt(0, [0; 32], 10, &subject);
    let r1 = receipt(1, r0.link(p), 20, &subject);
    let r2 = receipt(2, r1.link(p), 30, &subject);
    let now = NOW.to_string();
    let chain = dir.file(
        "chain.json",
        &json!([r0.to_value(), r1.to_value(), r2.to_value()]),
    );
    let (code, out) = weft(&[
        "receipt",
        "verify-chain",
        s(&chain),
        "--subject",
        &sub,
        "--now",
        &now,
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["receipts"], 3);
    assert_eq!(out["head"], hex::encode(&r2.link(p)));
    assert_eq!(out["acks"][2]["status"], "accepted");
    let run = |v: Value, who: &str| {
        let f = dir.file("case.json", &v);
        weft(&[
            "receipt",
            "verify-chain",
            s(&f),
            "--subject",
            who,
            "--now",
            &now,
        ])
    };
    // Another subject's chain; the middle receipt's counters rewritten after signing; the same
    // receipts replayed out of order; a rewritten claim re-signed (the next `prev` no longer
    // names it); a counter that went down, re-signed and re-linked.
    let other = hex::encode(&pubkey(&secret(21)));
    let (code, out) = run(json!([r0.to_value()]), &other);
    assert_eq!((code, &out["at"]), (1, &json!(0)), "{out}");
    let mut tampered = r1.to_value();
    tampered["counters"]["events_in"] = 5.into();
    let (code, out) = run(json!([r0.to_value(), tampered, r2.to_value()]), &sub);
    assert_eq!((code, &out["at"]), (1, &json!(1)), "{out}");
    let (code, out) = run(json!([r0.to_value(), r2.to_value(), r1.to_value()]), &sub);
    assert_eq!((code, &out["at"]), (1, &json!(1)), "{out}");
    let r1b = receipt(1, r0.link(p), 15, &subject);
    let (code, out) = run(json!([r0.to_value(), r1b.to_value(), r2.to_value()]), &sub);
    assert_eq!((code, &out["at"]), (1, &json!(2)), "{out}");
    let r2b = receipt(2, r1.link(p), 19, &subject);
    let (code, out) = run(json!([r0.to_value(), r1.to_value(), r2b.to_value()]), &sub);
    assert_eq!((code, &out["at"]), (1, &json!(2)), "{out}");
    assert_eq!(out["acks"][2]["status"], "divergent");
    // A lone mid-chain receipt: an issuer with no head answers it divergent.
    let (code, _) = run(json!(r2.to_value()), &sub);
    assert_eq!(code, 1);
    // Without --subject there is nothing to check a signature against.
    assert_eq!(
        weft(&["receipt", "verify-chain", s(&chain)]).0,
        2,
        "--subject is required"
    );
}

#[test]
fn window_evaluate_prices_the_window_and_refuses_a_grant_over_its_ceiling() {
    let dir = Dir::new("window");
    // A member grant at its opening limits (events_in 750) carrying twice that, reported honestly:
    // an overrun of 1.0 is S2, and S2 makes the peer a stranger again.
    let counters = json!({
        "conn_open": 1, "req": 10, "events_in": 1500, "bytes_in": 1000, "bytes_out": 1000,
        "blob_bytes": 0, "errors": 0, "dups_sent": 0, "sync_ranges": 1
    });
    let w = dir.file(
        "w.json",
        &json!({"tier": "member", "measured": counters, "claimed": counters}),
    );
    let (code, out) = weft(&["window", "evaluate", s(&w)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["severity"], "S2");
    assert_eq!(out["per_limit"]["events_in"], "S2");
    assert_eq!(out["tier"], "probation");
    assert_eq!(out["cause"], "remedy");
    assert_eq!(
        out["limits"]["events_in"], 300,
        "the probation ceiling decides"
    );
    // The same traffic with no receipt: active silence, S2 still.
    let w = dir.file("w2.json", &json!({"tier": "member", "measured": counters}));
    let (_, out) = weft(&["window", "evaluate", s(&w)]);
    assert_eq!(
        (&out["severity"], &out["active_silence"]),
        (&json!("S2"), &json!(true))
    );
    // 20 % over, reported: S1, halved.
    let mut over = counters.clone();
    over["events_in"] = 900.into();
    let w = dir.file(
        "w3.json",
        &json!({"tier": "member", "measured": over, "claimed": over}),
    );
    let (_, out) = weft(&["window", "evaluate", s(&w)]);
    assert_eq!(
        (&out["severity"], &out["tier"]),
        (&json!("S1"), &json!("member"))
    );
    assert_eq!(out["limits"]["events_in"], 375);
    // A quarter of the events were duplicates: dup_ratio 0.25 is 0.25 / 0.15 − 1 ≈ 0.67 over,
    // S1; all of them duplicates is over 4, S3 (excessive duplicates are abuse).
    for (n, want) in [(100, "S1"), (400, "S3")] {
        let mut dups = counters.clone();
        dups["events_in"] = 400.into();
        dups["dups_sent"] = n.into();
        let w = dir.file(
            "w4.json",
            &json!({"tier": "member", "measured": dups, "claimed": dups}),
        );
        let (_, out) = weft(&["window", "evaluate", s(&w)]);
        assert_eq!(
            (&out["dup_ratio"], &out["severity"]),
            (&json!(want), &json!(want)),
            "{out}"
        );
    }
    // A grant over its tier's ceiling was never a grant (§6.6): refused, not evaluated.
    let mut limits =
        weft_proto::meshstr::limits::Limits::ceilings(weft_proto::meshstr::limits::Tier::Member)
            .to_value();
    limits["events_in"] = 3001.into();
    let w = dir.file(
        "w5.json",
        &json!({"tier": "member", "limits": limits, "measured": counters}),
    );
    refuses(&["window", "evaluate", s(&w)], "ceiling");
    for bad in [
        json!({"tier": "emperor", "measured": counters}),
        json!({"tier": "member", "mesured": counters}),
        json!({"tier": "member", "measured": {"events_in": -1}}),
    ] {
        let w = dir.file("bad.json", &bad);
        assert_eq!(weft(&["window", "evaluate", s(&w)]).0, 2, "{bad}");
    }
}

/// A report by `reporter` about `subject` citing a receipt `signer` signed, carrying the
/// reporter's grant (or `grant_by`'s).
fn report(
    reporter: &Secp256k1Secret,
    grant_by: &Secp256k1Secret,
    signer: &Secp256k1Secret,
) -> Event {
    let p = default_provider();
    let subject = pubkey(&secret(31));
    let g = grant_event(grant_by, &subject, &grant_body(750));
    let r = receipt(0, [0; 32], 10, signer);
    let link = hex::encode(&r.link(p));
    let mut evidence = Map::new();
    evidence.insert(g.id_hex(), g.to_value());
    evidence.insert(link.clone(), r.to_value());
    sign(
        reporter,
        events::REPORT,
        vec![
            t(&["d", &hex::encode(&subject)]),
            t(&["outcome", "S2"]),
            t(&["grant", &g.id_hex()]),
            t(&["windows", &(NOW / 3600).to_string()]),
            t(&["evidence", &link]),
            t(&["expiration", &(NOW + 86400).to_string()]),
        ],
        &canonical(&json!({"note": "diverged", "evidence": Value::Object(evidence)})),
    )
}

#[test]
fn report_verify_admits_only_a_grant_holders_report_on_the_subjects_own_words() {
    let dir = Dir::new("report");
    let (reporter, subject, other) = (secret(30), secret(31), secret(32));
    let now = NOW.to_string();
    let ok = report(&reporter, &reporter, &subject);
    let f = dir.file("report.json", &ok.to_value());
    let (code, out) = weft(&["report", "verify", s(&f), "--now", &now]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["outcome"], "S2");
    assert_eq!(out["evidence_checked"], 1);
    assert_eq!(out["subject"], keys::did_nostr(&pubkey(&subject)));
    // `verify` on the same file reads it as a reader does too.
    assert_eq!(weft(&["verify", s(&f), "--now", &now]).0, 0);
    // A grant someone else issued; evidence the subject did not sign; tampered; expired.
    let f = dir.file("r1.json", &report(&reporter, &other, &subject).to_value());
    refuses(&["report", "verify", s(&f), "--now", &now], "NoGrant");
    let f = dir.file("r2.json", &report(&reporter, &reporter, &other).to_value());
    refuses(&["report", "verify", s(&f), "--now", &now], "Evidence");
    let mut altered = ok.to_value();
    altered["tags"][1][1] = "S3".into();
    let f = dir.file("r3.json", &altered);
    refuses(&["report", "verify", s(&f), "--now", &now], "BadSignature");
    let f = dir.file("report.json", &ok.to_value());
    let later = (NOW + 86400).to_string();
    refuses(&["report", "verify", s(&f), "--now", &later], "Expired");
    // A positive attestation is no report.
    let s0 = resigned(&ok, &reporter, |u| u.tags[1][1] = "S0".into());
    let f = dir.file("r4.json", &s0.to_value());
    refuses(&["report", "verify", s(&f), "--now", &now], "NotAdverse");
}

#[test]
fn hop_verify_checks_every_signature_and_charges_grant_holders() {
    let dir = Dir::new("hop");
    let p = default_provider();
    let v = examples();
    // The printed example's path, bare.
    let path: Vec<Value> = v["hops"]["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| json!({"node": h["node"], "at": h["at"], "sig": h["sig"]}))
        .collect();
    let id = v["hops"]["event_id"].as_str().unwrap();
    let f = dir.file("hops.json", &Value::Array(path.clone()));
    let first = path[0]["node"].as_str().unwrap();
    let (code, out) = weft(&[
        "hop",
        "verify",
        s(&f),
        "--event-id",
        id,
        "--grant-with",
        first,
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["nodes"].as_array().map(Vec::len), Some(2));
    assert_eq!(out["charged"], json!([first]));
    // Another event's id; a moved `at`; a node renamed.
    refuses(
        &["hop", "verify", s(&f), "--event-id", &"00".repeat(32)],
        "BadSignature",
    );
    let mut moved = path.clone();
    moved[1]["at"] = (moved[1]["at"].as_u64().unwrap() + 1).into();
    let f2 = dir.file("moved.json", &Value::Array(moved));
    refuses(
        &["hop", "verify", s(&f2), "--event-id", id],
        "BadSignature(1)",
    );
    assert_eq!(
        weft(&["hop", "verify", s(&f)]).0,
        2,
        "a bare path needs --event-id"
    );

    // A delivery envelope: the event itself and three hops over it, each forwarder signing.
    let author = secret(40);
    let e = sign(&author, 1, vec![], "hello mesh");
    let mut hops = Vec::new();
    let forwarders = [secret(41), secret(42), secret(43), secret(44)];
    for (i, k) in forwarders[..3].iter().enumerate() {
        let did = keys::did_nostr(&pubkey(k));
        hop::append(p, &mut hops, k, &did, &e.id, NOW + i as u64, &[i as u8; 32]).unwrap();
    }
    let env = json!({"event": e.to_value(), "hops": hops.iter().map(hop::Hop::to_value).collect::<Vec<_>>()});
    let f = dir.file("env.json", &env);
    let second = keys::did_nostr(&pubkey(&forwarders[1]));
    let (code, out) = weft(&["hop", "verify", s(&f), "--grant-with", &second]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["event_id"], e.id_hex());
    assert_eq!(out["charged"], json!([second]));
    // A fourth hop is over the bound, whoever signed it.
    let mut four = env.clone();
    let fourth = keys::did_nostr(&pubkey(&forwarders[3]));
    let prev = hops[2].node.clone();
    let msg = hop::message(p, &e.id, &prev, NOW + 3);
    let sig = p.schnorr_sign(&forwarders[3], &msg, &[0; 32]).unwrap();
    four["hops"]
        .as_array_mut()
        .unwrap()
        .push(json!({"node": fourth, "at": NOW + 3, "sig": hex::encode(&sig)}));
    let f = dir.file("four.json", &four);
    refuses(&["hop", "verify", s(&f)], "TooManyHops");
    // The wrapped event altered: its id is not what the hops signed, or its own signature fails.
    let mut other = env.clone();
    other["event"]["content"] = "goodbye mesh".into();
    let f = dir.file("other.json", &other);
    refuses(&["hop", "verify", s(&f)], "");
    let e2 = resigned(&e, &author, |u| u.content = "goodbye mesh".into());
    let mut swapped = env.clone();
    swapped["event"] = e2.to_value();
    let f = dir.file("swapped.json", &swapped);
    refuses(&["hop", "verify", s(&f)], "BadSignature(0)");
}

#[test]
fn verify_recognises_each_artefact_by_its_shape() {
    let v = examples();
    let dir = Dir::new("verify");
    let d = dir.file("descriptor.json", &v["descriptor"]["event"]);
    let (code, out) = weft(&["verify", s(&d), "--now", "1787100000"]);
    assert_eq!(
        (code, &out["valid"], &out["kind"]),
        (0, &json!(true), &json!(11801)),
        "{out}"
    );
    let h = dir.file("handover.json", &json!([v["handover"]["body"]]));
    let (code, out) = weft(&["verify", s(&h)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["tag"], v["handover"]["name"]);
    let mut link = v["handover"]["body"].clone();
    link["count"] = 6.into();
    let h = dir.file("handover2.json", &json!([link]));
    assert_eq!(weft(&["verify", s(&h)]).0, 1);
    let r = dir.file("receipt.json", &v["receipt"]["body"]);
    assert_eq!(weft(&["verify", s(&r)]).0, 2, "a receipt needs --subject");
    let missing = dir.0.join("missing.json");
    assert_eq!(weft(&["verify", s(&missing)]).0, 2);
}
