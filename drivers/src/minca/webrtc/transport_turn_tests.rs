//! The transport's TURN relay candidates (§5.1, §1.4, §10) against an in-memory TURN server
//! (`turn-server-proto`, a sans-IO server weft did not write), in virtual time.

use super::tests::{A, B, End, Side, T0, addr, open_pair, run};
use super::*;
use crate::minca::webrtc::turn::{MAX_TURN_ALLOCATIONS, instant};
use std::collections::BTreeSet;
use turn_server_proto::api::{TurnServerApi as _, TurnServerPollRet};
use turn_server_proto::server::TurnServer as Server;
use turn_server_proto::stun::agent::Transmit;
use turn_server_proto::types::TransportType;
use weft_proto::minca::mesh::frame::MAX_FRAME_BYTES;
use weft_proto::minca::relay_wire::IceServer;

pub(crate) const USER: &str = "1790000600:abcdefghijkl";
pub(crate) const PASS: &str = "c2VjcmV0LXBhc3N3b3JkLWZvci10ZXN0cw==";
/// The most virtual milliseconds a test runs for.
const RUN_LIMIT_MS: u64 = 60_000;
/// The STUN method of a Refresh (RFC 8656 §7.2), as the first two bytes of a request.
const REFRESH_REQUEST: [u8; 2] = [0x00, 0x04];
/// The STUN method of an Allocate request.
const ALLOCATE_REQUEST: [u8; 2] = [0x00, 0x03];

fn ts(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// An offer of the one TURN server at `port`, expiring at `expires_at`.
fn offer(port: u16, expires_at: u64) -> IceServers {
    IceServers {
        servers: vec![IceServer {
            urls: vec![format!("turn:127.0.0.1:{port}")],
            username: USER.into(),
            credential: PASS.into(),
        }],
        expires_at: ts(expires_at),
    }
}

/// An in-memory TURN server, relaying on loopback ports of its own.
pub(crate) struct FakeTurn {
    server: Server,
    pub(crate) addr: SocketAddr,
    relayed: Vec<SocketAddr>,
    next_port: u16,
    /// Datagrams it sends: (from, to, bytes).
    pub(crate) out: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// It drops everything: a server that never answers.
    silent: bool,
}

impl FakeTurn {
    pub(crate) fn new(port: u16) -> Self {
        let a = addr(port);
        let mut server = Server::new(TransportType::Udp, a, "weft.test".into());
        server.add_user(USER.into(), PASS.into());
        Self {
            server,
            addr: a,
            relayed: Vec::new(),
            next_port: port + 1,
            out: VecDeque::new(),
            silent: false,
        }
    }

    fn owns(&self, to: SocketAddr) -> bool {
        to == self.addr || self.relayed.contains(&to)
    }

    pub(crate) fn receive(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        to: SocketAddr,
        bytes: &[u8],
    ) {
        if self.silent {
            return;
        }
        let t = Transmit::new(bytes, TransportType::Udp, from, to);
        if let Some(out) = self.server.recv(t, instant(now)) {
            let out = out.build();
            self.out.push_back((out.from, out.to, out.data));
        }
        self.pump(now);
    }

    fn pump(&mut self, now: Timestamp) {
        while let TurnServerPollRet::AllocateSocket {
            transport,
            listen_addr,
            client_addr,
            allocation_transport,
            family,
        } = self.server.poll(instant(now))
        {
            let relayed = addr(self.next_port);
            self.next_port += 1;
            self.relayed.push(relayed);
            self.server.allocated_socket(
                transport,
                listen_addr,
                client_addr,
                allocation_transport,
                family,
                Ok(relayed),
                instant(now),
            );
        }
        while let Some(t) = self.server.poll_transmit(instant(now)) {
            self.out.push_back((t.from, t.to, t.data));
        }
    }
}

/// Two sides and a TURN server on one in-memory network, with a log of every datagram
/// (from, to, first two bytes).
struct Net {
    a: Side,
    b: Side,
    turn: FakeTurn,
    log: Vec<(SocketAddr, SocketAddr, [u8; 2])>,
    now: u64,
}

impl Net {
    fn new(a: u16, b: u16, turn: u16) -> Self {
        Self {
            a: Side::new(a),
            b: Side::new(b),
            turn: FakeTurn::new(turn),
            log: Vec::new(),
            now: T0,
        }
    }

    fn route(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let t = ts(self.now);
        self.log.push((
            from,
            to,
            [
                bytes.first().copied().unwrap_or(0),
                bytes.get(1).copied().unwrap_or(0),
            ],
        ));
        if self.turn.owns(to) {
            self.turn.receive(t, from, to, bytes);
        } else if to == self.a.addr() {
            self.a.receive(t, from, bytes);
        } else if to == self.b.addr() {
            self.b.receive(t, from, bytes);
        }
    }

    /// Moves datagrams until none is left, then serves timers, until `until` holds or
    /// [`RUN_LIMIT_MS`] passes. True if `until` held.
    fn run(&mut self, mut until: impl FnMut(&Self) -> bool) -> bool {
        let limit = self.now + RUN_LIMIT_MS;
        while self.now <= limit {
            let mut moved = true;
            while moved {
                moved = false;
                while let Some(d) = self.a.transmit() {
                    moved = true;
                    let from = self.a.addr();
                    self.route(from, d.to, &d.bytes);
                }
                while let Some(d) = self.b.transmit() {
                    moved = true;
                    let from = self.b.addr();
                    self.route(from, d.to, &d.bytes);
                }
                while let Some((from, to, bytes)) = self.turn.out.pop_front() {
                    moved = true;
                    self.route(from, to, &bytes);
                }
            }
            self.a.collect();
            self.b.collect();
            if until(self) {
                return true;
            }
            self.now = [self.a.deadline(), self.b.deadline()]
                .into_iter()
                .flatten()
                .map(|d| d.as_millis())
                .min()
                .unwrap_or(limit + 1)
                .max(self.now + 1);
            let t = ts(self.now);
            if self.a.deadline().is_some_and(|d| d <= t) {
                self.a.timeout(t);
            }
            if self.b.deadline().is_some_and(|d| d <= t) {
                self.b.timeout(t);
            }
            self.turn.pump(t);
        }
        false
    }

    fn offer_from_a(&mut self, ice: Option<&IceServers>) {
        let out = Output::CreateOffer {
            conn: A,
            peer: "did:key:b".into(),
        };
        assert!(
            self.a
                .t
                .handle_mesh_output_with_ice(ts(self.now), out, ice)
                .is_none()
        );
        self.a.collect();
    }

    fn answer_from_b(&mut self, ice: Option<&IceServers>) {
        let offer = self.a.description(A).expect("an offer");
        let out = Output::CreateAnswer {
            conn: B,
            peer: "did:key:a".into(),
            offer,
        };
        assert!(
            self.b
                .t
                .handle_mesh_output_with_ice(ts(self.now), out, ice)
                .is_none()
        );
        self.b.collect();
    }

    fn apply_answer(&mut self) {
        let answer = self.b.description(B).expect("an answer");
        self.a
            .output(self.now, Output::ApplyAnswer { conn: A, answer });
    }

    /// Datagrams that went to the TURN server's listening address from `from`.
    fn to_server_from(&self, from: SocketAddr) -> impl Iterator<Item = [u8; 2]> + '_ {
        self.log
            .iter()
            .filter(move |(f, t, _)| *f == from && *t == self.turn.addr)
            .map(|(_, _, head)| *head)
    }
}

fn candidates(sdp: &str) -> Vec<&str> {
    sdp.lines()
        .filter(|l| l.starts_with("a=candidate"))
        .collect()
}

#[test]
fn a_description_waits_for_the_turn_allocation_and_carries_the_relayed_candidate() {
    let mut net = Net::new(41_001, 41_002, 41_100);
    let ice = offer(41_100, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    // Nothing goes out before the allocation answers: no trickle, so no half description.
    assert!(net.a.description(A).is_none());
    assert!(net.run(|n| n.a.description(A).is_some()));
    assert!(
        net.now < T0 + GATHERING_CAP.as_millis() as u64,
        "{}",
        net.now
    );
    let sdp = net.a.description(A).unwrap();
    let relayed = net.turn.relayed[0];
    let lines = candidates(&sdp);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("{} {} typ relay", relayed.ip(), relayed.port()))),
        "{sdp}"
    );
    assert!(
        lines.iter().any(|l| l.contains("127.0.0.1 41001 typ host")),
        "{sdp}"
    );
    assert_eq!(net.a.t.counters().gathering_capped, 0);
    assert_eq!(
        net.a.t.relayed_addresses().collect::<Vec<_>>(),
        vec![(net.turn.addr, relayed)]
    );
}

#[test]
fn a_description_goes_out_with_host_candidates_only_at_the_gathering_cap_when_turn_is_silent() {
    let mut net = Net::new(41_011, 41_012, 41_110);
    net.turn.silent = true;
    let ice = offer(41_110, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    assert!(net.run(|n| n.a.description(A).is_some()));
    // Exactly at the cap, not before, not after.
    assert_eq!(net.now, T0 + GATHERING_CAP.as_millis() as u64);
    let sdp = net.a.description(A).unwrap();
    let lines = candidates(&sdp);
    assert_eq!(lines.len(), 1, "{sdp}");
    assert!(lines[0].contains("typ host"), "{sdp}");
    assert_eq!(net.a.t.counters().gathering_capped, 1);
    // The server was asked, more than once (the client retransmits within the cap).
    let asked: Vec<_> = net.to_server_from(net.a.addr()).collect();
    assert!(asked.len() >= 2, "{asked:?}");
    assert!(asked.iter().all(|h| *h == ALLOCATE_REQUEST));
}

#[test]
fn expired_turn_servers_are_never_asked() {
    let mut net = Net::new(41_021, 41_022, 41_120);
    // The offer expires exactly now: `expiresAt` is not in the future (§10).
    let ice = offer(41_120, T0);
    net.offer_from_a(Some(&ice));
    // Nothing to wait for: the description is made at once.
    assert!(net.a.description(A).is_some());
    net.answer_from_b(Some(&ice));
    net.apply_answer();
    assert!(net.run(|n| n.a.opened(A).is_some() && n.b.opened(B).is_some()));
    assert_eq!(net.to_server_from(net.a.addr()).count(), 0);
    assert_eq!(net.to_server_from(net.b.addr()).count(), 0);
    assert!(!net.a.description(A).unwrap().contains("typ relay"));
}

#[test]
fn each_new_connection_takes_the_turn_servers_current_at_that_moment() {
    let mut net = Net::new(41_031, 41_032, 41_130);
    let first = offer(41_130, T0 + 600_000);
    net.offer_from_a(Some(&first));
    assert!(net.run(|n| n.a.description(A).is_some()));
    assert!(net.a.description(A).unwrap().contains("typ relay"));
    // The next connection is made with what the caller holds then: nothing current.
    let out = Output::CreateOffer {
        conn: ConnId(2),
        peer: "did:key:c".into(),
    };
    let now = ts(net.now);
    net.a.t.handle_mesh_output_with_ice(now, out, None);
    net.a.collect();
    let sdp = net
        .a
        .description(ConnId(2))
        .expect("at once: nothing to wait for");
    assert!(!sdp.contains("typ relay"), "{sdp}");
    // And the one after with a fresh offer of a second server: a second allocation.
    let mut second = offer(41_140, T0 + 900_000);
    second.servers[0].urls = vec!["turn:127.0.0.1:41140".into()];
    let out = Output::CreateOffer {
        conn: ConnId(3),
        peer: "did:key:d".into(),
    };
    net.a.t.handle_mesh_output_with_ice(now, out, Some(&second));
    net.a.collect();
    assert!(
        net.a.description(ConnId(3)).is_none(),
        "waits for 127.0.0.1:41140"
    );
    let asked = net
        .a
        .t
        .poll_transmit()
        .expect("an Allocate to the second server");
    assert_eq!(asked.to, addr(41_140));
}

#[test]
fn a_relay_only_pair_opens_its_channel_through_the_turn_server_and_frames_cross_both_ways() {
    let mut net = Net::new(41_041, 41_042, 41_150);
    net.a.t.set_ice_transport_policy(IceTransportPolicy::Relay);
    let ice = offer(41_150, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    assert!(net.run(|n| n.a.description(A).is_some()));
    let sdp = net.a.description(A).unwrap();
    let lines = candidates(&sdp);
    assert_eq!(lines.len(), 1, "{sdp}");
    assert!(lines[0].contains("typ relay"), "{sdp}");
    net.answer_from_b(None);
    net.apply_answer();
    assert!(net.run(|n| n.a.opened(A).is_some() && n.b.opened(B).is_some()));
    net.a.output(
        net.now,
        Output::Send {
            conn: A,
            bytes: Bytes::from_static(b"through the relay"),
        },
    );
    net.b.output(
        net.now,
        Output::Send {
            conn: B,
            bytes: vec![7; 3_000].into(),
        },
    );
    assert!(net.run(|n| !n.a.frames(A).is_empty() && !n.b.frames(B).is_empty()));
    assert_eq!(net.b.frames(B), vec![b"through the relay".to_vec()]);
    assert_eq!(net.a.frames(A), vec![vec![7; 3_000]]);
    // Every datagram A sent went to the TURN server, and B only ever heard the relayed address.
    let a_addr = net.a.addr();
    let relayed = net.turn.relayed[0];
    assert!(
        net.log
            .iter()
            .filter(|(f, _, _)| *f == a_addr)
            .all(|(_, t, _)| *t == net.turn.addr)
    );
    assert!(
        net.log
            .iter()
            .filter(|(_, t, _)| *t == net.b.addr())
            .all(|(f, _, _)| *f == relayed)
    );
}

#[test]
fn relay_only_without_a_turn_server_closes_the_connection_and_counts_it() {
    let mut a = Side::new(41_051);
    a.t.set_ice_transport_policy(IceTransportPolicy::Relay);
    a.output(
        T0,
        Output::CreateOffer {
            conn: A,
            peer: "did:key:b".into(),
        },
    );
    assert!(a.closed(A));
    assert!(a.description(A).is_none());
    assert_eq!(a.t.counters().no_candidates, 1);
    assert_eq!(a.t.connection_count(), 0);
}

#[test]
fn the_allocation_is_released_when_its_last_connection_closes() {
    let mut net = Net::new(41_061, 41_062, 41_160);
    let ice = offer(41_160, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    assert!(net.run(|n| n.a.description(A).is_some()));
    assert_eq!(net.a.t.relayed_addresses().count(), 1);
    let before = net.to_server_from(net.a.addr()).count();
    net.a.output(net.now, Output::Close { conn: A });
    assert!(net.run(|n| n.to_server_from(n.a.addr()).count() > before));
    let sent: Vec<_> = net.to_server_from(net.a.addr()).skip(before).collect();
    assert_eq!(sent[0], REFRESH_REQUEST, "a Refresh with lifetime 0");
    assert_eq!(net.a.t.relayed_addresses().count(), 0);
    assert_eq!(net.a.t.poll_timeout(), None, "nothing left to wake for");
}

#[test]
fn an_allocation_in_use_is_released_before_its_offer_expires() {
    let mut net = Net::new(41_091, 41_092, 41_190);
    let margin = crate::minca::webrtc::turn::TURN_EXPIRY_MARGIN.as_millis() as u64;
    let expires = T0 + margin + 10_000;
    let ice = offer(41_190, expires);
    net.offer_from_a(Some(&ice));
    assert!(net.run(|n| n.a.description(A).is_some()));
    assert_eq!(net.a.t.relayed_addresses().count(), 1);
    let before = net.to_server_from(net.a.addr()).count();
    // The connection still uses it; the release goes while the password still works (§10).
    assert!(net.run(|n| n.a.t.relayed_addresses().count() == 0));
    assert!(
        net.now >= expires - margin && net.now < expires,
        "{}",
        net.now
    );
    let sent: Vec<_> = net.to_server_from(net.a.addr()).skip(before).collect();
    assert!(sent.contains(&REFRESH_REQUEST), "{sent:?}");
    // A connection made now uses nothing of that offer.
    let out = Output::CreateOffer {
        conn: ConnId(2),
        peer: "did:key:c".into(),
    };
    net.a
        .t
        .handle_mesh_output_with_ice(ts(net.now), out, Some(&ice));
    net.a.collect();
    assert!(net.a.description(ConnId(2)).is_some(), "at once, host only");
    assert!(!net.a.description(ConnId(2)).unwrap().contains("typ relay"));
}

#[test]
fn a_release_on_the_servers_5_tuple_is_not_raced_by_a_new_allocate() {
    let mut net = Net::new(41_221, 41_222, 41_230);
    let margin = crate::minca::webrtc::turn::TURN_EXPIRY_MARGIN.as_millis() as u64;
    let old = offer(41_230, T0 + margin + 10_000);
    net.offer_from_a(Some(&old));
    assert!(net.run(|n| n.a.description(A).is_some()));
    // The server stops answering, so the release stays in flight until its grace ends.
    net.turn.silent = true;
    assert!(net.run(|n| n.a.t.relayed_addresses().count() == 0));
    // The relay's next offer for the same server, while the old allocation is being released.
    let fresh = offer(41_230, T0 + 600_000);
    let allocates = |n: &Net| {
        n.to_server_from(n.a.addr())
            .filter(|h| *h == ALLOCATE_REQUEST)
            .count()
    };
    let before = allocates(&net);
    let second = ConnId(2);
    let out = Output::CreateOffer {
        conn: second,
        peer: "did:key:c".into(),
    };
    net.a
        .t
        .handle_mesh_output_with_ice(ts(net.now), out, Some(&fresh));
    net.a.collect();
    let sdp = net
        .a
        .description(second)
        .expect("at once, without the releasing server");
    assert!(!sdp.contains("typ relay"), "{sdp}");
    // Once the release is over, the next connection allocates afresh.
    let grace = crate::minca::webrtc::turn::TURN_RELEASE_GRACE.as_millis() as u64;
    let released_by = net.now + grace;
    assert!(net.run(|n| n.now >= released_by));
    assert_eq!(allocates(&net), before, "no Allocate raced the release");
    net.turn.silent = false;
    let third = ConnId(3);
    let out = Output::CreateOffer {
        conn: third,
        peer: "did:key:d".into(),
    };
    net.a
        .t
        .handle_mesh_output_with_ice(ts(net.now), out, Some(&fresh));
    net.a.collect();
    assert!(net.run(|n| n.a.description(third).is_some()));
    assert!(allocates(&net) > before);
}

#[test]
fn a_connection_closed_while_gathering_sends_no_description() {
    let mut net = Net::new(41_071, 41_072, 41_170);
    net.turn.silent = true;
    let ice = offer(41_170, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    net.a.output(net.now, Output::Close { conn: A });
    assert_eq!(net.a.t.connection_count(), 0);
    net.run(|_| false);
    assert!(net.a.description(A).is_none());
    assert!(!net.a.closed(A), "the mesh asked for the close");
}

#[test]
fn the_number_of_allocations_is_bounded() {
    let mut a = Side::new(41_081);
    let mut ice = offer(41_180, T0 + 600_000);
    ice.servers = (0..MAX_TURN_ALLOCATIONS as u16 + 1)
        .map(|i| IceServer {
            urls: vec![format!("turn:127.0.0.{}:3478", i + 2)],
            username: USER.into(),
            credential: PASS.into(),
        })
        .collect();
    // Each connection asks with a different single server, so the union passes the bound.
    for (i, server) in ice.servers.iter().enumerate() {
        let one = IceServers {
            servers: vec![server.clone()],
            expires_at: ice.expires_at,
        };
        let out = Output::CreateOffer {
            conn: ConnId(10 + i as u64),
            peer: format!("did:key:{i}"),
        };
        a.t.handle_mesh_output_with_ice(ts(T0), out, Some(&one));
    }
    assert_eq!(a.t.counters().turn_table_full, 1);
    let servers: BTreeSet<SocketAddr> = std::iter::from_fn(|| a.t.poll_transmit())
        .map(|d| d.to)
        .collect();
    assert_eq!(servers.len(), MAX_TURN_ALLOCATIONS);
}

/// The largest message str0m 0.25 takes on a data channel (its `a=max-message-size`, 256 KiB,
/// as Chrome's); a larger one is refused by `write` and counted as not sent.
const STR0M_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// M-5-b: many binary messages of varied sizes over one channel arrive once each, whole, in
/// order, up to the largest message str0m takes.
#[test]
fn messages_are_neither_fragmented_nor_reordered_nor_duplicated() {
    let (mut now, mut a, mut b) = open_pair();
    let largest = STR0M_MAX_MESSAGE_BYTES.min(MAX_FRAME_BYTES);
    let mut sizes: Vec<usize> = vec![1, 2, 1_199, 1_200, 1_201, 16_384, 65_535, 65_536, 65_537];
    sizes.extend((0..40).map(|i| 1 + (i * 7_919) % 20_000));
    sizes.extend([largest - 1, 3, largest, 1]);
    let sent: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| (0..*n).map(|j| (i * 31 + j * 7) as u8).collect())
        .collect();
    let mut next = 0;
    // The outbox holds at most MAX_OUTBOX_BYTES, so the messages go as it drains, as a mesh that
    // respects its transport's back-pressure would send them.
    while next < sent.len() {
        while next < sent.len() && a.t.conns[&A].outbox_bytes + sent[next].len() <= MAX_OUTBOX_BYTES
        {
            a.output(
                now,
                Output::Send {
                    conn: A,
                    bytes: sent[next].clone().into(),
                },
            );
            next += 1;
        }
        let want = next;
        assert!(
            run(&mut now, &mut a, &mut b, false, |a, b| {
                b.frames(B).len() >= want && a.t.conns[&A].outbox.is_empty()
            }),
            "{} of {want} arrived",
            b.frames(B).len(),
        );
    }
    assert_eq!(a.t.counters().send_dropped, 0);
    let got = b.frames(B);
    assert_eq!(got.len(), sent.len());
    for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert!(
            g == s,
            "message {i} ({} bytes) arrived as {} bytes",
            s.len(),
            g.len()
        );
    }
    // One byte more than str0m takes is not sent in pieces: it is refused and counted.
    a.output(
        now,
        Output::Send {
            conn: A,
            bytes: vec![1; largest + 1].into(),
        },
    );
    run(&mut now, &mut a, &mut b, false, |_, _| false);
    assert_eq!(a.t.counters().send_dropped, 1);
    assert_eq!(b.frames(B).len(), sent.len());
}

#[test]
fn garbage_from_a_turn_server_is_counted_and_breaks_nothing() {
    use chacha20::ChaCha20Rng;
    use rand_core::{Rng as _, SeedableRng as _};
    let mut net = Net::new(41_201, 41_202, 41_210);
    let ice = offer(41_210, T0 + 600_000);
    net.offer_from_a(Some(&ice));
    let mut rng = ChaCha20Rng::seed_from_u64(0x7u64);
    let server = net.turn.addr;
    let mut sent = 0u64;
    // While the Allocate is pending, then again once it is answered.
    for round in 0..2 {
        for _ in 0..500 {
            let len = (rng.next_u32() % 1_500) as usize;
            let mut bytes = vec![0u8; len];
            rng.fill_bytes(&mut bytes);
            net.a.receive(ts(net.now), server, &bytes);
            sent += 1;
        }
        if round == 0 {
            assert!(net.run(|n| n.a.description(A).is_some()));
            assert!(net.a.description(A).unwrap().contains("typ relay"));
        }
    }
    let c = net.a.t.counters();
    assert_eq!(c.bad_datagrams + c.unmatched_datagrams, sent, "{c:?}");
    assert_eq!(net.a.t.relayed_addresses().count(), 1);
}
