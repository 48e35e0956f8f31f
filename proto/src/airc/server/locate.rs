//! The server's side of discovery (AIRC §8.1–§8.2, §6.5): where a realm is dialled and which keys
//! verify its hellos, welcomes and messages.
//!
//! The order and caching rules are [`super::super::discovery`]'s; this module only walks them
//! with the machine's state. The host answers each [`Output::Resolve`] with an
//! [`Input::Resolved`](super::Input::Resolved) (or not at all: after [`DNS_TIMEOUT`] the question counts as answered with
//! no records), and each [`Output::Connect`] with [`Input::Dialled`](super::Input::Dialled) or [`Input::DialFailed`](super::Input::DialFailed).
//!
//! - Locating (§8.1): an explicit port or an IP literal is dialled directly, a static entry
//!   next, otherwise SRV, `airc.<host>` and `<host>` are asked in turn; the outcome is cached for
//!   the clamped TTL (a miss for 60 s). The endpoints are tried in order, the next after each
//!   failed dial; when all fail, what waits is spooled `queued authority_unreachable`. When DNS
//!   has no authority at all, what waits is failed `no_such_authority` (§6.5).
//! - Keys (§8.2): keys pinned by configuration (`known_keys`) or by [`Input::Keys`](super::Input::Keys) win;
//!   otherwise `_airc.<realm>` TXT records are asked for and cached. A peer frame that needs keys
//!   not yet known is parked, with everything its connection sent after it, until the answer
//!   comes: frames of one connection are still handled in the order they arrived.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use super::{Hop, Output, Server, Timer};
use crate::airc::address::Authority;
use crate::airc::discovery::{self, Answer, Cached, Endpoint, Plan, RecordType, Resolution};
use crate::airc::frame::{AckCode, AckStatus, Frame};
use crate::core::{ConnId, Timestamp};
use rand_core::CryptoRng;

/// How long the server waits for the host's answer to one DNS question before taking it as "no
/// records" (§8.1 is silent). Resolvers give up on a name within a few seconds; this only keeps a
/// host that drops a question from holding a dial or a parked connection forever.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(10);

/// A dial to a realm in progress (§8.1).
#[derive(Debug)]
pub(super) enum Dialling {
    /// Asking DNS where the realm is.
    Resolving(Resolution),
    /// A `Connect` is out; these endpoints are left to try if it fails.
    Trying(VecDeque<Endpoint>),
}

/// A realm's published keys, as far as the server knows them now.
pub(super) enum Keys {
    /// The keys (possibly none: a cached miss, an IP-literal realm with no `known_keys`).
    Known(Vec<[u8; 32]>),
    /// Asked for; the caller parks what needs them.
    Pending,
}

impl<R: CryptoRng> Server<R> {
    /// Asks the host one DNS question, with a deadline, unless the same question is out already
    /// (its answer will serve every realm waiting on it).
    fn ask(&mut self, now: Timestamp, kind: RecordType, name: String) {
        let timer = Timer::Resolve(kind, name.clone());
        if self.timers.deadline_of(&timer).is_none() {
            self.timers.schedule(now + DNS_TIMEOUT, timer);
            self.out.push_back(Output::Resolve { name, kind });
        }
    }

    /// `realm`'s published keys (§8.2): pinned ones, else the cached TXT answer, else a TXT
    /// question goes out and the answer is [`Keys::Pending`].
    pub(super) fn published_keys(&mut self, now: Timestamp, realm: &Authority) -> Keys {
        if let Some(keys) = self.keys.get(realm) {
            return Keys::Known(keys.clone());
        }
        match self.cache.keys(now, realm) {
            Cached::Hit(keys) => Keys::Known(keys.to_vec()),
            Cached::Miss => Keys::Known(Vec::new()),
            Cached::Unknown => {
                // An IP-literal realm has no TXT name: only `known_keys` can vouch for it.
                let Some(name) = discovery::txt_name(realm) else {
                    return Keys::Known(Vec::new());
                };
                if self.keys_wanted.insert(realm.clone()) {
                    self.ask(now, RecordType::Txt, name);
                }
                Keys::Pending
            }
        }
    }

    /// Holds `frame` (and everything after it on `conn`) until `realm`'s keys are known.
    pub(super) fn park(&mut self, conn: ConnId, realm: &Authority, frame: Frame) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.parked = Some(Box::new((realm.clone(), frame)));
        }
    }

    /// Asks the host for a link to `realm` (§8.1), unless one is open or being dialled.
    pub(super) fn connect(&mut self, now: Timestamp, realm: &Authority) {
        if self.link_to(realm).is_some() || self.dialling.contains_key(realm) {
            return;
        }
        match discovery::plan(realm, &self.config.static_entries) {
            Plan::Direct(endpoint) => self.try_endpoints(realm, alloc::vec![endpoint]),
            Plan::Static(endpoints) => self.try_endpoints(realm, endpoints),
            Plan::Lookup(questions) => match self.cache.location(now, realm) {
                Cached::Hit(location) => {
                    let endpoints = location.endpoints(&mut self.rng);
                    if endpoints.is_empty() {
                        // SRV `.`: the domain says it offers no AIRC service.
                        self.no_authority(now, realm);
                    } else {
                        self.try_endpoints(realm, endpoints);
                    }
                }
                Cached::Miss => self.no_authority(now, realm),
                Cached::Unknown => {
                    let resolution = Resolution::new(questions);
                    if let Some(q) = resolution.question() {
                        let (kind, name) = (q.record_type(), q.name().into());
                        self.ask(now, kind, name);
                    }
                    self.dialling
                        .insert(realm.clone(), Dialling::Resolving(resolution));
                }
            },
        }
    }

    /// Dials the first of `endpoints`, keeping the rest for [`Server::dial_failed`].
    fn try_endpoints(&mut self, realm: &Authority, endpoints: Vec<Endpoint>) {
        let mut rest: VecDeque<Endpoint> = endpoints.into();
        let Some(endpoint) = rest.pop_front() else {
            return;
        };
        self.dialling.insert(realm.clone(), Dialling::Trying(rest));
        self.out.push_back(Output::Connect {
            authority: realm.clone(),
            endpoint,
        });
    }

    /// A dial to `realm` failed: the next endpoint, or, when none is left, no link.
    pub(super) fn dial_failed(&mut self, now: Timestamp, realm: &Authority) {
        if let Some(Dialling::Trying(rest)) = self.dialling.get_mut(realm)
            && let Some(endpoint) = rest.pop_front()
        {
            self.out.push_back(Output::Connect {
                authority: realm.clone(),
                endpoint,
            });
            return;
        }
        self.dialling.remove(realm);
        self.no_link(now, realm);
    }

    /// DNS knows no authority `realm` (§6.5): what waits for it fails `no_such_authority`.
    /// What the spool already holds for it stays, and expires there unless the realm appears.
    fn no_authority(&mut self, now: Timestamp, realm: &Authority) {
        self.dialling.remove(realm);
        self.timers.cancel(&Timer::Dial(realm.clone()));
        for (up, item) in self.awaiting.take(realm) {
            let refusal = (AckStatus::Failed, AckCode::NoSuchAuthority);
            self.answer_code(now, &up, &item.msg, refusal, Hop::Local);
        }
    }

    /// The host's answer to a DNS question (or, from the timer, [`Answer::Nothing`] after
    /// [`DNS_TIMEOUT`]). An answer nobody waits for changes nothing.
    pub(super) fn resolved(
        &mut self,
        now: Timestamp,
        name: &str,
        kind: RecordType,
        answer: Answer,
    ) {
        self.timers.cancel(&Timer::Resolve(kind, name.into()));
        match kind {
            RecordType::Txt => self.txt_answered(now, name, answer),
            RecordType::Srv | RecordType::Address => {
                self.location_answered(now, name, kind, answer);
            }
        }
    }

    fn txt_answered(&mut self, now: Timestamp, name: &str, answer: Answer) {
        let realms: Vec<Authority> = self
            .keys_wanted
            .iter()
            .filter(|r| discovery::txt_name(r).as_deref() == Some(name))
            .cloned()
            .collect();
        let (records, ttl) = match answer {
            Answer::Txt { records, ttl } => (records, ttl),
            // Anything else is no records: cached as a miss.
            _ => (Vec::new(), 0),
        };
        let records: Vec<&str> = records.iter().map(String::as_str).collect();
        for realm in realms {
            self.keys_wanted.remove(&realm);
            self.cache.store_keys(now, realm.clone(), &records, ttl);
            self.unpark(now, &realm);
        }
    }

    /// Handles again the frames parked for `realm`'s keys, then what followed them.
    pub(super) fn unpark(&mut self, now: Timestamp, realm: &Authority) {
        let waiting: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.parked.as_ref().is_some_and(|p| p.0 == *realm))
            .map(|(id, _)| *id)
            .collect();
        for conn in waiting {
            let Some(parked) = self.conns.get_mut(&conn).and_then(|c| c.parked.take()) else {
                continue;
            };
            let (_, frame) = *parked;
            self.frame(now, conn, frame);
            self.received(now, conn, &[]);
        }
    }

    fn location_answered(&mut self, now: Timestamp, name: &str, kind: RecordType, answer: Answer) {
        let asking: Vec<Authority> = self
            .dialling
            .iter()
            .filter(|(_, d)| match d {
                Dialling::Resolving(r) => r
                    .question()
                    .is_some_and(|q| q.record_type() == kind && q.name() == name),
                Dialling::Trying(_) => false,
            })
            .map(|(realm, _)| realm.clone())
            .collect();
        for realm in asking {
            let Some(Dialling::Resolving(resolution)) = self.dialling.get_mut(&realm) else {
                continue;
            };
            match resolution.answer(answer.clone()) {
                None => {
                    if let Some(q) = resolution.question().cloned() {
                        self.ask(now, q.record_type(), q.name().into());
                    }
                }
                Some(outcome) => {
                    self.dialling.remove(&realm);
                    self.cache.store_location(now, realm.clone(), outcome);
                    // Now cached: dial it, or fail what waits for it.
                    self.connect(now, &realm);
                }
            }
        }
    }
}
