//! `supervise publish`: the agent workflow's last job, the only one holding a
//! write credential. It runs no repository code: it takes the commit the
//! verifying job checked, commits the results record on it, pushes the sprint
//! branch, and vouches for the record with a check run carrying its digest.

use crate::contract::{record_digest_line, RECORD_CHECK};
use crate::github::repo::Repo;
use crate::github::GitHub;
use crate::place::github::handoff::{self, files, Attempt};
use anyhow::{Context, Result};
use clap::Args;
use secrecy::SecretString;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// What the agent's job handed on (its work as a git bundle).
    #[arg(long)]
    pub handoff: PathBuf,
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
    let published = handoff::publish(&root, &attempt, &a.handoff, &a.verdict)
        .context("publishing the verdict")?;
    let record: crate::contract::RunResult = serde_json::from_slice(&published.record)?;
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
        repo.create_check(json!({
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
        }))
        .await
        .context("creating the record's check run")
    })?;
    eprintln!(
        "published {} on {} ({})",
        files::RECORD,
        a.branch,
        crate::contract::short_id(&published.commit)
    );
    Ok(if handoff::passed(&record) { 0 } else { 1 })
}
