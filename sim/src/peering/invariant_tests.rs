//! Each invariant check of the scenario, shown to fire. The sweeps show that the real machines
//! pass them; these show that a relay or a worker breaking one is caught: each test runs relays
//! that really peer, then hands the simulator the state a faulty relay would leave (a store
//! written past the worker's checks, a session configured to trust the wrong key, a limiter that
//! forgot its budget) and expects the invariant's name.
//!
//! `ephemeral-never-stored` has no test here: the memory store the simulator runs refuses
//! ephemeral writes itself, so no forgery through it can reach the check.

use weft_proto::nostr::auth;
use weft_proto::nostr::relay::Session;

use super::*;

/// No faults at all, so what a test forges is the only thing wrong.
fn quiet(seed: u64) -> Scenario {
    Scenario {
        relays: 3,
        events: 12,
        duration: Duration::from_secs(10 * 60),
        drops: 0,
        partitions: 0,
        crashes: 0,
        limiter_outages: 0,
        replays: 0,
        corrupt_permille: 0,
        ..Scenario::new(seed)
    }
}

/// A quiet run of `seed` to its end, every check passing.
fn settled(seed: u64) -> World<'static> {
    let mut w = World::new(&quiet(seed), None);
    assert_eq!(scenario::World::run(&mut w), Ok(()), "a quiet run passes");
    w
}

/// The first quiet seed whose settled world `pick` finds something in, with what it found.
fn find<T>(mut pick: impl FnMut(&mut World<'static>) -> Option<T>) -> (World<'static>, T) {
    for seed in 0..50 {
        let mut w = settled(seed);
        if let Some(t) = pick(&mut w) {
            return (w, t);
        }
    }
    panic!("no quiet seed in 0..50 has what the test needs");
}

/// A stored event of relay `i`, altered and signed by nobody, with `fresh_id` its id
/// recomputed over the altered fields.
fn altered(w: &mut World<'static>, i: usize, fresh_id: bool) -> Option<Event> {
    let mut e = w.held(i).into_iter().next()?;
    e.content.push_str(" (altered)");
    if fresh_id {
        e.id = e.compute_id(crate::crypto::provider());
    }
    Some(e)
}

/// An `AUTH` frame signed by `secret` for connection `idx` of relay `p`.
fn auth_frame(w: &World<'static>, p: usize, idx: usize, secret: &Secp256k1Secret) -> String {
    let challenge = w.relays[p].harness.conns[idx]
        .session
        .challenge()
        .to_string();
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let event = auth::build(
        crate::crypto::provider(),
        secret,
        &mut rng,
        w.now,
        &w.relays[p].url,
        &challenge,
    )
    .expect("signing an AUTH event");
    ClientMessage::Auth(event).to_text()
}

#[test]
fn an_event_under_a_fresh_id_that_no_author_signed_is_caught() {
    let (mut w, (i, e)) =
        find(|w| (0..w.relays.len()).find_map(|i| Some((i, altered(w, i, true)?))));
    let now = w.now;
    w.relays[i].harness.store.write(&e, now).expect("written");
    let (name, detail) = w.check_bounds().expect_err("a forged event is caught");
    assert_eq!(name, "authentic", "{detail}");
}

#[test]
fn an_event_altered_under_its_own_id_is_caught() {
    // Relay `i` holds an event relay `j` does not; `j` gets it altered, under the same id.
    let (mut w, (j, e)) = find(|w| {
        let n = w.relays.len();
        for i in 0..n {
            for j in 0..n {
                let theirs: BTreeSet<EventId> = w.held(j).iter().map(|e| e.id).collect();
                if let Some(e) = w.held(i).into_iter().find(|e| !theirs.contains(&e.id)) {
                    let mut e = e;
                    e.content.push_str(" (altered)");
                    return Some((j, e));
                }
            }
        }
        None
    });
    let now = w.now;
    w.relays[j].harness.store.write(&e, now).expect("written");
    let (name, detail) = w.check_bounds().expect_err("an altered event is caught");
    assert_eq!(name, "authentic", "{detail}");
}

#[test]
fn a_valid_event_outside_every_scope_is_caught() {
    let (mut w, (i, e)) = find(|w| {
        let expected = w.expected();
        let published: Vec<Event> = w.published.values().cloned().collect();
        published.into_iter().find_map(|e| {
            if kinds::class(e.kind) == KindClass::Ephemeral {
                return None;
            }
            let i = (0..w.relays.len()).find(|&i| !expected[i].contains(&e.id))?;
            Some((i, e))
        })
    });
    let now = w.now;
    w.relays[i].harness.store.write(&e, now).expect("written");
    let (name, detail) = w
        .check_bounds()
        .expect_err("an out-of-scope event is caught");
    assert_eq!(name, "never-out-of-scope", "{detail}");
}

#[test]
fn a_relay_missing_an_in_scope_event_is_caught() {
    let (mut w, i) = find(|w| {
        let expected = w.expected();
        (0..w.relays.len()).find(|&i| !expected[i].is_subset(&w.relays[i].own))
    });
    // Its store lost everything it had from its peers: only its own events are left.
    let mut store = MemoryStore::default();
    let now = w.now;
    for e in w.held(i) {
        if w.relays[i].own.contains(&e.id) {
            store.write(&e, now).expect("written");
        }
    }
    w.relays[i].harness.store = store;
    assert_eq!(w.check_bounds(), Ok(()), "holding less is within bounds");
    let (name, detail) = w.check_converged().expect_err("a missing event is caught");
    assert_eq!(name, "converged", "{detail}");
}

/// Relay `p`'s session on a new connection, authenticated with `secret`.
fn connect_and_auth(w: &mut World<'static>, p: usize, secret: &Secp256k1Secret) -> usize {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let idx = w.relays[p].harness.connect(&mut rng);
    let frame = auth_frame(w, p, idx, secret);
    w.relays[p].harness.send(idx, &frame);
    idx
}

fn session<'w>(w: &'w World<'static>, p: usize, idx: usize) -> &'w Session {
    &w.relays[p].harness.conns[idx].session
}

#[test]
fn a_relay_that_treats_an_unlisted_key_as_a_peer_is_caught() {
    let mut w = settled(1);
    let outsider = generate_secp256k1(
        crate::crypto::provider(),
        &mut ChaCha20Rng::seed_from_u64(5),
    );
    let outsider_pk = crate::crypto::provider()
        .schnorr_public_key(&outsider)
        .expect("a public key");
    // Relay 0's sessions are configured with a list naming the outsider; the simulator's record
    // of relay 0's `peering.peers` does not.
    let mut entries = w.relays[0].trust.entries().to_vec();
    entries.push(PeerEntry {
        pubkey: outsider_pk,
        relay_url: "wss://outsider.example/".into(),
        enabled: true,
    });
    let wrong = TrustList::new(entries).expect("a list");
    w.relays[0].harness.config.peering = PeerTreatment::new(&wrong, peer_limits());
    let idx = connect_and_auth(&mut w, 0, &outsider);
    assert_eq!(session(&w, 0, idx).peer(), Some(&outsider_pk));
    let (name, detail) = w.check_treatment().expect_err("an unlisted peer is caught");
    assert_eq!(name, "peer-treatment", "{detail}");
}

#[test]
fn a_relay_that_ignores_an_enabled_peer_is_caught() {
    let (mut w, (p, i)) = find(|w| {
        let n = w.relays.len();
        (0..n)
            .flat_map(|p| (0..n).map(move |i| (p, i)))
            .find(|&(p, i)| p != i && w.relays[p].trusts(&w.relays[i].pubkey))
    });
    // Relay `p`'s sessions are configured with no peers at all.
    w.relays[p].harness.config.peering = PeerTreatment::default();
    let key = w.relays[i].key.clone();
    let idx = connect_and_auth(&mut w, p, &key);
    assert!(session(&w, p, idx).authenticated().next().is_some());
    assert_eq!(session(&w, p, idx).peer(), None);
    let (name, detail) = w.check_treatment().expect_err("an ignored peer is caught");
    assert_eq!(name, "peer-treatment", "{detail}");
}

#[test]
fn a_replayed_auth_that_authenticates_is_caught() {
    let (mut w, (p, idx)) = find(|w| {
        w.relays.iter().enumerate().find_map(|(p, r)| {
            let idx = (0..r.harness.conns.len()).find(|&idx| {
                r.harness.conns[idx]
                    .session
                    .authenticated()
                    .next()
                    .is_some()
            })?;
            Some((p, idx))
        })
    });
    assert_eq!(w.check_treatment(), Ok(()));
    // The simulator believes an impostor opened that connection: what it authenticated is what
    // a replay would have.
    w.relays[p].impostors.insert(idx);
    let (name, detail) = w
        .check_treatment()
        .expect_err("an accepted replay is caught");
    assert_eq!(name, "peer-treatment", "{detail}");
}

/// A world of `seed` (quiet) with at least one trusted link, not yet run.
fn with_trusted_link() -> (World<'static>, Scenario) {
    for seed in 0..50 {
        let sc = quiet(seed);
        let w = World::new(&sc, None);
        if w.report.trusted_links > 0 {
            return (w, sc);
        }
    }
    panic!("no quiet seed in 0..50 has a trusted link");
}

#[test]
fn a_limiter_that_serves_past_the_budget_is_caught() {
    let (mut w, _) = with_trusted_link();
    // The simulator holds the relays to one request a minute; their limiters allow ten
    // thousand. A worker's first connection alone asks more than one (the live REQ, then
    // NEG-OPEN).
    w.scenario.budget = RateLimit {
        period_secs: 60,
        rate: 1,
    };
    for r in &mut w.relays {
        r.harness.limiter = limiter(RateLimit {
            period_secs: 60,
            rate: 10_000,
        });
    }
    let (name, detail) = scenario::World::run(&mut w).expect_err("an overspent budget is caught");
    assert_eq!(name, "request-budget", "{detail}");
}

#[test]
fn a_limiter_that_serves_while_down_is_caught() {
    let (mut w, _) = with_trusted_link();
    // Every relay's limiter is down as far as the simulator knows, yet answers.
    for r in &mut w.relays {
        r.limiter_down = true;
    }
    let (name, detail) = scenario::World::run(&mut w).expect_err("serving while down is caught");
    assert_eq!(name, "fails-closed", "{detail}");
}

#[test]
fn the_same_limiters_down_for_real_serve_nothing_and_the_run_still_converges_after() {
    // The counterpart of the test above with the session's limiter really down: nothing is
    // served to a peer while it is, and the run is checked as any other.
    let (mut w, _) = with_trusted_link();
    for r in &mut w.relays {
        r.limiter_down = true;
        r.harness.limiter_down = true;
    }
    w.faults.insert(
        (START.saturating_add(Duration::from_secs(120)), 0),
        Fault::LimiterUp(0),
    );
    for r in 1..w.relays.len() {
        w.faults.insert(
            (START.saturating_add(Duration::from_secs(120)), r as u64),
            Fault::LimiterUp(r),
        );
    }
    assert_eq!(scenario::World::run(&mut w), Ok(()));
    assert!(w.report.rate_limited > 0, "{}", w.report);
    assert!(w.report.admitted > 0, "{}", w.report);
}
