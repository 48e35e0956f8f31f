//! The host layer every runtime adapter shares: how a machine's outputs become effects a runtime
//! executes, how transport events become its inputs, and the one loop core that follows the
//! machine contract (`weft_proto::core::Machine`).
//!
//! A protocol implements [`HostMachine`] once, mapping its own `Input`/`Output` to and from the
//! neutral [`Event`] and [`Effect`] vocabulary. A runtime adapter ([`crate::smol`],
//! `crate::tokio`, [`crate::blocking`]) only moves bytes: it implements [`Io`] (send, close,
//! dial), turns what its sockets do into [`Event`]s, and runs passes of the [`Host`] core:
//!
//! 1. wait for transport events, at most until [`Host::wait`];
//! 2. hand them to [`Host::pass`], which feeds at most [`MAX_EVENTS_PER_PASS`] of them, draining
//!    the machine after each (the drain rule), then runs the machine's timeout if it is due.
//!
//! The core owns the rules that must not differ between runtimes: outputs run strictly in order;
//! consecutive store changes are committed as one batch *before* the next output goes out; a
//! deadline that does not advance is logged and pushed forward by [`STALL_STEP`] instead of
//! spinning a core; a pass does bounded work so a flood of input cannot starve timers.
//! See `docs/embedding.md` for the same rules from an embedder's side.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};

pub use crate::tls::{SecureDial, TlsServer};
pub use write_queue::Queued;
pub(crate) use write_queue::{Backlog, Outbox, OutboxReader, Outboxes, outbox};

mod write_queue;

/// The most transport events one loop pass feeds the machine before it checks the machine's
/// deadline again, so a peer that floods a connection cannot starve timers (heartbeats, ack
/// timeouts) or the other connections' turn at the loop.
pub const MAX_EVENTS_PER_PASS: usize = 256;

/// How far the core pushes a deadline that does not advance: after a due `handle_timeout` that
/// produced nothing, a machine still asking to be woken at or before `now` would make the loop
/// spin; the core logs it and waits this long before trying again.
pub const STALL_STEP: Duration = Duration::from_millis(10);

/// The most dials the core keeps waiting for an answer from the transport at once; a dial asked
/// beyond it fails straight away (the machine hears `dial_failed` and retries on its own
/// schedule).
pub const MAX_PENDING_DIALS: usize = 256;

/// The most bytes one connection may hold queued for writing behind the message its socket is
/// taking (the head, which is not counted: see [`Queued::passes_bound`]). A send that finds the
/// backlog at it cuts the connection at once (what is queued is dropped, no close frame goes out, since a
/// peer this far behind would not read one) and counts it in [`Stats::slow_readers`]; the
/// machine hears [`Event::Closed`] as for any other end. This is the one bound on a reader that
/// does not keep up, for every adapter and every protocol: a Minca relay fans a publish out to
/// 63 watchers (04 Network §1.4), an AIRC realm streams to subscribers, and neither may hold
/// memory for a socket that does not read. 4 MiB is over 300 of the relay's largest frames (a
/// 12 000-character blob) and thousands of typical ones; a single message larger than it (a
/// node socket's, up to 16 MiB) still goes out whole while the backlog is under it.
pub const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// The most messages one connection may have queued behind the one being written, whatever their
/// size: [`MAX_QUEUED_BYTES`] alone would let a reader that stops hold four million one-byte
/// messages, each a heap allocation and a queue slot larger than its byte. Past it the
/// connection is cut as at the byte bound. 16 384 is four times the largest fan-out a relay
/// makes of one publish per second for a minute to a reader that has stopped.
pub const MAX_QUEUED_MESSAGES: usize = 16_384;

/// Bytes read from a connection per read call by the adapters. The buffer is one per thread
/// (`read_some`), not one per connection: a connection holds only the bytes each read
/// returned, for as long as the machine needs them.
pub const READ_CHUNK: usize = 64 * 1024;

thread_local! {
    /// The one read buffer of this thread's connection tasks ([`read_some`]).
    static READ_BUFFER: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; READ_CHUNK].into_boxed_slice());
}

/// Runs `read` on this thread's read buffer of [`READ_CHUNK`] bytes and copies out what it
/// filled (`Ready(Ok(empty))` is the end of the stream). The buffer is borrowed only inside one
/// poll, never across an await, so every connection task on the thread shares it: an idle
/// connection holds no read buffer at all, where a buffer of its own would hold 64 KiB.
pub(crate) fn poll_read_shared(
    read: impl FnOnce(&mut [u8]) -> std::task::Poll<io::Result<usize>>,
) -> std::task::Poll<io::Result<Vec<u8>>> {
    READ_BUFFER.with_borrow_mut(|buf| read(buf).map_ok(|n| buf[..n].to_vec()))
}

/// The next bytes a smol-side stream has (empty at its end), read through this thread's shared
/// buffer ([`poll_read_shared`]).
pub(crate) async fn read_some<S: ::smol::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> io::Result<Vec<u8>> {
    ::smol::future::poll_fn(|cx| {
        poll_read_shared(|buf| std::pin::Pin::new(&mut *stream).poll_read(cx, buf))
    })
    .await
}

/// How many transport events (a read of at most [`READ_CHUNK`] bytes, an accept, a close, a
/// dial's answer) may wait for an async adapter's loop: at most 16 MiB of reads. Past it a
/// reader waits before it reads again and an acceptor before it accepts, so a loop that falls
/// behind pushes back on its peers through the kernel's windows instead of buffering without end.
pub const NET_QUEUE: usize = 256;

/// How long an adapter waits before accepting again after `accept` failed (out of descriptors,
/// an aborted handshake), so a listener in trouble cannot spin a core.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// How long an accepted TCP connection may be silent before the kernel probes it (TCP keepalive,
/// which every adapter turns on for every socket it accepts): a peer that vanished without a FIN or RST (a
/// laptop closed, a NAT that forgot the flow) is found and its socket freed, instead of holding a
/// slot until the kernel's default of two hours.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);

/// The time between keepalive probes once [`KEEPALIVE_IDLE`] passed.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Unanswered keepalive probes after which the kernel ends the connection: with
/// [`KEEPALIVE_IDLE`] and [`KEEPALIVE_INTERVAL`], a dead peer is dropped within two minutes.
pub const KEEPALIVE_PROBES: u32 = 6;

/// Turns TCP keepalive on for an accepted socket, with [`KEEPALIVE_IDLE`],
/// [`KEEPALIVE_INTERVAL`] and [`KEEPALIVE_PROBES`]. Every adapter calls it on every TCP
/// connection it accepts, TLS or not; a failure (a socket already gone) is left to the reader to
/// find.
pub(crate) fn keep_alive(socket: impl AsFd) {
    use rustix::net::sockopt;
    let fd = socket.as_fd();
    let _ = sockopt::set_socket_keepalive(fd, true);
    let _ = sockopt::set_tcp_keepidle(fd, KEEPALIVE_IDLE);
    let _ = sockopt::set_tcp_keepintvl(fd, KEEPALIVE_INTERVAL);
    let _ = sockopt::set_tcp_keepcnt(fd, KEEPALIVE_PROBES);
}

/// Ends both directions of a socket: queued writes are out, and the reader sees end of file, so
/// the adapter reports [`Event::Closed`] once, from the reader. An error means it is already
/// gone.
pub(crate) fn shut_down(socket: impl AsFd) {
    let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Both);
}

/// Where a listener listens or a dial goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket path.
    Unix(PathBuf),
    /// TLS over TCP; the dial succeeds only once the certificate is verified ([`crate::tls`]).
    Tls(SecureDial),
    /// QUIC, one bidirectional stream per connection; verified as [`Endpoint::Tls`] is.
    Quic(SecureDial),
}

/// A bound, listening socket, in its std form; each adapter converts it to its own runtime's
/// type. Binding first lets a caller learn the address (TCP port 0) before the loop runs.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(std::net::TcpListener),
    /// A Unix stream listener.
    Unix(std::os::unix::net::UnixListener),
    /// A TCP listener whose connections open with a TLS handshake presenting this certificate.
    Tls(std::net::TcpListener, TlsServer),
    /// A UDP socket serving QUIC with this certificate; each connection's first bidirectional
    /// stream is the connection the machine sees.
    Quic(std::net::UdpSocket, TlsServer),
}

impl Listener {
    /// Binds `endpoint`. A Unix path that exists is an error: whether a stale socket may be
    /// removed is the caller's policy. TLS and QUIC listeners need a certificate: see
    /// [`Listener::tls`] and [`Listener::quic`].
    pub fn bind(endpoint: &Endpoint) -> io::Result<Self> {
        Ok(match endpoint {
            Endpoint::Tcp(addr) => Self::Tcp(std::net::TcpListener::bind(addr)?),
            Endpoint::Unix(path) => Self::Unix(std::os::unix::net::UnixListener::bind(path)?),
            Endpoint::Tls(_) | Endpoint::Quic(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a TLS or QUIC listener is bound with Listener::tls or Listener::quic",
                ));
            }
        })
    }

    /// Binds a TLS listener on `addr` presenting `server`.
    pub fn tls(addr: SocketAddr, server: TlsServer) -> io::Result<Self> {
        Ok(Self::Tls(std::net::TcpListener::bind(addr)?, server))
    }

    /// Binds a QUIC listener on UDP `addr` presenting `server`.
    pub fn quic(addr: SocketAddr, server: TlsServer) -> io::Result<Self> {
        Ok(Self::Quic(std::net::UdpSocket::bind(addr)?, server))
    }

    /// Where it listens (the real port when bound to port 0). A TLS listener answers with its
    /// TCP address; a QUIC listener has no plain endpoint and answers an error: see
    /// [`Listener::local_addr`].
    pub fn endpoint(&self) -> io::Result<Endpoint> {
        Ok(match self {
            Self::Tcp(l) | Self::Tls(l, _) => Endpoint::Tcp(l.local_addr()?),
            Self::Unix(l) => Endpoint::Unix(
                l.local_addr()?
                    .as_pathname()
                    .map(PathBuf::from)
                    .unwrap_or_default(),
            ),
            Self::Quic(..) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a QUIC listener has no plain endpoint",
                ));
            }
        })
    }

    /// The socket address of a TCP, TLS or QUIC listener (`None` for a Unix one).
    pub fn local_addr(&self) -> io::Result<Option<SocketAddr>> {
        Ok(match self {
            Self::Tcp(l) | Self::Tls(l, _) => Some(l.local_addr()?),
            Self::Quic(u, _) => Some(u.local_addr()?),
            Self::Unix(_) => None,
        })
    }
}

/// What the transport proves about the other end of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remote {
    /// A TCP peer at this address (which proves nothing about who it is), over TLS or not.
    Tcp(SocketAddr),
    /// A QUIC peer at this UDP address (which proves nothing about who it is either).
    Quic(SocketAddr),
    /// A local process on a Unix socket; `uid` is its user from `SO_PEERCRED`, when the kernel
    /// gave one.
    Unix {
        /// The peer's uid.
        uid: Option<u32>,
    },
}

impl Remote {
    /// The peer of a Unix stream socket, with its uid from `SO_PEERCRED`.
    pub fn unix(stream: impl AsFd) -> Self {
        let uid = rustix::net::sockopt::socket_peercred(&stream)
            .ok()
            .map(|cred| cred.uid.as_raw());
        Self::Unix { uid }
    }
}

/// A connection the host accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Which listener it came in on: its index in the list handed to the adapter.
    pub listener: usize,
    /// What the transport says about the other end.
    pub remote: Remote,
}

/// What happened on the transport, in the adapters' words.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A listener accepted a connection, named `conn` (from [`Host::conn_id`]).
    Opened {
        /// The connection.
        conn: ConnId,
        /// Who is on the other end and where it came in.
        peer: Peer,
    },
    /// Bytes arrived on a connection, in any pieces.
    Received {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A connection closed, from either side (including after an [`Io::close`]).
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// A dial the core asked for with [`Io::dial`] is open.
    Dialled {
        /// The id the core gave the dial.
        conn: ConnId,
    },
    /// A dial the core asked for with [`Io::dial`] failed.
    DialFailed {
        /// The id the core gave the dial.
        conn: ConnId,
    },
}

/// What a machine's output asks the host to do, protocol-neutral.
///
/// `T` names a dial target in the protocol's terms (an AIRC realm), `D` a change to durable state
/// (a persist or forget), `A` something for the application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Effect<T, D, A> {
    /// Write bytes to a connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Close a connection once the bytes sent before this are out.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Open a connection to a target, resolved by [`Hooks::resolve`].
    Dial(T),
    /// Change durable state; committed before the next non-store effect runs.
    Store(D),
    /// Hand something to the application ([`Hooks::deliver`]).
    Deliver(A),
    /// An output this host has no effect for (a variant newer than its mapping); counted in
    /// [`Stats::unhandled`] and logged.
    Unhandled,
}

/// A machine a host can drive: the one place a protocol says how transport events become its
/// inputs and its outputs become effects. It holds no I/O; adapters hold no protocol logic.
pub trait HostMachine: Machine {
    /// A dial target in the protocol's terms.
    type Target: Clone + fmt::Debug;
    /// A change to durable state, as the store hook takes it.
    type Durable;
    /// What the machine hands the application.
    type App;

    /// The input for a connection accepted by a listener.
    fn opened(&mut self, conn: ConnId, peer: &Peer) -> Self::Input;
    /// The input for bytes received on a connection.
    fn received(&mut self, conn: ConnId, bytes: Vec<u8>) -> Self::Input;
    /// The input for a connection that closed.
    fn closed(&mut self, conn: ConnId) -> Self::Input;
    /// The input for a dial to `target` that opened as `conn`.
    fn dialled(&mut self, conn: ConnId, target: Self::Target) -> Self::Input;
    /// The input for a dial to `target` that failed.
    fn dial_failed(&mut self, target: Self::Target) -> Self::Input;
    /// What an output asks the host to do.
    fn effect(&mut self, output: Self::Output) -> Effect<Self::Target, Self::Durable, Self::App>;
}

/// What the application supplies around a machine: its durable store, where deliveries go, how
/// targets resolve, where log lines go.
pub trait Hooks<M: HostMachine> {
    /// The inputs that restore the machine's durable state, fed before any connection opens.
    fn restore(&mut self, now: Timestamp) -> io::Result<Vec<M::Input>> {
        let _ = now;
        Ok(Vec::new())
    }

    /// Commits a batch of store changes durably, in order. The core runs no further output until
    /// this returns; an error stops the loop (an ack must never claim what is not on disk).
    fn store(&mut self, batch: &[M::Durable]) -> io::Result<()>;

    /// Takes something the machine hands the application.
    fn deliver(&mut self, app: M::App) {
        let _ = app;
    }

    /// Where a dial target lives; `None` fails the dial.
    fn resolve(&mut self, target: &M::Target) -> Option<Endpoint> {
        let _ = target;
        None
    }

    /// Writes one diagnostic line (a stalled deadline, an unhandled output).
    fn log(&mut self, line: fmt::Arguments<'_>) {
        eprintln!("weft host: {line}");
    }
}

/// Hooks with no durable store: changes are dropped. For tests, demos and machines that never
/// persist; a server whose acks promise durability needs a real store.
#[derive(Clone, Copy, Debug, Default)]
pub struct Volatile;

impl<M: HostMachine> Hooks<M> for Volatile {
    fn store(&mut self, _batch: &[M::Durable]) -> io::Result<()> {
        Ok(())
    }
}

/// What an adapter does for the core: move bytes and open connections.
pub trait Io {
    /// Queues bytes on a connection; an unknown or closing connection drops them (its
    /// [`Event::Closed`] follows, so the machine hears of it).
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>);
    /// Closes a connection after what was queued before is written, then reports
    /// [`Event::Closed`].
    fn close(&mut self, conn: ConnId);
    /// Opens a connection to `to` under the id `conn`, reporting [`Event::Dialled`] or
    /// [`Event::DialFailed`].
    fn dial(&mut self, conn: ConnId, to: Endpoint);
    /// What is queued on `conn` that its socket has not taken yet, the message being written
    /// apart from those behind it (nothing for an unknown or closing connection); the core holds
    /// the backlog behind the head under [`MAX_QUEUED_BYTES`].
    fn queued(&self, conn: ConnId) -> Queued;
    /// Ends `conn` now, dropping what is queued, then reports [`Event::Closed`].
    fn cut(&mut self, conn: ConnId);
}

/// The sending end of a running host's command channel: inputs for its machine from the
/// application (another thread or task), fed in the order sent. See [`commands`].
#[derive(Debug)]
pub struct Commander<I> {
    tx: ::smol::channel::Sender<I>,
    wake: std::os::unix::net::UnixStream,
}

impl<I> Commander<I> {
    /// Another commander for the same host (for another thread), with its own wake descriptor.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            tx: self.tx.clone(),
            wake: self.wake.try_clone()?,
        })
    }

    /// Queues `input` for the machine and wakes the loop. `Err` gives it back when the host's
    /// loop is gone or [`COMMAND_QUEUE`] inputs are already waiting for it: the caller decides
    /// whether to wait ([`Commander::send_async`]) or give up.
    pub fn send(&self, input: I) -> Result<(), I> {
        self.tx.try_send(input).map_err(|e| e.into_inner())?;
        self.wake();
        Ok(())
    }

    /// Queues `input`, waiting while [`COMMAND_QUEUE`] inputs are already queued, and wakes the
    /// loop; `Err` gives it back when the loop is gone. For helpers off the loop (the DNS
    /// resolver, the TLS and QUIC bridge) whose answers the machine waits for and so must not be
    /// dropped. Never call it from the loop's own thread.
    pub async fn send_async(&self, input: I) -> Result<(), I> {
        self.tx.send(input).await.map_err(|e| e.into_inner())?;
        self.wake();
        Ok(())
    }

    fn wake(&self) {
        // A full wake buffer already holds a wakeup; a gone reader means the loop is gone and the
        // next send says so.
        let _ = rustix::net::send(
            &self.wake,
            &[1],
            rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
        );
    }
}

/// What woke an async adapter's loop, for [`Host::woke`].
pub(crate) enum Woke<N, I> {
    /// News from the adapter's tasks; `None` when the wait timed out.
    Net(Option<N>),
    /// A command; `None` once every [`Commander`] is gone.
    Command(Option<I>),
}

/// The receiving end of a command channel, handed to an adapter's `run_commanded`.
#[derive(Debug)]
pub struct Commands<I> {
    rx: ::smol::channel::Receiver<I>,
    wake: std::os::unix::net::UnixStream,
}

impl<I> Commands<I> {
    /// Waits for the next command (async adapters); `None` once every [`Commander`] is gone.
    pub(crate) async fn recv(&self) -> Option<I> {
        let input = self.rx.recv().await.ok();
        self.clear_wake();
        input
    }

    /// The commands waiting now, at most [`MAX_EVENTS_PER_PASS`] of them.
    pub(crate) fn ready(&self) -> Vec<I> {
        self.clear_wake();
        std::iter::from_fn(|| self.rx.try_recv().ok())
            .take(MAX_EVENTS_PER_PASS)
            .collect()
    }

    /// What `poll(2)` watches for commands (the blocking adapter).
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Empties the wake socket, whose bytes only say "look at the queue".
    fn clear_wake(&self) {
        let mut buf = [0u8; 64];
        while let Ok(n) = rustix::net::recv(&self.wake, &mut buf, rustix::net::RecvFlags::DONTWAIT)
        {
            if n.0 == 0 {
                break;
            }
        }
    }
}

/// How many commands may wait for a host's loop ([`commands`]): far more than an application or
/// a helper thread has outstanding at once; past it [`Commander::send`] gives the input back and
/// [`Commander::send_async`] waits.
pub const COMMAND_QUEUE: usize = 4096;

/// A command channel for a host's machine: the application keeps the [`Commander`], the adapter
/// takes the [`Commands`]. Bounded by [`COMMAND_QUEUE`].
pub fn commands<I>() -> io::Result<(Commander<I>, Commands<I>)> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (tx, rx) = ::smol::channel::bounded(COMMAND_QUEUE);
    Ok((Commander { tx, wake: a }, Commands { rx, wake: b }))
}

/// Counters for what the core did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Transport events fed.
    pub events: u64,
    /// Due timeouts run.
    pub timeouts: u64,
    /// Outputs executed.
    pub outputs: u64,
    /// Deadlines that did not advance (see [`STALL_STEP`]).
    pub stalls: u64,
    /// Outputs the machine's mapping had no effect for.
    pub unhandled: u64,
    /// Dials failed before reaching the transport (no address, too many pending).
    pub dials_refused: u64,
    /// Connections cut off because the writes queued behind the one being written would pass
    /// [`MAX_QUEUED_BYTES`].
    pub slow_readers: u64,
}

/// The loop core: a machine, its hooks, and the contract's rules. Adapters own one and call
/// [`start`](Host::start) once, then [`wait`](Host::wait) and [`pass`](Host::pass) forever.
pub struct Host<M: HostMachine, H: Hooks<M>> {
    machine: M,
    hooks: H,
    next_conn: u64,
    dials: BTreeMap<ConnId, M::Target>,
    refused: VecDeque<M::Target>,
    not_before: Option<Timestamp>,
    stats: Stats,
}

impl<M: HostMachine, H: Hooks<M>> Host<M, H> {
    /// A core driving `machine` with `hooks`.
    pub fn new(machine: M, hooks: H) -> Self {
        Self {
            machine,
            hooks,
            next_conn: 1,
            dials: BTreeMap::new(),
            refused: VecDeque::new(),
            not_before: None,
            stats: Stats::default(),
        }
    }

    /// The machine, to inspect.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// What the core has done so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Restores durable state and runs what the machine asks on the way.
    pub fn start(&mut self, now: Timestamp, io: &mut impl Io) -> io::Result<()> {
        for input in self.hooks.restore(now)? {
            self.machine.handle(now, input);
            self.drain(io)?;
        }
        Ok(())
    }

    /// A fresh connection id; ids are never reused.
    pub fn conn_id(&mut self) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        id
    }

    /// How long the adapter may wait for transport events before the next pass, from `now`:
    /// `None` is "until an event comes", zero is "do not block".
    pub fn wait(&self, now: Timestamp) -> Option<Duration> {
        self.deadline().map(|w| w.at.saturating_duration_since(now))
    }

    /// The machine's next wakeup as the core will honour it: pushed past a stalled deadline, and
    /// immediate while refused dials wait to be reported.
    pub fn deadline(&self) -> Option<Wakeup> {
        if !self.refused.is_empty() {
            return Some(Wakeup::new(Timestamp::from_millis(0), "dial failed"));
        }
        let mut w = self.machine.poll_timeout()?;
        if let Some(floor) = self.not_before {
            w.at = w.at.max(floor);
        }
        Some(w)
    }

    /// One loop pass at `now`: feeds at most [`MAX_EVENTS_PER_PASS`] events from `events`
    /// (leaving the rest in the iterator, which should be lazy), draining after each, then runs
    /// the machine's timeout if due. An error is the store's: the loop must stop.
    pub fn pass(
        &mut self,
        now: Timestamp,
        events: impl IntoIterator<Item = Event>,
        io: &mut impl Io,
    ) -> io::Result<()> {
        for event in events.into_iter().take(MAX_EVENTS_PER_PASS) {
            self.event(now, event, io)?;
        }
        while let Some(target) = self.refused.pop_front() {
            let input = self.machine.dial_failed(target);
            self.feed(now, input, io)?;
        }
        self.tick(now, io)
    }

    /// Runs what woke an async adapter's loop ([`crate::smol`], `crate::tokio`): a command goes
    /// in with every other command waiting ([`Host::command`]), and once every commander is gone
    /// `commands` is cleared so the loop stops listening for them; news from the adapter's tasks
    /// goes in with what else is `ready`, at most [`MAX_EVENTS_PER_PASS`] in all, each made an
    /// event by `event` (`None`: the adapter handled it itself), through [`Host::pass`]. A wait
    /// that timed out is news of nothing: the pass runs the machine's timeout.
    pub(crate) fn woke<N, A: Io>(
        &mut self,
        woke: Woke<N, M::Input>,
        commands: &mut Option<&Commands<M::Input>>,
        ready: impl FnMut() -> Option<N>,
        io: &mut A,
        mut event: impl FnMut(&mut A, N, &mut Self) -> Option<Event>,
    ) -> io::Result<()> {
        match woke {
            Woke::Command(c) => {
                if c.is_none() {
                    *commands = None;
                }
                let more = commands.map(Commands::ready).unwrap_or_default();
                self.command(crate::now(), c.into_iter().chain(more), io)
            }
            Woke::Net(first) => {
                let mut events = Vec::new();
                for n in first
                    .into_iter()
                    .chain(std::iter::from_fn(ready))
                    .take(MAX_EVENTS_PER_PASS)
                {
                    events.extend(event(io, n, self));
                }
                self.pass(crate::now(), events, io)
            }
        }
    }

    /// Feeds commands from the application, draining after each, then runs the machine's
    /// timeout if due. An error is the store's: the loop must stop.
    pub fn command(
        &mut self,
        now: Timestamp,
        inputs: impl IntoIterator<Item = M::Input>,
        io: &mut impl Io,
    ) -> io::Result<()> {
        for input in inputs.into_iter().take(MAX_EVENTS_PER_PASS) {
            self.feed(now, input, io)?;
        }
        self.tick(now, io)
    }

    fn event(&mut self, now: Timestamp, event: Event, io: &mut impl Io) -> io::Result<()> {
        self.stats.events += 1;
        let input = match event {
            Event::Opened { conn, peer } => self.machine.opened(conn, &peer),
            Event::Received { conn, bytes } => self.machine.received(conn, bytes),
            Event::Closed { conn } => match self.dials.remove(&conn) {
                // Closed before it was reported open: to the machine, a failed dial.
                Some(target) => self.machine.dial_failed(target),
                None => self.machine.closed(conn),
            },
            Event::Dialled { conn } => match self.dials.remove(&conn) {
                Some(target) => self.machine.dialled(conn, target),
                None => {
                    // Not a dial the core asked for (or already answered): nobody will use it.
                    io.close(conn);
                    return Ok(());
                }
            },
            Event::DialFailed { conn } => match self.dials.remove(&conn) {
                Some(target) => self.machine.dial_failed(target),
                None => return Ok(()),
            },
        };
        self.feed(now, input, io)
    }

    fn feed(&mut self, now: Timestamp, input: M::Input, io: &mut impl Io) -> io::Result<()> {
        // New input may have moved the machine's deadline: a stall is judged afresh.
        self.not_before = None;
        self.machine.handle(now, input);
        self.drain(io).map(drop)
    }

    fn tick(&mut self, now: Timestamp, io: &mut impl Io) -> io::Result<()> {
        let Some(due) = self.deadline().filter(|w| w.at <= now) else {
            return Ok(());
        };
        self.stats.timeouts += 1;
        self.machine.handle_timeout(now);
        let done = self.drain(io)?;
        match self.machine.poll_timeout() {
            Some(next) if done == 0 && next.at <= now => {
                self.stats.stalls += 1;
                self.not_before = Some(now.saturating_add(STALL_STEP));
                self.hooks.log(format_args!(
                    "deadline {} ({}) does not advance past {now} ({} before it); waiting {STALL_STEP:?}",
                    next.at, next.reason, due.reason
                ));
            }
            _ => self.not_before = None,
        }
        Ok(())
    }

    /// Polls until the machine is idle, executing each output in order; store changes in a run
    /// are committed together before the next other output. Returns how many outputs ran.
    fn drain(&mut self, io: &mut impl Io) -> io::Result<usize> {
        let mut batch = Vec::new();
        let mut done = 0;
        while let Some(output) = self.machine.poll() {
            done += 1;
            match self.machine.effect(output) {
                Effect::Store(change) => {
                    batch.push(change);
                    continue;
                }
                other => {
                    if !batch.is_empty() {
                        self.hooks.store(&batch)?;
                        batch.clear();
                    }
                    self.execute(other, io);
                }
            }
        }
        if !batch.is_empty() {
            self.hooks.store(&batch)?;
        }
        self.stats.outputs += done as u64;
        Ok(done)
    }

    fn execute(&mut self, effect: Effect<M::Target, M::Durable, M::App>, io: &mut impl Io) {
        match effect {
            Effect::Send { conn, bytes } => {
                if io.queued(conn).passes_bound(bytes.len()) {
                    // Once cut the connection is unknown to the adapter, so this counts it once.
                    self.stats.slow_readers += 1;
                    io.cut(conn);
                    self.hooks.log(format_args!(
                        "connection {conn:?} cut off: over {MAX_QUEUED_BYTES} bytes wait behind the one being written"
                    ));
                } else {
                    io.send(conn, bytes);
                }
            }
            Effect::Close { conn } => io.close(conn),
            Effect::Dial(target) => match self.hooks.resolve(&target) {
                Some(to) if self.dials.len() < MAX_PENDING_DIALS => {
                    let conn = self.conn_id();
                    self.dials.insert(conn, target);
                    io.dial(conn, to);
                }
                // Reported on the next pass, not fed from inside this drain, so a machine that
                // redials on every failure cannot recurse.
                _ => {
                    self.stats.dials_refused += 1;
                    self.refused.push_back(target);
                }
            },
            Effect::Deliver(app) => self.hooks.deliver(app),
            Effect::Store(_) => unreachable!("store changes are batched by drain"),
            Effect::Unhandled => {
                self.stats.unhandled += 1;
                self.hooks
                    .log(format_args!("an output with no effect here"));
            }
        }
    }
}

/// What an async adapter's tasks report to its loop; `S` is the runtime's socket type.
pub(crate) enum Report<S> {
    /// A listener accepted a socket.
    Accepted { peer: Peer, stream: S },
    /// A dial ended.
    Connected { conn: ConnId, stream: io::Result<S> },
    /// A connection's reader saw bytes or its end.
    Event(Event),
}

impl<S> Report<S> {
    /// The event this report is to the core. `start` starts a new connection's tasks and returns
    /// the sender to its writer task, kept in `writers`; a connection whose reader ended loses
    /// its writer, which has nobody left to write to.
    pub(crate) fn into_event<W, M: HostMachine, H: Hooks<M>>(
        self,
        host: &mut Host<M, H>,
        writers: &mut BTreeMap<ConnId, W>,
        start: impl FnOnce(ConnId, S) -> W,
    ) -> Event {
        match self {
            Self::Accepted { peer, stream } => {
                let conn = host.conn_id();
                writers.insert(conn, start(conn, stream));
                Event::Opened { conn, peer }
            }
            Self::Connected {
                conn,
                stream: Ok(stream),
            } => {
                writers.insert(conn, start(conn, stream));
                Event::Dialled { conn }
            }
            Self::Connected {
                conn,
                stream: Err(_),
            } => Event::DialFailed { conn },
            Self::Event(Event::Closed { conn }) => {
                writers.remove(&conn);
                Event::Closed { conn }
            }
            Self::Event(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An accepted socket after [`keep_alive`]: the kernel reads back keepalive on, with the
    /// idle time, interval and probe count of the named constants (a fresh accepted socket has
    /// keepalive off).
    #[test]
    fn keep_alive_turns_tcp_keepalive_on_with_the_named_timings() {
        use rustix::net::sockopt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(!sockopt::socket_keepalive(&accepted).unwrap());
        keep_alive(&accepted);
        assert!(sockopt::socket_keepalive(&accepted).unwrap());
        assert_eq!(sockopt::tcp_keepidle(&accepted).unwrap(), KEEPALIVE_IDLE);
        assert_eq!(
            sockopt::tcp_keepintvl(&accepted).unwrap(),
            KEEPALIVE_INTERVAL
        );
        assert_eq!(sockopt::tcp_keepcnt(&accepted).unwrap(), KEEPALIVE_PROBES);
    }

    /// A machine whose behaviour each test scripts: on `handle_timeout` it emits `on_timeout`
    /// outputs and then asks for `next`.
    #[derive(Default)]
    struct Script {
        inputs: Vec<u32>,
        out: VecDeque<u32>,
        wake: Option<Timestamp>,
        on_timeout: Vec<u32>,
        after_timeout: Option<Timestamp>,
        timeouts: u32,
    }

    impl Machine for Script {
        type Input = u32;
        type Output = u32;
        fn handle(&mut self, _now: Timestamp, input: u32) {
            self.inputs.push(input);
            // Input n < 100 asks for n outputs numbered 100 + i, odd ones being store changes;
            // larger inputs only mark which mapping made them.
            for i in 0..if input < 100 { input } else { 0 } {
                self.out.push_back(100 + i);
            }
        }
        fn poll(&mut self) -> Option<u32> {
            self.out.pop_front()
        }
        fn poll_timeout(&self) -> Option<Wakeup> {
            self.wake.map(|at| Wakeup::new(at, "scripted"))
        }
        fn handle_timeout(&mut self, _now: Timestamp) {
            self.timeouts += 1;
            self.out.extend(self.on_timeout.iter().copied());
            self.wake = self.after_timeout;
        }
    }

    impl HostMachine for Script {
        type Target = u32;
        type Durable = u32;
        type App = u32;
        fn opened(&mut self, conn: ConnId, _peer: &Peer) -> u32 {
            conn.0 as u32
        }
        fn received(&mut self, _conn: ConnId, bytes: Vec<u8>) -> u32 {
            bytes.len() as u32
        }
        fn closed(&mut self, _conn: ConnId) -> u32 {
            999
        }
        fn dialled(&mut self, _conn: ConnId, target: u32) -> u32 {
            target
        }
        fn dial_failed(&mut self, _target: u32) -> u32 {
            0
        }
        fn effect(&mut self, output: u32) -> Effect<u32, u32, u32> {
            if output % 2 == 1 {
                Effect::Store(output)
            } else {
                Effect::Send {
                    conn: ConnId(1),
                    bytes: vec![output as u8],
                }
            }
        }
    }

    /// Records every store batch and every send, in one shared order.
    #[derive(Default)]
    struct Journal {
        log: Vec<String>,
        lines: usize,
    }

    impl Hooks<Script> for Journal {
        fn store(&mut self, batch: &[u32]) -> io::Result<()> {
            self.log.push(format!("store {batch:?}"));
            Ok(())
        }
        fn log(&mut self, _line: fmt::Arguments<'_>) {
            self.lines += 1;
        }
    }

    #[derive(Default)]
    struct Sent(Vec<u8>);

    impl Io for Sent {
        fn send(&mut self, _conn: ConnId, bytes: Vec<u8>) {
            self.0.extend(bytes);
        }
        fn close(&mut self, _conn: ConnId) {}
        fn dial(&mut self, _conn: ConnId, _to: Endpoint) {}
        fn queued(&self, _conn: ConnId) -> Queued {
            Queued::default()
        }
        fn cut(&mut self, _conn: ConnId) {}
    }

    /// A transport whose sockets take bytes only when a test says so ([`Sockets::take`]).
    #[derive(Default)]
    struct Sockets {
        queues: BTreeMap<ConnId, Backlog>,
        cuts: Vec<ConnId>,
    }

    impl Sockets {
        /// `conn`'s socket takes `n` bytes.
        fn take(&mut self, conn: u64, n: usize) {
            if let Some(q) = self.queues.get_mut(&ConnId(conn)) {
                q.taken(n);
            }
        }
    }

    impl Io for Sockets {
        fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
            if !self.cuts.contains(&conn) {
                self.queues.entry(conn).or_default().push(bytes.len());
            }
        }
        fn close(&mut self, _conn: ConnId) {}
        fn dial(&mut self, _conn: ConnId, _to: Endpoint) {}
        fn queued(&self, conn: ConnId) -> Queued {
            self.queues
                .get(&conn)
                .map_or_else(Queued::default, Backlog::queued)
        }
        fn cut(&mut self, conn: ConnId) {
            self.queues.remove(&conn);
            self.cuts.push(conn);
        }
    }

    fn send(conn: u64, n: usize) -> Effect<u32, u32, u32> {
        Effect::Send {
            conn: ConnId(conn),
            bytes: vec![0; n],
        }
    }

    const MIB: usize = 1024 * 1024;

    /// What a queue holds: `head` bytes to go of the message being written, `behind` after it
    /// in `messages` messages.
    pub(super) fn q(head: usize, behind: usize, messages: usize) -> Queued {
        Queued {
            head,
            behind,
            behind_messages: messages,
        }
    }

    #[test]
    fn a_reader_more_than_the_queued_bytes_bound_behind_is_cut_off_once_and_counted() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sockets::default();
        // The message being written is the socket's; up to the bound exactly behind it,
        // everything is queued.
        host.execute(send(1, 100), &mut io);
        host.execute(send(1, MAX_QUEUED_BYTES - 1), &mut io);
        host.execute(send(1, 1), &mut io);
        host.execute(send(2, 10), &mut io);
        assert_eq!(io.queued(ConnId(1)), q(100, MAX_QUEUED_BYTES, 2));
        assert!(io.cuts.is_empty());
        assert_eq!(host.stats().slow_readers, 0);
        // One byte more: that connection is cut, the other one is untouched.
        host.execute(send(1, 1), &mut io);
        assert_eq!(io.cuts, [ConnId(1)]);
        assert_eq!(host.stats().slow_readers, 1);
        assert_eq!(io.queued(ConnId(2)), q(10, 0, 0));
        // Sends to it until its close event comes are dropped by the adapter, not counted again.
        host.execute(send(1, 1), &mut io);
        assert_eq!(host.stats().slow_readers, 1);
        assert_eq!(host.hooks.lines, 1, "the cut is logged");
    }

    /// A million one-byte messages are far under the byte bound and would still be a million
    /// allocations: a reader that stops is cut at [`MAX_QUEUED_MESSAGES`] however small they are.
    #[test]
    fn a_reader_that_stops_behind_many_small_messages_is_cut_at_the_message_bound() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sockets::default();
        for _ in 0..=MAX_QUEUED_MESSAGES {
            host.execute(send(1, 1), &mut io);
        }
        assert!(io.cuts.is_empty());
        assert_eq!(
            io.queued(ConnId(1)),
            q(1, MAX_QUEUED_MESSAGES, MAX_QUEUED_MESSAGES)
        );
        host.execute(send(1, 1), &mut io);
        assert_eq!(io.cuts, [ConnId(1)]);
        assert_eq!(host.stats().slow_readers, 1);
    }

    #[test]
    fn a_message_over_the_bound_goes_out_whole_to_a_reader_that_keeps_up() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sockets::default();
        for _ in 0..3 {
            host.execute(send(1, 6 * MIB), &mut io);
            assert_eq!(io.queued(ConnId(1)), q(6 * MIB, 0, 0));
            // The reader keeps up: the socket takes it in pieces, and the next message waits
            // for none of it.
            for _ in 0..6 {
                io.take(1, MIB);
            }
            assert_eq!(io.queued(ConnId(1)), Queued::default());
        }
        assert!(io.cuts.is_empty());
        assert_eq!(host.stats().slow_readers, 0);
    }

    #[test]
    fn a_reader_that_stops_behind_a_large_message_is_cut_once_the_backlog_behind_it_passes_the_bound()
     {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sockets::default();
        host.execute(send(1, 6 * MIB), &mut io);
        io.take(1, MIB);
        // The reader stops: what follows waits behind the head, counted up to the bound.
        for _ in 0..4 {
            host.execute(send(1, MIB), &mut io);
        }
        assert!(io.cuts.is_empty());
        assert_eq!(io.queued(ConnId(1)), q(5 * MIB, MAX_QUEUED_BYTES, 4));
        host.execute(send(1, 1), &mut io);
        assert_eq!(io.cuts, [ConnId(1)]);
        assert_eq!(host.stats().slow_readers, 1);
        // A large message behind a small one still being written is taken; the reader stops,
        // and the next send finds the backlog at the bound and cuts.
        host.execute(send(2, 1), &mut io);
        host.execute(send(2, 6 * MIB), &mut io);
        assert_eq!(io.cuts, [ConnId(1)]);
        assert_eq!(io.queued(ConnId(2)), q(1, 6 * MIB, 1));
        host.execute(send(2, 1), &mut io);
        assert_eq!(io.cuts, [ConnId(1), ConnId(2)]);
        assert_eq!(host.stats().slow_readers, 2);
    }

    fn received(n: usize) -> Event {
        Event::Received {
            conn: ConnId(1),
            bytes: vec![0; n],
        }
    }

    #[test]
    fn store_changes_are_committed_as_one_batch_before_the_next_send() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sent::default();
        // Outputs 100, 101, 102, 103: send, store, send, store.
        host.pass(Timestamp::from_millis(0), [received(4)], &mut io)
            .unwrap();
        assert_eq!(io.0, [100, 102]);
        assert_eq!(host.hooks.log, ["store [101]", "store [103]"]);
        assert_eq!(host.stats().outputs, 4);
    }

    #[test]
    fn every_output_is_drained_after_each_input_before_the_next_input() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sent::default();
        host.pass(
            Timestamp::from_millis(0),
            [received(2), received(1)],
            &mut io,
        )
        .unwrap();
        assert_eq!(io.0, [100, 100]);
        assert_eq!(host.machine().inputs, [2, 1]);
    }

    #[test]
    fn a_pass_feeds_at_most_the_cap_and_leaves_the_rest_for_the_next() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sent::default();
        let mut queue: VecDeque<Event> =
            (0..MAX_EVENTS_PER_PASS + 3).map(|_| received(0)).collect();
        host.pass(
            Timestamp::from_millis(0),
            std::iter::from_fn(|| queue.pop_front()),
            &mut io,
        )
        .unwrap();
        assert_eq!(host.machine().inputs.len(), MAX_EVENTS_PER_PASS);
        assert_eq!(queue.len(), 3);
    }

    #[test]
    fn commands_are_fed_in_the_order_sent_each_drained_before_the_next() {
        let (commander, commands) = commands::<u32>().unwrap();
        commander.send(2).unwrap();
        commander.try_clone().unwrap().send(1).unwrap();
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Sent::default();
        host.command(Timestamp::from_millis(0), commands.ready(), &mut io)
            .unwrap();
        assert_eq!(host.machine().inputs, [2, 1]);
        // Input 2 makes outputs 100 (send) and 101 (store), input 1 makes 100.
        assert_eq!(io.0, [100, 100]);
        assert!(commands.ready().is_empty());
        drop(commands);
        assert_eq!(commander.send(3), Err(3), "the loop is gone");
    }

    #[test]
    fn a_deadline_that_does_not_advance_is_logged_and_pushed_forward_by_the_stall_step() {
        let stuck = Timestamp::from_millis(1_000);
        let machine = Script {
            wake: Some(stuck),
            after_timeout: Some(stuck),
            ..Script::default()
        };
        let mut host = Host::new(machine, Journal::default());
        let mut io = Sent::default();
        let now = Timestamp::from_millis(1_005);
        host.pass(now, [], &mut io).unwrap();
        assert_eq!(host.stats().stalls, 1);
        assert_eq!(host.hooks.lines, 1);
        assert_eq!(host.wait(now), Some(STALL_STEP));
        // Within the step the stuck deadline is not run again.
        host.pass(now.saturating_add(Duration::from_millis(1)), [], &mut io)
            .unwrap();
        assert_eq!(host.machine().timeouts, 1);
        host.pass(now.saturating_add(STALL_STEP), [], &mut io)
            .unwrap();
        assert_eq!(host.machine().timeouts, 2);
    }

    #[test]
    fn a_due_timeout_that_does_work_is_not_a_stall() {
        let at = Timestamp::from_millis(1_000);
        let machine = Script {
            wake: Some(at),
            after_timeout: Some(at),
            on_timeout: vec![100],
            ..Script::default()
        };
        let mut host = Host::new(machine, Journal::default());
        let mut io = Sent::default();
        host.pass(at, [], &mut io).unwrap();
        assert_eq!(host.stats().stalls, 0);
        assert_eq!(host.wait(at), Some(Duration::ZERO));
    }

    /// Fails every dial at the transport and remembers what it was asked.
    #[derive(Default)]
    struct Dials(Vec<ConnId>);

    impl Io for Dials {
        fn send(&mut self, _conn: ConnId, _bytes: Vec<u8>) {}
        fn close(&mut self, _conn: ConnId) {}
        fn dial(&mut self, conn: ConnId, _to: Endpoint) {
            self.0.push(conn);
        }
        fn queued(&self, _conn: ConnId) -> Queued {
            Queued::default()
        }
        fn cut(&mut self, _conn: ConnId) {}
    }

    #[test]
    fn a_dial_with_no_address_is_reported_failed_on_the_next_pass_not_inside_the_drain() {
        let mut host = Host::new(Script::default(), Journal::default());
        let mut io = Dials::default();
        host.execute(Effect::Dial(9), &mut io);
        assert!(io.0.is_empty(), "no address: the transport is never asked");
        assert_eq!(host.wait(Timestamp::from_millis(5)), Some(Duration::ZERO));
        host.pass(Timestamp::from_millis(5), [], &mut io).unwrap();
        // Script's dial_failed input is 0.
        assert_eq!(host.machine().inputs, [0]);
        assert_eq!(host.stats().dials_refused, 1);
    }

    /// Resolves every target to one TCP address.
    struct Resolving;
    impl Hooks<Script> for Resolving {
        fn store(&mut self, _batch: &[u32]) -> io::Result<()> {
            Ok(())
        }
        fn resolve(&mut self, _target: &u32) -> Option<Endpoint> {
            Some(Endpoint::Tcp(SocketAddr::from(([127, 0, 0, 1], 9))))
        }
    }

    #[test]
    fn a_resolved_dial_reaches_the_transport_and_its_answer_names_the_target() {
        let mut host = Host::new(Script::default(), Resolving);
        let mut io = Dials::default();
        host.execute(Effect::Dial(42), &mut io);
        let [conn] = io.0[..] else {
            panic!("one dial expected, got {:?}", io.0)
        };
        host.pass(
            Timestamp::from_millis(0),
            [Event::Dialled { conn }],
            &mut io,
        )
        .unwrap();
        // Script's dialled input is the target.
        assert_eq!(host.machine().inputs, [42]);
        // An answer for a dial already answered is not fed again.
        host.pass(
            Timestamp::from_millis(0),
            [Event::DialFailed { conn }],
            &mut io,
        )
        .unwrap();
        assert_eq!(host.machine().inputs, [42]);
    }

    #[test]
    fn a_dial_closed_before_it_opened_is_a_failed_dial_to_the_machine() {
        let mut host = Host::new(Script::default(), Resolving);
        let mut io = Dials::default();
        host.execute(Effect::Dial(42), &mut io);
        let conn = io.0[0];
        host.pass(Timestamp::from_millis(0), [Event::Closed { conn }], &mut io)
            .unwrap();
        // Script's dial_failed input is 0 (closed would be 999).
        assert_eq!(host.machine().inputs, [0]);
        assert!(host.dials.is_empty());
    }

    #[test]
    fn an_async_adapter_keeps_a_writer_from_accept_until_its_reader_ends() {
        let mut host = Host::new(Script::default(), Resolving);
        let mut writers = BTreeMap::new();
        let peer = Peer {
            listener: 0,
            remote: Remote::Unix { uid: None },
        };
        let opened = Report::Accepted { peer, stream: "s" }.into_event(
            &mut host,
            &mut writers,
            |conn, s| (conn, s),
        );
        let Event::Opened { conn, .. } = opened else {
            panic!("an accepted socket opens: {opened:?}")
        };
        assert_eq!(writers.get(&conn), Some(&(conn, "s")));
        let closed = Report::<&str>::Event(Event::Closed { conn }).into_event(
            &mut host,
            &mut writers,
            |_, _| unreachable!("nothing to start"),
        );
        assert_eq!(closed, Event::Closed { conn });
        assert!(writers.is_empty());
    }
}
