//! The whole service on one listener: the store, the GitHub client, the
//! operations and their timer, the intake workers and the HTTP front, until
//! `shutdown` resolves. `supervise serve` calls it from the command line; the
//! in-process story tests call it with the same configuration in a task.

use super::listen;
use super::service::{self, Service};
use super::web::session::Sessions;
use super::web::{self, Access, Web};
use crate::github::GitHub;
use crate::place::hosted::{InstallationLimits, OpTimings, Operations};
use crate::store::sql::SqlStore;
use anyhow::{Context, Result};
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::{ExposeSecret, SecretString};
use std::future::Future;
use std::sync::Arc;

/// When a started service looks a second time for what its replica's last
/// run held (see `SqlStore::release_held`).
const RELEASE_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// Everything the service needs, already read and checked by its caller.
pub struct ServiceConfig {
    pub app_id: u64,
    /// The App's private key, PEM text.
    pub private_key: SecretString,
    /// Each webhook secret accepted (more than one while rotating).
    pub webhook_secrets: Vec<SecretString>,
    pub api_url: String,
    pub database_url: String,
    pub bot_allow_list: Vec<String>,
    /// Deliveries processed at once, and per installation.
    pub workers: usize,
    pub per_installation: usize,
    /// This replica's name in operation leases.
    pub replica_id: String,
    pub timings: OpTimings,
    /// Caps above one operation, per installation.
    pub limits: InstallationLimits,
    /// The operator's receiver of notices (`SUPERVISE_NOTIFY_URL`).
    pub notifier: crate::notify::Notifier,
    /// Where `GET /metrics` reads from; `None` answers it empty.
    pub metrics: Option<PrometheusHandle>,
    /// How long finished deliveries are kept; `None`: for ever.
    pub delivery_retention: Option<std::time::Duration>,
    /// The web view's sign-in with GitHub; `None`: the pages say how to
    /// turn it on, and show nothing else.
    pub web: Option<WebSignIn>,
}

/// What the web view needs to sign people in with GitHub: the App's client
/// id and secret (its settings page), where GitHub is, and where people
/// reach this service.
pub struct WebSignIn {
    pub client_id: String,
    pub client_secret: SecretString,
    /// `https://github.com`, or GitHub Enterprise's address.
    pub web_url: String,
    /// This service's address as browsers reach it (`https://…`).
    pub public_url: String,
    /// Signs the cookies; a random key when `None` (sessions end with the process).
    pub session_key: Option<SecretString>,
}

/// Serves on `listener` until `shutdown` resolves, then stops the workers
/// within the listener's grace.
pub async fn run(
    config: ServiceConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let store = SqlStore::connect(&config.database_url)
        .await
        .context("opening the database (DATABASE_URL)")?
        .held_by(&config.replica_id);
    // What this replica's last run held when it stopped goes back in line
    // now, and once more a little later: a write the last run's kill cut off
    // may still be committed by PostgreSQL a moment after this start. (What
    // this run holds is never touched.)
    let take_back = |store: SqlStore| async move {
        let released = store.release_held().await?;
        if released > 0 {
            tracing::info!(
                released,
                "deliveries held by this replica's last run are back in line"
            );
        }
        Ok::<_, crate::store::sql::SqlError>(())
    };
    take_back(store.clone())
        .await
        .context("taking back the deliveries this replica held")?;
    let again = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(RELEASE_AGAIN_AFTER).await;
        if let Err(e) = take_back(again).await {
            tracing::warn!(error = %e, "cannot look again for deliveries held by this replica's last run");
        }
    });
    if let Some(handle) = config.metrics.clone() {
        tokio::spawn(metrics_upkeep(handle));
    }
    if let Some(retention) = config.delivery_retention {
        tokio::spawn(super::retention::sweep_forever(store.clone(), retention));
    }
    let mut github = GitHub::new(&config.api_url, config.app_id, &config.private_key)?;
    let lease = config.timings.lease;
    // A call waits out a pause of GitHub's inline only while the operation's
    // lease surely outlasts it (work starts with three quarters of it left);
    // a longer pause gives the work back to the queue until it is over.
    github.max_wait = lease / 4;
    let github = Arc::new(github);
    let ops = Operations::new(
        config.replica_id,
        github.clone(),
        store.clone(),
        config.timings,
        config.limits,
        config.notifier,
    );
    let loaded = ops
        .load_all()
        .await
        .context("loading the operations in progress")?;
    tracing::info!(operations = loaded, "operations loaded");
    ops.spawn_timer();
    let views = ops.views();
    let svc = Service::new(
        store,
        github,
        ops,
        config.webhook_secrets,
        config.metrics,
        config.bot_allow_list,
        config.per_installation,
        lease,
    );
    service::spawn_workers(svc.clone(), config.workers);
    let limits = listen::Limits {
        max_connections: listen::connection_cap(),
        ..listen::Limits::default()
    };
    tracing::info!(
        addr = %listener.local_addr()?,
        max_connections = limits.max_connections,
        "supervise serve listening"
    );
    let pages = match &config.web {
        Some(w) => {
            let signin = crate::github::signin::SignIn::new(
                &w.web_url,
                &config.api_url,
                &w.client_id,
                w.client_secret.clone(),
            )?;
            let sessions = Sessions::new(
                signin,
                &w.public_url,
                w.session_key.as_ref().map(|k| k.expose_secret().as_bytes()),
            );
            web::router(Web::new(views, Access::GitHub(Arc::new(sessions))))
        }
        None => web::off_router(),
    };
    let app = service::router(svc.clone()).merge(pages);
    listen::serve(listener, app, limits, shutdown).await;
    tracing::info!("shutting down: stopping the workers");
    service::shut_down(&svc, limits.shutdown_grace).await;
    Ok(())
}

/// How often the histograms' samples are folded into their summaries.
const METRICS_UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Folds the samples the histograms recorded into their summaries, as
/// `GET /metrics` does: without it, a service nobody scrapes keeps every
/// sample of every delivery it ever timed.
async fn metrics_upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(METRICS_UPKEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}
