//! meshstr's parsers and validators on arbitrary text: multikeys and the X25519 agreement-key
//! check, a receipt body, a hop path, a `counters` object, a grant body, a NIP-59 rumor, a NIP-44
//! payload, and any Nostr event through every kind's validator, a reader's report check, a
//! subject's grant opening and a recipient's gift-wrap opening. A value or a named refusal, never
//! a panic; every receipt, path, counters and grant body that reads writes back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::crypto::Secp256k1Secret;
use weft_proto::crypto::default_provider;
use weft_proto::meshstr::hop;
use weft_proto::meshstr::keys::{KeyKind, did_nostr_key, parse_multikey};
use weft_proto::meshstr::limits::Counters;
use weft_proto::meshstr::receipt::Receipt;
use weft_proto::meshstr::{events, giftwrap, grant, handover, nip44, report};
use weft_proto::nostr::Event;

fuzz_target!(|text: &str| {
    let _ = did_nostr_key(text);
    let _ = weft_proto::meshstr::schema::parse_version(text);
    for k in [KeyKind::Node, KeyKind::Agreement, KeyKind::Transport] {
        if let Some(key) = parse_multikey(k, text) {
            assert_eq!(weft_proto::meshstr::keys::multikey(k, &key), text);
            if k == KeyKind::Agreement {
                let _ = weft_proto::meshstr::keys::check_agreement_key(&key);
            }
        }
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        if let Ok(r) = Receipt::from_value(&v) {
            assert_eq!(Receipt::from_value(&r.to_value()), Ok(r.clone()));
            let _ = r.verify(default_provider(), &[1; 32]);
        }
        if let Ok(path) = hop::path_from_value(&v) {
            let back = serde_json::Value::Array(path.iter().map(hop::Hop::to_value).collect());
            assert_eq!(hop::path_from_value(&back), Ok(path.clone()));
            let _ = hop::verify_path(default_provider(), &[0; 32], &path);
        }
        let _ = weft_proto::meshstr::compute::JobReceipt::from_value(&v);
        let _ = handover::Link::from_value(&v);
        if let Ok(c) = Counters::from_value(&v) {
            assert_eq!(Counters::from_value(&c.to_value()), Ok(c));
        }
        if let Ok(b) = grant::GrantBody::from_value(&v) {
            assert!(b.limits.within(b.tier));
            assert_eq!(grant::GrantBody::from_value(&b.to_value()), Ok(b.clone()));
        }
        if let Ok(r) = giftwrap::Rumor::from_value(default_provider(), &v) {
            assert_eq!(
                giftwrap::Rumor::from_value(default_provider(), &r.to_value()),
                Ok(r.clone())
            );
        }
    }
    if let Ok(links) = handover::chain_from_content(text) {
        assert!(!links.is_empty() && links.len() <= handover::MAX_LINKS);
        let _ = handover::check_chain(default_provider(), &links);
    }
    if let Ok(plain) = nip44::decrypt(default_provider(), &[1; 32], text) {
        assert!((nip44::MIN_PLAINTEXT..=nip44::MAX_PLAINTEXT).contains(&plain.len()));
    }
    if let Ok(e) = Event::parse(text) {
        let _ = events::validate(&e, e.created_at);
        let _ = report::admit(default_provider(), &e, e.created_at);
        let _ = grant::open(
            default_provider(),
            &Secp256k1Secret::from_bytes([1; 32]),
            &e,
        );
        let _ = grant::open_grant(
            default_provider(),
            &Secp256k1Secret::from_bytes([1; 32]),
            &e,
        );
        let _ = giftwrap::unwrap(
            default_provider(),
            &Secp256k1Secret::from_bytes([1; 32]),
            &e,
        );
        let _ = events::descriptor(&e, e.created_at, 0);
        let _ = events::heartbeat(&e);
        let _ = handover::check_claim(default_provider(), &e, e.created_at);
        let _ = weft_proto::meshstr::compute::read_offer(&e, e.created_at);
    }
});
