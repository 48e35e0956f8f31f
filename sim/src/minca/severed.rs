//! The streams a partition cut, whose messages in flight are never delivered.
//!
//! Every message a node or relay receives asks whether its stream was cut. Socket and link ids
//! are handed out in order from 0, so the cut ones are a bit an id in two bitsets: a word read
//! where a hashed set hashed the id and kept an entry for every stream ever cut.

use super::Stream;

/// The streams a partition cut; see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Severed {
    sockets: Bits,
    links: Bits,
}

impl Severed {
    /// Notes that `stream` was cut.
    pub(super) fn insert(&mut self, stream: Stream) {
        match stream {
            Stream::Socket(id) => self.sockets.insert(id),
            Stream::Link(id) => self.links.insert(id),
        }
    }

    /// Whether `stream` was cut.
    pub(super) fn contains(&self, stream: Stream) -> bool {
        match stream {
            Stream::Socket(id) => self.sockets.contains(id),
            Stream::Link(id) => self.links.contains(id),
        }
    }
}

/// A set of ids, a bit each, as long as the largest id in it.
#[derive(Debug, Default)]
struct Bits {
    words: Vec<u64>,
}

impl Bits {
    fn insert(&mut self, id: u64) {
        let Ok(word) = usize::try_from(id / 64) else {
            // An id past the address space was never handed out (ids count streams opened).
            return;
        };
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (id % 64);
    }

    fn contains(&self, id: u64) -> bool {
        usize::try_from(id / 64)
            .ok()
            .and_then(|word| self.words.get(word))
            .is_some_and(|w| w & 1 << (id % 64) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severed_holds_exactly_the_streams_cut() {
        let mut s = Severed::default();
        let cut = [
            Stream::Socket(0),
            Stream::Link(63),
            Stream::Link(64),
            Stream::Socket(1_000),
        ];
        for stream in cut {
            s.insert(stream);
        }
        for id in 0..1_100 {
            for stream in [Stream::Socket(id), Stream::Link(id)] {
                assert_eq!(s.contains(stream), cut.contains(&stream), "{stream:?}");
            }
        }
        assert!(!s.contains(Stream::Link(u64::MAX)));
    }
}
