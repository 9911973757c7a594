//! The agent CLIs people run, really run: Claude Code (npm
//! `@anthropic-ai/claude-code`, installed into target/npm by scripts/test)
//! against the scripted model server of `fake_github::model`, driven by
//! the README's own first-run command locally, and by the shipped agent
//! workflow on the fake GitHub.

mod story;
mod support;

use std::path::{Path, PathBuf};
use story::{Setup, Story};
use support::Checkout;

/// Three units, one depending on another; `ops`'s file is one the scripted
/// model leaves out the first time (see `fake_github::model`): that sprint
/// fails once and is fixed on its retry.
const PLAN: &str = "# Real\n\n| Work Unit | Directory | Depends On |\n|---|---|---|\n\
| core | core | — |\n| web | web | core |\n| ops | ops | — |\n\n\
## core\n### Sprint 1: Types\n- [ ] `core/core-1.txt` exists\n### Sprint 2: Money\n- [ ] `core/core-2.txt` exists\n\
## web\n### Sprint 1: Page\n- [ ] `web/web-1.txt` exists\n\
## ops\n### Sprint 1: Deploy\n- [ ] `ops/ops-flaky.txt` exists\n";

/// The files the plan's criteria name.
const FILES: [&str; 4] = [
    "core/core-1.txt",
    "core/core-2.txt",
    "web/web-1.txt",
    "ops/ops-flaky.txt",
];

/// The README's first-run agent command, as printed there.
fn readme_agent_command() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("the README");
    let line = readme
        .lines()
        .find(|l| l.starts_with("supervise run --agent 'claude -p"))
        .expect("the README's first-run command");
    let quoted = line
        .strip_prefix("supervise run --agent '")
        .and_then(|l| l.strip_suffix('\''))
        .expect("the agent command in single quotes");
    quoted.to_string()
}

/// Where scripts/test installs the pinned Claude Code.
fn claude_bin() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm/node_modules/.bin");
    assert!(
        dir.join("claude").exists(),
        "Claude Code is not installed in {}: scripts/test installs it (npm @anthropic-ai/claude-code, pinned there)",
        dir.display()
    );
    dir
}

/// A three-unit plan with a dependency, its sprints done by real Claude Code
/// through its own Bash tool, the model a script, the agent command the
/// README's: everything completes, verifies and merges, one attempt each but
/// the sprint whose first try left its file out, retried on a stronger model.
#[test]
fn real_claude_code_completes_a_plan_from_the_readmes_command() {
    let bin = claude_bin();
    let model = fake_github::model::ModelServer::start();
    let plan = PLAN;
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/scripted.sh",
        "",
    );
    let home = repo.root.parent().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = repo
        .cmd(&["run", "--agent", &readme_agent_command()])
        .env("PATH", path)
        .env("HOME", &home)
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-scripted-model-key")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    // Each sprint's file was made by the CLI's own tool call, and merged.
    let integration = support::git(&repo.root, &["branch", "--list", "supervise/*/integration"]);
    let branch = integration.trim().trim_start_matches("* ").to_string();
    for f in FILES {
        let shown = support::git(&repo.root, &["show", &format!("{branch}:{f}")]);
        assert_eq!(shown.trim(), "made by the scripted model", "{f}");
    }
    // One attempt each but ops's, whose first failed and whose retry ran on
    // a stronger model. Each attempt's usage is what the CLI reported of the
    // scripted model's figures (each response 1,000 tokens in and 200 out:
    // two responses for work, one for the attempt that did nothing), with
    // its price.
    let status = repo.cmd(&["status", "--json"]).output().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let mut dollars = 0.0;
    for unit in state["units"].as_array().unwrap() {
        for sprint in unit["sprints"].as_array().unwrap() {
            assert_eq!(sprint["status"], "COMPLETED", "{sprint}");
            let history = sprint["history"].as_array().unwrap();
            let responses: Vec<u64> = if unit["name"] == "ops" {
                assert_ne!(history[0]["tier"], history[1]["tier"], "{sprint}");
                vec![1, 2]
            } else {
                vec![2]
            };
            assert_eq!(history.len(), responses.len(), "{sprint}");
            for (attempt, n) in history.iter().zip(responses) {
                let usage = &attempt["usage"];
                assert_eq!(usage["input_tokens"], 1000 * n, "{sprint}");
                assert_eq!(usage["output_tokens"], 200 * n, "{sprint}");
                let cost = usage["cost"].as_f64().expect("the CLI priced the run");
                assert!(cost > 0.0, "{sprint}");
                dollars += cost;
            }
        }
    }
    // The operation's figure is the sum of the attempts', to the millionth.
    let report = repo.cmd(&["status"]).output().unwrap();
    let shown = format!("${dollars:.4} reported by the agents");
    assert!(
        support::text(&report).contains(&shown),
        "{shown}:\n{}",
        support::text(&report)
    );
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4 * 2 + 1,
        "a tool call and an answer per sprint, and the misstep: {requests:?}"
    );
    assert!(requests.iter().all(|r| r.tools > 0), "{requests:?}");
}

/// The version of Claude Code scripts/test installed.
fn claude_version() -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/npm/node_modules/@anthropic-ai/claude-code/package.json");
    let text = std::fs::read_to_string(&manifest).expect("Claude Code's package.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("package.json reads");
    v["version"].as_str().expect("a version").to_string()
}

/// The same plan on GitHub (the misstep retried there too): the fake runs
/// the shipped agent workflow from its YAML, whose Claude Code step installs the pinned version (the
/// runner's npm refuses another) and runs it against the repository's
/// gateway, here the scripted model; the work goes through the verify and
/// publish jobs to the final pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_claude_code_completes_a_plan_on_github_through_the_shipped_workflow() {
    let claude = claude_bin().join("claude");
    let model = fake_github::model::ModelServer::start();
    let plan = PLAN;
    let s = Story::start(Setup::operation(plan, "")).await;
    s.use_claude_code(&claude, &claude_version(), &model.url);
    s.say("/supervise start").await;
    s.until("the final pull request", 240, |s| s.final_pull().is_some())
        .await;
    let head = s.final_pull().unwrap().head;
    let bare = s.tmp.path().join("github/repos/acme/shop.git");
    for f in FILES {
        let shown = support::git(&bare, &["show", &format!("{head}:{f}")]);
        assert_eq!(shown.trim(), "made by the scripted model", "{f}");
    }
    let runs = s.fake.runs(story::REPO);
    assert_eq!(
        runs.len(),
        4 + 1,
        "one run a sprint, and the retry: {runs:#?}"
    );
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4 * 2 + 1,
        "a tool call and an answer per sprint, and the misstep: {requests:?}"
    );
    // What the CLI reported reached the service through the results record:
    // in each attempt's check run, and added up in the status comment.
    let checks = s.fake.check_runs(story::REPO);
    let core = checks
        .iter()
        .find(|c| {
            c.name == "supervise: core Sprint 1" && c.conclusion.as_deref() == Some("success")
        })
        .expect("core Sprint 1's check run");
    assert!(
        core.summary.contains("used, as its CLI reported: $")
            && core.summary.contains("2,000 tokens in and 400 out"),
        "{}",
        core.summary
    );
    s.until("the spend reported", 30, |s| {
        s.status_comment().contains("reported by the agents")
    })
    .await;
}
