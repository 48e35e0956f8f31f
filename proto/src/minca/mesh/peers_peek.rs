//! A `__peers` frame (§8) read from its text, without a JSON tree.
//!
//! Every admission in a space sends one to the newcomer and one about it to each other admitted
//! peer, so after `__signal` it is the frame a mesh receives most. [`peek`] reads it laid out as
//! weft writes it (`frame::ENVELOPE`, without whitespace), its payload an array
//! of plain strings (`plain_json`); anything else is `None`, and the machine
//! reads the frame in full.

use arrayvec::ArrayVec;

use super::frame::PEERS;
use super::introduction::MAX_PEER_LIST;
use super::plain_json;

/// What [`peek`] reads of a `__peers` frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeersPeek<'a> {
    /// The frame's room.
    pub room: &'a str,
    /// The payload's first [`MAX_PEER_LIST`] entries, every one a string: a receiver takes no
    /// more (§8), so no more are kept, and in place: no allocation grown entry by entry.
    pub entries: ArrayVec<&'a str, MAX_PEER_LIST>,
}

/// Reads a `__peers` frame laid out as weft writes it. A `Some` promises that
/// [`Frame::parse`](super::frame::Frame::parse) reads the bytes as a `__peers` frame in `room`
/// whose payload is an array whose first [`MAX_PEER_LIST`] entries are `entries`, as strings.
/// Public so that a fuzz target can hold it to that.
pub fn peek(bytes: &[u8]) -> Option<PeersPeek<'_>> {
    let (room, entries) = plain_json::as_written(bytes, PEERS, |c| {
        c.lit(b"[")?;
        let mut entries = ArrayVec::new();
        if c.lit(b"]").is_some() {
            return Some(entries);
        }
        loop {
            let entry = c.plain_str()?;
            // Full once the first MAX_PEER_LIST are in: the rest are read, not kept.
            let _ = entries.try_push(entry);
            if c.lit(b",").is_none() {
                c.lit(b"]")?;
                return Some(entries);
            }
        }
    })?;
    Some(PeersPeek { room, entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minca::mesh::frame::{Frame, MAX_FRAME_BYTES};
    use crate::minca::mesh::introduction::peer_list_payload;
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;
    use serde_json::Value;

    /// Where the peek answers, the general path reads a `__peers` frame in the same room whose
    /// payload's first entries are the peek's. Returns whether the peek answered.
    fn agrees(bytes: &[u8]) -> bool {
        let Some(p) = peek(bytes) else {
            return false;
        };
        let text = String::from_utf8_lossy(bytes);
        let f = Frame::parse(bytes).unwrap_or_else(|e| panic!("{e:?}: {text}"));
        assert_eq!(
            (f.room.as_str(), f.kind.as_str()),
            (p.room, PEERS),
            "{text}"
        );
        let general: Vec<Option<&str>> = f
            .payload
            .as_array()
            .unwrap_or_else(|| panic!("{text}"))
            .iter()
            .take(MAX_PEER_LIST)
            .map(Value::as_str)
            .collect();
        let peeked: Vec<Option<&str>> = p.entries.iter().copied().map(Some).collect();
        assert_eq!(general, peeked, "{text}");
        true
    }

    fn written(peers: &[&str]) -> Vec<u8> {
        let payload = peer_list_payload(peers.iter().copied());
        Frame::new("r1", PEERS, payload).to_bytes("did:key:zMe")
    }

    #[test]
    fn a_written_peer_list_is_peeked() {
        let many: Vec<String> = (0..70).map(|n| format!("did:key:zP{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for peers in [&[][..], &["did:key:zA"], &["did:key:zA", "x", ""], &many] {
            let bytes = written(peers);
            assert!(agrees(&bytes));
            let p = peek(&bytes).unwrap();
            assert_eq!(p.room, "r1");
            assert_eq!(p.entries[..], peers[..peers.len().min(MAX_PEER_LIST)]);
        }
    }

    #[test]
    fn anything_else_is_left_to_the_general_path_or_read_alike() {
        let good = String::from_utf8(written(&["did:key:zA", "did:key:zB"])).unwrap();
        let mut texts = alloc::vec![good.clone()];
        for (from, to) in [
            (r#""did:key:zA""#, r#""did:key:z\u0041""#),
            (r#""did:key:zA""#, r#""did:key:z\"A""#),
            (r#""did:key:zA""#, "7"),
            (r#""did:key:zA""#, "null"),
            (r#""did:key:zA""#, r#""did:key:zé""#),
            (r#""did:key:zA","#, r#""did:key:zA" , "#),
            (r#"["#, "[ "),
            (r#""]"#, r#"" ]"#),
            (r#""]"#, r#"",]"#),
            (r#"["#, "[,"),
            ("[", "{"),
            (r#""r1""#, r#""""#),
            (r#""__peers""#, r#""__signal""#),
            (r#""__peers""#, r#""__peer\u0073""#),
            ("}", "} "),
            ("}", "}}"),
            (r#""did:key:zMe""#, "1"),
            (r#"{"from":"did:key:zMe","#, "{"),
        ] {
            texts.push(good.replacen(from, to, 1));
        }
        let mut peeked = 0;
        for t in &texts {
            peeked += usize::from(agrees(t.as_bytes()));
            for end in (0..t.len()).filter(|&e| t.is_char_boundary(e)) {
                agrees(&t.as_bytes()[..end]);
            }
            for at in 0..t.len() {
                for b in [b' ', b'"', b'\\', b',', b']', b'[', 0x80] {
                    let mut changed = t.clone().into_bytes();
                    changed[at] = b;
                    agrees(&changed);
                }
            }
        }
        assert!(peeked >= 2, "{peeked}");
        let pad = " ".repeat(MAX_FRAME_BYTES);
        assert_eq!(peek(format!("{good}{pad}").as_bytes()), None);
    }
}
