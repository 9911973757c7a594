//! A sprint's exit criteria run in a checkout, each to a result, and the
//! §5c markers of its progress files. Runs where the agent ran (a local
//! worktree or an Actions runner), never on a server.

use crate::engine::done_before::{check_assertion, marker_in, progress_files, Found};
use crate::engine::{CriterionOutcome, CriterionResult, ProgressMarker};
use crate::plan::{Criterion, Plan, Sprint, WorkUnit};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `sh -c cmd` in `dir` with a time limit, in its own process group so a
/// timeout kills everything it started. Returns (success, combined output tail).
pub fn run_shell(cmd: &str, dir: &Path, timeout: Duration) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let log = match tempfile::NamedTempFile::new() {
        Ok(f) => f,
        Err(e) => return (false, format!("cannot create a temporary file: {e}")),
    };
    let (out, err) = match (log.reopen(), log.reopen()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return (false, "cannot open the output file".into()),
    };
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    // A criterion is repository code the agent may have written: it gets no
    // secret and no token of the process that checks it.
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_none_or(|n| crate::scrub::secret_name(n) || n.starts_with("ACTIONS_"))
        {
            command.env_remove(name);
        }
    }
    let child = command.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot start `sh`: {e}")),
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => {
                // What it left running in its group ends with it: nothing
                // the criterion started outlives the check (to rewrite the
                // verdict, say).
                // SAFETY: signalling a process group we created; no memory is involved.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                break Some(s);
            }
            Ok(None) if start.elapsed() >= timeout => {
                // SAFETY: signalling a process group we created; no memory is involved.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let mut text = String::new();
    let _ = log.reopen().and_then(|mut f| f.read_to_string(&mut text));
    let tail = tail(&text, 2000);
    match status {
        Some(s) => (s.success(), tail),
        None => (
            false,
            format!("timed out after {} s\n{tail}", timeout.as_secs()),
        ),
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// A command criterion run in `dir`: it passes on exit status 0 with the
/// expected output, if the plan gives one. None for a criterion without a
/// command.
pub fn check_command(
    c: &Criterion,
    dir: &Path,
    timeout: Duration,
) -> Option<(CriterionOutcome, String)> {
    let (ok, out) = run_shell(c.command.as_deref()?, dir, timeout);
    Some(match (ok, &c.expected) {
        (true, Some(exp)) if !out.contains(exp.trim()) => (
            CriterionOutcome::Failed,
            format!("output does not contain `{}`", exp.trim()),
        ),
        (true, _) => (CriterionOutcome::Passed, String::new()),
        (false, _) => (CriterionOutcome::Failed, tail(&out, 500)),
    })
}

/// One criterion, checked in the checkout at `root`: a command runs from
/// the root, and a file criterion's path is the root's, so `core/types.txt`
/// exists and `grep -q Money core/types.txt` speak of one file whatever the
/// unit's `Directory` (which tells the agent where its work lives).
pub fn check(c: &Criterion, root: &Path, timeout: Duration) -> (CriterionOutcome, String) {
    if let Some(result) = check_command(c, root, timeout) {
        return result;
    }
    match &c.assertion {
        Some(a) => check_assertion(a, |p| read_found(root, p))
            .unwrap_or((CriterionOutcome::Failed, "could not be read".into())),
        None => (CriterionOutcome::Unverified, "needs a person".into()),
    }
}

/// A file of the checkout at `root` as the start's and the criteria's checks
/// see it: a directory exists with no bytes; a special file is missing.
pub fn read_found(root: &Path, path: &str) -> Found {
    let p = root.join(path);
    if p.is_dir() {
        return Found::File(Vec::new());
    }
    match crate::contract::read_untrusted(&p, crate::contract::EVIDENCE_FILE_LIMIT) {
        Some(b) => Found::File(b),
        None => Found::Missing,
    }
}

/// Checks every exit criterion of `sprint` in the checkout at `root`.
pub fn verify_sprint(sprint: &Sprint, root: &Path, timeout: Duration) -> Vec<CriterionResult> {
    sprint
        .exit_criteria
        .iter()
        .map(|c| {
            let (outcome, detail) = check(c, root, timeout);
            CriterionResult {
                line: c.line,
                text: c.text.clone(),
                outcome,
                detail,
            }
        })
        .collect()
}

/// §5c: what the unit's progress files say about this sprint, if anything.
pub fn progress_marker(
    plan: &Plan,
    unit: &WorkUnit,
    sprint: &Sprint,
    root: &Path,
) -> Option<ProgressMarker> {
    progress_files(plan, unit)
        .filter_map(|f| match read_found(root, &f.path) {
            Found::File(b) => marker_in(&String::from_utf8_lossy(&b), sprint.id.as_str()),
            _ => None,
        })
        .next()
}

#[cfg(test)]
mod tests {
    //! Each kind of criterion, read from plan text by the real reader and
    //! run by the real checker in a real directory: what passes, what fails
    //! and what the failure says.
    use super::*;

    fn sprint(plan: &str) -> Sprint {
        let plan = crate::plan::parse(plan, "Kinds").expect("the test plan reads");
        plan.work_units[0].sprints[0].clone()
    }

    fn outcomes(plan: &str, root: &Path, timeout: Duration) -> Vec<(CriterionOutcome, String)> {
        verify_sprint(&sprint(plan), root, timeout)
            .into_iter()
            .map(|r| (r.outcome, r.detail))
            .collect()
    }

    const SECOND: Duration = Duration::from_secs(1);
    const ENOUGH: Duration = Duration::from_secs(20);

    #[test]
    fn expected_output_must_be_in_what_the_command_prints() {
        let dir = tempfile::tempdir().unwrap();
        let plan = |expected: &str| {
            format!(
                "# Kinds\n\n## Sprint 1: Count\n**Validate**:\n```bash\necho 12 tokens\n```\n\
                 **Expected output**:\n```\n{expected}\n```\n"
            )
        };
        let found = outcomes(&plan("12 tokens"), dir.path(), ENOUGH);
        assert_eq!(found[0].0, CriterionOutcome::Passed, "{found:?}");
        let found = outcomes(&plan("13 tokens"), dir.path(), ENOUGH);
        assert_eq!(found[0].0, CriterionOutcome::Failed, "{found:?}");
        assert!(
            found[0].1.contains("13 tokens"),
            "says what was missing: {found:?}"
        );
    }

    #[test]
    fn what_the_words_after_a_command_ask_is_checked_not_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            assert!(std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .status()
                .unwrap()
                .success())
        };
        git(&["init", "-q"]);
        let plan = "# Kinds\n\n## Sprint 1: Clean\n- [ ] `git status --porcelain` is empty\n- [ ] `test -f missing.txt` fails\n";
        let found = outcomes(plan, dir.path(), ENOUGH);
        assert_eq!(
            found[0].0,
            CriterionOutcome::Passed,
            "a clean checkout: {found:?}"
        );
        assert_eq!(
            found[1].0,
            CriterionOutcome::Passed,
            "the file is missing: {found:?}"
        );
        std::fs::write(dir.path().join("missing.txt"), "here").unwrap();
        let found = outcomes(plan, dir.path(), ENOUGH);
        assert_eq!(
            found[0].0,
            CriterionOutcome::Failed,
            "an untracked file: {found:?}"
        );
        assert_eq!(found[1].0, CriterionOutcome::Failed, "{found:?}");
    }

    #[test]
    fn a_contains_assertion_fails_on_the_wrong_text_and_on_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("report")).unwrap();
        std::fs::write(dir.path().join("report/out.html"), "<b>Sum</b>").unwrap();
        let plan = "# Kinds\n\n## Sprint 1: Page\n- [ ] `report/out.html` contains \"Total\"\n";
        let found = outcomes(plan, dir.path(), ENOUGH);
        assert_eq!(found[0].0, CriterionOutcome::Failed, "{found:?}");
        std::fs::write(dir.path().join("report/out.html"), "<b>Total</b>").unwrap();
        assert_eq!(
            outcomes(plan, dir.path(), ENOUGH)[0].0,
            CriterionOutcome::Passed
        );
        std::fs::remove_file(dir.path().join("report/out.html")).unwrap();
        assert_eq!(
            outcomes(plan, dir.path(), ENOUGH)[0].0,
            CriterionOutcome::Failed
        );
    }

    #[test]
    fn a_command_past_its_time_fails_and_says_so_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().unwrap();
        // The criterion would write `late` after its time: it must not.
        let plan = "# Kinds\n\n## Sprint 1: Slow\n- [ ] `sleep 5; touch late` passes\n";
        let found = outcomes(plan, dir.path(), SECOND);
        assert_eq!(found[0].0, CriterionOutcome::Failed, "{found:?}");
        assert!(found[0].1.contains("timed out after 1 s"), "{found:?}");
        std::thread::sleep(Duration::from_secs(5));
        assert!(
            !dir.path().join("late").exists(),
            "the timed-out command was killed"
        );
    }

    #[test]
    fn a_criterion_runs_without_the_checkers_secrets() {
        let dir = tempfile::tempdir().unwrap();
        // Variables named as secrets are set in this test process (each test
        // runs in its own process under nextest; the names are this test's).
        std::env::set_var("KINDS_TEST_API_KEY", "sk-ant-kinds-test-value");
        std::env::set_var("KINDS_TEST_PLAIN", "visible");
        let plan = "# Kinds\n\n## Sprint 1: Env\n\
                    - [ ] `test -z \"$KINDS_TEST_API_KEY\"` passes\n\
                    - [ ] `test \"$KINDS_TEST_PLAIN\" = visible` passes\n";
        let found = outcomes(plan, dir.path(), ENOUGH);
        assert_eq!(
            found[0].0,
            CriterionOutcome::Passed,
            "the key is absent: {found:?}"
        );
        assert_eq!(
            found[1].0,
            CriterionOutcome::Passed,
            "other variables stay: {found:?}"
        );
    }

    #[test]
    fn a_checklist_item_is_left_to_a_person() {
        let dir = tempfile::tempdir().unwrap();
        let plan = "# Kinds\n\n## Sprint 1: Look\n**Exit criteria**:\n- [ ] The page looks right\n";
        let found = outcomes(plan, dir.path(), ENOUGH);
        assert_eq!(found[0].0, CriterionOutcome::Unverified, "{found:?}");
    }
}
