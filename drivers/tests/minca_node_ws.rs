//! The WebSocket to an always-on node over real sockets on loopback (Minca 04 Network §5.2,
//! §5.3): `weft relay` with a node key serves `/peer` on its own port, and the client side of
//! `drivers::minca::node_ws` reaches it, proves itself and exchanges live messages; pins, spaces
//! the node does not hold and frames over 16 MiB are refused as the spec says. A client dials a
//! node socket again when it ends, with backoff, but never after refusing the node's pin.
//! Each message crosses as one binary frame, never continued, never compressed, in order (§5).

#[path = "common/adapter.rs"]
mod adapter;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use adapter::{Adapter, Served};
use async_tungstenite::tungstenite;
use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use tungstenite::Message;
use tungstenite::protocol::frame::coding::CloseCode;
use weft_drivers::host::{
    Commander, Endpoint, Hooks, Host, HostMachine, Listener, MAX_QUEUED_BYTES, Stats, commands,
};
use weft_drivers::minca::node_ws::{
    ClientCommand, ClientCounters, ClientInput, NodeWsClient, NodeWsEvent, PeerInput,
    REDIAL_BACKOFF, Space, client_host, client_input, node_input, socket_config,
};
use weft_drivers::minca::relay::{NodeOptions, RelayInput, RelayOptions, node_relay_host};
use weft_drivers::ws::{NoDial, WsInput};
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{Machine, Timestamp};
use weft_proto::crypto::{CryptoProvider, P256Secret, default_provider, generate_p256};
use weft_proto::minca::mesh::RoomKind;
use weft_proto::minca::node::{self, Join, Node, NodeConfig};
use weft_proto::minca::node_socket::{MAX_FRAME_BYTES, PROTOCOL_ERROR, REFUSED, TOO_BIG};
use weft_proto::minca::node_url::NodeUrl;
use weft_proto::minca::note::{CMD_ALL, Es256Notes, Note};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::space_access::MemorySpace;

const SPACE: &str = "a space/with é";
const WAIT: Duration = Duration::from_secs(10);

fn key(seed: u64) -> P256Secret {
    generate_p256(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn did(key: &P256Secret) -> String {
    DidKey::P256(default_provider().p256_public_key(key).unwrap().0).to_did()
}

/// A note from `root` granting everything about it to `session` (weft's note format).
fn note(root: &P256Secret, session: &P256Secret) -> String {
    let account = did(root);
    let claims = Note {
        iss: account.clone(),
        aud: did(session),
        sub: account,
        cmd: CMD_ALL.into(),
        pol: Vec::new(),
        exp: 4_000_000_000,
        nbf: None,
    };
    Es256Notes::new(default_provider())
        .issue(root, &claims)
        .unwrap()
}

/// A host running on its own thread with a command channel; what it delivers comes out of
/// `heard`. Stopped (and what the test reads of its host handed back) by [`Running::stop`].
struct Running<I, E, T> {
    commands: Commander<I>,
    heard: mpsc::Receiver<E>,
    running: adapter::Running<T>,
}

impl<I: Send + 'static, E: Send + 'static, T: Send + 'static> Running<I, E, T> {
    /// Runs the host `make` builds on smol; once stopped, `finish` takes what the test reads of
    /// it.
    fn spawn<M: HostMachine<Input = I>, H: Hooks<M>>(
        make: impl FnOnce(mpsc::Sender<E>) -> Host<M, H> + Send + 'static,
        finish: impl FnOnce(Host<M, H>) -> T + Send + 'static,
        listeners: Vec<Listener>,
    ) -> Self {
        Self::spawn_on(Adapter::Smol, make, finish, listeners)
    }

    /// [`Running::spawn`] on `adapter`.
    fn spawn_on<M: HostMachine<Input = I>, H: Hooks<M>>(
        adapter: Adapter,
        make: impl FnOnce(mpsc::Sender<E>) -> Host<M, H> + Send + 'static,
        finish: impl FnOnce(Host<M, H>) -> T + Send + 'static,
        listeners: Vec<Listener>,
    ) -> Self {
        let (commander, commands) = commands().unwrap();
        let (heard_tx, heard) = mpsc::channel();
        let running = adapter.spawn(
            move || {
                Ok(Served {
                    commands: Some(commands),
                    ..Served::new(make(heard_tx), listeners)
                })
            },
            finish,
        );
        Self {
            commands: commander,
            heard,
            running,
        }
    }

    fn send(&self, input: I) {
        assert!(self.commands.send(input).is_ok(), "the host runs");
    }

    /// Waits up to [`WAIT`] for an event `pick` accepts; the others are passed over.
    fn hear<X>(&self, what: &str, mut pick: impl FnMut(E) -> Option<X>) -> X {
        let end = Instant::now() + WAIT;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.heard.recv_timeout(left) {
                Ok(e) => {
                    if let Some(t) = pick(e) {
                        return t;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("not heard within {WAIT:?}: {what}");
    }

    fn stop(self) -> T {
        self.running.stop()
    }
}

type Events = mpsc::Sender<NodeWsEvent>;

type Deliver = Box<dyn FnMut(NodeWsEvent) + Send>;
type NodeInput = WsInput<NoDial, RelayInput>;
type NodeRunning = Running<NodeInput, NodeWsEvent, Stats>;
type ClientRunning = Running<ClientCommand, NodeWsEvent, ClientCounters>;

fn deliver(tx: Events) -> Deliver {
    Box::new(move |e| {
        let _ = tx.send(e);
    })
}

/// `weft relay` on loopback as the always-on node of `key`, holding `SPACE`; stopped, it hands
/// back its host's counters.
fn node(key: &P256Secret, node_note: Option<String>) -> (SocketAddr, NodeRunning) {
    node_on(Adapter::Smol, key, node_note)
}

/// [`node`] on `adapter`.
fn node_on(
    adapter: Adapter,
    key: &P256Secret,
    node_note: Option<String>,
) -> (SocketAddr, NodeRunning) {
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap())).unwrap();
    let Endpoint::Tcp(addr) = listener.endpoint().unwrap() else {
        unreachable!("a TCP listener has a TCP address")
    };
    let options = RelayOptions::plain(addr);
    let node = NodeOptions {
        key: key.clone(),
        note: node_note,
        spaces: vec![SPACE.into()],
    };
    let running = Running::spawn_on(
        adapter,
        move |tx: Events| node_relay_host(&options, &node, deliver(tx)).unwrap(),
        |host| host.stats(),
        vec![listener],
    );
    (addr, running)
}

/// A node WebSocket client of session `key` (with `client_note`), seeded `seed`.
fn client(key: &P256Secret, client_note: Option<String>, seed: u64) -> ClientRunning {
    let key = key.clone();
    Running::spawn(
        move |tx: Events| {
            let client = NodeWsClient::new(
                default_provider(),
                key,
                client_note,
                ChaCha20Rng::seed_from_u64(seed),
            )
            .unwrap();
            client_host(client, socket_config(), deliver(tx))
        },
        |host| host.machine().machine().counters(),
        Vec::new(),
    )
}

fn public(space: &str) -> Space {
    Arc::new(MemorySpace::public(space))
}

fn dial(url: &str, space: &str) -> ClientCommand {
    WsInput::App(ClientInput::Dial {
        node: NodeUrl::parse(url).unwrap(),
        space: public(space),
    })
}

fn opened(e: NodeWsEvent) -> Option<String> {
    match e {
        NodeWsEvent::Opened { peer, .. } => Some(peer),
        _ => None,
    }
}

fn closed(e: NodeWsEvent) -> Option<Option<u16>> {
    match e {
        NodeWsEvent::Closed { code, .. } => Some(code),
        _ => None,
    }
}

#[test]
fn a_client_reaches_a_node_over_the_node_websocket_proves_itself_and_exchanges_live_messages() {
    let (node_key, client_key, account) = (key(1), key(2), key(3));
    let (addr, node) = node(&node_key, None);
    let client = client(&client_key, Some(note(&account, &client_key)), 4);
    let url = format!("ws://{addr}/peer");
    client.send(dial(&url, SPACE));
    // One socket per space: a second dial for the same space keeps the first.
    client.send(dial(&url, SPACE));

    // Each side knows the other by the session DID it proved.
    assert_eq!(client.hear("the welcome", opened), did(&node_key));
    assert_eq!(node.hear("the hello", opened), did(&client_key));
    let shown = node.hear("the client's who", |e| match e {
        NodeWsEvent::Account { peer, account, .. } => Some((peer, account)),
        _ => None,
    });
    assert_eq!(shown, (did(&client_key), Some(did(&account))));

    // Client → node.
    client.send(WsInput::App(ClientInput::Send {
        space_id: SPACE.into(),
        kind: "live".into(),
        payload: json!({"text": "hello, node"}),
    }));
    let got = node.hear("the client's live message", |e| match e {
        NodeWsEvent::Message {
            peer,
            account,
            kind,
            payload,
            space_id,
            ..
        } => Some((peer, account, kind, payload, space_id)),
        _ => None,
    });
    assert_eq!(
        got,
        (
            did(&client_key),
            Some(did(&account)),
            "live".to_string(),
            json!({"text": "hello, node"}),
            SPACE.to_string()
        )
    );

    // Node → client.
    node.send(WsInput::App(RelayInput::Peer(PeerInput::Send {
        space_id: SPACE.into(),
        to: None,
        kind: "live".into(),
        payload: json!({"text": "hello, client"}),
    })));
    let got = client.hear("the node's live message", |e| match e {
        NodeWsEvent::Message {
            peer,
            kind,
            payload,
            ..
        } => Some((peer, kind, payload)),
        _ => None,
    });
    assert_eq!(
        got,
        (
            did(&node_key),
            "live".to_string(),
            json!({"text": "hello, client"})
        )
    );

    let counters = client.stop();
    assert_eq!(
        counters.dials_refused, 1,
        "the second dial kept the first socket"
    );
    node.stop();
}

#[test]
fn pinning_the_node_over_the_wire_lets_the_pinned_node_in_and_refuses_another_with_4002() {
    let (node_key, client_key, stranger) = (key(11), key(12), key(13));
    let (addr, node) = node(&node_key, None);

    let right = client(&client_key, None, 14);
    right.send(dial(&format!("ws://{addr}/peer#{}", did(&node_key)), SPACE));
    assert_eq!(
        right.hear("the pinned node's welcome", opened),
        did(&node_key)
    );
    assert_eq!(node.hear("the hello", opened), did(&client_key));
    right.stop();

    let wrong = client(&client_key, None, 15);
    wrong.send(dial(&format!("ws://{addr}/peer#{}", did(&stranger)), SPACE));
    assert_eq!(
        wrong.hear("the refusal of the welcome", closed),
        Some(PROTOCOL_ERROR.code)
    );
    wrong.stop();
    node.stop();
}

#[test]
fn a_client_that_refused_the_node_by_its_pin_does_not_dial_it_again() {
    let (node_key, client_key, stranger) = (key(16), key(17), key(18));
    let (addr, node) = node(&node_key, None);
    let wrong = client(&client_key, None, 19);
    wrong.send(dial(&format!("ws://{addr}/peer#{}", did(&stranger)), SPACE));
    let code = wrong.hear("the client giving up", |e| match e {
        NodeWsEvent::Redialling { .. } => panic!("a refused pin is dialled again"),
        NodeWsEvent::GaveUp { code, .. } => Some(code),
        _ => None,
    });
    assert_eq!(code, Some(PROTOCOL_ERROR.code));
    // Longer than the first two redials would take (≤ 1 s, then ≤ 2 s).
    thread::sleep(REDIAL_BACKOFF.initial * 3);
    let counters = wrong.stop();
    assert_eq!(
        (counters.dials, counters.redials, counters.given_up),
        (1, 0, 1)
    );
    node.stop();
}

#[test]
fn a_client_the_node_refuses_dials_again_with_backoff_while_it_wants_the_space() {
    let (node_key, client_key) = (key(34), key(35));
    let (addr, node) = node(&node_key, None);
    let client = client(&client_key, None, 36);
    client.send(dial(&format!("ws://{addr}/peer"), "another space"));
    // The node refuses each hello (4003); the client hears its socket end, and dials again.
    for _ in 0..2 {
        assert_eq!(node.hear("the node's refusal", closed), Some(REFUSED.code));
        client.hear("a redial", |e| match e {
            NodeWsEvent::Redialling { .. } => Some(()),
            _ => None,
        });
    }
    client.send(WsInput::App(ClientInput::Close {
        space_id: "another space".into(),
    }));
    let counters = client.stop();
    assert!(counters.dials >= 2 && counters.redials >= 1, "{counters:?}");
    assert_eq!(counters.given_up, 0);
    node.stop();
}

#[test]
fn a_node_pinned_by_its_account_is_let_in_by_a_note_for_everything() {
    let (node_key, client_key, account) = (key(21), key(22), key(23));
    let (addr, node) = node(&node_key, Some(note(&account, &node_key)));
    let client = client(&client_key, None, 24);
    client.send(dial(&format!("ws://{addr}/peer#{}", did(&account)), SPACE));
    assert_eq!(client.hear("the welcome", opened), did(&node_key));
    client.stop();
    node.stop();
}

#[test]
fn a_space_the_node_does_not_hold_is_refused_after_the_challenge_like_a_stranger() {
    let (node_key, client_key) = (key(31), key(32));
    let (addr, node) = node(&node_key, None);
    let client = client(&client_key, None, 33);
    client.send(dial(&format!("ws://{addr}/peer"), "another space"));
    // The node closed the socket with its refusal; the client hears the close, and never a peer.
    assert_eq!(node.hear("the node's refusal", closed), Some(REFUSED.code));
    assert_eq!(
        client.hear("the close", |e| match e {
            NodeWsEvent::Opened { .. } => panic!("a refused client opened"),
            other => closed(other),
        }),
        None
    );
    client.stop();
    node.stop();
}

/// A raw WebSocket client on loopback, for what the client machine would never send.
fn raw(addr: SocketAddr, path: &str) -> tungstenite::WebSocket<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (ws, response) = tungstenite::client::client(format!("ws://{addr}{path}"), stream).unwrap();
    assert_eq!(response.status(), 101);
    ws
}

fn challenge_of(ws: &mut tungstenite::WebSocket<TcpStream>) -> Value {
    match ws.read().unwrap() {
        Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
        other => panic!("not a challenge: {other:?}"),
    }
}

/// The code of the close frame the node sends next.
fn close_code(ws: &mut tungstenite::WebSocket<TcpStream>) -> u16 {
    loop {
        match ws.read() {
            Ok(Message::Close(Some(frame))) => return u16::from(frame.code),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

#[test]
fn the_node_serves_peer_on_the_relays_port_and_challenges_at_once() {
    let node_key = key(41);
    let (addr, node) = node(&node_key, None);
    // `/peer` is the node's: the challenge comes first, unasked, even for a space it lacks.
    for path in [
        "/peer?space=a%20space%2Fwith%20%C3%A9",
        "/peer?space=nothing-here",
    ] {
        let mut ws = raw(addr, path);
        let challenge = challenge_of(&mut ws);
        assert_eq!(challenge["type"], "challenge");
        assert_eq!(challenge["did"], did(&node_key));
        assert_eq!(challenge["nonce"].as_str().unwrap().len(), 22);
    }
    // Any other path is the relay's, on the same port: it upgrades and sends no challenge.
    let mut relay = raw(addr, "/");
    relay
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(matches!(relay.read(), Err(tungstenite::Error::Io(_))));
    node.stop();
}

#[test]
fn a_frame_over_16_mib_on_peer_is_closed_with_1009() {
    let node_key = key(51);
    let (addr, node) = node(&node_key, None);
    // A frame of exactly 16 MiB is read whole (and, being no hello, refused as a protocol error).
    let mut ws = raw(addr, "/peer?space=x");
    challenge_of(&mut ws);
    ws.send(Message::binary(vec![b' '; MAX_FRAME_BYTES]))
        .unwrap();
    assert_eq!(close_code(&mut ws), PROTOCOL_ERROR.code);

    // Only the head of a binary frame one byte over the bound: the node refuses it on its length
    // alone (a client still sending 16 MiB would be cut off mid-write, which it must tolerate).
    let mut ws = raw(addr, "/peer?space=x");
    challenge_of(&mut ws);
    let mut head = vec![0x82, 0x80 | 127];
    head.extend_from_slice(&(MAX_FRAME_BYTES as u64 + 1).to_be_bytes());
    head.extend_from_slice(&[1, 2, 3, 4]);
    ws.get_mut().write_all(&head).unwrap();
    assert_eq!(close_code(&mut ws), TOO_BIG.code);
    assert_eq!(TOO_BIG.code, u16::from(CloseCode::Size));
    node.stop();
}

#[test]
fn a_hello_that_is_not_a_hello_is_closed_with_4002_on_the_wire() {
    let node_key = key(61);
    let (addr, node) = node(&node_key, None);
    let mut ws = raw(addr, &format!("/peer?space={}", "x"));
    challenge_of(&mut ws);
    ws.send(Message::text("{\"type\":\"welcome\"}")).unwrap();
    assert_eq!(close_code(&mut ws), PROTOCOL_ERROR.code);
    node.stop();
}

/// Feeds `mine` every event the client reports until one of its outputs satisfies `want`; the
/// node socket outputs among them go back to the client, as a host running both does.
fn pump_until(
    client: &ClientRunning,
    mine: &mut Node<ChaCha20Rng>,
    what: &str,
    mut want: impl FnMut(&node::Output) -> bool,
) -> node::Output {
    client.hear(what, |event| {
        let now = Timestamp::from_millis(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        );
        mine.handle(now, node_input(default_provider(), event)?);
        let mut found = None;
        while let Some(out) = mine.poll() {
            match client_input(&out) {
                Some(input) => client.send(WsInput::App(input)),
                None if found.is_none() && want(&out) => found = Some(out),
                None => {}
            }
        }
        found
    })
}

#[test]
fn a_node_machine_takes_the_node_socket_as_a_peer_of_its_space_and_live_messages_cross_both_ways() {
    let (node_key, client_key) = (key(71), key(72));
    let (addr, always_on) = node(&node_key, None);
    let client = client(&client_key, None, 73);
    let crypto = default_provider();
    let config = NodeConfig {
        relays: vec![RelayUrl::parse("ws://127.0.0.1:9").unwrap()],
    };
    let mut mine = Node::new(
        client_key.clone(),
        config,
        crypto,
        ChaCha20Rng::seed_from_u64(74),
    )
    .unwrap();
    let join = Join::space(crypto, SPACE, RoomKind::PublicSpace, None);
    let room = join.room.clone();
    mine.handle(Timestamp::from_secs(1_800_000_000), node::Input::Join(join));
    while mine.poll().is_some() {}

    client.send(dial(&format!("ws://{addr}/peer"), SPACE));
    let admitted = pump_until(&client, &mut mine, "the node admitted", |o| {
        matches!(o, node::Output::Admitted { .. })
    });
    assert_eq!(
        admitted,
        node::Output::Admitted {
            room: room.clone(),
            peer: did(&node_key)
        }
    );
    always_on.hear("the client opened", opened);

    // The always-on node's live message is the Node's delivery from the node's DID.
    always_on.send(WsInput::App(RelayInput::Peer(PeerInput::Send {
        space_id: SPACE.into(),
        to: Some(did(&client_key)),
        kind: "live".into(),
        payload: json!({"text": "from the node"}),
    })));
    let delivered = pump_until(&client, &mut mine, "the node's live message", |o| {
        matches!(o, node::Output::Deliver { .. })
    });
    assert_eq!(
        delivered,
        node::Output::Deliver {
            room: room.clone(),
            peer: did(&node_key),
            kind: "live".into(),
            payload: json!({"text": "from the node"}),
        }
    );

    // The Node's send in the room reaches the always-on node over the socket.
    mine.handle(
        Timestamp::from_secs(1_800_000_001),
        node::Input::Send {
            room,
            to: None,
            kind: "live".into(),
            payload: json!({"text": "from the Node"}),
        },
    );
    while let Some(out) = mine.poll() {
        if let Some(input) = client_input(&out) {
            client.send(WsInput::App(input));
        }
    }
    let got = always_on.hear("the Node's live message", |e| match e {
        NodeWsEvent::Message { peer, payload, .. } => Some((peer, payload)),
        _ => None,
    });
    assert_eq!(got, (did(&client_key), json!({"text": "from the Node"})));
    client.stop();
    always_on.stop();
}

/// A `weft node` runner (no relay) reaching the always-on node at `url` for [`SPACE`]; its events
/// come out of the receiver.
fn runner(
    url: &str,
) -> (
    weft_drivers::minca::node_runner::RunningNode,
    mpsc::Receiver<weft_drivers::minca::node_runner::NodeEvent>,
) {
    use weft_drivers::minca::node_runner::{NodeOptions, RunningNode};
    let options = NodeOptions {
        spaces: vec![SPACE.into()],
        relays: Vec::new(),
        nodes: vec![NodeUrl::parse(url).unwrap()],
        bind: "127.0.0.1:0".parse().unwrap(),
        account: None,
        session: None,
    };
    let (tx, rx) = mpsc::channel();
    let running = RunningNode::start(options, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    (running, rx)
}

#[test]
fn a_weft_node_refused_by_its_pin_reports_one_dial_and_the_space_given_up() {
    use weft_drivers::minca::node_runner::NodeEvent;
    let (node_key, stranger) = (key(71), key(72));
    let (addr, node) = node(&node_key, None);
    let (running, events) = runner(&format!("ws://{addr}/peer#{}", did(&stranger)));
    // The node saw the hello and welcomed it; the client refused the welcome.
    node.hear("the hello", opened);
    let end = Instant::now() + WAIT;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match events.recv_timeout(left).expect("the runner gives up") {
            NodeEvent::Other(what) if what.starts_with("GaveUp") => break,
            NodeEvent::Admitted { .. } => panic!("a refused node was admitted"),
            _ => {}
        }
    }
    // Longer than the first two redials would take (≤ 1 s, then ≤ 2 s).
    thread::sleep(REDIAL_BACKOFF.initial * 3);
    let report = running.stop().unwrap();
    let sockets = report.node_sockets;
    assert_eq!(sockets.len(), 1, "one client per --node URL");
    assert_eq!(
        (sockets[0].dials, sockets[0].redials, sockets[0].given_up),
        (1, 0, 1)
    );
    node.stop();
}

#[test]
fn a_weft_node_whose_node_goes_away_dials_it_again_and_reports_the_redials() {
    use weft_drivers::minca::node_runner::NodeEvent;
    let node_key = key(81);
    let (addr, node) = node(&node_key, None);
    let (running, events) = runner(&format!("ws://{addr}/peer#{}", did(&node_key)));
    let node_did = did(&node_key);
    let wait = |what: &str, pick: &dyn Fn(&NodeEvent) -> bool| {
        let end = Instant::now() + WAIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(e) if pick(&e) => return,
                Ok(_) => {}
                Err(_) => panic!("not heard within {WAIT:?}: {what}"),
            }
        }
    };
    let admitted =
        |e: &NodeEvent| matches!(e, NodeEvent::Admitted { peer, .. } if *peer == node_did);
    wait("the node admitted", &admitted);
    // The node stops: its listener and sockets are gone, so the redials fail until it is back.
    node.stop();
    wait(
        "the node departed",
        &|e| matches!(e, NodeEvent::Departed { peer, .. } if *peer == node_did),
    );
    wait(
        "a failed redial",
        &|e| matches!(e, NodeEvent::Other(w) if w.starts_with("DialFailed")),
    );
    let report = running.stop().unwrap();
    let sockets = &report.node_sockets[0];
    assert!(sockets.redials >= 1, "{sockets:?}");
    assert_eq!(sockets.dials, sockets.redials + 1);
    assert_eq!(sockets.given_up, 0);
}

/// One WebSocket frame as it crossed the wire (RFC 6455 §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WireFrame {
    fin: bool,
    /// RSV1–3; RSV1 set is a compressed message (RFC 7692 §6).
    rsv: u8,
    opcode: u8,
    len: usize,
}

/// What a [`tap`] saw in one direction: the HTTP head, then every frame.
#[derive(Debug, Default)]
struct Seen {
    head: String,
    frames: Vec<WireFrame>,
    buf: Vec<u8>,
}

impl Seen {
    /// Takes `bytes` and records each head and frame completed by them.
    fn take(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if self.head.is_empty() {
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return;
            };
            self.head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            self.buf.drain(..end + 4);
        }
        loop {
            let b = &self.buf;
            if b.len() < 2 {
                return;
            }
            let (mut at, len7) = (2usize, usize::from(b[1] & 0x7f));
            let len = match len7 {
                126 if b.len() >= 4 => {
                    at = 4;
                    usize::from(u16::from_be_bytes([b[2], b[3]]))
                }
                127 if b.len() >= 10 => {
                    at = 10;
                    u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize
                }
                126 | 127 => return,
                n => n,
            };
            if b[1] & 0x80 != 0 {
                at += 4;
            }
            if b.len() < at + len {
                return;
            }
            self.frames.push(WireFrame {
                fin: b[0] & 0x80 != 0,
                rsv: (b[0] >> 4) & 0x7,
                opcode: b[0] & 0x0f,
                len,
            });
            self.buf.drain(..at + len);
        }
    }
}

type Tapped = Arc<std::sync::Mutex<[Seen; 2]>>;

/// A TCP relay on loopback to `to` for one connection, recording what crosses it each way
/// (0: client to node, 1: node to client).
fn tap(to: SocketAddr) -> (SocketAddr, Tapped) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let seen: Tapped = Arc::default();
    let record = seen.clone();
    thread::spawn(move || {
        let Ok((client, _)) = listener.accept() else {
            return;
        };
        let node = TcpStream::connect(to).unwrap();
        for (way, mut from, mut into) in [
            (0, client.try_clone().unwrap(), node.try_clone().unwrap()),
            (1, node, client),
        ] {
            let record = record.clone();
            thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match io::Read::read(&mut from, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    record.lock().unwrap()[way].take(&buf[..n]);
                    if into.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = into.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (at, seen)
}

/// Binary WebSocket frames (opcode 2) and continuation frames (opcode 0).
const BINARY: u8 = 2;
const CONTINUATION: u8 = 0;

#[test]
fn over_the_node_websocket_each_message_is_one_uncompressed_binary_frame_in_order_each_way() {
    let (node_key, client_key) = (key(91), key(92));
    let (addr, node) = node(&node_key, None);
    let (tapped, seen) = tap(addr);
    let client = client(&client_key, None, 93);
    client.send(dial(&format!("ws://{tapped}/peer"), SPACE));
    assert_eq!(client.hear("the welcome", opened), did(&node_key));
    assert_eq!(node.hear("the hello", opened), did(&client_key));

    // Sizes around the frame-length encodings (125, 126, 65 535) and well past any buffer, up to
    // 2 MiB, sent back to back: all of them queued at once stay under the host's write-behind
    // bound (`host::MAX_QUEUED_BYTES`, 4 MiB), past which a socket is cut, not split.
    let fills: Vec<usize> = vec![
        1_000,
        1,
        125,
        126,
        65_535,
        65_536,
        16_384,
        300_000,
        1 << 20,
        2,
        70_000,
        2 << 20,
    ];
    assert!(fills.iter().sum::<usize>() + 4096 < weft_drivers::host::MAX_QUEUED_BYTES);
    let message = |i: usize, n: usize| json!({"seq": i, "fill": "x".repeat(n)});
    const KIND: &str = "x-size";
    for (i, n) in fills.iter().enumerate() {
        client.send(WsInput::App(ClientInput::Send {
            space_id: SPACE.into(),
            kind: KIND.into(),
            payload: message(i, *n),
        }));
    }
    for (i, n) in fills.iter().enumerate() {
        let got = node.hear("the client's message", |e| match e {
            NodeWsEvent::Message { kind, payload, .. } if kind == KIND => Some(payload),
            _ => None,
        });
        assert_eq!(got, message(i, *n), "client to node, message {i}");
    }
    for (i, n) in fills.iter().enumerate() {
        node.send(WsInput::App(RelayInput::Peer(PeerInput::Send {
            space_id: SPACE.into(),
            to: None,
            kind: KIND.into(),
            payload: message(i, *n),
        })));
    }
    for (i, n) in fills.iter().enumerate() {
        let got = client.hear("the node's message", |e| match e {
            NodeWsEvent::Message { kind, payload, .. } if kind == KIND => Some(payload),
            _ => None,
        });
        assert_eq!(got, message(i, *n), "node to client, message {i}");
    }
    // A client offering compression is answered without it: the node accepts no extension.
    let mut offering = TcpStream::connect(addr).unwrap();
    offering.set_read_timeout(Some(WAIT)).unwrap();
    let request = format!(
        "GET /peer?space=x HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    );
    offering.write_all(request.as_bytes()).unwrap();
    let mut answer = Seen::default();
    let mut buf = [0u8; 4096];
    while answer.head.is_empty() {
        let n = io::Read::read(&mut offering, &mut buf).unwrap();
        assert!(n > 0, "the node answers the upgrade");
        answer.take(&buf[..n]);
    }
    assert!(answer.head.starts_with("HTTP/1.1 101"), "{}", answer.head);
    assert!(
        !answer
            .head
            .to_ascii_lowercase()
            .contains("sec-websocket-extensions"),
        "{}",
        answer.head
    );
    client.stop();
    node.stop();

    let seen = seen.lock().unwrap();
    let [to_node, to_client] = &*seen;
    // No compression offered, none accepted (RFC 7692: `Sec-WebSocket-Extensions`).
    assert!(
        to_node.head.starts_with("GET /peer?space="),
        "{}",
        to_node.head
    );
    assert!(
        to_client.head.starts_with("HTTP/1.1 101"),
        "{}",
        to_client.head
    );
    for head in [&to_node.head, &to_client.head] {
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("sec-websocket-extensions"),
            "{head}"
        );
    }
    for (way, side) in [("client to node", to_node), ("node to client", to_client)] {
        // Every frame is whole (FIN), uncompressed (no RSV bit) and none continues another.
        for f in &side.frames {
            assert!(
                f.fin && f.rsv == 0 && f.opcode != CONTINUATION,
                "{way}: {f:?}"
            );
        }
        // Each message is one binary frame, in the order sent: the last binary frames are these
        // messages (only the handshake's `who` came before them), each its fill plus the same
        // envelope (plus the digits of its `seq`).
        let data: Vec<usize> = side
            .frames
            .iter()
            .filter(|f| f.opcode == BINARY)
            .map(|f| f.len)
            .collect();
        assert!(data.len() >= fills.len(), "{way}: {data:?}");
        let ours = &data[data.len() - fills.len()..];
        let envelope: Vec<Option<usize>> = ours
            .iter()
            .zip(&fills)
            .enumerate()
            .map(|(i, (len, n))| len.checked_sub(n + i.to_string().len()))
            .collect();
        assert!(
            envelope.iter().all(|e| *e == envelope[0]),
            "{way}: {data:?}"
        );
    }
}

/// One message of 6 MiB, over the host's write-behind bound (`host::MAX_QUEUED_BYTES`, 4 MiB)
/// and under the node socket's frame bound (16 MiB, §5.3), crosses whole each way, the node
/// sending on each adapter: the bound counts what waits behind the message being written, not
/// that message.
#[test]
fn a_message_over_the_write_behind_bound_crosses_the_node_websocket_whole_each_way_on_every_adapter()
 {
    const KIND: &str = "x-large";
    let fill = 6 << 20;
    assert!(fill > MAX_QUEUED_BYTES && fill + 1024 < MAX_FRAME_BYTES);
    let large = json!({"fill": "x".repeat(fill)});
    for (seed, &adapter) in (100..).step_by(3).zip(Adapter::ALL) {
        let (node_key, client_key) = (key(seed), key(seed + 1));
        let (addr, node) = node_on(adapter, &node_key, None);
        let client = client(&client_key, None, seed + 2);
        client.send(dial(&format!("ws://{addr}/peer"), SPACE));
        assert_eq!(client.hear("the welcome", opened), did(&node_key));
        assert_eq!(node.hear("the hello", opened), did(&client_key));
        let message = |e: NodeWsEvent| match e {
            NodeWsEvent::Message { kind, payload, .. } if kind == KIND => Some(payload),
            _ => None,
        };

        client.send(WsInput::App(ClientInput::Send {
            space_id: SPACE.into(),
            kind: KIND.into(),
            payload: large.clone(),
        }));
        // Compared, not printed: a failure would print 6 MiB.
        let got = node.hear("the client's large message", message);
        assert!(got == large, "{adapter:?}: client to node");

        node.send(WsInput::App(RelayInput::Peer(PeerInput::Send {
            space_id: SPACE.into(),
            to: None,
            kind: KIND.into(),
            payload: large.clone(),
        })));
        let got = client.hear("the node's large message", message);
        assert!(got == large, "{adapter:?}: node to client");

        client.stop();
        let stats = node.stop();
        assert_eq!(stats.slow_readers, 0, "{adapter:?}: nothing was cut");
    }
}

/// The live messages `running` hears before a message of type `end` (another type, which only
/// the byte rate holds).
fn lives_before<I: Send + 'static, T: Send + 'static>(
    running: &Running<I, NodeWsEvent, T>,
    end: &str,
    what: &str,
) -> usize {
    let mut live = 0;
    running.hear(what, |e| match e {
        NodeWsEvent::Message { kind, .. } if kind == "live" => {
            live += 1;
            None
        }
        NodeWsEvent::Message { kind, .. } if kind == end => Some(()),
        _ => None,
    });
    live
}

/// Issue #45 over real sockets, both sides (§9.2): 150 live messages sent at once over the node
/// WebSocket reach the other side's application 60 times (the burst), plus what the rate of 20 a
/// second refilled while they crossed, and no more; the socket stays open and a message sent
/// after them still arrives. `weft relay --node-key` drives the node side's socket machine
/// without a `Node`, so this is the limit as `weft relay --chat` prints it.
#[test]
fn a_flood_of_live_messages_over_the_node_websocket_is_held_to_60_then_20_a_second_both_ways() {
    const FLOOD: usize = 150;
    const END: &str = "x-end";
    let (node_key, client_key) = (key(61), key(62));
    let (addr, node) = node(&node_key, None);
    let client = client(&client_key, None, 63);
    client.send(dial(&format!("ws://{addr}/peer"), SPACE));
    assert_eq!(client.hear("the welcome", opened), did(&node_key));
    assert_eq!(node.hear("the hello", opened), did(&client_key));
    // At most one token more than the rate refilled in `elapsed`, at 20 a second.
    let allowed = |elapsed: Duration| 60 + (elapsed.as_millis() as usize * 20).div_ceil(1000);

    // Client → node.
    let start = Instant::now();
    for n in 0..FLOOD {
        client.send(WsInput::App(ClientInput::Send {
            space_id: SPACE.into(),
            kind: "live".into(),
            payload: json!(n),
        }));
    }
    client.send(WsInput::App(ClientInput::Send {
        space_id: SPACE.into(),
        kind: END.into(),
        payload: json!(null),
    }));
    let heard = lives_before(&node, END, "the client's end marker");
    let elapsed = start.elapsed();
    assert!(
        (60..=allowed(elapsed)).contains(&heard),
        "{heard} of {FLOOD} in {elapsed:?}"
    );

    // Node → client.
    let start = Instant::now();
    let to_client = |kind: &str, payload: Value| {
        WsInput::App(RelayInput::Peer(PeerInput::Send {
            space_id: SPACE.into(),
            to: None,
            kind: kind.into(),
            payload,
        }))
    };
    for n in 0..FLOOD {
        node.send(to_client("live", json!(n)));
    }
    node.send(to_client(END, json!(null)));
    let heard = lives_before(&client, END, "the node's end marker");
    let elapsed = start.elapsed();
    assert!(
        (60..=allowed(elapsed)).contains(&heard),
        "{heard} of {FLOOD} in {elapsed:?}"
    );

    // The socket stayed open: once the rate refilled, a live message crosses each way.
    thread::sleep(Duration::from_millis(100));
    client.send(WsInput::App(ClientInput::Send {
        space_id: SPACE.into(),
        kind: "live".into(),
        payload: json!("later"),
    }));
    node.hear("the client's later message", |e| match e {
        NodeWsEvent::Message { payload, .. } if payload == json!("later") => Some(()),
        _ => None,
    });
    node.send(to_client("live", json!("later")));
    client.hear("the node's later message", |e| match e {
        NodeWsEvent::Message { payload, .. } if payload == json!("later") => Some(()),
        _ => None,
    });
    client.stop();
    node.stop();
}
