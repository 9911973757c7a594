//! What operations spent, in the relative units of `budget` (haiku 1, sonnet
//! 10, opus 30 per dispatch by default): every launched dispatch counts,
//! retries and the one in flight included, at the cost its operation was
//! configured with; one that never launched, or whose agent command could
//! not run, costs nothing. Beside them, the dollars of the attempts that
//! have a figure — their CLI's own (Claude Code gives one), else their
//! tokens at the `prices:` table — summed over the same periods.

use crate::engine::usage::Usd;
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
    /// Dollars the agents reported, over the same three periods.
    pub usd: Dollars,
}

/// Dollars the agents' CLIs reported, in the 24 hours and 7 days before
/// `now` and in all; `attempts`: how many attempts priced themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Dollars {
    pub day: Usd,
    pub week: Usd,
    pub total: Usd,
    pub attempts: usize,
}

impl Dollars {
    fn of(st: &OperationState, now: DateTime<Utc>) -> Dollars {
        st.priced_attempts()
            .map(|a| (a.3, a.4))
            .fold(Dollars::default(), |d, (at, usd)| Dollars {
                day: if now - at <= Duration::days(1) {
                    d.day + usd
                } else {
                    d.day
                },
                week: if now - at <= Duration::days(7) {
                    d.week + usd
                } else {
                    d.week
                },
                total: d.total + usd,
                attempts: d.attempts + 1,
            })
    }

    fn plus(self, o: Dollars) -> Dollars {
        Dollars {
            day: self.day + o.day,
            week: self.week + o.week,
            total: self.total + o.total,
            attempts: self.attempts + o.attempts,
        }
    }

    /// `$0.01 / $0.03 / $0.03`, or `—` when no attempt priced itself.
    fn cell(self) -> String {
        if self.attempts == 0 {
            "—".to_string()
        } else {
            format!("{} / {} / {}", self.day, self.week, self.total)
        }
    }
}

/// One row per operation, newest first.
pub fn spend(states: &[OperationState], now: DateTime<Utc>) -> Vec<SpendRow> {
    let mut rows: Vec<(DateTime<Utc>, SpendRow)> = states
        .iter()
        .map(|st| {
            let (mut day, mut week, mut total) = (0, 0, 0);
            for (at, tier) in st.charged_dispatches() {
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
                    usd: Dollars::of(st, now),
                },
            )
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The "all" row: the sums of every operation's columns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpendTotals {
    pub day: u64,
    pub week: u64,
    pub total: u64,
    pub usd: Dollars,
}

impl SpendTotals {
    pub fn of(rows: &[SpendRow]) -> Self {
        rows.iter().fold(Self::default(), |t, r| Self {
            day: t.day + r.day,
            week: t.week + r.week,
            total: t.total + r.total,
            usd: t.usd.plus(r.usd),
        })
    }
}

/// `supervise spend --json`: the rows the table shows and its "all" row.
pub fn spend_json(rows: &[SpendRow]) -> serde_json::Value {
    serde_json::json!({ "operations": rows, "all": SpendTotals::of(rows) })
}

pub fn spend_table(rows: &[SpendRow]) -> String {
    let mut out = String::from(
        "| Operation | Name | Status | Last 24 h | Last 7 days | Total | Budget | Reported by agents (24 h / 7 days / total) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}× | {}× | {}× | {} | {} |",
            r.operation,
            r.name,
            r.status,
            r.day,
            r.week,
            r.total,
            r.budget.map_or("—".to_string(), |b| format!("{b}×")),
            r.usd.cell()
        );
    }
    let SpendTotals {
        day,
        week,
        total,
        usd,
    } = SpendTotals::of(rows);
    let _ = writeln!(
        out,
        "| **all** | | | **{day}×** | **{week}×** | **{total}×** | | **{}** |",
        usd.cell()
    );
    if usd.attempts > 0 {
        let _ = writeln!(
            out,
            "\nDollars are the {} attempt(s) with a figure: their agent's own, else their tokens at the prices: table. The budget in units counts every dispatch, in the units on the left.",
            usd.attempts
        );
    }
    out
}

/// One dispatch an installation's operations made, as the service records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendRecord {
    pub repo: String,
    pub op: String,
    pub model: String,
    pub cost: u64,
    /// What its agent reported it cost, else what it was expected to.
    pub usd: Usd,
    pub at: DateTime<Utc>,
    /// Its agent has ended (or never ran).
    pub ended: bool,
}

/// The daily caps that apply to a repository on the service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DailyCaps {
    pub installation: Option<u64>,
    pub repo: Option<u64>,
    pub installation_usd: Option<Usd>,
    pub repo_usd: Option<Usd>,
    /// What one dispatch of each tier (haiku, sonnet, opus) was charged
    /// against them: the operator's prices.
    pub prices: [u64; 3],
}

fn of_cap(spent: u64, cap: Option<u64>) -> String {
    match cap {
        Some(c) => format!("{spent}× of a {c}× daily budget"),
        None => format!("{spent}×"),
    }
}

/// The dollars beside the units, where a cap is in dollars (elsewhere a
/// dispatch's dollars may be only what it was expected to cost).
fn of_usd_cap(spent: Usd, cap: Option<Usd>) -> String {
    cap.map_or_else(String::new, |c| format!(" ({spent} of a {c} daily budget)"))
}

/// The status comment's line on spend above the operation: the last 24
/// hours of the repository and, on an App installation, of the installation.
pub fn day_line(
    repo: &str,
    installation: Option<u64>,
    spent: DayTotals,
    caps: DailyCaps,
) -> String {
    let mut line = format!(
        "Spent in the last 24 h: {repo} {}{}",
        of_cap(spent.repo, caps.repo),
        of_usd_cap(spent.repo_usd, caps.repo_usd)
    );
    if let Some(id) = installation {
        let _ = write!(
            line,
            " · installation {id} {}{}",
            of_cap(spent.installation, caps.installation),
            of_usd_cap(spent.installation_usd, caps.installation_usd)
        );
    }
    line
}

/// What was dispatched in the last 24 hours, summed by the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DayTotals {
    /// By the repository's operations.
    pub repo: u64,
    /// By all the installation's operations.
    pub installation: u64,
    /// The same in dollars: reported, or expected while not reported.
    pub repo_usd: Usd,
    pub installation_usd: Usd,
}

/// `/supervise spend`: this repository's operations over the last day and
/// week, and the installation's totals — never another repository's name
/// (whoever may comment here may not see the others).
pub fn spend_comment(
    repo: &str,
    records: &[SpendRecord],
    caps: DailyCaps,
    now: DateTime<Utc>,
) -> String {
    /// One operation's row: units and dollars in the last day and week.
    #[derive(Default)]
    struct Row {
        op: String,
        day: u64,
        week: u64,
        usd_day: Usd,
        usd_week: Usd,
        n: usize,
        running: usize,
    }
    let mut per_op: Vec<Row> = Vec::new();
    let (mut all_day, mut all_week) = (0, 0);
    let (mut all_usd_day, mut all_usd_week) = (Usd::ZERO, Usd::ZERO);
    for r in records {
        let in_day = now - r.at <= Duration::days(1);
        let in_week = now - r.at <= Duration::days(7);
        if in_day {
            all_day += r.cost;
            all_usd_day = all_usd_day + r.usd;
        }
        if in_week {
            all_week += r.cost;
            all_usd_week = all_usd_week + r.usd;
        }
        if r.repo != repo || !in_week {
            continue;
        }
        let i = match per_op.iter().position(|p| p.op == r.op) {
            Some(i) => i,
            None => {
                per_op.push(Row {
                    op: r.op.clone(),
                    ..Row::default()
                });
                per_op.len() - 1
            }
        };
        let row = &mut per_op[i];
        row.week += r.cost;
        row.usd_week = row.usd_week + r.usd;
        row.n += 1;
        if in_day {
            row.day += r.cost;
            row.usd_day = row.usd_day + r.usd;
        }
        if !r.ended {
            row.running += 1;
        }
    }
    let mut out = format!("## Spend of `{repo}`\n\n");
    if per_op.is_empty() {
        out.push_str("No dispatches in the last 7 days.\n");
    } else {
        out.push_str("| Operation | Last 24 h | Last 7 days | Dollars, 24 h / 7 days | Dispatches | Running now |\n|---|---|---|---|---|---|\n");
        for r in &per_op {
            let _ = writeln!(
                out,
                "| `{}` | {}× | {}× | {} / {} | {} | {} |",
                r.op, r.day, r.week, r.usd_day, r.usd_week, r.n, r.running
            );
        }
        let sum = per_op.iter().fold(Row::default(), |a, r| Row {
            day: a.day + r.day,
            week: a.week + r.week,
            usd_day: a.usd_day + r.usd_day,
            usd_week: a.usd_week + r.usd_week,
            ..a
        });
        let _ = writeln!(
            out,
            "| **all** | **{}×** | **{}×** | **{} / {}** | | |",
            sum.day, sum.week, sum.usd_day, sum.usd_week
        );
    }
    let repo_day: u64 = per_op.iter().map(|p| p.day).sum();
    let repo_usd_day: Usd = per_op.iter().map(|p| p.usd_day).sum();
    let _ = writeln!(
        out,
        "\nThis repository, last 24 h: {}{}.",
        of_cap(repo_day, caps.repo),
        of_usd_cap(repo_usd_day, caps.repo_usd)
    );
    let _ = writeln!(
        out,
        "The installation (every repository it covers): {}{} in the last 24 h, {all_week}× ({all_usd_week}) in 7 days.",
        of_cap(all_day, caps.installation),
        of_usd_cap(all_usd_day, caps.installation_usd)
    );
    let [h, so, op] = caps.prices;
    let _ = writeln!(
        out,
        "\n<sub>Charged per dispatch against these budgets, at the service operator's prices: haiku {h}, sonnet {so}, opus {op}; retries count. Dollars are what each agent reported its attempt cost, and what it is expected to cost while it has not.</sub>"
    );
    out
}
