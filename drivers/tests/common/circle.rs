//! What the `weft circle serve` end-to-end tests share: a napplet's WebSocket to a device's
//! napplet face, keeping everything it reads, and waiting on a condition within [`WAIT`].

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long a test waits for anything a device should do.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Waits until `ok` holds, within [`WAIT`]; fails naming `what` otherwise.
pub(crate) fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One napplet connected to a device's napplet face.
pub(crate) struct Napplet {
    ws: WebSocket<TcpStream>,
    /// Every message read so far, in order.
    pub(crate) got: Vec<Value>,
}

impl Napplet {
    /// Connects to the napplet face at `listen` with `token`; the upgrade must succeed.
    pub(crate) fn open(listen: SocketAddr, token: &str) -> Self {
        let stream = TcpStream::connect(listen).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let url = format!("ws://{listen}/napplet?token={token}");
        let (ws, response) = tungstenite::client::client(url, stream).unwrap();
        assert_eq!(response.status(), 101);
        Self {
            ws,
            got: Vec::new(),
        }
    }

    /// Sends one napplet message.
    pub(crate) fn send(&mut self, v: Value) {
        self.ws.send(Message::Text(v.to_string().into())).unwrap();
    }

    /// Reads for `how_long`, keeping everything.
    pub(crate) fn read_for(&mut self, how_long: Duration) {
        let end = Instant::now() + how_long;
        while Instant::now() < end {
            match self.ws.read() {
                Ok(Message::Text(t)) => self.got.push(serde_json::from_str(&t).unwrap()),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("napplet socket: {e}"),
            }
        }
    }

    /// Reads until a message satisfying `want` came (and returns it), within [`WAIT`].
    pub(crate) fn wait(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + WAIT;
        loop {
            if let Some(v) = self.got.iter().find(|v| want(v)) {
                return v.clone();
            }
            assert!(Instant::now() < end, "never came; got {:?}", self.got);
            self.read_for(Duration::from_millis(100));
        }
    }

    /// The contents of the events delivered so far, of subscription `sub` or of any.
    pub(crate) fn events(&self, sub: Option<&str>) -> Vec<String> {
        self.got
            .iter()
            .filter(|v| v["type"] == "mesh.event" && sub.is_none_or(|s| v["subId"] == s))
            .filter_map(|v| v["result"]["event"]["content"].as_str().map(String::from))
            .collect()
    }

    /// Subscribes with one filter and waits for the subscription's `eose`.
    pub(crate) fn subscribe(&mut self, sub: &str, filter: Value, ttl: u8) {
        self.send(json!({"type": "mesh.subscribe", "id": sub, "subId": sub, "filters": [filter], "ttl": ttl}));
        let s = sub.to_string();
        self.wait(move |v| v["type"] == "mesh.eose" && v["subId"] == s.as_str());
    }

    /// Publishes a template and waits for its result, which it returns.
    pub(crate) fn publish(&mut self, id: &str, kind: u32, content: &str, ttl: u32) -> Value {
        self.send(json!({"type": "mesh.publish", "id": id, "event": {"kind": kind, "content": content, "tags": []}, "ttl": ttl}));
        let i = id.to_string();
        self.wait(move |v| v["type"] == "mesh.publish.result" && v["id"] == i.as_str())
    }
}
