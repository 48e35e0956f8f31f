//! The tokio adapter (feature `tokio`): any [`HostMachine`] over TCP and Unix stream sockets,
//! TLS over TCP and QUIC, under a tokio runtime.
//!
//! TLS and QUIC are the bridge's (`drivers::bridge`): its thread runs the handshakes as the smol
//! adapter does and hands this adapter each secure connection's plaintext on a Unix socket, so a
//! listener's connection opens after its handshake and a dial opens once the certificate
//! verified.
//!
//! One future owns the [`Host`] core and stays on the task that awaits [`run`], so the machine
//! need not be `Send`. Each connection has a reader task and a writer task, spawned into a
//! [`JoinSet`] owned by [`run`]: dropping the future aborts them all. Needs a runtime with I/O
//! and time enabled.
//!
//! ```no_run
//! use weft_drivers::host::{Endpoint, Host, Listener};
//! use weft_drivers::airc::host::Realm;
//! use weft_proto::airc::{address::Authority, server::{Server, ServerConfig}};
//! let config = ServerConfig::new(Authority::parse("localhost").unwrap());
//! let server = Server::new(config, weft_proto::crypto::default_provider(), weft_drivers::os_rng());
//! let machine = Realm::new(server, Default::default());
//! let mut host = Host::new(machine, weft_drivers::host::Volatile);
//! let listeners = vec![Listener::bind(&Endpoint::Tcp("127.0.0.1:7000".parse().unwrap()))?];
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! runtime.block_on(weft_drivers::tokio::run(&mut host, listeners))?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;

use ::tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use ::tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use ::tokio::sync::mpsc::{self, Sender};
use ::tokio::task::JoinSet;
use ::tokio::time::sleep;
use weft_proto::core::ConnId;

use crate::bridge::{Bridge, Bridged};
use crate::host::{
    self, ACCEPT_RETRY, Commands, Endpoint, Event, Hooks, Host, HostMachine, Io, Listener,
    OutboxReader, Outboxes, Peer, Queued, Remote, Report, Woke, shut_down,
};

/// A connected socket of either kind.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

type Net = Report<Stream>;

struct TokioIo {
    tasks: JoinSet<()>,
    net: Sender<Net>,
    writers: Outboxes,
    /// TLS and QUIC, started with the first secure listener or dial.
    bridge: Option<Bridge>,
}

impl Io for TokioIo {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        self.writers.send(conn, bytes);
    }

    fn close(&mut self, conn: ConnId) {
        self.writers.close(conn);
    }

    fn queued(&self, conn: ConnId) -> Queued {
        self.writers.queued(conn)
    }

    fn cut(&mut self, conn: ConnId) {
        self.writers.cut(conn);
    }

    fn dial(&mut self, conn: ConnId, to: Endpoint) {
        let net = self.net.clone();
        if let Endpoint::Tls(_) | Endpoint::Quic(_) = to {
            match self.bridge(Vec::new()) {
                Ok(bridge) => bridge.dial(conn, to),
                Err(e) => {
                    // Reported from a task: the loop never waits on its own queue.
                    self.tasks.spawn(async move {
                        let _ = net
                            .send(Net::Connected {
                                conn,
                                stream: Err(e),
                            })
                            .await;
                    });
                }
            }
            return;
        }
        self.tasks.spawn(async move {
            let stream = match to {
                Endpoint::Tcp(addr) => TcpStream::connect(addr).await.map(Stream::Tcp),
                Endpoint::Unix(path) => UnixStream::connect(path).await.map(Stream::Unix),
                Endpoint::Tls(_) | Endpoint::Quic(_) => unreachable!("dialled by the bridge"),
            };
            let _ = net.send(Net::Connected { conn, stream }).await;
        });
    }
}

impl TokioIo {
    /// The bridge, started now with `listeners` if it is not running yet (a bridge serves the
    /// listeners it started with: they all come first, at the start of [`run`]).
    fn bridge(&mut self, listeners: Vec<(usize, Listener)>) -> io::Result<&Bridge> {
        if self.bridge.is_none() {
            let (bridge, ready) = Bridge::start(listeners)?;
            self.tasks.spawn(forward(ready, self.net.clone()));
            self.bridge = Some(bridge);
        }
        Ok(self.bridge.as_ref().expect("started above"))
    }

    /// Turns a task's report into an event for the core, starting a connection's tasks.
    fn event<M: HostMachine, H: Hooks<M>>(&mut self, net: Net, host: &mut Host<M, H>) -> Event {
        net.into_event(host, self.writers.by_conn(), |conn, stream| {
            let (writer, outbox) = host::outbox();
            let net = self.net.clone();
            match stream {
                Stream::Tcp(s) => {
                    let (r, w) = s.into_split();
                    self.tasks.spawn(write(w, outbox));
                    self.tasks.spawn(read(conn, r, net));
                }
                Stream::Unix(s) => {
                    let (r, w) = s.into_split();
                    self.tasks.spawn(write(w, outbox));
                    self.tasks.spawn(read(conn, r, net));
                }
            }
            writer
        })
    }
}

/// Runs `host` over `listeners` until an I/O error the loop cannot pass over (a store commit
/// failing) or until the future is dropped. Accepted connections report
/// [`Peer::listener`] as their listener's index in `listeners`. Must be awaited inside a tokio
/// runtime with I/O and time enabled.
pub async fn run<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
) -> io::Result<()> {
    drive(host, listeners, None).await
}

/// [`run`], also feeding the machine what the application sends through the [`Commander`]
/// paired with `commands` ([`crate::host::commands`]).
///
/// [`Commander`]: crate::host::Commander
pub async fn run_commanded<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    commands: &Commands<M::Input>,
) -> io::Result<()> {
    drive(host, listeners, Some(commands)).await
}

async fn drive<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    mut commands: Option<&Commands<M::Input>>,
) -> io::Result<()> {
    let (net, mut inbox) = mpsc::channel(crate::host::NET_QUEUE);
    let mut io = TokioIo {
        tasks: JoinSet::new(),
        net: net.clone(),
        writers: Outboxes::default(),
        bridge: None,
    };
    let mut secure = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        match listener {
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                let l = TcpListener::from_std(l)?;
                io.tasks.spawn(accept_tcp(index, l, net.clone()));
            }
            Listener::Unix(l) => {
                l.set_nonblocking(true)?;
                let l = UnixListener::from_std(l)?;
                io.tasks.spawn(accept_unix(index, l, net.clone()));
            }
            Listener::Tls(..) | Listener::Quic(..) => secure.push((index, listener)),
        }
    }
    if !secure.is_empty() {
        io.bridge(secure)?;
    }
    drop(net);
    host.start(crate::now(), &mut io)?;
    loop {
        let woke = async {
            let net = async { Woke::Net(inbox.recv().await) };
            match commands {
                // The race uses smol's runtime-neutral combinator: tokio's `select!` needs its
                // macros feature for this one place.
                Some(c) => ::smol::future::or(net, async { Woke::Command(c.recv().await) }).await,
                None => net.await,
            }
        };
        let woke = match host.wait(crate::now()) {
            Some(d) => ::tokio::time::timeout(d, woke)
                .await
                .unwrap_or(Woke::Net(None)),
            None => woke.await,
        };
        host.woke(
            woke,
            &mut commands,
            || inbox.try_recv().ok(),
            &mut io,
            |io, n, host| Some(io.event(n, host)),
        )?;
    }
}

async fn accept_tcp(index: usize, listener: TcpListener, net: Sender<Net>) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                crate::host::keep_alive(&stream);
                let peer = Peer {
                    listener: index,
                    remote: Remote::Tcp(addr),
                };
                let stream = Stream::Tcp(stream);
                if net.send(Net::Accepted { peer, stream }).await.is_err() {
                    return;
                }
            }
            // Out of descriptors or an aborted handshake: try again shortly, without spinning.
            Err(_) => sleep(ACCEPT_RETRY).await,
        }
    }
}

async fn accept_unix(index: usize, listener: UnixListener, net: Sender<Net>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let peer = Peer {
                    listener: index,
                    remote: Remote::unix(&stream),
                };
                let stream = Stream::Unix(stream);
                if net.send(Net::Accepted { peer, stream }).await.is_err() {
                    return;
                }
            }
            Err(_) => sleep(ACCEPT_RETRY).await,
        }
    }
}

async fn read<S: AsyncRead + Unpin>(conn: ConnId, mut stream: S, net: Sender<Net>) {
    loop {
        let next = std::future::poll_fn(|cx| {
            crate::host::poll_read_shared(|buf| {
                let mut buf = ::tokio::io::ReadBuf::new(buf);
                std::pin::Pin::new(&mut stream)
                    .poll_read(cx, &mut buf)
                    .map_ok(|()| buf.filled().len())
            })
        })
        .await;
        match next {
            Err(_) => break,
            Ok(bytes) if bytes.is_empty() => break,
            Ok(bytes) => {
                if net
                    .send(Net::Event(Event::Received { conn, bytes }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
    let _ = net.send(Net::Event(Event::Closed { conn })).await;
}

/// The write half of either socket kind, which can still name the whole socket to shut it.
trait WriteHalf: AsyncWrite + Unpin + Send + 'static {
    fn shut(&self);
}

impl WriteHalf for ::tokio::net::tcp::OwnedWriteHalf {
    fn shut(&self) {
        shut_down(self.as_ref());
    }
}

impl WriteHalf for ::tokio::net::unix::OwnedWriteHalf {
    fn shut(&self) {
        shut_down(self.as_ref());
    }
}

async fn write<W: WriteHalf>(mut stream: W, outbox: OutboxReader) {
    // Until the core closes (`Some(None)`), cuts (`None`) or the peer goes away.
    while let Some(Some(bytes)) = outbox.until_cut(outbox.recv()).await {
        match outbox.until_cut(stream.write_all(&bytes)).await {
            Some(Ok(())) => outbox.written(bytes.len()),
            _ => break,
        }
    }
    // The core dropped the sender (close) or the peer went away: end both directions, which
    // also ends the reader and so reports the close. Dropping the half alone would only end
    // writing.
    stream.shut();
}

/// Hands what the bridge sends to the loop as the reports of this adapter's own sockets.
async fn forward(ready: Commands<Bridged>, net: Sender<Net>) {
    while let Some(bridged) = ready.recv().await {
        let report = match bridged {
            Bridged::Accepted { peer, stream } => match UnixStream::from_std(stream) {
                Ok(s) => Net::Accepted {
                    peer,
                    stream: Stream::Unix(s),
                },
                // Not registered with the runtime: as if its handshake failed.
                Err(_) => continue,
            },
            Bridged::Dialled { conn, stream } => Net::Connected {
                conn,
                stream: stream.and_then(UnixStream::from_std).map(Stream::Unix),
            },
        };
        if net.send(report).await.is_err() {
            return;
        }
    }
}
