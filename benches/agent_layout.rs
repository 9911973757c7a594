//! What the trust boundary's job layout costs an attempt, measured where it can
//! be: the fake GitHub runs the shipped agent workflow from its YAML (three
//! jobs — agent, verify, publish — each a fresh checkout on a "runner" of its
//! own, each installing the release, the work handed on as a bundle) against the one-job layout it replaced (one
//! checkout: the agent, then `supervise verify --record` and a push, all
//! holding the write credential). The same scripted agent does the same
//! sprint in both. A hosted runner's start (the larger cost on GitHub: two
//! more per attempt) cannot be measured here and is not in these figures.
//!
//! Run: `cargo bench --bench agent_layout`. `BENCH_ATTEMPTS=20` per layout.

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "../tests/support/mod.rs"]
mod support;

const REPO: &str = "acme/shop";
const PLAN: &str = "# One\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n\
## solo\n### Sprint 1: Solo\n- [ ] `solo/solo-sprint-1.txt` exists\n";

/// The median and the slowest of `xs`.
fn summary(mut xs: Vec<Duration>) -> (Duration, Duration) {
    xs.sort();
    (xs[xs.len() / 2], *xs.last().unwrap_or(&Duration::ZERO))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let attempts: usize = std::env::var("BENCH_ATTEMPTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let fake = fake_github::start(fake_github::Config {
        webhook_url: None,
        webhook_secret: "s".into(),
        app_id: 42,
        app_public_key_pem: None,
        installation_id: 7,
        data_dir: None,
    })
    .await;
    fake.ensure_repo(REPO);
    fake.add_file(REPO, "EXECUTION_PLAN.md", PLAN);
    fake.add_token("bench-token");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let agent = root.join("tests/agents/scripted.sh").display().to_string();
    let bin = env!("CARGO_BIN_EXE_supervise");
    let stand_in = std::env::temp_dir().join(format!("agent-layout-{}", std::process::id()));
    let claude = fake_github::workflow::scripted_claude(&stand_in, &format!("sh {agent}"), &[])
        .expect("the agent's command line");
    fake.set_workflow_yaml(
        REPO,
        "three-jobs.yml",
        support::agent_workflow(&support::shipped_agent_workflow(), &claude, &[]),
    );
    // The layout before: one job, one checkout, the credential throughout.
    let one_job = format!(
        "set -e; git checkout -q -B \"$INPUT_BRANCH\"; \
         SUPERVISE_UNIT=solo SUPERVISE_SPRINT=1 SUPERVISE_UNIT_DIR=solo SUPERVISE_DISPATCH_ID=\"$INPUT_DISPATCH_ID\" \
         SUPERVISE_MODEL=m sh {agent} > \"$RUNNER_TEMP/out\" 2>&1; \
         {bin} verify --plan EXECUTION_PLAN.md --unit solo --sprint 1 --record \"$INPUT_DISPATCH_ID\" \
         --agent-exit 0 --agent-output \"$RUNNER_TEMP/out\" > /dev/null"
    );
    fake.set_workflow(REPO, "one-job.yml", &one_job, &[]);

    let github = supervise::github::GitHub::with_token(
        &fake.url(),
        &secrecy::SecretString::from("bench-token".to_string()),
    )
    .expect("a client");
    let repo = supervise::github::repo::Repo {
        gh: &github,
        installation: 0,
        name: REPO,
    };
    let mut report = Vec::new();
    for workflow in ["one-job.yml", "three-jobs.yml"] {
        let mut took = Vec::new();
        for i in 0..attempts {
            let id = format!("bench/{workflow}/solo/1/{i}");
            let branch = format!("bench/{}/{i}", workflow.trim_end_matches(".yml"));
            let inputs = serde_json::json!({
                "dispatch_id": id, "plan": "EXECUTION_PLAN.md", "unit": "solo",
                "directory": "solo", "sprint": "1", "sprint_name": "Solo",
                "attempt": "1", "model": "m", "max_turns": "5",
                "prompt": "Do the sprint.", "branch": branch,
            });
            let start = Instant::now();
            let (run, _) = repo
                .dispatch(workflow, "main", inputs)
                .await
                .expect("dispatched")
                .expect("the run's details");
            loop {
                let done = fake
                    .runs(REPO)
                    .iter()
                    .any(|r| r.id == run && r.status == "completed");
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            took.push(start.elapsed());
            let ok = fake
                .runs(REPO)
                .iter()
                .any(|r| r.id == run && r.conclusion.as_deref() == Some("success"));
            assert!(ok, "{workflow} attempt {i} did not succeed");
        }
        report.push((workflow, summary(took)));
    }
    println!("attempt wall time on the fake GitHub, {attempts} attempts each:");
    for (workflow, (p50, max)) in &report {
        println!("  {workflow:<15} p50 {p50:>8.0?}  max {max:>8.0?}");
    }
    let added = report[1].1 .0.saturating_sub(report[0].1 .0);
    println!(
        "  the three-job layout adds {added:.0?} at the median, and two runner starts on GitHub"
    );
}
