//! Newline-delimited JSON framing (AIRC §3.2): bytes from a stream in, [`Frame`]s out, and a
//! frame out as one line.
//!
//! "A frame is one JSON object (RFC 8259), UTF-8, terminated by `\n`"; it "MUST NOT exceed
//! 1 048 576 bytes including the newline"; "blank lines MUST be ignored"; "readers MUST NOT
//! assume one frame per read". [`FrameDecoder`] takes bytes in whatever pieces the transport
//! delivers and yields one result per non-blank line; [`encode`] writes one line.
//!
//! Decisions where §3.2 is silent:
//!
//! - A line of only JSON whitespace (space, tab, CR) is blank, and a line may end `\r\n`: CR is
//!   JSON whitespace, so such a line is still one JSON text. The CR counts toward the limit,
//!   which is on bytes as sent.
//! - A line too large is fatal: the decoder yields [`FramingError::TooLarge`] once, after the
//!   lines before it, and then takes no more input. §4.8 sends `error` before closing for a
//!   protocol violation, and skipping to the next newline would mean reading an unbounded amount
//!   from a peer that is about to be closed.
//! - Every other bad line (not UTF-8, not JSON, not an object, no string `t`, bad fields) is one
//!   error for that line only: the framing is intact, and [`FramingError::answer`] says what the
//!   connection does about it.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde_json::Value;

use super::frame::{AckCode, ErrorCode, Frame};

/// The largest frame, in bytes, including its newline (§3.2, §15).
pub const MAX_FRAME_BYTES: usize = 1_048_576;

/// What ends a frame.
const NEWLINE: u8 = b'\n';

/// Why a line is not a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FramingError {
    /// A line longer than [`MAX_FRAME_BYTES`] with its newline. The decoder takes no more input.
    TooLarge,
    /// The line is not UTF-8.
    NotUtf8,
    /// The line is not one JSON text.
    BadJson,
    /// The line is JSON but not an object.
    NotObject,
    /// The object has no `t`, or its `t` is not a string.
    MissingType,
    /// A known `t` whose fields are missing or of the wrong type.
    BadFields {
        /// The frame's `t`.
        t: String,
        /// The frame's `id`, when it has a string one: a `msg`'s, which its ack needs (§6.2).
        id: Option<String>,
        /// What was wrong, for the `error` frame's reason.
        detail: String,
    },
}

/// What a connection does about a line that is not a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Send `error` with this code and close (§3.2, §4.8).
    Close(ErrorCode),
    /// Answer the message with ack `failed` and this code, and carry on: §6.2 validates a
    /// `msg`'s field types and answers `failed bad_address`.
    AckFailed {
        /// The message's id.
        id: String,
        /// The ack's code.
        code: AckCode,
    },
}

impl FramingError {
    /// The §14.2 code for this error, as an `error` frame would carry it.
    ///
    /// Invalid UTF-8 is `bad_json` because RFC 8259 §8.1 makes UTF-8 part of what JSON text is;
    /// valid JSON that is not a frame (not an object, no string `t`, bad fields) is `bad_frame`;
    /// a `bind` with bad fields is `bad_bind`, the code §4.3 gives for a refused bind.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::TooLarge => ErrorCode::FrameTooLarge,
            Self::NotUtf8 | Self::BadJson => ErrorCode::BadJson,
            Self::BadFields { t, .. } if t == "bind" => ErrorCode::BadBind,
            Self::NotObject | Self::MissingType | Self::BadFields { .. } => ErrorCode::BadFrame,
        }
    }

    /// What the connection does: a `msg` with bad fields and a string `id` gets ack `failed
    /// bad_address` (§6.2); anything else gets `error` and a close. A `msg` without a usable
    /// `id` cannot be acked, so it is closed on as `bad_frame`.
    pub fn answer(&self) -> Answer {
        match self {
            Self::BadFields {
                t, id: Some(id), ..
            } if t == "msg" => Answer::AckFailed {
                id: id.clone(),
                code: AckCode::BadAddress,
            },
            other => Answer::Close(other.code()),
        }
    }
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge => write!(f, "frame exceeds {MAX_FRAME_BYTES} bytes"),
            Self::NotUtf8 => f.write_str("frame is not UTF-8"),
            Self::BadJson => f.write_str("frame is not JSON"),
            Self::NotObject => f.write_str("frame is not a JSON object"),
            Self::MissingType => f.write_str("frame has no string t"),
            Self::BadFields { t, detail, .. } => write!(f, "bad {t} frame: {detail}"),
        }
    }
}

impl core::error::Error for FramingError {}

/// Reads one line (without its newline) as a frame.
pub fn decode_line(line: &[u8]) -> Result<Frame, FramingError> {
    let text = core::str::from_utf8(line).map_err(|_| FramingError::NotUtf8)?;
    let value: Value = serde_json::from_str(text).map_err(|_| FramingError::BadJson)?;
    Frame::from_json(&value)
}

/// Writes a frame as one line ending in `\n`. JSON escapes every newline inside a string, so the
/// line holds no other newline (§3.2).
///
/// The line may exceed [`MAX_FRAME_BYTES`]; [`encode_checked`] refuses that.
pub fn encode(frame: &Frame) -> Vec<u8> {
    // Serializing these types to memory cannot fail: every map key is a string and every frame
    // is an object. Were it ever to, an empty line is what goes out, and receivers ignore it.
    let mut line = serde_json::to_vec(frame).unwrap_or_default();
    line.push(NEWLINE);
    line
}

/// [`encode`], refusing a frame the peer would refuse for its size (§3.2).
pub fn encode_checked(frame: &Frame) -> Result<Vec<u8>, FramingError> {
    let line = encode(frame);
    if line.len() > MAX_FRAME_BYTES {
        return Err(FramingError::TooLarge);
    }
    Ok(line)
}

/// Whether a line holds only JSON whitespace, the blank lines §3.2 ignores.
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// An incremental decoder: [`push`](Self::push) bytes as they arrive, then take results with
/// [`Iterator::next`] until it gives `None`.
///
/// Memory is bounded: the bytes of an unfinished line never reach [`MAX_FRAME_BYTES`], and a
/// host that drains after every push holds at most that plus one push.
#[derive(Clone, Debug, Default)]
pub struct FrameDecoder {
    /// Complete lines not yet taken, then the unfinished line.
    buf: Vec<u8>,
    /// Where in `buf` the next complete line starts.
    start: usize,
    /// Where the unfinished line starts; `buf[start..partial]` is complete lines.
    partial: usize,
    /// A line was too large; no more input is taken.
    too_large: bool,
    /// The too-large error has been yielded.
    reported: bool,
}

impl FrameDecoder {
    /// A decoder with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes bytes from the stream, in any pieces.
    ///
    /// Once a line grows past [`MAX_FRAME_BYTES`] the bytes of that line are dropped, and this
    /// and every later push are ignored; [`Iterator::next`] yields the lines before it, then
    /// [`FramingError::TooLarge`].
    pub fn push(&mut self, bytes: &[u8]) {
        if self.too_large {
            return;
        }
        // Reclaim the lines already taken before growing.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.partial -= self.start;
            self.start = 0;
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let pending = self.buf.len() - self.partial;
            match rest.iter().position(|&b| b == NEWLINE) {
                Some(i) if pending + i < MAX_FRAME_BYTES => {
                    self.buf.extend_from_slice(&rest[..=i]);
                    self.partial = self.buf.len();
                    rest = &rest[i + 1..];
                }
                // Without its newline the line already fills the limit, so with it the line
                // would exceed it: refuse now rather than buffer more.
                None if pending + rest.len() < MAX_FRAME_BYTES => {
                    self.buf.extend_from_slice(rest);
                    return;
                }
                _ => {
                    self.buf.truncate(self.partial);
                    self.too_large = true;
                    return;
                }
            }
        }
    }

    /// Bytes held: complete lines not yet taken, and the unfinished line.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether a line was too large, so that no more input is taken.
    pub fn is_closed(&self) -> bool {
        self.too_large
    }
}

impl Iterator for FrameDecoder {
    type Item = Result<Frame, FramingError>;

    /// The next frame, or why the next non-blank line is not one; `None` when no complete line
    /// is buffered.
    fn next(&mut self) -> Option<Self::Item> {
        while self.start < self.partial {
            let complete = &self.buf[self.start..self.partial];
            // `partial` only ever sits just past a newline, so a complete region has one.
            let end = complete.iter().position(|&b| b == NEWLINE)?;
            let line = &complete[..end];
            self.start += end + 1;
            if !is_blank(line) {
                return Some(decode_line(line));
            }
        }
        if self.too_large && !self.reported {
            self.reported = true;
            return Some(Err(FramingError::TooLarge));
        }
        None
    }
}
