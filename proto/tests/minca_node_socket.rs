//! The per-peer receive limits on a node socket (§5.2, §5.3), both sides, as an application sees
//! them through a [`Node`]: §7.4's byte rate and §9.2's live rate and size.
//!
//! A device's [`ClientSocket`] and an always-on node's [`NodeSocket`] are wired to each other in
//! memory, each under a [`Node`] as a host composes them (the socket's `Open`, `Account` and
//! `Message` become the node's `NodeSocket*` inputs; the node's `NodeSocketSend` becomes the
//! socket's `Send`). Each test runs on both sides: the node receiving from the client, and the
//! client receiving from the node. The mesh's side of the same rules is in `minca_mesh.rs`
//! (`the_live_limits_hold_at_their_boundaries_on_the_mesh_each_way`, ...): the same code,
//! `weft_proto::minca::limits`, decides on both.
//!
//! Time is explicit: the handshake runs at [`T0`], and each test moves the clock itself.
#![cfg(feature = "minca")]

use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{P256Secret, default_provider, generate_p256};
use weft_proto::minca::limits::{LIVE, LIVE_RATE, LimitCounters, MAX_LIVE_CHARS, PEER_BYTE_RATE};
use weft_proto::minca::mesh::RoomKind;
use weft_proto::minca::node::{self, Join, Node, NodeConfig};
use weft_proto::minca::node_socket::{ClientSocket, Counters, Input, NodeSocket, Output, Session};
use weft_proto::minca::note::Es256Notes;
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::room::Room;
use weft_proto::minca::space_access::MemorySpace;

const SPACE: &str = "a-space";
const T0: u64 = 1_800_000_000_000;
/// The socket's id on each side's node.
const CONN: ConnId = ConnId(1);

/// Which side receives what a test sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// The always-on node (its `/peer` socket, [`NodeSocket`]) receives from the client.
    Host,
    /// The device ([`ClientSocket`]) receives from the always-on node.
    Client,
}

const SIDES: [Side; 2] = [Side::Host, Side::Client];

fn key(seed: u64) -> P256Secret {
    generate_p256(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn node_of(key: &P256Secret, seed: u64) -> (Node<ChaCha20Rng>, Room) {
    let crypto = default_provider();
    // A relay it is never connected to: the room is joined, and its peers here are the socket's.
    let config = NodeConfig {
        relays: vec![RelayUrl::parse("ws://127.0.0.1:8787").unwrap()],
    };
    let mut node = Node::new(
        key.clone(),
        config,
        crypto,
        ChaCha20Rng::seed_from_u64(seed),
    )
    .unwrap();
    let join = Join::space(crypto, SPACE, RoomKind::PublicSpace, None);
    let room = join.room.clone();
    node.handle(Timestamp::from_millis(T0), node::Input::Join(join));
    while node.poll().is_some() {}
    (node, room)
}

/// A client and an always-on node, each a [`Node`] over its end of one node socket.
struct Pair {
    now: Timestamp,
    client: ClientSocket<MemorySpace, Es256Notes, ChaCha20Rng>,
    host: NodeSocket<MemorySpace, Es256Notes, ChaCha20Rng>,
    client_node: Node<ChaCha20Rng>,
    host_node: Node<ChaCha20Rng>,
    room: Room,
    /// The payloads each side's node delivered, `[host, client]`.
    delivered: [Vec<Value>; 2],
    /// The peer each of them was attributed to.
    attributed: [Vec<String>; 2],
    /// Messages of a type a space's room does not take, handed on by each socket (`[host,
    /// client]`): what got past the byte rate.
    handed_on: [usize; 2],
    /// Whether each socket asked to close.
    closed: [bool; 2],
    /// The session DID of each side, `[host, client]`.
    dids: [String; 2],
}

impl Pair {
    /// The handshake at [`T0`]: both sides open, each node has admitted the other side.
    fn open() -> Self {
        let crypto = default_provider();
        let now = Timestamp::from_millis(T0);
        let (client_key, host_key) = (key(1), key(2));
        let client_session = Session::new(crypto, client_key.clone(), None).unwrap();
        let host_session = Session::new(crypto, host_key.clone(), None).unwrap();
        let dids = [
            host_session.did().to_string(),
            client_session.did().to_string(),
        ];
        let client = ClientSocket::new(
            crypto,
            Es256Notes::new(crypto),
            ChaCha20Rng::seed_from_u64(3),
            client_session,
            MemorySpace::public(SPACE),
            None,
            now,
        );
        let host = NodeSocket::new(
            crypto,
            Es256Notes::new(crypto),
            ChaCha20Rng::seed_from_u64(4),
            host_session,
            SPACE,
            Some(MemorySpace::public(SPACE)),
            now,
        );
        let (client_node, room) = node_of(&client_key, 5);
        let (host_node, _) = node_of(&host_key, 6);
        let mut pair = Self {
            now,
            client,
            host,
            client_node,
            host_node,
            room,
            delivered: [Vec::new(), Vec::new()],
            attributed: [Vec::new(), Vec::new()],
            handed_on: [0, 0],
            closed: [false, false],
            dids,
        };
        pair.pump();
        assert_eq!(pair.host.peer(), Some(&*pair.dids[1]));
        assert_eq!(pair.client.peer(), Some(&*pair.dids[0]));
        pair
    }

    fn at(&mut self, ms_after_t0: u64) {
        self.now = Timestamp::from_millis(T0 + ms_after_t0);
    }

    fn later(&mut self, d: Duration) {
        self.now = self.now.saturating_add(d);
    }

    fn index(side: Side) -> usize {
        match side {
            Side::Host => 0,
            Side::Client => 1,
        }
    }

    /// A frame arrives at `side`'s socket from the other side, bytes as they are.
    fn frame_to(&mut self, side: Side, bytes: Vec<u8>) {
        let now = self.now;
        match side {
            Side::Host => self.host.handle(now, Input::Binary(bytes)),
            Side::Client => self.client.handle(now, Input::Binary(bytes)),
        }
        self.pump();
    }

    /// A live message of `payload` arrives at `side`, written as the other side writes it.
    fn live_to(&mut self, side: Side, payload: Value) {
        let from = &self.dids[1 - Self::index(side)];
        let bytes = serde_json::to_vec(&json!({"type": LIVE, "from": from, "payload": payload}));
        self.frame_to(side, bytes.unwrap());
    }

    /// The other side's application sends a live message of `payload` to `side`, through its
    /// node and its socket.
    fn app_sends_to(&mut self, side: Side, payload: Value) {
        let send = node::Input::Send {
            room: self.room.clone(),
            to: None,
            kind: LIVE.into(),
            payload,
        };
        let now = self.now;
        match side {
            Side::Host => self.client_node.handle(now, send),
            Side::Client => self.host_node.handle(now, send),
        }
        self.pump();
    }

    fn node_counters(&self, side: Side) -> node::Counters {
        match side {
            Side::Host => self.host_node.counters(),
            Side::Client => self.client_node.counters(),
        }
    }

    fn delivered(&self, side: Side) -> &[Value] {
        &self.delivered[Self::index(side)]
    }

    fn counters(&self, side: Side) -> Counters {
        match side {
            Side::Host => self.host.counters(),
            Side::Client => self.client.counters(),
        }
    }

    fn limits(&self, side: Side) -> LimitCounters {
        self.counters(side).limits
    }

    /// Whether the socket is open on both ends (nothing asked to close, both peers known).
    fn still_open(&self) -> bool {
        self.closed == [false, false] && self.host.peer().is_some() && self.client.peer().is_some()
    }

    /// Moves frames and events until nothing is left.
    fn pump(&mut self) {
        loop {
            let mut progress = false;
            while let Some(o) = self.client.poll() {
                progress = true;
                self.socket_output(Side::Client, o);
            }
            while let Some(o) = self.host.poll() {
                progress = true;
                self.socket_output(Side::Host, o);
            }
            while let Some(o) = self.client_node.poll() {
                progress = true;
                self.node_output(Side::Client, o);
            }
            while let Some(o) = self.host_node.poll() {
                progress = true;
                self.node_output(Side::Host, o);
            }
            if !progress {
                return;
            }
        }
    }

    /// What `side`'s socket asked for: frames go to the other socket, events to `side`'s node.
    fn socket_output(&mut self, side: Side, o: Output) {
        let now = self.now;
        let event = match o {
            Output::SendText(t) => return self.other_socket(side, Input::Text(t)),
            Output::SendBinary(b) => return self.other_socket(side, Input::Binary(b)),
            Output::Close(_) => {
                self.closed[Self::index(side)] = true;
                return;
            }
            Output::Open { peer } => node::Input::NodeSocketOpened {
                conn: CONN,
                room: self.room.clone(),
                peer,
            },
            Output::Account { account, .. } => node::Input::NodeSocketAccount {
                conn: CONN,
                account,
            },
            Output::Message { kind, payload, .. } => {
                if kind != LIVE {
                    self.handed_on[Self::index(side)] += 1;
                }
                node::Input::NodeSocketMessage {
                    conn: CONN,
                    kind,
                    payload,
                }
            }
            other => panic!("unexpected socket output {other:?}"),
        };
        match side {
            Side::Host => self.host_node.handle(now, event),
            Side::Client => self.client_node.handle(now, event),
        }
    }

    fn other_socket(&mut self, side: Side, input: Input) {
        let now = self.now;
        match side {
            Side::Host => self.client.handle(now, input),
            Side::Client => self.host.handle(now, input),
        }
    }

    /// What `side`'s node asked for or reported.
    fn node_output(&mut self, side: Side, o: node::Output) {
        let now = self.now;
        match o {
            node::Output::Deliver {
                kind,
                payload,
                peer,
                ..
            } => {
                assert_eq!(kind, LIVE);
                self.delivered[Self::index(side)].push(payload);
                self.attributed[Self::index(side)].push(peer);
            }
            node::Output::NodeSocketSend { kind, payload, .. } => {
                let send = Input::Send { kind, payload };
                match side {
                    Side::Host => self.host.handle(now, send),
                    Side::Client => self.client.handle(now, send),
                }
            }
            node::Output::NodeSocketClose { .. } => self.closed[Self::index(side)] = true,
            _ => {}
        }
    }
}

/// A string payload whose `JSON.stringify` is `chars` characters (its two quotes included).
fn stringified(chars: usize) -> Value {
    let v = Value::String("x".repeat(chars - 2));
    assert_eq!(serde_json::to_string(&v).unwrap().len(), chars);
    v
}

/// M-9.2-e, M-9.2-h: a payload of 65 536 characters is delivered, one of 65 537 is dropped and
/// counted, the socket stays open and the next message is delivered, on either side.
#[test]
fn a_live_payload_of_65_536_characters_is_delivered_and_of_65_537_dropped_on_either_side() {
    for side in SIDES {
        let mut pair = Pair::open();
        pair.at(1_000);
        pair.live_to(side, stringified(MAX_LIVE_CHARS));
        assert_eq!(pair.delivered(side), [stringified(65_536)], "{side:?}");
        pair.live_to(side, stringified(MAX_LIVE_CHARS + 1));
        pair.live_to(side, stringified(300_002));
        assert_eq!(pair.delivered(side).len(), 1, "{side:?}");
        assert_eq!(pair.limits(side).live_too_long, 2, "{side:?}");
        assert!(pair.still_open(), "{side:?}");
        pair.live_to(side, json!("later"));
        assert_eq!(
            pair.delivered(side).last(),
            Some(&json!("later")),
            "{side:?}"
        );
        assert_eq!(pair.limits(side).live_rate_limited, 0, "{side:?}");
    }
}

/// M-9.2-e, on the sending side of either end: the application's live message longer than a
/// receiver takes never leaves, and one at the limit does and is delivered.
#[test]
fn a_live_payload_longer_than_65_536_characters_is_not_sent_from_either_side() {
    for side in SIDES {
        let mut pair = Pair::open();
        pair.app_sends_to(side, stringified(MAX_LIVE_CHARS + 1));
        let sender = if side == Side::Host {
            Side::Client
        } else {
            Side::Host
        };
        assert_eq!(pair.counters(sender).dropped_sends, 1, "{side:?}");
        assert_eq!(pair.limits(side).live_too_long, 0, "{side:?}");
        pair.app_sends_to(side, stringified(MAX_LIVE_CHARS));
        assert_eq!(pair.delivered(side), [stringified(65_536)], "{side:?}");
    }
}

/// M-9.2-g: 60 live messages at one instant are delivered and the 61st dropped and counted; a
/// token comes back every 50 ms (20 a second): none at 49 ms, one at 50 ms, twenty a second
/// later and not 21. The socket stays open and later messages flow, on either side.
#[test]
fn a_node_socket_peer_gets_a_burst_of_60_live_messages_then_20_a_second_on_either_side() {
    assert_eq!((LIVE_RATE.burst, LIVE_RATE.per_second), (60, 20));
    for side in SIDES {
        let mut pair = Pair::open();
        // The allowance began full at the handshake; the clock has not moved since.
        for n in 0..61 {
            pair.live_to(side, json!(n));
        }
        assert_eq!(pair.delivered(side).len(), 60, "{side:?}");
        assert_eq!(pair.delivered(side).last(), Some(&json!(59)), "{side:?}");
        assert_eq!(pair.limits(side).live_rate_limited, 1, "{side:?}");
        pair.later(Duration::from_millis(49));
        pair.live_to(side, json!("at 49 ms"));
        assert_eq!(pair.limits(side).live_rate_limited, 2, "{side:?}");
        pair.later(Duration::from_millis(1));
        pair.live_to(side, json!("at 50 ms"));
        assert_eq!(
            pair.delivered(side).last(),
            Some(&json!("at 50 ms")),
            "{side:?}"
        );
        pair.later(Duration::from_secs(1));
        for n in 0..21 {
            pair.live_to(side, json!(n));
        }
        assert_eq!(pair.delivered(side).len(), 60 + 1 + 20, "{side:?}");
        assert_eq!(pair.limits(side).live_rate_limited, 3, "{side:?}");
        assert!(pair.still_open(), "{side:?}");
        // A long quiet refills the burst, and no more than the burst.
        pair.later(Duration::from_secs(60));
        for n in 0..61 {
            pair.live_to(side, json!(n));
        }
        assert_eq!(pair.delivered(side).len(), 81 + 60, "{side:?}");
        assert_eq!(pair.limits(side).live_rate_limited, 4, "{side:?}");
        assert_eq!(pair.limits(side).live_too_long, 0, "{side:?}");
    }
}

/// M-9.2-g, end to end: 150 live messages the other side's application sends at once (the
/// issue's flood) reach this side's application 60 times, the rest dropped by its socket.
#[test]
fn a_flood_sent_by_an_application_reaches_the_other_side_60_times_then_20_a_second() {
    for side in SIDES {
        let mut pair = Pair::open();
        for n in 0..150 {
            pair.app_sends_to(side, json!(n));
        }
        assert_eq!(pair.delivered(side).len(), 60, "{side:?}");
        assert_eq!(pair.limits(side).live_rate_limited, 90, "{side:?}");
        pair.later(Duration::from_millis(2_300));
        for n in 0..150 {
            pair.app_sends_to(side, json!(n));
        }
        // 2.3 s refill 46 tokens.
        assert_eq!(pair.delivered(side).len(), 60 + 46, "{side:?}");
        assert!(pair.still_open(), "{side:?}");
    }
}

/// M-7.4-b: every frame a socket's peer sends is charged to its byte rate (a burst of 16 MiB,
/// 4 MiB a second) before it is read; one beyond it is dropped and counted, the socket stays
/// open and, once refilled, frames flow again, on either side.
#[test]
fn a_node_socket_peers_frames_beyond_its_byte_rate_are_dropped_and_the_socket_stays_on_either_side()
{
    const MIB: usize = 1 << 20;
    let burst = PEER_BYTE_RATE.burst as usize / MIB;
    let per_second = PEER_BYTE_RATE.per_second as usize / MIB;
    assert_eq!((burst, per_second), (16, 4));
    // A frame of exactly 1 MiB of a type the space's room does not take: the socket hands it on
    // if the byte rate lets it through, and the node drops it.
    let sized = |from: &str| {
        let frame = |fill: usize| {
            serde_json::to_vec(&json!({"type": "bulk", "from": from, "payload": "x".repeat(fill)}))
                .unwrap()
        };
        let bytes = frame(MIB - frame(0).len());
        assert_eq!(bytes.len(), MIB);
        bytes
    };
    for side in SIDES {
        let mut pair = Pair::open();
        let frame = sized(&pair.dids[1 - Pair::index(side)]);
        // The bucket refilled past the `who` of the handshake a second later: a whole burst
        // passes, and not a byte more.
        pair.at(1_000);
        for _ in 0..=burst {
            pair.frame_to(side, frame.clone());
        }
        let i = Pair::index(side);
        assert_eq!(pair.handed_on[i], burst, "{side:?}");
        assert_eq!(pair.limits(side).byte_rate_limited, 1, "{side:?}");
        // A live message now is a frame too: dropped unread, so it spends no live token.
        pair.live_to(side, json!("over the byte rate"));
        assert_eq!(pair.limits(side).byte_rate_limited, 2, "{side:?}");
        assert!(pair.delivered(side).is_empty(), "{side:?}");
        // A second later the rate has refilled that many bytes again.
        pair.later(Duration::from_secs(1));
        for _ in 0..=per_second {
            pair.frame_to(side, frame.clone());
        }
        assert_eq!(pair.handed_on[i], burst + per_second, "{side:?}");
        assert_eq!(pair.limits(side).byte_rate_limited, 3, "{side:?}");
        assert!(pair.still_open(), "{side:?}");
        pair.later(Duration::from_secs(1));
        pair.live_to(side, json!("later"));
        assert_eq!(pair.delivered(side), [json!("later")], "{side:?}");
        assert_eq!(pair.limits(side).live_rate_limited, 0, "{side:?}");
    }
}

/// M-7.4-b: text frames after the handshake are ignored (§5.2, §5.3) but not free: they are
/// charged to the byte rate as binary ones are, on either side.
#[test]
fn ignored_text_frames_spend_the_byte_rate_too_on_either_side() {
    for side in SIDES {
        let mut pair = Pair::open();
        pair.at(1_000);
        let text = "x".repeat(PEER_BYTE_RATE.burst as usize);
        let now = pair.now;
        match side {
            Side::Host => pair.host.handle(now, Input::Text(text.clone())),
            Side::Client => pair.client.handle(now, Input::Text(text.clone())),
        }
        pair.pump();
        assert_eq!(pair.counters(side).ignored_text, 1, "{side:?}");
        pair.live_to(side, json!("after a burst of text"));
        assert_eq!(pair.limits(side).byte_rate_limited, 1, "{side:?}");
        assert!(pair.delivered(side).is_empty(), "{side:?}");
        assert!(pair.still_open(), "{side:?}");
    }
}

/// M-9-b, M-9.2-i: a message is attributed to the socket's proven peer, never to its `from`, on
/// either side, as the mesh attributes it to the connection's.
#[test]
fn a_live_message_is_attributed_to_the_sockets_peer_not_to_from_on_either_side() {
    for side in SIDES {
        let mut pair = Pair::open();
        let forged = json!({"type": LIVE, "from": "did:key:zSomeoneElse", "payload": 1});
        pair.frame_to(side, serde_json::to_vec(&forged).unwrap());
        let sender = pair.dids[1 - Pair::index(side)].clone();
        assert_eq!(pair.delivered(side), [json!(1)], "{side:?}");
        assert_eq!(pair.attributed[Pair::index(side)], [sender], "{side:?}");
    }
}

/// M-9-c: a type the space does not speak is ignored (counted), on either side; the socket
/// hands it on (the sync of 05 travels here too), the node's space room does not take it, and
/// the socket stays open.
#[test]
fn unknown_types_are_ignored_on_either_side() {
    for side in SIDES {
        let mut pair = Pair::open();
        let from = pair.dids[1 - Pair::index(side)].clone();
        for kind in ["sync", "x-unknown", "__peers"] {
            let frame = json!({"type": kind, "from": from, "payload": {"a": 1}});
            pair.frame_to(side, serde_json::to_vec(&frame).unwrap());
        }
        assert!(pair.delivered(side).is_empty(), "{side:?}");
        assert_eq!(
            pair.node_counters(side).socket_messages_dropped,
            3,
            "{side:?}"
        );
        assert!(pair.still_open(), "{side:?}");
        pair.live_to(side, json!("known"));
        assert_eq!(pair.delivered(side), [json!("known")], "{side:?}");
    }
}
