//! A host that connects one sync [`Worker`] to a peer relay run by the relay [`Harness`] (its
//! sessions over a [`MemoryStore`]), with the worker's own relay store a second [`MemoryStore`].
//! Every output is executed at once and in order: the NIP-11 document is answered from
//! [`Pair::info`], a WebSocket is a harness connection, frames go both ways, store operations run
//! on [`Pair::local`], broadcasts are kept in [`Pair::broadcasts`]. Time moves only through
//! [`Pair::run_until`], to the earliest wakeup of the worker or of a peer session, with a step
//! limit. Tests, the fuzz target and the simulator use it in place of a driver.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use super::worker::{InfoError, Input, Output, Worker};
use crate::core::{ConnId, Machine, Timestamp};
use crate::nostr::event::Event;
use crate::nostr::message::ClientMessage;
use crate::nostr::relay::harness::Harness;
use crate::nostr::relay::{EventStore, MemoryStore};

/// A worker wired to a peer relay and a local store.
pub struct Pair<R> {
    /// The peer relay.
    pub peer: Harness,
    /// This relay's store, the one the worker writes through the store seam.
    pub local: MemoryStore,
    /// The worker.
    pub worker: Worker<R>,
    /// The clock.
    pub now: Timestamp,
    /// What [`Output::FetchInfo`] is answered with.
    pub info: Result<String, InfoError>,
    /// Whether [`Output::Connect`] succeeds.
    pub reachable: bool,
    /// Events the worker broadcast to local subscribers.
    pub broadcasts: Vec<Event>,
    /// [`Output::FetchInfo`]s executed.
    pub info_fetches: u64,
    /// [`Output::Connect`]s executed.
    pub connects: u64,
    /// [`Output::Status`] rows emitted.
    pub statuses: u64,
    /// Frames the worker sent to the peer, as text, when [`Pair::keep_sent`] is set.
    pub sent: Vec<String>,
    /// Whether to keep [`Pair::sent`].
    pub keep_sent: bool,
    /// Frames the peer sent the worker.
    pub frames_to_worker: u64,
    session_rng: R,
    conn: Option<(ConnId, usize)>,
    publisher: Option<usize>,
    inputs: VecDeque<Input>,
}

impl<R: rand_core::CryptoRng> Pair<R> {
    /// A pair at `now` (the peer harness's clock is set to it), answering NIP-11 with `info`.
    /// `session_rng` draws the peer sessions' challenges. Nothing runs until [`Pair::run`] or
    /// [`Pair::run_until`], so the peer can be filled first.
    pub fn new(
        mut peer: Harness,
        local: MemoryStore,
        worker: Worker<R>,
        now: Timestamp,
        info: Result<String, InfoError>,
        session_rng: R,
    ) -> Self {
        peer.now = now;
        Self {
            peer,
            local,
            worker,
            now,
            info,
            reachable: true,
            broadcasts: Vec::new(),
            info_fetches: 0,
            connects: 0,
            statuses: 0,
            sent: Vec::new(),
            keep_sent: false,
            frames_to_worker: 0,
            session_rng,
            conn: None,
            publisher: None,
            inputs: VecDeque::new(),
        }
    }

    /// The peer harness connection of the worker's open socket, if any.
    pub fn peer_conn(&self) -> Option<usize> {
        self.conn.map(|(_, i)| i)
    }

    /// Runs every output and input until the worker is quiet at the current time.
    pub fn run(&mut self) {
        loop {
            while let Some(out) = self.worker.poll() {
                self.execute(out);
            }
            match self.inputs.pop_front() {
                Some(input) => self.worker.handle(self.now, input),
                None => break,
            }
        }
    }

    fn execute(&mut self, out: Output) {
        match out {
            Output::FetchInfo { .. } => {
                self.info_fetches += 1;
                self.inputs.push_back(match &self.info {
                    Ok(body) => Input::Info(body.clone()),
                    Err(e) => Input::InfoFailed(e.clone()),
                });
            }
            Output::Connect { conn, .. } => {
                self.connects += 1;
                if self.reachable {
                    let i = self.peer.connect(&mut self.session_rng);
                    self.conn = Some((conn, i));
                    self.inputs.push_back(Input::Connected(conn));
                    self.collect();
                } else {
                    self.inputs.push_back(Input::Disconnected(conn));
                }
            }
            Output::Send { conn, text } => {
                if self.keep_sent {
                    self.sent.push(text.clone());
                }
                if let Some((c, i)) = self.conn
                    && c == conn
                {
                    self.peer.send(i, &text);
                    self.collect();
                }
            }
            Output::Close { conn } => {
                if let Some((c, i)) = self.conn
                    && c == conn
                {
                    self.conn = None;
                    self.peer.take(i);
                }
            }
            Output::Store { request, op } => {
                let reply = self.local.execute(&op);
                self.inputs.push_back(Input::Stored { request, reply });
            }
            Output::Broadcast(e) => self.broadcasts.push(e),
            Output::Status(_) => self.statuses += 1,
        }
    }

    /// Moves the frames the peer sent on the worker's socket to the worker's inputs; frames to
    /// other peer connections are dropped.
    fn collect(&mut self) {
        for i in 0..self.peer.conns.len() {
            if Some(i) == self.peer_conn() {
                let conn = self.conn.map(|(c, _)| c).unwrap_or(ConnId(0));
                let closed = self.peer.conns[i].closed.is_some();
                for frame in self.peer.take_text(i) {
                    self.frames_to_worker += 1;
                    self.inputs.push_back(Input::Frame { conn, text: frame });
                }
                if closed {
                    self.conn = None;
                    self.inputs.push_back(Input::Disconnected(conn));
                }
            } else {
                self.peer.take(i);
            }
        }
    }

    /// The worker's socket drops (as a network failure would): the worker is told.
    pub fn disconnect(&mut self) {
        if let Some((c, _)) = self.conn.take() {
            self.inputs.push_back(Input::Disconnected(c));
        }
        self.run();
    }

    /// Publishes `event` on the peer through a client connection of its own, as an author
    /// would: the peer stores it and sends it to live subscriptions (the worker's among them).
    pub fn publish_on_peer(&mut self, event: &Event) {
        let p = match self.publisher {
            Some(p) => p,
            None => {
                let p = self.peer.connect(&mut self.session_rng);
                self.publisher = Some(p);
                p
            }
        };
        self.peer
            .send(p, &ClientMessage::Event(event.clone()).to_text());
        self.collect();
        self.run();
    }

    /// Writes `event` straight into the peer's store (history, no live subscriber sees it).
    pub fn insert_on_peer(&mut self, event: &Event) {
        let _ = self.peer.store.write(event, self.now);
    }

    /// Advances the clock to `at` and runs every timeout due.
    pub fn advance_to(&mut self, at: Timestamp) {
        if at > self.now {
            self.now = at;
        }
        self.peer.now = self.now;
        for i in 0..self.peer.conns.len() {
            if self.peer.conns[i]
                .session
                .poll_timeout()
                .is_some_and(|w| w.at <= self.now)
            {
                self.peer.timeout(i);
            }
        }
        self.collect();
        if self.worker.poll_timeout().is_some_and(|w| w.at <= self.now) {
            self.worker.handle_timeout(self.now);
        }
        self.run();
    }

    /// The earliest wakeup of the worker or of the peer session on its socket.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        let worker = self.worker.poll_timeout().map(|w| w.at);
        let session = self
            .peer_conn()
            .and_then(|i| self.peer.conns[i].session.poll_timeout())
            .map(|w| w.at);
        match (worker, session) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Steps from wakeup to wakeup until `until`, at most `max_steps` times; returns the steps
    /// taken, or `None` when the limit was hit first (a machine that wants to be woken without
    /// end at one instant).
    pub fn run_until(&mut self, until: Timestamp, max_steps: u64) -> Option<u64> {
        self.run();
        let mut steps = 0;
        loop {
            let Some(next) = self.next_wakeup().filter(|t| *t <= until) else {
                self.advance_to(until);
                return Some(steps);
            };
            steps += 1;
            if steps > max_steps {
                return None;
            }
            self.advance_to(next);
        }
    }
}
