//! A strict subset of JSON read by hand, for the frames a mesh receives most.
//!
//! serde skips a value without the checks reading it makes (serde_json's `ignore_str` takes
//! invalid UTF-8 and lone surrogates such as `\ud800`; `ignore_value` takes numbers out of range
//! such as `1e400` and nesting of any depth), and a frame a quick reader takes must be one
//! [`Frame::parse`](super::frame::Frame::parse) takes too. So [`Cursor`] reads only what it can
//! read exactly as a JSON parser would: strings without `\u` escapes (plain ones, of ASCII and
//! no escapes, as text; others stepped over, each character beyond ASCII checked as UTF-8),
//! plain non-negative integers that fit a `u64`, `null`, and objects whose keys are plain.
//! Anything else is `None`, for the caller to leave to the general path.

use alloc::borrow::Cow;
use alloc::string::String;

use super::frame::{ENVELOPE, MAX_FRAME_BYTES, is_name};
use crate::codec::object::plain_run;

/// A frame of type `kind` laid out as weft writes it ([`ENVELOPE`]), its payload read by
/// `payload`: the room and what that gives. Each value is read by the step a reader of any
/// order would read it with, so such a reader answers alike wherever this answers.
pub(super) fn as_written<'a, P>(
    bytes: &'a [u8],
    kind: &str,
    payload: impl FnOnce(&mut Cursor<'a>) -> Option<P>,
) -> Option<(&'a str, P)> {
    if bytes.len() > MAX_FRAME_BYTES {
        return None;
    }
    let [from_, payload_, room_, kind_, end] = ENVELOPE;
    let mut c = Cursor::new(bytes);
    c.lit(from_)?;
    c.skip_str()?;
    c.lit(payload_)?;
    let payload = payload(&mut c)?;
    c.lit(room_)?;
    let room = c.plain_str().filter(|r| is_name(r))?;
    c.lit(kind_)?;
    (c.plain_bytes()? == kind.as_bytes()).then_some(())?;
    c.lit(end)?;
    c.at_end().then_some((room, payload))
}

/// A string stepped over: its bytes between the quotes, as written, and whether they hold an
/// escape. Only the escapes that stand for one ASCII character are taken (see
/// [`Cursor::skip_str`]), so it is read without a JSON parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Text<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Text<'a> {
    /// The string's value, as JSON reads it: borrowed unless it holds an escape. `None` cannot
    /// happen for a string [`Cursor::skip_str`] took (each character was checked as UTF-8 as it was stepped
    /// over); it stands for "not a string" rather than a panic.
    pub(super) fn read(self) -> Option<Cow<'a, str>> {
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

/// A position in a frame's bytes.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// At the start of `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Whether every byte was taken.
    pub(super) fn at_end(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(super) fn peek_byte(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips JSON whitespace, as serde_json counts it.
    pub(super) fn ws(&mut self) {
        while matches!(self.peek_byte(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `b` after any whitespace.
    pub(super) fn eat(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.peek_byte()? == b).then(|| self.at += 1)
    }

    /// Takes `text` exactly, with no whitespace before it.
    pub(super) fn lit(&mut self, text: &[u8]) -> Option<()> {
        self.bytes[self.at..]
            .starts_with(text)
            .then(|| self.at += text.len())
    }

    /// Takes `null` after any whitespace; whether it was there.
    pub(super) fn null(&mut self) -> bool {
        self.ws();
        let there = self.bytes[self.at..].starts_with(b"null");
        if there {
            self.at += 4;
        }
        there
    }

    /// An object whose members `field` reads, handed each key (a string without escapes, as
    /// bytes: a key is only compared, so it need not be checked as UTF-8).
    pub(super) fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
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
    pub(super) fn plain_str(&mut self) -> Option<&'a str> {
        core::str::from_utf8(self.plain_bytes()?).ok()
    }

    /// [`plain_str`](Self::plain_str)'s bytes, not yet taken as text.
    pub(super) fn plain_bytes(&mut self) -> Option<&'a [u8]> {
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
    pub(super) fn skip_str(&mut self) -> Option<Text<'a>> {
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
    pub(super) fn integer(&mut self) -> Option<u64> {
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
