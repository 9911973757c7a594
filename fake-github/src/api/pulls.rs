//! Pull requests, merges and reviews.

use super::{
    created, enter, error, ok, FakeGitHub, HashMap, HeaderMap, Json, Path, Pull, PullShape, Query,
    Repo, Response, Review, ReviewComment, Shared, State, StatusCode, Value,
};
use serde::Deserialize;
use serde_json::json;

pub(super) fn pull_json(p: &Pull, repo: &Repo, shape: PullShape) -> Value {
    // An open pull request's head exists; a look-up that fails under load (a
    // git process that could not start) is tried again rather than answered
    // with a null GitHub never sends.
    let tries = if p.state == "open" { 5 } else { 1 };
    let head = (0..tries)
        .find_map(|i| {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            repo.branch_sha(&p.head)
        })
        .or_else(|| p.merge_sha.clone())
        .unwrap_or_default();
    let mut v = json!({
        "number": p.number, "title": p.title, "body": p.body, "state": p.state,
        "merge_commit_sha": p.merge_sha, "merged_at": p.merged_at,
        "head": { "ref": p.head, "sha": head },
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

pub(super) async fn list_pulls(
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
pub(super) struct NewPull {
    title: String,
    head: String,
    base: String,
    #[serde(default)]
    body: String,
}

pub(super) async fn create_pull(
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
    if repo
        .commits_between(&b.base, &b.head)
        .is_ok_and(|c| c.is_empty())
    {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!(
                "Validation Failed: No commits between {} and {}",
                b.base, b.head
            ),
        );
    }
    let p = {
        let mut s = f.inner.lock();
        if s.api
            .pulls
            .in_repo(&name)
            .any(|p| p.head == b.head && p.state == "open")
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
    // GitHub tells the App of every pull request opened, its own included
    // (the supervisor's parse leaves those on `supervise/` branches alone).
    let (owner, short) = name.split_once('/').unwrap_or(("owner", name.as_str()));
    let payload = json!({
        "action": "opened",
        "number": p.number,
        "pull_request": {
            "number": p.number,
            "head": { "ref": p.head, "sha": repo.branch_sha(&p.head).unwrap_or_default() },
            "base": { "ref": p.base },
        },
        "repository": { "full_name": name, "name": short, "owner": { "login": owner } },
        "sender": { "login": format!("{}[bot]", "supervise"), "type": "Bot" },
        "installation": { "id": f.installation_of(&name) },
    });
    let fake = f.clone();
    tokio::spawn(async move {
        fake.deliver("pull_request", &payload).await;
    });
    created(pull_json(
        &p,
        &repo,
        PullShape::Full {
            mergeable_known: false,
        },
    ))
}

pub(super) fn find_pull(f: &FakeGitHub, repo: &str, n: i64) -> Option<Pull> {
    f.inner
        .lock()
        .api
        .pulls
        .in_repo(repo)
        .find(|p| p.number == n)
        .cloned()
}

pub(super) async fn get_pull(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/pulls/{n}", h, o, r);
    let head = find_pull(&f, &name, n).and_then(|p| repo.branch_sha(&p.head));
    let known = {
        let mut s = f.inner.lock();
        let Some(p) = s.api.pulls.find_mut(&name, |p| p.number == n) else {
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

pub(super) async fn merge_pull(
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
                let mut s = f.inner.lock();
                if let Some(p) = s.api.pulls.find_mut(&name, |p| p.number == n) {
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

pub(super) async fn list_reviews(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/pulls/{n}/reviews", h, o, r);
    let s = f.inner.lock();
    let list: Vec<Value> = s
        .api
        .reviews
        .iter()
        .filter(|rv| rv.repo == name && rv.pull == n)
        .map(review_json)
        .collect();
    ok(Value::Array(list))
}

/// A review as GitHub answers it (in lists and in webhooks).
pub(crate) fn review_json(r: &Review) -> Value {
    json!({
        "id": r.id,
        "user": { "login": r.user, "type": "User" },
        "body": r.body,
        "state": r.state,
        "commit_id": r.commit_id,
        "submitted_at": r.submitted_at,
        "html_url": format!("https://github.com/{}/pull/{}#pullrequestreview-{}", r.repo, r.pull, r.id),
        "pull_request_url": format!("https://api.github.com/repos/{}/pulls/{}", r.repo, r.pull),
        "author_association": "COLLABORATOR",
    })
}

/// A review comment as GitHub answers it (in lists and in webhooks).
pub(crate) fn review_comment_json(c: &ReviewComment, repo: &str, pull: i64) -> Value {
    json!({
        "id": c.id,
        "pull_request_review_id": c.review,
        "user": { "login": c.user, "type": "User" },
        "path": c.path,
        "line": c.line,
        "original_line": c.line,
        "side": "RIGHT",
        "diff_hunk": c.diff_hunk,
        "body": c.body,
        "commit_id": c.commit_id,
        "original_commit_id": c.commit_id,
        "created_at": c.created_at,
        "updated_at": c.created_at,
        "html_url": format!("https://github.com/{repo}/pull/{pull}#discussion_r{}", c.id),
        "pull_request_url": format!("https://api.github.com/repos/{repo}/pulls/{pull}"),
        "author_association": "COLLABORATOR",
    })
}

pub(super) async fn list_review_comments(
    State(f): State<Shared>,
    Path((o, r, n, id)): Path<(String, String, i64, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(
        f,
        "GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments",
        h,
        o,
        r
    );
    let s = f.inner.lock();
    if !s
        .api
        .reviews
        .iter()
        .any(|rv| rv.repo == name && rv.pull == n && rv.id == id)
    {
        return error(StatusCode::NOT_FOUND, "Not Found");
    }
    let list: Vec<Value> = s
        .api
        .review_comments
        .iter()
        .filter(|c| c.review == id)
        .map(|c| review_comment_json(c, &name, n))
        .collect();
    ok(Value::Array(list))
}

#[derive(Deserialize)]
pub(super) struct Reviewers {
    #[serde(default)]
    reviewers: Vec<String>,
}

/// Asks people to review a pull request. GitHub refuses (422) a reviewer
/// who is the pull request's author or cannot be asked; the fake refuses a
/// login it does not know, so a request for a stranger is seen.
pub(super) async fn request_reviewers(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(body): Json<Reviewers>,
) -> Response {
    let (name, repo) = enter!(
        f,
        "POST /repos/{o}/{r}/pulls/{n}/requested_reviewers",
        h,
        o,
        r
    );
    let Some(p) = find_pull(&f, &name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    {
        let mut s = f.inner.lock();
        if let Some(stranger) = body.reviewers.iter().find(|l| !s.users.contains_key(*l)) {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("Reviews may only be requested from collaborators. One or more of the users or teams you specified is not a collaborator of the {name} repository. ({stranger})"),
            );
        }
        let asked = s.api.requested.entry((name.clone(), n)).or_default();
        for l in body.reviewers {
            if !asked.contains(&l) {
                asked.push(l);
            }
        }
    }
    created(pull_json(&p, &repo, PullShape::Simple))
}

pub(super) async fn pull_files(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/pulls/{n}/files", h, o, r);
    let Some(p) = find_pull(&f, &name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let files = match repo.changed_files(&p.base, &p.head) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, &e),
    };
    ok(Value::Array(diff_entries(&name, &p.head, files)))
}

/// Files changed at `head`, as GitHub lists them in a pull request's files
/// and a comparison (`diff-entry`): the fake counts no lines.
pub(super) fn diff_entries(name: &str, head: &str, files: Vec<(char, String)>) -> Vec<Value> {
    files
        .into_iter()
        .map(|(st, path)| {
            let status = match st {
                'A' => "added",
                'D' => "removed",
                _ => "modified",
            };
            json!({
                "sha": "0000000000000000000000000000000000000000",
                "filename": path,
                "status": status,
                "additions": 0, "deletions": 0, "changes": 0,
                "blob_url": format!("https://github.com/{name}/blob/{head}/{path}"),
                "raw_url": format!("https://github.com/{name}/raw/{head}/{path}"),
                "contents_url": format!("https://api.github.com/repos/{name}/contents/{path}"),
            })
        })
        .collect()
}

impl FakeGitHub {
    /// A person's pull request: `branch` made from the default branch with
    /// `files` committed on it, opened against the default branch, and the
    /// `pull_request` webhook (`opened`) delivered. Returns its number.
    pub async fn propose(
        &self,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        title: &str,
    ) -> i64 {
        self.ensure_repo(repo);
        let r = self.repo(repo).expect("repository");
        let base = r.branch_sha(&r.default_branch).expect("default branch");
        r.update_ref(branch, &base, None).expect("new branch");
        let head = r.commit_files(branch, files, title).expect("commit");
        let number = {
            let mut s = self.inner.lock();
            let number = s.api.number(repo);
            s.api.pulls.push(Pull {
                number,
                repo: repo.to_string(),
                head: branch.to_string(),
                base: r.default_branch.clone(),
                title: title.to_string(),
                body: String::new(),
                state: "open".into(),
                merged: false,
                merge_sha: None,
                merged_at: None,
                mergeable_asked_at: None,
            });
            number
        };
        let (owner, name) = repo.split_once('/').unwrap_or(("owner", repo));
        let payload = json!({
            "action": "opened",
            "number": number,
            "pull_request": {
                "number": number,
                "head": { "ref": branch, "sha": head },
                "base": { "ref": r.default_branch },
            },
            "repository": { "full_name": repo, "name": name, "owner": { "login": owner } },
            "sender": { "login": "mia", "type": "User" },
            "installation": { "id": self.installation_of(repo) },
        });
        self.deliver("pull_request", &payload).await;
        number
    }
}
