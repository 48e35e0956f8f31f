//! The blocking adapter: any [`HostMachine`] over TCP and Unix stream sockets with std alone, on
//! one thread, with no async runtime.
//!
//! Every socket is non-blocking; the thread sleeps in `poll(2)` (through `rustix::event::poll`)
//! until a socket is ready, the machine's next deadline ([`Host::wait`]) comes, or the
//! [`StopSignal`] fires. Bytes the machine sends are buffered per connection and written as the
//! socket takes them, so a slow peer never blocks the others. A dial is the exception: it
//! connects in place, for at most [`DIAL_TIMEOUT`].
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

use crate::host::{
    ACCEPT_RETRY, Commands, Endpoint, Event, Hooks, Host, HostMachine, Io, Listener,
    MAX_EVENTS_PER_PASS, Peer, READ_CHUNK, Remote, shut_down,
};

/// The longest a dial may hold the loop: dials connect in place, not through `poll`, so this
/// bounds how long the other connections wait behind one unreachable target.
pub const DIAL_TIMEOUT: Duration = Duration::from_millis(500);

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
    closing: bool,
}

#[derive(Default)]
struct BlockingIo {
    conns: BTreeMap<ConnId, Conn>,
    pending: VecDeque<Event>,
}

impl Io for BlockingIo {
    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) {
            c.out.extend(bytes);
        }
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.closing = true;
        }
    }

    fn queued(&self, conn: ConnId) -> usize {
        self.conns
            .get(&conn)
            .filter(|c| !c.closing)
            .map_or(0, |c| c.out.len())
    }

    fn cut(&mut self, conn: ConnId) {
        self.drop_conn(conn);
    }

    fn dial(&mut self, conn: ConnId, to: Endpoint) {
        let sock = match to {
            Endpoint::Tcp(addr) => TcpStream::connect_timeout(&addr, DIAL_TIMEOUT).map(Sock::Tcp),
            Endpoint::Unix(path) => UnixStream::connect(path).map(Sock::Unix),
            Endpoint::Tls(_) | Endpoint::Quic(_) => Err(secure_unsupported()),
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
    fn add(&mut self, conn: ConnId, sock: Sock) {
        let c = Conn {
            sock,
            out: VecDeque::new(),
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
                    Ok(n) => drop(c.out.drain(..n)),
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
            (Sock::Tcp(s), Remote::Tcp(addr))
        }
        Listener::Unix(l) => {
            let (s, _) = l.accept()?;
            s.set_nonblocking(true)?;
            let remote = Remote::unix(&s);
            (Sock::Unix(s), remote)
        }
        Listener::Tls(..) | Listener::Quic(..) => return Err(secure_unsupported()),
    })
}

/// This loop moves plain bytes only: TLS and QUIC run on the smol adapter.
fn secure_unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "the blocking adapter has no TLS or QUIC: use the smol adapter",
    )
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
    for l in &listeners {
        match l {
            Listener::Tcp(l) => l.set_nonblocking(true)?,
            Listener::Unix(l) => l.set_nonblocking(true)?,
            Listener::Tls(..) | Listener::Quic(..) => return Err(secure_unsupported()),
        }
    }
    let mut io = BlockingIo::default();
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

        let (stopped, commanded, ready_listeners, ready_conns) = {
            let mut fds = Vec::with_capacity(2 + listeners.len() + io.conns.len());
            fds.push(PollFd::new(&stop.0, PollFlags::IN));
            // Without commands the slot stays (indices line up) and asks for nothing.
            match commands {
                Some(c) => fds.push(PollFd::from_borrowed_fd(c.fd(), PollFlags::IN)),
                None => fds.push(PollFd::new(&stop.0, PollFlags::empty())),
            }
            for (l, p) in listeners.iter().zip(&paused) {
                // A paused listener stays in the list (indices line up) but asks for nothing.
                let flags = if p.is_some() {
                    PollFlags::empty()
                } else {
                    PollFlags::IN
                };
                fds.push(PollFd::from_borrowed_fd(listener_fd(l), flags));
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
            let ls: Vec<usize> = (0..listeners.len())
                .filter(|&i| paused[i].is_none() && ready(&fds[2 + i]))
                .collect();
            let cs: Vec<ConnId> = io
                .conns
                .keys()
                .zip(&fds[2 + listeners.len()..])
                .filter(|(_, f)| {
                    f.revents()
                        .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
                })
                .map(|(&id, _)| id)
                .collect();
            (stopped, commanded, ls, cs)
        };
        if stopped {
            return Ok(());
        }
        if let Some(c) = commands.filter(|_| commanded) {
            host.command(crate::now(), c.ready(), &mut io)?;
        }

        for index in ready_listeners {
            for _ in 0..MAX_EVENTS_PER_PASS {
                let (sock, remote) = match accept(&listeners[index]) {
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
