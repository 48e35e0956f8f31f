//! A throwaway PostgreSQL (Debian's package) started by `scripts/postgres` on a free loopback
//! port in a temporary folder, stopped and removed on drop. Used with `common/nostr_relay.rs`
//! (the script helpers).

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use super::nostr_relay::{free_port, report_skip, run_script};

/// A running cluster; its superuser `weft` is trusted on loopback.
pub(crate) struct Postgres {
    dir: PathBuf,
    /// The URL of its `postgres` database.
    pub(crate) url: String,
    port: u16,
    databases: AtomicU32,
}

impl Postgres {
    /// Starts a cluster for `test`; `None` (after one `SKIP:` line) when PostgreSQL cannot be
    /// installed here.
    pub(crate) fn start(test: &str) -> Option<Self> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("weft-pg-{test}-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        let dir_text = dir.to_str().expect("a UTF-8 path").to_owned();
        match run_script("postgres", &["start", &dir_text, &port.to_string()]) {
            Ok(out) => Some(Self {
                url: out.trim().to_owned(),
                dir,
                port,
                databases: AtomicU32::new(0),
            }),
            Err(reason) => {
                report_skip(test, &reason);
                None
            }
        }
    }

    /// A new, empty database on the cluster; its URL.
    pub(crate) fn database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("weft_test_{n}");
        let mut admin = postgres::Client::connect(&self.url, postgres::NoTls).expect("connect");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        format!("postgres://weft@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = run_script("postgres", &["stop", self.dir.to_str().unwrap_or_default()]);
    }
}
