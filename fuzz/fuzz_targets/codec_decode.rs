//! Every decoder in `proto::codec` on arbitrary text: an error or a value, never a panic, and
//! whatever decodes re-encodes to the same text (the decoders accept only canonical input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::codec::{base32, base58btc, base64, base64url, bech32, did_key::DidKey, hex};

fuzz_target!(|text: &str| {
    if let Ok(b) = base64url::decode(text) {
        assert_eq!(base64url::encode(&b), text);
    }
    if let Ok(b) = base64::decode(text) {
        assert_eq!(base64::encode(&b), text);
    }
    if let Ok(b) = base32::decode(text) {
        assert_eq!(base32::encode(&b), text);
    }
    if let Ok(b) = base58btc::decode(text) {
        assert_eq!(base58btc::encode(&b), text);
    }
    if let Ok(b) = hex::decode(text) {
        assert_eq!(hex::encode(&b), text.to_ascii_lowercase());
    }
    let _ = bech32::decode(text);
    if let Ok(d) = DidKey::parse(text) {
        assert_eq!(d.to_did(), text);
    }
});
