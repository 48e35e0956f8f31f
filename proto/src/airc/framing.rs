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
    if let Some(frame) = Frame::from_text_common(text) {
        return Ok(frame);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::airc::frame::{Ack, AckStatus, Msg, Ping, UNKNOWN_TYPE};
    use alloc::string::ToString;
    use alloc::vec;

    const PING: &[u8] = b"{\"t\":\"ping\",\"n\":7}\n";
    const ACK: &[u8] = b"{\"t\":\"ack\",\"id\":\"m1\",\"status\":\"delivered\"}\n";

    fn ping(n: u64) -> Frame {
        Frame::Ping(Ping {
            n: Some(Value::from(n)),
        })
    }

    fn ack() -> Frame {
        Frame::Ack(Ack::new("m1", AckStatus::Delivered))
    }

    fn drain(d: &mut FrameDecoder) -> Vec<Result<Frame, FramingError>> {
        d.collect()
    }

    /// A ping line of exactly `len` bytes, newline included, padded in `n`.
    fn ping_line(len: usize) -> Vec<u8> {
        let overhead = "{\"t\":\"ping\",\"n\":\"\"}\n".len();
        let mut line = b"{\"t\":\"ping\",\"n\":\"".to_vec();
        line.resize(len - 3, b'x');
        line.extend_from_slice(b"\"}\n");
        assert_eq!(line.len(), len);
        assert!(len >= overhead);
        line
    }

    #[test]
    fn frame_fed_one_byte_at_a_time_decodes() {
        let mut d = FrameDecoder::new();
        let mut out = Vec::new();
        for &b in PING.iter().chain(ACK) {
            d.push(&[b]);
            out.extend(d.by_ref());
        }
        assert_eq!(out, vec![Ok(ping(7)), Ok(ack())]);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn many_frames_in_one_push_all_decode() {
        let mut bytes = Vec::new();
        for _ in 0..100 {
            bytes.extend_from_slice(PING);
            bytes.extend_from_slice(ACK);
        }
        let mut d = FrameDecoder::new();
        d.push(&bytes);
        let out = drain(&mut d);
        assert_eq!(out.len(), 200);
        assert!(out.chunks(2).all(|p| p == [Ok(ping(7)), Ok(ack())]));
    }

    #[test]
    fn frames_split_at_every_point_decode_the_same() {
        let mut bytes = PING.to_vec();
        bytes.extend_from_slice(ACK);
        for cut in 0..=bytes.len() {
            let mut d = FrameDecoder::new();
            d.push(&bytes[..cut]);
            let mut out = drain(&mut d);
            d.push(&bytes[cut..]);
            out.extend(d.by_ref());
            assert_eq!(out, vec![Ok(ping(7)), Ok(ack())], "cut at {cut}");
        }
    }

    #[test]
    fn a_partial_line_yields_nothing_until_its_newline() {
        let mut d = FrameDecoder::new();
        d.push(&PING[..PING.len() - 1]);
        assert_eq!(d.next(), None);
        d.push(b"\n");
        assert_eq!(d.next(), Some(Ok(ping(7))));
        assert_eq!(d.next(), None);
    }

    #[test]
    fn frame_of_exactly_max_bytes_with_newline_is_accepted() {
        let line = ping_line(MAX_FRAME_BYTES);
        let mut d = FrameDecoder::new();
        d.push(&line);
        assert!(matches!(d.next(), Some(Ok(Frame::Ping(_)))));
        assert!(!d.is_closed());
        // And in two pieces, the newline alone: the partial line of MAX - 1 bytes waits.
        let mut d = FrameDecoder::new();
        d.push(&line[..MAX_FRAME_BYTES - 1]);
        assert_eq!(d.next(), None);
        assert!(!d.is_closed());
        d.push(b"\n");
        assert!(matches!(d.next(), Some(Ok(Frame::Ping(_)))));
    }

    #[test]
    fn frame_of_max_plus_one_bytes_is_frame_too_large() {
        let line = ping_line(MAX_FRAME_BYTES + 1);
        let mut d = FrameDecoder::new();
        d.push(&line);
        let err = d.next();
        assert_eq!(err, Some(Err(FramingError::TooLarge)));
        assert_eq!(FramingError::TooLarge.code(), ErrorCode::FrameTooLarge);
        assert_eq!(
            FramingError::TooLarge.answer(),
            Answer::Close(ErrorCode::FrameTooLarge)
        );
        assert_eq!(d.next(), None);
    }

    #[test]
    fn too_large_is_reported_before_the_newline_with_memory_bounded() {
        let mut d = FrameDecoder::new();
        let chunk = [b'x'; 4096];
        let mut pushed = 0;
        while !d.is_closed() {
            d.push(&chunk);
            pushed += chunk.len();
            assert!(d.buffered() < MAX_FRAME_BYTES);
        }
        // Closed as soon as the unfinished line filled the limit, not a chunk later.
        assert!(pushed >= MAX_FRAME_BYTES && pushed < MAX_FRAME_BYTES + chunk.len());
        assert_eq!(d.buffered(), 0);
        assert_eq!(d.next(), Some(Err(FramingError::TooLarge)));
    }

    #[test]
    fn after_frame_too_large_no_more_input_is_taken() {
        let mut d = FrameDecoder::new();
        let mut bytes = PING.to_vec();
        bytes.extend_from_slice(&ping_line(MAX_FRAME_BYTES + 1));
        bytes.extend_from_slice(ACK);
        d.push(&bytes);
        d.push(ACK);
        // The line before the oversized one still counts; nothing after it does.
        assert_eq!(
            drain(&mut d),
            vec![Ok(ping(7)), Err(FramingError::TooLarge)]
        );
        d.push(ACK);
        assert_eq!(d.next(), None);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn blank_and_whitespace_lines_are_ignored() {
        let mut d = FrameDecoder::new();
        d.push(b"\n\n   \n\t\r\n\r\n");
        d.push(PING);
        d.push(b"\n");
        assert_eq!(drain(&mut d), vec![Ok(ping(7))]);
    }

    #[test]
    fn crlf_line_endings_are_accepted() {
        let mut d = FrameDecoder::new();
        d.push(b"{\"t\":\"ping\",\"n\":7}\r\n");
        assert_eq!(drain(&mut d), vec![Ok(ping(7))]);
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let line =
            br#"{"t":"ack","x":{"deep":[1,2]},"id":"m1","status":"delivered","future":true}"#;
        assert_eq!(decode_line(line), Ok(ack()));
    }

    #[test]
    fn unknown_t_is_unknown_not_an_error() {
        let line = br#"{"t":"teleport","to":"mars"}"#;
        assert_eq!(
            decode_line(line),
            Ok(Frame::Unknown {
                t: "teleport".to_string()
            })
        );
        assert_eq!(UNKNOWN_TYPE, ErrorCode::UnexpectedFrame);
    }

    #[test]
    fn invalid_utf8_is_bad_json() {
        let e = decode_line(b"{\"t\":\"ping\",\"n\":\"\xff\"}").unwrap_err();
        assert_eq!(e, FramingError::NotUtf8);
        assert_eq!(e.answer(), Answer::Close(ErrorCode::BadJson));
    }

    #[test]
    fn invalid_json_is_bad_json() {
        for line in [
            &b"{\"t\":\"ping\""[..],
            b"not json",
            b"{\"t\":\"ping\"} {}",
            b"{'t':1}",
        ] {
            let e = decode_line(line).unwrap_err();
            assert_eq!(e, FramingError::BadJson);
            assert_eq!(e.code(), ErrorCode::BadJson);
        }
    }

    #[test]
    fn json_that_is_not_an_object_is_bad_frame() {
        for line in [&b"[1,2]"[..], b"\"ping\"", b"7", b"null"] {
            let e = decode_line(line).unwrap_err();
            assert_eq!(e, FramingError::NotObject);
            assert_eq!(e.code(), ErrorCode::BadFrame);
        }
    }

    #[test]
    fn missing_or_non_string_t_is_bad_frame() {
        for line in [
            &b"{}"[..],
            br#"{"type":"ping"}"#,
            br#"{"t":7}"#,
            br#"{"t":null}"#,
        ] {
            let e = decode_line(line).unwrap_err();
            assert_eq!(e, FramingError::MissingType);
            assert_eq!(e.answer(), Answer::Close(ErrorCode::BadFrame));
        }
    }

    #[test]
    fn known_t_with_bad_fields_is_bad_frame() {
        let e = decode_line(br#"{"t":"ack","id":"m1","status":"lost"}"#).unwrap_err();
        assert!(matches!(&e, FramingError::BadFields { t, .. } if t == "ack"));
        assert_eq!(e.answer(), Answer::Close(ErrorCode::BadFrame));
        let e = decode_line(br#"{"t":"hello","role":"client"}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::BadFrame);
    }

    #[test]
    fn msg_with_bad_fields_is_acked_failed_bad_address() {
        let e = decode_line(br#"{"t":"msg","id":"m1","from":"x","to":7,"ts":1,"body":"b"}"#)
            .unwrap_err();
        assert_eq!(
            e.answer(),
            Answer::AckFailed {
                id: "m1".to_string(),
                code: AckCode::BadAddress
            }
        );
        let e = decode_line(br#"{"t":"msg","id":"m1","from":"x","to":"y","ts":"now","body":"b"}"#)
            .unwrap_err();
        assert!(matches!(e.answer(), Answer::AckFailed { .. }));
    }

    #[test]
    fn msg_without_a_string_id_is_bad_frame() {
        let e = decode_line(br#"{"t":"msg","id":5,"from":"x","to":"y","ts":1,"body":"b"}"#)
            .unwrap_err();
        assert_eq!(e.answer(), Answer::Close(ErrorCode::BadFrame));
    }

    #[test]
    fn bind_with_bad_fields_is_bad_bind() {
        let e = decode_line(br#"{"t":"bind","names":"alice/"}"#).unwrap_err();
        assert_eq!(e.answer(), Answer::Close(ErrorCode::BadBind));
    }

    #[test]
    fn a_bad_line_does_not_lose_the_next_frame() {
        let mut d = FrameDecoder::new();
        d.push(b"nonsense\n{\"t\":7}\n");
        d.push(PING);
        assert_eq!(
            drain(&mut d),
            vec![
                Err(FramingError::BadJson),
                Err(FramingError::MissingType),
                Ok(ping(7))
            ]
        );
    }

    #[test]
    fn encoded_frame_is_one_line_without_raw_newlines() {
        let frame = Frame::Msg(Msg {
            id: "m\n1".to_string(),
            from: "airc://example.com/alice/x".to_string(),
            to: "airc://example.com/bob/y".to_string(),
            ts: 1790380000.1,
            body: "line one\nline two\r\n\u{2028}end".to_string(),
            kind: None,
            re: None,
            ttl: Some(60),
            via: None,
            hdr: None,
        });
        let line = encode(&frame);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(!line.contains(&b'\r'));
        let mut d = FrameDecoder::new();
        d.push(&line);
        assert_eq!(drain(&mut d), vec![Ok(frame)]);
    }

    #[test]
    fn encoded_frame_starts_with_its_t() {
        assert!(encode(&ack()).starts_with(br#"{"t":"ack","#));
        assert_eq!(
            encode(&Frame::Unknown { t: "x".to_string() }),
            b"{\"t\":\"x\"}\n"
        );
    }

    #[test]
    fn encode_checked_refuses_a_frame_over_the_limit() {
        let fits = decode_line(&ping_line(MAX_FRAME_BYTES)[..MAX_FRAME_BYTES - 1]).unwrap();
        assert_eq!(encode_checked(&fits).map(|l| l.len()), Ok(MAX_FRAME_BYTES));
        let over = decode_line(&ping_line(MAX_FRAME_BYTES + 1)[..MAX_FRAME_BYTES]).unwrap();
        assert_eq!(encode_checked(&over), Err(FramingError::TooLarge));
    }
}
