//! What GitHub says of the App itself and of its installation, as
//! `supervise doctor` asks: `GET /app` and `GET /repos/{owner}/{repo}/installation`
//! (the App's JWT), `GET /app/hook/deliveries` (the webhooks the fake sent,
//! with the status each got), and `GET /repos/{owner}/{repo}/actions/secrets`
//! (names only, an installation token with `secrets: read`). Tests plant
//! misconfigurations through [`FakeGitHub`]'s methods: an App not installed
//! on a repository, permissions or events it lacks, deliveries that failed.

use crate::{app_jwt, error, gate, FakeGitHub, Shared};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A webhook delivery as GitHub records it.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub id: i64,
    pub guid: String,
    pub event: String,
    pub status_code: u16,
    pub at: String,
}

/// What the installation was granted, and the events it receives.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub permissions: BTreeMap<String, String>,
    pub events: Vec<String>,
}

impl Default for Grant {
    /// What the App's manifest asks for (deploy/app-manifest.json), and
    /// `secrets: read` for the names `doctor` looks for.
    fn default() -> Grant {
        let permissions = [
            ("contents", "write"),
            ("issues", "write"),
            ("pull_requests", "write"),
            ("actions", "write"),
            ("checks", "write"),
            ("metadata", "read"),
            ("secrets", "read"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let events = [
            "issue_comment",
            "workflow_run",
            "pull_request",
            "pull_request_review",
            "check_suite",
        ]
        .into_iter()
        .map(str::to_string)
        .collect();
        Grant {
            permissions,
            events,
        }
    }
}

impl FakeGitHub {
    /// The App is not installed on `repo` (GitHub answers 404 there).
    pub fn uninstall(&self, repo: &str) {
        self.inner.lock().uninstalled.insert(repo.to_string());
    }

    /// The installation's permission `name` becomes `level` (`None`: not granted).
    pub fn set_permission(&self, name: &str, level: Option<&str>) {
        let mut s = self.inner.lock();
        match level {
            Some(l) => s.grant.permissions.insert(name.into(), l.into()),
            None => s.grant.permissions.remove(name),
        };
    }

    /// The installation stops receiving `event`.
    pub fn drop_event(&self, event: &str) {
        self.inner.lock().grant.events.retain(|e| e != event);
    }

    /// A repository secret (its name is all GitHub shows).
    pub fn add_secret(&self, repo: &str, name: &str) {
        self.inner
            .lock()
            .secrets
            .entry(repo.to_string())
            .or_default()
            .push(name.to_string());
    }

    /// Records a delivery as GitHub would, with the receiver's status (0:
    /// no answer): what the fake's own deliveries do, and what a test uses
    /// to plant a failing webhook.
    pub fn note_delivery(&self, event: &str, guid: &str, status_code: u16) {
        let mut s = self.inner.lock();
        s.next_id += 1;
        let id = s.next_id;
        s.hook_deliveries.push(Delivery {
            id,
            guid: guid.to_string(),
            event: event.to_string(),
            status_code,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        *s.delivered_by_event.entry(event.to_string()).or_default() += 1;
        let over = s.hook_deliveries.len().saturating_sub(100);
        s.hook_deliveries.drain(..over);
    }
}

pub(crate) async fn get_app(State(f): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&f, "GET /app", &headers, false).await {
        return r;
    }
    if let Err(mut r) = app_jwt(&f, &headers) {
        // GitHub answers a JWT it cannot take so, though its description
        // lists no 401 here: the test planted the wrong key (see `record`).
        r.headers_mut()
            .insert(crate::record::INJECTED, axum::http::HeaderValue::from(1));
        return r;
    }
    let perms = f.inner.lock().grant.permissions.clone();
    Json(json!({
        "id": f.config.app_id,
        "slug": "sprint-supervisor",
        "name": "Sprint Supervisor",
        "permissions": perms,
        "events": f.inner.lock().grant.events.clone(),
    }))
    .into_response()
}

pub(crate) async fn repo_installation(
    State(f): State<Shared>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gate(&f, "GET /repos/{o}/{r}/installation", &headers, false).await {
        return r;
    }
    if let Err(r) = app_jwt(&f, &headers) {
        return r;
    }
    let name = format!("{owner}/{repo}");
    if f.repo(&name).is_none() || f.inner.lock().uninstalled.contains(&name) {
        return error(StatusCode::NOT_FOUND, "Not Found");
    }
    let grant = f.inner.lock().grant.clone();
    Json(json!({
        "id": f.installation_of(&name),
        "app_id": f.config.app_id,
        "account": { "login": owner },
        "permissions": grant.permissions,
        "events": grant.events,
    }))
    .into_response()
}

pub(crate) async fn hook_deliveries(State(f): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&f, "GET /app/hook/deliveries", &headers, false).await {
        return r;
    }
    if let Err(r) = app_jwt(&f, &headers) {
        return r;
    }
    let list: Vec<Value> = f
        .inner
        .lock()
        .hook_deliveries
        .iter()
        .rev()
        .map(|d| {
            json!({
                "id": d.id,
                "guid": d.guid,
                "delivered_at": d.at,
                "redelivery": false,
                "duration": 0.01,
                "status": if (200..300).contains(&d.status_code) {
                    "OK".to_string()
                } else if d.status_code == 0 {
                    "We couldn't deliver this payload: Connection refused".to_string()
                } else {
                    format!("Invalid HTTP Response: {}", d.status_code)
                },
                "status_code": d.status_code,
                "event": d.event,
                "action": null,
                "installation_id": f.config.installation_id,
                "repository_id": null,
            })
        })
        .collect();
    Json(Value::Array(list)).into_response()
}

pub(crate) async fn secrets(
    State(f): State<Shared>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gate(&f, "GET /repos/{o}/{r}/actions/secrets", &headers, true).await {
        return r;
    }
    if !f.inner.lock().grant.permissions.contains_key("secrets") {
        return error(
            StatusCode::FORBIDDEN,
            "Resource not accessible by integration",
        );
    }
    let names = f
        .inner
        .lock()
        .secrets
        .get(&format!("{owner}/{repo}"))
        .cloned()
        .unwrap_or_default();
    let list: Vec<Value> = names
        .iter()
        .map(|n| json!({ "name": n, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z" }))
        .collect();
    Json(json!({ "total_count": list.len(), "secrets": list })).into_response()
}
