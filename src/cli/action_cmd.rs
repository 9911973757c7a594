//! `supervise action`: the GitHub Action front door. One run per event: the
//! workflow that uses the Action is started by `issue_comment` (commands),
//! `workflow_run` (an agent run finished) and `schedule` (reconciliation). Each
//! run loads the store (a SQLite file the Action keeps on a state branch),
//! handles the event through the same handler as `supervise serve`, makes
//! one pass over every operation, and exits; the Action then saves the store.

use crate::github::event::{Event, Unread};
use crate::github::payload::{CommentEvent, DispatchEvent};
use crate::github::GitHub;
use crate::notify::Notifier;
use crate::place::hosted::handle::Handler;
use crate::place::hosted::{InstallationLimits, OpTimings, Operations};
use crate::store::sql::SqlStore;
use anyhow::{anyhow, Context, Result};
use clap::Args;
use secrecy::SecretString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct ActionArgs {
    /// The event's name (set by GitHub Actions).
    #[arg(long, env = "GITHUB_EVENT_NAME")]
    pub event_name: String,
    /// The event's payload file (set by GitHub Actions).
    #[arg(long, env = "GITHUB_EVENT_PATH")]
    pub event_path: PathBuf,
    /// The REST API base (set by Actions; GitHub Enterprise, or the fake GitHub in tests).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub api_url: String,
    /// The App whose key the agent workflow's publishing job holds
    /// (`secrets.SUPERVISE_APP_ID`): results records it vouches for are taken,
    /// as are those the workflow's own token vouches for. Without it, only the
    /// latter.
    /// (Empty: none, as the action passes an unset input.)
    #[arg(long, env = "SUPERVISE_APP_ID")]
    pub app_id: Option<String>,
    /// Who GitHub says writes what the token writes, when the token is not
    /// the workflow's `GITHUB_TOKEN` (whose comments are by
    /// `github-actions[bot]`): an App installation token's `{slug}[bot]`.
    /// Only comments by it are taken as the supervisor's own.
    #[arg(long, env = "SUPERVISE_BOT_LOGIN")]
    pub bot_login: Option<String>,
    /// Bot logins whose commands are acted on (exact match).
    pub bot_allow_list: Vec<String>,
    /// Seconds to wait for the repository's CI to report; each Action run is a
    /// new process, so the default is not to wait (CI's own events run it again).
    #[arg(long, env = "SUPERVISE_CI_GRACE_SECS", default_value_t = 0)]
    pub ci_grace_secs: u64,
}

/// An App id, or nothing for an empty value.
fn app_id(text: &str) -> Result<Option<u64>, String> {
    match text.trim() {
        "" => Ok(None),
        t => t
            .parse()
            .map(Some)
            .map_err(|_| format!("`{t}` is not an App id (a number)")),
    }
}

/// A `workflow_dispatch` with inputs `command`, `issue` and `plan` is a command
/// said on that issue by the person who dispatched it: it is posted there (so
/// it is seen and answered where it belongs) and handled as that person's
/// comment — authorised against their role like any other. Without a command,
/// the run only reconciles.
async fn dispatch_as_comment(handler: &Handler, ev: DispatchEvent) -> Result<Option<CommentEvent>> {
    let Some(command) = ev.command else {
        return Ok(None);
    };
    let allowed = || {
        crate::commands::COMMANDS
            .iter()
            .filter(|c| c.from_workflow)
            .map(|c| c.name)
    };
    // The command's word decides; what follows is its argument (`solve
    // debug-only`, `resume api`), read by the same parser as a comment.
    let word = command.split_whitespace().next().unwrap_or_default();
    if !allowed().any(|c| c == word) {
        return Err(anyhow!(
            "workflow_dispatch: `command` is `{command}`; use one of {}",
            allowed().collect::<Vec<_>>().join(", ")
        ));
    }
    let issue = ev.issue.ok_or_else(|| anyhow!("workflow_dispatch: the `issue` input (the issue number the operation reports on) is required with `command`"))?;
    let text = match (command.as_str(), ev.plan.as_deref()) {
        ("start", Some(p)) => format!("/supervise start {p}"),
        (c, _) => format!("/supervise {c}"),
    };
    let r = crate::github::repo::Repo {
        gh: &handler.github,
        installation: 0,
        name: &ev.repo,
    };
    let id = r
        .comment(
            issue,
            &format!(
                "{text}\n\n_Requested by {} from a workflow run._",
                ev.sender
            ),
        )
        .await?;
    Ok(Some(CommentEvent {
        action: "created".into(),
        installation: None,
        repo: ev.repo,
        issue,
        is_pull_request: false,
        comment_id: id,
        body: text,
        created_at: Some(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        login: ev.sender,
        kind: "User".into(),
    }))
}

pub fn run(args: ActionArgs) -> Result<i32> {
    // Secrets come from the environment (or a file it names), never from
    // flags, which any user of the machine can read in `ps`.
    let token = super::secret_from_env("SUPERVISE_TOKEN", None)?;
    if token.trim().is_empty() {
        return Err(anyhow!(
            "SUPERVISE_TOKEN is empty: pass `token: ${{{{ github.token }}}}` (or an App token) to the action"
        ));
    }
    let database_url = super::secret_from_env(
        "SUPERVISE_DATABASE_URL",
        Some("sqlite://.supervise-state/supervise.db?mode=rwc"),
    )?;
    let app_id = match args.app_id.as_deref() {
        Some(text) => app_id(text).map_err(|e| anyhow!("SUPERVISE_APP_ID: {e}"))?,
        None => None,
    };
    let payload = std::fs::read_to_string(&args.event_path)
        .with_context(|| format!("reading the event payload {}", args.event_path.display()))?;
    if let Some(dir) = database_url
        .strip_prefix("sqlite://")
        .and_then(|p| p.split('?').next())
        .and_then(|p| std::path::Path::new(p).parent())
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let store = SqlStore::connect(&database_url)
            .await
            .context("opening the Action's store")?;
        let mut github =
            GitHub::with_token(&args.api_url, &SecretString::from(token))?.acting_for_app(app_id);
        if let Some(login) = args.bot_login.as_deref().filter(|l| !l.trim().is_empty()) {
            github = github.writing_as(login.trim());
        }
        let github = Arc::new(github);
        let ops = Operations::new(
            "github-action".into(),
            github.clone(),
            store.clone(),
            OpTimings {
                tick: Duration::from_secs(1),
                reconcile: Duration::ZERO,
                status_interval: Duration::ZERO,
                ci_grace: Duration::from_secs(args.ci_grace_secs),
                force_cancel_after: Duration::ZERO,
                lease: Duration::from_secs(600),
            },
            // One repository: its own `daily_budget` is the cap that applies.
            InstallationLimits::default(),
            // The workflow's environment may name a receiver (the job's secrets).
            Notifier::from_env().map_err(|e| anyhow!(e))?,
        );
        ops.load_all().await.context("loading the operations")?;
        let handler = Handler {
            store,
            github,
            ops: ops.clone(),
            bot_allow_list: args.bot_allow_list.clone(),
            throttle: Default::default(),
        };
        match (args.event_name.as_str(), Event::read(&args.event_name, &payload)) {
            (_, Ok(event)) => handler.event(event).await?,
            // Run from the Actions tab or `gh workflow run` with a command.
            ("workflow_dispatch", _) => {
                let ev = DispatchEvent::parse(&payload)
                    .map_err(|e| anyhow!("workflow_dispatch: {e}"))?;
                if let Some(event) = dispatch_as_comment(&handler, ev).await? {
                    handler.comment(event).await?;
                }
            }
            // Said in the job's log; the pass below still reconciles.
            (name, Err(Unread::Unusable(why))) => {
                tracing::warn!(event = name, error = %why, "the event file is unusable; not acted on")
            }
            // `schedule`: the pass below is the work.
            (_, Err(Unread::NotHandled(_))) => {}
        }
        ops.run_once().await?;
        Ok::<_, anyhow::Error>(0)
    })
}
