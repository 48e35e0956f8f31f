//! `weft nostr serve --database postgres://…` against a real PostgreSQL (Debian's package, a
//! throwaway cluster started by `scripts/postgres`): the store passes the backend suite and
//! answers as the reference store does; competing writers of one author, in threads and in
//! processes, leave exactly one winner; two `weft nostr serve` processes on one database serve
//! one relay (an event published through one reaches live subscriptions on the other, once); an
//! event acknowledged `OK true` survives `kill -9`; a bad `--database` is refused clearly.
//!
//! Skipped, with one `SKIP:` line saying why, only when PostgreSQL cannot be installed here.

#[path = "common/cli.rs"]
mod cli;
#[path = "common/nostr_relay.rs"]
#[allow(dead_code)] // Only the script helpers are used here.
mod nostr_relay;
#[path = "common/postgres.rs"]
mod pg;

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cli::{Running, WEFT, free_port, temp_dir};
use pg::Postgres;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};
use weft_drivers::nostr::pg::{PgStore, SCHEMA_VERSION, new_origin};
use weft_proto::core::Timestamp;
use weft_proto::core::rand_core::{Rng, SeedableRng};
use weft_proto::crypto::{Secp256k1Secret, generate_secp256k1};
use weft_proto::nostr::event::{Event, UnsignedEvent};
use weft_proto::nostr::kinds::DELETION_KIND;
use weft_proto::nostr::message::Filter;
use weft_proto::nostr::relay::{Cursor, EventStore, MemoryStore, suite};

const BASE: u64 = 1_790_000_000;

fn store(url: &str) -> PgStore {
    PgStore::connect(url, weft_drivers::server_provider(), new_origin()).expect("connect")
}

fn sign(
    key: &Secp256k1Secret,
    kind: u16,
    created_at: u64,
    tags: Vec<Vec<String>>,
    content: &str,
    rng: &mut chacha20::ChaCha20Rng,
) -> Event {
    UnsignedEvent {
        created_at,
        kind,
        tags,
        content: content.into(),
    }
    .sign(weft_drivers::server_provider(), key, rng)
    .expect("sign")
}

#[test]
fn the_postgres_store_passes_the_store_suite() {
    let Some(pg) = Postgres::start("the_postgres_store_passes_the_store_suite") else {
        return;
    };
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(35);
    suite::run(weft_drivers::server_provider(), &mut rng, || {
        store(&pg.database())
    });
}

/// SQL filtering answers as the reference store's scans do, for random events and filters
/// (every field alone and together, long tag values indexed by digest, ties in `created_at`,
/// expired events), whole, page by page, as negentropy items, and counted.
#[test]
fn sql_queries_answer_as_the_memory_store_does() {
    let Some(pg) = Postgres::start("sql_queries_answer_as_the_memory_store_does") else {
        return;
    };
    let provider = weft_drivers::server_provider();
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(78);
    let keys: Vec<_> = (0..3)
        .map(|_| generate_secp256k1(provider, &mut rng))
        .collect();
    let pubkeys: Vec<[u8; 32]> = keys
        .iter()
        .map(|k| provider.schnorr_public_key(k).expect("key"))
        .collect();
    let long = "L".repeat(3_000);
    let values = ["a", "b", long.as_str()];
    let mut pgs = store(&pg.database());
    let mut memory = MemoryStore::default();
    let now = Timestamp::from_secs(BASE + 100);
    let mut events = Vec::new();
    for i in 0..80u32 {
        let kind = [1u16, 1, 7, 0, 30_023][(rng.next_u32() % 5) as usize];
        let mut tags = vec![vec!["t".to_string(), values[(i % 3) as usize].into()]];
        if kind == 30_023 {
            // A long d is an address too.
            tags.push(vec![
                "d".into(),
                if i % 2 == 0 { "x".into() } else { long.clone() },
            ]);
        }
        if i % 4 == 0 {
            tags.push(vec!["t".into(), long.clone()]);
        }
        if i % 10 == 3 {
            tags.push(vec!["expiration".into(), (BASE + 50).to_string()]);
        }
        let event = sign(
            &keys[(i % 3) as usize],
            kind,
            BASE + u64::from(rng.next_u32() % 12),
            tags,
            &i.to_string(),
            &mut rng,
        );
        assert_eq!(
            pgs.write(&event, now).expect("pg write"),
            memory.write(&event, now).expect("memory write"),
            "write outcome of {i}"
        );
        events.push(event);
    }
    let pick = |rng: &mut chacha20::ChaCha20Rng, n: usize| -> Vec<usize> {
        (0..1 + rng.next_u32() as usize % 2)
            .map(|_| rng.next_u32() as usize % n)
            .collect()
    };
    for round in 0..200 {
        let mut f = Filter::default();
        let bits = rng.next_u32();
        if bits & 1 != 0 {
            f.authors = Some(pick(&mut rng, 3).into_iter().map(|i| pubkeys[i]).collect());
        }
        if bits & 2 != 0 {
            let kinds = [1u16, 7, 0, 30_023];
            f.kinds = Some(pick(&mut rng, 4).into_iter().map(|i| kinds[i]).collect());
        }
        if bits & 4 != 0 {
            let vs = pick(&mut rng, 3).into_iter().map(|i| values[i].to_string());
            f.tags.insert('t', vs.collect());
        }
        if bits & 8 != 0 {
            f.since = Some(BASE + u64::from(rng.next_u32() % 12));
        }
        if bits & 16 != 0 {
            f.until = Some(BASE + u64::from(rng.next_u32() % 12));
        }
        if bits & 32 != 0 {
            let ids = pick(&mut rng, events.len())
                .into_iter()
                .map(|i| events[i].id);
            f.ids = Some(ids.collect());
        }
        let at = if bits & 64 != 0 {
            Timestamp::from_secs(BASE + 50)
        } else {
            now
        };
        let want = memory.query(&f, None, usize::MAX, at).expect("memory");
        assert_eq!(
            pgs.query(&f, None, usize::MAX, at).expect("pg"),
            want,
            "round {round}: {f:?}"
        );
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = pgs.query(&f, after.as_ref(), 3, at).expect("page");
            paged.extend(page.iter().cloned());
            after = page.last().map(Cursor::at);
            if page.len() < 3 {
                break;
            }
        }
        assert_eq!(paged, want, "round {round} paged: {f:?}");
        let items: Vec<_> = want.iter().map(|e| (e.created_at, e.id)).collect();
        assert_eq!(pgs.items(&f, usize::MAX, at).expect("items"), items);
        let both = [f, Filter::default()];
        assert_eq!(
            pgs.count(&both[..1], at).expect("count"),
            want.len() as u64,
            "round {round} count"
        );
        assert_eq!(
            pgs.count(&both, at).expect("count"),
            memory.count(&both, at).expect("count")
        );
    }
    // Expired events are swept, and only those.
    let expired = events
        .iter()
        .filter(|e| memory.contains(&e.id) && e.tag("expiration").is_some())
        .count() as u64;
    assert!(expired > 0);
    let held = pgs.len().expect("len");
    assert_eq!(
        pgs.sweep_expired(Timestamp::from_secs(BASE + 50), 1_000)
            .expect("sweep"),
        expired
    );
    assert_eq!(pgs.len().expect("len"), held - expired);
}

/// Writers of one author in several threads, each with its own connection (as several processes
/// have): versions of one replaceable event and of one addressable event, deletion requests and
/// the events they name all racing. However they interleave, one version of each address is
/// left, the one the rules pick; nothing a stored deletion request names is left.
#[test]
fn racing_writers_on_several_connections_leave_one_winner() {
    let Some(pg) = Postgres::start("racing_writers_on_several_connections_leave_one_winner") else {
        return;
    };
    let url = pg.database();
    let provider = weft_drivers::server_provider();
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(5);
    let key = generate_secp256k1(provider, &mut rng);
    for round in 0..3u64 {
        let at = BASE + round * 100;
        let mut batches: Vec<Vec<Event>> = vec![Vec::new(); 4];
        for i in 0..40u64 {
            // Ten versions share each created_at, so ties fall to the lowest id.
            let profile = sign(&key, 0, at + i % 4, vec![], &i.to_string(), &mut rng);
            let post = sign(
                &key,
                30_023,
                at + i % 4,
                vec![vec!["d".into(), format!("post{round}")]],
                &i.to_string(),
                &mut rng,
            );
            batches[(i % 4) as usize].extend([profile, post]);
        }
        let notes: Vec<Event> = (0..8)
            .map(|i| sign(&key, 1, at, vec![], &format!("note {i}"), &mut rng))
            .collect();
        let deletion = sign(
            &key,
            DELETION_KIND,
            at + 10,
            notes
                .iter()
                .step_by(2)
                .map(|n| vec!["e".to_string(), n.id_hex()])
                .collect(),
            "",
            &mut rng,
        );
        for (i, n) in notes.iter().enumerate() {
            batches[i % 4].push(n.clone());
        }
        batches[1].insert(3, deletion.clone());
        let all: Vec<Event> = batches.concat();
        let threads: Vec<_> = batches
            .into_iter()
            .map(|batch| {
                let url = url.clone();
                std::thread::spawn(move || {
                    let mut s = store(&url);
                    let now = Timestamp::from_secs(BASE + 1_000);
                    for e in &batch {
                        s.write(e, now).expect("write");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a writer");
        }
        let mut check = store(&url);
        let now = Timestamp::from_secs(BASE + 1_000);
        for kind in [0u16, 30_023] {
            let versions: Vec<&Event> = all.iter().filter(|e| e.kind == kind).collect();
            let winner = versions
                .iter()
                .max_by_key(|e| (e.created_at, std::cmp::Reverse(e.id)))
                .expect("versions");
            let f = Filter {
                kinds: Some(vec![kind]),
                tags: if kind == 0 {
                    Default::default()
                } else {
                    [('d', vec![format!("post{round}")])].into()
                },
                ..Filter::default()
            };
            let held = check.query(&f, None, usize::MAX, now).expect("query");
            assert_eq!(held, vec![(*winner).clone()], "round {round} kind {kind}");
        }
        let notes_held: Vec<_> = check
            .query(
                &Filter {
                    kinds: Some(vec![1]),
                    since: Some(at),
                    until: Some(at),
                    ..Filter::default()
                },
                None,
                usize::MAX,
                now,
            )
            .expect("query")
            .into_iter()
            .map(|e| e.id)
            .collect();
        for (i, n) in notes.iter().enumerate() {
            assert_eq!(
                notes_held.contains(&n.id),
                i % 2 == 1,
                "round {round}: note {i} (deleted ones are gone whatever the order)"
            );
        }
    }
}

#[test]
fn the_schema_is_made_once_and_a_newer_one_is_refused() {
    let Some(pg) = Postgres::start("the_schema_is_made_once_and_a_newer_one_is_refused") else {
        return;
    };
    let url = pg.database();
    // Processes starting together: each migration applied once.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || drop(store(&url)))
        })
        .collect();
    for t in threads {
        t.join().expect("a starter");
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let versions: Vec<i32> = c
        .query(
            "SELECT version FROM weft_nostr_schema ORDER BY version",
            &[],
        )
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    c.execute(
        "INSERT INTO weft_nostr_schema (version) VALUES ($1)",
        &[&(SCHEMA_VERSION + 1)],
    )
    .expect("insert");
    let e = PgStore::connect(&url, weft_drivers::server_provider(), new_origin()).unwrap_err();
    assert!(e.0.contains("newer"), "{}", e.0);
}

// ---- two `weft nostr serve` processes on one database ----

const WAIT: Duration = Duration::from_secs(20);

type Ws = WebSocket<TcpStream>;

fn serve(url: &str, name: &str) -> (Running, SocketAddr) {
    let addr = free_port();
    let data = temp_dir(name).join("nostr");
    let mut cmd = Command::new(WEFT);
    cmd.args([
        "nostr",
        "serve",
        "--listen",
        &addr.to_string(),
        "--data-dir",
    ])
    .arg(&data)
    .args(["--database", url]);
    let server = Running::spawn(cmd);
    server.wait_for("listening on ws");
    (server, addr)
}

fn connect(addr: SocketAddr) -> Ws {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let (mut ws, _) = tungstenite::client::client(format!("ws://{addr}/"), stream).unwrap();
    assert_eq!(next(&mut ws)[0], "AUTH");
    ws
}

fn next(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("not a text frame: {other:?}"),
        }
    }
}

/// The next frame within `wait`, or `None`.
fn next_within(ws: &mut Ws, wait: Duration) -> Option<Value> {
    ws.get_ref().set_read_timeout(Some(wait)).unwrap();
    let got = match ws.read() {
        Ok(Message::Text(t)) => Some(serde_json::from_str(t.as_str()).unwrap()),
        Ok(other) => panic!("not a text frame: {other:?}"),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("{e}"),
    };
    ws.get_ref().set_read_timeout(Some(WAIT)).unwrap();
    got
}

fn send(ws: &mut Ws, frame: &Value) {
    ws.send(Message::Text(frame.to_string().into())).unwrap();
}

fn publish(ws: &mut Ws, event: &Event) -> Value {
    send(ws, &json!(["EVENT", event.to_value()]));
    let ok = next(ws);
    assert_eq!(
        (&ok[0], &ok[1]),
        (&json!("OK"), &json!(event.id_hex())),
        "{ok}"
    );
    ok
}

/// Opens a subscription and returns the stored events before its EOSE.
fn req(ws: &mut Ws, sub: &str, filter: Value) -> Vec<Value> {
    send(ws, &json!(["REQ", sub, filter]));
    let mut events = Vec::new();
    loop {
        let m = next(ws);
        match m[0].as_str() {
            Some("EVENT") => events.push(m[2].clone()),
            Some("EOSE") => return events,
            _ => panic!("unexpected {m}"),
        }
    }
}

fn now_event(
    key: &Secp256k1Secret,
    kind: u16,
    tags: Vec<Vec<String>>,
    rng: &mut chacha20::ChaCha20Rng,
) -> Event {
    sign(
        key,
        kind,
        weft_drivers::now().as_secs(),
        tags,
        "from weft",
        rng,
    )
}

#[test]
fn two_processes_on_one_database_serve_one_relay() {
    let Some(pg) = Postgres::start("two_processes_on_one_database_serve_one_relay") else {
        return;
    };
    let url = pg.database();
    let (_a, a) = serve(&url, "pg-two-a");
    let (_b, b) = serve(&url, "pg-two-b");
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(9);
    let key = generate_secp256k1(weft_drivers::server_provider(), &mut rng);
    let mut on_a = connect(a);
    let mut watcher_a = connect(a);
    let mut on_b = connect(b);
    assert!(req(&mut on_b, "live", json!({"kinds": [1, 20001]})).is_empty());
    assert!(req(&mut watcher_a, "live", json!({"kinds": [1, 20001]})).is_empty());

    let note = now_event(&key, 1, vec![], &mut rng);
    assert_eq!(publish(&mut on_a, &note)[2], true);
    // On B through NOTIFY; on A from the write itself; once each.
    for (ws, name) in [(&mut on_b, "b"), (&mut watcher_a, "a")] {
        let live = next(ws);
        assert_eq!(
            (&live[0], &live[2]["id"]),
            (&json!("EVENT"), &json!(note.id_hex())),
            "{name}: {live}"
        );
        assert_eq!(
            next_within(ws, Duration::from_millis(1_500)),
            None,
            "{name}: once"
        );
    }
    // Stored once, seen by both: a duplicate through B is no new event anywhere.
    let again = publish(&mut on_b, &note);
    assert!(
        again[3].as_str().unwrap().starts_with("duplicate:"),
        "{again}"
    );
    assert_eq!(
        req(&mut on_b, "stored", json!({"ids": [note.id_hex()]})).len(),
        1
    );
    // An ephemeral event crosses too, never stored.
    let ping = now_event(&key, 20_001, vec![], &mut rng);
    assert_eq!(publish(&mut on_b, &ping)[2], true);
    let mut watcher_b_side = next(&mut watcher_a);
    assert_eq!(watcher_b_side[2]["id"], ping.id_hex(), "{watcher_b_side}");
    watcher_b_side = next(&mut on_b);
    assert_eq!(watcher_b_side[2]["id"], ping.id_hex(), "{watcher_b_side}");
    assert!(req(&mut on_a, "eph", json!({"kinds": [20001]})).is_empty());
    // COUNT through either process counts the one database.
    send(&mut on_a, &json!(["COUNT", "c", {"kinds": [1]}]));
    assert_eq!(next(&mut on_a), json!(["COUNT", "c", {"count": 1}]));
}

/// Competing versions of one replaceable event published at once through both processes: one
/// winner is stored, whichever way the writes interleave.
#[test]
fn competing_replaceable_events_through_two_processes_leave_one_winner() {
    let Some(pg) =
        Postgres::start("competing_replaceable_events_through_two_processes_leave_one_winner")
    else {
        return;
    };
    let url = pg.database();
    let (_a, a) = serve(&url, "pg-race-a");
    let (_b, b) = serve(&url, "pg-race-b");
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(10);
    let key = generate_secp256k1(weft_drivers::server_provider(), &mut rng);
    let at = weft_drivers::now().as_secs() - 100;
    let versions: Vec<Event> = (0..40u64)
        .map(|i| sign(&key, 10_002, at + i % 5, vec![], &i.to_string(), &mut rng))
        .collect();
    let winner = versions
        .iter()
        .max_by_key(|e| (e.created_at, std::cmp::Reverse(e.id)))
        .unwrap()
        .clone();
    let threads: Vec<_> = [a, b, a, b]
        .into_iter()
        .enumerate()
        .map(|(t, addr)| {
            let mine: Vec<Event> = versions.iter().skip(t).step_by(4).cloned().collect();
            std::thread::spawn(move || {
                let mut ws = connect(addr);
                // All sent before any answer is read, so the processes' writes overlap.
                for e in &mine {
                    send(&mut ws, &json!(["EVENT", e.to_value()]));
                }
                // Each is stored, or refused as older than the version held.
                for _ in &mine {
                    let ok = next(&mut ws);
                    assert_eq!(ok[0], "OK", "{ok}");
                    let superseded = ok[2] == false
                        && ok[3].as_str().is_some_and(|m| m.contains("newer version"));
                    assert!(ok[2] == true || superseded, "{ok}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a publisher");
    }
    for addr in [a, b] {
        let mut ws = connect(addr);
        let held = req(&mut ws, "r", json!({"kinds": [10002]}));
        assert_eq!(held, vec![winner.to_value()]);
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows: i64 = c
        .query_one(
            "SELECT count(*) FROM weft_nostr_events WHERE kind = 10002",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[test]
fn an_acknowledged_event_survives_kill_9() {
    let Some(pg) = Postgres::start("an_acknowledged_event_survives_kill_9") else {
        return;
    };
    let url = pg.database();
    let (mut a, addr) = serve(&url, "pg-kill-a");
    let mut rng = chacha20::ChaCha20Rng::seed_from_u64(11);
    let key = generate_secp256k1(weft_drivers::server_provider(), &mut rng);
    let mut ws = connect(addr);
    let at = weft_drivers::now().as_secs();
    let events: Vec<Event> = (0..20)
        .map(|i| sign(&key, 1, at, vec![], &format!("note {i}"), &mut rng))
        .collect();
    for e in &events {
        send(&mut ws, &json!(["EVENT", e.to_value()]));
    }
    for _ in &events {
        assert_eq!(next(&mut ws)[2], true);
    }
    // SIGKILL, straight after the last ack: no shutdown path runs.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let (_b, addr) = serve(&url, "pg-kill-b");
    let mut ws = connect(addr);
    let held = req(&mut ws, "all", json!({"kinds": [1]}));
    let mut ids: Vec<Value> = held.iter().map(|e| e["id"].clone()).collect();
    ids.sort_by_key(|v| v.to_string());
    let mut want: Vec<Value> = events.iter().map(|e| json!(e.id_hex())).collect();
    want.sort_by_key(|v| v.to_string());
    assert_eq!(ids, want);
}

#[test]
fn a_bad_database_is_refused_with_a_clear_error() {
    // A URL that is none: exit 2, before anything is opened.
    let out = Command::new(WEFT)
        .args([
            "nostr",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "postgres://a:b@/x?sslmode=sideways",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--database: not a PostgreSQL URL"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("a:b"),
        "the password is never printed: {stderr}"
    );
    // A database nobody serves: exit 1, saying so.
    let port = free_port().port();
    let started = Instant::now();
    let out = Command::new(WEFT)
        .args(["nostr", "serve", "--listen", "127.0.0.1:0", "--database"])
        .arg(format!(
            "postgres://weft:secret@127.0.0.1:{port}/none?connect_timeout=5"
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to the database"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
}
