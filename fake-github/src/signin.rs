//! GitHub's user sign-in for an App (the OAuth web flow, as GitHub
//! documents it under "Generating a user access token for a GitHub App"):
//! `GET /login/oauth/authorize` shows an authorize page where the person
//! types who they are (the fake has no passwords), then sends the browser
//! back to the App's callback with a code and the App's `state`; `POST
//! /login/oauth/access_token` trades the code, once, for a user token (`ghu_…`)
//! given the App's client secret. A user token reads `GET /user`, and
//! `GET /repos/{owner}/{repo}` only where its person has a role.
//!
//! These are github.com's pages, not the REST API: the recorder leaves them
//! out of the exchanges checked against the REST description.

use crate::{error, html_escape, Shared};
use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

/// The App's sign-in credentials the fake accepts.
pub(crate) struct OAuthApp {
    pub client_id: String,
    pub client_secret: String,
}

#[derive(Deserialize)]
pub(crate) struct Authorize {
    client_id: String,
    redirect_uri: String,
    #[serde(default)]
    state: String,
}

fn known_client(f: &Shared, id: &str) -> bool {
    f.inner
        .lock()
        .oauth_app
        .as_ref()
        .is_some_and(|a| a.client_id == id)
}

/// The authorize page.
pub(crate) async fn authorize_page(
    State(f): State<Shared>,
    Query(q): Query<Authorize>,
) -> Response {
    if !known_client(&f, &q.client_id) {
        return (StatusCode::NOT_FOUND, Html("<p>No such application.</p>")).into_response();
    }
    Html(format!(
        r#"<!doctype html><html lang="en"><head><title>Authorize application</title></head><body><main><h1>Authorize the application</h1><form method="post" action="/login/oauth/authorize"><input type="hidden" name="client_id" value="{}"><input type="hidden" name="redirect_uri" value="{}"><input type="hidden" name="state" value="{}"><label>Username <input id="login" name="login" autocomplete="username"></label> <button id="authorize" type="submit">Authorize</button></form></main></body></html>"#,
        html_escape(&q.client_id),
        html_escape(&q.redirect_uri),
        html_escape(&q.state)
    ))
    .into_response()
}

#[derive(Deserialize)]
pub(crate) struct Authorized {
    client_id: String,
    redirect_uri: String,
    #[serde(default)]
    state: String,
    login: String,
}

/// The person authorized: back to the App with a code.
pub(crate) async fn authorize(State(f): State<Shared>, Form(a): Form<Authorized>) -> Response {
    if !known_client(&f, &a.client_id) {
        return (StatusCode::NOT_FOUND, Html("<p>No such application.</p>")).into_response();
    }
    let mut s = f.inner.lock();
    if !s.users.contains_key(&a.login) {
        return (StatusCode::UNAUTHORIZED, Html("<p>Incorrect username.</p>")).into_response();
    }
    s.next_id += 1;
    let code = format!("code{}", s.next_id);
    s.oauth_codes
        .insert(code.clone(), (a.login.clone(), a.redirect_uri.clone()));
    let sep = if a.redirect_uri.contains('?') {
        '&'
    } else {
        '?'
    };
    Redirect::to(&format!(
        "{}{sep}code={code}&state={}",
        a.redirect_uri,
        urlencode(&a.state)
    ))
    .into_response()
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
pub(crate) struct Exchange {
    client_id: String,
    client_secret: String,
    code: String,
    redirect_uri: Option<String>,
}

/// A code for a user token. GitHub answers 200 with an `error` when the
/// code is wrong, used or expired.
pub(crate) async fn access_token(State(f): State<Shared>, body: axum::body::Bytes) -> Response {
    let Ok(e) = serde_json::from_slice::<Exchange>(&body)
        .or_else(|_| serde_urlencoded_like(&body).ok_or(()))
    else {
        return error(StatusCode::BAD_REQUEST, "Problems parsing the request");
    };
    let mut s = f.inner.lock();
    let app_ok = s
        .oauth_app
        .as_ref()
        .is_some_and(|a| a.client_id == e.client_id && a.client_secret == e.client_secret);
    if !app_ok {
        return Json(json!({ "error": "incorrect_client_credentials", "error_description": "The client_id and/or client_secret passed are incorrect." })).into_response();
    }
    let Some((login, redirect)) = s.oauth_codes.remove(&e.code) else {
        return Json(json!({ "error": "bad_verification_code", "error_description": "The code passed is incorrect or expired." })).into_response();
    };
    if e.redirect_uri.as_deref().is_some_and(|r| r != redirect) {
        return Json(json!({ "error": "redirect_uri_mismatch", "error_description": "The redirect_uri does not match." })).into_response();
    }
    s.next_id += 1;
    let token = format!("ghu_fake{}", s.next_id);
    s.user_tokens.insert(token.clone(), login);
    Json(json!({ "access_token": token, "token_type": "bearer", "scope": "" })).into_response()
}

/// `a=b&c=d` bodies, as GitHub also accepts.
fn serde_urlencoded_like(body: &[u8]) -> Option<Exchange> {
    let text = std::str::from_utf8(body).ok()?;
    let get = |k: &str| {
        text.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    };
    Some(Exchange {
        client_id: get("client_id")?,
        client_secret: get("client_secret")?,
        code: get("code")?,
        redirect_uri: get("redirect_uri"),
    })
}

/// The person a user token belongs to, if it is one.
pub(crate) fn user_of(f: &Shared, headers: &HeaderMap) -> Option<String> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("token ")))?;
    f.inner.lock().user_tokens.get(token).cloned()
}

/// `GET /user` with a user token.
pub(crate) async fn user(State(f): State<Shared>, headers: HeaderMap) -> Response {
    match user_of(&f, &headers) {
        Some(login) => {
            let id = login.bytes().map(u64::from).sum::<u64>();
            Json(json!({ "login": login, "id": id, "type": "User", "user_view_type": "public" }))
                .into_response()
        }
        None => error(StatusCode::UNAUTHORIZED, "Requires authentication"),
    }
}

/// Whether a user token's person may read a repository: they have a role
/// in it (the fake's users have one role across its repositories).
pub(crate) fn may_read(f: &Shared, login: &str) -> bool {
    f.inner
        .lock()
        .users
        .get(login)
        .is_some_and(|(role, _)| role != "none" && !role.starts_with('!'))
}
