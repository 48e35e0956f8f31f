//! `weft circle pair` end to end: two real `weft circle serve` processes on loopback, linked at
//! the transport (B dials A's member face) but paired with nobody. `weft circle pair invite` on A
//! prints an invite string; `weft circle pair accept` on B takes it; both then hold both signed
//! records (on disk, owner-only), are each other's member, and a publish crosses from A's napplet
//! to B's. The invite then works no more (a replay from B is refused), a changed npub is refused
//! before anything is sent, and the pairing survives B's restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

#[path = "common/circle.rs"]
#[allow(dead_code)] // The circle tests' one harness; this file needs a part of it.
mod circle;
#[path = "common/cli.rs"]
mod cli;
use circle::{Napplet, wait_until};
use cli::{Ran, Running, WEFT, free_port, temp_dir};

const TOKEN: &str = "napplet-token-0123456789";
const CONTROL: &str = "control-token-0123456789";

struct Device {
    dir: PathBuf,
    listen: SocketAddr,
    member: SocketAddr,
    dial: Option<SocketAddr>,
    process: Option<Running>,
}

impl Device {
    fn new(root: &std::path::Path, name: &str, dial: Option<SocketAddr>) -> Self {
        let dir = root.join(name);
        weft_drivers::state_dir::prepare_dir(&dir, false).unwrap();
        Self {
            dir,
            listen: free_port(),
            member: free_port(),
            dial,
            process: None,
        }
    }

    fn start(&mut self) {
        let members = self
            .dial
            .map(|a| format!("\"ws://{a}/member\""))
            .unwrap_or_default();
        let config = format!(
            "listen = \"{}\"\nmember_listen = \"{}\"\ndata_dir = \"{}\"\n\
             control_token = \"{CONTROL}\"\nmembers = [{members}]\n\
             [[napplet]]\nname = \"app\"\ntoken = \"{TOKEN}\"\ngranted = true\n",
            self.listen,
            self.member,
            self.dir.join("data").display(),
        );
        let path = self.dir.join("circle.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(WEFT);
        cmd.args(["circle", "serve", "--config"]).arg(&path);
        let p = Running::spawn(cmd);
        p.wait_for("listening");
        self.process = Some(p);
    }

    fn control_url(&self) -> String {
        format!("ws://{}/control?token={CONTROL}", self.listen)
    }

    fn stats(&self) -> Value {
        weft_drivers::circle::run::control(&self.control_url(), &json!({"op": "stats"})).unwrap()
    }

    /// `weft circle pair <args…>` against this device, as a shell runs it.
    fn pair(&self, args: &[&str]) -> Ran {
        Command::new(WEFT)
            .args(["circle", "pair"])
            .args(args)
            .args(["--control", &self.control_url()])
            .output()
            .unwrap()
            .into()
    }

    fn pairing_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("data/pairings"))
            .map(|r| {
                r.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

#[test]
fn two_serve_processes_pair_by_invite_with_the_cli_and_a_publish_crosses() {
    let root = temp_dir("circle-pair");
    let mut a = Device::new(&root, "a", None);
    a.start();
    let mut b = Device::new(&root, "b", Some(a.member));
    b.start();
    // Linked and proven, but strangers: nothing crosses.
    wait_until("B's link to A is proven", || {
        b.stats()["links_proven"] == 1 && a.stats()["links_proven"] == 1
    });
    assert_eq!(a.stats()["reachable"], 0);
    let mut app_a = Napplet::open(a.listen, TOKEN);
    let mut app_b = Napplet::open(b.listen, TOKEN);
    app_b.send(json!({"type": "mesh.subscribe", "id": "s", "subId": "live", "filters": [{"kinds": [1]}], "ttl": 0}));
    app_b.wait(|v| v["type"] == "mesh.eose");
    app_a.send(json!({"type": "mesh.publish", "id": "p0", "event": {"kind": 1, "content": "before", "tags": []}, "ttl": 1}));
    app_a.wait(|v| v["type"] == "mesh.publish.result");

    // A makes the invite; B accepts it.
    let invite = a.pair(&["invite"]);
    assert_eq!(invite.code, Some(0), "{invite:?}");
    let invite = invite.stdout.trim().to_string();
    let a_key = a.stats()["pubkey"].as_str().unwrap().to_string();
    let a_npub = weft_proto::codec::bech32::encode_npub(
        &weft_proto::codec::hex::decode_array::<32>(&a_key).unwrap(),
    );
    assert!(
        invite.starts_with(&format!("weft-circle-invite1:{a_npub}:")),
        "{invite}"
    );
    // A changed npub is refused before anything is sent.
    let tampered = {
        let mut b = invite.clone().into_bytes();
        let at = "weft-circle-invite1:npub1".len() + 10;
        b[at] = if b[at] == b'q' { b'p' } else { b'q' };
        String::from_utf8(b).unwrap()
    };
    let refused = b.pair(&["accept", &tampered]);
    assert_ne!(refused.code, Some(0), "{refused:?}");
    assert!(
        refused.json()["error"].as_str().unwrap().contains("npub"),
        "{refused:?}"
    );

    let joined = b.pair(&["accept", &invite]);
    let answer = joined.ok();
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["peer"], a_npub.as_str());
    wait_until("A and B are each other's member", || {
        a.stats()["reachable"] == 1 && b.stats()["reachable"] == 1
    });
    // Both signed records on both sides, kept owner-only.
    for d in [&a, &b] {
        let files = d.pairing_files();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.iter().any(|f| f.ends_with(".ours.json")), "{files:?}");
        assert!(
            files.iter().any(|f| f.ends_with(".theirs.json")),
            "{files:?}"
        );
        for f in files {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(d.dir.join("data/pairings").join(&f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{f}");
        }
    }

    // A publish crosses from A's napplet to B's.
    app_a.send(json!({"type": "mesh.publish", "id": "p1", "event": {"kind": 1, "content": "after", "tags": []}, "ttl": 1}));
    app_b.wait(|v| v["type"] == "mesh.event" && v["result"]["event"]["content"] == "after");
    assert_eq!(
        app_b.events(None),
        ["after"],
        "nothing from before the pairing"
    );

    // The invite is spent: accepting it again is refused by A.
    let again = b.pair(&["accept", &invite]);
    assert_ne!(again.code, Some(0), "{again:?}");
    assert_eq!(
        again.json()["error"],
        "refused: invite already used",
        "{again:?}"
    );
    assert_eq!(a.stats()["invites_refused"], 1);

    // B restarts: the pairing is read back from its files and the link comes back as a member.
    drop(app_b);
    b.process = None;
    b.start();
    wait_until("B is A's member again after its restart", || {
        a.stats()["reachable"] == 1 && b.stats()["reachable"] == 1
    });
}
