//! The blocking adapter: any [`HostMachine`] over TCP and Unix stream sockets with std alone, on
//! one thread, with no async runtime; TLS and QUIC through the bridge (`drivers::bridge`), whose
//! thread runs the handshakes and hands each secure connection's plaintext over on a Unix socket
//! that this loop polls like any other.
//!
//! Every socket is non-blocking; the thread sleeps in `poll(2)` (through `rustix::event::poll`)
//! until a socket is ready, the machine's next deadline ([`Host::wait`]) comes, or the
//! [`StopSignal`] fires. Bytes the machine sends are buffered per connection and written as the
//! socket takes them, so a slow peer never blocks the others. A plain TCP or Unix dial is the
//! exception: it connects in place, for at most [`DIAL_TIMEOUT`] (a TLS or QUIC dial runs on the
//! bridge).
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
//! let (stopper, stopped) = weft_drivers::blocking::stop_signal()?;
//! let server = std::thread::spawn(move || weft_drivers::blocking::run(&mut host, listeners, &stopped));
//! // ... later:
//! stopper.stop();
//! server.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use weft_proto::core::ConnId;

use crate::bridge::{Bridge, Bridged};
use crate::host::{
    ACCEPT_RETRY, Backlog, Commands, Endpoint, Event, Hooks, Host, HostMachine, Io, Listener,
    MAX_EVENTS_PER_PASS, Peer, Queued, READ_CHUNK, Remote, shut_down,
};

/// The longest a dial may hold the loop: dials connect in place, not through `poll`, so this
/// bounds how long the other connections wait behind one unreachable target.
pub const DIAL_TIMEOUT: Duration = Duration::from_millis(500);

/// The poll slots before the listeners': the stop signal, commands, the bridge.
const FIXED_FDS: usize = 3;

/// Tells a running [`run`] to return. Cloning is not needed: stop from any thread by reference.
#[derive(Debug)]
pub struct Stopper(UnixStream);

impl Stopper {
    /// Makes [`run`] return at its next wakeup, which this causes at once.
    pub fn stop(&self) {
        let _ = (&self.0).write(&[1]);
    }
}

/// The end of a stop signal [`run`] watches.
#[derive(Debug)]
pub struct StopSignal(UnixStream);

/// A connected pair: [`Stopper::stop`] makes a [`run`] watching the [`StopSignal`] return.
pub fn stop_signal() -> io::Result<(Stopper, StopSignal)> {
    let (a, b) = UnixStream::pair()?;
    a.set_nonblocking(true)?;
    Ok((Stopper(a), StopSignal(b)))
}

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Unix(s) => s.as_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
}

struct Conn {
    sock: Sock,
    out: VecDeque<u8>,
    /// Where the messages in `out` begin and end, for [`Io::queued`].
    backlog: Backlog,
    closing: bool,
}

#[derive(Default)]
struct BlockingIo {
    conns: BTreeMap<ConnId, Conn>,
    pending: VecDeque<Event>,
    /// TLS and QUIC, started with the first secure listener or dial, and what it hands back.
    bridge: Option<(Bridge, Commands<Bridged>)>,
}

impl Io for BlockingIo {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) {
            c.backlog.push(bytes.len());
            c.out.extend(bytes);
        }
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.closing = true;
        }
    }

    fn queued(&self, conn: ConnId) -> Queued {
        self.conns
            .get(&conn)
            .filter(|c| !c.closing)
            .map_or_else(Queued::default, |c| c.backlog.queued())
    }

    fn cut(&mut self, conn: ConnId) {
        self.drop_conn(conn);
    }

    fn dial(&mut self, conn: ConnId, to: Endpoint) {
        let sock = match to {
            Endpoint::Tcp(addr) => TcpStream::connect_timeout(&addr, DIAL_TIMEOUT).map(Sock::Tcp),
            Endpoint::Unix(path) => UnixStream::connect(path).map(Sock::Unix),
            Endpoint::Tls(_) | Endpoint::Quic(_) => match self.bridge(Vec::new()) {
                Ok(bridge) => return bridge.dial(conn, to),
                Err(e) => Err(e),
            },
        };
        let sock = sock.and_then(|s| {
            match &s {
                Sock::Tcp(t) => t.set_nonblocking(true)?,
                Sock::Unix(u) => u.set_nonblocking(true)?,
            }
            Ok(s)
        });
        match sock {
            Ok(sock) => {
                self.add(conn, sock);
                self.pending.push_back(Event::Dialled { conn });
            }
            Err(_) => self.pending.push_back(Event::DialFailed { conn }),
        }
    }
}

impl BlockingIo {
    /// The bridge, started now with `listeners` if it is not running yet.
    fn bridge(&mut self, listeners: Vec<(usize, Listener)>) -> io::Result<&Bridge> {
        if self.bridge.is_none() {
            self.bridge = Some(Bridge::start(listeners)?);
        }
        Ok(&self.bridge.as_ref().expect("started above").0)
    }

    /// Takes what the bridge handed back: secure connections opened, dials answered.
    fn bridged(&mut self, host_conn: &mut impl FnMut() -> ConnId) {
        let Some((_, ready)) = &self.bridge else {
            return;
        };
        for b in ready.ready() {
            match b {
                Bridged::Accepted { peer, stream } => {
                    let conn = host_conn();
                    self.add(conn, Sock::Unix(stream));
                    self.pending.push_back(Event::Opened { conn, peer });
                }
                Bridged::Dialled {
                    conn,
                    stream: Ok(stream),
                } => {
                    self.add(conn, Sock::Unix(stream));
                    self.pending.push_back(Event::Dialled { conn });
                }
                Bridged::Dialled {
                    conn,
                    stream: Err(_),
                } => {
                    self.pending.push_back(Event::DialFailed { conn });
                }
            }
        }
    }

    fn add(&mut self, conn: ConnId, sock: Sock) {
        let c = Conn {
            sock,
            out: VecDeque::new(),
            backlog: Backlog::default(),
            closing: false,
        };
        self.conns.insert(conn, c);
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            shut_down(c.sock.fd());
            self.pending.push_back(Event::Closed { conn });
        }
    }

    /// Writes what each socket takes now; a closing connection whose bytes are all out is shut
    /// and reported closed.
    fn flush(&mut self) {
        let mut gone = Vec::new();
        for (&id, c) in &mut self.conns {
            while !c.out.is_empty() {
                let (head, _) = c.out.as_slices();
                match c.sock.write(head) {
                    Ok(0) => break,
                    Ok(n) => {
                        c.out.drain(..n);
                        c.backlog.taken(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        gone.push(id);
                        break;
                    }
                }
            }
            if c.closing && c.out.is_empty() {
                gone.push(id);
            }
        }
        for id in gone {
            self.drop_conn(id);
        }
    }

    /// Reads once from a ready connection.
    fn read(&mut self, conn: ConnId, buf: &mut [u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match c.sock.read(buf) {
            Ok(0) => self.drop_conn(conn),
            Ok(n) => self.pending.push_back(Event::Received {
                conn,
                bytes: buf[..n].to_vec(),
            }),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => self.drop_conn(conn),
        }
    }
}

fn accept(listener: &Listener) -> io::Result<(Sock, Remote)> {
    Ok(match listener {
        Listener::Tcp(l) => {
            let (s, addr) = l.accept()?;
            s.set_nonblocking(true)?;
            crate::host::keep_alive(&s);
            (Sock::Tcp(s), Remote::Tcp(addr))
        }
        Listener::Unix(l) => {
            let (s, _) = l.accept()?;
            s.set_nonblocking(true)?;
            let remote = Remote::unix(&s);
            (Sock::Unix(s), remote)
        }
        Listener::Tls(..) | Listener::Quic(..) => {
            unreachable!("secure listeners are the bridge's")
        }
    })
}

fn listener_fd(listener: &Listener) -> BorrowedFd<'_> {
    match listener {
        Listener::Tcp(l) | Listener::Tls(l, _) => l.as_fd(),
        Listener::Unix(l) => l.as_fd(),
        Listener::Quic(u, _) => u.as_fd(),
    }
}

/// Runs `host` over `listeners` on this thread until `stop` fires (`Ok`) or the store fails.
/// Accepted connections report [`Peer::listener`] as their listener's index in `listeners`.
pub fn run<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    stop: &StopSignal,
) -> io::Result<()> {
    drive(host, listeners, None, stop)
}

/// [`run`], also feeding the machine what the application sends through the [`Commander`]
/// paired with `commands` ([`crate::host::commands`]).
///
/// [`Commander`]: crate::host::Commander
pub fn run_commanded<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    commands: &Commands<M::Input>,
    stop: &StopSignal,
) -> io::Result<()> {
    drive(host, listeners, Some(commands), stop)
}

fn drive<M: HostMachine, H: Hooks<M>>(
    host: &mut Host<M, H>,
    listeners: Vec<Listener>,
    commands: Option<&Commands<M::Input>>,
    stop: &StopSignal,
) -> io::Result<()> {
    let mut io = BlockingIo::default();
    // Secure listeners go to the bridge; their slots stay (indices line up) and ask for nothing.
    let mut secure = Vec::new();
    let mut plain: Vec<Option<Listener>> = Vec::with_capacity(listeners.len());
    for (index, l) in listeners.into_iter().enumerate() {
        match &l {
            Listener::Tcp(t) => t.set_nonblocking(true)?,
            Listener::Unix(u) => u.set_nonblocking(true)?,
            Listener::Tls(..) | Listener::Quic(..) => {
                secure.push((index, l));
                plain.push(None);
                continue;
            }
        }
        plain.push(Some(l));
    }
    if !secure.is_empty() {
        io.bridge(secure)?;
    }
    let listeners = plain;
    let mut paused: Vec<Option<Instant>> = vec![None; listeners.len()];
    let mut buf = vec![0u8; READ_CHUNK];
    host.start(crate::now(), &mut io)?;
    loop {
        io.flush();
        let wait = if io.pending.is_empty() {
            host.wait(crate::now())
        } else {
            Some(Duration::ZERO)
        };
        let clock = Instant::now();
        for p in &mut paused {
            *p = p.filter(|until| *until > clock);
        }
        let wait = match paused.iter().flatten().min() {
            Some(until) => Some(wait.map_or(*until - clock, |w| w.min(*until - clock))),
            None => wait,
        };
        // A wait too long for a timespec is as good as none.
        let timeout = wait.and_then(|d| Timespec::try_from(d).ok());

        let (stopped, commanded, bridged, ready_listeners, ready_conns) = {
            let mut fds = Vec::with_capacity(FIXED_FDS + listeners.len() + io.conns.len());
            fds.push(PollFd::new(&stop.0, PollFlags::IN));
            // Without commands or a bridge the slot stays (indices line up) and asks for nothing.
            match commands {
                Some(c) => fds.push(PollFd::from_borrowed_fd(c.fd(), PollFlags::IN)),
                None => fds.push(PollFd::new(&stop.0, PollFlags::empty())),
            }
            match &io.bridge {
                Some((_, ready)) => fds.push(PollFd::from_borrowed_fd(ready.fd(), PollFlags::IN)),
                None => fds.push(PollFd::new(&stop.0, PollFlags::empty())),
            }
            for (l, p) in listeners.iter().zip(&paused) {
                // A paused or bridged listener stays in the list (indices line up) but asks for
                // nothing.
                match l {
                    Some(l) if p.is_none() => {
                        fds.push(PollFd::from_borrowed_fd(listener_fd(l), PollFlags::IN));
                    }
                    _ => fds.push(PollFd::new(&stop.0, PollFlags::empty())),
                }
            }
            for c in io.conns.values() {
                let mut flags = PollFlags::IN;
                if !c.out.is_empty() {
                    flags |= PollFlags::OUT;
                }
                fds.push(PollFd::from_borrowed_fd(c.sock.fd(), flags));
            }
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let ready = |f: &PollFd<'_>| !f.revents().is_empty();
            let stopped = ready(&fds[0]);
            let commanded = ready(&fds[1]);
            let bridged = ready(&fds[2]);
            let ls: Vec<usize> = (0..listeners.len())
                .filter(|&i| paused[i].is_none() && ready(&fds[FIXED_FDS + i]))
                .collect();
            let cs: Vec<ConnId> = io
                .conns
                .keys()
                .zip(&fds[FIXED_FDS + listeners.len()..])
                .filter(|(_, f)| {
                    f.revents()
                        .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
                })
                .map(|(&id, _)| id)
                .collect();
            (stopped, commanded, bridged, ls, cs)
        };
        if stopped {
            return Ok(());
        }
        if let Some(c) = commands.filter(|_| commanded) {
            host.command(crate::now(), c.ready(), &mut io)?;
        }

        if bridged {
            io.bridged(&mut || host.conn_id());
        }
        for index in ready_listeners {
            let Some(listener) = &listeners[index] else {
                continue;
            };
            for _ in 0..MAX_EVENTS_PER_PASS {
                let (sock, remote) = match accept(listener) {
                    Ok(accepted) => accepted,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        // Out of descriptors, or a failed handshake: poll would report the
                        // listener ready at once, so leave it out for a while.
                        paused[index] = Some(Instant::now() + ACCEPT_RETRY);
                        break;
                    }
                };
                let conn = host.conn_id();
                io.add(conn, sock);
                let peer = Peer {
                    listener: index,
                    remote,
                };
                io.pending.push_back(Event::Opened { conn, peer });
            }
        }
        for conn in ready_conns {
            io.read(conn, &mut buf);
        }

        let take = io.pending.len().min(MAX_EVENTS_PER_PASS);
        let events: Vec<Event> = io.pending.drain(..take).collect();
        host.pass(crate::now(), events, &mut io)?;
    }
}
