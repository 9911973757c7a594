//! `SUPERVISOR_STATE.md` exactly as §8 lays it out.

use super::{cell, ts};
use crate::engine::{DispatchId, OperationState, UnitStatus};
use std::fmt::Write as _;

/// Rows of the Decisions Log kept in the file; the event log keeps them all.
const DECISIONS_SHOWN: usize = 200;

pub fn supervisor_state_md(
    st: &OperationState,
    output_file: &dyn Fn(&DispatchId) -> String,
) -> String {
    let plan = &st.plan;
    let mut out = String::new();
    let _ = writeln!(out, "# Supervisor State — {}\n", st.name);
    out.push_str("<!-- Written by Sprint Supervisor after every event. Edits are overwritten; the event log in .supervise/ is the record. -->\n\n");
    let dep = plan.dependency_structure.as_str();
    let mode = plan.dispatch_mode.as_str();
    let _ = writeln!(
        out,
        "## Plan Summary\n- Work units: {}\n- Total sprints: {}\n- Dependency structure: {dep}\n- Dispatch mode: {mode}\n",
        plan.work_units.len(),
        plan.total_sprints()
    );
    out.push_str("## Work Units\n| Name | Directory | Sprints | Dependencies |\n|------|-----------|---------|-------------|\n");
    for u in &plan.work_units {
        let deps = crate::text::names_or(&u.depends_on, "none");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(&u.name),
            cell(u.directory.as_deref().unwrap_or(".")),
            u.sprints.len(),
            cell(&deps)
        );
    }
    let _ = writeln!(out, "\n## Overall Status\nStatus: {}", st.status);
    if let Some(h) = st
        .head_verification
        .as_ref()
        .filter(|_| st.head_failures() > 0)
    {
        let _ = writeln!(
            out,
            "Verdict: VERIFICATION FAILED — {} of {} criteria fail on the final head {}",
            st.head_failures(),
            h.checks.len(),
            crate::text::short_id(&h.head)
        );
    }
    if !st.status_reason.is_empty() {
        let _ = writeln!(out, "Reason: {}", st.status_reason);
    }
    let _ = writeln!(
        out,
        "Operation: {} ({})\nStarted: {}\nLast updated: {}",
        st.name,
        st.id,
        ts(st.started_at),
        ts(st.updated_at)
    );
    let _ = writeln!(
        out,
        "max_retries: {}\nRelative cost spent: {}×{}\n",
        st.config.max_retries,
        st.cost_spent,
        st.config
            .budget
            .map(|b| format!(" of {b}× budget"))
            .unwrap_or_default()
    );
    let notices = super::blocked_notices(st);
    if !notices.is_empty() {
        let _ = writeln!(out, "## BLOCKED\n```\n{}```\n", notices);
    }
    if let Some(w) = &st.workflow {
        let _ = writeln!(out, "## Workflow\n{}\n", w.summary(st).join("\n"));
        let artifacts = w.artifacts(st);
        if !artifacts.is_empty() {
            out.push_str("Artifacts:\n");
            for a in artifacts {
                let _ = writeln!(out, "- {a}");
            }
            out.push('\n');
        }
    }
    for (i, u) in st.units.iter().enumerate() {
        let pu = &plan.work_units[i];
        let _ = writeln!(out, "### {}", u.name);
        let _ = writeln!(out, "- Work unit state: {}", u.status);
        let (cur, sprint_state, kind, model, score, attempt) = match u.current() {
            Some(c) if u.status != UnitStatus::NotStarted => {
                let s = &u.sprints[c];
                let tier = s.tier();
                let score = s.score();
                (
                    c + 1,
                    s.status().to_string(),
                    pu.sprints[c].kind.to_string(),
                    tier.map_or("—", |t| t.as_str()).to_string(),
                    score.map_or("—".into(), |s| s.to_string()),
                    s.shown_attempt(st.max_attempts(i)),
                )
            }
            Some(_) => (
                0,
                "PENDING".into(),
                pu.sprints[0].kind.to_string(),
                "—".into(),
                "—".into(),
                1,
            ),
            // A finished unit keeps the model and attempt of its last sprint.
            None => {
                let last = u.sprints.last().and_then(|s| s.completion.as_ref());
                (
                    u.sprints.len(),
                    "COMPLETED".into(),
                    pu.sprints
                        .last()
                        .map_or("code".into(), |s| s.kind.to_string()),
                    last.map_or("—", |c| c.tier.as_str()).to_string(),
                    last.map_or("—".into(), |c| c.score.to_string()),
                    last.map_or(1, |c| c.attempts),
                )
            }
        };
        let _ = writeln!(out, "- Current sprint: {cur} of {}", u.sprints.len());
        let _ = writeln!(out, "- Sprint state: {sprint_state}\n- Sprint type: {kind}\n- Model: {model}\n- Complexity score: {score}");
        let _ = writeln!(out, "- Attempt: {attempt} of {}", st.max_attempts(i));
        let last = u.sprints.iter().rev().find_map(|s| {
            s.completion
                .as_ref()
                .map(|c| format!("Sprint {} COMPLETED at {}", s.id, ts(c.completed_at)))
        });
        let _ = writeln!(
            out,
            "- Last verified: {}",
            last.unwrap_or_else(|| "nothing yet".into())
        );
        let mut notes = u.notes.clone();
        if let Some(c) = u.current() {
            if let Some(f) = &u.sprints[c].last_failure {
                notes.push(format!("last failure: {}", f.lines().next().unwrap_or("")));
            }
            if u.sprints[c].awaiting_confirmation {
                notes.push("manual sprint awaiting a person's confirmation (`resume`)".into());
            }
        }
        let _ = writeln!(out, "- Notes: {}\n", super::list_or(&notes, "; ", "—"));
    }
    out.push_str("## Active Agents\n");
    let mut any = false;
    for (i, u) in st.units.iter().enumerate() {
        for s in &u.sprints {
            let Some(a) = &s.active else { continue };
            if !any {
                out.push_str("| Work Unit | Sprint | Sprint State | Attempt | Model | Complexity Score | Task ID | Output File | Dispatched At |\n|-----------|--------|-------------|---------|-------|-----------------|---------|-------------|---------------|\n");
                any = true;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} |",
                cell(&u.name),
                s.id,
                s.status(),
                a.attempt,
                st.max_attempts(i),
                a.tier.as_str(),
                a.score,
                a.id,
                cell(&output_file(&a.id)),
                ts(a.dispatched_at)
            );
        }
    }
    if !any {
        out.push_str("(none)\n");
    }
    out.push_str("\n## Decisions Log\n| Timestamp | Work Unit | Sprint | Decision | Rationale |\n|-----------|-----------|--------|----------|-----------|\n");
    let skip = st.decisions.len().saturating_sub(DECISIONS_SHOWN);
    if skip > 0 {
        let _ = writeln!(
            out,
            "| … | | | {skip} earlier decisions are in the event log | |"
        );
    }
    for d in &st.decisions[skip..] {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            ts(d.at),
            cell(d.unit.as_deref().unwrap_or("—")),
            d.sprint.as_ref().map_or("—".to_string(), |s| s.to_string()),
            cell(&d.decision),
            cell(&d.rationale)
        );
    }
    out
}
