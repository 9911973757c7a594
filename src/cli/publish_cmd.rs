//! `supervise publish`: the agent workflow's last job, the only one holding a
//! write credential. It runs no repository code: it takes the commit the
//! verifying job checked, commits the results record on it, pushes the sprint
//! branch, and vouches for the record with a check run carrying its digest.

use crate::contract::{record_digest_line, RECORD_CHECK};
use crate::github::repo::Repo;
use crate::github::GitHub;
use crate::place::hosted::handoff::{self, files, Attempt};
use anyhow::{Context, Result};
use clap::Args;
use secrecy::SecretString;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// What the agent's job handed on (its work as a git bundle).
    #[arg(long, required_unless_present = "final_verification")]
    pub handoff: Option<PathBuf>,
    /// Publish a final verification (what `supervise verify --final` wrote
    /// to `--verdict`): a check run `supervise: final verification` on the
    /// head it checked, listing every criterion, its results as JSON in the
    /// details and vouched for by their digest. Nothing is pushed.
    #[arg(long = "final", conflicts_with = "handoff")]
    pub final_verification: bool,
    /// What `supervise verify --handoff` wrote (the record and the commit).
    #[arg(long)]
    pub verdict: PathBuf,
    /// The dispatch id of the attempt.
    #[arg(long, value_name = "DISPATCH_ID")]
    pub record: String,
    /// The sprint branch to push.
    #[arg(long)]
    pub branch: String,
    /// The checkout to publish from (default: here); its `origin` takes pushes.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The repository, owner/name (set by GitHub Actions).
    #[arg(long, env = "GITHUB_REPOSITORY")]
    pub repository: String,
    /// The REST API base (set by Actions; the fake GitHub in tests).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub api_url: String,
}

/// Exits 0 when the attempt's verdict is a pass, 1 when it is not (so the
/// run's colour says so), 2 when nothing could be published.
pub fn publish(a: &PublishArgs) -> Result<i32> {
    let token = super::secret_from_env("GITHUB_TOKEN", None)?;
    crate::scrub::register(&token);
    let Some(handoff_dir) = &a.handoff else {
        return publish_final(a, token);
    };
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let attempt = Attempt {
        plan: "",
        unit: "",
        sprint: "",
        dispatch: &a.record,
        branch: &a.branch,
    };
    let published = handoff::publish(&root, &attempt, handoff_dir, &a.verdict)
        .context("publishing the verdict")?;
    let record: crate::contract::RunResult = serde_json::from_slice(&published.record)?;
    post_check(
        a,
        token,
        json!({
            "name": RECORD_CHECK,
            "head_sha": published.commit,
            "status": "completed",
            "conclusion": "neutral",
            "external_id": a.record,
            "output": {
                "title": "Results recorded by the trusted step",
                "summary": format!(
                    "The results of `{}` were recorded in `{}` by the workflow's trusted job, which ran no agent code.\n\n{}",
                    a.record,
                    crate::contract::results_path(&a.record),
                    record_digest_line(&published.record)
                ),
            },
        }),
    )
    .context("creating the record's check run")?;
    eprintln!(
        "published {} on {} ({})",
        files::RECORD,
        a.branch,
        crate::contract::short_id(&published.commit)
    );
    Ok(if handoff::passed(&record) { 0 } else { 1 })
}

/// `supervise publish --final`: the final verification's check run, made by
/// the trusted job so the service, which runs no repository code, can take
/// its results. Exits 0 when every criterion passed there, 1 when one
/// failed (the run's colour says so).
fn publish_final(a: &PublishArgs, token: String) -> Result<i32> {
    let path = a.verdict.join(crate::attempt::head::FINAL_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the final verification at {}", path.display()))?;
    let v: crate::engine::HeadVerification = serde_json::from_str(&text)
        .with_context(|| format!("reading the final verification at {}", path.display()))?;
    let failing = v.failures().count();
    let (conclusion, title, summary) = crate::report::posts::final_check(
        &v,
        "Every machine-checkable exit criterion of every completed sprint, run again on the final integration head by the agent workflow's verifying job (files and commands alike).",
        "☐",
    );
    post_check(
        a,
        token,
        json!({
            "name": crate::contract::FINAL_CHECK,
            "head_sha": v.head,
            "status": "completed",
            "conclusion": conclusion,
            "external_id": a.record,
            "output": { "title": title, "summary": summary, "text": text },
        }),
    )
    .context("creating the final verification's check run")?;
    eprintln!(
        "published the final verification of {} ({failing} failing)",
        crate::contract::short_id(&v.head)
    );
    Ok(if failing == 0 { 0 } else { 1 })
}

/// Makes one check run with the workflow's token.
fn post_check(a: &PublishArgs, token: String, body: serde_json::Value) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let github = GitHub::with_token(&a.api_url, &SecretString::from(token))?;
        let repo = Repo {
            gh: &github,
            installation: 0,
            name: &a.repository,
        };
        Ok(repo.create_check(body).await?)
    })
}
