//! `weft relay`: the [`RelayServer`] machine on real TCP sockets, under smol, with WebSocket
//! framing by async-tungstenite (Minca 04 Network §1.4).
//!
//! Each accepted TCP connection gets a task that reads the HTTP request head. An upgrade (on any
//! path) is put to the machine's [`RelayServer::admit`] first: a refusal goes back as a plain HTTP
//! response with `Connection: close`; otherwise the task answers `101`, and from then on moves
//! frames between the socket and the one task that owns the machine. `GET /health` answers
//! `{"ok":true}`; any other plain HTTP request answers 426. The client address is the TCP peer,
//! or with `trust_proxy` the last hop of `X-Forwarded-For`.
//!
//! The driver holds no protocol meaning: every frame, close and tick goes to the machine, and
//! its outputs are executed in order.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::handshake::derive_accept_key;
use async_tungstenite::tungstenite::protocol::frame::CloseFrame;
use async_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use smol::channel::{self, Receiver, Sender};
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};
use smol::stream::StreamExt;
use weft_proto::core::{ConnId, Machine};
use weft_proto::minca::relay_server::{
    Input, MAX_WS_MESSAGE_BYTES, Output, Refusal, RelayConfig, RelayServer,
};
use weft_proto::minca::turn::TurnConfig;

/// The address `weft relay` listens on when told none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// The longest HTTP request head read before the connection is dropped.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long a client may take to send its request head (a slow-loris guard).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Frames waiting for one socket's writer; a socket that falls this far behind is cut off, so a
/// slow reader cannot make the relay hold its traffic.
const OUTBOX: usize = 1024;

/// Events the machine task takes per pass before it looks at its deadline again, so a flood on
/// the sockets cannot starve the heartbeat.
const MAX_EVENTS_PER_PASS: usize = 256;

/// How long a socket the relay closed may take to answer the close before the TCP connection is
/// shut down under it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The shortest sleep the loop takes when the machine's deadline does not move, so a machine bug
/// cannot spin a core.
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// How `weft relay` runs.
#[derive(Clone, Debug)]
pub struct RelayOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Take the client address from the last hop of `X-Forwarded-For` (only behind a proxy
    /// that sets it).
    pub trust_proxy: bool,
    /// TURN passwords to hand out, if any.
    pub turn: Option<TurnConfig>,
}

enum Event {
    Admit {
        addr: IpAddr,
        reply: Sender<Result<(), Refusal>>,
    },
    Opened {
        conn: ConnId,
        addr: IpAddr,
        writer: Sender<Outgoing>,
    },
    Input(Input),
}

enum Outgoing {
    Text(String),
    Ping,
    Close(u16, &'static str),
}

/// Runs the relay until `stop` yields (or forever). `ready` gets the bound address once the
/// relay listens (the port is the OS's choice when `listen` names port 0).
pub fn serve(
    options: RelayOptions,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    smol::block_on(smol::future::or(run(options, ready), async {
        let _ = stop.recv().await;
        Ok(())
    }))
}

async fn run(options: RelayOptions, ready: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let listener = TcpListener::bind(options.listen).await?;
    let mut relay = RelayServer::new(
        RelayConfig {
            turn: options.turn.clone(),
        },
        crate::server_provider(),
        crate::os_rng(),
    );
    let (events, inbox) = channel::unbounded();
    let local = listener.local_addr()?;
    smol::spawn(accept(listener, options.trust_proxy, events)).detach();
    ready(local);

    let mut writers: BTreeMap<ConnId, Sender<Outgoing>> = BTreeMap::new();
    loop {
        let wait = relay.poll_timeout().map(|w| {
            w.at.checked_duration_since(crate::now())
                .unwrap_or(Duration::ZERO)
                .max(MIN_SLEEP)
        });
        let first = match wait {
            Some(d) => {
                smol::future::or(async { inbox.recv().await.ok() }, async {
                    smol::Timer::after(d).await;
                    None
                })
                .await
            }
            None => inbox.recv().await.ok(),
        };
        let mut batch: Vec<Event> = first.into_iter().collect();
        while batch.len() < MAX_EVENTS_PER_PASS {
            match inbox.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        for event in batch {
            let now = crate::now();
            match event {
                Event::Admit { addr, reply } => {
                    let _ = reply.try_send(relay.admit(now, addr));
                }
                Event::Opened { conn, addr, writer } => {
                    writers.insert(conn, writer);
                    relay.handle(now, Input::Opened { conn, addr });
                }
                Event::Input(input) => {
                    if let Input::Closed { conn } = input {
                        writers.remove(&conn);
                    }
                    relay.handle(now, input);
                }
            }
            execute(&mut relay, &mut writers);
        }
        let now = crate::now();
        if relay.poll_timeout().is_some_and(|w| w.at <= now) {
            relay.handle_timeout(now);
            execute(&mut relay, &mut writers);
        }
    }
}

/// Runs the machine's outputs in order.
fn execute(
    relay: &mut RelayServer<chacha20::ChaCha20Rng>,
    writers: &mut BTreeMap<ConnId, Sender<Outgoing>>,
) {
    let mut cut_off = Vec::new();
    while let Some(o) = relay.poll() {
        let (conn, out) = match o {
            Output::Send { conn, text } => (conn, Outgoing::Text(text)),
            Output::Ping { conn } => (conn, Outgoing::Ping),
            Output::Close { conn, code, reason } => (conn, Outgoing::Close(code, reason)),
            _ => continue,
        };
        let closing = matches!(out, Outgoing::Close(..));
        if let Some(w) = writers.get(&conn)
            && w.try_send(out).is_err()
        {
            // Full: the socket is not reading. Dropping its writer ends it; the machine hears
            // the close below.
            writers.remove(&conn);
            cut_off.push(conn);
        }
        if closing {
            writers.remove(&conn);
        }
    }
    for conn in cut_off {
        relay.handle(crate::now(), Input::Closed { conn });
        // A close of a socket the machine already forgot asks for nothing.
        while relay.poll().is_some() {}
    }
}

async fn accept(listener: TcpListener, trust_proxy: bool, events: Sender<Event>) {
    let mut next = 1u64;
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let conn = ConnId(next);
        next += 1;
        smol::spawn(connection(conn, stream, peer, trust_proxy, events.clone())).detach();
    }
}

/// An HTTP request head: the method, the path, and the headers with lower-case names.
struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn is_upgrade(&self) -> bool {
        self.header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    }
}

/// Reads up to the end of the request head; the head and any bytes read past it.
async fn read_head(stream: &mut TcpStream) -> Option<(Head, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let rest = buf.split_off(end + 4);
    let text = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let mut request = lines.next()?.split(' ');
    let method = request.next()?.to_string();
    let path = request.next()?.to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((
        Head {
            method,
            path,
            headers,
        },
        rest,
    ))
}

async fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn status_line(status: u16) -> String {
    let phrase = match status {
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Refused",
    };
    format!("{status} {phrase}")
}

/// The client address: the TCP peer, or with `trust_proxy` the last `X-Forwarded-For` hop (the
/// one the relay's own proxy appended); §1.4: "anywhere else a header is whatever the client
/// says".
fn client_addr(head: &Head, peer: SocketAddr, trust_proxy: bool) -> IpAddr {
    let forwarded = || {
        let last = head.header("x-forwarded-for")?.rsplit(',').next()?;
        last.trim().parse().ok()
    };
    if trust_proxy {
        forwarded().unwrap_or(peer.ip())
    } else {
        peer.ip()
    }
}

async fn connection(
    conn: ConnId,
    mut stream: TcpStream,
    peer: SocketAddr,
    trust_proxy: bool,
    events: Sender<Event>,
) {
    let head = smol::future::or(read_head(&mut stream), async {
        smol::Timer::after(HEAD_TIMEOUT).await;
        None
    })
    .await;
    let Some((head, rest)) = head else {
        return;
    };
    if !head.is_upgrade() {
        let path = head.path.split('?').next().unwrap_or("");
        if head.method == "GET" && path == "/health" {
            respond(&mut stream, "200 OK", "application/json", "{\"ok\":true}").await;
        } else {
            respond(
                &mut stream,
                "426 Upgrade Required",
                "text/plain; charset=utf-8",
                "This is a Minca relay: open a WebSocket.\n",
            )
            .await;
        }
        return;
    }
    let Some(key) = head.header("sec-websocket-key") else {
        respond(
            &mut stream,
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "No Sec-WebSocket-Key.\n",
        )
        .await;
        return;
    };
    let addr = client_addr(&head, peer, trust_proxy);
    let (reply, answer) = channel::bounded(1);
    if events.send(Event::Admit { addr, reply }).await.is_err() {
        return;
    }
    match answer.recv().await {
        Ok(Ok(())) => {}
        Ok(Err(refusal)) => {
            respond(
                &mut stream,
                &status_line(refusal.http_status()),
                "text/plain; charset=utf-8",
                refusal.reason(),
            )
            .await;
            return;
        }
        Err(_) => return,
    }
    let accept = derive_accept_key(key.as_bytes());
    let switching = format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"
    );
    if stream.write_all(switching.as_bytes()).await.is_err() {
        return;
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_WS_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_WS_MESSAGE_BYTES));
    let tcp = stream.clone();
    let ws = WebSocketStream::from_partially_read(stream, rest, Role::Server, Some(config)).await;
    let (writer, outbox) = channel::bounded(OUTBOX);
    if events
        .send(Event::Opened { conn, addr, writer })
        .await
        .is_err()
    {
        return;
    }
    let (mut sink, mut frames) = ws.split();
    smol::spawn(async move {
        while let Ok(out) = outbox.recv().await {
            let sent = match out {
                Outgoing::Text(t) => sink.send(Message::text(t)).await,
                Outgoing::Ping => sink.send(Message::Ping(Default::default())).await,
                Outgoing::Close(code, reason) => {
                    let frame = CloseFrame {
                        code: code.into(),
                        reason: reason.into(),
                    };
                    let _ = sink.close(Some(frame)).await;
                    break;
                }
            };
            if sent.is_err() {
                break;
            }
        }
        // Closed by the relay, cut off as too slow, or gone: give the client a moment to answer
        // the close, then end the connection whatever it does, which also ends the reader.
        let _ = smol::future::or(async { sink.close(None).await.ok() }, async {
            smol::Timer::after(CLOSE_GRACE).await;
            None
        })
        .await;
        smol::Timer::after(CLOSE_GRACE).await;
        let _ = tcp.shutdown(std::net::Shutdown::Both);
    })
    .detach();
    while let Some(Ok(frame)) = frames.next().await {
        let input = match frame {
            Message::Text(text) => Input::Text {
                conn,
                text: text.as_str().to_string(),
            },
            Message::Binary(_) => Input::Binary { conn },
            Message::Ping(_) | Message::Pong(_) => Input::Control { conn },
            Message::Close(_) => break,
            Message::Frame(_) => continue,
        };
        if events.send(Event::Input(input)).await.is_err() {
            return;
        }
    }
    let _ = events.send(Event::Input(Input::Closed { conn })).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(forwarded: Option<&str>) -> Head {
        Head {
            method: "GET".into(),
            path: "/".into(),
            headers: forwarded
                .map(|v| ("x-forwarded-for".to_string(), v.to_string()))
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn the_client_address_is_the_tcp_peer_unless_the_proxy_is_trusted() {
        let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let spoofed = head(Some("203.0.113.9, 198.51.100.4"));
        // Untrusted, a header is whatever the client says.
        assert_eq!(client_addr(&spoofed, peer, false), peer.ip());
        // Behind a trusted proxy: the last hop, the one the proxy appended.
        assert_eq!(
            client_addr(&spoofed, peer, true),
            "198.51.100.4".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_addr(&head(Some("2001:db8::7")), peer, true),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
        // Missing or unparsable: the TCP peer.
        assert_eq!(client_addr(&head(None), peer, true), peer.ip());
        assert_eq!(client_addr(&head(Some("unknown")), peer, true), peer.ip());
    }
}
