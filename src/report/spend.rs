//! What operations spent, in the relative units of `budget` (haiku 1, sonnet
//! 10, opus 30 per dispatch by default): every dispatch counts, retries and
//! the one in flight included, at the cost its operation was configured with.

use crate::engine::OperationState;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpendRow {
    pub operation: String,
    pub name: String,
    pub status: String,
    /// Dispatched in the 24 hours before `now`.
    pub day: u64,
    /// Dispatched in the 7 days before `now`.
    pub week: u64,
    pub total: u64,
    pub budget: Option<u64>,
}

/// One row per operation, newest first.
pub fn spend(states: &[OperationState], now: DateTime<Utc>) -> Vec<SpendRow> {
    let mut rows: Vec<(DateTime<Utc>, SpendRow)> = states
        .iter()
        .map(|st| {
            let dispatches = st.units.iter().flat_map(|u| &u.sprints).flat_map(|s| {
                s.history
                    .iter()
                    .map(|h| (h.dispatched_at, h.tier))
                    .chain(s.active.iter().map(|a| (a.dispatched_at, a.tier)))
            });
            let (mut day, mut week, mut total) = (0, 0, 0);
            for (at, tier) in dispatches {
                let cost = st.config.cost(tier);
                total += cost;
                if now - at <= Duration::days(7) {
                    week += cost;
                }
                if now - at <= Duration::days(1) {
                    day += cost;
                }
            }
            (
                st.started_at,
                SpendRow {
                    operation: st.id.0.clone(),
                    name: st.name.clone(),
                    status: st.status.to_string(),
                    day,
                    week,
                    total,
                    budget: st.config.budget,
                },
            )
        })
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0));
    rows.into_iter().map(|(_, r)| r).collect()
}

pub fn spend_table(rows: &[SpendRow]) -> String {
    let mut out = String::from(
        "| Operation | Name | Status | Last 24 h | Last 7 days | Total | Budget |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}x | {}x | {}x | {} |",
            r.operation,
            r.name,
            r.status,
            r.day,
            r.week,
            r.total,
            r.budget.map_or("—".to_string(), |b| format!("{b}x"))
        );
    }
    let (day, week) = rows
        .iter()
        .fold((0, 0), |(d, w), r| (d + r.day, w + r.week));
    let _ = writeln!(out, "| **all** | | | **{day}x** | **{week}x** | | |");
    out
}
