//! NIP-44 v2 against the published test vectors (`vectors/meshstr/nip44.vectors.json`, from
//! paulmillr/nip44): conversation keys, message keys, padding, encryption with a fixed nonce,
//! long messages, and every invalid case refused.

use serde_json::Value;
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider};
use weft_proto::meshstr::nip44::{self, Nip44Error};

fn vectors() -> Value {
    let full = format!(
        "{}/../vectors/meshstr/nip44.vectors.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn b32(v: &Value) -> [u8; 32] {
    hex::decode_array(v.as_str().unwrap()).unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap()
}

fn sha256_hex(p: &dyn CryptoProvider, data: &[u8]) -> String {
    hex::encode(&p.sha256(&[data]))
}

#[test]
fn nip44_conversation_keys() {
    let p = default_provider();
    let v = vectors();
    let cases = v["v2"]["valid"]["get_conversation_key"].as_array().unwrap();
    assert_eq!(cases.len(), 35);
    for c in cases {
        let sk = Secp256k1Secret::from_bytes(b32(&c["sec1"]));
        let got = nip44::conversation_key(p, &sk, &b32(&c["pub2"])).unwrap();
        assert_eq!(hex::encode(&got), s(&c["conversation_key"]));
    }
    for c in v["v2"]["invalid"]["get_conversation_key"]
        .as_array()
        .unwrap()
    {
        let sk = Secp256k1Secret::from_bytes(b32(&c["sec1"]));
        assert!(
            nip44::conversation_key(p, &sk, &b32(&c["pub2"])).is_err(),
            "{}",
            c["note"]
        );
    }
}

#[test]
fn nip44_message_keys_and_padding() {
    let p = default_provider();
    let v = vectors();
    let mk = &v["v2"]["valid"]["get_message_keys"];
    let ck = b32(&mk["conversation_key"]);
    for k in mk["keys"].as_array().unwrap() {
        let got = nip44::message_keys(p, &ck, &b32(&k["nonce"]));
        assert_eq!(hex::encode(&got.chacha_key), s(&k["chacha_key"]));
        assert_eq!(hex::encode(&got.chacha_nonce), s(&k["chacha_nonce"]));
        assert_eq!(hex::encode(&got.hmac_key), s(&k["hmac_key"]));
    }
    for c in v["v2"]["valid"]["calc_padded_len"].as_array().unwrap() {
        let len = c[0].as_u64().unwrap() as usize;
        assert_eq!(
            nip44::calc_padded_len(len) as u64,
            c[1].as_u64().unwrap(),
            "{len}"
        );
    }
}

#[test]
fn nip44_encrypt_decrypt() {
    let p = default_provider();
    let v = vectors();
    for c in v["v2"]["valid"]["encrypt_decrypt"].as_array().unwrap() {
        let sk1 = Secp256k1Secret::from_bytes(b32(&c["sec1"]));
        let sk2 = Secp256k1Secret::from_bytes(b32(&c["sec2"]));
        let pub2 = p.schnorr_public_key(&sk2).unwrap();
        let pub1 = p.schnorr_public_key(&sk1).unwrap();
        let ck = nip44::conversation_key(p, &sk1, &pub2).unwrap();
        assert_eq!(hex::encode(&ck), s(&c["conversation_key"]));
        assert_eq!(ck, nip44::conversation_key(p, &sk2, &pub1).unwrap());
        let payload =
            nip44::encrypt_with_nonce(p, &ck, &b32(&c["nonce"]), s(&c["plaintext"])).unwrap();
        assert_eq!(payload, s(&c["payload"]));
        assert_eq!(
            nip44::decrypt(p, &ck, &payload).unwrap(),
            s(&c["plaintext"])
        );
    }
    for c in v["v2"]["valid"]["encrypt_decrypt_long_msg"]
        .as_array()
        .unwrap()
    {
        let plaintext = s(&c["pattern"]).repeat(c["repeat"].as_u64().unwrap() as usize);
        assert_eq!(
            sha256_hex(p, plaintext.as_bytes()),
            s(&c["plaintext_sha256"])
        );
        let ck = b32(&c["conversation_key"]);
        let payload = nip44::encrypt_with_nonce(p, &ck, &b32(&c["nonce"]), &plaintext).unwrap();
        assert_eq!(sha256_hex(p, payload.as_bytes()), s(&c["payload_sha256"]));
        assert_eq!(nip44::decrypt(p, &ck, &payload).unwrap(), plaintext);
    }
}

#[test]
fn nip44_invalid_payloads_and_lengths_are_refused() {
    let p = default_provider();
    let v = vectors();
    for len in v["v2"]["invalid"]["encrypt_msg_lengths"]
        .as_array()
        .unwrap()
    {
        let text = "a".repeat(len.as_u64().unwrap() as usize);
        assert_eq!(
            nip44::encrypt_with_nonce(p, &[1; 32], &[2; 32], &text),
            Err(Nip44Error::PlaintextLength)
        );
    }
    let cases = v["v2"]["invalid"]["decrypt"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    for c in cases {
        let got = nip44::decrypt(p, &b32(&c["conversation_key"]), s(&c["payload"]));
        assert!(got.is_err(), "{}: {got:?}", c["note"]);
    }
}
