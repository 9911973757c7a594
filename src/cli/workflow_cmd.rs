//! `supervise solve` and `supervise manage`: work without a written plan, run
//! locally by the same supervisor, engine and agent contract as `supervise
//! run`. Each keeps its operation in `.supervise/<solve|manage>/` at the
//! repository's top, apart from the plans' own.

use super::run_cmd::{preflight_agent, resolve_agent, RunFlags};
use super::terminal::{self, exit, OutputMode, Terminal};
use crate::engine::workflow::{AcceptedPlan, Manager, Phases, Scope, Workflow, WorkflowSettings};
use crate::engine::{Input, OverallStatus};
use crate::place::local::supervisor::Supervisor;
use crate::plan::LoadedPlan;
use crate::settings::{self, FileSettings, Settings};
use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct SolveArgs {
    /// What to do, in words (an issue's title and body). Without it, the
    /// workflow under way goes on.
    pub description: Option<String>,
    /// Read the description from a file instead (an issue saved as text).
    #[arg(long, conflicts_with = "description")]
    pub issue_file: Option<PathBuf>,
    /// research-only, research-and-plan, full-implementation or debug-only
    /// (default: detected from the description, and said why).
    #[arg(long)]
    pub scope: Option<String>,
    #[command(flatten)]
    pub flags: RunFlags,
}

#[derive(Debug, Clone, Args)]
pub struct ManageArgs {
    /// The request the manager breaks into tasks. Without it, the loop under
    /// way goes on.
    pub request: Option<String>,
    #[command(flatten)]
    pub flags: RunFlags,
}

pub fn solve(a: &SolveArgs) -> Result<i32> {
    let description = match (&a.description, &a.issue_file) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(f)) => {
            Some(std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)
        }
        (None, None) => None,
    };
    let scope = match a.scope.as_deref().map(|s| (s, Scope::parse(s))) {
        Some((s, None)) => {
            eprintln!("--scope {s}: not a scope; use one of {}", Scope::names());
            return Ok(exit::USAGE);
        }
        Some((_, found)) => found,
        None => None,
    };
    if let Some(d) = &description {
        if d.trim().is_empty() {
            eprintln!("The description is empty: say what to research, plan, build or fix.");
            return Ok(exit::USAGE);
        }
    }
    drive(
        "solve",
        &a.flags,
        description.map(|d| {
            move |root: &Path, s: &WorkflowSettings| {
                let mut s = s.clone();
                if s.test_command.is_none() {
                    s.test_command = test_command(root);
                }
                Workflow::Phases(Phases::new(&d, scope, &s, next_topic_number(root)))
            }
        }),
    )
}

pub fn manage(a: &ManageArgs) -> Result<i32> {
    if a.request.as_deref().is_some_and(|r| r.trim().is_empty()) {
        eprintln!("The request is empty: say what the manager should get done.");
        return Ok(exit::USAGE);
    }
    drive(
        "manage",
        &a.flags,
        a.request.clone().map(|r| {
            move |root: &Path, s: &WorkflowSettings| {
                let topic = crate::engine::workflow::topic_dir(next_topic_number(root), &r);
                Workflow::Manager(Manager::new(&r, &topic, s.max_tasks))
            }
        }),
    )
}

/// `supervise plan breakdown DOC` with an agent: the phase workflow's plan
/// phase alone, held to `breakdown::accept`, under `.supervise/breakdown/`.
/// Returns the exit status and, when it completed, the accepted plan and how
/// many attempts it took.
pub fn breakdown_with_agent(
    document: &str,
    flags: &RunFlags,
) -> Result<(i32, Option<AcceptedPlan>)> {
    let doc = document.to_string();
    plan_by_agent("breakdown", flags, move |root, s| {
        Phases::breakdown(&doc, s, next_topic_number(root))
    })
}

/// `supervise plan evaluate` with an agent: `plan`'s findings fixed by a
/// planning agent, held to `evaluate::accept_fix`; the revision and its
/// attempts once accepted.
pub fn evaluate_with_agent(
    plan: &str,
    findings: &str,
    flags: &RunFlags,
) -> Result<(i32, Option<AcceptedPlan>)> {
    let (plan, findings) = (plan.to_string(), findings.to_string());
    plan_by_agent("evaluate", flags, move |root, s| {
        Phases::revision(&plan, &findings, s, next_topic_number(root))
    })
}

/// The plan phase alone, run as `kind` (its state in `.supervise/<kind>/`):
/// the accepted plan and the attempts it took, or None when it was not
/// accepted (the exit status says how it ended).
fn plan_by_agent<F>(kind: &str, flags: &RunFlags, make: F) -> Result<(i32, Option<AcceptedPlan>)>
where
    F: FnOnce(&Path, &WorkflowSettings) -> Phases,
{
    let code = drive(
        kind,
        flags,
        Some(move |root: &Path, s: &WorkflowSettings| Workflow::Phases(make(root, s))),
    )?;
    let root = repo_top(&std::env::current_dir()?)?;
    let st =
        crate::store::FileLedger::read(root.join(".supervise").join(kind).join("events.jsonl"))?
            .state;
    Ok((code, st.as_ref().and_then(Phases::accepted_plan)))
}

/// Whether an agent is configured for this repository (a flag, the
/// environment, or `agent:` in its settings): what decides whether the plan
/// tools think with an agent or work offline.
pub fn agent_configured(flags: &RunFlags) -> bool {
    if flags.agent.as_deref().is_some_and(|a| !a.trim().is_empty()) {
        return true;
    }
    let Ok(root) =
        std::env::current_dir().and_then(|d| repo_top(&d).map_err(std::io::Error::other))
    else {
        return false;
    };
    settings::find_file(&root)
        .and_then(|p| settings::read_file(&p).ok())
        .is_some_and(|f| f.agent.is_some())
}

/// How a person runs the workflow of `kind` again: `supervise solve`, or
/// `supervise plan evaluate` for the plan tools that run one.
fn command_of(kind: &str) -> String {
    match kind {
        "solve" | "manage" => format!("supervise {kind}"),
        tool => format!("supervise plan {tool}"),
    }
}

/// Starts the workflow `make` builds (setting aside a finished one), or goes
/// on with the one under way when there is nothing to start.
fn drive<F>(kind: &str, flags: &RunFlags, make: Option<F>) -> Result<i32>
where
    F: FnOnce(&Path, &WorkflowSettings) -> Workflow,
{
    let cwd = std::env::current_dir()?;
    let root = repo_top(&cwd)?;
    let file = match settings::find_file(&root) {
        Some(p) => settings::read_file(&p)?,
        None => FileSettings::default(),
    };
    let mut settings = Settings::merge(file, flags.as_file());
    settings.agent = settings.agent.map(|a| resolve_agent(&a, &cwd, &root));
    let Some(agent) = settings.agent.clone() else {
        eprintln!("No agent command: pass --agent CMD (for example --agent 'claude -p \"$(cat $SUPERVISE_PROMPT_FILE)\"') or set `agent:` in .github/supervise.yml.");
        return Ok(exit::USAGE);
    };
    match preflight_agent(&agent, &root) {
        Ok(note) => note.into_iter().for_each(|n| eprintln!("{n}")),
        Err(why) => {
            eprintln!("{why}");
            return Ok(exit::USAGE);
        }
    }
    let dir = root.join(".supervise").join(kind);
    if let Some(pid) = crate::place::local::supervisor::running_supervisor(&dir) {
        eprintln!(
            "A `{}` is already running here (pid {pid}).",
            command_of(kind)
        );
        return Ok(exit::USAGE);
    }
    let recorded = crate::store::FileLedger::read(dir.join("events.jsonl"))?.state;
    // A plan tool takes no description: run again while its workflow is
    // under way, it goes on with it, as its message says.
    let tool_under_way = !matches!(kind, "solve" | "manage")
        && !flags.new
        && recorded
            .as_ref()
            .is_some_and(|st| st.status != OverallStatus::Completed);
    let make = make.filter(|_| !tool_under_way);
    let workflow = make.map(|m| m(&root, &settings.without_plan));
    if workflow.is_none() && recorded.is_none() {
        eprintln!(
            "No `{}` under way here; give a description to start one.",
            command_of(kind)
        );
        return Ok(exit::USAGE);
    }
    let under_way = recorded
        .as_ref()
        .filter(|st| st.status != OverallStatus::Completed);
    if let (Some(_), Some(st), false) = (&workflow, under_way, flags.new) {
        eprintln!(
            "{} ({}) is still under way ({}). Run `{c}` without a description to go on with it, or `{c} --new …` to set it aside.",
            st.name,
            st.id.0,
            st.status,
            c = command_of(kind)
        );
        return Ok(exit::USAGE);
    }
    let plan = match (&workflow, &recorded) {
        (Some(w), _) => w.plan(),
        (None, Some(st)) => crate::plan::Plan::clone(&st.plan),
        (None, None) => unreachable!("refused above"),
    };
    let loaded = LoadedPlan {
        plan,
        path: dir.join("workflow"),
        root: root.clone(),
        source: String::new(),
    };
    let out = if flags.quiet {
        OutputMode::Quiet
    } else {
        terminal::default_output(flags.json)
    };
    let screen = Terminal::new(out)
        .resuming_with(command_of(kind))
        .verbose(flags.verbose);
    let mut sup = Supervisor::open_in(loaded, settings, Box::new(screen), dir.clone())?;
    let first = match workflow {
        Some(w) => {
            if sup.state().is_some() {
                sup.archive_operation()?;
            }
            if out != OutputMode::Quiet && out != OutputMode::Json {
                println!("{}", w.announcement());
                if w.scope().is_some() {
                    println!("Override with --scope ({}).", Scope::names());
                }
            }
            Some(sup.start_workflow_input(w)?)
        }
        None => match sup.state().map(|s| s.status) {
            Some(OverallStatus::Stopped | OverallStatus::Killed | OverallStatus::Blocked) => {
                Some(Input::Resume { unit: None })
            }
            _ => None,
        },
    };
    if let Some(input) = first {
        if let Some(r) = sup.handle(input)?.refusal() {
            eprintln!("{r}");
            return Ok(exit::USAGE);
        }
    }
    crate::place::local::supervisor::stop_on_interrupt();
    let ending = sup.run_loop()?;
    if let Some(st) = sup.state() {
        terminal::farewell(out, ending, st, Some(&command_of(kind)));
        if out != OutputMode::Quiet && out != OutputMode::Json {
            let complete = crate::report::complete_file_name(st);
            match dir.join(&complete).is_file() {
                true => println!(
                    "Reports: .supervise/{kind}/SUPERVISOR_STATE.md and .supervise/{kind}/{complete}"
                ),
                false => println!("Reports: .supervise/{kind}/SUPERVISOR_STATE.md"),
            }
        }
    }
    if ending == crate::place::local::supervisor::Ending::Interrupted {
        terminal::interrupted(&dir);
    }
    Ok(terminal::exit_code(ending))
}

/// Sends `word` (stop, killall) to a `supervise solve` or `supervise manage`
/// running in this repository, if one is: those keep their state under
/// `.supervise/<kind>/`, beside no plan. `None` when none runs here.
pub fn send_to_running(word: &str) -> Result<Option<i32>> {
    let Ok(root) = repo_top(&std::env::current_dir()?) else {
        return Ok(None);
    };
    for kind in ["solve", "manage"] {
        let dir = root.join(".supervise").join(kind);
        if let Some(pid) = crate::place::local::supervisor::running_supervisor(&dir) {
            crate::place::local::supervisor::send_control(&dir, word)?;
            println!("Sent `{word}` to the running `supervise {kind}` (pid {pid}).");
            return Ok(Some(exit::COMPLETED));
        }
    }
    Ok(None)
}

/// Shows the status of the `supervise solve` or `supervise manage` of this
/// repository (only a running one when `only_running`). `None` when there
/// is none to show.
pub fn show_status(json: bool, only_running: bool) -> Result<Option<i32>> {
    let Ok(root) = repo_top(&std::env::current_dir()?) else {
        return Ok(None);
    };
    for kind in ["solve", "manage"] {
        let dir = root.join(".supervise").join(kind);
        let running = crate::place::local::supervisor::running_supervisor(&dir).is_some();
        if only_running && !running {
            continue;
        }
        let Some(st) = crate::store::FileLedger::read(dir.join("events.jsonl"))?.state else {
            continue;
        };
        if json {
            println!("{}", serde_json::to_string_pretty(&st)?);
        } else {
            let table = crate::report::status_table(&st, chrono::Utc::now());
            print!(
                "{}",
                crate::text::for_terminal(&crate::report::resume_as(&table, &command_of(kind)))
            );
            if !running && matches!(st.status, OverallStatus::Running | OverallStatus::Stopping) {
                println!(
                    "(no supervisor is running for it; `{}` picks it up)",
                    command_of(kind)
                );
            }
        }
        return Ok(Some(exit::COMPLETED));
    }
    Ok(None)
}

/// Whether a supervisor runs for the plan `supervise` would find here.
pub fn plan_supervisor_running(cwd: &Path) -> bool {
    crate::plan::locate(None, cwd)
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(".supervise")))
        .is_some_and(|dir| crate::place::local::supervisor::running_supervisor(&dir).is_some())
}

fn repo_top(dir: &Path) -> Result<PathBuf> {
    let repo = git2::Repository::discover(dir).map_err(|_| {
        anyhow!(
            "{} is not in a git repository; agents work on branches, so run this inside one",
            dir.display()
        )
    })?;
    repo.workdir()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow!("{} is a bare repository", dir.display()))
}

/// Phase 0's topic number: one past the highest `specs/NNN_*` in the
/// checkout or on any operation's integration branch (where earlier
/// workflows' artifacts are until someone merges them).
pub fn next_topic_number(root: &Path) -> u32 {
    fn number(name: &str) -> Option<u32> {
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        name[digits.len()..]
            .starts_with('_')
            .then(|| digits.parse().ok())?
    }
    let mut names: Vec<String> = std::fs::read_dir(root.join("specs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if let Ok(repo) = git2::Repository::open(root) {
        if let Ok(branches) = repo.branches(Some(git2::BranchType::Local)) {
            for (b, _) in branches.flatten() {
                let is_integration =
                    b.name().ok().flatten().is_some_and(|n| {
                        n.starts_with("supervise/") && n.ends_with("/integration")
                    });
                let specs = is_integration
                    .then(|| b.get().peel_to_tree().ok())
                    .flatten()
                    .and_then(|t| t.get_path(Path::new("specs")).ok())
                    .and_then(|e| e.to_object(&repo).ok())
                    .and_then(|o| o.into_tree().ok());
                if let Some(tree) = specs {
                    names.extend(
                        tree.iter()
                            .filter_map(|e| e.name().ok().map(str::to_string)),
                    );
                }
            }
        }
    }
    names.iter().filter_map(|n| number(n)).max().unwrap_or(0) + 1
}

/// The project's test command, from the files in the checkout that name one.
pub fn test_command(root: &Path) -> Option<String> {
    crate::engine::workflow::TEST_COMMANDS
        .iter()
        .find(|s| std::fs::read_to_string(root.join(s.file)).is_ok_and(|t| (s.holds)(&t)))
        .map(|s| s.command.to_string())
}
