//! Repositories, git refs, file contents and comparisons.

use super::{
    base64_encode, created, enter, error, ok, HashMap, HeaderMap, Json, Path, Query, Response,
    Shared, State, StatusCode,
};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

pub(super) async fn get_repo(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
) -> Response {
    // A person's token (signed in to an App) sees the repository only
    // where they have a role; GitHub says 404 otherwise, private or not.
    if let Some(login) = crate::signin::user_of(&f, &h) {
        if !crate::signin::may_read(&f, &login) {
            return error(StatusCode::NOT_FOUND, "Not Found");
        }
        let name = format!("{o}/{r}");
        let Some(repo) = f.repo(&name) else {
            return error(StatusCode::NOT_FOUND, "Not Found");
        };
        return ok(json!({ "full_name": name, "default_branch": repo.default_branch }));
    }
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}", h, o, r);
    ok(json!({ "full_name": name, "default_branch": repo.default_branch }))
}

pub(super) async fn get_ref(
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
pub(super) struct NewRef {
    #[serde(rename = "ref")]
    reference: String,
    sha: String,
}

pub(super) async fn create_ref(
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

pub(super) async fn get_contents(
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
pub(super) struct PutFile {
    message: String,
    content: String,
    branch: Option<String>,
    sha: Option<String>,
}

pub(super) fn b64_decode(s: &str) -> Option<Vec<u8>> {
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

pub(super) async fn put_contents(
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

pub(super) async fn compare(
    State(f): State<Shared>,
    Path((o, r, basehead)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/compare/{basehead}", h, o, r);
    let Some((base, head)) = basehead.split_once("...") else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let resolve = |x: &str| repo.branch_sha(x).or_else(|| repo.resolve(x));
    let (Some(b), Some(hd)) = (resolve(base), resolve(head)) else {
        return error(StatusCode::NOT_FOUND, "No common ancestor");
    };
    let behind = match repo.commits_between(&hd, &b) {
        Ok(c) => c.len(),
        Err(e) => return error(StatusCode::NOT_FOUND, &e),
    };
    let files =
        super::pulls::diff_entries(&name, &hd, repo.changed_files(&b, &hd).unwrap_or_default());
    match repo.commits_between(&b, &hd) {
        Ok(commits) => ok(json!({
            "files": files,
            "status": match (commits.len(), behind) {
                (0, 0) => "identical",
                (_, 0) => "ahead",
                (0, _) => "behind",
                _ => "diverged",
            },
            "ahead_by": commits.len(),
            "behind_by": behind,
            "total_commits": commits.len(),
            "commits": commits.iter().map(|c| json!({ "sha": c.sha, "commit": { "message": c.message } })).collect::<Vec<_>>(),
        })),
        Err(e) => error(StatusCode::NOT_FOUND, &e),
    }
}

/// One commit: its id, message and parents (what the supervisor reads: the
/// commit before a merge).
pub(super) async fn get_commit(
    State(f): State<Shared>,
    Path((o, r, rev)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let (name, repo) = enter!(f, "GET /repos/{o}/{r}/commits/{ref}", h, o, r);
    let Some((sha, message, parents)) = repo.commit(&rev) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("No commit found for SHA: {rev}"),
        );
    };
    let url = format!("{}/repos/{name}/commits/{sha}", f.url());
    ok(json!({
        "sha": sha,
        "url": url,
        "commit": { "message": message },
        "parents": parents
            .iter()
            .map(|p| json!({ "sha": p, "url": format!("{}/repos/{name}/commits/{p}", f.url()) }))
            .collect::<Vec<_>>(),
    }))
}
