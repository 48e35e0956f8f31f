//! A `__signal` frame read only as far as recognising a copy (§8).
//!
//! §8 floods each signal to every admitted peer in its room, so a node receives each about as
//! many times as it has peers there, and only the first copy is new. [`peek`] reads a frame's
//! `room` and the payload's `origin`, `target`, `at` and `hops`, and steps over `kind`, `data`,
//! `sig` and `from` without unescaping or copying them (the SDP in `data` is most of a frame), so
//! the machine can answer a copy with
//! [`Introductions::check_copy`](super::introduction::Introductions::check_copy) before reading
//! the frame further. The strings stepped over are kept as where they lie in the bytes, so the
//! first copy, which goes the full way, is read from them ([`Peek::read_signal`]) rather than a
//! second time from the start.
//!
//! It reads the frame with `plain_json`'s strict subset of JSON. Anything
//! outside it (a `\u` escape anywhere, an escape or a character beyond ASCII in a key, `room`,
//! `origin` or `target`, a field not named above or given twice, an `at` or `hops` that is not a
//! plain non-negative integer, a `from` that is not a string, text that is not UTF-8) gets
//! `None`, and the machine reads the frame in full.

use super::frame::{MAX_FRAME_BYTES, SIGNAL, is_name};
use super::introduction::{Dropped, Fields, Routing, Signal, SignalRef};
use super::plain_json::{self, Cursor, Text};
use super::signal_frame::LAYOUT;

/// What [`peek`] reads of a `__signal` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peek<'a> {
    /// The frame's room.
    pub room: &'a str,
    /// The payload's fields a copy is recognised by.
    pub signal: Routing<'a>,
    /// The payload's strings stepped over, for [`Peek::read_signal`].
    rest: Rest<'a>,
}

/// The payload's strings the peek steps over: `None` where a field is missing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Rest<'a> {
    kind: Option<Text<'a>>,
    data_type: Option<Text<'a>>,
    sdp: Option<Text<'a>>,
    sig: Option<Text<'a>>,
}

impl<'a> Peek<'a> {
    /// The payload read as a signal, its shape checked (§8), from what the peek kept: what
    /// [`Signal::parse`] gives for the payload [`Frame::parse`](super::frame::Frame::parse)
    /// reads from the same bytes. The machine reads a signal this way once the peek found it
    /// is not a copy.
    pub fn read_signal(&self) -> Result<Signal, Dropped> {
        self.read_signal_ref().map(SignalRef::into_owned)
    }

    /// [`Peek::read_signal`], the signal's texts left in the frame's bytes where they hold no
    /// escape: what the machine reads a new signal as.
    pub(crate) fn read_signal_ref(&self) -> Result<SignalRef<'a>, Dropped> {
        let text = |t: Option<Text<'a>>| t.and_then(Text::read);
        let r = self.rest;
        let (kind, data_type) = (text(r.kind), text(r.data_type));
        SignalRef::from_fields(Fields {
            origin: Some(self.signal.origin),
            target: Some(self.signal.target),
            kind: kind.as_deref(),
            data_type: data_type.as_deref(),
            sdp: text(r.sdp),
            at: Some(self.signal.at),
            sig: text(r.sig),
            hops: Some(self.signal.hops),
        })
    }
}

/// Reads `room` and the signal's [`Routing`] from a `__signal` frame's bytes, when they are
/// within the subset the [module docs](self) give. A `Some` promises that
/// [`Frame::parse`](super::frame::Frame::parse) reads the bytes as a `__signal` frame in `room`,
/// that where [`Signal::parse`] reads its payload as a signal, that signal's
/// [`Signal::routing`] is the one given here, and that [`Peek::read_signal`] gives what
/// [`Signal::parse`] gives for that payload. Public so that a fuzz target can hold it to that.
pub fn peek(bytes: &[u8]) -> Option<Peek<'_>> {
    if bytes.len() > MAX_FRAME_BYTES {
        return None;
    }
    as_written(bytes).or_else(|| any_order(bytes))
}

/// The frame as weft writes it ([`signal_frame::write`](super::signal_frame::write)): its members
/// in that one order ([`ENVELOPE`](super::frame::ENVELOPE), [`LAYOUT`]), without whitespace, each read by the same step [`any_order`] reads it
/// with, so that where this answers, that answers the same. Nearly every frame is one, and is
/// read without tokenising and matching a dozen keys; anything else (another order,
/// whitespace, `hops` `null` or missing) is left to [`any_order`].
fn as_written(bytes: &[u8]) -> Option<Peek<'_>> {
    let (room, (signal, rest)) = plain_json::as_written(bytes, SIGNAL, |c| {
        let [at, sdp, data_type, hops, kind, origin, sig, target, close] = LAYOUT;
        c.lit(at)?;
        let at = c.integer()?;
        c.lit(sdp)?;
        let sdp = c.skip_str()?;
        c.lit(data_type)?;
        let data_type = c.skip_str()?;
        c.lit(hops)?;
        let hops = c.integer()?;
        c.lit(kind)?;
        let kind = c.skip_str()?;
        c.lit(origin)?;
        let origin = c.plain_str()?;
        c.lit(sig)?;
        let sig = c.skip_str()?;
        c.lit(target)?;
        let target = c.plain_str()?;
        c.lit(close)?;
        let routing = Routing {
            origin,
            target,
            at,
            hops,
        };
        let rest = Rest {
            kind: Some(kind),
            data_type: Some(data_type),
            sdp: Some(sdp),
            sig: Some(sig),
        };
        Some((routing, rest))
    })?;
    Some(Peek { room, signal, rest })
}

/// The frame with its members in any order, with any whitespace JSON takes between tokens.
fn any_order(bytes: &[u8]) -> Option<Peek<'_>> {
    let mut c = Cursor::new(bytes);
    let (mut room, mut kind, mut payload, mut from) = (None, None, None, false);
    c.object(|c, key| match key {
        b"room" => once(&mut room, c.plain_str()?),
        b"type" => once(&mut kind, c.plain_bytes()?),
        b"payload" => once(&mut payload, payload_of(c)?),
        b"from" => {
            c.skip_str()?;
            once_flag(&mut from)
        }
        _ => None,
    })?;
    c.ws();
    if !c.at_end() || kind? != SIGNAL.as_bytes() {
        return None;
    }
    let room = room.filter(|r| is_name(r))?;
    let (signal, rest) = payload?;
    Some(Peek { room, signal, rest })
}

/// The payload object: `origin`, `target`, `at` and `hops` read, the rest stepped over and kept.
fn payload_of<'a>(c: &mut Cursor<'a>) -> Option<(Routing<'a>, Rest<'a>)> {
    let (mut origin, mut target, mut at, mut hops) = (None, None, None, None);
    let (mut kind, mut data, mut sig) = (None, None, None);
    c.object(|c, key| match key {
        b"origin" => once(&mut origin, c.plain_str()?),
        b"target" => once(&mut target, c.plain_str()?),
        b"at" => once(&mut at, c.integer()?),
        // `null` leaves no hops, as a missing `hops` does, on both paths.
        b"hops" => once(&mut hops, if c.null() { 0 } else { c.integer()? }),
        b"kind" => once(&mut kind, c.skip_str()?),
        b"sig" => once(&mut sig, c.skip_str()?),
        b"data" => once(&mut data, data_of(c)?),
        _ => None,
    })?;
    let routing = Routing {
        origin: origin?,
        target: target?,
        at: at?,
        hops: hops.unwrap_or(0),
    };
    let (data_type, sdp) = data.unwrap_or_default();
    let rest = Rest {
        kind,
        data_type,
        sdp,
        sig,
    };
    Some((routing, rest))
}

/// The `data` object, `{type, sdp}`, stepped over and kept.
fn data_of<'a>(c: &mut Cursor<'a>) -> Option<(Option<Text<'a>>, Option<Text<'a>>)> {
    let (mut kind, mut sdp) = (None, None);
    c.object(|c, key| {
        let text = c.skip_str()?;
        match key {
            b"type" => once(&mut kind, text),
            b"sdp" => once(&mut sdp, text),
            _ => None,
        }
    })?;
    Some((kind, sdp))
}

/// Fills `slot` with `value`; `None` if it was full: a field given twice is left to the general
/// path (which keeps the last).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

/// [`once`] for a field stepped over.
fn once_flag(seen: &mut bool) -> Option<()> {
    (!core::mem::replace(seen, true)).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minca::mesh::frame::Frame;
    use crate::minca::mesh::introduction::Signal;
    use crate::minca::mesh::signal_frame::tests::{GOOD, bad_utf8, frame, signal, tricky_texts};
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// Where the peek answers, the general path reads a `__signal` frame in the same room, where
    /// it reads the payload as a signal, the signal's routing is the peek's, and the signal read
    /// from the peek is the general path's (or both refuse it). Returns whether the peek
    /// answered.
    fn agrees(bytes: &[u8]) -> bool {
        let Some(p) = peek(bytes) else {
            return false;
        };
        let text = String::from_utf8_lossy(bytes);
        let f = Frame::parse(bytes).unwrap_or_else(|e| panic!("{e:?}: {text}"));
        assert_eq!(
            (f.room.as_str(), f.kind.as_str()),
            (p.room, SIGNAL),
            "{text}"
        );
        let general = Signal::parse(&f.payload);
        if let Ok(s) = &general {
            assert_eq!(s.routing(), p.signal, "{text}");
        }
        assert_eq!(p.read_signal(), general, "{text}");
        true
    }

    #[test]
    fn a_sent_signal_frame_is_peeked() {
        let bytes = Frame::new("r1", SIGNAL, signal().to_payload()).to_bytes("did:key:zMe");
        assert!(agrees(&bytes));
        let p = peek(&bytes).unwrap();
        assert_eq!(p.room, "r1");
        assert_eq!(p.signal, signal().routing());
        let spaced = format!(
            " \n{}\t\r\n",
            frame(GOOD).replace(':', " : ").replace(',', " ,\t")
        );
        assert!(agrees(spaced.as_bytes()));
        // The escapes an SDP holds are stepped over, as are control characters written as
        // escapes and DEL written plainly.
        let sdp = r#"v=0\r\n\"\\\/\b\f\t\u0000"#;
        assert!(!agrees(frame(&GOOD.replace("v=0", sdp)).as_bytes()));
        let sdp = r#"v=0\r\n\"\\\/\b\f\t"#;
        for sdp in [
            "é",
            "\u{7ff}",
            "€",
            "\u{ffff}",
            "😀",
            "\u{10ffff}",
            "aé€😀b",
        ] {
            let t = frame(&GOOD.replace("c2ln", sdp).replace("v=0", sdp));
            assert!(agrees(t.as_bytes()), "{t}");
        }
        assert!(agrees(
            frame(&GOOD.replace("v=0", &format!("{sdp}\u{7f}é"))).as_bytes()
        ));
    }

    /// Where the frame as written is read, the frame in any order is read alike.
    fn written_agrees(bytes: &[u8]) -> bool {
        let Some(w) = as_written(bytes) else {
            return false;
        };
        assert_eq!(
            Some(w),
            any_order(bytes),
            "{}",
            String::from_utf8_lossy(bytes)
        );
        true
    }

    #[test]
    fn a_frame_as_written_is_read_as_in_any_order() {
        let mut odd = signal();
        odd.sdp = "v=0\r\n\"é😀".into();
        odd.hops = 0;
        for s in [signal(), odd] {
            let bytes = Frame::new("r1", SIGNAL, s.to_payload()).to_bytes("did:key:zMe");
            assert!(written_agrees(&bytes));
            assert!(agrees(&bytes));
            // Cut short, a byte left out or changed anywhere: not read as written, or read
            // alike (an SDP a byte shorter, say).
            for at in 0..bytes.len() {
                let mut cut = bytes.clone();
                cut.remove(at);
                written_agrees(&cut);
                written_agrees(&bytes[..at]);
                for b in [b' ', b'"', b'\\', b'0', b'{', b'}', b',', 0x80, 0xc3] {
                    let mut changed = bytes.clone();
                    changed[at] = b;
                    written_agrees(&changed);
                    agrees(&changed);
                }
            }
        }
        // Written otherwise, left to the reader of any order.
        let t = frame(GOOD);
        assert!(as_written(t.as_bytes()).is_none() && agrees(t.as_bytes()));
        let t = Frame::new("r1", SIGNAL, signal().to_payload()).to_bytes("did:key:zMe");
        let nulled = String::from_utf8(t)
            .unwrap()
            .replace(r#""hops":3"#, r#""hops":null"#);
        assert!(as_written(nulled.as_bytes()).is_none() && agrees(nulled.as_bytes()));
    }

    #[test]
    fn a_peeked_signal_reads_its_escapes_as_json_does() {
        let mut odd = signal();
        odd.sdp = "v=0\r\n\"q\" \\ /\u{8}\u{c}\té😀".into();
        odd.sig = "a\\b\"c".into();
        let bytes = Frame::new("r1", SIGNAL, odd.to_payload()).to_bytes("did:key:zMe");
        assert!(agrees(&bytes));
        assert_eq!(peek(&bytes).unwrap().read_signal(), Ok(odd));
        // `\/` is written only by hand; each escape alone, at either end, and side by side.
        for sdp in [
            r"\/", r"a\/", r"\/a", r"\n\r", r"\\\\", r#"\"\""#, r"\b\f\t",
        ] {
            let t = frame(&GOOD.replace("v=0", sdp).replace("c2ln", sdp));
            assert!(agrees(t.as_bytes()), "{t}");
        }
        // Shapes the checks refuse are refused alike: kinds that disagree, a missing `sig`.
        for (from, to) in [
            (r#""kind":"offer""#, r#""kind":"answer""#),
            (r#""type":"offer""#, r#""type":"offe\r""#),
            (r#","sig":"c2ln""#, ""),
            (r#""sdp":"v=0""#, r#""sdq":"v=0""#),
        ] {
            let t = frame(&GOOD.replacen(from, to, 1));
            assert!(
                peek(t.as_bytes()).is_none_or(|p| p.read_signal().is_err()),
                "{t}"
            );
            agrees(t.as_bytes());
        }
    }

    #[test]
    fn tricky_frames_peek_alike_or_go_to_the_general_path() {
        let mut texts = tricky_texts();
        let swap = |from: &str, to: &str| frame(&GOOD.replacen(from, to, 1));
        // What this reader in particular steps over or reads by hand.
        for (from, to) in [
            (r#""sig":"c2ln""#, r#""sig":"c\u0032ln""#),
            (r#""sig":"c2ln""#, "\"sig\":\"c2\nln\""),
            (r#""sig":"c2ln""#, "\"sig\":\"c2\u{1f}ln\""),
            (r#""sig":"c2ln""#, r#""sig":"c2ln\"#),
            (r#""sig":"c2ln""#, r#""sig":"c2ln\x""#),
            (r#""sig":"c2ln""#, r#""sig":null"#),
            (r#""sdp":"v=0""#, r#""sdp":"v=0\"#),
            (r#""sdp":"v=0""#, r#""sdp":"v=0\\""#),
            (r#""type":"offer""#, r#""type":"offer","type":"offer""#),
            (r#""kind":"offer""#, r#""kind":"offer","kind":"offer""#),
            (r#""sig":"c2ln""#, r#""sig":"c2ln","sig":"c2ln""#),
            (r#""data":{"type":"offer","sdp":"v=0"}"#, r#""data":{}"#),
            (
                r#""data":{"type":"offer","sdp":"v=0"}"#,
                r#""data":{"type":"offer","sdp":"v=0",}"#,
            ),
            (r#""data":{"type":"offer","sdp":"v=0"}"#, r#""data":"v=0""#),
            (r#""at":5"#, r#""at":05"#),
            (r#""at":5"#, r#""at":5e0"#),
            (r#""at":5"#, r#""at":5."#),
            (r#""at":5"#, r#""at":-0"#),
            (r#""at":5"#, r#""at":0"#),
            (r#""at":5"#, r#""at":5x"#),
            (r#""hops":2"#, r#""hops":nul"#),
            (r#""hops":2"#, r#""hops":nullx"#),
            (r#""hops":2"#, r#""hops":00"#),
            (r#""hops":2"#, r#""hops":0"#),
            (r#""hops":2}"#, r#""hops":2,}"#),
            (r#""hops":2}"#, r#""hops":2"#),
            (
                r#""origin":"did:key:zSource""#,
                r#""origin":"did:key:zSo\urce""#,
            ),
        ] {
            texts.push(swap(from, to));
        }
        for (from, to) in [
            (r#""did:key:zPeer""#, "7"),
            (r#""did:key:zPeer""#, "null"),
            (r#""did:key:zPeer""#, r#""did:key:z\"Peer""#),
            (r#""did:key:zPeer""#, r#""did:key:z\u0050eer""#),
            (r#""from":"did:key:zPeer","#, ""),
            (r#""room":"r1""#, r#""room":"r1","room":"r1""#),
            (r#""type":"__signal""#, r#""type":"__signal","from":"x""#),
            (r#""type":"__signal"}"#, r#""type":"__signal"}}"#),
            (r#""type":"__signal"}"#, r#""type":"__signal""#),
            (r#""type":"__signal""#, r#""type":"__signal",}"#),
            (r#""type":"__signal""#, r#""type":"__Signal""#),
            ("{", "\u{feff}{"),
        ] {
            texts.push(frame(GOOD).replacen(from, to, 1));
        }
        // Whitespace JSON takes between tokens but not raw inside a string, at a plain
        // string's end and within it.
        for ws in ["\n", "\t", "\r", " "] {
            for plain in [
                r#""r1""#,
                r#""room""#,
                r#""did:key:zPeer""#,
                r#""__signal""#,
            ] {
                let inside = plain.replacen('"', &format!("\"{ws}"), 2).replacen(
                    &format!("\"{ws}"),
                    "\"",
                    1,
                );
                texts.push(frame(GOOD).replacen(plain, &inside, 1));
                let mid = format!("{}{ws}{}", &plain[..2], &plain[2..]);
                texts.push(frame(GOOD).replacen(plain, &mid, 1));
            }
            for plain in ["did:key:zSource", "did:key:zTarget", "origin", "hops"] {
                texts.push(swap(plain, &format!("{plain}{ws}")));
            }
        }
        texts.push(format!("{}\u{0}", frame(GOOD)));
        texts.push(format!("{}\u{a0}", frame(GOOD)));
        texts.push(String::from(r#"{"room":"r1","type":"__signal"}"#));
        texts.push(format!(
            r#"{{"room":"r1","type":"__signal","payload":{GOOD}}}"#
        ));
        let mut peeked = 0;
        for t in &texts {
            peeked += usize::from(agrees(t.as_bytes()));
            written_agrees(t.as_bytes());
            // Every prefix: a frame cut short is not peeked, nor does it panic. (Not of the
            // long SDPs: quadratic, and their prefixes are like the others'.)
            let ends = if t.len() < 2_000 { t.len() } else { 0 };
            for end in (0..ends).filter(|&e| t.is_char_boundary(e)) {
                assert!(peek(&t.as_bytes()[..end]).is_none() || agrees(&t.as_bytes()[..end]));
            }
        }
        for bad in bad_utf8() {
            assert_eq!(peek(&bad), None);
        }
        // What is plain still peeks: whitespace, reordered members, other numbers.
        assert!(peeked >= 15, "{peeked}");
    }

    #[test]
    fn a_peek_refuses_what_serde_would_skip_but_not_read() {
        // Each of these passes serde_json's skipping of a string or a value (`ignore_str`,
        // `ignore_value`) and fails its reading: the general path drops the frame as not JSON.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut cases: Vec<Vec<u8>> = [r"\ud800", r"\udc00", r"\ud800\u0041", r"v=0\ud83d"]
            .iter()
            .map(|sdp| frame(&GOOD.replace("v=0", sdp)).into_bytes())
            .collect();
        for junk in ["1e400", "-1e400", deep.as_str(), r#""\ud800""#] {
            let data = format!(r#"{{"type":"offer","sdp":{junk}}}"#);
            cases.push(frame(&GOOD.replace(r#"{"type":"offer","sdp":"v=0"}"#, &data)).into_bytes());
            cases.push(frame(&GOOD.replace(r#""c2ln""#, junk)).into_bytes());
            cases.push(frame(GOOD).replace(r#""did:key:zPeer""#, junk).into_bytes());
        }
        // Bytes serde_json steps over in a skipped string without checking them as UTF-8: a
        // lone continuation byte, overlong forms, an encoded surrogate, past U+10FFFF, a lead
        // byte cut short (by the quote, or by another lead byte).
        for bad in [
            &b"\x80"[..],
            b"\xc0\x80",
            b"\xc1\xbf",
            b"\xe0\x80\x80",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xf5\x80\x80\x80",
            b"\xff",
            b"\xe2\x82",
            b"\xe2\xe2\x82\xac",
        ] {
            let mut sig = frame(GOOD).into_bytes();
            let at = sig.windows(4).position(|w| w == b"c2ln").unwrap();
            sig.splice(at..at, bad.iter().copied());
            cases.push(sig);
        }
        for case in &cases {
            assert_eq!(peek(case), None, "{}", String::from_utf8_lossy(case));
        }
        assert!(cases.iter().all(|c| Frame::parse(c).is_err()));
    }

    #[test]
    fn an_oversized_frame_is_not_peeked() {
        let pad = " ".repeat(MAX_FRAME_BYTES);
        assert_eq!(peek(format!("{}{pad}", frame(GOOD)).as_bytes()), None);
    }
}
