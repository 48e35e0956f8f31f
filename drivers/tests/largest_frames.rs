//! Issue #43: every per-connection buffer of the servers starts small and grows on demand, so
//! each protocol's largest frame must still go through the real `weft` program, and one just
//! over it must get the protocol's answer:
//!
//! - `weft airc serve`, Unix socket: a `ping` line of exactly `MAX_FRAME_BYTES` (1 MiB with its
//!   newline, AIRC §3.2) is answered by a `pong` of the same size; one byte more is answered
//!   `error` and the connection closed (§4.8).
//! - `weft airc serve`, WebSocket face: the same frame as one text message comes back as one;
//!   a message one byte over is closed 1009.
//! - `weft nostr serve`: a `REQ` of exactly the relay's largest message is read and answered; one
//!   byte more is closed 1009.
//! - `weft circle serve`, napplet face: a request of exactly `MAX_NAPPLET_MESSAGE_BYTES` is read
//!   and answered; one byte more is refused as too large (without an id to answer it by, so
//!   counted and not answered); a message past the largest any of its
//!   sockets reads (`MAX_MEMBER_FRAME_BYTES`) is closed 1009.
//!
//! The Minca relay's largest blob is in `minca_relay_e2e.rs`, and the node socket's 16 MiB frame
//! in `minca_node_ws.rs`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};
use weft_proto::airc::framing::MAX_FRAME_BYTES;
use weft_proto::nostr::limits::DEFAULT_MAX_MESSAGE_BYTES;

#[path = "common/cli.rs"]
mod cli;
use cli::{Running, WEFT, airc_serve_ws, free_port, temp_dir};

#[path = "common/nostr_ws.rs"]
mod nostr_ws;
use nostr_ws::WeftRelay;

const WAIT: Duration = Duration::from_secs(30);

/// A `ping` frame of exactly `len` bytes with its newline (its `n` padded).
fn ping_line(len: usize) -> String {
    let head = "{\"t\":\"ping\",\"n\":\"";
    let tail = "\"}\n";
    format!("{head}{}{tail}", "x".repeat(len - head.len() - tail.len()))
}

fn hello_line() -> &'static str {
    "{\"t\":\"hello\",\"proto\":\"airc/0.1\",\"role\":\"client\",\"agent\":\"frames/1\"}\n"
}

fn read_line(reader: &mut BufReader<UnixStream>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

#[test]
fn airc_unix_socket_carries_a_1_mib_frame_both_ways_and_answers_one_byte_more_with_error() {
    let (_server, socket, _) = airc_serve_ws("frames-unix");
    let stream = UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer.write_all(hello_line().as_bytes()).unwrap();
    assert!(read_line(&mut reader).contains("\"welcome\""));
    // Idle a moment, so the connection's buffers are at their resting size before the big one.
    std::thread::sleep(Duration::from_millis(100));

    let largest = ping_line(MAX_FRAME_BYTES);
    writer.write_all(largest.as_bytes()).unwrap();
    let pong = read_line(&mut reader);
    assert_eq!(pong.len(), MAX_FRAME_BYTES, "a pong as large as the ping");
    assert_eq!(pong, largest.replacen("\"ping\"", "\"pong\"", 1));

    writer
        .write_all(ping_line(MAX_FRAME_BYTES + 1).as_bytes())
        .unwrap();
    let error: Value = serde_json::from_str(&read_line(&mut reader)).unwrap();
    assert_eq!(error["t"], "error", "{error}");
    assert_eq!(read_line(&mut reader), "", "then the connection is closed");
}

#[test]
fn airc_websocket_face_carries_a_1_mib_frame_both_ways_and_closes_one_byte_more_with_1009() {
    let (_server, _, addr) = airc_serve_ws("frames-ws");
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (mut ws, _) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    ws.send(Message::text(hello_line().trim_end())).unwrap();
    assert!(text(&mut ws).contains("\"welcome\""));
    std::thread::sleep(Duration::from_millis(100));

    // A frame of 1 MiB with its newline is a text message of 1 MiB less the newline.
    let largest = ping_line(MAX_FRAME_BYTES);
    ws.send(Message::text(largest.trim_end())).unwrap();
    let pong = text(&mut ws);
    assert_eq!(pong.len(), MAX_FRAME_BYTES - 1);
    assert_eq!(pong, largest.trim_end().replacen("\"ping\"", "\"pong\"", 1));

    let over = "x".repeat(MAX_FRAME_BYTES + 1);
    let _ = ws.send(Message::text(over));
    assert_eq!(close_code(&mut ws), CloseCode::Size);
}

fn text(ws: &mut WebSocket<TcpStream>) -> String {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return t.as_str().to_string(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("not a text message: {other:?}"),
        }
    }
}

fn close_code(ws: &mut WebSocket<TcpStream>) -> CloseCode {
    loop {
        match ws.read() {
            Ok(Message::Close(Some(frame))) => return frame.code,
            Ok(Message::Close(None)) => panic!("a close without its code"),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// A `REQ` of exactly `len` bytes: one filter whose `#t` value pads it.
fn req(len: usize) -> String {
    let head = "[\"REQ\",\"big\",{\"kinds\":[1],\"#t\":[\"";
    let tail = "\"]}]";
    format!("{head}{}{tail}", "x".repeat(len - head.len() - tail.len()))
}

#[test]
fn nostr_relay_reads_and_answers_its_largest_message_and_closes_one_byte_more_with_1009() {
    let dir = temp_dir("frames-nostr");
    let addr = free_port();
    let _server = WeftRelay::start(addr, &dir.join("nostr"), None, &[], dir.join("nostr.log"));
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (mut ws, _) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let largest = req(DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(largest.len(), DEFAULT_MAX_MESSAGE_BYTES);
    ws.send(Message::text(largest)).unwrap();
    // Whatever the relay makes of the filter (stored events, then EOSE, or CLOSED), it read the
    // message whole and answered the subscription.
    let answer = loop {
        let answer: Value = serde_json::from_str(&text(&mut ws)).unwrap();
        // The relay's NIP-42 challenge may come first.
        if answer[0] != "AUTH" {
            break answer;
        }
    };
    assert!(
        matches!(answer[0].as_str(), Some("EOSE" | "CLOSED")),
        "{answer}"
    );
    assert_eq!(answer[1], "big", "{answer}");

    let _ = ws.send(Message::text(req(DEFAULT_MAX_MESSAGE_BYTES + 1)));
    assert_eq!(close_code(&mut ws), CloseCode::Size);
}

/// A napplet `mesh.subscribe` of exactly `len` bytes: one filter whose `#t` value pads it.
fn subscribe(len: usize) -> String {
    let head = "{\"type\":\"mesh.subscribe\",\"id\":\"big\",\"subId\":\"big\",\"ttl\":0,\"filters\":[{\"kinds\":[1],\"#t\":[\"";
    let tail = "\"]}]}";
    format!("{head}{}{tail}", "x".repeat(len - head.len() - tail.len()))
}

#[test]
fn circle_napplet_face_reads_and_answers_its_largest_message_and_closes_past_the_member_frame_with_1009()
 {
    use weft_proto::circle::member::MAX_MEMBER_FRAME_BYTES;
    use weft_proto::circle::napplet::MAX_NAPPLET_MESSAGE_BYTES;
    let dir = temp_dir("frames-circle");
    let (listen, member) = (free_port(), free_port());
    let token = "napplet-token-0123456789";
    let config = format!(
        "listen = \"{listen}\"\nmember_listen = \"{member}\"\ndata_dir = \"{}\"\nkey = \"{}\"\n\
         blobs_dir = \"{}\"\ncontrol_token = \"control-token-0123456789\"\nmembers = []\n\
         [[napplet]]\nname = \"app\"\ntoken = \"{token}\"\ngranted = true\n",
        dir.join("data").display(),
        dir.join("circle.key").display(),
        dir.join("blobs").display(),
    );
    let path = dir.join("circle.toml");
    weft_drivers::circle::write_private(&path, &config).unwrap();
    let mut cmd = Command::new(WEFT);
    cmd.args(["circle", "serve", "--config"]).arg(&path);
    let server = Running::spawn(cmd);
    server.wait_for("listening");
    let stream = TcpStream::connect(listen).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let url = format!("ws://{listen}/napplet?token={token}");
    let (mut ws, _) = tungstenite::client::client(url, stream).unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let largest = subscribe(MAX_NAPPLET_MESSAGE_BYTES);
    assert_eq!(largest.len(), MAX_NAPPLET_MESSAGE_BYTES);
    ws.send(Message::text(largest)).unwrap();
    // Whatever the shell makes of the filter, it read the request whole and answered it by id.
    let answer: Value = serde_json::from_str(&text(&mut ws)).unwrap();
    assert!(
        answer["id"] == "big" || answer["subId"] == "big",
        "{answer}"
    );

    // One byte more is the napplet wire's `too large`: a message whose id is never read cannot
    // be answered (counted only), so the next answer is the next request's.
    ws.send(Message::text(subscribe(MAX_NAPPLET_MESSAGE_BYTES + 1)))
        .unwrap();
    ws.send(Message::text(
        subscribe(300).replace("\"big\"", "\"after\""),
    ))
    .unwrap();
    let next: Value = serde_json::from_str(&text(&mut ws)).unwrap();
    assert!(
        next["id"] == "after" || next["subId"] == "after",
        "nothing for the oversized request: {next}"
    );

    // Past the largest message any socket of the shell reads: 1009.
    let _ = ws.send(Message::text("x".repeat(MAX_MEMBER_FRAME_BYTES + 1)));
    assert_eq!(close_code(&mut ws), CloseCode::Size);
}
