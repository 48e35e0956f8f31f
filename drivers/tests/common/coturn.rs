//! Debian's coturn for the TURN tests: installed and started on a free loopback UDP port by
//! `scripts/coturn`, stopped on drop. Used with `common/nostr_relay.rs` (the script helpers).

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::nostr_relay::{report_skip, run_script, script};

/// A child process stopped on drop.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running coturn: stopped, and its directory removed, on drop.
pub(crate) struct Coturn {
    process: Running,
    dir: PathBuf,
}

impl Drop for Coturn {
    fn drop(&mut self) {
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// coturn checking TURN REST passwords under `secret`, and its port; `None` (after the test's
/// `SKIP:` line) when it cannot be installed here.
pub(crate) fn start(test: &str, secret: &str) -> Option<(Coturn, u16)> {
    if let Err(reason) = run_script("coturn", &["install"]) {
        report_skip(test, &reason);
        return None;
    }
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a loopback port")
        .port();
    let dir = std::env::temp_dir().join(format!("weft-coturn-{port}"));
    let _ = std::fs::remove_dir_all(&dir);
    let child = Command::new(script("coturn"))
        .args(["serve", &port.to_string(), secret])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("scripts/coturn starts");
    let process = Running(child);
    Some((Coturn { process, dir }, port))
}
