//! The command-line front door. Thin: it parses arguments, calls the library and
//! maps outcomes to exit statuses.

pub mod action_cmd;
pub mod agent_command;
pub mod doctor_cmd;
pub mod fence_cmd;
pub mod plan_cmd;
pub mod publish_cmd;
pub mod replay_cmd;
pub mod review_cmd;
pub mod run_cmd;
pub mod serve_cmd;
pub mod setup_cmd;
pub mod terminal;
pub mod web_cmd;
pub mod workflow_cmd;

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

/// A subcommand's examples, then the exit statuses of the commands that run.
fn examples_then_statuses(examples: &str) -> String {
    format!("Examples:\n{examples}\n\n{EXIT_STATUSES}")
}

/// The commands in the order a newcomer meets them: read the plan, run it,
/// watch it, steer it; then the tools for CI and GitHub.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect an execution plan.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Start the plan, or resume the operation already under way (the default command).
    #[command(after_help = examples_then_statuses("  supervise run --agent 'claude -p --permission-mode acceptEdits \"$(cat $SUPERVISE_PROMPT_FILE)\"'\n  supervise run docs/EXECUTION_PLAN.md --max-parallel 2 --budget 200\n  supervise run --new        # set a finished or edited operation aside and start over"))]
    Run {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        plan: Option<PathBuf>,
        /// Print what the operation is likely to cost — each sprint's first
        /// model and the range in budget units — and start nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Work without a written plan: research, plan, build, test and debug from
    /// a description, in phases; the scope is detected and said.
    #[command(after_help = examples_then_statuses("  supervise solve 'Add rate limiting to the API' --agent ./agent.sh\n  supervise solve --issue-file issue.md --scope research-and-plan\n  supervise solve            # go on with the workflow under way"))]
    Solve(workflow_cmd::SolveArgs),
    /// Work without a written plan: a manager agent keeps a kanban and names
    /// each next task as JSON; task agents do them, one at a time.
    #[command(after_help = examples_then_statuses("  supervise manage 'Refactor the API layer' --agent ./agent.sh\n  supervise manage           # go on with the loop under way"))]
    Manage(workflow_cmd::ManageArgs),
    /// Show the status table; dispatches nothing.
    #[command(
        after_help = "Examples:\n  supervise status\n  supervise status --json | jq '.units[] | {name, status}'"
    )]
    Status {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
        /// The whole recorded state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create the GitHub App for `supervise serve` in one click (GitHub's
    /// manifest flow): a page on 127.0.0.1, a confirmation on GitHub, and
    /// the App's credentials written to supervise.env and a key file (0600).
    #[command(
        after_help = "Examples:\n  supervise setup --webhook-url https://supervise.example.com/webhook\n  supervise setup --webhook-url https://supervise.example.com/webhook --org acme --public-url https://supervise.example.com"
    )]
    Setup(setup_cmd::SetupArgs),
    /// Check everything a first operation on GitHub needs — the App's key,
    /// its installation and permissions, the webhook's deliveries, the
    /// service, the agent workflow, secrets, plan and settings — and say
    /// what to do for each that fails. Exit status 0 only when none fails.
    #[command(
        after_help = "Examples:\n  GITHUB_APP_ID=123 GITHUB_PRIVATE_KEY_PATH=app.pem supervise doctor --repo acme/shop\n  supervise doctor --repo acme/shop --service-url https://supervise.example.com --json"
    )]
    Doctor(doctor_cmd::DoctorArgs),
    /// Serve a live web view of this plan's operation on 127.0.0.1.
    #[command(
        after_help = "Examples:\n  supervise web                 # then open http://127.0.0.1:8321/\n  supervise web --port 0        # any free port, printed"
    )]
    Web(web_cmd::WebArgs),
    /// What this plan's operations spent (relative cost: haiku 1, sonnet 10,
    /// opus 30 per dispatch unless configured): the last day, week and in all.
    #[command(
        after_help = "Examples:\n  supervise spend\n  supervise spend --json | jq '[.[].day] | add'"
    )]
    Spend {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
        /// One JSON object per operation.
        #[arg(long)]
        json: bool,
    },
    /// Review a verified sprint that waits for you (`run --review`):
    /// approve it, or ask for changes (a fix round on its branch).
    Review(review_cmd::ReviewArgs),
    /// Resume STOPPED, KILLED and BLOCKED units (all, or one), confirming manual sprints.
    #[command(after_help = examples_then_statuses("  supervise resume            # every halted unit\n  supervise resume api        # only the unit `api`"))]
    Resume {
        /// Only this work unit.
        unit: Option<String>,
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Graceful shutdown: no new dispatches, wait for agents, then force-cancel.
    #[command(
        after_help = "Examples:\n  supervise stop              # from a second terminal; `supervise resume` continues"
    )]
    Stop {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Emergency stop: terminate every agent now.
    #[command(
        after_help = "Examples:\n  supervise killall           # agents and everything they started end; work is kept"
    )]
    Killall {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Start a new operation (refused if one exists: use `resume`, or `--new`).
    #[command(after_help = examples_then_statuses("  supervise start --agent ./my-agent.sh\n  supervise start --new      # set the existing operation aside"))]
    Start {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        plan: Option<PathBuf>,
        /// Print what the operation is likely to cost, and start nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// The naming ritual: rename the operation (only once it has started).
    #[command(after_help = "Examples:\n  supervise name-feature")]
    NameFeature {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Run a sprint's exit criteria in a checkout and print each result; with
    /// `--handoff`, judge what an agent's job handed on (the agent workflow's
    /// verifying job); with `--record` alone, commit the results in the checkout.
    #[command(
        after_help = "Examples:\n  supervise verify --unit api --sprint 2\n  supervise verify --unit api --sprint 2 --dir ../checkout --json\n  supervise verify --unit api --sprint 2 --record \"$DISPATCH_ID\" --branch \"$BRANCH\" --handoff handoff --out verdict"
    )]
    Verify(run_cmd::VerifyArgs),
    /// The agent workflow's last job: push the work the verifying job checked,
    /// with its results record, and vouch for the record with a check run.
    #[command(
        after_help = "Examples (in the agent workflow's publish job):\n  GITHUB_TOKEN=… supervise publish --handoff handoff --verdict verdict --record \"$DISPATCH_ID\" --branch \"$BRANCH\""
    )]
    Publish(publish_cmd::PublishArgs),
    /// The agent workflow's step before `verify`, holding the keys the
    /// agent's job held: refuses work whose commits carry a secret, and
    /// masks those keys in the agent's output and answer.
    #[command(
        after_help = "Examples (in the agent workflow's verify job):\n  SUPERVISE_SECRETS=\"$KEYS\" supervise scan --handoff handoff --branch \"$BRANCH\" --out scan"
    )]
    Scan(run_cmd::ScanArgs),
    /// The agent workflow's way to run an agent: behind the model proxy
    /// (its keys from a file, deleted once read), in namespaces of its own
    /// reaching only its model and the allowed domains, as the job's user
    /// with no way back to root. Run as root.
    #[command(
        after_help = "Examples (in the agent workflow's agent step):\n  sudo -n -E env \"PATH=$PATH\" supervise fence --keys \"$RUNNER_TEMP/model-keys\" --user \"$(id -u):$(id -g)\" \\\n    --settings \"$RUNNER_TEMP/settings.yml\" --drop-sudo /etc/sudoers.d/runner --output out.txt -- claude -p …"
    )]
    Fence(fence_cmd::FenceArgs),
    /// The fence's stage inside the agent's namespaces.
    #[command(name = "fence-init", hide = true)]
    FenceInit(fence_cmd::InitArgs),
    /// The model proxy alone, without the fence (workflows copied before it).
    #[command(name = "model-proxy", hide = true)]
    ModelProxy(fence_cmd::ProxyArgs),
    /// Decides an operation's log again with this build's engine: each
    /// decision with its reason, where this build would decide otherwise,
    /// and (with --at) the operation's state at a record.
    #[command(
        after_help = "Examples:\n  supervise replay\n  supervise replay one-0003e9 --at 40\n  supervise replay --log bug-report.jsonl\n  supervise replay one-0003e9 --database-url postgres://…"
    )]
    Replay(replay_cmd::ReplayArgs),
    /// Writes an operation's log, scrubbed, for a bug report (`replay --log`
    /// reads it).
    #[command(
        after_help = "Examples:\n  supervise export --out operation.jsonl\n  supervise export one-0003e9 --database-url sqlite://supervise.db --out operation.jsonl"
    )]
    Export(replay_cmd::ExportArgs),
    /// The GitHub App service: hears `/supervise` commands in comments.
    #[command(
        after_help = "Examples:\n  GITHUB_APP_ID=123 GITHUB_PRIVATE_KEY_PATH=app.pem GITHUB_WEBHOOK_SECRET=… supervise serve\n  DATABASE_URL=postgres://… supervise serve --listen 0.0.0.0:8080"
    )]
    Serve(serve_cmd::ServeArgs),
    /// The GitHub Action: handles one event (comment, finished run, schedule) and exits.
    #[command(
        after_help = "Examples (in a workflow step; action.yml does this):\n  supervise action --event-name \"$GITHUB_EVENT_NAME\" --event-path \"$GITHUB_EVENT_PATH\""
    )]
    Action(action_cmd::ActionArgs),
    /// Asks a running `supervise serve` whether it is ready (exit 0) or not (1):
    /// the container image's health check, which has no curl.
    #[command(
        after_help = "Examples:\n  supervise health\n  supervise health --url http://127.0.0.1:8080/healthz"
    )]
    Health {
        /// The probe to ask.
        #[arg(
            long,
            env = "SUPERVISE_HEALTH_URL",
            default_value = "http://127.0.0.1:3000/readyz"
        )]
        url: String,
    },
    /// Copies standard input to standard output with every secret of this
    /// environment (variables named KEY, TOKEN, SECRET, PASSWORD) and every
    /// well-known secret shape masked: the agent workflow's hand-on step,
    /// before the agent's output leaves the runner that holds its keys.
    #[command(hide = true)]
    Scrub,
    /// Internal: the detached wrapper that runs one agent (`-`: a wrapper on
    /// standby, handed its run directory on standard input).
    #[command(name = "__run-agent", hide = true)]
    RunAgent { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Print the structure the reader detected: units, sprints, criteria, dependencies.
    #[command(
        after_help = "Examples:\n  supervise plan show\n  supervise plan show docs/EXECUTION_PLAN.md --json"
    )]
    Show {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        path: Option<PathBuf>,
        /// Print JSON instead of a tree.
        #[arg(long)]
        json: bool,
    },
    /// Turn a requirements document (a PRD, user stories, a bug list, a
    /// README) into EXECUTION_PLAN.md beside it: units by its sections, sprints
    /// of 3–7 tasks, exit criteria machine-checkable where it allows.
    #[command(
        after_help = "Examples:\n  supervise plan breakdown\n  supervise plan breakdown docs/PRD.md --dry-run\n  supervise plan breakdown SPEC.md --json | jq '.requirements | length'"
    )]
    Breakdown {
        /// The document; default: REQUIREMENTS.md, PRD.md, SPEC.md or README.md here.
        doc: Option<PathBuf>,
        /// Print the plan instead of writing it.
        #[arg(long)]
        dry_run: bool,
        /// Replace an EXECUTION_PLAN.md that is already there.
        #[arg(long)]
        force: bool,
        /// The heuristics alone, even with an agent configured (the default
        /// when none is): fast, repeatable, no spend.
        #[arg(long)]
        offline: bool,
        /// The agent and its limits, as for `run`: with one, an agent
        /// writes the plan and the deterministic checks accept it. `--json`
        /// prints the heuristics' breakdown as JSON (requirements, tasks,
        /// units, plan).
        #[command(flatten)]
        flags: Box<RunFlags>,
    },
    /// Three passes over the plan (completeness, atomicity and testability,
    /// priority and parallelism); writes ANALYSIS_REPORT.md beside it. Exit
    /// status 2 when it finds critical issues.
    #[command(
        after_help = "Examples:\n  supervise plan analyze\n  supervise plan analyze --dry-run --max-turns 80\n  supervise plan analyze --json | jq '.findings[] | select(.severity == \"critical\")'"
    )]
    Analyze {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        path: Option<PathBuf>,
        #[command(flatten)]
        tool: PlanToolFlags,
    },
    /// Each sprint's atomicity, testability and size against the turn budget,
    /// and the fixes written into the plan: vague criteria replaced, machine
    /// checks added, oversized sprints split, undersized ones merged forward,
    /// renumbered. Every line it does not own stays as it was.
    #[command(
        after_help = "Examples:\n  supervise plan evaluate --dry-run      # the diff, nothing written\n  supervise plan evaluate --max-turns 80\n  supervise plan evaluate --json"
    )]
    Evaluate {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        path: Option<PathBuf>,
        #[command(flatten)]
        tool: PlanToolFlags,
        /// With an agent (this, SUPERVISE_AGENT or `agent:` in the
        /// settings), the fixes are an agent's, held to the evaluation's
        /// checks; the heuristics' rewrite otherwise.
        #[arg(long, env = "SUPERVISE_AGENT")]
        agent: Option<String>,
        /// The heuristics' rewrite, even with an agent configured.
        #[arg(long)]
        offline: bool,
    },
    /// Each sprint's priority (dependency depth, foundation, risk, complexity),
    /// written into the plan as a `**Priority**:` line under each sprint, and
    /// units moved to an earlier layer where their dependencies allow.
    #[command(
        after_help = "Examples:\n  supervise plan prioritize --dry-run\n  supervise plan prioritize docs/EXECUTION_PLAN.md --json"
    )]
    Prioritize {
        /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
        path: Option<PathBuf>,
        #[command(flatten)]
        tool: PlanToolFlags,
    },
}

/// Options of the plan tools.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanToolFlags {
    /// Turns each sprint's agent has (the context budget of §17b).
    #[arg(long, default_value_t = 50)]
    pub max_turns: u32,
    /// Print instead of writing any file.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A repository named as `owner/name` on the command line, as GitHub spells
/// names: anything else (a path, `..`, a URL) is refused before a request
/// is made with the App's credentials.
pub(crate) fn repo_arg(s: &str) -> Result<String, String> {
    let ok_part = |p: &str, max: usize| {
        !p.is_empty()
            && p.len() <= max
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match s.split_once('/') {
        Some((owner, name)) if ok_part(owner, 39) && ok_part(name, 100) => Ok(s.to_string()),
        _ => Err(format!(
            "`{s}` is not a repository: give it as owner/name (letters, digits, `-`, `_`, `.`), e.g. acme/shop"
        )),
    }
}

/// A listener on 127.0.0.1 (`port` 0: any free one) for the pages a
/// command serves to the person at this machine (`web`, `setup`).
pub(crate) async fn loopback(
    port: u16,
) -> anyhow::Result<(tokio::net::TcpListener, std::net::SocketAddr)> {
    use anyhow::Context as _;
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "127.0.0.1:{port} is already in use (another `supervise web`, or another program): pass --port with another number, or --port 0 for any free one"
        ),
        other => other.with_context(|| format!("listening on 127.0.0.1:{port}"))?,
    };
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// A secret the process is given by its environment: `NAME`, or the file
/// `NAME_FILE` (the container convention) or `NAME_PATH` names, for secret
/// stores that mount files. Never a flag: any user of the machine can read a
/// process's arguments in `ps`. Neither the value nor the file's contents are
/// ever printed. `None` when none of the three is set.
pub(crate) fn secret(name: &str) -> anyhow::Result<Option<String>> {
    use anyhow::Context as _;
    // Exactly one way in: a value beside a file (an old variable left in a
    // unit file, a secret store's mount added later) is a mistake said
    // plainly, never settled by a precedence the operator has to remember.
    let given: Vec<(String, std::ffi::OsString)> = ["", "_FILE", "_PATH"]
        .iter()
        .filter_map(|suffix| {
            let var = format!("{name}{suffix}");
            std::env::var_os(&var).map(|v| (var, v))
        })
        .collect();
    match given.as_slice() {
        [] => Ok(None),
        [(var, value)] if var == name => value
            .clone()
            .into_string()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("{name} is not valid UTF-8")),
        [(var, path)] => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {var} ({})", PathBuf::from(path).display()))?;
            Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
        }
        [(a, _), (b, _), ..] => Err(anyhow::anyhow!(
            "both {a} and {b} are set: keep one of them"
        )),
    }
}

/// [`secret`], or `default` when it is not given; an error that says how to
/// give it when there is no default.
pub(crate) fn secret_from_env(name: &str, default: Option<&str>) -> anyhow::Result<String> {
    match (secret(name)?, default) {
        (Some(value), _) => Ok(value),
        (None, Some(d)) => Ok(d.to_string()),
        (None, None) => Err(anyhow::anyhow!(
            "{name} is not set: give it in the environment, or the path of a file holding it in {name}_FILE"
        )),
    }
}

pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run {
            plan,
            dry_run,
            flags,
        } => run_cmd::run(plan.as_deref(), &RunFlags { dry_run, ..flags }, Mode::Run),
        Command::Start {
            plan,
            dry_run,
            flags,
        } => run_cmd::run(plan.as_deref(), &RunFlags { dry_run, ..flags }, Mode::Start),
        Command::Resume { unit, plan, flags } => {
            run_cmd::run(plan.as_deref(), &flags, Mode::Resume(unit))
        }
        Command::Solve(args) => workflow_cmd::solve(&args),
        Command::Manage(args) => workflow_cmd::manage(&args),
        Command::Status { plan, json } => run_cmd::status(plan.as_deref(), json),
        Command::Web(args) => web_cmd::run(&args),
        Command::Doctor(args) => doctor_cmd::run(&args),
        Command::Setup(args) => setup_cmd::run(args),
        Command::Spend { plan, json } => run_cmd::spend(plan.as_deref(), json),
        Command::Review(args) => review_cmd::run(&args),
        Command::Stop { plan } => run_cmd::command(plan.as_deref(), Input::Stop, "stop"),
        Command::Killall { plan } => run_cmd::command(plan.as_deref(), Input::Killall, "killall"),
        Command::NameFeature { plan } => {
            run_cmd::command(plan.as_deref(), Input::NameFeature, "name-feature")
        }
        Command::Verify(args) => traced_job("verify", args.record.as_deref(), || {
            run_cmd::verify_cmd(&args)
        }),
        Command::Publish(args) => traced_job("publish", Some(&args.record), || {
            publish_cmd::publish(&args)
        }),
        Command::Scan(args) => run_cmd::scan_cmd(&args),
        Command::Replay(args) => replay_cmd::replay_cmd(&args),
        Command::Export(args) => replay_cmd::export_cmd(&args),
        Command::Fence(args) => fence_cmd::run(&args),
        Command::FenceInit(args) => fence_cmd::run_init(&args),
        Command::ModelProxy(args) => fence_cmd::run_proxy(&args),
        Command::Scrub => {
            use std::io::{Read, Write};
            crate::scrub::register_environment();
            let mut input = Vec::new();
            std::io::stdin().read_to_end(&mut input)?;
            let text = String::from_utf8_lossy(&input);
            std::io::stdout().write_all(crate::scrub::scrub(&text).as_bytes())?;
            Ok(0)
        }
        Command::Plan(PlanCommand::Show { path, json }) => plan_cmd::show(path.as_deref(), json),
        Command::Plan(PlanCommand::Breakdown {
            doc,
            dry_run,
            force,
            offline,
            flags,
        }) => plan_cmd::breakdown(doc.as_deref(), dry_run, flags.json, force, offline, &flags),
        Command::Plan(PlanCommand::Analyze { path, tool }) => {
            plan_cmd::analyze(path.as_deref(), &tool)
        }
        Command::Plan(PlanCommand::Evaluate {
            path,
            tool,
            agent,
            offline,
        }) => {
            let flags = run_cmd::RunFlags {
                agent,
                max_turns: Some(tool.max_turns),
                ..Default::default()
            };
            plan_cmd::evaluate(path.as_deref(), &tool, (!offline).then_some(&flags))
        }
        Command::Plan(PlanCommand::Prioritize { path, tool }) => {
            plan_cmd::prioritize(path.as_deref(), &tool)
        }
        Command::RunAgent { dir } => run_cmd::run_agent(&dir),
        Command::Health { url } => Ok(health(&url)),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Action(args) => action_cmd::run(args),
    }
}

/// `supervise health`: one plain HTTP GET (http only, as probes inside a
/// container or pod are), 0 when it answers 200.
fn health(url: &str) -> i32 {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        eprintln!("health: only http:// URLs are probed (got {url})");
        return 1;
    };
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let addr = match std::net::ToSocketAddrs::to_socket_addrs(host)
        .ok()
        .and_then(|mut a| a.next())
    {
        Some(a) => a,
        None => {
            eprintln!("health: cannot resolve {host}");
            return 1;
        }
    };
    let timeout = std::time::Duration::from_secs(3);
    let answer = (|| -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
        let mut buf = String::new();
        s.take(4096).read_to_string(&mut buf)?;
        Ok(buf)
    })();
    match answer {
        Ok(a) if a.split_whitespace().nth(1) == Some("200") => {
            println!("ready");
            0
        }
        Ok(a) => {
            eprintln!("not ready: {}", a.lines().next().unwrap_or(""));
            1
        }
        Err(e) => {
            eprintln!("not ready: {url}: {e}");
            1
        }
    }
}

/// A trusted job of the agent workflow, as a span of its attempt when the
/// job's environment names a collector (see [`crate::otlp::job_span`]).
fn traced_job(
    job: &str,
    dispatch: Option<&str>,
    run: impl FnOnce() -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    let start = chrono::Utc::now();
    let result = run();
    if let Some(d) = dispatch {
        let code = result.as_ref().map_or(1, |c| *c);
        crate::otlp::job_span(job, d, start, code);
    }
    result
}

#[cfg(test)]
mod help_tests {
    use super::*;
    use clap::CommandFactory;

    fn walk(cmd: &clap::Command, path: &str, problems: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.is_hide_set() || ["help", "version"].contains(&arg.get_id().as_str()) {
                continue;
            }
            if arg
                .get_help()
                .is_none_or(|h| h.to_string().trim().is_empty())
            {
                problems.push(format!("{path}: `{}` has no help", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let p = format!("{path} {}", sub.get_name());
            let examples = sub
                .get_after_help()
                .is_some_and(|h| h.to_string().contains("Example"));
            if sub.get_subcommands().next().is_none() && !examples {
                problems.push(format!("{p}: no example in its help"));
            }
            walk(sub, &p, problems);
        }
    }

    /// clap's own checks of every command (a flag name used twice, …),
    /// which otherwise fire only when that command is run.
    #[test]
    fn every_command_passes_claps_checks() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_help_and_every_command_an_example() {
        let mut problems = Vec::new();
        walk(&Cli::command(), "supervise", &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// One reader for every secret: the value itself, or a file named by
    /// `_FILE` or `_PATH` (its line end dropped); two of the three set is
    /// a mistake said plainly, never a silent choice. Each case has its own
    /// variable names: tests in one process share the environment.
    #[test]
    fn a_secret_is_read_from_the_environment_or_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-a-file\n").unwrap();
        std::env::set_var("SUPERVISE_T1_SECRET", "direct");
        assert_eq!(
            secret("SUPERVISE_T1_SECRET").unwrap().as_deref(),
            Some("direct")
        );
        for suffix in ["_FILE", "_PATH"] {
            let name = format!("SUPERVISE_T2{suffix}_SECRET");
            std::env::set_var(format!("{name}{suffix}"), &file);
            assert_eq!(secret(&name).unwrap().as_deref(), Some("from-a-file"));
        }
        std::env::set_var("SUPERVISE_T3_SECRET_FILE", &file);
        std::env::set_var("SUPERVISE_T3_SECRET_PATH", &file);
        let both = secret("SUPERVISE_T3_SECRET").unwrap_err().to_string();
        assert!(
            both.contains("SUPERVISE_T3_SECRET_FILE") && both.contains("keep one"),
            "{both}"
        );
        std::env::set_var("SUPERVISE_T6_SECRET", "direct");
        std::env::set_var("SUPERVISE_T6_SECRET_FILE", &file);
        let value_and_file = secret("SUPERVISE_T6_SECRET").unwrap_err().to_string();
        assert!(
            value_and_file.contains("SUPERVISE_T6_SECRET and SUPERVISE_T6_SECRET_FILE"),
            "{value_and_file}"
        );
        std::env::set_var("SUPERVISE_T4_SECRET_PATH", dir.path().join("missing"));
        let missing = format!("{:#}", secret("SUPERVISE_T4_SECRET").unwrap_err());
        assert!(missing.contains("SUPERVISE_T4_SECRET_PATH"), "{missing}");
        assert_eq!(secret("SUPERVISE_T5_SECRET").unwrap(), None);
        assert_eq!(
            secret_from_env("SUPERVISE_T5_SECRET", Some("d")).unwrap(),
            "d"
        );
        let unset = secret_from_env("SUPERVISE_T5_SECRET", None)
            .unwrap_err()
            .to_string();
        assert!(unset.contains("SUPERVISE_T5_SECRET_FILE"), "{unset}");
    }
}
