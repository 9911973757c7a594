//! The webhook service: intake over HTTP, processing from the store.
//!
//! Intake answers fast whatever GitHub or processing is doing: it refuses bodies
//! over 25 MiB before reading them (413), checks the signature before parsing
//! (401), stores the delivery, and only then answers 2xx. Workers claim stored
//! deliveries with a lease and carry them out, at most a few at a time per
//! installation.

use super::budget::BodyBudget;
use super::signature;
use crate::github::event::{Event, Unread};
use crate::github::{GitHub, GitHubError};
use crate::place::hosted::handle::Handler;
use crate::place::hosted::{OpError, Operations};
use crate::store::sql::{Claimed, Handoff, Intake, IntakeQueue, NewDelivery, SqlStore};
use crate::sync::LockExt;
use crate::telemetry::{waited, WaitStage};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

pub const MAX_BODY: usize = 25 * 1024 * 1024;

pub struct Service {
    pub store: SqlStore,
    /// Where deliveries are stored and their ends recorded: writes arriving
    /// together share a commit (see `store::sql::intake`).
    intake: IntakeQueue,
    /// Deliveries just stored, already claimed for this process's workers.
    handoff: Arc<Handoff>,
    /// What a delivery's event is made to do (shared with the Action).
    pub handler: Handler,
    pub secrets: Vec<SecretString>,
    pub metrics: Option<PrometheusHandle>,
    pub per_installation: usize,
    pub lease: Duration,
    limits: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Deliveries in a row whose processing panicked: `/readyz` fails from
    /// [`FAILING_AFTER`] on, so an orchestrator takes the instance out.
    panics_in_a_row: std::sync::atomic::AtomicU32,
    /// Memory for bodies not yet verified, taken as their bytes arrive (see
    /// [`read_unverified`]): slow or huge unsigned bodies cannot hold more
    /// than the budget between them, and when it is all taken the slowest
    /// gives way to a newer body. Bodies up to [`SMALL_BODY`] (nearly every
    /// real delivery) have their own pool, so large ones never crowd them.
    unverified_small: BodyBudget,
    unverified_large: BodyBudget,
    /// Set on shutdown: workers claim nothing new.
    stopping: std::sync::atomic::AtomicBool,
    /// Deliveries being processed now, handed back if shutdown outlasts them.
    in_flight: Mutex<std::collections::HashSet<(String, i64)>>,
    /// Places for deliveries processed whose end is not yet committed: when
    /// the store lags, the workers wait for one instead of leaving ever more
    /// ends behind them in memory (deliveries wait in the store meanwhile).
    ends: Arc<Semaphore>,
}

/// See [`Service::unverified_small`]: 1 MiB bodies, 32 MiB in all.
const SMALL_BODY: u64 = 1024 * 1024;
const SMALL_BUDGET_KIB: u64 = 32 * 1024;
/// Larger bodies (up to 25 MiB): 64 MiB in all.
const LARGE_BUDGET_KIB: u64 = 64 * 1024;
/// A delivery's body must arrive within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(20);
/// After this grace, a body must have kept up with [`BODY_RATE_FLOOR`].
const BODY_GRACE: Duration = Duration::from_secs(2);
/// The slowest a body may arrive, on average, in bytes a second: a 25 MB
/// payload at this rate takes longer than [`BODY_TIMEOUT`] anyway, and
/// GitHub's arrive at many times it.
const BODY_RATE_FLOOR: u64 = 16 * 1024;
/// How long a delivery waits for room in the unverified-body budget, when
/// no slower body is there to give way.
const BUDGET_WAIT: Duration = Duration::from_secs(5);

/// Deliveries stored already claimed, waiting in memory for a worker: enough
/// for a few commits' worth under full load, few enough that a crash leaves
/// little waiting out its lease (those it leaves are processed after it).
const HANDOFF_ROOM: usize = 256;

/// Tries of a delivery whose installation GitHub keeps pausing: each waits
/// out a pause of up to an hour, so this is days, not seconds.
const MAX_RATE_LIMITED_TRIES: i64 = 64;

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
        let handoff = Handoff::new(HANDOFF_ROOM, lease);
        Arc::new(Service {
            intake: IntakeQueue::start_with(store.clone(), Some(handoff.clone())),
            handoff,
            store: store.clone(),
            handler: Handler {
                store,
                github,
                ops,
                bot_allow_list,
                throttle: Default::default(),
            },
            secrets,
            metrics,
            per_installation: per_installation.max(1),
            lease,
            limits: Mutex::new(HashMap::new()),
            panics_in_a_row: std::sync::atomic::AtomicU32::new(0),
            unverified_small: BodyBudget::new(SMALL_BUDGET_KIB),
            unverified_large: BodyBudget::new(LARGE_BUDGET_KIB),
            stopping: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::new(std::collections::HashSet::new()),
            ends: Arc::new(Semaphore::new(ENDS_UNCOMMITTED)),
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

async fn readyz(State(svc): State<Arc<Service>>) -> (StatusCode, String) {
    if svc
        .panics_in_a_row
        .load(std::sync::atomic::Ordering::Relaxed)
        >= FAILING_AFTER
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "workers failing: the last deliveries all panicked".into(),
        );
    }
    if !svc.store.ping().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "database unreachable".into(),
        );
    }
    // Ready, and saying which installations GitHub has paused: the service
    // can still take deliveries, but their work waits.
    let mut text = String::from("ready");
    let mut paused = svc.handler.github.paused();
    paused.sort();
    for (id, wait) in paused {
        text.push_str(&format!(
            "\ninstallation {id}: paused by GitHub's rate limit for {} s more",
            wait.as_secs()
        ));
    }
    (StatusCode::OK, text)
}

async fn metrics(State(svc): State<Arc<Service>>) -> String {
    // Gauges read at the scrape, so they are never stale.
    for (id, wait) in svc.handler.github.paused() {
        metrics::gauge!("supervise_github_paused_seconds", "installation" => id.to_string())
            .set(wait.as_secs_f64());
    }
    metrics::gauge!("supervise_operations_loaded").set(svc.handler.ops.loaded() as f64);
    for (pool, budget) in [
        ("small", &svc.unverified_small),
        ("large", &svc.unverified_large),
    ] {
        metrics::gauge!("supervise_unverified_body_kib", "pool" => pool)
            .set(budget.held_kib() as f64);
    }
    let (entries, bytes) = svc.handler.github.etag_cache_size();
    metrics::gauge!("supervise_github_etag_cache_entries").set(entries as f64);
    metrics::gauge!("supervise_github_etag_cache_bytes").set(bytes as f64);
    // Tasks that never end are a leak a heap profile shows only as bytes.
    metrics::gauge!("supervise_tasks_alive").set(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks() as f64,
    );
    svc.metrics.as_ref().map(|h| h.render()).unwrap_or_default()
}

/// A verified delivery's event as a metric label: handled events by name,
/// anything else as `other` (the set of series stays fixed).
fn event_label(event: &str) -> &'static str {
    Event::NAMES
        .iter()
        .copied()
        .chain(["ping", "installation", "installation_repositories"])
        .find(|e| *e == event)
        .unwrap_or("other")
}

async fn intake(State(svc): State<Arc<Service>>, request: Request) -> (StatusCode, &'static str) {
    let started = Instant::now();
    // The request taken whole, not its headers by extractor: that one
    // copies the header map, an allocation for each custom header's name.
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
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
            let pool = if declared <= SMALL_BODY {
                &svc.unverified_small
            } else {
                &svc.unverified_large
            };
            let body = match read_unverified(body, declared, pool).await {
                Ok(b) => b,
                Err(BodyRefused::Busy) => {
                    tracing::warn!(declared, "unverified-body budget exhausted; refusing for now");
                    return unverified("busy", StatusCode::SERVICE_UNAVAILABLE, "busy; try again\n");
                }
                Err(BodyRefused::Bad) => return unverified("bad_body", StatusCode::BAD_REQUEST, "body does not match its length\n"),
                Err(BodyRefused::Slow) => return unverified("slow_body", StatusCode::REQUEST_TIMEOUT, "body too slow\n"),
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
            // JSON is UTF-8 throughout: checked here for the whole body.
            let Ok(text) = std::str::from_utf8(&body) else {
                return outcome("bad_request", StatusCode::BAD_REQUEST, "body is not JSON\n");
            };
            // Read once, here: the worker gets the event, not GitHub's body.
            let (payload, dedupe, installation, settled) = match Event::read(&event, text) {
                Err(Unread::NotHandled(_)) => return outcome("ignored", StatusCode::ACCEPTED, "ignored\n"),
                Ok(ev) => {
                    // A delivery that needs nothing done is stored done in the
                    // same commit, not queued.
                    let settled = !svc.handler.may_act(&ev);
                    (ev.stored(), ev.dedupe_key(), ev.installation(), settled)
                }
                // GitHub signed it, so it is kept as it came (settled, for a
                // person to look at); it is not ours to answer.
                Err(Unread::Unusable(why)) => {
                    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
                        return outcome("bad_request", StatusCode::BAD_REQUEST, "body is not JSON\n");
                    }
                    tracing::warn!(error = %why, "unusable payload; stored, not acted on");
                    (text.to_owned(), None, None, true)
                }
            };
            let stored = svc
                .intake
                .submit(NewDelivery {
                    id: delivery.clone(),
                    event: event.clone(),
                    dedupe,
                    installation: installation.and_then(|i| i64::try_from(i).ok()),
                    payload,
                    settled,
                })
                .await;
            match stored {
                Ok(Intake::Stored) if settled => outcome("settled", StatusCode::ACCEPTED, "stored\n"),
                Ok(Intake::Stored) => outcome("stored", StatusCode::ACCEPTED, "stored\n"),
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

/// Why a body was not read whole.
enum BodyRefused {
    /// The memory for unverified bodies is taken.
    Busy,
    /// More or less than its declared length, or broken off.
    Bad,
    /// Below the rate floor, or over [`BODY_TIMEOUT`].
    Slow,
}

/// Reads a body not yet verified, holding memory from `pool` only for the
/// bytes that have arrived — a client that declares a large body and sends
/// it a byte at a time holds almost nothing — and refusing one that falls
/// below [`BODY_RATE_FLOOR`] after [`BODY_GRACE`]: GitHub sends its payloads
/// (at most 25 MB) at once, so only an attacker is that slow, and it is cut
/// off within seconds instead of holding its place for [`BODY_TIMEOUT`]. One
/// just above the floor is cut off as soon as a faster body needs its memory.
async fn read_unverified(
    body: axum::body::Body,
    declared: u64,
    pool: &BodyBudget,
) -> Result<Bytes, BodyRefused> {
    use futures_util::StreamExt;
    let started = tokio::time::Instant::now();
    let mut stream = body.into_data_stream();
    let mut buf = Vec::with_capacity(declared.min(64 * 1024) as usize);
    let share = pool.enter();
    loop {
        // The next bytes are due by when those received so far stop
        // keeping up with the floor.
        let due = started
            + BODY_GRACE
            + Duration::from_secs_f64((buf.len() + 1) as f64 / BODY_RATE_FLOOR as f64);
        let due = due.min(started + BODY_TIMEOUT);
        let next = tokio::select! {
            next = tokio::time::timeout_at(due, stream.next()) => next,
            () = share.cut_off() => return Err(BodyRefused::Busy),
        };
        let chunk = match next {
            Err(_) => return Err(BodyRefused::Slow),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(BodyRefused::Bad),
            Ok(Some(Ok(c))) => c,
        };
        let total = buf.len() as u64 + chunk.len() as u64;
        if total > declared {
            return Err(BodyRefused::Bad);
        }
        if share.hold(total, BUDGET_WAIT).await.is_err() {
            return Err(BodyRefused::Busy);
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.len() as u64 != declared {
        return Err(BodyRefused::Bad);
    }
    Ok(Bytes::from(buf))
}

/// Stops the workers: nothing new is claimed; deliveries in progress get
/// `grace` to finish, and those still running then are handed back to the
/// store (their lease released), for the next start or another replica.
pub async fn shut_down(svc: &Service, grace: Duration) {
    svc.stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    svc.handoff.ready.notify_waiters();
    let until = Instant::now() + grace;
    while !svc.in_flight.locked().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut left: Vec<(String, i64)> = svc.in_flight.locked().iter().cloned().collect();
    left.extend(
        svc.handoff
            .take_all()
            .into_iter()
            .map(|d| (d.id, d.attempts)),
    );
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
/// Deliveries a worker claims at once (one statement): under load the claim
/// is one write for several deliveries instead of one each.
const CLAIM_BATCH: usize = 8;

/// Deliveries whose end may wait for its commit at once: beyond it, the
/// workers wait. Unbounded, the ends were tasks that grew with the store's
/// lag (a soak on a machine another build kept busy had 2,089 tasks alive
/// and 328 MB of RSS; each end then kept its delivery's body too).
const ENDS_UNCOMMITTED: usize = 1024;

/// The worker's next delivery: the next one waiting in memory (handed over
/// at intake, or claimed by a worker beyond the one it works on), with its
/// lease renewed first if a third of it has passed while it waited (a lease
/// still well within its time cannot have been taken over; one another
/// worker took is left to that worker); else a fresh claim from the store,
/// whose extras are shared with the other workers.
///
/// `found_none`: when this worker's last claim from the store found nothing
/// (`None` if it found some), which spares the store claims that would find
/// nothing again (see `Handoff::worth_a_claim`).
async fn next_claim(
    svc: &Service,
    found_none: &mut Option<Instant>,
) -> Result<Option<Claimed>, crate::store::sql::SqlError> {
    while let Some((at, d)) = svc.handoff.take() {
        if at.elapsed() < svc.lease / 3 || svc.store.renew(&d.id, d.attempts, svc.lease).await? {
            return Ok(Some(d));
        }
    }
    if !svc.handoff.worth_a_claim(*found_none) {
        return Ok(None);
    }
    let mark = svc.handoff.pending_mark();
    let mut fresh = svc.store.claim_many(svc.lease, CLAIM_BATCH).await?;
    if fresh.is_empty() {
        svc.handoff.drained_at(mark);
        *found_none = Some(Instant::now());
        return Ok(None);
    }
    *found_none = None;
    let first = fresh.remove(0);
    svc.handoff.share(fresh, Instant::now());
    Ok(Some(first))
}

pub fn spawn_workers(svc: Arc<Service>, n: usize) {
    for _ in 0..n.max(1) {
        tokio::spawn(worker(svc.clone()));
    }
}

/// One worker: takes deliveries one at a time and processes each. The end of
/// one is recorded in the next shared commit while the worker goes on to the
/// next; the delivery stays in flight, so a shutdown waits for it, until its
/// end is committed.
async fn worker(svc: Arc<Service>) {
    let mut found_none = None;
    while !svc.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        match next_claim(&svc, &mut found_none).await {
            Ok(Some(d)) => {
                // A retry's wait is its delay, not a queue's.
                if d.attempts == 1 {
                    let stored_for = crate::store::sql::now_ms().saturating_sub(d.stored_at_ms);
                    waited(
                        WaitStage::Queue,
                        Duration::from_millis(stored_for.max(0) as u64),
                    );
                }
                svc.in_flight.locked().insert((d.id.clone(), d.attempts));
                let result = process(&svc, &d).await;
                // The semaphore is never closed; were it, the end would be
                // recorded all the same, only unbounded.
                let place = svc.ends.clone().acquire_owned().await.ok();
                let svc = svc.clone();
                // Its end needs its id, not its body.
                let (id, attempts) = (d.id, d.attempts);
                tokio::spawn(async move {
                    record_end(&svc, id, attempts, result).await;
                    drop(place);
                });
            }
            Ok(None) => {
                let _ =
                    tokio::time::timeout(Duration::from_millis(500), svc.handoff.ready.notified())
                        .await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot claim work; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    // Stopping: what a worker claimed and shared after the shutdown took
    // what was waiting goes back now, rather than when its lease runs out.
    for d in svc.handoff.take_all() {
        let _ = svc
            .store
            .retry_later(&d.id, d.attempts, Duration::ZERO, "handed back at shutdown")
            .await;
    }
}

/// Carries a claimed delivery out, within its installation's limit, its
/// lease renewed meanwhile. The work runs in the worker's own task (a
/// delivery that needs nothing done — most comments — is over without a
/// task or a timer being made); a panic in it is caught here, the delivery
/// retried later, and the worker goes on.
async fn process(svc: &Arc<Service>, d: &Claimed) -> Result<(), OpError> {
    let work = async {
        match Event::from_stored(&d.event, &d.payload) {
            Ok(ev) => svc.handler.event(ev).await,
            Err(why) => {
                tracing::warn!(error = %why, "a stored delivery that does not read; not acted on");
                Ok(())
            }
        }
    };
    carry_out(svc, d, work).await
}

/// [`process`] with the work given: the permit, the lease's renewal and the
/// catching of a panic do not depend on what the work is (and a test can give
/// work that panics).
async fn carry_out(
    svc: &Arc<Service>,
    d: &Claimed,
    work: impl std::future::Future<Output = Result<(), OpError>>,
) -> Result<(), OpError> {
    use futures_util::FutureExt;
    let limit = svc.limit(d.installation.unwrap_or(0));
    let span =
        tracing::info_span!("process", delivery = %d.id, event = %d.event, attempt = d.attempts);
    // The permit is waited for, the work done and the permit given back
    // inside the one future the lease is renewed beside.
    let work = async {
        let asked = Instant::now();
        let permit = limit.acquire_owned().await;
        waited(WaitStage::Installation, asked.elapsed());
        let began = Instant::now();
        let outcome = std::panic::AssertUnwindSafe(tracing::Instrument::instrument(work, span))
            .catch_unwind()
            .await;
        drop(permit);
        (outcome, began)
    };
    tokio::pin!(work);
    // One GitHub call may wait out a rate limit far longer than the lease,
    // and a delivery may wait that long for its installation's permit:
    // renew the lease all the while, so no other worker takes the delivery
    // over and answers it twice.
    let every = (svc.lease / 3).max(Duration::from_millis(100));
    let mut leased = true;
    let (outcome, began) = loop {
        tokio::select! {
            biased;
            outcome = &mut work => break outcome,
            () = tokio::time::sleep(every), if leased => {
                match svc.store.renew(&d.id, d.attempts, svc.lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(delivery = %d.id, "lost the lease to another worker");
                        leased = false;
                    }
                    Err(e) => tracing::warn!(delivery = %d.id, error = %e, "cannot renew the lease; will try again"),
                }
            }
        }
    };
    let result = match outcome {
        Ok(r) => {
            svc.panics_in_a_row
                .store(0, std::sync::atomic::Ordering::Relaxed);
            r
        }
        Err(panic) => {
            let n = svc
                .panics_in_a_row
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            metrics::counter!("supervise_processing_panics_total").increment(1);
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(delivery = %d.id, panics_in_a_row = n, panic = %what, "processing panicked; the delivery will be retried");
            Err(OpError::Panicked)
        }
    };
    metrics::histogram!(
        "supervise_processing_seconds",
        "event" => event_label(&d.event),
        "outcome" => if result.is_ok() { "ok" } else { "error" }
    )
    .record(began.elapsed().as_secs_f64());
    result
}

/// Records how a delivery's processing ended: done, failed for good, or put
/// back to be retried after a delay if the failure was transient.
async fn record_end(svc: &Service, id: String, attempts: i64, result: Result<(), OpError>) {
    let r = match result {
        Ok(()) => svc.intake.finish(&id, attempts, None).await,
        // GitHub paused the installation for longer than a call may wait:
        // the delivery waits out the pause itself, without spending one of
        // its tries on it (a bound remains, far beyond any real pause).
        Err(OpError::GitHub(GitHubError::RateLimited { wait_secs, .. }))
            if attempts < MAX_RATE_LIMITED_TRIES =>
        {
            let delay = Duration::from_secs(wait_secs + 1);
            tracing::warn!(delivery = %id, ?delay, "the installation is paused by GitHub's rate limit; the delivery waits for the pause");
            svc.store
                .retry_later(
                    &id,
                    attempts,
                    delay,
                    "waiting for GitHub's rate limit to reset",
                )
                .await
        }
        Err(e) if e.is_transient() && attempts < 8 => {
            let delay = Duration::from_secs(1u64 << attempts.clamp(0, 8) as u32);
            tracing::warn!(delivery = %id, error = %e, ?delay, "transient failure; will retry");
            svc.store
                .retry_later(&id, attempts, delay, &e.to_string())
                .await
        }
        Err(e) => {
            tracing::error!(delivery = %id, error = %e, "delivery failed for good");
            svc.intake.finish(&id, attempts, Some(&e.to_string())).await
        }
    };
    if let Err(e) = r {
        tracing::error!(delivery = %id, error = %e, "cannot record the delivery's outcome");
    }
    svc.in_flight.locked().remove(&(id, attempts));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::hosted::{InstallationLimits, OpTimings};

    async fn service(lease: Duration) -> Arc<Service> {
        let store = SqlStore::connect("sqlite::memory:").await.unwrap();
        let key = SecretString::from(include_str!("../../tests/fixtures/app/test-app-key.pem"));
        // Nothing listens there: the work under test makes no request.
        let github = Arc::new(GitHub::new("http://127.0.0.1:9", 1, &key).unwrap());
        let ops = Operations::new(
            "test".into(),
            github.clone(),
            store.clone(),
            OpTimings::default(),
            InstallationLimits::default(),
            Default::default(),
        );
        Service::new(store, github, ops, Vec::new(), None, Vec::new(), 2, lease)
    }

    async fn ready(svc: &Arc<Service>) -> StatusCode {
        readyz(State(svc.clone())).await.0
    }

    /// A worker whose claim found nothing leaves the store alone a while,
    /// but holds no other worker back: on PostgreSQL two claims racing for
    /// the same rows leave one with none though thousands wait, and a
    /// restarted service's backlog was then claimed eight at a time per
    /// look-again instead of at once. And one that found some claims again.
    #[tokio::test]
    async fn a_claim_that_found_nothing_holds_back_only_its_own_worker() {
        let svc = service(Duration::from_secs(60)).await;
        // The store was found drained...
        let mut first = None;
        assert!(next_claim(&svc, &mut first).await.unwrap().is_none());
        assert!(first.is_some());
        // ...then a backlog appears there that this process was not told of
        // (stored by another replica, or leases run out).
        for n in 0..20 {
            let id = format!("d{n}");
            svc.store
                .intake(&id, "ping", None, None, "{}")
                .await
                .unwrap();
        }
        assert!(
            next_claim(&svc, &mut first).await.unwrap().is_none(),
            "the worker that found nothing looks again only after a while"
        );
        let mut second = None;
        let mut claimed = 0;
        while let Some(_d) = next_claim(&svc, &mut second).await.unwrap() {
            claimed += 1;
        }
        assert_eq!(
            claimed, 20,
            "another worker takes the whole backlog at once"
        );
        assert!(second.is_some(), "and then found the store empty");
    }

    /// What one worker claims beyond the delivery it works on waits for the
    /// first worker free, not behind that work: kept by the worker that
    /// claimed it, a delivery waited up to seven deliveries' processing
    /// while other workers were idle.
    #[tokio::test]
    async fn a_claimed_batch_is_shared_with_the_other_workers() {
        let svc = service(Duration::from_secs(60)).await;
        for n in 0..3 {
            svc.store
                .intake(&format!("d{n}"), "ping", None, None, "{}")
                .await
                .unwrap();
        }
        let (mut one, mut other) = (None, None);
        let first = next_claim(&svc, &mut one).await.unwrap().expect("a claim");
        assert_eq!(first.id, "d0");
        // The first worker is busy with d0; the next free worker goes on
        // with the rest, oldest first, without claiming again.
        let second = next_claim(&svc, &mut other).await.unwrap();
        assert_eq!(second.map(|d| d.id).as_deref(), Some("d1"));
        let third = next_claim(&svc, &mut other).await.unwrap();
        assert_eq!(third.map(|d| (d.id, d.attempts)), Some(("d2".into(), 1)));
    }

    /// While the store lags in committing deliveries' ends, a worker waits
    /// with the one it processed instead of claiming more: the rest wait in
    /// the store, not as ends piling up in memory.
    #[tokio::test]
    async fn workers_wait_while_too_many_ends_are_uncommitted() {
        let svc = service(Duration::from_secs(60)).await;
        for id in ["d1", "d2"] {
            svc.store
                .intake(id, "ping", None, None, "{}")
                .await
                .unwrap();
        }
        let all = svc
            .ends
            .clone()
            .acquire_many_owned(ENDS_UNCOMMITTED as u32)
            .await
            .unwrap();
        let worker = tokio::spawn(worker(svc.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            svc.in_flight.locked().len(),
            1,
            "one processed, its end waiting"
        );
        assert_eq!(svc.store.counts().await.unwrap(), (2, 0));
        drop(all);
        let began = Instant::now();
        while svc.store.counts().await.unwrap() != (2, 2) {
            assert!(began.elapsed() < Duration::from_secs(10), "not both done");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        worker.abort();
    }

    /// A panic in a delivery's work is caught: the delivery is put back to be
    /// retried after a delay, its installation's permit is given back, the
    /// worker's next delivery is processed, and `/readyz` fails only while
    /// deliveries keep panicking in a row.
    #[tokio::test]
    async fn a_panic_in_processing_is_caught_and_the_delivery_retried_later() {
        let svc = service(Duration::from_secs(60)).await;
        for id in ["d1", "d2", "d3", "d4"] {
            svc.store
                .intake(id, "issue_comment", None, Some(7), "{}")
                .await
                .unwrap();
        }
        let claimed = svc.store.claim_many(svc.lease, 4).await.unwrap();
        assert_eq!(claimed.len(), 4);
        let mut claimed = claimed.into_iter();
        for n in 1..=FAILING_AFTER {
            let d = claimed.next().unwrap();
            let r = carry_out(&svc, &d, async { panic!("injected for the test") }).await;
            assert!(matches!(r, Err(OpError::Panicked)), "{r:?}");
            assert_eq!(
                svc.limit(7).available_permits(),
                2,
                "the permit is given back after a panic"
            );
            let expected = if n < FAILING_AFTER {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            assert_eq!(ready(&svc).await, expected, "after {n} panics in a row");
            svc.in_flight.locked().insert((d.id.clone(), d.attempts));
            record_end(&svc, d.id, d.attempts, r).await;
        }
        assert!(svc.in_flight.locked().is_empty());
        // The three are waiting out their retry delay (2 s after a first
        // attempt), not lost and not claimable at once.
        assert!(svc.store.claim(svc.lease).await.unwrap().is_none());
        assert_eq!(svc.store.counts().await.unwrap(), (4, 0));
        // The next delivery's work runs as usual and the service is ready again.
        let d = claimed.next().unwrap();
        let r = carry_out(&svc, &d, async { Ok(()) }).await;
        assert!(r.is_ok());
        assert_eq!(ready(&svc).await, StatusCode::OK);
        record_end(&svc, d.id, d.attempts, r).await;
        assert_eq!(svc.store.counts().await.unwrap(), (4, 1));
        // After the delay, a panicked delivery is claimed again, as its
        // second attempt.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let again = svc.store.claim(svc.lease).await.unwrap().expect("retried");
        assert_eq!(again.attempts, 2);
        assert!(["d1", "d2", "d3"].contains(&again.id.as_str()));
    }

    /// A delivery waiting for its installation's permit — held by others
    /// whose GitHub calls wait out a long rate limit — keeps its lease all
    /// the while, so no other worker takes it over and answers it twice.
    #[tokio::test]
    async fn the_lease_is_renewed_while_a_delivery_waits_for_its_permit() {
        let lease = Duration::from_millis(300);
        let svc = service(lease).await;
        svc.store
            .intake("d1", "issue_comment", None, Some(7), "{}")
            .await
            .unwrap();
        let d = svc.store.claim(lease).await.unwrap().unwrap();
        let busy = svc.limit(7).acquire_many_owned(2).await.unwrap();
        let waiting = {
            let svc = svc.clone();
            tokio::spawn(async move { carry_out(&svc, &d, async { Ok(()) }).await })
        };
        // Four leases' time later, the delivery is still its worker's.
        tokio::time::sleep(lease * 4).await;
        assert!(
            svc.store.claim(lease).await.unwrap().is_none(),
            "the lease ran out while the delivery waited for its permit"
        );
        drop(busy);
        assert!(waiting.await.unwrap().is_ok());
    }
}
