//! `weft meshstr` as an operator and a reader of reports run it offline: each subcommand reads
//! JSON and prints one JSON object, and its exit status says valid (0), refused (1) or could not
//! run (2). The artefacts are the spec's printed examples (`vectors/meshstr/examples.json`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{Secp256k1Secret, default_provider};
use weft_proto::meshstr::receipt::Receipt;

const EXAMPLES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../vectors/meshstr/examples.json"
);

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

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn verify_reads_the_printed_artefacts_and_refuses_them_altered() {
    let v = examples();
    let dir = Dir::new("verify");

    let d = dir.file("descriptor.json", &v["descriptor"]["event"]);
    let (code, out) = weft(&["verify", s(&d), "--now", "1787100000"]);
    assert_eq!(
        (code, &out["valid"], &out["kind"]),
        (0, &json!(true), &json!(11801)),
        "{out}"
    );
    let mut altered = v["descriptor"]["event"].clone();
    altered["content"] = "another relay".into();
    let d = dir.file("altered.json", &altered);
    let (code, out) = weft(&["verify", s(&d), "--now", "1787100000"]);
    assert_eq!((code, &out["valid"]), (1, &json!(false)), "{out}");
    // Past its expiration a descriptor binds nothing.
    let d = dir.file("descriptor.json", &v["descriptor"]["event"]);
    assert_eq!(weft(&["verify", s(&d), "--now", "1789600001"]).0, 1);

    let r = dir.file("receipt.json", &v["receipt"]["body"]);
    let subject = v["receipt"]["subject"].as_str().unwrap();
    // Not seq 0: a lone receipt mid-chain is answered divergent, as an issuer with no head would.
    let (code, out) = weft(&["verify", s(&r), "--subject", subject, "--now", "1787003600"]);
    assert_eq!(code, 1, "{out}");
    let mut first = v["receipt"]["body"].clone();
    first["seq"] = 0.into();
    first["prev"] = "00".repeat(32).into();
    let r0 = dir.file("receipt0.json", &json!([first]));
    let (code, out) = weft(&[
        "verify",
        s(&r0),
        "--subject",
        subject,
        "--now",
        "1787003600",
    ]);
    assert_eq!(
        code, 1,
        "re-numbered without re-signing: the signature no longer holds: {out}"
    );
    assert_eq!(weft(&["verify", s(&r)]).0, 2, "a receipt needs --subject");
    // Signed by the subject, seq 0 then 1 chained: the window's chain verifies.
    let p = default_provider();
    let key = Secp256k1Secret::from_bytes(
        hex::decode_array::<32>(v["keys"]["subject"].as_str().unwrap()).unwrap(),
    );
    let mut r0 = Receipt::from_value(&first).unwrap();
    r0.sign(p, &key, &[0; 32]).unwrap();
    let mut r1 = r0.clone();
    r1.seq = 1;
    r1.prev = r0.link(p);
    r1.sign(p, &key, &[0; 32]).unwrap();
    let chain = dir.file("chain.json", &json!([r0.to_value(), r1.to_value()]));
    let (code, out) = weft(&[
        "verify",
        s(&chain),
        "--subject",
        subject,
        "--now",
        "1787003600",
    ]);
    assert_eq!((code, &out["receipts"]), (0, &json!(2)), "{out}");
    assert_eq!(out["head"], hex::encode(&r1.link(p)));

    let h = dir.file("handover.json", &json!([v["handover"]["body"]]));
    let (code, out) = weft(&["verify", s(&h)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["tag"], v["handover"]["name"]);
    let mut link = v["handover"]["body"].clone();
    link["count"] = 6.into();
    let h = dir.file("handover2.json", &json!([link]));
    assert_eq!(weft(&["verify", s(&h)]).0, 1);

    let path: Vec<Value> = v["hops"]["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| json!({"node": h["node"], "at": h["at"], "sig": h["sig"]}))
        .collect();
    let id = v["hops"]["event_id"].as_str().unwrap();
    let p = dir.file("hops.json", &Value::Array(path.clone()));
    let (code, out) = weft(&["verify", s(&p), "--event-id", id]);
    assert_eq!(
        (code, out["nodes"].as_array().map(Vec::len)),
        (0, Some(2)),
        "{out}"
    );
    let mut moved = path;
    moved[1]["at"] = (moved[1]["at"].as_u64().unwrap() + 1).into();
    let p = dir.file("hops2.json", &Value::Array(moved));
    assert_eq!(weft(&["verify", s(&p), "--event-id", id]).0, 1);

    let missing = dir.0.join("missing.json");
    assert_eq!(weft(&["verify", s(&missing)]).0, 2);
}

#[test]
fn window_evaluate_digest_and_keygen() {
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
    let (code, out) = weft(&["window-evaluate", s(&w)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["severity"], "S2");
    assert_eq!(out["per_limit"]["events_in"], "S2");
    assert_eq!(out["tier"], "probation");
    assert_eq!(
        out["limits"]["events_in"], 300,
        "the probation ceiling decides"
    );
    // The same traffic with no receipt: active silence, S2 still.
    let w = dir.file("w2.json", &json!({"tier": "member", "measured": counters}));
    let (_, out) = weft(&["window-evaluate", s(&w)]);
    assert_eq!(
        (&out["severity"], &out["active_silence"]),
        (&json!("S2"), &json!(true))
    );
    let w = dir.file("w3.json", &json!({"tier": "emperor", "measured": counters}));
    assert_eq!(weft(&["window-evaluate", s(&w)]).0, 2);

    let (code, out) = weft(&["digest"]);
    assert_eq!(code, 0);
    assert_eq!(out["digest"], examples()["protocol_digest"]["digest"]);

    let key = dir.0.join("node.key");
    let (code, out) = weft(&["keygen", "--out", s(&key)]);
    assert_eq!(code, 0, "{out}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (_, did) = weft(&["did", "--key", s(&key)]);
    assert_eq!(did["id"], out["did"]);
    assert_eq!(
        weft(&["keygen", "--out", s(&key)]).0,
        2,
        "never overwritten"
    );
}
