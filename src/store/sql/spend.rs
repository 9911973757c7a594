//! Spend across operations: every dispatch an installation's operations make,
//! what it cost and whether its agent still runs — the ground for the caps
//! above one operation (a daily budget per installation and per repository,
//! agents in flight per installation) and for `/supervise spend`.
//!
//! Admission is one transaction per installation at a time (a row lock on
//! `spend_scopes`, taken first): the caps are read and the dispatch recorded
//! together, so no interleaving of operations or replicas passes a cap. A
//! dispatch is recorded once (its id is the key): a redelivered event or a
//! replayed effect never spends twice.

use super::{now_ms, SqlError, SqlStore};
use crate::engine::usage::Usd;
use crate::engine::HoldKind;
use crate::report::{DayTotals, SpendRecord};
use chrono::{DateTime, TimeZone, Utc};
use sqlx::Row;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// A dispatch whose end was never recorded (its operation deleted, a webhook
/// lost for good) stops counting as in flight after this long.
const IN_FLIGHT_AT_MOST_MS: i64 = 6 * 3600 * 1000;

/// An installation's agents in flight, by operation: on every admission.
pub(super) const IN_FLIGHT: &str = "SELECT op, COUNT(*) AS n FROM spend WHERE installation = $1 AND ended_ms IS NULL AND at_ms > $2 GROUP BY op";
/// An installation's line of dispatches waiting for a slot: on every
/// admission.
pub(super) const WAITING_LINE: &str =
    "SELECT dispatch, op, since_ms FROM spend_waiting WHERE installation = $1 AND seen_ms > $2";

/// The caps a dispatch is admitted under; `None`: no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// What all the installation's operations may dispatch in any 24 hours.
    pub installation_daily: Option<u64>,
    /// What the repository's operations may dispatch in any 24 hours.
    pub repo_daily: Option<u64>,
    /// The same two in dollars.
    pub installation_daily_usd: Option<Usd>,
    pub repo_daily_usd: Option<Usd>,
    /// Agents in flight at once across the installation's operations.
    pub installation_agents: Option<u64>,
}

/// One dispatch asking to be launched.
#[derive(Debug, Clone)]
pub struct Admission<'a> {
    pub dispatch: &'a str,
    pub installation: i64,
    pub repo: &'a str,
    pub op: &'a str,
    pub model: &'a str,
    pub cost: u64,
    /// What it is expected to cost in dollars, until its agent reports.
    pub usd: Usd,
    pub caps: Caps,
    /// A waiting dispatch not asked about again for this long has left the
    /// line (its operation stopped, or moved to another replica that asks anew).
    pub waiting_expires_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// Recorded now: launch it.
    Now,
    /// Recorded before (a replay, a redelivery): launch it, spend nothing more.
    Before,
    /// Not now: why, and when the caps should allow it (if a time is known).
    Held {
        reason: String,
        until: Option<DateTime<Utc>>,
        kind: HoldKind,
    },
}

/// What a daily cap counts: dispatches at the operator's relative prices,
/// or dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Relative,
    Dollars,
}

impl Unit {
    fn show(self, n: u64) -> String {
        match self {
            Unit::Relative => format!("{n}×"),
            Unit::Dollars => Usd::from_micros(n).to_string(),
        }
    }

    fn spent_verb(self) -> &'static str {
        match self {
            Unit::Relative => "dispatched",
            Unit::Dollars => "spent or expected",
        }
    }

    fn cost_verb(self) -> &'static str {
        match self {
            Unit::Relative => "costs",
            Unit::Dollars => "is expected to cost",
        }
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// When the dispatches in the window (oldest first) have rolled out far enough
/// for `cost` more to fit under `cap`.
fn fits_at(window: &[(i64, u64)], spent: u64, cost: u64, cap: u64) -> Option<DateTime<Utc>> {
    if cost > cap {
        return None;
    }
    let mut left = spent;
    for (t, c) in window {
        left -= c;
        if left + cost <= cap {
            return Some(at(t + DAY_MS));
        }
    }
    None
}

impl SqlStore {
    /// Whether `a` may be launched now, recording it if so (see the module doc).
    pub async fn admit(&self, a: &Admission<'_>) -> Result<Admitted, SqlError> {
        if self.spent_on(a.dispatch).await? {
            return Ok(Admitted::Before);
        }
        sqlx::query(
            "INSERT INTO spend_scopes (installation, version) VALUES ($1, 0) ON CONFLICT DO NOTHING",
        )
        .bind(a.installation)
        .execute(&mut *self.connection().await?)
        .await?;
        let now = now_ms();
        let mut conn = self.connection().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        // The lock: one admission per installation at a time, on every replica.
        sqlx::query("UPDATE spend_scopes SET version = version + 1 WHERE installation = $1")
            .bind(a.installation)
            .execute(&mut *tx)
            .await?;
        let again: Option<sqlx::any::AnyRow> =
            sqlx::query("SELECT dispatch FROM spend WHERE dispatch = $1")
                .bind(a.dispatch)
                .fetch_optional(&mut *tx)
                .await?;
        if again.is_some() {
            tx.commit().await?;
            return Ok(Admitted::Before);
        }
        let usd = |c: Option<Usd>| c.map(Usd::micros);
        let daily = [
            (
                a.caps.installation_daily,
                None,
                "the installation's",
                Unit::Relative,
            ),
            (
                a.caps.repo_daily,
                Some(a.repo),
                "this repository's",
                Unit::Relative,
            ),
            (
                usd(a.caps.installation_daily_usd),
                None,
                "the installation's",
                Unit::Dollars,
            ),
            (
                usd(a.caps.repo_daily_usd),
                Some(a.repo),
                "this repository's",
                Unit::Dollars,
            ),
        ];
        // Sums, not rows: an installation dispatching all day must not make
        // every admission read the whole day. The rows are read only to say
        // when a held dispatch will fit.
        let sums = match daily.iter().any(|(cap, ..)| cap.is_some()) {
            true => Some(Self::day_sums(&mut tx, a.installation, a.repo, now).await?),
            false => None,
        };
        for (cap, repo, whose, unit) in daily {
            let (Some(cap), Some(sums)) = (cap, sums) else {
                continue;
            };
            let spent = match (repo, unit) {
                (Some(_), Unit::Relative) => sums.repo,
                (None, Unit::Relative) => sums.installation,
                (Some(_), Unit::Dollars) => sums.repo_usd.micros(),
                (None, Unit::Dollars) => sums.installation_usd.micros(),
            };
            let cost = match unit {
                Unit::Relative => a.cost,
                Unit::Dollars => a.usd.micros(),
            };
            if spent + cost > cap {
                let mine = Self::day_window(&mut tx, a.installation, repo, unit, now).await?;
                self.leave_line(&mut tx, a.dispatch).await?;
                tx.commit().await?;
                let [cap_, spent_, cost_] = [cap, spent, cost].map(|n| unit.show(n));
                let reason = if cost > cap {
                    format!(
                        "one {} dispatch costs {cost_}, more than {whose} daily budget of {cap_} — raise the budget",
                        a.model
                    )
                } else {
                    format!(
                        "{whose} daily budget is {cap_} and {spent_} was {} in the last 24 h; this {} dispatch {} {cost_}",
                        unit.spent_verb(),
                        a.model,
                        unit.cost_verb()
                    )
                };
                return Ok(Admitted::Held {
                    reason,
                    until: fits_at(&mine, spent, cost, cap),
                    kind: HoldKind::Budget,
                });
            }
        }
        if let Some(max) = a.caps.installation_agents {
            if let Some(held) = self.wait_in_line(&mut tx, a, max, now).await? {
                tx.commit().await?;
                return Ok(held);
            }
        }
        sqlx::query("INSERT INTO spend (dispatch, installation, repo, op, model, cost, at_ms, ended_ms, usd) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)")
            .bind(a.dispatch)
            .bind(a.installation)
            .bind(a.repo)
            .bind(a.op)
            .bind(a.model)
            .bind(a.cost as i64)
            .bind(now)
            .bind(a.usd.micros() as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Admitted::Now)
    }

    /// Agents in flight across the installation: a dispatch goes when its
    /// place in line is within the free slots. The line is fair between
    /// operations: those with fewer agents in flight come first, then the
    /// longest waiting. `None`: it may go (and has left the line).
    async fn wait_in_line(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        a: &Admission<'_>,
        max: u64,
        now: i64,
    ) -> Result<Option<Admitted>, SqlError> {
        sqlx::query("INSERT INTO spend_waiting (dispatch, installation, op, since_ms, seen_ms) VALUES ($1, $2, $3, $4, $4) ON CONFLICT (dispatch) DO UPDATE SET seen_ms = EXCLUDED.seen_ms")
            .bind(a.dispatch)
            .bind(a.installation)
            .bind(a.op)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        let flying = sqlx::query(IN_FLIGHT)
            .bind(a.installation)
            .bind(now - IN_FLIGHT_AT_MOST_MS)
            .fetch_all(&mut **tx)
            .await?;
        let per_op: std::collections::HashMap<String, u64> = flying
            .iter()
            .map(|r| (r.get::<String, _>("op"), r.get::<i64, _>("n").max(0) as u64))
            .collect();
        let in_flight: u64 = per_op.values().sum();
        let line = sqlx::query(WAITING_LINE)
            .bind(a.installation)
            .bind(now - a.waiting_expires_ms)
            .fetch_all(&mut **tx)
            .await?;
        let mut line: Vec<(u64, i64, String)> = line
            .iter()
            .map(|r| {
                let op: String = r.get("op");
                (
                    per_op.get(&op).copied().unwrap_or(0),
                    r.get::<i64, _>("since_ms"),
                    r.get::<String, _>("dispatch"),
                )
            })
            .collect();
        line.sort();
        let place = line
            .iter()
            .position(|(_, _, d)| d == a.dispatch)
            .unwrap_or(0) as u64;
        let free = max.saturating_sub(in_flight);
        if place < free {
            self.leave_line(tx, a.dispatch).await?;
            return Ok(None);
        }
        Ok(Some(Admitted::Held {
            reason: format!(
                "{in_flight} agents are in flight across the installation's operations, the most it allows at once ({max}); {} waiting ahead",
                place.saturating_sub(free)
            ),
            until: None,
            kind: HoldKind::Agents,
        }))
    }

    /// The last 24 hours' dispatches of the installation and of one of its
    /// repositories, summed.
    async fn day_sums(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        installation: i64,
        repo: &str,
        now: i64,
    ) -> Result<DayTotals, SqlError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(cost), 0) AS BIGINT) AS all_cost, \
             CAST(COALESCE(SUM(CASE WHEN repo = $2 THEN cost ELSE 0 END), 0) AS BIGINT) AS repo_cost, \
             CAST(COALESCE(SUM(usd), 0) AS BIGINT) AS all_usd, \
             CAST(COALESCE(SUM(CASE WHEN repo = $2 THEN usd ELSE 0 END), 0) AS BIGINT) AS repo_usd \
             FROM spend WHERE installation = $1 AND at_ms > $3",
        )
        .bind(installation)
        .bind(repo)
        .bind(now - DAY_MS)
        .fetch_one(&mut **tx)
        .await?;
        let usd = |name: &str| Usd::from_micros(row.get::<i64, _>(name).max(0) as u64);
        Ok(DayTotals {
            installation: row.get::<i64, _>("all_cost").max(0) as u64,
            repo: row.get::<i64, _>("repo_cost").max(0) as u64,
            installation_usd: usd("all_usd"),
            repo_usd: usd("repo_usd"),
        })
    }

    /// The last 24 hours' dispatches of the installation (or of one
    /// repository of it), oldest first: (when, cost in `unit`).
    async fn day_window(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        installation: i64,
        repo: Option<&str>,
        unit: Unit,
        now: i64,
    ) -> Result<Vec<(i64, u64)>, SqlError> {
        let rows = sqlx::query(match unit {
            Unit::Relative => "SELECT at_ms, cost FROM spend WHERE installation = $1 AND at_ms > $2 AND ($3 = '' OR repo = $3) ORDER BY at_ms",
            Unit::Dollars => "SELECT at_ms, usd AS cost FROM spend WHERE installation = $1 AND at_ms > $2 AND ($3 = '' OR repo = $3) ORDER BY at_ms",
        })
        .bind(installation)
        .bind(now - DAY_MS)
        .bind(repo.unwrap_or(""))
        .fetch_all(&mut **tx)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<i64, _>("at_ms"),
                    r.get::<i64, _>("cost").max(0) as u64,
                )
            })
            .collect())
    }

    /// What the installation and one of its repositories dispatched in the
    /// last 24 hours, for the status comment.
    pub async fn spent_today(&self, installation: i64, repo: &str) -> Result<DayTotals, SqlError> {
        let mut conn = self.connection().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let sums = Self::day_sums(&mut tx, installation, repo, now_ms()).await?;
        tx.commit().await?;
        Ok(sums)
    }

    async fn leave_line(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        dispatch: &str,
    ) -> Result<(), SqlError> {
        sqlx::query("DELETE FROM spend_waiting WHERE dispatch = $1")
            .bind(dispatch)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn spent_on(&self, dispatch: &str) -> Result<bool, SqlError> {
        Ok(
            sqlx::query("SELECT dispatch FROM spend WHERE dispatch = $1")
                .bind(dispatch)
                .fetch_optional(&mut *self.connection().await?)
                .await?
                .is_some(),
        )
    }

    /// The dispatch's agent has ended: it no longer counts as in flight.
    pub async fn spend_ended(&self, dispatch: &str) -> Result<(), SqlError> {
        sqlx::query("UPDATE spend SET ended_ms = $1 WHERE dispatch = $2 AND ended_ms IS NULL")
            .bind(now_ms())
            .bind(dispatch)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// What the dispatch's agent reported it cost: its dollars from now on,
    /// in place of what it was expected to cost.
    pub async fn spend_priced(&self, dispatch: &str, usd: Usd) -> Result<(), SqlError> {
        sqlx::query("UPDATE spend SET usd = $1 WHERE dispatch = $2")
            .bind(usd.micros() as i64)
            .bind(dispatch)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// The dispatch was never launched (GitHub refused it, or it was cancelled
    /// first): nothing was spent, and it leaves the line if it stood in it.
    pub async fn spend_refunded(&self, dispatch: &str) -> Result<(), SqlError> {
        sqlx::query("UPDATE spend SET cost = 0, usd = 0, ended_ms = $1 WHERE dispatch = $2")
            .bind(now_ms())
            .bind(dispatch)
            .execute(&mut *self.connection().await?)
            .await?;
        sqlx::query("DELETE FROM spend_waiting WHERE dispatch = $1")
            .bind(dispatch)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// The installation's dispatches since `since`, oldest first.
    pub async fn spend_since(
        &self,
        installation: i64,
        since: DateTime<Utc>,
    ) -> Result<Vec<SpendRecord>, SqlError> {
        let rows = sqlx::query("SELECT repo, op, model, cost, usd, at_ms, ended_ms FROM spend WHERE installation = $1 AND at_ms > $2 ORDER BY at_ms, dispatch")
            .bind(installation)
            .bind(since.timestamp_millis())
            .fetch_all(&mut *self.connection().await?)
            .await?;
        Ok(rows
            .iter()
            .map(|r| SpendRecord {
                repo: r.get("repo"),
                op: r.get("op"),
                model: r.get("model"),
                cost: r.get::<i64, _>("cost").max(0) as u64,
                usd: Usd::from_micros(r.get::<i64, _>("usd").max(0) as u64),
                at: at(r.get("at_ms")),
                ended: r.get::<Option<i64>, _>("ended_ms").is_some(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_fits_when_enough_of_the_window_has_rolled_out() {
        let t0 = 1_000_000;
        let window = [(t0, 10), (t0 + 5, 30), (t0 + 9, 10)];
        // 50 of 60 spent: a 30 fits once 10 + 30 have rolled out, not 10 alone.
        assert_eq!(fits_at(&window, 50, 30, 60), Some(at(t0 + 5 + DAY_MS)));
        assert_eq!(fits_at(&window, 50, 10, 60), Some(at(t0 + DAY_MS)));
        assert_eq!(fits_at(&window, 50, 70, 60), None, "never fits");
    }
}
