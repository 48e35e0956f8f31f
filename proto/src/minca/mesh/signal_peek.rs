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
//! It reads a strict subset of JSON by hand, since serde skips a value without the checks
//! reading it makes (serde_json's `ignore_str` takes invalid UTF-8 and lone surrogates such as
//! `\ud800`; `ignore_value` takes numbers out of range such as `1e400` and nesting of any depth),
//! and a frame the peek takes must be one [`Frame::parse`](super::frame::Frame::parse) takes too.
//! Anything outside the subset (a `\u` escape anywhere, an escape or a character beyond ASCII in
//! a key, `room`, `origin` or `target`, a field not named above or given twice, an `at` or
//! `hops` that is not a plain non-negative integer, a `from` that is not a string, text that is
//! not UTF-8) gets `None`, and the machine reads the frame in full as before.

use alloc::borrow::Cow;
use alloc::string::String;

use super::frame::{MAX_FRAME_BYTES, SIGNAL, is_name};
use super::introduction::{Dropped, Fields, Routing, Signal};

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

/// A string stepped over: its bytes between the quotes, as written, and whether they hold an
/// escape. Only the escapes that stand for one ASCII character are taken (see
/// [`Cursor::skip_str`]), so it is read without a JSON parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Text<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Text<'a> {
    /// The string's value, as JSON reads it: borrowed unless it holds an escape. `None` cannot
    /// happen for a string the peek took (each character was checked as UTF-8 as it was stepped
    /// over); it stands for "not a string" rather than a panic.
    fn read(self) -> Option<Cow<'a, str>> {
        if !self.escaped {
            return core::str::from_utf8(self.raw).ok().map(Cow::Borrowed);
        }
        let mut out = String::with_capacity(self.raw.len());
        let mut rest = self.raw;
        while let Some(at) = rest.iter().position(|&b| b == b'\\') {
            out.push_str(core::str::from_utf8(&rest[..at]).ok()?);
            out.push(match rest.get(at + 1)? {
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                &c @ (b'"' | b'\\' | b'/') => char::from(c),
                _ => return None,
            });
            rest = &rest[at + 2..];
        }
        out.push_str(core::str::from_utf8(rest).ok()?);
        Some(Cow::Owned(out))
    }
}

impl<'a> Peek<'a> {
    /// The payload read as a signal, its shape checked (§8), from what the peek kept: what
    /// [`Signal::parse`] gives for the payload [`Frame::parse`](super::frame::Frame::parse)
    /// reads from the same bytes. The machine reads a signal this way once the peek found it
    /// is not a copy.
    pub fn read_signal(&self) -> Result<Signal, Dropped> {
        let text = |t: Option<Text<'a>>| t.and_then(Text::read);
        let r = self.rest;
        let (kind, data_type) = (text(r.kind), text(r.data_type));
        let (sdp, sig) = (text(r.sdp), text(r.sig));
        Signal::from_fields(Fields {
            origin: Some(self.signal.origin),
            target: Some(self.signal.target),
            kind: kind.as_deref(),
            data_type: data_type.as_deref(),
            sdp: sdp.as_deref(),
            at: Some(self.signal.at),
            sig: sig.as_deref(),
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
/// in that one order, without whitespace, each read by the same step [`any_order`] reads it
/// with, so that where this answers, that answers the same. Nearly every frame is one, and is
/// read without tokenising and matching a dozen keys; anything else (another order,
/// whitespace, `hops` `null` or missing) is left to [`any_order`].
fn as_written(bytes: &[u8]) -> Option<Peek<'_>> {
    let mut c = Cursor { bytes, at: 0 };
    c.lit(br#"{"from":"#)?;
    c.skip_str()?;
    c.lit(br#","payload":{"at":"#)?;
    let at = c.integer()?;
    c.lit(br#","data":{"sdp":"#)?;
    let sdp = c.skip_str()?;
    c.lit(br#","type":"#)?;
    let data_type = c.skip_str()?;
    c.lit(br#"},"hops":"#)?;
    let hops = c.integer()?;
    c.lit(br#","kind":"#)?;
    let kind = c.skip_str()?;
    c.lit(br#","origin":"#)?;
    let origin = c.plain_str()?;
    c.lit(br#","sig":"#)?;
    let sig = c.skip_str()?;
    c.lit(br#","target":"#)?;
    let target = c.plain_str()?;
    c.lit(br#"},"room":"#)?;
    let room = c.plain_str().filter(|r| is_name(r))?;
    c.lit(br#","type":"__signal"}"#)?;
    (c.at == bytes.len()).then_some(Peek {
        room,
        signal: Routing {
            origin,
            target,
            at,
            hops,
        },
        rest: Rest {
            kind: Some(kind),
            data_type: Some(data_type),
            sdp: Some(sdp),
            sig: Some(sig),
        },
    })
}

/// The frame with its members in any order, with any whitespace JSON takes between tokens.
fn any_order(bytes: &[u8]) -> Option<Peek<'_>> {
    let mut c = Cursor { bytes, at: 0 };
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
    if c.at != bytes.len() || kind? != SIGNAL.as_bytes() {
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

/// A position in the frame's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek_byte(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips JSON whitespace, as serde_json counts it.
    fn ws(&mut self) {
        while matches!(self.peek_byte(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `b` after any whitespace.
    fn eat(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.peek_byte()? == b).then(|| self.at += 1)
    }

    /// Takes `text` exactly, with no whitespace before it.
    fn lit(&mut self, text: &[u8]) -> Option<()> {
        self.bytes[self.at..]
            .starts_with(text)
            .then(|| self.at += text.len())
    }

    /// Takes `null` after any whitespace; whether it was there.
    fn null(&mut self) -> bool {
        self.ws();
        let there = self.bytes[self.at..].starts_with(b"null");
        if there {
            self.at += 4;
        }
        there
    }

    /// An object whose members `field` reads, handed each key (a string without escapes, as
    /// bytes: a key is only compared, so it need not be checked as UTF-8).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.plain_bytes()?;
            self.eat(b':')?;
            field(self, key)?;
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// A string of ASCII without escapes or control characters, after any whitespace: its
    /// text. Names, DIDs and keys are; anything else is left to the general path.
    fn plain_str(&mut self) -> Option<&'a str> {
        core::str::from_utf8(self.plain_bytes()?).ok()
    }

    /// [`plain_str`](Self::plain_str)'s bytes, not yet taken as text.
    fn plain_bytes(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.at;
        self.at += plain_run(&self.bytes[start..]);
        let text = &self.bytes[start..self.at];
        (self.peek_byte()? == b'"').then(|| self.at += 1)?;
        Some(text)
    }

    /// Steps over a string, after any whitespace, taking only the escapes that stand for one
    /// ASCII character (`\u` is refused: it may name a lone surrogate, which serde_json skips
    /// but does not read). Control characters are refused, as JSON refuses them, and each
    /// character beyond ASCII must be UTF-8, which serde_json's skipping does not check.
    fn skip_str(&mut self) -> Option<Text<'a>> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            self.at += plain_run(&self.bytes[self.at..]);
            let rest = &self.bytes[self.at..];
            match *rest.first()? {
                b'"' => {
                    self.at += 1;
                    let raw = &self.bytes[start..self.at - 1];
                    return Some(Text { raw, escaped });
                }
                b'\\'
                    if matches!(
                        rest.get(1),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
                    ) =>
                {
                    escaped = true;
                    self.at += 2
                }
                lead @ 0x80.. => {
                    let width = match lead {
                        0xc2..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf4 => 4,
                        _ => return None,
                    };
                    // The standard library's check: continuation bytes, no overlong form, no
                    // surrogate, nothing past U+10FFFF.
                    core::str::from_utf8(rest.get(..width)?).ok()?;
                    self.at += width;
                }
                _ => return None,
            }
        }
    }

    /// A non-negative integer written plainly (no sign, fraction, exponent or leading zero)
    /// that fits a `u64`, after any whitespace: the one form both paths read as that integer.
    fn integer(&mut self) -> Option<u64> {
        self.ws();
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(d) = self.peek_byte().filter(u8::is_ascii_digit) {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.bytes[start] == b'0';
        let more = matches!(self.peek_byte(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !more).then_some(n)
    }
}

/// How many leading bytes are ASCII other than control characters, `"` and `\\`: the run a string's
/// content can be stepped over by without a look at each byte. Eight bytes at a time, with the
/// usual word tricks (a byte's high bit marks a match, and a borrow only ever carries into a
/// byte above a match, so the lowest match is exact).
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let slash = w ^ (ONES * u64::from(b'\\'));
        // Below 0x20 borrows into the high bit; 0x80 and above has it already.
        let stop = (w.wrapping_sub(ONES * 0x20)
            | w
            | (quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash))
            & HIGH;
        if stop != 0 {
            return n + (stop.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + bytes[n..]
        .iter()
        .position(|&b| !is_plain(b))
        .unwrap_or(bytes.len() - n)
}

/// Whether `b` is ASCII other than a control character (below space, as JSON counts them),
/// `"` and `\\`.
fn is_plain(b: u8) -> bool {
    (0x20..0x80).contains(&b) && b != b'"' && b != b'\\'
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
    fn the_plain_run_stops_at_the_first_byte_that_is_not_plain() {
        for b in 0..=u8::MAX {
            for at in 0..20 {
                let mut bytes = alloc::vec![b'a'; 20];
                bytes[at] = b;
                // A second stop after the first must not move it.
                if at + 1 < bytes.len() {
                    bytes[at + 1] = 0x00;
                }
                let want = if is_plain(b) {
                    bytes.iter().position(|&x| !is_plain(x)).unwrap_or(20)
                } else {
                    at
                };
                assert_eq!(plain_run(&bytes), want, "{b:#x} at {at}");
                assert_eq!(plain_run(&bytes[..at]), at);
            }
            assert_eq!(
                is_plain(b),
                b.is_ascii() && !b"\"\\".contains(&b) && b >= b' '
            );
        }
    }

    #[test]
    fn an_oversized_frame_is_not_peeked() {
        let pad = " ".repeat(MAX_FRAME_BYTES);
        assert_eq!(peek(format!("{}{pad}", frame(GOOD)).as_bytes()), None);
    }
}
