//! The embedded event store of `weft nostr serve`: the relay core's [`EventStore`] over redb, with
//! the semantics every backend keeps (NIP-01 kinds, NIP-09 deletion, NIP-40 expiration, NIP-62
//! requests to vanish; see [`weft_proto::nostr::relay::store`]) and the same test suite
//! ([`weft_proto::nostr::relay::suite`]) as the in-memory reference.
//!
//! Events are kept once, as their JSON, by id; every read goes through an index whose keys sort
//! newest first (`created_at` descending, then id ascending), so a filter page is a range scan of
//! one index from the cursor on:
//!
//! | index | key | used for |
//! | --- | --- | --- |
//! | order | `!created_at`, id | a filter with nothing better |
//! | author | pubkey, `!created_at`, id | `authors`, deletion and vanish checks |
//! | kind | kind, `!created_at`, id | `kinds` |
//! | tag | letter, value length, value, `!created_at`, id | `#x` (a single-letter tag's first value) |
//! | expirations | the `expiration` second, id | deleting expired events ([`RedbStore::sweep_expired`]) |
//!
//! (`!created_at` is `u64::MAX - created_at`, big-endian.) A filter with `ids` reads those events
//! directly. Every write is committed with redb's default durability (fsync) before its answer
//! reaches the session, so the session's `OK true`, sent only after the store's answer, names an
//! event that survives `kill -9`: [`EventStore::write`] is one transaction, and
//! [`RedbStore::write_grouped`] puts several writes in one transaction whose answers the relay
//! hands over only after [`RedbStore::commit_group`] (one fsync for the group, not one per event).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table,
    TableDefinition, WriteTransaction,
};
use weft_proto::core::Timestamp;
use weft_proto::nostr::event::{Event, EventId};
use weft_proto::nostr::expiration::{Expiration, is_expired};
use weft_proto::nostr::kinds::{self, DELETION_KIND, KindClass};
use weft_proto::nostr::message::Filter;
use weft_proto::nostr::relay::{Cursor, EventStore, StoreError, WriteOutcome};

use crate::state_dir::{prepare_dir, prepare_file};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "events.redb";

/// Event id → the event's JSON.
const EVENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("events");
/// `!created_at` ‖ id.
const ORDER: TableDefinition<&[u8], ()> = TableDefinition::new("order");
/// pubkey ‖ `!created_at` ‖ id.
const AUTHORS: TableDefinition<&[u8], ()> = TableDefinition::new("authors");
/// kind ‖ `!created_at` ‖ id.
const KINDS: TableDefinition<&[u8], ()> = TableDefinition::new("kinds");
/// letter ‖ value length ‖ value ‖ `!created_at` ‖ id.
const TAGS: TableDefinition<&[u8], ()> = TableDefinition::new("tags");
/// A replaceable or addressable event's address (kind ‖ pubkey ‖ d) → the id held for it.
const ADDRESSES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("addresses");
/// Stored kind 5 events: pubkey ‖ id.
const DELETIONS: TableDefinition<&[u8], ()> = TableDefinition::new("deletions");
/// pubkey → the latest `created_at` it vanished up to (NIP-62).
const VANISHED: TableDefinition<&[u8], u64> = TableDefinition::new("vanished");

/// Events with an `expiration` tag: the second it names (0 for a malformed tag, expired at once)
/// ‖ id, so the expired are one range from the start ([`RedbStore::sweep_expired`]).
const EXPIRATIONS: TableDefinition<&[u8], ()> = TableDefinition::new("expirations");

/// Bytes of `!created_at` ‖ id, the tail of every index key.
const TAIL: usize = 8 + 32;

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("store: {e}"))
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The order tail of an index key: `!created_at` ‖ id, so keys sort newest first.
fn tail(created_at: u64, id: &EventId) -> [u8; TAIL] {
    let mut t = [0u8; TAIL];
    t[..8].copy_from_slice(&(u64::MAX - created_at).to_be_bytes());
    t[8..].copy_from_slice(id);
    t
}

fn id_of_tail(key: &[u8]) -> Option<EventId> {
    key.get(key.len().checked_sub(32)?..)?.try_into().ok()
}

fn tag_prefix(letter: char, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + value.len());
    k.extend_from_slice(&u32::from(letter).to_be_bytes());
    k.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
    k.extend_from_slice(value.as_bytes());
    k
}

/// The single-letter tags of `event` the filter's `#x` conditions match, deduplicated.
fn indexed_tags(event: &Event) -> BTreeSet<(char, &str)> {
    event
        .tags
        .iter()
        .filter_map(|t| {
            let mut name = t.first()?.chars();
            let letter = name.next()?;
            if name.next().is_some() {
                return None;
            }
            Some((letter, t.get(1)?.as_str()))
        })
        .collect()
}

/// The [`EXPIRATIONS`] key of `event`, if it has an `expiration` tag.
fn expiration_key(event: &Event) -> Option<Vec<u8>> {
    let at = match Expiration::of(event) {
        Expiration::Never => return None,
        Expiration::At(secs) => secs,
        Expiration::Malformed => 0,
    };
    Some(cat(&at.to_be_bytes(), &event.id))
}

fn address_key(a: &kinds::Address) -> Vec<u8> {
    let mut k = Vec::with_capacity(34 + a.d.len());
    k.extend_from_slice(&a.kind.to_be_bytes());
    k.extend_from_slice(&a.pubkey);
    k.extend_from_slice(a.d.as_bytes());
    k
}

fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len());
    k.extend_from_slice(a);
    k.extend_from_slice(b);
    k
}

/// One index range a filter can be read from: every key starting with `prefix`.
struct Scan {
    table: TableDefinition<'static, &'static [u8], ()>,
    prefix: Vec<u8>,
}

/// The events held in redb.
pub struct RedbStore {
    db: Database,
    path: PathBuf,
    /// The open transaction of a group of writes ([`RedbStore::write_grouped`]), committed by
    /// [`RedbStore::commit_group`] or before any other operation.
    group: Option<WriteTransaction>,
    /// Why the group was lost when it was committed or aborted on the way to another operation:
    /// [`RedbStore::commit_group`] reports it, so no write of that group is ever called durable.
    group_lost: Option<StoreError>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens (or creates) the store in the data directory `dir`, which is made private to this
    /// account (0700, the database file 0600) and refused when others may read or write it.
    pub fn open_dir(dir: &Path) -> io::Result<Self> {
        prepare_dir(dir, false)?;
        let file = dir.join(DB_FILE);
        prepare_file(&file)?;
        Self::open(&file)
    }

    /// Opens (or creates) the database file at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        let db = Database::create(path).map_err(io_err)?;
        let txn = db.begin_write().map_err(io_err)?;
        {
            txn.open_table(EVENTS).map_err(io_err)?;
            txn.open_table(ORDER).map_err(io_err)?;
            txn.open_table(AUTHORS).map_err(io_err)?;
            txn.open_table(KINDS).map_err(io_err)?;
            txn.open_table(TAGS).map_err(io_err)?;
            txn.open_table(ADDRESSES).map_err(io_err)?;
            txn.open_table(DELETIONS).map_err(io_err)?;
            txn.open_table(VANISHED).map_err(io_err)?;
            txn.open_table(EXPIRATIONS).map_err(io_err)?;
        }
        txn.commit().map_err(io_err)?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
            group: None,
            group_lost: None,
        })
    }

    /// Applies `event` as [`EventStore::write`] does, inside the open group of writes (opening
    /// one): later writes of the group see it, but it is durable only once
    /// [`RedbStore::commit_group`] has returned `Ok`. A write that fails loses the whole group
    /// (its transaction is aborted), which `commit_group` then reports.
    pub fn write_grouped(&mut self, event: &Event) -> Result<WriteOutcome, StoreError> {
        if kinds::class(event.kind) == KindClass::Ephemeral {
            return Err(StoreError("ephemeral events are not stored".into()));
        }
        if let Some(e) = &self.group_lost {
            return Err(e.clone());
        }
        let txn = match self.group.take() {
            Some(txn) => txn,
            None => self.db.begin_write().map_err(err)?,
        };
        match Self::write_in(&txn, event) {
            Ok(outcome) => {
                self.group = Some(txn);
                Ok(outcome)
            }
            Err(e) => {
                // Part of this write may be in the transaction: none of the group is kept.
                let _ = txn.abort();
                self.group_lost = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Commits the open group of writes (one fsync for all of them). `Err` when the group was
    /// lost, here or earlier: then none of its writes is stored.
    pub fn commit_group(&mut self) -> Result<(), StoreError> {
        let committed = match self.group.take() {
            Some(txn) => txn.commit().map_err(err),
            None => Ok(()),
        };
        match self.group_lost.take() {
            Some(e) => Err(e),
            None => committed,
        }
    }

    /// Commits an open group before another operation (which would otherwise wait for its
    /// transaction): a failure is kept for [`RedbStore::commit_group`] and returned here too.
    fn settle(&mut self) -> Result<(), StoreError> {
        if let Some(txn) = self.group.take()
            && let Err(e) = txn.commit().map_err(err)
        {
            self.group_lost = Some(e.clone());
            return Err(e);
        }
        Ok(())
    }

    /// How many events are held (expired ones included until removed).
    pub fn len(&self) -> io::Result<u64> {
        let read = self.db.begin_read().map_err(io_err)?;
        read.open_table(EVENTS)
            .map_err(io_err)?
            .len()
            .map_err(io_err)
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Deletes every event past its NIP-40 expiration at `now` (hidden from reads from that
    /// second on already; this frees their space), at most `max` of them in one committed
    /// transaction. Returns how many were deleted.
    pub fn sweep_expired(&mut self, now: Timestamp, max: usize) -> Result<u64, StoreError> {
        self.settle()?;
        let txn = self.db.begin_write().map_err(err)?;
        let ids: Vec<EventId> = {
            let table = txn.open_table(EXPIRATIONS).map_err(err)?;
            let mut ids = Vec::new();
            for row in table.iter().map_err(err)? {
                let (key, _) = row.map_err(err)?;
                let key = key.value();
                let at = u64::from_be_bytes(key[..8].try_into().map_err(err)?);
                if now.as_secs() < at || ids.len() >= max {
                    break;
                }
                ids.extend(id_of_tail(key));
            }
            ids
        };
        let mut deleted = 0u64;
        for id in ids {
            if let Some(event) = Self::load_w(&txn, &id)? {
                Self::remove(&txn, &event)?;
                deleted += 1;
            }
        }
        txn.commit().map_err(err)?;
        Ok(deleted)
    }

    /// The index range that narrows `filter` most cheaply: one scan per value of the first of
    /// `authors`, a `#x` tag, `kinds` present (in that order: authors and tags are the most
    /// selective), or the whole order.
    fn plan(filter: &Filter) -> Vec<Scan> {
        if let Some(authors) = &filter.authors {
            let set: BTreeSet<&[u8; 32]> = authors.iter().collect();
            return set
                .into_iter()
                .map(|a| Scan {
                    table: AUTHORS,
                    prefix: a.to_vec(),
                })
                .collect();
        }
        if let Some((letter, values)) = filter.tags.iter().next() {
            let set: BTreeSet<&String> = values.iter().collect();
            return set
                .into_iter()
                .map(|v| Scan {
                    table: TAGS,
                    prefix: tag_prefix(*letter, v),
                })
                .collect();
        }
        if let Some(kinds) = &filter.kinds {
            let set: BTreeSet<u16> = kinds.iter().copied().collect();
            return set
                .into_iter()
                .map(|k| Scan {
                    table: KINDS,
                    prefix: k.to_be_bytes().to_vec(),
                })
                .collect();
        }
        vec![Scan {
            table: ORDER,
            prefix: Vec::new(),
        }]
    }

    fn load(read: &ReadTransaction, id: &EventId) -> Result<Option<Event>, StoreError> {
        let events = read.open_table(EVENTS).map_err(err)?;
        let Some(json) = events.get(id.as_slice()).map_err(err)? else {
            return Ok(None);
        };
        let text = std::str::from_utf8(json.value()).map_err(err)?;
        Event::parse(text)
            .map(Some)
            .map_err(|e| err(format!("{e:?}")))
    }

    /// Matching visible events of one index range, newest first, strictly after `after`, at
    /// most `max`.
    fn scan(
        read: &ReadTransaction,
        scan: &Scan,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        let table = read.open_table(scan.table).map_err(err)?;
        // Start at the later of the cursor and `until` (keys ascend as events get older); stop
        // past `since`.
        let mut start = scan.prefix.clone();
        if let Some(u) = filter.until {
            start.extend_from_slice(&(u64::MAX - u).to_be_bytes());
        }
        let after_key = after.map(|c| cat(&scan.prefix, &tail(c.created_at, &c.id)));
        if let Some(k) = &after_key
            && *k > start
        {
            start.clone_from(k);
        }
        for row in table.range(start.as_slice()..).map_err(err)? {
            let (key, _) = row.map_err(err)?;
            let key = key.value();
            // The value length is in a tag key, so every key of this range has the prefix and
            // one tail; anything else is past the range.
            if !key.starts_with(&scan.prefix) || key.len() != scan.prefix.len() + TAIL {
                break;
            }
            if after_key.as_deref() == Some(key) {
                continue;
            }
            let t = &key[scan.prefix.len()..];
            let created_at = u64::MAX - u64::from_be_bytes(t[..8].try_into().map_err(err)?);
            if filter.since.is_some_and(|s| created_at < s) {
                break;
            }
            let Some(id) = id_of_tail(key) else { continue };
            let Some(event) = Self::load(read, &id)? else {
                continue;
            };
            if !is_expired(&event, now) && filter.matches(&event) {
                out.push(event);
                if out.len() >= max {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn query_in(
        read: &ReadTransaction,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError> {
        let mut out: Vec<Event> = Vec::new();
        if let Some(ids) = &filter.ids {
            let set: BTreeSet<&EventId> = ids.iter().collect();
            for id in set {
                if let Some(e) = Self::load(read, id)?
                    && !is_expired(&e, now)
                    && filter.matches(&e)
                    && after.is_none_or(|c| c.is_before(&e))
                {
                    out.push(e);
                }
            }
        } else {
            for scan in Self::plan(filter) {
                out.extend(Self::scan(read, &scan, filter, after, max, now)?);
            }
        }
        out.sort_by(|a, b| (b.created_at, a.id).cmp(&(a.created_at, b.id)));
        out.dedup_by(|a, b| a.id == b.id);
        out.truncate(max);
        Ok(out)
    }

    fn insert(txn: &WriteTransaction, event: &Event) -> Result<(), StoreError> {
        let t = tail(event.created_at, &event.id);
        txn.open_table(EVENTS)
            .map_err(err)?
            .insert(event.id.as_slice(), event.to_json().as_bytes())
            .map_err(err)?;
        txn.open_table(ORDER)
            .map_err(err)?
            .insert(t.as_slice(), ())
            .map_err(err)?;
        txn.open_table(AUTHORS)
            .map_err(err)?
            .insert(cat(&event.pubkey, &t).as_slice(), ())
            .map_err(err)?;
        txn.open_table(KINDS)
            .map_err(err)?
            .insert(cat(&event.kind.to_be_bytes(), &t).as_slice(), ())
            .map_err(err)?;
        let mut tags = txn.open_table(TAGS).map_err(err)?;
        for (letter, value) in indexed_tags(event) {
            tags.insert(cat(&tag_prefix(letter, value), &t).as_slice(), ())
                .map_err(err)?;
        }
        if let Some(a) = kinds::address(event) {
            txn.open_table(ADDRESSES)
                .map_err(err)?
                .insert(address_key(&a).as_slice(), event.id.as_slice())
                .map_err(err)?;
        }
        if event.kind == DELETION_KIND {
            txn.open_table(DELETIONS)
                .map_err(err)?
                .insert(cat(&event.pubkey, &event.id).as_slice(), ())
                .map_err(err)?;
        }
        if let Some(key) = expiration_key(event) {
            txn.open_table(EXPIRATIONS)
                .map_err(err)?
                .insert(key.as_slice(), ())
                .map_err(err)?;
        }
        Ok(())
    }

    fn remove(txn: &WriteTransaction, event: &Event) -> Result<(), StoreError> {
        let t = tail(event.created_at, &event.id);
        txn.open_table(EVENTS)
            .map_err(err)?
            .remove(event.id.as_slice())
            .map_err(err)?;
        txn.open_table(ORDER)
            .map_err(err)?
            .remove(t.as_slice())
            .map_err(err)?;
        txn.open_table(AUTHORS)
            .map_err(err)?
            .remove(cat(&event.pubkey, &t).as_slice())
            .map_err(err)?;
        txn.open_table(KINDS)
            .map_err(err)?
            .remove(cat(&event.kind.to_be_bytes(), &t).as_slice())
            .map_err(err)?;
        let mut tags = txn.open_table(TAGS).map_err(err)?;
        for (letter, value) in indexed_tags(event) {
            tags.remove(cat(&tag_prefix(letter, value), &t).as_slice())
                .map_err(err)?;
        }
        if let Some(a) = kinds::address(event) {
            let key = address_key(&a);
            let mut addresses = txn.open_table(ADDRESSES).map_err(err)?;
            let held = addresses
                .get(key.as_slice())
                .map_err(err)?
                .is_some_and(|v| v.value() == event.id.as_slice());
            if held {
                addresses.remove(key.as_slice()).map_err(err)?;
            }
        }
        if event.kind == DELETION_KIND {
            txn.open_table(DELETIONS)
                .map_err(err)?
                .remove(cat(&event.pubkey, &event.id).as_slice())
                .map_err(err)?;
        }
        if let Some(key) = expiration_key(event) {
            txn.open_table(EXPIRATIONS)
                .map_err(err)?
                .remove(key.as_slice())
                .map_err(err)?;
        }
        Ok(())
    }

    fn load_w(txn: &WriteTransaction, id: &[u8]) -> Result<Option<Event>, StoreError> {
        let events = txn.open_table(EVENTS).map_err(err)?;
        let Some(json) = events.get(id).map_err(err)? else {
            return Ok(None);
        };
        let text = std::str::from_utf8(json.value()).map_err(err)?;
        Event::parse(text)
            .map(Some)
            .map_err(|e| err(format!("{e:?}")))
    }

    /// Every event of `pubkey` held, through the author index.
    fn by_author(txn: &WriteTransaction, pubkey: &[u8; 32]) -> Result<Vec<Event>, StoreError> {
        let ids: Vec<EventId> = {
            let authors = txn.open_table(AUTHORS).map_err(err)?;
            let mut ids = Vec::new();
            for row in authors.range(pubkey.as_slice()..).map_err(err)? {
                let (key, _) = row.map_err(err)?;
                let key = key.value();
                if !key.starts_with(pubkey) {
                    break;
                }
                ids.extend(id_of_tail(key));
            }
            ids
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(Self::load_w(txn, &id)?);
        }
        Ok(out)
    }

    fn write_in(txn: &WriteTransaction, event: &Event) -> Result<WriteOutcome, StoreError> {
        if Self::load_w(txn, &event.id)?.is_some() {
            return Ok(WriteOutcome::Duplicate);
        }
        let vanished = txn
            .open_table(VANISHED)
            .map_err(err)?
            .get(event.pubkey.as_slice())
            .map_err(err)?
            .map(|v| v.value());
        if vanished.is_some_and(|t| event.created_at <= t) {
            return Ok(WriteOutcome::Vanished);
        }
        let deletion_ids: Vec<EventId> = {
            let deletions = txn.open_table(DELETIONS).map_err(err)?;
            let mut ids = Vec::new();
            for row in deletions.range(event.pubkey.as_slice()..).map_err(err)? {
                let (key, _) = row.map_err(err)?;
                let key = key.value();
                if !key.starts_with(&event.pubkey) {
                    break;
                }
                ids.extend(id_of_tail(key));
            }
            ids
        };
        for id in deletion_ids {
            if let Some(d) = Self::load_w(txn, &id)?
                && kinds::deletes(&d, event)
            {
                return Ok(WriteOutcome::Deleted);
            }
        }
        if let Some(a) = kinds::address(event) {
            let held = txn
                .open_table(ADDRESSES)
                .map_err(err)?
                .get(address_key(&a).as_slice())
                .map_err(err)?
                .map(|v| v.value().to_vec());
            if let Some(old) = held.map(|id| Self::load_w(txn, &id)).transpose()?.flatten() {
                if !kinds::supersedes(event, &old) {
                    return Ok(WriteOutcome::Superseded);
                }
                Self::remove(txn, &old)?;
            }
        }
        if event.kind == DELETION_KIND {
            for target in Self::by_author(txn, &event.pubkey)? {
                if kinds::deletes(event, &target) {
                    Self::remove(txn, &target)?;
                }
            }
        }
        Self::insert(txn, event)?;
        Ok(WriteOutcome::Stored)
    }
}

impl EventStore for RedbStore {
    fn write(&mut self, event: &Event, _now: Timestamp) -> Result<WriteOutcome, StoreError> {
        if kinds::class(event.kind) == KindClass::Ephemeral {
            return Err(StoreError("ephemeral events are not stored".into()));
        }
        self.settle()?;
        let txn = self.db.begin_write().map_err(err)?;
        let outcome = Self::write_in(&txn, event)?;
        if outcome == WriteOutcome::Stored {
            txn.commit().map_err(err)?;
        } else {
            txn.abort().map_err(err)?;
        }
        Ok(outcome)
    }

    fn vanish(&mut self, request: &Event) -> Result<u64, StoreError> {
        self.settle()?;
        let txn = self.db.begin_write().map_err(err)?;
        let mut deleted = 0u64;
        for target in Self::by_author(&txn, &request.pubkey)? {
            if kinds::vanishes(request, &target) {
                Self::remove(&txn, &target)?;
                deleted += 1;
            }
        }
        {
            let mut vanished: Table<&[u8], u64> = txn.open_table(VANISHED).map_err(err)?;
            let held = vanished
                .get(request.pubkey.as_slice())
                .map_err(err)?
                .map_or(0, |v| v.value());
            vanished
                .insert(request.pubkey.as_slice(), held.max(request.created_at))
                .map_err(err)?;
        }
        txn.commit().map_err(err)?;
        Ok(deleted)
    }

    fn query(
        &mut self,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError> {
        self.settle()?;
        let read = self.db.begin_read().map_err(err)?;
        Self::query_in(&read, filter, after, max, now)
    }

    fn count(&mut self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        self.settle()?;
        let read = self.db.begin_read().map_err(err)?;
        let mut seen = BTreeSet::new();
        for f in filters {
            for e in Self::query_in(&read, f, None, usize::MAX, now)? {
                seen.insert(e.id);
            }
        }
        Ok(seen.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::core::rand_core::SeedableRng;
    use weft_proto::nostr::relay::suite;

    use weft_proto::core::rand_core::{CryptoRng, Rng};
    use weft_proto::crypto::generate_secp256k1;
    use weft_proto::nostr::event::UnsignedEvent;
    use weft_proto::nostr::relay::MemoryStore;

    fn pick<T: Clone>(rng: &mut impl Rng, from: &[T]) -> Vec<T> {
        let n = 1 + (rng.next_u32() as usize) % 2;
        (0..n)
            .map(|_| from[(rng.next_u32() as usize) % from.len()].clone())
            .collect()
    }

    fn random_filter(rng: &mut impl CryptoRng, events: &[Event], keys: &[[u8; 32]]) -> Filter {
        let mut f = Filter::default();
        let bits = rng.next_u32();
        if bits & 1 != 0 {
            f.authors = Some(pick(rng, keys));
        }
        if bits & 2 != 0 {
            f.kinds = Some(pick(rng, &[1u16, 7, 0, 30_023]));
        }
        if bits & 4 != 0 {
            let values = pick(rng, &["a", "b", "c"]);
            f.tags
                .insert('t', values.into_iter().map(String::from).collect());
        }
        if bits & 8 != 0 {
            f.since = Some(BASE + u64::from(rng.next_u32() % 12));
        }
        if bits & 16 != 0 {
            f.until = Some(BASE + u64::from(rng.next_u32() % 12));
        }
        if bits & 32 != 0 && !events.is_empty() {
            f.ids = Some(pick(rng, events).iter().map(|e| e.id).collect());
        }
        f
    }

    const BASE: u64 = 1_790_000_000;

    fn open(name: &str) -> (RedbStore, PathBuf) {
        let dir = std::env::temp_dir().join(format!("weft-nostr-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (RedbStore::open_dir(&dir).expect("open"), dir)
    }

    /// The indexed reads answer as the reference store's full scans do, for random events and
    /// filters (every field alone and together, several values, ties in `created_at`), whole
    /// and page by page, and so do counts.
    #[test]
    fn indexed_queries_answer_as_the_memory_store_does() {
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(77);
        let keys: Vec<_> = (0..3)
            .map(|_| generate_secp256k1(provider, &mut rng))
            .collect();
        let pubkeys: Vec<[u8; 32]> = keys
            .iter()
            .map(|k| provider.schnorr_public_key(k).expect("key"))
            .collect();
        let (mut redb, dir) = open("differential");
        let mut memory = MemoryStore::default();
        let now = Timestamp::from_secs(BASE + 100);
        let mut events = Vec::new();
        for i in 0..80u32 {
            let kind = [1u16, 1, 7, 0, 30_023][(rng.next_u32() % 5) as usize];
            let mut tags = vec![vec![
                "t".to_string(),
                ["a", "b", "c"][(i % 3) as usize].into(),
            ]];
            if kind == 30_023 {
                tags.push(vec!["d".into(), (i % 2).to_string()]);
            }
            if i % 4 == 0 {
                tags.push(vec!["t".into(), "c".into()]);
            }
            let event = UnsignedEvent {
                created_at: BASE + u64::from(rng.next_u32() % 12),
                kind,
                tags,
                content: i.to_string(),
            }
            .sign(provider, &keys[(i % 3) as usize], &mut rng)
            .expect("sign");
            assert_eq!(
                redb.write(&event, now).expect("redb write"),
                memory.write(&event, now).expect("memory write"),
                "write outcome of {i}"
            );
            events.push(event);
        }
        for round in 0..300 {
            let f = random_filter(&mut rng, &events, &pubkeys);
            let want = memory.query(&f, None, usize::MAX, now).expect("memory");
            let got = redb.query(&f, None, usize::MAX, now).expect("redb");
            assert_eq!(got, want, "round {round}: {f:?}");
            let mut paged = Vec::new();
            let mut after = None;
            loop {
                let page = redb.query(&f, after.as_ref(), 3, now).expect("page");
                paged.extend(page.iter().cloned());
                after = page.last().map(Cursor::at);
                if page.len() < 3 {
                    break;
                }
            }
            assert_eq!(paged, want, "round {round} paged: {f:?}");
            let g = random_filter(&mut rng, &events, &pubkeys);
            let both = [f, g];
            assert_eq!(
                redb.count(&both, now).expect("count"),
                memory.count(&both, now).expect("count"),
                "round {round} count"
            );
        }
        drop(redb);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sweep_deletes_expired_events_and_only_those() {
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(40);
        let key = generate_secp256k1(provider, &mut rng);
        let (mut store, dir) = open("sweep");
        let event = |tags: Vec<Vec<String>>, rng: &mut chacha20::ChaCha20Rng| {
            UnsignedEvent {
                created_at: BASE,
                kind: 1,
                tags,
                content: String::new(),
            }
            .sign(provider, &key, rng)
            .expect("sign")
        };
        let soon = event(
            vec![weft_proto::nostr::expiration::tag(BASE + 10)],
            &mut rng,
        );
        let later = event(
            vec![weft_proto::nostr::expiration::tag(BASE + 100)],
            &mut rng,
        );
        let never = event(vec![], &mut rng);
        let at = Timestamp::from_secs(BASE);
        for e in [&soon, &later, &never] {
            assert_eq!(store.write(e, at).unwrap(), WriteOutcome::Stored);
        }
        assert_eq!(
            store
                .sweep_expired(Timestamp::from_secs(BASE + 9), 100)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .sweep_expired(Timestamp::from_secs(BASE + 10), 100)
                .unwrap(),
            1
        );
        assert_eq!(store.len().unwrap(), 2);
        // A bounded sweep takes at most its share; the next one the rest.
        assert_eq!(
            store
                .sweep_expired(Timestamp::from_secs(u64::MAX / 1000), 0)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .sweep_expired(Timestamp::from_secs(u64::MAX / 1000), 100)
                .unwrap(),
            1
        );
        let left = store
            .query(
                &Filter::default(),
                None,
                usize::MAX,
                Timestamp::from_secs(BASE),
            )
            .unwrap();
        assert_eq!(left, vec![never]);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_data_directory_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (store, dir) = open("perms");
        drop(store);
        let mode = std::fs::metadata(dir.join(DB_FILE))
            .expect("db file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(RedbStore::open_dir(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_redb_store_passes_the_store_suite() {
        let dir = std::env::temp_dir().join(format!("weft-nostr-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut n = 0;
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(35);
        suite::run(crate::server_provider(), &mut rng, || {
            n += 1;
            RedbStore::open_dir(&dir.join(format!("s{n}"))).expect("open")
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
