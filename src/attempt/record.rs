//! The results record of an attempt: assembled from what the checking step
//! found and what the agent left, scrubbed (it is committed and quoted in
//! public), and committed on the sprint branch by the trusted step.

use super::criteria::tail;
use super::evidence::RunCommits;
use crate::contract::{results_path, RunResult};
use crate::engine::{CriterionResult, ProgressMarker};
use std::path::Path;

/// An attempt's results record as a checking step writes it: the end of
/// what the agent printed and every criterion's detail scrubbed of secrets
/// (the record is committed and quoted in public), the agent's commits as
/// `run` found them.
pub fn results_record(
    output: &str,
    exit_code: Option<i32>,
    criteria: Vec<CriterionResult>,
    progress: Option<ProgressMarker>,
    run: Option<RunCommits>,
    answer: Option<String>,
    refused: Option<String>,
) -> RunResult {
    RunResult {
        exit_code,
        turns_used: parse_turns(output).or_else(|| crate::engine::provider::turns(output)),
        usage: crate::engine::provider::usage(output),
        output_tail: crate::scrub::scrub(&tail(output, 4000)).into_owned(),
        criteria: criteria
            .into_iter()
            .map(|mut c| {
                c.detail = crate::scrub::scrub(&c.detail).into_owned();
                c
            })
            .collect(),
        progress,
        commits: run.as_ref().map(|r| r.commits.clone()),
        changed: run.as_ref().and_then(|r| r.changed.clone()),
        began_at: run.and_then(|r| r.began_at),
        answer,
        refused,
        found_done: None,
    }
}

/// Writes a dispatch's results into the checkout and commits them (with the
/// person's or the runner's git identity), so the supervisor reads them from the
/// sprint branch. The commit message starts with `supervise:`, which tells the
/// supervisor it is not the agent's work.
pub fn record_result(
    root: &Path,
    dispatch: &str,
    result: &RunResult,
) -> anyhow::Result<std::path::PathBuf> {
    commit_record(root, dispatch, &serde_json::to_vec_pretty(result)?)
}

/// Writes a record's exact bytes at [`results_path`] in the checkout at
/// `root` and commits that file alone (the trusted publishing job vouches for
/// these bytes, so they are written as they are).
pub fn commit_record(
    root: &Path,
    dispatch: &str,
    record: &[u8],
) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let rel = results_path(dispatch);
    let top = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(root)
        .output()
        .context("running git")?;
    let top = std::path::PathBuf::from(String::from_utf8_lossy(&top.stdout).trim());
    let path = top.join(&rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, record)?;
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(&top)
            .status()
            .with_context(|| format!("running git {}", args.join(" ")))?;
        anyhow::ensure!(st.success(), "git {} failed", args.join(" "));
        Ok(())
    };
    git(&["add", "-f", &rel])?;
    git(&[
        "commit",
        "-q",
        "-m",
        &format!("supervise: results of {dispatch}"),
        "--",
        &rel,
    ])?;
    Ok(path)
}

/// The agent's turn count, if it printed `supervise:turns=N` or `turns used: N`.
pub fn parse_turns(output: &str) -> Option<u32> {
    output.lines().rev().find_map(|l| {
        let l = l.to_lowercase();
        let at = l
            .find("supervise:turns=")
            .map(|i| i + 16)
            .or_else(|| l.find("turns used:").map(|i| i + 11))?;
        l[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}
