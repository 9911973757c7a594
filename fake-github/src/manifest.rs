//! GitHub's App manifest flow, as GitHub documents it: a form posts a
//! manifest to `/settings/apps/new` (or an organisation's), GitHub shows
//! the App to create, and once the person confirms it sends the browser to
//! the manifest's `redirect_url` with a one-time code; `POST
//! /app-manifests/{code}/conversions` trades the code for the App's id,
//! webhook secret, client id and secret and private key.

use crate::{error, html_escape, FakeGitHub, Shared};
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// An App registered from a manifest, waiting for its code's conversion.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    pub manifest: Value,
    pub owner: String,
}

impl FakeGitHub {
    /// The private key a manifest's conversion hands out (the App the fake
    /// already checks JWTs for, so what `setup` writes works at once).
    pub fn set_manifest_key(&self, pem: &str) {
        self.inner.lock().manifest_key = Some(pem.to_string());
    }
}

#[derive(Deserialize)]
pub(crate) struct StateQuery {
    #[serde(default)]
    state: String,
}

#[derive(Deserialize)]
pub(crate) struct ManifestForm {
    manifest: String,
}

fn confirm_page(owner: &str, manifest: &str, state: &str) -> Response {
    let name = serde_json::from_str::<Value>(manifest)
        .ok()
        .and_then(|m| m["name"].as_str().map(str::to_string))
        .unwrap_or_else(|| "an App".into());
    Html(format!(
        r#"<!doctype html><html lang="en"><head><title>Create GitHub App</title></head><body><main><h1>Create GitHub App for {owner}</h1><form method="post" action="/settings/apps/new/confirm"><input type="hidden" name="manifest" value="{m}"><input type="hidden" name="state" value="{s}"><input type="hidden" name="owner" value="{owner}"><label>GitHub App name <input id="app-name" name="name" value="{name}"></label> <button id="create" type="submit">Create GitHub App</button></form></main></body></html>"#,
        owner = html_escape(owner),
        m = html_escape(manifest),
        s = html_escape(state),
        name = html_escape(&name),
    ))
    .into_response()
}

/// The manifest posted to a personal account's new-App page.
pub(crate) async fn new_app(Query(q): Query<StateQuery>, Form(f): Form<ManifestForm>) -> Response {
    confirm_page("you", &f.manifest, &q.state)
}

/// The same for an organisation.
pub(crate) async fn new_org_app(
    Path(org): Path<String>,
    Query(q): Query<StateQuery>,
    Form(f): Form<ManifestForm>,
) -> Response {
    confirm_page(&org, &f.manifest, &q.state)
}

#[derive(Deserialize)]
pub(crate) struct Confirm {
    manifest: String,
    #[serde(default)]
    state: String,
    owner: String,
    name: String,
}

/// The person created the App: back to the manifest's `redirect_url`.
pub(crate) async fn confirm(State(f): State<Shared>, Form(c): Form<Confirm>) -> Response {
    let Ok(mut manifest) = serde_json::from_str::<Value>(&c.manifest) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Html("<p>The manifest is not JSON.</p>"),
        )
            .into_response();
    };
    let Some(redirect) = manifest["redirect_url"].as_str().map(str::to_string) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Html("<p>The manifest has no redirect_url.</p>"),
        )
            .into_response();
    };
    manifest["name"] = Value::String(c.name.clone());
    let code = {
        let mut s = f.inner.lock();
        s.next_id += 1;
        let code = format!("manifest{}", s.next_id);
        s.manifests.insert(
            code.clone(),
            Registered {
                manifest,
                owner: c.owner.clone(),
            },
        );
        code
    };
    let sep = if redirect.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{redirect}{sep}code={code}&state={}", c.state)).into_response()
}

/// `POST /app-manifests/{code}/conversions`: the App's credentials, once.
pub(crate) async fn conversion(State(f): State<Shared>, Path(code): Path<String>) -> Response {
    let (registered, pem) = {
        let mut s = f.inner.lock();
        (s.manifests.remove(&code), s.manifest_key.clone())
    };
    let Some(r) = registered else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let name = r.manifest["name"].as_str().unwrap_or("App").to_string();
    let slug = name.to_lowercase().replace(' ', "-");
    (
        StatusCode::CREATED,
        Json(json!({
            "id": f.config.app_id,
            "slug": slug,
            "node_id": "A_fake",
            "client_id": "Iv1.fakefromamanifest",
            "client_secret": "fake-client-secret-from-a-manifest",
            "webhook_secret": f.config.webhook_secret,
            "pem": pem.unwrap_or_default(),
            "name": name,
            "description": r.manifest["description"].as_str().unwrap_or(""),
            "external_url": r.manifest["url"].as_str().unwrap_or("https://example.com"),
            "html_url": format!("{}/apps/{slug}", f.url()),
            "owner": { "login": r.owner },
            "permissions": r.manifest["default_permissions"].clone(),
            "events": r.manifest["default_events"].clone(),
        })),
    )
        .into_response()
}
