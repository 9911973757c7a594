//! `supervise review`: a person's review of a verified sprint from the
//! terminal — an approval that lets it merge, or a request for changes (a
//! body and comments on lines) that starts a fix round. Recorded where the
//! running supervisor looks (see `place::local::review`); one that is not
//! running reads it when it next runs.

use super::run_cmd::load;
use super::terminal::exit;
use crate::engine::{OperationState, ReviewComment, ReviewFeedback};
use crate::place::local::review::{self, LocalReview, Verdict};
use crate::place::local::{git::Git, supervisor};
use crate::plan::SprintId;
use anyhow::{anyhow, Result};
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  supervise review api --approve\n  supervise review api -m \"Name the error type after the module.\" --comment src/api.rs:12:\"return a Result here\""
)]
pub struct ReviewArgs {
    /// The work unit whose verified sprint is reviewed.
    pub unit: String,
    /// The sprint (default: the unit's sprint waiting for a review).
    #[arg(long)]
    pub sprint: Option<String>,
    /// Approve it: it is merged and the unit goes on.
    #[arg(long, conflicts_with_all = ["message", "comment"])]
    pub approve: bool,
    /// Ask for changes: what to change (a fix round on the sprint's branch).
    #[arg(long, short)]
    pub message: Option<String>,
    /// A comment on a line, as PATH:LINE:TEXT (the path from the
    /// repository's top); may be given again.
    #[arg(long, value_name = "PATH:LINE:TEXT")]
    pub comment: Vec<String>,
    /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
    #[arg(long)]
    pub plan: Option<PathBuf>,
}

/// A `PATH:LINE:TEXT` comment, or what is wrong with it.
fn line_comment(said: &str) -> Result<(String, u32, String)> {
    let mut parts = said.splitn(3, ':');
    let (Some(path), Some(line), Some(text)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(anyhow!(
            "--comment {said:?}: write it as PATH:LINE:TEXT, e.g. src/api.rs:12:\"return a Result here\""
        ));
    };
    let line = line
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|l| *l > 0)
        .ok_or_else(|| anyhow!("--comment {said:?}: {line:?} is not a line number (1 or more)"))?;
    if path.trim().is_empty() || text.trim().is_empty() {
        return Err(anyhow!(
            "--comment {said:?}: both the path and the text are needed"
        ));
    }
    Ok((path.trim().to_string(), line, text.trim().to_string()))
}

/// The sprint a review is of: the one named, or the unit's sprint waiting
/// for its merge (or in a fix round: a review then waits for the next).
fn sprint_of(st: &OperationState, unit: &str, named: Option<&str>) -> Result<SprintId> {
    let Some(u) = st.unit_index(unit) else {
        let names: Vec<&str> = st.units.iter().map(|u| u.name.as_str()).collect();
        let hint = crate::text::nearest(unit, names.iter().copied())
            .map(|n| format!(" Did you mean `{n}`?"))
            .unwrap_or_default();
        return Err(anyhow!(
            "no work unit `{unit}` in this operation ({}).{hint}",
            names.join(", ")
        ));
    };
    let run = &st.units[u];
    if let Some(n) = named {
        let id = SprintId::parse(n)
            .ok_or_else(|| anyhow!("--sprint {n:?}: not a sprint number (1, 2, 2.1 …)"))?;
        if !run.sprints.iter().any(|s| s.id == id) {
            return Err(anyhow!("{unit} has no Sprint {id}"));
        }
        return Ok(id);
    }
    run.sprints
        .iter()
        .find(|s| s.awaiting_merge() || !s.review.is_empty() && s.completion.is_none())
        .map(|s| s.id.clone())
        .ok_or_else(|| {
            anyhow!(
                "{unit} has no sprint waiting for a review. With `supervise run --review` (or `merge: after_review` in .github/supervise.yml) each verified sprint waits for one before it is merged."
            )
        })
}

/// Who reviews: git's `user.name`, else the login.
fn reviewer() -> String {
    std::process::Command::new("git")
        .args(["config", "user.name"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "you".into())
}

pub fn run(args: &ReviewArgs) -> Result<i32> {
    if !args.approve && args.message.is_none() && args.comment.is_empty() {
        eprintln!("Say what the review is: --approve, or -m \"what to change\" (and --comment PATH:LINE:TEXT).");
        return Ok(exit::USAGE);
    }
    let comments = match args
        .comment
        .iter()
        .map(|c| line_comment(c))
        .collect::<Result<Vec<_>>>()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(exit::USAGE);
        }
    };
    let plan = match load(args.plan.as_deref())? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dir = supervisor::state_dir(&plan);
    let Some(st) = supervisor::read_state(&plan)? else {
        eprintln!("No operation for this plan yet: `supervise run --review` starts one whose sprints wait for your review.");
        return Ok(exit::USAGE);
    };
    let sprint = match sprint_of(&st, &args.unit, args.sprint.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return Ok(exit::USAGE);
        }
    };
    let git = Git::open(&plan.root, &dir)?;
    let branch =
        crate::contract::sprint_branch(&st.id.0, &st.unit_slug(&args.unit), sprint.as_str());
    let head = git.branch_head(&branch).unwrap_or_default();
    let comments = comments
        .into_iter()
        .map(|(path, line, body)| {
            // The lines up to the one commented on, as GitHub shows a
            // comment's hunk.
            let hunk = git
                .file_at(&head, &path)
                .map(|text| {
                    let lines: Vec<&str> = text.lines().collect();
                    let end = (line as usize).min(lines.len());
                    lines[end.saturating_sub(4)..end].join("\n")
                })
                .unwrap_or_default();
            ReviewComment {
                path,
                line: Some(line),
                hunk,
                body,
            }
        })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let verdict = if args.approve {
        Verdict::Approved
    } else {
        Verdict::ChangesRequested
    };
    review::record(
        &dir,
        &LocalReview {
            unit: args.unit.clone(),
            sprint: sprint.clone(),
            verdict,
            feedback: ReviewFeedback {
                id: format!("local-{nanos}"),
                reviewer: reviewer(),
                commit: head.clone(),
                body: args.message.clone().unwrap_or_default(),
                comments,
            },
        },
    )?;
    let what = match verdict {
        Verdict::Approved => format!(
            "Approved {} Sprint {sprint} at {}: it is merged",
            args.unit,
            crate::text::short_id(&head)
        ),
        Verdict::ChangesRequested => format!(
            "Asked for changes to {} Sprint {sprint}: a fix round starts on {branch}",
            args.unit
        ),
    };
    match supervisor::running_supervisor(&dir) {
        Some(pid) => println!("{what} (the running supervisor, pid {pid}, reads it within a tick)."),
        // `--review` again: without it a resumed run merges at once.
        None => println!("{what} when the operation goes on (`supervise run --review`): no supervisor runs for this plan now."),
    }
    Ok(exit::COMPLETED)
}
