//! `minca::relay_url` on arbitrary text: a valid relay URL or a named error, never a panic; a valid
//! URL keeps its text, dials without its kind, and is still valid when checked again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::minca::relay_url::{self, RelayKind, RelayUrl};

fuzz_target!(|text: &str| {
    if let Ok(url) = RelayUrl::parse(text) {
        assert_eq!(url.as_str(), text);
        assert_eq!(RelayUrl::parse(url.as_str()).as_ref(), Ok(&url));
        let dial = url.dial_url();
        assert!(dial.starts_with("wss://") || dial.starts_with("ws://"));
        // The dial URL is itself a valid plain relay URL: a Minca relay's.
        let plain = RelayUrl::parse(&dial).expect("dial URL is valid");
        assert_eq!(plain.kind(), &RelayKind::Minca);
        assert_eq!(plain.host(), url.host());
    }
    // A list of the input's lines: passing over unspoken kinds never fails a list of valid URLs.
    let lines: Vec<&str> = text.lines().take(16).collect();
    if let Ok(usable) = relay_url::usable_relays(&lines) {
        assert!(usable.iter().all(RelayUrl::speaks));
    }
    let _ = relay_url::space_relays(&lines);
});
