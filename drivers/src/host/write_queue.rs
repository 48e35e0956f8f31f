//! A connection's write queue as the host core bounds it: what each adapter reports
//! ([`Queued`]), the one rule the core applies to it ([`Queued::passes_bound`]), the message
//! lengths every adapter keeps to report it ([`Backlog`]), and the async adapters' queue
//! ([`Outbox`], one per connection in [`Outboxes`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{MAX_QUEUED_BYTES, MAX_QUEUED_MESSAGES};
use weft_proto::core::ConnId;

/// What one connection holds for writing and its socket has not taken yet, as an adapter
/// reports it ([`super::Io::queued`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// Bytes still to go of the message being written: the oldest one the socket has not taken
    /// whole. 0 when nothing is queued.
    pub head: usize,
    /// Bytes of the messages waiting behind it: the backlog [`MAX_QUEUED_BYTES`] bounds.
    pub behind: usize,
    /// How many messages wait behind it: the backlog [`MAX_QUEUED_MESSAGES`] bounds.
    pub behind_messages: usize,
}

impl Queued {
    /// Whether a message of `n` bytes must not be queued: the backlog behind the head has
    /// already reached [`MAX_QUEUED_BYTES`]. The head is not counted (it is the socket's
    /// already), and neither is the message itself, whatever its size: a message larger than
    /// the bound (a Minca node socket takes frames up to 16 MiB, §5.3) must go out whole to a
    /// reader that keeps up, even when a small frame is still waiting ahead of it. A reader
    /// that stops is cut at the first send after its backlog reaches the bound, so a
    /// connection holds at most the head, the bound and one message. The same goes for a
    /// backlog of [`MAX_QUEUED_MESSAGES`] messages, however small.
    pub fn passes_bound(self, n: usize) -> bool {
        n > 0 && (self.behind >= MAX_QUEUED_BYTES || self.behind_messages >= MAX_QUEUED_MESSAGES)
    }
}

/// The lengths of the messages queued on one connection, oldest first, as its socket takes their
/// bytes: what an adapter needs to report [`Queued`]. The bytes themselves stay where the adapter
/// keeps them.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    /// Lengths of the messages not yet taken whole; never a zero (an empty message has no bytes
    /// to wait for and would hide the head behind it).
    lens: VecDeque<usize>,
    /// Bytes of the oldest one already taken.
    head_taken: usize,
    /// The sum of `lens`.
    total: usize,
}

impl Backlog {
    /// A message of `n` bytes was queued behind the others.
    pub(crate) fn push(&mut self, n: usize) {
        if n > 0 {
            self.lens.push_back(n);
            self.total = self.total.saturating_add(n);
        }
    }

    /// The socket took `n` more bytes, in the order they were queued (a partial write, or
    /// several messages at once).
    pub(crate) fn taken(&mut self, n: usize) {
        self.head_taken = self.head_taken.saturating_add(n);
        while let Some(&head) = self.lens.front().filter(|&&h| h <= self.head_taken) {
            self.head_taken -= head;
            self.total -= head;
            self.lens.pop_front();
        }
        if self.lens.is_empty() {
            // More taken than was queued is an adapter's miscount: nothing is left to count.
            self.head_taken = 0;
        }
    }

    /// What is queued now.
    pub(crate) fn queued(&self) -> Queued {
        let head = self.lens.front().copied().unwrap_or(0);
        Queued {
            head: head - self.head_taken,
            behind: self.total - head,
            behind_messages: self.lens.len().saturating_sub(1),
        }
    }
}

/// How many messages an async adapter's write queue holds at most: the core queues nothing past
/// its bound ([`Queued::passes_bound`]), so the head, the backlog and the one message that
/// reached the bound always fit; an [`Outbox`] that finds it full cuts its connection.
pub(crate) const OUTBOX_CAPACITY: usize = MAX_QUEUED_MESSAGES + 2;

/// The messages of one connection's write queue and their lengths, under one lock. The queue is a
/// `VecDeque` that grows as messages are queued and is given back once the writer has emptied
/// it, so an idle connection holds no queue memory (a channel of [`OUTBOX_CAPACITY`] slots
/// allocates every slot up front: half a megabyte a connection).
#[derive(Debug, Default)]
struct Shared {
    messages: VecDeque<Vec<u8>>,
    backlog: Backlog,
}

/// One connection's write queue in an async adapter: the core's side. Counts the messages queued
/// until the writer task has written them ([`super::Io::queued`]), and can cut the writer off
/// mid-write ([`super::Io::cut`]).
#[derive(Debug)]
pub(crate) struct Outbox {
    shared: Arc<Mutex<Shared>>,
    /// Rung (a one-slot channel, full when rung) when a message is queued; dropped on close,
    /// which the writer hears as the end once it has written everything queued.
    bell: ::smol::channel::Sender<()>,
    cut: ::smol::channel::Sender<()>,
}

/// The writer task's side of an [`Outbox`].
#[derive(Debug)]
pub(crate) struct OutboxReader {
    shared: Arc<Mutex<Shared>>,
    bell: ::smol::channel::Receiver<()>,
    cut: ::smol::channel::Receiver<()>,
}

/// A connection's write queue, in two halves.
pub(crate) fn outbox() -> (Outbox, OutboxReader) {
    let (bell_tx, bell_rx) = ::smol::channel::bounded(1);
    let (cut_tx, cut_rx) = ::smol::channel::bounded(1);
    let shared = Arc::default();
    (
        Outbox {
            shared: Arc::clone(&shared),
            bell: bell_tx,
            cut: cut_tx,
        },
        OutboxReader {
            shared,
            bell: bell_rx,
            cut: cut_rx,
        },
    )
}

/// The shared lengths; no code panics while holding them, so a poisoned lock still holds a true
/// count.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Outbox {
    /// Queues bytes; a writer already gone drops them (its close event follows).
    pub(crate) fn send(&self, bytes: Vec<u8>) {
        if self.bell.is_closed() {
            return;
        }
        let n = bytes.len();
        // Counted under the lock the writer's `written` takes, so the writer cannot count a
        // message written before it is counted queued.
        let mut shared = lock(&self.shared);
        if shared.messages.len() >= OUTBOX_CAPACITY {
            // Full only if the core skipped its bound: end the connection rather than lose a
            // message from the middle of its stream.
            drop(shared);
            return self.cut();
        }
        shared.messages.push_back(bytes);
        shared.backlog.push(n);
        drop(shared);
        // Already rung (full) is as good: the writer takes every message queued when it wakes.
        let _ = self.bell.try_send(());
    }

    /// What is queued and not yet written.
    pub(crate) fn queued(&self) -> Queued {
        lock(&self.shared).backlog.queued()
    }

    /// Stops the writer now, whatever it is in the middle of.
    pub(crate) fn cut(&self) {
        let _ = self.cut.try_send(());
    }
}

/// The async adapters' write queues, one per connection the core may write to: what their
/// [`super::Io`] does to send, close, measure and cut.
#[derive(Debug, Default)]
pub(crate) struct Outboxes(BTreeMap<ConnId, Outbox>);

impl Outboxes {
    /// Queues `bytes` on `conn`. A connection without a writer is going, and its close event
    /// follows.
    pub(crate) fn send(&self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(w) = self.0.get(&conn) {
            w.send(bytes);
        }
    }

    /// Lets `conn`'s writer task drain what is queued, then shut the socket, which ends the
    /// reader.
    pub(crate) fn close(&mut self, conn: ConnId) {
        self.0.remove(&conn);
    }

    /// What `conn` holds unwritten.
    pub(crate) fn queued(&self, conn: ConnId) -> Queued {
        self.0
            .get(&conn)
            .map_or_else(Queued::default, Outbox::queued)
    }

    /// Stops `conn`'s writer task mid-write; it shuts the socket, which ends the reader.
    pub(crate) fn cut(&mut self, conn: ConnId) {
        if let Some(w) = self.0.remove(&conn) {
            w.cut();
        }
    }

    /// The queues by connection, for [`super::Report::into_event`] to add and remove.
    pub(crate) fn by_conn(&mut self) -> &mut BTreeMap<ConnId, Outbox> {
        &mut self.0
    }
}

impl OutboxReader {
    /// The next bytes to write; `None` once the core closed the connection and everything is
    /// out. Wrap it in [`OutboxReader::until_cut`].
    pub(crate) async fn recv(&self) -> Option<Vec<u8>> {
        loop {
            {
                let mut shared = lock(&self.shared);
                if let Some(next) = shared.messages.pop_front() {
                    return Some(next);
                }
                // Emptied: the queue's memory goes back until the next message.
                shared.messages = VecDeque::new();
            }
            // A message queued after the look above rang the bell (the ring is kept until
            // heard); a closed bell is the core's close, heard once everything queued is out.
            if self.bell.recv().await.is_err() {
                return lock(&self.shared).messages.pop_front();
            }
        }
    }

    /// Runs `write` unless the connection is cut first (`None`).
    pub(crate) async fn until_cut<T>(&self, write: impl Future<Output = T>) -> Option<T> {
        ::smol::future::or(async { Some(write.await) }, async {
            // A dropped core side is no cut: the writer drains what was queued.
            match self.cut.recv().await {
                Ok(()) => None,
                Err(_) => std::future::pending().await,
            }
        })
        .await
    }

    /// The message of `n` bytes [`OutboxReader::recv`] gave was written whole.
    pub(crate) fn written(&self, n: usize) {
        lock(&self.shared).backlog.taken(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tests::q;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn the_head_is_the_oldest_message_not_taken_whole_and_the_rest_is_behind_it() {
        let mut b = Backlog::default();
        assert_eq!(b.queued(), Queued::default());
        b.push(10);
        b.push(0);
        b.push(5);
        b.push(7);
        assert_eq!(b.queued(), q(10, 12, 2));
        // A partial write leaves the head the head.
        b.taken(4);
        assert_eq!(b.queued(), q(6, 12, 2));
        // One write may finish the head and take part of the next (the blocking adapter's
        // bytes are one buffer).
        b.taken(8);
        assert_eq!(b.queued(), q(3, 7, 1));
        b.taken(10);
        assert_eq!(b.queued(), Queued::default());
        // An adapter that says it wrote more than it queued leaves nothing counted, not a debt.
        b.taken(3);
        b.push(2);
        assert_eq!(b.queued(), q(2, 0, 0));
    }

    #[test]
    fn any_message_is_taken_until_the_backlog_behind_the_head_reaches_the_bound() {
        let idle = Queued::default();
        assert!(!idle.passes_bound(6 * MIB));
        assert!(!idle.passes_bound(usize::MAX));
        // A small frame still ahead of it does not hold a large message back.
        let writing = q(1, 100, 1);
        assert!(!writing.passes_bound(MAX_QUEUED_BYTES + 1));
        assert!(!writing.passes_bound(6 * MIB));
        let nearly = q(6 * MIB, MAX_QUEUED_BYTES - 1, 1);
        assert!(!nearly.passes_bound(6 * MIB));
        let full = q(6 * MIB, MAX_QUEUED_BYTES, 1);
        assert!(!full.passes_bound(0));
        assert!(full.passes_bound(1));
        let many = q(1, MAX_QUEUED_MESSAGES, MAX_QUEUED_MESSAGES);
        assert!(many.passes_bound(1), "small messages are counted too");
        assert!(!q(1, 10, MAX_QUEUED_MESSAGES - 1).passes_bound(1));
    }

    #[test]
    fn an_outbox_counts_messages_until_written_and_a_cut_stops_its_writer_mid_write() {
        let (core, writer) = outbox();
        core.send(vec![0; 10]);
        core.send(vec![0; 5]);
        assert_eq!(core.queued(), q(10, 5, 1));
        ::smol::block_on(async {
            let first = writer.until_cut(writer.recv()).await;
            assert_eq!(first, Some(Some(vec![0; 10])));
            writer.written(10);
            assert_eq!(core.queued(), q(5, 0, 0));
            // A write that never finishes (a peer that never reads) ends on the cut.
            core.cut();
            let stuck = writer.until_cut(std::future::pending::<()>()).await;
            assert_eq!(stuck, None);
        });
        // A close (the core's side dropped) is no cut: what was queued is still written.
        let (core, writer) = outbox();
        core.send(vec![1; 3]);
        drop(core);
        ::smol::block_on(async {
            assert_eq!(
                writer.until_cut(writer.recv()).await,
                Some(Some(vec![1; 3]))
            );
            assert_eq!(writer.until_cut(writer.recv()).await, Some(None));
        });
    }

    #[test]
    fn an_outbox_gives_its_queue_memory_back_once_emptied_and_cuts_past_its_capacity() {
        let (core, writer) = outbox();
        assert_eq!(
            lock(&core.shared).messages.capacity(),
            0,
            "nothing before a send"
        );
        for _ in 0..100 {
            core.send(vec![7; 3]);
        }
        assert!(lock(&core.shared).messages.capacity() >= 100);
        ::smol::block_on(async {
            for _ in 0..100 {
                assert_eq!(writer.recv().await, Some(vec![7; 3]));
                writer.written(3);
            }
            // The writer looks once more and, finding nothing, waits: the queue is given back.
            let waiting = ::smol::future::or(async { writer.recv().await.map(|_| true) }, async {
                ::smol::Timer::after(std::time::Duration::from_millis(20)).await;
                Some(false)
            });
            assert_eq!(waiting.await, Some(false), "nothing more was queued");
        });
        assert_eq!(lock(&core.shared).messages.capacity(), 0);
        assert_eq!(core.queued(), Queued::default());
        // A core that skipped its bound finds the queue full at OUTBOX_CAPACITY and cuts.
        for _ in 0..OUTBOX_CAPACITY {
            core.send(vec![1]);
        }
        assert_eq!(core.queued().behind_messages, OUTBOX_CAPACITY - 1);
        core.send(vec![1]);
        assert_eq!(
            core.queued().behind_messages,
            OUTBOX_CAPACITY - 1,
            "not queued"
        );
        let cut = ::smol::block_on(writer.until_cut(std::future::pending::<()>()));
        assert_eq!(cut, None, "the connection is cut");
    }

    #[test]
    fn an_outbox_whose_writer_is_gone_counts_nothing_sent_to_it() {
        let (core, writer) = outbox();
        drop(writer);
        core.send(vec![0; 10]);
        assert_eq!(core.queued(), Queued::default());
    }
}
