//! Heap bytes held per object by weft-proto's machines, measured with a counting global allocator.
//!
//! Method: build the machine, drive it through its public inputs until it holds `N` objects of one
//! kind (connections, spooled messages, sockets, ...), drain and drop every output, and divide the
//! change in live heap bytes by `N`. Live bytes are the sizes the program asked for
//! (`Layout::size`), so the figure is what the code holds, independent of any allocator's own
//! overhead (a device allocator adds its per-block header on top).
//!
//! Run by `scripts/size-report`; the numbers go into `docs/performance.md`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::server::{Face, Input as AircInput, Server, ServerConfig, Source};
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{ConnId, Machine, ReplayWindow, Timestamp};
use weft_proto::crypto::{CryptoProvider as _, default_provider, generate_p256};
use weft_proto::minca::mesh::introduction::{Introductions, Signal, SignalKind, Verdict};
use weft_proto::minca::node_socket::{self, ClientSocket, NodeSocket, Session};
use weft_proto::minca::note::Es256Notes;
use weft_proto::minca::relay_client::{self, ClientConfig, RelayClient};
use weft_proto::minca::relay_server::{self, RelayConfig, RelayServer};
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::relay_wire::Topic;
use weft_proto::minca::space_access::MemorySpace;

/// Counts the bytes currently allocated, around the system allocator.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Blocks currently allocated: a device allocator adds its per-block overhead this many times.
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counter is
// bookkeeping only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live bytes and live blocks.
fn live() -> (usize, usize) {
    (LIVE.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed))
}

const T0: u64 = 1_790_380_000_000;

fn drain<M: Machine>(m: &mut M) {
    while m.poll().is_some() {}
}

/// One measured row: the bytes held per object.
fn report(what: &str, n: usize, before: (usize, usize), after: (usize, usize)) {
    let per = (after.0 as f64 - before.0 as f64) / n as f64;
    let blocks = (after.1 as f64 - before.1 as f64) / n as f64;
    println!("{what:<56} n={n:<6} {per:>8.1} heap bytes {blocks:>5.2} blocks each");
}

/// A machine's own struct, held wherever the host keeps it (stack, static, or a box).
fn inline(what: &str, bytes: usize) {
    println!("{what:<56} {bytes:>17} bytes inline");
}

fn airc_server() -> Server<ChaCha20Rng> {
    let mut config = ServerConfig::new(Authority::parse("example.com").expect("realm"));
    config.known_namespaces = vec![
        Namespace::parse("alice").expect("namespace"),
        Namespace::parse("bob").expect("namespace"),
    ];
    Server::new(config, default_provider(), ChaCha20Rng::seed_from_u64(1))
}

fn airc_send(server: &mut Server<ChaCha20Rng>, now: Timestamp, conn: ConnId, line: String) {
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    server.handle(now, AircInput::Received { conn, bytes });
    drain(server);
}

fn airc_client(server: &mut Server<ChaCha20Rng>, now: Timestamp, conn: ConnId, ns: &str) {
    server.handle(
        now,
        AircInput::Opened {
            conn,
            face: Face::Client,
            namespaces: vec![Namespace::parse(ns).expect("namespace")],
            source: Source::Unknown,
        },
    );
    airc_send(
        server,
        now,
        conn,
        r#"{"t":"hello","proto":"airc/0.1","role":"client"}"#.to_string(),
    );
}

/// An idle AIRC client connection: opened, hello answered with welcome, nothing bound.
fn airc_idle_connections() {
    const N: usize = 1000;
    let now = Timestamp::from_millis(T0);
    let mut server = airc_server();
    let before = live();
    for i in 0..N {
        airc_client(&mut server, now, ConnId(i as u64 + 1), "alice");
    }
    let stats = server.stats();
    assert_eq!(
        (stats.protocol_errors, stats.refused_connections),
        (0, 0),
        "every connection was welcomed"
    );
    report(
        "AIRC server: idle client connection (after hello)",
        N,
        before,
        live(),
    );
}

/// A message spooled for an offline endpoint, with the duplicate-suppression id it leaves behind.
fn airc_spooled_messages() {
    const N: usize = weft_proto::airc::spool::MAX_SPOOLED_PER_KEY;
    let now = Timestamp::from_millis(T0);
    let mut server = airc_server();
    let alice = ConnId(1);
    airc_client(&mut server, now, alice, "alice");
    let before = live();
    for i in 0..N {
        let line = format!(
            r#"{{"t":"msg","id":"m-{i:08}","from":"x","to":"//example.com/bob/y","ts":1790380000.123,"body":"hello"}}"#
        );
        airc_send(&mut server, now, alice, line);
    }
    assert_eq!(server.spooled(), N, "every message was spooled");
    report(
        "AIRC server: spooled message, body \"hello\" (+ seen id)",
        N,
        before,
        live(),
    );
}

/// Replay-window entries keyed by a 32-byte public key: many times for one sender, and one time
/// for each of many senders.
fn replay_window() {
    const N: usize = 10_000;
    let now = Timestamp::from_millis(T0);
    let window = Duration::from_secs(3600);

    let mut w: ReplayWindow<[u8; 32]> = ReplayWindow::new(window, N, 1);
    let before = live();
    for i in 0..N {
        w.accept(now, [1; 32], Timestamp::from_millis(T0 - i as u64));
    }
    report(
        "ReplayWindow<[u8; 32]>: time, one sender",
        N,
        before,
        live(),
    );

    let mut w: ReplayWindow<[u8; 32]> = ReplayWindow::new(window, 1, N);
    let before = live();
    for i in 0..N {
        let mut key = [0; 32];
        key[..8].copy_from_slice(&(i as u64).to_be_bytes());
        w.accept(now, key, now);
    }
    report(
        "ReplayWindow<[u8; 32]>: sender with one time",
        N,
        before,
        live(),
    );
}

fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32))
}

fn topic(i: usize) -> Topic {
    let mut bytes = [0; 32];
    bytes[..8].copy_from_slice(&(i as u64).to_be_bytes());
    Topic::from_bytes(&bytes)
}

/// Minca relay server: idle sockets, then one distinct watched topic per socket.
fn relay_server_sockets_and_topics() {
    const N: usize = 1000;
    let now = Timestamp::from_millis(T0);
    let mut relay = RelayServer::new(
        RelayConfig::default(),
        default_provider(),
        ChaCha20Rng::seed_from_u64(2),
    );
    let before = live();
    for i in 0..N {
        let (conn, addr) = (ConnId(i as u64 + 1), addr(i));
        relay.admit(now, addr).expect("admitted");
        relay.handle(now, relay_server::Input::Opened { conn, addr });
        drain(&mut relay);
    }
    assert_eq!(relay.sockets(), N);
    let sockets = live();
    report("Minca relay server: idle socket", N, before, sockets);
    for i in 0..N {
        let text = format!(r#"{{"type":"fetch","topic":"{}","watch":true}}"#, topic(i));
        relay.handle(
            now,
            relay_server::Input::Text {
                conn: ConnId(i as u64 + 1),
                text,
            },
        );
        drain(&mut relay);
    }
    assert_eq!(relay.topics(), N, "every socket watches its own topic");
    report(
        "Minca relay server: watched topic (one watcher)",
        N,
        sockets,
        live(),
    );
}

/// Minca relay client: rooms joined on one relay (the node side of a room).
fn relay_client_rooms() {
    const N: usize = relay_client::MAX_ROOMS;
    let now = Timestamp::from_millis(T0);
    let relay = RelayUrl::parse("wss://relay.example/").expect("relay url");
    let mut client = RelayClient::new(
        ClientConfig {
            relays: vec![relay],
        },
        default_provider(),
        ChaCha20Rng::seed_from_u64(3),
    );
    // The first join dials the relay; count rooms from the second on.
    client.handle(
        now,
        relay_client::Input::Join {
            topic: topic(usize::MAX),
            relays: Vec::new(),
        },
    );
    drain(&mut client);
    let before = live();
    for i in 0..N - 1 {
        client.handle(
            now,
            relay_client::Input::Join {
                topic: topic(i),
                relays: Vec::new(),
            },
        );
        drain(&mut client);
    }
    assert_eq!(client.rooms().count(), N, "every room joined");
    report(
        "Minca relay client: joined room (one relay)",
        N - 1,
        before,
        live(),
    );
}

/// Minca introductions (§8): the signals a node passed on, remembered until their `at` leaves the
/// window. A full room's join burst: 64 peers, each sending every other an offer, all passed on
/// by a 65th node.
fn introductions_passed_on() {
    const PEERS: usize = 64;
    const ROOM: &str = "room";
    let c = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let keys: Vec<_> = (0..=PEERS)
        .map(|_| {
            let key = generate_p256(c, &mut rng);
            let did = DidKey::P256(c.p256_public_key(&key).expect("a key").0).to_did();
            (key, did)
        })
        .collect();
    let (me, room) = (&keys[PEERS].1, &keys[..PEERS]);
    let burst: Vec<_> = (0..PEERS)
        .flat_map(|o| (0..PEERS).filter(move |&t| t != o).map(move |t| (o, t)))
        .enumerate()
        .map(|(k, (o, t))| {
            let (key, origin) = &room[o];
            let s = Signal::new(
                c,
                key,
                ROOM,
                origin,
                &room[t].1,
                SignalKind::Offer,
                "v=0",
                T0 + k as u64,
            );
            s.expect("signed").to_payload()
        })
        .collect();
    let mut intro = Introductions::new();
    let before = live();
    for (k, payload) in burst.iter().enumerate() {
        let now = Timestamp::from_millis(T0 + k as u64);
        let v = intro.receive(now, c, ROOM, me, true, payload);
        assert!(matches!(v, Verdict::Forward(_)), "signal {k} passed on");
    }
    report(
        "Minca introductions: signal passed on (full room)",
        burst.len(),
        before,
        live(),
    );
}

/// Hands every frame one socket machine sends to the other, both ways, until neither has more.
fn pump<A: Machine<Input = node_socket::Input, Output = node_socket::Output>, B>(
    now: Timestamp,
    a: &mut A,
    b: &mut B,
) where
    B: Machine<Input = node_socket::Input, Output = node_socket::Output>,
{
    fn carry<F, T>(now: Timestamp, from: &mut F, to: &mut T) -> bool
    where
        F: Machine<Output = node_socket::Output>,
        T: Machine<Input = node_socket::Input>,
    {
        let mut moved = false;
        while let Some(o) = from.poll() {
            match o {
                node_socket::Output::SendText(t) => to.handle(now, node_socket::Input::Text(t)),
                node_socket::Output::SendBinary(b) => to.handle(now, node_socket::Input::Binary(b)),
                _ => continue,
            }
            moved = true;
        }
        moved
    }
    while carry(now, a, b) | carry(now, b, a) {}
}

/// Minca node WebSocket (`/peer`, §5.2, §5.3): sockets through the `minca-peer/v3` handshake and
/// the `who` exchange, on a public space, counted on the node side (each peer is one
/// `NodeSocket` machine, so its struct is counted too) and on the client side (with its session).
fn node_sockets() {
    const N: usize = 100;
    let now = Timestamp::from_millis(T0);
    let crypto = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let node_session =
        Session::new(crypto, generate_p256(crypto, &mut rng), None).expect("a P-256 session");
    let before = live();
    let mut nodes = Vec::with_capacity(N);
    let mut clients = Vec::with_capacity(N);
    for i in 0..N {
        let session =
            Session::new(crypto, generate_p256(crypto, &mut rng), None).expect("a P-256 session");
        let mut client = ClientSocket::new(
            crypto,
            Es256Notes::new(crypto),
            ChaCha20Rng::seed_from_u64(100 + i as u64),
            session,
            MemorySpace::public("space"),
            None,
            now,
        );
        let mut node = NodeSocket::new(
            crypto,
            Es256Notes::new(crypto),
            ChaCha20Rng::seed_from_u64(1000 + i as u64),
            node_session.clone(),
            "space",
            Some(MemorySpace::public("space")),
            now,
        );
        pump(now, &mut node, &mut client);
        assert!(
            node.peer().is_some() && client.peer().is_some(),
            "the handshake completed"
        );
        nodes.push(node);
        clients.push(client);
    }
    let both = live();
    drop(clients);
    let node_side = live();
    report(
        "Minca node socket, node side (machine included)",
        N,
        before,
        node_side,
    );
    report(
        "Minca node socket, client side (machine, session)",
        N,
        node_side,
        both,
    );
    drop(nodes);
}

/// What a freshly built machine holds before any input.
fn empty_machines() {
    let before = live();
    let server = airc_server();
    report("AIRC server: empty machine (+ config)", 1, before, live());
    inline(
        "AIRC server: the Server struct",
        std::mem::size_of_val(&server),
    );
    drop(server);
    let before = live();
    let relay = RelayServer::new(
        RelayConfig::default(),
        default_provider(),
        ChaCha20Rng::seed_from_u64(2),
    );
    report("Minca relay server: empty machine", 1, before, live());
    inline(
        "Minca relay server: the RelayServer struct",
        std::mem::size_of_val(&relay),
    );
    drop(relay);
    let before = live();
    let client = RelayClient::new(
        ClientConfig::default(),
        default_provider(),
        ChaCha20Rng::seed_from_u64(3),
    );
    report("Minca relay client: empty machine", 1, before, live());
    inline(
        "Minca relay client: the RelayClient struct",
        std::mem::size_of_val(&client),
    );
    drop(client);
}

fn main() {
    empty_machines();
    airc_idle_connections();
    airc_spooled_messages();
    replay_window();
    relay_server_sockets_and_topics();
    relay_client_rooms();
    introductions_passed_on();
    node_sockets();
}
