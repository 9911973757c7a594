//! Check runs.

use super::{
    created, enter, error, ok, CheckRun, HeaderMap, Json, Path, Response, Shared, State,
    StatusCode, Value, GITHUB_ACTIONS_APP_ID,
};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

pub(super) fn check_json(c: &CheckRun) -> Value {
    json!({
        "id": c.id, "name": c.name, "head_sha": c.head_sha, "status": c.status,
        "conclusion": c.conclusion, "external_id": c.external_id,
        "app": { "id": c.app_id, "slug": c.app },
        "details_url": c.details_url,
        "output": { "title": c.title, "summary": c.summary, "text": c.text },
    })
}

#[derive(Deserialize)]
pub(super) struct CheckBody {
    name: Option<String>,
    head_sha: Option<String>,
    status: Option<String>,
    conclusion: Option<String>,
    external_id: Option<String>,
    output: Option<CheckOutput>,
}

#[derive(Deserialize)]
pub(super) struct CheckOutput {
    title: String,
    summary: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    annotations: Vec<Value>,
}

/// GitHub's rules for annotations: at most 50 per request, each with a path,
/// lines from 1, a known level and a message. The first broken one, if any.
fn bad_annotation(list: &[Value]) -> Option<String> {
    if list.len() > 50 {
        return Some(format!(
            "{} annotations; at most 50 per request",
            list.len()
        ));
    }
    list.iter().find_map(|a| {
        let line = |k: &str| a[k].as_u64().filter(|l| *l >= 1);
        let level = a["annotation_level"].as_str();
        if a["path"].as_str().is_none_or(str::is_empty)
            || line("start_line").is_none()
            || line("end_line") < line("start_line")
            || !matches!(level, Some("notice" | "warning" | "failure"))
            || a["message"].as_str().is_none()
        {
            Some(format!("Invalid annotation: {a}"))
        } else {
            None
        }
    })
}

pub(super) async fn create_check_run(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    h: HeaderMap,
    Json(b): Json<CheckBody>,
) -> Response {
    let (name, repo) = enter!(f, "POST /repos/{o}/{r}/check-runs", h, o, r);
    // GitHub names who made it from the token: the App, or GitHub Actions.
    let (app, app_id) = match f.token_of(&h).map(|t| t.kind) {
        Some(crate::TokenKind::Workflow { .. }) => ("github-actions", GITHUB_ACTIONS_APP_ID),
        Some(crate::TokenKind::OtherApp { id }) => ("another-app", id),
        _ => ("supervise", f.config.app_id),
    };
    let (Some(check), Some(sha)) = (b.name, b.head_sha) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "name and head_sha are required",
        );
    };
    if repo.resolve(&sha).is_none() {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "No commit found for SHA");
    }
    if let Some(why) = b
        .output
        .as_ref()
        .and_then(|o| bad_annotation(&o.annotations))
    {
        return error(StatusCode::UNPROCESSABLE_ENTITY, &why);
    }
    if let Some(o) = &b.output {
        for (field, t) in [("summary", Some(&o.summary)), ("text", o.text.as_ref())] {
            if t.is_some_and(|t| t.chars().count() > 65_535) {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &format!("Invalid request.\n\nOnly 65535 characters are allowed; 'output.{field}' is too long."),
                );
            }
        }
    }
    let mut s = f.inner.lock();
    let id = s.api.id();
    let (title, summary, text, annotations) = b
        .output
        .map(|o| {
            (
                o.title,
                o.summary,
                o.text.unwrap_or_default(),
                o.annotations,
            )
        })
        .unwrap_or_default();
    let c = CheckRun {
        id,
        repo: name,
        head_sha: sha,
        name: check,
        app: app.into(),
        app_id,
        status: if b.conclusion.is_some() {
            "completed".into()
        } else {
            b.status.unwrap_or("queued".into())
        },
        conclusion: b.conclusion,
        title,
        summary,
        text,
        annotations,
        external_id: b.external_id.unwrap_or_default(),
        details_url: None,
    };
    s.api.check_runs.push(c.clone());
    created(check_json(&c))
}

pub(super) async fn update_check_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
    Json(b): Json<CheckBody>,
) -> Response {
    let _ = enter!(f, "PATCH /repos/{o}/{r}/check-runs/{id}", h, o, r);
    let mut s = f.inner.lock();
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
        if let Some(t) = out.text {
            c.text = t;
        }
        c.annotations.extend(out.annotations);
    }
    ok(check_json(c))
}

pub(super) async fn list_check_runs(
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

/// `GET /repos/{o}/{r}/check-runs/{id}/annotations`: as they were sent (or
/// made of a job's workflow commands).
pub(super) async fn list_annotations(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/check-runs/{id}/annotations", h, o, r);
    match f.check_runs(&name).into_iter().find(|c| c.id == id) {
        Some(c) => ok(Value::Array(c.annotations)),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// `GET /repos/{o}/{r}/actions/jobs/{id}/logs`: as GitHub does, a `302` to
/// where the log can be downloaded for a minute, without a token.
pub(super) async fn job_logs(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let _ = enter!(f, "GET /repos/{o}/{r}/actions/jobs/{id}/logs", h, o, r);
    if !f.inner.lock().api.job_logs.contains_key(&id) {
        return error(StatusCode::NOT_FOUND, "Not Found");
    }
    let to = format!("/_fake/blobs/job-logs/{id}");
    (StatusCode::FOUND, [(axum::http::header::LOCATION, to)]).into_response()
}

/// Where [`job_logs`] sends the client: the log as plain text.
pub(super) async fn job_log_blob(State(f): State<Shared>, Path(id): Path<i64>) -> Response {
    match f.inner.lock().api.job_logs.get(&id) {
        Some(log) => log.clone().into_response(),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}
