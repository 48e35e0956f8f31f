//! Two Minca nodes meeting through a relay over real sockets (Minca 04 Network §2, §3, §7.3),
//! shared by the end-to-end tests against `weft relay` and against a real Nostr relay.
//!
//! Each node is the real sans-IO pair — the relay client and the rendezvous — glued together the
//! way a host does it, over real WebSocket clients (async-tungstenite on smol), with the wall
//! clock as `now` and seeded RNGs. The drain rule holds throughout: after every input both
//! machines are polled until empty, and the node then sleeps until the earliest `poll_timeout`
//! or the next socket event.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use smol::channel::{Receiver, Sender};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use weft_proto::codec::js;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider, generate_p256};
use weft_proto::minca::relay_client::{self, ClientConfig, RelayClient, RelayState};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::{Blob, Topic};
use weft_proto::minca::rendezvous::{self, RelayId, Relays, Rendezvous, SignalKind};
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

/// A node: the relay client and the rendezvous machine, glued as a host glues them.
pub(crate) struct Node {
    index: usize,
    pub(crate) client: RelayClient<ChaCha20Rng>,
    pub(crate) rendezvous: Rendezvous<ChaCha20Rng>,
    room: Room,
    pub(crate) topic: Topic,
    /// The rendezvous names relays by [`RelayId`]; the relay client by URL.
    relay_ids: BTreeMap<RelayUrl, RelayId>,
    sockets: BTreeMap<ConnId, Sender<Command>>,
    tasks: Vec<smol::Task<()>>,
    events: Sender<Event>,
    /// Whether a relay socket is open.
    pub(crate) open: bool,
    /// Whether a fetch of the room's topic finished on a relay.
    pub(crate) fetched: bool,
    /// The blobs fetches returned, in order.
    pub(crate) fetched_blobs: Vec<Blob>,
    /// What the rendezvous told the mesh, in order (everything but publishes).
    pub(crate) heard: Vec<rendezvous::Output>,
}

impl Node {
    pub(crate) fn new(
        index: usize,
        relay: &RelayUrl,
        room: &Room,
        seed: u64,
        events: Sender<Event>,
    ) -> Self {
        let session = generate_p256(crypto(), &mut ChaCha20Rng::seed_from_u64(seed));
        let config = ClientConfig {
            relays: vec![relay.clone()],
        };
        Self {
            index,
            client: RelayClient::new(config, crypto(), ChaCha20Rng::seed_from_u64(seed + 1)),
            rendezvous: Rendezvous::new(session, crypto(), ChaCha20Rng::seed_from_u64(seed + 2))
                .expect("a generated session key is valid"),
            room: room.clone(),
            topic: Topic::parse(&room.topic(crypto())).expect("a room's topic is a topic"),
            relay_ids: BTreeMap::new(),
            sockets: BTreeMap::new(),
            tasks: Vec::new(),
            events,
            open: false,
            fetched: false,
            fetched_blobs: Vec::new(),
            heard: Vec::new(),
        }
    }

    fn did(&self) -> String {
        self.rendezvous.did().to_owned()
    }

    pub(crate) fn tell_client(&mut self, input: relay_client::Input) {
        self.client.handle(weft_drivers::now(), input);
        self.drain();
    }

    fn tell_rendezvous(&mut self, input: rendezvous::Input) {
        self.rendezvous.handle(weft_drivers::now(), input);
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

    /// Fires whichever machine's timer is due.
    fn wake(&mut self) {
        let now = weft_drivers::now();
        if self.client.poll_timeout().is_some_and(|w| w.at <= now) {
            self.client.handle_timeout(now);
        }
        if self.rendezvous.poll_timeout().is_some_and(|w| w.at <= now) {
            self.rendezvous.handle_timeout(now);
        }
        self.drain();
    }

    fn next_wakeup(&self) -> Option<Timestamp> {
        [self.client.poll_timeout(), self.rendezvous.poll_timeout()]
            .into_iter()
            .flatten()
            .map(|w| w.at)
            .min()
    }

    fn relay_id(&mut self, url: &RelayUrl) -> RelayId {
        let next = RelayId(self.relay_ids.len() as u64);
        *self.relay_ids.entry(url.clone()).or_insert(next)
    }

    fn relay_url(&self, id: RelayId) -> Option<RelayUrl> {
        self.relay_ids
            .iter()
            .find(|(_, i)| **i == id)
            .map(|(u, _)| u.clone())
    }

    /// The drain rule: poll both machines until neither has anything left, feeding each what
    /// the other says.
    fn drain(&mut self) {
        loop {
            let mut progress = false;
            while let Some(out) = self.client.poll() {
                progress = true;
                self.on_client(out);
            }
            while let Some(out) = self.rendezvous.poll() {
                progress = true;
                self.on_rendezvous(out);
            }
            if !progress {
                return;
            }
        }
    }

    fn on_client(&mut self, out: relay_client::Output) {
        let now = weft_drivers::now();
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
            relay_client::Output::Blob { relay, topic, blob } => {
                let relay = self.relay_id(&relay);
                self.rendezvous.handle(
                    now,
                    rendezvous::Input::Blob {
                        relay,
                        topic: topic.as_str().to_owned(),
                        blob: blob.as_str().to_owned(),
                    },
                );
            }
            relay_client::Output::RelayState {
                relay,
                state: RelayState::Open,
            } => {
                self.open = true;
                let relay = self.relay_id(&relay);
                self.rendezvous
                    .handle(now, rendezvous::Input::RelayOpened(relay));
            }
            relay_client::Output::Fetched { blobs, done, .. } => {
                self.fetched_blobs.extend(blobs);
                self.fetched |= done;
            }
            _ => {}
        }
    }

    fn on_rendezvous(&mut self, out: rendezvous::Output) {
        let now = weft_drivers::now();
        match out {
            rendezvous::Output::Publish {
                topic,
                relays,
                blob,
                ..
            } => {
                let topic = Topic::parse(&topic).expect("the rendezvous publishes under a topic");
                let blob = Blob::parse(&blob).expect("the rendezvous publishes a blob");
                let input = match relays {
                    Relays::All => relay_client::Input::Publish { topic, blob },
                    Relays::One(id) => match self.relay_url(id) {
                        Some(relay) => relay_client::Input::PublishVia { relay, topic, blob },
                        None => return,
                    },
                };
                self.client.handle(now, input);
            }
            other => self.heard.push(other),
        }
    }

    fn heard_from(&self, did: &str) -> bool {
        self.heard
            .iter()
            .any(|o| matches!(o, rendezvous::Output::PeerHeard { did: d, .. } if d == did))
    }

    fn offer_to(&self, did: &str) -> bool {
        self.heard
            .iter()
            .any(|o| matches!(o, rendezvous::Output::OfferTo { did: d, .. } if d == did))
    }

    fn signal(&self, kind: SignalKind) -> Option<(String, Value)> {
        self.heard.iter().find_map(|o| match o {
            rendezvous::Output::SignalReceived {
                from,
                kind: k,
                description,
                ..
            } if *k == kind => Some((from.clone(), description.clone())),
            _ => None,
        })
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
        let left = MEETING_BUDGET.checked_sub(started.elapsed()).unwrap_or_else(|| {
            panic!(
                "the nodes did not {phase} within {MEETING_BUDGET:?}; A heard {:?}; B heard {:?}",
                nodes[0].heard, nodes[1].heard
            )
        });
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

/// Two nodes join one room on `url`, hear each other's hello, and the lesser DID's offer and the
/// other's answer each arrive opened (§2, §7.3). Returns the nodes, their sockets still open, for
/// the caller's checks of what else they counted.
pub(crate) fn meet(url: &RelayUrl, space: &str) -> [Node; 2] {
    let room = Room::of_space(crypto(), space);
    let (events_tx, events) = smol::channel::unbounded();
    let mut nodes = [
        Node::new(0, url, &room, 0x6d65_6574_0a00, events_tx.clone()),
        Node::new(1, url, &room, 0x6d65_6574_0b00, events_tx),
    ];
    let dids = [nodes[0].did(), nodes[1].did()];
    assert_ne!(dids[0], dids[1]);
    // §7.3: the lesser DID (JS string order) offers.
    let (offerer, answerer) = if js::cmp(&dids[0], &dids[1]).is_lt() {
        (0, 1)
    } else {
        (1, 0)
    };
    let offer = json!({"type": "offer", "sdp": "v=0 test"});
    let answer = json!({"type": "answer", "sdp": "v=0 answer"});
    let started = Instant::now();

    smol::block_on(async {
        // Both relay clients watch the room's topic first; a fetch answered on the same socket
        // shows the relay has taken the watch, so neither node's hello is published unheard.
        for node in nodes.iter_mut() {
            let topic = node.topic.clone();
            node.tell_client(relay_client::Input::Join {
                topic,
                relays: vec![],
            });
        }
        run_until(
            &mut nodes,
            &events,
            started,
            "open their relay sockets",
            |n| n.iter().all(|x| x.open),
        )
        .await;
        for node in nodes.iter_mut() {
            let topic = node.topic.clone();
            node.tell_client(relay_client::Input::Fetch { topic });
        }
        run_until(&mut nodes, &events, started, "finish a fetch", |n| {
            n.iter().all(|x| x.fetched)
        })
        .await;

        for node in nodes.iter_mut() {
            let room = node.room.clone();
            node.tell_rendezvous(rendezvous::Input::Join(room));
        }
        run_until(
            &mut nodes,
            &events,
            started,
            "hear each other's hello",
            |n| n[0].heard_from(&dids[1]) && n[1].heard_from(&dids[0]),
        )
        .await;
        run_until(
            &mut nodes,
            &events,
            started,
            "tell the lesser DID to offer",
            |n| n[offerer].offer_to(&dids[answerer]),
        )
        .await;
        assert!(
            !nodes[answerer].offer_to(&dids[offerer]),
            "the greater DID is not told to offer"
        );

        nodes[offerer].tell_rendezvous(rendezvous::Input::Signal {
            room: room.clone(),
            to: dids[answerer].clone(),
            kind: SignalKind::Offer,
            description: offer.clone(),
        });
        run_until(&mut nodes, &events, started, "deliver the offer", |n| {
            n[answerer].signal(SignalKind::Offer).is_some()
        })
        .await;
        assert_eq!(
            nodes[answerer].signal(SignalKind::Offer),
            Some((dids[offerer].clone(), offer.clone()))
        );

        nodes[answerer].tell_rendezvous(rendezvous::Input::Signal {
            room: room.clone(),
            to: dids[offerer].clone(),
            kind: SignalKind::Answer,
            description: answer.clone(),
        });
        run_until(&mut nodes, &events, started, "deliver the answer", |n| {
            n[offerer].signal(SignalKind::Answer).is_some()
        })
        .await;
        assert_eq!(
            nodes[offerer].signal(SignalKind::Answer),
            Some((dids[answerer].clone(), answer.clone()))
        );
    });

    for node in &nodes {
        assert!(
            !node
                .heard
                .iter()
                .any(|o| matches!(o, rendezvous::Output::SignalNotSent { .. })),
            "every signal was sent: {:?}",
            node.heard
        );
        assert_eq!(
            node.client.stats().unrouted,
            0,
            "every publish found a relay"
        );
    }
    nodes
}
