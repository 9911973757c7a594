//! §13 status table, BLOCKED notices and the completion summary; §11 kill summary.

use super::{cell, elapsed, ts};
use crate::engine::usage::Usd;
use crate::engine::{ModelTier, OperationState, OverallStatus, SprintStatus, UnitStatus};
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

fn next_event(st: &OperationState) -> String {
    let active = st.launched_count();
    match st.status {
        OverallStatus::Completed if st.head_failures() > 0 => {
            "the final head to be mended (its verification failed)".into()
        }
        OverallStatus::Completed => "operation complete".into(),
        OverallStatus::Blocked => "waiting for intervention (resume a BLOCKED unit)".into(),
        OverallStatus::Killed => "killed; `resume` to continue".into(),
        OverallStatus::Stopped => "stopped; `resume` to continue".into(),
        OverallStatus::Stopping => format!(
            "waiting for {} to finish",
            crate::text::count(active, "active agent")
        ),
        OverallStatus::Running => {
            if let Some(g) = st.gates.iter().find(|g| g.passed.is_none()) {
                format!("waiting for build gate {} (layer {})", g.id, g.layer)
            } else if let Some(h) = st
                .units
                .iter()
                .flat_map(|u| &u.sprints)
                .find_map(|s| s.active.as_ref().and_then(|a| a.held.as_ref()))
            {
                format!("waiting to launch an agent: {}", h.reason)
            } else if active > 0 {
                "polling active agents".into()
            } else if let Some(t) = st
                .units
                .iter()
                .flat_map(|u| &u.sprints)
                .filter(|s| s.provider_retries > 0)
                .filter_map(|s| s.not_before)
                .min()
            {
                format!(
                    "waiting on the model provider; the next try is about {} UTC",
                    t.format("%H:%M:%S")
                )
            } else if st
                .units
                .iter()
                .any(|u| u.sprints.iter().any(|s| s.awaiting_confirmation))
            {
                "waiting for a person to confirm a manual sprint".into()
            } else if st
                .units
                .iter()
                .any(|u| u.sprints.iter().any(|s| s.deferred_waiting))
            {
                "polling a deferred sprint's condition".into()
            } else if let Some((unit, sprint)) = st.units.iter().find_map(|u| {
                u.sprints
                    .iter()
                    .find(|s| s.awaiting_merge())
                    .map(|s| (&u.name, &s.id))
            }) {
                // Verified, not merged. Whether a place holds a sprint taken
                // on the agent's word for a person too is the place's rule
                // (the ☐ line under the table asks for that review).
                if st.config.merge_after_review {
                    format!(
                        "waiting for review of {unit} Sprint {sprint} by a person who may write"
                    )
                } else {
                    format!("waiting for {unit} Sprint {sprint} to merge")
                }
            } else {
                "dispatching".into()
            }
        }
    }
}

/// The §13 table, then the active agents with their elapsed time, then
/// notices, and once the operation is complete §13's "Supervisor Complete".
pub fn status_table(st: &OperationState, now: DateTime<Utc>) -> String {
    status_table_linked(st, now, &|_| None, &|path| format!("`{path}`"))
}

/// The status table with each active agent's dispatch id linked to where it runs
/// (its Actions run, on GitHub), and a workflow's files shown by `file`.
pub fn status_table_linked(
    st: &OperationState,
    now: DateTime<Utc>,
    link: &dyn Fn(&crate::engine::DispatchId) -> Option<String>,
    file: &dyn Fn(&str) -> String,
) -> String {
    let mut out = board(st, now, link, file);
    if st.status == OverallStatus::Completed {
        out.push('\n');
        out.push_str(&completion_summary(st));
    }
    out
}

/// The table and what stands around it, without the completion summary: for
/// a terminal that has just printed the final summary, which says the same.
pub fn status_board(st: &OperationState, now: DateTime<Utc>) -> String {
    board(st, now, &|_| None, &|path| format!("`{path}`"))
}

fn board(
    st: &OperationState,
    now: DateTime<Utc>,
    link: &dyn Fn(&crate::engine::DispatchId) -> Option<String>,
    file: &dyn Fn(&str) -> String,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Supervisor Status — {}", ts(now));
    // The clock stops with the operation: a finished, stopped or killed
    // operation says how long it ran, not how long ago it started.
    let (verb, until, cost) = match st.status {
        OverallStatus::Completed | OverallStatus::Stopped | OverallStatus::Killed => (
            "ran",
            st.finished_at.unwrap_or(st.updated_at).min(now),
            "cost",
        ),
        _ => ("running", now, "cost so far"),
    };
    let running = elapsed((until - st.started_at).num_seconds().max(0));
    let budget = match st.config.budget {
        Some(b) => format!(
            " of a {b}× budget ({}× left)",
            b.saturating_sub(st.cost_spent)
        ),
        None => String::new(),
    };
    let held = match st.cost_held {
        0 => String::new(),
        h => format!(" · {h}× more waiting to launch"),
    };
    let reported = match (st.dollars_spent(), st.config.budget_usd) {
        (spent, Some(cap)) => format!(" ({spent} of a {cap} budget)"),
        (spent, None) if spent > Usd::ZERO => format!(" ({spent})"),
        _ => String::new(),
    };
    let verdict = match st.head_failures() {
        0 => String::new(),
        _ => " · VERIFICATION FAILED on the final head".to_string(),
    };
    let _ = writeln!(
        out,
        "{} · status: {}{verdict} · {verb} {running} · {cost} {}×{reported}{held}{budget}\n",
        st.name, st.status, st.cost_spent
    );
    if let Some(w) = &st.workflow {
        for line in w.summary(st) {
            let _ = writeln!(out, "{line}");
        }
        let artifacts = w.artifacts(st);
        if !artifacts.is_empty() {
            let shown: Vec<String> = artifacts.iter().map(|p| file(p)).collect();
            let _ = writeln!(out, "Artifacts: {}", shown.join(" · "));
        }
        out.push('\n');
    }
    out.push_str("| Work Unit | Deps | State | Sprint | Sprint State | Type | Model | Attempt |\n");
    out.push_str("|-----------|------|-------|--------|-------------|------|-------|---------|\n");
    for (i, u) in st.units.iter().enumerate() {
        let pu = &st.plan.work_units[i];
        let deps = crate::text::names_or(&pu.depends_on, "—");
        let total = u.sprints.len();
        let row = match (u.status, u.current()) {
            (UnitStatus::NotStarted, _) => format!("0/{total} | — | — | — | —"),
            (_, None) => {
                let last = u.sprints.last().and_then(|s| s.completion.as_ref());
                format!(
                    "{total}/{total} | COMPLETED | {} | {} | {}",
                    pu.sprints
                        .last()
                        .map_or("code".into(), |s| s.kind.to_string()),
                    last.map_or("—", |c| c.tier.as_str()),
                    last.map_or("—".into(), |c| format!(
                        "{}/{}",
                        c.attempts,
                        st.max_attempts(i)
                    ))
                )
            }
            (_, Some(c)) => {
                let s = &u.sprints[c];
                let tier = s.tier();
                let state = s.status();
                format!(
                    "{}/{total} | {state} | {} | {} | {}/{}",
                    c + 1,
                    pu.sprints[c].kind,
                    tier.map_or("—", |t| t.as_str()),
                    s.shown_attempt(st.max_attempts(i)),
                    st.max_attempts(i)
                )
            }
        };
        // A unit the workflow went on without is not waiting for anyone:
        // its row says so, and it is not counted among the blocked.
        let status = match (u.status, st.superseded(&u.name)) {
            (UnitStatus::Blocked, true) => format!("{} (handed on)", u.status),
            (s, _) => s.to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {status} | {row} |",
            cell(&u.name),
            cell(&deps),
        );
    }
    // Completed on the agent's word: said under the table, where a person
    // reading "COMPLETED" above would otherwise take it for checked.
    for (u, s, c) in st.units.iter().flat_map(|u| {
        u.sprints
            .iter()
            .filter_map(move |s| s.completion.as_ref().map(|c| (u, s, c)))
    }) {
        if c.on_agents_word().is_some() && st.workflow.is_none() {
            let _ = writeln!(
                out,
                "\n☐ {} Sprint {}: {} — review it",
                cell(&u.name),
                s.id,
                crate::engine::completed_words(c)
            );
        }
    }
    let blocked = st.blocked_units().count();
    let _ = writeln!(out, "\nActive agents: {}", st.launched_count());
    for u in &st.units {
        for s in &u.sprints {
            if let Some(a) = &s.active {
                let id = match link(&a.id) {
                    Some(url) => format!("[{}]({url})", a.id),
                    None => a.id.to_string(),
                };
                if let Some(h) = &a.held {
                    let until = h.until.map_or_else(String::new, |t| {
                        format!(", until about {} UTC", t.format("%H:%M"))
                    });
                    let _ = writeln!(
                        out,
                        "- {} Sprint {} ({} · {id}) — waiting to launch: {}{until}",
                        u.name,
                        s.id,
                        a.tier.as_str(),
                        h.reason
                    );
                    continue;
                }
                let _ = writeln!(
                    out,
                    "- {} Sprint {} ({} · {id}) — {} elapsed",
                    u.name,
                    s.id,
                    a.tier.as_str(),
                    elapsed((now - a.dispatched_at).num_seconds())
                );
            }
        }
    }
    // Units the workflow went on without are BLOCKED in their rows: the
    // count says they are there, and why they are not waiting for anyone.
    let handed_on = st
        .units
        .iter()
        .filter(|u| u.status == UnitStatus::Blocked && st.superseded(&u.name))
        .count();
    let handed_on = match handed_on {
        0 => String::new(),
        n => format!(" waiting, {n} handed on (the work went on without them)"),
    };
    let _ = writeln!(out, "Blocked work units: {blocked}{handed_on}");
    let _ = writeln!(out, "Next event: {}", next_event(st));
    if let Some(b) = st.config.budget {
        let _ = writeln!(out, "Relative cost: {}× of {b}× budget", st.cost_spent);
    }
    if let Some(spend) = super::money::footer(st) {
        let _ = writeln!(out, "{spend}");
    }
    let notices = blocked_notices(st);
    if !notices.is_empty() {
        out.push('\n');
        out.push_str(&notices);
    }
    out
}

/// The notice of each BLOCKED unit (§13), as the engine said it: what
/// failed, what its check printed, where the work is, how to hand a fix back.
pub fn blocked_notices(st: &OperationState) -> String {
    let mut out = String::new();
    for (u, unit) in st.units.iter().enumerate() {
        if unit.status != UnitStatus::Blocked || st.superseded(&unit.name) {
            continue;
        }
        if let Some(s) = unit
            .sprints
            .iter()
            .position(|s| s.status() == SprintStatus::Fatal)
        {
            let why = fatal_why(unit.sprints[s].failures);
            out.push_str(&st.blocked(u, s, why, None).text());
            out.push('\n');
        }
    }
    out
}

/// Why a FATAL sprint stopped, as its notice's first line says it.
pub fn fatal_why(failures: u32) -> String {
    match failures {
        0 => "is FATAL".to_string(),
        n => format!("failed after {}", crate::text::count(n as usize, "attempt")),
    }
}

/// §13 "Supervisor Complete" with the model usage table.
pub fn completion_summary(st: &OperationState) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Supervisor Complete\n{}", st.executed_line());
    let all_verified = st
        .units
        .iter()
        .filter(|u| !st.superseded(&u.name))
        .flat_map(|u| &u.sprints)
        .all(|s| s.completion.is_some());
    let failing = st.head_failures();
    let _ = writeln!(
        out,
        "{}\n",
        if failing > 0 {
            format!(
                "✗ VERIFICATION FAILED: {} on the final head; see the notice.",
                match failing {
                    1 => "1 exit criterion fails".to_string(),
                    n => format!("{n} exit criteria fail"),
                }
            )
        } else if all_verified {
            "All exit criteria verified.".to_string()
        } else {
            "Some exit criteria need a person; see the final verification.".to_string()
        }
    );
    out.push_str("### Model Usage Summary\n| Model | Sprints | Dispatches | Relative Cost |\n|-------|---------|------------|---------------|\n");
    let usage = st.model_usage();
    let mut total = 0;
    for tier in ModelTier::ALL {
        let sprints = usage.get(&tier).copied().unwrap_or(0);
        let (dispatches, cost) = st.charged_at(tier);
        total += cost;
        let _ = writeln!(
            out,
            "| {} | {sprints} | {dispatches} | {cost}× |",
            tier.as_str()
        );
    }
    let _ = writeln!(out, "\nTotal relative cost: {total}× (baseline: haiku = 1×; every dispatch counts, retries included)");
    out
}

/// §11 step 6.
pub fn kill_summary(st: &OperationState) -> String {
    let mut out = String::from("## Kill All Complete\n\n");
    let terminated = st
        .units
        .iter()
        .flat_map(|u| &u.sprints)
        .flat_map(|s| &s.history)
        .filter(|h| h.outcome == "terminated")
        .filter(|h| st.killed_at.is_none_or(|k| h.finished_at >= k))
        .count();
    let with_work: Vec<&str> = st
        .units
        .iter()
        .filter(|u| u.notes.iter().any(|n| n.contains("uncommitted")))
        .map(|u| u.name.as_str())
        .collect();
    let _ = writeln!(out, "Agents terminated: {terminated}");
    let _ = writeln!(
        out,
        "Work units with uncommitted work: {}\n",
        super::list_or(&with_work, ", ", "none")
    );
    out.push_str("Work unit states after kill:\n| Work Unit | Last Completed Sprint | Uncommitted Work | Action Needed |\n|-----------|----------------------|------------------|---------------|\n");
    for u in &st.units {
        let last = u
            .sprints
            .iter()
            .rev()
            .find(|s| s.status() == SprintStatus::Completed)
            .map_or("—".to_string(), |s| format!("Sprint {}", s.id));
        let dirty = u.notes.iter().any(|n| n.contains("uncommitted"));
        let action = match (u.status, u.current()) {
            (UnitStatus::Completed, _) | (_, None) => "none".to_string(),
            (UnitStatus::NotStarted, _) => "starts when its dependencies complete".to_string(),
            (_, Some(c)) if u.sprints[c].dispatches > 0 => {
                format!("restart Sprint {}", u.sprints[c].id)
            }
            (_, Some(c)) => format!("resume from Sprint {}", u.sprints[c].id),
        };
        let _ = writeln!(
            out,
            "| {} | {last} | {} | {action} |",
            cell(&u.name),
            if dirty { "yes" } else { "no" }
        );
    }
    out.push_str("\nTo resume: supervise resume\nUncommitted work stays in each unit's worktree (under `.supervise/worktrees/`); inspect it there, or discard it with `git checkout -- . && git clean -fd` inside that worktree before resuming.\n");
    out
}
