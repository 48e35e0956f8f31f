//! Interop with rust-nostr and nostr-rs-relay, software weft did not write (issues #35, #36):
//!
//! - nostr-sdk's `Client::sync` (NIP-77, over the `negentropy` crate) reconciles its own events
//!   with `weft nostr serve` and must find exactly what each side lacks, then upload and download
//!   it, after which nothing is missing either way;
//! - rust-nostr's relay (nostr-relay-builder's LocalRelay) and nostr-rs-relay, as the project's
//!   scripts start them for the relay-peering tests: each prints its URL, serves what it holds and,
//!   asked to, opens every connection with a NIP-42 challenge.
//!
//! Both come from `scripts/rust-nostr-relay` and `scripts/nostr-rs-relay`, built once into the
//! cache directory; where a script cannot produce its binary the test prints its one `SKIP:` line
//! and returns.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, UnsignedEvent};

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, free_port, temp_dir};

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::{SKIP_STATUS, Started, next, open, req_ids, script, send, skip};

fn signer(seed: u64) -> (chacha20::ChaCha20Rng, Secp256k1Secret) {
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(seed);
    let key = generate_secp256k1(weft_drivers::server_provider(), &mut rng);
    (rng, key)
}

fn note(rng: &mut chacha20::ChaCha20Rng, key: &Secp256k1Secret, ago: u64, text: &str) -> Event {
    UnsignedEvent {
        created_at: weft_drivers::now().as_secs() - ago,
        kind: 1,
        tags: vec![],
        content: text.into(),
    }
    .sign(weft_drivers::server_provider(), key, rng)
    .unwrap()
}

fn write_events(path: &Path, events: &[&Event]) {
    let lines: Vec<String> = events.iter().map(|e| e.to_json()).collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn ids<'a>(events: impl IntoIterator<Item = &'a Event>) -> BTreeSet<String> {
    events.into_iter().map(Event::id_hex).collect()
}

fn set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Runs `scripts/rust-nostr-relay sync URL FILE --direction DIR`: its JSON report, or the
/// script's `SKIP:` line.
fn sdk_sync(url: &str, file: &Path, direction: &str) -> Result<Value, String> {
    let out = Command::new(script("rust-nostr-relay"))
        .args(["sync", url])
        .arg(file)
        .args(["--direction", direction])
        .stdin(Stdio::null())
        .output()
        .expect("scripts/rust-nostr-relay runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(SKIP_STATUS) {
        return Err(stdout.trim().to_string());
    }
    assert!(
        out.status.success(),
        "rust-nostr-relay sync failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}")))
}

#[test]
fn nostr_sdk_sync_finds_exactly_what_each_side_lacks_against_weft_then_converges() {
    const TEST: &str = "nostr_sdk_sync_finds_exactly_what_each_side_lacks_against_weft";
    let dir = temp_dir("rust-nostr-sync");
    let addr = free_port();
    let mut cmd = Command::new(WEFT);
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(dir.join("nostr"));
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws://");
    let url = format!("ws://{addr}");

    // The relay holds 30 events; the client holds the first 10 of them and 12 of its own.
    let (mut rng, key) = signer(77);
    let relay_events: Vec<Event> = (0..30)
        .map(|i| note(&mut rng, &key, 200 - i, &format!("relay {i}")))
        .collect();
    let (mut rng2, key2) = signer(78);
    let client_only: Vec<Event> = (0..12)
        .map(|i| note(&mut rng2, &key2, 100 - i, &format!("client {i}")))
        .collect();
    let mut ws = open(&url);
    for e in &relay_events {
        send(&mut ws, &json!(["EVENT", e.to_value()]));
        loop {
            let m = next(&mut ws);
            if m[0] == "OK" {
                assert_eq!((&m[1], &m[2]), (&json!(e.id_hex()), &json!(true)), "{m}");
                break;
            }
        }
    }
    let file = dir.join("client.jsonl");
    let held: Vec<&Event> = relay_events[..10].iter().chain(&client_only).collect();
    write_events(&file, &held);

    let report = match sdk_sync(&url, &file, "both") {
        Ok(r) => r,
        Err(line) => return skip(TEST, &line),
    };
    let have = ids(&client_only);
    let need = ids(&relay_events[10..]);
    assert_eq!(set(&report["have"]), have, "{report}");
    assert_eq!(set(&report["need"]), need, "{report}");
    assert_eq!(set(&report["sent"]), have, "{report}");
    assert_eq!(set(&report["received"]), need, "{report}");
    assert_eq!(report["send_failures"], json!({}), "{report}");

    // weft stored what nostr-sdk uploaded: it holds every event now.
    let all = ids(relay_events.iter().chain(&client_only));
    assert_eq!(req_ids(&mut ws, json!({"kinds": [1]})), all);
    // A second reconciliation from the same starting point finds nothing the relay lacks.
    let again = sdk_sync(&url, &file, "down").unwrap();
    assert_eq!(set(&again["have"]), BTreeSet::new(), "{again}");
    assert_eq!(set(&again["need"]), need, "{again}");
}

#[test]
fn rust_nostr_relay_serves_its_seed_and_challenges_with_nip42() {
    const TEST: &str = "rust_nostr_relay_serves_its_seed_and_challenges_with_nip42";
    let dir = temp_dir("rust-nostr-relay");
    let (mut rng, key) = signer(79);
    let seed: Vec<Event> = (0..5)
        .map(|i| note(&mut rng, &key, 50 - i, &format!("seed {i}")))
        .collect();
    let file = dir.join("seed.jsonl");
    write_events(&file, &seed.iter().collect::<Vec<_>>());
    let relay = match Started::start(
        "rust-nostr-relay",
        &["--auth", "write", "--seed", file.to_str().unwrap()],
    ) {
        Ok(r) => r,
        Err(line) => return skip(TEST, &line),
    };
    assert!(relay.url.starts_with("ws://127.0.0.1:"), "{}", relay.url);
    let mut ws = open(&relay.url);
    assert_eq!(req_ids(&mut ws, json!({"kinds": [1]})), ids(&seed));
    // Writes need NIP-42: an event before AUTH is refused auth-required.
    let late = note(&mut rng, &key, 1, "late");
    send(&mut ws, &json!(["EVENT", late.to_value()]));
    let mut saw_challenge = false;
    loop {
        let m = next(&mut ws);
        match m[0].as_str() {
            Some("AUTH") => saw_challenge = true,
            Some("OK") => {
                assert_eq!(m[2], false, "{m}");
                assert!(m[3].as_str().unwrap().starts_with("auth-required"), "{m}");
                break;
            }
            _ => {}
        }
    }
    assert!(saw_challenge, "no AUTH challenge before the refusal");
}

#[test]
fn nostr_rs_relay_prints_its_url_and_with_auth_challenges_every_connection() {
    const TEST: &str = "nostr_rs_relay_prints_its_url_and_with_auth_challenges_every_connection";
    let relay = match Started::start("nostr-rs-relay", &["--auth"]) {
        Ok(r) => r,
        Err(line) => return skip(TEST, &line),
    };
    assert!(relay.url.starts_with("ws://127.0.0.1:"), "{}", relay.url);
    let mut ws = open(&relay.url);
    let first = next(&mut ws);
    assert_eq!(first[0], "AUTH", "{first}");
    assert!(first[1].as_str().is_some_and(|c| !c.is_empty()), "{first}");
    let (mut rng, key) = signer(80);
    let e = note(&mut rng, &key, 5, "to nostr-rs-relay");
    send(&mut ws, &json!(["EVENT", e.to_value()]));
    loop {
        let m = next(&mut ws);
        if m[0] == "OK" {
            assert_eq!(m[2], true, "{m}");
            break;
        }
    }
    assert_eq!(req_ids(&mut ws, json!({"ids": [e.id_hex()]})), ids([&e]));
}
