//! AIRC §2 addresses and §2.7 patterns: any text is refused or read, never a panic; a parsed
//! address re-parses from its canonical form to the same key and fragment, and a parsed pattern
//! from its display to the same pattern.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::airc::address::{Address, Authority, Face, Namespace};
use weft_proto::airc::pattern::Pattern;

fuzz_target!(|text: &str| {
    let parsed = Address::parse(text);
    if let Ok(a) = &parsed {
        let again = Address::parse(&a.to_string()).expect("canonical form re-parses");
        assert_eq!(again.key(), a.key());
        assert_eq!(again.fragment(), a.fragment());
        assert!(a.to_string().len() <= 1024);
    }
    let realm = Authority::parse("example.com").expect("valid realm");
    let ns = Namespace::parse("alice").expect("valid namespace");
    let face = Face::Client {
        realm: &realm,
        namespace: &ns,
    };
    if let Ok(a) = Address::resolve(text, face) {
        let again = Address::parse(&a.to_string()).expect("resolved form re-parses");
        assert_eq!(again.key(), a.key());
    }
    if let Ok(p) = Pattern::parse(text) {
        let again = Pattern::parse(&p.to_string()).expect("pattern display re-parses");
        assert_eq!(again, p);
        if let Ok(a) = &parsed {
            let _ = p.matches(a);
        }
    }
});
