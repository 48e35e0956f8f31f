//! The `__signal` frame (§7.1, §8) read straight from its bytes.
//!
//! Signals are nearly all of a mesh's traffic: each is flooded through a room until its hops run
//! out. [`Frame::parse`](super::frame::Frame::parse) reads a frame through a `serde_json::Value`
//! tree, an allocation per field, and [`Signal::parse`] then reads the payload from that tree;
//! [`read`] reads the room and the signal's fields from the text into borrowed strings instead.
//! It answers only where it is sure to answer as the general path would, and `None` otherwise,
//! for the general path to decide. [`write()`] is the sending side: the frame's bytes written
//! straight from a [`Signal`].

use alloc::borrow::Cow;
use alloc::vec::Vec;

use serde::Deserialize;

use super::frame::{self, MAX_FRAME_BYTES, SIGNAL, is_name};
use super::introduction::{Fields, Signal};
use crate::codec::object::{self, Object};

/// A `__signal` frame whose payload has the shape §8 gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalFrame<'a> {
    /// The room the frame belongs to.
    pub room: Cow<'a, str>,
    /// The payload, its shape checked (not its time or signature).
    pub signal: Signal,
}

// Strings are `Cow`: borrowed from the text unless they hold escapes, which are read as the
// general path reads them. A field given twice is an error here (the general path keeps the
// last), and so is any field not named below: serde skips an unknown field without the checks a
// JSON tree makes (nesting depth, numbers in range, escapes naming characters, UTF-8), so the
// general path reads such a frame.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(borrow)]
    room: Cow<'a, str>,
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    payload: Object<Payload<'a>>,
    // Informational only (§7.1): read to check it as the general path does, then not used.
    #[serde(borrow, default)]
    #[allow(dead_code)]
    from: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload<'a> {
    #[serde(borrow)]
    origin: Cow<'a, str>,
    #[serde(borrow)]
    target: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    data: Object<Data<'a>>,
    // Only a JSON integer reads as `u64`; a float such as `1.0`, which the general path takes,
    // is an error here and goes there.
    at: u64,
    #[serde(borrow)]
    sig: Cow<'a, str>,
    // Missing and `null` leave no hops on both paths.
    #[serde(default)]
    hops: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Data<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    sdp: Cow<'a, str>,
}

/// The frame `bytes` hold, when they are plainly a `__signal` frame with a well-shaped signal:
/// then [`Frame::parse`](super::frame::Frame::parse) gives a `__signal` frame in `room` whose
/// payload [`Signal::parse`] reads as `signal`. `None` says nothing: any other frame, any text
/// this path could read differently (a field given twice, a float `at`, anything not an object)
/// and any error are left to the general path, which gives its own answer. The mesh machine
/// reads frames this way first; this is public so that a fuzz target can hold the two paths to
/// the same answer.
pub fn read(bytes: &[u8]) -> Option<SignalFrame<'_>> {
    if bytes.len() > MAX_FRAME_BYTES {
        return None;
    }
    let wire: Wire<'_> = object::read(bytes)?;
    if wire.kind != SIGNAL || !is_name(&wire.room) {
        return None;
    }
    let p = wire.payload.0;
    let data = p.data.0;
    let signal = Signal::from_fields(Fields {
        origin: Some(&p.origin),
        target: Some(&p.target),
        kind: Some(&p.kind),
        data_type: Some(&data.kind),
        sdp: Some(&data.sdp),
        at: Some(p.at),
        sig: Some(&p.sig),
        hops: p.hops,
    })
    .ok()?;
    Some(SignalFrame {
        room: wire.room,
        signal,
    })
}

/// The bytes of a `__signal` frame carrying `signal` in `room`, from `from`: what
/// [`Frame::to_bytes`](super::frame::Frame::to_bytes) gives for the frame holding
/// [`Signal::to_payload`], written without building the payload as a JSON tree.
pub fn write(room: &str, from: &str, signal: &Signal) -> Vec<u8> {
    frame::write(room, SIGNAL, from, signal)
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

    /// Where the fast path answers, the general path gives the same answer; returns whether
    /// the fast path answered.
    fn agrees(text: &str) -> bool {
        let fast = read(text.as_bytes());
        if let Some(f) = &fast {
            assert_eq!(
                general(text.as_bytes()),
                Some((String::from(f.room.as_ref()), f.signal.clone())),
                "{text}"
            );
        }
        fast.is_some()
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
    fn a_sent_signal_frame_takes_the_fast_path() {
        let bytes = Frame::new("r1", SIGNAL, signal().to_payload()).to_bytes("did:key:zMe");
        let f = read(&bytes).unwrap();
        assert_eq!(f.room, "r1");
        assert_eq!(f.signal, signal());
        assert!(matches!(f.room, Cow::Borrowed(_)));
        assert!(agrees(core::str::from_utf8(&bytes).unwrap()));
        assert!(agrees(&frame(GOOD)));
    }

    #[test]
    fn a_written_signal_frame_is_the_frame_built_as_json() {
        let mut odd = signal();
        odd.kind = SignalKind::Answer;
        odd.sdp = "a\"b\\c\u{1}\u{7f}é😀\r\n</script>".into();
        odd.sig = "-_\"".into();
        odd.hops = u64::MAX;
        odd.at = 0;
        for (room, s) in [("r1", signal()), ("r\"\u{0}é", odd)] {
            let general = Frame::new(room, SIGNAL, s.to_payload()).to_bytes("did:key:zMe");
            assert_eq!(write(room, "did:key:zMe", &s), general);
            let back = read(&general).unwrap();
            assert_eq!((back.room.as_ref(), &back.signal), (room, &s));
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

    /// The tricky frame texts both quick readers are held to the general path on: duplicate
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

    #[test]
    fn tricky_frames_read_alike_or_go_to_the_general_path() {
        let texts = tricky_texts();
        let fast: usize = texts.iter().map(|t| usize::from(agrees(t))).sum();
        // Invalid UTF-8 inside a string, where the text is bytes.
        for bad in bad_utf8() {
            assert!(read(&bad).is_none());
            assert_eq!(general(&bad), None);
        }
        // The escapes, extra fields and the in-range SDP still read fast.
        assert!(fast >= 8, "{fast}");
    }
}
