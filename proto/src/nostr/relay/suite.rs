//! The event store test suite: one function, generic over [`EventStore`], that every backend
//! runs (the in-memory reference in this crate, and the drivers' embedded and PostgreSQL stores),
//! so they all keep the same NIP-01, NIP-09, NIP-40 and NIP-62 semantics.
//!
//! Each check takes a fresh store from `make` and panics with the rule it found broken, as a
//! test assertion does. Events are signed with keys drawn from the `rng` handed in, so a seeded
//! run is the same run every time.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::store::{Cursor, EventStore, WriteOutcome};
use crate::core::Timestamp;
use crate::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use crate::nostr::event::{Event, UnsignedEvent};
use crate::nostr::expiration;
use crate::nostr::kinds::{self, ALL_RELAYS, DELETION_KIND, VANISH_KIND};
use crate::nostr::message::Filter;

/// The clock the suite runs at, in seconds; events are created before it.
pub const SUITE_NOW_SECS: u64 = 1_790_000_000;

struct Signer<'a> {
    provider: &'a dyn CryptoProvider,
    rng: &'a mut dyn rand_core::CryptoRng,
}

impl Signer<'_> {
    fn key(&mut self) -> Secp256k1Secret {
        generate_secp256k1(self.provider, self.rng)
    }

    fn event(
        &mut self,
        key: &Secp256k1Secret,
        kind: u16,
        created_at: u64,
        tags: Vec<Vec<String>>,
    ) -> Event {
        UnsignedEvent {
            created_at,
            kind,
            tags,
            content: String::from("weft"),
        }
        .sign(self.provider, key, self.rng)
        .expect("signing with a generated key")
    }
}

fn tag(name: &str, value: &str) -> Vec<String> {
    vec![name.to_string(), value.to_string()]
}

fn now() -> Timestamp {
    Timestamp::from_secs(SUITE_NOW_SECS)
}

fn all<S: EventStore>(store: &mut S, filter: &Filter) -> Vec<Event> {
    store.query(filter, None, usize::MAX, now()).expect("query")
}

fn write<S: EventStore>(store: &mut S, event: &Event) -> WriteOutcome {
    store.write(event, now()).expect("write")
}

/// Runs every check of the suite against stores made by `make` (each check gets a fresh one,
/// with room for at least 64 events).
pub fn run<S: EventStore>(
    provider: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    mut make: impl FnMut() -> S,
) {
    let mut s = Signer { provider, rng };
    written_events_are_found_once_and_duplicates_named(&mut s, make());
    queries_go_newest_first_and_pages_cover_everything_once(&mut s, make());
    every_filter_field_restricts(&mut s, make());
    replaceable_events_keep_the_latest_per_pubkey_and_kind(&mut s, make());
    addressable_events_keep_the_latest_per_d_tag(&mut s, make());
    deletion_by_e_tag_is_by_the_author_only_and_sticks(&mut s, make());
    deletion_by_a_tag_covers_versions_up_to_its_time(&mut s, make());
    expired_events_are_hidden(&mut s, make());
    a_request_to_vanish_deletes_everything_up_to_its_time(&mut s, make());
    counts_follow_queries(&mut s, make());
}

fn written_events_are_found_once_and_duplicates_named<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let k = s.key();
    let e = s.event(&k, 1, SUITE_NOW_SECS - 10, vec![]);
    assert_eq!(write(&mut store, &e), WriteOutcome::Stored);
    assert_eq!(write(&mut store, &e), WriteOutcome::Duplicate);
    assert_eq!(all(&mut store, &Filter::default()), vec![e]);
    let ephemeral = s.event(&k, 20_001, SUITE_NOW_SECS, vec![]);
    assert!(
        store.write(&ephemeral, now()).is_err(),
        "an ephemeral event is never stored"
    );
    assert_eq!(all(&mut store, &Filter::default()).len(), 1);
}

fn queries_go_newest_first_and_pages_cover_everything_once<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let k = s.key();
    let mut written = Vec::new();
    for i in 0..12u64 {
        // Pairs share a created_at, so ties are ordered by id.
        let e = s.event(
            &k,
            1,
            SUITE_NOW_SECS - 100 + i / 2,
            vec![tag("n", &i.to_string())],
        );
        assert_eq!(write(&mut store, &e), WriteOutcome::Stored);
        written.push(e);
    }
    written.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    assert_eq!(
        all(&mut store, &Filter::default()),
        written,
        "newest first, then id"
    );
    let mut paged = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store
            .query(&Filter::default(), after.as_ref(), 5, now())
            .expect("query");
        assert!(page.len() <= 5);
        after = page.last().map(Cursor::at);
        let done = page.len() < 5;
        paged.extend(page);
        if done {
            break;
        }
    }
    assert_eq!(paged, written, "pages cover every event once, in order");
}

fn every_filter_field_restricts<S: EventStore>(s: &mut Signer<'_>, mut store: S) {
    let alice = s.key();
    let bob = s.key();
    let a1 = s.event(&alice, 1, SUITE_NOW_SECS - 30, vec![tag("t", "x")]);
    let a7 = s.event(
        &alice,
        7,
        SUITE_NOW_SECS - 20,
        vec![tag("e", &"ab".repeat(32))],
    );
    let b1 = s.event(&bob, 1, SUITE_NOW_SECS - 10, vec![tag("t", "y")]);
    for e in [&a1, &a7, &b1] {
        assert_eq!(write(&mut store, e), WriteOutcome::Stored);
    }
    let ids = |events: Vec<Event>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let cases: [(Filter, Vec<_>); 7] = [
        (
            Filter {
                ids: Some(vec![a7.id]),
                ..Filter::default()
            },
            vec![a7.id],
        ),
        (
            Filter {
                authors: Some(vec![a1.pubkey]),
                ..Filter::default()
            },
            vec![a7.id, a1.id],
        ),
        (
            Filter {
                kinds: Some(vec![1]),
                ..Filter::default()
            },
            vec![b1.id, a1.id],
        ),
        (
            Filter {
                tags: [('t', vec!["y".to_string(), "z".to_string()])].into(),
                ..Filter::default()
            },
            vec![b1.id],
        ),
        (
            Filter {
                since: Some(SUITE_NOW_SECS - 20),
                ..Filter::default()
            },
            vec![b1.id, a7.id],
        ),
        (
            Filter {
                until: Some(SUITE_NOW_SECS - 20),
                ..Filter::default()
            },
            vec![a7.id, a1.id],
        ),
        (
            Filter {
                authors: Some(vec![a1.pubkey]),
                kinds: Some(vec![1]),
                ..Filter::default()
            },
            vec![a1.id],
        ),
    ];
    for (filter, want) in cases {
        assert_eq!(ids(all(&mut store, &filter)), want, "{filter:?}");
    }
}

fn replaceable_events_keep_the_latest_per_pubkey_and_kind<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let k = s.key();
    let t = SUITE_NOW_SECS - 100;
    let old = s.event(&k, 0, t, vec![]);
    let new = s.event(&k, 0, t + 1, vec![]);
    let other_kind = s.event(&k, 10_002, t, vec![]);
    assert_eq!(write(&mut store, &old), WriteOutcome::Stored);
    assert_eq!(write(&mut store, &other_kind), WriteOutcome::Stored);
    assert_eq!(write(&mut store, &new), WriteOutcome::Stored);
    assert_eq!(write(&mut store, &old), WriteOutcome::Superseded);
    let kind0 = Filter {
        kinds: Some(vec![0]),
        ..Filter::default()
    };
    assert_eq!(all(&mut store, &kind0), vec![new.clone()]);
    // On a tie the lower id stays, whichever arrives first.
    let a = s.event(&k, 0, t + 1, vec![tag("x", "a")]);
    let (low, high) = if a.id < new.id { (a, new) } else { (new, a) };
    let first = write(&mut store, &high);
    assert!(
        matches!(
            first,
            WriteOutcome::Stored | WriteOutcome::Duplicate | WriteOutcome::Superseded
        ),
        "{first:?}"
    );
    let _ = write(&mut store, &low);
    assert_eq!(all(&mut store, &kind0), vec![low.clone()]);
    assert_eq!(write(&mut store, &high), WriteOutcome::Superseded);
    assert_eq!(all(&mut store, &Filter::default()).len(), 2);
}

fn addressable_events_keep_the_latest_per_d_tag<S: EventStore>(s: &mut Signer<'_>, mut store: S) {
    let k = s.key();
    let t = SUITE_NOW_SECS - 100;
    let a_old = s.event(&k, 30_023, t, vec![tag("d", "a")]);
    let a_new = s.event(&k, 30_023, t + 5, vec![tag("d", "a")]);
    let b = s.event(&k, 30_023, t, vec![tag("d", "b")]);
    let no_d = s.event(&k, 30_023, t, vec![]);
    let empty_d = s.event(&k, 30_023, t + 1, vec![tag("d", "")]);
    for e in [&a_old, &b, &a_new, &no_d, &empty_d] {
        assert_eq!(write(&mut store, e), WriteOutcome::Stored, "{e:?}");
    }
    assert_eq!(write(&mut store, &a_old), WriteOutcome::Superseded);
    let mut got: Vec<_> = all(&mut store, &Filter::default())
        .into_iter()
        .map(|e| e.id)
        .collect();
    got.sort();
    let mut want = vec![a_new.id, b.id, empty_d.id];
    want.sort();
    assert_eq!(got, want, "a missing d is the empty d");
}

fn deletion_by_e_tag_is_by_the_author_only_and_sticks<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let alice = s.key();
    let bob = s.key();
    let t = SUITE_NOW_SECS - 100;
    let mine = s.event(&alice, 1, t, vec![]);
    let theirs = s.event(&bob, 1, t, vec![]);
    let later = s.event(&alice, 1, t + 1, vec![]);
    for e in [&mine, &theirs] {
        assert_eq!(write(&mut store, e), WriteOutcome::Stored);
    }
    let del = s.event(
        &alice,
        DELETION_KIND,
        t + 2,
        vec![
            tag("e", &mine.id_hex()),
            tag("e", &theirs.id_hex()),
            tag("e", &later.id_hex()),
        ],
    );
    assert_eq!(write(&mut store, &del), WriteOutcome::Stored);
    let ids: Vec<_> = all(&mut store, &Filter::default())
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(!ids.contains(&mine.id), "the author's event is deleted");
    assert!(ids.contains(&theirs.id), "another author's is not");
    assert!(ids.contains(&del.id), "the deletion request is served");
    assert_eq!(
        write(&mut store, &mine),
        WriteOutcome::Deleted,
        "it stays deleted"
    );
    assert_eq!(
        write(&mut store, &later),
        WriteOutcome::Deleted,
        "even arriving after"
    );
    // A deletion request against a deletion request has no effect.
    let undo = s.event(&alice, DELETION_KIND, t + 3, vec![tag("e", &del.id_hex())]);
    assert_eq!(write(&mut store, &undo), WriteOutcome::Stored);
    assert!(
        all(&mut store, &Filter::default())
            .iter()
            .any(|e| e.id == del.id)
    );
}

fn deletion_by_a_tag_covers_versions_up_to_its_time<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let alice = s.key();
    let t = SUITE_NOW_SECS - 100;
    let v1 = s.event(&alice, 30_023, t, vec![tag("d", "post")]);
    let other = s.event(&alice, 30_023, t, vec![tag("d", "other")]);
    for e in [&v1, &other] {
        assert_eq!(write(&mut store, e), WriteOutcome::Stored);
    }
    let address = kinds::address(&v1).expect("addressable").to_tag_value();
    let del = s.event(&alice, DELETION_KIND, t + 10, vec![tag("a", &address)]);
    assert_eq!(write(&mut store, &del), WriteOutcome::Stored);
    let ids: Vec<_> = all(&mut store, &Filter::default())
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(!ids.contains(&v1.id) && ids.contains(&other.id));
    let v2 = s.event(&alice, 30_023, t + 10, vec![tag("d", "post")]);
    assert_eq!(
        write(&mut store, &v2),
        WriteOutcome::Deleted,
        "up to its time"
    );
    let v3 = s.event(&alice, 30_023, t + 11, vec![tag("d", "post")]);
    assert_eq!(
        write(&mut store, &v3),
        WriteOutcome::Stored,
        "newer ones live"
    );
}

fn expired_events_are_hidden<S: EventStore>(s: &mut Signer<'_>, mut store: S) {
    let k = s.key();
    let e = s.event(
        &k,
        1,
        SUITE_NOW_SECS - 10,
        vec![expiration::tag(SUITE_NOW_SECS + 60)],
    );
    assert_eq!(write(&mut store, &e), WriteOutcome::Stored);
    let before = now();
    let after = Timestamp::from_secs(SUITE_NOW_SECS + 60);
    let f = Filter::default();
    assert_eq!(store.query(&f, None, 10, before).expect("query").len(), 1);
    assert_eq!(store.query(&f, None, 10, after).expect("query").len(), 0);
    assert_eq!(
        store
            .count(core::slice::from_ref(&f), before)
            .expect("count"),
        1
    );
    assert_eq!(
        store
            .count(core::slice::from_ref(&f), after)
            .expect("count"),
        0
    );
    // A hidden event takes no place in a page: the page is filled with visible ones.
    for i in 0..2 {
        let older = s.event(&k, 1, SUITE_NOW_SECS - 20 - i, vec![]);
        assert_eq!(write(&mut store, &older), WriteOutcome::Stored);
    }
    assert_eq!(store.query(&f, None, 2, after).expect("query").len(), 2);
}

fn a_request_to_vanish_deletes_everything_up_to_its_time<S: EventStore>(
    s: &mut Signer<'_>,
    mut store: S,
) {
    let alice = s.key();
    let bob = s.key();
    let t = SUITE_NOW_SECS - 100;
    let note = s.event(&alice, 1, t, vec![]);
    let profile = s.event(&alice, 0, t, vec![]);
    let del = s.event(
        &alice,
        DELETION_KIND,
        t + 1,
        vec![tag("e", &"00".repeat(32))],
    );
    let bobs = s.event(&bob, 1, t, vec![]);
    for e in [&note, &profile, &del, &bobs] {
        assert_eq!(write(&mut store, e), WriteOutcome::Stored);
    }
    let vanish = s.event(&alice, VANISH_KIND, t + 5, vec![tag("relay", ALL_RELAYS)]);
    assert_eq!(store.vanish(&vanish).expect("vanish"), 3);
    assert_eq!(all(&mut store, &Filter::default()), vec![bobs]);
    let old = s.event(&alice, 1, t + 5, vec![]);
    assert_eq!(
        write(&mut store, &old),
        WriteOutcome::Vanished,
        "not re-broadcast"
    );
    let newer = s.event(&alice, 1, t + 6, vec![]);
    assert_eq!(write(&mut store, &newer), WriteOutcome::Stored);
}

fn counts_follow_queries<S: EventStore>(s: &mut Signer<'_>, mut store: S) {
    let k = s.key();
    for i in 0..5 {
        let e = s.event(&k, 1 + (i % 2) as u16, SUITE_NOW_SECS - 10 - i, vec![]);
        assert_eq!(write(&mut store, &e), WriteOutcome::Stored);
    }
    let kind = |k| Filter {
        kinds: Some(vec![k]),
        ..Filter::default()
    };
    assert_eq!(store.count(&[kind(1)], now()).expect("count"), 3);
    assert_eq!(store.count(&[kind(2)], now()).expect("count"), 2);
    // An event matching two filters counts once.
    assert_eq!(
        store
            .count(&[kind(1), kind(2), Filter::default()], now())
            .expect("count"),
        5
    );
    assert_eq!(store.count(&[kind(3)], now()).expect("count"), 0);
}
