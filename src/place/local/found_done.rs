//! The look before a fresh sprint's agent: are the sprint's exit criteria
//! already met on the head it starts from? Agents overshoot (Sprint 1's
//! agent writes Sprint 2's file too) and people commit ahead of a run; such
//! work is never paid for again. Whether what was found is evidence is the
//! engine's rule ([`done_before::work_is_there`]); this module only checks.
//!
//! It runs in the attempt's wrapper, in the sprint's checkout, before the
//! agent would start: files first (a missing one settles it at no cost),
//! then commands one after another (they share the checkout, where two
//! builds at once would race), each bounded by `verify_timeout`. Sprints of
//! different units look at once, each in its own worktree. A command
//! criterion that passes is evidence only if it failed at the operation's
//! starting commit; that is run in a checkout of the starting commit once
//! per command and kept under `.supervise/start-checks/`, so a slow command
//! costs its run at the start once per operation, not once per sprint.

use super::criteria;
use crate::engine::{done_before, CriterionOutcome, CriterionResult, FoundDone};
use crate::plan::Sprint;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where a fresh attempt may look: the operation's starting commit, and
/// where the results of commands run there are kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartingPoint {
    pub commit: String,
    pub cache: PathBuf,
}

/// The checks on the checkout at `root`, and what they found, when the
/// sprint's work is there; None when an agent is needed.
pub fn look(
    sprint: &Sprint,
    root: &Path,
    start: &StartingPoint,
    timeout: Duration,
) -> Option<(Vec<CriterionResult>, FoundDone)> {
    if !done_before::may_be_found_done(sprint) {
        return None;
    }
    let mut results = Vec::new();
    let (files, commands): (Vec<_>, Vec<_>) = sprint
        .exit_criteria
        .iter()
        .partition(|c| c.command.is_none());
    for c in files.into_iter().chain(commands) {
        let (outcome, detail) = criteria::check(c, root, timeout);
        if outcome != CriterionOutcome::Passed {
            return None;
        }
        results.push(CriterionResult {
            line: c.line,
            text: c.text.clone(),
            outcome,
            detail,
        });
    }
    results.sort_by_key(|r| r.line);
    let mut failed_at_start = Vec::new();
    if !crate::engine::cascade::file_evidence(sprint, &results) {
        for c in sprint.exit_criteria.iter().filter(|c| c.command.is_some()) {
            if !passed_at_start(c, root, start, timeout) {
                failed_at_start.push(c.text.clone());
            }
        }
    }
    if !done_before::work_is_there(sprint, &results, &failed_at_start) {
        return None;
    }
    let head = git(root, &["rev-parse", "HEAD"]).unwrap_or_default();
    let by = who_did(sprint, root, &start.commit, &head);
    Some((
        results,
        FoundDone {
            head,
            by,
            failed_at_start,
        },
    ))
}

/// Whether command criterion `c` passes at the starting commit: kept from an
/// earlier look, or run now in a checkout of that commit made for it.
fn passed_at_start(
    c: &crate::plan::Criterion,
    root: &Path,
    start: &StartingPoint,
    timeout: Duration,
) -> bool {
    let key = hex::encode(Sha256::digest(
        format!("{}\n{}\n{:?}", start.commit, c.text, c.expected).as_bytes(),
    ));
    let kept = start.cache.join(&key);
    if let Ok(text) = std::fs::read_to_string(&kept) {
        return text.trim() == "passed";
    }
    // Where the plan sits inside the repository: the command runs there.
    let prefix = git(root, &["rev-parse", "--show-prefix"]).unwrap_or_default();
    let Ok(tmp) = tempfile::tempdir() else {
        return true; // unknown: no evidence claimed
    };
    let checkout = tmp.path().join("start");
    let added = Command::new("git")
        .args(["worktree", "add", "-q", "--detach"])
        .arg(&checkout)
        .arg(&start.commit)
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success());
    if !added {
        return true;
    }
    let (outcome, _) = criteria::check(c, &checkout.join(prefix.trim()), timeout);
    let _ = Command::new("git")
        .args(["worktree", "remove", "--force"])
        .arg(&checkout)
        .current_dir(root)
        .status();
    let passed = outcome == CriterionOutcome::Passed;
    let _ = std::fs::create_dir_all(&start.cache).and_then(|_| {
        let tmp = kept.with_extension("tmp");
        std::fs::write(&tmp, if passed { "passed" } else { "failed" })?;
        std::fs::rename(&tmp, &kept)
    });
    passed
}

/// Who did the work found on `head`, for people: the commit that last
/// changed the first file a criterion names, and the merge that brought it
/// onto the integration branch (or that it was there before the start).
fn who_did(sprint: &Sprint, root: &Path, start: &str, head: &str) -> String {
    let short = crate::contract::short_id;
    let path = sprint
        .exit_criteria
        .iter()
        .find_map(|c| match &c.assertion {
            Some(crate::plan::Assertion::FileExists { path })
            | Some(crate::plan::Assertion::FileContains { path, .. }) => Some(path.clone()),
            None => None,
        });
    let Some(path) = path else {
        return format!(
            "the work merged before it (its commands failed at the starting commit {} and pass on {})",
            short(start),
            short(head)
        );
    };
    let Some(line) = git(root, &["log", "-n1", "--format=%H%x09%s", "--", &path])
        .filter(|l| !l.trim().is_empty())
    else {
        return format!("the work on {}", short(head));
    };
    let (commit, subject) = line.trim().split_once('\t').unwrap_or((line.trim(), ""));
    let before_start = Command::new("git")
        .args(["merge-base", "--is-ancestor", commit, start])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success());
    let mut by = format!("commit {} (\"{}\")", short(commit), subject);
    if before_start {
        by.push_str(", committed before the operation started");
    } else if let Some(merge) = git(
        root,
        &[
            "log",
            "--first-parent",
            "--merges",
            "--ancestry-path",
            "--format=%s",
            &format!("{commit}..HEAD"),
        ],
    )
    .and_then(|out| out.lines().last().map(str::to_string))
    {
        by.push_str(&format!(", merged by \"{merge}\""));
    }
    by
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
