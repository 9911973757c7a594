//! The agent CLIs people run, really run: Claude Code, Codex and Gemini
//! CLI (npm `@anthropic-ai/claude-code`, `@openai/codex`,
//! `@google/gemini-cli`, installed into target/npm by scripts/test)
//! against the scripted model server of `fake_github::model` — locally by
//! the README's own first-run command and by the presets, and on the fake
//! GitHub through the shipped agent workflow — and how the supervisor
//! answers what they report: the provider's trouble, their own failures,
//! a turn limit.

mod story;
mod support;

use fake_github::model::{Api, Failure, ModelServer};
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

/// Where scripts/test installs the pinned agent CLIs (`program` from npm
/// `package`): the folder to put first on PATH.
fn installed(program: &str, package: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm/node_modules/.bin");
    assert!(
        dir.join(program).exists(),
        "{program} is not installed in {}: scripts/test installs it (npm {package}, pinned there)",
        dir.display()
    );
    dir
}

fn claude_bin() -> PathBuf {
    installed("claude", "@anthropic-ai/claude-code")
}

fn codex_bin() -> PathBuf {
    installed("codex", "@openai/codex")
}

fn gemini_bin() -> PathBuf {
    installed("gemini", "@google/gemini-cli")
}

/// `supervise run` in `repo` with `bin` first on PATH and a home of its own.
fn run_with(repo: &Checkout, agent: &str, bin: &Path) -> std::process::Command {
    let home = repo.root.parent().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = repo.cmd(&["run", "--agent", agent]);
    cmd.env("PATH", path).env("HOME", &home);
    cmd
}

/// What every real-agent run of [`PLAN`] must show: each sprint's file made
/// by the CLI's own tool call and merged; one attempt each but ops's, whose
/// first failed and whose retry ran on a stronger tier; each attempt's
/// tokens what the CLI reported of the scripted model's figures (two
/// responses for work, one for the attempt that did nothing); the models
/// asked for, the tiers' ids in `models`. Returns the dollars the attempts
/// reported.
fn assert_plan_done(repo: &Checkout, model: &ModelServer, models: [&str; 3]) -> f64 {
    let integration = support::git(&repo.root, &["branch", "--list", "supervise/*/integration"]);
    let branch = integration.trim().trim_start_matches("* ").to_string();
    for f in FILES {
        let shown = support::git(&repo.root, &["show", &format!("{branch}:{f}")]);
        assert_eq!(shown.trim(), "made by the scripted model", "{f}");
    }
    let status = repo.cmd(&["status", "--json"]).output().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let (tokens_in, tokens_out) = fake_github::model::BILLED;
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
                let read = usage["cache_read_tokens"].as_u64().unwrap_or(0);
                assert_eq!(
                    usage["input_tokens"].as_u64().unwrap() + read,
                    tokens_in * n,
                    "{sprint}"
                );
                assert_eq!(usage["output_tokens"], tokens_out * n, "{sprint}");
                dollars += usage["cost"].as_f64().unwrap_or(0.0);
            }
        }
    }
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4 * 2 + 1,
        "a tool call and an answer per sprint, and the misstep: {requests:?}"
    );
    assert!(requests.iter().all(|r| r.tools > 0), "{requests:?}");
    // The tiers' ids as sent, or as the CLI resolved an alias (Claude Code
    // asks for `claude-haiku-…` when told `haiku`).
    assert!(
        requests
            .iter()
            .all(|r| models.iter().any(|m| r.model.contains(m))),
        "the tiers' ids {models:?}: {requests:?}"
    );
    dollars
}

/// Claude Code's environment for a run against the scripted model, with
/// `retries` of its own on a provider's error.
fn for_claude<'a>(
    cmd: &'a mut std::process::Command,
    model: &ModelServer,
    retries: u32,
) -> &'a mut std::process::Command {
    cmd.env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-scripted-model-key")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", retries.to_string())
}

/// A three-unit plan with a dependency, its sprints done by real Claude Code
/// through its own Bash tool, the model a script, the agent command the
/// README's: everything completes, verifies and merges, one attempt each but
/// the sprint whose first try left its file out, retried on a stronger model.
#[test]
fn real_claude_code_completes_a_plan_from_the_readmes_command() {
    let bin = claude_bin();
    let model = ModelServer::start();
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", PLAN)],
        "tests/agents/scripted.sh",
        "",
    );
    let out = for_claude(
        &mut run_with(&repo, &readme_agent_command(), &bin),
        &model,
        0,
    )
    .output()
    .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let dollars = assert_plan_done(&repo, &model, ["haiku", "sonnet", "opus"]);
    // Claude Code priced every attempt; the operation's figure is the sum of
    // the attempts', to the millionth.
    assert!(dollars > 0.0);
    let report = repo.cmd(&["status"]).output().unwrap();
    let shown = format!(
        "Spend: {} · by unit:",
        supervise::engine::usage::Usd::from_dollars(dollars)
    );
    assert!(
        support::text(&report).contains(&shown),
        "{shown}:\n{}",
        support::text(&report)
    );
    assert!(model.requests().iter().all(|r| r.api == Api::Messages));
    // Claude Code held a token of its attempt's; the supervisor's proxy
    // swapped in the key on the way to the model.
    let keys = model.keys();
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k == "sk-ant-api03-scripted-model-key"),
        "{keys:?}"
    );
}

/// A storm of overloads on one sprint, answered to real Claude Code run by
/// its preset (`--agent claude`): the CLI's own retries (two) run out, it
/// reports the 529, and the supervisor waits on the same model without
/// counting an attempt; after the storm the sprint completes with no
/// failure counted and no escalation.
#[test]
fn a_storm_of_overloads_on_real_claude_code_counts_no_attempt() {
    let (model, repo, said) = solo_under_claude(5, Failure::Overloaded, 2);
    assert!(
        said.contains("Waiting on the model provider: it is overloaded (HTTP 529)"),
        "{said}"
    );
    let sprint = solo_sprint(&repo);
    assert_eq!(sprint["failures"], 0, "{sprint}");
    let requests = model.requests();
    let overloaded = requests.iter().filter(|r| r.failed.is_some()).count();
    assert_eq!(overloaded, 5, "{requests:?}");
    // Three requests ended the first run (the first try and two retries);
    // the second run's two retries outlasted the rest of the storm.
    assert_eq!(requests.len(), 5 + 2, "{requests:?}");
    assert!(
        requests.iter().all(|r| r.model == requests[0].model),
        "no escalation: {requests:?}"
    );
}

/// A one-sprint plan, for the tests of one failure.
const SOLO: &str = "# Solo\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n\
    ## solo\n### Sprint 1: One\n- [ ] `solo/solo-1.txt` exists\n";

/// [`SOLO`] run to its end by real Claude Code (its preset, `retries` of
/// its own), the scripted model failing its first `n` requests with
/// `failure`: the model, the checkout and what the run said.
fn solo_under_claude(n: usize, failure: Failure, retries: u32) -> (ModelServer, Checkout, String) {
    let model = ModelServer::start();
    model.fail_next(n, failure);
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", SOLO)],
        "tests/agents/scripted.sh",
        "",
    );
    let out = for_claude(
        &mut run_with(&repo, "claude", &claude_bin()),
        &model,
        retries,
    )
    .output()
    .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{failure:?}: {said}");
    (model, repo, said)
}

/// The one sprint of [`SOLO`] as `supervise status --json` shows it, after
/// checking that its file reached the integration branch.
fn solo_sprint(repo: &Checkout) -> serde_json::Value {
    let merged = support::git(&repo.root, &["branch", "--list", "supervise/*/integration"]);
    let branch = merged.trim().trim_start_matches("* ").to_string();
    let shown = support::git(&repo.root, &["show", &format!("{branch}:solo/solo-1.txt")]);
    assert_eq!(shown.trim(), "made by the scripted model");
    let status = repo.cmd(&["status", "--json"]).output().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let sprint = state["units"][0]["sprints"][0].clone();
    assert_eq!(sprint["status"], "COMPLETED", "{sprint}");
    sprint
}

/// What is not the provider's trouble is not waited out, and what the CLI
/// recovers from itself costs nothing: under real Claude Code, a prompt
/// too long for the model (400) fails the attempt, which is retried on a
/// stronger tier; a stream cut off mid-answer is retried by the CLI
/// without streaming, and the sprint completes at its first attempt.
#[test]
fn real_claude_codes_own_failures_are_told_from_the_providers() {
    for (failure, failures) in [(Failure::ContextTooLong, 1), (Failure::StreamCut, 0)] {
        let (_model, repo, said) = solo_under_claude(1, failure, 0);
        assert!(
            !said.contains("Waiting on the model provider"),
            "{failure:?}: {said}"
        );
        let sprint = solo_sprint(&repo);
        assert_eq!(sprint["failures"], failures, "{failure:?}: {sprint}");
        let history = sprint["history"].as_array().unwrap();
        assert_eq!(history.len(), 1 + failures, "{failure:?}: {sprint}");
        if failures > 0 {
            assert_ne!(history[0]["tier"], history[1]["tier"], "{sprint}");
        }
    }
}

/// Codex's report of the provider's rate limit (its own retries off, as a
/// gateway's settings may have them) is waited out on the same model: the
/// sprint's failures stay at none and it completes after the wait.
#[test]
fn a_rate_limit_under_real_codex_counts_no_attempt() {
    let model = ModelServer::start();
    model.fail_next(1, Failure::RateLimited);
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", SOLO)],
        "tests/agents/scripted.sh",
        "",
    );
    let home = codex_home(repo.root.parent().unwrap(), &model);
    let out = run_with(&repo, "codex", &codex_bin())
        .args([
            "--model-haiku",
            CODEX_MODELS[0],
            "--model-sonnet",
            CODEX_MODELS[1],
        ])
        .args(["--model-opus", CODEX_MODELS[2]])
        .env("CODEX_HOME", &home)
        .env("SCRIPTED_MODEL_KEY", "sk-proj-scripted-model-key")
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("rate-limited (HTTP 429)"), "{said}");
    let sprint = solo_sprint(&repo);
    assert_eq!(sprint["failures"], 0, "{sprint}");
    let requests = model.requests();
    assert_eq!(requests.iter().filter(|r| r.failed.is_some()).count(), 1);
    assert!(
        requests.iter().all(|r| r.model == requests[0].model),
        "{requests:?}"
    );
}

/// Real Claude Code held to one turn (`--max-turns 1` through its preset)
/// on a sprint of two files: it writes the first, stops at its turn limit
/// and says so (`error_max_turns`); that is unfinished work, continued on
/// the same model with no attempt counted, and the continuation writes the
/// second.
#[test]
fn a_turn_limit_under_real_claude_code_is_continued_not_failed() {
    let plan = "# Two\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n\
        ## solo\n### Sprint 1: Two files\n- [ ] `solo/a.txt` exists\n- [ ] `solo/b.txt` exists\n";
    let model = ModelServer::start();
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", plan)],
        "tests/agents/scripted.sh",
        "",
    );
    let out = for_claude(&mut run_with(&repo, "claude", &claude_bin()), &model, 0)
        .args(["--max-turns", "1"])
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let status = repo.cmd(&["status", "--json"]).output().unwrap();
    let state: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let sprint = &state["units"][0]["sprints"][0];
    assert_eq!(sprint["status"], "COMPLETED", "{sprint}");
    assert_eq!(sprint["failures"], 0, "{sprint}");
    let history = sprint["history"].as_array().unwrap();
    assert_eq!(
        history.len(),
        2,
        "the attempt and its continuation: {sprint}"
    );
    assert_eq!(history[0]["tier"], history[1]["tier"], "{sprint}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one turn each: {requests:?}");
}

/// The same plan by real Gemini CLI, named by its preset (`--agent gemini`,
/// the tiers' ids given with `--model-*`), its API the scripted model as a
/// gateway (`GOOGLE_GEMINI_BASE_URL`, with the API-key sign-in chosen in
/// its settings, as a gateway needs): its `run_shell_command` tool does
/// each sprint's work; the tokens of its JSON report are each attempt's
/// (it prices nothing).
#[test]
fn real_gemini_cli_completes_a_plan_from_its_preset() {
    let bin = gemini_bin();
    let model = ModelServer::start();
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", PLAN)],
        "tests/agents/scripted.sh",
        "",
    );
    let mut cmd = run_with(&repo, "gemini", &bin);
    let home = repo.root.parent().unwrap().join("home");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::write(
        home.join(".gemini/settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    )
    .unwrap();
    let out = cmd
        .args([
            "--model-haiku",
            GEMINI_MODELS[0],
            "--model-sonnet",
            GEMINI_MODELS[1],
        ])
        .args(["--model-opus", GEMINI_MODELS[2]])
        .env("GOOGLE_GEMINI_BASE_URL", &model.url)
        .env("GEMINI_API_KEY", "scripted-model-key")
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let dollars = assert_plan_done(&repo, &model, GEMINI_MODELS);
    assert_eq!(dollars, 0.0, "Gemini CLI prices nothing");
    assert!(model.requests().iter().all(|r| r.api == Api::Gemini));
}

/// The model ids the Gemini test sends: the scripted model's own, as a
/// gateway would name its models.
const GEMINI_MODELS: [&str; 3] = ["scripted-lite", "scripted-flash", "scripted-pro"];

/// A `CODEX_HOME` whose configuration sends Codex to the scripted model
/// (on the Responses API, as a gateway would be configured), with no retry
/// of its own.
fn codex_home(under: &Path, model: &ModelServer) -> PathBuf {
    let home = under.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\n\
             base_url = \"{}/v1\"\nenv_key = \"SCRIPTED_MODEL_KEY\"\nwire_api = \"responses\"\n\
             request_max_retries = 0\nstream_max_retries = 0\n",
            model.url
        ),
    )
    .unwrap();
    home
}

/// `supervise run` with the `codex` preset, the tiers sent as [`CODEX_MODELS`].
fn codex_preset(repo: &Checkout, bin: &Path) -> std::process::Command {
    let mut cmd = run_with(repo, "codex", bin);
    cmd.args(
        CODEX_MODELS
            .iter()
            .zip(["--model-haiku", "--model-sonnet", "--model-opus"])
            .flat_map(|(id, flag)| [flag, id]),
    );
    cmd
}

/// The model ids the Codex tests send. Codex's catalog models (its
/// defaults for the tiers) take their tools as one JavaScript `exec` tool
/// the scripted model does not speak; for ids outside its catalog Codex
/// offers its function tools (`exec_command`), which it does.
const CODEX_MODELS: [&str; 3] = ["scripted-small", "scripted-medium", "scripted-large"];

/// The same plan by real Codex, named by its preset (`--agent codex`, the
/// tiers' ids given with `--model-*`): the preset runs `codex exec` with
/// its JSON events; Codex's `exec_command` tool does each sprint's work and
/// commits it; the tokens it reports are each attempt's (Codex prices
/// nothing, so no dollars are claimed).
#[test]
fn real_codex_completes_a_plan_from_its_preset() {
    let bin = codex_bin();
    let model = ModelServer::start();
    // Codex reports tokens only: the repository's prices make them dollars
    // (cached input at the input price, as the scripted model bills it).
    let prices: String = CODEX_MODELS
        .iter()
        .map(|m| format!("  {m}: {{input: 2, output: 8, cache_read: 2, cache_write: 2}}\n"))
        .collect();
    let repo = Checkout::new(
        &[
            ("EXECUTION_PLAN.md", PLAN),
            (".github/supervise.yml", &format!("prices:\n{prices}")),
        ],
        "tests/agents/scripted.sh",
        "",
    );
    let home = codex_home(repo.root.parent().unwrap(), &model);
    let out = codex_preset(&repo, &bin)
        .env("CODEX_HOME", &home)
        .env("SCRIPTED_MODEL_KEY", "sk-proj-scripted-model-key")
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let dollars = assert_plan_done(&repo, &model, CODEX_MODELS);
    assert_eq!(dollars, 0.0, "Codex prices nothing itself");
    assert!(model.requests().iter().all(|r| r.api == Api::Responses));
    // The scripted model's bill: every response it gave, at the prices.
    let (tokens_in, tokens_out) = fake_github::model::BILLED;
    let bill_micros = model.requests().len() as u64 * (tokens_in * 2 + tokens_out * 8);
    let out = repo.cmd(&["spend", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let usd = json["operations"][0]["usd"]["total"].as_f64().unwrap();
    assert_eq!((usd * 1e6).round() as u64, bill_micros, "{json}");
    let bill = supervise::engine::usage::Usd::from_micros(bill_micros);
    let status = support::text(&repo.cmd(&["status"]).output().unwrap());
    assert!(
        status.contains(&format!("Spend: {bill} · by unit:")),
        "{bill}: {status}"
    );
}

/// Real Codex from its preset when the supervisor holds the OpenAI key:
/// Codex reads its provider's address from its configuration only, and the
/// preset names the model proxy there, so every request reaches the model
/// through the proxy with the real key, and Codex itself held a token.
#[test]
fn real_codex_from_its_preset_reaches_its_model_through_the_proxy() {
    let bin = codex_bin();
    let model = ModelServer::start();
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", PLAN)],
        "tests/agents/scripted.sh",
        "",
    );
    // No configuration of its own: only the preset can send it anywhere.
    let home = repo.root.parent().unwrap().join("codex-home-empty");
    std::fs::create_dir_all(&home).unwrap();
    let out = codex_preset(&repo, &bin)
        .env("CODEX_HOME", &home)
        .env("OPENAI_API_KEY", "sk-proj-held-by-the-supervisor")
        .env("OPENAI_BASE_URL", format!("{}/v1", model.url))
        .output()
        .unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_plan_done(&repo, &model, CODEX_MODELS);
    let (keys, via) = (model.keys(), model.via());
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k == "sk-proj-held-by-the-supervisor"),
        "{keys:?}"
    );
    assert!(
        via.iter().all(|v| v == "1.1 supervise-model-proxy"),
        "{via:?}"
    );
}

/// The version of Claude Code scripts/test installed.
fn claude_version() -> String {
    installed_version("@anthropic-ai/claude-code")
}

/// The version of an npm package scripts/test installed.
fn installed_version(package: &str) -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/npm/node_modules")
        .join(package)
        .join("package.json");
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
    let model = ModelServer::start();
    let plan = PLAN;
    let s = Story::start(Setup::operation(plan, "")).await;
    s.use_claude_code(&claude, &claude_version(), &model.url);
    s.say("/supervise start").await;
    s.until("the final pull request", 240, |s| s.final_pull().is_some())
        .await;
    final_pull_holds_the_work(&s);
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
    let core = core_check_summary(&s);
    assert!(
        core.contains("used, as its CLI reported: $")
            && core.contains("2,000 tokens in and 400 out"),
        "{core}"
    );
    s.until("the spend reported", 30, |s| {
        s.status_comment().contains("Spend: $")
    })
    .await;
    // The agent's step held a token; the proxy the workflow ran it under
    // swapped in the key on the way to the model, and said it was there.
    let (keys, via) = (model.keys(), model.via());
    assert!(
        keys.len() == requests.len() && keys.iter().all(|k| k == "sk-ant-api03-scripted-model-key"),
        "{keys:?}"
    );
    assert!(
        via.iter().all(|v| v == "1.1 supervise-model-proxy"),
        "{via:?}"
    );
}

/// Every file of [`PLAN`] is on the final pull request's head, made by the
/// scripted model.
fn final_pull_holds_the_work(s: &Story) {
    let head = s.final_pull().unwrap().head;
    let bare = s.tmp.path().join("github/repos/acme/shop.git");
    for f in FILES {
        let shown = support::git(&bare, &["show", &format!("{head}:{f}")]);
        assert_eq!(shown.trim(), "made by the scripted model", "{f}");
    }
}

/// The summary of core Sprint 1's successful check run: what the service
/// took from the results record the runner made.
fn core_check_summary(s: &Story) -> String {
    let checks = s.fake.check_runs(story::REPO);
    checks
        .into_iter()
        .find(|c| {
            c.name == "supervise: core Sprint 1" && c.conclusion.as_deref() == Some("success")
        })
        .expect("core Sprint 1's check run")
        .summary
}

/// An agent CLI other than Claude Code as the GitHub stories run it through
/// the shipped workflow (see `Story::use_agent_cli`).
struct OnGitHub {
    /// The variable SUPERVISE_AGENT's value, the settings' `agent:` and the
    /// program's name.
    kind: &'static str,
    package: &'static str,
    /// The repository variable naming the CLI's gateway, and its value.
    gateway: (&'static str, String),
    /// The repository secret holding the CLI's key.
    secret: (&'static str, &'static str),
    api: Api,
    models: [&'static str; 3],
}

/// [`PLAN`] on the fake GitHub by `cli`, its model `model`: every sprint's
/// file reaches the final pull request, made by the CLI's own tool calls
/// on the tiers' ids, and each attempt's check run says the tokens the CLI
/// reported.
async fn completes_the_plan_on_github(cli: OnGitHub, model: &ModelServer) {
    let program = installed(cli.kind, cli.package).join(cli.kind);
    let s = Story::start(Setup::operation(PLAN, "")).await;
    s.use_agent_cli(
        cli.kind,
        cli.package,
        &program,
        &installed_version(cli.package),
        &[(cli.gateway.0, cli.gateway.1.clone())],
        &[cli.secret],
        cli.models,
    );
    s.say("/supervise start").await;
    s.until("the final pull request", 240, |s| s.final_pull().is_some())
        .await;
    final_pull_holds_the_work(&s);
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4 * 2 + 1,
        "a tool call and an answer per sprint, and the misstep: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.api == cli.api && cli.models.contains(&r.model.as_str())),
        "{requests:?}"
    );
    let core = core_check_summary(&s);
    assert!(core.contains("2,000 tokens in and 400 out"), "{core}");
    // Every agent step runs its CLI in the fence, behind the model proxy:
    // the key reached the model from it, never from the agent.
    let via = model.via();
    assert!(
        !via.is_empty() && via.iter().all(|v| v == "1.1 supervise-model-proxy"),
        "{via:?}"
    );
}

/// The same plan on GitHub by real Codex: the shipped workflow's Codex step
/// (the variable SUPERVISE_AGENT says codex) installs the pinned version,
/// points Codex at the repository's Responses gateway (here the scripted
/// model) and runs it, with the settings' `agent: codex` and the tiers'
/// ids from `models:`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_codex_completes_a_plan_on_github_through_the_shipped_workflow() {
    let model = ModelServer::start();
    let cli = OnGitHub {
        kind: "codex",
        package: "@openai/codex",
        gateway: ("SUPERVISE_OPENAI_BASE_URL", format!("{}/v1", model.url)),
        secret: ("OPENAI_API_KEY", "sk-proj-scripted-model-key"),
        api: Api::Responses,
        models: CODEX_MODELS,
    };
    completes_the_plan_on_github(cli, &model).await;
}

/// The plan on GitHub by real Gemini CLI: the shipped workflow's Gemini step
/// (SUPERVISE_AGENT says gemini) installs the pinned version, signs in with
/// the API key for the repository's gateway (here the scripted model) and
/// runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_gemini_cli_completes_a_plan_on_github_through_the_shipped_workflow() {
    let model = ModelServer::start();
    let cli = OnGitHub {
        kind: "gemini",
        package: "@google/gemini-cli",
        gateway: ("SUPERVISE_GEMINI_BASE_URL", model.url.clone()),
        secret: ("GEMINI_API_KEY", "scripted-model-key"),
        api: Api::Gemini,
        models: GEMINI_MODELS,
    };
    completes_the_plan_on_github(cli, &model).await;
}
