//! The GitHub adapter: one client wrapper every call goes through. It
//! authenticates as the App (RS256 JWT → installation tokens, cached by octocrab
//! until shortly before they expire), honours `Retry-After` and
//! `x-ratelimit-remaining`/`-reset` by pausing *all* calls of that installation
//! until the reset (never hammering), retries transient failures with backoff,
//! sends `If-None-Match` for reads it repeats, and keeps the calls in flight
//! under GitHub's concurrency limit (`turns`).

use crate::sync::LockExt;
use octocrab::models::{AppId, InstallationId};
use octocrab::service::middleware::retry::RetryConfig;
use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    #[error("GitHub answered {status} to {what}: {body}")]
    Http {
        status: u16,
        what: String,
        body: String,
    },
    #[error("cannot reach GitHub for {what}: {message}")]
    Transport { what: String, message: String },
    #[error("rate-limited for {wait_secs} s more than this call may wait ({what})")]
    RateLimited { what: String, wait_secs: u64 },
    #[error("GitHub App configuration: {0}")]
    Config(String),
    /// An answer without a field GitHub's description says it has.
    #[error("GitHub's answer to {what} is not what its API describes: {message}")]
    Unexpected { what: String, message: String },
    /// The repository is in a state the supervisor cannot act on (a branch
    /// gone, a conflict, a branch moved after verification): a person's to fix.
    #[error("{0}")]
    NeedsPerson(String),
}

impl GitHubError {
    /// Whether trying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            GitHubError::Http { status, .. } => *status >= 500 || *status == 429 || *status == 403,
            GitHubError::Transport { .. } | GitHubError::RateLimited { .. } => true,
            GitHubError::Config(_)
            | GitHubError::NeedsPerson(_)
            | GitHubError::Unexpected { .. } => false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// The next page of a list (`Link: <…>; rel="next"`), as a path for `get`.
    pub next: Option<String>,
}

/// The `rel="next"` target of a `Link` header, as a path and query: GitHub gives
/// absolute URLs, and the client is given paths below its API base.
pub fn next_page(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        if !params.split(';').any(|p| p.trim() == "rel=\"next\"") {
            return None;
        }
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
        let path = &after_scheme[after_scheme.find('/')?..];
        Some(path.to_string())
    })
}

/// The path part of the API base (`/api/v3` on GitHub Enterprise, empty for
/// api.github.com), which `Link` URLs carry and request paths do not.
fn base_path(api_url: &str) -> String {
    let after_scheme = api_url.split_once("://").map_or(api_url, |(_, r)| r);
    after_scheme
        .find('/')
        .map(|i| after_scheme[i..].trim_end_matches('/').to_string())
        .unwrap_or_default()
}

/// Where people read what the API at `api_url` serves: `https://github.com`
/// for `https://api.github.com`, the host of a GitHub Enterprise Server's
/// `…/api/v3`, else the address itself (a test's fake serves both).
pub fn web_url_of(api_url: &str) -> String {
    let url = api_url.trim_end_matches('/');
    if let Some(rest) = url.strip_prefix("https://api.github.com") {
        if rest.is_empty() {
            return "https://github.com".into();
        }
    }
    url.strip_suffix("/api/v3").unwrap_or(url).to_string()
}

/// The most pages one list is followed through (100 items each).
const MAX_PAGES: usize = 50;

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What GitHub last said of an installation's primary rate limit (the
/// `x-ratelimit-*` headers of its latest answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub limit: u64,
    pub remaining: u64,
    /// When the window starts again (Unix seconds).
    pub reset_unix: i64,
}

impl Budget {
    /// Whether the installation is near its limit: less than a tenth of the
    /// window left before the reset. Then the service slows what can wait
    /// (reconciliation, status edits) so that what cannot (dispatches,
    /// merges, replies) still finds requests left, and GitHub never has to
    /// refuse it.
    pub fn is_short(&self, now_unix: i64) -> bool {
        now_unix < self.reset_unix && self.remaining < self.limit / 10
    }
}

/// The most GET answers kept for conditional requests, and their bytes.
const ETAG_ENTRIES: usize = 4096;
const ETAG_BYTES: usize = 32 << 20;

pub mod answers;
pub mod etags;
pub mod event;
pub mod manifest;
pub mod payload;
pub mod repo;
pub mod signin;
pub mod turns;

pub struct GitHub {
    app: Octocrab,
    /// The App this client acts as (none with a plain token): what it makes
    /// on GitHub names it.
    app_id: Option<u64>,
    /// With a plain token (the GitHub Action), every call uses this client and
    /// installation ids are ignored.
    token_client: Option<Arc<Octocrab>>,
    /// One client per installation, shared: octocrab's token cache does not
    /// survive a clone, so a clone per call would fetch a new token every time.
    installations: Mutex<HashMap<u64, std::sync::Arc<Octocrab>>>,
    paused_until: Mutex<HashMap<u64, Instant>>,
    etags: Mutex<etags::EtagCache>,
    budgets: Mutex<HashMap<u64, Budget>>,
    /// How many calls may be in flight at once.
    turns: turns::Turns,
    /// The login GitHub gives what this client makes (`{slug}[bot]`),
    /// learnt once: only comments and issues by it carry markers honoured.
    own_login: tokio::sync::OnceCell<String>,
    /// A token client was told its login ([`GitHub::writing_as`]).
    login_told: bool,
    /// See [`base_path`].
    base_path: String,
    /// See [`web_url_of`].
    web_url: String,
    /// The longest pause one call accepts before giving the work back to the queue.
    pub max_wait: Duration,
    /// First backoff after a 5xx or a transport error; doubles per retry.
    pub backoff: Duration,
    /// The longest one call may take, from asking to the answer's last byte.
    /// GitHub ends a REST request it has worked on for 10 s; without a bound,
    /// a connection that dies without a word holds its call, and one of its
    /// installation's turns, forever.
    pub call_timeout: Duration,
}

#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    if s == "GitHub" {
        s = format!("{e:?}");
    }
    s.chars().take(400).collect()
}

/// One call outside the client's retries, rate-limit pauses and caches (the
/// App's own routes, the sign-in's code exchange, the manifest's
/// conversion): its status and body, or why there was none.
pub(crate) async fn call_once(
    client: &Octocrab,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, String), GitHubError> {
    let what = format!("{method} {path}");
    let transport = |e: octocrab::Error| GitHubError::Transport {
        what: what.clone(),
        message: error_chain(&e),
    };
    let res = match method {
        "POST" => client._post(path, body).await,
        _ => client._get(path).await,
    }
    .map_err(transport)?;
    let status = res.status().as_u16();
    let text = client.body_to_string(res).await.map_err(transport)?;
    Ok((status, text))
}

/// The longest wait a server may impose: GitHub documents rate-limit windows of
/// at most an hour, and a larger (or hostile) value must not stop the service.
pub const MAX_SERVER_WAIT: Duration = Duration::from_secs(3600);

/// How long a rate-limited answer asks us to wait: `Retry-After`, else until
/// `X-RateLimit-Reset` (plus a second), clamped to [`MAX_SERVER_WAIT`].
pub fn server_wait(headers: &http::HeaderMap, now_unix: i64) -> Duration {
    // i128: a number too large for i64 is still a (very long) wait, not garbage.
    let secs = match header_num::<i128>(headers, "retry-after") {
        Some(s) => s,
        None => {
            header_num::<i128>(headers, "x-ratelimit-reset").unwrap_or(0) - i128::from(now_unix) + 1
        }
    };
    Duration::from_secs(secs.clamp(0, MAX_SERVER_WAIT.as_secs() as i128) as u64)
}

fn header_num<T: std::str::FromStr>(h: &http::HeaderMap, name: &str) -> Option<T> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The author GitHub gives what a workflow's `GITHUB_TOKEN` makes.
pub const ACTIONS_LOGIN: &str = "github-actions[bot]";

impl GitHub {
    pub fn new(
        api_url: &str,
        app_id: u64,
        private_key_pem: &SecretString,
    ) -> Result<GitHub, GitHubError> {
        let key =
            jsonwebtoken::EncodingKey::from_rsa_pem(private_key_pem.expose_secret().as_bytes())
                .map_err(|e| {
                    GitHubError::Config(format!("the private key is not an RSA PEM key: {e}"))
                })?;
        let app = Octocrab::builder()
            .base_uri(api_url)
            .map_err(|e| GitHubError::Config(format!("GITHUB_API_URL `{api_url}`: {e}")))?
            .add_retry_config(RetryConfig::None)
            .app(AppId(app_id), key)
            .build()
            .map_err(|e| GitHubError::Config(e.to_string()))?;
        Ok(GitHub::around(app, Some(app_id), None, api_url))
    }

    /// The client around octocrab's, with nothing learnt yet.
    fn around(
        app: Octocrab,
        app_id: Option<u64>,
        token_client: Option<Arc<Octocrab>>,
        api_url: &str,
    ) -> GitHub {
        GitHub {
            app,
            app_id,
            token_client,
            installations: Mutex::new(HashMap::new()),
            paused_until: Mutex::new(HashMap::new()),
            etags: Mutex::new(etags::EtagCache::new(ETAG_ENTRIES, ETAG_BYTES)),
            budgets: Mutex::new(HashMap::new()),
            turns: turns::Turns::new(turns::PER_INSTALLATION, turns::IN_ALL),
            own_login: tokio::sync::OnceCell::new(),
            login_told: false,
            base_path: base_path(api_url),
            web_url: web_url_of(api_url),
            max_wait: Duration::from_secs(15 * 60),
            backoff: Duration::from_millis(250),
            call_timeout: Duration::from_secs(30),
        }
    }

    /// A client that authenticates with a token (a workflow's `GITHUB_TOKEN` or
    /// an installation token made by the workflow), for the GitHub Action.
    pub fn with_token(api_url: &str, token: &SecretString) -> Result<GitHub, GitHubError> {
        let client = Octocrab::builder()
            .base_uri(api_url)
            .map_err(|e| GitHubError::Config(format!("GITHUB_API_URL `{api_url}`: {e}")))?
            .add_retry_config(RetryConfig::None)
            .personal_token(token.expose_secret().to_string())
            .build()
            .map_err(|e| GitHubError::Config(e.to_string()))?;
        Ok(GitHub::around(
            client.clone(),
            None,
            Some(Arc::new(client)),
            api_url,
        ))
    }

    /// Where people read what this client's API serves (see [`web_url_of`]).
    pub fn web_url(&self) -> &str {
        &self.web_url
    }

    /// What GitHub last said of the installation's rate limit, if it has.
    pub fn budget(&self, installation: u64) -> Option<Budget> {
        self.budgets.locked().get(&installation).copied()
    }

    /// Whether the installation is near its rate limit (see [`Budget::is_short`]).
    pub fn is_short(&self, installation: u64) -> bool {
        self.budget(installation)
            .is_some_and(|b| b.is_short(chrono::Utc::now().timestamp()))
    }

    /// Installations paused by a rate-limit answer, and how long each waits.
    pub fn paused(&self) -> Vec<(u64, Duration)> {
        let now = Instant::now();
        self.paused_until
            .locked()
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(id, until)| (*id, *until - now))
            .collect()
    }

    /// GET answers kept for conditional requests: entries and bytes.
    pub fn etag_cache_size(&self) -> (usize, usize) {
        self.etags.locked().size()
    }

    /// Notes the rate-limit headers of an answer.
    fn note_budget(&self, installation: u64, headers: &http::HeaderMap) {
        let (Some(limit), Some(remaining), Some(reset_unix)) = (
            header_num::<u64>(headers, "x-ratelimit-limit"),
            header_num::<u64>(headers, "x-ratelimit-remaining"),
            header_num::<i64>(headers, "x-ratelimit-reset"),
        ) else {
            return;
        };
        let b = Budget {
            limit,
            remaining,
            reset_unix,
        };
        let id = installation.to_string();
        metrics::gauge!("supervise_github_ratelimit_remaining", "installation" => id.clone())
            .set(remaining as f64);
        let short = b.is_short(chrono::Utc::now().timestamp());
        metrics::gauge!("supervise_github_slowed", "installation" => id).set(if short {
            1.0
        } else {
            0.0
        });
        self.budgets.locked().insert(installation, b);
    }

    /// A token client that stands for App `app` (the Action, whose agent
    /// workflow holds that App's key): what that App made counts as its own.
    pub fn acting_for_app(mut self, app: Option<u64>) -> GitHub {
        self.app_id = app;
        self
    }

    /// The App this client acts as, if it is an App's.
    pub fn app_id(&self) -> Option<u64> {
        self.app_id
    }

    /// A token client whose comments and issues GitHub attributes to
    /// `login` (an App installation token's `{slug}[bot]`, or a person's
    /// for a personal token), instead of [`ACTIONS_LOGIN`].
    pub fn writing_as(mut self, login: &str) -> GitHub {
        let _ = self.own_login.set(login.to_string());
        self.login_told = true;
        self
    }

    /// Whether `user` made something as this client: the App's bot; for a
    /// token told its login, that login; for a token that was not (the
    /// Action with `GITHUB_TOKEN`, or an App installation token without
    /// `bot-login`), any bot — a person, stranger or maintainer, never.
    pub async fn made_by_us(&self, user: Option<&answers::Login>) -> Result<bool, GitHubError> {
        let Some(user) = user else { return Ok(false) };
        if self.token_client.is_some() && !self.login_told {
            return Ok(user.kind.as_deref() == Some("Bot") || user.login == ACTIONS_LOGIN);
        }
        Ok(user.login == self.own_login().await?)
    }

    /// Who GitHub says made what this client makes: for the App, its bot
    /// (`{slug}[bot]`, the slug from `GET /app`, asked once); for a token,
    /// what [`GitHub::writing_as`] set, else GitHub Actions' bot, the author
    /// of what a workflow's `GITHUB_TOKEN` makes. A marker in anyone else's
    /// comment is text, never the App's record.
    pub async fn own_login(&self) -> Result<&str, GitHubError> {
        self.own_login
            .get_or_try_init(|| async {
                if self.token_client.is_some() {
                    return Ok(ACTIONS_LOGIN.to_string());
                }
                let reply = self.app_get("/app").await?;
                let app: answers::AppInfo = answers::read("GET /app", reply.json())?;
                let slug = app.slug.ok_or_else(|| GitHubError::Unexpected {
                    what: "GET /app".into(),
                    message: "the App has no slug".into(),
                })?;
                Ok(format!("{slug}[bot]"))
            })
            .await
            .map(String::as_str)
    }

    /// A GET as the App itself, signed with its key (a JWT): `/app`,
    /// `/repos/{owner}/{repo}/installation`, `/app/hook/deliveries`. One
    /// try: what asks these (`supervise doctor`) reports what it gets.
    pub async fn app_get(&self, path: &str) -> Result<Reply, GitHubError> {
        let (status, body) = call_once(&self.app, "GET", path, None).await?;
        match status {
            200..=299 => Ok(Reply {
                status,
                body,
                next: None,
            }),
            _ => Err(GitHubError::Http {
                status,
                what: format!("GET {path}"),
                body: body.chars().take(300).collect(),
            }),
        }
    }

    /// The App's installation on `repo` (`owner/name`); None when the App
    /// is not installed there (GitHub's 404, which a repository that does
    /// not exist gets too).
    pub async fn repo_installation(
        &self,
        repo: &str,
    ) -> Result<Option<answers::Installation>, GitHubError> {
        const WHAT: &str = "GET /repos/{owner}/{repo}/installation";
        match self.app_get(&format!("/repos/{repo}/installation")).await {
            Ok(r) => {
                let v = serde_json::from_str(&r.body).map_err(|e| GitHubError::Unexpected {
                    what: WHAT.into(),
                    message: e.to_string(),
                })?;
                answers::read(WHAT, v).map(Some)
            }
            Err(GitHubError::Http { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether this client uses a plain token (installation ids do not matter).
    pub fn is_token(&self) -> bool {
        self.token_client.is_some()
    }

    fn client(&self, installation: u64) -> Result<Arc<Octocrab>, GitHubError> {
        if let Some(c) = &self.token_client {
            return Ok(c.clone());
        }
        let mut map = self.installations.locked();
        if let Some(c) = map.get(&installation) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            self.app
                .installation(InstallationId(installation))
                .map_err(|e| GitHubError::Config(e.to_string()))?,
        );
        map.insert(installation, c.clone());
        Ok(c)
    }

    pub async fn get(&self, installation: u64, path: &str) -> Result<Reply, GitHubError> {
        self.send(installation, Method::Get, path, None).await
    }

    /// Every item of a list, following `Link: rel="next"` page by page (at most
    /// [`MAX_PAGES`]), read into `T`s. The items are the answer's array, or
    /// with `key` the array under that key (`check_runs`, `workflow_runs`).
    pub async fn get_all<T: serde::de::DeserializeOwned>(
        &self,
        installation: u64,
        path: &str,
        key: Option<&str>,
    ) -> Result<Vec<T>, GitHubError> {
        let mut items = Vec::new();
        let mut next = Some(path.to_string());
        for _ in 0..MAX_PAGES {
            let Some(p) = next.take() else { break };
            let reply = self.get(installation, &p).await?;
            items.extend(answers::read_list(&format!("GET {p}"), &reply.body, key)?);
            next = reply.next;
        }
        Ok(items)
    }

    pub async fn post(
        &self,
        installation: u64,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Reply, GitHubError> {
        self.send(installation, Method::Post, path, Some(body))
            .await
    }

    pub async fn put(
        &self,
        installation: u64,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Reply, GitHubError> {
        self.send(installation, Method::Put, path, Some(body)).await
    }

    pub async fn patch(
        &self,
        installation: u64,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Reply, GitHubError> {
        self.send(installation, Method::Patch, path, Some(body))
            .await
    }

    pub async fn delete(&self, installation: u64, path: &str) -> Result<Reply, GitHubError> {
        self.send(installation, Method::Delete, path, None).await
    }

    async fn send(
        &self,
        installation: u64,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, GitHubError> {
        let what = format!("{} {path}", method.as_str());
        let client = self.client(installation)?;
        let mut backoff = self.backoff;
        let mut last = String::new();
        for attempt in 0..5 {
            let pause = self.paused_until.locked().get(&installation).copied();
            if let Some(until) = pause {
                let wait = until.saturating_duration_since(Instant::now());
                if wait > self.max_wait {
                    return Err(GitHubError::RateLimited {
                        what,
                        wait_secs: wait.as_secs(),
                    });
                }
                tokio::time::sleep(wait).await;
            }
            let cached = matches!(method, Method::Get)
                .then(|| self.etags.locked().get(installation, path))
                .flatten();
            // In flight from the request until its body is read; not while
            // backing off.
            let turn = self.turns.take(installation).await;
            // The call's span: from its turn on, not the wait for one.
            let began = chrono::Utc::now();
            let answer = tokio::time::timeout(self.call_timeout, async {
                let res = match method {
                    Method::Get => {
                        let mut h = http::HeaderMap::new();
                        if let Some(kept) = &cached {
                            if let Ok(v) = http::HeaderValue::from_str(&kept.etag) {
                                h.insert(http::header::IF_NONE_MATCH, v);
                            }
                        }
                        client._get_with_headers(path, Some(h)).await
                    }
                    Method::Post => client._post(path, body).await,
                    Method::Put => client._put(path, body).await,
                    Method::Patch => client._patch(path, body).await,
                    Method::Delete => client._delete(path, body).await,
                }?;
                let status = res.status().as_u16();
                let headers = res.headers().clone();
                let text = client.body_to_string(res).await.unwrap_or_default();
                Ok::<_, octocrab::Error>((status, headers, text))
            })
            .await;
            drop(turn);
            let (status, headers, text) = match answer {
                Ok(Ok(answer)) => answer,
                failed => {
                    let timed_out = failed.is_err();
                    last = match failed {
                        // octocrab's Display says little ("GitHub"); the chain says what.
                        Ok(Err(e)) => error_chain(&e),
                        _ => format!("no answer within {} s", self.call_timeout.as_secs()),
                    };
                    metrics::counter!("supervise_github_requests_total", "status" => "error")
                        .increment(1);
                    // A write that went unanswered may have been made: not
                    // asked again blindly here, but given back to its caller,
                    // whose retry looks for what it makes before making it.
                    // A POST that failed on the way (a dropped connection)
                    // is as unknown as one that timed out.
                    if (timed_out && !matches!(method, Method::Get))
                        || matches!(method, Method::Post)
                    {
                        return Err(GitHubError::Transport {
                            what,
                            message: last,
                        });
                    }
                    tracing::warn!(%what, attempt, error = %last, "GitHub call failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    continue;
                }
            };
            metrics::counter!("supervise_github_requests_total", "status" => status.to_string())
                .increment(1);
            let remaining = header_num::<i64>(&headers, "x-ratelimit-remaining");
            crate::otlp::github_call(method.as_str(), path, status, remaining, began);
            self.note_budget(installation, &headers);
            match status {
                200..=299 => {
                    let next = headers
                        .get(http::header::LINK)
                        .and_then(|v| v.to_str().ok())
                        .and_then(next_page)
                        .map(|p| match p.strip_prefix(self.base_path.as_str()) {
                            Some(rest) if rest.starts_with('/') => rest.to_string(),
                            _ => p,
                        });
                    if let (Method::Get, Some(etag)) = (
                        method,
                        headers
                            .get(http::header::ETAG)
                            .and_then(|v| v.to_str().ok()),
                    ) {
                        // Deflated before the cache is locked: every call
                        // shares the lock.
                        if let Some(kept) = etags::Kept::new(etag.to_string(), &text, next.clone())
                        {
                            self.etags.locked().put(installation, path, kept);
                        }
                    }
                    return Ok(Reply {
                        status,
                        body: text,
                        next,
                    });
                }
                304 => {
                    if let Some(body) = cached.as_ref().and_then(|k| k.body()) {
                        return Ok(Reply {
                            status: 200,
                            body,
                            next: cached.and_then(|k| k.next.clone()),
                        });
                    }
                    return Err(GitHubError::Http {
                        status,
                        what,
                        body: text,
                    });
                }
                403 | 429
                    if headers.contains_key(http::header::RETRY_AFTER) || remaining == Some(0) =>
                {
                    let wait = server_wait(&headers, chrono::Utc::now().timestamp());
                    tracing::warn!(%what, wait_secs = wait.as_secs(), "rate-limited; pausing this installation until the reset");
                    self.paused_until
                        .locked()
                        .insert(installation, Instant::now() + wait);
                    last = format!("{status} rate limit");
                    if wait > self.max_wait {
                        return Err(GitHubError::RateLimited {
                            what,
                            wait_secs: wait.as_secs(),
                        });
                    }
                }
                // GitHub may answer 502 after making what a POST asked for:
                // its outcome is unknown, and making it again would make two
                // (two replies, two dispatches). Given back to the caller's
                // look-before-make, as a timeout is. Other writes (edits,
                // merges, file puts with their sha) are the same when sent
                // twice, and reads are free to repeat.
                500..=599 if matches!(method, Method::Post) => {
                    metrics::counter!("supervise_github_unknown_writes_total").increment(1);
                    return Err(GitHubError::Transport {
                        what,
                        message: format!(
                            "{status} after a POST: it may have been made; {}",
                            text.chars().take(200).collect::<String>()
                        ),
                    });
                }
                500..=599 => {
                    last = format!("{status}: {}", text.chars().take(200).collect::<String>());
                    tracing::warn!(%what, attempt, status, "GitHub server error; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                _ => {
                    return Err(GitHubError::Http {
                        status,
                        what,
                        body: text.chars().take(500).collect(),
                    })
                }
            }
        }
        Err(GitHubError::Transport {
            what,
            message: last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_next_page_is_read_from_a_link_header() {
        let link = r#"<https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=2>; rel="next", <https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=5>; rel="last""#;
        assert_eq!(
            next_page(link).as_deref(),
            Some("/repositories/1/issues/2/comments?per_page=100&page=2")
        );
        assert_eq!(next_page(r#"<https://x/a?page=1>; rel="prev""#), None);
        assert_eq!(base_path("https://ghe.example/api/v3/"), "/api/v3");
        assert_eq!(base_path("https://api.github.com"), "");
    }

    #[test]
    fn server_waits_are_read_and_clamped_to_an_hour() {
        assert_eq!(
            server_wait(&headers(&[("retry-after", "30")]), 0),
            Duration::from_secs(30)
        );
        assert_eq!(
            server_wait(&headers(&[("x-ratelimit-reset", "1060")]), 1000),
            Duration::from_secs(61)
        );
        for huge in ["9223372036854775807", "18446744073709551615", "99999999999"] {
            assert_eq!(
                server_wait(&headers(&[("retry-after", huge)]), 0),
                MAX_SERVER_WAIT,
                "{huge}"
            );
        }
        assert_eq!(
            server_wait(
                &headers(&[("x-ratelimit-reset", "9223372036854775807")]),
                -5
            ),
            MAX_SERVER_WAIT
        );
        assert_eq!(
            server_wait(&headers(&[("retry-after", "-3")]), 0),
            Duration::ZERO
        );
        assert_eq!(
            server_wait(
                &headers(&[("x-ratelimit-reset", "-9223372036854775808")]),
                1000
            ),
            Duration::ZERO
        );
    }
}
