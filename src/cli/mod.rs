//! The command-line front door. Thin: it parses arguments, calls the library and
//! maps outcomes to exit statuses.

pub mod action_cmd;
pub mod plan_cmd;
pub mod run_cmd;
pub mod serve_cmd;

use crate::engine::Input;
use clap::{Parser, Subcommand};
use run_cmd::{Mode, RunFlags};
use std::path::PathBuf;

const EXIT_STATUSES: &str = "Exit status of run, start and resume:
  0  every unit COMPLETED and the final verification passed
  1  usage or plan error (the message says where and what to do)
  2  every unit COMPLETED but the final verification found issues
  3  the run ended with a unit BLOCKED (the other units finished what they could)
  4  stopped or killed
  5  waiting for a person (a manual sprint to confirm with `resume`)";

#[derive(Debug, Parser)]
#[command(name = "supervise", version, about = "Run many coding agents on one execution plan, sprint by sprint.", after_help = EXIT_STATUSES)]
pub struct Cli {
    /// Log as JSON lines (for log collectors).
    #[arg(long, global = true, env = "SUPERVISE_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the plan, or resume the operation already under way (the default command).
    #[command(after_help = EXIT_STATUSES)]
    Run {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        plan: Option<PathBuf>,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Start a new operation (refused if one exists: use `resume`).
    #[command(after_help = EXIT_STATUSES)]
    Start {
        plan: Option<PathBuf>,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Resume STOPPED, KILLED and BLOCKED units (all, or one), confirming manual sprints.
    #[command(after_help = EXIT_STATUSES)]
    Resume {
        /// Only this work unit.
        unit: Option<String>,
        #[arg(long)]
        plan: Option<PathBuf>,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Show the status table; dispatches nothing.
    Status {
        #[arg(long)]
        plan: Option<PathBuf>,
        /// The whole recorded state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Graceful shutdown: no new dispatches, wait for agents, then force-cancel.
    Stop {
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Emergency stop: terminate every agent now.
    Killall {
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// The naming ritual: rename the operation (only once it has started).
    NameFeature {
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Run a sprint's exit criteria in a checkout and print each result; with
    /// `--record`, also commit them for the supervisor (the agent workflow's last step).
    Verify(run_cmd::VerifyArgs),
    /// Inspect an execution plan.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// The GitHub App service: hears `/supervise` commands in comments.
    Serve(serve_cmd::ServeArgs),
    /// The GitHub Action: handles one event (comment, finished run, schedule) and exits.
    Action(action_cmd::ActionArgs),
    /// Internal: the detached wrapper that runs one agent.
    #[command(name = "__run-agent", hide = true)]
    RunAgent { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Print the structure the reader detected: units, sprints, criteria, dependencies.
    Show {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        path: Option<PathBuf>,
        /// Print JSON instead of a tree.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run { plan, flags } => run_cmd::run(plan.as_deref(), &flags, Mode::Run),
        Command::Start { plan, flags } => run_cmd::run(plan.as_deref(), &flags, Mode::Start),
        Command::Resume { unit, plan, flags } => {
            run_cmd::run(plan.as_deref(), &flags, Mode::Resume(unit))
        }
        Command::Status { plan, json } => run_cmd::status(plan.as_deref(), json),
        Command::Stop { plan } => run_cmd::command(plan.as_deref(), Input::Stop, "stop"),
        Command::Killall { plan } => run_cmd::command(plan.as_deref(), Input::Killall, "killall"),
        Command::NameFeature { plan } => {
            run_cmd::command(plan.as_deref(), Input::NameFeature, "name-feature")
        }
        Command::Verify(args) => run_cmd::verify_cmd(&args),
        Command::Plan(PlanCommand::Show { path, json }) => plan_cmd::show(path.as_deref(), json),
        Command::RunAgent { dir } => run_cmd::run_agent(&dir),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Action(args) => action_cmd::run(args),
    }
}
