//! §5 the verification cascade: from the agent's output, git state, progress
//! files, exit-criteria results and task type to one outcome.

use super::events::{AgentReport, CriterionOutcome, CriterionResult, Evidence, ProgressMarker};
use crate::plan::{Sprint, SprintType};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// Progress was made; these items remain.
    Partial(Vec<String>),
    Failed(String),
    /// A deferred sprint whose condition is not met yet.
    Waiting,
    /// A manual sprint: a person has to confirm.
    AwaitConfirmation,
    /// The work is there but its branch no longer merges into the
    /// integration branch (another unit changed the same lines): a conflict
    /// round, not a failure — the next agent merges and resolves, on the
    /// same model.
    Conflict(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Success,
    Failure,
    Partial,
}

/// §5a's signal words, matched as whole words (or phrases of whole words).
const SIGNALS: [(Signal, &[&str]); 3] = [
    (
        Signal::Partial,
        &["partial", "incomplete", "remaining", "continued in next"],
    ),
    (
        Signal::Failure,
        &["failed", "error", "errors", "blocked", "could not"],
    ),
    (
        Signal::Success,
        &[
            "completed",
            "all checks pass",
            "all checks passed",
            "committed",
            "done",
        ],
    ),
];

/// Words that negate a signal a few words later: "no errors found", "0 failed",
/// "nothing remaining", "never blocked", "wasn't blocked".
const NEGATIONS: &[&str] = &[
    "no", "not", "zero", "0", "without", "never", "none", "nothing", "nor", "free",
];

/// The words the agent wrote itself: code (fenced blocks and inline spans) and
/// quoted lines (`> …`, often pasted logs) are evidence of what it read, not
/// what it says about its own work, so they carry no signal.
fn prose_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || t.starts_with('>') {
            continue;
        }
        let mut in_code = false;
        let mut word = String::new();
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            }
            if !in_code && (c.is_alphanumeric() || c == '\'') {
                word.extend(c.to_lowercase());
            } else if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words
}

/// Nouns a failure word can name the kind of, as in "the error handling" or
/// "failed login attempts": then it says what the agent worked on, not that
/// its work failed.
const NAMED_BY_FAILURE: &[&str] = &[
    "handling",
    "handler",
    "handlers",
    "message",
    "messages",
    "case",
    "cases",
    "path",
    "paths",
    "type",
    "types",
    "code",
    "codes",
    "reporting",
    "report",
    "reports",
    "page",
    "pages",
    "state",
    "states",
    "log",
    "logs",
    "logging",
    "check",
    "checks",
    "branch",
    "branches",
    "recovery",
    "output",
    "variant",
    "variants",
    "enum",
    "class",
    "classes",
    "attempt",
    "attempts",
    "login",
    "logins",
    "request",
    "requests",
    "job",
    "jobs",
    "text",
    "tests",
    "test",
    "response",
    "responses",
    "status",
    "boundary",
    "boundaries",
];

/// §5a: the last signal in the agent's own words wins; a negated one ("no
/// errors") is no signal at all, and neither is a failure word naming a kind
/// of thing ("improved the error handling").
fn output_signal(text: &str) -> Option<Signal> {
    let words = prose_words(text);
    let negated = |at: usize| {
        words[at.saturating_sub(3)..at]
            .iter()
            .any(|w| NEGATIONS.contains(&w.as_str()) || w.ends_with("n't"))
    };
    let attributive = |at: usize, sig: Signal, len: usize| {
        sig == Signal::Failure
            && len == 1
            && words
                .get(at + 1)
                .is_some_and(|w| NAMED_BY_FAILURE.contains(&w.as_str()))
    };
    let mut last = None;
    for i in 0..words.len() {
        for (sig, phrases) in SIGNALS {
            let hit = phrases.iter().find(|p| {
                let mut n = 0;
                p.split(' ').all(|w| {
                    n += 1;
                    words.get(i + n - 1).is_some_and(|x| x == w)
                })
            });
            if let Some(p) = hit {
                if !negated(i) && !attributive(i, sig, p.split(' ').count()) {
                    last = Some(sig);
                }
            }
        }
    }
    last
}

/// The results that speak for `sprint`'s own exit criteria, one per
/// criterion in the plan's order, matched by the criterion's text (and its
/// line where two criteria read alike), never by position: a result for
/// another sprint's criterion, or for none, counts for nothing. A
/// machine-checkable criterion with no result is unverified, never passed.
/// Results the place adds of its own (a background sprint's "a process the
/// agent started is running") are kept after them.
pub fn own_results(sprint: &Sprint, given: &[CriterionResult]) -> Vec<CriterionResult> {
    let mut used = vec![false; given.len()];
    let mut take = |pick: &dyn Fn(&CriterionResult) -> bool| {
        let i = (0..given.len()).find(|&i| !used[i] && pick(&given[i]))?;
        used[i] = true;
        Some(given[i].clone())
    };
    let mut own: Vec<CriterionResult> = sprint
        .exit_criteria
        .iter()
        .map(|c| {
            take(&|r| r.text == c.text && r.line == c.line)
                .or_else(|| take(&|r| r.text == c.text))
                .map(|r| CriterionResult { line: c.line, ..r })
                .unwrap_or_else(|| CriterionResult {
                    line: c.line,
                    text: c.text.clone(),
                    outcome: CriterionOutcome::Unverified,
                    detail: if c.is_machine_checkable() {
                        NO_RESULT.to_string()
                    } else {
                        "needs a person".to_string()
                    },
                })
        })
        .collect();
    if sprint.kind == SprintType::Background {
        own.extend(take(&|r| r.text == BACKGROUND_CRITERION));
    }
    own
}

/// The detail of a machine-checkable criterion no result was given for.
pub const NO_RESULT: &str = "no result was reported for this criterion";

/// The criterion a place adds for a background sprint (§5e).
pub const BACKGROUND_CRITERION: &str = "a process the agent started is running";

/// Whether passing `results` show the sprint's work is there, rather than a
/// state the repository may have had before it: a file criterion (a path
/// exists, or holds a text) passed. A command that passes says nothing by
/// itself — `cargo test` passes on green tests before any work.
pub fn file_evidence(sprint: &Sprint, results: &[CriterionResult]) -> bool {
    sprint.exit_criteria.iter().any(|c| {
        c.command.is_none()
            && c.assertion.is_some()
            && results
                .iter()
                .any(|r| r.text == c.text && r.outcome == CriterionOutcome::Passed)
    })
}

/// The cascade's decision. Ambiguity favours PARTIAL over FAILURE (preserve work).
pub fn assess(sprint: &Sprint, report: &AgentReport, max_turns: u32) -> Outcome {
    let ev = &report.evidence;
    let exit_ok = report.exit_code == Some(0);
    let signal = output_signal(&report.output_tail);
    let own = own_results(sprint, &ev.criteria);
    let missing = own
        .iter()
        .any(|c| c.outcome == CriterionOutcome::Unverified && c.detail == NO_RESULT);
    let checked: Vec<_> = own
        .iter()
        .filter(|c| c.outcome != CriterionOutcome::Unverified)
        .collect();
    let failed: Vec<String> = checked
        .iter()
        .filter(|c| c.outcome == CriterionOutcome::Failed)
        .map(|c| c.text.clone())
        .collect();
    let all_pass = !checked.is_empty() && failed.is_empty() && !missing;
    let some_pass = checked
        .iter()
        .any(|c| c.outcome == CriterionOutcome::Passed);
    let committed = !ev.commits.is_empty();
    let progress = committed
        || !ev.uncommitted.is_empty()
        || some_pass
        || ev.progress.is_some()
        || signal == Some(Signal::Partial);
    let exhausted = report.turns_used.is_some_and(|t| t >= max_turns);

    if let Some(why) = &ev.refused {
        return Outcome::Failed(format!("the work was refused: {why}"));
    }
    if let Some(conflict) = &ev.merge_conflict {
        return Outcome::Conflict(conflict.clone());
    }
    match sprint.kind {
        SprintType::Manual => {
            return if exit_ok || progress {
                Outcome::AwaitConfirmation
            } else {
                Outcome::Failed(failure_reason(report, &failed))
            };
        }
        SprintType::Deferred => {
            if all_pass {
                return Outcome::Completed;
            }
            // Waiting is not failure; only an agent that errored is.
            return if exit_ok || checked.is_empty() && report.exit_code.is_none() {
                Outcome::Waiting
            } else {
                Outcome::Failed(failure_reason(report, &failed))
            };
        }
        _ => {}
    }
    // Work already on the head is found before an agent is dispatched (see
    // `done_before::work_is_there`); an agent's own attempt must commit:
    // its checkout is not the head, and a file it left uncommitted or
    // ignored is not work a person can merge.
    let needs_commit = sprint.kind == SprintType::Code;
    let contradicted = !failed.is_empty()
        || signal == Some(Signal::Failure) && !all_pass
        || !exit_ok && !exhausted
        || ev.ci_passed == Some(false)
        || needs_commit && !committed
        || missing
        || !ev.uncommitted.is_empty();
    let success = all_pass
        || ev.progress == Some(ProgressMarker::Complete)
        || ev.ci_passed == Some(true)
        || exit_ok
            && matches!(signal, Some(Signal::Success) | None)
            && (!needs_commit || committed);
    if success && !contradicted {
        return Outcome::Completed;
    }
    if progress {
        let mut remaining = failed;
        if !ev.uncommitted.is_empty() {
            remaining.push(format!(
                "commit the uncommitted changes ({})",
                ev.uncommitted.join(", ")
            ));
        }
        if needs_commit && !committed {
            remaining.push("commit the sprint's work on the sprint branch".into());
        }
        if ev.ci_passed == Some(false) {
            remaining.push(format!("make it pass: {}", ci_failed(ev)));
        }
        for c in own.iter().filter(|c| c.detail == NO_RESULT) {
            remaining.push(format!("{} (not checked: {NO_RESULT})", c.text));
        }
        if remaining.is_empty() {
            remaining = sprint
                .exit_criteria
                .iter()
                .map(|c| c.text.clone())
                .collect();
        }
        if remaining.is_empty() {
            remaining = sprint.tasks.clone();
        }
        return Outcome::Partial(remaining);
    }
    Outcome::Failed(failure_reason(report, &failed))
}

/// What the repository's red CI said, as the next agent is told it.
fn ci_failed(ev: &Evidence) -> String {
    if ev.ci_failures.is_empty() {
        "the repository's CI failed on the sprint's head".to_string()
    } else {
        let lines: Vec<String> = ev.ci_failures.iter().map(|f| f.line()).collect();
        format!(
            "the repository's CI failed on the sprint's head: {}",
            lines.join("; ")
        )
    }
}

fn failure_reason(report: &AgentReport, failed: &[String]) -> String {
    let mut parts = Vec::new();
    match report.exit_code {
        Some(0) => {}
        Some(c) => parts.push(format!("agent exited with status {c}")),
        None => parts.push("agent ended without an exit status".to_string()),
    }
    if report.turns_used.is_some() && report.evidence.commits.is_empty() {
        parts.push("no commits".to_string());
    }
    if !failed.is_empty() {
        parts.push(format!("failing criteria: {}", failed.join("; ")));
    }
    if report.evidence.ci_passed == Some(false) {
        parts.push(ci_failed(&report.evidence));
    }
    let tail: String = report
        .output_tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect();
    if !tail.is_empty() {
        parts.push(format!("last output: {tail}"));
    }
    if parts.is_empty() {
        "no progress".to_string()
    } else {
        parts.join("; ")
    }
}
