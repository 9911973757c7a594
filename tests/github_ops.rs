//! Whole operations on GitHub, end to end: the real `supervise serve` binary
//! against the fake GitHub over HTTP, real bare repositories, and the agent
//! workflow "run" by the fake as a real process (tests/agents/gh-workflow.sh
//! around the scripted agent). Each test reads as a story: seed a repository,
//! say `/supervise start`, let the agents run, read what GitHub shows.

mod support;

use fake_github::{Config, FakeGitHub};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{free_port, spawn_serve, test_app_public_key, wait_listening, SECRET};

const REPO: &str = "acme/shop";
const ISSUE_TITLE: &str = "Ship the shop";

/// Three units in two layers: `web` needs `api` and `docs`.
const PLAN: &str = "# Shop\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| api | api | 0 |\n| docs | docs | 0 |\n| web | web | 1 |\n\n\
## api\n### Sprint 1: Implement the API types\n- [ ] `api-sprint-1.txt` exists\n### Sprint 2: Implement the handlers\n- [ ] `api-sprint-2.txt` exists\n\
## docs\n### Sprint 1: Write the guide\n- [ ] `docs-sprint-1.txt` exists\n\
## web\n### Sprint 1: Build the page\n- [ ] `web-sprint-1.txt` exists\n";

const SETTINGS: &str = "max_parallel: 2\nbuild_gate: repository CI\nmodels:\n  haiku: claude-haiku\n  sonnet: claude-sonnet\n  opus: claude-opus\n";

struct Story {
    fake: Arc<FakeGitHub>,
    serve: Option<Child>,
    port: u16,
    db_url: String,
    tmp: tempfile::TempDir,
    issue: i64,
}

impl Story {
    /// A repository holding the plan and settings, with CI and the agent workflow.
    async fn begin(behaviour: &str) -> Story {
        let tmp = tempfile::tempdir().unwrap();
        let port = free_port();
        let fake = fake_github::start(Config {
            webhook_url: Some(format!("http://127.0.0.1:{port}/webhook")),
            webhook_secret: SECRET.into(),
            app_id: 42,
            app_public_key_pem: Some(test_app_public_key()),
            installation_id: 7,
            data_dir: Some(tmp.path().join("github")),
        })
        .await;
        fake.add_user("mia", "maintain", "User");
        fake.add_file(REPO, "EXECUTION_PLAN.md", PLAN);
        fake.add_file(REPO, ".github/supervise.yml", SETTINGS);
        fake.set_ci(REPO, "true");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let behaviour_file = tmp.path().join("behaviour");
        std::fs::write(&behaviour_file, behaviour).unwrap();
        let env = [
            ("AGENT", manifest.join("tests/agents/scripted.sh")),
            ("AGENT_LOG", tmp.path().join("agent.log")),
            ("AGENT_BEHAVIOUR", behaviour_file),
            ("SUPERVISE_BIN", PathBuf::from(env!("CARGO_BIN_EXE_supervise"))),
        ];
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        fake.set_workflow(
            REPO,
            "supervise-agent.yml",
            &format!("sh {}", manifest.join("tests/agents/gh-workflow.sh").display()),
            &env,
        );
        let issue = fake.open_issue(REPO, ISSUE_TITLE);
        let db_url = format!("sqlite://{}?mode=rwc", tmp.path().join("supervise.db").display());
        let mut story = Story {
            fake,
            serve: None,
            port,
            db_url,
            tmp,
            issue,
        };
        story.serve_up().await;
        story
    }

    async fn serve_up(&mut self) {
        let env = [
            ("SUPERVISE_TICK_MS", "150".to_string()),
            ("SUPERVISE_RECONCILE_SECS", "1".to_string()),
            ("SUPERVISE_STATUS_INTERVAL_MS", "300".to_string()),
            ("SUPERVISE_CI_GRACE_SECS", "0".to_string()),
            ("SUPERVISE_LEASE_SECS", "2".to_string()),
        ];
        self.serve = Some(spawn_serve(self.port, &self.fake.url(), &self.db_url, &env));
        wait_listening(self.port).await;
    }

    fn kill_serve(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn set_behaviour(&self, behaviour: &str) {
        std::fs::write(self.tmp.path().join("behaviour"), behaviour).unwrap();
    }

    async fn say(&self, body: &str) {
        self.fake.comment(REPO, self.issue, "mia", body, false).await;
    }

    fn bot_comments(&self, issue: i64) -> Vec<String> {
        self.fake
            .comments(REPO, issue)
            .into_iter()
            .filter(|c| c.user == "supervise[bot]")
            .map(|c| c.body)
            .collect()
    }

    fn status_comment(&self) -> String {
        let found: Vec<String> = self
            .bot_comments(self.issue)
            .into_iter()
            .filter(|b| b.contains("<!-- supervise:status "))
            .collect();
        assert!(found.len() <= 1, "one sticky status comment, not {}", found.len());
        found.into_iter().next().unwrap_or_default()
    }

    /// Waits until `done` holds, failing with what GitHub shows if it never does.
    async fn until(&self, what: &str, secs: u64, done: impl Fn(&Story) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "{what}: not after {secs} s.\nstatus comment:\n{}\ncomments: {:#?}\nruns: {:#?}",
                self.status_comment(),
                self.bot_comments(self.issue),
                self.fake
                    .runs(REPO)
                    .iter()
                    .map(|r| (&r.display_title, &r.status, &r.conclusion))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn final_pull(&self) -> Option<fake_github::Pull> {
        self.fake
            .pulls(REPO)
            .into_iter()
            .find(|p| p.base == "main" && p.head.ends_with("/integration"))
    }

    fn agent_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.tmp.path().join("agent.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Dispatch ids per run: each must appear once.
    fn runs_per_dispatch(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in self.fake.runs(REPO) {
            *m.entry(r.display_title.clone()).or_insert(0) += 1;
        }
        m
    }

    fn assert_no_double_dispatch(&self) {
        let twice: Vec<_> = self
            .runs_per_dispatch()
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(twice.is_empty(), "dispatched twice: {twice:?}");
        let mut seen = std::collections::HashSet::new();
        for line in self.agent_log() {
            assert!(seen.insert(line.clone()), "an attempt ran twice: {line}");
        }
    }
}

impl Drop for Story {
    fn drop(&mut self) {
        self.kill_serve();
    }
}

/// Masks what changes from run to run: times, durations, the op id's suffix.
fn redact(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut l = line.to_string();
        if let Some(i) = l.find("## Supervisor Status — ") {
            l.truncate(i + "## Supervisor Status — ".len());
            l.push_str("[time]");
        }
        if let Some(i) = l.find("shop-") {
            let end = l[i + 5..]
                .find(|c: char| !c.is_ascii_hexdigit())
                .map_or(l.len(), |e| i + 5 + e);
            l.replace_range(i..end, "shop-[op]");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_units_in_two_layers_run_to_the_final_pull_request() {
    let s = Story::begin("").await;
    s.say("Let's build it.\n\n/supervise start").await;
    s.until("the final pull request", 180, |s| s.final_pull().is_some())
        .await;
    s.until("the status comment shows completion", 30, |s| {
        s.status_comment().contains("status: completed")
    })
    .await;

    // The reply and the sticky status comment.
    let comments = s.bot_comments(s.issue);
    assert!(
        comments.iter().any(|c| c.starts_with("Started operation `shop-")),
        "{comments:?}"
    );
    insta::assert_snapshot!("github_status_completed", redact(&s.status_comment()));

    // One sub-issue per unit, linked and closed.
    let op_issue = s.fake.issues(REPO).into_iter().find(|i| i.number == s.issue).unwrap();
    let units: Vec<_> = s
        .fake
        .issues(REPO)
        .into_iter()
        .filter(|i| i.labels.iter().any(|l| l.starts_with("supervise:shop-")))
        .collect();
    assert_eq!(units.len(), 3, "{units:#?}");
    for u in &units {
        assert!(op_issue.sub_issues.contains(&u.id), "{} is a sub-issue", u.title);
        assert_eq!(u.state, "closed", "{} closed when COMPLETED", u.title);
    }

    // A merged pull request per sprint, into the integration branch.
    let pulls = s.fake.pulls(REPO);
    let sprint_pulls: Vec<_> = pulls.iter().filter(|p| p.head.contains("/sprint-")).collect();
    assert_eq!(sprint_pulls.len(), 4, "{pulls:#?}");
    for p in &sprint_pulls {
        assert!(p.merged, "{} merged", p.title);
        assert!(p.base.ends_with("/integration"));
        assert!(p.body.contains("### Exit criteria\n- [ ] "), "exit criteria as a checklist: {}", p.body);
    }
    let api1 = sprint_pulls.iter().find(|p| p.head.ends_with("/api/sprint-1")).unwrap();
    assert!(
        s.fake
            .file(REPO, &api1.head, ".supervise/prompts/api-sprint-1.md")
            .is_some_and(|p| p.contains("Implement the API types")),
        "the prompt is committed on the sprint branch"
    );

    // A check run per sprint, green, with the criteria table.
    let checks: Vec<_> = s
        .fake
        .check_runs(REPO)
        .into_iter()
        .filter(|c| c.app == "supervise")
        .collect();
    assert_eq!(checks.len(), 4, "{checks:#?}");
    for c in &checks {
        assert_eq!(c.conclusion.as_deref(), Some("success"), "{c:#?}");
        assert!(c.summary.contains("✓ passed"), "{}", c.summary);
    }

    // The final report: comment, files on the integration branch, pull request.
    let fin = s.final_pull().unwrap();
    assert_eq!(fin.state, "open");
    assert!(
        comments.iter().any(|c| c.contains("### Final Verification Results")),
        "the final verification is commented: {comments:#?}"
    );
    let complete = s.fake.file(REPO, &fin.head, "COMPLETE_SHOP.md");
    assert!(complete.is_some(), "COMPLETE_SHOP.md on {}", fin.head);
    assert!(s.fake.file(REPO, &fin.head, "SUPERVISOR_STATE.md").is_some());
    for f in ["api/api-sprint-1.txt", "api/api-sprint-2.txt", "docs/docs-sprint-1.txt", "web/web-sprint-1.txt"] {
        assert!(s.fake.file(REPO, &fin.head, f).is_some(), "{f} reached the integration branch");
    }
    s.assert_no_double_dispatch();
    assert_eq!(s.fake.runs(REPO).len(), 4, "one run per sprint");

    // The GitHub requests the operation spent, per sprint (for the README).
    let log = s.fake.request_log();
    let calls = log
        .iter()
        .filter(|(_, e, _)| !e.contains("access_tokens"))
        .count();
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, e, _) in &log {
        *per.entry(e.as_str()).or_default() += 1;
    }
    eprintln!("GitHub requests: {calls} for 4 sprints = {:.1} per sprint; by endpoint: {per:#?}", calls as f64 / 4.0);
    assert!(calls <= 4 * 40, "requests per sprint stay a small constant: {calls}");
}
