//! What a relay does with an event because of its kind: NIP-01's kind ranges, NIP-09 deletion
//! requests, NIP-40 expiration on arrival and NIP-62 requests to vanish, as pure functions.
//!
//! - NIP-01 "Kinds": kinds 1, 2, 4–44 and 1000–9999 are **regular** (all stored); 0, 3 and
//!   10000–19999 are **replaceable** (only the latest per pubkey and kind is kept); 20000–29999 are
//!   **ephemeral** (not stored, only sent to live subscriptions); 30000–39999 are **addressable**
//!   (only the latest per pubkey, kind and `d` tag value). The latest is the higher `created_at`;
//!   on a tie "the event with the lowest id (first in lexical order) should be retained"
//!   ([`supersedes`]).
//! - NIP-09: a kind 5 event's `e` tags name events and its `a` tags name addresses
//!   (`<kind>:<pubkey hex>:<d>`) whose versions up to the request's `created_at` go. A relay
//!   deletes only what has the request's own pubkey ([`deletes`]); a deletion request against a
//!   deletion request has no effect.
//! - NIP-40: an event past its expiration is refused on arrival ([`refuse_on_arrival`]) and no
//!   longer served ([`crate::nostr::expiration::is_expired`], applied by the store).
//! - NIP-62: a kind 62 event deletes everything its pubkey published up to its `created_at`,
//!   deletion requests included, when a `relay` tag names this relay's URL or is `ALL_RELAYS`
//!   ([`vanish_applies`], [`vanishes`]).

use alloc::string::String;
use alloc::vec::Vec;

use super::event::{Event, EventId, parse_lower_hex};
use super::expiration::Expiration;
use crate::core::Timestamp;

/// NIP-09's deletion request kind.
pub const DELETION_KIND: u16 = 5;

/// NIP-62's request to vanish kind.
pub const VANISH_KIND: u16 = 62;

/// NIP-62: the `relay` tag value that addresses every relay (upper case, as NIP-62 requires).
pub const ALL_RELAYS: &str = "ALL_RELAYS";

/// How NIP-01 says a relay keeps events of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindClass {
    /// All are stored.
    Regular,
    /// Only the latest per pubkey and kind is stored.
    Replaceable,
    /// Not stored; sent to live subscriptions only.
    Ephemeral,
    /// Only the latest per pubkey, kind and `d` tag value is stored.
    Addressable,
}

/// The class of `kind` (NIP-01 "Kinds").
pub const fn class(kind: u16) -> KindClass {
    match kind {
        0 | 3 | 10_000..=19_999 => KindClass::Replaceable,
        20_000..=29_999 => KindClass::Ephemeral,
        30_000..=39_999 => KindClass::Addressable,
        _ => KindClass::Regular,
    }
}

/// What a replaceable or addressable event replaces under: its kind, pubkey and `d` value (empty
/// for a replaceable kind, and for an addressable event without a `d` tag, as NIP-01 reads a
/// missing `d` as the empty string).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    /// The kind.
    pub kind: u16,
    /// The author.
    pub pubkey: [u8; 32],
    /// The `d` tag's value.
    pub d: String,
}

impl Address {
    /// Reads an `a` tag value, `<kind>:<pubkey hex>:<d>` (the `d` part may hold colons). `None`
    /// when it is not one, or names a kind that is neither replaceable nor addressable.
    pub fn parse(text: &str) -> Option<Self> {
        let (kind, rest) = text.split_once(':')?;
        let (pubkey, d) = rest.split_once(':')?;
        if kind.is_empty() || kind.len() > 5 || !kind.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let kind: u16 = kind.parse().ok()?;
        let pubkey = parse_lower_hex::<32>(pubkey)?;
        match class(kind) {
            KindClass::Replaceable | KindClass::Addressable => Some(Self {
                kind,
                pubkey,
                d: String::from(d),
            }),
            _ => None,
        }
    }

    /// The `a` tag value naming this address.
    pub fn to_tag_value(&self) -> String {
        alloc::format!(
            "{}:{}:{}",
            self.kind,
            crate::codec::hex::encode(&self.pubkey),
            self.d
        )
    }
}

/// The address `event` replaces under, for a replaceable or addressable kind.
pub fn address(event: &Event) -> Option<Address> {
    let d = match class(event.kind) {
        KindClass::Replaceable => String::new(),
        KindClass::Addressable => String::from(event.tag_value("d").unwrap_or("")),
        KindClass::Regular | KindClass::Ephemeral => return None,
    };
    Some(Address {
        kind: event.kind,
        pubkey: event.pubkey,
        d,
    })
}

/// Whether `new` takes `old`'s place (both of the same address): it is newer, or as new with a
/// lower id (NIP-01). An event never supersedes itself.
pub fn supersedes(new: &Event, old: &Event) -> bool {
    (new.created_at, core::cmp::Reverse(new.id)) > (old.created_at, core::cmp::Reverse(old.id))
}

/// What a NIP-09 deletion request names: event ids (`e` tags) and addresses (`a` tags).
/// Malformed tag values are skipped, as they name nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionTargets {
    /// From `e` tags.
    pub ids: Vec<EventId>,
    /// From `a` tags.
    pub addresses: Vec<Address>,
}

/// The targets of a deletion request; `None` when `event` is not kind 5.
pub fn deletion_targets(event: &Event) -> Option<DeletionTargets> {
    if event.kind != DELETION_KIND {
        return None;
    }
    let mut targets = DeletionTargets::default();
    for tag in &event.tags {
        match (tag.first().map(String::as_str), tag.get(1)) {
            (Some("e"), Some(v)) => {
                if let Some(id) = parse_lower_hex::<32>(v) {
                    targets.ids.push(id);
                }
            }
            (Some("a"), Some(v)) => {
                if let Some(a) = Address::parse(v) {
                    targets.addresses.push(a);
                }
            }
            _ => {}
        }
    }
    Some(targets)
}

/// Whether the deletion request `deletion` deletes `target` (NIP-09): same pubkey, `target` not
/// itself a deletion request, and either named by an `e` tag or, for an `a` tag naming its
/// address, created at or before the request.
pub fn deletes(deletion: &Event, target: &Event) -> bool {
    if deletion.kind != DELETION_KIND
        || target.kind == DELETION_KIND
        || deletion.pubkey != target.pubkey
    {
        return false;
    }
    let address = address(target);
    deletion
        .tags
        .iter()
        .any(|tag| match (tag.first().map(String::as_str), tag.get(1)) {
            (Some("e"), Some(v)) => parse_lower_hex::<32>(v) == Some(target.id),
            (Some("a"), Some(v)) => {
                target.created_at <= deletion.created_at
                    && address.is_some()
                    && Address::parse(v).as_ref() == address.as_ref()
            }
            _ => false,
        })
}

/// A URL in the form two relay URLs are compared in: scheme and host lower-cased, trailing `/`s
/// dropped. NIP-62 says "if their service url is tagged" without defining equality; these are
/// the differences clients are known to introduce (recorded in `docs/decisions.md`).
pub fn normalize_relay_url(url: &str) -> String {
    // Trailing slashes and spaces go together, so normalizing twice changes nothing.
    let url = url
        .trim()
        .trim_end_matches(|c: char| c == '/' || c.is_whitespace());
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let mut out = scheme.to_ascii_lowercase();
            out.push_str("://");
            out.push_str(&authority.to_ascii_lowercase());
            out.push_str(tail);
            out
        }
        None => String::from(url),
    }
}

/// What a kind 62 event asks of this relay (NIP-62).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vanish {
    /// Not kind 62.
    NotVanish,
    /// Kind 62 without any `relay` tag: NIP-62 says the list "MUST include at least one".
    NoRelayTag,
    /// Kind 62 naming other relays only: nothing to delete here.
    OtherRelays,
    /// Kind 62 naming this relay or `ALL_RELAYS`: delete the pubkey's events up to its
    /// `created_at`.
    Applies,
}

/// What `event` asks of the relay at `own_url` under NIP-62.
pub fn vanish_applies(event: &Event, own_url: &str) -> Vanish {
    if event.kind != VANISH_KIND {
        return Vanish::NotVanish;
    }
    let own = normalize_relay_url(own_url);
    let mut any = false;
    for tag in &event.tags {
        if tag.first().map(String::as_str) != Some("relay") {
            continue;
        }
        any = true;
        if let Some(v) = tag.get(1)
            && (v == ALL_RELAYS || normalize_relay_url(v) == own)
        {
            return Vanish::Applies;
        }
    }
    if any {
        Vanish::OtherRelays
    } else {
        Vanish::NoRelayTag
    }
}

/// Whether the request to vanish `vanish` (one that [`Vanish::Applies`]) deletes `target`: same
/// pubkey, created at or before it. Deletion requests go too; the request itself is also
/// covered, so a store keeps it apart as bookkeeping (NIP-62 "MAY store the deletion request").
pub fn vanishes(vanish: &Event, target: &Event) -> bool {
    vanish.kind == VANISH_KIND
        && target.pubkey == vanish.pubkey
        && target.created_at <= vanish.created_at
}

/// Why an event is refused on arrival by its kind rules, before any store is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// NIP-40: past its expiration (or its `expiration` tag is malformed).
    Expired,
    /// NIP-62: kind 62 without a `relay` tag.
    VanishWithoutRelay,
}

/// The kind rules' refusal of `event` arriving at `now`, if any.
pub fn refuse_on_arrival(event: &Event, now: Timestamp) -> Option<Refusal> {
    if Expiration::of(event).is_past(now) {
        return Some(Refusal::Expired);
    }
    if event.kind == VANISH_KIND
        && !event
            .tags
            .iter()
            .any(|t| t.first().is_some_and(|n| n == "relay"))
    {
        return Some(Refusal::VanishWithoutRelay);
    }
    None
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::codec::hex;
    use crate::crypto::{Secp256k1Secret, default_provider, generate_secp256k1};
    use crate::nostr::event::UnsignedEvent;
    use crate::nostr::expiration;
    use alloc::string::ToString;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn key(seed: u64) -> Secp256k1Secret {
        generate_secp256k1(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
    }

    fn ev(secret: &Secp256k1Secret, kind: u16, created_at: u64, tags: Vec<Vec<String>>) -> Event {
        UnsignedEvent {
            created_at,
            kind,
            tags,
            content: String::new(),
        }
        .sign(
            default_provider(),
            secret,
            &mut ChaCha20Rng::seed_from_u64(created_at),
        )
        .unwrap()
    }

    fn t(name: &str, value: &str) -> Vec<String> {
        vec![name.to_string(), value.to_string()]
    }

    #[test]
    fn kind_ranges_follow_nip01() {
        for (kind, c) in [
            (0, KindClass::Replaceable),
            (1, KindClass::Regular),
            (2, KindClass::Regular),
            (3, KindClass::Replaceable),
            (4, KindClass::Regular),
            (5, KindClass::Regular),
            (9_999, KindClass::Regular),
            (10_000, KindClass::Replaceable),
            (19_999, KindClass::Replaceable),
            (20_000, KindClass::Ephemeral),
            (22_242, KindClass::Ephemeral),
            (29_999, KindClass::Ephemeral),
            (30_000, KindClass::Addressable),
            (39_999, KindClass::Addressable),
            (40_000, KindClass::Regular),
            (u16::MAX, KindClass::Regular),
        ] {
            assert_eq!(class(kind), c, "{kind}");
        }
    }

    #[test]
    fn a_replaceable_event_is_keyed_by_pubkey_and_kind_and_an_addressable_one_by_d_too() {
        let k = key(1);
        let r = ev(&k, 10_002, 5, vec![t("d", "ignored")]);
        let a = address(&r).unwrap();
        assert_eq!((a.kind, a.pubkey, a.d.as_str()), (10_002, r.pubkey, ""));
        let p = ev(&k, 30_023, 5, vec![t("d", "post")]);
        assert_eq!(address(&p).unwrap().d, "post");
        // A missing d tag reads as the empty string.
        assert_eq!(address(&ev(&k, 30_023, 5, vec![])).unwrap().d, "");
        assert_eq!(address(&ev(&k, 1, 5, vec![])), None);
        assert_eq!(address(&ev(&k, 20_001, 5, vec![])), None);
    }

    #[test]
    fn the_newer_event_supersedes_and_on_a_tie_the_lower_id() {
        let k = key(2);
        let old = ev(&k, 0, 10, vec![]);
        let new = ev(&k, 0, 11, vec![]);
        assert!(supersedes(&new, &old));
        assert!(!supersedes(&old, &new));
        assert!(!supersedes(&old, &old));
        let a = ev(&k, 0, 10, vec![t("x", "a")]);
        let b = ev(&k, 0, 10, vec![t("x", "b")]);
        let (low, high) = if a.id < b.id { (a, b) } else { (b, a) };
        assert!(supersedes(&low, &high));
        assert!(!supersedes(&high, &low));
    }

    #[test]
    fn an_address_parses_and_prints_round_trip() {
        let pk = hex::encode(&[0xab; 32]);
        let a = Address::parse(&alloc::format!("30023:{pk}:a:b")).unwrap();
        assert_eq!((a.kind, a.d.as_str()), (30_023, "a:b"));
        assert_eq!(Address::parse(&a.to_tag_value()), Some(a));
        assert!(Address::parse(&alloc::format!("0:{pk}:")).is_some());
        for bad in [
            alloc::format!("1:{pk}:"),
            alloc::format!("x:{pk}:"),
            alloc::format!("70000:{pk}:"),
            alloc::format!("30023:{}:", pk.to_uppercase()),
            alloc::format!("30023:{pk}"),
            "30023".to_string(),
        ] {
            assert_eq!(Address::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_deletion_request_deletes_its_authors_e_targets_only() {
        let alice = key(3);
        let bob = key(4);
        let note = ev(&alice, 1, 10, vec![]);
        let bobs = ev(&bob, 1, 10, vec![]);
        let del = ev(
            &alice,
            DELETION_KIND,
            20,
            vec![t("e", &note.id_hex()), t("e", &bobs.id_hex())],
        );
        assert!(deletes(&del, &note));
        assert!(!deletes(&del, &bobs), "by the author only");
        assert!(!deletes(&del, &ev(&alice, 1, 11, vec![])), "not named");
        // A deletion of a deletion has no effect; another kind never deletes.
        let del2 = ev(&alice, DELETION_KIND, 30, vec![t("e", &del.id_hex())]);
        assert!(!deletes(&del2, &del));
        let not_del = ev(&alice, 1, 20, vec![t("e", &note.id_hex())]);
        assert!(!deletes(&not_del, &note));
        let targets = deletion_targets(&del).unwrap();
        assert_eq!(targets.ids, vec![note.id, bobs.id]);
        assert_eq!(deletion_targets(&note), None);
    }

    #[test]
    fn an_a_deletion_deletes_versions_up_to_its_created_at() {
        let alice = key(5);
        let before = ev(&alice, 30_023, 10, vec![t("d", "post")]);
        let same = ev(&alice, 30_023, 20, vec![t("d", "post")]);
        let after = ev(&alice, 30_023, 21, vec![t("d", "post")]);
        let other_d = ev(&alice, 30_023, 10, vec![t("d", "other")]);
        let addr = address(&before).unwrap().to_tag_value();
        let del = ev(&alice, DELETION_KIND, 20, vec![t("a", &addr)]);
        assert!(deletes(&del, &before));
        assert!(deletes(&del, &same));
        assert!(!deletes(&del, &after));
        assert!(!deletes(&del, &other_d));
        // Another author's address in the a tag deletes nothing of theirs.
        let bob = key(6);
        let bobs = ev(&bob, 30_023, 10, vec![t("d", "post")]);
        let del_bob = ev(
            &alice,
            DELETION_KIND,
            20,
            vec![t("a", &address(&bobs).unwrap().to_tag_value())],
        );
        assert!(!deletes(&del_bob, &bobs));
        assert_eq!(
            deletion_targets(&del).unwrap().addresses,
            vec![address(&before).unwrap()]
        );
    }

    #[test]
    fn a_request_to_vanish_applies_to_this_relay_or_all_relays_only() {
        let k = key(7);
        let own = "wss://relay.example.com/";
        for (tags, want) in [
            (vec![t("relay", "wss://relay.example.com")], Vanish::Applies),
            (
                vec![t("relay", "WSS://Relay.Example.com/")],
                Vanish::Applies,
            ),
            (vec![t("relay", ALL_RELAYS)], Vanish::Applies),
            (vec![t("relay", "all_relays")], Vanish::OtherRelays),
            (
                vec![t("relay", "wss://other.example/"), t("relay", ALL_RELAYS)],
                Vanish::Applies,
            ),
            (
                vec![t("relay", "wss://other.example/")],
                Vanish::OtherRelays,
            ),
            (
                vec![t("relay", "wss://relay.example.com/x")],
                Vanish::OtherRelays,
            ),
            (vec![vec!["relay".to_string()]], Vanish::OtherRelays),
            (vec![t("r", ALL_RELAYS)], Vanish::NoRelayTag),
            (vec![], Vanish::NoRelayTag),
        ] {
            let e = ev(&k, VANISH_KIND, 10, tags.clone());
            assert_eq!(vanish_applies(&e, own), want, "{tags:?}");
        }
        let e = ev(&k, 1, 10, vec![t("relay", ALL_RELAYS)]);
        assert_eq!(vanish_applies(&e, own), Vanish::NotVanish);
    }

    #[test]
    fn normalizing_a_relay_url_twice_changes_nothing() {
        for url in ["//", " a / ", "WSS://A.b//", "wss://", "", "x://Y/Z/"] {
            let once = normalize_relay_url(url);
            assert_eq!(normalize_relay_url(&once), once, "{url:?}");
        }
        assert_eq!(normalize_relay_url("WSS://A.b//"), "wss://a.b");
        assert_eq!(normalize_relay_url("wss://a.b/Path/"), "wss://a.b/Path");
    }

    #[test]
    fn a_request_to_vanish_covers_its_authors_events_up_to_its_time_deletions_included() {
        let alice = key(8);
        let bob = key(9);
        let v = ev(&alice, VANISH_KIND, 20, vec![t("relay", ALL_RELAYS)]);
        assert!(vanishes(&v, &ev(&alice, 1, 20, vec![])));
        assert!(vanishes(&v, &ev(&alice, DELETION_KIND, 5, vec![])));
        assert!(vanishes(&v, &ev(&alice, 30_000, 5, vec![])));
        assert!(!vanishes(&v, &ev(&alice, 1, 21, vec![])));
        assert!(!vanishes(&v, &ev(&bob, 1, 5, vec![])));
        let not_v = ev(&alice, 1, 20, vec![t("relay", ALL_RELAYS)]);
        assert!(!vanishes(&not_v, &ev(&alice, 1, 5, vec![])));
    }

    #[test]
    fn an_expired_event_or_a_vanish_without_relay_is_refused_on_arrival() {
        let k = key(10);
        let now = Timestamp::from_secs(1_000);
        assert_eq!(
            refuse_on_arrival(&ev(&k, 1, 10, vec![expiration::tag(1_000)]), now),
            Some(Refusal::Expired)
        );
        assert_eq!(
            refuse_on_arrival(&ev(&k, 1, 10, vec![t("expiration", "soon")]), now),
            Some(Refusal::Expired)
        );
        assert_eq!(
            refuse_on_arrival(&ev(&k, 1, 10, vec![expiration::tag(1_001)]), now),
            None
        );
        assert_eq!(
            refuse_on_arrival(&ev(&k, VANISH_KIND, 10, vec![]), now),
            Some(Refusal::VanishWithoutRelay)
        );
        assert_eq!(
            refuse_on_arrival(
                &ev(&k, VANISH_KIND, 10, vec![t("relay", "wss://x.example")]),
                now
            ),
            None
        );
    }
}
