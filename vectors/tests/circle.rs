//! Replays NAP-MESH's printed examples (`circle/examples.json`, the spec's lines verbatim)
//! against shells over the in-memory harness: every `<-` line the spec prints is what the napplet
//! gets, in order, field for field (see the file's `how`).

use core::time::Duration;

use chacha20::ChaCha20Rng;
use serde_json::{Map, Value};
use weft_proto::circle::harness::Harness;
use weft_proto::circle::napplet::Reply;
use weft_proto::circle::shell::{Input, NappletId, Shell, ShellConfig};
use weft_proto::core::Timestamp;
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{default_provider, generate_secp256k1};
use weft_proto::nostr::Event;

const APP: NappletId = NappletId(1);
const SETUP: NappletId = NappletId(99);
const ELIDED: char = '…';

fn load() -> Value {
    let full = format!("{}/circle/examples.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// A printed line as JSON: its direction, and the message with `{ … }` read as `"…"`.
fn printed(line: &str) -> (bool, Value) {
    let (sent, rest) = if let Some(r) = line.strip_prefix("-> ") {
        (true, r)
    } else if let Some(r) = line.strip_prefix("<- ") {
        (false, r)
    } else {
        panic!("a printed line starts with -> or <-: {line}")
    };
    let rest = rest.split("//").next().unwrap().trim();
    let json = rest.replace("{ … }", "\"…\"");
    (
        sent,
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{line}: {e}")),
    )
}

/// The printed value with every elision the vector names replaced by what it stands for.
fn substitute(v: &Value, subs: &Map<String, Value>) -> Value {
    match v {
        Value::String(s) => subs.get(s).cloned().unwrap_or_else(|| v.clone()),
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute(x, subs)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let k = subs
                        .get(k)
                        .and_then(Value::as_str)
                        .map_or_else(|| k.clone(), String::from);
                    (k, substitute(x, subs))
                })
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// Field for field: same keys, same values, where a remaining elided string matches any value.
fn same(printed: &Value, got: &Value, at: &str) {
    match (printed, got) {
        (Value::String(s), _) if s.contains(ELIDED) => {
            assert!(!got.is_null(), "{at}: elided value missing");
            if s != "…" {
                assert!(got.is_string(), "{at}: an elided string is a string");
            }
        }
        (Value::Object(p), Value::Object(g)) => {
            let pk: Vec<_> = p.keys().collect();
            let gk: Vec<_> = g.keys().collect();
            assert_eq!(pk, gk, "{at}: the same fields");
            for (k, v) in p {
                same(v, &g[k], &format!("{at}.{k}"));
            }
        }
        (Value::Array(p), Value::Array(g)) => {
            assert_eq!(p.len(), g.len(), "{at}: the same length");
            for (i, (a, b)) in p.iter().zip(g).enumerate() {
                same(a, b, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(printed, got, "{at}"),
    }
}

fn template_text(device_event: &Value, ttl: u64) -> String {
    serde_json::json!({"type": "mesh.publish", "id": "setup", "event": device_event, "ttl": ttl})
        .to_string()
}

#[test]
fn circle_spec_examples_replay_field_for_field() {
    let v = load();
    let subs = v["substitute"].as_object().unwrap().clone();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "every example the spec prints");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let now = Timestamp::from_millis(case["now_ms"].as_u64().unwrap_or(1_700_000_000_000));
        let mut h: Harness<ChaCha20Rng> = Harness::new(now, Duration::from_millis(10), 10_000);
        let n = case["devices"].as_u64().unwrap() as usize;
        for i in 0..n {
            let p = default_provider();
            let mut rng = ChaCha20Rng::seed_from_u64(500 + i as u64);
            let secret = generate_secp256k1(p, &mut rng);
            let shell = Shell::new(p, secret, rng, ShellConfig::default()).unwrap();
            let d = h.add(shell);
            h.input(d, Input::Grant(SETUP));
            if d != 0 || case["granted"].as_bool() != Some(false) {
                h.input(d, Input::Grant(APP));
            }
            // The setup napplet watches everything, live, so reach can be checked.
            h.napplet(
                d,
                SETUP,
                r#"{"type":"mesh.subscribe","id":"w","subId":"watch","filters":[{}],"ttl":0}"#,
            );
        }
        for e in case["edges"].as_array().unwrap() {
            let (a, b) = (e[0].as_u64().unwrap(), e[1].as_u64().unwrap());
            h.connect(a as usize, b as usize);
        }
        if let Some(holds) = case["holds"].as_object() {
            for (d, hashes) in holds {
                let d: usize = d.parse().unwrap();
                for x in hashes.as_array().unwrap() {
                    let bytes = weft_proto::codec::hex::decode(x.as_str().unwrap()).unwrap();
                    h.devices[d].blobs.insert(bytes.try_into().unwrap());
                }
            }
        }
        h.run().unwrap();
        let lines: Vec<(bool, Value)> = case["printed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| printed(l.as_str().unwrap()))
            .collect();
        for step in case["steps"].as_array().unwrap() {
            match step["do"].as_str().unwrap() {
                "send" => {
                    let (sent, msg) = &lines[step["line"].as_u64().unwrap() as usize];
                    assert!(sent, "{name}: sends a -> line");
                    h.napplet(0, APP, &substitute(msg, &subs).to_string());
                }
                "publish" => {
                    let d = step["device"].as_u64().unwrap() as usize;
                    let ttl = step["ttl"].as_u64().unwrap();
                    h.napplet(d, SETUP, &template_text(&step["event"], ttl));
                }
                "check_reach" => {
                    let (_, line) = &lines[step["event_of_line"].as_u64().unwrap() as usize];
                    let id = &line["eventId"];
                    let got = h.devices[0]
                        .replies
                        .iter()
                        .find_map(|(_, who, r)| match r {
                            Reply::PublishResult {
                                outcome: Ok((e, _)),
                                ..
                            } if *who == APP => Some(e.clone()),
                            _ => None,
                        })
                        .unwrap_or_else(|| panic!("{name}: published ({id})"));
                    let reached: Vec<usize> = step["reached"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_u64().unwrap() as usize)
                        .collect();
                    for d in 0..n {
                        let saw = h.devices[d].replies.iter().any(|(_, who, r)| {
                            *who == SETUP
                                && matches!(r, Reply::Event { event, .. } if event.id == got.id)
                        });
                        assert_eq!(saw, reached.contains(&d), "{name}: device {d} reached");
                        let kept = h.devices[d].store.iter().any(|e| e.id == got.id);
                        assert!(!kept, "{name}: ephemeral, kept nowhere (device {d})");
                    }
                }
                other => panic!("unknown step {other}"),
            }
            h.run().unwrap();
        }
        let want: Vec<Value> = lines
            .iter()
            .filter(|(sent, _)| !sent)
            .map(|(_, m)| substitute(m, &subs))
            .collect();
        let got: Vec<Reply> = h.devices[0]
            .replies
            .iter()
            .filter(|(_, who, _)| *who == APP)
            .map(|(_, _, r)| r.clone())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            let text = g.to_text();
            same(
                w,
                &serde_json::from_str(&text).unwrap(),
                &format!("{name} <-[{i}]"),
            );
            // `type` leads, as printed.
            assert!(text.starts_with(r#"{"type":"mesh."#), "{text}");
            // Every delivered event is genuine and the one the id names.
            let val = g.to_value();
            let event = val
                .get("event")
                .or_else(|| val.get("result").and_then(|r| r.get("event")));
            if let Some(e) = event {
                let e = Event::from_value(e).unwrap();
                assert_eq!(e.verify(default_provider()), Ok(()), "{name}");
            }
        }
        // The subscribe example: events matching the printed filter, the 2-hop one never.
        if name.starts_with("Subscribe to a chat") {
            let contents: Vec<String> = got
                .iter()
                .filter_map(|r| match r {
                    Reply::Event { event, .. } => Some(event.content.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(
                contents,
                ["kept on this device", "a member's backlog", "a live event"]
            );
        }
    }
}
