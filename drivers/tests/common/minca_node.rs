//! Minca nodes on a relay over real sockets, shared by the end-to-end tests against `weft relay`
//! and against a real Nostr relay.
//!
//! - [`meet`]: two whole nodes (`weft node`'s runner, `weft_drivers::minca::node_runner`) meet
//!   through a relay (§2, §3, §7.3), open a WebRTC data channel and admit each other (§7.2).
//! - [`Node`]: the relay client alone over real WebSocket clients (async-tungstenite on smol),
//!   with the wall clock as `now` and seeded RNGs, for what only the relay client does (drops and
//!   fetches). The drain rule holds: after every input the client is polled until empty, and the
//!   node then sleeps until its `poll_timeout` or the next socket event.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use smol::channel::{Receiver, Sender};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_drivers::minca::node_runner::{NodeEvent, NodeOptions, NodeReport, RunningNode};
use weft_proto::codec::{did_key::DidKey, js};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider, generate_p256};
use weft_proto::minca::relay_client::{self, ClientConfig, RelayClient, RelayState};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic};
use weft_proto::minca::room::Room;

/// The whole meeting must happen within this wall time.
const MEETING_BUDGET: Duration = Duration::from_secs(20);

/// The longest a node sleeps without looking at its machines' timers again.
const MAX_NAP: Duration = Duration::from_millis(500);

fn crypto() -> &'static dyn CryptoProvider {
    default_provider()
}

/// What a socket task reports to its node.
#[derive(Debug)]
enum SocketEvent {
    Opened,
    Text(String),
    Closed,
    DialFailed,
}

/// A socket event, addressed to a node and a socket.
#[derive(Debug)]
pub(crate) struct Event {
    node: usize,
    conn: ConnId,
    what: SocketEvent,
}

/// What a node asks of one of its socket tasks.
enum Command {
    Send(String),
    Close,
}

enum Step {
    Command(Option<Command>),
    Frame(Option<Result<Message, async_tungstenite::tungstenite::Error>>),
}

/// One WebSocket: dials `url`, then forwards frames both ways until either side closes.
async fn socket(
    node: usize,
    conn: ConnId,
    url: String,
    events: Sender<Event>,
    commands: Receiver<Command>,
) {
    let report = |what| {
        let events = events.clone();
        async move {
            let _ = events.send(Event { node, conn, what }).await;
        }
    };
    // The relay's dial URL is `ws://host:port/…`; the TCP connection is made here because the
    // client API of async-tungstenite without a runtime feature takes a ready stream.
    let authority = url
        .strip_prefix("ws://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let ws = match TcpStream::connect(authority).await {
        Ok(tcp) => async_tungstenite::client_async(url.as_str(), tcp)
            .await
            .ok(),
        Err(_) => None,
    };
    let Some((mut ws, _)) = ws else {
        report(SocketEvent::DialFailed).await;
        return;
    };
    report(SocketEvent::Opened).await;
    loop {
        let step = smol::future::or(async { Step::Command(commands.recv().await.ok()) }, async {
            Step::Frame(ws.next().await)
        })
        .await;
        match step {
            Step::Command(Some(Command::Send(text))) => {
                if ws.send(Message::text(text)).await.is_err() {
                    report(SocketEvent::Closed).await;
                    return;
                }
            }
            // The machine asked to close (or dropped the socket): it expects no report.
            Step::Command(Some(Command::Close) | None) => {
                let _ = ws.close(None).await;
                return;
            }
            Step::Frame(Some(Ok(Message::Text(text)))) => {
                report(SocketEvent::Text(text.as_str().to_owned())).await;
            }
            Step::Frame(Some(Ok(Message::Close(_)) | Err(_)) | None) => {
                report(SocketEvent::Closed).await;
                return;
            }
            Step::Frame(Some(Ok(_))) => {}
        }
    }
}

/// A relay client on real sockets.
pub(crate) struct Node {
    index: usize,
    pub(crate) client: RelayClient<ChaCha20Rng>,
    pub(crate) topic: Topic,
    sockets: BTreeMap<ConnId, Sender<Command>>,
    tasks: Vec<smol::Task<()>>,
    events: Sender<Event>,
    /// Whether a relay socket is open.
    pub(crate) open: bool,
    /// Whether a fetch of the room's topic finished on a relay.
    pub(crate) fetched: bool,
    /// The blobs fetches returned, in order.
    pub(crate) fetched_blobs: Vec<Blob>,
}

impl Node {
    pub(crate) fn new(
        index: usize,
        relay: &RelayUrl,
        room: &Room,
        seed: u64,
        events: Sender<Event>,
    ) -> Self {
        let config = ClientConfig {
            relays: vec![relay.clone()],
        };
        Self {
            index,
            client: RelayClient::new(config, crypto(), ChaCha20Rng::seed_from_u64(seed + 1)),
            topic: Topic::parse(&room.topic(crypto())).expect("a room's topic is a topic"),
            sockets: BTreeMap::new(),
            tasks: Vec::new(),
            events,
            open: false,
            fetched: false,
            fetched_blobs: Vec::new(),
        }
    }

    pub(crate) fn tell_client(&mut self, input: relay_client::Input) {
        self.client.handle(weft_drivers::now(), input);
        self.drain();
    }

    fn socket_event(&mut self, conn: ConnId, what: SocketEvent) {
        let input = match what {
            SocketEvent::Opened => relay_client::Input::Opened { conn },
            SocketEvent::Text(text) => relay_client::Input::Text { conn, text },
            SocketEvent::Closed => relay_client::Input::Closed { conn },
            SocketEvent::DialFailed => relay_client::Input::DialFailed { conn },
        };
        self.tell_client(input);
    }

    /// Fires the client's timer if it is due.
    fn wake(&mut self) {
        let now = weft_drivers::now();
        if self.client.poll_timeout().is_some_and(|w| w.at <= now) {
            self.client.handle_timeout(now);
        }
        self.drain();
    }

    fn next_wakeup(&self) -> Option<Timestamp> {
        self.client.poll_timeout().map(|w| w.at)
    }

    /// The drain rule: poll the client until it has nothing left.
    fn drain(&mut self) {
        while let Some(out) = self.client.poll() {
            self.on_client(out);
        }
    }

    fn on_client(&mut self, out: relay_client::Output) {
        match out {
            relay_client::Output::Dial { conn, url, .. } => {
                let (tx, rx) = smol::channel::unbounded();
                self.sockets.insert(conn, tx);
                let task = smol::spawn(socket(self.index, conn, url, self.events.clone(), rx));
                self.tasks.push(task);
            }
            relay_client::Output::Send { conn, text } => {
                if let Some(tx) = self.sockets.get(&conn) {
                    let _ = tx.try_send(Command::Send(text));
                }
            }
            relay_client::Output::Close { conn } => {
                if let Some(tx) = self.sockets.remove(&conn) {
                    let _ = tx.try_send(Command::Close);
                }
            }
            relay_client::Output::RelayState {
                state: RelayState::Open,
                ..
            } => self.open = true,
            relay_client::Output::Fetched { blobs, done, .. } => {
                self.fetched_blobs.extend(blobs);
                self.fetched |= done;
            }
            _ => {}
        }
    }
}

/// Runs both nodes until `done` holds, failing the test with `phase` once the meeting's budget
/// (counted from `started`) is spent.
pub(crate) async fn run_until(
    nodes: &mut [Node; 2],
    events: &Receiver<Event>,
    started: Instant,
    phase: &str,
    done: impl Fn(&[Node; 2]) -> bool,
) {
    loop {
        for node in nodes.iter_mut() {
            node.wake();
        }
        if done(nodes) {
            return;
        }
        let left = MEETING_BUDGET
            .checked_sub(started.elapsed())
            .unwrap_or_else(|| panic!("the nodes did not {phase} within {MEETING_BUDGET:?}"));
        let now = weft_drivers::now();
        let nap = nodes
            .iter()
            .filter_map(Node::next_wakeup)
            .min()
            .map_or(MAX_NAP, |at| at.saturating_duration_since(now))
            .min(MAX_NAP)
            .min(left);
        let event = smol::future::or(async { events.recv().await.ok() }, async {
            smol::Timer::after(nap).await;
            None
        })
        .await;
        let mut next = event;
        while let Some(e) = next {
            nodes[e.node].socket_event(e.conn, e.what);
            next = events.try_recv().ok();
        }
    }
}

/// Two whole nodes join the space `space` through the relay at `url`, hear each other's hello,
/// and meet: the lesser DID offers, the other answers (§2, §7.3), a WebRTC data channel opens and
/// each admits the other (§7.2). Returns what each counted. The lesser DID starts first, so the
/// other's hello finds it watching and it offers at once rather than after a hello back.
pub(crate) fn meet(url: &RelayUrl, space: &str) -> [NodeReport; 2] {
    let mut rng = ChaCha20Rng::seed_from_u64(0x6d65_6574_0a00);
    let mut sessions: Vec<_> = (0..2)
        .map(|_| {
            let key = generate_p256(crypto(), &mut rng);
            let did = DidKey::P256(crypto().p256_public_key(&key).unwrap().0).to_did();
            (key, did)
        })
        .collect();
    sessions.sort_by(|a, b| js::cmp(&a.1, &b.1));
    assert_ne!(sessions[0].1, sessions[1].1);
    let dids = [sessions[0].1.clone(), sessions[1].1.clone()];
    let (tx, events) = std::sync::mpsc::channel::<(usize, NodeEvent)>();
    let started = Instant::now();
    let next = |what: &str| {
        let left = MEETING_BUDGET.saturating_sub(started.elapsed());
        events
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the nodes did not {what} within {MEETING_BUDGET:?}"))
    };
    let mut nodes = Vec::new();
    for (i, (key, _)) in sessions.into_iter().enumerate() {
        let options = NodeOptions {
            spaces: vec![space.into()],
            relays: vec![url.clone()],
            nodes: Vec::new(),
            bind: "127.0.0.1:0".parse().unwrap(),
            account: None,
            session: Some(key),
        };
        let tx = tx.clone();
        let node = RunningNode::start(options, move |e| {
            let _ = tx.send((i, e));
        })
        .expect("a node starts");
        nodes.push(node);
        while !matches!(next("open their relay sockets"), (j, NodeEvent::Relay { open: true, .. }) if j == i)
        {
        }
    }
    let mut admitted = [false, false];
    while admitted != [true, true] {
        if let (i, NodeEvent::Admitted { peer, .. }) = next("admit each other") {
            assert_eq!(peer, dids[1 - i], "the peer admitted is the other node");
            admitted[i] = true;
        }
    }
    let mut reports = nodes.into_iter().map(|n| n.stop().expect("the node stops"));
    let reports = [reports.next().unwrap(), reports.next().unwrap()];
    for r in &reports {
        assert_eq!(r.node.signals_not_sent, 0, "every signal was sent: {r:?}");
        assert_eq!(r.mesh.proof_failed, 0, "every proof checked out");
    }
    reports
}
