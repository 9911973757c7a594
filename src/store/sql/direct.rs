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

use super::intake::{BatchWrites, Row, Taken, HANDOFF_MAX_BODY};
use super::{Claimed, SqlError};
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
/// The deliveries a claim takes first (as `SqlStore::claim_many` does: the
/// pending and those whose lease ran out, in line), with their bodies' sizes.
const OLDEST_DUE: &str = "SELECT due.id, octet_length(p.payload) FROM (
        SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'pending' ORDER BY received_at, id LIMIT ?1)
        UNION ALL
        SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'processing' AND lease_until < ?2 ORDER BY received_at, id LIMIT ?1)
    ) AS due JOIN delivery_payloads p ON p.id = due.id
    ORDER BY due.received_at, due.id LIMIT ?1";
const CLAIM_ONE: &str = "UPDATE deliveries SET status = 'processing', lease_until = ?1, attempts = attempts + 1, holder = ?2, incarnation = ?3 WHERE id = ?4 AND (status = 'pending' OR lease_until < ?5) RETURNING event, installation, attempts, received_at";
const BODY: &str = "SELECT payload FROM delivery_payloads WHERE id = ?1";

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

    /// Makes `w`'s writes in one transaction, with its claim; the ids of the
    /// deliveries it stored, and what it claimed. Blocks for the commit, its
    /// fsync included: call it where blocking is allowed.
    pub(super) fn write(&self, w: &BatchWrites<'_>) -> Result<(HashSet<String>, Taken), SqlError> {
        let mut conn = self.conn.locked();
        // Rolled back when dropped uncommitted, on an error or a panic.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut stored = HashSet::with_capacity(w.deliveries.len());
        {
            let mut insert = tx.prepare_cached(INSERT_DELIVERY)?;
            let mut body = tx.prepare_cached(INSERT_BODY)?;
            for (d, &how) in w.deliveries.iter().zip(&w.rows) {
                let direct = how == Row::Handed;
                let held = w.holder.filter(|_| direct);
                let n = insert.execute(params![
                    d.id,
                    d.event,
                    d.dedupe,
                    d.installation,
                    w.now,
                    how.status(),
                    how.attempts(),
                    if direct { w.lease_until } else { None },
                    held.map(|h| h.replica.as_str()),
                    held.map(|h| h.run.as_str()),
                ])?;
                // Not stored: its id or its dedupe key is there already (its
                // body with it, from the commit that stored it).
                if n == 1 {
                    if how.keeps_body() {
                        body.execute(params![d.id, d.payload])?;
                    }
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
        let taken = if w.claim > 0 {
            claim_oldest(&tx, w, &stored)?
        } else {
            Taken::default()
        };
        tx.commit()?;
        Ok((stored, taken))
    }
}

/// Claims up to `w.claim` of the deliveries due first — pending, or their
/// lease run out — in order, for the hand-over, stopping before the first
/// whose body is too large to wait in memory (it and those after it are left
/// to the workers' claims, which take them in order). The bodies of deliveries this very commit `stored`
/// are not read back (those of its duplicates are not theirs).
fn claim_oldest(
    tx: &rusqlite::Transaction<'_>,
    w: &BatchWrites<'_>,
    stored: &HashSet<String>,
) -> Result<Taken, SqlError> {
    let oldest: Vec<(String, i64)> = tx
        .prepare_cached(OLDEST_DUE)?
        .query_map(params![w.claim as i64, w.now], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let whole = oldest.len() < w.claim;
    let mut claim = tx.prepare_cached(CLAIM_ONE)?;
    let mut body = tx.prepare_cached(BODY)?;
    let mut claimed = Vec::with_capacity(oldest.len());
    let mut here = std::collections::HashMap::new();
    for d in w.deliveries.iter().filter(|d| stored.contains(&d.id)) {
        // The first of an id is the one stored.
        here.entry(d.id.as_str()).or_insert(d.payload.as_str());
    }
    for (id, size) in oldest {
        if size as usize > HANDOFF_MAX_BODY {
            return Ok(Taken {
                claimed,
                drained: false,
            });
        }
        let (event, installation, attempts, stored_at_ms) = claim.query_row(
            params![
                w.lease_until,
                w.holder.map(|h| h.replica.as_str()),
                w.holder.map(|h| h.run.as_str()),
                id,
                w.now
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let payload = match here.get(id.as_str()) {
            Some(p) => p.to_string(),
            None => body.query_row(params![id], |r| r.get(0))?,
        };
        claimed.push(Claimed {
            id,
            event,
            installation,
            payload,
            attempts,
            stored_at_ms,
        });
    }
    Ok(Taken {
        claimed,
        drained: whole,
    })
}
