//! The relay client against a fake Nostr relay written here (§1.5): it parses the client's NIP-01
//! `REQ`/`EVENT`/`AUTH`/`CLOSE` frames with `crate::nostr::message` and answers `EVENT`, `OK`,
//! `EOSE` and `AUTH` as a NIP-01 relay with NIP-42 would; beside it, the Minca fakes of
//! `tests.rs`.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;

use super::{A, Input, Net, Output, at, blob, room, url};
use crate::crypto::default_provider;
use crate::minca::nostr_kind::{DROP_KIND, FETCH_LIMIT, NostrLink, PUBLISH_KIND};
use crate::minca::relay_client::{PING_IDLE_MS, Ttl};
use crate::minca::relay_wire::{ClientMessage as MincaMessage, Topic};
use crate::nostr::auth;
use crate::nostr::message::{ClientMessage, Filter, RelayMessage};
use crate::nostr::{Event, expiration};

/// The Nostr relay as the client names it, and the URL it dials (§1.2: without `nostr+`).
const N: &str = "nostr+wss://n.example";
const N_DIAL: &str = "wss://n.example";
const CHALLENGE: &str = "challenge-1";

/// A NIP-01 relay with NIP-42, reduced to what a client can observe. One socket at a time.
#[derive(Debug, Default)]
pub(super) struct NostrFake {
    /// Refuses events until the socket authenticated (NIP-42).
    auth_required: bool,
    /// Never ends a fetch (no `EOSE` for a `REQ` with a `limit`).
    hold_fetches: bool,
    /// Refuses every event with this message (after any `AUTH`).
    refuse: Option<&'static str>,
    authed: bool,
    challenged: bool,
    /// Open subscriptions on the current socket.
    subs: Vec<(String, Filter)>,
    /// Regular events kept (ephemeral ones are only forwarded).
    kept: Vec<Event>,
    /// Every frame received, parsed; and the frames that were not NIP-01 client messages.
    received: Vec<ClientMessage>,
    not_nip01: Vec<String>,
    /// Ids of events accepted with `OK` true.
    accepted: Vec<[u8; 32]>,
    /// Sockets opened.
    sockets: usize,
}

impl NostrFake {
    /// A new socket: the relay forgets its subscriptions and who authenticated.
    pub(super) fn opened(&mut self) {
        self.sockets += 1;
        self.subs.clear();
        self.authed = false;
        self.challenged = false;
    }

    pub(super) fn answer(&mut self, now: crate::core::Timestamp, text: &str) -> Vec<String> {
        let Ok(message) = ClientMessage::parse(text) else {
            self.not_nip01.push(text.to_string());
            return Vec::new();
        };
        self.received.push(message.clone());
        match message {
            ClientMessage::Req {
                subscription,
                filters,
            } => {
                let filter = filters[0].clone();
                let mut matching: Vec<&Event> =
                    self.kept.iter().filter(|e| filter.matches(e)).collect();
                matching.sort_by_key(|e| core::cmp::Reverse(e.created_at));
                let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
                let mut out: Vec<String> = matching
                    .into_iter()
                    .take(limit)
                    .map(|e| {
                        RelayMessage::Event {
                            subscription: subscription.clone(),
                            event: e.clone(),
                        }
                        .to_text()
                    })
                    .collect();
                if !(self.hold_fetches && filter.limit.is_some()) {
                    out.push(RelayMessage::Eose(subscription.clone()).to_text());
                }
                self.subs.retain(|(id, _)| *id != subscription);
                self.subs.push((subscription, filter));
                out
            }
            ClientMessage::Close(id) => {
                self.subs.retain(|(s, _)| *s != id);
                Vec::new()
            }
            ClientMessage::Event(event) => {
                if self.auth_required && !self.authed {
                    let mut out = vec![ok(&event, false, "auth-required: sign in first")];
                    out.extend(self.challenge());
                    return out;
                }
                if let Some(reason) = self.refuse {
                    return vec![ok(&event, false, reason)];
                }
                let valid = event.verify(default_provider()).is_ok();
                if !valid {
                    return vec![ok(&event, false, "invalid: bad signature")];
                }
                self.accepted.push(event.id);
                if (1000..10_000).contains(&event.kind) {
                    self.kept.push(event.clone());
                }
                let mut out = vec![ok(&event, true, "")];
                out.extend(self.deliver(&event));
                out
            }
            ClientMessage::Auth(event) => {
                let checked = auth::check(default_provider(), &event, now, N_DIAL, CHALLENGE);
                self.authed |= checked.is_ok();
                vec![ok(&event, checked.is_ok(), "")]
            }
        }
    }

    fn challenge(&mut self) -> Option<String> {
        if self.challenged {
            return None;
        }
        self.challenged = true;
        Some(RelayMessage::Auth(CHALLENGE.into()).to_text())
    }

    /// The `EVENT` frames forwarding `event` to the subscriptions it matches.
    fn deliver(&self, event: &Event) -> Vec<String> {
        self.subs
            .iter()
            .filter(|(_, f)| f.matches(event))
            .map(|(id, _)| {
                RelayMessage::Event {
                    subscription: id.clone(),
                    event: event.clone(),
                }
                .to_text()
            })
            .collect()
    }

    fn events(&self) -> Vec<&Event> {
        self.received
            .iter()
            .filter_map(|m| match m {
                ClientMessage::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    fn auths(&self) -> Vec<&Event> {
        self.received
            .iter()
            .filter_map(|m| match m {
                ClientMessage::Auth(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// The filters of every `REQ` received, in order.
    fn reqs(&self) -> Vec<&Filter> {
        self.received
            .iter()
            .filter_map(|m| match m {
                ClientMessage::Req { filters, .. } => filters.first(),
                _ => None,
            })
            .collect()
    }

    fn watches_topic(&self, topic: &Topic) -> bool {
        self.subs.iter().any(|(_, f)| {
            f.kinds.as_deref() == Some(&[PUBLISH_KIND, DROP_KIND][..])
                && f.tags.get(&'x') == Some(&vec![topic.as_str().to_string()])
        })
    }
}

fn ok(event: &Event, accepted: bool, message: &str) -> String {
    RelayMessage::Ok {
        event_id: event.id,
        accepted,
        message: message.into(),
    }
    .to_text()
}

/// An event another member published on the Nostr relay, signed by its own throwaway key.
fn published_elsewhere(now: crate::core::Timestamp, topic: &Topic, n: u8) -> Event {
    let mut peer = NostrLink::new(default_provider(), &url(N));
    let mut rng = ChaCha20Rng::seed_from_u64(u64::from(n) + 100);
    let frame = peer.publish(now, &mut rng, topic, &blob(n));
    match ClientMessage::parse(&frame).unwrap() {
        ClientMessage::Event(e) => e,
        other => panic!("not an EVENT: {other:?}"),
    }
}

impl Net {
    fn nostr_fake(&mut self) -> &mut NostrFake {
        self.nostr.entry(N_DIAL.to_string()).or_default()
    }
}

fn blobs_heard(log: &[Output]) -> Vec<(String, Topic, u8)> {
    log.iter()
        .filter_map(|o| match o {
            Output::Blob { relay, topic, blob } => Some((
                relay.as_str().to_string(),
                topic.clone(),
                (1..=255).find(|n| super::blob(*n) == *blob).unwrap_or(0),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_nostr_relay_is_dialled_without_its_kind_and_watched_like_a_minca_relay() {
    let mut net = Net::new(&[A, N]);
    net.join(room(1), &[]);
    let log = net.take();
    let mut dialled = super::dials(&log);
    dialled.sort();
    assert_eq!(dialled, vec![A.to_string(), N_DIAL.to_string()]);
    assert_eq!(net.client.stats().passed_over, 0);
    assert!(net.fakes[A].watched(&room(1)));
    assert!(net.nostr[N_DIAL].watches_topic(&room(1)));
}

#[test]
fn a_client_on_a_minca_and_a_nostr_relay_hears_a_blob_through_either() {
    let mut net = Net::new(&[A, N]);
    net.join(room(1), &[]);
    net.take();
    let mail = crate::minca::relay_wire::RelayMessage::Mail(crate::minca::relay_wire::Mail {
        topic: room(1),
        items: vec![crate::minca::relay_wire::MailItem {
            blob: blob(3),
            seq: None,
        }],
        more: false,
    })
    .to_text();
    net.relay_says(A, &mail);
    let event = published_elsewhere(net.now, &room(1), 4);
    let frames = net.nostr_fake().deliver(&event);
    assert_eq!(frames.len(), 1, "the client's watch matches the event");
    net.relay_says(N_DIAL, &frames[0]);
    // An event for a topic nobody here watches is not delivered by the relay's filter either.
    let elsewhere = published_elsewhere(net.now, &room(9), 5);
    assert!(net.nostr_fake().deliver(&elsewhere).is_empty());
    assert_eq!(
        blobs_heard(&net.take()),
        vec![
            (url(A).as_str().to_string(), room(1), 3),
            (url(N).as_str().to_string(), room(1), 4),
        ]
    );
}

#[test]
fn a_publish_goes_to_both_a_minca_and_a_nostr_relay() {
    let mut net = Net::new(&[A, N]);
    net.join(room(1), &[]);
    net.input(Input::Publish {
        topic: room(1),
        blob: blob(7),
    });
    assert_eq!(
        net.fakes[A].drops(),
        vec![(room(1), blob(7), Ttl::PUBLISH_ONLY)]
    );
    let fake = &net.nostr[N_DIAL];
    let events = fake.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, PUBLISH_KIND);
    assert_eq!(events[0].content, blob(7).as_str());
    assert_eq!(events[0].tag_value("x"), Some(room(1).as_str()));
    assert_eq!(fake.accepted, vec![events[0].id]);
}

#[test]
fn a_drop_with_a_ttl_goes_to_a_nostr_relay_as_a_kept_event_and_a_fetch_reads_it_back() {
    let mut net = Net::new(&[A, N]);
    net.join(room(1), &[]);
    let ttl = Ttl::from_millis(60_000).unwrap();
    for n in 1..=3 {
        net.input(Input::Drop {
            topic: room(1),
            blob: blob(n),
            ttl,
        });
    }
    let events: Vec<Event> = net.nostr[N_DIAL].events().into_iter().cloned().collect();
    assert_eq!(events.len(), 3);
    for e in &events {
        assert_eq!(e.kind, DROP_KIND);
        assert_eq!(
            expiration::Expiration::of(e),
            expiration::Expiration::At(net.now.as_secs() + 60)
        );
    }
    net.take();
    net.input(Input::Fetch { topic: room(1) });
    let fetch = net.nostr[N_DIAL].reqs().last().copied().cloned().unwrap();
    assert_eq!(fetch.kinds, Some(vec![DROP_KIND]));
    assert_eq!(fetch.limit, Some(FETCH_LIMIT));
    let pages: Vec<(String, Vec<crate::minca::relay_wire::Blob>, bool)> = net
        .take()
        .into_iter()
        .filter_map(|o| match o {
            Output::Fetched {
                relay, blobs, done, ..
            } if relay == url(N) => Some((relay.as_str().to_string(), blobs, done)),
            _ => None,
        })
        .collect();
    assert_eq!(pages.len(), 1, "one page, ending the read");
    let (_, mut blobs, done) = pages[0].clone();
    assert!(done);
    blobs.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut want = vec![blob(1), blob(2), blob(3)];
    want.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(blobs, want);
    // The read is over: the fetch subscription was closed and a new fetch may start.
    assert!(
        net.nostr[N_DIAL]
            .subs
            .iter()
            .all(|(_, f)| f.limit.is_none())
    );
}

#[test]
fn an_auth_challenge_is_answered_and_the_refused_event_sent_again() {
    let mut net = Net::new(&[N]);
    net.nostr_fake().auth_required = true;
    net.join(room(1), &[]);
    net.input(Input::Publish {
        topic: room(1),
        blob: blob(2),
    });
    let fake = &net.nostr[N_DIAL];
    let events = fake.events();
    let auths = fake.auths();
    // The refused event's AUTH is signed by the event's own throwaway key (§1.5).
    assert_eq!(auths.len(), 1);
    assert_eq!(auths[0].pubkey, events[0].pubkey);
    assert!(fake.authed);
    assert_eq!(events.len(), 2, "the event, then the same event again");
    assert_eq!(events[0].id, events[1].id);
    assert_eq!(fake.accepted, vec![events[0].id]);
    assert_eq!(net.client.stats().refused, 0);
}

#[test]
fn a_nostr_relay_refusal_no_auth_can_turn_is_counted() {
    let mut net = Net::new(&[N]);
    net.join(room(1), &[]);
    let event = published_elsewhere(net.now, &room(1), 6);
    net.relay_says(N_DIAL, &ok(&event, false, "blocked: no"));
    // An OK for an event the client never sent is not a refusal of its own.
    assert_eq!(net.client.stats().refused, 0);
    net.nostr_fake().refuse = Some("blocked: no");
    net.input(Input::Publish {
        topic: room(1),
        blob: blob(1),
    });
    assert_eq!(
        net.nostr[N_DIAL].events().len(),
        1,
        "a plain refusal is not retried"
    );
    assert_eq!(net.client.stats().refused, 1);
}

#[test]
fn on_reopen_every_topic_is_watched_again_on_a_nostr_relay() {
    let mut net = Net::new(&[N]);
    net.join(room(1), &[]);
    net.join(room(2), &[]);
    assert_eq!(net.nostr[N_DIAL].reqs().len(), 2);
    let conn = net.conn_of(N_DIAL).unwrap();
    net.input(Input::Closed { conn });
    net.advance(at(60_000));
    let fake = &net.nostr[N_DIAL];
    assert_eq!(fake.sockets, 2);
    assert_eq!(fake.reqs().len(), 4);
    assert!(fake.watches_topic(&room(1)));
    assert!(fake.watches_topic(&room(2)));
}

#[test]
fn nothing_minca_only_is_sent_to_a_nostr_relay() {
    let mut net = Net::new(&[A, N]);
    net.fake(A).turn = Some(("turn:t.example".into(), super::T0 + 10_000_000));
    net.join(room(1), &[]);
    net.input(Input::RequestIce);
    // Long silence: many ping intervals pass.
    net.advance(at(10 * PING_IDLE_MS));
    let log = net.take();
    let fake = &net.nostr[N_DIAL];
    assert!(fake.not_nip01.is_empty(), "sent: {:?}", fake.not_nip01);
    assert_eq!(
        fake.received.len(),
        1,
        "only the watch: {:?}",
        fake.received
    );
    assert!(matches!(fake.received[0], ClientMessage::Req { .. }));
    // The silent Nostr socket is neither pinged nor given up; the Minca relay is pinged and asked
    // for TURN.
    assert_eq!(fake.sockets, 1);
    assert_eq!(super::closes(&log), 0);
    assert!(net.fakes[A].count(|m| matches!(m, MincaMessage::Ping)) >= 2);
    assert!(net.fakes[A].count(|m| matches!(m, MincaMessage::Ice)) >= 1);
    assert!(net.client.turn_servers(net.now).is_some());
}

#[test]
fn reads_on_a_nostr_relay_give_way_to_its_watches_within_its_subscription_cap() {
    use crate::minca::nostr_kind::MAX_SUBSCRIPTIONS;
    let mut net = Net::new(&[N]);
    net.nostr_fake().hold_fetches = true;
    let rooms = MAX_SUBSCRIPTIONS - 4;
    for n in 0..rooms {
        net.join(Topic::from_bytes(&[n as u8; 32]), &[]);
    }
    for n in 0..8u8 {
        net.input(Input::Fetch {
            topic: Topic::from_bytes(&[200 + n; 32]),
        });
    }
    // The pacer lets everything out.
    net.advance(at(60_000));
    let fake = &net.nostr[N_DIAL];
    let fetches = fake.reqs().iter().filter(|f| f.limit.is_some()).count();
    assert_eq!(fetches, 4, "only the subscriptions the watches leave");
    assert_eq!(fake.reqs().len() - fetches, rooms);
    assert_eq!(net.client.stats().reads_refused, 4);
    assert_eq!(
        net.take()
            .iter()
            .filter(|o| matches!(o, Output::FetchUnsent { .. }))
            .count(),
        4
    );
}
