//! The repository side of the fake: git refs, contents, compare, pull requests,
//! merges, reviews, check runs, issues, labels, sub-issues and Actions workflow
//! runs. Git data lives in real bare repositories (see `git.rs`); the rest in
//! memory. A dispatched workflow "runs" a configured local command in a checkout
//! of the ref, pushes what it committed, and delivers `workflow_run` webhooks.

use crate::git::Repo;
use crate::{base64_encode, error, gate, FakeGitHub, Shared};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde::Deserialize;
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
    /// `supervise` for the product's own, `github-actions` for the fake's CI.
    pub app: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub title: String,
    pub summary: String,
    pub external_id: String,
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
    #[serde(skip)]
    pgid: Option<u32>,
    pub cancel_requested: bool,
}

/// A workflow's command and the environment it runs with.
type Workflow = (String, Vec<(String, String)>);

#[derive(Default)]
pub(crate) struct ApiState {
    repos: HashMap<String, Repo>,
    numbers: HashMap<String, i64>,
    next_id: i64,
    pub(crate) issues: Vec<Issue>,
    pub(crate) pulls: Vec<Pull>,
    reviews: Vec<(String, i64, String, String)>,
    pub(crate) check_runs: Vec<CheckRun>,
    pub(crate) runs: Vec<Run>,
    workflows: HashMap<(String, String), Workflow>,
    ci: HashMap<String, String>,
}

impl ApiState {
    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn issue_mut(&mut self, repo: &str, number: i64) -> Option<&mut Issue> {
        self.issues
            .iter_mut()
            .find(|i| i.repo == repo && i.number == number)
    }

    fn number(&mut self, repo: &str) -> i64 {
        let n = self.numbers.entry(repo.to_string()).or_insert(0);
        *n += 1;
        *n
    }
}

/// Something that belongs to one repository.
trait InRepo: Clone {
    fn repo(&self) -> &str;
}

macro_rules! in_repo_impl {
    ($($t:ty),*) => { $(impl InRepo for $t { fn repo(&self) -> &str { &self.repo } })* };
}
in_repo_impl!(Issue, Pull, CheckRun, Run);

fn in_repo<T: InRepo>(items: &[T], repo: &str) -> Vec<T> {
    items.iter().filter(|i| i.repo() == repo).cloned().collect()
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl FakeGitHub {
    pub(crate) fn repo(&self, repo: &str) -> Option<Repo> {
        self.inner.lock().unwrap().api.repos.get(repo).cloned()
    }

    /// Creates the repository (bare, branch `main`, one commit) if it is missing.
    pub fn ensure_repo(&self, repo: &str) {
        if self.repo(repo).is_some() {
            return;
        }
        let path = self.data_dir.join("repos").join(format!("{repo}.git"));
        let r = Repo::create(path, "main", &[("README.md", "# test repository\n")])
            .expect("creating a bare repository");
        self.inner
            .lock()
            .unwrap()
            .api
            .repos
            .insert(repo.to_string(), r);
    }

    /// Opens an issue as a person; returns its number.
    pub fn open_issue(&self, repo: &str, title: &str) -> i64 {
        let mut s = self.inner.lock().unwrap();
        let (id, number) = (s.api.id(), s.api.number(repo));
        s.api.issues.push(Issue {
            id,
            number,
            repo: repo.into(),
            title: title.into(),
            body: String::new(),
            state: "open".into(),
            labels: vec![],
            sub_issues: vec![],
        });
        number
    }

    /// The Actions workflow `file` runs `command` (through `sh -c`) in a checkout
    /// of the dispatched ref, with `INPUT_<NAME>` for each input and `env` added.
    pub fn set_workflow(&self, repo: &str, file: &str, command: &str, env: &[(&str, &str)]) {
        self.inner.lock().unwrap().api.workflows.insert(
            (repo.into(), file.into()),
            (
                command.into(),
                env.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        );
    }

    /// The repository's CI: `command` runs on every new branch head and reports a
    /// `ci` check run.
    pub fn set_ci(&self, repo: &str, command: &str) {
        self.inner
            .lock()
            .unwrap()
            .api
            .ci
            .insert(repo.into(), command.into());
    }

    pub fn approve(&self, repo: &str, pr: i64, login: &str) {
        self.inner.lock().unwrap().api.reviews.push((
            repo.into(),
            pr,
            login.into(),
            "APPROVED".into(),
        ));
    }

    pub fn issues(&self, repo: &str) -> Vec<Issue> {
        in_repo(&self.inner.lock().unwrap().api.issues, repo)
    }

    pub fn pulls(&self, repo: &str) -> Vec<Pull> {
        in_repo(&self.inner.lock().unwrap().api.pulls, repo)
    }

    pub fn check_runs(&self, repo: &str) -> Vec<CheckRun> {
        in_repo(&self.inner.lock().unwrap().api.check_runs, repo)
    }

    pub fn runs(&self, repo: &str) -> Vec<Run> {
        in_repo(&self.inner.lock().unwrap().api.runs, repo)
    }

    /// A file's text at a ref (branch or sha).
    pub fn file(&self, repo: &str, rev: &str, path: &str) -> Option<String> {
        self.repo(repo)?.file(rev, path).map(|(_, t)| t)
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
    fn on_push(self: &Arc<Self>, repo: &str, sha: &str) {
        let Some(cmd) = self.inner.lock().unwrap().api.ci.get(repo).cloned() else {
            return;
        };
        let id = {
            let mut s = self.inner.lock().unwrap();
            if s.api
                .check_runs
                .iter()
                .any(|c| c.repo == repo && c.head_sha == sha && c.name == "ci")
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
                status: "in_progress".into(),
                conclusion: None,
                title: String::new(),
                summary: String::new(),
                external_id: String::new(),
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
            let mut s = fake.inner.lock().unwrap();
            if let Some(c) = s.api.check_runs.iter_mut().find(|c| c.id == id) {
                c.status = "completed".into();
                c.conclusion = Some(if ok { "success" } else { "failure" }.into());
                c.summary = output.chars().take(2000).collect();
            }
        });
    }
}

pub(crate) fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/repos/{o}/{r}", get(get_repo))
        .route("/repos/{o}/{r}/git/ref/{*rest}", get(get_ref))
        .route("/repos/{o}/{r}/git/refs", post(create_ref))
        .route(
            "/repos/{o}/{r}/contents/{*path}",
            get(get_contents).put(put_contents),
        )
        .route("/repos/{o}/{r}/compare/{*basehead}", get(compare))
        .route("/repos/{o}/{r}/pulls", get(list_pulls).post(create_pull))
        .route("/repos/{o}/{r}/pulls/{n}", get(get_pull))
        .route("/repos/{o}/{r}/pulls/{n}/merge", put(merge_pull))
        .route("/repos/{o}/{r}/pulls/{n}/reviews", get(list_reviews))
        .route("/repos/{o}/{r}/check-runs", post(create_check_run))
        .route("/repos/{o}/{r}/check-runs/{id}", patch(update_check_run))
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

async fn get_repo(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}", h, o, r);
    ok(json!({ "full_name": name, "default_branch": repo.default_branch }))
}

async fn get_ref(
    State(f): State<Shared>,
    Path((o, r, rest)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let (_, repo) = enter!(f, "GET /repos/{o}/{r}/git/ref/{ref}", h, o, r);
    let Some(branch) = rest.strip_prefix("heads/") else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    match repo.branch_sha(branch) {
        Some(sha) => {
            ok(json!({ "ref": format!("refs/{rest}"), "object": { "sha": sha, "type": "commit" } }))
        }
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[derive(Deserialize)]
struct NewRef {
    #[serde(rename = "ref")]
    reference: String,
    sha: String,
}

async fn create_ref(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<NewRef>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/git/refs", h, o, r);
    let Some(branch) = b.reference.strip_prefix("refs/heads/") else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "ref must start with refs/heads/",
        );
    };
    if repo.branch_sha(branch).is_some() {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Reference already exists");
    }
    if repo.resolve(&b.sha).is_none() {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Object does not exist");
    }
    // Compare-and-swap against "absent": two racing creations cannot both win.
    let zero = "0000000000000000000000000000000000000000";
    if let Err(e) = repo.update_ref(branch, &b.sha, Some(zero)) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, &e);
    }
    f.on_push(&name, &b.sha);
    created(json!({ "ref": b.reference, "object": { "sha": b.sha, "type": "commit" } }))
}

async fn get_contents(
    State(f): State<Shared>,
    Path((o, r, path)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
    h: HeaderMap,
) -> Response {
    let (_, repo) = enter!(f, "GET /repos/{o}/{r}/contents/{path}", h, o, r);
    let rev = q.get("ref").cloned().unwrap_or(repo.default_branch.clone());
    match repo.file(&rev, &path) {
        Some((sha, text)) => {
            // GitHub wraps base64 at 60 characters; so does the fake.
            let b64 = base64_encode(text.as_bytes());
            let wrapped: Vec<String> = b64
                .as_bytes()
                .chunks(60)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            ok(
                json!({ "type": "file", "path": path, "sha": sha, "encoding": "base64", "content": wrapped.join("\n") + "\n" }),
            )
        }
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[derive(Deserialize)]
struct PutFile {
    message: String,
    content: String,
    branch: Option<String>,
    sha: Option<String>,
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let clean: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= if c == b'=' { 0 } else { val(c)? } << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad.min(2)]);
    }
    Some(out)
}

async fn put_contents(
    State(f): State<Shared>,
    Path((o, r, path)): Path<(String, String, String)>,
    h: HeaderMap,
    Json(b): Json<PutFile>,
) -> Response {
    let (name, repo) = enter!(f, "PUT /repos/{o}/{r}/contents/{path}", h, o, r);
    let branch = b.branch.unwrap_or(repo.default_branch.clone());
    let Some(text) = b64_decode(&b.content).and_then(|v| String::from_utf8(v).ok()) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "content is not base64");
    };
    let existing = repo.file(&branch, &path).map(|(sha, _)| sha);
    if existing.is_some() && existing != b.sha {
        return error(
            StatusCode::CONFLICT,
            &format!("{path} does not match {}", b.sha.unwrap_or_default()),
        );
    }
    match repo.commit_files(&branch, &[(&path, &text)], &b.message) {
        Ok(sha) => {
            f.on_push(&name, &sha);
            let blob = repo.file(&sha, &path).map(|(s, _)| s);
            (
                if existing.is_some() {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                Json(json!({ "content": { "path": path, "sha": blob }, "commit": { "sha": sha } })),
            )
                .into_response()
        }
        Err(e) => error(StatusCode::CONFLICT, &e),
    }
}

async fn compare(
    State(f): State<Shared>,
    Path((o, r, basehead)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let (_, repo) = enter!(f, "GET /repos/{o}/{r}/compare/{basehead}", h, o, r);
    let Some((base, head)) = basehead.split_once("...") else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let resolve = |x: &str| repo.branch_sha(x).or_else(|| repo.resolve(x));
    let (Some(b), Some(hd)) = (resolve(base), resolve(head)) else {
        return error(StatusCode::NOT_FOUND, "No common ancestor");
    };
    match repo.commits_between(&b, &hd) {
        Ok(commits) => ok(json!({
            "status": if commits.is_empty() { "identical" } else { "ahead" },
            "ahead_by": commits.len(),
            "total_commits": commits.len(),
            "commits": commits.iter().map(|c| json!({ "sha": c.sha, "commit": { "message": c.message } })).collect::<Vec<_>>(),
        })),
        Err(e) => error(StatusCode::NOT_FOUND, &e),
    }
}

fn pull_json(p: &Pull, repo: &Repo, shape: PullShape) -> Value {
    let mut v = json!({
        "number": p.number, "title": p.title, "body": p.body, "state": p.state,
        "merge_commit_sha": p.merge_sha, "merged_at": p.merged_at,
        "head": { "ref": p.head, "sha": repo.branch_sha(&p.head) },
        "base": { "ref": p.base },
        "html_url": format!("https://github.com/{}/pull/{}", p.repo, p.number),
    });
    if let PullShape::Full { mergeable_known } = shape {
        let mergeable = if p.state == "open" && mergeable_known {
            repo.mergeable(&p.base, &p.head)
        } else {
            None
        };
        v["merged"] = json!(p.merged);
        v["mergeable"] = json!(mergeable);
        v["mergeable_state"] = json!(match mergeable {
            Some(true) => "clean",
            Some(false) => "dirty",
            None => "unknown",
        });
    }
    v
}

async fn list_pulls(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/pulls", h, o, r);
    let head = q
        .get("head")
        .map(|h| h.split_once(':').map(|x| x.1).unwrap_or(h).to_string());
    let state = q.get("state").cloned().unwrap_or("open".into());
    let list: Vec<Value> = f
        .pulls(&name)
        .iter()
        .filter(|p| head.as_ref().is_none_or(|h| &p.head == h))
        .filter(|p| state == "all" || p.state == state)
        .map(|p| pull_json(p, &repo, PullShape::Simple))
        .collect();
    ok(Value::Array(list))
}

#[derive(Deserialize)]
struct NewPull {
    title: String,
    head: String,
    base: String,
    #[serde(default)]
    body: String,
}

async fn create_pull(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<NewPull>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/pulls", h, o, r);
    if repo.branch_sha(&b.head).is_none() || repo.branch_sha(&b.base).is_none() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Validation Failed: head or base does not exist",
        );
    }
    let p = {
        let mut s = f.inner.lock().unwrap();
        if s.api
            .pulls
            .iter()
            .any(|p| p.repo == name && p.head == b.head && p.state == "open")
        {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("A pull request already exists for {}.", b.head),
            );
        }
        let number = s.api.number(&name);
        let p = Pull {
            number,
            repo: name.clone(),
            head: b.head,
            base: b.base,
            title: b.title,
            body: b.body,
            state: "open".into(),
            merged: false,
            merge_sha: None,
            merged_at: None,
            mergeable_asked_at: None,
        };
        s.api.pulls.push(p.clone());
        p
    };
    created(pull_json(
        &p,
        &repo,
        PullShape::Full {
            mergeable_known: false,
        },
    ))
}

fn find_pull(f: &FakeGitHub, repo: &str, n: i64) -> Option<Pull> {
    f.inner
        .lock()
        .unwrap()
        .api
        .pulls
        .iter()
        .find(|p| p.repo == repo && p.number == n)
        .cloned()
}

async fn get_pull(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/pulls/{n}", h, o, r);
    let head = find_pull(&f, &name, n).and_then(|p| repo.branch_sha(&p.head));
    let known = {
        let mut s = f.inner.lock().unwrap();
        let Some(p) = s
            .api
            .pulls
            .iter_mut()
            .find(|p| p.repo == name && p.number == n)
        else {
            return error(StatusCode::NOT_FOUND, "Not Found");
        };
        let known = p.mergeable_asked_at.is_some() && p.mergeable_asked_at == head;
        p.mergeable_asked_at = head;
        known
    };
    match find_pull(&f, &name, n) {
        Some(p) => ok(pull_json(
            &p,
            &repo,
            PullShape::Full {
                mergeable_known: known,
            },
        )),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn merge_pull(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (name, repo) = enter!(f, "PUT /repos/{o}/{r}/pulls/{n}/merge", h, o, r);
    let Some(p) = find_pull(&f, &name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(sha) = asked["sha"].as_str() {
        if !p.merged && repo.branch_sha(&p.head).as_deref() != Some(sha) {
            return error(
                StatusCode::CONFLICT,
                "Head branch was modified. Review and try the merge again.",
            );
        }
    }
    if p.merged {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is not mergeable: already merged",
        );
    }
    let msg = format!("Merge pull request #{n} from {}\n\n{}", p.head, p.title);
    match repo.merge(&p.base, &p.head, &msg) {
        Ok(sha) => {
            {
                let mut s = f.inner.lock().unwrap();
                if let Some(p) = s
                    .api
                    .pulls
                    .iter_mut()
                    .find(|p| p.repo == name && p.number == n)
                {
                    p.merged = true;
                    p.state = "closed".into();
                    p.merge_sha = Some(sha.clone());
                    p.merged_at = Some(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
                }
            }
            f.on_push(&name, &sha);
            ok(json!({ "sha": sha, "merged": true, "message": "Pull Request successfully merged" }))
        }
        Err(Ok(conflict)) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("Pull Request is not mergeable: {conflict}"),
        ),
        Err(Err(e)) => error(StatusCode::CONFLICT, &e),
    }
}

async fn list_reviews(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/pulls/{n}/reviews", h, o, r);
    let s = f.inner.lock().unwrap();
    let list: Vec<Value> = s
        .api
        .reviews
        .iter()
        .filter(|(rp, pr, _, _)| *rp == name && *pr == n)
        .map(|(_, _, user, state)| json!({ "user": { "login": user }, "state": state }))
        .collect();
    ok(Value::Array(list))
}

fn check_json(c: &CheckRun) -> Value {
    json!({
        "id": c.id, "name": c.name, "head_sha": c.head_sha, "status": c.status,
        "conclusion": c.conclusion, "external_id": c.external_id,
        "app": { "slug": c.app },
        "output": { "title": c.title, "summary": c.summary },
    })
}

#[derive(Deserialize)]
struct CheckBody {
    name: Option<String>,
    head_sha: Option<String>,
    status: Option<String>,
    conclusion: Option<String>,
    external_id: Option<String>,
    output: Option<CheckOutput>,
}

#[derive(Deserialize)]
struct CheckOutput {
    title: String,
    summary: String,
}

async fn create_check_run(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<CheckBody>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/check-runs", h, o, r);
    let (Some(check), Some(sha)) = (b.name, b.head_sha) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "name and head_sha are required",
        );
    };
    if repo.resolve(&sha).is_none() {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "No commit found for SHA");
    }
    if let Some(o) = &b.output {
        if o.summary.chars().count() > 65_535 {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid request.\n\nOnly 65535 characters are allowed; 'output.summary' is too long.",
            );
        }
    }
    let mut s = f.inner.lock().unwrap();
    let id = s.api.id();
    let (title, summary) = b.output.map(|o| (o.title, o.summary)).unwrap_or_default();
    let c = CheckRun {
        id,
        repo: name,
        head_sha: sha,
        name: check,
        app: "supervise".into(),
        status: if b.conclusion.is_some() {
            "completed".into()
        } else {
            b.status.unwrap_or("queued".into())
        },
        conclusion: b.conclusion,
        title,
        summary,
        external_id: b.external_id.unwrap_or_default(),
    };
    s.api.check_runs.push(c.clone());
    created(check_json(&c))
}

async fn update_check_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<CheckBody>,
) -> Response {
    let _ = enter!(f, "PATCH /repos/{o}/{r}/check-runs/{id}", h, o, r);
    let mut s = f.inner.lock().unwrap();
    let Some(c) = s.api.check_runs.iter_mut().find(|c| c.id == id) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if let Some(st) = b.status {
        c.status = st;
    }
    if let Some(cn) = b.conclusion {
        c.conclusion = Some(cn);
        c.status = "completed".into();
    }
    if let Some(out) = b.output {
        c.title = out.title;
        c.summary = out.summary;
    }
    ok(check_json(c))
}

async fn list_check_runs(
    State(f): State<Shared>,
    Path((o, r, rev)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/commits/{ref}/check-runs", h, o, r);
    let sha = repo
        .branch_sha(&rev)
        .or_else(|| repo.resolve(&rev))
        .unwrap_or(rev);
    let list: Vec<Value> = f
        .check_runs(&name)
        .iter()
        .filter(|c| c.head_sha == sha)
        .map(check_json)
        .collect();
    ok(json!({ "total_count": list.len(), "check_runs": list }))
}

fn issue_json(i: &Issue) -> Value {
    json!({
        "id": i.id, "number": i.number, "title": i.title, "body": i.body, "state": i.state,
        "labels": i.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
        "html_url": format!("https://github.com/{}/issues/{}", i.repo, i.number),
    })
}

async fn list_issues(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/issues", h, o, r);
    let labels: Vec<String> = q
        .get("labels")
        .map(|l| l.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let state = q.get("state").cloned().unwrap_or("open".into());
    let list: Vec<Value> = f
        .issues(&name)
        .iter()
        .filter(|i| labels.iter().all(|l| i.labels.contains(l)))
        .filter(|i| state == "all" || i.state == state)
        .map(issue_json)
        .collect();
    ok(Value::Array(list))
}

#[derive(Deserialize)]
struct IssueBody {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    labels: Option<Vec<String>>,
}

async fn create_issue(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<IssueBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues", h, o, r);
    let Some(title) = b.title else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "title is required");
    };
    let mut s = f.inner.lock().unwrap();
    let (id, number) = (s.api.id(), s.api.number(&name));
    let i = Issue {
        id,
        number,
        repo: name,
        title,
        body: b.body.unwrap_or_default(),
        state: "open".into(),
        labels: b.labels.unwrap_or_default(),
        sub_issues: vec![],
    };
    s.api.issues.push(i.clone());
    created(issue_json(&i))
}

async fn get_issue(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/issues/{n}", h, o, r);
    match f.issues(&name).iter().find(|i| i.number == n) {
        Some(i) => ok(issue_json(i)),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn update_issue(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<IssueBody>,
) -> Response {
    let (name, _) = enter!(f, "PATCH /repos/{o}/{r}/issues/{n}", h, o, r);
    let mut s = f.inner.lock().unwrap();
    let Some(i) = s.api.issue_mut(&name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if let Some(t) = b.title {
        i.title = t;
    }
    if let Some(t) = b.body {
        i.body = t;
    }
    if let Some(t) = b.state {
        i.state = t;
    }
    if let Some(l) = b.labels {
        i.labels = l;
    }
    ok(issue_json(i))
}

#[derive(Deserialize)]
struct LabelsBody {
    labels: Vec<String>,
}

async fn add_labels(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<LabelsBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues/{n}/labels", h, o, r);
    let mut s = f.inner.lock().unwrap();
    let Some(i) = s.api.issue_mut(&name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    for l in b.labels {
        if !i.labels.contains(&l) {
            i.labels.push(l);
        }
    }
    ok(Value::Array(
        i.labels.iter().map(|l| json!({ "name": l })).collect(),
    ))
}

#[derive(Deserialize)]
struct SubIssueBody {
    sub_issue_id: i64,
}

async fn add_sub_issue(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<SubIssueBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues/{n}/sub_issues", h, o, r);
    let mut s = f.inner.lock().unwrap();
    if !s.api.issues.iter().any(|i| i.id == b.sub_issue_id) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "sub_issue_id is not an issue",
        );
    }
    // An issue has at most one parent: GitHub refuses a second with 422 too.
    if s.api
        .issues
        .iter()
        .any(|i| (i.repo != name || i.number != n) && i.sub_issues.contains(&b.sub_issue_id))
    {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "An error occurred while adding the sub-issue to the parent issue. Issue may not have more than one parent.",
        );
    }
    let Some(i) = s.api.issue_mut(&name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if i.sub_issues.contains(&b.sub_issue_id) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Issue may not contain duplicate sub-issues",
        );
    }
    i.sub_issues.push(b.sub_issue_id);
    let parent = i.clone();
    created(issue_json(&parent))
}

async fn list_sub_issues(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/issues/{n}/sub_issues", h, o, r);
    let all = f.issues(&name);
    let Some(parent) = all.iter().find(|i| i.number == n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    ok(Value::Array(
        all.iter()
            .filter(|i| parent.sub_issues.contains(&i.id))
            .map(issue_json)
            .collect(),
    ))
}

#[derive(Deserialize)]
struct CommentText {
    body: String,
}

async fn edit_comment(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<CommentText>,
) -> Response {
    let (name, _) = enter!(f, "PATCH /repos/{o}/{r}/issues/comments/{id}", h, o, r);
    if let Some(r) = too_long(&b.body) {
        return r;
    }
    let mut s = f.inner.lock().unwrap();
    match s.comments.iter_mut().find(|c| c.id == id && c.repo == name) {
        Some(c) => {
            c.body = b.body;
            ok(json!({ "id": c.id, "body": c.body }))
        }
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// GitHub's answer to an issue, comment or pull-request body over 65,536 characters.
pub(crate) fn too_long(body: &str) -> Option<Response> {
    (body.chars().count() > 65_536).then(|| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Validation Failed: body is too long (maximum is 65536 characters)",
        )
    })
}

fn run_json(run: &Run) -> Value {
    json!({
        "id": run.id, "name": run.display_title, "display_title": run.display_title,
        "status": run.status, "conclusion": run.conclusion,
        "head_branch": run.head_branch, "head_sha": run.head_sha,
        "event": "workflow_dispatch", "path": format!(".github/workflows/{}", run.workflow),
        "created_at": run.created_at,
        "html_url": format!("https://github.com/{}/actions/runs/{}", run.repo, run.id),
    })
}

#[derive(Deserialize)]
struct DispatchBody {
    #[serde(rename = "ref")]
    reference: String,
    #[serde(default)]
    inputs: HashMap<String, Value>,
    #[serde(default)]
    return_run_details: bool,
}

async fn dispatch(
    State(f): State<Shared>,
    Path((o, r, file)): Path<(String, String, String)>,
    h: HeaderMap,
    Json(b): Json<DispatchBody>,
) -> Response {
    let (name, repo) = enter!(
        f,
        "POST /repos/{o}/{r}/actions/workflows/{file}/dispatches",
        h,
        o,
        r
    );
    let Some(workflow) = f
        .inner
        .lock()
        .unwrap()
        .api
        .workflows
        .get(&(name.clone(), file.clone()))
        .cloned()
    else {
        return error(StatusCode::NOT_FOUND, &format!("workflow {file} not found"));
    };
    let Some(sha) = repo.branch_sha(&b.reference) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("No ref found for: {}", b.reference),
        );
    };
    let inputs: Vec<(String, String)> = b
        .inputs
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();
    // The template's `run-name` puts the dispatch id in the run's title.
    let title = format!(
        "supervise {}",
        b.inputs
            .get("dispatch_id")
            .and_then(Value::as_str)
            .unwrap_or(&b.reference)
    );
    let run = {
        let mut s = f.inner.lock().unwrap();
        let id = s.api.id() + 100_000;
        let run = Run {
            id,
            repo: name.clone(),
            workflow: file,
            display_title: title,
            head_branch: b.reference.clone(),
            head_sha: sha,
            status: "queued".into(),
            conclusion: None,
            inputs: json!(b.inputs),
            created_at: now(),
            pgid: None,
            cancel_requested: false,
        };
        s.api.runs.push(run.clone());
        run
    };
    tokio::spawn(execute(f.clone(), run.clone(), repo, workflow, inputs));
    if b.return_run_details {
        ok(json!({
            "workflow_run_id": run.id,
            "run_url": format!("{}/repos/{}/actions/runs/{}", f.url(), name, run.id),
            "html_url": format!("https://github.com/{}/actions/runs/{}", name, run.id),
        }))
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

fn set_run(f: &FakeGitHub, id: i64, update: impl FnOnce(&mut Run)) -> Option<Run> {
    let mut s = f.inner.lock().unwrap();
    let run = s.api.runs.iter_mut().find(|r| r.id == id)?;
    update(run);
    Some(run.clone())
}

async fn deliver_run(f: &FakeGitHub, action: &str, run: &Run) {
    let (owner, name) = run.repo.split_once('/').unwrap_or(("o", "r"));
    let payload = json!({
        "action": action,
        "workflow_run": run_json(run),
        "workflow": { "path": format!(".github/workflows/{}", run.workflow) },
        "repository": { "full_name": run.repo, "name": name, "owner": { "login": owner } },
        "installation": { "id": f.config.installation_id },
    });
    f.deliver("workflow_run", &payload).await;
}

/// Runs a dispatched workflow: checkout, command, push, conclusion, webhooks.
async fn execute(
    f: Shared,
    run: Run,
    repo: Repo,
    workflow: Workflow,
    inputs: Vec<(String, String)>,
) {
    let dir = f.data_dir.join("runs").join(run.id.to_string());
    let (command, env) = workflow;
    let checkout = repo.checkout(&run.head_branch, &dir);
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&command)
        .current_dir(&dir)
        .env("GITHUB_RUN_ID", run.id.to_string())
        .env("GITHUB_REF_NAME", &run.head_branch)
        .env("GITHUB_REPOSITORY", &run.repo)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(
            std::fs::File::create(dir.with_extension("log")).expect("run log"),
        ))
        .stderr(std::process::Stdio::inherit())
        .process_group(0);
    for (k, v) in inputs {
        cmd.env(format!("INPUT_{}", k.to_uppercase()), v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = match checkout {
        Ok(()) => cmd.spawn().map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let success = match child {
        Ok(mut child) => {
            let pgid = child.id();
            if let Some(r) = set_run(&f, run.id, |r| {
                r.status = "in_progress".into();
                r.pgid = pgid;
            }) {
                deliver_run(&f, "in_progress", &r).await;
            }
            // A cancel that arrived while the run was queued.
            if f.runs(&run.repo)
                .iter()
                .any(|r| r.id == run.id && r.cancel_requested)
            {
                signal(pgid, libc::SIGTERM);
            }
            let ok = child.wait().await.map(|s| s.success()).unwrap_or(false);
            // A cancelled run ends when its last process does: a step that
            // ignores the cancel keeps the run going until a force-cancel.
            while f
                .runs(&run.repo)
                .iter()
                .any(|r| r.id == run.id && r.cancel_requested)
                && group_alive(pgid)
            {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            // Push what the workflow committed, as `actions/checkout` credentials would.
            let pushed = crate::git::git(
                &dir,
                &[
                    "push",
                    "-q",
                    "origin",
                    &format!("HEAD:refs/heads/{}", run.head_branch),
                ],
            );
            if pushed.is_ok() {
                if let Some(sha) = repo.branch_sha(&run.head_branch) {
                    f.on_push(&run.repo, &sha);
                }
            }
            ok
        }
        Err(e) => {
            eprintln!("fake-github: run {} could not start: {e}", run.id);
            false
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let done = set_run(&f, run.id, |r| {
        r.status = "completed".into();
        r.pgid = None;
        r.conclusion = Some(
            if r.cancel_requested {
                "cancelled"
            } else if success {
                "success"
            } else {
                "failure"
            }
            .into(),
        );
    });
    if let Some(r) = done {
        deliver_run(&f, "completed", &r).await;
    }
}

/// Whether any process of the group is still running, read from /proc (zombies,
/// which a container's init may never reap, do not count).
fn group_alive(pgid: Option<u32>) -> bool {
    let Some(p) = pgid else { return false };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp …": the command may hold spaces and parens.
        let Some(rest) = stat.rsplit_once(") ").map(|x| x.1) else {
            return false;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("Z");
        let pgrp = f.nth(1).and_then(|g| g.parse::<u32>().ok());
        pgrp == Some(p) && state != "Z" && state != "X"
    })
}

fn signal(pgid: Option<u32>, sig: libc::c_int) {
    if let Some(p) = pgid {
        // SAFETY: kill(2) with a negative pid signals that process group only.
        unsafe {
            libc::kill(-(p as libc::pid_t), sig);
        }
    }
}

#[derive(Deserialize)]
struct RunsQuery {
    created: Option<String>,
}

async fn list_runs(
    State(f): State<Shared>,
    Path((o, r, file)): Path<(String, String, String)>,
    Query(q): Query<RunsQuery>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(
        f,
        "GET /repos/{o}/{r}/actions/workflows/{file}/runs",
        h,
        o,
        r
    );
    let since = q
        .created
        .as_deref()
        .and_then(|c| c.strip_prefix(">="))
        .map(str::to_string);
    let mut list: Vec<Value> = f
        .runs(&name)
        .iter()
        .filter(|r| r.workflow == file)
        .filter(|r| {
            since
                .as_ref()
                .is_none_or(|s| r.created_at.as_str() >= s.as_str())
        })
        .map(run_json)
        .collect();
    list.reverse(); // newest first, as GitHub lists them
    ok(json!({ "total_count": list.len(), "workflow_runs": list }))
}

async fn get_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/actions/runs/{id}", h, o, r);
    match f.runs(&name).iter().find(|r| r.id == id) {
        Some(r) => ok(run_json(r)),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn cancel(f: Shared, o: String, r: String, id: i64, h: HeaderMap, force: bool) -> Response {
    let endpoint = if force {
        "POST /repos/{o}/{r}/actions/runs/{id}/force-cancel"
    } else {
        "POST /repos/{o}/{r}/actions/runs/{id}/cancel"
    };
    let _ = enter!(f, endpoint, h, o, r);
    let Some(run) = set_run(&f, id, |r| {
        if r.status != "completed" {
            r.cancel_requested = true;
        }
    }) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if run.status == "completed" {
        return error(
            StatusCode::CONFLICT,
            "Cannot cancel a workflow run that is completed.",
        );
    }
    signal(run.pgid, if force { libc::SIGKILL } else { libc::SIGTERM });
    (StatusCode::ACCEPTED, Json(json!({}))).into_response()
}

async fn cancel_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    cancel(f, o, r, id, h, false).await
}

async fn force_cancel_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    cancel(f, o, r, id, h, true).await
}
