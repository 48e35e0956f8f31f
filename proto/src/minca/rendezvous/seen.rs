//! Blobs a room has already decided on, so that the same blob coming again — the copy through a
//! second relay (§3), or a replay — is answered without decoding, opening and parsing it again.
//!
//! What a blob is decided on before rule 3, and by the cheap parts of rules 4 and 5, is a pure
//! function of the blob's text, the room key and this node's DID: none of it reads anything the
//! machine learns or forgets. Only rule 3's check reads state (the times acted on), so a room
//! remembers, for a blob it got past that check, the sender's key and `at` the check needs and
//! what came after it; the same text again is checked against the window then and there, and
//! gets the same answer the full path would give.
//!
//! A blob is known by its length and its last [`TAIL_CHARS`] characters: the end of the
//! AES-GCM tag, which covers the nonce, the text and the bound, so two honest blobs share it
//! with odds of 2⁻⁹⁶. A blob made to share it with one remembered (by changing its middle, or by
//! someone holding the room key) is one whose tag does not verify or a holder's own forgery: it
//! is ignored either way, and only the reason it is counted under may differ. Nothing that would
//! be acted on is ever answered from here ([`Then::Acted`] answers only when the window says the
//! blob is not fresh).

use alloc::vec::Vec;

use super::Ignored;
use crate::minca::envelope::BOX_BYTES;

/// Blobs a room remembers at once, the oldest forgotten first: one per peer a room holds
/// ([`MAX_ROOM_PEERS`](super::MAX_ROOM_PEERS)), far more than arrive between a blob's copies
/// through two relays. A blob forgotten is checked in full again, with the same answer.
pub const SEEN_BLOBS_PER_ROOM: usize = 64;

/// The characters at a blob's end that, with its length, stand for the whole text: 96 bits of
/// the tag (a blob is base64url, 6 bits a character).
const TAIL_CHARS: usize = 16;

/// What followed rule 3's check for a remembered blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Then {
    /// The blob was acted on: the window will never again call it fresh.
    Acted,
    /// Ignored by the cheap part of rules 4 and 5, for this reason.
    Ignored(Ignored),
}

/// A remembered blob's answer, less the window's verdict.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    /// The sender's P-256 point, as the window files it.
    pub(super) peer: [u8; BOX_BYTES],
    /// The message's `at`.
    pub(super) at: u64,
    /// What came after the window's check.
    pub(super) then: Then,
}

/// A room's remembered blobs, at most [`SEEN_BLOBS_PER_ROOM`].
#[derive(Clone, Debug, Default)]
pub(super) struct SeenBlobs {
    /// Each blob's tail, scanned on every blob received: apart from the answers so that the scan
    /// reads one small array.
    tails: Vec<u128>,
    /// Each blob's length and answer, at the same index.
    entries: Vec<(usize, Seen)>,
    /// The index overwritten next once full (the oldest).
    next: usize,
}

/// A blob's tail as one integer; `None` for a blob too short to open.
fn tail(blob: &str) -> Option<u128> {
    blob.as_bytes()
        .last_chunk::<TAIL_CHARS>()
        .map(|t| u128::from_ne_bytes(*t))
}

impl SeenBlobs {
    /// The answer remembered for `blob`.
    pub(super) fn get(&self, blob: &str) -> Option<&Seen> {
        let t = tail(blob)?;
        self.tails
            .iter()
            .zip(&self.entries)
            .find(|(x, (len, _))| **x == t && *len == blob.len())
            .map(|(_, (_, seen))| seen)
    }

    /// Remembers `blob`'s answer, forgetting the oldest when full.
    pub(super) fn remember(&mut self, blob: &str, seen: Seen) {
        let Some(t) = tail(blob) else {
            return;
        };
        if self.tails.len() < SEEN_BLOBS_PER_ROOM {
            self.tails.push(t);
            self.entries.push((blob.len(), seen));
        } else if let (Some(x), Some(e)) =
            (self.tails.get_mut(self.next), self.entries.get_mut(self.next))
        {
            *x = t;
            *e = (blob.len(), seen);
            self.next = (self.next + 1) % SEEN_BLOBS_PER_ROOM;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn seen(at: u64) -> Seen {
        Seen {
            peer: [2; BOX_BYTES],
            at,
            then: Then::Acted,
        }
    }

    #[test]
    fn a_blob_is_known_by_its_length_and_tail_and_the_oldest_goes_first() {
        let mut s = SeenBlobs::default();
        let blob = |i: usize| format!("{i:0>40}");
        s.remember("short", seen(0));
        assert!(s.get("short").is_none());
        for i in 0..=SEEN_BLOBS_PER_ROOM {
            s.remember(&blob(i), seen(i as u64));
        }
        assert!(s.get(&blob(0)).is_none());
        for i in 1..=SEEN_BLOBS_PER_ROOM {
            assert_eq!(s.get(&blob(i)).map(|x| x.at), Some(i as u64));
        }
        // Another length with the same tail is another blob.
        assert!(s.get(&format!("x{}", blob(1))).is_none());
        assert_eq!(s.tails.len(), SEEN_BLOBS_PER_ROOM);
    }
}
