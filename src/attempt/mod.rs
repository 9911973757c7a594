//! The working half of the agent contract, one attempt's check, wherever
//! the agent ran: the sprint's exit criteria run in its checkout (with every
//! process they start ended before the verdict — [`tree`]), what the agent
//! left read ([`evidence`]: its commits, the paths they change, a secret in
//! them), and the results record assembled, scrubbed and committed
//! ([`record`]). [`verify`] is that check whole: the local place's wrapper,
//! the GitHub place's trusted verifying job and `supervise verify` call it,
//! so a third place (a Kubernetes job, a sandbox) calls it too and writes
//! none of it again. It imports no place.

pub mod criteria;
pub mod evidence;
pub mod head;
pub mod record;
pub mod tree;

use crate::contract::RunResult;
use crate::plan::{Plan, Sprint, WorkUnit};
use std::path::Path;
use std::time::Duration;

/// What the agent left besides its commits: its output, exit status and
/// answer, read as the agent's (bounded, never trusted).
#[derive(Debug, Default, Clone)]
pub struct Left {
    pub output: String,
    pub exit_code: Option<i32>,
    pub answer: Option<String>,
}

/// Where the agent's commits are read: from `since` (the commit the run
/// began at) to `head` (the checkout's HEAD when `None`; a step that ran
/// repository code names the head it checked, since that code may move
/// HEAD).
#[derive(Debug, Clone, Copy)]
pub struct Commits<'a> {
    pub since: &'a str,
    pub head: Option<&'a str>,
}

/// One attempt checked in the checkout at `root`: unless the work was
/// `refused` (then nothing of it runs), `sprint`'s exit criteria run there,
/// each for at most `timeout`, and whatever they started is ended; then the
/// record is assembled from the results, the unit's progress files, the
/// agent's commits and what it `left`.
#[allow(clippy::too_many_arguments)]
pub fn verify(
    plan: &Plan,
    unit: &WorkUnit,
    sprint: &Sprint,
    root: &Path,
    left: Left,
    commits: Option<Commits<'_>>,
    refused: Option<String>,
    timeout: Duration,
) -> RunResult {
    // Criteria run repository code the agent may have written: whatever it
    // starts, however it detaches, stays below this process and is ended
    // before the record is written.
    tree::become_subreaper();
    let results = match refused {
        None => criteria::verify_sprint(sprint, root, timeout),
        Some(_) => Vec::new(),
    };
    tree::end_descendants();
    let run = commits.and_then(|c| evidence::agent_commits(root, c.since, c.head));
    let progress = criteria::progress_marker(plan, unit, sprint, root);
    record::results_record(
        &left.output,
        left.exit_code,
        results,
        progress,
        run,
        left.answer,
        refused,
    )
}
