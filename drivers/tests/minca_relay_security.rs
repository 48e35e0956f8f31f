//! `weft relay` attacked the way a client on the network would attack it, over real sockets
//! (Minca 04 Network §1.4, issue #33): sockets on `/peer` to pass the per-address cap, forged
//! `X-Forwarded-For` lines behind a proxy, connections that never finish their request head, an
//! idle peer that vanished (TCP keepalive on every adapter), and an operator's TURN secret left
//! readable or empty.

use std::io::ErrorKind;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/adapter.rs"]
mod adapter;
use adapter::{Adapter, Running, Served};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_drivers::host::{Endpoint, Listener};
use weft_drivers::minca::node_ws::NodeWsEvent;
use weft_drivers::minca::relay::{NodeOptions, RelayOptions, node_relay_host, relay_host};
use weft_drivers::ws::MAX_PENDING_HEADS_PER_ADDRESS;
use weft_proto::crypto::{default_provider, generate_p256};
use weft_proto::minca::relay_server::MAX_SOCKETS_PER_ADDRESS;

/// How long a test waits for an answer that should come at once.
const PATIENCE: Duration = Duration::from_secs(5);

/// A loopback listener and its address.
fn loopback() -> (Listener, SocketAddr) {
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap())).unwrap();
    let Endpoint::Tcp(addr) = listener.endpoint().unwrap() else {
        unreachable!("a TCP listener has a TCP address")
    };
    (listener, addr)
}

/// `weft relay` with `options` (its `listen` replaced) on `adapter`.
fn relay_on(adapter: Adapter, mut options: RelayOptions) -> (SocketAddr, Running<()>) {
    let (listener, addr) = loopback();
    options.listen = addr;
    let running = adapter.spawn(
        move || Ok(Served::new(relay_host(&options), vec![listener])),
        |_| (),
    );
    (addr, running)
}

/// `weft relay --node-key` (an always-on node serving `/peer`) on the smol adapter.
fn node_relay() -> (SocketAddr, Running<()>) {
    let (listener, addr) = loopback();
    let options = RelayOptions::plain(addr);
    let mut rng = ChaCha20Rng::seed_from_u64(33);
    let node = NodeOptions {
        key: generate_p256(default_provider(), &mut rng),
        note: None,
        spaces: vec![],
    };
    let running = Adapter::Smol.spawn(
        move || {
            let host = node_relay_host(&options, &node, (|_| {}) as fn(NodeWsEvent))?;
            Ok(Served::new(host, vec![listener]))
        },
        |_| (),
    );
    (addr, running)
}

/// A TCP connection to `to` from the loopback address `from` (Linux answers on all of
/// 127.0.0.0/8), so one test can be several client addresses.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddr::from((from, 0))).expect("a loopback source address");
    connect(&fd, &to).unwrap();
    let tcp = TcpStream::from(fd);
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    tcp
}

/// A WebSocket upgrade request head for `path`, with `extra` header lines.
fn upgrade_head(path: &str, extra: &[&str]) -> String {
    let mut head = format!(
        "GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head
}

/// Reads a response head; its status and its text.
fn response(tcp: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match tcp.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Asks `to` from `from` for an upgrade on `path`: the status, and the connection, kept open
/// (an accepted socket holds its place until it closes).
fn upgrade(from: Ipv4Addr, to: SocketAddr, path: &str, extra: &[&str]) -> (u16, TcpStream) {
    let mut tcp = connect_from(from, to);
    tcp.write_all(upgrade_head(path, extra).as_bytes()).unwrap();
    let (status, text) = response(&mut tcp);
    if status != 101 {
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
    (status, tcp)
}

const ME: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A client fills its address's socket cap with `/peer` sockets of an always-on node, then asks
/// for more on either path: refused 429, as if they were relay sockets, while another address is
/// still let in; once one closes, the address may open one again.
#[test]
fn peer_upgrades_count_in_the_per_address_socket_cap() {
    let (addr, running) = node_relay();
    let mut held = Vec::new();
    for _ in 0..MAX_SOCKETS_PER_ADDRESS - 1 {
        let (status, tcp) = upgrade(ME, addr, "/peer", &[]);
        assert_eq!(status, 101);
        held.push(tcp);
    }
    // One relay socket fills the cap.
    let (status, relay_socket) = upgrade(ME, addr, "/", &[]);
    assert_eq!(status, 101);
    for path in ["/peer", "/peer?space=x", "/"] {
        let (status, _) = upgrade(ME, addr, path, &[]);
        assert_eq!(status, 429, "{path}");
    }
    let (status, _other) = upgrade(OTHER, addr, "/peer", &[]);
    assert_eq!(status, 101, "another address is not affected");
    // A `/peer` socket closing gives its place back.
    drop(held.pop());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, tcp) = upgrade(ME, addr, "/", &[]);
        if status == 101 {
            held.push(tcp);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed /peer socket was never let go"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((held, relay_socket));
    running.stop();
}

/// Behind a trusted proxy, a client writes its own `X-Forwarded-For` lines, each naming a fresh
/// address, to escape the per-address cap; the proxy adds a line of its own with the address it
/// saw. The relay counts the proxy's line, the last hop of the last line: the forged ones do not
/// help, and a client the proxy saw at another address is still let in.
#[test]
fn behind_a_trusted_proxy_forged_forwarded_lines_do_not_escape_the_socket_cap() {
    let mut options = RelayOptions::plain("127.0.0.1:0".parse().unwrap());
    options.trust_proxy = true;
    let (addr, running) = relay_on(Adapter::Smol, options);
    let mut held = Vec::new();
    for i in 0..MAX_SOCKETS_PER_ADDRESS {
        let forged = format!("X-Forwarded-For: 203.0.113.{i}");
        let lines = [forged.as_str(), "X-Forwarded-For: 192.0.2.7"];
        let (status, tcp) = upgrade(ME, addr, "/", &lines);
        assert_eq!(status, 101);
        held.push(tcp);
    }
    let lines = [
        "X-Forwarded-For: 203.0.113.250",
        "X-Forwarded-For: 192.0.2.7",
    ];
    let (status, _) = upgrade(ME, addr, "/", &lines);
    assert_eq!(status, 429, "the proxy's hop is the client address");
    // The proxy appending to the client's own line instead: the same last hop.
    let lines = ["X-Forwarded-For: 203.0.113.251, 192.0.2.7"];
    let (status, _) = upgrade(ME, addr, "/", &lines);
    assert_eq!(status, 429);
    // Another client the proxy saw, behind the same proxy (the same TCP peer).
    let lines = ["X-Forwarded-For: 192.0.2.7", "X-Forwarded-For: 192.0.2.8"];
    let (status, _other) = upgrade(ME, addr, "/", &lines);
    assert_eq!(status, 101);
    drop(held);
    running.stop();
}

/// One address opens connections and sends half a request head on each, never the rest (slow
/// loris): past [`MAX_PENDING_HEADS_PER_ADDRESS`] the relay ends each new one at once, with no
/// answer, while another address still upgrades; the held ones are ended by the handshake
/// timeout, not kept.
#[test]
fn pending_request_heads_are_capped_per_address_and_other_addresses_still_connect() {
    for &adapter in Adapter::ALL {
        let (addr, running) =
            relay_on(adapter, RelayOptions::plain("127.0.0.1:0".parse().unwrap()));
        let mut slow = Vec::new();
        for _ in 0..MAX_PENDING_HEADS_PER_ADDRESS {
            let mut tcp = connect_from(ME, addr);
            tcp.write_all(b"GET / HTTP/1.1\r\nHost: relay\r\n").unwrap();
            slow.push(tcp);
        }
        // Each of them is held, not ended: a read waits.
        slow[0]
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut byte = [0u8; 1];
        let waited = slow[0].read(&mut byte).unwrap_err().kind();
        assert!(
            matches!(waited, ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{adapter:?}: {waited:?}"
        );
        let mut next = connect_from(ME, addr);
        let _ = next.write_all(b"GET / HTTP/1.1\r\n");
        let ended = next.read(&mut byte);
        let still_open =
            |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
        assert!(
            matches!(ended, Ok(0)) || ended.is_err_and(|e| !still_open(&e)),
            "{adapter:?}: the connection past the cap is ended at once, unanswered"
        );
        let (status, _ws) = upgrade(OTHER, addr, "/", &[]);
        assert_eq!(status, 101, "{adapter:?}: another address still upgrades");
        drop(slow);
        running.stop();
    }
}

/// The row of `/proc/net/tcp` for the connection from `local` to `remote`: its `tr` (timer)
/// field, 2 while the keepalive timer is armed on an idle socket.
fn tcp_timer(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => unreachable!("IPv4 loopback only"),
    };
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(5)?.split(':').next()?.parse().ok())
            .flatten()
    })
}

/// A peer that vanishes without a word (a laptop shut, a NAT that forgot the flow) must not hold
/// its socket for ever: every adapter turns TCP keepalive on for each connection it accepts, so
/// the kernel probes an idle one. Read from the kernel's own table of the accepted socket.
#[test]
fn every_adapter_turns_tcp_keepalive_on_for_each_accepted_socket() {
    if std::fs::metadata("/proc/net/tcp").is_err() {
        println!("SKIP: no /proc/net/tcp to read the accepted socket's timer from");
        return;
    }
    for &adapter in Adapter::ALL {
        let (addr, running) =
            relay_on(adapter, RelayOptions::plain("127.0.0.1:0".parse().unwrap()));
        let (status, tcp) = upgrade(ME, addr, "/", &[]);
        assert_eq!(status, 101);
        let client = tcp.local_addr().unwrap();
        let deadline = Instant::now() + PATIENCE;
        let timer = loop {
            let timer = tcp_timer(addr, client);
            if timer == Some(2) || Instant::now() > deadline {
                break timer;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(timer, Some(2), "{adapter:?}: the keepalive timer is armed");
        drop(tcp);
        running.stop();
    }
}

/// An operator starts `weft relay` with an empty TURN secret (by flag, by environment, or by an
/// empty file), or with a secret file every local user may read: it refuses to start, exit 2,
/// saying why and how to fix it.
#[test]
fn weft_relay_refuses_an_empty_turn_secret_and_a_secret_file_others_may_read() {
    let dir = std::env::temp_dir().join(format!("weft-relay-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("turn.secret");
    let run = |args: &[&str], env: Option<(&str, &str)>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
        command
            .args([
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--turn-url",
                "turn:127.0.0.1:3478",
            ])
            .args(args)
            .env_remove("WEFT_TURN_SECRET")
            .env_remove("WEFT_TURN_SECRET_FILE");
        if let Some((k, v)) = env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--turn-secret", ""], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the TURN secret is empty"), "{err}");
    let (code, err) = run(&[], Some(("WEFT_TURN_SECRET", "")));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("secret"), "{err}");

    use std::os::unix::fs::PermissionsExt;
    std::fs::write(&file, "s3cret\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.to_str().unwrap();
    let (code, err) = run(&["--turn-secret-file", path], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("mode 644") && err.contains("chmod 600"),
        "{err}"
    );
    let (code, err) = run(&[], Some(("WEFT_TURN_SECRET_FILE", path)));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&file, "\n").unwrap();
    let (code, err) = run(&["--turn-secret-file", path], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the TURN secret is empty"), "{err}");
    // Both ways at once is a usage error, not a guess.
    let (code, err) = run(&["--turn-secret", "x", "--turn-secret-file", path], None);
    assert_eq!(code, Some(2), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The client address a trusted proxy reports is only what it appends: a relay not told it runs
/// behind one ignores the header, so forged lines change nothing there either.
#[test]
fn without_trust_proxy_forwarded_lines_are_ignored() {
    let (addr, running) = relay_on(
        Adapter::Smol,
        RelayOptions::plain("127.0.0.1:0".parse().unwrap()),
    );
    let mut held = Vec::new();
    for i in 0..MAX_SOCKETS_PER_ADDRESS {
        let forged = format!("X-Forwarded-For: 203.0.113.{i}");
        let (status, tcp) = upgrade(ME, addr, "/", &[forged.as_str()]);
        assert_eq!(status, 101);
        held.push(tcp);
    }
    let (status, _) = upgrade(ME, addr, "/", &["X-Forwarded-For: 198.51.100.1"]);
    assert_eq!(status, 429);
    drop(held);
    running.stop();
}
