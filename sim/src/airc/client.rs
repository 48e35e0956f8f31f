//! The simulator's AIRC client: the one client machine, [`weft_proto::airc::client::Client`],
//! driven the way the simulated application drives it. The application binds one endpoint,
//! sends the messages it is told to, and acks every message it is handed `delivered`, sometimes
//! only after a stall longer than the server's ack timeout, to exercise §6.6. Everything on the
//! wire (hello, welcome checks, re-binding and resending after a reconnect, pongs, one ack per
//! message) is the proto machine's.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use weft_proto::airc::client::{Client, ClientConfig, Input, Outgoing, Output};
use weft_proto::airc::frame::{Ack, AckStatus, Msg};
use weft_proto::core::{BackoffConfig, Machine, Timestamp, Wakeup};

/// The simulated clients' reconnect schedule: shorter than [`weft_proto::airc::client::RECONNECT`]
/// so that a run of a few simulated minutes sees many reconnects, and every client is back
/// well within the heal period.
pub(crate) const SIM_RECONNECT: BackoffConfig = BackoffConfig {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(3),
    multiplier: 2,
};

/// What a client is told by the simulator.
#[derive(Clone, Debug)]
pub enum ClientInput {
    /// The connection its [`ClientOutput::Connect`] asked for is open.
    Connected,
    /// The connection could not be opened (the server is down).
    ConnectFailed,
    /// Bytes arrived on the connection.
    Received(Vec<u8>),
    /// The connection closed.
    Closed,
    /// The application asks to send `body` to `to`.
    Send {
        /// The destination address, as the client writes it.
        to: String,
        /// The text.
        body: String,
    },
    /// Sets the chance, per thousand, that an incoming message is acked only after a stall.
    Stall(u32),
}

/// What a client asks of the simulator, or reports to its application.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientOutput {
    /// Open a connection to the home server.
    Connect,
    /// Write bytes on the connection.
    Send(Vec<u8>),
    /// Close the connection (the machine gave up on it: a protocol violation, or a welcome or
    /// an ack that waited too long).
    Close,
    /// A message was handed to the application.
    Delivered(Box<Msg>),
    /// The final answer to one of this client's messages.
    Acked(Ack),
    /// This client will ack message `id` only at `at`, past the server's ack timeout.
    Stalled {
        /// The message.
        id: String,
        /// When the ack goes out.
        at: Timestamp,
    },
}

/// The simulated application around one [`Client`] machine.
pub struct SimClient {
    endpoint: String,
    machine: Client<ChaCha20Rng>,
    /// The application's own randomness: which acks stall, and for how long.
    rng: ChaCha20Rng,
    stall_permille: u32,
    stall: (Duration, Duration),
    /// When the application starts the machine, until it has.
    start: Option<Timestamp>,
    /// Stalled acks by when they go out (and a sequence number, to keep equal instants apart).
    acks_due: BTreeMap<(Timestamp, u64), String>,
    ack_seq: u64,
    out: VecDeque<ClientOutput>,
}

impl SimClient {
    /// A client named `name` (its namespace) that binds `name/inbox`, dialling first at `start`.
    /// A stalled ack waits between `stall.0` and `stall.1`.
    pub fn new(
        name: &str,
        mut rng: ChaCha20Rng,
        start: Timestamp,
        stall: (Duration, Duration),
    ) -> Self {
        let mut seed = [0u8; 32];
        rng.fill_bytes(&mut seed);
        let config = ClientConfig {
            agent: Some("weft-sim".to_string()),
            backoff: SIM_RECONNECT,
            ..ClientConfig::default()
        };
        let mut machine = Client::new(config, ChaCha20Rng::from_seed(seed));
        let endpoint = format!("{name}/inbox");
        machine
            .bind(vec![endpoint.clone()])
            .expect("one name is within MAX_BIND_NAMES");
        Self {
            endpoint,
            machine,
            rng,
            stall_permille: 0,
            stall,
            start: Some(start),
            acks_due: BTreeMap::new(),
            ack_seq: 0,
            out: VecDeque::new(),
        }
    }

    /// The endpoint this client binds, relative to its realm.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Messages sent and not yet answered, oldest first.
    pub fn unanswered(&self) -> impl Iterator<Item = &str> {
        self.machine.unacked_ids()
    }

    /// Takes every output of the machine, playing the application's part in each.
    fn pump(&mut self, now: Timestamp) {
        while let Some(o) = self.machine.poll() {
            match o {
                Output::Connect => self.out.push_back(ClientOutput::Connect),
                Output::Transmit(bytes) => self.out.push_back(ClientOutput::Send(bytes)),
                Output::Close => self.out.push_back(ClientOutput::Close),
                Output::Message(m) => self.handed(now, m),
                Output::Acked {
                    id,
                    status,
                    code,
                    reason,
                } => self.out.push_back(ClientOutput::Acked(Ack {
                    code,
                    reason,
                    ..Ack::new(id, status)
                })),
                // The rest is the application's to read; the simulator's oracle reads the wire.
                _ => {}
            }
        }
    }

    /// A message handed over: acked `delivered` now, or after a stall.
    fn handed(&mut self, now: Timestamp, m: Box<Msg>) {
        let id = m.id.clone();
        self.out.push_back(ClientOutput::Delivered(m));
        if self.rng.next_u32() % 1000 < self.stall_permille {
            let (lo, hi) = (self.stall.0.as_millis(), self.stall.1.as_millis());
            let span = u64::try_from(hi.saturating_sub(lo)).unwrap_or(0) + 1;
            let lo = u64::try_from(lo).unwrap_or(0);
            let at = now + Duration::from_millis(lo + self.rng.next_u64() % span);
            self.ack_seq += 1;
            self.acks_due.insert((at, self.ack_seq), id.clone());
            self.out.push_back(ClientOutput::Stalled { id, at });
        } else {
            self.machine
                .handle(now, Input::Ack(Ack::new(id, AckStatus::Delivered)));
        }
    }
}

impl Machine for SimClient {
    type Input = ClientInput;
    type Output = ClientOutput;

    fn handle(&mut self, now: Timestamp, input: ClientInput) {
        match input {
            ClientInput::Connected => self.machine.handle(now, Input::Connected),
            ClientInput::ConnectFailed => self.machine.handle(now, Input::Disconnected),
            ClientInput::Received(bytes) => self.machine.handle(now, Input::Bytes(bytes)),
            ClientInput::Closed => {
                // Acks owed on the old connection cannot be sent on a new one: the server
                // redelivers what it never heard an ack for.
                self.acks_due.clear();
                self.machine.handle(now, Input::Disconnected);
            }
            ClientInput::Send { to, body } => {
                let outgoing = Outgoing {
                    from: "out".to_string(),
                    to,
                    body,
                    ..Outgoing::default()
                };
                // Refused only past MAX_UNACKED, which a simulated client never nears: then the
                // message is never written, so the oracle never expects it.
                let _ = self.machine.send(now, outgoing);
            }
            ClientInput::Stall(permille) => self.stall_permille = permille,
        }
        self.pump(now);
    }

    fn poll(&mut self) -> Option<ClientOutput> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        let start = self.start.map(|at| Wakeup::new(at, "start"));
        let ack = self
            .acks_due
            .keys()
            .next()
            .map(|(at, _)| Wakeup::new(*at, "stalled ack"));
        Wakeup::earliest(Wakeup::earliest(start, ack), self.machine.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.start.is_some_and(|at| at <= now) {
            self.start = None;
            self.machine.handle(now, Input::Start);
        }
        while let Some(entry) = self.acks_due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let id = entry.remove();
            self.machine
                .handle(now, Input::Ack(Ack::new(id, AckStatus::Delivered)));
        }
        self.machine.handle_timeout(now);
        self.pump(now);
    }
}
