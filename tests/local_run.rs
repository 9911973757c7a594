//! `supervise run` end to end: a real git repository, real agent processes (the
//! scripted agent in tests/agents), real kills. Each test reads like a story.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use receiver::Receiver;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{git, kill_after, text, Checkout, XorShift};

const PLAN: &str = "# Shop\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| api | api | 0 |\n| docs | docs | 0 |\n| web | web | 1 |\n\n\
## api\n### Sprint 1: Implement the API types\n- [ ] `api/api-sprint-1.txt` exists\n### Sprint 2: Implement the handlers\n- [ ] `api/api-sprint-2.txt` exists\n\
## docs\n### Sprint 1: Write the guide\n- [ ] `docs/docs-sprint-1.txt` exists\n\
## web\n### Sprint 1: Build the page\n- [ ] `web/web-sprint-1.txt` exists\n";

/// A repository with a plan, and the scripted agent.
struct Repo(Checkout);

impl std::ops::Deref for Repo {
    type Target = Checkout;
    fn deref(&self) -> &Checkout {
        &self.0
    }
}

impl Repo {
    fn new(plan: &str, behaviour: &str) -> Repo {
        Repo(Checkout::new(
            &[("EXECUTION_PLAN.md", plan)],
            "tests/agents/scripted.sh",
            behaviour,
        ))
    }

    fn run(&self, extra: &[&str]) -> Output {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        self.cmd(&args).output().unwrap()
    }

    /// `run` to the end of the plan, which must succeed.
    fn run_ok(&self) -> Output {
        let out = self.run(&[]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        out
    }

    fn spawn(&self, extra: &[&str]) -> Child {
        self.spawn_with(extra, "100")
    }

    fn spawn_with(&self, extra: &[&str], tick_ms: &str) -> Child {
        let mut args = vec!["run", "--quiet"];
        args.extend_from_slice(extra);
        self.cmd(&args)
            .env("SUPERVISE_TICK_MS", tick_ms)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn state(&self) -> serde_json::Value {
        let out = self.cmd(&["status", "--json"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The decision log's row of `unit` Sprint 1's first failed attempt.
    fn first_failure(&self, unit: &str) -> String {
        let state = std::fs::read_to_string(self.root.join("SUPERVISOR_STATE.md")).unwrap();
        state
            .lines()
            .find(|l| l.contains(&format!("| {unit} | 1 |")) && l.contains("attempt 1/3 failed"))
            .unwrap_or_else(|| panic!("no failed attempt of {unit}:\n{state}"))
            .to_string()
    }

    /// The operation's integration branch.
    fn integration_branch(&self) -> String {
        let listed = git(&self.root, &["branch", "--list", "supervise/*/integration"]);
        listed.trim().trim_start_matches("* ").to_string()
    }

    fn unit(&self, name: &str) -> serde_json::Value {
        self.state()["units"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .cloned()
            .unwrap()
    }

    fn integration_files(&self) -> String {
        let op = self.state()["id"].as_str().unwrap().to_string();
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

    /// Every sprint of PLAN reached the integration branch.
    fn assert_every_sprint_integrated(&self) {
        let files = self.integration_files();
        for f in [
            "api/api-sprint-1.txt",
            "api/api-sprint-2.txt",
            "docs/docs-sprint-1.txt",
            "web/web-sprint-1.txt",
        ] {
            assert!(
                files.contains(f),
                "{f} missing from the integration branch:\n{files}"
            );
        }
    }

    fn wait_for(&self, what: &str, f: impl Fn(&Repo) -> bool) {
        let start = Instant::now();
        while !f(self) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn success_partial_and_a_retry_on_a_stronger_model_all_reach_the_integration_branch() {
    let repo = Repo::new(PLAN, "api 1 partial,ok\ndocs 1 fail,ok\n");
    // A command with nothing for a shell to do is started without one; the
    // agent (here a Perl program, which unlike a shell takes $PWD as it
    // finds it, then the scripted agent) is told where it runs all the same.
    let pwds = repo.root.with_file_name("pwds");
    let agent = repo.root.with_file_name("agent.pl");
    std::fs::write(
        &agent,
        format!(
            "open(my $f, '>>', $ENV{{AGENT_PWD_LOG}}) or die;\nprint $f $ENV{{SUPERVISE_UNIT}} . '|' . ($ENV{{PWD}} // '') . '|' . readlink('/proc/self/cwd') . \"\\n\";\nclose($f);\nexec({script:?}) or die;\n",
            script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/scripted.sh")
        ),
    )
    .unwrap();
    let out = repo
        .cmd(&["run"])
        .env("SUPERVISE_AGENT", format!("perl {}", agent.display()))
        .env("AGENT_PWD_LOG", &pwds)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let pwds = std::fs::read_to_string(&pwds).unwrap();
    assert_eq!(pwds.lines().count(), 6, "{pwds}");
    let mut worktrees = std::collections::BTreeMap::<&str, Vec<&str>>::new();
    for l in pwds.lines() {
        let mut parts = l.split('|');
        let (unit, said, is) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        assert_eq!(said, is, "$PWD is where the agent runs");
        assert!(is.contains("/.supervise/worktrees/"), "{is}");
        worktrees.entry(unit).or_default().push(is);
    }
    // Each unit's sprints and attempts ran in one worktree, the unit's own
    // (api's two sprints, three attempts, among them).
    assert_eq!(worktrees["api"].len(), 3, "{pwds}");
    for (unit, dirs) in &worktrees {
        assert!(dirs.iter().all(|d| d == &dirs[0]), "{unit}: {dirs:?}");
        assert!(
            dirs[0].ends_with(&format!("-{unit}-sprints")),
            "{unit}: {dirs:?}"
        );
    }
    let distinct: std::collections::BTreeSet<&str> = worktrees.values().map(|d| d[0]).collect();
    assert_eq!(distinct.len(), 3, "{worktrees:?}");
    // Every unit completed, so every worktree went with its last sprint.
    let left: Vec<_> = std::fs::read_dir(repo.root.join(".supervise/worktrees"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let st = repo.state();
    assert_eq!(st["status"], "COMPLETED");
    repo.assert_every_sprint_integrated();
    let docs = repo.unit("docs");
    let hist = docs["sprints"][0]["history"].as_array().unwrap();
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[0]["outcome"], "failed");
    let tiers = ["haiku", "sonnet", "opus"];
    let pos = |t: &serde_json::Value| tiers.iter().position(|x| t == x).unwrap();
    assert!(
        pos(&hist[1]["tier"]) > pos(&hist[0]["tier"]),
        "retry on a stronger model"
    );
    let api = repo.unit("api");
    assert_eq!(api["sprints"][0]["continuations"], 1);
    assert_eq!(api["sprints"][0]["failures"], 0, "partial is not a failure");
    // The person's checkout is untouched; the reports sit beside the plan.
    assert_eq!(
        git(&repo.root, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main"
    );
    assert!(!repo.root.join("api").exists());
    let complete = std::fs::read_to_string(repo.root.join("COMPLETE_SHOP.md")).unwrap();
    assert!(complete.contains("✓ VERIFICATION PASSED"), "{complete}");
    // Four criteria pass on the final head; what was spent is shared by them.
    let spent = repo.state()["cost_spent"].as_u64().unwrap();
    let per = format!(
        "4 of 4 pass. Cost per criterion passing on it: {:.1}× ({spent}× in all).",
        spent as f64 / 4.0
    );
    assert!(complete.contains(&per), "{per} not in:\n{complete}");
    assert!(
        std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md"))
            .unwrap()
            .contains("- Work unit state: COMPLETED")
    );
}

#[test]
fn a_doomed_sprint_blocks_its_unit_and_dependents_while_others_finish_then_resume() {
    let repo = Repo::new(PLAN, "api 1 fail,fail,fail,ok\n");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("BLOCKED: api Sprint 1 failed after 3 attempts."));
    assert_eq!(repo.unit("api")["status"], "BLOCKED");
    assert_eq!(repo.unit("docs")["status"], "COMPLETED");
    assert_eq!(repo.unit("web")["status"], "NOT_STARTED");
    let status = repo.cmd(&["status"]).output().unwrap();
    assert!(text(&status).contains("BLOCKED: api Sprint 1 failed after 3 attempts."));
    // resume after BLOCKED: the fourth try succeeds and the dependents follow.
    let out = repo.cmd(&["resume", "api"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state()["status"], "COMPLETED");
}

/// Locally too, an agent that deletes its sprint's exit criterion from the
/// plan, or adds a workflow, gets a failed attempt that says why; the retry
/// (an honest agent) finishes, and neither change reaches the integration
/// branch.
#[test]
fn work_that_changes_what_judges_it_is_refused_locally_too() {
    let repo = Repo::new(PLAN, "api 1 weaken,ok\ndocs 1 workflow,ok\n");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for (unit, why) in [("api", "criteria"), ("docs", "change workflows")] {
        let line = repo.first_failure(unit);
        assert!(
            line.contains("the work was refused") && line.contains(why),
            "{line}"
        );
    }
    let branch = repo.integration_branch();
    let plan = git(
        &repo.root,
        &["show", &format!("{branch}:EXECUTION_PLAN.md")],
    );
    assert!(plan.contains("`api/api-sprint-1.txt` exists"), "{plan}");
    let workflows = git(
        &repo.root,
        &["log", &branch, "--format=%h", "--", ".github/workflows"],
    );
    assert_eq!(workflows.trim(), "", "a workflow reached {branch}");
}

#[test]
fn a_hanging_agent_is_cancelled_by_the_stall_timeout_and_retried() {
    let repo = Repo::new(
        "# One\n\n## Sprint 1: Implement it\n- [ ] `One-sprint-1.txt` exists\n",
        "One 1 hang,ok\n",
    );
    let start = Instant::now();
    let out = repo.run(&["--stall-timeout", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Not before the stall timeout: the outcome below says why it ended.
    assert!(start.elapsed() >= Duration::from_secs(2));
    let s = &repo.state()["units"][0]["sprints"][0];
    assert_eq!(s["history"][0]["outcome"], "cancelled: unresponsive");
    assert_eq!(s["failures"], 1);
}

#[test]
fn spend_counts_every_dispatch_of_every_operation_at_its_tier() {
    let repo = Repo::new(
        "# One\n\n## Sprint 1: Implement it\n- [ ] `One-sprint-1.txt` exists\n",
        "One 1 fail,ok\n",
    );
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let spent = repo.state()["cost_spent"].as_u64().unwrap();
    assert!(spent > 1, "a failure and a stronger retry: {spent}");
    let out = repo.cmd(&["spend", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["operations"][0]["total"], spent);
    assert_eq!(json["operations"][0]["day"], spent, "all of it today");
    assert_eq!(json["all"]["total"], spent, "the all row's total");
    let out = repo.cmd(&["spend"]).output().unwrap();
    assert!(
        text(&out).contains(&format!("| **{spent}×** | **{spent}×** | **{spent}×** |")),
        "{}",
        text(&out)
    );
    // The scripted agent prices nothing: no dollars are made up.
    assert_eq!(json["all"]["usd"]["attempts"], 0, "{json}");
    assert!(text(&out).contains("| **—** |"), "{}", text(&out));
}

/// Dollars the agents' CLIs report are summed beside the relative units:
/// two attempts that priced themselves at $0.0125 each (a failure between
/// them, which reported nothing) are $0.025 today, this week and in all.
#[test]
fn spend_adds_up_the_dollars_the_agents_reported() {
    let repo = Repo::new(
        "# Two

## Sprint 1: Implement it
- [ ] `Two-sprint-1.txt` exists
## Sprint 2: Then this
- [ ] `Two-sprint-2.txt` exists
",
        "Two 1 fail,priced
Two 2 priced
",
    );
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = repo.cmd(&["spend", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let usd = &json["operations"][0]["usd"];
    assert_eq!(
        (usd["day"].as_f64(), usd["total"].as_f64()),
        (Some(0.025), Some(0.025)),
        "{json}"
    );
    assert_eq!(usd["attempts"], 2, "{json}");
    assert_eq!(json["all"]["usd"], *usd);
    let out = repo.cmd(&["spend"]).output().unwrap();
    assert!(
        text(&out).contains("$0.025 / $0.025 / $0.025"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("the 2 attempt(s) with a figure"),
        "{}",
        text(&out)
    );
    // The same sum where people look: the status footer and the final
    // report, per unit, sprint and model, and per verified criterion.
    let out = repo.cmd(&["status"]).output().unwrap();
    assert!(
        text(&out).contains("Spend: $0.025 · by unit: Two $0.025"),
        "{}",
        text(&out)
    );
    let complete = std::fs::read_to_string(repo.root.join("COMPLETE_TWO.md")).unwrap();
    assert!(
        complete.contains("- Cost per verified criterion: $0.0125 (2 criteria verified)"),
        "{complete}"
    );
}

/// Never silent, never done: only the wall-clock cap ends it (a minute, the
/// least the setting takes; this test runs beside the others).
#[test]
fn an_agent_that_prints_for_ever_is_stopped_at_its_wall_clock_cap() {
    let repo = Repo::new(
        "# One\n\n## Sprint 1: Implement it\n- [ ] `One-sprint-1.txt` exists\n",
        "One 1 chatty,ok\n",
    );
    let start = Instant::now();
    let out = repo.run(&[
        "--max-agent-minutes",
        "1",
        "--stall-timeout",
        "30",
        "--kill-grace",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Not before the cap; that the cap ended it, the outcome says.
    assert!(start.elapsed() >= Duration::from_secs(60));
    let s = &repo.state()["units"][0]["sprints"][0];
    assert_eq!(s["history"][0]["outcome"], "stopped: wall-clock cap");
    assert_eq!(s["failures"], 1);
    assert_eq!(s["status"], "COMPLETED", "the retry finished the sprint");
}

#[test]
fn stop_from_a_second_terminal_drains_and_resume_finishes() {
    let repo = Repo::new(PLAN, "api 1 slow\ndocs 1 slow\n");
    // Ticks of 1 s: the stop timeout (10 ticks) is far longer than the agents.
    let mut sup = repo.spawn_with(&[], "1000");
    repo.wait_for("two agents running", |r| r.invocations().len() >= 2);
    let out = repo.cmd(&["stop"]).output().unwrap();
    assert!(text(&out).contains("Sent `stop`"), "{}", text(&out));
    let code = sup.wait().unwrap().code();
    assert_eq!(code, Some(4));
    assert_eq!(repo.state()["status"], "STOPPED");
    assert_eq!(repo.unit("api")["status"], "STOPPED");
    assert_eq!(
        repo.unit("api")["sprints"][0]["status"],
        "COMPLETED",
        "the agent in flight finished and was verified"
    );
    assert_eq!(
        repo.invocations().len(),
        2,
        "nothing new was dispatched while stopping"
    );
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// `run --review`: a verified sprint waits for a person before its merge.
/// `supervise review -m` with a comment on a line, from a second terminal,
/// starts a fix round on the same branch whose prompt quotes both (with
/// the lines the comment is on); `--approve` of the round's head merges it,
/// and the run ends. No failure is counted and one round is paid for.
#[test]
fn a_review_from_the_terminal_gets_a_fix_round_then_an_approval_merges() {
    const ONE: &str =
        "# P\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| docs | docs | 0 |\n\n## docs\n### Sprint 1: Write the guide\n- [ ] `docs/docs-sprint-1.txt` exists\n";
    let repo = Repo::new(ONE, "docs 1 ok,prompt\n");
    let out = repo.cmd(&["review", "docs", "--approve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("No operation for this plan yet"),
        "{}",
        text(&out)
    );
    let mut sup = repo.spawn(&["--review"]);
    let sprint = |r: &Repo| r.unit("docs")["sprints"][0].clone();
    repo.wait_for("the operation started", |r| {
        r.cmd(&["status", "--json"])
            .output()
            .unwrap()
            .status
            .success()
    });
    repo.wait_for("the sprint verified, waiting for a review", |r| {
        sprint(r)["status"] == "COMPLETED"
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !repo.integration_files().contains("docs/docs-sprint-1.txt"),
        "merged before a review"
    );
    let bad = [
        "review",
        "docs",
        "-m",
        "x",
        "--comment",
        "docs/docs-sprint-1.txt:one:x",
    ];
    let out = repo.cmd(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("is not a line number"),
        "{}",
        text(&out)
    );
    let ask = [
        "review",
        "docs",
        "-m",
        "Say more.",
        "--comment",
        "docs/docs-sprint-1.txt:1:name the model",
    ];
    let out = repo.cmd(&ask).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("Asked for changes"), "{}", text(&out));
    repo.wait_for("the fix round verified", |r| {
        let s = sprint(r);
        s["review_rounds"] == 1 && s["status"] == "COMPLETED"
    });
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let prompt = git(
        &repo.root,
        &[
            "show",
            &format!("supervise/{op}/docs/sprint-1:docs/docs-sprint-1.txt"),
        ],
    );
    for said in [
        "Review by",
        "> Say more.",
        "On `docs/docs-sprint-1.txt:1`",
        "done by",
        "> name the model",
    ] {
        assert!(prompt.contains(said), "{said}: {prompt}");
    }
    let out = repo.cmd(&["review", "docs", "--approve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(sup.wait().unwrap().code(), Some(0));
    assert!(repo.integration_files().contains("docs/docs-sprint-1.txt"));
    assert_eq!(repo.invocations().len(), 2, "one fix round");
    assert_eq!(sprint(&repo)["failures"], 0);
}

#[test]
fn killall_terminates_agents_and_keeps_their_work_for_inspection() {
    let repo = Repo::new(PLAN, "api 1 wip,ok\ndocs 1 hang,ok\n");
    let mut sup = repo.spawn(&[]);
    let worktrees = repo.root.join(".supervise/worktrees");
    let wip = || {
        std::fs::read_dir(&worktrees)
            .into_iter()
            .flatten()
            .flatten()
            .map(|w| w.path().join("api/api-sprint-1.txt.wip"))
            .find(|p| p.exists())
    };
    repo.wait_for("two agents running, api's work begun", |r| {
        r.invocations().len() >= 2 && wip().is_some()
    });
    repo.cmd(&["killall"]).output().unwrap();
    assert_eq!(sup.wait().unwrap().code(), Some(4));
    assert_eq!(repo.state()["status"], "KILLED");
    assert_eq!(repo.unit("api")["status"], "KILLED");
    assert_eq!(repo.unit("api")["sprints"][0]["status"], "BACKOFF");
    assert_eq!(
        repo.unit("api")["sprints"][0]["failures"],
        0,
        "a kill is not a failed attempt"
    );
    // No agent survives: the hanging shells were in the killed process groups.
    let runs = repo.root.join(".supervise/runs");
    for entry in std::fs::read_dir(runs).unwrap() {
        assert!(
            !supervise::place::local::process::is_alive(&entry.unwrap().path()),
            "an agent outlived killall"
        );
    }
    // What the killed agent had not committed is kept where it worked.
    let kept = wip().expect("the uncommitted work is kept in the unit's worktree");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "half done\n");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn killing_the_supervisor_at_random_points_loses_nothing_and_runs_no_attempt_twice() {
    for seed in 0..6u64 {
        let repo = Repo::new(
            PLAN,
            "api 1 slow\napi 2 fail,slow\ndocs 1 slow\nweb 1 slow\n",
        );
        let mut rng = XorShift::new(seed);
        let mut runs = 0;
        loop {
            runs += 1;
            assert!(runs < 40, "seed {seed}: the operation never finished");
            let mut sup = repo.spawn(&["--max-parallel", "2"]);
            // Later runs get longer before the kill, so that a loaded
            // machine (where a run may get nowhere in a second) still ends.
            let delay = Duration::from_millis(150 + rng.next_u64() % 900 + runs as u64 * 50);
            if let Some(s) = kill_after(&mut sup, delay) {
                assert_eq!(s.code(), Some(0), "seed {seed}: finished with {s:?}");
                break;
            }
        }
        assert_eq!(repo.state()["status"], "COMPLETED", "seed {seed}");
        repo.assert_no_attempt_ran_twice(&format!("seed {seed}"));
        assert!(repo.integration_files().contains("web/web-sprint-1.txt"));
    }
}

#[test]
fn a_bad_plan_and_a_missing_agent_are_answered_with_exit_status_1() {
    let repo = Repo::new("# Nothing\n\nJust prose.\n", "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("EXECUTION_PLAN.md:1: work unit `Nothing` has no sprints"),
        "{}",
        text(&out)
    );
    let repo = Repo::new(PLAN, "");
    let out = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["run"])
        .current_dir(&repo.root)
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("No agent command"));
    let out = repo.cmd(&["name-feature"]).output().unwrap();
    assert!(
        text(&out).contains("Naming is a ritual of STARTING the plan"),
        "{}",
        text(&out)
    );
}

#[test]
fn sprints_done_before_the_start_are_recorded_complete_and_never_paid_for() {
    // Sprint 1 is marked complete in the committed PROGRESS.md and its check
    // passes; Sprint 2 is marked complete too but its check fails, so it runs.
    let plan = "# Tool\n\nProgress is kept in `PROGRESS.md`.\n\n## Sprint 1: Scaffold\n- [ ] `Tool-sprint-1.txt` exists\n\n## Sprint 2: Feature\n- [ ] `Tool-sprint-2.txt` exists\n\n## Sprint 3: Docs\n- [ ] `Tool-sprint-3.txt` exists\n";
    let repo = Repo::new(plan, "");
    std::fs::write(
        repo.root.join("PROGRESS.md"),
        "- Sprint 1: complete\n- Sprint 2: done\n",
    )
    .unwrap();
    std::fs::write(repo.root.join("Tool-sprint-1.txt"), "made by hand\n").unwrap();
    git(&repo.root, &["add", "-A"]);
    git(&repo.root, &["commit", "-qm", "earlier work"]);
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        repo.sprints_run(),
        ["Tool 2", "Tool 3"],
        "Sprint 1 was already done"
    );
    let s1 = &repo.unit("Tool")["sprints"][0];
    assert_eq!(s1["status"], "COMPLETED");
    assert!(s1["completion"]["already_done"]
        .as_str()
        .unwrap()
        .contains("progress file marks Sprint 1 complete"));
    let report = std::fs::read_to_string(repo.root.join("COMPLETE_TOOL.md")).unwrap();
    assert!(report.contains("✓ VERIFICATION PASSED"), "{report}");
}

#[test]
fn sprints_whose_criteria_already_pass_at_the_start_are_not_run_again() {
    // No progress file: the starting commit is the ground truth. Sprint 1's
    // file and command criteria both hold already; Sprint 2's command fails,
    // so it runs; Sprint 3's file is there too: found done when its turn
    // comes, on the head it would start from, and never dispatched.
    let plan = "# Tool

## Sprint 1: Scaffold
- [ ] `Tool-sprint-1.txt` exists
- [ ] `grep -q hand Tool-sprint-1.txt` succeeds

## Sprint 2: Feature
- [ ] `test -s Tool-sprint-2.txt` succeeds

## Sprint 3: Docs
- [ ] `Tool-sprint-3.txt` exists
";
    let repo = Repo::new(plan, "");
    std::fs::write(repo.root.join("Tool-sprint-1.txt"), "made by hand\n").unwrap();
    std::fs::write(repo.root.join("Tool-sprint-3.txt"), "early notes\n").unwrap();
    git(&repo.root, &["add", "-A"]);
    git(&repo.root, &["commit", "-qm", "earlier work"]);
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        repo.sprints_run(),
        ["Tool 2"],
        "Sprint 1 was already done, and Sprint 3's work is on the head"
    );
    let s1 = &repo.unit("Tool")["sprints"][0];
    assert_eq!(s1["status"], "COMPLETED");
    assert_eq!(
        s1["completion"]["already_done"],
        "all 2 exit criteria of Sprint 1 pass at the starting commit"
    );
}

/// §2–3, the ritual: `start` names the operation and writes the name into
/// the plan's frontmatter on the integration branch, where the work goes;
/// every sprint branches from the named plan. A plan that has its name keeps
/// it.
#[test]
fn start_writes_the_operation_name_into_the_plans_frontmatter() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let st = repo.state();
    let (op, name) = (st["id"].as_str().unwrap(), st["name"].as_str().unwrap());
    let plan = git(
        &repo.root,
        &[
            "show",
            &format!("supervise/{op}/integration:EXECUTION_PLAN.md"),
        ],
    );
    assert!(
        plan.starts_with(&format!("---\nfeature_name: {name}\n---\n\n# Shop")),
        "{plan}"
    );
    repo.assert_every_sprint_integrated();

    let named = format!("---\nfeature_name: Kept Name\n---\n{PLAN}");
    let repo = Repo::new(&named, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state()["name"], "Kept Name");
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let plan = git(
        &repo.root,
        &[
            "show",
            &format!("supervise/{op}/integration:EXECUTION_PLAN.md"),
        ],
    );
    assert_eq!(plan, named);
}

/// §5e: a background sprint is done when the process it started runs. The
/// process the agent left behind is checked, and kept, once every criterion
/// passes; an agent that started nothing fails its attempts and says why.
#[test]
fn a_background_sprint_is_done_when_its_process_runs_and_the_process_is_kept() {
    const PLAN: &str = "# Svc\n\n## Sprint 1: Start the server in the background\n- [ ] `Svc-sprint-1.txt` exists\n";
    let repo = Repo::new(PLAN, "");
    let agent = repo.agent_with_prelude("starting-agent.sh", "nohup sleep 300 > /dev/null 2>&1 &");
    let out = repo
        .cmd(&["run"])
        .env("SUPERVISE_AGENT", agent)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let s1 = &repo.unit("Svc")["sprints"][0];
    assert_eq!(s1["status"], "COMPLETED", "{s1:#}");
    let running = s1["completion"]["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["text"] == "a process the agent started is running")
        .unwrap_or_else(|| panic!("{s1:#}"));
    assert_eq!(running["outcome"], "passed");
    let detail = running["detail"].as_str().unwrap();
    let pid: i32 = detail
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    assert!(pid_alive(pid), "the server outlived its agent: {detail}");
    // SAFETY: ending the test's own leftover process.
    unsafe { libc::kill(pid, libc::SIGKILL) };

    let repo = Repo::new(PLAN, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(3), "BLOCKED: {}", text(&out));
    let s1 = &repo.unit("Svc")["sprints"][0];
    assert_eq!(s1["status"], "FATAL", "{s1:#}");
    let said = text(&out);
    assert!(
        said.contains("remaining: a process the agent started is running"),
        "{said}"
    );
}

/// `run` on an operation that finished with this plan has nothing to do and
/// says so, with the way to take the work and the way to start over; it pays
/// for nothing.
#[test]
fn run_on_a_finished_operation_says_there_is_nothing_to_do_and_pays_nothing() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ran = repo.invocations().len();
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let out = repo.run(&[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("Nothing to do"), "{said}");
    assert!(
        said.contains(&format!("git merge supervise/{op}/integration")),
        "{said}"
    );
    assert!(said.contains("supervise run --new"), "{said}");
    assert_eq!(
        repo.invocations().len(),
        ran,
        "nothing was dispatched again"
    );
    assert_eq!(repo.state()["id"], op.as_str(), "the operation is the same");
}

/// A sprint added to a finished plan: the next `run` starts a new operation
/// with the finished one's work merged, so only the new sprint is paid for.
#[test]
fn run_after_a_sprint_is_added_to_a_finished_plan_runs_only_the_new_sprint() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ran = repo.sprints_run();
    assert_eq!(ran.len(), 4, "{ran:?}");
    let grown =
        format!("{PLAN}### Sprint 2: Style the page\n- [ ] `web/web-sprint-2.txt` exists\n");
    std::fs::write(repo.root.join("EXECUTION_PLAN.md"), grown).unwrap();
    git(&repo.root, &["commit", "-qam", "a new sprint"]);
    let out = repo.run(&[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("with its work merged"), "{said}");
    let again: Vec<String> = repo.sprints_run().into_iter().skip(ran.len()).collect();
    assert_eq!(again, ["web 2"], "only the new sprint runs: {said}");
    assert_eq!(repo.state()["status"], "COMPLETED");
    repo.assert_every_sprint_integrated();
}

/// `--agent ./myagent.sh`, a script beside the plan that was never committed:
/// agents run in worktrees elsewhere, so the path is made absolute where it
/// was typed, and the run works.
#[test]
fn a_relative_agent_path_is_taken_from_where_it_was_typed() {
    let repo = Repo::new(PLAN, "");
    std::fs::write(
        repo.root.join("myagent.sh"),
        format!("#!/bin/sh\nexec sh {}\n", scripted_agent().display()),
    )
    .unwrap();
    let mut perms = std::fs::metadata(repo.root.join("myagent.sh"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(repo.root.join("myagent.sh"), perms).unwrap();
    // Kept out of git, as a personal script would be.
    std::fs::write(repo.root.join(".git/info/exclude"), "myagent.sh\n").unwrap();
    let out = repo
        .cmd(&["run", "--agent", "./myagent.sh"])
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state()["status"], "COMPLETED");
    repo.assert_every_sprint_integrated();
}

/// What a finished run prints says each thing once: the final summary opens
/// with "All N sprints executed", so neither the completed notice nor the
/// last table repeats it.
#[test]
fn a_finished_run_says_it_once_in_lines() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = text(&out);
    assert_eq!(
        shown
            .matches("All 4 sprints executed across 3 work units.")
            .count(),
        1,
        "{shown}"
    );
    assert!(shown.contains("status: completed"), "{shown}");
    assert!(
        !shown.contains("cost so far"),
        "a finished cost is final: {shown}"
    );
}

/// `supervise run` in a terminal (a pseudo-terminal made by `script`), with
/// `extra` in its environment.
fn run_in_a_terminal(repo: &Repo, extra: &[(&str, &str)]) -> Output {
    let supervise = env!("CARGO_BIN_EXE_supervise");
    // The checkout's environment (agent, identity, tick) around `script`.
    let mut env = repo.cmd(&[]);
    env.env("TERM", "xterm").env("SUPERVISE_BIN", supervise);
    for (k, v) in extra {
        env.env(k, v);
    }
    std::process::Command::new("script")
        .args(["-qec", "\"$SUPERVISE_BIN\" run", "/dev/null"])
        .current_dir(&repo.root)
        .envs(env.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// In a terminal, the live table's last frame is the final state, and the
/// final summary is drawn with it: the throttle that paces redraws must not
/// leave a frame from the middle of the run on screen above "Sprint
/// Supervisor Complete". Frames are drawn over the last one (the cursor
/// moved up, what is below erased), never by clearing the screen, so the
/// scrollback keeps what was there; the table's columns are aligned and
/// its states in colour.
#[test]
fn the_live_tables_last_frame_is_the_final_state() {
    let repo = Repo::new(PLAN, "");
    let out = run_in_a_terminal(&repo, &[]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        !shown.contains("\x1b[2J"),
        "the screen was cleared: {shown}"
    );
    assert!(
        shown.contains("F\x1b[J"),
        "a frame is drawn over the last: {shown}"
    );
    assert!(shown.contains("\x1b[32mCOMPLETED\x1b[0m"), "{shown}");
    assert!(
        shown.contains("| Work Unit | Deps      | State       |"),
        "aligned: {shown}"
    );
    let frames: Vec<&str> = shown.split("\x1b[J").collect();
    assert!(frames.len() > 1, "a live terminal is redrawn: {shown}");
    let last = frames.last().unwrap();
    assert!(last.contains("status: completed"), "{last}");
    assert!(!last.contains("RUNNING"), "{last}");
    assert!(
        last.contains("Sprint Supervisor Complete"),
        "the final summary is on the final frame: {last}"
    );
    assert_eq!(last.matches("sprints executed").count(), 1, "{last}");
}

/// `NO_COLOR` is honoured: the live table is drawn without a colour, and
/// piped output (not a terminal) has neither colour nor redraws.
#[test]
fn no_color_and_pipes_get_no_colour() {
    let repo = Repo::new(PLAN, "");
    let out = run_in_a_terminal(&repo, &[("NO_COLOR", "1")]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(shown.contains("\x1b[J"), "still live: {shown}");
    assert!(
        !shown.contains("\x1b[32m") && !shown.contains("\x1b[31m"),
        "{shown}"
    );
    let piped = Repo::new(PLAN, "").run_ok();
    assert!(!text(&piped).contains('\x1b'), "{}", text(&piped));
}

/// An agent command the shell cannot run (exit status 127) launched no model:
/// the operation stops with the fix, and nothing is charged — in the state,
/// in `spend`, in the attempt's record.
#[test]
fn an_agent_command_that_cannot_run_is_not_charged() {
    let repo = Repo::new(PLAN, "");
    // Past the preflight (it checks the first word only), then not found.
    let out = repo
        .cmd(&["run", "--agent", "cd . && no-such-agent-anywhere"])
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("No attempt was counted"),
        "{}",
        text(&out)
    );
    let state = repo.state();
    assert_eq!(state["cost_spent"], 0, "nothing ran, nothing spent");
    let closed: Vec<&serde_json::Value> = state["units"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|u| u["sprints"].as_array().unwrap())
        .flat_map(|s| s["history"].as_array().unwrap())
        .collect();
    assert!(!closed.is_empty(), "the attempt is on record");
    assert!(closed.iter().all(|h| h["charged"] == false), "{closed:?}");
    let out = repo.cmd(&["spend", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["all"]["total"], 0, "{json}");
}

/// An agent that works for any unit name: it writes `done-<sprint>.txt` in the
/// unit's directory, commits, and logs its dispatch id.
const ANY_NAME_AGENT: &str = r#"set -eu
echo "$SUPERVISE_DISPATCH_ID" >> "$AGENT_LOG"
mkdir -p "$SUPERVISE_UNIT_DIR"
printf '%s\n' "$SUPERVISE_UNIT" > "$SUPERVISE_UNIT_DIR/done-$SUPERVISE_SPRINT.txt"
git add -A && git commit -qm "sprint $SUPERVISE_SPRINT"
echo Done."#;

fn names_plan(names: &[String]) -> String {
    let mut src =
        String::from("# Names\n\n| Work Unit | Directory | Dependencies |\n|---|---|---|\n");
    for (i, n) in names.iter().enumerate() {
        let dep = if i == 0 {
            "none".to_string()
        } else {
            names[0].clone()
        };
        src.push_str(&format!("| {n} | d{i} | {dep} |\n"));
    }
    for (i, n) in names.iter().enumerate() {
        src.push_str(&format!("\n## {n}\n### Sprint 1: First of d{i}\n- [ ] `d{i}/done-1.txt` exists\n### Sprint 2: Second of d{i}\n- [ ] `d{i}/done-2.txt` exists\n"));
    }
    src
}

#[test]
fn units_whose_names_reduce_to_the_same_slug_each_run_their_own_sprints() {
    let tricky = ["API v1", "API-v1", "Parser", "Parser!", "Ядро", "Узел"];
    let mut rng = XorShift::new(0x9e37_79b9_7f4a_7c15);
    let mut plans = vec![tricky.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    // Random names from a pool of scripts and punctuation, sharing long prefixes.
    let pool = [
        "alpha",
        "Alpha",
        "ALPHA!",
        "β",
        "γάμμα",
        "核心",
        "x y",
        "x-y",
        "x_y",
        "ü",
    ];
    for _ in 0..2 {
        let mut names: Vec<String> = Vec::new();
        while names.len() < 5 {
            let rng = rng.next_u64();
            let a = pool[(rng % pool.len() as u64) as usize];
            let b = pool[((rng >> 8) % pool.len() as u64) as usize];
            let name = format!("{}{a} {b}", "long shared prefix ".repeat(3));
            if !names
                .iter()
                .any(|n| n.to_lowercase() == name.to_lowercase())
            {
                names.push(name);
            }
        }
        plans.push(names);
    }
    for names in plans {
        let repo = Repo::new(&names_plan(&names), "");
        let agent = repo.root.parent().unwrap().join("any-name-agent.sh");
        std::fs::write(&agent, ANY_NAME_AGENT).unwrap();
        let out = repo
            .cmd(&["run", "--stall-timeout", "20"])
            .env("SUPERVISE_AGENT", format!("sh {}", agent.display()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{names:?}\n{}", text(&out));
        let ids = repo.invocations();
        assert_eq!(ids.len(), names.len() * 2, "every sprint ran once: {ids:?}");
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "dispatch ids are unique");
        let files = repo.integration_files();
        for (i, n) in names.iter().enumerate() {
            for s in 1..=2 {
                let f = format!("d{i}/done-{s}.txt");
                assert!(
                    files.lines().any(|l| l == f),
                    "{n}: {f} missing from\n{files}"
                );
            }
        }
    }
}

impl Repo {
    /// Runs the plan with an agent that, on unit api, runs `script` (which
    /// must write the file `$NOTE`) and then sleeps; once the note is there,
    /// kills the supervisor with SIGKILL, the api agent still at work.
    /// Returns the note's path.
    fn crash_while_api_works(&self, script: &str) -> PathBuf {
        let note = self.root.parent().unwrap().join("api-note");
        let agent = self.agent_with_prelude(
            "api-working-agent.sh",
            &format!(
                "if [ \"$SUPERVISE_UNIT\" = api ]; then\n  NOTE='{}'\n  {script}\n  exec sleep 600\nfi",
                note.display()
            ),
        );
        let mut sup = self
            .cmd(&["run", "--quiet"])
            .env("SUPERVISE_AGENT", agent)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.wait_for("the api agent at work", |_| note.exists());
        sup.kill().unwrap();
        sup.wait().unwrap();
        note
    }

    /// An agent command that runs `prelude` (shell) and then the scripted agent:
    /// for tests whose agents misbehave in ways the script's actions do not cover.
    fn agent_with_prelude(&self, name: &str, prelude: &str) -> String {
        let path = self.root.parent().unwrap().join(name);
        std::fs::write(
            &path,
            format!("{prelude}\nexec sh {}\n", scripted_agent().display()),
        )
        .unwrap();
        format!("exec sh {}", path.display())
    }
}

fn scripted_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/scripted.sh")
}

fn pid_alive(pid: i32) -> bool {
    // A zombie still answers kill -0: read its state instead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with(['Z', 'X']))
        })
        .is_some_and(|zombie| !zombie)
}

fn recorded_pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Agents that ignore SIGTERM and leave a background job and a daemon (its own
/// session) behind: `killall` — sent to a running supervisor, and run with no
/// supervisor after a crash — leaves none of their processes alive and reports
/// the same count twice.
#[test]
fn killall_ends_agents_that_ignore_sigterm_and_every_process_they_started() {
    for crashed_first in [false, true] {
        let repo = Repo::new(PLAN, "api 1 hostile,ok\ndocs 1 hostile,ok\n");
        let pids = repo.root.parent().unwrap().join("pids");
        let pid_file = |u: &str| PathBuf::from(format!("{}.{u}", pids.display()));
        let mut sup = repo
            .cmd(&["run", "--quiet", "--kill-grace", "1"])
            .env("AGENT_PIDS", &pids)
            // `exec`: the process the wrapper started is the one ignoring SIGTERM.
            .env(
                "SUPERVISE_AGENT",
                format!("exec sh {}", scripted_agent().display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        repo.wait_for("both agents and their children running", |_| {
            recorded_pids(&pid_file("api")).len() == 3
                && recorded_pids(&pid_file("docs")).len() == 3
        });
        let all: Vec<i32> = ["api", "docs"]
            .iter()
            .flat_map(|u| recorded_pids(&pid_file(u)))
            .collect();
        if crashed_first {
            sup.kill().unwrap();
            sup.wait().unwrap();
            let out = repo.cmd(&["killall"]).output().unwrap();
            let said = text(&out);
            assert_eq!(
                said.matches("Agents terminated: 2").count(),
                2,
                "the notice and the summary agree: {said}"
            );
        } else {
            // Through the running supervisor: the kill summary is printed too,
            // once every agent has ended.
            let out = repo.cmd(&["killall"]).output().unwrap();
            assert!(
                text(&out).contains("Agents terminated: 2"),
                "{}",
                text(&out)
            );
            assert_eq!(sup.wait().unwrap().code(), Some(4));
        }
        let alive: Vec<i32> = all.iter().copied().filter(|p| pid_alive(*p)).collect();
        assert!(
            alive.is_empty(),
            "crashed first: {crashed_first}: processes outlived killall: {alive:?}"
        );
        let out = repo
            .cmd(&["run", "--kill-grace", "1"])
            .env("AGENT_PIDS", &pids)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let overlap = PathBuf::from(format!("{}.overlap", pids.display()));
        assert!(
            !overlap.exists(),
            "crashed first: {crashed_first}: {}; processes: {}",
            std::fs::read_to_string(&overlap).unwrap_or_default(),
            String::from_utf8_lossy(
                &Command::new("ps")
                    .args(["-eo", "pid,ppid,stat,args"])
                    .output()
                    .unwrap()
                    .stdout
            )
        );
    }
}

/// The stall cancel of an agent that ignores SIGTERM: the retry starts only once
/// every process of the cancelled attempt is gone, on the sprint's branch even
/// though the first attempt switched the worktree to another.
#[test]
fn a_retry_never_starts_beside_a_live_process_of_the_cancelled_attempt() {
    let repo = Repo::new(PLAN, "api 1 hostile,ok\n");
    let pids = repo.root.parent().unwrap().join("pids");
    // The first attempt also leaves the worktree on a branch of its own.
    let agent = repo.agent_with_prelude(
        "switching-agent.sh",
        "if [ \"$SUPERVISE_ATTEMPT\" = 1 ] && [ \"$SUPERVISE_UNIT\" = api ]; then git checkout -q -b elsewhere; fi",
    );
    let out = repo
        .cmd(&["run", "--stall-timeout", "1", "--kill-grace", "1"])
        .env("AGENT_PIDS", &pids)
        .env("SUPERVISE_AGENT", agent)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let overlap = PathBuf::from(format!("{}.overlap", pids.display()));
    assert!(
        !overlap.exists(),
        "{}",
        std::fs::read_to_string(&overlap).unwrap_or_default()
    );
    let api = repo.unit("api");
    assert_eq!(
        api["sprints"][0]["history"][0]["outcome"],
        "cancelled: unresponsive"
    );
    assert_eq!(api["sprints"][0]["history"][1]["outcome"], "completed");
    let alive: Vec<i32> = recorded_pids(&PathBuf::from(format!("{}.api", pids.display())))
        .into_iter()
        .filter(|p| pid_alive(*p))
        .collect();
    assert!(alive.is_empty(), "left running: {alive:?}");
    assert!(repo.integration_files().contains("api/api-sprint-1.txt"));
}

/// A supervisor restarting after a crash clears git locks the crash left, but
/// never one in the worktree of an agent it adopts (a slow hook may hold it).
#[test]
fn a_restart_leaves_the_git_locks_of_live_agents_alone() {
    let repo = Repo::new(PLAN, "");
    let note = repo.crash_while_api_works(
        "gd=$(git rev-parse --absolute-git-dir)\n  touch -d '1 hour ago' \"$gd/index.lock\"\n  echo \"$gd/index.lock\" > \"$NOTE.tmp\"\n  mv \"$NOTE.tmp\" \"$NOTE\"",
    );
    let live_lock = PathBuf::from(std::fs::read_to_string(&note).unwrap().trim());
    // A lock the crash left where no agent works.
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let stale = repo
        .root
        .join(format!(".git/refs/heads/supervise/{op}/integration.lock"));
    std::fs::write(&stale, "").unwrap();
    let old = Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(old.success());
    // `stop` with no supervisor running opens the operation as a restart does.
    let out = repo.cmd(&["stop"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        live_lock.exists(),
        "the live agent's index.lock was deleted"
    );
    assert!(!stale.exists(), "the crash's stale lock was kept");
    // The adopted agent is still there to be killed (docs may or may not have
    // finished before the crash, so only api is certain).
    let out = repo.cmd(&["killall"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.unit("api")["status"], "KILLED");
    assert_eq!(
        repo.unit("api")["sprints"][0]["history"][0]["outcome"],
        "terminated"
    );
}

/// A supervisor killed after an agent's wrapper began the run but before the
/// dispatch was recorded done leaves a dispatch to replay. A `stop` opening the
/// operation then — with no agent command, as a control command may be — adopts
/// the live run: no failed attempt, no retry, the agent still there for
/// `killall`. (Before, the replay asked for an agent command first, failed the
/// attempt, and retried until the unit was BLOCKED, all inside `stop`.)
#[test]
fn a_replayed_dispatch_adopts_the_run_its_wrapper_began() {
    let repo = Repo::new(PLAN, "");
    repo.crash_while_api_works("touch \"$NOTE\"");
    // The crash's window: the record that api's dispatch was carried out is lost.
    let log = repo.root.join(".supervise/events.jsonl");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let api_dispatch = lines
        .iter()
        .filter(|l| l["record"] == "decision")
        .flat_map(|l| l["effects"].as_array().unwrap())
        .find(|e| e["effect"]["effect"] == "dispatch" && e["effect"]["unit"] == "api")
        .map(|e| e["id"].clone())
        .unwrap();
    let kept: String = lines
        .iter()
        .filter(|l| !(l["record"] == "done" && l["effect"] == api_dispatch))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&log, kept).unwrap();
    let out = repo
        .cmd(&["stop"])
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Still at work on its first attempt while the operation stops.
    let api = repo.unit("api");
    assert_eq!(api["status"], "STOPPING", "{api:#}");
    assert_eq!(api["sprints"][0]["active"]["attempt"], 1, "{api:#}");
    assert_eq!(api["sprints"][0]["failures"], 0, "{api:#}");
    assert_eq!(
        api["sprints"][0]["history"].as_array().unwrap().len(),
        0,
        "{api:#}"
    );
    let out = repo.cmd(&["killall"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let api = repo.unit("api");
    assert_eq!(api["status"], "KILLED", "{api:#}");
    assert_eq!(api["sprints"][0]["history"][0]["outcome"], "terminated");
    assert_eq!(api["sprints"][0]["history"][0]["attempt"], 1);
}

/// Two plans in one repository, run at the same time by two supervisors: both
/// finish without a lost attempt, and `git status` stays clean (both state
/// directories are excluded — the shared exclude file loses no line).
#[test]
fn two_supervisors_in_one_repository_do_not_trip_over_each_other() {
    for round in 0..3 {
        let repo = Repo::new("# Placeholder\n", "");
        for d in ["a", "b"] {
            std::fs::create_dir_all(repo.root.join(d)).unwrap();
            std::fs::write(repo.root.join(d).join("EXECUTION_PLAN.md"), PLAN).unwrap();
        }
        git(&repo.root, &["add", "-A"]);
        git(&repo.root, &["commit", "-qm", "two plans"]);
        let children: Vec<Child> = ["a", "b"]
            .iter()
            .map(|d| {
                repo.cmd(&["run", "--quiet", &format!("{d}/EXECUTION_PLAN.md")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Every sprint of both plans ran exactly once: no attempt was lost to a race.
        assert_eq!(repo.invocations().len(), 8, "round {round}");
        // (The reports beside each plan are meant to be seen; the state is not.)
        let status = git(
            &repo.root,
            &["status", "--porcelain", "--untracked-files=all"],
        );
        assert!(
            !status.contains(".supervise"),
            "round {round}: the checkout shows supervisor state: {status}"
        );
    }
}

/// An agent (or anything else) that moves the integration branch back erases
/// merged sprints. Before each merge the supervisor checks that every merged
/// sprint is still there and merges the lost ones again from the commit it
/// verified (here web's own merge brings them back, as web began after
/// them): nothing is paid for twice. Found only at the end (here: by a build
/// gate that rewinds the branch and commits over it) and not mendable, it
/// says so and exits 2.
#[test]
fn merged_work_that_vanishes_from_the_integration_branch_is_merged_again_never_reported_verified_when_lost(
) {
    const REWIND: &str = "git update-ref \"refs/heads/supervise/${SUPERVISE_DISPATCH_ID%%/*}/integration\" \"$(git rev-list --max-parents=0 HEAD)\"";
    // web (layer 1) rewinds the branch before doing its own work.
    let repo = Repo::new(PLAN, "");
    let agent = repo.agent_with_prelude(
        "rewinding-agent.sh",
        &format!(
            "if [ \"$SUPERVISE_UNIT\" = web ] && [ \"$SUPERVISE_ATTEMPT\" = 1 ]; then {REWIND}; fi"
        ),
    );
    let out = repo
        .cmd(&["run"])
        .env("SUPERVISE_AGENT", agent)
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("merged again"), "{said}");
    repo.assert_every_sprint_integrated();
    assert_eq!(repo.invocations().len(), 4, "{:?}", repo.invocations());

    // Rewound after the last merge, with other work committed over it: the
    // end says so, with the fix, and exits 2.
    let repo = Repo::new(
        "# Tiny\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| api | api | 0 |\n\n## api\n### Sprint 1: Types\n- [ ] `api/api-sprint-1.txt` exists\n",
        "",
    );
    let gate = "b=$(git symbolic-ref --short HEAD); git checkout -q --detach \"$(git rev-list --max-parents=0 HEAD)\" && mkdir -p api && echo other > api/api-sprint-1.txt && git add -A && git -c user.name=g -c user.email=g@g commit -qm other && git update-ref \"refs/heads/${b%/gate}/integration\" HEAD";
    let out = repo.run(&["--build-gate", gate]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("Merge it again"), "{said}");
    assert!(said.contains("git merge supervise/"), "{said}");
}

/// `resume --agent X` sent to a running supervisor would be dropped silently:
/// it is refused with what to do instead, and the supervisor runs on.
#[test]
fn resume_with_settings_for_a_running_supervisor_is_refused_with_the_fix() {
    let repo = Repo::new(PLAN, "api 1 hang,ok\n");
    let mut sup = repo.spawn(&[]);
    repo.wait_for("an agent running", |r| !r.invocations().is_empty());
    let out = repo
        .cmd(&["resume", "--agent", "other-agent", "--max-parallel", "1"])
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("--agent, --max-parallel"), "{said}");
    assert!(said.contains("supervise stop"), "{said}");
    // Plain `resume` is still passed on.
    let out = repo.cmd(&["resume"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    repo.cmd(&["killall"]).output().unwrap();
    sup.wait().unwrap();
}

/// The processes waiting on standby as wrappers for the supervisor whose
/// environment carries `tag`.
fn standby_wrappers(tag: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            read("cmdline").ends_with(b"__run-agent\0-\0")
                && read("environ")
                    .split(|b| *b == 0)
                    .any(|kv| kv == format!("STANDBY_TEST_TAG={tag}").as_bytes())
                && pid_alive(*pid)
        })
        .collect()
}

/// The wrapper kept on standby for the next dispatch holds nothing and
/// outlives nothing: a supervisor killed with -9 while an agent works leaves
/// the agent (a restart adopts it) but no wrapper waiting.
#[test]
fn a_wrapper_on_standby_ends_with_its_supervisor_even_killed() {
    let repo = Repo::new(PLAN, "api 1 hang\n");
    let tag = format!("{}-{:?}", std::process::id(), Instant::now());
    let mut sup = repo
        .cmd(&["run", "--quiet"])
        .env("STANDBY_TEST_TAG", &tag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    repo.wait_for("a wrapper on standby", |_| {
        !standby_wrappers(&tag).is_empty()
    });
    sup.kill().unwrap();
    sup.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !standby_wrappers(&tag).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = standby_wrappers(&tag);
    // The hanging agent is the user's to end, as after any crash.
    let out = repo.cmd(&["killall"]).output().unwrap();
    assert!(left.is_empty(), "left waiting: {left:?}");
    assert!(out.status.success(), "{}", text(&out));
}

/// A repository may live anywhere, a directory named with a line break
/// included: every sprint runs there, those launched by the wrapper kept on
/// standby as much as the first.
#[test]
fn a_repository_in_a_directory_named_with_a_line_break_runs_every_sprint() {
    let plan = "# lines\n\n## Sprint 1: A\n- [ ] `lines-sprint-1.txt` exists\n\n## Sprint 2: B\n- [ ] `lines-sprint-2.txt` exists\n\n## Sprint 3: C\n- [ ] `lines-sprint-3.txt` exists\n";
    let repo = Repo(Checkout::new_in(
        "re\npo",
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/scripted.sh",
        "",
    ));
    let out = repo.run(&["--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let files = repo.integration_files();
    for f in [
        "lines-sprint-1.txt",
        "lines-sprint-2.txt",
        "lines-sprint-3.txt",
    ] {
        assert!(
            files.contains(f),
            "{f} missing from the integration branch:\n{files}"
        );
    }
}

/// The supervisor's exclusion is the lock on its state directory, not the
/// presence of a file: deleting `.supervise/supervisor.lock` while one runs
/// does not let a second start beside it (it did, and they doubled events).
#[test]
fn deleting_the_lock_file_does_not_let_a_second_supervisor_start() {
    let repo = Repo::new(PLAN, "api 1 slow\ndocs 1 slow\n");
    let mut first = repo
        .cmd(&["run", "--quiet"])
        .env("AGENT_SLOW", "30")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dir = repo.root.join(".supervise");
    let began = std::time::Instant::now();
    while supervise::place::local::supervisor::running_supervisor(&dir).is_none() {
        assert!(began.elapsed() < Duration::from_secs(30), "never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(dir.join("supervisor.lock")).unwrap();
    let second = repo.cmd(&["run", "--quiet"]).output().unwrap();
    assert_eq!(second.status.code(), Some(1), "{}", text(&second));
    assert!(
        text(&second).contains("already running"),
        "{}",
        text(&second)
    );
    let out = repo.cmd(&["killall"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(kill_after(&mut first, Duration::from_secs(60)).is_some());
}

const TWO_STEPS: &str = "# Lamp\n\n## Sprint 1: Lamp\n- [ ] `Lamp-sprint-1.txt` exists\n\n## Sprint 2: Lens\n- [ ] `Lamp-sprint-2.txt` exists\n";

#[test]
fn an_agent_that_does_the_next_sprint_too_is_paid_once_and_the_next_sprint_is_found_done() {
    let repo = Repo::new(TWO_STEPS, "Lamp 1 overshoot\n");
    repo.run_ok();
    assert_eq!(repo.sprints_run(), ["Lamp 1"], "one dispatch, for Sprint 1");
    let st = repo.state();
    let second = &st["units"][0]["sprints"][1];
    assert_eq!(second["status"], "COMPLETED");
    assert_eq!(second["history"][0]["outcome"], "done before dispatch");
    assert_eq!(second["history"][0]["charged"], false);
    let note = second["completion"]["already_done"].as_str().unwrap();
    assert!(note.contains("Lamp sprint 1 and the next"), "{note}");
    let spent = st["cost_spent"].as_u64().unwrap();
    let tier = st["units"][0]["sprints"][0]["history"][0]["tier"]
        .as_str()
        .unwrap();
    let one = ["haiku", "sonnet", "opus"]
        .iter()
        .position(|t| *t == tier)
        .unwrap();
    assert_eq!(
        spent,
        [1, 10, 30][one],
        "Sprint 1's one dispatch, nothing for Sprint 2"
    );
    let spend = repo.cmd(&["spend", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&spend.stdout).unwrap();
    assert_eq!(json["operations"][0]["total"], spent);
    let complete = std::fs::read_to_string(repo.root.join("COMPLETE_LAMP.md")).unwrap();
    assert!(complete.contains("✓ VERIFICATION PASSED"), "{complete}");
}

/// Work in the checkout is not work on the head: a file an agent left
/// there, ignored and never committed, does not complete a later sprint.
#[test]
fn a_file_left_in_the_checkout_but_not_on_the_head_is_no_evidence() {
    let repo = Repo::new(TWO_STEPS, "Lamp 1 stray\nLamp 2 fail\n");
    let out = repo.run(&[]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        repo.sprints_run()[..2],
        ["Lamp 1", "Lamp 2"],
        "Sprint 2 went to an agent"
    );
    let second = &repo.state()["units"][0]["sprints"][1];
    assert_eq!(second["history"][0]["outcome"], "failed", "{second}");
    assert!(second["completion"].is_null(), "{second}");
}

#[test]
fn a_later_sprint_committed_before_the_run_is_not_dispatched() {
    let repo = Repo(Checkout::new(
        &[
            ("EXECUTION_PLAN.md", TWO_STEPS),
            ("Lamp-sprint-2.txt", "by hand\n"),
        ],
        "tests/agents/scripted.sh",
        "",
    ));
    repo.run_ok();
    assert_eq!(repo.sprints_run(), ["Lamp 1"]);
    let note = repo.state()["units"][0]["sprints"][1]["completion"]["already_done"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.contains("committed before the operation started"),
        "{note}"
    );
}

#[test]
fn a_first_sprint_whose_only_criterion_already_passes_is_dispatched_not_skipped() {
    let repo = Repo::new(
        "# Greet\n\n## Sprint 1: Implement greet() in `src/greet.sh`\n- [ ] `test -d .` passes\n",
        "",
    );
    repo.run_ok();
    assert_eq!(
        repo.sprints_run(),
        ["Greet 1"],
        "a passing command is no evidence"
    );
    let s = &repo.state()["units"][0]["sprints"][0];
    assert!(s["completion"]["already_done"].is_null(), "{s}");
}

#[test]
fn a_later_sprint_that_breaks_an_earlier_criterion_fails_the_verification_naming_both() {
    let repo = Repo::new(
        "# Regress\n\n## Sprint 1: A\n- [ ] `Regress-sprint-1.txt` exists\n\n## Sprint 2: B\n- [ ] `Regress-sprint-2.txt` exists\n",
        "Regress 2 clobber\n",
    );
    let out = repo.run(&[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "VERIFICATION FAILED: {}",
        text(&out)
    );
    let complete = std::fs::read_to_string(repo.root.join("COMPLETE_REGRESS.md")).unwrap();
    assert!(complete.contains("✗ VERIFICATION FAILED"), "{complete}");
    let regression = complete
        .lines()
        .find(|l| l.contains("**regression**"))
        .unwrap_or_else(|| panic!("{complete}"));
    assert!(
        regression.contains("Regress Sprint 1: Regress-sprint-1.txt exists"),
        "{regression}"
    );
    assert!(
        regression.contains("Regress Sprint 2's merge"),
        "{regression}"
    );
    assert!(text(&out).contains("VERIFICATION FAILED"), "{}", text(&out));
    let head = repo.state()["head_verification"]["checks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(head, 2, "every criterion ran again on the head");
    // The failed verdict stays the operation's while its head does not
    // change: `run` again, `status` and SUPERVISOR_STATE.md say it.
    let dispatched = repo.invocations().len();
    let again = repo.run(&[]);
    let said = text(&again);
    assert_eq!(again.status.code(), Some(2), "{said}");
    assert!(
        said.contains("finished, but its final verification failed: 1 of 2 criteria fail")
            && !said.contains("is complete"),
        "{said}"
    );
    assert_eq!(
        repo.invocations().len(),
        dispatched,
        "nothing paid for again"
    );
    let status = text(&repo.cmd(&["status"]).output().unwrap());
    assert!(
        status.contains("VERIFICATION FAILED on the final head")
            && !status.contains("All exit criteria verified"),
        "{status}"
    );
    let md = std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md")).unwrap();
    assert!(
        md.contains("Verdict: VERIFICATION FAILED — 1 of 2 criteria fail"),
        "{md}"
    );
    // Mended on the integration branch as the message says: `run` verifies
    // the new head, and the verdict is that one's.
    let branch = repo.integration_branch();
    git(&repo.root, &["checkout", "-q", &branch]);
    std::fs::write(repo.root.join("Regress-sprint-1.txt"), "mended\n").unwrap();
    git(&repo.root, &["add", "-A"]);
    git(&repo.root, &["commit", "-qm", "mend sprint 1's file"]);
    git(&repo.root, &["checkout", "-q", "main"]);
    let mended = repo.run(&[]);
    let said = text(&mended);
    assert_eq!(mended.status.code(), Some(0), "{said}");
    assert!(
        said.contains("its mended head on supervise/") && said.contains("passed every criterion"),
        "{said}"
    );
    let status = text(&repo.cmd(&["status"]).output().unwrap());
    assert!(!status.contains("VERIFICATION FAILED"), "{status}");
}

#[test]
fn file_and_command_criteria_read_paths_from_the_same_root_whatever_the_directory() {
    let repo = Repo::new(
        "# Core\n\n| Work Unit | Directory |\n|---|---|\n| core | core |\n\n## core\n### Sprint 1: Types\n- [ ] `core/core-sprint-1.txt` exists\n- [ ] `grep -q done core/core-sprint-1.txt` passes\n",
        "",
    );
    repo.run_ok();
    let s = &repo.state()["units"][0]["sprints"][0];
    assert_eq!(s["status"], "COMPLETED");
    assert_eq!(repo.sprints_run(), ["core 1"]);
}

/// Three units of one phase, behind a build gate that breaks when b's first
/// attempt is merged, and whose output points at a's files. The gate is run
/// before the phase's merges and at them: b's merge is charged, not a (whom
/// the output names), nor every unit; b's second attempt mends it.
#[test]
fn a_failing_build_gate_is_charged_to_the_merge_that_broke_it() {
    let plan = "# Trio\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| a | a | 0 |\n| b | b | 0 |\n| c | c | 0 |\n\n\
## a\n### Sprint 1: A\n- [ ] `a/a-sprint-1.txt` exists\n\
## b\n### Sprint 1: B\n- [ ] `b/b-sprint-1.txt` exists\n\
## c\n### Sprint 1: C\n- [ ] `c/c-sprint-1.txt` exists\n";
    let repo = Repo::new(plan, "");
    // Fails while b's file is the one its first attempt wrote.
    let gate = "echo 'warning: see a/a-sprint-1.txt'; ! grep -q /a1 b/b-sprint-1.txt 2>/dev/null";
    let out = repo.run(&["--build-gate", gate]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let runs = repo.sprints_run();
    assert_eq!(
        runs.iter().filter(|r| *r == "b 1").count(),
        2,
        "b again: {runs:?}"
    );
    assert_eq!(runs.iter().filter(|r| *r == "a 1").count(), 1, "{runs:?}");
    assert_eq!(runs.iter().filter(|r| *r == "c 1").count(), 1, "{runs:?}");
    let log =
        std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md")).unwrap_or_default() + &said;
    assert!(
        log.contains("passed before b Sprint 1 was merged and fails after it"),
        "{log}"
    );
}

/// alpha fails for good, beta is fine, and the gate needs both: it fails
/// before the phase's merges too, so beta is neither re-run nor charged; it
/// waits BLOCKED with a notice that names alpha and what to do.
#[test]
fn a_build_gate_that_fails_for_want_of_a_blocked_unit_charges_nobody_else() {
    let plan = "# Pair\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| alpha | alpha | 0 |\n| beta | beta | 0 |\n\n\
## alpha\n### Sprint 1: A\n- [ ] `alpha/alpha-sprint-1.txt` exists\n\
## beta\n### Sprint 1: B\n- [ ] `beta/beta-sprint-1.txt` exists\n";
    let repo = Repo::new(plan, "alpha 1 fail\n");
    let gate = "test -f alpha/alpha-sprint-1.txt && test -f beta/beta-sprint-1.txt";
    let out = repo.run(&["--build-gate", gate]);
    let said = text(&out);
    assert_ne!(out.status.code(), Some(0), "{said}");
    let runs = repo.sprints_run();
    assert_eq!(
        runs.iter().filter(|r| *r == "beta 1").count(),
        1,
        "{runs:?}"
    );
    assert!(
        said.contains("BLOCKED: beta is done, but build gate"),
        "{said}"
    );
    assert!(said.contains("supervise resume alpha"), "{said}");
    assert!(said.contains("(the build printed nothing)"), "{said}");
    assert!(
        !said.contains("attributed to the last sprint of: beta"),
        "{said}"
    );
}

/// What a scripted agent does to its unit's files in the property below.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Does {
    /// Its own sprint's file.
    Ok,
    /// Its own and the next sprint's.
    Overshoot,
    /// Its own, and deletes the sprint before's.
    Clobber,
    /// Nothing, and exits 1, every time: the unit ends BLOCKED.
    Fail,
}

impl Does {
    fn action(self) -> &'static str {
        match self {
            Does::Ok => "ok",
            Does::Overshoot => "overshoot",
            Does::Clobber => "clobber",
            Does::Fail => "fail",
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]

    /// Random plans of independent units, each sprint checked by its own
    /// file, and agents that do their sprint, more (the next sprint too),
    /// damage (delete the sprint before's file) or fail. A model of each
    /// unit's files says which sprints' work is on the head before their
    /// dispatch: exactly those are never given to an agent, and every other
    /// reached sprint is, once. The verdict passes (exit 0) exactly when
    /// every unit completes and every sprint's file is on the final head;
    /// a completed plan missing a file is a failed verification (exit 2).
    #[test]
    fn sprints_are_dispatched_exactly_when_their_work_is_not_there_and_the_verdict_follows_the_head(
        units in proptest::collection::vec(
            proptest::collection::vec(
                proptest::prop_oneof![
                    4 => proptest::strategy::Just(Does::Ok),
                    2 => proptest::strategy::Just(Does::Overshoot),
                    2 => proptest::strategy::Just(Does::Clobber),
                    1 => proptest::strategy::Just(Does::Fail),
                ],
                1..=3,
            ),
            1..=3,
        )
    ) {
        let mut plan = String::from("# Random\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n");
        for u in 0..units.len() {
            plan += &format!("| u{u} | u{u} | 0 |\n");
        }
        let mut behaviour = String::new();
        for (u, sprints) in units.iter().enumerate() {
            plan += &format!("\n## u{u}\n");
            for (k, does) in sprints.iter().enumerate() {
                let k = k + 1;
                plan += &format!("### Sprint {k}: Step {k}\n- [ ] `u{u}/u{u}-sprint-{k}.txt` exists\n");
                behaviour += &format!("u{u} {k} {}\n", does.action());
            }
        }
        // The model: per unit, the sprints given to an agent, whether it
        // ends BLOCKED, and its files at the end.
        let mut expected = Vec::new();
        let (mut blocked, mut missing) = (false, false);
        for (u, sprints) in units.iter().enumerate() {
            let mut files = std::collections::BTreeSet::new();
            for (k, does) in sprints.iter().enumerate() {
                let k = k + 1;
                if files.contains(&k) {
                    continue;
                }
                expected.push(format!("u{u} {k}"));
                match does {
                    Does::Fail => {
                        blocked = true;
                        break;
                    }
                    Does::Ok => {
                        files.insert(k);
                    }
                    Does::Overshoot => {
                        files.insert(k);
                        files.insert(k + 1);
                    }
                    Does::Clobber => {
                        files.insert(k);
                        files.remove(&(k - 1));
                    }
                }
            }
            missing |= (1..=sprints.len()).any(|k| !files.contains(&k));
        }
        let repo = Repo::new(&plan, &behaviour);
        let out = repo.run(&[]);
        let said = text(&out);
        let mut ran = repo.sprints_run();
        ran.dedup();
        let mut ran_sorted = ran.clone();
        ran_sorted.sort();
        ran_sorted.dedup();
        expected.sort();
        proptest::prop_assert_eq!(&ran_sorted, &expected, "{}\n{}", plan, said);
        // A sprint is given to an agent more than once only when it fails.
        let once: Vec<_> = repo.sprints_run();
        for s in &expected {
            let n = once.iter().filter(|r| *r == s).count();
            let (u, k): (usize, usize) = {
                let mut w = s.split(' ');
                (w.next().unwrap()[1..].parse().unwrap(), w.next().unwrap().parse().unwrap())
            };
            if units[u][k - 1] != Does::Fail {
                proptest::prop_assert_eq!(n, 1, "{} ran {} times\n{}", s, n, said);
            }
        }
        let code = out.status.code();
        if blocked {
            proptest::prop_assert!(code != Some(0), "{}", said);
        } else if missing {
            proptest::prop_assert_eq!(code, Some(2), "{}", said);
            proptest::prop_assert!(said.contains("VERIFICATION FAILED") || said.contains("regression"), "{}", said);
        } else {
            proptest::prop_assert_eq!(code, Some(0), "{}", said);
        }
    }
}

/// After a BLOCKED unit the run ends. `resume` with a flag that would change
/// the operation's own settings is refused with the reason (it was dropped
/// silently); plain `resume` goes on with the agent the operation ran with,
/// though none is given (it said "No agent command").
#[test]
fn resume_keeps_the_operations_settings_and_its_agent() {
    let repo = Repo::new(PLAN, "api 1 fail,fail,fail,ok\n");
    let out = repo.run(&[]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let out = repo
        .cmd(&["resume", "--max-retries", "5", "--stop-timeout", "1"])
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("--max-retries 5 (it has 3)"), "{said}");
    assert!(said.contains("--stop-timeout 1 s (it has 60 s)"), "{said}");
    assert!(said.contains("supervise run --new"), "{said}");
    let before = repo.invocations().len();
    let out = repo
        .cmd(&["resume"])
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        repo.invocations().len() > before,
        "the remembered agent ran"
    );
    repo.assert_every_sprint_integrated();
}

/// `resume nosuch` says the unit is not in the plan, with the nearest name,
/// before anything about the agent or the operation.
#[test]
fn resume_of_a_unit_not_in_the_plan_says_so_first() {
    let repo = Repo::new(PLAN, "");
    let out = repo
        .cmd(&["resume", "apu"])
        .env_remove("SUPERVISE_AGENT")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no work unit `apu`. Did you mean `api`?"),
        "{said}"
    );
    assert!(!said.contains("agent"), "{said}");
}

/// Locally too, work that carries a secret of this machine's environment
/// (a variable whose name says CRED, base64-encoded in a committed file) or
/// a token's shape (in a commit message) is refused and set aside, never
/// merged; the retry finishes; and the key the agent wrote in its answer is
/// in none of the supervisor's own files.
#[test]
fn work_that_carries_a_secret_is_refused_locally_and_nothing_keeps_it() {
    const CRED: &str = "deploy-cred-0c4f9a1e7b2d5f83";
    let repo = Repo::new(PLAN, "api 1 keyfile,ok\ndocs 1 keymsg,ok\n");
    let out = repo
        .cmd(&["run"])
        .env("MY_DEPLOY_CRED", CRED)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for (unit, at) in [
        ("api", "`api/app.yml` line 2"),
        ("docs", "the message of commit"),
    ] {
        let line = repo.first_failure(unit);
        assert!(
            line.contains("carry a secret") && line.contains(at),
            "{line}"
        );
    }
    let branch = repo.integration_branch();
    let kept = git(&repo.root, &["log", &branch, "-p", "--format=%B"]);
    assert!(
        !kept.contains("xghp_") && !kept.contains("app.yml"),
        "{kept}"
    );
    let mut files = vec![repo.root.join("SUPERVISOR_STATE.md")];
    let mut dirs = vec![repo.root.join(".supervise")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("worktrees") {
                dirs.push(p);
            } else if p.is_file() && !p.ends_with("answer") && !p.ends_with("output.log") {
                // (The agent's own files in its run directory are what it
                // wrote, on the machine whose key it held: not ours.)
                files.push(p);
            }
        }
    }
    let status = repo.cmd(&["status", "--json"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&status.stdout).contains(CRED));
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(CRED),
            "{} holds the key",
            f.display()
        );
    }
    assert!(
        files.iter().any(|f| f.ends_with("events.jsonl")),
        "{files:?}"
    );
}

/// A sprint with nothing a machine can check is completed on the agent's
/// word, and every place a person reads says so: the status table, the
/// state file's decision log and the completion report — never "verified".
#[test]
fn a_sprint_on_the_agents_word_is_said_so_everywhere() {
    let repo = Repo::new(
        "# Word\n\n## Sprint 1: Tone\n**Exit Criteria:**\n- [ ] The wording reads well to a new user\n- [ ] The tone matches the style guide\n",
        "",
    );
    repo.run_ok();
    let said = "COMPLETED on the agent's word (2 criteria unverified)";
    let status = repo.cmd(&["status"]).output().unwrap();
    assert!(text(&status).contains(said), "{}", text(&status));
    let state = std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md")).unwrap();
    assert!(state.contains(said), "{state}");
    assert!(!state.contains("verification cascade confirmed"), "{state}");
    let report = std::fs::read_dir(&repo.root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("COMPLETE"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .expect("the completion report");
    assert!(report.contains(&format!("**Status**: {said}")), "{report}");
}

/// The model provider overloaded twice (as Claude Code reports it), then
/// fine: the sprint runs three times on the same model, one attempt is
/// counted, nothing escalates, and the operation completes.
#[test]
fn an_overloaded_provider_is_waited_out_on_the_same_model() {
    let plan = "# Solo\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n## solo\n### Sprint 1: One\n- [ ] `solo/solo-sprint-1.txt` exists\n";
    let repo = Repo::new(plan, "solo 1 overloaded,overloaded,ok\n");
    let out = repo.run(&[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(repo.sprints_run(), ["solo 1", "solo 1", "solo 1"]);
    let state = repo.state();
    let sprint = &state["units"][0]["sprints"][0];
    assert_eq!(sprint["status"], "COMPLETED", "{sprint}");
    assert_eq!(sprint["failures"], 0, "{sprint}");
    let tiers: Vec<&serde_json::Value> = sprint["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["tier"])
        .collect();
    assert_eq!(tiers.len(), 3, "{sprint}");
    assert!(
        tiers.iter().all(|t| *t == tiers[0]),
        "no escalation: {tiers:?}"
    );
    assert!(said.contains("Waiting on the model provider"), "{said}");
}

/// Notices reach an outgoing webhook: a unit that turns BLOCKED and the
/// operation that completes after `resume`, each once, as JSON signed with
/// the supervisor's key (HMAC-SHA256, GitHub's scheme), with a delivery id
/// per notice. The key is only in the supervisor's environment.
#[test]
fn notices_reach_a_signed_webhook_once_each() {
    use hmac::{Hmac, KeyInit, Mac};
    let receiver = Receiver::start(true);
    let repo = Repo::new(PLAN, "api 1 fail,fail,fail,ok\n");
    let notify = ["--notify", receiver.url.as_str()];
    let run = |args: &[&str]| {
        repo.cmd(args)
            .env("SUPERVISE_NOTIFY_SECRET", "notify-key")
            .output()
            .unwrap()
    };
    let out = run(&[&["run"][..], &notify].concat());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let out = run(&[&["resume", "api"][..], &notify].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let notices = receiver.notices();
    let mut events = Vec::new();
    let mut deliveries = std::collections::HashSet::new();
    for (headers, body) in &notices {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"notify-key").unwrap();
        mac.update(body);
        let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(headers.get("x-supervise-signature-256"), Some(&want));
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(
            headers.get("x-supervise-event").map(String::as_str),
            v["event"].as_str()
        );
        assert_eq!(
            headers.get("x-supervise-delivery").map(String::as_str),
            v["delivery"].as_str()
        );
        assert!(
            deliveries.insert(v["delivery"].as_str().unwrap().to_string()),
            "sent twice: {v}"
        );
        assert!(!String::from_utf8_lossy(body).contains("notify-key"));
        events.push((v["event"].as_str().unwrap().to_string(), v["unit"].clone()));
    }
    let count = |e: &str| events.iter().filter(|(x, _)| x == e).count();
    assert_eq!((count("blocked"), count("completed")), (1, 1), "{events:?}");
    assert!(
        events.contains(&("blocked".into(), serde_json::json!("api"))),
        "{events:?}"
    );
}

/// The key notices are signed with stays with the supervisor: an agent (and
/// the wrapper around it, whose environment it could read) is started
/// without it, while the variables of its contract are there.
#[test]
fn the_notices_key_never_reaches_an_agent() {
    let repo = Repo::new(PLAN, "docs 1 envnames\n");
    let out = repo
        .cmd(&["run"])
        .env("SUPERVISE_NOTIFY_SECRET", "notify-key")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let names = git(
        &repo.root,
        &[
            "show",
            &format!("supervise/{op}/integration:docs/docs-sprint-1.txt"),
        ],
    );
    assert!(
        names.lines().any(|l| l == "SUPERVISE_DISPATCH_ID"),
        "{names}"
    );
    assert!(
        !names.lines().any(|l| l == "SUPERVISE_NOTIFY_SECRET"),
        "{names}"
    );
}

/// A receiver that takes notices and never answers holds nothing up: the
/// operation runs to its end while the receiver still holds the request.
#[test]
fn a_receiver_that_never_answers_does_not_hold_the_operation() {
    let receiver = Receiver::start(false);
    let repo = Repo::new(PLAN, "");
    let out = repo
        .cmd(&["run", "--notify", &receiver.url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state()["status"], "COMPLETED");
    // One request: the completed notice, taken and still unanswered. A
    // sender the operation waited for would have tried it again first.
    assert_eq!(
        receiver.notices().len(),
        1,
        "the completed notice was taken once, and is still unanswered"
    );
}

/// A receiver's address that is not an http(s) URL is refused before any
/// work starts, with the flag named.
#[test]
fn a_bad_notify_address_is_refused_before_anything_runs() {
    let repo = Repo::new(PLAN, "");
    let out = repo
        .cmd(&["run", "--notify", "hooks.example.com/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("--notify"), "{}", text(&out));
    assert!(!repo.root.join(".supervise/events.jsonl").exists());
}

/// Two units that change the same lines in parallel: the one that lands
/// second no longer merges. It gets a conflict round — a continuation on
/// the same model whose one task is the merge, its conflicting files named
/// with the command to run — not a failed attempt escalated to a stronger
/// model; the agent merges, both sides are kept, and the plan completes.
#[test]
fn a_conflict_between_parallel_units_gets_a_conflict_round_on_the_same_model() {
    let plan = "# Two\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| a | a | 0 |\n| b | b | 0 |\n\n\
## a\n### Sprint 1: A\n- [ ] `a/a-sprint-1.txt` exists\n\
## b\n### Sprint 1: B\n- [ ] `b/b-sprint-1.txt` exists\n";
    let repo = Repo::new(plan, "a 1 shared,resolve\nb 1 shared,resolve\n");
    repo.run_ok();
    let histories: Vec<Vec<serde_json::Value>> = ["a", "b"]
        .iter()
        .map(|u| {
            repo.unit(u)["sprints"][0]["history"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    let twice: Vec<&Vec<serde_json::Value>> = histories.iter().filter(|h| h.len() > 1).collect();
    assert_eq!(
        twice.len(),
        1,
        "one unit lands second and merges: {histories:#?}"
    );
    let h = twice[0];
    let outcomes: Vec<&str> = h.iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["conflict", "completed"], "{h:#?}");
    assert_eq!(h[1]["kind"], "continuation", "{h:#?}");
    assert_eq!(
        h[0]["tier"], h[1]["tier"],
        "no stronger model for a conflict: {h:#?}"
    );
    assert_eq!(repo.state()["units"][0]["sprints"][0]["failures"], 0);
    let op = repo.state()["id"].as_str().unwrap().to_string();
    let shared = git(
        &repo.root,
        &["show", &format!("supervise/{op}/integration:shared.txt")],
    );
    assert!(
        shared.contains("a was here") && shared.contains("b was here"),
        "{shared}"
    );
    let decisions = std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md")).unwrap();
    assert!(decisions.contains("CONFLICT (round 1/2)"), "{decisions}");
}

/// `run --dry-run` says what the operation is likely to cost — a range in
/// budget units, each sprint's first model, where the budget runs out —
/// and starts nothing: no agent, no state.
#[test]
fn a_dry_run_gives_the_expected_cost_and_starts_nothing() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&["--dry-run", "--budget", "2"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("budget units"), "{said}");
    for row in ["| api | 1 |", "| api | 2 |", "| docs | 1 |", "| web | 1 |"] {
        assert!(said.contains(row), "{row} missing: {said}");
    }
    assert!(said.contains("The budget runs out at"), "{said}");
    assert!(said.contains("Nothing was started."), "{said}");
    assert!(repo.invocations().is_empty(), "an agent ran");
    assert!(!repo.root.join(".supervise").exists(), "state was written");
}

/// `supervise replay` decides every record of finished operations again
/// (a retry on a stronger model, a partial continuation, a unit BLOCKED
/// after its last retry while the rest go on) and finds the same events;
/// `export` writes the log scrubbed, and replaying the export agrees; a log
/// whose recorded decision was altered is caught at that record.
#[test]
fn replay_decides_every_recorded_operation_again_the_same() {
    for behaviour in [
        "api 1 partial,ok\ndocs 1 fail,ok\n",
        "api 1 fail,fail,fail,fail\ndocs 1 leak,ok\n",
    ] {
        let repo = Repo::new(PLAN, behaviour);
        let out = repo.run(&["--max-retries", "2"]);
        assert!(out.status.code().is_some(), "{}", text(&out));
        let replayed = repo.cmd(&["replay"]).output().unwrap();
        let said = text(&replayed);
        assert_eq!(replayed.status.code(), Some(0), "{said}");
        assert!(
            said.contains(" decided again the same, 0 differently"),
            "{said}"
        );
        assert!(!said.contains("without a cause"), "{said}");
        assert!(said.contains("one tier up"), "{said}");
        let records: usize = said
            .lines()
            .last()
            .and_then(|l| l.split(": ").nth(1))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a count of records: {said}"));
        assert!(records > 5, "{said}");
        let trace = text(&repo.cmd(&["replay", "--trace"]).output().unwrap());
        assert!(trace.contains("supervise.operation"), "{trace}");
        assert!(trace.matches("invoke_agent").count() >= 4, "{trace}");

        let export = repo.root.parent().unwrap().join("export.jsonl");
        let out = repo
            .cmd(&["export", "--out", export.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let exported = std::fs::read_to_string(&export).unwrap();
        assert!(!exported.contains("ghs_"), "the export is scrubbed");
        let again = repo
            .cmd(&["replay", "--log", export.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(0), "{}", text(&again));

        // A decision the engine would not make: the record says so.
        let altered: String = exported
            .lines()
            .map(|l| {
                if l.contains("one tier up") {
                    l.replacen("one tier up", "the same tier", 1)
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&export, altered).unwrap();
        let caught = repo
            .cmd(&["replay", "--log", export.to_str().unwrap()])
            .output()
            .unwrap();
        let said = text(&caught);
        assert_eq!(caught.status.code(), Some(2), "{said}");
        assert!(
            said.contains("DIFFERS") && said.contains("1 differently"),
            "{said}"
        );
    }
}

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, a run is one trace: a root span
/// for the operation, a span per attempt (the failed one and its retry on a
/// stronger model included) under it, with the model, unit, sprint and
/// outcome, and the agent is given the `TRACEPARENT` of its attempt.
#[test]
fn a_traced_run_is_one_trace_with_a_span_per_attempt() {
    let (url, spans) = support::collector();
    let repo = Repo::new(PLAN, "api 1 fail,ok\ndocs 1 envnames\n");
    let out = repo
        .cmd(&["run"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .env("OTEL_SERVICE_NAME", "supervise-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let spans = spans.lock().unwrap().clone();
    let root = spans
        .iter()
        .find(|s| s.name == "supervise.operation")
        .unwrap_or_else(|| panic!("a root span: {spans:#?}"));
    assert!(root.parent_span_id.is_empty());
    let attr = support::span_attr;
    let op = attr(root, "supervise.operation.id");
    assert!(attr(root, "supervise.operation.status").eq_ignore_ascii_case("completed"));
    assert_eq!(root.trace_id, supervise::otlp::trace_id(&op).to_vec());
    assert!(
        spans.iter().all(|s| s.trace_id == root.trace_id),
        "one trace"
    );
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "invoke_agent").collect();
    // api 1 failed and retried, api 2, docs 1, web 1.
    assert_eq!(attempts.len(), 5, "{attempts:#?}");
    for a in &attempts {
        assert_eq!(a.parent_span_id, root.span_id);
        assert!(a.start_time_unix_nano <= a.end_time_unix_nano);
        assert!(!attr(a, "gen_ai.request.model").is_empty());
    }
    let api1: Vec<_> = attempts
        .iter()
        .filter(|a| attr(a, "supervise.unit") == "api" && attr(a, "supervise.sprint") == "1")
        .collect();
    assert_eq!(api1.len(), 2);
    assert_eq!(
        api1.iter()
            .map(|a| attr(a, "supervise.attempt"))
            .collect::<Vec<_>>(),
        ["1", "2"]
    );
    let integration = git(&repo.root, &["branch", "--list", "supervise/*/integration"]);
    let branch = integration.trim().trim_start_matches("* ").to_string();
    let names = git(
        &repo.root,
        &["show", &format!("{branch}:docs/docs-sprint-1.txt")],
    );
    assert!(names.contains("TRACEPARENT"), "{names}");
}

/// The model provider cannot be reached (nothing listens where it is): the
/// supervisor says so once, in words, with what to check — not a warning
/// per request, and no terminal colour codes in a redirected log — and the
/// attempt it ends is provider trouble, waited out, not a failure counted.
#[test]
fn an_unreachable_provider_is_said_once_in_words_and_waited_out() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let plan = "# One\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n## solo\n### Sprint 1: Do it\n- [ ] `solo/done.txt` exists\n";
    let repo = Repo(Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/unreachable.sh",
        "",
    ));
    let mut child = repo
        .cmd(&["run"])
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-unreachable-test")
        .env("ANTHROPIC_BASE_URL", &nowhere)
        .env("SUPERVISE_TICK_MS", "50")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Long enough for the attempt to end and be decided; the wait that
    // follows is the provider's, and the test stops there.
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        // Before the operation starts, `status` has nothing to say.
        let out = repo.cmd(&["status", "--json"]).output().unwrap();
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if st["units"][0]["sprints"][0]["provider_retries"].as_u64() >= Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    kill_after(&mut child, Duration::from_millis(200));
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(
        said.matches("could not be reached (").count(),
        1,
        "said once, not per request: {said}"
    );
    assert!(
        said.contains("check this machine's network") && said.contains("ANTHROPIC_BASE_URL"),
        "{said}"
    );
    assert!(
        !said.contains("client error (Connect)") && !said.contains('\x1b'),
        "{said}"
    );
    let st = repo.state();
    let sprint = &st["units"][0]["sprints"][0];
    assert_eq!(sprint["failures"], 0, "no failure counted: {st}");
    assert!(
        sprint["provider_retries"].as_u64() >= Some(1),
        "waited out: {st}"
    );
}

/// Ctrl-C stops the supervisor, not the agents: it says which are still
/// running and how to end them, `status` says so too while none watches
/// them, and the command it names ends them.
#[test]
fn an_interrupted_supervisor_names_the_agents_it_leaves_running() {
    let plan = "# One\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n## solo\n### Sprint 1: Do it\n- [ ] `solo/solo-sprint-1.txt` exists\n";
    let repo = Repo(Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/scripted.sh",
        "solo 1 hang\n",
    ));
    let child = repo
        .cmd(&["run"])
        .env("SUPERVISE_TICK_MS", "50")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while repo.invocations().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!repo.invocations().is_empty(), "the agent started");
    // SAFETY: signalling the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains(
            "Interrupted. 1 agent is still running with no supervisor watching (solo Sprint 1 on"
        ) && said.contains("`supervise killall` ends it now"),
        "{said}"
    );
    let status = text(&repo.cmd(&["status"]).output().unwrap());
    assert!(
        status.contains("1 agent is still running with no supervisor watching"),
        "{status}"
    );
    // The step it names, typed.
    let out = repo.cmd(&["killall"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let status = text(&repo.cmd(&["status"]).output().unwrap());
        if !status.contains("still running with no supervisor") {
            break;
        }
        assert!(Instant::now() < until, "killall ended it: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Round five, item 2: `bad`'s every attempt breaks the build and it ends
/// BLOCKED with its merge still on the integration branch. The gates after
/// that fail for bad's work: `base`, done once, is never charged an attempt
/// and waits BLOCKED with a notice that names bad; `good`, after base, waits.
#[test]
fn a_blocked_units_merge_that_breaks_the_build_is_charged_to_it_alone() {
    let plan = "# Trio\n\n| Work Unit | Directory | Depends on |\n|---|---|---|\n| bad | bad | — |\n| base | base | — |\n| good | good | base |\n\n\
## bad\n### Sprint 1: B\n- [ ] `bad/bad-sprint-1.txt` exists\n\
## base\n### Sprint 1: A\n- [ ] `base/base-sprint-1.txt` exists\n\
## good\n### Sprint 1: G\n- [ ] `good/good-sprint-1.txt` exists\n";
    let repo = Repo::new(plan, "");
    let gate = "if test -f bad/bad-sprint-1.txt; then echo 'error: bad/bad-sprint-1.txt breaks the build'; exit 1; fi";
    let out = repo.run(&["--build-gate", gate]);
    let said = text(&out);
    assert_ne!(out.status.code(), Some(0), "{said}");
    let runs = repo.sprints_run();
    assert_eq!(
        runs.iter().filter(|r| *r == "base 1").count(),
        1,
        "base is charged for bad's merge: {runs:?}\n{said}"
    );
    assert!(!runs.iter().any(|r| r == "good 1"), "{runs:?}");
    assert_eq!(repo.unit("bad")["status"], "BLOCKED", "{said}");
    assert_eq!(repo.unit("base")["status"], "BLOCKED", "{said}");
    let log =
        std::fs::read_to_string(repo.root.join("SUPERVISOR_STATE.md")).unwrap_or_default() + &said;
    assert!(
        !log.contains("attributed to the last sprint of: base"),
        "{log}"
    );
    assert!(log.contains("supervise resume bad"), "{log}");
}

/// Round five, item 11: the budget drains the operation, and the notice's
/// next step is typed as it says: `supervise resume --budget N` raises it
/// and the plan goes on to the end. A budget no more than what was spent is
/// refused with the figure.
#[test]
fn a_drained_budget_is_raised_on_resume_as_the_notice_says() {
    let repo = Repo::new(PLAN, "");
    let out = repo.run(&["--budget", "31"]);
    let said = text(&out);
    assert!(said.contains("Budget reached"), "{said}");
    assert!(said.contains("supervise resume --budget 62"), "{said}");
    assert_ne!(repo.state()["status"], "COMPLETED", "{said}");
    let low = repo.cmd(&["resume", "--budget", "1"]).output().unwrap();
    assert_ne!(low.status.code(), Some(0), "{}", text(&low));
    assert!(text(&low).contains("no more than the"), "{}", text(&low));
    let out = repo
        .cmd(&["resume", "--budget", "100000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.state()["status"], "COMPLETED");
    assert_eq!(repo.state()["config"]["budget"], 100000);
}
