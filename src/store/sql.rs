//! The service's store: webhook deliveries and recorded commands, in SQLite (one
//! file, the default) or PostgreSQL (several replicas), through one SQL dialect
//! both accept. A delivery is stored before GitHub gets its 2xx, then processed
//! from here: claimed with a lease, so a crash mid-processing hands it to the next
//! worker after the lease instead of losing it or running it twice at once.

use crate::drive::{EffectKey, Entry, Loaded, Outbox};
use crate::engine::{Effect, Event};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::time::Duration;

mod direct;
mod intake;
mod spend;
pub use intake::{Handoff, IntakeQueue, NewDelivery, LOOK_AGAIN};
pub use spend::{Admission, Admitted, Caps};

/// Versioned schema steps, applied once each, in order, in a transaction.
const MIGRATIONS: &[(i64, &str)] = &[
    (
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
    ),
    (
        2,
        "CREATE TABLE IF NOT EXISTS operations (
        id TEXT PRIMARY KEY,
        repo TEXT NOT NULL,
        issue BIGINT NOT NULL,
        installation BIGINT NOT NULL,
        active INTEGER NOT NULL,
        status_comment BIGINT,
        context TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS operations_issue ON operations (repo, issue, created_at);
    CREATE TABLE IF NOT EXISTS op_log (
        op TEXT NOT NULL,
        seq BIGINT NOT NULL,
        events TEXT NOT NULL,
        PRIMARY KEY (op, seq)
    );
    CREATE TABLE IF NOT EXISTS op_effects (
        op TEXT NOT NULL,
        seq BIGINT NOT NULL,
        idx BIGINT NOT NULL,
        effect TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (op, seq, idx)
    );
    CREATE TABLE IF NOT EXISTS op_runs (
        dispatch TEXT PRIMARY KEY,
        op TEXT NOT NULL,
        run_id BIGINT,
        html_url TEXT,
        base_sha TEXT
    );
    CREATE TABLE IF NOT EXISTS op_units (
        op TEXT NOT NULL,
        unit TEXT NOT NULL,
        number BIGINT NOT NULL,
        issue_id BIGINT NOT NULL,
        flags TEXT NOT NULL DEFAULT 'none',
        PRIMARY KEY (op, unit)
    );",
    ),
    (
        3,
        "ALTER TABLE operations ADD COLUMN owner TEXT;
    ALTER TABLE operations ADD COLUMN lease_until BIGINT",
    ),
    (
        4,
        // The head a sprint's pull request was verified at: merged with it, so a
        // branch that moves after verification is refused.
        "ALTER TABLE op_runs ADD COLUMN verified_sha TEXT",
    ),
    (
        5,
        // The sprint's pull request: verification and the merge read it by
        // number (one request) instead of looking it up by branch.
        "ALTER TABLE op_runs ADD COLUMN pull BIGINT",
    ),
    (
        6,
        // Spend across operations (see `spend.rs`): each dispatch once, the
        // line of dispatches waiting for a slot, and one row per installation
        // whose lock makes an admission one transaction at a time.
        "CREATE TABLE IF NOT EXISTS spend (
        dispatch TEXT PRIMARY KEY,
        installation BIGINT NOT NULL,
        repo TEXT NOT NULL,
        op TEXT NOT NULL,
        model TEXT NOT NULL,
        cost BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        ended_ms BIGINT
    );
    CREATE INDEX IF NOT EXISTS spend_window ON spend (installation, at_ms);
    CREATE TABLE IF NOT EXISTS spend_waiting (
        dispatch TEXT PRIMARY KEY,
        installation BIGINT NOT NULL,
        op TEXT NOT NULL,
        since_ms BIGINT NOT NULL,
        seen_ms BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS spend_scopes (
        installation BIGINT PRIMARY KEY,
        version BIGINT NOT NULL
    )",
    ),
    (
        7,
        // A delivery's body in a table of its own, written once: SQLite
        // rewrites a whole row on every update, and the claim, the lease
        // renewals and the end each updated a row holding the body (often
        // 10 KB and more) — three copies of it through the log per delivery.
        "CREATE TABLE IF NOT EXISTS delivery_payloads (
        id TEXT PRIMARY KEY,
        payload TEXT NOT NULL
    );
    INSERT INTO delivery_payloads (id, payload) SELECT id, payload FROM deliveries;
    ALTER TABLE deliveries DROP COLUMN payload",
    ),
    (
        8,
        // The line of pending deliveries in claim order, to the tie-break: a
        // claim reads its first few from the index instead of sorting every
        // pending delivery (a backlog of thousands made each claim a sort of
        // them all).
        "CREATE INDEX IF NOT EXISTS deliveries_queue ON deliveries (status, received_at, id);
    DROP INDEX IF EXISTS deliveries_pending",
    ),
    (
        9,
        // The replica holding a delivery's lease, so a replica that starts
        // again takes back at once what it held when it stopped.
        "ALTER TABLE deliveries ADD COLUMN holder TEXT",
    ),
    (
        10,
        // Which run of the holding replica holds a delivery: a replica can
        // then take back what its earlier runs held at any time, without
        // touching what it holds now (see `SqlStore::release_held`).
        "ALTER TABLE deliveries ADD COLUMN incarnation TEXT",
    ),
];

/// The last decision's sequence number of an operation (0: none yet).
const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) AS last FROM op_log WHERE op = $1";

/// The columns `operation_row` reads, for every query that returns operations.
macro_rules! operation_select {
    () => {
        "SELECT id, repo, issue, installation, active, status_comment, context FROM operations"
    };
}

/// The columns `run_row` reads.
macro_rules! run_select {
    () => {
        "SELECT dispatch, op, run_id, html_url, base_sha, verified_sha, pull FROM op_runs"
    };
}

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored record is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    /// The intake writer has stopped (the service is shutting down).
    #[error("the intake queue is closed")]
    Closed,
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

/// What is known of a dispatch's workflow run.
#[derive(Debug, Clone, Default)]
pub struct RunRow {
    pub dispatch: String,
    pub op: String,
    pub run_id: Option<i64>,
    pub html_url: Option<String>,
    pub base_sha: Option<String>,
    /// The sprint branch's head when the run's result was verified.
    pub verified_sha: Option<String>,
    /// The number of the sprint's pull request.
    pub pull: Option<i64>,
}

/// A work unit's sub-issue.
#[derive(Debug, Clone)]
pub struct UnitIssue {
    pub unit: String,
    pub number: i64,
    pub issue_id: i64,
    /// What has been done to it already: `none`, `closed`, `blocked`.
    pub flags: String,
}

#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    /// SQLite: one connection, whose statements each cross to its own thread
    /// and back; a batch of writes is then sent as one script.
    sqlite: bool,
    /// On a SQLite file: intake's commits, on a connection of their own (see
    /// `direct.rs`).
    direct: Option<direct::DirectWriter>,
    /// Whose claims these are (see [`SqlStore::held_by`]).
    holder: Option<std::sync::Arc<Holder>>,
    /// Tasks waiting for one of the pool's connections — every query but
    /// intake's goes through [`SqlStore::connection`]: the intake's writer,
    /// which keeps its connection from one commit to the next while writes
    /// keep coming, gives it back at once when one is waiting (on SQLite it
    /// is the only one). Counting only the workers' claims and renewals, a
    /// worker's reads while processing — a `workflow_run` looked up among
    /// the service's runs — each waited out the writer's hold: under load,
    /// processing fell to about 75 deliveries a second and stayed there.
    waiting_for_pool: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Who holds a delivery: a replica, and which of its runs.
pub(crate) struct Holder {
    pub(crate) replica: String,
    /// Unique to the process: the time it was made and the process id.
    pub(crate) run: String,
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
const CLAIM: &str = claim!("");
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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The file of a `sqlite:` URL, as written in it.
fn sqlite_path(url: &str) -> &str {
    url.trim_start_matches("sqlite:")
        .trim_start_matches("//")
        .split('?')
        .next()
        .unwrap_or_default()
}

/// The database holds installation ids, comments and operation logs: created
/// readable by its owner only (0600), and narrowed to that if it exists.
fn restrict_sqlite_file(url: &str) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = sqlite_path(url);
    if path.is_empty() {
        return;
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path);
    if created.is_ok() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

impl SqlStore {
    /// `sqlite://path?mode=rwc`, `sqlite::memory:` or `postgres://…`.
    pub async fn connect(url: &str) -> Result<SqlStore, SqlError> {
        sqlx::any::install_default_drivers();
        let memory = url.contains(":memory:");
        let sqlite = url.starts_with("sqlite:");
        if sqlite && !memory {
            restrict_sqlite_file(url);
        }
        let pool = AnyPoolOptions::new()
            // SQLite: one connection. It keeps an in-memory database alive and
            // shared; for a file it queues writers in this process, in order,
            // instead of in SQLite's busy handler, which sleeps up to 100 ms
            // between tries (the intake's p99 at full load went from 181 ms
            // to 15 ms). SQLite has one writer at a time either way.
            .max_connections(if sqlite { 1 } else { 8 })
            .min_connections(if memory { 1 } else { 0 })
            .idle_timeout(if memory {
                None
            } else {
                Some(Duration::from_secs(600))
            })
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings a connection each time it is taken from the pool:
            // on SQLite a trip to its thread and back before every
            // statement, a fifth of each intake commit under load, for a
            // file that cannot hang up. A PostgreSQL connection is still
            // checked: after a restart or a failover the server has closed
            // them all, and each would fail one statement — a delivery
            // refused — before the pool let it go. (Intake's writer keeps
            // its connection from one commit to the next, so it is checked
            // once per run of commits, not per commit.)
            .test_before_acquire(!sqlite)
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
        let mut store = SqlStore {
            pool,
            sqlite,
            direct: None,
            holder: None,
            waiting_for_pool: Default::default(),
        };
        store.migrate(url.starts_with("postgres")).await?;
        if sqlite && !memory {
            store.direct = store.open_direct(sqlite_path(url)).await;
        }
        Ok(store)
    }

    /// Intake's own connection to the SQLite file at `path`, if it opens
    /// and is the very file the pool has open (a path the two read
    /// differently, percent-escapes say, leaves intake on the pool's
    /// connection, as it was before).
    async fn open_direct(&self, path: &str) -> Option<direct::DirectWriter> {
        let pool_file: String =
            sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                .fetch_one(&self.pool)
                .await
                .ok()?;
        let opened =
            direct::DirectWriter::open(std::path::Path::new(path)).and_then(|w| Ok((w.file()?, w)));
        match opened {
            Ok((file, w)) if file == pool_file => Some(w),
            Ok((file, _)) => {
                tracing::warn!(%file, %pool_file, "intake's own connection opened another file; intake commits on the pool's connection");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot open intake's own connection; intake commits on the pool's connection");
                None
            }
        }
    }

    /// Brings the schema up to date. Replicas starting together on one
    /// PostgreSQL database take turns through an advisory lock (concurrent
    /// `CREATE TABLE IF NOT EXISTS` collide there); SQLite serialises writers itself.
    async fn migrate(&self, postgres: bool) -> Result<(), SqlError> {
        let mut conn = self.pool.acquire().await?;
        if postgres {
            sqlx::query("SELECT pg_advisory_lock(7261837)")
                .execute(&mut *conn)
                .await?;
        }
        let result = Self::migrate_on(&mut conn, i64::MAX).await;
        if postgres {
            sqlx::query("SELECT pg_advisory_unlock(7261837)")
                .execute(&mut *conn)
                .await?;
        }
        result
    }

    /// Runs the migrations not yet run, up to version `upto`.
    async fn migrate_on(
        conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
        upto: i64,
    ) -> Result<(), SqlError> {
        sqlx::query("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)")
            .execute(&mut **conn)
            .await?;
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= upto) {
            let mut tx = sqlx::Connection::begin(&mut **conn).await?;
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

    /// The store as replica `replica` uses it: the deliveries it claims, or
    /// stores claimed, are recorded as its own.
    pub fn held_by(mut self, replica: &str) -> SqlStore {
        self.holder = Some(std::sync::Arc::new(Holder {
            replica: replica.into(),
            run: format!(
                "{:x}-{:x}",
                chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default(),
                std::process::id()
            ),
        }));
        self
    }

    /// Puts back in line the deliveries this replica's earlier runs held
    /// when they stopped — a crash, or a kill — so they are taken now rather
    /// than when their leases run out; what this run holds stays as it is,
    /// so it can be called again at any time (a write a kill cut off may be
    /// committed by PostgreSQL a moment after the next run started). Those
    /// waiting out a retry delay are held by no one (see
    /// [`SqlStore::retry_later`]) and keep it; one claimed again after its
    /// delay is held again, and is put back like any other. Replica ids must
    /// be unique, as for operation leases: a second process under the same
    /// id would have its deliveries taken.
    pub async fn release_held(&self) -> Result<u64, SqlError> {
        let Some(holder) = &self.holder else {
            return Ok(0);
        };
        let r = sqlx::query(
            "UPDATE deliveries SET status = 'pending', lease_until = NULL
             WHERE status = 'processing' AND holder = $1
               AND (incarnation IS NULL OR incarnation <> $2)",
        )
        .bind(&holder.replica)
        .bind(&holder.run)
        .execute(&mut *self.connection().await?)
        .await?;
        Ok(r.rows_affected())
    }

    /// A connection of the pool, counted as waited for (see
    /// `waiting_for_pool`) until it is had.
    async fn connection(&self) -> Result<intake::Conn, SqlError> {
        use std::sync::atomic::Ordering;
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.waiting_for_pool.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting_for_pool);
        Ok(self.pool.acquire().await?)
    }

    /// Whether anyone but intake's writer waits for a connection.
    fn others_wait(&self) -> bool {
        self.waiting_for_pool
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    }

    pub async fn ping(&self) -> bool {
        match self.connection().await {
            Ok(mut c) => sqlx::query("SELECT 1").execute(&mut *c).await.is_ok(),
            Err(_) => false,
        }
    }

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
                (
                    r.try_get::<i64, _>("received_at").unwrap_or(0),
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
    ) -> Result<(i64, Vec<Entry>), SqlError> {
        let mut conn = self.connection().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let row = sqlx::query(LAST_SEQ).bind(op).fetch_one(&mut *tx).await?;
        let seq: i64 = row.try_get::<i64, _>("last").unwrap_or(0) + 1;
        sqlx::query("INSERT INTO op_log (op, seq, events) VALUES ($1, $2, $3)")
            .bind(op)
            .bind(seq)
            .bind(serde_json::to_string(events)?)
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

    pub async fn effect_done(&self, op: &str, key: EffectKey) -> Result<(), SqlError> {
        sqlx::query("UPDATE op_effects SET done = 1 WHERE op = $1 AND seq = $2 AND idx = $3")
            .bind(op)
            .bind(key.seq as i64)
            .bind(key.index as i64)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// Records what is known of a dispatch's run; known values are never erased.
    pub async fn put_run(&self, r: &RunRow) -> Result<(), SqlError> {
        sqlx::query("INSERT INTO op_runs (dispatch, op, run_id, html_url, base_sha, verified_sha, pull) VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (dispatch) DO UPDATE SET run_id = COALESCE(EXCLUDED.run_id, op_runs.run_id), html_url = COALESCE(EXCLUDED.html_url, op_runs.html_url), base_sha = COALESCE(op_runs.base_sha, EXCLUDED.base_sha), verified_sha = COALESCE(EXCLUDED.verified_sha, op_runs.verified_sha), pull = COALESCE(EXCLUDED.pull, op_runs.pull)")
            .bind(&r.dispatch)
            .bind(&r.op)
            .bind(r.run_id)
            .bind(&r.html_url)
            .bind(&r.base_sha)
            .bind(&r.verified_sha)
            .bind(r.pull)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    fn run_row(r: &AnyRow) -> RunRow {
        RunRow {
            dispatch: r.get("dispatch"),
            op: r.get("op"),
            run_id: r.try_get("run_id").ok(),
            html_url: r.try_get("html_url").ok(),
            base_sha: r.try_get("base_sha").ok(),
            verified_sha: r.try_get("verified_sha").ok(),
            pull: r.try_get("pull").ok(),
        }
    }

    pub async fn run(&self, dispatch: &str) -> Result<Option<RunRow>, SqlError> {
        let row = sqlx::query(concat!(run_select!(), " WHERE dispatch = $1"))
            .bind(dispatch)
            .fetch_optional(&mut *self.connection().await?)
            .await?;
        Ok(row.as_ref().map(Self::run_row))
    }

    pub async fn run_by_id(&self, run_id: i64) -> Result<Option<RunRow>, SqlError> {
        let row = sqlx::query(concat!(run_select!(), " WHERE run_id = $1"))
            .bind(run_id)
            .fetch_optional(&mut *self.connection().await?)
            .await?;
        Ok(row.as_ref().map(Self::run_row))
    }

    pub async fn runs_of(&self, op: &str) -> Result<Vec<RunRow>, SqlError> {
        let rows = sqlx::query(concat!(run_select!(), " WHERE op = $1"))
            .bind(op)
            .fetch_all(&mut *self.connection().await?)
            .await?;
        Ok(rows.iter().map(Self::run_row).collect())
    }

    pub async fn unit_issues(&self, op: &str) -> Result<Vec<UnitIssue>, SqlError> {
        let rows = sqlx::query("SELECT unit, number, issue_id, flags FROM op_units WHERE op = $1")
            .bind(op)
            .fetch_all(&mut *self.connection().await?)
            .await?;
        Ok(rows
            .iter()
            .map(|r| UnitIssue {
                unit: r.get("unit"),
                number: r.get("number"),
                issue_id: r.get("issue_id"),
                flags: r.get("flags"),
            })
            .collect())
    }

    pub async fn put_unit_issue(&self, op: &str, u: &UnitIssue) -> Result<(), SqlError> {
        sqlx::query("INSERT INTO op_units (op, unit, number, issue_id, flags) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (op, unit) DO UPDATE SET flags = EXCLUDED.flags")
            .bind(op)
            .bind(&u.unit)
            .bind(u.number)
            .bind(u.issue_id)
            .bind(&u.flags)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
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
    ) -> Result<Vec<Entry>, SqlError> {
        let (seq, entries) = self.store.append(&self.op, events, effects).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Intake's writer keeps the pool's one SQLite connection while writes
    /// keep coming and gives it back when anyone waits for it: a worker's
    /// read while processing must be seen waiting, not only its claims.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_query_waiting_for_the_pool_is_seen_by_intakes_writer() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("w.db").display());
        let s = SqlStore::connect(&url).await.unwrap();
        // As intake's writer holds it between commits.
        let held = s.pool.acquire().await.unwrap();
        let reader = s.clone();
        let read = tokio::spawn(async move { reader.run_by_id(7).await });
        let since = std::time::Instant::now();
        while !s.others_wait() {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "a read waiting for the pool is not seen"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        assert!(read.await.unwrap().unwrap().is_none());
        assert!(!s.others_wait(), "no one waits once it has its connection");
    }

    /// Intake on a SQLite file commits on a connection of its own (the
    /// service's path), in memory on the pool's one; either way each write
    /// of the queue lands the same: stored once, duplicates by id and by
    /// comment refused, bodies kept, ends done and failed recorded, and the
    /// end of an attempt that is no longer the delivery's ignored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn intake_on_a_sqlite_file_commits_on_its_own_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let file = format!("sqlite://{}?mode=rwc", tmp.path().join("i.db").display());
        for (url, own) in [(file.as_str(), true), ("sqlite::memory:", false)] {
            let s = SqlStore::connect(url).await.unwrap();
            assert_eq!(s.direct.is_some(), own, "{url}");
            let q = IntakeQueue::start(s.clone());
            let d = |id: &str, comment: &str| NewDelivery {
                id: id.into(),
                event: "issue_comment".into(),
                dedupe: Some(format!("comment:{comment}:created")),
                installation: Some(3),
                payload: format!("{{\"id\":\"{id}\"}}"),
                settled: false,
            };
            let answers = futures_util::future::join_all([
                q.submit(d("a1", "1")),
                q.submit(d("a1", "9")),
                q.submit(d("a2", "1")),
                q.submit(d("a3", "3")),
            ])
            .await;
            let answers: Vec<Intake> = answers.into_iter().map(Result::unwrap).collect();
            assert_eq!(
                answers,
                [
                    Intake::Stored,
                    Intake::Duplicate,
                    Intake::Duplicate,
                    Intake::Stored
                ],
                "{url}"
            );
            let claimed = s.claim_many(Duration::from_secs(60), 8).await.unwrap();
            let bodies: Vec<(&str, &str)> = claimed
                .iter()
                .map(|c| (c.id.as_str(), c.payload.as_str()))
                .collect();
            assert_eq!(bodies, [("a1", r#"{"id":"a1"}"#), ("a3", r#"{"id":"a3"}"#)]);
            q.finish("a1", 1, None).await.unwrap();
            q.finish("a3", 1, Some("boom")).await.unwrap();
            q.finish("a3", 2, None).await.unwrap();
            let rows: Vec<(String, String, Option<String>)> =
                sqlx::query_as("SELECT id, status, error FROM deliveries ORDER BY id")
                    .fetch_all(&s.pool)
                    .await
                    .unwrap();
            assert_eq!(
                rows,
                [
                    ("a1".into(), "done".into(), None),
                    ("a3".into(), "failed".into(), Some("boom".into()))
                ],
                "{url}"
            );
        }
    }

    /// While deliveries wait in the store (the workers fell behind), a commit
    /// on intake's own SQLite connection claims those due first (pending, or
    /// their lease run out) for the hand-over, in order, up to the room left
    /// — its own deliveries among them — and direct hand-over begins again
    /// once none is left pending; it stops before a body too large to wait in
    /// memory, which the workers' own claims then take, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_claims_what_waits_in_the_store_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let big = "x".repeat(intake::HANDOFF_MAX_BODY + 1);
        for (case, olds) in [
            ("small bodies", vec![("o1", "{}"), ("o2", "{}")]),
            ("a large body", vec![("o1", "{}"), ("o2", big.as_str())]),
        ] {
            let file = tmp.path().join(format!("{case}.db"));
            let s = SqlStore::connect(&format!("sqlite://{}?mode=rwc", file.display()))
                .await
                .unwrap();
            assert!(s.direct.is_some());
            for (id, body) in &olds {
                assert_eq!(
                    s.intake(id, "ping", None, None, body).await.unwrap(),
                    Intake::Stored
                );
            }
            // Deliveries are ordered by the millisecond they arrived in, then
            // by id: "n1" must arrive a millisecond after "o2" to come after it.
            tokio::time::sleep(Duration::from_millis(3)).await;
            // Made as the service makes it: deliveries may wait in the store.
            let h = Handoff::new(8, Duration::from_secs(60));
            let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
            let new = |id: &str| NewDelivery {
                id: id.into(),
                event: "ping".into(),
                dedupe: None,
                installation: Some(5),
                payload: format!("{{\"{id}\":1}}"),
                settled: false,
            };
            assert_eq!(q.submit(new("n1")).await.unwrap(), Intake::Stored);
            let taken: Vec<(String, String, i64)> = std::iter::from_fn(|| h.take())
                .map(|(_, c)| (c.id, c.payload, c.attempts))
                .collect();
            let status = |id: &'static str| {
                let pool = s.pool.clone();
                async move {
                    sqlx::query_scalar::<_, String>("SELECT status FROM deliveries WHERE id = $1")
                        .bind(id)
                        .fetch_one(&pool)
                        .await
                        .unwrap()
                }
            };
            if case == "small bodies" {
                assert_eq!(
                    taken,
                    [
                        ("o1".into(), "{}".into(), 1),
                        ("o2".into(), "{}".into(), 1),
                        ("n1".into(), r#"{"n1":1}"#.into(), 1)
                    ],
                    "{case}"
                );
                for id in ["o1", "o2", "n1"] {
                    assert_eq!(status(id).await, "processing", "{case}: {id}");
                }
                // None left pending: the next is handed over as it is stored.
                assert_eq!(q.submit(new("n2")).await.unwrap(), Intake::Stored);
                assert_eq!(h.take().map(|(_, c)| c.id).as_deref(), Some("n2"));
                assert_eq!(status("n2").await, "processing");
            } else {
                assert_eq!(taken, [("o1".into(), "{}".into(), 1)], "{case}");
                assert_eq!(status("o2").await, "pending", "{case}");
                assert_eq!(status("n1").await, "pending", "{case}");
                // The workers' claim takes the rest, the large one first.
                let rest: Vec<String> = s
                    .claim_many(Duration::from_secs(60), 8)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|c| c.id)
                    .collect();
                assert_eq!(rest, ["o2", "n1"], "{case}");
            }
        }
        // A delivery whose lease ran out is due as a pending one is: its
        // next attempt is claimed in line.
        let file = tmp.path().join("lease.db");
        let s = SqlStore::connect(&format!("sqlite://{}?mode=rwc", file.display()))
            .await
            .unwrap();
        s.intake("o1", "ping", None, None, "{}").await.unwrap();
        assert_eq!(s.claim_many(Duration::ZERO, 1).await.unwrap().len(), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let h = Handoff::new(8, Duration::from_secs(60));
        let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
        q.submit(NewDelivery {
            id: "n1".into(),
            event: "ping".into(),
            dedupe: None,
            installation: None,
            payload: "{}".into(),
            settled: false,
        })
        .await
        .unwrap();
        let taken: Vec<(String, i64)> = std::iter::from_fn(|| h.take())
            .map(|(_, c)| (c.id, c.attempts))
            .collect();
        assert_eq!(taken, [("o1".into(), 2), ("n1".into(), 1)]);
    }

    /// With nothing waiting in the store, a commit still looks in line for
    /// what came due there without being stored — here a lease run out — once
    /// `LOOK_AGAIN` has passed since a commit last found nothing due; the
    /// workers, told the commit looked, have no look of their own to make
    /// meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_looks_in_line_for_what_came_due_and_spares_the_workers_a_look() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("look.db");
        let s = SqlStore::connect(&format!("sqlite://{}?mode=rwc", file.display()))
            .await
            .unwrap();
        let h = Handoff::new(8, Duration::from_secs(60));
        let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
        let submit = |id: &str| {
            q.submit(NewDelivery {
                id: id.into(),
                event: "ping".into(),
                dedupe: None,
                installation: None,
                payload: "{}".into(),
                settled: false,
            })
        };
        let take_all = || -> Vec<(String, i64)> {
            std::iter::from_fn(|| h.take())
                .map(|(_, c)| (c.id, c.attempts))
                .collect()
        };
        // What a test asserts "within LOOK_AGAIN of the last look" holds
        // only if this machine did not pause longer than that since `before`
        // (taken before the look): on a slow one it is not asserted.
        let within = |before: std::time::Instant| before.elapsed() < LOOK_AGAIN;
        // The first commit looks (the store may hold deliveries from
        // before) and finds nothing else: n1 is handed over as stored.
        let before = std::time::Instant::now();
        assert_eq!(submit("n1").await.unwrap(), Intake::Stored);
        assert_eq!(take_all(), [("n1".into(), 1)]);
        let a_while_ago = Some(std::time::Instant::now() - 2 * LOOK_AGAIN);
        let spared = !h.worth_a_claim(a_while_ago);
        assert!(
            spared || !within(before),
            "a worker looks though a commit just did"
        );
        // n1's worker is lost: its lease runs out.
        sqlx::query("UPDATE deliveries SET lease_until = 0 WHERE id = 'n1'")
            .execute(&s.pool)
            .await
            .unwrap();
        // Within LOOK_AGAIN of the last look a commit does not look again.
        assert_eq!(submit("n2").await.unwrap(), Intake::Stored);
        let taken = take_all();
        if within(before) {
            assert_eq!(taken, [("n2".into(), 1)]);
        } else if taken.len() == 2 {
            // A pause let the look come due: n1 is taken again already.
            sqlx::query("UPDATE deliveries SET lease_until = 0 WHERE id = 'n1'")
                .execute(&s.pool)
                .await
                .unwrap();
        }
        tokio::time::sleep(LOOK_AGAIN + Duration::from_millis(10)).await;
        assert!(h.worth_a_claim(a_while_ago), "no look for a while");
        // Past it, the commit claims n1 again, before its own n3.
        let before = std::time::Instant::now();
        assert_eq!(submit("n3").await.unwrap(), Intake::Stored);
        let taken = take_all();
        let ids: Vec<&str> = taken.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["n1", "n3"]);
        assert!(taken[0].1 > 1 && taken[1].1 == 1, "attempts: {taken:?}");
        assert!(!h.worth_a_claim(a_while_ago) || !within(before));
        assert!(
            s.claim_many(Duration::from_secs(60), 8)
                .await
                .unwrap()
                .is_empty(),
            "each is claimed once"
        );
    }

    /// A batch that cannot be made is made write by write: a delivery stored
    /// alone, then an end in the same batch, which goes through the pool —
    /// whose one SQLite connection the delivery alone must not leave held, or
    /// the end waits out the pool's 10 s and fails. A trigger refuses the
    /// batch (its delivery is handed over, stored claimed) but not the
    /// delivery alone (stored pending).
    #[tokio::test]
    async fn an_end_after_a_delivery_stored_alone_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let file = format!("sqlite://{}?mode=rwc", tmp.path().join("f.db").display());
        for url in [file.as_str(), "sqlite::memory:"] {
            let s = SqlStore::connect(url).await.unwrap();
            s.intake("d0", "ping", None, None, "{}").await.unwrap();
            let claimed = s.claim(Duration::from_secs(60)).await.unwrap().unwrap();
            sqlx::query(
                "CREATE TRIGGER no_claimed_intake BEFORE INSERT ON deliveries
                 WHEN NEW.status = 'processing' BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .execute(&s.pool)
            .await
            .unwrap();
            let h = Handoff::new(8, Duration::from_secs(60));
            h.drained_at(h.pending_mark());
            let q = IntakeQueue::start_with(s.clone(), Some(h));
            // On this one thread both are queued before the writer runs:
            // one batch.
            let (stored, ended) = futures_util::future::join(
                q.submit(NewDelivery {
                    id: "d1".into(),
                    event: "ping".into(),
                    dedupe: None,
                    installation: None,
                    payload: "{}".into(),
                    settled: false,
                }),
                q.finish("d0", claimed.attempts, None),
            )
            .await;
            assert_eq!(stored.unwrap(), Intake::Stored, "{url}");
            ended.expect("the end is recorded, not left waiting for the held connection");
            let status: String =
                sqlx::query_scalar("SELECT status FROM deliveries WHERE id = 'd0'")
                    .fetch_one(&s.pool)
                    .await
                    .unwrap();
            assert_eq!(status, "done", "{url}");
        }
    }

    /// A database of the schema before bodies had their own table, with a
    /// delivery waiting: after the upgrade its body is claimed with it.
    #[tokio::test]
    async fn an_older_database_keeps_its_waiting_deliveries_bodies() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("old.db").display());
        sqlx::any::install_default_drivers();
        {
            let pool = AnyPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await
                .unwrap();
            let mut conn = pool.acquire().await.unwrap();
            SqlStore::migrate_on(&mut conn, 6).await.unwrap();
            drop(conn);
            sqlx::query("INSERT INTO deliveries (id, event, payload, received_at, status) VALUES ('d1', 'issue_comment', '{\"a\":1}', 1, 'pending')")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
        let store = SqlStore::connect(&url).await.unwrap();
        let claimed = store.claim_many(Duration::from_secs(30), 8).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].payload, "{\"a\":1}");
        // New deliveries are stored with their bodies too.
        store
            .intake("d2", "issue_comment", None, Some(1), "{\"b\":2}")
            .await
            .unwrap();
        let claimed = store.claim_many(Duration::from_secs(30), 8).await.unwrap();
        assert_eq!(claimed[0].payload, "{\"b\":2}");
    }
}
