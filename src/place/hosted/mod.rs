//! Operations on GitHub: the place where agents run in hosted Actions runners
//! (hence its name, beside [`local`](super::local); `github` is the adapter
//! that talks to GitHub's API). Each
//! operation is a [`Driver`] with the SQL store as its outbox and
//! [`GitHubExecutor`] carrying its effects out; this module adds what is
//! particular to GitHub — leases between replicas, webhooks and reconciliation
//! with what GitHub says (ground truth), and the status comment. A restart
//! replays the log, carries out what was left, and reconciles every run in
//! flight.
//!
//! Idempotency keys: a dispatch id is in its run's name, so a lost answer is
//! resolved by finding the run, never by dispatching twice; branches, pull
//! requests, sub-issues and comments are looked for (by name or hidden marker)
//! before they are made.

use crate::contract::integration_branch;
use crate::drive::{Decided, Driver, Entry, Executor, Failure, Loaded, Outbox, Outcome};
use crate::engine::{self, Effect, Input, OperationState, OverallStatus};
use crate::github::repo::Repo;
use crate::github::{GitHub, GitHubError};
use crate::place::views::Views;
use crate::report;
use crate::settings::MergeMode;
use crate::store::sql::{OperationRow, RunRow, SqlError, SqlOutbox, SqlStore};
use crate::sync::LockExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which work without a plan a command asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowKind {
    /// Seed 002's phases, in the scope named (or detected).
    Solve(Option<crate::engine::workflow::Scope>),
    /// Seed 004's manager loop.
    Manage,
}

impl WorkflowKind {
    /// The command word that starts it.
    pub fn word(self) -> &'static str {
        match self {
            WorkflowKind::Solve(_) => "solve",
            WorkflowKind::Manage => "manage",
        }
    }
}

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
    /// Handling the event panicked (caught where it ran); it is tried again.
    #[error("an internal error (panic) interrupted the handling of this event")]
    Panicked,
}

impl OpError {
    pub fn is_transient(&self) -> bool {
        match self {
            OpError::GitHub(e) => e.is_transient(),
            OpError::Store(_) | OpError::Busy(_) | OpError::Panicked => true,
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
    /// `merge:` as the settings at start said it; `None` when they did not
    /// (immediately, but after review for a sprint on the agent's word).
    #[serde(default)]
    pub merge: Option<MergeMode>,
    /// Whom a notice a person must act on mentions: whoever started the
    /// operation, when the settings at start said `mention: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mention: Option<String>,
    /// `required_approvals:` as the settings at start said it (1 unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_approvals: Option<std::num::NonZeroU32>,
    /// The repository's daily cap (`daily_budget` in its settings at start).
    #[serde(default)]
    pub daily_budget: Option<u64>,
    /// The same in dollars (`daily_budget_usd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<crate::engine::usage::Usd>,
    /// When `start` was said (RFC 3339): the lower bound of comment look-ups.
    pub started_at: String,
    /// The commit the operation started from, whose files the start's
    /// check read: the look before a dispatch on that head would read them
    /// again for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_head: Option<String>,
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

/// One operation in memory: the driver (state, outbox entries, queued inputs),
/// its log, and what the GitHub place keeps beside them.
struct Live {
    driver: Driver,
    outbox: SqlOutbox,
    place: GhPlace,
}

impl Live {
    /// Whether nothing can happen to the operation without a person or a
    /// webhook: it is over (completed, stopped, killed or blocked), no agent
    /// is in flight, nothing waits in the outbox or on GitHub, and GitHub
    /// shows its latest state.
    fn is_idle(&self) -> bool {
        let Some(st) = &self.driver.state else {
            return self.driver.pending.is_empty() && !self.place.status.dirty();
        };
        let over = matches!(
            st.status,
            OverallStatus::Completed
                | OverallStatus::Stopped
                | OverallStatus::Killed
                | OverallStatus::Blocked
        );
        let none_in_flight = st
            .units
            .iter()
            .flat_map(|u| u.sprints.iter())
            .all(|s| s.active.is_none());
        over && none_in_flight
            && self.driver.pending.is_empty()
            && self.driver.queue.is_empty()
            && !self.place.status.dirty()
            && self.place.runs.is_quiet()
    }
}

/// What an operation on GitHub keeps besides its state: its fixed context,
/// its lease, and the parts that carry its effects out, each owning what it
/// remembers between deliveries.
struct GhPlace {
    ctx: OpContext,
    /// Until when this replica surely holds the operation's lease (by its
    /// own clock, taken before the store was asked, so never later than the
    /// store's `lease_until`).
    held_until: Option<Instant>,
    /// Which outbox entries may have been carried out before (`effects.rs`).
    carried: effects::Carried,
    /// The sticky status comment (`publish.rs`).
    status: publish::StatusComment,
    /// Runs in flight: cancels, CI waits, pull requests (`runs.rs`).
    runs: runs::RunsInFlight,
    /// The integration branch as this replica's merges left it (`merges.rs`).
    merges: merges::Merges,
    /// Reviews answered and fix rounds replied to (`reviews.rs`).
    reviews: reviews::Reviews,
}

impl GhPlace {
    /// An operation's place as loading it from the store leaves it: the log
    /// read up to `loaded_seq`, the status comment known by its id if one
    /// was made, everything else to be read from GitHub again.
    fn loaded(ctx: OpContext, status_comment: Option<i64>, loaded_seq: i64) -> GhPlace {
        GhPlace {
            ctx,
            held_until: None,
            carried: effects::Carried::new(loaded_seq),
            status: publish::StatusComment::new(status_comment),
            runs: runs::RunsInFlight::default(),
            merges: merges::Merges::default(),
            reviews: reviews::Reviews::default(),
        }
    }

    /// Another replica acted on the operation since this one last did: its
    /// log is caught up to `seq`, and what this replica remembered of
    /// merges and CI waits may be stale.
    fn caught_up(&mut self, seq: i64) {
        self.carried = effects::Carried::new(seq);
        self.status.touch();
        self.merges.forget_head();
        self.runs.awaiting_ci.clear();
    }
}

impl Failure for OpError {
    fn is_transient(&self) -> bool {
        OpError::is_transient(self)
    }
}

/// Caps above one operation, set by whoever runs the service (never by a
/// repository, which could raise them): see `store::sql::spend`.
#[derive(Debug, Clone, Copy)]
pub struct InstallationLimits {
    /// What an installation's operations may dispatch in any 24 hours.
    pub daily_budget: Option<u64>,
    /// Agents in flight at once across an installation's operations.
    pub agents: Option<u64>,
    /// What a dispatch of each tier (haiku, sonnet, opus) costs against
    /// these caps: the operator's prices, whatever a repository's settings say.
    pub costs: [u64; 3],
    /// What an installation's operations may spend in any 24 hours, in
    /// dollars: each dispatch counted at what its agent reported, and at
    /// what it is expected to cost until then.
    pub daily_budget_usd: Option<crate::engine::usage::Usd>,
    /// The least a dispatch of each tier is expected to cost against the
    /// dollar caps: the operator's floor, which no repository's `prices:`
    /// or history lowers (they may raise it).
    pub attempt_usd: [crate::engine::usage::Usd; 3],
}

impl InstallationLimits {
    /// What a dispatch on `tier` is held to against the dollar caps: the
    /// operator's floor, or more when the operation expects more.
    pub fn expected_usd(
        &self,
        tier: crate::engine::ModelTier,
        st: Option<&crate::engine::OperationState>,
    ) -> crate::engine::usage::Usd {
        let floor = self.attempt_usd[tier as usize];
        st.map_or(floor, |st| st.expected_dollars(tier).max(floor))
    }
}

impl Default for InstallationLimits {
    fn default() -> Self {
        InstallationLimits {
            daily_budget: None,
            agents: None,
            costs: crate::engine::EngineConfig::default().costs,
            daily_budget_usd: None,
            attempt_usd: crate::engine::DEFAULT_ATTEMPT_USD,
        }
    }
}

impl InstallationLimits {
    /// What one dispatch of `tier` is charged against the caps.
    pub fn cost(&self, tier: crate::engine::ModelTier) -> u64 {
        self.costs[tier as usize]
    }
}

pub struct Operations {
    /// This replica's name in operation leases.
    owner: String,
    gh: Arc<GitHub>,
    store: SqlStore,
    timings: OpTimings,
    limits: InstallationLimits,
    /// The loaded operations by id.
    live: Mutex<HashMap<String, LoadedOp>>,
    /// What the web view shows of them.
    views: Arc<Views>,
    /// Where notices go besides the issue (the operator's receiver).
    notifier: crate::notify::Notifier,
}

/// A loaded operation, and its repository, which can be read without the
/// operation's lock: an event for one repository never waits on an
/// operation of another (one waiting out a rate limit, say).
#[derive(Clone)]
struct LoadedOp {
    repo: String,
    live: Arc<tokio::sync::Mutex<Live>>,
}

/// Where a command was said.
pub struct Origin {
    pub installation: u64,
    pub repo: String,
    /// The issue of the operation the command is about: where it was said,
    /// or, for a command on an operation's pull request, the operation's.
    pub issue: i64,
    /// Where the command was said, and so where the reply goes.
    pub said_on: i64,
    pub comment: i64,
    /// The command comment's time: replies and notices come after it.
    pub created_at: Option<String>,
    /// Who said the command.
    pub author: String,
    /// The repository's settings, read once for the delivery: who may say
    /// what, and what a start captures, come from the same reading.
    settings: tokio::sync::OnceCell<Result<crate::settings::FileSettings, String>>,
}

impl Origin {
    pub fn new(
        installation: u64,
        repo: String,
        issue: i64,
        comment: i64,
        created_at: Option<String>,
        author: String,
    ) -> Origin {
        Origin {
            installation,
            repo,
            issue,
            said_on: issue,
            comment,
            created_at,
            author,
            settings: Default::default(),
        }
    }

    /// `.github/supervise.yml` on the default branch (defaults without one),
    /// or why it is unusable; read from GitHub the first time it is asked for.
    pub async fn settings(
        &self,
        gh: &GitHub,
    ) -> Result<&Result<crate::settings::FileSettings, String>, GitHubError> {
        self.settings
            .get_or_try_init(|| async { repo_settings(&self.repo(gh), None).await })
            .await
    }

    /// The repository the command was said in.
    pub fn repo<'a>(&'a self, gh: &'a GitHub) -> Repo<'a> {
        Repo {
            gh,
            installation: self.installation,
            name: &self.repo,
        }
    }
}

/// Whether `login` may write to the repository (write, maintain or admin,
/// custom roles as GitHub maps them): what an approval needs to count, as
/// commands are authorised. A role that cannot be read counts as no.
pub(crate) async fn may_write(repo: &Repo<'_>, login: &str) -> Result<bool, GitHubError> {
    use crate::commands::auth::Permission;
    Ok(repo
        .role(login)
        .await?
        .is_ok_and(|role| Permission::parse(&role) >= Permission::Write))
}

/// The repository's settings file at `rev` (the default branch when `None`):
/// its settings (the defaults when there is none), or why it cannot be used.
/// The one reader of the file on GitHub; each caller decides what an
/// unusable file means for it.
pub(crate) async fn repo_settings(
    repo: &Repo<'_>,
    rev: Option<&str>,
) -> Result<Result<crate::settings::FileSettings, String>, GitHubError> {
    use crate::settings::{parse, FileSettings, REPO_FILE};
    match repo.file(REPO_FILE, rev).await {
        Ok(None) => Ok(Ok(FileSettings::default())),
        Ok(Some((text, _))) => Ok(parse(&text, REPO_FILE)),
        Err(GitHubError::Http {
            status: 422, body, ..
        }) => Ok(Err(format!("{REPO_FILE}: {body}"))),
        Err(e) => Err(e),
    }
}

pub mod doctor;
mod effects;
mod gate;
pub mod handle;
pub mod handoff;
mod head;
mod merges;
mod publish;
mod reviews;
mod runs;
pub mod starter;
pub mod throttle;
mod told;

impl Operations {
    /// `owner` names this replica (a restarted replica with the same name takes
    /// its operations back at once; another waits for the lease to expire).
    pub fn new(
        owner: String,
        gh: Arc<GitHub>,
        store: SqlStore,
        timings: OpTimings,
        limits: InstallationLimits,
        notifier: crate::notify::Notifier,
    ) -> Arc<Operations> {
        Arc::new(Operations {
            owner,
            gh,
            store,
            timings,
            limits,
            live: Mutex::new(HashMap::new()),
            views: Views::new(),
            notifier,
        })
    }

    /// The operations as the web view shows them.
    pub fn views(&self) -> Arc<Views> {
        self.views.clone()
    }

    /// Shows the operation's latest state to watchers.
    fn show(&self, live: &Live) {
        if let Some(st) = &live.driver.state {
            let ctx = &live.place.ctx;
            self.views.publish(
                st,
                &crate::report::web::Origin {
                    repo: Some(ctx.repo.clone()),
                    issue: Some(ctx.issue),
                    web: None,
                    runs: Default::default(),
                },
            );
        }
    }

    fn repo<'a>(&'a self, ctx: &'a OpContext) -> Repo<'a> {
        Repo {
            gh: &self.gh,
            installation: ctx.installation,
            name: &ctx.repo,
        }
    }

    fn get(&self, op: &str) -> Option<Arc<tokio::sync::Mutex<Live>>> {
        self.live.locked().get(op).map(|l| l.live.clone())
    }

    /// Loads an operation from the store (replaying its log) unless it is loaded.
    async fn open(&self, row: &OperationRow) -> Result<Arc<tokio::sync::Mutex<Live>>, OpError> {
        if let Some(l) = self.get(&row.id) {
            return Ok(l);
        }
        let ctx: OpContext = serde_json::from_str(&row.context).map_err(SqlError::from)?;
        let loaded = self.store.load_operation(&row.id).await?;
        let live = Arc::new(tokio::sync::Mutex::new(Live {
            driver: Driver::new(Loaded {
                state: OperationState::replay(&loaded.events),
                events: loaded.events.len(),
                pending: loaded.pending,
            }),
            outbox: SqlOutbox::new(self.store.clone(), row.id.clone(), loaded.seq),
            place: GhPlace::loaded(ctx, row.status_comment, loaded.seq),
        }));
        if let Ok(l) = live.try_lock() {
            self.show(&l);
        }
        Ok(self
            .live
            .locked()
            .entry(row.id.clone())
            .or_insert(LoadedOp {
                repo: row.repo.clone(),
                live,
            })
            .live
            .clone())
    }

    /// Lets an idle operation go from memory, unless someone besides its
    /// caller (who holds its lock) and the map holds it: a handler about to
    /// act on it takes it from the map under the same lock, so it is never
    /// let go between that handler's look and its act.
    fn evict(&self, op: &str) {
        let mut map = self.live.locked();
        if map.get(op).is_some_and(|l| Arc::strong_count(&l.live) <= 2) {
            map.remove(op);
            tracing::debug!(op, "idle: let go from memory");
        }
        metrics::gauge!("supervise_operations_loaded").set(map.len() as f64);
    }

    /// How many operations are in memory now.
    pub fn loaded(&self) -> usize {
        self.live.locked().len()
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
            let mut looked = Instant::now();
            loop {
                tokio::time::sleep(ops.timings.tick).await;
                // Operations whose owner let its lease lapse are taken over
                // here, not when a webhook for them happens to arrive: the
                // webhooks of runs that ended while the owner was dead went
                // to it, and are lost.
                if looked.elapsed() >= ops.timings.lease / 4 {
                    looked = Instant::now();
                    if let Err(e) = ops.adopt_lapsed().await {
                        tracing::warn!(error = %e, "cannot look for lapsed operations; will retry");
                    }
                }
                let all: Vec<_> = ops.live.locked().values().map(|l| l.live.clone()).collect();
                for l in all {
                    // Each operation on its own task: one waiting out a rate limit
                    // never holds up the others. A busy one is ticked next time.
                    let Ok(mut live) = l.try_lock_owned() else {
                        continue;
                    };
                    let ops = ops.clone();
                    tokio::spawn(async move {
                        let span = tracing::info_span!("operation", op = %live.place.ctx.op);
                        let traced_op = live.place.ctx.op.to_string();
                        if let Err(e) = crate::otlp::in_operation(
                            &traced_op,
                            tracing::Instrument::instrument(ops.tick(&mut live), span),
                        )
                        .await
                        {
                            tracing::warn!(error = %e, "operation tick failed; will retry");
                        }
                    });
                }
            }
        });
    }

    /// Loads the active operations whose lease another replica let lapse;
    /// the next tick takes the lease and catches up with their log.
    async fn adopt_lapsed(&self) -> Result<(), OpError> {
        for row in self.store.lapsed_operations(&self.owner).await? {
            if self.get(&row.id).is_none() {
                tracing::info!(op = %row.id, "its owner's lease lapsed: taking it over");
                self.open(&row).await?;
            }
        }
        Ok(())
    }

    /// One pass over every loaded operation, as the GitHub Action makes per
    /// event: tick, reconcile with GitHub, retry what waits, publish the status.
    pub async fn run_once(&self) -> Result<(), OpError> {
        let all: Vec<_> = self
            .live
            .locked()
            .values()
            .map(|l| l.live.clone())
            .collect();
        for l in all {
            let mut live = l.lock().await;
            live.place.runs.reconcile_now();
            live.place.status.touch();
            self.tick(&mut live).await?;
            self.flush(&mut live, true).await?;
        }
        Ok(())
    }

    /// Takes the operation's lease, catching up with the log if another replica
    /// acted since this one last did.
    ///
    /// A lease with more than three quarters of its time left is not
    /// renewed: while this replica holds it no other can act on the
    /// operation, so there is no log to catch up with either. Renewing it on
    /// every tick was two statements an operation a tick — at 1,000
    /// operations, most of the idle service's CPU (the scale bench's
    /// profile). Three quarters, not a half: the work that follows may wait
    /// on GitHub, and a wait as common as a secondary rate limit's
    /// `Retry-After: 60` must end well inside the lease it started under
    /// (90 s of the default 120 s are always left).
    async fn acquire(&self, live: &mut Live) -> Result<(), OpError> {
        let asked = Instant::now();
        if live
            .place
            .held_until
            .is_some_and(|until| until > asked + self.timings.lease * 3 / 4)
        {
            return Ok(());
        }
        live.place.held_until = None;
        if !self
            .store
            .lease_operation(&live.place.ctx.op, &self.owner, self.timings.lease)
            .await?
        {
            return Err(OpError::Busy(live.place.ctx.op.clone()));
        }
        live.place.held_until = Some(asked + self.timings.lease);
        if self.store.last_seq(&live.place.ctx.op).await? != live.outbox.seq {
            let loaded = live.outbox.load().await?;
            live.driver.reload(loaded);
            // Another replica acted: it may have merged, or verified what
            // waited for CI here, since.
            live.place.caught_up(live.outbox.seq);
        }
        Ok(())
    }

    /// Before each effect: whether the operation's lease still holds for
    /// it. The work since [`Operations::acquire`] may have waited on GitHub
    /// (a call waits out a pause of up to a quarter of the lease; a drive
    /// makes several), and the timer does not renew the lease of an
    /// operation busy with a delivery. With less than a quarter left the
    /// lease is renewed; once it has run out, another replica may have
    /// taken the operation and acted, so nothing more is carried out here —
    /// the effect waits in the outbox, and the next [`Operations::acquire`]
    /// takes the lease again and first catches up with the log.
    async fn still_held(&self, place: &mut GhPlace) -> Result<(), OpError> {
        let now = Instant::now();
        match place.held_until {
            Some(until) if until > now + self.timings.lease / 4 => return Ok(()),
            Some(until) if until > now => {
                let renewed = self
                    .store
                    .lease_operation(&place.ctx.op, &self.owner, self.timings.lease)
                    .await?;
                if renewed {
                    place.held_until = Some(now + self.timings.lease);
                    return Ok(());
                }
            }
            _ => {}
        }
        place.held_until = None;
        Err(OpError::Busy(place.ctx.op.clone()))
    }

    async fn tick(&self, live: &mut Live) -> Result<(), OpError> {
        // Nothing can happen to an idle operation without a person or a
        // webhook, and either loads it again from the store: it leaves
        // memory, so the service's work and size follow the operations in
        // flight, not every operation it ever ran.
        if live.is_idle() {
            if live.place.held_until.take().is_some() {
                self.store
                    .release_operation(&live.place.ctx.op, &self.owner)
                    .await?;
            }
            self.evict(&live.place.ctx.op);
            return Ok(());
        }
        match self.acquire(live).await {
            Err(OpError::Busy(_)) => return Ok(()),
            r => r?,
        }
        // Slowing down (or back up) is said at once, not a minute later.
        let slowed = self.gh.is_short(live.place.ctx.installation);
        let announce = live.place.status.slowed(slowed);
        live.driver.queue.push_back(Input::Tick);
        self.drive(live).await?;
        let every = self.reconcile_every(live);
        if live.place.runs.reconcile_due(every) {
            self.reconcile(live).await?;
            self.drive_with(live, true).await?;
        }
        self.flush(live, announce).await
    }

    /// Decides one input and carries out what follows; a refusal changes
    /// nothing and is returned.
    async fn submit(&self, live: &mut Live, input: Input) -> Result<Decided, OpError> {
        let (driver, outbox, mut exec) = self.split(live);
        Ok(driver.submit(outbox, &mut exec, input).await?)
    }

    /// Decides one input and records it, without carrying anything out yet.
    async fn decide(&self, live: &mut Live, input: Input) -> Result<Decided, OpError> {
        Ok(live.driver.decide(&mut live.outbox, input).await?)
    }

    /// Carries out the outbox and decides queued inputs until both are empty
    /// (or only effects waiting on GitHub are left).
    async fn drive(&self, live: &mut Live) -> Result<(), OpError> {
        self.drive_with(live, false).await
    }

    /// `retry_waiting`: effects waiting on GitHub (CI, a review) are asked
    /// again — at reconciliation only, so waiting costs few requests.
    async fn drive_with(&self, live: &mut Live, retry_waiting: bool) -> Result<(), OpError> {
        let (driver, outbox, mut exec) = self.split(live);
        let driven = driver.drive(outbox, &mut exec, retry_waiting).await;
        self.show(live);
        Ok(driven?)
    }

    /// The operation's driver and outbox, and an executor over its place.
    fn split<'a>(
        &'a self,
        live: &'a mut Live,
    ) -> (&'a mut Driver, &'a mut SqlOutbox, GitHubExecutor<'a>) {
        let Live {
            driver,
            outbox,
            place,
            ..
        } = live;
        (driver, outbox, GitHubExecutor { ops: self, place })
    }
}

/// Carries an operation's effects out on GitHub (see `effects.rs`).
pub(super) struct GitHubExecutor<'a> {
    ops: &'a Operations,
    place: &'a mut GhPlace,
}

impl Executor for GitHubExecutor<'_> {
    type Error = OpError;

    async fn carry_out(
        &mut self,
        state: Option<&OperationState>,
        entry: &Entry,
    ) -> Result<Outcome, OpError> {
        let span = tracing::info_span!("operation", op = %self.place.ctx.op);
        let traced_op = self.place.ctx.op.to_string();
        self.ops.still_held(self.place).await?;
        crate::otlp::in_operation(
            &traced_op,
            tracing::Instrument::instrument(self.effect(state, entry), span),
        )
        .await
    }

    /// Said on the operation's issue; a merge that needs a person is not, as
    /// the BLOCKED notice that follows says it with what to do.
    async fn failed(&mut self, entry: &Entry, error: &OpError) {
        if matches!(entry.effect, Effect::Integrate { .. }) {
            return;
        }
        let ctx = &self.place.ctx;
        let text = format!("⚠️ Sprint Supervisor could not carry out a step of operation `{}` and moved on:\n\n```\n{error}\n```", ctx.op);
        let marker = report::posts::notice_marker(&ctx.op, &format!("error-{}", entry.key));
        let _ = self
            .ops
            .repo(ctx)
            .comment_once(ctx.issue, Some(&ctx.started_at), &marker, &text)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::NoticeKind;
    use secrecy::SecretString;

    /// One operation in a store of its own, opened by a replica named
    /// `here` (nothing listens at the GitHub address: no request is made).
    async fn one_operation(lease: Duration) -> (Arc<Operations>, Arc<tokio::sync::Mutex<Live>>) {
        let store = SqlStore::connect("sqlite::memory:").await.unwrap();
        let key = SecretString::from(include_str!("../../../tests/fixtures/app/test-app-key.pem"));
        let gh = Arc::new(GitHub::new("http://127.0.0.1:9", 1, &key).unwrap());
        let timings = OpTimings {
            lease,
            ..OpTimings::default()
        };
        let ops = Operations::new(
            "here".into(),
            gh,
            store.clone(),
            timings,
            Default::default(),
            Default::default(),
        );
        let ctx = OpContext {
            op: "op".into(),
            repo: "acme/shop".into(),
            issue: 1,
            installation: 1,
            default_branch: "main".into(),
            plan_path: "EXECUTION_PLAN.md".into(),
            workflow: "supervise-agent.yml".into(),
            merge: None,
            mention: None,
            required_approvals: None,
            daily_budget: None,
            daily_budget_usd: None,
            started_at: "2026-11-27T00:00:00Z".into(),
            start_head: None,
        };
        let row = OperationRow {
            id: "op".into(),
            repo: ctx.repo.clone(),
            issue: 1,
            installation: 1,
            active: true,
            status_comment: None,
            context: serde_json::to_string(&ctx).unwrap(),
        };
        store.create_operation(&row).await.unwrap();
        let live = ops.open(&row).await.unwrap();
        (ops, live)
    }

    /// An operation whose owner let its lease lapse, never loaded here (no
    /// webhook for it came to this replica), is loaded by the timer's look
    /// and then taken over; one another owner holds, or this one, is not.
    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_without_a_webhook() {
        let lease = Duration::from_millis(50);
        let (ops, _live) = one_operation(lease).await;
        // Another replica ("there") holds it, and this one has let it go.
        assert!(ops
            .store
            .lease_operation("op", "there", lease)
            .await
            .unwrap());
        ops.live.locked().clear();
        ops.adopt_lapsed().await.unwrap();
        assert_eq!(ops.loaded(), 0, "its lease still holds");
        tokio::time::sleep(lease * 2).await;
        ops.adopt_lapsed().await.unwrap();
        assert_eq!(ops.loaded(), 1, "the lapsed operation is loaded");
        let l = ops.get("op").unwrap();
        let mut live = l.lock().await;
        ops.acquire(&mut live).await.unwrap();
        assert!(
            ops.store
                .lapsed_operations("there")
                .await
                .unwrap()
                .is_empty()
                && !ops
                    .store
                    .lease_operation("op", "there", lease)
                    .await
                    .unwrap(),
            "taken over: this replica holds it now"
        );
    }

    /// Each effect is carried out under a lease that still holds: renewed
    /// when little of it is left, and not used once it has run out (a long
    /// wait on GitHub) or another replica has taken the operation — the
    /// effect then waits in the outbox for the next `acquire`, which takes
    /// the lease again and catches up with the log first.
    #[tokio::test]
    async fn an_effect_is_carried_out_only_under_a_lease_that_still_holds() {
        let lease = Duration::from_secs(1);
        let (ops, l) = one_operation(lease).await;
        let mut live = l.lock().await;
        ops.acquire(&mut live).await.unwrap();
        ops.still_held(&mut live.place).await.unwrap();

        live.place.held_until = Some(Instant::now() + lease / 8);
        ops.still_held(&mut live.place).await.unwrap();
        let renewed = live.place.held_until.expect("held");
        assert!(renewed > Instant::now() + lease / 2, "not renewed");

        live.place.held_until = Some(Instant::now() - Duration::from_millis(1));
        assert!(matches!(
            ops.still_held(&mut live.place).await,
            Err(OpError::Busy(_))
        ));
        assert!(live.place.held_until.is_none());
        ops.acquire(&mut live).await.unwrap();

        // The store's lease runs out and another replica takes it, while
        // this one, by its clock, still thinks it has a little left.
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        assert!(ops
            .store
            .lease_operation("op", "there", lease * 60)
            .await
            .unwrap());
        live.place.held_until = Some(Instant::now() + lease / 8);
        assert!(matches!(
            ops.still_held(&mut live.place).await,
            Err(OpError::Busy(_))
        ));
    }

    /// The executor asks before every effect: under a lease run out it
    /// makes no request and says the operation is busy; under a lease that
    /// holds it goes to GitHub (here nothing listens, so the attempt shows
    /// as a failed request). Without the question in `carry_out` the first
    /// half would fail.
    #[tokio::test]
    async fn the_executor_carries_nothing_out_once_the_lease_has_run_out() {
        let lease = Duration::from_secs(60);
        let (ops, l) = one_operation(lease).await;
        let mut live = l.lock().await;
        ops.acquire(&mut live).await.unwrap();
        let entry = Entry::numbered(
            1,
            &[Effect::Notify {
                kind: NoticeKind::Blocked,
                unit: None,
                text: "said on the issue".into(),
            }],
        )
        .remove(0);
        let mut exec = GitHubExecutor {
            ops: &ops,
            place: &mut live.place,
        };
        exec.place.held_until = Some(Instant::now() - Duration::from_millis(1));
        let out = exec.carry_out(None, &entry).await;
        assert!(matches!(out, Err(OpError::Busy(_))), "{out:?}");

        ops.acquire(&mut live).await.unwrap();
        let mut exec = GitHubExecutor {
            ops: &ops,
            place: &mut live.place,
        };
        let out = exec.carry_out(None, &entry).await;
        assert!(matches!(out, Err(OpError::GitHub(_))), "{out:?}");
    }
}
