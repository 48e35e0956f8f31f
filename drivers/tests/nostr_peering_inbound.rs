//! Relay peering, inbound, end to end (spec 002 §2–§4, §7, §8): two real `weft nostr serve`
//! processes on loopback. Relay P's identity comes from its `SECRET` (`weft nostr info` prints
//! it, P's NIP-11 advertises it); relay R trusts P's pubkey (written as an npub) and a disabled
//! key. A scripted peer speaking as P (P's key, derived in the test from P's `SECRET` exactly as
//! weft and nostream derive it) authenticates to R on two sockets and gets peer limits and one
//! shared request budget; a stranger with a valid signature and the disabled peer get client
//! limits; `GET /admin/peering` and `weft nostr peering` show what P was served; no private key
//! reaches a log, a settings file, NIP-11 or `weft nostr info`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use weft_proto::codec::{bech32, hex};
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::auth;
use weft_proto::nostr::peering::RelayKey;

#[path = "common/cli.rs"]
mod cli;
use cli::{WEFT, free_port, temp_dir};

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::{WeftRelay, Ws, connect, next, send};

const SECRET_P: &str = "relay P's operator secret";
const PRIVATE_R: &str = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
const ADMIN: &str = "r-admin-token-5f1e";

/// A `weft nostr serve` with `--config config` and the key variables `env`, its data and stderr
/// log in a fresh directory named `name`.
fn start(name: &str, addr: SocketAddr, config: &Path, env: &[(&str, &str)]) -> WeftRelay {
    let dir = temp_dir(name);
    WeftRelay::start(
        addr,
        &dir.join("nostr"),
        Some(config),
        env,
        dir.join("stderr.log"),
    )
}

fn rng(seed: u64) -> chacha20::ChaCha20Rng {
    chacha20::ChaCha20Rng::seed_from_u64(seed)
}

/// Sends an `AUTH` event; `OK`'s verdict.
fn authenticate(ws: &mut Ws, event: &weft_proto::nostr::event::Event) -> bool {
    send(ws, &json!(["AUTH", event.to_value()]));
    let ok = next(ws);
    assert_eq!(ok[0], "OK", "{ok}");
    ok[2] == true
}

/// A REQ of `n` identical filters (`limit` 0: only EOSE comes back when it is served); the
/// first answer: `EOSE` or `CLOSED` with its reason.
fn req_filters(ws: &mut Ws, sub: &str, n: usize) -> Value {
    let mut frame = vec![json!("REQ"), json!(sub)];
    frame.extend(std::iter::repeat_n(json!({"kinds": [1], "limit": 0}), n));
    send(ws, &Value::Array(frame));
    let answer = next(ws);
    send(ws, &json!(["CLOSE", sub]));
    answer
}

fn write_settings(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn weft(args: &[&str], env: &[(&str, &str)]) -> cli::Ran {
    Command::new(WEFT)
        .args(args)
        .env_remove("SECRET")
        .env_remove("RELAY_PRIVATE_KEY")
        .env_remove("WEFT_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap()
        .into()
}

#[test]
fn a_trusted_relay_is_a_peer_inbound_and_nothing_else_is() {
    let provider = weft_drivers::server_provider();
    let dir = temp_dir("nostr-peering-inbound");

    // Relay P: its key derived from SECRET over its configured URL.
    let p_addr = free_port();
    let p_url = format!("ws://{p_addr}");
    let p_settings = write_settings(
        &dir,
        "p.yaml",
        &format!("info:\n  relay_url: {p_url}\n  name: relay P\n"),
    );
    let info = weft(
        &["nostr", "info", "--config", p_settings.to_str().unwrap()],
        &[("SECRET", SECRET_P)],
    );
    assert_eq!(info.code, Some(0), "{info:?}");
    let p_key = RelayKey::derive(provider, SECRET_P.as_bytes(), &p_url).unwrap();
    let p_scalar = hex::encode(&provider.hmac_sha256(SECRET_P.as_bytes(), &[p_url.as_bytes()]));
    assert!(info.stdout.contains(&p_key.pubkey_hex()), "{info:?}");
    assert!(info.stdout.contains(&p_key.npub()), "{info:?}");
    assert!(!info.stdout.contains(&p_scalar) && !info.stderr.contains(&p_scalar));
    let p = start(
        "nostr-peering-p",
        p_addr,
        &p_settings,
        &[("SECRET", SECRET_P)],
    );
    let p_doc = p.nip11();
    assert_eq!(p_doc["self"], json!(p_key.pubkey_hex()));
    // peering.enabled is off on P: no advertisement block.
    assert!(p_doc.get("peering").is_none(), "{p_doc}");

    // Relay R trusts P (as an npub) and a disabled key; its own key is RELAY_PRIVATE_KEY.
    let stranger = generate_secp256k1(provider, &mut rng(1));
    let disabled = generate_secp256k1(provider, &mut rng(2));
    let pk = |k: &Secp256k1Secret| provider.schnorr_public_key(k).unwrap();
    let r_addr = free_port();
    let r_settings_text = format!(
        "info:\n  relay_url: ws://{r_addr}\n  name: relay R\n\
         peering:\n  enabled: true\n  contact: mailto:ops@r.example\n  endpoint: ws://{r_addr}\n  \
         terms: https://r.example/peering\n  scopes:\n    - kinds: [1]\n  peers:\n    \
         - pubkey: {}\n      relayUrl: {p_url}\n    - pubkey: {}\n      relayUrl: ws://127.0.0.1:9\n      enabled: false\n\
         limits:\n  peer:\n    request:\n      rateLimits:\n        - period: 60000\n          rate: 5\n\
         admin:\n  token: {ADMIN}\n",
        p_key.npub(),
        hex::encode(&pk(&disabled)),
    );
    let r_settings = write_settings(&dir, "r.yaml", &r_settings_text);
    let r = start(
        "nostr-peering-r",
        r_addr,
        &r_settings,
        &[("RELAY_PRIVATE_KEY", PRIVATE_R)],
    );
    let r_key = RelayKey::from_private_key_hex(provider, PRIVATE_R).unwrap();
    let r_doc = r.nip11();
    assert_eq!(r_doc["self"], json!(r_key.pubkey_hex()));
    assert_eq!(r_doc["peering"]["contact"], "mailto:ops@r.example");
    assert_eq!(r_doc["peering"]["scopes"], json!([{"kinds": [1]}]));
    assert!(!r_doc.to_string().contains(PRIVATE_R));

    let client_cap = weft_proto::nostr::limits::DEFAULT_MAX_FILTERS;

    // The peer, on two sockets: peer limits (past the client's filter cap) on both.
    let (mut a, ch_a) = connect(r.addr);
    let (mut b, ch_b) = connect(r.addr);
    for (ws, ch) in [(&mut a, &ch_a), (&mut b, &ch_b)] {
        let e = p_key
            .sign_auth(provider, &mut rng(3), weft_drivers::now(), &r.url(), ch)
            .unwrap();
        assert!(!e.to_json().contains(&p_scalar));
        assert!(authenticate(ws, &e));
    }
    // Five requests between the two sockets: the budget is the peer's, not a socket's.
    for i in 0..5 {
        let ws = if i % 2 == 0 { &mut a } else { &mut b };
        let answer = req_filters(ws, &format!("s{i}"), client_cap + 4);
        assert_eq!(answer[0], "EOSE", "{answer}");
    }
    // The sixth is refused with a retry hint, on either socket; a NEG-OPEN gets NEG-ERR.
    let answer = req_filters(&mut b, "s5", 1);
    assert_eq!(answer[0], "CLOSED", "{answer}");
    let why = answer[2].as_str().unwrap();
    assert!(
        why.starts_with("rate-limited:") && why.contains("retry in"),
        "{why}"
    );
    send(&mut a, &json!(["COUNT", "c", {"kinds": [1]}]));
    let answer = next(&mut a);
    assert_eq!(answer[0], "CLOSED", "{answer}");
    assert!(answer[2].as_str().unwrap().starts_with("rate-limited:"));
    send(&mut a, &json!(["NEG-OPEN", "n", {}, "6100"]));
    let answer = next(&mut a);
    assert_eq!(answer[0], "NEG-ERR", "{answer}");
    assert!(answer[2].as_str().unwrap().starts_with("rate-limited:"));

    // A relay R does not trust, with a valid AUTH, and the disabled peer: client limits, and
    // their requests never touch the peer budget (spent above).
    for key in [&stranger, &disabled] {
        let (mut ws, ch) = connect(r.addr);
        let e = auth::build(
            provider,
            key,
            &mut rng(4),
            weft_drivers::now(),
            &r.url(),
            &ch,
        )
        .unwrap();
        assert!(authenticate(&mut ws, &e));
        let answer = req_filters(&mut ws, "x", client_cap + 1);
        assert_eq!(answer[0], "CLOSED", "{answer}");
        assert!(
            answer[2].as_str().unwrap().starts_with("invalid:"),
            "{answer}"
        );
        assert_eq!(req_filters(&mut ws, "y", 1)[0], "EOSE");
    }
    // The peer's own next socket, before it authenticates, is a client.
    let (mut c, _) = connect(r.addr);
    assert_eq!(req_filters(&mut c, "z", client_cap + 1)[0], "CLOSED");
    assert_eq!(req_filters(&mut c, "z", 1)[0], "EOSE");

    // The admin rows: refused without the token, P's served requests with it.
    let get = |auth: &str| {
        r.http(&format!(
            "GET /admin/peering HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        ))
    };
    assert!(get("").0.starts_with("HTTP/1.1 401"), "{:?}", get(""));
    assert!(
        get("Authorization: Bearer wrong\r\n")
            .0
            .starts_with("HTTP/1.1 401")
    );
    let (head, body) = get(&format!("Authorization: Bearer {ADMIN}\r\n"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let rows: Value = serde_json::from_str(&body).unwrap();
    let p_row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["pubkey"] == json!(p_key.pubkey_hex()))
        .unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(p_row["requestsServed"], 5, "{p_row}");
    assert_eq!(p_row["relayUrl"], json!(p_url));
    let d_row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["pubkey"] == json!(hex::encode(&pk(&disabled))))
        .unwrap();
    assert_eq!(d_row["status"], "disabled");
    assert_eq!(d_row["requestsServed"], 0);
    // A relay without admin.token refuses the endpoint outright.
    let (head, _) =
        p.http("GET /admin/peering HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");

    let table = weft(
        &[
            "nostr",
            "peering",
            "--relay",
            &format!("http://{r_addr}"),
            "--config",
            r_settings.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(table.code, Some(0), "{table:?}");
    let line = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&p_key.pubkey_hex()))
        .unwrap_or_else(|| panic!("{table:?}"));
    // R's sync worker for P refused P's loopback URL (private networks are not allowed here).
    assert!(
        line.contains(" unusable ") && line.contains(&p_url),
        "{line}"
    );
    let denied = weft(
        &["nostr", "peering", "--relay", &format!("http://{r_addr}")],
        &[("WEFT_ADMIN_TOKEN", "wrong")],
    );
    assert_ne!(denied.code, Some(0), "{denied:?}");

    // No private key anywhere an operator or a peer can read: logs, settings, NIP-11.
    let r_scalar_upper = PRIVATE_R.to_uppercase();
    for (text, what) in [
        (r.log(), "R's log"),
        (p.log(), "P's log"),
        (
            std::fs::read_to_string(&r_settings).unwrap(),
            "R's settings",
        ),
        (
            std::fs::read_to_string(&p_settings).unwrap(),
            "P's settings",
        ),
        (r_doc.to_string(), "R's NIP-11"),
        (p_doc.to_string(), "P's NIP-11"),
        (table.stdout.clone(), "weft nostr peering"),
    ] {
        for secret in [PRIVATE_R, &r_scalar_upper, &p_scalar, SECRET_P, ADMIN] {
            if what == "R's settings" && secret == ADMIN {
                continue;
            }
            assert!(!text.contains(secret), "{what} shows a secret");
        }
    }
    assert_eq!(
        std::fs::read_to_string(&r_settings).unwrap(),
        r_settings_text
    );
    assert!(bech32::decode_npub(&p_key.npub()).is_ok());
}

#[test]
fn a_mismatched_info_self_refuses_to_start_and_an_unreadable_one_is_replaced() {
    let provider = weft_drivers::server_provider();
    let dir = temp_dir("nostr-peering-self");
    let addr = free_port();
    let other = RelayKey::derive(provider, b"someone else", "wss://x.example").unwrap();
    let mismatched = write_settings(
        &dir,
        "bad.yaml",
        &format!(
            "info:\n  relay_url: ws://{addr}\n  self: {}\n",
            other.npub()
        ),
    );
    for command in ["info", "serve"] {
        let mut args = vec!["nostr", command, "--config", mismatched.to_str().unwrap()];
        let data = dir.join("data");
        if command == "serve" {
            args.extend([
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                data.to_str().unwrap(),
            ]);
        }
        let ran = weft(&args, &[("SECRET", "mine")]);
        assert_eq!(ran.code, Some(2), "{command}: {ran:?}");
        assert!(ran.stderr.contains("info.self"), "{ran:?}");
    }
    // Unreadable (nostream's placeholder): the signing pubkey is advertised.
    let placeholder = write_settings(
        &dir,
        "ok.yaml",
        &format!("info:\n  relay_url: ws://{addr}\n  self: replace-with-your-pubkey-in-hex\n"),
    );
    let ran = weft(
        &["nostr", "info", "--config", placeholder.to_str().unwrap()],
        &[("SECRET", "mine")],
    );
    let mine = RelayKey::derive(provider, b"mine", &format!("ws://{addr}")).unwrap();
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains(&mine.pubkey_hex()), "{ran:?}");
    // RELAY_PRIVATE_KEY wins over SECRET.
    let ran = weft(
        &["nostr", "info", "--config", placeholder.to_str().unwrap()],
        &[("SECRET", "mine"), ("RELAY_PRIVATE_KEY", PRIVATE_R)],
    );
    let r_key = RelayKey::from_private_key_hex(provider, PRIVATE_R).unwrap();
    assert!(ran.stdout.contains(&r_key.pubkey_hex()), "{ran:?}");
    assert!(!ran.stdout.contains(PRIVATE_R));
    // No key material at all: `info` says so.
    let ran = weft(
        &["nostr", "info", "--config", placeholder.to_str().unwrap()],
        &[],
    );
    assert_eq!(ran.code, Some(2), "{ran:?}");
    // A trust list naming one key twice (hex and npub) is refused at load.
    let k = other.pubkey_hex();
    let dup = write_settings(
        &dir,
        "dup.yaml",
        &format!(
            "peering:\n  peers:\n    - pubkey: {k}\n      relayUrl: wss://a.example\n    - pubkey: {}\n      relayUrl: wss://b.example\n",
            other.npub()
        ),
    );
    let ran = weft(
        &[
            "nostr",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.join("d2").to_str().unwrap(),
            "--config",
            dup.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("peering.peers[1]"), "{ran:?}");
}
