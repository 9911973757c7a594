//! The git data API, as much of it as edits a branch without a checkout:
//! read a tree, write a tree over a base (deletions included), write a
//! commit, move a branch (fast-forward unless forced).

use super::{
    created, enter, error, ok, HashMap, HeaderMap, Json, Path, Query, Response, Shared, State,
    StatusCode,
};
use serde::Deserialize;
use serde_json::{json, Value};

fn api(name: &str, what: &str, sha: &str) -> String {
    format!("https://api.github.com/repos/{name}/git/{what}/{sha}")
}

fn entries(name: &str, list: &[[String; 4]]) -> Vec<Value> {
    list.iter()
        .map(|[mode, kind, sha, path]| {
            json!({ "path": path, "mode": mode, "type": kind, "sha": sha, "url": api(name, &format!("{kind}s"), sha) })
        })
        .collect()
}

pub(super) async fn get_tree(
    State(f): State<Shared>,
    Path((o, r, rev)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/git/trees/{tree_sha}", h, o, r);
    // GitHub takes any value of `recursive` as yes.
    match repo.tree(&rev, q.contains_key("recursive")) {
        Some((sha, list)) => ok(json!({
            "sha": sha, "url": api(&name, "trees", &sha), "truncated": false, "tree": entries(&name, &list),
        })),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[derive(Deserialize)]
pub(super) struct NewTree {
    base_tree: Option<String>,
    tree: Vec<TreeEdit>,
}

#[derive(Deserialize)]
struct TreeEdit {
    path: String,
    mode: String,
    /// Explicitly `null`: remove the path.
    sha: Option<String>,
}

pub(super) async fn create_tree(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<NewTree>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/git/trees", h, o, r);
    let base = b.base_tree;
    let edits: Vec<(String, String, Option<String>)> = b
        .tree
        .into_iter()
        .map(|e| (e.path, e.mode, e.sha))
        .collect();
    let made = repo
        .edit_tree(base.as_deref(), &edits)
        .and_then(|sha| repo.tree(&sha, false).ok_or_else(|| "no tree".to_string()));
    match made {
        Ok((sha, list)) => created(json!({
            "sha": sha, "url": api(&name, "trees", &sha), "truncated": false, "tree": entries(&name, &list),
        })),
        Err(e) => error(StatusCode::UNPROCESSABLE_ENTITY, &e),
    }
}

#[derive(Deserialize)]
pub(super) struct NewCommit {
    message: String,
    tree: String,
    #[serde(default)]
    parents: Vec<String>,
}

pub(super) async fn create_commit(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<NewCommit>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/git/commits", h, o, r);
    let sha = match repo.commit_tree(&b.tree, &b.parents, &b.message) {
        Ok(sha) => sha,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, &e),
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let who = json!({ "name": crate::git::BOT.0, "email": crate::git::BOT.1, "date": now });
    let parents: Vec<Value> = b
        .parents
        .iter()
        .map(|p| json!({ "sha": p, "url": api(&name, "commits", p), "html_url": format!("https://github.com/{name}/commit/{p}") }))
        .collect();
    created(json!({
        "sha": sha,
        "node_id": format!("C_{sha}"),
        "url": api(&name, "commits", &sha),
        "html_url": format!("https://github.com/{name}/commit/{sha}"),
        "author": who,
        "committer": who,
        "message": b.message,
        "tree": { "sha": b.tree, "url": api(&name, "trees", &b.tree) },
        "parents": parents,
        "verification": { "verified": false, "reason": "unsigned", "signature": null, "payload": null, "verified_at": null },
    }))
}

#[derive(Deserialize)]
pub(super) struct RefUpdate {
    sha: String,
    #[serde(default)]
    force: bool,
}

pub(super) async fn update_ref(
    State(f): State<Shared>,
    Path((o, r, rest)): Path<(String, String, String)>,
    h: HeaderMap,
    Json(b): Json<RefUpdate>,
) -> Response {
    let (name, repo) = enter!(f, "PATCH /repos/{o}/{r}/git/refs/{ref}", h, o, r);
    let Some(branch) = rest.strip_prefix("heads/") else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Reference does not exist");
    };
    let Some(old) = repo.branch_sha(branch) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Reference does not exist");
    };
    if repo.resolve(&b.sha).is_none() {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Object does not exist");
    }
    if !b.force && !repo.is_ancestor(&old, &b.sha) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Update is not a fast forward",
        );
    }
    if let Err(e) = repo.update_ref(branch, &b.sha, Some(&old)) {
        return error(StatusCode::CONFLICT, &e);
    }
    f.on_push(&name, &b.sha);
    ok(json!({
        "ref": format!("refs/{rest}"),
        "node_id": format!("REF_{branch}"),
        "url": api(&name, "refs", &rest),
        "object": { "type": "commit", "sha": b.sha, "url": api(&name, "commits", &b.sha) },
    }))
}
