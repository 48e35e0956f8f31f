//! The `__signal` frame (§7.1, §8) written straight from a [`Signal`].
//!
//! Signals are nearly all of a mesh's traffic: each is flooded through a room until its hops run
//! out, and a node writes each one it passes on. [`write()`] serializes the frame from the
//! signal's fields, without a JSON tree: its members always come in one order (`frame::ENVELOPE`,
//! `LAYOUT`), and the receiving side, [`signal_peek`](super::signal_peek), reads a frame laid
//! out so without matching keys.

use alloc::vec::Vec;

use arrayvec::ArrayString;

use super::frame::{self, SIGNAL};
use super::introduction::{Signal, SignalRef};

/// A `__signal` payload as written, between its values: the members in the order a
/// `serde_json::Map` keeps them (sorted), so the bytes are those of the payload built as a JSON
/// tree, and without whitespace. The values go between the pieces in this order: `at`, `sdp`,
/// `data.type`, `hops`, `kind`, `origin`, `sig`, `target`.
pub(super) const LAYOUT: [&[u8]; 9] = [
    br#"{"at":"#,
    br#","data":{"sdp":"#,
    br#","type":"#,
    br#"},"hops":"#,
    br#","kind":"#,
    br#","origin":"#,
    br#","sig":"#,
    br#","target":"#,
    b"}",
];

/// The bytes of a `__signal` frame carrying `signal` in `room`, from `from`: what
/// [`Frame::to_bytes`](super::frame::Frame::to_bytes) gives for the frame holding
/// [`Signal::to_payload`], laid out as `frame::ENVELOPE` and `LAYOUT` say.
pub fn write(room: &str, from: &str, signal: &Signal) -> Vec<u8> {
    write_ref(room, from, &signal.as_ref())
}

/// [`write()`] from a signal still borrowed from the frame it came in: a node passes a signal
/// on without an owned copy.
///
/// Laid out by hand as `frame::ENVELOPE` and [`LAYOUT`] say, into one allocation of its size
/// (exact unless a text holds an escape, as an SDP's line ends are): serde_json (without `std`) writes only into a `Vec` it grows itself from 128 bytes, two
/// or three times for a signal frame. The bytes are those `frame::write` gives (held to it in
/// the tests), its strings written by `frame::json_str` (copied when plain, else by serde_json).
pub(crate) fn write_ref(room: &str, from: &str, signal: &SignalRef<'_>) -> Vec<u8> {
    let (at, hops) = (decimal(signal.at), decimal(signal.hops));
    let kind = signal.kind.as_str();
    let strs = [
        from,
        &signal.sdp,
        kind,
        kind,
        signal.origin,
        &signal.sig,
        signal.target,
        room,
        SIGNAL,
    ];
    let size = frame::ENVELOPE
        .iter()
        .chain(&LAYOUT)
        .map(|p| p.len())
        .sum::<usize>()
        + strs.iter().map(|s| frame::json_str_len(s)).sum::<usize>()
        + at.len()
        + hops.len();
    let mut out = Vec::with_capacity(size);
    let [e_from, e_payload, e_room, e_type, e_end] = frame::ENVELOPE;
    let [
        l_at,
        l_sdp,
        l_type,
        l_hops,
        l_kind,
        l_origin,
        l_sig,
        l_target,
        l_end,
    ] = LAYOUT;
    out.extend_from_slice(e_from);
    frame::json_str(&mut out, from);
    out.extend_from_slice(e_payload);
    out.extend_from_slice(l_at);
    out.extend_from_slice(at.as_bytes());
    out.extend_from_slice(l_sdp);
    frame::json_str(&mut out, &signal.sdp);
    out.extend_from_slice(l_type);
    frame::json_str(&mut out, kind);
    out.extend_from_slice(l_hops);
    out.extend_from_slice(hops.as_bytes());
    out.extend_from_slice(l_kind);
    frame::json_str(&mut out, kind);
    out.extend_from_slice(l_origin);
    frame::json_str(&mut out, signal.origin);
    out.extend_from_slice(l_sig);
    frame::json_str(&mut out, &signal.sig);
    out.extend_from_slice(l_target);
    frame::json_str(&mut out, signal.target);
    out.extend_from_slice(l_end);
    out.extend_from_slice(e_room);
    frame::json_str(&mut out, room);
    out.extend_from_slice(e_type);
    frame::json_str(&mut out, SIGNAL);
    out.extend_from_slice(e_end);
    out
}

/// `n` in decimal, as serde_json writes an integer.
fn decimal(n: u64) -> ArrayString<20> {
    use core::fmt::Write;
    let mut s = ArrayString::new();
    // 20 digits hold every u64.
    let _ = write!(s, "{n}");
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::minca::mesh::frame::Frame;
    use crate::minca::mesh::introduction::{MAX_SDP_CHARS, SignalKind};
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// What the general path reads: a `__signal` frame's room and its payload as a signal.
    pub(crate) fn general(bytes: &[u8]) -> Option<(String, Signal)> {
        let frame = Frame::parse(bytes).ok()?;
        if frame.kind != SIGNAL {
            return None;
        }
        Some((frame.room, Signal::parse(&frame.payload).ok()?))
    }

    pub(crate) fn signal() -> Signal {
        Signal {
            origin: "did:key:zSource".into(),
            target: "did:key:zTarget".into(),
            kind: SignalKind::Offer,
            sdp: "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n".into(),
            at: 1_790_000_000_000,
            sig: "c2ln".into(),
            hops: 3,
        }
    }

    /// A frame text with the payload's fields as given (raw JSON), around a fixed room.
    pub(crate) fn frame(payload: &str) -> String {
        format!(r#"{{"from":"did:key:zPeer","payload":{payload},"room":"r1","type":"__signal"}}"#)
    }

    pub(crate) const GOOD: &str = r#"{"origin":"did:key:zSource","target":"did:key:zTarget","kind":"offer","data":{"type":"offer","sdp":"v=0"},"at":5,"sig":"c2ln","hops":2}"#;

    #[test]
    fn a_written_signal_frame_is_the_frame_built_as_json() {
        let mut odd = signal();
        odd.kind = SignalKind::Answer;
        odd.sdp = "a\"b\\c\u{1}\u{7f}é😀\r\n</script>".into();
        odd.sig = "-_\"".into();
        odd.hops = u64::MAX;
        odd.at = 0;
        for (room, s) in [("r1", signal()), ("r\"\u{0}é", odd)] {
            let built = Frame::new(room, SIGNAL, s.to_payload()).to_bytes("did:key:zMe");
            assert_eq!(write(room, "did:key:zMe", &s), built);
            assert_eq!(general(&built), Some((room.into(), s)));
        }
        // The payload is the one JSON tree §8 describes, members and all.
        assert_eq!(
            signal().to_payload(),
            serde_json::json!({
                "origin": "did:key:zSource",
                "target": "did:key:zTarget",
                "kind": "offer",
                "data": {"type": "offer", "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"},
                "at": 1_790_000_000_000u64,
                "sig": "c2ln",
                "hops": 3,
            })
        );
    }

    #[test]
    fn a_signal_frame_laid_out_by_hand_is_what_serde_json_writes() {
        let every: String = (0u8..0x80)
            .map(char::from)
            .chain(['é', '😀', '\u{2028}'])
            .collect();
        let mut s = signal();
        for (room, sdp, sig) in [("r1", "", ""), (every.as_str(), every.as_str(), "\\\"/")] {
            s.sdp = sdp.into();
            s.sig = sig.into();
            for (at, hops) in [(0, 0), (9, 10), (u64::MAX, 1_790_000_000_000)] {
                (s.at, s.hops) = (at, hops);
                let by_serde = frame::write(room, SIGNAL, every.as_str(), &s);
                assert_eq!(write_ref(room, every.as_str(), &s.as_ref()), by_serde);
                assert_eq!(
                    write(room, "did:key:zMe", &s),
                    frame::write(room, SIGNAL, "did:key:zMe", &s)
                );
            }
        }
    }

    /// The tricky frame texts the peek is held to the general path on: duplicate
    /// and escaped keys and values, numbers of every form, missing, extra and mistyped fields,
    /// what serde skips unchecked, and SDPs either side of the limit.
    pub(crate) fn tricky_texts() -> Vec<String> {
        let swap = |from: &str, to: &str| frame(&GOOD.replacen(from, to, 1));
        let mut texts: Vec<String> = alloc::vec![
            // Duplicate keys, plain and escaped, at both levels.
            frame(GOOD).replacen('{', r#"{"room":"r0","#, 1),
            frame(GOOD).replacen('{', r#"{"ro\u006fm":"r0","#, 1),
            frame(GOOD).replacen('{', r#"{"type":"live","#, 1),
            frame(GOOD).replacen('{', r#"{"payload":1,"#, 1),
            swap("{", r#"{"at":6,"#),
            swap("{", r#"{"origin":"did:key:zOther","#),
            swap(r#""sdp""#, r#""sdp":"a","sdp""#),
            swap(r#""hops":2"#, r#""hops":2,"hops":"x""#),
            // Escaped keys and values.
            swap(r#""origin""#, r#""\u006frigin""#),
            swap("v=0", r"v=0\r\n\u00e9\ud83d\ude00"),
            swap("v=0", r"\ud800"),
            swap(r#""offer","data""#, r#""\u006ffer","data""#),
            frame(GOOD).replace("__signal", r"__sign\u0061l"),
            frame(GOOD).replace(r#""r1""#, r#""r\"1""#),
            swap("did:key:zTarget", r"did:key:z\u0054arget"),
        ];
        // Numbers: floats, negatives, huge, exponents.
        for at in [
            "5.0",
            "5.5",
            "-5",
            "-0",
            "1e3",
            "18446744073709551615",
            "18446744073709551616",
            "9007199254740993",
            "9007199254740992.0",
            "1e400",
        ] {
            texts.push(swap(r#""at":5"#, &format!(r#""at":{at}"#)));
        }
        for hops in [
            "2.0",
            "-1",
            "1e1",
            "null",
            r#""2""#,
            "true",
            "{}",
            "99999999999999999999",
        ] {
            texts.push(swap(r#""hops":2"#, &format!(r#""hops":{hops}"#)));
        }
        // Missing and extra fields, wrong types, nested junk.
        for field in [
            r#""hops":2"#,
            r#""sig":"c2ln","#,
            r#""at":5,"#,
            r#""origin":"did:key:zSource","#,
        ] {
            texts.push(swap(field, ""));
        }
        texts.push(swap("{", r#"{"extra":[1,{"a":null}],"#));
        // What serde would skip unchecked in an unknown field, but a JSON tree refuses.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for junk in [
            r#""\ud800""#,
            "1e400",
            "-1e400",
            deep.as_str(),
            r#""\udc00\ud800""#,
        ] {
            texts.push(frame(GOOD).replacen('{', &format!(r#"{{"extra":{junk},"#), 1));
            texts.push(frame(GOOD).replace(r#""did:key:zPeer""#, junk));
            texts.push(swap("{", &format!(r#"{{"extra":{junk},"#)));
        }
        texts.push(swap(r#""sdp":"v=0""#, r#""sdp":"v=0","more":{"x":[true]}"#));
        texts.push(swap(r#""sig":"c2ln""#, r#""sig":7"#));
        texts.push(swap(r#""kind":"offer""#, r#""kind":"answer""#));
        texts.push(swap(r#""kind":"offer""#, r#""kind":"Offer""#));
        texts.push(swap(
            r#"{"type":"offer","sdp":"v=0"}"#,
            r#"["offer","v=0"]"#,
        ));
        texts.push(swap(r#"{"type":"offer","sdp":"v=0"}"#, "null"));
        texts.push(swap("did:key:zSource", "did:key:z0ource"));
        texts.push(frame(
            r#"["did:key:zSource","did:key:zTarget","offer",{"type":"offer","sdp":""},5,"s",1]"#,
        ));
        texts.push(frame("null"));
        texts.push(frame(GOOD).replace(r#""r1""#, r#""""#));
        texts.push(frame(GOOD).replace(r#""r1""#, &format!(r#""{}""#, "r".repeat(300))));
        texts.push(frame(GOOD).replace(r#""r1""#, "1"));
        texts.push(format!(r#"{{"payload":{GOOD},"type":"__signal"}}"#));
        texts.push(format!(r#"[{GOOD},"r1","__signal"]"#));
        texts.push(format!("{} ", frame(GOOD)));
        texts.push(format!("{} x", frame(GOOD)));
        texts.push(frame(GOOD).replace("__signal", "live"));
        // A long SDP, on both sides of the limit.
        for n in [MAX_SDP_CHARS, MAX_SDP_CHARS + 1] {
            texts.push(swap("v=0", &"é".repeat(n)));
        }
        texts
    }

    /// Frames whose text is not UTF-8: a byte that starts no character in `from`, and a lead
    /// byte with no continuation in the SDP.
    pub(crate) fn bad_utf8() -> [Vec<u8>; 2] {
        let mut bad = frame(GOOD).into_bytes();
        let at = bad.windows(5).position(|w| w == b"zPeer").unwrap();
        bad[at] = 0xff;
        let mut sdp = frame(GOOD).into_bytes();
        let at = sdp.windows(3).position(|w| w == b"v=0").unwrap();
        sdp[at] = 0xc3;
        [bad, sdp]
    }
}
