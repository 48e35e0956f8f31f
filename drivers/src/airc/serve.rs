//! `weft airc serve`: the [`Server`] machine on real sockets, under smol.
//!
//! The client face listens on a Unix socket. Each connection's namespaces come from the
//! transport (AIRC §5): the peer uid (`SO_PEERCRED`) looked up in the operator's table; a uid
//! the table does not name gets none. One task owns the machine; each connection has a reader
//! task feeding it bytes and a writer task draining what it sends, so a slow client never blocks
//! the realm. Persists are committed to the store before the next output runs.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use smol::channel::{self, Receiver, Sender};
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::unix::{UnixListener, UnixStream};
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::server::{Face, Input, Output, Server, ServerConfig};
use weft_proto::core::{ConnId, Machine};

use super::store::Store;

/// Bytes read from a connection per read call.
const READ_CHUNK: usize = 64 * 1024;

/// The shortest sleep the loop takes when the machine's deadline does not move, so a machine bug
/// cannot spin a core.
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// How a realm server runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The realm it routes for.
    pub realm: Authority,
    /// Where the client face listens.
    pub client_socket: PathBuf,
    /// Where durable state lives.
    pub data_dir: PathBuf,
    /// The operator's uid → namespaces table (§5).
    pub namespaces: BTreeMap<u32, Vec<Namespace>>,
}

impl ServeConfig {
    /// Embedded defaults under `data_dir`: realm `localhost`, the socket `airc.sock` inside it,
    /// and the invoking user's uid mapped to `namespace`.
    pub fn local(data_dir: &Path, namespace: &str) -> io::Result<Self> {
        let ns = Namespace::parse(namespace).map_err(io::Error::other)?;
        let uid = rustix::process::getuid().as_raw();
        Ok(Self {
            realm: Authority::parse("localhost").map_err(io::Error::other)?,
            client_socket: data_dir.join("airc.sock"),
            data_dir: data_dir.to_path_buf(),
            namespaces: BTreeMap::from([(uid, vec![ns])]),
        })
    }
}

enum Event {
    Opened {
        conn: ConnId,
        namespaces: Vec<Namespace>,
        writer: Sender<Vec<u8>>,
    },
    Data {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    Closed {
        conn: ConnId,
    },
}

/// Runs the server until `stop` yields (or forever, if it never does). `ready` is called once
/// the socket is listening.
pub fn serve(config: ServeConfig, stop: Receiver<()>, ready: impl FnOnce()) -> io::Result<()> {
    smol::block_on(smol::future::or(run(config, ready), async {
        let _ = stop.recv().await;
        Ok(())
    }))
}

async fn run(config: ServeConfig, ready: impl FnOnce()) -> io::Result<()> {
    std::fs::create_dir_all(&config.data_dir)?;
    let mut store = Store::open(&config.data_dir.join("airc.redb"))?;
    let mut machine_config = ServerConfig::new(config.realm.clone());
    machine_config.known_namespaces = config.namespaces.values().flatten().cloned().collect();
    let mut server = Server::new(machine_config, crate::server_provider(), crate::os_rng());
    for record in store.load(crate::now())? {
        server.handle(crate::now(), Input::Restore(record));
    }

    // A socket left by a server that died is in the way; nothing else lives at this path.
    let _ = std::fs::remove_file(&config.client_socket);
    let listener = UnixListener::bind(&config.client_socket)?;
    // Anyone on the host may connect: who they are comes from SO_PEERCRED, not the file mode.
    std::fs::set_permissions(
        &config.client_socket,
        std::fs::Permissions::from_mode(0o666),
    )?;
    let (events, inbox) = channel::unbounded();
    smol::spawn(accept(listener, config.namespaces.clone(), events)).detach();
    ready();

    let mut writers: BTreeMap<ConnId, Sender<Vec<u8>>> = BTreeMap::new();
    execute(&mut server, &mut store, &mut writers)?;
    loop {
        let wait = server.poll_timeout().map(|w| {
            let now = crate::now();
            w.at.checked_duration_since(now)
                .unwrap_or(Duration::ZERO)
                .max(MIN_SLEEP)
        });
        let event = match wait {
            Some(d) => {
                smol::future::or(async { inbox.recv().await.ok() }, async {
                    smol::Timer::after(d).await;
                    None
                })
                .await
            }
            None => inbox.recv().await.ok(),
        };
        let now = crate::now();
        match event {
            Some(Event::Opened {
                conn,
                namespaces,
                writer,
            }) => {
                writers.insert(conn, writer);
                server.handle(
                    now,
                    Input::Opened {
                        conn,
                        face: Face::Client,
                        namespaces,
                    },
                );
            }
            Some(Event::Data { conn, bytes }) => {
                server.handle(now, Input::Received { conn, bytes })
            }
            Some(Event::Closed { conn }) => {
                writers.remove(&conn);
                server.handle(now, Input::Closed { conn });
            }
            None => server.handle_timeout(now),
        }
        execute(&mut server, &mut store, &mut writers)?;
    }
}

/// Runs the machine's outputs in order. Consecutive persists and forgets are committed in one
/// transaction, before the output that follows them.
fn execute(
    server: &mut Server<chacha20::ChaCha20Rng>,
    store: &mut Store,
    writers: &mut BTreeMap<ConnId, Sender<Vec<u8>>>,
) -> io::Result<()> {
    let mut durable = Vec::new();
    while let Some(o) = server.poll() {
        if matches!(o, Output::Persist(_) | Output::Forget(_)) {
            durable.push(o);
            continue;
        }
        if !durable.is_empty() {
            store.apply(&durable)?;
            durable.clear();
        }
        match o {
            Output::Send { conn, bytes } => {
                if let Some(w) = writers.get(&conn) {
                    // A closed writer means the connection is going; its close event follows,
                    // so nothing is lost here that the machine does not hear.
                    let _ = w.try_send(bytes);
                }
            }
            Output::Close { conn } => {
                writers.remove(&conn);
            }
            // Peer links are not served on real sockets yet (issue #4).
            _ => {}
        }
    }
    if !durable.is_empty() {
        store.apply(&durable)?;
    }
    Ok(())
}

async fn accept(
    listener: UnixListener,
    table: BTreeMap<u32, Vec<Namespace>>,
    events: Sender<Event>,
) {
    let mut next = 1u64;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let conn = ConnId(next);
        next += 1;
        // §5: the namespaces a connection may act for come from its peer uid, never from it.
        let namespaces = rustix::net::sockopt::socket_peercred(&stream)
            .ok()
            .and_then(|cred| table.get(&cred.uid.as_raw()).cloned())
            .unwrap_or_default();
        let (writer, outbox) = channel::unbounded();
        if events
            .send(Event::Opened {
                conn,
                namespaces,
                writer,
            })
            .await
            .is_err()
        {
            return;
        }
        smol::spawn(write(stream.clone(), outbox)).detach();
        smol::spawn(read(conn, stream, events.clone())).detach();
    }
}

async fn read(conn: ConnId, mut stream: UnixStream, events: Sender<Event>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let bytes = buf[..n].to_vec();
                if events.send(Event::Data { conn, bytes }).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = events.send(Event::Closed { conn }).await;
}

async fn write(mut stream: UnixStream, outbox: Receiver<Vec<u8>>) {
    while let Ok(bytes) = outbox.recv().await {
        if stream.write_all(&bytes).await.is_err() {
            break;
        }
    }
    // The machine dropped its sender (close) or the peer went away: end both directions, which
    // also ends the reader.
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
