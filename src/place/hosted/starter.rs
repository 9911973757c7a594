//! The pull request `supervise setup --repo` opens on a repository: the agent
//! workflow this version dispatches, and a starter `.github/supervise.yml`.
//! Never a push to the default branch: the files go on their own branch, and a
//! person merges them. Asked again, it finds its own branch and pull request
//! instead of making new ones, proposes a workflow that differs from this
//! version's (an outdated copy), and leaves a settings file the repository
//! already has alone — it is theirs.

use crate::github::repo::Repo;
use crate::github::GitHubError;
use crate::settings::REPO_FILE;

/// The agent workflow of this version, as the repository should have it.
pub const AGENT_WORKFLOW: &str = include_str!("../../../.github/workflows/supervise-agent.yml");

/// Where the agent workflow goes (the name `workflow:` defaults to).
pub const AGENT_WORKFLOW_PATH: &str = ".github/workflows/supervise-agent.yml";

/// The branch the starter files are proposed on.
pub const BRANCH: &str = "supervise/setup";

/// A first `.github/supervise.yml`: caps that keep a first operation cheap,
/// and where the rest is described.
pub const STARTER_SETTINGS: &str = "\
# Sprint Supervisor's settings for this repository. Every key, with what it
# does, is in the guide's settings chapter (and schema/supervise.schema.json).

# The agent each sprint's workflow run starts: claude (Claude Code; add the
# repository secret ANTHROPIC_API_KEY), codex (OPENAI_API_KEY) or gemini
# (GEMINI_API_KEY).
agent: claude

# Agents in flight at once, and attempts per sprint before its unit is BLOCKED.
max_parallel: 2
max_retries: 3

# Spend caps, in relative units (one dispatch: haiku 1, sonnet 10, opus 30).
# An operation drains at its budget; the repository's dispatches wait at the
# daily budget until the 24-hour window allows.
budget: 200
daily_budget: 400

# A verified sprint's pull request is merged after an approving review.
merge: after_review
";

/// Which release the workflow installs `supervise` from, and how to point
/// it elsewhere before one is published.
pub fn release_note() -> String {
    match super::doctor::pinned_release(AGENT_WORKFLOW) {
        Some((repo, version)) => format!(
            "Each job installs `supervise` from the release `{version}` of `{repo}` (its checksums verified). \
To pin another, set the repository variable `SUPERVISE_VERSION` to its tag; to use your own build, \
set `SUPERVISE_REPOSITORY` to a fork whose release workflow has published one."
        ),
        None => String::new(),
    }
}

/// What `open_pull` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Starter {
    /// The default branch already has this version's workflow and a
    /// settings file: nothing to propose.
    InPlace,
    /// The pull request proposing `files` (new, or found open from before).
    Proposed { number: i64, files: Vec<String> },
}

/// The files the default branch lacks, with the text proposed for each.
async fn wanted(repo: &Repo<'_>) -> Result<Vec<(&'static str, &'static str)>, GitHubError> {
    let mut files = Vec::new();
    let workflow = repo.file(AGENT_WORKFLOW_PATH, None).await?;
    if workflow.is_none_or(|(text, _)| text != AGENT_WORKFLOW) {
        files.push((AGENT_WORKFLOW_PATH, AGENT_WORKFLOW));
    }
    if repo.file(REPO_FILE, None).await?.is_none() {
        files.push((REPO_FILE, STARTER_SETTINGS));
    }
    Ok(files)
}

/// Proposes the starter files in a pull request from [`BRANCH`].
pub async fn open_pull(repo: &Repo<'_>) -> Result<Starter, GitHubError> {
    let files = wanted(repo).await?;
    if files.is_empty() {
        return Ok(Starter::InPlace);
    }
    let listed: Vec<String> = files.iter().map(|(p, _)| format!("- `{p}`")).collect();
    let body = format!(
        "This pull request sets the repository up for Sprint Supervisor:\n\n{}\n\n\
The agent workflow runs one attempt of one sprint in three jobs; only the last \
can write, and it runs no repository code.\n\n\
**Before merging, add the repository secret `ANTHROPIC_API_KEY`**: the agent is \
Claude Code (`agent: claude` in `.github/supervise.yml`, when this pull request \
adds it). For Codex or Gemini CLI, set `agent: codex` or `agent: gemini` there \
and add `OPENAI_API_KEY` or `GEMINI_API_KEY` instead.\n\n\
{release}\n\n\
Then comment `/supervise start` on an issue; `supervise doctor --repo <owner/name>` \
checks everything first.\n\n\
Opened by `supervise setup`; nothing was pushed to the default branch.",
        listed.join("\n"),
        release = release_note(),
    );
    let number = repo
        .propose(BRANCH, &files, "Set up Sprint Supervisor", &body)
        .await?;
    Ok(Starter::Proposed {
        number,
        files: files.iter().map(|(p, _)| p.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starter_settings_are_valid_settings() {
        let s = crate::settings::parse(STARTER_SETTINGS, REPO_FILE).unwrap();
        assert_eq!(s.max_parallel, Some(2));
    }

    #[test]
    fn the_agent_workflow_takes_every_input_the_supervisor_sends() {
        for input in crate::contract::AGENT_WORKFLOW_INPUTS {
            assert!(
                AGENT_WORKFLOW.contains(&format!("      {input}:")),
                "{input}"
            );
        }
    }
}
