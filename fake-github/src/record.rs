//! Records every API exchange — method, path, query, status, request and
//! response bodies — as JSON lines under `$FAKE_GITHUB_RECORD`, when set, so
//! they can be checked against GitHub's published OpenAPI description
//! (`scripts/openapi_check.py`). Control endpoints (`/_fake/…`) are not recorded.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Marks an answer a test injected (a fault, a hook's status): recorded as
/// such, and not held to the description.
pub const INJECTED: &str = "x-fake-injected";

#[derive(Clone)]
pub struct Recorder {
    file: Arc<Mutex<std::fs::File>>,
}

impl Recorder {
    /// A recorder writing to a new file in `$FAKE_GITHUB_RECORD`, if set.
    pub fn from_env(port: u16) -> Option<Recorder> {
        let dir = std::env::var_os("FAKE_GITHUB_RECORD")?;
        std::fs::create_dir_all(&dir).ok()?;
        let path = std::path::Path::new(&dir)
            .join(format!("exchanges-{}-{port}.jsonl", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Recorder {
            file: Arc::new(Mutex::new(file)),
        })
    }
}

fn as_json(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| json!({ "_unparsed": String::from_utf8_lossy(bytes) }))
}

pub async fn record(recorder: Recorder, req: Request, next: Next) -> Response {
    // Control endpoints, and github.com's pages (sign-in) a browser visits.
    let path = req.uri().path();
    if path.starts_with("/_fake")
        || path.starts_with("/login/")
        || path.starts_with("/settings/")
        || path.starts_with("/organizations/")
        || path == "/favicon.ico"
    {
        return next.run(req).await;
    }
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let (parts, body) = req.into_parts();
    let Ok(req_bytes) = to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let res = next
        .run(Request::from_parts(parts, Body::from(req_bytes.clone())))
        .await;
    let status = res.status().as_u16();
    let injected = res.headers().contains_key(INJECTED);
    let (parts, body) = res.into_parts();
    let Ok(res_bytes) = to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let line = json!({
        "method": method,
        "path": path,
        "query": query,
        "status": status,
        "injected": injected,
        "request": as_json(&req_bytes),
        "response": as_json(&res_bytes),
    });
    if let Ok(mut f) = recorder.file.lock() {
        let _ = writeln!(f, "{line}");
    }
    Response::from_parts(parts, Body::from(res_bytes))
}
