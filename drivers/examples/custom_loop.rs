//! An AIRC realm server inside a hand-written `poll(2)` loop: no adapter, no async runtime, just
//! the three calls every host loop makes on a machine:
//!
//! 1. `handle(now, input)` for each thing that happened (a connection, bytes, a close);
//! 2. `poll()` until it returns `None`, executing each output in order;
//! 3. `poll_timeout()` to know how long `poll(2)` may sleep, and `handle_timeout(now)` once it
//!    is due.
//!
//! `cargo run --example custom_loop` serves a realm on `./custom-loop.sock` until killed.
//! `--self-test` (run in CI) serves on a temporary socket, runs two clients against it from
//! another thread, prints `delivered <id>` and exits 0 only if a message went through and was
//! acked `delivered`. This example keeps nothing across restarts: a real host commits each
//! `Persist`/`Forget` before the next output (see `weft_drivers::airc::host::RealmHooks`).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::frame::AckStatus;
use weft_proto::airc::server::{Face, Input, Output, Server, ServerConfig, Source};
use weft_proto::core::{ConnId, Machine};

/// How long the self-test may take before it counts as failed.
const SELF_TEST_LIMIT: Duration = Duration::from_secs(20);

struct Conn {
    stream: UnixStream,
    out: Vec<u8>,
}

fn main() -> ExitCode {
    let self_test = std::env::args().any(|a| a == "--self-test");
    let socket = if self_test {
        std::env::temp_dir().join(format!("weft-custom-loop-{}.sock", std::process::id()))
    } else {
        PathBuf::from("custom-loop.sock")
    };
    match run(&socket, self_test) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("custom_loop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(socket: &Path, self_test: bool) -> io::Result<bool> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    listener.set_nonblocking(true)?;

    // The machine: a realm whose one namespace belongs to whoever runs this (AIRC §5).
    let me = Namespace::parse("me").map_err(io::Error::other)?;
    let mut config = ServerConfig::new(Authority::parse("localhost").map_err(io::Error::other)?);
    config.known_namespaces = vec![me.clone()];
    let mut server = Server::new(
        config,
        weft_proto::crypto::default_provider(),
        weft_drivers::os_rng(),
    );

    let result = self_test.then(|| start_clients(socket.to_path_buf()));
    let started = Instant::now();
    let mut conns: BTreeMap<ConnId, Conn> = BTreeMap::new();
    let mut next_conn = 1;
    let mut buf = vec![0u8; 64 * 1024];
    println!("custom_loop: serving on {}", socket.display());

    loop {
        // Call 3: how long may we sleep? Until the machine's deadline (or an event, or forever).
        let mut wait = server
            .poll_timeout()
            .map(|w| w.at.saturating_duration_since(weft_drivers::now()));
        if self_test {
            // The self-test also wakes to check on its clients and its time limit.
            wait = Some(wait.map_or(Duration::from_millis(100), |d| {
                d.min(Duration::from_millis(100))
            }));
        }
        let timeout = wait.and_then(|d| Timespec::try_from(d).ok());

        let (accept_ready, ready): (bool, Vec<ConnId>) = {
            let mut fds = vec![PollFd::new(&listener, PollFlags::IN)];
            for c in conns.values() {
                let mut flags = PollFlags::IN;
                if !c.out.is_empty() {
                    flags |= PollFlags::OUT;
                }
                fds.push(PollFd::from_borrowed_fd(c.stream.as_fd(), flags));
            }
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let readable = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
            (
                !fds[0].revents().is_empty(),
                conns
                    .keys()
                    .zip(&fds[1..])
                    .filter(|(_, f)| f.revents().intersects(readable))
                    .map(|(&id, _)| id)
                    .collect(),
            )
        };

        if accept_ready {
            while let Ok((stream, _)) = listener.accept() {
                stream.set_nonblocking(true)?;
                let conn = ConnId(next_conn);
                next_conn += 1;
                // §5: namespaces come from the transport. Our own uid gets ours; others none.
                let uid = rustix::net::sockopt::socket_peercred(&stream)
                    .ok()
                    .map(|c| c.uid.as_raw());
                let namespaces = if uid == Some(rustix::process::getuid().as_raw()) {
                    vec![me.clone()]
                } else {
                    Vec::new()
                };
                conns.insert(
                    conn,
                    Conn {
                        stream,
                        out: Vec::new(),
                    },
                );
                // Call 1, then call 2.
                server.handle(
                    weft_drivers::now(),
                    Input::Opened {
                        conn,
                        face: Face::Client,
                        namespaces,
                        source: Source::Unknown,
                    },
                );
                drain(&mut server, &mut conns);
            }
        }

        for conn in ready {
            let Some(c) = conns.get_mut(&conn) else {
                continue;
            };
            let input = match c.stream.read(&mut buf) {
                Ok(0) => None,
                Ok(n) => Some(Input::Received {
                    conn,
                    bytes: buf[..n].to_vec(),
                }),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => None,
            };
            let input = input.unwrap_or_else(|| {
                conns.remove(&conn);
                Input::Closed { conn }
            });
            server.handle(weft_drivers::now(), input);
            drain(&mut server, &mut conns);
        }

        // Call 3 again: the deadline, once due.
        let now = weft_drivers::now();
        if server.poll_timeout().is_some_and(|w| w.at <= now) {
            server.handle_timeout(now);
            drain(&mut server, &mut conns);
        }
        flush(&mut conns);

        if let Some(result) = &result {
            match result.try_recv() {
                Ok(Ok(id)) => {
                    println!("delivered {id}");
                    let _ = std::fs::remove_file(socket);
                    return Ok(true);
                }
                Ok(Err(e)) => {
                    eprintln!("custom_loop: self-test failed: {e}");
                    return Ok(false);
                }
                Err(_) if started.elapsed() > SELF_TEST_LIMIT => {
                    eprintln!("custom_loop: self-test timed out");
                    return Ok(false);
                }
                Err(_) => {}
            }
        }
    }
}

/// Call 2: every output, in order.
fn drain(server: &mut Server<chacha20::ChaCha20Rng>, conns: &mut BTreeMap<ConnId, Conn>) {
    while let Some(output) = server.poll() {
        match output {
            Output::Send { conn, bytes } => {
                if let Some(c) = conns.get_mut(&conn) {
                    c.out.extend(bytes);
                }
            }
            Output::Close { conn } => {
                if let Some(mut c) = conns.remove(&conn) {
                    let _ = c.stream.write_all(&c.out);
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
            }
            // Persist/Forget: kept nowhere here (see the module docs); Connect: no peer links.
            _ => {}
        }
    }
}

/// Writes what each socket takes without blocking.
fn flush(conns: &mut BTreeMap<ConnId, Conn>) {
    for c in conns.values_mut() {
        while !c.out.is_empty() {
            match c.stream.write(&c.out) {
                Ok(n) if n > 0 => drop(c.out.drain(..n)),
                _ => break,
            }
        }
    }
}

/// Two clients on another thread: one binds `me/inbox` and waits, the other sends it a message.
/// Reports the id once the sender holds a `delivered` ack and the listener has the message.
fn start_clients(socket: PathBuf) -> mpsc::Receiver<Result<String, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let exchange = || -> io::Result<String> {
            let mut listener = Client::connect(&socket)?;
            listener.bind(vec!["me/inbox".into()])?;
            let (got_tx, got_rx) = mpsc::channel();
            let reader = std::thread::spawn(move || {
                listener.receive(|m| got_tx.send(m.id.clone()).unwrap())
            });
            let mut sender = Client::connect(&socket)?;
            let id = message_id(&mut weft_drivers::os_rng());
            let ack = sender.message(new_message(id.clone(), "cli", "inbox", "hi", None))?;
            if ack.status != AckStatus::Delivered {
                return Err(io::Error::other(format!("ack {ack:?}")));
            }
            let got = got_rx.recv().map_err(io::Error::other)?;
            reader
                .join()
                .map_err(|_| io::Error::other("reader panicked"))??;
            if got != id {
                return Err(io::Error::other(format!("received {got}, sent {id}")));
            }
            Ok(id)
        };
        let _ = tx.send(exchange().map_err(|e| e.to_string()));
    });
    rx
}
