//! The final head's re-verification, wherever the head is checked out:
//! every machine-checkable criterion of the completed sprints run again on
//! the integration branch's head, and one that fails there traced to the
//! merge after which it first failed, by bisecting the branch's
//! first-parent line. The local place runs it in its gate checkout; on
//! GitHub the agent workflow's verifying job runs it (`supervise verify
//! --final`), since the service runs no repository code.

use super::criteria;
use crate::engine::{CriterionOutcome, CriterionResult, HeadCheck, HeadVerification};
use crate::plan::{Criterion, Plan, SprintId};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a sprint's merged work landed on the integration branch's
/// first-parent line.
#[derive(Debug, Clone)]
pub struct Landing {
    pub unit: String,
    pub sprint: SprintId,
    /// Its place on the line.
    pub at: usize,
}

/// Each criterion of `criteria` checked in the checkout at `root`, its
/// output's tail scrubbed: the checks of a head, not yet blamed.
pub fn check_all<'c>(
    criteria: impl IntoIterator<Item = (String, SprintId, &'c Criterion)>,
    root: &Path,
    timeout: Duration,
) -> Vec<(HeadCheck, &'c Criterion)> {
    criteria
        .into_iter()
        .map(|(unit, sprint, c)| {
            let (outcome, detail) = criteria::check(c, root, timeout);
            let check = HeadCheck {
                unit,
                sprint,
                result: CriterionResult {
                    line: c.line,
                    text: c.text.clone(),
                    outcome,
                    detail: crate::scrub::scrub(&criteria::tail(&detail, 500)).into_owned(),
                },
                broken_by: None,
            };
            (check, c)
        })
        .collect()
}

/// The first step of `from..len` at which a criterion fails, given that it
/// fails at the last (`fails(i)` checks it at step `i`; None when the step
/// could not be checked out). None when it fails at `from` already — then
/// the line holds no pass-to-fail step to name, and a bisection would name
/// an arbitrary one — or when a step could not be checked.
pub fn first_failing(
    from: usize,
    len: usize,
    mut fails: impl FnMut(usize) -> Option<bool>,
) -> Option<usize> {
    let last = len.checked_sub(1)?;
    if from >= last || fails(from)? {
        return None;
    }
    // fails(from) is false, fails(last) is true: a step between flips.
    let (mut lo, mut hi) = (from + 1, last);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fails(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// How a regression's cause is told: whose merge it was — the first sprint
/// to land at or after the failing step (a merge commit lands where it is;
/// a fast-forwarded sprint's own commits come just before its head lands)
/// — and the commit with its subject.
pub fn broken_by(landings: &[Landing], at: usize, commit: &str, subject: &str) -> String {
    let whose = landings
        .iter()
        .filter(|l| l.at >= at)
        .min_by_key(|l| l.at)
        .map(|l| format!("{} Sprint {}'s merge: ", l.unit, l.sprint))
        .unwrap_or_default();
    format!(
        "{whose}{} (\"{}\")",
        crate::text::short_id(commit),
        crate::scrub::scrub(subject)
    )
}

/// What the service asks the verifying job to check on the final head: the
/// completed sprints and their branches (where each landed is found from
/// them). Carried in the dispatch's `prompt` input, which a final
/// verification has no other use for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalOrder {
    pub sprints: Vec<FinalSprint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalSprint {
    pub unit: String,
    pub sprint: SprintId,
    /// The sprint's branch, as pushed; gone when GitHub deleted it after
    /// the merge (then where it landed is not known, and a regression is
    /// reported with the commit that broke it but not whose it was).
    pub branch: String,
}

/// The file under the verifying job's `--out` that holds the final
/// verification's results for the publishing job.
pub const FINAL_FILE: &str = "final.json";

/// `v` as JSON that fits a check run's `output.text` (GitHub keeps 65,535
/// characters): the details of passing checks go first, then the rest are
/// shortened, so every check's verdict is always there.
pub fn to_check_text(v: &HeadVerification) -> Result<String> {
    const MAX: usize = 60_000;
    let mut v = v.clone();
    let mut text = serde_json::to_string(&v)?;
    for keep in [None, Some(200), Some(40), Some(0)] {
        if text.chars().count() <= MAX {
            break;
        }
        for c in &mut v.checks {
            let passed = c.result.outcome == CriterionOutcome::Passed;
            match keep {
                None if passed => c.result.detail.clear(),
                None => {}
                Some(n) => c.result.detail = c.result.detail.chars().take(n).collect(),
            }
        }
        text = serde_json::to_string(&v)?;
    }
    Ok(text)
}

/// The sprint id a final verification is dispatched with: no sprint of a
/// plan has it (sprint ids begin with a digit).
pub const FINAL_SPRINT: &str = "final";

/// The final verification in a checkout of the integration head at `root`
/// (with its history, as `fetch-depth: 0` gives): the criteria of the
/// sprints `order` names, read from `plan` (the plan at the head checked:
/// work that changed a criterion was refused when it was verified), each
/// failure bisected on the first-parent line in throw-away worktrees.
pub fn verify_checkout(
    root: &Path,
    plan: &Plan,
    order: &FinalOrder,
    branch: &str,
    timeout: Duration,
) -> Result<HeadVerification> {
    let repo = git2::Repository::open(root)
        .with_context(|| format!("opening the checkout at {}", root.display()))?;
    let head = repo.head()?.peel_to_commit()?.id();
    let wanted = order.sprints.iter().filter_map(|s| {
        let unit = plan.unit(&s.unit)?;
        let sprint = unit.sprints.iter().find(|p| p.id == s.sprint)?;
        Some((unit, sprint))
    });
    let criteria = wanted.flat_map(|(unit, sprint)| {
        sprint
            .exit_criteria
            .iter()
            .filter(|c| c.is_machine_checkable())
            .map(move |c| (unit.name.clone(), sprint.id.clone(), c))
    });
    // The commands run code the agents wrote: whatever they start, however
    // it detaches, stays below this process and is ended before the
    // results are written (a daemon could otherwise rewrite them).
    super::tree::become_subreaper();
    let mut checks = check_all(criteria, root, timeout);
    if checks
        .iter()
        .any(|(c, _)| c.result.outcome == CriterionOutcome::Failed)
    {
        let mut walk = repo.revwalk()?;
        walk.push(head)?;
        walk.simplify_first_parent()?;
        let mut line = walk.collect::<std::result::Result<Vec<_>, _>>()?;
        line.reverse();
        let landings = landings_of(&repo, &line, order);
        let steps = Steps::new(root);
        for (check, criterion) in checks
            .iter_mut()
            .filter(|(c, _)| c.result.outcome == CriterionOutcome::Failed)
        {
            let from = landings
                .iter()
                .find(|l| l.unit == check.unit && l.sprint == check.sprint)
                .map_or(0, |l| l.at);
            let found = first_failing(from, line.len(), |i| {
                let at = steps.at(&line[i].to_string())?;
                Some(criteria::check(criterion, &at, timeout).0 == CriterionOutcome::Failed)
            });
            if let Some(at) = found {
                let subject = repo
                    .find_commit(line[at])
                    .ok()
                    .map(|c| {
                        String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned()
                    })
                    .unwrap_or_default();
                check.broken_by = Some(broken_by(&landings, at, &line[at].to_string(), &subject));
            }
        }
    }
    super::tree::end_descendants();
    Ok(HeadVerification {
        branch: branch.to_string(),
        head: head.to_string(),
        checks: checks.into_iter().map(|(c, _)| c).collect(),
    })
}

/// Where each sprint of `order` landed on `line`, from its branch's head as
/// the checkout knows it (`origin/<branch>`, or a local branch).
fn landings_of(repo: &git2::Repository, line: &[git2::Oid], order: &FinalOrder) -> Vec<Landing> {
    let mut landings: Vec<Landing> = order
        .sprints
        .iter()
        .filter_map(|s| {
            let tip = [
                format!("refs/remotes/origin/{}", s.branch),
                format!("refs/heads/{}", s.branch),
            ]
            .iter()
            .find_map(|r| repo.refname_to_id(r).ok())?;
            let holds =
                |c: git2::Oid| c == tip || repo.graph_descendant_of(c, tip).unwrap_or(false);
            // The line only grows: once a commit of it holds the branch's
            // tip, every later one does.
            let at = line.partition_point(|&c| !holds(c));
            (at < line.len()).then(|| Landing {
                unit: s.unit.clone(),
                sprint: s.sprint.clone(),
                at,
            })
        })
        .collect();
    landings.sort_by_key(|l| l.at);
    landings
}

/// One throw-away worktree beside the checkout, moved to each commit a
/// bisection asks for, and removed when done.
struct Steps {
    root: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Steps {
    fn new(root: &Path) -> Steps {
        Steps {
            root: root.to_path_buf(),
            dir: tempfile::Builder::new()
                .prefix("supervise-bisect")
                .tempdir()
                .ok(),
        }
    }

    fn git(&self, dir: &Path, args: &[&str]) -> bool {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The worktree, at `commit`, cleaned of what the last step's commands
    /// left.
    fn at(&self, commit: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?.path().join("step");
        if dir.exists() {
            (self.git(&dir, &["checkout", "-q", "--force", "--detach", commit])
                && self.git(&dir, &["clean", "-q", "-f", "-d", "-x"]))
            .then_some(dir)
        } else {
            let d = dir.to_string_lossy().into_owned();
            self.git(
                &self.root,
                &["worktree", "add", "-q", "--detach", &d, commit],
            )
            .then_some(dir)
        }
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let step = d.path().join("step");
            if step.exists() {
                let s = step.to_string_lossy().into_owned();
                self.git(&self.root, &["worktree", "remove", "--force", &s]);
            }
            self.git(&self.root, &["worktree", "prune"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// On a line that passes up to some step and fails from there, the
        /// bisection names exactly that step, checking each step at most
        /// once per halving; on a line that fails at its start, it names
        /// none.
        #[test]
        fn bisection_names_the_first_failing_step(
            len in 2usize..200,
            from_frac in 0.0f64..1.0,
            flip_frac in 0.0f64..1.0,
        ) {
            let from = ((len - 1) as f64 * from_frac) as usize;
            let flip = from + ((len - from) as f64 * flip_frac) as usize;
            let flip = flip.min(len - 1);
            let mut asked = 0;
            let found = first_failing(from, len, |i| { asked += 1; Some(i >= flip) });
            if flip == from || from == len - 1 {
                prop_assert_eq!(found, None);
            } else {
                prop_assert_eq!(found, Some(flip));
            }
            prop_assert!(asked <= 2 + (usize::BITS - len.leading_zeros()) as usize);
        }
    }

    #[test]
    fn a_step_that_cannot_be_checked_names_nothing() {
        assert_eq!(first_failing(0, 10, |i| (i < 5).then_some(false)), None);
    }

    #[test]
    fn the_merge_is_the_first_landing_at_or_after_the_step() {
        let l = |unit: &str, at| Landing {
            unit: unit.into(),
            sprint: SprintId::ordinal(1),
            at,
        };
        let landings = [l("web", 7), l("api", 3), l("db", 5)];
        let said = broken_by(&landings, 4, "0123456789abcdef", "Merge pull request #3");
        assert_eq!(
            said,
            "db Sprint 1's merge: 0123456 (\"Merge pull request #3\")"
        );
        assert_eq!(
            broken_by(&landings, 8, "0123456789abcdef", "a commit"),
            "0123456 (\"a commit\")"
        );
    }
}
