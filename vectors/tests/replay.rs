//! Replays every vector the specs print (the data files beside this crate) against every crypto
//! provider weft ships.

use serde_json::Value;
use weft_proto::airc::passport::{self, Passport};
use weft_proto::airc::signing::{self, Signed};
use weft_proto::codec::{base64, hex};
use weft_proto::crypto::{CryptoProvider, Ed25519Seed, sigstring};
use weft_proto::minca::{auth, room::Room};
use weft_proto::nostr::event::{self as nostr_event, Event, EventError};

fn load(path: &str) -> Value {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("vector field {key} is not a string"))
}

/// The realm key of AIRC §18.2: the seed 0x01 … 0x20, as the vector file gives it.
fn spec_seed(v: &Value) -> Ed25519Seed {
    let seed: [u8; 32] = base64::decode(s(v, "seed_base64"))
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        seed,
        core::array::from_fn(|i| i as u8 + 1),
        "the seed is 0x01 … 0x20"
    );
    Ed25519Seed::from_bytes(seed)
}

fn providers() -> Vec<&'static dyn CryptoProvider> {
    vec![
        weft_proto::crypto::default_provider(),
        &weft_drivers::fast_crypto::FastCrypto,
    ]
}

#[test]
fn minca_rooms_topics_and_room_keys() {
    let v = load("minca/rooms.json");
    for c in v["cases"].as_array().unwrap() {
        for p in providers() {
            let room = Room::of_space(p, s(c, "space_id"));
            assert_eq!(room.as_str(), s(c, "room"), "{}", p.name());
            assert_eq!(room.topic(p), s(c, "topic"), "{}", p.name());
            assert_eq!(room.topic(p).len(), 43);
            assert_eq!(
                hex::encode(&room.key(p)),
                s(c, "room_key_hex"),
                "{}",
                p.name()
            );
        }
    }
}

#[test]
fn minca_mesh_proof_verifies_and_fails_on_any_changed_byte() {
    let v = load("minca/mesh-proof.json");
    for c in v["cases"].as_array().unwrap() {
        let t = auth::mesh_transcript(
            s(c, "space_id"),
            s(c, "prover_did"),
            s(c, "verifier_did"),
            s(c, "nonce"),
            s(c, "prover_cert"),
            s(c, "verifier_cert"),
        );
        assert_eq!(t, s(c, "transcript"));
        let sig = s(&c["proof"], "sig");
        for p in providers() {
            assert!(auth::verify(p, s(c, "prover_did"), &t, sig), "{}", p.name());
            // Against the verifier's key it must fail: the proof names who made it.
            assert!(
                !auth::verify(p, s(c, "verifier_did"), &t, sig),
                "{}",
                p.name()
            );
            let bytes = t.as_bytes();
            for i in 0..bytes.len() {
                let mut changed = bytes.to_vec();
                changed[i] ^= 0x01;
                let changed =
                    String::from_utf8(changed).expect("flipping bit 0 of ASCII stays ASCII");
                assert!(
                    !auth::verify(p, s(c, "prover_did"), &changed, sig),
                    "{}: byte {i}",
                    p.name()
                );
            }
        }
    }
}

#[test]
fn airc_signing_keys_messages_hellos_and_welcomes() {
    let v = load("airc/signing.json");
    let seed = spec_seed(&v);

    for p in providers() {
        let public = p.ed25519_public_key(&seed);
        assert_eq!(base64::encode(&public), s(&v, "public_base64"));
        assert_eq!(sigstring::kid(p, &public), s(&v, "kid"));
        assert_eq!(
            format!("v=airc1 k=ed25519 p={}", base64::encode(&public)),
            s(&v["dns"], "txt")
        );

        let m = &v["message"];
        let f = &m["frame"];
        let canonical = Signed {
            id: s(f, "id"),
            from: s(f, "from"),
            to: s(f, "to"),
            ts_ms: signing::ts_ms(f["ts"].as_f64().unwrap()).unwrap(),
            kind: f["type"].as_str(),
            re: f["re"].as_str(),
            body: s(f, "body"),
        }
        .canonical();
        let h = &v["hello"];
        let hello = signing::hello_canonical(
            s(h, "dialler"),
            s(h, "target"),
            h["ts"].as_u64().unwrap(),
            s(h, "nonce"),
        );
        let w = &v["welcome"];
        let welcome = signing::welcome_canonical(s(w, "acceptor"), s(w, "dialler"), s(w, "nonce"));

        for (vector, made) in [(m, canonical), (h, hello), (w, welcome)] {
            assert_eq!(made, s(vector, "canonical"));
            // Ed25519 is deterministic: the signature is reproduced byte for byte.
            let sig = sigstring::sign(p, &seed, made.as_bytes());
            assert_eq!(sig.to_string(), s(vector, "sig"), "{}", p.name());
            let parsed = sigstring::SigString::parse(s(vector, "sig")).unwrap();
            assert!(sigstring::verify(p, &public, made.as_bytes(), &parsed));
            assert!(!sigstring::verify(
                p,
                &public,
                format!("{made} ").as_bytes(),
                &parsed
            ));
        }
    }
}

#[test]
fn airc_passport_line_hash_and_url() {
    let v = load("airc/passport.json");
    let pp = Passport::parse(s(&v, "line")).unwrap();
    assert_eq!(pp.issuer, s(&v, "issuer"));
    assert_eq!(pp.endpoint.as_deref(), Some(s(&v, "endpoint")));
    assert_eq!(pp.token, s(&v, "token"));
    assert_eq!(pp.line(), s(&v, "line"));
    assert_eq!(pp.url(s(&v, "web_base")), s(&v, "url"));
    assert_eq!(Passport::parse(s(&v, "url")).unwrap(), pp);
    for p in providers() {
        assert_eq!(
            passport::token_hash(p, &pp.token),
            s(&v, "token_hash"),
            "{}",
            p.name()
        );
    }
}

#[test]
fn airc_dns_txt_key_record() {
    use weft_proto::airc::address::Authority;
    use weft_proto::airc::discovery::{self, PublishedKey};

    let v = load("airc/dns-txt.json");
    let seed = spec_seed(&v);
    let public = weft_proto::crypto::default_provider().ed25519_public_key(&seed);
    assert_eq!(base64::encode(&public), s(&v, "public_base64"));

    let realm = Authority::parse(s(&v, "realm")).unwrap();
    assert_eq!(
        discovery::txt_name(&realm).map(|n| format!("{n}.")),
        Some(s(&v, "name").to_owned())
    );
    assert_eq!(
        discovery::parse_key_record(s(&v, "txt")),
        Ok(Some(PublishedKey::Ed25519(public)))
    );
    assert_eq!(discovery::keys_from_txt(&[s(&v, "txt")]), vec![public]);
}

#[test]
fn nostr_published_events_verify_and_any_changed_byte_fails() {
    let v = load("nostr/events.json");
    for c in v["signed"].as_array().unwrap() {
        let event = Event::from_value(&c["event"]).unwrap();
        assert_eq!(event.id_hex(), s(&c["event"], "id"));
        for p in providers() {
            assert_eq!(event.compute_id(p), event.id, "{}", p.name());
            assert_eq!(event.verify(p), Ok(()), "{}", p.name());
            let mut changed = event.clone();
            changed.content.push(' ');
            assert_eq!(
                changed.verify(p),
                Err(EventError::IdMismatch),
                "{}",
                p.name()
            );
            let mut forged = event.clone();
            forged.sig[63] ^= 1;
            assert_eq!(
                forged.verify(p),
                Err(EventError::BadSignature),
                "{}",
                p.name()
            );
        }
        // What parses re-serializes to an equal event.
        assert_eq!(Event::parse(&event.to_json()), Ok(event));
    }
    for c in v["ids"].as_array().unwrap() {
        let pubkey: [u8; 32] = hex::decode(s(c, "pubkey")).unwrap().try_into().unwrap();
        let tags: Vec<Vec<String>> = serde_json::from_value(c["tags"].clone()).unwrap();
        let text = nostr_event::id_serialization(
            &pubkey,
            c["created_at"].as_u64().unwrap(),
            u16::try_from(c["kind"].as_u64().unwrap()).unwrap(),
            &tags,
            s(c, "content"),
        );
        for p in providers() {
            assert_eq!(
                hex::encode(&p.sha256(&[text.as_bytes()])),
                s(c, "id"),
                "{}",
                p.name()
            );
        }
    }
}

#[test]
fn nostr_events_signed_by_either_provider_verify_under_the_other() {
    let secret = weft_proto::crypto::Secp256k1Secret::from_bytes([7; 32]);
    let tags = vec![vec![
        "x".to_string(),
        "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0".to_string(),
    ]];
    for signer in providers() {
        let pubkey = signer.schnorr_public_key(&secret).unwrap();
        let text = nostr_event::id_serialization(&pubkey, 1_790_000_000, 24_733, &tags, "AZ3k");
        let id = signer.sha256(&[text.as_bytes()]);
        let event = Event {
            id,
            pubkey,
            created_at: 1_790_000_000,
            kind: 24_733,
            tags: tags.clone(),
            content: "AZ3k".to_string(),
            sig: signer.schnorr_sign(&secret, &id, &[3; 32]).unwrap(),
        };
        for verifier in providers() {
            assert_eq!(
                event.verify(verifier),
                Ok(()),
                "{} → {}",
                signer.name(),
                verifier.name()
            );
        }
    }
}

/// Spec 002 §2: the relay key derived from `SECRET` as nostream derives it (HMAC-SHA256 keyed by
/// `SECRET` over `info.relay_url`), so a nostream operator's relay keeps its pubkey under weft;
/// `RELAY_PRIVATE_KEY` with the same scalar gives the same pubkey.
#[test]
fn nostr_relay_identity_derived_from_secret_as_nostream_does() {
    use weft_proto::codec::bech32;
    use weft_proto::nostr::peering::identity::{RelayKey, derive_secret};
    let v = load("nostr/relay-identity.json");
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for c in cases {
        for p in providers() {
            let scalar = derive_secret(p, s(c, "secret").as_bytes(), s(c, "relay_url"));
            assert_eq!(
                hex::encode(&scalar),
                s(c, "private_key_hex"),
                "{}",
                p.name()
            );
            let k = RelayKey::from_env(p, None, Some(s(c, "secret")), s(c, "relay_url")).unwrap();
            assert_eq!(k.pubkey_hex(), s(c, "pubkey_hex"), "{}", p.name());
            assert_eq!(k.npub(), s(c, "npub"), "{}", p.name());
            assert_eq!(bech32::decode_npub(s(c, "npub")).unwrap(), k.pubkey());
            let explicit = RelayKey::from_env(p, Some(s(c, "private_key_hex")), None, "").unwrap();
            assert_eq!(explicit.pubkey(), k.pubkey(), "{}", p.name());
        }
    }
}
