//! `supervise doctor`: the door to `place::hosted::doctor` — reads the App's
//! credentials as `serve` does, runs every check on one repository, and
//! says ✓ or what to do for each. Exit status 0 only when nothing failed.

use crate::github::GitHub;
use crate::place::hosted::doctor::{self, Finding, Target, Verdict};
use anyhow::Result;
use clap::Args;
use secrecy::SecretString;

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The repository to check (`owner/name`); by default the one the
    /// `origin` remote of the repository here points at, as `gh` takes it.
    #[arg(long, value_parser = super::repo_arg)]
    pub repo: Option<String>,
    /// The App's id (its key is read from GITHUB_PRIVATE_KEY or
    /// GITHUB_PRIVATE_KEY_PATH, as `serve` reads it).
    #[arg(long, env = "GITHUB_APP_ID")]
    pub app_id: Option<u64>,
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
    // What is missing to check anything is a finding like any other (with
    // what to do), not a usage error: `doctor` is what a person runs first.
    let repo = args.repo.clone().or_else(origin_repo);
    // The key as `serve` reads it: from the environment or a file, never a
    // flag. A file that cannot be read is a finding with its fix, like
    // every other: the rest is still checked.
    let mut missing = Vec::new();
    let key = match super::secret("GITHUB_PRIVATE_KEY") {
        Ok(key) => key,
        Err(e) => {
            missing.push(Finding::fail(
                "App key",
                format!("{e:#}"),
                "point GITHUB_PRIVATE_KEY_PATH at the App's private key (.pem) as downloaded from the App's page, readable by this user; set only one of GITHUB_PRIVATE_KEY, GITHUB_PRIVATE_KEY_FILE and GITHUB_PRIVATE_KEY_PATH",
            ));
            None
        }
    };
    let unread_key = !missing.is_empty();
    if repo.is_none() {
        missing.push(Finding::fail(
            "repository",
            "no --repo, and no `origin` remote on GitHub here",
            "pass --repo owner/name, or run `supervise doctor` in a clone of the repository",
        ));
    }
    if args.app_id.is_none() {
        missing.push(Finding::fail(
            "App id",
            "GITHUB_APP_ID is not set",
            format!(
                "set GITHUB_APP_ID (or --app-id) to the App's id, shown on its page ({}/settings/apps); `supervise setup` writes it into supervise.env",
                args.github_web_url.trim_end_matches('/')
            ),
        ));
    }
    if key.is_none() && !unread_key {
        missing.push(Finding::fail(
            "App key",
            "neither GITHUB_PRIVATE_KEY nor GITHUB_PRIVATE_KEY_PATH is set",
            "set GITHUB_PRIVATE_KEY_PATH to the App's private key (.pem), as for `supervise serve`; generate one on the App's page if you have none",
        ));
    }
    let findings = match (repo, args.app_id, key) {
        (Some(repo), Some(app_id), Some(key)) => {
            crate::scrub::register(&key);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let github = match GitHub::new(&args.api_url, app_id, &SecretString::from(key)) {
                    Ok(github) => github,
                    Err(e) => {
                        return vec![Finding::fail(
                            "App key",
                            e.to_string(),
                            "download a private key (.pem) from the App's page and point GITHUB_PRIVATE_KEY_PATH at it (and GITHUB_API_URL, if set, at the REST API)",
                        )]
                    }
                };
                doctor::check(&Target {
                    github: &github,
                    repo: &repo,
                    web_url: args.github_web_url.trim_end_matches('/'),
                    service_url: args.service_url.as_deref(),
                    plan: &args.plan,
                })
                .await
            })
        }
        // Without what GitHub needs, what needs no credential is still
        // checked, from the clone here: everything left to do, at once.
        _ => {
            if let Some(root) = clone_root() {
                let file = |path: &str| std::fs::read_to_string(root.join(path)).ok();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                missing.extend(rt.block_on(doctor::local(&file, &args.plan)));
            }
            missing
        }
    };
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

/// The top of the git work tree here, if this is one.
fn clone_root() -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let root = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !root.trim().is_empty()).then(|| root.trim().into())
}

/// `owner/name` of the GitHub repository the `origin` remote here points at
/// (`https://github.com/o/n.git`, `git@github.com:o/n.git`,
/// `ssh://git@github.com/o/n`), as `gh` finds it.
fn origin_repo() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["remote", "get-url", "origin"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    repo_of_remote(String::from_utf8_lossy(&out.stdout).trim())
}

fn repo_of_remote(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("git@")
        .and_then(|r| r.split_once(':').map(|(_, path)| path))
        .or_else(|| {
            let no_scheme = url.split_once("://")?.1;
            no_scheme.split_once('/').map(|(_, path)| path)
        })?;
    let path = rest.trim_end_matches('/').trim_end_matches(".git");
    super::repo_arg(path).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_repository_is_read_from_the_remotes_people_use() {
        for (url, repo) in [
            ("https://github.com/acme/shop.git", Some("acme/shop")),
            ("https://github.com/acme/shop", Some("acme/shop")),
            ("git@github.com:acme/shop.git", Some("acme/shop")),
            ("ssh://git@github.com/acme/shop.git", Some("acme/shop")),
            (
                "https://x-access-token@github.example.com/acme/shop/",
                Some("acme/shop"),
            ),
            ("/srv/git/shop.git", None),
            ("https://github.com/acme", None),
        ] {
            assert_eq!(super::repo_of_remote(url).as_deref(), repo, "{url}");
        }
    }
}
