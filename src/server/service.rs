//! The webhook service: intake over HTTP, processing from the store.
//!
//! Intake answers fast whatever GitHub or processing is doing: it refuses bodies
//! over 25 MiB before reading them (413), checks the signature before parsing
//! (401), stores the delivery, and only then answers 2xx. Workers claim stored
//! deliveries with a lease and carry them out, at most a few at a time per
//! installation.

use super::auth::{self, Actor, Permission, Policy, Verdict};
use super::command::{self, Command};
use super::payload::CommentEvent;
use super::signature;
use crate::engine::naming;
use crate::engine::Input;
use crate::github::operation::{OpError, Operations, Origin};
use crate::github::repo::Repo;
use crate::github::{GitHub, GitHubError};
use crate::settings;
use crate::store::sql::{Intake, SqlStore};
use crate::sync::LockExt;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};

pub const MAX_BODY: usize = 25 * 1024 * 1024;

pub struct Service {
    pub store: SqlStore,
    pub github: Arc<GitHub>,
    pub ops: Arc<Operations>,
    pub secrets: Vec<SecretString>,
    pub metrics: Option<PrometheusHandle>,
    pub bot_allow_list: Vec<String>,
    pub per_installation: usize,
    pub lease: Duration,
    work: Notify,
    limits: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Deliveries in a row whose processing panicked: `/readyz` fails from
    /// [`FAILING_AFTER`] on, so an orchestrator takes the instance out.
    panics_in_a_row: std::sync::atomic::AtomicU32,
    /// Memory for bodies not yet verified, in KiB: a body's declared length is
    /// reserved before it is read, so slow or huge unsigned bodies cannot hold
    /// more than the budget between them. Bodies up to [`SMALL_BODY`] (nearly
    /// every real delivery) have their own pool, so they never queue behind
    /// large ones (the semaphore is fair: a large waiter would block them).
    unverified_small: Semaphore,
    unverified_large: Semaphore,
    /// Set on shutdown: workers claim nothing new.
    stopping: std::sync::atomic::AtomicBool,
    /// Deliveries being processed now, handed back if shutdown outlasts them.
    in_flight: Mutex<std::collections::HashSet<(String, i64)>>,
}

/// See [`Service::unverified_small`]: 1 MiB bodies, 32 MiB in all.
const SMALL_BODY: u64 = 1024 * 1024;
const SMALL_BUDGET_KIB: usize = 32 * 1024;
/// Larger bodies (up to 25 MiB): 64 MiB in all.
const LARGE_BUDGET_KIB: usize = 64 * 1024;
/// A delivery's body must arrive within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a delivery waits for room in the unverified-body budget.
const BUDGET_WAIT: Duration = Duration::from_secs(5);

/// Consecutive panicking deliveries after which the service says it is not ready.
const FAILING_AFTER: u32 = 3;

impl Service {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: SqlStore,
        github: Arc<GitHub>,
        ops: Arc<Operations>,
        secrets: Vec<SecretString>,
        metrics: Option<PrometheusHandle>,
        bot_allow_list: Vec<String>,
        per_installation: usize,
        lease: Duration,
    ) -> Arc<Service> {
        Arc::new(Service {
            store,
            github,
            ops,
            secrets,
            metrics,
            bot_allow_list,
            per_installation: per_installation.max(1),
            lease,
            work: Notify::new(),
            limits: Mutex::new(HashMap::new()),
            panics_in_a_row: std::sync::atomic::AtomicU32::new(0),
            unverified_small: Semaphore::new(SMALL_BUDGET_KIB),
            unverified_large: Semaphore::new(LARGE_BUDGET_KIB),
            stopping: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::new(std::collections::HashSet::new()),
        })
    }

    fn limit(&self, installation: i64) -> Arc<Semaphore> {
        self.limits
            .locked()
            .entry(installation)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_installation)))
            .clone()
    }
}

pub fn router(svc: Arc<Service>) -> Router {
    Router::new()
        .route("/webhook", post(intake))
        .route("/api/github/webhooks", post(intake))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(svc)
}

async fn readyz(State(svc): State<Arc<Service>>) -> (StatusCode, &'static str) {
    if svc
        .panics_in_a_row
        .load(std::sync::atomic::Ordering::Relaxed)
        >= FAILING_AFTER
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "workers failing: the last deliveries all panicked",
        );
    }
    if svc.store.ping().await {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "database unreachable")
    }
}

async fn metrics(State(svc): State<Arc<Service>>) -> String {
    svc.metrics.as_ref().map(|h| h.render()).unwrap_or_default()
}

/// The events this service acts on; others are acknowledged and dropped.
const HANDLED: &[&str] = &["issue_comment", "workflow_run"];

/// A verified delivery's event as a metric label: handled events by name,
/// anything else as `other` (the set of series stays fixed).
fn event_label(event: &str) -> &'static str {
    HANDLED
        .iter()
        .copied()
        .chain(["ping", "installation", "installation_repositories"])
        .find(|e| *e == event)
        .unwrap_or("other")
}

async fn intake(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    body: Body,
) -> (StatusCode, &'static str) {
    let started = Instant::now();
    let event = headers
        .get("x-github-event")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let delivery = headers
        .get("x-github-delivery")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let span = tracing::info_span!("delivery", %delivery, %event);
    // The span covers the awaits below (a guard held across them would not).
    tracing::Instrument::instrument(
        async move {
            // Refuse an oversized body from its declared length, before reading any of it;
            // a body without a length is cut off while reading.
            let declared = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let unverified = |o: &'static str, code: StatusCode, text: &'static str| {
                metrics::counter!("supervise_deliveries_total", "event" => "unverified", "outcome" => o).increment(1);
                (code, text)
            };
            let Some(declared) = declared else {
                // GitHub always sends a length; without one the memory a body
                // will take cannot be reserved.
                return unverified("no_length", StatusCode::LENGTH_REQUIRED, "Content-Length is required\n");
            };
            if declared > MAX_BODY as u64 {
                return unverified("too_large", StatusCode::PAYLOAD_TOO_LARGE, "body over 25 MiB\n");
            }
            let kib = (declared.div_ceil(1024) as u32).max(1);
            let pool = if declared <= SMALL_BODY {
                &svc.unverified_small
            } else {
                &svc.unverified_large
            };
            let Ok(Ok(_reserved)) = tokio::time::timeout(BUDGET_WAIT, pool.acquire_many(kib)).await
            else {
                tracing::warn!(declared, "unverified-body budget exhausted; refusing for now");
                return unverified("busy", StatusCode::SERVICE_UNAVAILABLE, "busy; try again\n");
            };
            let body: Bytes = match tokio::time::timeout(
                BODY_TIMEOUT,
                axum::body::to_bytes(body, declared as usize),
            )
            .await
            {
                Ok(Ok(b)) => b,
                Ok(Err(_)) => return unverified("bad_body", StatusCode::BAD_REQUEST, "body does not match its length\n"),
                Err(_) => return unverified("slow_body", StatusCode::REQUEST_TIMEOUT, "body too slow\n"),
            };
            let sig = headers
                .get("x-hub-signature-256")
                .and_then(|v| v.to_str().ok());
            let secrets: Vec<&[u8]> = svc
                .secrets
                .iter()
                .map(|s| s.expose_secret().as_bytes())
                .collect();
            // Labels from the request only after its signature is verified, and
            // only known event names: an attacker cannot mint metric series.
            let outcome = |o: &'static str, code: StatusCode, text: &'static str| {
                let label = if o == "bad_signature" {
                    "unverified"
                } else {
                    event_label(&event)
                };
                metrics::counter!("supervise_deliveries_total", "event" => label, "outcome" => o)
                    .increment(1);
                metrics::histogram!("supervise_intake_seconds").record(started.elapsed().as_secs_f64());
                (code, text)
            };
            if !signature::verify(&secrets, &body, sig) {
                tracing::warn!("rejected: missing or wrong signature");
                return outcome(
                    "bad_signature",
                    StatusCode::UNAUTHORIZED,
                    "signature does not match\n",
                );
            }
            if event.is_empty() || delivery.is_empty() || delivery.len() > 100 {
                return outcome(
                    "bad_request",
                    StatusCode::BAD_REQUEST,
                    "X-GitHub-Event and X-GitHub-Delivery are required\n",
                );
            }
            if !HANDLED.contains(&event.as_str()) {
                return outcome("ignored", StatusCode::ACCEPTED, "ignored\n");
            }
            let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
                return outcome("bad_request", StatusCode::BAD_REQUEST, "body is not JSON\n");
            };
            let installation = payload["installation"]["id"].as_i64();
            let action = payload["action"].as_str().unwrap_or("");
            let dedupe = match event.as_str() {
                "workflow_run" => payload["workflow_run"]["id"]
                    .as_i64()
                    .map(|r| format!("run:{r}:{action}")),
                _ => payload["comment"]["id"]
                    .as_i64()
                    .map(|c| format!("comment:{c}:{action}")),
            };
            let text = String::from_utf8_lossy(&body);
            match svc
                .store
                .intake(&delivery, &event, dedupe.as_deref(), installation, &text)
                .await
            {
                Ok(Intake::Stored) => {
                    svc.work.notify_one();
                    outcome("stored", StatusCode::ACCEPTED, "stored\n")
                }
                Ok(Intake::Duplicate) => outcome("duplicate", StatusCode::OK, "duplicate\n"),
                Err(e) => {
                    tracing::error!(error = %e, "cannot store the delivery; GitHub will show it failed and it can be redelivered");
                    outcome(
                        "store_error",
                        StatusCode::SERVICE_UNAVAILABLE,
                        "cannot store the delivery\n",
                    )
                }
            }
        },
        span,
    )
    .await
}

/// Stops the workers: nothing new is claimed; deliveries in progress get
/// `grace` to finish, and those still running then are handed back to the
/// store (their lease released), for the next start or another replica.
pub async fn shut_down(svc: &Service, grace: Duration) {
    svc.stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    svc.work.notify_waiters();
    let until = Instant::now() + grace;
    while !svc.in_flight.locked().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left: Vec<(String, i64)> = svc.in_flight.locked().iter().cloned().collect();
    for (id, attempts) in left {
        tracing::warn!(delivery = %id, "still in progress at shutdown; handing it back");
        if let Err(e) = svc
            .store
            .retry_later(&id, attempts, Duration::ZERO, "handed back at shutdown")
            .await
        {
            tracing::error!(delivery = %id, error = %e, "cannot hand the delivery back; its lease will expire");
        }
    }
}

/// Runs `n` workers until [`shut_down`].
pub fn spawn_workers(svc: Arc<Service>, n: usize) {
    for _ in 0..n.max(1) {
        let svc = svc.clone();
        tokio::spawn(async move {
            while !svc.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                match svc.store.claim(svc.lease).await {
                    Ok(Some(d)) => {
                        svc.in_flight.locked().insert((d.id.clone(), d.attempts));
                        // One GitHub call may wait out a rate limit far longer than
                        // the lease: renew it while the work goes on, so no other
                        // worker takes the delivery over and answers it twice.
                        let renewer = {
                            let (svc, id, attempts) = (svc.clone(), d.id.clone(), d.attempts);
                            tokio::spawn(async move {
                                let every = (svc.lease / 3).max(Duration::from_millis(100));
                                loop {
                                    tokio::time::sleep(every).await;
                                    match svc.store.renew(&id, attempts, svc.lease).await {
                                        Ok(true) => {}
                                        Ok(false) => {
                                            tracing::warn!(delivery = %id, "lost the lease to another worker");
                                            return;
                                        }
                                        Err(e) => {
                                            tracing::warn!(delivery = %id, error = %e, "cannot renew the lease; will try again")
                                        }
                                    }
                                }
                            })
                        };
                        let limit = svc.limit(d.installation.unwrap_or(0));
                        let _permit = limit.acquire_owned().await;
                        let span = tracing::info_span!("process", delivery = %d.id, event = %d.event, attempt = d.attempts);
                        let began = Instant::now();
                        let work = {
                            let (svc, event, payload) =
                                (svc.clone(), d.event.clone(), d.payload.clone());
                            async move {
                                if event == "workflow_run" {
                                    workflow_run(&svc, &payload).await
                                } else {
                                    process(&svc, &payload).await
                                }
                            }
                        };
                        // Its own task: a panic in one delivery is caught here, the
                        // delivery retried later, and the worker goes on.
                        let result = match tokio::spawn(tracing::Instrument::instrument(
                            work,
                            span.clone(),
                        ))
                        .await
                        {
                            Ok(r) => {
                                svc.panics_in_a_row
                                    .store(0, std::sync::atomic::Ordering::Relaxed);
                                r
                            }
                            Err(e) => {
                                let n = svc
                                    .panics_in_a_row
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                                    + 1;
                                metrics::counter!("supervise_processing_panics_total").increment(1);
                                tracing::error!(delivery = %d.id, panics_in_a_row = n, error = %e, "processing panicked; the delivery will be retried");
                                Err(GitHubError::Transport {
                                    what: "processing".into(),
                                    message: "an internal error (panic) interrupted processing"
                                        .into(),
                                })
                            }
                        };
                        metrics::histogram!("supervise_processing_seconds", "outcome" => if result.is_ok() { "ok" } else { "error" }).record(began.elapsed().as_secs_f64());
                        let r = match result {
                            Ok(()) => svc.store.finish(&d.id, d.attempts, None).await,
                            Err(e) if e.is_transient() && d.attempts < 8 => {
                                let delay =
                                    Duration::from_secs(1u64 << d.attempts.clamp(0, 8) as u32);
                                tracing::warn!(delivery = %d.id, error = %e, ?delay, "transient failure; will retry");
                                svc.store
                                    .retry_later(&d.id, d.attempts, delay, &e.to_string())
                                    .await
                            }
                            Err(e) => {
                                tracing::error!(delivery = %d.id, error = %e, "delivery failed for good");
                                svc.store
                                    .finish(&d.id, d.attempts, Some(&e.to_string()))
                                    .await
                            }
                        };
                        if let Err(e) = r {
                            tracing::error!(error = %e, "cannot record the delivery's outcome");
                        }
                        renewer.abort();
                        svc.in_flight.locked().remove(&(d.id.clone(), d.attempts));
                    }
                    Ok(None) => {
                        let _ =
                            tokio::time::timeout(Duration::from_millis(500), svc.work.notified())
                                .await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot claim work; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
    }
}

/// Where a comment was made, from its payload.
struct Place {
    installation: u64,
    repo: String,
    issue: i64,
    comment: i64,
    /// The command comment's time: our replies come after it.
    since: Option<String>,
}

impl Place {
    /// The repository the comment was made in, through the service's client.
    fn repo_on<'a>(&'a self, svc: &'a Service) -> Repo<'a> {
        Repo {
            gh: &svc.github,
            installation: self.installation,
            name: &self.repo,
        }
    }
}

/// The person's role; a stranger (404) has none. Any other error is returned, so
/// the delivery is retried later — nothing acts without an answer.
/// An answer that is not a clear grant (a 422, a 4xx, an unreadable body) is
/// `Ok(Err(why))`: the command is refused with a reply. Server errors and rate
/// limits are `Err`, so the delivery is retried later.
async fn permission(
    svc: &Service,
    p: &Place,
    login: &str,
) -> Result<Result<Permission, String>, GitHubError> {
    let path = format!("/repos/{}/collaborators/{}/permission", p.repo, login);
    match svc.github.get(p.installation, &path).await {
        Ok(r) => {
            let v = r.json();
            Ok(v["role_name"]
                .as_str()
                .or(v["permission"].as_str())
                .map(Permission::parse)
                .ok_or_else(|| "the permission answer names no role".to_string()))
        }
        Err(GitHubError::Http { status: 404, .. }) => Ok(Ok(Permission::None)),
        Err(GitHubError::Http { status, body, .. }) if (400..500).contains(&status) => {
            Ok(Err(format!("GitHub answered {status}: {body}")))
        }
        Err(e) => Err(e),
    }
}

/// The repository's rules from `.github/supervise.yml` (defaults when there is
/// none), or the reason the file is unusable.
async fn repo_policy(svc: &Service, p: &Place) -> Result<Result<Policy, String>, GitHubError> {
    let repo = p.repo_on(svc);
    let text = match repo.file(".github/supervise.yml", None).await {
        Ok(None) => return Ok(Ok(Policy::default())),
        Ok(Some((text, _))) => Ok(text),
        Err(GitHubError::Http {
            status: 422, body, ..
        }) => Err(format!(".github/supervise.yml: {body}")),
        Err(e) => return Err(e),
    };
    Ok(text
        .and_then(|t| settings::parse(&t, ".github/supervise.yml"))
        .and_then(|f| {
            Policy::from_settings(f.permissions.as_ref(), f.bots.as_deref())
                .map_err(|e| format!(".github/supervise.yml: {e}"))
        }))
}

/// Posts a reply unless one with the same marker is already there: a reply is
/// made once even when the delivery is processed again after a crash.
/// The most commands one comment acts on; the rest are named as not read.
const MAX_COMMANDS: usize = 10;

/// The one reply to a comment, whatever it held (posted once: a re-processed
/// delivery finds it by its marker).
async fn reply(svc: &Service, p: &Place, text: &str) -> Result<(), GitHubError> {
    let repo = p.repo_on(svc);
    // Only comments made since the command are looked through: a long thread
    // cannot push an earlier reply of ours off the page.
    let marker = format!("<!-- supervise:reply {} -->", p.comment);
    repo.comment_once(p.issue, p.since.as_deref(), &marker, text)
        .await
}

/// Acts on one stored delivery.
pub async fn process(svc: &Service, payload: &str) -> Result<(), GitHubError> {
    let ev = match CommentEvent::parse(payload) {
        Ok(ev) => ev,
        Err(e) => {
            tracing::warn!(error = %e, "unusable payload; dropped");
            return Ok(());
        }
    };
    // Only new comments act: edits and deletions never do.
    // With a token (the Action), events carry no installation and need none.
    let installation = ev.installation.or(svc.github.is_token().then_some(0));
    let Some(installation) = installation.filter(|_| ev.action == "created") else {
        return Ok(());
    };
    let place = Place {
        installation,
        repo: ev.repo.clone(),
        issue: ev.issue,
        comment: ev.comment_id,
        since: ev.created_at.clone(),
    };
    let (body, login) = (ev.body.as_str(), ev.login.as_str());
    let actor = Actor {
        login,
        kind: &ev.kind,
    };
    let commands = command::parse_comment(body);
    if commands.is_empty() {
        return Ok(());
    }
    let policy = repo_policy(svc, &place).await?;
    let perm = permission(svc, &place, login).await?;
    // A person who cannot even read the repository is not answered at all:
    // otherwise anyone could make the bot post on any public issue.
    let stranger = perm == Ok(Permission::None);
    let total = commands.len();
    let mut answers: Vec<String> = Vec::new();
    let mut mistakes = false;
    let mut helped = false;
    for (n, parsed) in commands.into_iter().take(MAX_COMMANDS).enumerate() {
        // A mistake is answered like `help`: to anyone who may read the repository.
        let cmd = parsed.clone().unwrap_or(Command::Help);
        let verdict = match &policy {
            Ok(policy) => auth::authorise(&cmd, &actor, perm.clone(), &svc.bot_allow_list, policy),
            // An unusable policy must not loosen a stricter one: only `help` acts.
            Err(e) => match auth::authorise(&cmd, &actor, perm.clone(), &svc.bot_allow_list, &Policy::default()) {
                Verdict::Allowed if cmd != Command::Help => Verdict::Refused(format!("I did not act because `.github/supervise.yml` is not valid:\n\n```\n{e}\n```\nPlease fix it and say the command again.")),
                v => v,
            },
        };
        match verdict {
            Verdict::Ignored => continue,
            Verdict::Refused(_) if stranger => {
                tracing::info!(
                    login,
                    "a command from someone without access to the repository; not answered"
                );
                continue;
            }
            _ => {}
        }
        if answers.is_empty() {
            let path = format!(
                "/repos/{}/issues/comments/{}/reactions",
                place.repo, place.comment
            );
            svc.github
                .post(installation, &path, &json!({ "content": "eyes" }))
                .await?;
        }
        let text = match (verdict, parsed) {
            (Verdict::Refused(why), _) => why,
            (_, Err(e)) => {
                mistakes = true;
                e.to_string()
            }
            (_, Ok(cmd)) => {
                helped |= cmd == Command::Help;
                answer(svc, &place, login, n, &cmd).await?
            }
        };
        answers.push(text);
    }
    if answers.is_empty() {
        return Ok(());
    }
    let mut text = if answers.len() == 1 {
        answers.remove(0)
    } else {
        answers
            .iter()
            .enumerate()
            .map(|(i, a)| format!("**{}.** {a}", i + 1))
            .collect::<Vec<_>>()
            .join("\n\n---\n\n")
    };
    // A mistake is answered with the list of commands, once per reply.
    if mistakes && !helped {
        text.push_str("\n\n");
        text.push_str(&command::help_text());
    }
    if total > MAX_COMMANDS {
        text.push_str(&format!(
            "\n\n_I acted on the first {MAX_COMMANDS} commands of this comment; the other {} were not read. Put them in another comment._",
            total - MAX_COMMANDS
        ));
    }
    reply(svc, &place, &text).await
}

fn op_error(e: OpError) -> GitHubError {
    match e {
        OpError::GitHub(g) => g,
        OpError::Store(e) => GitHubError::Transport {
            what: "the store".into(),
            message: e.to_string(),
        },
        OpError::Busy(op) => GitHubError::Transport {
            what: format!("operation {op}"),
            message: "another replica holds it".into(),
        },
    }
}

/// A `workflow_run` delivery: one of our agent runs started or finished.
async fn workflow_run(svc: &Service, payload: &str) -> Result<(), GitHubError> {
    let Ok(v) = serde_json::from_str::<Value>(payload) else {
        return Ok(());
    };
    svc.ops.workflow_run(&v).await.map_err(op_error)
}

async fn answer(
    svc: &Service,
    p: &Place,
    login: &str,
    n: usize,
    cmd: &Command,
) -> Result<String, GitHubError> {
    let origin = Origin {
        installation: p.installation,
        repo: &p.repo,
        issue: p.issue,
        comment: p.comment,
        created_at: p.since.as_deref(),
    };
    let ops = &svc.ops;
    let argument = match cmd {
        Command::Start { plan } => plan.clone(),
        Command::Resume { unit } => unit.clone(),
        Command::Breakdown { doc } => doc.clone(),
        _ => None,
    };
    let name = if cmd.name().is_empty() {
        "default"
    } else {
        cmd.name()
    };
    svc.store
        .record_command(
            &format!("{}:{}", p.comment, n),
            &p.repo,
            p.issue,
            login,
            name,
            argument.as_deref(),
        )
        .await
        .map_err(|e| GitHubError::Transport {
            what: "recording the command".into(),
            message: e.to_string(),
        })?;
    let text = match cmd {
        Command::Help => Ok(command::help_text()),
        Command::Status => ops.status(&p.repo, p.issue).await.map(|s| {
            s.unwrap_or_else(|| {
                "No operation has been started on this issue yet. Comment `/supervise start` to begin.".to_string()
            })
        }),
        Command::Start { plan } => ops.start(&origin, plan.as_deref()).await,
        // §: resume when an operation exists here, otherwise start.
        Command::Default => match ops.on_issue(&p.repo, p.issue).await.map_err(op_error)? {
            Some(_) => ops.command(&p.repo, p.issue, Input::Resume { unit: None }).await,
            None => ops.start(&origin, None).await,
        },
        Command::Resume { unit } => ops.command(&p.repo, p.issue, Input::Resume { unit: unit.clone() }).await,
        Command::Stop => ops.command(&p.repo, p.issue, Input::Stop).await,
        Command::Killall => ops.command(&p.repo, p.issue, Input::Killall).await,
        Command::NameFeature => match ops.on_issue(&p.repo, p.issue).await.map_err(op_error)? {
            Some(_) => ops.command(&p.repo, p.issue, Input::NameFeature).await,
            None => Ok(naming::REPROACH.to_string()),
        },
        Command::Breakdown { .. } | Command::Analyze | Command::Prioritize | Command::Evaluate => Ok(format!(
            "`/supervise {}` is not available yet in this version of Sprint Supervisor. On your machine, `supervise plan show` prints what the reader found in the plan.",
            cmd.name()
        )),
    };
    match text {
        Ok(t) => Ok(t),
        // A permanent refusal from GitHub (a missing repository, a protected
        // branch) is the person's to fix: say so instead of retrying for ever.
        Err(e) if !e.is_transient() => Ok(format!(
            "Sprint Supervisor could not carry out `/supervise {name}`:\n\n```\n{e}\n```"
        )),
        Err(e) => Err(op_error(e)),
    }
}
