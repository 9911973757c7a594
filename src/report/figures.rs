//! The operation's figures, each computed in one place from the state its
//! log builds: the status table, COMPLETE_<NAME>.md, the final summary and
//! the web API show these, never a count of their own of the same thing.

use crate::engine::{ModelTier, OperationState, SprintRun};
use chrono::{DateTime, Utc};

/// Paid dispatches on each model tier, retries and continuations included:
/// what the relative cost is the sum of.
pub fn dispatches(st: &OperationState) -> Vec<(ModelTier, usize)> {
    ModelTier::ALL
        .iter()
        .map(|&t| (t, st.charged_at(t).0))
        .collect()
}

/// `haiku×3, sonnet×1, opus×1`: paid dispatches by tier.
pub fn usage_line(st: &OperationState) -> String {
    let d = dispatches(st);
    if d.iter().all(|(_, n)| *n == 0) {
        return "(none yet)".into();
    }
    d.iter()
        .map(|(t, n)| format!("{}×{n}", t.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The operation's wall-clock span so far: from its first dispatch (its
/// start when none went out) to the last attempt's or sprint's end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Span {
    pub fn secs(&self) -> f64 {
        ((self.end - self.start).num_milliseconds() as f64 / 1000.0).max(0.0)
    }
}

/// The span of work done: None before any attempt ended or sprint completed.
pub fn span(st: &OperationState) -> Option<Span> {
    let sprints = || st.units.iter().flat_map(|u| &u.sprints);
    let end = sprints()
        .flat_map(|s| {
            s.history
                .iter()
                .map(|h| h.finished_at)
                .chain(s.completion.as_ref().map(|c| c.completed_at))
        })
        .max()?;
    let start = sprints()
        .filter_map(SprintRun::first_dispatched_at)
        .min()
        .unwrap_or(st.started_at)
        .min(end);
    Some(Span { start, end })
}

/// A sprint's paid dispatches: every attempt and continuation an agent was
/// paid for.
pub fn paid_attempts(s: &SprintRun) -> usize {
    s.history.iter().filter(|h| h.charged).count()
}
