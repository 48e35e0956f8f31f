//! Mesh frames (§7.1) and the space messages they carry (§9).
//!
//! Every message on a mesh connection is one binary frame of UTF-8 JSON,
//! `{ "room", "type", "from", "payload" }`. `from` is informational only: a receiver takes the
//! sender to be the peer the connection is with (§7.1, §9), so the parsed [`Frame`] does not even
//! keep it, and no code here can attribute a message by it.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;
use serde_json::Value;

use super::frame_read::Members;
use crate::codec::object;

/// The reserved types (§7.1): mesh housekeeping, never delivered to the application.
pub const RESERVED_TYPES: [&str; 5] = [AUTH_HELLO, AUTH_PROOF, PEERS, SIGNAL, LEAVE];

/// `__auth-hello` (§7.2): a side's nonce for one room's handshake.
pub const AUTH_HELLO: &str = "__auth-hello";
/// `__auth-proof` (§6.2): a side's proof over the other's nonce.
pub const AUTH_PROOF: &str = "__auth-proof";
/// `__peers` (§8): the admitted peers of a room, for introductions.
pub const PEERS: &str = "__peers";
/// `__signal` (§8): an offer or answer travelling over the mesh.
pub const SIGNAL: &str = "__signal";
/// `__leave` (§7.2): the sender leaves the room, or lets this peer go in it.
pub const LEAVE: &str = "__leave";

/// The largest mesh frame read, in bytes. The spec sets no size on peer connections (§5, "Open
/// questions"); the node socket's 16 MiB (§5.3) is the one bound it names, so a frame no node
/// would accept is refused here too, before JSON parsing.
pub const MAX_FRAME_BYTES: usize = crate::minca::node_socket::MAX_FRAME_BYTES;

/// The largest `room` or `type`, in bytes. A room name is 32 characters (§1.3) and channel rooms
/// are derived elsewhere; a type is a short word. Anything longer is not a frame weft reads.
pub const MAX_NAME_BYTES: usize = 256;

/// Why bytes are not a mesh frame. The frame is dropped (§7.1: "Any other frame from a peer is
/// dropped"); the kind is for counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// Larger than [`MAX_FRAME_BYTES`].
    TooLarge,
    /// Not UTF-8 JSON, or not a JSON object.
    NotAnObject,
    /// `room` missing, not a string, empty or longer than [`MAX_NAME_BYTES`].
    BadRoom,
    /// `type` missing, not a string, empty or longer than [`MAX_NAME_BYTES`].
    BadType,
}

/// One mesh frame as received. The sender is the connection's peer, never `from`.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The room the frame belongs to.
    pub room: String,
    /// The message type (`type` on the wire).
    pub kind: String,
    /// The payload; `null` when absent.
    pub payload: Value,
}

/// Whether `kind` is reserved: mesh housekeeping, never handed to the application.
pub fn is_reserved(kind: &str) -> bool {
    RESERVED_TYPES.contains(&kind)
}

/// Whether `s` may be a frame's `room` or `type`: not empty, at most [`MAX_NAME_BYTES`].
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_BYTES
}

/// The bytes of a frame of type `kind` in `room` from `from` (§7.1), its payload written from
/// whatever serializes it: a [`Value`], or a message written straight from its fields.
pub(crate) fn write(room: &str, kind: &str, from: &str, payload: &impl Serialize) -> Vec<u8> {
    // Written from borrows: a payload (an SDP, a live message) is not copied to be sent.
    // The fields are in the order a `serde_json::Map` keeps them, so the bytes are what a
    // frame built as a `Value` would give.
    #[derive(Serialize)]
    struct Wire<'a, P> {
        from: &'a str,
        payload: &'a P,
        room: &'a str,
        #[serde(rename = "type")]
        kind: &'a str,
    }
    serde_json::to_vec(&Wire {
        from,
        payload,
        room,
        kind,
    })
    .unwrap_or_default()
}

/// The bytes of a frame of type `kind` in `room` from `from` whose payload is the array of
/// `items`: what [`write`] gives for it, laid out by hand into one allocation of its size
/// (exact unless a text holds an escape; a `__peers` list of a full room is several
/// kilobytes, which serde_json would reach by doubling from 128 bytes).
pub(crate) fn write_texts(room: &str, kind: &str, from: &str, items: &[&str]) -> Vec<u8> {
    let pieces = ENVELOPE.iter().map(|p| p.len()).sum::<usize>();
    let list =
        2 + items.len().saturating_sub(1) + items.iter().map(|s| json_str_len(s)).sum::<usize>();
    let size = pieces + json_str_len(from) + list + json_str_len(room) + json_str_len(kind);
    let mut out = Vec::with_capacity(size);
    let [e_from, e_payload, e_room, e_type, e_end] = ENVELOPE;
    out.extend_from_slice(e_from);
    json_str(&mut out, from);
    out.extend_from_slice(e_payload);
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(&mut out, item);
    }
    out.push(b']');
    out.extend_from_slice(e_room);
    json_str(&mut out, room);
    out.extend_from_slice(e_type);
    json_str(&mut out, kind);
    out.extend_from_slice(e_end);
    out
}

/// The length of `s` written as a JSON string when nothing in it is escaped (DIDs, rooms,
/// signatures): what a frame's buffer is sized by; an escape grows it.
pub(super) fn json_str_len(s: &str) -> usize {
    s.len() + 2
}

/// Writes `s` as a JSON string, quoted and escaped as serde_json writes it: copied whole when
/// nothing in it needs an escape (DIDs, rooms, signatures, base64url), else by serde_json itself.
pub(super) fn json_str(out: &mut Vec<u8>, s: &str) {
    if object::plain_run(s.as_bytes()) == s.len() {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if let Ok(quoted) = serde_json::to_vec(s) {
        // Writing a string cannot fail.
        out.extend_from_slice(&quoted);
    }
}

/// A frame as [`write`] lays it out, between its values (`from`, `payload`, `room`, `type`):
/// the members in the order a `serde_json::Map` keeps them, without whitespace. The commonest
/// frames are read by hand laid out so ([`signal_peek`](super::signal_peek),
/// [`plain_json::as_written`](super::plain_json::as_written)).
pub(super) const ENVELOPE: [&[u8]; 5] = [
    br#"{"from":"#,
    br#","payload":"#,
    br#","room":"#,
    br#","type":"#,
    b"}",
];

/// One mesh frame as received, its `room` and `type` borrowed from the bytes (copied only when
/// written with escapes): what [`Frame::parse`] reads, without the two names' allocations.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameRef<'a> {
    /// The room the frame belongs to.
    pub room: Cow<'a, str>,
    /// The message type (`type` on the wire).
    pub kind: Cow<'a, str>,
    /// The payload; `null` when absent.
    pub payload: Value,
}

impl<'a> FrameRef<'a> {
    /// Parses one binary frame: the rule [`Frame::parse`] goes through.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FrameError> {
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge);
        }
        let Ok(members) = serde_json::from_slice::<Members<'a>>(bytes) else {
            return Err(FrameError::NotAnObject);
        };
        let name = |n: Option<Cow<'a, str>>| n.filter(|s| is_name(s));
        Ok(Self {
            room: name(members.room).ok_or(FrameError::BadRoom)?,
            kind: name(members.kind).ok_or(FrameError::BadType)?,
            payload: members.payload.unwrap_or(Value::Null),
        })
    }

    /// Whether the type is reserved: mesh housekeeping, never handed to the application.
    pub fn is_reserved(&self) -> bool {
        is_reserved(&self.kind)
    }
}

impl Frame {
    /// A frame to send.
    pub fn new(room: impl Into<String>, kind: impl Into<String>, payload: Value) -> Self {
        Self {
            room: room.into(),
            kind: kind.into(),
            payload,
        }
    }

    /// Parses one binary frame.
    pub fn parse(bytes: &[u8]) -> Result<Self, FrameError> {
        let f = FrameRef::parse(bytes)?;
        Ok(Self {
            room: f.room.into_owned(),
            kind: f.kind.into_owned(),
            payload: f.payload,
        })
    }

    /// [`Frame::parse`] through a JSON tree of the whole frame, as it read frames before
    /// [`FrameRef`]: every frame it reads, [`FrameRef::parse`] must read alike. Public so that a
    /// fuzz target can hold the two to the same answer; [`Frame::parse`] is the way to read one.
    pub fn parse_tree(bytes: &[u8]) -> Result<Self, FrameError> {
        fn name(object: &serde_json::Map<String, Value>, field: &str) -> Option<String> {
            match object.get(field) {
                Some(Value::String(s)) if is_name(s) => Some(s.clone()),
                _ => None,
            }
        }
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge);
        }
        let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(bytes) else {
            return Err(FrameError::NotAnObject);
        };
        let room = name(&object, "room").ok_or(FrameError::BadRoom)?;
        let kind = name(&object, "type").ok_or(FrameError::BadType)?;
        let payload = object.remove("payload").unwrap_or(Value::Null);
        Ok(Self {
            room,
            kind,
            payload,
        })
    }

    /// The bytes to send, with `from` set to the sender's own session DID (§7.1).
    pub fn to_bytes(&self, from: &str) -> Vec<u8> {
        write(&self.room, &self.kind, from, &self.payload)
    }

    /// Whether the type is reserved: mesh housekeeping, never handed to the application.
    pub fn is_reserved(&self) -> bool {
        is_reserved(&self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_frame_round_trips_and_from_is_written_by_the_sender() {
        let f = Frame::new("room1", "live", json!({"x": 1}));
        let bytes = f.to_bytes("did:key:zMe");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["from"], "did:key:zMe");
        assert_eq!(Frame::parse(&bytes).unwrap(), f);
        assert_eq!(
            bytes,
            br#"{"from":"did:key:zMe","payload":{"x":1},"room":"room1","type":"live"}"#
        );
    }

    #[test]
    fn a_written_frame_is_laid_out_as_the_envelope_says() {
        let bytes = write("r1", "t", "did:key:zMe", &json!([1]));
        let values: [&[u8]; 4] = [br#""did:key:zMe""#, b"[1]", br#""r1""#, br#""t""#];
        let mut laid: Vec<u8> = Vec::new();
        for (piece, value) in ENVELOPE.iter().zip(values) {
            laid.extend_from_slice(piece);
            laid.extend_from_slice(value);
        }
        laid.extend_from_slice(ENVELOPE[4]);
        assert_eq!(bytes, laid);
    }

    #[test]
    fn the_parsed_frame_does_not_carry_from() {
        let a = Frame::parse(br#"{"room":"r","type":"live","from":"did:key:zA","payload":1}"#);
        let b = Frame::parse(br#"{"room":"r","type":"live","from":"did:key:zB","payload":1}"#);
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn room_is_present_on_every_frame() {
        assert_eq!(
            Frame::parse(br#"{"type":"live","payload":1}"#),
            Err(FrameError::BadRoom)
        );
        assert_eq!(
            Frame::parse(br#"{"room":"","type":"live"}"#),
            Err(FrameError::BadRoom)
        );
        assert_eq!(
            Frame::parse(br#"{"room":7,"type":"live"}"#),
            Err(FrameError::BadRoom)
        );
        assert_eq!(Frame::parse(br#"{"room":"r"}"#), Err(FrameError::BadType));
    }

    #[test]
    fn anything_but_a_json_object_is_dropped() {
        for bad in [&b"[]"[..], b"\"x\"", b"not json", b"\xff\xfe", b""] {
            assert_eq!(Frame::parse(bad), Err(FrameError::NotAnObject));
        }
    }

    #[test]
    fn a_missing_payload_is_null() {
        let f = Frame::parse(br#"{"room":"r","type":"__leave"}"#).unwrap();
        assert_eq!(f.payload, Value::Null);
    }

    #[test]
    fn reserved_types_are_the_five_housekeeping_types() {
        for t in RESERVED_TYPES {
            assert!(Frame::new("r", t, Value::Null).is_reserved());
        }
        for t in ["live", "who", "sync", "__other", "__auth_hello"] {
            assert!(!Frame::new("r", t, Value::Null).is_reserved());
        }
    }

    #[test]
    fn oversized_names_and_frames_are_refused_before_use() {
        let long = "r".repeat(MAX_NAME_BYTES + 1);
        let text = alloc::format!(r#"{{"room":"{long}","type":"live"}}"#);
        assert_eq!(Frame::parse(text.as_bytes()), Err(FrameError::BadRoom));
        let huge = alloc::vec![b' '; MAX_FRAME_BYTES + 1];
        assert_eq!(Frame::parse(&huge), Err(FrameError::TooLarge));
    }

    #[test]
    fn members_read_without_a_tree_are_what_the_tree_gave() {
        let texts = [
            r#"{"from":"did:key:zMe","payload":{"nonce":"abc"},"room":"r1","type":"__auth-hello"}"#,
            r#"{"room":"r\u0031","type":"l\"ive","from":7,"payload":[1,"x",{"a":null}]}"#,
            r#"{"room":"a","room":"b","type":"t","type":5,"payload":1,"payload":2}"#,
            r#"{"type":"t","room":"r","extra":{"k":[true,false,1.5e3,-2]},"payload":"\ud83d\ude00"}"#,
            r#"{"r\u006fom":"r","typ\u0065":"t"}"#,
            r#"{"room":"r","type":"t","from":"\ud800"}"#,
            r#"{"room":"r","type":"t","x":"a\u0000b","y":1e999}"#,
            r#" { "room" : "r" , "type" : "t" } "#,
        ];
        let mut cases: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
        cases.push(br#"{"room":"r","type":"t","from":"\xff"}"#.to_vec());
        cases.push(br#"{"room":"r","type":"t","\xfe":1}"#.to_vec());
        let mut all = Vec::new();
        for t in &cases {
            all.push(t.clone());
            for end in 0..t.len() {
                all.push(t[..end].to_vec());
            }
            for at in 0..t.len() {
                for b in [
                    b' ', b'"', b'\\', b',', b'}', b'{', b'[', b':', b'1', 0x80, 0x1f,
                ] {
                    let mut changed = t.clone();
                    changed[at] = b;
                    all.push(changed);
                }
            }
        }
        let mut read = 0;
        for bytes in &all {
            let tree = Frame::parse_tree(bytes);
            assert_eq!(
                Frame::parse(bytes),
                tree,
                "{}",
                String::from_utf8_lossy(bytes)
            );
            read += usize::from(tree.is_ok());
        }
        assert!(read > 100, "{read}");
        let f = FrameRef::parse(texts[0].as_bytes()).unwrap();
        assert!(matches!(
            (&f.room, &f.kind),
            (Cow::Borrowed(_), Cow::Borrowed(_))
        ));
    }

    #[test]
    fn a_list_of_texts_laid_out_by_hand_is_what_serde_json_writes() {
        let every: String = (0u8..0x80).map(char::from).chain(['é', '😀']).collect();
        let many: Vec<String> = (0..70).map(|n| alloc::format!("did:key:zP{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for items in [
            &[][..],
            &[""],
            &["did:key:zA"],
            &["a", every.as_str(), "\\"],
            &many,
        ] {
            for (room, from) in [("r1", "did:key:zMe"), (every.as_str(), every.as_str())] {
                let by_serde = write(room, PEERS, from, &items);
                assert_eq!(write_texts(room, PEERS, from, items), by_serde);
            }
        }
    }
}
