//! §3 steps 4–5, decided once for both places: which of a unit's leading
//! sprints were done before the operation started, from what the starting
//! commit holds (progress files, the files the exit criteria name) and, where
//! the place may run them, the criteria's commands.
//!
//! The places only look things up. The local place reads its checkout and runs
//! commands in a clean worktree; the GitHub place reads files through the
//! contents API and runs nothing (the service never runs a repository's
//! commands), so a sprint done before the start is taken there only on its
//! progress file's word with no named file missing.

use crate::engine::{AlreadyDone, CriterionOutcome, CriterionResult, ProgressMarker};
use crate::plan::{Assertion, Criterion, FileRole, Plan, ReferencedFile, Sprint, WorkUnit};

/// Whether `results` (the checks made on the head a fresh sprint would
/// start from) show its work is already there: every exit criterion passed,
/// and the pass is not one the repository already had — a file criterion is
/// among them, or a command criterion that failed at the operation's
/// starting commit (`failed_at_start`, by text). A sprint whose criteria are
/// commands that passed before any work (`cargo test` on green tests)
/// cannot be told done from not done, and is dispatched.
pub fn work_is_there(
    sprint: &Sprint,
    results: &[CriterionResult],
    failed_at_start: &[String],
) -> bool {
    let own = crate::engine::cascade::own_results(sprint, results);
    let all_pass = !own.is_empty() && own.iter().all(|r| r.outcome == CriterionOutcome::Passed);
    all_pass
        && (crate::engine::cascade::file_evidence(sprint, &own)
            || sprint
                .exit_criteria
                .iter()
                .any(|c| c.command.is_some() && failed_at_start.contains(&c.text)))
}

/// Whether a place may skip a fresh sprint's agent on evidence that its work
/// is there: not for sprints whose end is more than their criteria (a
/// process left running, a condition awaited, a person's check).
pub fn may_be_found_done(sprint: &Sprint) -> bool {
    !matches!(
        sprint.kind,
        crate::plan::SprintType::Background
            | crate::plan::SprintType::Deferred
            | crate::plan::SprintType::Manual
    ) && !sprint.exit_criteria.is_empty()
        && sprint
            .exit_criteria
            .iter()
            .all(|c| c.is_machine_checkable())
}

/// A file as a place found it at the starting commit.
pub enum Found {
    /// Its bytes (perhaps cut at a size limit; empty for a directory).
    File(Vec<u8>),
    Missing,
    /// Not looked up yet: the place should read it and ask again.
    NotRead,
}

/// What [`already_done`] needs besides the plan.
pub trait StartingCommit {
    /// The file at `path` (relative to the repository's root).
    fn read(&self, path: &str) -> Found;
    /// Runs a command criterion from the repository's root and says whether
    /// it passed: None when this place does not run commands.
    fn run(&mut self, unit: &WorkUnit, criterion: &Criterion) -> Option<bool>;
}

/// Said of a command criterion where no command runs.
pub const NOT_RUN: &str = "not run: the service runs no repository command";

/// The leading sprints of each unit that were done at the starting commit, or
/// the paths still to read before that can be said (ask again with them read).
///
/// A sprint is done when none of its exit criteria fails and either a progress
/// file marks it complete or every criterion was checked and passed with a
/// file criterion among them: at the starting commit a passing command is
/// no evidence (`cargo test` passes on green tests before any work), so a
/// sprint whose criteria are all commands is dispatched. A unit's
/// first sprint that is not done ends its run of done ones: a later sprint
/// found done is dispatched as planned. Files are looked at before any
/// command runs, and the first failure ends the look, so a sprint that is
/// not done costs one failing check at most.
pub fn already_done(
    plan: &Plan,
    commit: &mut dyn StartingCommit,
) -> Result<Vec<AlreadyDone>, Vec<String>> {
    let mut done = Vec::new();
    let mut unread = Vec::new();
    for unit in &plan.work_units {
        for sprint in &unit.sprints {
            match judge(plan, unit, sprint, commit) {
                Judged::Done(d) => done.push(d),
                Judged::NotDone => break,
                Judged::Unread(paths) => {
                    unread.extend(paths);
                    break;
                }
            }
        }
    }
    if unread.is_empty() {
        Ok(done)
    } else {
        unread.sort();
        unread.dedup();
        Err(unread)
    }
}

enum Judged {
    Done(AlreadyDone),
    NotDone,
    Unread(Vec<String>),
}

fn judge(plan: &Plan, unit: &WorkUnit, sprint: &Sprint, commit: &mut dyn StartingCommit) -> Judged {
    let mut unread = Vec::new();
    let mut marker = None;
    for f in progress_files(plan, unit) {
        match commit.read(&f.path) {
            Found::File(bytes) => {
                marker = marker.or(marker_in(
                    &String::from_utf8_lossy(&bytes),
                    sprint.id.as_str(),
                ))
            }
            Found::Missing => {}
            Found::NotRead => unread.push(f.path.clone()),
        }
    }
    if marker == Some(ProgressMarker::Partial) {
        return Judged::NotDone;
    }
    // Files first: cheap, and a missing one settles it before any command.
    let mut results = Vec::new();
    for c in sprint.exit_criteria.iter().filter(|c| c.command.is_none()) {
        let (outcome, detail) = match &c.assertion {
            Some(a) => match check_assertion(a, |p| commit.read(p)) {
                Some(r) => r,
                None => {
                    unread.push(a_path(a).to_string());
                    continue;
                }
            },
            None => (CriterionOutcome::Unverified, "needs a person".to_string()),
        };
        if outcome == CriterionOutcome::Failed {
            return Judged::NotDone;
        }
        results.push(result(c, outcome, detail));
    }
    if !unread.is_empty() {
        return Judged::Unread(unread);
    }
    if marker.is_none()
        && results
            .iter()
            .any(|r| r.outcome != CriterionOutcome::Passed)
    {
        return Judged::NotDone;
    }
    for c in sprint.exit_criteria.iter().filter(|c| c.command.is_some()) {
        let (outcome, detail) = match commit.run(unit, c) {
            Some(true) => (CriterionOutcome::Passed, String::new()),
            // Why it fails is the dispatched agent's to find.
            Some(false) => return Judged::NotDone,
            None if marker.is_some() => (CriterionOutcome::Unverified, NOT_RUN.to_string()),
            None => return Judged::NotDone,
        };
        results.push(result(c, outcome, detail));
    }
    results.sort_by_key(|r| r.line);
    let count = |o: CriterionOutcome| results.iter().filter(|r| r.outcome == o).count();
    let evidence = match marker {
        Some(_) => {
            let not_run = results.iter().filter(|r| r.detail == NOT_RUN).count();
            let mut e = format!(
                "the progress file marks Sprint {} complete at the starting commit; exit criteria: {} passed, {} need a person",
                sprint.id,
                count(CriterionOutcome::Passed),
                count(CriterionOutcome::Unverified) - not_run,
            );
            if not_run > 0 {
                e.push_str(&format!(
                    ", {not_run} command(s) not run (the service runs no repository command)"
                ));
            }
            e
        }
        None if !crate::engine::cascade::file_evidence(sprint, &results) => return Judged::NotDone,
        None => format!(
            "all {} exit criteria of Sprint {} pass at the starting commit",
            results.len(),
            sprint.id
        ),
    };
    Judged::Done(AlreadyDone {
        unit: unit.name.clone(),
        sprint: sprint.id.clone(),
        criteria: results,
        evidence,
    })
}

fn result(c: &Criterion, outcome: CriterionOutcome, detail: String) -> CriterionResult {
    CriterionResult {
        line: c.line,
        text: c.text.clone(),
        outcome,
        detail,
    }
}

/// The file an assertion is about, from the project's root.
pub fn a_path(a: &Assertion) -> &str {
    match a {
        Assertion::FileExists { path } | Assertion::FileContains { path, .. } => path,
    }
}

/// Checks a file assertion against files read by `read`. A path is the
/// repository root's, as a command criterion's working directory is: one
/// meaning for every criterion, whatever the unit's `Directory`. None when
/// the file is not read yet.
pub fn check_assertion(
    a: &Assertion,
    read: impl Fn(&str) -> Found,
) -> Option<(CriterionOutcome, String)> {
    let path = a_path(a);
    let body = match read(path) {
        Found::File(b) => Some(b),
        Found::Missing => None,
        Found::NotRead => return None,
    };
    Some(match (a, body) {
        (_, None) => (CriterionOutcome::Failed, format!("{path} does not exist")),
        (Assertion::FileExists { .. }, Some(_)) => (CriterionOutcome::Passed, String::new()),
        (Assertion::FileContains { text, .. }, Some(b)) => {
            if String::from_utf8_lossy(&b).contains(text.as_str()) {
                (CriterionOutcome::Passed, String::new())
            } else {
                (
                    CriterionOutcome::Failed,
                    format!("{path} does not contain `{text}`"),
                )
            }
        }
    })
}

/// The progress files the plan names for `unit` (its own, and the plan's
/// shared ones).
pub fn progress_files<'a>(
    plan: &'a Plan,
    unit: &'a WorkUnit,
) -> impl Iterator<Item = &'a ReferencedFile> {
    plan.referenced_files.iter().filter(move |f| {
        f.role == FileRole::Progress && f.unit.as_deref().is_none_or(|u| u == unit.name)
    })
}

/// §5c: what a progress file's text says of `sprint` ("Sprint 2: done"), the
/// last line that names it deciding.
pub fn marker_in(text: &str, sprint: &str) -> Option<ProgressMarker> {
    let needle = format!("sprint {sprint}").to_lowercase();
    for line in text.lines().rev() {
        let l = line.to_lowercase();
        if !crate::text::contains_word(&l, &needle) {
            continue;
        }
        if ["(partial)", "partial", "incomplete", "in progress"]
            .iter()
            .any(|w| l.contains(w))
        {
            return Some(ProgressMarker::Partial);
        }
        if ["complete", "done", "passing", "[x]", "✓"]
            .iter()
            .any(|w| l.contains(w))
        {
            return Some(ProgressMarker::Complete);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{already_done, Found, StartingCommit, NOT_RUN};
    use crate::plan::{Criterion, WorkUnit};
    use std::collections::HashMap;

    /// Files by path; commands pass when their text is in `passing` (None:
    /// this place runs none).
    struct Commit {
        files: HashMap<&'static str, &'static str>,
        passing: Option<Vec<&'static str>>,
        ran: Vec<String>,
    }

    impl StartingCommit for Commit {
        fn read(&self, path: &str) -> Found {
            match self.files.get(path) {
                Some(t) => Found::File(t.as_bytes().to_vec()),
                None => Found::Missing,
            }
        }
        fn run(&mut self, _: &WorkUnit, c: &Criterion) -> Option<bool> {
            let cmd = c.command.clone()?;
            self.ran.push(cmd.clone());
            Some(self.passing.as_ref()?.contains(&cmd.as_str()))
        }
    }

    const PLAN: &str = "# Tool\n\nProgress is kept in `PROGRESS.md`.\n\n## Sprint 1: Scaffold\n- [ ] `a.txt` exists\n- [ ] `make one` succeeds\n\n## Sprint 2: Feature\n- [ ] `make two` succeeds\n";

    fn judged(
        files: &[(&'static str, &'static str)],
        passing: Option<Vec<&'static str>>,
    ) -> (Vec<String>, Vec<String>) {
        let plan = crate::plan::parse(PLAN, "plan").unwrap();
        let mut c = Commit {
            files: files.iter().copied().collect(),
            passing,
            ran: Vec::new(),
        };
        let done = already_done(&plan, &mut c).unwrap();
        (done.iter().map(|d| d.evidence.clone()).collect(), c.ran)
    }

    #[test]
    fn a_missing_file_settles_it_before_any_command_runs() {
        let (done, ran) = judged(&[("PROGRESS.md", "Sprint 1: done")], Some(vec!["make one"]));
        assert!(done.is_empty());
        assert!(ran.is_empty(), "{ran:?}");
    }

    #[test]
    fn passing_criteria_are_enough_where_commands_run_and_a_failure_stops_the_unit() {
        let (done, ran) = judged(&[("a.txt", "")], Some(vec!["make one"]));
        assert_eq!(
            done,
            ["all 2 exit criteria of Sprint 1 pass at the starting commit"]
        );
        assert_eq!(ran, ["make one", "make two"]);
    }

    #[test]
    fn where_no_command_runs_only_the_progress_file_counts() {
        let (done, _) = judged(&[("a.txt", "")], None);
        assert!(done.is_empty(), "{done:?}");
        let (done, _) = judged(
            &[
                ("a.txt", ""),
                ("PROGRESS.md", "- Sprint 1: complete\n- Sprint 2: partial"),
            ],
            None,
        );
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(done[0].contains("1 command(s) not run"), "{}", done[0]);
        let plan = crate::plan::parse(PLAN, "plan").unwrap();
        let mut c = Commit {
            files: [("a.txt", ""), ("PROGRESS.md", "Sprint 1 done")]
                .into_iter()
                .collect(),
            passing: None,
            ran: Vec::new(),
        };
        let found = already_done(&plan, &mut c).unwrap();
        assert!(found[0].criteria.iter().any(|r| r.detail == NOT_RUN));
    }

    /// A place that reads lazily is asked for exactly what it has not read.
    #[test]
    fn unread_files_are_asked_for_then_judged() {
        struct Lazy(HashMap<String, Found>);
        impl StartingCommit for Lazy {
            fn read(&self, path: &str) -> Found {
                match self.0.get(path) {
                    Some(Found::File(b)) => Found::File(b.clone()),
                    Some(_) => Found::Missing,
                    None => Found::NotRead,
                }
            }
            fn run(&mut self, _: &WorkUnit, _: &Criterion) -> Option<bool> {
                None
            }
        }
        let plan = crate::plan::parse(PLAN, "plan").unwrap();
        let mut lazy = Lazy(HashMap::new());
        let asked = already_done(&plan, &mut lazy).unwrap_err();
        assert_eq!(asked, ["PROGRESS.md", "a.txt"]);
        lazy.0.insert(
            "PROGRESS.md".into(),
            Found::File(b"Sprint 1: done\nSprint 2: done".to_vec()),
        );
        lazy.0.insert("a.txt".into(), Found::File(Vec::new()));
        let done = already_done(&plan, &mut lazy).unwrap();
        assert_eq!(done.len(), 2, "both marked done, commands not run");
    }
}
