//! The agent contract: what a supervisor and the agents it starts agree on,
//! wherever the agents run (local processes or GitHub Actions runners). Branch
//! names, where prompts and results live in the repository, the results record,
//! and the environment an agent is given. The runner and the GitHub adapter both
//! follow it; neither owns it.

use crate::engine::{CriterionResult, DispatchOrder, ProgressMarker};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// An operation's id: the plan title's slug (at most 24 characters, so branch
/// names stay readable) and a suffix that makes it unique — the start time
/// locally, the command comment's id on GitHub.
pub fn operation_id(plan_title: &str, unique: u64) -> String {
    let title = crate::text::slug(plan_title);
    format!(
        "{}{}",
        title[..title.len().min(24)].trim_end_matches('-'),
        operation_suffix(unique)
    )
}

/// How every operation id made from `unique` ends.
fn operation_suffix(unique: u64) -> String {
    format!("-{unique:06x}")
}

/// Whether operation `op` is the one that `unique` (a command comment's id)
/// started: a command processed again finds its own operation this way, so
/// the look-up and [`operation_id`] share one spelling of the id's end.
pub fn started_by(op: &str, unique: u64) -> bool {
    op.ends_with(&operation_suffix(unique))
}

pub use crate::engine::naming::{integration_branch, sprint_branch};

/// The operation whose integration or sprint branch `branch` is (the
/// branches [`integration_branch`] and [`sprint_branch`] make); `None` for
/// any other branch.
pub fn operation_of_branch(branch: &str) -> Option<&str> {
    let (op, rest) = branch.strip_prefix("supervise/")?.split_once('/')?;
    (rest == "integration" || sprint_branch_unit(branch).is_some()).then_some(op)
}

/// The operation and unit slug of a branch [`sprint_branch`] made (slugs and
/// operation ids hold no `/`); `None` for any other branch.
pub fn sprint_branch_unit(branch: &str) -> Option<(&str, &str)> {
    let (op, rest) = branch.strip_prefix("supervise/")?.split_once('/')?;
    let (unit, sprint) = rest.split_once('/')?;
    sprint.starts_with("sprint-").then_some((op, unit))
}

/// The folders of the supervisor's bookkeeping on sprint and integration
/// branches ([`results_path`], [`sprint_spec_path`], [`prompt_path`]): taken
/// off the integration branch before the final pull request.
pub const BOOKKEEPING: [&str; 3] = [
    ".supervise/results/",
    ".supervise/sprints/",
    ".supervise/prompts/",
];

/// Where a dispatch's recorded results live in the repository: one file per
/// dispatch, so sprints of different units never touch the same path.
pub fn results_path(dispatch: &str) -> String {
    format!(".supervise/results/{}.json", dispatch.replace('/', "__"))
}

/// Where a dispatch's sprint definition is committed when no plan file in the
/// repository holds it (work a workflow added): the agent workflow's
/// verifying job (`supervise verify --handoff`) checks the criteria it names.
pub fn sprint_spec_path(dispatch: &str) -> String {
    format!(".supervise/sprints/{}.json", dispatch.replace('/', "__"))
}

/// A sprint that lives in no plan file: its unit (with this one sprint) and
/// where the agent's answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SprintSpec {
    pub unit: crate::plan::WorkUnit,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_file: Option<String>,
}

impl SprintSpec {
    /// The one-unit plan the sprint is checked against.
    pub fn plan(&self) -> crate::plan::Plan {
        crate::plan::Plan {
            title: self.unit.name.clone(),
            feature_name: None,
            dependency_structure: crate::plan::DependencyStructure::Sequential,
            dispatch_mode: crate::plan::DispatchMode::Dynamic,
            dispatch_template: None,
            work_units: vec![self.unit.clone()],
            referenced_files: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// What the commits the supervisor and the agent workflow's trusted jobs make
/// begin with: they are not the agent's work when its commits are counted.
pub const COMMIT_PREFIX: &str = "supervise:";

/// Whether a commit message (bytes: it need not be UTF-8) is the
/// supervisor's own.
pub fn is_supervisor_commit(message: &[u8]) -> bool {
    message.starts_with(COMMIT_PREFIX.as_bytes())
}

pub use crate::text::short_id;

/// Where a sprint's prompt is committed on its branch when it is too long to
/// travel as the dispatch's `prompt` input (see [`prompt_input`]).
pub fn prompt_path(unit_slug: &str, sprint: &str) -> String {
    format!(".supervise/prompts/{unit_slug}-sprint-{sprint}.md")
}

/// The longest prompt sent inline as a workflow dispatch input, in bytes.
/// GitHub takes at most 65,535 characters of inputs in all; the rest of the
/// inputs are short, and this leaves room for them whatever the encoding.
pub const PROMPT_INPUT_LIMIT: usize = 32 * 1024;

/// The dispatch's `prompt` input: the prompt itself, or `@<path>` when it was
/// committed at `path` on the sprint branch instead ([`None`] here: too long,
/// or beginning with `@` itself, so it cannot be told from a reference).
pub fn prompt_input(prompt: &str) -> Option<&str> {
    (prompt.len() <= PROMPT_INPUT_LIMIT && !prompt.starts_with('@')).then_some(prompt)
}

/// What an attempt leaves for the supervisor: the agent's exit status, its
/// turn count and output tail, and the exit criteria as the runner checked them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub turns_used: Option<u32>,
    /// What the agent's CLI reported the run used (its own JSON result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::engine::usage::Usage>,
    pub output_tail: String,
    pub criteria: Vec<CriterionResult>,
    /// What the plan's progress files say (recorded by the step that ran the criteria).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressMarker>,
    /// The agent's commits since the run began (short ids, the supervisor's
    /// own left out), when the runner knew where it began (`SUPERVISE_BASE`,
    /// else `GITHUB_SHA`): the supervisor then need not ask GitHub to compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commits: Option<Vec<String>>,
    /// The commit the run began at (full id), recorded only when the head
    /// the run leaves still contains it: a branch that began at the
    /// integration branch's current head merges into it cleanly, and the
    /// supervisor need not wait for GitHub to compute `mergeable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_at: Option<String>,
    /// The paths the run's head changes from `began_at` (recorded with it,
    /// at most [`CHANGED_LIMIT`]): beside the paths merged into the
    /// integration branch since the run began, they tell whether the sprint's
    /// branch merges cleanly without waiting for GitHub to compute it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<Vec<String>>,
    /// What the agent wrote to `$SUPERVISE_RESULT_FILE` (at most
    /// [`ANSWER_LIMIT`] bytes, invalid UTF-8 replaced): a workflow's input,
    /// such as the manager's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why the trusted step refused the agent's work unchecked (see
    /// [`crate::engine::trust`]); its criteria were then not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// No agent ran: the sprint's work was found on the head it was to
    /// start from (see [`crate::engine::FoundDone`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_done: Option<crate::engine::FoundDone>,
}

/// The most changed paths a results record lists; a run that changed more
/// lists none (its merge is then left to GitHub to judge).
pub const CHANGED_LIMIT: usize = 2_000;

/// The check run the trusted step that commits a results record puts on that
/// commit. It carries the record's digest, and GitHub names who made it: an
/// agent's job holds no credential that can make check runs, so a record
/// without a matching one did not come from the trusted step.
pub const RECORD_CHECK: &str = "supervise: results record";

/// The check run on the final integration head that lists every criterion
/// of every sprint as it ran there: made by the service where files alone
/// decide, else by the agent workflow's trusted publishing job, whose
/// `output.text` carries the results (JSON). Only the check run's maker can
/// change it, so it is taken from a check run the supervisor's App or a
/// workflow's token made, with the dispatch's id.
pub const FINAL_CHECK: &str = "supervise: final verification";

/// How a record's digest is written in its check run's summary.
pub fn record_digest_line(record: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(record)))
}

/// Whether the check-run summary `summary` vouches for `record` (the bytes of
/// the results file as committed).
pub fn vouches_for(summary: &str, record: &[u8]) -> bool {
    let line = record_digest_line(record);
    summary.split_whitespace().any(|w| w == line)
}

/// GitHub's own App that workflow tokens (`GITHUB_TOKEN`) act as: a record
/// check made with the agent workflow's `GITHUB_TOKEN`, in its trusted job,
/// names it. The agent's job is given a token that cannot make check runs.
pub const GITHUB_ACTIONS_APP: &str = "github-actions";

/// The most of an answer the supervisor keeps; an answer is a decision's
/// input, not a place for logs.
pub const ANSWER_LIMIT: usize = 256 * 1024;

/// Where the agent writes its answer: the repository file the workflow names
/// (in the agent's checkout), or a file of the runner's own beside the run.
pub fn answer_path(order: &DispatchOrder, checkout: &Path, own: &Path) -> PathBuf {
    match &order.answer_file {
        Some(rel) => checkout.join(rel),
        None => own.to_path_buf(),
    }
}

/// Reads an answer the agent left, if it left one.
pub fn read_answer(path: &Path) -> Option<String> {
    // An answer is recorded, logged, shown and published: never with a key
    // the agent printed into it.
    read_untrusted(path, ANSWER_LIMIT)
        .map(|b| crate::scrub::scrub(&String::from_utf8_lossy(&b)).into_owned())
}

/// Reads a file an agent (or repository code it touched) could have made:
/// at most `limit` bytes, and only a regular file reached without following
/// a last symbolic link. A FIFO would block the reader for ever, a device
/// never end, and a link lead outside the worktree: each reads as absent.
/// The file is opened without blocking and checked on the open descriptor,
/// so it cannot be swapped between the check and the read.
pub fn read_untrusted(path: &Path, limit: usize) -> Option<Vec<u8>> {
    read_untrusted_part(path, limit, false)
}

/// [`read_untrusted`], keeping the last `limit` bytes (an agent's output,
/// whose end says how it ended).
pub fn read_untrusted_tail(path: &Path, limit: usize) -> Option<Vec<u8>> {
    read_untrusted_part(path, limit, true)
}

fn read_untrusted_part(path: &Path, limit: usize, tail: bool) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    #[cfg(unix)]
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(path)
            .ok()?
    };
    #[cfg(not(unix))]
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut file = file;
    if tail && meta.len() > limit as u64 {
        file.seek(SeekFrom::Start(meta.len() - limit as u64)).ok()?;
    }
    let mut bytes = Vec::new();
    file.take(limit as u64).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// What an agent printed, from a file it could have made: its end, at most
/// [`EVIDENCE_FILE_LIMIT`] bytes, invalid UTF-8 replaced; empty when there is
/// no such file.
pub fn read_output(path: &Path) -> String {
    read_untrusted_tail(path, EVIDENCE_FILE_LIMIT)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The most bytes of a text file in the worktree read for evidence (a
/// progress file, a file an exit criterion looks into).
pub const EVIDENCE_FILE_LIMIT: usize = 4 << 20;

/// The names of the variables every agent is given, wherever it runs:
/// locally by [`agent_env`], on Actions by the agent workflow (a test holds
/// `.github/workflows/supervise-agent.yml` and the fake's runner to it).
pub const AGENT_VARIABLES: [&str; 10] = [
    "SUPERVISE_PROMPT_FILE",
    "SUPERVISE_RESULT_FILE",
    "SUPERVISE_DISPATCH_ID",
    "SUPERVISE_UNIT",
    "SUPERVISE_UNIT_DIR",
    "SUPERVISE_SPRINT",
    "SUPERVISE_SPRINT_NAME",
    "SUPERVISE_ATTEMPT",
    "SUPERVISE_MODEL",
    "SUPERVISE_MAX_TURNS",
];

/// The inputs the supervisor dispatches the agent workflow with: a
/// workflow that does not declare each refuses the dispatch (422), so
/// `supervise doctor` holds the repository's workflow to them.
pub const AGENT_WORKFLOW_INPUTS: [&str; 11] = [
    "dispatch_id",
    "plan",
    "unit",
    "directory",
    "sprint",
    "sprint_name",
    "attempt",
    "model",
    "max_turns",
    "prompt",
    "branch",
];

/// Variables of the supervisor's own that neither an agent nor the wrapper
/// around it (whose environment the agent could read in `/proc`) is started
/// with: a key it could sign with elsewhere (the notices' signing key, read
/// once by the supervisor at start).
pub const WITHHELD_FROM_AGENTS: &[&str] = &["SUPERVISE_NOTIFY_SECRET"];

/// The environment an agent is started with (documented in the README's
/// "agent contract"); `prompt_file` is where the prompt was written and
/// `answer_file` where a structured answer goes (see [`answer_path`]).
pub fn agent_env(
    order: &DispatchOrder,
    prompt_file: &str,
    answer_file: &str,
) -> Vec<(&'static str, String)> {
    let values = [
        prompt_file.to_string(),
        answer_file.to_string(),
        order.dispatch.0.clone(),
        order.unit.clone(),
        order.directory.clone().unwrap_or_else(|| ".".into()),
        order.sprint.as_str().to_string(),
        order.sprint_name.clone(),
        order.attempt.to_string(),
        order.model_id.clone(),
        order.max_turns.to_string(),
    ];
    AGENT_VARIABLES.into_iter().zip(values).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the plan's title, unit name and sprint id, a sprint's
        /// branch gives back its operation and unit (the runner keys a
        /// unit's worktree on them).
        #[test]
        fn a_sprint_branch_names_its_operation_and_unit(
            title in "\\PC{0,40}",
            unit in "\\PC{0,60}",
            sprint in "\\PC{1,12}",
            unique in any::<u32>(),
        ) {
            let op = operation_id(&title, u64::from(unique));
            let slug = crate::text::slug(&unit);
            let branch = sprint_branch(&op, &slug, &sprint);
            prop_assert_eq!(sprint_branch_unit(&branch), Some((op.as_str(), slug.as_str())));
        }

        /// The operation a comment started is found again from the comment,
        /// for every comment id: small ones (young GitHub Enterprise
        /// instances) are padded in the id, and the look-up must see that;
        /// another comment's operation is not taken for it.
        #[test]
        fn a_comment_finds_the_operation_it_started_and_no_other(
            title in "\\PC{0,40}",
            unique in prop_oneof![0u64..0x10_0000, any::<u64>()],
            other in prop_oneof![0u64..0x10_0000, any::<u64>()],
        ) {
            let op = operation_id(&title, unique);
            prop_assert!(started_by(&op, unique), "{}", op);
            prop_assert_eq!(started_by(&op, other), other == unique);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_a_device_or_a_link_reads_as_absent_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("answer");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: a plain open would block here for ever.
        assert_eq!(read_answer(&fifo), None);
        assert_eq!(read_untrusted(Path::new("/dev/zero"), 10), None);
        let real = dir.path().join("real");
        std::fs::write(&real, "x".repeat(100)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read_untrusted(&link, 10), None);
        assert_eq!(read_untrusted(&real, 10).map(|b| b.len()), Some(10));
        std::fs::write(&real, "head...tail").unwrap();
        assert_eq!(read_untrusted_tail(&real, 4), Some(b"tail".to_vec()));
    }

    #[test]
    fn other_branches_name_no_unit() {
        for b in [
            integration_branch("op-1"),
            "supervise/op-1/gate".to_string(),
            "supervise/op-1/unit/notes".to_string(),
            "main".to_string(),
            "supervise/op-1".to_string(),
        ] {
            assert_eq!(sprint_branch_unit(&b), None, "{b}");
        }
    }
}
