//! AIRC §5 under attack: another local user may not become root on the loopback TCP client face.
//!
//! The attack, as it was found from outside: an unprivileged user connects, writes a `hello` and
//! a `msg` from `root/forged` to `root/inbox`, and closes at once, thousands of times. By the
//! time the server accepts some of those connections the client's socket is an orphan, which
//! the kernel lists in `/proc/net/tcp` as uid 0 with inode 0; read at its word, that row made
//! the message root's. The server must take a uid only from a live, connected socket that a
//! process of that uid holds, and refuse the rest.
//!
//! The attacker is this test binary run again as another uid (a number with no account is as
//! foreign as a real user, and needs nothing created on the machine), so the test needs root to
//! switch uids; anywhere else it says so in one line and passes without running.

#[path = "common/adapter.rs"]
mod adapter;
#[path = "common/airc_tcp.rs"]
mod airc_tcp;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use weft_drivers::airc::serve::ServeConfig;
use weft_proto::airc::address::Namespace;

/// The attacker's uid: not root, not the server's, no account needed.
const ATTACKER_UID: u32 = 64_001;

/// Connections the attacker makes: the count the hole was reproduced with (321 of them got
/// through before the fix).
const TRIES: usize = 3_000;

/// Where the attacker child finds the server; set only in the child.
const TARGET_VAR: &str = "WEFT_UID_RACE_TARGET";

fn hello() -> &'static [u8] {
    b"{\"t\":\"hello\",\"proto\":\"airc/0.1\",\"role\":\"client\"}\n"
}

fn forged(i: usize) -> Vec<u8> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        "{{\"t\":\"msg\",\"id\":\"{i:032x}\",\"from\":\"//localhost/root/forged\",\"to\":\"//localhost/root/inbox\",\"ts\":{ts},\"body\":\"forged {i}\"}}\n"
    )
    .into_bytes()
}

/// The attacker's side: runs only in the child, where [`TARGET_VAR`] is set.
#[test]
fn attacker_role() {
    let Ok(target) = std::env::var(TARGET_VAR) else {
        return;
    };
    let addr: SocketAddr = target.parse().unwrap();
    assert_ne!(
        rustix::process::getuid().as_raw(),
        0,
        "the attacker is not root"
    );
    for i in 0..TRIES {
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let mut bytes = hello().to_vec();
        bytes.extend(forged(i));
        let _ = s.write_all(&bytes);
        drop(s);
    }
}

/// Reads frames from `s` until `until`, or until a line contains `stop`, returning every line
/// received.
fn lines_until(s: &mut TcpStream, until: Instant, stop: &str) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 65_536];
    while Instant::now() < until && !String::from_utf8_lossy(&got).contains(stop) {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("listener read: {e}"),
        }
    }
    String::from_utf8_lossy(&got)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn another_uid_racing_its_close_never_sends_as_root() {
    if std::env::var(TARGET_VAR).is_ok() {
        return;
    }
    if rustix::process::getuid().as_raw() != 0 {
        println!("SKIP: the uid race needs root to run the attacker as another uid");
        return;
    }
    let dir = std::env::temp_dir().join(format!("weft-airc-uid-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = ServeConfig::local(&dir, "root").unwrap();
    let ns = |n: &str| vec![Namespace::parse(n).unwrap()];
    config.namespaces = BTreeMap::from([(0, ns("root")), (1001, ns("bob"))]);
    config.client_tcp = Some("127.0.0.1:0".parse().unwrap());
    let (running, addr) = airc_tcp::serve_with_tcp_face(config);

    // Root's listener, bound to root/inbox.
    let mut listener = TcpStream::connect(addr).unwrap();
    listener.write_all(hello()).unwrap();
    listener
        .write_all(b"{\"t\":\"bind\",\"names\":[\"root/inbox\"]}\n")
        .unwrap();
    let setup = lines_until(
        &mut listener,
        Instant::now() + Duration::from_secs(30),
        "\"bound\"",
    );
    assert!(
        setup.iter().any(|l| l.contains("\"bound\"")),
        "root's listener is bound: {setup:?}"
    );

    // The attack, from another uid.
    let started = Instant::now();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "attacker_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(TARGET_VAR, addr.to_string())
        .uid(ATTACKER_UID)
        .gid(ATTACKER_UID)
        .status()
        .expect("the attacker runs");
    assert!(status.success(), "the attacker ran to its end");
    let attack = started.elapsed();

    // A genuine message from root afterwards proves the listener would have heard a forged one;
    // it is accepted after every connection of the attack, so by the time it arrives the server
    // has read all of theirs.
    let mut root = TcpStream::connect(addr).unwrap();
    root.write_all(hello()).unwrap();
    root.write_all(&forged(TRIES)).unwrap();
    let genuine = format!("{TRIES:032x}");
    let heard = lines_until(
        &mut listener,
        Instant::now() + Duration::from_secs(60),
        &genuine,
    );
    running.stop();
    let _ = std::fs::remove_dir_all(&dir);

    let delivered: Vec<&String> = heard.iter().filter(|l| l.contains("\"msg\"")).collect();
    let forged_through: Vec<&&String> =
        delivered.iter().filter(|l| !l.contains(&genuine)).collect();
    assert!(
        forged_through.is_empty(),
        "{} of {TRIES} forged messages reached root's inbox in {attack:?}, first: {}",
        forged_through.len(),
        forged_through[0]
    );
    assert_eq!(delivered.len(), 1, "root's own message arrives: {heard:?}");
}
