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
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use super::Output;
use super::Server;
use super::Timer;
use super::conn::State;
use super::events::Hop;
use crate::airc::address::Authority;
use crate::airc::discovery::{
    self, Answer, Cached, Endpoint, Outcome, Plan, Question, RecordType, Resolution,
};
use crate::airc::frame::{AckCode, AckStatus, Frame};
use crate::core::index::remove_from_set;
use crate::core::{ConnId, Timestamp};
use rand_core::CryptoRng;

/// How long the server waits for the host's answer to one DNS question before taking it as "no
/// records" (§8.1 is silent). Resolvers give up on a name within a few seconds; this only keeps a
/// host that drops a question from holding a dial or a parked connection forever.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(10);

/// A dial to a realm in progress (§8.1).
#[derive(Debug)]
enum Dialling {
    /// Asking DNS where the realm is.
    Resolving(Resolution),
    /// A `Connect` is out; these endpoints are left to try if it fails.
    Trying(VecDeque<Endpoint>),
    /// The link is open and its hello sent; the welcome is awaited on this connection.
    Welcome(ConnId),
}

/// The realms a link is being located or dialled to, one dial each, and the resolving ones by
/// the question they wait on: a client that writes to many realms makes many dials, and each
/// DNS answer must find its own without walking them all.
#[derive(Debug, Default)]
pub(super) struct Dials {
    by_realm: BTreeMap<Authority, Dialling>,
    asking: BTreeMap<(RecordType, String), BTreeSet<Authority>>,
}

/// What waits for realms' published keys (§8.2): the realms asked of DNS, by the TXT name asked,
/// and the connections parked until a realm's keys are known, by realm. A TXT answer and a
/// realm's keys each find theirs without walking every realm or connection.
#[derive(Debug, Default)]
pub(super) struct KeyWaits {
    wanted: BTreeMap<String, BTreeSet<Authority>>,
    parked: BTreeMap<Authority, BTreeSet<ConnId>>,
}

impl KeyWaits {
    /// Notes that `realm`'s keys are asked for under `name`; `false` if they already were.
    fn want(&mut self, name: String, realm: &Authority) -> bool {
        self.wanted.entry(name).or_default().insert(realm.clone())
    }

    /// The realms that asked under `name`, in order, no longer waiting.
    fn answered(&mut self, name: &str) -> BTreeSet<Authority> {
        self.wanted.remove(name).unwrap_or_default()
    }

    fn park(&mut self, realm: &Authority, conn: ConnId) {
        self.parked.entry(realm.clone()).or_default().insert(conn);
    }

    /// `conn` closed while parked for `realm`.
    pub(super) fn closed(&mut self, realm: &Authority, conn: ConnId) {
        remove_from_set(&mut self.parked, realm, &conn);
    }

    /// The connections parked for `realm`, in order, no longer parked.
    fn take_parked(&mut self, realm: &Authority) -> BTreeSet<ConnId> {
        self.parked.remove(realm).unwrap_or_default()
    }
}

/// What a DNS answer leaves a resolving dial to do.
enum Next {
    /// Ask this question.
    Ask(Question),
    /// Resolution is over; the dial is no longer filed.
    Located(Outcome),
    /// Nothing: no such dial, or no question left to ask.
    Wait,
}

impl Dials {
    /// Whether `realm` is being located or dialled.
    pub(super) fn contains(&self, realm: &Authority) -> bool {
        self.by_realm.contains_key(realm)
    }

    /// Files `realm`'s dial, replacing any before it.
    fn set(&mut self, realm: &Authority, dialling: Dialling) {
        self.take(realm);
        if let Dialling::Resolving(r) = &dialling
            && let Some(q) = r.question()
        {
            let question = (q.record_type(), q.name().into());
            self.asking
                .entry(question)
                .or_default()
                .insert(realm.clone());
        }
        self.by_realm.insert(realm.clone(), dialling);
    }

    /// `realm`'s dial is over.
    pub(super) fn remove(&mut self, realm: &Authority) {
        self.take(realm);
    }

    /// `realm`'s dialled link is open on `conn`, awaiting the welcome to its hello.
    pub(super) fn welcoming(&mut self, realm: &Authority, conn: ConnId) {
        self.set(realm, Dialling::Welcome(conn));
    }

    /// `conn`, dialled to `realm`, was welcomed or is gone: that dial is over. A later dial of
    /// the realm on another connection is left alone.
    pub(super) fn unwelcomed(&mut self, realm: &Authority, conn: ConnId) {
        if matches!(self.by_realm.get(realm), Some(Dialling::Welcome(c)) if *c == conn) {
            self.take(realm);
        }
    }

    fn take(&mut self, realm: &Authority) -> Option<Dialling> {
        let dialling = self.by_realm.remove(realm)?;
        if let Dialling::Resolving(r) = &dialling
            && let Some(q) = r.question()
        {
            let question = (q.record_type(), String::from(q.name()));
            remove_from_set(&mut self.asking, &question, realm);
        }
        Some(dialling)
    }

    /// The next endpoint of `realm` to try, if it is being dialled and one is left.
    fn next_endpoint(&mut self, realm: &Authority) -> Option<Endpoint> {
        match self.by_realm.get_mut(realm) {
            Some(Dialling::Trying(rest)) => rest.pop_front(),
            _ => None,
        }
    }

    /// The realms whose resolution waits on this question, in order.
    fn asking(&self, kind: RecordType, name: &str) -> Vec<Authority> {
        self.asking
            .get(&(kind, name.into()))
            .map(|realms| realms.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Feeds `answer` to `realm`'s resolution.
    fn answer(&mut self, realm: &Authority, answer: Answer) -> Next {
        if !matches!(self.by_realm.get(realm), Some(Dialling::Resolving(_))) {
            return Next::Wait;
        }
        let Some(Dialling::Resolving(mut resolution)) = self.take(realm) else {
            return Next::Wait;
        };
        match resolution.answer(answer) {
            Some(outcome) => Next::Located(outcome),
            None => {
                let next = resolution.question().cloned();
                self.set(realm, Dialling::Resolving(resolution));
                next.map_or(Next::Wait, Next::Ask)
            }
        }
    }
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
                if self.key_waits.want(name.clone(), realm) {
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
            self.key_waits.park(realm, conn);
        }
    }

    /// Asks the host for a link to `realm` (§8.1), unless one is open or being dialled.
    pub(super) fn connect(&mut self, now: Timestamp, realm: &Authority) {
        if self.link_to(realm).is_some() || self.dialling.contains(realm) {
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
                    self.dialling.set(realm, Dialling::Resolving(resolution));
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
        self.dialling.set(realm, Dialling::Trying(rest));
        self.out.push_back(Output::Connect {
            authority: realm.clone(),
            endpoint,
        });
    }

    /// A dial to `realm` failed: the next endpoint, or, when none is left, no link.
    pub(super) fn dial_failed(&mut self, now: Timestamp, realm: &Authority) {
        if let Some(endpoint) = self.dialling.next_endpoint(realm) {
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
        let realms = self.key_waits.answered(name);
        let (records, ttl) = match answer {
            Answer::Txt { records, ttl } => (records, ttl),
            // Anything else is no records: cached as a miss.
            _ => (Vec::new(), 0),
        };
        let records: Vec<&str> = records.iter().map(String::as_str).collect();
        for realm in realms {
            self.cache.store_keys(now, realm.clone(), &records, ttl);
            self.unpark(now, &realm);
        }
    }

    /// Handles again the frames parked for `realm`'s keys, then what followed them.
    pub(super) fn unpark(&mut self, now: Timestamp, realm: &Authority) {
        for conn in self.key_waits.take_parked(realm) {
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            let Some(parked) = c.parked.take() else {
                continue;
            };
            // A connection closed meanwhile (it sent too much while parked) is not served.
            if c.state == State::Closing {
                continue;
            }
            let (_, frame) = *parked;
            self.frame(now, conn, frame);
            self.received(now, conn, &[]);
        }
    }

    fn location_answered(&mut self, now: Timestamp, name: &str, kind: RecordType, answer: Answer) {
        for realm in self.dialling.asking(kind, name) {
            match self.dialling.answer(&realm, answer.clone()) {
                Next::Ask(q) => self.ask(now, q.record_type(), q.name().into()),
                Next::Located(outcome) => {
                    self.cache.store_location(now, realm.clone(), outcome);
                    // Now cached: dial it, or fail what waits for it.
                    self.connect(now, &realm);
                }
                Next::Wait => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    fn realm(s: &str) -> Authority {
        Authority::parse(s).unwrap()
    }

    /// Files `realm`'s dial as the server does: resolving over §8.1's questions.
    fn resolving(dials: &mut Dials, r: &Authority) {
        let Plan::Lookup(questions) = discovery::plan(r, &BTreeMap::new()) else {
            panic!("{r} is looked up");
        };
        dials.set(r, Dialling::Resolving(Resolution::new(questions)));
    }

    #[test]
    fn each_dns_answer_finds_the_dials_waiting_on_its_question_and_only_while_they_wait() {
        let (a, b) = (realm("a.example"), realm("b.example"));
        let mut dials = Dials::default();
        resolving(&mut dials, &a);
        resolving(&mut dials, &b);
        assert_eq!(
            dials.asking(RecordType::Srv, "_airc._tcp.a.example"),
            core::slice::from_ref(&a)
        );
        assert!(
            dials
                .asking(RecordType::Address, "airc.a.example")
                .is_empty()
        );

        // No SRV records: the dial moves on to `airc.<host>`, and is filed under that question.
        let next = dials.answer(&a, Answer::Nothing);
        assert!(matches!(next, Next::Ask(q) if q.name() == "airc.a.example"));
        assert!(
            dials
                .asking(RecordType::Srv, "_airc._tcp.a.example")
                .is_empty()
        );
        assert_eq!(
            dials.asking(RecordType::Address, "airc.a.example"),
            core::slice::from_ref(&a)
        );

        // Found: the dial is over and no question holds it; the other is untouched.
        let next = dials.answer(&a, Answer::Addresses { ttl: 300 });
        assert!(matches!(next, Next::Located(_)));
        assert!(!dials.contains(&a));
        assert!(
            dials
                .asking(RecordType::Address, "airc.a.example")
                .is_empty()
        );
        assert_eq!(
            dials.asking(RecordType::Srv, "_airc._tcp.b.example"),
            core::slice::from_ref(&b)
        );

        // A dial that goes on to endpoints, or ends, is no longer asking.
        dials.set(&b, Dialling::Trying(VecDeque::new()));
        assert!(
            dials
                .asking(RecordType::Srv, "_airc._tcp.b.example")
                .is_empty()
        );
        assert!(matches!(dials.answer(&b, Answer::Nothing), Next::Wait));
        resolving(&mut dials, &b);
        dials.remove(&b);
        assert!(dials.asking.is_empty() && dials.by_realm.is_empty());
    }

    #[test]
    fn a_txt_answer_finds_every_realm_asked_under_its_name_and_a_closed_connection_is_not_parked() {
        let mut waits = KeyWaits::default();
        let (a, a_port, b) = (
            realm("a.example"),
            realm("a.example:7000"),
            realm("b.example"),
        );
        assert!(waits.want("_airc.a.example".into(), &a));
        assert!(!waits.want("_airc.a.example".into(), &a), "asked once");
        assert!(waits.want("_airc.a.example".into(), &a_port));
        assert!(waits.want("_airc.b.example".into(), &b));
        assert_eq!(
            waits
                .answered("_airc.a.example")
                .into_iter()
                .collect::<Vec<_>>(),
            [a.clone(), a_port]
        );
        assert!(waits.answered("_airc.a.example").is_empty());

        waits.park(&a, ConnId(3));
        waits.park(&a, ConnId(1));
        waits.park(&b, ConnId(2));
        waits.closed(&a, ConnId(3));
        assert_eq!(
            waits.take_parked(&a).into_iter().collect::<Vec<_>>(),
            [ConnId(1)]
        );
        waits.closed(&b, ConnId(2));
        assert!(waits.parked.is_empty());
    }
}
