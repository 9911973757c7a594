//! `supervise replay` and `supervise export`: one operation's log decided
//! again by this build's engine (each decision with its reason, and where
//! it would decide otherwise), or written out scrubbed, to attach to a bug
//! report and replay elsewhere with `--log`.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::terminal::exit;
use crate::engine::replay::{replay, Again, Recorded};
use crate::engine::Event;

/// Where an operation's log is read from.
#[derive(Debug, Clone, Args)]
pub struct Source {
    /// The operation, by id (`one-0003e9`) or name; default: the one under
    /// way or last run for the plan here (the service's store needs it).
    pub operation: Option<String>,
    /// The plan whose `.supervise/` holds the logs; default:
    /// EXECUTION_PLAN.md here or in a parent directory.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// A log written by `supervise export` instead.
    #[arg(long, conflicts_with_all = ["plan", "database_url"])]
    pub log: Option<PathBuf>,
    /// The service's store (`sqlite://…`, `postgres://…`).
    #[arg(long, conflicts_with = "plan")]
    pub database_url: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub source: Source,
    /// Stop after this record (its number) and show the operation's state
    /// then.
    #[arg(long, value_name = "RECORD")]
    pub at: Option<u64>,
    /// Every record, not only those that logged a decision or differ.
    #[arg(long)]
    pub all: bool,
    /// The operation's trace instead, as the spans a collector would be
    /// sent (see the Observability page), drawn as a waterfall.
    #[arg(long, conflicts_with_all = ["at", "all"])]
    pub trace: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub source: Source,
    /// Where to write it; default: standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn replay_cmd(args: &ReplayArgs) -> Result<i32> {
    let (name, records) = read(&args.source)?;
    if args.trace {
        let mut spans = crate::drive::spans::Spans::default();
        let mut state = None;
        let mut all: Vec<crate::otlp::Span> = Vec::new();
        for e in records.iter().flat_map(|r| &r.events) {
            crate::engine::apply(&mut state, e);
            if let Some(st) = &state {
                all.extend(spans.push(st, e));
            }
        }
        println!("{name}: {} spans", all.len());
        print!("{}", crate::otlp::waterfall(&all, 40));
        return Ok(exit::COMPLETED);
    }
    let (steps, state) = replay(&records, args.at);
    let mut out = std::io::stdout().lock();
    let (mut same, mut unknown, mut differ) = (0, 0, Vec::new());
    for step in &steps {
        let input = step
            .cause
            .as_ref()
            .map_or("(no cause kept)".to_string(), |c| {
                format!("{} {}", c.at.format("%Y-%m-%d %H:%M:%S"), c.input.kind())
            });
        let mark = match &step.again {
            Again::Same => {
                same += 1;
                "same"
            }
            Again::Unknown => {
                unknown += 1;
                "applied"
            }
            Again::Differs { .. } => {
                differ.push(step.seq);
                "DIFFERS"
            }
        };
        if !args.all && step.decisions.is_empty() && !matches!(step.again, Again::Differs { .. }) {
            continue;
        }
        writeln!(out, "#{:<5} {input:<40} {mark}", step.seq)?;
        for d in &step.decisions {
            let at = match (&d.unit, &d.sprint) {
                (Some(u), Some(s)) => format!("{u} sprint {s}: "),
                (Some(u), None) => format!("{u}: "),
                _ => String::new(),
            };
            writeln!(out, "        {at}{} — {}", d.decision, d.rationale)?;
        }
        if let Again::Differs { replayed } = &step.again {
            let recorded = &records
                .iter()
                .find(|r| r.seq == step.seq)
                .map_or(&[][..], |r| &r.events[..]);
            writeln!(out, "        recorded: {}", kinds(recorded))?;
            match replayed {
                Ok(events) => writeln!(out, "        decided now: {}", kinds(events))?,
                Err(refused) => writeln!(out, "        decided now: refused ({refused})")?,
            }
        }
    }
    writeln!(
        out,
        "\n{name}: {} records; {same} decided again the same, {} differently{}",
        steps.len(),
        differ.len(),
        if unknown > 0 {
            format!(", {unknown} without a cause kept (written before causes were)")
        } else {
            String::new()
        }
    )?;
    if let Some(first) = differ.first() {
        writeln!(
            out,
            "This build decides otherwise from record #{first} on; the state went on from what was recorded."
        )?;
    }
    if let (Some(at), Some(st)) = (args.at, &state) {
        writeln!(out, "\nThe operation after record #{at}:\n")?;
        let now = steps
            .last()
            .and_then(|s| s.cause.as_ref())
            .map_or(st.started_at, |c| c.at);
        write!(
            out,
            "{}",
            crate::text::for_terminal(&crate::report::status_table(st, now))
        )?;
    }
    Ok(if differ.is_empty() {
        exit::COMPLETED
    } else {
        exit::VERIFICATION_FAILED
    })
}

pub fn export_cmd(args: &ExportArgs) -> Result<i32> {
    let (name, records) = read(&args.source)?;
    let mut text = Vec::new();
    crate::store::write_records(&mut text, &records)?;
    // One scrubber for all that leaves: the log quotes agents' output.
    let text = String::from_utf8(text)?;
    let scrubbed = crate::scrub::scrub(&text);
    match &args.out {
        Some(path) => {
            std::fs::write(path, scrubbed.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "{name}: {} records written to {} (scrubbed); `supervise replay --log {}` reads it",
                records.len(),
                path.display(),
                path.display()
            );
        }
        None => std::io::stdout().lock().write_all(scrubbed.as_bytes())?,
    }
    Ok(exit::COMPLETED)
}

/// The operation's name and records, from wherever `source` says.
fn read(source: &Source) -> Result<(String, Vec<Recorded>)> {
    let records = if let Some(log) = &source.log {
        crate::store::read_records(log).map_err(|e| anyhow!("{e}"))?
    } else if let Some(url) = &source.database_url {
        let op = source.operation.as_deref().ok_or_else(|| {
            anyhow!("name the operation to read from the store: `supervise replay OPERATION --database-url …`")
        })?;
        from_store(url, op)?
    } else {
        from_here(source.plan.as_deref(), source.operation.as_deref())?
    };
    let name = records
        .iter()
        .flat_map(|r| &r.events)
        .find_map(|e| match e {
            Event::OperationStarted { operation, .. } => Some(operation.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| "the operation".into());
    Ok((name, records))
}

fn from_store(url: &str, op: &str) -> Result<Vec<Recorded>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = crate::store::sql::SqlStore::connect(url)
            .await
            .map_err(|e| anyhow!("{e}"))
            .context("opening the store")?;
        let records = store.records(op).await.map_err(|e| anyhow!("{e}"))?;
        if records.is_empty() {
            bail!("the store holds no operation `{op}`");
        }
        Ok(records)
    })
}

/// The log of `operation` among those beside the plan (the one under way
/// and those finished), or the one under way.
fn from_here(plan: Option<&Path>, operation: Option<&str>) -> Result<Vec<Recorded>> {
    let cwd = std::env::current_dir()?;
    let plan = crate::plan::locate(plan, &cwd)
        .and_then(|p| crate::plan::load(&p))
        .map_err(|e| anyhow!("{e}"))?;
    let dir = crate::place::local::supervisor::state_dir(&plan);
    let mut logs = vec![dir.join("events.jsonl")];
    if let Ok(entries) = std::fs::read_dir(dir.join("finished")) {
        let mut finished: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".events.jsonl"))
            .collect();
        finished.sort();
        logs.extend(finished);
    }
    let mut names = Vec::new();
    for log in logs.iter().filter(|l| l.exists()) {
        let records = crate::store::read_records(log).map_err(|e| anyhow!("{e}"))?;
        let Some((id, name)) = records
            .iter()
            .flat_map(|r| &r.events)
            .find_map(|e| match e {
                Event::OperationStarted {
                    operation, name, ..
                } => Some((operation.to_string(), name.clone())),
                _ => None,
            })
        else {
            continue;
        };
        match operation {
            None => return Ok(records),
            Some(o) if o == id || o == name => return Ok(records),
            Some(_) => names.push(id),
        }
    }
    match operation {
        None => bail!(
            "no operation has been run for {} ({} has no log)",
            plan.path.display(),
            dir.display()
        ),
        Some(o) => bail!(
            "no operation `{o}` in {}; there are: {}",
            dir.display(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
    }
}

/// The kinds of `events`, in order (`dispatched, decision, …`).
fn kinds(events: &[Event]) -> String {
    let names: Vec<String> = events
        .iter()
        .map(|e| {
            serde_json::to_value(e)
                .ok()
                .and_then(|v| v.get("event").and_then(|k| k.as_str()).map(String::from))
                .unwrap_or_else(|| "event".into())
        })
        .collect();
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}
