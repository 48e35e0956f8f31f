//! Durable state across `kill -9` (issue #4): a `weft airc serve` process is killed with SIGKILL
//! after it acked, stored or logged something, and a new process on the same data directory
//! still has every table the server persists: the spool (a message acked `queued` is delivered,
//! exactly once), the seen ids (a retry is answered `duplicate`), the reply-window pairs, links,
//! passports, and the append-only audit log.

use std::path::Path;
use std::process::Command;

#[path = "common/cli.rs"]
mod cli;
use cli::{Ran, Running, WEFT, json, temp_dir};
use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::store::Store;
use weft_proto::airc::frame::AckStatus;
use weft_proto::airc::server::Record;

fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `weft airc serve` on `dir`, the test's uid owning `alice` and `bob`.
fn serve(dir: &Path) -> Running {
    let mut cmd = Command::new(WEFT);
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(dir)
        .args(["--namespaces", &format!("{}=alice,bob", my_uid())]);
    let server = Running::spawn(cmd);
    server.wait_for("listening on");
    server
}

/// SIGKILL: no destructor, no flush, no goodbye.
fn kill_9(mut server: Running) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

fn run(dir: &Path, args: &[&str]) -> Ran {
    let mut cmd = Command::new(WEFT);
    cmd.arg("airc")
        .args(args)
        .arg("--socket")
        .arg(dir.join("airc.sock"));
    Ran::from(cmd.output().unwrap())
}

/// How many messages the server holds spooled, by `stat`.
fn spooled(dir: &Path) -> u64 {
    run(dir, &["stat"]).ok()["spooled"].as_u64().unwrap()
}

/// Waits (bounded) until the server holds `n` spooled: the listener's ack left with the listener,
/// and a kill before the server has read it would, rightly, deliver the message again. The server
/// writes the forget before it answers anything after that ack, so the count in `stat` dropping
/// means the forget is on disk.
fn wait_spooled(dir: &Path, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while spooled(dir) != n {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener's ack was never taken"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The bodies `listen alice/later --count n` prints.
fn listen(dir: &Path, n: usize) -> Vec<String> {
    let mut cmd = Command::new(WEFT);
    cmd.args(["airc", "listen", "alice/later", "--count", &n.to_string()])
        .arg("--socket")
        .arg(dir.join("airc.sock"));
    let (lines, code) = Running::spawn(cmd).finish();
    assert_eq!(code, Some(0), "{lines:?}");
    lines
        .iter()
        .map(|l| json(l)["body"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn after_kill_9_every_durable_table_is_back_and_a_queued_message_is_delivered_exactly_once() {
    let dir = temp_dir("kill9");
    let server = serve(&dir);
    let socket = dir.join("airc.sock");

    // Spool and seen ids: a message for an endpoint nobody has bound.
    let id = message_id(&mut weft_drivers::os_rng());
    let queued = Client::connect(&socket)
        .unwrap()
        .message(new_message(id.clone(), "x", "later", "kept", None))
        .unwrap();
    assert_eq!(
        (queued.status, queued.code.as_deref()),
        (AckStatus::Queued, Some("endpoint_offline"))
    );
    // A passport and a link, each with its audit events.
    let passport = run(&dir, &["passport", "new", "--as", "alice/x"]).ok()["passport"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let link = run(&dir, &["link", "offer", "bob/y", "--as", "alice/x"]).ok()["link"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    run(&dir, &["link", "accept", &link, "--as", "bob/y"]).ok();
    kill_9(server);

    let server = serve(&dir);
    let passports = run(&dir, &["passport", "list", "--as", "alice/x"]).ok();
    assert_eq!(
        passports["passports"][0]["id"],
        passport.as_str(),
        "{passports}"
    );
    let links = run(&dir, &["link", "list", "--as", "bob/y"]).ok();
    assert_eq!(links["links"][0]["id"], link.as_str(), "{links}");
    assert_eq!(links["links"][0]["state"], "active", "{links}");
    let retry = Client::connect(&socket)
        .unwrap()
        .message(new_message(id.clone(), "x", "later", "kept", None))
        .unwrap();
    assert_eq!(
        (retry.status, retry.code.as_deref()),
        (AckStatus::Delivered, Some("duplicate")),
        "the seen id survived"
    );
    let held = spooled(&dir);
    assert_eq!(listen(&dir, 1), ["kept"], "the spooled message survived");
    wait_spooled(&dir, held - 1);
    kill_9(server);

    // Delivered and acked: forgotten durably, so a third process does not deliver it again.
    let server = serve(&dir);
    let after = Client::connect(&socket)
        .unwrap()
        .message(new_message(
            message_id(&mut weft_drivers::os_rng()),
            "x",
            "later",
            "after",
            None,
        ))
        .unwrap();
    assert_eq!(after.status, AckStatus::Queued);
    assert_eq!(listen(&dir, 1), ["after"], "delivered exactly once");
    kill_9(server);

    let store = Store::open(&dir.join("airc.redb")).unwrap();
    // The pair each acked message noted for the reply window (§10.3), on disk for the restart
    // to restore (the machine honouring it after a restore is `proto/tests/airc_server.rs`).
    let pairs = store
        .load(weft_drivers::now())
        .unwrap()
        .into_iter()
        .filter(|r| matches!(r, Record::ReplyPair { to, .. } if to.ends_with("/alice/later")))
        .count();
    assert_eq!(pairs, 1, "one pair, replaced by the later message");
    let log = store.audit_log().unwrap();
    let kinds: Vec<&str> = log.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in ["passport.issue", "link.offer", "link.accept"] {
        assert!(
            kinds.contains(&kind),
            "{kind} not in the audit log: {kinds:?}"
        );
    }
    let issue = kinds.iter().position(|k| *k == "passport.issue").unwrap();
    let offer = kinds.iter().position(|k| *k == "link.offer").unwrap();
    assert!(issue < offer, "append-only, in order: {kinds:?}");
}
