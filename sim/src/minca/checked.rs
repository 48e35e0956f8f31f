//! What the oracle checks of a frame a node sends, read once per run of identical texts, and
//! the node numbers its tables are keyed by.
//!
//! §8 floods a signal to every admitted peer of its room, and the mesh writes the text once and
//! hands each peer the same shared buffer: a node's sends come in runs of the same bytes (about
//! eleven in a space of twelve). [`Sent::read`] is a function of the bytes alone, so the reading
//! of the previous text answers for the next whenever the two are equal: the same buffer, found
//! by its address, or else equal bytes, found by a `memcmp`, where reading costs a scan of every
//! byte and two DIDs hashed to their numbers.

use bytes::Bytes;
use hashbrown::HashMap;

use weft_proto::minca::mesh::frame::{AUTH_HELLO, AUTH_PROOF, LEAVE, SIGNAL};

use super::sent::Sent;

/// Node numbers by DID: the nodes' own in order, then a number of its own for each DID no node
/// has, first come first numbered, so the loop check still tells two such DIDs apart.
pub(super) struct Numbers {
    by_did: HashMap<String, u32>,
}

impl Numbers {
    /// The nodes' DIDs, numbered from 0 in order.
    pub(super) fn new(dids: impl IntoIterator<Item = String>) -> Self {
        Self {
            by_did: dids.into_iter().zip(0..).collect(),
        }
    }

    /// The number of the node with `did`, or the one this DID was given.
    pub(super) fn of(&mut self, did: &str) -> u32 {
        if let Some(&n) = self.by_did.get(did) {
            return n;
        }
        // Never more DIDs than a `u32` counts: each is a frame's text, and a run sends far
        // fewer.
        let n = self.by_did.len() as u32;
        self.by_did.insert(did.to_owned(), n);
        n
    }
}

/// What [`Sent::read`] made of a text, owned so it outlives the text, with a signal's origin
/// and target numbered.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reading {
    /// The room.
    pub(super) room: String,
    /// The type.
    pub(super) kind: String,
    /// Whether the type may cross before admission (§7.2: the handshake's and `__leave`).
    pub(super) handshake: bool,
    /// Whether the frame is a `__signal` (§8).
    pub(super) signal: bool,
    /// The payload's `origin` (empty when it names none).
    pub(super) origin: String,
    /// The payload's `target` (empty when it names none).
    pub(super) target: String,
    /// A signal's origin's number ([`Numbers`]); 0 for another frame.
    pub(super) origin_number: u32,
    /// A signal's target's number; 0 for another frame.
    pub(super) target_number: u32,
    /// A signal's `at` (0 when the payload names none).
    pub(super) at: u64,
}

impl Reading {
    /// Overwrites `self` with `frame`, keeping the strings' buffers. Only a signal's DIDs are
    /// numbered, so no other frame hands out numbers.
    fn set(&mut self, frame: &Sent<'_>, numbers: &mut Numbers) {
        for (to, from) in [
            (&mut self.room, &*frame.room),
            (&mut self.kind, &*frame.kind),
            (&mut self.origin, &*frame.payload.origin),
            (&mut self.target, &*frame.payload.target),
        ] {
            to.clear();
            to.push_str(from);
        }
        self.at = frame.payload.at;
        self.handshake = [AUTH_HELLO, AUTH_PROOF, LEAVE].contains(&&*frame.kind);
        self.signal = frame.kind == SIGNAL;
        (self.origin_number, self.target_number) = if self.signal {
            (numbers.of(&self.origin), numbers.of(&self.target))
        } else {
            (0, 0)
        };
    }
}

/// The last text the oracle read and its [`Reading`]; see the [module docs](self).
#[derive(Default)]
pub(super) struct LastSent {
    /// The text, held (so its buffer is not reused while its address is compared). Empty at
    /// first, whose reading (`None`: serde_json refuses it) is `reading`'s first value, so the
    /// cache is right from the start.
    bytes: Bytes,
    reading: Reading,
    /// Whether serde_json read `bytes` as a frame.
    read: bool,
}

impl LastSent {
    /// What [`Sent::read`] makes of `bytes`, or `None` when it refuses them.
    pub(super) fn read(&mut self, bytes: &Bytes, numbers: &mut Numbers) -> Option<&Reading> {
        let same_buffer = self.bytes.as_ptr() == bytes.as_ptr() && self.bytes.len() == bytes.len();
        if !same_buffer && self.bytes != bytes {
            self.read = match Sent::read(bytes) {
                Some(frame) => {
                    self.reading.set(&frame, numbers);
                    true
                }
                None => false,
            };
        }
        // Kept even when equal: the next copy of this flood then matches by address.
        self.bytes = bytes.clone();
        self.read.then_some(&self.reading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever came before, a text's reading is the one [`Sent::read`] gives it afresh, and a
    /// signal's DIDs get the numbers a fresh [`Numbers`] gives them in the same order.
    #[test]
    fn a_kept_reading_is_the_texts_own() {
        let signal =
            br#"{"room":"r","type":"__signal","payload":{"origin":"a","target":"b","at":7}}"#;
        let other = br#"{"room":"q","type":"who","payload":{"origin":"c","target":"d","at":9}}"#;
        let hello = br#"{"room":"q","type":"__auth-hello","payload":{}}"#;
        let shared = Bytes::from_static(signal);
        // Equal texts in separate buffers, the same buffer again, and texts that differ.
        let texts: [Bytes; 11] = [b"" as &[u8], signal, signal, other, b"{", hello, hello]
            .into_iter()
            .map(Bytes::copy_from_slice)
            .chain([shared.clone(), shared, Bytes::copy_from_slice(hello)])
            .chain([Bytes::new()])
            .collect::<Vec<_>>()
            .try_into()
            .expect("eleven texts");
        let mut last = LastSent::default();
        let mut numbers = Numbers::new(["b".to_owned()]);
        for text in &texts {
            let mut fresh_numbers = Numbers::new(["b".to_owned()]);
            let want = Sent::read(text).map(|frame| {
                let mut r = Reading::default();
                r.set(&frame, &mut fresh_numbers);
                r
            });
            assert_eq!(
                last.read(text, &mut numbers),
                want.as_ref(),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(numbers.of("b"), 0, "a node's own number");
        assert_eq!(numbers.of("a"), 1, "the first DID no node has");
        assert_eq!(
            numbers.of("c"),
            2,
            "a frame of another type numbers nothing"
        );
        let hello = last
            .read(&Bytes::from_static(hello), &mut numbers)
            .map(|r| (r.handshake, r.signal));
        assert_eq!(hello, Some((true, false)));
    }
}
