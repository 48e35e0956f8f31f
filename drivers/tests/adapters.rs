//! The same AIRC end-to-end run over each runtime adapter (smol, tokio, blocking): a realm
//! server on real loopback sockets (its client face on a Unix socket and on TCP), two clients, a
//! message delivered and acked, a TCP peer proven to hold no namespace, a protocol violation
//! answered and then closed on the wire, and a restart after which a queued message is still
//! there.

#[path = "common/adapter.rs"]
mod adapter;
mod common;

use adapter::{Adapter, Running, Served};
use common::tcp_welcome_namespaces;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::serve::{ServeConfig, open};
use weft_drivers::host::{Endpoint, Listener};
use weft_proto::airc::frame::AckStatus;
use weft_proto::airc::framing::FrameDecoder;

/// A realm server running on some adapter, and where it listens.
struct Server {
    running: Running<()>,
    socket: PathBuf,
    tcp: SocketAddr,
}

impl Server {
    /// A realm server on `dir`'s data on `adapter` (its store opened on the server's thread):
    /// its client face on a Unix socket and on TCP on an ephemeral loopback port.
    fn start(adapter: Adapter, dir: &Path) -> Self {
        let config = ServeConfig::local(dir, "me").unwrap();
        let socket = config.client_socket.clone();
        let (ready, bound) = mpsc::channel();
        let running = adapter.spawn(
            move || {
                let (host, mut listeners, commands) = open(&config)?;
                let tcp = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap()))?;
                let Endpoint::Tcp(addr) = tcp.endpoint()? else {
                    unreachable!("a TCP listener has a TCP address")
                };
                ready.send(addr).unwrap();
                listeners.push(tcp);
                Ok(Served {
                    commands: Some(commands),
                    ..Served::new(host, listeners)
                })
            },
            drop,
        );
        let tcp = bound.recv().expect("the server starts");
        Self {
            running,
            socket,
            tcp,
        }
    }

    fn stop(self) {
        self.running.stop();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-adapters-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A server refuses a state directory other users can read (weft_drivers::state_dir).
    weft_drivers::state_dir::prepare_dir(&dir, true).unwrap();
    dir
}

/// Sends a line that is not a frame over TCP; returns the frame type the server answered with and
/// whether the server then closed the connection (end of file).
fn tcp_garbage_answer(addr: SocketAddr) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(b"not a frame\n").unwrap();
    let mut decoder = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    let mut answer = None;
    loop {
        if answer.is_none()
            && let Some(frame) = decoder.next()
        {
            answer = Some(frame.unwrap().t().to_string());
            continue;
        }
        match s.read(&mut buf) {
            Ok(0) => return (answer.unwrap_or_default(), true),
            Ok(n) => decoder.push(&buf[..n]),
            Err(_) => return (answer.unwrap_or_default(), false),
        }
    }
}

/// The scenario every adapter must pass.
fn airc_end_to_end(name: &str, adapter: Adapter) {
    let dir = temp_dir(name);
    let server = Server::start(adapter, &dir);

    // A TCP peer proves no uid: it is welcomed with no namespace (AIRC §5).
    let ns = tcp_welcome_namespaces(server.tcp);
    assert!(ns.unwrap_or_default().is_empty(), "TCP proves no namespace");
    // A protocol violation: the machine sends an error and closes; the adapter writes the error
    // before it closes the socket.
    assert_eq!(tcp_garbage_answer(server.tcp), ("error".to_string(), true));

    // Two clients on the Unix face: one listens, one sends; the message arrives and is acked.
    let mut listener = Client::connect(&server.socket).unwrap();
    assert_eq!(
        listener.welcome.ns.as_deref(),
        Some(&["me".to_string()][..]),
        "namespaces from SO_PEERCRED"
    );
    listener.bind(vec!["me/inbox".into()]).unwrap();
    let (got_tx, got_rx) = mpsc::channel();
    let reader = thread::spawn(move || listener.receive(|m| got_tx.send(m.clone()).unwrap()));
    let mut sender = Client::connect(&server.socket).unwrap();
    let live = message_id(&mut weft_drivers::os_rng());
    let ack = sender
        .message(new_message(live.clone(), "cli", "inbox", "live", None))
        .unwrap();
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = got_rx.recv().unwrap();
    assert_eq!((m.id.as_str(), m.body.as_str()), (live.as_str(), "live"));
    reader.join().unwrap().unwrap();

    // A message for an endpoint nobody binds is queued, durably.
    let kept = message_id(&mut weft_drivers::os_rng());
    let ack = sender
        .message(new_message(kept.clone(), "cli", "later", "kept", None))
        .unwrap();
    assert_eq!(
        (ack.status, ack.code.as_deref()),
        (AckStatus::Queued, Some("endpoint_offline"))
    );
    drop(sender);
    server.stop();

    // Restarted on the same data: the queued message is delivered when its endpoint binds.
    let server = Server::start(adapter, &dir);
    let mut later = Client::connect(&server.socket).unwrap();
    later.bind(vec!["me/later".into()]).unwrap();
    let mut got = None;
    later.receive(|m| got = Some(m.clone())).unwrap();
    assert_eq!(got.map(|m| m.id), Some(kept));
    server.stop();
}

#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_smol_adapter() {
    airc_end_to_end("smol", Adapter::Smol);
}

#[cfg(feature = "tokio")]
#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_tokio_adapter() {
    airc_end_to_end("tokio", Adapter::Tokio);
}

#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_blocking_adapter() {
    airc_end_to_end("blocking", Adapter::Blocking);
}
