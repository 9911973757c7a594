//! `supervise serve`: configuration from flags and the environment, then the
//! service. Secrets are held as `SecretString` and never printed (clap hides
//! their environment values from `--help`).

use crate::place::hosted::{InstallationLimits, OpTimings};
use crate::server::run::{self, ServiceConfig, WebSignIn};
use anyhow::{anyhow, Context, Result};
use clap::Args;
use secrecy::{ExposeSecret, SecretString};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SUPERVISE_LISTEN", default_value = "0.0.0.0:3000")]
    pub listen: String,
    /// The GitHub App's id.
    #[arg(long, env = "GITHUB_APP_ID")]
    pub app_id: u64,
    /// The App's private key (PEM text): from `GITHUB_PRIVATE_KEY` only, never a
    /// flag (flags show in `ps` and `/proc/PID/cmdline`).
    #[arg(skip)]
    pub private_key: Option<String>,
    /// A file holding the App's private key.
    #[arg(long, env = "GITHUB_PRIVATE_KEY_PATH")]
    pub private_key_path: Option<PathBuf>,
    /// Webhook secret, a comma-separated list accepting each (for rotation): from
    /// `GITHUB_WEBHOOK_SECRET` or the file named by `GITHUB_WEBHOOK_SECRET_PATH`,
    /// never a flag.
    #[arg(skip)]
    pub webhook_secret: String,
    /// The REST API base (GitHub Enterprise, or the fake GitHub in tests).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub api_url: String,
    /// Bot logins whose commands are acted on (exact match); other bots are ignored.
    #[arg(long, env = "SUPERVISE_BOT_ALLOW_LIST", value_delimiter = ',')]
    pub bot_allow_list: Vec<String>,
    /// Deliveries processed at once. A delivery's time is mostly waiting on
    /// GitHub's answers, so these are many: with 4, a service of 1,000
    /// operations answered 1 % of run completions 9.6 s late (the scale
    /// bench), with 32, 2.8 s.
    #[arg(long, env = "SUPERVISE_WORKERS", default_value_t = 32)]
    pub workers: usize,
    /// Deliveries of one installation processed at once.
    #[arg(long, env = "SUPERVISE_INSTALLATION_CONCURRENCY", default_value_t = 2)]
    pub per_installation: usize,
    /// Seconds a worker holds a delivery before another may take it over.
    #[arg(long, env = "SUPERVISE_LEASE_SECS", default_value_t = 120, hide = true)]
    pub lease_secs: u64,
    /// Milliseconds between ticks of each operation (stall checks, stop drain,
    /// outbox retries).
    #[arg(long, env = "SUPERVISE_TICK_MS", default_value_t = 2000)]
    pub tick_ms: u64,
    /// Seconds between checks of runs in flight against GitHub (a missed
    /// webhook only delays an operation by this much).
    #[arg(long, env = "SUPERVISE_RECONCILE_SECS", default_value_t = 30)]
    pub reconcile_secs: u64,
    /// Least milliseconds between two edits of a status comment.
    #[arg(long, env = "SUPERVISE_STATUS_INTERVAL_MS", default_value_t = 5000)]
    pub status_interval_ms: u64,
    /// Seconds to wait for the repository's CI to report at all (on a sprint's
    /// head after its run, on the integration head at a build gate) before going
    /// on without it; 0 for a repository without CI.
    #[arg(long, env = "SUPERVISE_CI_GRACE_SECS", default_value_t = 30)]
    pub ci_grace_secs: u64,
    /// Seconds a cancelled agent run may keep running before it is force-cancelled.
    #[arg(long, env = "SUPERVISE_FORCE_CANCEL_SECS", default_value_t = 30)]
    pub force_cancel_secs: u64,
    /// What all the operations of one installation may dispatch in any 24
    /// hours, in relative cost (haiku 1, sonnet 10, opus 30 per dispatch by
    /// default). A dispatch that would pass it waits until the window allows.
    #[arg(long, env = "SUPERVISE_INSTALLATION_DAILY_BUDGET")]
    pub installation_daily_budget: Option<u64>,
    /// What all the operations of one installation may spend in any 24
    /// hours, in dollars, e.g. 50: each dispatch counted at what its agent
    /// reported, and until then at what it is expected to cost. A dispatch
    /// whose expected cost would pass it waits until the window allows.
    #[arg(
        long,
        env = "SUPERVISE_INSTALLATION_DAILY_BUDGET_USD",
        value_name = "DOLLARS"
    )]
    pub installation_daily_budget_usd: Option<crate::engine::usage::Usd>,
    /// The least a dispatch of each tier is expected to cost against the
    /// dollar caps, as `haiku,sonnet,opus` in dollars: a repository's
    /// settings and history may raise it, never lower it.
    #[arg(long, env = "SUPERVISE_ATTEMPT_USD", value_parser = parse_attempt_usd, default_value = "0.10,0.60,3.00")]
    pub attempt_usd: [crate::engine::usage::Usd; 3],
    /// What one dispatch of each tier costs against the caps above one
    /// operation, as `haiku,sonnet,opus`. The operator's prices: a
    /// repository's `costs:` in its settings shapes only its own operations'
    /// `budget`, never what the installation's cap is charged.
    #[arg(long, env = "SUPERVISE_COSTS", value_parser = parse_costs, default_value = "1,10,30")]
    pub costs: [u64; 3],
    /// Agents in flight at once across all the operations of one
    /// installation, shared fairly between them.
    #[arg(long, env = "SUPERVISE_INSTALLATION_AGENTS", default_value_t = 20)]
    pub installation_agents: u64,
    /// Days a delivery is kept once processed (its row, and its body if a
    /// worker processed it), then forgotten; 0 keeps them for ever. At
    /// least 7: GitHub redelivers a delivery under its own id up to 7 days
    /// on (3 on github.com), and one forgotten sooner would be processed
    /// again.
    #[arg(long, env = "SUPERVISE_DELIVERY_RETENTION_DAYS", default_value_t = 14)]
    pub delivery_retention_days: u64,
    /// This replica's name in operation leases (default: the host name). Give
    /// each replica its own when several share a host.
    #[arg(long, env = "SUPERVISE_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// The App's client id, for the web view's sign-in with GitHub (with
    /// GITHUB_CLIENT_SECRET, or GITHUB_CLIENT_SECRET_PATH, and
    /// SUPERVISE_PUBLIC_URL). Without them the web view is off.
    #[arg(long, env = "GITHUB_CLIENT_ID")]
    pub client_id: Option<String>,
    /// This service's address as browsers reach it, e.g.
    /// `https://supervise.example.com`: GitHub sends people back to its
    /// `/login/callback` after they sign in.
    #[arg(long, env = "SUPERVISE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// GitHub's web address (GitHub Enterprise: yours).
    #[arg(long, env = "GITHUB_WEB_URL", default_value = "https://github.com")]
    pub github_web_url: String,
}

/// SIGTERM (systemd, Docker, Kubernetes) or SIGINT (Ctrl-C). The handlers
/// are installed when this is called, not when the future is first polled:
/// the port is open from the bind on, and a signal sent once it answers
/// (while the database is still being opened, say) must stop the service
/// cleanly rather than kill it with the signal's default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    let (mut term, mut int) = (
        listen(SignalKind::terminate(), "SIGTERM"),
        listen(SignalKind::interrupt(), "SIGINT"),
    );
    async fn next(s: Option<&mut tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    async move {
        tokio::select! {
            () = next(int.as_mut()) => tracing::info!("SIGINT received"),
            () = next(term.as_mut()) => tracing::info!("SIGTERM received"),
        }
    }
}

pub fn run(mut args: ServeArgs) -> Result<i32> {
    if args.private_key.is_none() {
        args.private_key = std::env::var("GITHUB_PRIVATE_KEY").ok();
    }
    if args.webhook_secret.is_empty() {
        args.webhook_secret = super::secret("GITHUB_WEBHOOK_SECRET")?.ok_or_else(|| {
            anyhow!("set GITHUB_WEBHOOK_SECRET (or GITHUB_WEBHOOK_SECRET_PATH, a file holding it)")
        })?;
    }
    let key = match (&args.private_key, &args.private_key_path) {
        (Some(k), _) => k.clone(),
        (None, Some(p)) => std::fs::read_to_string(p)
            .with_context(|| format!("reading GITHUB_PRIVATE_KEY_PATH {}", p.display()))?,
        (None, None) => {
            return Err(anyhow!(
                "set GITHUB_PRIVATE_KEY (PEM text) or GITHUB_PRIVATE_KEY_PATH"
            ))
        }
    };
    let secrets: Vec<SecretString> = args
        .webhook_secret
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| SecretString::from(s.to_string()))
        .collect();
    if secrets.is_empty() {
        return Err(anyhow!("GITHUB_WEBHOOK_SECRET is empty"));
    }
    // Secrets read from files are not in the environment: made known to the
    // scrubber here, so no text that leaves can carry them.
    crate::scrub::register(&key);
    for s in &secrets {
        crate::scrub::register(s.expose_secret());
    }
    let web = match (
        args.client_id.clone().filter(|c| !c.trim().is_empty()),
        super::secret("GITHUB_CLIENT_SECRET")?,
        args.public_url.clone().filter(|u| !u.trim().is_empty()),
    ) {
        (Some(client_id), Some(secret), Some(public_url)) => {
            crate::scrub::register(&secret);
            let session_key = super::secret("SUPERVISE_SESSION_KEY")?;
            if let Some(k) = &session_key {
                crate::scrub::register(k);
            }
            Some(WebSignIn {
                client_id,
                client_secret: SecretString::from(secret),
                web_url: args.github_web_url.clone(),
                public_url,
                session_key: session_key.map(SecretString::from),
            })
        }
        (None, None, None) => None,
        (id, secret, url) => {
            let missing: Vec<&str> = [
                (id.is_none(), "GITHUB_CLIENT_ID"),
                (secret.is_none(), "GITHUB_CLIENT_SECRET"),
                (url.is_none(), "SUPERVISE_PUBLIC_URL"),
            ]
            .into_iter()
            .filter_map(|(m, name)| m.then_some(name))
            .collect();
            return Err(anyhow!(
                "the web view needs {} as well (or none of the three, to leave it off)",
                missing.join(" and ")
            ));
        }
    };
    let min_days = crate::store::sql::MIN_RETENTION.as_secs() / 86_400;
    let delivery_retention = match args.delivery_retention_days {
        0 => None,
        days if days < min_days => {
            return Err(anyhow!(
                "SUPERVISE_DELIVERY_RETENTION_DAYS is {days}: GitHub can redeliver a delivery up to {min_days} days on, and one forgotten sooner would be processed again; use {min_days} or more (0 keeps them for ever)"
            ))
        }
        days => Some(Duration::from_secs(days.saturating_mul(86_400))),
    };
    let replica_id = args.replica_id.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "supervise".into())
    });
    crate::without_huge_pages();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let config = ServiceConfig {
            app_id: args.app_id,
            private_key: SecretString::from(key),
            webhook_secrets: secrets,
            api_url: args.api_url,
            database_url: super::secret_from_env(
                "DATABASE_URL",
                Some("sqlite://supervise.db?mode=rwc"),
            )?,
            bot_allow_list: args.bot_allow_list,
            workers: args.workers,
            per_installation: args.per_installation,
            replica_id,
            timings: OpTimings {
                tick: Duration::from_millis(args.tick_ms.clamp(10, 60_000)),
                reconcile: Duration::from_secs(args.reconcile_secs.max(1)),
                status_interval: Duration::from_millis(args.status_interval_ms),
                ci_grace: Duration::from_secs(args.ci_grace_secs),
                force_cancel_after: Duration::from_secs(args.force_cancel_secs.max(1)),
                lease: Duration::from_secs(args.lease_secs.max(1)),
            },
            delivery_retention,
            web,
            notifier: crate::notify::Notifier::from_env().map_err(anyhow::Error::msg)?,
            limits: InstallationLimits {
                daily_budget: args.installation_daily_budget,
                costs: args.costs,
                agents: Some(args.installation_agents.max(1)),
                daily_budget_usd: args.installation_daily_budget_usd,
                attempt_usd: args.attempt_usd,
            },
            metrics: metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .ok(),
        };
        let shutdown = shutdown_signal();
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        eprintln!("supervise serve listening on {}", listener.local_addr()?);
        run::run(config, listener, shutdown).await?;
        eprintln!("supervise serve stopped");
        Ok::<_, anyhow::Error>(0)
    })
}

/// `haiku,sonnet,opus`: three whole numbers, each at least 1 (a dispatch
/// free of charge would let any number past a cap).
fn parse_attempt_usd(text: &str) -> Result<[crate::engine::usage::Usd; 3], String> {
    let parts: Vec<&str> = text.split(',').collect();
    let [h, s, o] = parts.as_slice() else {
        return Err(format!(
            "`{text}`: give three amounts in dollars, haiku,sonnet,opus (for example 0.10,0.60,3.00)"
        ));
    };
    Ok([h.parse()?, s.parse()?, o.parse()?])
}

fn parse_costs(text: &str) -> Result<[u64; 3], String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [h, s, o] = parts.as_slice() else {
        return Err(format!(
            "`{text}`: give three costs, haiku,sonnet,opus (for example 1,10,30)"
        ));
    };
    let one = |v: &str, tier: &str| -> Result<u64, String> {
        match v.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "`{v}` for {tier}: a cost is a whole number of at least 1"
            )),
        }
    };
    Ok([one(h, "haiku")?, one(s, "sonnet")?, one(o, "opus")?])
}

#[cfg(test)]
mod tests {
    use super::parse_costs;

    #[test]
    fn operator_costs_are_three_whole_numbers_of_at_least_one() {
        assert_eq!(parse_costs("1, 10,30"), Ok([1, 10, 30]));
        for bad in ["", "1,10", "1,10,30,4", "0,10,30", "1,x,30", "-1,2,3"] {
            let e = parse_costs(bad).unwrap_err();
            assert!(e.contains('`'), "{bad}: {e}");
        }
    }
}
