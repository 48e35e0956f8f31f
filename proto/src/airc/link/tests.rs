//! Tests for links (§11), one rule each; the decision cases are §18.4's shape ("records between
//! X and Y, newest first, and the expected decision for X → Y"), built from §11.3.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};

use super::*;
use crate::airc::frame::Msg;

/// A source that always gives the same bytes, to pin an id.
struct Fixed([u8; 4]);
impl rand_core::TryRng for Fixed {
    type Error = rand_core::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(u32::from_be_bytes(self.0))
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(u64::from(u32::from_be_bytes(self.0)))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for (d, s) in dst.iter_mut().zip(self.0.iter().cycle()) {
            *d = *s;
        }
        Ok(())
    }
}
impl rand_core::TryCryptoRng for Fixed {}

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}
fn local(path: &str) -> Address {
    addr(&alloc::format!("airc://example.com/{path}"))
}
fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}
const NOW: u64 = 1_790_380_000;

fn table() -> LinkTable {
    LinkTable::new(
        Authority::parse("example.com").unwrap(),
        LinkConfig::default(),
    )
}
fn rng() -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(11)
}
fn offer_of(a: &str, b: &str) -> Offer {
    Offer {
        acting: local(a),
        peer: local(b),
        direction: Direction::Both,
        label: None,
        expires: None,
    }
}

/// A record built directly, for decision cases.
fn rec(id: &str, a: &str, b: &str, dir: Direction, state: LinkState, created: u64) -> Link {
    Link {
        id: id.into(),
        a: addr(a),
        b: addr(b),
        direction: dir,
        label: None,
        created: t(created),
        expires: None,
        state,
        offered_by: addr(a),
        origin: None,
        accepted_at: None,
        declined_at: None,
        revoked_at: None,
        revoked_by: None,
    }
}

// ---- §11.1 the record ----

#[test]
fn record_reads_and_writes_the_json_form_of_11_1() {
    let text = r#"{"id":"L7f3a9c1e","a":"airc://example.com/alice/x","b":"airc://partner.example/support/desk",
        "direction":"both","label":"vendor","created":1790380000.1,"expires":1792972000.1,
        "state":"active","offered_by":"airc://example.com/alice/x",
        "origin":{"passport":"P3f9a1c2e","issued_by":"airc://example.com/alice/x","redeemed_by":"airc://partner.example/support/desk"},
        "accepted_at":1790380001.5,"unknown_field":7}"#;
    let link: Link = serde_json::from_str(text).unwrap();
    assert_eq!(link.id, "L7f3a9c1e");
    assert_eq!(link.created, Timestamp::from_millis(1_790_380_000_100));
    assert_eq!(
        link.expires,
        Some(Timestamp::from_millis(1_792_972_000_100))
    );
    assert_eq!(link.state, LinkState::Active);
    assert_eq!(link.origin.as_ref().unwrap().passport, "P3f9a1c2e");
    let out = serde_json::to_value(&link).unwrap();
    assert_eq!(out["created"], json!(1790380000.1));
    assert_eq!(out["expires"], json!(1792972000.1));
    assert_eq!(out["b"], json!("airc://partner.example/support/desk"));
    assert_eq!(out["direction"], json!("both"));
    assert!(out.get("unknown_field").is_none());
    let back: Link = serde_json::from_value(out).unwrap();
    assert_eq!(back, link);
}

#[test]
fn record_expires_null_is_written_as_null() {
    let l = rec(
        "L00000001",
        "airc://r/a/x",
        "airc://r/b/y",
        Direction::Both,
        LinkState::Pending,
        1,
    );
    let v = serde_json::to_value(&l).unwrap();
    assert_eq!(v["expires"], Value::Null);
    assert!(v.get("revoked_by").is_none());
}

#[test]
fn record_id_is_l_and_8_lower_case_hex() {
    assert!(is_link_id("L1a2b3c4d"));
    for bad in [
        "L1A2B3C4D",
        "l1a2b3c4d",
        "L1a2b3c4",
        "L1a2b3c4d5",
        "P1a2b3c4d",
        "L1a2b3c4g",
        "",
        "Lé1a2b3c4",
    ] {
        assert!(!is_link_id(bad), "{bad}");
    }
}

#[test]
fn record_validation_refuses_what_11_1_forbids() {
    let good = json!({"id":"L00000001","a":"airc://r/a/x","b":"airc://r/b/","direction":"both",
        "created":1.0,"state":"pending","offered_by":"airc://r/a/x"});
    assert!(
        Link::from_value(&good).is_ok(),
        "b may be a namespace reference"
    );
    let cases: Vec<(&str, Value, RecordError)> = vec![
        ("id", json!("L0000000Z"), RecordError::BadId),
        ("a", json!("airc://r/a/"), RecordError::NamespaceA),
        ("a", json!("not an address"), RecordError::BadAddress("a")),
        ("a", json!("airc://r/a/x#2"), RecordError::BadAddress("a")),
        ("b", json!("airc://r/a/x"), RecordError::SelfLink),
        (
            "offered_by",
            json!("airc://r/c/z"),
            RecordError::OfferedByStranger,
        ),
        ("created", json!(-1.0), RecordError::BadTime("created")),
        (
            "label",
            json!("x".repeat(MAX_LABEL_BYTES + 1)),
            RecordError::LabelTooLong,
        ),
    ];
    for (field, value, want) in cases {
        let mut v = good.clone();
        v[field] = value;
        assert_eq!(Link::from_value(&v), Err(want), "{field}");
    }
    for (field, value) in [
        ("direction", json!("sideways")),
        ("state", json!("open")),
        ("created", json!("x")),
    ] {
        let mut v = good.clone();
        v[field] = value;
        assert!(
            matches!(Link::from_value(&v), Err(RecordError::Shape(_))),
            "{field}"
        );
    }
    assert!(matches!(
        Link::from_value(&json!([1, 2])),
        Err(RecordError::Shape(_))
    ));
}

#[test]
fn state_order_is_forward_only() {
    use LinkState::*;
    let all = [Pending, Active, Declined, Revoked];
    let allowed = [
        (Pending, Pending),
        (Pending, Active),
        (Pending, Declined),
        (Pending, Revoked),
        (Active, Active),
        (Active, Revoked),
        (Declined, Declined),
        (Declined, Revoked),
        (Revoked, Revoked),
    ];
    for from in all {
        for to in all {
            assert_eq!(
                from.can_become(to),
                allowed.contains(&(from, to)),
                "{from} -> {to}"
            );
        }
    }
}

#[test]
fn merge_never_moves_a_state_backwards() {
    let base = rec(
        "L00000001",
        "airc://r/a/x",
        "airc://r/b/y",
        Direction::Both,
        LinkState::Pending,
        1,
    );
    let with = |s: LinkState| Link {
        state: s,
        ..base.clone()
    };
    let mut l = with(LinkState::Revoked);
    assert_eq!(l.merge(&with(LinkState::Active)), Merge::Unchanged);
    assert_eq!(l.merge(&with(LinkState::Pending)), Merge::Unchanged);
    assert_eq!(l.state, LinkState::Revoked);
    let mut l = with(LinkState::Active);
    assert_eq!(l.merge(&with(LinkState::Declined)), Merge::Unchanged);
    assert_eq!(l.merge(&with(LinkState::Pending)), Merge::Unchanged);
    assert_eq!(l.state, LinkState::Active);
    let mut l = with(LinkState::Pending);
    let mut accepted = with(LinkState::Active);
    accepted.accepted_at = Some(t(5));
    assert_eq!(l.merge(&accepted), Merge::Advanced);
    assert_eq!((l.state, l.accepted_at), (LinkState::Active, Some(t(5))));
}

#[test]
fn merge_keeps_the_identity_fields_first_stored() {
    let mut l = rec(
        "L00000001",
        "airc://r/a/x",
        "airc://r/b/y",
        Direction::AInitiates,
        LinkState::Pending,
        1,
    );
    let mut wider = l.clone();
    wider.state = LinkState::Active;
    wider.direction = Direction::Both;
    wider.expires = Some(t(99));
    wider.label = Some("other".into());
    assert_eq!(l.merge(&wider), Merge::Advanced);
    assert_eq!(l.direction, Direction::AInitiates);
    assert_eq!(l.expires, None);
    assert_eq!(l.label, None);
}

// ---- §11.2 operations ----

#[test]
fn offer_creates_a_pending_link_with_an_id_from_the_injected_rng() {
    let mut tab = table();
    let mut o = offer_of("alice/x", "bob/y");
    o.label = Some("q4".into());
    let op = tab
        .offer(t(NOW), &mut Fixed([0x1a, 0x2b, 0x3c, 0x4d]), o)
        .unwrap();
    assert_eq!(op.link.id, "L1a2b3c4d");
    assert_eq!(op.link.state, LinkState::Pending);
    assert_eq!(op.link.offered_by, local("alice/x"));
    assert_eq!(
        (op.link.a.clone(), op.link.b.clone()),
        (local("alice/x"), local("bob/y"))
    );
    assert_eq!(op.control.action, Action::Offer);
    assert_eq!(
        (op.control.from.clone(), op.control.to.clone()),
        (local("alice/x"), local("bob/y"))
    );
    assert_eq!(tab.get("L1a2b3c4d"), Some(&op.link));
}

#[test]
fn offer_ids_never_collide_with_a_stored_id() {
    let mut tab = table();
    tab.offer(
        t(NOW),
        &mut Fixed([1, 2, 3, 4]),
        offer_of("alice/x", "bob/y"),
    )
    .unwrap();
    assert_eq!(
        tab.offer(
            t(NOW),
            &mut Fixed([1, 2, 3, 4]),
            offer_of("alice/x", "bob/z")
        ),
        Err(LinkRefusal::NoFreeId)
    );
}

#[test]
fn offer_requires_an_endpoint_offering_to_someone_else() {
    let mut tab = table();
    let mut r = rng();
    let mut ns = offer_of("alice/x", "bob/y");
    ns.acting = local("alice/");
    assert_eq!(
        tab.offer(t(NOW), &mut r, ns),
        Err(LinkRefusal::NotAnEndpoint)
    );
    assert_eq!(
        tab.offer(t(NOW), &mut r, offer_of("alice/x", "alice/x")),
        Err(LinkRefusal::SelfLink)
    );
    assert_eq!(
        tab.offer(t(NOW), &mut r, offer_of("alice/x", "alice/")),
        Err(LinkRefusal::SelfLink)
    );
    assert!(
        tab.offer(t(NOW), &mut r, offer_of("alice/x", "bob/"))
            .is_ok(),
        "b may be a namespace"
    );
}

#[test]
fn offer_refuses_an_expiry_not_in_the_future_and_a_long_label() {
    let mut tab = table();
    let mut o = offer_of("alice/x", "bob/y");
    o.expires = Some(t(NOW));
    assert_eq!(
        tab.offer(t(NOW), &mut rng(), o),
        Err(LinkRefusal::ExpiresInPast)
    );
    let mut o = offer_of("alice/x", "bob/y");
    o.label = Some("x".repeat(MAX_LABEL_BYTES + 1));
    assert_eq!(
        tab.offer(t(NOW), &mut rng(), o),
        Err(LinkRefusal::LabelTooLong)
    );
}

#[test]
fn offer_to_a_local_endpoint_is_refused_when_the_realm_accepts_no_offers() {
    let mut tab = LinkTable::new(
        Authority::parse("example.com").unwrap(),
        LinkConfig {
            accept_offers: false,
            auto_accept: Vec::new(),
        },
    );
    assert_eq!(
        tab.offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/y")),
        Err(LinkRefusal::OffersRefused)
    );
    let mut remote = offer_of("alice/x", "bob/y");
    remote.peer = addr("airc://partner.example/support/desk");
    assert!(tab.offer(t(NOW), &mut rng(), remote).is_ok());
}

#[test]
fn pending_offers_are_capped_at_20_per_offerer() {
    let mut tab = table();
    let mut r = rng();
    // Spread over time so the rate limit never bites.
    for i in 0..MAX_PENDING_OFFERS as u64 {
        tab.offer(
            t(NOW + 10 * i),
            &mut r,
            offer_of("alice/x", &alloc::format!("bob/y{i}")),
        )
        .unwrap();
    }
    let later = t(NOW + 1000);
    assert_eq!(
        tab.offer(later, &mut r, offer_of("alice/x", "bob/z")),
        Err(LinkRefusal::TooManyPending)
    );
    assert!(
        tab.offer(later, &mut r, offer_of("alice/w", "bob/z"))
            .is_ok(),
        "per offerer"
    );
    // An answered offer no longer counts.
    let first = tab.list(&local("bob/y0"))[0].id.clone();
    tab.accept(later, &local("bob/y0"), &first).unwrap();
    assert!(
        tab.offer(later, &mut r, offer_of("alice/x", "bob/z"))
            .is_ok()
    );
}

#[test]
fn expired_pending_offers_do_not_count_toward_the_cap() {
    let mut tab = table();
    let mut r = rng();
    for i in 0..MAX_PENDING_OFFERS as u64 {
        let mut o = offer_of("alice/x", &alloc::format!("bob/y{i}"));
        o.expires = Some(t(NOW + 500));
        tab.offer(t(NOW + 10 * i), &mut r, o).unwrap();
    }
    assert!(
        tab.offer(t(NOW + 501), &mut r, offer_of("alice/x", "bob/z"))
            .is_ok()
    );
}

#[test]
fn offers_are_rate_limited_per_source() {
    let mut tab = table();
    let mut r = rng();
    // Ten endpoints of one namespace share the source, so the cap per offerer never bites.
    for i in 0..OFFER_RATE.burst {
        tab.offer(
            t(NOW),
            &mut r,
            offer_of(&alloc::format!("alice/x{i}"), "bob/y"),
        )
        .unwrap();
    }
    assert_eq!(
        tab.offer(t(NOW), &mut r, offer_of("alice/w", "bob/y")),
        Err(LinkRefusal::RateLimited)
    );
    assert!(
        tab.offer(t(NOW), &mut r, offer_of("carol/w", "bob/y"))
            .is_ok(),
        "another source"
    );
    assert!(
        tab.offer(t(NOW + 1), &mut r, offer_of("alice/w", "bob/y"))
            .is_ok(),
        "refilled"
    );
}

#[test]
fn accept_only_by_the_offeree_and_only_while_pending() {
    let mut tab = table();
    let id = tab
        .offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/y"))
        .unwrap()
        .link
        .id;
    assert!(matches!(
        tab.accept(t(NOW), &local("alice/x"), &id),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    assert!(matches!(
        tab.accept(t(NOW), &local("carol/z"), &id),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    let op = tab.accept(t(NOW + 1), &local("bob/y"), &id).unwrap();
    assert_eq!(op.link.state, LinkState::Active);
    assert_eq!(op.link.accepted_at, Some(t(NOW + 1)));
    assert_eq!(
        (
            op.control.action,
            op.control.from.clone(),
            op.control.to.clone()
        ),
        (Action::Accept, local("bob/y"), local("alice/x"))
    );
    assert_eq!(
        tab.accept(t(NOW), &local("bob/y"), &id),
        Err(LinkRefusal::WrongState {
            id: id.clone(),
            state: LinkState::Active
        })
    );
    assert_eq!(
        tab.accept(t(NOW), &local("bob/y"), "L00000000"),
        Err(LinkRefusal::Unknown("L00000000".into()))
    );
}

#[test]
fn accept_of_an_expired_offer_is_refused() {
    let mut tab = table();
    let mut o = offer_of("alice/x", "bob/y");
    o.expires = Some(t(NOW + 5));
    let id = tab.offer(t(NOW), &mut rng(), o).unwrap().link.id;
    assert_eq!(
        tab.accept(t(NOW + 6), &local("bob/y"), &id),
        Err(LinkRefusal::Expired(id))
    );
}

#[test]
fn an_endpoint_beneath_a_namespace_b_answers_for_it() {
    let mut tab = table();
    let id = tab
        .offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/"))
        .unwrap()
        .link
        .id;
    let op = tab.accept(t(NOW), &local("bob/y"), &id).unwrap();
    assert_eq!(op.link.b, local("bob/"), "the record keeps the namespace");
    assert_eq!(op.control.from, local("bob/y"));
}

#[test]
fn decline_only_by_the_offeree_and_it_is_final() {
    let mut tab = table();
    let id = tab
        .offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/y"))
        .unwrap()
        .link
        .id;
    assert!(matches!(
        tab.decline(t(NOW), &local("alice/x"), &id),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    let op = tab.decline(t(NOW + 2), &local("bob/y"), &id).unwrap();
    assert_eq!(
        (op.link.state, op.link.declined_at),
        (LinkState::Declined, Some(t(NOW + 2)))
    );
    assert!(matches!(
        tab.accept(t(NOW), &local("bob/y"), &id),
        Err(LinkRefusal::WrongState { .. })
    ));
}

#[test]
fn revoke_by_either_party_from_any_state_once() {
    for (state_by, revoker) in [
        (None, "alice/x"),
        (None, "bob/y"),
        (Some("accept"), "alice/x"),
        (Some("decline"), "bob/y"),
    ] {
        let mut tab = table();
        let id = tab
            .offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/y"))
            .unwrap()
            .link
            .id;
        match state_by {
            Some("accept") => drop(tab.accept(t(NOW), &local("bob/y"), &id).unwrap()),
            Some(_) => drop(tab.decline(t(NOW), &local("bob/y"), &id).unwrap()),
            None => {}
        }
        let op = tab.revoke(t(NOW + 3), &local(revoker), &id).unwrap();
        assert_eq!(op.link.state, LinkState::Revoked);
        assert_eq!(op.link.revoked_by, Some(local(revoker)));
        assert_eq!(op.link.revoked_at, Some(t(NOW + 3)));
        assert_eq!(op.control.from, local(revoker));
        assert!(matches!(
            tab.revoke(t(NOW), &local(revoker), &id),
            Err(LinkRefusal::WrongState { .. })
        ));
    }
    let mut tab = table();
    let id = tab
        .offer(t(NOW), &mut rng(), offer_of("alice/x", "bob/y"))
        .unwrap()
        .link
        .id;
    assert!(matches!(
        tab.revoke(t(NOW), &local("carol/z"), &id),
        Err(LinkRefusal::NotAllowed { .. })
    ));
}

#[test]
fn grant_creates_an_active_link_offered_by_a_with_its_origin() {
    let mut tab = table();
    let origin = LinkOrigin {
        passport: "P9e8d7c6b".into(),
        issued_by: Some("airc://example.com/alice/x".into()),
        redeemed_by: Some("airc://partner.example/support/desk".into()),
    };
    let op = tab
        .grant(
            t(NOW),
            &mut rng(),
            Grant {
                a: local("alice/x"),
                b: addr("airc://partner.example/support/desk"),
                direction: Direction::Both,
                label: Some("vendor".into()),
                expires: Some(t(NOW + 2_592_000)),
                origin: Some(origin.clone()),
            },
        )
        .unwrap();
    assert_eq!(op.link.state, LinkState::Active);
    assert_eq!(op.link.offered_by, local("alice/x"));
    assert_eq!(op.link.origin, Some(origin));
    assert_eq!(op.control.action, Action::Grant);
    assert_eq!(op.control.to, addr("airc://partner.example/support/desk"));
}

#[test]
fn list_gives_an_endpoints_links_newest_first_and_all_to_an_administrator() {
    let mut tab = table();
    let mut r = rng();
    let l1 = tab
        .offer(t(NOW), &mut r, offer_of("alice/x", "bob/y"))
        .unwrap()
        .link
        .id;
    let l2 = tab
        .offer(t(NOW + 1), &mut r, offer_of("carol/z", "bob/"))
        .unwrap()
        .link
        .id;
    let l3 = tab
        .offer(t(NOW + 2), &mut r, offer_of("carol/z", "dave/w"))
        .unwrap()
        .link
        .id;
    let ids = |v: Vec<&Link>| v.into_iter().map(|l| l.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(tab.list(&local("bob/y"))), vec![l2.clone(), l1.clone()]);
    assert_eq!(ids(tab.list(&local("alice/x"))), vec![l1.clone()]);
    assert_eq!(ids(tab.list_all()), vec![l3, l2, l1]);
}

// ---- §11.3 the decision (§18.4's cases) ----

const X: &str = "airc://example.com/alice/x";
const Y: &str = "airc://partner.example/support/desk";

/// Decides X → Y over `records` with the reply window answering `replied`.
fn decide_xy(records: &[Link], replied: bool) -> (Option<bool>, LinkDecision) {
    let mut tab = table();
    for r in records {
        tab.restore(r.clone()).unwrap();
    }
    let (x, y) = (addr(X), addr(Y));
    (
        tab.link_decision(t(NOW), &x, &y, |_, _| replied),
        tab.decide(t(NOW), &x, &y),
    )
}

#[test]
fn decision_cases_of_18_4() {
    use Direction::*;
    use LinkState::*;
    let r = |id: &str, a: &str, b: &str, d, s, c| rec(id, a, b, d, s, c);
    let cases: Vec<(&str, Vec<Link>, bool, Option<bool>)> = vec![
        ("no records", vec![], false, None),
        (
            "active both",
            vec![r("L00000001", X, Y, Both, Active, 10)],
            false,
            Some(true),
        ),
        (
            "active both, X is b",
            vec![r("L00000001", Y, X, Both, Active, 10)],
            false,
            Some(true),
        ),
        (
            "pending only",
            vec![r("L00000001", X, Y, Both, Pending, 10)],
            false,
            None,
        ),
        (
            "declined only",
            vec![r("L00000001", X, Y, Both, Declined, 10)],
            false,
            None,
        ),
        (
            "revoked only",
            vec![r("L00000001", X, Y, Both, Revoked, 10)],
            false,
            Some(false),
        ),
        (
            "revoked, then a newer active",
            vec![
                r("L00000002", X, Y, Both, Active, 20),
                r("L00000001", X, Y, Both, Revoked, 10),
            ],
            false,
            Some(true),
        ),
        (
            "active, then a newer revoked",
            vec![
                r("L00000002", X, Y, Both, Revoked, 20),
                r("L00000001", X, Y, Both, Active, 10),
            ],
            false,
            Some(false),
        ),
        (
            "newer pending skipped, older active",
            vec![
                r("L00000002", X, Y, Both, Pending, 20),
                r("L00000001", X, Y, Both, Active, 10),
            ],
            false,
            Some(true),
        ),
        (
            "a-initiates, X is a",
            vec![r("L00000001", X, Y, AInitiates, Active, 10)],
            false,
            Some(true),
        ),
        (
            "a-initiates, X is b, no reply window",
            vec![r("L00000001", Y, X, AInitiates, Active, 10)],
            false,
            Some(false),
        ),
        (
            "a-initiates, X is b, in reply window",
            vec![r("L00000001", Y, X, AInitiates, Active, 10)],
            true,
            Some(true),
        ),
        (
            "b-initiates, X is b",
            vec![r("L00000001", Y, X, BInitiates, Active, 10)],
            false,
            Some(true),
        ),
        (
            "b-initiates, X is a, no reply window",
            vec![r("L00000001", X, Y, BInitiates, Active, 10)],
            false,
            Some(false),
        ),
        (
            "newest one-way decides before an older both",
            vec![
                r("L00000002", Y, X, AInitiates, Active, 20),
                r("L00000001", X, Y, Both, Active, 10),
            ],
            false,
            Some(false),
        ),
        (
            "namespace b covers X",
            vec![r(
                "L00000001",
                Y,
                "airc://example.com/alice/",
                Both,
                Active,
                10,
            )],
            false,
            Some(true),
        ),
        (
            "another namespace does not",
            vec![r(
                "L00000001",
                Y,
                "airc://example.com/bob/",
                Both,
                Active,
                10,
            )],
            false,
            None,
        ),
        (
            "a link with someone else",
            vec![r(
                "L00000001",
                X,
                "airc://partner.example/support/other",
                Both,
                Revoked,
                10,
            )],
            false,
            None,
        ),
    ];
    for (name, records, replied, want) in cases {
        assert_eq!(decide_xy(&records, replied).0, want, "{name}");
    }
}

#[test]
fn decision_skips_an_expired_active_link() {
    let mut newer = rec("L00000002", X, Y, Direction::Both, LinkState::Active, 20);
    newer.expires = Some(t(NOW - 1));
    assert_eq!(decide_xy(&[newer.clone()], false).0, None);
    let older = rec(
        "L00000001",
        X,
        Y,
        Direction::AInitiates,
        LinkState::Active,
        10,
    );
    let mut reverse = older.clone();
    reverse.a = addr(Y);
    reverse.b = addr(X);
    reverse.offered_by = addr(Y);
    assert_eq!(decide_xy(&[newer, reverse], false).0, Some(false));
}

#[test]
fn decision_denial_reasons_are_the_ones_11_3_names() {
    let (_, d) = decide_xy(
        &[rec(
            "L00000001",
            X,
            Y,
            Direction::Both,
            LinkState::Revoked,
            10,
        )],
        false,
    );
    assert_eq!(d.deny_reason(&addr(X)).unwrap(), "link L00000001 revoked");
    let (_, d) = decide_xy(
        &[rec(
            "L00000001",
            Y,
            X,
            Direction::AInitiates,
            LinkState::Active,
            10,
        )],
        false,
    );
    assert_eq!(
        d.deny_reason(&addr(X)).unwrap(),
        "L00000001 is a-initiates; airc://example.com/alice/x may only reply"
    );
    let (_, d) = decide_xy(
        &[rec(
            "L00000001",
            X,
            Y,
            Direction::Both,
            LinkState::Active,
            10,
        )],
        false,
    );
    assert_eq!(d.deny_reason(&addr(X)), None);
}

#[test]
fn decision_ties_at_one_instant_go_to_the_revocation() {
    let active = rec("L0000000f", X, Y, Direction::Both, LinkState::Active, 10);
    let revoked = rec("L00000001", X, Y, Direction::Both, LinkState::Revoked, 10);
    assert_eq!(
        decide_xy(&[active.clone(), revoked.clone()], false).0,
        Some(false)
    );
    assert_eq!(decide_xy(&[revoked, active], false).0, Some(false));
}

#[test]
fn reply_window_is_asked_only_for_a_one_way_link() {
    let mut tab = table();
    tab.restore(rec(
        "L00000001",
        X,
        Y,
        Direction::Both,
        LinkState::Active,
        10,
    ))
    .unwrap();
    let asked = core::cell::Cell::new(false);
    let d = tab.link_decision(t(NOW), &addr(X), &addr(Y), |_, _| {
        asked.set(true);
        false
    });
    assert_eq!((d, asked.get()), (Some(true), false));
}

// ---- §11.4 control messages ----

const APPENDIX_A2_OFFER: &str = "[airc: link offer L1a2b3c4d from alice/x (q4): they ask to open a message link with y, direction both. Accept: airc link accept L1a2b3c4d --as bob/y   Decline: airc link decline L1a2b3c4d --as bob/y]";
const APPENDIX_A2_ACCEPT: &str = "[airc: link L1a2b3c4d with bob/y accepted.]";

fn a2_offer(tab: &mut LinkTable) -> Operation {
    let mut o = offer_of("alice/x", "bob/y");
    o.label = Some("q4".into());
    tab.offer(t(NOW), &mut Fixed([0x1a, 0x2b, 0x3c, 0x4d]), o)
        .unwrap()
}

#[test]
fn offer_notice_is_appendix_a2_byte_for_byte() {
    let mut tab = table();
    let op = a2_offer(&mut tab);
    let n = Notice::new(Action::Offer, &op.link, &local("alice/x"), &local("bob/y"));
    assert_eq!(n.body, APPENDIX_A2_OFFER);
    let m = n.to_msg("m1".into(), t(NOW));
    assert_eq!(m.from, "airc://example.com/alice/x");
    assert_eq!(m.to, "airc://example.com/bob/y");
    assert_eq!(m.kind.as_deref(), Some("text/plain"));
    assert_eq!(
        Value::Object(m.hdr.unwrap()),
        json!({"airc-link":"L1a2b3c4d","airc-link-action":"offer"})
    );
}

#[test]
fn accept_notice_is_appendix_a2_byte_for_byte() {
    let mut tab = table();
    let op = a2_offer(&mut tab);
    let acc = tab.accept(t(NOW), &local("bob/y"), &op.link.id).unwrap();
    let n = Notice::new(
        Action::Accept,
        &acc.link,
        &local("bob/y"),
        &local("alice/x"),
    );
    assert_eq!(n.body, APPENDIX_A2_ACCEPT);
}

#[test]
fn control_message_has_the_type_body_and_header_of_11_4() {
    let mut tab = table();
    let op = a2_offer(&mut tab);
    let m = op.control.to_msg("c1".into(), t(NOW));
    assert_eq!(m.kind.as_deref(), Some(CONTROL_TYPE));
    assert_eq!(
        (m.from.as_str(), m.to.as_str()),
        ("airc://example.com/alice/x", "airc://example.com/bob/y")
    );
    assert_eq!(m.hdr.as_ref().unwrap()[HDR_LINK], json!("L1a2b3c4d"));
    let body: Value = serde_json::from_str(&m.body).unwrap();
    assert_eq!(body["action"], json!("offer"));
    assert_eq!(Link::from_value(&body["link"]).unwrap(), op.link);
}

/// partner.example's table, and a control message from example.com built by example.com's table.
fn partner() -> LinkTable {
    LinkTable::new(
        Authority::parse("partner.example").unwrap(),
        LinkConfig::default(),
    )
}
fn cross_offer(origin: &mut LinkTable) -> ControlMessage {
    let o = Offer {
        peer: addr(Y),
        label: Some("vendor".into()),
        ..offer_of("alice/x", "bob/y")
    };
    origin
        .offer(t(NOW), &mut Fixed([0xde, 0xad, 0xbe, 0xef]), o)
        .unwrap()
        .control
}

#[test]
fn receive_offer_stores_it_and_notifies_the_offeree_with_accept_and_decline() {
    let mut origin = table();
    let mut dest = partner();
    let c = cross_offer(&mut origin);
    let got = dest
        .receive(t(NOW), &c.to_msg("c1".into(), t(NOW)))
        .unwrap();
    assert_eq!((got.action, got.stored), (Action::Offer, Stored::New));
    assert_eq!(dest.get("Ldeadbeef").unwrap().state, LinkState::Pending);
    let n = got.notice.unwrap();
    assert_eq!(n.to, addr(Y));
    assert_eq!(
        n.body,
        "[airc: link offer Ldeadbeef from airc://example.com/alice/x (vendor): they ask to open a message link with desk, direction both. Accept: airc link accept Ldeadbeef --as support/desk   Decline: airc link decline Ldeadbeef --as support/desk]"
    );
    assert_eq!(got.reply, None);
}

#[test]
fn receive_then_accept_round_trips_between_realms() {
    let mut origin = table();
    let mut dest = partner();
    let c = cross_offer(&mut origin);
    dest.receive(t(NOW), &c.to_msg("c1".into(), t(NOW)))
        .unwrap();
    let acc = dest.accept(t(NOW + 1), &addr(Y), "Ldeadbeef").unwrap();
    let got = origin
        .receive(t(NOW + 1), &acc.control.to_msg("c2".into(), t(NOW + 1)))
        .unwrap();
    assert_eq!(got.stored, Stored::Advanced);
    assert_eq!(origin.get("Ldeadbeef").unwrap().state, LinkState::Active);
    assert_eq!(
        got.notice.unwrap().body,
        "[airc: link Ldeadbeef with airc://partner.example/support/desk accepted.]"
    );
    assert_eq!(
        origin.link_decision(t(NOW + 2), &local("alice/x"), &addr(Y), |_, _| false),
        Some(true)
    );
    assert_eq!(
        dest.link_decision(t(NOW + 2), &addr(Y), &local("alice/x"), |_, _| false),
        Some(true)
    );
}

#[test]
fn receive_requires_from_and_to_to_be_a_and_b() {
    let mut origin = table();
    let mut dest = partner();
    let c = cross_offer(&mut origin);
    let mut m = c.to_msg("c1".into(), t(NOW));
    m.to = "airc://partner.example/support/other".into();
    assert_eq!(
        dest.receive(t(NOW), &m),
        Err(LinkRefusal::NotTheParties("Ldeadbeef".into()))
    );
    let mut m = c.to_msg("c1".into(), t(NOW));
    m.from = "airc://example.com/mallory/m".into();
    assert_eq!(
        dest.receive(t(NOW), &m),
        Err(LinkRefusal::NotTheParties("Ldeadbeef".into()))
    );
}

#[test]
fn receive_offer_requires_pending_offered_by_from_and_a_realm_that_takes_offers() {
    let mut origin = table();
    let c = cross_offer(&mut origin);
    // X may not send an offer that names Y as its offerer.
    let mut forged = c.clone();
    forged.link.offered_by = addr(Y);
    assert!(matches!(
        partner().receive(t(NOW), &forged.to_msg("f".into(), t(NOW))),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    let mut active = c.clone();
    active.link.state = LinkState::Active;
    assert!(matches!(
        partner().receive(t(NOW), &active.to_msg("a".into(), t(NOW))),
        Err(LinkRefusal::WrongState { .. })
    ));
    let mut closed = LinkTable::new(
        Authority::parse("partner.example").unwrap(),
        LinkConfig {
            accept_offers: false,
            auto_accept: Vec::new(),
        },
    );
    assert_eq!(
        closed.receive(t(NOW), &c.to_msg("c".into(), t(NOW))),
        Err(LinkRefusal::OffersRefused)
    );
}

#[test]
fn receive_caps_pending_offers_per_remote_offerer() {
    let mut origin = table();
    let mut dest = partner();
    let mut r = rng();
    for i in 0..=MAX_PENDING_OFFERS as u64 {
        let now = t(NOW + 10 * i);
        let o = Offer {
            peer: addr(&alloc::format!("airc://partner.example/support/d{i}")),
            ..offer_of("alice/x", "x/y")
        };
        // The origin's own cap stops the 21st there; build it by hand past that.
        let control = match origin.offer(now, &mut r, o) {
            Ok(op) => op.control,
            Err(_) => {
                let mut c = cross_offer(&mut table());
                c.link.id = "L0000ffff".into();
                c.link.b = addr("airc://partner.example/support/d99");
                c.to = c.link.b.clone();
                c
            }
        };
        let got = dest.receive(now, &control.to_msg(alloc::format!("m{i}"), now));
        if (i as usize) < MAX_PENDING_OFFERS {
            assert!(got.is_ok(), "{i}");
        } else {
            assert_eq!(got, Err(LinkRefusal::TooManyPending));
        }
    }
}

#[test]
fn receive_remote_offers_are_rate_limited_per_source_realm() {
    let mut dest = partner();
    let mut r = rng();
    for i in 0..=OFFER_RATE.burst {
        let mut origin = table();
        let o = Offer {
            peer: addr(Y),
            ..offer_of(&alloc::format!("u{i}/x"), "x/y")
        };
        let c = origin.offer(t(NOW), &mut r, o).unwrap().control;
        let got = dest.receive(t(NOW), &c.to_msg(alloc::format!("m{i}"), t(NOW)));
        assert_eq!(got.is_ok(), i < OFFER_RATE.burst, "{i}");
    }
}

#[test]
fn receive_accept_and_decline_only_from_the_offeree_of_a_known_link() {
    let mut origin = table();
    let mut dest = partner();
    let c = cross_offer(&mut origin);
    dest.receive(t(NOW), &c.to_msg("c1".into(), t(NOW)))
        .unwrap();
    // The offerer cannot accept its own offer.
    let mut self_accept = c.clone();
    self_accept.action = Action::Accept;
    self_accept.link.state = LinkState::Active;
    assert!(matches!(
        dest.receive(t(NOW), &self_accept.to_msg("c2".into(), t(NOW))),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    // An accept for a link never seen is refused (only a revoke is stored unseen).
    let mut unknown = self_accept.clone();
    unknown.link.id = "L99999999".into();
    assert_eq!(
        dest.receive(t(NOW), &unknown.to_msg("c3".into(), t(NOW))),
        Err(LinkRefusal::Unknown("L99999999".into()))
    );
}

#[test]
fn receive_revoke_of_a_link_never_seen_is_stored_and_denies() {
    let mut dest = partner();
    let mut l = rec(
        "L0badf00d",
        X,
        Y,
        Direction::Both,
        LinkState::Revoked,
        NOW - 5,
    );
    l.revoked_at = Some(t(NOW - 1));
    let c = ControlMessage::new(Action::Revoke, l, addr(X), addr(Y));
    let got = dest.receive(t(NOW), &c.to_msg("r".into(), t(NOW))).unwrap();
    assert_eq!(got.stored, Stored::New);
    assert_eq!(dest.get("L0badf00d").unwrap().revoked_by, Some(addr(X)));
    assert_eq!(
        dest.link_decision(t(NOW), &addr(Y), &addr(X), |_, _| true),
        Some(false)
    );
    assert_eq!(
        got.notice.unwrap().body,
        "[airc: link L0badf00d with airc://example.com/alice/x revoked.]"
    );
}

#[test]
fn receive_never_moves_a_stored_link_backwards() {
    let mut origin = table();
    let mut dest = partner();
    let c = cross_offer(&mut origin);
    dest.receive(t(NOW), &c.to_msg("c1".into(), t(NOW)))
        .unwrap();
    dest.revoke(t(NOW + 1), &addr(Y), "Ldeadbeef").unwrap();
    // The offer again (a retry) and an accept: both leave it revoked.
    assert_eq!(
        dest.receive(t(NOW + 2), &c.to_msg("c1b".into(), t(NOW + 2)))
            .unwrap()
            .stored,
        Stored::Unchanged
    );
    let mut grant = c.clone();
    grant.action = Action::Grant;
    grant.link.state = LinkState::Active;
    assert!(matches!(
        dest.receive(t(NOW + 2), &grant.to_msg("g".into(), t(NOW + 2))),
        Err(LinkRefusal::WrongState { .. })
    ));
    assert_eq!(dest.get("Ldeadbeef").unwrap().state, LinkState::Revoked);
}

#[test]
fn receive_a_retry_changes_nothing_and_notifies_no_one() {
    let mut origin = table();
    let mut dest = partner();
    let m = cross_offer(&mut origin).to_msg("c1".into(), t(NOW));
    dest.receive(t(NOW), &m).unwrap();
    let again = dest.receive(t(NOW), &m).unwrap();
    assert_eq!((again.stored, again.notice), (Stored::Unchanged, None));
}

#[test]
fn receive_refuses_a_known_id_joining_other_endpoints() {
    let mut dest = partner();
    dest.restore(rec(
        "Ldeadbeef",
        "airc://example.com/carol/c",
        Y,
        Direction::Both,
        LinkState::Active,
        1,
    ))
    .unwrap();
    let mut l = rec("Ldeadbeef", X, Y, Direction::Both, LinkState::Revoked, 2);
    l.revoked_by = Some(addr(X));
    let c = ControlMessage::new(Action::Revoke, l, addr(X), addr(Y));
    assert_eq!(
        dest.receive(t(NOW), &c.to_msg("r".into(), t(NOW))),
        Err(LinkRefusal::NotTheParties("Ldeadbeef".into()))
    );
    assert_eq!(dest.get("Ldeadbeef").unwrap().state, LinkState::Active);
}

#[test]
fn receive_grant_requires_a_from_b_to_and_active() {
    let mut dest = partner();
    let l = rec("L12345678", X, Y, Direction::Both, LinkState::Active, NOW);
    let good = ControlMessage::new(Action::Grant, l.clone(), addr(X), addr(Y));
    let backwards = ControlMessage::new(Action::Grant, l.clone(), addr(Y), addr(X));
    let mut home = table();
    assert!(matches!(
        home.receive(t(NOW), &backwards.to_msg("b".into(), t(NOW))),
        Err(LinkRefusal::NotAllowed { .. })
    ));
    let got = dest
        .receive(t(NOW), &good.to_msg("g".into(), t(NOW)))
        .unwrap();
    assert_eq!(got.link.state, LinkState::Active);
    assert!(
        got.notice
            .unwrap()
            .body
            .contains("Revoke: airc link revoke L12345678 --as support/desk")
    );
}

#[test]
fn receive_auto_accepts_offers_for_matching_endpoints() {
    let mut origin = table();
    let mut dest = LinkTable::new(
        Authority::parse("partner.example").unwrap(),
        LinkConfig {
            accept_offers: true,
            auto_accept: vec![Pattern::parse("//partner.example/support/**").unwrap()],
        },
    );
    let c = cross_offer(&mut origin);
    let got = dest
        .receive(t(NOW), &c.to_msg("c1".into(), t(NOW)))
        .unwrap();
    assert_eq!(got.link.state, LinkState::Active);
    let reply = got.reply.unwrap();
    assert_eq!(
        (reply.action, reply.from.clone(), reply.to.clone()),
        (Action::Accept, addr(Y), addr(X))
    );
    assert!(
        got.notice
            .unwrap()
            .body
            .contains("was accepted automatically")
    );
    assert_eq!(
        origin
            .receive(t(NOW), &reply.to_msg("a".into(), t(NOW)))
            .unwrap()
            .link
            .state,
        LinkState::Active
    );
}

#[test]
fn receive_bad_input_is_refused_never_panics() {
    let mut dest = partner();
    let base = Msg {
        id: "m".into(),
        from: X.into(),
        to: Y.into(),
        ts: 1.0,
        body: "{}".into(),
        kind: Some(CONTROL_TYPE.into()),
        re: None,
        ttl: None,
        via: None,
        hdr: None,
    };
    let bodies = [
        "",
        "not json",
        "[]",
        "{}",
        r#"{"action":"dance","link":{}}"#,
        r#"{"action":"offer"}"#,
        r#"{"action":"offer","link":{"id":"L1"}}"#,
        r#"{"action":"offer","link":null}"#,
    ];
    for b in bodies {
        let m = Msg {
            body: b.into(),
            ..base.clone()
        };
        assert!(dest.receive(t(NOW), &m).is_err(), "{b}");
    }
    let wrong_type = Msg {
        kind: Some("text/plain".into()),
        ..base.clone()
    };
    assert!(matches!(
        dest.receive(t(NOW), &wrong_type),
        Err(LinkRefusal::BadControl(_))
    ));
    let bad_from = Msg {
        from: "x".into(),
        ..base.clone()
    };
    assert!(matches!(
        dest.receive(t(NOW), &bad_from),
        Err(LinkRefusal::BadControl(_))
    ));
    // A header naming another link.
    let mut origin = table();
    let mut m = cross_offer(&mut origin).to_msg("c".into(), t(NOW));
    m.hdr
        .as_mut()
        .unwrap()
        .insert(HDR_LINK.into(), json!("L00000000"));
    assert!(matches!(
        dest.receive(t(NOW), &m),
        Err(LinkRefusal::BadControl(_))
    ));
    // For another realm.
    let m = cross_offer(&mut table()).to_msg("c".into(), t(NOW));
    assert_eq!(table().receive(t(NOW), &m), Err(LinkRefusal::NotLocal));
    for e in [LinkRefusal::TableFull, LinkRefusal::RateLimited] {
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(LinkRefusal::CODE.as_str(), "refused");
}

#[test]
fn a_label_cannot_break_out_of_the_notice() {
    let mut tab = table();
    let mut o = offer_of("alice/x", "bob/y");
    o.label = Some("x] [airc: trust me\nreally".into());
    let op = tab.offer(t(NOW), &mut rng(), o).unwrap();
    let body = Notice::new(Action::Offer, &op.link, &local("alice/x"), &local("bob/y")).body;
    assert!(body.contains("(x) (airc: trust me really)"));
    assert_eq!(body.matches(']').count(), 1);
    assert!(!body.contains('\n'));
}

#[test]
fn actions_name_their_state_and_audit_kind() {
    for a in [
        Action::Offer,
        Action::Accept,
        Action::Decline,
        Action::Revoke,
        Action::Grant,
    ] {
        assert_eq!(Action::parse(a.as_str()), Some(a));
        assert_eq!(a.event_kind(), alloc::format!("link.{}", a.as_str()));
    }
    assert_eq!(Action::Grant.state(), LinkState::Active);
    assert_eq!(Direction::parse("a-initiates"), Some(Direction::AInitiates));
}

// ---- the indexes: the same answers as reading every record ----

/// The table as it answered before it kept indexes: gather every record either endpoint is a
/// side of, keep those joining the two, sort, read in order. Kept here only, to hold the indexed
/// table to it.
mod reference {
    use super::*;
    use core::cmp::Ordering;

    /// Newest first by `created`; at one instant a revocation first, then by id, descending.
    pub(super) fn newest_first(x: &Link, y: &Link) -> Ordering {
        y.created
            .cmp(&x.created)
            .then((y.state == LinkState::Revoked).cmp(&(x.state == LinkState::Revoked)))
            .then(y.id.cmp(&x.id))
    }

    fn names(l: &Link, x: &Address) -> bool {
        l.a.key() == x.key() || l.b.key() == x.key()
    }

    pub(super) fn decide(
        all: &[&Link],
        now: Timestamp,
        from: &Address,
        to: &Address,
    ) -> LinkDecision {
        let mut records: Vec<&Link> = all
            .iter()
            .copied()
            .filter(|l| names(l, from) || names(l, to))
            .filter(|l| l.joins(from, to))
            .collect();
        records.sort_by(|x, y| newest_first(x, y));
        for rec in records {
            if rec.state == LinkState::Revoked {
                return LinkDecision::Revoked { id: rec.id.clone() };
            }
            if rec.state != LinkState::Active || rec.is_expired(now) {
                continue;
            }
            let f_is_a = rec.is_a(from);
            let starts = match rec.direction {
                Direction::Both => true,
                Direction::AInitiates => f_is_a,
                Direction::BInitiates => !f_is_a,
            };
            return if starts {
                LinkDecision::Allow { id: rec.id.clone() }
            } else {
                LinkDecision::ReplyOnly {
                    id: rec.id.clone(),
                    direction: rec.direction,
                }
            };
        }
        LinkDecision::None
    }

    pub(super) fn list<'a>(all: &[&'a Link], endpoint: &Address) -> Vec<&'a Link> {
        let mut out: Vec<&Link> = all
            .iter()
            .copied()
            .filter(|l| names(l, endpoint) || (l.b.is_namespace() && l.is_b(endpoint)))
            .collect();
        out.sort_by(|x, y| newest_first(x, y));
        out
    }

    pub(super) fn list_all<'a>(all: &[&'a Link]) -> Vec<&'a Link> {
        let mut out = all.to_vec();
        out.sort_by(|x, y| newest_first(x, y));
        out
    }

    /// The offerer's pending offers that count, as `admit_offer` counted them.
    pub(super) fn pending(
        all: &[&Link],
        now: Timestamp,
        offerer: &Address,
        replacing: Option<&String>,
    ) -> usize {
        all.iter()
            .filter(|l| names(l, offerer))
            .filter(|l| Some(&l.id) != replacing)
            .filter(|l| {
                l.state == LinkState::Pending && l.offered_by == *offerer && !l.is_expired(now)
            })
            .count()
    }
}

/// Endpoints and namespaces of this realm (`example.com`) and of `partner.example`, nested so
/// namespace-side links cover some endpoints and not others.
const LOCALS: [&str; 8] = [
    "airc://example.com/a/x",
    "airc://example.com/a/y",
    "airc://example.com/a/",
    "airc://example.com/b/y/z",
    "airc://example.com/b/y/",
    "airc://example.com/b/",
    "airc://example.com/b/w",
    "airc://example.com/c/q",
];
const REMOTES: [&str; 5] = [
    "airc://partner.example/p/q",
    "airc://partner.example/p/r",
    "airc://partner.example/p/",
    "airc://partner.example/s/t/u",
    "airc://partner.example/s/",
];

/// Drives one table through a seeded mix of every operation that stores or changes a record
/// and checks it against [`reference`] as it goes.
struct Scenario {
    tab: LinkTable,
    peer: LinkTable,
    rng: ChaCha20Rng,
    now: u64,
    /// Every id the table may hold, to read the records without its indexes.
    ids: BTreeSet<String>,
    /// Control messages sent so far, for fresh `msg` ids.
    sent: u64,
    /// What the control messages taken did, to show the scenario reaches each path.
    changes: BTreeMap<&'static str, usize>,
}

impl Scenario {
    fn new(seed: u64) -> Self {
        let config = LinkConfig {
            accept_offers: true,
            auto_accept: vec![Pattern::parse("//example.com/c/**").unwrap()],
        };
        Self {
            tab: LinkTable::new(Authority::parse("example.com").unwrap(), config),
            peer: partner(),
            rng: ChaCha20Rng::seed_from_u64(seed),
            now: NOW,
            ids: BTreeSet::new(),
            sent: 0,
            changes: BTreeMap::new(),
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        rand_core::Rng::next_u64(&mut self.rng) % n
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
    fn any(&mut self) -> Address {
        let all: Vec<&str> = LOCALS.iter().chain(REMOTES.iter()).copied().collect();
        addr(self.pick(&all))
    }
    fn endpoint(&mut self, of: &[&str]) -> Address {
        let eps: Vec<&str> = of.iter().copied().filter(|s| !s.ends_with('/')).collect();
        addr(self.pick(&eps))
    }
    fn direction(&mut self) -> Direction {
        [
            Direction::Both,
            Direction::AInitiates,
            Direction::BInitiates,
        ][self.below(3) as usize]
    }
    /// Never, soon, or already past, so some links expire while the scenario runs.
    fn expires(&mut self) -> Option<Timestamp> {
        match self.below(4) {
            0 | 1 => None,
            2 => Some(t(self.now + 1 + self.below(40))),
            _ => Some(t(self.now.saturating_sub(1 + self.below(40)))),
        }
    }
    /// A creation instant from a handful, so records tie.
    fn instant(&mut self) -> u64 {
        NOW + 5 * self.below(6)
    }
    fn known_id(&mut self) -> Option<String> {
        let n = self.ids.len() as u64;
        (n > 0).then(|| {
            let i = self.below(n) as usize;
            self.ids.iter().nth(i).cloned().unwrap()
        })
    }
    /// An endpoint that may answer for `link`'s side `b`: `b`, or one beneath it.
    /// `a` or the `b` side, by a coin.
    fn either_side(&mut self, link: &Link) -> Address {
        if self.below(2) == 0 {
            link.a.clone()
        } else {
            self.b_side(link)
        }
    }

    fn b_side(&mut self, link: &Link) -> Address {
        let beneath: Vec<&str> = LOCALS
            .iter()
            .chain(REMOTES.iter())
            .copied()
            .filter(|s| !s.ends_with('/') && link.is_b(&addr(s)))
            .collect();
        if beneath.is_empty() {
            link.b.clone()
        } else {
            addr(self.pick(&beneath))
        }
    }
    fn note(&mut self, link: &Link) {
        self.ids.insert(link.id.clone());
    }
    fn deliver(&mut self, c: &ControlMessage) {
        self.sent += 1;
        let m = c.to_msg(alloc::format!("m{}", self.sent), t(self.now));
        if let Ok(got) = self.tab.receive(t(self.now), &m) {
            self.note(&got.link);
            let what = match (got.stored, got.reply.is_some()) {
                (_, true) => "auto-accepted offers",
                (Stored::Advanced, _) => "records advanced by a peer",
                _ => "other control messages taken",
            };
            *self.changes.entry(what).or_default() += 1;
        }
    }

    fn step(&mut self) {
        let now = t(self.now);
        match self.below(11) {
            0 | 1 => {
                let o = Offer {
                    acting: self.endpoint(&LOCALS),
                    peer: self.any(),
                    direction: self.direction(),
                    label: None,
                    expires: self.expires().filter(|e| *e > now),
                };
                if let Ok(op) = self.tab.offer(now, &mut self.rng, o) {
                    self.note(&op.link);
                }
            }
            2 => {
                let g = Grant {
                    a: self.endpoint(&LOCALS),
                    b: self.any(),
                    direction: self.direction(),
                    label: None,
                    expires: self.expires(),
                    origin: None,
                };
                if let Ok(op) = self.tab.grant(now, &mut self.rng, g) {
                    self.note(&op.link);
                }
            }
            3 => {
                // Accept or decline, mostly by an offeree.
                let Some(id) = self.known_id() else { return };
                let link = self.tab.get(&id).unwrap().clone();
                let acting = self.either_side(&link);
                if acting.realm() == self.tab.realm() {
                    let _ = if self.below(2) == 0 {
                        self.tab.accept(now, &acting, &id)
                    } else {
                        self.tab.decline(now, &acting, &id)
                    };
                } else {
                    // The far side's answer, as its server sends it.
                    let mut answered = link.clone();
                    let action = if self.below(2) == 0 {
                        answered.state = LinkState::Active;
                        answered.accepted_at = Some(now);
                        Action::Accept
                    } else {
                        answered.state = LinkState::Declined;
                        answered.declined_at = Some(now);
                        Action::Decline
                    };
                    let to = link.a.clone();
                    self.deliver(&ControlMessage::new(action, answered, acting, to));
                }
            }
            4 => {
                let Some(id) = self.known_id() else { return };
                let link = self.tab.get(&id).unwrap().clone();
                let acting = self.either_side(&link);
                if acting.realm() == self.tab.realm() {
                    let _ = self.tab.revoke(now, &acting, &id);
                } else {
                    let mut revoked = link.clone();
                    revoked.state = LinkState::Revoked;
                    let to = other_side(&link, &acting);
                    self.deliver(&ControlMessage::new(Action::Revoke, revoked, acting, to));
                }
            }
            5 | 6 => {
                // The peer realm offers or grants to a local endpoint or namespace.
                let acting = self.endpoint(&REMOTES);
                let peer = addr(self.pick(&LOCALS));
                let (direction, expires) = (self.direction(), self.expires());
                let op = if self.below(2) == 0 {
                    let o = Offer {
                        acting,
                        peer,
                        direction,
                        label: None,
                        expires: expires.filter(|e| *e > now),
                    };
                    self.peer.offer(now, &mut self.rng, o)
                } else {
                    let g = Grant {
                        a: acting,
                        b: peer,
                        direction,
                        label: None,
                        expires,
                        origin: None,
                    };
                    self.peer.grant(now, &mut self.rng, g)
                };
                if let Ok(op) = op {
                    let to = if op.control.to.is_namespace() {
                        self.b_side(&op.link)
                    } else {
                        op.control.to.clone()
                    };
                    self.deliver(&ControlMessage { to, ..op.control });
                }
            }
            7 => {
                // A revoke, from the peer realm, of an id this table may never have seen.
                let a = self.endpoint(&REMOTES);
                let b = addr(self.pick(&LOCALS));
                let id = alloc::format!("L{:08x}", self.below(64));
                let (created, dir) = (self.instant(), self.direction());
                let mut l = rec(
                    &id,
                    "airc://x/y",
                    "airc://x/z",
                    dir,
                    LinkState::Revoked,
                    created,
                );
                (l.a, l.b, l.offered_by) = (a.clone(), b.clone(), a.clone());
                let to = self.b_side(&l);
                self.deliver(&ControlMessage::new(Action::Revoke, l, a, to));
            }
            8 | 9 => {
                // Records read back after a restart: any state, tied instants, colliding ids,
                // and later states of records held.
                let state = [
                    LinkState::Pending,
                    LinkState::Active,
                    LinkState::Declined,
                    LinkState::Revoked,
                ][self.below(4) as usize];
                let held = match self.known_id() {
                    Some(id) if self.below(2) == 0 => self.tab.get(&id).cloned(),
                    _ => None,
                };
                let l = if let Some(mut l) = held {
                    l.state = state;
                    l
                } else {
                    let a = self.endpoint(&[&LOCALS[..], &REMOTES[..]].concat());
                    let b = self.any();
                    if a == b {
                        return;
                    }
                    let id = alloc::format!("L{:08x}", self.below(64));
                    let created = self.instant();
                    let dir = self.direction();
                    let mut l = rec(&id, "airc://x/y", "airc://x/z", dir, state, created);
                    (l.a, l.b) = (a.clone(), b.clone());
                    l.offered_by = if self.below(2) == 0 || b.is_namespace() {
                        a
                    } else {
                        b
                    };
                    l.expires = self.expires();
                    l
                };
                match self.tab.restore(l.clone()) {
                    Ok(Stored::Advanced) => {
                        *self
                            .changes
                            .entry("records advanced by a restore")
                            .or_default() += 1;
                    }
                    Ok(_) => self.note(&l),
                    Err(_) => {}
                }
            }
            _ => self.now += [1, 2, 5, 30][self.below(4) as usize],
        }
    }

    /// Every decision, listing and pending count, at several instants, against [`reference`].
    /// Counts the decisions of each kind, and those a namespace-side record made.
    fn check(&self, seen: &mut BTreeMap<&'static str, usize>) {
        let all: Vec<&Link> = self.ids.iter().filter_map(|id| self.tab.get(id)).collect();
        assert_eq!(all.len(), self.tab.len(), "every record is known");
        let addrs: Vec<Address> = LOCALS
            .iter()
            .chain(REMOTES.iter())
            .map(|s| addr(s))
            .collect();
        let ids = |v: Vec<&Link>| v.into_iter().map(|l| l.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(self.tab.list_all()), ids(reference::list_all(&all)));
        let replacing = self.ids.iter().next();
        for now in [self.now - 20, self.now, self.now + 20, self.now + 1000].map(t) {
            for from in &addrs {
                for to in &addrs {
                    let d = self.tab.decide(now, from, to);
                    assert_eq!(
                        d,
                        reference::decide(&all, now, from, to),
                        "{from} -> {to} at {now:?}"
                    );
                    let (kind, id) = match &d {
                        LinkDecision::Allow { id } => ("allowed", id),
                        LinkDecision::Revoked { id } => ("denied as revoked", id),
                        LinkDecision::ReplyOnly { id, .. } => ("left a reply only", id),
                        _ => continue,
                    };
                    *seen.entry(kind).or_default() += 1;
                    if self.tab.get(id).is_some_and(|l| l.b.is_namespace()) {
                        *seen.entry("decided by a namespace b").or_default() += 1;
                    }
                }
                for r in [None, replacing] {
                    let n = self.tab.pending_offers(now, from, r);
                    assert_eq!(
                        n,
                        reference::pending(&all, now, from, r).min(MAX_PENDING_OFFERS),
                        "pending offers of {from} at {now:?}"
                    );
                    *seen.entry("pending offers").or_default() += n;
                }
            }
        }
        for e in &addrs {
            assert_eq!(ids(self.tab.list(e)), ids(reference::list(&all, e)), "{e}");
        }
        for l in &all {
            if all
                .iter()
                .any(|m| m.id != l.id && m.created == l.created && m.joins(&l.a, &l.b))
            {
                *seen
                    .entry("records tied with another of their pair")
                    .or_default() += 1;
            }
        }
    }
}

#[test]
fn indexed_decisions_lists_and_counts_are_the_ones_reading_every_record_gives() {
    let mut seen = BTreeMap::new();
    for seed in 0..4 {
        let mut s = Scenario::new(seed);
        for step in 0..400 {
            s.step();
            if step % 10 == 0 {
                s.check(&mut seen);
            }
        }
        s.check(&mut seen);
        assert!(s.tab.len() > 50, "seed {seed}: {} records", s.tab.len());
        for (what, n) in s.changes {
            *seen.entry(what).or_default() += n;
        }
    }
    // The scenario reached every path it is there to check.
    for what in [
        "allowed",
        "denied as revoked",
        "left a reply only",
        "decided by a namespace b",
        "pending offers",
        "records tied with another of their pair",
        "auto-accepted offers",
        "records advanced by a peer",
        "records advanced by a restore",
        "other control messages taken",
    ] {
        assert!(
            seen.get(what).is_some_and(|n| *n > 0),
            "no {what}: {seen:?}"
        );
    }
}

// ---- bounds on what one party can make the table hold ----

fn grant_of(a: &str, b: Address) -> Grant {
    Grant {
        a: local(a),
        b,
        direction: Direction::BInitiates,
        label: None,
        expires: None,
        origin: None,
    }
}

/// A peer realm's grant from `airc://partner.example/<from>` to `to`, as its server sends it,
/// under a fresh id from `r`.
fn peer_grant(r: &mut ChaCha20Rng, from: &str, to: Address) -> Msg {
    let from = addr(&alloc::format!("airc://partner.example/{from}"));
    let id = alloc::format!("L{:08x}", rand_core::Rng::next_u32(r));
    let mut l = rec(&id, X, X, Direction::BInitiates, LinkState::Active, NOW);
    (l.a, l.b, l.offered_by) = (from.clone(), to.clone(), from.clone());
    ControlMessage::new(Action::Grant, l, from, to).to_msg("g".into(), t(NOW))
}

/// A peer realm's revoke of a link this table never saw, from `airc://partner.example/<from>`.
fn peer_revoke(id: &str, from: &str, to: Address) -> Msg {
    let from = addr(&alloc::format!("airc://partner.example/{from}"));
    let mut l = rec(id, X, X, Direction::Both, LinkState::Revoked, NOW);
    (l.a, l.b, l.offered_by) = (from.clone(), to.clone(), from.clone());
    ControlMessage::new(Action::Revoke, l, from, to).to_msg("r".into(), t(NOW))
}

#[test]
fn a_party_is_named_in_at_most_max_links_per_party_records_with_one_source() {
    let mut tab = table();
    let mut r = rng();
    let bob = local("bob/y");
    // alice's endpoints (one source, `local:alice`) fill bob's share for alice, one grant a
    // second (a client's grants draw on its source's rate).
    for i in 0..MAX_LINKS_PER_PARTY {
        tab.grant(
            t(NOW + i as u64),
            &mut r,
            grant_of(&alloc::format!("alice/x{i}"), bob.clone()),
        )
        .unwrap();
    }
    let full = LinkRefusal::PartyFull {
        party: bob.key().to_string(),
        source: "local:alice".into(),
    };
    assert_eq!(
        full.to_string(),
        "too many links for airc://example.com/bob/y with local:alice (1000)"
    );
    assert_eq!(LinkRefusal::CODE, AckCode::Refused);
    let mut now = NOW + MAX_LINKS_PER_PARTY as u64;
    // Whichever side adds the record, and whether bob is `a` or `b`.
    assert_eq!(
        tab.grant(t(now), &mut r, grant_of("alice/z", bob.clone())),
        Err(full.clone())
    );
    assert_eq!(
        tab.offer(t(now), &mut r, offer_of("bob/y", "alice/z")),
        Err(full.clone())
    );
    assert_eq!(tab.len(), MAX_LINKS_PER_PARTY);
    // Other sources keep their own shares of bob: another local namespace, and a peer realm,
    // whose grants and revokes of unknown ids fill only its share.
    assert!(
        tab.grant(t(now), &mut r, grant_of("carol/z", bob.clone()))
            .is_ok()
    );
    for i in 0..MAX_LINKS_PER_PARTY {
        now += 1; // one a second: within the peer realm's rate
        let m = if i % 2 == 0 {
            peer_grant(&mut r, &alloc::format!("p/q{i}"), bob.clone())
        } else {
            peer_revoke(
                &alloc::format!("L{i:08x}"),
                &alloc::format!("p/q{i}"),
                bob.clone(),
            )
        };
        assert!(tab.receive(t(now), &m).is_ok(), "{i}");
    }
    let partner_full = LinkRefusal::PartyFull {
        party: bob.key().to_string(),
        source: "realm:partner.example".into(),
    };
    now += 1;
    let m = peer_grant(&mut r, "p/last", bob.clone());
    assert_eq!(tab.receive(t(now), &m), Err(partner_full.clone()));
    let m = peer_revoke("L0badf00d", "p/last", bob.clone());
    assert_eq!(tab.receive(t(now), &m), Err(partner_full));
    // The refusals spent no token of the peer realm's rate: a full burst still passes.
    for i in 0..OFFER_RATE.burst {
        let m = peer_grant(&mut r, &alloc::format!("p/u{i}"), local("carol/z"));
        assert!(tab.receive(t(now), &m).is_ok(), "{i}");
    }
    let held = tab
        .grant(t(now), &mut r, grant_of("dave/x", bob.clone()))
        .expect("a third local source still links with bob")
        .link
        .id;
    // The records held still change (a revocation always lands).
    assert!(tab.revoke(t(now), &bob, &held).is_ok());
    // A record read back after a restart was admitted when first stored: not refused again.
    let mut back = tab.get(&held).unwrap().clone();
    back.id = "L0000beef".into();
    assert_eq!(tab.restore(back), Ok(Stored::New));
}

/// alice/x's offer to `peer` ten seconds after the last, so the rate never bites.
fn offer_later(
    tab: &mut LinkTable,
    now: &mut u64,
    peer: Address,
    expires: Option<u64>,
) -> Result<Operation, LinkRefusal> {
    *now += 10;
    let o = Offer {
        peer,
        expires: expires.map(t),
        ..offer_of("alice/x", "x/y")
    };
    tab.offer(t(*now), &mut ChaCha20Rng::seed_from_u64(*now), o)
}

/// alice/x has all the pending offers it may have: the next is refused.
fn at_the_cap(tab: &mut LinkTable, now: &mut u64) {
    let alice = local("alice/x");
    assert_eq!(
        tab.pending_offers(t(*now), &alice, None),
        MAX_PENDING_OFFERS
    );
    assert_eq!(
        offer_later(tab, now, local("carol/z"), None).map(|_| ()),
        Err(LinkRefusal::TooManyPending)
    );
}

/// One of alice/x's offers stopped counting (`why`): one more is taken, and no second.
fn one_freed(tab: &mut LinkTable, now: &mut u64, why: &str) {
    let alice = local("alice/x");
    let n = tab.pending_offers(t(*now), &alice, None);
    assert_eq!(n, MAX_PENDING_OFFERS - 1, "{why}");
    assert!(
        offer_later(tab, now, local("carol/z"), None).is_ok(),
        "{why}"
    );
    at_the_cap(tab, now);
}

#[test]
fn the_pending_offer_count_follows_accepts_declines_revokes_and_expiry() {
    let mut tab = table();
    let mut dest = partner();
    let alice = local("alice/x");
    let mut now = NOW;
    let mut offers = Vec::new();
    for i in 0..MAX_PENDING_OFFERS {
        // The first lapses at NOW + 1000; the second goes to another realm.
        let peer = match i {
            1 => addr(Y),
            _ => local(&alloc::format!("bob/y{i}")),
        };
        let expires = (i == 0).then_some(NOW + 1000);
        offers.push(offer_later(&mut tab, &mut now, peer, expires).unwrap().link);
    }
    at_the_cap(&mut tab, &mut now);
    // Each way an offer stops being pending frees its place.
    tab.accept(t(now), &local("bob/y2"), &offers[2].id).unwrap();
    one_freed(&mut tab, &mut now, "accepted");
    tab.decline(t(now), &local("bob/y3"), &offers[3].id)
        .unwrap();
    one_freed(&mut tab, &mut now, "declined");
    tab.revoke(t(now), &alice, &offers[4].id).unwrap();
    one_freed(&mut tab, &mut now, "revoked");
    // Accepted in the other realm: the accept comes back as a control message.
    let c = &offers[1];
    let offered = ControlMessage::new(Action::Offer, c.clone(), alice.clone(), addr(Y));
    dest.receive(t(now), &offered.to_msg("o".into(), t(now)))
        .unwrap();
    let acc = dest.accept(t(now), &addr(Y), &c.id).unwrap().control;
    tab.receive(t(now), &acc.to_msg("a".into(), t(now)))
        .unwrap();
    one_freed(&mut tab, &mut now, "accepted by the peer");
    // Time passes the first offer's expiry.
    now = NOW + 1001;
    one_freed(&mut tab, &mut now, "expired");
    // Merged again, an answered offer stays answered and counts no more.
    tab.restore(offers[2].clone()).unwrap();
    assert_eq!(tab.pending_offers(t(now), &alice, None), MAX_PENDING_OFFERS);
}

#[test]
fn a_peer_realms_grants_and_revokes_of_unknown_ids_share_the_offer_rate() {
    let mut tab = table();
    let mut r = rng();
    let mut held = Vec::new();
    for i in 0..OFFER_RATE.burst {
        let m = peer_grant(&mut r, &alloc::format!("p/u{i}"), local("bob/y"));
        held.push(tab.receive(t(NOW), &m).unwrap().link);
    }
    let m = peer_grant(&mut r, "p/v", local("bob/y"));
    assert_eq!(tab.receive(t(NOW), &m), Err(LinkRefusal::RateLimited));
    let m = peer_revoke("L0badf00d", "p/v", local("bob/y"));
    assert_eq!(tab.receive(t(NOW), &m), Err(LinkRefusal::RateLimited));
    assert_eq!(
        tab.offer(
            t(NOW),
            &mut r,
            Offer {
                peer: addr("airc://partner.example/p/v"),
                ..offer_of("bob/y", "x/y")
            }
        )
        .map(|_| ()),
        Ok(()),
        "a local source has its own bucket"
    );
    // About a record held, a revoke is never limited.
    let mut revoked = held[0].clone();
    revoked.state = LinkState::Revoked;
    let c = ControlMessage::new(Action::Revoke, revoked, held[0].a.clone(), local("bob/y"));
    let got = tab.receive(t(NOW), &c.to_msg("r".into(), t(NOW))).unwrap();
    assert_eq!(got.stored, Stored::Advanced);
    // The bucket refills.
    let m = peer_revoke("L0badf00d", "p/v", local("bob/y"));
    assert_eq!(
        tab.receive(t(NOW + 1), &m).map(|g| g.stored),
        Ok(Stored::New)
    );
}

/// Every decision between the endpoints of `names`, both ways, at `now`.
fn decisions(tab: &LinkTable, names: &[&str], now: u64) -> Vec<LinkDecision> {
    let mut out = Vec::new();
    for f in names {
        for to in names {
            out.push(tab.decide(t(now), &local(f), &local(to)));
        }
    }
    out
}

#[test]
fn records_that_lost_all_effect_are_forgotten_after_the_retention_and_no_decision_changes() {
    let mut tab = table();
    let mut r = rng();
    let day = 86_400;
    let keep = LINK_RETENTION.as_secs();
    // Declined at NOW + 10.
    let declined = tab
        .offer(t(NOW), &mut r, offer_of("a/x", "b/y"))
        .unwrap()
        .link
        .id;
    tab.decline(t(NOW + 10), &local("b/y"), &declined).unwrap();
    // A pending offer ending at NOW + 1 day; a grant ending at NOW + 2 days.
    let mut ending = offer_of("c/x", "b/y");
    ending.expires = Some(t(NOW + day));
    let pending = tab.offer(t(NOW), &mut r, ending).unwrap().link.id;
    let mut ending = grant_of("d/x", local("b/y"));
    ending.expires = Some(t(NOW + 2 * day));
    let granted = tab.grant(t(NOW), &mut r, ending).unwrap().link.id;
    // Kept for good: a grant without an end, a revocation, and a link revoked after it ended.
    let open = tab
        .grant(t(NOW), &mut r, grant_of("e/x", local("b/y")))
        .unwrap()
        .link
        .id;
    let revoked = tab
        .grant(t(NOW), &mut r, grant_of("f/x", local("b/y")))
        .unwrap()
        .link
        .id;
    tab.revoke(t(NOW + 1), &local("f/x"), &revoked).unwrap();
    let mut ending = grant_of("g/x", local("b/y"));
    ending.expires = Some(t(NOW + day));
    let late = tab.grant(t(NOW), &mut r, ending).unwrap().link.id;
    tab.revoke(t(NOW + 3 * day), &local("g/x"), &late).unwrap();

    let names = ["a/x", "b/y", "c/x", "d/x", "e/x", "f/x", "g/x"];
    let held = |tab: &LinkTable| -> Vec<String> { tab.links.keys().cloned().collect() };
    let before = held(&tab);
    let when = NOW + 4 * day;
    let decided = decisions(&tab, &names, when);
    assert!(
        tab.forget_lapsed(t(NOW + 10 + keep - 1)).is_empty(),
        "one second early"
    );
    assert_eq!(
        tab.forget_lapsed(t(NOW + 10 + keep)),
        core::slice::from_ref(&declined)
    );
    assert_eq!(
        tab.forget_lapsed(t(NOW + day + keep)),
        core::slice::from_ref(&pending)
    );
    assert_eq!(
        tab.forget_lapsed(t(NOW + 2 * day + keep)),
        core::slice::from_ref(&granted)
    );
    assert!(
        tab.forget_lapsed(t(u64::MAX / 2_000)).is_empty(),
        "the rest never"
    );
    assert_eq!(decisions(&tab, &names, when), decided);
    let mut kept = before;
    kept.retain(|id| ![&declined, &pending, &granted].contains(&id));
    assert_eq!(held(&tab), kept);
    assert!(tab.get(&open).is_some() && tab.get(&revoked).is_some() && tab.get(&late).is_some());
    // Nothing of a forgotten record is left: not in a list, nor in a share.
    assert!(tab.list(&local("b/y")).iter().all(|l| l.id != declined));
    assert!(
        !tab.shares
            .contains_key(&(local("a/x").key().to_string(), "local:b".into()))
    );
    assert_eq!(
        tab.shares[&(local("b/y").key().to_string(), "local:e".into())],
        1
    );
    assert!(
        !tab.shares
            .contains_key(&(local("b/y").key().to_string(), "local:a".into()))
    );
    assert!(tab.index.lapsing.is_empty());
}

#[test]
fn a_clients_grants_draw_on_its_sources_rate_and_a_redemptions_do_not() {
    let mut tab = table();
    let mut r = rng();
    for i in 0..OFFER_RATE.burst {
        let g = grant_of(&alloc::format!("alice/x{i}"), local("bob/y"));
        assert!(tab.grant(t(NOW), &mut r, g).is_ok(), "{i}");
    }
    let g = grant_of("alice/late", local("bob/y"));
    assert_eq!(
        tab.grant(t(NOW), &mut r, g).map(|_| ()),
        Err(LinkRefusal::RateLimited)
    );
    // Offers from the same source share the bucket.
    assert_eq!(
        tab.offer(t(NOW), &mut r, offer_of("alice/x", "carol/z"))
            .map(|_| ()),
        Err(LinkRefusal::RateLimited)
    );
    // Another namespace has its own; a redemption's grant is bounded by its passport instead.
    let g = grant_of("carol/x", local("bob/y"));
    assert!(tab.grant(t(NOW), &mut r, g).is_ok());
    let redeemed = Grant {
        origin: Some(LinkOrigin {
            passport: "P00000001".into(),
            issued_by: None,
            redeemed_by: None,
        }),
        ..grant_of("alice/p", addr("airc://partner.example/q/r"))
    };
    assert!(tab.grant(t(NOW), &mut r, redeemed).is_ok());
    let g = grant_of("alice/late", local("bob/y"));
    assert!(tab.grant(t(NOW + 1), &mut r, g).is_ok(), "a second later");
}

/// The other realm's decline of a local offer, declaring it declined at `declined_at`.
fn remote_decline(offer: &Link, declined_at: u64) -> Msg {
    let mut l = offer.clone();
    l.state = LinkState::Declined;
    l.declined_at = Some(t(declined_at));
    let (from, to) = (l.b.clone(), l.a.clone());
    ControlMessage::new(Action::Decline, l, from, to).to_msg("d".into(), t(NOW))
}

#[test]
fn when_a_declined_record_is_forgotten_is_not_the_other_realms_to_say() {
    let keep = LINK_RETENTION.as_secs();
    let offer = |tab: &mut LinkTable| {
        let o = Offer {
            peer: addr(Y),
            ..offer_of("alice/x", "bob/y")
        };
        tab.offer(t(NOW), &mut rng(), o).unwrap().link
    };
    // Declined "at 1970": kept from when the offer was made, not forgotten at once.
    let mut tab = table();
    let o = offer(&mut tab);
    tab.receive(t(NOW + 5), &remote_decline(&o, 1)).unwrap();
    assert!(tab.forget_lapsed(t(NOW + keep - 1)).is_empty());
    assert_eq!(
        tab.forget_lapsed(t(NOW + keep)),
        core::slice::from_ref(&o.id)
    );
    // Declined "in 2400": taken as declined when it came, not kept for centuries.
    let mut tab = table();
    let o = offer(&mut tab);
    tab.receive(t(NOW + 5), &remote_decline(&o, 13_500_000_000))
        .unwrap();
    assert_eq!(tab.get(&o.id).unwrap().declined_at, Some(t(NOW + 5)));
    assert_eq!(
        tab.forget_lapsed(t(NOW + 5 + keep)),
        core::slice::from_ref(&o.id)
    );
}
