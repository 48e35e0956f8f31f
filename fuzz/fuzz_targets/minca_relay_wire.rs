//! `minca::relay_wire` on arbitrary text, as a frame from a client and as one from a relay: a
//! message or a named error, never a panic; every parsed message re-serializes to text that parses
//! to the same message, and serializing is then a fixed point. Where the fast paths (`mail`,
//! `drop`, `fetch`) read the text at all, they read the message the general path (through a JSON
//! tree) reads, and `parse` always answers as the general path does; the borrowed readings
//! (`ClientMessage::read`, `RelayMessage::read_into` with a buffer in use) answer as `parse`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::minca::relay_wire::{
    ClientMessage, IceServers, MAX_CLIENT_FRAME_BYTES, RelayMessage,
};

fuzz_target!(|text: &str| {
    if let Some(fast) = ClientMessage::from_text_common(text) {
        assert_eq!(ClientMessage::parse_tree(text), Ok(fast));
    }
    if text.len() <= MAX_CLIENT_FRAME_BYTES {
        assert_eq!(ClientMessage::parse(text), ClientMessage::parse_tree(text));
    }
    // A relay's in-place reading answers as the owned one.
    assert_eq!(
        ClientMessage::read(text).map(ClientMessage::from),
        ClientMessage::parse(text)
    );
    // A client's reading into a kept buffer (holding an earlier mail's bytes) as one without.
    let mut kept = vec![7u8; 3];
    assert_eq!(
        RelayMessage::read_into(text, &mut kept).map(RelayMessage::from),
        RelayMessage::read(text).map(RelayMessage::from)
    );
    if let Some(fast) = RelayMessage::from_text_common(text) {
        assert_eq!(RelayMessage::parse_tree(text), Ok(fast));
    }
    assert_eq!(RelayMessage::parse(text), RelayMessage::parse_tree(text));
    if let Ok(m) = ClientMessage::parse(text) {
        let out = m.to_text();
        assert_eq!(ClientMessage::parse(&out).as_ref(), Ok(&m));
        assert_eq!(ClientMessage::parse(&out).map(|m| m.to_text()), Ok(out));
    }
    if let Ok(m) = RelayMessage::parse(text) {
        let out = m.to_text();
        assert_eq!(RelayMessage::parse(&out).as_ref(), Ok(&m));
        assert_eq!(RelayMessage::parse(&out).map(|m| m.to_text()), Ok(out));
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        if let Some(ice) = IceServers::from_relay(&value) {
            assert_eq!(IceServers::from_relay(&ice.to_payload()), Some(ice));
        }
    }
});
