//! `weft circle serve` end to end: six real processes on loopback, member links over real
//! WebSockets (each proving its circle key), napplets on the real napplet face, the control face
//! for grants, pairing and counters.
//!
//! Devices 0–4 are paired in a chain (0–1–2–3–4); device 5 is a stranger linked at the transport
//! to 0 and 2 (it dials them and proves its key) but paired with nobody. Then 4 and 0 pair live,
//! through the control face, closing a ring. Checked: a publish with ttl 2 reaches exactly the
//! devices within 2 circle hops; a ttl above the cap is clamped and reported, end to end; each
//! id is forwarded once per device (the counters) and a copy by a second path round the ring is
//! dropped; the stranger gets nothing, and one that proves its key and speaks the member wire
//! anyway is dropped, counted and answered nothing; eose comes before a member's backlog; blob
//! counts match what members hold and 65 hashes are refused whole; a revoked grant ends the
//! subscription and refuses the next call mid-stream, and a grant says in words what it allows;
//! after a restart, kept events are there and ephemeral ones are gone.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};
use weft_proto::circle::link::{self, LinkAuth};
use weft_proto::circle::member::MemberFrame;
use weft_proto::circle::pairing::pairing_record;
use weft_proto::codec::hex;
use weft_proto::core::Machine;
use weft_proto::core::rand_core::SeedableRng;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::UnsignedEvent;

#[path = "common/circle.rs"]
mod circle;
#[path = "common/cli.rs"]
mod cli;
use circle::{Napplet, wait_until};
use cli::{Running, WEFT, free_port, temp_dir};

const TOKEN: &str = "napplet-token-0123456789";
const CONTROL: &str = "control-token-0123456789";
/// How long a test waits for something that should come.
/// How long a test listens for something that should not come.
const QUIET: Duration = Duration::from_millis(1_500);

struct Device {
    dir: PathBuf,
    listen: SocketAddr,
    member: SocketAddr,
    key: [u8; 32],
    dials: Vec<usize>,
    process: Option<Running>,
}

fn provider() -> &'static dyn CryptoProvider {
    weft_drivers::server_provider()
}

fn write_private(path: &Path, text: &str) {
    weft_drivers::circle::write_private(path, text).unwrap();
}

impl Device {
    fn config(&self, all: &[(SocketAddr, SocketAddr)]) -> String {
        let members: Vec<String> = self
            .dials
            .iter()
            .map(|&i| format!("\"ws://{}/member\"", all[i].1))
            .collect();
        format!(
            "listen = \"{}\"\nmember_listen = \"{}\"\ndata_dir = \"{}\"\nkey = \"{}\"\n\
             blobs_dir = \"{}\"\ncontrol_token = \"{CONTROL}\"\nmembers = [{}]\n\
             [[napplet]]\nname = \"app\"\ntoken = \"{TOKEN}\"\ngranted = true\n",
            self.listen,
            self.member,
            self.dir.join("data").display(),
            self.dir.join("circle.key").display(),
            self.dir.join("blobs").display(),
            members.join(", ")
        )
    }

    fn start(&mut self, all: &[(SocketAddr, SocketAddr)]) {
        let path = self.dir.join("circle.toml");
        std::fs::write(&path, self.config(all)).unwrap();
        let mut cmd = Command::new(WEFT);
        cmd.args(["circle", "serve", "--config"]).arg(&path);
        let p = Running::spawn(cmd);
        p.wait_for("listening");
        self.process = Some(p);
    }

    fn control(&self, request: Value) -> Value {
        let url = format!("ws://{}/control?token={CONTROL}", self.listen);
        weft_drivers::circle::run::control(&url, &request).unwrap()
    }

    fn stats(&self) -> Value {
        self.control(json!({"op": "stats"}))
    }
}

fn pair_files(devices: &[Device], secrets: &[Secp256k1Secret], a: usize, b: usize) {
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64((a * 10 + b) as u64);
    for (x, y) in [(a, b), (b, a)] {
        let record = pairing_record(
            provider(),
            &secrets[x],
            &mut rng,
            &devices[y].key,
            1_790_000_000,
        )
        .unwrap();
        // Both sides hold both records.
        for d in [x, y] {
            let name = format!(
                "{}-{}.json",
                hex::encode(&devices[x].key),
                hex::encode(&devices[y].key)
            );
            write_private(
                &devices[d].dir.join("data/pairings").join(name),
                &record.to_json(),
            );
        }
    }
}

/// A stranger on the transport acting as an attacker: it dials `addr`'s `/member`, sends a
/// member frame before any proof, proves its own (unpaired) key, then sends `frames` as a member
/// would. Returns the link, still open.
fn stranger_link(
    addr: SocketAddr,
    secret: &Secp256k1Secret,
    frames: &[String],
) -> WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>> {
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(99);
    let (mut ws, _) = tungstenite::connect(format!("ws://{addr}/member")).unwrap();
    ws.send(Message::Text(frames[0].clone().into())).unwrap();
    let mut auth =
        LinkAuth::new(provider(), secret.clone(), &mut rng, weft_drivers::now()).unwrap();
    loop {
        while let Some(o) = auth.poll() {
            match o {
                link::Output::Send(t) => ws.send(Message::Text(t.into())).unwrap(),
                link::Output::Fail(e) => panic!("the stranger's proof failed: {e:?}"),
            }
        }
        if auth.proven().is_some() {
            break;
        }
        if let Message::Text(t) = ws.read().unwrap() {
            auth.handle_text(&t);
        }
    }
    for f in frames {
        ws.send(Message::Text(f.clone().into())).unwrap();
    }
    ws
}

#[test]
fn six_processes_chain_ring_stranger_backlog_blobs_revocation_restart() {
    let root = temp_dir("circle-six");
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(37);
    let secrets: Vec<Secp256k1Secret> = (0..6)
        .map(|_| generate_secp256k1(provider(), &mut rng))
        .collect();
    let addrs: Vec<(SocketAddr, SocketAddr)> = (0..6).map(|_| (free_port(), free_port())).collect();
    // Transport links: the chain, 4 dials 0 (a link that is no edge until they pair), and the
    // stranger 5 dials 0 and 2.
    let dials = [vec![], vec![0], vec![1], vec![2], vec![3, 0], vec![0, 2]];
    let mut devices: Vec<Device> = (0..6)
        .map(|i| {
            let dir = root.join(format!("d{i}"));
            weft_drivers::state_dir::prepare_dir(&dir.join("data/pairings"), false).unwrap();
            std::fs::create_dir_all(dir.join("blobs")).unwrap();
            write_private(&dir.join("circle.key"), &hex::encode(secrets[i].expose()));
            Device {
                dir,
                listen: addrs[i].0,
                member: addrs[i].1,
                key: provider().schnorr_public_key(&secrets[i]).unwrap(),
                dials: dials[i].clone(),
                process: None,
            }
        })
        .collect();
    for (a, b) in [(0, 1), (1, 2), (2, 3), (3, 4)] {
        pair_files(&devices, &secrets, a, b);
    }
    // Blob H1 is held by devices 1 and 3; H0 by nobody.
    let h1 = hex::encode(&provider().sha256(&[b"blob one"]));
    let h0 = format!("{:064x}", 1);
    for d in [1, 3] {
        std::fs::write(devices[d].dir.join("blobs").join(&h1), b"blob one").unwrap();
    }
    for d in devices.iter_mut() {
        d.start(&addrs);
    }

    // Every link proves its key; members are the paired ones only.
    let reach = [1, 2, 2, 2, 1, 0];
    for (i, d) in devices.iter().enumerate() {
        wait_until(&format!("device {i} reaches {}", reach[i]), || {
            d.stats()["reachable"] == reach[i]
        });
    }
    wait_until("the stranger's links are proven", || {
        devices[5].stats()["links_proven"] == 2
    });

    let mut apps: Vec<Napplet> = devices
        .iter()
        .map(|d| Napplet::open(d.listen, TOKEN))
        .collect();
    for a in apps.iter_mut() {
        a.subscribe("live", json!({"kinds": [1, 20666]}), 0);
    }

    // ttl 2 from 0 reaches 1 and 2, not 3, 4 or the stranger.
    let r = apps[0].publish("p1", 1, "two hops", 2);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["ttl"], 2);
    for i in [0, 1, 2] {
        apps[i]
            .wait(|v| v["type"] == "mesh.event" && v["result"]["event"]["content"] == "two hops");
    }
    // ttl 10 is clamped to the cap (3) and reported: it reaches 3, not 4.
    let r = apps[0].publish("p2", 1, "clamped", 10);
    assert_eq!(r["ttl"], 3, "{r}");
    for i in [1, 2, 3] {
        apps[i].wait(|v| v["result"]["event"]["content"] == "clamped");
    }
    for a in apps.iter_mut() {
        a.read_for(QUIET);
    }
    let seen = |a: &Napplet| a.events(Some("live"));
    assert_eq!(seen(&apps[3]), ["clamped"]);
    assert!(seen(&apps[4]).is_empty(), "{:?}", seen(&apps[4]));
    assert!(
        seen(&apps[5]).is_empty(),
        "the stranger got {:?}",
        seen(&apps[5])
    );
    // Each id delivered once per subscription, and forwarded at most once per device.
    assert_eq!(seen(&apps[1]), ["two hops", "clamped"]);
    let fwd: Vec<u64> = devices
        .iter()
        .map(|d| d.stats()["forwarded"].as_u64().unwrap())
        .collect();
    assert_eq!(fwd, [2, 2, 1, 0, 0, 0], "forwarded per device");
    let stranger = devices[5].stats();
    assert_eq!(stranger["frames_sent"], 0, "{stranger}");
    assert_eq!(devices[0].stats()["stranger_frames"], 0);

    // A stranger that proves its key and then speaks the member wire anyway: its publish, its
    // backlog request and its blob question are dropped and counted, and it hears nothing back.
    let intruder = generate_secp256k1(provider(), &mut rng);
    let forged = UnsignedEvent {
        created_at: 1_790_000_000,
        kind: 1,
        tags: vec![],
        content: "from a stranger".into(),
    }
    .sign(provider(), &intruder, &mut rng)
    .unwrap();
    let frames = [
        MemberFrame::Publish {
            ttl: 3,
            event: forged,
        }
        .to_text(),
        r#"["MESH",{"ttl":1,"qid":"q1","budgetMs":5000},["REQ","q1",{"kinds":[1]}]]"#.to_string(),
        format!(r#"["MESH",{{"qid":"q2"}},["HAVE","{h1}"]]"#),
    ];
    let before = devices[0].stats();
    let mut intruding = stranger_link(devices[0].member, &intruder, &frames);
    wait_until("the intruder's frames are counted", || {
        devices[0].stats()["stranger_frames"].as_u64().unwrap()
            >= before["stranger_frames"].as_u64().unwrap() + 3
    });
    let after = devices[0].stats();
    assert!(
        after["unproven_frames"].as_u64() > before["unproven_frames"].as_u64(),
        "a frame before the proof is dropped and counted: {after}"
    );
    assert_eq!(after["forwarded"], before["forwarded"], "{after}");
    assert_eq!(
        after["backlog_answered"], before["backlog_answered"],
        "{after}"
    );
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = intruding.get_mut() {
        s.set_read_timeout(Some(QUIET)).unwrap();
    }
    if let Ok(Message::Text(t)) = intruding.read() {
        panic!("the stranger was answered: {t}");
    }
    apps[0].read_for(QUIET);
    assert!(!seen(&apps[0]).contains(&"from a stranger".to_string()));
    drop(intruding);

    // Backlog: an event kept only on 1 (ttl 0), then 3 subscribes with ttl 2: its own eose
    // first, 1's event after it.
    let r = apps[1].publish("p3", 9, "kept on one", 0);
    assert_eq!(r["ttl"], 0);
    apps[3].got.clear();
    apps[3].send(json!({"type": "mesh.subscribe", "id": "b", "subId": "back", "filters": [{"kinds": [9]}], "ttl": 5}));
    apps[3].wait(|v| v["type"] == "mesh.event" && v["subId"] == "back");
    let order: Vec<&str> = apps[3]
        .got
        .iter()
        .filter(|v| v["subId"] == "back")
        .map(|v| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["mesh.eose", "mesh.event"],
        "eose before a member's backlog"
    );
    let eose = apps[3]
        .got
        .iter()
        .find(|v| v["type"] == "mesh.eose" && v["subId"] == "back")
        .unwrap();
    assert_eq!(eose["ttl"], 2, "the subscribe cap, reported");

    // Blobs: 2 asks its members 1 and 3, both hold H1; 0 asks 1 only.
    apps[2].send(json!({"type": "mesh.blobs", "id": "q", "hashes": [h1, h0]}));
    let b = apps[2].wait(|v| v["type"] == "mesh.blobs.result");
    assert_eq!(b["peers"], 2, "{b}");
    assert_eq!(b["blobs"][&h1], 2);
    assert_eq!(b["blobs"][&h0], 0);
    apps[0].send(json!({"type": "mesh.blobs", "id": "q0", "hashes": [h1]}));
    let b = apps[0].wait(|v| v["type"] == "mesh.blobs.result");
    assert_eq!(
        (b["peers"].as_u64(), b["blobs"][&h1].as_u64()),
        (Some(1), Some(1)),
        "{b}"
    );
    let many: Vec<String> = (0..65).map(|i| format!("{i:064x}")).collect();
    apps[0].send(json!({"type": "mesh.blobs", "id": "q65", "hashes": many}));
    let b = apps[0].wait(|v| v["type"] == "mesh.blobs.result" && v["id"] == "q65");
    assert!(b["error"].is_string(), "65 hashes refused whole: {b}");
    assert!(
        b.get("blobs")
            .is_none_or(|m| m.as_object().is_none_or(|m| m.is_empty())),
        "{b}"
    );

    // Revocation mid-stream: 2's live subscription ends now, and the next call is refused.
    assert_eq!(
        devices[2].control(json!({"op": "revoke", "napplet": "app"}))["ok"],
        true
    );
    apps[2].wait(|v| v["type"] == "mesh.closed" && v["subId"] == "live");
    apps[0].publish("p4", 1, "after revoke", 2);
    apps[1].wait(|v| v["result"]["event"]["content"] == "after revoke");
    apps[2].read_for(QUIET);
    assert!(!seen(&apps[2]).contains(&"after revoke".to_string()));
    let r = apps[2].publish("p5", 1, "refused", 1);
    assert_eq!(
        (r["ok"].as_bool(), r["error"].as_str()),
        (Some(false), Some("mesh not granted"))
    );
    // Granting again says in words what the grant lets the napplet do (§5), and works at once.
    let g = devices[2].control(json!({"op": "grant", "napplet": "app"}));
    assert_eq!(g["ok"], true, "{g}");
    let notice = g["notice"].as_str().unwrap_or_default();
    assert!(
        notice.starts_with("app ") && notice.contains("publish as you to all your circle members"),
        "{g}"
    );
    let r = apps[2].publish("p5b", 1, "granted again", 0);
    assert_eq!(r["ok"], true, "{r}");
    apps[2].subscribe("live2", json!({"kinds": [1]}), 0);

    // The ring: 4 and 0 pair live over the control face (the link 4 dialled already exists).
    let k0 = hex::encode(&devices[0].key);
    let k4 = hex::encode(&devices[4].key);
    let r4 = devices[4].control(json!({"op": "pair", "peer": k0}));
    assert_eq!(r4["ok"], true, "{r4}");
    assert_eq!(
        devices[0].control(json!({"op": "accept", "record": r4["record"]}))["ok"],
        true
    );
    let r0 = devices[0].control(json!({"op": "pair", "peer": k4}));
    let a4 = devices[4].control(json!({"op": "accept", "record": r0["record"]}));
    assert_eq!(a4["member"], true, "{a4}");
    wait_until("0 reaches 1 and 4", || devices[0].stats()["reachable"] == 2);
    let counters = |key: &str| -> Vec<u64> {
        devices
            .iter()
            .map(|d| d.stats()[key].as_u64().unwrap())
            .collect()
    };
    let (fwd_before, dup_before) = (counters("forwarded"), counters("duplicates"));
    // ttl 3 round the ring 0–1–2–3–4–0: 0 sends to 1 and 4 (2 hops left), they pass it to 2 and
    // 3 (1 left), and 2 and 3 pass it to each other, so a copy reaches one of them by a second
    // path and is dropped there.
    let r = apps[0].publish("p6", 1, "ring", 3);
    assert_eq!(r["ttl"], 3, "{r}");
    for i in [1, 2, 3, 4] {
        apps[i].wait(|v| v["result"]["event"]["content"] == "ring");
    }
    for a in apps.iter_mut() {
        a.read_for(QUIET);
    }
    for i in [0, 1, 3, 4] {
        assert_eq!(
            seen(&apps[i]).iter().filter(|c| *c == "ring").count(),
            1,
            "device {i}: once, whatever the paths"
        );
    }
    let delta = |after: Vec<u64>, before: &[u64]| -> Vec<u64> {
        after.iter().zip(before).map(|(a, b)| a - b).collect()
    };
    let fwd = delta(counters("forwarded"), &fwd_before);
    assert!(
        fwd.iter().all(|&d| d <= 1),
        "each id forwarded at most once per device: {fwd:?}"
    );
    assert_eq!((fwd[0], fwd[1], fwd[4], fwd[5]), (1, 1, 1, 0), "{fwd:?}");
    let dup = delta(counters("duplicates"), &dup_before);
    assert!(
        dup[2] + dup[3] >= 1,
        "a copy by a second path is dropped: {dup:?}"
    );
    assert!(seen(&apps[5]).is_empty());
    assert_eq!(devices[5].stats()["frames_sent"], 0);

    // Restart device 1: its kept events are there, the ephemeral one it carried is not.
    apps[0].publish("p7", 20666, "ding", 1);
    apps[1].wait(|v| v["result"]["event"]["content"] == "ding");
    drop(apps.remove(1));
    devices[1].process = None;
    devices[1].start(&addrs);
    let mut again = Napplet::open(devices[1].listen, TOKEN);
    again.subscribe("all", json!({"kinds": [1, 9, 20666]}), 0);
    let kept = again.events(Some("all"));
    assert!(kept.contains(&"kept on one".to_string()), "{kept:?}");
    assert!(kept.contains(&"two hops".to_string()), "{kept:?}");
    assert!(
        !kept.contains(&"ding".to_string()),
        "an ephemeral event is kept nowhere: {kept:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
