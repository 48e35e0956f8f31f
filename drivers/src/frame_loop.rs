//! Non-blocking socket glue for loops that own their tick: a game's frame, a device's superloop,
//! any loop that may not wait on the network (issue #7; `drivers/examples/game_loop.rs` uses it).
//!
//! The runtime adapters ([`crate::smol`], [`crate::blocking`]) wait on sockets; a frame loop
//! cannot. Everything here returns at once and is called again on the next pass:
//!
//! - [`connect_tcp`] starts a TCP connect on a socket that is non-blocking from birth, and
//!   [`connect_result`] asks the kernel, without waiting, whether it finished;
//! - [`connect_unix`] connects a Unix stream socket without waiting;
//! - [`WsClient`] is a WebSocket client (RFC 6455 through `tungstenite`) driven a step at a time:
//!   connect, HTTP upgrade, reads and writes each go as far as the socket allows and resume on
//!   the next [`WsClient::pump`] or [`WsClient::flush`]. It dials `ws://` with an IP literal only,
//!   since resolving a name could block a frame for seconds: resolve on another thread and hand
//!   the address in.
//!
//! Nothing here knows a protocol: a text message in is a [`WsEvent::Text`] out, and a machine
//! decides what it means.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType, socket_with};
use tungstenite::handshake::client::{ClientHandshake, Response};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::{Message, WebSocket};

/// The most messages one [`WsClient::pump`] reads, so a flood on one socket cannot eat a frame;
/// the rest is read on the next pass.
pub const MAX_READS_PER_PASS: usize = 64;

/// Starts a TCP connect to `addr` without waiting for it: the socket is non-blocking from birth,
/// so `connect` returns at once and [`connect_result`] says later how it went.
pub fn connect_tcp(addr: SocketAddr) -> io::Result<TcpStream> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => Ok(TcpStream::from(fd)),
        Err(e) => Err(e.into()),
    }
}

/// Whether a connect started by [`connect_tcp`] finished: `Some(Ok)` connected, `Some(Err)`
/// refused or failed, `None` still under way. Asks the kernel; never waits.
pub fn connect_result(stream: &TcpStream) -> Option<io::Result<()>> {
    match stream.take_error() {
        Ok(Some(e)) | Err(e) => return Some(Err(e)),
        Ok(None) => {}
    }
    match stream.peer_addr() {
        Ok(_) => Some(Ok(())),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
        Err(e) => Some(Err(e)),
    }
}

/// Connects a non-blocking Unix stream socket to `path` without waiting: `Ok(None)` when the
/// listener's backlog is full (try again on a later pass).
pub fn connect_unix(path: &Path) -> io::Result<Option<UnixStream>> {
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    match rustix::net::connect(&fd, &SocketAddrUnix::new(path)?) {
        Ok(()) => Ok(Some(UnixStream::from(fd))),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What a [`WsClient`] reports from one [`WsClient::pump`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WsEvent {
    /// The upgrade finished: the socket is open.
    Opened,
    /// A text message arrived.
    Text(String),
    /// The open socket closed, by either side or by an error.
    Closed,
    /// The connect or the upgrade failed; the socket never opened.
    DialFailed,
}

enum State {
    /// The TCP connect is under way.
    Connecting {
        tcp: TcpStream,
        url: String,
    },
    /// The HTTP upgrade is under way, resumed where it stopped.
    Upgrading(MidHandshake<ClientHandshake<TcpStream>>),
    Open(Box<WebSocket<TcpStream>>),
    Gone,
}

/// A WebSocket client that never blocks; see the [module docs](self).
///
/// Call [`WsClient::pump`] once a pass to move the connect and upgrade along and read what
/// arrived, [`WsClient::send`] to queue a message once it is open, and [`WsClient::flush`] at the
/// end of a pass to write what is queued.
pub struct WsClient {
    state: State,
}

impl std::fmt::Debug for WsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Connecting { .. } => "connecting",
            State::Upgrading(_) => "upgrading",
            State::Open(_) => "open",
            State::Gone => "gone",
        };
        f.debug_struct("WsClient").field("state", &state).finish()
    }
}

impl WsClient {
    /// Starts dialling `url`, `ws://<ip>:<port>/…`: a host name or a `wss://` URL is refused at
    /// once (no DNS and no TLS inside a pass).
    pub fn dial(url: &str) -> io::Result<Self> {
        let authority = url
            .strip_prefix("ws://")
            .and_then(|rest| rest.split(['/', '?', '#']).next())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "only ws:// is dialled"))?;
        let addr: SocketAddr = authority.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an IP address and port: resolve names off the loop and dial the address",
            )
        })?;
        Ok(Self {
            state: State::Connecting {
                tcp: connect_tcp(addr)?,
                url: url.to_owned(),
            },
        })
    }

    /// Whether the socket is open.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Moves the connect and the upgrade along, then reads what arrived, at most
    /// [`MAX_READS_PER_PASS`] messages, appending what happened to `events`. Answers to pings
    /// are written before it returns, as far as the socket takes them.
    pub fn pump(&mut self, events: &mut Vec<WsEvent>) {
        let state = std::mem::replace(&mut self.state, State::Gone);
        self.state = match state {
            State::Connecting { tcp, url } => match connect_result(&tcp) {
                None => State::Connecting { tcp, url },
                Some(Err(_)) => {
                    events.push(WsEvent::DialFailed);
                    State::Gone
                }
                Some(Ok(())) => upgraded(tungstenite::client(url.as_str(), tcp), events),
            },
            State::Upgrading(mid) => upgraded(mid.handshake(), events),
            other => other,
        };
        let State::Open(ws) = &mut self.state else {
            return;
        };
        for _ in 0..MAX_READS_PER_PASS {
            match ws.read() {
                Ok(Message::Text(text)) => events.push(WsEvent::Text(text.as_str().to_owned())),
                // Pings are answered by tungstenite; binary, pong and close frames carry no text
                // (after a close, the next read reports the end).
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    events.push(WsEvent::Closed);
                    self.state = State::Gone;
                    return;
                }
            }
        }
        self.flush();
    }

    /// Queues a text message; `false` when the socket is not open (gone, or not yet open).
    pub fn send(&mut self, text: String) -> bool {
        let State::Open(ws) = &mut self.state else {
            return false;
        };
        match ws.send(Message::text(text)) {
            // Queued inside tungstenite when the socket would block; a later flush writes it.
            Ok(()) => true,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(_) => {
                self.state = State::Gone;
                false
            }
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    pub fn flush(&mut self) {
        if let State::Open(ws) = &mut self.state {
            match ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.state = State::Gone,
            }
        }
    }

    /// Starts the closing handshake and lets the socket go without waiting for the answer.
    pub fn close(&mut self) {
        if let State::Open(ws) = &mut self.state {
            let _ = ws.close(None);
            let _ = ws.flush();
        }
        self.state = State::Gone;
    }
}

/// The state after a step of the upgrade.
fn upgraded(
    result: Result<(WebSocket<TcpStream>, Response), HandshakeError<ClientHandshake<TcpStream>>>,
    events: &mut Vec<WsEvent>,
) -> State {
    match result {
        Ok((ws, _)) => {
            events.push(WsEvent::Opened);
            State::Open(Box::new(ws))
        }
        Err(HandshakeError::Interrupted(mid)) => State::Upgrading(mid),
        Err(HandshakeError::Failure(_)) => {
            events.push(WsEvent::DialFailed);
            State::Gone
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;

    /// Pumps `ws` (pausing 2 ms between passes, as a loop's tick would) until `want` has shown
    /// up, for at most 2 000 passes; returns every event seen.
    fn pump_until(ws: &mut WsClient, want: &WsEvent) -> Vec<WsEvent> {
        let mut events = Vec::new();
        for _ in 0..2_000 {
            ws.pump(&mut events);
            if events.contains(want) {
                return events;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("{want:?} never came; saw {events:?}");
    }

    #[test]
    fn a_name_or_a_wss_url_is_refused_at_once_rather_than_resolved_inside_a_pass() {
        for url in [
            "ws://localhost:8787/",
            "wss://127.0.0.1:8787/",
            "http://127.0.0.1:1/",
        ] {
            let e = WsClient::dial(url).expect_err(url);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{url}");
        }
    }

    #[test]
    fn a_dial_to_a_closed_port_reports_dial_failed_and_never_opened() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut ws = WsClient::dial(&format!("ws://127.0.0.1:{port}/")).unwrap();
        let events = pump_until(&mut ws, &WsEvent::DialFailed);
        assert_eq!(events, vec![WsEvent::DialFailed]);
        assert!(!ws.is_open());
        assert!(
            !ws.send("late".into()),
            "a socket that never opened takes nothing"
        );
    }

    #[test]
    fn a_socket_opens_carries_text_both_ways_and_reports_the_servers_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The far end, blocking on its own thread: echoes one message, then closes.
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let mut ws = tungstenite::accept(tcp).unwrap();
            let text = ws.read().unwrap().into_text().unwrap();
            ws.send(Message::text(format!("echo {text}"))).unwrap();
            ws.close(None).unwrap();
            // Reads until the client's answer to the close ends the connection.
            while ws.read().is_ok() {}
        });
        let mut ws = WsClient::dial(&format!("ws://{addr}/path?x=1")).unwrap();
        assert!(
            !ws.send("too early".into()),
            "nothing is sent before it opens"
        );
        let events = pump_until(&mut ws, &WsEvent::Opened);
        assert_eq!(events, vec![WsEvent::Opened]);
        assert!(ws.is_open());
        assert!(ws.send("hi".into()));
        ws.flush();
        let events = pump_until(&mut ws, &WsEvent::Closed);
        assert_eq!(
            events,
            vec![WsEvent::Text("echo hi".into()), WsEvent::Closed],
            "the text, then the close, in order"
        );
        assert!(!ws.is_open());
        server.join().unwrap();
    }

    #[test]
    fn a_unix_connect_returns_a_connected_non_blocking_stream() {
        let dir = std::env::temp_dir().join(format!("weft-frame-loop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let mut stream = connect_unix(&path)
            .unwrap()
            .expect("an empty backlog takes it");
        let (mut far, _) = listener.accept().unwrap();
        use std::io::{Read, Write};
        let mut buf = [0u8; 8];
        // Nothing sent yet: a read says so at once instead of waiting.
        let e = stream.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        far.write_all(b"ping").unwrap();
        far.flush().unwrap();
        let mut got = Vec::new();
        for _ in 0..1_000 {
            match stream.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            if got.len() == 4 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, b"ping");
        // Nobody listens any more: refused, not waited on.
        drop(listener);
        std::fs::remove_file(&path).unwrap();
        assert!(connect_unix(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
