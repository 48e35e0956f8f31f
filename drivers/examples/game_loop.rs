//! Two Minca nodes and an AIRC client inside a fixed 60 Hz game loop, with no async runtime.
//!
//! A game owns its loop: every frame it reads input, steps the world and draws, and nothing may
//! hold the frame up. This example puts weft's machines in such a loop. Each frame does one
//! pass, in this order, and never blocks:
//!
//! 1. **Read**: every socket is non-blocking; each is read until it says `WouldBlock` (at most a
//!    fixed number of messages per socket), and what arrived is fed to its machine with
//!    `handle(now, input)`, draining the machine after each input (the drain rule of
//!    `docs/embedding.md`).
//! 2. **Timers**: a machine whose `poll_timeout()` is at or before `now` gets
//!    `handle_timeout(now)`, then is drained. A deadline is served at most one frame (17 ms)
//!    late: the protocols' timers run in seconds, and str0m's retransmissions take the delay. A
//!    deadline that does not advance costs one call a frame, never a spinning loop.
//! 3. **Game**: every [`POSITION_EVERY`] frames each node sends its player's position to the room
//!    as a Minca `live` message (§9.2).
//! 4. **Write**: what the machines queued goes out as far as the sockets take it; the rest waits
//!    for the next frame.
//!
//! Then the frame sleeps until the next tick (a game would draw here). One-time costs are paid
//! before the first frame, as a game loads its assets ([`warm_up`]). Connecting never blocks
//! either: the sockets come from `weft_drivers::frame_loop`, whose connects are non-blocking and
//! checked once a frame and whose WebSocket client (`tungstenite`, driven by hand) resumes its
//! upgrade wherever it stopped. The relay URL must be an IP literal: a game resolves names off
//! the frame (on a thread) and hands the address in, since a DNS lookup inside a frame could
//! block it for seconds.
//!
//! What runs, in one process:
//!
//! - a `weft relay` and an AIRC realm server, each on a background thread with its own smol
//!   adapter: they stand for "a relay somewhere" and "a realm somewhere", and are not part of the
//!   loop;
//! - in the loop, two Minca nodes ([`Node`]: relay client, rendezvous and mesh in one machine),
//!   each with a WebSocket to the relay and a UDP socket for str0m WebRTC ([`UdpDriver`]). They
//!   meet through the relay, open a data channel, prove themselves over it (§6) and then trade
//!   live position updates;
//! - in the loop, an AIRC client connection (the one client machine,
//!   `weft_proto::airc::client::Client`, fed from the frame loop): hello,
//!   bind `game/lobby` (the namespace the realm gives this user, §5), send a message to `lobby`,
//!   receive it and ack it `delivered`, and get the server's `delivered` ack for it (AIRC §4).
//!
//! Both nodes join at frame 0, as two players starting together. They meet within a second or
//! two, or after about 11 s when one must wait for the other's hello back (§2; see
//! [`SELF_TEST_FRAMES`]).
//!
//! `cargo run -p weft-drivers --example game_loop` runs until killed. With `--self-test` (run in
//! CI, which checks the lines it prints) it exits 0 only when both exchanges complete within
//! [`SELF_TEST_FRAMES`] frames, and prints the worst frame time (how long the loop's work took in
//! one frame, sleep excluded) and how many frames overran 1/60 s: printed to watch, never
//! asserted, since a shared CI machine's timing proves nothing.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use serde_json::{Value, json};
use weft_drivers::frame_loop::{WsClient, WsEvent, connect_unix};
use weft_drivers::minca::relay::RelayOptions;
use weft_drivers::minca::webrtc::UdpDriver;
use weft_proto::airc::client::{
    Client as AircMachine, ClientConfig, Input as AircInput, Outgoing, Output as AircOutput,
};
use weft_proto::airc::frame::{Ack, AckStatus};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::{default_provider, generate_p256};
use weft_proto::minca::mesh::live::LIVE;
use weft_proto::minca::mesh::{self, RoomKind};
use weft_proto::minca::node::{self, Join, Node, NodeConfig};
use weft_proto::minca::relay_client::RelayState;
use weft_proto::minca::relay_url::RelayUrl;
use weft_proto::minca::room::Room;

/// One tick at 60 Hz.
const FRAME: Duration = Duration::from_nanos(1_000_000_000 / 60);

/// The self-test's budget: both exchanges must be done by this frame (20 s at 60 Hz). Two nodes
/// that join at once meet within a second or two when each hears the other's hello. When the
/// greater DID's hello reached the relay before the lesser one was listening (hellos are kept by
/// no relay), the lesser hears of it only from the greater's hello back, which §2 allows once
/// every 10 s in a room, counted from the join hello (docs/decisions.md): the meeting then takes
/// about 11 s, which happens in about half the runs. The budget covers that case with room for a
/// loaded machine.
const SELF_TEST_FRAMES: u64 = 1200;

/// A node sends its position every this many frames (10 a second at 60 Hz), well inside a
/// receiver's live-message allowance of 20 a second (§9.2).
const POSITION_EVERY: u64 = 6;

/// Live positions each node must receive from the other for the self-test to pass.
const POSITIONS_WANTED: usize = 5;

/// The most reads from the AIRC socket in one frame, so a flood cannot eat the frame (the relay
/// sockets have `frame_loop`'s own bound).
const MAX_READS_PER_FRAME: usize = weft_drivers::frame_loop::MAX_READS_PER_PASS;

/// The Minca space both nodes join.
const SPACE: &str = "weft-game-loop";

/// The AIRC namespace of whoever runs this, and the name the client binds in it.
const NAMESPACE: &str = "game";
const LOBBY: &str = "lobby";

fn main() -> ExitCode {
    let self_test = std::env::args().any(|a| a == "--self-test");
    match run(self_test) {
        Ok(true) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("game_loop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(self_test: bool) -> io::Result<bool> {
    // The world outside the loop: a relay and a realm, each on its own thread.
    let relay = Background::relay()?;
    println!(
        "game_loop: relay listening on ws://{} (a relay somewhere: a background thread)",
        relay.at
    );
    let dir = std::env::temp_dir().join(format!("weft-game-loop-{}", std::process::id()));
    let realm = Background::realm(&dir)?;
    println!(
        "game_loop: realm localhost listening on {} (a realm somewhere: a background thread)",
        realm.at.display()
    );

    warm_up();
    let relay_url = RelayUrl::parse(&format!("ws://{}", relay.at)).map_err(io::Error::other)?;
    let mut game = Game {
        frame: 0,
        nodes: [
            GameNode::new("a", &relay_url, Position { x: 0, y: 0 })?,
            GameNode::new("b", &relay_url, Position { x: 100, y: 100 })?,
        ],
        dids: BTreeMap::new(),
        airc: AircClient::new(realm.at.clone()),
    };
    for node in &game.nodes {
        game.dids.insert(node.node.did().to_owned(), node.name);
    }

    let started = Instant::now();
    let mut next_tick = started;
    let mut worst = Duration::ZERO;
    let mut worst_at = 0;
    let mut over_budget = 0u64;
    let mut passed = false;
    loop {
        let frame_start = Instant::now();
        game.frame_pass(weft_drivers::now())?;
        let took = frame_start.elapsed();
        over_budget += u64::from(took > FRAME);
        if took > worst {
            (worst, worst_at) = (took, game.frame);
        }
        if game.done() && !passed {
            passed = true;
            println!(
                "game_loop: both exchanges done in {} frames ({:.1} s); worst frame {:.2} ms \
                 (frame {worst_at}); frames over {:.1} ms: {over_budget}",
                game.frame,
                started.elapsed().as_secs_f64(),
                worst.as_secs_f64() * 1e3,
                FRAME.as_secs_f64() * 1e3
            );
            if self_test {
                break;
            }
        }
        if self_test && game.frame >= SELF_TEST_FRAMES {
            eprintln!(
                "game_loop: self-test failed: not done within {SELF_TEST_FRAMES} frames \
                 (positions a<-b {}, b<-a {}, airc {:?}); worst frame {:.2} ms (frame {worst_at})",
                game.nodes[0].positions_heard,
                game.nodes[1].positions_heard,
                game.airc.state,
                worst.as_secs_f64() * 1e3
            );
            break;
        }
        game.frame += 1;
        // Sleep to the next tick; a frame that overran starts the next at once, and a loop that
        // fell far behind does not try to catch up in a burst.
        next_tick += FRAME;
        let now = Instant::now();
        if next_tick > now {
            std::thread::sleep(next_tick - now);
        } else if now - next_tick > 4 * FRAME {
            next_tick = now;
        }
    }
    for (i, node) in game.nodes.iter().enumerate() {
        let c = node.udp.transport.counters();
        println!(
            "game_loop: node {} heard {} positions from node {}; transport dropped {} frames, {} text",
            node.name,
            node.positions_heard,
            game.nodes[1 - i].name,
            c.send_dropped,
            c.text_ignored,
        );
    }
    relay.stop();
    realm.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(passed)
}

/// Pays the WebRTC stack's one-time start-up cost at load time, as a game loads its assets,
/// rather than inside the frame where the first peer appears: str0m's crypto backend initialises
/// on the first connection made, which took a few hundred milliseconds here in a debug build.
/// The connection made is thrown away.
fn warm_up() {
    let local = SocketAddr::from(([127, 0, 0, 1], 9));
    let now = weft_drivers::now();
    let mut transport = weft_drivers::minca::webrtc::Transport::new(now, local, vec![local]);
    let offer = mesh::Output::CreateOffer {
        conn: ConnId(0),
        peer: "warm-up".into(),
    };
    transport.handle_mesh_output(now, offer);
}

/// A server on a thread of its own, stopped when the loop ends, and where it listens.
struct Background<A> {
    stop: smol::channel::Sender<()>,
    thread: std::thread::JoinHandle<io::Result<()>>,
    at: A,
}

impl Background<SocketAddr> {
    /// `weft relay` on a loopback port the OS picks.
    fn relay() -> io::Result<Self> {
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready, bound) = mpsc::channel();
        let options = RelayOptions::plain(SocketAddr::from(([127, 0, 0, 1], 0)));
        let thread = std::thread::spawn(move || {
            weft_drivers::minca::relay::serve(options, stopped, move |addr| {
                let _ = ready.send(addr);
            })
        });
        // Start-up, before the first frame: waiting here blocks no frame.
        let addr = bound
            .recv()
            .map_err(|_| io::Error::other("the relay did not start"))?;
        Ok(Self {
            stop,
            thread,
            at: addr,
        })
    }
}

impl Background<PathBuf> {
    /// An AIRC realm on embedded defaults under `dir`: realm `localhost`, this user's uid owning
    /// the namespace [`NAMESPACE`] (AIRC §5).
    fn realm(dir: &Path) -> io::Result<Self> {
        use weft_drivers::airc::serve::{ServeConfig, serve};
        let _ = std::fs::remove_dir_all(dir);
        let config = ServeConfig::local(dir, NAMESPACE)?;
        let socket = config.client_socket.clone();
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready, started) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            serve(config, stopped, move || {
                let _ = ready.send(());
            })
        });
        started
            .recv()
            .map_err(|_| io::Error::other("the realm server did not start"))?;
        Ok(Self {
            stop,
            thread,
            at: socket,
        })
    }
}

impl<A> Background<A> {
    fn stop(self) {
        let _ = self.stop.send_blocking(());
        match self.thread.join() {
            Ok(Err(e)) => eprintln!("game_loop: a background server failed: {e}"),
            Err(_) => eprintln!("game_loop: a background server panicked"),
            Ok(Ok(())) => {}
        }
    }
}

/// Everything the loop drives.
struct Game {
    frame: u64,
    nodes: [GameNode; 2],
    /// Session DID → node name, to print who is who.
    dids: BTreeMap<String, &'static str>,
    airc: AircClient,
}

impl Game {
    /// One frame: read, timers, game, write; see the module docs.
    fn frame_pass(&mut self, now: Timestamp) -> io::Result<()> {
        let frame = self.frame;
        let mut lines = Vec::new();
        for node in &mut self.nodes {
            node.read(now)?;
            node.timers(now);
            if frame.is_multiple_of(POSITION_EVERY) {
                node.step_player(now, frame);
            }
            node.write()?;
            lines.append(&mut node.lines);
        }
        self.airc.pass(now);
        lines.append(&mut self.airc.lines);
        for line in lines {
            // Node DIDs are long; the milestones name the nodes instead.
            let mut line = line;
            for (did, name) in &self.dids {
                line = line.replace(did.as_str(), &format!("node {name}"));
            }
            println!("[frame {frame}] {line}");
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.positions_heard >= POSITIONS_WANTED)
            && self.airc.state == AircState::Done
    }
}

/// A player's position, the game state the nodes share.
#[derive(Clone, Copy, Debug)]
struct Position {
    x: i64,
    y: i64,
}

/// One Minca node with its sockets: a WebSocket per relay socket the node asks for, and one UDP
/// socket for all its WebRTC connections. This is glue only: every decision is the [`Node`]'s.
struct GameNode {
    name: &'static str,
    node: Node<ChaCha20Rng>,
    room: Room,
    udp: UdpDriver,
    relays: BTreeMap<ConnId, WsClient>,
    /// Inputs produced while executing outputs (a dial that failed at once, a WebRTC event),
    /// fed once the current drain is over so that outputs still run in order.
    pending: VecDeque<node::Input>,
    player: Position,
    admitted: usize,
    positions_heard: usize,
    /// Milestones of this frame, for the loop to print.
    lines: Vec<String>,
}

impl GameNode {
    fn new(name: &'static str, relay: &RelayUrl, player: Position) -> io::Result<Self> {
        let crypto = default_provider();
        let mut rng = weft_drivers::os_rng();
        let session = generate_p256(crypto, &mut rng);
        let config = NodeConfig {
            relays: vec![relay.clone()],
        };
        let mut node = Node::new(session, config, crypto, rng).map_err(io::Error::other)?;
        let now = weft_drivers::now();
        let udp = UdpDriver::bind(now, SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let join = Join::space(crypto, SPACE, RoomKind::PublicSpace, None);
        let room = join.room.clone();
        node.handle(now, node::Input::Join(join));
        let mut this = Self {
            name,
            node,
            room,
            udp,
            relays: BTreeMap::new(),
            pending: VecDeque::new(),
            player,
            admitted: 0,
            positions_heard: 0,
            lines: Vec::new(),
        };
        this.drain(now);
        Ok(this)
    }

    /// The drain rule, across the node and its WebRTC transport: poll until neither has
    /// anything, executing each output in order; inputs that executing produced come next.
    fn drain(&mut self, now: Timestamp) {
        loop {
            while let Some(out) = self.node.poll() {
                self.execute(now, out);
            }
            while let Some(event) = self.udp.transport.poll_event() {
                if let Some(input) = node::Input::from_transport(event) {
                    self.pending.push_back(input);
                }
            }
            match self.pending.pop_front() {
                Some(input) => self.node.handle(now, input),
                None => return,
            }
        }
    }

    fn handle(&mut self, now: Timestamp, input: node::Input) {
        self.node.handle(now, input);
        self.drain(now);
    }

    /// Executes one output of the node.
    fn execute(&mut self, now: Timestamp, out: node::Output) {
        use node::Output as O;
        let transport = &mut self.udp.transport;
        match out {
            O::Dial { conn, url, .. } => match WsClient::dial(&url) {
                Ok(ws) => {
                    self.relays.insert(conn, ws);
                }
                Err(e) => {
                    self.lines
                        .push(format!("minca: node {} cannot dial {url}: {e}", self.name));
                    self.pending
                        .push_back(node::Input::RelayDialFailed { conn });
                }
            },
            O::RelaySend { conn, text } => {
                if let Some(ws) = self.relays.get_mut(&conn)
                    && !ws.send(text)
                {
                    self.relays.remove(&conn);
                    self.pending.push_back(node::Input::RelayClosed { conn });
                }
            }
            // The node asked: it expects no report of this close.
            O::RelayClose { conn } => {
                if let Some(mut ws) = self.relays.remove(&conn) {
                    ws.close();
                }
            }
            // The transport's own, handed over as the mesh outputs they are; the TURN servers go
            // unused (host candidates on loopback).
            O::CreateOffer { conn, peer, .. } => {
                transport.handle_mesh_output(now, mesh::Output::CreateOffer { conn, peer });
            }
            O::CreateAnswer {
                conn, peer, offer, ..
            } => {
                let out = mesh::Output::CreateAnswer { conn, peer, offer };
                transport.handle_mesh_output(now, out);
            }
            O::ApplyAnswer { conn, answer } => {
                transport.handle_mesh_output(now, mesh::Output::ApplyAnswer { conn, answer });
            }
            O::PeerSend { conn, bytes } => {
                let out = mesh::Output::Send { conn, bytes };
                transport.handle_mesh_output(now, out);
            }
            O::PeerClose { conn } => {
                transport.handle_mesh_output(now, mesh::Output::Close { conn });
            }
            // What the node tells the game.
            O::RelayState {
                relay,
                state: RelayState::Open,
            } => {
                self.lines
                    .push(format!("minca: node {} relay {relay} open", self.name));
            }
            O::Admitted { peer, .. } => {
                self.admitted += 1;
                self.lines.push(format!(
                    "minca: node {} admitted {peer} over a WebRTC data channel",
                    self.name
                ));
            }
            O::Departed { peer, .. } => {
                self.admitted = self.admitted.saturating_sub(1);
                self.lines
                    .push(format!("minca: node {} lost {peer}", self.name));
            }
            O::Deliver {
                peer,
                kind,
                payload,
                ..
            } if kind == LIVE => {
                self.positions_heard += 1;
                if self.positions_heard == 1 || self.positions_heard == POSITIONS_WANTED {
                    self.lines.push(format!(
                        "minca: node {} got live position #{} from {peer}: {payload}",
                        self.name, self.positions_heard
                    ));
                }
            }
            _ => {}
        }
    }

    /// Step 1: what arrived on the relay sockets and the UDP socket.
    fn read(&mut self, now: Timestamp) -> io::Result<()> {
        let conns: Vec<ConnId> = self.relays.keys().copied().collect();
        for conn in conns {
            let mut events = Vec::new();
            if let Some(ws) = self.relays.get_mut(&conn) {
                ws.pump(&mut events);
            }
            for event in events {
                let input = match event {
                    WsEvent::Opened => node::Input::RelayOpened { conn },
                    WsEvent::Text(text) => node::Input::RelayText {
                        conn,
                        text: text.into(),
                    },
                    WsEvent::Closed => {
                        self.relays.remove(&conn);
                        node::Input::RelayClosed { conn }
                    }
                    WsEvent::DialFailed => {
                        self.relays.remove(&conn);
                        node::Input::RelayDialFailed { conn }
                    }
                    _ => continue,
                };
                self.handle(now, input);
            }
        }
        self.udp.receive(now)?;
        self.drain(now);
        Ok(())
    }

    /// Step 2: the node's and the transport's timers, once due.
    fn timers(&mut self, now: Timestamp) {
        if self.node.poll_timeout().is_some_and(|w| w.at <= now) {
            self.node.handle_timeout(now);
            self.drain(now);
        }
        if self
            .udp
            .transport
            .poll_timeout()
            .is_some_and(|w| w.at <= now)
        {
            self.udp.transport.handle_timeout(now);
            self.drain(now);
        }
    }

    /// Step 3: the player moves and, once a peer is admitted, tells the room where it is.
    fn step_player(&mut self, now: Timestamp, frame: u64) {
        self.player.x += 1;
        self.player.y -= 1;
        if self.admitted == 0 {
            return;
        }
        let payload: Value = json!({ "frame": frame, "x": self.player.x, "y": self.player.y });
        self.handle(
            now,
            node::Input::Send {
                room: self.room.clone(),
                to: None,
                kind: LIVE.into(),
                payload,
            },
        );
    }

    /// Step 4: what the machines queued, as far as the sockets take it.
    fn write(&mut self) -> io::Result<()> {
        for ws in self.relays.values_mut() {
            ws.flush();
        }
        self.udp.flush()?;
        Ok(())
    }
}

// --- The AIRC client: the one client machine, driven from the frame loop. ---

/// Where the game is with its AIRC exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
enum AircState {
    /// The machine asked to dial and no connection is open yet (the realm's backlog may be
    /// full; try next frame).
    Connecting,
    /// Connected: the machine said `hello` and waits for `welcome`.
    Hello,
    /// Welcomed; the machine bound the lobby and waits for `bound`.
    Binding,
    /// The message `id` was sent to the bound name: waiting for it to arrive and for its ack.
    Exchanging {
        id: String,
        received: bool,
        acked: bool,
    },
    Done,
    Failed(String),
}

/// One connection to the realm's client face, spoken by [`AircMachine`] (hello, the welcome
/// checks, pongs, one ack per message are the machine's); this owns the non-blocking socket and
/// plays the game's part: bind the lobby, send one message there, ack what arrives.
struct AircClient {
    socket: PathBuf,
    stream: Option<UnixStream>,
    machine: AircMachine<ChaCha20Rng>,
    started: bool,
    /// Bytes the machine wrote that the socket has not taken yet.
    out: Vec<u8>,
    state: AircState,
    lines: Vec<String>,
}

impl AircClient {
    fn new(socket: PathBuf) -> Self {
        let config = ClientConfig {
            agent: Some(format!("weft-game-loop/{}", env!("CARGO_PKG_VERSION"))),
            ..ClientConfig::default()
        };
        Self {
            socket,
            stream: None,
            machine: AircMachine::new(config, weft_drivers::os_rng()),
            started: false,
            out: Vec::new(),
            state: AircState::Connecting,
            lines: Vec::new(),
        }
    }

    fn fail(&mut self, why: String) {
        if matches!(self.state, AircState::Failed(_)) {
            return;
        }
        self.lines.push(format!("airc: failed: {why}"));
        self.state = AircState::Failed(why);
        self.stream = None;
    }

    /// One frame's pass: dial if asked, read, feed the machine bytes and time, act on each of
    /// its outputs, write.
    fn pass(&mut self, now: Timestamp) {
        if matches!(self.state, AircState::Done | AircState::Failed(_)) {
            return;
        }
        if !self.started {
            self.started = true;
            self.machine.handle(now, AircInput::Start);
        }
        self.outputs(now);
        if self.stream.is_none() && self.state == AircState::Connecting {
            match connect_unix(&self.socket) {
                Ok(Some(stream)) => {
                    self.stream = Some(stream);
                    self.state = AircState::Hello;
                    self.machine.handle(now, AircInput::Connected);
                }
                Ok(None) => return,
                Err(e) => return self.fail(format!("connect: {e}")),
            }
        }
        let mut closed = false;
        if let Some(stream) = &mut self.stream {
            let mut buf = [0u8; 16 * 1024];
            for _ in 0..MAX_READS_PER_FRAME {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => self
                        .machine
                        .handle(now, AircInput::Bytes(buf[..n].to_vec())),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
        }
        if self.machine.poll_timeout().is_some_and(|w| w.at <= now) {
            self.machine.handle_timeout(now);
        }
        self.outputs(now);
        if closed && !matches!(self.state, AircState::Done | AircState::Failed(_)) {
            return self.fail("the realm closed the connection".into());
        }
        if let Some(stream) = &mut self.stream {
            while !self.out.is_empty() {
                match stream.write(&self.out) {
                    Ok(n) if n > 0 => drop(self.out.drain(..n)),
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return self.fail(format!("write: {e}")),
                }
            }
        }
    }

    /// Every output the machine has, in order.
    fn outputs(&mut self, now: Timestamp) {
        while let Some(o) = self.machine.poll() {
            self.on_output(now, o);
        }
        if let AircState::Exchanging {
            received: true,
            acked: true,
            ..
        } = self.state
        {
            self.lines
                .push("airc: exchange done: sent, received and acked delivered".into());
            self.state = AircState::Done;
        }
    }

    fn on_output(&mut self, now: Timestamp, output: AircOutput) {
        match (&mut self.state, output) {
            (_, AircOutput::Transmit(bytes)) => self.out.extend(bytes),
            (_, AircOutput::Connect) => self.state = AircState::Connecting,
            (_, AircOutput::ServerError { code, reason }) => {
                self.fail(format!("error {code}: {reason:?}"))
            }
            (_, AircOutput::ProtocolError(code)) => {
                self.fail(format!("bad frame: {}", code.as_str()))
            }
            (_, AircOutput::Close | AircOutput::Reconnecting { .. }) => {
                self.fail("the connection was given up on".into())
            }
            (AircState::Hello, AircOutput::Welcome { realm, ns }) => {
                self.lines.push(format!(
                    "airc: welcome from realm {realm}, namespaces {ns:?}"
                ));
                self.state = AircState::Binding;
                // A name is bound inside a namespace the connection holds (§4.3, §5).
                if let Err(why) = self.machine.bind(vec![format!("{NAMESPACE}/{LOBBY}")]) {
                    self.fail(format!("bind refused: {why:?}"));
                }
            }
            (AircState::Binding, AircOutput::Bound(names)) => {
                self.lines.push(format!("airc: bound {}", names.join(" ")));
                let message = Outgoing {
                    from: "player-a".into(),
                    to: LOBBY.into(),
                    body: "gg".into(),
                    ..Outgoing::default()
                };
                match self.machine.send(now, message) {
                    Ok(id) => {
                        self.lines.push(format!("airc: sent {id} to {LOBBY}"));
                        self.state = AircState::Exchanging {
                            id,
                            received: false,
                            acked: false,
                        };
                    }
                    Err(why) => self.fail(format!("send refused: {why:?}")),
                }
            }
            (AircState::Exchanging { id, received, .. }, AircOutput::Message(m)) => {
                // A message delivered here is acked `delivered` once the game has it (§4.4).
                let line = format!("airc: received {} from {}: {:?}", m.id, m.from, m.body);
                *received |= m.id == *id;
                self.lines.push(line);
                let ack = Ack::new(m.id, AckStatus::Delivered);
                self.machine.handle(now, AircInput::Ack(ack));
            }
            (AircState::Exchanging { id, acked, .. }, AircOutput::Acked { id: a, status, .. })
                if a == *id =>
            {
                self.lines
                    .push(format!("airc: message {a} acked {status:?}"));
                if status == AckStatus::Delivered {
                    *acked = true;
                } else if status != AckStatus::Queued {
                    self.fail(format!("message acked {status:?}"));
                }
            }
            _ => {}
        }
    }
}
