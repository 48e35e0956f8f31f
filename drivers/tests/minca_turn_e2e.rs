//! A WebRTC data channel through a real TURN server (Minca 04 Network §5.1 "TURN relay
//! candidates where offered", §1.4 "TURN passwords", §10): Debian's coturn, installed and started
//! by `scripts/coturn` with `use-auth-secret` on a loopback port, and two str0m transports on
//! loopback UDP sockets. One side is relay-only ([`IceTransportPolicy::Relay`]): its description
//! carries its TURN relayed address and nothing else, so the channel can only open through
//! coturn. The TURN servers are an `ice` offer made by the relay library's own issuer
//! ([`TurnIssuer`]) with coturn's secret, as `weft relay` makes them.
//!
//! The second case offers coturn by host name (`turn:localhost:<port>`, as real deployments name
//! their TURN servers): the name is looked up by the node runner's resolver thread
//! ([`TurnResolver`]) and handed to the transport, and the channel still opens through coturn.
//!
//! Skipped, with a `SKIP:` line saying why, only when coturn cannot be installed here.

#[path = "common/coturn.rs"]
mod coturn;
#[path = "common/nostr_relay.rs"]
#[allow(dead_code)] // Only the script helpers are used here.
mod nostr_relay;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_drivers::minca::node_runner::TurnResolver;
use weft_drivers::minca::webrtc::{IceTransportPolicy, UdpDriver};
use weft_proto::core::ConnId;
use weft_proto::crypto::default_provider;
use weft_proto::minca::mesh::{Input, Output};
use weft_proto::minca::relay_wire::IceServers;
use weft_proto::minca::turn::{TurnConfig, TurnIssuer};

const SECRET: &str = "weft-coturn-relayed-channel-secret";
/// The whole exchange must finish within this wall time (coturn starts within it too).
const BUDGET: Duration = Duration::from_secs(30);
/// How long the loop sleeps between passes (the sockets are non-blocking).
const NAP: Duration = Duration::from_millis(1);
const A: ConnId = ConnId(1);
const B: ConnId = ConnId(2);

/// One side: a transport on its socket, and what it handed back.
struct Side {
    udp: UdpDriver,
    events: Vec<Input>,
}

impl Side {
    fn new() -> Self {
        Self {
            udp: UdpDriver::bind(weft_drivers::now(), SocketAddr::from(([127, 0, 0, 1], 0)))
                .expect("a loopback UDP socket"),
            events: Vec::new(),
        }
    }

    /// One pass of the loop: what arrived, due timers, what to send, what came out.
    fn pass(&mut self) {
        let now = weft_drivers::now();
        self.udp.receive(now).expect("the socket reads");
        let t = &mut self.udp.transport;
        if t.poll_timeout().is_some_and(|w| w.at <= now) {
            t.handle_timeout(now);
        }
        self.udp.flush().expect("the socket sends");
        while let Some(e) = self.udp.transport.poll_event() {
            self.events.push(e);
        }
    }

    fn output(&mut self, out: Output, ice: Option<&IceServers>) {
        let back = self
            .udp
            .transport
            .handle_mesh_output_with_ice(weft_drivers::now(), out, ice);
        assert!(back.is_none());
        self.pass();
    }

    fn description(&self, conn: ConnId) -> Option<String> {
        self.events.iter().find_map(|e| match e {
            Input::LocalDescription { conn: c, sdp } if *c == conn => Some(sdp.clone()),
            _ => None,
        })
    }

    fn opened(&self, conn: ConnId) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Input::Opened { conn: c, .. } if *c == conn))
    }

    fn frames(&self, conn: ConnId) -> Vec<Bytes> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Input::Frame { conn: c, bytes } if *c == conn => Some(bytes.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Runs both sides until `until` holds, within what is left of [`BUDGET`].
fn run(
    started: Instant,
    a: &mut Side,
    b: &mut Side,
    what: &str,
    until: impl Fn(&Side, &Side) -> bool,
) {
    while !until(a, b) {
        assert!(
            started.elapsed() < BUDGET,
            "{what}: not within {BUDGET:?}; a: {:?} b: {:?}",
            a.udp.transport.counters(),
            b.udp.transport.counters()
        );
        a.pass();
        b.pass();
        std::thread::sleep(NAP);
    }
}

#[test]
fn a_relay_only_side_opens_its_data_channel_through_coturn_and_binary_messages_cross_both_ways() {
    through_coturn(
        "a_relay_only_side_opens_its_data_channel_through_coturn",
        "127.0.0.1",
    );
}

#[test]
fn a_turn_server_offered_by_host_name_is_looked_up_and_the_channel_opens_through_it() {
    through_coturn(
        "a_turn_server_offered_by_host_name_is_looked_up",
        "localhost",
    );
}

/// Looks the TURN host names of `ice` up with the runner's resolver, off this thread, and hands
/// the answers to `side`'s transport, as the node runner does when its node learns an offer.
fn look_up_names(side: &mut Side, ice: &IceServers) {
    let names = side.udp.transport.learn_turn_offer(Some(ice));
    if names.is_empty() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let resolver = TurnResolver::start(move |name, addrs| {
        let _ = tx.send((name, addrs));
    })
    .expect("the resolver thread");
    for name in &names {
        assert!(resolver.ask(name.clone()));
    }
    for _ in &names {
        let (name, addrs) = rx.recv_timeout(BUDGET).expect("an answer");
        side.udp.transport.turn_name_resolved(&name, &addrs);
    }
    assert_eq!(side.udp.transport.turn_names().counters().failed, 0);
}

/// A relay-only side opens its channel through coturn offered as `turn:<host>:<port>`.
fn through_coturn(test: &str, host: &str) {
    let Some((coturn, port)) = coturn::start(test, SECRET) else {
        return;
    };
    let turn_url = format!("turn:{host}:{port}");
    let config = TurnConfig::new(SECRET.as_bytes(), vec![turn_url], 600).expect("a TURN config");
    let mut issuer = TurnIssuer::new(config);
    let mut rng = ChaCha20Rng::seed_from_u64(6);
    let ice = issuer.offer(
        default_provider(),
        &mut rng,
        weft_drivers::now(),
        [127, 0, 0, 1].into(),
    );

    let started = Instant::now();
    let (mut a, mut b) = (Side::new(), Side::new());
    a.udp
        .transport
        .set_ice_transport_policy(IceTransportPolicy::Relay);
    look_up_names(&mut a, &ice);
    let b_addr = b.udp.local_addr().unwrap();
    // coturn may still be starting: a connection whose allocation is not answered within the
    // gathering cap has no candidate at all (relay-only) and is closed; ask again until one
    // carries its relayed candidate.
    let mut conn = A;
    let offer = loop {
        a.output(
            Output::CreateOffer {
                conn,
                peer: "did:key:b".into(),
            },
            Some(&ice),
        );
        run(
            started,
            &mut a,
            &mut b,
            "a description or a close",
            |a, _| {
                a.description(conn).is_some()
                    || a.events
                        .iter()
                        .any(|e| matches!(e, Input::Closed { conn: c } if *c == conn))
            },
        );
        if let Some(sdp) = a.description(conn) {
            break sdp;
        }
        conn = ConnId(conn.0 + 10);
    };
    let (turn_server, relayed) = a
        .udp
        .transport
        .relayed_addresses()
        .next()
        .expect("a relayed address on coturn");
    assert_eq!(turn_server, SocketAddr::from(([127, 0, 0, 1], port)));
    let candidates: Vec<&str> = offer
        .lines()
        .filter(|l| l.starts_with("a=candidate"))
        .collect();
    assert_eq!(candidates.len(), 1, "{offer}");
    assert!(
        candidates[0].contains(&format!("{} {} typ relay", relayed.ip(), relayed.port())),
        "{offer}"
    );

    b.output(
        Output::CreateAnswer {
            conn: B,
            peer: "did:key:a".into(),
            offer,
        },
        None,
    );
    let answer = b.description(B).expect("an answer at once");
    a.output(Output::ApplyAnswer { conn, answer }, None);
    run(started, &mut a, &mut b, "the channel opens", |a, b| {
        a.opened(conn) && b.opened(B)
    });

    let to_b: Vec<Bytes> = (0..20u8)
        .map(|i| vec![i; 1 + usize::from(i) * 500].into())
        .collect();
    for bytes in &to_b {
        a.output(
            Output::Send {
                conn,
                bytes: bytes.clone(),
            },
            None,
        );
    }
    b.output(
        Output::Send {
            conn: B,
            bytes: Bytes::from_static(b"back through coturn"),
        },
        None,
    );
    run(started, &mut a, &mut b, "the messages cross", |a, b| {
        b.frames(B).len() == to_b.len() && !a.frames(conn).is_empty()
    });
    assert_eq!(b.frames(B), to_b);
    assert_eq!(a.frames(conn), vec![b"back through coturn".to_vec()]);
    // B never learned A's own address: everything it heard came from the relayed one.
    assert_ne!(relayed, a.udp.local_addr().unwrap());
    assert_ne!(relayed, b_addr);

    drop(coturn);
}
