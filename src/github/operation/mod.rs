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

use super::repo::{Check, Repo, WorkflowRun};
use super::{GitHub, GitHubError};
use crate::contract::{integration_branch, prompt_path, results_path, sprint_branch, RunResult};
use crate::engine::{
    self, decide_mut, AgentReport, DispatchId, Effect, Evidence, Input, NoticeKind, OperationId,
    OperationState, OverallStatus, Refusal, UnitStatus,
};
use crate::report;
use crate::settings::{self, MergeMode, Settings};
use crate::store::sql::{OpEffect, OperationRow, RunRow, SqlError, SqlStore, UnitIssue};
use crate::sync::LockExt;
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
    /// Heads waiting for the repository's CI to report at all (a gate's
    /// integration head, a finished run's sprint head): since when.
    ci_first_seen: HashMap<String, Instant>,
    /// Runs asked to cancel: when a force-cancel is due, and whether it was sent.
    cancels: HashMap<i64, (Instant, bool)>,
    /// Outbox entries waiting on GitHub (CI, a review): looked at again at
    /// reconciliation, not on every tick, so waiting costs few requests.
    waiting: HashSet<(i64, i64)>,
    /// Set during reconciliation: waiting entries are tried again.
    retry_waiting: bool,
    /// The last decision this replica knows of: if the log has moved on (another
    /// replica acted), the operation is reloaded before acting.
    seq: i64,
}

impl Live {
    /// The unit's slug in this operation's branch names.
    fn unit_slug(&self, unit: &str) -> String {
        self.state
            .as_ref()
            .map_or_else(|| crate::text::slug(unit), |st| st.unit_slug(unit))
    }
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

mod commands;
mod effects;
mod publish;
mod runs;

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
        self.live.locked().get(op).cloned()
    }

    /// Loads an operation from the store (replaying its log) unless it is loaded.
    async fn open(&self, row: &OperationRow) -> Result<Arc<tokio::sync::Mutex<Live>>, OpError> {
        if let Some(l) = self.get(&row.id) {
            return Ok(l);
        }
        let ctx: OpContext = serde_json::from_str(&row.context).map_err(SqlError::from)?;
        let loaded = self.store.load_operation(&row.id).await?;
        let live = Arc::new(tokio::sync::Mutex::new(Live {
            seq: loaded.seq,
            ctx,
            state: OperationState::replay(&loaded.events),
            pending: loaded.pending,
            queue: VecDeque::new(),
            status_comment: row.status_comment,
            dirty: true,
            last_flush: None,
            last_text: String::new(),
            last_reconcile: None,
            ci_first_seen: HashMap::new(),
            cancels: HashMap::new(),
            waiting: HashSet::new(),
            retry_waiting: true,
        }));
        Ok(self
            .live
            .locked()
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
                let all: Vec<_> = ops.live.locked().values().cloned().collect();
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
        let all: Vec<_> = self.live.locked().values().cloned().collect();
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
        if self.store.last_seq(&live.ctx.op).await? != live.seq {
            self.reload(live).await?;
            live.dirty = true;
        }
        Ok(())
    }

    /// Falls back to what the log holds: state, outbox and sequence number.
    async fn reload(&self, live: &mut Live) -> Result<(), OpError> {
        let loaded = self.store.load_operation(&live.ctx.op).await?;
        live.state = OperationState::replay(&loaded.events);
        live.pending = loaded.pending;
        live.seq = loaded.seq;
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
                if let Err(again) = self.reload(live).await {
                    tracing::warn!(error = %again, "cannot reload the operation either");
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
            // What waits on GitHub is asked again at reconciliation only.
            let outcome = if live.waiting.contains(&key) && !live.retry_waiting {
                Ok(Outcome::Wait)
            } else {
                let span = tracing::info_span!("effect", op = %live.ctx.op, key = %format!("{}.{}", p.seq, p.idx));
                tracing::Instrument::instrument(self.carry_out(live, &p), span).await
            };
            match outcome {
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
}
