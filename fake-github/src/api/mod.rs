//! The repository side of the fake: git refs, contents, compare, pull requests,
//! merges, reviews, check runs, issues, labels, sub-issues and Actions workflow
//! runs. Git data lives in real bare repositories (see `git.rs`); the rest in
//! memory. A dispatched workflow "runs" a configured local command in a checkout
//! of the ref, pushes what it committed, and delivers `workflow_run` webhooks.

use crate::by_repo::{ByRepo, InRepo};
use crate::git::Repo;
use crate::{base64_encode, error, gate, FakeGitHub, Shared};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Issue {
    pub id: i64,
    pub number: i64,
    pub repo: String,
    pub title: String,
    pub body: String,
    pub state: String,
    pub labels: Vec<String>,
    /// Who opened it.
    pub user: String,
    /// Ids (not numbers) of sub-issues, as GitHub's sub-issues API takes them.
    pub sub_issues: Vec<i64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Pull {
    pub number: i64,
    pub repo: String,
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: String,
    pub state: String,
    pub merged: bool,
    pub merge_sha: Option<String>,
    pub merged_at: Option<String>,
    /// The head at which `mergeable` was last asked for: GitHub answers `null`
    /// the first time it is asked at a new head (it computes it in the
    /// background), and the value after.
    pub mergeable_asked_at: Option<String>,
}

/// A review of a pull request, as GitHub keeps it.
#[derive(Debug, Clone)]
pub struct Review {
    pub id: i64,
    pub repo: String,
    pub pull: i64,
    pub user: String,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED` or `DISMISSED`.
    pub state: String,
    pub body: String,
    /// The pull request's head when it was submitted.
    pub commit_id: String,
    pub submitted_at: String,
}

/// A comment on one line of a pull request's diff, made in a review.
#[derive(Debug, Clone)]
pub struct ReviewComment {
    pub id: i64,
    pub review: i64,
    pub user: String,
    pub path: String,
    pub line: u32,
    pub diff_hunk: String,
    pub body: String,
    pub commit_id: String,
    pub created_at: String,
}

/// A comment a test's reviewer writes on a line: path, line, words.
pub type LineComment<'a> = (&'a str, u32, &'a str);

/// Which of GitHub's pull-request shapes to answer with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PullShape {
    /// `pull-request-simple`, in lists: no `merged`, no `mergeable`.
    Simple,
    /// `pull-request`: `mergeable` is null until computed.
    Full { mergeable_known: bool },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckRun {
    pub id: i64,
    pub repo: String,
    pub head_sha: String,
    pub name: String,
    /// Who made it: `supervise` (the App, id [`crate::Config::app_id`]) for
    /// what an installation token made, `github-actions` (id
    /// [`GITHUB_ACTIONS_APP_ID`]) for what a workflow's `GITHUB_TOKEN` made
    /// and for the fake's CI.
    pub app: String,
    pub app_id: u64,
    pub status: String,
    pub conclusion: Option<String>,
    pub title: String,
    pub summary: String,
    /// `output.text`, the details.
    pub text: String,
    /// Every annotation sent with it, as sent.
    pub annotations: Vec<Value>,
    pub external_id: String,
    /// Where a person reads more: for a GitHub Actions job, its page,
    /// `…/actions/runs/{run}/job/{job}`.
    pub details_url: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    pub id: i64,
    pub repo: String,
    pub workflow: String,
    pub display_title: String,
    pub head_branch: String,
    pub head_sha: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub inputs: Value,
    pub created_at: String,
    /// Seconds since the fake started when the dispatch made it (the clock
    /// of `request_log` and `run_deliveries`, finer than `created_at`).
    #[serde(skip)]
    pub created: f64,
    #[serde(skip)]
    pgid: Option<u32>,
    pub cancel_requested: bool,
}

/// What a simulated run leaves when it ends `success`, as an agent and the
/// workflow's trusted job would: the agent's commit on `branch` (on top of the
/// branch, or of the run's commit when the branch is new), then a commit of
/// the record on it with check runs on that head, made as GitHub Actions.
pub struct SimulatedWork {
    pub branch: String,
    pub agent_files: Vec<(String, String)>,
    pub agent_message: String,
    /// Given the agent's commit: the record's commit and check runs.
    pub record: Box<dyn FnOnce(&str) -> SimulatedRecord + Send>,
}

/// The trusted job's part of a [`SimulatedWork`].
pub struct SimulatedRecord {
    pub files: Vec<(String, String)>,
    pub message: String,
    pub checks: Vec<SimulatedCheck>,
}

/// A completed check run a simulated run leaves on the head it published.
pub struct SimulatedCheck {
    pub name: String,
    pub external_id: String,
    pub summary: String,
    pub conclusion: String,
}

/// What every simulated run of the fake leaves, from the run (its inputs,
/// its commit); `None` leaves nothing.
pub type SimulatedPublisher = Arc<dyn Fn(&Run) -> Option<SimulatedWork> + Send + Sync>;

/// GitHub Actions' App id on github.com: what a workflow token makes names it.
pub const GITHUB_ACTIONS_APP_ID: u64 = 15368;

/// A workflow: one-command jobs run one after another, each on a runner of
/// its own, pushing what it committed (see [`FakeGitHub::set_workflow`]); or
/// its YAML, run as GitHub runs it (see [`FakeGitHub::set_workflow_yaml`]).
#[derive(Clone)]
pub(crate) struct Workflow {
    jobs: Vec<Job>,
    /// No jobs at all: each run is in progress for a time drawn from this
    /// range (milliseconds) and then concludes `success` — for benchmarks
    /// that need thousands of runs and none of their work.
    simulated: Option<(u64, u64)>,
    /// Read from its YAML: jobs, steps and conditions as GitHub runs them
    /// (see [`crate::workflow`]); `jobs` is then empty.
    planned: Option<Arc<crate::workflow::Planned>>,
}

/// One job of a workflow the fake runs as a command: a checkout holding the
/// write credential, the command, and a push of what it committed.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    /// Run through `sh -c` in the job's checkout.
    pub command: String,
    pub env: Vec<(String, String)>,
}

#[derive(Default)]
pub(crate) struct ApiState {
    repos: HashMap<String, Repo>,
    numbers: HashMap<String, i64>,
    next_id: i64,
    pub(crate) issues: ByRepo<Issue>,
    /// Each sub-issue's parent (repository, number): an issue has at most
    /// one, and the check is made on every sub-issue added.
    pub(crate) parents: HashMap<i64, (String, i64)>,
    pub(crate) pulls: ByRepo<Pull>,
    pub(crate) reviews: Vec<Review>,
    pub(crate) review_comments: Vec<ReviewComment>,
    /// Who is asked to review each pull request, by (repository, number).
    pub(crate) requested: HashMap<(String, i64), Vec<String>>,
    pub(crate) check_runs: ByRepo<CheckRun>,
    pub(crate) runs: ByRepo<Run>,
    /// Simulated runs created before this time (the fake's clock) end now.
    pub(crate) simulated_cutoff: f64,
    /// Over how many seconds from the cutoff those runs end.
    pub(crate) simulated_spread: f64,
    /// What simulated runs leave when they succeed (nothing without it).
    pub(crate) simulated_publisher: Option<SimulatedPublisher>,
    workflows: HashMap<(String, String), Workflow>,
    /// The inputs a workflow file declares, when a test says: a dispatch
    /// with any other is refused, as GitHub refuses it.
    declared_inputs: HashMap<(String, String), Vec<String>>,
    ci: HashMap<String, String>,
    /// The log of each job the fake's CI ran, by job id (= its check run's id).
    pub(crate) job_logs: HashMap<i64, String>,
}

impl ApiState {
    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn issue_mut(&mut self, repo: &str, number: i64) -> Option<&mut Issue> {
        self.issues.find_mut(repo, |i| i.number == number)
    }

    fn number(&mut self, repo: &str) -> i64 {
        let n = self.numbers.entry(repo.to_string()).or_insert(0);
        *n += 1;
        *n
    }
}

macro_rules! in_repo_impl {
    ($($t:ty),*) => { $(impl InRepo for $t { fn repo(&self) -> &str { &self.repo } })* };
}
in_repo_impl!(Issue, Pull, CheckRun, Run);

fn in_repo<T: InRepo + Clone>(items: &ByRepo<T>, repo: &str) -> Vec<T> {
    items.in_repo(repo).cloned().collect()
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl FakeGitHub {
    pub(crate) fn repo(&self, repo: &str) -> Option<Repo> {
        self.inner.lock().api.repos.get(repo).cloned()
    }

    /// Creates the repository (bare, branch `main`, one commit) if it is missing.
    pub fn ensure_repo(&self, repo: &str) {
        if self.repo(repo).is_some() {
            return;
        }
        let path = self.data_dir.join("repos").join(format!("{repo}.git"));
        let r = Repo::create(path, "main", &[("README.md", "# test repository\n")])
            .expect("creating a bare repository");
        self.inner.lock().api.repos.insert(repo.to_string(), r);
    }

    /// Opens an issue as a person; returns its number.
    pub fn open_issue(&self, repo: &str, title: &str) -> i64 {
        self.open_issue_with(repo, title, "")
    }

    /// Opens an issue with a description; returns its number.
    pub fn open_issue_with(&self, repo: &str, title: &str, body: &str) -> i64 {
        self.open_issue_by(repo, title, body, "mia")
    }

    /// Opens an issue as `login`; returns its number.
    pub fn open_issue_by(&self, repo: &str, title: &str, body: &str, login: &str) -> i64 {
        let mut s = self.inner.lock();
        let (id, number) = (s.api.id(), s.api.number(repo));
        s.api.issues.push(Issue {
            id,
            number,
            repo: repo.into(),
            title: title.into(),
            body: body.into(),
            state: "open".into(),
            labels: vec![],
            user: login.into(),
            sub_issues: vec![],
        });
        number
    }

    /// Adds `label` to issue `number`, as anyone who may triage can.
    pub fn label_issue(&self, repo: &str, number: i64, label: &str) {
        let mut s = self.inner.lock();
        if let Some(i) = s
            .api
            .issues
            .iter_mut()
            .find(|i| i.repo == repo && i.number == number)
        {
            i.labels.push(label.into());
        }
    }

    /// The Actions workflow `file` runs `command` (through `sh -c`) in a checkout
    /// of the dispatched ref, with `INPUT_<NAME>` for each input and `env` added.
    /// Its checkout holds the write credential, and what it committed is
    /// pushed to its `branch` input (or the dispatched branch) when it ends.
    pub fn set_workflow(&self, repo: &str, file: &str, command: &str, env: &[(&str, &str)]) {
        let job = Job {
            name: "run".into(),
            command: command.into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        self.inner.lock().api.workflows.insert(
            (repo.into(), file.into()),
            Workflow {
                jobs: vec![job],
                simulated: None,
                planned: None,
            },
        );
    }

    /// The Actions workflow `file` is run from its YAML, as GitHub runs it,
    /// with what the repository gives it (`planned`'s secrets, variables and
    /// what the runner's stand-ins serve): see [`crate::workflow`].
    pub fn set_workflow_yaml(&self, repo: &str, file: &str, planned: crate::workflow::Planned) {
        self.inner.lock().api.workflows.insert(
            (repo.into(), file.into()),
            Workflow {
                jobs: Vec::new(),
                simulated: None,
                planned: Some(Arc::new(planned)),
            },
        );
    }

    /// Every simulated run in progress now concludes within `over` from now,
    /// each at a moment drawn from its id (at once for a zero `over`); those
    /// dispatched later keep their drawn durations.
    pub fn end_simulated_runs(&self, over: std::time::Duration) {
        let now = self.now();
        let mut s = self.inner.lock();
        s.api.simulated_cutoff = now;
        s.api.simulated_spread = over.as_secs_f64();
    }

    /// Runs of `file` do no work: each is in progress for `min_ms..=max_ms`
    /// (drawn per run) and concludes `success`, unless cancelled first. No
    /// checkout, no process: a benchmark can keep thousands in flight.
    pub fn set_simulated_workflow(&self, repo: &str, file: &str, min_ms: u64, max_ms: u64) {
        self.inner.lock().api.workflows.insert(
            (repo.into(), file.into()),
            Workflow {
                jobs: Vec::new(),
                simulated: Some((min_ms, max_ms.max(min_ms))),
                planned: None,
            },
        );
    }

    /// What a simulated run leaves when it ends `success` (see
    /// [`SimulatedWork`]); without it, nothing, so the run's sprint is a
    /// failed attempt.
    pub fn set_simulated_publisher(&self, publisher: SimulatedPublisher) {
        self.inner.lock().api.simulated_publisher = Some(publisher);
    }

    /// The inputs `file` declares under `workflow_dispatch` (an older copy of
    /// a workflow, say): dispatches with others are answered 422.
    pub fn declare_inputs(&self, repo: &str, file: &str, inputs: &[&str]) {
        self.inner.lock().api.declared_inputs.insert(
            (repo.into(), file.into()),
            inputs.iter().map(|s| s.to_string()).collect(),
        );
    }

    /// The repository's CI: `command` runs on every new branch head and reports a
    /// `ci` check run.
    pub fn set_ci(&self, repo: &str, command: &str) {
        self.inner.lock().api.ci.insert(repo.into(), command.into());
    }

    /// `login` approves pull request `pr`: listed in its reviews, and told
    /// to the App as GitHub tells it (`pull_request_review`, `submitted`).
    pub fn approve(self: &Arc<Self>, repo: &str, pr: i64, login: &str) {
        self.review(repo, pr, login, "APPROVED", "", &[]);
    }

    /// `login` asks for changes on pull request `pr`, with a body and
    /// comments on lines of its diff: kept as GitHub keeps them (each
    /// comment with the hunk it was written against), and told to the App
    /// as GitHub tells it — `pull_request_review_comment` for each comment,
    /// then `pull_request_review`. The review's id.
    pub fn request_changes(
        self: &Arc<Self>,
        repo: &str,
        pr: i64,
        login: &str,
        body: &str,
        comments: &[LineComment<'_>],
    ) -> i64 {
        self.review(repo, pr, login, "CHANGES_REQUESTED", body, comments)
    }

    /// Submits a review (see [`Self::request_changes`]); its id, or 0 for
    /// a pull request the fake does not have.
    pub fn review(
        self: &Arc<Self>,
        repo: &str,
        pr: i64,
        login: &str,
        state: &str,
        body: &str,
        comments: &[LineComment<'_>],
    ) -> i64 {
        let Some(pull) = self.pulls(repo).into_iter().find(|p| p.number == pr) else {
            return 0;
        };
        let r = self.repo(repo);
        let sha = self.branch(repo, &pull.head).unwrap_or_default();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let (review, said) = {
            let mut s = self.inner.lock();
            let id = s.api.id();
            let review = Review {
                id,
                repo: repo.into(),
                pull: pr,
                user: login.into(),
                state: state.into(),
                body: body.into(),
                commit_id: sha.clone(),
                submitted_at: now.clone(),
            };
            s.api.reviews.push(review.clone());
            let mut said = Vec::new();
            for (path, line, text) in comments {
                let hunk = r
                    .as_ref()
                    .map(|r| r.diff_hunk(&pull.base, &pull.head, path, *line))
                    .unwrap_or_default();
                let c = ReviewComment {
                    id: s.api.id(),
                    review: id,
                    user: login.into(),
                    path: (*path).into(),
                    line: *line,
                    diff_hunk: hunk,
                    body: (*text).into(),
                    commit_id: sha.clone(),
                    created_at: now.clone(),
                };
                s.api.review_comments.push(c.clone());
                said.push(c);
            }
            // A review answers its request, as on GitHub.
            if let Some(asked) = s.api.requested.get_mut(&(repo.to_string(), pr)) {
                asked.retain(|l| l != login);
            }
            (review, said)
        };
        let base = self.pull_payload(repo, &pull, &sha);
        let mut deliveries = Vec::new();
        for c in &said {
            let mut p = base.clone();
            p["action"] = json!("created");
            p["comment"] = review_comment_json(c, repo, pr);
            deliveries.push(("pull_request_review_comment", p));
        }
        let mut p = base;
        p["action"] = json!("submitted");
        p["review"] = review_json(&review);
        deliveries.push(("pull_request_review", p));
        let fake = self.clone();
        tokio::spawn(async move {
            for (event, payload) in deliveries {
                fake.deliver(event, &payload).await;
            }
        });
        review.id
    }

    /// A review is dismissed (by someone who may, or a push with the
    /// repository's stale-review rule): it no longer counts, and the App is
    /// told (`pull_request_review`, `dismissed`).
    pub fn dismiss(self: &Arc<Self>, repo: &str, review: i64) {
        let found = {
            let mut s = self.inner.lock();
            let r = s
                .api
                .reviews
                .iter_mut()
                .find(|r| r.repo == repo && r.id == review);
            r.map(|r| {
                r.state = "DISMISSED".into();
                r.clone()
            })
        };
        let Some(r) = found else { return };
        let Some(pull) = self.pulls(repo).into_iter().find(|p| p.number == r.pull) else {
            return;
        };
        let sha = self.branch(repo, &pull.head).unwrap_or_default();
        let mut p = self.pull_payload(repo, &pull, &sha);
        p["action"] = json!("dismissed");
        p["review"] = review_json(&r);
        let fake = self.clone();
        tokio::spawn(async move {
            fake.deliver("pull_request_review", &p).await;
        });
    }

    /// Who pull request `pr` waits on for a review (asked and not yet
    /// reviewed since).
    pub fn requested_reviewers(&self, repo: &str, pr: i64) -> Vec<String> {
        let s = self.inner.lock();
        s.api
            .requested
            .get(&(repo.to_string(), pr))
            .cloned()
            .unwrap_or_default()
    }

    /// The parts of a pull request webhook every review event carries.
    fn pull_payload(&self, repo: &str, pull: &Pull, sha: &str) -> Value {
        let (owner, name) = repo.split_once('/').unwrap_or(("o", "r"));
        json!({
            "pull_request": {
                "number": pull.number,
                "head": { "ref": pull.head, "sha": sha },
                "base": { "ref": pull.base },
            },
            "repository": { "full_name": repo, "name": name, "owner": { "login": owner } },
            "installation": { "id": self.installation_of(repo) },
        })
    }

    pub fn issues(&self, repo: &str) -> Vec<Issue> {
        in_repo(&self.inner.lock().api.issues, repo)
    }

    pub fn pulls(&self, repo: &str) -> Vec<Pull> {
        in_repo(&self.inner.lock().api.pulls, repo)
    }

    /// How many pull requests of each repository `which` picks, in one look
    /// over them all (a benchmark watching a thousand repositories asks
    /// every second).
    pub fn count_pulls(&self, which: impl Fn(&Pull) -> bool) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for p in self.inner.lock().api.pulls.iter().filter(|p| which(p)) {
            *counts.entry(p.repo.clone()).or_default() += 1;
        }
        counts
    }

    pub fn check_runs(&self, repo: &str) -> Vec<CheckRun> {
        in_repo(&self.inner.lock().api.check_runs, repo)
    }

    /// Gives `repo` a history: `n` runs of `file` that finished successfully
    /// a day ago, older than any run dispatched later. A repository in real
    /// use has them, and every look at the workflow's newest runs reads a
    /// page of them (a benchmark that starts with none measures the page
    /// filling up).
    pub fn add_finished_runs(&self, repo: &str, file: &str, n: usize) {
        let sha = self
            .repo(repo)
            .and_then(|r| r.branch_sha("main"))
            .unwrap_or_default();
        let day_ago = (chrono::Utc::now() - chrono::Duration::days(1))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut s = self.inner.lock();
        for k in 0..n {
            let id = s.api.id() + 100_000;
            s.api.runs.push(Run {
                id,
                repo: repo.into(),
                workflow: file.into(),
                display_title: format!("supervise earlier {repo} {k}"),
                head_branch: format!("earlier/{k}"),
                head_sha: sha.clone(),
                status: "completed".into(),
                conclusion: Some("success".into()),
                inputs: serde_json::json!({}),
                created_at: day_ago.clone(),
                created: -86_400.0,
                pgid: None,
                cancel_requested: false,
            });
        }
    }

    pub fn runs(&self, repo: &str) -> Vec<Run> {
        in_repo(&self.inner.lock().api.runs, repo)
    }

    /// A file's text at a ref (branch or sha).
    pub fn file(&self, repo: &str, rev: &str, path: &str) -> Option<String> {
        self.repo(repo)?.file(rev, path).map(|(_, t)| t)
    }

    /// Every file's path at a ref (branch or sha).
    pub fn files(&self, repo: &str, rev: &str) -> Vec<String> {
        self.repo(repo)
            .and_then(|r| r.tree(rev, true))
            .map(|(_, list)| {
                list.into_iter()
                    .filter(|[_, kind, _, _]| kind == "blob")
                    .map(|[_, _, _, path]| path)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn branch(&self, repo: &str, branch: &str) -> Option<String> {
        self.repo(repo)?.branch_sha(branch)
    }

    /// Commit subjects on `head` that are not on `base`.
    pub fn log(&self, repo: &str, base: &str, head: &str) -> Vec<String> {
        self.repo(repo)
            .and_then(|r| r.commits_between(base, head).ok())
            .map(|c| c.into_iter().map(|c| c.message).collect())
            .unwrap_or_default()
    }

    /// Runs CI for a new head, if the repository has CI.
    pub(crate) fn on_push(self: &Arc<Self>, repo: &str, sha: &str) {
        let Some(cmd) = self.inner.lock().api.ci.get(repo).cloned() else {
            return;
        };
        let id = {
            let mut s = self.inner.lock();
            if s.api
                .check_runs
                .in_repo(repo)
                .any(|c| c.head_sha == sha && c.name == "ci")
            {
                return;
            }
            let id = s.api.id();
            s.api.check_runs.push(CheckRun {
                id,
                repo: repo.into(),
                head_sha: sha.into(),
                name: "ci".into(),
                app: "github-actions".into(),
                app_id: GITHUB_ACTIONS_APP_ID,
                status: "in_progress".into(),
                conclusion: None,
                title: String::new(),
                summary: String::new(),
                text: String::new(),
                annotations: Vec::new(),
                external_id: String::new(),
                details_url: Some(format!(
                    "https://github.com/{repo}/actions/runs/{id}/job/{id}"
                )),
            });
            id
        };
        let (fake, repo, sha) = (self.clone(), repo.to_string(), sha.to_string());
        tokio::spawn(async move {
            let Some(r) = fake.repo(&repo) else { return };
            let dir = fake.data_dir.join("ci").join(id.to_string());
            let (ok, output) = match r.checkout(&sha, &dir) {
                Ok(()) => {
                    let out = tokio::process::Command::new("sh")
                        .arg("-c")
                        .arg(&cmd)
                        .current_dir(&dir)
                        .output()
                        .await;
                    match out {
                        Ok(o) => (
                            o.status.success(),
                            String::from_utf8_lossy(&o.stdout).into_owned()
                                + &String::from_utf8_lossy(&o.stderr),
                        ),
                        Err(e) => (false, e.to_string()),
                    }
                }
                Err(e) => (false, e),
            };
            let _ = std::fs::remove_dir_all(&dir);
            let conclusion = if ok { "success" } else { "failure" };
            {
                let mut s = fake.inner.lock();
                if let Some(c) = s.api.check_runs.iter_mut().find(|c| c.id == id) {
                    c.status = "completed".into();
                    c.conclusion = Some(conclusion.into());
                    // As an Actions job reports: no summary; what the steps
                    // print is in the job's log, and workflow commands
                    // (`::error file=…,line=…::…`) become annotations.
                    c.annotations = workflow_annotations(&output);
                }
                s.api.job_logs.insert(id, job_log(&output));
            }
            // The CI's suite is complete: GitHub tells every App that may
            // read checks, whoever's suite it is.
            let (owner, name) = repo.split_once('/').unwrap_or(("o", "r"));
            let payload = serde_json::json!({
                "action": "completed",
                "check_suite": {
                    "id": id,
                    "head_sha": sha,
                    "status": "completed",
                    "conclusion": conclusion,
                    "app": { "slug": "github-actions", "name": "GitHub Actions" },
                },
                "repository": { "full_name": repo, "name": name, "owner": { "login": owner } },
                "installation": { "id": fake.installation_of(&repo) },
            });
            fake.deliver("check_suite", &payload).await;
        });
    }
}

/// The annotations GitHub Actions makes of the workflow commands a job
/// prints: `::error file=F,line=N::message` (and `warning`, `notice`).
fn workflow_annotations(output: &str) -> Vec<Value> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("::")?;
            let (head, message) = rest.split_once("::")?;
            let (level, params) = head.split_once(' ').unwrap_or((head, ""));
            let level = match level {
                "error" => "failure",
                "warning" => "warning",
                "notice" => "notice",
                _ => return None,
            };
            let param = |k: &str| {
                params
                    .split(',')
                    .find_map(|p| p.trim().strip_prefix(k)?.strip_prefix('='))
            };
            let line: u64 = param("line").and_then(|n| n.parse().ok()).unwrap_or(1);
            Some(serde_json::json!({
                "path": param("file").unwrap_or(".github"),
                "start_line": line, "end_line": line,
                "start_column": null, "end_column": null,
                "annotation_level": level,
                "title": param("title"),
                "message": message,
                "raw_details": null,
                "blob_href": "",
            }))
        })
        .collect()
}

/// A job's log as GitHub keeps it: each line behind its time.
fn job_log(output: &str) -> String {
    let now = chrono::Utc::now();
    // Seven digits of the second, as GitHub writes them.
    let at = format!(
        "{}.{:07}Z",
        now.format("%Y-%m-%dT%H:%M:%S"),
        now.timestamp_subsec_nanos() / 100
    );
    output.lines().map(|l| format!("{at} {l}\n")).collect()
}

pub(crate) fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/repos/{o}/{r}", get(get_repo))
        .route("/repos/{o}/{r}/git/ref/{*rest}", get(get_ref))
        .route("/repos/{o}/{r}/git/refs", post(create_ref))
        .route("/repos/{o}/{r}/git/refs/{*rest}", patch(update_ref))
        .route("/repos/{o}/{r}/git/trees", post(create_tree))
        .route("/repos/{o}/{r}/git/trees/{sha}", get(get_tree))
        .route("/repos/{o}/{r}/git/commits", post(create_commit))
        .route(
            "/repos/{o}/{r}/contents/{*path}",
            get(get_contents).put(put_contents),
        )
        .route("/repos/{o}/{r}/compare/{*basehead}", get(compare))
        .route("/repos/{o}/{r}/commits/{rev}", get(get_commit))
        .route("/repos/{o}/{r}/pulls", get(list_pulls).post(create_pull))
        .route("/repos/{o}/{r}/pulls/{n}", get(get_pull))
        .route("/repos/{o}/{r}/pulls/{n}/merge", put(merge_pull))
        .route("/repos/{o}/{r}/pulls/{n}/files", get(pull_files))
        .route("/repos/{o}/{r}/pulls/{n}/reviews", get(list_reviews))
        .route(
            "/repos/{o}/{r}/pulls/{n}/reviews/{id}/comments",
            get(pulls::list_review_comments),
        )
        .route(
            "/repos/{o}/{r}/pulls/{n}/requested_reviewers",
            post(pulls::request_reviewers),
        )
        .route("/repos/{o}/{r}/check-runs", post(create_check_run))
        .route("/repos/{o}/{r}/check-runs/{id}", patch(update_check_run))
        .route(
            "/repos/{o}/{r}/check-runs/{id}/annotations",
            get(checks::list_annotations),
        )
        .route(
            "/repos/{o}/{r}/actions/jobs/{id}/logs",
            get(checks::job_logs),
        )
        .route("/_fake/blobs/job-logs/{id}", get(checks::job_log_blob))
        .route(
            "/repos/{o}/{r}/commits/{rev}/check-runs",
            get(list_check_runs),
        )
        .route("/repos/{o}/{r}/issues", get(list_issues).post(create_issue))
        .route(
            "/repos/{o}/{r}/issues/{n}",
            get(get_issue).patch(update_issue),
        )
        .route("/repos/{o}/{r}/issues/{n}/labels", post(add_labels))
        .route(
            "/repos/{o}/{r}/issues/{n}/labels/{name}",
            axum::routing::delete(remove_label),
        )
        .route(
            "/repos/{o}/{r}/issues/{n}/sub_issues",
            get(list_sub_issues).post(add_sub_issue),
        )
        .route("/repos/{o}/{r}/issues/comments/{id}", patch(edit_comment))
        .route(
            "/repos/{o}/{r}/actions/workflows/{file}/dispatches",
            post(dispatch),
        )
        .route(
            "/repos/{o}/{r}/actions/workflows/{file}/runs",
            get(list_runs),
        )
        .route("/repos/{o}/{r}/actions/runs/{id}", get(get_run))
        .route("/repos/{o}/{r}/actions/runs/{id}/cancel", post(cancel_run))
        .route(
            "/repos/{o}/{r}/actions/runs/{id}/force-cancel",
            post(force_cancel_run),
        )
}

/// The gate (log, faults, token) and the repository, or the error response.
async fn enter(
    f: &Shared,
    endpoint: &str,
    h: &HeaderMap,
    o: &str,
    r: &str,
) -> Result<(String, Repo), Response> {
    gate(f, endpoint, h, true).await?;
    let name = format!("{o}/{r}");
    // A token reaches only its installation's repositories: GitHub answers
    // the others' as if they did not exist.
    if f.token_of(h)
        .is_some_and(|t| t.installation != f.installation_of(&name))
    {
        return Err(error(StatusCode::NOT_FOUND, "Not Found"));
    }
    match f.repo(&name) {
        Some(repo) => Ok((name, repo)),
        None => Err(error(StatusCode::NOT_FOUND, "Not Found")),
    }
}

macro_rules! enter {
    ($f:expr, $ep:expr, $h:expr, $o:expr, $r:expr) => {
        match enter(&$f, $ep, &$h, &$o, &$r).await {
            Ok(x) => x,
            Err(resp) => return resp,
        }
    };
}

fn ok(v: Value) -> Response {
    Json(v).into_response()
}

fn created(v: Value) -> Response {
    (StatusCode::CREATED, Json(v)).into_response()
}

// The handlers, by API area (after `enter!`, which they use).
pub(crate) mod actions;
mod checks;
mod contents;
mod gitdata;
pub(crate) mod issues;
mod pulls;

use actions::*;
use checks::*;
use contents::*;
use gitdata::{create_commit, create_tree, get_tree, update_ref};
use issues::*;
use pulls::*;
