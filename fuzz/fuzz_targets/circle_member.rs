//! NAP-MESH's member wire (`circle::member`, `["MESH", {meta}, <NIP-01 message>]`) on arbitrary
//! text: a frame or a named error, never a panic; every frame re-serializes to text that reads as
//! the same frame, and serializing is then a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::circle::MAX_HASHES;
use weft_proto::circle::member::MemberFrame;

fuzz_target!(|text: &str| {
    if let Ok(f) = MemberFrame::parse(text) {
        let out = f.to_text();
        assert_eq!(MemberFrame::parse(&out).as_ref(), Ok(&f));
        assert_eq!(MemberFrame::parse(&out).map(|f| f.to_text()), Ok(out));
        if let MemberFrame::Have { hashes, .. } | MemberFrame::Has { hashes, .. } = &f {
            assert!(hashes.len() <= MAX_HASHES);
        }
    }
});
