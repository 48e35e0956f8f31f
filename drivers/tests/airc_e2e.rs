//! AIRC end to end over real Unix sockets: the realm server driven by smol, clients on blocking
//! sockets, identity from SO_PEERCRED, and durable state that survives a restart.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::serve::{ServeConfig, serve};
use weft_proto::airc::frame::AckStatus;

struct Running {
    stop: smol::channel::Sender<()>,
    thread: Option<thread::JoinHandle<std::io::Result<()>>>,
    socket: PathBuf,
}

impl Running {
    fn start(dir: &Path) -> Self {
        let config = ServeConfig::local(dir, "me").unwrap();
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

#[test]
fn a_message_crosses_real_sockets_and_its_ack_comes_back() {
    let dir = temp_dir("live");
    let server = Running::start(&dir);

    let mut listener = Client::connect(&server.socket).unwrap();
    assert_eq!(
        listener.welcome.ns.as_deref(),
        Some(&["me".to_string()][..]),
        "namespaces from SO_PEERCRED"
    );
    assert_eq!(
        listener.bind(vec!["me/inbox".into()]).unwrap(),
        ["//localhost/me/inbox"]
    );
    let (got_tx, got_rx) = mpsc::channel();
    let reader = thread::spawn(move || listener.receive(|m| got_tx.send(m.clone()).unwrap()));

    let mut sender = Client::connect(&server.socket).unwrap();
    let id = message_id(&mut weft_drivers::os_rng());
    let ack = sender
        .message(new_message(
            id.clone(),
            "cli",
            "inbox",
            "hello over a socket",
            None,
        ))
        .unwrap();
    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
    let m = got_rx.recv().unwrap();
    assert_eq!(
        (m.from.as_str(), m.to.as_str(), m.body.as_str()),
        (
            "airc://localhost/me/cli",
            "airc://localhost/me/inbox",
            "hello over a socket"
        )
    );
    reader.join().unwrap().unwrap();
    server.stop();
}

#[test]
fn a_queued_message_survives_a_restart_and_is_delivered_once() {
    let dir = temp_dir("restart");
    let server = Running::start(&dir);
    let mut sender = Client::connect(&server.socket).unwrap();
    let id = message_id(&mut weft_drivers::os_rng());
    let ack = sender
        .message(new_message(id.clone(), "cli", "later", "kept", None))
        .unwrap();
    assert_eq!(
        (ack.status, ack.code.as_deref()),
        (AckStatus::Queued, Some("endpoint_offline"))
    );
    drop(sender);
    server.stop();

    // A new process, the same data: the message is still there, and the id still known.
    let server = Running::start(&dir);
    let mut again = Client::connect(&server.socket).unwrap();
    let dup = again
        .message(new_message(id.clone(), "cli", "later", "kept", None))
        .unwrap();
    assert_eq!(
        (dup.status, dup.code.as_deref()),
        (AckStatus::Delivered, Some("duplicate"))
    );

    let mut listener = Client::connect(&server.socket).unwrap();
    listener.bind(vec!["me/later".into()]).unwrap();
    let mut got = None;
    listener.receive(|m| got = Some(m.clone())).unwrap();
    assert_eq!(got.unwrap().id, id);
    server.stop();
}

#[test]
fn frames_from_concurrent_senders_reach_one_listener_whole_and_in_each_senders_order() {
    const SENDERS: usize = 8;
    const EACH: usize = 20;
    let dir = temp_dir("serialized");
    let server = Running::start(&dir);
    let mut listener = Client::connect(&server.socket).unwrap();
    listener.bind(vec!["me/inbox".into()]).unwrap();
    // Bodies larger than a socket write usually takes at once, so an unserialized writer would
    // interleave pieces of frames.
    let filler = "x".repeat(16 * 1024);
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (socket, filler) = (server.socket.clone(), filler.clone());
            thread::spawn(move || {
                let mut c = Client::connect(&socket).unwrap();
                for i in 0..EACH {
                    let id = message_id(&mut weft_drivers::os_rng());
                    let body = format!("{s} {i} {filler}");
                    let ack = c
                        .message(new_message(id, &format!("s{s}"), "inbox", &body, None))
                        .unwrap();
                    assert_eq!(ack.status, AckStatus::Delivered, "{ack:?}");
                }
            })
        })
        .collect();
    let mut seen = vec![Vec::new(); SENDERS];
    for _ in 0..SENDERS * EACH {
        // A frame cut into by another would not decode: `receive` would fail.
        listener
            .receive(|m| {
                let mut parts = m.body.splitn(3, ' ');
                let s: usize = parts.next().unwrap().parse().unwrap();
                let i: usize = parts.next().unwrap().parse().unwrap();
                assert_eq!(
                    parts.next(),
                    Some(filler.as_str()),
                    "the body arrived whole"
                );
                seen[s].push(i);
            })
            .unwrap();
    }
    for sender in senders {
        sender.join().unwrap();
    }
    for (s, got) in seen.iter().enumerate() {
        assert_eq!(*got, (0..EACH).collect::<Vec<_>>(), "sender {s}");
    }
    server.stop();
}
