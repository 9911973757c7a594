//! Group commit for webhook intake: deliveries that arrive while a commit is
//! being made wait for the next one and share it — one transaction and one
//! fsync for all of them — so the rate at which deliveries can be stored
//! grows with the load instead of stopping at one fsync per delivery. Nothing
//! is answered before its commit: each delivery is still durable before its
//! 2xx. There is no added wait under light load: a delivery that finds no
//! commit in progress is committed at once, alone.

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

type Waiting = (NewDelivery, oneshot::Sender<Result<Intake, SqlError>>);

/// The intake's single writer: hands each delivery to the next commit.
#[derive(Clone)]
pub struct IntakeQueue {
    tx: mpsc::Sender<Waiting>,
}

/// The most deliveries one commit takes (a burst larger than this is split).
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

    /// Stores one delivery (with whatever arrives with it); `Duplicate` when
    /// its id or its dedupe key is already stored.
    pub async fn submit(&self, d: NewDelivery) -> Result<Intake, SqlError> {
        let (done, answer) = oneshot::channel();
        self.tx
            .send((d, done))
            .await
            .map_err(|_| SqlError::Closed)?;
        answer.await.map_err(|_| SqlError::Closed)?
    }
}

const INSERT: &str = "INSERT INTO deliveries (id, event, dedupe, installation, payload, received_at, status) VALUES ($1, $2, $3, $4, $5, $6, 'pending') ON CONFLICT DO NOTHING";

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
        let r = sqlx::query(INSERT)
            .bind(id)
            .bind(event)
            .bind(dedupe)
            .bind(installation)
            .bind(payload)
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(stored_or_not(r.rows_affected()))
    }

    /// One transaction for the batch; if it fails, each delivery is tried on
    /// its own, so one that cannot be stored never costs the others theirs.
    async fn commit_batch(&self, batch: Vec<Waiting>) {
        if batch.len() > 1 {
            match self.insert_all(&batch).await {
                Ok(results) => {
                    for ((_, done), r) in batch.into_iter().zip(results) {
                        let _ = done.send(Ok(r));
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, n = batch.len(), "a batch of deliveries failed; storing each alone")
                }
            }
        }
        for (d, done) in batch {
            let r = self
                .intake(
                    &d.id,
                    &d.event,
                    d.dedupe.as_deref(),
                    d.installation,
                    &d.payload,
                )
                .await;
            let _ = done.send(r);
        }
    }

    async fn insert_all(&self, batch: &[Waiting]) -> Result<Vec<Intake>, SqlError> {
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let mut results = Vec::with_capacity(batch.len());
        for (d, _) in batch {
            let r = sqlx::query(INSERT)
                .bind(&d.id)
                .bind(&d.event)
                .bind(d.dedupe.as_deref())
                .bind(d.installation)
                .bind(&d.payload)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            results.push(stored_or_not(r.rows_affected()));
        }
        tx.commit().await?;
        Ok(results)
    }
}

fn stored_or_not(rows: u64) -> Intake {
    if rows == 1 {
        Intake::Stored
    } else {
        Intake::Duplicate
    }
}
