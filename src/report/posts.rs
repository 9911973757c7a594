//! Text that appears on GitHub: the sticky status comment, a sprint's pull
//! request description, a sprint's check-run summary, a unit's sub-issue. Each
//! carries a hidden marker so the service finds its own words again instead of
//! posting twice.

use super::{cell, status_table_linked};
use crate::engine::{
    AgentReport, CriterionOutcome, CriterionResult, DispatchId, OperationState, SprintStatus,
};
use crate::plan::{Sprint, WorkUnit};
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

/// The marker of an operation's status comment.
pub fn status_marker(op: &str) -> String {
    format!("<!-- supervise:status {op} -->")
}

/// The marker of a unit's sub-issue.
pub fn unit_marker(op: &str, unit: &str) -> String {
    format!("<!-- supervise:unit {op}/{unit} -->")
}

/// The marker of a one-off notice (BLOCKED, final report), keyed by its outbox id.
pub fn notice_marker(op: &str, key: &str) -> String {
    format!("<!-- supervise:notice {op}/{key} -->")
}

/// Engine and report texts name the command line (`supervise resume api`); on
/// GitHub the same command is a comment (`/supervise resume api`).
pub fn as_comment_commands(text: &str) -> String {
    text.replace("`supervise resume", "`/supervise resume")
        .replace("To retry: supervise resume", "To retry: /supervise resume")
        .replace(
            "To resume: supervise resume",
            "To resume: /supervise resume",
        )
}

/// A file on the operation's integration branch, linked relative to the
/// issue or pull request the text appears on (`…/issues/N` → `…/blob/…`),
/// so the link holds on any GitHub host.
pub fn file_link(st: &OperationState, path: &str) -> String {
    format!(
        "[`{path}`](../blob/{}/{path})",
        crate::contract::integration_branch(&st.id.0)
    )
}

/// The §13 table as GitHub shows it: comment commands, runs and files linked.
pub fn status_table(
    st: &OperationState,
    now: DateTime<Utc>,
    link: &dyn Fn(&DispatchId) -> Option<String>,
) -> String {
    as_comment_commands(&status_table_linked(st, now, link, &|p| file_link(st, p)))
}

/// The sticky status comment: the §13 table with active agents linked to their
/// runs, then `spend` (the line on spend above the operation), if any.
pub fn status_comment(
    st: &OperationState,
    now: DateTime<Utc>,
    link: &dyn Fn(&DispatchId) -> Option<String>,
    spend: Option<&str>,
) -> String {
    let mut out = status_table(st, now, link);
    if let Some(line) = spend {
        out.push('\n');
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(
        "\n<sub>Edited in place as the operation moves. Commands: `/supervise status`, `stop`, `killall`, `resume [unit]`.</sub>\n",
    );
    out.push_str(&status_marker(&st.id.0));
    out
}

/// The status comment's line while the installation is near GitHub's rate
/// limit: what is slowed, and until when.
pub fn slowed_line(remaining: u64, limit: u64, reset_unix: i64) -> String {
    let reset = DateTime::<Utc>::from_timestamp(reset_unix, 0)
        .map(|t| t.format("%H:%M UTC").to_string())
        .unwrap_or_else(|| "the reset".into());
    format!(
        "⏳ This installation is near GitHub's rate limit ({remaining} of {limit} requests left until {reset}): checks on runs in flight and edits of this comment are slowed until then; webhooks still move the operation at once."
    )
}

fn criterion_line(c: &crate::plan::Criterion) -> String {
    match &c.command {
        Some(cmd) if cmd.trim() != c.text.trim() => format!("{} — `{}`", c.text, cmd.trim()),
        _ => c.text.clone(),
    }
}

/// A sprint's pull request: what it is for, and its exit criteria to tick.
pub fn sprint_pr_body(op: &str, unit: &WorkUnit, sprint: &Sprint, first_run: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "**{}** · Sprint {} of {} — {}\n",
        unit.name,
        sprint.id,
        unit.sprints.len(),
        sprint.name
    );
    if !sprint.tasks.is_empty() {
        out.push_str("### Tasks\n");
        for t in &sprint.tasks {
            let _ = writeln!(out, "- {t}");
        }
        out.push('\n');
    }
    out.push_str("### Exit criteria\n");
    if sprint.exit_criteria.is_empty() {
        out.push_str("_The plan gives none: the agent's report and commits decide._\n");
    }
    for c in &sprint.exit_criteria {
        let _ = writeln!(out, "- [ ] {} (plan line {})", criterion_line(c), c.line);
    }
    let _ = writeln!(
        out,
        "\nOpened when the sprint's first attempt ended ([its run]({first_run})); each attempt's prompt is an input of its workflow run. Sprint Supervisor merges this pull request into the operation's integration branch once the sprint is verified; the check run `supervise` on its head shows each criterion.\n\n<!-- supervise:sprint {op}/{}/{} -->",
        unit.name, sprint.id
    );
    out
}

fn outcome_mark(o: CriterionOutcome) -> &'static str {
    match o {
        CriterionOutcome::Passed => "✓ passed",
        CriterionOutcome::Failed => "✗ failed",
        CriterionOutcome::Unverified => "☐ needs a person",
    }
}

/// The check run of one attempt: its conclusion, title and per-criterion table.
pub fn sprint_check(
    unit: &str,
    sprint: &Sprint,
    attempt: u32,
    model: &str,
    report: &AgentReport,
    verdict: Option<SprintStatus>,
) -> (&'static str, String, String) {
    let criteria: &[CriterionResult] = &report.evidence.criteria;
    let failed = criteria
        .iter()
        .filter(|c| c.outcome == CriterionOutcome::Failed)
        .count();
    // Completed with nothing a machine checked: neutral, never success,
    // and the title says whose word it is.
    let own = crate::engine::cascade::own_results(sprint, criteria);
    let unverified = own
        .iter()
        .filter(|c| c.outcome == CriterionOutcome::Unverified)
        .count();
    let on_word = !own.iter().any(|c| c.outcome == CriterionOutcome::Passed);
    let conclusion = match verdict {
        Some(SprintStatus::Completed) if on_word => "neutral",
        Some(SprintStatus::Completed) => "success",
        Some(SprintStatus::Partial) => "neutral",
        _ => "failure",
    };
    let state = match verdict {
        Some(SprintStatus::Completed) if on_word => crate::engine::agents_word_words(unverified),
        // The attempt's end, in words: BACKOFF and FATAL are the sprint's
        // states, not what a reader of one attempt's check asks.
        Some(SprintStatus::Backoff) => "FAILED, to be retried".to_string(),
        Some(SprintStatus::Fatal) => "FAILED, retries spent".to_string(),
        Some(SprintStatus::Partial) => "PARTIAL, to be continued".to_string(),
        v => v.map_or("not verified".to_string(), |v| v.to_string()),
    };
    let title = format!(
        "{unit} Sprint {}: {state} — {} of {} criteria passed",
        sprint.id,
        criteria.len() - failed,
        criteria.len()
    );
    let mut s = String::new();
    let used = report
        .usage
        .map(|u| format!(" · used, as its CLI reported: {}", u.said()));
    let _ = writeln!(
        s,
        "Attempt {attempt} on `{model}` · agent exit {} · {} commit(s) since dispatch{}{}\n",
        report
            .exit_code
            .map_or("unknown".to_string(), |c| c.to_string()),
        report.evidence.commits.len(),
        match report.evidence.ci_passed {
            Some(true) => " · repository CI green",
            Some(false) => " · repository CI red",
            None => "",
        },
        used.unwrap_or_default()
    );
    s.push_str("| Line | Criterion | Result | Detail |\n|---|---|---|---|\n");
    for c in criteria {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            c.line,
            cell(&c.text),
            outcome_mark(c.outcome),
            cell(c.detail.lines().next().unwrap_or(""))
        );
    }
    if criteria.is_empty() {
        s.push_str("| — | (no machine-checkable criteria) | — | — |\n");
    }
    if let Some(why) = &report.evidence.refused {
        let _ = writeln!(s, "\n**Refused:** {why}");
    }
    if let Some(hosts) = crate::engine::provider::network_refused(&report.output_tail) {
        let _ = writeln!(
            s,
            "\n**Network:** the agent's sandbox refused connections to {hosts}; allow a domain with `network: allowed_domains:` in .github/supervise.yml"
        );
    }
    if let Some(conflict) = &report.evidence.merge_conflict {
        let _ = writeln!(
            s,
            "\nDoes not merge into the integration branch: {conflict}"
        );
    }
    (conclusion, title, s)
}

/// A unit's sub-issue.
pub fn unit_issue_body(op: &str, unit: &WorkUnit, parent_issue: i64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Work unit **{}** of operation `{op}` (#{parent_issue}).\n",
        unit.name
    );
    if !unit.depends_on.is_empty() {
        let _ = writeln!(out, "Depends on: {}\n", unit.depends_on.join(", "));
    }
    for s in &unit.sprints {
        let _ = writeln!(out, "- [ ] Sprint {}: {}", s.id, s.name);
    }
    let _ = write!(
        out,
        "\nClosed by Sprint Supervisor when every sprint is verified.\n\n{}",
        unit_marker(op, &unit.name)
    );
    out
}

/// The check run `supervise: final verification` of `v`: its conclusion,
/// title and summary, a line per criterion (a regression with the merge
/// that broke it). `how` says who checked what, and `not_run` marks a
/// criterion that was not run there.
pub fn final_check(
    v: &crate::engine::HeadVerification,
    how: &str,
    not_run: &str,
) -> (&'static str, String, String) {
    use crate::engine::CriterionOutcome;
    let failing = v.failures().count();
    let lines: Vec<String> = v
        .checks
        .iter()
        .map(|c| {
            let mark = match c.result.outcome {
                CriterionOutcome::Passed => "✓",
                CriterionOutcome::Failed => "✗",
                CriterionOutcome::Unverified => not_run,
            };
            let by = c
                .broken_by
                .as_deref()
                .map(|b| format!(" — broken by {b}"))
                .unwrap_or_default();
            format!(
                "- {mark} {} Sprint {}: {}{by}",
                c.unit, c.sprint, c.result.text
            )
        })
        .collect();
    let (conclusion, title) = if failing == 0 {
        (
            "success",
            "Every criterion holds on the final head".to_string(),
        )
    } else {
        (
            "failure",
            format!("{failing} criteria fail on the final head"),
        )
    };
    (conclusion, title, format!("{how}\n\n{}", lines.join("\n")))
}
