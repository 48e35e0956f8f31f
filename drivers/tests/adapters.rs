//! The same AIRC end-to-end run over each runtime adapter (smol, tokio, blocking): a realm
//! server on real loopback sockets (its client face on a Unix socket and on TCP), two clients, a
//! message delivered and acked, a TCP peer proven to hold no namespace, a protocol violation
//! answered and then closed on the wire, and a restart after which a queued message is still
//! there.

mod common;
use common::tcp_welcome_namespaces;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::host::{Realm, RealmHooks, RealmInput};
use weft_drivers::airc::serve::{ServeConfig, open};
use weft_drivers::host::{Commands, Endpoint, Host, Listener};
use weft_proto::airc::frame::AckStatus;
use weft_proto::airc::framing::FrameDecoder;

/// A server running on some adapter, and how to stop it.
struct Running {
    stop: Box<dyn FnOnce()>,
    thread: thread::JoinHandle<std::io::Result<()>>,
    socket: PathBuf,
    tcp: SocketAddr,
}

impl Running {
    fn stop(self) {
        (self.stop)();
        self.thread.join().unwrap().unwrap();
    }
}

/// How an adapter starts a realm server on `dir`'s data.
type Start = fn(&Path) -> Running;

type RealmHost = Host<Realm<chacha20::ChaCha20Rng>, RealmHooks>;

/// Runs `run` on a new thread over the realm's host (its store opened in that thread) and its
/// listeners: the Unix client face and TCP on an ephemeral loopback port.
fn spawn(
    dir: &Path,
    stop: Box<dyn FnOnce()>,
    run: impl FnOnce(&mut RealmHost, Vec<Listener>, &Commands<RealmInput>) -> std::io::Result<()>
    + Send
    + 'static,
) -> Running {
    let config = ServeConfig::local(dir, "me").unwrap();
    let socket = config.client_socket.clone();
    let (ready, bound) = mpsc::channel();
    let thread = thread::spawn(move || {
        let (mut host, mut listeners, commands) = open(&config)?;
        let tcp = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap()))?;
        let Endpoint::Tcp(addr) = tcp.endpoint()? else {
            unreachable!("a TCP listener has a TCP address")
        };
        ready.send(addr).unwrap();
        listeners.push(tcp);
        run(&mut host, listeners, &commands)
    });
    let tcp = bound.recv().expect("the server starts");
    Running {
        stop,
        thread,
        socket,
        tcp,
    }
}

fn start_smol(dir: &Path) -> Running {
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    spawn(
        dir,
        Box::new(move || stop.send_blocking(()).unwrap()),
        move |host, listeners, commands| {
            smol::block_on(smol::future::or(
                weft_drivers::smol::run_commanded(host, listeners, commands),
                async move {
                    let _ = stopped.recv().await;
                    Ok(())
                },
            ))
        },
    )
}

#[cfg(feature = "tokio")]
fn start_tokio(dir: &Path) -> Running {
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    spawn(
        dir,
        Box::new(move || stop.send_blocking(()).unwrap()),
        move |host, listeners, commands| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            // The stop race uses smol's runtime-neutral combinator; the adapter runs on tokio.
            runtime.block_on(smol::future::or(
                weft_drivers::tokio::run_commanded(host, listeners, commands),
                async move {
                    let _ = stopped.recv().await;
                    Ok(())
                },
            ))
        },
    )
}

fn start_blocking(dir: &Path) -> Running {
    let (stopper, stopped) = weft_drivers::blocking::stop_signal().unwrap();
    spawn(
        dir,
        Box::new(move || stopper.stop()),
        move |host, listeners, commands| {
            weft_drivers::blocking::run_commanded(host, listeners, commands, &stopped)
        },
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-adapters-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
fn airc_end_to_end(name: &str, start: Start) {
    let dir = temp_dir(name);
    let server = start(&dir);

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
    let server = start(&dir);
    let mut later = Client::connect(&server.socket).unwrap();
    later.bind(vec!["me/later".into()]).unwrap();
    let mut got = None;
    later.receive(|m| got = Some(m.clone())).unwrap();
    assert_eq!(got.map(|m| m.id), Some(kept));
    server.stop();
}

#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_smol_adapter() {
    airc_end_to_end("smol", start_smol);
}

#[cfg(feature = "tokio")]
#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_tokio_adapter() {
    airc_end_to_end("tokio", start_tokio);
}

#[test]
fn an_airc_realm_delivers_acks_and_keeps_queued_messages_over_the_blocking_adapter() {
    airc_end_to_end("blocking", start_blocking);
}
