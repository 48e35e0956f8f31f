//! A min-heap with four children a node, for [`super::Wakeups`].
//!
//! The wakeups heap is pushed on nearly every event (a machine's deadline moves) and popped on
//! every timer, and at 10 000 machines it is larger than the caches. A node's four children
//! share one or two cache lines, so a pop's way down touches half as many lines as a binary
//! heap's, for a few more comparisons within each. Its entries are wholly ordered (no two
//! distinct entries compare equal), so it gives exactly the order any other heap would.

/// Children a node has.
const ARITY: usize = 4;

/// A min-heap: [`QuadHeap::pop`] gives the least entry.
pub(crate) struct QuadHeap<T> {
    items: Vec<T>,
}

impl<T: Ord + Copy> QuadHeap<T> {
    /// An empty heap.
    pub(crate) fn new() -> Self {
        Self { items: Vec::new() }
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The least entry.
    pub(crate) fn peek(&self) -> Option<&T> {
        self.items.first()
    }

    /// Adds `x`.
    pub(crate) fn push(&mut self, x: T) {
        let mut i = self.items.len();
        self.items.push(x);
        // A hole moves up, so each level costs one write rather than a swap.
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if x >= self.items[parent] {
                break;
            }
            self.items[i] = self.items[parent];
            i = parent;
        }
        self.items[i] = x;
    }

    /// Takes the least entry.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let last = self.items.pop()?;
        let Some(top) = self.items.first_mut() else {
            return Some(last);
        };
        let top = std::mem::replace(top, last);
        self.sift_down(0);
        Some(top)
    }

    /// Moves the entry at `i` down to where its children are all no less than it.
    fn sift_down(&mut self, mut i: usize) {
        let x = self.items[i];
        let len = self.items.len();
        loop {
            let first = ARITY * i + 1;
            if first >= len {
                break;
            }
            let mut least = first;
            for c in first + 1..(first + ARITY).min(len) {
                if self.items[c] < self.items[least] {
                    least = c;
                }
            }
            if self.items[least] >= x {
                break;
            }
            self.items[i] = self.items[least];
            i = least;
        }
        self.items[i] = x;
    }
}

impl<T: Ord + Copy> FromIterator<T> for QuadHeap<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut heap = Self {
            items: iter.into_iter().collect(),
        };
        // Bottom-up: every node with children, the last first.
        for i in (0..heap.items.len().div_ceil(ARITY)).rev() {
            heap.sift_down(i);
        }
        heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the test needs no seed crate.
    fn numbers(mut s: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (s >> 33) % 50
            })
            .collect()
    }

    #[test]
    fn pops_in_the_order_a_sort_gives_with_pushes_between() {
        for (seed, n) in [(1, 0), (2, 1), (3, 5), (4, 17), (5, 300)] {
            let xs = numbers(seed, n);
            let mut heap = QuadHeap::new();
            let mut model = std::collections::BinaryHeap::new();
            for (i, &x) in xs.iter().enumerate() {
                heap.push((x, i));
                model.push(std::cmp::Reverse((x, i)));
                if i % 3 == 2 {
                    assert_eq!(heap.pop(), model.pop().map(|r| r.0));
                }
                assert_eq!(heap.len(), model.len());
                assert_eq!(heap.peek().copied(), model.peek().map(|r| r.0));
            }
            while let Some(r) = model.pop() {
                assert_eq!(heap.pop(), Some(r.0));
            }
            assert_eq!(heap.pop(), None);
        }
    }

    #[test]
    fn a_heap_collected_at_once_pops_sorted() {
        for n in [0, 1, 4, 5, 21, 400] {
            let xs = numbers(n as u64 + 9, n);
            let mut heap: QuadHeap<(u64, usize)> =
                xs.iter().enumerate().map(|(i, &x)| (x, i)).collect();
            let mut sorted: Vec<_> = xs.iter().enumerate().map(|(i, &x)| (x, i)).collect();
            sorted.sort_unstable();
            let popped: Vec<_> = std::iter::from_fn(|| heap.pop()).collect();
            assert_eq!(popped, sorted);
        }
    }
}
