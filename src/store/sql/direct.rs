//! Intake's commits on SQLite, made on a connection of their own with
//! statements prepared once and kept.
//!
//! Through sqlx, each commit was a script made anew — its few multi-row
//! statements parsed and planned every time (a third of the SQLite thread's
//! work under load), with a statement journal for each — and its rows came
//! back one message at a time over a channel of fifty, so a commit in
//! progress, its transaction open, waited for the writer's task to be
//! scheduled among every request's. Here a commit is the same writes, row by
//! row, on statements SQLite keeps compiled, run to its end on the calling
//! thread (taken out of the runtime's pool for it).
//!
//! Only one of the two connections writes at a time: this one is used only
//! while the caller holds the pool's one SQLite connection (see
//! `SqlStore::write`), so neither ever waits in SQLite's busy handler, and a
//! transaction on the pool's connection never overlaps one here.

use super::intake::BatchWrites;
use super::SqlError;
use crate::sync::LockExt;
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

const INSERT_DELIVERY: &str = "INSERT INTO deliveries (id, event, dedupe, installation, received_at, status, attempts, lease_until, holder, incarnation) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING";
const INSERT_BODY: &str =
    "INSERT INTO delivery_payloads (id, payload) VALUES (?1, ?2) ON CONFLICT DO NOTHING";
const END_DONE: &str = "UPDATE deliveries SET status = 'done', lease_until = NULL, error = NULL WHERE id = ?1 AND attempts = ?2";
const END_FAILED: &str = "UPDATE deliveries SET status = 'failed', lease_until = NULL, error = ?1 WHERE id = ?2 AND attempts = ?3";

/// The intake's own connection to the store's SQLite file.
#[derive(Clone)]
pub(super) struct DirectWriter {
    conn: Arc<Mutex<Connection>>,
}

impl DirectWriter {
    /// Opens `path` (the database sqlx has opened and migrated) with the
    /// same durability: WAL, an fsync per commit.
    pub(super) fn open(path: &Path) -> Result<DirectWriter, rusqlite::Error> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.set_prepared_statement_cache_capacity(8);
        Ok(DirectWriter {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The file this connection has open as its main database.
    pub(super) fn file(&self) -> Result<String, rusqlite::Error> {
        self.conn.locked().query_row(
            "SELECT file FROM pragma_database_list WHERE name = 'main'",
            [],
            |r| r.get(0),
        )
    }

    /// Makes `w`'s writes in one transaction; the ids of the deliveries it
    /// stored. Blocks for the commit, its fsync included: call it where
    /// blocking is allowed.
    pub(super) fn write(&self, w: &BatchWrites<'_>) -> Result<HashSet<String>, SqlError> {
        let mut conn = self.conn.locked();
        // Rolled back when dropped uncommitted, on an error or a panic.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut stored = HashSet::with_capacity(w.deliveries.len());
        {
            let mut insert = tx.prepare_cached(INSERT_DELIVERY)?;
            let mut body = tx.prepare_cached(INSERT_BODY)?;
            for (i, d) in w.deliveries.iter().enumerate() {
                let direct = i < w.handed;
                let held = w.holder.filter(|_| direct);
                let n = insert.execute(params![
                    d.id,
                    d.event,
                    d.dedupe,
                    d.installation,
                    w.now,
                    if direct { "processing" } else { "pending" },
                    i64::from(direct),
                    if direct { w.lease_until } else { None },
                    held.map(|h| h.replica.as_str()),
                    held.map(|h| h.run.as_str()),
                ])?;
                // Not stored: its id or its dedupe key is there already (its
                // body with it, from the commit that stored it).
                if n == 1 {
                    body.execute(params![d.id, d.payload])?;
                    stored.insert(d.id.clone());
                }
            }
        }
        if !w.done.is_empty() {
            let mut done = tx.prepare_cached(END_DONE)?;
            for (id, attempts) in &w.done {
                done.execute(params![id, attempts])?;
            }
        }
        if !w.failed.is_empty() {
            let mut failed = tx.prepare_cached(END_FAILED)?;
            for (id, attempts, error) in &w.failed {
                failed.execute(params![error, id, attempts])?;
            }
        }
        tx.commit()?;
        Ok(stored)
    }
}
