//! AIRC discovery on real DNS (§8.1–§8.2): two realm servers in this process, realm b.test found
//! only through SRV and A records, and each realm's key only through its `_airc.<realm>` TXT
//! record, all served by a DNS server this test runs on loopback. A signed message crosses and
//! its ack comes back.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
#[path = "common/tls_ca.rs"]
mod tls_ca;
use tls_ca::Ca;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::config::TlsFiles;
use weft_drivers::airc::realm_key;
use weft_drivers::airc::serve::{ServeConfig, serve};
use weft_proto::airc::address::Authority;
use weft_proto::airc::frame::AckStatus;
use weft_proto::codec::base64;
use weft_proto::crypto::{CryptoProvider, Ed25519Seed, default_provider};

/// Answers from `zone` (lower-case name without the final dot, record type); anything else is
/// NXDOMAIN. Runs until the process ends.
fn dns_server(zone: BTreeMap<(String, RecordType), Vec<RData>>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut answer = Message::response(query.metadata.id, OpCode::Query);
            answer.metadata.recursion_desired = query.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.metadata.authoritative = true;
            answer.add_queries(query.queries.clone());
            let mut found = false;
            for q in &query.queries {
                let name = q.name().to_ascii().trim_end_matches('.').to_lowercase();
                if let Some(data) = zone.get(&(name, q.query_type())) {
                    found = true;
                    for d in data {
                        answer.add_answer(Record::from_rdata(q.name().clone(), 300, d.clone()));
                    }
                }
            }
            if !found {
                answer.metadata.response_code = ResponseCode::NXDomain;
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), from);
        }
    });
    at
}

struct Running {
    stop: smol::channel::Sender<()>,
    thread: Option<thread::JoinHandle<std::io::Result<()>>>,
    socket: PathBuf,
}

impl Running {
    fn start(config: ServeConfig) -> Self {
        let socket = config.client_socket.clone();
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread =
            thread::spawn(move || serve(config, stopped, move || ready_tx.send(()).unwrap()));
        ready_rx.recv().expect("the server starts");
        Self {
            stop,
            thread: Some(thread),
            socket,
        }
    }

    fn stop(mut self) {
        self.stop.send_blocking(()).unwrap();
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-airc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A server refuses a state directory other users can read (weft_drivers::state_dir).
    weft_drivers::state_dir::prepare_dir(&dir, true).unwrap();
    dir
}

/// A realm in `dir` signing with the key `[key; 32]`, asking `dns`, and trusting `ca` for the
/// peers it dials.
fn realm(dir: &Path, name: &str, key: u8, dns: SocketAddr, ca: &Ca) -> ServeConfig {
    let mut c = ServeConfig::local(dir, "me").unwrap();
    c.realm = Authority::parse(name).unwrap();
    let key_file = dir.join("realm.key");
    std::fs::write(
        &key_file,
        realm_key::to_pem(&Ed25519Seed::from_bytes([key; 32])),
    )
    .unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.signing_key = Some(key_file);
    c.nameserver = Some(dns);
    let trust = dir.join("ca.pem");
    std::fs::write(&trust, &ca.pem).unwrap();
    c.tls = Some(TlsFiles {
        trust: Some(trust),
        ..TlsFiles::default()
    });
    c
}

fn key_record(key: u8) -> RData {
    let public = default_provider().ed25519_public_key(&Ed25519Seed::from_bytes([key; 32]));
    let text = format!("v=airc1 k=ed25519 p={}", base64::encode(&public));
    RData::TXT(TXT::new(vec![text]))
}

/// A free loopback TCP port for b.test's peer face.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_realm_found_only_through_srv_and_txt_receives_a_signed_message() {
    let peer_port = free_port();
    let name = |n: &str| Name::from_ascii(n).unwrap();
    let zone = BTreeMap::from([
        (
            ("_airc._tcp.b.test".to_string(), RecordType::SRV),
            vec![RData::SRV(SRV::new(0, 10, peer_port, name("peer.b.test.")))],
        ),
        (
            ("peer.b.test".to_string(), RecordType::A),
            vec![RData::A(A(Ipv4Addr::LOCALHOST))],
        ),
        (
            ("_airc.a.test".to_string(), RecordType::TXT),
            vec![
                RData::TXT(TXT::new(vec!["v=spf1 -all".into()])),
                key_record(1),
            ],
        ),
        (
            ("_airc.b.test".to_string(), RecordType::TXT),
            vec![key_record(2)],
        ),
    ]);
    let dns = dns_server(zone);

    // b.test's peer face serves TLS for the host its SRV record names (§8.3).
    let ca = Ca::new();
    let dir_b = temp_dir("dns-b");
    let mut b = realm(&dir_b, "b.test", 2, dns, &ca);
    b.peer.listen = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, peer_port)));
    b.tls = Some(ca.files(&dir_b, "peer.b.test"));
    let b = Running::start(b);
    let dir_a = temp_dir("dns-a");
    let a = Running::start(realm(&dir_a, "a.test", 1, dns, &ca));

    let mut listener = Client::connect(&b.socket).unwrap();
    listener.bind(vec!["me/inbox".into()]).unwrap();
    let (got_tx, got_rx) = mpsc::channel();
    let reader = thread::spawn(move || listener.receive(|m| got_tx.send(m.clone()).unwrap()));

    let mut sender = Client::connect(&a.socket).unwrap();
    let id = message_id(&mut weft_drivers::os_rng());
    let ack = sender
        .message(new_message(
            id.clone(),
            "cli",
            "//b.test/me/inbox",
            "found by DNS",
            None,
        ))
        .unwrap();
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = got_rx.recv().unwrap();
    assert_eq!(m.id, id);
    assert_eq!(m.from, "airc://a.test/me/cli");
    assert_eq!(m.body, "found by DNS");
    assert!(
        m.sigstrings().iter().any(|s| s.starts_with("ed25519:")),
        "signed by a.test, verified by b.test with the key from TXT: {m:?}"
    );
    reader.join().unwrap().unwrap();
    a.stop();
    b.stop();
}
