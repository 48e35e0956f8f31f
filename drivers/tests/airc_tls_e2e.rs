//! The AIRC peer face on real sockets (§8.3, §8.4, §9): two realm servers on loopback, each
//! driven by the smol adapter (and, for the link itself, by the tokio and the blocking adapter
//! too), linked over TLS or QUIC with certificates made here, signing with keys made on first
//! start; clients on Unix sockets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

#[path = "common/adapter.rs"]
mod adapter;
#[path = "common/tls_ca.rs"]
mod tls_ca;
use adapter::{Adapter, Served};
use tls_ca::Ca;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::config::TlsFiles;
use weft_drivers::airc::peer::{StaticPeer, Transport};
use weft_drivers::airc::realm_key::{self, KEY_FILE};
use weft_drivers::airc::serve::{ServeConfig, open};
use weft_drivers::host::Listener;
use weft_proto::airc::address::Authority;
use weft_proto::airc::frame::{AckStatus, Msg};
use weft_proto::crypto::{CryptoProvider, default_provider, sigstring};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-airc-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A server refuses a state directory other users can read (weft_drivers::state_dir).
    weft_drivers::state_dir::prepare_dir(&dir, true).unwrap();
    dir
}

fn realm(name: &str) -> Authority {
    Authority::parse(name).unwrap()
}

/// A realm's public key, from the key file its server uses (made here if absent, as the server
/// would on first start).
fn public_key(dir: &Path) -> [u8; 32] {
    let seed = realm_key::load_or_create(&dir.join(KEY_FILE), &mut weft_drivers::os_rng()).unwrap();
    default_provider().ed25519_public_key(&seed)
}

/// A realm `name` in `dir` with a TLS certificate for `name` from `ca`.
fn config(dir: &Path, name: &str, ca: &Ca) -> ServeConfig {
    let mut c = ServeConfig::local(dir, "me").unwrap();
    c.realm = realm(name);
    c.tls = Some(ca.files(dir, name));
    c
}

/// A realm server running on some adapter.
struct Server {
    running: adapter::Running<()>,
    socket: PathBuf,
    /// The peer face's address (TLS or QUIC), when it has one.
    peer: Option<SocketAddr>,
}

impl Server {
    fn start(config: ServeConfig) -> Self {
        Self::start_on(config, Adapter::Smol)
    }

    fn start_on(config: ServeConfig, adapter: Adapter) -> Self {
        let socket = config.client_socket.clone();
        let (ready_tx, ready_rx) = mpsc::channel();
        let running = adapter.spawn(
            move || {
                let (host, listeners, commands) = open(&config)?;
                let peer = listeners.iter().find_map(|l| match l {
                    Listener::Tls(..) | Listener::Quic(..) | Listener::Tcp(_) => {
                        l.local_addr().ok().flatten()
                    }
                    _ => None,
                });
                ready_tx.send(peer).unwrap();
                Ok(Served {
                    commands: Some(commands),
                    ..Served::new(host, listeners)
                })
            },
            drop,
        );
        let peer = ready_rx.recv().expect("the server starts");
        Self {
            running,
            socket,
            peer,
        }
    }

    fn stop(self) {
        self.running.stop();
    }
}

/// Binds `me/inbox` on `server` and hands every message it receives to the returned channel.
fn listen(server: &Server) -> mpsc::Receiver<Msg> {
    let mut listener = Client::connect(&server.socket).unwrap();
    listener.bind(vec!["me/inbox".into()]).unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        loop {
            let mut got = None;
            if listener.receive(|m| got = Some(m.clone())).is_err() {
                return;
            }
            if tx.send(got.unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

fn send(server: &Server, to: &str, body: &str) -> weft_proto::airc::frame::Ack {
    let mut sender = Client::connect(&server.socket).unwrap();
    let id = message_id(&mut weft_drivers::os_rng());
    sender
        .message(new_message(id, "cli", to, body, None))
        .unwrap()
}

/// Two realms: `b.test` listening on its peer face (over `transport`), and `a.test` with a
/// static entry for it, each knowing the other's key.
struct Pair {
    a: Server,
    b: Server,
    /// How `a.test` was started, to start it again.
    a_config: ServeConfig,
    /// `a.test`'s public key.
    key_a: [u8; 32],
    /// The CA both certificates come from.
    ca: Ca,
}

/// Starts a [`Pair`]; `a.test` trusts `a_trust` when given, else the CA of `b.test`'s
/// certificate.
fn pair(name: &str, transport: Transport, a_trust: Option<&Ca>) -> Pair {
    pair_on(name, transport, a_trust, Adapter::Smol)
}

/// [`pair`], both servers on `adapter`.
fn pair_on(name: &str, transport: Transport, a_trust: Option<&Ca>, adapter: Adapter) -> Pair {
    let ca = Ca::new();
    let (dir_a, dir_b) = (
        temp_dir(&format!("{name}-a")),
        temp_dir(&format!("{name}-b")),
    );
    let (key_a, key_b) = (public_key(&dir_a), public_key(&dir_b));

    let mut b = config(&dir_b, "b.test", &ca);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    match transport {
        Transport::Quic => b.peer.quic = Some(any),
        _ => b.peer.listen = Some(any),
    }
    b.known_keys = BTreeMap::from([(realm("a.test"), vec![key_a])]);
    let b = Server::start_on(b, adapter);

    let mut a = config(&dir_a, "a.test", &ca);
    if let Some(other) = a_trust {
        std::fs::write(dir_a.join("ca.pem"), &other.pem).unwrap();
    }
    a.peer.statics = BTreeMap::from([(
        realm("b.test"),
        StaticPeer {
            address: b.peer.expect("b.test has a peer face"),
            transport,
            name: None,
        },
    )]);
    a.known_keys = BTreeMap::from([(realm("b.test"), vec![key_b])]);
    Pair {
        a: Server::start_on(a.clone(), adapter),
        b,
        a_config: a,
        key_a,
        ca,
    }
}

fn assert_signed_by(m: &Msg, key: &[u8; 32]) {
    let sig = m
        .hdr
        .as_ref()
        .and_then(|h| h.get("sig"))
        .and_then(|s| s.as_str())
        .unwrap_or_else(|| panic!("no signature on {m:?}"));
    let kid = sigstring::kid(default_provider(), key);
    assert!(sig.starts_with(&format!("ed25519:{kid}:")), "{sig}");
}

/// Two realms on `adapter` over `transport`: a message from `a.test` is acked delivered by
/// `b.test`, which verified its signature.
fn a_signed_message_crosses(name: &str, transport: Transport, adapter: Adapter) {
    let p = pair_on(name, transport, None, adapter);
    let inbox = listen(&p.b);
    let body = format!("across {name}");
    let ack = send(&p.a, "//b.test/me/inbox", &body);
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = inbox.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (m.from.as_str(), m.body.as_str()),
        ("airc://a.test/me/cli", body.as_str())
    );
    assert_signed_by(&m, &p.key_a);
    p.a.stop();
    p.b.stop();
}

#[cfg(feature = "tokio")]
#[test]
fn two_realms_on_the_tokio_adapter_link_over_tls_and_deliver_a_signed_message() {
    a_signed_message_crosses("tokio-tls", Transport::Tls, Adapter::Tokio);
}

#[cfg(feature = "tokio")]
#[test]
fn two_realms_on_the_tokio_adapter_link_over_quic_and_deliver_a_signed_message() {
    a_signed_message_crosses("tokio-quic", Transport::Quic, Adapter::Tokio);
}

#[test]
fn two_realms_on_the_blocking_adapter_link_over_tls_and_deliver_a_signed_message() {
    a_signed_message_crosses("blocking-tls", Transport::Tls, Adapter::Blocking);
}

#[test]
fn two_realms_on_the_blocking_adapter_link_over_quic_and_deliver_a_signed_message() {
    a_signed_message_crosses("blocking-quic", Transport::Quic, Adapter::Blocking);
}

#[test]
fn two_realms_over_tls_deliver_a_signed_message_and_its_ack() {
    let p = pair("tls", Transport::Tls, None);
    let inbox = listen(&p.b);
    let ack = send(&p.a, "//b.test/me/inbox", "across tls");
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = inbox.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (m.from.as_str(), m.body.as_str()),
        ("airc://a.test/me/cli", "across tls")
    );
    // b.test acked it, so it verified this signature with a.test's key (§9.3).
    assert_signed_by(&m, &p.key_a);
    p.a.stop();
    p.b.stop();
}

#[test]
fn two_realms_over_quic_deliver_a_signed_message_and_its_ack() {
    let p = pair("quic", Transport::Quic, None);
    let inbox = listen(&p.b);
    let ack = send(&p.a, "//b.test/me/inbox", "across quic");
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = inbox.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (m.from.as_str(), m.body.as_str()),
        ("airc://a.test/me/cli", "across quic")
    );
    assert_signed_by(&m, &p.key_a);
    p.a.stop();
    p.b.stop();
}

#[test]
fn a_dialler_that_does_not_trust_the_certificate_fails_the_link_and_keeps_the_message() {
    let stranger = Ca::new();
    let p = pair("untrusted", Transport::Tls, Some(&stranger));
    let inbox = listen(&p.b);
    let ack = send(&p.a, "//b.test/me/inbox", "kept");
    assert_eq!(
        (ack.status, ack.code.as_deref()),
        (AckStatus::Queued, Some("authority_unreachable")),
        "{ack:?}"
    );
    assert!(
        inbox.recv_timeout(Duration::from_millis(500)).is_err(),
        "nothing crosses a link whose certificate did not verify"
    );

    // The same realm, restarted trusting b.test's CA: the next message opens a link, and the
    // spooled one crosses it too.
    p.a.stop();
    let trust = p.a_config.tls.as_ref().unwrap().trust.clone().unwrap();
    std::fs::write(trust, &p.ca.pem).unwrap();
    let a = Server::start(p.a_config.clone());
    let ack = send(&a, "//b.test/me/inbox", "next");
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let mut bodies: Vec<String> = (0..2)
        .map(|_| inbox.recv_timeout(Duration::from_secs(30)).unwrap().body)
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["kept", "next"]);
    a.stop();
    p.b.stop();
}

#[test]
fn the_realm_key_is_made_on_first_start_owner_only_and_kept_across_restarts() {
    let dir = temp_dir("key");
    let server = Server::start(ServeConfig::local(&dir, "me").unwrap());
    server.stop();
    let path = dir.join(KEY_FILE);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let first = std::fs::read(&path).unwrap();
    let server = Server::start(ServeConfig::local(&dir, "me").unwrap());
    server.stop();
    assert_eq!(std::fs::read(&path).unwrap(), first);
}

/// A TLS-terminating proxy on loopback presenting `files`' certificate, forwarding each
/// connection's plaintext to `upstream`: the proxy §8.3 lets stand in front of a server.
fn tls_terminating_proxy(files: &TlsFiles, upstream: SocketAddr) -> SocketAddr {
    use std::io::{ErrorKind, Read, Write};
    let config = weft_drivers::tls::TlsServer::from_files(
        files.cert.as_ref().unwrap(),
        files.key.as_ref().unwrap(),
    )
    .unwrap()
    .config();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for tcp in listener.incoming().map_while(Result::ok) {
            let config = config.clone();
            thread::spawn(move || {
                let mut plain = std::net::TcpStream::connect(upstream).unwrap();
                // One thread turns both ways: each read waits a moment, then the other side's.
                let step = Some(Duration::from_millis(5));
                tcp.set_read_timeout(step).unwrap();
                plain.set_read_timeout(step).unwrap();
                let session = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(session, tcp);
                let idle = |e: &std::io::Error| {
                    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                };
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match tls.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => plain.write_all(&buf[..n]).unwrap(),
                        Err(e) if idle(&e) => {}
                        Err(_) => break,
                    }
                    match plain.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).and_then(|()| tls.flush()).is_err() {
                                break;
                            }
                        }
                        Err(e) if idle(&e) => {}
                        Err(_) => break,
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_peer_face_on_plain_tcp_behind_a_tls_terminating_proxy_receives_a_verified_link() {
    let ca = Ca::new();
    let (dir_a, dir_b) = (temp_dir("proxy-a"), temp_dir("proxy-b"));
    let (key_a, key_b) = (public_key(&dir_a), public_key(&dir_b));

    // b.test serves its peer face on plain TCP: its certificate is the proxy's.
    let mut b = ServeConfig::local(&dir_b, "me").unwrap();
    b.realm = realm("b.test");
    b.peer.listen = Some("127.0.0.1:0".parse().unwrap());
    b.known_keys = BTreeMap::from([(realm("a.test"), vec![key_a])]);
    let b = Server::start(b);
    let proxy = tls_terminating_proxy(&ca.files(&dir_b, "b.test"), b.peer.unwrap());

    // a.test dials the proxy over TLS and verifies the certificate for b.test.
    let mut a = config(&dir_a, "a.test", &ca);
    a.peer.statics = BTreeMap::from([(
        realm("b.test"),
        StaticPeer {
            address: proxy,
            transport: Transport::Tls,
            name: None,
        },
    )]);
    a.known_keys = BTreeMap::from([(realm("b.test"), vec![key_b])]);
    let a = Server::start(a);

    let inbox = listen(&b);
    let ack = send(&a, "//b.test/me/inbox", "through the proxy");
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = inbox.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(m.body, "through the proxy");
    assert_signed_by(&m, &key_a);
    a.stop();
    b.stop();
}

/// A peer that opens a QUIC connection to the peer face and then opens stream after stream, or
/// unidirectional ones, or writes past what the server has read, gets credit for one
/// bidirectional stream of one frame's window and nothing more (`weft_drivers::tls::transport`):
/// the rest waits on flow control instead of costing the server memory.
#[test]
fn a_quic_peer_opening_many_streams_gets_credit_for_one() {
    use weft_drivers::tls::{QUIC_RECEIVE_WINDOW, TlsClient, TlsServer};
    let dir = temp_dir("quic-streams");
    let files = Ca::new().files(&dir, "b.test");
    let server = TlsServer::from_files(files.cert.as_ref().unwrap(), files.key.as_ref().unwrap())
        .unwrap()
        .quic()
        .unwrap();
    let client = TlsClient::from_file(files.trust.as_ref().unwrap())
        .unwrap()
        .quic()
        .unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        std::sync::Arc::new(quinn::SmolRuntime),
    )
    .unwrap();
    let addr = endpoint.local_addr().unwrap();
    let waited = |d: Duration| async move {
        smol::Timer::after(d).await;
    };
    smol::block_on(async {
        // The server side: takes the connection and its first stream, then reads nothing.
        let accepting = smol::spawn({
            let endpoint = endpoint.clone();
            async move {
                let connection = endpoint.accept().await.unwrap().await.unwrap();
                let first = connection.accept_bi().await.unwrap();
                (connection, first)
            }
        });
        let mut dialler = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        dialler.set_default_client_config(client);
        let connection = dialler.connect(addr, "b.test").unwrap().await.unwrap();
        let (mut send, _recv) = connection.open_bi().await.unwrap();
        send.write_all(b"{\"t\":\"hello\"}\n").await.unwrap();
        let _held = accepting.await;
        let second = smol::future::or(async { Some(connection.open_bi().await) }, async {
            waited(Duration::from_millis(500)).await;
            None
        })
        .await;
        assert!(second.is_none(), "no credit for a second stream");
        let uni = smol::future::or(async { Some(connection.open_uni().await) }, async {
            waited(Duration::from_millis(500)).await;
            None
        })
        .await;
        assert!(uni.is_none(), "no credit for a unidirectional stream");
        // Past one frame's window, unread, the writer waits.
        let big = vec![b'x'; 2 * QUIC_RECEIVE_WINDOW as usize];
        let wrote = smol::future::or(async { Some(send.write_all(&big).await) }, async {
            waited(Duration::from_millis(500)).await;
            None
        })
        .await;
        assert!(wrote.is_none(), "two windows' worth is not taken unread");
    });
}
