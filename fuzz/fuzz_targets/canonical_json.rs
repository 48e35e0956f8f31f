//! Canonical JSON (meshstr) and JavaScript's JSON.stringify length on any JSON text: never a
//! panic, canonical form is a fixed point, and it parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::codec::{js, json};

fuzz_target!(|text: &str| {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let c = json::canonical(&v);
    let back: serde_json::Value = serde_json::from_str(&c).expect("canonical JSON is JSON");
    assert_eq!(json::canonical(&back), c);
    let _ = js::stringify_utf16_len(&v);
});
