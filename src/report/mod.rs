//! Text for people, from state alone: the status table and BLOCKED notices (§13),
//! `SUPERVISOR_STATE.md` (§8), `COMPLETE_<NAME>.md` with the final verification and
//! cadence analysis (§14), and the kill summary (§11). Pure: no I/O, no clock.

mod complete;
mod estimate;
pub mod figures;
pub mod money;
pub mod plan_check;
pub mod posts;
mod spend;
mod state_md;
mod status;
pub mod web;

pub use complete::{complete_file_name, complete_md, final_summary, verification, Verification};
pub use estimate::{estimate_line, estimate_text};
pub use spend::{
    day_line, spend, spend_comment, spend_json, spend_table, DailyCaps, DayTotals, SpendRecord,
    SpendRow, SpendTotals,
};
pub use state_md::supervisor_state_md;
pub use status::{
    blocked_notices, completion_summary, kill_summary, status_board, status_table,
    status_table_linked,
};

use chrono::{DateTime, Utc};

/// A Markdown table cell: pipes escaped, lines joined.
pub(crate) fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `a, b, c`, or `empty` when there is nothing to list.
pub(crate) fn list_or(items: &[impl AsRef<str>], sep: &str, empty: &str) -> String {
    if items.is_empty() {
        empty.to_string()
    } else {
        items
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(sep)
    }
}

pub(crate) fn tick(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

/// The sign a notice of this kind starts with, the same wherever it is shown.
pub fn notice_prefix(kind: crate::engine::NoticeKind) -> &'static str {
    use crate::engine::NoticeKind::*;
    match kind {
        Blocked | VerificationFailed => "⛔ ",
        AwaitingReview => "👀 ",
        Completed => "✅ ",
        BudgetReached => "💰 ",
        Held => "⏸ ",
        Killed => "🛑 ",
        WorkLost => "⚠️ ",
        DeferredWaiting | ManualCheck | Draining => "",
    }
}

/// One Decisions Log entry as a line: `12:00:01 api Sprint 2: decision — rationale`.
pub fn decision_line(d: &crate::engine::DecisionEntry) -> String {
    format!(
        "{} {}{}: {} — {}",
        d.at.format("%H:%M:%S"),
        d.unit.as_deref().unwrap_or("operation"),
        d.sprint
            .as_ref()
            .map(|s| format!(" Sprint {s}"))
            .unwrap_or_default(),
        d.decision,
        d.rationale
    )
}

/// [`decision_line`] as a person at a terminal reads it: the reasons one
/// acts on, without the complexity score's arithmetic (the decision log
/// and `--verbose` keep every reason).
pub fn person_line(d: &crate::engine::DecisionEntry) -> String {
    let reasons: Vec<&str> = d.rationale.split("; ").collect();
    let kept: Vec<&str> = reasons
        .iter()
        .copied()
        .filter(|r| !r.starts_with("complexity score"))
        .collect();
    let rationale = match (kept.is_empty(), reasons.first()) {
        (true, Some(score)) => score.split(" (").next().unwrap_or(score).to_string(),
        _ => kept.join("; "),
    };
    let shown = crate::engine::DecisionEntry {
        rationale,
        ..d.clone()
    };
    decision_line(&shown)
}

pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// "<X> minutes", or hours above an hour (§14b).
pub(crate) fn duration(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs >= 3600.0 {
        format!("{:.1} hours", secs / 3600.0)
    } else if secs >= 60.0 {
        format!("{} minutes", (secs / 60.0).round() as i64)
    } else {
        format!("{secs:.1} seconds")
    }
}

pub(crate) fn elapsed(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {:02}s", secs / 60, secs % 60),
        _ => format!("{}h {:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// `text` with every `supervise resume [unit]` said as `command`.
pub fn resume_as(text: &str, command: &str) -> String {
    const WORDS: &str = "supervise resume";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(WORDS) {
        out.push_str(&rest[..i]);
        out.push_str(command);
        rest = &rest[i + WORDS.len()..];
        // The unit argument, if any: a space and a word (quoted or not).
        if let Some(arg) = rest.strip_prefix(' ') {
            let end = if let Some(q) = arg.strip_prefix('\'') {
                q.find('\'').map_or(arg.len(), |j| j + 2)
            } else {
                arg.find(|c: char| c.is_whitespace() || c == '`' || c == ')')
                    .unwrap_or(arg.len())
            };
            let word = &arg[..end];
            if !word.is_empty() && !word.starts_with("--") && !word.starts_with('(') {
                rest = &arg[end..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod person_line_tests {
    use super::*;

    #[test]
    fn a_person_reads_the_reasons_without_the_scores_arithmetic() {
        let d = |rationale: &str| crate::engine::DecisionEntry {
            at: chrono::DateTime::from_timestamp(0, 0).unwrap(),
            unit: Some("core".into()),
            sprint: crate::plan::SprintId::parse("1"),
            decision: "Model: sonnet (attempt 2/3, Retry)".into(),
            rationale: rationale.into(),
        };
        let retry = d(
            "complexity score 4 (turns +3, risk +1); retry after a failure on haiku: one tier up",
        );
        assert_eq!(
            person_line(&retry),
            "00:00:00 core Sprint 1: Model: sonnet (attempt 2/3, Retry) — retry after a failure on haiku: one tier up"
        );
        assert!(
            decision_line(&retry).contains("(turns +3, risk +1)"),
            "the log keeps it"
        );
        let fresh = d("complexity score 11 (turns +3, foundation +5, dependents +2, risk +1)");
        assert!(
            person_line(&fresh).ends_with("— complexity score 11"),
            "{}",
            person_line(&fresh)
        );
    }
}

#[cfg(test)]
mod resume_tests {
    #[test]
    fn resume_is_said_as_the_command_that_goes_on() {
        let said = super::resume_as(
            "To retry: supervise resume api\n(resume resets …) Run `supervise resume 'my unit'` or supervise resume.\nTo resume: supervise resume\n",
            "supervise solve",
        );
        assert_eq!(
            said,
            "To retry: supervise solve\n(resume resets …) Run `supervise solve` or supervise solve.\nTo resume: supervise solve\n"
        );
    }
}
