//! Operations on GitHub: drives the engine with agents in Actions runners and
//! the SQL store as the log. One operation at a time holds its lock:
//! decide → write events and effects in one transaction → carry the effects out
//! on GitHub → mark them done. A restart replays the log, carries out what was
//! left, and reconciles every run in flight with what GitHub says (ground truth).
//!
//! Idempotency keys: a dispatch id is in its run's name, so a lost answer is
//! resolved by finding the run, never by dispatching twice; branches, pull
//! requests, sub-issues and comments are looked for (by name or hidden marker)
//! before they are made.

use super::repo::{Repo, WorkflowRun};
use super::{GitHub, GitHubError};
use crate::engine::{
    self, decide_mut, AgentReport, DispatchId, Effect, Evidence, Input, NoticeKind, OperationId,
    OperationState, OverallStatus, Refusal, UnitStatus,
};
use crate::report;
use crate::runner::git::{integration_branch, sprint_branch};
use crate::runner::process::RunResult;
use crate::runner::verify::{prompt_path, results_path};
use crate::settings::{self, MergeMode, Settings};
use crate::store::sql::{OpEffect, OperationRow, RunRow, SqlError, SqlStore, UnitIssue};
use crate::text::slug;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The agent workflow's file name when `.github/supervise.yml` names none.
pub const DEFAULT_WORKFLOW: &str = "supervise-agent.yml";

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    #[error(transparent)]
    Store(#[from] SqlError),
    /// Another replica holds the operation's lease; try again later.
    #[error("operation {0} is being carried out by another replica")]
    Busy(String),
}

impl OpError {
    pub fn is_transient(&self) -> bool {
        match self {
            OpError::GitHub(e) => e.is_transient(),
            OpError::Store(_) | OpError::Busy(_) => true,
        }
    }
}

/// What an operation on GitHub keeps fixed from its start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpContext {
    pub op: String,
    pub repo: String,
    pub issue: i64,
    pub installation: u64,
    pub default_branch: String,
    pub plan_path: String,
    pub workflow: String,
    pub merge: MergeMode,
    /// When `start` was said (RFC 3339): the lower bound of comment look-ups.
    pub started_at: String,
}

/// Timings of the service's loop.
#[derive(Debug, Clone)]
pub struct OpTimings {
    /// How often each operation is ticked (stall checks, stop drain, retries).
    pub tick: Duration,
    /// How often runs in flight are checked against GitHub, besides webhooks.
    pub reconcile: Duration,
    /// The least time between two edits of a status comment.
    pub status_interval: Duration,
    /// How long to wait for the repository's CI to report at all (sprint heads
    /// and build gates) before going on without it.
    pub ci_grace: Duration,
    /// How long a cancelled run may keep running before it is force-cancelled.
    pub force_cancel_after: Duration,
    /// How long a replica's claim on an operation lasts without renewal.
    pub lease: Duration,
}

impl Default for OpTimings {
    fn default() -> Self {
        OpTimings {
            tick: Duration::from_secs(2),
            reconcile: Duration::from_secs(30),
            status_interval: Duration::from_secs(5),
            ci_grace: Duration::from_secs(30),
            force_cancel_after: Duration::from_secs(30),
            lease: Duration::from_secs(60),
        }
    }
}

/// One operation in memory: its state, its outbox, and what is due.
struct Live {
    ctx: OpContext,
    state: Option<OperationState>,
    pending: Vec<OpEffect>,
    queue: VecDeque<Input>,
    status_comment: Option<i64>,
    dirty: bool,
    last_flush: Option<Instant>,
    last_text: String,
    last_reconcile: Option<Instant>,
    gate_seen: HashMap<u32, Instant>,
    /// Runs asked to cancel: when, and whether force-cancel was sent.
    cancels: HashMap<i64, (Instant, bool)>,
    /// Outbox entries waiting on GitHub (CI, a review): looked at again at
    /// reconciliation, not on every tick, so waiting costs few requests.
    waiting: HashSet<(i64, i64)>,
    /// Set during reconciliation: waiting entries are tried again.
    retry_waiting: bool,
    /// Finished runs whose sprint head has no CI report yet: since when.
    ci_wait: HashMap<String, Instant>,
    /// The last decision this replica knows of: if the log has moved on (another
    /// replica acted), the operation is reloaded before acting.
    seq: i64,
}

/// What carrying out one effect came to.
enum Outcome {
    Done(Vec<Input>),
    /// Not possible yet (CI still running, review not given): try again later.
    Wait,
}

pub struct Operations {
    /// This replica's name in operation leases.
    owner: String,
    gh: Arc<GitHub>,
    store: SqlStore,
    timings: OpTimings,
    live: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Live>>>>,
}

/// Where a command was said.
pub struct Origin<'a> {
    pub installation: u64,
    pub repo: &'a str,
    pub issue: i64,
    pub comment: i64,
    pub created_at: Option<&'a str>,
}

fn conclusion_exit(c: Option<&str>) -> Option<i32> {
    match c {
        Some("success") => Some(0),
        Some("cancelled") | None => None,
        Some(_) => Some(1),
    }
}

impl Operations {
    /// `owner` names this replica (a restarted replica with the same name takes
    /// its operations back at once; another waits for the lease to expire).
    pub fn new(
        owner: String,
        gh: Arc<GitHub>,
        store: SqlStore,
        timings: OpTimings,
    ) -> Arc<Operations> {
        Arc::new(Operations {
            owner,
            gh,
            store,
            timings,
            live: Mutex::new(HashMap::new()),
        })
    }

    fn repo<'a>(&'a self, ctx: &'a OpContext) -> Repo<'a> {
        Repo {
            gh: &self.gh,
            installation: ctx.installation,
            name: &ctx.repo,
        }
    }

    fn get(&self, op: &str) -> Option<Arc<tokio::sync::Mutex<Live>>> {
        self.live.lock().expect("lock").get(op).cloned()
    }

    /// Loads an operation from the store (replaying its log) unless it is loaded.
    async fn open(&self, row: &OperationRow) -> Result<Arc<tokio::sync::Mutex<Live>>, OpError> {
        if let Some(l) = self.get(&row.id) {
            return Ok(l);
        }
        let ctx: OpContext = serde_json::from_str(&row.context).map_err(SqlError::from)?;
        let seq = self.store.last_seq(&row.id).await?;
        let (events, pending) = self.store.load_operation(&row.id).await?;
        let live = Arc::new(tokio::sync::Mutex::new(Live {
            seq,
            ctx,
            state: OperationState::replay(&events),
            pending,
            queue: VecDeque::new(),
            status_comment: row.status_comment,
            dirty: true,
            last_flush: None,
            last_text: String::new(),
            last_reconcile: None,
            gate_seen: HashMap::new(),
            cancels: HashMap::new(),
            waiting: HashSet::new(),
            retry_waiting: true,
            ci_wait: HashMap::new(),
        }));
        Ok(self
            .live
            .lock()
            .expect("lock")
            .entry(row.id.clone())
            .or_insert(live)
            .clone())
    }

    /// Loads every active operation: the start-up half of crash recovery.
    pub async fn load_all(&self) -> Result<usize, OpError> {
        let rows = self.store.operations(true).await?;
        for r in &rows {
            self.open(r).await?;
        }
        Ok(rows.len())
    }

    /// Runs the timer until the process ends: ticks, outbox retries,
    /// reconciliation with GitHub, coalesced status edits.
    pub fn spawn_timer(self: &Arc<Self>) {
        let ops = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ops.timings.tick).await;
                let all: Vec<_> = ops.live.lock().expect("lock").values().cloned().collect();
                for l in all {
                    // Each operation on its own task: one waiting out a rate limit
                    // never holds up the others. A busy one is ticked next time.
                    let Ok(mut live) = l.try_lock_owned() else {
                        continue;
                    };
                    let ops = ops.clone();
                    tokio::spawn(async move {
                        let span = tracing::info_span!("operation", op = %live.ctx.op);
                        if let Err(e) =
                            tracing::Instrument::instrument(ops.tick(&mut live), span).await
                        {
                            tracing::warn!(error = %e, "operation tick failed; will retry");
                        }
                    });
                }
            }
        });
    }

    /// One pass over every loaded operation, as the GitHub Action makes per
    /// event: tick, reconcile with GitHub, retry what waits, publish the status.
    pub async fn run_once(&self) -> Result<(), OpError> {
        let all: Vec<_> = self.live.lock().expect("lock").values().cloned().collect();
        for l in all {
            let mut live = l.lock().await;
            live.last_reconcile = None;
            live.dirty = true;
            self.tick(&mut live).await?;
            self.flush(&mut live, true).await?;
        }
        Ok(())
    }

    /// Takes the operation's lease, catching up with the log if another replica
    /// acted since this one last did.
    async fn acquire(&self, live: &mut Live) -> Result<(), OpError> {
        if !self
            .store
            .lease_operation(&live.ctx.op, &self.owner, self.timings.lease)
            .await?
        {
            return Err(OpError::Busy(live.ctx.op.clone()));
        }
        let seq = self.store.last_seq(&live.ctx.op).await?;
        if seq != live.seq {
            let (events, pending) = self.store.load_operation(&live.ctx.op).await?;
            live.state = OperationState::replay(&events);
            live.pending = pending;
            live.seq = seq;
            live.dirty = true;
        }
        Ok(())
    }

    async fn tick(&self, live: &mut Live) -> Result<(), OpError> {
        // Nothing can happen to a finished operation without a person.
        let finished = live
            .state
            .as_ref()
            .is_none_or(|st| st.status == OverallStatus::Completed);
        if finished && live.pending.is_empty() && !live.dirty {
            return Ok(());
        }
        match self.acquire(live).await {
            Err(OpError::Busy(_)) => return Ok(()),
            r => r?,
        }
        live.queue.push_back(Input::Tick);
        self.drive(live).await?;
        if live
            .last_reconcile
            .is_none_or(|t| t.elapsed() >= self.timings.reconcile)
        {
            live.last_reconcile = Some(Instant::now());
            self.reconcile(live).await?;
            live.retry_waiting = true;
            let driven = self.drive(live).await;
            live.retry_waiting = false;
            driven?;
        }
        self.flush(live, false).await
    }

    // ----- commands --------------------------------------------------------

    /// `/supervise start [plan]`: reads the plan and settings from the default
    /// branch, creates the integration branch and starts the operation. Returns
    /// the reply for the person.
    pub async fn start(&self, o: &Origin<'_>, plan_arg: Option<&str>) -> Result<String, OpError> {
        // The same command processed again (after a crash) finds its own
        // operation and answers as the first time; another is refused.
        let own = format!("-{:x}", o.comment);
        if let Some(row) = self
            .store
            .operation_on(o.repo, o.issue)
            .await?
            .filter(|r| !r.id.ends_with(&own))
        {
            let l = self.open(&row).await?;
            let live = l.lock().await;
            if let Some(st) = &live.state {
                if st.status != OverallStatus::Completed {
                    return Ok(format!(
                        "{}\n\nOperation `{}` is {} on this issue.",
                        Refusal::AlreadyStarted(st.id.0.clone()),
                        st.id,
                        st.status
                    ));
                }
            }
        }
        let repo = Repo {
            gh: &self.gh,
            installation: o.installation,
            name: o.repo,
        };
        let default_branch = repo.default_branch().await?;
        let file_settings = match repo.file(".github/supervise.yml", Some(&default_branch)).await? {
            None => settings::FileSettings::default(),
            Some((text, _)) => match settings::parse(&text, ".github/supervise.yml") {
                Ok(f) => f,
                Err(e) => {
                    return Ok(format!(
                        "I did not start: `.github/supervise.yml` is not valid.\n\n```\n{e}\n```\nFix it on `{default_branch}` and say `/supervise start` again."
                    ))
                }
            },
        };
        let plan_path = plan_arg.unwrap_or("EXECUTION_PLAN.md").to_string();
        let Some((source, _)) = repo.file(&plan_path, Some(&default_branch)).await? else {
            return Ok(format!(
                "ERROR: Cannot find `{plan_path}` on `{default_branch}`.\nThe Sprint Supervisor requires an execution plan to operate. Commit one, or name it: `/supervise start path/to/EXECUTION_PLAN.md`."
            ));
        };
        let name = plan_path.rsplit('/').next().unwrap_or(&plan_path);
        let plan = match crate::plan::parse(&source, name) {
            Ok(p) => p,
            Err(problems) => {
                let e = crate::plan::PlanError {
                    path: plan_path.clone().into(),
                    problems,
                };
                return Ok(format!(
                    "I did not start: the plan cannot be run.\n\n```\n{e}```"
                ));
            }
        };
        let settings = Settings::merge(file_settings.clone(), Default::default());
        let title = slug(&plan.title);
        let op = format!(
            "{}-{:x}",
            title[..title.len().min(24)].trim_end_matches('-'),
            o.comment
        );
        let head = repo
            .branch_sha(&default_branch)
            .await?
            .ok_or_else(|| GitHubError::Config(format!("no branch {default_branch}")))?;
        repo.create_branch(&integration_branch(&op), &head).await?;
        let ctx = OpContext {
            op: op.clone(),
            repo: o.repo.to_string(),
            issue: o.issue,
            installation: o.installation,
            default_branch,
            plan_path,
            workflow: file_settings
                .workflow
                .clone()
                .unwrap_or_else(|| DEFAULT_WORKFLOW.into()),
            merge: file_settings.merge.unwrap_or_default(),
            started_at: o
                .created_at
                .map(str::to_string)
                .unwrap_or_else(|| chrono::Utc::now().to_rfc3339()),
        };
        let row = OperationRow {
            id: op.clone(),
            repo: o.repo.to_string(),
            issue: o.issue,
            installation: o.installation as i64,
            active: true,
            status_comment: None,
            context: serde_json::to_string(&ctx).map_err(SqlError::from)?,
        };
        self.store.create_operation(&row).await?;
        let l = self.open(&row).await?;
        let mut live = l.lock().await;
        self.acquire(&mut live).await?;
        let units = plan.work_units.len();
        let sprints: usize = plan.work_units.iter().map(|u| u.sprints.len()).sum();
        if live.state.is_none() {
            let input = Input::Start {
                operation: OperationId(op.clone()),
                plan: Box::new(plan),
                config: settings.engine,
                seed: o.comment as u64,
            };
            if let Err(r) = self.submit(&mut live, input).await? {
                return Ok(r.to_string());
            }
        }
        self.flush(&mut live, true).await?;
        Ok(format!(
            "Started operation `{op}`: {units} work unit(s), {sprints} sprint(s), agents through `.github/workflows/{}` on branches from `{}`. The status comment below is kept up to date.",
            live.ctx.workflow,
            integration_branch(&op)
        ))
    }

    /// The operation on this issue, if any.
    pub async fn on_issue(&self, repo: &str, issue: i64) -> Result<Option<String>, OpError> {
        Ok(self.store.operation_on(repo, issue).await?.map(|r| r.id))
    }

    /// `resume`, `stop`, `killall`, `name-feature` on the issue's operation.
    pub async fn command(&self, repo: &str, issue: i64, input: Input) -> Result<String, OpError> {
        let Some(row) = self.store.operation_on(repo, issue).await? else {
            return Ok(Refusal::NotStarted
                .to_string()
                .replace("`start`", "`/supervise start`"));
        };
        let l = self.open(&row).await?;
        let mut live = l.lock().await;
        self.acquire(&mut live).await?;
        let what = match &input {
            Input::Stop => "Stopping: no new sprints; agents in flight finish (or are cancelled after the stop timeout).",
            Input::Killall => "Killing every agent in flight; unfinished work stays on its branch.",
            Input::Resume { .. } => "Resumed.",
            _ => "Done.",
        };
        match self.submit(&mut live, input).await? {
            Ok(()) => {
                if row.active {
                    self.flush(&mut live, true).await?;
                } else {
                    self.store.set_active(&row.id, true).await?;
                }
                Ok(format!("{what} Operation `{}`.", row.id))
            }
            Err(r) => Ok(r.to_string()),
        }
    }

    /// The status table of the issue's operation.
    pub async fn status(&self, repo: &str, issue: i64) -> Result<Option<String>, OpError> {
        let Some(row) = self.store.operation_on(repo, issue).await? else {
            return Ok(None);
        };
        let l = self.open(&row).await?;
        let live = l.lock().await;
        Ok(live.state.as_ref().map(|st| {
            report::github::as_comment_commands(&report::status_table(st, chrono::Utc::now()))
        }))
    }

    // ----- webhooks ----------------------------------------------------------

    /// A `workflow_run` webhook: a run of ours started or finished.
    pub async fn workflow_run(&self, payload: &serde_json::Value) -> Result<(), OpError> {
        let Some(run) = WorkflowRun::from(&payload["workflow_run"]) else {
            return Ok(());
        };
        let row = match self.store.run_by_id(run.id).await? {
            Some(r) => r,
            None => {
                // Not yet recorded (the dispatch's answer was lost): the name says.
                let Some(d) = run.title.split_whitespace().find(|w| w.contains('/')) else {
                    return Ok(());
                };
                match self.store.run(d).await? {
                    Some(r) => r,
                    None => return Ok(()),
                }
            }
        };
        let l = match self.get(&row.op) {
            Some(l) => l,
            None => match self.store.operation(&row.op).await? {
                Some(op) => self.open(&op).await?,
                None => return Ok(()),
            },
        };
        let mut live = l.lock().await;
        let span = tracing::info_span!("operation", op = %row.op);
        let _g = span.enter();
        self.acquire(&mut live).await?;
        let dispatch = DispatchId(row.dispatch.clone());
        self.store
            .put_run(&RunRow {
                run_id: Some(run.id),
                html_url: Some(run.html_url.clone()),
                completed: run.status == "completed",
                ..row.clone()
            })
            .await?;
        match payload["action"].as_str() {
            Some("completed") => {
                self.finish(
                    &mut live,
                    &dispatch,
                    run.conclusion.as_deref(),
                    &run.html_url,
                )
                .await?
            }
            Some("in_progress") => live.queue.push_back(Input::AgentStarted { dispatch }),
            _ => {}
        }
        self.drive(&mut live).await?;
        self.flush(&mut live, false).await
    }

    // ----- the loop ----------------------------------------------------------

    /// Decides one input; a refusal changes nothing and is returned.
    async fn submit(&self, live: &mut Live, input: Input) -> Result<Result<(), Refusal>, OpError> {
        let r = self.decide(live, input).await?;
        self.drive(live).await?;
        Ok(r)
    }

    async fn decide(&self, live: &mut Live, input: Input) -> Result<Result<(), Refusal>, OpError> {
        let d = match decide_mut(&mut live.state, input, chrono::Utc::now()) {
            Ok(d) => d,
            Err(r) => return Ok(Err(r)),
        };
        if d.events.is_empty() && d.effects.is_empty() {
            return Ok(Ok(()));
        }
        match self.store.append(&live.ctx.op, &d.events, &d.effects).await {
            Ok((seq, effects)) => {
                live.seq = seq;
                live.pending.extend(effects);
                Ok(Ok(()))
            }
            Err(e) => {
                // The log is the record: fall back to what it holds.
                if let Ok((events, pending)) = self.store.load_operation(&live.ctx.op).await {
                    live.state = OperationState::replay(&events);
                    live.pending = pending;
                    live.seq = self.store.last_seq(&live.ctx.op).await.unwrap_or(live.seq);
                }
                Err(e.into())
            }
        }
    }

    /// Carries out the outbox and decides queued inputs until both are empty
    /// (or only waiting effects are left).
    async fn drive(&self, live: &mut Live) -> Result<(), OpError> {
        loop {
            self.run_pending(live).await?;
            let Some(input) = live.queue.pop_front() else {
                return Ok(());
            };
            if let Err(r) = self.decide(live, input).await? {
                tracing::debug!(%r, "input refused");
            }
        }
    }

    async fn run_pending(&self, live: &mut Live) -> Result<(), OpError> {
        // A merge waiting for review holds back that unit's next dispatch, which
        // must branch from an integration branch holding the previous sprint.
        let mut held: HashSet<String> = HashSet::new();
        let mut i = 0;
        while i < live.pending.len() {
            let p = live.pending[i].clone();
            let unit = match &p.effect {
                Effect::Integrate { unit, .. } => Some(unit.clone()),
                Effect::Dispatch(o) => Some(o.unit.clone()),
                _ => None,
            };
            if unit.as_ref().is_some_and(|u| held.contains(u)) {
                i += 1;
                continue;
            }
            let key = (p.seq, p.idx);
            if live.waiting.contains(&key) && !live.retry_waiting {
                if let (Effect::Integrate { .. }, Some(u)) = (&p.effect, unit) {
                    held.insert(u);
                }
                i += 1;
                continue;
            }
            let span = tracing::info_span!("effect", key = %format!("{}.{}", p.seq, p.idx));
            let _g = span.enter();
            match self.carry_out(live, &p).await {
                Ok(Outcome::Done(inputs)) => {
                    live.waiting.remove(&key);
                    self.store.effect_done(&live.ctx.op, p.seq, p.idx).await?;
                    live.pending.remove(i);
                    live.queue.extend(inputs);
                }
                Ok(Outcome::Wait) => {
                    live.waiting.insert(key);
                    if let (Effect::Integrate { .. }, Some(u)) = (&p.effect, unit) {
                        held.insert(u);
                    }
                    i += 1;
                }
                Err(e) if e.is_transient() => {
                    // Left in order in the outbox; the timer tries again.
                    tracing::warn!(error = %e, "effect failed; will retry");
                    return Ok(());
                }
                Err(e) => {
                    tracing::error!(error = %e, "effect failed for good");
                    let repo = self.repo(&live.ctx);
                    let key = format!("error-{}.{}", p.seq, p.idx);
                    let text = format!("⚠️ Sprint Supervisor could not carry out a step of operation `{}` and moved on:\n\n```\n{e}\n```", live.ctx.op);
                    let marker = report::github::notice_marker(&live.ctx.op, &key);
                    let _ = repo
                        .comment_once(live.ctx.issue, Some(&live.ctx.started_at), &marker, &text)
                        .await;
                    if let Effect::Dispatch(o) = &p.effect {
                        live.queue.push_back(Input::DispatchFailed {
                            dispatch: o.dispatch.clone(),
                            error: e.to_string(),
                        });
                    }
                    self.store.effect_done(&live.ctx.op, p.seq, p.idx).await?;
                    live.pending.remove(i);
                }
            }
        }
        Ok(())
    }

    async fn carry_out(&self, live: &mut Live, p: &OpEffect) -> Result<Outcome, OpError> {
        let ctx = live.ctx.clone();
        let repo = self.repo(&ctx);
        let op = &ctx.op;
        match &p.effect {
            Effect::Dispatch(order) => self.dispatch(live, order).await,
            Effect::Cancel { dispatch, force } => {
                let run = match self.store.run(&dispatch.0).await?.and_then(|r| r.run_id) {
                    Some(id) => Some(id),
                    None => self.find_run(live, dispatch).await?.map(|r| r.id),
                };
                // A cancel first, always; a run that ignores it is force-cancelled
                // by reconciliation (`force` only shortens the grace).
                if let Some(id) = run {
                    repo.cancel(id, false).await?;
                    let grace = if *force {
                        self.timings.force_cancel_after / 2
                    } else {
                        self.timings.force_cancel_after
                    };
                    live.cancels
                        .insert(id, (Instant::now() + grace - self.timings.force_cancel_after, false));
                }
                Ok(Outcome::Done(vec![]))
            }
            Effect::Integrate { unit, sprint, .. } => {
                let branch = sprint_branch(op, &slug(unit), sprint.as_str());
                let Some(pr) = repo.pull_for(&branch).await? else {
                    return Err(GitHubError::Config(format!("no pull request from {branch}")).into());
                };
                if pr.merged {
                    return Ok(Outcome::Done(vec![]));
                }
                if ctx.merge == MergeMode::AfterReview && !repo.approved(pr.number).await? {
                    return Ok(Outcome::Wait);
                }
                if repo.merge(pr.number).await? {
                    Ok(Outcome::Done(vec![]))
                } else {
                    Err(GitHubError::Config(format!(
                        "pull request #{} of {unit} Sprint {sprint} no longer merges into {}; resolve the conflict on its branch and merge it by hand",
                        pr.number,
                        integration_branch(op)
                    ))
                    .into())
                }
            }
            Effect::RunGate { gate, .. } => {
                let head = repo
                    .branch_sha(&integration_branch(op))
                    .await?
                    .unwrap_or_default();
                let checks: Vec<_> = repo
                    .checks(&head)
                    .await?
                    .into_iter()
                    .filter(|c| c.app != "supervise")
                    .collect();
                let seen = *live.gate_seen.entry(*gate).or_insert_with(Instant::now);
                if checks.iter().any(|c| !c.completed) {
                    return Ok(Outcome::Wait);
                }
                if checks.is_empty() && seen.elapsed() < self.timings.ci_grace {
                    return Ok(Outcome::Wait);
                }
                let red: Vec<String> = checks
                    .iter()
                    .filter(|c| !c.green())
                    .map(|c| format!("{}: {}", c.name, c.conclusion.as_deref().unwrap_or("?")))
                    .collect();
                let short = &head[..head.len().min(7)];
                let output = if checks.is_empty() {
                    format!("no CI checks reported on {short}")
                } else if red.is_empty() {
                    format!("{} check(s) green on {short}", checks.len())
                } else {
                    format!("failing on {short}: {}", red.join(", "))
                };
                Ok(Outcome::Done(vec![Input::GateResult {
                    gate: *gate,
                    passed: red.is_empty(),
                    output,
                }]))
            }
            // Conditions are commands; the service never runs a repository's
            // commands, so a deferred sprint is re-dispatched to a runner instead.
            Effect::PollCondition { unit, sprint } => Ok(Outcome::Done(vec![Input::ConditionPolled {
                unit: unit.clone(),
                sprint: sprint.clone(),
                met: false,
                error: Some("deferred conditions are checked by the agent workflow on GitHub, not on the supervisor's server".into()),
            }])),
            Effect::Notify { kind, unit, text } => {
                let prefix = match kind {
                    NoticeKind::Blocked => "⛔ ",
                    NoticeKind::Completed => "✅ ",
                    NoticeKind::BudgetReached => "💰 ",
                    NoticeKind::Killed => "🛑 ",
                    _ => "",
                };
                let marker = report::github::notice_marker(op, &format!("{}.{}", p.seq, p.idx));
                let body = format!("{prefix}{}", report::github::as_comment_commands(text));
                repo.comment_once(ctx.issue, Some(&ctx.started_at), &marker, &body)
                    .await?;
                if let (NoticeKind::Blocked, Some(u)) = (kind, unit) {
                    let issues = self.store.unit_issues(op).await?;
                    if let Some(ui) = issues.iter().find(|i| &i.unit == u) {
                        repo.comment_once(ui.number, Some(&ctx.started_at), &marker, &body)
                            .await?;
                    }
                }
                Ok(Outcome::Done(vec![]))
            }
            Effect::PublishStatus => {
                live.dirty = true;
                Ok(Outcome::Done(vec![]))
            }
            Effect::FinalReport => {
                let Some(st) = live.state.clone() else {
                    return Ok(Outcome::Done(vec![]));
                };
                self.final_report(&ctx, &st, &format!("{}.{}", p.seq, p.idx))
                    .await?;
                Ok(Outcome::Done(vec![]))
            }
        }
    }

    /// Looks for a run carrying the dispatch id among the workflow's recent runs.
    async fn find_run(&self, live: &Live, d: &DispatchId) -> Result<Option<WorkflowRun>, OpError> {
        let since = live
            .state
            .as_ref()
            .and_then(|st| st.find_dispatch(d).map(|(u, s)| &st.units[u].sprints[s]))
            .and_then(|s| s.active.as_ref())
            .map(|a| a.dispatched_at - chrono::Duration::minutes(5))
            .unwrap_or_else(|| chrono::Utc::now() - chrono::Duration::days(1));
        let runs = self
            .repo(&live.ctx)
            .runs(
                &live.ctx.workflow,
                &since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            )
            .await?;
        Ok(runs.into_iter().find(|r| r.carries(&d.0)))
    }

    async fn dispatch(
        &self,
        live: &mut Live,
        order: &engine::DispatchOrder,
    ) -> Result<Outcome, OpError> {
        let ctx = live.ctx.clone();
        let repo = self.repo(&ctx);
        let d = &order.dispatch;
        // Never twice: a run that carries this id already is adopted.
        if self
            .store
            .run(&d.0)
            .await?
            .is_some_and(|r| r.run_id.is_some())
        {
            return Ok(Outcome::Done(vec![]));
        }
        if let Some(run) = self.find_run(live, d).await? {
            self.record_run(&ctx, d, run.id, &run.html_url, None)
                .await?;
            return Ok(Outcome::Done(vec![]));
        }
        let unit_slug = slug(&order.unit);
        let branch = sprint_branch(&ctx.op, &unit_slug, order.sprint.as_str());
        let integration = integration_branch(&ctx.op);
        let mut head = repo.branch_sha(&branch).await?;
        if head.is_none() {
            let base = repo.branch_sha(&integration).await?.ok_or_else(|| {
                GitHubError::Config(format!("the integration branch {integration} is gone"))
            })?;
            repo.create_branch(&branch, &base).await?;
            head = Some(base);
        }
        let prompt_file = prompt_path(&unit_slug, order.sprint.as_str());
        let committed = repo
            .put_file(
                &branch,
                &prompt_file,
                &order.prompt,
                &format!(
                    "supervise: prompt for {} Sprint {} (attempt {}, {})",
                    order.unit, order.sprint, order.attempt, order.model_id
                ),
            )
            .await?;
        let base_sha = committed.or(head);
        self.store
            .put_run(&RunRow {
                dispatch: d.0.clone(),
                op: ctx.op.clone(),
                base_sha: base_sha.clone(),
                ..Default::default()
            })
            .await?;
        if let Some(st) = &live.state {
            if let Some(unit) = st.plan.unit(&order.unit) {
                if let Some(sprint) = unit.sprints.iter().find(|s| s.id == order.sprint) {
                    let body = report::github::sprint_pr_body(&ctx.op, unit, sprint, &prompt_file);
                    let title = format!(
                        "{} — Sprint {}: {}",
                        order.unit, order.sprint, order.sprint_name
                    );
                    repo.ensure_pull(&branch, &integration, &title, &body)
                        .await?;
                }
            }
        }
        let inputs = json!({
            "dispatch_id": d.0,
            "plan": ctx.plan_path,
            "unit": order.unit,
            "directory": order.directory.as_deref().unwrap_or("."),
            "sprint": order.sprint.as_str(),
            "attempt": order.attempt.to_string(),
            "model": order.model_id,
            "max_turns": order.max_turns.to_string(),
            "prompt_file": prompt_file,
        });
        match repo.dispatch(&ctx.workflow, &branch, inputs).await {
            Ok(Some((id, url))) => {
                self.record_run(&ctx, d, id, &url, base_sha).await?;
                Ok(Outcome::Done(vec![]))
            }
            // An older GitHub without run details: the run is found by its name.
            Ok(None) => {
                if let Some(run) = self.find_run(live, d).await? {
                    self.record_run(&ctx, d, run.id, &run.html_url, None).await?;
                }
                Ok(Outcome::Done(vec![]))
            }
            Err(GitHubError::Http { status, body, .. }) if status == 404 || status == 422 => {
                Ok(Outcome::Done(vec![Input::DispatchFailed {
                    dispatch: d.clone(),
                    error: format!(
                        "GitHub refused to dispatch `.github/workflows/{}` ({status}): {body}. Add the agent workflow (see Sprint Supervisor's templates) or set `workflow:` in .github/supervise.yml",
                        ctx.workflow
                    ),
                }]))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn record_run(
        &self,
        ctx: &OpContext,
        d: &DispatchId,
        id: i64,
        url: &str,
        base: Option<String>,
    ) -> Result<(), OpError> {
        self.store
            .put_run(&RunRow {
                dispatch: d.0.clone(),
                op: ctx.op.clone(),
                run_id: Some(id),
                html_url: Some(url.to_string()),
                base_sha: base,
                completed: false,
            })
            .await?;
        Ok(())
    }

    /// Compares every dispatch in flight with its run on GitHub: a finished run
    /// whose webhook was missed is finished now.
    async fn reconcile(&self, live: &mut Live) -> Result<(), OpError> {
        let Some(st) = &live.state else { return Ok(()) };
        let active: Vec<DispatchId> = st
            .units
            .iter()
            .flat_map(|u| u.sprints.iter())
            .filter_map(|s| s.active.as_ref().map(|a| a.id.clone()))
            .collect();
        let dispatching: HashSet<String> = live
            .pending
            .iter()
            .filter_map(|p| match &p.effect {
                Effect::Dispatch(o) => Some(o.dispatch.0.clone()),
                _ => None,
            })
            .collect();
        let ctx = live.ctx.clone();
        let repo = self.repo(&ctx);
        for (id, (at, forced)) in live.cancels.clone() {
            match repo.run(id).await? {
                Some(r) if r.status != "completed" => {
                    if !forced && at.elapsed() >= self.timings.force_cancel_after {
                        tracing::warn!(run = id, "the run ignored its cancel; force-cancelling");
                        repo.cancel(id, true).await?;
                        live.cancels.insert(id, (at, true));
                    }
                }
                _ => {
                    live.cancels.remove(&id);
                }
            }
        }
        for d in active {
            if dispatching.contains(&d.0) {
                continue; // its dispatch is still in the outbox
            }
            let row = self.store.run(&d.0).await?;
            let run = match row.as_ref().and_then(|r| r.run_id) {
                Some(id) => repo.run(id).await?,
                None => self.find_run(live, &d).await?,
            };
            match run {
                Some(run) if run.status == "completed" => {
                    let url = run.html_url.clone();
                    self.record_run(&live.ctx, &d, run.id, &url, None).await?;
                    self.finish(live, &d, run.conclusion.as_deref(), &url)
                        .await?;
                }
                Some(_) => {}
                None => live.queue.push_back(Input::DispatchFailed {
                    dispatch: d.clone(),
                    error: "the workflow run for this dispatch cannot be found on GitHub".into(),
                }),
            }
        }
        Ok(())
    }

    /// Gathers the evidence of a finished run and hands it to the engine; then
    /// publishes the attempt's check run on the sprint's head.
    async fn finish(
        &self,
        live: &mut Live,
        d: &DispatchId,
        conclusion: Option<&str>,
        url: &str,
    ) -> Result<(), OpError> {
        let Some(st) = &live.state else { return Ok(()) };
        let Some((u, s)) = st.find_dispatch(d) else {
            return Ok(()); // already finished: a repeated webhook
        };
        let ctx = live.ctx.clone();
        let repo = self.repo(&ctx);
        let unit = st.plan.work_units[u].clone();
        let sprint = unit.sprints[s].clone();
        let active = st.units[u].sprints[s].active.clone();
        let branch = sprint_branch(&ctx.op, &slug(&unit.name), sprint.id.as_str());
        let Some(head) = repo.branch_sha(&branch).await? else {
            live.queue.push_back(Input::DispatchFailed {
                dispatch: d.clone(),
                error: format!("the sprint branch {branch} is gone"),
            });
            return Ok(());
        };
        // The repository's own CI on the head must have reported first.
        let checks = repo.checks(&head).await?;
        let ci: Vec<_> = checks.iter().filter(|c| c.app != "supervise").collect();
        if ci.iter().any(|c| !c.completed) {
            return Ok(()); // the next reconciliation looks again
        }
        // CI reports a little after a push: give it the grace before deciding
        // without it (a repository without CI then waits only this once).
        let first_seen = *live.ci_wait.entry(d.0.clone()).or_insert_with(Instant::now);
        if ci.is_empty() && first_seen.elapsed() < self.timings.ci_grace {
            return Ok(());
        }
        live.ci_wait.remove(&d.0);
        let ci_passed = (!ci.is_empty()).then(|| ci.iter().all(|c| c.green()));
        let recorded: Option<RunResult> = repo
            .file(&results_path(&d.0), Some(&head))
            .await?
            .and_then(|(t, _)| serde_json::from_str(&t).ok());
        let base = self.store.run(&d.0).await?.and_then(|r| r.base_sha);
        let commits = match &base {
            Some(b) => repo
                .compare(b, &head)
                .await?
                .into_iter()
                .filter(|(_, msg)| !msg.starts_with("supervise:"))
                .map(|(sha, _)| sha[..sha.len().min(7)].to_string())
                .collect(),
            None => Vec::new(),
        };
        let merge_conflict = match repo.pull_for(&branch).await? {
            Some(pr) if pr.mergeable == Some(false) => Some(format!(
                "pull request #{} does not merge cleanly into {}",
                pr.number,
                integration_branch(&ctx.op)
            )),
            _ => None,
        };
        let report = match recorded {
            Some(r) => AgentReport {
                exit_code: r.exit_code.or(conclusion_exit(conclusion)),
                output_tail: r.output_tail,
                turns_used: r.turns_used,
                evidence: Evidence {
                    commits,
                    uncommitted: vec![],
                    progress: r.progress,
                    criteria: r.criteria,
                    ci_passed,
                    merge_conflict,
                },
            },
            None => AgentReport {
                exit_code: conclusion_exit(conclusion).map(|c| c.max(1)),
                output_tail: format!(
                    "The workflow run ended `{}` without recording results (no `supervise verify --record` step ran). See {url}",
                    conclusion.unwrap_or("unknown")
                ),
                turns_used: None,
                evidence: Evidence {
                    commits,
                    ci_passed,
                    merge_conflict,
                    ..Default::default()
                },
            },
        };
        let input = Input::AgentFinished {
            dispatch: d.clone(),
            report: report.clone(),
        };
        if self.decide(live, input).await?.is_err() {
            return Ok(());
        }
        let verdict = live
            .state
            .as_ref()
            .map(|st| st.units[u].sprints[s].status());
        let (attempt, model) = active
            .map(|a| (a.attempt, a.model_id))
            .unwrap_or((0, String::new()));
        let (conclusion, title, summary) =
            report::github::sprint_check(&unit.name, &sprint, attempt, &model, &report, verdict);
        let check = json!({
            "name": format!("supervise: {} Sprint {}", unit.name, sprint.id),
            "head_sha": head,
            "status": "completed",
            "conclusion": conclusion,
            "external_id": d.0,
            "details_url": url,
            "output": { "title": title, "summary": summary },
        });
        if let Err(e) = repo.create_check(check).await {
            // The verdict is recorded; the check run is a report of it.
            tracing::warn!(error = %e, "could not publish the check run");
        }
        Ok(())
    }

    async fn final_report(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        key: &str,
    ) -> Result<(), OpError> {
        let repo = self.repo(ctx);
        let integration = integration_branch(&ctx.op);
        let summary = report::final_summary(st);
        let marker = report::github::notice_marker(&ctx.op, &format!("final-{key}"));
        repo.comment_once(ctx.issue, Some(&ctx.started_at), &marker, &summary)
            .await?;
        let now = chrono::Utc::now();
        let complete = report::complete_file_name(st);
        repo.put_file(
            &integration,
            &complete,
            &report::complete_md(st, now),
            &format!("supervise: {complete}"),
        )
        .await?;
        let no_logs = |_: &DispatchId| String::new();
        repo.put_file(
            &integration,
            "SUPERVISOR_STATE.md",
            &report::supervisor_state_md(st, &no_logs),
            "supervise: SUPERVISOR_STATE.md",
        )
        .await?;
        let body = format!(
            "Operation `{}` (#{}) is complete: every sprint was verified and merged here.\n\n{summary}\n\nSee `{complete}` for the final verification and cadence analysis.",
            ctx.op, ctx.issue
        );
        repo.ensure_pull(
            &integration,
            &ctx.default_branch,
            &format!("Sprint Supervisor: {}", st.name),
            &body,
        )
        .await?;
        Ok(())
    }

    /// Brings GitHub's view up to date: the status comment (at most once per
    /// interval unless `now`), the units' sub-issues, closed and labelled.
    async fn flush(&self, live: &mut Live, now: bool) -> Result<(), OpError> {
        let Some(st) = live.state.clone() else {
            return Ok(());
        };
        if !live.dirty {
            return Ok(());
        }
        if !now
            && live
                .last_flush
                .is_some_and(|t| t.elapsed() < self.timings.status_interval)
        {
            return Ok(());
        }
        let ctx = live.ctx.clone();
        let repo = self.repo(&ctx);
        self.sync_unit_issues(&ctx, &st).await?;
        let runs: HashMap<String, String> = self
            .store
            .runs_of(&ctx.op)
            .await?
            .into_iter()
            .filter_map(|r| r.html_url.map(|u| (r.dispatch, u)))
            .collect();
        let link = |d: &DispatchId| runs.get(&d.0).cloned();
        let text = report::github::status_comment(&st, chrono::Utc::now(), &link);
        if text != live.last_text {
            let marker = report::github::status_marker(&ctx.op);
            let id = match live.status_comment {
                Some(id) => Some(id),
                None => repo
                    .comments(ctx.issue, Some(&ctx.started_at))
                    .await?
                    .into_iter()
                    .find(|(_, b)| b.contains(&marker))
                    .map(|(id, _)| id),
            };
            let id = match id {
                Some(id) => {
                    repo.edit_comment(id, &text).await?;
                    id
                }
                None => repo.comment(ctx.issue, &text).await?,
            };
            if live.status_comment != Some(id) {
                self.store.set_status_comment(&ctx.op, id).await?;
                live.status_comment = Some(id);
            }
            live.last_text = text;
        }
        live.dirty = false;
        live.last_flush = Some(Instant::now());
        if st.status == OverallStatus::Completed && live.pending.is_empty() {
            self.store.set_active(&ctx.op, false).await?;
        }
        Ok(())
    }

    async fn sync_unit_issues(&self, ctx: &OpContext, st: &OperationState) -> Result<(), OpError> {
        let repo = self.repo(ctx);
        let mut known = self.store.unit_issues(&ctx.op).await?;
        let label = format!("supervise:{}", ctx.op);
        if known.len() < st.units.len() {
            let existing = repo.issues_labelled(&label).await?;
            for u in &st.plan.work_units {
                if known.iter().any(|k| k.unit == u.name) {
                    continue;
                }
                let marker = report::github::unit_marker(&ctx.op, &u.name);
                let (number, id) = match existing.iter().find(|(_, _, b)| b.contains(&marker)) {
                    Some((n, id, _)) => (*n, *id),
                    None => {
                        repo.create_issue(
                            &format!("{} — {}", u.name, st.name),
                            &report::github::unit_issue_body(&ctx.op, u, ctx.issue),
                            &["supervise", &label],
                        )
                        .await?
                    }
                };
                repo.add_sub_issue(ctx.issue, id).await?;
                let ui = UnitIssue {
                    unit: u.name.clone(),
                    number,
                    issue_id: id,
                    flags: "none".into(),
                };
                self.store.put_unit_issue(&ctx.op, &ui).await?;
                known.push(ui);
            }
        }
        for ui in known {
            let Some(unit) = st.units.iter().find(|u| u.name == ui.unit) else {
                continue;
            };
            let want = match unit.status {
                UnitStatus::Completed => "closed",
                UnitStatus::Blocked => "blocked",
                _ => continue,
            };
            if ui.flags == want || ui.flags == "closed" {
                continue;
            }
            if want == "closed" {
                repo.close_issue(ui.number).await?;
            } else {
                repo.add_labels(ui.number, &["blocked"]).await?;
            }
            self.store
                .put_unit_issue(
                    &ctx.op,
                    &UnitIssue {
                        flags: want.into(),
                        ..ui
                    },
                )
                .await?;
        }
        Ok(())
    }
}
