//! A passport redeemed across two realms through the CLI (AIRC §12): two `weft airc serve`
//! processes peered over TLS with certificates from a test CA and static entries in their
//! configuration files, `weft airc passport new` at one realm, `weft airc passport redeem` at the
//! other, the link then active on both, a message crossing it, and a redemption after
//! `passport revoke` refused with its code and a non-zero exit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/cli.rs"]
mod cli;
#[path = "common/tls_ca.rs"]
mod tls_ca;
use cli::{Ran, Running, WEFT, free_port, json, temp_dir};
use serde_json::Value;
use tls_ca::Ca;
use weft_drivers::airc::realm_key::{self, KEY_FILE};
use weft_proto::codec::base64;
use weft_proto::crypto::{CryptoProvider, default_provider};

fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The standard base64 of the public half of the realm key in `dir`, made here as the server
/// would make it on first start.
fn public_key(dir: &Path) -> String {
    let seed = realm_key::load_or_create(&dir.join(KEY_FILE), &mut weft_drivers::os_rng()).unwrap();
    base64::encode(&default_provider().ed25519_public_key(&seed))
}

/// One realm's side: its data directory, its peer address, its namespace.
struct Side {
    realm: &'static str,
    ns: &'static str,
    dir: PathBuf,
    peer: SocketAddr,
}

/// A `weft airc serve` process for `me`, peered with `other` over TLS.
struct Serving {
    _server: Running,
    socket: PathBuf,
}

impl Serving {
    fn start(me: &Side, other: &Side, ca: &Ca) -> Self {
        let tls = ca.files(&me.dir, me.realm);
        let config = format!(
            "realm = \"{realm}\"\npeer_listen = \"{listen}\"\n\n[namespaces]\n{uid} = [\"{ns}\"]\n\n\
             [tls]\ncert = {cert:?}\nkey = {key:?}\ntrust = {trust:?}\n\n\
             [peers.\"{other}\"]\naddress = \"{at}\"\ntransport = \"tls\"\n\n\
             [known_keys]\n\"{other}\" = [\"{other_key}\"]\n",
            realm = me.realm,
            listen = me.peer,
            uid = my_uid(),
            ns = me.ns,
            cert = tls.cert.unwrap(),
            key = tls.key.unwrap(),
            trust = tls.trust.unwrap(),
            other = other.realm,
            at = other.peer,
            other_key = public_key(&other.dir),
        );
        let path = me.dir.join("weft.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(WEFT);
        cmd.args(["airc", "serve", "--data-dir"])
            .arg(&me.dir)
            .arg("--config")
            .arg(&path);
        let server = Running::spawn(cmd);
        server.wait_for("listening on");
        Self {
            _server: server,
            socket: me.dir.join("airc.sock"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(WEFT);
        cmd.arg("airc").args(args).arg("--socket").arg(&self.socket);
        cmd
    }

    fn run(&self, args: &[&str]) -> Ran {
        Ran::from(self.command(args).output().unwrap())
    }

    /// The state of link `id` as `weft airc link list --as AS` shows it, once it is `want`
    /// (the other realm hears of a link by a control message, which may arrive after the
    /// command that made it returned).
    fn link_state(&self, id: &str, as_: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let listed = self.run(&["link", "list", "--as", as_]).ok();
            let link = listed["links"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|l| l["id"] == id)
                .cloned();
            match link {
                Some(l) if l["state"] == want => return l,
                other if Instant::now() > deadline => {
                    panic!("link {id} never {want} at {as_}: {other:?} in {listed}")
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

#[test]
fn a_passport_issued_in_one_realm_is_redeemed_from_another_over_tls_and_refused_once_revoked() {
    let ca = Ca::new();
    let a = Side {
        realm: "a.test",
        ns: "alice",
        dir: temp_dir("passport-a"),
        peer: free_port(),
    };
    let b = Side {
        realm: "b.test",
        ns: "bob",
        dir: temp_dir("passport-b"),
        peer: free_port(),
    };
    let realm_a = Serving::start(&a, &b, &ca);
    let realm_b = Serving::start(&b, &a, &ca);

    let issued = realm_a
        .run(&["passport", "new", "--as", "alice/x", "--label", "review"])
        .ok();
    let line = issued["line"].as_str().unwrap().to_string();
    assert!(line.starts_with("airc-passport:1;i=a.test;"), "{line}");
    let passport = issued["passport"]["id"].as_str().unwrap().to_string();

    let redeemed = realm_b
        .run(&["passport", "redeem", &line, "--as", "bob/y"])
        .ok();
    assert_eq!(
        (redeemed["t"].as_str(), redeemed["status"].as_str()),
        (Some("passported"), Some("delivered")),
        "{redeemed}"
    );
    let link = redeemed["link"]["id"].as_str().unwrap().to_string();

    // Active on both sides, between the same two endpoints.
    let at_b = realm_b.link_state(&link, "bob/y", "active");
    let at_a = realm_a.link_state(&link, "alice/x", "active");
    for l in [&at_a, &at_b] {
        let ends = [l["a"].as_str(), l["b"].as_str()];
        assert!(
            ends.contains(&Some("airc://a.test/alice/x"))
                && ends.contains(&Some("airc://b.test/bob/y")),
            "{l}"
        );
    }

    // A message crosses from b.test to a.test and is acked delivered. The listener also gets
    // the link's notices (§11.1), spooled for alice/x before it bound, so it runs until killed.
    let mut listener = Running::spawn(realm_a.command(&["listen", "alice/x"]));
    listener.wait_for("bound");
    let ack = realm_b
        .run(&[
            "send",
            "//a.test/alice/x",
            "through the passport's link",
            "--as",
            "y",
        ])
        .ok();
    assert_eq!(ack["status"], "delivered", "{ack}");
    listener.child.kill().unwrap();
    let (lines, _) = listener.finish();
    let m = lines
        .iter()
        .map(|l| json(l))
        .find(|m| m["id"] == ack["id"])
        .unwrap_or_else(|| panic!("the message is not among {lines:?}"));
    assert_eq!(m["from"], "airc://b.test/bob/y");
    assert_eq!(m["body"], "through the passport's link");
    assert_eq!(m["foreign"], true, "from another realm");

    // Revoked at a.test: a second redemption from b.test is refused, and the shell hears it.
    let revoked = realm_a
        .run(&["passport", "revoke", &passport, "--as", "alice/x"])
        .ok();
    assert_eq!(revoked["passport"]["state"], "revoked");
    let again = realm_b.run(&["passport", "redeem", &line, "--as", "bob/z"]);
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(
        again.stderr.contains("passport revoked"),
        "the refusal names its reason: {again:?}"
    );
}
