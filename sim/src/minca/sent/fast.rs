//! [`Sent`] read from the text the machines write, without serde.
//!
//! [`read`] answers only for text in a subset of JSON on which serde_json cannot differ from it,
//! and `None` for everything else, which the caller gives to serde_json. The subset, and why
//! serde_json reads it as [`read`] does:
//!
//! - No whitespace anywhere, an object from the first byte to the last: serde_json skips
//!   whitespace between tokens and refuses anything after the value but whitespace, so the
//!   subset only leaves out texts serde_json might take.
//! - Strings of printable ASCII without `\` (`0x20..0x7f` but `"` and `\`): every such string is
//!   valid JSON and valid UTF-8 and means its own bytes, whether serde_json reads it, borrows it
//!   or skips it (skipped strings are not checked for UTF-8; none is needed here).
//! - Numbers that are unsigned integers without a leading zero that a `u64` holds: serde_json
//!   reads exactly these as `u64` (`visit_u64`); floats, exponents, signs and larger numbers, which
//!   it reads otherwise or refuses, are outside the subset.
//! - `true`, `false`, `null`, and objects and arrays of the above nested at most [`MAX_DEPTH`]
//!   deep, far within serde_json's limit of 128.
//! - `room` and `type` once each, strings; `payload` at most once; in an object `payload`,
//!   `origin`, `target` and `at` at most once each. serde's derived visitor refuses a field given
//!   twice, and the payload's visitor keeps the last value of a matching kind, so a repeated name
//!   is left to serde_json rather than reasoned about. A missing `room` or `type`, which serde
//!   refuses, is left to serde_json too.
//!
//! Within the subset, [`Sent`]'s meaning is then read off directly: `room` and `type` as they
//! are; `origin` and `target` when they are strings and `at` when it is an integer, any of them
//! left at its default when absent or of another kind, as the payload's visitor does; and a
//! payload that is not an object (absent, `null`, a string, an array, ...) names nothing.

use std::borrow::Cow;

use super::{Sent, SignalName};

/// How deep objects and arrays may nest in the subset (the frame itself is depth 1).
const MAX_DEPTH: u32 = 16;

/// `bytes` as serde_json reads them into a [`Sent`], when they are in the subset the [module
/// docs](self) give; `None` otherwise, whether or not serde_json would read them.
pub(super) fn read(bytes: &[u8]) -> Option<Sent<'_>> {
    let mut c = Cursor { bytes, at: 0 };
    let (mut room, mut kind, mut payload) = (None, None, None);
    c.object(1, |c, key| match key {
        b"room" => once(&mut room, c.string()?),
        b"type" => once(&mut kind, c.string()?),
        b"payload" => {
            let name = match c.peek()? {
                b'{' => c.signal_name()?,
                _ => {
                    c.value(2)?;
                    SignalName::default()
                }
            };
            once(&mut payload, name)
        }
        _ => c.value(2).map(drop),
    })?;
    if c.at != bytes.len() {
        return None;
    }
    Some(Sent {
        room: Cow::Borrowed(room?),
        kind: Cow::Borrowed(kind?),
        payload: payload.unwrap_or_default(),
    })
}

/// Sets `slot` to `value`; `None` when it was set already.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.is_none().then(|| *slot = Some(value))
}

/// A value as far as [`SignalName`] looks into it.
enum Scalar<'a> {
    Str(&'a str),
    U64(u64),
    Other,
}

/// A reading position in a text; every method leaves it just past what it read, or answers
/// `None` when the text there is outside the subset.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object at nesting `depth`, calling `member` with each key; `member` reads the value.
    fn object(
        &mut self,
        depth: u32,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.raw_string()?;
            self.eat(b':')?;
            member(self, key)?;
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// An array at nesting `depth`, its elements skipped.
    fn array(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            if self.eat(b',').is_none() {
                return self.eat(b']');
            }
        }
    }

    /// Any value at nesting `depth` (an object or array in it is at `depth`).
    fn value(&mut self, depth: u32) -> Option<Scalar<'a>> {
        Some(match self.peek()? {
            b'"' => Scalar::Str(self.string()?),
            b'0'..=b'9' => Scalar::U64(self.integer()?),
            b'{' => {
                self.object(depth, |c, _| c.value(depth + 1).map(drop))?;
                Scalar::Other
            }
            b'[' => {
                self.array(depth)?;
                Scalar::Other
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => return None,
        })
    }

    /// An object payload's `origin`, `target` and `at` (the payload is at depth 2).
    fn signal_name(&mut self) -> Option<SignalName<'a>> {
        let (mut origin, mut target, mut at) = (None, None, None);
        self.object(2, |c, key| {
            let value = c.value(3)?;
            match key {
                b"origin" => once(&mut origin, value),
                b"target" => once(&mut target, value),
                b"at" => once(&mut at, value),
                _ => Some(()),
            }
        })?;
        let text = |v| match v {
            Some(Scalar::Str(s)) => Cow::Borrowed(s),
            _ => Cow::Borrowed(""),
        };
        Some(SignalName {
            origin: text(origin),
            target: text(target),
            at: match at {
                Some(Scalar::U64(n)) => n,
                _ => 0,
            },
        })
    }

    fn literal(&mut self, word: &[u8]) -> Option<Scalar<'a>> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| {
            self.at = end;
            Scalar::Other
        })
    }

    /// A string of the subset, as text.
    fn string(&mut self) -> Option<&'a str> {
        // Only printable ASCII gets through `raw_string`, so this never fails.
        std::str::from_utf8(self.raw_string()?).ok()
    }

    /// A string of the subset, its bytes between the quotes.
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = self.bytes.get(self.at..)?;
        let len = plain_prefix(rest);
        if *rest.get(len)? != b'"' {
            return None;
        }
        self.at += len + 1;
        Some(&rest[..len])
    }

    /// An unsigned integer without a leading zero that fits a `u64`.
    fn integer(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.at..)?;
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        let digits = &rest[..len];
        if digits.is_empty() || (digits[0] == b'0' && len > 1) {
            return None;
        }
        let n = digits.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?;
        self.at += len;
        Some(n)
    }
}

/// How many bytes `text` starts with that [`is_plain`] takes.
fn plain_prefix(text: &[u8]) -> usize {
    // Whole chunks first, each tested without a branch per byte (so the compiler can compare
    // them all at once), then byte by byte from the first chunk that is not all plain.
    const CHUNK: usize = 16;
    let whole = text
        .chunks_exact(CHUNK)
        .take_while(|chunk| chunk.iter().fold(true, |all, &b| all & is_plain(b)))
        .count()
        * CHUNK;
    let rest = &text[whole..];
    whole
        + rest
            .iter()
            .position(|&b| !is_plain(b))
            .unwrap_or(rest.len())
}

/// Whether `b` stands for itself inside a JSON string and is ASCII: printable, not `"` or `\`.
fn is_plain(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'
}
