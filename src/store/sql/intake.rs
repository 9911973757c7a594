//! Group commit for the delivery queue's writes: deliveries being stored and
//! deliveries whose processing ended, arriving while a commit is being made,
//! wait for the next one and share it — one transaction and one fsync for all
//! of them — so the rate at which deliveries can be taken in grows with the
//! load instead of stopping at two commits per delivery. Nothing is answered
//! before its commit: a delivery is still durable before its 2xx, and an end
//! is recorded before the worker moves on. There is no added wait under light
//! load: a write that finds no commit in progress is committed at once, alone.

use super::{now_ms, Intake, SqlError, SqlStore};
use tokio::sync::{mpsc, oneshot};

/// One delivery to store.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub event: String,
    pub dedupe: Option<String>,
    pub installation: Option<i64>,
    pub payload: String,
}

/// One write the queue carries.
#[derive(Debug, Clone)]
enum Write {
    Store(NewDelivery),
    /// A claimed delivery's end, fenced by its attempt (see `SqlStore::finish`).
    End {
        id: String,
        attempts: i64,
        error: Option<String>,
    },
}

/// What a write came to: a stored delivery's `Intake`; an end's nothing.
type Answer = Result<Option<Intake>, SqlError>;
type Waiting = (Write, oneshot::Sender<Answer>);

/// The delivery queue's single writer: hands each write to the next commit.
#[derive(Clone)]
pub struct IntakeQueue {
    tx: mpsc::Sender<Waiting>,
}

/// The most writes one commit takes (a burst larger than this is split).
const MAX_BATCH: usize = 256;

impl IntakeQueue {
    /// Starts the writer on the current runtime; it ends with the last queue.
    pub fn start(store: SqlStore) -> IntakeQueue {
        let (tx, mut rx) = mpsc::channel::<Waiting>(4 * MAX_BATCH);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                metrics::histogram!("supervise_intake_batch").record(batch.len() as f64);
                store.commit_batch(std::mem::take(&mut batch)).await;
            }
        });
        IntakeQueue { tx }
    }

    async fn send(&self, w: Write) -> Answer {
        let (done, answer) = oneshot::channel();
        self.tx
            .send((w, done))
            .await
            .map_err(|_| SqlError::Closed)?;
        answer.await.map_err(|_| SqlError::Closed)?
    }

    /// Stores one delivery (with whatever arrives with it); `Duplicate` when
    /// its id or its dedupe key is already stored.
    pub async fn submit(&self, d: NewDelivery) -> Result<Intake, SqlError> {
        Ok(self
            .send(Write::Store(d))
            .await?
            .unwrap_or(Intake::Duplicate))
    }

    /// Records a claimed delivery's end, as `SqlStore::finish` does, in the
    /// next shared commit.
    pub async fn finish(
        &self,
        id: &str,
        attempts: i64,
        error: Option<&str>,
    ) -> Result<(), SqlError> {
        self.send(Write::End {
            id: id.to_string(),
            attempts,
            error: error.map(str::to_string),
        })
        .await
        .map(|_| ())
    }
}

const INSERT: &str = "INSERT INTO deliveries (id, event, dedupe, installation, received_at, status) VALUES ($1, $2, $3, $4, $5, 'pending') ON CONFLICT DO NOTHING";
/// The body of a delivery just stored (never of a duplicate, which is not).
const INSERT_PAYLOAD: &str = "INSERT INTO delivery_payloads (id, payload) VALUES ($1, $2)";
const FINISH: &str = "UPDATE deliveries SET status = $1, lease_until = NULL, error = $2 WHERE id = $3 AND attempts = $4";

impl SqlStore {
    /// Stores one delivery in its own transaction.
    pub async fn intake(
        &self,
        id: &str,
        event: &str,
        dedupe: Option<&str>,
        installation: Option<i64>,
        payload: &str,
    ) -> Result<Intake, SqlError> {
        let mut tx = self.pool.begin().await?;
        let r = store_one(&mut tx, id, event, dedupe, installation, payload, now_ms()).await?;
        tx.commit().await?;
        Ok(r)
    }

    /// Records a claimed delivery's end; fenced like [`SqlStore::renew`], so a
    /// worker that lost its lease cannot overwrite the new holder's outcome.
    pub async fn finish(
        &self,
        id: &str,
        attempts: i64,
        error: Option<&str>,
    ) -> Result<(), SqlError> {
        sqlx::query(FINISH)
            .bind(if error.is_some() { "failed" } else { "done" })
            .bind(error)
            .bind(id)
            .bind(attempts)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// One transaction for the batch; if it fails, each write is tried on
    /// its own, so one that cannot be made never costs the others theirs.
    async fn commit_batch(&self, batch: Vec<Waiting>) {
        if batch.len() > 1 {
            match self.write_all(&batch).await {
                Ok(results) => {
                    for ((_, done), r) in batch.into_iter().zip(results) {
                        let _ = done.send(Ok(r));
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, n = batch.len(), "a batch of delivery writes failed; making each alone")
                }
            }
        }
        for (w, done) in batch {
            let r = match &w {
                Write::Store(d) => self
                    .intake(
                        &d.id,
                        &d.event,
                        d.dedupe.as_deref(),
                        d.installation,
                        &d.payload,
                    )
                    .await
                    .map(Some),
                Write::End {
                    id,
                    attempts,
                    error,
                } => self
                    .finish(id, *attempts, error.as_deref())
                    .await
                    .map(|_| None),
            };
            let _ = done.send(r);
        }
    }

    async fn write_all(&self, batch: &[Waiting]) -> Result<Vec<Option<Intake>>, SqlError> {
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let mut results = Vec::with_capacity(batch.len());
        for (w, _) in batch {
            match w {
                Write::Store(d) => {
                    let r = store_one(
                        &mut tx,
                        &d.id,
                        &d.event,
                        d.dedupe.as_deref(),
                        d.installation,
                        &d.payload,
                        now,
                    )
                    .await?;
                    results.push(Some(r));
                }
                Write::End {
                    id,
                    attempts,
                    error,
                } => {
                    sqlx::query(FINISH)
                        .bind(if error.is_some() { "failed" } else { "done" })
                        .bind(error.as_deref())
                        .bind(id)
                        .bind(*attempts)
                        .execute(&mut *tx)
                        .await?;
                    results.push(None);
                }
            }
        }
        tx.commit().await?;
        Ok(results)
    }
}

/// Stores a delivery and its body within the caller's transaction.
async fn store_one(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: &str,
    event: &str,
    dedupe: Option<&str>,
    installation: Option<i64>,
    payload: &str,
    now: i64,
) -> Result<Intake, SqlError> {
    let r = sqlx::query(INSERT)
        .bind(id)
        .bind(event)
        .bind(dedupe)
        .bind(installation)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    let stored = stored_or_not(r.rows_affected());
    if stored == Intake::Stored {
        sqlx::query(INSERT_PAYLOAD)
            .bind(id)
            .bind(payload)
            .execute(&mut **tx)
            .await?;
    }
    Ok(stored)
}

fn stored_or_not(rows: u64) -> Intake {
    if rows == 1 {
        Intake::Stored
    } else {
        Intake::Duplicate
    }
}
