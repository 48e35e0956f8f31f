//! The PostgreSQL event store of `weft nostr serve --database postgres://…`: the relay core's
//! [`EventStore`] with the semantics every backend keeps (NIP-01 kinds, NIP-09 deletion, NIP-40
//! expiration, NIP-62 requests to vanish; see [`weft_proto::nostr::relay::store`]) and the same
//! test suite ([`weft_proto::nostr::relay::suite`]), for operators who outgrow one machine:
//! several `weft nostr serve` processes on one database serve one relay.
//!
//! **Client.** The blocking `postgres` crate (tokio-postgres under a private current-thread
//! runtime): the relay calls its store synchronously on its own thread, so a blocking call is
//! what it needs (docs/decisions.md).
//!
//! **Schema.** Created by the program on first start, as numbered migrations recorded in
//! `weft_nostr_schema` and applied under an advisory lock (so processes starting together do not
//! race). Events are kept once, as their JSON, by id, with the columns the reads filter on:
//!
//! | index | columns | used for |
//! | --- | --- | --- |
//! | order | `created_at DESC, id` | a filter with nothing better, negentropy items |
//! | author | `pubkey, created_at DESC, id` | `authors`, vanish |
//! | kind | `kind, created_at DESC, id` | `kinds` |
//! | tags (table) | `letter, key, created_at DESC, event_id` | `#x` (a single-letter tag's first value) |
//! | address (unique) | `pubkey, kind, d_key` | the one replaceable/addressable winner |
//! | deletions | `pubkey` where `kind = 5` | NIP-09 checks on arrival |
//! | expirations | `expires_at` | hiding and sweeping expired events |
//!
//! A tag value or `d` is indexed by its [`index_key`] (the value itself, or a digest when long)
//! so a long value never exceeds a btree row. Every filter condition, the NIP-40 visibility and
//! the cursor are applied in SQL before `LIMIT`, so a page is an index scan and never short of
//! visible events. Replaced, deleted and vanished events are deleted outright (their tags go with
//! them, `ON DELETE CASCADE`); a deletion stays in force through its stored kind 5 event.
//!
//! **Several writers.** Every rule that reads before it writes (duplicate, vanished, deleted,
//! superseded, kind 5 targets, vanish) concerns one author, so each write and vanish takes a
//! transaction-scoped advisory lock on its pubkey first: writers of one author queue, writers of
//! different authors do not, and each statement after the lock sees what the previous holder
//! committed (`READ COMMITTED` takes a snapshot per statement). The primary key on `id` and the
//! unique address index back this with constraints: a second winner is an error, never a row.
//!
//! **Durability.** A write commits (PostgreSQL's default `synchronous_commit`: the WAL is flushed)
//! before [`EventStore::write`] returns, so the session's `OK true` names a durable event.
//!
//! **Fan-out.** A stored event is announced on [`CHANNEL`] by `pg_notify` inside its own write
//! transaction (so only committed events are announced, and exactly once), with its id only
//! (NOTIFY's payload is under 8000 bytes; an event is not). Every process listens
//! ([`Listener`]), reads the announced rows and hands them to its sessions as live events; its own
//! announcements, known by the origin tag in the payload, are skipped (its sessions had the
//! event from the write itself). An ephemeral event, never stored, is announced with its JSON
//! when that fits in a payload ([`MAX_NOTIFY_PAYLOAD`]); a larger one reaches only the sessions
//! of the process that took it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Transaction};
use weft_proto::core::Timestamp;
use weft_proto::crypto::CryptoProvider;
use weft_proto::nostr::event::{Event, EventId};
use weft_proto::nostr::expiration::Expiration;
use weft_proto::nostr::kinds::{self, KindClass};
use weft_proto::nostr::message::Filter;
use weft_proto::nostr::relay::{Cursor, EventStore, StoreError, WriteOutcome};

use super::serve::{RelayCommands, SWEEP_BATCH, ServeInput, Sweep};
use crate::ws::WsInput;

/// The NOTIFY channel every process serving one relay on a database listens on.
pub const CHANNEL: &str = "weft_nostr";

/// Most bytes of a NOTIFY payload: PostgreSQL refuses 8000 or more.
pub const MAX_NOTIFY_PAYLOAD: usize = 7_999;

/// Tag values and `d` values up to this many bytes are indexed as they are; longer ones by
/// [`LONG_KEY_MARK`] and their SHA-256, so no index row nears PostgreSQL's btree row limit
/// (about 2.7 kB).
pub const MAX_PLAIN_KEY_BYTES: usize = 256;

/// The first byte of a digest key: never the first byte of UTF-8 text, so a digest key never
/// equals a plain one.
pub const LONG_KEY_MARK: u8 = 0xff;

/// The schema version this program knows; a database at a newer one is refused.
pub const SCHEMA_VERSION: i32 = 1;

/// The advisory lock key under which migrations run (two `int4`s: "weft", "nost").
const MIGRATION_LOCK: (i32, i32) = (0x7765_6674, 0x6e6f_7374);

/// The migrations, in order; migration `n` (1-based) brings the schema to version `n`.
const MIGRATIONS: [&str; 1] = [r"
CREATE TABLE weft_nostr_events (
    id bytea PRIMARY KEY,
    pubkey bytea NOT NULL,
    created_at bigint NOT NULL,
    kind integer NOT NULL,
    d_key bytea,
    expires_at bigint,
    json text NOT NULL
);
CREATE INDEX weft_nostr_events_order ON weft_nostr_events (created_at DESC, id);
CREATE INDEX weft_nostr_events_author ON weft_nostr_events (pubkey, created_at DESC, id);
CREATE INDEX weft_nostr_events_kind ON weft_nostr_events (kind, created_at DESC, id);
CREATE UNIQUE INDEX weft_nostr_events_address ON weft_nostr_events (pubkey, kind, d_key)
    WHERE d_key IS NOT NULL;
CREATE INDEX weft_nostr_events_deletions ON weft_nostr_events (pubkey) WHERE kind = 5;
CREATE INDEX weft_nostr_events_expires ON weft_nostr_events (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE weft_nostr_tags (
    event_id bytea NOT NULL REFERENCES weft_nostr_events (id) ON DELETE CASCADE,
    letter text NOT NULL,
    key bytea NOT NULL,
    created_at bigint NOT NULL
);
CREATE UNIQUE INDEX weft_nostr_tags_lookup
    ON weft_nostr_tags (letter, key, created_at DESC, event_id);
CREATE INDEX weft_nostr_tags_event ON weft_nostr_tags (event_id);
CREATE TABLE weft_nostr_vanished (
    pubkey bytea PRIMARY KEY,
    until bigint NOT NULL
);
"];

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("store: {e}"))
}

/// A database error in words: the server's message and detail when it sent one (the `Display`
/// of a server error is only "db error").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_string(),
        },
        None => e.to_string(),
    }
}

fn db(e: postgres::Error) -> StoreError {
    StoreError(format!("store: {}", describe(&e)))
}

/// The key a tag value or `d` value is indexed under: the value's bytes when at most
/// [`MAX_PLAIN_KEY_BYTES`], else [`LONG_KEY_MARK`] ‖ its SHA-256.
pub fn index_key(provider: &dyn CryptoProvider, value: &str) -> Vec<u8> {
    if value.len() <= MAX_PLAIN_KEY_BYTES {
        return value.as_bytes().to_vec();
    }
    let mut key = Vec::with_capacity(33);
    key.push(LONG_KEY_MARK);
    key.extend_from_slice(&provider.sha256(&[value.as_bytes()]));
    key
}

/// The single-letter tags of `event` a filter's `#x` conditions match, deduplicated.
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

/// The advisory lock key of an author: the first 8 bytes of the pubkey (uniformly spread; two
/// authors sharing one only queue behind each other).
fn author_lock(pubkey: &[u8; 32]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&pubkey[..8]);
    i64::from_be_bytes(b)
}

/// A `u64` second as a `bigint`, saturating (no event of this era comes near).
fn secs(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A statement under construction: its text and its parameters.
#[derive(Default)]
struct Sql {
    text: String,
    params: Vec<Box<dyn ToSql + Sync>>,
}

impl Sql {
    /// Adds a parameter; its placeholder.
    fn bind(&mut self, v: impl ToSql + Sync + 'static) -> String {
        self.params.push(Box::new(v));
        format!("${}", self.params.len())
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|p| p.as_ref() as _).collect()
    }

    /// The condition for `filter` (every field present), for `weft_nostr_events`.
    fn filter(&mut self, provider: &dyn CryptoProvider, filter: &Filter) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(ids) = &filter.ids {
            let ids: Vec<Vec<u8>> = ids.iter().map(|i| i.to_vec()).collect();
            parts.push(format!("id = ANY({})", self.bind(ids)));
        }
        if let Some(authors) = &filter.authors {
            let authors: Vec<Vec<u8>> = authors.iter().map(|a| a.to_vec()).collect();
            parts.push(format!("pubkey = ANY({})", self.bind(authors)));
        }
        if let Some(kinds) = &filter.kinds {
            let kinds: Vec<i32> = kinds.iter().map(|&k| i32::from(k)).collect();
            parts.push(format!("kind = ANY({})", self.bind(kinds)));
        }
        if let Some(since) = filter.since {
            match i64::try_from(since) {
                Ok(s) => parts.push(format!("created_at >= {}", self.bind(s))),
                Err(_) => parts.push("FALSE".into()),
            }
        }
        if let Some(until) = filter.until
            && let Ok(u) = i64::try_from(until)
        {
            parts.push(format!("created_at <= {}", self.bind(u)));
        }
        for (letter, values) in &filter.tags {
            let keys: Vec<Vec<u8>> = values.iter().map(|v| index_key(provider, v)).collect();
            let letter = self.bind(letter.to_string());
            let keys = self.bind(keys);
            parts.push(format!(
                "id IN (SELECT event_id FROM weft_nostr_tags WHERE letter = {letter} AND key = ANY({keys}))"
            ));
        }
        if parts.is_empty() {
            "TRUE".into()
        } else {
            format!("({})", parts.join(" AND "))
        }
    }

    /// The NIP-40 visibility condition at `now`: no expiration, or one still ahead.
    fn visible(&mut self, now: Timestamp) -> String {
        format!(
            "(expires_at IS NULL OR expires_at > {})",
            self.bind(secs(now.as_secs()))
        )
    }

    /// Strictly after `after` in newest-first order.
    fn after(&mut self, after: Option<&Cursor>) -> String {
        match after {
            None => "TRUE".into(),
            Some(c) => {
                let at = self.bind(secs(c.created_at));
                let id = self.bind(c.id.to_vec());
                format!("(created_at < {at} OR (created_at = {at} AND id > {id}))")
            }
        }
    }

    /// `SELECT <columns>` of the visible events matching `filter` after `after`, newest first,
    /// at most `max`.
    fn page(
        provider: &dyn CryptoProvider,
        columns: &str,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Self {
        let mut sql = Self::default();
        let visible = sql.visible(now);
        let matches = sql.filter(provider, filter);
        let after = sql.after(after);
        let limit = sql.bind(i64::try_from(max).unwrap_or(i64::MAX));
        sql.text = format!(
            "SELECT {columns} FROM weft_nostr_events WHERE {visible} AND {matches} AND {after} \
             ORDER BY created_at DESC, id ASC LIMIT {limit}"
        );
        sql
    }
}

fn parse_row(json: &str) -> Result<Event, StoreError> {
    Event::parse(json).map_err(|e| err(format!("a stored event does not parse: {e:?}")))
}

/// Connects, telling apart a URL that is no PostgreSQL URL from a server that cannot be reached.
fn connect(config: &Config) -> Result<Client, StoreError> {
    config
        .connect(NoTls)
        .map_err(|e| StoreError(format!("cannot connect to the database: {}", describe(&e))))
}

/// Reads a `--database` URL (`postgres://user@host:port/db` or PostgreSQL's `key=value` form).
pub fn parse_url(url: &str) -> Result<Config, StoreError> {
    url.parse::<Config>()
        .map_err(|e| StoreError(format!("not a PostgreSQL URL: {e}")))
}

/// The events held in PostgreSQL.
pub struct PgStore {
    client: Client,
    config: Config,
    provider: &'static dyn CryptoProvider,
    /// This process's mark on its announcements, so its [`Listener`] skips them.
    origin: String,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database at `url` and brings its schema to [`SCHEMA_VERSION`] (creating
    /// it on first start). `origin` marks this process's announcements (any string without a
    /// space, distinct per process; [`new_origin`] makes one).
    pub fn connect(
        url: &str,
        provider: &'static dyn CryptoProvider,
        origin: String,
    ) -> Result<Self, StoreError> {
        let config = parse_url(url)?;
        let mut client = connect(&config)?;
        migrate(&mut client)?;
        Ok(Self {
            client,
            config,
            provider,
            origin,
        })
    }

    /// This process's origin mark.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// A connection, made anew when the last one was lost (the failed operation was answered
    /// `error:`; the next one tries again).
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.is_closed() {
            self.client = connect(&self.config)?;
        }
        Ok(&mut self.client)
    }

    /// How many events are held (expired ones included until swept).
    pub fn len(&mut self) -> Result<u64, StoreError> {
        let row = self
            .client()?
            .query_one("SELECT count(*) FROM weft_nostr_events", &[])
            .map_err(db)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Whether no event is held.
    pub fn is_empty(&mut self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Deletes at most `max` events past their NIP-40 expiration at `now` (hidden already; this
    /// frees their space) in one transaction. Returns how many were deleted. Several processes
    /// sweeping at once each delete what they find; none fails.
    pub fn sweep_expired(&mut self, now: Timestamp, max: usize) -> Result<u64, StoreError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let n = self
            .client()?
            .execute(
                "DELETE FROM weft_nostr_events WHERE id IN (SELECT id FROM weft_nostr_events \
                 WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2)",
                &[&secs(now.as_secs()), &max],
            )
            .map_err(db)?;
        Ok(n)
    }

    /// Announces an ephemeral event (never stored) to the other processes, when its JSON fits
    /// in a NOTIFY payload; returns whether it was announced.
    pub fn announce_ephemeral(&mut self, event: &Event) -> Result<bool, StoreError> {
        let payload = format!("e {} {}", self.origin, event.to_json());
        if payload.len() > MAX_NOTIFY_PAYLOAD {
            return Ok(false);
        }
        self.client()?
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
            .map_err(db)?;
        Ok(true)
    }

    fn events_of(
        tx: &mut Transaction<'_>,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Event>, StoreError> {
        tx.query(sql, params)
            .map_err(db)?
            .iter()
            .map(|row| parse_row(row.get(0)))
            .collect()
    }
}

/// Brings the schema to [`SCHEMA_VERSION`], under an advisory lock so that processes starting
/// together apply each migration once.
fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(db)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&MIGRATION_LOCK.0, &MIGRATION_LOCK.1],
    )
    .map_err(db)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS weft_nostr_schema (version integer NOT NULL)")
        .map_err(db)?;
    let at: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM weft_nostr_schema",
            &[],
        )
        .map_err(db)?
        .get(0);
    if at > SCHEMA_VERSION {
        return Err(StoreError(format!(
            "the database's schema is version {at}, newer than this weft's {SCHEMA_VERSION}"
        )));
    }
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(at as usize) {
        tx.batch_execute(migration).map_err(db)?;
        let version = i32::try_from(n + 1).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO weft_nostr_schema (version) VALUES ($1)",
            &[&version],
        )
        .map_err(db)?;
    }
    tx.commit().map_err(db)
}

/// A fresh origin mark for this process: 16 hex digits from the OS's randomness.
pub fn new_origin() -> String {
    let mut b = [0u8; 8];
    weft_proto::core::rand_core::Rng::fill_bytes(&mut crate::os_rng(), &mut b);
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

impl EventStore for PgStore {
    fn write(&mut self, event: &Event, _now: Timestamp) -> Result<WriteOutcome, StoreError> {
        if kinds::class(event.kind) == KindClass::Ephemeral {
            return Err(StoreError("ephemeral events are not stored".into()));
        }
        let provider = self.provider;
        let origin = std::mem::take(&mut self.origin);
        let result = (|| {
            let client = self.client()?;
            let mut tx = client.transaction().map_err(db)?;
            let this = PgStoreRef {
                provider,
                origin: &origin,
            };
            let outcome = this.write_in(&mut tx, event)?;
            if outcome == WriteOutcome::Stored {
                tx.commit().map_err(db)?;
            }
            Ok(outcome)
        })();
        self.origin = origin;
        result
    }

    fn vanish(&mut self, request: &Event) -> Result<u64, StoreError> {
        let pubkey = request.pubkey.to_vec();
        let until = secs(request.created_at);
        let client = self.client()?;
        let mut tx = client.transaction().map_err(db)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&author_lock(&request.pubkey)],
        )
        .map_err(db)?;
        // kinds::vanishes: every event of the pubkey up to the request's created_at.
        let deleted = tx
            .execute(
                "DELETE FROM weft_nostr_events WHERE pubkey = $1 AND created_at <= $2",
                &[&pubkey, &until],
            )
            .map_err(db)?;
        tx.execute(
            "INSERT INTO weft_nostr_vanished (pubkey, until) VALUES ($1, $2) \
             ON CONFLICT (pubkey) DO UPDATE \
             SET until = GREATEST(weft_nostr_vanished.until, EXCLUDED.until)",
            &[&pubkey, &until],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(deleted)
    }

    fn query(
        &mut self,
        filter: &Filter,
        after: Option<&Cursor>,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<Event>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let sql = Sql::page(self.provider, "json", filter, after, max, now);
        self.client()?
            .query(&sql.text, &sql.refs())
            .map_err(db)?
            .iter()
            .map(|row| parse_row(row.get(0)))
            .collect()
    }

    fn items(
        &mut self,
        filter: &Filter,
        max: usize,
        now: Timestamp,
    ) -> Result<Vec<(u64, EventId)>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let sql = Sql::page(self.provider, "created_at, id", filter, None, max, now);
        self.client()?
            .query(&sql.text, &sql.refs())
            .map_err(db)?
            .iter()
            .map(|row| {
                let at: i64 = row.get(0);
                let id: &[u8] = row.get(1);
                Ok((
                    u64::try_from(at).map_err(err)?,
                    EventId::try_from(id).map_err(err)?,
                ))
            })
            .collect()
    }

    fn count(&mut self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        if filters.is_empty() {
            return Ok(0);
        }
        let mut sql = Sql::default();
        let visible = sql.visible(now);
        let any: Vec<String> = filters
            .iter()
            .map(|f| sql.filter(self.provider, f))
            .collect();
        sql.text = format!(
            "SELECT count(*) FROM weft_nostr_events WHERE {visible} AND ({})",
            any.join(" OR ")
        );
        let row = self
            .client()?
            .query_one(&sql.text, &sql.refs())
            .map_err(db)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// What [`PgStore::write_in`] needs of the store, borrowed apart from its connection.
struct PgStoreRef<'a> {
    provider: &'static dyn CryptoProvider,
    origin: &'a str,
}

impl PgStoreRef<'_> {
    fn write_in(
        &self,
        tx: &mut Transaction<'_>,
        event: &Event,
    ) -> Result<WriteOutcome, StoreError> {
        let id = event.id.to_vec();
        let pubkey = event.pubkey.to_vec();
        let created_at = i64::try_from(event.created_at)
            .map_err(|_| StoreError("store: created_at is past what the store keeps".into()))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&author_lock(&event.pubkey)],
        )
        .map_err(db)?;
        if tx
            .query_opt("SELECT 1 FROM weft_nostr_events WHERE id = $1", &[&id])
            .map_err(db)?
            .is_some()
        {
            return Ok(WriteOutcome::Duplicate);
        }
        let vanished: Option<i64> = tx
            .query_opt(
                "SELECT until FROM weft_nostr_vanished WHERE pubkey = $1",
                &[&pubkey],
            )
            .map_err(db)?
            .map(|r| r.get(0));
        if vanished.is_some_and(|t| created_at <= t) {
            return Ok(WriteOutcome::Vanished);
        }
        let deletions = PgStore::events_of(
            tx,
            "SELECT json FROM weft_nostr_events WHERE pubkey = $1 AND kind = 5",
            &[&pubkey],
        )?;
        if deletions.iter().any(|d| kinds::deletes(d, event)) {
            return Ok(WriteOutcome::Deleted);
        }
        let d_key = kinds::address(event).map(|a| index_key(self.provider, &a.d));
        if let Some(d_key) = &d_key {
            let held = PgStore::events_of(
                tx,
                "SELECT json FROM weft_nostr_events WHERE pubkey = $1 AND kind = $2 AND d_key = $3",
                &[&pubkey, &i32::from(event.kind), d_key],
            )?;
            for old in held {
                if !kinds::supersedes(event, &old) {
                    return Ok(WriteOutcome::Superseded);
                }
                tx.execute(
                    "DELETE FROM weft_nostr_events WHERE id = $1",
                    &[&old.id.to_vec()],
                )
                .map_err(db)?;
            }
        }
        if let Some(targets) = kinds::deletion_targets(event) {
            let ids: Vec<Vec<u8>> = targets.ids.iter().map(|i| i.to_vec()).collect();
            let mut doomed = PgStore::events_of(
                tx,
                "SELECT json FROM weft_nostr_events WHERE pubkey = $1 AND id = ANY($2)",
                &[&pubkey, &ids],
            )?;
            for a in targets
                .addresses
                .iter()
                .filter(|a| a.pubkey == event.pubkey)
            {
                doomed.extend(PgStore::events_of(
                    tx,
                    "SELECT json FROM weft_nostr_events \
                     WHERE pubkey = $1 AND kind = $2 AND d_key = $3",
                    &[&pubkey, &i32::from(a.kind), &index_key(self.provider, &a.d)],
                )?);
            }
            let doomed: Vec<Vec<u8>> = doomed
                .iter()
                .filter(|t| kinds::deletes(event, t))
                .map(|t| t.id.to_vec())
                .collect();
            if !doomed.is_empty() {
                tx.execute(
                    "DELETE FROM weft_nostr_events WHERE id = ANY($1)",
                    &[&doomed],
                )
                .map_err(db)?;
            }
        }
        let expires_at: Option<i64> = match Expiration::of(event) {
            Expiration::Never => None,
            Expiration::At(at) => Some(secs(at)),
            Expiration::Malformed => Some(0),
        };
        tx.execute(
            "INSERT INTO weft_nostr_events (id, pubkey, created_at, kind, d_key, expires_at, json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &id,
                &pubkey,
                &created_at,
                &i32::from(event.kind),
                &d_key,
                &expires_at,
                &event.to_json(),
            ],
        )
        .map_err(db)?;
        let (letters, keys): (Vec<String>, Vec<Vec<u8>>) = indexed_tags(event)
            .into_iter()
            .map(|(l, v)| (l.to_string(), index_key(self.provider, v)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .unzip();
        if !letters.is_empty() {
            tx.execute(
                "INSERT INTO weft_nostr_tags (event_id, letter, key, created_at) \
                 SELECT $1, l, k, $2 FROM UNNEST($3::text[], $4::bytea[]) AS t (l, k)",
                &[&id, &created_at, &letters, &keys],
            )
            .map_err(db)?;
        }
        // Delivered to the listeners when (and only if) this transaction commits.
        let payload = format!("s {} {}", self.origin, event.id_hex());
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
            .map_err(db)?;
        Ok(WriteOutcome::Stored)
    }
}

/// What another process announced on [`CHANNEL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// An event it stored, by id.
    Stored(EventId),
    /// An ephemeral event it took, whole.
    Ephemeral(Event),
}

/// Reads a payload on [`CHANNEL`]: `None` for this process's own (`origin`) and for anything
/// malformed (a payload is only ever written by weft, but the channel is the database's).
pub fn read_announcement(payload: &str, origin: &str) -> Option<Announcement> {
    let mut parts = payload.splitn(3, ' ');
    let (kind, from, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if from == origin {
        return None;
    }
    match kind {
        "s" => weft_proto::codec::hex::decode_array::<32>(rest)
            .ok()
            .map(Announcement::Stored),
        "e" => Event::parse(rest)
            .ok()
            .filter(|e| kinds::class(e.kind) == KindClass::Ephemeral)
            .map(Announcement::Ephemeral),
        _ => None,
    }
}

/// How long the listener waits for notifications before looking whether it should stop.
const LISTEN_TICK: Duration = Duration::from_millis(500);

/// Announced ids read per statement.
const FETCH_BATCH: usize = 256;

/// The listening end of [`CHANNEL`] for one process: the events other processes stored or took,
/// read back and handed over one by one.
pub struct Listener {
    client: Client,
    config: Config,
    origin: String,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Listens on [`CHANNEL`] of the database at `url`, skipping announcements of `origin`.
    pub fn connect(url: &str, origin: String) -> Result<Self, StoreError> {
        let config = parse_url(url)?;
        let mut client = connect(&config)?;
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(db)?;
        Ok(Self {
            client,
            config,
            origin,
        })
    }

    /// Waits up to `LISTEN_TICK` (500 ms) for announcements and returns the events they name
    /// that are still held (a stored event replaced or deleted since is not), in the order
    /// announced.
    /// A lost connection is made anew (what was announced meanwhile is missed by live
    /// subscriptions here, and still found by queries).
    pub fn next_batch(&mut self) -> Result<Vec<Event>, StoreError> {
        if self.client.is_closed() {
            std::thread::sleep(LISTEN_TICK);
            let mut client = connect(&self.config)?;
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .map_err(db)?;
            self.client = client;
        }
        let mut announced = Vec::new();
        {
            let mut notes = self.client.notifications();
            let mut iter = notes.timeout_iter(LISTEN_TICK);
            while let Some(n) =
                postgres::fallible_iterator::FallibleIterator::next(&mut iter).map_err(db)?
            {
                announced.extend(read_announcement(n.payload(), &self.origin));
                if announced.len() >= FETCH_BATCH {
                    break;
                }
            }
        }
        let mut out = Vec::with_capacity(announced.len());
        let mut i = 0;
        while i < announced.len() {
            match &announced[i] {
                Announcement::Ephemeral(e) => {
                    out.push(e.clone());
                    i += 1;
                }
                Announcement::Stored(_) => {
                    let run: Vec<EventId> = announced[i..]
                        .iter()
                        .map_while(|a| match a {
                            Announcement::Stored(id) => Some(*id),
                            Announcement::Ephemeral(_) => None,
                        })
                        .collect();
                    i += run.len();
                    let ids: Vec<Vec<u8>> = run.iter().map(|id| id.to_vec()).collect();
                    let rows = self
                        .client
                        .query(
                            "SELECT id, json FROM weft_nostr_events WHERE id = ANY($1)",
                            &[&ids],
                        )
                        .map_err(db)?;
                    let mut found = std::collections::BTreeMap::new();
                    for row in &rows {
                        let id: &[u8] = row.get(0);
                        found.insert(id.to_vec(), parse_row(row.get(1))?);
                    }
                    for id in &ids {
                        out.extend(found.remove(id));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Each write is its own PostgreSQL transaction, committed before [`EventStore::write`] returns
/// (the advisory lock that keeps one replaceable winner across processes is held only that long),
/// so a group needs no commit of its own.
impl crate::nostr::serve::GroupCommit for PgStore {}

impl Sweep for PgStore {
    fn sweep(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        self.sweep_expired(now, SWEEP_BATCH)
    }

    /// Stored events were announced by their write; an ephemeral one is announced here.
    fn published(&mut self, event: &Event) {
        if kinds::class(event.kind) != KindClass::Ephemeral {
            return;
        }
        // Live delivery to the other processes is best effort past a payload's size, and when the
        // database cannot be told; the sessions here have the event either way.
        if let Err(e) = self.announce_ephemeral(event) {
            eprintln!("weft nostr serve: announcing an ephemeral event: {}", e.0);
        }
    }
}

/// The thread passing [`Listener`]'s events to the relay's loop; stopped (and joined) on drop.
#[derive(Debug)]
pub struct Listening {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long the listening thread waits after a failure before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// The store at `url`, the commands the relay's loop is fed from it, and the listening thread
/// feeding them (listening already when this returns, so an event stored by another process from
/// then on reaches this one's sessions).
pub fn open(url: &str) -> std::io::Result<(PgStore, RelayCommands, Listening)> {
    let origin = new_origin();
    let io = |e: StoreError| std::io::Error::other(e.0);
    let store = PgStore::connect(url, crate::server_provider(), origin.clone()).map_err(io)?;
    let mut listener = Listener::connect(url, origin).map_err(io)?;
    let (commander, commands) = crate::host::commands()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("weft-nostr-listen".into())
        .spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.next_batch() {
                    Ok(events) => {
                        for event in events {
                            let input = WsInput::App(ServeInput::Remote(event));
                            // Waits while the loop's queue is full; fails only once it is gone.
                            if smol::block_on(commander.send_async(input)).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("weft nostr serve: listening for other processes: {}", e.0);
                        std::thread::sleep(RETRY);
                    }
                }
            }
        })?;
    Ok((
        store,
        commands,
        Listening {
            stop,
            thread: Some(thread),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::core::rand_core::SeedableRng;
    use weft_proto::nostr::event::UnsignedEvent;

    fn event(kind: u16) -> Event {
        let provider = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(62);
        let key = weft_proto::crypto::generate_secp256k1(provider, &mut rng);
        UnsignedEvent {
            created_at: 1_790_000_000,
            kind,
            tags: vec![],
            content: "x".into(),
        }
        .sign(provider, &key, &mut rng)
        .expect("sign")
    }

    #[test]
    fn announcements_of_this_process_and_malformed_ones_are_skipped() {
        let note = event(1);
        let stored = format!("s other {}", note.id_hex());
        assert_eq!(
            read_announcement(&stored, "mine"),
            Some(Announcement::Stored(note.id))
        );
        assert_eq!(read_announcement(&stored, "other"), None, "our own");
        let ping = event(20_001);
        let whole = format!("e other {}", ping.to_json());
        assert_eq!(
            read_announcement(&whole, "mine"),
            Some(Announcement::Ephemeral(ping))
        );
        // Only an ephemeral event travels whole: a stored kind is read from its row.
        let regular = format!("e other {}", note.to_json());
        for bad in [
            regular.as_str(),
            "s other nothex",
            "s other",
            "x other 00",
            "",
            "e other {",
        ] {
            assert_eq!(read_announcement(bad, "mine"), None, "{bad}");
        }
    }

    #[test]
    fn long_values_are_keyed_by_a_digest_that_never_equals_a_plain_key() {
        let provider = crate::server_provider();
        let short = "a".repeat(MAX_PLAIN_KEY_BYTES);
        assert_eq!(index_key(provider, &short), short.as_bytes());
        let long = "a".repeat(MAX_PLAIN_KEY_BYTES + 1);
        let key = index_key(provider, &long);
        assert_eq!(key.len(), 33);
        assert_eq!(key[0], LONG_KEY_MARK);
        assert_ne!(index_key(provider, &format!("{long}b")), key);
        // No UTF-8 text starts with the mark, so no plain key is ever a digest key.
        assert!(std::str::from_utf8(&[LONG_KEY_MARK]).is_err());
    }
}
