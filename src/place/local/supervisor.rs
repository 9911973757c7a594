//! The local supervisor: the [`Driver`] fed from the terminal and from watched
//! processes, with the JSON-lines ledger as its outbox and [`LocalPlace`] as its
//! executor. It owns what is particular to running here: the plan's lock, the
//! control files other commands leave for it, the watchers' channel, and when a
//! run is over.

use super::executor::LocalPlace;
use super::git::Git;
use super::process;
use super::screen::{Msg, Screen};
use crate::commands::Command;
use crate::drive::{finish_now, Decided, Driver};
use crate::engine::{self, Input, OperationId, OperationState, OverallStatus, SprintStatus};
use crate::plan::LoadedPlan;
use crate::report;
use crate::settings::Settings;
use crate::store::FileLedger;
use anyhow::{anyhow, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How a run ended, for the front door to turn into an exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every unit COMPLETED; `verified`: the final verification passed and no
    /// merged work went missing.
    Completed {
        verified: bool,
    },
    Blocked,
    /// Stopped because the agent command cannot run: the user's to fix.
    AgentCommandFailed,
    Stopped,
    /// A manual sprint waits for a person's confirmation.
    AwaitingPerson,
    /// The person interrupted the supervisor (Ctrl-C, SIGTERM); agents in
    /// flight go on, to be adopted by the next `run`.
    Interrupted,
}

/// Set by the first SIGINT or SIGTERM once [`stop_on_interrupt`] is called.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The first Ctrl-C or SIGTERM ends the loop at its next turn, with the
/// state written and the agents still in flight named (they are not
/// stopped: `supervise stop` and `killall` are for that); a second one
/// acts as it always does.
pub fn stop_on_interrupt() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only stores to an atomic, with
        // SA_RESETHAND so a second signal takes the default action.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The agents of the operation kept in `dir` (its `.supervise/`) still
/// running: what to say, when no supervisor watches them, so that nobody
/// pays for agents they forgot. None when none runs.
pub fn unwatched_agents(dir: &Path) -> Option<String> {
    let runs = dir.join("runs");
    let live: Vec<String> = std::fs::read_dir(&runs)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|d| process::is_alive(d))
        .filter_map(|d| process::read_spec(&d))
        .map(|spec| {
            format!(
                "{} Sprint {} on {}",
                spec.order.unit,
                spec.order.sprint,
                spec.order.tier.as_str()
            )
        })
        .collect();
    (!live.is_empty()).then(|| {
        format!(
            "{} still running with no supervisor watching ({}): {} spending until {}. `supervise run` adopts {}; `supervise killall` ends {} now.",
            match live.len() {
                1 => "1 agent is".to_string(),
                n => format!("{n} agents are"),
            },
            live.join(", "),
            if live.len() == 1 { "it goes on" } else { "they go on" },
            if live.len() == 1 { "it ends" } else { "they end" },
            if live.len() == 1 { "it" } else { "them" },
            if live.len() == 1 { "it" } else { "them" },
        )
    })
}

pub struct Supervisor {
    driver: Driver,
    ledger: FileLedger,
    place: LocalPlace,
    rx: Receiver<Msg>,
    _lock: File,
}

/// `.supervise/` beside the plan.
pub fn state_dir(plan: &LoadedPlan) -> PathBuf {
    plan.root.join(".supervise")
}

/// Every operation this state directory holds: the one under way (or last
/// run) and every finished one set aside in `finished/`, oldest first.
pub fn operations_here(dir: &Path) -> Result<Vec<OperationState>> {
    let mut logs = vec![dir.join("events.jsonl")];
    if let Ok(entries) = std::fs::read_dir(dir.join("finished")) {
        logs.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".events.jsonl")),
        );
    }
    let mut states = Vec::new();
    for log in logs {
        let shown = log.display().to_string();
        let loaded = crate::store::FileLedger::read(log)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("reading {shown}"))?;
        states.extend(loaded.state);
    }
    states.sort_by_key(|st| st.started_at);
    Ok(states)
}

/// What attempts have cost here: learned from the last
/// [`HISTORY`](crate::engine::estimate::HISTORY) operations of this state
/// directory; the defaults when it has none (or they do not read: an
/// estimate is no reason to refuse a run).
pub fn cost_history(dir: &Path) -> crate::engine::estimate::CostModel {
    let states = operations_here(dir).unwrap_or_else(|e| {
        tracing::warn!("no cost history: {e:#}");
        Vec::new()
    });
    let from = states
        .len()
        .saturating_sub(crate::engine::estimate::HISTORY);
    crate::engine::estimate::CostModel::learn(&states[from..])
}

/// One supervisor per state directory: the lock is held on the directory
/// itself, opened — not on a file in it, which anyone could delete (a
/// second supervisor would then lock a new file of the same name and run
/// beside the first). `supervisor.lock` only says which process holds it.
fn supervisor_lock(dir: &Path) -> Result<Option<File>> {
    std::fs::create_dir_all(dir)?;
    let held = File::open(dir)?;
    if !super::lockfile::try_lock(&held) {
        return Ok(None);
    }
    std::fs::write(dir.join("supervisor.lock"), std::process::id().to_string())?;
    Ok(Some(held))
}

/// The pid of the supervisor running for this plan, if one is ("" when its
/// pid file is gone).
pub fn running_supervisor(dir: &Path) -> Option<String> {
    let f = File::open(dir).ok()?;
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
    Ok(FileLedger::read(state_dir(plan).join("events.jsonl"))?.state)
}

impl Supervisor {
    /// Takes the plan's supervisor lock; fails if another supervisor holds it.
    pub fn open(
        plan: LoadedPlan,
        settings: Settings,
        screen: Box<dyn Screen>,
    ) -> Result<Supervisor> {
        let dir = state_dir(&plan);
        Supervisor::open_in(plan, settings, screen, dir)
    }

    /// As [`Supervisor::open`], with the operation's state in `dir` (a
    /// workflow without a plan file keeps its own beside the plans').
    pub fn open_in(
        plan: LoadedPlan,
        settings: Settings,
        screen: Box<dyn Screen>,
        dir: PathBuf,
    ) -> Result<Supervisor> {
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
            driver: Driver::new(loaded),
            ledger,
            place: LocalPlace::new(plan, dir, git, settings, screen, tx),
            rx,
            _lock: lock,
        };
        // Events first, effects second: whatever the last process recorded but did
        // not finish is carried out now (every effect is idempotent).
        sup.reconcile()?;
        Ok(sup)
    }

    /// Sets the finished (or abandoned) operation aside so a new one can start:
    /// its event log moves to `.supervise/finished/<op>.events.jsonl`; its
    /// branches, worktrees and run directories stay for inspection.
    pub fn archive_operation(&mut self) -> Result<()> {
        let Some(st) = &self.driver.state else {
            return Ok(());
        };
        let dir = &self.place.dir;
        let finished = dir.join("finished");
        std::fs::create_dir_all(&finished)?;
        let to = finished.join(format!("{}.events.jsonl", st.id.0));
        std::fs::rename(self.ledger.path(), &to)
            .with_context(|| format!("moving the finished operation's log to {}", to.display()))?;
        let _ = std::fs::remove_file(dir.join("merged"));
        self.ledger = FileLedger::new(dir);
        self.driver = Driver::new(self.ledger.load()?);
        Ok(())
    }

    /// What changed in the plan since the operation started (None: no operation).
    pub fn plan_changes(&self) -> Option<Vec<String>> {
        let st = self.driver.state.as_ref()?;
        Some(crate::plan::diff::changes(&st.plan, &self.place.plan.plan))
    }

    pub fn state(&self) -> Option<&OperationState> {
        self.driver.state.as_deref()
    }

    /// A finished operation's verdict held to its head: when the
    /// integration branch moved since its final verification (a person
    /// mended what failed there), every criterion runs again on the new
    /// head and the verdict is that run's. True when it ran.
    pub fn verify_moved_head(&mut self) -> Result<bool> {
        let Some(st) = self.driver.state.as_deref() else {
            return Ok(false);
        };
        if st.status != OverallStatus::Completed || !self.place.head_moved(st)? {
            return Ok(false);
        }
        let Some(verification) = self.place.verify_head(st)? else {
            return Ok(false);
        };
        self.handle(Input::HeadVerified { verification })?;
        Ok(true)
    }

    /// The input that starts a new operation on this plan.
    pub fn start_input(&self) -> Result<Input> {
        self.start_input_after(None)
    }

    /// The input that starts a new operation on this plan, with the work of
    /// `earlier` (a finished operation's id) merged into its integration
    /// branch first: sprints whose criteria pass there are found done and
    /// not paid for again. Work that no longer merges is left out, and said.
    pub fn start_input_after(&self, earlier: Option<&str>) -> Result<Input> {
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64;
        let plan = &self.place.plan.plan;
        let op = crate::contract::operation_id(&plan.title, nanos & 0xff_ffff);
        let start = self.place.git.head_commit()?;
        self.place.git.ensure_integration(&op, start)?;
        if let Some(earlier) = earlier {
            let carried = self.place.git.integration_head(earlier).and_then(|head| {
                self.place.git.integrate_commit(
                    &op,
                    head,
                    &format!("supervise: the work of {earlier}, carried over"),
                )
            });
            if let Err(e) = carried {
                tracing::warn!(%earlier, "the earlier operation's work was not carried over: {e:#}");
                eprintln!("The work of {earlier} could not be carried over ({e:#}); every sprint is looked at afresh.");
            }
        }
        let already_done = self.place.already_done(&op)?;
        Ok(Input::Start {
            operation: OperationId(op),
            plan: Box::new(plan.clone()),
            config: self.place.settings.engine.clone(),
            seed: nanos,
            workflow: None,
            already_done,
        })
    }

    /// The input that starts a workflow: its first units as the plan, and the
    /// files it needs (the manager's kanban) committed on the integration
    /// branch before any agent branches from it.
    pub fn start_workflow_input(
        &self,
        workflow: crate::engine::workflow::Workflow,
    ) -> Result<Input> {
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64;
        let plan = &self.place.plan.plan;
        let op = crate::contract::operation_id(&plan.title, nanos & 0xff_ffff);
        let start = self.place.git.head_commit()?;
        self.place.git.ensure_integration(&op, start)?;
        let seeds = workflow.seed_files();
        if !seeds.is_empty() {
            self.place.git.seed_integration(
                &op,
                &seeds,
                "supervise: the workflow's starting files",
            )?;
        }
        Ok(Input::Start {
            operation: OperationId(op),
            plan: Box::new(plan.clone()),
            config: self.place.settings.engine.clone(),
            seed: nanos,
            workflow: Some(Box::new(workflow)),
            already_done: Vec::new(),
        })
    }

    /// Carries out the outbox, then adopts every run in flight.
    fn reconcile(&mut self) -> Result<()> {
        self.drive()?;
        let active: Vec<engine::DispatchId> = self
            .driver
            .state
            .iter()
            .flat_map(|s| s.units.iter())
            .flat_map(|u| u.sprints.iter())
            .filter_map(|s| s.active.as_ref().map(|a| a.id.clone()))
            .collect();
        for d in active {
            if process::run_dir(&self.place.runs(), &d.0).exists() {
                self.place.watch(d, None);
            } else {
                // Recorded as dispatched but never launched: nothing ran, so the
                // outbox entry (already carried out above) is the only launcher.
                tracing::warn!(dispatch = %d, "dispatch recorded without a run directory");
            }
        }
        Ok(())
    }

    /// Decides one input, records it, carries out its effects and what follows.
    pub fn handle(&mut self, input: Input) -> Result<Decided> {
        let span = tracing::info_span!("input", op = %self.op());
        let _g = span.enter();
        let decided = finish_now(self.driver.submit(&mut self.ledger, &mut self.place, input))
            .map_err(anyhow::Error::from)?;
        self.after_effects()?;
        Ok(decided)
    }

    /// Decides the queued inputs and carries out the outbox.
    fn drive(&mut self) -> Result<()> {
        finish_now(self.driver.drive(&mut self.ledger, &mut self.place, false))
            .map_err(anyhow::Error::from)?;
        self.after_effects()
    }

    /// See [`LocalPlace::after_effects`].
    fn after_effects(&mut self) -> Result<()> {
        match &self.driver.state {
            Some(st) => self.place.after_effects(st),
            None => Ok(()),
        }
    }

    fn op(&self) -> String {
        self.driver
            .state
            .as_ref()
            .map(|s| s.id.0.clone())
            .unwrap_or_default()
    }

    fn control_requests(&mut self) -> Result<Vec<Input>> {
        let control = self.place.dir.join("control");
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
            let input = Command::parse_bare(&cmd).and_then(|c| c.operation_input());
            std::fs::remove_file(&f)?;
            inputs.extend(input);
        }
        Ok(inputs)
    }

    /// Whether anything can still happen without a person.
    fn idle(&self) -> bool {
        let Some(st) = &self.driver.state else {
            return true;
        };
        st.active_count() == 0
            && !st.gates.iter().any(|g| g.passed.is_none())
            && !st
                .units
                .iter()
                .any(|u| u.sprints.iter().any(|s| s.deferred_waiting))
            // Waiting out the model provider: a tick sends it again.
            && !st.units.iter().any(|u| {
                u.sprints
                    .iter()
                    .any(|s| s.status() == SprintStatus::Backoff && s.not_before.is_some())
            })
            && self.driver.queue.is_empty()
            && self.driver.pending.is_empty()
    }

    /// Runs the loop until the operation ends, stops, blocks or waits for a person.
    pub fn run_loop(&mut self) -> Result<Ending> {
        let tick = Duration::from_millis(self.place.settings.tick_ms);
        let mut next_tick = Instant::now() + tick;
        loop {
            self.drive()?;
            let interrupted = INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
            if let Some(ending) = self.ending().or(interrupted.then_some(Ending::Interrupted)) {
                if let Some(st) = &self.driver.state {
                    self.place.publish(st)?;
                    self.place.screen.finish(st);
                }
                return Ok(ending);
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            let input = match self.rx.recv_timeout(wait) {
                Ok(Msg::Finished(d)) => {
                    self.place.watching.remove(&d);
                    self.finished_input(&d)?
                }
                Ok(Msg::Activity(d)) => Some(Input::AgentActivity { dispatch: d }),
                Ok(Msg::Input(i)) => Some(*i),
                Err(RecvTimeoutError::Timeout) => {
                    next_tick = Instant::now() + tick;
                    let requests = self.control_requests()?;
                    self.driver.queue.extend(requests);
                    // Merges waiting for a person's review look again (the
                    // reviews file may have a new line).
                    finish_now(self.driver.drive(&mut self.ledger, &mut self.place, true))
                        .map_err(anyhow::Error::from)?;
                    Some(Input::Tick)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(anyhow!("internal channel closed"))
                }
            };
            self.driver.queue.extend(input);
        }
    }

    fn finished_input(&self, d: &engine::DispatchId) -> Result<Option<Input>> {
        match &self.driver.state {
            Some(st) => self.place.finished_input(st, d),
            None => Ok(None),
        }
    }

    /// How the run ended, once nothing can happen without a person.
    fn ending(&self) -> Option<Ending> {
        let st = self.driver.state.as_ref()?;
        if !self.idle() {
            return None;
        }
        Some(match st.status {
            OverallStatus::Completed => Ending::Completed {
                verified: report::verification(st).passed() && self.place.lost_at_end.is_empty(),
            },
            OverallStatus::Blocked => Ending::Blocked,
            OverallStatus::Stopped
                if st.units.iter().flat_map(|u| &u.sprints).any(|s| {
                    s.history
                        .last()
                        .is_some_and(|h| h.outcome == engine::AGENT_COMMAND_FAILED)
                        && s.status() != engine::SprintStatus::Completed
                }) =>
            {
                Ending::AgentCommandFailed
            }
            OverallStatus::Stopped | OverallStatus::Killed => Ending::Stopped,
            OverallStatus::Running | OverallStatus::Stopping => Ending::AwaitingPerson,
        })
    }

    /// Waits up to `limit` for the agents in flight to end (after `killall`), so
    /// what is then reported is what happened: each ended attempt is recorded.
    pub fn wait_for_agents(&mut self, limit: Duration) -> Result<()> {
        let until = Instant::now() + limit;
        while self.state().is_some_and(|s| s.active_count() > 0) && !self.place.watching.is_empty()
        {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(Msg::Finished(d)) => {
                    self.place.watching.remove(&d);
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

    pub fn push(&mut self, input: Input) {
        self.driver.queue.push_back(input);
    }
}
