//! Formal states, the operation state, and `apply`: the only code that changes
//! state. State is the fold of the event log, so any store can persist it.

use super::events::*;
use super::EngineConfig;
use crate::plan::{Plan, SprintId, UnitGraph};
use crate::sync::LockExt;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// An operation: one run of one plan. Also names its branches and runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationId(pub String);

/// The idempotency key of one dispatch: `<op>/<unit>/<sprint>/a<attempt>d<n>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DispatchId(pub String);

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for DispatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! formal_states {
    ($name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name { $($variant),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),* } }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

formal_states!(UnitStatus {
    NotStarted => "NOT_STARTED",
    Running => "RUNNING",
    Completed => "COMPLETED",
    Stopping => "STOPPING",
    Stopped => "STOPPED",
    Blocked => "BLOCKED",
    Killed => "KILLED",
});

formal_states!(SprintStatus {
    Pending => "PENDING",
    Dispatched => "DISPATCHED",
    Running => "RUNNING",
    Completed => "COMPLETED",
    Partial => "PARTIAL",
    Backoff => "BACKOFF",
    Fatal => "FATAL",
});

formal_states!(OverallStatus {
    Running => "running",
    Stopping => "stopping",
    Stopped => "stopped",
    Killed => "killed",
    Blocked => "blocked",
    Completed => "completed",
});

impl UnitStatus {
    /// The transitions of §1, plus those §10 and §11 spell out for stop and killall.
    pub fn can_become(self, to: UnitStatus) -> bool {
        use UnitStatus::*;
        matches!(
            (self, to),
            (NotStarted, Running)
                | (Running, Completed)
                | (Running, Stopping)
                | (Running, Blocked)
                | (Stopping, Stopped)
                | (Stopped, Running)
                | (Blocked, Running)
                | (Killed, Running)
                // §10 phase 3 and §11: force-terminated units are KILLED.
                | (Running, Killed)
                | (Stopping, Killed)
                // A stopping unit whose last sprint fails for good is still BLOCKED.
                | (Stopping, Blocked)
                // `resume` during the drain takes the unit back.
                | (Stopping, Running)
                // §11 step 3: killed before any progress.
                | (Killed, NotStarted)
        )
    }

    /// Units in these states never get a new dispatch.
    pub fn is_halted(self) -> bool {
        matches!(
            self,
            UnitStatus::Stopping | UnitStatus::Stopped | UnitStatus::Blocked | UnitStatus::Killed
        )
    }
}

impl SprintStatus {
    /// The transitions of §1, plus §3.5's gate failure (COMPLETED → BACKOFF) and
    /// §10/§11's kill handling (in flight → BACKOFF, BACKOFF → PENDING on resume).
    pub fn can_become(self, to: SprintStatus) -> bool {
        use SprintStatus::*;
        matches!(
            (self, to),
            (Pending, Dispatched)
                | (Dispatched, Running)
                | (Running, Completed)
                | (Running, Partial)
                | (Running, Backoff)
                | (Partial, Dispatched)
                | (Backoff, Dispatched)
                | (Backoff, Fatal)
                | (Fatal, Pending)
                | (Completed, Backoff)
                | (Dispatched, Backoff)
                | (Backoff, Pending)
                | (Partial, Completed)
                | (Partial, Backoff)
        )
    }

    pub fn in_flight(self) -> bool {
        matches!(self, SprintStatus::Dispatched | SprintStatus::Running)
    }
}

/// The dispatch a sprint has out right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveDispatch {
    pub id: DispatchId,
    pub attempt: u32,
    pub tier: ModelTier,
    pub model_id: String,
    pub score: i32,
    pub kind: DispatchKind,
    pub dispatched_at: DateTime<Utc>,
    pub last_activity: DateTime<Utc>,
    pub stall_warned: bool,
    pub cancel: Option<CancelReason>,
    /// Not launched yet: a cap above the operation holds it (its clocks wait).
    #[serde(default)]
    pub held: Option<Hold>,
    /// What it costs: spent once it is launched, not while it is held.
    #[serde(default)]
    pub cost: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SprintRun {
    pub id: SprintId,
    pub status: Option<SprintStatus>,
    /// Failed attempts so far: the attempt counter of §1.
    pub failures: u32,
    pub continuations: u32,
    pub dispatches: u32,
    pub active: Option<ActiveDispatch>,
    pub history: Vec<AttemptRecord>,
    pub last_failure: Option<String>,
    /// What a failing command criterion printed in the last attempt or
    /// continuation that ended with one failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_check: Option<FailedCheck>,
    pub remaining: Vec<String>,
    pub awaiting_confirmation: bool,
    pub deferred_waiting: bool,
    pub deferred_polls: u32,
    pub completion: Option<Completion>,
    pub uncommitted: Vec<String>,
    /// Runs in a row the model provider ended (not counted as attempts).
    #[serde(default)]
    pub provider_retries: u32,
    /// Not dispatched again before this (waiting out the provider).
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// Fix rounds started for reviewers (see [`Event::ReviewRound`]).
    #[serde(default)]
    pub review_rounds: u32,
    /// What the last fix round answers: its prompt quotes it, and the reply
    /// on the review says what became of each comment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review: Vec<ReviewFeedback>,
    /// Reviews that arrived while a fix round ran, for the next one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review_queue: Vec<ReviewFeedback>,
    /// Every review told to the operation, by id: told again, it is not
    /// acted on again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviews_seen: Vec<String>,
    /// How much of `history` came before the last resume after FATAL: what
    /// is counted against the sprint (its conflict rounds) starts after it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rounds_before_reset: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SprintRun {
    pub fn awaiting_merge(&self) -> bool {
        self.completion.as_ref().is_some_and(|c| c.awaiting_merge)
    }

    pub fn status(&self) -> SprintStatus {
        self.status.unwrap_or(SprintStatus::Pending)
    }

    /// The attempt the next (or current) dispatch is: failures so far plus one.
    pub fn attempt(&self) -> u32 {
        self.failures + 1
    }

    /// The model tier of the attempt in flight, else of the last one.
    pub fn tier(&self) -> Option<ModelTier> {
        self.active
            .as_ref()
            .map(|a| a.tier)
            .or(self.history.last().map(|h| h.tier))
    }

    /// The complexity score of the attempt in flight, else of the last one.
    pub fn score(&self) -> Option<i32> {
        self.active
            .as_ref()
            .map(|a| a.score)
            .or(self.history.last().map(|h| h.score))
    }

    /// The attempt to show people: the one in flight, else the next one, never
    /// more than `max` (a FATAL sprint used all of them).
    pub fn shown_attempt(&self, max: u32) -> u32 {
        self.active
            .as_ref()
            .map_or(self.attempt().min(max), |a| a.attempt)
    }

    pub fn first_dispatched_at(&self) -> Option<DateTime<Utc>> {
        self.history
            .first()
            .map(|h| h.dispatched_at)
            .or(self.active.as_ref().map(|a| a.dispatched_at))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRun {
    pub name: String,
    /// The unit's name in branch names and dispatch ids: unique within the
    /// operation and derived from the recorded plan, so stable across resume.
    pub slug: String,
    pub status: UnitStatus,
    pub sprints: Vec<SprintRun>,
    pub notes: Vec<String>,
}

impl UnitRun {
    /// A unit of the plan before anything has happened to it.
    fn not_started(unit: &crate::plan::WorkUnit, slug: String) -> UnitRun {
        UnitRun {
            name: unit.name.clone(),
            slug,
            status: UnitStatus::NotStarted,
            sprints: unit
                .sprints
                .iter()
                .map(|s| SprintRun {
                    id: s.id.clone(),
                    ..Default::default()
                })
                .collect(),
            notes: Vec::new(),
        }
    }
}

/// A slug for a unit added later that no unit of the operation has yet
/// (branch names and dispatch ids must stay unique).
fn unique_slug(name: &str, taken: &[String]) -> String {
    let base = crate::text::slug(name);
    let mut slug = base.clone();
    let mut n = 2;
    while taken.contains(&slug) {
        slug = format!("{base}-{n}");
        n += 1;
    }
    slug
}

impl UnitRun {
    /// The first sprint not yet COMPLETED: sprints run strictly in order.
    pub fn current(&self) -> Option<usize> {
        self.sprints
            .iter()
            .position(|s| s.status() != SprintStatus::Completed)
    }

    /// Every sprint COMPLETED and merged: what a unit needs to complete.
    pub fn all_sprints_done(&self) -> bool {
        self.current().is_none() && self.awaiting_merge().is_none()
    }

    /// The first COMPLETED sprint whose merge is not yet confirmed. While there
    /// is one, the unit dispatches nothing: its next sprint branches from the
    /// integration branch, which must hold the work before it.
    pub fn awaiting_merge(&self) -> Option<usize> {
        self.sprints.iter().position(SprintRun::awaiting_merge)
    }

    pub fn active(&self) -> Option<&ActiveDispatch> {
        self.sprints.iter().find_map(|s| s.active.as_ref())
    }

    pub fn completed_count(&self) -> usize {
        self.sprints
            .iter()
            .filter(|s| s.status() == SprintStatus::Completed)
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub id: u32,
    pub layer: u32,
    pub units: Vec<String>,
    pub passed: Option<bool>,
    /// Set when this gate re-runs a failed one whose output named no unit.
    #[serde(default)]
    pub retry_of: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionEntry {
    pub at: DateTime<Utc>,
    pub unit: Option<String>,
    pub sprint: Option<SprintId>,
    pub decision: String,
    pub rationale: String,
}

/// Everything the engine knows about one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationState {
    pub id: OperationId,
    pub name: String,
    pub renames: u32,
    pub seed: u64,
    /// Shared, not owned: a decision copies the state when a watcher holds
    /// it (the web view, a status being published), and the plan, most of
    /// its bytes, never changes but when work is added.
    pub plan: Arc<Plan>,
    pub config: EngineConfig,
    /// The rule that adds work as the operation goes (work without a written plan).
    pub workflow: Option<super::workflow::Workflow>,
    pub status: OverallStatus,
    pub status_reason: String,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub units: Vec<UnitRun>,
    pub decisions: Vec<DecisionEntry>,
    /// What launched dispatches cost.
    pub cost_spent: u64,
    /// What dispatches decided but held by a cap above the operation would
    /// cost: not spent (nothing runs), but promised, so the operation's own
    /// budget counts it.
    #[serde(default)]
    pub cost_held: u64,
    pub gates: Vec<Gate>,
    pub stop_ticks: u32,
    /// When the last `killall` was told: its summary counts the agents it
    /// terminated, not every attempt an earlier kill or stop ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed_at: Option<DateTime<Utc>>,
    /// The final head's re-verification, once the last unit completed and
    /// the place ran it (a place that cannot run criteria leaves it unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_verification: Option<super::HeadVerification>,
    /// Events applied so far (a replay check and a cheap change counter).
    pub version: u64,
    /// What is read from the plan and kept between decisions.
    #[serde(skip)]
    derived: Derived,
}

/// Facts derived from the plan, kept between decisions, taking no part in a
/// state's equality or its serialized form: a replayed or deserialized state
/// derives them again. Dropped when work is added.
#[derive(Default)]
struct Derived {
    /// The dependency edges by index: rebuilding them from the names at
    /// each dispatch and each decision was three quarters of driving an
    /// operation over 400 units.
    graph: std::sync::OnceLock<Arc<UnitGraph>>,
    /// The last remaining paths: they change only when a sprint completes,
    /// and finding them walks every edge (1 ms a decision at 1,000 units in
    /// four layers).
    paths: std::sync::Mutex<Option<KeptPaths>>,
}

/// Remaining paths, with the sprints left per unit they were found from.
#[derive(Clone)]
struct KeptPaths {
    from: Vec<usize>,
    paths: Arc<Vec<usize>>,
}

impl Clone for Derived {
    fn clone(&self) -> Derived {
        Derived {
            graph: self.graph.clone(),
            paths: std::sync::Mutex::new(self.paths.locked().clone()),
        }
    }
}

impl PartialEq for Derived {
    fn eq(&self, _: &Derived) -> bool {
        true
    }
}

impl Eq for Derived {}

impl fmt::Debug for Derived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Derived")
    }
}

impl OperationState {
    pub fn unit_index(&self, name: &str) -> Option<usize> {
        self.units.iter().position(|u| u.name == name)
    }

    /// The units' dependency edges by index (built on first use after the
    /// operation starts or work is added).
    pub fn graph(&self) -> &UnitGraph {
        let graph = self
            .derived
            .graph
            .get_or_init(|| Arc::new(self.plan.graph()));
        debug_assert_eq!(graph.deps.len(), self.plan.work_units.len());
        graph
    }

    /// For each unit: its sprints not yet completed plus the longest chain
    /// of sprints in units that wait (directly or not) on it.
    pub fn remaining_paths(&self) -> Arc<Vec<usize>> {
        let own: Vec<usize> = self
            .units
            .iter()
            .map(|u| u.sprints.len() - u.completed_count())
            .collect();
        let mut kept = self.derived.paths.locked();
        if let Some(k) = kept.as_ref().filter(|k| k.from == own) {
            return k.paths.clone();
        }
        // From the units nothing waits on down: the plan's topological
        // order backwards (a loop; see `UnitGraph::topological_order`).
        let graph = self.graph();
        let mut found = vec![0; own.len()];
        for u in graph.topological_order().into_iter().rev() {
            let tail = graph.dependents[u]
                .iter()
                .map(|&v| found[v])
                .max()
                .unwrap_or(0);
            found[u] = own[u] + tail;
        }
        let paths = Arc::new(found);
        *kept = Some(KeptPaths {
            from: own,
            paths: paths.clone(),
        });
        paths
    }

    /// §7: the NOT_STARTED units whose every dependency is COMPLETED, which
    /// may start, in plan order. Dependencies are followed by index: looking
    /// each one up by name among all the units, for every unit, made each
    /// decision quadratic in the plan's size (an operation on 400 units in
    /// four layers took 21 s, most of it here).
    pub fn ready_to_start(&self) -> Vec<usize> {
        let deps = &self.graph().deps;
        (0..self.units.len())
            .filter(|&u| {
                self.units[u].status == UnitStatus::NotStarted
                    && deps[u]
                        .iter()
                        .all(|&d| self.units[d].status == UnitStatus::Completed)
            })
            .collect()
    }

    /// Attempts the unit's sprints get before FATAL: the workflow's number
    /// for its own units, the operation's otherwise.
    pub fn max_attempts(&self, u: usize) -> u32 {
        self.workflow
            .as_ref()
            .and_then(|w| w.max_attempts(&self.units[u].name))
            .unwrap_or(self.config.max_retries)
    }

    /// The unit's slug for branches and dispatch ids (see [`UnitRun::slug`]).
    pub fn unit_slug(&self, name: &str) -> String {
        self.units
            .iter()
            .find(|u| u.name == name)
            .map_or_else(|| crate::text::slug(name), |u| u.slug.clone())
    }

    /// Dispatches out, launched or held: each takes a place under `max_parallel`.
    pub fn active_count(&self) -> usize {
        self.units
            .iter()
            .map(|u| u.sprints.iter().filter(|s| s.active.is_some()).count())
            .sum()
    }

    /// Agents launched and not finished: what people call active agents (a
    /// held dispatch runs nothing yet).
    pub fn launched_count(&self) -> usize {
        self.units
            .iter()
            .flat_map(|u| u.sprints.iter())
            .filter(|s| s.active.as_ref().is_some_and(|a| a.held.is_none()))
            .count()
    }

    /// What the operation has spent and promised: its budget counts both.
    pub fn cost_committed(&self) -> u64 {
        self.cost_spent + self.cost_held
    }

    pub fn find_dispatch(&self, id: &DispatchId) -> Option<(usize, usize)> {
        self.units.iter().enumerate().find_map(|(u, unit)| {
            unit.sprints
                .iter()
                .position(|s| s.active.as_ref().is_some_and(|a| &a.id == id))
                .map(|s| (u, s))
        })
    }

    /// BLOCKED units a person is asked about: not those whose failure the
    /// workflow answered (a research agent within the threshold, a test run
    /// followed by debugging).
    /// How many criteria fail on the final head as it was last verified:
    /// the operation's verdict is failed while this is above zero, until
    /// the head changes and is verified again.
    pub fn head_failures(&self) -> usize {
        self.head_verification
            .as_ref()
            .map_or(0, |h| h.failures().count())
    }

    pub fn blocked_units(&self) -> impl Iterator<Item = &UnitRun> {
        self.units
            .iter()
            .filter(|u| u.status == UnitStatus::Blocked && !self.superseded(&u.name))
    }

    /// Every machine-checkable exit criterion of every completed sprint,
    /// with its unit's name and the sprint's id: what a verification of the
    /// final head runs again, wherever it runs.
    pub fn completed_criteria(&self) -> Vec<(&str, &SprintId, &crate::plan::Criterion)> {
        let mut out = Vec::new();
        for (i, u) in self.units.iter().enumerate() {
            for (j, s) in u.sprints.iter().enumerate() {
                if s.completion.is_none() {
                    continue;
                }
                let sprint = &self.plan.work_units[i].sprints[j];
                out.extend(
                    sprint
                        .exit_criteria
                        .iter()
                        .filter(|c| c.is_machine_checkable())
                        .map(|c| (u.name.as_str(), &s.id, c)),
                );
            }
        }
        out
    }

    /// "All N sprints executed across M work units." — counting what ran:
    /// units a workflow went on without (a research agent under its
    /// threshold, a failing test run handed to debugging) are named apart.
    pub fn executed_line(&self) -> String {
        let (kept, aside): (Vec<usize>, Vec<usize>) =
            (0..self.units.len()).partition(|&u| !self.superseded(&self.units[u].name));
        let sprints: usize = kept
            .iter()
            .map(|&u| self.plan.work_units[u].sprints.len())
            .sum();
        let mut line = format!(
            "All {} executed across {}.",
            crate::text::count(sprints, "sprint"),
            crate::text::count(kept.len(), "work unit")
        );
        if !aside.is_empty() {
            let names: Vec<&str> = aside.iter().map(|&u| self.units[u].name.as_str()).collect();
            line.push_str(&format!(
                " The workflow went on without {} ({}).",
                names.len(),
                names.join(", ")
            ));
        }
        line
    }

    /// A BLOCKED unit the workflow went on without.
    pub fn superseded(&self, unit: &str) -> bool {
        self.workflow
            .as_ref()
            .is_some_and(|w| w.absorbs_failure(unit))
            && self
                .units
                .iter()
                .any(|u| u.name == unit && u.status == UnitStatus::Blocked)
    }

    /// The state after `events`, from nothing. Replaying a log gives the same state.
    pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>) -> Option<OperationState> {
        let mut state: Option<OperationState> = None;
        for e in events {
            apply(&mut state, e);
        }
        state
    }

    /// Closed attempts that were paid for.
    fn charged_attempts(&self) -> impl Iterator<Item = &AttemptRecord> + '_ {
        self.units
            .iter()
            .flat_map(|u| &u.sprints)
            .flat_map(|s| &s.history)
            .filter(|h| h.charged)
    }

    /// What a closed attempt cost in dollars: the figure its CLI gave, else
    /// its tokens at the model's price (`None`: not paid for, or nothing to
    /// price it by).
    pub fn attempt_dollars(&self, h: &AttemptRecord) -> Option<super::usage::Usd> {
        if !h.charged {
            return None;
        }
        h.usage?.dollars(self.config.price(h.tier))
    }

    /// Every closed, paid attempt with a dollar figure: (unit, sprint, tier,
    /// when it was dispatched, dollars). Every dollar sum anywhere is a sum
    /// over this.
    pub fn priced_attempts(
        &self,
    ) -> impl Iterator<Item = (&str, &SprintId, ModelTier, DateTime<Utc>, super::usage::Usd)> + '_
    {
        self.units.iter().flat_map(move |u| {
            u.sprints.iter().flat_map(move |s| {
                s.history.iter().filter_map(move |h| {
                    let usd = self.attempt_dollars(h)?;
                    Some((u.name.as_str(), &s.id, h.tier, h.dispatched_at, usd))
                })
            })
        })
    }

    /// The dollars the operation's closed attempts cost.
    pub fn dollars_spent(&self) -> super::usage::Usd {
        self.priced_attempts().map(|a| a.4).sum()
    }

    /// What the next attempt on `tier` is expected to cost: the mean of
    /// this operation's priced attempts there, else the figure the
    /// operation started with.
    pub fn expected_dollars(&self, tier: ModelTier) -> super::usage::Usd {
        self.expected_dollars_by_tier()[tier as usize]
    }

    /// [`Self::expected_dollars`] of every tier, in one pass over the
    /// attempts (the budget asks for several at each dispatch).
    fn expected_dollars_by_tier(&self) -> [super::usage::Usd; 3] {
        let mut seen = [(0u64, super::usage::Usd::ZERO); 3];
        for (_, _, tier, _, usd) in self.priced_attempts() {
            let (n, sum) = &mut seen[tier as usize];
            *n += 1;
            *sum = *sum + usd;
        }
        std::array::from_fn(|t| match seen[t] {
            (0, _) => self.config.attempt_usd(ModelTier::ALL[t]),
            (n, sum) => sum.split(n),
        })
    }

    /// What the dollar budget counts besides what was spent: a paid attempt
    /// that reported nothing at what it was expected to cost, and every
    /// attempt in flight or held at what it is expected to cost.
    pub fn dollars_foreseen(&self) -> super::usage::Usd {
        let expected = self.expected_dollars_by_tier();
        let unpriced = self
            .charged_attempts()
            .filter(|h| self.attempt_dollars(h).is_none())
            .map(|h| h.tier);
        let in_flight = self
            .units
            .iter()
            .flat_map(|u| &u.sprints)
            .filter_map(|s| s.active.as_ref())
            .map(|a| a.tier);
        unpriced
            .chain(in_flight)
            .map(|t| expected[t as usize])
            .sum()
    }

    /// What the agents' CLIs reported the closed, charged attempts used.
    pub fn reported_usage(&self) -> super::usage::Reported {
        let usages: Vec<Option<super::usage::Usage>> =
            self.charged_attempts().map(|h| h.usage).collect();
        super::usage::Reported::over(&usages)
    }

    /// Every paid dispatch as (when, tier): closed attempts that were
    /// charged, and the ones in flight that launched. What every report of
    /// spend counts, so their sums agree with `cost_spent`.
    pub fn charged_dispatches(&self) -> impl Iterator<Item = (DateTime<Utc>, ModelTier)> + '_ {
        let in_flight = self
            .units
            .iter()
            .flat_map(|u| &u.sprints)
            .filter_map(|s| s.active.as_ref().filter(|a| a.held.is_none()));
        self.charged_attempts()
            .map(|h| (h.dispatched_at, h.tier))
            .chain(in_flight.map(|a| (a.dispatched_at, a.tier)))
    }

    /// Closed, paid attempts at one tier, and what they cost.
    pub fn charged_at(&self, tier: ModelTier) -> (usize, u64) {
        let n = self.charged_attempts().filter(|h| h.tier == tier).count();
        (n, n as u64 * self.config.cost(tier))
    }

    /// Model tiers used by completed sprints (for the usage summary of §13).
    pub fn model_usage(&self) -> BTreeMap<ModelTier, usize> {
        let mut m = BTreeMap::new();
        for u in &self.units {
            for s in &u.sprints {
                // Sprints found done at start used no model.
                if let Some(c) = s.completion.as_ref().filter(|c| c.already_done.is_none()) {
                    *m.entry(c.tier).or_default() += 1;
                }
            }
        }
        m
    }
}

/// Applies one event. Deterministic and total: an event that names something
/// unknown (which the engine never emits) is ignored rather than panicking.
pub fn apply(state: &mut Option<OperationState>, event: &Event) {
    if let Some(started) = started(event) {
        *state = Some(started);
    } else if let Some(st) = state.as_mut() {
        apply_to(st, event);
    }
}

/// The state an `OperationStarted` event begins; `None` for any other event.
pub fn started(event: &Event) -> Option<OperationState> {
    let Event::OperationStarted {
        operation,
        name,
        seed,
        plan,
        config,
        workflow,
        at,
    } = event
    else {
        return None;
    };
    Some(OperationState {
        id: operation.clone(),
        name: name.clone(),
        renames: 0,
        seed: *seed,
        units: plan
            .work_units
            .iter()
            .zip(crate::text::unit_slugs(
                &plan
                    .work_units
                    .iter()
                    .map(|u| u.name.as_str())
                    .collect::<Vec<_>>(),
            ))
            .map(|(u, slug)| UnitRun::not_started(u, slug))
            .collect(),
        plan: Arc::new((**plan).clone()),
        derived: Derived::default(),
        config: config.clone(),
        workflow: workflow.as_deref().cloned(),
        status: OverallStatus::Running,
        status_reason: String::new(),
        started_at: *at,
        updated_at: *at,
        finished_at: None,
        decisions: Vec::new(),
        cost_spent: 0,
        cost_held: 0,
        gates: Vec::new(),
        stop_ticks: 0,
        killed_at: None,
        head_verification: None,
        version: 1,
    })
}

/// Applies one event to a started operation's state (an `OperationStarted`
/// changes nothing here: see [`started`]).
pub fn apply_to(st: &mut OperationState, event: &Event) {
    st.version += 1;
    st.updated_at = event.at().max(st.updated_at);
    match event {
        Event::OperationStarted { .. } => {}
        Event::Renamed { name, .. } => {
            st.name = name.clone();
            st.renames += 1;
        }
        Event::Overall { to, reason, at } => {
            st.status = *to;
            st.status_reason = reason.clone();
            st.stop_ticks = 0;
            if matches!(to, OverallStatus::Completed) {
                st.finished_at = Some(*at);
            }
            if matches!(to, OverallStatus::Killed) {
                st.killed_at = Some(*at);
            }
        }
        Event::Unit { unit, to, .. } => {
            if let Some(u) = st.units.get_mut(*unit) {
                u.status = *to;
            }
        }
        Event::Sprint {
            unit, sprint, to, ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.status = Some(*to);
                if *to == SprintStatus::Pending || *to == SprintStatus::Dispatched {
                    s.awaiting_confirmation = false;
                    s.deferred_waiting = false;
                }
            }
        }
        Event::Dispatched {
            unit,
            sprint,
            dispatch,
            attempt,
            tier,
            model_id,
            score,
            cost,
            kind,
            at,
        } => {
            st.cost_spent += cost;
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.status = Some(SprintStatus::Dispatched);
                s.dispatches += 1;
                s.deferred_polls = 0;
                s.active = Some(ActiveDispatch {
                    id: dispatch.clone(),
                    attempt: *attempt,
                    tier: *tier,
                    model_id: model_id.clone(),
                    score: *score,
                    kind: *kind,
                    dispatched_at: *at,
                    last_activity: *at,
                    stall_warned: false,
                    cancel: None,
                    held: None,
                    cost: *cost,
                });
            }
        }
        Event::Activity { unit, sprint, at } => {
            if let Some(a) = sprint_mut(st, *unit, *sprint).and_then(|s| s.active.as_mut()) {
                a.last_activity = *at;
                a.stall_warned = false;
            }
        }
        Event::DispatchHeld {
            unit, sprint, hold, ..
        } => {
            let mut moved = 0;
            if let Some(a) = sprint_mut(st, *unit, *sprint).and_then(|s| s.active.as_mut()) {
                if a.held.is_none() {
                    moved = a.cost;
                }
                a.held = Some(hold.clone());
            }
            st.cost_spent = st.cost_spent.saturating_sub(moved);
            st.cost_held += moved;
        }
        Event::DispatchReleased { unit, sprint, at } => {
            let mut moved = 0;
            if let Some(a) = sprint_mut(st, *unit, *sprint).and_then(|s| s.active.as_mut()) {
                if a.held.is_some() {
                    moved = a.cost;
                }
                a.held = None;
                a.dispatched_at = *at;
                a.last_activity = *at;
                a.stall_warned = false;
            }
            st.cost_held = st.cost_held.saturating_sub(moved);
            st.cost_spent += moved;
        }
        Event::StallWarned { unit, sprint, .. } => {
            if let Some(a) = sprint_mut(st, *unit, *sprint).and_then(|s| s.active.as_mut()) {
                a.stall_warned = true;
            }
        }
        Event::CancelRequested {
            unit,
            sprint,
            reason,
            ..
        } => {
            if let Some(a) = sprint_mut(st, *unit, *sprint).and_then(|s| s.active.as_mut()) {
                a.cancel = Some(*reason);
            }
        }
        Event::AttemptClosed {
            unit,
            sprint,
            record,
        } => {
            let (mut held_back, mut refunded) = (0, 0);
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                // Closed while held (cancelled before launch): never spent.
                // An agent command that could not run spent nothing either.
                if let Some(a) = s.active.as_ref().filter(|_| !record.charged) {
                    if a.held.is_some() {
                        held_back = a.cost;
                    } else {
                        refunded = a.cost;
                    }
                }
                s.active = None;
                if record.outcome != crate::engine::provider::OUTCOME {
                    s.provider_retries = 0;
                    s.not_before = None;
                }
                s.history.push(record.clone());
                if !record.uncommitted.is_empty() {
                    s.uncommitted = record.uncommitted.clone();
                }
            }
            st.cost_held = st.cost_held.saturating_sub(held_back);
            st.cost_spent = st.cost_spent.saturating_sub(refunded);
            st.stop_ticks = 0;
        }
        Event::FailureCounted {
            unit,
            sprint,
            reason,
            check,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.failures += 1;
                s.last_failure = Some(reason.clone());
                s.failed_check = check.clone();
                // Continuations are counted within an attempt: the next
                // attempt starts with all of them.
                s.continuations = 0;
            }
        }
        Event::FailuresReset { unit, sprint, .. } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.failures = 0;
                s.continuations = 0;
                s.rounds_before_reset = s.history.len();
            }
        }
        Event::ProviderWait {
            unit,
            sprint,
            until,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.provider_retries += 1;
                s.not_before = Some(*until);
                s.status = Some(SprintStatus::Backoff);
            }
        }
        Event::ContinuationCounted {
            unit,
            sprint,
            remaining,
            check,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.continuations += 1;
                s.remaining = remaining.clone();
                s.failed_check = check.clone();
            }
        }
        Event::SprintCompleted {
            unit,
            sprint,
            completion,
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.status = Some(SprintStatus::Completed);
                s.completion = Some(completion.clone());
                s.awaiting_confirmation = false;
                s.deferred_waiting = false;
                s.remaining.clear();
            }
        }
        Event::AwaitingConfirmation { unit, sprint, .. } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.awaiting_confirmation = true;
            }
        }
        Event::DeferredWaiting {
            unit,
            sprint,
            polls,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.deferred_waiting = true;
                s.deferred_polls = *polls;
            }
        }
        Event::Decision { entry } => st.decisions.push(entry.clone()),
        Event::UnitNote { unit, note, .. } => {
            if let Some(u) = st.units.get_mut(*unit) {
                u.notes.push(note.clone());
            }
        }
        Event::GateOpened {
            id,
            layer,
            units,
            retry_of,
            ..
        } => st.gates.push(Gate {
            id: *id,
            layer: *layer,
            units: units.clone(),
            passed: None,
            retry_of: *retry_of,
        }),
        Event::GateClosed { id, passed, .. } => {
            if let Some(g) = st.gates.iter_mut().find(|g| g.id == *id) {
                g.passed = Some(*passed);
            }
        }
        Event::WorkAdded { units, .. } => {
            let mut taken: Vec<String> = st.units.iter().map(|u| u.slug.clone()).collect();
            for u in units {
                let slug = unique_slug(&u.name, &taken);
                taken.push(slug.clone());
                st.units.push(UnitRun::not_started(u, slug));
                Arc::make_mut(&mut st.plan).work_units.push(u.clone());
            }
            st.derived = Derived::default();
            st.head_verification = None;
            if st.status == OverallStatus::Completed {
                st.status = OverallStatus::Running;
                st.finished_at = None;
            }
        }
        Event::Reopened { unit, sprint, .. } => {
            // The head it verified is no longer the final one.
            st.head_verification = None;
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.status = Some(SprintStatus::Pending);
                s.completion = None;
                s.remaining.clear();
            }
            if let Some(u) = st.units.get_mut(*unit) {
                if u.status == UnitStatus::Completed {
                    u.status = UnitStatus::Running;
                }
            }
            if st.status == OverallStatus::Completed {
                st.status = OverallStatus::Running;
            }
        }
        Event::StopTicked { ticks, .. } => st.stop_ticks = *ticks,
        Event::BudgetSet {
            budget, budget_usd, ..
        } => {
            st.config.budget = *budget;
            st.config.budget_usd = *budget_usd;
        }
        Event::HeadVerified { verification, .. } => {
            st.head_verification = Some(verification.clone())
        }
        Event::Merged { unit, sprint, .. } => {
            if let Some(c) = sprint_mut(st, *unit, *sprint).and_then(|s| s.completion.as_mut()) {
                c.awaiting_merge = false;
            }
        }
        Event::ReviewRound {
            unit,
            sprint,
            reviews,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.review_rounds += 1;
                for r in reviews {
                    if !s.reviews_seen.contains(&r.id) {
                        s.reviews_seen.push(r.id.clone());
                    }
                }
                s.review_queue
                    .retain(|q| !reviews.iter().any(|r| r.id == q.id));
                s.review = reviews.clone();
                s.status = Some(SprintStatus::Partial);
                s.completion = None;
                s.remaining = vec![review_task(reviews)];
            }
        }
        Event::ReviewQueued {
            unit,
            sprint,
            review,
            ..
        } => {
            if let Some(s) = sprint_mut(st, *unit, *sprint) {
                s.reviews_seen.push(review.id.clone());
                s.review_queue.push(review.clone());
            }
        }
    }
}

/// A fix round's one remaining task, for the prompt's list and the status
/// table: who asked, how much; the review itself is quoted after it.
fn review_task(reviews: &[ReviewFeedback]) -> String {
    let mut names: Vec<&str> = reviews.iter().map(|r| r.reviewer.as_str()).collect();
    names.dedup();
    let comments: usize = reviews.iter().map(|r| r.comments.len()).sum();
    format!(
        "make the changes {} asked for in review ({}, quoted below), keeping every exit criterion passing",
        names.join(", "),
        crate::text::count(comments, "inline comment")
    )
}

fn sprint_mut(st: &mut OperationState, u: usize, s: usize) -> Option<&mut SprintRun> {
    st.units.get_mut(u).and_then(|unit| unit.sprints.get_mut(s))
}
