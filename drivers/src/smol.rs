//! The smol adapter: any [`HostMachine`] over TCP and Unix stream sockets, TLS over TCP and
//! QUIC, under smol 2.
//!
//! One future owns the [`Host`] core; every connection has a reader task feeding it bytes and a
//! writer task draining what the machine sends, so a slow peer never blocks the others. All
//! tasks live on an executor local to [`run`]: dropping the future (a stop signal winning a
//! race) ends every connection and listener with it (quinn's own endpoint drivers run on smol's
//! global executor and end once their endpoint is dropped).
//!
//! TLS and QUIC ([`crate::tls`], [`crate::quic`]) are finished here, before the machine hears of
//! a connection: an accepted one opens after its handshake (at most
//! [`MAX_PENDING_HANDSHAKES`] at once, each within [`HANDSHAKE_TIMEOUT`]), and a dial is
//! reported open only once the accepting side's certificate verified for the dial's name.
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

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use ::smol::channel::{self, Sender};
use ::smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use ::smol::net::unix::UnixStream;
use ::smol::net::{TcpListener, TcpStream, unix::UnixListener};
use ::smol::{LocalExecutor, Timer};
use futures_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use weft_proto::core::ConnId;

use crate::host::{
    self, ACCEPT_RETRY, Commands, Endpoint, Event, Hooks, Host, HostMachine, Io, Listener, Outbox,
    OutboxReader, Outboxes, Peer, Queued, Remote, Report, SecureDial, Woke, shut_down,
};
use crate::quic;
use crate::tls::{HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES};

/// A connected socket of any kind.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// The TLS stream and its socket, which the writer shuts down at the end.
    Tls(Box<TlsStream<TcpStream>>, TcpStream),
    Quic(Box<quic::Link>),
}

/// A connection accepted whose handshake is still to run.
enum Handshake {
    Tls(TcpStream, TlsAcceptor),
    Quic(Box<quinn::Incoming>),
}

/// What the adapter's tasks tell its loop.
enum Net {
    Report(Report<Stream>),
    Handshake(Peer, Handshake),
}

/// `fut`, or a timeout error once [`HANDSHAKE_TIMEOUT`] has passed.
pub(crate) async fn bounded<T>(fut: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    ::smol::future::or(fut, async {
        Timer::after(HANDSHAKE_TIMEOUT).await;
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the handshake took too long",
        ))
    })
    .await
}

struct SmolIo<'a, 'ex> {
    ex: &'a LocalExecutor<'ex>,
    net: Sender<Net>,
    writers: Outboxes,
    /// Handshakes of accepted connections under way (see [`MAX_PENDING_HANDSHAKES`]).
    handshakes: Rc<Cell<usize>>,
    /// QUIC client endpoints, made on the first QUIC dial of each address family (keyed by
    /// "is IPv6").
    quic_clients: BTreeMap<bool, quinn::Endpoint>,
}

impl Io for SmolIo<'_, '_> {
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
        let quic_client = match &to {
            Endpoint::Quic(d) => Some(self.quic_client(d.addr)),
            _ => None,
        };
        self.ex
            .spawn(async move {
                let stream = match (to, quic_client) {
                    (Endpoint::Tcp(addr), _) => TcpStream::connect(addr).await.map(Stream::Tcp),
                    (Endpoint::Unix(path), _) => UnixStream::connect(path).await.map(Stream::Unix),
                    (Endpoint::Tls(d), _) => dial_tls(d).await,
                    (Endpoint::Quic(d), Some(Ok(endpoint))) => quic::dial(&endpoint, &d)
                        .await
                        .map(|link| Stream::Quic(Box::new(link))),
                    (Endpoint::Quic(_), Some(Err(e))) => Err(e),
                    (Endpoint::Quic(_), None) => unreachable!("a QUIC dial has its endpoint"),
                };
                let _ = net
                    .send(Net::Report(Report::Connected { conn, stream }))
                    .await;
            })
            .detach();
    }
}

/// Connects TCP, then runs the TLS handshake verifying the certificate for `d.name`.
async fn dial_tls(d: SecureDial) -> io::Result<Stream> {
    let tcp = TcpStream::connect(d.addr).await?;
    let connector = TlsConnector::from(d.client.config());
    let tls = bounded(connector.connect(d.name, tcp.clone())).await?;
    Ok(Stream::Tls(Box::new(TlsStream::Client(tls)), tcp))
}

impl SmolIo<'_, '_> {
    /// The QUIC client endpoint for `to`'s address family, made on first use.
    fn quic_client(&mut self, to: SocketAddr) -> io::Result<quinn::Endpoint> {
        if let Some(e) = self.quic_clients.get(&to.is_ipv6()) {
            return Ok(e.clone());
        }
        let endpoint = quic::client_for(to)?;
        self.quic_clients.insert(to.is_ipv6(), endpoint.clone());
        Ok(endpoint)
    }

    /// Turns a task's report into an event for the core, starting a connection's tasks.
    fn event<M: HostMachine, H: Hooks<M>>(
        &mut self,
        net: Report<Stream>,
        host: &mut Host<M, H>,
    ) -> Event {
        net.into_event(host, self.writers.by_conn(), |conn, stream| {
            spawn(self.ex, &self.net, conn, stream)
        })
    }

    /// Runs an accepted connection's handshake in its own task; it is reported open when the
    /// handshake succeeds. Beyond [`MAX_PENDING_HANDSHAKES`] the connection is dropped.
    fn handshake(&mut self, peer: Peer, handshake: Handshake) {
        if self.handshakes.get() >= MAX_PENDING_HANDSHAKES {
            return;
        }
        self.handshakes.set(self.handshakes.get() + 1);
        let pending = self.handshakes.clone();
        let net = self.net.clone();
        self.ex
            .spawn(async move {
                let stream = match handshake {
                    Handshake::Tls(tcp, acceptor) => bounded(acceptor.accept(tcp.clone()))
                        .await
                        .map(|tls| Stream::Tls(Box::new(TlsStream::Server(tls)), tcp)),
                    Handshake::Quic(incoming) => quic::accept(*incoming)
                        .await
                        .map(|link| Stream::Quic(Box::new(link))),
                };
                pending.set(pending.get() - 1);
                // A failed handshake is nothing to the machine: no connection ever opened.
                if let Ok(stream) = stream {
                    let _ = net
                        .send(Net::Report(Report::Accepted { peer, stream }))
                        .await;
                }
            })
            .detach();
    }
}

/// Starts a connection's reader and writer tasks; returns the sender to its writer.
fn spawn(ex: &LocalExecutor<'_>, net: &Sender<Net>, conn: ConnId, stream: Stream) -> Outbox {
    let (writer, outbox) = host::outbox();
    let net = net.clone();
    match stream {
        Stream::Tcp(s) => {
            let mut w = s.clone();
            ex.spawn(async move {
                write(&mut w, outbox).await;
                shut_down(&w);
            })
            .detach();
            ex.spawn(read(conn, s, net)).detach();
        }
        Stream::Unix(s) => {
            let mut w = s.clone();
            ex.spawn(async move {
                write(&mut w, outbox).await;
                shut_down(&w);
            })
            .detach();
            ex.spawn(read(conn, s, net)).detach();
        }
        Stream::Tls(tls, tcp) => {
            let (r, mut w) = ::smol::io::split(*tls);
            ex.spawn(async move {
                if write(&mut w, outbox).await {
                    // close_notify, so the peer can tell an end from a cut; then the socket.
                    let _ = bounded(w.close()).await;
                }
                shut_down(&tcp);
            })
            .detach();
            ex.spawn(read(conn, r, net)).detach();
        }
        Stream::Quic(link) => {
            let quic::Link {
                connection,
                mut send,
                recv,
            } = *link;
            ex.spawn(async move {
                write(&mut send, outbox).await;
                quic::finish(send, connection).await;
            })
            .detach();
            ex.spawn(read(conn, recv, net)).detach();
        }
    }
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

async fn drive<M: HostMachine, H: Hooks<M>>(
    ex: &LocalExecutor<'_>,
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    mut commands: Option<&Commands<M::Input>>,
) -> io::Result<()> {
    let (net, inbox) = channel::bounded(host::NET_QUEUE);
    for (index, listener) in listeners.into_iter().enumerate() {
        match listener {
            Listener::Tcp(l) => ex.spawn(accept_tcp(index, l.try_into()?, None, net.clone())),
            Listener::Unix(l) => ex.spawn(accept_unix(index, l.try_into()?, net.clone())),
            Listener::Tls(l, server) => ex.spawn(accept_tcp(
                index,
                l.try_into()?,
                Some(TlsAcceptor::from(server.config())),
                net.clone(),
            )),
            Listener::Quic(socket, server) => ex.spawn(accept_quic(
                index,
                quic::endpoint(socket, Some(&server))?,
                net.clone(),
            )),
        }
        .detach();
    }
    let mut io = SmolIo {
        ex,
        net,
        writers: Outboxes::default(),
        handshakes: Rc::new(Cell::new(0)),
        quic_clients: BTreeMap::new(),
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
        host.woke(
            woke,
            &mut commands,
            || inbox.try_recv().ok(),
            &mut io,
            |io, n, host| match n {
                Net::Report(r) => Some(io.event(r, host)),
                Net::Handshake(peer, h) => {
                    io.handshake(peer, h);
                    None
                }
            },
        )?;
    }
}

/// Accepts TCP connections; with `tls`, each runs its handshake before it opens.
async fn accept_tcp(
    index: usize,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    net: Sender<Net>,
) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors or an aborted handshake: try again shortly, without spinning.
                Timer::after(ACCEPT_RETRY).await;
                continue;
            }
        };
        crate::host::keep_alive(&stream);
        let peer = Peer {
            listener: index,
            remote: Remote::Tcp(addr),
        };
        let net_msg = match &tls {
            None => Net::Report(Report::Accepted {
                peer,
                stream: Stream::Tcp(stream),
            }),
            Some(acceptor) => Net::Handshake(peer, Handshake::Tls(stream, acceptor.clone())),
        };
        if net.send(net_msg).await.is_err() {
            return;
        }
    }
}

async fn accept_unix(index: usize, listener: UnixListener, net: Sender<Net>) {
    loop {
        let net_msg = match listener.accept().await {
            Ok((stream, _)) => Net::Report(Report::Accepted {
                peer: Peer {
                    listener: index,
                    remote: Remote::unix(&stream),
                },
                stream: Stream::Unix(stream),
            }),
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

/// Accepts QUIC connections until the endpoint closes; each runs its handshake before it opens.
async fn accept_quic(index: usize, endpoint: quinn::Endpoint, net: Sender<Net>) {
    while let Some(incoming) = endpoint.accept().await {
        let peer = Peer {
            listener: index,
            remote: Remote::Quic(incoming.remote_address()),
        };
        if net
            .send(Net::Handshake(peer, Handshake::Quic(Box::new(incoming))))
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn read<S: AsyncRead + Unpin>(conn: ConnId, mut stream: S, net: Sender<Net>) {
    loop {
        match host::read_some(&mut stream).await {
            Err(_) => break,
            Ok(bytes) if bytes.is_empty() => break,
            Ok(bytes) => {
                if net
                    .send(Net::Report(Report::Event(Event::Received { conn, bytes })))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
    let _ = net
        .send(Net::Report(Report::Event(Event::Closed { conn })))
        .await;
}

/// Writes what the core queues until it drops the sender (close), cuts the connection, or the
/// peer goes away; the caller then ends the connection, which also ends the reader and so
/// reports the close. `false` when it was cut.
async fn write<W: AsyncWrite + Unpin>(stream: &mut W, outbox: OutboxReader) -> bool {
    loop {
        let Some(next) = outbox.until_cut(outbox.recv()).await else {
            return false;
        };
        let Some(bytes) = next else {
            return true;
        };
        // A TLS stream may hold written bytes until flushed; a plain socket's flush is free.
        let sent = outbox
            .until_cut(async {
                stream.write_all(&bytes).await?;
                stream.flush().await
            })
            .await;
        match sent {
            None => return false,
            Some(Err(_)) => return true,
            Some(Ok(())) => outbox.written(bytes.len()),
        }
    }
}
