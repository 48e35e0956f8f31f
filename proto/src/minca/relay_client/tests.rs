//! The relay client against fake Minca relays written here: each parses the client's
//! `ClientMessage`s and answers with `RelayMessage`s, as §1.4 describes a relay.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::json;

#[cfg(feature = "rustcrypto")]
#[path = "tests_nostr.rs"]
mod nostr;

use super::*;
use crate::minca::relay_wire::{ClientMessage, MAX_FETCH_PAGES, Mail, MailItem, RelayMessage};

const T0: u64 = 1_790_000_000_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn url(text: &str) -> RelayUrl {
    RelayUrl::parse(text).unwrap()
}

fn room(n: u8) -> Topic {
    Topic::from_bytes(&[n; 32])
}

fn blob(n: u8) -> Blob {
    Blob::from_bytes(&[n; 12]).unwrap()
}

/// A Minca relay as §1.4 describes it, reduced to what a client can observe.
#[derive(Debug, Default)]
struct Fake {
    down: bool,
    /// Opens, then never says a word.
    mute: bool,
    /// Never answers a ping (but answers everything else).
    no_pong: bool,
    /// Offers TURN: `(turn url, expiresAt)`.
    turn: Option<(String, u64)>,
    /// Pages always say `more`, with 4 new blobs each.
    never_false: bool,
    kept: Vec<(u64, Topic, Blob)>,
    seq: u64,
    received: Vec<ClientMessage>,
}

impl Fake {
    fn answer(&mut self, text: &str) -> Vec<String> {
        let message = ClientMessage::parse(text).expect("the client sends well-formed messages");
        self.received.push(message.clone());
        if self.mute {
            return Vec::new();
        }
        match message {
            ClientMessage::Fetch {
                topic,
                after,
                watch,
            } => {
                let mut replies = Vec::new();
                if self.never_false {
                    let items = (1..=4)
                        .map(|i| MailItem {
                            blob: blob(1),
                            seq: Some(after + i),
                        })
                        .collect();
                    replies.push(
                        RelayMessage::Mail(Mail {
                            topic: topic.clone(),
                            items,
                            more: true,
                        })
                        .to_text(),
                    );
                } else {
                    let items: Vec<MailItem> = self
                        .kept
                        .iter()
                        .filter(|(seq, t, _)| *t == topic && *seq > after)
                        .map(|(seq, _, b)| MailItem {
                            blob: b.clone(),
                            seq: Some(*seq),
                        })
                        .collect();
                    let more = items.len() > 4;
                    let items = items.into_iter().take(4).collect();
                    replies.push(RelayMessage::Mail(Mail { topic, items, more }).to_text());
                }
                if watch {
                    replies.extend(self.ice());
                }
                replies
            }
            ClientMessage::Drop { topic, blob, ttl } => {
                if ttl.is_kept() {
                    self.seq += 1;
                    self.kept.push((self.seq, topic, blob));
                }
                Vec::new()
            }
            ClientMessage::Ice => self.ice(),
            ClientMessage::Ping => {
                if self.no_pong {
                    Vec::new()
                } else {
                    vec![RelayMessage::Pong.to_text()]
                }
            }
        }
    }

    fn ice(&self) -> Vec<String> {
        self.turn
            .iter()
            .map(|(turn, expires)| {
                json!({"type":"ice","payload":{"servers":[{"urls":[turn],"username":"u","credential":"c"}],"expiresAt":expires}})
                    .to_string()
            })
            .collect()
    }

    fn watches(&self) -> usize {
        self.received
            .iter()
            .filter(|m| matches!(m, ClientMessage::Fetch { watch: true, .. }))
            .count()
    }

    fn watched(&self, t: &Topic) -> bool {
        self.received
            .iter()
            .any(|m| matches!(m, ClientMessage::Fetch { topic, watch: true, .. } if topic == t))
    }

    fn drops(&self) -> Vec<(Topic, Blob, Ttl)> {
        self.received
            .iter()
            .filter_map(|m| match m {
                ClientMessage::Drop { topic, blob, ttl } => {
                    Some((topic.clone(), blob.clone(), *ttl))
                }
                _ => None,
            })
            .collect()
    }

    fn count(&self, pred: impl Fn(&ClientMessage) -> bool) -> usize {
        self.received.iter().filter(|m| pred(m)).count()
    }
}

/// The client, the fake relays (by dial URL), and every output, run at explicit times.
struct Net {
    client: RelayClient<ChaCha20Rng>,
    now: Timestamp,
    fakes: BTreeMap<String, Fake>,
    /// Fake Nostr relays (§1.5), by dial URL; a `nostr+` relay is dialled to one of these.
    #[cfg(feature = "rustcrypto")]
    nostr: BTreeMap<String, nostr::NostrFake>,
    conns: BTreeMap<ConnId, String>,
    log: Vec<Output>,
}

impl Net {
    fn new(configured: &[&str]) -> Self {
        let config = ClientConfig {
            relays: configured.iter().map(|u| url(u)).collect(),
        };
        Self {
            client: RelayClient::new(
                config,
                crate::crypto::default_provider(),
                ChaCha20Rng::seed_from_u64(5),
            ),
            now: at(0),
            fakes: BTreeMap::new(),
            #[cfg(feature = "rustcrypto")]
            nostr: BTreeMap::new(),
            conns: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    fn fake(&mut self, dial: &str) -> &mut Fake {
        self.fakes.entry(dial.to_string()).or_default()
    }

    fn input(&mut self, input: Input) {
        self.client.handle(self.now, input);
        self.pump();
    }

    /// Executes the client's outputs in order, answering as the fake relays would, until quiet.
    fn pump(&mut self) {
        loop {
            let mut replies = Vec::new();
            while let Some(out) = self.client.poll() {
                match &out {
                    #[cfg(feature = "rustcrypto")]
                    Output::Dial { conn, url, relay }
                        if relay.kind() == &crate::minca::relay_url::RelayKind::Nostr =>
                    {
                        self.nostr.entry(url.clone()).or_default().opened();
                        self.conns.insert(*conn, url.clone());
                        replies.push(Input::Opened { conn: *conn });
                    }
                    Output::Dial { conn, url, .. } => {
                        let fake = self.fakes.entry(url.clone()).or_default();
                        if fake.down {
                            replies.push(Input::DialFailed { conn: *conn });
                        } else {
                            self.conns.insert(*conn, url.clone());
                            replies.push(Input::Opened { conn: *conn });
                        }
                    }
                    Output::Send { conn, text } => {
                        let url = self
                            .conns
                            .get(conn)
                            .expect("sends only on open sockets")
                            .clone();
                        #[cfg(feature = "rustcrypto")]
                        if let Some(fake) = self.nostr.get_mut(&url) {
                            for text in fake.answer(self.now, text) {
                                replies.push(Input::Text { conn: *conn, text });
                            }
                            self.log.push(out);
                            continue;
                        }
                        let fake = self.fakes.get_mut(&url).unwrap();
                        for text in fake.answer(text) {
                            replies.push(Input::Text { conn: *conn, text });
                        }
                    }
                    Output::Close { conn } => {
                        self.conns.remove(conn);
                    }
                    _ => {}
                }
                self.log.push(out);
            }
            if replies.is_empty() {
                return;
            }
            for input in replies {
                self.client.handle(self.now, input);
            }
        }
    }

    /// Runs every wakeup up to `to`, then sets the clock to `to`.
    fn advance(&mut self, to: Timestamp) {
        let mut rounds = 0;
        while let Some(w) = self.client.poll_timeout() {
            if w.at > to {
                break;
            }
            rounds += 1;
            assert!(rounds < 100_000, "wakeups do not advance: {w:?}");
            self.now = self.now.max(w.at);
            self.client.handle_timeout(self.now);
            self.pump();
        }
        self.now = self.now.max(to);
    }

    fn take(&mut self) -> Vec<Output> {
        core::mem::take(&mut self.log)
    }

    /// The socket the client holds open to `dial`, if any.
    fn conn_of(&self, dial: &str) -> Option<ConnId> {
        self.conns
            .iter()
            .find(|(_, u)| u.as_str() == dial)
            .map(|(c, _)| *c)
    }

    /// The relay at `dial` says `text` on its open socket.
    fn relay_says(&mut self, dial: &str, text: &str) {
        let conn = self.conn_of(dial).expect("open socket");
        self.input(Input::Text {
            conn,
            text: text.to_string(),
        });
    }

    fn join(&mut self, t: Topic, own: &[&str]) {
        self.input(Input::Join {
            topic: t,
            relays: own.iter().map(|u| url(u)).collect(),
        });
    }
}

fn dials(log: &[Output]) -> Vec<String> {
    log.iter()
        .filter_map(|o| match o {
            Output::Dial { url, .. } => Some(url.clone()),
            _ => None,
        })
        .collect()
}

fn closes(log: &[Output]) -> usize {
    log.iter()
        .filter(|o| matches!(o, Output::Close { .. }))
        .count()
}

fn sends(log: &[Output]) -> usize {
    log.iter()
        .filter(|o| matches!(o, Output::Send { .. }))
        .count()
}

const A: &str = "wss://a.example";
const B: &str = "wss://b.example";
const C: &str = "wss://c.example";

#[test]
fn a_relay_of_a_kind_this_client_does_not_speak_is_kept_in_the_list_and_never_dialled() {
    let mut net = Net::new(&[]);
    net.join(room(1), &["foo+wss://x.example", A]);
    assert_eq!(dials(&net.take()), vec![A.to_string()]);
    assert_eq!(net.client.stats().passed_over, 1);
    // Passing it over does not make the list invalid: the room is joined on the rest.
    assert!(net.fakes[A].watched(&room(1)));
    net.advance(at(600_000));
    assert!(!dials(&net.take()).iter().any(|u| u.contains("x.example")));
}

#[test]
fn a_relay_is_dialled_at_its_dial_url_without_the_fragment() {
    let mut net = Net::new(&["wss://a.example/relay?x=1#room"]);
    net.join(room(1), &[]);
    assert_eq!(
        dials(&net.take()),
        vec!["wss://a.example/relay?x=1".to_string()]
    );
}

#[test]
fn a_closed_socket_is_redialled_forever_while_in_a_room() {
    let mut net = Net::new(&[A]);
    net.fake(A).down = true;
    net.join(room(1), &[]);
    net.advance(at(3_600_000));
    let log = net.take();
    let attempts = dials(&log).len();
    // 30 s at most between attempts (with jitter, at least 15 s once at the cap).
    assert!(attempts > 3_600 / 30, "{attempts} dials in an hour");
    let mut last = None;
    for o in &log {
        if let Output::RelayState {
            state: RelayState::Waiting { retry_at, failures },
            ..
        } = o
        {
            if let Some(prev) = last {
                assert!(*retry_at > prev);
            }
            assert!(*failures >= 1);
            last = Some(*retry_at);
        }
    }
    net.fake(A).down = false;
    net.advance(at(3_700_000));
    assert!(net.conn_of(A).is_some());
}

#[test]
fn redial_delays_grow_with_each_failure_and_reset_once_the_relay_answers() {
    let mut net = Net::new(&[A]);
    net.fake(A).down = true;
    net.join(room(1), &[]);
    let mut gaps = Vec::new();
    let mut dial_times = Vec::new();
    for _ in 0..8 {
        let w = net.client.poll_timeout().unwrap();
        net.advance(w.at);
        dial_times.push(net.now);
    }
    for pair in dial_times.windows(2) {
        gaps.push(pair[1].as_millis() - pair[0].as_millis());
    }
    // Ceilings 2 s, 4 s, 8 s, 16 s, 30 s: equal jitter keeps each delay in [ceiling/2, ceiling].
    assert!(gaps[0] <= 2_000 && gaps[0] >= 1_000, "{gaps:?}");
    assert!(gaps.iter().all(|&g| g <= 30_000), "{gaps:?}");
    assert!(gaps[4] >= 15_000, "{gaps:?}");
    // The relay comes back and answers: the next loss waits a first-attempt delay again.
    net.fake(A).down = false;
    net.advance(net.now + Duration::from_secs(31));
    let conn = net.conn_of(A).unwrap();
    net.fake(A).down = true;
    net.input(Input::Closed { conn });
    let w = net.client.poll_timeout().unwrap();
    assert!(w.at.as_millis() - net.now.as_millis() <= 1_000, "{w:?}");
}

#[test]
fn no_relay_is_dialled_once_the_client_is_in_no_room() {
    let mut net = Net::new(&[A]);
    net.advance(at(60_000));
    assert!(dials(&net.take()).is_empty(), "no room, no socket");
    net.join(room(1), &[]);
    net.input(Input::Leave { topic: room(1) });
    let log = net.take();
    assert_eq!(closes(&log), 1);
    assert!(log.contains(&Output::RelayState {
        relay: url(A),
        state: RelayState::Released
    }));
    net.advance(at(3_600_000));
    assert!(dials(&net.take()).is_empty());
    assert_eq!(net.client.poll_timeout(), None);
}

#[test]
fn a_gap_in_now_longer_than_two_heartbeats_closes_and_redials_every_socket() {
    let mut net = Net::new(&[A, B]);
    net.join(room(1), &[]);
    net.advance(at(10_000));
    net.take();
    let before = (net.conn_of(A).unwrap(), net.conn_of(B).unwrap());
    // The host slept: the next call comes more than 60 s after the last.
    net.now = at(10_000 + SLEEP_GAP_MS + 1);
    net.client.handle_timeout(net.now);
    net.pump();
    let log = net.take();
    assert!(log.contains(&Output::Close { conn: before.0 }));
    assert!(log.contains(&Output::Close { conn: before.1 }));
    assert_eq!(dials(&log), vec![A.to_string(), B.to_string()]);
    assert_eq!(net.client.stats().sleeps, 1);
    // Watching again on the new sockets.
    assert_eq!(net.fakes[A].watches(), 2);
}

#[test]
fn a_gap_of_two_heartbeats_or_less_closes_nothing() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.take();
    net.now = at(SLEEP_GAP_MS);
    net.client.handle_timeout(net.now);
    net.pump();
    assert_eq!(closes(&net.take()), 0);
    assert_eq!(net.client.stats().sleeps, 0);
}

#[test]
fn coming_back_online_closes_and_redials_every_socket_at_once() {
    let mut net = Net::new(&[A, B]);
    net.fake(B).down = true;
    net.join(room(1), &[]);
    net.advance(at(1_000));
    let a = net.conn_of(A).unwrap();
    net.take();
    net.fake(B).down = false;
    net.input(Input::Online);
    let log = net.take();
    assert!(log.contains(&Output::Close { conn: a }));
    // B was waiting out its backoff: it is dialled now too.
    assert_eq!(dials(&log), vec![A.to_string(), B.to_string()]);
    assert!(net.conn_of(A).is_some() && net.conn_of(B).is_some());
}

#[test]
fn a_socket_that_heard_nothing_for_a_while_is_pinged() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.advance(at(PING_IDLE_MS - 1));
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ping), 0);
    net.advance(at(PING_IDLE_MS));
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ping), 1);
    // A frame heard pushes the next ping back.
    net.advance(at(PING_IDLE_MS + 5_000));
    net.relay_says(A, "{\"type\":\"pong\"}");
    net.advance(at(PING_IDLE_MS + 5_000 + PING_IDLE_MS - 1));
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ping), 1);
}

#[test]
fn a_relay_that_answered_a_ping_before_and_then_sent_nothing_since_the_last_two_is_redialled() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.advance(at(PING_IDLE_MS));
    let first = net.conn_of(A).unwrap();
    net.fake(A).mute = true;
    net.take();
    // Pings at 30 s and 45 s go unanswered; when the next would be due the socket is given up.
    net.advance(at(4 * PING_IDLE_MS - 1));
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ping), 3);
    assert_eq!(closes(&net.take()), 0);
    net.advance(at(4 * PING_IDLE_MS));
    assert_eq!(
        net.take(),
        vec![
            Output::Close { conn: first },
            Output::RelayState {
                relay: url(A),
                state: RelayState::Waiting {
                    retry_at: net.client.poll_timeout().unwrap().at,
                    failures: 1
                }
            },
            // It was the only relay: none answers now.
            Output::Reachable(false),
        ]
    );
    assert_eq!(net.client.stats().ping_timeouts, 1);
    net.advance(at(4 * PING_IDLE_MS + 1_000));
    assert_eq!(dials(&net.take()), vec![A.to_string()]);
}

#[test]
fn a_relay_that_never_answered_a_ping_is_not_redialled_for_silence() {
    let mut net = Net::new(&[A]);
    net.fake(A).no_pong = true;
    net.join(room(1), &[]);
    net.advance(at(20 * PING_IDLE_MS));
    assert_eq!(closes(&net.take()), 0);
    assert!(net.fakes[A].count(|m| *m == ClientMessage::Ping) >= 19);
}

#[test]
fn on_open_every_topic_is_watched_again() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.join(room(2), &[]);
    assert_eq!(net.fakes[A].watches(), 2);
    let conn = net.conn_of(A).unwrap();
    net.input(Input::Closed { conn });
    net.advance(at(2_000));
    assert!(net.conn_of(A).is_some());
    assert_eq!(net.fakes[A].watches(), 4);
    assert_eq!(
        net.fakes[A].count(|m| matches!(m, ClientMessage::Fetch { topic, watch: true, after: 0 } if *topic == room(2))),
        2
    );
}

#[test]
fn sends_are_paced_at_20_a_second_in_bursts_of_40() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.take();
    for i in 0..100u8 {
        net.input(Input::Publish {
            topic: room(1),
            blob: blob(i),
        });
    }
    // The watch on opening took one token of the 40.
    assert_eq!(sends(&net.take()), 39);
    net.advance(at(1_000));
    assert_eq!(sends(&net.take()), 20);
    net.advance(at(2_000));
    assert_eq!(sends(&net.take()), 20);
    net.advance(at(4_000));
    // The last 21, in order.
    let drops = net.fakes[A].drops();
    assert_eq!(drops.len(), 100);
    assert!(
        drops
            .iter()
            .enumerate()
            .all(|(i, d)| d.1 == blob(i as u8) && d.2 == Ttl::PUBLISH_ONLY)
    );
}

#[test]
fn a_full_send_queue_drops_the_new_send_and_counts_it() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    let extra = 10;
    let n = MAX_QUEUED_SENDS + 39 + extra;
    for i in 0..n {
        net.input(Input::Publish {
            topic: room(1),
            blob: blob(i as u8),
        });
    }
    assert_eq!(net.client.stats().sends_dropped, extra as u64);
    assert_eq!(net.client.queued(&url(A)), MAX_QUEUED_SENDS);
    net.advance(at(60_000));
    // What was queued went out in order; the dropped ones were the last.
    assert_eq!(net.fakes[A].drops().len(), MAX_QUEUED_SENDS + 39);
}

#[test]
fn ice_offers_are_kept_per_relay_and_turn_is_their_union_expiring_at_the_earliest() {
    let mut net = Net::new(&[A, B, C]);
    net.fake(A).turn = Some(("turn:a.example:3478".into(), T0 + 600_000));
    net.fake(B).turn = Some(("turns:b.example:5349".into(), T0 + 300_000));
    net.join(room(1), &[]);
    let turn = net.client.turn_servers(net.now).unwrap();
    assert_eq!(turn.expires_at, at(300_000));
    let urls: Vec<&str> = turn
        .servers
        .iter()
        .flat_map(|s| s.urls.iter().map(String::as_str))
        .collect();
    assert_eq!(urls, vec!["turn:a.example:3478", "turns:b.example:5349"]);
    let log = net.take();
    assert_eq!(
        log.iter().rfind(|o| matches!(o, Output::Turn(_))),
        Some(&Output::Turn(Some(turn)))
    );
}

#[test]
fn turn_servers_are_used_only_while_expires_at_is_in_the_future() {
    let mut net = Net::new(&[A, B]);
    net.fake(A).turn = Some(("turn:a.example".into(), T0 + 600_000));
    net.fake(B).turn = Some(("turn:b.example".into(), T0 + 300_000));
    net.join(room(1), &[]);
    net.take();
    net.advance(at(300_000 - 1));
    assert_eq!(net.client.turn_servers(net.now).unwrap().servers.len(), 2);
    net.advance(at(300_000));
    // B's offer is past: the union is A's alone, expiring at A's time.
    let turn = net.client.turn_servers(net.now).unwrap();
    assert_eq!(turn.servers.len(), 1);
    assert_eq!(turn.expires_at, at(600_000));
    assert!(net.take().contains(&Output::Turn(Some(turn))));
    net.advance(at(600_000));
    assert_eq!(net.client.turn_servers(net.now), None);
    assert!(net.take().contains(&Output::Turn(None)));
}

#[test]
fn an_ice_offer_without_the_right_shape_is_dropped() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.take();
    let expires = T0 + 600_000;
    net.relay_says(
        A,
        &json!({"type":"ice","payload":{"servers":[{"urls":"stun:s.example","username":"u","credential":"c"}],"expiresAt":expires}}).to_string(),
    );
    net.relay_says(
        A,
        &json!({"type":"ice","payload":{"servers":[{"urls":"turn:s.example","username":1,"credential":"c"}],"expiresAt":expires}}).to_string(),
    );
    assert_eq!(net.client.turn_servers(net.now), None);
    assert!(!net.take().iter().any(|o| matches!(o, Output::Turn(_))));
    assert_eq!(net.client.stats().malformed_frames, 2);
    // A relay that offered nothing usable does not count as having TURN.
    net.input(Input::RequestIce);
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ice), 0);
}

#[test]
fn a_request_for_turn_goes_to_every_connected_relay_that_has_turn() {
    let mut net = Net::new(&[A, B, C]);
    net.fake(A).turn = Some(("turn:a.example".into(), T0 + 600_000));
    net.fake(C).turn = Some(("turn:c.example".into(), T0 + 600_000));
    net.join(room(1), &[]);
    net.input(Input::RequestIce);
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ice), 1);
    assert_eq!(net.fakes[B].count(|m| *m == ClientMessage::Ice), 0);
    assert_eq!(net.fakes[C].count(|m| *m == ClientMessage::Ice), 1);
    // Not connected, not asked.
    let conn = net.conn_of(C).unwrap();
    net.fake(C).down = true;
    net.input(Input::Closed { conn });
    net.input(Input::RequestIce);
    assert_eq!(net.fakes[A].count(|m| *m == ClientMessage::Ice), 2);
    assert_eq!(net.fakes[C].count(|m| *m == ClientMessage::Ice), 1);
}

#[test]
fn connecting_succeeds_once_any_relay_answers() {
    let mut net = Net::new(&[A, B]);
    net.fake(A).down = true;
    net.join(room(1), &[]);
    let log = net.take();
    let reach: Vec<&Output> = log
        .iter()
        .filter(|o| matches!(o, Output::Reachable(_)))
        .collect();
    assert_eq!(reach, vec![&Output::Reachable(true)]);
}

#[test]
fn connecting_fails_only_when_no_relay_answers() {
    let mut net = Net::new(&[A, B]);
    net.fake(A).down = true;
    net.fake(B).down = true;
    // A dial that is still under way is not a failure yet.
    net.client.handle(
        net.now,
        Input::Join {
            topic: room(1),
            relays: vec![],
        },
    );
    let mut first = Vec::new();
    while let Some(o) = net.client.poll() {
        first.push(o);
    }
    let conns: Vec<ConnId> = first
        .iter()
        .filter_map(|o| match o {
            Output::Dial { conn, .. } => Some(*conn),
            _ => None,
        })
        .collect();
    net.client
        .handle(net.now, Input::DialFailed { conn: conns[0] });
    assert!(!core::iter::from_fn(|| net.client.poll()).any(|o| matches!(o, Output::Reachable(_))));
    net.client
        .handle(net.now, Input::DialFailed { conn: conns[1] });
    assert!(core::iter::from_fn(|| net.client.poll()).any(|o| o == Output::Reachable(false)));
    // And it succeeds as soon as one comes back.
    net.fake(B).down = false;
    net.advance(at(5_000));
    assert!(net.take().contains(&Output::Reachable(true)));
}

#[test]
fn a_message_goes_to_every_connected_relay_the_room_is_on() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[B]);
    net.join(room(2), &[C]);
    net.input(Input::Publish {
        topic: room(1),
        blob: blob(7),
    });
    let one = vec![(room(1), blob(7), Ttl::PUBLISH_ONLY)];
    assert_eq!(net.fakes[A].drops(), one);
    assert_eq!(net.fakes[B].drops(), one);
    assert!(net.fakes[C].drops().is_empty());
    // A publish for a room not joined goes nowhere, and is counted.
    net.input(Input::Publish {
        topic: room(3),
        blob: blob(7),
    });
    assert_eq!(net.client.stats().unrouted, 1);
}

#[test]
fn every_rooms_topic_is_watched_on_every_one_of_its_relays() {
    let mut net = Net::new(&[A, B]);
    net.join(room(1), &[]);
    net.join(room(2), &[]);
    for relay in [A, B] {
        assert!(net.fakes[relay].watched(&room(1)));
        assert!(net.fakes[relay].watched(&room(2)));
    }
}

#[test]
fn a_rooms_own_relays_are_used_for_that_room_only() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[B]);
    net.join(room(2), &[]);
    assert!(net.fakes[B].watched(&room(1)));
    assert!(!net.fakes[B].watched(&room(2)));
    assert!(net.fakes[A].watched(&room(1)) && net.fakes[A].watched(&room(2)));
    // A blob for room 2 through B (which room 2 does not use) is not delivered.
    net.take();
    let mail = RelayMessage::Mail(Mail {
        topic: room(2),
        items: vec![MailItem {
            blob: blob(9),
            seq: None,
        }],
        more: false,
    });
    net.relay_says(B, &mail.to_text());
    assert!(!net.take().iter().any(|o| matches!(o, Output::Blob { .. })));
    assert_eq!(net.client.stats().unwatched_blobs, 1);
}

#[test]
fn an_updated_list_watches_on_new_relays_and_stops_on_relays_no_longer_named() {
    let mut net = Net::new(&[]);
    net.join(room(1), &[A, B]);
    net.join(room(2), &[B]);
    let a = net.conn_of(A).unwrap();
    net.take();
    net.join(room(1), &[B, C]);
    let log = net.take();
    // A is named by no room any more: closed and released.
    assert!(log.contains(&Output::Close { conn: a }));
    assert!(log.contains(&Output::RelayState {
        relay: url(A),
        state: RelayState::Released
    }));
    // C is new: dialled, and the topic watched on it.
    assert_eq!(dials(&log), vec![C.to_string()]);
    assert!(net.fakes[C].watched(&room(1)));
    // B is still named for room 1: no second watch.
    assert_eq!(net.fakes[B].watches(), 2);
    // Room 2 drops B; room 1 keeps it: B stays open, but room 2's blobs through it stop.
    net.join(room(2), &[C]);
    assert!(net.conn_of(B).is_some());
    let mail = RelayMessage::Mail(Mail {
        topic: room(2),
        items: vec![MailItem {
            blob: blob(9),
            seq: None,
        }],
        more: false,
    });
    net.take();
    net.relay_says(B, &mail.to_text());
    assert!(!net.take().iter().any(|o| matches!(o, Output::Blob { .. })));
    net.relay_says(C, &mail.to_text());
    assert!(net.take().iter().any(|o| matches!(o, Output::Blob { .. })));
}

#[test]
fn leaving_a_room_leaves_it_on_every_relay_and_releases_relays_only_it_used() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[B]);
    net.join(room(2), &[]);
    let b = net.conn_of(B).unwrap();
    net.take();
    net.input(Input::Leave { topic: room(1) });
    let log = net.take();
    // B served room 1 alone: closed and released. A still serves room 2: kept open.
    assert!(log.contains(&Output::Close { conn: b }));
    assert!(log.contains(&Output::RelayState {
        relay: url(B),
        state: RelayState::Released
    }));
    assert!(net.conn_of(A).is_some());
    assert_eq!(net.client.relays().collect::<Vec<_>>(), vec![&url(A)]);
    // A Minca relay has no unwatch: what it still sends for room 1 is not delivered.
    let mail = |t: Topic| {
        RelayMessage::Mail(Mail {
            topic: t,
            items: vec![MailItem {
                blob: blob(9),
                seq: None,
            }],
            more: false,
        })
        .to_text()
    };
    net.relay_says(A, &mail(room(1)));
    assert!(!net.take().iter().any(|o| matches!(o, Output::Blob { .. })));
    assert_eq!(net.client.stats().unwatched_blobs, 1);
    net.relay_says(A, &mail(room(2)));
    assert!(net.take().iter().any(|o| matches!(o, Output::Blob { .. })));
    // Nothing more is said in room 1, and a redial of A watches room 2 alone.
    let sent = net.fakes[A].received.len();
    net.input(Input::Publish {
        topic: room(1),
        blob: blob(4),
    });
    assert_eq!(net.fakes[A].received.len(), sent);
    assert_eq!(net.client.stats().unrouted, 1);
    let a = net.conn_of(A).unwrap();
    net.input(Input::Closed { conn: a });
    net.advance(at(60_000));
    assert!(net.conn_of(A).is_some(), "redialled");
    let rewatched: Vec<Topic> = net.fakes[A].received[sent..]
        .iter()
        .filter_map(|m| match m {
            ClientMessage::Fetch {
                topic, watch: true, ..
            } => Some(topic.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(rewatched, vec![room(2)]);
}

#[test]
fn a_list_of_more_than_8_relays_is_not_applied() {
    let mut net = Net::new(&[]);
    net.join(room(1), &[A]);
    let nine: Vec<String> = (0..9).map(|i| format!("wss://r{i}.example")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    net.take();
    net.join(room(1), &nine);
    let log = net.take();
    assert_eq!(log, vec![Output::JoinRefused { topic: room(1) }]);
    assert_eq!(net.client.relays().collect::<Vec<_>>(), vec![&url(A)]);
    assert_eq!(net.client.stats().joins_refused, 1);
}

#[test]
fn a_list_naming_a_relay_twice_is_not_applied() {
    let mut net = Net::new(&[]);
    net.join(room(1), &[A]);
    net.take();
    net.join(room(1), &[B, C, B]);
    assert_eq!(net.take(), vec![Output::JoinRefused { topic: room(1) }]);
    assert_eq!(net.client.relays().collect::<Vec<_>>(), vec![&url(A)]);
}

#[test]
fn a_blob_is_reported_with_its_topic_and_the_relay_it_came_through() {
    let mut net = Net::new(&[A, B]);
    net.join(room(1), &[]);
    net.take();
    let mail = RelayMessage::Mail(Mail {
        topic: room(1),
        items: vec![MailItem {
            blob: blob(3),
            seq: None,
        }],
        more: false,
    })
    .to_text();
    net.relay_says(A, &mail);
    net.relay_says(B, &mail);
    let blobs: Vec<Output> = net
        .take()
        .into_iter()
        .filter(|o| matches!(o, Output::Blob { .. }))
        .collect();
    // The same blob through two relays is reported for each: acting once is §2's rule 3.
    assert_eq!(
        blobs,
        vec![
            Output::Blob {
                relay: url(A),
                topic: room(1),
                blob: blob(3)
            },
            Output::Blob {
                relay: url(B),
                topic: room(1),
                blob: blob(3)
            },
        ]
    );
}

#[test]
fn a_fetch_reads_after_the_last_seq_until_more_is_false() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    for i in 0..10u8 {
        net.input(Input::Drop {
            topic: room(5),
            blob: blob(i),
            ttl: Ttl::from_millis(60_000).unwrap(),
        });
    }
    net.take();
    net.input(Input::Fetch { topic: room(5) });
    let pages: Vec<(usize, bool)> = net
        .take()
        .into_iter()
        .filter_map(|o| match o {
            Output::Fetched {
                topic,
                blobs,
                done,
                relay,
            } if topic == room(5) && relay == url(A) => Some((blobs.len(), done)),
            _ => None,
        })
        .collect();
    assert_eq!(pages, vec![(4, false), (4, false), (2, true)]);
    let afters: Vec<u64> = net.fakes[A]
        .received
        .iter()
        .filter_map(|m| match m {
            ClientMessage::Fetch {
                topic,
                after,
                watch: false,
            } if *topic == room(5) => Some(*after),
            _ => None,
        })
        .collect();
    assert_eq!(afters, vec![0, 4, 8]);
}

#[test]
fn a_fetch_stops_at_the_page_cap_against_a_relay_that_never_says_false() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.fake(A).never_false = true;
    net.take();
    net.input(Input::Fetch { topic: room(5) });
    net.advance(at(10_000));
    let pages: Vec<bool> = net
        .take()
        .into_iter()
        .filter_map(|o| match o {
            Output::Fetched { done, .. } => Some(done),
            _ => None,
        })
        .collect();
    assert_eq!(pages.len(), MAX_FETCH_PAGES);
    assert_eq!(pages.last(), Some(&true));
}

#[test]
fn a_fetch_cut_short_by_a_closing_socket_ends_done() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.fake(A).mute = true;
    net.input(Input::Fetch { topic: room(5) });
    let conn = net.conn_of(A).unwrap();
    net.take();
    net.input(Input::Closed { conn });
    assert!(net.take().contains(&Output::Fetched {
        relay: url(A),
        topic: room(5),
        blobs: vec![],
        done: true
    }));
}

/// A read under way on a relay the client releases (its last room left before the relay answered)
/// is reported over, as when its socket closes: `Output::Fetched` says `done` when "its socket
/// closed", whoever closed it. Reported once: the host's report of the close finds no socket.
#[test]
fn a_fetch_cut_short_by_releasing_its_relay_ends_done() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.fake(A).mute = true;
    net.input(Input::Fetch { topic: room(5) });
    let conn = net.conn_of(A).unwrap();
    net.take();
    net.input(Input::Leave { topic: room(1) });
    let done = Output::Fetched {
        relay: url(A),
        topic: room(5),
        blobs: vec![],
        done: true,
    };
    let released = Output::RelayState {
        relay: url(A),
        state: RelayState::Released,
    };
    assert_eq!(net.take(), vec![Output::Close { conn }, done, released]);
    net.input(Input::Closed { conn });
    assert!(net.take().is_empty());
    assert_eq!(net.client.stats().stray_reports, 1);
}

#[test]
fn a_fetch_with_no_connected_relay_is_reported_unsent() {
    let mut net = Net::new(&[A]);
    net.fake(A).down = true;
    net.join(room(1), &[]);
    net.take();
    net.input(Input::Fetch { topic: room(1) });
    assert!(net.take().contains(&Output::FetchUnsent { topic: room(1) }));
}

#[test]
fn the_answer_to_a_watch_is_blobs_and_a_read_is_pages_in_the_order_asked() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.input(Input::Drop {
        topic: room(1),
        blob: blob(4),
        ttl: Ttl::from_millis(60_000).unwrap(),
    });
    let conn = net.conn_of(A).unwrap();
    net.input(Input::Closed { conn });
    net.take();
    // On reopening, the watch of topic 1 is answered with what the relay keeps, as blobs; a read
    // of the same topic queued behind it is answered with a page.
    net.advance(at(2_000));
    net.input(Input::Fetch { topic: room(1) });
    let log = net.take();
    assert!(log.contains(&Output::Blob {
        relay: url(A),
        topic: room(1),
        blob: blob(4)
    }));
    assert!(log.contains(&Output::Fetched {
        relay: url(A),
        topic: room(1),
        blobs: vec![blob(4)],
        done: true
    }));
}

#[test]
fn a_drop_with_a_ttl_goes_to_every_connected_relay_of_the_topic() {
    let mut net = Net::new(&[A, B]);
    net.join(room(1), &[C]);
    let ttl = Ttl::from_millis(86_400_000).unwrap();
    // An inbox topic no room watches: the configured relays.
    net.input(Input::Drop {
        topic: room(9),
        blob: blob(1),
        ttl,
    });
    // A room's topic: the room's relays, its own included.
    net.input(Input::Drop {
        topic: room(1),
        blob: blob(2),
        ttl,
    });
    assert_eq!(
        net.fakes[A].drops(),
        vec![(room(9), blob(1), ttl), (room(1), blob(2), ttl)]
    );
    assert_eq!(
        net.fakes[B].drops(),
        vec![(room(9), blob(1), ttl), (room(1), blob(2), ttl)]
    );
    assert_eq!(net.fakes[C].drops(), vec![(room(1), blob(2), ttl)]);
}

#[test]
fn malformed_frames_are_ignored_and_counted() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.take();
    for text in [
        "",
        "[]",
        "{\"type\":1}",
        "{\"type\":\"mail\",\"topic\":\"short\",\"items\":[]}",
        "{\"type\":\"what\"}",
    ] {
        net.relay_says(A, text);
    }
    assert_eq!(net.client.stats().malformed_frames, 5);
    let log = net.take();
    assert!(log.is_empty(), "{log:?}");
}

#[test]
fn reports_about_unknown_sockets_are_ignored_and_counted() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    net.take();
    net.input(Input::Opened { conn: ConnId(77) });
    net.input(Input::Text {
        conn: ConnId(77),
        text: "{\"type\":\"pong\"}".into(),
    });
    net.input(Input::Closed { conn: ConnId(77) });
    // Opened twice for the same socket: the second is stray.
    let conn = net.conn_of(A).unwrap();
    net.input(Input::Opened { conn });
    assert_eq!(net.client.stats().stray_reports, 4);
    assert!(net.take().is_empty());
}

#[test]
fn the_room_table_is_bounded() {
    let mut net = Net::new(&[A]);
    for i in 0..MAX_ROOMS {
        net.join(
            Topic::from_bytes(&[
                (i % 256) as u8,
                (i / 256) as u8,
                1,
                2,
                3,
                4,
                5,
                6,
                7,
                8,
                9,
                0,
                1,
                2,
                3,
                4,
                5,
                6,
                7,
                8,
                9,
                0,
                1,
                2,
                3,
                4,
                5,
                6,
                7,
                8,
                9,
                0,
            ]),
            &[],
        );
    }
    net.take();
    net.join(room(200), &[]);
    assert_eq!(net.take(), vec![Output::JoinRefused { topic: room(200) }]);
    assert_eq!(net.client.rooms().count(), MAX_ROOMS);
}

#[test]
fn a_dial_that_never_opens_is_given_up_and_redialled() {
    let mut net = Net::new(&[A]);
    net.client.handle(
        net.now,
        Input::Join {
            topic: room(1),
            relays: vec![],
        },
    );
    let conn = match net.client.poll() {
        Some(Output::Dial { conn, .. }) => conn,
        other => panic!("{other:?}"),
    };
    while net.client.poll().is_some() {}
    // The host never reports the dial.
    net.now = at(DIAL_TIMEOUT_MS);
    net.client.handle_timeout(net.now);
    assert_eq!(net.client.poll(), Some(Output::Close { conn }));
    assert_eq!(net.client.stats().dial_timeouts, 1);
    net.pump();
    net.advance(at(DIAL_TIMEOUT_MS + 2_000));
    assert_eq!(dials(&net.take()).len(), 1);
    // The late report about the abandoned socket is stray.
    net.input(Input::Opened { conn });
    assert_eq!(net.client.stats().stray_reports, 1);
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let run = || {
        let mut net = Net::new(&[A, B]);
        net.fake(A).down = true;
        net.join(room(1), &[]);
        net.advance(at(600_000));
        net.take()
    };
    assert_eq!(run(), run());
}

#[test]
fn a_publish_via_one_relay_goes_to_that_relay_only_if_the_room_is_on_it() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[B]);
    net.join(room(2), &[C]);
    net.input(Input::PublishVia {
        relay: url(B),
        topic: room(1),
        blob: blob(1),
    });
    assert_eq!(
        net.fakes[B].drops(),
        vec![(room(1), blob(1), Ttl::PUBLISH_ONLY)]
    );
    assert!(net.fakes[A].drops().is_empty());
    // Room 1 is not on C: nothing goes, and it is counted.
    net.input(Input::PublishVia {
        relay: url(C),
        topic: room(1),
        blob: blob(2),
    });
    assert!(net.fakes[C].drops().is_empty());
    assert_eq!(net.client.stats().unrouted, 1);
}

#[test]
fn joining_again_after_leaving_every_room_reports_reaching_a_relay_again() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    assert!(net.take().contains(&Output::Reachable(true)));
    net.input(Input::Leave { topic: room(1) });
    net.join(room(1), &[]);
    assert!(net.take().contains(&Output::Reachable(true)));
}

#[test]
fn room_churn_faster_than_the_pacer_redials_the_socket_instead_of_queueing_without_bound() {
    let mut net = Net::new(&[A]);
    net.join(room(1), &[]);
    // Spend the pacer's burst, so nothing more goes out at this instant.
    for i in 0..40 {
        net.input(Input::Publish {
            topic: room(1),
            blob: blob(i),
        });
    }
    net.take();
    for _ in 0..=MAX_QUEUED_FRAMES {
        net.join(room(2), &[]);
        net.input(Input::Leave { topic: room(2) });
        assert!(net.client.queued(&url(A)) <= MAX_QUEUED_FRAMES);
    }
    assert!(net.client.stats().queue_overflows >= 1);
    assert!(closes(&net.take()) >= 1);
    // The socket that replaced it watches exactly what it should.
    net.advance(at(60_000));
    assert!(net.fakes[A].watched(&room(1)));
    assert!(net.client.queued(&url(A)) <= MAX_QUEUED_FRAMES);
}

#[test]
fn handle_text_hands_out_what_text_would_queue_in_the_same_order_and_counts_the_same() {
    let topic = room(1).as_str().to_string();
    let blob_a = blob(7);
    let blob_b = blob(8);
    let (a, b) = (blob_a.as_str(), blob_b.as_str());
    // The first blob's first character escaped: read through an owned copy, not the frame.
    let escaped = format!("\\u{:04x}{}", b.as_bytes()[0], &b[1..]);
    let frames = [
        format!(
            r#"{{"type":"mail","topic":"{topic}","items":[{{"blob":"{a}"}},{{"blob":"{b}","seq":3}}],"more":false}}"#
        ),
        format!(r#"{{"type":"mail","topic":"{topic}","items":[{{"blob":"{escaped}"}}]}}"#),
        format!(r#"{{"items":[{{"blob":"{a}"}}],"type":"mail","topic":"{topic}"}}"#),
        format!(
            r#"{{"type":"mail","topic":"{}","items":[{{"blob":"{a}"}}]}}"#,
            room(2)
        ),
        format!(r#"{{"type":"mail","topic":"{topic}","items":[{{"blob":"{a}="}}]}}"#),
        r#"{"type":"pong"}"#.to_string(),
        r#"{ "type" : "pong" }"#.to_string(),
        "not json".to_string(),
    ];
    let mut queued = Net::new(&[A]);
    let mut handed = Net::new(&[A]);
    for net in [&mut queued, &mut handed] {
        net.join(room(1), &[]);
        net.take();
    }
    let conn = handed.conn_of(A).unwrap();
    let mut blobs = 0;
    for frame in &frames {
        queued.relay_says(A, frame);
        let mut outputs = Vec::new();
        let now = handed.now;
        handed
            .client
            .handle_text(now, conn, frame, &mut |d| outputs.push(d.into_output()));
        while let Some(out) = handed.client.poll() {
            outputs.push(out);
        }
        blobs += outputs
            .iter()
            .filter(|o| matches!(o, Output::Blob { .. }))
            .count();
        assert_eq!(queued.take(), outputs, "{frame}");
    }
    assert_eq!(blobs, 4);
    assert_eq!(queued.client.stats(), handed.client.stats());
    let stats = handed.client.stats();
    assert_eq!((stats.unwatched_blobs, stats.malformed_frames), (1, 2));
}
