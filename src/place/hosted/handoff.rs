//! The trusted half of an attempt on GitHub. The agent's job runs with a
//! read-only token and no credential that can write; it hands its work on as
//! a git bundle with its exit status, output and answer (the *handoff*). Then,
//! in jobs the agent never ran in:
//!
//! - [`verify`] (no credential at all) reads the sprint's definition from the
//!   trusted commit, refuses work that changes what judges it
//!   ([`crate::engine::trust`]), runs the exit criteria on the work, and
//!   writes the *verdict*: the results record and the commit to publish.
//! - [`publish`] (the only step with a write credential, running no
//!   repository code) pushes that commit with the record on top, and vouches
//!   for the record with a check run carrying its digest
//!   ([`crate::contract::RECORD_CHECK`]), which the supervisor requires.
//!
//! Everything read from the handoff is the agent's and is read as such:
//! bounded, regular files only, never followed through a link.

use crate::contract::{read_untrusted, sprint_spec_path, RunResult, SprintSpec};
use crate::engine::trust::{refusal, Rules};
use crate::plan::{Plan, SprintId};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The files of a handoff, as the agent's job writes them.
pub mod files {
    /// `git bundle` of the agent's commits since the sprint branch's head
    /// (absent when it made none).
    pub const BUNDLE: &str = "work.bundle";
    /// The agent's exit status, in decimal.
    pub const AGENT_EXIT: &str = "agent-exit";
    /// The agent's output.
    pub const AGENT_OUTPUT: &str = "agent-output.txt";
    /// What the agent wrote to `$SUPERVISE_RESULT_FILE`.
    pub const ANSWER: &str = "answer";
    /// The verdict: the results record.
    pub const RECORD: &str = "record.json";
    /// The verdict: the commit to publish on the sprint branch.
    pub const HEAD: &str = "head";
}

/// What the verifying job is told (the dispatch's inputs).
pub struct Attempt<'a> {
    /// The plan's path in the repository, or the sprint definition's
    /// ([`sprint_spec_path`]) for work no plan file holds.
    pub plan: &'a str,
    pub unit: &'a str,
    pub sprint: &'a str,
    pub dispatch: &'a str,
    /// The sprint branch the work goes to.
    pub branch: &'a str,
}

/// Runs git in `dir`, returning its standard output; the error says which
/// command failed and what git said.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// The head of `branch` on the remote, if the branch is there.
fn remote_head(root: &Path, branch: &str) -> Option<String> {
    git(
        root,
        &[
            "rev-parse",
            "-q",
            "--verify",
            &format!("refs/remotes/origin/{branch}^{{commit}}"),
        ],
    )
    .ok()
}

/// Where the work starts: the sprint branch as the remote has it (only the
/// trusted step pushes there), else the trusted commit checked out.
fn base_of(root: &Path, branch: &str) -> Result<String> {
    match remote_head(root, branch) {
        Some(sha) => Ok(sha),
        None => git(root, &["rev-parse", "HEAD"]),
    }
}

/// The sprint's unit and definition, read before any of the work is in the
/// checkout: the plan from the trusted commit, or the definition the
/// supervisor committed at the base.
struct Definition {
    plan: Plan,
    /// The plan file's repository path, when there is one.
    plan_path: Option<String>,
    /// Where criteria run from: the plan's directory, or the top.
    root: PathBuf,
    answer_file: Option<String>,
}

fn definition(root: &Path, a: &Attempt<'_>, base: &str) -> Result<Definition> {
    if a.plan == sprint_spec_path(a.dispatch) {
        let text = git(root, &["show", &format!("{base}:{}", a.plan)])
            .with_context(|| format!("reading the sprint's definition {}", a.plan))?;
        let spec: SprintSpec = serde_json::from_str(&text)
            .with_context(|| format!("reading the sprint's definition {}", a.plan))?;
        return Ok(Definition {
            plan: spec.plan(),
            plan_path: None,
            root: root.to_path_buf(),
            answer_file: spec.answer_file,
        });
    }
    let loaded = crate::plan::load(&root.join(a.plan))
        .map_err(|e| anyhow!("{}: {e}", a.plan))
        .context("reading the plan at the trusted commit")?;
    Ok(Definition {
        plan: loaded.plan,
        plan_path: Some(a.plan.trim_start_matches("./").to_string()),
        root: loaded.root,
        answer_file: None,
    })
}

/// Whether the repository lets agents change workflows (its settings at the
/// trusted commit; unreadable settings do not).
fn workflows_allowed(root: &Path) -> bool {
    crate::settings::read_file(&root.join(".github/supervise.yml"))
        .ok()
        .and_then(|s| s.agent_may_change_workflows)
        .unwrap_or(false)
}

/// The commit the agent's bundle leads to, fetched into the checkout; `Err`
/// says why the work cannot be taken (the attempt fails with it).
fn fetch_work(root: &Path, handoff: &Path, base: &str) -> std::result::Result<String, String> {
    let bundle = handoff.join(files::BUNDLE);
    match std::fs::symlink_metadata(&bundle) {
        Err(_) => return Ok(base.to_string()),
        Ok(m) if !m.is_file() => return Err("the work handed on is not a file".into()),
        Ok(_) => {}
    }
    let bundle = bundle.to_string_lossy();
    git(root, &["fetch", "-q", "--no-tags", &bundle, "HEAD"])
        .map_err(|e| format!("the work handed on could not be read: {e}"))?;
    let head = git(root, &["rev-parse", "FETCH_HEAD^{commit}"]).map_err(|e| e.to_string())?;
    if git(root, &["merge-base", "--is-ancestor", base, &head]).is_err() {
        return Err(format!(
            "the work handed on does not build on the sprint branch's head {}",
            crate::contract::short_id(base)
        ));
    }
    Ok(head)
}

/// The first step of the verifying job, before any of the work runs on its
/// runner and the only one that holds the keys the agent's job held
/// ([`crate::scrub::SECRETS_VAR`]): whether the agent's commits carry a
/// secret, written to `out` (empty when they do not) for [`verify`]; and the
/// agent's output and answer in the handoff masked of those keys, which the
/// agent's own job could not be trusted to do.
pub fn scan(root: &Path, branch: &str, handoff: &Path, out: &Path) -> Result<Option<String>> {
    for name in [files::AGENT_OUTPUT, files::ANSWER] {
        let path = handoff.join(name);
        if let Some(bytes) = read_untrusted(&path, 64 << 20) {
            let text = String::from_utf8_lossy(&bytes);
            if let std::borrow::Cow::Owned(masked) = crate::scrub::scrub(&text) {
                // The agent's file may be a link: replaced, never written through.
                let _ = std::fs::remove_file(&path);
                std::fs::write(&path, masked)
                    .with_context(|| format!("masking {}", path.display()))?;
            }
        }
    }
    let base = base_of(root, branch)?;
    let found = match fetch_work(root, handoff, &base) {
        Ok(head) => crate::attempt::evidence::secret_in_commits(root, &base, &head)?,
        // The verifying step refuses it for this reason itself.
        Err(_) => None,
    };
    std::fs::write(out, found.as_deref().unwrap_or(""))
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(found)
}

/// The paths `git diff` lists between two commits.
fn changed_paths(root: &Path, from: &str, to: &str) -> Result<Vec<String>> {
    Ok(git(
        root,
        &["diff", "--name-only", "--no-renames", "-z", from, to],
    )?
    .split('\0')
    .filter(|p| !p.is_empty())
    .map(str::to_string)
    .collect())
}

/// The paths the agent's own commits change from `base` to `head`. A
/// conflict round merges the integration branch in, as its prompt says:
/// what that brings (every merged sprint's results record under
/// `.supervise/`) is the trusted branch's, not the agent's writing. So a
/// path whose content at `head` is the integration branch's exactly is not
/// the agent's change; every other path is judged.
fn agents_own_changes(root: &Path, branch: &str, base: &str, head: &str) -> Result<Vec<String>> {
    let changed = changed_paths(root, base, head)?;
    let integration = branch
        .strip_prefix("supervise/")
        .and_then(|rest| rest.split_once('/'))
        .map(|(op, _)| crate::engine::naming::integration_branch(op))
        .and_then(|b| remote_head(root, &b));
    let Some(integration) = integration else {
        return Ok(changed);
    };
    // Only when the work holds the integration head: a merge of it.
    if git(root, &["merge-base", "--is-ancestor", &integration, head]).is_err() {
        return Ok(changed);
    }
    let differs: std::collections::HashSet<String> = changed_paths(root, &integration, head)?
        .into_iter()
        .collect();
    Ok(changed
        .into_iter()
        .filter(|p| differs.contains(p))
        .collect())
}

/// What the scan step found, read by the step that runs the work: a
/// refusal when it found a secret, or when its answer is missing (a scan
/// that did not run is not a clean one).
fn scanned_refusal(path: &Path) -> Option<String> {
    match read_untrusted(path, 64 << 10) {
        Some(b) if b.is_empty() => None,
        Some(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        None => Some(format!(
            "the secret scan's result ({}) is missing, so the work was not taken; the agent workflow's scan step must run before `supervise verify`",
            path.display()
        )),
    }
}

/// What the trusted verifying job decides: the record, and the commit that
/// goes on the sprint branch (the base itself when the work was refused).
pub struct Verdict {
    pub record: RunResult,
    pub head: String,
}

/// Checks an attempt's handoff in the trusted checkout at `root` (the commit
/// dispatched on, with the remote's branches), and writes the verdict's
/// files into `out`.
pub fn verify(
    root: &Path,
    a: &Attempt<'_>,
    handoff: &Path,
    scanned: Option<&Path>,
    out: &Path,
    timeout: Duration,
) -> Result<Verdict> {
    let base = base_of(root, a.branch)?;
    let def = definition(root, a, &base)?;
    let unit = def
        .plan
        .unit(a.unit)
        .ok_or_else(|| anyhow!("there is no work unit `{}` in the plan", a.unit))?
        .clone();
    let id = SprintId::parse(a.sprint)
        .ok_or_else(|| anyhow!("`{}` is not a sprint id (like 2 or 2a)", a.sprint))?;
    let sprint = unit
        .sprints
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| anyhow!("work unit `{}` has no sprint {}", a.unit, a.sprint))?
        .clone();
    let rules = Rules {
        plan: def.plan_path.as_ref().map(|_| &def.plan),
        plan_path: def.plan_path.as_deref(),
        workflows_allowed: workflows_allowed(root),
    };
    let fetched = fetch_work(root, handoff, &base);
    let refused = match &fetched {
        Err(why) => Some(why.clone()),
        Ok(head) => {
            let changed = agents_own_changes(root, a.branch, &base, head)?;
            let after = rules
                .plan_path
                .and_then(|p| git(root, &["show", &format!("{head}:{p}")]).ok());
            let why = refusal(&rules, &changed, after.as_deref())
                .or_else(|| scanned.and_then(scanned_refusal));
            match why {
                Some(why) => Some(why),
                // Again with the secrets this step knows: the scan step
                // knew the model keys as well.
                None => crate::attempt::evidence::secret_in_commits(root, &base, head)?,
            }
        }
    };
    let head = match (&fetched, &refused) {
        (Ok(h), None) => h.clone(),
        _ => base.clone(),
    };
    git(root, &["checkout", "-q", "-f", "--detach", &head])?;
    let left = crate::attempt::Left {
        output: crate::contract::read_output(&handoff.join(files::AGENT_OUTPUT)),
        exit_code: read_untrusted(&handoff.join(files::AGENT_EXIT), 32)
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<i32>().ok()),
        answer: match &def.answer_file {
            Some(rel) => crate::contract::read_answer(&root.join(rel)),
            None => crate::contract::read_answer(&handoff.join(files::ANSWER)),
        },
    };
    // The criteria run repository code, which may move HEAD: what is
    // recorded is of the head checked and published.
    let commits = crate::attempt::Commits {
        since: &base,
        head: Some(&head),
    };
    let record = crate::attempt::verify(
        &def.plan,
        &unit,
        &sprint,
        &def.root,
        left,
        Some(commits),
        refused,
        timeout,
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join(files::RECORD), serde_json::to_vec_pretty(&record)?)?;
    std::fs::write(out.join(files::HEAD), &head)?;
    Ok(Verdict { record, head })
}

/// Whether an attempt's verdict counts as a success for the run's conclusion
/// (the supervisor decides from the record; this colours the run).
pub fn passed(record: &RunResult) -> bool {
    record.refused.is_none()
        && record.exit_code == Some(0)
        && record
            .criteria
            .iter()
            .all(|c| c.outcome != crate::engine::CriterionOutcome::Failed)
}

/// What [`publish`] leaves: the commit it pushed and the record's bytes.
pub struct Published {
    pub commit: String,
    pub record: Vec<u8>,
}

/// In the publishing job's checkout (whose `origin` takes pushes): takes the
/// verdict's commit from the handoff (nothing else of it), commits the record
/// on it and pushes the sprint branch. Returns what the record check must
/// vouch for.
pub fn publish(root: &Path, a: &Attempt<'_>, handoff: &Path, verdict: &Path) -> Result<Published> {
    let record = std::fs::read(verdict.join(files::RECORD))
        .with_context(|| format!("reading the verdict in {}", verdict.display()))?;
    let parsed: RunResult =
        serde_json::from_slice(&record).context("reading the verdict's record")?;
    let head = std::fs::read_to_string(verdict.join(files::HEAD))
        .context("reading the verdict's commit")?
        .trim()
        .to_string();
    let base = base_of(root, a.branch)?;
    let target = if head == base {
        base.clone()
    } else {
        // Only the commit the verifying job checked is taken.
        let fetched = fetch_work(root, handoff, &base).map_err(|e| anyhow!(e))?;
        if fetched != head || parsed.refused.is_some() {
            bail!(
                "the work handed on ({}) is not the commit the verifying job checked ({})",
                crate::contract::short_id(&fetched),
                crate::contract::short_id(&head)
            );
        }
        head
    };
    git(root, &["checkout", "-q", "-f", "-B", a.branch, &target])?;
    crate::attempt::record::commit_record(root, a.dispatch, &record)?;
    git(
        root,
        &[
            "push",
            "-q",
            "origin",
            &format!("HEAD:refs/heads/{}", a.branch),
        ],
    )?;
    let commit = git(root, &["rev-parse", "HEAD"])?;
    Ok(Published { commit, record })
}
