//! Size probe: the Nostr feature alone (NIP-01 messages and events, NIP-40 expiry, NIP-42 auth).
//! Nostr has no machine of its own; its entry points are the message codecs and event checks, all
//! driven from the text on stdin.

use std::hint::black_box;
use std::io::Read;

use weft_proto::core::Timestamp;
use weft_proto::crypto::{CryptoProvider, default_provider};
use weft_proto::nostr::expiration::is_expired;
use weft_proto::nostr::{ClientMessage, Event, RelayMessage, auth};

fn main() {
    // Behind black_box as the dyn trait object machines take, so every probe keeps the same,
    // whole provider and `probe - crypto probe` is the protocol's own code.
    let crypto: &'static dyn CryptoProvider = black_box(default_provider());
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).unwrap_or(0);
    let now = Timestamp::from_millis(black_box(1_790_000_000_000));
    let mut score = 0usize;
    if let Ok(m) = ClientMessage::parse(&text) {
        score += m.to_text().len();
    }
    if let Ok(m) = RelayMessage::parse(&text) {
        score += m.to_text().len();
    }
    if let Ok(e) = Event::parse(&text) {
        score += usize::from(e.verify(crypto).is_ok());
        score += usize::from(is_expired(&e, now));
        score +=
            usize::from(auth::check(crypto, &e, now, "wss://relay.example", "challenge").is_ok());
        score += e.to_json().len();
    }
    score += auth::unsigned(now, "wss://relay.example", &text).tags.len();
    println!("{score}");
}
