//! Operations and their logs: the row each operation run from GitHub keeps,
//! the append-only decision log with its effects (the drive loop's outbox),
//! and leases that keep two replicas from driving one operation at once.

use super::{now_ms, SqlError, SqlStore};
use crate::drive::{EffectKey, Entry, Loaded, Outbox};
use crate::engine::replay::{Cause, Recorded};
use crate::engine::{Effect, Event};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::time::Duration;

/// The last decision's sequence number of an operation (0: none yet).
pub(super) const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) AS last FROM op_log WHERE op = $1";

/// The columns `operation_row` reads, for every query that returns operations.
macro_rules! operation_select {
    () => {
        "SELECT id, repo, issue, installation, active, status_comment, context FROM operations"
    };
}

/// One operation run from GitHub, as the service records it.
#[derive(Debug, Clone)]
pub struct OperationRow {
    pub id: String,
    pub repo: String,
    pub issue: i64,
    pub installation: i64,
    pub active: bool,
    pub status_comment: Option<i64>,
    /// The adapter's fixed facts (JSON): workflow file, branches, merge mode.
    pub context: String,
}

/// An operation as the log holds it.
#[derive(Debug, Clone, Default)]
pub struct LoadedOperation {
    /// The last decision's sequence number (0: none yet).
    pub seq: i64,
    pub events: Vec<Event>,
    pub pending: Vec<Entry>,
}

impl SqlStore {
    /// Records a new operation; false if one with this id exists (a retried start).
    pub async fn create_operation(&self, op: &OperationRow) -> Result<bool, SqlError> {
        let r = sqlx::query("INSERT INTO operations (id, repo, issue, installation, active, status_comment, context, created_at) VALUES ($1, $2, $3, $4, 1, NULL, $5, $6) ON CONFLICT DO NOTHING")
            .bind(&op.id)
            .bind(&op.repo)
            .bind(op.issue)
            .bind(op.installation)
            .bind(&op.context)
            .bind(now_ms())
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    fn operation_row(r: &AnyRow) -> OperationRow {
        OperationRow {
            id: r.get("id"),
            repo: r.get("repo"),
            issue: r.get("issue"),
            installation: r.get("installation"),
            active: r
                .try_get::<i32, _>("active")
                .map(|a| a != 0)
                .unwrap_or(true),
            status_comment: r.try_get("status_comment").ok(),
            context: r.get("context"),
        }
    }

    /// Operations still running (or every one), oldest first.
    pub async fn operations(&self, active_only: bool) -> Result<Vec<OperationRow>, SqlError> {
        let rows = sqlx::query(concat!(
            operation_select!(),
            " WHERE active = 1 OR $1 = 0 ORDER BY created_at, id"
        ))
        .bind(active_only as i32)
        .fetch_all(&mut *self.connection().await?)
        .await?;
        Ok(rows.iter().map(Self::operation_row).collect())
    }

    pub async fn operation(&self, id: &str) -> Result<Option<OperationRow>, SqlError> {
        let row = sqlx::query(concat!(operation_select!(), " WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *self.connection().await?)
            .await?;
        Ok(row.as_ref().map(Self::operation_row))
    }

    /// The ids of a repository's latest `n` operations, newest first.
    pub async fn latest_operations(&self, repo: &str, n: usize) -> Result<Vec<String>, SqlError> {
        let rows = sqlx::query(
            "SELECT id FROM operations WHERE repo = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(repo)
        .bind(n as i64)
        .fetch_all(&mut *self.connection().await?)
        .await?;
        Ok(rows.iter().map(|r| r.get("id")).collect())
    }

    /// The latest operation started on an issue.
    pub async fn operation_on(
        &self,
        repo: &str,
        issue: i64,
    ) -> Result<Option<OperationRow>, SqlError> {
        let row = sqlx::query(concat!(
            operation_select!(),
            " WHERE repo = $1 AND issue = $2 ORDER BY created_at DESC, id DESC LIMIT 1"
        ))
        .bind(repo)
        .bind(issue)
        .fetch_optional(&mut *self.connection().await?)
        .await?;
        Ok(row.as_ref().map(Self::operation_row))
    }

    pub async fn set_active(&self, op: &str, active: bool) -> Result<(), SqlError> {
        sqlx::query("UPDATE operations SET active = $1 WHERE id = $2")
            .bind(active as i32)
            .bind(op)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    pub async fn set_status_comment(&self, op: &str, comment: i64) -> Result<(), SqlError> {
        sqlx::query("UPDATE operations SET status_comment = $1 WHERE id = $2")
            .bind(comment)
            .bind(op)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// Events first, effects second: one decision's events and the effects they
    /// imply, in one transaction. Returns the decision's sequence number and the
    /// effects with their outbox keys.
    pub async fn append(
        &self,
        op: &str,
        events: &[Event],
        effects: &[Effect],
        cause: Option<&Cause>,
    ) -> Result<(i64, Vec<Entry>), SqlError> {
        let mut conn = self.connection().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let row = sqlx::query(LAST_SEQ).bind(op).fetch_one(&mut *tx).await?;
        let seq: i64 = row.try_get::<i64, _>("last").unwrap_or(0) + 1;
        sqlx::query("INSERT INTO op_log (op, seq, events, cause) VALUES ($1, $2, $3, $4)")
            .bind(op)
            .bind(seq)
            .bind(serde_json::to_string(events)?)
            .bind(cause.map(serde_json::to_string).transpose()?)
            .execute(&mut *tx)
            .await?;
        let mut out = Vec::new();
        for (idx, e) in effects.iter().enumerate() {
            sqlx::query("INSERT INTO op_effects (op, seq, idx, effect) VALUES ($1, $2, $3, $4)")
                .bind(op)
                .bind(seq)
                .bind(idx as i64)
                .bind(serde_json::to_string(e)?)
                .execute(&mut *tx)
                .await?;
            out.push(Entry {
                key: EffectKey {
                    seq: seq as u64,
                    index: idx as u32,
                },
                effect: e.clone(),
            });
        }
        tx.commit().await?;
        Ok((seq, out))
    }

    /// Takes (or renews) the right to act on an operation for `lease`: one
    /// replica at a time carries out an operation's effects.
    pub async fn lease_operation(
        &self,
        op: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<bool, SqlError> {
        let now = now_ms();
        let r = sqlx::query("UPDATE operations SET owner = $1, lease_until = $2 WHERE id = $3 AND (owner IS NULL OR owner = $1 OR lease_until < $4)")
            .bind(owner)
            .bind(now + lease.as_millis() as i64)
            .bind(op)
            .bind(now)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Active operations another owner leased and let lapse: that replica
    /// stopped or died mid-way, and their webhooks may have died with it,
    /// so the reconciliation timer takes them over (oldest first).
    pub async fn lapsed_operations(&self, owner: &str) -> Result<Vec<OperationRow>, SqlError> {
        let rows = sqlx::query(concat!(
            operation_select!(),
            " WHERE active = 1 AND owner IS NOT NULL AND owner <> $1 AND lease_until < $2 ORDER BY created_at, id"
        ))
        .bind(owner)
        .bind(now_ms())
        .fetch_all(&mut *self.connection().await?)
        .await?;
        Ok(rows.iter().map(Self::operation_row).collect())
    }

    /// Gives up the lease on an operation this owner holds: an idle one
    /// (waiting for a person) is no lapsed lease for another replica to
    /// take over.
    pub async fn release_operation(&self, op: &str, owner: &str) -> Result<(), SqlError> {
        sqlx::query(
            "UPDATE operations SET owner = NULL, lease_until = 0 WHERE id = $1 AND owner = $2",
        )
        .bind(op)
        .bind(owner)
        .execute(&mut *self.connection().await?)
        .await?;
        Ok(())
    }

    /// The sequence number of the operation's last decision (0: none).
    pub async fn last_seq(&self, op: &str) -> Result<i64, SqlError> {
        let row = sqlx::query(LAST_SEQ)
            .bind(op)
            .fetch_one(&mut *self.connection().await?)
            .await?;
        Ok(row.try_get::<i64, _>("last").unwrap_or(0))
    }

    /// The operation's events in order, its effects not yet done, and the
    /// sequence number of the last decision read — from the same rows.
    pub async fn load_operation(&self, op: &str) -> Result<LoadedOperation, SqlError> {
        let rows = sqlx::query("SELECT seq, events FROM op_log WHERE op = $1 ORDER BY seq")
            .bind(op)
            .fetch_all(&mut *self.connection().await?)
            .await?;
        let mut loaded = LoadedOperation::default();
        for r in rows {
            let batch: Vec<Event> = serde_json::from_str(&r.get::<String, _>("events"))?;
            loaded.events.extend(batch);
            loaded.seq = r.get("seq");
        }
        let rows = sqlx::query(
            "SELECT seq, idx, effect FROM op_effects WHERE op = $1 AND done = 0 ORDER BY seq, idx",
        )
        .bind(op)
        .fetch_all(&mut *self.connection().await?)
        .await?;
        for r in rows {
            loaded.pending.push(Entry {
                key: EffectKey {
                    seq: r.get::<i64, _>("seq") as u64,
                    index: r.get::<i64, _>("idx") as u32,
                },
                effect: serde_json::from_str(&r.get::<String, _>("effect"))?,
            });
        }
        Ok(loaded)
    }

    /// Every operation with a log, by id.
    pub async fn logged_operations(&self) -> Result<Vec<String>, SqlError> {
        let rows = sqlx::query("SELECT DISTINCT op FROM op_log ORDER BY op")
            .fetch_all(&mut *self.connection().await?)
            .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>("op")).collect())
    }

    /// The operation's records as replay reads them: each decision's
    /// events and what it was decided from.
    pub async fn records(&self, op: &str) -> Result<Vec<Recorded>, SqlError> {
        let rows = sqlx::query("SELECT seq, events, cause FROM op_log WHERE op = $1 ORDER BY seq")
            .bind(op)
            .fetch_all(&mut *self.connection().await?)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let cause: Option<String> = r.try_get("cause").ok().flatten();
            out.push(Recorded {
                seq: r.get::<i64, _>("seq") as u64,
                cause: cause.as_deref().map(serde_json::from_str).transpose()?,
                events: serde_json::from_str(&r.get::<String, _>("events"))?,
            });
        }
        Ok(out)
    }

    pub async fn effect_done(&self, op: &str, key: EffectKey) -> Result<(), SqlError> {
        sqlx::query("UPDATE op_effects SET done = 1 WHERE op = $1 AND seq = $2 AND idx = $3")
            .bind(op)
            .bind(key.seq as i64)
            .bind(key.index as i64)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }
}

/// One operation's log in the store, as the drive loop's outbox. `seq` is the
/// last decision this replica knows of: when the log has moved past it (another
/// replica acted), the operation is reloaded before acting.
pub struct SqlOutbox {
    store: SqlStore,
    op: String,
    pub seq: i64,
}

impl SqlOutbox {
    pub fn new(store: SqlStore, op: String, seq: i64) -> SqlOutbox {
        SqlOutbox { store, op, seq }
    }
}

impl Outbox for SqlOutbox {
    type Error = SqlError;

    async fn append(
        &mut self,
        events: &[Event],
        effects: &[Effect],
        cause: &Cause,
    ) -> Result<Vec<Entry>, SqlError> {
        let (seq, entries) = self
            .store
            .append(&self.op, events, effects, Some(cause))
            .await?;
        self.seq = seq;
        Ok(entries)
    }

    async fn done(&mut self, key: EffectKey) -> Result<(), SqlError> {
        self.store.effect_done(&self.op, key).await
    }

    async fn load(&mut self) -> Result<Loaded, SqlError> {
        let loaded = self.store.load_operation(&self.op).await?;
        self.seq = loaded.seq;
        Ok(Loaded {
            state: crate::engine::OperationState::replay(&loaded.events),
            events: loaded.events.len(),
            pending: loaded.pending,
        })
    }
}
