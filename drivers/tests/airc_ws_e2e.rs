//! AIRC §3.1's WebSocket connection: `weft airc serve --client-ws` serves the client face as
//! WebSocket text messages, one frame each, to a plain tungstenite client on loopback.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, airc_serve_ws, free_port, temp_dir};

const WAIT: Duration = Duration::from_secs(20);

/// `weft airc serve` with the client face on WebSocket at a free loopback port, the test's uid
/// owning `alice`.
fn serve(name: &str) -> (Running, SocketAddr) {
    let (server, _, ws) = airc_serve_ws(name);
    (server, ws)
}

fn connect(addr: SocketAddr) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (ws, response) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    assert_eq!(response.status(), 101);
    ws
}

/// The next text message, which must be exactly one JSON frame.
fn next(ws: &mut WebSocket<TcpStream>) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => {
                assert!(!t.contains('\n'), "one frame, no newline: {t:?}");
                return serde_json::from_str(t.as_str()).unwrap();
            }
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("not a text frame: {other:?}"),
        }
    }
}

fn send(ws: &mut WebSocket<TcpStream>, frame: &Value) {
    ws.send(Message::Text(frame.to_string().into())).unwrap();
}

/// Opens a WebSocket, says hello, and checks the welcome: the uid owning this loopback socket
/// is the test's, so it holds alice (§5).
fn hello(addr: SocketAddr) -> WebSocket<TcpStream> {
    let mut ws = connect(addr);
    send(
        &mut ws,
        &json!({"t": "hello", "proto": "airc/0.1", "role": "client", "agent": "ws-test/1"}),
    );
    let welcome = next(&mut ws);
    assert_eq!(welcome["t"], "welcome", "{welcome}");
    assert_eq!(welcome["ns"], json!(["alice"]), "{welcome}");
    ws
}

#[test]
fn a_websocket_client_says_hello_binds_sends_and_gets_each_answer_as_one_text_message() {
    let (_server, addr) = serve("ws-face");
    let mut listener = hello(addr);
    // A frame may also arrive with its newline, as on a byte stream.
    listener
        .send(Message::Text(
            format!("{}\n", json!({"t": "bind", "names": ["alice/inbox"]})).into(),
        ))
        .unwrap();
    let bound = next(&mut listener);
    assert_eq!(bound["t"], "bound", "{bound}");
    assert_eq!(
        bound["names"],
        json!(["//localhost/alice/inbox"]),
        "{bound}"
    );

    let mut sender = hello(addr);
    let id = "5b1e0c2a-9b1d-4e77-a6c8-1d2e3f4a5b6c";
    // §7: a message is timed by its sender's clock; an old one expires.
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    send(
        &mut sender,
        &json!({"t": "msg", "id": id, "from": "alice/x", "to": "//localhost/alice/inbox",
                "ts": ts, "body": "over a websocket"}),
    );
    let msg = next(&mut listener);
    assert_eq!(msg["t"], "msg", "{msg}");
    assert_eq!(msg["id"], id, "{msg}");
    assert_eq!(msg["body"], "over a websocket", "{msg}");
    send(
        &mut listener,
        &json!({"t": "ack", "id": id, "status": "delivered"}),
    );
    // Delivered only once the listener took it and said so (§6.6).
    let ack = next(&mut sender);
    assert_eq!(ack["t"], "ack", "{ack}");
    assert_eq!(ack["id"], id, "{ack}");
    assert_eq!(ack["status"], "delivered", "{ack}");
}

#[test]
fn a_binary_message_closes_the_websocket_with_1003() {
    let (_server, addr) = serve("ws-binary");
    let mut ws = connect(addr);
    ws.send(Message::Binary(b"{\"t\":\"hello\"}".to_vec().into()))
        .unwrap();
    loop {
        match ws.read() {
            Ok(Message::Close(Some(frame))) => {
                assert_eq!(u16::from(frame.code), 1003);
                return;
            }
            Ok(Message::Close(None)) => panic!("closed without a code"),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

#[test]
fn a_non_loopback_websocket_address_is_refused_at_start() {
    let dir = temp_dir("ws-nonloopback");
    let out = Command::new(WEFT)
        .args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .args(["--client-ws", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--client-ws") && stderr.contains("loopback"),
        "{stderr}"
    );
}

/// The answer to an upgrade request written by hand with `headers`: its status line and body.
fn upgrade_answer(addr: SocketAddr, headers: &str) -> String {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\n{headers}Upgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    // Up to the end of the answer's head: a 101 leaves the connection open.
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Any web page the operator opens can make the browser connect to a loopback port: a page's
/// `Origin`, or a rebound name of its own in `Host`, is refused 403 before the upgrade, so the
/// page never acts with the operator's namespaces. Command-line clients (no `Origin`, the
/// listening address as `Host`) and `localhost` are served.
#[test]
fn a_web_page_cannot_open_the_client_face_in_the_operators_name() {
    let (_server, addr) = serve("ws-origin");
    let host = format!("Host: {addr}\r\n");
    for (who, headers) in [
        (
            "a foreign page",
            format!("{host}Origin: https://evil.example\r\n"),
        ),
        ("a sandboxed page", format!("{host}Origin: null\r\n")),
        (
            "DNS rebinding",
            format!("Host: evil.example:{}\r\n", addr.port()),
        ),
        (
            "two Hosts",
            format!("{host}Host: evil.example:{}\r\n", addr.port()),
        ),
        ("no Host", String::new()),
    ] {
        let answer = upgrade_answer(addr, &headers);
        assert!(
            answer.starts_with("HTTP/1.1 403 "),
            "{who}: refused before the upgrade: {answer:?}"
        );
        assert!(!answer.contains("welcome"), "{who}: {answer:?}");
    }
    for headers in [host.clone(), format!("Host: localhost:{}\r\n", addr.port())] {
        let answer = upgrade_answer(addr, &headers);
        assert!(
            answer.starts_with("HTTP/1.1 101 "),
            "{headers:?}: {answer:?}"
        );
    }
    // And the full exchange still works for a command-line client.
    hello(addr);
}

/// An origin the operator allowed in `[client_ws] origins` is served; any other still is not.
#[test]
fn an_origin_on_the_operators_allow_list_may_open_the_client_face() {
    let dir = temp_dir("ws-allowed");
    let addr = free_port();
    let config = dir.join("airc.toml");
    std::fs::write(
        &config,
        format!("[client_ws]\nlisten = \"{addr}\"\norigins = [\"https://app.example\"]\n"),
    )
    .unwrap();
    let mut cmd = Command::new(WEFT);
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .arg("--config")
        .arg(&config);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws://");
    let host = format!("Host: {addr}\r\n");
    let allowed = upgrade_answer(addr, &format!("{host}Origin: https://app.example\r\n"));
    assert!(allowed.starts_with("HTTP/1.1 101 "), "{allowed:?}");
    for other in [
        "https://app.example.evil",
        "http://app.example",
        "https://APP.example",
    ] {
        let answer = upgrade_answer(addr, &format!("{host}Origin: {other}\r\n"));
        assert!(answer.starts_with("HTTP/1.1 403 "), "{other}: {answer:?}");
    }
}
