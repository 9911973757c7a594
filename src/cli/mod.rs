//! The command-line front door. Thin: it parses arguments, calls the library and
//! maps outcomes to exit statuses.

pub mod plan_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "supervise",
    version,
    about = "Run many coding agents on one execution plan, sprint by sprint."
)]
pub struct Cli {
    /// Log as JSON lines (for log collectors).
    #[arg(long, global = true, env = "SUPERVISE_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect an execution plan.
    #[command(subcommand)]
    Plan(PlanCommand),
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
        Command::Plan(PlanCommand::Show { path, json }) => plan_cmd::show(path.as_deref(), json),
    }
}
