//! The delivery queue on the store's side: what intake made of a delivery,
//! claims with a lease, renewals, retries, retention, and the commands
//! recorded from comments. Intake's batched writes are in `intake.rs`.

use super::{now_ms, SqlError, SqlStore};
use sqlx::Row;
use std::time::Duration;

/// What intake made of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    Stored,
    /// The same delivery id, or the same comment through another hook.
    Duplicate,
}

#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: String,
    pub event: String,
    pub installation: Option<i64>,
    pub payload: String,
    pub attempts: i64,
    /// When it was stored, in milliseconds since the Unix epoch: how long
    /// it waited for a worker is measured from here.
    pub stored_at_ms: i64,
}

/// The least time a finished delivery is kept. GitHub lets a delivery be
/// redelivered, under its own id, for 3 days (GitHub Enterprise Server: 7);
/// one forgotten sooner would be taken for new and processed again.
pub const MIN_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A claim: the first few pending and the first few whose lease ran out,
/// each read in order from the queue index, then the first few of both.
/// `{skip}`: on PostgreSQL, rows another claim is taking are passed over
/// (without it, two claims racing for the same rows leave one with none of
/// them though many more wait); SQLite runs one write at a time.
macro_rules! claim {
    ($skip:literal) => {
        concat!(
            "UPDATE deliveries SET status = 'processing', lease_until = $1, attempts = attempts + 1, holder = $4, incarnation = $5
             WHERE id IN (SELECT id FROM (
                 SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'pending' ORDER BY received_at, id LIMIT $3",
            $skip,
            ") AS p
                 UNION ALL
                 SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'processing' AND lease_until < $2 ORDER BY received_at, id LIMIT $3",
            $skip,
            ") AS e
                 ORDER BY received_at, id LIMIT $3) AS due)
               AND (status = 'pending' OR lease_until < $2)
             RETURNING id, event, installation, attempts, received_at"
        )
    };
}
pub(super) const CLAIM: &str = claim!("");
const CLAIM_SKIPPING_LOCKED: &str = claim!(" FOR UPDATE SKIP LOCKED");

/// A statement on a list of delivery ids: `template`'s `{ids}` becomes one
/// placeholder for each, and the ids are bound to them.
fn on_ids(
    template: &str,
    ids: impl ExactSizeIterator<Item = String>,
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    let marks: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
    // Only placeholders are made here; the ids are bound.
    let sql = template.replace("{ids}", &marks.join(", "));
    ids.fold(sqlx::query(sqlx::AssertSqlSafe(sql)), |q, id| q.bind(id))
}

impl SqlStore {
    /// Takes the oldest delivery that is pending, or whose lease ran out.
    pub async fn claim(&self, lease: Duration) -> Result<Option<Claimed>, SqlError> {
        Ok(self.claim_many(lease, 1).await?.into_iter().next())
    }

    /// Takes up to `n` of the oldest deliveries that are pending or whose
    /// lease ran out, in one statement, oldest first. A worker that holds
    /// several renews each one's lease before it starts on it.
    pub async fn claim_many(&self, lease: Duration, n: usize) -> Result<Vec<Claimed>, SqlError> {
        let now = now_ms();
        let mut conn = self.connection().await?;
        let rows = sqlx::query(if self.sqlite {
            CLAIM
        } else {
            CLAIM_SKIPPING_LOCKED
        })
        .bind(now + lease.as_millis() as i64)
        .bind(now)
        .bind(n.max(1) as i64)
        .bind(self.holder.as_ref().map(|h| h.replica.as_str()))
        .bind(self.holder.as_ref().map(|h| h.run.as_str()))
        .fetch_all(&mut *conn)
        .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // The bodies, in one statement (they never change once stored).
        let ids = rows.iter().map(|r| r.get::<String, _>("id"));
        let mut bodies: std::collections::HashMap<String, String> = on_ids(
            "SELECT id, payload FROM delivery_payloads WHERE id IN ({ids})",
            ids,
        )
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| (r.get("id"), r.get("payload")))
        .collect();
        let mut claimed: Vec<(i64, Claimed)> = rows
            .iter()
            .map(|r| {
                let id: String = r.get("id");
                let stored_at_ms = r.try_get::<i64, _>("received_at").unwrap_or(0);
                (
                    stored_at_ms,
                    Claimed {
                        payload: bodies.remove(&id).unwrap_or_else(|| {
                            // Stored in the same transaction as the row:
                            // only a damaged database lacks it.
                            tracing::error!(delivery = %id, "the delivery's body is missing from the store");
                            String::new()
                        }),
                        id,
                        event: r.get("event"),
                        installation: r.try_get("installation").ok(),
                        attempts: r.try_get::<i64, _>("attempts").unwrap_or(1),
                        stored_at_ms,
                    },
                )
            })
            .collect();
        // RETURNING gives no order: oldest first, as claimed.
        claimed.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    }

    /// Extends the lease of a delivery this worker still holds. `attempts` (from
    /// the claim) fences it: a delivery another worker has claimed since is not
    /// ours any more, and `false` says so.
    pub async fn renew(&self, id: &str, attempts: i64, lease: Duration) -> Result<bool, SqlError> {
        let r = sqlx::query(
            "UPDATE deliveries SET lease_until = $1 WHERE id = $2 AND status = 'processing' AND attempts = $3",
        )
        .bind(now_ms() + lease.as_millis() as i64)
        .bind(id)
        .bind(attempts)
        .execute(&mut *self.connection().await?)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Puts a delivery back to be retried after `delay` (a transient failure),
    /// held by no replica while it waits: a restart does not cut the delay.
    pub async fn retry_later(
        &self,
        id: &str,
        attempts: i64,
        delay: Duration,
        error: &str,
    ) -> Result<(), SqlError> {
        sqlx::query("UPDATE deliveries SET status = 'processing', lease_until = $1, error = $2, holder = NULL, incarnation = NULL WHERE id = $3 AND attempts = $4")
            .bind(now_ms() + delay.as_millis() as i64)
            .bind(error)
            .bind(id)
            .bind(attempts)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// Records a command for the operations layer; the id makes it idempotent.
    pub async fn record_command(
        &self,
        id: &str,
        repo: &str,
        issue: i64,
        login: &str,
        command: &str,
        argument: Option<&str>,
    ) -> Result<bool, SqlError> {
        let r = sqlx::query("INSERT INTO commands (id, repo, issue, login, command, argument, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING")
            .bind(id)
            .bind(repo)
            .bind(issue)
            .bind(login)
            .bind(command)
            .bind(argument)
            .bind(now_ms())
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn commands(&self) -> Result<Vec<(String, String, Option<String>)>, SqlError> {
        let rows =
            sqlx::query("SELECT login, command, argument FROM commands ORDER BY received_at, id")
                .fetch_all(&mut *self.connection().await?)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("login"), r.get("command"), r.try_get("argument").ok()))
            .collect())
    }

    /// Forgets up to `limit` of the oldest deliveries whose processing ended
    /// (done or failed) and that were received before `before_ms`: their rows
    /// and their bodies, in one transaction. Returns how many. Once forgotten,
    /// a delivery of the same id is no longer a duplicate: see
    /// [`MIN_RETENTION`] for how long they must be kept.
    pub async fn forget_finished(&self, before_ms: i64, limit: usize) -> Result<u64, SqlError> {
        let mut conn = self.connection().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let ids: Vec<String> = sqlx::query(
            // The oldest few done and the oldest few failed, each read in
            // order from the queue index, then the oldest few of both: one
            // ordering over both statuses would sort every old finished
            // delivery for each chunk.
            "DELETE FROM deliveries WHERE id IN (SELECT id FROM (
                 SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'done' AND received_at < $1 ORDER BY received_at, id LIMIT $2) AS d
                 UNION ALL
                 SELECT id, received_at FROM (SELECT id, received_at FROM deliveries WHERE status = 'failed' AND received_at < $1 ORDER BY received_at, id LIMIT $2) AS f
                 ORDER BY received_at, id LIMIT $2) AS old)
             RETURNING id",
        )
        .bind(before_ms)
        .bind(limit.max(1) as i64)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
        if !ids.is_empty() {
            let delete = "DELETE FROM delivery_payloads WHERE id IN ({ids})";
            on_ids(delete, ids.iter().cloned())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }

    /// The body kept for a delivery: `None` for one stored done, whose body
    /// no worker will read (see intake), and for an unknown id.
    pub async fn body(&self, id: &str) -> Result<Option<String>, SqlError> {
        Ok(
            sqlx::query_scalar("SELECT payload FROM delivery_payloads WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *self.connection().await?)
                .await?,
        )
    }

    pub async fn counts(&self) -> Result<(i64, i64), SqlError> {
        let r = sqlx::query("SELECT COUNT(*) AS total, SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END) AS done FROM deliveries").fetch_one(&mut *self.connection().await?).await?;
        Ok((
            r.try_get("total").unwrap_or(0),
            r.try_get("done").unwrap_or(0),
        ))
    }
}
