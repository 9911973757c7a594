//! The web view's HTTP side, for both doors: `supervise serve` (people
//! signed in with GitHub see the operations of repositories they can read)
//! and `supervise web` (one machine's operations, on 127.0.0.1 only). The
//! pages and the JSON are made by `report::web` from what the places
//! publish in `place::views`; this module finds who looks, what they may
//! see, and keeps each watching browser up to date over server-sent events.
//!
//! Routes: `/` (the list), `/ops/{id}` (one operation), `/api/v1/operations`,
//! `/api/v1/operations/{id}`, `/api/v1/operations/{id}/events` (a stream of
//! the page's live part), `/api/v1/events` (any change), `/assets/…`, and
//! with GitHub `/login`, `/login/callback`, `/logout`.

pub mod session;

use crate::place::views::{Shown, Views};
use crate::report::web::{self as view, Origin, Viewer};
use crate::sync::LockExt;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use futures_util::stream::Stream;
use serde::Deserialize;
use session::{set_cookie, Sessions, SESSION_COOKIE, STATE_COOKIE};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Streams open at once, for every viewer together: each holds a
/// connection, so they are bounded apart from the listener's own cap.
const MAX_STREAMS: usize = 1000;
/// A page's live part is sent again this often without an event, so the
/// running bars and "now" move.
const TICK: Duration = Duration::from_secs(5);
/// How long a live stream goes without asking again whether its viewer may
/// still see it (GitHub's answer is kept as long).
const ACCESS_RECHECK: Duration = Duration::from_secs(60);

/// Who may look.
pub enum Access {
    /// Anyone who reaches the listener (bound to 127.0.0.1 by `supervise web`).
    Local,
    /// People signed in with GitHub, each seeing what they can read.
    GitHub(Arc<Sessions>),
}

/// An operation's live part as last rendered: at which version and tick,
/// as HTML and as the compressed form most browsers take.
struct Rendered {
    version: u64,
    tick: i64,
    html: Arc<String>,
    gzipped: Arc<String>,
}

/// The live part gzipped and in base64, for an event stream: made once per
/// version and sent to every viewer whose browser can inflate it (a tenth
/// of the bytes; a page of 1,000 sprints is about 300 KB of HTML).
fn gzip_base64(html: &str) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = z.write_all(html.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(z.finish().unwrap_or_default())
}

pub struct Web {
    views: Arc<Views>,
    access: Access,
    /// The live part of each operation's page, rendered once per version
    /// and tick for every viewer.
    rendered: Mutex<HashMap<String, Rendered>>,
    streams: Arc<Semaphore>,
}

impl Web {
    pub fn new(views: Arc<Views>, access: Access) -> Arc<Web> {
        Arc::new(Web {
            views,
            access,
            rendered: Mutex::new(HashMap::new()),
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        })
    }

    fn origin(&self, shown: &Shown) -> Origin {
        let mut o = shown.origin.clone();
        if let Access::GitHub(s) = &self.access {
            o.web = Some(s.signin.web_url.clone());
        }
        o
    }

    /// The live part of an operation's page now, shared by every viewer:
    /// (HTML, gzipped HTML in base64).
    fn live_part(&self, shown: &Shown) -> (Arc<String>, Arc<String>) {
        let now = chrono::Utc::now();
        let tick = now.timestamp() / TICK.as_secs() as i64;
        let id = &shown.state.id.0;
        if let Some(r) = self.rendered.locked().get(id) {
            if r.version == shown.state.version
                && (r.tick == tick || shown.state.finished_at.is_some())
            {
                return (r.html.clone(), r.gzipped.clone());
            }
        }
        let html = Arc::new(view::live_fragment(&shown.state, &self.origin(shown), now));
        let gzipped = Arc::new(gzip_base64(&html));
        let mut cache = self.rendered.locked();
        if cache.len() > 2 * 1000 {
            cache.clear();
        }
        cache.insert(
            id.clone(),
            Rendered {
                version: shown.state.version,
                tick,
                html: html.clone(),
                gzipped: gzipped.clone(),
            },
        );
        (html, gzipped)
    }
}

/// Who a request is from: `Ok(viewer and session)` or the answer for an
/// unsigned one (the sign-in page, or 401 for the API).
#[derive(Clone)]
enum Who {
    Local,
    Person { session: String, login: String },
}

impl Who {
    fn viewer(&self, web: &Web) -> Viewer {
        match (self, &web.access) {
            (Who::Person { session, login }, Access::GitHub(s)) => Viewer {
                login: Some(login.clone()),
                csrf: Some(s.csrf(session)),
            },
            _ => Viewer::default(),
        }
    }
}

fn who(web: &Web, headers: &HeaderMap) -> Option<Who> {
    match &web.access {
        Access::Local => Some(Who::Local),
        Access::GitHub(s) => s
            .session_of(headers)
            .map(|(session, login)| Who::Person { session, login }),
    }
}

async fn may_see(web: &Web, who: &Who, shown: &Shown) -> bool {
    match (who, &web.access) {
        (Who::Local, _) => true,
        (Who::Person { session, .. }, Access::GitHub(s)) => match &shown.origin.repo {
            Some(repo) => s.may_read(session, repo).await,
            None => false,
        },
        _ => false,
    }
}

/// Every operation the viewer may see, newest first.
async fn visible(web: &Web, who: &Who) -> Vec<Shown> {
    let mut out = Vec::new();
    for shown in web.views.all() {
        if may_see(web, who, &shown).await {
            out.push(shown);
        }
    }
    out
}

/// Pages are never cached and never framed; scripts only from here.
fn page(html: String) -> Response {
    let mut r = Html(html).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self' https: http:"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

fn unsigned(api: bool) -> Response {
    if api {
        (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({ "message": "sign in first: open / in a browser" })),
        )
            .into_response()
    } else {
        page(view::signin_page(None))
    }
}

pub fn router(web: Arc<Web>) -> Router {
    let r = Router::new()
        .route("/", get(list))
        .route("/ops/{id}", get(operation))
        .route("/api/v1/operations", get(api_list))
        .route("/api/v1/operations/{id}", get(api_operation))
        .route("/api/v1/operations/{id}/events", get(api_operation_events))
        .route("/api/v1/events", get(api_events))
        .route("/assets/app.js", get(script))
        .route("/assets/app.css", get(style));
    let r = match web.access {
        Access::GitHub(_) => r
            .route("/login", get(login))
            .route("/login/callback", get(callback))
            .route("/logout", post(logout)),
        Access::Local => r,
    };
    r.with_state(web)
}

/// The pages of a service whose sign-in is not set up: one page saying so.
pub fn off_router() -> Router {
    Router::new().route("/", get(|| async { page(view::off_page()) }))
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        view::SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        view::STYLE,
    )
        .into_response()
}

#[derive(Deserialize, Default)]
struct Filters {
    repo: Option<String>,
    state: Option<String>,
}

async fn list(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Query(f): Query<Filters>,
) -> Response {
    let Some(who) = who(&web, &headers) else {
        return unsigned(false);
    };
    let summaries: Vec<view::Summary> = visible(&web, &who)
        .await
        .iter()
        .map(|s| view::summary(&s.state, web.origin(s)))
        .collect();
    let nonempty = |s: &Option<String>| s.as_deref().filter(|v| !v.is_empty()).map(str::to_string);
    page(view::list_page(
        &summaries,
        &who.viewer(&web),
        nonempty(&f.repo).as_deref(),
        nonempty(&f.state).as_deref(),
    ))
}

/// The operation if the viewer may see it; the same `None` otherwise.
async fn find(web: &Web, who: &Who, id: &str) -> Option<Shown> {
    let shown = web.views.get(id)?;
    may_see(web, who, &shown).await.then_some(shown)
}

async fn operation(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(who) = who(&web, &headers) else {
        return unsigned(false);
    };
    let viewer = who.viewer(&web);
    match find(&web, &who, &id).await {
        Some(s) => page(view::operation_page(
            &s.state,
            &web.origin(&s),
            &viewer,
            chrono::Utc::now(),
        )),
        None => {
            let mut r = page(view::not_found_page(&viewer));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

fn not_found_json() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(serde_json::json!({ "message": "no operation here that you may see" })),
    )
        .into_response()
}

async fn api_list(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let Some(who) = who(&web, &headers) else {
        return unsigned(true);
    };
    let all: Vec<view::Summary> = visible(&web, &who)
        .await
        .iter()
        .map(|s| view::summary(&s.state, web.origin(s)))
        .collect();
    Json(serde_json::json!({ "operations": all })).into_response()
}

async fn api_operation(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(who) = who(&web, &headers) else {
        return unsigned(true);
    };
    match find(&web, &who, &id).await {
        Some(s) => Json(view::detail(&s.state, web.origin(&s))).into_response(),
        None => not_found_json(),
    }
}

fn too_many_streams() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "30")],
        "too many live pages open; the page refreshes by itself instead",
    )
        .into_response()
}

/// The live part of one operation's page: sent at once, then on every
/// event and every [`TICK`] while it runs.
#[derive(Deserialize, Default)]
struct StreamOptions {
    /// `gzip`: the browser inflates (`DecompressionStream`); the live part
    /// comes gzipped in base64 as `update-gzip` events.
    z: Option<String>,
}

async fn api_operation_events(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(options): Query<StreamOptions>,
) -> Response {
    let gzip = options.z.as_deref() == Some("gzip");
    let Some(who) = who(&web, &headers) else {
        return unsigned(true);
    };
    if find(&web, &who, &id).await.is_none() {
        return not_found_json();
    }
    let Ok(permit) = web.streams.clone().try_acquire_owned() else {
        return too_many_streams();
    };
    let changes = web.views.changes();
    let stream = futures_util::stream::unfold(
        (web, changes, id, None::<(u64, usize)>, permit),
        move |(web, mut changes, id, mut last, permit)| {
            let who = who.clone();
            async move {
                loop {
                    let shown = web.views.get(&id)?;
                    // Access is asked again before anything is sent (GitHub's
                    // answer is kept a minute), and at least each minute while
                    // nothing changes: a viewer who lost access, or whose
                    // session ended, sees the stream end.
                    if !may_see(&web, &who, &shown).await {
                        return None;
                    }
                    let (html, gzipped) = web.live_part(&shown);
                    let key = (shown.state.version, Arc::as_ptr(&html) as usize);
                    if last != Some(key) {
                        last = Some(key);
                        let (name, data) = match gzip {
                            true => ("update-gzip", gzipped.as_str()),
                            false => ("update", html.as_str()),
                        };
                        let ev = Event::default()
                            .event(name)
                            .id(shown.state.version.to_string())
                            .data(data);
                        return Some((Ok::<_, Infallible>(ev), (web, changes, id, last, permit)));
                    }
                    tokio::select! {
                        r = changes.changed() => { r.ok()?; }
                        _ = tokio::time::sleep(TICK), if shown.state.finished_at.is_none() => {}
                        _ = tokio::time::sleep(ACCESS_RECHECK) => {}
                    }
                }
            }
        },
    );
    sse(stream)
}

fn sse(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let mut r = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Any change to any operation (the list page refetches itself).
async fn api_events(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if who(&web, &headers).is_none() {
        return unsigned(true);
    }
    let Ok(permit) = web.streams.clone().try_acquire_owned() else {
        return too_many_streams();
    };
    let changes = web.views.changes();
    let stream =
        futures_util::stream::unfold((changes, permit), |(mut changes, permit)| async move {
            changes.changed().await.ok()?;
            // Several changes close together are one refetch.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let v = *changes.borrow_and_update();
            let ev = Event::default()
                .event("changed")
                .id(v.to_string())
                .data("changed");
            Some((Ok::<_, Infallible>(ev), (changes, permit)))
        });
    sse(stream)
}

fn sessions(web: &Web) -> Option<&Arc<Sessions>> {
    match &web.access {
        Access::GitHub(s) => Some(s),
        Access::Local => None,
    }
}

async fn login(State(web): State<Arc<Web>>) -> Response {
    let Some(s) = sessions(&web) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (state, cookie) = s.new_state();
    let mut r = Redirect::to(&s.signin.authorize_url(&s.callback_url(), &state)).into_response();
    if let Ok(v) = HeaderValue::from_str(&set_cookie(STATE_COOKIE, &cookie, Some(600))) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[derive(Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

fn signin_error(status: StatusCode, why: &str) -> Response {
    let mut r = page(view::signin_page(Some(why)));
    *r.status_mut() = status;
    r
}

async fn callback(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Query(c): Query<Callback>,
) -> Response {
    let Some(s) = sessions(&web) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(e) = c.error {
        return signin_error(
            StatusCode::FORBIDDEN,
            &format!("GitHub did not sign you in ({e}). Try again."),
        );
    }
    let (Some(code), Some(state)) = (c.code, c.state) else {
        return signin_error(
            StatusCode::BAD_REQUEST,
            "The answer from GitHub had no code. Start again with Sign in.",
        );
    };
    if !s.state_matches(&headers, &state) {
        return signin_error(
            StatusCode::BAD_REQUEST,
            "This sign-in was not started from this browser, or took over ten minutes. Start again with Sign in.",
        );
    }
    let Ok(_permit) = s.exchanges.try_acquire() else {
        return signin_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Many people are signing in at once. Try again in a moment.",
        );
    };
    let token = match s.signin.exchange(&code, &s.callback_url()).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "a sign-in's code was not exchanged");
            return signin_error(
                StatusCode::BAD_GATEWAY,
                "GitHub did not accept the sign-in. Start again with Sign in.",
            );
        }
    };
    let login = match s.signin.login(&token).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "a signed-in person's login could not be read");
            return signin_error(
                StatusCode::BAD_GATEWAY,
                "GitHub did not say who you are. Start again with Sign in.",
            );
        }
    };
    tracing::info!(login, "signed in to the web view");
    let cookie = s.start(login, token);
    let mut r = Redirect::to("/").into_response();
    let h = r.headers_mut();
    for c in [
        set_cookie(SESSION_COOKIE, &cookie, None),
        set_cookie(STATE_COOKIE, "", Some(0)),
    ] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            h.append(header::SET_COOKIE, v);
        }
    }
    r
}

#[derive(Deserialize)]
struct Logout {
    csrf: String,
}

async fn logout(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Form(f): Form<Logout>,
) -> Response {
    let Some(s) = sessions(&web) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some((session, _)) = s.session_of(&headers) {
        if !s.csrf_ok(&session, &f.csrf) {
            return (
                StatusCode::FORBIDDEN,
                "this sign-out did not come from this site's page",
            )
                .into_response();
        }
        s.end(&session);
    }
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&set_cookie(SESSION_COOKIE, "", Some(0))) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}
