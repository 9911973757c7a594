//! What the service knows of each dispatch's workflow run and of each work
//! unit's sub-issue: the records reconciliation compares with GitHub.

use super::{SqlError, SqlStore};
use sqlx::any::AnyRow;
use sqlx::Row;

/// The columns `run_row` reads.
macro_rules! run_select {
    () => {
        "SELECT dispatch, op, run_id, html_url, base_sha, verified_sha, pull FROM op_runs"
    };
}
/// A run by its GitHub id: on every `workflow_run` webhook.
pub(super) const RUN_BY_ID: &str = concat!(run_select!(), " WHERE run_id = $1");
/// An operation's runs: on every status publication (the links).
pub(super) const RUNS_OF: &str = concat!(run_select!(), " WHERE op = $1");

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

impl SqlStore {
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
        let row = sqlx::query(RUN_BY_ID)
            .bind(run_id)
            .fetch_optional(&mut *self.connection().await?)
            .await?;
        Ok(row.as_ref().map(Self::run_row))
    }

    pub async fn runs_of(&self, op: &str) -> Result<Vec<RunRow>, SqlError> {
        let rows = sqlx::query(RUNS_OF)
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
}
