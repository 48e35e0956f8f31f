//! A small host for relay sessions: several connections to one relay, stepped against a
//! [`MemoryStore`], every output executed in order at once (store operations answered,
//! broadcasts handed to every session, peer budget asks answered from one relay-wide
//! [`PeerRequestLimiter`], sends kept for the test to read). Tests, fuzzers and the simulator use
//! it in place of a driver.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use super::memory::MemoryStore;
use super::session::{Config, Input, Output, Session};
use super::store::{EventStore, StoreOp};
use super::wire::Outbound;
use crate::core::{Machine, Timestamp};
use crate::nostr::peering::trust::MAX_PEERS;
use crate::nostr::peering::{Admission, PeerRequestLimiter, RequestBudget};

/// One connection as the harness sees it.
#[derive(Debug)]
pub struct Conn {
    /// The session.
    pub session: Session,
    /// Frames it sent and the test has not taken yet.
    pub received: Vec<Outbound>,
    /// The close code it asked for, if any.
    pub closed: Option<u16>,
    /// Store queries it asked for.
    pub queries: u64,
    /// Whether it sent frames since the harness last reported them flushed.
    unflushed: bool,
}

/// Sessions of one relay over a memory store.
#[derive(Debug)]
pub struct Harness {
    /// The configuration every new session gets.
    pub config: Config,
    /// The store.
    pub store: MemoryStore,
    /// The clock handed to the sessions.
    pub now: Timestamp,
    /// Whether sent frames are reported flushed as soon as everything else is done (a reader
    /// that keeps up). Off, a test reports it with [`Harness::flush`].
    pub auto_flush: bool,
    /// The connections, by index.
    pub conns: Vec<Conn>,
    /// The relay-wide peer request budget every peer session's [`Output::Admit`] is answered
    /// from.
    pub limiter: PeerRequestLimiter,
    /// When set, every budget ask is answered [`Admission::Unavailable`] (a failed limiter store).
    pub limiter_down: bool,
    work: VecDeque<(usize, Input)>,
}

impl Harness {
    /// A relay with an empty store.
    pub fn new(config: Config, store: MemoryStore, now: Timestamp) -> Self {
        Self {
            config,
            store,
            now,
            auto_flush: true,
            conns: Vec::new(),
            limiter: PeerRequestLimiter::new(RequestBudget::default(), MAX_PEERS),
            limiter_down: false,
            work: VecDeque::new(),
        }
    }

    /// Opens a connection; its challenge is among its received frames. Returns its index.
    pub fn connect(&mut self, rng: &mut dyn rand_core::CryptoRng) -> usize {
        let session = Session::new(self.config.clone(), self.now, rng);
        self.conns.push(Conn {
            session,
            received: Vec::new(),
            closed: None,
            queries: 0,
            unflushed: false,
        });
        let i = self.conns.len() - 1;
        self.run();
        i
    }

    /// Sends a text frame on connection `conn` and runs everything it leads to.
    pub fn send(&mut self, conn: usize, text: &str) {
        self.input(conn, Input::Frame(String::from(text)));
    }

    /// Hands connection `conn` an input and runs everything it leads to.
    pub fn input(&mut self, conn: usize, input: Input) {
        self.work.push_back((conn, input));
        self.run();
    }

    /// Calls connection `conn`'s `handle_timeout` at the harness clock and runs what follows.
    pub fn timeout(&mut self, conn: usize) {
        self.conns[conn].session.handle_timeout(self.now);
        self.run();
    }

    /// Reports connection `conn`'s frames flushed.
    pub fn flush(&mut self, conn: usize) {
        self.conns[conn].unflushed = false;
        self.input(conn, Input::Flushed);
    }

    /// Takes the frames connection `conn` sent since the last take.
    pub fn take(&mut self, conn: usize) -> Vec<Outbound> {
        core::mem::take(&mut self.conns[conn].received)
    }

    /// Takes connection `conn`'s frames as text.
    pub fn take_text(&mut self, conn: usize) -> Vec<String> {
        self.take(conn).iter().map(Outbound::to_text).collect()
    }

    fn drain(&mut self, i: usize) {
        while let Some(out) = self.conns[i].session.poll() {
            match out {
                Output::Send(frame) => {
                    self.conns[i].received.push(frame);
                    self.conns[i].unflushed = true;
                }
                Output::Store { request, op } => {
                    if matches!(op, StoreOp::Query { .. }) {
                        self.conns[i].queries += 1;
                    }
                    let reply = self.store.execute(&op);
                    self.work.push_back((i, Input::Stored { request, reply }));
                }
                Output::Broadcast(event) => {
                    for j in 0..self.conns.len() {
                        self.work.push_back((j, Input::Live(event.clone())));
                    }
                }
                Output::Admit { request, peer } => {
                    let admission = if self.limiter_down {
                        Admission::Unavailable
                    } else {
                        self.limiter.admit(self.now, &peer)
                    };
                    self.work
                        .push_back((i, Input::Admitted { request, admission }));
                }
                Output::Close { code, .. } => self.conns[i].closed = Some(code),
            }
        }
    }

    fn run(&mut self) {
        for i in 0..self.conns.len() {
            self.drain(i);
        }
        loop {
            while let Some((i, input)) = self.work.pop_front() {
                self.conns[i].session.handle(self.now, input);
                self.drain(i);
            }
            if !self.auto_flush {
                return;
            }
            let mut any = false;
            for i in 0..self.conns.len() {
                if core::mem::take(&mut self.conns[i].unflushed) {
                    self.work.push_back((i, Input::Flushed));
                    any = true;
                }
            }
            if !any {
                return;
            }
        }
    }
}
