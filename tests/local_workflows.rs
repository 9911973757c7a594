//! `supervise solve` and `supervise manage` end to end: a real git repository,
//! real agent processes (examples/agents/workflow-agent.sh plays every role),
//! real kills.

mod support;

use std::process::{Output, Stdio};
use std::time::Duration;
use support::{git, kill_after, text, Checkout, XorShift};

/// A repository with settings for work without a plan, and the agent that
/// plays every role.
struct Repo(Checkout);

impl std::ops::Deref for Repo {
    type Target = Checkout;
    fn deref(&self) -> &Checkout {
        &self.0
    }
}

impl Repo {
    fn new(behaviour: &str) -> Repo {
        Repo(Checkout::new(
            &[
                (
                    ".github/supervise.yml",
                    "without_plan:\n  research_agents_min: 3\n  research_agents_max: 3\n  test_command: test -f fixed.txt\n",
                ),
                ("README.md", "# A service\n"),
            ],
            "examples/agents/workflow-agent.sh",
            behaviour,
        ))
    }

    /// Waits (30 s at most) until a `supervise solve` runs here and has
    /// launched its agents (each notes its start in the agents' log).
    fn wait_for_solve(&self) {
        let dir = self.root.join(".supervise").join("solve");
        let began = std::time::Instant::now();
        while supervise::place::local::supervisor::running_supervisor(&dir).is_none()
            || self.invocations().len() < 3
        {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "solve never started its agents: {:?}",
                self.invocations()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// The recorded state of the `solve` or `manage` operation.
    fn state(&self, kind: &str) -> serde_json::Value {
        let log = self.root.join(".supervise").join(kind).join("events.jsonl");
        let st = supervise::store::FileLedger::read(log)
            .unwrap()
            .state
            .unwrap();
        serde_json::to_value(st).unwrap()
    }

    fn units(&self, kind: &str) -> Vec<(String, String)> {
        self.state(kind)["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                (
                    u["name"].as_str().unwrap().to_string(),
                    u["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn integration_files(&self, kind: &str) -> String {
        let op = self.state(kind)["id"].as_str().unwrap().to_string();
        git(
            &self.root,
            &[
                "ls-tree",
                "-r",
                "--name-only",
                &format!("supervise/{op}/integration"),
            ],
        )
    }
}

#[test]
fn solve_runs_every_phase_of_a_full_implementation_to_its_summary() {
    // One research agent of three fails; the first plan does not parse; the
    // tests fail after implementation and the second debug round fixes them.
    let repo = Repo::new("research-2 fail\nplan bad,ok\ndebug nofix,ok\n");
    let out = repo.run(&[
        "solve",
        "Add rate limiting to the API",
        "--max-parallel",
        "3",
    ]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("Scope: full-implementation (phases 0–4 and 6 (5 only if the tests fail)), because the first building or debugging word is \"add\""),
        "{said}"
    );
    let units = repo.units("solve");
    let names: Vec<&str> = units.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "research-1",
            "research-2",
            "research-3",
            "plan",
            "limiter",
            "config",
            "wiring",
            "testing",
            "debug",
            "docs"
        ]
    );
    assert_eq!(repo.state("solve")["status"], "COMPLETED");
    let files = repo.integration_files("solve");
    for f in [
        "specs/001_add_rate_limiting_to_the/reports/001_codebase.md",
        "specs/001_add_rate_limiting_to_the/reports/003_risks.md",
        "specs/001_add_rate_limiting_to_the/plans/001_implementation.md",
        "limiter.txt",
        "config.txt",
        "wiring.txt",
        "fixed.txt",
        "specs/001_add_rate_limiting_to_the/debug/001_analysis.md",
        "specs/001_add_rate_limiting_to_the/summaries/001_summary.md",
    ] {
        assert!(
            files.contains(f),
            "{f} missing from the integration branch:\n{files}"
        );
    }
    assert!(
        !files.contains("reports/002_approaches.md"),
        "the failed agent wrote nothing"
    );
    // The generated plan's independent units ran side by side.
    let inv = repo.invocations();
    let at = |u: &str| {
        inv.iter()
            .position(|l| l.starts_with(&format!("{u} ")))
            .unwrap()
    };
    assert!(at("config") < at("wiring") && at("limiter") < at("wiring"));
    let debug_rounds = inv.iter().filter(|l| l.starts_with("debug ")).count();
    assert_eq!(debug_rounds, 2);
}

#[test]
fn solve_stops_with_the_diagnostic_when_most_research_fails_and_resume_goes_on() {
    let repo = Repo::new("research-1 fail\nresearch-2 fail\n");
    let out = repo.run(&["solve", "Research how retries are done elsewhere"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "BLOCKED: {said}");
    assert!(said.contains("ERROR [Phase 1, Research]"), "{said}");
    assert!(
        said.contains("1 of 3 research reports were written"),
        "{said}"
    );
    // Its next steps work when typed: `supervise resume` finds no plan here.
    assert!(!said.contains("supervise resume"), "{said}");
    assert!(said.contains("supervise solve"), "{said}");
    // A fresh description while it is under way is refused with the way on.
    let again = repo.run(&["solve", "Something else"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).contains("without a description to go on"));
    // Fixed (the agents now succeed): going on resumes what failed, and the
    // research-only workflow ends with its reports.
    std::fs::write(&repo.behaviour, "").unwrap();
    let out = repo.run(&["solve"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state("solve")["status"], "COMPLETED");
    assert_eq!(
        repo.units("solve").len(),
        4,
        "research-only adds the overview"
    );
    let files = repo.integration_files("solve");
    assert!(
        files.contains("specs/001_research_how_retries_are_done/reports/002_approaches.md"),
        "{files}"
    );
    assert!(
        files.contains("specs/001_research_how_retries_are_done/reports/OVERVIEW.md"),
        "{files}"
    );
    // A finished workflow is set aside for the next; the scope can be named.
    let out = repo.run(&["solve", "--scope", "research-and-plan", "Retries"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("Scope: research-and-plan (phases 0–2), because asked for explicitly"),
        "{said}"
    );
    assert_eq!(repo.units("solve").len(), 3 + 1);
    assert!(
        said.contains("Artifacts: specs/002_retries/"),
        "numbered after the first: {said}"
    );
}

#[test]
fn manage_runs_the_tasks_the_manager_names_and_retries_a_malformed_answer() {
    let repo = Repo::new("manager-2 bad,ok\n");
    let out = repo
        .cmd(&["manage", "Refactor the API layer"])
        .env("AGENT_TASKS", "2")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("Manager loop: the kanban is specs/001_refactor_the_api_layer/KANBAN.md"),
        "{said}"
    );
    let names: Vec<String> = repo.units("manage").into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["manager-1", "task-1", "manager-2", "task-2", "manager-3"]
    );
    let files = repo.integration_files("manage");
    assert!(
        files.contains("specs/001_refactor_the_api_layer/KANBAN.md"),
        "{files}"
    );
    assert!(
        files.contains("tasks/1.md.log") && files.contains("tasks/2.md.log"),
        "{files}"
    );
    // The malformed answer cost one retry, whose prompt carried the error.
    let st = repo.state("manage");
    let m2 = st["units"][2]["sprints"][0].clone();
    assert_eq!(m2["failures"], 1, "{m2}");
    assert!(m2["last_failure"]
        .as_str()
        .unwrap()
        .contains("not a task marked todo"));
    // The status shown mirrors the manager's last list.
    // Beside the workflow's own state, never over a plan run's.
    assert!(!repo.root.join("SUPERVISOR_STATE.md").exists());
    let state_md =
        std::fs::read_to_string(repo.root.join(".supervise/manage/SUPERVISOR_STATE.md")).unwrap();
    assert!(state_md.contains("- [x] tasks/2.md"), "{state_md}");
}

impl Repo {
    /// Runs workflow `kind` (`first` starts it; later runs resume it) to its
    /// end, killing the supervisor after a random delay each time, and checks
    /// that it ends COMPLETED with no attempt run twice. On failure, the
    /// message holds the last run's standard error and the log's last events.
    fn run_killed_at_random_points(
        &self,
        seed: u64,
        kind: &str,
        first: &[&str],
        env: &[(&str, &str)],
    ) {
        let mut rng = XorShift::new(seed);
        let mut runs = 0;
        let logs = tempfile::tempdir().unwrap();
        let last_words = |runs: usize| {
            let log = logs.path().join(format!("{runs}.log"));
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let events = self.root.join(".supervise").join(kind).join("events.jsonl");
            let events = std::fs::read_to_string(events).unwrap_or_default();
            let last: Vec<&str> = events.lines().rev().take(8).collect();
            format!(
                "run {runs}'s standard error, last lines first:\n{}\nthe log's last events, last first:\n{}",
                tail.join("\n"),
                last.join("\n")
            )
        };
        loop {
            runs += 1;
            assert!(
                runs < 60,
                "seed {seed}: the workflow never finished; {}",
                last_words(runs - 1)
            );
            let args: Vec<&str> = if runs == 1 {
                first.to_vec()
            } else {
                vec![kind, "--quiet"]
            };
            let mut sup = self
                .cmd(&args)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(logs.path().join(format!("{runs}.log"))).unwrap())
                .spawn()
                .unwrap();
            // Later runs get longer before the kill, so that a loaded
            // machine (where a run may get nowhere in a second) still ends.
            let delay = Duration::from_millis(200 + rng.next_u64() % 1200 + runs as u64 * 100);
            if let Some(s) = kill_after(&mut sup, delay) {
                assert!(
                    s.code() == Some(0) || s.code() == Some(3),
                    "seed {seed}: {s:?}; {}",
                    last_words(runs)
                );
                if s.code() == Some(0) {
                    break;
                }
            }
        }
        assert_eq!(
            self.state(kind)["status"],
            "COMPLETED",
            "seed {seed}; {}",
            last_words(runs)
        );
        self.assert_no_attempt_ran_twice(&format!("seed {seed}"));
    }
}

#[test]
fn killing_solve_at_random_points_loses_nothing_and_runs_no_attempt_twice() {
    for seed in 0..3u64 {
        let repo = Repo::new("research-1 slow\nresearch-2 slow\nresearch-3 slow\nplan slow\nlimiter slow\nconfig slow\nwiring slow\ntesting slow\ndebug slow\ndocs slow\n");
        repo.run_killed_at_random_points(
            seed,
            "solve",
            &["solve", "--quiet", "Add rate limiting to the API"],
            &[("AGENT_SLOW", "0.3")],
        );
        let files = repo.integration_files("solve");
        assert!(
            files.contains("summaries/001_summary.md"),
            "seed {seed}: {files}"
        );
    }
}

/// Seed 004's manager loop, killed the same way: every task the manager
/// named is done once, and the manager asked once per task and once more.
#[test]
fn killing_manage_at_random_points_loses_nothing_and_runs_no_attempt_twice() {
    for seed in 0..3u64 {
        let repo = Repo::new("manager-1 slow\nmanager-2 slow\nmanager-3 slow\nmanager-4 slow\ntask-1 slow\ntask-2 slow\ntask-3 slow\n");
        repo.run_killed_at_random_points(
            seed,
            "manage",
            &["manage", "--quiet", "Refactor the API layer"],
            &[("AGENT_SLOW", "0.3"), ("AGENT_TASKS", "3")],
        );
        let names: Vec<String> = repo.units("manage").into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "manager-1",
                "task-1",
                "manager-2",
                "task-2",
                "manager-3",
                "task-3",
                "manager-4"
            ],
            "seed {seed}"
        );
        let files = repo.integration_files("manage");
        for t in 1..=3 {
            assert!(
                files.contains(&format!("tasks/{t}.md.log")),
                "seed {seed}: {files}"
            );
        }
    }
}

/// `killall` (or `stop`) where there is no plan and nothing runs says so,
/// not that a plan is missing.
#[test]
fn killall_with_nothing_running_says_nothing_runs() {
    let repo = Repo::new("");
    for word in ["killall", "stop"] {
        let out = repo.run(&[word]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains("Nothing is running here"),
            "{}",
            text(&out)
        );
    }
}

/// `supervise killall` in a repository where `supervise solve` runs and no
/// plan is: it finds the workflow's supervisor (its state is under
/// `.supervise/solve/`), which ends its agents and stops, killed.
#[test]
fn killall_finds_a_running_solve_where_there_is_no_plan() {
    let repo = Repo::new("research-1 slow\nresearch-2 slow\nresearch-3 slow\n");
    let mut solve = repo
        .cmd(&["solve", "Research how retries are done elsewhere"])
        .env("AGENT_SLOW", "120")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    repo.wait_for_solve();
    let out = repo.run(&["killall"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("supervise solve"), "{}", text(&out));
    let ended = kill_after(&mut solve, Duration::from_secs(60));
    assert!(ended.is_some(), "solve ended by itself after killall");
    assert_eq!(repo.state("solve")["status"], "KILLED");
}

/// With an EXECUTION_PLAN.md beside a running `solve` (whose operation was
/// never started), `status` shows the solve and `killall` ends it (it said
/// "no operation has been started" and 8 of 8 agents ran on); what the
/// killed solve prints as its next step is `supervise solve`, which goes on.
#[test]
fn status_and_killall_find_a_running_solve_beside_a_plan_and_its_next_step_works() {
    let repo = Repo::new("research-1 slow\nresearch-2 slow\nresearch-3 slow\n");
    std::fs::write(
        repo.root.join("EXECUTION_PLAN.md"),
        "# Other\n\n## Sprint 1: A\n- [ ] `a.txt` exists\n",
    )
    .unwrap();
    let solve = repo
        .cmd(&["solve", "Research how retries are done elsewhere"])
        .env("AGENT_SLOW", "120")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    repo.wait_for_solve();
    let out = repo.run(&["status"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("research-1"), "the solve's table: {said}");
    let out = repo.run(&["killall"]);
    assert!(text(&out).contains("supervise solve"), "{}", text(&out));
    let out = solve.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(repo.state("solve")["status"], "KILLED");
    assert!(!said.contains("supervise resume"), "{said}");
    assert!(said.contains("To resume: supervise solve"), "{said}");
    std::fs::write(&repo.behaviour, "").unwrap();
    let out = repo.run(&["solve"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state("solve")["status"], "COMPLETED");
}

/// `supervise plan breakdown` with an agent: the agent's first plan leaves a
/// requirement out and says "works correctly"; the deterministic checks
/// refuse it, the next attempt is told exactly what failed, and the accepted
/// plan is written with its coverage.
#[test]
fn an_agents_breakdown_is_held_to_the_checks_until_it_covers_the_document() {
    let doc = "# Bookmarks CLI\n\nRun `cargo test` to check it.\n\n## Features\n- Add support for JSON, CSV and HTML export\n- Implement `bm search` to find bookmarks by tag\n";
    let repo = Checkout::new(&[("PRD.md", doc)], "tests/agents/planner.sh", "");
    let out = repo
        .cmd(&["plan", "breakdown", "PRD.md", "--quiet"])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("Made by an agent in 2 attempt(s)"), "{said}");
    assert!(said.contains("bm search"), "the coverage table: {said}");
    let plan = std::fs::read_to_string(repo.root.join("EXECUTION_PLAN.md")).unwrap();
    assert!(
        plan.contains("## search") && !plan.contains("works correctly"),
        "{plan}"
    );
    // The second attempt was told what the checks found in the first.
    let told = std::fs::read_to_string(repo.log.with_extension("log.prompt.2")).unwrap();
    assert!(told.contains("is in no sprint"), "{told}");
    assert!(
        told.contains("no exit criterion a machine can check"),
        "{told}"
    );
    // --offline: the heuristics, even with an agent configured.
    let out = repo
        .cmd(&["plan", "breakdown", "PRD.md", "--offline", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Add support for CSV export"));
}

/// `supervise plan evaluate` with an agent: the evaluation finds a vague
/// criterion; the agent's first fix gives api core's test command, which the
/// checks refuse (a criterion never moves across units); the second attempt,
/// told so, gives api its own, and the plan is rewritten. A plan with
/// nothing to fix asks no agent; `--offline` keeps the heuristics.
#[test]
fn an_agents_evaluation_fixes_are_held_to_the_checks() {
    let plan = "# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n| api | core |\n\n## core\n### Sprint 1: Types\n- Write `core/src/types.rs`\n\n**Exit criteria**:\n- [ ] `cargo test -p core` passes\n\n## api\n### Sprint 1: Handlers\n- Write `api/src/handlers.rs`\n\n**Exit criteria**:\n- [ ] It works correctly\n";
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/plan-editor.sh",
        "",
    );
    let said = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let out = repo
        .cmd(&["plan", "evaluate", "--dry-run"])
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Fixed by an agent in 2 attempts"), "{text}");
    assert!(
        text.contains("+- [ ] `cargo test -p api` passes"),
        "the diff: {text}"
    );
    let told = std::fs::read_to_string(repo.log.with_extension("log.prompt.2")).unwrap();
    assert!(told.contains("is core's check, not api's"), "{told}");
    assert_eq!(
        std::fs::read_to_string(repo.root.join("EXECUTION_PLAN.md")).unwrap(),
        plan,
        "--dry-run wrote nothing"
    );
    // A plan with nothing to fix: no agent asked.
    let fixed = "# Shop\n\n## core\n### Sprint 1: Types\n- Write `core/src/types.rs`\n\n**Exit criteria**:\n- [ ] `cargo test -p core` passes\n";
    std::fs::write(repo.root.join("EXECUTION_PLAN.md"), fixed).unwrap();
    let before = repo.invocations().len();
    let out = repo.cmd(&["plan", "evaluate"]).output().unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Nothing to fix: no agent was asked"),
        "{text}"
    );
    assert_eq!(repo.invocations().len(), before);
    // --offline: the heuristics' rewrite, whatever is configured.
    std::fs::write(repo.root.join("EXECUTION_PLAN.md"), plan).unwrap();
    let out = repo
        .cmd(&["plan", "evaluate", "--offline", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(repo.invocations().len(), before, "no agent offline");
}

/// A plan tool's agent that fails every attempt: the next steps printed
/// name the command as it is typed (`supervise plan evaluate`, never
/// `supervise evaluate` nor `supervise resume`), and typed, it goes on.
#[test]
fn a_plan_tools_blocked_agent_names_the_command_that_goes_on() {
    let plan = "# Shop\n\n## api\n### Sprint 1: Handlers\n- Write `api/src/handlers.rs`\n\n**Exit criteria**:\n- [ ] It works correctly\n";
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/plan-editor.sh",
        "",
    );
    let out = repo
        .cmd(&["plan", "evaluate", "--agent", "echo cannot; exit 1"])
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("supervise plan evaluate"), "{said}");
    assert!(
        !said.contains("supervise evaluate") && !said.contains("supervise resume"),
        "{said}"
    );
    let again = repo
        .cmd(&["plan", "evaluate", "--agent", "echo cannot; exit 1"])
        .output()
        .unwrap();
    assert_ne!(
        again.status.code(),
        Some(1),
        "typed as printed, it is accepted: {}",
        text(&again)
    );
}
