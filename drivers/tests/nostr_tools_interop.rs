//! Interop with a Nostr client weft did not write: nostr-tools (npm) against `weft nostr serve`
//! on a loopback port, through `scripts/nostr-tools-client` (publish refused `auth-required:`,
//! NIP-42 AUTH, publish, REQ then EOSE, COUNT, NIP-77 `NegentropySync` with the exact have/need
//! sets). Skipped with one `SKIP:` line where node or the
//! npm registry cannot be had.

use std::path::Path;
use std::process::{Command, Stdio};

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, free_port, temp_dir};

/// Exit status with which the project's interop scripts say "cannot run here".
const SKIP_STATUS: i32 = 77;

#[test]
fn nostr_tools_publishes_authenticates_reads_and_counts_against_weft() {
    let data = temp_dir("nostr-tools").join("nostr");
    let addr = free_port();
    let mut cmd = Command::new(WEFT);
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(&data)
    .args(["--auth", "writes"]);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws://");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/nostr-tools-client");
    let out = Command::new(script)
        .args(["check", &format!("ws://{addr}")])
        .stdin(Stdio::null())
        .output()
        .expect("scripts/nostr-tools-client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(SKIP_STATUS) {
        println!("{}", stdout.trim());
        return;
    }
    assert!(
        out.status.success(),
        "nostr-tools check failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "ok: challenge received",
        "ok: publish before AUTH refused auth-required",
        "ok: AUTH accepted",
        "ok: publish accepted",
        "ok: REQ returned the event, then EOSE",
        "ok: COUNT 1",
        "ok: NegentropySync found exactly what each side lacks",
    ] {
        assert!(stdout.contains(step), "no {step:?} in:\n{stdout}");
    }
}
