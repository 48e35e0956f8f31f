//! What survives a crash (AIRC §7.1, §7.3, §10.3, §11.1, §12.1, §13): the records the server
//! asks its host to persist, and the state rebuilt from them.
//!
//! A persist ([`Output::Persist`]) always comes out before the ack that
//! claims it, and the host executes outputs in order, so `queued` always means a copy is held.
//! The seen id (§7.3) and the reply-window pair (§10.3, [`Record::ReplyPair`]) an ack depends on
//! are persisted before it too; an id in flight is not (a restart closes its hop, which releases
//! it, as any close does). A message the server writes itself (a link's control message or
//! notice, a grant) is on record from the moment it is made until its answer or until the spool
//! takes it.

use super::links::LINK_REPLY_WINDOW;
use super::spool_flush::weighed;
use super::{Output, Server};
use crate::airc::address::Address;
use crate::airc::frame::{Event, Msg, Object};
use crate::airc::link::Link;
use crate::airc::passport::book::PassportRecord;
use crate::airc::spool::{DEFAULT_TTL, Spooled};
use crate::airc::{policy, signing, spool};
use crate::core::Timestamp;
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use core::time::Duration;
use rand_core::CryptoRng;

/// A durable record: what must survive a crash for `queued` and duplicate suppression to hold.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// A message in the spool, under its destination key (§7.1).
    Spooled {
        /// The destination key.
        key: String,
        /// The message, with canonical `from` and `to` (boxed: records are moved around often).
        msg: Box<Msg>,
    },
    /// A link record (§11.1), as stored after an operation or a control message; a later record
    /// with the same id replaces it.
    Link {
        /// The record's JSON form.
        record: Box<Object>,
    },
    /// A passport record (§12.1) with its token hash, as stored after issuance, a use or a
    /// revocation; a later record with the same id replaces it.
    Passport {
        /// The record's JSON form.
        record: Box<Object>,
    },
    /// One event of the append-only audit log (§13), never with a message body. Only ever
    /// appended; nothing is restored from it.
    Audit {
        /// The event (boxed: it has many fields).
        event: Box<Event>,
    },
    /// An id acked `delivered` or `queued`, remembered until `until` (§7.3).
    Seen {
        /// The message id.
        id: String,
        /// When it may be forgotten.
        until: Timestamp,
    },
    /// A pair `(from, to)` of the reply window (§10.3) and when it last passed; a later record
    /// for the same pair replaces it. Worth nothing once [`policy::MAX_REPLY_WINDOW`] has gone by.
    ReplyPair {
        /// The sender's address key.
        from: String,
        /// The recipient's address key.
        to: String,
        /// When the pair last passed.
        at: Timestamp,
    },
}

/// Names a stored record to forget.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKey {
    /// The spooled message with this id.
    Spooled {
        /// The message id.
        id: String,
    },
    /// The reply-window pair `(from, to)`, evicted from the full table.
    ReplyPair {
        /// The sender's address key.
        from: String,
        /// The recipient's address key.
        to: String,
    },
    /// The link record with this id, forgotten [`link::LINK_RETENTION`](crate::airc::link::LINK_RETENTION) after it lost all
    /// effect (declined, or expired).
    Link {
        /// The link id.
        id: String,
    },
}

impl<R: CryptoRng> Server<R> {
    /// Remembers `id` for duplicate suppression, durably, before the ack that depends on it.
    /// A message was acked `delivered` or `queued`: remember its id for duplicate suppression
    /// (§7.3), durably, before the ack that depends on it, and note its pair for the reply
    /// window (§10.3).
    pub(super) fn passed(&mut self, now: Timestamp, m: &Msg) {
        self.seen.record(now, &m.id);
        let until = now.saturating_add(spool::DUPLICATE_WINDOW);
        self.out.push_back(Output::Persist(Record::Seen {
            id: m.id.clone(),
            until,
        }));
        if let (Ok(from), Ok(to)) = (Address::parse(&m.from), Address::parse(&m.to)) {
            // Durable like the seen id: a restart must not close a window the ack opened.
            self.out.push_back(Output::Persist(Record::ReplyPair {
                from: from.key().to_string(),
                to: to.key().to_string(),
                at: now,
            }));
            if let Some((f, t)) = self.replies.note(now, &from, &to) {
                self.out.push_back(Output::Forget(RecordKey::ReplyPair {
                    from: f.to_string(),
                    to: t.to_string(),
                }));
            }
        }
    }

    /// How long a noted pair (§10.3) must be kept: as long as anything may still ask about it,
    /// the policy's `mode: "reply"` rules and §11.3's one-way links alike. The links ask whatever
    /// the policy says, so a policy with no reply rule must not shorten their window.
    pub(super) fn reply_retention(&self) -> Duration {
        self.config.policy.max_window().max(LINK_REPLY_WINDOW)
    }

    /// A message this server writes itself after persisting the change it reports (§11.2: "the
    /// state change locally first, then the control message"; a grant, §12.5; a notice): its
    /// copy goes on record under `key` before it goes anywhere, as a spooled message's would,
    /// so that a crash before its answer cannot lose it: the restored spool sends it again.
    /// Leaving the realm, it is written again once stamped and signed (`deliver_remote`), so
    /// that what a restart sends is what would have gone. The copy is forgotten at the next
    /// hop's answer or a failure here ([`Server::forget_originated`]), and taken over by the
    /// spool when the message is spooled.
    pub(super) fn originate(&mut self, now: Timestamp, key: &str, msg: Msg) -> Spooled<Msg> {
        self.out.push_back(Output::Persist(Record::Spooled {
            key: key.to_string(),
            msg: Box::new(msg.clone()),
        }));
        self.originated.insert(msg.id.clone(), msg.from.clone());
        Spooled {
            id: msg.id.clone(),
            ts: now,
            ttl: DEFAULT_TTL,
            msg,
            bytes: 0,
        }
    }

    /// `m` is done with: if this server wrote it, its copy is forgotten. Known by its id and
    /// `from`, so that a client reusing the id, which cannot write from another's namespace,
    /// cannot end it.
    pub(super) fn forget_originated(&mut self, m: &Msg) {
        if self.originated.get(&m.id) == Some(&m.from) {
            self.originated.remove(&m.id);
            self.out
                .push_back(Output::Forget(RecordKey::Spooled { id: m.id.clone() }));
        }
    }

    pub(super) fn restore(&mut self, now: Timestamp, record: Record) {
        match record {
            Record::Spooled { key, msg } => {
                let ts = signing::ts_ms(msg.ts).map_or(Timestamp::ZERO, Timestamp::from_millis);
                let ttl = msg.ttl.map_or(DEFAULT_TTL, Duration::from_secs);
                let item = Spooled {
                    id: msg.id.clone(),
                    ts,
                    ttl,
                    msg: *msg,
                    bytes: 0,
                };
                self.spool.restore(&key, weighed(item));
                self.arm_flush(now);
            }
            Record::Link { record } => {
                if let Ok(l) = Link::from_value(&serde_json::Value::Object(*record)) {
                    // A record that no longer fits (the table is full) stays on disk; refusing
                    // it here only means its link decides nothing until there is room.
                    let _ = self.links.restore(l);
                }
            }
            Record::Passport { record } => {
                if let Some(p) = PassportRecord::from_value(&serde_json::Value::Object(*record)) {
                    // As for links: a record that no longer fits stays on disk, unredeemable.
                    let _ = self.passports.restore(p);
                }
            }
            // Append-only: nothing in the machine is rebuilt from the log.
            Record::Audit { .. } => {}
            Record::Seen { id, until } => {
                if until > now {
                    self.seen
                        .record(until.saturating_sub(spool::DUPLICATE_WINDOW), &id);
                }
            }
            Record::ReplyPair { from, to, at } => {
                // A key is an address's canonical form, so it parses back to the same key; one
                // that does not was not written by this machine and decides nothing.
                if let (Ok(f), Ok(t)) = (Address::parse(&from), Address::parse(&to))
                    && now.saturating_duration_since(at) <= policy::MAX_REPLY_WINDOW
                {
                    // Full (more pairs stored than the table holds): the oldest goes, as live.
                    let _ = self.replies.note(at, &f, &t);
                }
            }
        }
    }
}
