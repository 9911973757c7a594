//! §6c/§6d dispatch prompts: the plan's template with its variables filled, or the
//! four-part dynamic prompt; plus the retry, continuation and build-coordination parts.

use super::events::DispatchKind;
use crate::plan::{Criterion, Plan, Sprint, SprintType, WorkUnit};
use std::fmt::Write as _;

pub struct PromptInput<'a> {
    /// The plan file agents read first and must leave alone (`None`: the
    /// assignment says what to read, as a workflow's phases do).
    pub plan_file: Option<&'a str>,
    pub plan: &'a Plan,
    pub unit: &'a WorkUnit,
    pub sprint: &'a Sprint,
    pub kind: DispatchKind,
    pub attempt: u32,
    pub last_failure: Option<&'a str>,
    pub remaining: &'a [String],
    /// Other agents run now and a build gate will build for everyone (§3.5).
    pub parallel_with_gate: bool,
}

fn criteria(list: &[Criterion], none: &str) -> String {
    if list.is_empty() {
        return format!("- {none}\n");
    }
    list.iter()
        .map(|c| match &c.command {
            Some(cmd) if !c.text.contains(cmd.as_str()) => {
                format!("- [ ] {} — run: `{cmd}`\n", c.text)
            }
            _ => format!("- [ ] {}\n", c.text),
        })
        .collect()
}

pub fn build(p: &PromptInput) -> String {
    let mut out = String::new();
    let s = p.sprint;
    match &p.plan.dispatch_template {
        Some(t) => {
            out.push_str(&crate::plan::template::fill(&t.text, p.unit, p.sprint).0);
            out.push('\n');
        }
        None => {
            // Part 1: context, only what is needed.
            let dir = p
                .unit
                .directory
                .as_deref()
                .map(|d| format!("{d}/"))
                .unwrap_or_default();
            let _ = writeln!(out, "You are working on {} in ./{dir}.\n", p.unit.name);
            if let Some(plan_file) = p.plan_file {
                let _ = writeln!(out, "FIRST, read these files in order:\n1. {plan_file}");
                let files = p
                    .plan
                    .referenced_files
                    .iter()
                    .filter(|f| f.exists && f.unit.as_deref().is_none_or(|u| u == p.unit.name));
                for (i, f) in files.enumerate() {
                    let _ = writeln!(out, "{}. {}", i + 2, f.path);
                }
            }
            // Part 2: the assignment, verbatim.
            let _ = writeln!(out, "\nYou are executing Sprint {}: {}.\n", s.id, s.name);
            if !s.body.is_empty() {
                out.push_str(&s.body);
                out.push('\n');
            }
            // Part 3: checks.
            out.push_str("\nENTRY CRITERIA (verify before starting):\n");
            let first = p.unit.sprints.first().is_some_and(|f| f.id == s.id);
            let previous = p
                .unit
                .sprints
                .iter()
                .position(|x| x.id == s.id)
                .and_then(|i| i.checked_sub(1))
                .map(|i| &p.unit.sprints[i]);
            let none = match previous {
                Some(prev) if !first => format!(
                    "None stated — Sprint {} ({}) is COMPLETED and merged on this branch",
                    prev.id, prev.name
                ),
                _ if p.unit.depends_on.is_empty() => "None — this is the first sprint".to_string(),
                // The units it waited for are done and merged: say so, the
                // agent builds on them.
                _ => format!(
                    "None stated — this is the first sprint; the work units it depends on ({}) are COMPLETED and merged on this branch",
                    p.unit.depends_on.join(", ")
                ),
            };
            out.push_str(&criteria(&s.entry_criteria, &none));
            out.push_str("\nEXIT CRITERIA (verify before declaring done; commands run from the project's root, and paths are relative to it):\n");
            out.push_str(&criteria(
                &s.exit_criteria,
                "The sprint's tasks are done and committed",
            ));
            // Part 4: boundaries.
            out.push_str("\nIMPORTANT:\n- Do NOT start the next sprint. Your scope ends after this sprint.\n");
            if let Some(plan_file) = p.plan_file {
                let _ = writeln!(out, "- Do NOT modify {plan_file}.");
            }
            out.push_str("- Commit your work on the current branch before you finish.\n");
            match s.kind {
                SprintType::Background => out.push_str("- This sprint is complete once the process is confirmed running. Do NOT wait for it to finish: start it detached, its output to a file (`nohup <command> > <log> 2>&1 &`), so it outlives you.\n"),
                SprintType::Deferred => out.push_str("- Check the specified condition. If not met, report what you found and stop.\n"),
                SprintType::Manual => out.push_str("- Perform the checks described and report your findings. Do NOT mark this as complete — the user will verify.\n"),
                _ => {}
            }
        }
    }
    match p.kind {
        DispatchKind::Retry => {
            let _ = writeln!(
                out,
                "\nSprint {} failed on attempt {}. Here is what went wrong: {}\nFix the issues, then complete the sprint.",
                s.id,
                p.attempt.saturating_sub(1).max(1),
                p.last_failure.unwrap_or("the previous agent made no verifiable progress")
            );
        }
        DispatchKind::Continuation => {
            let _ = writeln!(out, "\nSprint {} is partly done; earlier work is already on this branch. Complete ONLY the remaining work:", s.id);
            for r in p.remaining {
                let _ = writeln!(out, "- {r}");
            }
        }
        DispatchKind::Fresh => {}
    }
    if p.parallel_with_gate && s.kind == SprintType::Code {
        out.push_str(
            "\nBuild Coordination:\nYou are working in parallel with other agents. Do NOT run full builds or the whole test suite.\nValidate syntax only (for example `cargo check`, `tsc --noEmit`, `python -m py_compile`, `go vet`).\nThe supervisor runs one coordinated build after all agents of this phase finish.\n",
        );
    }
    out
}
