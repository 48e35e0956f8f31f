//! Blobs the machine has lately decided on, so that the same blob coming again — the copy through
//! a second relay (§3), or a replay — is answered without decoding, opening and parsing it again.
//!
//! What a blob is decided on before rule 3, and by the cheap parts of rules 4 and 5, is a pure
//! function of the blob's text, the room's key and this node's DID: none of it reads anything the
//! machine learns or forgets. Only rule 3's check reads state (the times acted on), so for a blob
//! that got past that check the machine remembers the sender's key and `at` the check needs and
//! what came after it; the same text again in the same room is checked against the window then
//! and there, and gets the same answer the full path would give.
//!
//! A blob is known by its room, its length and its last [`TAIL_CHARS`] characters: the end of the
//! AES-GCM tag, which covers the nonce, the text and the bound, so two honest blobs share it
//! with odds of 2⁻⁹⁶. A blob made to share it with one remembered (by changing its middle, or by
//! someone holding the room key) is one whose tag does not verify or a holder's own forgery: it
//! is ignored either way, and only the reason it is counted under may differ. Nothing that would
//! be acted on is ever answered from here ([`Then::Acted`] answers only when the window says the
//! blob is not fresh).
//!
//! One memory for the machine, not one per room: the two copies of a blob arrive close together
//! whatever the room, and the memory stays [`SEEN_BLOBS`] entries however many rooms a node is
//! in (a device may be in [`MAX_ROOMS`](super::MAX_ROOMS)).

use alloc::vec::Vec;

use super::Ignored;
use crate::minca::envelope::BOX_BYTES;

/// Blobs remembered at once, the oldest forgotten first: many more than a node hears between a
/// blob's copies through two relays, in about 2.6 KiB. A blob forgotten is checked in full again,
/// with the same answer.
pub const SEEN_BLOBS: usize = 32;

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

/// Which blob an entry is: its room (the first bytes of the room's scope), length and tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    room: [u8; 8],
    len: u32,
    tail: [u8; TAIL_CHARS],
}

impl Key {
    /// `None` for a blob too short or too long to open.
    fn of(room: &[u8; 32], blob: &str) -> Option<Self> {
        Some(Self {
            room: *room.first_chunk()?,
            len: u32::try_from(blob.len()).ok()?,
            tail: *blob.as_bytes().last_chunk()?,
        })
    }

    /// The key folded into 32 bits, scanned before the key itself.
    fn digest(&self) -> u32 {
        let tail = u128::from_ne_bytes(self.tail);
        let folded = (tail as u64)
            ^ ((tail >> 64) as u64)
            ^ u64::from_ne_bytes(self.room)
            ^ u64::from(self.len);
        (folded as u32) ^ ((folded >> 32) as u32)
    }
}

/// The machine's remembered blobs, at most [`SEEN_BLOBS`].
#[derive(Clone, Debug, Default)]
pub(super) struct SeenBlobs {
    /// Each entry's [`Key::digest`], scanned for every blob received: apart from the entries, so
    /// that the scan (nearly always a miss) reads two cache lines, not thirty-six.
    digests: Vec<u32>,
    /// The entries, at the same index.
    entries: Vec<(Key, Seen)>,
    /// The index overwritten next once full (the oldest).
    next: usize,
}

impl SeenBlobs {
    /// The answer remembered for `blob` in the room of `scope`.
    pub(super) fn get(&self, scope: &[u8; 32], blob: &str) -> Option<&Seen> {
        let key = Key::of(scope, blob)?;
        let d = key.digest();
        self.digests
            .iter()
            .zip(&self.entries)
            .find(|(x, (k, _))| **x == d && *k == key)
            .map(|(_, (_, seen))| seen)
    }

    /// Remembers `blob`'s answer in the room of `scope`, forgetting the oldest when full.
    pub(super) fn remember(&mut self, scope: &[u8; 32], blob: &str, seen: Seen) {
        let Some(key) = Key::of(scope, blob) else {
            return;
        };
        let d = key.digest();
        if self.digests.len() < SEEN_BLOBS {
            self.digests.push(d);
            self.entries.push((key, seen));
        } else if let (Some(x), Some(e)) = (
            self.digests.get_mut(self.next),
            self.entries.get_mut(self.next),
        ) {
            *x = d;
            *e = (key, seen);
            self.next = (self.next + 1) % SEEN_BLOBS;
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
    fn a_blob_is_known_by_its_room_length_and_tail_and_the_oldest_goes_first() {
        let (here, there) = ([1; 32], [3; 32]);
        let mut s = SeenBlobs::default();
        let blob = |i: usize| format!("{i:0>40}");
        s.remember(&here, "short", seen(0));
        assert!(s.get(&here, "short").is_none());
        for i in 0..=SEEN_BLOBS {
            s.remember(&here, &blob(i), seen(i as u64));
        }
        assert!(s.get(&here, &blob(0)).is_none());
        for i in 1..=SEEN_BLOBS {
            assert_eq!(s.get(&here, &blob(i)).map(|x| x.at), Some(i as u64));
            assert!(s.get(&there, &blob(i)).is_none());
        }
        // Another length with the same tail is another blob.
        assert!(s.get(&here, &format!("x{}", blob(1))).is_none());
        assert_eq!(s.entries.len(), SEEN_BLOBS);
        // What the memory's size in the docs says: 32 × this, about 2.6 KiB.
        assert_eq!(core::mem::size_of::<(Key, Seen)>() + 4, 84);
    }
}
