//! The smol adapter: any [`HostMachine`] over TCP and Unix stream sockets, under smol 2.
//!
//! One future owns the [`Host`] core; every connection has a reader task feeding it bytes and a
//! writer task draining what the machine sends, so a slow peer never blocks the others. All
//! tasks live on an executor local to [`run`]: dropping the future (a stop signal winning a
//! race) ends every connection and listener with it.
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
//! // Another task or thread sends on `stop` to end the server.
//! let (stop, stopped) = smol::channel::bounded::<()>(1);
//! smol::block_on(smol::future::or(
//!     weft_drivers::smol::run(&mut host, listeners),
//!     async move {
//!         let _ = stopped.recv().await;
//!         Ok(())
//!     },
//! ))?;
//! # drop(stop);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::BTreeMap;
use std::io;

use ::smol::channel::{self, Receiver, Sender};
use ::smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use ::smol::net::unix::UnixStream;
use ::smol::net::{TcpListener, TcpStream, unix::UnixListener};
use ::smol::{LocalExecutor, Timer};
use weft_proto::core::ConnId;

use crate::host::{
    ACCEPT_RETRY, Commands, Endpoint, Event, Hooks, Host, HostMachine, Io, Listener,
    MAX_EVENTS_PER_PASS, Peer, READ_CHUNK, Remote, Report, shut_down,
};

/// A connected socket of either kind.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

type Net = Report<Stream>;

struct SmolIo<'a, 'ex> {
    ex: &'a LocalExecutor<'ex>,
    net: Sender<Net>,
    writers: BTreeMap<ConnId, Sender<Vec<u8>>>,
}

impl Io for SmolIo<'_, '_> {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(w) = self.writers.get(&conn) {
            // A closed writer means the connection is going and its close event follows.
            let _ = w.try_send(bytes);
        }
    }

    fn close(&mut self, conn: ConnId) {
        // The writer task drains what is queued, then shuts the socket, which ends the reader.
        self.writers.remove(&conn);
    }

    fn dial(&mut self, conn: ConnId, to: Endpoint) {
        let net = self.net.clone();
        self.ex
            .spawn(async move {
                let stream = match to {
                    Endpoint::Tcp(addr) => TcpStream::connect(addr).await.map(Stream::Tcp),
                    Endpoint::Unix(path) => UnixStream::connect(path).await.map(Stream::Unix),
                };
                let _ = net.send(Net::Connected { conn, stream }).await;
            })
            .detach();
    }
}

impl SmolIo<'_, '_> {
    /// Turns a task's report into an event for the core, starting a connection's tasks.
    fn event<M: HostMachine, H: Hooks<M>>(&mut self, net: Net, host: &mut Host<M, H>) -> Event {
        net.into_event(host, &mut self.writers, |conn, stream| match stream {
            Stream::Tcp(s) => spawn(self.ex, &self.net, conn, s),
            Stream::Unix(s) => spawn(self.ex, &self.net, conn, s),
        })
    }
}

/// Starts a connection's reader and writer tasks; returns the sender to its writer.
fn spawn<S>(ex: &LocalExecutor<'_>, net: &Sender<Net>, conn: ConnId, stream: S) -> Sender<Vec<u8>>
where
    S: AsyncRead + AsyncWrite + std::os::fd::AsFd + Clone + Unpin + 'static,
{
    let (writer, outbox) = channel::unbounded();
    ex.spawn(write(stream.clone(), outbox)).detach();
    ex.spawn(read(conn, stream, net.clone())).detach();
    writer
}

/// Runs `host` over `listeners` until an I/O error the loop cannot pass over (a store commit
/// failing) or until the future is dropped. Accepted connections report
/// [`Peer::listener`] as their listener's index in `listeners`.
pub async fn run<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
) -> io::Result<()> {
    let ex = LocalExecutor::new();
    ex.run(drive(&ex, host, listeners, None)).await
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
    let ex = LocalExecutor::new();
    ex.run(drive(&ex, host, listeners, Some(commands))).await
}

/// What woke the loop.
enum Woke<I> {
    Net(Option<Net>),
    Command(Option<I>),
}

async fn drive<M: HostMachine, H: Hooks<M>>(
    ex: &LocalExecutor<'_>,
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    mut commands: Option<&Commands<M::Input>>,
) -> io::Result<()> {
    let (net, inbox) = channel::unbounded();
    for (index, listener) in listeners.into_iter().enumerate() {
        match listener {
            Listener::Tcp(l) => ex.spawn(accept_tcp(index, l.try_into()?, net.clone())),
            Listener::Unix(l) => ex.spawn(accept_unix(index, l.try_into()?, net.clone())),
        }
        .detach();
    }
    let mut io = SmolIo {
        ex,
        net,
        writers: BTreeMap::new(),
    };
    host.start(crate::now(), &mut io)?;
    loop {
        let woke = async {
            let net = async { Woke::Net(inbox.recv().await.ok()) };
            match commands {
                Some(c) => ::smol::future::or(net, async { Woke::Command(c.recv().await) }).await,
                None => net.await,
            }
        };
        let woke = match host.wait(crate::now()) {
            Some(d) => {
                ::smol::future::or(woke, async {
                    Timer::after(d).await;
                    Woke::Net(None)
                })
                .await
            }
            None => woke.await,
        };
        let first = match woke {
            Woke::Net(n) => n,
            Woke::Command(c) => {
                if c.is_none() {
                    // Every commander is gone: stop listening for them.
                    commands = None;
                }
                let more = commands.map(Commands::ready).unwrap_or_default();
                host.command(crate::now(), c.into_iter().chain(more), &mut io)?;
                continue;
            }
        };
        let mut events = Vec::new();
        for n in first
            .into_iter()
            .chain(std::iter::from_fn(|| inbox.try_recv().ok()))
            .take(MAX_EVENTS_PER_PASS)
        {
            events.push(io.event(n, host));
        }
        host.pass(crate::now(), events, &mut io)?;
    }
}

async fn accept_tcp(index: usize, listener: TcpListener, net: Sender<Net>) {
    loop {
        let net_msg = match listener.accept().await {
            Ok((stream, addr)) => Net::Accepted {
                peer: Peer {
                    listener: index,
                    remote: Remote::Tcp(addr),
                },
                stream: Stream::Tcp(stream),
            },
            Err(_) => {
                // Out of descriptors or an aborted handshake: try again shortly, without spinning.
                Timer::after(ACCEPT_RETRY).await;
                continue;
            }
        };
        if net.send(net_msg).await.is_err() {
            return;
        }
    }
}

async fn accept_unix(index: usize, listener: UnixListener, net: Sender<Net>) {
    loop {
        let net_msg = match listener.accept().await {
            Ok((stream, _)) => Net::Accepted {
                peer: Peer {
                    listener: index,
                    remote: Remote::unix(&stream),
                },
                stream: Stream::Unix(stream),
            },
            Err(_) => {
                Timer::after(ACCEPT_RETRY).await;
                continue;
            }
        };
        if net.send(net_msg).await.is_err() {
            return;
        }
    }
}

async fn read<S: AsyncRead + Unpin>(conn: ConnId, mut stream: S, net: Sender<Net>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let bytes = buf[..n].to_vec();
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

async fn write<S: AsyncWrite + std::os::fd::AsFd + Unpin>(
    mut stream: S,
    outbox: Receiver<Vec<u8>>,
) {
    while let Ok(bytes) = outbox.recv().await {
        if stream.write_all(&bytes).await.is_err() {
            break;
        }
    }
    // The core dropped the sender (close) or the peer went away: end both directions, which
    // also ends the reader and so reports the close.
    shut_down(&stream);
}
