//! The spool (AIRC §7): a message held durably before it is acked `queued`, or refused
//! `spool full` when a bound of [`crate::airc::spool::SpoolLimits`] is reached; a key's backlog
//! flushed in order (§7.4) on a bind, when a link comes up and every
//! [`ServerConfig::flush_interval`](super::ServerConfig::flush_interval), dropping what expired
//! (§7.2) or settled (§6.6) and never sending again what is in flight. The table itself is
//! [`crate::airc::spool`]'s.

use super::acks::{MAX_PENDING, Upstream};
use super::events::{Hop, msg_event};
use super::records::{Record, RecordKey};
use super::{Output, Server, Timer};
use crate::airc::address::{Address, Authority};
use crate::airc::frame::{Ack, AckCode, AckStatus, Msg};
use crate::airc::spool::{SpoolFull, Spooled};
use crate::airc::{audit, framing};
use crate::core::Timestamp;
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use rand_core::CryptoRng;

impl<R: CryptoRng> Server<R> {
    /// Spools a message durably; `Err` means it is not held and must not be acked `queued`.
    fn hold(&mut self, now: Timestamp, key: &str, item: Spooled<Msg>) -> Result<(), SpoolFull> {
        let record = Record::Spooled {
            key: key.to_string(),
            msg: Box::new(item.msg.clone()),
        };
        self.spool.push(key, weighed(item))?;
        self.out.push_back(Output::Persist(record));
        self.arm_flush(now);
        Ok(())
    }

    pub(super) fn arm_flush(&mut self, now: Timestamp) {
        if self.timers.deadline_of(&Timer::Flush).is_none() {
            self.timers
                .schedule(now + self.config.flush_interval, Timer::Flush);
        }
    }

    /// Spools a message under `key` and acks it `queued` with `code`, or, when the spool cannot
    /// hold it, refuses it (`queued` always means a copy is held). Whether it was held.
    pub(super) fn queue(
        &mut self,
        now: Timestamp,
        up: &Upstream,
        key: &str,
        item: Spooled<Msg>,
        code: AckCode,
    ) -> bool {
        let msg = item.msg.clone();
        match self.hold(now, key, item) {
            Ok(()) => {
                // The spool holds it now, under the same record.
                self.originated.remove(&msg.id);
                self.passed(now, &msg);
                self.answer_code(now, up, &msg, (AckStatus::Queued, code), Hop::Spool);
                true
            }
            Err(full) => {
                self.spool_full(now, up, &msg, full);
                false
            }
        }
    }

    /// The spool cannot hold the message, so it cannot be `queued`: refuse it, `failed refused`
    /// with a reason that begins `spool full` and says which bound ([`SpoolFull`]).
    pub(super) fn spool_full(&mut self, now: Timestamp, up: &Upstream, m: &Msg, full: SpoolFull) {
        self.stats.spool_full += 1;
        let mut ack = Ack::with_code(&m.id, AckStatus::Failed, AckCode::Refused);
        ack.reason = Some(full.to_string());
        self.answer(now, up, m, ack, Hop::Local);
    }

    /// Attempts delivery of one key's backlog (§7.4): in order, dropping what expired or settled,
    /// never resending what is in flight, and keeping what still cannot be delivered.
    pub(super) fn flush(&mut self, now: Timestamp, key: &str) {
        let f = self.spool.flush(now, key);
        self.stats.expired += f.expired.len() as u64;
        for gone in f.expired.iter().chain(&f.settled) {
            // A message in flight that expired waits for no late ack any more.
            self.forwarded.land(&gone.id);
            self.out.push_back(Output::Forget(RecordKey::Spooled {
                id: gone.id.clone(),
            }));
        }
        let remote = key
            .strip_prefix("//")
            .and_then(|a| Authority::parse(a).ok());
        // A remote key's items all go to one realm, so its link is looked up once.
        let link = remote.as_ref().and_then(|realm| self.link_to(realm));
        let mut undelivered = Vec::new();
        for item in f.deliver {
            let hop = match &remote {
                Some(_) => link,
                None => Address::parse(&item.msg.to)
                    .ok()
                    .filter(|to| to.realm() == &self.config.realm)
                    .and_then(|to| self.local_hop(&to)),
            };
            match hop {
                Some(hop) if self.forwarded.pending_len() < MAX_PENDING => {
                    let to = if remote.is_some() {
                        Hop::Peer
                    } else {
                        Hop::Client
                    };
                    // An event can close the hop itself, a subscriber past its budget (§13):
                    // nothing goes to a connection being closed, so the message waits. Once the
                    // hop is closing, the rest of the key waits without an event.
                    if self.is_closing(hop) {
                        undelivered.push(item);
                        continue;
                    }
                    let e = msg_event(now, audit::Kind::MsgFlushed, &item.msg, to);
                    self.emit(now, e);
                    if self.is_closing(hop) {
                        undelivered.push(item);
                        continue;
                    }
                    let up = alloc::vec![Upstream::Spool(key.to_string())];
                    self.forward(now, hop, up, key.to_string(), item);
                }
                _ => undelivered.push(item),
            }
        }
        if !undelivered.is_empty() {
            if let Some(realm) = &remote {
                self.connect(now, realm);
            }
            self.spool.requeue(key, undelivered);
        }
    }

    pub(super) fn flush_all(&mut self, now: Timestamp) {
        let keys: Vec<String> = self.spool.keys().map(ToString::to_string).collect();
        for key in keys {
            self.flush(now, &key);
        }
        if !self.spool.is_empty() {
            self.arm_flush(now);
        }
    }
}

/// `item` with what it takes in the spool ([`Spooled::bytes`]): the length of the message's JSON
/// form as held, its frame less the `"t":"msg",` and the newline. Weighed where a message enters
/// the spool (held, spooled in flight, requeued from a dropped hop, restored), not where it is
/// routed: most messages are never spooled.
pub(super) fn weighed(mut item: Spooled<Msg>) -> Spooled<Msg> {
    item.bytes = serde_json::to_vec(&item.msg).map_or(framing::MAX_FRAME_BYTES, |v| v.len());
    item
}
