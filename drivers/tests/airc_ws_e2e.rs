//! AIRC §3.1's WebSocket connection: `weft airc serve --client-ws` serves the client face as
//! WebSocket text messages, one frame each, to a plain tungstenite client on loopback.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, free_port, temp_dir};

const WAIT: Duration = Duration::from_secs(20);

/// `weft airc serve` with the client face on WebSocket at a free loopback port, the test's uid
/// owning `alice`.
fn serve(name: &str) -> (Running, SocketAddr) {
    let dir = temp_dir(name);
    let ws = free_port();
    let mut cmd = Command::new(WEFT);
    cmd.args(["airc", "serve", "--data-dir"])
        .arg(&dir)
        .args(["--client-ws", &ws.to_string()])
        .args([
            "--namespaces",
            &format!("{}=alice", rustix::process::getuid().as_raw()),
        ]);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws://");
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
