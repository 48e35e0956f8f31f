//! Memory per idle connection (issue #43), `cargo bench -p weft-drivers --bench conn_memory`:
//! each server runs as its own `weft` process, the bench opens N idle connections to one face,
//! and the growth of the process's resident set (`VmRSS` in `/proc/PID/status`) divided by N is
//! what one idle connection costs the program. Beside it, the machine's own heap bytes for the
//! same object, measured in this process with a counting allocator (as `size-probe`'s memory
//! probe does), where the server has a machine whose connections can be counted alone.
//!
//! Each face is opened the way a client opens it and then left idle:
//!
//! - `weft relay`: a WebSocket upgrade (plain and `wss://`), and an upgrade on `/peer` (the
//!   always-on node's face, `--node-key`); from many loopback addresses, 30 each, since one
//!   address may hold only `MAX_SOCKETS_PER_ADDRESS` = 32 sockets.
//! - `weft airc serve`: the client face on the Unix socket, on loopback TCP and on WebSocket, each
//!   after `hello` was answered `welcome`; the peer face over TLS, after the handshake (a peer
//!   that has not said hello yet). One uid may hold `MAX_CONNECTIONS_PER_SOURCE` = 512 client
//!   connections, and at most `MAX_WAITING_HELLOS` = 1 024 peers wait for their hello, so the
//!   AIRC rows open 500 and 1 000.
//! - `weft nostr serve`: a WebSocket upgrade (at most its `MAX_CONNECTIONS` = 4 096).
//! - `weft circle serve`: an upgrade on `/member` (at most `MAX_LINKS` = 1 024 links).
//!
//! N is 1 000, and 10 000 where the server's own bound and the file limit allow (the soft
//! `RLIMIT_NOFILE` is raised to the hard one first). A row prints the RSS before and after, the
//! bytes per connection, and the machine's figure. Measurements, not assertions: nothing here
//! fails on a number.

#[path = "../tests/common/tls_ca.rs"]
mod tls_ca;
use tls_ca::Ca;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::server::{Face, Input as AircInput, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::default_provider;
use weft_proto::minca::relay_server::{self, RelayConfig, RelayServer};

/// The `weft` program the rows run: this build's, or the one `WEFT_BIN` names (an older build,
/// for a before-and-after comparison in one sitting).
fn weft() -> String {
    std::env::var("WEFT_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_weft").to_string())
}

/// How long a server may take to start listening.
const START: Duration = Duration::from_secs(60);

/// How long the bench waits after the last connection opened before reading the RSS, so the
/// server has read and answered everything.
const SETTLE: Duration = Duration::from_secs(2);

/// The server's resident set at which a row stops opening connections, so a build that costs
/// far more than the target (an older one, for comparison) cannot take a shared machine's memory.
const RSS_CEILING: u64 = 2 << 30;

/// Sockets opened from one loopback address to a WebSocket server (the relay holds 32 a
/// address).
const PER_ADDRESS: usize = 30;

/// Counts live heap bytes, for the machines' own figures.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counter is
// bookkeeping only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes per idle AIRC client connection (opened, `hello` answered), in the machine alone.
fn airc_machine_bytes(n: usize) -> f64 {
    let now = Timestamp::from_millis(1_790_380_000_000);
    let mut config = ServerConfig::new(Authority::parse("localhost").expect("realm"));
    config.known_namespaces = vec![Namespace::parse("alice").expect("namespace")];
    let mut server = Server::new(config, default_provider(), ChaCha20Rng::seed_from_u64(1));
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let conn = ConnId(i as u64 + 1);
        server.handle(
            now,
            AircInput::Opened {
                conn,
                face: Face::Client,
                namespaces: vec![Namespace::parse("alice").expect("namespace")],
                source: Source::Unknown,
            },
        );
        let bytes = b"{\"t\":\"hello\",\"proto\":\"airc/0.1\",\"role\":\"client\"}\n".to_vec();
        server.handle(now, AircInput::Received { conn, bytes });
        while server.poll().is_some() {}
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(server);
    (after as f64 - before as f64) / n as f64
}

/// Heap bytes per idle Minca relay-server socket, in the machine alone.
fn relay_machine_bytes(n: usize) -> f64 {
    let now = Timestamp::from_millis(1_790_380_000_000);
    let mut relay = RelayServer::new(
        RelayConfig::default(),
        default_provider(),
        ChaCha20Rng::seed_from_u64(2),
    );
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let (conn, addr) = (
            ConnId(i as u64 + 1),
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32)),
        );
        relay.admit(now, addr).expect("admitted");
        relay.handle(now, relay_server::Input::Opened { conn, addr });
        while relay.poll().is_some() {}
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(relay);
    (after as f64 - before as f64) / n as f64
}

/// Raises the soft file limit to the hard one; the limit now.
fn raise_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum {
        limit.current = Some(hard);
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// A fresh owner-only directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-conn-memory-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    weft_drivers::state_dir::prepare_dir(&dir, true).expect("a state directory");
    dir
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .expect("a port")
        .local_addr()
        .expect("its address")
}

/// The server's resident set, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// A server process, killed when dropped.
struct Served {
    child: Child,
    _dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(mut cmd: Command, dir: PathBuf) -> Served {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Served {
        child: cmd.spawn().expect("weft starts"),
        _dir: dir,
    }
}

/// Waits until `ready` holds.
fn wait(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < START, "{what} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_tcp(addr: SocketAddr) {
    wait(&addr.to_string(), || TcpStream::connect(addr).is_ok());
}

/// The loopback address the `i`th connection comes from.
fn source(i: usize) -> IpAddr {
    let a = i / PER_ADDRESS;
    IpAddr::V4(Ipv4Addr::new(127, 1, (a / 250) as u8, (a % 250 + 1) as u8))
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("a socket");
    bind(&fd, &SocketAddr::new(from, 0)).expect("a loopback source");
    connect(&fd, &to).expect("connects");
    let tcp = TcpStream::from(fd);
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    tcp
}

/// Reads until `stream` has sent a whole HTTP head; the head.
fn read_head(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("a response");
        assert_eq!(n, 1, "the server closed during the handshake");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A WebSocket opening handshake on `path`, answered 101.
fn upgrade(stream: &mut (impl Read + Write), host: SocketAddr, path: &str) {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    .expect("sends the upgrade");
    stream.flush().expect("flushes");
    let head = read_head(stream);
    assert!(head.starts_with("HTTP/1.1 101"), "not upgraded: {head}");
}

/// One masked text frame (mask 0, so the payload goes as it is).
fn text_frame(text: &str) -> Vec<u8> {
    let mut f = vec![0x81];
    let n = text.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(text.as_bytes());
    f
}

/// Reads one unmasked server frame; its payload.
fn read_frame(stream: &mut impl Read) -> Vec<u8> {
    let mut h = [0u8; 2];
    stream.read_exact(&mut h).expect("a frame");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            stream.read_exact(&mut l).expect("a length");
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            stream.read_exact(&mut l).expect("a length");
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).expect("a payload");
    payload
}

const HELLO: &str = r#"{"t":"hello","proto":"airc/0.1","role":"client","agent":"conn-memory/1"}"#;

/// Says AIRC hello on a byte stream and reads the welcome line.
fn airc_hello(stream: &mut (impl Read + Write)) {
    stream
        .write_all(format!("{HELLO}\n").as_bytes())
        .expect("hello");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while byte[0] != b'\n' {
        assert_eq!(stream.read(&mut byte).expect("a welcome"), 1, "closed");
        line.push(byte[0]);
    }
    assert!(
        String::from_utf8_lossy(&line).contains("welcome"),
        "{}",
        String::from_utf8_lossy(&line)
    );
}

/// A rustls client trusting `ca_pem`.
fn tls_client(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `to` from `from`, its handshake done.
fn tls_connect(config: &Arc<rustls::ClientConfig>, from: IpAddr, to: SocketAddr) -> Tls {
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let conn = rustls::ClientConnection::new(config.clone(), name).expect("a client");
    let mut tls = rustls::StreamOwned::new(conn, connect_from(from, to));
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).expect("the handshake");
    }
    tls
}

/// What a row holds open: any kind of socket, kept only so that it stays open.
#[expect(dead_code, reason = "the sockets are held open, never read")]
enum Held {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<Tls>),
}

/// One measured row.
struct Row {
    name: &'static str,
    n: usize,
    before: u64,
    after: u64,
    machine: Option<f64>,
}

impl Row {
    fn print(&self) {
        let per = (self.after as f64 - self.before as f64) / self.n as f64;
        let machine = self
            .machine
            .map_or_else(|| "-".to_string(), |m| format!("{m:.0}"));
        println!(
            "| {} | {} | {:.1} MiB | {:.1} MiB | {:.0} | {} |",
            self.name,
            self.n,
            self.before as f64 / 1048576.0,
            self.after as f64 / 1048576.0,
            per,
            machine
        );
    }
}

/// Runs `open` N times against a started server and measures the growth.
fn measure(
    name: &'static str,
    served: &Served,
    n: usize,
    machine: Option<f64>,
    mut open: impl FnMut(usize) -> Held,
) -> Row {
    std::thread::sleep(SETTLE);
    let pid = served.child.id();
    let before = rss(pid);
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        held.push(open(i));
        if i % 100 == 99 && rss(pid) > RSS_CEILING {
            println!(
                "({name}: stopped at {} connections, past {RSS_CEILING} bytes)",
                i + 1
            );
            break;
        }
    }
    std::thread::sleep(SETTLE);
    let after = rss(pid);
    let row = Row {
        name,
        n: held.len(),
        before,
        after,
        machine,
    };
    row.print();
    drop(held);
    row
}

fn relay(n: usize, tls: Option<&Ca>, peer: bool) -> Row {
    let dir = temp_dir("relay");
    let addr = free_port();
    let mut cmd = Command::new(weft());
    cmd.args(["relay", "--listen", &addr.to_string()]);
    if let Some(ca) = tls {
        let files = ca.files(&dir, "localhost");
        cmd.arg("--tls-cert")
            .arg(files.cert.expect("a cert"))
            .arg("--tls-key")
            .arg(files.key.expect("a key"));
    }
    if peer {
        cmd.arg("--node-key")
            .arg(dir.join("node.key"))
            .args(["--host-space", "conn-memory"]);
    }
    let served = spawn(cmd, dir);
    wait_tcp(addr);
    let machine = (!peer).then(|| relay_machine_bytes(n));
    let path = if peer { "/peer" } else { "/" };
    let name = match (tls.is_some(), peer) {
        (false, false) => "weft relay, WebSocket",
        (true, _) => "weft relay, wss://",
        (false, true) => "weft relay, /peer (node socket, before its challenge is answered)",
    };
    let config = tls.map(|ca| tls_client(&ca.pem));
    measure(name, &served, n, machine, |i| match &config {
        Some(config) => {
            let mut s = tls_connect(config, source(i), addr);
            upgrade(&mut s, addr, path);
            Held::Tls(Box::new(s))
        }
        None => {
            let mut s = connect_from(source(i), addr);
            upgrade(&mut s, addr, path);
            Held::Tcp(s)
        }
    })
}

/// `weft airc serve` in a fresh directory with the bench's uid owning `alice`, plus `extra`.
fn airc(extra: &[&str], dir: PathBuf) -> Served {
    let mut cmd = Command::new(weft());
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .args([
            "--namespaces",
            &format!("{}=alice", rustix::process::getuid().as_raw()),
        ])
        .args(extra);
    spawn(cmd, dir)
}

fn airc_unix(n: usize) -> Row {
    let dir = temp_dir("airc-unix");
    let socket = dir.join("airc.sock");
    let served = airc(&[], dir);
    wait("the AIRC socket", || UnixStream::connect(&socket).is_ok());
    let machine = Some(airc_machine_bytes(n));
    measure("weft airc serve, Unix socket", &served, n, machine, |_| {
        let mut s = UnixStream::connect(&socket).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a timeout");
        airc_hello(&mut s);
        Held::Unix(s)
    })
}

fn airc_tcp(n: usize) -> Row {
    let dir = temp_dir("airc-tcp");
    let addr = free_port();
    let served = airc(&["--client-tcp", &addr.to_string()], dir);
    wait_tcp(addr);
    let machine = Some(airc_machine_bytes(n));
    measure("weft airc serve, TCP", &served, n, machine, |_| {
        let mut s = connect_from(IpAddr::V4(Ipv4Addr::LOCALHOST), addr);
        airc_hello(&mut s);
        Held::Tcp(s)
    })
}

fn airc_ws(n: usize) -> Row {
    let dir = temp_dir("airc-ws");
    let addr = free_port();
    let served = airc(&["--client-ws", &addr.to_string()], dir);
    wait_tcp(addr);
    let machine = Some(airc_machine_bytes(n));
    measure("weft airc serve, WebSocket", &served, n, machine, |_| {
        let mut s = connect_from(IpAddr::V4(Ipv4Addr::LOCALHOST), addr);
        upgrade(&mut s, addr, "/");
        s.write_all(&text_frame(HELLO)).expect("hello");
        let welcome = read_frame(&mut s);
        assert!(
            String::from_utf8_lossy(&welcome).contains("welcome"),
            "{}",
            String::from_utf8_lossy(&welcome)
        );
        Held::Tcp(s)
    })
}

fn airc_peer_tls(n: usize, ca: &Ca) -> Row {
    let dir = temp_dir("airc-peer");
    let files = ca.files(&dir, "localhost");
    let addr = free_port();
    let mut cmd = Command::new(weft());
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .args(["--peer-listen", &addr.to_string()])
        .arg("--tls-cert")
        .arg(files.cert.expect("a cert"))
        .arg("--tls-key")
        .arg(files.key.expect("a key"));
    let served = spawn(cmd, dir);
    wait_tcp(addr);
    let config = tls_client(&ca.pem);
    measure(
        "weft airc serve, peer face over TLS (before hello)",
        &served,
        n,
        None,
        |i| Held::Tls(Box::new(tls_connect(&config, source(i), addr))),
    )
}

fn nostr(n: usize) -> Row {
    let dir = temp_dir("nostr");
    let addr = free_port();
    let mut cmd = Command::new(weft());
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(dir.join("data"));
    let served = spawn(cmd, dir);
    wait_tcp(addr);
    measure("weft nostr serve, WebSocket", &served, n, None, |i| {
        let mut s = connect_from(source(i), addr);
        upgrade(&mut s, addr, "/");
        Held::Tcp(s)
    })
}

fn circle(n: usize) -> Row {
    let dir = temp_dir("circle");
    let (listen, member) = (free_port(), free_port());
    let config = format!(
        "listen = \"{listen}\"\nmember_listen = \"{member}\"\ndata_dir = \"{}\"\nkey = \"{}\"\n\
         blobs_dir = \"{}\"\ncontrol_token = \"conn-memory-control-token\"\nmembers = []\n",
        dir.join("data").display(),
        dir.join("circle.key").display(),
        dir.join("blobs").display(),
    );
    let path = dir.join("circle.toml");
    weft_drivers::circle::write_private(&path, &config).expect("the config");
    let mut cmd = Command::new(weft());
    cmd.args(["circle", "serve", "--config"]).arg(&path);
    let served = spawn(cmd, dir);
    wait_tcp(member);
    measure(
        "weft circle serve, /member (before its proof)",
        &served,
        n,
        None,
        |i| {
            let mut s = connect_from(source(i), member);
            upgrade(&mut s, member, "/member");
            Held::Tcp(s)
        },
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a name after it picks the rows whose name contains it.
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let pick = |what: &str| only.as_deref().is_none_or(|o| what.contains(o));
    let files = raise_file_limit();
    // The bench holds one descriptor per connection, and a few spare.
    // `CONN_MEMORY_MAX` caps N (a quick run, or an older build that would hit the ceiling).
    let cap: usize = std::env::var("CONN_MEMORY_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let big = (files >= 10_100 && cap >= 10_000).then_some(10_000);
    println!("file limit {files}; 10 000 connections: {}", big.is_some());
    println!(
        "| server, face | connections | RSS before | RSS after | RSS bytes per connection | machine heap bytes per connection |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let ca = Ca::new();
    let relay_sizes: Vec<usize> = [Some(1_000), big].into_iter().flatten().collect();
    if pick("relay") {
        for &n in &relay_sizes {
            relay(n, None, false);
        }
        relay(1_000, Some(&ca), false);
        relay(1_000, None, true);
    }
    if pick("airc") {
        airc_unix(500);
        airc_tcp(500);
        airc_ws(500);
        airc_peer_tls(1_000, &ca);
    }
    if pick("nostr") {
        nostr(1_000);
        if big.is_some() {
            nostr(4_000);
        }
    }
    if pick("circle") {
        circle(1_000);
    }
}
