//! The local supervisor: drives the engine with agents as local processes in git
//! worktrees and the file ledger as its store. One loop, one input at a time:
//! decide → write events and effects → carry out the effects → mark them done.

use super::git::Git;
use super::process::{self, RunSpec, Watched};
use super::verify;
use crate::contract::{integration_branch, sprint_branch, RunResult};
use crate::engine::{
    self, decide_mut, AgentReport, Effect, Evidence, Input, OperationId, OperationState,
    OverallStatus, Refusal,
};
use crate::plan::LoadedPlan;
use crate::report;
use crate::settings::Settings;
use crate::store::{FileLedger, Ledger, PendingEffect};
use crate::text::slug;
use anyhow::{anyhow, Context, Result};
use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Messages from watcher and worker threads to the loop.
enum Msg {
    Finished(engine::DispatchId),
    Activity(engine::DispatchId),
    Input(Input),
}

/// How the run reports to the person at the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// A live table redrawn in place.
    Live,
    /// Plain lines, for logs and pipes.
    Lines,
    /// One JSON object per event, on standard output.
    Json,
    Quiet,
}

/// The exit statuses of `supervise run`, documented in `--help` and the README.
pub mod exit {
    pub const COMPLETED: i32 = 0;
    pub const USAGE: i32 = 1;
    pub const VERIFICATION_FAILED: i32 = 2;
    pub const BLOCKED: i32 = 3;
    pub const STOPPED: i32 = 4;
    pub const AWAITING_PERSON: i32 = 5;
}

pub struct Supervisor {
    plan: LoadedPlan,
    dir: PathBuf,
    ledger: FileLedger,
    state: Option<OperationState>,
    git: Git,
    settings: Settings,
    out: OutputMode,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    queue: VecDeque<Input>,
    watching: HashSet<engine::DispatchId>,
    last_draw: Option<Instant>,
    /// Merged sprints found missing from the integration branch at the end.
    lost_at_end: Vec<String>,
    /// The integration head this process's last merge left: while the branch
    /// still holds it, everything merged before is there too, and the
    /// per-sprint check (a history walk per merged sprint) is skipped.
    integrated_head: Option<git2::Oid>,
    _lock: File,
}

/// `.supervise/` beside the plan.
pub fn state_dir(plan: &LoadedPlan) -> PathBuf {
    plan.root.join(".supervise")
}

fn supervisor_lock(dir: &Path) -> Result<Option<File>> {
    std::fs::create_dir_all(dir)?;
    let f = super::lockfile::open(&dir.join("supervisor.lock"))?;
    if !super::lockfile::try_lock(&f) {
        return Ok(None);
    }
    f.set_len(0)?;
    write!(&f, "{}", std::process::id())?;
    Ok(Some(f))
}

/// The pid of the supervisor running for this plan, if one is.
pub fn running_supervisor(dir: &Path) -> Option<String> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("supervisor.lock"))
        .ok()?;
    // A lock we get is released when `f` drops.
    let free = super::lockfile::try_lock(&f);
    (!free).then(|| std::fs::read_to_string(dir.join("supervisor.lock")).unwrap_or_default())
}

/// Asks the running supervisor to carry out a command (stop, killall, resume).
pub fn send_control(dir: &Path, command: &str) -> Result<()> {
    let control = dir.join("control");
    std::fs::create_dir_all(&control)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = control.join(format!(".{nanos}.tmp"));
    std::fs::write(&tmp, command)?;
    std::fs::rename(tmp, control.join(format!("{nanos:032}")))?;
    Ok(())
}

/// Reads the recorded state without taking the lock (for `status`).
pub fn read_state(plan: &LoadedPlan) -> Result<Option<OperationState>> {
    Ok(FileLedger::new(&state_dir(plan)).load()?.state)
}

impl Supervisor {
    /// Takes the plan's supervisor lock; fails if another supervisor holds it.
    pub fn open(plan: LoadedPlan, settings: Settings, out: OutputMode) -> Result<Supervisor> {
        let dir = state_dir(&plan);
        let lock = supervisor_lock(&dir)?.ok_or_else(|| {
            let pid = running_supervisor(&dir).unwrap_or_default();
            anyhow!("a supervisor is already running for this plan (pid {pid}); use `supervise status`, `stop` or `killall` from here")
        })?;
        let git = Git::open(&plan.root, &dir)?;
        let mut ledger = FileLedger::new(&dir);
        let loaded = ledger.load()?;
        // We hold the supervisor lock: a git lock older than a few seconds on the
        // refs and worktrees we write was left by a killed supervisor — unless an
        // adopted agent still works there (a slow hook may hold one for minutes).
        if let Some(st) = &loaded.state {
            git.clear_stale_locks(
                Duration::from_secs(5),
                &st.id.0,
                &process::live_branches(&dir.join("runs")),
            );
        }
        let (tx, rx) = channel();
        let mut sup = Supervisor {
            plan,
            dir,
            ledger,
            state: loaded.state,
            git,
            settings,
            out,
            tx,
            rx,
            queue: VecDeque::new(),
            watching: HashSet::new(),
            last_draw: None,
            lost_at_end: Vec::new(),
            integrated_head: None,
            _lock: lock,
        };
        // Events first, effects second: whatever the last process recorded but did
        // not finish is carried out now (every effect is idempotent).
        sup.reconcile(loaded.pending)?;
        Ok(sup)
    }

    /// Sets the finished (or abandoned) operation aside so a new one can start:
    /// its event log moves to `.supervise/finished/<op>.events.jsonl`; its
    /// branches, worktrees and run directories stay for inspection.
    pub fn archive_operation(&mut self) -> Result<()> {
        let Some(st) = &self.state else { return Ok(()) };
        let finished = self.dir.join("finished");
        std::fs::create_dir_all(&finished)?;
        let to = finished.join(format!("{}.events.jsonl", st.id.0));
        std::fs::rename(self.ledger.path(), &to)
            .with_context(|| format!("moving the finished operation's log to {}", to.display()))?;
        let _ = std::fs::remove_file(self.dir.join("merged"));
        self.ledger = FileLedger::new(&self.dir);
        self.ledger.load()?;
        self.state = None;
        Ok(())
    }

    /// What changed in the plan since the operation started (None: no operation).
    pub fn plan_changes(&self) -> Option<Vec<String>> {
        let st = self.state.as_ref()?;
        Some(crate::plan::diff::changes(&st.plan, &self.plan.plan))
    }

    pub fn state(&self) -> Option<&OperationState> {
        self.state.as_ref()
    }

    fn op(&self) -> String {
        self.state
            .as_ref()
            .map(|s| s.id.0.clone())
            .unwrap_or_default()
    }

    /// The unit's slug in this operation's branch names.
    fn unit_slug(&self, unit: &str) -> String {
        self.state
            .as_ref()
            .map_or_else(|| slug(unit), |st| st.unit_slug(unit))
    }

    fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }

    /// The lock a sprint worktree's current attempt holds (see `process::run_agent`).
    fn worktree_lock(&self, branch: &str) -> PathBuf {
        self.dir
            .join("locks")
            .join(format!("{}.lock", branch.replace('/', "__")))
    }

    /// The input that starts a new operation on this plan.
    pub fn start_input(&self) -> Result<Input> {
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64;
        let op = crate::contract::operation_id(&self.plan.plan.title, nanos & 0xff_ffff);
        let start = self.git.head_commit()?;
        self.git.ensure_integration(&op, start)?;
        let already_done = self.already_done(&op)?;
        Ok(Input::Start {
            operation: OperationId(op),
            plan: Box::new(self.plan.plan.clone()),
            config: self.settings.engine.clone(),
            seed: nanos,
            already_done,
        })
    }

    /// §3 steps 4–5 at start: each unit's leading sprints that the committed
    /// progress files mark complete and whose exit criteria do not fail, checked
    /// in a clean checkout of the starting commit (never the user's checkout).
    fn already_done(&self, op: &str) -> Result<Vec<engine::AlreadyDone>> {
        let plan = &self.plan.plan;
        let has_progress = plan
            .referenced_files
            .iter()
            .any(|f| f.role == crate::plan::FileRole::Progress);
        if !has_progress {
            return Ok(Vec::new());
        }
        let root = self.git.gate_worktree(op)?;
        let timeout = Duration::from_secs(self.settings.verify_timeout_secs);
        let mut found = Vec::new();
        for unit in &plan.work_units {
            for sprint in &unit.sprints {
                if verify::progress_marker(plan, unit, sprint, &root)
                    != Some(engine::ProgressMarker::Complete)
                {
                    break;
                }
                let criteria = verify::verify_sprint(unit, sprint, &root, timeout);
                let count = |o: engine::CriterionOutcome| {
                    criteria.iter().filter(|c| c.outcome == o).count()
                };
                if count(engine::CriterionOutcome::Failed) > 0 {
                    break;
                }
                found.push(engine::AlreadyDone {
                    unit: unit.name.clone(),
                    sprint: sprint.id.clone(),
                    evidence: format!(
                        "the progress file marks Sprint {} complete at the starting commit; exit criteria: {} passed, {} need a person",
                        sprint.id,
                        count(engine::CriterionOutcome::Passed),
                        count(engine::CriterionOutcome::Unverified)
                    ),
                    criteria,
                });
            }
        }
        Ok(found)
    }

    /// Carries out the outbox, then adopts (or finishes) every run in flight.
    fn reconcile(&mut self, pending: Vec<PendingEffect>) -> Result<()> {
        for p in pending {
            self.carry_out(p)?;
        }
        let active: Vec<engine::DispatchId> = self
            .state
            .iter()
            .flat_map(|s| s.units.iter())
            .flat_map(|u| u.sprints.iter())
            .filter_map(|s| s.active.as_ref().map(|a| a.id.clone()))
            .collect();
        for d in active {
            let dir = process::run_dir(&self.runs(), &d.0);
            if dir.exists() {
                self.watch(d, None);
            } else {
                // Recorded as dispatched but never launched: nothing ran, so the
                // outbox entry (already re-run above) is the only launcher.
                tracing::warn!(dispatch = %d, "dispatch recorded without a run directory");
            }
        }
        Ok(())
    }

    fn watch(&mut self, d: engine::DispatchId, child: Option<std::process::Child>) {
        if !self.watching.insert(d.clone()) {
            return;
        }
        let dir = process::run_dir(&self.runs(), &d.0);
        process::watch(dir, child, self.tx.clone(), move |w| match w {
            Watched::Finished => Msg::Finished(d.clone()),
            Watched::Activity => Msg::Activity(d.clone()),
        });
    }

    /// Decides one input, records it, carries out its effects.
    pub fn handle(&mut self, input: Input) -> Result<Result<(), Refusal>> {
        let now = chrono::Utc::now();
        let span = tracing::info_span!("input", op = %self.op());
        let _g = span.enter();
        // Applied in place (no clone of the whole state per input); if the log
        // write below fails the process stops, and the log stays the record.
        let d = match decide_mut(&mut self.state, input, now) {
            Ok(d) => d,
            Err(r) => return Ok(Err(r)),
        };
        if d.events.is_empty() && d.effects.is_empty() {
            return Ok(Ok(()));
        }
        let pending = self.ledger.append(&d.events, &d.effects)?;
        for e in &d.events {
            self.print_event(e);
        }
        for p in pending {
            self.carry_out(p)?;
        }
        Ok(Ok(()))
    }

    fn carry_out(&mut self, p: PendingEffect) -> Result<()> {
        let span = tracing::info_span!("effect", id = %p.id);
        let _g = span.enter();
        match self.effect(&p.effect) {
            Ok(()) => self.ledger.mark_done(&p.id)?,
            // Left undone in the outbox: the next start of the supervisor retries it.
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "effect failed");
                self.notice(&format!("error: {e:#}"));
            }
        }
        Ok(())
    }

    fn effect(&mut self, effect: &Effect) -> Result<()> {
        let op = self.op();
        match effect {
            Effect::Dispatch(order) => {
                let dir = process::run_dir(&self.runs(), &order.dispatch.0);
                let branch =
                    sprint_branch(&op, &self.unit_slug(&order.unit), order.sprint.as_str());
                let checkout = match self.git.ensure_sprint_worktree(&op, &branch) {
                    Ok(c) => c,
                    Err(e) => {
                        self.queue.push_back(Input::DispatchFailed {
                            dispatch: order.dispatch.clone(),
                            error: format!("{e:#}"),
                        });
                        return Ok(());
                    }
                };
                let agent = self.settings.agent.clone().ok_or_else(|| anyhow!("no agent command: pass --agent CMD or set `agent:` in .github/supervise.yml"))?;
                let st = self
                    .state
                    .as_ref()
                    .ok_or_else(|| anyhow!("dispatch before start"))?;
                let ui = st
                    .unit_index(&order.unit)
                    .ok_or_else(|| anyhow!("unknown unit {}", order.unit))?;
                let unit = st.plan.work_units[ui].clone();
                let sprint = unit
                    .sprints
                    .iter()
                    .find(|s| s.id == order.sprint)
                    .cloned()
                    .ok_or_else(|| anyhow!("unknown sprint"))?;
                let spec = RunSpec {
                    order: order.clone(),
                    agent,
                    checkout,
                    unit,
                    sprint,
                    verify_timeout_secs: self.settings.verify_timeout_secs,
                    worktree_lock: Some(self.worktree_lock(&branch)),
                    branch,
                };
                let child = process::spawn(&dir, &spec)?;
                self.watch(order.dispatch.clone(), child);
            }
            Effect::Cancel { dispatch, force } => {
                // `killall` is an emergency: a short grace, never longer than the setting.
                let grace = Duration::from_secs(if *force {
                    self.settings.kill_grace_secs.min(2)
                } else {
                    self.settings.kill_grace_secs
                });
                process::cancel(&process::run_dir(&self.runs(), &dispatch.0), grace);
            }
            Effect::Integrate {
                unit,
                sprint,
                dispatch,
            } => {
                // Agents can move refs: what was merged must still be there. (The
                // sprint merged now is left out: a reopened one is not yet back.)
                let branch = sprint_branch(&op, &self.unit_slug(unit), sprint.as_str());
                let lost: Vec<_> = self
                    .lost_merges()?
                    .into_iter()
                    .filter(|(_, _, b)| *b != branch)
                    .collect();
                self.queue
                    .extend(
                        lost.into_iter()
                            .map(|(unit, sprint, branch)| Input::MergeLost {
                                unit,
                                sprint,
                                detail: format!(
                                    "{branch} is not contained in {}",
                                    integration_branch(&op)
                                ),
                            }),
                    );
                self.git.integrate(
                    &op,
                    &branch,
                    &format!("Merge {unit} Sprint {sprint} ({dispatch})"),
                )?;
                self.record_merged(&branch)?;
                self.integrated_head = Some(self.git.integration_head(&op)?);
                self.git.remove_worktree(&branch);
            }
            Effect::RunGate { gate, layer, units } => {
                let cmd = self
                    .settings
                    .build_gate
                    .clone()
                    .unwrap_or_else(|| "true".into());
                let dir = self.git.gate_worktree(&op)?;
                let (tx, gate, timeout) = (
                    self.tx.clone(),
                    *gate,
                    Duration::from_secs(self.settings.verify_timeout_secs),
                );
                self.notice(&format!(
                    "🏗️  Phase {layer} complete ({}). Running coordinated build: {cmd}",
                    units.join(", ")
                ));
                std::thread::spawn(move || {
                    let (passed, output) = verify::run_shell(&cmd, &dir, timeout);
                    let _ = tx.send(Msg::Input(Input::GateResult {
                        gate,
                        passed,
                        output,
                    }));
                });
            }
            Effect::PollCondition { unit, sprint } => {
                let branch = sprint_branch(&op, &self.unit_slug(unit), sprint.as_str());
                let checkout = self.git.ensure_sprint_worktree(&op, &branch)?;
                let st = self
                    .state
                    .as_ref()
                    .ok_or_else(|| anyhow!("poll before start"))?;
                let u = st
                    .plan
                    .unit(unit)
                    .cloned()
                    .ok_or_else(|| anyhow!("unknown unit"))?;
                let s = u
                    .sprints
                    .iter()
                    .find(|s| &s.id == sprint)
                    .cloned()
                    .ok_or_else(|| anyhow!("unknown sprint"))?;
                let (tx, unit, sprint, timeout) = (
                    self.tx.clone(),
                    unit.clone(),
                    sprint.clone(),
                    Duration::from_secs(self.settings.verify_timeout_secs),
                );
                std::thread::spawn(move || {
                    let results = verify::verify_sprint(&u, &s, &checkout, timeout);
                    let met = results
                        .iter()
                        .all(|r| r.outcome != engine::CriterionOutcome::Failed)
                        && results
                            .iter()
                            .any(|r| r.outcome == engine::CriterionOutcome::Passed);
                    let _ = tx.send(Msg::Input(Input::ConditionPolled {
                        unit,
                        sprint,
                        met,
                        error: None,
                        criteria: results,
                    }));
                });
            }
            Effect::Notify { kind, text, .. } => {
                self.notice(&format!("{}{text}", report::notice_prefix(*kind)));
            }
            Effect::PublishStatus => self.publish()?,
            // The files are rewritten by the PublishStatus of the same decision.
            Effect::FinalReport => {
                self.lost_at_end = self
                    .lost_merges()?
                    .into_iter()
                    .map(|(_, _, branch)| branch)
                    .collect();
                if !self.lost_at_end.is_empty() {
                    self.notice(&format!(
                        "⚠️  Work merged earlier is missing from {}: something moved it back. Merge it again:\n{}",
                        integration_branch(&op),
                        self.lost_at_end
                            .iter()
                            .map(|b| format!("  git merge {b}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ));
                }
                if let Some(st) = &self.state {
                    let s = report::final_summary(st);
                    self.notice(&s);
                }
            }
        }
        Ok(())
    }

    /// `merged`: the sprint branches this operation has merged, one per line,
    /// appended after each merge (a sprint whose merge is still in the outbox is
    /// not in it, so it is never taken for lost).
    fn merged_branches(&self) -> HashSet<String> {
        std::fs::read_to_string(self.dir.join("merged"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn record_merged(&self, branch: &str) -> Result<()> {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("merged"))?;
        writeln!(f, "{branch}")?;
        Ok(())
    }

    /// COMPLETED sprints (merged by this operation) whose branch head the
    /// integration branch no longer contains: (unit, sprint, branch).
    fn lost_merges(&self) -> Result<Vec<(String, crate::plan::SprintId, String)>> {
        let Some(st) = &self.state else {
            return Ok(Vec::new());
        };
        if let Some(head) = self.integrated_head {
            if self.git.holds_commit(&st.id.0, head)? {
                return Ok(Vec::new());
            }
        }
        let merged = self.merged_branches();
        let mut lost = Vec::new();
        for u in &st.units {
            for s in &u.sprints {
                let branch = sprint_branch(&st.id.0, &u.slug, s.id.as_str());
                if s.status() != engine::SprintStatus::Completed || !merged.contains(&branch) {
                    continue;
                }
                if self.git.holds(&st.id.0, &branch)? == Some(false) {
                    lost.push((u.name.clone(), s.id.clone(), branch));
                }
            }
        }
        Ok(lost)
    }

    /// Rewrites SUPERVISOR_STATE.md and COMPLETE_<NAME>.md and refreshes the screen.
    fn publish(&mut self) -> Result<()> {
        let Some(st) = &self.state else { return Ok(()) };
        let runs = self.runs();
        let output_file = |d: &engine::DispatchId| {
            process::run_dir(&runs, &d.0)
                .join("output.log")
                .strip_prefix(&self.plan.root)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let now = chrono::Utc::now();
        write_file(
            &self.plan.root.join("SUPERVISOR_STATE.md"),
            &report::supervisor_state_md(st, &output_file),
        )?;
        if st
            .units
            .iter()
            .any(|u| u.sprints.iter().any(|s| s.completion.is_some()))
        {
            write_file(
                &self.plan.root.join(report::complete_file_name(st)),
                &report::complete_md(st, now),
            )?;
        }
        if self.out == OutputMode::Live
            && self
                .last_draw
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(200))
        {
            self.last_draw = Some(Instant::now());
            let recent: Vec<String> = st
                .decisions
                .iter()
                .rev()
                .take(8)
                .rev()
                .map(report::decision_line)
                .collect();
            print!(
                "\x1b[H\x1b[2J{}\nRecent decisions:\n{}\n",
                report::status_table(st, now),
                recent.join("\n")
            );
            let _ = std::io::stdout().flush();
        }
        Ok(())
    }

    fn print_event(&self, e: &engine::Event) {
        match self.out {
            OutputMode::Json => {
                if let Ok(s) = serde_json::to_string(e) {
                    println!("{s}");
                }
            }
            OutputMode::Lines => {
                if let engine::Event::Decision { entry: d } = e {
                    println!("[{}", report::decision_line(d).replacen(' ', "] ", 1));
                }
            }
            _ => {}
        }
    }

    fn notice(&self, text: &str) {
        match self.out {
            OutputMode::Quiet => {}
            OutputMode::Json => eprintln!("{text}"),
            _ => println!("{text}"),
        }
    }

    /// Turns a finished run into the engine's input: the wrapper's result plus the
    /// git evidence, read now (after any earlier merges) so a conflict is current.
    fn finished_input(&self, d: &engine::DispatchId) -> Result<Option<Input>> {
        let Some(st) = &self.state else {
            return Ok(None);
        };
        let Some((u, s)) = st.find_dispatch(d) else {
            return Ok(None);
        };
        let unit = &st.plan.work_units[u];
        let sprint = &unit.sprints[s];
        let branch = sprint_branch(&st.id.0, &st.units[u].slug, sprint.id.as_str());
        let dir = process::run_dir(&self.runs(), &d.0);
        let result = process::read_result(&dir).unwrap_or_else(|| RunResult {
            output_tail: verify::tail(
                &std::fs::read_to_string(dir.join("output.log")).unwrap_or_default(),
                4000,
            ),
            ..Default::default()
        });
        let git = self.git.evidence(&st.id.0, &branch)?;
        let checkout = self.git.ensure_sprint_worktree(&st.id.0, &branch).ok();
        let progress = checkout
            .as_deref()
            .and_then(|c| verify::progress_marker(&st.plan, unit, sprint, c));
        let report = AgentReport {
            exit_code: result.exit_code,
            output_tail: result.output_tail,
            turns_used: result.turns_used,
            evidence: Evidence {
                commits: git.commits,
                uncommitted: git.uncommitted,
                progress,
                criteria: result.criteria,
                ci_passed: None,
                merge_conflict: git.merge_conflict,
            },
        };
        Ok(Some(Input::AgentFinished {
            dispatch: d.clone(),
            report,
        }))
    }

    fn control_requests(&mut self) -> Result<Vec<Input>> {
        let control = self.dir.join("control");
        let Ok(entries) = std::fs::read_dir(&control) else {
            return Ok(Vec::new());
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
            })
            .collect();
        files.sort();
        let mut inputs = Vec::new();
        for f in files {
            let cmd = std::fs::read_to_string(&f).unwrap_or_default();
            let mut words = cmd.split_whitespace();
            let input = match words.next() {
                Some("stop") => Some(Input::Stop),
                Some("killall") => Some(Input::Killall),
                Some("resume") => Some(Input::Resume {
                    unit: words.next().map(str::to_string),
                }),
                Some("name-feature") => Some(Input::NameFeature),
                _ => None,
            };
            std::fs::remove_file(&f)?;
            inputs.extend(input);
        }
        Ok(inputs)
    }

    /// Whether anything can still happen without a person.
    fn idle(&self) -> bool {
        let Some(st) = &self.state else { return true };
        st.active_count() == 0
            && !st.gates.iter().any(|g| g.passed.is_none())
            && !st
                .units
                .iter()
                .any(|u| u.sprints.iter().any(|s| s.deferred_waiting))
            && self.queue.is_empty()
    }

    /// Runs the loop until the operation ends, stops, blocks or waits for a person.
    pub fn run_loop(&mut self) -> Result<i32> {
        let tick = Duration::from_millis(self.settings.tick_ms);
        let mut next_tick = Instant::now() + tick;
        loop {
            while let Some(input) = self.queue.pop_front() {
                if let Err(r) = self.handle(input)? {
                    tracing::debug!(%r, "input refused");
                }
            }
            if let Some(code) = self.finished_code() {
                self.publish()?;
                self.farewell();
                return Ok(code);
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(Msg::Finished(d)) => {
                    self.watching.remove(&d);
                    if let Some(input) = self.finished_input(&d)? {
                        self.queue.push_back(input);
                    }
                }
                Ok(Msg::Activity(d)) => self.queue.push_back(Input::AgentActivity { dispatch: d }),
                Ok(Msg::Input(i)) => self.queue.push_back(i),
                Err(RecvTimeoutError::Timeout) => {
                    next_tick = Instant::now() + tick;
                    let requests = self.control_requests()?;
                    self.queue.extend(requests);
                    self.queue.push_back(Input::Tick);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(anyhow!("internal channel closed"))
                }
            }
        }
    }

    fn finished_code(&self) -> Option<i32> {
        let st = self.state.as_ref()?;
        if !self.idle() {
            return None;
        }
        Some(match st.status {
            OverallStatus::Completed => {
                if report::verification(st).passed() && self.lost_at_end.is_empty() {
                    exit::COMPLETED
                } else {
                    exit::VERIFICATION_FAILED
                }
            }
            OverallStatus::Blocked => exit::BLOCKED,
            // Stopped because the agent command cannot run: the user's to fix.
            OverallStatus::Stopped
                if st.units.iter().flat_map(|u| &u.sprints).any(|s| {
                    s.history
                        .last()
                        .is_some_and(|h| h.outcome == engine::AGENT_COMMAND_FAILED)
                        && s.status() != engine::SprintStatus::Completed
                }) =>
            {
                exit::USAGE
            }
            OverallStatus::Stopped | OverallStatus::Killed => exit::STOPPED,
            OverallStatus::Running | OverallStatus::Stopping => {
                self.notice("Waiting for a person: a manual sprint needs confirming. Review it, then run `supervise resume`.");
                exit::AWAITING_PERSON
            }
        })
    }

    /// Waits up to `limit` for the agents in flight to end (after `killall`), so
    /// what is then reported is what happened: each ended attempt is recorded.
    pub fn wait_for_agents(&mut self, limit: Duration) -> Result<()> {
        let until = Instant::now() + limit;
        while self.state.as_ref().is_some_and(|s| s.active_count() > 0) && !self.watching.is_empty()
        {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(Msg::Finished(d)) => {
                    self.watching.remove(&d);
                    if let Some(input) = self.finished_input(&d)? {
                        let _ = self.handle(input)?;
                    }
                }
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    /// The last lines of a run, whatever the output is: the status table (a
    /// terminal already shows it) and where the work is, with the commands to
    /// look at it and take it.
    fn farewell(&self) {
        let Some(st) = &self.state else { return };
        if matches!(self.out, OutputMode::Quiet | OutputMode::Json) {
            return;
        }
        if self.out == OutputMode::Lines {
            println!("\n{}", report::status_table(st, chrono::Utc::now()));
        }
        if st.status == OverallStatus::Killed {
            println!("\n{}", report::kill_summary(st));
        }
        let merged = st.units.iter().flat_map(|u| &u.sprints).any(|s| {
            s.completion
                .as_ref()
                .is_some_and(|c| c.already_done.is_none())
        });
        if merged {
            let branch = integration_branch(&st.id.0);
            println!(
                "\nThe work is on branch {branch} (your own branch and checkout are untouched):\n  git log --oneline {branch}   # what the agents did\n  git diff HEAD...{branch}     # all of it as one change\n  git merge {branch}           # take it into your branch"
            );
        }
    }

    pub fn push(&mut self, input: Input) {
        self.queue.push_back(input);
    }
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn default_output(json: bool) -> OutputMode {
    if json {
        OutputMode::Json
    } else if std::io::stdout().is_terminal() {
        OutputMode::Live
    } else {
        OutputMode::Lines
    }
}
