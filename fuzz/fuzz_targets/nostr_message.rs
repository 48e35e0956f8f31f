//! `nostr::message` on arbitrary text, as a frame from a client and as one from a relay: a message
//! or a named error, never a panic; every parsed message re-serializes to text that parses to the
//! same message, and serializing is then a fixed point. Events that parse re-serialize likewise,
//! and checking one (id, signature, NIP-40 expiration, NIP-42 `AUTH`) never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::core::Timestamp;
use weft_proto::crypto::default_provider;
use weft_proto::nostr::message::{ClientMessage, RelayMessage};
use weft_proto::nostr::{Event, auth, expiration};

fuzz_target!(|text: &str| {
    if let Ok(m) = ClientMessage::parse(text) {
        let out = m.to_text();
        assert_eq!(ClientMessage::parse(&out).as_ref(), Ok(&m));
        assert_eq!(ClientMessage::parse(&out).map(|m| m.to_text()), Ok(out));
        if let ClientMessage::Auth(e) | ClientMessage::Event(e) = &m {
            let _ = auth::check(
                default_provider(),
                e,
                Timestamp::from_secs(e.created_at),
                "wss://r.example/",
                "c",
            );
        }
    }
    if let Ok(m) = RelayMessage::parse(text) {
        let out = m.to_text();
        assert_eq!(RelayMessage::parse(&out).as_ref(), Ok(&m));
        assert_eq!(RelayMessage::parse(&out).map(|m| m.to_text()), Ok(out));
    }
    if let Ok(e) = Event::parse(text) {
        let out = e.to_json();
        assert_eq!(Event::parse(&out).as_ref(), Ok(&e));
        let _ = e.verify(default_provider());
        let _ = expiration::is_expired(&e, Timestamp::ZERO);
    }
});
