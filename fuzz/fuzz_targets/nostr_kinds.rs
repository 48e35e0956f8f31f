//! The Nostr kind rules (`nostr::kinds`) on arbitrary events, and the memory store that applies
//! them: never a panic; `supersedes` is a strict order (irreflexive, asymmetric); an address
//! prints to an `a` value that reads back the same; URL normalization is idempotent; a deletion
//! never deletes another author's event or a deletion; and after any sequence of writes the store
//! holds at most one event per address and no event a stored deletion request covers.
#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weft_proto::core::Timestamp;
use weft_proto::nostr::event::Event;
use weft_proto::nostr::kinds::{self, Address, DELETION_KIND};
use weft_proto::nostr::message::Filter;
use weft_proto::nostr::relay::{EventStore, MemoryStore};

#[derive(Arbitrary, Debug)]
struct Raw {
    id: u8,
    author: u8,
    kind: u16,
    created_at: u8,
    tags: Vec<(u8, String)>,
}

const NAMES: [&str; 6] = ["e", "a", "d", "relay", "expiration", "k"];

fn event(raw: &Raw, all: &[Event]) -> Event {
    let mut tags = Vec::new();
    for (n, value) in raw.tags.iter().take(6) {
        let name = NAMES[usize::from(*n) % NAMES.len()];
        // Point e and a tags at earlier events half the time, so deletions hit something.
        let value = match (
            name,
            all.get(usize::from(*n) / NAMES.len() % all.len().max(1)),
        ) {
            ("e", Some(t)) if n & 1 == 0 => t.id_hex(),
            ("a", Some(t)) if n & 1 == 0 => {
                kinds::address(t).map_or_else(|| value.clone(), |a| a.to_tag_value())
            }
            _ => value.clone(),
        };
        tags.push(vec![name.to_string(), value]);
    }
    let kind = match raw.kind % 8 {
        0 => DELETION_KIND,
        1 => 0,
        2 => 30_000 + raw.kind % 3,
        3 => 20_000,
        4 => 62,
        _ => raw.kind,
    };
    Event {
        id: [raw.id; 32],
        pubkey: [raw.author % 3; 32],
        created_at: u64::from(raw.created_at),
        kind,
        tags,
        content: String::new(),
        sig: [0; 64],
    }
}

fuzz_target!(|input: (Vec<Raw>, String)| {
    let (raws, url) = input;
    let n = kinds::normalize_relay_url(&url);
    assert_eq!(kinds::normalize_relay_url(&n), n);
    if let Some(a) = Address::parse(&url) {
        assert_eq!(Address::parse(&a.to_tag_value()), Some(a));
    }
    let mut all: Vec<Event> = Vec::new();
    let mut store = MemoryStore::new(32);
    let now = Timestamp::from_secs(100);
    for raw in raws.iter().take(32) {
        let e = event(raw, &all);
        let _ = kinds::class(e.kind);
        let _ = kinds::deletion_targets(&e);
        let _ = kinds::vanish_applies(&e, &url);
        let _ = kinds::refuse_on_arrival(&e, now);
        if let Some(a) = kinds::address(&e) {
            assert_eq!(Address::parse(&a.to_tag_value()), Some(a));
        }
        assert!(!kinds::supersedes(&e, &e));
        for other in &all {
            assert!(!(kinds::supersedes(&e, other) && kinds::supersedes(other, &e)));
            if kinds::deletes(&e, other) {
                assert_eq!(e.pubkey, other.pubkey);
                assert_ne!(other.kind, DELETION_KIND);
            }
        }
        if kinds::class(e.kind) != kinds::KindClass::Ephemeral {
            let _ = store.write(&e, now);
        }
        all.push(e);
    }
    let held = store
        .query(&Filter::default(), None, usize::MAX, Timestamp::ZERO)
        .unwrap();
    let mut addresses = BTreeSet::new();
    for e in &held {
        if let Some(a) = kinds::address(e) {
            assert!(addresses.insert(a), "two events at one address");
        }
        for d in held.iter().filter(|d| d.kind == DELETION_KIND) {
            assert!(!kinds::deletes(d, e), "a deleted event is still held");
        }
    }
});
