//! The same Minca run over each runtime adapter (smol, tokio, blocking): `weft relay`'s machine
//! on real loopback sockets through the WebSocket layer, and two relay clients on the same
//! adapter, each a host of its own, that join one room; one publishes, the other hears the blob
//! (Minca 04 Network §1.1, §1.4, §2.1). Then `wss://`: a client dialling through a TLS front
//! trusted by a private authority hears a client on `ws://`, and one that trusts only the default
//! roots fails its dial.

#[path = "common/adapter.rs"]
mod adapter;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use adapter::{Adapter, Running, Served};
use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_drivers::host::{Commander, Endpoint, Listener};
use weft_drivers::minca::relay::{RelayHost, RelayOptions, relay_host};
use weft_drivers::minca::relay_client::{client_config, node_host};
use weft_drivers::ws::{WsConfig, WsInput, WsStats};
use weft_proto::crypto::default_provider;
use weft_proto::minca::relay_client::{ClientConfig, Input, Output, RelayClient, RelayState};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic};

const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

type ClientInput = WsInput<weft_drivers::minca::relay_client::Dial, Input>;

/// A relay client on adapter `A`: its commander, and what it delivers.
struct Client {
    commands: Commander<ClientInput>,
    heard: mpsc::Receiver<Output>,
    /// Stops the client's host and hands back what its WebSocket layer counted.
    running: Box<dyn FnOnce() -> WsStats>,
}

impl Client {
    fn start(adapter: Adapter, relay: &RelayUrl, seed: u64) -> Self {
        Self::start_with(adapter, relay, seed, client_config())
    }

    fn start_with(adapter: Adapter, relay: &RelayUrl, seed: u64, ws: WsConfig) -> Self {
        let (commander, commands) = weft_drivers::host::commands().unwrap();
        let (heard_tx, heard) = mpsc::channel();
        let config = ClientConfig {
            relays: vec![relay.clone()],
        };
        let running = adapter.spawn(
            move || {
                let client =
                    RelayClient::new(config, default_provider(), ChaCha20Rng::seed_from_u64(seed));
                let host = node_host(client, ws, move |o| {
                    let _ = heard_tx.send(o);
                });
                Ok(Served {
                    commands: Some(commands),
                    ..Served::new(host, Vec::new())
                })
            },
            |host| host.machine().stats(),
        );
        Self {
            commands: commander,
            heard,
            running: Box::new(move || running.stop()),
        }
    }

    fn send(&self, input: Input) {
        self.commands.send(WsInput::App(input)).unwrap();
    }

    /// Waits up to `within` for a delivery `pick` accepts.
    fn hear<T>(&self, within: Duration, mut pick: impl FnMut(Output) -> Option<T>) -> Option<T> {
        let end = Instant::now() + within;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.heard.recv_timeout(left) {
                Ok(o) => {
                    if let Some(t) = pick(o) {
                        return Some(t);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }
}

/// `weft relay`'s host on `adapter`, listening on an ephemeral loopback port: the host, and
/// its address.
fn start_relay(adapter: Adapter) -> (Running<RelayHost>, SocketAddr) {
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap())).unwrap();
    let Endpoint::Tcp(addr) = listener.endpoint().unwrap() else {
        unreachable!("a TCP listener has a TCP address")
    };
    let options = RelayOptions::plain(addr);
    (
        adapter.spawn(
            move || Ok(Served::new(relay_host(&options), vec![listener])),
            |host| host,
        ),
        addr,
    )
}

/// Each client joins `topic` and hears its relay reachable within 10 s.
fn join(clients: &[&Client], topic: &Topic) {
    for client in clients {
        client.send(Input::Join {
            topic: topic.clone(),
            relays: Vec::new(),
        });
        let reachable = client.hear(Duration::from_secs(10), |o| {
            matches!(o, Output::Reachable(true)).then_some(())
        });
        assert!(reachable.is_some(), "the relay answers within 10 s");
    }
}

/// `publisher` publishes `blob` with ttl 0, which reaches watchers only: it repeats until
/// `watcher` hears a blob (its watch may still be in flight on a slow machine), at most 50
/// times; what was heard, with its topic.
fn publish_until_heard(
    publisher: &Client,
    watcher: &Client,
    topic: &Topic,
    blob: &Blob,
) -> Option<(Topic, Blob)> {
    for _ in 0..50 {
        publisher.send(Input::Publish {
            topic: topic.clone(),
            blob: blob.clone(),
        });
        let got = watcher.hear(Duration::from_millis(200), |o| match o {
            Output::Blob { topic, blob, .. } => Some((topic, blob)),
            _ => None,
        });
        if got.is_some() {
            return got;
        }
    }
    None
}

/// The scenario every adapter must pass.
fn a_blob_published_in_a_room_reaches_the_other_client(adapter: Adapter) {
    let (relay, addr) = start_relay(adapter);
    let url = RelayUrl::parse(&format!("ws://{addr}/")).unwrap();
    let topic = Topic::parse(TOPIC).unwrap();

    let watcher = Client::start(adapter, &url, 1);
    let publisher = Client::start(adapter, &url, 2);
    join(&[&watcher, &publisher], &topic);

    // The watcher's watch went out on open; the publisher repeats until it is heard.
    let blob = Blob::parse("AZ3k").unwrap();
    let got = publish_until_heard(&publisher, &watcher, &topic, &blob);
    assert_eq!(got, Some((topic.clone(), blob)));

    (publisher.running)();
    (watcher.running)();
    let relay = relay.stop();
    let stats = relay.machine().machine().server.stats();
    assert!(stats.delivered >= 1, "{stats:?}");
    assert!(relay.machine().stats().accepted >= 2);
}

#[test]
fn a_blob_published_in_a_room_reaches_the_other_client_over_the_smol_adapter() {
    a_blob_published_in_a_room_reaches_the_other_client(Adapter::Smol);
}

#[cfg(feature = "tokio")]
#[test]
fn a_blob_published_in_a_room_reaches_the_other_client_over_the_tokio_adapter() {
    a_blob_published_in_a_room_reaches_the_other_client(Adapter::Tokio);
}

#[test]
fn a_blob_published_in_a_room_reaches_the_other_client_over_the_blocking_adapter() {
    a_blob_published_in_a_room_reaches_the_other_client(Adapter::Blocking);
}

/// A test certificate authority and a certificate it issued for 127.0.0.1, with its key.
struct Pki {
    ca_pem: String,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        chain: vec![leaf.der().clone()],
        key: rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
    }
}

/// A TLS front for `relay` on an ephemeral loopback port, the way a relay is deployed behind a
/// terminating proxy: each connection's TLS is ended here and its bytes go on to the relay.
fn tls_front(relay: SocketAddr, pki: &Pki) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), pki.key.clone_key())
        .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let config = config.clone();
            thread::spawn(move || splice(client, relay, config));
        }
    });
    addr
}

/// Moves bytes between a TLS client and the relay until either side ends.
fn splice(mut client: TcpStream, relay: SocketAddr, config: Arc<rustls::ServerConfig>) {
    let Ok(mut back) = TcpStream::connect(relay) else {
        return;
    };
    let Ok(mut tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let tick = Some(Duration::from_millis(2));
    if client.set_read_timeout(tick).is_err() || back.set_read_timeout(tick).is_err() {
        return;
    }
    let quiet = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tls.read_tls(&mut client) {
            Ok(0) => return,
            Ok(_) => {
                if tls.process_new_packets().is_err() {
                    let _ = tls.write_tls(&mut client);
                    return;
                }
            }
            Err(e) if quiet(&e) => {}
            Err(_) => return,
        }
        loop {
            match tls.reader().read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if back.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        match back.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tls.writer().write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if quiet(&e) => {}
            Err(_) => return,
        }
        while tls.wants_write() {
            if tls.write_tls(&mut client).is_err() {
                return;
            }
        }
    }
}

#[test]
fn a_client_dialling_wss_through_a_tls_front_hears_a_blob_from_a_client_on_ws() {
    let (relay, addr) = start_relay(Adapter::Blocking);
    let pki = pki();
    let front = tls_front(addr, &pki);
    let ca_file = std::env::temp_dir().join(format!("weft-ws-ca-{}.pem", std::process::id()));
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let trusting = client_config().with_ca_file(&ca_file).unwrap();

    let topic = Topic::parse(TOPIC).unwrap();
    let secure = RelayUrl::parse(&format!("wss://{front}/")).unwrap();
    let plain = RelayUrl::parse(&format!("ws://{addr}/")).unwrap();
    let watcher = Client::start_with(Adapter::Blocking, &secure, 3, trusting);
    let publisher = Client::start(Adapter::Blocking, &plain, 4);
    join(&[&watcher, &publisher], &topic);
    let blob = Blob::parse("AQID").unwrap();
    let got = publish_until_heard(&publisher, &watcher, &topic, &blob);
    assert_eq!(got.map(|(_, blob)| blob), Some(blob));
    (publisher.running)();
    let stats = (watcher.running)();
    assert_eq!(stats.handshakes_failed, 0, "{stats:?}");
    let _ = std::fs::remove_file(&ca_file);
    relay.stop();
}

#[test]
fn a_wss_dial_to_a_certificate_no_trusted_root_vouches_for_fails_and_is_never_reachable() {
    let (relay, addr) = start_relay(Adapter::Blocking);
    let front = tls_front(addr, &pki());
    let secure = RelayUrl::parse(&format!("wss://{front}/")).unwrap();
    // The default roots (Mozilla's) do not include the test authority.
    let client = Client::start(Adapter::Blocking, &secure, 5);
    client.send(Input::Join {
        topic: Topic::parse(TOPIC).unwrap(),
        relays: Vec::new(),
    });
    let failed = client.hear(Duration::from_secs(10), |o| match o {
        Output::Reachable(true) => panic!("reachable through an untrusted certificate"),
        Output::RelayState {
            state: RelayState::Waiting { failures, .. },
            ..
        } if failures >= 1 => Some(()),
        _ => None,
    });
    assert!(failed.is_some(), "the dial fails within 10 s");
    let stats = (client.running)();
    assert!(stats.handshakes_failed >= 1, "{stats:?}");
    let relay = relay.stop();
    assert_eq!(relay.machine().stats().accepted, 0);
}
