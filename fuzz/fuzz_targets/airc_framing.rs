//! AIRC §3.2 framing: arbitrary bytes pushed in arbitrary chunks never panic; the decoder never
//! holds more than the frame limit plus one chunk; every frame it yields writes back to one line
//! that reads as a frame again; and where the fast path for `msg` and `ack` reads a line at all,
//! it reads the frame the general path (through a JSON tree) reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::airc::frame::Frame;
use weft_proto::airc::framing::{FrameDecoder, MAX_FRAME_BYTES, decode_line, encode};

fuzz_target!(|input: (Vec<u16>, Vec<u8>)| {
    let (cuts, bytes) = input;
    if let Some(fast) = core::str::from_utf8(&bytes)
        .ok()
        .and_then(Frame::from_text_common)
    {
        let text = core::str::from_utf8(&bytes).unwrap_or_default();
        let general = serde_json::from_str(text).map(|v| Frame::from_json(&v));
        assert_eq!(general.ok(), Some(Ok(fast)));
    }
    let mut d = FrameDecoder::new();
    let mut rest = &bytes[..];
    let mut cuts = cuts.into_iter();
    while !rest.is_empty() {
        // Chunk sizes come from the input, so every split of the stream gets explored.
        let n = cuts
            .next()
            .map_or(rest.len(), |c| usize::from(c).clamp(1, rest.len()));
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        d.push(chunk);
        assert!(d.buffered() <= MAX_FRAME_BYTES + chunk.len());
        for result in d.by_ref() {
            if let Ok(frame) = result {
                let line = encode(&frame);
                assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                // Not compared for equality: a float may come back one ulp off through serde_json's
                // default (not round-trip exact) parser, which is not a framing bug.
                assert!(decode_line(&line[..line.len() - 1]).is_ok());
            }
        }
    }
});
