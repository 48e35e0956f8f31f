//! NAP-MESH's napplet face (`circle::napplet`) on arbitrary text, as a napplet's message and as
//! the shell's reply: a request or a named error (with as much of the request as could be read),
//! never a panic; a request re-serializes to text that reads as the same request, a reply to text
//! that reads as the same reply, and a refused `mesh.blobs` is never cut short.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::circle::MAX_HASHES;
use weft_proto::circle::napplet::{Reply, Request, WireError};

fuzz_target!(|text: &str| {
    match Request::parse(text) {
        Ok(r) => {
            let out = r.to_text();
            assert_eq!(Request::parse(&out).as_ref(), Ok(&r));
            if let Request::Blobs { hashes, .. } = &r {
                assert!(hashes.len() <= MAX_HASHES);
            }
        }
        Err(e) => {
            if e.error == WireError::TooManyHashes {
                assert!(e.id.is_some());
            }
        }
    }
    if let Some(r) = Reply::parse(text) {
        let out = r.to_text();
        assert_eq!(Reply::parse(&out).as_ref(), Some(&r));
        assert_eq!(Reply::parse(&out).map(|r| r.to_text()), Some(out));
    }
});
