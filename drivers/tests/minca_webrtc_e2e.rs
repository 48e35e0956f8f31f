//! Two Minca meshes over a real str0m data channel on loopback (Minca 04 Network §5.1, §6.2,
//! §7.2, §7.3, §9.2).
//!
//! Each node is a `Mesh` machine with its own WebRTC [`Transport`] on its own UDP socket on
//! 127.0.0.1. The offer and answer the meshes hand rendezvous (`Output::ToRendezvous`) are passed
//! straight to the other node as `Input::RelaySignal`, standing in for the relays. The wall clock
//! is `now` (real sockets, real str0m timers); the keys and nonces come from seeded RNGs. The
//! drain rule holds: after every input the mesh and the transport are polled until both are
//! empty.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use weft_drivers::minca::webrtc::UdpDriver;
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{default_provider, generate_p256};
use weft_proto::minca::mesh::introduction::SignalKind;
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::mesh::{Input, Mesh, Output, RoomConfig, RoomKind};

/// The whole exchange must finish within this wall time.
const BUDGET: Duration = Duration::from_secs(10);

/// How long the loop sleeps between passes (the sockets are non-blocking).
const NAP: Duration = Duration::from_millis(1);

const ROOM: &str = "room-webrtc";

struct Node {
    mesh: Mesh<ChaCha20Rng>,
    udp: UdpDriver,
    did: String,
    /// What the mesh handed the application, in order.
    app: Vec<Output>,
    /// The `Opened` inputs the transport gave the mesh: (conn, local, remote).
    opened: Vec<(ConnId, String, String)>,
    /// Offers and answers for the other node.
    signals: Vec<(String, SignalKind, String)>,
}

impl Node {
    fn new(seed: u64) -> Self {
        let crypto = default_provider();
        let key = generate_p256(crypto, &mut ChaCha20Rng::seed_from_u64(seed));
        let mesh = Mesh::new(key, crypto, ChaCha20Rng::seed_from_u64(seed + 1)).expect("a mesh");
        let did = mesh.did().to_owned();
        let udp = UdpDriver::bind(weft_drivers::now(), SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("a loopback UDP socket");
        Self {
            mesh,
            udp,
            did,
            app: Vec::new(),
            opened: Vec::new(),
            signals: Vec::new(),
        }
    }

    fn input(&mut self, now: Timestamp, input: Input) {
        self.mesh.handle(now, input);
        self.settle(now);
    }

    /// The drain rule: mesh outputs to the transport, transport events to the mesh, until
    /// neither has anything.
    fn settle(&mut self, now: Timestamp) {
        loop {
            let mut moved = false;
            while let Some(out) = self.mesh.poll() {
                moved = true;
                match self.udp.transport.handle_mesh_output(now, out) {
                    Some(Output::ToRendezvous {
                        room, kind, sdp, ..
                    }) => self.signals.push((room, kind, sdp)),
                    Some(other) => self.app.push(other),
                    None => {}
                }
            }
            while let Some(event) = self.udp.transport.poll_event() {
                moved = true;
                if let Input::Opened {
                    conn,
                    local_fingerprint,
                    remote_fingerprint,
                } = &event
                {
                    self.opened.push((
                        *conn,
                        local_fingerprint.clone(),
                        remote_fingerprint.clone(),
                    ));
                }
                self.mesh.handle(now, event);
            }
            if !moved {
                return;
            }
        }
    }

    /// One pass: datagrams in, due timers, datagrams out.
    fn pass(&mut self) {
        let now = weft_drivers::now();
        self.udp.receive(now).expect("the socket reads");
        self.settle(now);
        if self
            .udp
            .transport
            .poll_timeout()
            .is_some_and(|w| w.at <= now)
        {
            self.udp.transport.handle_timeout(now);
            self.settle(now);
        }
        if self.mesh.poll_timeout().is_some_and(|w| w.at <= now) {
            self.mesh.handle_timeout(now);
            self.settle(now);
        }
        self.udp.flush().expect("the socket sends");
    }

    fn delivered(&self, kind: &str) -> Vec<(String, Value)> {
        self.app
            .iter()
            .filter_map(|o| match o {
                Output::Deliver {
                    room,
                    peer,
                    kind: k,
                    payload,
                } if room == ROOM && k == kind => Some((peer.clone(), payload.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Runs both nodes, passing signals between them, until `done` holds or the budget is spent.
fn run(nodes: &mut [Node; 2], started: Instant, mut done: impl FnMut(&[Node; 2]) -> bool) {
    while !done(nodes) {
        assert!(started.elapsed() < BUDGET, "out of time");
        for i in 0..2 {
            nodes[i].pass();
            let signals = std::mem::take(&mut nodes[i].signals);
            let from = nodes[i].did.clone();
            let now = weft_drivers::now();
            for (room, kind, sdp) in signals {
                let input = Input::RelaySignal {
                    room,
                    from: from.clone(),
                    kind,
                    sdp,
                };
                nodes[1 - i].input(now, input);
            }
        }
        std::thread::sleep(NAP);
    }
}

#[test]
fn two_meshes_are_admitted_over_a_real_str0m_data_channel_and_exchange_live_messages() {
    let started = Instant::now();
    let mut nodes = [Node::new(11), Node::new(22)];
    let now = weft_drivers::now();
    for node in &mut nodes {
        node.input(
            now,
            Input::Join(RoomConfig {
                room: ROOM.into(),
                space_id: "space-webrtc".into(),
                kind: RoomKind::PublicSpace,
                note: None,
            }),
        );
    }
    // Rendezvous heard each one's hello (§2): the lesser DID offers (§7.3).
    let dids = [nodes[0].did.clone(), nodes[1].did.clone()];
    for i in 0..2 {
        let peer = dids[1 - i].clone();
        nodes[i].input(
            now,
            Input::PeerInRoom {
                room: ROOM.into(),
                peer,
            },
        );
    }

    run(&mut nodes, started, |n| {
        n[0].mesh.is_admitted(ROOM, &dids[1]) && n[1].mesh.is_admitted(ROOM, &dids[0])
    });

    // One real connection each, opened with fingerprints that cross-match (§5.1, §6.2).
    assert_eq!(nodes[0].opened.len(), 1);
    assert_eq!(nodes[1].opened.len(), 1);
    let (_, a_local, a_remote) = nodes[0].opened[0].clone();
    let (_, b_local, b_remote) = nodes[1].opened[0].clone();
    assert!(a_local.starts_with("sha-256 "), "{a_local}");
    assert_eq!(a_local, b_remote);
    assert_eq!(b_local, a_remote);
    assert_ne!(a_local, b_local);
    assert_eq!(nodes[0].mesh.open_connection_count(), 1);

    // `who` crossed first (§9.1); now a live message each way (§9.2).
    let now = weft_drivers::now();
    for (i, node) in nodes.iter_mut().enumerate() {
        node.input(
            now,
            Input::Send {
                room: ROOM.into(),
                to: None,
                kind: LIVE.into(),
                payload: json!({ "text": format!("hello from {i}") }),
            },
        );
    }
    run(&mut nodes, started, |n| {
        !n[0].delivered(LIVE).is_empty() && !n[1].delivered(LIVE).is_empty()
    });
    for (i, node) in nodes.iter().enumerate() {
        let got = node.delivered(LIVE);
        assert_eq!(got.len(), 1);
        // Attributed to the connection's peer (§7.1).
        assert_eq!(got[0].0, dids[1 - i]);
        assert_eq!(got[0].1, json!({ "text": format!("hello from {}", 1 - i) }));
        // `who` came first (§9.1): the mesh checked it and said whose it is.
        let peer = &dids[1 - i];
        assert!(
            node.app
                .iter()
                .any(|o| matches!(o, Output::Account { peer: p, .. } if p == peer)),
            "no account output for {peer}"
        );
    }
    assert_eq!(nodes[0].udp.transport.counters().text_ignored, 0);
}
