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
