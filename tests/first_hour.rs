//! The first hour of a newcomer, as a story: read the plan, run it (one unit
//! fails), edit the plan, resume, run again, pipe the output, make the usual
//! mistakes — asserting what the person sees and the exit statuses.

mod support;

use std::process::{Command, Output, Stdio};
use support::{git, Checkout};

const PLAN: &str = "# Shop\n\n| Work Unit | Directory | Dependencies |\n|---|---|---|\n| api | api | none |\n| docs | docs | none |\n\n\
## api\n### Sprint 1: Types\n- [ ] `api/api-sprint-1.txt` exists\n\n\
## docs\n### Sprint 1: Guide\n- [ ] `docs/docs-sprint-1.txt` exists\n";

/// A newcomer's repository: the plan, and the scripted agent.
struct Newcomer(Checkout);

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Newcomer {
    fn new() -> Newcomer {
        Newcomer(Checkout::new(
            &[("EXECUTION_PLAN.md", PLAN)],
            "tests/agents/scripted.sh",
            "docs 1 fail,fail,fail,ok\n",
        ))
    }

    fn supervise(&self, args: &[&str]) -> Output {
        self.0
            .cmd(args)
            .env("SUPERVISE_TICK_MS", "50")
            .output()
            .unwrap()
    }

    fn dispatches(&self) -> usize {
        std::fs::read_to_string(&self.0.log)
            .unwrap_or_default()
            .lines()
            .count()
    }
}

#[test]
fn a_newcomers_first_hour() {
    let me = Newcomer::new();

    // Reading the plan.
    let out = me.supervise(&["plan", "show"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(said(&out).contains("docs"), "{}", said(&out));

    // First run, piped: docs fails every attempt and is BLOCKED; api finishes.
    // The final table and where the work is are printed even though stdout is
    // not a terminal.
    let out = me.supervise(&["run"]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("| Work Unit"), "no final table: {text}");
    assert!(
        text.contains("git merge supervise/"),
        "where the work is: {text}"
    );

    // `status` mid-way says what has been spent and for how long.
    let out = me.supervise(&["status"]);
    assert!(said(&out).contains("cost so far"), "{}", said(&out));
    assert!(said(&out).contains(" · running "), "{}", said(&out));

    // An edit that is not committed: refused, with the command to commit it.
    let edited = PLAN.replace(
        "## docs",
        "### Sprint 2: Handlers\n- [ ] `api/api-sprint-2.txt` exists\n\n## docs",
    );
    std::fs::write(me.0.root.join("EXECUTION_PLAN.md"), &edited).unwrap();
    let out = me.supervise(&["resume"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("uncommitted changes"), "{}", said(&out));
    assert!(
        said(&out).contains("git add EXECUTION_PLAN.md"),
        "{}",
        said(&out)
    );

    // Committed: the resume says the plan changed and goes on with the old one.
    git(&me.0.root, &["commit", "-qam", "api sprint 2"]);
    let out = me.supervise(&["resume"]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("The plan changed since this operation started (api Sprint 2 added)"),
        "{text}"
    );
    assert!(text.contains("supervise run --new"), "{text}");

    // Running again after it finished starts a new operation with the new
    // plan, carrying the finished work over: only the new sprint runs.
    let out = me.supervise(&["run"]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("a new operation starts with its work merged"),
        "{text}"
    );
    assert!(
        text.contains("api Sprint 1: Sprint 1 already done"),
        "{text}"
    );
    assert!(me.0.root.join(".supervise/finished").is_dir());
    let files = Command::new("git")
        .args(["ls-tree", "-r", "--name-only", "HEAD"])
        .current_dir(&me.0.root)
        .output()
        .unwrap();
    assert!(files.status.success());

    // The output piped into a reader that goes away: no panic.
    let mut child = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["status"])
        .current_dir(&me.0.root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A mistyped agent: refused before anything is paid for.
    let before = me.dispatches();
    let out = me.supervise(&[
        "run",
        "--new",
        "--agent",
        "claud -p \"$(cat $SUPERVISE_PROMPT_FILE)\"",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("`claud` is not a program on PATH"),
        "{}",
        said(&out)
    );
    assert_eq!(me.dispatches(), before, "nothing was dispatched");

    // An agent command the shell cannot run (127): the operation stops with the
    // message, and no attempt is counted.
    let out = me.supervise(&[
        "run",
        "--new",
        "--agent",
        "sh -c 'echo \"agent-cli: not found\" >&2; exit 127'",
    ]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("The agent command could not run"), "{text}");
    let st = me.supervise(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    for u in st["units"].as_array().unwrap() {
        assert_eq!(u["sprints"][0]["failures"], 0, "{u}");
    }

    // `verify` of a checkout that is not there names it, not `sh`.
    let out = me.supervise(&[
        "verify",
        "--dir",
        "/nowhere/at/all",
        "--unit",
        "api",
        "--sprint",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("--dir /nowhere/at/all: no such directory"),
        "{}",
        said(&out)
    );

    // A wrong path and an unknown flag: exit 1, the path named, nothing created.
    let empty = me.0.root.parent().unwrap().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["run", "nowhere.md"])
        .current_dir(&empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(said(&out).contains("nowhere.md"), "{}", said(&out));
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing created"
    );
    let out = me.supervise(&["run", "--max-paralel", "2"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "usage errors exit 1: {}",
        said(&out)
    );
}

/// `scripts/demo` (the README's main command) with this build: its exit
/// status, a passed final verification, the reports it names existing where
/// it says, and the next step it prints typed as written.
fn demo(mode: &[&str]) -> (Output, String, std::path::PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/demo"))
        .args(mode)
        .env("SUPERVISE_BIN", env!("CARGO_BIN_EXE_supervise"))
        // mktemp puts the throw-away repository here, removed with the test.
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "the demo fails: {text}");
    let work = text
        .lines()
        .find_map(|l| l.strip_prefix("Work directory: "))
        .and_then(|l| l.split(" (").next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("no work directory: {text}"));
    assert!(work.starts_with(tmp.path()), "{text}");
    // Every report it names is there.
    let reports = text
        .lines()
        .find_map(|l| l.strip_prefix("Reports (in the work directory): "))
        .unwrap_or_else(|| panic!("no reports named: {text}"));
    for r in reports.split_whitespace() {
        assert!(
            work.join(r).is_file(),
            "{r} is not in {}: {text}",
            work.display()
        );
    }
    assert!(reports.contains("COMPLETE_"), "{text}");
    (out, text, work, tmp)
}

/// The line the demo prints to make `supervise` typeable, run in a shell
/// with `command` after it.
fn typed_after_demo(text: &str, command: &str) -> Output {
    let setup = text
        .lines()
        .skip_while(|l| !l.starts_with("To type the commands shown above"))
        .nth(1)
        .unwrap_or_else(|| panic!("no PATH line: {text}"))
        .trim();
    Command::new("sh")
        .args(["-c", &format!("{setup} && {command}")])
        .env_remove("PATH")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

#[test]
fn the_demo_runs_the_greeter_plan_to_a_passed_final_verification() {
    let (_, text, work, _tmp) = demo(&[]);
    assert!(text.contains("✓ Final head"), "{text}");
    assert!(!text.contains("BLOCKED:"), "{text}");
    assert!(
        text.contains("(simulated flaky first attempt)"),
        "the retry is shown: {text}"
    );
    // The summary's pointer to the detailed analysis is a file that exists.
    let named = text
        .lines()
        .find_map(|l| l.strip_prefix("Detailed analysis available in: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(work.join(named.trim()).is_file(), "{named}");
    // The next step it prints works when typed.
    let out = typed_after_demo(&text, "supervise status");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(said(&out).contains("status: completed"), "{}", said(&out));
}

#[test]
fn the_solve_demo_runs_to_a_passed_end_and_names_its_reports_where_they_are() {
    let (_, text, work, _tmp) = demo(&["solve"]);
    let named = text
        .lines()
        .find_map(|l| l.strip_prefix("Detailed analysis available in: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        named.starts_with(".supervise/solve/") && work.join(named.trim()).is_file(),
        "{named} is not where the summary says: {text}"
    );
    let out = typed_after_demo(&text, "supervise status");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
}

/// A sprint whose command criterion fails every attempt: its BLOCKED notice
/// — on the terminal, in `status` and in SUPERVISOR_STATE.md — quotes what
/// the check printed and says where the work is and how to hand a fix back;
/// the retry's prompt quotes it to the next agent too.
#[test]
fn a_blocked_notice_quotes_what_the_failing_check_printed_and_where_the_work_is() {
    let plan = "# Shop\n\n| Work Unit | Directory | Dependencies |\n|---|---|---|\n| api | api | none |\n\n\
## api\n### Sprint 1: Types\n- [ ] `api/api-sprint-1.txt` exists\n\
- [ ] `sh -c 'echo line one; echo AssertionError: greeting is Hullo; exit 1'` passes\n";
    let me = Newcomer(Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/scripted.sh",
        "api 1 prompt\n",
    ));
    let out = me.supervise(&["run"]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let notice = &text[text
        .find("BLOCKED: api Sprint 1")
        .unwrap_or_else(|| panic!("{text}"))..];
    for part in [
        "AssertionError: greeting is Hullo",
        "The sprint's work: branch supervise/",
        "/api/sprint-1",
        "To hand a fix back: commit it on supervise/",
        "`supervise resume api`",
        "Its checkout: .supervise/worktrees/",
    ] {
        assert!(notice.contains(part), "{part}: {notice}");
    }
    // The checkout it names is there, on the sprint's branch.
    let checkout = notice
        .lines()
        .find_map(|l| l.strip_prefix("Its checkout: "))
        .unwrap();
    let branch = git(
        &me.0.root.join(checkout.trim()),
        &["branch", "--show-current"],
    );
    assert!(branch.trim().ends_with("/api/sprint-1"), "{branch}");
    let status = said(&me.supervise(&["status"]));
    assert!(
        status.contains("AssertionError: greeting is Hullo"),
        "{status}"
    );
    let state = std::fs::read_to_string(me.0.root.join("SUPERVISOR_STATE.md")).unwrap();
    assert!(
        state.contains("AssertionError: greeting is Hullo"),
        "{state}"
    );
    // The third attempt's prompt (committed by the `prompt` agent) told the
    // agent what the check printed.
    let prompt = git(
        &me.0.root.join(checkout.trim()),
        &["show", "HEAD:api/api-sprint-1.txt"],
    );
    assert!(
        prompt.contains("> AssertionError: greeting is Hullo"),
        "{prompt}"
    );
}
