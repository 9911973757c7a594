//! A stateful fake of the GitHub REST API subset Sprint Supervisor uses (see
//! README). State lives in memory behind one mutex; every request is logged.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Where webhooks go, e.g. `http://127.0.0.1:3000/webhook`.
    pub webhook_url: Option<String>,
    pub webhook_secret: String,
    pub app_id: u64,
    /// The App's public key (PEM); without it the JWT's signature is not checked.
    pub app_public_key_pem: Option<String>,
    pub installation_id: u64,
    /// Where bare repositories and run checkouts live; a fresh temporary
    /// directory when unset.
    pub data_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Comment {
    pub id: i64,
    pub repo: String,
    pub issue: i64,
    pub user: String,
    pub body: String,
}

impl by_repo::InRepo for Comment {
    fn repo(&self) -> &str {
        &self.repo
    }
}

#[derive(Debug, Clone)]
struct Fault {
    status: u16,
    times: u32,
    retry_after: Option<u64>,
    reset_in: Option<u64>,
    latency_ms: u64,
}

/// Notes how long the fake took to answer each API call.
async fn busy(
    State(f): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.uri().path().starts_with("/_fake") {
        return next.run(req).await;
    }
    let from = f.started.elapsed().as_secs_f64();
    // Writes: what an answer lost on the way leaves made but unknown.
    let write = (req.method() != axum::http::Method::GET)
        .then(|| format!("{} {}", req.method(), req.uri().path()));
    let at_once = AtOnce::enter(&f);
    let mut resp = next.run(req).await;
    drop(at_once);
    if let Some(path) = write.filter(|_| resp.status().is_success()) {
        let mut s = f.inner.lock();
        if let Some(lost) = s
            .lost_answers
            .iter_mut()
            .find(|(which, n)| *n > 0 && lost_here(which, &path))
        {
            lost.1 -= 1;
            s.answers_lost += 1;
            resp = error(
                StatusCode::BAD_GATEWAY,
                "injected: made, and its answer lost",
            );
            // A fault of the test's making: not held to GitHub's description.
            resp.headers_mut()
                .insert(record::INJECTED, HeaderValue::from(1));
        }
    }
    let to = f.started.elapsed().as_secs_f64();
    f.inner.lock().busy.push((from, to));
    resp
}

/// Whether a lost answer asked for as `which` (a path suffix, meaning a
/// POST; or `METHOD` and a suffix, `PUT /contents/x.json`) is this write's
/// (`METHOD /path`).
fn lost_here(which: &str, write: &str) -> bool {
    match which.split_once(' ') {
        Some((method, suffix)) => {
            write.starts_with(&format!("{method} ")) && write.ends_with(suffix)
        }
        None => write.starts_with("POST ") && write.ends_with(which),
    }
}

/// One API call in flight, counted until it is answered or its client
/// goes away (the future is dropped).
struct AtOnce<'a>(&'a FakeGitHub);

impl<'a> AtOnce<'a> {
    fn enter(f: &'a FakeGitHub) -> AtOnce<'a> {
        let mut s = f.inner.lock();
        s.in_flight += 1;
        s.most_in_flight = s.most_in_flight.max(s.in_flight);
        AtOnce(f)
    }
}

impl Drop for AtOnce<'_> {
    fn drop(&mut self) {
        self.0.inner.lock().in_flight -= 1;
    }
}

#[derive(Default)]
pub(crate) struct Inner {
    /// Installations other than the default one, by the account (owner)
    /// they are on: an organisation's repositories share its installation.
    pub(crate) installations: HashMap<String, u64>,
    pub(crate) users: HashMap<String, (String, String)>,
    /// The App's sign-in credentials, once a test sets them.
    pub(crate) oauth_app: Option<signin::OAuthApp>,
    /// Codes given to browsers: code → (login, redirect URI).
    pub(crate) oauth_codes: HashMap<String, (String, String)>,
    /// User tokens: token → login.
    pub(crate) user_tokens: HashMap<String, String>,
    /// Repositories the App is not installed on.
    pub(crate) uninstalled: std::collections::HashSet<String>,
    /// What the installation was granted.
    pub(crate) grant: app::Grant,
    /// Repository secrets' names.
    pub(crate) secrets: HashMap<String, Vec<String>>,
    /// The webhooks sent, as GitHub records them (the last 100).
    pub(crate) hook_deliveries: Vec<app::Delivery>,
    /// Apps created from a manifest, by their one-time code.
    pub(crate) manifests: HashMap<String, manifest::Registered>,
    /// The key a manifest's conversion hands out.
    pub(crate) manifest_key: Option<String>,
    pub(crate) comments: by_repo::ByRepo<Comment>,
    pub(crate) api: api::ApiState,
    reactions: Vec<(i64, String, String)>,
    tokens: HashMap<String, Token>,
    counts: BTreeMap<String, u64>,
    log: Vec<(f64, String, u16)>,
    /// The calls of the jobs the fake ran (their tokens'), apart from `log`.
    runner_log: Vec<(f64, String, u16)>,
    /// When the fake was busy answering an API call (seconds since start,
    /// from the request's arrival to its answer's): GitHub's own latency in a
    /// measurement of the service's.
    busy: Vec<(f64, f64)>,
    /// API calls being answered now, and the most there have been at once
    /// (GitHub refuses more than 100 of one client at once).
    in_flight: usize,
    most_in_flight: usize,
    faults: Vec<Fault>,
    /// POSTs whose path ends so that are made, and then answered 502 as if
    /// the answer were lost on the way: (path suffix, how many more).
    lost_answers: Vec<(String, u32)>,
    /// How many answers were lost so.
    answers_lost: u64,
    /// The announced rate-limit window: (announced at, reset).
    rate_limited: Option<(Instant, Instant)>,
    early_calls: u64,
    next_id: i64,
    deliveries: u64,
    /// Every n-th installation API call fails with a 502 (0: never).
    fail_every: u64,
    calls: u64,
    /// Every webhook is delivered twice, under two delivery ids (a
    /// redelivery from the App's settings, or a second hook).
    deliver_twice: bool,
    /// Webhooks are sent nowhere (they went to a replica that died).
    webhooks_lost: bool,
    /// `workflow_run` webhooks as sent: (seconds since start, action, run name).
    run_deliveries: Vec<(f64, String, String)>,
    /// Every webhook sent, by event, however many: the delivery list
    /// keeps only GitHub's last 100, and a long story outgrows it.
    delivered_by_event: std::collections::BTreeMap<String, usize>,
    /// The primary rate limit (see `quota.rs`) and each installation's window.
    limit: quota::Limit,
    windows: HashMap<u64, quota::Window>,
    /// Calls refused because their installation's window was spent.
    refused_for_rate: u64,
    /// The last request's number, and where the log line of each request in
    /// flight is: a 304 is known only once the handler has answered.
    next_seq: u64,
    log_of_seq: HashMap<u64, usize>,
    /// Requests per endpoint answered 304 Not Modified (not charged).
    not_modified: BTreeMap<String, u64>,
}

pub struct FakeGitHub {
    pub addr: SocketAddr,
    pub(crate) config: Config,
    pub(crate) inner: Watched,
    pub(crate) started: Instant,
    pub(crate) data_dir: std::path::PathBuf,
}

pub(crate) type Shared = Arc<FakeGitHub>;

/// The fake's state behind one lock, telling whoever watches [`FakeGitHub::changes`]
/// each time a holder of the lock changed it — so a test waits for GitHub to
/// change instead of polling it.
#[derive(Default)]
pub(crate) struct Watched {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
}

impl Watched {
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        StateGuard {
            guard: self.inner.lock().unwrap_or_else(|p| p.into_inner()),
            version: &self.version,
            changed: false,
        }
    }
}

/// The lock on the state; a mutable use marks it changed, announced on release.
pub(crate) struct StateGuard<'a> {
    guard: std::sync::MutexGuard<'a, Inner>,
    version: &'a watch::Sender<u64>,
    changed: bool,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        self.changed = true;
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if self.changed {
            self.version.send_modify(|v| *v += 1);
        }
    }
}

mod api;
mod app;
mod by_repo;
pub mod git;
mod manifest;
pub mod model;
mod paging;
mod quota;
mod record;
mod shapes;
mod signin;
pub mod workflow;
pub use api::{
    CheckRun, Issue, Job, Pull, Run, SimulatedCheck, SimulatedPublisher, SimulatedRecord,
    SimulatedWork,
};

impl FakeGitHub {
    /// Changes to the fake's state, as a counter that goes up with each: a
    /// test awaits `changed()` on it between two looks at what GitHub shows.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn add_user(&self, login: &str, role: &str, kind: &str) {
        self.inner
            .lock()
            .users
            .insert(login.to_string(), (role.to_string(), kind.to_string()));
    }

    /// Lets the App sign people in with these credentials (its client id
    /// and secret, from its settings page on GitHub).
    pub fn set_oauth_app(&self, client_id: &str, client_secret: &str) {
        self.inner.lock().oauth_app = Some(signin::OAuthApp {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
        });
    }

    /// Commits a file to a repository's default branch (creating the repository).
    pub fn add_file(&self, repo: &str, path: &str, content: &str) {
        self.ensure_repo(repo);
        let r = self.repo(repo).expect("repository");
        r.commit_files(
            &r.default_branch,
            &[(path, content)],
            &format!("Add {path}"),
        )
        .expect("commit");
    }

    pub fn comments(&self, repo: &str, issue: i64) -> Vec<Comment> {
        self.inner
            .lock()
            .comments
            .in_repo(repo)
            .filter(|c| c.issue == issue)
            .cloned()
            .collect()
    }

    /// Every comment in `repo`, on any issue or pull request.
    pub fn comments_in(&self, repo: &str) -> Vec<Comment> {
        self.inner.lock().comments.in_repo(repo).cloned().collect()
    }

    pub fn reactions(&self) -> Vec<(i64, String, String)> {
        self.inner.lock().reactions.clone()
    }

    /// Requests per endpoint (method and route pattern), charged or not.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.inner.lock().counts.clone()
    }

    /// Requests per endpoint answered 304 Not Modified: GitHub does not
    /// charge them against the rate limit.
    pub fn not_modified(&self) -> BTreeMap<String, u64> {
        self.inner.lock().not_modified.clone()
    }

    /// Requests per endpoint that GitHub charges: all but the 304s.
    pub fn charged(&self) -> BTreeMap<String, u64> {
        let s = self.inner.lock();
        s.counts
            .iter()
            .map(|(k, n)| (k.clone(), n - s.not_modified.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The primary rate limit from now on: `per_window` charged requests per
    /// installation in each `window` (GitHub: 5,000 an hour). Windows already
    /// open start again.
    pub fn set_rate_limit(&self, per_window: u64, window: Duration) {
        let mut s = self.inner.lock();
        s.limit = quota::Limit { per_window, window };
        s.windows.clear();
    }

    /// Marks `used` requests of the installation's current window as spent
    /// (another App's work, say), opening the window if none is open.
    pub fn use_rate_limit(&self, installation: u64, used: u64) {
        let mut s = self.inner.lock();
        let limit = s.limit;
        let w = s
            .windows
            .entry(installation)
            .or_insert_with(|| quota::fresh(limit, Instant::now()));
        w.used = used;
    }

    /// What is left of the installation's current window.
    pub fn rate_limit_remaining(&self, installation: u64) -> u64 {
        let s = self.inner.lock();
        let used = s
            .windows
            .get(&installation)
            .filter(|w| Instant::now() < w.reset)
            .map_or(0, |w| w.used);
        s.limit.per_window.saturating_sub(used)
    }

    /// Calls refused because their installation's rate-limit window was spent.
    pub fn refused_for_rate(&self) -> u64 {
        self.inner.lock().refused_for_rate
    }

    /// API calls made while a rate-limit window the fake announced was still open.
    pub fn early_calls(&self) -> u64 {
        self.inner.lock().early_calls
    }

    /// Accepts `token` as a workflow's `GITHUB_TOKEN` that may write (what
    /// the calls it makes are attributed to: GitHub Actions).
    pub fn add_token(&self, token: &str) {
        self.accept_token(token, TokenKind::Workflow { write: true });
    }

    /// Accepts `token` (one a test made, not a job's) as being of `kind`.
    fn accept_token(&self, token: &str, kind: TokenKind) {
        self.inner.lock().tokens.insert(
            token.to_string(),
            Token {
                installation: self.config.installation_id,
                kind,
                runner: false,
            },
        );
    }

    /// Accepts `token` as an installation token of another App (id
    /// `app_id`) on the same installation's repositories: what it makes is
    /// that App's, not this one's.
    pub fn add_other_app_token(&self, token: &str, app_id: u64) {
        self.accept_token(token, TokenKind::OtherApp { id: app_id });
    }

    /// A new installation token of the App, as `actions/create-github-app-token`
    /// makes one in a workflow that holds the App's key.
    pub fn mint_installation_token(&self) -> String {
        self.mint("ghs_fake", TokenKind::Installation)
    }

    /// A workflow `GITHUB_TOKEN` with `permissions: contents: read`: it reads,
    /// and every write is refused as GitHub refuses it.
    pub fn mint_read_token(&self) -> String {
        self.mint("ghs_read", TokenKind::Workflow { write: false })
    }

    /// A workflow job's `GITHUB_TOKEN`: one that may write when the job's
    /// `permissions` grant `contents: write`.
    pub fn mint_workflow_token(&self, write: bool) -> String {
        if write {
            self.mint("ghs_actions", TokenKind::Workflow { write: true })
        } else {
            self.mint_read_token()
        }
    }

    /// A token for a job the fake runs.
    fn mint(&self, prefix: &str, kind: TokenKind) -> String {
        let mut s = self.inner.lock();
        let installation = self.config.installation_id;
        let t = format!("{prefix}_{installation}_{}", s.tokens.len() + 1);
        let token = Token {
            installation,
            kind,
            runner: true,
        };
        s.tokens.insert(t.clone(), token);
        t
    }

    /// What the token a request carries is, if the fake issued it.
    pub(crate) fn token_of(&self, headers: &HeaderMap) -> Option<Token> {
        let token = bearer(headers);
        self.inner.lock().tokens.get(token).copied()
    }

    /// How many webhooks of `event` were sent since the fake started.
    pub fn delivered_count(&self, event: &str) -> usize {
        self.inner
            .lock()
            .delivered_by_event
            .get(event)
            .copied()
            .unwrap_or(0)
    }

    /// The `workflow_run` webhooks sent so far, on the request log's clock:
    /// (seconds since start, action, the run's name).
    pub fn run_deliveries(&self) -> Vec<(f64, String, String)> {
        self.inner.lock().run_deliveries.clone()
    }

    /// From now on every webhook is delivered twice, each time with its own
    /// delivery id, as a redelivery is.
    pub fn deliver_twice(&self) {
        self.inner.lock().deliver_twice = true;
    }

    /// While `lost`, every webhook is noted as sent and reaches nobody:
    /// GitHub delivered it to a replica that died before it answered.
    pub fn lose_webhooks(&self, lost: bool) {
        self.inner.lock().webhooks_lost = lost;
    }

    /// From now on every `n`-th installation API call answers 502 (0 stops it).
    pub fn fail_every(&self, n: u64) {
        self.inner.lock().fail_every = n;
    }

    /// The request log: seconds since start, endpoint, status.
    pub fn request_log(&self) -> Vec<(f64, String, u16)> {
        self.inner.lock().log.clone()
    }

    /// Seconds since the fake started: the clock of its request log.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The calls the workflows' jobs made (with the tokens the fake gave
    /// them), as [`FakeGitHub::request_log`] has the others'.
    pub fn runner_log(&self) -> Vec<(f64, String, u16)> {
        self.inner.lock().runner_log.clone()
    }

    /// The most API calls the fake was answering at once.
    pub fn most_at_once(&self) -> usize {
        self.inner.lock().most_in_flight
    }

    /// Seconds within `[from, to]` (since the fake started) during which the
    /// fake was answering at least one API call.
    pub fn busy_between(&self, from: f64, to: f64) -> f64 {
        let mut spans: Vec<(f64, f64)> = self
            .inner
            .lock()
            .busy
            .iter()
            .map(|&(a, b)| (a.max(from), b.min(to)))
            .filter(|(a, b)| a < b)
            .collect();
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        let (mut total, mut end) = (0.0, f64::MIN);
        for (a, b) in spans {
            if b > end {
                total += b - a.max(end);
                end = b;
            }
        }
        total
    }

    /// The next `times` API calls answer `status`; with `reset_in`, as a rate limit.
    pub fn inject(
        &self,
        status: u16,
        times: u32,
        retry_after: Option<u64>,
        reset_in: Option<u64>,
        latency_ms: u64,
    ) {
        self.inner.lock().faults.push(Fault {
            status,
            times,
            retry_after,
            reset_in,
            latency_ms,
        });
    }

    /// The next `times` POSTs whose path ends with `suffix` are made, and
    /// then answered 502: GitHub did the work and the answer was lost.
    /// Another write is named with its method: `PUT /contents/notes.md`.
    pub fn lose_answers(&self, suffix: &str, times: u32) {
        self.inner
            .lock()
            .lost_answers
            .push((suffix.to_string(), times));
    }

    /// How many answers [`FakeGitHub::lose_answers`] has lost so far.
    pub fn answers_lost(&self) -> u64 {
        self.inner.lock().answers_lost
    }

    /// Posts a comment as `login` and delivers the webhook (twice if asked).
    /// Returns the comment id and each delivery's HTTP status.
    pub async fn comment(
        &self,
        repo: &str,
        issue: i64,
        login: &str,
        body: &str,
        twice: bool,
    ) -> (i64, Vec<u16>) {
        let (c, kind) = {
            let mut s = self.inner.lock();
            s.next_id += 1;
            let c = Comment {
                id: 1000 + s.next_id,
                repo: repo.to_string(),
                issue,
                user: login.to_string(),
                body: body.to_string(),
            };
            s.comments.push(c.clone());
            let kind = s
                .users
                .get(login)
                .map(|u| u.1.clone())
                .unwrap_or_else(|| "User".into());
            (c, kind)
        };
        let payload = self.payload("created", &c, &kind);
        let mut statuses = vec![self.deliver("issue_comment", &payload).await];
        if twice {
            statuses.push(self.deliver("issue_comment", &payload).await);
        }
        (c.id, statuses)
    }

    pub async fn edit(&self, comment_id: i64, body: &str) -> u16 {
        let found = {
            let mut s = self.inner.lock();
            let c = s.comments.iter_mut().find(|c| c.id == comment_id).map(|c| {
                c.body = body.to_string();
                c.clone()
            });
            c.map(|c| {
                let kind = s
                    .users
                    .get(&c.user)
                    .map(|u| u.1.clone())
                    .unwrap_or_else(|| "User".into());
                (c, kind)
            })
        };
        match found {
            Some((c, kind)) => {
                let payload = self.payload("edited", &c, &kind);
                self.deliver("issue_comment", &payload).await
            }
            None => 404,
        }
    }

    fn payload(&self, action: &str, c: &Comment, kind: &str) -> Value {
        let (owner, name) = c.repo.split_once('/').unwrap_or(("owner", "repo"));
        let mut issue = json!({ "number": c.issue, "title": "Operation", "state": "open" });
        // A pull request's conversation is an issue's: GitHub says which.
        if self.pulls(&c.repo).iter().any(|p| p.number == c.issue) {
            issue["pull_request"] = json!({
                "url": format!("{}/repos/{}/pulls/{}", self.url(), c.repo, c.issue)
            });
        }
        json!({
            "action": action,
            "issue": issue,
            "comment": { "id": c.id, "body": c.body, "created_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true), "user": { "login": c.user, "type": kind } },
            "repository": { "full_name": c.repo, "name": name, "owner": { "login": owner } },
            "sender": { "login": c.user, "type": kind },
            "installation": { "id": self.installation_of(&c.repo) }
        })
    }

    /// The App's installation on the account owning `repo`: the one set
    /// for its owner, else the default one.
    pub fn installation_of(&self, repo: &str) -> u64 {
        let owner = repo.split('/').next().unwrap_or("");
        self.inner
            .lock()
            .installations
            .get(owner)
            .copied()
            .unwrap_or(self.config.installation_id)
    }

    /// The App is installed on `owner`'s account as installation `id`:
    /// webhooks from its repositories carry it, and GitHub names it for them.
    pub fn set_installation(&self, owner: &str, id: u64) {
        self.inner.lock().installations.insert(owner.into(), id);
    }

    /// Signs and POSTs a webhook over plain HTTP/1.1; returns the status code.
    pub async fn deliver(&self, event: &str, payload: &Value) -> u16 {
        let Some(url) = &self.config.webhook_url else {
            return 0;
        };
        let body = serde_json::to_vec(payload).unwrap();
        let (twice, lost) = {
            let s = self.inner.lock();
            (s.deliver_twice, s.webhooks_lost)
        };
        if lost {
            self.note_delivery(event, "lost", 0);
            return 0;
        }
        let mut status = 0;
        for _ in 0..if twice { 2 } else { 1 } {
            let id = {
                let mut s = self.inner.lock();
                s.deliveries += 1;
                format!("fake-delivery-{}-{}", std::process::id(), s.deliveries)
            };
            status = send_webhook(url, event, &id, &self.config.webhook_secret, &body).await;
            self.note_delivery(event, &id, status);
        }
        status
    }
}

/// Sends one signed webhook request; returns the HTTP status (0 if unreachable).
pub async fn send_webhook(
    url: &str,
    event: &str,
    delivery: &str,
    secret: &str,
    body: &[u8],
) -> u16 {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let sig = hex::encode(mac.finalize().into_bytes());
    let Ok(mut stream) = tokio::net::TcpStream::connect(host).await else {
        return 0;
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nUser-Agent: GitHub-Hookshot/fake\r\nX-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={sig}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(body).await.is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Starts the fake on `127.0.0.1:0`; it serves until the runtime ends.
pub async fn start(config: Config) -> Arc<FakeGitHub> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let data_dir = config.data_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "fake-github-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ))
    });
    let fake = Arc::new(FakeGitHub {
        addr,
        config,
        inner: Watched::default(),
        started: Instant::now(),
        data_dir,
    });
    let app = api::routes(Router::new())
        .route("/app/installations/{id}/access_tokens", post(access_token))
        .route(
            "/repos/{owner}/{repo}/collaborators/{user}/permission",
            get(permission),
        )
        .route(
            "/repos/{owner}/{repo}/issues/comments/{id}/reactions",
            post(react),
        )
        .route(
            "/repos/{owner}/{repo}/issues/{n}/comments",
            get(list_comments).post(create_comment),
        )
        .route(
            "/login/oauth/authorize",
            get(signin::authorize_page).post(signin::authorize),
        )
        .route("/login/oauth/access_token", post(signin::access_token))
        .route("/user", get(signin::user))
        .route("/app", get(app::get_app))
        .route("/settings/apps/new", post(manifest::new_app))
        .route("/settings/apps/new/confirm", post(manifest::confirm))
        .route(
            "/organizations/{org}/settings/apps/new",
            post(manifest::new_org_app),
        )
        .route(
            "/app-manifests/{code}/conversions",
            post(manifest::conversion),
        )
        .route("/app/hook/deliveries", get(app::hook_deliveries))
        .route(
            "/repos/{owner}/{repo}/installation",
            get(app::repo_installation),
        )
        .route("/repos/{owner}/{repo}/actions/secrets", get(app::secrets))
        .route("/_fake/repos", post(control_repo))
        .route("/_fake/repos/{owner}/{repo}", get(control_repo_state))
        .route("/_fake/files", post(control_file))
        .route("/_fake/issues", post(control_issue))
        .route("/_fake/workflows", post(control_workflow))
        .route("/_fake/agent-workflow", post(control_agent_workflow))
        .route("/_fake/ci", post(control_ci))
        .route("/_fake/approvals", post(control_approval))
        .route("/_fake/reviews", post(control_approval))
        .route("/_fake/users", post(control_user))
        .route("/_fake/comments", post(control_comment))
        .route("/_fake/edit", post(control_edit))
        .route("/_fake/state", get(control_state))
        .route("/_fake/faults", post(control_faults))
        .layer(axum::middleware::from_fn(shapes::complete))
        .layer(axum::middleware::from_fn(paging::paginate))
        .layer(axum::middleware::from_fn_with_state(
            fake.clone(),
            quota::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(fake.clone(), busy));
    let app = match record::Recorder::from_env(addr.port()) {
        Some(r) => app.layer(axum::middleware::from_fn(move |req, next| {
            record::record(r.clone(), req, next)
        })),
        None => app,
    }
    .with_state(fake.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    fake
}

/// Text made safe in the fake's HTML pages (github.com's sign-in and
/// new-App pages).
pub(crate) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({ "message": message, "documentation_url": "https://docs.github.com/rest" })),
    )
        .into_response()
}

/// Logs the call, applies any injected fault, and checks the token.
/// Injected faults apply to installation API calls (`needs_token`), not to the
/// App's token exchange.
pub(crate) async fn gate(
    f: &FakeGitHub,
    endpoint: &str,
    headers: &HeaderMap,
    needs_token: bool,
) -> Result<(), Response> {
    // A workflow's own calls (a job's token) are the runner's, not the
    // service's: logged apart, never given a fault meant for the service.
    if let Some(token) = needs_token
        .then(|| f.inner.lock().tokens.get(bearer(headers)).copied())
        .flatten()
        .filter(|t| t.runner)
    {
        let writes = !endpoint.starts_with("GET ");
        let refused = writes && token.kind == (TokenKind::Workflow { write: false });
        let status = if refused { 403 } else { 200 };
        let at = f.started.elapsed().as_secs_f64();
        f.inner
            .lock()
            .runner_log
            .push((at, endpoint.to_string(), status));
        return if refused {
            let mut resp = error(
                StatusCode::FORBIDDEN,
                "Resource not accessible by integration",
            );
            // GitHub answers so to a token without the permission, though its
            // description does not list 403 for every endpoint; the job's
            // token was made read-only on purpose.
            resp.headers_mut()
                .insert(record::INJECTED, HeaderValue::from(1));
            Err(resp)
        } else {
            Ok(())
        };
    }
    let fault = {
        let mut s = f.inner.lock();
        *s.counts.entry(endpoint.to_string()).or_default() += 1;
        // A call that arrives within 100 ms of the announcement may have been
        // in flight already (another task of the client); later ones are early.
        let now = Instant::now();
        if s.rate_limited
            .is_some_and(|(from, until)| now > from + Duration::from_millis(100) && now < until)
        {
            s.early_calls += 1;
        }
        if needs_token {
            s.calls += 1;
        }
        let periodic = needs_token && s.fail_every > 0 && s.calls.is_multiple_of(s.fail_every);
        if periodic && s.faults.is_empty() {
            Some(Fault {
                status: 502,
                times: 1,
                retry_after: None,
                reset_in: None,
                latency_ms: 0,
            })
        } else {
            match s.faults.first_mut().filter(|_| needs_token) {
                Some(fl) => {
                    fl.times -= 1;
                    let out = fl.clone();
                    if fl.times == 0 {
                        s.faults.remove(0);
                    }
                    Some(out)
                }
                None => None,
            }
        }
    };
    let seq: Option<u64> = headers
        .get(quota::SEQ)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let record = |status: u16| {
        let mut s = f.inner.lock();
        let at = f.started.elapsed().as_secs_f64();
        s.log.push((at, endpoint.to_string(), status));
        if let Some(seq) = seq {
            let i = s.log.len() - 1;
            s.log_of_seq.insert(seq, i);
        }
    };
    if let Some(fl) = fault {
        if fl.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(fl.latency_ms)).await;
        }
        if fl.status >= 400 {
            record(fl.status);
            let mut resp = error(
                StatusCode::from_u16(fl.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                "injected fault",
            );
            let h = resp.headers_mut();
            h.insert(record::INJECTED, HeaderValue::from(1));
            if let Some(ra) = fl.retry_after {
                h.insert("retry-after", HeaderValue::from(ra));
            }
            if let Some(r) = fl.reset_in {
                let reset = chrono::Utc::now().timestamp() + r as i64;
                h.insert("x-ratelimit-remaining", HeaderValue::from(0));
                h.insert("x-ratelimit-reset", HeaderValue::from(reset));
                f.inner.lock().rate_limited =
                    Some((Instant::now(), Instant::now() + Duration::from_secs(r)));
            }
            return Err(resp);
        }
    }
    if needs_token {
        let token = f.inner.lock().tokens.get(bearer(headers)).copied();
        let Some(token) = token else {
            record(401);
            return Err(error(StatusCode::UNAUTHORIZED, "Bad credentials"));
        };
        let writes = !endpoint.starts_with("GET ");
        if writes && token.kind == (TokenKind::Workflow { write: false }) {
            record(403);
            return Err(error(
                StatusCode::FORBIDDEN,
                "Resource not accessible by integration",
            ));
        }
    }
    record(200);
    Ok(())
}

/// A token the fake issued: whose, and what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub installation: u64,
    pub kind: TokenKind,
    /// Issued to a job the fake runs (not to the service or a test).
    pub runner: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// The App's installation token: what it makes is the App's.
    Installation,
    /// A workflow's `GITHUB_TOKEN`: what it makes is GitHub Actions'.
    Workflow { write: bool },
    /// An installation token of another App on the repository (a CI App,
    /// say): what it makes is that App's.
    OtherApp { id: u64 },
}

/// The login GitHub gives what the App makes: its slug and `[bot]`.
pub const APP_LOGIN: &str = "sprint-supervisor[bot]";
/// The login GitHub gives what a workflow's `GITHUB_TOKEN` makes.
pub const ACTIONS_LOGIN: &str = "github-actions[bot]";

/// Who a request's token writes as: the App's bot for its installation
/// tokens, GitHub Actions' for a workflow's token.
pub(crate) fn author(f: &FakeGitHub, headers: &HeaderMap) -> String {
    match f.inner.lock().tokens.get(bearer(headers)).map(|t| t.kind) {
        Some(TokenKind::Workflow { .. }) => ACTIONS_LOGIN.into(),
        Some(TokenKind::OtherApp { id }) => format!("another-app-{id}[bot]"),
        _ => APP_LOGIN.into(),
    }
}

/// The token in a request's `Authorization` header ("" without one).
fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("token ")))
        .unwrap_or("")
}

#[derive(Deserialize)]
struct Claims {
    iss: serde_json::Value,
    iat: i64,
    exp: i64,
}

async fn access_token(
    State(f): State<Shared>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gate(
        &f,
        "POST /app/installations/{id}/access_tokens",
        &headers,
        false,
    )
    .await
    {
        return r;
    }
    if let Err(r) = app_jwt(&f, &headers) {
        return r;
    }
    let token = {
        let mut s = f.inner.lock();
        let t = format!("ghs_fake_{id}_{}", s.tokens.len() + 1);
        s.tokens.insert(
            t.clone(),
            Token {
                installation: id,
                kind: TokenKind::Installation,
                runner: false,
            },
        );
        t
    };
    let expires = (chrono::Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    (StatusCode::CREATED, Json(json!({ "token": token, "expires_at": expires, "permissions": {}, "repository_selection": "all" }))).into_response()
}

/// Checks the App's JWT as GitHub does: signed by the App's key (when the
/// fake knows it), issued by the App, expiring within ten minutes.
// The error is the answer itself, returned as the handlers return theirs.
#[allow(clippy::result_large_err)]
pub(crate) fn app_jwt(f: &Shared, headers: &HeaderMap) -> Result<(), Response> {
    let jwt = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let claims = match &f.config.app_public_key_pem {
        Some(pem) => {
            let Ok(key) = jsonwebtoken::DecodingKey::from_rsa_pem(pem.as_bytes()) else {
                return Err(error(StatusCode::INTERNAL_SERVER_ERROR, "bad fake key"));
            };
            let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            // `iss` is the App id as a number, which the library's check rejects; checked below.
            v.required_spec_claims = ["exp"].iter().map(|s| s.to_string()).collect();
            v.validate_aud = false;
            match jsonwebtoken::decode::<Claims>(jwt, &key, &v) {
                Ok(d) => d.claims,
                Err(e) => {
                    return Err(error(
                        StatusCode::UNAUTHORIZED,
                        &format!("A JSON web token could not be decoded: {e}"),
                    ))
                }
            }
        }
        None => match jsonwebtoken::dangerous::insecure_decode::<Claims>(jwt) {
            Ok(d) => d.claims,
            Err(_) => {
                return Err(error(
                    StatusCode::UNAUTHORIZED,
                    "A JSON web token could not be decoded",
                ))
            }
        },
    };
    let iss = claims
        .iss
        .as_u64()
        .or_else(|| claims.iss.as_str().and_then(|s| s.parse().ok()));
    // GitHub: `exp` at most 10 minutes from now (with a little clock skew), `iat`
    // may be back-dated; `iss` is the App id.
    let now = chrono::Utc::now().timestamp();
    if iss != Some(f.config.app_id) || claims.exp - now > 630 || claims.iat > now + 30 {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "'Issuer' claim ('iss') must be the App id and 'exp' at most 10 minutes from now",
        ));
    }
    Ok(())
}

async fn permission(
    State(f): State<Shared>,
    Path((owner, repo, user)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gate(
        &f,
        "GET /repos/{o}/{r}/collaborators/{u}/permission",
        &headers,
        true,
    )
    .await
    {
        return r;
    }
    let _ = (owner, repo);
    let role = f.inner.lock().users.get(&user).map(|u| u.0.clone());
    match role {
        // A test hook: a role `!<status>` makes the endpoint answer that status.
        Some(role) if role.starts_with('!') => {
            let status = role[1..]
                .parse()
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
            let mut resp = error(status, "Validation Failed");
            resp.headers_mut()
                .insert(record::INJECTED, HeaderValue::from(1));
            resp
        }
        Some(role) => {
            let legacy = match role.as_str() {
                "maintain" => "write",
                "triage" => "read",
                r => r,
            };
            Json(json!({ "permission": legacy, "role_name": role, "user": { "login": user } }))
                .into_response()
        }
        None => error(StatusCode::NOT_FOUND, &format!("{user} is not a user")),
    }
}

#[derive(Deserialize)]
struct ReactionBody {
    content: String,
}

async fn react(
    State(f): State<Shared>,
    Path((_o, _r, id)): Path<(String, String, i64)>,
    headers: HeaderMap,
    Json(b): Json<ReactionBody>,
) -> Response {
    if let Err(r) = gate(
        &f,
        "POST /repos/{o}/{r}/issues/comments/{id}/reactions",
        &headers,
        true,
    )
    .await
    {
        return r;
    }
    let mut s = f.inner.lock();
    let exists = s
        .reactions
        .iter()
        .any(|(c, content, _)| *c == id && *content == b.content);
    if !exists {
        s.reactions.push((id, b.content.clone(), APP_LOGIN.into()));
    }
    let status = if exists {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (
        status,
        Json(json!({ "id": s.reactions.len(), "content": b.content })),
    )
        .into_response()
}

fn comment_json(c: &Comment) -> Value {
    json!({ "id": c.id, "body": c.body, "user": { "login": c.user, "type": if c.user.ends_with("[bot]") { "Bot" } else { "User" } } })
}

async fn list_comments(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(resp) = gate(&f, "GET /repos/{o}/{r}/issues/{n}/comments", &headers, true).await {
        return resp;
    }
    let repo = format!("{o}/{r}");
    let list: Vec<Value> = f.comments(&repo, n).iter().map(comment_json).collect();
    Json(list).into_response()
}

#[derive(Deserialize)]
struct CommentBody {
    body: String,
}

async fn create_comment(
    State(f): State<Shared>,
    Path((o, r, n)): Path<(String, String, i64)>,
    headers: HeaderMap,
    Json(b): Json<CommentBody>,
) -> Response {
    if let Err(resp) = gate(
        &f,
        "POST /repos/{o}/{r}/issues/{n}/comments",
        &headers,
        true,
    )
    .await
    {
        return resp;
    }
    if let Some(r) = api::issues::too_long(&b.body) {
        return r;
    }
    let user = author(&f, &headers);
    let mut s = f.inner.lock();
    s.next_id += 1;
    let c = Comment {
        id: 1000 + s.next_id,
        repo: format!("{o}/{r}"),
        issue: n,
        user,
        body: b.body,
    };
    s.comments.push(c.clone());
    (StatusCode::CREATED, Json(comment_json(&c))).into_response()
}

pub(crate) fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[derive(Deserialize)]
struct UserBody {
    login: String,
    role: String,
    #[serde(rename = "type")]
    kind: Option<String>,
}

async fn control_user(State(f): State<Shared>, Json(b): Json<UserBody>) -> StatusCode {
    f.add_user(&b.login, &b.role, b.kind.as_deref().unwrap_or("User"));
    StatusCode::NO_CONTENT
}

// The control API for a person driving the fake by hand (see `fake-github
// --help` and the guide's "Trying it without GitHub"): each route is one of
// the calls the tests make in process.

#[derive(Deserialize)]
struct NewRepo {
    repo: String,
}

async fn control_repo(State(f): State<Shared>, Json(b): Json<NewRepo>) -> StatusCode {
    f.ensure_repo(&b.repo);
    StatusCode::NO_CONTENT
}

async fn control_repo_state(
    State(f): State<Shared>,
    Path((o, r)): Path<(String, String)>,
) -> Json<Value> {
    let repo = format!("{o}/{r}");
    Json(json!({
        "issues": f.issues(&repo),
        "comments": f.comments_in(&repo),
        "pulls": f.pulls(&repo),
        "check_runs": f.check_runs(&repo),
        "runs": f.runs(&repo),
    }))
}

#[derive(Deserialize)]
struct NewFile {
    repo: String,
    path: String,
    content: String,
}

async fn control_file(State(f): State<Shared>, Json(b): Json<NewFile>) -> StatusCode {
    f.ensure_repo(&b.repo);
    f.add_file(&b.repo, &b.path, &b.content);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct NewIssue {
    repo: String,
    title: String,
    #[serde(default)]
    body: String,
    #[serde(default = "default_login")]
    login: String,
}

fn default_login() -> String {
    "mia".into()
}

async fn control_issue(State(f): State<Shared>, Json(b): Json<NewIssue>) -> Json<Value> {
    f.ensure_repo(&b.repo);
    Json(json!({ "number": f.open_issue_by(&b.repo, &b.title, &b.body, &b.login) }))
}

#[derive(Deserialize)]
struct NewWorkflow {
    repo: String,
    file: String,
    command: String,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

async fn control_workflow(State(f): State<Shared>, Json(b): Json<NewWorkflow>) -> StatusCode {
    let env: Vec<(&str, &str)> = b
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    f.set_workflow(&b.repo, &b.file, &b.command, &env);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct NewAgentWorkflow {
    repo: String,
    /// The agent workflow's YAML file, run as GitHub runs it.
    yaml: String,
    /// The `supervise` binary its install steps fetch as the release.
    supervise: String,
    /// `scripts/install-release` (default: beside the YAML's repository,
    /// `<root>/scripts/install-release` for `<root>/.github/workflows/…`).
    #[serde(default)]
    install_release: Option<String>,
    /// The agent's command, run with its prompt on stdin, as Claude Code.
    agent: String,
    /// What the agent's command has in its environment besides the job's.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The repository's secrets and variables, over those of
    /// [`workflow::Setup::claude_code`].
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
}

async fn control_agent_workflow(
    State(f): State<Shared>,
    Json(b): Json<NewAgentWorkflow>,
) -> Response {
    let yaml_path = std::path::Path::new(&b.yaml);
    let yaml = match std::fs::read_to_string(yaml_path) {
        Ok(y) => y,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("{}: {e}", b.yaml)),
    };
    let install_release = b
        .install_release
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let root = yaml_path
                .ancestors()
                .nth(3)
                .unwrap_or(std::path::Path::new("."));
            root.join("scripts/install-release")
        });
    let env: Vec<(String, String)> = b.env.into_iter().collect();
    let agents = f.data_dir.join("agents").join(&b.repo);
    let claude = match workflow::scripted_claude(&agents, &b.agent, &env) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return error(StatusCode::BAD_REQUEST, &format!("env: {e}"))
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut setup = workflow::Setup::claude_code(
        &claude,
        std::path::Path::new(&b.supervise),
        &install_release,
    );
    setup.secrets.extend(b.secrets);
    setup.vars.extend(b.vars);
    match workflow::Planned::new(&yaml, setup) {
        Ok(planned) => {
            let file = yaml_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            f.ensure_repo(&b.repo);
            f.set_workflow_yaml(&b.repo, &file, planned);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(why) => error(StatusCode::BAD_REQUEST, &why),
    }
}

#[derive(Deserialize)]
struct NewCi {
    repo: String,
    command: String,
}

async fn control_ci(State(f): State<Shared>, Json(b): Json<NewCi>) -> StatusCode {
    f.set_ci(&b.repo, &b.command);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct NewApproval {
    repo: String,
    pull: i64,
    #[serde(default = "default_login")]
    login: String,
    /// `APPROVED` (the default), `CHANGES_REQUESTED` or `COMMENTED`.
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    body: String,
}

/// A review of a pull request, an approval unless `state` says otherwise;
/// answers the review's id (404 for a pull request the fake does not have,
/// 422 for a state GitHub has not).
async fn control_approval(
    State(f): State<Shared>,
    Json(b): Json<NewApproval>,
) -> Result<Json<Value>, StatusCode> {
    let state = b.state.as_deref().unwrap_or("APPROVED");
    if !matches!(state, "APPROVED" | "CHANGES_REQUESTED" | "COMMENTED") {
        return Err(StatusCode::UNPROCESSABLE_ENTITY);
    }
    match f.review(&b.repo, b.pull, &b.login, state, &b.body, &[]) {
        0 => Err(StatusCode::NOT_FOUND),
        id => Ok(Json(json!({ "review_id": id }))),
    }
}

#[derive(Deserialize)]
struct NewComment {
    repo: String,
    issue: i64,
    login: String,
    body: String,
    #[serde(default)]
    twice: bool,
}

async fn control_comment(State(f): State<Shared>, Json(b): Json<NewComment>) -> Json<Value> {
    let (id, statuses) = f
        .comment(&b.repo, b.issue, &b.login, &b.body, b.twice)
        .await;
    Json(json!({ "comment_id": id, "deliveries": statuses }))
}

#[derive(Deserialize)]
struct Edit {
    comment_id: i64,
    body: String,
}

async fn control_edit(State(f): State<Shared>, Json(b): Json<Edit>) -> Json<Value> {
    Json(json!({ "delivery": f.edit(b.comment_id, &b.body).await }))
}

async fn control_state(
    State(f): State<Shared>,
    Query(_q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let s = f.inner.lock();
    Json(json!({
        "comments": s.comments,
        "reactions": s.reactions.iter().map(|(c, r, u)| json!({"comment": c, "content": r, "user": u})).collect::<Vec<_>>(),
        "counts": s.counts,
        "log": s.log.iter().map(|(t, e, st)| json!({"at": t, "endpoint": e, "status": st})).collect::<Vec<_>>(),
        "early_calls": s.early_calls,
    }))
}

#[derive(Deserialize)]
struct FaultBody {
    status: u16,
    times: u32,
    retry_after: Option<u64>,
    reset_in: Option<u64>,
    #[serde(default)]
    latency_ms: u64,
}

async fn control_faults(State(f): State<Shared>, body: Bytes) -> StatusCode {
    match serde_json::from_slice::<FaultBody>(&body) {
        Ok(b) => {
            f.inject(
                b.status,
                b.times.max(1),
                b.retry_after,
                b.reset_in,
                b.latency_ms,
            );
            StatusCode::NO_CONTENT
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}
