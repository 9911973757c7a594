//! The service's store: webhook deliveries and recorded commands, in SQLite (one
//! file, the default) or PostgreSQL (several replicas), through one SQL dialect
//! both accept. A delivery is stored before GitHub gets its 2xx, then processed
//! from here: claimed with a lease, so a crash mid-processing hands it to the next
//! worker after the lease instead of losing it or running it twice at once.

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::time::Duration;

/// Versioned schema steps, applied once each, in order, in a transaction.
const MIGRATIONS: &[(i64, &str)] = &[(
    1,
    "CREATE TABLE IF NOT EXISTS deliveries (
        id TEXT PRIMARY KEY,
        event TEXT NOT NULL,
        dedupe TEXT UNIQUE,
        installation BIGINT,
        payload TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        lease_until BIGINT,
        error TEXT
    );
    CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (status, received_at);
    CREATE TABLE IF NOT EXISTS commands (
        id TEXT PRIMARY KEY,
        repo TEXT NOT NULL,
        issue BIGINT NOT NULL,
        login TEXT NOT NULL,
        command TEXT NOT NULL,
        argument TEXT,
        received_at BIGINT NOT NULL
    );",
)];

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
}

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
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl SqlStore {
    /// `sqlite://path?mode=rwc`, `sqlite::memory:` or `postgres://…`.
    pub async fn connect(url: &str) -> Result<SqlStore, SqlError> {
        sqlx::any::install_default_drivers();
        let memory = url.contains(":memory:");
        let sqlite = url.starts_with("sqlite:");
        let pool = AnyPoolOptions::new()
            // One connection keeps an in-memory SQLite database alive and shared.
            .max_connections(if memory { 1 } else { 8 })
            .min_connections(if memory { 1 } else { 0 })
            .idle_timeout(if memory {
                None
            } else {
                Some(Duration::from_secs(600))
            })
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        use sqlx::Executor;
                        // WAL: one fsync per commit and readers never block the
                        // writer; FULL keeps a stored delivery safe from power loss.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = FULL").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        let store = SqlStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), SqlError> {
        sqlx::query("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)")
            .execute(&self.pool)
            .await?;
        for (version, sql) in MIGRATIONS {
            let mut tx = self.pool.begin().await?;
            let done: Option<AnyRow> =
                sqlx::query("SELECT version FROM schema_migrations WHERE version = $1")
                    .bind(*version)
                    .fetch_optional(&mut *tx)
                    .await?;
            if done.is_none() {
                for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                    sqlx::query(stmt).execute(&mut *tx).await?;
                }
                sqlx::query("INSERT INTO schema_migrations (version) VALUES ($1)")
                    .bind(*version)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Stores a delivery durably. `dedupe` names the thing it is about (a comment
    /// id), so the same comment through two hooks is stored once.
    pub async fn intake(
        &self,
        id: &str,
        event: &str,
        dedupe: Option<&str>,
        installation: Option<i64>,
        payload: &str,
    ) -> Result<Intake, SqlError> {
        let r = sqlx::query("INSERT INTO deliveries (id, event, dedupe, installation, payload, received_at, status) VALUES ($1, $2, $3, $4, $5, $6, 'pending') ON CONFLICT DO NOTHING")
            .bind(id)
            .bind(event)
            .bind(dedupe)
            .bind(installation)
            .bind(payload)
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(if r.rows_affected() == 1 {
            Intake::Stored
        } else {
            Intake::Duplicate
        })
    }

    /// Takes the oldest delivery that is pending, or whose lease ran out.
    pub async fn claim(&self, lease: Duration) -> Result<Option<Claimed>, SqlError> {
        let now = now_ms();
        let row = sqlx::query(
            "UPDATE deliveries SET status = 'processing', lease_until = $1, attempts = attempts + 1
             WHERE id = (SELECT id FROM deliveries WHERE status = 'pending' OR (status = 'processing' AND lease_until < $2) ORDER BY received_at, id LIMIT 1)
               AND (status = 'pending' OR lease_until < $2)
             RETURNING id, event, installation, payload, attempts",
        )
        .bind(now + lease.as_millis() as i64)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| Claimed {
            id: r.get("id"),
            event: r.get("event"),
            installation: r.try_get("installation").ok(),
            payload: r.get("payload"),
            attempts: r.try_get::<i64, _>("attempts").unwrap_or(1),
        }))
    }

    pub async fn finish(&self, id: &str, error: Option<&str>) -> Result<(), SqlError> {
        sqlx::query(
            "UPDATE deliveries SET status = $1, lease_until = NULL, error = $2 WHERE id = $3",
        )
        .bind(if error.is_some() { "failed" } else { "done" })
        .bind(error)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Puts a delivery back to be retried after `delay` (a transient failure).
    pub async fn retry_later(
        &self,
        id: &str,
        delay: Duration,
        error: &str,
    ) -> Result<(), SqlError> {
        sqlx::query("UPDATE deliveries SET status = 'processing', lease_until = $1, error = $2 WHERE id = $3")
            .bind(now_ms() + delay.as_millis() as i64)
            .bind(error)
            .bind(id)
            .execute(&self.pool)
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
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn commands(&self) -> Result<Vec<(String, String, Option<String>)>, SqlError> {
        let rows =
            sqlx::query("SELECT login, command, argument FROM commands ORDER BY received_at, id")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("login"), r.get("command"), r.try_get("argument").ok()))
            .collect())
    }

    pub async fn counts(&self) -> Result<(i64, i64), SqlError> {
        let r = sqlx::query("SELECT COUNT(*) AS total, SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END) AS done FROM deliveries").fetch_one(&self.pool).await?;
        Ok((
            r.try_get("total").unwrap_or(0),
            r.try_get("done").unwrap_or(0),
        ))
    }
}
