//! How long the service keeps deliveries it has finished with: their rows
//! and bodies (comment text, user names — nothing the service needs once a
//! delivery is processed, and nothing it should hold for ever) are forgotten
//! once older than the retention, by a sweep each hour.

use crate::store::sql::SqlStore;
use std::time::Duration;

/// The first sweep, after the start (not at it: a replica starting is busy).
const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(60);
/// Between sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);
/// Deliveries forgotten per transaction: small enough that intake (on SQLite,
/// the same connection) never waits long behind a sweep.
const CHUNK: usize = 500;
/// Between two chunks of one sweep.
const PAUSE: Duration = Duration::from_millis(20);

/// Forgets, now and then, the finished deliveries older than `retention`.
pub async fn sweep_forever(store: SqlStore, retention: Duration) {
    tokio::time::sleep(FIRST_SWEEP_AFTER).await;
    loop {
        sweep(&store, retention).await;
        tokio::time::sleep(SWEEP_EVERY).await;
    }
}

/// One sweep: every finished delivery older than `retention`, a chunk at a
/// time. A failure is logged and left to the next sweep.
pub async fn sweep(store: &SqlStore, retention: Duration) -> u64 {
    let before = chrono::Utc::now().timestamp_millis()
        - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let mut forgotten = 0;
    loop {
        match store.forget_finished(before, CHUNK).await {
            Ok(n) => {
                forgotten += n;
                metrics::counter!("supervise_deliveries_forgotten_total").increment(n);
                if n < CHUNK as u64 {
                    break;
                }
                tokio::time::sleep(PAUSE).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot forget old deliveries; the next sweep tries again");
                break;
            }
        }
    }
    if forgotten > 0 {
        tracing::info!(
            forgotten,
            days = retention.as_secs() / 86_400,
            "finished deliveries older than the retention forgotten"
        );
    }
    forgotten
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep goes on chunk after chunk until every finished delivery older
    /// than the retention is forgotten, and leaves younger ones alone.
    #[tokio::test]
    async fn a_sweep_forgets_every_old_finished_delivery_chunk_after_chunk() {
        let store = SqlStore::connect("sqlite::memory:").await.unwrap();
        let n = 2 * CHUNK + 3;
        for i in 0..n {
            let id = format!("d{i}");
            store.intake(&id, "ping", None, None, "{}").await.unwrap();
        }
        loop {
            let claimed = store.claim_many(Duration::from_secs(60), 64).await.unwrap();
            if claimed.is_empty() {
                break;
            }
            for c in claimed {
                store.finish(&c.id, c.attempts, None).await.unwrap();
            }
        }
        assert_eq!(sweep(&store, Duration::from_secs(3600)).await, 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(sweep(&store, Duration::ZERO).await, n as u64);
        assert_eq!(store.counts().await.unwrap(), (0, 0));
    }
}
