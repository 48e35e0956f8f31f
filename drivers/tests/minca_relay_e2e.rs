//! `weft relay` end to end over real sockets: the relay on an ephemeral loopback port, real
//! WebSocket clients (async-tungstenite), and plain HTTP (Minca 04 Network §1.1, §1.4).

use std::net::SocketAddr;
use std::time::Duration;

#[path = "common/relay.rs"]
mod relay;
use relay::Running;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_proto::minca::relay_server::{CLOSE_RATE, MAX_SOCKETS_PER_ADDRESS, RATE_BUDGET};
use weft_proto::minca::relay_wire::{Mail, RelayMessage};
use weft_proto::minca::turn::TurnConfig;

const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

type Ws = WebSocketStream<TcpStream>;

async fn dial(addr: SocketAddr, path: &str) -> Ws {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (ws, _) = async_tungstenite::client_async(format!("ws://{addr}{path}"), tcp)
        .await
        .unwrap();
    ws
}

async fn send(ws: &mut Ws, text: String) {
    ws.send(Message::text(text)).await.unwrap();
}

/// The next text frame, parsed; fails the test after 5 s.
async fn next(ws: &mut Ws) -> RelayMessage {
    let frame = smol::future::or(async { ws.next().await }, async {
        smol::Timer::after(Duration::from_secs(5)).await;
        panic!("no frame from the relay within 5 s")
    })
    .await;
    match frame {
        Some(Ok(Message::Text(t))) => RelayMessage::parse(t.as_str()).unwrap(),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

async fn next_mail(ws: &mut Ws) -> Mail {
    match next(ws).await {
        RelayMessage::Mail(m) => m,
        other => panic!("expected mail, got {other:?}"),
    }
}

fn fetch(watch: bool) -> String {
    format!(r#"{{"type":"fetch","topic":"{TOPIC}","watch":{watch}}}"#)
}

fn drop_msg(blob: &str, ttl: u64) -> String {
    format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"{blob}","ttl":{ttl}}}"#)
}

/// Sends `request` on a fresh TCP connection and reads the whole response.
async fn http(addr: SocketAddr, request: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    response
}

#[test]
fn a_publish_with_ttl_0_reaches_the_other_watcher_and_a_later_fetch_finds_nothing() {
    let relay = Running::start(None);
    smol::block_on(async {
        // Any path upgrades.
        let mut a = dial(relay.addr, "/").await;
        let mut b = dial(relay.addr, "/any/path?x=1").await;
        for ws in [&mut a, &mut b] {
            send(ws, fetch(true)).await;
            let first = next_mail(ws).await;
            assert!(first.items.is_empty() && !first.more);
        }
        send(&mut a, drop_msg("AZ3k", 0)).await;
        let got = next_mail(&mut b).await;
        assert_eq!(got.items.len(), 1);
        assert_eq!(got.items[0].blob.as_str(), "AZ3k");
        assert_eq!(got.items[0].seq, None);

        let mut c = dial(relay.addr, "/").await;
        send(&mut c, fetch(false)).await;
        assert!(next_mail(&mut c).await.items.is_empty(), "kept by nobody");
        // The publisher heard nothing of its own blob: its next frame is the pong.
        send(&mut a, r#"{"type":"ping"}"#.into()).await;
        assert_eq!(next(&mut a).await, RelayMessage::Pong);
    });
}

#[test]
fn a_blob_dropped_with_a_ttl_is_fetched_later() {
    let relay = Running::start(None);
    smol::block_on(async {
        let mut a = dial(relay.addr, "/").await;
        send(&mut a, drop_msg("AQID", 60_000)).await;
        // Binary and malformed frames are ignored; the socket stays open.
        a.send(Message::binary(vec![1, 2, 3])).await.unwrap();
        send(&mut a, "not json".into()).await;
        send(&mut a, r#"{"type":"ping"}"#.into()).await;
        assert_eq!(next(&mut a).await, RelayMessage::Pong);

        let mut b = dial(relay.addr, "/").await;
        send(&mut b, fetch(false)).await;
        let page = next_mail(&mut b).await;
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].blob.as_str(), "AQID");
        assert_eq!(page.items[0].seq, Some(1));
        assert!(!page.more);
    });
}

#[test]
fn health_answers_ok_json_and_other_plain_http_answers_426() {
    let relay = Running::start(None);
    smol::block_on(async {
        let health = http(relay.addr, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
        assert!(health.contains("content-type: application/json\r\n"));
        assert!(
            health.ends_with("\r\n\r\n{\"ok\":true}"),
            "nothing else: {health}"
        );

        for request in [
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /health HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n",
        ] {
            let other = http(relay.addr, request).await;
            assert!(other.starts_with("HTTP/1.1 426 "), "{other}");
            assert!(other.contains("content-type: text/plain"));
            let body = other.split("\r\n\r\n").nth(1).unwrap();
            assert!(!body.is_empty());
        }
    });
}

#[test]
fn an_upgrade_past_the_per_address_cap_is_refused_with_plain_http_and_connection_close() {
    let relay = Running::start(None);
    smol::block_on(async {
        let mut held = Vec::new();
        for _ in 0..MAX_SOCKETS_PER_ADDRESS {
            let mut ws = dial(relay.addr, "/").await;
            // A round trip, so the relay has opened it before the next upgrade.
            send(&mut ws, r#"{"type":"ping"}"#.into()).await;
            assert_eq!(next(&mut ws).await, RelayMessage::Pong);
            held.push(ws);
        }
        let refused = http(
            relay.addr,
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await;
        assert!(refused.starts_with("HTTP/1.1 429 "), "{refused}");
        assert!(refused.contains("connection: close\r\n"));
    });
}

#[test]
fn turn_passwords_come_on_the_first_watch_and_a_socket_past_its_budget_is_closed_1008() {
    let turn = TurnConfig::new(b"secret", vec!["turn:127.0.0.1:3478".into()], 600).ok();
    let relay = Running::start(turn);
    smol::block_on(async {
        let mut ws = dial(relay.addr, "/").await;
        send(&mut ws, fetch(true)).await;
        next_mail(&mut ws).await;
        let RelayMessage::Ice(ice) = next(&mut ws).await else {
            panic!("ice after the first watch");
        };
        assert_eq!(ice.servers[0].urls, ["turn:127.0.0.1:3478"]);

        // Twice the burst: refill while the frames travel cannot cover it.
        for _ in 0..2 * RATE_BUDGET.burst {
            // The relay may close before the last ones go out.
            let _ = ws.send(Message::binary(vec![0])).await;
        }
        let close = smol::future::or(
            async {
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Close(frame))) => return frame,
                        Some(Ok(_)) => continue,
                        other => panic!("expected a close frame, got {other:?}"),
                    }
                }
            },
            async {
                smol::Timer::after(Duration::from_secs(5)).await;
                panic!("not closed within 5 s")
            },
        )
        .await;
        assert_eq!(close.unwrap().code, CloseCode::from(CLOSE_RATE));
    });
}
