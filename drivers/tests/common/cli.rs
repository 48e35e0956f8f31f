//! Running the real `weft` binary from a test: a long-lived process whose stderr is watched
//! line by line, and a finished command as a shell sees it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// The `weft` binary under test.
pub(crate) const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// How long a test waits for a process to say it is ready.
pub(crate) const READY: Duration = Duration::from_secs(60);

/// A fresh, empty directory for one test.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A server refuses a state directory other users can read (weft_drivers::state_dir).
    weft_drivers::state_dir::prepare_dir(&dir, true).unwrap();
    dir
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A child process whose stderr lines arrive on a channel as it writes them.
pub(crate) struct Running {
    pub(crate) child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    /// Starts `cmd` with piped stdout and stderr.
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weft starts");
        let (tx, stderr) = mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, stderr }
    }

    /// Waits for a stderr line containing `needle`, and returns it.
    pub(crate) fn wait_for(&self, needle: &str) -> String {
        loop {
            match self.stderr.recv_timeout(READY) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("no {needle:?} on stderr: {e}"),
            }
        }
    }

    /// Waits for the process to exit; its stdout lines and exit code.
    pub(crate) fn finish(mut self) -> (Vec<String>, Option<i32>) {
        let out = self.child.stdout.take().unwrap();
        let lines = BufReader::new(out).lines().map_while(Result::ok).collect();
        let status = self.child.wait().unwrap();
        (lines, status.code())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A finished client command, as a shell sees it.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl From<Output> for Ran {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Ran {
    /// The one JSON line it printed, after checking it succeeded.
    pub(crate) fn ok(&self) -> Value {
        assert_eq!(self.code, Some(0), "{self:?}");
        self.json()
    }

    /// The one JSON line it printed.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// One JSON line.
pub(crate) fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// `weft airc serve` in a fresh data directory, the test's uid owning `alice`, the client face
/// also on WebSocket at a free loopback port: the process, its client socket's path and the
/// WebSocket address.
pub(crate) fn airc_serve_ws(name: &str) -> (Running, PathBuf, SocketAddr) {
    let dir = temp_dir(name);
    let ws = free_port();
    let mut cmd = Command::new(WEFT);
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .args(["--client-ws", &ws.to_string()])
        .args([
            "--namespaces",
            &format!("{}=alice", rustix::process::getuid().as_raw()),
        ]);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws://");
    (server, dir.join("airc.sock"), ws)
}
