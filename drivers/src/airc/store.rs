//! Durable state of an AIRC realm server in an embedded database (redb).
//!
//! What the machine asks to persist is written and committed before the next output runs, so a
//! `queued` ack never goes out for a message that is not on disk. After a crash the records come
//! back, in the order they were written, as [`Input::Restore`](weft_proto::airc::server::Input).

use std::io;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::json;
use weft_proto::airc::audit::AuditLog;
use weft_proto::airc::frame::Msg;
use weft_proto::airc::policy::MAX_REPLY_WINDOW;
use weft_proto::airc::server::{Output, Record, RecordKey};
use weft_proto::core::Timestamp;

/// Spooled messages by write sequence, so a restart restores each key's order.
const SPOOL: TableDefinition<u64, &[u8]> = TableDefinition::new("spool");
/// Spooled message id → its sequence, to forget it by id.
const SPOOL_IDS: TableDefinition<&str, u64> = TableDefinition::new("spool_ids");
/// Seen message id → when it may be forgotten (Unix ms).
const SEEN: TableDefinition<&str, u64> = TableDefinition::new("seen");
/// Link id → its latest record (JSON).
const LINKS: TableDefinition<&str, &[u8]> = TableDefinition::new("links");

/// Passport id → its latest record (JSON, with the token hash; never the token).
const PASSPORTS: TableDefinition<&str, &[u8]> = TableDefinition::new("passports");
/// Reply-window pair (AIRC §10.3) → when it last passed (Unix ms), keyed by
/// `from key` + [`PAIR_SEPARATOR`] + `to key`.
const REPLY_PAIRS: TableDefinition<&str, u64> = TableDefinition::new("reply_pairs");
/// Joins a pair's two address keys into one table key: a newline never occurs in an address.
const PAIR_SEPARATOR: char = '\n';
/// The audit log (AIRC §13): write sequence → event (JSON), kept by [`AuditLog`]'s retention
/// (oldest first, by age and size). Never loaded back into the machine.
const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

/// The server's database.
pub struct Store {
    db: Database,
    next_seq: u64,
    /// What the audit table holds, by sequence, time and size: which rows to drop.
    audit: AuditLog,
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        let db = Database::create(path).map_err(err)?;
        let txn = db.begin_write().map_err(err)?;
        {
            txn.open_table(SPOOL).map_err(err)?;
            txn.open_table(SPOOL_IDS).map_err(err)?;
            txn.open_table(SEEN).map_err(err)?;
            txn.open_table(LINKS).map_err(err)?;
            txn.open_table(AUDIT).map_err(err)?;
            txn.open_table(PASSPORTS).map_err(err)?;
            txn.open_table(REPLY_PAIRS).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        let (next_seq, audit) = {
            let read = db.begin_read().map_err(err)?;
            let t = read.open_table(SPOOL).map_err(err)?;
            let next = t.last().map_err(err)?.map_or(0, |(k, _)| k.value() + 1);
            let mut audit = AuditLog::default();
            for row in read.open_table(AUDIT).map_err(err)?.iter().map_err(err)? {
                let (seq, bytes) = row.map_err(err)?;
                audit.restore(seq.value(), written_at(bytes.value()), bytes.value().len());
            }
            (next, audit)
        };
        Ok(Self {
            db,
            next_seq,
            audit,
        })
    }

    /// Events the audit log's retention dropped since the store opened.
    pub fn audit_dropped(&self) -> u64 {
        self.audit.dropped()
    }

    /// Every record still live at `now`: spooled messages in the order they were written, then
    /// links, passports, seen ids, then reply-window pairs. Expired seen ids, and pairs older
    /// than [`MAX_REPLY_WINDOW`] (they open no window any more), are deleted on the way.
    pub fn load(&self, now: Timestamp) -> io::Result<Vec<Record>> {
        let mut out = Vec::new();
        let mut expired = Vec::new();
        let mut stale_pairs = Vec::new();
        {
            let read = self.db.begin_read().map_err(err)?;
            for row in read.open_table(SPOOL).map_err(err)?.iter().map_err(err)? {
                let (_, v) = row.map_err(err)?;
                let rec: serde_json::Value = serde_json::from_slice(v.value()).map_err(err)?;
                let key = rec["key"].as_str().unwrap_or_default().to_string();
                let msg: Msg = serde_json::from_value(rec["msg"].clone()).map_err(err)?;
                out.push(Record::Spooled {
                    key,
                    msg: Box::new(msg),
                });
            }
            for row in read.open_table(LINKS).map_err(err)?.iter().map_err(err)? {
                let (_, v) = row.map_err(err)?;
                let record: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(v.value()).map_err(err)?;
                out.push(Record::Link {
                    record: Box::new(record),
                });
            }
            for row in read
                .open_table(PASSPORTS)
                .map_err(err)?
                .iter()
                .map_err(err)?
            {
                let (_, v) = row.map_err(err)?;
                let record: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(v.value()).map_err(err)?;
                out.push(Record::Passport {
                    record: Box::new(record),
                });
            }
            for row in read.open_table(SEEN).map_err(err)?.iter().map_err(err)? {
                let (k, v) = row.map_err(err)?;
                let until = Timestamp::from_millis(v.value());
                if until > now {
                    out.push(Record::Seen {
                        id: k.value().to_string(),
                        until,
                    });
                } else {
                    expired.push(k.value().to_string());
                }
            }
            for row in read
                .open_table(REPLY_PAIRS)
                .map_err(err)?
                .iter()
                .map_err(err)?
            {
                let (k, v) = row.map_err(err)?;
                let at = Timestamp::from_millis(v.value());
                let pair = k.value().split_once(PAIR_SEPARATOR);
                match pair {
                    Some((from, to)) if now.saturating_duration_since(at) <= MAX_REPLY_WINDOW => {
                        out.push(Record::ReplyPair {
                            from: from.to_string(),
                            to: to.to_string(),
                            at,
                        });
                    }
                    _ => stale_pairs.push(k.value().to_string()),
                }
            }
        }
        if !expired.is_empty() || !stale_pairs.is_empty() {
            let txn = self.db.begin_write().map_err(err)?;
            {
                let mut seen = txn.open_table(SEEN).map_err(err)?;
                for id in &expired {
                    seen.remove(id.as_str()).map_err(err)?;
                }
                let mut pairs = txn.open_table(REPLY_PAIRS).map_err(err)?;
                for key in &stale_pairs {
                    pairs.remove(key.as_str()).map_err(err)?;
                }
            }
            txn.commit().map_err(err)?;
        }
        Ok(out)
    }

    /// The audit log (AIRC §13) in the order it was written, each event as its JSON form: for an
    /// operator's tools and tests. The server never reads it back.
    pub fn audit_log(&self) -> io::Result<Vec<serde_json::Value>> {
        let read = self.db.begin_read().map_err(err)?;
        let table = read.open_table(AUDIT).map_err(err)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(err)? {
            let (_, v) = row.map_err(err)?;
            out.push(serde_json::from_slice(v.value()).map_err(err)?);
        }
        Ok(out)
    }

    /// Writes a run of the machine's persists and forgets in one durable transaction, in the
    /// order the machine gave them (a forget then a persist of the same id must end stored).
    /// Outputs that are neither are skipped.
    pub fn apply(&mut self, batch: &[Output]) -> io::Result<()> {
        let txn = self.db.begin_write().map_err(err)?;
        {
            let mut spool = txn.open_table(SPOOL).map_err(err)?;
            let mut ids = txn.open_table(SPOOL_IDS).map_err(err)?;
            let mut seen = txn.open_table(SEEN).map_err(err)?;
            let mut links = txn.open_table(LINKS).map_err(err)?;
            let mut audit = txn.open_table(AUDIT).map_err(err)?;
            let mut passports = txn.open_table(PASSPORTS).map_err(err)?;
            let mut pairs = txn.open_table(REPLY_PAIRS).map_err(err)?;
            for change in batch {
                let r = match change {
                    Output::Persist(r) => r,
                    Output::Forget(RecordKey::Spooled { id }) => {
                        if let Some(seq) = ids.remove(id.as_str()).map_err(err)? {
                            spool.remove(seq.value()).map_err(err)?;
                        }
                        continue;
                    }
                    Output::Forget(RecordKey::ReplyPair { from, to }) => {
                        pairs.remove(pair_key(from, to).as_str()).map_err(err)?;
                        continue;
                    }
                    Output::Forget(RecordKey::Link { id }) => {
                        links.remove(id.as_str()).map_err(err)?;
                        continue;
                    }
                    Output::Forget(other) => {
                        return Err(err(format!("unknown record key {other:?}")));
                    }
                    _ => continue,
                };
                match r {
                    Record::Spooled { key, msg } => {
                        let bytes =
                            serde_json::to_vec(&json!({"key": key, "msg": msg})).map_err(err)?;
                        let seq = self.next_seq;
                        self.next_seq += 1;
                        spool.insert(seq, bytes.as_slice()).map_err(err)?;
                        if let Some(old) = ids.insert(msg.id.as_str(), seq).map_err(err)? {
                            spool.remove(old.value()).map_err(err)?;
                        }
                    }
                    Record::Seen { id, until } => {
                        seen.insert(id.as_str(), until.as_millis()).map_err(err)?;
                    }
                    Record::Link { record } => {
                        let id = record
                            .get("id")
                            .and_then(|v| v.as_str())
                            .unwrap_or_default();
                        let bytes = serde_json::to_vec(record).map_err(err)?;
                        links.insert(id, bytes.as_slice()).map_err(err)?;
                    }
                    Record::Passport { record } => {
                        let id = record
                            .get("id")
                            .and_then(|v| v.as_str())
                            .unwrap_or_default();
                        let bytes = serde_json::to_vec(record).map_err(err)?;
                        passports.insert(id, bytes.as_slice()).map_err(err)?;
                    }
                    Record::ReplyPair { from, to, at } => {
                        pairs
                            .insert(pair_key(from, to).as_str(), at.as_millis())
                            .map_err(err)?;
                    }
                    Record::Audit { event } => {
                        let bytes = serde_json::to_vec(event).map_err(err)?;
                        let at = Timestamp::from_millis((event.ts * 1000.0).max(0.0) as u64);
                        let (seq, drop) = self.audit.append(at, bytes.len());
                        audit.insert(seq, bytes.as_slice()).map_err(err)?;
                        for old in drop {
                            audit.remove(old).map_err(err)?;
                        }
                    }
                    other => return Err(err(format!("unknown record {other:?}"))),
                }
            }
        }
        txn.commit().map_err(err)
    }
}

/// When a stored audit event was written, from its `ts` (Unix seconds); an unreadable row counts
/// as written at the epoch, so the retention drops it first.
fn written_at(row: &[u8]) -> Timestamp {
    serde_json::from_slice::<serde_json::Value>(row)
        .ok()
        .and_then(|v| v.get("ts").and_then(serde_json::Value::as_f64))
        .map_or(Timestamp::ZERO, |ts| {
            Timestamp::from_millis((ts * 1000.0).max(0.0) as u64)
        })
}

fn pair_key(from: &str, to: &str) -> String {
    format!("{from}{PAIR_SEPARATOR}{to}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(from: &str, to: &str, at: Timestamp) -> Output {
        Output::Persist(Record::ReplyPair {
            from: from.into(),
            to: to.into(),
            at,
        })
    }

    fn pairs(store: &Store, now: Timestamp) -> Vec<(String, String, Timestamp)> {
        let mut out = Vec::new();
        for r in store.load(now).unwrap() {
            if let Record::ReplyPair { from, to, at } = r {
                out.push((from, to, at));
            }
        }
        out
    }

    fn audit(ts_secs: u64, kind: &str) -> Output {
        let event: weft_proto::airc::frame::Event = serde_json::from_value(json!({
            "ts": ts_secs as f64,
            "kind": kind,
        }))
        .unwrap();
        Output::Persist(Record::Audit {
            event: Box::new(event),
        })
    }

    fn kinds(store: &Store) -> Vec<String> {
        store
            .audit_log()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect()
    }

    /// §13's log is kept by `AuditLog`'s rule in the store itself: an event older than
    /// `AUDIT_RETENTION` is deleted, oldest first, when a newer one is written, and the rule
    /// carries on across a restart (the table is read back into it on open).
    #[test]
    fn the_stored_audit_log_drops_what_is_past_its_retention_oldest_first_across_a_restart() {
        use weft_proto::airc::audit::AUDIT_RETENTION;
        let path =
            std::env::temp_dir().join(format!("weft-store-audit-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let t0 = 1_790_380_000;
        let day = 86_400;
        {
            let mut store = Store::open(&path).unwrap();
            store
                .apply(&[audit(t0, "old"), audit(t0 + day, "older")])
                .unwrap();
            assert_eq!(kinds(&store), ["old", "older"]);
        }
        // Reopened: the rule knows what the table holds.
        let mut store = Store::open(&path).unwrap();
        let past = t0 + AUDIT_RETENTION.as_secs() + 1;
        store.apply(&[audit(past, "new")]).unwrap();
        assert_eq!(kinds(&store), ["older", "new"], "the oldest went first");
        assert_eq!(store.audit_dropped(), 1);
        store.apply(&[audit(past + day, "newer")]).unwrap();
        assert_eq!(kinds(&store), ["new", "newer"]);
        assert_eq!(store.audit_dropped(), 2);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_reply_pair_is_stored_replaced_forgotten_and_dropped_once_past_the_longest_window() {
        let dir = std::env::temp_dir().join(format!("weft-store-pairs-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let t0 = Timestamp::from_secs(1_790_380_000);
        let (a, b, c) = (
            "airc://example.com/alice/x",
            "airc://example.com/bob/y",
            "airc://partner.example/carol",
        );
        let mut store = Store::open(&dir).unwrap();
        let later = t0 + std::time::Duration::from_secs(60);
        store
            .apply(&[pair(a, b, t0), pair(a, c, t0), pair(a, b, later)])
            .unwrap();
        assert_eq!(
            pairs(&store, later),
            [(a.into(), b.into(), later), (a.into(), c.into(), t0)]
        );
        store
            .apply(&[Output::Forget(RecordKey::ReplyPair {
                from: a.into(),
                to: c.into(),
            })])
            .unwrap();
        drop(store);
        let store = Store::open(&dir).unwrap();
        assert_eq!(pairs(&store, later), [(a.into(), b.into(), later)]);
        // Past the longest window the pair opens nothing: deleted on load, for good.
        let gone = later + MAX_REPLY_WINDOW + std::time::Duration::from_millis(1);
        assert!(pairs(&store, gone).is_empty());
        assert!(pairs(&store, later).is_empty());
        drop(store);
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_forgotten_link_record_is_not_loaded_again() {
        let dir = std::env::temp_dir().join(format!("weft-store-links-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let link = |id: &str| {
            let record = json!({"id": id, "state": "declined"});
            let serde_json::Value::Object(record) = record else {
                unreachable!()
            };
            Output::Persist(Record::Link {
                record: Box::new(record),
            })
        };
        let ids = |store: &Store| -> Vec<String> {
            let now = Timestamp::from_secs(1_790_380_000);
            let mut out = Vec::new();
            for r in store.load(now).unwrap() {
                if let Record::Link { record } = r {
                    out.push(record["id"].as_str().unwrap().to_string());
                }
            }
            out
        };
        let mut store = Store::open(&dir).unwrap();
        store
            .apply(&[link("L00000001"), link("L00000002")])
            .unwrap();
        let forget = RecordKey::Link {
            id: "L00000001".into(),
        };
        store.apply(&[Output::Forget(forget)]).unwrap();
        drop(store);
        let store = Store::open(&dir).unwrap();
        assert_eq!(ids(&store), ["L00000002"]);
        drop(store);
        std::fs::remove_file(&dir).unwrap();
    }
}
