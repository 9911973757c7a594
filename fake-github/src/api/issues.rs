//! Issues, labels, sub-issues and comment edits.

use super::{
    created, enter, error, ok, HashMap, HeaderMap, Issue, Json, Path, Query, Response, Shared,
    State, StatusCode, Value,
};
use serde::Deserialize;
use serde_json::json;

pub(super) fn issue_json(i: &Issue) -> Value {
    json!({
        "id": i.id, "number": i.number, "title": i.title, "body": i.body, "state": i.state,
        "labels": i.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
        "html_url": format!("https://github.com/{}/issues/{}", i.repo, i.number),
        "user": { "login": i.user, "type": if i.user.ends_with("[bot]") { "Bot" } else { "User" } },
    })
}

pub(super) async fn list_issues(
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
pub(super) struct IssueBody {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    labels: Option<Vec<String>>,
}

pub(super) async fn create_issue(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<IssueBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues", h, o, r);
    let Some(title) = b.title else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "title is required");
    };
    let user = crate::author(&f, &h);
    let mut s = f.inner.lock();
    let (id, number) = (s.api.id(), s.api.number(&name));
    let i = Issue {
        id,
        number,
        repo: name,
        title,
        body: b.body.unwrap_or_default(),
        state: "open".into(),
        labels: b.labels.unwrap_or_default(),
        user,
        sub_issues: vec![],
    };
    s.api.issues.push(i.clone());
    created(issue_json(&i))
}

pub(super) async fn get_issue(
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

pub(super) async fn update_issue(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<IssueBody>,
) -> Response {
    let (name, _) = enter!(f, "PATCH /repos/{o}/{r}/issues/{n}", h, o, r);
    let mut s = f.inner.lock();
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
pub(super) struct LabelsBody {
    labels: Vec<String>,
}

pub(super) async fn add_labels(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<LabelsBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues/{n}/labels", h, o, r);
    let mut s = f.inner.lock();
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

/// `DELETE /issues/{n}/labels/{name}`: the labels left; 404 when the issue
/// does not carry it, as GitHub answers.
pub(super) async fn remove_label(
    State(f): State<Shared>,
    Path((o, r, n, label)): Path<(String, String, i64, String)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "DELETE /repos/{o}/{r}/issues/{n}/labels/{name}", h, o, r);
    let mut s = f.inner.lock();
    let Some(i) = s.api.issue_mut(&name, n) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let before = i.labels.len();
    i.labels.retain(|l| *l != label);
    if i.labels.len() == before {
        return error(StatusCode::NOT_FOUND, "Label does not exist");
    }
    ok(Value::Array(
        i.labels.iter().map(|l| json!({ "name": l })).collect(),
    ))
}

#[derive(Deserialize)]
pub(super) struct SubIssueBody {
    sub_issue_id: i64,
}

pub(super) async fn add_sub_issue(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<SubIssueBody>,
) -> Response {
    let (name, _) = enter!(f, "POST /repos/{o}/{r}/issues/{n}/sub_issues", h, o, r);
    let mut s = f.inner.lock();
    if !s.api.issues.iter().any(|i| i.id == b.sub_issue_id) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "sub_issue_id is not an issue",
        );
    }
    // An issue has at most one parent: GitHub refuses a second with 422 too.
    if s.api
        .parents
        .get(&b.sub_issue_id)
        .is_some_and(|(repo, number)| *repo != name || *number != n)
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
    s.api.parents.insert(b.sub_issue_id, (name, n));
    created(issue_json(&parent))
}

pub(super) async fn list_sub_issues(
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
pub(super) struct CommentText {
    body: String,
}

pub(super) async fn edit_comment(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<CommentText>,
) -> Response {
    let (name, _) = enter!(f, "PATCH /repos/{o}/{r}/issues/comments/{id}", h, o, r);
    if let Some(r) = too_long(&b.body) {
        return r;
    }
    let mut s = f.inner.lock();
    match s.comments.find_mut(&name, |c| c.id == id) {
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
