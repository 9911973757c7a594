//! The look before a fresh sprint's agent: are the sprint's exit criteria
//! already met on the head it starts from? Agents overshoot (Sprint 1's
//! agent writes Sprint 2's file too) and people commit ahead of a run; such
//! work is never paid for again. Whether what was found is evidence is the
//! engine's rule ([`done_before::work_is_there`]); this module only checks.
//!
//! It runs in the attempt's wrapper, in the sprint's checkout, before the
//! agent would start: files first, read from the head's tree (a missing one
//! settles it at no cost), then commands one after another (they share the
//! checkout, where two builds at once would race), each bounded by
//! `verify_timeout`. Sprints of different units look at once, each in its
//! own worktree. A command criterion that passes is evidence only if it
//! failed at the operation's starting commit; that is run in a checkout of
//! the starting commit once per command and kept under
//! `.supervise/start-checks/`, so a slow command costs its run at the start
//! once per operation, not once per sprint.

use crate::attempt::criteria;
use crate::engine::done_before::{self, check_assertion, Found};
use crate::engine::{CriterionOutcome, CriterionResult, FoundDone};
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

/// The checks on the head of the checkout at `root`, and what they found,
/// when the sprint's work is there; None when an agent is needed.
///
/// The verdict is about the head, not the checkout: a file criterion is read
/// from the head's tree (an earlier agent's untracked or ignored file is not
/// work on the head), and commands run only in a checkout with nothing
/// untracked or changed. A sprint without a file criterion can show its
/// work only by a command that failed at the starting commit, so that is
/// asked first (kept once per operation), and its commands run on the head
/// only if one did.
pub fn look(
    sprint: &Sprint,
    root: &Path,
    start: &StartingPoint,
    timeout: Duration,
) -> Option<(Vec<CriterionResult>, FoundDone)> {
    if !done_before::may_be_found_done(sprint) {
        return None;
    }
    let (files, commands): (Vec<_>, Vec<_>) = sprint
        .exit_criteria
        .iter()
        .partition(|c| c.command.is_none());
    // A file missing from the checkout is missing from its head too: most
    // fresh sprints end here, at the cost of a look at the disk, before the
    // repository is opened (this is on the way to every agent's start).
    if files
        .iter()
        .any(|c| criteria::check(c, root, timeout).0 != CriterionOutcome::Passed)
    {
        return None;
    }
    let repo = git2::Repository::discover(root).ok()?;
    let head = HeadTree::of(&repo, root)?;
    let passed = |c: &crate::plan::Criterion, detail: String| CriterionResult {
        line: c.line,
        text: c.text.clone(),
        outcome: CriterionOutcome::Passed,
        detail,
    };
    let mut results = Vec::new();
    for c in &files {
        let (outcome, detail) = check_assertion(c.assertion.as_ref()?, |p| head.read(p))?;
        if outcome != CriterionOutcome::Passed {
            return None;
        }
        results.push(passed(c, detail));
    }
    let mut failed_at_start = Vec::new();
    if !commands.is_empty() {
        if !clean(&repo) {
            return None;
        }
        if files.is_empty() {
            failed_at_start = commands
                .iter()
                .filter(|c| !passed_at_start(c, root, start, timeout))
                .map(|c| c.text.clone())
                .collect();
            if failed_at_start.is_empty() {
                return None;
            }
        }
        for c in commands {
            let (outcome, detail) = criteria::check(c, root, timeout);
            if outcome != CriterionOutcome::Passed {
                return None;
            }
            results.push(passed(c, detail));
        }
    }
    results.sort_by_key(|r| r.line);
    if !done_before::work_is_there(sprint, &results, &failed_at_start) {
        return None;
    }
    let head = head.commit.to_string();
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

/// The head commit's tree, read the way file criteria read a checkout (a
/// directory exists with no bytes), from the directory the plan sits in.
struct HeadTree<'r> {
    repo: &'r git2::Repository,
    commit: git2::Oid,
    tree: git2::Tree<'r>,
    prefix: PathBuf,
}

impl<'r> HeadTree<'r> {
    fn of(repo: &'r git2::Repository, root: &Path) -> Option<HeadTree<'r>> {
        let commit = repo.head().ok()?.peel_to_commit().ok()?;
        let top = repo.workdir()?.canonicalize().ok()?;
        let prefix = root
            .canonicalize()
            .ok()?
            .strip_prefix(&top)
            .ok()?
            .to_path_buf();
        Some(HeadTree {
            repo,
            commit: commit.id(),
            tree: commit.tree().ok()?,
            prefix,
        })
    }

    fn read(&self, path: &str) -> Found {
        let Ok(entry) = self.tree.get_path(&self.prefix.join(path)) else {
            return Found::Missing;
        };
        match entry.to_object(self.repo) {
            Ok(o) => match (o.as_blob(), o.as_tree()) {
                (Some(b), _) => {
                    let bytes = b.content();
                    Found::File(
                        bytes[..bytes.len().min(crate::contract::EVIDENCE_FILE_LIMIT)].to_vec(),
                    )
                }
                (None, Some(_)) => Found::File(Vec::new()),
                _ => Found::Missing,
            },
            Err(_) => Found::Missing,
        }
    }
}

/// Whether the checkout holds nothing the head does not: no untracked file
/// (ignored ones, such as build output, aside) and no change.
fn clean(repo: &git2::Repository) -> bool {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    repo.statuses(Some(&mut opts)).is_ok_and(|s| s.is_empty())
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
