//! A real Nostr relay that weft did not write, run by `scripts/nostr-relay` on an ephemeral
//! loopback port for the Minca interop tests (Minca 04 Network §1.5); stopped on drop.

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started relay has to accept connections (a cold Python start with its database
/// migrations takes a few seconds on a loaded machine).
const START_BUDGET: Duration = Duration::from_secs(60);

/// Exit status with which the project's interop scripts say "cannot run here" (after printing
/// `SKIP: <reason>`), as automake's test harness does.
pub(crate) const SKIP_STATUS: i32 = 77;

/// The repository's `scripts/` folder.
pub(crate) fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scripts")
        .join(name)
}

/// Runs `script args…` to completion: `Ok(stdout)`, or `Err(reason)` when it said `SKIP`. Any
/// other failure fails the test.
pub(crate) fn run_script(name: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(script(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => Ok(stdout),
        Some(SKIP_STATUS) => Err(stdout.trim().to_owned()),
        _ => panic!(
            "scripts/{name} {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Reports a skipped test on the real stderr: the test harness captures `println!` and
/// `eprintln!` of passing tests, and a skip must be seen.
pub(crate) fn report_skip(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{test}: {reason}");
}

/// A free loopback port: bound, read and released (a race with another process taking it in
/// between is possible, and shows as the relay failing to start).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port()
}

/// A running `scripts/nostr-relay serve`.
pub(crate) struct NostrRelay {
    child: Child,
    dir: PathBuf,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl NostrRelay {
    /// Installs (if needed) and starts the relay; `Err(reason)` when it cannot be installed here.
    pub(crate) fn start(name: &str) -> Result<Self, String> {
        run_script("nostr-relay", &["install"])?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("weft-nostr-relay-{name}-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let log = std::fs::File::create(dir.join("relay.log")).expect("a log file");
        let child = Command::new(script("nostr-relay"))
            .args([
                "serve",
                &port.to_string(),
                dir.to_str().expect("a UTF-8 path"),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("scripts/nostr-relay starts");
        let mut relay = Self {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let started = Instant::now();
        while TcpStream::connect(relay.addr).is_err() {
            if let Ok(Some(status)) = relay.child.try_wait() {
                panic!("the Nostr relay exited ({status}):\n{}", relay.log());
            }
            assert!(
                started.elapsed() < START_BUDGET,
                "the Nostr relay did not listen within {START_BUDGET:?}:\n{}",
                relay.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(relay)
    }

    /// What the relay wrote so far.
    pub(crate) fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.join("relay.log")) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for NostrRelay {
    fn drop(&mut self) {
        // `serve` execs the relay, so this is the relay's own process.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
