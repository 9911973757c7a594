//! The service's store: webhook deliveries and recorded commands, in SQLite (one
//! file, the default) or PostgreSQL (several replicas), through one SQL dialect
//! both accept. A delivery is stored before GitHub gets its 2xx, then processed
//! from here: claimed with a lease, so a crash mid-processing hands it to the next
//! worker after the lease instead of losing it or running it twice at once.
//!
//! This file owns the connection: opening either database, migrating it,
//! the pool and who holds claims. Each concern on it is a file of its own:
//! `schema` (the migrations), `deliveries` (the queue), `intake` (its batched
//! writes) and `direct` (SQLite's own connection for them), `operations`
//! (the decision logs), `runs` (dispatches and sub-issues), `spend` (money).

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::AnyPool;
use std::time::Duration;

mod deliveries;
mod direct;
mod intake;
mod operations;
mod runs;
mod schema;
mod spend;
pub use deliveries::{Claimed, Intake, MIN_RETENTION};
pub use intake::{Handoff, IntakeQueue, NewDelivery, LOOK_AGAIN};
pub use operations::{LoadedOperation, OperationRow, SqlOutbox};
pub use runs::{RunRow, UnitIssue};
use schema::MIGRATIONS;
pub use spend::{Admission, Admitted, Caps};

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

/// Now, in milliseconds since the Unix epoch: the store's times.
pub(crate) fn now_ms() -> i64 {
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

    /// Every statement the service runs for each event reads its rows
    /// through an index, never by reading a whole table: the tables grow
    /// with every operation and delivery ever handled, and a scan makes
    /// each event cost more than the last (a run looked up by its id on
    /// every webhook read every run ever dispatched). SQLite's plan says
    /// `SCAN t` for a whole table, `SEARCH t USING …` or `SCAN t USING …
    /// INDEX` otherwise.
    #[tokio::test]
    async fn what_runs_on_every_event_reads_through_an_index() {
        use sqlx::Row as _;
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("p.db").display());
        let s = SqlStore::connect(&url).await.unwrap();
        let tables = [
            "deliveries",
            "delivery_payloads",
            "operations",
            "op_log",
            "op_effects",
            "op_runs",
            "op_units",
            "spend",
            "spend_waiting",
        ];
        let per_event = [
            ("a run by its id", runs::RUN_BY_ID),
            ("an operation's runs", runs::RUNS_OF),
            ("agents in flight", spend::IN_FLIGHT),
            ("the line for a slot", spend::WAITING_LINE),
            ("an operation's last event", operations::LAST_SEQ),
            ("a claim", deliveries::CLAIM),
        ];
        let mut scans = Vec::new();
        for (what, sql) in per_event {
            let mut conn = s.connection().await.unwrap();
            // Statements of this crate, written as constants.
            let plan = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            for row in &plan {
                let detail: String = row.get("detail");
                let whole = tables.iter().any(|t| detail == format!("SCAN {t}"));
                if whole {
                    scans.push(format!("{what}: {detail}"));
                }
                // Through the window's index it would read 6 hours of the
                // installation's dispatches, most of them ended.
                if what == "agents in flight"
                    && detail.starts_with("SEARCH spend")
                    && !detail.contains("spend_in_flight")
                {
                    scans.push(format!("{what}: {detail}, not only those in flight"));
                }
            }
        }
        assert!(scans.is_empty(), "{scans:#?}");
    }
}
