//! `supervise run | start | resume | status | stop | killall | name-feature | verify`.

use super::terminal::{self, default_output, exit, OutputMode, Terminal};
use crate::attempt::criteria;
use crate::engine::{Input, OverallStatus, Refusal};
use crate::place::local::process;
use crate::place::local::supervisor::{self, Supervisor};
use crate::plan::{self, LoadedPlan};
use crate::report;
use crate::settings::{self, FileSettings, ModelIdsFile, Settings};
use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options of a local run; each may also come from `.github/supervise.yml`.
#[derive(Debug, Clone, Default, Args)]
pub struct RunFlags {
    /// The agent command, run through `sh -c` in the sprint's worktree.
    #[arg(long, env = "SUPERVISE_AGENT")]
    pub agent: Option<String>,
    /// Agents in flight at once.
    #[arg(long)]
    pub max_parallel: Option<u32>,
    /// Attempts per sprint before it is FATAL and its unit BLOCKED.
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Turn budget given to each agent (SUPERVISE_MAX_TURNS).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Cap on the operation's total relative cost (haiku=1, sonnet=10, opus=30).
    #[arg(long)]
    pub budget: Option<u64>,
    /// Cap on the operation's dollars, e.g. 5 or 12.50: what its attempts
    /// cost, and what the next one is expected to, checked before it starts.
    #[arg(long, value_name = "DOLLARS")]
    pub budget_usd: Option<crate::engine::usage::Usd>,
    /// Model id sent for the haiku tier.
    #[arg(long)]
    pub model_haiku: Option<String>,
    /// Model id sent for the sonnet tier.
    #[arg(long)]
    pub model_sonnet: Option<String>,
    /// Model id sent for the opus tier.
    #[arg(long)]
    pub model_opus: Option<String>,
    /// Build/test command run on the integration branch at each phase boundary.
    #[arg(long)]
    pub build_gate: Option<String>,
    /// Seconds without output before an agent is cancelled and retried.
    #[arg(long)]
    pub stall_timeout: Option<u64>,
    /// Minutes one attempt may run, output or not, before it is stopped and
    /// counted as failed (default 60).
    #[arg(long)]
    pub max_agent_minutes: Option<u64>,
    /// Seconds an exit-criterion command may run.
    #[arg(long)]
    pub verify_timeout: Option<u64>,
    /// Seconds an agent has after SIGTERM before it and all it started are killed.
    #[arg(long)]
    pub kill_grace: Option<u64>,
    /// Seconds `stop` waits for agents before force-terminating them.
    #[arg(long)]
    pub stop_timeout: Option<u64>,
    /// Milliseconds between supervisor ticks (stall checks, polls, the stop timeout).
    #[arg(long, env = "SUPERVISE_TICK_MS")]
    pub tick_ms: Option<u64>,
    /// Also send notices (BLOCKED, held by a cap, completed, …) to this URL,
    /// as JSON signed with `$SUPERVISE_NOTIFY_SECRET` (`notify:` in the settings
    /// chooses the format and the notices).
    #[arg(long, env = "SUPERVISE_NOTIFY_URL", value_name = "URL")]
    pub notify: Option<String>,
    /// Each verified sprint waits for your review before it is merged
    /// (`supervise review <unit> --approve`, or `-m` to ask for changes):
    /// `merge: after_review` in the settings.
    #[arg(long)]
    pub review: bool,
    /// Run each agent in a network namespace of its own (Linux, as root or
    /// with CAP_SYS_ADMIN): it reaches its model and the domains `network:`
    /// allows (by default the package registries), nothing else.
    #[arg(long)]
    pub sandbox: bool,
    /// Print one JSON object per event instead of the status table.
    #[arg(long)]
    pub json: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print every reason of each decision (the complexity score's parts,
    /// each override), as the decision log keeps them.
    #[arg(long, short)]
    pub verbose: bool,
    /// Start a new operation even though one exists (its log is kept in
    /// `.supervise/finished/`): how an edited plan is applied.
    #[arg(long)]
    pub new: bool,
    /// `run`/`start --dry-run` (their own flag: `plan` commands that take
    /// these options have a `--dry-run` of their own).
    #[arg(skip)]
    pub dry_run: bool,
}

/// One setting flag: whether a run was given it, and — for the operation's
/// engine settings, which a resumed operation keeps — how a setting shows.
struct SettingFlag {
    name: &'static str,
    given: fn(&RunFlags) -> bool,
    /// The setting as the operation holds it (with the run's tick length).
    shown: Option<fn(&crate::engine::EngineConfig, u64) -> String>,
}

/// The setting flags (output flags excluded), in the order they are told.
const SETTING_FLAGS: &[SettingFlag] = &[
    SettingFlag {
        name: "--agent",
        // From the environment (SUPERVISE_AGENT) it is not a request.
        given: |f| f.agent.is_some() && f.agent != std::env::var("SUPERVISE_AGENT").ok(),
        shown: None,
    },
    SettingFlag {
        name: "--max-parallel",
        given: |f| f.max_parallel.is_some(),
        shown: Some(|c, _| c.max_parallel.to_string()),
    },
    SettingFlag {
        name: "--max-retries",
        given: |f| f.max_retries.is_some(),
        shown: Some(|c, _| c.max_retries.to_string()),
    },
    SettingFlag {
        name: "--max-turns",
        given: |f| f.max_turns.is_some(),
        shown: Some(|c, _| c.max_turns.to_string()),
    },
    SettingFlag {
        name: "--budget",
        given: |f| f.budget.is_some(),
        shown: Some(|c, _| c.budget.map_or("none".to_string(), |b| b.to_string())),
    },
    SettingFlag {
        name: "--budget-usd",
        given: |f| f.budget_usd.is_some(),
        shown: Some(|c, _| c.budget_usd.map_or("none".to_string(), |b| b.to_string())),
    },
    SettingFlag {
        name: "--model-haiku",
        given: |f| f.model_haiku.is_some(),
        shown: Some(|c, _| c.models.haiku.clone()),
    },
    SettingFlag {
        name: "--model-sonnet",
        given: |f| f.model_sonnet.is_some(),
        shown: Some(|c, _| c.models.sonnet.clone()),
    },
    SettingFlag {
        name: "--model-opus",
        given: |f| f.model_opus.is_some(),
        shown: Some(|c, _| c.models.opus.clone()),
    },
    SettingFlag {
        name: "--build-gate",
        given: |f| f.build_gate.is_some(),
        shown: Some(|c, _| c.build_gate.to_string()),
    },
    SettingFlag {
        name: "--stall-timeout",
        given: |f| f.stall_timeout.is_some(),
        shown: Some(|c, _| c.stall_timeout_secs.to_string()),
    },
    SettingFlag {
        name: "--max-agent-minutes",
        given: |f| f.max_agent_minutes.is_some(),
        shown: Some(|c, _| (c.max_agent_secs / 60).to_string()),
    },
    SettingFlag {
        name: "--verify-timeout",
        given: |f| f.verify_timeout.is_some(),
        shown: None,
    },
    SettingFlag {
        name: "--kill-grace",
        given: |f| f.kill_grace.is_some(),
        shown: None,
    },
    SettingFlag {
        name: "--stop-timeout",
        given: |f| f.stop_timeout.is_some(),
        // The engine counts the stop timeout in ticks of this run's length.
        shown: Some(|c, tick_ms| format!("{} s", u64::from(c.stop_timeout_ticks) * tick_ms / 1000)),
    },
    SettingFlag {
        name: "--notify",
        given: |f| f.notify.is_some() && f.notify != std::env::var("SUPERVISE_NOTIFY_URL").ok(),
        shown: None,
    },
    SettingFlag {
        name: "--review",
        given: |f| f.review,
        shown: None,
    },
    SettingFlag {
        name: "--sandbox",
        given: |f| f.sandbox,
        shown: None,
    },
];

impl RunFlags {
    /// The setting flags given on the command line (output flags excluded).
    fn given(&self) -> Vec<&'static str> {
        SETTING_FLAGS
            .iter()
            .filter(|flag| (flag.given)(self))
            .map(|flag| flag.name)
            .collect()
    }

    pub(super) fn as_file(&self) -> FileSettings {
        FileSettings {
            agent: self.agent.clone(),
            max_parallel: self.max_parallel,
            max_retries: self.max_retries,
            max_turns: self.max_turns,
            budget: self.budget,
            budget_usd: self.budget_usd,
            models: Some(ModelIdsFile {
                haiku: self.model_haiku.clone(),
                sonnet: self.model_sonnet.clone(),
                opus: self.model_opus.clone(),
            }),
            build_gate: self.build_gate.clone(),
            stall_timeout: self.stall_timeout,
            max_agent_minutes: self.max_agent_minutes,
            verify_timeout: self.verify_timeout,
            kill_grace: self.kill_grace,
            stop_timeout: self.stop_timeout,
            tick_ms: self.tick_ms,
            merge: self.review.then_some(settings::MergeMode::AfterReview),
            sandbox: self.sandbox.then_some(true),
            notify: self.notify.clone().map(|url| settings::NotifySettings {
                url: Some(url),
                ..Default::default()
            }),
            ..FileSettings::default()
        }
    }

    fn output(&self) -> OutputMode {
        if self.quiet {
            OutputMode::Quiet
        } else {
            default_output(self.json)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Start, or resume what exists (§3 default command).
    Run,
    Start,
    Resume(Option<String>),
}

/// Prints a plan or lookup error and gives the usage exit status.
pub(super) fn load(path: Option<&Path>) -> Result<Result<LoadedPlan, i32>> {
    let cwd = std::env::current_dir()?;
    match plan::locate(path, &cwd).and_then(|p| plan::load(&p)) {
        Ok(p) => Ok(Ok(p)),
        Err(e) => {
            eprint!("{e}");
            if !e.to_string().ends_with('\n') {
                eprintln!();
            }
            Ok(Err(exit::USAGE))
        }
    }
}

/// The engine-setting flags given that differ from the operation's own
/// (`--max-retries 5 (it has 3)`).
fn config_flags_changed(
    flags: &RunFlags,
    has: &crate::engine::EngineConfig,
    asked: &crate::engine::EngineConfig,
    tick_ms: u64,
) -> Vec<String> {
    SETTING_FLAGS
        .iter()
        .filter(|flag| (flag.given)(flags))
        .filter_map(|flag| {
            let shown = flag.shown?;
            let (now, then) = (shown(asked, tick_ms), shown(has, tick_ms));
            (now != then).then(|| format!("{} {now} (it has {then})", flag.name))
        })
        .collect()
}

/// Writes `text` to `path`, readable by its owner alone (an agent command
/// may carry what others should not read).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

fn settings_for(plan: &LoadedPlan, flags: &RunFlags) -> Result<Settings> {
    let file = match settings::find_file(&plan.root) {
        Some(p) => settings::read_file(&p)?,
        None => FileSettings::default(),
    };
    let flags = flags.as_file();
    if let Some(n) = &flags.notify {
        n.hook().map_err(|e| anyhow!("--notify: {e}"))?;
    }
    let mut settings = Settings::merge(file, flags);
    settings.engine.cost_model = supervisor::cost_history(&supervisor::state_dir(plan));
    Ok(settings)
}

fn refused(r: Refusal) -> i32 {
    eprintln!("{r}");
    exit::USAGE
}

pub fn run(path: Option<&Path>, flags: &RunFlags, mode: Mode) -> Result<i32> {
    let plan = match load(path)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    // A unit that is not in the plan is said first: no agent, setting or
    // running supervisor makes `resume nosuch` mean anything.
    if let Mode::Resume(Some(unit)) = &mode {
        if plan.plan.unit(unit).is_none() {
            let names = plan.plan.work_units.iter().map(|u| u.name.as_str());
            let hint = crate::text::nearest(unit, names)
                .map(|n| format!(" Did you mean `{n}`?"))
                .unwrap_or_default();
            eprintln!(
                "The plan has no work unit `{unit}`.{hint} Its units: {}.",
                plan.plan
                    .work_units
                    .iter()
                    .map(|u| u.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Ok(exit::USAGE);
        }
    }
    if flags.dry_run {
        let settings = settings_for(&plan, flags)?;
        let e = crate::engine::estimate::estimate(&plan.plan, &settings.engine);
        print!(
            "{}",
            report::estimate_text(&plan.plan.title, &e, &settings.engine)
        );
        return Ok(exit::COMPLETED);
    }
    let dir = supervisor::state_dir(&plan);
    if let Some(pid) = supervisor::running_supervisor(&dir) {
        if let Mode::Resume(unit) = &mode {
            // The running supervisor keeps the settings it started with; a flag
            // sent along would be silently dropped, so it is refused instead.
            let given = flags.given();
            if !given.is_empty() {
                eprintln!(
                    "A supervisor is running for this plan (pid {pid}) and keeps the settings it started with, so {} cannot be applied to it. Stop it first (`supervise stop`), then run `supervise resume {}` again.",
                    given.join(", "),
                    given.join(" … ")
                );
                return Ok(exit::USAGE);
            }
            supervisor::send_control(
                &dir,
                &format!("resume {}", unit.clone().unwrap_or_default()),
            )?;
            println!("Sent `resume` to the running supervisor (pid {pid}).");
            return Ok(exit::COMPLETED);
        }
        eprintln!("A supervisor is already running for this plan (pid {pid}). Use `supervise status`, `stop` or `killall`.");
        return Ok(exit::USAGE);
    }
    let mut settings = settings_for(&plan, flags)?;
    let cwd = std::env::current_dir()?;
    settings.agent = settings.agent.map(|a| resolve_agent(&a, &cwd, &plan.root));
    // The agent an operation was run with is its own: `resume` after a stop
    // goes on with it unless another is given.
    let remembered = dir.join("agent");
    if settings.agent.is_none() && mode != Mode::Start {
        settings.agent = std::fs::read_to_string(&remembered)
            .ok()
            .filter(|a| !a.trim().is_empty());
    }
    if settings.agent.is_none() {
        eprintln!("No agent command: pass --agent CMD (for example --agent 'claude -p \"$(cat $SUPERVISE_PROMPT_FILE)\"') or set `agent:` in .github/supervise.yml.");
        return Ok(exit::USAGE);
    }
    if let Some(agent) = &settings.agent {
        match preflight_agent(agent, &plan.root) {
            Ok(note) => note.into_iter().for_each(|n| eprintln!("{n}")),
            Err(why) => {
                eprintln!("{why}");
                return Ok(exit::USAGE);
            }
        }
    }
    // A criterion that names a path without its unit's Directory can never
    // pass: said before any agent is paid to try.
    for u in &plan.plan.work_units {
        for s in &u.sprints {
            for (line, path, meant) in crate::plan::tools::analyze::root_path_slips(u, s) {
                eprintln!(
                    "Warning: {} line {line} ({} Sprint {}): `{path}` is read from the project's root, but the sprint's tasks make `{meant}`, so the criterion can never pass. Write `{meant}` in the plan (`supervise plan analyze` lists every such line).",
                    shown_path(&plan.path),
                    u.name,
                    s.id
                );
            }
        }
    }
    // Checked before anything is created. Agents work from the committed plan:
    // a run from an edited working copy would do other than what the person reads.
    if let Err(why) = crate::place::local::git::check_checkout(&plan.path, &shown_path(&plan.path))
    {
        eprintln!("{why}");
        return Ok(exit::USAGE);
    }
    let out = flags.output();
    if let Some(agent) = &settings.agent {
        write_private(&remembered, agent)
            .with_context(|| format!("remembering the agent in {}", remembered.display()))?;
    }
    let (asked, tick_ms) = (settings.engine.clone(), settings.tick_ms);
    let screen = Terminal::new(out).verbose(flags.verbose);
    let mut sup = Supervisor::open(plan, settings, Box::new(screen))?;
    // An operation keeps the engine settings it started with; a flag that
    // would change one is refused with the reason, never dropped.
    if let Some(st) = sup
        .state()
        .filter(|_| !(matches!(mode, Mode::Run | Mode::Start) && flags.new))
    {
        // The budgets are the one thing a person changes on the way:
        // `resume --budget` raises them (below).
        let changed: Vec<String> = config_flags_changed(flags, &st.config, &asked, tick_ms)
            .into_iter()
            .filter(|c| !c.starts_with("--budget"))
            .collect();
        if !changed.is_empty() && st.status != OverallStatus::Completed {
            eprintln!(
                "{} ({}) keeps the settings it started with, so {} cannot change them. Resume without {}, or start a new operation with them: `supervise stop`, then `supervise run --new …` (its log is kept in .supervise/finished/).",
                st.name,
                st.id.0,
                changed.join(", "),
                if changed.len() == 1 { "it" } else { "them" },
            );
            return Ok(exit::USAGE);
        }
    }
    let finished = sup
        .state()
        .filter(|st| st.status == OverallStatus::Completed)
        .map(|st| (st.name.clone(), st.id.0.clone()));
    // `run` on a finished operation of this very plan has nothing to do:
    // running it again would pay for verified work again.
    if let (Some((name, id)), Mode::Run, false) = (&finished, &mode, flags.new) {
        if sup.plan_changes().is_some_and(|c| c.is_empty()) {
            let integration = crate::contract::integration_branch(id);
            // The verdict is the head's: a head mended since is verified
            // again; one that failed and did not move still fails.
            let verified_again = sup.verify_moved_head()?;
            let st = sup.state().expect("a finished operation has a state");
            if let Some(h) = st
                .head_verification
                .as_ref()
                .filter(|_| st.head_failures() > 0)
            {
                let failing: Vec<String> = h
                    .failures()
                    .map(|f| format!("  {} Sprint {}: {}", f.unit, f.sprint, f.result.text))
                    .collect();
                eprintln!(
                    "{name} ({id}) finished, but its final verification {}: {} of {} criteria fail on the final head {} of {integration}:\n{}\nMend them there (`git checkout {integration}`, fix, commit), then `supervise run` verifies the new head.",
                    if verified_again { "failed again" } else { "failed" },
                    failing.len(),
                    h.checks.len(),
                    crate::text::short_id(&h.head),
                    failing.join("\n")
                );
                return Ok(exit::VERIFICATION_FAILED);
            }
            let how = match verified_again {
                true => format!("its mended head on {integration} passed every criterion"),
                false => format!("every sprint was verified and merged into {integration}"),
            };
            eprintln!("{name} ({id}) is complete: {how}. Nothing to do.\nTake its work with `git merge {integration}`; to run the plan again from scratch, `supervise run --new`.");
            return Ok(exit::COMPLETED);
        }
    }
    let starting_over =
        matches!(mode, Mode::Run | Mode::Start) && (finished.is_some() || flags.new);
    if starting_over && sup.state().is_some() {
        if sup.state().is_some_and(|st| st.active_count() > 0) {
            eprintln!("The operation under way still has agents in flight; `supervise stop` or `supervise killall` it before starting a new one.");
            return Ok(exit::USAGE);
        }
        let (name, id) = sup
            .state()
            .map(|st| (st.name.clone(), st.id.0.clone()))
            .unwrap_or_default();
        if out != OutputMode::Quiet {
            match &finished {
                Some(_) if !flags.new => eprintln!("{name} ({id}) finished and the plan has changed since; a new operation starts with its work merged, so only sprints whose criteria do not pass there are run (its log is kept in .supervise/finished/)."),
                Some(_) => eprintln!("{name} ({id}) finished; starting a new operation from scratch, as asked (its log is kept in .supervise/finished/)."),
                None => eprintln!("Setting {name} ({id}) aside as asked (--new); starting a new operation (its log is kept in .supervise/finished/)."),
            }
        }
        sup.archive_operation()?;
    } else if let Some(changes) = sup.plan_changes().filter(|c| !c.is_empty()) {
        // An edited plan under an operation: said, not silently ignored.
        eprintln!(
            "The plan changed since this operation started ({}). The operation goes on with the plan it started with; to run the new plan, start over with `supervise run --new` (stop or finish this one first).",
            changes.join("; ")
        );
    }
    if let Some(st) = sup
        .state()
        .filter(|st| st.status != OverallStatus::Completed)
    {
        let budget = flags.budget.filter(|b| st.config.budget != Some(*b));
        let budget_usd = flags
            .budget_usd
            .filter(|b| st.config.budget_usd != Some(*b));
        if budget.is_some() || budget_usd.is_some() {
            let set = Input::SetBudget { budget, budget_usd };
            if let Some(r) = sup.handle(set)?.refusal() {
                return Ok(refused(r));
            }
        }
    }
    let first = match (sup.state().map(|s| s.status), &mode) {
        (None, Mode::Resume(_)) => {
            eprintln!("No operation to resume for this plan; run `supervise run` to start one.");
            return Ok(exit::USAGE);
        }
        (None, _) => {
            // A finished operation's work is the new one's starting point,
            // unless `--new` asked for a fresh start.
            let earlier = finished
                .as_ref()
                .filter(|_| !flags.new)
                .map(|(_, id)| id.as_str());
            Some(sup.start_input_after(earlier)?)
        }
        (Some(_), Mode::Start) => {
            let code = refused(Refusal::AlreadyStarted(
                sup.state().map(|s| s.name.clone()).unwrap_or_default(),
            ));
            eprintln!("To set it aside and start over with the plan as it is now: `supervise start --new`.");
            return Ok(code);
        }
        (Some(_), Mode::Resume(unit)) => Some(Input::Resume { unit: unit.clone() }),
        (
            Some(OverallStatus::Stopped | OverallStatus::Killed | OverallStatus::Blocked),
            Mode::Run,
        ) => Some(Input::Resume { unit: None }),
        (Some(_), Mode::Run) => None,
    };
    if let Some(input) = first {
        let is_start = matches!(input, Input::Start { .. });
        if let Some(r) = sup.handle(input)?.refusal() {
            return Ok(refused(r));
        }
        if is_start && out != OutputMode::Quiet && out != OutputMode::Json {
            if let Some(st) = sup.state() {
                println!(
                    "{}",
                    crate::engine::naming::announcement(
                        &st.name,
                        st.units.len(),
                        st.plan.total_sprints()
                    )
                );
            }
        }
    }
    supervisor::stop_on_interrupt();
    let ending = sup.run_loop()?;
    if let Some(st) = sup.state() {
        terminal::farewell(out, ending, st, None);
    }
    if ending == supervisor::Ending::Interrupted {
        terminal::interrupted(&dir);
    }
    Ok(terminal::exit_code(ending))
}

/// A path as the person would type it: relative to the current directory when
/// it is below it.
fn shown_path(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let abs = path.canonicalize().unwrap_or(path.to_path_buf());
    abs.strip_prefix(&cwd).unwrap_or(&abs).display().to_string()
}

/// The program the agent command runs first, when it is named plainly.
fn program_word(command: &str) -> Option<String> {
    match super::agent_command::first_program(command) {
        super::agent_command::FirstProgram::Named(p) => Some(p),
        _ => None,
    }
}

/// The agent command with a relative program path (`./myagent.sh`) made
/// absolute: agents run in worktrees elsewhere, where the path as typed
/// leads nowhere. Looked for where the command was typed, then at the
/// repository's root; a path found in neither is left for
/// [`preflight_agent`] to name.
pub fn resolve_agent(command: &str, typed_in: &Path, root: &Path) -> String {
    let Some(program) = program_word(command) else {
        return command.to_string();
    };
    let program = program.as_str();
    if !program.contains('/') || program.starts_with('/') || program.starts_with('$') {
        return command.to_string();
    }
    let Some(found) = [typed_in, root]
        .iter()
        .map(|d| d.join(program))
        .find(|p| p.is_file())
    else {
        return command.to_string();
    };
    let abs = found.canonicalize().unwrap_or(found).display().to_string();
    let quoted = if abs
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    {
        abs
    } else {
        format!("'{}'", abs.replace('\'', r"'\''"))
    };
    command.replacen(program, &quoted, 1)
}

/// Checks, before anything is paid for, that the agent command's program
/// exists: a typo in `--agent` would otherwise fail every attempt of every unit,
/// escalating to the dearest model. Only the first word is checked (after
/// `VAR=value` assignments and `exec`/`env`); shell syntax is left to the shell.
pub fn preflight_agent(command: &str, dir: &Path) -> Result<Option<String>, String> {
    use super::agent_command::{first_program, FirstProgram};
    const SHELL_WORDS: &[&str] = &[
        "cd", "export", "set", "trap", "command", "eval", ".", "source", "test", "[", "true",
        "false", "echo", "printf", "exit", ":", "exec", "nohup", "time", "env",
    ];
    let program = match first_program(command) {
        FirstProgram::Empty => {
            return Err(format!("The agent command `{command}` is empty. Pass --agent CMD or set `agent:` in .github/supervise.yml."))
        }
        FirstProgram::Unknown(why) => {
            return Ok(Some(format!(
                "Note: the agent command begins with {why}, so which program it runs is known only when it runs; it is not checked before the first attempt."
            )))
        }
        FirstProgram::Named(p) => p,
    };
    let program = program.as_str();
    if SHELL_WORDS.contains(&program) {
        return Ok(None);
    }
    let found = if program.contains('/') {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(program);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => true,
            Ok(_) => {
                return Err(format!("The agent command `{command}` cannot run: {} is not an executable file. Make it executable (`chmod +x {program}`) or run it through its interpreter (`--agent 'sh {program}'`).", path.display()))
            }
            Err(_) => false,
        }
    } else {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("command -v -- \"$1\" >/dev/null 2>&1")
            .arg("sh")
            .arg(program)
            .current_dir(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(true)
    };
    if found {
        return Ok(None);
    }
    let hint = match settings::Preset::named(program) {
        Some(p) => format!(
            "Install it (`npm install -g {}`) or put it on PATH",
            p.package()
        ),
        None => "Check the spelling in --agent (or `agent:` in .github/supervise.yml)".to_string(),
    };
    Err(format!(
        "The agent command `{command}` cannot run: `{program}` is not a program {}. {hint}; nothing was started.",
        if program.contains('/') { format!("at {}", dir.join(program).display()) } else { "on PATH".to_string() }
    ))
}

/// `stop`, `killall` and `name-feature`: sent to a running supervisor, or applied
/// to the recorded state when none runs.
pub fn command(path: Option<&Path>, input: Input, word: &str) -> Result<i32> {
    // Work without a plan has no plan to find its state by: with no plan
    // named and none here, a running `solve` or `manage` is the one meant.
    // A plan beside it whose operation is not running does not hide it.
    let cwd = std::env::current_dir()?;
    let no_plan_here = path.is_none() && plan::locate(None, &cwd).is_err();
    if path.is_none() && !super::workflow_cmd::plan_supervisor_running(&cwd) {
        if let Some(code) = super::workflow_cmd::send_to_running(word)? {
            return Ok(code);
        }
    }
    if no_plan_here && matches!(input, Input::Stop | Input::Killall) {
        // Nothing to stop: say that, not that a plan is missing.
        eprintln!(
            "Nothing is running here: no plan (EXECUTION_PLAN.md) in {} or above, and no `supervise solve` or `supervise manage` running in this repository. Name a plan with --plan if its operation runs elsewhere.",
            cwd.display()
        );
        return Ok(exit::USAGE);
    }
    let plan = match load(path)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dir = supervisor::state_dir(&plan);
    if let Some(pid) = supervisor::running_supervisor(&dir) {
        supervisor::send_control(&dir, word)?;
        println!("Sent `{word}` to the running supervisor (pid {pid}).");
        if word == "killall" {
            // The summary counts what ended: wait (bounded) for the supervisor
            // to record every agent's end.
            let until = std::time::Instant::now() + Duration::from_secs(20);
            let mut last = None;
            while std::time::Instant::now() < until {
                last = supervisor::read_state(&plan)?;
                if last
                    .as_ref()
                    .is_some_and(|st| st.status == OverallStatus::Killed && st.active_count() == 0)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some(st) = last {
                println!("{}", crate::text::for_terminal(&report::kill_summary(&st)));
            }
        }
        return Ok(exit::COMPLETED);
    }
    // No supervisor runs: this one opens the operation, and carries out what
    // the last one decided but did not finish, with the agent command `run`
    // would take from the environment.
    let flags = RunFlags {
        agent: std::env::var("SUPERVISE_AGENT")
            .ok()
            .filter(|a| !a.trim().is_empty()),
        ..RunFlags::default()
    };
    let settings = settings_for(&plan, &flags)?;
    let mut sup = Supervisor::open(plan, settings, Box::new(Terminal::new(OutputMode::Lines)))?;
    match sup.handle(input)?.refusal() {
        None => {}
        Some(Refusal::Ritual(text)) => {
            println!("{text}");
            return Ok(exit::COMPLETED);
        }
        Some(r) => return Ok(refused(r)),
    }
    if word == "killall" {
        // The wrappers escalate to SIGKILL after 2 s on their own; waiting a
        // little longer lets the summary count what really ended.
        sup.wait_for_agents(Duration::from_secs(10))?;
    }
    if let Some(st) = sup.state() {
        match word {
            "killall" => println!("{}", crate::text::for_terminal(&report::kill_summary(st))),
            "name-feature" => println!("Operation renamed: {}", st.name),
            _ => println!(
                "{}",
                crate::text::for_terminal(&report::status_table(st, chrono::Utc::now()))
            ),
        }
    }
    Ok(exit::COMPLETED)
}

pub fn status(path: Option<&Path>, json: bool) -> Result<i32> {
    // A running `solve` or `manage` is what `status` here is about, unless a
    // plan's operation runs; with neither running, the plan's, then theirs.
    let cwd = std::env::current_dir()?;
    if path.is_none() && !super::workflow_cmd::plan_supervisor_running(&cwd) {
        if let Some(code) = super::workflow_cmd::show_status(json, true)? {
            return Ok(code);
        }
        if plan::locate(None, &cwd).is_err() {
            if let Some(code) = super::workflow_cmd::show_status(json, false)? {
                return Ok(code);
            }
        }
    }
    let plan = match load(path)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let Some(st) = supervisor::read_state(&plan)? else {
        if path.is_none() {
            if let Some(code) = super::workflow_cmd::show_status(json, false)? {
                return Ok(code);
            }
        }
        eprintln!(
            "No operation has been started for {}; run `supervise run`.",
            plan.path.display()
        );
        return Ok(exit::USAGE);
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print!(
            "{}",
            crate::text::for_terminal(&report::status_table(&st, chrono::Utc::now()))
        );
        let dir = supervisor::state_dir(&plan);
        if supervisor::running_supervisor(&dir).is_none() {
            if let Some(line) = supervisor::unwatched_agents(&dir) {
                println!("\n⚠️  {line}");
            } else if matches!(st.status, OverallStatus::Running | OverallStatus::Stopping) {
                println!("(no supervisor is running for this plan; `supervise run` picks it up)");
            }
        }
    }
    Ok(exit::COMPLETED)
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// The work unit whose sprint is checked.
    #[arg(long)]
    pub unit: String,
    /// The sprint's id (like 2 or 2a).
    #[arg(long)]
    pub sprint: String,
    /// The checkout to check (default: the plan's directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds each command may run.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Record the results for this dispatch id under `.supervise/results/` and
    /// commit them, with the agent's exit status and output, for the supervisor.
    #[arg(long, value_name = "DISPATCH_ID")]
    pub record: Option<String>,
    /// The agent's exit status (with `--record`).
    #[arg(long, allow_hyphen_values = true)]
    pub agent_exit: Option<i32>,
    /// A file holding the agent's output (with `--record`); its end is kept.
    #[arg(long)]
    pub agent_output: Option<PathBuf>,
    /// The commit the run began at (with `--record`; the agent workflow sets
    /// SUPERVISE_BASE to the sprint branch's head before the agent ran, else
    /// the dispatched commit GITHUB_SHA is taken): the agent's commits since
    /// it are recorded.
    #[arg(long, env = "SUPERVISE_BASE", hide_env_values = true)]
    pub since: Option<String>,
    /// The trusted check of an agent's job on GitHub: the directory the
    /// agent's job handed on (its work as a git bundle, exit status, output).
    /// The checkout is the commit dispatched on; the sprint's definition is
    /// read from it before any of the work is taken. With `--record`,
    /// `--branch` and `--out`.
    #[arg(long, requires_all = ["record", "branch", "out"])]
    pub handoff: Option<PathBuf>,
    /// The sprint branch the work goes to (with `--handoff`).
    #[arg(long)]
    pub branch: Option<String>,
    /// Where the verdict is written for `supervise publish` (with `--handoff`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// What `supervise scan` found in the same work (with `--handoff`): a
    /// secret it names refuses the work, and so does a missing file.
    #[arg(long, requires = "handoff")]
    pub scan: Option<PathBuf>,
    /// The final verification, in the agent workflow's verifying job (a
    /// dispatch with sprint `final`): what to check, as JSON (the
    /// dispatch's `prompt` input). Every machine-checkable criterion of the
    /// sprints it names runs on this checkout's HEAD, each failure is
    /// bisected along the first-parent line, and the results go to `--out`
    /// for `supervise publish --final`. With `--record`, `--branch`, `--out`.
    #[arg(
        long = "final",
        value_name = "ORDER",
        requires_all = ["record", "branch", "out"],
        conflicts_with = "handoff"
    )]
    pub final_order: Option<String>,
}

/// `supervise scan`: the agent workflow's step that looks for secrets in
/// what the agent's job handed on, holding the keys that job held.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// The directory the agent's job handed on.
    #[arg(long)]
    pub handoff: PathBuf,
    /// The sprint branch the work goes to.
    #[arg(long)]
    pub branch: String,
    /// Where the finding is written for `supervise verify --scan` (empty:
    /// nothing found).
    #[arg(long)]
    pub out: PathBuf,
    /// The checkout (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Exits 0 whatever it finds (the finding refuses the work in the verdict),
/// 1 when it could not look.
pub fn scan_cmd(a: &ScanArgs) -> Result<i32> {
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let found = crate::place::hosted::handoff::scan(&root, &a.branch, &a.handoff, &a.out)
        .context("scanning the agent's work for secrets")?;
    match found {
        Some(why) => eprintln!("found: {why}"),
        None => eprintln!("no secret in the work handed on"),
    }
    Ok(0)
}

/// The sprint definition committed for a dispatch whose work no plan file
/// holds (a workflow's), looked for from `dir` up to the repository's top.
fn committed_spec(dir: &Path, dispatch: &str) -> Option<crate::contract::SprintSpec> {
    let rel = crate::contract::sprint_spec_path(dispatch);
    dir.ancestors()
        .find_map(|d| {
            crate::contract::read_untrusted(&d.join(&rel), crate::contract::EVIDENCE_FILE_LIMIT)
        })
        .and_then(|b| serde_json::from_slice(&b).ok())
}

pub fn verify_cmd(a: &VerifyArgs) -> Result<i32> {
    let here = std::env::current_dir()?;
    // Named before any criterion runs: a missing checkout would otherwise
    // show as every command failing in the shell.
    if let Some(dir) = a.dir.as_deref().filter(|d| !d.is_dir()) {
        eprintln!(
            "--dir {}: no such directory. Give the checkout whose criteria to check (default: the current directory).",
            dir.display()
        );
        return Ok(exit::USAGE);
    }
    if let (Some(handoff), Some(dispatch), Some(branch), Some(out)) =
        (&a.handoff, &a.record, &a.branch, &a.out)
    {
        return verify_handoff(a, &here, handoff, dispatch, branch, out);
    }
    if let (Some(order), Some(branch), Some(out)) = (&a.final_order, &a.branch, &a.out) {
        return verify_final(a, &here, order, branch, out);
    }
    let spec = a
        .record
        .as_deref()
        .and_then(|d| committed_spec(a.dir.as_deref().unwrap_or(&here), d));
    let plan = match &spec {
        // Work a workflow added: its definition came with the prompt.
        Some(spec) => {
            let root = a.dir.clone().unwrap_or(here);
            LoadedPlan {
                plan: spec.plan(),
                path: root.join(crate::contract::sprint_spec_path(
                    a.record.as_deref().unwrap_or(""),
                )),
                root,
                source: String::new(),
            }
        }
        None => match load(a.plan.as_deref())? {
            Ok(p) => p,
            Err(code) => return Ok(code),
        },
    };
    let (unit, sprint) = (a.unit.as_str(), a.sprint.as_str());
    let u = plan
        .plan
        .unit(unit)
        .ok_or_else(|| anyhow!("there is no work unit `{unit}` in {}", plan.path.display()))?;
    let id = crate::plan::SprintId::parse(sprint)
        .ok_or_else(|| anyhow!("`{sprint}` is not a sprint id (like 2 or 2a)"))?;
    let s = u
        .sprints
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| anyhow!("work unit `{unit}` has no sprint {sprint}"))?;
    let root: PathBuf = a.dir.clone().unwrap_or_else(|| plan.root.clone());
    let timeout = Duration::from_secs(a.timeout);
    let results = match &a.record {
        None => criteria::verify_sprint(s, &root, timeout),
        Some(dispatch) => {
            let left = crate::attempt::Left {
                output: a
                    .agent_output
                    .as_deref()
                    .map(crate::contract::read_output)
                    .unwrap_or_default(),
                exit_code: a.agent_exit,
                answer: match spec.as_ref().and_then(|s| s.answer_file.as_deref()) {
                    Some(rel) => crate::contract::read_answer(&root.join(rel)),
                    None => std::env::var_os("SUPERVISE_RESULT_FILE")
                        .and_then(|p| crate::contract::read_answer(Path::new(&p))),
                },
            };
            let since = a.since.clone().or_else(|| std::env::var("GITHUB_SHA").ok());
            let commits = since
                .as_deref()
                .map(|since| crate::attempt::Commits { since, head: None });
            let result =
                crate::attempt::verify(&plan.plan, u, s, &root, left, commits, None, timeout);
            let path = crate::attempt::record::record_result(&root, dispatch, &result)?;
            eprintln!(
                "recorded {} criteria in {}",
                result.criteria.len(),
                path.display()
            );
            result.criteria
        }
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for r in &results {
            let mark = match r.outcome {
                crate::engine::CriterionOutcome::Passed => "✓",
                crate::engine::CriterionOutcome::Failed => "✗",
                crate::engine::CriterionOutcome::Unverified => "☐",
            };
            println!(
                "{mark} line {}: {}{}",
                r.line,
                r.text,
                if r.detail.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", r.detail.lines().next().unwrap_or(""))
                }
            );
        }
    }
    let failed = results
        .iter()
        .any(|r| r.outcome == crate::engine::CriterionOutcome::Failed);
    Ok(if failed { 1 } else { 0 })
}

/// `supervise verify --handoff`: the trusted job's check of what an agent's
/// job handed on. Exits 0 whatever the verdict (it is in the record), 1 when
/// no verdict could be written.
fn verify_handoff(
    a: &VerifyArgs,
    here: &Path,
    handoff: &Path,
    dispatch: &str,
    branch: &str,
    out: &Path,
) -> Result<i32> {
    let root = a.dir.clone().unwrap_or_else(|| here.to_path_buf());
    let plan = a
        .plan
        .as_deref()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "EXECUTION_PLAN.md".into());
    let attempt = crate::place::hosted::handoff::Attempt {
        plan: &plan,
        unit: &a.unit,
        sprint: &a.sprint,
        dispatch,
        branch,
    };
    let verdict = crate::place::hosted::handoff::verify(
        &root,
        &attempt,
        handoff,
        a.scan.as_deref(),
        out,
        Duration::from_secs(a.timeout),
    )
    .context("verifying the agent's work")?;
    match &verdict.record.refused {
        Some(why) => eprintln!("refused: {why}"),
        None => eprintln!(
            "checked {} criteria on {}",
            verdict.record.criteria.len(),
            crate::contract::short_id(&verdict.head)
        ),
    }
    Ok(0)
}

/// `supervise verify --final`: the final head's criteria, in the checkout
/// (the commit dispatched on), written to `out/final.json` for the
/// publishing job. Exits 0 whatever the criteria found (the publishing job
/// runs only after a verifying job that succeeded, and must report a
/// failing head too).
fn verify_final(a: &VerifyArgs, here: &Path, order: &str, branch: &str, out: &Path) -> Result<i32> {
    let order: crate::attempt::head::FinalOrder = match serde_json::from_str(order) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "--final: the order does not read ({e}). It is the JSON the supervisor dispatches as the `prompt` input of a final verification; dispatch it again from the supervisor rather than by hand."
            );
            return Ok(exit::USAGE);
        }
    };
    let root = a.dir.clone().unwrap_or_else(|| here.to_path_buf());
    let plan_path = root.join(a.plan.as_deref().unwrap_or(Path::new("EXECUTION_PLAN.md")));
    let plan = match plan::load(&plan_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(exit::USAGE);
        }
    };
    let verification = crate::attempt::head::verify_checkout(
        &root,
        &plan.plan,
        &order,
        branch,
        Duration::from_secs(a.timeout),
    )
    .context("verifying the final head")?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(
        out.join(crate::attempt::head::FINAL_FILE),
        crate::attempt::head::to_check_text(&verification)?,
    )
    .with_context(|| format!("writing the results under {}", out.display()))?;
    eprintln!(
        "checked {} criteria on {}: {} fail",
        verification.checks.len(),
        crate::contract::short_id(&verification.head),
        verification.failures().count()
    );
    Ok(0)
}

/// `supervise __run-agent DIR`, or `-`: on standby, the directory arrives on
/// standard input (see `process::Standby`).
pub fn run_agent(dir: &Path) -> Result<i32> {
    if dir.as_os_str() == process::STANDBY_ARG {
        if let Some(dir) = process::await_assignment()? {
            process::run_agent(&dir)?;
        }
        return Ok(0);
    }
    process::run_agent(dir)?;
    Ok(0)
}

/// `supervise spend`: the operation under way and every finished one set
/// aside in `.supervise/finished/`.
pub fn spend(path: Option<&Path>, json: bool) -> Result<i32> {
    let plan = match load(path)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let states = supervisor::operations_here(&supervisor::state_dir(&plan))?;
    let rows = report::spend(&states, chrono::Utc::now());
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::spend_json(&rows))?
        );
    } else if rows.is_empty() {
        println!("Nothing spent yet: no operation has been started for this plan.");
    } else {
        print!("{}", report::spend_table(&rows));
    }
    Ok(exit::COMPLETED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting a run takes is in [`SETTING_FLAGS`], so that a new one
    /// is told when it is given and when a resumed operation keeps its own.
    #[test]
    fn every_setting_flag_is_in_the_table() {
        let cmd = <RunFlags as clap::Args>::augment_args(clap::Command::new("run"));
        // Output flags, and the tick (a test knob, not a setting).
        let not_settings = ["--json", "--quiet", "--verbose", "--new", "--tick-ms"];
        let longs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .filter(|l| !not_settings.contains(&l.as_str()))
            .collect();
        let table: Vec<&str> = SETTING_FLAGS.iter().map(|f| f.name).collect();
        assert_eq!(longs, table);
    }
}
