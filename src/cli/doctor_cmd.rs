//! `supervise doctor`: the door to `place::github::doctor` — reads the App's
//! credentials as `serve` does, runs every check on one repository, and
//! says ✓ or what to do for each. Exit status 0 only when nothing failed.

use crate::github::GitHub;
use crate::place::github::doctor::{self, Target, Verdict};
use anyhow::{anyhow, Result};
use clap::Args;
use secrecy::SecretString;

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The repository to check (`owner/name`).
    #[arg(long, value_parser = super::repo_arg)]
    pub repo: String,
    /// The App's id (its key is read from GITHUB_PRIVATE_KEY or
    /// GITHUB_PRIVATE_KEY_PATH, as `serve` reads it).
    #[arg(long, env = "GITHUB_APP_ID")]
    pub app_id: u64,
    /// The REST API (GitHub Enterprise: yours; the fake GitHub in tests).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub api_url: String,
    /// GitHub's web address, for the links in the fixes.
    #[arg(long, env = "GITHUB_WEB_URL", default_value = "https://github.com")]
    pub github_web_url: String,
    /// The service's address, to ask its `/readyz` (default: SUPERVISE_PUBLIC_URL).
    #[arg(long, env = "SUPERVISE_PUBLIC_URL")]
    pub service_url: Option<String>,
    /// The plan's path in the repository.
    #[arg(long, default_value = "EXECUTION_PLAN.md")]
    pub plan: String,
    /// The findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &DoctorArgs) -> Result<i32> {
    // The key as `serve` reads it: from the environment or a file, never a flag.
    let key = match super::secret("GITHUB_PRIVATE_KEY")? {
        Some(k) => k,
        None => {
            return Err(anyhow!(
                "set GITHUB_PRIVATE_KEY (PEM text) or GITHUB_PRIVATE_KEY_PATH, as for `supervise serve`"
            ))
        }
    };
    crate::scrub::register(&key);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let findings = rt.block_on(async {
        let github = GitHub::new(&args.api_url, args.app_id, &SecretString::from(key))?;
        Ok::<_, anyhow::Error>(
            doctor::check(&Target {
                github: &github,
                repo: &args.repo,
                web_url: args.github_web_url.trim_end_matches('/'),
                service_url: args.service_url.as_deref(),
                plan: &args.plan,
            })
            .await,
        )
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        print!("{}", crate::scrub::scrub(&doctor::render(&findings)));
    }
    Ok(if findings.iter().any(|f| f.verdict == Verdict::Fail) {
        1
    } else {
        0
    })
}
