//! TLS and QUIC for the adapters that move plain bytes only ([`crate::tokio`],
//! [`crate::blocking`]), written once: a thread runs the same rustls and quinn handshakes as
//! [`crate::smol`] on a smol executor of its own, and hands the adapter each secure connection as
//! one end of a Unix socket pair carrying its plaintext. To the adapter it is an ordinary Unix
//! socket; to the machine it is the TLS or QUIC connection it always was ([`Remote::Tcp`] or
//! [`Remote::Quic`], opened only after the handshake, a dial reported open only once the
//! certificate verified).
//!
//! Results come back through a [`Commands`] channel ([`crate::host::commands`]), so an async
//! adapter awaits them and the blocking one polls their descriptor. Dropping the [`Bridge`] ends
//! its thread and every connection it carries.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use ::smol::LocalExecutor;
use ::smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use ::smol::net::TcpStream;
use ::smol::net::unix::UnixStream;
use futures_rustls::{TlsAcceptor, TlsConnector};
use weft_proto::core::ConnId;

use crate::host::{
    Commander, Commands, Endpoint, Listener, Peer, Remote, SecureDial, commands, shut_down,
};
use crate::quic;
use crate::smol::bounded;
use crate::tls::MAX_PENDING_HANDSHAKES;

/// A secure connection ready for the adapter, or a dial's end.
pub(crate) enum Bridged {
    /// A TLS or QUIC listener's connection, its handshake done.
    Accepted {
        /// Where it came in and from whom.
        peer: Peer,
        /// The adapter's end of its plaintext.
        stream: std::os::unix::net::UnixStream,
    },
    /// A TLS or QUIC dial, open (certificate verified) or failed.
    Dialled {
        /// The id the core gave the dial.
        conn: ConnId,
        /// The adapter's end of its plaintext.
        stream: io::Result<std::os::unix::net::UnixStream>,
    },
}

/// The adapter's handle to the bridge thread.
pub(crate) struct Bridge {
    dials: ::smol::channel::Sender<(ConnId, Endpoint)>,
}

impl Bridge {
    /// Starts the thread, serving `listeners` (TLS and QUIC ones, with their index in the
    /// adapter's list); what it hands back arrives on the returned channel.
    pub(crate) fn start(
        listeners: Vec<(usize, Listener)>,
    ) -> io::Result<(Self, Commands<Bridged>)> {
        let (to, ready) = commands()?;
        // The host core has at most MAX_PENDING_DIALS dials outstanding, each answered before
        // it counts no more, so this queue never refuses one.
        let (dials, jobs) = ::smol::channel::bounded(crate::host::MAX_PENDING_DIALS);
        std::thread::Builder::new()
            .name("weft-secure-bridge".into())
            .spawn(move || {
                let ex = LocalExecutor::new();
                ::smol::block_on(ex.run(serve(&ex, listeners, jobs, to)));
            })?;
        Ok((Self { dials }, ready))
    }

    /// Dials `to` (TLS or QUIC); the answer comes back as [`Bridged::Dialled`]. The thread
    /// lives as long as this handle and the queue holds every dial the core may have
    /// outstanding, so the send fails only if the thread panicked.
    pub(crate) fn dial(&self, conn: ConnId, to: Endpoint) {
        let _ = self.dials.try_send((conn, to));
    }
}

/// A connection's task, spawned by the bridge's main loop.
type Task = std::pin::Pin<Box<dyn Future<Output = ()>>>;

/// What wakes the bridge's main loop.
enum Job {
    Dial((ConnId, Endpoint)),
    Spawn(Task),
}

/// A secure connection, handshake done.
enum Secure {
    /// The TLS stream and its socket, shut at the end.
    Tls(Box<futures_rustls::TlsStream<TcpStream>>, TcpStream),
    Quic(Box<quic::Link>),
}

/// The bridge thread: accept loops for every listener, then dials until the adapter goes.
async fn serve(
    ex: &LocalExecutor<'_>,
    listeners: Vec<(usize, Listener)>,
    jobs: ::smol::channel::Receiver<(ConnId, Endpoint)>,
    to: Commander<Bridged>,
) {
    let to = Rc::new(to);
    let pending = Rc::new(Cell::new(0usize));
    // Accept loops hand their handshakes here to be spawned: a task cannot borrow the executor.
    // Each task is a handshake an acceptor counted in `pending`, so no more than
    // MAX_PENDING_HANDSHAKES wait; an acceptor that finds the queue full waits its turn.
    let (spawn, spawns) = ::smol::channel::bounded::<Task>(MAX_PENDING_HANDSHAKES);
    for (index, listener) in listeners {
        let (to, pending, spawn) = (to.clone(), pending.clone(), spawn.clone());
        let started = match listener {
            Listener::Tls(l, server) => ::smol::net::TcpListener::try_from(l).map(|l| {
                let acceptor = TlsAcceptor::from(server.config());
                ex.spawn(accept_tls(spawn, index, l, acceptor, to, pending))
            }),
            Listener::Quic(socket, server) => quic::endpoint(socket, Some(&server))
                .map(|e| ex.spawn(accept_quic(spawn, index, e, to, pending))),
            // Plain sockets stay with the adapter.
            Listener::Tcp(_) | Listener::Unix(_) => continue,
        };
        match started {
            Ok(task) => task.detach(),
            Err(e) => eprintln!("weft bridge: listener {index}: {e}"),
        }
    }
    let mut quic_clients: BTreeMap<bool, quinn::Endpoint> = BTreeMap::new();
    loop {
        let job = ::smol::future::or(async { jobs.recv().await.map(Job::Dial) }, async {
            // `spawn` is held here, so this channel never closes.
            spawns.recv().await.map(Job::Spawn)
        })
        .await;
        let (conn, endpoint) = match job {
            Ok(Job::Dial(dial)) => dial,
            Ok(Job::Spawn(task)) => {
                ex.spawn(task).detach();
                continue;
            }
            // The adapter dropped its handle: dropping the executor ends every connection.
            Err(_) => return,
        };
        let to = to.clone();
        let quic_client = match &endpoint {
            Endpoint::Quic(d) => Some(quic_client(&mut quic_clients, d.addr)),
            _ => None,
        };
        ex.spawn(async move {
            let secure = match (endpoint, quic_client) {
                (Endpoint::Tls(d), _) => dial_tls(d).await,
                (Endpoint::Quic(d), Some(Ok(client))) => quic::dial(&client, &d)
                    .await
                    .map(|link| Secure::Quic(Box::new(link))),
                (Endpoint::Quic(_), Some(Err(e))) => Err(e),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the bridge dials TLS and QUIC only",
                )),
            };
            match secure.and_then(|s| Ok((s, pair()?))) {
                Ok((secure, (ours, theirs))) => {
                    if to
                        .send_async(Bridged::Dialled {
                            conn,
                            stream: Ok(theirs),
                        })
                        .await
                        .is_ok()
                    {
                        carry(secure, ours).await;
                    }
                }
                Err(e) => {
                    let _ = to
                        .send_async(Bridged::Dialled {
                            conn,
                            stream: Err(e),
                        })
                        .await;
                }
            }
        })
        .detach();
    }
}

/// The QUIC client endpoint for `to`'s address family, made on first use.
fn quic_client(
    clients: &mut BTreeMap<bool, quinn::Endpoint>,
    to: SocketAddr,
) -> io::Result<quinn::Endpoint> {
    if let Some(e) = clients.get(&to.is_ipv6()) {
        return Ok(e.clone());
    }
    let endpoint = quic::client_for(to)?;
    clients.insert(to.is_ipv6(), endpoint.clone());
    Ok(endpoint)
}

/// Connects TCP, then runs the TLS handshake verifying the certificate for `d.name`.
async fn dial_tls(d: SecureDial) -> io::Result<Secure> {
    let tcp = TcpStream::connect(d.addr).await?;
    let connector = TlsConnector::from(d.client.config());
    let tls = bounded(connector.connect(d.name, tcp.clone())).await?;
    Ok(Secure::Tls(
        Box::new(futures_rustls::TlsStream::Client(tls)),
        tcp,
    ))
}

/// A Unix socket pair: the bridge's end (async) and the adapter's (std, non-blocking).
fn pair() -> io::Result<(UnixStream, std::os::unix::net::UnixStream)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    theirs.set_nonblocking(true)?;
    Ok((UnixStream::try_from(ours)?, theirs))
}

/// Runs one accepted connection's handshake, hands it to the adapter, and carries it.
async fn accepted(
    peer: Peer,
    handshake: impl Future<Output = io::Result<Secure>>,
    to: Rc<Commander<Bridged>>,
    pending: Rc<Cell<usize>>,
) {
    let secure = handshake.await;
    pending.set(pending.get() - 1);
    // A failed handshake is nothing to the machine: no connection ever opened.
    let Ok((secure, (ours, theirs))) = secure.and_then(|s| Ok((s, pair()?))) else {
        return;
    };
    if to
        .send_async(Bridged::Accepted {
            peer,
            stream: theirs,
        })
        .await
        .is_ok()
    {
        carry(secure, ours).await;
    }
}

/// Takes a handshake slot, or says the connection is to be dropped (see
/// [`MAX_PENDING_HANDSHAKES`]).
fn slot(pending: &Cell<usize>) -> bool {
    if pending.get() >= MAX_PENDING_HANDSHAKES {
        return false;
    }
    pending.set(pending.get() + 1);
    true
}

async fn accept_tls(
    spawn: ::smol::channel::Sender<Task>,
    index: usize,
    listener: ::smol::net::TcpListener,
    acceptor: TlsAcceptor,
    to: Rc<Commander<Bridged>>,
    pending: Rc<Cell<usize>>,
) {
    loop {
        let Ok((tcp, addr)) = listener.accept().await else {
            ::smol::Timer::after(crate::host::ACCEPT_RETRY).await;
            continue;
        };
        crate::host::keep_alive(&tcp);
        if !slot(&pending) {
            continue;
        }
        let peer = Peer {
            listener: index,
            remote: Remote::Tcp(addr),
        };
        let acceptor = acceptor.clone();
        let handshake = async move {
            let tls = bounded(acceptor.accept(tcp.clone())).await?;
            Ok(Secure::Tls(
                Box::new(futures_rustls::TlsStream::Server(tls)),
                tcp,
            ))
        };
        let task = accepted(peer, handshake, to.clone(), pending.clone());
        if spawn.send(Box::pin(task)).await.is_err() {
            return;
        }
    }
}

async fn accept_quic(
    spawn: ::smol::channel::Sender<Task>,
    index: usize,
    endpoint: quinn::Endpoint,
    to: Rc<Commander<Bridged>>,
    pending: Rc<Cell<usize>>,
) {
    while let Some(incoming) = endpoint.accept().await {
        if !slot(&pending) {
            continue;
        }
        let peer = Peer {
            listener: index,
            remote: Remote::Quic(incoming.remote_address()),
        };
        let handshake = async move {
            quic::accept(incoming)
                .await
                .map(|link| Secure::Quic(Box::new(link)))
        };
        let task = accepted(peer, handshake, to.clone(), pending.clone());
        if spawn.send(Box::pin(task)).await.is_err() {
            return;
        }
    }
}

/// Carries plaintext both ways between a secure connection and the bridge's end of its pair
/// until both directions end: the peer's end of stream shuts the pair for writing (the adapter
/// reads its end), and the adapter's close ends the secure stream the way [`crate::smol`] ends
/// one (TLS close_notify, a finished QUIC stream).
async fn carry(secure: Secure, ours: UnixStream) {
    let (plain_in, mut plain_out) = (ours.clone(), ours);
    match secure {
        Secure::Tls(tls, tcp) => {
            let (r, mut w) = ::smol::io::split(*tls);
            let inbound = async {
                pump(r, &mut plain_out).await;
                let _ = plain_out.shutdown(std::net::Shutdown::Write);
            };
            let outbound = async {
                pump(plain_in, &mut w).await;
                let _ = bounded(w.close()).await;
                shut_down(&tcp);
            };
            ::smol::future::zip(inbound, outbound).await;
        }
        Secure::Quic(link) => {
            let quic::Link {
                connection,
                mut send,
                recv,
            } = *link;
            let inbound = async {
                pump(recv, &mut plain_out).await;
                let _ = plain_out.shutdown(std::net::Shutdown::Write);
            };
            let outbound = async {
                pump(plain_in, &mut send).await;
                quic::finish(send, connection).await;
            };
            ::smol::future::zip(inbound, outbound).await;
        }
    }
}

/// Copies until end of stream or an error, flushing each piece (a TLS stream may hold written
/// bytes until flushed).
async fn pump(mut from: impl AsyncRead + Unpin, to: &mut (impl AsyncWrite + Unpin)) {
    loop {
        match crate::host::read_some(&mut from).await {
            Err(_) => return,
            Ok(bytes) if bytes.is_empty() => return,
            Ok(bytes) => {
                if to.write_all(&bytes).await.is_err() || to.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}
